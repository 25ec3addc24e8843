/* ltp_core.c: the sans-IO LTP endpoint (no sockets, no clock; time comes from the caller).
 *
 * One core is one endpoint. Peers are slots; per peer it keeps the BBR-like path state, up to
 * max_tx_per_peer messages being sent and max_open_per_peer messages being received, and a ring
 * of recently closed receive keys. This file owns the endpoint's lifecycle, the join handshake,
 * the dispatch of incoming datagrams, the timers, and the two calls a driver loops on:
 * ltp_core_poll_tx (the next datagram due) and ltp_core_next_timeout (when to call again); the
 * peer index (ltp_index.c) says which peers they need to look at, so neither walks them all.
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
    if (!c->cfg.max_udp_payload_bytes) c->cfg.max_udp_payload_bytes = LTP_ETH_DATAGRAM;   /* until set */
    c->self_rank = self_rank;
    c->chunk = ltp_chunk_bytes(&c->cfg);
    c->ring_cap = cfg->closed_ring;
    c->released_cap = MAX(LTP_RELEASED_MIN, cfg->max_tx_per_peer);
    c->peers = calloc(cfg->max_peers, sizeof *c->peers);
    c->rng = cfg->seed ^ ((uint64_t)self_rank << 48);
    c->due_us = NEVER;
    if (!c->peers || index_init(c) || hint_init(c)) { ltp_core_free(c); return NULL; }
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
        free(p->tx); free(p->rx); free(p->ring); free(p->floor_segs); free(p->released);
        free(p->seg_n_loss); free(p->seg_loss); free(p->posts);
        auth_free(p);
    }
    index_free(c);
    hint_free(c);
    free(c->peers); free(c->policy); free(c->expect); free(c);
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
    p->ring = calloc(c->ring_cap, sizeof *p->ring);
    p->released = calloc(c->released_cap, sizeof *p->released);
    if (!p->tx || !p->rx || !p->ring || !p->released || rx_loss_fit(c, p)) {
        free(p->tx); free(p->rx); free(p->ring); free(p->released);
        free(p->seg_n_loss); free(p->seg_loss); memset(p, 0, sizeof *p);
        return LTP_ENOMEM;
    }
    p->rank = rank;
    rate_init_flow(c, &p->own);
    p->fl = rate_shared(c) ? &c->shared : &p->own;
    c->n_peers++;
    index_touch(c, p);
    return c->n_peers - 1;
}

int ltp_core_set_datagram(ltp_core_t *c, uint32_t bytes)
{
    if (!c || bytes < LTP_DATA_HDR_BYTES + 4 + auth_trailer(&c->cfg) || bytes > LTP_MAX_DATAGRAM) return LTP_EINVAL;
    for (int i = 0; i < c->n_peers; i++)
        for (uint32_t j = 0; j < c->cfg.max_tx_per_peer; j++)
            if (c->peers[i].tx[j].used) return LTP_EBUSY;
    c->cfg.max_udp_payload_bytes = bytes;
    c->chunk = ltp_chunk_bytes(&c->cfg);
    admit_reshape(c);   /* expected segments are cut into the new chunk */
    /* Windows and bursts are counted in packets of this size: a path not measured yet starts
     * from the initial rate of the new size. */
    for (int i = 0; i < c->n_peers; i++) if (!c->peers[i].own.bbr.has_bw) rate_init_flow(c, &c->peers[i].own);
    if (!c->shared.bbr.has_bw) rate_init_flow(c, &c->shared);
    index_touch_all(c);
    return LTP_OK;
}

uint32_t ltp_core_datagram(const ltp_core_t *c) { return c ? c->cfg.max_udp_payload_bytes : 0; }

peer_t *core_peer(const ltp_core_t *c, int peer)
{
    return (c && peer >= 0 && peer < c->n_peers) ? &c->peers[peer] : NULL;
}

int core_peer_slot(const ltp_core_t *c, const peer_t *p) { return (int)(p - c->peers); }

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
    if (auth_ready(c, p)) return LTP_EAUTH;
    p->hello_active = 1;
    p->joined = 0;
    p->hello_next_us = now;
    /* The PS echoes the join's nonce in HELLO_ACK: an answer to a HELLO we never sent joins
     * nothing. The clock is mixed in so that the seed alone does not give it away. */
    p->hello_nonce = (uint32_t)(ltp_splitmix64(&c->rng) ^ now ^ (now >> 32)) | 1u;
    p->hello_sends = 0;
    index_touch(c, p);
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

/* The answer to the join's latest HELLO is the path's first RTT sample, as QUIC's handshake gives
 * QUIC its first. Any answer that echoes the join's nonce joins, however many HELLOs went out
 * while it was on its way (a round trip may span many hello_interval_us); it is timed only if it
 * echoes the latest HELLO's number (Karn's rule: an answer to an earlier one is ambiguous).
 * Without the sample the first push's probe timeout and pacing assume initial_rtt_us, and at
 * data-centre rates a sender whose whole first window was dropped waits for that probe longer
 * than the push takes (docs/simulation.md, "The first push"). */
static int on_hello_ack(ltp_core_t *c, peer_t *p, const hdr_t *h, uint64_t now)
{
    if (!p->hello_active && !p->joined) { c->st[LTP_S_STRAY_CONTROL]++; return LTP_OK; }
    if (h->msg_id != p->hello_nonce) { c->st[LTP_S_BAD_ECHO]++; return LTP_EREJECTED; }
    int latest = p->hello_sends && h->segment == (uint16_t)p->hello_sends;
    if (latest && p->hello_active && now >= p->hello_sent_us && !p->has_rtt)
        rtt_sample(c, p, (double)(now - p->hello_sent_us), now);
    p->joined = 1;
    p->hello_active = 0;
    return LTP_OK;
}

/* ---------------------------------------------------------------- input */
int ltp_core_input(ltp_core_t *c, int peer, const uint8_t *buf, size_t len, uint64_t now)
{
    return ltp_core_input_at(c, peer, buf, len, now, now);
}

/* One datagram of len bytes at buf; with payload != NULL a DATA whose payload is there instead
 * of after its header (buf then holds the header and, auth on, the tag the datagram ends with). */
static int input(ltp_core_t *c, int peer, const uint8_t *buf, size_t len, const uint8_t *payload,
                 uint64_t now, uint64_t arrival)
{
    hdr_t h;
    host_entry(c, now);
    c->st[LTP_S_RX_DATAGRAMS]++;
    c->st[LTP_S_RX_BYTES] += len;
    /* Every check before any state changes, cheapest first; each refusal is counted once. The
     * tag is checked under the key of the slot the source address maps to (auth on). */
    if (!wire_plausible(buf, len)) { c->st[LTP_S_MALFORMED]++; return LTP_EMALFORMED; }
    peer_t *p = core_peer(c, peer);
    uint64_t pseq = 0;
    int n = auth_check(c, p, buf, len, payload, &pseq);
    if (n < 0) {
        c->st[n == LTP_EAUTH ? LTP_S_BAD_MAC : n == LTP_EPEER ? LTP_S_UNKNOWN_PEER : LTP_S_MALFORMED]++;
        return n;
    }
    int rc = wire_parse(&c->cfg, buf, (size_t)n, &h);
    if (rc) { c->st[LTP_S_MALFORMED]++; return rc; }
    if (payload) h.payload = payload;
    if (!p || p->rank != h.sender) { c->st[LTP_S_UNKNOWN_PEER]++; return LTP_EPEER; }
    if (h.session != c->cfg.session_id) { c->st[LTP_S_WRONG_SESSION]++; return LTP_ESESSION; }
    if ((rc = auth_window(c, p, pseq)) != LTP_OK) return rc;   /* accepted once, never again */
    c->last_rx_us = MAX(c->last_rx_us, now);
    index_touch(c, p);
    switch (h.type) {
    case LTP_T_DATA:
        if ((rc = admit_data(c, p, &h)) != LTP_OK) return rc;
        /* A floor moves nothing but the receiver's waits, and only a MAC makes it the
         * sender's word: unauthenticated, one forged DATA would end every genuine message
         * below it (docs/ltp-protocol.md, 'A message left behind'). */
        if (c->cfg.auth) rx_note_sender_floor(p, &h);
        hint_on_data(c, p, &h, len, now, MIN(arrival, now));
        return rx_on_data(c, p, &h, now);
    case LTP_T_ACK: return tx_on_ack(c, p, &h, now);
    case LTP_T_CLOSE: return tx_on_close(c, p, &h, now);
    case LTP_T_HELLO:
        p->greeted = 1; p->hello_ack_pending = 1;
        p->hello_echo = h.msg_id; p->hello_echo_number = h.segment;
        return LTP_OK;
    case LTP_T_HELLO_ACK: return on_hello_ack(c, p, &h, now);
    }
    return LTP_EMALFORMED;
}

int ltp_core_input_at(ltp_core_t *c, int peer, const uint8_t *buf, size_t len, uint64_t now, uint64_t arrival)
{
    if (!c) return LTP_EINVAL;
    return input(c, peer, buf, len, NULL, now, arrival);
}

int ltp_core_input_split(ltp_core_t *c, int peer, const uint8_t *head, size_t head_len, const uint8_t *payload,
                         size_t payload_len, uint64_t now, uint64_t arrival)
{
    if (!c || !head) return LTP_EINVAL;
    if (!payload_len) return input(c, peer, head, head_len, NULL, now, arrival);
    /* The parser reads a DATA's header only, so it can judge the datagram by its length; the MAC
     * (auth_check) covers header and payload as the one datagram they were. */
    if (!payload || head_len != LTP_DATA_HDR_BYTES + auth_trailer(&c->cfg) || head[WIRE_TYPE] != LTP_T_DATA)
        return LTP_EINVAL;
    return input(c, peer, head, head_len + payload_len, payload, now, arrival);
}

/* ---------------------------------------------------------------- output */
/* Peer p's control datagram due now, if any: HELLO_ACK, HELLO, CLOSE copies, due ACKs. */
static int peer_control(ltp_core_t *c, peer_t *p, uint64_t now, uint8_t *b, size_t cap)
{
    if (p->hello_ack_pending) {
        p->hello_ack_pending = 0;
        hdr_t h = core_header(c, LTP_T_HELLO_ACK, p->hello_echo, p->hello_echo_number);
        return wire_put_hello(b, &h);
    }
    if (p->hello_active && now >= p->hello_next_us) {
        p->hello_next_us = now + c->cfg.hello_interval_us;
        p->hello_sends++;
        p->hello_sent_us = now;
        hdr_t h = core_header(c, LTP_T_HELLO, p->hello_nonce, (uint16_t)p->hello_sends);
        return wire_put_hello(b, &h);
    }
    return rx_poll_control(c, p, now, b, cap);
}

/* Control datagrams go before DATA, the lowest slot's first (ltp_index.c finds them). */
static int poll_control(ltp_core_t *c, uint64_t now, uint8_t *b, size_t cap, int *peer)
{
    if (cap < LTP_CLOSE_BYTES) return 0;
    for (int pi; (pi = index_ready(c, now)) >= 0;) {
        peer_t *p = &c->peers[pi];
        int n = peer_control(c, p, now, b, cap);
        index_touch(c, p);   /* re-keyed: it has another one due, or none after all */
        if (n) { *peer = pi; return n; }
    }
    return 0;
}

/* The next datagram due; with payload != NULL a DATA's payload by reference. Returns the
 * datagram's whole length. */
static int poll_tx(ltp_core_t *c, uint64_t now, uint8_t *b, size_t cap, int *peer, const uint8_t **payload)
{
    host_entry(c, now);
    index_tick(c, now);   /* timers that change state: close deadlines, RACK, PTO */
    /* With auth on every datagram has room for its trailer; nothing is due for a peer without
     * its key (ltp_core_send and ltp_core_hello refuse it, and nothing from it is accepted). */
    size_t room = auth_trailer(&c->cfg);
    if (cap < room + LTP_HDR_BYTES) return 0;
    cap -= room;
    int n = poll_control(c, now, b, cap, peer);
    if (n) {
        n = auth_seal(c, &c->peers[*peer], b, n, NULL, now);
        if (n > 0) { c->st[LTP_S_TX_DATAGRAMS]++; c->st[LTP_S_TX_BYTES] += (uint64_t)n; }
        return n;
    }
    if (c->n_peers == 0) return 0;
    sched_t s;
    sched_begin(&s);
    sched_scan(c, &s, now, 1, -1);
    if (s.peer < 0 && rate_shared(c)) sched_mark_idle(&c->shared);
    if (sched_decide(c, &s, now) > now || s.peer < 0) return 0;
    c->rr = (s.peer + 1) % c->n_peers;
    n = sched_emit(c, &s, now, b, cap, peer, payload);
    index_touch(c, &c->peers[s.peer]);
    if (n > 0 && room) {
        n = auth_seal(c, &c->peers[*peer], b, n, payload ? *payload : NULL, now);
        c->st[LTP_S_TX_BYTES] += room;
    }
    return n;
}

int ltp_core_poll_tx(ltp_core_t *c, uint64_t now, uint8_t *b, size_t cap, int *peer)
{
    if (!c || !b || !peer) return LTP_EINVAL;
    return poll_tx(c, now, b, cap, peer, NULL);
}

int ltp_core_poll_tx_ref(ltp_core_t *c, uint64_t now, uint8_t *b, size_t cap, const uint8_t **payload,
                         uint32_t *payload_len, int *peer)
{
    if (!c || !b || !payload || !payload_len || !peer) return LTP_EINVAL;
    *payload = NULL;
    *payload_len = 0;
    int n = poll_tx(c, now, b, cap, peer, payload);
    if (n > 0 && *payload) {   /* the header in b, then (auth on) its tag; the payload apart */
        *payload_len = (uint32_t)((size_t)n - LTP_DATA_HDR_BYTES - auth_trailer(&c->cfg));
        n = (int)LTP_DATA_HDR_BYTES;
    }
    return n;
}

/* The earliest of every peer's timers and control datagrams (HELLO_ACK and CLOSE copies: now)
 * and of when the scheduler's choice may send. */
uint64_t ltp_core_next_timeout(ltp_core_t *c, uint64_t now)
{
    if (!c) return NEVER;
    host_entry(c, now);
    index_refresh(c, now);
    sched_t s;
    sched_begin(&s);
    int urgent = index_urgent(c);
    if (urgent >= 0) {   /* the peers before it were considered (fair: their tokens refilled) */
        sched_scan(c, &s, now, 0, urgent);
        return now;
    }
    uint64_t t = index_due(c);
    sched_scan(c, &s, now, 0, -1);
    t = MIN(t, sched_decide(c, &s, now));
    c->due_us = t > now ? t : NEVER;   /* an entry at or after it measures the host (host_entry) */
    return t < now ? now : t;
}

/* ---------------------------------------------------------------- closing */
int ltp_core_linger(ltp_core_t *c, uint64_t now)
{
    if (!c) return LTP_EINVAL;
    c->linger_from_us = MAX(now, 1);
    for (int pi = 0; pi < c->n_peers; pi++) rx_farewell(c, &c->peers[pi]);
    index_touch_all(c);
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
