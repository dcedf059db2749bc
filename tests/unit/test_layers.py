"""The import graph: the layers contract (pyproject.toml, ``make lint``) and no import cycles."""

from __future__ import annotations

import grimp
import pytest

from testbed.cli import main
from testbed.model.errors import InputError, RecordsError, TestbedError, TestbedFailure


def _cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), sorted."""
    mods = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.find_modules_directly_imported_by(v)):
            if not w.startswith(package):
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for m in mods:
        if m not in index:
            visit(m)
    return sorted(out)


@pytest.mark.parametrize("package", ["testbed", "agents"])
def test_no_import_cycles(package):
    graph = grimp.build_graph(package, include_external_packages=False)
    # a package's __init__ importing its own submodules is its face, not a cycle
    cycles = [c for c in _cycles(graph, package)
              if not all(m.startswith(c[0] + ".") or m == c[0] for m in c)]
    assert cycles == []


def test_cycle_finder_finds_one():
    graph = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(m)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.a")
    graph.add_import(importer="p.c", imported="p.a")
    assert _cycles(graph, "p") == [["p.a", "p.b"]]


@pytest.mark.parametrize("error, code", [(InputError("x"), 2), (RecordsError("x"), 3), (TestbedFailure("x"), 1)])
def test_the_cli_maps_each_error_family_to_its_exit_code(monkeypatch, capsys, error, code):
    from testbed.commands import clean

    def boom(args):
        raise error
    monkeypatch.setattr(clean, "run", boom)
    assert main(["clean"]) == code
    assert "testbed clean: x" in capsys.readouterr().err
    assert isinstance(error, TestbedError)
