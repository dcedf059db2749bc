"""``workload.payload``: bytes per mrc/rc data packet. Parsing and its file:line errors, the
agents' MTU derived from it, ``--set`` and ``sweep:``, the manifest and the report's line, and
the reproduce table's scaling column."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from agents.jobspec import JobSpecError, parse_job
from agents.mrc.packet import MIN_MTU_BYTES, mtu_for_payload, payload_bytes_for_mtu
from testbed import cli
from testbed.commands import run as run_cmd
from testbed.model.kernel import KernelFeatures
from testbed.report import tables
from testbed.report.reproduce import claim_entry, payload_scaling
from testbed.spec import SpecError, load_scenario
from testbed.spec.jobs import ROCE_PMTU_BYTES, build_jobs, job_mtu, job_payload_bytes
from testbed.spec.overrides import parse_set, sweep_of
from tests.unit.test_spec_scenario import HEAD as SCENARIO_HEAD

ROOT = Path(__file__).resolve().parents[2]
FEATURES = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True)
K4 = ROOT / "topologies" / "fat-tree-k4.yaml"          # MTU 9000
TINY = ROOT / "topologies" / "tiny.yaml"               # MTU 1500

# test_spec_scenario's scenario, with kernel tcp beside mrc and rc
HEAD = textwrap.dedent(SCENARIO_HEAD).lstrip("\n").replace("transports: [mrc, rc]", "transports: [mrc, rc, tcp]")
PAYLOAD_LINE = 13   # a key appended to HEAD's workload


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def load(path: Path, **kw):
    return load_scenario(path, features=FEATURES, **kw)


def problems(path: Path, **kw) -> list[str]:
    with pytest.raises(SpecError) as info:
        load(path, **kw)
    return [str(p) for p in info.value.problems]


def test_mtu_for_payload_inverts_payload_bytes_for_mtu():
    for payload in (256, 1024, 4096, 8192, 8908):
        assert payload_bytes_for_mtu(mtu_for_payload(payload)) == payload
    assert mtu_for_payload(4096) == 4096 + 48 + 44 and MIN_MTU_BYTES == 256 + 92


@pytest.mark.parametrize("value, payload", [("8KiB", 8192), ("8192", 8192), ("1KiB", 1024), ("256", 256),
                                            ("8908", 8908)])
def test_payload_sets_the_agents_mtu(tmp_path, value, payload):
    sc = load(write(tmp_path, HEAD + f"  payload: {value}\n"))
    assert sc.workload.payload == payload
    assert job_mtu(sc) == payload + 92 and job_payload_bytes(sc) == payload
    jobs = build_jobs(sc, "rc-dcqcn-x2", run_id="r", control_socket="/tmp/s")
    assert {j["mtu"] for j in jobs} == {payload + 92}
    parse_job(jobs[0])   # the agents accept it (256 bytes: an MTU below IPv6's 1280)
    assert sc.to_dict()["workload"]["payload"] == payload


def test_default_payload_is_roce_largest_path_mtu_where_the_fabric_carries_it(tmp_path):
    sc = load(write(tmp_path, HEAD))
    assert sc.workload.payload is None and job_payload_bytes(sc) == ROCE_PMTU_BYTES == 4096
    assert job_mtu(sc) == 4188
    small = load(write(tmp_path, HEAD.replace(str(K4), str(TINY))))
    assert job_mtu(small) == 1500 and job_payload_bytes(small) == 1408
    mtu = load(write(tmp_path, HEAD + "  mtu: 2000\n"))
    assert job_mtu(mtu) == 2000 and job_payload_bytes(mtu) == 2000 - 92


@pytest.mark.parametrize("value, message", [
    ("8 KiB", "'8 KiB' is not a size"),
    ("[1]", "expected a value, got a list"),
    ("0", "must be >= 256 bytes (RoCEv2's smallest path MTU), got 0"),
    ("252", "must be >= 256 bytes (RoCEv2's smallest path MTU), got 252"),
    ("1026", "1026 bytes is not a whole number of float32 elements (4 bytes each)"),
    ("8912", "8912 bytes need an MTU of 9004 (payload + IPv6/UDP + MRC headers), above the fabric's smallest "
             "link MTU (9000): at most 8908 bytes fit"),
    ("1MiB", "1048576 bytes need an MTU of 1048668"),
])
def test_bad_payloads_name_file_and_line(tmp_path, value, message):
    path = write(tmp_path, HEAD + f"  payload: {value}\n")
    out = problems(path)
    assert len(out) == 1 and out[0].startswith(f"{path}:{PAYLOAD_LINE}: workload.payload: {message}"), out


def test_payload_must_fit_the_smallest_link_mtu(tmp_path):
    path = write(tmp_path, HEAD.replace(str(K4), str(TINY)) + "  payload: 4KiB\n")
    assert problems(path) == [f"{path}:{PAYLOAD_LINE}: workload.payload: 4096 bytes need an MTU of 4188 (payload + "
                              "IPv6/UDP + MRC headers), above the fabric's smallest link MTU (1500): at most 1408 "
                              "bytes fit"]


def test_payload_and_mtu_together_is_an_error(tmp_path):
    path = write(tmp_path, HEAD + "  mtu: 9000\n  payload: 8KiB\n")
    assert problems(path) == [f"{path}:{PAYLOAD_LINE + 1}: workload.payload: give either mtu (the agents' IPv6 "
                              "MTU) or payload (bytes per data packet), not both"]


JOBS = f"""topology: {K4}
transports: [mrc, rc]
seed: 7
timeout: 60s
jobs:
  - name: a
    collective: all_reduce
    hosts: [h0_0_0, h0_0_1]
    min_bytes: 1KiB
    max_bytes: 1KiB
    factor: 2
    iterations: 1
    warmup: 0
  - name: b
    collective: all_reduce
    hosts: [h1_0_0, h1_0_1]
    min_bytes: 1KiB
    max_bytes: 1KiB
    factor: 2
    iterations: 1
    warmup: 0
    payload: 1002
"""


def test_payload_of_a_second_job(tmp_path):
    path = write(tmp_path, JOBS)
    assert problems(path) == [f"{path}:22: jobs[1].payload: 1002 bytes is not a whole number of float32 "
                              "elements (4 bytes each)"]
    sc = load(write(tmp_path, JOBS.replace("payload: 1002", "payload: 1KiB")))
    assert [j.payload for j in sc.all_jobs] == [None, 1024]


def test_set_override(tmp_path):
    path = write(tmp_path, HEAD)
    sc = load(path, overrides=[parse_set("workload.payload=8KiB")])
    assert sc.workload.payload == 8192 and job_mtu(sc) == 8284


def test_set_errors_name_the_file_and_the_key(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(run_cmd, "features", lambda: FEATURES)
    path = write(tmp_path, HEAD)
    assert cli.main(["run", str(path), "--set", "workload.payload=100"]) == 2
    assert f"{path}: --set workload.payload: must be >= 256 bytes" in capsys.readouterr().err
    with_mtu = write(tmp_path, HEAD + "  mtu: 9000\n")
    assert cli.main(["run", str(with_mtu), "--set", "workload.payload=8KiB"]) == 2
    assert "workload.payload: give either mtu" in capsys.readouterr().err


def test_sweep(tmp_path):
    path = write(tmp_path, HEAD + "sweep:\n  workload.payload: [1KiB, 4KiB, 8KiB]\n")
    sweep = sweep_of(path)
    sizes = [job_payload_bytes(load(path, overrides=pt, check_sweep=False)) for pt in sweep.points()]
    assert sizes == [1024, 4096, 8192]
    bad = write(tmp_path, HEAD + "sweep:\n  workload.payload: [1KiB, 16KiB]\n")
    out = problems(bad)
    assert len(out) == 1 and out[0].startswith(f"{bad}:14: workload.payload: 16384 bytes need an MTU"), out


def test_manifest_and_summary_carry_the_payload(tmp_path, monkeypatch):
    from testbed.run import manifest as mf
    monkeypatch.setattr(mf, "features", lambda: FEATURES)
    sc = load(write(tmp_path, HEAD + "  payload: 2KiB\n"))
    m = mf.base_manifest(sc)
    assert m["payload_bytes"] == 2048 and m["scenario"]["workload"]["payload"] == 2048
    from testbed.rundir.schemas import MANIFEST_FIELDS
    assert "payload_bytes" in MANIFEST_FIELDS


def _title(summary: dict) -> str:
    buf = io.StringIO()
    Console(file=buf, width=100, color_system=None).print(tables.comparison_table(summary))
    title = buf.getvalue().split("\n\u250f")[0].split("\n+")[0]   # the lines above the table's frame
    return " ".join(title.split())


def _summary(transports, payload=8192) -> dict:
    t = {"size_bytes": 1024, "completion": {"complete": True}}
    return {"scenario": "s", "host_link_rate_bps": 10e6, "payload_bytes": payload,
            "transports": {name: dict(t) for name in transports}}


def test_report_line_states_the_payload():
    assert "(host link 10 Mbit/s, payload 8192 bytes per data packet)" in _title(_summary(["mrc", "rc-x8"]))
    assert ("(host link 10 Mbit/s, payload 8192 bytes per data packet (mrc, rc-dcqcn))"
            in _title(_summary(["mrc", "rc-dcqcn", "tcp"])))
    assert "payload" not in _title(_summary(["tcp"]))                 # kernel tcp: not sized by it
    assert "payload" not in _title(_summary(["mrc"], payload=None))   # a run older than the key
    assert tables.payload_text(_summary(["rc"], payload=4096)) == "payload 4096 bytes per data packet"


def test_summary_json_records_the_payload(tmp_path):
    from testbed.metrics.synthetic import write_run
    from testbed import report
    run = write_run(tmp_path / "run", ("mrc", "tcp"), world_size=4, duration_s=5.0)
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "payload_bytes": 2048}))
    report.write_outputs(run)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["payload_bytes"] == 2048
    assert "payload 2048 bytes per data packet (mrc)" in _title(summary)


def test_reproduce_scaling_states_a_non_default_payload(tmp_path):
    default = load(write(tmp_path, HEAD))
    big = load(write(tmp_path, HEAD + "  payload: 8KiB\n"))
    tcp_only = load(write(tmp_path, HEAD.replace("[mrc, rc, tcp]", "[tcp]") + "  payload: 8KiB\n"))
    assert payload_scaling([default]) == "" and payload_scaling([]) == "" and payload_scaling([tcp_only]) == ""
    assert payload_scaling([big]) == "payload 8192 bytes per data packet"
    assert payload_scaling([default, big]) == "payload 4096/8192 bytes per data packet"   # a sweep of it
    claim = SimpleNamespace(id="c", section="s", figure="f", scenario=Path("x.yaml"), rules=(), scaling="10 Mbit/s;",
                            estimate_quick_s=1, estimate_full_s=2)
    assert claim_entry(claim, None, [big])["scaling"] == "10 Mbit/s; payload 8192 bytes per data packet"
    assert claim_entry(claim, None, [default])["scaling"] == "10 Mbit/s;"
    assert claim_entry(claim, None)["scaling"] == "10 Mbit/s;"


def test_shipped_claims_keep_their_scaling_text():
    """The paper's scenarios all run the default payload: the scaling column is as written."""
    from testbed.commands.reproduce import prepare
    from testbed.spec.claimsfile import load_claims
    claims = load_claims(ROOT / "scenarios" / "paper" / "claims.yaml")
    prepared, _ = prepare(claims.path, list(claims.claims))
    for p in prepared:
        if p.scenario is not None:
            assert claim_entry(p.claim, None, p.scenarios or [p.scenario])["scaling"] == p.claim.scaling, p.claim.id


def test_agents_refuse_an_mtu_below_the_least_payload():
    base = {"run_id": "r", "rank": 0, "world": ["a", "b"], "host": "a", "transport": "mrc", "control_socket": "/s",
            "seed": 1, "sizes": [1024], "iterations": 1, "warmup": 0, "bind_addr": "::",
            "send_to": [{"rank": 1, "host": "b", "evs": []}], "recv_from": [{"rank": 1, "host": "b", "evs": []}]}
    with pytest.raises(JobSpecError, match="mtu"):
        parse_job({**base, "mtu": MIN_MTU_BYTES - 1})
