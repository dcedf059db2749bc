"""``engine: python | native``: the scenario key, ``--set engine=...``, the job spec, the classes a
channel runs on, and the engine recorded per transport in the manifest, the summary and the
report's line, so that no figure is quoted without its engine."""

from __future__ import annotations

import json

import pytest

from agents.channels.qp import engine_classes
from agents.jobspec import JobSpecError, parse_job
from agents.mrc import QP, native
from agents.net.udp import Endpoint
from testbed.spec.jobs import build_jobs
from testbed.spec.overrides import parse_set
from tests.unit.test_payload import FEATURES, HEAD, _title, load, write


def test_scenario_engine_reaches_every_job(tmp_path):
    sc = load(write(tmp_path, HEAD.replace("transports:", "engine: native\ntransports:")))
    assert sc.engine == "native" and sc.engines() == {"mrc": "native", "rc": "native", "tcp": "kernel"}
    jobs = build_jobs(sc, "mrc", run_id="r", control_socket="/tmp/s")
    assert {j["engine"] for j in jobs} == {"native"}
    assert parse_job(jobs[0], "job.json").engine == "native"


def test_set_engine_overrides_the_file(tmp_path):
    path = write(tmp_path, HEAD.replace("transports:", "engine: native\ntransports:"))
    assert load(path, overrides=[parse_set("engine=python")]).engine == "python"


def test_job_spec_rejects_an_unknown_engine(tmp_path):
    sc = load(write(tmp_path, HEAD))
    raw = build_jobs(sc, "mrc", run_id="r", control_socket="/tmp/s")[0]
    with pytest.raises(JobSpecError, match="engine: must be one of python, native"):
        parse_job({**raw, "engine": "rust"}, "job.json")


def test_engine_classes():
    assert engine_classes("python") == (QP, Endpoint)
    with pytest.raises(ValueError, match="unknown MRC engine"):
        engine_classes("rust")
    core = native.load()
    if core is None or not hasattr(core, "QP"):
        with pytest.raises(native.NativeEngineMissing):   # never a silent fallback to python
            engine_classes("native")
    else:
        from agents.net.native_udp import NativeEndpoint
        assert engine_classes("native") == (core.QP, NativeEndpoint)


def test_manifest_summary_and_report_name_the_engine(tmp_path, monkeypatch):
    from testbed import report
    from testbed.metrics.synthetic import write_run
    from testbed.run import manifest as mf
    monkeypatch.setattr(mf, "features", lambda: FEATURES)
    sc = load(write(tmp_path, HEAD.replace("transports:", "engine: native\ntransports:")))
    assert mf.base_manifest(sc)["engines"] == {"mrc": "native", "rc": "native", "tcp": "kernel"}
    run = write_run(tmp_path / "run", ("mrc", "tcp"), world_size=4, duration_s=5.0)
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "engines": {"mrc": "native", "tcp": "kernel"}}))
    report.write_outputs(run)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["engines"] == {"mrc": "native", "tcp": "kernel"}
    assert summary["transports"]["mrc"]["engine"] == "native"
    assert summary["transports"]["tcp"]["engine"] == "kernel"
    assert "native engine (mrc)" in _title(summary)
