"""Reading a run directory: manifest.json and the per-transport JSONL files.

Small files (``events.jsonl``, ``cpu.jsonl``) are kept as lists of dicts. The two big ones
are turned into columns while they are parsed, so that no per-record dict outlives its line:
``samples.jsonl`` (an agent sample per rank every 10 ms: ~100k lines of nested flows and EVs
in a 16-rank, 60 s run) into a :class:`SampleTable`, ``links.jsonl`` (every link end every
100 ms) into a :class:`LinkTable`. (Keeping them as dicts was most of the cost: besides the
memory, the cyclic garbage collector rescans every live container again and again.)
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Iterable

import numpy as np

from testbed.rundir.errors import MetricsError

FlowKey = tuple  # (rank, peer, dir)
_MISSING = object()
_EV_ID = itemgetter("ev_id")
_SENT = itemgetter("sent")


def _sent(ev: dict) -> float:
    """An EV's ``sent`` counter as a float, NaN when absent or not a number."""
    v = ev.get("sent")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def _floats(values: list) -> np.ndarray:
    """float64 array of JSON numbers, None -> NaN (as ``float(v)``, None -> NaN)."""
    return np.array(values, dtype=float) if values else np.zeros(0)


class _FlowColumns:
    """One flow's raw sample values in file order (absolute times).

    EVs: only the last-seen value of each EV id matters (:meth:`SampleTable.flows`), so an
    ``evs`` list is dropped as soon as a later sample (not earlier in time) brings the same
    EV ids; ``ev_lists`` keeps the others, ``ev_last`` the newest, with their row indices.
    Every listed EV's ``sent`` counter is kept too, as numbers only: ``sent_vals`` (float64,
    NaN when absent) holds each listing's values in EV order, ``sent_rows`` its row and
    ``sent_ids`` its EV ids (one shared tuple while they do not change)."""
    __slots__ = ("t", "bytes", "retransmits", "rtt_s", "cwnd_bytes", "retransmitted_bytes", "has_rtx_bytes",
                 "busy", "has_busy", "ev_rows", "ev_lists", "ev_last", "ev_row", "ev_ids", "ev_t",
                 "sent_rows", "sent_ids", "sent_vals")

    def __init__(self):
        self.t: list = []
        self.bytes: list = []
        self.retransmits: list = []
        self.rtt_s: list = []
        self.cwnd_bytes: list = []
        self.retransmitted_bytes: list = []
        self.has_rtx_bytes = False
        self.busy: list = []
        self.has_busy = False
        self.ev_rows: list = []
        self.ev_lists: list = []
        self.ev_last: list | None = None
        self.ev_row = -1
        self.ev_ids: tuple = ()
        self.ev_t = -math.inf
        self.sent_rows: list = []
        self.sent_ids: list = []
        self.sent_vals = array("d")


class SampleTable:
    """Agent samples (``samples.jsonl``) in columns: ``t`` (every sample's wall-clock time,
    file order, shape (nsamples,)), ``ranks`` (set) and per flow ``(rank, peer, dir)`` its
    counters; :meth:`flows` turns them into :class:`testbed.metrics.series.FlowSeries`.
    Build with :meth:`from_records` (raises :class:`MetricsError` on a sample without
    ``t``/``rank``/``flows``)."""

    def __init__(self, t: np.ndarray, ranks: set, flows: dict[FlowKey, _FlowColumns],
                 loop: list[tuple] | None = None):
        self.t, self.ranks, self._flows = t, ranks, flows
        #: (t, rank, late_max_s) of every sample carrying the agent's event-loop stats
        #: (``"loop": {"timers", "late_sum_s", "late_max_s"}``): timer lateness since the last sample
        self.loop = loop or []

    def __len__(self) -> int:
        return len(self.t)

    @classmethod
    def from_records(cls, records: Iterable[dict]) -> "SampleTable":
        cols: dict[FlowKey, _FlowColumns] = {}
        ts: list = []
        ranks: set = set()
        loop: list[tuple] = []
        add_t, missing, ev_id = ts.append, _MISSING, _EV_ID
        for n, s in enumerate(records):
            try:
                t, rank, flows = float(s["t"]), s["rank"], s["flows"]
            except (KeyError, TypeError, ValueError) as exc:
                raise MetricsError(f"samples.jsonl record {n + 1}: needs t, rank, flows ({exc})") from exc
            add_t(t)
            ranks.add(rank)
            ls = s.get("loop")
            if ls:
                loop.append((t, rank, float(ls.get("late_max_s") or 0.0)))
            for f in flows:
                key = (rank, f.get("peer"), f.get("dir", "rx"))
                c = cols.get(key)
                if c is None:
                    c = cols[key] = _FlowColumns()
                c.t.append(t)
                c.bytes.append(f.get("bytes"))
                c.retransmits.append(f.get("retransmits"))
                c.rtt_s.append(f.get("rtt_s"))
                c.cwnd_bytes.append(f.get("cwnd_bytes"))
                rb = f.get("retransmitted_bytes", missing)
                c.retransmitted_bytes.append(rb)
                if rb is not missing:
                    c.has_rtx_bytes = True
                busy = f.get("busy")
                c.busy.append(busy)
                if busy is not None:
                    c.has_busy = True
                evs = f.get("evs")
                if evs:
                    ids = tuple(map(ev_id, evs))
                    if ids != c.ev_ids or t < c.ev_t:   # the previous list still counts
                        if c.ev_last is not None:
                            c.ev_rows.append(c.ev_row)
                            c.ev_lists.append(c.ev_last)
                        c.ev_ids = ids
                    c.ev_last, c.ev_row, c.ev_t = evs, len(c.t) - 1, t
                    c.sent_rows.append(len(c.t) - 1)
                    c.sent_ids.append(c.ev_ids)
                    n_vals = len(c.sent_vals)
                    try:
                        c.sent_vals.extend(map(_SENT, evs))
                    except (KeyError, TypeError):   # an EV without a numeric "sent": NaN for it
                        del c.sent_vals[n_vals:]
                        c.sent_vals.extend(map(_sent, evs))
        return cls(np.array(ts, dtype=float), ranks, cols, loop)

    def flows(self, t0_s: float) -> dict:
        """``{(rank, peer, dir): FlowSeries}`` with times relative to ``t0_s``, each flow's
        samples sorted by time (stable); ``evs``: per EV id its last-seen (in that order)
        ``state``, ``sent``, ``lost``; ``ev_sent``: per EV id its ``sent`` at every sample
        that listed it."""
        out = {}
        for key, c in self._flows.items():
            t = np.array(c.t, dtype=float) - t0_s
            order = np.argsort(t, kind="stable")
            ordered = bool(np.all(order[1:] > order[:-1]))
            take = (lambda a: a) if ordered else (lambda a: a[order])  # noqa: E731
            rb = None
            if c.has_rtx_bytes:
                rb = take(_floats([None if v is _MISSING else v for v in c.retransmitted_bytes]))
            busy = None
            if c.has_busy:   # a sample without the flag counts as busy: never hides a stall
                busy = take(np.array([b is not False for b in c.busy], dtype=bool))
            ev_lists, ev_rows = c.ev_lists, c.ev_rows
            if c.ev_last is not None:
                ev_lists, ev_rows = ev_lists + [c.ev_last], ev_rows + [c.ev_row]
            if not ordered and len(ev_lists) > 1:
                pos = np.empty(len(order), int)
                pos[order] = np.arange(len(order))
                ev_lists = [ev_lists[i] for i in np.argsort(pos[ev_rows], kind="stable")]
            last = {ev["ev_id"]: ev for evs in ev_lists for ev in evs}
            evs = {ev: {"state": v.get("state"), "sent": v.get("sent"), "lost": v.get("lost")}
                   for ev, v in last.items()}
            out[key] = FlowSeries(take(t), np.nan_to_num(take(_floats(c.bytes))),
                                  np.nan_to_num(take(_floats(c.retransmits))), take(_floats(c.rtt_s)),
                                  take(_floats(c.cwnd_bytes)), rb, evs, busy, _ev_sent(c, t))
        return out


def _ev_sent(c: _FlowColumns, t: np.ndarray) -> dict:
    """``{ev_id: (t_s, sent)}`` of one flow: each EV's ``sent`` counter at every sample that
    listed it, float64 arrays of one shape sorted by time (stable); ``t``: the flow's sample times
    (relative s) in file order."""
    rows_of: dict = {}
    vals = np.frombuffer(c.sent_vals, dtype=float) if len(c.sent_vals) else np.zeros(0)
    start = off = 0
    rows = np.array(c.sent_rows, dtype=int)
    while start < len(rows):   # runs of listings with the same EV ids: one (listings, EVs) block each
        ids = c.sent_ids[start]
        end = start + 1
        while end < len(rows) and (c.sent_ids[end] is ids or c.sent_ids[end] == ids):
            end += 1
        block = vals[off:off + (end - start) * len(ids)].reshape(end - start, len(ids))
        for j, ev in enumerate(ids):
            rows_of.setdefault(ev, []).append((rows[start:end], block[:, j]))
        off += (end - start) * len(ids)
        start = end
    out = {}
    for ev, parts in rows_of.items():
        r = np.concatenate([p[0] for p in parts])
        v = np.concatenate([p[1] for p in parts])
        order = np.argsort(t[r], kind="stable")
        out[ev] = (t[r][order], v[order])
    return out


_SWITCH_COUNTERS = ("ecn_marked", "trimmed", "switch_drops")


class LinkTable:
    """Kernel link counters (``links.jsonl``) in columns per link end ``(link, end)``:
    ``{"t", "tx_bytes", "drops", "rate_bps"}`` float arrays sorted by wall-clock time
    (stable), plus ``ecn_marked``, ``trimmed`` and ``switch_drops`` on ends that ran the switch
    program (:mod:`testbed.fabric.switch`); a missing counter is 0, a missing rate NaN. ``t``: every
    record's time."""

    def __init__(self, t: np.ndarray, ends: dict[tuple, dict[str, np.ndarray]]):
        self.t, self.ends = t, ends

    def __len__(self) -> int:
        return len(self.t)

    @classmethod
    def from_records(cls, records: Iterable[dict]) -> "LinkTable":
        groups: dict[tuple, tuple] = {}
        ts: list = []
        add_t = ts.append
        for r in records:
            key = (r["link"], r.get("end", "a"))
            g = groups.get(key)
            if g is None:
                g = groups[key] = ([], [], [], [], None)
            t = r["t"]
            add_t(t)
            g[0].append(t)
            g[1].append(r.get("tx_bytes", 0))
            g[2].append(r.get("drops", 0))
            g[3].append(r.get("rate_bps"))
            if "ecn_marked" in r:
                if g[4] is None:
                    g = groups[key] = (*g[:4], ([], [], []))
                for col, name in zip(g[4], _SWITCH_COUNTERS):
                    col.append(r.get(name, 0))
        ends = {}
        for key, (t, tx, drops, rate, sw) in groups.items():
            t = np.array(t, dtype=float)
            order = np.argsort(t, kind="stable")
            ends[key] = {"t": t[order], "tx_bytes": _floats(tx)[order], "drops": _floats(drops)[order],
                         "rate_bps": _floats(rate)[order]}
            if sw is not None and len(sw[0]) == len(t):
                ends[key].update({name: _floats(col)[order] for col, name in zip(sw, _SWITCH_COUNTERS)})
        return cls(np.array(ts, dtype=float), ends)



@dataclass
class FlowSeries:
    """One flow's raw samples (t_s relative, sorted) as arrays of shape (nsamples,)."""
    t_s: np.ndarray
    bytes: np.ndarray
    retransmits: np.ndarray
    rtt_s: np.ndarray
    cwnd_bytes: np.ndarray
    retransmitted_bytes: np.ndarray | None
    evs: dict  # ev_id -> last seen {"state", "sent", "lost"}
    #: tx flows: whether a posted write was unacknowledged at each sample (None: not recorded)
    busy: np.ndarray | None = None
    #: ev_id -> (t_s, sent): the EV's cumulative transmissions (packets) at every sample that
    #: listed it, float64 arrays of one shape sorted by time; {} for a flow without EVs
    ev_sent: dict = field(default_factory=dict)
