"""Reports: tables render, files and PNGs are written, re-rendering needs only the files,
and ``testbed report`` exits 2 on a directory that is not a run."""

import csv
import io
import json
import re

import pytest
from rich.console import Console

from testbed import cli, metrics, report
from testbed.metrics.synthetic import write_run
from testbed.report import fmt, plots, tables
from .test_metrics import make_run


def render_text(run, **kw) -> tuple[str, dict]:
    buf = io.StringIO()
    summary = report.render(run, Console(file=buf, width=220, color_system=None), **kw)
    return buf.getvalue(), summary


def test_render_writes_files_and_plots(tmp_path):
    run = make_run(tmp_path)
    text, summary = render_text(run)
    for name in ("summary.json", "flows.csv", "goodput.csv", "links.csv"):
        assert (run / name).stat().st_size > 100, name
    assert (run / "goodput.png").stat().st_size > 20_000
    assert max(p.stat().st_size for p in run.glob("ev-timeline-mrc*.png")) > 10_000
    assert not list(run.glob("ev-timeline-tcp*.png"))  # no EVs
    assert (run / "iteration-cdf.png").stat().st_size > 10_000
    assert "transports side by side" in text and "n/a (no EVs)" in text
    assert "rank 1 failed: peer reset" in text and "1048576" in text and "a0_0-c0_0:a" in text
    assert json.loads((run / "summary.json").read_text())["comparison"] == summary["comparison"]


def test_csv_formats(tmp_path):
    run = make_run(tmp_path)
    report.write_outputs(run)
    with open(run / "flows.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["transport", "rank", "peer", "dir", "t_s", "bytes", "rate_bps", "retransmits",
                             "rtt_s", "cwnd_bytes"]
    rx = [r for r in rows if r["transport"] == "mrc" and r["rank"] == "0" and r["dir"] == "rx"]
    assert float(rx[10]["rate_bps"]) == 80e6 and float(rx[110]["rate_bps"]) == 0.0
    with open(run / "links.csv") as f:
        assert next(csv.reader(f)) == ["transport", "link", "end", "t_s", "tx_bytes", "throughput_bps", "drops",
                                       "rate_bps"]
    with open(run / "goodput.csv") as f:
        assert next(csv.reader(f)) == ["transport", "t_s", "goodput_bps", "smoothed_bps"]


def test_rerender_from_output_files_only(tmp_path):
    run = make_run(tmp_path)
    report.write_outputs(run)
    for t in ("mrc", "tcp"):
        (run / t / "samples.jsonl").unlink()
        (run / t / "links.jsonl").unlink()
    text, summary = render_text(run, rank=0)
    assert summary["transports"]["mrc"]["recovery_s"] is not None
    assert "transports side by side" in text
    assert (run / "goodput.png").exists()


def test_cli_report_json_and_not_a_run_dir(tmp_path, capsys):
    run = make_run(tmp_path)
    assert cli.main(["report", str(run), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scenario"] == "synthetic" and set(out["transports"]) == {"mrc", "tcp"}
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["report", str(empty)]) == 2
    err = capsys.readouterr().err
    assert "not a run directory" in err
    assert cli.main(["report", str(tmp_path / "missing")]) == 2


def test_partial_run_renders(tmp_path):
    """A run cut short (Ctrl-C before any sample; a transport never started) still reports."""
    run = tmp_path / "run"
    (run / "mrc").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"scenario": "p", "transports": ["mrc", "rc"], "world_size": 4}))
    (run / "mrc" / "events.jsonl").write_text('{"t": 5.0, "kind": "run", "phase": "start"}\n')
    text, summary = render_text(run)
    assert "no iteration finished" in text and "not done" in text
    assert summary["transports"]["rc"]["completion"]["complete"] is False
    assert (run / "goodput.png").exists()


def test_column_csv_writer_matches_csv_module(tmp_path):
    """The column-at-a-time CSV writer gives csv.writer's text for the cells of report._cell."""
    import math

    import numpy as np
    vals = [0.0, -0.0, 1.5, 1 / 3, 1e-300, 1e300, 123456789.123, float("nan"), float("inf"), -float("inf"), 8e7]
    assert report._float_cells(np.array(vals)) == [str(report._cell(v)) for v in vals]
    assert report._float_cells([]) == []
    edges = np.array([0.0, 0.01, 0.02, 0.03])
    assert report._time_cells(edges) == [str(report._cell(round(float(t), 6))) for t in edges[:-1]]
    blocks = [(("mrc", 0, 'h,"1"', "rx"), np.array([[1.0, float("nan")], [2.5, 3.0]])),
              (("tcp", 1, None, "tx"), np.array([[0.1, 0.2]])), (("", 2.5, "p", "tx"), np.zeros((0, 2)))]
    path = tmp_path / "x.csv"
    report._write_csv(path, ["transport", "rank", "peer", "dir", "a", "b"],
                      ((p, [report._float_cells(c) for c in rows.T]) for p, rows in blocks))
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(["transport", "rank", "peer", "dir", "a", "b"])
    for prefix, rows in blocks:
        for row in rows:
            w.writerow([report._cell(x) for x in (*prefix, *row)])
    assert path.read_bytes() == buf.getvalue().encode()
    assert not math.isnan(float(list(csv.reader(io.StringIO(buf.getvalue())))[1][4]))


def test_summary_from_older_metric_definitions_is_recomputed(tmp_path):
    run = make_run(tmp_path)
    fresh = report.load_summary(run)
    fresh.pop("checksum")   # summaries from before the checksum
    stale = dict(fresh, definitions={"links": "an older definition"}, comparison=[])
    (run / "summary.json").write_text(json.dumps(stale))
    assert report.load_summary(run)["comparison"] == fresh["comparison"]      # recomputed
    stale_again = dict(fresh, definitions={"links": "an older definition"}, comparison=[])
    (run / "summary.json").write_text(json.dumps(stale_again))
    for t in ("mrc", "tcp"):
        (run / t / "samples.jsonl").unlink()
    assert report.load_summary(run)["comparison"] == []    # raw records gone: kept as written


# -- new summary keys, the 80-column rule, nccl-tests text, formats ----------------------------
def add_new_keys(summary: dict) -> dict:
    """The keys the metrics add (tests pass before and after they exist), with user text that
    would be markup or emoji if it were not escaped."""
    summary["scenario"] = "[bold]k4[/bold] :x:"
    summary["base_rtt_s"] = 0.0412
    for name, s in summary["transports"].items():
        rank_flows = [f for f in s["flows"] if f["rank"] == 0]
        s.update(busbw_fraction_of_host=0.9437, healthy_gap_p99_s=0.0231,
                 retransmits_startup=2.0, retransmits_after_fault=11.0,
                 faulted_iteration={"slowdown_pct": 56.9, "seconds": 3.3102, "healthy_median_s": 2.1098,
                                    "size": s["size_bytes"], "iter": 3},
                 false_retirements={"count": 3, "total_s": 0.41},
                 worst_stall={"s": 0.103, "rtts": 2.4, "flow": "4->5", "at_s": 6.7},
                 worst_recovery=({"s": 0.055, "rtts": 1.3, "flow": "3->4", "dip": True, "recovered": True}
                                 if name == "mrc" else {"s": None, "rtts": None, "flow": None, "dip": True,
                                                        "recovered": False}),
                 validity={"sched_delay_p95_s": 0.00123, "timer_late_p99_s": 0.0042, "sampler_coverage": 0.998,
                           "cpu_p95": 0.63},
                 fault_flows=[{"rank": f["rank"], "peer": str(f["peer"]), "dir": f["dir"],
                               "label": f"[{f['rank']}]->:x:"} for f in rank_flows])
        if s["has_evs"]:
            s["evs_crossing_fault"] = [{"rank": 0, "dir": "tx", "ev_id": 0}, {"rank": 0, "dir": "tx", "ev_id": 1}]
        links = s["fidelity"]["busiest_links"]
        if links:
            links[0] = dict(links[0], link="h3_1_1-e3_1[x]:smile:")
        s["invalid_reasons"] = ["[red]starved[/red]"]
        s["valid"] = name == "mrc"
    return summary


@pytest.fixture
def new_keys(monkeypatch):
    """metrics.analyze_run returning summaries with the new keys."""
    orig = metrics.analyze_run

    def patched(run_dir):
        summary, analyses = orig(run_dir)
        return add_new_keys(summary), analyses
    monkeypatch.setattr(metrics, "analyze_run", patched)


@pytest.fixture
def k4_run(tmp_path):
    """A short synthetic fat-tree k=4 run: mrc (4 EVs per flow), rc (1 EV per flow), tcp."""
    return write_run(tmp_path / "k4", duration_s=6.0)


def table_cells(summary: dict) -> list[str]:
    """The text of every cell, header and title the report prints in tables."""
    out = []
    for grid in (report.comparison_table(summary), report.busbw_by_size_table(summary),
                 report.validity_table(summary), report.links_table(summary)):
        out += [grid.title.plain] + [h.plain for h in grid.headers] + [c.plain for r in grid.rows for c in r]
    return out


@pytest.mark.parametrize("how", ["width", "COLUMNS"])
def test_80_columns_nothing_cut(k4_run, new_keys, monkeypatch, how):
    """At 80 columns or when piped (rich falls back to COLUMNS or 80), no line is wider than 80,
    nothing is cut with '…', every word of every table cell is printed whole, and user text is
    printed as written (not as markup or emoji)."""
    monkeypatch.setenv("COLUMNS", "80")
    buf = io.StringIO()
    console = Console(file=buf, width=80 if how == "width" else None, force_terminal=False)
    summary = report.render(k4_run, console, plots=False)
    text = buf.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    tokens = set(re.split(r"[\s│┃]+", text))
    words = {w for cell in table_cells(summary) for w in cell.split()}
    assert words - tokens == set()
    for s in summary["transports"].values():       # the nccl-tests text: every number whole
        for r in s["sizes"]:
            assert {str(r["size_bytes"]), str(r["count"]), fmt.usec(r["time_s"]),
                    fmt.gb_per_s(r["busbw_bytes_per_s"])} <= tokens
    assert "[bold]k4[/bold] :x:" in text and "h3_1_1-e3_1[x]:smile:" in text and "[red]starved[/red]" in text
    assert {"+57%", "(3.310", "2.110"} <= tokens


def test_render_plots_with_new_keys(k4_run, new_keys):
    summary = report.render(k4_run, Console(file=io.StringIO(), width=120))
    names = {p.name for p in k4_run.glob("*.png")}
    assert {"goodput.png", "fault-flows.png", "iteration-cdf.png", "ev-timeline-mrc-rank0.png"} <= names
    assert not any(n.startswith(("ev-timeline-rc", "ev-timeline-tcp")) for n in names)   # rc: 1 EV per flow
    assert (k4_run / "goodput.png").stat().st_size > 50_000
    report.render(k4_run, Console(file=io.StringIO()), rank=4)        # one rank asked for: replaces the others
    assert sorted(p.name for p in k4_run.glob("ev-timeline-*.png")) == ["ev-timeline-mrc.png"]
    assert summary["transports"]["mrc"]["worst_recovery"]["recovered"]


def test_fmt_sig_three_significant_figures_never_scientific():
    cases = {4.726: "4.73", 4.738: "4.74", 47.26: "47.3", 472.6: "473", 4726.0: "4730", 0.0004726: "0.000473",
             9.996: "10.0", 0.0: "0", -4.726: "-4.73", 123456789.0: "123000000", None: "-", float("nan"): "-"}
    assert {x: fmt.fmt_sig(x) for x in cases} == cases
    assert fmt.fmt_s(0.0412) == "41.2 ms" and fmt.fmt_s(0.3133) == "313 ms" and fmt.fmt_s(3.3102) == "3.310 s"
    assert fmt.fmt_s(None) == "-" and fmt.fmt_s(0.9996) == "1.000 s"
    assert fmt.gb_per_s(590e3) == "0.000590" and fmt.gb_per_s(47.26e9) == "47.26" and fmt.gb_per_s(0) == "0.00"
    assert fmt.usec(3.32824) == "3328240" and fmt.usec(0.0012345) == "1234.50" and fmt.usec(0.012345) == "12345.0"


def test_nccl_tests_block_parses_like_nccl_tests():
    rows = [{"size_bytes": 1048576, "count": 262144, "type": "float32", "redop": "sum", "iterations": 5,
             "time_s": 3.32824, "algbw_bytes_per_s": 1048576 / 3.32824, "busbw_bytes_per_s": 1.5 * 1048576 / 3.32824,
             "wrong": 0},
            {"size_bytes": 2097152, "count": 524288, "type": "float32", "redop": "sum", "iterations": 5,
             "time_s": 6.5, "algbw_bytes_per_s": 2097152 / 6.5, "busbw_bytes_per_s": 1.5 * 2097152 / 6.5, "wrong": 7},
            {"size_bytes": 4194304, "count": 1048576, "type": "float32", "redop": "sum", "iterations": 0,
             "time_s": None, "algbw_bytes_per_s": None, "busbw_bytes_per_s": None, "wrong": 0}]
    text = report.nccl_tests_block({"transport": "rc", "world_size": 4, "sizes": rows})
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    header = next(line for line in lines if "redop" in line).lstrip("#").split()
    assert header == ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"]
    data = [line.split() for line in lines if not line.startswith("#")]
    assert data[0] == ["1048576", "262144", "float", "sum", "-1", "3328240", "0.000315", "0.000473", "0"]
    assert data[1][-1] == "7" and len(data) == 2                       # the size with no iteration: a comment
    assert "# Out of bounds values : 7 FAILED" in lines
    avg = float(next(line for line in lines if "Avg bus bandwidth" in line).split(":")[1])
    assert avg == pytest.approx((rows[0]["busbw_bytes_per_s"] + rows[1]["busbw_bytes_per_s"]) / 2e9, rel=1e-5)


def test_comparison_cells_new_keys_and_older_summaries():
    fault = [{"t_s": 1.0, "action": "link_down", "link": "l", "phase": "apply", "disruptive": True}]
    base = {"has_evs": True, "per_fault": fault, "faults": fault}
    assert tables.cell_faulted_iteration({**base, "faulted_iteration": {
        "slowdown_pct": 56.9, "seconds": 3.3102, "healthy_median_s": 2.1098}}) == "+57% (3.310 s vs 2.110 s)"
    assert tables.cell_faulted_iteration({**base, "faulted_iteration": None}) == "-"
    assert tables.cell_faulted_iteration({"faulted_iteration": None, "faults": []}) == "no fault"
    assert tables.cell_detect({**base, "detect_s": None}) == "not detected"
    assert tables.cell_detect({**base, "has_evs": False}) == "n/a (no EVs)"
    assert tables.cell_false_retirements({**base, "false_retirements": {"count": 3, "total_s": 0.41}}) == "3 (410 ms)"
    assert tables.cell_false_retirements({**base, "false_retirements": {"count": 0, "total_s": 0.0}}) == "0"
    assert tables.cell_worst_stall({"worst_stall": {"s": 0.103, "rtts": 2.4, "flow": "4->5", "at_s": 1.0}}) == \
        "103 ms (2.4 RTT) 4->5"
    rec = {"s": 0.0, "rtts": 0.0, "flow": "1->2", "dip": False, "recovered": True}
    assert tables.cell_worst_recovery({**base, "worst_recovery": rec}) == "no dip"
    assert tables.cell_worst_recovery({**base, "worst_recovery": dict(rec, dip=True, recovered=False)}) == \
        "not recovered"
    assert tables.cell_worst_recovery({**base, "worst_recovery": dict(rec, dip=True, s=0.055, rtts=1.3)}) == \
        "55.0 ms (1.3 RTT) 1->2"
    assert tables.cell_recovery({**base, "recovery_s": 0.0}) == "no dip"        # never "0.0"
    assert tables.cell_retransmits_split({"retransmits_startup": 2.0, "retransmits_after_fault": 11.0}) == "2 / 11"
    old = {"has_evs": True, "per_fault": fault, "faults": fault, "detect_s": 0.03}    # written before the new keys
    cells = {label: f(old).plain if hasattr(f(old), "plain") else f(old) for label, f in tables.COMPARISON_ROWS}
    for label in ("faulted iteration", "false retirements", "worst flow recovery", "worst flow stall",
                  "healthy gap p99", "retransmits (start-up / after fault)", "busbw / host"):
        assert cells[label] == "-", label


def test_fault_markers_and_windows():
    assert plots.fault_label({"action": "end", "link": None, "phase": "revert"}) == "end revert"
    assert plots.fault_label({"action": "link_down", "link": "a-b", "phase": "apply"}) == "link_down a-b"
    down = {"action": "link_down", "phase": "apply", "disruptive": True}
    up = {"action": "link_up", "phase": "apply", "disruptive": False}
    assert plots.fault_colour(down) != plots.fault_colour(up)
    s = {"per_fault": [{"t_s": 10.0, "recovery_s": 3.0}, {"t_s": 11.0, "recovery_s": 0.0},
                       {"t_s": 30.0, "recovery_s": None}],
         "worst_recovery": {"s": 4.0, "dip": True, "recovered": True}}
    wins = plots.fault_windows(s)
    assert [(w["t0"], w["faults"]) for w in wins] == [(9.5, [0, 1]), (29.5, [2])]
    assert wins[0]["t1"] == pytest.approx(14.1) and wins[1]["t1"] == pytest.approx(32.1)


def test_iteration_times_slowest_rank_of_complete_measured_iterations():
    ev = [{"kind": "iteration", "size": 8, "iter": 0, "rank": r, "warmup": w, "seconds": sec}
          for r, w, sec in ((0, True, 9.0), (1, True, 9.0), (0, False, 1.0), (1, False, 1.5))]
    ev.append({"kind": "iteration", "size": 8, "iter": 1, "rank": 0, "warmup": False, "seconds": 5.0})
    assert plots.iteration_times(ev, 2) == {8: [(0, 1.5)]}


def test_grid_falls_back_to_records_when_a_word_cannot_fit():
    g = report.Grid("t", ["name", "a", "b"], [["x", "1234567890123", "[y]"], ["z", "1", "2"]], split="rows")
    buf = io.StringIO()
    Console(file=buf, width=24, force_terminal=False).print(g)
    text = buf.getvalue()
    assert "1234567890123" in text and "[y]" in text and "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 24
    assert text.count("t: ") == 2          # one record table per row


def test_jobs_table_one_row_per_transport_and_job_within_80_columns():
    from testbed.report import jobs_table
    row = {"job": "ring", "collective": "all_reduce", "world_size": 8, "busbw_mbit_per_s": 4.63,
           "busbw_fraction_of_host": 0.926, "iteration_s": {"p50": 3.154}, "wrong": 0, "complete": True}
    perm = {**row, "job": "perm", "collective": "permutation", "complete": False}
    summary = {"transports": {"mrc": {"jobs": [row, perm]}, "rc-x8": {"jobs": [row, perm]}}}
    out = io.StringIO()
    Console(file=out, width=80).print(jobs_table(summary))
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert text.count("permutation") == 2 and "92.6%" in text and "0 -" in text   # "-": did not complete
    assert jobs_table({"transports": {"mrc": {}}}) is None


def test_the_controller_timeline_shows_loss_restart_and_resync_in_time_order():
    from testbed.report import controller_timeline
    s = {"transport": "mrc",
         "controller_lost": [{"t_s": 6.0, "reason": "exited with status -9", "exit": -9}],
         "controller_restarts": [{"t_s": 6.05, "attempt": 1, "pid": 77, "after": "exited with status -9"}],
         "controller_resyncs": [{"t_s": 6.9, "connections": 8, "answered": 8, "replaced": 2, "denied": 0,
                                 "assumed_bad": 1}]}
    assert [line.plain for line in controller_timeline(s)] == [
        "controller lost mrc: at 6.000 s, exited with status -9",
        "controller restarted mrc: at 6.050 s, attempt 1, pid 77",
        "controller resynced mrc: at 6.900 s, 8 of 8 connections answered; EVs found replaced 2, denied 0, "
        "ASSUMED_BAD 1"]
    assert controller_timeline({"transport": "rc"}) == []
