"""testbed.cluster (pure): the servers file, placement and the VXLAN tunnel plan."""
from __future__ import annotations

import ipaddress

import pytest

from testbed.model.cluster import PlacementError
from testbed.cluster.placement import place
from testbed.model.cluster import Cluster, Server
from testbed.cluster.servers import load_servers
from testbed.fabric.vxlan import inner_mtu, mtu_problems, tunnel_ends
from testbed.model.generators import fat_tree, leaf_spine
from testbed.model.topology import LinkParams, Role
from testbed.spec.yamlread import SpecError

GOOD = """\
servers:
  - name: s1
    address: 192.0.2.10
    underlay: fd00:1::10
  - name: s2
    address: server-2.example
    user: mrc-user
    port: 2222
    key: id_test
    underlay: fd00:1::11
underlay:
  mtu: 9100
  port: 4790
  vni_base: 5000
"""


def write(tmp_path, text, name="servers.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_servers_file_loads(tmp_path):
    (tmp_path / "id_test").write_text("not really a key\n")
    c = load_servers(write(tmp_path, GOOD))
    assert c.names == ["s1", "s2"] and (c.underlay_mtu, c.vxlan_port, c.vni_base) == (9100, 4790, 5000)
    s2 = c.server("s2")
    assert (s2.address, s2.user, s2.port, s2.key) == ("server-2.example", "mrc-user", 2222,
                                                      str(tmp_path / "id_test"))
    assert c.server("s1").user == "root" and c.server("s1").port == 22 and c.server("s1").key is None
    assert s2.underlay == ipaddress.ip_address("fd00:1::11")


@pytest.mark.parametrize("text, line, key, words", [
    (GOOD.replace("key: id_test", "key: missing_key"), 9, "servers[1].key", "does not exist"),
    (GOOD.replace("underlay: fd00:1::11", "underlay: fd00:1::10"), 5, "servers[1].underlay", "also s1's"),
    (GOOD.replace("name: s2", "name: s1"), 5, "servers[1].name", "duplicate server name"),
    (GOOD.replace("underlay: fd00:1::11", "underlay: 192.0.2.11"), 2, "servers", "mix IPv4 and IPv6"),
    (GOOD.replace("underlay: fd00:1::11", "underlay: ff02::1"), 10, "servers[1].underlay", "multicast"),
    (GOOD.replace("underlay: fd00:1::11", "underlay: not-an-ip"), 10, "servers[1].underlay", "not an IPv4"),
    (GOOD.replace("mtu: 9100", "mtu: 900"), 12, "underlay.mtu", ">= 1280"),
    (GOOD.replace("port: 2222", "prot: 2222"), 8, "servers[1].prot", "unknown key"),
    (GOOD.replace("user: mrc-user", "user: 'bad user'"), 7, "servers[1].user", "not a user name"),
    (GOOD.replace("address: 192.0.2.10", "address: -oProxyCommand=x"), 3, "servers[0].address", "not a host"),
    ("servers: []\n", 1, "servers", "expected 1..64"),
    ("- 1\n", 1, "", "expected a mapping"),
])
def test_servers_file_problems_name_line_and_key(tmp_path, text, line, key, words):
    (tmp_path / "id_test").write_text("k\n")
    with pytest.raises(SpecError) as err:
        load_servers(write(tmp_path, text))
    problems = err.value.problems
    assert any(p.line == line and p.key_path == key and words in p.message for p in problems), \
        [str(p) for p in problems]


def k4(mtu=1500):
    lp = LinkParams(5_000_000, 32, mtu=mtu)
    return fat_tree(4, host_link=lp, fabric_link=lp)


def test_pods_placement_on_fat_tree_k4_cuts_only_aggregation_core_links():
    topo = k4()
    pl = place(topo, ["s1", "s2"])
    s = pl.summary(topo)
    assert s["cut_links"] == 8 and s["links"] == 48
    assert {v["hosts"] for v in s["per_server"].values()} == {8}
    assert {v["nodes"] for v in s["per_server"].values()} == {18}
    for link in pl.cut:
        roles = {topo.nodes[link.a.node].role, topo.nodes[link.b.node].role}
        assert roles == {Role.AGGREGATION, Role.CORE}
    for pod in range(4):   # a pod stays whole
        assert len({pl.where[n.name] for n in topo.nodes.values() if n.pod == pod}) == 1


def test_pods_placement_on_one_server_cuts_nothing_and_round_robin_cuts_a_lot():
    topo = k4()
    assert place(topo, ["only"]).cut == ()
    assert len(place(topo, ["s1", "s2"], "round-robin").cut) > 8


def test_pods_placement_on_a_multi_plane_leaf_spine_keeps_leaf_groups_whole():
    lp = LinkParams(5_000_000, 32)
    topo = leaf_spine(leaves=4, spines=2, hosts_per_leaf=2, planes=2, host_link=lp, fabric_link=lp)
    pl = place(topo, ["a", "b"])
    for link in pl.cut:   # only leaf-spine links cross servers, never a host's
        assert {topo.nodes[link.a.node].role, topo.nodes[link.b.node].role} == {Role.LEAF, Role.SPINE}
    assert sorted(v["hosts"] for v in pl.summary(topo)["per_server"].values()) == [4, 4]


def test_placement_errors():
    topo = k4()
    with pytest.raises(PlacementError, match="unknown placer"):
        place(topo, ["s1"], "metis")
    with pytest.raises(PlacementError, match="no servers"):
        place(topo, [])
    with pytest.raises(PlacementError, match="gave no node"):
        place(topo, [f"s{i}" for i in range(6)])   # 4 pods; cores follow their neighbours: 2 idle


def cluster(mtu=1500, v6=True):
    addr = (lambda i: ipaddress.ip_address(f"fd00:1::{i}")) if v6 else (lambda i: ipaddress.ip_address(f"192.0.2.{i}"))
    return Cluster((Server("s1", "h1", addr(1)), Server("s2", "h2", addr(2))), underlay_mtu=mtu)


def test_inner_mtu_and_mtu_problems():
    assert inner_mtu(1500, 6) == 1430 and inner_mtu(1500, 4) == 1450 and inner_mtu(9100, 6) == 9030
    topo = k4(mtu=9000)
    pl = place(topo, ["s1", "s2"])
    problems = mtu_problems(topo, pl, cluster(1500))
    assert len(problems) == 1 and "class fabric: mtu 9000 exceeds the VXLAN inner MTU 1430" in problems[0]
    assert "on 8 link(s) between servers" in problems[0] and "raise underlay.mtu to 9070" in problems[0]
    assert mtu_problems(topo, pl, cluster(9100)) == []
    assert mtu_problems(k4(1430), place(k4(1430), ["s1", "s2"]), cluster(1500)) == []
    assert len(mtu_problems(k4(1450), place(k4(1450), ["s1", "s2"]), cluster(1500, v6=True))) == 1
    assert mtu_problems(k4(1450), place(k4(1450), ["s1", "s2"]), cluster(1500, v6=False)) == []


def test_tunnel_ends_pair_up_across_servers():
    topo = k4(1400)
    pl = place(topo, ["s1", "s2"])
    c = cluster()
    ends = {s: tunnel_ends(topo, pl, c, s) for s in ("s1", "s2")}
    assert len(ends["s1"]) == len(ends["s2"]) == 8
    by_link = {}
    for s, es in ends.items():
        for e in es:
            by_link.setdefault(e.link, []).append((s, e))
    for link in pl.cut:
        (s_a, a), (s_b, b) = sorted(by_link[link.name])
        assert s_a != s_b and a.vni == b.vni == 1000 + link.index
        assert (a.local, a.remote) == (b.remote, b.local)
        assert {a.ifname, b.ifname} == {link.a.ifname, link.b.ifname} and a.mac != b.mac
    assert len({e.vni for e in ends["s1"]}) == 8
    info = dict(ends["s1"][0].info_data())
    assert info["IFLA_VXLAN_LEARNING"] == 0 and info["IFLA_VXLAN_PORT"] == 4789
    assert "IFLA_VXLAN_LOCAL6" in info and "IFLA_VXLAN_GROUP6" in info


def test_servers_file_repo_and_python_paths(tmp_path):
    text = GOOD.replace("key: id_test\n", "key: id_test\n    repo: /opt/mrc-testbed\n    python: /opt/venv/bin/python\n")
    (tmp_path / "id_test").write_text("k\n")
    c = load_servers(write(tmp_path, text))
    assert (c.server("s2").repo, c.server("s2").python) == ("/opt/mrc-testbed", "/opt/venv/bin/python")
    assert c.server("s1").repo is None
    with pytest.raises(SpecError, match="absolute path without spaces or shell characters"):
        load_servers(write(tmp_path, text.replace("/opt/mrc-testbed", "'/opt/x; rm -rf /'")))


def test_worker_protocol_refuses_bad_requests_without_building(monkeypatch):
    import io
    import json

    from testbed.cluster.worker import Worker
    w = Worker()
    stopped = []
    monkeypatch.setattr(w, "close", lambda: stopped.append(True))
    rfile = io.BytesIO(b'not json\n["a list"]\n{"op": "nope"}\n{"op": "set_link", "link": "x", "up": false}\n'
                       b'{"op": "stop"}\n{"op": "never read"}\n')
    wfile = io.BytesIO()
    w.serve(rfile, wfile)
    replies = [json.loads(line) for line in wfile.getvalue().splitlines()]
    assert [r["ok"] for r in replies] == [False, False, False, False, True]
    assert "bad request" in replies[0]["error"] and "not a JSON object" in replies[1]["error"]
    assert "unknown op 'nope'" in replies[2]["error"] and "send build first" in replies[3]["error"]
    assert stopped                                   # torn down on stop (and on end of input)


def test_a_worker_reads_the_runners_servers_file_without_its_keys(tmp_path):
    text = GOOD   # s2 names key id_test, which exists on the runner only
    with pytest.raises(SpecError, match="key file"):
        load_servers(write(tmp_path, text))
    c = load_servers(write(tmp_path, text), check_keys=False)
    assert c.server("s2").key.endswith("id_test") and c.server("s2").port == 2222   # named, not looked for


def test_worker_writes_shipped_files_under_their_own_names_only(tmp_path):
    from testbed.cluster.worker import Worker
    w = Worker()
    w.workdir = tmp_path
    path = w._shipped({"name": "/elsewhere/fat-tree-k4.yaml", "text": "a: 1\n"})
    assert path == tmp_path / "spec" / "fat-tree-k4.yaml" and path.read_text() == "a: 1\n"
    for bad in ("..", "", "x.sh", "../.."):
        with pytest.raises(ValueError, match="expected a .yaml file name"):
            w._shipped({"name": bad, "text": ""})


class _Shard:
    def __init__(self):
        self.on_push, self.calls = None, []

    def call(self, op, **args):
        self.calls.append((op, args))
        if op == "agents_start":
            return {"pids": {str(j["agent"]): 1000 + j["agent"] for j in args["jobs"]}}
        return {}


def _remote_agents(offsets):
    from types import SimpleNamespace

    from testbed.cluster.remote_agents import RemoteAgents
    fabric = SimpleNamespace(shards={"s1": _Shard(), "s2": _Shard()},
                             placement=SimpleNamespace(where={"h0": "s1", "h1": "s2"}))
    jobs = [{"agent": 0, "host": "h0"}, {"agent": 1, "host": "h1"}]
    return fabric, RemoteAgents(fabric, jobs, offsets)


def test_remote_agents_relay_messages_on_the_runners_clock_and_exits():
    from agents.protocol import Event, Iteration, Ready, Start, encode
    fabric, agents = _remote_agents({"s1": 0.0, "s2": 2.5})   # s2's clock runs 2.5 s ahead
    assert {r: (p.pid, p.server) for r, p in agents.procs.items()} == {0: (1000, "s1"), 1: (1001, "s2")}
    assert [len(s.calls[0][1]["jobs"]) for s in fabric.shards.values()] == [1, 1]   # each job on its server
    push = fabric.shards["s2"].on_push
    it = Iteration(rank=1, size=8, iter=0, seq=0, warmup=False, t_start=102.5, t_end=103.5, seconds=1.0, wrong=0)
    push("s2", {"push": "agent", "line": encode(it).decode()})
    push("s2", {"push": "agent", "line": encode(Event(rank=1, kind="ev_state", t=110.0, peer="0", dir="tx", qpn=7,
                                                      ev_id=3, old="good", new="assumed_bad", cause="loss")).decode()})
    fabric.shards["s1"].on_push("s1", {"push": "agent", "line": encode(Ready(rank=0)).decode()})
    push("s2", {"push": "exit", "rank": 1, "code": 0})
    got = agents.poll(0.1)
    assert [(type(m).__name__, getattr(m, "t", None)) for m in got] == [("Iteration", None), ("Event", 107.5),
                                                                          ("Ready", None)]
    assert (got[0].t_start, got[0].t_end, got[0].seconds) == (100.0, 101.0, 1.0)
    assert agents.procs[1].poll() == 0 and agents.procs[0].poll() is None
    fabric.shards["s1"].on_push("s1", {"push": "gone"})            # s1's worker went away
    assert agents.poll(0.1) == [] and agents.procs[0].poll() == agents.GONE
    agents.broadcast(Start())
    assert all(s.calls[-1] == ("agents_send", {"line": encode(Start()).decode(), "rank": None})
               for s in fabric.shards.values())
    agents.close()
    assert all(s.calls[-1][0] == "agents_stop" and s.on_push is None for s in fabric.shards.values())


def test_collected_records_move_onto_the_runners_clock(tmp_path):
    import json

    from testbed.rundir import write as records
    fabric, agents = _remote_agents({"s1": -1.0, "s2": 0.0})
    torn = '{"t": 5.0, "rank": 0, "fl'
    replies = {"s1": {"ranks": {"0": {"samples": '{"t": 5.0, "rank": 0, "flows": []}\n' + torn, "log": "hello\n"}},
                      "cpu": '{"t": 5.0, "busy_fraction": 0.5}\n', "sched": '{"t": 5.0, "ranks": {}}\n'},
               "s2": {"ranks": {"1": {"samples": "", "log": ""}}, "cpu": "", "sched": ""}}
    for name, shard in fabric.shards.items():
        shard.call = lambda op, _r=replies[name], **a: _r
    got = agents.collect(tmp_path)
    lines = records.samples_file(tmp_path, 0).read_text().splitlines()
    assert json.loads(lines[0])["t"] == 6.0 and lines[1] == torn     # a torn line is kept for the merge to skip
    assert records.agent_log(tmp_path, 0).read_text() == "hello\n"
    assert got["s1"] == {"cpu": [{"t": 6.0, "busy_fraction": 0.5, "server": "s1"}], "sched": [{"t": 6.0, "ranks": {}}]}
    assert got["s2"] == {"cpu": [], "sched": []}
