/* Insertion-ordered u32 map (see mrcn_evmap.h). */
#include "mrcn_evmap.h"

#include <stdlib.h>
#include <string.h>

void mrcn_evmap_init(mrcn_evmap *m)
{
    memset(m, 0, sizeof(*m));
}

void mrcn_evmap_free(mrcn_evmap *m)
{
    free(m->keys);
    free(m->vals);
    free(m->index);
    mrcn_evmap_init(m);
}

static size_t slot_of(uint32_t key, size_t index_cap)
{
    /* Fibonacci hashing: EV ids are often small consecutive numbers. The product's HIGH
     * bits are the ones every key bit reaches (its low k bits depend on the key's low k bits
     * only: keys differing above them would all share a slot). index_cap: a power of two. */
    unsigned bits = (unsigned)__builtin_ctzll((unsigned long long)index_cap);
    if (bits == 0)
        return 0;
    return (size_t)((uint32_t)(key * 2654435761u) >> (32u - bits));
}

static size_t find_slot(const mrcn_evmap *m, uint32_t key)
{
    size_t mask = m->index_cap - 1, s = slot_of(key, m->index_cap);
    while (m->index[s] && m->keys[m->index[s] - 1] != key)
        s = (s + 1) & mask;
    return s;
}

static void reindex(mrcn_evmap *m)
{
    memset(m->index, 0, m->index_cap * sizeof(*m->index));
    for (size_t i = 0; i < m->n; i++)
        m->index[find_slot(m, m->keys[i])] = (uint32_t)(i + 1);
}

mrcn_evmap_val *mrcn_evmap_get(const mrcn_evmap *m, uint32_t key)
{
    if (!m->n)
        return NULL;
    uint32_t pos = m->index[find_slot(m, key)];
    return pos ? &m->vals[pos - 1] : NULL;
}

static int grow(mrcn_evmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 8;
    if (cap > UINT32_MAX / 4)
        return MRCN_ENOMEM;
    uint32_t *keys = realloc(m->keys, cap * sizeof(*keys));
    if (!keys)
        return MRCN_ENOMEM;
    m->keys = keys;
    mrcn_evmap_val *vals = realloc(m->vals, cap * sizeof(*vals));
    if (!vals)
        return MRCN_ENOMEM;
    m->vals = vals;
    uint32_t *index = malloc(cap * 2 * sizeof(*index));
    if (!index)
        return MRCN_ENOMEM;
    free(m->index);
    m->index = index;
    m->index_cap = cap * 2;
    m->cap = cap;
    reindex(m);
    return MRCN_OK;
}

mrcn_evmap_val *mrcn_evmap_put(mrcn_evmap *m, uint32_t key)
{
    mrcn_evmap_val *v = mrcn_evmap_get(m, key);
    if (v)
        return v;
    if (m->n == m->cap && grow(m) != MRCN_OK)
        return NULL;
    size_t s = find_slot(m, key);
    m->keys[m->n] = key;
    memset(&m->vals[m->n], 0, sizeof(m->vals[m->n]));
    m->index[s] = (uint32_t)(++m->n);
    return &m->vals[m->n - 1];
}

void mrcn_evmap_del(mrcn_evmap *m, uint32_t key)
{
    if (!m->n)
        return;
    uint32_t pos = m->index[find_slot(m, key)];
    if (!pos)
        return;
    size_t i = pos - 1, later = m->n - i - 1;
    memmove(&m->keys[i], &m->keys[i + 1], later * sizeof(*m->keys));
    memmove(&m->vals[i], &m->vals[i + 1], later * sizeof(*m->vals));
    m->n--;
    /* Deletions are rare (the end of a CE run): rebuilding keeps the probing simple. */
    reindex(m);
}
