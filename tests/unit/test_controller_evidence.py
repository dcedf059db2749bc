"""The replace policy on the evidence runs produce (issue 46 item 4), sans-I/O: congestion only
(scenarios/incast-controller.yaml: healthy but congested) replaces nothing, and a controller that
ignored congestion would; the drop rate counts the losses the QP charges to an EV, not trims or
NACKs; a stray CE mark does not excuse a gray-failing EV."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from agents.protocol import Event
from testbed.controller.policy import (CONFIRM_S, CONGESTED_SHARE, DROP_RATE, DROP_WINDOW, Connection, Controller,
                                       Counts, Path as EVPath)

FIXTURE = Path(__file__).parent / "data" / "incast-controller-ev-stats.jsonl"
"""``ev_stats`` the agents of a real ``testbed run scenarios/incast-controller.yaml`` sent (seed 1,
fat-tree-k4-trim, 2 EVs per QP, no fault; its controller.jsonl held no decision): the three
connections with the highest windowed loss (ranks 2 and 7 into the incast, rank 8 of the victim
pair), each 0.25 s report in which a count changed. Rows: ``[t_s, rank, peer, [[ev_id, sent,
lost, rtx, skips], ...]]``."""
KEYS = ("ev_id", "sent", "lost", "rtx", "skips", "charged")


def connection(rank: int, peer: str, cls=Connection) -> Connection:
    """EVs 0 and 1 (cores c0, c1) and two backups (c2, c3) leaving by the same port."""
    def path(e: int) -> EVPath:
        return EVPath(e, ("h-e", "e-a", f"a-c{e}", f"c{e}-b"))
    return cls(rank, peer, {e: path(e) for e in (0, 1)}, {e: path(e) for e in (2, 3)})


class IgnoresCongestion(Connection):
    """A controller that takes every lossy window for a failure (no congestion excuse)."""

    def drop_rate(self, ev_id: int) -> tuple[float, int, bool]:
        rate, first, _ = super().drop_rate(ev_id)
        return rate, first, False


def stats(rank: int, peer: str, t: float, rows) -> Event:
    return Event(rank, t, "ev_stats", peer=peer, evs=[dict(zip(KEYS, r)) for r in rows])


def replay(reports, cls=Connection) -> Controller:
    """Feed ``reports`` ((t, rank, peer, rows) in time order) to a replace controller, with its
    timers at every report and CONFIRM_S after the last (before a command could time out); return it."""
    keys = sorted({(r, p) for _, r, p, _ in reports})
    c = Controller([connection(r, p, cls) for r, p in keys], "replace")
    for t, rank, peer, rows in reports:
        c.on_event(stats(rank, peer, t, rows), t)
        c.on_timer(t)
    c.on_timer(reports[-1][0] + CONFIRM_S)
    return c


def recorded() -> list:
    return [tuple(json.loads(line)) for line in FIXTURE.read_text().splitlines()]


def test_recorded_incast_congestion_replaces_nothing_though_it_reaches_the_drop_rate():
    """The recorded run's evidence: a window of rank 2's EV 1 loses DROP_RATE (5 of 100 first
    transmissions), congested (a SKIP per first transmission); the controller replaces nothing."""
    reports = recorded()
    assert replay(reports).decisions == []
    hist: dict = defaultdict(list)
    worst = (0.0, 0, False)
    for _, rank, peer, rows in reports:
        for ev_id, *counts in rows:
            hist[rank, peer, ev_id].append(Counts(*counts))
            conn = connection(rank, peer)
            conn.counts = {ev_id: hist[rank, peer, ev_id]}
            rate, first, congested = conn.drop_rate(ev_id)
            if first >= DROP_WINDOW:
                worst = max(worst, (rate, first, congested))
    assert worst[0] >= DROP_RATE and worst[2], worst   # evidence the congestion excuse is what spares


def test_sustained_incast_congestion_replaces_nothing_and_a_controller_ignoring_it_would():
    """incast-controller's worst window held for 2 s (every 0.25 s report: 100 more first
    transmissions, 5 of them lost): with a SKIP per first transmission on both EVs into the
    incast (rank 2), and 30 per 100 on the victim's EV 0 beside it (rank 8, its EV 1 clean), the
    controller decides nothing. One that ignores congestion condemns every congested EV: rank 8's
    EV 0 is replaced (EV 1 vouches for the shared links), rank 2's have no backup (both look bad,
    so every link of theirs is a suspect, the host's included)."""
    reports = []
    for i in range(9):
        t = 1.0 + 0.25 * i
        reports.append((t, 2, "h0_0_0", [(e, 100 * i, 5 * i, 0, 100 * i) for e in (0, 1)]))
        reports.append((t, 8, "h0_0_1", [(0, 100 * i, 5 * i, 0, 30 * i), (1, 100 * i, 0, 0, 0)]))
    assert replay(reports).decisions == []
    ignoring = replay(reports, IgnoresCongestion)
    assert sorted((d["rank"], d["ev_id"], d["decision"]) for d in ignoring.decisions) == \
        [(2, 0, "no_backup"), (2, 1, "no_backup"), (8, 0, "replace")]


def test_a_stray_ce_mark_does_not_excuse_a_gray_ev_but_congestion_does():
    """EV 0 gray-fails (20% of its first transmissions lost, the QP excusing each) and caught one
    CE mark (a SKIP) in the window; EV 1 loses as much but is congested (a SKIP on most first
    transmissions). EV 0 is replaced, EV 1 is not."""
    n = DROP_WINDOW
    assert 1 < CONGESTED_SHARE * n <= 80
    reports = [(1.0, 0, "h1", [(0, 0, 0, 0, 0), (1, 0, 0, 0, 0)]),
               (1.25, 0, "h1", [(0, n, n // 5, 0, 1), (1, n, n // 5, 0, 80)])]
    reports += [(1.25 + 0.25 * i, 0, "h1", [(0, n * i, n // 5 * i, 0, i), (1, n * i, n // 5 * i, 0, 80 * i)])
                for i in range(2, 6)]
    c = replay(reports)
    assert [(d["decision"], d["ev_id"]) for d in c.decisions] == [("replace", 0)]
    assert c.decisions[0]["reason"].startswith("drop rate 20.0% over 100 first transmissions")


def test_the_drop_rate_counts_the_losses_the_qp_charges_not_trims_or_nacks():
    """EV 0 lost 20% of its first transmissions to last-hop trims and PSN_OOR NACKs (``lost``),
    none to a timeout or an inference (``charged`` 0; a last-hop trim is no SKIP either): not a
    failure. EV 1's losses are charged ones: replaced. Without ``charged`` (an agent that does
    not report it) every loss counts, as before: both EVs look bad (no backup then: every link of
    theirs is a suspect)."""
    n = DROP_WINDOW
    reports = [(1.0 + 0.25 * i, 0, "h1", [(0, n * i, n // 5 * i, 0, 0, 0), (1, n * i, n // 5 * i, 0, 0, n // 5 * i)])
               for i in range(6)]
    c = replay(reports)
    assert [(d["decision"], d["ev_id"]) for d in c.decisions] == [("replace", 1)]
    conn = c.conns[(0, "h1")]
    assert conn.counts[0][-1] == Counts(5 * n, n, 0, 0, 0)
    without = replay([(t, r, p, [row[:5] for row in rows]) for t, r, p, rows in reports])
    assert sorted((d["ev_id"], d["decision"]) for d in without.decisions) == [(0, "no_backup"), (1, "no_backup")]
