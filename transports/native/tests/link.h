/* link.h: the C tests' virtual link, shared by pair.h (a worker and a PS) and test_pairs.c (a PS
 * and its workers): the datagrams in flight, first in first out, and the next instant anything
 * happens (a datagram due, or a core's timer). Include it after ltp.h. */
#ifndef LTP_TESTS_LINK_H
#define LTP_TESTS_LINK_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { LINK_DG = 1600 };   /* the largest datagram the tests send */

typedef struct { uint64_t at; int from, to, len; uint8_t b[LINK_DG]; } ev_t;
typedef struct { ev_t *q; int qh, qn, cap; } link_t;

static inline void link_init(link_t *L, int cap)
{
    L->q = calloc((size_t)cap, sizeof *L->q);
    L->qh = L->qn = 0;
    L->cap = cap;
}

static inline void link_free(link_t *L) { free(L->q); }

/* A datagram from node `from` to node `to`, due at `at`; lost when the link's queue is full. */
static inline void link_push(link_t *L, uint64_t at, int from, int to, const uint8_t *b, int len)
{
    if (L->qn == L->cap) return;
    ev_t *e = &L->q[(L->qh + L->qn++) % L->cap];
    e->at = at; e->from = from; e->to = to; e->len = len;
    memcpy(e->b, b, (size_t)len);
}

/* The first datagram due by `now`, taken off the link (valid until the next push); NULL if none. */
static inline ev_t *link_due(link_t *L, uint64_t now)
{
    if (!L->qn || L->q[L->qh].at > now) return NULL;
    ev_t *e = &L->q[L->qh];
    L->qh = (L->qh + 1) % L->cap;
    L->qn--;
    return e;
}

/* When anything happens next: the first datagram due, or the earliest timer of the n cores
 * (UINT64_MAX: nothing will). */
static inline uint64_t link_next(const link_t *L, ltp_core_t *const *c, int n, uint64_t now)
{
    uint64_t next = L->qn ? L->q[L->qh].at : UINT64_MAX;
    for (int k = 0; k < n; k++) {
        uint64_t t = ltp_core_next_timeout(c[k], now);
        if (t < next) next = t;
    }
    return next;
}

#endif
