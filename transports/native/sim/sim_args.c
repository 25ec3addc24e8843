/* sim_args.c: ltp_sim's command line (sim_app.h). Every value is checked; a bad one gives one
 * sentence that names the flag and its range. */
#define _POSIX_C_SOURCE 200809L
#include "sim_app.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Every flag, its range when it takes a number (lo > hi: it does not), and its help. The one
 * statement of the ranges: --help prints them and --ranges hands them to the Python driver
 * (harness/simulation/driver.py) as JSON. */
typedef struct { const char *flag; double lo, hi; const char *help; } flag_t;

#define MAX_WORKERS (LTP_RANK_SERVER - 1)   /* ranks are 16 bits; the last is the PS's */
#define TEXT 1, 0                           /* not a number */

static const flag_t FLAGS[] = {
    {"--workers", 1, MAX_WORKERS, "number of workers (default 8)"},
    {"--iterations", 1, 100000, "iterations (default 10)"},
    {"--scenario", TEXT, "push (synchronized pushes, as bench-transport) or bsp (training), default push"},
    {"--reliable", 0, 1, "1: the PS closes gradients only whole (ltp-reliable), default 0"},
    {"--tcp", 0, 1, "1: the TCP reference model (sim/tcp_model.h) instead of the LTP core, default 0"},
    {"--rto-min-us", 1000, 1e8, "the TCP model's least retransmission timeout in us (default 200000, Linux's)"},
    {"--auth", 0, 1, "1: SipHash MAC on every datagram, as the testbed runs (default 1)"},
    {"--bytes", 4, 1e9, "gradient and parameter bytes, a multiple of 4 (required, or --segments; the harness passes the model's)"},
    {"--segments", TEXT, "PLOT: the gradient as per-layer segments BYTES:BOUND,... (bytes sum to --bytes)"},
    {"--compute-us", 0, 1e9, "worker compute per iteration in us (default 0)"},
    {"--update-us", 0, 1e9, "PS update per iteration in us (default 0)"},
    {"--skew-us", 0, 1e9, "push scenario: each worker starts within this long after the release (default 1000)"},
    {"--limit-s", 0.001, 1e6, "virtual seconds an iteration may take before the run is a timeout (default 60)"},
    {"--seed", 0, 1e18, "seed of the network's randomness and the cores' keys (default 1)"},
    {"--bottleneck-mbps", 0.001, 1e7, "rate of the switch port toward the PS in Mbit/s (default 100)"},
    {"--worker-mbps", 0.001, 1e7, "each worker's own link in Mbit/s (default: the bottleneck's)"},
    {"--ps-mbps", 0.001, 1e7, "the PS's own link in Mbit/s (default: the bottleneck's)"},
    {"--queue-pkts", 1, 1e7, "bottleneck drop-tail queue in packets (default 64)"},
    {"--worker-queue-pkts", 1, 1e7, "each worker's own link queue (default 1000, a veth's)"},
    {"--ps-queue-pkts", 1, 1e7, "the PS's own link queue (default 1000)"},
    {"--burst-bytes", 0, 1e9, "bottleneck token bucket allowance, 0: none (Mininet's HTB: 15000)"},
    {"--delay-us", 0, 1e9, "one-way delay per direction in us (default 0)"},
    {"--loss", 0, 1, "uniform loss per packet at every host's ingress, a probability (default 0)"},
    {"--ge", TEXT, "Gilbert-Elliott per packet: P_GB,P_BG,LOSS_GOOD,LOSS_BAD as probabilities"},
    {"--wake-mean-us", 0, 1e9, "threads wake this late on average (exponential), 0: at once (default 0)"},
    {"--rx-poll-us", 0, 1e9, "the PS reads its socket once per this many us, 0: on arrival (default 0)"},
    {"--cfg", TEXT, "core options by name, NAME=VALUE,... (include/ltp.h's option table)"},
    {"--ranges", TEXT, "print every numeric flag's range as JSON and exit"},
    {"--help", TEXT, "this text"},
};

static const flag_t *flag_of(const char *name)
{
    for (size_t i = 0; i < sizeof FLAGS / sizeof *FLAGS; i++)
        if (!strcmp(FLAGS[i].flag, name)) return &FLAGS[i];
    return NULL;
}

void app_usage(FILE *f)
{
    fprintf(f, "usage: ltp_sim [--flag value]...  (JSON lines on stdout)\n");
    for (size_t i = 0; i < sizeof FLAGS / sizeof *FLAGS; i++) {
        const flag_t *g = &FLAGS[i];
        if (g->lo <= g->hi) fprintf(f, "  %-20s %s; %g to %g\n", g->flag, g->help, g->lo, g->hi);
        else fprintf(f, "  %-20s %s\n", g->flag, g->help);
    }
}

void app_ranges(FILE *f)
{
    const char *sep = "{";
    for (size_t i = 0; i < sizeof FLAGS / sizeof *FLAGS; i++) {
        if (FLAGS[i].lo > FLAGS[i].hi) continue;
        fprintf(f, "%s\"%s\": [%.17g, %.17g]", sep, FLAGS[i].flag, FLAGS[i].lo, FLAGS[i].hi);
        sep = ", ";
    }
    fprintf(f, "}\n");
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
    a->seg_bound[0] = 1.0;   /* the size has no default: the model that owns it is the harness's */
    a->skew_us = 1000; a->limit_us = 60000000; a->seed = 1; a->rto_min_us = 200000;
    double btl = 100, wmbps = 0, pmbps = 0, q = 64, wq = 1000, pq = 1000, v;
    int have_segments = 0;
    sim_netcfg_t *c = &a->net;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) return 1;
        if (i + 1 >= argc) { snprintf(err, n, "%s needs a value (see --help).", f); return -1; }
        const char *x = argv[++i];
        const flag_t *g = flag_of(f);   /* NULL for an unknown flag (refused below) */
#define NUM() if (number(f, x, g->lo, g->hi, &v, err, n)) return -1
        if (!strcmp(f, "--workers")) { NUM(); a->workers = (int)v; }
        else if (!strcmp(f, "--iterations")) { NUM(); a->iterations = (int)v; }
        else if (!strcmp(f, "--scenario")) {
            if (strcmp(x, "push") && strcmp(x, "bsp")) { snprintf(err, n, "--scenario must be push or bsp, not '%s'.", x); return -1; }
            a->bsp = !strcmp(x, "bsp");
        }
        else if (!strcmp(f, "--reliable")) { NUM(); a->reliable = (int)v; }
        else if (!strcmp(f, "--auth")) { NUM(); a->auth = (int)v; }
        else if (!strcmp(f, "--tcp")) { NUM(); a->tcp = (int)v; }
        else if (!strcmp(f, "--rto-min-us")) { NUM(); a->rto_min_us = (uint32_t)v; }
        else if (!strcmp(f, "--bytes")) {
            NUM();
            if ((uint32_t)v % 4) { snprintf(err, n, "--bytes must be a multiple of 4, not %s.", x); return -1; }
            a->total_bytes = a->seg_bytes[0] = (uint32_t)v;
        }
        else if (!strcmp(f, "--segments")) { if (parse_segments(a, x, err, n)) return -1; have_segments = 1; }
        else if (!strcmp(f, "--compute-us")) { NUM(); a->compute_us = (uint64_t)v; }
        else if (!strcmp(f, "--update-us")) { NUM(); a->update_us = (uint64_t)v; }
        else if (!strcmp(f, "--skew-us")) { NUM(); a->skew_us = (uint64_t)v; }
        else if (!strcmp(f, "--limit-s")) { NUM(); a->limit_us = (uint64_t)(v * 1e6); }
        else if (!strcmp(f, "--seed")) { NUM(); a->seed = (uint64_t)v; }
        else if (!strcmp(f, "--bottleneck-mbps")) { NUM(); btl = v; }
        else if (!strcmp(f, "--worker-mbps")) { NUM(); wmbps = v; }
        else if (!strcmp(f, "--ps-mbps")) { NUM(); pmbps = v; }
        else if (!strcmp(f, "--queue-pkts")) { NUM(); q = v; }
        else if (!strcmp(f, "--worker-queue-pkts")) { NUM(); wq = v; }
        else if (!strcmp(f, "--ps-queue-pkts")) { NUM(); pq = v; }
        else if (!strcmp(f, "--burst-bytes")) { NUM(); c->burst_bytes = v; }
        else if (!strcmp(f, "--delay-us")) { NUM(); c->delay_us = (uint64_t)v; }
        else if (!strcmp(f, "--loss")) { NUM(); c->loss_good = v; c->p_gb = 0; c->p_bg = 1; }
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
        else if (!strcmp(f, "--wake-mean-us")) { NUM(); c->wake_mean_us = (uint64_t)v; }
        else if (!strcmp(f, "--rx-poll-us")) { NUM(); c->rx_poll_us = (uint64_t)v; }
        else if (!strcmp(f, "--cfg")) { if (parse_cfg(a, x, err, n)) return -1; }
        else { snprintf(err, n, "unknown flag '%s' (see --help).", f); return -1; }
#undef NUM
    }
    if (!a->total_bytes) { snprintf(err, n, "--bytes (or --segments) is required: the gradient's size in bytes."); return -1; }
    if (a->tcp && have_segments && a->n_segs > 1) { snprintf(err, n, "--segments is PLOT's; the TCP model sends one stream."); return -1; }
    c->n_workers = a->workers;
    c->bottleneck_mbps = btl;
    c->worker_mbps = wmbps > 0 ? wmbps : btl;
    c->ps_mbps = pmbps > 0 ? pmbps : btl;
    c->queue_pkts = (int)q; c->worker_queue_pkts = (int)wq; c->ps_queue_pkts = (int)pq;
    c->seed = a->seed;
    return 0;
}
