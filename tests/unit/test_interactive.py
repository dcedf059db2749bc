"""Unit: the interactive fabric's commands (arguments, output, faults through the injector) and
the Mininet front end's promise: any input gives a line of output, never a traceback."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
from mininet.log import lg, output

from testbed import interactive as ia
from testbed.faults import Blackhole, LinkState, Loss, Rate, Reconverge
from testbed.spec import load_topology
from testbed.model.generators import fat_tree
from testbed.model.topology import LinkParams
from testbed.fabric.kernel import features

TINY = load_topology(Path(__file__).parents[2] / "topologies" / "tiny.yaml", features=features())
K4 = fat_tree(4, host_link=LinkParams(10**8), fabric_link=LinkParams(10**8), name="k4")


class FakeInjector:
    def __init__(self, fabric):
        self.fabric, self.applied, self.reverted = fabric, [], 0
        self._rates: dict[str, int] = {}

    def apply(self, change):
        self.applied.append(change)
        if isinstance(change, LinkState):
            (self.fabric.down.discard if change.up else self.fabric.down.add)(change.link)
        if isinstance(change, Rate):
            self._rates[change.link] = change.rate_bps

    @property
    def active(self):
        return {}

    def rate_bps(self, link):
        return self._rates.get(link.name) or link.params.rate_bps

    def revert_all(self):
        self.reverted += 1
        self.fabric.down.clear()
        self._rates.clear()


class FakeFabric:
    def __init__(self, topo):
        self.topo, self.down = topo, set()

    @property
    def links_down(self):
        return frozenset(self.down)


@pytest.fixture
def session():
    fabric = FakeFabric(TINY)
    return ia.Session(fabric, injector=FakeInjector(fabric))


# -- arguments --------------------------------------------------------------------------------
def test_links_are_named_or_given_by_their_two_nodes():
    assert ia.link_name(TINY, ["l0-s1"]) == "l0-s1"
    assert ia.link_name(TINY, ["s1", "l0"]) == "l0-s1"
    with pytest.raises(ia.CommandError, match="no link between h0 and h1"):
        ia.link_name(TINY, ["h0", "h1"])
    with pytest.raises(ia.CommandError, match=r"unknown link 'l0'.*l0-s0"):
        ia.link_name(TINY, ["l0"])
    with pytest.raises(ia.CommandError, match="`links` lists them"):
        ia.link_name(TINY, ["zz"])


@pytest.mark.parametrize("args, message", [
    ([], "usage: evs"),
    (["h0"], "usage: evs"),
    (["h0", "h9"], "'h9' is not a host of tiny"),
    (["h0", "l0"], "'l0' is a switch"),
    (["h0", "h0"], "same host"),
    (["h0", "h1", "h2"], "usage: evs"),
])
def test_evs_rejects_bad_hosts(session, args, message):
    with pytest.raises(ia.CommandError, match=message):
        session.evs(args)


@pytest.mark.parametrize("args, message", [
    (["h0", "h2", "icmp"], "udp or tcp"),
    (["h0", "h2", "tcp", "x"], "integers"),
    (["h0", "h2", "tcp", "1", "70000"], "1..65535"),
    (["h0", "h2", "tcp", "1", "2", "3"], "usage: path"),
])
def test_path_rejects_bad_flows_before_tracing(session, args, message):
    with pytest.raises(ia.CommandError, match=message):
        session.path(args)


def test_host_flow_uses_first_nic_addresses_and_defaults():
    flow = ia.host_flow(K4, "h0_0_0", "h3_1_1")
    assert (flow.tuple.src, flow.tuple.dst) == (str(K4.nics["h0_0_0"][0].address), str(K4.nics["h3_1_1"][0].address))
    assert (flow.tuple.proto, flow.tuple.sport, flow.tuple.dport) == ("udp", 49152, 4791)
    assert ia.host_flow(K4, "h0_0_0", "h3_1_1", "tcp", "4000", "5201").tuple.sport == 4000


# -- faults go through the injector, with units parsed by testbed.model.units -------------------------
def test_fault_commands_apply_typed_changes(session):
    inj = session.faults
    assert session.set_link(["l0-s0"], up=False)[0] == "l0-s0: down"
    session.set_link(["l0", "s0", "reconverge"], up=True)
    session.rate(["l0-s1", "10Mbit"])
    session.rate(["l0", "s1", "default"])
    session.loss(["l0-s1", "1%"])
    session.loss(["l0-s1", "0"])
    session.blackhole(["l1-s0", "on"])
    session.reconverge([])
    assert inj.applied == [LinkState("l0-s0", False), LinkState("l0-s0", True), Reconverge(),
                           Rate("l0-s1", 10_000_000), Rate("l0-s1", None), Loss("l0-s1", 1.0),
                           Loss("l0-s1", None), Blackhole("l1-s0", True), Reconverge()]


@pytest.mark.parametrize("method, args, message", [
    ("rate", ["l0-s1", "10", "Mbps"], "expected 1 value"),
    ("rate", ["l0-s1", "10Mbps"], "not a rate"),
    ("rate", ["l0-s1"], "expected 1 value"),
    ("rate", [], "usage: rate"),
    ("loss", ["l0-s1", "200%"], "between 0 and 100"),
    ("loss", ["nope", "1%"], "unknown link 'nope'"),
    ("blackhole", ["l0-s1", "maybe"], "on or off"),
    ("reconverge", ["now"], "usage: reconverge"),
])
def test_fault_commands_reject_bad_values_without_applying(session, method, args, message):
    with pytest.raises(ia.CommandError, match=message):
        getattr(session, method)(args)
    assert session.faults.applied == []


def test_close_reverts_and_says_what(session):
    session.set_link(["l0-s0"], up=False)
    session.rate(["l0-s1", "10Mbit"])
    assert session.link_lines(only_faulty=True) == [
        "l0-s0  l0:l0-eth2<->s0:s0-eth0  100Mbit  DOWN", "l0-s1  l0:l0-eth3<->s1:s1-eth0  10Mbit  up"]
    assert session.close() == ["*** reverted 2 fault(s): l0-s0; l0-s1"]
    assert session.faults.reverted == 1 and session.close() == []


# -- output ----------------------------------------------------------------------------------
def test_net_lists_every_node_with_interface_and_peer():
    lines = ia.net_lines(TINY)
    assert lines[0] == "h0 h0-eth0:l0-eth0"
    assert "l0 l0-eth0:h0-eth0 l0-eth1:h1-eth0 l0-eth2:s0-eth0 l0-eth3:s1-eth0" in lines
    assert len(lines) == len(TINY.nodes)


def test_ping_report_reads_like_mininets():
    ok = {(a, b): not (a, b) == ("h1", "h2") for a in ("h0", "h1", "h2") for b in ("h0", "h1", "h2") if a != b}
    assert ia.ping_lines(TINY, ok) == [
        "*** Ping: testing ping6 reachability (ECMP addresses)",
        "h0 -> h1 h2", "h1 -> h0 X", "h2 -> h0 h1",
        "*** Results: 17% dropped (5/6 received)"]


def test_evs_list_usid_addresses_and_mark_down_links():
    lines = ia.ev_lines(TINY, "h0", "h2", frozenset({"l0-s0"}))
    assert lines[0] == "h0 -> h2: 2 EV(s) (SRv6 uSID paths)"
    assert "fcbb:bb00:e000:c000:e001:1002::" in lines[1] and lines[1].endswith("DOWN: l0-s0")
    assert "fcbb:bb00:e000:c001:e001:1002::" in lines[2] and "DOWN" not in lines[2]


def test_host_names_become_ecmp_addresses():
    assert ia.substitute_hosts(TINY, ["ping", "-c1", "h3", "l0"]) == \
        ["ping", "-c1", str(TINY.nics["h3"][0].address), "l0"]


# -- the front end: never a traceback ----------------------------------------------------------
class FakeNode:
    def __init__(self, name):
        self.name, self.waiting, self.pid = name, False, 1


def run_cli(session, commands: list[str], tmp_path) -> str:
    from mininet.net import Mininet
    net = Mininet(build=False, controller=None, autoSetMacs=False)
    for name in TINY.nodes:
        node = FakeNode(name)
        (net.hosts if name in TINY.nics else net.switches).append(node)
        net.nameToNode[name] = node
    script = tmp_path / "script"
    script.write_text("".join(f"{c}\n" for c in commands))
    out = io.StringIO()
    old = lg.ch.setStream(out)
    try:
        with open("/dev/null") as stdin:
            ia.FabricCLI(net, session, stdin=stdin, script=str(script))
    finally:
        lg.ch.setStream(old)
    return out.getvalue()


def test_the_cli_answers_every_input_with_a_line(session, tmp_path):
    def boom(args):
        raise RuntimeError("kernel said no")

    session.path = boom
    commands = ["evs h0", "evs h0 h2", "down nope", "loss l0-s1 x", "rate", "path h0 h2", "frobnicate",
                "iperf", "switch s0 stop", "pingallfull", "link l0 s0 sideways", "net", "faults", "h0",
                "help", "ports"]
    text = run_cli(session, commands, tmp_path)
    assert "Traceback" not in text
    assert "*** usage: evs SRC DST" in text
    assert "fcbb:bb00:e000:c000:e001:1002::" in text
    assert "*** unknown link 'nope'" in text
    assert "*** path h0 h2: RuntimeError: kernel said no" in text
    assert "*** unknown command or node: frobnicate" in text
    assert "*** usage: link NODE1 NODE2 up|down" in text
    assert "no faults in force" in text
    assert "enter a command for node h0" in text
    assert "Commands for this fabric" in text and "substitutes IPv6 (ECMP) addresses" in text
    assert "s0 s0-eth0:10 s0-eth1:11" in text     # ports: pinned ifindexes


@pytest.mark.parametrize("quiet", [False, True])
def test_mininet_output_is_printed_once(quiet):
    """Mininet's logger has its own handler; propagating to the root handler (testbed.cli's
    basicConfig) printed every line again with a prefix. open_cli stops the propagation."""
    root_out, mn_out = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(root_out)
    logging.getLogger().addHandler(handler)
    old_stream, old_propagate = lg.ch.setStream(mn_out), lg.propagate
    lg.propagate = True
    try:
        if quiet:
            ia.quiet_mininet_logger()
        output("h0 -> h1\n")
    finally:
        logging.getLogger().removeHandler(handler)
        lg.ch.setStream(old_stream)
        lg.propagate = old_propagate
    assert mn_out.getvalue() == "h0 -> h1\n"
    assert (root_out.getvalue() == "") is quiet
