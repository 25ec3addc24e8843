/* ltp_recv.c: the receive side. Implicit receive contexts (a message opens with its first DATA),
 * selective ACKs, the early-close rule with its adaptive threshold and per-segment policies, the
 * ring of recently closed messages that answers late data with CLOSE, and handing a closed
 * message to the application. docs/ltp-protocol.md §4.
 */
#include "ltp_internal.h"

#include <stdlib.h>
#include <string.h>

void rx_free(rxmsg_t *m)
{
    if (!m->posted) free(m->buf);   /* a posted buffer is the application's */
    free(m->bits);
    free(m->disputed);
    memset(m, 0, sizeof *m);
}

/* p has one open context more (+1) or less (-1): the rate hint counts the peers that have any. */
static void rx_count_open(ltp_core_t *c, peer_t *p, int delta)
{
    p->n_rx_open = (uint32_t)((int)p->n_rx_open + delta);
    if (p->n_rx_open == (delta > 0)) hint_open(c, p, delta > 0);
}

void rx_release(ltp_core_t *c, peer_t *p, rxmsg_t *m)
{
    if (m->used && !m->closed) rx_count_open(c, p, -1);
    rx_free(m);
}

/* ---------------------------------------------------------------- thresholds */
/* The first-pass loss estimate p_hat of peer p's messages of segment seg: the least loss of
 * their last loss_window messages. Random loss is in every message; congestion drops come in
 * bursts that hit some messages and not others (the first iterations' slow start, an incast
 * overshoot, a retransmission round colliding with the next sender), so the least of several is
 * the random part. A mean (what this was) counts the bursts as loss to expect and lowers the
 * threshold below what the random loss leaves: at 25 ms one way and 2 % loss, messages closed
 * at the 0.80 floor.
 *
 * The window is the segment's own: PLOT sends one message per layer, and a layer of one packet
 * loses all of it or nothing, mostly nothing; in a window shared by every segment one such
 * message held p_hat at 0 and every layer at the top of its range. Until the segment has
 * loss_window messages (or for a segment without a window) the peer's window stands in, which
 * takes only messages of at least loss_min_packets packets (they can measure a fraction of loss),
 * and 0 until it has that many.
 * For a peer that sends one segment (LTP) the segment's window takes every message the peer's
 * did before, and the peer's takes a subset of them, so p_hat is what it was, to the bit. */
static int least_loss(const float *ring, uint32_t n, uint32_t cap, uint32_t w, double *out)
{
    if (n < w) return 0;
    double lo = 1.0;
    for (uint32_t i = 0; i < w; i++) lo = MIN(lo, (double)ring[(n - 1 - i) % cap]);
    *out = lo;
    return 1;
}

static double p_hat(const ltp_core_t *c, const peer_t *p, uint16_t seg)
{
    uint32_t w = c->cfg.loss_window;
    double lo = 0;
    if (seg < p->n_seg_loss && least_loss(p->seg_loss + (size_t)seg * w, p->seg_n_loss[seg], w, w, &lo)) return lo;
    return least_loss(p->loss_ring, p->n_loss, LTP_LOSS_WINDOW_MAX, w, &lo) ? lo : 0;
}

static void loss_note(const ltp_core_t *c, peer_t *p, uint16_t seg, uint32_t count, double sample)
{
    uint32_t w = c->cfg.loss_window;
    if (seg < p->n_seg_loss) p->seg_loss[(size_t)seg * w + p->seg_n_loss[seg]++ % w] = (float)sample;
    if (count >= c->cfg.loss_min_packets) p->loss_ring[p->n_loss++ % LTP_LOSS_WINDOW_MAX] = (float)sample;
}

/* Windows for segment 0 (LTP's, the default policy's) and each segment of the policy table: the
 * application sets that table from its layout, so a peer's windows are bounded by it, whatever
 * segments arrive. */
int rx_loss_fit(const ltp_core_t *c, peer_t *p)
{
    uint32_t want = MAX(1u, c->n_policy), w = c->cfg.loss_window;
    if (want <= p->n_seg_loss) return LTP_OK;
    uint32_t *n = realloc(p->seg_n_loss, want * sizeof *n);
    if (!n) return LTP_ENOMEM;
    p->seg_n_loss = n;
    float *ring = realloc(p->seg_loss, (size_t)want * w * sizeof *ring);
    if (!ring) return LTP_ENOMEM;   /* the counts grew alone: n_seg_loss still says how many */
    p->seg_loss = ring;
    memset(n + p->n_seg_loss, 0, (want - p->n_seg_loss) * sizeof *n);
    p->n_seg_loss = want;
    return LTP_OK;
}

/* One core, several policies: a segment's bounds are a table lookup, the config is the default. */
static void policy_bounds(const ltp_core_t *c, uint16_t seg, double *lo, double *hi)
{
    *lo = c->cfg.threshold_min;
    *hi = c->cfg.threshold_max;
    if (seg < c->n_policy && c->policy[seg].set) { *lo = c->policy[seg].lo; *hi = c->policy[seg].hi; }
}

static double policy_min(const ltp_core_t *c, uint16_t seg)
{
    double lo, hi;
    policy_bounds(c, seg, &lo, &hi);
    return lo;
}

static double policy_threshold(const ltp_core_t *c, const peer_t *p, uint16_t seg)
{
    double lo, hi;
    policy_bounds(c, seg, &lo, &hi);
    if (lo >= hi) return hi;
    double rtt_term = 0;
    if (p->has_tpass && p->t_pass_us > 0) rtt_term = MIN(1.0, p->peer_srtt_us / p->t_pass_us);
    /* Close at what the random loss leaves of a message, 1 - p_hat, never above hi. */
    double th = MIN(hi, 1.0 - c->cfg.loss_weight * p_hat(c, p, seg)) - c->cfg.rtt_weight * rtt_term;
    return th < lo ? lo : th > hi ? hi : th;
}

int ltp_core_set_policy(ltp_core_t *c, uint16_t seg, double lo, double hi)
{
    if (!c || !(lo >= 0 && lo <= hi && hi <= 1)) return LTP_EINVAL;
    if (grow_zeroed((void **)&c->policy, &c->n_policy, seg, sizeof *c->policy)) return LTP_ENOMEM;
    for (int i = 0; i < c->n_peers; i++)
        if (rx_loss_fit(c, &c->peers[i])) return LTP_ENOMEM;   /* its policy stays what it was */
    c->policy[seg] = (policy_t){(float)lo, (float)hi, 1};
    /* Open messages may close at the new threshold: poll_tx evaluates them again. */
    for (int pi = c->act_head; pi >= 0; pi = c->peers[pi].act_next) index_touch(c, &c->peers[pi]);
    return LTP_OK;
}

double ltp_core_threshold(const ltp_core_t *c, int peer, uint16_t seg)
{
    const peer_t *p = core_peer(c, peer);
    return p ? policy_threshold(c, p, seg) : -1.0;
}

static uint64_t grace_us(const ltp_core_t *c, const peer_t *p)
{
    double g = c->cfg.grace_rtt_mult * p->peer_srtt_us;
    return (uint64_t)MAX((double)c->cfg.close_grace_min_us, g);
}

/* ---------------------------------------------------------------- closed messages */
closed_t *ring_lookup(const ltp_core_t *c, const peer_t *p, uint32_t msg_id, uint16_t seg)
{
    for (uint32_t i = 0; i < c->ring_cap; i++)
        if (p->ring[i].used && p->ring[i].msg_id == msg_id && p->ring[i].segment == seg) return &p->ring[i];
    return NULL;
}

/* Every change of close_pending goes through here so the per-peer count stays exact. */
static void set_close_pending(peer_t *p, closed_t *e, uint32_t copies)
{
    if (e->close_pending && !copies) p->n_close_pending--;
    if (!e->close_pending && copies) p->n_close_pending++;
    e->close_pending = (uint8_t)copies;
}

static closed_t *ring_push(ltp_core_t *c, peer_t *p, uint32_t msg_id, uint16_t seg)
{
    /* The oldest entry whose CLOSE copies have all gone out; only a ring full of pending ones
     * (not sized for this many segments) loses copies, and that is counted. */
    uint32_t k = 0;
    while (k < c->ring_cap && p->ring[(p->ring_head + k) % c->ring_cap].close_pending) k++;
    if (k == c->ring_cap) { k = 0; c->st[LTP_S_CLOSE_RING_FULL]++; }
    closed_t *e = &p->ring[(p->ring_head + k) % c->ring_cap];
    p->ring_head = (p->ring_head + k + 1) % c->ring_cap;
    set_close_pending(p, e, 0);
    memset(e, 0, sizeof *e);
    e->used = 1; e->msg_id = msg_id; e->segment = seg;
    return e;
}

/* Closing: one more CLOSE copy for the message p closed last, in case every earlier one was lost
 * and its sender is still waiting (late_data answers it too, but only while this end is there).
 * It echoes what the entry last echoed (the DATA that closed it, or the latest late one). */
void rx_farewell(ltp_core_t *c, peer_t *p)
{
    closed_t *e = &p->ring[(p->ring_head + c->ring_cap - 1) % c->ring_cap];
    if (e->used && !e->close_pending) set_close_pending(p, e, 1);
}

/* Late data for a closed message: the sender missed our CLOSE, repeat it (once per burst),
 * echoing this DATA so the sender can tell our CLOSE from a forged one. */
static void late_data(ltp_core_t *c, peer_t *p, closed_t *e, const hdr_t *h)
{
    if (e) { e->echo_ts = h->ts; e->echo_seq = h->tx_seq; }
    if (e && !e->close_pending) { set_close_pending(p, e, 1); c->st[LTP_S_CLOSE_RESENT]++; }
    c->st[LTP_S_LATE_DATA]++;
}

static void rx_close(ltp_core_t *c, peer_t *p, rxmsg_t *m, int reason, uint64_t now)
{
    m->closed = 1;
    rx_count_open(c, p, -1);
    m->reason = reason;
    m->close_us = now;
    m->threshold = policy_threshold(c, p, m->segment);
    m->ack_pending = 0;
    /* Learn this peer's first-pass loss and pass duration for the next threshold. (In 64 bits: a
     * forged tx_seq of 2^32 - 1 wrapped to no first pass at all, so the close gave no sample.) */
    uint64_t first_seen = (uint64_t)m->max_first_seq + 1;
    uint32_t n_first = m->pass_end_us ? m->count : (uint32_t)MIN((uint64_t)m->count, first_seen);
    if (n_first > 0) loss_note(c, p, m->segment, m->count, 1.0 - (double)MIN(m->first_rcvd, n_first) / n_first);
    if (m->pass_end_us > m->first_us) {
        double t = (double)(m->pass_end_us - m->first_us);
        p->t_pass_us = p->has_tpass ? 0.75 * p->t_pass_us + 0.25 * t : t;
        p->has_tpass = 1;
    }
    closed_t *e = ring_lookup(c, p, m->msg_id, m->segment);
    if (!e) e = ring_push(c, p, m->msg_id, m->segment);
    e->received = m->received; e->count = m->count; e->reason = (uint8_t)reason;
    e->echo_ts = m->echo_ts; e->echo_seq = m->echo_seq;
    set_close_pending(p, e, c->cfg.close_copies);
    c->st[reason == LTP_CLOSE_COMPLETE ? LTP_S_CLOSE_COMPLETE
          : reason == LTP_CLOSE_EARLY ? LTP_S_CLOSE_EARLY : LTP_S_CLOSE_MAX_WAIT]++;
}

/* ---------------------------------------------------------------- early close */
void rx_check_close(ltp_core_t *c, peer_t *p, rxmsg_t *m, uint64_t now)
{
    if (m->closed) return;
    index_eval(c, m, now);
    if (m->received == m->count) { rx_close(c, p, m, LTP_CLOSE_COMPLETE, now); return; }
    if (m->crit_rcvd < m->critical) return;
    double frac = (double)m->received_bytes / m->total;
    if (m->pass_end_us && now >= m->pass_end_us + grace_us(c, p) && frac >= policy_threshold(c, p, m->segment))
        rx_close(c, p, m, LTP_CLOSE_EARLY, now);
    else if (now >= m->first_us + c->cfg.max_wait_us && frac >= policy_min(c, m->segment))
        rx_close(c, p, m, LTP_CLOSE_MAX_WAIT, now);
}

/* When open message m's close deadlines come (its ACK's is the index's, ltp_index.c); NEVER if
 * closed. A close deadline the rule was already evaluated at or after is no timer any more: the
 * message stayed open below its threshold, and only an event can close it now (a DATA, or a new
 * threshold: either touches its peer, which poll_tx then evaluates again), so returning it would
 * have the caller wake over and over for nothing. */
uint64_t rx_close_deadline(const ltp_core_t *c, const peer_t *p, const rxmsg_t *m)
{
    if (!m->used || m->closed) return NEVER;
    uint64_t t = NEVER, cap = m->first_us + c->cfg.max_wait_us, checked = index_checked_us(c, m);
    if (cap > checked) t = cap;
    if (m->pass_end_us && m->pass_end_us + grace_us(c, p) > checked)
        t = MIN(t, m->pass_end_us + grace_us(c, p));
    return t;   /* idle eviction is no timer: it happens when a new key needs the place */
}

/* ---------------------------------------------------------------- DATA */
rxmsg_t *rx_lookup(const ltp_core_t *c, const peer_t *p, uint32_t msg_id, uint16_t seg)
{
    for (uint32_t i = 0; i < c->cfg.max_open_per_peer; i++)
        if (p->rx[i].used && p->rx[i].msg_id == msg_id && p->rx[i].segment == seg) return &p->rx[i];
    return NULL;
}

/* The sender's chunk size, as the DATA's shape implies it (the parser checked the shape). */
static uint32_t data_chunk(const hdr_t *h)
{
    return h->index + 1 < h->count ? h->payload_len : h->count == 1 ? h->total : h->offset / (h->count - 1);
}

/* A DATA for no open context: answer late data, refuse stale data, or open a context. */
static int rx_open(ltp_core_t *c, peer_t *p, const hdr_t *h, uint64_t now, rxmsg_t **out)
{
    closed_t *e = ring_lookup(c, p, h->msg_id, h->segment);
    if (e) { late_data(c, p, e, h); return LTP_OK; }
    int rc = admit_new_id(c, p, h->msg_id, h->segment);
    if (rc == LTP_EREJECTED) return rc;
    if (rc == LTP_ESTALE) {
        e = ring_push(c, p, h->msg_id, h->segment);
        e->count = h->count; e->reason = LTP_CLOSE_STALE;
        e->echo_ts = h->ts; e->echo_seq = h->tx_seq;
        set_close_pending(p, e, 1);
        c->st[LTP_S_STALE]++; c->st[LTP_S_CLOSE_STALE]++;
        return LTP_ESTALE;
    }
    rxmsg_t *m = NULL;
    for (uint32_t i = 0; i < c->cfg.max_open_per_peer && !m; i++) if (!p->rx[i].used) m = &p->rx[i];
    if (!m) {   /* the table is full: idle contexts go first, then a higher id (admit_make_room) */
        admit_evict_idle(c, p, now);
        for (uint32_t i = 0; i < c->cfg.max_open_per_peer && !m; i++) if (!p->rx[i].used) m = &p->rx[i];
    }
    if (!m) m = admit_make_room(c, p, h->msg_id);
    if (!m) { c->st[LTP_S_RX_TABLE_FULL]++; return LTP_EDROPPED; }
    /* Not zeroed: taking a message zeroes what never arrived. */
    m->buf = rx_posted(c, core_peer_slot(c, p), h->msg_id, h->segment, h->total);
    m->posted = m->buf != NULL;
    if (!m->buf) m->buf = malloc(h->total);
    m->bits = calloc((h->count + 63) / 64, sizeof *m->bits);
    if (!m->buf || !m->bits) { rx_free(m); return LTP_ENOMEM; }
    m->used = 1; m->msg_id = h->msg_id; m->segment = h->segment; m->total = h->total;
    rx_count_open(c, p, +1);
    m->context = ++c->n_opened;
    m->count = h->count; m->chunk = data_chunk(h); m->critical = h->critical;
    m->first_us = m->last_us = now;
    *out = m;
    return LTP_OK;
}

/* Record one DATA of open message m and schedule its ACK. */
static void rx_store(ltp_core_t *c, const peer_t *p, rxmsg_t *m, const hdr_t *h, uint64_t now)
{
    uint64_t bit = 1ull << (h->index % 64);
    uint64_t *w = &m->bits[h->index / 64];
    int retrans = (h->flags & LTP_F_RETRANSMIT) != 0;
    if (retrans) m->retransmits++;
    if (*w & bit) {
        if (!admit_conflict(c, m, h)) { m->duplicates++; c->st[LTP_S_DUPLICATES]++; }
    } else {
        m->last_us = now;
        *w |= bit;
        if (h->payload != m->buf + h->offset)   /* else the driver read it into place */
            memcpy(m->buf + h->offset, h->payload, h->payload_len);
        m->received++;
        m->received_bytes += h->payload_len;
        if (!retrans) m->first_rcvd++;
        if (h->index < m->critical) m->crit_rcvd++;
        if (h->index > m->max_idx) m->max_idx = h->index;
        while (m->base < m->count && (m->bits[m->base / 64] >> (m->base % 64) & 1)) m->base++;
    }
    if (!retrans && h->tx_seq > m->max_first_seq) m->max_first_seq = h->tx_seq;
    if (!m->pass_end_us && (h->flags & LTP_F_PASS_DONE)) m->pass_end_us = now;
    m->echo_ts = h->ts; m->echo_seq = h->tx_seq; m->echo_arrival_us = now;
    if (m->ack_pending++ == 0) m->ack_due_us = now + (uint64_t)ack_hold_us(c, p->peer_srtt_us);
    /* Once the first pass is over the sender is draining; late feedback only slows recovery. */
    if (m->ack_pending >= c->cfg.ack_every || (h->flags & (LTP_F_PASS_DONE | LTP_F_PROBE)) || m->base == m->count)
        m->ack_due_us = now;
}

int rx_on_data(ltp_core_t *c, peer_t *p, const hdr_t *h, uint64_t now)
{
    if (h->srtt) {
        p->peer_srtt_us = admit_peer_srtt(c, h->srtt);
        hint_srtt(c, p);
    }
    rxmsg_t *m = rx_lookup(c, p, h->msg_id, h->segment);
    if (!m) {
        rxmsg_t *opened = NULL;
        int rc = rx_open(c, p, h, now, &opened);
        if (!opened) return rc;
        m = opened;
    } else if (h->total != m->total || h->count != m->count || h->critical != m->critical ||
               data_chunk(h) != m->chunk) {
        c->st[LTP_S_MALFORMED]++;
        return LTP_EMALFORMED;
    }
    if (m->closed) {
        /* Closed, not yet taken: a copy that disagrees with what is stored still disputes it. */
        if (m->bits[h->index / 64] >> (h->index % 64) & 1) admit_conflict(c, m, h);
        late_data(c, p, ring_lookup(c, p, m->msg_id, m->segment), h);
        return LTP_OK;
    }
    rx_store(c, p, m, h, now);
    rx_note_stored(p, m, h->index);
    rx_check_close(c, p, m, now);
    return LTP_OK;
}

/* ---------------------------------------------------------------- control out */
static int build_ack(ltp_core_t *c, rxmsg_t *m, uint64_t now, uint8_t *b, size_t cap)
{
    uint32_t max_bits = (uint32_t)MIN((size_t)c->cfg.max_udp_payload_bytes - auth_trailer(&c->cfg), cap);
    if (max_bits < LTP_ACK_HDR_BYTES) return LTP_EINVAL;
    max_bits = MIN((max_bits - LTP_ACK_HDR_BYTES) * 8u, 0xFFF8u);
    uint32_t bits = 0;
    if (m->base < m->count && m->max_idx >= m->base) bits = MIN(((m->max_idx - m->base + 1) + 7) & ~7u, max_bits);
    hdr_t h = core_header(c, LTP_T_ACK, m->msg_id, m->segment);
    h.received = m->received; h.base = m->base; h.echo_ts = m->echo_ts;
    h.ack_delay = (uint32_t)MIN(now - m->echo_arrival_us, 0xFFFFFFFFull); h.echo_seq = m->echo_seq;
    h.bits = (uint16_t)bits;
    h.hint_kbps = hint_kbps(c, now);
    if (h.hint_kbps) c->st[LTP_S_ACKS_HINTED]++;
    int n = wire_put_ack(b, &h);
    uint8_t *bm = b + LTP_ACK_HDR_BYTES;
    uint32_t nw = (m->count + 63) / 64;
    for (uint32_t j = 0; j < bits; j += 8) {
        uint32_t pos = m->base + j, wi = pos / 64, sh = pos % 64;
        uint64_t v = wi < nw ? m->bits[wi] >> sh : 0;   /* bits past count are never set */
        if (sh > 56 && wi + 1 < nw) v |= m->bits[wi + 1] << (64 - sh);
        bm[j / 8] = (uint8_t)v;
    }
    m->ack_pending = 0;
    return n;
}

/* The next CLOSE copy or due ACK toward peer p, written to b; 0 if none. */
int rx_poll_control(ltp_core_t *c, peer_t *p, uint64_t now, uint8_t *b, size_t cap)
{
    for (uint32_t j = 0; p->n_close_pending && j < c->ring_cap; j++) {
        closed_t *e = &p->ring[j];
        if (!e->used || !e->close_pending) continue;
        set_close_pending(p, e, e->close_pending - 1u);
        hdr_t h = core_header(c, LTP_T_CLOSE, e->msg_id, e->segment);
        h.received = e->received; h.close_count = e->count; h.reason = e->reason;
        h.echo_ts = e->echo_ts; h.echo_seq = e->echo_seq;
        return wire_put_close(b, &h);
    }
    for (uint32_t j = 0; j < c->cfg.max_open_per_peer; j++) {
        rxmsg_t *m = &p->rx[j];
        if (m->used && !m->closed && m->ack_pending && m->ack_due_us <= now) {
            c->st[LTP_S_ACKS_SENT]++;
            return build_ack(c, m, now, b, cap);
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- the application's side */
int ltp_core_rx_ready(const ltp_core_t *c, int peer, uint32_t msg_id, uint16_t seg)
{
    const peer_t *p = core_peer(c, peer);
    if (!p) return LTP_EINVAL;
    const rxmsg_t *m = rx_lookup(c, p, msg_id, seg);
    if (m) return m->closed;
    if (p->floor_valid && seq_lt(msg_id, p->floor)) return 0;   /* the application moved past it */
    return p->sender_floor_known && seq_lt(msg_id, p->sender_floor) ? LTP_RX_GONE : 0;
}

/* An accepted DATA's word on what its sender finished with: every id below id - open_back. */
void rx_note_sender_floor(peer_t *p, const hdr_t *h)
{
    uint32_t floor = h->msg_id - h->open_back;
    if (!p->sender_floor_known || seq_lt(p->sender_floor, floor)) {
        p->sender_floor = floor;
        p->sender_floor_known = 1;
    }
}

double ltp_core_rx_frac(const ltp_core_t *c, int peer, uint32_t msg_id, uint16_t seg)
{
    const peer_t *p = core_peer(c, peer);
    const rxmsg_t *m = p ? rx_lookup(c, p, msg_id, seg) : NULL;
    return m ? (double)m->received_bytes / m->total : -1.0;
}

static void fill_stats(const peer_t *p, const rxmsg_t *m, ltp_msg_stats_t *s)
{
    s->packets = m->received; s->count = m->count; s->duplicates = m->duplicates;
    s->retransmits = m->retransmits; s->critical_count = m->critical;
    s->received_bytes = m->received_bytes; s->total_bytes = m->total;
    s->close_reason = (uint64_t)m->reason; s->early_closed = m->received < m->count;
    s->elapsed_us = m->close_us - m->first_us;
    s->pass_us = m->pass_end_us ? m->pass_end_us - m->first_us : 0;
    s->threshold_frac = m->threshold; s->peer_srtt_us = p->peer_srtt_us;
    s->conflicts = m->conflicts;
}

int ltp_core_rx_take(ltp_core_t *c, int peer, uint32_t msg_id, uint16_t seg, void *out, uint32_t cap,
                     uint8_t *mask, ltp_msg_stats_t *s)
{
    peer_t *p = core_peer(c, peer);
    if (!p) return LTP_EINVAL;
    rxmsg_t *m = rx_lookup(c, p, msg_id, seg);
    if (!m || !m->closed) return LTP_ENOTFOUND;
    if (!out || cap < m->total) return LTP_EINVAL;
    if (out != m->buf) memcpy(out, m->buf, m->total);   /* else it arrived in place (posted) */
    /* Whole: every packet arrived and none is disputed (admit_conflict zeroed those already). */
    int whole = m->received == m->count && !m->conflicts;
    for (uint32_t i = 0; !whole && i < m->count; i++) {
        uint32_t start = i * m->chunk, len = i + 1 < m->count ? m->chunk : m->total - start;
        int got = (int)(m->bits[i / 64] >> (i % 64) & 1);
        if (!got) memset((uint8_t *)out + start, 0, len);
        if (m->disputed && (m->disputed[i / 64] >> (i % 64) & 1)) got = 0;
        if (mask) memset(mask + start / 4, got, len / 4);
    }
    if (whole && mask) memset(mask, 1, m->total / 4);
    if (s) fill_stats(p, m, s);
    /* Anything older than what the application just took will never be asked for. */
    admit_taken(c, p, msg_id, seg);
    for (uint32_t j = 0; j < c->cfg.max_open_per_peer; j++) {
        rxmsg_t *o = &p->rx[j];
        if (o->used && seq_lt(o->msg_id, p->floor)) {
            if (!o->closed) c->st[LTP_S_STALE]++;
            rx_release(c, p, o);
        }
    }
    rx_release(c, p, m);
    index_touch(c, p);
    return LTP_OK;
}
