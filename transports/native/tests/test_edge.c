/* test_edge.c: bulk-synchronous training over the simulator of test_core.c, which includes this
 * file (one test program; the simulator stays in one place). The scenarios behind issue 10: LTP
 * at one-way delays of up to 50 ms, where a message is shorter than the path's bandwidth-delay
 * product and a 64-packet queue holds a fraction of it, and a closing end whose peer may still
 * wait for its CLOSE. docs/ltp-protocol.md §3, §4, §5, §6 and §12 cite the figures.
 *
 * Developer hooks (not tests): LTP_EDGE_REPORT=1 prints the delay x loss table of
 * docs/ltp-protocol.md §12; LTP_BSP_ONE=<one-way ms> runs one cell (LTP_BSP_LOSS, LTP_BSP_MBPS,
 * LTP_BSP_ITERS, LTP_BSP_SEED, LTP_BSP_WAKE/POLL/BURST for a busy machine, LTP_CFG="name=value,..."
 * for options, LTP_RELIABLE=1 for ltp-reliable, LTP_BSP_TRACE=1 and LTP_SIM_TRACE=1|2 to trace).
 */

/* ------------------------------------------------------------------ training iterations */
/* Bulk-synchronous training as the harness runs it: the PS broadcasts the parameters (one
 * message per worker, serial schedule) through its own link, each worker computes for compute_us
 * once its copy closed and pushes its gradient through its own link into the bottleneck queue
 * toward the PS; the PS's broadcast call returns when every copy is done, its gather when every
 * gradient closed, then it updates for update_us. */
typedef struct {
    int n;                       /* workers */
    uint32_t t, iterations;
    int ps_phase;                /* 0 broadcast, 1 gather, 2 update */
    uint64_t iter_start, bcast_end, update_end;
    int w_phase[MAXN];           /* 0 wait for parameters, 1 compute, 2 push, 3 done */
    uint64_t w_until[MAXN];
    uint64_t compute_us, update_us;
    float *params, *grad[MAXN], *buf;
    double iter_s[64], bcast_s[64];
    double min_frac, fracs_sum;
    int n_fracs, early, below_1_minus_loss, max_wait;
    double loss;
} bsp_t;

static void bsp_arm(sim_t *s, bsp_t *b)
{
    uint64_t t = NEVER;
    for (int w = 0; w < b->n; w++) if (b->w_phase[w] == 1 && b->w_until[w] < t) t = b->w_until[w];
    if (b->ps_phase == 2 && b->update_end < t) t = b->update_end;
    s->app_wake_us = t;
}

static void bsp_start_iteration(sim_t *s, bsp_t *b)
{
    b->iter_start = s->now;
    b->ps_phase = 0;
    for (int w = 0; w < b->n; w++) {
        int rc = ltp_core_send(s->core[0], w, b->t, 0, b->params, N_FLOATS * 4, 0, s->now);
        CHECK(rc == 0, "bsp broadcast send rc %d", rc);
    }
    s->ready[0] = s->now;   /* the API call kicks the PS's thread */
}

static void bsp_trace_send(sim_t *s, ltp_core_t *core, int peer, const char *what, uint32_t t, int w)
{
    ltp_send_stats_t ss;
    ltp_core_send_status(core, peer, t, 0, &ss, s->now);
    const peer_t *pp = &core->peers[peer];
    printf("    it %u %s w%d: %.1f ms rtx %llu pacing %.0f bw %.0f srtt %.1f mode %d filled %d\n", t, what, w,
           (double)ss.elapsed_us / 1000, (unsigned long long)ss.retransmits, ss.pacing_rate_mbps, ss.btl_bw_mbps,
           ss.srtt_us / 1000, pp->fl->bbr.mode, pp->fl->bbr.filled_pipe);
}

static void bsp_workers(sim_t *s, bsp_t *b)
{
    for (int w = 0; w < b->n; w++) {
        ltp_core_t *wc = s->core[w + 1];
        if (b->w_phase[w] == 0 && ltp_core_rx_ready(wc, 0, b->t, 0) == 1) {
            CHECK(ltp_core_rx_take(wc, 0, b->t, 0, b->buf, N_FLOATS * 4, NULL, NULL) == 0, "bsp pull take");
            b->w_phase[w] = 1;
            b->w_until[w] = s->now + b->compute_us;
            if (s->trace) printf("      %9.3f w%d has the parameters of it %u\n", (double)s->now / 1000, w, b->t);
        }
        if (b->w_phase[w] == 1 && s->now >= b->w_until[w]) {
            int rc = ltp_core_send(wc, 0, b->t, 0, b->grad[w], N_FLOATS * 4, 0, s->now);
            CHECK(rc == 0, "bsp push rc %d", rc);
            s->ready[w + 1] = s->now;   /* the API call kicks the worker's thread */
            b->w_phase[w] = 2;
        }
        if (b->w_phase[w] == 2 && ltp_core_send_status(wc, 0, b->t, 0, NULL, s->now) == 1) {
            if (getenv("LTP_BSP_TRACE")) bsp_trace_send(s, wc, 0, "push", b->t, w);
            ltp_core_send_release(wc, 0, b->t, 0);
            b->w_phase[w] = 3;   /* waits for the next iteration's parameters */
        }
    }
}

static void bsp_gathered(sim_t *s, bsp_t *b)
{
    for (int w = 0; w < b->n; w++) {
        ltp_msg_stats_t st;
        CHECK(ltp_core_rx_take(s->core[0], w, b->t, 0, b->buf, N_FLOATS * 4, NULL, &st) == 0, "bsp take");
        double frac = (double)st.received_bytes / (double)st.total_bytes;
        b->fracs_sum += frac;
        b->n_fracs++;
        if (frac < b->min_frac) b->min_frac = frac;
        if (st.close_reason == LTP_CLOSE_EARLY) {
            b->early++;
            if (frac < 1.0 - b->loss) b->below_1_minus_loss++;
        }
        if (st.close_reason == LTP_CLOSE_MAX_WAIT) {
            b->max_wait++;
            if (s->trace)
                printf("      %9.3f it %u w%d closed by max-wait at %.3f after %.1f ms\n", (double)s->now / 1000, b->t,
                       w, frac, (double)st.elapsed_us / 1000);
        }
    }
}

static int bsp_step(sim_t *s, void *arg)
{
    bsp_t *b = arg;
    bsp_workers(s, b);
    if (b->ps_phase == 0) {
        int all = 1;
        for (int w = 0; w < b->n && all; w++) all = ltp_core_send_status(s->core[0], w, b->t, 0, NULL, s->now) == 1;
        if (all) {
            for (int w = 0; w < b->n; w++) {
                if (getenv("LTP_BSP_TRACE")) bsp_trace_send(s, s->core[0], w, "copy", b->t, w);
                ltp_core_send_release(s->core[0], w, b->t, 0);
            }
            b->bcast_end = s->now;
            b->ps_phase = 1;
        }
    }
    if (b->ps_phase == 1) {
        int all = 1;
        for (int w = 0; w < b->n && all; w++) all = ltp_core_rx_ready(s->core[0], w, b->t, 0) == 1;
        if (all) {
            bsp_gathered(s, b);
            b->ps_phase = 2;
            b->update_end = s->now + b->update_us;
        }
    }
    if (b->ps_phase == 2 && s->now >= b->update_end) {
        if (b->t < 64) {
            b->iter_s[b->t] = (double)(s->now - b->iter_start) / 1e6;
            b->bcast_s[b->t] = (double)(b->bcast_end - b->iter_start) / 1e6;
        }
        int workers_done = 1;
        for (int w = 0; w < b->n; w++) workers_done &= b->w_phase[w] == 3;
        if (!workers_done) { bsp_arm(s, b); return 0; }   /* a push still waits for its CLOSE */
        if (++b->t >= b->iterations) { s->app_wake_us = 0; return 1; }
        for (int w = 0; w < b->n; w++) b->w_phase[w] = 0;
        bsp_start_iteration(s, b);
    }
    bsp_arm(s, b);
    return 0;
}

typedef struct {
    int ok;
    double iter_med_s, iter_p99_s, bcast_med_s, bound_s;   /* bound: full duplex + compute + update */
    double bcast_bound_s;                                  /* the broadcast's frames at the link rate */
    uint64_t rtx_ps, rtx_workers, lost_ps, lost_workers;   /* DATA retransmitted, DATA lost anywhere */
    uint64_t q_drops, eq_drops, eq_refused, wq_drops, rand_drops;
    double min_frac, mean_frac;
    int early, below_1_minus_loss, max_wait;
    uint32_t iterations;
} bsp_result_t;

/* How the network departs from an ideal one. */
typedef struct {
    int egress_refuse;          /* the PS's full egress queue refuses (IP_RECVERR) instead of dropping */
    uint64_t wake_mean_us;      /* threads wake this late on average ... */
    uint64_t rx_poll_us;        /* ... and the PS reads its socket in batches (a busy machine) */
    double burst_bytes;         /* the bottleneck shaper's burst allowance (HTB: 15 kB) */
} bsp_net_t;

/* `iterations` (at most 64) BSP iterations of 8 workers at `mbps` with one-way delay `delay_us`
 * per direction, a 64-packet bottleneck queue, the PS's and every worker's own link at the same
 * rate (queues of 1000 packets, a veth's default), random loss `loss` at every host's ingress. */
static bsp_result_t bsp_run(const ltp_config_t *ps_cfg, const ltp_config_t *w_cfg, double mbps, uint64_t delay_us,
                            double loss, uint32_t iterations, uint64_t seed, const bsp_net_t *net)
{
    enum { NW = 8 };
    double rate = mbps / 8.0;
    sim_t s;
    sim_init(&s, NW + 1, ps_cfg, w_cfg, (netcfg_t){.delay_us = delay_us, .loss = loss, .bottleneck_bytes_per_us = rate,
                                                  .queue_pkts = 64, .egress_bytes_per_us = rate,
                                                  .egress_queue_pkts = 1000, .egress_refuse = net->egress_refuse,
                                                  .worker_bytes_per_us = rate, .worker_queue_pkts = 1000, .seed = seed,
                                                  .wake_mean_us = net->wake_mean_us, .rx_poll_us = net->rx_poll_us,
                                                  .burst_bytes = net->burst_bytes});
    for (int w = 1; w <= NW; w++) ltp_core_set_policy(s.core[w], 0, 1.0, 1.0);   /* parameters are reliable */
    bsp_t b;
    memset(&b, 0, sizeof b);
    b.n = NW; b.iterations = iterations < 64 ? iterations : 64; b.compute_us = 1000; b.update_us = 2000;
    b.min_frac = 1.0; b.loss = loss;
    b.params = make_vec(N_FLOATS, seed);
    b.buf = malloc(N_FLOATS * 4);
    for (int w = 0; w < NW; w++) b.grad[w] = make_vec(N_FLOATS, seed * 7 + (uint64_t)w);
    bsp_start_iteration(&s, &b);
    bsp_result_t r;
    memset(&r, 0, sizeof r);
    r.ok = sim_run(&s, 600000000, bsp_step, &b);
    uint32_t n = b.t < 64 ? b.t : 64;
    r.iterations = n;
    if (n) {
        double it[64], bc[64];
        memcpy(it, b.iter_s, sizeof(double) * n);
        memcpy(bc, b.bcast_s, sizeof(double) * n);
        r.iter_med_s = percentile(it, (int)n, 50);
        r.iter_p99_s = percentile(it, (int)n, 99);
        r.bcast_med_s = percentile(bc, (int)n, 50);
    }
    r.bound_s = (NW + 1) * N_FLOATS * 4.0 / rate / 1e6 + (double)(b.compute_us + b.update_us) / 1e6;
    r.bcast_bound_s = NW * (N_FLOATS * 4.0 + 309 * (LTP_DATA_HDR_BYTES + 42.0)) / rate / 1e6;
    r.rtx_ps = s.rtx_sent[0];
    for (int w = 1; w <= NW; w++) r.rtx_workers += s.rtx_sent[w];
    r.lost_ps = s.data_lost[0]; r.lost_workers = s.data_lost[1];
    r.q_drops = s.q_drops; r.eq_drops = s.eq_drops; r.eq_refused = s.eq_refused; r.wq_drops = s.wq_drops;
    r.rand_drops = s.rand_drops;
    r.min_frac = b.min_frac; r.mean_frac = b.n_fracs ? b.fracs_sum / b.n_fracs : 0;
    r.early = b.early; r.below_1_minus_loss = b.below_1_minus_loss; r.max_wait = b.max_wait;
    free(b.params); free(b.buf);
    for (int w = 0; w < NW; w++) free(b.grad[w]);
    sim_free(&s);
    return r;
}

static void print_bsp(const char *name, double delay_ms, double loss, const bsp_result_t *r)
{
    printf("  %-9s %5.2f ms %4.0f%%: iter med %.3f p99 %.3f s (x%.2f bound), bcast %.3f; rtx/lost ps %llu/%llu "
           "w %llu/%llu; drops: queue %llu egress %llu (refused %llu) random %llu; frac min %.3f mean %.4f, early %d "
           "(<1-loss %d), max-wait %d%s\n",
           name, delay_ms, 100 * loss, r->iter_med_s, r->iter_p99_s, r->iter_med_s / r->bound_s, r->bcast_med_s,
           (unsigned long long)r->rtx_ps, (unsigned long long)r->lost_ps, (unsigned long long)r->rtx_workers,
           (unsigned long long)r->lost_workers, (unsigned long long)r->q_drops, (unsigned long long)r->eq_drops,
           (unsigned long long)r->eq_refused, (unsigned long long)r->rand_drops, r->min_frac, r->mean_frac, r->early,
           r->below_1_minus_loss, r->max_wait, r->ok ? "" : " NOT DONE");
}

/* LTP_EDGE_REPORT: the delay x loss table, ltp and ltp-reliable (docs/ltp-protocol.md §12). */
static void edge_report(void)
{
    const double delays_ms[] = {0.25, 5, 25, 50};
    const double losses[] = {0.0, 0.02, 0.10};
    printf("  BSP training, 8 workers, 100 Mbit/s, queue 64, 20 iterations:\n");
    for (int d = 0; d < 4; d++) {
        for (int l = 0; l < 3; l++) {
            for (int rel = 0; rel <= 1; rel++) {
                ltp_config_t ps = base_cfg(), w = base_cfg();
                if (rel) ps.threshold_min = ps.threshold_max = 1.0;
                bsp_net_t net = {.egress_refuse = 1};
                bsp_result_t r = bsp_run(&ps, &w, 100, (uint64_t)(delays_ms[d] * 1000), losses[l], 20, 40 + (uint64_t)l, &net);
                print_bsp(rel ? "reliable" : "ltp", delays_ms[d], losses[l], &r);
            }
        }
    }
}

/* LTP_BSP_ONE: one cell, configured from the environment. */
static void edge_one(void)
{
    ltp_config_t ps = base_cfg(), w = base_cfg();
    char spec[512], *save = NULL;
    snprintf(spec, sizeof spec, "%s", getenv("LTP_CFG") ? getenv("LTP_CFG") : "");
    for (char *kv = strtok_r(spec, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) continue;
        *eq = 0;
        if (ltp_config_set(&ps, kv, atof(eq + 1)) || ltp_config_set(&w, kv, atof(eq + 1))) printf("bad option %s\n", kv);
    }
    if (getenv("LTP_RELIABLE")) ps.threshold_min = ps.threshold_max = 1.0;
#define ENV(name, def) (getenv(name) ? getenv(name) : def)
    bsp_net_t net = {.egress_refuse = 1, .wake_mean_us = (uint64_t)atoi(ENV("LTP_BSP_WAKE", "0")),
                     .rx_poll_us = (uint64_t)atoi(ENV("LTP_BSP_POLL", "0")), .burst_bytes = atof(ENV("LTP_BSP_BURST", "0"))};
    double delay_ms = atof(getenv("LTP_BSP_ONE")), loss = atof(ENV("LTP_BSP_LOSS", "0"));
    bsp_result_t r = bsp_run(&ps, &w, atof(ENV("LTP_BSP_MBPS", "100")), (uint64_t)(delay_ms * 1000), loss,
                             (uint32_t)atoi(ENV("LTP_BSP_ITERS", "10")), (uint64_t)atoi(ENV("LTP_BSP_SEED", "41")), &net);
#undef ENV
    print_bsp("one", delay_ms, loss, &r);
}

/* Issue 10 at 25 ms one way (50 ms RTT: the path's BDP is ~430 packets, the queue 64), 2 % loss,
 * through a PS whose full egress queue drops silently (a kernel without IP_RECVERR: the old
 * driver). Before: the PS's eight copies went out at STARTUP's 1.1 Gbit/s and overflowed its own
 * 1000-packet queue every broadcast (~1,300 drops an iteration, all retransmitted as losses),
 * ~1,000 queue drops an iteration at the bottleneck, and 44 of 57 early closes below 1 - loss. */
static void test_edge_bsp(void)
{
    ltp_config_t c = base_cfg(), rel = base_cfg();
    rel.threshold_min = rel.threshold_max = 1.0;
    bsp_net_t silent = {.egress_refuse = 0};
    enum { IT = 12 };
    bsp_result_t r = bsp_run(&c, &c, 100, 25000, 0.02, IT, 3, &silent);
    bsp_result_t q = bsp_run(&rel, &c, 100, 25000, 0.02, IT, 3, &silent);
    print_bsp("ltp", 25, 0.02, &r);
    print_bsp("reliable", 25, 0.02, &q);
    CHECK(r.ok && q.ok, "BSP at 25 ms did not finish");
    CHECK(r.eq_drops == 0 && q.eq_drops == 0, "the PS's own queue dropped %llu / %llu copies' packets",
          (unsigned long long)r.eq_drops, (unsigned long long)q.eq_drops);
    /* Retransmissions are losses: PTO probes of tails aside (a few per iteration at this RTT). */
    CHECK(r.rtx_ps <= r.lost_ps + 8 * IT, "PS: %llu retransmissions for %llu lost", (unsigned long long)r.rtx_ps,
          (unsigned long long)r.lost_ps);
    CHECK(r.rtx_workers <= r.lost_workers + 8 * IT, "workers: %llu retransmissions for %llu lost",
          (unsigned long long)r.rtx_workers, (unsigned long long)r.lost_workers);
    CHECK(r.q_drops < 150 * IT && q.q_drops < 150 * IT, "queue drops %llu / %llu in %d iterations",
          (unsigned long long)r.q_drops, (unsigned long long)q.q_drops, IT);
    CHECK(r.below_1_minus_loss == 0, "%d of %d early closes delivered less than 1 - loss", r.below_1_minus_loss,
          r.early);
    CHECK(r.iter_med_s <= 1.05 * q.iter_med_s, "ltp %.3f s an iteration, ltp-reliable %.3f s", r.iter_med_s,
          q.iter_med_s);

    /* The local-drop channel: at 50 ms one way the first broadcast's STARTUP overruns the PS's own
     * queue; the driver keeps what it refuses (ENOBUFS) and sends it again, so nothing is lost to
     * it, nothing retransmitted for it. */
    bsp_net_t refuse = {.egress_refuse = 1};
    bsp_result_t f = bsp_run(&c, &c, 100, 50000, 0.0, 4, 5, &refuse);
    print_bsp("ltp", 50, 0.0, &f);
    CHECK(f.ok && f.eq_refused > 0 && f.eq_drops == 0, "refused %llu dropped %llu", (unsigned long long)f.eq_refused,
          (unsigned long long)f.eq_drops);
    /* (A few probes: the refused datagrams waited in the 1000-packet queue, 120 ms at this rate.) */
    CHECK(f.rtx_ps <= f.lost_ps + 12 * 4, "PS: %llu retransmissions for %llu lost with refusals",
          (unsigned long long)f.rtx_ps, (unsigned long long)f.lost_ps);
}

/* 200 Mbit/s at sub-ms RTT on a busy machine (threads wake 1 ms late on average, the PS reads its
 * socket about once a millisecond, HTB's burst): the serial broadcast near its bound. Pacing tokens
 * lost to late wake-ups made the link's delivery rate, and with it its pacing, follow the
 * thread's lateness down (link_catchup_us = 0: 0.44 s against a 0.15 s bound). */
static void test_busy_broadcast(void)
{
    ltp_config_t c = base_cfg();
    bsp_net_t busy = {.egress_refuse = 1, .wake_mean_us = 1000, .rx_poll_us = 1000, .burst_bytes = 15000};
    bsp_result_t r = bsp_run(&c, &c, 200, 100, 0.02, 12, 1, &busy);
    print_bsp("busy", 0.1, 0.02, &r);
    CHECK(r.ok && r.bcast_med_s <= 1.15 * r.bcast_bound_s, "broadcast %.3f s, its frames take %.3f s", r.bcast_med_s,
          r.bcast_bound_s);
}

/* ------------------------------------------------------------------ closing */
typedef struct { int peer; uint32_t msg; } send_done_t;

static int ps_send_done(sim_t *s, void *arg)
{
    send_done_t *d = arg;
    return ltp_core_send_status(s->core[0], d->peer, d->msg, 0, NULL, s->now) == 1;
}

static int worker_has(sim_t *s, void *arg)
{
    send_done_t *d = arg;
    return ltp_core_rx_ready(s->core[d->peer + 1], 0, d->msg, 0) == 1;
}

/* The hang of issue 10: the worker got the last parameters, both CLOSE copies were lost, and its
 * process exited; the PS waited in its final broadcast for ever. `lost` CLOSE datagrams of the
 * worker are dropped from the moment it closed the message; `linger` says whether the worker's
 * end lingers (ltp_core_linger, then stays until ltp_core_linger_until) before it is gone. */
static int final_close_lost(uint64_t delay_us, double loss, int lost, int linger, uint64_t seed)
{
    ltp_config_t c = base_cfg();
    sim_t s;
    sim_init(&s, 2, &c, &c, (netcfg_t){.delay_us = delay_us, .loss = loss, .seed = seed});
    ltp_core_set_policy(s.core[1], 0, 1.0, 1.0);
    float *v = make_vec(N_FLOATS, seed), *got = malloc(N_FLOATS * 4);
    CHECK(ltp_core_send(s.core[0], 0, 7, 0, v, N_FLOATS * 4, 0, s.now) == 0, "send");
    send_done_t d = {0, 7};
    s.drop_close_from = 1;   /* the worker's first `lost` CLOSE datagrams: its copies, then answers */
    s.drop_close_n = lost;
    CHECK(sim_run(&s, 20000000, worker_has, &d), "the worker never had the message");
    CHECK(ltp_core_rx_take(s.core[1], 0, 7, 0, got, N_FLOATS * 4, NULL, NULL) == 0, "take");
    if (linger) {
        ltp_core_linger(s.core[1], s.now);
        uint64_t start = s.now;
        while (s.now < ltp_core_linger_until(s.core[1], s.now) && s.now - start < 60000000)
            sim_run(&s, ltp_core_linger_until(s.core[1], s.now) == NEVER ? 1000 : ltp_core_linger_until(s.core[1], s.now) - s.now,
                    NULL, NULL);
    }
    s.gone[1] = 1;   /* the worker's process exits */
    int done = sim_run(&s, 120000000, ps_send_done, &d);
    free(v);
    free(got);
    sim_free(&s);
    return done;
}

static void test_linger(void)
{
    /* Without the linger the scenario hangs: the PS probes a peer that is gone. */
    CHECK(!final_close_lost(25000, 0.0, 2, 0, 1), "no linger, both CLOSE copies lost: the PS finished anyway");
    /* The farewell CLOSE of ltp_core_linger answers it ... */
    CHECK(final_close_lost(25000, 0.0, 2, 1, 1), "linger, both CLOSE copies lost: the PS still waits");
    /* ... and with that lost too, the worker is still there when the PS's probe comes. */
    CHECK(final_close_lost(25000, 0.0, 3, 1, 2), "linger, three CLOSE copies lost: the PS still waits");
    CHECK(final_close_lost(250, 0.0, 3, 1, 3), "linger at sub-ms RTT, three CLOSE copies lost: the PS still waits");
    /* 10 % loss on everything, 20 seeds: the PS always finishes. */
    int fails = 0;
    for (uint64_t seed = 10; seed < 30; seed++) fails += !final_close_lost(25000, 0.10, 2, 1, seed);
    CHECK(fails == 0, "%d of 20 lossy final broadcasts never finished", fails);

    /* linger_until: never while CLOSE copies are pending; then quiet for linger_rtts RTTs. */
    ltp_config_t c = base_cfg();
    ltp_core_t *rx = ltp_core_new(&c, LTP_RANK_SERVER);
    ltp_core_add_peer(rx, 0);
    uint8_t b[2048];
    size_t n = mk_data(b, 0, 1, 0, 1, 400, 400);
    CHECK(ltp_core_input(rx, 0, b, n, 1000) == 0, "data");
    CHECK(ltp_core_linger_until(rx, 1000) == UINT64_MAX, "CLOSE copies pending, yet free to go");
    uint8_t o[LTP_MAX_DATAGRAM];
    int slot;
    while (ltp_core_poll_tx(rx, 1000, o, sizeof o, &slot) > 0) {}
    CHECK(ltp_core_linger_until(rx, 1000) == 1000 + c.linger_min_us, "quiet from the last datagram: %llu",
          (unsigned long long)ltp_core_linger_until(rx, 1000));
    CHECK(ltp_core_linger(rx, 5000) == 0 && ltp_core_linger_until(rx, 5000) == UINT64_MAX, "no farewell CLOSE queued");
    int closes = 0;
    while (ltp_core_poll_tx(rx, 5000, o, sizeof o, &slot) > 0) closes += o[WIRE_TYPE] == LTP_T_CLOSE;
    CHECK(closes == 1 && ltp_core_linger_until(rx, 5000) == 5000 + c.linger_min_us, "farewell: %d CLOSE", closes);
    ltp_core_free(rx);
}
