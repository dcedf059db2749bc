"""Writes the seed corpus of the delay-line fuzz target (agents/mrc/core/fuzz_delay.c).

Usage (from anywhere): python agents/mrc/core/corpus/make_delay_corpus.py [OUT_DIR]
OUT_DIR defaults to delay/ beside this script, the committed corpus; the output is
deterministic. Every file is a delay byte then [op u8][arg u16 little-endian] steps as
fuzz_delay.c reads them: bursts of 4 KiB pushes that outgrow the first arena, time that
passes by less and more than the delay, releases of what is due and partial pops, so that
mutations start from growth, compaction and ring wrap-around.
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

PUSH, TIME, POP = 0, 2, 3


def step(op: int, arg: int) -> bytes:
    return struct.pack("<BH", op, arg)


def program(delay: int, rounds: int, burst: int, size: int, tick: int) -> bytes:
    out = bytes([delay])
    for _ in range(rounds):
        out += b"".join(step(PUSH, size) for _ in range(burst))
        out += step(TIME, tick) + step(POP, 1)       # release what is due
        out += step(POP, 2 * (burst // 3))           # then pop a third of a burst
    return out


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    shapes = [(9, 40, 20, 4200, 50), (0, 80, 3, 100, 5), (30, 20, 64, 4299, 400), (5, 60, 1, 0, 1)]
    for i, shape in enumerate(shapes):
        (out_dir / f"seed-{i}").write_bytes(program(*shape))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "delay")
