"""MRC wire format: data (WRITE / WRITE_WITH_IMM), SACK, NACK, EV probe request/response, CNP.

One module on purpose (over ~400 lines): every packet type's layout, encoder and parser side by side, so
the wire format is read in one place.

Every packet starts with the same 8-byte prefix and ends with a CRC-32
trailer (:func:`crc32`, zlib's CRC-32) over every byte before it (the role of
RoCEv2's ICRC: the UDP checksum is zero because the destination address is
rewritten in flight by SRv6 uSID shifting)::

    0      1      2        3      4..7
    ver    type   sub      flags  dest_qpn (u32, network order)

``sub`` is the opcode (DATA), the ``m`` field (SACK) or the reason (NACK).
The destination QPN sits at bytes 4..8 in every type so an I/O adapter can
demultiplex with :func:`peek_dest_qpn` without a full parse.

Layouts (network byte order; exact bit layouts are ours, field choices follow
OCP MRC 1.0 and the UET SACK/NACK headers that MRC borrows):

DATA (36 bytes + optional 4-byte immediate + payload + 4-byte CRC)
    prefix, psn u32, ev u32, remote_offset u64, length u32, timestamp_ns u64,
    [imm u32 if the opcode carries one], payload[length]
    (``length`` is the payload length; with ``FLAG_TRIMMED`` the payload was
    cut by a switch and is absent while ``length`` keeps the original size;
    ``FLAG_TRIMMED_LASTHOP`` in addition: cut by the last switch before the host).
SACK (48 bytes + CRC)
    prefix, cum_psn u32 (every PSN below it received), sack_base u32,
    bitmap u64 (bit i = PSN sack_base + i received), ev u32 (echoed),
    timestamp_ns u64 (echoed), ooo_count u32, received_bytes u64.
NACK (24 bytes + CRC)
    prefix, psn u32, ev u32, timestamp_ns u64 (echoed).
PROBE_REQ / PROBE_RSP (28 bytes + CRC)
    prefix, probe_id u16, pad u16 (zero), req_ev u32, rsp_ev u32,
    timestamp_ns u64 (set by the requester, echoed by the responder).
CNP (16 bytes + CRC), type 0x81 as RoCEv2's CNP opcode (IBTA RoCEv2 annex A17)
    prefix (sub and flags zero), ev u32 (the EV the CE-marked packet came on),
    psn u32 (its PSN). Sent by a responder whose ``cnp_interval_s`` is set
    (:mod:`agents.mrc.dcqcn`).

PSNs are 32 bits and never wrap in this emulation (a QP carries fewer than
2**32 packets in any run; one started near the end by ``sq_psn`` runs out of PSNs and
refuses further writes); 2**32 - 1 is reserved.

:func:`parse` turns any ``bytes`` into a packet object or raises
:class:`ProtocolError`; the ``encode_*`` functions are its inverse.
"""
from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass

try:   # ISA-L's CRC-32 (PCLMULQDQ): the same function as zlib.crc32, 1448 bytes in 70 ns, not 337
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a declared dependency; zlib gives equal values
    crc32 = zlib.crc32

VERSION = 1

PREFIX = struct.Struct("!BBBBI")
DATA_HDR = struct.Struct("!BBBBIIIQIQ")
IMM = struct.Struct("!I")
CRC = struct.Struct("!I")
SACK_HDR = struct.Struct("!BBBBIIIQIQIQ")
NACK_HDR = struct.Struct("!BBBBIIIQ")
PROBE_HDR = struct.Struct("!BBBBIHHIIQ")
CNP_HDR = struct.Struct("!BBBBIII")

CRC_BYTES = CRC.size
DATA_OVERHEAD_BYTES = DATA_HDR.size + IMM.size + CRC_BYTES
"""Worst-case per-packet MRC overhead (header + immediate + CRC), bytes."""

IPV6_UDP_BYTES = 40 + 8


def payload_bytes_for_mtu(mtu_bytes: int = 1500) -> int:
    """Largest payload per data packet for a link MTU: MTU - IPv6 40 - UDP 8 - MRC overhead.

    Raises ValueError if the MTU leaves no room for payload.
    """
    size = mtu_bytes - IPV6_UDP_BYTES - DATA_OVERHEAD_BYTES
    if size <= 0:
        raise ValueError(f"MTU {mtu_bytes} too small for MRC headers")
    return size


DEFAULT_PAYLOAD_BYTES = payload_bytes_for_mtu(1500)  # 1408
MIN_PAYLOAD_BYTES = 256
"""The least payload per data packet a job may ask for (RoCEv2's smallest path MTU, IBTA)."""


def mtu_for_payload(payload_bytes: int) -> int:
    """The MTU whose data packets carry ``payload_bytes`` of payload (the inverse of
    :func:`payload_bytes_for_mtu`): payload + IPv6 40 + UDP 8 + MRC overhead."""
    return payload_bytes + IPV6_UDP_BYTES + DATA_OVERHEAD_BYTES


MIN_MTU_BYTES = mtu_for_payload(MIN_PAYLOAD_BYTES)
"""The least ``mtu`` of a job spec (:data:`MIN_PAYLOAD_BYTES` of payload): the agents' MTU sizes
their data packets only; it may be below IPv6's 1280, which the interfaces keep."""


class ProtocolError(ValueError):
    """A peer's bytes do not form a valid MRC packet."""


class PacketType(enum.IntEnum):
    DATA = 1
    SACK = 2
    NACK = 3
    PROBE_REQ = 4
    PROBE_RSP = 5
    CNP = 0x81


class Opcode(enum.IntEnum):
    """RDMA WRITE opcodes, numbered as the RoCEv2 RC opcodes 0x06..0x0B."""

    WRITE_FIRST = 6
    WRITE_MIDDLE = 7
    WRITE_LAST = 8
    WRITE_LAST_WITH_IMM = 9
    WRITE_ONLY = 10
    WRITE_ONLY_WITH_IMM = 11


OPCODES_WITH_IMM = frozenset({Opcode.WRITE_LAST_WITH_IMM, Opcode.WRITE_ONLY_WITH_IMM})
OPCODES_LAST = frozenset({Opcode.WRITE_LAST, Opcode.WRITE_LAST_WITH_IMM,
                          Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_WITH_IMM})
_IMM_OPCODE_VALUES = frozenset(int(o) for o in OPCODES_WITH_IMM)
_OPCODE_VALUES = frozenset(int(o) for o in Opcode)

FLAG_RTX = 0x01
"""Data: this is a retransmission (the responder SACKs it at once)."""
FLAG_ACK_REQ = 0x02
"""Data: the requester asks for an immediate SACK."""
FLAG_TRIMMED = 0x04
"""Data: a switch trimmed the payload (only the header arrived)."""
FLAG_TRIMMED_LASTHOP = 0x08
"""Data, only with FLAG_TRIMMED: the trimming switch port faces the destination host (the
last hop), so the trim says the receiver's link is congested, not the EV's path (UET:
only trims before the last hop penalise the EV). The responder NACKs TRIMMED_LASTHOP."""
DATA_FLAGS = FLAG_RTX | FLAG_ACK_REQ | FLAG_TRIMMED | FLAG_TRIMMED_LASTHOP

FLAG_ECN_ECHO = 0x01
"""SACK: at least one acknowledged packet arrived ECN-CE marked."""
SACK_FLAGS = FLAG_ECN_ECHO


class SackMode(enum.IntEnum):
    """The SACK ``m`` field: how the requester should treat the echoed EV."""

    NONE = 0
    SKIP_ONCE = 1
    ALWAYS_SKIP = 2


class NackReason(enum.IntEnum):
    """NACK reasons (docs/mrc-spec.md, "Reliability" / UET); SEQ_ERR is the RoCE RC go-back-N NAK."""

    TRIMMED = 1
    TRIMMED_LASTHOP = 2
    NO_BITMAP = 3
    NO_PKT_BUFFER = 4
    PSN_OOR_WINDOW = 5
    SEQ_ERR = 6


_DATA = int(PacketType.DATA)
_pack_data_hdr, _pack_imm, _pack_crc = DATA_HDR.pack, IMM.pack, CRC.pack
_SACK_MODES = frozenset(int(m) for m in SackMode)
_NACK_REASONS = frozenset(int(r) for r in NackReason)
MAX_PSN = 0xFFFFFFFE


@dataclass(frozen=True, slots=True)
class DataPacket:
    dest_qpn: int
    psn: int
    ev: int
    opcode: Opcode
    remote_offset: int
    length: int
    timestamp_ns: int
    flags: int = 0
    imm: int | None = None
    payload: bytes = b""


@dataclass(frozen=True, slots=True)
class SackPacket:
    dest_qpn: int
    cum_psn: int
    sack_base: int
    bitmap: int
    ev: int
    timestamp_ns: int
    ooo_count: int = 0
    received_bytes: int = 0
    mode: SackMode = SackMode.NONE
    flags: int = 0


@dataclass(frozen=True, slots=True)
class NackPacket:
    dest_qpn: int
    psn: int
    ev: int
    timestamp_ns: int
    reason: NackReason


@dataclass(frozen=True, slots=True)
class ProbePacket:
    """EV probe request (``response=False``) or response (``response=True``)."""

    dest_qpn: int
    probe_id: int
    req_ev: int
    rsp_ev: int
    timestamp_ns: int
    response: bool = False


@dataclass(frozen=True, slots=True)
class CnpPacket:
    """RoCEv2 congestion notification: CE-marked data arrived on ``ev`` (latest ``psn``)."""

    dest_qpn: int
    ev: int
    psn: int


Packet = DataPacket | SackPacket | NackPacket | ProbePacket | CnpPacket


def _seal(header_and_body: bytes) -> bytes:
    return header_and_body + CRC.pack(crc32(header_and_body))


def encode_data_parts(dest_qpn: int, psn: int, ev: int, opcode: int, flags: int,
                      remote_offset: int, timestamp_ns: int, imm: int | None,
                      payload, length: int = -1) -> bytes:
    """The one DATA encoder (hot path): a data packet as bytes.

    ``payload``: bytes-like, may be a memoryview; ``length``: the length field, default
    ``len(payload)`` (a trimmed packet keeps its original length and carries no payload).
    """
    if length < 0:
        length = len(payload)
    body = _pack_data_hdr(VERSION, _DATA, opcode, flags, dest_qpn, psn, ev,
                          remote_offset, length, timestamp_ns)
    if imm is not None:
        body += _pack_imm(imm)
    body += payload                  # one copy, then one CRC pass over contiguous bytes
    return body + _pack_crc(crc32(body))


def encode(pkt: Packet) -> bytes:
    """Serialise a packet object; raises ValueError/struct.error on out-of-range fields."""
    if isinstance(pkt, DataPacket):
        has_imm = int(pkt.opcode) in _IMM_OPCODE_VALUES
        if has_imm != (pkt.imm is not None):
            raise ValueError(f"opcode {pkt.opcode!r} and imm={pkt.imm!r} disagree")
        if pkt.flags & FLAG_TRIMMED_LASTHOP and not pkt.flags & FLAG_TRIMMED:
            raise ValueError("FLAG_TRIMMED_LASTHOP needs FLAG_TRIMMED")
        if pkt.flags & FLAG_TRIMMED:
            if pkt.payload:
                raise ValueError("a trimmed packet carries no payload")
            return encode_data_parts(pkt.dest_qpn, pkt.psn, pkt.ev, pkt.opcode, pkt.flags,
                                     pkt.remote_offset, pkt.timestamp_ns, pkt.imm, b"", pkt.length)
        if pkt.length != len(pkt.payload):
            raise ValueError("length must equal len(payload)")
        return encode_data_parts(pkt.dest_qpn, pkt.psn, pkt.ev, pkt.opcode, pkt.flags,
                                 pkt.remote_offset, pkt.timestamp_ns, pkt.imm, pkt.payload)
    if isinstance(pkt, SackPacket):
        return _seal(SACK_HDR.pack(VERSION, PacketType.SACK, pkt.mode, pkt.flags, pkt.dest_qpn,
                                   pkt.cum_psn, pkt.sack_base, pkt.bitmap, pkt.ev,
                                   pkt.timestamp_ns, pkt.ooo_count, pkt.received_bytes))
    if isinstance(pkt, NackPacket):
        return _seal(NACK_HDR.pack(VERSION, PacketType.NACK, pkt.reason, 0, pkt.dest_qpn, pkt.psn,
                                   pkt.ev, pkt.timestamp_ns))
    if isinstance(pkt, ProbePacket):
        ptype = PacketType.PROBE_RSP if pkt.response else PacketType.PROBE_REQ
        return _seal(PROBE_HDR.pack(VERSION, ptype, 0, 0, pkt.dest_qpn, pkt.probe_id, 0,
                                    pkt.req_ev, pkt.rsp_ev, pkt.timestamp_ns))
    if isinstance(pkt, CnpPacket):
        return encode_cnp(pkt.dest_qpn, pkt.ev, pkt.psn)
    raise TypeError(f"not an MRC packet: {type(pkt).__name__}")


def encode_cnp(dest_qpn: int, ev: int, psn: int) -> bytes:
    """One CNP as bytes (layout in the module docstring); struct.error on out-of-range fields."""
    return _seal(CNP_HDR.pack(VERSION, PacketType.CNP, 0, 0, dest_qpn, ev, psn))


def peek_dest_qpn(data: bytes) -> int:
    """Destination QPN of a datagram (bytes 4..8) without validating it; ProtocolError if short."""
    if len(data) < PREFIX.size:
        raise ProtocolError(f"datagram of {len(data)} bytes is shorter than the prefix")
    return int.from_bytes(data[4:8], "big")


def check_crc(data) -> None:
    """Raise ProtocolError unless the trailing CRC-32 matches the bytes before it."""
    n = len(data)
    if n < PREFIX.size + CRC_BYTES:
        raise ProtocolError(f"datagram of {n} bytes is too short")
    if crc32(memoryview(data)[:n - 4]) != int.from_bytes(data[n - 4:], "big"):
        raise ProtocolError("CRC mismatch")


def unpack_data(data: bytes) -> tuple:
    """Validate a DATA packet (CRC included) and return its fields as a tuple.

    Returns (opcode, flags, dest_qpn, psn, ev, remote_offset, length,
    timestamp_ns, imm_or_None, payload_start, payload_end); the payload is
    ``data[payload_start:payload_end]``. Raises ProtocolError.
    """
    n = len(data)
    if n < DATA_HDR.size + CRC_BYTES:
        raise ProtocolError(f"data packet of {n} bytes is too short")
    (ver, ptype, opcode, flags, qpn, psn, ev, off, length,
     ts) = DATA_HDR.unpack_from(data)
    if ver != VERSION or ptype != 1:
        raise ProtocolError(f"not a version-{VERSION} data packet (ver={ver}, type={ptype})")
    if opcode not in _OPCODE_VALUES:
        raise ProtocolError(f"unknown opcode {opcode}")
    if flags & ~DATA_FLAGS:
        raise ProtocolError(f"unknown data flags {flags:#x}")
    if flags & FLAG_TRIMMED_LASTHOP and not flags & FLAG_TRIMMED:
        raise ProtocolError("FLAG_TRIMMED_LASTHOP without FLAG_TRIMMED")
    if psn > MAX_PSN:
        raise ProtocolError("reserved PSN")
    start = DATA_HDR.size
    imm = None
    if opcode in _IMM_OPCODE_VALUES:
        if n < start + IMM.size + CRC_BYTES:
            raise ProtocolError("data packet too short for its immediate")
        imm = IMM.unpack_from(data, start)[0]
        start += IMM.size
    end = n - CRC_BYTES
    if flags & FLAG_TRIMMED:
        if end != start:
            raise ProtocolError("trimmed packet carries payload bytes")
    elif end - start != length:
        raise ProtocolError(f"length field {length} != payload bytes {end - start}")
    if off + length > 0xFFFFFFFFFFFFFFFF:
        raise ProtocolError("remote offset + length overflows 64 bits")
    if crc32(memoryview(data)[:end]) != int.from_bytes(data[end:], "big"):
        raise ProtocolError("CRC mismatch")
    return (opcode, flags, qpn, psn, ev, off, length, ts, imm, start, end)


def unpack_sack(data: bytes) -> tuple:
    """Validate a SACK; return (mode, flags, dest_qpn, cum_psn, sack_base, bitmap, ev,
    timestamp_ns, ooo_count, received_bytes). Raises ProtocolError."""
    if len(data) != SACK_HDR.size + CRC_BYTES:
        raise ProtocolError(f"SACK must be {SACK_HDR.size + CRC_BYTES} bytes, got {len(data)}")
    f = SACK_HDR.unpack_from(data)
    if f[0] != VERSION or f[1] != 2:
        raise ProtocolError("not a SACK")
    if f[2] not in _SACK_MODES:
        raise ProtocolError(f"unknown SACK mode {f[2]}")
    if f[3] & ~SACK_FLAGS:
        raise ProtocolError(f"unknown SACK flags {f[3]:#x}")
    if f[5] > MAX_PSN + 1 or f[6] > MAX_PSN:
        raise ProtocolError("reserved PSN in SACK")
    if crc32(memoryview(data)[:SACK_HDR.size]) != CRC.unpack_from(data, SACK_HDR.size)[0]:
        raise ProtocolError("CRC mismatch")
    return f[2:]


def parse(data: bytes) -> Packet:
    """Parse one datagram into a packet object.

    Raises ProtocolError for any byte string that is not a valid MRC packet
    (wrong length, version, type, opcode, flags, enum value, non-zero pad,
    length mismatch or CRC mismatch).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) < PREFIX.size + CRC_BYTES:
        raise ProtocolError(f"datagram of {len(data)} bytes is too short")
    ptype = data[1]
    if ptype == 1:
        (opcode, flags, qpn, psn, ev, off, length, ts, imm, start,
         end) = unpack_data(data)
        return DataPacket(qpn, psn, ev, Opcode(opcode), off, length, ts, flags, imm,
                          data[start:end])
    if ptype == 2:
        (mode, flags, qpn, cum, base, bitmap, ev, ts, ooo, rcvd) = unpack_sack(data)
        return SackPacket(qpn, cum, base, bitmap, ev, ts, ooo, rcvd, SackMode(mode), flags)
    if ptype == 3:
        if len(data) != NACK_HDR.size + CRC_BYTES:
            raise ProtocolError("NACK has the wrong length")
        ver, _, reason, flags, qpn, psn, ev, ts = NACK_HDR.unpack_from(data)
        if ver != VERSION or reason not in _NACK_REASONS or flags or psn > MAX_PSN:
            raise ProtocolError("malformed NACK")
        check_crc(data)
        return NackPacket(qpn, psn, ev, ts, NackReason(reason))
    if ptype in (4, 5):
        if len(data) != PROBE_HDR.size + CRC_BYTES:
            raise ProtocolError("EV probe has the wrong length")
        ver, _, sub, flags, qpn, probe_id, pad, req_ev, rsp_ev, ts = PROBE_HDR.unpack_from(data)
        if ver != VERSION or sub or flags or pad:
            raise ProtocolError("malformed EV probe")
        check_crc(data)
        return ProbePacket(qpn, probe_id, req_ev, rsp_ev, ts, response=(ptype == 5))
    if ptype == PacketType.CNP:
        if len(data) != CNP_HDR.size + CRC_BYTES:
            raise ProtocolError("CNP has the wrong length")
        ver, _, sub, flags, qpn, ev, psn = CNP_HDR.unpack_from(data)
        if ver != VERSION or sub or flags or psn > MAX_PSN:
            raise ProtocolError("malformed CNP")
        check_crc(data)
        return CnpPacket(qpn, ev, psn)
    raise ProtocolError(f"unknown packet type {ptype}")
