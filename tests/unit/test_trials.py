"""Aggregation of trials: medians (odd and even counts), ranges, None and missing values, the
worst-recovery split, faulted links, and a table that fits 80 columns."""

import io

import pytest
from rich.console import Console

from testbed.metrics import trials
from testbed.report import trials as trials_report


def transport(**kw) -> dict:
    """A transport summary with the KPI keys; ``kw`` overrides them."""
    s = {"busbw_mbit_per_s": 4.7, "busbw_fraction_of_host": 0.94,
         "faulted_iteration": {"slowdown_pct": 50.0, "seconds": 3.0, "healthy_median_s": 2.0, "size": 8, "iter": 2},
         "detect_s": 0.1, "false_retirements": {"count": 0, "total_s": 0.0},
         "worst_stall": {"s": 0.2, "rtts": 4.0, "flow": "1->2", "at_s": 3.0},
         "worst_recovery": {"s": 0.05, "rtts": 1.0, "flow": "1->2", "dip": True, "recovered": True},
         "healthy_gap_p99_s": 0.02, "retransmits_after_fault": 10.0, "iteration_s": {"p50": 2.0, "p99": 2.5},
         "wrong": 0, "qp_errors": 0,
         "faults": [{"t_s": 5.0, "action": "link_up", "link": "x", "disruptive": False},
                    {"t_s": 2.0, "action": "link_down", "link": "a0_0-c0_0", "disruptive": True},
                    {"t_s": 4.0, "action": "link_down", "link": "a1_0-c1_0", "disruptive": True}]}
    s.update(kw)
    return s


def run(seed, **transports) -> dict:
    return {"scenario": "core-link-failure", "seed": seed, "transports": transports}


def test_medians_of_odd_and_even_counts_and_ranges():
    odd = trials.aggregate([run(1, mrc=transport(busbw_mbit_per_s=v)) for v in (3.0, 1.0, 2.0)])
    assert odd["transports"]["mrc"]["busbw_mbit_per_s"] == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3, "missing": 0}
    even = trials.aggregate([run(s, mrc=transport(detect_s=v)) for s, v in enumerate((0.4, 0.1, 0.2, 0.3))])
    assert even["transports"]["mrc"]["detect_s"] == {"median": pytest.approx(0.25), "min": 0.1, "max": 0.4, "n": 4,
                                                     "missing": 0}
    assert even["trials"] == 4 and even["seeds"] == [0, 1, 2, 3] and even["scenario"] == "core-link-failure"


def test_nested_kpis_none_and_missing_keys():
    agg = trials.aggregate([
        run(1, mrc=transport(false_retirements={"count": 3, "total_s": 0.4}, iteration_s={"p50": 2.0})),
        run(2, mrc=transport(false_retirements=None, faulted_iteration=None, iteration_s={"p50": 4.0})),
        run(3, mrc={"busbw_mbit_per_s": 5.0}),     # an older summary: most keys missing
    ])
    m = agg["transports"]["mrc"]
    assert m["false_retirements.count"] == {"median": 3.0, "min": 3.0, "max": 3.0, "n": 1, "missing": 2}
    assert m["faulted_iteration.slowdown_pct"]["n"] == 1
    assert m["iteration_s.p50"] == {"median": 3.0, "min": 2.0, "max": 4.0, "n": 2, "missing": 1}
    assert m["busbw_mbit_per_s"]["n"] == 3 and m["qp_errors"]["n"] == 2


def test_all_none_kpi_and_transport_missing_from_some_trials():
    agg = trials.aggregate([run(1, mrc=transport(detect_s=None), tcp=transport(detect_s=None)),
                            run(2, mrc=transport(detect_s=None))])
    assert agg["transports"]["mrc"]["detect_s"] == {"median": None, "min": None, "max": None, "n": 0, "missing": 2}
    assert list(agg["transports"]) == ["mrc", "tcp"]
    assert agg["transports"]["tcp"]["busbw_mbit_per_s"]["n"] == 1


def test_worst_recovery_counts_only_recovered_trials():
    rec = lambda s, dip=True, ok=True: {"s": s, "rtts": None, "flow": "1->2", "dip": dip, "recovered": ok}  # noqa: E731
    agg = trials.aggregate([run(1, rc=transport(worst_recovery=rec(0.3))),
                            run(2, rc=transport(worst_recovery=rec(0.0, dip=False, ok=True))),
                            run(3, rc=transport(worst_recovery=rec(None, ok=False))),
                            run(4, rc=transport(worst_recovery=rec(0.1))),
                            run(5, rc=transport(worst_recovery=None))])
    r = agg["transports"]["rc"]["worst_recovery.s"]
    assert (r["median"], r["min"], r["max"], r["n"]) == (pytest.approx(0.2), 0.1, 0.3, 2)
    assert r["no_dip"] == 1 and r["not_recovered"] == 1
    assert r["missing"] == 2    # not recovered, no worst_recovery at all; no dip is a value (0), not missing


def test_faulted_link_is_the_first_disruptive_fault_of_each_trial():
    late_first = [{"t_s": 9.0, "link": "a1_0-c1_0", "disruptive": True},
                  {"t_s": 1.0, "link": "a2_0-c2_0", "disruptive": True}]
    agg = trials.aggregate([run(1, mrc=transport(), tcp=transport(faults=[])),
                            run(2, mrc=transport()),
                            run(3, mrc=transport(faults=late_first))])
    assert agg["transports"]["mrc"]["faulted_link"] == {"a0_0-c0_0": 2, "a2_0-c2_0": 1}
    assert agg["transports"]["tcp"]["faulted_link"] == {}
    assert agg["faulted_link"] == {"a0_0-c0_0": 2, "a2_0-c2_0": 1}


def test_bad_input():
    with pytest.raises(ValueError, match="no trials"):
        trials.aggregate([])
    with pytest.raises(ValueError, match="different scenarios"):
        trials.aggregate([run(1, mrc=transport()), {"scenario": "other", "transports": {}}])


def test_trials_table_fits_80_columns():
    agg = trials.aggregate([run(s, mrc=transport(busbw_mbit_per_s=4.726 + s / 100), rc=transport(detect_s=None),
                                tcp=transport(worst_recovery={"s": None, "dip": True, "recovered": False}))
                            for s in range(5)])
    for width in (80, 60, 200):
        buf = io.StringIO()
        Console(file=buf, width=width, force_terminal=False).print(trials_report.trials_table(agg))
        text = buf.getvalue()
        assert max(len(line) for line in text.splitlines()) <= width and "…" not in text
        assert "4.75" in text and "[4.73-4.77]" in text and "a0_0-c0_0:" in text   # 3 s.f., never cut
    assert "4.75 [4.73-4.77] (5)" in text and "- (0); 5 not recovered" in text    # 200 columns: one line each
    assert trials_report.fmt_stats({"median": 0.5, "min": 0.0, "max": 1.0, "n": 2}, trials_report.LABELS["wrong"][1]) == "0.5 [0-1] (2)"


def test_jobs_and_balance_kpis_of_a_run_of_several_jobs():
    def summary(seed, ring, perm, mom):
        jobs = [{"job": "ring", "busbw_fraction_of_host": ring}, {"job": "perm", "busbw_fraction_of_host": perm}]
        return {"scenario": "s", "seed": seed, "transports": {"rc": {
            "jobs": jobs, "balance": {"fabric": {"max_over_mean": mom}, "collisions": {"max_load": 2.0}}}}}
    agg = trials.aggregate([summary(1, 0.2, 0.3, 3.0), summary(2, 0.4, None, 2.0), summary(3, 0.3, 0.5, 2.5)])
    rc = agg["transports"]["rc"]
    assert rc["jobs.ring.busbw_fraction_of_host"] == {"median": 0.3, "min": 0.2, "max": 0.4, "n": 3,
                                                        "missing": 0}
    assert rc["jobs.perm.busbw_fraction_of_host"]["n"] == 2
    assert rc["balance.fabric.max_over_mean"]["median"] == 2.5
    out = io.StringIO()
    Console(file=out, width=80).print(trials_report.trials_table(agg))
    assert "ring: busbw / host (%)" in out.getvalue() and "30.0 [20.0-40.0] (3)" in out.getvalue()


def test_every_kpi_has_a_label():
    assert set(trials_report.LABELS) == set(trials.KPIS)
    assert set(trials_report.JOB_LABELS) == set(trials.JOB_KPIS)
