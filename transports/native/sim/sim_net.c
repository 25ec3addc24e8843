/* sim_net.c: the discrete-event network of sim_net.h (the model is described there). */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime */
#include "sim_net.h"
#include "event_heap.h"
#include "sim_link.h"   /* the links and host effects, shared with tests/test_core.c */
/* The project's one generator (ltp_uniform, ltp_internal.h) and the one Gilbert-Elliott chain
 * (the eBPF program's, topologies/impair/geloss/ge_chain.h): one seed, one sequence of decisions. */
#include "ltp_internal.h"
#define GE_U64 uint64_t
#define GE_U32 uint32_t
#include "ge_chain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NEVER_US UINT64_MAX
#define FRAME_OVERHEAD 42   /* Ethernet 14 + IPv4 20 + UDP 8 */

enum { EV_SWITCH = 1, EV_DELIVER = 2, EV_RUN = 3 };

typedef struct { uint64_t at, seq; int kind, node, slot, len; uint8_t *data; } ev_t;
EVENT_HEAP(evq, ev_t)

typedef struct {
    void *ep;
    uint64_t run_at;            /* the pending RUN event's time, NEVER_US if none */
    struct ge_chain loss;       /* the ingress loss chain: its generator, state and counters */
} node_t;

struct sim {
    sim_netcfg_t c;
    sim_ops_t ops;
    int n;                      /* nodes: n_workers + 1 */
    node_t *node;
    evq_t q;                    /* the events, earliest first */
    struct ge_config ge;        /* the loss chain's probabilities, as thresholds */
    uint64_t now, app_at, wake_rng;
    link_fifo_t btl, ps_link, *wlink;
    link_bucket_t tb;           /* the bottleneck's token bucket (burst_bytes 0: none) */
    uint8_t held[65536];        /* the PS's datagram its full link refused (any poll's size) */
    int held_len, held_slot;
    sim_counters_t k;
    uint8_t buf[65536];
};

/* The PS endpoint's own cost: what one real PS would spend in the core per datagram (the
 * simulator charges no CPU time to virtual time; this measures it). */
static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void heap_push(sim_t *s, ev_t e)
{
    if (evq_push(&s->q, e)) { fprintf(stderr, "sim: out of memory for events\n"); exit(2); }
}

/* A probability as the chain's threshold out of 2^32 (GE_ONE: always). */
static GE_U64 threshold(double p)
{
    return p >= 1 ? GE_ONE : p <= 0 ? 0 : (GE_U64)(p * (double)GE_ONE);
}

/* The receiving host's ingress: one step of its Gilbert-Elliott chain. 1: dropped. */
static int ingress_drops(sim_t *s, int dst)
{
    struct ge_chain *chain = &s->node[dst].loss;
    GE_U64 bursts = chain->bursts;
    int drop = ge_step(&s->ge, chain);
    s->k.random_drops += (uint64_t)drop;
    s->k.loss_bursts += chain->bursts - bursts;
    return drop;
}

static void schedule(sim_t *s, int kind, int node, int slot, uint64_t at, const uint8_t *b, int len)
{
    ev_t e = {at, 0, kind, node, slot, len, NULL};
    if (len) {
        e.data = malloc((size_t)len);
        if (!e.data) { fprintf(stderr, "sim: out of memory for datagrams\n"); exit(2); }
        memcpy(e.data, b, (size_t)len);
    }
    heap_push(s, e);
}

static void run_at(sim_t *s, int node, uint64_t at)
{
    if (at >= s->node[node].run_at) return;
    s->node[node].run_at = at;
    schedule(s, EV_RUN, node, -1, at, NULL, 0);
}

static uint64_t lateness(sim_t *s) { return link_wake_late_us(&s->wake_rng, s->c.wake_mean_us); }

void sim_kick(sim_t *s, int node) { run_at(s, node, s->now + lateness(s)); }

/* A worker's frame reached the switch: the bottleneck, then the PS's ingress. */
static void to_ps(sim_t *s, int src, const uint8_t *b, int len)
{
    int data = s->ops.classify(b, (size_t)len) & SIM_PKT_DATA;
    uint64_t dep = link_shaped_put(&s->btl, &s->tb, s->now, len + FRAME_OVERHEAD);
    if (dep == LINK_NEVER) { s->k.queue_drops++; s->k.data_lost[1] += data != 0; return; }
    s->k.bottleneck_frames++;
    s->k.bottleneck_bytes += (uint64_t)(len + FRAME_OVERHEAD);
    if (ingress_drops(s, 0)) { s->k.data_lost[1] += data != 0; return; }
    uint64_t at = dep + s->c.delay_us;
    if (s->c.rx_poll_us) at = link_poll_instant(s->c.rx_poll_us, s->c.seed, at);
    schedule(s, EV_DELIVER, 0, src - 1, at, b, len);
}

/* Returns -1 if the PS's full link refused the datagram (nothing sent), else 0. */
static int emit(sim_t *s, int src, int slot, const uint8_t *b, int len)
{
    int f = s->ops.classify(b, (size_t)len);
    if (src == 0) {
        if (slot < 0 || slot >= s->c.n_workers) return 0;
        uint64_t dep = link_fifo_put(&s->ps_link, s->now, len + FRAME_OVERHEAD);
        if (dep == LINK_NEVER) { s->k.ps_refused++; return -1; }   /* ENOBUFS: the driver keeps it */
        s->k.datagrams++;
        if (f & SIM_PKT_DATA) s->k.data_sent++;
        if (f & SIM_PKT_RTX) s->k.rtx_sent[0]++;
        if (ingress_drops(s, slot + 1)) { s->k.data_lost[0] += (f & SIM_PKT_DATA) != 0; return 0; }
        schedule(s, EV_DELIVER, slot + 1, 0, dep + s->c.delay_us, b, len);
        return 0;
    }
    s->k.datagrams++;
    if (f & SIM_PKT_DATA) s->k.data_sent++;
    if (f & SIM_PKT_RTX) s->k.rtx_sent[1]++;
    uint64_t dep = link_fifo_put(&s->wlink[src - 1], s->now, len + FRAME_OVERHEAD);
    if (dep == LINK_NEVER) { s->k.worker_link_drops++; s->k.data_lost[1] += (f & SIM_PKT_DATA) != 0; return 0; }
    schedule(s, EV_SWITCH, src, -1, dep, b, len);
    return 0;
}

/* A node's turn: its core's datagrams out, until none or the PS's full link refuses one, then its
 * next timeout. The PS's time counts its core's calls only: the network's part of a datagram
 * (its queue, its loss draw, its copy into an event) is the simulator's, not the PS's. */
static void run_node(sim_t *s, int k)
{
    node_t *n = &s->node[k];
    int slot, len, held = 0;
    uint64_t spent = 0, t_in = 0;
    if (k == 0 && s->held_len) {   /* the driver offers the refused datagram first */
        if (emit(s, 0, s->held_slot, s->held, s->held_len) < 0) held = 1;
        else s->held_len = 0;
    }
    while (!held) {
        if (k == 0) t_in = mono_ns();
        len = s->ops.poll_tx(n->ep, s->now, s->buf, sizeof s->buf, &slot);
        if (k == 0) spent += mono_ns() - t_in;
        if (len <= 0) break;
        s->k.ps_datagrams += k == 0;
        if (emit(s, k, slot, s->buf, len) < 0) {
            memcpy(s->held, s->buf, (size_t)len);
            s->held_len = len;
            s->held_slot = slot;
            held = 1;
        }
    }
    if (k == 0) t_in = mono_ns();
    uint64_t t = held ? s->ps_link.dep[s->ps_link.head] : s->ops.next_timeout(n->ep, s->now);
    if (k == 0) s->k.ps_cpu_ns += spent + mono_ns() - t_in;
    if (t == NEVER_US) return;
    if (t <= s->now) t = s->now + 1;
    run_at(s, k, t + lateness(s));
}

sim_t *sim_new(const sim_netcfg_t *c, const sim_ops_t *ops, void **eps, char *err, size_t err_len)
{
#define BAD(...) do { snprintf(err, err_len, __VA_ARGS__); return NULL; } while (0)
    if (c->n_workers < 1 || c->n_workers > (int)(LTP_RANK_SERVER - 1)) BAD("the number of workers must be from 1 to %u, not %d.", LTP_RANK_SERVER - 1, c->n_workers);
    if (!(c->bottleneck_mbps > 0 && c->worker_mbps > 0 && c->ps_mbps > 0)) BAD("link rates must be above 0 Mbit/s.");
    if (c->queue_pkts < 1 || c->worker_queue_pkts < 1 || c->ps_queue_pkts < 1) BAD("queues must hold at least 1 packet.");
    double probs[4] = {c->p_gb, c->p_bg, c->loss_good, c->loss_bad};
    for (int i = 0; i < 4; i++) if (!(probs[i] >= 0 && probs[i] <= 1)) BAD("loss probabilities must be from 0 to 1.");
#undef BAD
    sim_t *s = calloc(1, sizeof *s);
    s->c = *c;
    s->ops = *ops;
    s->n = c->n_workers + 1;
    s->node = calloc((size_t)s->n, sizeof *s->node);
    s->wlink = calloc((size_t)c->n_workers, sizeof *s->wlink);
    s->wake_rng = c->seed ^ 0x5DEECE66Dull;
    s->ge = (struct ge_config){threshold(c->p_gb), threshold(c->p_bg), threshold(c->loss_good),
                               threshold(c->loss_bad)};
    s->tb.burst_bytes = c->burst_bytes;
    int ok = s->node && s->wlink && link_fifo_init(&s->btl, c->queue_pkts, c->bottleneck_mbps / 8.0) &&
             link_fifo_init(&s->ps_link, c->ps_queue_pkts, c->ps_mbps / 8.0);
    for (int w = 0; ok && w < c->n_workers; w++)
        ok = link_fifo_init(&s->wlink[w], c->worker_queue_pkts, c->worker_mbps / 8.0);
    if (!ok) { sim_free(s); snprintf(err, err_len, "out of memory for %d workers.", c->n_workers); return NULL; }
    for (int k = 0; k < s->n; k++) {
        s->node[k].ep = eps[k];
        s->node[k].run_at = NEVER_US;
        struct ge_chain *chain = &s->node[k].loss;
        chain->rng = c->seed * 0x9E3779B97F4A7C15ull + (uint64_t)k + 1;
        /* The chain starts in its stationary state, as the eBPF program's restart does. */
        double pi_bad = c->p_gb > 0 ? c->p_gb / (c->p_gb + c->p_bg) : 0;
        chain->bad = ltp_uniform(&chain->rng) < pi_bad;
    }
    return s;
}

void sim_free(sim_t *s)
{
    if (!s) return;
    for (int i = 0; i < s->q.n; i++) free(s->q.ev[i].data);
    free(s->q.ev);
    free(s->btl.dep);
    free(s->ps_link.dep);
    if (s->wlink) for (int w = 0; w < s->c.n_workers; w++) free(s->wlink[w].dep);
    free(s->wlink);
    free(s->node);
    free(s);
}

uint64_t sim_now(const sim_t *s) { return s->now; }
void sim_app_timer(sim_t *s, uint64_t at_us) { s->app_at = at_us ? at_us : NEVER_US; }
const sim_counters_t *sim_counters(const sim_t *s) { return &s->k; }

uint64_t sim_in_flight(const sim_t *s)
{
    uint64_t n = 0;
    for (int i = 0; i < s->q.n; i++) n += s->q.ev[i].kind != EV_RUN;
    return n;
}

size_t sim_peak_bytes(const sim_t *s)
{
    size_t q = (size_t)(s->c.queue_pkts + s->c.ps_queue_pkts + s->c.n_workers * s->c.worker_queue_pkts);
    return (size_t)s->q.peak * (sizeof(ev_t) + 1514) + q * sizeof(uint64_t) + (size_t)s->n * sizeof(node_t);
}

int sim_run(sim_t *s, uint64_t limit_us, sim_hook_fn hook, void *arg)
{
    uint64_t end = s->now + limit_us;
    for (;;) {
        uint64_t next = s->q.n ? s->q.ev[0].at : NEVER_US;
        if (s->app_at != NEVER_US && s->app_at < next) {   /* the application's timer first */
            if (s->app_at > end) { s->now = end; return 0; }
            if (s->app_at > s->now) s->now = s->app_at;
            s->app_at = NEVER_US;
            if (hook(s, arg, SIM_HOOK_APP, -1, -1)) return 1;
            continue;
        }
        if (next == NEVER_US || next > end) { s->now = end; return 0; }
        ev_t e = evq_pop(&s->q);
        s->now = e.at;
        s->k.events++;
        int stop = 0;
        if (e.kind == EV_SWITCH) {
            to_ps(s, e.node, e.data, e.len);
        } else if (e.kind == EV_DELIVER) {
            s->k.delivered++;
            uint64_t t_in = e.node == 0 ? mono_ns() : 0;
            s->ops.input(s->node[e.node].ep, e.slot, e.data, (size_t)e.len, s->now);
            if (e.node == 0) { s->k.ps_cpu_ns += mono_ns() - t_in; s->k.ps_datagrams++; }
            stop = hook(s, arg, SIM_HOOK_INPUT, e.node, e.slot);
            sim_kick(s, e.node);   /* the datagram wakes the thread, late as any wake-up */
        } else if (e.kind == EV_RUN && e.at == s->node[e.node].run_at) {
            s->node[e.node].run_at = NEVER_US;
            run_node(s, e.node);
            stop = hook(s, arg, SIM_HOOK_RUN, e.node, -1);
        }
        free(e.data);
        if (stop) return 1;
    }
}
