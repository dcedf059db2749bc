"""The control channel between the runner and its agents: one typed definition, one framer.

One module on purpose (over ~400 lines): both ends import this one definition of every message and
the framer; splitting it would spell the contract in two places.

Imported by both ends (:mod:`agents.net.control`, the agent's; :mod:`testbed.run.control`,
the runner's). Sans-I/O: no socket, no clock here.

Wire format: newline-delimited JSON objects over a Unix stream socket, each with a
``type``; times are wall clock ``time.time()`` seconds; blank lines are ignored::

    agent -> runner  {"type": "ready", "rank"}        once the channel is connected
    runner -> agent  {"type": "start"}                the barrier: every rank is ready
    agent -> runner  {"type": "iteration", "rank", "size", "iter", "seq", "warmup",
                      "t_start", "t_end", "seconds", "wrong"}
                     ("iter": index within this size among warm-ups or among timed
                      iterations; "seq": index over the whole sweep)
    agent -> runner  {"type": "sample", "rank", "t", "flows": [{"peer", "dir": "tx"|"rx",
                      "bytes", "retransmits", "retransmitted_bytes", "rtt_s", "cwnd_bytes",
                      "busy" (tx: a posted write not yet acknowledged),
                      "evs": [{"ev_id", "state", "sent", "lost", "rtx", "skips",
                      "charged"}]}],
                      "loop": {"timers", "late_sum_s", "late_max_s"}}
                     cumulative counters, at most one per sample_interval_s; "loop": the
                     agent's event loop (:class:`LoopStats`); with the job spec's
                     "samples_path", written there instead (the same object without
                     "type", one a line: the runner merges the files)
    agent -> runner  {"type": "event", "rank", "t", "kind": "ev_state", "peer", "dir",
                      "qpn", "ev_id", "old", "new", "cause"[, "loss_cause"]}
    agent -> runner  {"type": "event", "rank", "t", "kind": "qp_error", "reason"}
    agent -> runner  {"type": "event", "rank", "t", "kind": "ev_command", "peer", "ev_id", "cause",
                      "reason"}  a controller command applied ("reason": "ok") or refused (why)
    agent -> runner  {"type": "event", "rank", "t", "kind": "ev_stats", "peer", "evs": [{"ev_id",
                      "sent", "lost", "rtx", "skips", "charged"}]}  per MRC tx connection every
                      job spec ``ev_stats_s`` (a controller's drop telemetry; cumulative per EV in
                      use: transmissions, losses, retransmissions sent on it, SKIPs for
                      congestion, losses of a cause the QP may charge to the EV: timeouts and
                      inferred ones, not trims or NACKs)
    agent -> runner  {"type": "event", "rank", "t", "kind": "ev_query", "peer", "evs": [{"ev_id",
                      "port", "state"}], "reason"}  the answer to a query: the profile's EV array
                      (QUERY_EV_ARRAY) with each EV's QUERY_EV_STATE, "reason" "ok" (or why
                      not, with "evs" empty)
    agent -> runner  {"type": "done", "rank", "summary": {...}}  every write acknowledged
    agent -> runner  {"type": "failed", "rank", "reason"}
    runner -> agent  {"type": "stop"}                 at any time: exit promptly

The controller (:mod:`testbed.controller`, a process of its own) talks to the runner on the
same socket; the runner forwards every agent's events to it and relays its commands::

    controller -> runner  {"type": "hello", "role": "controller"}   first, once connected
    runner -> controller  every agent's {"type": "event", ...} as received
    runner -> controller  {"type": "operator", "op", "link", "index"}  a timeline action
                          (ev_deny, ev_allow, ev_replace of the EVs that cross ``link``)
    controller -> runner  {"type": "command", "rank", "peer", "op", "ev_id", "new_ev_id",
                           "reason"}   relayed to agent ``rank`` (op: deny, allow, replace)
    controller -> runner  {"type": "query", "rank", "peer"}   relayed to agent ``rank``: a
                           restarted controller's resync (the agent answers ``ev_query``)
    controller -> runner  {"type": "synced", "connections", "answered", "replaced", "denied",
                           "assumed_bad"}   once, when a restarted controller's model is resynced
    runner -> controller  {"type": "stop"}

``rank`` in an agent's message is the job spec's ``agent`` id (by default the agent's
rank in its job; the runner gives the agents of several jobs distinct ids). A sample has
one "tx" flow per peer the agent sends to and one "rx" flow per peer it receives from
("peer" its host name, "peer_rank" its rank in the job); the "evs" of an rc connection
with N QPs are one item per QP (ev_id = the QP's index).

Each message is a frozen dataclass below, its fields named as on the wire (an optional
field that is None is left out). :class:`LineFramer` turns bytes into messages and
messages into bytes; anything else (a line over :data:`MAX_LINE_BYTES`, bad JSON, an
unknown ``type``, a missing, unknown or mistyped field, a message for the other
direction) raises :class:`ControlProtocolError`.

Also here: the UDP and TCP ports the agents use and the transport names.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Union

import orjson

UDP_PORT = 4791
"""RoCEv2 destination UDP port (IBTA RoCEv2 annex A17): MRC's datagrams go to it."""
TCP_PORT = 5201
"""The TCP baseline's listening port."""
TRANSPORTS = ("mrc", "rc", "tcp")
"""Transports an agent runs: MRC (multipath), RoCE-style RC (one path, go-back-N), kernel TCP."""
MAX_LINE_BYTES = 1 << 20
"""Longest control message, newline excluded, bytes."""
EVENT_KINDS = ("ev_state", "qp_error", "ev_command", "ev_stats", "ev_query")
COMMAND_OPS = ("deny", "allow", "replace")
"""Controller commands: MODIFY_EV_STATE to DENIED, MODIFY_EV_STATE back to GOOD, REPLACE_EV
(``mrc_ctl.h`` ``enum mrc_ctl_ev_op``) on the profile of the agent's connection to ``peer``."""


class ControlProtocolError(ValueError):
    """The peer sent something that is not a control message of this protocol.

    ``messages``: the messages decoded from the same :meth:`LineFramer.feed` before the
    bad input (a receiver may still act on them before dropping the connection)."""

    def __init__(self, reason: str, messages: list | None = None):
        super().__init__(reason)
        self.messages = messages or []


# -- messages ----------------------------------------------------------------------
class _Message:
    TYPE: ClassVar[str]

    def as_dict(self) -> dict:
        """The message's fields (no ``type``); optional fields that are None left out."""
        out = {}
        for name, optional in _FIELDS[type(self)]:
            value = getattr(self, name)
            if value is None and optional:
                continue
            out[name] = value.as_dict() if isinstance(value, LoopStats) else value
        return out


@dataclass(frozen=True)
class LoopStats:
    """An agent event loop's timers: ``timers`` fired and their summed lateness ``late_sum_s``
    (cumulative), ``late_max_s`` the largest lateness since the previous sample (s; lateness
    = when the callback ran - its deadline)."""

    timers: int
    late_sum_s: float
    late_max_s: float

    def as_dict(self) -> dict:
        return {"timers": self.timers, "late_sum_s": self.late_sum_s, "late_max_s": self.late_max_s}


@dataclass(frozen=True)
class Ready(_Message):
    TYPE: ClassVar[str] = "ready"
    rank: int


@dataclass(frozen=True)
class Start(_Message):
    TYPE: ClassVar[str] = "start"


@dataclass(frozen=True)
class Iteration(_Message):
    TYPE: ClassVar[str] = "iteration"
    rank: int
    size: int
    iter: int
    seq: int
    warmup: bool
    t_start: float
    t_end: float
    seconds: float
    wrong: int


@dataclass(frozen=True)
class Sample(_Message):
    TYPE: ClassVar[str] = "sample"
    rank: int
    t: float
    flows: list
    loop: LoopStats | None = None


@dataclass(frozen=True)
class Event(_Message):
    """``kind`` "ev_state" (an EV transition: ``peer``, ``dir``, ``qpn``, ``ev_id``, ``old``,
    ``new``, ``cause``; optional ``drop_count``: losses charged to the EV, ``plane``: the NIC
    port it leaves by, ``loss_cause``: how a retiring run of losses was found, "timeout",
    "ev_threshold" or "ooo": :attr:`agents.mrc.ev.EVEvent.loss_cause`), "qp_error" (``reason``) or "ev_command" (a controller command on the
    connection to ``peer``: ``cause`` its op, ``ev_id``, ``reason`` "ok" or why it was refused)
    or "ev_stats" (``evs``: ``[{"ev_id", "sent", "lost", "rtx", "skips", "charged"}]`` of the
    connection to ``peer``: :data:`agents.agent.EV_STATS_KEYS`)
    or "ev_query" (the answer to a :class:`Query`: ``evs`` ``[{"ev_id", "port", "state"}]``,
    ``reason`` "ok" or why there is none). Raises ValueError if a field is missing."""

    TYPE: ClassVar[str] = "event"
    rank: int
    t: float
    kind: str
    peer: str | None = None
    dir: str | None = None
    qpn: int | None = None
    ev_id: int | None = None
    old: str | None = None
    new: str | None = None
    cause: str | None = None
    reason: str | None = None
    drop_count: int | None = None
    plane: int | None = None
    new_ev_id: int | None = None
    evs: list | None = None
    loss_cause: str | None = None

    def __post_init__(self):
        need = {"ev_state": ("peer", "dir", "qpn", "ev_id", "old", "new", "cause"),
                "qp_error": ("reason",), "ev_command": ("peer", "ev_id", "cause", "reason"),
                "ev_stats": ("peer", "evs"), "ev_query": ("peer", "evs", "reason")}.get(self.kind)
        if need is None:
            raise ValueError(f"event kind must be one of {', '.join(EVENT_KINDS)}, got {self.kind!r}")
        missing = [n for n in need if getattr(self, n) is None]
        if missing:
            raise ValueError(f"{self.kind} event without {', '.join(missing)}")


@dataclass(frozen=True)
class Done(_Message):
    TYPE: ClassVar[str] = "done"
    rank: int
    summary: dict


@dataclass(frozen=True)
class Failed(_Message):
    TYPE: ClassVar[str] = "failed"
    rank: int
    reason: str


@dataclass(frozen=True)
class Stop(_Message):
    TYPE: ClassVar[str] = "stop"


@dataclass(frozen=True)
class Hello(_Message):
    """The controller's first message: which role the connection has."""

    TYPE: ClassVar[str] = "hello"
    role: str

    def __post_init__(self):
        if self.role != "controller":
            raise ValueError(f"role must be 'controller', got {self.role!r}")


@dataclass(frozen=True)
class Command(_Message):
    """A controller command for agent ``rank``'s connection to ``peer`` (a host name): ``op`` one
    of :data:`COMMAND_OPS` on EV ``ev_id`` (replace: by ``new_ev_id``); ``reason`` for the journal."""

    TYPE: ClassVar[str] = "command"
    rank: int
    peer: str
    op: str
    ev_id: int
    reason: str
    new_ev_id: int | None = None

    def __post_init__(self):
        if self.op not in COMMAND_OPS:
            raise ValueError(f"op must be one of {', '.join(COMMAND_OPS)}, got {self.op!r}")
        if (self.op == "replace") != (self.new_ev_id is not None):
            raise ValueError("new_ev_id goes with op replace, and only with it")


@dataclass(frozen=True)
class Query(_Message):
    """A restarted controller asks agent ``rank`` for the EV profile of its connection to ``peer``:
    QUERY_EV_ARRAY, then QUERY_EV_STATE of each EV (``mrc_ctl.h`` ``enum mrc_ctl_ev_op``); the
    answer is an ``ev_query`` :class:`Event`."""

    TYPE: ClassVar[str] = "query"
    rank: int
    peer: str


@dataclass(frozen=True)
class Synced(_Message):
    """A restarted controller's model is resynchronised from the agents' answers: of
    ``connections``, ``answered`` answered (the rest stay unmanaged); across those, EVs found
    ``replaced`` (not the job spec's), ``denied`` and ``assumed_bad``."""

    TYPE: ClassVar[str] = "synced"
    connections: int
    answered: int
    replaced: int
    denied: int
    assumed_bad: int


@dataclass(frozen=True)
class Operator(_Message):
    """A timeline action for the controller: ``op`` (deny, allow, replace) every EV crossing
    ``link``; ``index``: the timeline event's."""

    TYPE: ClassVar[str] = "operator"
    op: str
    link: str
    index: int

    def __post_init__(self):
        if self.op not in COMMAND_OPS:
            raise ValueError(f"op must be one of {', '.join(COMMAND_OPS)}, got {self.op!r}")


Message = Union[Ready, Start, Iteration, Sample, Event, Done, Failed, Stop, Hello, Command, Query, Synced, Operator]
AGENT_MESSAGES = (Ready, Iteration, Sample, Event, Done, Failed)
"""What an agent sends."""
CONTROLLER_MESSAGES = (Hello, Command, Query, Synced)
"""What the controller sends."""
RUNNER_INBOUND = AGENT_MESSAGES + CONTROLLER_MESSAGES
"""What the runner's framer accepts: the agents' and the controller's messages."""
RUNNER_MESSAGES = (Start, Stop, Command, Query)
"""What the runner sends an agent (an agent's framer accepts these)."""
TO_CONTROLLER = (Event, Operator, Stop)
"""What the runner sends the controller (the controller's framer accepts these)."""
MESSAGES = AGENT_MESSAGES + CONTROLLER_MESSAGES + (Start, Stop, Operator)

_FIELDS = {cls: tuple((f.name, f.default is None) for f in dataclasses.fields(cls))
           for cls in (*MESSAGES, LoopStats)}
"""Per class, its fields in order as (name, optional)."""
_KINDS = {cls: {f.name: str(f.type).removesuffix(" | None") for f in dataclasses.fields(cls)}
          for cls in _FIELDS}
"""Per class, field name -> its annotation without `` | None`` (a key of _CHECKS, or LoopStats)."""
_BY_TYPE = {cls.TYPE: cls for cls in MESSAGES}


# -- decoding ----------------------------------------------------------------------
def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


_CHECKS = {  # annotation (as written above) -> (check, what the field must be)
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "float": (_number, "a finite number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "dict": (lambda v: isinstance(v, dict), "an object"),
    "list": (lambda v: isinstance(v, list), "an array"),
}


def _decode_fields(cls: type, obj: dict, where: str) -> dict:
    kinds = _KINDS[cls]
    unknown = sorted(set(obj) - set(kinds))
    if unknown:
        raise ControlProtocolError(f"{where}: unknown field {unknown[0]!r}")
    out = {}
    for name, optional in _FIELDS[cls]:
        if name not in obj:
            if optional:
                continue
            raise ControlProtocolError(f"{where}: missing field {name!r}")
        value = obj[name]
        kind = kinds[name]
        if value is None and optional:
            out[name] = None
        elif kind == "LoopStats":
            if not isinstance(value, dict):
                raise ControlProtocolError(f"{where}: {name} must be an object")
            out[name] = LoopStats(**_decode_fields(LoopStats, value, f"{where}.{name}"))
        else:
            check, what = _CHECKS[kind]
            if not check(value):
                raise ControlProtocolError(f"{where}: {name} must be {what}, got {value!r:.40}")
            out[name] = value
    return out


def decode(obj: Any, accepts: Iterable[type] = MESSAGES) -> Message:
    """A parsed JSON value -> the message it is; ControlProtocolError if it is none of ``accepts``."""
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise ControlProtocolError(f"control message without a type: {str(obj)[:80]!r}")
    cls = _BY_TYPE.get(obj["type"])
    if cls is None:
        raise ControlProtocolError(f"unknown control message type {obj['type'][:40]!r}")
    if cls not in accepts:
        raise ControlProtocolError(f"{cls.TYPE!r} goes the other way (not a message this end receives)")
    fields = _decode_fields(cls, {k: v for k, v in obj.items() if k != "type"}, cls.TYPE)
    try:
        return cls(**fields)
    except ValueError as exc:
        raise ControlProtocolError(f"{cls.TYPE}: {exc}") from None


def sample_record(msg: Sample) -> dict:
    """A sample as its record in a samples file (and ``samples.jsonl``): ``{"t", "rank",
    "flows", "loop"}`` (``loop`` left out when None)."""
    rec = {"t": msg.t, "rank": msg.rank, "flows": msg.flows}
    if msg.loop is not None:
        rec["loop"] = msg.loop.as_dict()
    return rec


def sample_from_record(obj: Any) -> Sample:
    """A samples-file record (parsed JSON) -> the Sample it is; ControlProtocolError if it is not one
    (validated field by field as on the control socket)."""
    if not isinstance(obj, dict) or "type" in obj:
        raise ControlProtocolError(f"not a sample record: {str(obj)[:80]!r}")
    msg = decode({"type": Sample.TYPE, **obj}, (Sample,))
    assert isinstance(msg, Sample)
    return msg


def encode(msg: Message) -> bytes:
    """One message as its line on the wire (compact JSON, newline-terminated)."""
    return dumps({"type": msg.TYPE, **msg.as_dict()}) + b"\n"


def dumps(obj: Any) -> bytes:
    """Compact JSON of ``obj`` (orjson: ~10x faster than ``json.dumps`` on an agent's sample,
    which 128 agents write 50 times a second each); non-string keys become strings as with
    ``json``."""
    return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)


# -- framing -----------------------------------------------------------------------
class LineFramer:
    """Newline-delimited JSON messages from a byte stream, and back.

    ``accepts``: the message classes this end may receive (:data:`AGENT_MESSAGES` at the
    runner, :data:`RUNNER_MESSAGES` at an agent). After a :class:`ControlProtocolError` the
    stream cannot be trusted: every later :meth:`feed` raises too.
    """

    def __init__(self, accepts: Iterable[type] = MESSAGES, *, max_line_bytes: int = MAX_LINE_BYTES):
        self.accepts = frozenset(accepts)
        self.max_line_bytes = max_line_bytes
        self._buf = bytearray()
        self._error: str | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes of an incomplete line held back."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Message]:
        """The messages completed by ``data``, in order; ControlProtocolError on bad input."""
        if self._error is not None:
            raise ControlProtocolError(f"stream unusable after an earlier error ({self._error})")
        buf = self._buf
        buf += data
        if b"\n" not in data:
            self._check_partial()
            return []
        *lines, rest = bytes(buf).split(b"\n")
        self._buf = bytearray(rest)
        out: list[Message] = []
        for line in lines:
            if len(line) > self.max_line_bytes:
                self._fail(f"control message longer than {self.max_line_bytes} bytes", out)
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError) as exc:   # JSONDecodeError, UnicodeDecodeError, ...
                self._fail(f"bad control message {line[:80]!r}: {type(exc).__name__}: {exc}", out)
            try:
                out.append(decode(obj, self.accepts))
            except ControlProtocolError as exc:
                self._fail(str(exc), out)
        self._check_partial(out)
        return out

    def _check_partial(self, out: list | None = None) -> None:
        if len(self._buf) > self.max_line_bytes:
            self._fail(f"control message longer than {self.max_line_bytes} bytes", out or [])

    def _fail(self, reason: str, out: list) -> None:
        self._error = reason
        self._buf = bytearray()
        raise ControlProtocolError(reason, out)

    @staticmethod
    def encode(msg: Message) -> bytes:
        """See :func:`encode`."""
        return encode(msg)
