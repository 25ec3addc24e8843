/* ltp_index.c: which peers have work due and when, so that ltp_core_poll_tx and
 * ltp_core_next_timeout cost O(log N) in the number of peers instead of a walk over all of them.
 *
 * Every peer has keys that its state alone decides (index_rekey): its earliest timer (a receive
 * context's close deadline, a send's RACK or probe timeout), when its next control datagram is
 * due (HELLO, ACK; at once for a HELLO_ACK or CLOSE copies), and, if it has a packet to send, its
 * place in the schedule. The keys live in heaps ordered by (key, slot), so peers due at the same
 * instant are served in slot order, the order the walk over all peers served them in:
 *
 *   timer    poll_tx runs the close rules and send timers of each peer whose earliest timer has
 *            come (the walk ran them for every peer, and they did nothing for the others);
 *   ctl      control datagrams go out lowest slot first among the peers they are due for
 *            (moved to `ready` once due);
 *   urgent   next_timeout answers "now" while any peer has a HELLO_ACK or CLOSE copy to send;
 *   head     the serial schedule's next sender: the least (silent, queueing order);
 *   cand     the fair schedule's peers with a packet to send, visited in round-robin order.
 *
 * Whatever changes a peer's state (a datagram from it, one sent to it, a timer of it, any call of
 * the application about it) touches it: it is re-keyed before the index is next read, and poll_tx
 * runs its close rules once more, since a close threshold may have moved (a new RTT, a closed
 * message's loss sample). That is all the walk did that depended on anything but time: a close
 * rule's deadline the rule was evaluated at or after is no timer (rx_close_deadline), and the walk
 * evaluated every open message at every poll_tx, so the index records each poll_tx as such an
 * evaluation (tick_us) and a message's own evaluations in sequence with it (index_checked_us).
 * The fair schedule still considers each of its peers with a packet to send on every call: it
 * refills their pacing tokens as it goes, and the arithmetic of that refill depends on when it
 * runs. docs/ltp-protocol.md §10 ("The peer index").
 */
#include "ltp_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- heaps of peer slots */
int ph_init(pheap_t *h, uint32_t cap)
{
    h->at = malloc((size_t)cap * sizeof *h->at);
    h->pos = malloc((size_t)cap * sizeof *h->pos);
    h->key = malloc((size_t)cap * sizeof *h->key);
    h->n = 0;
    if (!h->at || !h->pos || !h->key) return LTP_ENOMEM;
    for (uint32_t i = 0; i < cap; i++) h->pos[i] = -1;
    return LTP_OK;
}

void ph_free(pheap_t *h) { free(h->at); free(h->pos); free(h->key); memset(h, 0, sizeof *h); }

static int ph_less(const pheap_t *h, int a, int b)
{
    return h->key[a] < h->key[b] || (h->key[a] == h->key[b] && a < b);
}

static void ph_place(pheap_t *h, int i, int slot) { h->at[i] = slot; h->pos[slot] = i; }

static void ph_sift(pheap_t *h, int i)
{
    int slot = h->at[i];
    while (i > 0 && ph_less(h, slot, h->at[(i - 1) / 2])) {
        ph_place(h, i, h->at[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = slot;
        if (l < h->n && ph_less(h, h->at[l], m)) m = h->at[l];
        if (r < h->n && ph_less(h, h->at[r], m)) m = h->at[r];
        if (m == slot) break;
        int j = h->pos[m];
        ph_place(h, i, m);
        i = j;
    }
    ph_place(h, i, slot);
}

void ph_put(pheap_t *h, int slot, uint64_t key)
{
    int i = h->pos[slot];
    if (key == NEVER) {
        if (i < 0) return;
        h->pos[slot] = -1;
        if (--h->n == i) return;
        h->at[i] = h->at[h->n];
        h->pos[h->at[i]] = i;
        ph_sift(h, i);
        return;
    }
    if (i >= 0 && h->key[slot] == key) return;
    h->key[slot] = key;
    if (i < 0) { i = h->n++; h->at[i] = slot; }
    ph_sift(h, i);
}

int ph_top(const pheap_t *h) { return h->n ? h->at[0] : -1; }

/* ---------------------------------------------------------------- sets of peer slots */
static int pset_init(pset_t *s, uint32_t cap)
{
    for (int l = 0; l < 3; l++) {
        cap = (cap + 63) / 64;
        s->words[l] = cap;
        s->w[l] = calloc(cap, sizeof *s->w[l]);
        if (!s->w[l]) return LTP_ENOMEM;
    }
    return LTP_OK;
}

static void pset_free(pset_t *s)
{
    for (int l = 0; l < 3; l++) free(s->w[l]);
    memset(s, 0, sizeof *s);
}

void pset_put(pset_t *s, int slot, int in)
{
    uint32_t i = (uint32_t)slot;
    for (int l = 0; l < 3; l++, i /= 64) {
        uint64_t *w = &s->w[l][i / 64], before = *w;
        if (in) *w |= 1ull << (i % 64);
        else *w &= ~(1ull << (i % 64));
        if ((before != 0) == (*w != 0)) break;   /* the level above is unchanged */
    }
}

/* The least member >= i of level l (a member of level l + 1 is a nonzero word of level l). */
static int64_t pset_from(const pset_t *s, int l, uint64_t i)
{
    uint64_t k = i / 64;
    if (k >= s->words[l]) return -1;
    uint64_t x = s->w[l][k] & (~0ull << (i % 64));
    if (x) return (int64_t)(k * 64 + (uint64_t)__builtin_ctzll(x));
    int64_t u;
    if (l == 2) {
        for (u = (int64_t)k + 1; u < (int64_t)s->words[2] && !s->w[2][u]; u++) {}
        if (u >= (int64_t)s->words[2]) return -1;
    } else if ((u = pset_from(s, l + 1, k + 1)) < 0) {
        return -1;
    }
    return u * 64 + __builtin_ctzll(s->w[l][u]);
}

int pset_next(const pset_t *s, int from)
{
    return from < 0 ? -1 : (int)pset_from(s, 0, (uint64_t)from);
}

/* ---------------------------------------------------------------- the index */
int index_init(ltp_core_t *c)
{
    pindex_t *x = &c->ix;
    uint32_t n = c->cfg.max_peers;
    x->marks = !rate_shared(c);   /* every flow is its peer's own (sched_consider marks it idle) */
    x->dirty = malloc((size_t)n * sizeof *x->dirty);
    if (!x->dirty || ph_init(&x->timer, n) || ph_init(&x->ctl, n) || ph_init(&x->ready, n) ||
        ph_init(&x->urgent, n) || ph_init(&x->head, n) || pset_init(&x->cand, n) ||
        pset_init(&x->unmarked, n))
        return LTP_ENOMEM;
    return LTP_OK;
}

void index_free(ltp_core_t *c)
{
    pindex_t *x = &c->ix;
    free(x->dirty);
    pheap_t *heaps[] = {&x->timer, &x->ctl, &x->ready, &x->urgent, &x->head};
    for (size_t i = 0; i < sizeof heaps / sizeof *heaps; i++) ph_free(heaps[i]);
    pset_free(&x->cand);
    pset_free(&x->unmarked);
}

uint64_t index_checked_us(const ltp_core_t *c, const rxmsg_t *m)
{
    return m->checked_seq > c->ix.tick_seq ? m->checked_us : c->ix.tick_us;
}

void index_eval(ltp_core_t *c, rxmsg_t *m, uint64_t now)
{
    m->checked_us = now;
    m->checked_seq = ++c->ix.eval_seq;
}

/* Peer pi's keys from its state. */
static void index_rekey(ltp_core_t *c, int pi)
{
    peer_t *p = &c->peers[pi];
    pindex_t *x = &c->ix;
    uint64_t timer = NEVER, ctl = NEVER;
    for (uint32_t j = 0; j < c->cfg.max_open_per_peer; j++) {
        const rxmsg_t *m = &p->rx[j];
        if (!m->used || m->closed) continue;
        timer = MIN(timer, rx_close_deadline(c, p, m));
        if (m->ack_pending) ctl = MIN(ctl, m->ack_due_us);
    }
    for (uint32_t j = 0; j < c->cfg.max_tx_per_peer; j++)
        timer = MIN(timer, tx_deadline(c, p, &p->tx[j]));
    if (p->hello_active) ctl = MIN(ctl, p->hello_next_us);
    int urgent = p->hello_ack_pending || p->n_close_pending;
    ph_put(&x->timer, pi, timer);
    ph_put(&x->ready, pi, NEVER);   /* back among the others until index_ready finds it due */
    ph_put(&x->ctl, pi, urgent ? 0 : ctl);
    ph_put(&x->urgent, pi, urgent ? 0 : NEVER);
    uint32_t idx;
    int retrans;
    txmsg_t *m = sched_pick(c, p, &idx, &retrans);
    if (c->cfg.peer_schedule == LTP_SCHED_SERIAL)
        ph_put(&x->head, pi, m ? sched_rank(p, m) : NEVER);
    else
        pset_put(&x->cand, pi, m != NULL);
}

void index_touch(ltp_core_t *c, peer_t *p)
{
    pindex_t *x = &c->ix;
    int pi = core_peer_slot(c, p);
    ph_put(&x->ready, pi, NEVER);   /* its control datagram, if still due, is found again */
    if (x->marks) pset_put(&x->unmarked, pi, 1);
    if (p->dirty) return;
    p->dirty = 1;
    x->dirty[x->n_dirty++] = pi;
}

void index_touch_all(ltp_core_t *c)
{
    for (int pi = 0; pi < c->n_peers; pi++) index_touch(c, &c->peers[pi]);
}

/* A caller whose clock went back: peers found due at a later time may not be due now. */
static void index_rewind(ltp_core_t *c, uint64_t now)
{
    pindex_t *x = &c->ix;
    if (now >= x->ready_us) return;
    for (int pi; (pi = ph_top(&x->ready)) >= 0;) index_touch(c, &c->peers[pi]);
    x->ready_us = now;
}

void index_refresh(ltp_core_t *c, uint64_t now)
{
    index_rewind(c, now);
    for (int i = 0; i < c->ix.n_dirty; i++) index_rekey(c, c->ix.dirty[i]);   /* they stay dirty */
}

/* Everything the walk's tick did for peer pi (ltp_core.c kept it as it was). */
static void tick_peer(ltp_core_t *c, int pi, uint64_t now)
{
    peer_t *p = &c->peers[pi];
    for (uint32_t j = 0; j < c->cfg.max_open_per_peer; j++)
        if (p->rx[j].used && !p->rx[j].closed) rx_check_close(c, p, &p->rx[j], now);
    for (uint32_t j = 0; j < c->cfg.max_tx_per_peer; j++) tx_on_timers(c, p, &p->tx[j], now);
}

void index_tick(ltp_core_t *c, uint64_t now)
{
    pindex_t *x = &c->ix;
    index_rewind(c, now);
    /* A clock gone back makes close deadlines timers again that an evaluation after them had
     * ended: every open message's peer is re-keyed (and ticked, as the walk ticked them all). */
    for (int pi = now < x->tick_us ? c->act_head : -1; pi >= 0; pi = c->peers[pi].act_next)
        index_touch(c, &c->peers[pi]);
    x->tick_us = now;
    x->tick_seq = ++x->eval_seq;
    /* Each due peer is ticked once per call (a RACK timer may come due again at once, as it did
     * for the walk, which ticked it at its next call), and touched: its timers change its flow.
     * The order is free: a tick changes only its own peer's state, the counters and a shared
     * flow's bytes in flight, which it only lowers. */
    for (int pi; (pi = ph_top(&x->timer)) >= 0 && x->timer.key[pi] <= now;) {
        ph_put(&x->timer, pi, NEVER);
        index_touch(c, &c->peers[pi]);
    }
    for (int i = 0; i < x->n_dirty; i++) {
        int pi = x->dirty[i];
        c->peers[pi].dirty = 0;
        tick_peer(c, pi, now);
        index_rekey(c, pi);
    }
    x->n_dirty = 0;
}

int index_ready(ltp_core_t *c, uint64_t now)
{
    pindex_t *x = &c->ix;
    index_rewind(c, now);
    x->ready_us = now;
    for (int pi; (pi = ph_top(&x->ctl)) >= 0 && x->ctl.key[pi] <= now;) {
        ph_put(&x->ctl, pi, NEVER);
        ph_put(&x->ready, pi, (uint64_t)pi);
    }
    return ph_top(&x->ready);
}

int index_urgent(const ltp_core_t *c) { return ph_top(&c->ix.urgent); }

uint64_t index_due(const ltp_core_t *c)
{
    const pindex_t *x = &c->ix;
    int t = ph_top(&x->timer), k = ph_top(&x->ctl);
    uint64_t due = t >= 0 ? x->timer.key[t] : NEVER;
    if (k >= 0) due = MIN(due, x->ctl.key[k]);
    return ph_top(&x->ready) >= 0 ? MIN(due, x->ready_us) : due;
}
