"""Link spec -> tc plan (pure), and its compilation into a netlink batch.

Every link end gets, on egress::

    root htb 1: default 0x10
      class htb 1:10 rate R ceil R      (the configured rate, both directions)
        leaf 10: pfifo limit Q          (bounded queue, Q packets)
             or netem limit Q delay D loss L   (only where sch_netem exists)

HTB burst is ``max(2 MTU, 2 ms of rate)`` bytes (tc's default is one timer tick
of rate plus an MTU; 2 ms keeps low rates accurate with HZ=250 kernels).
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.netlink import Batch
from testbed.topology import LinkParams

ETH_HEADER_BYTES = 14
MTU_FRAME_BYTES = 1500 + ETH_HEADER_BYTES
HTB_HANDLE = "1:"
HTB_CLASS = "1:10"
LEAF_HANDLE = "10:"


class ShapingError(ValueError):
    """A link needs a qdisc this kernel lacks."""


@dataclass(frozen=True)
class TcPlan:
    """Egress shaping of one interface: HTB rate in bits/s, leaf queue, optional netem."""

    rate_bps: int
    burst_bytes: int
    queue_pkts: int
    netem_delay_s: float = 0.0
    netem_loss_pct: float = 0.0
    frame_bytes: int = MTU_FRAME_BYTES

    @property
    def uses_netem(self) -> bool:
        return bool(self.netem_delay_s or self.netem_loss_pct)


def plan(params: LinkParams, *, have_netem: bool) -> TcPlan:
    """tc plan for one link end. Raises ShapingError if delay/loss need sch_netem and it is absent."""
    if (params.delay_s or params.loss_pct) and not have_netem:
        raise ShapingError("delay/loss need sch_netem, which this kernel lacks")
    frame = params.mtu + ETH_HEADER_BYTES
    burst = max(2 * frame, int(params.rate_bps / 8 * 0.002))
    return TcPlan(params.rate_bps, burst, params.queue_pkts, params.delay_s, params.loss_pct, frame)


def compile_into(batch: Batch, ifindex: int, tc: TcPlan, *, replace: bool = False) -> None:
    """Add the qdisc/class requests of ``tc`` for ``ifindex`` to ``batch``."""
    verb = "replace" if replace else "add"
    if not replace:
        batch.tc("add", "htb", index=ifindex, handle=HTB_HANDLE, default=0x10,
                 desc=f"ifindex {ifindex}: htb root")
    batch.tc("change-class" if replace else "add-class", "htb", index=ifindex, handle=HTB_CLASS,
             parent=HTB_HANDLE, rate=f"{tc.rate_bps}bit", ceil=f"{tc.rate_bps}bit",
             burst=tc.burst_bytes, cburst=tc.burst_bytes, quantum=2 * tc.frame_bytes,
             desc=f"ifindex {ifindex}: htb class rate {tc.rate_bps} bit/s")
    if tc.uses_netem:
        batch.tc(verb, "netem", index=ifindex, handle=LEAF_HANDLE, parent=HTB_CLASS,
                 limit=tc.queue_pkts, delay=int(tc.netem_delay_s * 1e6), loss=tc.netem_loss_pct,
                 desc=f"ifindex {ifindex}: netem leaf")
    else:
        batch.tc(verb, "pfifo", index=ifindex, handle=LEAF_HANDLE, parent=HTB_CLASS,
                 limit=tc.queue_pkts, desc=f"ifindex {ifindex}: pfifo leaf limit {tc.queue_pkts}")
