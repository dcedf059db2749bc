"""The native responder (agents.mrc._core.Responder) against agents.mrc.responder.Responder.

The same random inputs go to both (DATA packets around the PSN window, immediates, trims,
CE marks, corrupt bytes, probe requests, posted receives, timers, batches with random
splits) and after every step everything observable must be equal: the control packets
and their EVs, the completions, the deadline, the counters, the cumulative PSN, the
reverse EV state, the registered memory, and any exception.
"""
from collections import deque
import logging
import random

import pytest
from hypothesis import given, settings, strategies as st

from agents.mrc import native
from agents.mrc import packet as pk
from agents.mrc.responder import Responder
from agents.mrc.types import QPConfig, Transport

core = native.load()
pytestmark = pytest.mark.skipif(core is None, reason="agents.mrc._core is not built")

QPN, DEST = 7, 9
EVS = [0, 1, 2, 3, 4]
OPCODES = list(pk.Opcode)
IMM_OPCODES = {pk.Opcode.WRITE_LAST_WITH_IMM, pk.Opcode.WRITE_ONLY_WITH_IMM}
FLAG_SETS = [0, 0, 0, 0, 0, 0, pk.FLAG_RTX, pk.FLAG_ACK_REQ, pk.FLAG_RTX | pk.FLAG_ACK_REQ,
             pk.FLAG_TRIMMED, pk.FLAG_TRIMMED | pk.FLAG_TRIMMED_LASTHOP,
             pk.FLAG_TRIMMED_LASTHOP, 0x10]
# seconds; mostly dyadic, so that a gap can equal the coalescing hold exactly
DTS = [0.0, 2**-20, 2**-14, 2**-14, 2**-13, 1e-4, 2**-11, 2**-9]


class Engine:
    """One responder and what it has produced, driven as the QP drives it."""

    def __init__(self, cls, config, transport, memory, mpr_dest, max_wimm_dest, reverse):
        self.events = deque()
        self.mem = memory
        self.r = cls(qpn=QPN, config=config, transport=transport, events=self.events,
                     memory=memory)
        self.r.dest_qpn = DEST
        self.r.mpr_dest = mpr_dest
        self.r.max_wimm_dest = max_wimm_dest
        self.r.reverse.evs = list(reverse)
        self.slow_calls = []

    def data(self, data, now, ecn):
        """QP.receive_datagram's DATA branch: a ProtocolError is the QP's bad packet."""
        try:
            self.r.on_data(data, now, ecn)
        except pk.ProtocolError:
            return "ProtocolError"
        return "ok"

    def batch(self, datagrams, now, ce, stop_at):
        """QP.receive_datagrams: ``slow`` says False at call ``stop_at`` (the QP left its state)."""
        def slow(data, now, marked=False):
            self.slow_calls.append((bytes(data), now, marked, self.data(data, now, marked)))
            return len(self.slow_calls) != stop_at
        self.slow_calls = []
        self.r.receive_batch(datagrams, now, slow, ce)
        return self.slow_calls

    def view(self):
        events = list(self.events)
        self.events.clear()
        r = self.r
        return (r.take_output(), events, r.deadline, r.counters(), r.rx_cum_psn, r.bad_packets,
                r.rx_packets, r.rx_bytes, r.rx_duplicates, r.rx_ooo, r.rx_access_errors,
                r.rx_out_of_window, r.rx_no_recv, dict(r.reverse_evs), r.reverse.state(),
                r.reverse.marked_bad, None if r.memory is None else bytes(r.memory))


def both(config, transport, memsize, mpr_dest, max_wimm_dest, reverse):
    mk = (lambda: None) if memsize is None else (lambda: bytearray(memsize))
    return [Engine(cls, config, transport, mk(), mpr_dest, max_wimm_dest, reverse)
            for cls in (Responder, core.Responder)]


def same(py, nat, what):
    a, b = py.view(), nat.view()
    assert a == b, what


# ---- the operations ---------------------------------------------------------------------

# mostly the next PSN (cumulative PSN + placed ones), so that the bitmap fills and advances
psn_choice = st.one_of(st.tuples(st.just("next"), st.integers(0, 2)),
                       st.tuples(st.just("next"), st.integers(0, 2)),
                       st.tuples(st.just("next"), st.integers(0, 2)),
                       st.tuples(st.just("next"), st.integers(-2, 8)),
                       st.tuples(st.just("rel"), st.integers(-70, 70)),
                       st.tuples(st.just("rel"), st.integers(60, 400)),
                       st.tuples(st.just("edge"), st.integers(-2, 1)),
                       st.tuples(st.just("abs"), st.sampled_from([pk.MAX_PSN, pk.MAX_PSN + 1])))
data_op = st.fixed_dictionaries({
    "psn": psn_choice, "ev": st.sampled_from(EVS + [77]),
    "opcode": st.sampled_from(OPCODES + [pk.Opcode.WRITE_MIDDLE] * 4),
    "flags": st.sampled_from(FLAG_SETS), "off": st.sampled_from([0, 1, 60, 100, 4000, 4090]),
    "size": st.sampled_from([0, 1, 4, 37, 64]), "imm": st.integers(0, 2**32 - 1),
    "ts": st.integers(0, 2**64 - 1), "ce": st.sampled_from([False, False, False, True]), "qpn": st.sampled_from([QPN] * 9 + [3]),
    "corrupt": st.sampled_from([None] * 12 + ["flip", "cut", "noimm"]), "at": st.integers(0, 200),
    "dt": st.sampled_from(DTS)})
op = st.one_of(
    st.tuples(st.just("data"), data_op),
    st.tuples(st.just("data"), data_op),
    st.tuples(st.just("data"), data_op),
    st.tuples(st.just("batch"), st.lists(data_op, min_size=1, max_size=12),
              st.booleans(), st.integers(0, 6), st.sampled_from(DTS), st.booleans()),
    st.tuples(st.just("run"), st.sampled_from([1, 2, 5, 20, 63, 64, 65, 130]), st.booleans(),
              st.sampled_from([0, 0, 2, 3, 7]), st.sampled_from([0, 0, 5]), st.sampled_from(DTS),
              st.sampled_from([[1], EVS]), st.sampled_from([0, 0, 1, 3]), st.booleans()),
    st.tuples(st.just("stream"), st.sampled_from([1, 8, 70, 130]),
              st.lists(st.integers(0, 130), max_size=4), st.lists(st.integers(0, 130), max_size=3),
              st.lists(st.integers(0, 130), max_size=3), st.sampled_from([None, 0, 5, 60]),
              st.sampled_from(DTS), st.integers(0, 140)),
    st.tuples(st.just("probe"), st.integers(0, 0xFFFF), st.sampled_from(EVS),
              st.sampled_from(EVS), st.integers(0, 2**64 - 1)),
    st.tuples(st.just("recv"), st.integers(0, 2**64 - 1)),
    st.tuples(st.just("recv"), st.integers(0, 2**64 - 1)),
    st.tuples(st.just("deadline"),),
    st.tuples(st.just("timer"), st.sampled_from(DTS)),
)


def build(d, cum, mpr_dest, top):
    """The datagram of data op ``d`` for a responder whose cumulative PSN is ``cum`` and
    whose next PSN to send is ``top[0]`` (updated)."""
    kind, v = d["psn"]
    psn = max(0, top[0] + v) if kind == "next" else max(0, cum + v) if kind == "rel" else \
        cum + mpr_dest * 128 + v if kind == "edge" else v
    psn &= 0xFFFFFFFF
    if psn < cum + mpr_dest * 128:
        top[0] = max(top[0], psn + 1)
    opcode = d["opcode"]
    imm = d["imm"] if opcode in IMM_OPCODES else None
    payload = random.Random(d["ts"] ^ psn).randbytes(d["size"])
    flags = d["flags"]
    if flags & pk.FLAG_TRIMMED:
        data = pk.encode_data_parts(d["qpn"], psn, d["ev"], opcode, flags, d["off"], d["ts"], imm,
                                    b"", d["size"])
    else:
        data = pk.encode_data_parts(d["qpn"], psn, d["ev"], opcode, flags, d["off"], d["ts"], imm,
                                    payload)
    if d["corrupt"] == "flip":
        i = d["at"] % len(data)
        data = data[:i] + bytes([data[i] ^ 0x20]) + data[i + 1:]
    elif d["corrupt"] == "cut":
        data = data[:d["at"] % len(data)]
    elif d["corrupt"] == "noimm" and imm is not None:
        data = pk.encode_data_parts(d["qpn"], psn, d["ev"], opcode, flags, d["off"], d["ts"], None,
                                    payload)
    return data


def fill_holes(py, nat, now, cum, top, mpr_dest, what):
    """Send the PSNs from ``cum`` up to ``top[0]`` (at most 200) one by one; the new cum."""
    for psn in range(cum, min(top[0], cum + mpr_dest * 128, cum + 200)):
        data = pk.encode_data_parts(QPN, psn, 2, pk.Opcode.WRITE_MIDDLE, 0, 0, psn, None, b"f")
        assert py.data(data, now, False) == nat.data(data, now, False), what
        same(py, nat, f"{what}, fill {psn}")
    cum = py.r.rx_cum_psn
    top[0] = max(top[0], cum)
    return cum


configs = st.builds(
    QPConfig, sack_every=st.sampled_from([1, 2, 4, 8, 64]),
    ack_delay_s=st.sampled_from([0.0, 0.0, 2**-15, 0.0005]),
    ack_coalesce_s=st.sampled_from([0.0, 2**-14, 2**-14, 2**-10, 0.0003]),
    always_skip_ce_run=st.sampled_from([1, 2, 8]))


@settings(max_examples=200, deadline=None)
@given(configs, st.sampled_from(list(Transport)), st.sampled_from([None, 0, 64] + [4096] * 5),
       st.sampled_from([1, 2, 8, 255]), st.sampled_from([1, 2, 128]),
       st.sampled_from([[], [0], [0, 1, 2], EVS, [3, 1]]),
       st.lists(op, min_size=1, max_size=30), st.booleans())
def test_native_responder_matches_python(config, transport, memsize, mpr_dest, max_wimm_dest,
                                         reverse, ops, stop):
    py, nat = both(config, transport, memsize, mpr_dest, max_wimm_dest, reverse)
    now, top = 1.0, [0]
    for step, o in enumerate(ops):
        what = f"step {step}: {o}"
        cum = py.r.rx_cum_psn
        assert nat.r.rx_cum_psn == cum, what
        if o[0] == "data":
            d = o[1]
            now += d["dt"]
            data = build(d, cum, mpr_dest, top)
            assert py.data(data, now, d["ce"]) == nat.data(data, now, d["ce"]), what
        elif o[0] == "batch":
            _, ds, with_ce, stop_at, dt, fill = o
            now += dt
            if memsize is None:      # the QP takes the one-by-one path without a region
                continue
            if fill:                 # the batch can start in order
                cum = fill_holes(py, nat, now, cum, top, mpr_dest, what)
            # a run of in-order packets (the batch path's fast case) and whatever the ops say
            datagrams = []
            for d in ds:
                if d["corrupt"] is None and d["psn"][0] == "next" and d["at"] % 4:
                    d = dict(d, psn=("next", 0), flags=d["flags"] & 3,
                             opcode=pk.Opcode.WRITE_MIDDLE, qpn=QPN, off=d["off"] % 200)
                datagrams.append(build(d, cum, mpr_dest, top))
            ce = [d["ce"] and d["at"] % 4 == 0 for d in ds] if with_ce else None
            assert py.batch(datagrams, now, ce, stop_at) == \
                nat.batch(datagrams, now, ce, stop_at), what
        elif o[0] == "run":
            # in-order packets (pairs swapped: holes filled at once), CE marks and immediates
            # every so many, one by one
            _, count, swap, ce_every, imm_every, dt, evs, dups, fill = o
            if fill:
                fill_holes(py, nat, now, cum, top, mpr_dest, what)
            psns = list(range(top[0], top[0] + count))
            if swap:
                for i in range(0, count - 1, 2):
                    psns[i], psns[i + 1] = psns[i + 1], psns[i]
            top[0] += count
            psns += [psn | 1 << 32 for psn in psns[-dups:]] if dups else []   # retransmitted
            for k, psn in enumerate(psns):
                flags, psn = (pk.FLAG_RTX, psn & 0xFFFFFFFF) if psn >> 32 else (0, psn)
                now += dt
                imm = psn if imm_every and psn % imm_every == 0 else None
                opcode = pk.Opcode.WRITE_LAST_WITH_IMM if imm is not None else pk.Opcode.WRITE_MIDDLE
                data = pk.encode_data_parts(QPN, psn, evs[psn % len(evs)], opcode, flags,
                                            (psn * 8) % 4000, psn, imm, psn.to_bytes(8, "big"))
                ecn = bool(ce_every) and k % ce_every == ce_every - 1
                assert py.data(data, now, ecn) == nat.data(data, now, ecn), what
                if k < len(psns) - 1:
                    same(py, nat, f"{what}, packet {k}")
        elif o[0] == "stream":
            # in-order data (the batch fast path) read in several batches (cut at ``cuts``),
            # CE-marked at ``marks``, ACK_REQ at ``acks``, one duplicate at ``dup``
            _, count, cuts, marks, acks, dup, dt, stop_at = o
            if memsize is None:
                continue
            now += dt
            datagrams = []
            for k in range(count):
                psn = top[0] + k
                datagrams.append(pk.encode_data_parts(
                    QPN, psn, EVS[psn % 3], pk.Opcode.WRITE_MIDDLE,
                    pk.FLAG_ACK_REQ if k in acks else 0, (psn * 4) % 4000, psn, None,
                    psn.to_bytes(4, "big")))
            if dup is not None and dup < count:
                datagrams.insert(dup + 1, datagrams[dup])
            top[0] += count
            bounds = sorted({0, len(datagrams), *(c % (len(datagrams) + 1) for c in cuts)})
            for lo, hi in zip(bounds, bounds[1:]):
                ce = [k in marks for k in range(lo, hi)] if marks else None
                assert py.batch(datagrams[lo:hi], now, ce, stop_at) == \
                    nat.batch(datagrams[lo:hi], now, ce, stop_at), what
                same(py, nat, f"{what}, batch [{lo}, {hi})")
        elif o[0] == "probe":
            _, pid, req_ev, rsp_ev, ts = o
            pkt = pk.ProbePacket(QPN, pid, req_ev, rsp_ev, ts)
            py.r.on_probe_req(pkt)
            nat.r.on_probe_req(pkt)
        elif o[0] == "recv":
            py.r.post_recv(o[1])
            nat.r.post_recv(o[1])
        elif o[0] == "deadline":
            t = py.r.deadline
            assert nat.r.deadline == t, what
            if t is not None:
                now = max(now, t)
                py.r.on_timer(t)
                nat.r.on_timer(t)
        else:
            now += o[1]
            py.r.on_timer(now)
            nat.r.on_timer(now)
        same(py, nat, what)
    if stop:                          # the QP entered ERR: output dropped, receives flushed
        py.r.stop(now)
        nat.r.stop(now)
        same(py, nat, "stop")


def test_a_datagram_shorter_than_the_header_is_a_protocol_error_in_both():
    py, nat = both(QPConfig(), Transport.MRC, 256, 8, 128, [0, 1])
    full = pk.encode_data_parts(QPN, 0, 1, pk.Opcode.WRITE_ONLY, 0, 0, 5, None, b"abcd")
    for cut in (0, 1, 2, 8, pk.DATA_HDR.size - 1, pk.DATA_HDR.size + 3):
        for e in (py, nat):
            with pytest.raises(pk.ProtocolError):
                e.r.on_data(full[:cut], 0.5, False)
        same(py, nat, f"cut {cut}")
        assert nat.r.rx_packets == 0 and nat.r.rx_cum_psn == 0
    for e in (py, nat):
        e.r.on_data(full, 0.5, False)
    same(py, nat, "the whole packet")
    assert bytes(nat.r.memory[:4]) == b"abcd" and nat.r.rx_cum_psn == 1


@pytest.mark.parametrize("memsize", [None, 0, 100])
def test_a_write_outside_a_small_region_is_an_access_error_in_both(memsize, caplog):
    py, nat = both(QPConfig(sack_every=1), Transport.MRC, memsize, 8, 128, [])
    data = pk.encode_data_parts(QPN, 0, 2, pk.Opcode.WRITE_ONLY, 0, 90, 11, None, bytes(range(1, 21)))
    with caplog.at_level(logging.WARNING, logger="agents.mrc.responder"):
        for e in (py, nat):
            e.r.on_data(data, 0.25, False)
    assert [r.getMessage() for r in caplog.records] == \
        ["qpn 7: write [90, 110) outside the memory region"] * 2
    a, b = py.view(), nat.view()
    assert a == b
    assert nat.r.rx_access_errors == 1 and nat.r.rx_packets == 0 and nat.r.rx_cum_psn == 0
    assert b[0] == [] and (memsize is None or b[-1] == bytes(memsize))
    # an in-bounds write still lands
    ok = pk.encode_data_parts(QPN, 0, 2, pk.Opcode.WRITE_ONLY, 0, 0, 12, None, b"xy")
    for e in (py, nat):
        e.r.on_data(ok, 0.5, False)
    same(py, nat, "in bounds")
    if memsize:
        assert bytes(nat.r.memory[:2]) == b"xy" and nat.r.rx_cum_psn == 1


def test_a_read_only_region_is_refused_by_both():
    for cls in (Responder, core.Responder):
        with pytest.raises(ValueError):
            cls(qpn=1, config=QPConfig(), transport=Transport.MRC, events=deque(), memory=bytes(8))


def test_the_native_responder_keeps_the_region_alive_and_pinned():
    mem = bytearray(64)
    r = core.Responder(qpn=QPN, config=QPConfig(), transport=Transport.MRC, events=deque(),
                       memory=mem)
    with pytest.raises(BufferError):
        mem.extend(b"x")             # the binding's view pins the buffer: no reallocation
    del mem
    r.on_data(pk.encode_data_parts(QPN, 0, 0, pk.Opcode.WRITE_ONLY, 0, 60, 1, None, b"tail"),
              0.0, False)
    assert bytes(r.memory[60:]) == b"tail"


def traffic(rnd, mpr_dest):
    """A long random flow as the requester would send it: in-order PSNs, swapped pairs,
    losses later retransmitted (RTX), one congested EV (CE marks), immediates, ACK_REQ."""
    hot = rnd.choice(EVS)
    lost, psn = [], 0
    while True:
        k = rnd.random()
        if k < 0.08 and lost:
            p = lost.pop(rnd.randrange(len(lost)))
            yield p, pk.FLAG_RTX, rnd.choice(EVS)
        elif k < 0.14:
            lost.append(psn)
            psn += 1
        elif k < 0.2:
            yield psn + 1, 0, rnd.choice(EVS)
            yield psn, 0, rnd.choice(EVS)
            psn += 2
        elif k < 0.23 and psn:
            yield rnd.randrange(max(0, psn - 70), psn), rnd.choice([0, pk.FLAG_RTX]), hot
        else:
            yield psn, pk.FLAG_ACK_REQ if k > 0.97 else 0, rnd.choice(EVS)
            psn += 1
        if len(lost) > mpr_dest * 64:
            lost.clear()


@settings(max_examples=60, deadline=None)
@given(configs, st.sampled_from(list(Transport)), st.sampled_from([1, 2, 8]),
       st.sampled_from([1, 4, 128]), st.sampled_from([[], [0, 1, 2], EVS]),
       st.integers(0, 2**32 - 1), st.sampled_from([0.0, 0.1, 0.5]))
def test_native_responder_matches_python_on_long_flows(config, transport, mpr_dest, max_wimm_dest,
                                                       reverse, seed, ce_rate):
    """A few hundred packets of a realistic flow (:func:`traffic`), in batches or one by one,
    with dyadic gaps (a gap can equal the coalescing hold) and timers, compared at every step."""
    rnd = random.Random(seed)
    py, nat = both(config, transport, 4096, mpr_dest, max_wimm_dest, reverse)
    flow = traffic(rnd, mpr_dest)
    now, pending, marks = 1.0, [], []
    for step in range(400):
        what = f"step {step}"
        psn, flags, ev = next(flow)
        imm = psn if psn % 5 == 0 and rnd.random() < 0.5 else None
        opcode = pk.Opcode.WRITE_LAST_WITH_IMM if imm is not None else pk.Opcode.WRITE_MIDDLE
        marks.append(rnd.random() < ce_rate and (ev == EVS[0] or flags & pk.FLAG_RTX))
        pending.append(pk.encode_data_parts(QPN, psn, ev, opcode, flags, (psn * 16) % 4000,
                                            rnd.getrandbits(64), imm, rnd.randbytes(16)))
        if rnd.random() < 0.1:
            py.r.post_recv(step)
            nat.r.post_recv(step)
        if rnd.random() < 0.4:
            continue                       # read later, in a batch
        now += rnd.choice(DTS)
        ce = marks if ce_rate else None
        if len(pending) > 1 or rnd.random() < 0.5:
            assert py.batch(pending, now, ce, 0) == nat.batch(pending, now, ce, 0), what
        else:
            mark = bool(ce and ce[0])
            assert py.data(pending[0], now, mark) == nat.data(pending[0], now, mark), what
        pending, marks = [], []
        same(py, nat, what)
        t = py.r.deadline
        if t is not None and rnd.random() < 0.5:
            now = max(now, t if rnd.random() < 0.7 else t - 2**-20)
            py.r.on_timer(now)
            nat.r.on_timer(now)
            same(py, nat, f"{what}, timer")


def test_a_ce_mark_on_a_folded_chunk_keeps_its_echo_in_both():
    """The CE-marked packet fills the hole below a held out-of-order chunk: its chunk folds into
    the cumulative PSN's chunk, whose SACK must still echo the mark (responder._flush_sacks)."""
    py, nat = both(QPConfig(sack_every=200, ack_delay_s=1.0), Transport.MRC, 4096, 8, 128, [])

    def send(psn, ev, ecn=False):
        data = pk.encode_data_parts(QPN, psn, ev, pk.Opcode.WRITE_MIDDLE, 0, psn, 1000 + psn, None,
                                    b"z")
        assert py.data(data, 0.5, ecn) == nat.data(data, 0.5, ecn) == "ok"
        same(py, nat, f"psn {psn}")

    send(64, 1)
    for psn in range(1, 64):
        send(psn, 2)
    data = pk.encode_data_parts(QPN, 0, 3, pk.Opcode.WRITE_MIDDLE, 0, 0, 1000, None, b"z")
    py.data(data, 0.5, True)
    nat.data(data, 0.5, True)
    a, b = py.view(), nat.view()
    assert a == b
    (sack, ev), = b[0]
    sack = pk.parse(sack)
    assert (ev, sack.ev, sack.timestamp_ns, sack.flags, sack.cum_psn) == \
        (3, 3, 1000, pk.FLAG_ECN_ECHO, 65)


def test_on_timer_without_a_held_sack_does_not_read_the_time_in_both():
    py, nat = both(QPConfig(), Transport.MRC, 64, 8, 128, [])
    for e in (py, nat):
        e.r.on_timer(None)             # QP.handle_timer may pass what it was given
    same(py, nat, "no deadline")


@pytest.mark.parametrize("cum", [pk.MAX_PSN + 1, pk.MAX_PSN])
@pytest.mark.parametrize("size", [0, 37])
def test_the_batch_path_bounds_the_psn_as_the_one_by_one_path(cum, size):
    """A responder whose cumulative PSN is at the end of the PSN space: a DATA packet with
    the reserved PSN 2**32 - 1 (== the cumulative PSN when every PSN was received) is a
    protocol error one by one; the batch path hands it to ``slow`` (the one-by-one path)
    instead of placing it, on both engines; the last valid PSN is placed by both paths."""
    cfg = QPConfig(sack_every=1)
    results = []
    for cls in (Responder, core.Responder):
        for batched in (False, True):
            e = Engine(cls, cfg, Transport.MRC, bytearray(4096), 8, 128, EVS)
            e.r.rx_cum_psn = cum
            data = pk.encode_data_parts(QPN, cum, 1, int(pk.Opcode.WRITE_ONLY), 0, 0, 123, None,
                                        bytes(range(size)))
            if batched:
                calls = e.batch([data], 0.001, None, -1)
                outcome = [c[3] for c in calls]
            else:
                outcome = [e.data(data, 0.001, False)]
            results.append((cls.__module__, batched, outcome, e.view()))
    want = ["ProtocolError"] if cum > pk.MAX_PSN else ["ok"]
    for mod, batched, outcome, view in results:
        if cum > pk.MAX_PSN:
            assert outcome == want, (mod, batched)        # handed to the slow path: rejected
            assert view[4] == cum and view[6] == 0         # rx_cum_psn, rx_packets unchanged
        else:
            assert outcome == ([] if batched else want), (mod, batched)   # placed
            assert view[4] == cum + 1 and view[6] == 1
    views = {(batched, repr(view)) for _, batched, _, view in results}
    assert len({v for b, v in views if b}) == 1 and len({v for b, v in views if not b}) == 1


def test_rx_cum_psn_is_set_only_with_nothing_held_above_it():
    for cls in (Responder, core.Responder):
        e = Engine(cls, QPConfig(), Transport.MRC, bytearray(4096), 8, 128, EVS)
        with pytest.raises(ValueError):
            e.r.rx_cum_psn = 2**32
        e.data(pk.encode_data_parts(QPN, 5, 1, int(pk.Opcode.WRITE_ONLY), 0, 0, 1, None, b"x"),
               0.0, False)
        with pytest.raises(ValueError):
            e.r.rx_cum_psn = 100


def test_ev_maps_with_ids_differing_only_in_high_bits_look_up_correctly():
    """The native EV maps (mrcn_evmap.c: the reverse EVs' bookkeeping, reverse_evs) hash with
    the product's high bits: ids that differ only above bit 20 must not collide into one run
    of slots. Correctness check against the Python dicts: 200 such EVs, each seen on a data
    packet, then looked up (their last-seen times) in insertion order."""
    evs = [(k << 20) | 3 for k in range(200)]
    py, nat = both(QPConfig(sack_every=1), Transport.MRC, 1 << 16, 8, 128, evs)
    for i, ev in enumerate(evs):
        data = pk.encode_data_parts(QPN, i, ev, int(pk.Opcode.WRITE_ONLY), 0, 0, 1 + i, None, b"x")
        for e in (py, nat):
            assert e.data(data, 0.001 * (i + 1), False) == "ok"
        same(py, nat, f"after EV {ev:#x}")
    assert list(dict(nat.r.reverse_evs)) == evs
    assert dict(nat.r.reverse_evs) == {ev: 0.001 * (i + 1) for i, ev in enumerate(evs)}
