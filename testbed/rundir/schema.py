"""The checks the record schemas are written in (:mod:`testbed.rundir.schemas`).

A check is a callable ``(value, where) -> list of problems`` ("where: what is wrong"); the
readers (:mod:`testbed.rundir.read`) drop a record with problems and report them with
file and line. Objects accept unknown keys (newer writers add fields); the keys a reader
uses are typed, with bounds that keep every allocation a reader sizes by them small.
"""

from __future__ import annotations

import json
import math


def _show(v) -> str:
    text = json.dumps(v, default=repr) if not isinstance(v, float) or math.isfinite(v) else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_num(v) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return -2**63 <= v < 2**64
    return isinstance(v, float) and math.isfinite(v)


class Check:
    """A type with bounds: ``what`` it must be, ``test(value) -> bool``. Every check has
    :meth:`ok` (fast, for the good records) and is called as ``check(value, where)`` for the
    list of problems (at most one per check)."""

    def __init__(self, what: str, test):
        self.what, self.ok = what, test

    def __call__(self, v, where: str = "") -> list[str]:
        return [] if self.ok(v) else [f"{where or 'value'}: expected {self.what}, got {_show(v)}"]


def Num(lo: float = -math.inf, hi: float = math.inf, what: str = "a finite number") -> Check:
    """A finite JSON number (not a boolean) in ``[lo, hi]``."""
    bounds = "" if (lo, hi) == (-math.inf, math.inf) else f" in [{lo:g}, {hi:g}]"
    return Check(what + bounds, lambda v: _is_num(v) and lo <= v <= hi)


def Int(lo: int = -2**63, hi: int = 2**63, what: str = "an integer") -> Check:
    """A JSON integer (not a boolean) in ``[lo, hi]``."""
    bounds = "" if (lo, hi) == (-2**63, 2**63) else f" in [{lo}, {hi}]"
    return Check(what + bounds, lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi)


NUM = Num()
COUNTER = Num(0, 2**64, "a counter")
TIME = Num(0, 1e11, "a wall-clock time in s")
RANK = Int(0, 1 << 20, "a rank")
STR = Check("a string", lambda v: isinstance(v, str))
BOOL = Check("true or false", lambda v: isinstance(v, bool))
ANY = Check("anything", lambda v: True)
KEY = Check("a string, an integer or null", lambda v: v is None or isinstance(v, str)
            or (isinstance(v, int) and not isinstance(v, bool)))
"""Values used as dictionary keys by the readers (peer, dir, ev_id): hashable JSON scalars."""


class Opt:
    """``check`` or null."""

    def __init__(self, check):
        self.check = check

    def ok(self, v) -> bool:
        return v is None or self.check.ok(v)

    def __call__(self, v, where: str = "") -> list[str]:
        return [] if v is None else self.check(v, where)


class ListOf:
    """A JSON array of ``min_len`` to ``max_len`` items, each ``item``."""

    def __init__(self, item, max_len: int = 1 << 20, min_len: int = 0):
        self.item, self.max_len, self.min_len = item, max_len, min_len

    def ok(self, v) -> bool:
        item = self.item.ok
        return isinstance(v, list) and self.min_len <= len(v) <= self.max_len and all(map(item, v))

    def __call__(self, v, where: str = "") -> list[str]:
        if not isinstance(v, list):
            return [f"{where}: expected an array, got {_show(v)}"]
        if not self.min_len <= len(v) <= self.max_len:
            return [f"{where}: {len(v)} items, expected {self.min_len} to {self.max_len}"]
        for i, x in enumerate(v):
            if not self.item.ok(x):
                return self.item(x, f"{where}[{i}]")
        return []


class MapOf:
    """A JSON object of any keys, at most ``max_len``, each value ``value``."""

    def __init__(self, value, max_len: int = 1 << 20):
        self.value, self.max_len = value, max_len

    def ok(self, v) -> bool:
        return isinstance(v, dict) and len(v) <= self.max_len and all(map(self.value.ok, v.values()))

    def __call__(self, v, where: str = "") -> list[str]:
        if not isinstance(v, dict):
            return [f"{where}: expected an object, got {_show(v)}"]
        if len(v) > self.max_len:
            return [f"{where}: {len(v)} keys, more than {self.max_len}"]
        for k, x in v.items():
            if not self.value.ok(x):
                return self.value(x, f"{where}.{k}")
        return []


class Obj:
    """A JSON object: ``required`` and ``optional`` keys with their checks (others allowed).
    ``check(value, where)`` returns the first problem; :meth:`problems` one per bad key."""

    def __init__(self, required: dict | None = None, optional: dict | None = None):
        self.required, self.optional = dict(required or {}), dict(optional or {})
        self._req = tuple((k, c.ok) for k, c in self.required.items())
        self._opt = tuple((k, c.ok) for k, c in self.optional.items())

    def extend(self, required: dict | None = None, optional: dict | None = None) -> "Obj":
        return Obj({**self.required, **(required or {})}, {**self.optional, **(optional or {})})

    def ok(self, v) -> bool:
        if type(v) is not dict:
            return False
        for k, ok in self._req:
            if k not in v or not ok(v[k]):
                return False
        for k, ok in self._opt:
            if k in v and not ok(v[k]):
                return False
        return True

    def problems(self, v, where: str = "") -> list[str]:
        pre = f"{where}." if where else ""
        if not isinstance(v, dict):
            return [f"{where or 'record'}: expected an object, got {_show(v)}"]
        out = [f"{pre}{k}: missing" for k in self.required if k not in v]
        for k, check in (*self.required.items(), *self.optional.items()):
            if k in v:
                out += check(v[k], pre + k)[:1]
        return out

    def __call__(self, v, where: str = "") -> list[str]:
        return self.problems(v, where)[:1]


def check_record(schema, value) -> str | None:
    """The first problem of ``value`` against ``schema`` (an :class:`Obj` or a check), None if good."""
    if schema.ok(value):
        return None
    p = schema(value, "")
    return p[0].lstrip(".") if p else None

