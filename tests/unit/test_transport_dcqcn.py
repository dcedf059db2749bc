"""``rc-dcqcn`` and ``rc-dcqcn-x<N>``: the one parser of transport names, the scenario file (with
file:line problems), ``--transport``, and the job spec an agent gets (an RC QP with DCQCN, CNPs on)."""
from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

import pytest

from agents.channels.qp import qp_config_kwargs
from agents.jobspec import parse_job
from agents.mrc import QPConfig, payload_bytes_for_mtu
from agents.mrc.dcqcn import scaled_cnp_interval_s
from testbed.commands.run import _transport
from testbed.spec.jobs import ETHERNET_HEADER_BYTES, build_jobs, host_link_rate_bps
from testbed.model.kernel import KernelFeatures
from testbed.spec import SpecError, TransportName, load_scenario, parse_transport, transport_variant

ROOT = Path(__file__).resolve().parents[2]
FEATURES = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True, bpf_egress=True)


@pytest.mark.parametrize("name,parsed", [
    ("mrc", TransportName("mrc")), ("rc", TransportName("rc")), ("tcp", TransportName("tcp")),
    ("rc-x8", TransportName("rc", 8)), ("rc-dcqcn", TransportName("rc", 1, "dcqcn")),
    ("rc-dcqcn-x1", TransportName("rc", 1, "dcqcn")), ("rc-dcqcn-x64", TransportName("rc", 64, "dcqcn"))])
def test_parse_transport(name, parsed):
    assert parse_transport(name) == parsed
    assert transport_variant(name) == (parsed.base, parsed.qps)
    assert _transport(name) == name


@pytest.mark.parametrize("name", ["rc-dcqcn-x0", "rc-dcqcn-x65", "rc-x8-dcqcn", "mrc-dcqcn", "dcqcn",
                                  "rc-dcqcn-", "rc-", ""])
def test_other_names_raise(name):
    with pytest.raises(ValueError, match="rc-dcqcn"):
        parse_transport(name)
    with pytest.raises(argparse.ArgumentTypeError):
        _transport(name)


def _scenario(tmp_path: Path, topology: str, transports: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(f"""\
        topology: {ROOT / "topologies" / topology}
        transports: {transports}
        seed: 7
        timeout: 60s
        workload:
          collective: all_reduce
          hosts: all
          min_bytes: 64KiB
          max_bytes: 64KiB
          factor: 2
          iterations: 1
          warmup: 0
        """))
    return path


def test_scenario_accepts_dcqcn_and_warns_on_a_fabric_without_ecn(tmp_path):
    s = load_scenario(_scenario(tmp_path, "fat-tree-k4-trim.yaml", "[rc, rc-dcqcn, rc-dcqcn-x4]"), features=FEATURES)
    assert s.transports == ("rc", "rc-dcqcn", "rc-dcqcn-x4") and not s.warnings
    plain = _scenario(tmp_path, "fat-tree-k4.yaml", "[mrc, rc-dcqcn]")
    s = load_scenario(plain, features=FEATURES)
    assert [(w.line, w.key_path) for w in s.warnings] == [(2, "transports[1]")]
    assert "marks no ECN" in s.warnings[0].message
    with pytest.raises(SpecError) as info:
        load_scenario(_scenario(tmp_path, "fat-tree-k4-trim.yaml", "[rc-dcqcn-x99]"), features=FEATURES)
    (problem,) = info.value.problems
    assert (problem.line, problem.key_path) == (2, "transports[0]") and "rc-dcqcn[-x<N>]" in problem.message


@pytest.fixture(scope="module")
def ecn_scenario(tmp_path_factory):
    path = _scenario(tmp_path_factory.mktemp("s"), "fat-tree-k4-trim.yaml", "[rc, rc-dcqcn-x4]")
    return load_scenario(path, features=FEATURES)


def test_dcqcn_jobs_are_rc_qps_with_dcqcn_sized_by_the_fabric(ecn_scenario):
    jobs = build_jobs(ecn_scenario, "rc-dcqcn-x4", run_id="r", control_socket="/tmp/c.sock")
    rc = build_jobs(ecn_scenario, "rc-x4", run_id="r", control_socket="/tmp/c.sock")
    rate = host_link_rate_bps(ecn_scenario)
    for job, plain in zip(jobs, rc):
        assert job["transport"] == "rc" and job["qps"] == 4
        assert job["send_to"] == plain["send_to"] and job["recv_from"] == plain["recv_from"]
        qp = job["qp"]
        base = plain["qp"]["cc_params"]["base_rtt_s"]
        assert qp["cc"] == "dcqcn" and qp["ecn"] is True
        assert qp["cnp_interval_s"] == pytest.approx(scaled_cnp_interval_s(base), abs=1e-6)
        mtu = job["mtu"]
        assert qp["cc_params"] == {"rate_bps": rate, "base_rtt_s": base,
                                   "overhead_bytes": mtu + ETHERNET_HEADER_BYTES - payload_bytes_for_mtu(mtu)}
        assert {k: v for k, v in qp.items() if k not in ("cc", "cc_params", "cnp_interval_s")} == \
            {k: v for k, v in plain["qp"].items() if k not in ("cc", "cc_params")}
        spec = parse_job(job, "rank")
        cfg = QPConfig(payload_bytes=payload_bytes_for_mtu(mtu), **qp_config_kwargs(spec))
        cfg.validate()
        assert cfg.cc == "dcqcn" and cfg.cnp_interval_s == qp["cnp_interval_s"]


def test_qp_overrides_still_win(ecn_scenario):
    jobs = build_jobs(ecn_scenario, "rc-dcqcn", run_id="r", control_socket="/tmp/c.sock",
                      qp_overrides={"cnp_interval_s": 0.5})
    assert jobs[0]["qp"]["cnp_interval_s"] == 0.5 and jobs[0]["qp"]["cc"] == "dcqcn" and "qps" in jobs[0]
