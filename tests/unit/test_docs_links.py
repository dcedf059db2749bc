"""The pages' structure (no root): every code fence on every page (docs/*.md, README.md) closes,
and every anchor link between them (``page.md#anchor``, ``#anchor``) names a heading there.

A fence left open swallows what follows it, headings included, and a link to one of those
headings then leads nowhere (getting-started.md's ``compare`` example once hid "In a container
(and CI)", which the README links to). Fences follow CommonMark: a fence of N backticks closes
at a line of N or more backticks alone, so a line that opens a fence with an info string
(```` ```sh ````) inside a block of as many backticks means the block before it was never
closed (CommonMark and Python-Markdown's fenced_code both read on to the next bare fence). Anchors are
mkdocs' (Python-Markdown toc's ``slugify``): the heading's text without markup, punctuation
dropped, lower-case, runs of spaces and hyphens as one ``-``; a repeated heading gets ``_1``,
``_2``..."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"\]\(\s*([^)\s]+)")   # [text](target) and ![alt](target)


def slugify(text: str) -> str:
    """mkdocs' anchor of a heading's text (``markdown.extensions.toc.slugify``, markup removed
    first: inline code, links and emphasis count by their text)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)        # [text](url) -> text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = re.sub(r"(\*\*|__|\*|_)(\S(?:.*?\S)?)\1", r"\2", text)  # emphasis
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def fence_problems(text: str) -> list[str]:
    """``line N: ...`` for each fence that does not balance (CommonMark rules, see the module)."""
    problems, open_at, fence = [], None, ""
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if not m:
            continue
        mark, info = m[1], m[2].strip()
        if open_at is None:
            open_at, fence = n, mark
        elif mark[0] == fence[0] and len(mark) >= len(fence) and not info:
            open_at = None
        elif mark[0] == fence[0] and len(mark) >= len(fence) and info:
            problems.append(f"line {n}: a fence opens ({line.strip()}) inside the block opened at line "
                            f"{open_at}: that block is never closed")
    if open_at is not None:
        problems.append(f"line {open_at}: this fence is never closed")
    return problems


def outside_fences(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line that is not inside a fenced block nor a fence."""
    out, fence = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m[1]
        elif fence is not None:
            if m and m[1][0] == fence[0] and len(m[1]) >= len(fence) and not m[2].strip():
                fence = None
        else:
            out.append((n, line))
    return out


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings, as mkdocs makes them (repeats get ``_1``, ``_2``...)."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in outside_fences(page.read_text()):
        m = HEADING.match(line)
        if not m:
            continue
        slug = slugify(m[2])
        out.add(f"{slug}_{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return out


def links(page: Path) -> list[tuple[int, Path, str]]:
    """(line, target page, anchor) of every link on ``page`` that names an anchor in a page of
    this repository (``other.md#a``, ``docs/other.md#a``, ``#a``); code spans are not links."""
    out = []
    for n, line in outside_fences(page.read_text()):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            path, _, anchor = target.partition("#")
            if not anchor or re.match(r"[a-z][a-z0-9+.-]*:", path):   # no anchor, or a URL
                continue
            out.append((n, (page.parent / path).resolve() if path else page, anchor))
    return out


def test_the_slug_is_mkdocs_and_matches_how_the_readme_spells_anchors():
    assert slugify("In a container (and CI)") == "in-a-container-and-ci"
    assert slugify("Why 10 Mbit/s") == "why-10-mbits"
    assert slugify("`make up` and its commands") == "make-up-and-its-commands"
    assert slugify("The [MRC](x.md) controller -- flags") == "the-mrc-controller-flags"


def test_the_checks_catch_an_unclosed_fence_and_what_it_hides(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Top\n\n```\nexample\n\n## Hidden\n\n```sh\nls\n```\n\n## Top\n\n[a](#hidden) [b](#top_1)\n")
    assert fence_problems(page.read_text()) == [
        "line 8: a fence opens (```sh) inside the block opened at line 3: that block is never closed"]
    assert anchors(page) == {"top", "top_1"}
    assert [a for _, _, a in links(page)] == ["hidden", "top_1"]
    assert fence_problems("```\na\n") == ["line 1: this fence is never closed"]
    assert fence_problems("````md\n```sh\nx\n```\n````\n") == []   # a longer fence holds a shorter one


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_fence_closes(page):
    assert fence_problems(page.read_text()) == [], page.name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_anchor_link_names_a_heading_of_its_page(page):
    broken = []
    for line, target, anchor in links(page):
        if not target.is_file():
            broken.append(f"{page.name}:{line}: {target.name}#{anchor}: no such page")
        elif anchor not in anchors(target):
            broken.append(f"{page.name}:{line}: {target.name}#{anchor}: no such heading")
    assert broken == []


def test_the_readme_links_to_the_container_recipe():
    assert (1, DOCS / "getting-started.md", "in-a-container-and-ci") in {
        (1, t, a) for _, t, a in links(ROOT / "README.md")}
    assert "in-a-container-and-ci" in anchors(DOCS / "getting-started.md")
