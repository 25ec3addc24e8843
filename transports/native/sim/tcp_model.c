/* tcp_model.c: the TCP reference model of tcp_model.h. */
#include "tcp_model.h"

#include <stdlib.h>
#include <string.h>

#define MSS 1448u
#define DATA_LEN 1472        /* + 42 in sim_net: a 1,514-byte frame (IPv4 20, TCP 32, MSS) */
#define ACK_LEN 24           /* + 42: a 66-byte frame */
#define INIT_CWND 10.0
#define MAX_RTO_US 120000000u
#define DELACK_US 40000u
#define TLP_MIN_US 10000u
#define HYSTART_SAMPLES 8u   /* Linux: HYSTART_MIN_SAMPLES; threshold min_rtt / 8 within 4-16 ms */    /* Linux's tail loss probe: 2 srtt, at least 10 ms */
#define NEVER_US UINT64_MAX
enum { T_DATA = 1, T_ACK = 2 };

typedef struct {
    uint32_t msg, nseg, una, nxt, recover, high_sacked, n_sacked;
    int active, done, in_recovery, dupacks;
    uint8_t *sacked;            /* per segment: the receiver has it (SACK) */
    uint64_t *resent_at;        /* per segment: when it was last resent in this episode, 0: not */
    double cwnd, ssthresh;
    uint64_t rto_at, tlp_at, rtx;
    int tlp_pending;
    /* HyStart's delay detection (CUBIC's slow-start exit): RTT minima of the first samples of
     * this round and the last */
    uint32_t round_end, round_samples;
    double round_min_us, last_round_min_us;
} tx_t;

typedef struct {
    uint32_t msg, nseg, rcv_nxt, echo;
    uint8_t *have;
    int complete, unacked, ack_now, seen;
    uint64_t ack_at;
} rx_t;

typedef struct {
    tx_t tx;
    rx_t rx;
    double srtt, rttvar;
    int has_rtt;
    uint32_t rto_us;
} conn_t;

struct tcp_ep {
    conn_t *c;
    int n, rr;
    uint32_t rto_min_us;
    uint64_t progress;
};

static void put32(uint8_t *b, uint32_t v) { memcpy(b, &v, 4); }
static uint32_t get32(const uint8_t *b) { uint32_t v; memcpy(&v, b, 4); return v; }

tcp_ep_t *tcp_new(int n_peers, uint32_t rto_min_us)
{
    tcp_ep_t *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->c = calloc((size_t)n_peers, sizeof *e->c);
    if (!e->c) { free(e); return NULL; }
    e->n = n_peers;
    e->rto_min_us = rto_min_us;
    for (int i = 0; i < n_peers; i++) {
        e->c[i].tx.ssthresh = 1e9;
        e->c[i].rto_us = rto_min_us;   /* the handshake's RTT sample (sub-ms here): RTO at its floor */
        e->c[i].rx.msg = UINT32_MAX;
    }
    return e;
}

void tcp_free(tcp_ep_t *e)
{
    if (!e) return;
    for (int i = 0; i < e->n; i++) {
        free(e->c[i].rx.have);
        free(e->c[i].tx.sacked);
        free(e->c[i].tx.resent_at);
    }
    free(e->c);
    free(e);
}

int tcp_send(tcp_ep_t *e, int peer, uint32_t msg, const void *data, uint32_t len, uint64_t now)
{
    (void)data;
    (void)now;
    if (peer < 0 || peer >= e->n || e->c[peer].tx.active) return -1;
    tx_t *t = &e->c[peer].tx;
    double ssthresh = t->ssthresh;
    free(t->sacked);
    free(t->resent_at);
    memset(t, 0, sizeof *t);
    t->msg = msg;
    t->nseg = (len + MSS - 1) / MSS;
    t->sacked = calloc(t->nseg, 1);
    t->resent_at = calloc(t->nseg, sizeof *t->resent_at);
    if (!t->sacked || !t->resent_at) return -1;
    t->cwnd = INIT_CWND;        /* restart after idle */
    t->ssthresh = ssthresh;     /* kept from the connection's past */
    t->active = 1;
    t->rto_at = t->tlp_at = NEVER_US;
    return 0;
}

int tcp_send_done(const tcp_ep_t *e, int peer, uint32_t msg, uint64_t *retransmits)
{
    const tx_t *t = &e->c[peer].tx;
    if (t->msg != msg || !t->done) return 0;
    if (retransmits) *retransmits = t->rtx;
    return 1;
}

int tcp_rx_ready(const tcp_ep_t *e, int peer, uint32_t msg)
{
    const rx_t *r = &e->c[peer].rx;
    return r->seen && r->msg == msg && r->complete;
}

uint64_t tcp_progress(const tcp_ep_t *e) { return e->progress; }

static void rtt_sample(tcp_ep_t *e, conn_t *c, double rtt)
{
    if (!c->has_rtt) { c->srtt = rtt; c->rttvar = rtt / 2; c->has_rtt = 1; }
    else {
        double d = rtt > c->srtt ? rtt - c->srtt : c->srtt - rtt;
        c->rttvar = 0.75 * c->rttvar + 0.25 * d;
        c->srtt = 0.875 * c->srtt + 0.125 * rtt;
    }
    double rto = c->srtt + 4 * c->rttvar;
    c->rto_us = rto < e->rto_min_us ? e->rto_min_us : (uint32_t)rto;
}

/* A tail loss probe once everything was sent and something is still unacknowledged. */
static void arm_tlp(const conn_t *c, tx_t *t, uint64_t now)
{
    if (t->nxt < t->nseg || t->una >= t->nseg || t->in_recovery || !c->has_rtt) { t->tlp_at = NEVER_US; return; }
    double pto = 2 * c->srtt;
    t->tlp_at = now + (pto < TLP_MIN_US ? TLP_MIN_US : (uint64_t)pto);
}

/* CUBIC's HyStart (delay): leave slow start once a round's RTT grew by an eighth (4-16 ms). */
static void hystart(tx_t *t, double rtt_us)
{
    if (t->cwnd >= t->ssthresh) return;
    if (t->una >= t->round_end) {   /* a new round */
        if (t->round_samples >= HYSTART_SAMPLES) t->last_round_min_us = t->round_min_us;
        t->round_end = t->nxt;
        t->round_samples = 0;
        t->round_min_us = 1e18;
    }
    if (t->round_samples++ < HYSTART_SAMPLES && rtt_us < t->round_min_us) t->round_min_us = rtt_us;
    if (t->round_samples >= HYSTART_SAMPLES && t->last_round_min_us > 0) {
        double eta = t->last_round_min_us / 8;
        eta = eta < 4000 ? 4000 : eta > 16000 ? 16000 : eta;
        if (t->round_min_us >= t->last_round_min_us + eta) t->ssthresh = t->cwnd;
    }
}

static void enter_recovery(tx_t *t)
{
    double flight = 0;
    for (uint32_t i = t->una; i < t->nxt; i++) flight += !t->sacked[i];
    t->ssthresh = flight / 2 > 2 ? flight / 2 : 2;
    t->cwnd = t->ssthresh;
    t->recover = t->nxt;
    t->in_recovery = 1;
    memset(t->resent_at, 0, t->nseg * sizeof *t->resent_at);
}

static void on_ack(tcp_ep_t *e, conn_t *c, uint32_t msg, uint32_t cum, uint32_t echo, uint64_t sack, uint64_t now)
{
    tx_t *t = &c->tx;
    if (!t->active || t->done || msg != t->msg) return;
    for (uint32_t i = 0; i < 64 && cum + 1 + i < t->nseg; i++) {   /* the SACK blocks */
        uint32_t k = cum + 1 + i;
        if ((sack >> i & 1) && !t->sacked[k]) {
            t->sacked[k] = 1;
            if (k + 1 > t->high_sacked) t->high_sacked = k + 1;
        }
    }
    if (cum > t->una) {
        uint32_t acked = cum - t->una;
        if (echo) {
            double rtt = (double)((uint32_t)now - echo);
            rtt_sample(e, c, rtt);
            hystart(t, rtt);
        }
        if (t->in_recovery && cum >= t->recover) { t->in_recovery = 0; t->cwnd = t->ssthresh; }
        else if (!t->in_recovery) t->cwnd += t->cwnd < t->ssthresh ? acked : (double)acked / t->cwnd;
        for (uint32_t i = t->una; i < cum; i++) t->sacked[i] = 1;
        t->una = cum;
        if (t->nxt < t->una) t->nxt = t->una;
        t->dupacks = 0;
        t->rto_at = t->una < t->nxt ? now + c->rto_us : NEVER_US;
        if (t->una >= t->nseg) { t->done = 1; t->active = 0; t->rto_at = t->tlp_at = NEVER_US; e->progress++; }
        else arm_tlp(c, t, now);
    } else if (cum == t->una && t->nxt > t->una && ++t->dupacks == 3 && !t->in_recovery) {
        enter_recovery(t);
    }
}

/* The first segment to retransmit: below the highest SACKed, not SACKed, and not resent, or
 * resent more than 5/4 srtt ago (RACK: a lost retransmission is found by time, not by RTO). */
static uint32_t lost_seg(const conn_t *c, const tx_t *t, uint64_t now)
{
    if (!t->in_recovery) return UINT32_MAX;
    double window = c->srtt * 1.25 < 1000 ? 1000 : c->srtt * 1.25;
    for (uint32_t i = t->una; i < t->high_sacked && i < t->nxt; i++)
        if (!t->sacked[i] && (!t->resent_at[i] || (double)(now - t->resent_at[i]) > window)) return i;
    return UINT32_MAX;
}

/* When a resent segment next counts as lost again (NEVER_US: none waits). */
static uint64_t relost_at(const conn_t *c, const tx_t *t)
{
    if (!t->in_recovery) return NEVER_US;
    double window = c->srtt * 1.25 < 1000 ? 1000 : c->srtt * 1.25;
    uint64_t at = NEVER_US;
    for (uint32_t i = t->una; i < t->high_sacked && i < t->nxt; i++)
        if (!t->sacked[i] && t->resent_at[i] && t->resent_at[i] + (uint64_t)window + 1 < at)
            at = t->resent_at[i] + (uint64_t)window + 1;
    return at;
}

static void on_data(tcp_ep_t *e, conn_t *c, uint32_t msg, uint32_t idx, uint32_t nseg, uint32_t ts, uint64_t now)
{
    rx_t *r = &c->rx;
    if (!r->seen || msg != r->msg) {
        if (r->seen && msg < r->msg) { r->ack_now = 1; return; }   /* an old message's copy */
        free(r->have);
        memset(r, 0, sizeof *r);
        r->msg = msg;
        r->nseg = nseg;
        r->have = calloc(nseg, 1);
        r->seen = 1;
    }
    if (idx >= r->nseg) return;
    int in_order = idx == r->rcv_nxt, hole = r->have[idx] == 0 && idx < r->rcv_nxt;
    r->have[idx] = 1;
    r->echo = ts;
    uint32_t before = r->rcv_nxt;
    while (r->rcv_nxt < r->nseg && r->have[r->rcv_nxt]) r->rcv_nxt++;
    if (!r->complete && r->rcv_nxt == r->nseg) { r->complete = 1; e->progress++; }
    /* a hole, a filled hole or the end: at once; else every second segment, or after 40 ms */
    if (!in_order || hole || r->rcv_nxt > before + 1 || r->complete) r->ack_now = 1;
    else if (++r->unacked >= 2) r->ack_now = 1;
    else if (r->ack_at == NEVER_US || r->ack_at == 0) r->ack_at = now + DELACK_US;
}

static int tcp_input(void *ep, int slot, const uint8_t *b, size_t len, uint64_t now)
{
    tcp_ep_t *e = ep;
    if (slot < 0 || slot >= e->n || len < 16) return -1;
    conn_t *c = &e->c[slot];
    uint64_t sack;
    memcpy(&sack, b + 16, 8);
    if (b[0] == T_ACK) on_ack(e, c, get32(b + 4), get32(b + 8), get32(b + 12), sack, now);
    else if (b[0] == T_DATA) on_data(e, c, get32(b + 4), get32(b + 8), get32(b + 12), get32(b + 16), now);
    return 0;
}

/* Segments in flight, RFC 6675's pipe: sent, not acknowledged, not SACKed, and not deemed lost
 * (in recovery, a hole below the highest SACKed segment is lost until a copy is resent, and
 * again once that copy is 5/4 srtt old and not SACKed). */
static double pipe(const conn_t *c, const tx_t *t, uint64_t now)
{
    double window = c->srtt * 1.25 < 1000 ? 1000 : c->srtt * 1.25;
    uint32_t n = 0;
    for (uint32_t i = t->una; i < t->nxt; i++) {
        if (t->sacked[i]) continue;
        if (!t->in_recovery || i >= t->high_sacked) n++;
        else n += t->resent_at[i] && (double)(now - t->resent_at[i]) <= window;
    }
    return n;
}

static int can_send(const conn_t *c, const tx_t *t, uint64_t now)
{
    if (t->active && !t->done && t->tlp_pending) return 1;
    if (!t->active || t->done || pipe(c, t, now) >= t->cwnd) return 0;
    return lost_seg(c, t, now) != UINT32_MAX || t->nxt < t->nseg;
}

static int tcp_poll(void *ep, uint64_t now, uint8_t *b, size_t cap, int *slot)
{
    tcp_ep_t *e = ep;
    if (cap < DATA_LEN) return 0;
    for (int k = 0; k < e->n; k++) {   /* RTO expiry: go back to the first unacknowledged */
        tx_t *t = &e->c[k].tx;
        if (t->active && t->rto_at <= now) {
            uint32_t old_nxt = t->nxt;
            double flight = t->nxt - t->una;
            t->ssthresh = flight / 2 > 2 ? flight / 2 : 2;
            t->cwnd = 1;
            t->nxt = t->una;
            t->in_recovery = t->dupacks = 0;
            memset(t->resent_at, 0, t->nseg * sizeof *t->resent_at);
            e->c[k].rto_us = e->c[k].rto_us * 2 > MAX_RTO_US ? MAX_RTO_US : e->c[k].rto_us * 2;
            t->rto_at = now + e->c[k].rto_us;
            t->recover = old_nxt;   /* segments below the old nxt are retransmissions */
        }
    }
    for (int k = 0; k < e->n; k++) {   /* tail loss probes */
        tx_t *t = &e->c[k].tx;
        if (t->active && t->tlp_at <= now && t->rto_at > now) {
            t->tlp_at = NEVER_US;
            uint32_t last = t->nseg;
            while (last > t->una && t->sacked[last - 1]) last--;
            if (last > t->una) { t->tlp_pending = (int)last; }
        }
    }
    for (int k = 0; k < e->n; k++) {   /* ACKs first */
        rx_t *r = &e->c[k].rx;
        if (r->seen && (r->ack_now || (r->ack_at && r->ack_at <= now))) {
            r->ack_now = r->unacked = 0;
            r->ack_at = 0;
            memset(b, 0, ACK_LEN);
            b[0] = T_ACK;
            put32(b + 4, r->msg);
            put32(b + 8, r->rcv_nxt);
            put32(b + 12, r->echo);
            uint64_t sack = 0;   /* what arrived beyond the hole (SACK blocks, as a bitmap) */
            for (uint32_t i = 0; i < 64 && r->rcv_nxt + 1 + i < r->nseg; i++)
                if (r->have[r->rcv_nxt + 1 + i]) sack |= 1ull << i;
            memcpy(b + 16, &sack, 8);
            *slot = k;
            return ACK_LEN;
        }
    }
    for (int j = 0; j < e->n; j++) {
        int k = (e->rr + j) % e->n;
        tx_t *t = &e->c[k].tx;
        if (!can_send(&e->c[k], t, now)) continue;
        uint32_t idx = lost_seg(&e->c[k], t, now);
        int rtx = 1;
        if (t->tlp_pending) {
            idx = (uint32_t)t->tlp_pending - 1;
            t->tlp_pending = 0;
        } else if (idx != UINT32_MAX) {
            t->resent_at[idx] = now;
        } else {
            while (t->nxt < t->nseg && t->sacked[t->nxt]) t->nxt++;   /* after an RTO: skip SACKed */
            if (t->nxt >= t->nseg) continue;
            idx = t->nxt++;
            rtx = idx < t->recover;
            if (t->nxt == t->nseg) arm_tlp(&e->c[k], t, now);
        }
        t->rtx += (uint64_t)rtx;
        if (t->rto_at == NEVER_US) t->rto_at = now + e->c[k].rto_us;
        memset(b, 0, 24);
        b[0] = T_DATA;
        b[1] = (uint8_t)rtx;
        put32(b + 4, t->msg);
        put32(b + 8, idx);
        put32(b + 12, t->nseg);
        put32(b + 16, (uint32_t)now | 1u);
        e->rr = (k + 1) % e->n;
        *slot = k;
        return DATA_LEN;
    }
    return 0;
}

static uint64_t tcp_timeout(void *ep, uint64_t now)
{
    tcp_ep_t *e = ep;
    uint64_t t = NEVER_US;
    for (int k = 0; k < e->n; k++) {
        const conn_t *c = &e->c[k];
        if (c->rx.ack_now || can_send(c, &c->tx, now)) return now;
        uint64_t r = relost_at(c, &c->tx);
        if (r < t) t = r;
        if (c->rx.ack_at && c->rx.ack_at < t) t = c->rx.ack_at;
        if (c->tx.active && c->tx.rto_at < t) t = c->tx.rto_at;
        if (c->tx.active && c->tx.tlp_at < t) t = c->tx.tlp_at;
    }
    return t;
}

static int tcp_classify(const uint8_t *b, size_t len)
{
    if (len < 2 || b[0] != T_DATA) return 0;
    return SIM_PKT_DATA | (b[1] ? SIM_PKT_RTX : 0);
}

const sim_ops_t TCP_OPS = {tcp_input, tcp_poll, tcp_timeout, tcp_classify};
