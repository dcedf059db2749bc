#include "mrcn_rng.h"

#define MRCN_PCG_MULT 6364136223846793005ULL

void mrcn_rng_seed(mrcn_rng *rng, uint64_t seed, uint64_t stream)
{
    rng->state = 0;
    rng->inc = (stream << 1) | 1u;
    (void)mrcn_rng_u32(rng);
    rng->state += seed;
    (void)mrcn_rng_u32(rng);
}

uint32_t mrcn_rng_u32(mrcn_rng *rng)
{
    uint64_t old = rng->state;
    rng->state = old * MRCN_PCG_MULT + rng->inc;
    uint32_t xorshifted = (uint32_t)(((old >> 18) ^ old) >> 27);
    uint32_t rot = (uint32_t)(old >> 59);
    return (xorshifted >> rot) | (xorshifted << ((0u - rot) & 31u));
}

double mrcn_rng_double(mrcn_rng *rng)
{
    uint32_t a = mrcn_rng_u32(rng) >> 5;
    uint32_t b = mrcn_rng_u32(rng) >> 6;
    return ((double)a * 67108864.0 + (double)b) * (1.0 / 9007199254740992.0);
}

uint32_t mrcn_rng_below(mrcn_rng *rng, uint64_t n)
{
    if (n <= 1)
        return 0;
    unsigned bits = 0;  /* bit length of n - 1: the mask rng.py draws with */
    for (uint64_t v = n - 1; v; v >>= 1)
        bits++;
    uint32_t mask = bits >= 32 ? UINT32_MAX : (uint32_t)((1u << bits) - 1u);
    for (;;) {
        uint32_t r = mrcn_rng_u32(rng) & mask;
        if (r < n)
            return r;
    }
}

void mrcn_rng_shuffle_u32(mrcn_rng *rng, uint32_t *items, uint32_t count)
{
    for (uint32_t i = count; i-- > 1;) {
        uint32_t j = mrcn_rng_below(rng, (uint64_t)i + 1);
        uint32_t t = items[i];
        items[i] = items[j];
        items[j] = t;
    }
}
