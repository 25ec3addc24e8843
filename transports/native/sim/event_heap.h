/* event_heap.h: a binary min-heap of timed events, earliest first, ties in the order they were
 * pushed (like frames on one wire). One implementation for the discrete-event networks: the
 * simulator's (sim_net.c) and the core unit tests' (tests/test_core.c).
 *
 * EVENT_HEAP(name, T) defines the heap type name_t over events of type T, whose first two
 * members must be `uint64_t at, seq;` (seq is the heap's to set), and
 *   name_push(h, e): add e; 0, or -1 when memory ran out (the heap is then unchanged);
 *   name_pop(h):     remove and return the earliest event (the heap must not be empty).
 * h->n events are held, h->ev[0] is the earliest, h->peak the most held at once; a zeroed
 * name_t is an empty heap, and free(h->ev) releases it. */
#ifndef SIM_EVENT_HEAP_H
#define SIM_EVENT_HEAP_H

#include <stdint.h>
#include <stdlib.h>

#define EVENT_HEAP(name, T)                                                                     \
    typedef struct { T *ev; int n, cap, peak; uint64_t seq; } name##_t;                        \
                                                                                                \
    static inline int name##_before(const T *a, const T *b)                                    \
    {                                                                                           \
        return a->at < b->at || (a->at == b->at && a->seq < b->seq);                            \
    }                                                                                           \
                                                                                                \
    static inline int name##_push(name##_t *h, T e)                                            \
    {                                                                                           \
        if (h->n == h->cap) {                                                                   \
            int cap = h->cap ? 2 * h->cap : 1024;                                               \
            T *ev = realloc(h->ev, (size_t)cap * sizeof *ev);                                   \
            if (!ev) return -1;                                                                 \
            h->ev = ev;                                                                         \
            h->cap = cap;                                                                       \
        }                                                                                       \
        int i = h->n++;                                                                         \
        if (h->n > h->peak) h->peak = h->n;                                                     \
        e.seq = h->seq++;                                                                       \
        while (i > 0 && name##_before(&e, &h->ev[(i - 1) / 2])) {                              \
            h->ev[i] = h->ev[(i - 1) / 2];                                                      \
            i = (i - 1) / 2;                                                                    \
        }                                                                                       \
        h->ev[i] = e;                                                                           \
        return 0;                                                                               \
    }                                                                                           \
                                                                                                \
    static inline T name##_pop(name##_t *h)                                                    \
    {                                                                                           \
        T top = h->ev[0], last = h->ev[--h->n];                                                 \
        int i = 0;                                                                              \
        for (;;) {                                                                              \
            int l = 2 * i + 1, r = l + 1, m = i;                                                \
            if (l < h->n && name##_before(&h->ev[l], &last)) m = l;                             \
            if (r < h->n && name##_before(&h->ev[r], m == i ? &last : &h->ev[l])) m = r;        \
            if (m == i) break;                                                                  \
            h->ev[i] = h->ev[m];                                                                \
            i = m;                                                                              \
        }                                                                                       \
        if (h->n) h->ev[i] = last;                                                              \
        return top;                                                                             \
    }

#endif
