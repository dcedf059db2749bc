"""The documentation against the code (no root): the key references are the validator's keys,
every YAML example validates, every command shown parses, the container recipe is one.

YAML blocks are marked on their first line: ``# scenarios/NAME.yaml`` or
``# topologies/NAME.yaml`` (a whole file, validated as if it lay there), ``# file: claims`` or
``# file: servers`` (a whole claims or servers file), ``# fragment: scenario.KEY`` or
``# fragment: topology.KEY`` (part of a file, validated inside a complete one). An unmarked
block fails the test.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from testbed.model.kernel import KernelFeatures
from testbed.spec import load_file, load_scenario, load_topology
from testbed.spec.schema import SCENARIO, TOPOLOGY, key_paths
from testbed.spec.yamlread import Reader

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]
FEATURES = KernelFeatures(frozenset({"htb", "tbf", "pfifo"}), seg6_next_csid=True, nftables=True, bpf_egress=True)
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def blocks(lang: str) -> list[tuple[str, int, str]]:
    """(page name, line, text) of every fenced block of ``lang`` on every page."""
    out = []
    for page in PAGES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            if m[1] == lang:
                out.append((page.name, text.count("\n", 0, m.start()) + 1, m[2]))
    return out


# -- (a) the key references are the validator's keys ---------------------------------------

def documented_keys(page: Path) -> set[str]:
    """Key paths in the first cell of every table whose header starts with ``| key |``."""
    keys, in_table = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("| key |"):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("|---"):
            first = line.split(" | ")[0].lstrip("| ")
            keys |= set(re.findall(r"`([^`]+)`", first))
    return keys


@pytest.mark.parametrize("page,table", [("scenarios.md", SCENARIO), ("topologies.md", TOPOLOGY)])
def test_reference_names_exactly_the_keys_the_validator_accepts(page, table):
    documented, accepted = documented_keys(DOCS / page), key_paths(table)
    assert not accepted - documented, f"docs/{page} lacks keys the validator accepts: {sorted(accepted - documented)}"
    assert not documented - accepted, f"docs/{page} names keys the validator rejects: {sorted(documented - accepted)}"


def test_the_loaders_read_their_mappings_through_the_schema(monkeypatch):
    """Every Reader.mapping call while loading the shipped files uses a (required, optional)
    pair of the schema tables, so a key list spelled inside a loader cannot escape the reference."""
    kinds = [v for k, v in TOPOLOGY.items() if k.startswith("<kind ")]
    every_kind_key = tuple(sorted({k for req, opt in kinds for k in req + opt}))
    (base_req, base_opt) = TOPOLOGY[""]
    allowed = {(tuple(r), tuple(o)) for r, o in list(SCENARIO.values()) + list(TOPOLOGY.values())}
    allowed |= {(base_req + req, base_opt + opt) for req, opt in kinds} | {(base_req, base_opt + every_kind_key)}
    seen = []
    original = Reader.mapping

    def spy(self, node, path, required=(), optional=()):
        seen.append((path, tuple(required), tuple(optional)))
        return original(self, node, path, required, optional)

    monkeypatch.setattr(Reader, "mapping", spy)
    files = sorted((ROOT / "topologies").glob("*.yaml")) + sorted((ROOT / "scenarios").glob("*.yaml")) \
        + sorted((ROOT / "scenarios" / "paper").glob("[!c]*.yaml"))
    for f in files:
        load_file(f, features=FEATURES)
    outside = [(p, r, o) for p, r, o in seen if (r, o) not in allowed]
    assert len({p for p, _, _ in seen}) > 20 and not outside, outside


# -- (b) every YAML example validates -----------------------------------------------------

BASE_SCENARIO = """\
topology: ../topologies/fat-tree-k4.yaml
transports: [mrc, rc]
workload: {collective: all_reduce, hosts: all, min_bytes: 1MiB, max_bytes: 1MiB}
timeline:
  - at_iteration: 1
    loss: {link: a0_0-c0_0, percent: 1%}
"""


@pytest.fixture
def tree(tmp_path):
    """tmp/{topologies -> the repo's, scenarios/, scenarios/paper/ with the repo's paper scenarios,
    scenarios/jobs -> the repo's (the command jobs' scripts)}."""
    (tmp_path / "topologies").symlink_to(ROOT / "topologies")
    (tmp_path / "scenarios" / "paper").mkdir(parents=True)
    (tmp_path / "scenarios" / "jobs").symlink_to(ROOT / "scenarios" / "jobs")
    for f in (ROOT / "scenarios" / "paper").glob("*.yaml"):
        (tmp_path / "scenarios" / "paper" / f.name).symlink_to(f)
    return tmp_path


def validate_block(tree: Path, text: str) -> None:
    first = text.splitlines()[0]
    if m := re.fullmatch(r"# (?:save as )?(scenarios|topologies)/([\w.-]+\.yaml)\b.*", first):
        where = tree / ("scenarios" if m[1] == "scenarios" else "example-topologies")  # topologies/ is the repo's
        where.mkdir(exist_ok=True)
        path = where / m[2]
        path.write_text(text)
        load_file(path, features=FEATURES)
    elif first.startswith("# file: claims"):
        from testbed.spec.claimsfile import load_claims
        path = tree / "scenarios" / "paper" / "example-claims.yaml"
        path.write_text(text)
        assert load_claims(path).claims
    elif first.startswith("# file: servers"):
        from testbed.cluster.servers import load_servers
        path = tree / "servers.yaml"
        path.write_text(text)
        assert load_servers(path, check_keys=False).servers
    elif first == "# fragment: scenario.sweep":
        path = tree / "scenarios" / "example.yaml"
        path.write_text(BASE_SCENARIO + text)
        load_scenario(path, features=FEATURES)
    elif m := re.fullmatch(r"# fragment: topology\.link_classes", first):
        # inside the file it names: its link classes replaced by the fragment's, which must match them
        named = re.search(r"# (topologies/[\w.-]+\.yaml)", text)[1]
        doc = yaml.safe_load((ROOT / named).read_text())
        fragment = yaml.safe_load(text)["link_classes"]
        assert {k: doc["link_classes"][k] for k in fragment} == fragment, f"the example differs from {named}"
        doc["link_classes"].update(fragment)
        path = tree / "topologies-example.yaml"
        path.write_text(yaml.safe_dump(doc))
        load_topology(path, features=FEATURES)
    else:
        raise AssertionError(f"unmarked YAML block (first line {first!r}): mark it as a file or a fragment")


@pytest.mark.parametrize("page,line,text", blocks("yaml"), ids=lambda v: v if isinstance(v, (str, int)) else "")
def test_every_yaml_example_validates(tree, page, line, text):
    validate_block(tree, text)


def test_the_yaml_checks_can_fail(tree):
    bad = "# scenarios/first.yaml\n" + BASE_SCENARIO.replace("workload:", "workload:\n  iteration: 5\nx:")
    with pytest.raises(Exception):
        validate_block(tree, bad)
    with pytest.raises(AssertionError, match="unmarked"):
        validate_block(tree, "name: x\n")
    assert len(blocks("yaml")) >= 8


# -- (c) every command shown parses, every make target exists --------------------------------

MAKE_TARGETS = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
TESTBED = re.compile(r"^(?:\.venv/bin/)?(?:testbed|python -m testbed)\s")


def shown_commands() -> list[tuple[str, str]]:
    """(page, command) of every testbed and make command line in a ``sh`` block."""
    out = []
    for page, _, text in blocks("sh"):
        for line in text.splitlines():
            if TESTBED.match(line) or line.startswith("make "):
                out.append((page, line))
    return out


@pytest.mark.parametrize("page,command", shown_commands())
def test_every_command_in_a_shell_block_parses(page, command):
    words = shlex.split(command, comments=True)
    if words[0] == "make":
        assert words[1] in MAKE_TARGETS, f"{page}: make {words[1]}: no such target"
        return
    from testbed.cli import build_parser
    args = words[3:] if words[:3] == ["python", "-m", "testbed"] else words[1:]
    build_parser().parse_args(args)   # SystemExit (argparse's error) fails the test


def inline_spans() -> list[tuple[str, str]]:
    return [(page.name, span) for page in PAGES for span in re.findall(r"`([^`\n]+)`", page.read_text())]


def test_every_inline_make_and_testbed_command_names_real_targets_and_options():
    from testbed.cli import build_parser
    verbs = {a.dest: a for a in build_parser()._actions if a.dest == "verb"}["verb"].choices
    problems, checked = [], 0
    for page, span in inline_spans():
        words = span.split()
        if not words:
            continue
        if words[0] == "make" and len(words) > 1:
            checked += 1
            if words[1] not in MAKE_TARGETS and "=" not in words[1]:
                problems.append(f"{page}: `{span}`: no make target {words[1]!r}")
        elif re.match(r"(\.venv/bin/)?testbed$", words[0]) and len(words) > 1 and re.fullmatch(r"[a-z]+", words[1]):
            checked += 1
            if words[1] not in verbs:
                problems.append(f"{page}: `{span}`: no verb {words[1]!r}")
                continue
            options = {o for a in verbs[words[1]]._actions for o in a.option_strings}
            problems += [f"{page}: `{span}`: {w} is not an option of testbed {words[1]}"
                         for w in words[2:] if w.startswith("--") and w.split("=")[0] not in options]
    assert checked > 30 and not problems, problems


def test_setup_package_list_on_the_pages_is_the_makefiles():
    variables = dict(re.findall(r"^(\w+)\s*:=\s*(.*)$", (ROOT / "Makefile").read_text(), re.M))
    pkgs = re.sub(r"\$\((\w+)\)", lambda m: variables[m[1]], variables["APT_PKGS"]).split()
    page = (DOCS / "getting-started.md").read_text()
    listed = re.search(r"<!-- apt-packages: Makefile APT_PKGS -->\n\s*`([^`]+)`", page)[1].split()
    assert sorted(listed) == sorted(pkgs) and len(pkgs) == len(set(pkgs))
    assert f"apt-installs {len(pkgs)} Debian packages" in (ROOT / "README.md").read_text()


def test_readme_stays_short_and_keeps_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert "make run     # the main job" in text and "make test    # the tests" in text


# -- the container recipe ---------------------------------------------------------------

def recipe_in_docs() -> list[str]:
    page = (DOCS / "getting-started.md").read_text()
    return re.search(r"<!-- recipe: \.ci/Containerfile -->\n```sh\n(.*?)```", page, re.S)[1].splitlines()


def recipe_in_containerfile() -> list[str]:
    text = (ROOT / ".ci" / "Containerfile").read_text()
    block = re.search(r"^# Recipe [^:]*?root:\n((?:#   [^\n]*\n)+)", text, re.M)[1]
    return [line[len("#   "):] for line in block.splitlines()]


def test_the_containerfile_and_the_docs_give_one_recipe():
    docs, containerfile = recipe_in_docs(), recipe_in_containerfile()
    assert docs == containerfile
    assert "apt-get install -y podman runc mmdebstrap" in docs
    text = (ROOT / ".ci" / "Containerfile").read_text()
    assert re.search(r"^ARG BASE=", text, re.M) and any("--build-arg BASE=" in c and "-f .ci/Containerfile" in c
                                                        for c in docs)
    # the image mmdebstrap makes has what the Containerfile's own apt-get line installs
    include = re.search(r"--include=(\S+)", "\n".join(docs))[1].split(",")
    installs = re.search(r"--no-install-recommends \\\n\s+(.+?)\s*\\\n", text)[1].split()
    assert sorted(include) == sorted(installs)
    page = (DOCS / "getting-started.md").read_text()
    assert "-v /usr/local/share/ca-certificates:/usr/local/share/ca-certificates:ro" in page
    assert "-v /usr/local/share/ca-certificates:/usr/local/share/ca-certificates:ro" in text

