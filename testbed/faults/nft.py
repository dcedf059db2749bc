"""The nftables part of the link faults: random loss and blackholes (pure plans).

Loss and blackhole live in one nftables table per link end, in that end's
namespace: family ``netdev``, table ``mrc_fault_<link name>``, one chain
``ingress`` hooked on the end's interface (priority -500), and two named
counters. A rule on each end's *ingress* drops what arrives there, so the two
ends together cover both directions of the link::

    table netdev mrc_fault_a0_0-c0_0 {
        counter blackhole_dropped { }
        counter loss_dropped { }
        chain ingress { type filter hook ingress device "a0_0-eth2" priority -500; policy accept;
            counter name "blackhole_dropped" drop                        # blackhole on
            numgen random mod 1000000 < 100000 counter name "loss_dropped" drop   # 10 % loss
        }
    }

A dropped packet has used the sender's egress queue and HTB rate (like loss
on a wire); carrier, addresses, neighbours and routes are untouched, so no
router notices a blackhole. Every change of a link's rules is one nftables
transaction per end (the chain is flushed and refilled atomically; the
counters survive changes and go with the table once the link has no fault).

Pure: :func:`loss_threshold`, :func:`transition` (a link end's state change as one
nftables JSON transaction); the fabric runs them (:meth:`FabricBackend.run_nft`,
:mod:`testbed.fabric.nft`) and :class:`testbed.faults.FaultInjector` decides what a failure
means.
"""

from __future__ import annotations

from dataclasses import dataclass


TABLE_PREFIX = "mrc_fault_"
CHAIN = "ingress"
CHAIN_PRIORITY = -500
LOSS_COUNTER = "loss_dropped"
BLACKHOLE_COUNTER = "blackhole_dropped"
#: numgen modulus: loss resolution is 100 / LOSS_MOD percent (1e-4 %).
LOSS_MOD = 1_000_000


# -- pure helpers --------------------------------------------------------------------
def loss_threshold(percent: float) -> int:
    """numgen threshold for ``percent`` loss: drop when ``numgen random mod LOSS_MOD < threshold``.

    Raises ValueError unless 0 < percent <= 100 and percent is at least the
    resolution (100 / LOSS_MOD percent).
    """
    if not (isinstance(percent, (int, float)) and 0 < percent <= 100):
        raise ValueError(f"loss percent must be in (0, 100], got {percent!r}")
    threshold = round(percent / 100 * LOSS_MOD)
    if threshold < 1:
        raise ValueError(f"loss {percent}% is below the resolution of {100 / LOSS_MOD}%")
    return threshold


def table_name(link: str) -> str:
    return TABLE_PREFIX + link


@dataclass(frozen=True)
class FaultState:
    """nftables faults of one link: loss in percent (None: no loss), the node whose end drops it
    (``loss_into``: only packets travelling into that node are lost, a gray failure of one
    direction; None: both directions) and blackhole."""

    loss_pct: float | None = None
    blackhole: bool = False
    loss_into: str | None = None

    @property
    def active(self) -> bool:
        return self.loss_pct is not None or self.blackhole

    def at_end(self, node: str) -> "FaultState":
        """What the end on ``node`` drops: a one-way loss only on the receiving end's ingress."""
        if self.loss_into is None or self.loss_into == node:
            return FaultState(self.loss_pct, self.blackhole)
        return FaultState(None, self.blackhole)


def transition(link: str, ifname: str, old: FaultState, new: FaultState) -> list[dict]:
    """nftables JSON commands taking one link end from ``old`` to ``new`` (one transaction)."""
    table = table_name(link)
    base = {"family": "netdev", "table": table}
    if not new.active:
        if not old.active:
            return []
        # "add" first makes the delete succeed even if the table is already gone.
        return [{"add": {"table": {"family": "netdev", "name": table}}},
                {"delete": {"table": {"family": "netdev", "name": table}}}]
    cmds: list[dict] = []
    if not old.active:
        cmds += [{"add": {"table": {"family": "netdev", "name": table}}},
                 {"add": {"counter": {**base, "name": LOSS_COUNTER}}},
                 {"add": {"counter": {**base, "name": BLACKHOLE_COUNTER}}},
                 {"add": {"chain": {**base, "name": CHAIN, "type": "filter", "hook": "ingress",
                                    "dev": ifname, "prio": CHAIN_PRIORITY, "policy": "accept"}}}]
    cmds.append({"flush": {"chain": {**base, "name": CHAIN}}})
    if new.blackhole:
        cmds.append({"add": {"rule": {**base, "chain": CHAIN, "comment": "blackhole",
                                      "expr": [{"counter": BLACKHOLE_COUNTER}, {"drop": None}]}}})
    if new.loss_pct is not None:
        threshold = loss_threshold(new.loss_pct)
        # numgen yields 0..LOSS_MOD-1, so nft refuses "< LOSS_MOD": 100 % is an unconditional drop.
        match = [] if threshold >= LOSS_MOD else [
            {"match": {"op": "<", "left": {"numgen": {"mode": "random", "mod": LOSS_MOD, "offset": 0}},
                       "right": threshold}}]
        cmds.append({"add": {"rule": {**base, "chain": CHAIN, "comment": f"loss {new.loss_pct}%",
                                      "expr": [*match, {"counter": LOSS_COUNTER}, {"drop": None}]}}})
    return cmds








