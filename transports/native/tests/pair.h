/* pair.h: what the C tests of forged datagrams share (test_trust.c, test_guards.c): a worker core
 * and a PS core exchanging datagrams in virtual time through a tap that can capture, drop, forge
 * or batch them, with a fixed one-way delay; counters looked up by name; a message delivered.
 * Include it once per test program, after ltp.h (and, for the old core, its shims). */
#ifndef LTP_TESTS_PAIR_H
#define LTP_TESTS_PAIR_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Offsets shared by the old and the new wire format (docs/ltp-protocol.md §2). */
enum { O_TYPE = 3, O_MSG = 12, O_SEG = 16, O_INDEX = 20, O_COUNT = 24, O_OFFSET = 28, O_TOTAL = 32, O_LEN = 36,
       O_TX_SEQ = 40, O_TS = 44, O_ACK_ECHO_TS = 28, O_ACK_HINT = 44, O_CLOSE_COUNT = 24,
       O_CLOSE_REASON = 28, DATA_HDR = 52 };

#include "check.h"
#include "link.h"

static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* A counter by name; -1 if this core has no such counter (the old one lacks the new names). */
static inline double stat(ltp_core_t *c, const char *name)
{
    uint64_t st[256] = {0};
    int n = ltp_stat_count();
    ltp_core_stats(c, st, n < 256 ? n : 256);
    for (int i = 0; i < n; i++) if (strcmp(ltp_stat_name(i), name) == 0) return (double)st[i];
    return -1;
}

/* ------------------------------------------------------------------ a worker and a PS */
enum { PS = 0, WK = 1, DELAY_US = 100, QCAP = 8192 };

typedef struct pair pair_t;
/* Sees every datagram before it is queued: 0 deliver (possibly changed), 1 drop. */
typedef int (*tap_fn)(pair_t *P, int from, uint8_t *b, int *len);

struct pair {
    ltp_config_t cfg;        /* both cores' */
    ltp_core_t *c[2];
    uint64_t now;
    link_t link;
    tap_fn tap;
    uint8_t kept[4][LINK_DG];   /* datagrams a tap put aside, for forging */
    int kept_len[4];
    int closes_seen, data_seen;
    uint8_t closed_seg[256];  /* CLOSE datagrams seen per segment */
    uint8_t (*held)[600];     /* DATA a tap holds back, to deliver in one batch */
    int held_len[256], n_held;
};

static inline ltp_config_t cfg_with(const char *const *names, const double *values, int n)
{
    ltp_config_t c;
    ltp_config_default(&c);
    ltp_config_set(&c, "auth", 0);   /* the tests turn it on where they test it */
    ltp_config_set(&c, "max_udp_payload_bytes", 472);   /* 420-byte chunks: small messages, many packets */
    for (int i = 0; i < n; i++) ltp_config_set(&c, names[i], values[i]);
    return c;
}

/* A PS and a worker on cfg_with(names, values, n). */
static inline void pair_init(pair_t *P, const char *const *names, const double *values, int n)
{
    memset(P, 0, sizeof *P);
    P->cfg = cfg_with(names, values, n);
    P->c[PS] = ltp_core_new(&P->cfg, 0xFFFF);
    P->c[WK] = ltp_core_new(&P->cfg, 0);
    ltp_core_add_peer(P->c[PS], 0);
    ltp_core_add_peer(P->c[WK], 0xFFFF);
    link_init(&P->link, QCAP);
    P->now = 100000000;   /* 100 s: a clock that has run long enough for any echo to look plausible */
}

static inline void pair_free(pair_t *P)
{
    ltp_core_free(P->c[0]);
    ltp_core_free(P->c[1]);
    link_free(&P->link);
    free(P->held);
}

/* Hand a datagram to core `to` now, as if it came from its one peer. */
static inline int inject(pair_t *P, int to, const uint8_t *b, int len)
{
    return ltp_core_input(P->c[to], 0, b, (size_t)len, P->now);
}

typedef int (*done_fn)(pair_t *P, void *arg);

/* Run both cores until done() or limit_us of virtual time; all datagrams due at one instant are
 * delivered before either core is polled again (a batch, as recvmmsg reads one). */
static inline int pair_run(pair_t *P, uint64_t limit_us, done_fn done, void *arg)
{
    uint64_t end = P->now + limit_us;
    uint8_t b[LINK_DG];
    for (;;) {
        for (int k = 0; k < 2; k++) {
            int slot, len;
            while ((len = ltp_core_poll_tx(P->c[k], P->now, b, sizeof b, &slot)) > 0) {
                if (b[O_TYPE] == 1) P->data_seen++;
                if (b[O_TYPE] == 3) { P->closes_seen++; P->closed_seg[b[O_SEG]]++; }
                if (P->tap && P->tap(P, k, b, &len)) continue;
                link_push(&P->link, P->now + DELAY_US, k, 1 - k, b, len);
            }
        }
        if (done && done(P, arg)) return 1;
        uint64_t next = link_next(&P->link, P->c, 2, P->now);
        if (next == UINT64_MAX || next > end) { P->now = end; return done ? done(P, arg) : 1; }
        P->now = next > P->now ? next : P->now + 1;
        for (ev_t *e; (e = link_due(&P->link, P->now));)
            ltp_core_input(P->c[e->to], 0, e->b, (size_t)e->len, P->now);
    }
}

typedef struct { uint32_t msg; uint16_t seg; } key_t_;

static inline int rx_ready(pair_t *P, void *arg)
{
    key_t_ *k = arg;
    return ltp_core_rx_ready(P->c[PS], 0, k->msg, k->seg) == 1;
}

static inline int tx_done(pair_t *P, void *arg)
{
    key_t_ *k = arg;
    return ltp_core_send_status(P->c[WK], 0, k->msg, k->seg, NULL, P->now) == 1;
}

/* Keep the first DATA the worker sends (and let it through). */
static inline int tap_keep_data(pair_t *P, int from, uint8_t *b, int *len)
{
    if (from == WK && b[O_TYPE] == 1 && !P->kept_len[0]) { memcpy(P->kept[0], b, (size_t)*len); P->kept_len[0] = *len; }
    return 0;
}

/* Keep the first DATA and the first ACK, and drop every DATA after the first (so ACKs keep
 * echoing that one and the send stays open). */
static inline int tap_first_data_and_ack(pair_t *P, int from, uint8_t *b, int *len)
{
    int t = b[O_TYPE];
    if (from == WK && t == 1) {
        if (P->kept_len[0]) return 1;
        memcpy(P->kept[0], b, (size_t)*len); P->kept_len[0] = *len;
    }
    if (from == PS && t == 2 && !P->kept_len[1]) { memcpy(P->kept[1], b, (size_t)*len); P->kept_len[1] = *len; }
    return 0;
}

static inline float *vec(uint32_t n, float base)
{
    float *v = malloc(n * sizeof *v);
    for (uint32_t i = 0; i < n; i++) v[i] = base + (float)i * 0.001f;
    return v;
}

#define N 4000u   /* floats per message: 16,000 bytes, 39 packets of 420 bytes */

/* A fresh pair whose worker sends message 1 (N floats of vec(N, 1), segment 0) with `tap`
 * watching the wire, run for `run_us` of virtual time; the vector sent (the caller frees it). */
static inline float *pair_send_tapped(pair_t *P, tap_fn tap, uint64_t run_us)
{
    pair_init(P, NULL, NULL, 0);
    float *v = vec(N, 1.0f);
    P->tap = tap;
    ltp_core_send(P->c[WK], 0, 1, 0, v, N * 4, 0, P->now);
    pair_run(P, run_us, NULL, NULL);
    return v;
}

/* The worker sends message msg (N floats of v, segment 0); the pair runs until the PS can take
 * it, for 2 s of virtual time at most. 1 if it can. */
static inline int deliver(pair_t *P, uint32_t msg, const float *v)
{
    key_t_ k = {msg, 0};
    ltp_core_send(P->c[WK], 0, msg, 0, v, N * 4, 0, P->now);
    return pair_run(P, 2000000, rx_ready, &k);
}

#endif
