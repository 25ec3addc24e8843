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

typedef struct app app_t;
app_t *app_new(const app_args_t *a, sim_t *s, ltp_core_t **cores);
/* Runs every iteration, printing push and iteration rows; 1 if all finished. */
int app_run(app_t *app, FILE *out);
void app_summary(app_t *app, FILE *out, int ok, double wall_s, double peak_rss_mb);
void app_free(app_t *app);

#endif
