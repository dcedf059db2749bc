"""The job spec's ``qp.loss_inference`` (bool) reaches :class:`agents.mrc.QPConfig` on both engines."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from agents.channels.qp import qp_config_kwargs
from agents.jobspec import JobSpecError, parse_job
from agents.mrc.types import QPConfig
from testbed.model.kernel import KernelFeatures
from testbed.spec import load_scenario
from testbed.spec.jobs import build_jobs

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def jobs():
    feats = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True)
    sc = load_scenario(DATA / "scenario-ok.yaml", features=feats)
    return build_jobs(replace(sc, qp=(("loss_inference", False),)), "mrc", run_id="r",
                      control_socket="/tmp/c.sock")


def test_loss_inference_false_reaches_the_qp_config(jobs):
    for job in jobs:
        assert job["qp"]["loss_inference"] is False
        spec = parse_job(job, "rank")
        assert spec.qp_config_kwargs()["loss_inference"] is False
        cfg = QPConfig(**qp_config_kwargs(spec))
        cfg.validate()
        assert cfg.loss_inference is False
        assert parse_job(spec.to_dict()) == spec


def test_loss_inference_defaults_on_and_must_be_a_bool(jobs):
    job = {**jobs[0], "qp": {k: v for k, v in jobs[0]["qp"].items() if k != "loss_inference"}}
    assert QPConfig(**qp_config_kwargs(parse_job(job, "rank"))).loss_inference is True
    for bad in (0, "false", None):
        with pytest.raises(JobSpecError, match=r"qp\.loss_inference: expected bool"):
            parse_job({**job, "qp": {**job["qp"], "loss_inference": bad}}, "rank")


def test_the_native_engine_takes_loss_inference():
    from tests.unit.qp_diff import make_qp, native_qp_class
    native_qp_class()
    qp = make_qp("native", 1, seed=1, memory=None, config=QPConfig(loss_inference=False))
    assert qp.config.loss_inference is False
