"""Strict reading of YAML node trees with file:line:key-path problems.

PyYAML composes a document into nodes that keep their marks (line, column);
:class:`Reader` walks those nodes, checks shapes and types, and collects
every problem as a :class:`Problem` instead of stopping at the first one.
Key paths look like ``links[3].rate``, ``nodes.h0.role``, ``workload.min_bytes``.
Used by :mod:`testbed.spec`; no I/O beyond reading the one file.

Every input gives a document or problems, never an exception: the file is
read only if it is a regular file of at most :data:`MAX_FILE_BYTES`; bytes
that are not UTF-8 text (gzip, UTF-16, NUL bytes, Latin-1) are named as
such; YAML is restricted to the core schema (no tags, no timestamps, no
merge keys), aliases may not be mapping keys nor contain themselves, and
nesting depth and alias expansion are bounded.
"""

from __future__ import annotations

import codecs
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml
from yaml.composer import ComposerError
from yaml.events import AliasEvent, CollectionStartEvent, NodeEvent
from yaml.nodes import CollectionNode, MappingNode, Node, ScalarNode, SequenceNode

from testbed.model.units import UnitError, show
from testbed.model.errors import InputError

NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
#: Largest spec file read (bytes): a k=8 fat-tree in explicit form is ~30 KB.
MAX_FILE_BYTES = 256 * 1024
#: Deepest nesting of collections (a spec needs 5).
MAX_DEPTH = 64
#: Most nodes a document may hold once aliases are expanded.
MAX_EXPANDED_NODES = 100_000

_BANNED_RESOLVERS = {"tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"}


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader on the core schema: explicit tags, aliases as keys, aliases inside
    their own anchor and deep nesting are composer errors (with a mark)."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag not in _BANNED_RESOLVERS]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._open_anchors: set[str] = set()

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            if isinstance(parent, MappingNode) and index is None:
                raise ComposerError(None, None, f"alias *{event.anchor} used as a mapping key "
                                                "(not allowed)", event.start_mark)
            if event.anchor in self._open_anchors:
                raise ComposerError(None, None, f"alias *{event.anchor} inside its own anchor "
                                                "(a recursive document)", event.start_mark)
        elif isinstance(event, NodeEvent) and event.tag is not None:
            tag = event.tag.replace("tag:yaml.org,2002:", "!!")
            raise ComposerError(None, None, f"tag {show(tag)} is not allowed (write plain "
                                            "values; quote them to make strings)", event.start_mark)
        if not isinstance(event, CollectionStartEvent):
            return super().compose_node(parent, index)
        if self._depth >= MAX_DEPTH:
            raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
        self._depth += 1
        if event.anchor is not None:
            self._open_anchors.add(event.anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            self._open_anchors.discard(event.anchor)


def flow_depth_line(text: str, limit: int = MAX_DEPTH) -> int | None:
    """Line where flow collections (``[`` ``{``) nest deeper than ``limit``, else None.

    PyYAML's scanner is quadratic in flow nesting (every open bracket may start a
    simple key) before the composer sees the depth, so this linear pre-scan runs
    first. It skips comments and quoted scalars; a bracket inside a plain scalar
    counts too, which over-approximates only files nested near the limit anyway.
    """
    depth, line, quote, i, n = 0, 1, "", 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        elif quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote and quote == "'" and text[i + 1:i + 2] == "'":
                i += 1  # '' is a quote inside single quotes
            elif c == quote:
                quote = ""
        elif c in "'\"" and (i == 0 or text[i - 1] in " \t\n[{,:-?"):
            quote = c
        elif c == "#" and (i == 0 or text[i - 1] in " \t\n"):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif c in "[{":
            depth += 1
            if depth > limit:
                return line
        elif c in "]}":
            depth = max(0, depth - 1)
        i += 1
    return None


def expanded_size(root: Node, limit: int = MAX_EXPANDED_NODES) -> int:
    """Number of nodes in ``root`` with every alias expanded, counted without expanding
    (each distinct node once); stops counting past ``limit``. Needs an acyclic tree."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children = [] if not isinstance(node, CollectionNode) else (
            [n for pair in node.value for n in pair] if isinstance(node, MappingNode) else node.value)
        if done:
            sizes[id(node)] = min(limit + 1, 1 + sum(sizes[id(c)] for c in children))
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def read_spec_text(path: Path) -> str:
    """The text of a spec file. Raises :class:`ValueError` with a message that says what
    the file is when it is not a regular file of UTF-8 text of at most MAX_FILE_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise ValueError(f"cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"cannot read: {_file_kind(st.st_mode)}, not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise ValueError(f"cannot read: {st.st_size} bytes, larger than a spec file may be "
                             f"({MAX_FILE_BYTES} bytes)")
        data = os.read(fd, MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"cannot read: larger than a spec file may be ({MAX_FILE_BYTES} bytes)")
    return decode_spec(data)


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "a special file"


def decode_spec(data: bytes) -> str:
    """UTF-8 text of ``data`` (a UTF-8 BOM is dropped); ValueError naming what the bytes are otherwise."""
    if data.startswith(b"\x1f\x8b"):
        raise ValueError("not YAML text: a gzip-compressed file (decompress it first)")
    for bom, name in ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
                      (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16")):
        if data.startswith(bom):
            raise ValueError(f"not UTF-8: {name} text (byte-order mark {bom.hex()}); save it as UTF-8")
    if b"\0" in data:
        at = data.index(b"\0")
        guess = "UTF-16 text without a byte-order mark" if data[1:2] == b"\0" or data[:1] == b"\0" \
            else "a binary file"
        line = data.count(b"\n", 0, at) + 1
        raise ValueError(f"not YAML text: NUL byte at offset {at} (line {line}; {guess}?)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ValueError(f"not UTF-8: byte 0x{data[exc.start]:02x} at line {line} (Latin-1 or Windows-1252 "
                         "text?); save it as UTF-8") from None
    return text.removeprefix("\ufeff")


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


class Reader:
    """Walks the node tree of one file, recording key-path lines and problems.

    Every accessor returns None when the value is unusable (and records why),
    so callers can keep going and report everything at once.
    """

    def __init__(self, file: str):
        self.file = file
        self.problems: list[Problem] = []
        self.lines: dict[str, int] = {}
        self._loader = _StrictLoader("")

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
        YAML, or beyond the bounds in the module docstring."""
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
            loader = _StrictLoader(text)
            try:
                root = loader.get_single_node()
            finally:
                loader.dispose()
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
                self.error(key_node, join(path, key), f"unknown key (allowed: {', '.join(allowed)})")
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
