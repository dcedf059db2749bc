"""The one owner of a fabric's fault state: :class:`FaultInjector`.

It applies every fault primitive (link down/up through :meth:`testbed.fabric.local.Fabric.set_link`,
loss and blackhole through nftables (:mod:`testbed.faults.nft`), rate through the HTB
classes (:func:`testbed.fabric.shaping.compile_into` with ``replace=True``)) and the typed timeline
steps (:mod:`testbed.faults.steps`), keeps what is in force, journals every change, and
:meth:`FaultInjector.revert_all` undoes everything it did.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable

from testbed.fabric.netlink import NetlinkBatchError
from testbed.model.topology import Link

from testbed.faults import nft
from testbed.faults.nft import BLACKHOLE_COUNTER, LOSS_COUNTER, FaultState, table_name
from testbed.faults.steps import Blackhole, Change, LinkState, Loss, Rate, Reconverge, Step
from testbed.model.errors import TestbedFailure

log = logging.getLogger(__name__)

class FaultError(TestbedFailure):
    """The kernel (nftables, tc or netlink) refused a fault change; the message carries its reason."""


class _Gone(Exception):
    """The namespace of a node is gone (fabric stopped)."""


class FaultInjector:
    """Runtime faults on the links of ``fabric`` (a started :class:`testbed.fabric.local.Fabric`).

    Links are named as in the topology (``"a0_0-c0_0"``); an unknown name raises KeyError
    naming it. A change the kernel refuses raises :class:`FaultError` with the kernel's
    message and leaves the link as it was. ``journal`` lists every primitive change as
    ``(monotonic seconds, operation, link, value)``. ``record`` (optional) receives the run
    journal's records (``events.jsonl`` without ``t``) of :meth:`apply_step` and
    :meth:`revert_all`. Rates go through the fabric (:meth:`FabricBackend.set_htb`), which
    reports them to counters (:meth:`FabricBackend.link_rate_bps`).
    """

    def __init__(self, fabric, *, record: Callable[[dict], None] | None = None):
        self.fabric = fabric
        self.record = record or (lambda rec: None)
        self.journal: list[tuple[float, str, str, Any]] = []
        self._down: set[str] = set()              # links this injector took down
        self._state: dict[str, FaultState] = {}   # nftables faults in force
        self._dirty: set[str] = set()             # links whose tables may exist (cleared by revert_all)
        self._rates: dict[str, int] = {}          # HTB rates in force that differ from the topology's
        self._rate_dirty: set[str] = set()        # links whose HTB rate this object changed

    # -- reading ------------------------------------------------------------------------
    @property
    def links_down(self) -> frozenset[str]:
        """Links this injector has taken down and not brought back."""
        return frozenset(self._down)

    @property
    def active(self) -> dict[str, FaultState]:
        """Links with an nftables fault now, and what it is."""
        return dict(self._state)

    @property
    def rates(self) -> dict[str, int]:
        """Links shaped to a rate other than the topology's, bits/s."""
        return dict(self._rates)

    def rate_bps(self, link: Link) -> int:
        """HTB rate in force on ``link``, bits/s."""
        return self._rates.get(link.name, link.params.rate_bps)

    # -- helpers -------------------------------------------------------------------
    def _link(self, name: str) -> Link:
        try:
            return self.fabric.topo.link_by_name[name]
        except KeyError:
            raise KeyError(f"unknown link {name!r}") from None

    def _local_ports(self, link: Link) -> list:
        """The ends of ``link`` this fabric holds: both, or on a shard (:class:`testbed.fabric.local.Shard`)
        the local ones; a fault on a cut link is applied by each server's injector to its end."""
        return [p for p in (link.a, link.b) if self.fabric.is_local(p.node)]

    def _nft(self, node: str, cmds: list[dict], what: str) -> Any:
        try:
            rc, out, err = self.fabric.run_nft(node, cmds)
        except KeyError:
            raise _Gone(f"namespace of {node} is gone (fabric stopped)") from None
        except OSError as exc:   # setns on a closed fd
            raise _Gone(f"{node}: {exc}") from None
        except RuntimeError as exc:
            raise FaultError(f"{what} on {node}: {exc}") from None
        if rc != 0:
            raise FaultError(f"{what} on {node}: nft: {err.strip() or f'exit status {rc}'}")
        return out

    def _apply_nft(self, name: str, new: FaultState, op: str, value: Any) -> None:
        link = self._link(name)
        old = self._state.get(name, FaultState())
        if new == old:
            self.journal.append((time.monotonic(), op, name, value))
            return
        done = []
        self._dirty.add(name)
        try:
            for port in self._local_ports(link):
                self._nft(port.node, nft.transition(name, port.ifname, old.at_end(port.node), new.at_end(port.node)),
                          f"{op} {name}")
                done.append(port)
        except (FaultError, _Gone) as exc:
            for port in done:   # put the ends already changed back
                try:
                    self._nft(port.node, nft.transition(name, port.ifname, new.at_end(port.node),
                                                        old.at_end(port.node)), f"undo {op} {name}")
                except (FaultError, _Gone) as undo_exc:
                    log.error("%s: could not undo %s on %s: %s", name, op, port.node, undo_exc)
            if isinstance(exc, _Gone):
                raise FaultError(str(exc)) from None
            raise
        if new.active:
            self._state[name] = new
        else:
            self._state.pop(name, None)
            self._dirty.discard(name)
        self.journal.append((time.monotonic(), op, name, value))

    # -- primitives ----------------------------------------------------------------------
    def set_link(self, link: str, up: bool) -> None:
        """Take ``link`` administratively down or up (:meth:`testbed.fabric.local.Fabric.set_link`: the
        ``a`` end's port; the ``b`` end loses carrier). Raises KeyError, FaultError."""
        name = self._link(link).name
        try:
            self.fabric.set_link(name, up=up)
        except NetlinkBatchError as exc:
            raise FaultError(str(exc)) from None
        (self._down.discard if up else self._down.add)(name)
        self.journal.append((time.monotonic(), "link_up" if up else "link_down", name, bool(up)))

    def set_loss(self, link: str, percent: float, into: str | None = None) -> None:
        """Drop ``percent`` % (0 < percent <= 100, resolution 1e-4 %) of packets in both directions,
        or with ``into`` only those travelling into that node (a one-way, gray failure).

        Replaces any earlier loss on ``link``. Raises KeyError (unknown link),
        ValueError (percent out of range, ``into`` not an end of the link), FaultError
        (nftables refused).
        """
        nft.loss_threshold(percent)
        lk = self._link(link)
        if into is not None and into not in (lk.a.node, lk.b.node):
            raise ValueError(f"{link}: {into!r} is not an end of the link")
        cur = self._state.get(lk.name, FaultState())
        self._apply_nft(link, dataclasses.replace(cur, loss_pct=float(percent), loss_into=into), "loss",
                        float(percent))

    def clear_loss(self, link: str) -> None:
        """Remove the loss of ``link`` (no-op if none). Raises KeyError, FaultError."""
        cur = self._state.get(self._link(link).name, FaultState())
        self._apply_nft(link, dataclasses.replace(cur, loss_pct=None, loss_into=None), "clear_loss", None)

    def set_blackhole(self, link: str, on: bool) -> None:
        """Drop every packet in both directions of ``link`` (``on``) or stop doing so.

        Carrier, addresses and routes stay up, so no router notices. Raises
        KeyError, FaultError.
        """
        cur = self._state.get(self._link(link).name, FaultState())
        self._apply_nft(link, dataclasses.replace(cur, blackhole=bool(on)), "blackhole", bool(on))

    def set_rate(self, link: str, rate_bps: int | None) -> None:
        """Set the HTB rate (bits/s, ceil and burst follow) of both ends; None: the topology's rate.

        Raises KeyError (unknown link), ValueError (rate not a positive
        integer), FaultError (the kernel refused; the link keeps its old rate).
        """
        lk = self._link(link)
        if rate_bps is not None and (isinstance(rate_bps, bool) or not isinstance(rate_bps, int)
                                     or rate_bps <= 0):
            raise ValueError(f"rate_bps must be a positive int or None, got {rate_bps!r}")
        old = self.rate_bps(lk)
        new = lk.params.rate_bps if rate_bps is None else rate_bps
        done = []
        self._rate_dirty.add(lk.name)
        try:
            for port in self._local_ports(lk):
                self._set_htb(lk, port, new)
                done.append(port)
        except (FaultError, _Gone) as exc:
            for port in done:   # put the end already changed back
                try:
                    self._set_htb(lk, port, old)
                except (FaultError, _Gone) as undo_exc:
                    log.error("%s: could not restore rate %d on %s: %s", link, old, port.node, undo_exc)
            if isinstance(exc, _Gone):
                raise FaultError(str(exc)) from None
            raise
        if new == lk.params.rate_bps:
            self._rates.pop(lk.name, None)
        else:
            self._rates[lk.name] = new
        self.journal.append((time.monotonic(), "rate", lk.name, rate_bps))

    def _set_htb(self, lk: Link, port, rate_bps: int) -> None:
        try:
            self.fabric.set_htb(lk.name, port.node, rate_bps)
        except KeyError:
            raise _Gone(f"namespace of {port.node} is gone (fabric stopped)") from None
        except OSError as exc:
            raise _Gone(f"{port.node}: {exc}") from None
        except RuntimeError as exc:
            raise FaultError(f"{lk.name}: rate {rate_bps} bit/s on {port.node}: {exc}") from None

    # -- typed changes and timeline steps -------------------------------------------------
    def apply(self, change: Change) -> None:
        """Make ``change`` (:mod:`testbed.faults.steps`). Raises as its primitive does."""
        self._appliers[type(change)](self, change)

    _appliers: dict[type, Callable[["FaultInjector", Any], None]] = {
        LinkState: lambda self, c: self.set_link(c.link, c.up),
        Loss: lambda self, c: self.set_loss(c.link, c.percent, c.into) if c.percent else self.clear_loss(c.link),
        Rate: lambda self, c: self.set_rate(c.link, c.rate_bps),
        Blackhole: lambda self, c: self.set_blackhole(c.link, c.on),
        Reconverge: lambda self, c: self.fabric.reconverge(),
    }

    def apply_step(self, step: Step) -> dict:
        """Apply ``step.change`` and journal it: returns the record given to ``record``.

        A fault: ``{"kind": "fault", "action", "link", "phase", "step": kind, "value", "index",
        "planned_s"}`` (``planned_s`` only when the step has one: :class:`Step`),
        plus the link's nftables drop counters (``loss_dropped``, ``blackhole_dropped``) read
        just before a loss or blackhole is reverted. A reconvergence: ``{"kind": "reconverge",
        "links_down": [...]}``. Raises as :meth:`apply`; nothing is journaled then.
        """
        change = step.change
        drops = self._drops(change.link) if isinstance(change, (Loss, Blackhole)) and step.phase == "revert" else {}
        self.apply(change)
        if isinstance(change, Reconverge):
            rec = {"kind": "reconverge", "links_down": sorted(self._down)}
        else:
            rec = {"kind": "fault", "action": step.action, "link": change.link, "phase": step.phase,
                   "step": change.kind, "value": change.value, "index": step.index, **drops}
            if step.planned_s is not None:
                rec["planned_s"] = step.planned_s
            if isinstance(change, Loss) and change.into:
                rec["into"] = change.into
        self.record(rec)
        return rec

    def _drops(self, link: str) -> dict:
        """The nftables drop counters of ``link`` (before its rules change), {} if none."""
        try:
            return self.counters().get(link, {})
        except Exception as exc:  # noqa: BLE001 - a counter read never stops a run
            log.warning("fault counters of %s: %s", link, exc)
            return {}

    def counters(self) -> dict[str, dict]:
        """Packets dropped per link with an active nft rule, both ends summed.

        ``{link: {"loss_dropped": packets, "blackhole_dropped": packets}}``,
        cumulative since the link's first active fault (the nftables named
        counters; reset once the link has no fault). Source: ``list counters``
        in each end's namespace. Raises FaultError if nftables refuses.
        """
        out = {}
        for name in sorted(self._state):
            link = self._link(name)
            totals = {LOSS_COUNTER: 0, BLACKHOLE_COUNTER: 0}
            for port in self._local_ports(link):
                if not self._state[name].at_end(port.node).active:   # a one-way loss's other end has no table
                    continue
                try:
                    listing = self._nft(port.node, [{"list": {"counters": {"family": "netdev",
                                                                            "table": table_name(name)}}}],
                                        f"counters {name}")
                except _Gone as exc:
                    raise FaultError(str(exc)) from None
                for item in (listing or {}).get("nftables", []):
                    counter = item.get("counter")
                    if counter and counter.get("name") in totals:
                        totals[counter["name"]] += int(counter.get("packets", 0))
            out[name] = totals
        return out

    # -- undo ---------------------------------------------------------------------------
    def _on_both_ends(self, name: str, errors: list[str], what: str, undo) -> bool:
        """``undo(link, port)`` on both ends of ``name``; a gone namespace is nothing to undo,
        a FaultError is collected in ``errors``. True if both ends are done."""
        link = self._link(name)
        ok = True
        for port in self._local_ports(link):
            try:
                undo(link, port)
            except _Gone as exc:
                log.info("%s %s: %s; nothing to undo there", what, name, exc)
            except FaultError as exc:
                errors.append(str(exc))
                ok = False
        return ok

    def _revert_links(self, errors: list[str]) -> None:
        for name in sorted(self._down):
            try:
                self.fabric.set_link(name, up=True)
            except KeyError:     # the fabric has no namespace for it any more: nothing to undo
                log.info("revert %s: fabric stopped; nothing to undo there", name)
            except (NetlinkBatchError, OSError) as exc:
                errors.append(f"link up {name}: {exc}")
                continue
            else:
                self.record({"kind": "fault", "action": "end", "link": name, "phase": "revert",
                             "step": "link", "value": True})
            self._down.discard(name)

    def revert_all(self) -> None:
        """Undo every fault: bring up every link taken down, delete every nftables table this
        object created, restore every rate. Journaled: one record per link brought up, then
        ``{"kind": "fault", "action": "end", "link": None, "phase": "revert", "step": "all",
        "nft_drops": {link: counters}}`` once the tables and rates are restored.

        Idempotent. A namespace that is already gone (fabric stopped) is logged and skipped;
        other failures are attempted for every link and then raised together as one
        FaultError (those links stay recorded, so a later call retries them).
        """
        errors: list[str] = []
        self._revert_links(errors)
        drops = self._drops_all()
        nft_errors = len(errors)
        for name in sorted(self._dirty):
            if self._on_both_ends(name, errors, "revert", lambda link, port: self._nft(
                    port.node, nft.transition(name, port.ifname, FaultState(blackhole=True), FaultState()),
                    f"revert {name}")):
                self._dirty.discard(name)
                self._state.pop(name, None)
        for name in sorted(self._rate_dirty):
            if self._on_both_ends(name, errors, "revert rate of",
                                  lambda link, port: self._set_htb(link, port, link.params.rate_bps)):
                self._rates.pop(name, None)
                self._rate_dirty.discard(name)
        self.journal.append((time.monotonic(), "revert_all", "*", None))
        if len(errors) == nft_errors:
            self.record({"kind": "fault", "action": "end", "link": None, "phase": "revert", "step": "all",
                         "nft_drops": drops})
        if errors:
            raise FaultError("revert_all: " + "; ".join(errors))

    def _drops_all(self) -> dict:
        if not self._state:
            return {}
        try:
            return self.counters()
        except Exception as exc:  # noqa: BLE001 - a counter read never stops the revert
            log.warning("fault counters: %s", exc)
            return {}
