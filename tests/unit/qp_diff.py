"""Whole-QP differential harness: two engines, one scenario, compared after every step.

A *scenario* (:class:`Scenario`) is a pair of QPs (``a``, QPN 1, and ``b``, QPN 2) joined by a
seeded :class:`agents.mrc.sim.MultipathNetwork`, a workload (``post_write`` with and without
immediates, ``post_recv`` on the peer) and controller calls (``set_ev_state``, ``replace_ev``,
``modify_qp(ERR)``) at fixed fake times. :func:`run_lockstep` builds two *copies* of it, the
reference (default python for both QPs) and one engine assignment under test (``("native",
"python")``: ``a`` native, ``b`` Python), and drives them step by step on their fake clocks. After
every step (a network step: deliveries, due timers, drain; or a scheduled call and the drain
after it) each QP of one copy must match its twin in the other:

* the datagrams it emitted in that step, in order: bytes and EV;
* every event ``next_event()`` returned (WorkCompletion, EVEvent, QPError: class name and
  every field; enums by class and member name; QPError reasons as strings);
* ``get_timer()``, ``state``, ``attr``, ``idle``, ``rto_s``, ``srtt_s``, ``bad_packets``,
  ``probe_timeout_s`` and the whole ``stats()`` dict (key order included, as its JSON);
* the outcome of the scheduled call (None, or the exception's class name and message);
* its registered memory region, byte for byte.

Floats compare bit for bit and by type: ``1`` is not ``1.0`` and ``-0.0`` is not ``0.0`` (the
stats go into run directories as JSON). The first difference raises :class:`Mismatch`, whose
message names the step, the fake time, the QP and its engine, what differed (a short diff, data
packets decoded) and the scenario, so that a failing hypothesis example reads on its own.

Engines are factories in :data:`ENGINES` (``"python"``: :class:`agents.mrc.qp.QP`;
``"native"``: ``agents.mrc._core.QP``, the same constructor). :func:`make_qp` skips the test
while the native module has no ``QP``, unless ``MRC_NATIVE_QP_REQUIRE=1`` (then it fails).
"""
from __future__ import annotations

import collections
import dataclasses
import enum
import json
import math
import os
import random
import struct
import traceback
from dataclasses import dataclass, field
from typing import Callable

import pytest
from hypothesis import strategies as st

from agents.mrc import native
from agents.mrc import packet as pk
from agents.mrc.dcqcn import scaled_cnp_interval_s
from agents.mrc.ev import EVState
from agents.mrc.qp import QP as PythonQP, connect_pair
from agents.mrc.rto import mrc_timeout_s
from agents.mrc.sim import MultipathNetwork, PathSpec
from agents.mrc.types import MAX_ACK_DELAY_RTO_FRACTION, QPAttr, QPConfig, QPState, Transport

QP_REQUIRE_ENV = "MRC_NATIVE_QP_REQUIRE"
"""Set to 1 once ``agents.mrc._core.QP`` exists: a build without it then fails the tests instead
of skipping them (``MRC_NATIVE_REQUIRE`` alone only requires the module)."""

QPN_A, QPN_B = 1, 2
HISTORY_STEPS = 5
"""Steps before a mismatch that its report summarises."""
SIDES = ("a", "b")


# ---- engines -------------------------------------------------------------------------------
def _python_qp(qpn: int, *, seed: int, memory, config: QPConfig):
    return PythonQP(qpn, rng=random.Random(seed), memory=memory, config=config)


def native_qp_class():
    """``agents.mrc._core.QP``; pytest.skip while the module (or its QP) is missing, pytest.fail
    instead when ``MRC_NATIVE_QP_REQUIRE=1``. ``MRC_NATIVE_REQUIRE=1`` alone still makes a
    missing module raise (:func:`agents.mrc.native.load`)."""
    core = native.load()
    cls = getattr(core, "QP", None) if core is not None else None
    if cls is None:
        why = ("agents.mrc._core is not built" if core is None
               else "agents.mrc._core has no QP yet (the native QP is being ported)")
        if qp_required():
            pytest.fail(f"{QP_REQUIRE_ENV}=1 but {why}")
        pytest.skip(why)
    return cls


def qp_required() -> bool:
    return os.environ.get(QP_REQUIRE_ENV, "").strip().lower() in ("1", "true", "yes")


def _native_qp(qpn: int, *, seed: int, memory, config: QPConfig):
    return native_qp_class()(qpn, rng=random.Random(seed), memory=memory, config=config)


ENGINES: dict[str, Callable] = {"python": _python_qp, "native": _native_qp}
"""Engine name -> factory ``(qpn, *, seed, memory, config) -> QP``. Both engines get the same
``rng=random.Random(seed)`` (the QP seeds its PCG32 from it: ``Pcg32.from_random``)."""

QP_API = ("modify_qp", "post_write", "post_recv", "receive_datagram", "receive_datagrams",
          "handle_timer", "get_timer", "datagrams_to_send", "next_event", "set_ev_state",
          "replace_ev", "stats", "qpn", "state", "attr", "idle", "rto_s", "srtt_s",
          "bad_packets", "probe_timeout_s")
"""What the harness (with :func:`agents.mrc.qp.connect_pair` and :mod:`agents.mrc.sim`) calls or
reads on a QP of any engine: the constructor ``QP(qpn, *, rng, memory, config)`` and these."""

ENGINE_PAIRS = [("python", "python"), ("native", "native"), ("python", "native"),
                ("native", "python")]
"""(engine of ``a``, engine of ``b``) assignments a test runs against the all-Python reference."""


def make_qp(engine: str, qpn: int, *, seed: int, memory, config: QPConfig):
    """A QP of ``engine`` (a key of :data:`ENGINES`): ``qpn``, ``rng=random.Random(seed)``,
    ``memory`` (a writable buffer or None) and ``config``."""
    try:
        factory = ENGINES[engine]
    except KeyError:
        raise ValueError(f"unknown engine {engine!r} (known: {sorted(ENGINES)})") from None
    return factory(qpn, seed=seed, memory=memory, config=config)


# ---- scenarios -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Op:
    """A call at fake time ``t`` (s) on QP ``side`` ("a" or "b"). ``kind`` and ``args``:
    ``post_write`` (wr_id, size, remote_offset, imm or None, payload seed), ``post_recv``
    (wr_id,), ``set_ev_state`` (ev, "GOOD"|"DENIED"), ``replace_ev`` (cur, new), ``error`` ()
    (``modify_qp(QPState.ERR)``, the application moving its QP to ERR)."""

    t: float
    side: str
    kind: str
    args: tuple = ()

    def describe(self) -> str:
        if self.kind == "post_write":
            wr, size, off, imm, _ = self.args
            return f"{self.side}.post_write(wr_id={wr}, {size} B at {off}, imm={imm})"
        return f"{self.side}.{self.kind}{self.args!r}"


@dataclass(frozen=True)
class Scenario:
    """Everything one run depends on; ``config`` is :class:`QPConfig`'s keywords (both QPs),
    ``evs`` the QPs' EVs and ``spare_evs`` further routed EVs (``replace_ev`` targets); path i
    carries EV ``(evs + spare_evs)[i]``. ``until``: fake-time bound (s); ``max_steps``: step bound."""

    config: dict
    attr: QPAttr
    evs: tuple[int, ...]
    spare_evs: tuple[int, ...]
    ev_min_active: int
    paths: tuple[PathSpec, ...]
    reverse_paths: tuple[PathSpec, ...] | None
    mem_a: int
    mem_b: int
    ops: tuple[Op, ...]
    seed_a: int = 1
    seed_b: int = 2
    net_seed: int = 0
    batch: bool = False
    until: float = 1.0
    max_steps: int = 4000
    first_psns: tuple[int, int] = (0, 0)
    """The first PSN ``a`` sends and the first ``b`` sends (``sq_psn``, the peer's ``rq_psn``)."""

    def qp_config(self) -> QPConfig:
        cfg = dict(self.config)
        cfg["transport"] = Transport(cfg["transport"])
        cfg["cc_params"] = dict(cfg.get("cc_params", {}))
        return QPConfig(**cfg)

    def describe(self) -> str:
        """Multi-line summary for a mismatch report (the full repr follows it)."""
        lines = [f"  config: {self.config}", f"  attr: {self.attr}",
                 f"  evs={self.evs} spare_evs={self.spare_evs} ev_min_active={self.ev_min_active} "
                 f"seeds a={self.seed_a} b={self.seed_b} net={self.net_seed} batch={self.batch} "
                 f"until={self.until} max_steps={self.max_steps} mem a={self.mem_a} b={self.mem_b} "
                 f"first_psns={self.first_psns}"]
        lines += [f"  path {i} (EV {ev}): {_compact(p)}" for i, (ev, p) in
                  enumerate(zip(self.evs + self.spare_evs, self.paths))]
        if self.reverse_paths is not None:
            lines += [f"  reverse path {i}: {_compact(p)}" for i, p in enumerate(self.reverse_paths)]
        lines += [f"  t={op.t!r}: {op.describe()}" for op in self.ops]
        return "\n".join(lines)


def _compact(spec) -> str:
    """A dataclass as ``Name(field=value, ...)`` with only the fields off their defaults."""
    changed = [f"{f.name}={getattr(spec, f.name)!r}" for f in dataclasses.fields(spec)
               if getattr(spec, f.name) != f.default]
    return f"{type(spec).__name__}({', '.join(changed)})"


# ---- observation and comparison ----------------------------------------------------------------
EVENT_FIELDS = {
    "WorkCompletion": ("time", "qpn", "opcode", "status", "wr_id", "byte_len", "imm", "psn"),
    "EVEvent": ("time", "qpn", "ev", "old", "new", "cause", "drop_count"),
    "QPError": ("time", "qpn", "reason"),
}
ATTR_FIELDS = tuple(f.name for f in dataclasses.fields(QPAttr))
EV_RECORD_FIELDS = ("ev", "state", "skip_until", "probe_ok", "probe_due", "probe_outstanding",
                    "packets_sent", "bytes_sent", "packets_acked", "packets_lost", "retransmits",
                    "acked_seq", "last_ack_s", "rtt_last_s", "rtt_min_s", "rtt_srtt_s", "rtt_samples",
                    "probes_sent", "probes_ok_total", "delivered_ts_ns", "delivered_at_s", "loss_run", "loss_run_ts_ns", "loss_run_timeout",
                    "losses_excused", "losses_chargeable", "always_skip", "skips", "drops_reported", "penalty")
"""The fields of an EV record (agents.mrc.ev.EVInfo) that the engines must agree on."""
QP_VALUES = ("state", "timer", "idle", "rto_s", "srtt_s", "bad_packets", "probe_timeout_s",
             "attr", "evs", "reuse")
"""The per-step scalar observations besides datagrams, events, the call's outcome and stats."""


def plain(value):
    """``value`` as JSON-able data that keeps what the engines must agree on: enums become
    ``"Class.NAME"``, events ``[class, {field: value}]``, dataclass-like objects their fields."""
    name = type(value).__name__
    if isinstance(value, enum.Enum):      # before int: EVState is an IntEnum
        return f"{name}.{value.name}"
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if name in EVENT_FIELDS:
        return [name, {f: plain(getattr(value, f, "<missing>")) for f in EVENT_FIELDS[name]}]
    if name == "QPAttr":
        return {f: plain(getattr(value, f, "<missing>")) for f in ATTR_FIELDS}
    return f"<{name} {value!r}>"


def _key(value) -> str:
    """Canonical text of ``plain`` data: key order kept, ints and floats told apart, floats
    round-tripped exactly (repr), -0.0 kept, NaN/inf spelled out."""
    return json.dumps(value, allow_nan=True, default=lambda o: f"<{type(o).__name__} {o!r}>")


def observe(qp) -> dict:
    """One QP's state after a step (its datagrams, events and call outcome are added by the
    runner)."""
    return {
        "state": plain(qp.state), "timer": qp.get_timer(), "idle": qp.idle, "rto_s": qp.rto_s,
        "srtt_s": qp.srtt_s, "bad_packets": qp.bad_packets, "probe_timeout_s": qp.probe_timeout_s,
        "attr": plain(qp.attr), "stats": qp.stats(),
        # every EV record, in the set's order: fields stats() does not show (per-EV smoothed
        # RTT, loss runs, probe bookkeeping) decide later losses and retirements
        "evs": None if qp.evs is None else [
            {f: plain(getattr(info, f)) for f in EV_RECORD_FIELDS} for info in qp.evs.info.values()],
        # the REPS variant's queue of good ACKs' EVs (ev_select "reps"), and its reuses
        "reuse": None if qp.evs is None else [list(qp.evs.reuse), qp.evs.reused],
    }


def _same(x, y) -> bool:
    """Equal as the engines must be (module docstring): the same canonical text (types, key
    order, exact floats) and ``==`` (tuple vs list, int vs str keys), or, where ``==`` fails,
    :func:`_eq` (NaN)."""
    return _key(x) == _key(y) and (x == y or _eq(x, y))


def _eq(x, y) -> bool:
    """Strict structural equality: same types, floats bit for bit (NaN equals NaN)."""
    if type(x) is not type(y):
        return False
    if isinstance(x, float):
        return struct.pack("<d", x) == struct.pack("<d", y) or math.isnan(x) and math.isnan(y)
    if isinstance(x, dict):
        return list(x) == list(y) and all(_eq(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return len(x) == len(y) and all(_eq(a, b) for a, b in zip(x, y))
    return x == y


def _walk_diff(ref, test, path: str, out: list[str], limit: int) -> None:
    """Append ``path: ref=... test=...`` lines for the leaves where ``ref`` and ``test`` differ."""
    if len(out) >= limit:
        return
    if isinstance(ref, dict) and isinstance(test, dict):
        if list(ref) != list(test):
            missing, extra = [k for k in ref if k not in test], [k for k in test if k not in ref]
            if missing or extra:
                out.append(f"{path}: keys missing {missing}, extra {extra}")
            else:
                out.append(f"{path}: key order {list(ref)} vs {list(test)}")
        for k in ref:
            if k in test:
                _walk_diff(ref[k], test[k], f"{path}.{k}" if path else str(k), out, limit)
        return
    if isinstance(ref, (list, tuple)) and isinstance(test, (list, tuple)) and \
            type(ref) is type(test):
        if len(ref) != len(test):
            out.append(f"{path}: {len(ref)} items vs {len(test)}: ref={_short(ref)} "
                       f"test={_short(test)}")
            return
        for i, (r, t) in enumerate(zip(ref, test)):
            _walk_diff(r, t, f"{path}[{i}]", out, limit)
        return
    if not _same(ref, test):
        out.append(f"{path}: ref={ref!r} ({type(ref).__name__}) test={test!r} "
                   f"({type(test).__name__})")


def _short(value, n: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= n else text[:n] + "..."


def describe_datagram(data: bytes) -> str:
    """A datagram as a short decoded line (the packet's fields, data payload summarised)."""
    try:
        pkt = pk.parse(bytes(data))
    except pk.ProtocolError as exc:
        return f"<{len(data)} B unparsable: {exc}> {bytes(data[:48]).hex()}"
    if isinstance(pkt, pk.DataPacket):
        pkt = dataclasses.replace(pkt, payload=f"<{len(pkt.payload)} B>")
    return f"{len(data)} B {pkt}"


def diff_datagrams(ref: list, test: list) -> list[str]:
    """Lines saying where two emitted-datagram lists first differ."""
    lines = []
    for i, (r, t) in enumerate(zip(ref, test)):
        if bytes(r[0]) != bytes(t[0]) or type(t[1]) is not int or r[1] != t[1]:
            at = next((j for j, (x, y) in enumerate(zip(bytes(r[0]), bytes(t[0]))) if x != y),
                      min(len(r[0]), len(t[0])))
            lines.append(f"datagram {i} of {len(ref)}: first differing byte {at}")
            lines.append(f"  ref  EV {r[1]!r}: {describe_datagram(r[0])}")
            lines.append(f"  test EV {t[1]!r}: {describe_datagram(t[0])}")
            return lines
    lines.append(f"{len(ref)} datagrams vs {len(test)}")
    for name, extra in (("ref", ref[len(test):]), ("test", test[len(ref):])):
        lines += [f"  {name} only, EV {ev!r}: {describe_datagram(d)}" for d, ev in extra[:4]]
    return lines


class Mismatch(AssertionError):
    """The engines differed: ``step`` (0: bring-up), ``time`` (fake s), ``side`` ("a"/"b"; None
    for an exception only the pair under test raised),
    ``what`` (the observation: datagrams, events, stats, memory, ...), ``lines`` (the diff)."""

    def __init__(self, *, step: int, time: float, side: str | None, what: str, lines: list[str],
                 action: str, engines: tuple, ref_engines: tuple, scenario: Scenario,
                 history: list[str] = ()):
        self.step, self.time, self.side, self.what, self.lines = step, time, side, what, lines
        self.engines, self.scenario = engines, scenario
        if side is None:   # the pair as a whole (its clock, or an exception: see its traceback)
            who = f"the pair (a: {engines[0]}, b: {engines[1]})"
        else:
            i = SIDES.index(side)
            who = (f"QP {side} (qpn {QPN_A if side == 'a' else QPN_B}, {engines[i]} vs "
                   f"reference {ref_engines[i]})")
        head = f"engines differ at step {step}, t={time!r} s ({action}): {who}, {what}"
        body = "\n".join("  " + line for line in lines[:24])
        before = "\n".join("  " + line for line in history)
        super().__init__(f"{head}\n{body}\nthe steps before (both engines agreed):\n{before}\n"
                         f"scenario (a: {engines[0]}, b: {engines[1]}):\n"
                         f"{scenario.describe()}\n{scenario!r}")


# ---- the lockstep runner -------------------------------------------------------------------
class _Copy:
    """One copy of a scenario: its two QPs (``engines``), memories and network."""

    def __init__(self, sc: Scenario, engines: tuple[str, str]):
        self.engines = engines
        self.memory = [bytearray(sc.mem_a), bytearray(sc.mem_b)]
        self.qps = [make_qp(engines[0], QPN_A, seed=sc.seed_a, memory=self.memory[0],
                            config=sc.qp_config()),
                    make_qp(engines[1], QPN_B, seed=sc.seed_b, memory=self.memory[1],
                            config=sc.qp_config())]
        self.sent: list[list] = [[], []]
        self.outcome: list = [None, None]
        connect_pair(self.qps[0], self.qps[1], sc.evs, attr=sc.attr,
                     ev_min_active=sc.ev_min_active,
                     first_psns=None if sc.first_psns == (0, 0) else sc.first_psns)
        self.net = MultipathNetwork(self.qps[0], self.qps[1], sc.paths,
                                    ev_ids=list(sc.evs + sc.spare_evs), seed=sc.net_seed,
                                    reverse_paths=sc.reverse_paths, batch=sc.batch,
                                    tap=self._tap)

    def _tap(self, direction: int, data, ev) -> None:
        self.sent[direction].append((bytes(data), ev))

    def call(self, op: Op) -> None:
        """The scheduled call ``op``, with the clock moved to its time, then the drain."""
        self.net.now = max(self.net.now, op.t)
        self.apply(op, self.net.now)
        self.net.drain()

    def apply(self, op: Op, now: float) -> None:
        """Make the call ``op`` at ``now``; its outcome (None or the exception) is recorded."""
        i = SIDES.index(op.side)
        qp = self.qps[i]
        try:
            if op.kind == "post_write":
                wr_id, size, off, imm, seed = op.args
                qp.post_write(wr_id=wr_id, local=random.Random(seed).randbytes(size),
                              remote_offset=off, imm=imm)
            elif op.kind == "post_recv":
                qp.post_recv(op.args[0])
            elif op.kind == "set_ev_state":
                qp.set_ev_state(op.args[0], EVState[op.args[1]], now)
            elif op.kind == "replace_ev":
                qp.replace_ev(op.args[0], op.args[1], now)
            elif op.kind == "error":
                qp.modify_qp(QPState.ERR, now)
            else:
                raise ValueError(f"unknown op {op.kind!r}")
            self.outcome[i] = None
        except (RuntimeError, ValueError, KeyError, TypeError) as exc:
            self.outcome[i] = f"{type(exc).__name__}: {exc}"

    def take(self, i: int) -> dict:
        """QP ``i``'s observations of the step just run (and reset the per-step ones)."""
        qp = self.qps[i]
        events = []
        while (e := qp.next_event()) is not None:
            events.append(plain(e))
        obs = observe(qp)
        obs["events"] = events
        obs["outcome"] = self.outcome[i]
        obs["datagrams"] = self.sent[i]
        self.sent[i], self.outcome[i] = [], None
        return obs


@dataclass
class RunResult:
    """What a lockstep run went through (both copies agreed on all of it)."""

    steps: int
    time: float
    ops_done: int
    datagrams: int
    final: list = field(default_factory=list)   # the last observation of a and b (reference)
    memory: list = field(default_factory=list)  # the reference's memories at the end
    events: list = field(default_factory=list)  # every event of a and b (plain), reference
    net: dict = field(default_factory=dict)     # the reference network's per-link counters


def run_lockstep(sc: Scenario, engines: tuple[str, str],
                 ref_engines: tuple[str, str] = ("python", "python")) -> RunResult:
    """Run ``sc`` with ``ref_engines`` and with ``engines`` side by side; raise :class:`Mismatch`
    at the first step where any observation of either QP differs. Stops when nothing is
    pending and every call is made, at ``sc.until`` or after ``sc.max_steps`` steps."""
    ref, test = _Copy(sc, ref_engines), _Copy(sc, engines)
    ops = sorted(sc.ops, key=lambda op: op.t)   # stable: calls at one time keep their order
    step, k, sent = 0, 0, 0
    last: list = [None, None]
    events: list = []
    summary = ["", ""]
    history: collections.deque = collections.deque(maxlen=HISTORY_STEPS)

    def mismatch(side, what: str, lines: list[str], action: str) -> Mismatch:
        return Mismatch(step=step, time=ref.net.now, side=side, what=what, lines=lines,
                        action=action, engines=engines, ref_engines=ref_engines, scenario=sc,
                        history=list(history))

    def compare(action: str) -> None:
        nonlocal sent
        if ref.net.now != test.net.now:
            raise mismatch(None, "the fake clock", [f"ref t={ref.net.now!r} "
                                                    f"test t={test.net.now!r}"], action)
        for i, side in enumerate(SIDES):
            r, t = ref.take(i), test.take(i)
            sent += len(r["datagrams"])
            problem = _first_difference(r, t, ref.memory[i], test.memory[i])
            if problem is not None:
                raise mismatch(side, *problem, action)
            last[i] = r
            events.extend(r["events"])
            summary[i] = _summary(r)
        history.append(f"step {step}, t={ref.net.now!r}: {action}; a: {summary[0]}; "
                       f"b: {summary[1]}")

    def both(action: str, fn) -> None:
        """``fn(copy)`` on each copy; an exception only the pair under test raises is a
        mismatch (one the reference raises is a bug of the spec or the harness: re-raised)."""
        fn(ref)
        try:
            fn(test)
        except Exception as exc:
            tb = traceback.format_exception(exc)
            raise mismatch(None, "an exception the reference did not raise",
                           [line.rstrip() for part in tb[-6:] for line in part.splitlines()],
                           action) from exc

    compare("bring-up (RST -> RTS)")
    both("the first drain", lambda c: c.net.drain())
    while step < sc.max_steps:
        step += 1
        nxt, nxt_test = ref.net.next_time(), test.net.next_time()
        if k < len(ops) and (nxt is None or ops[k].t <= nxt) and ops[k].t <= sc.until:
            op = ops[k]
            k += 1
            both(f"call {op.describe()}", lambda c: c.call(op))
            compare(f"call {op.describe()}")
            continue
        if nxt != nxt_test:   # get_timer() was compared: a backstop for the network's own times
            raise mismatch(None, "the next step's time", [f"ref next={nxt!r} test "
                                                          f"next={nxt_test!r}"], "choosing a step")
        if nxt is None or nxt > sc.until:
            break
        both("network step (deliveries, due timers, drain)", lambda c: c.net.step())
        compare("network step (deliveries, due timers, drain)")
    return RunResult(steps=step, time=ref.net.now, ops_done=k, datagrams=sent, final=last,
                     memory=[bytes(m) for m in ref.memory], events=events,
                     net=ref.net.counters())


def _summary(obs: dict) -> str:
    """A step's observation of one QP in a few words (the report's history)."""
    kinds: dict[str, int] = {}
    for data, _ in obs["datagrams"]:
        name = pk.PacketType(data[1]).name if data[1] in pk.PacketType._value2member_map_ else "?"
        kinds[name] = kinds.get(name, 0) + 1
    sent = ",".join(f"{n} {k}" for k, n in kinds.items()) or "nothing"
    ev = f", {len(obs['events'])} events" if obs["events"] else ""
    return f"sent {sent}{ev}, timer {obs['timer']!r}"


def _first_difference(r: dict, t: dict, mem_r, mem_t) -> tuple[str, list[str]] | None:
    """(what, diff lines) of the first observation where ``t`` differs from ``r``, or None."""
    if r["datagrams"] != t["datagrams"] or \
            any(type(ev) is not int for _, ev in t["datagrams"]):
        return "emitted datagrams", diff_datagrams(r["datagrams"], t["datagrams"])
    for what in ("outcome", "events", *QP_VALUES, "stats"):
        if not _same(r[what], t[what]):
            lines: list[str] = []
            _walk_diff(r[what], t[what], "", lines, 12)
            return what, lines or [f"ref={_short(r[what])}", f"test={_short(t[what])}"]
    if mem_r != mem_t:
        at = next(j for j, (x, y) in enumerate(zip(mem_r, mem_t)) if x != y) \
            if len(mem_r) == len(mem_t) else 0
        return "memory", [f"first differing byte at offset {at} of {len(mem_r)}: "
                          f"ref {bytes(mem_r[at:at + 16]).hex()} test "
                          f"{bytes(mem_t[at:at + 16]).hex()}"]
    return None


# ---- hypothesis strategies ------------------------------------------------------------------
NSCC, FIXED, DCQCN = "uet-1.0-nscc", "fixed", "dcqcn"
PAYLOADS = (256, 512, 1024, 1408, 4096, 8192)
"""Payload bytes per data packet, as the testbed's MTUs give them (256: RoCEv2's least path MTU;
1408: a 1500-byte MTU; 4096: the largest RoCEv2 path MTU; 8192: jumbo)."""
SACK_BYTES, ETHERNET_HEADER_BYTES = 120, 14   # testbed.spec.jobs' figures (a SACK, an Ethernet header)


def _testbed_config(draw, transport: str, cc: str, payload: int, rate: float, delay: float,
                    n_paths: int, ecn: bool) -> tuple[dict, QPAttr]:
    """The ``qp`` keys :func:`testbed.spec.jobs.build_job_specs` gives a job on this fabric
    (timeout from the base RTT, ``min_rto_s`` 0, ``initial_rto_s`` 1 s, the coalescing hold,
    NSCC's rate and base RTT, DCQCN's CNP interval and pacing overhead, ECN-capable NSCC)."""
    from testbed.spec.jobs import QP_DEFAULTS, ack_coalesce_s, dcqcn_qp, qp_timeout
    mtu = pk.mtu_for_payload(payload)
    line = rate * (n_paths if transport == "mrc" else 1)
    base_rtt = round(2 * delay + ((mtu + ETHERNET_HEADER_BYTES) * 8 + SACK_BYTES * 8) / rate, 6)
    timeout = qp_timeout(base_rtt)
    floor = mrc_timeout_s(timeout)
    hold = ack_coalesce_s(mtu + ETHERNET_HEADER_BYTES, line, floor)
    qp = {"cc": cc if cc != DCQCN else NSCC, "initial_rto_s": QP_DEFAULTS["initial_rto_s"],
          "min_rto_s": 0.0, "ack_coalesce_s": hold,
          "cc_params": {"rate_bps": line, "base_rtt_s": base_rtt}}
    if cc == DCQCN:
        qp.update(dcqcn_qp(line, base_rtt, mtu))
    if ecn and cc == NSCC:
        qp["cc_params"] = {"ecn_capable": True, **qp["cc_params"]}
    if cc == FIXED:
        qp["cc_params"] = {}
    qp.update(transport=transport, payload_bytes=payload)
    attr = QPAttr(timeout=timeout, retry_linear_cnt=QP_DEFAULTS["retry_linear"],
                  retry_exp_cnt=QP_DEFAULTS["retry_exp"],
                  mpr=draw(st.sampled_from([8, 16])), mpr_dest=16)
    return qp, attr


def _sim_config(draw, transport: str, cc: str, payload: int, rate: float, delay: float,
                n_paths: int, ecn: bool) -> tuple[dict, QPAttr]:
    """A simulator-test configuration (as tests/unit/test_mrc_qp.py's): short RTOs, small
    retry budgets and windows, random SACK coalescing and loss-inference knobs."""
    base_rtt = 2 * delay + (payload + 100) * 8 / rate
    time_scale = draw(st.sampled_from([1.0, 1.5, 4.0]))
    timeout = draw(st.integers(8, 14))
    min_rto_s = draw(st.sampled_from([0.0, 0.002]))
    floor = mrc_timeout_s(timeout, time_scale, min_rto_s)
    hold = MAX_ACK_DELAY_RTO_FRACTION * min(floor, min_rto_s or floor)
    qp = {"transport": transport, "payload_bytes": payload, "cc": cc, "min_rto_s": min_rto_s,
          "time_scale": time_scale, "sack_every": draw(st.integers(1, 8)),
          "ack_delay_s": draw(st.sampled_from([0.0, 0.5, 1.0])) * hold,
          "ack_coalesce_s": draw(st.sampled_from([0.0, 0.0, 0.3])) * hold,
          "reorder_threshold": draw(st.integers(1, 4)), "ooo_threshold": draw(st.integers(1, 6)),
          "ev_loss_run": draw(st.integers(1, 3)),
          "probe_interval_s": 5 * base_rtt, "probe_timeout_s": 3 * base_rtt,
          "probe_successes": draw(st.integers(1, 3)),
          "skip_timeout_s": draw(st.sampled_from([0.0, base_rtt])),
          "always_skip_ce_run": draw(st.integers(1, 8)),
          "ev_event_mask": draw(st.sampled_from([3, 1, 2, 0])),
          "max_burst": draw(st.sampled_from([4, 256])),
          "cc_params": {}}
    if cc == NSCC:
        qp["cc_params"] = draw(st.sampled_from([
            {}, {"rate_bps": rate * n_paths, "base_rtt_s": base_rtt},
            {"rate_bps": rate * n_paths, "base_rtt_s": base_rtt, "ecn_capable": ecn,
             "alpha": 0.25, "quick_adapt": False}]))
    elif cc == FIXED:
        qp["cc_params"] = draw(st.sampled_from([{}, {"window_bytes": 4.0 * payload}]))
    elif cc == DCQCN:
        qp["cc_params"] = {"rate_bps": rate, "base_rtt_s": base_rtt, "overhead_bytes": 100}
        qp["cnp_interval_s"] = round(scaled_cnp_interval_s(base_rtt), 6)
    attr = QPAttr(timeout=timeout, mpr=draw(st.integers(1, 8)), mpr_dest=8,
                  max_wimm=draw(st.sampled_from([1, 2, 128])),
                  max_wimm_dest=draw(st.sampled_from([1, 128])),
                  retry_linear_cnt=draw(st.integers(0, 3)), retry_exp_cnt=draw(st.integers(0, 3)))
    return qp, attr


def chance(draw, n: int) -> bool:
    """True about once in ``n`` draws; shrinks to False (the feature off)."""
    return draw(st.integers(0, n - 1)) == n - 1


@st.composite
def path_specs(draw, rate: float, delay: float, payload: int, horizon: float,
               ecn: bool) -> PathSpec:
    """One path: loss, duplication, reordering, a down interval (recovering or not), a queue
    limit with or without trimming, RED ECN marking (often when ``ecn``); each present or not."""
    # Half the rate the QPs were configured for builds queues (marking, trimming) often.
    kw: dict = {"rate_bps": rate * draw(st.sampled_from([0.5, 1.0] if ecn else [1.0, 0.5])),
                "delay_s": delay}
    if chance(draw, 2):
        kw["loss"] = draw(st.sampled_from([0.05, 0.01, 0.2]))
    if chance(draw, 5):
        kw["duplicate"] = draw(st.sampled_from([0.05, 0.2]))
    if chance(draw, 4):
        kw["reorder"] = draw(st.sampled_from([0.1, 0.3]))
        kw["reorder_delay_s"] = draw(st.sampled_from([2.0, 0.5, 5.0])) * delay
    if chance(draw, 5):
        t0 = draw(st.sampled_from([0.2, 0.05, 0.5])) * horizon
        kw["down"] = ((t0, draw(st.sampled_from([t0 + 0.3 * horizon, t0 + 3 * horizon,
                                                  math.inf]))),)
    if chance(draw, 2):
        kw["queue_bytes"] = draw(st.sampled_from([4, 2, 16])) * payload
        kw["trim"] = chance(draw, 2)
        kw["trim_lasthop"] = kw["trim"] and chance(draw, 2)
    if not chance(draw, 4) if ecn else chance(draw, 4):   # ecn: marking unless drawn off
        kmin = draw(st.sampled_from([1, 0, 4])) * payload
        kw.update(ecn_kmin_bytes=kmin, ecn_kmax_bytes=kmin + draw(st.sampled_from([8, 0])) * payload,
                  ecn_pmax=draw(st.sampled_from([1.0, 0.2])))
    return PathSpec(**kw)


@st.composite
def scenarios(draw, transports=("mrc", "rc"), ccs=(NSCC, FIXED, DCQCN),
              max_packets: int = 240) -> Scenario:
    """A random :class:`Scenario`: ``transports`` and ``ccs`` to pick from (DCQCN on RC only,
    as the testbed builds it), at most ``max_packets`` data packets of writes in all (keeps an
    example well under a second), :data:`LONG_FACTOR` times that in about one example in eight
    (more PSNs than the native PSN table's first 256 entries). In about one example in four a
    QP's first PSN is near the end of the 32-bit PSN space (:func:`first_psn`)."""
    transport = draw(st.sampled_from(transports))
    cc = draw(st.sampled_from([c for c in ccs if c != DCQCN or transport == "rc"] or [NSCC]))
    n_evs = draw(st.sampled_from([4, 1, 2, 3, 5, 6, 7, 8]))
    n_spare = draw(st.integers(0, 2))
    evs = tuple(draw(st.lists(st.integers(0, 40), min_size=n_evs + n_spare,
                              max_size=n_evs + n_spare, unique=True)))
    evs, spare = evs[:n_evs], evs[n_evs:]
    payload = draw(st.sampled_from(PAYLOADS))
    rate = draw(st.sampled_from([1e8, 1e7, 1e9]))
    delay = draw(st.sampled_from([2e-4, 2e-5, 1e-3]))
    style = draw(st.sampled_from([_testbed_config, _sim_config]))
    ecn = cc == DCQCN or chance(draw, 2)
    config, attr = style(draw, transport, cc, payload, rate, delay, n_evs, ecn)
    # Writes: a -> b always, b -> a sometimes; sizes from 1 byte to a few hundred KB. The budget
    # is derived from the EVs drawn (a further draw would move every derandomized example).
    long = sum(evs) % 8 == 3
    budget = max_packets * payload * (LONG_FACTOR if long else 1)
    n_ab = draw(st.integers(1, 4))
    n_ba = draw(st.sampled_from([0, 1, 2]))
    size_st = st.one_of(st.sampled_from([40 * payload, 100_000, 1, payload, payload + 1]),
                        st.integers(1, 300_000))
    sizes = [draw(size_st) for _ in range(n_ab + n_ba)]
    if long:   # the first write alone crosses 256 PSNs
        sizes[0] = max(sizes[0], 320 * payload)
    while sum(sizes) > budget:
        sizes = [max(1, s // 2) for s in sizes]
    line = rate * (n_evs if transport == "mrc" else 1)
    horizon = sum(sizes) * 8 / line + 20 * delay + 0.002

    def when(late: float = 1.0) -> float:    # at 0, or at a fraction of the horizon
        return 0.0 if not chance(draw, 2) else draw(st.floats(0.0, late)) * horizon

    mem = {"a": 1, "b": 1}
    ops: list[Op] = []
    imm_writes = {"a": 0, "b": 0}
    for j, size in enumerate(sizes):
        src, dst = ("a", "b") if j < n_ab else ("b", "a")
        t = 0.0 if j == 0 else when()
        region = draw(st.sampled_from([size, 2 * size, size + 4096]))
        off = draw(st.integers(0, region - size))
        if chance(draw, 20):
            off = region - size // 2 + 1         # past the region's end: an access error
        else:
            mem[dst] = max(mem[dst], off + size)
        imm = draw(st.one_of(st.none(), st.integers(0, 2**32 - 1)))
        imm_writes[dst] += imm is not None
        ops.append(Op(t, src, "post_write", (100 + j, size, off, imm, draw(st.integers(0, 2**16)))))
    for side in SIDES:   # receives for the immediates, up front or late, one short sometimes
        n = max(imm_writes[side] - chance(draw, 4), 0)
        for r in range(n):
            ops.append(Op(when(), side, "post_recv", (1000 + r,)))
    for _ in range(draw(st.integers(0, 4))):   # the controller, mid-run
        side = draw(st.sampled_from(SIDES))
        t = draw(st.floats(0.0, 1.5)) * horizon
        if spare and chance(draw, 3):
            ops.append(Op(t, side, "replace_ev", (draw(st.sampled_from(evs)),
                                                  draw(st.sampled_from(spare)))))
        else:
            ops.append(Op(t, side, "set_ev_state", (draw(st.sampled_from(evs + spare)),
                                                    draw(st.sampled_from(["DENIED", "GOOD"])))))
    if chance(draw, 6):   # the application moves a QP to ERR
        ops.append(Op(draw(st.floats(0.05, 1.0)) * horizon, draw(st.sampled_from(SIDES)), "error"))
    paths = tuple(draw(path_specs(rate, delay, payload, horizon, ecn)) for _ in evs + spare)
    reverse = None
    if chance(draw, 2):
        reverse = tuple(draw(path_specs(rate, delay, payload, horizon, ecn)) for _ in evs + spare)
    sc = Scenario(config=config, attr=attr, evs=evs, spare_evs=spare,
                  ev_min_active=draw(st.integers(1, n_evs)), paths=paths, reverse_paths=reverse,
                  mem_a=mem["a"], mem_b=mem["b"], ops=tuple(ops),
                  seed_a=draw(st.integers(0, 2**32)), seed_b=draw(st.integers(0, 2**32)),
                  net_seed=draw(st.integers(0, 2**32)), batch=chance(draw, 2),
                  until=max(0.05, min(1.0, 30 * horizon)),
                  max_steps=3000 * (LONG_FACTOR if long else 1))
    # Knobs derived from values already drawn (a further draw would change every derandomized
    # example after it): no fast loss inference in one example in four (NACKs and timeouts alone
    # find losses); net_seed shrinks to 0, inference on.
    if sc.net_seed % 4 == 1:
        sc = dataclasses.replace(sc, config={**config, "loss_inference": False})
    # the non-spec REPS EV selection (agents.mrc.ev) in one MRC example in three
    if transport == "mrc" and sc.seed_b % 3 == 2:
        sc = dataclasses.replace(sc, config={**sc.config, "ev_select": "reps"})
    # NSCC on uet-htsim's filtered delay (cc_params delay_filter "ewma") in one example in three
    if cc == NSCC and sc.net_seed % 3 == 2:
        sc = dataclasses.replace(sc, config={**sc.config, "cc_params": {**sc.config["cc_params"],
                                                                         "delay_filter": "ewma"}})
    # Each direction's first PSN near the end of the PSN space in one example in four, from
    # the QP seeds (which shrink to 0: PSN 0).
    psns = (first_psn(sc.seed_a, sc.seed_b), first_psn(sc.seed_b, sc.seed_a))
    if psns != (0, 0):
        sc = dataclasses.replace(sc, first_psns=psns)
    return sc


LONG_FACTOR = 5
"""How many times ``max_packets`` a long example of :func:`scenarios` may write."""


def first_psn(seed: int, other: int) -> int:
    """A direction's first PSN from two seeds already drawn: 0 mostly; for ``seed % 8 == 1``
    250 to 449 PSNs below ``MAX_PSN`` (room for a default example's writes: the last PSNs of
    the 32-bit space, and the native PSN table's index crossing its end); for ``seed % 8 == 5``
    1 to 64 below it, so that a write can find the PSN space exhausted (``post_write`` raises,
    PSNs never wrap: :mod:`agents.mrc.packet`)."""
    if seed % 8 == 1:
        return pk.MAX_PSN - 250 - other % 200
    if seed % 8 == 5:
        return pk.MAX_PSN - 1 - other % 64
    return 0


@st.composite
def loss_retry_scenarios(draw, transports=("mrc", "rc")) -> Scenario:
    """:func:`scenarios` (NSCC or fixed window) with every path losing 2-20% of its packets and
    none down, and a retry budget of 0-3 (``retry.linear_cnt`` 0-2, ``exp_cnt`` 0-1): PSNs lost
    again and again, by NACK or inference as well as by timeout, run out of retries
    (:data:`agents.mrc.loss.RETRY_SPENT`)."""
    sc = draw(scenarios(transports=transports, ccs=(NSCC, FIXED)))
    loss = st.sampled_from([0.05, 0.1, 0.2, 0.02])
    paths = tuple(dataclasses.replace(p, loss=draw(loss), down=()) for p in sc.paths)
    reverse = None if sc.reverse_paths is None else \
        tuple(dataclasses.replace(p, down=()) for p in sc.reverse_paths)
    attr = dataclasses.replace(sc.attr, retry_linear_cnt=draw(st.integers(0, 2)),
                               retry_exp_cnt=draw(st.integers(0, 1)))
    return dataclasses.replace(sc, paths=paths, reverse_paths=reverse, attr=attr)
