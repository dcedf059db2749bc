# PCG32 (agents/mrc/core/mrcn_rng.h), the twin of agents.mrc.rng.Pcg32.
from libc.stdint cimport uint32_t, uint64_t

cdef extern from "mrcn_rng.h":
    ctypedef struct mrcn_rng:
        uint64_t state
        uint64_t inc
    void mrcn_rng_seed(mrcn_rng *rng, uint64_t seed, uint64_t stream)
    uint32_t mrcn_rng_u32(mrcn_rng *rng)
    double mrcn_rng_double(mrcn_rng *rng)
    uint32_t mrcn_rng_below(mrcn_rng *rng, uint64_t n)


cdef class Pcg32:
    """The C PCG32: same constructor and draws as :class:`agents.mrc.rng.Pcg32`."""

    cdef mrcn_rng rng

    def __init__(self, seed, stream=0):
        mrcn_rng_seed(&self.rng, <uint64_t>(seed & 0xFFFFFFFFFFFFFFFF),
                      <uint64_t>(stream & 0xFFFFFFFFFFFFFFFF))

    @property
    def state(self):
        return self.rng.state

    @property
    def inc(self):
        return self.rng.inc

    def next_u32(self):
        return mrcn_rng_u32(&self.rng)

    def random(self):
        return mrcn_rng_double(&self.rng)

    def randbelow(self, n):
        if not 1 <= n <= (1 << 32):
            raise ValueError(f"randbelow({n}): n must be in [1, 2**32]")
        return mrcn_rng_below(&self.rng, <uint64_t>n)

    def shuffle(self, list items):
        cdef Py_ssize_t i, j
        for i in range(len(items) - 1, 0, -1):
            j = mrcn_rng_below(&self.rng, <uint64_t>(i + 1))
            items[i], items[j] = items[j], items[i]
