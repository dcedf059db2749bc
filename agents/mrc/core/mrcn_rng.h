/* PCG32 (O'Neill 2014, pcg32 XSH RR 64/32): the QP's randomness, bit for bit the
 * same as agents/mrc/rng.py (the specification). */
#ifndef MRCN_RNG_H
#define MRCN_RNG_H

#include <stdint.h>

typedef struct mrcn_rng {
    uint64_t state;
    uint64_t inc;
} mrcn_rng;

void mrcn_rng_seed(mrcn_rng *rng, uint64_t seed, uint64_t stream);
uint32_t mrcn_rng_u32(mrcn_rng *rng);
/* A double in [0, 1) from two draws (53 bits), as rng.py's random(). */
double mrcn_rng_double(mrcn_rng *rng);
/* Uniform in [0, n), 1 <= n <= 2^32 (n as u64), by masked rejection; n == 0 gives 0. */
uint32_t mrcn_rng_below(mrcn_rng *rng, uint64_t n);
/* Fisher-Yates from the end, as rng.py's shuffle(). */
void mrcn_rng_shuffle_u32(mrcn_rng *rng, uint32_t *items, uint32_t count);

#endif
