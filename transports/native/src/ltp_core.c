/* ltp_core.c: the sans-IO LTP protocol core (no sockets, no clock; time comes from the caller).
 *
 * One core is one endpoint. Peers are slots; per peer it keeps the BBR-like path state, up to
 * max_tx_per_peer messages being sent and max_open_per_peer messages being received, and a ring
 * of recently closed receive keys. docs/ltp-protocol.md describes the protocol this implements.
 */
#include "ltp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define NEVER UINT64_MAX

enum { PK_UNSENT = 0, PK_INFLIGHT = 1, PK_LOST = 2, PK_ACKED = 3 };
enum { BBR_STARTUP = 0, BBR_DRAIN = 1, BBR_PROBE_BW = 2 };

static const double STARTUP_GAIN = 2.885; /* 2/ln 2: doubles the rate every round trip */
static const double CYCLE_GAINS[8] = {1.25, 0.75, 1, 1, 1, 1, 1, 1};

/* ---------------------------------------------------------------- little-endian helpers */
static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static void wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static int seq_lt(uint32_t a, uint32_t b) { return (int32_t)(a - b) < 0; }

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---------------------------------------------------------------- windowed max (Linux minmax) */
typedef struct { uint64_t t; double v; } mm_sample_t;
typedef struct { mm_sample_t s[3]; } minmax_t;

static double minmax_running_max(minmax_t *m, uint64_t win, uint64_t t, double v)
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

/* ---------------------------------------------------------------- state */
typedef struct {
    uint64_t sent_us, delivered, delivered_us, first_sent_us;
    uint32_t tx_seq;
    uint8_t state, app_limited;
} txpkt_t;

typedef struct {
    int used, done;
    uint32_t msg_id;
    uint16_t segment;
    const uint8_t *data;
    uint32_t total, count, chunk, critical;
    uint32_t *order, next_first;     /* first-pass schedule and cursor */
    txpkt_t *pk;
    uint64_t *lost;                  /* bitmap of packets waiting for retransmission */
    uint32_t n_lost, lost_cursor, ack_floor;
    uint32_t *seq_idx, seq_cap;      /* packet index of every transmission, by tx_seq */
    uint32_t tx_seq_next, scan_seq;
    int rack_valid;
    uint32_t rack_seq;
    uint64_t rack_sent_us, rack_rtt_us, rack_timer_us;
    uint64_t start_us, last_sent_us, done_us;
    uint64_t enq_seq;                /* queueing order across all peers (serial schedule) */
    uint32_t pto_count, n_acked, inflight_pkts;
    uint64_t packets, retransmits, wire_bytes, peer_received;
    int done_reason;
} txmsg_t;

typedef struct {
    int used, closed;
    uint32_t msg_id;
    uint16_t segment;
    uint8_t *buf;
    uint64_t *bits;
    uint32_t total, count, chunk, critical;
    uint32_t received, crit_rcvd, first_rcvd, base, max_idx, max_first_seq;
    uint64_t received_bytes, duplicates, retransmits;
    uint64_t first_us, pass_end_us, close_us;
    uint32_t ack_pending, echo_ts, echo_seq;
    uint64_t ack_due_us, echo_arrival_us;
    double threshold;
    int reason;
} rxmsg_t;

typedef struct {
    int used;
    uint32_t msg_id, received, count;
    uint16_t segment;
    uint8_t reason, close_pending;
} closed_t;

typedef struct {
    int mode, filled_pipe, full_bw_cnt, cycle_idx, has_bw;
    minmax_t bw_filter;
    double btl_bw, full_bw, pacing_gain, cwnd_gain, pacing_rate;
    uint64_t round_count, next_round_delivered, cycle_stamp_us;
    uint64_t delivered, delivered_us, first_sent_us, app_limited_until;
} bbr_t;

typedef struct {
    uint16_t rank;
    int greeted, joined, hello_active, hello_ack_pending;
    uint64_t hello_next_us;
    int has_rtt;
    double srtt_us, rttvar_us, min_rtt_us, peer_srtt_us;
    uint64_t min_rtt_stamp_us;
    bbr_t bbr;
    double tokens;
    uint64_t tokens_us, inflight_bytes;
    uint32_t probe_credit;
    double hint_rate;                      /* fair-share rate the receiver asked for, bytes/us */
    uint64_t hint_until_us;                /* obeyed until then; 0: no hint */
    uint64_t last_data_us;                 /* last DATA from this peer (receiver's activity view) */
    int has_owd;
    uint32_t owd_ref;                      /* first one-way delay sample (clock offset included) */
    minmax_t owd_filter;                   /* max of -(owd - owd_ref): the base one-way delay */
    txmsg_t *tx;
    rxmsg_t *rx;
    closed_t *ring;
    uint32_t ring_head, n_close_pending;   /* ring entries with CLOSE copies to send */
    int has_p, has_tpass, floor_valid;
    double p_hat, t_pass_us;
    uint32_t floor;
} peer_t;

typedef struct { float lo, hi; uint8_t set; } policy_t;

struct ltp_core {
    ltp_config_t cfg;
    uint16_t self_rank;
    uint32_t chunk;
    peer_t *peers;
    int n_peers, rr;
    uint64_t n_enqueued;                   /* messages queued so far: the next enq_seq */
    policy_t *policy;
    uint32_t n_policy;
    uint64_t rng;
    /* Receiver side of the rate hint: aggregate DATA arrivals, see cap_on_data. */
    int est_open;                          /* arrivals are close enough together to measure */
    uint64_t last_arrival_us;
    double read_gap_us;                    /* mean time between distinct arrival instants */
    uint64_t qw_start_us, qw_len_us;       /* queue window */
    double q_win_us, q_standing_us;        /* least queueing delay in it; over the last 4 */
    double q_ring[4];
    uint32_t q_n;
    uint64_t cw_start_us, cw_len_us, cw_bytes, cw_first_len;   /* capacity window */
    minmax_t cap_filter;
    double cap_bw;                         /* capacity toward this endpoint, bytes/us */
    uint64_t st[LTP_S__COUNT];
};

/* ---------------------------------------------------------------- configuration */
typedef struct { const char *name; size_t off; char type; double lo, hi; } optdef_t;
#define U32(n, lo, hi) {#n, offsetof(ltp_config_t, n), 'u', lo, hi}
#define U64(n, lo, hi) {#n, offsetof(ltp_config_t, n), 'U', lo, hi}
#define DBL(n, lo, hi) {#n, offsetof(ltp_config_t, n), 'd', lo, hi}
static const optdef_t OPTS[] = {
    U32(session_id, 0, 4294967295.0), U32(max_udp_payload_bytes, LTP_DATA_HDR_BYTES + 4, LTP_MAX_DATAGRAM),
    U32(max_msg_bytes, 4, 2147483648.0), U32(max_peers, 1, 65535), U32(max_open_per_peer, 1, 1024),
    U32(max_tx_per_peer, 1, 1024), U32(closed_ring, 1, 65536), U32(send_order, 0, 2),
    U32(peer_schedule, 0, 1),
    U64(seed, 0, 18446744073709551615.0),
    DBL(threshold_min, 0, 1), DBL(threshold_max, 0, 1), DBL(loss_weight, 0, 100),
    DBL(rtt_weight, 0, 1), DBL(loss_ewma_gain, 0, 1), U32(close_grace_min_us, 0, 60e6),
    DBL(grace_rtt_mult, 0, 1000), U32(max_wait_us, 1, 3600e6), U32(close_copies, 1, 16),
    U32(ack_every, 1, 1024), U32(ack_delay_us, 0, 1e6), U32(reorder_window_min_us, 0, 1e6),
    U32(pto_min_us, 10, 10e6), U32(pto_max_backoff, 0, 16), U32(initial_rtt_us, 1, 10e6),
    U32(hello_interval_us, 100, 10e6), U32(cc, 0, 1), DBL(fixed_rate_mbps, 0, 1e6),
    U32(init_cwnd_pkts, 2, 65536), U32(cwnd_ack_extra_us, 0, 1e6), U32(min_cwnd_pkts, 1, 65536),
    U32(pacing_quantum_us, 1, 1e6),
    U32(pacing_quantum_min_pkts, 1, 1024), U32(pacing_quantum_max_pkts, 1, 1024),
    U32(bw_window_rounds, 1, 1000), U32(min_rtt_window_us, 1000, 3600e6),
    U32(rate_hint, 0, 1), DBL(hint_gain, 0.5, 4), U32(hint_window_min_us, 100, 1e6),
    U32(hint_bw_window_us, 1000, 3600e6), U32(hint_ttl_rtts, 1, 1000), U32(hint_ttl_min_us, 0, 10e6),
    U32(hint_drain_us, 100, 10e6), U32(hint_sample_pkts, 1, 1e6), U32(hint_catchup_us, 0, 1e6),
};

size_t ltp_config_size(void) { return sizeof(ltp_config_t); }

void ltp_config_default(ltp_config_t *c)
{
    memset(c, 0, sizeof *c);
    c->session_id = 1;
    c->max_udp_payload_bytes = 1472;   /* 1500-byte MTU minus IPv4 and UDP headers */
    c->max_msg_bytes = 64u << 20;
    c->max_peers = 64;
    c->max_open_per_peer = 4;
    c->max_tx_per_peer = 4;
    c->closed_ring = 64;
    c->send_order = LTP_ORDER_PRIORITY;
    c->peer_schedule = LTP_SCHED_SERIAL;
    c->seed = 1;
    c->threshold_min = 0.80;
    c->threshold_max = 0.99;
    c->loss_weight = 1.0;
    c->rtt_weight = 0.05;
    c->loss_ewma_gain = 0.25;
    c->close_grace_min_us = 1000;
    c->grace_rtt_mult = 2.0;
    c->max_wait_us = 1000000;
    c->close_copies = 2;
    c->ack_every = 8;
    c->ack_delay_us = 200;
    c->reorder_window_min_us = 100;
    c->pto_min_us = 500;
    c->pto_max_backoff = 6;
    c->initial_rtt_us = 1000;
    c->hello_interval_us = 20000;
    c->cc = 1;
    c->fixed_rate_mbps = 0;
    c->init_cwnd_pkts = 32;
    c->cwnd_ack_extra_us = 2000;
    c->min_cwnd_pkts = 4;
    c->pacing_quantum_us = 500;
    c->pacing_quantum_min_pkts = 2;
    c->pacing_quantum_max_pkts = 32;
    c->bw_window_rounds = 10;
    c->min_rtt_window_us = 10000000;
    c->rate_hint = 1;
    c->hint_gain = 1.10;
    c->hint_window_min_us = 1000;
    c->hint_bw_window_us = 10000000;
    c->hint_ttl_rtts = 4;
    c->hint_ttl_min_us = 2000;
    c->hint_drain_us = 10000;
    c->hint_sample_pkts = 256;
    c->hint_catchup_us = 4000;
}

int ltp_config_set(ltp_config_t *c, const char *name, double v)
{
    if (!c || !name) return LTP_EINVAL;
    for (size_t i = 0; i < sizeof OPTS / sizeof OPTS[0]; i++) {
        const optdef_t *o = &OPTS[i];
        if (strcmp(o->name, name) != 0) continue;
        if (!(v >= o->lo && v <= o->hi)) return LTP_EOPTION;   /* also rejects NaN */
        char *p = (char *)c + o->off;
        if (o->type == 'u') { if (v != floor(v)) return LTP_EOPTION; *(uint32_t *)p = (uint32_t)v; }
        else if (o->type == 'U') { if (v != floor(v)) return LTP_EOPTION; *(uint64_t *)p = (uint64_t)v; }
        else *(double *)p = v;
        return LTP_OK;
    }
    return LTP_EOPTION;
}

uint32_t ltp_chunk_bytes(const ltp_config_t *c)
{
    if (c->max_udp_payload_bytes < LTP_DATA_HDR_BYTES + 4) return 0;
    return (c->max_udp_payload_bytes - LTP_DATA_HDR_BYTES) & ~3u;
}

int ltp_config_validate(const ltp_config_t *c)
{
    if (!c || ltp_chunk_bytes(c) < 4 || c->max_udp_payload_bytes > LTP_MAX_DATAGRAM) return LTP_EOPTION;
    if (c->threshold_min > c->threshold_max || c->threshold_max > 1 || c->threshold_min < 0) return LTP_EOPTION;
    if (c->pacing_quantum_min_pkts > c->pacing_quantum_max_pkts || c->send_order > 2 || c->peer_schedule > 1)
        return LTP_EOPTION;
    if (c->max_msg_bytes % 4 || c->max_msg_bytes < 4 || c->max_peers < 1) return LTP_EOPTION;
    if (c->max_open_per_peer < 1 || c->max_tx_per_peer < 1 || c->closed_ring < 1) return LTP_EOPTION;
    if (c->ack_every < 1 || c->close_copies < 1 || c->init_cwnd_pkts < 2) return LTP_EOPTION;
    if (c->rate_hint > 1 || !(c->hint_gain >= 0.5 && c->hint_gain <= 4) || c->hint_window_min_us < 100 ||
        c->hint_bw_window_us < 1000 || c->hint_ttl_rtts < 1 || c->hint_drain_us < 100 ||
        c->hint_sample_pkts < 1)
        return LTP_EOPTION;
    return LTP_OK;
}

const char *ltp_strerror(int code)
{
    switch (code) {
    case LTP_OK: return "ok";
    case LTP_EINVAL: return "invalid argument";
    case LTP_ENOMEM: return "out of memory";
    case LTP_ETIMEDOUT: return "deadline passed";
    case LTP_ESYS: return "system call failed";
    case LTP_EFULL: return "table full";
    case LTP_ENOTFOUND: return "no such peer or message";
    case LTP_EBUSY: return "message already in progress";
    case LTP_EMALFORMED: return "malformed datagram";
    case LTP_EPEER: return "unknown peer";
    case LTP_ESESSION: return "wrong session";
    case LTP_ESTALE: return "stale message";
    case LTP_EOPTION: return "unknown option or value out of range";
    case LTP_EDROPPED: return "dropped";
    default: return "unknown error";
    }
}

static const char *STAT_NAMES[LTP_S__COUNT] = {
    "rx_datagrams", "tx_datagrams", "rx_bytes", "tx_bytes", "malformed", "unknown_peer",
    "wrong_session", "stale", "rx_table_full", "duplicates", "late_data", "close_resent",
    "data_sent", "retransmits", "probes", "lost_detected", "acks_sent", "acks_received",
    "stray_control", "close_complete", "close_early", "close_max_wait", "close_stale",
    "sends_closed", "sends_all_acked", "sends_cancelled", "rx_dropped_hook", "tx_eagain",
    "acks_hinted", "hints_received",
};
const char *ltp_stat_name(int i) { return (i >= 0 && i < LTP_S__COUNT) ? STAT_NAMES[i] : NULL; }
int ltp_stat_count(void) { return LTP_S__COUNT; }

/* ---------------------------------------------------------------- lifecycle */
static void tx_free(txmsg_t *m)
{
    free(m->order); free(m->pk); free(m->lost); free(m->seq_idx);
    memset(m, 0, sizeof *m);
}
static void rx_free(rxmsg_t *m) { free(m->buf); free(m->bits); memset(m, 0, sizeof *m); }

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

static double pkt_wire(const ltp_core_t *c) { return (double)c->cfg.max_udp_payload_bytes; }

static double initial_rate(const ltp_core_t *c)   /* bytes per microsecond */
{
    if (!c->cfg.cc) return c->cfg.fixed_rate_mbps / 8.0;
    return STARTUP_GAIN * c->cfg.init_cwnd_pkts * pkt_wire(c) / c->cfg.initial_rtt_us;
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
    p->bbr.pacing_gain = STARTUP_GAIN;
    p->bbr.cwnd_gain = STARTUP_GAIN;
    p->bbr.pacing_rate = initial_rate(c);
    return c->n_peers++;
}

int ltp_core_set_policy(ltp_core_t *c, uint16_t seg, double lo, double hi)
{
    if (!c || !(lo >= 0 && lo <= hi && hi <= 1)) return LTP_EINVAL;
    if (seg >= c->n_policy) {
        uint32_t n = (uint32_t)seg + 1;
        policy_t *np = realloc(c->policy, n * sizeof *np);
        if (!np) return LTP_ENOMEM;
        memset(np + c->n_policy, 0, (n - c->n_policy) * sizeof *np);
        c->policy = np;
        c->n_policy = n;
    }
    c->policy[seg] = (policy_t){(float)lo, (float)hi, 1};
    return LTP_OK;
}

static peer_t *get_peer(const ltp_core_t *c, int peer)
{
    return (c && peer >= 0 && peer < c->n_peers) ? &c->peers[peer] : NULL;
}

/* ---------------------------------------------------------------- path estimators */
static void rtt_sample(ltp_core_t *c, peer_t *p, double rtt, uint64_t now)
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
}

static double srtt_or_initial(const ltp_core_t *c, const peer_t *p)
{
    return p->has_rtt ? p->srtt_us : (double)c->cfg.initial_rtt_us;
}

static double bdp_bytes(const ltp_core_t *c, const peer_t *p)
{
    double rtt = p->min_rtt_us > 0 ? p->min_rtt_us : c->cfg.initial_rtt_us;
    return p->bbr.btl_bw * rtt;
}

static double quantum_bytes(const ltp_core_t *c, const peer_t *p, uint64_t now);

/* Sender: how long a hint stays in force without a fresh ACK. */
static uint64_t hint_ttl_us(const ltp_core_t *c, const peer_t *p, double rate)
{
    double ttl = MAX((double)c->cfg.hint_ttl_min_us, c->cfg.hint_ttl_rtts * srtt_or_initial(c, p));
    /* A slow share sends rarely and is acked rarely: its hint must outlive that gap. */
    return (uint64_t)MAX(ttl, 8.0 * pkt_wire(c) / rate);
}


/* The receiver's fair-share hint is in force (only ever set with cc and rate_hint on). */
static int hint_active(const peer_t *p, uint64_t now) { return p->hint_until_us > now; }

static double cwnd_bytes(const ltp_core_t *c, const peer_t *p, uint64_t now)
{
    if (!c->cfg.cc) return 1e18;
    double floor_b = c->cfg.min_cwnd_pkts * pkt_wire(c), w;
    if (!p->bbr.has_bw || !p->bbr.filled_pipe) {
        /* Until the pipe is known to be full, never clamp below the initial window. */
        double init = c->cfg.init_cwnd_pkts * pkt_wire(c);
        w = MAX(init, p->bbr.has_bw ? p->bbr.cwnd_gain * bdp_bytes(c, p) : 0);
    } else {
        /* Room for two pacing bursts keeps the pipe full despite delayed and batched ACKs. */
        w = MAX(floor_b, p->bbr.cwnd_gain * bdp_bytes(c, p) + 2 * quantum_bytes(c, p, now));
        /* ACKs come back later than min RTT (batched, or from a busy userspace switch): the
         * window also covers cwnd_ack_extra_us at the estimated rate, so a lone flow is held
         * by its pacing, not by waiting for ACKs. A fixed allowance, not srtt, which the
         * queue this allows would inflate in turn. */
        w += p->bbr.btl_bw * c->cfg.cwnd_ack_extra_us;
    }
    /* Paced at a hint, the window must not be what blocks: two round trips at that rate, and
     * the hint's whole lifetime, which a few lost ACKs in a row can take. */
    if (hint_active(p, now)) {
        double span = MAX(2 * srtt_or_initial(c, p), (double)hint_ttl_us(c, p, p->hint_rate));
        w = MAX(w, p->hint_rate * span + 2 * quantum_bytes(c, p, now));
    }
    return w;
}

static double pacing_rate(const ltp_core_t *c, const peer_t *p, uint64_t now)
{
    if (!c->cfg.cc) return c->cfg.fixed_rate_mbps / 8.0;
    return hint_active(p, now) ? p->hint_rate : p->bbr.pacing_rate;
}

static double quantum_bytes(const ltp_core_t *c, const peer_t *p, uint64_t now)
{
    double q = pacing_rate(c, p, now) * c->cfg.pacing_quantum_us;
    /* A hinted sender is one of many sharing a link exactly: when its thread wakes late (a busy
     * machine), it catches up on what it missed instead of losing its share. */
    if (hint_active(p, now)) q = MAX(q, p->hint_rate * c->cfg.hint_catchup_us);
    double lo = c->cfg.pacing_quantum_min_pkts * pkt_wire(c), hi = c->cfg.pacing_quantum_max_pkts * pkt_wire(c);
    return q < lo ? lo : q > hi ? hi : q;
}

static void bbr_set_pacing(ltp_core_t *c, peer_t *p)
{
    bbr_t *b = &p->bbr;
    if (!b->has_bw) return;
    double rate = b->pacing_gain * b->btl_bw;
    /* In startup the rate only grows: one slow sample must not stall the ramp. */
    if (b->filled_pipe || rate > b->pacing_rate) b->pacing_rate = rate;
    (void)c;
}

/* One ACK's worth of delivery-rate sample for BBR. `pk` is the newest packet it acked. */
static void bbr_on_ack(ltp_core_t *c, peer_t *p, const txpkt_t *pk, uint64_t now)
{
    bbr_t *b = &p->bbr;
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
    if (interval > 0 && !(p->min_rtt_us > 0 && (double)interval < p->min_rtt_us))
        rate = (double)(b->delivered - pk->delivered) / (double)interval;
    if (rate > 0 && (!pk->app_limited || rate >= b->btl_bw)) {
        b->btl_bw = minmax_running_max(&b->bw_filter, c->cfg.bw_window_rounds, b->round_count, rate);
        b->has_bw = 1;
    }
    if (round_start && !b->filled_pipe && !pk->app_limited && b->has_bw) {
        if (b->btl_bw >= b->full_bw * 1.25) { b->full_bw = b->btl_bw; b->full_bw_cnt = 0; }
        else if (++b->full_bw_cnt >= 3) b->filled_pipe = 1;
    }
    if (b->mode == BBR_STARTUP && b->filled_pipe) {
        b->mode = BBR_DRAIN;
        b->pacing_gain = 1.0 / STARTUP_GAIN;
        b->cwnd_gain = STARTUP_GAIN;
    }
    if (b->mode == BBR_DRAIN && (double)p->inflight_bytes <= bdp_bytes(c, p)) {
        b->mode = BBR_PROBE_BW;
        b->cwnd_gain = 2.0;
        b->cycle_idx = 2 + (int)(splitmix64(&c->rng) % 6);   /* never start in the drain phase */
        b->cycle_stamp_us = now;
        b->pacing_gain = CYCLE_GAINS[b->cycle_idx];
    }
    if (b->mode == BBR_PROBE_BW) {
        double mr = p->min_rtt_us > 0 ? p->min_rtt_us : c->cfg.initial_rtt_us;
        if ((double)(now - b->cycle_stamp_us) > mr) {
            b->cycle_idx = (b->cycle_idx + 1) % 8;
            b->cycle_stamp_us = now;
            b->pacing_gain = CYCLE_GAINS[b->cycle_idx];
        }
    }
    bbr_set_pacing(c, p);
}

/* ---------------------------------------------------------------- wire: parse */
typedef struct {
    uint8_t type, flags;
    uint16_t sender, segment, critical;
    uint32_t session, msg_id;
    /* DATA */
    uint32_t index, count, offset, total, tx_seq, ts, srtt;
    uint16_t payload_len;
    const uint8_t *payload;
    /* ACK / CLOSE */
    uint32_t received, base, echo_ts, ack_delay, echo_seq, close_count, hint_kbps;
    uint16_t bits;
    uint8_t reason;
    const uint8_t *bitmap;
} hdr_t;

/* Stateless validation; everything that can be checked from the datagram alone. */
static int parse(const ltp_config_t *cfg, const uint8_t *b, size_t len, hdr_t *h)
{
    if (!b || len < LTP_HDR_BYTES || len > LTP_MAX_DATAGRAM) return LTP_EMALFORMED;
    if (rd16(b) != LTP_MAGIC || b[2] != LTP_VERSION || b[5] != 0) return LTP_EMALFORMED;
    memset(h, 0, sizeof *h);
    h->type = b[3]; h->flags = b[4]; h->sender = rd16(b + 6); h->session = rd32(b + 8);
    h->msg_id = rd32(b + 12); h->segment = rd16(b + 16); h->critical = rd16(b + 18);
    if (h->type != LTP_T_DATA && (h->flags || h->critical)) return LTP_EMALFORMED;
    switch (h->type) {
    case LTP_T_DATA: {
        if (len < LTP_DATA_HDR_BYTES || (h->flags & ~0x0Fu)) return LTP_EMALFORMED;
        h->index = rd32(b + 20); h->count = rd32(b + 24); h->offset = rd32(b + 28);
        h->total = rd32(b + 32); h->payload_len = rd16(b + 36);
        h->tx_seq = rd32(b + 40); h->ts = rd32(b + 44); h->srtt = rd32(b + 48);
        h->payload = b + LTP_DATA_HDR_BYTES;
        uint64_t off = h->offset, pl = h->payload_len, tot = h->total, cnt = h->count;
        if (rd16(b + 38) != 0 || pl != len - LTP_DATA_HDR_BYTES || pl == 0) return LTP_EMALFORMED;
        if (tot == 0 || tot > cfg->max_msg_bytes || (tot | off | pl) % 4) return LTP_EMALFORMED;
        if (cnt == 0 || h->index >= cnt || cnt > tot / 4 || off + pl > tot) return LTP_EMALFORMED;
        if (h->critical > cnt || ((h->flags & LTP_F_CRITICAL) != 0) != (h->index < h->critical))
            return LTP_EMALFORMED;
        /* Packets are equal chunks with a shorter last one, so offset is determined by index. */
        if (h->index + 1 < cnt) {
            if (off != (uint64_t)h->index * pl || (cnt - 1) * pl >= tot || tot > cnt * pl) return LTP_EMALFORMED;
        } else if (cnt == 1) {
            if (off != 0 || pl != tot) return LTP_EMALFORMED;
        } else {
            uint64_t ch = off / (cnt - 1);
            if (off % (cnt - 1) || ch == 0 || ch % 4 || off + pl != tot || pl > ch) return LTP_EMALFORMED;
        }
        return LTP_OK;
    }
    case LTP_T_ACK:
        if (len < LTP_ACK_HDR_BYTES) return LTP_EMALFORMED;
        h->received = rd32(b + 20); h->base = rd32(b + 24); h->echo_ts = rd32(b + 28);
        h->ack_delay = rd32(b + 32); h->echo_seq = rd32(b + 36); h->bits = rd16(b + 40);
        h->hint_kbps = rd32(b + 44);   /* any value is a rate; 0 means "no hint" */
        h->bitmap = b + LTP_ACK_HDR_BYTES;
        if (rd16(b + 42) != 0 || h->bits % 8 || len != LTP_ACK_HDR_BYTES + h->bits / 8u) return LTP_EMALFORMED;
        if (h->received < h->base) return LTP_EMALFORMED;
        return LTP_OK;
    case LTP_T_CLOSE:
        if (len != LTP_CLOSE_BYTES) return LTP_EMALFORMED;
        h->received = rd32(b + 20); h->close_count = rd32(b + 24); h->reason = b[28];
        if (b[29] || b[30] || b[31] || h->reason < LTP_CLOSE_COMPLETE || h->reason > LTP_CLOSE_STALE ||
            h->received > h->close_count)
            return LTP_EMALFORMED;
        return LTP_OK;
    case LTP_T_HELLO:
    case LTP_T_HELLO_ACK:
        return len == LTP_HDR_BYTES ? LTP_OK : LTP_EMALFORMED;
    default:
        return LTP_EMALFORMED;
    }
}

static void put_common(const ltp_core_t *c, uint8_t *b, uint8_t type, uint8_t flags, uint32_t msg_id,
                       uint16_t segment, uint16_t critical)
{
    wr16(b, LTP_MAGIC); b[2] = LTP_VERSION; b[3] = type; b[4] = flags; b[5] = 0;
    wr16(b + 6, c->self_rank); wr32(b + 8, c->cfg.session_id); wr32(b + 12, msg_id);
    wr16(b + 16, segment); wr16(b + 18, critical);
}

/* ---------------------------------------------------------------- receive side */
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
    double p_hat = p->has_p ? p->p_hat : 0;
    double rtt_term = 0;
    if (p->has_tpass && p->t_pass_us > 0) rtt_term = MIN(1.0, p->peer_srtt_us / p->t_pass_us);
    double th = hi - c->cfg.loss_weight * p_hat - c->cfg.rtt_weight * rtt_term;
    return th < lo ? lo : th > hi ? hi : th;
}

static uint64_t grace_us(const ltp_core_t *c, const peer_t *p)
{
    double g = c->cfg.grace_rtt_mult * p->peer_srtt_us;
    return (uint64_t)MAX((double)c->cfg.close_grace_min_us, g);
}

static closed_t *ring_find(const ltp_core_t *c, peer_t *p, uint32_t msg_id, uint16_t seg)
{
    for (uint32_t i = 0; i < c->cfg.closed_ring; i++)
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
    closed_t *e = &p->ring[p->ring_head];
    p->ring_head = (p->ring_head + 1) % c->cfg.closed_ring;
    set_close_pending(p, e, 0);
    memset(e, 0, sizeof *e);
    e->used = 1; e->msg_id = msg_id; e->segment = seg;
    return e;
}

static void rx_close(ltp_core_t *c, peer_t *p, rxmsg_t *m, int reason, uint64_t now)
{
    m->closed = 1;
    m->reason = reason;
    m->close_us = now;
    m->threshold = policy_threshold(c, p, m->segment);
    m->ack_pending = 0;
    /* Learn this peer's first-pass loss and pass duration for the next threshold. */
    uint32_t n_first = m->pass_end_us ? m->count : MIN(m->count, m->max_first_seq + 1);
    if (n_first > 0) {
        double sample = 1.0 - (double)MIN(m->first_rcvd, n_first) / n_first;
        double g = c->cfg.loss_ewma_gain;
        p->p_hat = p->has_p ? (1 - g) * p->p_hat + g * sample : sample;
        p->has_p = 1;
    }
    if (m->pass_end_us > m->first_us) {
        double t = (double)(m->pass_end_us - m->first_us);
        p->t_pass_us = p->has_tpass ? 0.75 * p->t_pass_us + 0.25 * t : t;
        p->has_tpass = 1;
    }
    closed_t *e = ring_find(c, p, m->msg_id, m->segment);
    if (!e) e = ring_push(c, p, m->msg_id, m->segment);
    e->received = m->received; e->count = m->count; e->reason = (uint8_t)reason;
    set_close_pending(p, e, c->cfg.close_copies);
    c->st[reason == LTP_CLOSE_COMPLETE ? LTP_S_CLOSE_COMPLETE
          : reason == LTP_CLOSE_EARLY ? LTP_S_CLOSE_EARLY : LTP_S_CLOSE_MAX_WAIT]++;
}

static int crit_ok(const rxmsg_t *m) { return m->crit_rcvd >= m->critical; }

static void rx_check_close(ltp_core_t *c, peer_t *p, rxmsg_t *m, uint64_t now)
{
    if (m->closed) return;
    if (m->received == m->count) { rx_close(c, p, m, LTP_CLOSE_COMPLETE, now); return; }
    if (!crit_ok(m)) return;
    double frac = (double)m->received_bytes / m->total;
    if (m->pass_end_us && now >= m->pass_end_us + grace_us(c, p) && frac >= policy_threshold(c, p, m->segment))
        rx_close(c, p, m, LTP_CLOSE_EARLY, now);
    else if (now >= m->first_us + c->cfg.max_wait_us && frac >= policy_min(c, m->segment))
        rx_close(c, p, m, LTP_CLOSE_MAX_WAIT, now);
}

static rxmsg_t *rx_find(const ltp_core_t *c, const peer_t *p, uint32_t msg_id, uint16_t seg)
{
    for (uint32_t i = 0; i < c->cfg.max_open_per_peer; i++)
        if (p->rx[i].used && p->rx[i].msg_id == msg_id && p->rx[i].segment == seg) return &p->rx[i];
    return NULL;
}

static int on_data(ltp_core_t *c, peer_t *p, const hdr_t *h, uint64_t now)
{
    if (h->srtt) p->peer_srtt_us = h->srtt;
    rxmsg_t *m = rx_find(c, p, h->msg_id, h->segment);
    if (!m) {
        closed_t *e = ring_find(c, p, h->msg_id, h->segment);
        if (e) {
            /* The sender missed our CLOSE: repeat it (once per burst of late data). */
            if (!e->close_pending) { set_close_pending(p, e, 1); c->st[LTP_S_CLOSE_RESENT]++; }
            c->st[LTP_S_LATE_DATA]++;
            return LTP_OK;
        }
        if (p->floor_valid && seq_lt(h->msg_id, p->floor)) {
            e = ring_push(c, p, h->msg_id, h->segment);
            e->count = h->count; e->reason = LTP_CLOSE_STALE;
            set_close_pending(p, e, 1);
            c->st[LTP_S_STALE]++; c->st[LTP_S_CLOSE_STALE]++;
            return LTP_ESTALE;
        }
        for (uint32_t i = 0; i < c->cfg.max_open_per_peer && !m; i++) if (!p->rx[i].used) m = &p->rx[i];
        if (!m) { c->st[LTP_S_RX_TABLE_FULL]++; return LTP_EDROPPED; }
        uint32_t chunk = h->index + 1 < h->count ? h->payload_len
                         : h->count == 1 ? h->total : h->offset / (h->count - 1);
        m->buf = calloc(1, h->total);
        m->bits = calloc((h->count + 63) / 64, sizeof *m->bits);
        if (!m->buf || !m->bits) { rx_free(m); return LTP_ENOMEM; }
        m->used = 1; m->msg_id = h->msg_id; m->segment = h->segment; m->total = h->total;
        m->count = h->count; m->chunk = chunk; m->critical = h->critical; m->first_us = now;
    } else {
        uint32_t chunk = h->index + 1 < h->count ? h->payload_len
                         : h->count == 1 ? h->total : h->offset / (h->count - 1);
        if (h->total != m->total || h->count != m->count || h->critical != m->critical || chunk != m->chunk) {
            c->st[LTP_S_MALFORMED]++;
            return LTP_EMALFORMED;
        }
    }
    if (m->closed) {
        closed_t *e = ring_find(c, p, m->msg_id, m->segment);
        if (e && !e->close_pending) { set_close_pending(p, e, 1); c->st[LTP_S_CLOSE_RESENT]++; }
        c->st[LTP_S_LATE_DATA]++;
        return LTP_OK;
    }
    uint64_t bit = 1ull << (h->index % 64);
    uint64_t *w = &m->bits[h->index / 64];
    int retrans = (h->flags & LTP_F_RETRANSMIT) != 0;
    if (retrans) m->retransmits++;
    if (*w & bit) {
        m->duplicates++;
        c->st[LTP_S_DUPLICATES]++;
    } else {
        *w |= bit;
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
    if (m->ack_pending++ == 0) m->ack_due_us = now + c->cfg.ack_delay_us;
    /* Once the first pass is over the sender is draining; late feedback only slows recovery. */
    if (m->ack_pending >= c->cfg.ack_every || (h->flags & (LTP_F_PASS_DONE | LTP_F_PROBE)) || m->base == m->count)
        m->ack_due_us = now;
    rx_check_close(c, p, m, now);
    return LTP_OK;
}

/* ---------------------------------------------------------------- fair-share rate hint */
/* The receiver watches the aggregate of DATA arriving from all peers through two windows that
 * roll over at arrivals: a short one whose least queueing delay is the standing queue, and a
 * long one whose byte count over its duration is one capacity sample. Every valid DATA counts
 * (duplicates and late ones used the link too). A gap between arrivals longer than the short
 * window drops both: the link was not kept busy. */
static double queue_window_us(const ltp_core_t *c)
{
    /* At least one round trip of the slowest open path, so a window spans a flight of every
     * sender, and several reads, so its least delay is the queue's, not the reader's lateness. */
    double w = MAX((double)c->cfg.hint_window_min_us, 4 * c->read_gap_us);
    for (int pi = 0; pi < c->n_peers; pi++) {
        const peer_t *p = &c->peers[pi];
        for (uint32_t j = 0; j < c->cfg.max_open_per_peer; j++)
            if (p->rx[j].used && !p->rx[j].closed) { w = MAX(w, MIN(p->peer_srtt_us, 1e6)); break; }
    }
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

/* `at` is when the datagram reached the host: the kernel's receive timestamp from a driver that
 * has one, else the time it was read. Datagrams stamped with one instant are one batch: all of
 * them arrived by then and none before the previous instant, so a window that runs from one
 * instant t0 to a later one t1 counts what came in (t0, t1] and batching never inflates it. */
static void cap_on_data(ltp_core_t *c, peer_t *p, const hdr_t *h, size_t len, uint64_t now, uint64_t at)
{
    if (!c->cfg.rate_hint) return;
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
            if (last - c->qw_start_us >= c->qw_len_us) {
                /* The least delay over the last few windows is the standing queue (CoDel's
                 * view): bursts, a late reader and a busy switch only ever add delay. */
                c->q_ring[c->q_n++ % 4] = c->q_win_us;
                c->q_standing_us = c->q_ring[0];
                for (uint32_t i = 1; i < MIN(c->q_n, 4u); i++) c->q_standing_us = MIN(c->q_standing_us, c->q_ring[i]);
                c->q_win_us = q;
                c->qw_start_us = last;
                c->qw_len_us = (uint64_t)queue_window_us(c);
            }
            if (last - c->cw_start_us >= c->cw_len_us) {
                /* n datagrams of a busy link in (t0, t1] arrived over at least n - 1 of their
                 * own transmission times, so leaving one out makes a sample a lower bound.
                 * (Random loss after the link lowers it too; hint_gain makes up for that.) */
                double rate = (double)(c->cw_bytes - c->cw_first_len) / (double)(last - c->cw_start_us);
                c->cap_bw = minmax_running_max(&c->cap_filter, c->cfg.hint_bw_window_us, at, rate);
                c->cw_start_us = last;
                c->cw_bytes = 0;
                c->cw_len_us = (uint64_t)capacity_window_us(c, (double)c->qw_len_us);
            }
        }
    }
    if (!c->est_open) {   /* this batch opens the windows, so it is not counted in them */
        c->est_open = 1;
        c->q_standing_us = 0;   /* the link idled longer than a window: no queue is left */
        c->q_n = 0;
        c->q_win_us = q;
        c->qw_start_us = c->cw_start_us = c->last_arrival_us = at;
        c->cw_bytes = 0;
        c->qw_len_us = (uint64_t)queue_window_us(c);
        c->cw_len_us = (uint64_t)capacity_window_us(c, (double)c->qw_len_us);
        return;
    }
    if (at != c->cw_start_us) {
        if (!c->cw_bytes) c->cw_first_len = len;
        c->cw_bytes += len;
    }
    c->last_arrival_us = at;
    c->q_win_us = MIN(c->q_win_us, q);
}

/* The share to put in an ACK, in kbit/s; 0 (no hint) unless at least two peers are sending. */
static uint32_t rx_hint_kbps(ltp_core_t *c, uint64_t now)
{
    if (!c->cfg.rate_hint || c->cap_bw <= 0) return 0;
    int n_open = 0, n_active = 0;
    for (int pi = 0; pi < c->n_peers; pi++) {
        const peer_t *p = &c->peers[pi];
        for (uint32_t j = 0; j < c->cfg.max_open_per_peer; j++)
            if (p->rx[j].used && !p->rx[j].closed) { n_open++; break; }
    }
    if (n_open < 2) return 0;
    /* Active: an open message and data within 4 queue windows or 8 packets at the fair share. */
    double idle = MAX(4.0 * (double)c->qw_len_us, 8.0 * pkt_wire(c) * n_open / c->cap_bw);
    for (int pi = 0; pi < c->n_peers; pi++) {
        const peer_t *p = &c->peers[pi];
        if ((double)(now - p->last_data_us) > idle) continue;
        for (uint32_t j = 0; j < c->cfg.max_open_per_peer; j++)
            if (p->rx[j].used && !p->rx[j].closed) { n_active++; break; }
    }
    if (n_active < 2) return 0;
    /* Slightly more than the capacity finds any the estimate missed; a standing queue takes
     * rate off until it drains, so the queue stays short whatever the estimate's error. */
    double gain = MAX(c->cfg.hint_gain - c->q_standing_us / c->cfg.hint_drain_us, 0.5);
    double kbps = c->cap_bw * gain / n_active * 8000.0;
    return (uint32_t)MIN(MAX(kbps, 1.0), 4294967295.0);
}

static void on_hint(ltp_core_t *c, peer_t *p, uint32_t kbps, uint64_t now)
{
    if (!c->cfg.rate_hint || !c->cfg.cc) return;
    if (!kbps) { p->hint_until_us = 0; return; }   /* no incast at the receiver: BBR governs */
    p->hint_rate = kbps / 8000.0;
    p->hint_until_us = now + hint_ttl_us(c, p, p->hint_rate);
    c->st[LTP_S_HINTS_RECEIVED]++;
}

static int build_ack(ltp_core_t *c, rxmsg_t *m, uint64_t now, uint8_t *b, size_t cap)
{
    uint32_t max_bits = (uint32_t)MIN((size_t)c->cfg.max_udp_payload_bytes, cap);
    if (max_bits < LTP_ACK_HDR_BYTES) return LTP_EINVAL;
    max_bits = MIN((max_bits - LTP_ACK_HDR_BYTES) * 8u, 0xFFF8u);
    uint32_t bits = 0;
    if (m->base < m->count && m->max_idx >= m->base) bits = MIN(((m->max_idx - m->base + 1) + 7) & ~7u, max_bits);
    put_common(c, b, LTP_T_ACK, 0, m->msg_id, m->segment, 0);
    wr32(b + 20, m->received); wr32(b + 24, m->base); wr32(b + 28, m->echo_ts);
    wr32(b + 32, (uint32_t)MIN(now - m->echo_arrival_us, 0xFFFFFFFFull)); wr32(b + 36, m->echo_seq);
    uint32_t hint = rx_hint_kbps(c, now);
    wr16(b + 40, (uint16_t)bits); wr16(b + 42, 0); wr32(b + 44, hint);
    if (hint) c->st[LTP_S_ACKS_HINTED]++;
    uint8_t *bm = b + LTP_ACK_HDR_BYTES;
    uint32_t nw = (m->count + 63) / 64;
    for (uint32_t j = 0; j < bits; j += 8) {
        uint32_t pos = m->base + j, wi = pos / 64, sh = pos % 64;
        uint64_t v = wi < nw ? m->bits[wi] >> sh : 0;   /* bits past count are never set */
        if (sh > 56 && wi + 1 < nw) v |= m->bits[wi + 1] << (64 - sh);
        bm[j / 8] = (uint8_t)v;
    }
    m->ack_pending = 0;
    return (int)(LTP_ACK_HDR_BYTES + bits / 8);
}

/* ---------------------------------------------------------------- send side */
static txmsg_t *tx_find(const ltp_core_t *c, const peer_t *p, uint32_t msg_id, uint16_t seg)
{
    for (uint32_t i = 0; i < c->cfg.max_tx_per_peer; i++)
        if (p->tx[i].used && p->tx[i].msg_id == msg_id && p->tx[i].segment == seg) return &p->tx[i];
    return NULL;
}

static uint32_t pkt_len(const txmsg_t *m, uint32_t i)
{
    return i + 1 < m->count ? m->chunk : m->total - (m->count - 1) * m->chunk;
}

static void tx_finish(ltp_core_t *c, peer_t *p, txmsg_t *m, int reason, uint64_t now)
{
    /* Whatever is still in flight will never be acknowledged: stop counting it. */
    for (uint32_t i = 0; i < m->count; i++)
        if (m->pk[i].state == PK_INFLIGHT) p->inflight_bytes -= pkt_len(m, i) + LTP_DATA_HDR_BYTES;
    m->inflight_pkts = 0;
    m->n_lost = 0;
    memset(m->lost, 0, ((m->count + 63) / 64) * sizeof *m->lost);
    m->next_first = m->count;
    m->done = 1;
    m->done_reason = reason;
    m->done_us = now;
    if (reason == LTP_SEND_CLOSED) c->st[LTP_S_SENDS_CLOSED]++;
    if (reason == LTP_SEND_ALL_ACKED) c->st[LTP_S_SENDS_ALL_ACKED]++;
}

static void mark_lost(ltp_core_t *c, peer_t *p, txmsg_t *m, uint32_t i)
{
    txpkt_t *k = &m->pk[i];
    if (k->state != PK_INFLIGHT) return;
    k->state = PK_LOST;
    p->inflight_bytes -= pkt_len(m, i) + LTP_DATA_HDR_BYTES;
    m->inflight_pkts--;
    m->lost[i / 64] |= 1ull << (i % 64);
    m->n_lost++;
    if (i < m->lost_cursor) m->lost_cursor = i;
    c->st[LTP_S_LOST_DETECTED]++;
}

static double reo_window(const ltp_core_t *c, const peer_t *p)
{
    return MAX((double)c->cfg.reorder_window_min_us, p->min_rtt_us / 4);
}

/* RACK: a packet is lost once one sent after it was delivered and a reorder window passed. */
static void rack_detect(ltp_core_t *c, peer_t *p, txmsg_t *m, uint64_t now)
{
    m->rack_timer_us = NEVER;
    if (!m->rack_valid) return;
    double reo = reo_window(c, p);
    /* Send times grow with tx_seq, so the scan stops at the first packet not yet overdue. */
    for (uint32_t s = m->scan_seq; s < m->rack_seq; s++) {
        uint32_t i = m->seq_idx[s];
        txpkt_t *k = &m->pk[i];
        if (k->tx_seq == s && k->state == PK_INFLIGHT) {
            double due = (double)k->sent_us + (double)m->rack_rtt_us + reo;
            if (due > (double)now) { m->rack_timer_us = (uint64_t)due; break; }
            mark_lost(c, p, m, i);
        }
        m->scan_seq = s + 1;
    }
}

static void ack_pkt(peer_t *p, txmsg_t *m, uint32_t i, const txpkt_t **newest)
{
    txpkt_t *k = &m->pk[i];
    if (k->state == PK_ACKED || k->state == PK_UNSENT) return;
    if (k->state == PK_INFLIGHT) {
        p->inflight_bytes -= pkt_len(m, i) + LTP_DATA_HDR_BYTES;
        m->inflight_pkts--;
    } else {   /* lost, then delivered after all: no retransmission needed */
        m->lost[i / 64] &= ~(1ull << (i % 64));
        m->n_lost--;
    }
    k->state = PK_ACKED;
    m->n_acked++;
    p->bbr.delivered += pkt_len(m, i) + LTP_DATA_HDR_BYTES;
    if (!*newest || k->delivered > (*newest)->delivered ||
        (k->delivered == (*newest)->delivered && k->sent_us > (*newest)->sent_us))
        *newest = k;
}

static int on_ack(ltp_core_t *c, peer_t *p, const hdr_t *h, uint64_t now)
{
    c->st[LTP_S_ACKS_RECEIVED]++;
    txmsg_t *m = tx_find(c, p, h->msg_id, h->segment);
    if (!m || m->done) { c->st[LTP_S_STRAY_CONTROL]++; return LTP_OK; }
    if (h->base > m->count || h->received > m->count || (uint64_t)h->base + h->bits > (uint64_t)m->count + 7 ||
        h->echo_seq >= m->tx_seq_next) {
        c->st[LTP_S_MALFORMED]++;
        return LTP_EMALFORMED;
    }
    on_hint(c, p, h->hint_kbps, now);
    const txpkt_t *newest = NULL;
    uint32_t acked_before = m->n_acked;
    for (uint32_t i = m->ack_floor; i < h->base; i++) ack_pkt(p, m, i, &newest);
    if (h->base > m->ack_floor) m->ack_floor = h->base;
    for (uint32_t j = 0; j < h->bits; j += 8) {
        uint8_t byte = h->bitmap[j / 8];
        for (uint32_t k = 0; byte && k < 8; k++, byte >>= 1)
            if ((byte & 1) && h->base + j + k < m->count) ack_pkt(p, m, h->base + j + k, &newest);
    }
    /* The echoed timestamp is our own clock's low 32 bits, so RTT needs no clock sync. */
    uint32_t age = (uint32_t)now - h->echo_ts;
    txpkt_t *echo = &m->pk[m->seq_idx[h->echo_seq]];
    if (echo->tx_seq == h->echo_seq && (uint64_t)age <= now && age < 60000000u) {
        double rtt = (double)age - (double)MIN(h->ack_delay, age);
        rtt_sample(c, p, rtt, now);
        if (!m->rack_valid || h->echo_seq >= m->rack_seq) {
            m->rack_valid = 1;
            m->rack_seq = h->echo_seq;
            m->rack_sent_us = now - age;
            m->rack_rtt_us = age;
        }
    }
    if (newest) {
        p->bbr.delivered_us = now;
        if (c->cfg.cc) bbr_on_ack(c, p, newest, now);
    }
    if (m->n_acked > acked_before) m->pto_count = 0;
    if (m->n_acked == m->count) { tx_finish(c, p, m, LTP_SEND_ALL_ACKED, now); return LTP_OK; }
    rack_detect(c, p, m, now);
    return LTP_OK;
}

static int on_close(ltp_core_t *c, peer_t *p, const hdr_t *h, uint64_t now)
{
    txmsg_t *m = tx_find(c, p, h->msg_id, h->segment);
    if (!m || m->done) { c->st[LTP_S_STRAY_CONTROL]++; return LTP_OK; }
    m->peer_received = h->received;
    tx_finish(c, p, m, LTP_SEND_CLOSED, now);
    return LTP_OK;
}

static int build_order(ltp_core_t *c, peer_t *p, txmsg_t *m)
{
    m->order = malloc((size_t)m->count * sizeof *m->order);
    if (!m->order) return LTP_ENOMEM;
    for (uint32_t i = 0; i < m->count; i++) m->order[i] = i;
    if (c->cfg.send_order == LTP_ORDER_RANDOM && m->count > m->critical + 1) {
        /* Seeded per (seed, peer, message) so a run is reproducible; critical packets stay first. */
        uint64_t s = c->cfg.seed ^ ((uint64_t)p->rank << 32) ^ m->msg_id ^ ((uint64_t)m->segment << 48);
        for (uint32_t i = m->count - 1; i > m->critical; i--) {
            uint32_t j = m->critical + (uint32_t)(splitmix64(&s) % (i - m->critical + 1));
            uint32_t t = m->order[i]; m->order[i] = m->order[j]; m->order[j] = t;
        }
    }
    return LTP_OK;
}

int ltp_core_send(ltp_core_t *c, int peer, uint32_t msg_id, uint16_t seg, const void *data,
                  uint32_t len, uint32_t critical_bytes, uint64_t now)
{
    peer_t *p = get_peer(c, peer);
    if (!p || !data || len == 0 || len % 4 || len > c->cfg.max_msg_bytes || critical_bytes > len)
        return LTP_EINVAL;
    if (tx_find(c, p, msg_id, seg)) return LTP_EBUSY;
    txmsg_t *m = NULL;
    for (uint32_t i = 0; i < c->cfg.max_tx_per_peer && !m; i++) if (!p->tx[i].used) m = &p->tx[i];
    if (!m) return LTP_EFULL;
    uint32_t count = (uint32_t)(((uint64_t)len + c->chunk - 1) / c->chunk);
    uint32_t critical = (uint32_t)(((uint64_t)critical_bytes + c->chunk - 1) / c->chunk);
    if (critical > 0xFFFF) return LTP_EINVAL;
    memset(m, 0, sizeof *m);
    m->msg_id = msg_id; m->segment = seg; m->data = data; m->total = len; m->count = count;
    m->chunk = c->chunk; m->critical = critical; m->start_us = now; m->last_sent_us = now;
    m->pk = calloc(count, sizeof *m->pk);
    m->lost = calloc((count + 63) / 64, sizeof *m->lost);
    m->seq_cap = count + count / 4 + 16;
    m->seq_idx = malloc((size_t)m->seq_cap * sizeof *m->seq_idx);
    m->lost_cursor = count;
    m->rack_timer_us = NEVER;
    m->enq_seq = c->n_enqueued++;
    if (!m->pk || !m->lost || !m->seq_idx || build_order(c, p, m) != LTP_OK) { tx_free(m); return LTP_ENOMEM; }
    m->used = 1;
    return LTP_OK;
}

int ltp_core_send_status(ltp_core_t *c, int peer, uint32_t msg_id, uint16_t seg, ltp_send_stats_t *s,
                         uint64_t now)
{
    peer_t *p = get_peer(c, peer);
    if (!p) return LTP_EINVAL;
    txmsg_t *m = tx_find(c, p, msg_id, seg);
    if (!m) return LTP_ENOTFOUND;
    if (s) {
        s->packets = m->packets; s->retransmits = m->retransmits; s->wire_bytes = m->wire_bytes;
        s->acked_packets = m->n_acked; s->count = m->count; s->done = (uint64_t)m->done_reason;
        s->peer_received = m->done_reason == LTP_SEND_ALL_ACKED ? m->count : m->peer_received;
        s->elapsed_us = (m->done ? m->done_us : now) - m->start_us;
        s->srtt_us = p->srtt_us;
        s->pacing_rate_mbps = pacing_rate(c, p, now) * 8.0;
        s->btl_bw_mbps = p->bbr.btl_bw * 8.0;
    }
    return m->done ? 1 : 0;
}

int ltp_core_send_release(ltp_core_t *c, int peer, uint32_t msg_id, uint16_t seg)
{
    peer_t *p = get_peer(c, peer);
    if (!p) return LTP_EINVAL;
    txmsg_t *m = tx_find(c, p, msg_id, seg);
    if (!m) return LTP_ENOTFOUND;
    if (!m->done) {
        tx_finish(c, p, m, LTP_SEND_PENDING, 0);
        c->st[LTP_S_SENDS_CANCELLED]++;
    }
    tx_free(m);
    return LTP_OK;
}

/* Lowest index waiting for retransmission, or count if none. */
static uint32_t lowest_lost(txmsg_t *m)
{
    if (!m->n_lost) return m->count;
    uint32_t nw = (m->count + 63) / 64;
    for (uint32_t w = m->lost_cursor / 64; w < nw; w++) {
        uint64_t bits = m->lost[w];
        if (w == m->lost_cursor / 64) bits &= ~0ull << (m->lost_cursor % 64);
        if (bits) {
            m->lost_cursor = w * 64 + (uint32_t)__builtin_ctzll(bits);
            return m->lost_cursor;
        }
    }
    m->lost_cursor = m->count;
    return m->count;   /* unreachable while n_lost is right */
}

/* Which packet of m goes next, or count if none. Sets *retrans. */
static uint32_t tx_pick(const ltp_core_t *c, txmsg_t *m, int *retrans)
{
    if (m->done) return m->count;
    uint32_t lost = lowest_lost(m);
    int first_left = m->next_first < m->count;
    /* sequential: retransmissions before new data (TCP-like); priority/random: only critical
     * retransmissions jump ahead of the first pass, so the first pass ends as early as possible. */
    int rtx_first = c->cfg.send_order == LTP_ORDER_SEQUENTIAL || lost < m->critical;
    if (lost < m->count && (rtx_first || !first_left)) { *retrans = 1; return lost; }
    if (first_left) { *retrans = 0; return m->order[m->next_first]; }
    return m->count;
}

static int build_data(ltp_core_t *c, peer_t *p, txmsg_t *m, uint32_t i, int retrans, int probe,
                      uint64_t now, uint8_t *b, size_t cap)
{
    uint32_t len = pkt_len(m, i);
    if (cap < LTP_DATA_HDR_BYTES + len) return LTP_EINVAL;
    if (m->tx_seq_next >= m->seq_cap) {
        uint32_t ncap = m->seq_cap * 2;
        uint32_t *n = realloc(m->seq_idx, (size_t)ncap * sizeof *n);
        if (!n) return LTP_ENOMEM;
        m->seq_idx = n;
        m->seq_cap = ncap;
    }
    txpkt_t *k = &m->pk[i];
    if (retrans) {
        m->lost[i / 64] &= ~(1ull << (i % 64));
        m->n_lost--;
        m->retransmits++;
        c->st[LTP_S_RETRANSMITS]++;
    } else {
        m->next_first++;
        m->packets++;
    }
    if (p->inflight_bytes == 0) p->bbr.first_sent_us = p->bbr.delivered_us = now;
    k->state = PK_INFLIGHT;
    k->tx_seq = m->tx_seq_next;
    k->sent_us = now;
    k->delivered = p->bbr.delivered;
    k->delivered_us = p->bbr.delivered_us;
    k->first_sent_us = p->bbr.first_sent_us;
    k->app_limited = p->bbr.app_limited_until != 0;
    m->seq_idx[m->tx_seq_next++] = i;
    m->inflight_pkts++;
    m->last_sent_us = now;
    p->inflight_bytes += len + LTP_DATA_HDR_BYTES;
    uint8_t flags = (uint8_t)((i < m->critical ? LTP_F_CRITICAL : 0) | (retrans ? LTP_F_RETRANSMIT : 0) |
                              (m->next_first >= m->count ? LTP_F_PASS_DONE : 0) | (probe ? LTP_F_PROBE : 0));
    put_common(c, b, LTP_T_DATA, flags, m->msg_id, m->segment, (uint16_t)m->critical);
    wr32(b + 20, i); wr32(b + 24, m->count); wr32(b + 28, i * m->chunk); wr32(b + 32, m->total);
    wr16(b + 36, (uint16_t)len); wr16(b + 38, 0); wr32(b + 40, k->tx_seq); wr32(b + 44, (uint32_t)now);
    wr32(b + 48, (uint32_t)MIN(p->has_rtt ? p->srtt_us : 0, 4e9));
    memcpy(b + LTP_DATA_HDR_BYTES, m->data + (size_t)i * m->chunk, len);
    m->wire_bytes += LTP_DATA_HDR_BYTES + len;
    c->st[LTP_S_DATA_SENT]++;
    return (int)(LTP_DATA_HDR_BYTES + len);
}

static uint64_t pto_us(const ltp_core_t *c, const peer_t *p, const txmsg_t *m)
{
    double base = srtt_or_initial(c, p) + 4 * (p->has_rtt ? p->rttvar_us : c->cfg.initial_rtt_us / 2.0) +
                  c->cfg.ack_delay_us;
    base = MAX(base, (double)c->cfg.pto_min_us);
    return (uint64_t)base << MIN(m->pto_count, c->cfg.pto_max_backoff);
}

static uint64_t pto_deadline(const ltp_core_t *c, const peer_t *p, const txmsg_t *m)
{
    if (m->done || m->inflight_pkts == 0) return NEVER;
    return m->last_sent_us + pto_us(c, p, m);
}

/* Timers that change state: close deadlines, RACK, PTO. */
static void tick(ltp_core_t *c, uint64_t now)
{
    for (int pi = 0; pi < c->n_peers; pi++) {
        peer_t *p = &c->peers[pi];
        for (uint32_t j = 0; j < c->cfg.max_open_per_peer; j++)
            if (p->rx[j].used && !p->rx[j].closed) rx_check_close(c, p, &p->rx[j], now);
        for (uint32_t j = 0; j < c->cfg.max_tx_per_peer; j++) {
            txmsg_t *m = &p->tx[j];
            if (!m->used || m->done) continue;
            if (m->rack_timer_us <= now) rack_detect(c, p, m, now);
            if (pto_deadline(c, p, m) <= now) {
                /* Probe with the oldest packet still in flight; its ACK restarts RACK. */
                for (uint32_t s = m->scan_seq; s < m->tx_seq_next; s++) {
                    uint32_t i = m->seq_idx[s];
                    if (m->pk[i].tx_seq == s && m->pk[i].state == PK_INFLIGHT) {
                        mark_lost(c, p, m, i);
                        break;
                    }
                }
                p->probe_credit++;
                m->pto_count++;
                m->last_sent_us = now;
                c->st[LTP_S_PROBES]++;
            }
        }
    }
}

/* ---------------------------------------------------------------- public entry points */
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
    int rc = parse(&c->cfg, buf, len, &h);
    if (rc) { c->st[LTP_S_MALFORMED]++; return rc; }
    peer_t *p = get_peer(c, peer);
    if (!p || p->rank != h.sender) { c->st[LTP_S_UNKNOWN_PEER]++; return LTP_EPEER; }
    if (h.session != c->cfg.session_id) { c->st[LTP_S_WRONG_SESSION]++; return LTP_ESESSION; }
    switch (h.type) {
    case LTP_T_DATA: cap_on_data(c, p, &h, len, now, MIN(arrival, now)); return on_data(c, p, &h, now);
    case LTP_T_ACK: return on_ack(c, p, &h, now);
    case LTP_T_CLOSE: return on_close(c, p, &h, now);
    case LTP_T_HELLO: p->greeted = 1; p->hello_ack_pending = 1; return LTP_OK;
    case LTP_T_HELLO_ACK:
        if (!p->hello_active && !p->joined) { c->st[LTP_S_STRAY_CONTROL]++; return LTP_OK; }
        p->joined = 1; p->hello_active = 0; return LTP_OK;
    }
    return LTP_EMALFORMED;
}

static int poll_control(ltp_core_t *c, uint64_t now, uint8_t *b, size_t cap, int *peer)
{
    if (cap < LTP_CLOSE_BYTES) return 0;
    for (int pi = 0; pi < c->n_peers; pi++) {
        peer_t *p = &c->peers[pi];
        *peer = pi;
        if (p->hello_ack_pending) {
            p->hello_ack_pending = 0;
            put_common(c, b, LTP_T_HELLO_ACK, 0, 0, 0, 0);
            return LTP_HDR_BYTES;
        }
        if (p->hello_active && now >= p->hello_next_us) {
            p->hello_next_us = now + c->cfg.hello_interval_us;
            put_common(c, b, LTP_T_HELLO, 0, 0, 0, 0);
            return LTP_HDR_BYTES;
        }
        for (uint32_t j = 0; p->n_close_pending && j < c->cfg.closed_ring; j++) {
            closed_t *e = &p->ring[j];
            if (!e->used || !e->close_pending) continue;
            set_close_pending(p, e, e->close_pending - 1u);
            put_common(c, b, LTP_T_CLOSE, 0, e->msg_id, e->segment, 0);
            wr32(b + 20, e->received); wr32(b + 24, e->count); b[28] = e->reason; b[29] = b[30] = b[31] = 0;
            return LTP_CLOSE_BYTES;
        }
        for (uint32_t j = 0; j < c->cfg.max_open_per_peer; j++) {
            rxmsg_t *m = &p->rx[j];
            if (m->used && !m->closed && m->ack_pending && m->ack_due_us <= now) {
                c->st[LTP_S_ACKS_SENT]++;
                return build_ack(c, m, now, b, cap);
            }
        }
    }
    return 0;
}

static void refill(const ltp_core_t *c, peer_t *p, uint64_t now)
{
    double rate = pacing_rate(c, p, now);
    double q = quantum_bytes(c, p, now);
    if (now > p->tokens_us) p->tokens = MIN(q, p->tokens + rate * (double)(now - p->tokens_us));
    p->tokens_us = now;
}

static int paced(const ltp_core_t *c) { return c->cfg.cc || c->cfg.fixed_rate_mbps > 0; }

/* The message of peer p that has a packet to send, or NULL (sets *idx / *retrans). */
static txmsg_t *peer_pick(const ltp_core_t *c, peer_t *p, uint32_t *idx, int *retrans)
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
           (double)(p->inflight_bytes + LTP_DATA_HDR_BYTES + pkt_len(m, idx)) <= cwnd_bytes(c, p, now);
}

/* Serial schedule: the peer whose sendable message was queued first, or -1; sets *mp, *idx and
 * *retrans. Only it may send: when its window is full no later message slips in, since that would
 * put a second flow's window into the same queue (eight windows are the fair schedule again). A
 * message whose every packet is sent and unacknowledged has nothing to send, so the next one
 * starts while its tail is in flight. Peers with nothing to send are marked app-limited (as the
 * fair loop does when it passes them). */
static int serial_head(ltp_core_t *c, txmsg_t **mp, uint32_t *idx, int *retrans)
{
    int head = -1;
    for (int pi = 0; pi < c->n_peers; pi++) {
        peer_t *p = &c->peers[pi];
        uint32_t i;
        int r;
        txmsg_t *m = peer_pick(c, p, &i, &r);
        if (!m) {
            p->bbr.app_limited_until = MAX(p->bbr.delivered + p->inflight_bytes, 1);
            continue;
        }
        if (head >= 0 && m->enq_seq > (*mp)->enq_seq) continue;
        head = pi; *mp = m; *idx = i; *retrans = r;
    }
    return head;
}

/* When peer p, whose window is open, may send: now, or once its pacing tokens have refilled. */
static uint64_t pacing_due(const ltp_core_t *c, peer_t *p, uint64_t now)
{
    if (!paced(c)) return now;
    refill(c, p, now);
    if (p->tokens > 0) return now;
    return now + (uint64_t)ceil((1.0 - p->tokens) / pacing_rate(c, p, now));
}

/* Build packet idx of m for peer pi, which the scheduler chose, and charge it. */
static int emit_data(ltp_core_t *c, int pi, txmsg_t *m, uint32_t idx, int retrans, uint64_t now,
                     uint8_t *b, size_t cap, int *peer)
{
    peer_t *p = &c->peers[pi];
    int probe = p->probe_credit > 0;
    int n = build_data(c, p, m, idx, retrans, probe, now, b, cap);
    if (n < 0) return n;
    if (probe) p->probe_credit--;
    if (paced(c)) p->tokens -= n;
    *peer = pi;
    c->st[LTP_S_TX_DATAGRAMS]++;
    c->st[LTP_S_TX_BYTES] += (uint64_t)n;
    return n;
}

int ltp_core_poll_tx(ltp_core_t *c, uint64_t now, uint8_t *b, size_t cap, int *peer)
{
    if (!c || !b || !peer) return LTP_EINVAL;
    tick(c, now);
    int n = poll_control(c, now, b, cap, peer);
    if (n) { if (n > 0) { c->st[LTP_S_TX_DATAGRAMS]++; c->st[LTP_S_TX_BYTES] += (uint64_t)n; } return n; }
    if (c->cfg.peer_schedule == LTP_SCHED_SERIAL) {
        txmsg_t *m = NULL;
        uint32_t idx = 0;
        int retrans = 0;
        int pi = serial_head(c, &m, &idx, &retrans);
        if (pi < 0) return 0;
        peer_t *p = &c->peers[pi];
        /* The head holds the link while it waits for its window (an ACK or a PTO opens it) or
         * for its pacing tokens. */
        if (!window_open(c, p, m, idx, now) || pacing_due(c, p, now) > now) return 0;
        return emit_data(c, pi, m, idx, retrans, now, b, cap, peer);
    }
    for (int k = 0; k < c->n_peers; k++) {
        int pi = (c->rr + k) % c->n_peers;
        peer_t *p = &c->peers[pi];
        uint32_t idx;
        int retrans;
        txmsg_t *m = peer_pick(c, p, &idx, &retrans);
        if (!m) {
            /* Nothing to send: rate samples taken until this data is delivered are app-limited. */
            p->bbr.app_limited_until = MAX(p->bbr.delivered + p->inflight_bytes, 1);
            continue;
        }
        if (!window_open(c, p, m, idx, now) || pacing_due(c, p, now) > now) continue;
        c->rr = (pi + 1) % c->n_peers;
        return emit_data(c, pi, m, idx, retrans, now, b, cap, peer);
    }
    return 0;
}

uint64_t ltp_core_next_timeout(ltp_core_t *c, uint64_t now)
{
    if (!c) return NEVER;
    uint64_t t = NEVER;
    int head = -1;               /* serial schedule: the peer whose sendable message was queued first */
    txmsg_t *head_m = NULL;
    uint32_t head_idx = 0;
    for (int pi = 0; pi < c->n_peers; pi++) {
        peer_t *p = &c->peers[pi];
        if (p->hello_ack_pending) return now;
        if (p->hello_active) t = MIN(t, p->hello_next_us);
        if (p->n_close_pending) return now;
        for (uint32_t j = 0; j < c->cfg.max_open_per_peer; j++) {
            rxmsg_t *m = &p->rx[j];
            if (!m->used || m->closed) continue;
            if (m->ack_pending) t = MIN(t, m->ack_due_us);
            if (m->pass_end_us) t = MIN(t, m->pass_end_us + grace_us(c, p));
            t = MIN(t, m->first_us + c->cfg.max_wait_us);
        }
        uint32_t idx;
        int retrans;
        txmsg_t *sendable = peer_pick(c, p, &idx, &retrans);
        for (uint32_t j = 0; j < c->cfg.max_tx_per_peer; j++) {
            txmsg_t *m = &p->tx[j];
            if (!m->used || m->done) continue;
            t = MIN(t, m->rack_timer_us);
            t = MIN(t, pto_deadline(c, p, m));
        }
        if (!sendable) continue;
        if (c->cfg.peer_schedule == LTP_SCHED_SERIAL) {   /* only the head may send: see serial_head */
            if (head < 0 || sendable->enq_seq < head_m->enq_seq) { head = pi; head_m = sendable; head_idx = idx; }
        } else if (window_open(c, p, sendable, idx, now)) {
            t = MIN(t, pacing_due(c, p, now));
        }
    }
    if (head >= 0 && window_open(c, &c->peers[head], head_m, head_idx, now))
        t = MIN(t, pacing_due(c, &c->peers[head], now));
    return t < now ? now : t;
}

int ltp_core_hello(ltp_core_t *c, int peer, uint64_t now)
{
    peer_t *p = get_peer(c, peer);
    if (!p) return LTP_EINVAL;
    p->hello_active = 1;
    p->joined = 0;
    p->hello_next_us = now;
    return LTP_OK;
}

int ltp_core_peer_joined(const ltp_core_t *c, int peer)
{
    const peer_t *p = get_peer(c, peer);
    return p ? p->joined : LTP_EINVAL;
}

int ltp_core_peer_greeted(const ltp_core_t *c, int peer)
{
    const peer_t *p = get_peer(c, peer);
    return p ? p->greeted : LTP_EINVAL;
}

int ltp_core_rx_ready(const ltp_core_t *c, int peer, uint32_t msg_id, uint16_t seg)
{
    const peer_t *p = get_peer(c, peer);
    if (!p) return LTP_EINVAL;
    const rxmsg_t *m = rx_find(c, p, msg_id, seg);
    return m && m->closed;
}

double ltp_core_rx_frac(const ltp_core_t *c, int peer, uint32_t msg_id, uint16_t seg)
{
    const peer_t *p = get_peer(c, peer);
    const rxmsg_t *m = p ? rx_find(c, p, msg_id, seg) : NULL;
    return m ? (double)m->received_bytes / m->total : -1.0;
}

double ltp_core_threshold(const ltp_core_t *c, int peer, uint16_t seg)
{
    const peer_t *p = get_peer(c, peer);
    return p ? policy_threshold(c, p, seg) : -1.0;
}

int ltp_core_rx_take(ltp_core_t *c, int peer, uint32_t msg_id, uint16_t seg, void *out, uint32_t cap,
                     uint8_t *mask, ltp_msg_stats_t *s)
{
    peer_t *p = get_peer(c, peer);
    if (!p) return LTP_EINVAL;
    rxmsg_t *m = rx_find(c, p, msg_id, seg);
    if (!m || !m->closed) return LTP_ENOTFOUND;
    if (!out || cap < m->total) return LTP_EINVAL;
    memcpy(out, m->buf, m->total);
    if (mask) {
        for (uint32_t i = 0; i < m->count; i++) {
            uint32_t start = i * m->chunk, len = i + 1 < m->count ? m->chunk : m->total - start;
            memset(mask + start / 4, (int)(m->bits[i / 64] >> (i % 64) & 1), len / 4);
        }
    }
    if (s) {
        s->packets = m->received; s->count = m->count; s->duplicates = m->duplicates;
        s->retransmits = m->retransmits; s->critical_count = m->critical;
        s->received_bytes = m->received_bytes; s->total_bytes = m->total;
        s->close_reason = (uint64_t)m->reason; s->early_closed = m->received < m->count;
        s->elapsed_us = m->close_us - m->first_us;
        s->pass_us = m->pass_end_us ? m->pass_end_us - m->first_us : 0;
        s->threshold_frac = m->threshold; s->peer_srtt_us = p->peer_srtt_us;
    }
    /* Anything older than what the application just took will never be asked for. */
    if (!p->floor_valid || seq_lt(p->floor, msg_id)) { p->floor = msg_id; p->floor_valid = 1; }
    for (uint32_t j = 0; j < c->cfg.max_open_per_peer; j++) {
        rxmsg_t *o = &p->rx[j];
        if (o->used && seq_lt(o->msg_id, p->floor)) {
            if (!o->closed) c->st[LTP_S_STALE]++;
            rx_free(o);
        }
    }
    rx_free(m);
    return LTP_OK;
}

double ltp_core_rx_capacity_mbps(const ltp_core_t *c, double *standing_queue_us)
{
    if (!c) return -1.0;
    if (standing_queue_us) *standing_queue_us = c->q_standing_us;
    return c->cap_bw * 8.0;
}

void ltp_core_stats(const ltp_core_t *c, uint64_t *out, int n)
{
    if (!c || !out) return;
    for (int i = 0; i < n && i < LTP_S__COUNT; i++) out[i] = c->st[i];
}

/* Driver hook: the driver counts its own events in the core's table so stats stay in one place. */
void ltp_core__count(ltp_core_t *c, int stat, uint64_t n);
void ltp_core__count(ltp_core_t *c, int stat, uint64_t n)
{
    if (c && stat >= 0 && stat < LTP_S__COUNT) c->st[stat] += n;
}
