"""Link spec -> tc plan (pure), and its compilation into a netlink batch.

Every link end gets, on egress::

    root htb 1: default 0x10
      class htb 1:10 rate R ceil R      (the configured rate, both directions)
        leaf 10: pfifo limit Q          (bounded queue, Q packets)
             or netem limit Q delay D loss L   (only where sch_netem exists)

HTB burst is ``max(2 MTU, 2 ms of rate)`` bytes (tc's default is one timer tick
of rate plus an MTU; 2 ms keeps low rates accurate with HZ=250 kernels).

With ``header_queue_pkts`` (trimming on, :mod:`testbed.fabric.switch`) the link end gets a
strict-priority class for trimmed MRC headers instead, both under one parent at R::

    root htb 1: default 0x10
      class htb 1:1 rate R ceil R
        class htb 1:10 rate R/1000 ceil R prio 1   data (borrows from 1:1)
          leaf 10: pfifo limit Q (or netem)
        class htb 1:20 rate R ceil R prio 0        trimmed headers (skb->priority 1:20)
          leaf 20: pfifo limit H (or netem, same delay/loss)

HTB serves level-0 (own-rate) classes before borrowing ones, and prio 0 before
prio 1: the header class, guaranteed R, always goes first, and the data class
(guaranteed almost nothing) takes what the parent has left, so the link still
carries R in total (plus at most the data class's R/1000 of its own).
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.fabric.netlink import Batch
from testbed.model.topology import LinkParams
from testbed.model.errors import InputError

ETH_HEADER_BYTES = 14
MTU_FRAME_BYTES = 1500 + ETH_HEADER_BYTES
HTB_HANDLE = "1:"
HTB_CLASS = "1:10"
LEAF_HANDLE = "10:"
PARENT_CLASS = "1:1"
HEADER_CLASS = "1:20"
HEADER_LEAF_HANDLE = "20:"
#: The data class's own (non-borrowed) rate next to a header class: R / this.
DATA_GUARANTEE_DIVISOR = 1000
#: Queue (packets) of class 1:20 on a link with ``control_priority`` and no trimming.
CONTROL_QUEUE_PKTS = 64


class ShapingError(InputError):
    """A link needs a qdisc this kernel lacks."""


@dataclass(frozen=True)
class TcPlan:
    """Egress shaping of one interface: HTB rate in bits/s, leaf queue, optional netem."""

    rate_bps: int
    burst_bytes: int
    queue_pkts: int
    netem_loss_pct: float = 0.0
    frame_bytes: int = MTU_FRAME_BYTES
    header_queue_pkts: int | None = None
    """Trimmed-header class queue (packets); None: no header class (one class 1:10)."""

    @property
    def uses_netem(self) -> bool:
        return bool(self.netem_loss_pct)


def plan(params: LinkParams, *, have_netem: bool, header_queue_pkts: int | None = None) -> TcPlan:
    """tc plan for one link end. Raises ShapingError if delay/loss need sch_netem and it is absent.

    ``header_queue_pkts``: add the strict-priority class 1:20 for trimmed headers with a
    queue of that many packets (pass the same value to every plan of that link end,
    rate changes included: :func:`compile_into` with ``replace`` keeps the class layout).
    """
    if params.loss_pct and not have_netem:
        raise ShapingError("loss needs sch_netem, which this kernel lacks")
    if header_queue_pkts is not None and header_queue_pkts < 1:
        raise ValueError(f"header_queue_pkts must be at least 1, got {header_queue_pkts}")
    frame = params.mtu + ETH_HEADER_BYTES
    # a link's delay is not the qdisc's: the agents' endpoints hold datagrams (agents.net.udp)
    return TcPlan(params.rate_bps, burst_bytes(params), params.queue_pkts, params.loss_pct,
                  frame, header_queue_pkts)


def burst_bytes(params: LinkParams) -> int:
    """HTB burst (and cburst) of a link end, bytes: ``max(2 MTU frames, 2 ms of rate)``."""
    return max(2 * (params.mtu + ETH_HEADER_BYTES), int(params.rate_bps / 8 * 0.002))


def compile_into(batch: Batch, ifindex: int, tc: TcPlan, *, replace: bool = False) -> None:
    """Add the qdisc/class requests of ``tc`` for ``ifindex`` to ``batch``."""
    if tc.header_queue_pkts is not None:
        _compile_with_header_class(batch, ifindex, tc, replace=replace)
        return
    verb = "replace" if replace else "add"
    if not replace:
        batch.tc("add", "htb", index=ifindex, handle=HTB_HANDLE, default=0x10,
                 desc=f"ifindex {ifindex}: htb root")
    batch.tc("change-class" if replace else "add-class", "htb", index=ifindex, handle=HTB_CLASS,
             parent=HTB_HANDLE, rate=f"{tc.rate_bps}bit", ceil=f"{tc.rate_bps}bit",
             burst=tc.burst_bytes, cburst=tc.burst_bytes, quantum=2 * tc.frame_bytes,
             desc=f"ifindex {ifindex}: htb class rate {tc.rate_bps} bit/s")
    _leaf(batch, ifindex, tc, LEAF_HANDLE, HTB_CLASS, tc.queue_pkts, verb)


def _leaf(batch: Batch, ifindex: int, tc: TcPlan, handle: str, parent: str, limit: int, verb: str) -> None:
    if tc.uses_netem:
        batch.tc(verb, "netem", index=ifindex, handle=handle, parent=parent,
                 limit=limit, loss=tc.netem_loss_pct,
                 desc=f"ifindex {ifindex}: netem leaf {handle}")
    else:
        batch.tc(verb, "pfifo", index=ifindex, handle=handle, parent=parent,
                 limit=limit, desc=f"ifindex {ifindex}: pfifo leaf {handle} limit {limit}")


def _compile_with_header_class(batch: Batch, ifindex: int, tc: TcPlan, *, replace: bool) -> None:
    verb, class_verb = ("replace", "change-class") if replace else ("add", "add-class")
    rate, small = f"{tc.rate_bps}bit", f"{max(8, tc.rate_bps // DATA_GUARANTEE_DIVISOR)}bit"
    common = {"burst": tc.burst_bytes, "cburst": tc.burst_bytes, "quantum": 2 * tc.frame_bytes}
    if not replace:
        batch.tc("add", "htb", index=ifindex, handle=HTB_HANDLE, default=0x10,
                 desc=f"ifindex {ifindex}: htb root")
    for handle, parent, crate, prio, what in ((PARENT_CLASS, HTB_HANDLE, rate, 0, "parent"),
                                              (HTB_CLASS, PARENT_CLASS, small, 1, "data"),
                                              (HEADER_CLASS, PARENT_CLASS, rate, 0, "trimmed headers")):
        batch.tc(class_verb, "htb", index=ifindex, handle=handle, parent=parent, rate=crate, ceil=rate,
                 prio=prio, **common, desc=f"ifindex {ifindex}: htb {what} class {handle} ceil {rate}")
    _leaf(batch, ifindex, tc, LEAF_HANDLE, HTB_CLASS, tc.queue_pkts, verb)
    _leaf(batch, ifindex, tc, HEADER_LEAF_HANDLE, HEADER_CLASS, tc.header_queue_pkts, verb)
