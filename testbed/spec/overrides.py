"""Key-path overrides of a scenario's YAML: ``sweep:`` blocks and ``testbed run --set KEY=VALUE``.

A key path names one place in the scenario file: dotted mapping keys and ``[i]`` list
indices, as the validator prints them (``workload.evs``, ``timeline[0].loss.percent``,
``jobs[1].hosts``). :func:`parse_key` splits one; :func:`apply` returns a copy of the
composed node tree with one value replaced (or added: the last key may be new in its
mapping, so that optional keys can be set; everything before it must exist). The value is
a YAML node that keeps its own line, so whatever the scenario's normal validation says
about it (:func:`testbed.spec.scenfile.load_scenario` runs it on the overridden tree) is
reported at that line: for a sweep, the line of the value in the ``sweep:`` block.

``sweep:`` is a top-level mapping of key paths to non-empty lists of values; the runs
are the cartesian product of the lists, in file order, the last key varying fastest
(:func:`points`). :func:`check_sweep` validates every key path and every value (each value
applied alone to the file, through the normal loader) and removes the block from the tree.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Callable

import yaml
from yaml.error import Mark
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from testbed.model.units import show
from testbed.spec.yamlread import Problem, Reader, join, line_of
from testbed.spec.yamlsafe import compose_one

SWEEP_KEY = "sweep"
#: Most points a sweep may expand to (each runs every transport, with its trials).
MAX_POINTS = 256
_NAME = r"[A-Za-z_][A-Za-z0-9_-]*"
_PART = re.compile(rf"({_NAME})|\[(\d{{1,6}})\]")
_PATH = re.compile(rf"{_NAME}(\[\d{{1,6}}\])*(\.{_NAME}(\[\d{{1,6}}\])*)*")

Key = tuple  # of str (mapping keys) and int (list indices)


class KeyError_(ValueError):
    """A key path that does not parse, or names no place in the file."""


def parse_key(text: str) -> Key:
    """``"timeline[0].loss.percent"`` -> ``("timeline", 0, "loss", "percent")``.
    Raises KeyError_ for anything else (empty parts, a leading index, stray characters)."""
    if not _PATH.fullmatch(text):
        raise KeyError_(f"bad key path {show(text)}: expected keys joined by '.', each optionally "
                        "followed by [index] (e.g. timeline[0].loss.percent)")
    return tuple(name if name else int(index) for name, index in _PART.findall(text))


def format_key(key: Key) -> str:
    """The inverse of :func:`parse_key`."""
    out = ""
    for part in key:
        out = join(out, part)
    return out


def _scalar_key(node: Node) -> str | None:
    return node.value if isinstance(node, ScalarNode) else None


def apply(root: Node, key: Key, value: Node, key_mark: Mark | None = None) -> Node:
    """A copy of ``root`` with ``value`` at ``key`` (only the nodes on the path are copied).
    A missing key is added (its key node at ``key_mark``, default the value's mark), with the
    mappings under it when the rest of the path is keys (``qp.ecn`` on a file without ``qp``);
    a missing step before a list index raises KeyError_."""
    if not key:
        return value
    head, rest = key[0], key[1:]
    where = format_key(key)
    if isinstance(head, int):
        if not isinstance(root, SequenceNode):
            raise KeyError_(f"[{head}]: not a list here")
        if head >= len(root.value):
            raise KeyError_(f"[{head}]: the list has {len(root.value)} item{'s' * (len(root.value) != 1)}")
        items = list(root.value)
        items[head] = apply(items[head], rest, value, key_mark)
        return SequenceNode(root.tag, items, root.start_mark, root.end_mark, root.flow_style)
    if not isinstance(root, MappingNode):
        raise KeyError_(f"{head}: not a mapping here ({where})")
    pairs = list(root.value)
    for i, (k, v) in enumerate(pairs):
        if _scalar_key(k) == head:
            pairs[i] = (k, apply(v, rest, value, key_mark))
            break
    else:
        if rest and not all(isinstance(part, str) for part in rest):
            keys = [_scalar_key(k) for k, _ in pairs]
            raise KeyError_(f"{head}: no such key here (has: {', '.join(str(k) for k in keys) or 'none'})")
        mark = key_mark or value.start_mark
        if rest:   # a mapping the file lacks (qp.ecn): made here; the validator judges its keys
            value = apply(MappingNode("tag:yaml.org,2002:map", [], mark, mark), rest, value, key_mark)
        pairs.append((ScalarNode("tag:yaml.org,2002:str", head, mark, mark), value))
    return MappingNode(root.tag, pairs, root.start_mark, root.end_mark, root.flow_style)


def value_node(text: str, line: int = 0) -> Node:
    """The YAML node of a ``--set`` value (``8``, ``1%``, ``[h0_0_0, h1_0_0]``, ``{link: x}``),
    its marks at ``line`` (1-based; 0: none, so problems about it name the file only).
    Raises KeyError_ if it is not one YAML value."""
    try:
        node = compose_one(text)
    except yaml.YAMLError as exc:
        raise KeyError_(f"value {show(text)} is not YAML: {getattr(exc, 'problem', None) or exc}") from None
    if node is None:
        node = ScalarNode("tag:yaml.org,2002:null", "", None, None)
    _remark(node, Mark("<--set>", 0, line - 1, 0, None, None))
    return node


def _remark(node: Node, mark: Mark) -> None:
    node.start_mark = node.end_mark = mark
    if isinstance(node, SequenceNode):
        for item in node.value:
            _remark(item, mark)
    elif isinstance(node, MappingNode):
        for k, v in node.value:
            _remark(k, mark)
            _remark(v, mark)


@dataclass(frozen=True)
class Override:
    """One value at one key path: ``text`` is how it is shown (the YAML as written)."""

    key: Key
    node: Node
    text: str
    line: int = 0          # the line of the key (in the sweep block), 0 for --set
    #: where problems about it are named: default ``sweep.<path>`` with a line, ``--set <path>``
    #: without; a reproduce control's: ``control.set.<path>`` (its line is the claims file's)
    origin: str = ""

    @property
    def path(self) -> str:
        return format_key(self.key)


def parse_set(item: str) -> Override:
    """``KEY=VALUE`` of ``--set`` -> Override. Raises KeyError_."""
    key, eq, text = item.partition("=")
    if not eq:
        raise KeyError_(f"--set {show(item)}: expected KEY=VALUE")
    return Override(parse_key(key.strip()), value_node(text.strip()), text.strip())


@dataclass(frozen=True)
class Sweep:
    """A ``sweep:`` block: key paths in file order, each with its values (as Overrides)."""

    keys: tuple[str, ...]
    values: tuple[tuple[Override, ...], ...]

    def points(self) -> list[tuple[Override, ...]]:
        """The cartesian product, first key slowest."""
        return [tuple(p) for p in itertools.product(*self.values)]


def points(sweep: Sweep) -> list[tuple[Override, ...]]:
    return sweep.points()


def point_label(point: tuple[Override, ...]) -> str:
    """``workload.evs=8, timeline[0].loss.percent=1%``."""
    return ", ".join(f"{o.path}={o.text}" for o in point)


def point_dir(point: tuple[Override, ...]) -> str:
    """A directory name for a point: ``evs-8_percent-1pct`` (each key's last name part)."""
    parts = []
    for o in point:
        name = next((p for p in reversed(o.key) if isinstance(p, str)), "key")
        val = re.sub(r"[^A-Za-z0-9.]+", "-", o.text.replace("%", "pct")).strip("-.") or "x"
        parts.append(f"{name}-{val}"[:40])
    return "_".join(parts) or "point"


def text_of(node: Node) -> str:
    """A value as written (a list or mapping on one line)."""
    if isinstance(node, ScalarNode):
        return str(node.value)
    value = yaml.safe_load(yaml.serialize(node))
    return " ".join(yaml.safe_dump(value, default_flow_style=True, sort_keys=False).split())


def read_sweep(r: Reader, node: Node) -> Sweep | None:
    """The ``sweep:`` mapping's keys and values; problems (not a mapping, a bad key path, an
    empty or non-list value, too many points) recorded in ``r`` at their lines."""
    entries = r.entries(node, SWEEP_KEY)
    if entries is None:
        return None
    keys, values = [], []
    for key, key_node, value_node_ in entries:
        where = join(SWEEP_KEY, key)
        try:
            parsed = parse_key(key)
        except KeyError_ as exc:
            r.error(key_node, where, str(exc))
            continue
        if parsed[0] == SWEEP_KEY:
            r.error(key_node, where, "a sweep cannot sweep itself")
            continue
        if not isinstance(value_node_, SequenceNode) or not value_node_.value:
            r.error(value_node_, where, f"expected a non-empty list of values, got {r.describe(value_node_)}")
            continue
        keys.append(key)
        values.append(tuple(Override(parsed, v, text_of(v), line_of(key_node)) for v in value_node_.value))
    if not keys:
        if not r.problems:
            r.error(node, SWEEP_KEY, "needs at least one key path with a list of values")
        return None
    n = 1
    for v in values:
        n *= len(v)
    if n > MAX_POINTS:
        r.error(node, SWEEP_KEY, f"{n} points (the product of the lists' lengths): at most {MAX_POINTS}")
        return None
    return Sweep(tuple(keys), tuple(values))


def split_sweep(root: Node) -> tuple[Node, Node | None]:
    """``root`` without its top-level ``sweep`` entry, and that entry's value node (or None)."""
    if not isinstance(root, MappingNode):
        return root, None
    found = [(k, v) for k, v in root.value if _scalar_key(k) == SWEEP_KEY]
    if not found:
        return root, None
    rest = [(k, v) for k, v in root.value if _scalar_key(k) != SWEEP_KEY]
    return MappingNode(root.tag, rest, root.start_mark, root.end_mark, root.flow_style), found[0][1]


def apply_all(r: Reader, root: Node, overrides: tuple[Override, ...] | list[Override]) -> Node | None:
    """``root`` with every override applied; a path that names no place is a problem in ``r``
    (at the override's line) and gives None."""
    ok = True
    for o in overrides:
        try:
            root = apply(root, o.key, o.node, _mark(o))
        except KeyError_ as exc:
            r.error(o.line, _where(o), f"unknown key path: {exc}")
            ok = False
    return root if ok else None


def _mark(o: Override) -> Mark:
    return Mark("<override>", 0, o.line - 1, 0, None, None)


def _where(o: Override) -> str:
    if o.origin:
        return o.origin
    return join(SWEEP_KEY, o.path) if o.line else f"--set {o.path}"


Load = Callable[[Reader, Node], object]


def check_sweep(r: Reader, root: Node, load: Load) -> Sweep | None:
    """Check the ``sweep`` block of ``root`` (already split off by :func:`split_sweep`): every
    key path must name a place in the file, and every value must pass ``load`` (the normal
    loader, run on a fresh Reader for the tree with that one value applied). A problem that
    ``load`` reports for a value but not for the file without it is recorded in ``r``; one
    at another line than the value's says which value caused it."""
    root, node = split_sweep(root)
    if node is None:
        return None
    sweep = read_sweep(r, node)
    if sweep is None:
        return None
    base = Reader(r.file)
    load(base, root)
    known = set(base.problems)
    for values in sweep.values:
        for o in values:
            try:
                tree = apply(root, o.key, o.node, _mark(o))
            except KeyError_ as exc:
                r.error(o.line, _where(o), f"unknown key path: {exc}")
                break
            trial = Reader(r.file)
            load(trial, tree)
            for p in trial.problems:
                if p in known:
                    continue
                if p.line not in (o.line, line_of(o.node)):
                    p = Problem(p.file, p.line, p.key_path,
                                f"{p.message} (with {o.path}: {o.text} from the sweep at line {line_of(o.node)})")
                if p not in r.problems:
                    r.problems.append(p)
    return sweep


def with_overrides(r: Reader, root: Node, overrides, load: Load, check: bool = True) -> Node | None:
    """The scenario tree to load: ``root`` without its ``sweep`` block (checked first with
    :func:`check_sweep` unless ``check`` is false) and with ``overrides`` applied (a sweep
    point, ``--set`` values); None (problems in ``r``) if an override's path names no place."""
    if check:
        check_sweep(r, root, load)
    return apply_all(r, split_sweep(root)[0], tuple(overrides))


def sweep_of(path) -> Sweep | None:
    """The ``sweep:`` block of a scenario file, None without one (or if the file does not
    compose: :func:`testbed.spec.scenfile.load_scenario` reports why)."""
    from pathlib import Path
    r = Reader(str(path))
    root = r.compose(Path(path))
    node = split_sweep(root)[1] if root is not None else None
    return read_sweep(r, node) if node is not None else None
