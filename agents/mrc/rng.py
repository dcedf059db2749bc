"""PCG32, the QP's only source of randomness, implemented bit for bit by both engines.

O'Neill, "PCG: A Family of Simple Fast Space-Efficient Statistically Good Algorithms
for Random Number Generation" (2014), generator ``pcg32`` (XSH RR 64/32) with
``pcg32_srandom_r`` seeding; the C twin is ``agents/mrc/core/mrcn_rng.c``. Python's
MT19937 is not used inside the QP: a native engine would have to emulate it, and its
``shuffle`` and ``random`` are CPython implementation details.

Integers wrap explicitly at 64 bits (state) and 32 bits (outputs), as in C.
"""
from __future__ import annotations

import random as _random

_MULT = 6364136223846793005
_M64 = (1 << 64) - 1
_M32 = (1 << 32) - 1


class Pcg32:
    """A seeded PCG32 stream: ``Pcg32(seed, stream=0)``, both u64 (wrapped to 64 bits).

    Draws: :meth:`next_u32` (u32), :meth:`random` (float in [0, 1), 53 bits from two
    draws, the layout of CPython's ``random()``), :meth:`randbelow` (int in [0, n) by
    masked rejection), :meth:`shuffle` (Fisher-Yates from the end, in place).
    """

    __slots__ = ("state", "inc")

    def __init__(self, seed: int, stream: int = 0):
        self.state = 0
        self.inc = ((stream << 1) | 1) & _M64
        self.next_u32()
        self.state = (self.state + seed) & _M64
        self.next_u32()

    @classmethod
    def from_random(cls, rng: _random.Random) -> "Pcg32":
        """A PCG32 seeded from a ``random.Random`` (its next 128 bits: seed, then stream)."""
        return cls(rng.getrandbits(64), rng.getrandbits(64))

    def next_u32(self) -> int:
        old = self.state
        self.state = (old * _MULT + self.inc) & _M64
        xorshifted = (((old >> 18) ^ old) >> 27) & _M32
        rot = old >> 59
        return ((xorshifted >> rot) | (xorshifted << ((-rot) & 31))) & _M32

    def random(self) -> float:
        a = self.next_u32() >> 5
        b = self.next_u32() >> 6
        return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)

    def randbelow(self, n: int) -> int:
        """Uniform int in [0, n), 1 <= n <= 2**32; ValueError otherwise."""
        if not 1 <= n <= 1 << 32:
            raise ValueError(f"randbelow({n}): n must be in [1, 2**32]")
        if n == 1:
            return 0   # no draw: the C twin returns at once too
        mask = (1 << (n - 1).bit_length()) - 1
        while True:
            r = self.next_u32() & mask
            if r < n:
                return r

    def shuffle(self, items: list) -> None:
        for i in range(len(items) - 1, 0, -1):
            j = self.randbelow(i + 1)
            items[i], items[j] = items[j], items[i]
