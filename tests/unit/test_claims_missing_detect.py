"""Detection over every crossing QP (issue 45, item 2): ``detect_s`` is the first retirement of
any EV crossing the failed link, the best case; ``detect_median_s`` and ``detect_worst_s`` are
taken over the tx QPs with an EV crossing it, a QP that never retired one making the worst
None ("not detected", counted in ``detect_qps``). On the synthetic run of test_metrics."""

from __future__ import annotations

import pytest

from testbed import metrics
from testbed.metrics import claims as verdicts
from testbed.metrics import results, trials
from testbed.spec.claimsfile import load_claims

from .test_claims_missing import CLAIM, PAPER
from .test_metrics import FAULT_T, T0, make_run

LINK = "a0_0-c0_0"      # make_run's faulted link (down at FAULT_T, back at 2.0 s)


def _ev(rank: int, peer: str, ev_id: int, t: float, old: str, new: str, direction: str = "tx") -> dict:
    return {"t": T0 + t, "kind": "ev_state", "rank": rank, "peer": peer, "dir": direction, "ev_id": ev_id,
            "old": old, "new": new, "cause": "loss"}


def _three_qps(tmp_path, extra: list[dict]):
    """Three ranks in a ring, each tx QP with one EV across LINK (rank 0's EV 3, rank 1's EV 1,
    rank 2's EV 0) and one EV elsewhere. make_run's events retire rank 0's EV 3 at +50 ms (and
    SKIP its EV 2, no detection); ``extra`` adds transitions."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    tr = metrics.load_transport(make_run(tmp_path, transports=("mrc",), world_size=3), "mrc")
    world = ["h0", "h1", "h2"]
    crossing = {0: 3, 1: 1, 2: 0}
    tr.jobs = [{"rank": r, "world": world,
                "send_to": [{"host": world[(r + 1) % 3], "evs": [
                    {"ev_id": crossing[r], "links": [f"h{r}-e0_0", LINK]},
                    {"ev_id": 2 if crossing[r] != 2 else 5, "links": [f"h{r}-e0_0", "e0_0-a0_1"]}]}],
                "recv_from": [{"host": world[(r - 1) % 3], "evs": [{"ev_id": 7, "links": [LINK]}]}]}
               for r in range(3)]
    tr.events = tr.events + extra
    return metrics.analyze_transport(tr, 3).summary


def test_median_and_worst_over_the_crossing_qps(tmp_path):
    s = _three_qps(tmp_path, [
        _ev(1, "h2", 1, FAULT_T + 0.08, "GOOD", "ASSUMED_BAD"),        # rank 1 detects at +80 ms
        _ev(2, "h0", 0, 0.5, "GOOD", "ASSUMED_BAD"),                   # rank 2: before the fault, back at 0.6
        _ev(2, "h0", 0, 0.6, "ASSUMED_BAD", "GOOD"),
        _ev(2, "h0", 2, FAULT_T + 0.03, "GOOD", "ASSUMED_BAD"),        # an EV that does not cross it
        _ev(2, "h1", 7, FAULT_T + 0.02, "GOOD", "ASSUMED_BAD", "rx"),  # a responder's EV: not a tx QP
    ])
    assert s["detect_s"] == pytest.approx(0.02, abs=1e-6)    # kept: the first of any crossing EV, rx too
    assert s["detect_qps"]["crossing"] == 3 and s["detect_qps"]["detected"] == 2
    assert s["detect_qps"]["undetected"] == [{"rank": 2, "peer": "h0"}]
    assert s["detect_median_s"] == pytest.approx(0.08, abs=1e-6)    # of 50 ms, 80 ms and never
    assert s["detect_worst_s"] is None                            # rank 2's QP never detected it
    f = s["per_fault"][0]
    assert (f["detect_median_s"], f["detect_worst_s"], f["detect_qps"]) == (
        s["detect_median_s"], s["detect_worst_s"], s["detect_qps"])

    s = _three_qps(tmp_path / "b", [_ev(1, "h2", 1, FAULT_T + 0.08, "GOOD", "ASSUMED_BAD"),
                                    _ev(2, "h0", 0, FAULT_T + 0.12, "SKIP", "UNKNOWN")])
    assert s["detect_qps"] == {"detected": 3, "crossing": 3, "undetected": []}
    assert s["detect_median_s"] == pytest.approx(0.08, abs=1e-6)
    assert s["detect_worst_s"] == pytest.approx(0.12, abs=1e-6)


def test_an_ev_already_retired_at_the_fault_has_nothing_to_detect(tmp_path):
    """Rank 2's only crossing EV was retired before the fault and never came back: its QP was
    not using the link, so it is not a crossing QP of this fault."""
    s = _three_qps(tmp_path, [_ev(1, "h2", 1, FAULT_T + 0.08, "GOOD", "ASSUMED_BAD"),
                              _ev(2, "h0", 0, 0.5, "GOOD", "ASSUMED_BAD")])
    assert s["detect_qps"] == {"detected": 2, "crossing": 2, "undetected": []}
    assert s["detect_worst_s"] == pytest.approx(0.08, abs=1e-6)


def test_a_transport_without_evs_has_no_detection_statistics(tmp_path):
    s = metrics.analyze_run(make_run(tmp_path))[0]["transports"]["tcp"]
    assert s["detect_median_s"] is None and s["detect_worst_s"] is None and s["detect_qps"] is None


def test_a_rule_on_the_worst_detection_fails_on_an_undetected_qp(tmp_path):
    """The worst over the crossing QPs is aggregated over trials like any KPI, and a rule on it
    fails where a QP never detected the fault (None: no value)."""
    assert "detect_worst_s" in trials.RULE_KPIS and "detect_median_s" in trials.RULE_KPIS
    p = tmp_path / "claims.yaml"
    p.write_text(CLAIM.format(scenario=PAPER / "failover.yaml", rules="      - mrc detect_worst_s <= 5 * mrc base_rtt_s\n"))
    claim = load_claims(p).claims[0]

    def doc(worst):
        return results.from_trials([{"scenario": "s", "seed": i + 1, "transports": {"mrc": {
            "valid": True, "completion": {"complete": True}, "wrong": 0, "qp_errors": 0, "base_rtt_s": 0.05,
            "detect_s": 0.05, "detect_worst_s": w}}} for i, w in enumerate(worst)])
    assert verdicts.judge_rules(claim, doc([0.1, 0.12, 0.2]))["verdict"] == "yes"
    v = verdicts.judge_rules(claim, doc([0.1, None, 0.2]))
    assert v["verdict"] == "no" and "mrc detect_worst_s: no value in 1 of 3 trials" in v["reason"]


def test_detection_causes_count_how_each_qp_found_its_loss(tmp_path):
    """Issue 45 item 2: each detecting QP's first retirement is counted by how its loss was found
    (``loss_cause`` on the ev_state event: inference or the timer); make_run's own retirement
    (rank 0, no ``loss_cause``: an agent that does not report it) counts as other; the reproduce
    report prints the counts over trials."""
    from testbed.report.reproduce import causes_text, detect_causes
    from testbed.report.tables import cell_detect
    s = _three_qps(tmp_path, [
        {**_ev(1, "h2", 1, FAULT_T + 0.08, "GOOD", "ASSUMED_BAD"), "loss_cause": "ooo"},
        {**_ev(2, "h0", 0, FAULT_T + 0.6, "GOOD", "ASSUMED_BAD"), "loss_cause": "timeout"},
        {**_ev(2, "h0", 0, FAULT_T + 0.9, "ASSUMED_BAD", "GOOD"), "cause": "probes_ok"},
        {**_ev(2, "h0", 0, FAULT_T + 1.0, "GOOD", "ASSUMED_BAD"), "loss_cause": "ev_threshold"},  # not its first
    ])
    assert s["detect_causes"] == {"inference": 1, "timeout": 1, "other": 1}
    assert s["per_fault"][0]["detect_causes"] == s["detect_causes"]
    assert cell_detect(s).endswith("(inference 1, timeout 1, other 1 of 3 QPs)")
    doc = results.from_summary({"scenario": "x", "transports": {"mrc": s}})
    causes = detect_causes(doc)
    assert causes["mrc"]["inference"]["median"] == 1 and causes["mrc"]["timeout"]["median"] == 1
    assert causes_text(causes) == "mrc: inference 1 [1-1], timeout 1 [1-1] QPs"
