"""A run directory of format 1 (no manifest ``format``) reads as its format-2 equivalent:
:func:`testbed.rundir.upgrade.upgrade` is the one place that knows the older shapes."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from testbed import metrics
from testbed.metrics.synthetic import write_run
from testbed.rundir.load import load_transport
from testbed.rundir.read import load_manifest
from testbed.rundir.upgrade import FORMAT, manifest_format, upgrade

WORKLOAD = {"min_bytes": 1 << 20, "max_bytes": 8 << 20, "factor": 2, "iterations": 20, "warmup": 2}


def _edit(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _pair(tmp_path: Path) -> tuple[Path, Path]:
    """The same run written in format 2 (what the runner writes now) and in format 1."""
    new = write_run(tmp_path / "v2", ("mrc", "tcp"), world_size=4, duration_s=5.0, extras=True)

    def v2(m):
        m.update(format=FORMAT, workload=WORKLOAD, host_bandwidth_bps=m["host_link_rate_bps"], host_nics=1)
    _edit(new / "manifest.json", v2)
    for job in sorted(new.glob("*/jobs/rank*.json")):
        _edit(job, lambda j: j.update(job="job0", agent=j["rank"]))
    old = tmp_path / "v1"
    shutil.copytree(new, old)

    def v1(m):   # no format, workload or host bandwidth; the scenario under the old name "spec"
        for key in ("format", "workload", "host_bandwidth_bps", "host_nics"):
            del m[key]
        m["spec"] = m.pop("scenario")
        m["scenario"] = m["spec"]["name"]
    _edit(old / "manifest.json", v1)

    def job_v1(j):   # one peer each way, before multi-peer and multi-job runs
        j["next"], j["prev"] = j.pop("send_to")[0], j.pop("recv_from")[0]
        del j["job"], j["agent"]
    for job in old.glob("*/jobs/rank*.json"):
        _edit(job, job_v1)
    return new, old


def test_format_1_reads_as_format_2(tmp_path):
    new, old = _pair(tmp_path)
    m_new, m_old = load_manifest(new), load_manifest(old)
    assert manifest_format(json.loads((old / "manifest.json").read_text())) == 1
    assert m_old["format"] == m_new["format"] == FORMAT
    for key in ("workload", "host_bandwidth_bps", "host_nics", "transports", "world_size"):
        assert m_old[key] == m_new[key], key
    for name in ("mrc", "tcp"):
        assert load_transport(old, name).jobs == load_transport(new, name).jobs
    s_new, _ = metrics.analyze_run(new)
    s_old, _ = metrics.analyze_run(old)
    for s in (s_new, s_old):
        del s["run_dir"]
    assert s_old["transports"]["mrc"]["completion"]["iterations_expected"] == 80
    assert json.dumps(s_old, sort_keys=True, default=str) == json.dumps(s_new, sort_keys=True, default=str)


def test_a_current_run_is_not_touched():
    manifest = {"format": FORMAT, "transports": ["mrc"]}
    jobs = [{"rank": 0, "send_to": []}]
    assert upgrade(manifest, jobs) == (manifest, jobs)
    assert "host_nics" not in upgrade(manifest)[0]
