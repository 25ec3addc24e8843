/* ltp_hint.c: the receiver side of the fair-share rate hint (incast). The receiver estimates
 * the capacity of the path toward it and the standing queue on it from the DATA arriving from
 * all peers, and puts capacity x gain / active senders into its ACKs; senders obey it
 * (ltp_rate.c). docs/ltp-protocol.md §5, "Receiver-driven fair-share rate hint".
 *
 * The receiver watches the aggregate of DATA arriving from all peers through two windows that
 * roll over at arrivals: a short one whose least queueing delay is the standing queue, and a
 * long one whose byte count over its duration is one capacity sample. Every valid DATA counts
 * (duplicates and late ones used the link too). A gap between arrivals longer than the short
 * window drops both: the link was not kept busy.
 *
 * Both the hint and the windows depend on the peers with a message still being received (open
 * peers): how many, the largest srtt among them, how many sent within an idle horizon. These are
 * kept as the peers open and close, not counted over every peer per ACK: the count, a heap of
 * srtts, and a list in order of each open peer's last DATA with a cursor at the horizon.
 */
#include "ltp_internal.h"

#include <string.h>

int hint_init(ltp_core_t *c)
{
    c->act_head = c->act_tail = c->act_cur = -1;
    return ph_init(&c->srtt, c->cfg.max_peers);
}

void hint_free(ltp_core_t *c) { ph_free(&c->srtt); }

/* ---------------------------------------------------------------- the open peers */
/* A heap key that puts the largest srtt first (a non-negative double's bits order as it does). */
static uint64_t srtt_key(const peer_t *p)
{
    double v = MIN(p->peer_srtt_us, 1e6);
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return ~bits - 1;   /* never NEVER */
}

/* Insert open peer pi into the list after the last one whose last DATA is no later than its. */
static void act_insert(ltp_core_t *c, int pi)
{
    peer_t *P = c->peers;
    uint64_t k = P[pi].last_data_us;
    int t = c->act_tail, passed = 0;
    for (; t >= 0 && P[t].last_data_us > k; t = P[t].act_prev) passed |= t == c->act_cur;
    P[pi].act_prev = t;
    P[pi].act_next = t >= 0 ? P[t].act_next : c->act_head;
    if (P[pi].act_next >= 0) P[P[pi].act_next].act_prev = pi;
    else c->act_tail = pi;
    if (t >= 0) P[t].act_next = pi;
    else c->act_head = pi;
    if (k >= c->act_thr) {   /* at or after the cursor's threshold: counted, maybe its new first */
        c->act_ge++;
        if (c->act_cur < 0 || passed) c->act_cur = pi;
    }
}

static void act_remove(ltp_core_t *c, int pi)
{
    peer_t *P = c->peers;
    if (P[pi].last_data_us >= c->act_thr) c->act_ge--;
    if (c->act_cur == pi) c->act_cur = P[pi].act_next;
    if (P[pi].act_prev >= 0) P[P[pi].act_prev].act_next = P[pi].act_next;
    else c->act_head = P[pi].act_next;
    if (P[pi].act_next >= 0) P[P[pi].act_next].act_prev = P[pi].act_prev;
    else c->act_tail = P[pi].act_prev;
}

/* Move the cursor to the first open peer whose last DATA is at or after x. */
static void act_seek(ltp_core_t *c, uint64_t x)
{
    const peer_t *P = c->peers;
    if (x > c->act_thr) {
        for (int t = c->act_cur; t >= 0 && P[t].last_data_us < x; t = P[t].act_next) {
            c->act_ge--;
            c->act_cur = P[t].act_next;
        }
    } else {
        int t = c->act_cur >= 0 ? P[c->act_cur].act_prev : c->act_tail;
        for (; t >= 0 && P[t].last_data_us >= x; t = P[t].act_prev) {
            c->act_ge++;
            c->act_cur = t;
        }
    }
    c->act_thr = x;
}

void hint_open(ltp_core_t *c, peer_t *p, int open)
{
    int pi = core_peer_slot(c, p);
    if (open) {
        c->n_open_peers++;
        ph_put(&c->srtt, pi, srtt_key(p));
        act_insert(c, pi);
    } else {
        c->n_open_peers--;
        ph_put(&c->srtt, pi, NEVER);
        act_remove(c, pi);
    }
}

void hint_srtt(ltp_core_t *c, peer_t *p)
{
    if (p->n_rx_open) ph_put(&c->srtt, core_peer_slot(c, p), srtt_key(p));
}

/* Open peers with a DATA no longer than `idle` ago (as the difference in doubles says). */
static uint32_t n_active(ltp_core_t *c, uint64_t now, double idle)
{
    const peer_t *P = c->peers;
    uint32_t n = 0;
    if (!(idle < 9007199254740992.0)) {   /* 2^53 us: no integer horizon; count them one by one */
        for (int t = c->act_head; t >= 0; t = P[t].act_next)
            n += !((double)(now - P[t].last_data_us) > idle);
        return n;
    }
    /* For a last DATA no later than now, now - last is within idle exactly when it is at most
     * floor(idle); a later one (the clock went back) is judged by the walk's own test. */
    uint64_t d = (uint64_t)idle;
    act_seek(c, d >= now ? 0 : now - d);
    n = c->act_ge;
    for (int t = c->act_tail; t >= 0 && P[t].last_data_us > now; t = P[t].act_prev)
        n -= (double)(now - P[t].last_data_us) > idle;
    return n;
}

static double queue_window_us(const ltp_core_t *c)
{
    /* At least one round trip of the slowest open path, so a window spans a flight of every
     * sender, and several reads, so its least delay is the queue's, not the reader's lateness. */
    double w = MAX((double)c->cfg.hint_window_min_us, 4 * c->read_gap_us);
    int top = ph_top(&c->srtt);
    if (top >= 0) w = MAX(w, MIN(c->peers[top].peer_srtt_us, 1e6));
    return w;
}

static double capacity_window_us(const ltp_core_t *c, double queue_window)
{
    /* A shaper passes its burst allowance (Mininet's HTB: 15 kB) on top of its rate after a
     * lull; over hint_sample_pkts packets' time that inflates a sample by at most 4 %. */
    double w = 4 * queue_window;
    if (c->cap_bw > 0) w = MAX(w, c->cfg.hint_sample_pkts * pkt_wire(c) / c->cap_bw);
    return w;
}

/* Queueing delay of one DATA: its one-way delay over the path's base (the minimum over
 * hint_bw_window_us). Clocks need no sync: the offset cancels against the path's own minimum. */
static double queue_delay_us(ltp_core_t *c, peer_t *p, uint32_t ts, uint64_t at)
{
    uint32_t owd = (uint32_t)at - ts;
    if (!p->has_owd) { p->owd_ref = owd; p->has_owd = 1; }
    double x = (double)(int32_t)(owd - p->owd_ref);
    double base = -minmax_running_max(&p->owd_filter, c->cfg.hint_bw_window_us, at, -x);
    return x - base;
}

/* The queue window ended at `last`: its least delay joins the standing-queue ring. */
static void roll_queue_window(ltp_core_t *c, uint64_t last, double q)
{
    /* The least delay over the last few windows is the standing queue (CoDel's view): bursts, a
     * late reader and a busy switch only ever add delay. */
    c->q_ring[c->q_n++ % 4] = c->q_win_us;
    c->q_standing_us = c->q_ring[0];
    for (uint32_t i = 1; i < MIN(c->q_n, 4u); i++) c->q_standing_us = MIN(c->q_standing_us, c->q_ring[i]);
    c->q_win_us = q;
    c->qw_start_us = last;
    c->qw_len_us = (uint64_t)queue_window_us(c);
}

/* The capacity window ended at `last`: it is one capacity sample. */
static void roll_capacity_window(ltp_core_t *c, uint64_t last, uint64_t at)
{
    /* n datagrams of a busy link in (t0, t1] arrived over at least n - 1 of their own
     * transmission times, so leaving one out makes a sample a lower bound. (Random loss after
     * the link lowers it too; hint_gain makes up for that.) */
    double rate = (double)(c->cw_bytes - c->cw_first_len) / (double)(last - c->cw_start_us);
    c->cap_bw = minmax_running_max(&c->cap_filter, c->cfg.hint_bw_window_us, at, rate);
    c->cw_start_us = last;
    c->cw_bytes = 0;
    c->cw_len_us = (uint64_t)capacity_window_us(c, (double)c->qw_len_us);
}

/* The link idled longer than a window: this batch opens both windows and is not counted in them. */
static void open_windows(ltp_core_t *c, uint64_t at, double q)
{
    c->est_open = 1;
    c->q_standing_us = 0;   /* no queue is left */
    c->q_n = 0;
    c->q_win_us = q;
    c->qw_start_us = c->cw_start_us = c->last_arrival_us = at;
    c->cw_bytes = 0;
    c->qw_len_us = (uint64_t)queue_window_us(c);
    c->cw_len_us = (uint64_t)capacity_window_us(c, (double)c->qw_len_us);
}

/* `at` is when the datagram reached the host: the kernel's receive timestamp from a driver that
 * has one, else the time it was read. Datagrams stamped with one instant are one batch: all of
 * them arrived by then and none before the previous instant, so a window that runs from one
 * instant t0 to a later one t1 counts what came in (t0, t1] and batching never inflates it. */
void hint_on_data(ltp_core_t *c, peer_t *p, const hdr_t *h, size_t len, uint64_t now, uint64_t at)
{
    if (!c->cfg.rate_hint) return;
    if (p->n_rx_open && p->last_data_us != now) {   /* it moves to its place in the list */
        act_remove(c, core_peer_slot(c, p));
        p->last_data_us = now;
        act_insert(c, core_peer_slot(c, p));
    }
    p->last_data_us = now;
    if (c->est_open && at < c->last_arrival_us) at = c->last_arrival_us;
    double q = queue_delay_us(c, p, h->ts, at);
    if (c->est_open && at != c->last_arrival_us) {
        uint64_t last = c->last_arrival_us;
        double gap = (double)(at - last);
        if (gap > (double)c->qw_len_us) {
            c->est_open = 0;
        } else {
            c->read_gap_us = c->read_gap_us > 0 ? 0.875 * c->read_gap_us + 0.125 * gap : gap;
            if (last - c->qw_start_us >= c->qw_len_us) roll_queue_window(c, last, q);
            if (last - c->cw_start_us >= c->cw_len_us) roll_capacity_window(c, last, at);
        }
    }
    if (!c->est_open) { open_windows(c, at, q); return; }
    if (at != c->cw_start_us) {
        if (!c->cw_bytes) c->cw_first_len = len;
        c->cw_bytes += len;
    }
    c->last_arrival_us = at;
    c->q_win_us = MIN(c->q_win_us, q);
}

/* The share to put in an ACK, in kbit/s; 0 (no hint) unless at least two peers are sending. */
uint32_t hint_kbps(ltp_core_t *c, uint64_t now)
{
    if (!c->cfg.rate_hint || c->cap_bw <= 0) return 0;
    int n_open = (int)c->n_open_peers;
    if (n_open < 2) return 0;
    /* Active: an open message and data within 4 queue windows or 8 packets at the fair share. */
    double idle = MAX(4.0 * (double)c->qw_len_us, 8.0 * pkt_wire(c) * n_open / c->cap_bw);
    int n_act = (int)n_active(c, now, idle);
    if (n_act < 2) return 0;
    /* Slightly more than the capacity finds any the estimate missed; a standing queue takes
     * rate off until it drains, so the queue stays short whatever the estimate's error. */
    double gain = MAX(c->cfg.hint_gain - c->q_standing_us / c->cfg.hint_drain_us, 0.5);
    double kbps = c->cap_bw * gain / n_act * 8000.0;
    return (uint32_t)MIN(MAX(kbps, 1.0), 4294967295.0);
}

double ltp_core_rx_capacity_mbps(const ltp_core_t *c, double *standing_queue_us)
{
    if (!c) return -1.0;
    if (standing_queue_us) *standing_queue_us = c->q_standing_us;
    return c->cap_bw * 8.0;
}
