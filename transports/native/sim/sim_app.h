/* sim_app.h: the parameter-server application ltp_sim runs over sim_net (its arguments, the
 * iteration state machine and its JSON lines). ltp_sim.c describes the scenarios. */
#ifndef SIM_APP_H
#define SIM_APP_H

#include <stdio.h>

#include "ltp.h"
#include "sim_net.h"

#define SIM_MAX_SEGS 64
#define SIM_MAX_CFG 32

typedef struct app_args {
    int workers, iterations, bsp, reliable, auth;
    int tcp;                             /* the TCP reference model instead of the LTP core */
    uint32_t rto_min_us;
    int n_segs;                          /* 1: one message (LTP); more: PLOT's layers */
    uint32_t seg_bytes[SIM_MAX_SEGS], total_bytes;
    double seg_bound[SIM_MAX_SEGS];
    uint64_t compute_us, update_us, skew_us, limit_us, seed;
    sim_netcfg_t net;
    int n_cfg;                           /* core options by name (ltp_config_set) */
    char cfg_name[SIM_MAX_CFG][64];
    double cfg_value[SIM_MAX_CFG];
} app_args_t;

/* 0 ok, 1 --help, -1 a bad argument (one sentence in err). */
int app_parse_args(app_args_t *a, int argc, char **argv, char *err, size_t err_len);
void app_usage(FILE *f);
/* Every numeric flag's range, as one JSON object {"--flag": [lo, hi], ...}. */
void app_ranges(FILE *f);

/* What the application needs of a transport's endpoint (the LTP core or the TCP model). */
typedef struct { uint64_t got_bytes, total_bytes; int early, max_wait; } app_take_t;
typedef struct app_transport {
    int (*send)(void *ep, int peer, uint32_t msg, uint16_t seg, const void *data, uint32_t len, uint64_t now);
    int (*send_done)(void *ep, int peer, uint32_t msg, uint16_t seg, uint64_t now, uint64_t *retransmits);
    void (*send_release)(void *ep, int peer, uint32_t msg, uint16_t seg);
    int (*rx_ready)(void *ep, int peer, uint32_t msg, uint16_t seg);
    void (*rx_take)(void *ep, int peer, uint32_t msg, uint16_t seg, void *buf, uint32_t cap, app_take_t *out);
    void (*rx_post)(void *ep, int peer, uint32_t msg, uint16_t seg, void *buf, uint32_t cap);
    uint64_t (*progress)(void *ep);   /* moves when a message closed or a send ended */
    /* A worker joins the PS before the first iteration, as on the testbed (NULL: no join). */
    int (*join)(void *ep, uint64_t now);
    int (*joined)(void *ep);
} app_transport_t;

typedef struct app app_t;
app_t *app_new(const app_args_t *a, sim_t *s, const app_transport_t *t, void **eps);
/* Runs every iteration, printing push and iteration rows; 1 if all finished. */
int app_run(app_t *app, FILE *out);
void app_summary(app_t *app, FILE *out, int ok, double wall_s, double peak_rss_mb);
void app_free(app_t *app);

#endif
