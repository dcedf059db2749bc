"""Writes the seed corpus of the codec fuzz target (agents/mrc/core/fuzz_codec.c).

Usage (from anywhere): python agents/mrc/core/corpus/make_codec_corpus.py [OUT_DIR]
OUT_DIR defaults to codec/ beside this script, the committed corpus; the output is
deterministic, so rerunning it leaves git clean (tests/unit/test_native_codec.py checks).
Every file is one datagram made by agents/mrc/packet.py's encoders: one valid packet of
each type and flag combination the parser accepts, and edge cases it rejects.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
if str(ROOT) not in sys.path:   # run as a script from any directory
    sys.path.insert(0, str(ROOT))

from agents.mrc import packet as pk  # noqa: E402

O = pk.Opcode


def _with_crc(body: bytes) -> bytes:
    return body + pk.CRC.pack(pk.crc32(body))


def corpus() -> dict[str, bytes]:
    """File name -> datagram bytes."""
    payload = bytes(range(16))
    valid = {
        "data_write_first": pk.DataPacket(0x10, 0, 7, O.WRITE_FIRST, 0, 16, 1_000, 0, None,
                                          payload),
        "data_write_middle_rtx_ackreq": pk.DataPacket(
            0x10, 1, 8, O.WRITE_MIDDLE, 16, 16, 2_000, pk.FLAG_RTX | pk.FLAG_ACK_REQ, None,
            payload),
        "data_write_last": pk.DataPacket(0x10, 2, 9, O.WRITE_LAST, 32, 3, 3_000, 0, None, b"end"),
        "data_write_only_imm": pk.DataPacket(0x11, 5, 1, O.WRITE_ONLY_WITH_IMM, 4096, 8, 4_000,
                                             0, 0xCAFEF00D, payload[:8]),
        "data_write_last_imm_empty": pk.DataPacket(0x11, 6, 2, O.WRITE_LAST_WITH_IMM, 0, 0,
                                                   5_000, 0, 1, b""),
        "data_write_only_empty": pk.DataPacket(0x12, 0, 0, O.WRITE_ONLY, 0, 0, 0, 0, None, b""),
        "data_trimmed": pk.DataPacket(0x10, 3, 4, O.WRITE_MIDDLE, 48, 1408, 6_000,
                                      pk.FLAG_TRIMMED, None, b""),
        "data_trimmed_lasthop_imm": pk.DataPacket(
            0x10, 4, 5, O.WRITE_ONLY_WITH_IMM, 0, 1408, 7_000,
            pk.FLAG_TRIMMED | pk.FLAG_TRIMMED_LASTHOP, 42, b""),
        "data_max_fields": pk.DataPacket(0xFFFFFFFF, pk.MAX_PSN, 0xFFFFFFFF, O.WRITE_LAST, 2**64 - 2,
                                         1, 2**64 - 1, pk.FLAG_RTX, None, b"\xff"),
        "sack": pk.SackPacket(0x20, 10, 10, 0, 3, 8_000),
        "sack_ecn_always_skip": pk.SackPacket(0x20, 10, 12, 0b1011, 3, 9_000, 3, 65536,
                                              pk.SackMode.ALWAYS_SKIP, pk.FLAG_ECN_ECHO),
        "sack_cum_max": pk.SackPacket(0x20, pk.MAX_PSN + 1, pk.MAX_PSN, 2**64 - 1, 0, 0, 0, 0,
                                      pk.SackMode.SKIP_ONCE),
        "nack_trimmed": pk.NackPacket(0x30, 11, 6, 10_000, pk.NackReason.TRIMMED),
        "nack_seq_err": pk.NackPacket(0x30, 12, 6, 11_000, pk.NackReason.SEQ_ERR),
        "probe_req": pk.ProbePacket(0x40, 1, 17, 0, 12_000),
        "probe_rsp": pk.ProbePacket(0x40, 0xFFFF, 17, 18, 12_000, response=True),
        "cnp": pk.CnpPacket(0x50, 19, 20),
    }
    files = {name: pk.encode(p) for name, p in valid.items()}
    good_data = files["data_write_first"]
    files.update({
        "short_prefix": good_data[:7],
        "short_min": good_data[:11],
        "short_data_header": good_data[:pk.DATA_HDR.size + 3],
        "data_bad_crc": good_data[:-1] + bytes([good_data[-1] ^ 1]),
        "data_trimmed_with_payload": pk.encode_data_parts(0x10, 3, 4, O.WRITE_MIDDLE,
                                                          pk.FLAG_TRIMMED, 0, 0, None, b"x", 1),
        "data_lasthop_untrimmed": pk.encode_data_parts(0x10, 3, 4, O.WRITE_MIDDLE,
                                                       pk.FLAG_TRIMMED_LASTHOP, 0, 0, None, b""),
        "data_offset_overflow": pk.encode_data_parts(0x10, 3, 4, O.WRITE_LAST, 0, 2**64 - 1, 0,
                                                     None, b"x"),
        "data_reserved_psn": pk.encode_data_parts(0x10, 0xFFFFFFFF, 4, O.WRITE_LAST, 0, 0, 0,
                                                  None, b""),
        "data_imm_missing": pk.encode_data_parts(0x10, 0, 0, O.WRITE_ONLY_WITH_IMM, 0, 0, 0,
                                                 None, b""),
        "data_length_mismatch": pk.encode_data_parts(0x10, 0, 0, O.WRITE_ONLY, 0, 0, 0, None,
                                                     b"abc", 4),
        "sack_bad_mode": _with_crc(pk.SACK_HDR.pack(1, 2, 3, 0, 0x20, 0, 0, 0, 0, 0, 0, 0)),
        "nack_bad_reason": _with_crc(pk.NACK_HDR.pack(1, 3, 0, 0, 0x30, 0, 0, 0)),
        "probe_nonzero_pad": _with_crc(pk.PROBE_HDR.pack(1, 4, 0, 0, 0x40, 1, 1, 0, 0, 0)),
        "cnp_reserved_psn": pk.encode_cnp(0x50, 0, 0xFFFFFFFF),
        "unknown_type": _with_crc(pk.PREFIX.pack(1, 6, 0, 0, 0x60)),
    })
    return files


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent / "codec"
    out.mkdir(parents=True, exist_ok=True)
    for name, data in sorted(corpus().items()):
        (out / f"{name}.bin").write_bytes(data)
    print(f"wrote {len(corpus())} files to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
