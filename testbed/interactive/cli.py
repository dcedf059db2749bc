"""The Mininet front end of the interactive fabric: :class:`FabricCLI` and :func:`open_cli`."""

from __future__ import annotations

import logging
import os
import signal
import threading

from mininet.cli import CLI
from mininet.log import error, output
from mininet.net import Mininet
from mininet.util import quietRun

from testbed.fabric import routing
from testbed.faults import FaultError

from testbed.interactive.session import CommandError, Session, net_lines, substitute_hosts

log = logging.getLogger(__name__)


def strays(fabric) -> list[int]:
    """PIDs of processes inside the fabric's namespaces that the fabric did not record (e.g.
    ``h1 iperf3 -s &`` typed in the CLI): they would keep a namespace alive after teardown.
    Matched by network-namespace inode of our own open namespace fds, never by name."""
    ours = {os.fstat(fabric.nsfd(n)).st_ino for n in fabric.nodes}
    recorded = {e["pid"] for e in fabric.ledger.processes} if fabric.ledger else set()
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) not in recorded and int(pid) != os.getpid():
            try:
                if os.stat(f"/proc/{pid}/ns/net").st_ino in ours:
                    out.append(int(pid))
            except OSError:
                pass
    return out


# -- the Mininet front end ---------------------------------------------------------------------
class FabricCLI(CLI):
    """Mininet's CLI with our commands (see the module docstring). Runs on construction, as
    Mininet's does. ``session``: the :class:`Session` doing the work."""

    helpStr = CLI.helpStr.replace("substitutes IP addresses", "substitutes IPv6 (ECMP) addresses") + (
        "Commands for this fabric (LINK: a name from `links`, or its two nodes):\n"
        "  evs h0 h3                    the EVs (SRv6 uSID paths) between two hosts\n"
        "  path h0 h3 [udp|tcp [SPORT [DPORT]]]   the hops an ECMP flow takes now\n"
        "  down LINK / up LINK [reconverge], reconverge, rate LINK 10Mbit,\n"
        "  loss LINK 1%, blackhole LINK on|off, faults   (all reverted when the CLI exits)\n"
        "  mininet> h0 traceroute -6 h3\n\n")

    def __init__(self, net: Mininet, session: Session, *, terminated: threading.Event | None = None, **kwargs):
        self.session = session
        self.terminated = terminated or threading.Event()   # set on SIGTERM (open_cli)
        super().__init__(net, **kwargs)

    def run(self) -> None:
        """Mininet's loop, except that after SIGTERM the interrupt ends the CLI: Mininet's
        loop treats every KeyboardInterrupt as Ctrl-C at the prompt and carries on."""
        while True:
            try:
                for node in self.mn.values():
                    while node.waiting:
                        node.sendInt()
                        node.waitOutput()
                if self.isatty():
                    quietRun("stty echo sane intr ^C")
                self.cmdloop()
                return
            except KeyboardInterrupt:
                if self.terminated.is_set():
                    raise
                output("\nInterrupt\n")

    def postcmd(self, stop: bool, line: str) -> bool:
        if self.terminated.is_set():     # SIGTERM while a node command ran (waitForNode took the interrupt)
            raise KeyboardInterrupt
        return stop

    @staticmethod
    def _say(lines: list[str]) -> None:
        output("".join(f"{line}\n" for line in lines))

    def onecmd(self, line: str) -> bool:
        """Run one command; any error is one ``***`` line, never a traceback."""
        try:
            return super().onecmd(line)
        except CommandError as exc:
            error(f"*** {exc}\n")
        except FaultError as exc:
            error(f"*** refused: {exc}\n")
        except Exception as exc:  # noqa: BLE001 - the CLI outlives any command
            if self.terminated.is_set():
                raise           # whatever testbed up's SIGTERM handler raised
            log.debug("command %r failed", line, exc_info=True)
            error(f"*** {line.strip()}: {type(exc).__name__}: {exc}\n")
        return False

    def default(self, line: str) -> None:
        """``<node> cmd args``: run in the node's shell; host names become ECMP addresses."""
        first, args, line = self.parseline(line)
        if first not in self.mn:
            raise CommandError(f"unknown command or node: {line} (`help` lists commands, `nodes` nodes)")
        if not args:
            raise CommandError(f"enter a command for node {first}: {first} <cmd>")
        node = self.mn[first]
        node.sendCmd(" ".join(substitute_hosts(self.session.topo, args.split(" "))))
        self.waitForNode(node)

    # -- Mininet's commands, for an IPv6 router fabric --
    def do_pingall(self, line: str) -> None:
        """pingall [HOST ...]: ping -6 every ordered pair of hosts (ECMP addresses, first NIC)."""
        self._say(self.session.pingall(line.split()))

    def do_pingpair(self, _line: str) -> None:
        """Ping -6 between the first two hosts."""
        self._say(self.session.pingall([h.name for h in self.session.topo.hosts[:2]]))

    def do_net(self, _line: str) -> None:
        """List every node's links: ifname:peer-ifname."""
        self._say(net_lines(self.session.topo))

    def do_links(self, _line: str) -> None:
        """List links: name (for down/up/rate/loss), ends, rate now, state."""
        self._say(self.session.link_lines())

    def do_intfs(self, _line: str) -> None:
        """List every node's interfaces."""
        topo = self.session.topo
        self._say([f"{n}: " + ",".join(l.port_of(n).ifname for l in topo.links_of[n]) for n in topo.nodes])

    def do_ports(self, _line: str) -> None:
        """List every switch's ports as ifname:ifindex (pinned ifindexes, no OpenFlow)."""
        topo = self.session.topo
        self._say([" ".join([sw.name] + [f"{l.port_of(sw.name).ifname}:{routing.port_ifindex(topo, sw.name, l)}"
                                         for l in topo.links_of[sw.name]]) for sw in topo.switches])

    def do_dump(self, _line: str) -> None:
        """Every node: role, PID, addresses (hosts: ECMP address per NIC; switches: uSID locator)."""
        topo = self.session.topo
        lines = []
        for name, node in topo.nodes.items():
            if name in topo.nics:
                where = ",".join(f"{nic.ifname}:{nic.address}" for nic in topo.nics[name])
            else:
                where = f"locator {node.locator}"
            lines.append(f"<{node.role.value} {name}: {where} pid={self.mn[name].pid}>")
        self._say(lines)

    # -- our concepts --
    def do_evs(self, line: str) -> None:
        """evs SRC DST: the EVs (SRv6 uSID paths) between two hosts."""
        self._say(self.session.evs(line.split()))

    def do_path(self, line: str) -> None:
        """path SRC DST [udp|tcp [SPORT [DPORT]]]: the hops an ECMP flow takes now (traced)."""
        self._say(self.session.path(line.split()))

    def do_down(self, line: str) -> None:
        """down LINK [reconverge]: take a link down (LINK: a name from `links`, or its two nodes)."""
        self._say(self.session.set_link(line.split(), up=False))

    def do_up(self, line: str) -> None:
        """up LINK [reconverge]: bring a link back up."""
        self._say(self.session.set_link(line.split(), up=True))

    def do_link(self, line: str) -> None:
        """link NODE1 NODE2 up|down: Mininet's form of up/down."""
        args = line.split()
        if len(args) != 3 or args[2] not in ("up", "down"):
            raise CommandError("usage: link NODE1 NODE2 up|down")
        self._say(self.session.set_link(args[:2], up=args[2] == "up"))

    def do_reconverge(self, line: str) -> None:
        """reconverge: recompute ECMP routes around the links down now."""
        self._say(self.session.reconverge(line.split()))

    def do_rate(self, line: str) -> None:
        """rate LINK RATE|default: shape a link both ways (10Mbit, 1Gbit)."""
        self._say(self.session.rate(line.split()))

    def do_loss(self, line: str) -> None:
        """loss LINK PERCENT: drop PERCENT of a link's packets both ways (0: none)."""
        self._say(self.session.loss(line.split()))

    def do_blackhole(self, line: str) -> None:
        """blackhole LINK on|off: drop every packet while carrier and routes stay up."""
        self._say(self.session.blackhole(line.split()))

    def do_faults(self, _line: str) -> None:
        """List the faults in force (all are reverted when the CLI exits)."""
        self._say(self.session.link_lines(only_faulty=True) or ["no faults in force"])

    # -- Mininet commands that do not apply here --
    def _not_here(self, what: str) -> None:
        raise CommandError(what)

    def do_iperf(self, _line: str) -> None:
        """Not on this fabric: see the message."""
        self._not_here("iperf: IPv4 only in Mininet; run `h1 iperf3 -s -1 &` then `h0 iperf3 -c h1`")

    do_iperfudp = do_iperf

    def do_switch(self, _line: str) -> None:
        """Not on this fabric: switches are Linux routers."""
        self._not_here("switch: no OpenFlow switches here; use down/up on links")

    do_dpctl = do_wait = do_switch

    def do_pingallfull(self, _line: str) -> None:
        """Not on this fabric: use pingall, or `h0 ping -c3 h1` for RTTs."""
        self._not_here("pingallfull: use pingall, or `h0 ping -c3 h1` for RTTs")

    do_pingpairfull = do_pingallfull


def quiet_mininet_logger() -> None:
    """Mininet's logger prints through its own handler; propagating to the root logger too
    (which :mod:`testbed.cli` configures) printed every line twice, the second time with a
    ``2026-11-23 01:05:21,771 mininet Level 25`` prefix."""
    logging.getLogger("mininet").propagate = False


def open_cli(fabric) -> None:
    """Open the CLI on ``fabric`` (started) until the user exits; then revert every fault made
    in it and kill the processes left running in its namespaces (:func:`strays`)."""
    quiet_mininet_logger()
    net = Mininet(build=False, controller=None, autoSetMacs=False)
    for name, node in fabric.nodes.items():
        (net.hosts if name in fabric.topo.nics else net.switches).append(node)
        net.nameToNode[name] = node
    session = Session(fabric)
    terminated = threading.Event()
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum, frame):
        terminated.set()
        if callable(previous):
            previous(signum, frame)     # testbed up's handler decides what SIGTERM raises
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        FabricCLI(net, session, terminated=terminated)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if terminated.is_set():
            output("\n")       # the prompt's line
        try:
            FabricCLI._say(session.close())
        except FaultError as exc:
            error(f"*** reverting faults: {exc}\n")
        left = strays(fabric)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if left:
            output(f"*** killed {len(left)} process(es) left running in the fabric\n")
