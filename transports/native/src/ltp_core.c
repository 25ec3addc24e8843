/* ltp_core.c: the sans-IO LTP endpoint (no sockets, no clock; time comes from the caller).
 *
 * One core is one endpoint. Peers are slots; per peer it keeps the BBR-like path state, up to
 * max_tx_per_peer messages being sent and max_open_per_peer messages being received, and a ring
 * of recently closed receive keys. This file owns the endpoint's lifecycle, the join handshake,
 * the dispatch of incoming datagrams, the timers, and the two calls a driver loops on:
 * ltp_core_poll_tx (the next datagram due) and ltp_core_next_timeout (when to call again).
 * The mechanisms live in their own files (ltp_internal.h lists them); docs/ltp-protocol.md
 * describes the protocol.
 */
#include "ltp_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- lifecycle */
ltp_core_t *ltp_core_new(const ltp_config_t *cfg, uint16_t self_rank)
{
    if (ltp_config_validate(cfg) != LTP_OK) return NULL;
    ltp_core_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->cfg = *cfg;
    c->self_rank = self_rank;
    c->chunk = ltp_chunk_bytes(cfg);
    c->peers = calloc(cfg->max_peers, sizeof *c->peers);
    c->rng = cfg->seed ^ ((uint64_t)self_rank << 48);
    if (!c->peers) { free(c); return NULL; }
    rate_init_flow(c, &c->shared);
    return c;
}

void ltp_core_free(ltp_core_t *c)
{
    if (!c) return;
    for (int i = 0; i < c->n_peers; i++) {
        peer_t *p = &c->peers[i];
        for (uint32_t j = 0; p->tx && j < c->cfg.max_tx_per_peer; j++) tx_free(&p->tx[j]);
        for (uint32_t j = 0; p->rx && j < c->cfg.max_open_per_peer; j++) rx_free(&p->rx[j]);
        free(p->tx); free(p->rx); free(p->ring);
    }
    free(c->peers); free(c->policy); free(c);
}

int ltp_core_add_peer(ltp_core_t *c, uint16_t rank)
{
    if (!c) return LTP_EINVAL;
    for (int i = 0; i < c->n_peers; i++) if (c->peers[i].rank == rank) return LTP_EINVAL;
    if ((uint32_t)c->n_peers >= c->cfg.max_peers) return LTP_EFULL;
    peer_t *p = &c->peers[c->n_peers];
    memset(p, 0, sizeof *p);
    p->tx = calloc(c->cfg.max_tx_per_peer, sizeof *p->tx);
    p->rx = calloc(c->cfg.max_open_per_peer, sizeof *p->rx);
    p->ring = calloc(c->cfg.closed_ring, sizeof *p->ring);
    if (!p->tx || !p->rx || !p->ring) {
        free(p->tx); free(p->rx); free(p->ring); memset(p, 0, sizeof *p);
        return LTP_ENOMEM;
    }
    p->rank = rank;
    rate_init_flow(c, &p->own);
    p->fl = rate_shared(c) ? &c->shared : &p->own;
    return c->n_peers++;
}

peer_t *core_peer(const ltp_core_t *c, int peer)
{
    return (c && peer >= 0 && peer < c->n_peers) ? &c->peers[peer] : NULL;
}

hdr_t core_header(const ltp_core_t *c, uint8_t type, uint32_t msg_id, uint16_t segment)
{
    hdr_t h;
    memset(&h, 0, sizeof h);
    h.type = type; h.sender = c->self_rank; h.session = c->cfg.session_id;
    h.msg_id = msg_id; h.segment = segment;
    return h;
}

/* ---------------------------------------------------------------- join */
int ltp_core_hello(ltp_core_t *c, int peer, uint64_t now)
{
    peer_t *p = core_peer(c, peer);
    if (!p) return LTP_EINVAL;
    p->hello_active = 1;
    p->joined = 0;
    p->hello_next_us = now;
    return LTP_OK;
}

int ltp_core_peer_joined(const ltp_core_t *c, int peer)
{
    const peer_t *p = core_peer(c, peer);
    return p ? p->joined : LTP_EINVAL;
}

int ltp_core_peer_greeted(const ltp_core_t *c, int peer)
{
    const peer_t *p = core_peer(c, peer);
    return p ? p->greeted : LTP_EINVAL;
}

static int on_hello_ack(ltp_core_t *c, peer_t *p)
{
    if (!p->hello_active && !p->joined) { c->st[LTP_S_STRAY_CONTROL]++; return LTP_OK; }
    p->joined = 1;
    p->hello_active = 0;
    return LTP_OK;
}

/* ---------------------------------------------------------------- input */
int ltp_core_input(ltp_core_t *c, int peer, const uint8_t *buf, size_t len, uint64_t now)
{
    return ltp_core_input_at(c, peer, buf, len, now, now);
}

int ltp_core_input_at(ltp_core_t *c, int peer, const uint8_t *buf, size_t len, uint64_t now, uint64_t arrival)
{
    if (!c) return LTP_EINVAL;
    hdr_t h;
    c->st[LTP_S_RX_DATAGRAMS]++;
    c->st[LTP_S_RX_BYTES] += len;
    int rc = wire_parse(&c->cfg, buf, len, &h);
    if (rc) { c->st[LTP_S_MALFORMED]++; return rc; }
    peer_t *p = core_peer(c, peer);
    if (!p || p->rank != h.sender) { c->st[LTP_S_UNKNOWN_PEER]++; return LTP_EPEER; }
    if (h.session != c->cfg.session_id) { c->st[LTP_S_WRONG_SESSION]++; return LTP_ESESSION; }
    c->last_rx_us = MAX(c->last_rx_us, now);
    switch (h.type) {
    case LTP_T_DATA: hint_on_data(c, p, &h, len, now, MIN(arrival, now)); return rx_on_data(c, p, &h, now);
    case LTP_T_ACK: return tx_on_ack(c, p, &h, now);
    case LTP_T_CLOSE: return tx_on_close(c, p, &h, now);
    case LTP_T_HELLO: p->greeted = 1; p->hello_ack_pending = 1; return LTP_OK;
    case LTP_T_HELLO_ACK: return on_hello_ack(c, p);
    }
    return LTP_EMALFORMED;
}

/* ---------------------------------------------------------------- output */
/* Timers that change state: close deadlines, RACK, PTO. */
static void tick(ltp_core_t *c, uint64_t now)
{
    for (int pi = 0; pi < c->n_peers; pi++) {
        peer_t *p = &c->peers[pi];
        for (uint32_t j = 0; j < c->cfg.max_open_per_peer; j++)
            if (p->rx[j].used && !p->rx[j].closed) rx_check_close(c, p, &p->rx[j], now);
        for (uint32_t j = 0; j < c->cfg.max_tx_per_peer; j++) tx_on_timers(c, p, &p->tx[j], now);
    }
}

/* Control datagrams go before DATA: per peer, HELLO_ACK, HELLO, CLOSE copies, due ACKs. */
static int poll_control(ltp_core_t *c, uint64_t now, uint8_t *b, size_t cap, int *peer)
{
    if (cap < LTP_CLOSE_BYTES) return 0;
    for (int pi = 0; pi < c->n_peers; pi++) {
        peer_t *p = &c->peers[pi];
        *peer = pi;
        if (p->hello_ack_pending) {
            p->hello_ack_pending = 0;
            hdr_t h = core_header(c, LTP_T_HELLO_ACK, 0, 0);
            return wire_put_hello(b, &h);
        }
        if (p->hello_active && now >= p->hello_next_us) {
            p->hello_next_us = now + c->cfg.hello_interval_us;
            hdr_t h = core_header(c, LTP_T_HELLO, 0, 0);
            return wire_put_hello(b, &h);
        }
        int n = rx_poll_control(c, p, now, b, cap);
        if (n) return n;
    }
    return 0;
}

int ltp_core_poll_tx(ltp_core_t *c, uint64_t now, uint8_t *b, size_t cap, int *peer)
{
    if (!c || !b || !peer) return LTP_EINVAL;
    tick(c, now);
    int n = poll_control(c, now, b, cap, peer);
    if (n) {
        if (n > 0) { c->st[LTP_S_TX_DATAGRAMS]++; c->st[LTP_S_TX_BYTES] += (uint64_t)n; }
        return n;
    }
    if (c->n_peers == 0) return 0;
    sched_t s;
    sched_begin(&s);
    for (int k = 0; k < c->n_peers && s.due > now; k++)
        sched_consider(c, &s, (c->rr + k) % c->n_peers, now, 1);
    if (s.peer < 0 && rate_shared(c)) sched_mark_idle(&c->shared);
    if (sched_decide(c, &s, now) > now || s.peer < 0) return 0;
    c->rr = (s.peer + 1) % c->n_peers;
    return sched_emit(c, &s, now, b, cap, peer);
}

uint64_t ltp_core_next_timeout(ltp_core_t *c, uint64_t now)
{
    if (!c) return NEVER;
    uint64_t t = NEVER;
    sched_t s;
    sched_begin(&s);
    for (int pi = 0; pi < c->n_peers; pi++) {
        peer_t *p = &c->peers[pi];
        if (p->hello_ack_pending) return now;
        if (p->hello_active) t = MIN(t, p->hello_next_us);
        if (p->n_close_pending) return now;
        for (uint32_t j = 0; j < c->cfg.max_open_per_peer; j++) t = MIN(t, rx_deadline(c, p, &p->rx[j]));
        for (uint32_t j = 0; j < c->cfg.max_tx_per_peer; j++) t = MIN(t, tx_deadline(c, p, &p->tx[j]));
        sched_consider(c, &s, pi, now, 0);
    }
    t = MIN(t, sched_decide(c, &s, now));
    return t < now ? now : t;
}

/* ---------------------------------------------------------------- closing */
int ltp_core_linger(ltp_core_t *c, uint64_t now)
{
    if (!c) return LTP_EINVAL;
    c->linger_from_us = MAX(now, 1);
    for (int pi = 0; pi < c->n_peers; pi++) rx_farewell(c, &c->peers[pi]);
    return LTP_OK;
}

uint64_t ltp_core_linger_until(const ltp_core_t *c, uint64_t now)
{
    if (!c) return now;
    double rtt = 0;
    for (int pi = 0; pi < c->n_peers; pi++) {
        const peer_t *p = &c->peers[pi];
        if (p->n_close_pending) return NEVER;
        rtt = MAX(rtt, MAX(p->has_rtt ? p->srtt_us : 0, p->peer_srtt_us));
    }
    /* A peer waiting for a CLOSE probes after its probe timeout, which doubles each time one goes
     * unanswered: stay until it had several round trips to ask again. */
    double quiet = MAX((double)c->cfg.linger_min_us, c->cfg.linger_rtts * rtt);
    (void)now;
    return MAX(c->last_rx_us, c->linger_from_us) + (uint64_t)quiet;
}

/* ---------------------------------------------------------------- counters */
void ltp_core_stats(const ltp_core_t *c, uint64_t *out, int n)
{
    if (!c || !out) return;
    for (int i = 0; i < n && i < LTP_S__COUNT; i++) out[i] = c->st[i];
}

void ltp_core__count(ltp_core_t *c, int stat, uint64_t n)
{
    if (c && stat >= 0 && stat < LTP_S__COUNT) c->st[stat] += n;
}
