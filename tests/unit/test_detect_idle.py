"""Time to detect per crossing QP, timed from the QP's first transmission into the fault: a QP
idle at the fault (a ring step waiting for its upstream) cannot detect it before it sends on a
crossing EV, so its idle time is not detection time. ``detect_worst_s``/``detect_median_s`` take
it out, ``*_from_fault_s`` keep the earlier from-the-fault figures, ``detect_per_qp`` shows both.
On the synthetic run of test_metrics, with samples of the QPs' crossing EVs added."""

from __future__ import annotations

import json

import numpy as np
import pytest

from testbed import metrics
from testbed.metrics.summary import send_start
from testbed.rundir.tables import SampleTable

from .test_claims_missing_detect import LINK, _ev
from .test_metrics import FAULT_T, T0, make_run

DT = 0.02        # the added samples' interval, s


def _tx(rank: int, peer: str, t: float, sent: dict, busy: bool | None = True) -> dict:
    """One sample of rank's tx flow towards ``peer`` at relative ``t`` with EVs ``{ev_id: sent}``."""
    flow = {"peer": peer, "dir": "tx", "bytes": 0, "evs": [{"ev_id": e, "state": "GOOD", "sent": n}
                                                          for e, n in sent.items()]}
    if busy is not None:
        flow["busy"] = busy
    return {"t": T0 + t, "rank": rank, "flows": [flow]}


def _series(records: list[dict], key: tuple):
    return SampleTable.from_records(records).flows(T0)[key]


def _three_qps_with_samples(tmp_path):
    """Three ranks in a ring, each tx QP with one EV across LINK (rank 0's EV 3, rank 1's EV 1,
    rank 2's EV 0) and one elsewhere; make_run retires rank 0's EV 3 at +50 ms. Samples every
    20 ms: rank 0 sends on EV 3 in every one (busy at the fault); rank 1 is idle from before the
    fault (not busy, counters still) until it sends in the sample at +120 ms, and retires EV 1 at
    +200 ms; rank 2 has no samples and retires EV 0 at +150 ms."""
    run = make_run(tmp_path, transports=("mrc",), world_size=3)
    records = [json.loads(line) for line in (run / "mrc" / "samples.jsonl").read_text().splitlines()]
    for i in range(int(2.0 / DT) + 1):
        t = i * DT
        records.append(_tx(0, "h1", t, {3: 10 * i, 2: 10 * i}))
        moved = t >= FAULT_T + 0.12 - 1e-9
        records.append(_tx(1, "h2", t, {1: 500 + (i if moved else 0), 2: 500 + (i if moved else 0)},
                           busy=moved or t < FAULT_T - 0.05))
    records.sort(key=lambda r: r["t"])
    tr = metrics.load_transport(run, "mrc")
    tr.samples = SampleTable.from_records(records)
    world = ["h0", "h1", "h2"]
    crossing = {0: 3, 1: 1, 2: 0}
    tr.jobs = [{"rank": r, "world": world,
                "send_to": [{"host": world[(r + 1) % 3], "evs": [
                    {"ev_id": crossing[r], "links": [f"h{r}-e0_0", LINK]},
                    {"ev_id": 2 if crossing[r] != 2 else 5, "links": [f"h{r}-e0_0", "e0_0-a0_1"]}]}],
                "recv_from": []} for r in range(3)]
    tr.events = tr.events + [_ev(1, "h2", 1, FAULT_T + 0.2, "GOOD", "ASSUMED_BAD"),
                             _ev(2, "h0", 0, FAULT_T + 0.15, "GOOD", "ASSUMED_BAD")]
    return metrics.analyze_transport(tr, 3).summary


def test_an_idle_qp_is_timed_from_its_first_send_and_the_old_figure_is_kept(tmp_path):
    s = _three_qps_with_samples(tmp_path)
    by_rank = {q["rank"]: q for q in s["detect_per_qp"]}
    # rank 1: idle at the fault, first counted in the sample at +120 ms: timed from the one before
    assert by_rank[1]["start"] == "idle"
    assert by_rank[1]["idle_before_s"] == pytest.approx(0.10, abs=1e-6)
    assert by_rank[1]["from_fault_s"] == pytest.approx(0.20, abs=1e-6)
    assert by_rank[1]["detect_s"] == pytest.approx(0.10, abs=1e-6)
    # rank 0: sending at the fault, both figures equal
    assert by_rank[0]["start"] == "sending" and by_rank[0]["idle_before_s"] == 0.0
    assert by_rank[0]["detect_s"] == by_rank[0]["from_fault_s"] == pytest.approx(0.05, abs=1e-6)
    # rank 2: no samples, timed from the fault as before
    assert by_rank[2]["start"] == "no_samples" and by_rank[2]["idle_before_s"] == 0.0
    assert by_rank[2]["detect_s"] == by_rank[2]["from_fault_s"] == pytest.approx(0.15, abs=1e-6)
    assert s["detect_worst_s"] == pytest.approx(0.15, abs=1e-6)             # rank 2's, no longer rank 1's idle
    assert s["detect_worst_from_fault_s"] == pytest.approx(0.20, abs=1e-6)  # rank 1's, idle time included
    assert s["detect_median_s"] == pytest.approx(0.10, abs=1e-6)
    assert s["detect_median_from_fault_s"] == pytest.approx(0.15, abs=1e-6)
    assert s["detect_s"] == pytest.approx(0.05, abs=1e-6)                  # unchanged: the first retirement
    f = s["per_fault"][0]
    assert all(f[k] == s[k] for k in metrics.summary.DETECT_QP_KEYS)
    assert set(metrics.summary.DETECT_QP_KEYS) <= set(metrics.DEFINITIONS)


def test_an_undetecting_qp_has_no_figures_and_makes_both_worsts_none(tmp_path):
    s = _three_qps_with_samples(tmp_path)
    assert s["detect_qps"]["detected"] == 3
    s2 = metrics.summary.detect_over_qps(
        [], {(0, "tx", "h1", 3): (LINK,)}, {"t_s": FAULT_T, "links": [LINK]},
        [{"link": LINK, "t_s": FAULT_T, "until_s": 2.0}])
    assert s2["detect_per_qp"] == [{"rank": 0, "peer": "h1", "detect_s": None, "from_fault_s": None,
                                    "idle_before_s": None, "start": None}]
    assert s2["detect_worst_s"] is None and s2["detect_worst_from_fault_s"] is None


def test_the_start_is_the_last_sample_before_the_counters_moved():
    """Samples 20 ms apart; EV 1's counter first exceeds its value at the fault in the sample at
    +50 ms: the QP began sending after +30 ms, so its detection is timed from +30 ms (never later
    than the true first transmission), even when it retired at +40 ms, between the samples."""
    t_f = FAULT_T
    recs = [_tx(0, "h1", t_f + dt, {1: n, 2: 7}, busy=False)
            for dt, n in ((-0.01, 40), (0.01, 40), (0.03, 40), (0.05, 45), (0.07, 50))]
    fs = _series(recs, (0, "h1", "tx"))
    assert send_start(fs, [1], t_f, t_f + 0.2) == (pytest.approx(t_f + 0.03), "idle")
    assert send_start(fs, [1], t_f, t_f + 0.04) == (pytest.approx(t_f + 0.03), "idle")
    assert send_start(fs, [1, 2], t_f, t_f + 0.2)[0] == pytest.approx(t_f + 0.03)   # EV 2 never moves
    # retired before the last still sample: nothing sent into it before the retirement
    assert send_start(fs, [1], t_f, t_f + 0.02) == (t_f, "no_send")
    assert send_start(fs, [2], t_f, t_f + 0.2) == (t_f, "no_send")
    # moved in the first sample after the fault: it may have sent before the fault, timed from it
    recs[2] = _tx(0, "h1", t_f + 0.03, {1: 41, 2: 7}, busy=False)
    recs[1] = _tx(0, "h1", t_f + 0.01, {1: 41, 2: 7}, busy=False)
    assert send_start(_series(recs, (0, "h1", "tx")), [1], t_f, t_f + 0.2) == (t_f, "sending")


def test_a_qp_with_a_write_outstanding_throughout_is_timed_from_the_fault():
    """Counters still after the fault but a write outstanding at every sample until it sent
    again: the loss it found may be of a packet sent before the fault, so no idle time is taken
    out; busy not recorded (older agents): the counters alone decide."""
    t_f = FAULT_T
    steps = ((-0.01, 40), (0.01, 40), (0.03, 40), (0.05, 45))
    busy = _series([_tx(0, "h1", t_f + dt, {1: n}, busy=True) for dt, n in steps], (0, "h1", "tx"))
    assert send_start(busy, [1], t_f, t_f + 0.2) == (t_f, "awaiting_acks")
    unknown = _series([_tx(0, "h1", t_f + dt, {1: n}, busy=None) for dt, n in steps], (0, "h1", "tx"))
    assert unknown.busy is None
    assert send_start(unknown, [1], t_f, t_f + 0.2) == (pytest.approx(t_f + 0.03), "idle")


def test_missing_samples_fall_back_to_the_fault():
    t_f = FAULT_T
    assert send_start(None, [1], t_f, t_f + 0.1) == (t_f, "no_samples")
    fs = _series([_tx(0, "h1", t_f + dt, {2: 5}) for dt in (-0.01, 0.01)], (0, "h1", "tx"))
    assert send_start(fs, [1], t_f, t_f + 0.1) == (t_f, "no_samples")          # EV 1 never listed
    late = _series([_tx(0, "h1", t_f + dt, {1: 5 + i}) for i, dt in enumerate((0.01, 0.03))], (0, "h1", "tx"))
    assert send_start(late, [1], t_f, t_f + 0.1) == (t_f, "no_samples")        # first listed after the fault


def test_samples_keep_every_evs_sent_counter_in_time_order():
    """``ev_sent``: each EV's counter at every sample that listed it, sorted by time, NaN where a
    sample gave none; EV sets that change (a controller's new EV) and samples out of file order."""
    recs = [_tx(0, "h1", 0.00, {0: 1, 1: 2}), _tx(0, "h1", 0.04, {0: 5, 1: 6}),
            _tx(0, "h1", 0.02, {0: 3, 1: 4}), _tx(0, "h1", 0.06, {0: 7, 9: 1})]
    recs.append({"t": T0 + 0.08, "rank": 0, "flows": [{"peer": "h1", "dir": "tx", "bytes": 0, "evs": [
        {"ev_id": 0, "state": "GOOD", "sent": None}, {"ev_id": 9, "state": "GOOD"}]}]})
    fs = _series(recs, (0, "h1", "tx"))
    t0, c0 = fs.ev_sent[0]
    assert t0.tolist() == pytest.approx([0.0, 0.02, 0.04, 0.06, 0.08])
    assert c0[:4].tolist() == [1, 3, 5, 7] and np.isnan(c0[4])
    assert fs.ev_sent[1][1].tolist() == [2, 4, 6] and fs.ev_sent[1][0].tolist() == pytest.approx([0.0, 0.02, 0.04])
    assert fs.ev_sent[9][1][0] == 1 and np.isnan(fs.ev_sent[9][1][1])
    assert fs.evs[0]["sent"] is None                                # the last-seen values as before
    assert _series([{"t": T0, "rank": 0, "flows": [{"peer": "h2", "dir": "rx", "evs": []}]}],
                   (0, "h2", "rx")).ev_sent == {}
