"""Wire format: round trips, and any bytes either parse or raise ProtocolError."""
import struct
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from agents.mrc import packet as pk

u32 = st.integers(0, 0xFFFFFFFF)
psn = st.integers(0, pk.MAX_PSN)
u64 = st.integers(0, 2**64 - 1)


@st.composite
def data_packets(draw):
    opcode = draw(st.sampled_from(list(pk.Opcode)))
    payload = draw(st.binary(max_size=64))
    flags = draw(st.integers(0, pk.FLAG_RTX | pk.FLAG_ACK_REQ))
    imm = draw(u32) if opcode in pk.OPCODES_WITH_IMM else None
    off = draw(st.integers(0, 2**63))
    return pk.DataPacket(draw(u32), draw(psn), draw(u32), opcode, off, len(payload),
                         draw(u64), flags, imm, payload)


packets = st.one_of(
    data_packets(),
    st.builds(pk.SackPacket, u32, st.integers(0, pk.MAX_PSN + 1), psn, u64, u32, u64, u32, u64,
              st.sampled_from(list(pk.SackMode)), st.sampled_from([0, pk.FLAG_ECN_ECHO])),
    st.builds(pk.NackPacket, u32, psn, u32, u64, st.sampled_from(list(pk.NackReason))),
    st.builds(pk.ProbePacket, u32, st.integers(0, 0xFFFF), u32, u32, u64, st.booleans()),
    st.builds(pk.CnpPacket, u32, u32, st.integers(0, pk.MAX_PSN)),
)


@settings(max_examples=10_000, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_parse_or_raise_protocol_error(data):
    try:
        pk.parse(data)
    except pk.ProtocolError:
        pass


@settings(max_examples=3000, deadline=None)
@given(st.integers(1, 5), st.integers(0, 255), st.integers(0, 255), st.binary(max_size=120))
def test_bytes_with_valid_crc_parse_or_raise(ptype, sub, flags, body):
    """Random bodies with a correct CRC reach the field checks, which must hold too."""
    raw = bytes([pk.VERSION, ptype, sub, flags]) + body
    raw += struct.pack("!I", zlib.crc32(raw))
    try:
        pkt = pk.parse(raw)
    except pk.ProtocolError:
        return
    assert pk.encode(pkt) == raw


@settings(max_examples=2000, deadline=None)
@given(packets)
def test_round_trip(pkt):
    raw = pk.encode(pkt)
    assert pk.parse(raw) == pkt
    assert pk.peek_dest_qpn(raw) == pkt.dest_qpn


@settings(max_examples=1000, deadline=None)
@given(packets, st.data())
def test_any_single_byte_corruption_is_detected(pkt, data):
    raw = bytearray(pk.encode(pkt))
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= data.draw(st.integers(1, 255))
    with pytest.raises(pk.ProtocolError):
        pk.parse(bytes(raw))


def test_truncated_packets_raise():
    raw = pk.encode(pk.DataPacket(1, 2, 3, pk.Opcode.WRITE_ONLY_WITH_IMM, 0, 5, 9, 0, 7, b"hello"))
    for n in range(len(raw)):
        with pytest.raises(pk.ProtocolError):
            pk.parse(raw[:n])


def test_length_field_must_match_payload():
    raw = bytearray(pk.encode(pk.DataPacket(1, 2, 3, pk.Opcode.WRITE_ONLY, 0, 5, 9, 0, None,
                                            b"hello")))
    struct.pack_into("!I", raw, 24, 6)
    raw[-4:] = struct.pack("!I", zlib.crc32(bytes(raw[:-4])))
    with pytest.raises(pk.ProtocolError, match="length"):
        pk.parse(bytes(raw))


def test_trimmed_packet_has_header_only():
    pkt = pk.DataPacket(1, 2, 3, pk.Opcode.WRITE_MIDDLE, 4096, 1408, 9, pk.FLAG_TRIMMED)
    assert pk.parse(pk.encode(pkt)) == pkt
    with pytest.raises(ValueError):
        pk.encode(pk.DataPacket(1, 2, 3, pk.Opcode.WRITE_MIDDLE, 0, 1, 9, pk.FLAG_TRIMMED,
                                payload=b"x"))


def test_default_payload_fits_1500_byte_mtu():
    pkt = pk.DataPacket(1, 2, 3, pk.Opcode.WRITE_LAST_WITH_IMM, 0, pk.DEFAULT_PAYLOAD_BYTES, 9,
                        0, 1, bytes(pk.DEFAULT_PAYLOAD_BYTES))
    assert len(pk.encode(pkt)) + pk.IPV6_UDP_BYTES == 1500
    with pytest.raises(ValueError):
        pk.payload_bytes_for_mtu(80)


def test_imm_presence_must_match_opcode():
    with pytest.raises(ValueError):
        pk.encode(pk.DataPacket(1, 2, 3, pk.Opcode.WRITE_ONLY, 0, 0, 9, 0, 5, b""))
    with pytest.raises(ValueError):
        pk.encode(pk.DataPacket(1, 2, 3, pk.Opcode.WRITE_ONLY_WITH_IMM, 0, 0, 9, 0, None, b""))


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=9000), st.integers(0, 2**32 - 1))
def test_crc32_is_zlibs_crc32(data, start):
    """The packet CRC (ISA-L when installed) is exactly zlib's CRC-32, chained or not."""
    assert pk.crc32(data) == zlib.crc32(data)
    assert pk.crc32(data, start) == zlib.crc32(data, start)
