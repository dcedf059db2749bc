"""NSCC's ``delay_filter`` (issue 45 item 6): the multiplicative decrease on the marked ACK's own
delay ("ack", the default) or on uet-htsim's filtered delay ("ewma": ``UecSrc::update_delay`` and
``multiplicative_decrease`` in ``htsim/sim/uec.cpp``, the NSCC that mrc_ctl.h names
"uet-1.0-nscc"), on a fake clock, both engines; and the scenario key that selects it.

The picture (docs/reproducing.md, "A degraded link"): one path of a QP queues far above the
target and marks some of its packets, the others deliver at once. On the ACK's own delay every
marked ACK from the slow path halves the window (the floor, 0.5) once a base RTT; the filtered
delay stays near what most ACKs say, so the window is hardly cut.
"""
from __future__ import annotations

import random

import pytest

from agents.mrc import cc, native
from agents.mrc.qp import QP, connect_pair
from agents.mrc.types import QPAttr, QPConfig
from testbed.spec import load_scenario
from testbed.spec.jobs import build_jobs
from tests.unit.test_jobs import DATA, REPO

BASE_S = 0.001                # base RTT, also the target delay (target_factor 1)
RATE_BPS = 1e9                # BDP 125 kB, max_cwnd 187.5 kB
MSS = 4096
ACK_DT_S = BASE_S / 100       # 100 ACKs per base RTT
SLOW_EVERY = 9                # one ACK in 9 from the slow path (~11%, the fabric's share)
SLOW_DELAY_S = 20 * BASE_S    # its queue: 20 base RTTs above the base
MARK_EVERY = 4                # one slow ACK in 4 marked (the fabric: 26-30%)


def nscc(engine: str, delay_filter: str):
    kw = dict(mss_bytes=MSS, rate_bps=RATE_BPS, base_rtt_s=BASE_S, ecn_capable=True,
              delay_filter=delay_filter)
    if engine == "python":
        return cc.NSCC(**kw)
    core = native.load()
    if core is None:
        if native.required():
            pytest.fail("the native engine is required but not built")
        pytest.skip("native engine not built")
    return core.NSCC(**kw)


def one_slow_path(c, *, rtts: int = 50) -> float:
    """ACKs for ``rtts`` base RTTs, self-clocked (one MSS acknowledged every base RTT x MSS /
    cwnd: a window's worth per base RTT): the fast paths' at no queueing delay, every
    SLOW_EVERY-th from the slow path, SLOW_DELAY_S above the base and marked one time in
    MARK_EVERY. Returns the time-averaged cwnd over the last ``rtts`` - 5 base RTTs (bytes)."""
    now, i, slow, area = 0.0, 0, 0, 0.0
    while now < rtts * BASE_S:
        if i % SLOW_EVERY == 0:
            c.on_packets_acked(now=now, acked_bytes=MSS, rtt_s=BASE_S + SLOW_DELAY_S,
                               ecn=slow % MARK_EVERY == 0)
            slow += 1
        else:
            c.on_packets_acked(now=now, acked_bytes=MSS, rtt_s=BASE_S)
        dt = BASE_S * MSS / c.cwnd_bytes
        if now >= 5 * BASE_S:
            area += c.cwnd_bytes * dt
        now += dt
        i += 1
    return area / (now - 5 * BASE_S)


@pytest.mark.parametrize("engine", ["python", "native"])
def test_the_filtered_delay_spares_the_window_one_slow_path_marks(engine):
    """Marked ACKs from the slow path (2.8% of all): on their own delay the window is cut once a
    base RTT by the 0.5 floor (33 cuts in 50 base RTTs) and earns it back by the proportional
    increase in between: 51% of its maximum on average. The filtered delay (marked samples pull
    it up, the slow path's unmarked ones down to a quarter of the base RTT) stays below the
    target (0.56 ms against 1 ms): 64 marked ACKs above the target spared, no cut, the window
    stays at its maximum (187.5 kB, 1.5 BDP)."""
    ack, ewma = nscc(engine, "ack"), nscc(engine, "ewma")
    by_ack, by_ewma = one_slow_path(ack), one_slow_path(ewma)
    assert ack.md_count >= 25 and by_ack < 0.6 * ack.max_cwnd_bytes
    assert ewma.md_count == 0 and ewma.md_filtered > 50
    assert by_ewma == pytest.approx(ewma.max_cwnd_bytes, rel=1e-3)
    assert 0.5 * BASE_S < ewma.avg_delay_s < BASE_S
    assert "md_filtered" in ewma.counters() and "md_filtered" not in ack.counters()


@pytest.mark.parametrize("engine", ["python", "native"])
def test_the_filtered_delay_cuts_while_its_average_is_above_the_target(engine):
    """Every ACK marked, 3 base RTTs of queueing: the average climbs (weight 0.0125 a sample)
    and the first cut comes once it passes the target; the factor is gamma's on the average,
    1 - 0.8 (avg - target) / avg, not on the ACK's delay."""
    c = nscc(engine, "ewma")
    now, cuts = 0.0, []
    while not cuts:
        before = c.cwnd_bytes
        c.on_packets_acked(now=now, acked_bytes=0, rtt_s=4 * BASE_S, ecn=True)
        if c.md_count:
            cuts.append((now, c.avg_delay_s, c.cwnd_bytes / before))
        now += ACK_DT_S
    t, avg, factor = cuts[0]
    assert avg > BASE_S and c.md_filtered > 0        # marked ACKs above target spared until then
    assert factor == pytest.approx(max(1 - 0.8 * (avg - BASE_S) / avg, 0.5))
    assert factor > 0.5 > 1 - 0.8 * (3 * BASE_S - BASE_S) / (3 * BASE_S)   # the ACK's own: 0.47


@pytest.mark.parametrize("engine", ["python", "native"])
def test_unmarked_delay_above_the_target_pulls_the_average_to_a_quarter_base_rtt(engine):
    """Without marks, queueing above the target is not what the filter follows: its average
    converges to base / 4; a trim NACK counts as a marked sample of one base RTT."""
    c = nscc(engine, "ewma")
    for i in range(2000):
        c.on_packets_acked(now=i * ACK_DT_S, acked_bytes=MSS, rtt_s=BASE_S + 10 * BASE_S)
    assert c.avg_delay_s == pytest.approx(BASE_S / 4, rel=1e-6)
    before = c.avg_delay_s
    c.on_packets_lost(now=2000 * ACK_DT_S, lost_bytes=MSS, trimmed=True)
    assert c.avg_delay_s == pytest.approx(before + 0.0125 * (BASE_S - before))
    c.on_packets_lost(now=2000 * ACK_DT_S, lost_bytes=MSS, trimmed=False)   # not a trim: unchanged
    assert c.avg_delay_s == pytest.approx(before + 0.0125 * (BASE_S - before))


@pytest.mark.parametrize("engine", ["python", "native"])
def test_an_unknown_delay_filter_is_refused(engine):
    with pytest.raises(ValueError, match="delay_filter='htsim'"):
        nscc(engine, "htsim")


def test_the_scenario_key_reaches_the_qps_nscc(tmp_path):
    """``qp: {nscc_delay_filter: ewma}`` -> every mrc and rc job's ``cc_params`` ->
    QPConfig -> NSCC(delay_filter="ewma"); DCQCN's QPs (rc-dcqcn) do not get it; absent, the
    job specs carry nothing new (the default, "ack"); an unknown value is refused with its line."""
    from testbed.model.kernel import KernelFeatures
    from testbed.spec.yamlread import SpecError
    feats = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True)
    text = (DATA / "scenario-ok.yaml").read_text().replace("../../../topologies/", f"{REPO}/topologies/")
    path = tmp_path / "s.yaml"
    path.write_text(text + "\nqp: {nscc_delay_filter: ewma}\n")
    sc = load_scenario(path, features=feats)
    assert dict(sc.qp) == {"nscc_delay_filter": "ewma"}
    for transport in ("mrc", "rc"):
        for job in build_jobs(sc, transport, run_id="r", control_socket="/tmp/c.sock"):
            assert job["qp"]["cc_params"]["delay_filter"] == "ewma" and "nscc_delay_filter" not in job["qp"]
    job = build_jobs(sc, "mrc", run_id="r", control_socket="/tmp/c.sock")[0]
    qp = QP(1, rng=random.Random(1), config=QPConfig(cc=job["qp"]["cc"], cc_params=job["qp"]["cc_params"]))
    assert qp.cc.delay_filter == "ewma"
    assert all("delay_filter" not in j["qp"]["cc_params"]
               for j in build_jobs(sc, "rc-dcqcn", run_id="r", control_socket="/tmp/c.sock"))
    plain = load_scenario(DATA / "scenario-ok.yaml", features=feats)
    assert all("delay_filter" not in j["qp"]["cc_params"]
               for j in build_jobs(plain, "mrc", run_id="r", control_socket="/tmp/c.sock"))
    path.write_text(text + "\nqp: {nscc_delay_filter: htsim}\n")
    with pytest.raises(SpecError, match=r"qp.nscc_delay_filter: expected one of ack, ewma, got 'htsim'"):
        load_scenario(path, features=feats)


@pytest.mark.parametrize("delay_filter", cc.DELAY_FILTERS)
def test_a_qp_pair_runs_on_either_filter(delay_filter):
    """The QP builds its NSCC from QPConfig.cc_params with the filter (a smoke test; the
    differential tests compare the engines on it)."""
    cfg = QPConfig(cc_params={"rate_bps": 1e9, "base_rtt_s": BASE_S, "delay_filter": delay_filter})
    a = QP(1, rng=random.Random(1), config=cfg)
    b = QP(2, rng=random.Random(2), memory=bytearray(1 << 16), config=cfg)
    connect_pair(a, b, [0, 1], attr=QPAttr(timeout=12))
    assert a.cc.delay_filter == delay_filter
