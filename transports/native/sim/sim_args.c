/* sim_args.c: ltp_sim's command line (sim_app.h). Every value is checked; a bad one gives one
 * sentence that names the flag and its range. */
#define _POSIX_C_SOURCE 200809L
#include "sim_app.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Every flag: its range when it takes a number (lo > hi: it does not), where its number goes
 * (a field of app_args_t of type `type` at offset `at`; BY_HAND: parse_by_hand), and its help.
 * The one statement of the ranges and the one place a flag is tied to its field: --help prints
 * the ranges and --ranges hands them to the Python driver (harness/simulation/driver.py) as JSON. */
typedef enum { NO_FIELD, INT_T, U32_T, U64_T, DOUBLE_T } field_type_t;
typedef struct { const char *flag; double lo, hi; field_type_t type; size_t at; const char *help; } flag_t;

#define MAX_WORKERS (LTP_RANK_SERVER - 1)   /* ranks are 16 bits; the last is the PS's */
#define BY_HAND NO_FIELD, 0
#define TEXT 1, 0, BY_HAND                  /* not a number */
#define INT_AT(field) INT_T, offsetof(app_args_t, field)
#define U32_AT(field) U32_T, offsetof(app_args_t, field)
#define U64_AT(field) U64_T, offsetof(app_args_t, field)
#define DOUBLE_AT(field) DOUBLE_T, offsetof(app_args_t, field)

static const flag_t FLAGS[] = {
    {"--workers", 1, MAX_WORKERS, INT_AT(workers), "number of workers (default 8)"},
    {"--iterations", 1, 100000, INT_AT(iterations), "iterations (default 10)"},
    {"--scenario", TEXT, "push (synchronized pushes, as bench-transport) or bsp (training), default push"},
    {"--reliable", 0, 1, INT_AT(reliable), "1: the PS closes gradients only whole (ltp-reliable), default 0"},
    {"--tcp", 0, 1, INT_AT(tcp), "1: the TCP reference model (sim/tcp_model.h) instead of the LTP core, default 0"},
    {"--rto-min-us", 1000, 1e8, U32_AT(rto_min_us), "the TCP model's least retransmission timeout in us (default 200000, Linux's)"},
    {"--auth", 0, 1, INT_AT(auth), "1: a MAC on every datagram, as the testbed runs (default 1; its algorithm: --cfg mac=N)"},
    {"--bytes", 4, 1e9, BY_HAND, "gradient and parameter bytes, a multiple of 4 (required, or --segments; the harness passes the model's)"},
    {"--segments", TEXT, "PLOT: the gradient as per-layer segments BYTES:BOUND,... (bytes sum to --bytes)"},
    {"--compute-us", 0, 1e9, U64_AT(compute_us), "worker compute per iteration in us (default 0)"},
    {"--update-us", 0, 1e9, U64_AT(update_us), "PS update per iteration in us (default 0)"},
    {"--skew-us", 0, 1e9, U64_AT(skew_us), "push scenario: each worker starts within this long after the release (default 1000)"},
    {"--limit-s", 0.001, 1e6, BY_HAND, "virtual seconds an iteration may take before the run is a timeout (default 60)"},
    {"--seed", 0, 1e18, U64_AT(seed), "seed of the network's randomness and the cores' keys (default 1)"},
    {"--bottleneck-mbps", 0.001, 1e7, DOUBLE_AT(net.bottleneck_mbps), "rate of the switch port toward the PS in Mbit/s (default 100)"},
    {"--worker-mbps", 0.001, 1e7, DOUBLE_AT(net.worker_mbps), "each worker's own link in Mbit/s (default: the bottleneck's)"},
    {"--ps-mbps", 0.001, 1e7, DOUBLE_AT(net.ps_mbps), "the PS's own link in Mbit/s (default: the bottleneck's)"},
    {"--queue-pkts", 1, 1e7, INT_AT(net.queue_pkts), "bottleneck drop-tail queue in packets (default 64)"},
    {"--worker-queue-pkts", 1, 1e7, INT_AT(net.worker_queue_pkts), "each worker's own link queue (default 1000, a veth's)"},
    {"--ps-queue-pkts", 1, 1e7, INT_AT(net.ps_queue_pkts), "the PS's own link queue (default 1000)"},
    {"--burst-bytes", 0, 1e9, DOUBLE_AT(net.burst_bytes), "bottleneck token bucket allowance, 0: none (Mininet's HTB: 15000)"},
    {"--delay-us", 0, 1e9, U64_AT(net.delay_us), "one-way delay per direction in us (default 0)"},
    {"--loss", 0, 1, BY_HAND, "uniform loss per packet at every host's ingress, a probability (default 0)"},
    {"--ge", TEXT, "Gilbert-Elliott per packet: P_GB,P_BG,LOSS_GOOD,LOSS_BAD as probabilities"},
    {"--wake-mean-us", 0, 1e9, U64_AT(net.wake_mean_us), "threads wake this late on average (exponential), 0: at once (default 0)"},
    {"--rx-poll-us", 0, 1e9, U64_AT(net.rx_poll_us), "the PS reads its socket once per this many us, 0: on arrival (default 0)"},
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

static int parse_ge(sim_netcfg_t *c, const char *text, char *err, size_t n)
{
    double p[4];
    if (sscanf(text, "%lf,%lf,%lf,%lf", &p[0], &p[1], &p[2], &p[3]) != 4) {
        snprintf(err, n, "--ge takes P_GB,P_BG,LOSS_GOOD,LOSS_BAD, not '%s'.", text);
        return -1;
    }
    for (int k = 0; k < 4; k++)
        if (!(p[k] >= 0 && p[k] <= 1)) { snprintf(err, n, "--ge probabilities must be from 0 to 1, not '%s'.", text); return -1; }
    c->p_gb = p[0]; c->p_bg = p[1]; c->loss_good = p[2]; c->loss_bad = p[3];
    return 0;
}

/* A number the table says where to put: the field's own type. */
static void store(app_args_t *a, const flag_t *g, double v)
{
    char *field = (char *)a + g->at;
    switch (g->type) {
    case INT_T: *(int *)field = (int)v; break;
    case U32_T: *(uint32_t *)field = (uint32_t)v; break;
    case U64_T: *(uint64_t *)field = (uint64_t)v; break;
    case DOUBLE_T: *(double *)field = v; break;
    case NO_FIELD: break;
    }
}

/* The flags the table cannot store (text, or a number that sets more than one field); v is the
 * number already checked against the flag's range, for those that take one. */
static int parse_by_hand(app_args_t *a, const char *f, const char *x, double v, char *err, size_t n)
{
    sim_netcfg_t *c = &a->net;
    if (!strcmp(f, "--scenario")) {
        if (strcmp(x, "push") && strcmp(x, "bsp")) { snprintf(err, n, "--scenario must be push or bsp, not '%s'.", x); return -1; }
        a->bsp = !strcmp(x, "bsp");
    } else if (!strcmp(f, "--bytes")) {
        if ((uint32_t)v % 4) { snprintf(err, n, "--bytes must be a multiple of 4, not %s.", x); return -1; }
        a->total_bytes = a->seg_bytes[0] = (uint32_t)v;
    } else if (!strcmp(f, "--limit-s")) {
        a->limit_us = (uint64_t)(v * 1e6);
    } else if (!strcmp(f, "--loss")) {
        c->loss_good = v; c->p_gb = 0; c->p_bg = 1;
    } else if (!strcmp(f, "--segments")) {
        return parse_segments(a, x, err, n);
    } else if (!strcmp(f, "--ge")) {
        return parse_ge(c, x, err, n);
    } else if (!strcmp(f, "--cfg")) {
        return parse_cfg(a, x, err, n);
    } else {
        snprintf(err, n, "unknown flag '%s' (see --help).", f);
        return -1;
    }
    return 0;
}

int app_parse_args(app_args_t *a, int argc, char **argv, char *err, size_t n)
{
    memset(a, 0, sizeof *a);
    a->workers = 8; a->iterations = 10; a->auth = 1; a->n_segs = 1;
    a->seg_bound[0] = 1.0;   /* the size has no default: the model that owns it is the harness's */
    a->skew_us = 1000; a->limit_us = 60000000; a->seed = 1; a->rto_min_us = 200000;
    sim_netcfg_t *c = &a->net;
    c->bottleneck_mbps = 100; c->queue_pkts = 64; c->worker_queue_pkts = 1000; c->ps_queue_pkts = 1000;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) return 1;
        if (i + 1 >= argc) { snprintf(err, n, "%s needs a value (see --help).", f); return -1; }
        const char *x = argv[++i];
        const flag_t *g = flag_of(f);   /* NULL for an unknown flag (refused by parse_by_hand) */
        double v = 0;
        if (g && g->lo <= g->hi && number(f, x, g->lo, g->hi, &v, err, n)) return -1;
        if (g && g->type != NO_FIELD) store(a, g, v);
        else if (parse_by_hand(a, f, x, v, err, n)) return -1;
    }
    if (!a->total_bytes) { snprintf(err, n, "--bytes (or --segments) is required: the gradient's size in bytes."); return -1; }
    if (a->tcp && a->n_segs > 1) { snprintf(err, n, "--segments is PLOT's; the TCP model sends one stream."); return -1; }
    c->n_workers = a->workers;
    if (!(c->worker_mbps > 0)) c->worker_mbps = c->bottleneck_mbps;   /* unset: the bottleneck's */
    if (!(c->ps_mbps > 0)) c->ps_mbps = c->bottleneck_mbps;
    c->seed = a->seed;
    return 0;
}
