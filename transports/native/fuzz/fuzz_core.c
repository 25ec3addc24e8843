/* fuzz_core.c: a structure-aware, stateful libFuzzer target for the LTP core.
 *
 * Build and run with `make -C transports/native fuzz` (`invoke fuzz` also reports coverage). The
 * input is a program: a configuration byte and a size byte, then operations, each an opcode byte
 * and its arguments. A worker core and a PS core talk through two queues the program controls
 * (deliver, drop, duplicate, reorder, corrupt), while the program also starts and takes messages
 * in both directions, moves time (small steps and jumps past the 32-bit microsecond wrap), and
 * injects forged DATA, ACK, CLOSE, HELLO and HELLO_ACK built from the genuine datagrams seen so
 * far, with fields replaced by the input, sealed with the right key or not, numbered as replays or
 * as new datagrams (auth on: a key holder's forgeries). Message ids can start
 * just below 2^32 so they wrap during a run. A caller's deadline suspends sends, and sending again
 * resumes them (the same bytes) or starts anew (other bytes).
 *
 * After every operation the harness checks invariants over the cores' internals (ltp_internal.h):
 * bytes and packets in flight equal what the per-packet states add up to, lost counts match their
 * bitmaps, a finished send holds nothing in flight, receive bitmaps match their counts and bases,
 * pending CLOSE counts match the ring, no timer lies in the past, no DATA ever leaves for a send
 * that is done or suspended, a suspended send references no caller memory, and a taken message's
 * mask covers exactly the bytes its stats say arrived, with zeros where it is 0, and (auth on) a
 * datagram accepted once is refused when it arrives again, whole or split. The loss
 * estimate: every peer has a window for segment 0 and each segment of the policy table and no
 * more, a segment's window has taken no fewer samples than its messages gave the peer's (a
 * one-segment peer's), every sample is a fraction, and every threshold lies in its segment's
 * range. The peer index (ltp_index.c): every heap is a heap of distinct slots, and every peer not
 * touched since it was last keyed is in each heap and set exactly as its state says (its timer,
 * its control datagram due or to come, HELLO_ACK and CLOSE copies pending, its packet to send),
 * the touched ones once each in the list poll_tx goes through; the rate hint's open peers (count,
 * srtt heap, list in order of last DATA and the cursor into it) are those with an open context.
 * So the index holds more than one slot, the PS has two peers besides the worker that never
 * answer: the PS sends to them, says HELLO to them, and their datagrams are dropped. A violation
 * aborts (a crash to libFuzzer).
 */
#include "ltp_internal.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c) do { if (!(c)) abort(); } while (0)
enum { W = 0, S = 1, QMAX = 64, DG = 600, MAXF = 4096, PHANTOMS = 2 };

typedef struct { int len; uint8_t b[DG]; } dgram_t;
typedef struct { dgram_t d[QMAX]; int n; } queue_t;

typedef struct {
    const uint8_t *p;
    size_t n;
} input_t;

static uint8_t u8(input_t *in) { if (!in->n) return 0; in->n--; return *in->p++; }
static uint32_t u32(input_t *in) { uint32_t v = u8(in); v |= (uint32_t)u8(in) << 8; v |= (uint32_t)u8(in) << 16; return v | (uint32_t)u8(in) << 24; }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

typedef struct {
    ltp_core_t *c[2];
    uint64_t now;
    queue_t q[2];                 /* q[k]: datagrams from core k to the other */
    dgram_t last[2][6];           /* the last genuine datagram of each type from each core */
    uint8_t key[LTP_KEY_BYTES];
    uint32_t base_id, next_send[2], n_floats;
    uint16_t segs;                /* segments per message: 1, or several (PLOT-like) */
    float payload[MAXF];
} world_t;

/* ------------------------------------------------------------------ invariants */
/* The loss windows of peer pi (ltp_recv.c, p_hat) and the thresholds they give. Every close gives
 * one sample, to its segment's window if it has one and to its peer's if the message has
 * loss_min_packets packets; the samples of all peers (*taken, *n_loss) add up to the closes. */
static void check_loss(const ltp_core_t *c, int pi, uint64_t *taken, uint64_t *n_loss)
{
    const peer_t *p = &c->peers[pi];
    uint32_t w = c->cfg.loss_window;
    CHECK(p->n_seg_loss == MAX(1u, c->n_policy));
    *n_loss += p->n_loss;
    for (uint32_t s = 0; s < p->n_seg_loss; s++) {
        *taken += p->seg_n_loss[s];
        for (uint32_t i = 0; i < MIN(w, p->seg_n_loss[s]); i++) {
            float x = p->seg_loss[(size_t)s * w + i];
            CHECK(x >= 0.0f && x <= 1.0f);
        }
    }
    for (uint32_t i = 0; i < MIN(LTP_LOSS_WINDOW_MAX, p->n_loss); i++) CHECK(p->loss_ring[i] >= 0.0f && p->loss_ring[i] <= 1.0f);
    for (uint32_t s = 0; s <= p->n_seg_loss; s++) {   /* the last one: outside the table */
        double lo = c->cfg.threshold_min, hi = c->cfg.threshold_max;
        if (s < c->n_policy && c->policy[s].set) { lo = c->policy[s].lo; hi = c->policy[s].hi; }
        double th = ltp_core_threshold(c, pi, (uint16_t)s);
        CHECK(th >= lo && th <= hi);
    }
}

/* A heap of the index: its order, and each slot in it once, where pos says. */
static void check_heap(const pheap_t *h, int n_peers)
{
    CHECK(h->n >= 0 && h->n <= n_peers);
    for (int i = 0; i < h->n; i++) {
        int s = h->at[i], up = i ? h->at[(i - 1) / 2] : -1;
        CHECK(s >= 0 && s < n_peers && h->pos[s] == i);
        if (up >= 0) CHECK(h->key[up] < h->key[s] || (h->key[up] == h->key[s] && up < s));
    }
    for (int s = 0; s < n_peers; s++)
        CHECK(h->pos[s] < h->n && (h->pos[s] < 0 || h->at[h->pos[s]] == s));
}

static int in_heap(const pheap_t *h, int s, uint64_t key)
{
    return h->pos[s] >= 0 && h->key[s] == key;
}

static int in_set(const pset_t *s, int slot) { return pset_next(s, slot) == slot; }

/* The peer index: what every peer's state says, each peer once (see the top of this file). */
static void check_index(const ltp_core_t *c)
{
    const pindex_t *x = &c->ix;
    const pheap_t *heaps[] = {&x->timer, &x->ctl, &x->ready, &x->urgent, &x->head, &c->srtt};
    for (int i = 0; i < 6; i++) check_heap(heaps[i], c->n_peers);
    int dirty = 0, n_open = 0, serial = c->cfg.peer_schedule == LTP_SCHED_SERIAL;
    for (int i = 0; i < x->n_dirty; i++) CHECK(c->peers[x->dirty[i]].dirty);
    double srtt_max = -1;
    for (int pi = 0; pi < c->n_peers; pi++) {
        peer_t *p = &c->peers[pi];
        uint32_t open = 0;
        uint64_t timer = NEVER, ctl = NEVER;
        for (uint32_t j = 0; j < c->cfg.max_open_per_peer; j++) {
            const rxmsg_t *m = &p->rx[j];
            if (!m->used || m->closed) continue;
            open++;
            timer = MIN(timer, rx_close_deadline(c, p, m));
            if (m->ack_pending) ctl = MIN(ctl, m->ack_due_us);
        }
        CHECK(open == p->n_rx_open);
        n_open += open > 0;
        if (open) srtt_max = MAX(srtt_max, MIN(p->peer_srtt_us, 1e6));
        CHECK((c->srtt.pos[pi] >= 0) == (open > 0));
        dirty += p->dirty;
        if (p->dirty) continue;   /* re-keyed before the index is read */
        for (uint32_t j = 0; j < c->cfg.max_tx_per_peer; j++)
            timer = MIN(timer, tx_deadline(c, p, &p->tx[j]));
        if (p->hello_active) ctl = MIN(ctl, p->hello_next_us);
        int urgent = p->hello_ack_pending || p->n_close_pending;
        if (urgent) ctl = 0;
        CHECK(timer == NEVER ? x->timer.pos[pi] < 0 : in_heap(&x->timer, pi, timer));
        CHECK(in_heap(&x->urgent, pi, 0) == urgent && (urgent || x->urgent.pos[pi] < 0));
        if (x->ready.pos[pi] >= 0) CHECK(x->ctl.pos[pi] < 0 && ctl <= x->ready_us);   /* was due */
        else CHECK(ctl == NEVER ? x->ctl.pos[pi] < 0 : in_heap(&x->ctl, pi, ctl));
        uint32_t idx;
        int retrans;
        txmsg_t *m = sched_pick(c, p, &idx, &retrans);
        if (serial) CHECK(m ? in_heap(&x->head, pi, sched_rank(p, m)) : x->head.pos[pi] < 0);
        else CHECK(in_set(&x->cand, pi) == (m != NULL));
        /* An own flow with nothing to send that the scheduler need not look at again is marked
         * app-limited as it would mark it now. */
        if (x->marks && !m && p->fl == &p->own && !in_set(&x->unmarked, pi))
            CHECK(p->own.bbr.app_limited_until ==
                  MAX(p->own.bbr.delivered + p->own.inflight_bytes, 1));
    }
    CHECK(dirty == x->n_dirty && (int)c->n_open_peers == n_open);
    int top = ph_top(&c->srtt);
    CHECK(top < 0 ? srtt_max < 0 : MIN(c->peers[top].peer_srtt_us, 1e6) == srtt_max);
    /* The open peers' list: each once, in order of last DATA; the cursor at the first at or after
     * its threshold, act_ge counting from there. */
    int n = 0, ge = 0, prev = -1, cur = -1;
    for (int t = c->act_head; t >= 0; prev = t, t = c->peers[t].act_next, n++) {
        CHECK(n < c->n_peers && c->peers[t].n_rx_open && c->peers[t].act_prev == prev);
        if (prev >= 0) CHECK(c->peers[prev].last_data_us <= c->peers[t].last_data_us);
        if (c->peers[t].last_data_us >= c->act_thr) { ge++; if (cur < 0) cur = t; }
    }
    CHECK(n == n_open && c->act_tail == prev && ge == (int)c->act_ge && cur == c->act_cur);
}

static void check_core(const ltp_core_t *c, uint64_t now)
{
    check_index(c);
    CHECK(ltp_core_next_timeout((ltp_core_t *)c, now) >= now);
    check_index(c);
    uint64_t taken = 0, n_loss = 0;
    uint64_t closes = c->st[LTP_S_CLOSE_COMPLETE] + c->st[LTP_S_CLOSE_EARLY];
    closes += c->st[LTP_S_CLOSE_MAX_WAIT];
    uint64_t shared = 0;   /* in flight on the serial schedule's shared flow (shared_link) */
    int any_shared = 0;
    for (int pi = 0; pi < c->n_peers; pi++) {
        const peer_t *p = &c->peers[pi];
        uint64_t inflight = 0;
        for (uint32_t j = 0; j < c->cfg.max_tx_per_peer; j++) {
            const txmsg_t *m = &p->tx[j];
            if (!m->used) continue;
            uint32_t pk = 0, lost = 0;
            for (uint32_t i = 0; i < m->count; i++) {
                /* A finished send stops counting what it had in flight (it will never be acked). */
                if (m->pk[i].state == PK_INFLIGHT && !m->done) { pk++; inflight += tx_pkt_len(m, i) + LTP_DATA_HDR_BYTES; }
                lost += (m->lost[i / 64] >> (i % 64)) & 1;
                if ((m->lost[i / 64] >> (i % 64)) & 1) CHECK(m->pk[i].state == PK_LOST);
            }
            CHECK(pk == m->inflight_pkts && lost == m->n_lost && m->n_acked <= m->count);
            if (m->done) CHECK(m->inflight_pkts == 0 && lost == 0 && m->next_first == m->count);
            CHECK(!m->suspended || !m->data);   /* a suspended send references no caller memory */
        }
        /* A peer's flow is its own, or the one every peer shares (shared_link, serial). */
        if (p->fl == &p->own) CHECK(inflight == p->own.inflight_bytes);
        else { CHECK(p->fl == &c->shared); shared += inflight; any_shared = 1; }
        for (uint32_t j = 0; j < c->cfg.max_open_per_peer; j++) {
            const rxmsg_t *m = &p->rx[j];
            if (!m->used) continue;
            uint32_t got = 0;
            for (uint32_t w = 0; w < (m->count + 63) / 64; w++) got += (uint32_t)__builtin_popcountll(m->bits[w]);
            CHECK(got == m->received && got <= m->count && m->crit_rcvd <= m->critical);
            CHECK(m->received_bytes <= m->total && m->base <= m->count);
            for (uint32_t i = 0; i < m->base; i++) CHECK((m->bits[i / 64] >> (i % 64)) & 1);
        }
        uint32_t pending = 0;
        for (uint32_t j = 0; j < c->ring_cap; j++) pending += p->ring[j].close_pending != 0;
        CHECK(pending == p->n_close_pending);
        check_loss(c, pi, &taken, &n_loss);
    }
    CHECK(taken <= closes && n_loss <= closes);
    if (c->cfg.loss_min_packets == 1) CHECK(n_loss == closes);
    if (any_shared) CHECK(shared == c->shared.inflight_bytes);
}

/* ------------------------------------------------------------------ moving datagrams */
static void poll_core(world_t *w, int k)
{
    uint8_t b[DG];
    int slot, n;
    for (int guard = 0; guard < 512 && (n = ltp_core_poll_tx(w->c[k], w->now, b, sizeof b, &slot)) > 0; guard++) {
        CHECK(n <= (int)sizeof b && slot >= 0 && slot < w->c[k]->n_peers && (slot == 0 || k == S));
        int type = b[WIRE_TYPE];
        if (type == LTP_T_DATA) {   /* never a DATA for a send that is over */
            uint32_t id; uint16_t seg;
            memcpy(&id, b + WIRE_MSG_ID, 4); memcpy(&seg, b + WIRE_SEGMENT, 2);
            const peer_t *p = &w->c[k]->peers[slot];
            int live = 0;
            for (uint32_t j = 0; j < w->c[k]->cfg.max_tx_per_peer; j++)
                live |= p->tx[j].used && !p->tx[j].done && !p->tx[j].suspended && p->tx[j].msg_id == id &&
                        p->tx[j].segment == seg;
            CHECK(live);
        }
        if (slot) continue;   /* to a peer that is not there */
        if (type >= 1 && type <= 5) { w->last[k][type].len = n; memcpy(w->last[k][type].b, b, (size_t)n); }
        queue_t *q = &w->q[k];
        if (q->n < QMAX) { q->d[q->n].len = n; memcpy(q->d[q->n].b, b, (size_t)n); q->n++; }
    }
    CHECK(n >= 0);
}

/* Hand a datagram to core c whole, or (split, a DATA) the way the UDP driver hands one it read
 * into a guessed place: header and tag in one buffer, the payload in another
 * (ltp_core_input_split), so the MAC over the two parts is fuzzed too. */
static int input(ltp_core_t *c, const uint8_t *b, int len, int split, uint64_t now)
{
    size_t tag = auth_trailer(&c->cfg);
    if (!split || len <= (int)(LTP_DATA_HDR_BYTES + tag) || b[WIRE_TYPE] != LTP_T_DATA)
        return ltp_core_input(c, 0, b, (size_t)len, now);
    static uint8_t head[LTP_DATA_HDR_BYTES + LTP_TRAILER_BYTES], payload[LTP_MAX_DATAGRAM];
    size_t plen = (size_t)len - LTP_DATA_HDR_BYTES - tag;
    memcpy(head, b, LTP_DATA_HDR_BYTES);
    memcpy(head + LTP_DATA_HDR_BYTES, b + LTP_DATA_HDR_BYTES + plen, tag);
    memcpy(payload, b + LTP_DATA_HDR_BYTES, plen);
    return ltp_core_input_split(c, 0, head, LTP_DATA_HDR_BYTES + tag, payload, plen, now, now);
}

/* Deliver (or drop, duplicate, reorder) up to `count` datagrams of queue k; mode's top bit hands
 * DATA over split. */
static void deliver(world_t *w, int k, int count, uint8_t mode)
{
    queue_t *q = &w->q[k];
    for (int i = 0; i < count && q->n; i++) {
        int pick = (mode & 3) == 3 ? (int)(mode >> 2) % q->n : 0;   /* 3: out of order */
        dgram_t d = q->d[pick];
        memmove(&q->d[pick], &q->d[pick + 1], (size_t)(q->n - pick - 1) * sizeof d);
        q->n--;
        if ((mode & 3) == 1) continue;   /* lost */
        int first = input(w->c[1 - k], d.b, d.len, mode & 0x80, w->now);
        if ((mode & 3) == 2) {   /* duplicated: with auth on, never accepted twice */
            int again = input(w->c[1 - k], d.b, d.len, mode & 0x40, w->now);
            CHECK(!w->c[1 - k]->cfg.auth || first != LTP_OK || again != LTP_OK);
        }
    }
}

/* Seal a forged datagram from slot `from` the way core `to` would accept it (sel bit 0: the forger
 * holds the pair's key), or not. Its number is the newest the receiver accepted from that slot,
 * minus 32, plus sel >> 1: a replay of a number seen, one lost on the way, or a new one. */
static int seal(world_t *w, int to, int from, uint8_t *b, int n, uint8_t sel)
{
    const ltp_core_t *c = w->c[to];
    if (!c->cfg.auth) return n;
    const peer_t *p = &c->peers[from];
    uint8_t k[LTP_KEY_BYTES];
    auth_derive((sel & 1) ? p->pair_key : (const uint8_t *)"not the key.....", c->self_rank, k);
    b[WIRE_MAC] = (uint8_t)auth_kind(c);
    uint64_t pseq = (p->rx_any ? p->rx_top : 1000) - 32 + (sel >> 1);
    for (int i = 0; i < 8; i++) b[n + i] = (uint8_t)(pseq >> (8 * i));
    uint64_t tag = c->cfg.mac == LTP_MAC_ALG_GMAC128 ? ltp_gmac128(k, pseq, b, (size_t)n + 8)
                                                     : ltp_siphash24(k, b, (size_t)n + 8);
    for (int i = 0; i < 8; i++) b[n + 8 + i] = (uint8_t)(tag >> (8 * i));
    return n + (int)LTP_TRAILER_BYTES;
}

/* A forged datagram to core `to`: the last genuine one of `type` toward it (or a bare header),
 * its fields overwritten from the input, then sealed or not; from peer slot `from` (the PS's
 * peers that never answer have slots 1.. and ranks 1..). */
static void forge(world_t *w, int to, int type, input_t *in, int from)
{
    uint8_t b[DG + LTP_TRAILER_BYTES];
    const dgram_t *t = &w->last[1 - to][type];
    size_t tag = auth_trailer(&w->c[to]->cfg);
    int n = t->len > (int)tag ? t->len - (int)tag : 0;
    if (n) memcpy(b, t->b, (size_t)n);
    else {
        n = type == LTP_T_DATA ? (int)LTP_DATA_HDR_BYTES + 4 : type == LTP_T_ACK ? (int)LTP_ACK_HDR_BYTES
            : type == LTP_T_CLOSE ? (int)LTP_CLOSE_BYTES : (int)LTP_HDR_BYTES;
        memset(b, 0, (size_t)n);
        hdr_t h = core_header(w->c[1 - to], (uint8_t)type, w->base_id, 0);
        if (type == LTP_T_CLOSE) wire_put_close(b, &h);
        else if (type == LTP_T_ACK) wire_put_ack(b, &h);
        else wire_put_hello(b, &h);
        if (type == LTP_T_DATA) { b[WIRE_TYPE] = LTP_T_DATA; put32(b + WIRE_DATA_COUNT, 1); put32(b + WIRE_DATA_TOTAL, 4); b[WIRE_DATA_LEN] = 4; }
    }
    uint8_t what = u8(in);
    /* Each set bit of `what` replaces one field of the type (offsets from ltp_internal.h). */
    static const uint8_t data_f[8] = {WIRE_MSG_ID, WIRE_SEGMENT, WIRE_DATA_INDEX, WIRE_DATA_COUNT, WIRE_DATA_TOTAL,
                                      WIRE_DATA_TX_SEQ, WIRE_DATA_TS, WIRE_DATA_SRTT};
    static const uint8_t ack_f[8] = {WIRE_MSG_ID, WIRE_ACK_RECEIVED, WIRE_ACK_BASE, WIRE_ACK_ECHO_TS, WIRE_ACK_DELAY,
                                     WIRE_ACK_ECHO_SEQ, WIRE_ACK_HINT, WIRE_SEGMENT};
    static const uint8_t close_f[8] = {WIRE_MSG_ID, WIRE_CLOSE_RECEIVED, WIRE_CLOSE_COUNT, WIRE_CLOSE_ECHO_TS,
                                       WIRE_CLOSE_ECHO_SEQ, WIRE_SEGMENT, WIRE_CLOSE_REASON, WIRE_SESSION};
    const uint8_t *f = type == LTP_T_DATA ? data_f : type == LTP_T_ACK ? ack_f : close_f;
    for (int i = 0; i < 8; i++) {
        if (!(what >> i & 1)) continue;
        uint32_t v = u32(in);
        int off = type >= LTP_T_HELLO ? WIRE_MSG_ID : f[i];
        if (off == WIRE_SEGMENT) { b[off] = (uint8_t)v; b[off + 1] = (uint8_t)(v >> 8); }
        else if (off == WIRE_CLOSE_REASON && type == LTP_T_CLOSE) b[off] = (uint8_t)(v % 6);
        else if (off + 4 <= n) put32(b + off, type == LTP_T_DATA && off == WIRE_MSG_ID ? w->base_id + v % 96 - 16 : v);
    }
    if (type == LTP_T_DATA && (u8(in) & 1)) {   /* a payload of the input's choosing */
        int len = 4 * (1 + u8(in) % 64);
        if (LTP_DATA_HDR_BYTES + len <= DG) {
            for (int i = 0; i < len; i++) b[LTP_DATA_HDR_BYTES + i] = u8(in);
            b[WIRE_DATA_LEN] = (uint8_t)len; b[WIRE_DATA_LEN + 1] = 0;
            n = (int)LTP_DATA_HDR_BYTES + len;
        }
    }
    if (type == LTP_T_DATA) b[WIRE_FLAGS] = u8(in) & 0x0F;
    if (type == LTP_T_ACK && n >= (int)LTP_ACK_HDR_BYTES) {   /* a bitmap of the input's choosing */
        int bits = 8 * (u8(in) % 9);
        b[WIRE_ACK_BITS] = (uint8_t)bits; b[WIRE_ACK_BITS + 1] = 0;
        for (int i = 0; i < bits / 8; i++) b[LTP_ACK_HDR_BYTES + i] = u8(in);
        n = (int)LTP_ACK_HDR_BYTES + bits / 8;
    }
    if (from) { b[WIRE_SENDER] = (uint8_t)from; b[WIRE_SENDER + 1] = 0; }
    n = seal(w, to, from, b, n, u8(in));
    ltp_core_input(w->c[to], from, b, (size_t)n, w->now);
}

/* ------------------------------------------------------------------ the applications */
static void app_send(world_t *w, int k)
{
    uint32_t id = w->next_send[k]++;
    uint16_t segs = k == W ? w->segs : 1;
    uint32_t per = w->n_floats / segs;
    for (uint16_t s = 0; s < segs; s++) {
        uint16_t seg = segs > 1 ? (uint16_t)(s + 1) : 0;
        ltp_core_send(w->c[k], 0, id, seg, w->payload + s * per, per * 4, 0, w->now);
    }
    if (k == S && id % 3 == 0)   /* and now and then to a peer that never answers */
        ltp_core_send(w->c[S], 1 + (int)(id / 3 % PHANTOMS), id, 0, w->payload, per * 4, 0, w->now);
}

/* The caller's deadline: suspend core k's sends of its newest id, then (unless `leave`) send the
 * same id again, with the same bytes (resumed) or, if `other`, with others (a new send). */
static void app_retry(world_t *w, int k, uint8_t how)
{
    uint32_t id = w->next_send[k] - 1;
    uint16_t segs = k == W ? w->segs : 1;
    uint32_t per = w->n_floats / segs, shift = how & 2 ? 1 : 0;
    for (uint16_t s = 0; s < segs; s++) ltp_core_send_suspend(w->c[k], 0, id, segs > 1 ? (uint16_t)(s + 1) : 0);
    if (how & 1) return;
    for (uint16_t s = 0; s < segs; s++)
        ltp_core_send(w->c[k], 0, id, segs > 1 ? (uint16_t)(s + 1) : 0, w->payload + s * per + shift, per * 4, 0,
                      w->now);
}

/* Take whatever is ready from the other side (ids around what was sent), checking the mask. */
static void app_take(world_t *w, int k)
{
    static float out[MAXF];
    static uint8_t mask[MAXF];
    int from = 1 - k;
    uint16_t segs = from == W ? w->segs : 1;
    uint32_t per = w->n_floats / segs;
    for (uint32_t d = 0; d < 8; d++) {
        uint32_t id = w->next_send[from] - 1 - d;
        for (uint16_t s = 0; s < segs; s++) {
            uint16_t seg = segs > 1 ? (uint16_t)(s + 1) : 0;
            if (ltp_core_rx_ready(w->c[k], 0, id, seg) != 1) continue;
            ltp_msg_stats_t st;
            memset(mask, 0xAA, sizeof mask);
            int rc = ltp_core_rx_take(w->c[k], 0, id, seg, out, sizeof out, mask, &st);
            if (rc) continue;
            uint64_t ones = 0;
            for (uint32_t i = 0; i < st.total_bytes / 4; i++) {
                CHECK(mask[i] <= 1);
                ones += mask[i];
                if (!mask[i]) CHECK(out[i] == 0.0f);
            }
            CHECK(ones * 4 == st.received_bytes && st.packets <= st.count);
            CHECK(!w->c[k]->n_expected || st.total_bytes == per * 4);
        }
    }
}

/* ------------------------------------------------------------------ the program */
static void setup(world_t *w, uint8_t flags, uint8_t size)
{
    memset(w, 0, sizeof *w);
    ltp_config_t cfg;
    ltp_config_default(&cfg);
    cfg.auth = flags & 1;
    cfg.mac = (size / 48) & 1 ? LTP_MAC_ALG_GMAC128 : LTP_MAC_ALG_SIPHASH24;   /* both MACs */
    cfg.cc = !(flags & 4);
    cfg.send_order = flags & 8 ? LTP_ORDER_RANDOM : LTP_ORDER_PRIORITY;
    cfg.peer_schedule = flags & 16 ? LTP_SCHED_FAIR : LTP_SCHED_SERIAL;
    cfg.closed_ring = flags & 128 ? 2 : 8;
    cfg.max_udp_payload_bytes = 160 + 8 * (size % 48);         /* 92..476-byte chunks: <= 45 packets */
    cfg.max_msg_bytes = MAXF * 4;
    cfg.max_peers = 1 + PHANTOMS;
    cfg.max_open_per_peer = 4;
    cfg.max_tx_per_peer = 4;
    cfg.rx_msg_window = 16;
    cfg.rx_idle_evict_us = 200000;
    cfg.max_wait_us = 100000;
    cfg.loss_window = 1 + (size >> 1) % 3;                      /* windows fill within a run */
    cfg.loss_min_packets = 1 + (size & 1);
    w->base_id = flags & 32 ? 0xFFFFFFF0u : 0;                  /* ids wrap after 16 messages */
    cfg.rx_first_msg_id = w->base_id;
    w->next_send[W] = w->next_send[S] = w->base_id;
    w->now = flags & 64 ? 0xFFFFFFFFull - 20000 : 1000;         /* the 32-bit us clock wraps soon */
    w->n_floats = 4 * (1 + (size >> 2) % 64) * (1 + (size & 3)); /* up to 1024 floats */
    w->segs = (flags & 2) ? (uint16_t)(1 + size % 4) : 1;
    for (uint32_t i = 0; i < MAXF; i++) w->payload[i] = (float)i * 0.25f - 7.0f;
    w->c[W] = ltp_core_new(&cfg, 0);
    w->c[S] = ltp_core_new(&cfg, LTP_RANK_SERVER);
    CHECK(w->c[W] && w->c[S]);
    ltp_core_add_peer(w->c[W], LTP_RANK_SERVER);
    ltp_core_add_peer(w->c[S], 0);
    for (int i = 1; i <= PHANTOMS; i++) CHECK(ltp_core_add_peer(w->c[S], (uint16_t)i) == i);
    for (int i = 0; i < LTP_KEY_BYTES; i++) w->key[i] = (uint8_t)(i * 7 + size);
    ltp_core_set_peer_key(w->c[W], 0, w->key, sizeof w->key);
    ltp_core_set_peer_key(w->c[S], 0, w->key, sizeof w->key);
    for (int i = 1; i <= PHANTOMS; i++) {   /* a key of their own, one pair each */
        uint8_t k[LTP_KEY_BYTES];
        memcpy(k, w->key, sizeof k);
        k[0] ^= (uint8_t)i;
        ltp_core_set_peer_key(w->c[S], i, k, sizeof k);
    }
    /* Every layer but the last with a policy (and a loss window) of its own, set after the peer
     * was added; the last follows the peer's window. */
    for (uint16_t s = 1; s < w->segs; s++) CHECK(ltp_core_set_policy(w->c[S], s, 0.5, 0.99) == 0);
    if (flags & 2) {   /* strict: each side knows what it receives */
        uint32_t per = w->n_floats / w->segs;
        for (uint16_t s = 0; s < w->segs; s++)
            ltp_core_expect(w->c[S], w->segs > 1 ? (uint16_t)(s + 1) : 0, per * 4, 0);
        ltp_core_expect(w->c[W], 0, w->n_floats * 4, 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static world_t w;
    input_t in = {data, size};
    setup(&w, u8(&in), u8(&in));
    for (int steps = 0; in.n && steps < 200; steps++) {
        uint8_t op = u8(&in);
        int k = op >> 7;   /* which core the operation is about */
        switch (op & 15) {
        case 0: w.now += 1 + 7u * u8(&in); break;
        case 1: w.now += u32(&in); break;   /* up to 71 minutes: past the 32-bit wrap */
        case 2: poll_core(&w, k); break;
        case 3: deliver(&w, k, 1 + u8(&in) % 16, u8(&in)); break;
        case 4: app_send(&w, k); break;
        case 5: app_take(&w, k); break;
        case 6: forge(&w, S, LTP_T_DATA, &in, k ? 1 + (op >> 4 & 1) : 0); break;   /* k: phantom */
        case 7: forge(&w, W, LTP_T_ACK, &in, 0); break;
        case 8: forge(&w, W, LTP_T_CLOSE, &in, 0); break;
        case 9: forge(&w, k ? S : W, u8(&in) & 1 ? LTP_T_HELLO : LTP_T_HELLO_ACK, &in, 0); break;
        case 10:   /* the PS joins a peer that never answers, or the worker the PS */
            if (k) ltp_core_hello(w.c[S], 1 + (op >> 4 & 1), w.now);
            else ltp_core_hello(w.c[W], 0, w.now);
            break;
        case 11: {   /* a raw datagram, no structure at all */
            uint8_t b[DG];
            size_t n = u8(&in) % 128;
            for (size_t i = 0; i < n; i++) b[i] = u8(&in);
            ltp_core_input(w.c[k], (int)(u8(&in) % 3) - 1, b, n, w.now);
            break;
        }
        case 12: {   /* corrupt one byte of a queued datagram */
            queue_t *q = &w.q[k];
            if (q->n) { dgram_t *d = &q->d[u8(&in) % q->n]; d->b[u8(&in) % d->len] ^= (uint8_t)(1 + u8(&in)); }
            break;
        }
        case 13: {   /* release the sends that are done */
            for (uint32_t d = 0; d < 8; d++)
                for (uint16_t s = 0; s <= w.segs; s++)
                    if (ltp_core_send_status(w.c[k], 0, w.next_send[k] - 1 - d, s, NULL, w.now) == 1)
                        ltp_core_send_release(w.c[k], 0, w.next_send[k] - 1 - d, s);
            for (int i = 1; k == S && i <= PHANTOMS; i++)   /* the PS gives up on those */
                for (uint32_t d = 3; d < 8; d++)
                    ltp_core_send_release(w.c[S], i, w.next_send[S] - 1 - d, 0);
            break;
        }
        case 14: app_retry(&w, k, u8(&in)); break;
        default: {   /* let the protocol run: both cores, lossless, to the next timer */
            for (int r = 0; r < 1 + (op >> 4 & 7) * 3; r++) {
                poll_core(&w, W); poll_core(&w, S);
                int moved = w.q[W].n + w.q[S].n;
                deliver(&w, W, QMAX, 0); deliver(&w, S, QMAX, 0);
                uint64_t t = MIN(ltp_core_next_timeout(w.c[W], w.now), ltp_core_next_timeout(w.c[S], w.now));
                if (t == NEVER && !moved) break;   /* nothing left to do */
                w.now = t == NEVER ? w.now + 1000 : MAX(t, w.now + 1);
            }
        }
        }
        check_core(w.c[W], w.now);
        check_core(w.c[S], w.now);
    }
    ltp_core_free(w.c[W]);
    ltp_core_free(w.c[S]);
    return 0;
}
