/* A map from a u32 key (an EV id) to a small value, in insertion order: the twin of the
 * Python dicts the responder and its reverse EV set keep per EV (responder.py's
 * reverse_evs and _ce_run, reverse.py's _bad, _strikes and _seen).
 *
 * Entries stay in insertion order, as a dict's (an update keeps the entry's place,
 * a deletion removes it and later entries keep their order), so a binding can return
 * the same dict. Lookup is a linear-probing index over the entries. */
#ifndef MRCN_EVMAP_H
#define MRCN_EVMAP_H

#include <stddef.h>
#include <stdint.h>

#include "mrcn.h"

/* What a map keeps per key; each map uses the fields its Python dict holds. */
typedef struct mrcn_evmap_val {
    int64_t a;
    int64_t b;
    double t;     /* seconds */
} mrcn_evmap_val;

typedef struct mrcn_evmap {
    uint32_t *keys;          /* insertion order */
    mrcn_evmap_val *vals;
    size_t n, cap;
    uint32_t *index;         /* entry position + 1, 0 for an empty slot */
    size_t index_cap;        /* a power of two, >= 2 * cap, or 0 */
} mrcn_evmap;

void mrcn_evmap_init(mrcn_evmap *m);
void mrcn_evmap_free(mrcn_evmap *m);
/* The value of `key`, or NULL. */
mrcn_evmap_val *mrcn_evmap_get(const mrcn_evmap *m, uint32_t key);
/* The value of `key`, appended zeroed if absent; NULL when out of memory. */
mrcn_evmap_val *mrcn_evmap_put(mrcn_evmap *m, uint32_t key);
/* Remove `key` if present (dict.pop(key, None)). */
void mrcn_evmap_del(mrcn_evmap *m, uint32_t key);

#endif
