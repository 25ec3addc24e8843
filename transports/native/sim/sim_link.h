/* sim_link.h: what a link and a receiving host do to a frame, written once for the two
 * discrete-event networks (the simulator's, sim_net.c, and the core unit tests',
 * tests/test_core.c), so both model the emulated testbed alike:
 *   - a FIFO link sends frame after frame at its rate and drops at the tail when its queue is full;
 *   - the bottleneck may shape instead, as Mininet's HTB: a token bucket lets a burst through at
 *     once after a lull (a veth has no line rate of its own);
 *   - a busy receiver reads its socket once per poll slot, at a pseudo-random instant inside it;
 *   - a thread of a busy machine wakes late, exponentially on average.
 * Virtual time in microseconds; sizes are Ethernet frames in bytes. Header-only, as event_heap.h. */
#ifndef SIM_LINK_H
#define SIM_LINK_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "ltp_internal.h"   /* ltp_uniform: the project's one generator */

#define LINK_NEVER UINT64_MAX

/* A FIFO link: departure times of the frames it holds, in a ring of cap (its queue). A zeroed
 * one holds nothing; free(f->dep) releases it. The link's own clock, free_at (when it is next
 * free), keeps fractions of a microsecond: a frame's departure is rounded up to the virtual
 * clock's microsecond, but the next frame starts where the last one really ended. (Rounding each
 * frame's transmission up, as this once did, held a link to one frame per whole microsecond:
 * 13 us a frame at 1 Gbit/s, 2 at 10 and 1 at 100, so 1.08x, 1.66x and 8.3x the bound.) */
typedef struct { uint64_t *dep; int cap, head, len; double free_at, bytes_per_us; } link_fifo_t;

/* 0 when out of memory. */
static inline int link_fifo_init(link_fifo_t *f, int cap, double bytes_per_us)
{
    *f = (link_fifo_t){calloc((size_t)cap, sizeof *f->dep), cap, 0, 0, 0, bytes_per_us};
    return f->dep != NULL;
}

/* Forgets the frames that left by `now`; 1 if the queue is still full. */
static inline int link_fifo_full(link_fifo_t *f, uint64_t now)
{
    while (f->len && f->dep[f->head] <= now) { f->head = (f->head + 1) % f->cap; f->len--; }
    return f->len >= f->cap;
}

/* A frame that leaves the link at `end` (exact): its departure on the virtual clock. */
static inline uint64_t link_fifo_push(link_fifo_t *f, double end)
{
    f->free_at = end;
    uint64_t dep = (uint64_t)ceil(end - 1e-6);   /* a float's error must not cost a microsecond */
    f->dep[(f->head + f->len) % f->cap] = dep;
    f->len++;
    return dep;
}

static inline double link_fifo_start(const link_fifo_t *f, uint64_t now)
{
    return f->free_at > (double)now ? f->free_at : (double)now;
}

/* Enqueues a frame: its departure time, or LINK_NEVER when the queue is full. */
static inline uint64_t link_fifo_put(link_fifo_t *f, uint64_t now, int frame_bytes)
{
    if (link_fifo_full(f, now)) return LINK_NEVER;
    return link_fifo_push(f, link_fifo_start(f, now) + frame_bytes / f->bytes_per_us);
}

/* A token bucket in front of a FIFO: tokens (bytes) as of at_us, at most burst_bytes. */
typedef struct { double tokens, burst_bytes, at_us; } link_bucket_t;

/* link_fifo_put through the bucket: a frame leaves once the bucket holds its size. burst_bytes 0:
 * no bucket, frame after frame. */
static inline uint64_t link_shaped_put(link_fifo_t *f, link_bucket_t *b, uint64_t now, int frame_bytes)
{
    if (b->burst_bytes <= 0) return link_fifo_put(f, now, frame_bytes);
    if (link_fifo_full(f, now)) return LINK_NEVER;
    double start = link_fifo_start(f, now);
    double r = f->bytes_per_us, tok = b->tokens + r * (start - b->at_us);
    if (tok > b->burst_bytes) tok = b->burst_bytes;
    double dep = tok >= frame_bytes ? start : start + (frame_bytes - tok) / r;
    b->tokens = tok + r * (dep - start) - frame_bytes;
    b->at_us = dep;
    return link_fifo_push(f, dep);
}

/* When a receiver reading once per poll_us slot sees a datagram that arrived at `at`: the
 * instant inside the slot is a pure function of the slot and the seed, so arrival order is kept. */
static inline uint64_t link_poll_instant(uint64_t poll_us, uint64_t seed, uint64_t at)
{
    for (uint64_t k = at / poll_us;; k++) {
        uint64_t h = k ^ seed;
        uint64_t t = k * poll_us + (uint64_t)(ltp_uniform(&h) * (double)poll_us);
        if (t >= at) return t;
    }
}

/* How late a thread wakes, drawn from rng: exponential with mean mean_us (0: on time, no draw). */
static inline uint64_t link_wake_late_us(uint64_t *rng, uint64_t mean_us)
{
    if (!mean_us) return 0;
    return (uint64_t)(-log(1 - ltp_uniform(rng)) * (double)mean_us);
}

#endif
