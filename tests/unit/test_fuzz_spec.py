"""Fuzzing ``testbed validate``'s loaders: every input is a success or a SpecError whose
problems name the file and a line, within a time and a memory bound.

Documents are the shipped topologies and scenarios (and the fixture scenario),
mutated by Hypothesis: a value replaced by a nasty YAML scalar or structure, a key
dropped or added, raw bytes cut or inserted. ``data/malformed/`` keeps every input
that once crashed, hung or ran out of memory; each must still be rejected cleanly,
and all of them together in a subprocess under RLIMIT_AS.
"""

import os
import resource
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from testbed.model.kernel import KernelFeatures
from testbed.spec import Scenario, SpecError, load_file
from testbed.model.topology import Topology

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
MALFORMED = DATA / "malformed"
FEATURES = KernelFeatures(frozenset({"htb", "tbf", "pfifo", "netem"}), seg6_next_csid=True, nftables=True,
                          bpf_egress=True)
MEMORY_BOUND_BYTES = 64 * 2**20

FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _seeds() -> dict[str, dict]:
    files = sorted((ROOT / "topologies").glob("*.yaml")) + sorted((ROOT / "scenarios").glob("*.yaml")) + \
        [DATA / "scenario-ok.yaml"]
    out = {}
    for path in files:
        doc = yaml.safe_load(path.read_text())
        if "topology" in doc:  # the copies live elsewhere: make the reference absolute
            doc["topology"] = str(ROOT / "topologies" / Path(doc["topology"]).name)
        out[path.stem] = doc
    return out


SEEDS = _seeds()
RAW_SCALARS = ["~", "''", "-1", "0", "18446744073709551616", "1" + "0" * 60, "1e400", ".inf", ".nan",
               "2026-02-30", "!!int abc", "!!bool maybe", "!!timestamp x", "!!pairs bad", "!foo x",
               '"\\ud800"', '":x: [red]b[/]"', "../../x", "x" * 300, "1000000000000000000000000Tbit",
               "4294967296", "1ns", "70000", "3", "true", "[]", "{}", "[[[[1]]]]", "&a x", "*a", "0x10",
               "190:20:30", "10Mbps", "101%", "25h", "2TiB", '"a\\0b"', "'h\u00e9-\u00e9-\u00e9-\u00e9-\u00e9-\u00e9'",
               "? x", "- a"]
VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=40),
                   st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


def _paths(obj, prefix=()):
    if prefix:
        yield prefix
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        yield from _paths(value, prefix + (key,))


@st.composite
def mutated_documents(draw) -> bytes:
    """A shipped document with 1-3 values replaced, keys dropped or added, in YAML text."""
    doc = yaml.safe_load(yaml.safe_dump(SEEDS[draw(st.sampled_from(sorted(SEEDS)))]))
    raws = {}
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        op = draw(st.sampled_from(["raw", "value", "drop", "add"]))
        if op == "raw":
            token = f"RAWTOKEN{len(raws)}"
            raws[token] = draw(st.sampled_from(RAW_SCALARS))
            parent[path[-1]] = token
        elif op == "value":
            parent[path[-1]] = draw(VALUES)
        elif op == "drop" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["stray", "kind", "k", "planes", "nodes", "timeline", "name"]))] = \
                draw(VALUES)
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    for token, raw in raws.items():
        text = text.replace(token, raw)
    return text.encode("utf-8", "surrogatepass")


@st.composite
def damaged_bytes(draw) -> bytes:
    """A shipped document's bytes cut, or with bytes inserted."""
    data = yaml.safe_dump(SEEDS[draw(st.sampled_from(sorted(SEEDS)))], sort_keys=False).encode()
    at = draw(st.integers(0, len(data)))
    if draw(st.booleans()):
        return data[:at]
    insert = draw(st.one_of(st.binary(min_size=1, max_size=8),
                            st.sampled_from([b"\0", b"\xff", b"{", b"[" * 100, b"&a ", b"*a ", b": ", b"\t",
                                             b"\xef\xbb\xbf", b"---\n", b"!!int ", b"? "])))
    return data[:at] + insert + data[at:]


def check_outcome(path: Path) -> Topology | Scenario | None:
    """Load ``path``; assert success or a SpecError with a file and a line for every problem,
    within MEMORY_BOUND_BYTES (tracemalloc peak; load time belongs in `make bench`)."""
    tracemalloc.start()
    try:
        result = load_file(path, features=FEATURES)
    except SpecError as exc:
        result = None
        assert exc.problems, "a SpecError without problems"
        for p in exc.problems:
            assert p.file and p.message
            assert p.line >= 1 or p.message.startswith("cannot read"), str(p)
        str(exc).encode("ascii", "backslashreplace")
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < MEMORY_BOUND_BYTES, f"{path}: {peak / 2**20:.0f} MiB"
    return result


@FUZZ
@given(data=mutated_documents())
def test_mutated_documents_load_or_raise_spec_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "doc.yaml"
    path.write_bytes(data)
    check_outcome(path)


@FUZZ
@given(data=damaged_bytes())
def test_damaged_bytes_load_or_raise_spec_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "doc.yaml"
    path.write_bytes(data)
    check_outcome(path)


@settings(FUZZ, max_examples=40)
@given(data=st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                         lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                       max_size=4), max_leaves=20))
def test_arbitrary_documents_load_or_raise_spec_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "doc.yaml"
    path.write_text(yaml.safe_dump(data))
    check_outcome(path)


def test_shipped_documents_still_load():
    for path in [*(ROOT / "topologies").glob("*.yaml"), *(ROOT / "scenarios").glob("*.yaml")]:
        assert check_outcome(path) is not None


# -- regression corpus ----------------------------------------------------------

#: File -> a piece of the message it must give (every file there once crashed or was accepted).
EXPECTED = {
    "alias-bomb-key.yaml": "alias *a9 used as a mapping key",
    "alias-bomb.yaml": "aliases expand the document past",
    "alias-recursive.yaml": "inside its own anchor",
    "chain-of-7.yaml": "crosses 7 switches; an EV holds at most 5",
    "deep-flow.yaml": "nested deeper than 64 levels",
    "delay-1e60.yaml": "longer than the longest duration accepted",
    "emoji-markup.yaml": ":x:: unknown key",
    "fat-tree-k-huge.yaml": "k: expected an integer, got '1000",
    "fat-tree-k50.yaml": "too large for this machine: 34375 namespaces",
    "gzip.yaml": "a gzip-compressed file",
    "ifname-bytes.yaml": "is 21 bytes, longer than 15",
    "implicit-date.yaml": "stray: unknown key",
    "islands.yaml": "split into islands",
    "latin1.yaml": "not UTF-8: byte 0xe9 at line 1",
    "leaf-spine-no-hosts-per-leaf.yaml": "missing required key 'hosts_per_leaf'",
    "leaf-spine-no-leaves.yaml": "missing required key 'leaves'",
    "lone-surrogate.yaml": "'\\udcff': unknown key",
    "merge-key.yaml": "<<: unknown key",
    "no-common-plane.yaml": "share no plane",
    "nul-byte.yaml": "NUL byte at offset 15",
    "one-scalar.yaml": "(2002 characters)",
    "plane-70000.yaml": "must be <= 65535",
    "queue-u32.yaml": "a qdisc limit is a u32",
    "rate-huge.yaml": "above the largest rate accepted",
    "scenario-flap-absurd.yaml": "shorter than the shortest flap period",
    "scenario-missing-kind.yaml": "is it a scenario missing them?",
    "scenario-name-slash.yaml": "names the run directory",
    "scenario-size-3.yaml": "not a whole number of float32 elements",
    "scenario-topology-devzero.yaml": "topology file '/dev/zero' is not a .yaml or .yml file",
    "scenario-topology-long.yaml": "(5002 characters) not found",
    "scenario-topology-nul.yaml": "'a\\x00b' not found",
    "scenario-topology-passwd.yaml": "topology file '/etc/passwd' is not a .yaml or .yml file",
    "tag-bool.yaml": "tag '!!bool' is not allowed",
    "tag-int-empty.yaml": "tag '!!int' is not allowed",
    "tag-int.yaml": "tag '!!int' is not allowed",
    "tag-pairs.yaml": "tag '!!pairs' is not allowed",
    "tag-timestamp.yaml": "tag '!!timestamp' is not allowed",
    "utf16-no-bom.yaml": "UTF-16 text without a byte-order mark",
    "utf16.yaml": "not UTF-8: UTF-16 text",
}


def test_regression_corpus_is_listed():
    assert sorted(p.name for p in MALFORMED.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_regression_corpus_rejected_with_reason(name):
    with pytest.raises(SpecError) as info:
        load_file(MALFORMED / name, features=FEATURES)
    assert EXPECTED[name] in str(info.value)
    check_outcome(MALFORMED / name)


def test_special_files_rejected(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as f:
        f.truncate(1 << 30)  # sparse: costs nothing on disk
    for path in (fifo, huge, Path("/dev/zero"), Path("/dev/urandom"), tmp_path):
        assert check_outcome(path) is None
        with pytest.raises(SpecError, match="cannot read"):
            load_file(path, features=FEATURES)
    scenario = tmp_path / "s.yaml"
    scenario.write_text((MALFORMED / "scenario-size-3.yaml").read_text().replace(
        "../../../../topologies/fat-tree-k4.yaml", str(fifo)))
    with pytest.raises(SpecError, match=r"s.yaml:1: topology: '.*fifo.yaml': cannot read: a FIFO"):
        load_file(scenario, features=FEATURES)


def _limit_memory():  # pragma: no cover - runs in the child
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def test_whole_corpus_through_the_cli_under_rlimit():
    """Every corpus file through ``python -m testbed validate`` with 1 GiB of address space:
    exit 2, no traceback, within 60 s (the kernel probe is cached per boot, or skipped)."""
    files = sorted(str(p) for p in MALFORMED.iterdir())
    proc = subprocess.run([sys.executable, "-m", "testbed", "validate", *files], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, preexec_fn=_limit_memory,
                          env={**os.environ, "LC_ALL": "C", "PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("invalid: ") == len(files)
