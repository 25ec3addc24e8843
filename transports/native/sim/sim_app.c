/* sim_app.c: the parameter server and its workers over sim_net (sim_app.h; the scenarios are
 * described in ltp_sim.c). Event-driven: a node's state is looked at only when something reached
 * it or it ran, and the PS's peers only when its counters say a message closed or a send ended,
 * so an iteration costs about what its datagrams cost, at any N. */
#include "sim_app.h"

#include <stdlib.h>
#include <string.h>

enum { W_IDLE, W_COMPUTE, W_READY, W_PUSHING };   /* a worker: waits for parameters, ... */
enum { PS_BCAST, PS_GATHER, PS_UPDATE };
enum { T_COMPUTED = 1, T_RELEASE = 2, T_UPDATED = 3, T_JOIN = 4 };

typedef struct { uint64_t at; int w, kind; } tmr_t;

typedef struct {
    int state;
    uint32_t k;                  /* the iteration it is in */
    uint64_t sent_at;            /* its gradient's send call */
    int taken, send_done;        /* the PS took the gradient; the worker's send ended */
    double push_s, frac;         /* filled when the PS takes it */
    int early, max_wait;
    uint64_t rtx;
} wstate_t;

struct app {
    app_args_t a;
    sim_t *s;
    const app_transport_t *t;
    void **c;
    FILE *out;
    float *data, *ps_buf, *w_buf;      /* shared: what is sent, where it lands (content unused) */
    uint32_t k;
    int phase, bcast_left, gather_left, ready, released, draining, finished, failed;
    int joining, joined_n;             /* the join before the first iteration */
    char *is_joined;
    int *bcast_pending, *gather_pending;
    wstate_t *w;
    uint64_t iter_start, bcast_end, gather_end, t0;
    uint64_t closes_seen, sends_seen, qdrops_at_start;
    tmr_t *tm;
    int tm_n;
    uint64_t skew_rng;
    /* the iteration's accumulators */
    double min_frac;
    int early, max_wait;
    /* the run's */
    uint64_t pushes, early_total, max_wait_total;
    double frac_sum;
};

/* ---------------------------------------------------------------- application timers (a heap) */
static void tm_push(app_t *p, uint64_t at, int w, int kind)
{
    int i = p->tm_n++;
    tmr_t t = {at, w, kind};
    while (i > 0 && p->tm[(i - 1) / 2].at > at) { p->tm[i] = p->tm[(i - 1) / 2]; i = (i - 1) / 2; }
    p->tm[i] = t;
    sim_app_timer(p->s, p->tm[0].at);
}

static tmr_t tm_pop(app_t *p)
{
    tmr_t top = p->tm[0], last = p->tm[--p->tm_n];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < p->tm_n && p->tm[l].at < last.at) m = l;
        if (r < p->tm_n && p->tm[r].at < (m == i ? last.at : p->tm[l].at)) m = r;
        if (m == i) break;
        p->tm[i] = p->tm[m];
        i = m;
    }
    if (p->tm_n) p->tm[i] = last;
    return top;
}

/* The workers' start skew after a release, in [0, 1): a 64-bit LCG (Knuth's MMIX constants). */
static double uniform01(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)*state / 18446744073709551616.0;
}

static uint16_t seg_id(const app_t *p, int s) { return (uint16_t)(p->a.n_segs > 1 ? s + 1 : 0); }

static uint32_t seg_off(const app_t *p, int s)
{
    uint32_t off = 0;
    for (int i = 0; i < s; i++) off += p->a.seg_bytes[i];
    return off;
}

/* ---------------------------------------------------------------- rows */
static void push_row(app_t *p, int r)
{
    wstate_t *w = &p->w[r];
    fprintf(p->out, "{\"table\": \"push\", \"iteration\": %u, \"worker\": %d, \"push_s\": %.6f, \"recv_frac\": %.6f, "
            "\"retransmits\": %llu, \"early_closes\": %d, \"max_wait_closes\": %d}\n",
            w->k, r, w->push_s, w->frac, (unsigned long long)w->rtx, w->early, w->max_wait);
    p->pushes++;
    p->frac_sum += w->frac;
    p->early_total += (uint64_t)w->early;
    p->max_wait_total += (uint64_t)w->max_wait;
}

static void iteration_row(app_t *p, uint64_t now)
{
    const sim_counters_t *k = sim_counters(p->s);
    fprintf(p->out, "{\"table\": \"iteration\", \"iteration\": %u, \"push_s\": %.6f, \"iteration_s\": %.6f, "
            "\"broadcast_s\": %.6f, \"min_recv_frac\": %.6f, \"early_closes\": %d, \"max_wait_closes\": %d, "
            "\"queue_drops\": %llu}\n",
            p->k, (double)(p->gather_end - p->t0) / 1e6, (double)(now - p->iter_start) / 1e6,
            (double)(p->bcast_end - p->iter_start) / 1e6, p->min_frac, p->early, p->max_wait,
            (unsigned long long)(k->queue_drops - p->qdrops_at_start));
}

/* ---------------------------------------------------------------- workers */
static void start_push(app_t *p, int r)
{
    wstate_t *w = &p->w[r];
    uint64_t now = sim_now(p->s);
    for (int s = 0; s < p->a.n_segs; s++) {
        int rc = p->t->send(p->c[r + 1], 0, w->k, seg_id(p, s), (const uint8_t *)p->data + seg_off(p, s),
                            p->a.seg_bytes[s], now);
        if (rc) { fprintf(stderr, "ltp_sim: worker %d could not send (%d)\n", r, rc); p->failed = 1; }
    }
    w->sent_at = now;
    w->state = W_PUSHING;
    if (!p->t0) p->t0 = now;
    sim_kick(p->s, r + 1);
}

static void maybe_release(app_t *p)
{
    if (p->a.bsp || p->released || p->ready < p->a.workers || p->phase == PS_BCAST) return;
    uint64_t now = sim_now(p->s);
    p->released = 1;
    p->t0 = now;   /* the push time runs from the release, as bench_node's */
    for (int r = 0; r < p->a.workers; r++)
        tm_push(p, now + (uint64_t)(uniform01(&p->skew_rng) * (double)p->a.skew_us), r, T_RELEASE);
}

static void computed(app_t *p, int r)
{
    if (p->a.bsp) { start_push(p, r); return; }
    p->w[r].state = W_READY;
    p->ready++;
    maybe_release(p);
}

/* The join: every worker HELLOs the PS at a time drawn over the release skew (on the testbed they
 * start one by one); the first iteration starts once all have joined. */
static void start_iteration(app_t *p);

static void join_check(app_t *p, int r)
{
    if (p->is_joined[r] || !p->t->joined(p->c[r + 1])) return;
    p->is_joined[r] = 1;
    if (++p->joined_n == p->a.workers) { p->joining = 0; start_iteration(p); }
}

static void worker_check(app_t *p, int r)
{
    wstate_t *w = &p->w[r];
    void *c = p->c[r + 1];
    uint64_t now = sim_now(p->s), rtx;
    if (p->joining) { join_check(p, r); return; }
    if (w->state == W_PUSHING && !w->send_done) {
        int done = 1;
        for (int s = 0; s < p->a.n_segs && done; s++) done = p->t->send_done(c, 0, w->k, seg_id(p, s), now, &rtx) == 1;
        if (done) {
            w->rtx = 0;
            for (int s = 0; s < p->a.n_segs; s++) {
                p->t->send_done(c, 0, w->k, seg_id(p, s), now, &rtx);
                w->rtx += rtx;
                p->t->send_release(c, 0, w->k, seg_id(p, s));
            }
            w->send_done = 1;
        }
    }
    if (w->state == W_PUSHING && w->send_done && w->taken) {
        push_row(p, r);
        w->state = W_IDLE;
        w->k++;
        w->taken = w->send_done = 0;
        p->t->rx_post(c, 0, w->k, 0, p->w_buf, p->a.total_bytes);
    }
    if (w->state == W_IDLE && w->k == p->k && p->t->rx_ready(c, 0, w->k, 0) == 1) {
        app_take_t got;
        p->t->rx_take(c, 0, w->k, 0, p->w_buf, p->a.total_bytes, &got);
        w->state = W_COMPUTE;
        if (p->a.compute_us) tm_push(p, now + p->a.compute_us, r, T_COMPUTED);
        else computed(p, r);
    }
}

/* ---------------------------------------------------------------- the PS */
static void start_iteration(app_t *p)
{
    uint64_t now = sim_now(p->s);
    p->iter_start = now;
    p->phase = PS_BCAST;
    p->bcast_left = p->gather_left = p->a.workers;
    p->ready = p->released = 0;
    p->t0 = 0;
    p->min_frac = 1.0;
    p->early = p->max_wait = 0;
    p->qdrops_at_start = sim_counters(p->s)->queue_drops;
    for (int r = 0; r < p->a.workers; r++) {
        p->bcast_pending[r] = p->gather_pending[r] = r;
        for (int s = 0; s < p->a.n_segs; s++)   /* every gradient lands in one shared buffer */
            p->t->rx_post(p->c[0], r, p->k, seg_id(p, s), (uint8_t *)p->ps_buf + seg_off(p, s), p->a.seg_bytes[s]);
        int rc = p->t->send(p->c[0], r, p->k, 0, p->data, p->a.total_bytes, now);
        if (rc) { fprintf(stderr, "ltp_sim: the broadcast could not send (%d)\n", rc); p->failed = 1; }
    }
    sim_kick(p->s, 0);
}

static int take_gradient(app_t *p, int r)
{
    void *c = p->c[0];
    for (int s = 0; s < p->a.n_segs; s++) if (p->t->rx_ready(c, r, p->k, seg_id(p, s)) != 1) return 0;
    wstate_t *w = &p->w[r];
    uint64_t got = 0, total = 0;
    w->early = w->max_wait = 0;
    for (int s = 0; s < p->a.n_segs; s++) {
        app_take_t st;
        p->t->rx_take(c, r, p->k, seg_id(p, s), (uint8_t *)p->ps_buf + seg_off(p, s), p->a.seg_bytes[s], &st);
        got += st.got_bytes;
        total += st.total_bytes;
        w->early += st.early;
        w->max_wait += st.max_wait;
    }
    w->frac = total ? (double)got / (double)total : 0;
    w->push_s = (double)(sim_now(p->s) - w->sent_at) / 1e6;
    w->taken = 1;
    if (w->frac < p->min_frac) p->min_frac = w->frac;
    p->early += w->early;
    p->max_wait += w->max_wait;
    worker_check(p, r);   /* its row goes out once its send also ended */
    return 1;
}

static void end_iteration(app_t *p)
{
    iteration_row(p, sim_now(p->s));
    if (++p->k >= (uint32_t)p->a.iterations) { p->draining = 1; return; }   /* the last sends end */
    start_iteration(p);
    for (int r = 0; r < p->a.workers; r++) worker_check(p, r);   /* parameters may already be in */
}

static void ps_check(app_t *p)
{
    uint64_t now = sim_now(p->s), progress = p->t->progress(p->c[0]);
    if (p->phase == PS_BCAST && progress != p->sends_seen) {
        for (int i = 0; i < p->bcast_left;) {
            int r = p->bcast_pending[i];
            uint64_t rtx;
            if (p->t->send_done(p->c[0], r, p->k, 0, now, &rtx) == 1) {
                p->t->send_release(p->c[0], r, p->k, 0);
                p->bcast_pending[i] = p->bcast_pending[--p->bcast_left];
            } else {
                i++;
            }
        }
        if (!p->bcast_left) { p->bcast_end = now; p->phase = PS_GATHER; maybe_release(p); }
    }
    p->sends_seen = progress;
    if (progress != p->closes_seen) {
        for (int i = 0; i < p->gather_left;) {
            if (take_gradient(p, p->gather_pending[i])) p->gather_pending[i] = p->gather_pending[--p->gather_left];
            else i++;
        }
    }
    p->closes_seen = progress;
    if (p->phase == PS_GATHER && !p->gather_left) {
        p->gather_end = now;
        p->phase = PS_UPDATE;
        if (p->a.update_us) tm_push(p, now + p->a.update_us, -1, T_UPDATED);
        else end_iteration(p);
    }
}

static int hook(sim_t *s, void *arg, int why, int node, int slot)
{
    app_t *p = arg;
    (void)slot;
    uint64_t now = sim_now(s);
    if (why == SIM_HOOK_APP) {
        while (p->tm_n && p->tm[0].at <= now) {
            tmr_t t = tm_pop(p);
            if (t.kind == T_COMPUTED) computed(p, t.w);
            else if (t.kind == T_RELEASE) start_push(p, t.w);
            else if (t.kind == T_JOIN) { p->t->join(p->c[t.w + 1], now); sim_kick(s, t.w + 1); }
            else end_iteration(p);
        }
        if (p->tm_n) sim_app_timer(s, p->tm[0].at);
    } else if (node == 0) {
        if (!p->joining) ps_check(p);
    } else {
        worker_check(p, node - 1);
    }
    if (p->draining && p->pushes == (uint64_t)p->a.iterations * (uint64_t)p->a.workers) p->finished = 1;
    if (!p->finished && now - p->iter_start > p->a.limit_us) p->failed = 1;
    return p->finished || p->failed;
}

app_t *app_new(const app_args_t *a, sim_t *s, const app_transport_t *t, void **eps)
{
    app_t *p = calloc(1, sizeof *p);
    p->a = *a;
    p->s = s;
    p->t = t;
    p->c = eps;
    size_t n = (size_t)a->workers;
    p->data = calloc(a->total_bytes / 4, sizeof(float));
    p->ps_buf = calloc(a->total_bytes / 4, sizeof(float));
    p->w_buf = calloc(a->total_bytes / 4, sizeof(float));
    p->bcast_pending = calloc(n, sizeof(int));
    p->gather_pending = calloc(n, sizeof(int));
    p->w = calloc(n, sizeof *p->w);
    p->tm = calloc(2 * n + 2, sizeof *p->tm);
    p->is_joined = calloc(n, 1);
    p->skew_rng = a->seed ^ 0xABCDEFull;
    for (uint32_t i = 0; i < a->total_bytes / 4; i++) p->data[i] = (float)(i % 1000) / 1000.0f;
    return p;
}

int app_run(app_t *p, FILE *out)
{
    p->out = out;
    for (int r = 0; r < p->a.workers; r++) p->t->rx_post(p->c[r + 1], 0, 0, 0, p->w_buf, p->a.total_bytes);
    if (p->t->join) {
        p->joining = 1;
        for (int r = 0; r < p->a.workers; r++)   /* from 1 us: an application timer at 0 is none */
            tm_push(p, 1 + (uint64_t)(uniform01(&p->skew_rng) * (double)p->a.skew_us), r, T_JOIN);
    } else {
        start_iteration(p);
    }
    /* The whole run's virtual time is bounded by the per-iteration limit the hook checks. */
    int done = sim_run(p->s, (uint64_t)p->a.iterations * p->a.limit_us + 1, hook, p);
    if (!p->finished && sim_now(p->s) - p->iter_start > p->a.limit_us) p->failed = 1;   /* quiet, but late */
    return done && p->finished && !p->failed;
}

void app_summary(app_t *p, FILE *out, int ok, double wall_s, double peak_rss_mb)
{
    const sim_counters_t *k = sim_counters(p->s);
    double virt = (double)sim_now(p->s) / 1e6;
    fprintf(out, "{\"table\": \"summary\", \"status\": \"%s\", \"iterations_done\": %u, \"pushes\": %llu, "
            "\"mean_recv_frac\": %.6f, \"early_closes\": %llu, \"max_wait_closes\": %llu, \"virtual_s\": %.6f, "
            "\"events\": %llu, \"datagrams\": %llu, \"delivered\": %llu, \"in_flight\": %llu, \"data_sent\": %llu, "
            "\"retransmits_ps\": %llu, \"retransmits_workers\": %llu, \"queue_drops\": %llu, "
            "\"worker_link_drops\": %llu, \"ps_refused\": %llu, \"random_drops\": %llu, \"loss_bursts\": %llu, "
            "\"data_lost_ps\": %llu, \"data_lost_workers\": %llu, \"bottleneck_frames\": %llu, "
            "\"ps_core_us_per_datagram\": %.3f, \"wall_s\": %.3f, \"events_per_s\": %.0f, \"peak_rss_mb\": %.1f, \"network_peak_mb\": %.1f}\n",
            ok ? "ok" : (p->failed ? "timeout" : "stalled"), p->k, (unsigned long long)p->pushes,
            p->pushes ? p->frac_sum / (double)p->pushes : 0, (unsigned long long)p->early_total,
            (unsigned long long)p->max_wait_total, virt, (unsigned long long)k->events,
            (unsigned long long)k->datagrams, (unsigned long long)k->delivered, (unsigned long long)sim_in_flight(p->s),
            (unsigned long long)k->data_sent, (unsigned long long)k->rtx_sent[0], (unsigned long long)k->rtx_sent[1],
            (unsigned long long)k->queue_drops, (unsigned long long)k->worker_link_drops,
            (unsigned long long)k->ps_refused, (unsigned long long)k->random_drops, (unsigned long long)k->loss_bursts,
            (unsigned long long)k->data_lost[0], (unsigned long long)k->data_lost[1],
            (unsigned long long)k->bottleneck_frames,
            k->ps_datagrams ? (double)k->ps_cpu_ns / 1000.0 / (double)k->ps_datagrams : 0, wall_s, wall_s > 0 ? (double)k->events / wall_s : 0, peak_rss_mb,
            (double)sim_peak_bytes(p->s) / 1048576.0);
}

void app_free(app_t *p)
{
    free(p->data); free(p->ps_buf); free(p->w_buf);
    free(p->bcast_pending); free(p->gather_pending); free(p->w); free(p->tm); free(p->is_joined);
    free(p);
}
