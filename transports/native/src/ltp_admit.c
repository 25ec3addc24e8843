/* ltp_admit.c: what the receive side lets in. The parser (ltp_wire.c) only knows what one datagram
 * can say about itself; this file holds what a receiver knows besides and checks every DATA
 * against it before any state changes:
 *
 *   - the layout: the exact size of every segment it expects (ltp_core_expect), so a DATA of
 *     another segment, size, packet count, chunk or critical span is refused (bad_shape);
 *   - the message-id window: a key with no context may open one only if its id lies within
 *     rx_msg_window after the last id taken (out_of_window); ids up to the last taken are stale;
 *   - the bytes already stored: a second copy of a packet whose bytes differ disputes it; the
 *     packet is delivered as missing (dup_conflict), never as whichever copy came first;
 *   - time and order: when a new key finds the table full, open contexts that heard nothing for
 *     rx_idle_evict_us go first, then the highest id for a lower one (both rx_evicted), so
 *     contexts nobody completes cannot hold the table, even when kept busy. An idle context is
 *     not evicted while there is room: its sender may only be backed off, and may have counted
 *     ACKs for what the context holds.
 *
 * docs/ltp-protocol.md §11 lists every check with its counter.
 */
#include "ltp_internal.h"

#include <stdlib.h>
#include <string.h>

/* Closed keys per expected segment in every peer's ring: the batch being closed (CLOSE copies
 * still pending), the previous one (late data gets its CLOSE again), and room for the next. */
#define RING_PER_SEGMENT 4u

/* ---------------------------------------------------------------- the layout */
int ltp_core_expect(ltp_core_t *c, uint16_t seg, uint32_t total, uint32_t critical_bytes)
{
    if (!c || total == 0 || total % 4 || total > c->cfg.max_msg_bytes || critical_bytes > total)
        return LTP_EINVAL;
    if (((uint64_t)critical_bytes + c->chunk - 1) / c->chunk > 0xFFFF) return LTP_EINVAL;
    if (grow_zeroed((void **)&c->expect, &c->n_expect_slots, seg, sizeof *c->expect)) return LTP_ENOMEM;
    uint32_t n_expected = c->n_expected + !c->expect[seg].set;
    uint64_t want = (uint64_t)RING_PER_SEGMENT * n_expected;
    if (want > c->ring_cap) {
        int rc = admit_ring_grow(c, (uint32_t)MIN(want, 1u << 24));
        if (rc) return rc;
    }
    c->expect[seg] = (expect_t){total, critical_bytes, 0, 0, 1};
    c->n_expected = n_expected;
    admit_reshape(c);
    return LTP_OK;
}

void admit_reshape(ltp_core_t *c)
{
    for (uint32_t i = 0; i < c->n_expect_slots; i++) {
        expect_t *e = &c->expect[i];
        if (!e->set) continue;
        e->count = (uint32_t)(((uint64_t)e->total + c->chunk - 1) / c->chunk);
        e->critical = (uint32_t)MIN(((uint64_t)e->critical_bytes + c->chunk - 1) / c->chunk, 0xFFFF);
    }
}

int admit_shape(ltp_core_t *c, const hdr_t *h)
{
    if (!c->n_expected) return LTP_OK;
    const expect_t *e = h->segment < c->n_expect_slots ? &c->expect[h->segment] : NULL;
    /* With the count fixed by total and our chunk, a packet's offset and length are too (the
     * parser has checked index < count). */
    if (!e || !e->set || h->total != e->total || h->count != e->count || h->critical != e->critical ||
        h->offset != h->index * c->chunk ||
        h->payload_len != (h->index + 1 < e->count ? c->chunk : e->total - (e->count - 1) * c->chunk)) {
        c->st[LTP_S_BAD_SHAPE]++;
        return LTP_EREJECTED;
    }
    return LTP_OK;
}

/* ---------------------------------------------------------------- the message-id window */
int admit_new_id(ltp_core_t *c, const peer_t *p, uint32_t id, uint16_t seg)
{
    if (p->floor_valid && id == p->floor) {   /* the id last taken: stale only where taken */
        if (p->floor_whole) return LTP_ESTALE;
        for (uint32_t i = 0; i < p->n_floor_segs; i++) if (p->floor_segs[i] == seg) return LTP_ESTALE;
        return LTP_OK;
    }
    uint32_t lo = p->floor_valid ? p->floor + 1 : c->cfg.rx_first_msg_id;
    if ((uint32_t)(id - lo) < c->cfg.rx_msg_window) return LTP_OK;
    if (p->floor_valid && seq_lt(id, p->floor)) return LTP_ESTALE;   /* before the last taken */
    c->st[LTP_S_OUT_OF_WINDOW]++;
    return LTP_EREJECTED;
}

void admit_taken(ltp_core_t *c, peer_t *p, uint32_t id, uint16_t seg)
{
    (void)c;
    if (p->floor_valid && seq_lt(id, p->floor)) return;   /* older than the floor: stale anyway */
    if (!p->floor_valid || id != p->floor) {
        p->floor = id; p->floor_valid = 1;
        p->n_floor_segs = 0; p->floor_whole = 0;
    }
    for (uint32_t i = 0; i < p->n_floor_segs; i++) if (p->floor_segs[i] == seg) return;
    if (p->n_floor_segs == p->cap_floor_segs) {
        uint32_t n = p->cap_floor_segs ? 2 * p->cap_floor_segs : 8;
        uint16_t *ns = n <= 0x10000 ? realloc(p->floor_segs, n * sizeof *ns) : NULL;
        if (!ns) { p->floor_whole = 1; return; }   /* the safe side: the whole id is stale */
        p->floor_segs = ns;
        p->cap_floor_segs = n;
    }
    p->floor_segs[p->n_floor_segs++] = seg;
}

int admit_data(ltp_core_t *c, const peer_t *p, const hdr_t *h)
{
    int rc = admit_shape(c, h);
    if (rc) return rc;
    if (rx_lookup(c, p, h->msg_id, h->segment) || ring_lookup(c, p, h->msg_id, h->segment)) return LTP_OK;
    rc = admit_new_id(c, p, h->msg_id, h->segment);
    return rc == LTP_ESTALE ? LTP_OK : rc;   /* stale data is answered (rx_on_data) */
}

/* ---------------------------------------------------------------- copies that disagree */
int admit_conflict(ltp_core_t *c, rxmsg_t *m, const hdr_t *h)
{
    uint64_t bit = 1ull << (h->index % 64);
    if (m->disputed && (m->disputed[h->index / 64] & bit)) return 0;   /* already settled: missing */
    if (memcmp(m->buf + h->offset, h->payload, h->payload_len) == 0) return 0;
    if (!m->disputed && !(m->disputed = calloc((m->count + 63) / 64, sizeof *m->disputed))) return 0;
    /* Which copy is genuine cannot be told without a MAC: deliver neither. The packet stays
     * received for ACKs and closing (its sender will not send it again), but its floats are
     * zero and its mask is 0, so the filler repairs it. */
    m->disputed[h->index / 64] |= bit;
    memset(m->buf + h->offset, 0, h->payload_len);
    m->received_bytes -= h->payload_len;
    m->conflicts++;
    c->st[LTP_S_DUP_CONFLICT]++;
    return 1;
}

/* ---------------------------------------------------------------- age */
uint64_t admit_evict_deadline(const ltp_core_t *c, const rxmsg_t *m)
{
    if (!m->used || m->closed) return NEVER;
    return m->last_us + c->cfg.rx_idle_evict_us;
}

void admit_evict_idle(ltp_core_t *c, peer_t *p, uint64_t now)
{
    for (uint32_t j = 0; j < c->cfg.max_open_per_peer; j++) {
        rxmsg_t *m = &p->rx[j];
        if (m->used && !m->closed && now >= admit_evict_deadline(c, m)) {
            rx_release(c, p, m);
            c->st[LTP_S_RX_EVICTED]++;
        }
    }
}

rxmsg_t *admit_make_room(ltp_core_t *c, peer_t *p, uint32_t msg_id)
{
    /* The application takes a peer's messages in id order, so of two messages the lower id is
     * needed first. A peer that behaves holds at most two ids at once, far below the table's
     * size; a table full of higher ids than the one arriving is full of messages that someone
     * forged (kept busy, so they never go idle). */
    rxmsg_t *top = NULL;
    for (uint32_t j = 0; j < c->cfg.max_open_per_peer; j++) {
        rxmsg_t *m = &p->rx[j];
        if (m->used && (!top || seq_lt(top->msg_id, m->msg_id))) top = m;
    }
    if (!top || !seq_lt(msg_id, top->msg_id)) return NULL;
    rx_release(c, p, top);
    c->st[LTP_S_RX_EVICTED]++;
    return top;
}

double admit_peer_srtt(const ltp_core_t *c, uint32_t srtt_us)
{
    /* A forged srtt would stretch the grace period without bound; no genuine one exceeds the
     * longest a receiver waits for a message anyway. */
    return MIN((double)srtt_us, (double)c->cfg.max_wait_us);
}

/* ---------------------------------------------------------------- the closed ring */
int admit_ring_grow(ltp_core_t *c, uint32_t cap)
{
    for (int i = 0; i < c->n_peers; i++) {
        peer_t *p = &c->peers[i];
        closed_t *r = realloc(p->ring, (size_t)cap * sizeof *r);
        if (!r) return LTP_ENOMEM;
        memset(r + c->ring_cap, 0, (size_t)(cap - c->ring_cap) * sizeof *r);
        p->ring = r;
    }
    c->ring_cap = cap;
    return LTP_OK;
}
