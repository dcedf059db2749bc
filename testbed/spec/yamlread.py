"""Strict reading of YAML node trees with file:line:key-path problems.

PyYAML composes a document into nodes that keep their marks (line, column);
:class:`Reader` walks those nodes, checks shapes and types, and collects
every problem as a :class:`Problem` instead of stopping at the first one.
Key paths look like ``links[3].rate``, ``nodes.h0.role``, ``workload.min_bytes``.
Used by :mod:`testbed.spec`; no I/O beyond reading the one file.

Every input gives a document or problems, never an exception: the bounds on the file,
its text and its YAML are :mod:`testbed.spec.yamlsafe`'s.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from testbed.model.errors import InputError
from testbed.model.units import UnitError, show
from testbed.spec.yamlsafe import (MAX_DEPTH, MAX_EXPANDED_NODES, StrictLoader, compose_one, expanded_size,
                                   flow_depth_line, read_spec_text)

NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec file: ``file``, 1-based ``line`` (0: whole file),
    ``key_path`` (``links[3].rate``, empty for the document) and ``message``."""

    file: str
    line: int
    key_path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.key_path}: {self.message}" if self.key_path else f"{where}: {self.message}"

    def to_dict(self) -> dict:
        return {"file": self.file, "line": self.line, "key_path": self.key_path, "message": self.message}


class SpecError(InputError):
    """A spec file (or the files it refers to) has problems; ``problems`` lists them all.

    ``str()`` gives one problem per line.
    """

    def __init__(self, problems: Iterable[Problem]):
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def join(path: str, key: str | int) -> str:
    """Key path of ``key`` (a mapping key or a sequence index) under ``path``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if not key.isprintable() or len(key) > 60:
        key = show(key)  # escaped and elided: key paths are printed
    return f"{path}.{key}" if path else key


def line_of(node: Node) -> int:
    return node.start_mark.line + 1


def unknown_key(key: str, allowed: list[str]) -> str:
    """The problem of an unknown ``key``: ``unknown key; did you mean 'iterations'? (allowed: ...)``,
    the suggestion being the closest allowed key by :func:`difflib.get_close_matches` (if any)."""
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key{hint} (allowed: {', '.join(allowed)})"


class Reader:
    """Walks the node tree of one file, recording key-path lines and problems.

    Every accessor returns None when the value is unusable (and records why),
    so callers can keep going and report everything at once.
    """

    def __init__(self, file: str):
        self.file = file
        self.problems: list[Problem] = []
        self.lines: dict[str, int] = {}
        self._loader = StrictLoader("")

    # -- problems --------------------------------------------------------------
    def error(self, where: Node | int, path: str, message: str) -> None:
        line = line_of(where) if isinstance(where, Node) else where
        self.problems.append(Problem(self.file, line, path, message))

    def line_for(self, path: str, default: int = 1) -> int:
        """Line of ``path``, else of its nearest recorded ancestor, else ``default``."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = re.sub(r"(\[\d+\]|\.?[^.\[]+)$", "", path)
        return default

    # -- document --------------------------------------------------------------
    def compose(self, path: Path) -> Node | None:
        """The document's root node, or None (problem recorded) if unreadable, not
        YAML, or beyond the bounds of :mod:`testbed.spec.yamlsafe`."""
        try:
            text = read_spec_text(path)
        except ValueError as exc:
            self.error(0 if str(exc).startswith("cannot read") else 1, "", str(exc))
            return None
        deep = flow_depth_line(text)
        if deep is not None:
            self.error(deep, "", f"not valid YAML: nested deeper than {MAX_DEPTH} levels")
            return None
        try:
            root = compose_one(text)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            self.error(mark.line + 1 if mark else 1, "", f"not valid YAML: {exc.problem or exc.context}")
            return None
        except yaml.YAMLError as exc:
            self.error(1, "", f"not valid YAML: {show(str(exc), 200)}")
            return None
        except RecursionError:  # pragma: no cover - MAX_DEPTH stops the composer first
            self.error(1, "", f"not valid YAML: nested deeper than {MAX_DEPTH} levels")
            return None
        if root is None:
            self.error(1, "", "file is empty; expected a mapping")
        elif expanded_size(root) > MAX_EXPANDED_NODES:
            self.error(1, "", f"aliases expand the document past {MAX_EXPANDED_NODES} nodes "
                              "(an alias bomb?)")
            return None
        return root

    # -- shapes ----------------------------------------------------------------
    def describe(self, node: Node) -> str:
        if isinstance(node, MappingNode):
            return "a mapping"
        if isinstance(node, SequenceNode):
            return "a list"
        return show(self.value(node))

    def value(self, node: Node) -> Any:
        """The Python value of a scalar node (None for collections); a scalar the
        constructor rejects (``0b``, an integer of 5,000 digits) is its raw text."""
        if not isinstance(node, ScalarNode):
            return None
        try:
            return self._loader.construct_object(node)
        except (yaml.YAMLError, ValueError, OverflowError):
            return node.value

    def entries(self, node: Node, path: str, what: str = "key") -> list[tuple[str, Node, Node]] | None:
        """(key, key node, value node) of a mapping; non-string and duplicate keys are problems."""
        if not isinstance(node, MappingNode):
            self.error(node, path, f"expected a mapping, got {self.describe(node)}")
            return None
        out, seen = [], {}
        for key_node, value_node in node.value:
            key = self.value(key_node)
            if not isinstance(key, str):
                self.error(key_node, path, f"{what} {self.describe(key_node)} is not a string")
                continue
            if key in seen:
                self.error(key_node, join(path, key), f"duplicate {what} {show(key)} (first at line {seen[key]})")
                continue
            seen[key] = line_of(key_node)
            self.lines[join(path, key)] = line_of(key_node)
            out.append((key, key_node, value_node))
        return out

    def mapping(self, node: Node, path: str, required: Iterable[str] = (),
                optional: Iterable[str] = ()) -> dict[str, Node] | None:
        """A mapping with exactly these keys allowed; unknown and missing keys are problems."""
        entries = self.entries(node, path)
        if entries is None:
            return None
        required, optional = list(required), list(optional)
        allowed = required + optional
        out = {}
        for key, key_node, value_node in entries:
            if key not in allowed:
                self.error(key_node, join(path, key), unknown_key(key, allowed))
            else:
                out[key] = value_node
        for key in required:
            if key not in out:
                self.error(node, path, f"missing required key {key!r}")
        return out

    def seq(self, node: Node, path: str) -> list[Node] | None:
        if not isinstance(node, SequenceNode):
            self.error(node, path, f"expected a list, got {self.describe(node)}")
            return None
        for i, item in enumerate(node.value):
            self.lines[join(path, i)] = line_of(item)
        return list(node.value)

    # -- scalars ---------------------------------------------------------------
    def text(self, node: Node | None, path: str) -> str | None:
        if node is None:
            return None
        value = self.value(node) if isinstance(node, ScalarNode) else None
        if not isinstance(value, str):
            self.error(node, path, f"expected a string, got {self.describe(node)}")
            return None
        return value

    def name(self, node: Node | None, path: str, what: str = "name") -> str | None:
        value = self.text(node, path)
        if value is not None and not NAME_RE.fullmatch(value):
            self.error(node, path, f"{what} {show(value)} must start with a letter and hold only "
                                   "letters, digits and '_'")
            return None
        return value

    def integer(self, node: Node | None, path: str, minimum: int | None = None,
                maximum: int | None = None, why: str = "") -> int | None:
        """A YAML integer in ``minimum..maximum`` (``why`` explains the maximum)."""
        if node is None:
            return None
        value = self.value(node) if isinstance(node, ScalarNode) else None
        if not isinstance(value, int) or isinstance(value, bool):
            self.error(node, path, f"expected an integer, got {self.describe(node)}")
            return None
        if minimum is not None and value < minimum:
            self.error(node, path, f"must be >= {minimum}, got {value}")
            return None
        if maximum is not None and value > maximum:
            self.error(node, path, f"must be <= {maximum}{' (' + why + ')' if why else ''}, got {show(value)}")
            return None
        return value

    def boolean(self, node: Node | None, path: str) -> bool | None:
        """A YAML boolean (true/false); anything else is a problem (None)."""
        if node is None:
            return None
        value = self.value(node) if isinstance(node, ScalarNode) else None
        if not isinstance(value, bool):
            self.error(node, path, f"expected true or false, got {self.describe(node)}")
            return None
        return value

    def choice(self, node: Node | None, path: str, choices: Iterable[str]) -> str | None:
        value = self.text(node, path)
        choices = list(choices)
        if value is not None and value not in choices:
            self.error(node, path, f"{show(value)} is not one of {', '.join(choices)}")
            return None
        return value

    def unit(self, node: Node | None, path: str, parse: Callable[[object], Any]) -> Any:
        """Parse a unit value (see :mod:`testbed.model.units`); a UnitError becomes a problem."""
        if node is None:
            return None
        if not isinstance(node, ScalarNode):
            self.error(node, path, f"expected a value, got {self.describe(node)}")
            return None
        try:
            return parse(self.value(node))
        except UnitError as exc:
            self.error(node, path, str(exc))
            return None
