"""Flow selectors and flow targets: a timeline action's ``link`` given as the link some flows
cross (the syntax and its checks; resolution against traced flows: :mod:`testbed.faults.targets`)."""

from __future__ import annotations

from dataclasses import dataclass

from testbed.model.topology import Topology
from testbed.model.errors import InputError


UNREPAIRED = "unrepaired"


ROLE_HOPS = ("host-edge", "edge-aggregation", "aggregation-core", "core-aggregation", "aggregation-edge",
             "edge-host", "host-leaf", "leaf-spine", "spine-leaf", "leaf-host")


HOPS = (UNREPAIRED, *ROLE_HOPS)


class TargetError(InputError):
    """A flow target names no link on this fabric (no flow crosses such a hop)."""


@dataclass(frozen=True)
class FlowSelector:
    """``transport`` and optionally one ring hop ``src_rank -> dst_rank``."""

    transport: str
    src_rank: int | None = None
    dst_rank: int | None = None

    def matches(self, tf) -> bool:
        """Whether ``tf`` (a :class:`testbed.fabric.paths.TracedFlow`) is a data flow this selects."""
        f = tf.flow
        return (f.kind == "data" and f.transport == self.transport
                and (self.src_rank is None or (f.src_rank, f.dst_rank) == (self.src_rank, self.dst_rank)))

    def __str__(self) -> str:
        return self.transport if self.src_rank is None else f"{self.transport} {self.src_rank}->{self.dst_rank}"


@dataclass(frozen=True)
class FlowTarget:
    """A link given by the flows crossing it: every selector of ``crossed_by`` must have a
    data flow crossing it at ``hop`` (one of :data:`HOPS`)."""

    crossed_by: tuple[FlowSelector, ...]
    hop: str = UNREPAIRED
    repairable: bool = False

    @property
    def transports(self) -> list[str]:
        return sorted({s.transport for s in self.crossed_by})

    def __str__(self) -> str:
        return (f"crossed_by [{', '.join(map(str, self.crossed_by))}] hop {self.hop}"
                + (" repairable" if self.repairable else ""))


def parse_selector(text: str, world: int, connections: set[tuple[int, int]] | None = None) -> FlowSelector:
    """``"rc"`` or ``"rc 3->4"`` -> FlowSelector. ``connections``: the (sender, receiver) rank
    pairs of the collective (default: a ring's, r -> r+1). Raises ValueError naming what is
    wrong (unknown transport, ranks outside the world of ``world`` ranks, not a connection)."""
    from testbed.spec import TRANSPORTS, transport_variant
    words = text.split()
    try:
        transport_variant(words[0] if words else "")
    except ValueError:
        words = []
    if not words or len(words) > 2:
        raise ValueError(f"{text!r} is not '<transport>' or '<transport> <r>-><r+1>' "
                         f"(transports: {', '.join(TRANSPORTS)})")
    if len(words) == 1:
        return FlowSelector(words[0])
    src, sep, dst = words[1].partition("->")
    if not sep or not src.isdigit() or not dst.isdigit():
        raise ValueError(f"{text!r}: the flow is '<sender>-><receiver>', ranks (e.g. 3->4)")
    s, d = int(src), int(dst)
    if not (s < world and d < world):
        raise ValueError(f"{text!r}: the ranks are 0..{world - 1}")
    if connections is None and d != (s + 1) % world:
        raise ValueError(f"{text!r}: rank {s} sends to rank {(s + 1) % world} in a ring of {world}")
    if connections is not None and (s, d) not in connections:
        sends = sorted(b for a, b in connections if a == s)
        raise ValueError(f"{text!r}: rank {s} sends to rank{'s' if len(sends) != 1 else ''} "
                         f"{', '.join(map(str, sends)) or 'none'} in this collective")
    return FlowSelector(words[0], s, d)


def hop_roles(topo: Topology, tf_or_nodes) -> list[str]:
    """``"<role>-<role>"`` of every hop of a traced flow (or of a node sequence)."""
    nodes = tf_or_nodes if isinstance(tf_or_nodes, (list, tuple)) else \
        [tf_or_nodes.flow.src_host] + [h.next for h in tf_or_nodes.hops]
    roles = [topo.nodes[n].role.value for n in nodes]
    return [f"{a}-{b}" for a, b in zip(roles, roles[1:])]


def check_hop(topo: Topology, src_host: str, dst_host: str, hop: str) -> str | None:
    """Why a flow between these hosts cannot cross ``hop`` (from the shape of its shortest
    paths), or None if it can."""
    if hop == UNREPAIRED:
        return None
    ev = topo.evs(src_host, dst_host, limit=1)
    if not ev:
        return f"no path from {src_host} to {dst_host}"
    shape = hop_roles(topo, [src_host, *ev[0].switches, dst_host])
    if hop not in shape:
        return f"the flow {src_host} -> {dst_host} crosses no {hop} hop (its path: {' '.join(shape)})"
    return None
