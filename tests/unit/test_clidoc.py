"""docs/cli.md against the CLI (no root): every flag of every verb is on the page, and the page
is what ``python -m testbed.clidoc`` writes (run it after changing a verb's arguments)."""

import argparse

from testbed.cli import build_parser
from testbed.clidoc import PAGE, flags, main, render


def missing_flags(page: str, names_by_verb: dict[str, list[str]]) -> list[str]:
    """``testbed VERB FLAG`` for each flag (or positional) not in its verb's section of ``page``."""
    sections = {"": page.split("\n## Verbs\n")[0],
                **{verb: page.split(f"\n## testbed {verb}\n")[1].split("\n## ")[0] for verb in names_by_verb if verb}}
    return [" ".join(filter(None, ("testbed", verb, name))) for verb, names in names_by_verb.items()
            for name in names if f"`{name}" not in sections[verb]]


def test_every_flag_of_every_verb_is_on_the_page():
    missing = missing_flags(PAGE.read_text(), flags())
    assert not missing, f"docs/cli.md lacks {missing}: run .venv/bin/python -m testbed.clidoc"


def test_a_flag_without_a_row_is_caught():
    names = flags()
    names["run"] = [*names["run"], "--brand-new"]
    assert missing_flags(PAGE.read_text(), names) == ["testbed run --brand-new"]


def test_the_flags_are_the_parsers():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    got = flags()
    assert set(got) == {"", *sub.choices}
    assert "--seed" in got["run"] and "--needs" in got["validate"] and "SCENARIO" in got["run"]
    assert "--verbose" in got[""]


def test_the_page_is_current(capsys):
    assert main(["--check"]) == 0, "docs/cli.md is stale: run .venv/bin/python -m testbed.clidoc"


def test_check_fails_on_a_stale_page_and_the_generator_writes_it(tmp_path):
    out = tmp_path / "cli.md"
    assert main(["--check", "--out", str(out)]) == 1
    assert main(["--out", str(out)]) == 0 and out.read_text() == render()
    out.write_text(render().replace("`--seed N`", "`--seed`"))
    assert main(["--check", "--out", str(out)]) == 1
