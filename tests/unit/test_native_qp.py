"""The whole QP, engine against engine: :mod:`tests.unit.qp_diff` drives an all-Python reference
pair and a pair of each engine assignment (python/python, native/native, python/native,
native/python) through the same simulated multipath scenario and compares every datagram, event,
timer, state, stats dict and memory byte after every step.

python/python always runs (it holds the harness and the reference's determinism); the pairs with
``native`` skip while ``agents.mrc._core`` has no ``QP`` (``MRC_NATIVE_QP_REQUIRE=1`` makes them
fail instead). The perturbation tests show the harness failing: a Python QP changed a little (an
NSCC gain, SACK coalescing, the PCG32 seed, its memory, one ulp of an event time, an int stat
turned float) must be reported at the step where it first shows.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import math
import os
import random
import re
import time

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from agents.mrc import native
from agents.mrc import packet as pk
from agents.mrc.qp import QP as PythonQP
from agents.mrc.sim import PathSpec
from agents.mrc.types import QPAttr, WorkCompletion
from tests.unit import qp_diff as qd
from tests.unit.qp_diff import DCQCN, ENGINE_PAIRS, FIXED, NSCC, Mismatch, Op, Scenario

FUZZ_RANDOM = os.environ.get("MRC_FUZZ_RANDOM", "").strip() == "1"
"""``make fuzz`` sets MRC_FUZZ_RANDOM=1: the random-scenario tests draw from a random seed (new
examples every run, MRC_FUZZ_EXAMPLES of them, default 300) instead of the derandomized ~100
that ``make test`` runs, deterministic and fast."""
SETTINGS = settings(max_examples=int(os.environ.get("MRC_FUZZ_EXAMPLES", "300")) if FUZZ_RANDOM else 100,
                    deadline=None, derandomize=not FUZZ_RANDOM, database=None, print_blob=FUZZ_RANDOM,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(autouse=True)
def _quiet_qp_logs():
    """QPs log a warning on every ERR; hundreds of examples would flood the captured output."""
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def needs(engines: tuple[str, str]) -> None:
    """Skip (or, with MRC_NATIVE_QP_REQUIRE=1, fail) before any example runs when a native QP
    is asked for and missing."""
    if "native" in engines:
        qd.native_qp_class()


# ---- hand-made scenarios: each names the behaviour it must exercise ------------------------------
DELAY_S = 0.0002
RATE_BPS = 1e8
PAYLOAD = 1024
BASE_RTT_S = 2 * DELAY_S + (PAYLOAD + 100) * 8 / RATE_BPS


def sim_config(**kw) -> dict:
    cfg = dict(transport="mrc", payload_bytes=PAYLOAD, min_rto_s=0.0, time_scale=1.5,
               cc=NSCC, cc_params={"rate_bps": 4 * RATE_BPS, "base_rtt_s": BASE_RTT_S},
               probe_timeout_s=3 * BASE_RTT_S, probe_interval_s=5 * BASE_RTT_S)
    cfg.update(kw)
    return cfg


ATTR = QPAttr(timeout=12, mpr=16, mpr_dest=16, retry_linear_cnt=3, retry_exp_cnt=2)


def write(t, side, wr_id, size, off=0, imm=None, seed=None) -> Op:
    return Op(t, side, "post_write", (wr_id, size, off, imm, wr_id if seed is None else seed))


def scenario(paths, ops, *, evs=None, spare=(), config=None, attr=ATTR, mem_a=1 << 16,
             mem_b=1 << 18, **kw) -> Scenario:
    evs = tuple(range(len(paths) - len(spare))) if evs is None else evs
    return Scenario(config=config or sim_config(), attr=attr, evs=evs, spare_evs=spare,
                    ev_min_active=kw.pop("ev_min_active", 1), paths=tuple(paths),
                    reverse_paths=kw.pop("reverse_paths", None), mem_a=mem_a, mem_b=mem_b,
                    ops=tuple(ops), **kw)


P = PathSpec(rate_bps=RATE_BPS, delay_s=DELAY_S)


def lossy_multipath(batch=False) -> Scenario:
    """8 EVs and a spare: loss, reordering, duplication, a path down then up; writes both ways,
    with immediates; the controller denies, re-allows and replaces EVs mid-run."""
    paths = [P, dataclasses.replace(P, loss=0.05), dataclasses.replace(P, reorder=0.3,
                                                                        reorder_delay_s=0.001),
             dataclasses.replace(P, duplicate=0.1), dataclasses.replace(P, down=((0.003, 0.02),)),
             dataclasses.replace(P, loss=0.2), P, dataclasses.replace(P, loss=0.01), P]
    ops = [write(0.0, "a", 1, 200_000, imm=7), Op(0.0, "b", "post_recv", (11,)),
           write(0.0, "b", 2, 30_000, off=100), write(0.004, "a", 3, 1, off=250_000),
           Op(0.002, "a", "set_ev_state", (3, "DENIED")), Op(0.01, "a", "set_ev_state", (3, "GOOD")),
           Op(0.004, "a", "replace_ev", (5, 8)), Op(0.005, "b", "set_ev_state", (2, "DENIED"))]
    return scenario(paths, ops, spare=(8,), batch=batch, ev_min_active=2, net_seed=5)


def dcqcn_ecn() -> Scenario:
    """RC with DCQCN as the testbed builds it: a marking queue, CNPs back, rate cuts, pacing."""
    from testbed.spec.jobs import dcqcn_qp
    cfg = sim_config(transport="rc", **dcqcn_qp(2 * RATE_BPS, BASE_RTT_S, 1500))   # 2x the path
    path = dataclasses.replace(P, ecn_kmin_bytes=2_000, ecn_kmax_bytes=20_000, ecn_pmax=0.5)
    return scenario([path], [write(0.0, "a", 1, 150_000), write(0.0, "a", 2, 40_000, off=150_000)],
                    config=cfg, net_seed=2)


def trimming() -> Scenario:
    """Queues that trim instead of dropping (before and at the last hop): TRIMMED NACKs."""
    paths = [dataclasses.replace(P, queue_bytes=4 * PAYLOAD, trim=True),
             dataclasses.replace(P, queue_bytes=4 * PAYLOAD, trim=True, trim_lasthop=True),
             dataclasses.replace(P, queue_bytes=8 * PAYLOAD)]
    cfg = sim_config(cc=FIXED, cc_params={})
    return scenario(paths, [write(0.0, "a", 1, 120_000)], config=cfg)


def failure_without_recovery(transport="mrc") -> Scenario:
    """Every path fails for good mid-transfer: retries exhausted, RETRY_EXC_ERR, ERR on both."""
    down = dataclasses.replace(P, down=((0.002, math.inf),))
    return scenario([down, down], [write(0.0, "a", 1, 200_000), write(0.003, "b", 2, 5_000)],
                    config=sim_config(transport=transport), until=2.0)


PSN_END_A, PSN_END_B = pk.MAX_PSN - 700, pk.MAX_PSN - 5


def psn_space_end() -> Scenario:
    """First PSNs near the end of the 32-bit space (``sq_psn``/``rq_psn``): ``a`` sends 600
    packets at once (more than the native PSN table's first 256 entries, its index crossing the
    table's end) over lossy and reordering paths up to PSN MAX_PSN - 101; ``b`` has room for
    5 PSNs, so its second 4-packet write is refused (PSNs never wrap)."""
    paths = [P, dataclasses.replace(P, loss=0.02),
             dataclasses.replace(P, reorder=0.3, reorder_delay_s=0.001), P]
    ops = [write(0.0, "a", 1, 600 * PAYLOAD, imm=9), Op(0.0, "b", "post_recv", (11,)),
           write(0.0, "b", 2, 4 * PAYLOAD), write(0.001, "b", 3, 4 * PAYLOAD, off=4 * PAYLOAD)]
    return scenario(paths, ops, config=sim_config(cc=FIXED, cc_params={}),
                    mem_b=600 * PAYLOAD, first_psns=(PSN_END_A, PSN_END_B), net_seed=3)


def application_error() -> Scenario:
    """The application moves ``a`` to ERR mid-transfer: flushed writes and receives, and the
    peer's writes to it exhaust their retries."""
    paths = [P, dataclasses.replace(P, loss=0.05)]
    ops = [write(0.0, "a", 1, 100_000, imm=1), write(0.0, "a", 2, 50_000, off=100_000, imm=2),
           Op(0.0, "b", "post_recv", (5,)), Op(0.0, "a", "post_recv", (6,)),
           Op(0.0, "a", "post_recv", (7,)), write(0.005, "b", 3, 20_000, imm=3),
           Op(0.003, "a", "error"), write(0.004, "a", 4, 10), Op(0.004, "a", "set_ev_state", (0, "DENIED"))]
    return scenario(paths, ops, until=2.0)


def late_receives() -> Scenario:
    """WRITE_WITH_IMMs before their receives are posted: NO_PKT_BUFFER NACKs, then completion."""
    ops = [write(0.0, "a", 1, 3_000, imm=10), write(0.0, "a", 2, 3_000, off=4096, imm=20),
           Op(0.01, "b", "post_recv", (1,)), Op(0.02, "b", "post_recv", (2,))]
    return scenario([P, P], ops, attr=dataclasses.replace(ATTR, retry_linear_cnt=7, retry_exp_cnt=7))


def rc_go_back_n() -> Scenario:
    """The RC baseline on one lossy, reordering path (go-back-N), both directions."""
    path = dataclasses.replace(P, loss=0.03, reorder=0.1, reorder_delay_s=0.0005)
    return scenario([path, P], [write(0.0, "a", 1, 100_000), write(0.0, "b", 2, 20_000)],
                    config=sim_config(transport="rc"), net_seed=3)


def one_packet_window() -> Scenario:
    """Two of four paths die with a one-packet window: every loss a 'stalled' timeout, charged
    to its EV once something sent later arrives; both dead EVs retired."""
    down = dataclasses.replace(P, down=((0.003, math.inf),))
    cfg = sim_config(cc=FIXED, cc_params={"window_bytes": float(PAYLOAD)})
    attr = dataclasses.replace(ATTR, retry_linear_cnt=7, retry_exp_cnt=25)
    return scenario([down, P, down, P], [write(0.0, "a", 1, 120_000)], config=cfg, attr=attr,
                    until=3.0)


def loss_retries_mrc() -> Scenario:
    """Four paths losing 5%, a retry budget of 2 (linear 1, exp 1): a PSN lost three times in
    a row, each loss inferred from later ACKs (per-EV threshold or out-of-order scan, no
    timeout), exhausts its retries: ERR."""
    paths = [dataclasses.replace(P, loss=0.05)] * 4
    ops = [write(0.0, "a", 1, 150_000), write(0.004, "a", 2, 50_000, off=200_000)]
    return scenario(paths, ops, attr=dataclasses.replace(ATTR, retry_linear_cnt=1, retry_exp_cnt=1),
                    net_seed=1, until=2.0)


def loss_retries_rc() -> Scenario:
    """RC on a path losing 10%, one retry (linear 1, exp 0): a SEQ_ERR NAK spends it, the
    timeout after the next loss of that PSN exhausts it (one budget for both)."""
    path = dataclasses.replace(P, loss=0.1)
    return scenario([path], [write(0.0, "a", 1, 100_000)], config=sim_config(transport="rc"),
                    attr=dataclasses.replace(ATTR, retry_linear_cnt=1, retry_exp_cnt=0),
                    net_seed=3, until=2.0)


def no_loss_inference() -> Scenario:
    """QPConfig.loss_inference False (the failure claims' control): EV 1 drops 30% of its
    packets and EV 3 dies for good, a trimming queue on EV 2; only NACKs (TRIMMED) and
    timeouts find the losses, and the dead EV is retired from timeouts alone."""
    paths = [P, dataclasses.replace(P, loss=0.3),
             dataclasses.replace(P, queue_bytes=4 * PAYLOAD, trim=True),
             dataclasses.replace(P, down=((0.002, math.inf),))]
    cfg = sim_config(loss_inference=False, reorder_threshold=1, ooo_threshold=1)
    attr = dataclasses.replace(ATTR, retry_linear_cnt=7, retry_exp_cnt=25)
    return scenario(paths, [write(0.0, "a", 1, 200_000), write(0.0, "b", 2, 20_000)],
                    config=cfg, attr=attr, net_seed=4, until=3.0)


def slow_marking_paths(delay_filter="ewma", slow=1, fast=7) -> Scenario:
    """NSCC (ECN-capable) over ``slow`` paths at half the rate marking CE above 2 packets queued
    and ``fast`` clean ones: with ``delay_filter`` "ewma" the decrease reads uet-htsim's filtered
    delay (agents.mrc.cc.NSCC._filter_delay), which the fast paths' ACKs keep low."""
    marking = dataclasses.replace(P, rate_bps=RATE_BPS / 2, ecn_kmin_bytes=2 * PAYLOAD,
                                  ecn_kmax_bytes=8 * PAYLOAD, ecn_pmax=1.0)
    cfg = sim_config(cc_params={"rate_bps": 4 * RATE_BPS, "base_rtt_s": BASE_RTT_S,
                                "ecn_capable": True, "delay_filter": delay_filter})
    return scenario([marking] * slow + [P] * fast, [write(0.0, "a", 1, 400_000),
                                                    write(0.01, "a", 2, 400_000, off=400_000)],
                    config=cfg, mem_b=1 << 20, net_seed=2, until=2.0)


def reps_steering(ev_select="reps") -> Scenario:
    """The non-spec REPS EV selection (agents.mrc.reps.pick, ``ev_select`` "reps"):
    2 of 8 paths at half the rate marking CE above 2 packets queued, a SACK per packet, so
    that each clean SACK hands its EV the next packet."""
    marking = dataclasses.replace(P, rate_bps=RATE_BPS / 2, ecn_kmin_bytes=2 * PAYLOAD,
                                  ecn_kmax_bytes=8 * PAYLOAD, ecn_pmax=1.0)
    cfg = sim_config(cc_params={"rate_bps": 4 * RATE_BPS, "base_rtt_s": BASE_RTT_S,
                                "ecn_capable": True}, ev_select=ev_select, sack_every=1)
    return scenario([marking] * 2 + [P] * 6, [write(0.0, "a", 1, 400_000),
                                              write(0.01, "a", 2, 400_000, off=400_000)],
                    config=cfg, mem_b=1 << 20, net_seed=2, until=2.0)


def lossy_multipath_reps() -> Scenario:
    """lossy_multipath with the REPS EV selection: retransmissions (``exclude``, the alive
    rule), DENIED, replaced and retired EVs in the reuse queue."""
    sc = lossy_multipath()
    return dataclasses.replace(sc, config={**sc.config, "ev_select": "reps"})


def _wcs(result, opcode=None, status=None):
    return [e[1] for e in result.events if e[0] == "WorkCompletion"
            and (opcode is None or e[1]["opcode"] == f"WCOpcode.{opcode}")
            and (status is None or e[1]["status"] == f"WCStatus.{status}")]


def _ev_events(result):
    return [e[1] for e in result.events if e[0] == "EVEvent"]


def _payload(wr_id, size):
    return random.Random(wr_id).randbytes(size)


def check_lossy(r):
    a, b = r.final[0]["stats"], r.final[1]["stats"]
    assert sorted(w["wr_id"] for w in _wcs(r, "RDMA_WRITE", "SUCCESS")) == [1, 2, 3]
    assert [(w["wr_id"], w["imm"]) for w in _wcs(r, "RECV_RDMA_WITH_IMM")] == [(11, 7)]
    assert a["retransmissions"] > 0 and b["rx_duplicates"] > 0 and b["rx_ooo"] > 0
    assert any(e["new"] == "EVState.ASSUMED_BAD" for e in _ev_events(r))
    assert 8 in a["evs"] and 5 not in a["evs"]                     # replaced
    assert r.memory[1][:200_000] == _payload(1, 200_000) and r.memory[0][100:30_100] == _payload(2, 30_000)


def check_dcqcn(r):
    a, b = r.final[0]["stats"], r.final[1]["stats"]
    assert b["cnp_sent"] > 0 and a["cnp_received"] == b["cnp_sent"] and a["cc"]["cnps"] > 0
    assert r.memory[1][:150_000] == _payload(1, 150_000)


def check_trimming(r):
    assert sum(c["trimmed"] for c in r.net.values()) > 0
    skips = r.final[0]["stats"]["ev_skips"]
    assert skips["trim"] > 0 and skips["trim_lasthop"] > 0
    assert r.memory[1][:120_000] == _payload(1, 120_000)


def check_failure(r):
    assert [s["state"] for s in (r.final[0], r.final[1])] == ["QPState.ERR", "QPState.ERR"]
    assert {w["wr_id"] for w in _wcs(r, "RDMA_WRITE", "RETRY_EXC_ERR")} == {1, 2}
    assert sum(e[0] == "QPError" for e in r.events) == 2


def check_app_error(r):
    assert r.final[0]["state"] == "QPState.ERR" and r.final[1]["state"] == "QPState.ERR"
    assert 2 in {w["wr_id"] for w in _wcs(r, "RDMA_WRITE", "WR_FLUSH_ERR")}
    assert 3 in {w["wr_id"] for w in _wcs(r, "RDMA_WRITE", "RETRY_EXC_ERR")}
    assert {w["wr_id"] for w in _wcs(r, "RECV_RDMA_WITH_IMM", "WR_FLUSH_ERR")} == {5, 6, 7}
    assert any(e[0] == "QPError" and e[1]["reason"] == "moved to ERR by the application"
               for e in r.events)


def check_late_receives(r):
    assert r.final[0]["stats"]["nacks_no_buffer"] > 0
    assert [(w["wr_id"], w["imm"]) for w in _wcs(r, "RECV_RDMA_WITH_IMM", "SUCCESS")] == \
        [(1, 10), (2, 20)]


def check_one_packet_window(r):
    a = r.final[0]["stats"]
    assert a["ev_losses_stalled"] > 0 and a["ev_losses_confirmed"] >= 4
    assert sorted({e["ev"] for e in _ev_events(r) if e["new"] == "EVState.ASSUMED_BAD"}) == [0, 2]
    assert r.memory[1][:120_000] == _payload(1, 120_000)


def _reasons(r):
    return [e[1]["reason"] for e in r.events if e[0] == "QPError"]


def check_loss_retries_mrc(r):
    assert r.final[0]["state"] == "QPState.ERR" and r.final[0]["stats"]["timeouts"] == 0
    assert re.fullmatch(r"retry exhausted: PSN \d+ lost 3 times, 0 by timeout, last by "
                        r"(ev_threshold|ooo) \(EV \d+\)", _reasons(r)[0])
    assert r.final[0]["stats"]["loss_retries"] >= 3
    assert [w["wr_id"] for w in _wcs(r, "RDMA_WRITE", "RETRY_EXC_ERR")] == [1]


def check_loss_retries_rc(r):
    assert r.final[0]["state"] == "QPState.ERR"
    assert re.fullmatch(r"retry exhausted: PSN \d+ lost 2 times, 1 by timeout, last by timeout "
                        r"\(EV 0\)", _reasons(r)[0])
    assert r.final[0]["stats"]["loss_retries"] >= 1


def check_no_loss_inference(r):
    a = r.final[0]["stats"]
    assert a["loss_retries"] == 0 and a["timeouts"] > 0 and a["retransmissions"] > 0
    assert sum(c["trimmed"] for c in r.net.values()) > 0
    bad = [e for e in _ev_events(r) if e["new"] == "EVState.ASSUMED_BAD" and e["qpn"] == 1]
    assert 3 in {e["ev"] for e in bad}
    assert r.memory[1][:200_000] == _payload(1, 200_000)


def check_psn_space_end(r):
    a, b = r.final[0]["stats"], r.final[1]["stats"]
    assert a["retransmissions"] > 0 and a["next_psn"] == a["snd_una"] == PSN_END_A + 600
    assert b["rx_cum_psn"] == PSN_END_A + 600 and a["rx_cum_psn"] == b["next_psn"] == PSN_END_B + 4
    assert r.memory[1] == _payload(1, 600 * PAYLOAD)
    assert [(w["wr_id"], w["psn"]) for w in _wcs(r, "RECV_RDMA_WITH_IMM", "SUCCESS")] == \
        [(11, PSN_END_A + 599)]
    assert sorted(w["wr_id"] for w in _wcs(r, "RDMA_WRITE", "SUCCESS")) == [1, 2]   # 3 refused


def check_slow_marking_path(r):
    """One slow path of 8: the filter spared marked ACKs above the target (``md_filtered``) and
    cut less often than the marked ACKs' own delay does under the same marks (0 against 7)."""
    cc = r.final[0]["stats"]["cc"]
    on_ack = qd.run_lockstep(slow_marking_paths("ack"), ("python", "python")).final[0]["stats"]["cc"]
    assert cc["ecn"] > 0 and cc["md_filtered"] > 0 and "md_filtered" not in on_ack
    assert cc["md"] < on_ack["md"], (cc, on_ack)
    assert sorted(w["wr_id"] for w in _wcs(r, "RDMA_WRITE", "SUCCESS")) == [1, 2]


def check_marking_everywhere(r):
    """Every path slow and marking: the filtered delay climbs above the target and cuts (21
    times), after sparing the first marked ACKs (48)."""
    cc = r.final[0]["stats"]["cc"]
    assert cc["md"] > 0 and cc["md_filtered"] > 0, cc
    assert sorted(w["wr_id"] for w in _wcs(r, "RDMA_WRITE", "SUCCESS")) == [1, 2]


def _slow_share(final, slow=(0, 1)) -> float:
    evs = final["stats"]["evs"]
    return sum(evs[e]["packets_sent"] for e in slow) / sum(v["packets_sent"] for v in evs.values())


def check_reps_steering(r):
    """Good SACKs' EVs were reused, and the marking paths carried less than under the spec's
    rotation with the same marks (python: 16.3% of the packets against 22.3%; 25% unsteered)."""
    spec = qd.run_lockstep(reps_steering("rotation"), ("python", "python")).final[0]
    assert r.final[0]["reuse"][1] > 0 and spec["reuse"] == [[], 0]
    assert _slow_share(r.final[0]) < _slow_share(spec) - 0.03, (_slow_share(r.final[0]), _slow_share(spec))
    assert sorted(w["wr_id"] for w in _wcs(r, "RDMA_WRITE", "SUCCESS")) == [1, 2]


def check_lossy_reps(r):
    check_lossy(r)
    assert r.final[0]["reuse"][1] > 0


def check_rc(r):
    assert r.final[0]["stats"]["retransmissions"] > 0
    assert sorted(w["wr_id"] for w in _wcs(r, "RDMA_WRITE", "SUCCESS")) == [1, 2]
    assert set(r.final[0]["stats"]["evs"]) == {0}                  # RC: the first EV only


HAND_MADE = {
    "lossy_multipath": (lossy_multipath, check_lossy),
    "lossy_multipath_batched": (lambda: lossy_multipath(batch=True), check_lossy),
    "dcqcn_ecn": (dcqcn_ecn, check_dcqcn),
    "trimming": (trimming, check_trimming),
    "failure_mrc": (failure_without_recovery, check_failure),
    "failure_rc": (lambda: failure_without_recovery("rc"), check_failure),
    "application_error": (application_error, check_app_error),
    "late_receives": (late_receives, check_late_receives),
    "rc_go_back_n": (rc_go_back_n, check_rc),
    "one_packet_window": (one_packet_window, check_one_packet_window),
    "loss_retries_mrc": (loss_retries_mrc, check_loss_retries_mrc),
    "loss_retries_rc": (loss_retries_rc, check_loss_retries_rc),
    "no_loss_inference": (no_loss_inference, check_no_loss_inference),
    "psn_space_end": (psn_space_end, check_psn_space_end),
    "nscc_filtered_delay": (slow_marking_paths, check_slow_marking_path),
    "nscc_filtered_delay_cuts": (lambda: slow_marking_paths(slow=4, fast=0), check_marking_everywhere),
    "reps_steering": (reps_steering, check_reps_steering),
    "lossy_multipath_reps": (lossy_multipath_reps, check_lossy_reps),
}


@pytest.mark.parametrize("name", sorted(HAND_MADE))
@pytest.mark.parametrize("engines", ENGINE_PAIRS, ids="-".join)
def test_hand_made_scenario_agrees(engines, name):
    needs(engines)
    build, check = HAND_MADE[name]
    result = qd.run_lockstep(build(), engines)
    check(result)   # the scenario still exercises what it is named for


# ---- random scenarios ---------------------------------------------------------------------------
@pytest.mark.parametrize("engines", ENGINE_PAIRS, ids="-".join)
def test_random_mrc_scenarios_agree(engines):
    needs(engines)

    @SETTINGS
    @given(qd.scenarios(transports=("mrc",), ccs=(NSCC, FIXED)))
    def run(sc):
        qd.run_lockstep(sc, engines)

    run()


@pytest.mark.parametrize("engines", ENGINE_PAIRS, ids="-".join)
def test_random_loss_retry_scenarios_agree(engines):
    """Scenarios that run PSNs out of retries on loss evidence (the rule of
    agents.mrc.loss.RETRY_SPENT), MRC and RC."""
    needs(engines)

    @settings(SETTINGS, max_examples=30)
    @given(qd.loss_retry_scenarios())
    def run(sc):
        qd.run_lockstep(sc, engines)

    run()


@pytest.mark.parametrize("engines", ENGINE_PAIRS, ids="-".join)
def test_random_rc_scenarios_agree(engines):
    needs(engines)

    @settings(SETTINGS, max_examples=60)
    @given(qd.scenarios(transports=("rc",), ccs=(NSCC, FIXED, DCQCN)))
    def run(sc):
        qd.run_lockstep(sc, engines)

    run()


def test_random_loss_retry_scenarios_exhaust_retries_on_loss_evidence():
    """:func:`qp_diff.loss_retry_scenarios` reaches what it is for: QPs in ERR because a PSN's
    retries ran out on NACKs or inferred losses (not only timeouts), on MRC and RC."""
    seen: collections.Counter = collections.Counter()

    @settings(SETTINGS, max_examples=30)
    @given(qd.loss_retry_scenarios())
    def run(sc):
        r = qd.run_lockstep(sc, ("python", "python"))
        for kind, ev in r.events:
            m = re.search(r"last by (\w+)", ev.get("reason", "")) if kind == "QPError" else None
            if m and m.group(1) != "timeout":
                seen[sc.config["transport"], m.group(1)] += 1

    run()
    assert seen["mrc", "ev_threshold"] + seen["mrc", "ooo"] > 0 and seen["rc", "seq_err"] > 0, seen


def _exercised(sc: Scenario, r, seen: set) -> None:
    """Add to ``seen`` what the example ``sc`` (run as ``r``) exercised (the names
    test_random_scenarios_exercise_the_protocol wants)."""
    for first, side in zip(sc.first_psns, r.final):
        s = side["stats"]
        for key in ("retransmissions", "timeouts", "nacks_no_buffer", "rx_duplicates",
                    "rx_ooo", "cnp_sent"):
            if s[key]:
                seen.add(key)
        if first and s["next_psn"] > first:
            seen.add("psns_near_the_end")        # sq_psn near 2**32 (qd.first_psn)
        if s["next_psn"] - first > 256:
            seen.add("over_256_psns")            # past the native PSN table's first size
        seen.update(f"skip_{k}" for k, v in s["ev_skips"].items() if v)
        if "md_filtered" in s["cc"]:             # NSCC on the filtered delay (qd.scenarios)
            seen.add("nscc_ewma")
    if any(side["reuse"] and side["reuse"][1] for side in r.final):
        seen.add("reps_reused")                  # the REPS variant reused a good ACK's EV
    seen.update(k for c in r.net.values() for k, v in c.items() if v)
    for kind, ev in r.events:
        seen.add(f"{kind}:{ev.get('status', ev.get('new', ''))}")
    seen.update(f"op:{op.kind}" for op in sc.ops[:r.ops_done])


def test_random_scenarios_exercise_the_protocol():
    """The generator reaches the behaviours it claims (so the random tests are not vacuous):
    losses and retransmissions, EV state events, SKIPs, trims, CNPs, immediates, every
    completion status, controller calls, ERR, first PSNs near the end of the PSN space, more
    than 256 PSNs sent by one QP, NSCC on the filtered delay (its cuts and spared marks: the
    hand-made ``nscc_filtered_delay*``; random examples are too short for its average) and the
    REPS EV selection reusing good ACKs' EVs."""
    seen: set[str] = set()

    @settings(SETTINGS, max_examples=120)
    @given(qd.scenarios())
    def run(sc):   # the body is in _exercised: hypothesis derives its examples from this source
        _exercised(sc, qd.run_lockstep(sc, ("python", "python")), seen)

    run()
    wanted = {"retransmissions", "timeouts", "nacks_no_buffer", "rx_duplicates", "rx_ooo",
              "cnp_sent", "skip_ecn", "trimmed", "ce_marked", "dropped_down", "dropped_queue",
              "duplicated", "reordered", "WorkCompletion:WCStatus.SUCCESS",
              "WorkCompletion:WCStatus.RETRY_EXC_ERR", "WorkCompletion:WCStatus.WR_FLUSH_ERR",
              "EVEvent:EVState.ASSUMED_BAD", "EVEvent:EVState.GOOD", "QPError:",
              "op:set_ev_state", "op:replace_ev", "op:error", "op:post_recv",
              "psns_near_the_end", "over_256_psns", "nscc_ewma", "reps_reused"}
    assert wanted <= seen, f"never exercised: {sorted(wanted - seen)}"


# ---- the harness can fail: one side perturbed -------------------------------------------------
@contextlib.contextmanager
def engine(name: str, factory):
    """Register ``factory`` as engine ``name`` for the duration."""
    qd.ENGINES[name] = factory
    try:
        yield
    finally:
        del qd.ENGINES[name]


def nscc_learnt() -> Scenario:
    """NSCC learning its base RTT from a 10-packet window, so its gain moves cwnd at once."""
    cfg = sim_config(cc_params={})
    return scenario([P, P, dataclasses.replace(P, loss=0.02)], [write(0.0, "a", 1, 120_000)],
                    config=cfg)


def perturbed(sc: Scenario, factory, side: str = "a") -> Mismatch:
    """Run ``sc`` with QP ``side`` built by ``factory``; return the Mismatch it must raise."""
    engines = ("perturbed", "python") if side == "a" else ("python", "perturbed")
    with engine("perturbed", factory), pytest.raises(Mismatch) as info:
        qd.run_lockstep(sc, engines)
    m = info.value
    text = str(m)
    assert f"step {m.step}," in text and f"QP {side} (qpn" in text and "perturbed vs reference" in text
    assert "scenario (a: " in text and "PathSpec(" in text
    return m


def test_a_slightly_different_nscc_gain_is_caught_at_the_step_it_shows():
    def factory(qpn, *, seed, memory, config):
        qp = PythonQP(qpn, rng=random.Random(seed), memory=memory, config=config)
        qp.cc.alpha *= 1 + 2**-40
        return qp

    m = perturbed(nscc_learnt(), factory)
    assert m.what == "stats" and m.step > 1
    assert any(line.startswith("cwnd_bytes:") for line in m.lines)


def test_different_sack_coalescing_is_caught_in_the_responders_datagrams():
    def factory(qpn, *, seed, memory, config):
        cfg = dataclasses.replace(config, sack_every=config.sack_every + 1)
        return PythonQP(qpn, rng=random.Random(seed), memory=memory, config=cfg)

    m = perturbed(nscc_learnt(), factory, side="b")
    assert m.side == "b" and m.step > 1
    assert m.what in ("emitted datagrams", "timer")
    assert "SackPacket" in str(m) or m.what == "timer"


def test_a_different_pcg32_seed_is_caught_at_the_first_data_packet():
    def factory(qpn, *, seed, memory, config):
        return PythonQP(qpn, rng=random.Random(seed + 1), memory=memory, config=config)

    m = perturbed(nscc_learnt(), factory)
    assert (m.what, m.step) == ("emitted datagrams", 1)
    assert "call a.post_write" in str(m) and "DataPacket" in str(m)


def test_a_qp_writing_elsewhere_than_the_registered_memory_is_caught():
    def factory(qpn, *, seed, memory, config):
        return PythonQP(qpn, rng=random.Random(seed), memory=bytearray(len(memory)), config=config)

    m = perturbed(nscc_learnt(), factory, side="b")
    assert m.what == "memory" and "first differing byte at offset 0" in str(m)


class _UlpLateCompletions(PythonQP):
    """WorkCompletion times one ulp later."""

    def next_event(self):
        e = super().next_event()
        if isinstance(e, WorkCompletion):
            e = dataclasses.replace(e, time=math.nextafter(e.time, math.inf))
        return e


class _FloatCounters(PythonQP):
    """``tx_bytes`` as a float of the same value (JSON would say 1024.0, not 1024)."""

    def stats(self):
        s = super().stats()
        s["tx_bytes"] = float(s["tx_bytes"])
        return s


class _OtherDenyMessage(PythonQP):
    def set_ev_state(self, ev, state, now):
        if ev not in self.evs.order:
            raise KeyError(f"no EV {ev}")
        super().set_ev_state(ev, state, now)


@pytest.mark.parametrize("cls, what", [(_UlpLateCompletions, "events"),
                                       (_FloatCounters, "stats")])
def test_one_ulp_or_an_int_turned_float_is_a_mismatch(cls, what):
    def factory(qpn, *, seed, memory, config):
        return cls(qpn, rng=random.Random(seed), memory=memory, config=config)

    m = perturbed(nscc_learnt(), factory)
    assert m.what == what


def test_a_call_raising_another_message_is_a_mismatch():
    def factory(qpn, *, seed, memory, config):
        return _OtherDenyMessage(qpn, rng=random.Random(seed), memory=memory, config=config)

    sc = dataclasses.replace(nscc_learnt(), ops=(write(0.0, "a", 1, 10_000),
                                                 Op(0.001, "a", "set_ev_state", (9, "DENIED"))))
    m = perturbed(sc, factory)
    assert m.what == "outcome" and "KeyError" in str(m) and "call a.set_ev_state(9, 'DENIED')" in str(m)


def test_random_scenarios_catch_a_perturbation_and_report_it():
    """A hypothesis search over random scenarios, one side's NSCC gain perturbed, fails with a
    report naming the step."""
    def factory(qpn, *, seed, memory, config):
        qp = PythonQP(qpn, rng=random.Random(seed), memory=memory, config=config)
        if hasattr(qp.cc, "alpha") and qp.cc.name == NSCC:
            qp.cc.alpha *= 1.001
        return qp

    @settings(SETTINGS, max_examples=30, phases=[Phase.generate])   # no shrinking: time
    @given(qd.scenarios(transports=("mrc",), ccs=(NSCC,)))
    def run(sc):
        qd.run_lockstep(sc, ("perturbed", "python"))

    with engine("perturbed", factory), pytest.raises(Mismatch, match=r"engines differ at step \d+"):
        run()


# ---- the harness's pieces ---------------------------------------------------------------------
def test_same_is_strict_about_types_zero_signs_nans_and_key_order():
    same = qd._same
    assert same({"x": 1.5, "y": [1, None]}, {"x": 1.5, "y": [1, None]})
    assert not same(1, 1.0) and not same(True, 1) and not same(0.0, -0.0)
    assert same(math.nan, math.nan) and same({"n": math.nan}, {"n": math.nan})
    assert same(math.inf, math.inf) and not same(math.inf, 1e308)
    assert not same({"a": 1, "b": 2}, {"b": 2, "a": 1})
    assert not same([1, 2], (1, 2)) and not same({1: 0}, {"1": 0})
    assert not same(0.1 + 0.2, 0.3)


def test_plain_spells_enums_events_and_attrs():
    from agents.mrc.ev import EVCause, EVEvent, EVState
    from agents.mrc.types import QPError, WCOpcode, WCStatus
    e = EVEvent(0.5, 1, 3, EVState.GOOD, EVState.ASSUMED_BAD, EVCause.LOSS, 2)
    assert qd.plain(e) == ["EVEvent", {"time": 0.5, "qpn": 1, "ev": 3, "old": "EVState.GOOD",
                                       "new": "EVState.ASSUMED_BAD", "cause": "EVCause.LOSS",
                                       "drop_count": 2}]
    wc = WorkCompletion(1.0, 2, WCOpcode.RDMA_WRITE, WCStatus.SUCCESS, 7, 10)
    assert qd.plain(wc)[1]["status"] == "WCStatus.SUCCESS" and qd.plain(wc)[1]["imm"] is None
    assert qd.plain(QPError(1.0, 2, "why")) == ["QPError", {"time": 1.0, "qpn": 2, "reason": "why"}]
    assert qd.plain(QPAttr())["timeout"] == 8 and qd.plain(EVState.GOOD) != 1


def test_diff_datagrams_decodes_the_first_difference():
    from agents.mrc import packet as pk
    d1 = pk.encode_data_parts(2, 5, 3, int(pk.Opcode.WRITE_ONLY), 0, 0, 9, None, b"abc")
    d2 = pk.encode_data_parts(2, 5, 4, int(pk.Opcode.WRITE_ONLY), 0, 0, 9, None, b"abc")
    lines = qd.diff_datagrams([(d1, 3)], [(d2, 4)])
    assert "datagram 0 of 1" in lines[0] and "ev=3" in lines[1] and "ev=4" in lines[2]
    assert "1 datagrams vs 0" in qd.diff_datagrams([(d1, 3)], [])[0]
    assert "unparsable" in qd.describe_datagram(b"\x01\x02junk")


def test_make_qp_engines_and_the_native_skip_rules(monkeypatch):
    with pytest.raises(ValueError, match="unknown engine"):
        qd.make_qp("fortran", 1, seed=0, memory=None, config=qd.QPConfig())
    qp = qd.make_qp("python", 7, seed=0, memory=None, config=qd.QPConfig())
    assert isinstance(qp, PythonQP) and qp.qpn == 7

    class NoQP:   # a built _core from before the QP was ported
        pass

    monkeypatch.setattr(native, "load", lambda require=None: NoQP)
    monkeypatch.delenv(qd.QP_REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="has no QP"):
        qd.make_qp("native", 1, seed=0, memory=None, config=qd.QPConfig())
    monkeypatch.setenv(qd.QP_REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="MRC_NATIVE_QP_REQUIRE=1"):
        qd.make_qp("native", 1, seed=0, memory=None, config=qd.QPConfig())

    NoQP.QP = PythonQP   # once _core has a QP, the factory builds it
    assert isinstance(qd.make_qp("native", 3, seed=0, memory=None, config=qd.QPConfig()), PythonQP)


@pytest.mark.parametrize("name", ["python", "native"])
def test_each_engine_has_the_qp_api_the_harness_uses(name):
    needs((name,))
    qp = qd.make_qp(name, 5, seed=0, memory=bytearray(64), config=qd.QPConfig())
    missing = [attr for attr in qd.QP_API if not hasattr(qp, attr)]
    assert not missing, f"{name} QP lacks {missing}"
    assert qp.qpn == 5 and qp.state is qd.QPState.RST and qp.get_timer() is None


def test_a_run_is_lockstep_and_repeats_exactly():
    sc = lossy_multipath()
    t0 = time.perf_counter()
    r1 = qd.run_lockstep(sc, ("python", "python"))
    r2 = qd.run_lockstep(sc, ("python", "python"))
    assert r1.steps == r2.steps > 100 and r1.datagrams == r2.datagrams > 300
    assert r1.events == r2.events and r1.memory == r2.memory and r1.ops_done == len(sc.ops)
    assert time.perf_counter() - t0 < 10


def test_batched_delivery_leaves_the_qps_as_one_by_one():
    """receive_datagrams (the sim's batch mode) ends where receive_datagram per datagram ends."""
    r1 = qd.run_lockstep(lossy_multipath(batch=False), ("python", "python"))
    r2 = qd.run_lockstep(lossy_multipath(batch=True), ("python", "python"))
    assert r1.memory == r2.memory and r1.events == r2.events
    assert r1.final[0]["stats"] == r2.final[0]["stats"] and r1.final[1]["stats"] == r2.final[1]["stats"]


def test_trim_datagram_cuts_data_only():
    from agents.mrc import packet as pk
    from agents.mrc.sim import trim_datagram
    d = pk.encode_data_parts(2, 5, 3, int(pk.Opcode.WRITE_ONLY_WITH_IMM), pk.FLAG_RTX, 64, 9, 77,
                             b"x" * 100)
    t = pk.parse(trim_datagram(d, lasthop=True))
    assert (t.psn, t.ev, t.length, t.imm, t.payload) == (5, 3, 100, 77, b"")
    assert t.flags == pk.FLAG_RTX | pk.FLAG_TRIMMED | pk.FLAG_TRIMMED_LASTHOP
    assert pk.parse(trim_datagram(d)).flags == pk.FLAG_RTX | pk.FLAG_TRIMMED
    assert trim_datagram(trim_datagram(d)) is None
    assert trim_datagram(pk.encode_cnp(1, 2, 3)) is None and trim_datagram(b"") is None
    with pytest.raises(ValueError, match="trim_lasthop needs trim"):
        PathSpec(trim_lasthop=True)


class _CrashOnSack(PythonQP):
    """Raises where the Python QP would process its first SACK."""

    def receive_datagram(self, data, now, *, ecn=False):
        if data[1] == 2:
            raise MemoryError("native QP out of memory")
        super().receive_datagram(data, now, ecn=ecn)

    def receive_datagrams(self, datagrams, now, ce=None):
        for i, d in enumerate(datagrams):
            self.receive_datagram(d, now, ecn=ce is not None and ce[i])


def test_an_exception_only_the_engine_under_test_raises_is_reported_with_its_step():
    def factory(qpn, *, seed, memory, config):
        return _CrashOnSack(qpn, rng=random.Random(seed), memory=memory, config=config)

    with engine("perturbed", factory), pytest.raises(Mismatch) as info:
        qd.run_lockstep(nscc_learnt(), ("perturbed", "python"))
    m = info.value
    assert m.what == "an exception the reference did not raise" and m.step > 1 and m.side is None
    assert "MemoryError: native QP out of memory" in str(m) and "network step" in str(m)
