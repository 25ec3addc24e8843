/* ltp_sched.c: which peer's message sends the next DATA packet, and when (peer_schedule).
 *
 * FAIR: round robin over peers, each at its own pacing rate; the first peer (from the
 * round-robin cursor) whose window is open and whose pacing tokens are there sends.
 * SERIAL: the head, the peer whose sendable message was queued first, has the link at its pacing
 * rate; only it may send. When its window is full no later message slips in, since that would put
 * a second flow's window into the same queue (eight windows are the fair schedule again). A
 * message whose every packet is sent and unacknowledged has nothing to send, so the next one
 * starts while its tail is in flight. A head whose peer has gone silent (its probe timeout fired
 * and nothing was acknowledged since: a dead worker, a cut link) gives up the head to the next
 * message, so one missing peer does not hold the broadcast to the others; it keeps its probes,
 * which need no window, and takes the head back once one is acknowledged.
 *
 * Both poll_tx (which sends) and next_timeout (which only asks when) make the choice through
 * sched_begin / sched_scan / sched_decide, so they cannot disagree; sched_scan runs
 * sched_consider on the peers the choice depends on, which the peer index finds (ltp_index.c).
 */
#include "ltp_internal.h"

/* The message of peer p that has a packet to send, or NULL (sets *idx / *retrans): under SERIAL
 * the one queued first, under FAIR the first slot that has one. */
txmsg_t *sched_pick(const ltp_core_t *c, peer_t *p, uint32_t *idx, int *retrans)
{
    txmsg_t *best = NULL;
    for (uint32_t j = 0; j < c->cfg.max_tx_per_peer; j++) {
        txmsg_t *m = &p->tx[j];
        if (!m->used || m->done) continue;
        int r;
        uint32_t i = tx_pick(c, m, &r);
        if (i >= m->count || (best && m->enq_seq > best->enq_seq)) continue;
        best = m; *idx = i; *retrans = r;
        if (c->cfg.peer_schedule == LTP_SCHED_FAIR) break;   /* fair: the first slot will do */
    }
    return best;
}

/* p's window has room for packet idx of m (a PTO probe always has). */
static int window_open(const ltp_core_t *c, const peer_t *p, const txmsg_t *m, uint32_t idx, uint64_t now)
{
    return p->probe_credit > 0 ||
           (double)(p->fl->inflight_bytes + LTP_DATA_HDR_BYTES + tx_pkt_len(m, idx)) <= cwnd_bytes(c, p, now);
}

/* When the candidate may send: NEVER while its window is closed, else its pacing time. (This
 * refills the peer's pacing tokens, so it runs exactly where the schedule looks at a peer.) */
static uint64_t due(ltp_core_t *c, const sched_t *s, uint64_t now)
{
    peer_t *p = &c->peers[s->peer];
    return window_open(c, p, s->m, s->idx, now) ? pacing_due(c, p, now) : NEVER;
}

void sched_mark_idle(flow_t *f) { f->bbr.app_limited_until = MAX(f->bbr.delivered + f->inflight_bytes, 1); }

void sched_begin(sched_t *s) { *s = (sched_t){.peer = -1, .due = NEVER}; }

uint64_t sched_rank(const peer_t *p, const txmsg_t *m)
{
    return (uint64_t)(m->pto_count > 0 && p->probe_credit == 0) << 63 | m->enq_seq;
}

/* Look at peer pi. mark_idle (poll_tx): a peer with nothing to send is app-limited, so rate
 * samples taken until its data in flight is delivered do not count against the bandwidth. */
void sched_consider(ltp_core_t *c, sched_t *s, int pi, uint64_t now, int mark_idle)
{
    peer_t *p = &c->peers[pi];
    sched_t cand = {.peer = pi, .due = NEVER};
    cand.m = sched_pick(c, p, &cand.idx, &cand.retrans);
    if (!cand.m) {
        /* A shared flow is idle only when no peer has anything: ltp_core_poll_tx marks it. */
        if (mark_idle && p->fl == &p->own) sched_mark_idle(p->fl);
        return;
    }
    if (c->cfg.peer_schedule == LTP_SCHED_SERIAL) {   /* the head is timed in sched_decide */
        /* Silent: probed without an answer and no probe left to send; such a message only
         * leads when every candidate is silent. */
        cand.silent = (int)(sched_rank(p, cand.m) >> 63);
        if (s->peer < 0 || (cand.silent == s->silent ? cand.m->enq_seq < s->m->enq_seq : s->silent))
            *s = cand;
        return;
    }
    cand.due = due(c, &cand, now);
    if (cand.due < s->due) *s = cand;
}

/* The next member of cand or unmarked from slot i (-1: none). */
static int next_fair(const pindex_t *x, int i)
{
    int a = pset_next(&x->cand, i), b = pset_next(&x->unmarked, i);
    return a < 0 ? b : b < 0 ? a : MIN(a, b);
}

/* The walk over every peer this replaces (ltp_core.c) considered each in turn; the peers the index
 * leaves out are those considering would not have changed: under SERIAL the order is a heap's
 * (only the head matters, and considering has no side effect there but marking idle flows), under
 * FAIR the peers with nothing to send whose flow has not changed since they were last marked. */
void sched_scan(ltp_core_t *c, sched_t *s, uint64_t now, int poll, int stop)
{
    pindex_t *x = &c->ix;
    if (c->cfg.peer_schedule == LTP_SCHED_SERIAL) {
        int pi = poll && x->marks ? pset_next(&x->unmarked, 0) : -1;
        for (; pi >= 0; pi = pset_next(&x->unmarked, pi + 1)) {   /* idle own flows: marked */
            uint32_t idx;
            int retrans;
            pset_put(&x->unmarked, pi, 0);
            peer_t *p = &c->peers[pi];
            if (!sched_pick(c, p, &idx, &retrans) && p->fl == &p->own) sched_mark_idle(p->fl);
        }
        int head = ph_top(&x->head);
        if (stop < 0 && head >= 0) sched_consider(c, s, head, now, 0);
        return;
    }
    if (!poll) {   /* next_timeout: in slot order, as far as stop */
        for (int pi = pset_next(&x->cand, 0); pi >= 0 && (stop < 0 || pi < stop);
             pi = pset_next(&x->cand, pi + 1))
            sched_consider(c, s, pi, now, 0);
        return;
    }
    /* poll_tx: round robin from c->rr, until one may send now */
    for (int pass = 0; pass < 2; pass++) {
        int end = pass ? c->rr : c->n_peers;
        for (int pi = next_fair(x, pass ? 0 : c->rr); pi >= 0 && pi < end && s->due > now;
             pi = next_fair(x, pi + 1)) {
            pset_put(&x->unmarked, pi, 0);
            sched_consider(c, s, pi, now, 1);
        }
    }
}

/* After every peer was considered: when the chosen peer may send (NEVER: no peer can). */
uint64_t sched_decide(ltp_core_t *c, sched_t *s, uint64_t now)
{
    if (c->cfg.peer_schedule == LTP_SCHED_SERIAL && s->peer >= 0) s->due = due(c, s, now);
    return s->due;
}

/* Build the chosen packet into b (its payload by reference if payload != NULL) and charge it
 * to the peer's probe credit and tokens. Returns the datagram's length. */
int sched_emit(ltp_core_t *c, const sched_t *s, uint64_t now, uint8_t *b, size_t cap, int *peer,
               const uint8_t **payload)
{
    peer_t *p = &c->peers[s->peer];
    int probe = p->probe_credit > 0;
    int n = tx_build_data(c, p, s->m, s->idx, s->retrans, probe, now, b, cap, payload);
    if (n < 0) return n;
    if (probe) p->probe_credit--;
    if (rate_paced(c)) p->fl->tokens -= n;
    *peer = s->peer;
    c->st[LTP_S_TX_DATAGRAMS]++;
    c->st[LTP_S_TX_BYTES] += (uint64_t)n;
    return n;
}
