/* sim_args.c: ltp_sim's command line (sim_app.h). Every value is checked; a bad one gives one
 * sentence that names the flag and its range. */
#define _POSIX_C_SOURCE 200809L
#include "sim_app.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const char *flag; const char *help; } flag_t;

static const flag_t FLAGS[] = {
    {"--workers", "number of workers, 1 to 65534 (default 8)"},
    {"--iterations", "iterations, 1 to 100000 (default 10)"},
    {"--scenario", "push (synchronized pushes, as bench-transport) or bsp (training), default push"},
    {"--reliable", "1: the PS closes gradients only whole (ltp-reliable), default 0"},
    {"--tcp", "1: the TCP reference model (sim/tcp_model.h) instead of the LTP core, default 0"},
    {"--rto-min-us", "the TCP model's least retransmission timeout in us (default 200000, Linux's)"},
    {"--auth", "1: SipHash MAC on every datagram, as the testbed runs (default 1)"},
    {"--bytes", "gradient and parameter bytes, a multiple of 4 (default 437544, the MLP)"},
    {"--segments", "PLOT: the gradient as per-layer segments BYTES:BOUND,... (bytes sum to --bytes)"},
    {"--compute-us", "worker compute per iteration in us (default 0)"},
    {"--update-us", "PS update per iteration in us (default 0)"},
    {"--skew-us", "push scenario: each worker starts within this long after the release (default 1000)"},
    {"--limit-s", "virtual seconds an iteration may take before the run is a timeout (default 60)"},
    {"--seed", "seed of the network's randomness and the cores' keys (default 1)"},
    {"--bottleneck-mbps", "rate of the switch port toward the PS in Mbit/s (default 100)"},
    {"--worker-mbps", "each worker's own link in Mbit/s (default: the bottleneck's)"},
    {"--ps-mbps", "the PS's own link in Mbit/s (default: the bottleneck's)"},
    {"--queue-pkts", "bottleneck drop-tail queue in packets (default 64)"},
    {"--worker-queue-pkts", "each worker's own link queue (default 1000, a veth's)"},
    {"--ps-queue-pkts", "the PS's own link queue (default 1000)"},
    {"--burst-bytes", "bottleneck token bucket allowance, 0: none (Mininet's HTB: 15000)"},
    {"--delay-us", "one-way delay per direction in us (default 0)"},
    {"--loss", "uniform loss per packet at every host's ingress, probability 0 to 1 (default 0)"},
    {"--ge", "Gilbert-Elliott per packet: P_GB,P_BG,LOSS_GOOD,LOSS_BAD as probabilities"},
    {"--wake-mean-us", "threads wake this late on average (exponential), 0: at once (default 0)"},
    {"--rx-poll-us", "the PS reads its socket once per this many us, 0: on arrival (default 0)"},
    {"--cfg", "core options by name, NAME=VALUE,... (include/ltp.h's option table)"},
    {"--help", "this text"},
};

void app_usage(FILE *f)
{
    fprintf(f, "usage: ltp_sim [--flag value]...  (JSON lines on stdout)\n");
    for (size_t i = 0; i < sizeof FLAGS / sizeof *FLAGS; i++) fprintf(f, "  %-20s %s\n", FLAGS[i].flag, FLAGS[i].help);
}

/* A number in [lo, hi] from text; -1 with a sentence in err otherwise. */
static int number(const char *flag, const char *text, double lo, double hi, double *out, char *err, size_t n)
{
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !isfinite(v) || v < lo || v > hi) {
        snprintf(err, n, "%s must be a number from %g to %g, not '%s'.", flag, lo, hi, text);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_segments(app_args_t *a, const char *text, char *err, size_t n)
{
    char buf[4096], *save = NULL;
    snprintf(buf, sizeof buf, "%s", text);
    a->n_segs = 0;
    a->total_bytes = 0;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(item, ':');
        double bytes, bound;
        if (a->n_segs == SIM_MAX_SEGS) { snprintf(err, n, "--segments takes at most %d segments.", SIM_MAX_SEGS); return -1; }
        if (!colon) { snprintf(err, n, "--segments items are BYTES:BOUND, not '%s'.", item); return -1; }
        *colon = 0;
        if (number("--segments bytes", item, 4, 1e9, &bytes, err, n) || number("--segments bound", colon + 1, 0, 1, &bound, err, n))
            return -1;
        if ((uint32_t)bytes % 4) { snprintf(err, n, "--segments bytes must be multiples of 4, not %s.", item); return -1; }
        a->seg_bytes[a->n_segs] = (uint32_t)bytes;
        a->seg_bound[a->n_segs++] = bound;
        a->total_bytes += (uint32_t)bytes;
    }
    if (!a->n_segs) { snprintf(err, n, "--segments names no segment."); return -1; }
    return 0;
}

static int parse_cfg(app_args_t *a, const char *text, char *err, size_t n)
{
    char buf[2048], *save = NULL;
    snprintf(buf, sizeof buf, "%s", text);
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq || a->n_cfg == SIM_MAX_CFG) { snprintf(err, n, "--cfg items are NAME=VALUE (at most %d), not '%s'.", SIM_MAX_CFG, kv); return -1; }
        *eq = 0;
        snprintf(a->cfg_name[a->n_cfg], sizeof a->cfg_name[0], "%s", kv);
        if (number("--cfg value", eq + 1, -1e18, 1e19, &a->cfg_value[a->n_cfg], err, n)) return -1;
        a->n_cfg++;
    }
    return 0;
}

int app_parse_args(app_args_t *a, int argc, char **argv, char *err, size_t n)
{
    memset(a, 0, sizeof *a);
    a->workers = 8; a->iterations = 10; a->auth = 1; a->n_segs = 1;
    a->total_bytes = a->seg_bytes[0] = 437544; a->seg_bound[0] = 1.0;
    a->skew_us = 1000; a->limit_us = 60000000; a->seed = 1; a->rto_min_us = 200000;
    double btl = 100, wmbps = 0, pmbps = 0, q = 64, wq = 1000, pq = 1000, v;
    int have_segments = 0;
    sim_netcfg_t *c = &a->net;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) return 1;
        if (i + 1 >= argc) { snprintf(err, n, "%s needs a value (see --help).", f); return -1; }
        const char *x = argv[++i];
#define NUM(lo, hi) if (number(f, x, lo, hi, &v, err, n)) return -1
        if (!strcmp(f, "--workers")) { NUM(1, 65534); a->workers = (int)v; }
        else if (!strcmp(f, "--iterations")) { NUM(1, 100000); a->iterations = (int)v; }
        else if (!strcmp(f, "--scenario")) {
            if (strcmp(x, "push") && strcmp(x, "bsp")) { snprintf(err, n, "--scenario must be push or bsp, not '%s'.", x); return -1; }
            a->bsp = !strcmp(x, "bsp");
        }
        else if (!strcmp(f, "--reliable")) { NUM(0, 1); a->reliable = (int)v; }
        else if (!strcmp(f, "--auth")) { NUM(0, 1); a->auth = (int)v; }
        else if (!strcmp(f, "--tcp")) { NUM(0, 1); a->tcp = (int)v; }
        else if (!strcmp(f, "--rto-min-us")) { NUM(1000, 1e8); a->rto_min_us = (uint32_t)v; }
        else if (!strcmp(f, "--bytes")) {
            NUM(4, 1e9);
            if ((uint32_t)v % 4) { snprintf(err, n, "--bytes must be a multiple of 4, not %s.", x); return -1; }
            a->total_bytes = a->seg_bytes[0] = (uint32_t)v;
        }
        else if (!strcmp(f, "--segments")) { if (parse_segments(a, x, err, n)) return -1; have_segments = 1; }
        else if (!strcmp(f, "--compute-us")) { NUM(0, 1e9); a->compute_us = (uint64_t)v; }
        else if (!strcmp(f, "--update-us")) { NUM(0, 1e9); a->update_us = (uint64_t)v; }
        else if (!strcmp(f, "--skew-us")) { NUM(0, 1e9); a->skew_us = (uint64_t)v; }
        else if (!strcmp(f, "--limit-s")) { NUM(0.001, 1e6); a->limit_us = (uint64_t)(v * 1e6); }
        else if (!strcmp(f, "--seed")) { NUM(0, 1e18); a->seed = (uint64_t)v; }
        else if (!strcmp(f, "--bottleneck-mbps")) { NUM(0.001, 1e7); btl = v; }
        else if (!strcmp(f, "--worker-mbps")) { NUM(0.001, 1e7); wmbps = v; }
        else if (!strcmp(f, "--ps-mbps")) { NUM(0.001, 1e7); pmbps = v; }
        else if (!strcmp(f, "--queue-pkts")) { NUM(1, 1e7); q = v; }
        else if (!strcmp(f, "--worker-queue-pkts")) { NUM(1, 1e7); wq = v; }
        else if (!strcmp(f, "--ps-queue-pkts")) { NUM(1, 1e7); pq = v; }
        else if (!strcmp(f, "--burst-bytes")) { NUM(0, 1e9); c->burst_bytes = v; }
        else if (!strcmp(f, "--delay-us")) { NUM(0, 1e9); c->delay_us = (uint64_t)v; }
        else if (!strcmp(f, "--loss")) { NUM(0, 1); c->loss_good = v; c->p_gb = 0; c->p_bg = 1; }
        else if (!strcmp(f, "--ge")) {
            double p[4];
            if (sscanf(x, "%lf,%lf,%lf,%lf", &p[0], &p[1], &p[2], &p[3]) != 4) {
                snprintf(err, n, "--ge takes P_GB,P_BG,LOSS_GOOD,LOSS_BAD, not '%s'.", x);
                return -1;
            }
            for (int k = 0; k < 4; k++)
                if (!(p[k] >= 0 && p[k] <= 1)) { snprintf(err, n, "--ge probabilities must be from 0 to 1, not '%s'.", x); return -1; }
            c->p_gb = p[0]; c->p_bg = p[1]; c->loss_good = p[2]; c->loss_bad = p[3];
        }
        else if (!strcmp(f, "--wake-mean-us")) { NUM(0, 1e9); c->wake_mean_us = (uint64_t)v; }
        else if (!strcmp(f, "--rx-poll-us")) { NUM(0, 1e9); c->rx_poll_us = (uint64_t)v; }
        else if (!strcmp(f, "--cfg")) { if (parse_cfg(a, x, err, n)) return -1; }
        else { snprintf(err, n, "unknown flag '%s' (see --help).", f); return -1; }
#undef NUM
    }
    if (a->tcp && have_segments && a->n_segs > 1) { snprintf(err, n, "--segments is PLOT's; the TCP model sends one stream."); return -1; }
    c->n_workers = a->workers;
    c->bottleneck_mbps = btl;
    c->worker_mbps = wmbps > 0 ? wmbps : btl;
    c->ps_mbps = pmbps > 0 ? pmbps : btl;
    c->queue_pkts = (int)q; c->worker_queue_pkts = (int)wq; c->ps_queue_pkts = (int)pq;
    c->seed = a->seed;
    return 0;
}
