"""The EV selection key (``qp: {ev_select: rotation | reps}``): from a scenario to the QPs of both
engines. ``reps`` is a non-spec variant (agents.mrc.reps, ``pick``, after uet-htsim's
``UecMpMixed``); its steering is measured in tests/unit/test_slow_path_steering.py and compared
between the engines in tests/unit/test_native_ev.py and tests/unit/test_native_qp.py."""
from __future__ import annotations

import random

import pytest

from agents.channels.qp import qp_config_kwargs
from agents.jobspec import JobSpecError, parse_job
from agents.mrc.types import QPConfig
from testbed.model.kernel import KernelFeatures
from testbed.spec import load_scenario
from testbed.spec.jobs import build_jobs
from testbed.spec.yamlread import SpecError
from tests.unit.qp_diff import make_qp
from tests.unit.test_jobs import DATA, REPO

FEATURES = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True)


def scenario_with(tmp_path, qp: str):
    text = (DATA / "scenario-ok.yaml").read_text().replace("../../../topologies/", f"{REPO}/topologies/")
    path = tmp_path / "s.yaml"
    path.write_text(text + f"\nqp: {qp}\n")
    return path


@pytest.mark.parametrize("engine", ["python", "native"])
def test_the_scenario_key_reaches_every_mrc_qps_ev_set(tmp_path, engine):
    """``ev_select: reps`` -> each mrc job's ``qp.ev_select`` -> QPConfig -> the EV set's
    ``select``; rc jobs do not get it (one EV per QP); absent, the jobs carry nothing new. The
    scenario warns that its mrc results are the variant's, not MRC's."""
    sc = load_scenario(scenario_with(tmp_path, "{ev_select: reps}"), features=FEATURES)
    assert dict(sc.qp) == {"ev_select": "reps"}
    assert "qp.ev_select: warning: reps is not MRC's EV selection (a variant after uet-htsim's REPS): " \
        "quote this run's mrc results as that variant, not as MRC" in [str(w).split(": ", 1)[1] for w in sc.warnings]
    jobs = build_jobs(sc, "mrc", run_id="r", control_socket="/tmp/c.sock")
    assert {j["qp"]["ev_select"] for j in jobs} == {"reps"}
    spec = parse_job(jobs[0], "rank 0")
    qp = make_qp(engine, 1, seed=1, memory=None, config=QPConfig(**qp_config_kwargs(spec)))
    qp.modify_qp(qp.state.INIT, 0.0, evs=[0, 1, 2])
    assert qp.evs.select == "reps" and qp.evs.reps
    assert all("ev_select" not in j["qp"] for j in build_jobs(sc, "rc", run_id="r", control_socket="/tmp/c.sock"))
    plain = load_scenario(DATA / "scenario-ok.yaml", features=FEATURES)
    assert all("ev_select" not in j["qp"] for j in build_jobs(plain, "mrc", run_id="r", control_socket="/tmp/c.sock"))


def test_an_unknown_selection_is_refused_in_the_scenario_the_job_spec_and_the_config(tmp_path):
    with pytest.raises(SpecError, match=r"qp.ev_select: expected one of rotation, reps, got 'spray'"):
        load_scenario(scenario_with(tmp_path, "{ev_select: spray}"), features=FEATURES)
    sc = load_scenario(scenario_with(tmp_path, "{ev_select: reps}"), features=FEATURES)
    job = build_jobs(sc, "mrc", run_id="r", control_socket="/tmp/c.sock")[0]
    job["qp"]["ev_select"] = "spray"
    with pytest.raises(JobSpecError, match="qp.ev_select: expected one of rotation, reps, got 'spray'"):
        parse_job(job, "rank 0")
    with pytest.raises(ValueError, match="ev_select='spray'"):
        QPConfig(ev_select="spray").validate()


@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_reps_qp_pair_delivers_and_reuses_good_acks(engine):
    """A write over 4 clean EVs with a SACK per packet: every SACK queues its EV, and most
    packets after the first window go where a SACK came back from."""
    from agents.mrc.qp import connect_pair
    from agents.mrc.sim import MultipathNetwork, PathSpec
    from agents.mrc.types import QPAttr
    cfg = QPConfig(ev_select="reps", sack_every=1, min_rto_s=0.0,
                   cc_params={"rate_bps": 4e8, "base_rtt_s": 0.002})
    a = make_qp(engine, 1, seed=1, memory=None, config=cfg)
    b = make_qp(engine, 2, seed=2, memory=bytearray(1 << 20), config=cfg)
    connect_pair(a, b, range(4), attr=QPAttr(timeout=12))
    net = MultipathNetwork(a, b, [PathSpec(1e8, 0.001)] * 4, seed=1)
    src = random.Random(1).randbytes(1 << 20)
    a.post_write(wr_id=1, local=src, remote_offset=0)
    net.run(stop=lambda: a.next_event() is not None, until=1.0)
    assert bytes(b.responder.memory) == src
    sent = sum(i.packets_sent for i in a.evs.info.values())
    assert a.evs.reused > sent / 2, (a.evs.reused, sent)
