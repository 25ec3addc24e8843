/* ltp_sim.c: the LTP/PLOT core (the same src/ sources as the UDP transport) over the discrete-event
 * network of sim_net.h, one parameter server and N workers, printing tidy JSON lines.
 *
 *   build/ltp_sim --workers 1024 --bottleneck-mbps 100000 --queue-pkts 256 --iterations 5
 *   build/ltp_sim --help
 *
 * Iteration k: the PS broadcasts the parameters (one reliable message per worker, the core's
 * serial schedule through the PS's own link); each worker takes them and computes for
 * compute_us; then it pushes its gradient (one message, or one per layer with --segments):
 *   --scenario bsp   each worker pushes as soon as it has computed (training);
 *   --scenario push  the PS waits for its broadcast and for every worker to be ready, then
 *                    releases them all at one instant T (each within --skew-us of it), as
 *                    `invoke bench-transport`'s synchronized pushes (harness/bench/node.py).
 * The PS gathers: a worker's gradient is in when every one of its segments closed (whole, early,
 * or by max-wait); then the PS updates for update_us. Output, one JSON object per line:
 *   {"table": "push", ...}       one row per worker per iteration
 *   {"table": "iteration", ...}  one row per iteration
 *   {"table": "summary", ...}    the run: status, counters, the simulator's own cost
 * With --tcp 1 the endpoints are the TCP reference model (tcp_model.h) instead of the core.
 * A bad argument prints one sentence on stderr and exits with status 2.
 */
#define _POSIX_C_SOURCE 200809L
#include "ltp_internal.h"   /* WIRE_* offsets of the wire layout */
#include "sim_net.h"
#include "sim_app.h"
#include "tcp_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int trace_rank = -2;

static int ops_input(void *ep, int slot, const uint8_t *b, size_t len, uint64_t now)
{
    ltp_core_t *c = ep;
    if (trace_rank > -2 && c->self_rank == LTP_RANK_SERVER && len >= LTP_HDR_BYTES
        && b[WIRE_TYPE] == LTP_T_DATA)
        fprintf(stderr, "psin t=%llu len=%zu\n", (unsigned long long)now, len);
    return ltp_core_input(ep, slot, b, len, now);
}

/* LTP_SIM_TRACE=RANK: one line on stderr per DATA that worker RANK sends (-1: every worker), with
 * its rate model's state (a diagnostic of the rate control; docs/simulation.md, "Tracing the rate control"). */

static void trace_send(ltp_core_t *c, int slot, const uint8_t *b, uint64_t now)
{
    peer_t *p = &c->peers[slot];
    const bbr_t *m = &p->fl->bbr;
    fprintf(stderr, "trace r=%d t=%llu rtx=%d inflight=%llu cwnd=%.0f pace_mbps=%.1f hint=%d hint_mbps=%.1f "
            "btl_mbps=%.1f mode=%d gain=%.2f min_rtt=%.1f srtt=%.1f tokens=%.0f\n",
            c->self_rank, (unsigned long long)now, (b[WIRE_FLAGS] & LTP_F_RETRANSMIT) != 0,
            (unsigned long long)p->fl->inflight_bytes, cwnd_bytes(c, p, now), pacing_rate(c, p, now) * 8,
            p->hint_until_us > now, p->hint_rate * 8, m->btl_bw * 8, m->mode, m->pacing_gain,
            p->fl->min_rtt_us, p->srtt_us, p->fl->tokens);
}

static int ops_poll(void *ep, uint64_t now, uint8_t *b, size_t cap, int *slot)
{
    int n = ltp_core_poll_tx(ep, now, b, cap, slot);
    if (trace_rank == -2) trace_rank = getenv("LTP_SIM_TRACE") ? atoi(getenv("LTP_SIM_TRACE")) : -3;
    ltp_core_t *c = ep;
    static uint64_t ps_traced;
    if (trace_rank > -2 && c->self_rank == LTP_RANK_SERVER && now >= ps_traced + 200) {
        ps_traced = now;
        fprintf(stderr, "pstrace t=%llu cap_mbps=%.1f q_standing=%.1f open=%u hint_mbps=%.1f qw=%llu\n",
                (unsigned long long)now, c->cap_bw * 8, c->q_standing_us, c->n_open_peers,
                hint_kbps(c, now) / 1000.0, (unsigned long long)c->qw_len_us);
    }
    if (n > 0 && trace_rank > -2 && c->self_rank != LTP_RANK_SERVER && b[WIRE_TYPE] == LTP_T_DATA &&
        (trace_rank < 0 || c->self_rank == trace_rank))
        trace_send(c, *slot, b, now);
    return n;
}

static uint64_t ops_timeout(void *ep, uint64_t now) { return ltp_core_next_timeout(ep, now); }

static int ops_classify(const uint8_t *b, size_t len)
{
    if (len < LTP_HDR_BYTES || b[WIRE_TYPE] != LTP_T_DATA) return 0;
    return SIM_PKT_DATA | ((b[WIRE_FLAGS] & LTP_F_RETRANSMIT) ? SIM_PKT_RTX : 0);
}

static const sim_ops_t LTP_OPS = {ops_input, ops_poll, ops_timeout, ops_classify};

/* ---------------------------------------------------------------- the application's view */
static int ltp_send(void *ep, int peer, uint32_t msg, uint16_t seg, const void *d, uint32_t len, uint64_t now)
{
    return ltp_core_send(ep, peer, msg, seg, d, len, 0, now);
}

static int ltp_done(void *ep, int peer, uint32_t msg, uint16_t seg, uint64_t now, uint64_t *rtx)
{
    ltp_send_stats_t st;
    int rc = ltp_core_send_status(ep, peer, msg, seg, &st, now);
    *rtx = rc == 1 ? st.retransmits : 0;
    return rc;
}

static void ltp_release(void *ep, int peer, uint32_t msg, uint16_t seg) { ltp_core_send_release(ep, peer, msg, seg); }
static int ltp_ready(void *ep, int peer, uint32_t msg, uint16_t seg) { return ltp_core_rx_ready(ep, peer, msg, seg); }

static void ltp_take(void *ep, int peer, uint32_t msg, uint16_t seg, void *buf, uint32_t cap, app_take_t *out)
{
    ltp_msg_stats_t st;
    memset(&st, 0, sizeof st);
    ltp_core_rx_take(ep, peer, msg, seg, buf, cap, NULL, &st);
    *out = (app_take_t){st.received_bytes, st.total_bytes, st.close_reason == LTP_CLOSE_EARLY,
                        st.close_reason == LTP_CLOSE_MAX_WAIT};
}

/* Every message lands in one shared buffer: the content is not looked at, and N copies of a
 * gradient in the core's own buffers would cost N x 437 kB. */
static void ltp_post(void *ep, int peer, uint32_t msg, uint16_t seg, void *buf, uint32_t cap)
{
    ltp_core_rx_post(ep, peer, msg, seg, buf, cap);
}

static uint64_t ltp_progress(void *ep)
{
    uint64_t st[LTP_S__COUNT];
    ltp_core_stats(ep, st, LTP_S__COUNT);
    return st[LTP_S_SENDS_CLOSED] + st[LTP_S_SENDS_ALL_ACKED] + st[LTP_S_SENDS_CANCELLED] + st[LTP_S_CLOSE_COMPLETE] +
           st[LTP_S_CLOSE_EARLY] + st[LTP_S_CLOSE_MAX_WAIT] + st[LTP_S_CLOSE_STALE];
}

static int ltp_join(void *ep, uint64_t now) { return ltp_core_hello(ep, 0, now); }
static int ltp_joined(void *ep) { return ltp_core_peer_joined(ep, 0) == 1; }

static const app_transport_t LTP_APP = {ltp_send, ltp_done, ltp_release, ltp_ready, ltp_take, ltp_post, ltp_progress,
                                        ltp_join, ltp_joined};

static int tcp_app_send(void *ep, int peer, uint32_t msg, uint16_t seg, const void *d, uint32_t len, uint64_t now)
{
    (void)seg;
    return tcp_send(ep, peer, msg, d, len, now);
}

static int tcp_app_done(void *ep, int peer, uint32_t msg, uint16_t seg, uint64_t now, uint64_t *rtx)
{
    (void)seg; (void)now;
    *rtx = 0;
    return tcp_send_done(ep, peer, msg, rtx);
}

static void tcp_app_release(void *ep, int peer, uint32_t msg, uint16_t seg) { (void)ep; (void)peer; (void)msg; (void)seg; }
static int tcp_app_ready(void *ep, int peer, uint32_t msg, uint16_t seg) { (void)seg; return tcp_rx_ready(ep, peer, msg); }

static void tcp_app_take(void *ep, int peer, uint32_t msg, uint16_t seg, void *buf, uint32_t cap, app_take_t *out)
{
    (void)ep; (void)peer; (void)msg; (void)seg; (void)buf;
    *out = (app_take_t){cap, cap, 0, 0};   /* TCP delivers whole messages */
}

static void tcp_app_post(void *ep, int peer, uint32_t msg, uint16_t seg, void *buf, uint32_t cap)
{
    (void)ep; (void)peer; (void)msg; (void)seg; (void)buf; (void)cap;
}

static uint64_t tcp_app_progress(void *ep) { return tcp_progress(ep); }

static const app_transport_t TCP_APP = {tcp_app_send, tcp_app_done, tcp_app_release, tcp_app_ready, tcp_app_take,
                                        tcp_app_post, tcp_app_progress, NULL, NULL};

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The process's own peak resident memory (VmHWM: unlike getrusage's ru_maxrss it starts afresh
 * at exec, so a large parent does not count). */
static double peak_rss_mb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = atof(line + 6);
    if (f) fclose(f);
    return kb / 1024.0;
}

static int make_cores(const app_args_t *a, ltp_core_t **cores, char *err, size_t n)
{
    ltp_config_t ps, w;
    ltp_config_default(&ps);
    for (int k = 0; k < a->n_cfg; k++) {
        if (ltp_config_set(&ps, a->cfg_name[k], a->cfg_value[k]) != 0) {
            snprintf(err, n, "core option %s=%g is unknown or out of range.", a->cfg_name[k], a->cfg_value[k]);
            return -1;
        }
    }
    ps.auth = (uint32_t)a->auth;
    ps.max_msg_bytes = a->total_bytes;
    if (a->n_segs > 1) {   /* PLOT sizes its tables by its layer count (transports/plot.py) */
        ps.max_tx_per_peer = (uint32_t)(2 * a->n_segs > 4 ? 2 * a->n_segs : 4);
        ps.max_open_per_peer = (uint32_t)(4 * a->n_segs > 4 ? 4 * a->n_segs : 4);
        ps.loss_weight = 0;
        ps.rtt_weight = 0;
    }
    w = ps;
    w.max_peers = 1;   /* a worker has one peer, the PS: its tables for 64 only crowd the cache */
    ps.max_peers = (uint32_t)a->workers;
    if (a->reliable) ps.threshold_min = ps.threshold_max = 1.0;
    char why[200];
    if (ltp_config_explain(&ps, why, sizeof why) != 0) { snprintf(err, n, "core configuration: %s.", why); return -1; }
    uint8_t key[LTP_KEY_BYTES];
    for (unsigned i = 0; i < LTP_KEY_BYTES; i++) key[i] = (uint8_t)(a->seed * 31 + i);
    cores[0] = ltp_core_new(&ps, LTP_RANK_SERVER);
    for (int r = 0; r < a->workers; r++) {
        cores[r + 1] = ltp_core_new(&w, (uint16_t)r);
        if (!cores[r + 1] || ltp_core_add_peer(cores[r + 1], LTP_RANK_SERVER) < 0 ||
            ltp_core_add_peer(cores[0], (uint16_t)r) < 0) {
            snprintf(err, n, "could not create the core of worker %d.", r);
            return -1;
        }
        ltp_core_set_policy(cores[r + 1], 0, 1.0, 1.0);   /* parameters arrive whole */
        if (a->auth) {   /* one key per pair, as the harness hands them over */
            key[0] = (uint8_t)r; key[1] = (uint8_t)(r >> 8);
            ltp_core_set_peer_key(cores[r + 1], 0, key, sizeof key);
            ltp_core_set_peer_key(cores[0], r, key, sizeof key);
        }
    }
    for (int s = 0; s < a->n_segs && a->n_segs > 1; s++)   /* PLOT: each layer at its bound */
        ltp_core_set_policy(cores[0], (uint16_t)(s + 1), a->seg_bound[s], a->seg_bound[s]);
    return 0;
}

int main(int argc, char **argv)
{
    app_args_t a;
    char err[256];
    if (argc == 2 && !strcmp(argv[1], "--ranges")) { app_ranges(stdout); return 0; }
    int rc = app_parse_args(&a, argc, argv, err, sizeof err);
    if (rc == 1) { app_usage(stdout); return 0; }
    if (rc) { fprintf(stderr, "ltp_sim: %s\n", err); return 2; }
    void **eps = calloc((size_t)a.workers + 1, sizeof *eps);
    if (!eps) { fprintf(stderr, "ltp_sim: out of memory.\n"); return 2; }
    if (a.tcp) {
        for (int k = 0; k <= a.workers; k++) eps[k] = tcp_new(k ? 1 : a.workers, a.rto_min_us);
    } else if (make_cores(&a, (ltp_core_t **)eps, err, sizeof err)) {
        fprintf(stderr, "ltp_sim: %s\n", err);
        return 2;
    }
    sim_netcfg_t nc = a.net;
    sim_t *s = sim_new(&nc, a.tcp ? &TCP_OPS : &LTP_OPS, eps, err, sizeof err);
    if (!s) { fprintf(stderr, "ltp_sim: %s\n", err); return 2; }
    double t0 = wall_s();
    app_t *app = app_new(&a, s, a.tcp ? &TCP_APP : &LTP_APP, eps);
    int ok = app_run(app, stdout);
    double wall = wall_s() - t0;
    app_summary(app, stdout, ok, wall, peak_rss_mb());
    app_free(app);
    sim_free(s);
    for (int k = 0; k <= a.workers; k++) {
        if (a.tcp) tcp_free(eps[k]);
        else ltp_core_free(eps[k]);
    }
    free(eps);
    return ok ? 0 : 1;
}
