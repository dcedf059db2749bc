# The MRC wire codec (agents/mrc/core/mrcn_codec.h), the twin of agents.mrc.packet.
#
# parse/encode/encode_data_parts/peek_dest_qpn/crc32 take and return what packet.py's
# functions of the same names do (its dataclasses and enums, ProtocolError).
# Exceptions of encode(): TypeError for a non-packet; ValueError for an inconsistent
# DataPacket (packet.encode's checks, in its order, made by the C encoder); struct.error
# for a field that struct.pack would refuse (not an integer, or out of its u8/u16/u32/u64
# range), raised after the consistency checks as packet.encode packs after checking;
# TypeError where packet.encode raises it (a non-integer opcode or flags, not a packet,
# a payload that is not bytes-like: the binding needs a C-contiguous buffer, where Python
# would also accept any object with len() until it concatenates it).
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
import operator as _operator
import struct as _struct

from agents.mrc import packet as _pk

cdef extern from "mrcn_codec.h":
    ctypedef struct mrcn_data:
        uint32_t dest_qpn
        uint32_t psn
        uint32_t ev
        uint8_t opcode
        uint8_t flags
        uint8_t has_imm
        uint32_t imm
        uint64_t remote_offset
        uint32_t length
        uint64_t timestamp_ns
        size_t payload_off
        size_t payload_len
    ctypedef struct mrcn_sack:
        uint32_t dest_qpn
        uint32_t cum_psn
        uint32_t sack_base
        uint64_t bitmap
        uint32_t ev
        uint64_t timestamp_ns
        uint32_t ooo_count
        uint64_t received_bytes
        uint8_t mode
        uint8_t flags
    ctypedef struct mrcn_nack:
        uint32_t dest_qpn
        uint32_t psn
        uint32_t ev
        uint64_t timestamp_ns
        uint8_t reason
    ctypedef struct mrcn_probe:
        uint32_t dest_qpn
        uint16_t probe_id
        uint32_t req_ev
        uint32_t rsp_ev
        uint64_t timestamp_ns
        uint8_t response
    ctypedef struct mrcn_cnp:
        uint32_t dest_qpn
        uint32_t ev
        uint32_t psn
    ctypedef union mrcn_packet_u:
        mrcn_data data
        mrcn_sack sack
        mrcn_nack nack
        mrcn_probe probe
        mrcn_cnp cnp
    ctypedef struct mrcn_packet:
        uint8_t type
        mrcn_packet_u u
    int MRCN_OK, MRCN_EPROTO, MRCN_ECRC, MRCN_EINVAL
    int MRCN_PT_DATA, MRCN_PT_SACK, MRCN_PT_NACK, MRCN_PT_PROBE_REQ, MRCN_PT_PROBE_RSP
    int MRCN_PT_CNP
    size_t MRCN_MAX_CONTROL_BYTES
    uint32_t mrcn_crc32_update(uint32_t crc, const uint8_t *buf, size_t len) nogil
    int mrcn_peek_dest_qpn(const uint8_t *buf, size_t len, uint32_t *dest_qpn)
    int mrcn_decode(const uint8_t *buf, size_t len, mrcn_packet *out)
    int mrcn_opcode_has_imm(uint8_t opcode)
    size_t mrcn_data_wire_len(int has_imm, size_t payload_len)
    int mrcn_encode_data_parts(uint8_t *out, size_t cap, uint32_t dest_qpn, uint32_t psn,
                               uint32_t ev, uint8_t opcode, uint8_t flags,
                               uint64_t remote_offset, uint64_t timestamp_ns, int has_imm,
                               uint32_t imm, const uint8_t *payload, size_t payload_len,
                               uint32_t length)
    int mrcn_encode_data(const mrcn_data *pkt, const uint8_t *payload, uint8_t *out, size_t cap)
    int mrcn_encode(const mrcn_packet *pkt, const uint8_t *payload, uint8_t *out, size_t cap)

cdef extern from "mrcn.h":
    const char *mrcn_strerror(int status)

_ProtocolError = _pk.ProtocolError
_DataPacket, _SackPacket, _NackPacket = _pk.DataPacket, _pk.SackPacket, _pk.NackPacket
_ProbePacket, _CnpPacket = _pk.ProbePacket, _pk.CnpPacket
_Opcode, _SackMode, _NackReason = _pk.Opcode, _pk.SackMode, _pk.NackReason


cdef class _Fields:
    """Converts packet fields as struct.pack would, remembering the first refusal so that
    it is raised only after the C encoder's consistency checks (packet.encode's order)."""

    cdef object error

    cdef uint64_t take(self, object value, int bits):
        """The field as an unsigned `bits`-bit integer; 0 and a recorded error if it is not one."""
        try:
            value = _operator.index(value)
        except TypeError:
            if self.error is None:
                self.error = _struct.error(f"required argument is not an integer: {value!r}")
            return 0
        if value < 0 or value >> bits:
            if self.error is None:
                self.error = _struct.error(f"{value} out of range for a u{bits} field")
            return 0
        return <uint64_t>value

    cdef check(self):
        if self.error is not None:
            raise self.error


cdef inline bytes _as_bytes(data):
    return data if type(data) is bytes else bytes(data)


def crc32(data, value=0):
    """zlib.crc32(data, value) through ISA-L's crc32_gzip_refl."""
    cdef const uint8_t[::1] view = memoryview(data).cast("B")
    cdef uint32_t start = value
    if view.shape[0] == 0:
        return start
    return mrcn_crc32_update(start, &view[0], view.shape[0])


def peek_dest_qpn(data):
    """packet.peek_dest_qpn: the QPN at bytes 4..8; ProtocolError if shorter than the prefix."""
    cdef bytes b = _as_bytes(data)
    cdef uint32_t qpn = 0
    if mrcn_peek_dest_qpn(<const uint8_t *>PyBytes_AS_STRING(b), len(b), &qpn) != MRCN_OK:
        raise _ProtocolError(f"datagram of {len(b)} bytes is shorter than the prefix")
    return qpn


def parse(data):
    """packet.parse: one datagram as a packet object; ProtocolError if it is not valid."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise _ProtocolError(f"expected bytes, got {type(data).__name__}")
    cdef bytes b = _as_bytes(data)
    cdef mrcn_packet p
    cdef mrcn_data *d
    cdef mrcn_sack *s
    cdef mrcn_nack *k
    cdef mrcn_probe *r
    cdef mrcn_cnp *c
    cdef int rc = mrcn_decode(<const uint8_t *>PyBytes_AS_STRING(b), len(b), &p)
    if rc != MRCN_OK:
        raise _ProtocolError(mrcn_strerror(rc).decode())
    if p.type == MRCN_PT_DATA:
        d = &p.u.data
        return _DataPacket(d.dest_qpn, d.psn, d.ev, _Opcode(d.opcode), d.remote_offset,
                           d.length, d.timestamp_ns, d.flags, d.imm if d.has_imm else None,
                           b[d.payload_off:d.payload_off + d.payload_len])
    if p.type == MRCN_PT_SACK:
        s = &p.u.sack
        return _SackPacket(s.dest_qpn, s.cum_psn, s.sack_base, s.bitmap, s.ev, s.timestamp_ns,
                           s.ooo_count, s.received_bytes, _SackMode(s.mode), s.flags)
    if p.type == MRCN_PT_NACK:
        k = &p.u.nack
        return _NackPacket(k.dest_qpn, k.psn, k.ev, k.timestamp_ns, _NackReason(k.reason))
    if p.type == MRCN_PT_PROBE_REQ or p.type == MRCN_PT_PROBE_RSP:
        r = &p.u.probe
        return _ProbePacket(r.dest_qpn, r.probe_id, r.req_ev, r.rsp_ev, r.timestamp_ns,
                            response=bool(r.response))
    c = &p.u.cnp
    return _CnpPacket(c.dest_qpn, c.ev, c.psn)


def encode_data_parts(dest_qpn, psn, ev, opcode, flags, remote_offset, timestamp_ns, imm,
                      payload, length=-1):
    """packet.encode_data_parts: header, immediate unless imm is None, payload, CRC."""
    cdef const uint8_t[::1] pv = memoryview(payload).cast("B")
    cdef size_t n = pv.shape[0]
    cdef _Fields f = _Fields()
    if length < 0:
        length = n
    cdef int has_imm = imm is not None
    cdef uint32_t c_qpn = f.take(dest_qpn, 32), c_psn = f.take(psn, 32), c_ev = f.take(ev, 32)
    cdef uint8_t c_op = f.take(opcode, 8), c_flags = f.take(flags, 8)
    cdef uint64_t c_off = f.take(remote_offset, 64)
    cdef uint32_t c_len = f.take(length, 32)
    cdef uint64_t c_ts = f.take(timestamp_ns, 64)
    cdef uint32_t c_imm = f.take(imm, 32) if has_imm else 0
    f.check()
    return _data_bytes(c_qpn, c_psn, c_ev, c_op, c_flags, c_off, c_ts, has_imm, c_imm,
                       &pv[0] if n else NULL, n, c_len)


cdef bytes _data_bytes(uint32_t qpn, uint32_t psn, uint32_t ev, uint8_t op, uint8_t flags,
                       uint64_t off, uint64_t ts, int has_imm, uint32_t imm,
                       const uint8_t *payload, size_t n, uint32_t length):
    cdef size_t total = mrcn_data_wire_len(has_imm, n)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    cdef int rc = mrcn_encode_data_parts(<uint8_t *>PyBytes_AS_STRING(out), total, qpn, psn, ev,
                                         op, flags, off, ts, has_imm, imm, payload, n, length)
    if rc < 0:
        raise ValueError(mrcn_strerror(rc).decode())
    return out


cdef bytes _encode_data(pkt):
    cdef _Fields f = _Fields()
    cdef mrcn_data d
    cdef const uint8_t[::1] pv = memoryview(pkt.payload).cast("B")
    # int(opcode) first, as packet.encode; an opcode outside u8 is never an immediate's.
    opcode = int(pkt.opcode)
    d.opcode = opcode if 0 <= opcode <= 0xFF else 0
    f.take(pkt.opcode, 8)
    d.has_imm = pkt.imm is not None
    # packet.encode tests flags bits before packing: keep the low byte (Python's & on any int).
    flags = pkt.flags
    try:
        d.flags = flags & 0xFF
    except TypeError:
        # packet.encode's `flags & ...` raises only after its immediate check.
        if mrcn_opcode_has_imm(d.opcode) != d.has_imm:
            raise ValueError(f"opcode {pkt.opcode!r} and imm={pkt.imm!r} disagree") from None
        raise
    f.take(flags, 8)
    d.payload_len = pv.shape[0]
    length = pkt.length
    if d.flags & 0x04:
        # Trimmed: packet.encode packs pkt.length itself (struct.error if it is no u32).
        d.length = f.take(length, 32)
    elif length == d.payload_len:
        # Not trimmed: packet.encode only tests `pkt.length != len(payload)` and then packs
        # len(payload), so a length equal to it in value (1.0, True) is no struct error.
        d.length = f.take(d.payload_len, 32)
    else:
        # C's length test must see Python's verdict on `length != len(payload)`.
        d.length = <uint32_t>(d.payload_len + 1)
    d.dest_qpn = f.take(pkt.dest_qpn, 32)
    d.psn = f.take(pkt.psn, 32)
    d.ev = f.take(pkt.ev, 32)
    d.remote_offset = f.take(pkt.remote_offset, 64)
    d.timestamp_ns = f.take(pkt.timestamp_ns, 64)
    d.imm = f.take(pkt.imm, 32) if d.has_imm else 0
    d.payload_off = 0
    cdef size_t total = mrcn_data_wire_len(d.has_imm, d.payload_len)
    if d.flags & 0x04:
        total = mrcn_data_wire_len(d.has_imm, 0)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    cdef int rc = mrcn_encode_data(&d, &pv[0] if d.payload_len else NULL,
                                   <uint8_t *>PyBytes_AS_STRING(out), total)
    if rc == MRCN_EINVAL:
        raise ValueError(f"inconsistent DataPacket: {pkt!r}")
    f.check()
    if rc < 0:
        raise ValueError(mrcn_strerror(rc).decode())
    return out


def encode(pkt):
    """packet.encode: a packet object as bytes (exceptions: see the head of this file)."""
    if isinstance(pkt, _DataPacket):
        return _encode_data(pkt)
    cdef _Fields f = _Fields()
    cdef mrcn_packet p
    cdef uint8_t buf[64]
    if isinstance(pkt, _SackPacket):
        p.type = MRCN_PT_SACK
        p.u.sack.mode = f.take(pkt.mode, 8)
        p.u.sack.flags = f.take(pkt.flags, 8)
        p.u.sack.dest_qpn = f.take(pkt.dest_qpn, 32)
        p.u.sack.cum_psn = f.take(pkt.cum_psn, 32)
        p.u.sack.sack_base = f.take(pkt.sack_base, 32)
        p.u.sack.bitmap = f.take(pkt.bitmap, 64)
        p.u.sack.ev = f.take(pkt.ev, 32)
        p.u.sack.timestamp_ns = f.take(pkt.timestamp_ns, 64)
        p.u.sack.ooo_count = f.take(pkt.ooo_count, 32)
        p.u.sack.received_bytes = f.take(pkt.received_bytes, 64)
    elif isinstance(pkt, _NackPacket):
        p.type = MRCN_PT_NACK
        p.u.nack.reason = f.take(pkt.reason, 8)
        p.u.nack.dest_qpn = f.take(pkt.dest_qpn, 32)
        p.u.nack.psn = f.take(pkt.psn, 32)
        p.u.nack.ev = f.take(pkt.ev, 32)
        p.u.nack.timestamp_ns = f.take(pkt.timestamp_ns, 64)
    elif isinstance(pkt, _ProbePacket):
        p.u.probe.response = bool(pkt.response)
        p.type = MRCN_PT_PROBE_RSP if p.u.probe.response else MRCN_PT_PROBE_REQ
        p.u.probe.dest_qpn = f.take(pkt.dest_qpn, 32)
        p.u.probe.probe_id = f.take(pkt.probe_id, 16)
        p.u.probe.req_ev = f.take(pkt.req_ev, 32)
        p.u.probe.rsp_ev = f.take(pkt.rsp_ev, 32)
        p.u.probe.timestamp_ns = f.take(pkt.timestamp_ns, 64)
    elif isinstance(pkt, _CnpPacket):
        p.type = MRCN_PT_CNP
        p.u.cnp.dest_qpn = f.take(pkt.dest_qpn, 32)
        p.u.cnp.ev = f.take(pkt.ev, 32)
        p.u.cnp.psn = f.take(pkt.psn, 32)
    else:
        raise TypeError(f"not an MRC packet: {type(pkt).__name__}")
    f.check()
    cdef int rc = mrcn_encode(&p, NULL, buf, sizeof(buf))
    if rc < 0:
        raise ValueError(mrcn_strerror(rc).decode())
    return PyBytes_FromStringAndSize(<char *>buf, rc)
