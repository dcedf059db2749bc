"""Reports: tables render, files and PNGs are written, re-rendering needs only the files,
and ``testbed report`` exits 2 on a directory that is not a run."""

import csv
import io
import json

from rich.console import Console

from testbed import cli, report
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
    assert (run / "ev-timeline-mrc.png").stat().st_size > 10_000
    assert not (run / "ev-timeline-tcp.png").exists()  # no EVs
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
    stale = dict(fresh, definitions={"links": "an older definition"}, comparison=[])
    (run / "summary.json").write_text(json.dumps(stale))
    assert report.load_summary(run)["comparison"] == fresh["comparison"]      # recomputed
    stale_again = dict(fresh, definitions={"links": "an older definition"}, comparison=[])
    (run / "summary.json").write_text(json.dumps(stale_again))
    for t in ("mrc", "tcp"):
        (run / t / "samples.jsonl").unlink()
    assert report.load_summary(run)["comparison"] == []    # raw records gone: kept as written
