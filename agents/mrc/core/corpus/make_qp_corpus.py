"""Writes the seed corpus of the QP fuzz target (agents/mrc/core/fuzz_qp.c).

Usage (from anywhere): python agents/mrc/core/corpus/make_qp_corpus.py [OUT_DIR]
OUT_DIR defaults to qp/ beside this script, the committed corpus; the output is deterministic.
Every file is a record sequence as fuzz_qp.c reads it ([op u8][len u16][bytes]): datagrams a
peer would send to the target's QP 7 (made by agents/mrc/packet.py's encoders), timer ticks
between them, and the CRC-fixing op bit set on a few, so that mutations start from the
protocol's real paths: in-order and out-of-order data with and without immediates, trims,
SACKs and NACKs for the target's own write, probes, CNPs.
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
if str(ROOT) not in sys.path:   # run as a script from any directory
    sys.path.insert(0, str(ROOT))

from agents.mrc import packet as pk  # noqa: E402

QPN = 7
O = pk.Opcode
RECV, RECV_CE, TICK, BATCH, FIX_CRC = 0, 1, 2, 3, 4


def rec(op: int, data: bytes) -> bytes:
    return struct.pack("!BH", op, len(data)) + data


def tick(us: int) -> bytes:
    return struct.pack("!BH", TICK, us)   # the clock advances by len microseconds, no bytes


def data(psn: int, opcode=O.WRITE_MIDDLE, imm=None, flags=0, payload=bytes(64)) -> bytes:
    length = len(payload) if not flags & pk.FLAG_TRIMMED else 64
    return pk.encode(pk.DataPacket(QPN, psn, 1 + psn % 4, opcode, psn * 64, length, 1000 + psn, flags,
                                   imm, b"" if flags & pk.FLAG_TRIMMED else payload))


def corpus() -> dict[str, bytes]:
    """File name -> record sequence."""
    sack = lambda cum, base=0, bitmap=0, ev=1, mode=pk.SackMode.NONE: pk.encode(pk.SackPacket(  # noqa: E731
        QPN, cum, base, bitmap, ev, 1, 0, cum * 1024, mode))
    return {
        "in_order_write": b"".join(rec(RECV, data(p, O.WRITE_FIRST if p == 0 else O.WRITE_MIDDLE))
                                   for p in range(4)) + rec(RECV, data(4, O.WRITE_LAST_WITH_IMM, imm=9))
                          + tick(600),
        "out_of_order_and_dup": b"".join(rec(RECV, data(p)) for p in (2, 0, 3, 1, 1)) + tick(2000),
        "trims_and_ce": rec(RECV, data(0, flags=pk.FLAG_TRIMMED)) + rec(
            RECV, data(1, flags=pk.FLAG_TRIMMED | pk.FLAG_TRIMMED_LASTHOP)) + rec(RECV_CE, data(2))
                        + rec(RECV_CE, data(3)),
        "sacks_for_our_write": rec(RECV, sack(4)) + rec(RECV, sack(4, 6, 0b101, ev=2,
                                                              mode=pk.SackMode.SKIP_ONCE))
                               + tick(12000) + rec(RECV, sack(20)),
        "nacks": b"".join(rec(RECV, pk.encode(pk.NackPacket(QPN, psn, 1 + psn % 4, 1, reason)))
                          for psn, reason in enumerate(pk.NackReason)),
        "probes_and_cnp": rec(RECV, pk.encode(pk.ProbePacket(QPN, 3, 1, 2, 99))) + rec(
            RECV, pk.encode(pk.ProbePacket(QPN, 0, 2, 1, 5, response=True)))
                          + rec(RECV, pk.encode_cnp(QPN, 1, 0)) + tick(6000),
        "batch_and_fixed_crc": rec(BATCH, data(0) + data(1)) + rec(RECV | FIX_CRC, data(2)[:-4] + bytes(4)),
        "timeouts_to_err": b"".join(tick(60000) for _ in range(20)),
    }


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent / "qp"
    out.mkdir(parents=True, exist_ok=True)
    for name, blob in sorted(corpus().items()):
        (out / name).write_bytes(blob)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
