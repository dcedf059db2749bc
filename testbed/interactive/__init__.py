"""The interactive fabric: Mininet's CLI on a running :class:`testbed.fabric.local.Fabric`.

``testbed up TOPO`` opens it. Mininet's own commands that assume IPv4, OpenFlow
switches or Mininet ``Intf`` objects are replaced by ones that know our fabric:

* ``pingall`` / ``pingpair``: ``ping -6`` between hosts over their ECMP addresses
  (first NIC), every source host in parallel; printed as Mininet prints it.
* ``net`` / ``links`` / ``intfs``: the topology's links with interface names and peers;
  ``links`` adds each link's name (what ``down``/``up``/``rate``/``loss`` take) and state.
* ``evs SRC DST``: the EVs between two hosts (:meth:`testbed.model.topology.Topology.evs`).
* ``path SRC DST [udp|tcp [SPORT [DPORT]]]``: the hops an ECMP flow takes now, traced
  on the fabric by probe packets (:func:`testbed.fabric.paths.trace_flows`).
* ``down LINK`` / ``up LINK`` / ``rate LINK 10Mbit`` / ``loss LINK 1%`` / ``blackhole
  LINK on|off`` / ``reconverge`` / ``faults``: the scenario runner's
  :class:`testbed.faults.FaultInjector`; every fault is reverted when the CLI exits.
* ``<node> cmd ... <host> ...``: a host name after the node is replaced by its ECMP
  address (``h0 ping h3``, ``h0 traceroute -6 h3``).

A bad argument prints one ``*** ...`` line; no command ends the CLI with a traceback.
:mod:`.session` does the work (no Mininet import); :mod:`.cli` is the thin Mininet
front end.
"""

from testbed.interactive.cli import FabricCLI, open_cli, quiet_mininet_logger, strays
from testbed.interactive.session import CommandError, Session, ev_lines, host, host_flow, host_pair, link_name, net_lines, path_lines, ping_lines, substitute_hosts

__all__ = ["CommandError", "FabricCLI", "Session", "ev_lines", "host", "host_flow", "host_pair", "link_name",
           "net_lines", "open_cli", "path_lines", "ping_lines", "quiet_mininet_logger", "strays",
           "substitute_hosts"]
