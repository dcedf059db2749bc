"""The MRC controller and ``--servers`` runs (issue 46 item 4): a scenario with a controller is
refused before any server is contacted, and the agents' stand-in for the control server there
(:class:`testbed.cluster.remote_agents.RemoteAgents`) answers every call the runner makes on its
control server, controller calls included (no controller connected), so no run can end in an
AttributeError."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

from agents.protocol import Stop
from testbed.run.control import CONTROLLER, ControlServer

REPO = Path(__file__).resolve().parents[2]
TOPO = REPO / "topologies" / "fat-tree-k4.yaml"
SCENARIO = """\
name: ctl
topology: {topo}
transports: [mrc]
seed: 1
timeout: 60s
{controller}workload: {{collective: all_reduce, hosts: all, min_bytes: 1MiB, max_bytes: 1MiB, factor: 2,
           iterations: 3, warmup: 1}}
"""


def test_servers_runs_refuse_a_controller_up_front_naming_the_file_and_key(tmp_path, capsys):
    """The controller runs on one machine only: with --servers a scenario that has one is refused
    before any server is contacted (the servers file does not even exist here), not ignored."""
    from testbed import cli
    from testbed.spec import key_line
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(topo=TOPO, controller="controller: {policy: replace}\n"))
    assert cli.main(["run", str(path), "--servers", str(tmp_path / "servers.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:6: controller.policy: the MRC controller (policy replace) does not run on --servers runs" in err
    assert key_line(path, "controller.policy") == 6 and key_line(path, "nope.x") == 0
    # without the controller the same file gets past that check (to the missing servers file)
    path.write_text(SCENARIO.format(topo=TOPO, controller=""))
    assert cli.main(["run", str(path), "--servers", str(tmp_path / "servers.yaml")]) == 2
    assert "controller.policy" not in capsys.readouterr().err


def _runner_calls(name: str) -> set[str]:
    """Every attribute the runner's modules (testbed/run/*.py) use on ``self.<name>``."""
    out = set()
    for path in sorted((REPO / "testbed" / "run").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == name and isinstance(node.value.value, ast.Name)
                    and node.value.value.id == "self"):
                out.add(node.attr)
    return out


class _Shard:
    def __init__(self):
        self.on_push, self.calls = None, []

    def call(self, op, **args):
        self.calls.append((op, args))
        if op == "agents_start":
            return {"pids": {str(j["agent"]): 1000 + j["agent"] for j in args["jobs"]}}
        return {}


def test_remote_agents_answer_every_call_the_runner_makes_on_its_control_server(tmp_path):
    """The runner's ``self.server`` is a ControlServer on one machine and the RemoteAgents over
    servers (``self.remote`` too): every attribute testbed/run uses on either exists on both, and
    RemoteAgents' controller calls answer as a ControlServer with no controller connected."""
    from testbed.cluster.remote_agents import RemoteAgents
    fabric = SimpleNamespace(shards={"s1": _Shard()}, placement=SimpleNamespace(where={"h0": "s1"}))
    remote = RemoteAgents(fabric, [{"agent": 0, "host": "h0"}], {"s1": 0.0})
    local = ControlServer(str(tmp_path / "c.sock"))
    try:
        server_calls, remote_calls = _runner_calls("server"), _runner_calls("remote")
        controller_calls = {"has_controller", "stalled_s", "disconnect", "dropped", "to_controller"}
        assert controller_calls <= server_calls and {"collect", "procs"} <= remote_calls   # the scan finds them
        assert sorted(a for a in server_calls if not hasattr(local, a)) == []
        assert sorted(a for a in server_calls | remote_calls if not hasattr(remote, a)) == []
        for obj in (local, remote):
            assert (obj.has_controller, obj.stalled_s(CONTROLLER), obj.dropped) == (False, 0.0, 0)
            assert obj.to_controller(Stop()) is False and obj.disconnect(CONTROLLER) is None
    finally:
        local.close()
        remote.close()
