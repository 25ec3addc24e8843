/* ltp_rate.c: sender rate control, per peer. An RTT estimate, a BBR-like model (bottleneck
 * bandwidth from delivery-rate samples, min RTT, startup / drain / probe-bandwidth gains), the
 * congestion window and a token bucket that paces DATA; and obeying the fair-share rate hint a
 * receiver puts in its ACKs (ltp_hint.c computes it). docs/ltp-protocol.md §5.
 */
#include "ltp_internal.h"

#include <math.h>

static const double STARTUP_GAIN = 2.885; /* 2/ln 2: doubles the rate every round trip */
static const double CYCLE_GAINS[8] = {1.25, 0.75, 1, 1, 1, 1, 1, 1};
static const uint64_t HOST_SAMPLES = 16;  /* lateness samples before the floors follow the host */

/* ---------------------------------------------------------------- windowed max (Linux minmax) */
double minmax_running_max(minmax_t *m, uint64_t win, uint64_t t, double v)
{
    mm_sample_t val = {t, v};
    if (v >= m->s[0].v || t - m->s[2].t > win) {
        m->s[0] = m->s[1] = m->s[2] = val;
        return v;
    }
    if (v >= m->s[1].v) m->s[2] = m->s[1] = val;
    else if (v >= m->s[2].v) m->s[2] = val;
    /* Age out samples so the max reflects only the last `win` rounds. */
    uint64_t dt = t - m->s[0].t;
    if (dt > win) {
        m->s[0] = m->s[1]; m->s[1] = m->s[2]; m->s[2] = val;
        if (t - m->s[0].t > win) { m->s[0] = m->s[1]; m->s[1] = m->s[2]; m->s[2] = val; }
    } else if (m->s[1].t == m->s[0].t && dt > win / 4) {
        m->s[2] = m->s[1] = val;
    } else if (m->s[2].t == m->s[1].t && dt > win / 2) {
        m->s[2] = val;
    }
    return m->s[0].v;
}

/* ---------------------------------------------------------------- path estimators */
double pkt_wire(const ltp_core_t *c) { return (double)c->cfg.max_udp_payload_bytes; }

static double initial_rate(const ltp_core_t *c)   /* bytes per microsecond */
{
    if (!c->cfg.cc) return c->cfg.fixed_rate_mbps / 8.0;
    return STARTUP_GAIN * c->cfg.init_cwnd_pkts * pkt_wire(c) / c->cfg.initial_rtt_us;
}

void rate_init_flow(const ltp_core_t *c, flow_t *f)
{
    f->bbr.pacing_gain = STARTUP_GAIN;
    f->bbr.cwnd_gain = STARTUP_GAIN;
    f->bbr.pacing_rate = initial_rate(c);
}

/* The serial schedule sends one copy after another through this end's own link: with
 * shared_link the copies are one flow to the rate model, which then measures that link whole
 * (a single copy may be shorter than the path's bandwidth-delay product, and a per-peer model
 * then never sees the link's rate) and paces the copies together at it. */
int rate_shared(const ltp_core_t *c)
{
    return c->cfg.shared_link && c->cfg.peer_schedule == LTP_SCHED_SERIAL;
}

void rtt_sample(ltp_core_t *c, peer_t *p, double rtt, uint64_t now)
{
    if (rtt <= 0) rtt = 1;
    if (!p->has_rtt) {
        p->srtt_us = rtt; p->rttvar_us = rtt / 2; p->has_rtt = 1;
    } else {
        p->rttvar_us = 0.75 * p->rttvar_us + 0.25 * fabs(p->srtt_us - rtt);
        p->srtt_us = 0.875 * p->srtt_us + 0.125 * rtt;
    }
    if (p->min_rtt_us == 0 || rtt <= p->min_rtt_us || now - p->min_rtt_stamp_us > c->cfg.min_rtt_window_us) {
        p->min_rtt_us = rtt;
        p->min_rtt_stamp_us = now;
    }
    flow_t *f = p->fl;
    if (f->min_rtt_us == 0 || rtt <= f->min_rtt_us || now - f->min_rtt_stamp_us > c->cfg.min_rtt_window_us) {
        f->min_rtt_us = rtt;
        f->min_rtt_stamp_us = now;
    }
    if (!f->rtt_seen) {
        /* The initial rate assumed initial_rtt_us; with a real RTT, start from the initial window
         * per that RTT instead (Linux's BBR does the same), so a long path is not paced at a rate
         * only a sub-millisecond one could carry. */
        f->rtt_seen = 1;
        if (c->cfg.cc && !f->bbr.has_bw) f->bbr.pacing_rate = STARTUP_GAIN * c->cfg.init_cwnd_pkts * pkt_wire(c) / rtt;
    }
}

double srtt_or_initial(const ltp_core_t *c, const peer_t *p)
{
    return p->has_rtt ? p->srtt_us : (double)c->cfg.initial_rtt_us;
}

/* ---------------------------------------------------------------- the host's timer slack */
/* What every floor follows (host_floor): -1 while they keep their fixed values, else the host's
 * slack within timer_floor_min_us and the largest fixed value. */
static double floor_level(const ltp_core_t *c)
{
    if (!c->cfg.timer_floors_host || c->n_late < HOST_SAMPLES) return -1;
    double top = MAX((double)c->cfg.pto_min_us,
                     MAX((double)c->cfg.reorder_window_min_us, (double)c->cfg.ack_delay_us));
    return MIN(top, MAX((double)c->cfg.timer_floor_min_us, c->late_max.s[0].v));
}

/* ltp_core_next_timeout names the time the core wants to run next; the first entry at or after it
 * (a datagram in, a poll, the next call) measures how late the host ran the core. The host's
 * slack is the largest lateness over the last timer_slack_window_us: a floor must cover the late
 * wake-ups a host has routinely, not its average one. An entry for a datagram that came just
 * after the time measures less than the timer would have; the largest sample is the timer's. */
void host_entry(ltp_core_t *c, uint64_t now)
{
    if (now < c->due_us) return;   /* NEVER: no time named */
    double before = floor_level(c);
    minmax_running_max(&c->late_max, c->cfg.timer_slack_window_us, now, (double)(now - c->due_us));
    c->due_us = NEVER;
    c->n_late++;
    /* The index keys each peer's timers by deadlines the floors enter (a probe, RACK): when they
     * move, every peer is keyed again. Only a change of the clamped level counts, so a host whose
     * slack stays above every fixed value re-keys nothing. */
    if (floor_level(c) != before) index_touch_all(c);
}

/* A timer floor: the fixed value, or with timer_floors_host and once the host was measured
 * (HOST_SAMPLES times), its slack, at least timer_floor_min_us and at most the fixed value. A timer
 * shorter than the slack of a host (this one, and a peer on a host like it) fires on lateness, not
 * on loss; one longer than it waits for nothing. A late host keeps the fixed values. */
double host_floor(const ltp_core_t *c, double fixed)
{
    double level = floor_level(c);   /* clamped to the largest fixed value, so MIN is the same */
    return level < 0 ? fixed : MIN(fixed, level);
}

/* How long an ACK waits for more DATA: ack_delay_us, or with timer_floors_host a quarter of the
 * sender's srtt (which its DATA carry), within the host's floor and ack_delay_us. A sender assumes
 * the same of its peer from its own srtt when it sets its probe timeout. */
double ack_hold_us(const ltp_core_t *c, double srtt_us)
{
    double fixed = c->cfg.ack_delay_us;
    return MIN(fixed, MAX(host_floor(c, fixed), srtt_us / 4));
}

static double bdp_bytes(const ltp_core_t *c, const flow_t *f)
{
    double rtt = f->min_rtt_us > 0 ? f->min_rtt_us : c->cfg.initial_rtt_us;
    return f->bbr.btl_bw * rtt;
}

/* p's sends are the serial schedule's copies to several peers, one flow over this end's link. */
static int own_link(const ltp_core_t *c, const peer_t *p) { return p->fl == &c->shared && c->n_peers > 1; }

/* ---------------------------------------------------------------- the receiver's rate hint */
/* How long a hint stays in force without a fresh ACK. */
static uint64_t hint_ttl_us(const ltp_core_t *c, const peer_t *p, double rate)
{
    double ttl = MAX((double)c->cfg.hint_ttl_min_us, c->cfg.hint_ttl_rtts * srtt_or_initial(c, p));
    /* A slow share sends rarely and is acked rarely: its hint must outlive that gap. */
    return (uint64_t)MAX(ttl, 8.0 * pkt_wire(c) / rate);
}

/* The receiver's fair-share hint is in force (only ever set with cc and rate_hint on). */
static int hint_active(const peer_t *p, uint64_t now) { return p->hint_until_us > now; }

/* A hint is one receiver's view of its own link. The serial schedule's shared flow carries the
 * copies to several receivers through this end's link, which its own model measures whole: it
 * obeys none of them. */
static int hint_applies(const ltp_core_t *c, const peer_t *p)
{
    return c->cfg.rate_hint && c->cfg.cc && !own_link(c, p);
}

void rate_on_hint(ltp_core_t *c, peer_t *p, uint32_t kbps, uint64_t now)
{
    if (!hint_applies(c, p)) return;
    if (!kbps) { p->hint_until_us = 0; return; }   /* the receiver has no estimate: BBR governs */
    /* Clamped, and obeyed for a bounded time: one hint, genuine or not, can slow the sender
     * only so far and only so long. */
    double mbps = kbps / 1000.0;
    if (mbps < c->cfg.hint_min_mbps || mbps > c->cfg.hint_max_mbps) {
        mbps = mbps < c->cfg.hint_min_mbps ? c->cfg.hint_min_mbps : c->cfg.hint_max_mbps;
        c->st[LTP_S_HINTS_CLAMPED]++;
    }
    p->hint_rate = mbps / 8.0;
    p->hint_until_us = now + MIN(hint_ttl_us(c, p, p->hint_rate), (uint64_t)c->cfg.hint_ttl_max_us);
    c->st[LTP_S_HINTS_RECEIVED]++;
}

/* ---------------------------------------------------------------- window and pacing */
double pacing_rate(const ltp_core_t *c, const peer_t *p, uint64_t now)
{
    if (!c->cfg.cc) return c->cfg.fixed_rate_mbps / 8.0;
    return hint_active(p, now) ? p->hint_rate : p->fl->bbr.pacing_rate;
}

static double quantum_bytes(const ltp_core_t *c, const peer_t *p, uint64_t now)
{
    double rate = pacing_rate(c, p, now), q = rate * c->cfg.pacing_quantum_us;
    /* When its thread wakes late (a busy machine), a flow catches up on what it missed instead of
     * losing it: a hinted sender is one of many sharing a link exactly (hint_catchup_us), and the
     * serial schedule's copies go into this end's own queue first (link_catchup_us). Lost tokens
     * do not only slow the link: its delivery rate measures what was sent, so the bandwidth
     * estimate, and the pacing rate with it, follow the thread's lateness down (simulated: a
     * 200 Mbit/s broadcast at a third of the link with threads waking 1 ms late; measured at
     * 25 ms one way: 96 Mbit/s fell to 27 over 30 broadcasts). A longer allowance on the link
     * lets bursts after a full window inflate the estimate instead (4 ms: 1.2x the link and a
     * 10 ms standing queue in front of the PS). BBR flows of an incast get none: their bursts
     * would meet in the bottleneck's queue. */
    if (hint_active(p, now)) q = MAX(q, rate * c->cfg.hint_catchup_us);
    else if (own_link(c, p)) q = MAX(q, rate * c->cfg.link_catchup_us);
    double lo = c->cfg.pacing_quantum_min_pkts * pkt_wire(c), hi = c->cfg.pacing_quantum_max_pkts * pkt_wire(c);
    return q < lo ? lo : q > hi ? hi : q;
}

double cwnd_bytes(const ltp_core_t *c, const peer_t *p, uint64_t now)
{
    if (!c->cfg.cc) return 1e18;
    const bbr_t *b = &p->fl->bbr;
    double floor_b = c->cfg.min_cwnd_pkts * pkt_wire(c), w;
    if (!b->has_bw || !b->filled_pipe) {
        /* Until the pipe is known to be full, never clamp below the initial window. */
        double init = c->cfg.init_cwnd_pkts * pkt_wire(c);
        w = MAX(init, b->has_bw ? b->cwnd_gain * bdp_bytes(c, p->fl) : 0);
    } else {
        /* Room for two pacing bursts keeps the pipe full despite delayed and batched ACKs. */
        w = MAX(floor_b, b->cwnd_gain * bdp_bytes(c, p->fl) + 2 * quantum_bytes(c, p, now));
        /* ACKs come back later than min RTT (batched, or from a busy userspace switch): the
         * window also covers cwnd_ack_extra_us at the estimated rate, so a lone flow is held
         * by its pacing, not by waiting for ACKs. A fixed allowance, not srtt, which the
         * queue this allows would inflate in turn. */
        w += b->btl_bw * c->cfg.cwnd_ack_extra_us;
    }
    /* Paced at a hint, the window must not be what blocks: two round trips at that rate, and
     * the hint's whole lifetime, which a few lost ACKs in a row can take. */
    if (hint_active(p, now)) {
        double span = MAX(2 * srtt_or_initial(c, p), (double)hint_ttl_us(c, p, p->hint_rate));
        w = MAX(w, p->hint_rate * span + 2 * quantum_bytes(c, p, now));
    }
    return w;
}

int rate_paced(const ltp_core_t *c) { return c->cfg.cc || c->cfg.fixed_rate_mbps > 0; }

static void refill(const ltp_core_t *c, peer_t *p, uint64_t now)
{
    flow_t *f = p->fl;
    double rate = pacing_rate(c, p, now);
    double q = quantum_bytes(c, p, now);
    if (now > f->tokens_us) f->tokens = MIN(q, f->tokens + rate * (double)(now - f->tokens_us));
    f->tokens_us = now;
}

/* When peer p, whose window is open, may send: now, or once its pacing tokens have refilled. */
uint64_t pacing_due(const ltp_core_t *c, peer_t *p, uint64_t now)
{
    if (!rate_paced(c)) return now;
    refill(c, p, now);
    if (p->fl->tokens > 0) return now;
    return now + (uint64_t)ceil((1.0 - p->fl->tokens) / pacing_rate(c, p, now));
}

/* ---------------------------------------------------------------- BBR-like model */
static void bbr_set_pacing(flow_t *f)
{
    bbr_t *b = &f->bbr;
    if (!b->has_bw) return;
    double rate = b->pacing_gain * b->btl_bw;
    /* In startup the rate only grows: one slow sample must not stall the ramp. */
    if (b->filled_pipe || rate > b->pacing_rate) b->pacing_rate = rate;
}

/* Take the delivery-rate sample of one ACK; returns 1 if it starts a new round trip. */
static int bbr_sample(ltp_core_t *c, flow_t *f, const txpkt_t *pk)
{
    bbr_t *b = &f->bbr;
    if (b->app_limited_until && b->delivered > b->app_limited_until) b->app_limited_until = 0;
    int round_start = 0;
    if (pk->delivered >= b->next_round_delivered) {
        b->next_round_delivered = b->delivered;
        b->round_count++;
        round_start = 1;
    }
    uint64_t send_el = pk->sent_us - pk->first_sent_us, ack_el = b->delivered_us - pk->delivered_us;
    uint64_t interval = MAX(send_el, ack_el);
    b->first_sent_us = pk->sent_us;
    double rate = -1;
    /* Intervals shorter than min RTT come from ACK compression and overstate the rate. */
    if (interval > 0 && !(f->min_rtt_us > 0 && (double)interval < f->min_rtt_us))
        rate = (double)(b->delivered - pk->delivered) / (double)interval;
    if (rate > 0 && (!pk->app_limited || rate >= b->btl_bw)) {
        b->btl_bw = minmax_running_max(&b->bw_filter, c->cfg.bw_window_rounds, b->round_count, rate);
        b->has_bw = 1;
    }
    return round_start;
}

/* One ACK's worth of model update. `pk` is the newest packet it acked. */
void bbr_on_ack(ltp_core_t *c, peer_t *p, const txpkt_t *pk, uint64_t now)
{
    flow_t *f = p->fl;
    bbr_t *b = &f->bbr;
    int round_start = bbr_sample(c, f, pk);
    /* A round tests the pipe if its samples are not app-limited, or if it had a bandwidth-delay
     * product in flight anyway: message traffic (a broadcast that is all in flight before its
     * first ACK) is app-limited at every round start, and would otherwise never leave STARTUP. */
    int tested = !pk->app_limited || (double)b->round_max_inflight >= bdp_bytes(c, f);
    if (round_start) b->round_max_inflight = f->inflight_bytes;
    if (round_start && !b->filled_pipe && tested && b->has_bw) {
        if (b->btl_bw >= b->full_bw * 1.25) { b->full_bw = b->btl_bw; b->full_bw_cnt = 0; }
        else if (++b->full_bw_cnt >= 3) b->filled_pipe = 1;
    }
    if (b->mode == BBR_STARTUP && b->filled_pipe) {
        b->mode = BBR_DRAIN;
        b->pacing_gain = 1.0 / STARTUP_GAIN;
        b->cwnd_gain = STARTUP_GAIN;
    }
    if (b->mode == BBR_DRAIN && (double)f->inflight_bytes <= bdp_bytes(c, f)) {
        b->mode = BBR_PROBE_BW;
        b->cwnd_gain = 2.0;
        b->cycle_idx = 2 + (int)(ltp_splitmix64(&c->rng) % 6);   /* never start in the drain phase */
        b->cycle_stamp_us = now;
        b->pacing_gain = CYCLE_GAINS[b->cycle_idx];
    }
    if (b->mode == BBR_PROBE_BW) {
        double mr = f->min_rtt_us > 0 ? f->min_rtt_us : c->cfg.initial_rtt_us;
        if ((double)(now - b->cycle_stamp_us) > mr) {
            b->cycle_idx = (b->cycle_idx + 1) % 8;
            b->cycle_stamp_us = now;
            b->pacing_gain = CYCLE_GAINS[b->cycle_idx];
        }
    }
    bbr_set_pacing(f);
}
