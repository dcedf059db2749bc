"""The native wire codec (agents/mrc/core/mrcn_codec.c) against agents/mrc/packet.py, its spec.

Both engines must give the same bytes for every packet, accept exactly the same byte
strings with the same fields (and field types: the enums), and reject the same ones
with ProtocolError; CRC failures must be told apart alike ("CRC mismatch").
"""
import dataclasses
import importlib.util
import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import example, given, settings, strategies as st

from agents.mrc import native
from agents.mrc import packet as pk

core = native.load()
if core is None:
    pytest.skip("native engine not built (agents.mrc._core)", allow_module_level=True)

CORPUS = Path(__file__).resolve().parents[2] / "agents/mrc/core/corpus"
SETTINGS = settings(max_examples=200, deadline=None)

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 2**64 - 1)
psn = st.integers(0, pk.MAX_PSN)
# Values struct.pack refuses for some field: negative, too wide, not integers.
bad = st.one_of(st.integers(-2**70, -1), st.integers(2**16, 2**70), st.none(), st.just(1.0),
                st.just("1"))


@st.composite
def data_packets(draw):
    """DataPackets that parse accepts: every opcode and flag combination, trimmed or not."""
    opcode = draw(st.sampled_from(list(pk.Opcode)))
    flags = draw(st.sampled_from([0, pk.FLAG_RTX, pk.FLAG_ACK_REQ, pk.FLAG_RTX | pk.FLAG_ACK_REQ,
                                  pk.FLAG_TRIMMED, pk.FLAG_TRIMMED | pk.FLAG_TRIMMED_LASTHOP,
                                  pk.DATA_FLAGS]))
    if flags & pk.FLAG_TRIMMED:
        payload, length = b"", draw(u32)
    else:
        payload = draw(st.binary(max_size=80))
        length = len(payload)
    imm = draw(u32) if opcode in pk.OPCODES_WITH_IMM else None
    off = draw(st.one_of(st.integers(0, 2**64 - 1 - length), st.just(2**64 - 1 - length)))
    return pk.DataPacket(draw(u32), draw(psn), draw(u32), opcode, off, length, draw(u64), flags,
                         imm, payload)


valid_packets = st.one_of(
    data_packets(),
    st.builds(pk.SackPacket, u32, st.integers(0, pk.MAX_PSN + 1), psn, u64, u32, u64, u32, u64,
              st.sampled_from(list(pk.SackMode)), st.sampled_from([0, pk.FLAG_ECN_ECHO])),
    st.builds(pk.NackPacket, u32, psn, u32, u64, st.sampled_from(list(pk.NackReason))),
    st.builds(pk.ProbePacket, u32, u16, u32, u32, u64, st.booleans()),
    st.builds(pk.CnpPacket, u32, u32, psn),
)


@st.composite
def loose_data_packets(draw):
    """DataPackets with every field in its struct range, consistent or not for encode."""
    opcode = draw(st.one_of(st.sampled_from(list(pk.Opcode)), u8))
    payload = draw(st.one_of(st.binary(max_size=40), st.binary(max_size=40).map(bytearray)))
    length = draw(st.one_of(st.just(len(payload)), u32))
    imm = draw(st.one_of(st.none(), u32))
    return pk.DataPacket(draw(u32), draw(u32), draw(u32), opcode, draw(u64), length, draw(u64),
                         draw(u8), imm, payload)


loose_packets = st.one_of(
    loose_data_packets(),
    st.builds(pk.SackPacket, u32, u32, u32, u64, u32, u64, u32, u64, u8, u8),
    st.builds(pk.NackPacket, u32, u32, u32, u64, u8),
    st.builds(pk.ProbePacket, u32, u16, u32, u32, u64, st.sampled_from([False, True, 0, 2, ""])),
    st.builds(pk.CnpPacket, u32, u32, u32),
)


@st.composite
def any_packets(draw):
    """A loose packet, half the time with one field (not a DataPacket's payload, which must be
    bytes-like for both) set to a value struct.pack refuses."""
    pkt = draw(loose_packets)
    if draw(st.booleans()):
        name = draw(st.sampled_from([n for n in type(pkt).__slots__ if n != "payload"]))
        pkt = dataclasses.replace(pkt, **{name: draw(bad)})
    return pkt


def fields(pkt):
    """Everything observable of a packet object: its class and each slot's type and value."""
    return (type(pkt), [(name, type(getattr(pkt, name)), getattr(pkt, name))
                        for name in type(pkt).__slots__])


def outcome(fn, *args):
    """('ok', result) or ('raise', exception type, whether it is a CRC failure)."""
    try:
        result = fn(*args)
    except Exception as exc:  # noqa: BLE001 - the type is what is compared
        return ("raise", type(exc), str(exc) == "CRC mismatch")
    return ("ok", fields(result) if not isinstance(result, (bytes, int)) else result)


def same_parse(data):
    py, c = outcome(pk.parse, data), outcome(core.parse, data)
    assert c == py, data.hex()
    if py[0] == "raise":
        assert py[1] is pk.ProtocolError
    return py


def with_crc(body: bytes) -> bytes:
    return body + zlib.crc32(body).to_bytes(4, "big")


# (a) valid packets: same bytes, same objects back from both parsers.

@SETTINGS
@given(valid_packets)
def test_valid_packets_encode_and_parse_alike(pkt):
    wire = pk.encode(pkt)
    assert core.encode(pkt) == wire
    assert fields(core.parse(wire)) == fields(pk.parse(wire)) == fields(pkt)
    assert core.peek_dest_qpn(wire) == pk.peek_dest_qpn(wire) == pkt.dest_qpn


@SETTINGS
@given(any_packets())
# A float length equal to len(payload): packet.encode packs len(payload) for an untrimmed
# packet, so it encodes; the binding once refused it with struct.error.
@example(pk.DataPacket(dest_qpn=0, psn=0, ev=0, opcode=pk.Opcode.WRITE_FIRST, remote_offset=0,
                       length=1.0, timestamp_ns=0, flags=0, imm=None, payload=b"\x00"))
# ...and a trimmed one packs pkt.length itself: struct.error in both.
@example(pk.DataPacket(dest_qpn=0, psn=0, ev=0, opcode=pk.Opcode.WRITE_FIRST, remote_offset=0,
                       length=1.0, timestamp_ns=0, flags=pk.FLAG_TRIMMED, imm=None, payload=b""))
def test_encode_gives_same_bytes_or_same_exception(pkt):
    py, c = outcome(pk.encode, pkt), outcome(core.encode, pkt)
    assert c == py
    if py[0] == "raise":
        assert py[1] in (ValueError, struct.error, TypeError)


@SETTINGS
@given(u32, u32, u32, u8, u8, u64, u64, st.one_of(st.none(), u32), st.binary(max_size=64),
       st.sampled_from([bytes, bytearray, memoryview]), st.one_of(st.just(-1), u32),
       st.one_of(st.none(), st.tuples(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 9]), bad)))
def test_encode_data_parts_alike(qpn, psn_, ev, opcode, flags, off, ts, imm, payload, kind, length,
                                 corrupt):
    args = [qpn, psn_, ev, opcode, flags, off, ts, imm, kind(payload), length]
    if corrupt is not None:   # one argument struct.pack refuses (length: only a too wide one)
        index, value = corrupt
        args[index] = value if index != 9 or isinstance(value, int) and value >= 0 else 2**40
    assert outcome(core.encode_data_parts, *args) == outcome(pk.encode_data_parts, *args)


def test_encode_non_packet_is_type_error():
    with pytest.raises(TypeError):
        core.encode(b"not a packet")


# (b) arbitrary bytes and mutated packets: same packet or both ProtocolError.

@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=120))
def test_arbitrary_bytes_alike(data):
    same_parse(data)
    assert outcome(core.peek_dest_qpn, data) == outcome(pk.peek_dest_qpn, data)


# A prefix that looks like MRC (version 1, a known type), the rest random, with a right CRC:
# reaches the checks that random bytes fail before.
@SETTINGS
@given(st.sampled_from([0, 1, 2]), st.sampled_from([1, 2, 3, 4, 5, 0x81, 6]),
       st.binary(min_size=2, max_size=2), st.binary(max_size=90), st.booleans())
def test_plausible_bytes_alike(ver, ptype, sub_flags, rest, fix_crc):
    body = bytes([ver, ptype]) + sub_flags + rest
    same_parse(with_crc(body) if fix_crc else body)


# A valid packet with one header field (any of the layout's, version and pad included)
# set to an edge-biased value, then a right CRC: every check behind the CRC sees values on
# both sides of its boundary while the other fields stay valid.
LAYOUTS = {1: pk.DATA_HDR, 2: pk.SACK_HDR, 3: pk.NACK_HDR, 4: pk.PROBE_HDR, 5: pk.PROBE_HDR,
           0x81: pk.CNP_HDR}
EDGE = {"B": st.one_of(st.integers(0, 12), u8), "H": st.one_of(st.integers(0, 2), u16),
        "I": st.one_of(st.integers(0, 3), st.integers(2**32 - 3, 2**32 - 1), u32),
        "Q": st.one_of(st.integers(0, 3), st.integers(2**64 - 3, 2**64 - 1), u64)}


@st.composite
def one_field_changed(draw):
    wire = pk.encode(draw(valid_packets))
    layout = LAYOUTS[wire[1]]
    values = list(layout.unpack_from(wire))
    index = draw(st.integers(0, len(values) - 1))
    values[index] = draw(EDGE[layout.format[1 + index]])
    return with_crc(layout.pack(*values) + wire[layout.size:-pk.CRC_BYTES])


@settings(max_examples=400, deadline=None)
@given(one_field_changed())
def test_structured_headers_alike(data):
    same_parse(data)


EDGE_VALUES = sorted({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 15, 16, 0x7F, 0x80, 0x81, 0x82,
                      0xFE, 0xFF, 0x100, 0xFFFF, 0x10000, pk.MAX_PSN - 1, pk.MAX_PSN,
                      pk.MAX_PSN + 1, 2**63, 2**64 - 2, 2**64 - 1})
BITS = {"B": 8, "H": 16, "I": 32, "Q": 64}
BASES = [
    pk.DataPacket(1, 2, 3, pk.Opcode.WRITE_MIDDLE, 0, 2, 9, 0, None, b"ab"),
    pk.DataPacket(1, 2, 3, pk.Opcode.WRITE_LAST_WITH_IMM, 2**64 - 4, 3, 9, pk.FLAG_RTX, 5, b"abc"),
    pk.DataPacket(1, 2, 3, pk.Opcode.WRITE_FIRST, 0, 1408, 9, pk.FLAG_TRIMMED, None, b""),
    pk.SackPacket(1, 2, 3, 4, 5, 6, 7, 8, pk.SackMode.SKIP_ONCE, pk.FLAG_ECN_ECHO),
    pk.NackPacket(1, 2, 3, 4, pk.NackReason.NO_BITMAP),
    pk.ProbePacket(1, 2, 3, 4, 5), pk.ProbePacket(1, 2, 3, 4, 5, response=True),
    pk.CnpPacket(1, 2, 3),
]


@pytest.mark.parametrize("base", BASES, ids=lambda p: type(p).__name__)
def test_each_header_field_at_its_edges(base):
    """Every header field of a valid packet set to each edge value in its range, CRC right."""
    wire = pk.encode(base)
    layout = LAYOUTS[wire[1]]
    rest = wire[layout.size:-pk.CRC_BYTES]
    seen = set()
    for index, code in enumerate(layout.format[1:]):
        for value in EDGE_VALUES:
            if value >> BITS[code]:
                continue
            values = list(layout.unpack_from(wire))
            values[index] = value
            seen.add(same_parse(with_crc(layout.pack(*values) + rest))[0])
    assert seen == {"ok", "raise"}


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 200), st.integers(0, 7)),
    st.tuples(st.just("set"), st.integers(0, 200), u8),
    st.tuples(st.just("cut"), st.integers(0, 200), st.just(0)),
    st.tuples(st.just("extend"), st.binary(min_size=1, max_size=8), st.just(0)),
)


@settings(max_examples=400, deadline=None)
@given(valid_packets, st.lists(mutation, min_size=1, max_size=3), st.booleans())
def test_mutated_packets_alike(pkt, mutations, fix_crc):
    data = bytearray(pk.encode(pkt))
    for kind, a, b in mutations:
        if kind == "flip" and data:
            data[a % len(data)] ^= 1 << b
        elif kind == "set" and data:
            data[a % len(data)] = b
        elif kind == "cut":
            del data[a % (len(data) + 1):]
        elif kind == "extend":
            data += a
    if fix_crc and len(data) >= 4:
        data = bytearray(with_crc(bytes(data[:-4])))
    same_parse(bytes(data))
    same_parse(memoryview(data))


@SETTINGS
@given(st.binary(max_size=300), u32)
def test_crc32_is_zlibs(data, start):
    assert core.crc32(data) == zlib.crc32(data) == pk.crc32(data)
    assert core.crc32(data, start) == zlib.crc32(data, start)


# (c) explicit cases.

def test_shorter_than_prefix_and_minimum():
    wire = pk.encode(pk.CnpPacket(5, 6, 7))
    for n in range(pk.PREFIX.size + pk.CRC_BYTES):
        assert same_parse(wire[:n])[0] == "raise"
    for n in range(pk.PREFIX.size):
        with pytest.raises(pk.ProtocolError):
            core.peek_dest_qpn(wire[:n])
    assert core.peek_dest_qpn(wire[:pk.PREFIX.size]) == 5


@pytest.mark.parametrize("pkt", [
    pk.DataPacket(1, 2, 3, pk.Opcode.WRITE_FIRST, 0, 4, 9, 0, None, b"abcd"),
    pk.DataPacket(1, 2, 3, pk.Opcode.WRITE_ONLY_WITH_IMM, 0, 0, 9, 0, 77, b""),
    pk.SackPacket(1, 2, 2, 0, 3, 9),
    pk.NackPacket(1, 2, 3, 9, pk.NackReason.TRIMMED),
    pk.ProbePacket(1, 2, 3, 4, 9),
    pk.CnpPacket(1, 2, 3),
], ids=["data", "data_imm", "sack", "nack", "probe", "cnp"])
def test_shorter_than_each_header(pkt):
    wire = pk.encode(pkt)
    assert same_parse(wire)[0] == "ok"
    for n in range(len(wire)):
        assert same_parse(wire[:n])[0] == "raise"
        # The same length with a right CRC: only the length check can refuse it.
        if n >= pk.CRC_BYTES:
            assert same_parse(with_crc(wire[:n - pk.CRC_BYTES]))[0] == "raise"


def test_trimmed_data_with_payload_rejected():
    wire = pk.encode_data_parts(1, 2, 3, pk.Opcode.WRITE_MIDDLE, pk.FLAG_TRIMMED, 0, 0, None,
                                b"xy", 2)
    assert same_parse(wire) == ("raise", pk.ProtocolError, False)
    trimmed = pk.DataPacket(1, 2, 3, pk.Opcode.WRITE_MIDDLE, 0, 2, 0, pk.FLAG_TRIMMED, None, b"xy")
    assert outcome(core.encode, trimmed) == outcome(pk.encode, trimmed) == ("raise", ValueError,
                                                                            False)


def test_crc_off_by_one_bit():
    wire = pk.encode(pk.DataPacket(1, 2, 3, pk.Opcode.WRITE_LAST, 0, 3, 9, 0, None, b"abc"))
    for bit in range(len(wire) * 8):
        bad_wire = bytearray(wire)
        bad_wire[bit // 8] ^= 1 << (bit % 8)
        result = same_parse(bytes(bad_wire))
        assert result[0] == "raise"
        if bit >= (len(wire) - pk.CRC_BYTES) * 8:   # the trailer itself: a CRC failure only
            assert result[2] is True


def test_parse_rejects_non_bytes():
    for value in ("abc", None, 5, [1, 2]):
        assert outcome(core.parse, value) == outcome(pk.parse, value)


def test_corpus_is_generated_and_parses_alike(tmp_path):
    spec = importlib.util.spec_from_file_location("make_codec_corpus",
                                                  CORPUS / "make_codec_corpus.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.main(["make_codec_corpus", str(tmp_path)])
    made = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    committed = {p.name: p.read_bytes() for p in (CORPUS / "codec").iterdir()}
    assert made == committed
    accepted = sum(same_parse(data)[0] == "ok" for data in committed.values())
    assert accepted == sum(not name.startswith(("short_", "data_bad", "data_trimmed_with",
                                                "data_lasthop", "data_offset", "data_reserved",
                                                "data_imm_missing", "data_length", "sack_bad",
                                                "nack_bad", "probe_nonzero", "cnp_reserved",
                                                "unknown"))
                           for name in committed)
