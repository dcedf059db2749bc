"""The CNP packet (type 0x81, RoCEv2's CNP opcode): round trip, and any bytes of its type either
parse or raise ProtocolError (single-byte corruption: with every packet type in test_mrc_packet)."""
import struct
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from agents.mrc import packet as pk

u32 = st.integers(0, 0xFFFFFFFF)
cnps = st.builds(pk.CnpPacket, u32, u32, st.integers(0, pk.MAX_PSN))


@settings(max_examples=2000, deadline=None)
@given(cnps)
def test_round_trip(pkt):
    raw = pk.encode(pkt)
    assert raw[1] == pk.PacketType.CNP == 0x81 and len(raw) == pk.CNP_HDR.size + pk.CRC_BYTES
    assert pk.parse(raw) == pkt
    assert pk.peek_dest_qpn(raw) == pkt.dest_qpn
    assert pk.encode_cnp(pkt.dest_qpn, pkt.ev, pkt.psn) == raw


@settings(max_examples=2000, deadline=None)
@given(st.integers(0, 255), st.integers(0, 255), st.binary(max_size=40))
def test_bodies_with_a_valid_crc_parse_or_raise(sub, flags, body):
    raw = bytes([pk.VERSION, 0x81, sub, flags]) + body
    raw += struct.pack("!I", zlib.crc32(raw))
    try:
        pkt = pk.parse(raw)
    except pk.ProtocolError:
        return
    assert isinstance(pkt, pk.CnpPacket) and pk.encode(pkt) == raw


def test_reserved_psn_and_nonzero_fields_raise():
    good = pk.encode_cnp(1, 2, 3)
    for i, value in ((2, 1), (3, 1)):                  # sub, flags must be zero
        raw = bytearray(good[:-4])
        raw[i] = value
        with pytest.raises(pk.ProtocolError):
            pk.parse(bytes(raw) + struct.pack("!I", zlib.crc32(raw)))
    raw = pk.CNP_HDR.pack(pk.VERSION, 0x81, 0, 0, 1, 2, pk.MAX_PSN + 1)
    with pytest.raises(pk.ProtocolError):
        pk.parse(raw + struct.pack("!I", zlib.crc32(raw)))
