"""Spec file bytes to a bounded YAML node tree: every input either gives a document or
raises, never hangs or exhausts memory.

A file is read only if it is a regular file of at most :data:`MAX_FILE_BYTES`
(:func:`read_spec_text`); bytes that are not UTF-8 text (gzip, UTF-16, NUL bytes, Latin-1)
are named as such (:func:`decode_spec`); YAML is restricted to the core schema (no tags,
no timestamps, no merge keys), aliases may not be mapping keys nor contain themselves
(:class:`StrictLoader`), and nesting depth (:func:`flow_depth_line`) and alias expansion
(:func:`expanded_size`) are bounded. :class:`testbed.spec.yamlread.Reader` turns what this
raises into problems.
"""

from __future__ import annotations

import codecs
import os
import stat
from pathlib import Path

import yaml
from yaml.composer import ComposerError
from yaml.events import AliasEvent, CollectionStartEvent, NodeEvent
from yaml.nodes import CollectionNode, MappingNode, Node

from testbed.model.units import show

#: Largest spec file read (bytes): a k=8 fat-tree in explicit form is ~30 KB.
MAX_FILE_BYTES = 256 * 1024
#: Deepest nesting of collections (a spec needs 5).
MAX_DEPTH = 64
#: Most nodes a document may hold once aliases are expanded.
MAX_EXPANDED_NODES = 100_000

_BANNED_RESOLVERS = {"tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"}


class StrictLoader(yaml.SafeLoader):
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


def compose_one(text: str):
    """The node of the one YAML document in ``text`` (None if empty), composed by
    :class:`StrictLoader`; raises what the loader raises (``yaml.YAMLError``)."""
    loader = StrictLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()
