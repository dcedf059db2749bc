"""Runtime faults on fabric links: random loss, blackholes (nftables) and rate changes (HTB).

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

nftables is driven through libnftables' JSON API (Debian ``python3-nftables``).
libnftables opens its netlink socket when its context is created, so a fresh
context is created, used and freed inside :func:`testbed.netlink.netns` for
every command; without the binding, ``nft -j -f -`` runs under ``nsenter``.

Rate changes replace the HTB class rate (and burst) on both ends
(:func:`testbed.shaping.compile_into` with ``replace=True``); the rate now in
force is recorded on the fabric (:func:`current_rate_bps`), where
:class:`testbed.counters.LinkCounters` reads it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from testbed import routing, shaping
from testbed.netlink import Batch, NetlinkBatchError, netns
from testbed.topology import Link

log = logging.getLogger(__name__)

TABLE_PREFIX = "mrc_fault_"
CHAIN = "ingress"
CHAIN_PRIORITY = -500
LOSS_COUNTER = "loss_dropped"
BLACKHOLE_COUNTER = "blackhole_dropped"
#: numgen modulus: loss resolution is 100 / LOSS_MOD percent (1e-4 %).
LOSS_MOD = 1_000_000
_RATES_ATTR = "_fault_rate_bps"


class FaultError(RuntimeError):
    """The kernel (nftables or tc) refused a fault change; the message carries its reason."""


class _Gone(Exception):
    """The namespace of a node is gone (fabric stopped)."""


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
    """nftables faults of one link: loss in percent (None: no loss) and blackhole."""

    loss_pct: float | None = None
    blackhole: bool = False

    @property
    def active(self) -> bool:
        return self.loss_pct is not None or self.blackhole


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


def current_rate_bps(fabric, link: Link) -> int:
    """HTB rate in bits/s now configured on ``link``: set by :meth:`LinkFaults.set_rate`, else the topology's."""
    return getattr(fabric, _RATES_ATTR, {}).get(link.name, link.params.rate_bps)


# -- nftables runners --------------------------------------------------------------------
def have_nft_binding() -> bool:
    """True if Debian's python3-nftables (libnftables JSON API) is importable."""
    try:
        import nftables  # noqa: F401
    except ImportError:
        return False
    return True


def _run_binding(fd: int, cmds: list[dict]) -> tuple[int, Any, str]:
    """(rc, parsed JSON output, error text) of one transaction in namespace ``fd``.

    libnftables 1.0.6 opens its netlink socket in nft_ctx_new (checked: a
    context made inside the namespace acts there even when used outside);
    the command runs inside too, so a socket reopened on EINTR stays there.
    """
    import nftables
    with netns(fd):
        ctx = nftables.Nftables()   # opens its netlink socket here, in the namespace
        try:
            ctx.set_json_output(True)
            return ctx.json_cmd({"nftables": cmds})
        finally:
            del ctx                 # nft_ctx_free: the socket must not pin the namespace


def _run_nft_binary(fd: int, cmds: list[dict]) -> tuple[int, Any, str]:
    """As :func:`_run_binding`, via ``nsenter --net=<fd> nft -j -f -`` (no binding installed)."""
    nft = shutil.which("nft") or "/usr/sbin/nft"
    proc = subprocess.run(["nsenter", f"--net=/proc/self/fd/{fd}", nft, "-j", "-f", "-"],
                          input=json.dumps({"nftables": cmds}), capture_output=True, text=True,
                          pass_fds=(fd,), timeout=30, check=False)
    out = json.loads(proc.stdout) if proc.stdout.strip() else ""
    return proc.returncode, out, proc.stderr


class LinkFaults:
    """Runtime faults on fabric links; every change journaled so revert_all() undoes it.

    ``fabric`` is a started :class:`testbed.fabric.Fabric`. Links are named
    as in the topology (``"a0_0-c0_0"``); an unknown name raises KeyError
    naming it. A change the kernel refuses raises :class:`FaultError` with the
    nftables or netlink message and leaves the link as it was. ``journal``
    lists every change as ``(monotonic seconds, operation, link, value)``.
    """

    def __init__(self, fabric):
        self.fabric = fabric
        self.journal: list[tuple[float, str, str, Any]] = []
        self._state: dict[str, FaultState] = {}
        self._dirty: set[str] = set()        # links whose tables may exist (cleared by revert_all)
        self._rate_dirty: set[str] = set()   # links whose HTB rate this object changed
        self._run = _run_binding if have_nft_binding() else _run_nft_binary

    # -- helpers -------------------------------------------------------------------
    def _link(self, name: str) -> Link:
        try:
            return self.fabric.topo.link_by_name[name]
        except KeyError:
            raise KeyError(f"unknown link {name!r}") from None

    def _nsfd(self, node: str) -> int:
        try:
            return self.fabric.nsfd(node)
        except KeyError:
            raise _Gone(f"namespace of {node} is gone (fabric stopped)") from None

    def _nft(self, node: str, cmds: list[dict], what: str) -> Any:
        fd = self._nsfd(node)
        try:
            rc, out, err = self._run(fd, cmds)
        except OSError as exc:   # setns on a closed fd
            raise _Gone(f"{node}: {exc}") from None
        if rc != 0:
            raise FaultError(f"{what} on {node}: nft: {err.strip() or f'exit status {rc}'}")
        return out

    def _apply(self, name: str, new: FaultState, op: str, value: Any) -> None:
        link = self._link(name)
        old = self._state.get(name, FaultState())
        if new == old:
            self.journal.append((time.monotonic(), op, name, value))
            return
        done = []
        self._dirty.add(name)
        try:
            for port in (link.a, link.b):
                self._nft(port.node, transition(name, port.ifname, old, new), f"{op} {name}")
                done.append(port)
        except (FaultError, _Gone) as exc:
            for port in done:   # put the ends already changed back
                try:
                    self._nft(port.node, transition(name, port.ifname, new, old), f"undo {op} {name}")
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

    # -- faults ----------------------------------------------------------------------
    def set_loss(self, link: str, percent: float) -> None:
        """Drop ``percent`` % (0 < percent <= 100, resolution 1e-4 %) of packets in both directions.

        Replaces any earlier loss on ``link``. Raises KeyError (unknown link),
        ValueError (percent out of range), FaultError (nftables refused).
        """
        loss_threshold(percent)
        cur = self._state.get(self._link(link).name, FaultState())
        self._apply(link, dataclasses.replace(cur, loss_pct=float(percent)), "loss", float(percent))

    def clear_loss(self, link: str) -> None:
        """Remove the loss of ``link`` (no-op if none). Raises KeyError, FaultError."""
        cur = self._state.get(self._link(link).name, FaultState())
        self._apply(link, dataclasses.replace(cur, loss_pct=None), "clear_loss", None)

    def set_blackhole(self, link: str, on: bool) -> None:
        """Drop every packet in both directions of ``link`` (``on``) or stop doing so.

        Carrier, addresses and routes stay up, so no router notices. Raises
        KeyError, FaultError.
        """
        cur = self._state.get(self._link(link).name, FaultState())
        self._apply(link, dataclasses.replace(cur, blackhole=bool(on)), "blackhole", bool(on))

    def set_rate(self, link: str, rate_bps: int | None) -> None:
        """Set the HTB rate (bits/s, ceil and burst follow) of both ends; None: the topology's rate.

        Raises KeyError (unknown link), ValueError (rate not a positive
        integer), FaultError (the kernel refused; the link keeps its old rate).
        """
        lk = self._link(link)
        if rate_bps is not None and (isinstance(rate_bps, bool) or not isinstance(rate_bps, int)
                                     or rate_bps <= 0):
            raise ValueError(f"rate_bps must be a positive int or None, got {rate_bps!r}")
        old = current_rate_bps(self.fabric, lk)
        new = lk.params.rate_bps if rate_bps is None else rate_bps
        done = []
        self._rate_dirty.add(lk.name)
        try:
            for port in (lk.a, lk.b):
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
        rates = self.fabric.__dict__.setdefault(_RATES_ATTR, {})
        if new == lk.params.rate_bps:
            rates.pop(lk.name, None)
        else:
            rates[lk.name] = new
        self.journal.append((time.monotonic(), "rate", lk.name, rate_bps))

    def _set_htb(self, lk: Link, port, rate_bps: int) -> None:
        tc = shaping.plan(dataclasses.replace(lk.params, rate_bps=rate_bps), have_netem=self.fabric.have_netem)
        batch = Batch(f"{lk.name}: rate {rate_bps} bit/s on {port.node}")
        shaping.compile_into(batch, routing.port_ifindex(self.fabric.topo, port.node, lk), tc, replace=True)
        fd = self._nsfd(port.node)
        try:
            batch.send(fd)
        except NetlinkBatchError as exc:
            raise FaultError(str(exc)) from None
        except OSError as exc:
            raise _Gone(f"{port.node}: {exc}") from None

    def _on_both_ends(self, name: str, errors: list[str], what: str, undo) -> bool:
        """``undo(link, port)`` on both ends of ``name``; a gone namespace is nothing to undo,
        a FaultError is collected in ``errors``. True if both ends are done."""
        link = self._link(name)
        ok = True
        for port in (link.a, link.b):
            try:
                undo(link, port)
            except _Gone as exc:
                log.info("%s %s: %s; nothing to undo there", what, name, exc)
            except FaultError as exc:
                errors.append(str(exc))
                ok = False
        return ok

    # -- reading ----------------------------------------------------------------------
    @property
    def active(self) -> dict[str, FaultState]:
        """Links with an nftables fault now, and what it is."""
        return dict(self._state)

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
            for port in (link.a, link.b):
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
    def revert_all(self) -> None:
        """Undo every fault: delete every table this object created, restore every rate.

        Idempotent. A namespace that is already gone (fabric stopped) is
        logged and skipped; other failures are attempted for every link and
        then raised together as one FaultError (those links stay recorded, so
        a later call retries them).
        """
        errors: list[str] = []
        for name in sorted(self._dirty):
            if self._on_both_ends(name, errors, "revert", lambda link, port: self._nft(
                    port.node, transition(name, port.ifname, FaultState(blackhole=True), FaultState()),
                    f"revert {name}")):
                self._dirty.discard(name)
                self._state.pop(name, None)
        rates = self.fabric.__dict__.get(_RATES_ATTR, {})
        for name in sorted(self._rate_dirty):
            if self._on_both_ends(name, errors, "revert rate of",
                                  lambda link, port: self._set_htb(link, port, link.params.rate_bps)):
                rates.pop(name, None)
                self._rate_dirty.discard(name)
        self.journal.append((time.monotonic(), "revert_all", "*", None))
        if errors:
            raise FaultError("revert_all: " + "; ".join(errors))
