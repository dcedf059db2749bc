/* libFuzzer target for the propagation delay line (mrcn_delay.c); build and run: fuzz.sh.
 *
 * The input is a program of pushes (a length up to 4300 bytes, content derived from a counter),
 * releases up to a time, and pops. A model (a FIFO of the pushed entries) must agree with
 * the line after every step: the count, the head's due time, how many entries are due, the
 * bytes of the oldest and newest datagram (of every one each 32 steps and at the end), while
 * the arena grows, compacts and wraps. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcn_delay.h"

#define FUZZ_ASSERT(cond)                                                             \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "fuzz_delay: %s:%d: %s\n", __FILE__, __LINE__, #cond);    \
            abort();                                                                  \
        }                                                                             \
    } while (0)

#define MODEL_CAP 4096

typedef struct model_entry {
    double due;
    uint32_t len;
    uint32_t seed;
    int32_t route;
} model_entry;

static uint8_t byte_of(uint32_t seed, uint32_t i)
{
    return (uint8_t)((seed * 2654435761u + i * 40503u) >> 13);
}

/* Every entry's fields; the bytes of the oldest and the newest, of all with `full`. */
static void check(const mrcn_delay_line *l, const model_entry *m, size_t head, size_t n, double now, int full)
{
    FUZZ_ASSERT(l->count == n);
    double due;
    FUZZ_ASSERT(mrcn_dl_head_due(l, &due) == (n > 0));
    if (n > 0)
        FUZZ_ASSERT(due == m[head].due);
    size_t want_due = 0;
    while (want_due < n && m[head + want_due].due <= now)
        want_due++;
    FUZZ_ASSERT(mrcn_dl_due(l, now, SIZE_MAX) == want_due);
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const mrcn_dl_entry *e = mrcn_dl_at(l, i);
        const model_entry *x = &m[head + i];
        FUZZ_ASSERT(e->len == x->len && e->route == x->route && e->due == x->due);
        bytes += x->len;
        if (!full && i != 0 && i + 1 != n)
            continue;
        const uint8_t *b = mrcn_dl_bytes(l, e);
        for (uint32_t k = 0; k < x->len; k++)
            FUZZ_ASSERT(b[k] == byte_of(x->seed, k));
    }
    FUZZ_ASSERT(mrcn_dl_bytes_held(l) == bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static model_entry model[MODEL_CAP];
    static uint8_t buf[9216];
    mrcn_delay_line line;
    mrcn_dl_init(&line, 0.001 * (1 + (size ? data[0] % 50 : 0)));
    size_t head = 0, n = 0;
    uint32_t seed = 1;
    double now = 0.0;
    for (size_t i = 1; i + 2 < size; i += 3) {
        uint8_t op = data[i] % 4;
        uint16_t arg = (uint16_t)(data[i + 1] | data[i + 2] << 8);
        if (op <= 1 && head + n < MODEL_CAP) {   /* push */
            uint32_t len = arg % 4300;   /* up to a 4 KiB datagram with its headers */
            for (uint32_t k = 0; k < len; k++)
                buf[k] = byte_of(seed, k);
            FUZZ_ASSERT(mrcn_dl_push(&line, now, (int32_t)(arg & 0xFF), buf, len) == MRCN_OK);
            model[head + n] = (model_entry){now + line.delay_s, len, seed, (int32_t)(arg & 0xFF)};
            n++;
            seed++;
        } else if (op == 2) {                    /* time passes */
            now += 0.0001 * (arg % 1000);
        } else {                                 /* release what is due, or pop some */
            size_t k = (arg & 1) ? mrcn_dl_due(&line, now, SIZE_MAX) : (size_t)(arg >> 1) % (n + 1);
            mrcn_dl_pop(&line, k);
            head += k;
            n -= k;
        }
        check(&line, model, head, n, now, i % 96 == 1 || i + 5 >= size);
    }
    mrcn_dl_free(&line);
    return 0;
}
