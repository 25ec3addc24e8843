/* test_core.c: unit tests of the sans-IO LTP core over a seeded simulated network.
 *
 * Run with `make -C transports/native test` (or test-asan). The simulator moves datagrams between
 * cores with per-link random loss, propagation delay, optional jitter (reordering), duplication,
 * and an optional bottleneck (rate + drop-tail queue) in front of the receiver. With a bottleneck
 * the model follows the emulated incast: a datagram occupies the link as a 1514-byte Ethernet
 * frame (payload + 42 bytes), and random loss strikes at the receiving host's ingress, after the
 * queue, so a lost packet still used the link. `egress_bytes_per_us` adds a drop-tail FIFO
 * behind node 0 toward every worker (the PS's own link, which a broadcast shares).
 * `rx_poll_us` makes node 0 read its socket in batches at randomly jittered instants, as a busy
 * receiver thread does. Time is virtual, so the
 * tests are deterministic and fast. Exit status is non-zero if any check fails.
 */
#define _POSIX_C_SOURCE 200809L   /* strtok_r for the LTP_CFG debugging hook */
#include "ltp_internal.h"   /* the shared random generator and the wire offsets */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "../sim/event_heap.h"   /* the event queue, shared with the simulator */
#include "../sim/sim_link.h"     /* the links and host effects, shared with the simulator */

/* ------------------------------------------------------------------ simulator */
#define MAXN 9

typedef struct { uint64_t at, seq; int dst, slot, len; uint8_t *data; } ev_t;
EVENT_HEAP(evq, ev_t)

typedef struct {
    double loss, dup;                 /* per datagram, every direction */
    uint64_t delay_us, jitter_us;
    double bottleneck_bytes_per_us;   /* 0: none; else shared queue in front of node 0 */
    int queue_pkts;
    double burst_bytes;               /* 0: the link sends frame after frame; else a token bucket
                                         with this burst allowance, as Mininet's HTB (15 kB) */
    uint64_t rx_poll_us;              /* 0: node 0 sees each datagram on arrival; else in batches */
    uint64_t wake_mean_us;            /* 0: a node acts the instant it is due; else that late on
                                         average (exponential), as threads of a busy machine do */
    double egress_bytes_per_us;       /* 0: none; else shared FIFO from node 0 to every worker */
    int egress_queue_pkts;
    int cut_node;                     /* 0: none; else every datagram to or from it is lost */
    int egress_refuse;                /* 0: a full egress FIFO drops silently (a kernel without
                                         IP_RECVERR); 1: it refuses, and node 0 keeps the datagram
                                         and offers it again once there is room (ENOBUFS seen) */
    double worker_bytes_per_us;       /* 0: none; else each worker's own link (a FIFO of
                                         worker_queue_pkts) in front of the bottleneck */
    int worker_queue_pkts;
    uint64_t seed;
} netcfg_t;

typedef struct {
    netcfg_t nc;
    int n;                      /* node 0 = server, 1..n-1 = workers */
    ltp_core_t *core[MAXN];
    evq_t q;                    /* events in flight, earliest first (ties: emission order) */
    uint64_t ready[MAXN], wake_rng;   /* with wake_mean_us: when each node next gets to run */
    uint64_t now, rng;
    link_fifo_t btl;            /* the bottleneck queue in front of node 0 */
    link_bucket_t tb;           /* its shaper (burst_bytes 0: none) */
    uint64_t bottleneck_bytes, q_drops;
    link_fifo_t egress;         /* the egress FIFO behind node 0 */
    uint64_t eq_drops, eq_refused;
    uint8_t held[LTP_MAX_DATAGRAM];   /* node 0's datagram the egress FIFO refused */
    int held_len, held_slot;
    link_fifo_t wlink[MAXN];    /* each worker's own link (worker_bytes_per_us) */
    uint64_t wq_drops;
    uint64_t app_wake_us;       /* a scenario's own timer (e.g. a worker's compute ends) */
    uint64_t rtx_sent[MAXN];    /* DATA sent flagged RETRANSMIT, per node */
    uint64_t rand_drops;        /* copies the random loss took */
    uint64_t data_lost[2];      /* DATA copies lost anywhere: [0] from the PS, [1] from workers */
    int trace;                  /* LTP_SIM_TRACE: print queue drops (1) and hints (2) */
    int gone[MAXN];             /* the node's process exited: it neither sends nor receives */
    int drop_close_from;        /* drop the next drop_close_n CLOSE datagrams node this sends */
    int drop_close_n;
    /* trace of DATA sent per (sender node): the last time a DATA of message `watch_id` left */
    uint32_t watch_id;
    uint64_t watch_last_data_us[MAXN];
    /* ACKs node 0 sent, and the rate hints they carried (kbit/s) */
    uint64_t acks_from_server, hinted_from_server;
    double hint_kbps_sum;
} sim_t;

static void heap_push(sim_t *s, ev_t e)
{
    if (evq_push(&s->q, e)) { fprintf(stderr, "test_core: out of memory for events\n"); exit(2); }
}

/* The default configuration without authentication: most tests hand-craft datagrams. The auth
 * tests turn it on and give every core a key (sim_key). */
static ltp_config_t base_cfg(void)
{
    ltp_config_t c;
    ltp_config_default(&c);
    c.auth = 0;
    return c;
}

/* n nodes: node 0 is the server (peers: workers), node k the worker of rank k-1 (peer: server). */
static void sim_init(sim_t *s, int n, const ltp_config_t *server_cfg, const ltp_config_t *worker_cfg, netcfg_t nc)
{
    memset(s, 0, sizeof *s);
    s->nc = nc;
    s->n = n;
    s->rng = nc.seed;
    s->wake_rng = nc.seed ^ 0x5DEECE66Dull;
    s->watch_id = UINT32_MAX;
    s->drop_close_from = -1;
    if (getenv("LTP_SIM_TRACE")) s->trace = atoi(getenv("LTP_SIM_TRACE"));
    s->tb.burst_bytes = nc.burst_bytes;
    int ok = 1;
    if (nc.bottleneck_bytes_per_us > 0) ok &= link_fifo_init(&s->btl, nc.queue_pkts, nc.bottleneck_bytes_per_us);
    if (nc.egress_bytes_per_us > 0) ok &= link_fifo_init(&s->egress, nc.egress_queue_pkts, nc.egress_bytes_per_us);
    for (int k = 1; k < n && nc.worker_bytes_per_us > 0; k++)
        ok &= link_fifo_init(&s->wlink[k], nc.worker_queue_pkts, nc.worker_bytes_per_us);
    if (!ok) { fprintf(stderr, "test_core: out of memory for links\n"); exit(2); }
    s->core[0] = ltp_core_new(server_cfg, LTP_RANK_SERVER);
    for (int k = 1; k < n; k++) {
        s->core[k] = ltp_core_new(worker_cfg, (uint16_t)(k - 1));
        ltp_core_add_peer(s->core[k], LTP_RANK_SERVER);
        ltp_core_add_peer(s->core[0], (uint16_t)(k - 1));
    }
}

static void sim_free(sim_t *s)
{
    for (int k = 0; k < s->n; k++) ltp_core_free(s->core[k]);
    for (int i = 0; i < s->q.n; i++) free(s->q.ev[i].data);
    free(s->q.ev);
    free(s->btl.dep);
    free(s->egress.dep);
    for (int k = 0; k < MAXN; k++) free(s->wlink[k].dep);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The rest of a copy's path once it left the sender's own link: the PS's egress FIFO, the
 * bottleneck queue toward node 0, random loss at the receiver's ingress, delay. */
static void sim_deliver(sim_t *s, int src, int dst, int dst_slot, const uint8_t *b, int len)
{
    int queued = dst == 0 && s->nc.bottleneck_bytes_per_us > 0;
    int is_data = b[WIRE_TYPE] == LTP_T_DATA;
    if (s->gone[dst]) return;
    uint64_t eq_at = 0;
    if (src == 0 && s->nc.egress_bytes_per_us > 0) {   /* the PS's own link comes first */
        eq_at = link_fifo_put(&s->egress, s->now, len + 42);
        if (eq_at == LINK_NEVER) { s->eq_drops++; s->data_lost[0] += is_data; return; }
    }
    if (!queued && ltp_uniform(&s->rng) < s->nc.loss) { s->rand_drops++; s->data_lost[src != 0] += is_data; return; }
    uint64_t at = s->now + s->nc.delay_us;
    if (s->nc.jitter_us) at += (uint64_t)(ltp_uniform(&s->rng) * (double)s->nc.jitter_us);
    if (queued) {
        /* Ethernet 14 + IPv4 20 + UDP 8: a 1472-byte datagram is a 1514-byte frame. */
        uint64_t dep = link_shaped_put(&s->btl, &s->tb, s->now, len + 42);
        if (dep == LINK_NEVER) {
            s->q_drops++;
            s->data_lost[1] += is_data;
            if (s->trace) printf("      %9.3f drop from w%d\n", (double)s->now / 1000, src - 1);
            return;
        }
        s->bottleneck_bytes += (uint64_t)len;
        at = dep + s->nc.delay_us;
        if (ltp_uniform(&s->rng) < s->nc.loss) { s->rand_drops++; s->data_lost[1] += is_data; return; }   /* at the receiver's ingress */
    }
    if (eq_at) at = eq_at + s->nc.delay_us;
    if (dst == 0 && s->nc.rx_poll_us) at = link_poll_instant(s->nc.rx_poll_us, s->nc.seed, at);
    ev_t e = {at, 0, dst, dst_slot, len, malloc((size_t)len)};
    memcpy(e.data, b, (size_t)len);
    heap_push(s, e);
}

/* The PS's egress FIFO is full (and refuses rather than drops). */
static int egress_full(sim_t *s)
{
    if (!s->nc.egress_refuse || s->nc.egress_bytes_per_us <= 0) return 0;
    return link_fifo_full(&s->egress, s->now);
}

/* Returns -1 if node 0's egress FIFO refused the datagram (nothing was sent), else 0. */
static int sim_emit(sim_t *s, int src, int slot, const uint8_t *b, int len)
{
    if (src == 0 && egress_full(s)) { s->eq_refused++; return -1; }
    int dst = src == 0 ? slot + 1 : 0;
    int dst_slot = src == 0 ? 0 : src - 1;
    if (src == 0 && len >= (int)LTP_ACK_HDR_BYTES && b[WIRE_TYPE] == LTP_T_ACK) {
        uint32_t hint = le32(b + WIRE_ACK_HINT);
        s->acks_from_server++;
        if (hint) { s->hinted_from_server++; s->hint_kbps_sum += hint; }
        if (s->trace > 1) printf("      %9.3f ack to w%d hint %.1f\n", (double)s->now / 1000, slot, hint / 1000.0);
    }
    if (len >= (int)LTP_HDR_BYTES && b[WIRE_TYPE] == LTP_T_DATA) {
        uint32_t id = le32(b + WIRE_MSG_ID);
        if (id == s->watch_id) s->watch_last_data_us[src] = s->now;
        if (b[WIRE_FLAGS] & LTP_F_RETRANSMIT) s->rtx_sent[src]++;
    }
    if (src == s->drop_close_from && s->drop_close_n > 0 && b[WIRE_TYPE] == LTP_T_CLOSE) {
        s->drop_close_n--;   /* a scenario's targeted loss */
        return 0;
    }
    if (s->nc.cut_node && (src == s->nc.cut_node || dst == s->nc.cut_node)) return 0;   /* lost */
    int copies = 1 + (ltp_uniform(&s->rng) < s->nc.dup);
    for (int c = 0; c < copies; c++) {
        if (src == 0 || s->nc.worker_bytes_per_us <= 0) { sim_deliver(s, src, dst, dst_slot, b, len); continue; }
        /* The worker's own link first: the copy reaches the switch when it has left it. */
        uint64_t dep = link_fifo_put(&s->wlink[src], s->now, len + 42);
        if (dep == LINK_NEVER) { s->wq_drops++; continue; }
        ev_t e = {dep, 0, -src, dst_slot, len, malloc((size_t)len)};   /* dst < 0: at the switch */
        memcpy(e.data, b, (size_t)len);
        heap_push(s, e);
    }
    return 0;
}

typedef int (*sim_done_fn)(sim_t *s, void *arg);

/* Advance virtual time until done() or `limit_us` passes. Returns 1 if done. */
static int sim_run(sim_t *s, uint64_t limit_us, sim_done_fn done, void *arg)
{
    uint8_t buf[LTP_MAX_DATAGRAM];
    uint64_t end = s->now + limit_us;
    uint64_t mean = s->nc.wake_mean_us;
    for (int k = 0; k < s->n; k++) s->ready[k] = s->now;   /* an API call kicks every thread */
    for (;;) {
        for (int k = 0; k < s->n; k++) {
            if (s->gone[k] || (mean && s->now < s->ready[k])) continue;
            int slot, len;
            if (k == 0 && s->held_len) {   /* the driver offers the refused datagram first */
                if (sim_emit(s, 0, s->held_slot, s->held, s->held_len) < 0) continue;
                s->held_len = 0;
            }
            while ((len = ltp_core_poll_tx(s->core[k], s->now, buf, sizeof buf, &slot)) > 0) {
                if (sim_emit(s, k, slot, buf, len) < 0) {   /* keep it; poll no more until room */
                    memcpy(s->held, buf, (size_t)len);
                    s->held_len = len;
                    s->held_slot = slot;
                    break;
                }
            }
            if (len < 0) CHECK(len == 0, "poll_tx error %d", len);
            if (mean) {
                uint64_t t = ltp_core_next_timeout(s->core[k], s->now);
                s->ready[k] = t == NEVER ? NEVER : t + link_wake_late_us(&s->wake_rng, mean);
            }
        }
        if (done && done(s, arg)) return 1;
        uint64_t next = NEVER;
        if (s->q.n) next = s->q.ev[0].at;
        for (int k = 0; k < s->n; k++) {
            if (s->gone[k] || (k == 0 && s->held_len)) continue;   /* held: it waits for room */
            uint64_t t = mean ? s->ready[k] : ltp_core_next_timeout(s->core[k], s->now);
            if (t < next) next = t;
        }
        if (s->app_wake_us > s->now && s->app_wake_us < next) next = s->app_wake_us;
        if (s->held_len && s->egress.len && s->egress.dep[s->egress.head] < next) next = s->egress.dep[s->egress.head];
        if (next == NEVER || next > end) { s->now = end; return done ? done(s, arg) : 1; }
        s->now = next > s->now ? next : s->now + 1;
        while (s->q.n && s->q.ev[0].at <= s->now) {
            ev_t e = evq_pop(&s->q);
            if (e.dst < 0) {   /* left a worker's own link: on to the switch */
                sim_deliver(s, -e.dst, 0, e.slot, e.data, e.len);
                free(e.data);
                continue;
            }
            if (!s->gone[e.dst]) ltp_core_input(s->core[e.dst], e.slot, e.data, (size_t)e.len, s->now);
            if (mean) {   /* the datagram wakes the thread, late as any wake-up */
                uint64_t t = s->now + link_wake_late_us(&s->wake_rng, mean);
                if (t < s->ready[e.dst]) s->ready[e.dst] = t;
            }
            free(e.data);
        }
    }
}

/* ------------------------------------------------------------------ scenario helpers */
typedef struct { int n_workers; uint32_t msg_id; } gather_t;

static int gather_done(sim_t *s, void *arg)
{
    gather_t *g = arg;
    for (int w = 0; w < g->n_workers; w++) {
        if (ltp_core_rx_ready(s->core[0], w, g->msg_id, 0) != 1) return 0;
        if (ltp_core_send_status(s->core[w + 1], 0, g->msg_id, 0, NULL, s->now) != 1) return 0;
    }
    return 1;
}

static float *make_vec(uint32_t n, uint64_t seed)
{
    float *v = malloc(n * sizeof *v);
    for (uint32_t i = 0; i < n; i++) v[i] = (float)(ltp_uniform(&seed) * 2 - 1);
    return v;
}

typedef struct {
    double frac, threshold;
    int reason, critical_ok, values_ok, mask_ok;
    uint64_t elapsed_us, retransmits_rx, duplicates;
    ltp_send_stats_t send;
} outcome_t;

/* Every worker pushes message msg_id (n_floats floats) to the server; returns per-worker outcomes. */
static int push_round(sim_t *s, uint32_t msg_id, uint32_t n_floats, uint32_t critical_bytes, uint64_t limit_us,
                      outcome_t *out)
{
    int nw = s->n - 1;
    float *vec[MAXN];
    for (int w = 0; w < nw; w++) {
        vec[w] = make_vec(n_floats, msg_id * 131u + (uint64_t)w);
        int rc = ltp_core_send(s->core[w + 1], 0, msg_id, 0, vec[w], n_floats * 4, critical_bytes, s->now);
        CHECK(rc == 0, "send rc %d", rc);
    }
    gather_t g = {nw, msg_id};
    int ok = sim_run(s, limit_us, gather_done, &g);
    float *got = malloc(n_floats * sizeof *got);
    uint8_t *mask = malloc(n_floats);
    for (int w = 0; w < nw && ok; w++) {
        ltp_msg_stats_t st;
        int rc = ltp_core_rx_take(s->core[0], w, msg_id, 0, got, n_floats * 4, mask, &st);
        CHECK(rc == 0, "take rc %d", rc);
        outcome_t *o = &out[w];
        memset(o, 0, sizeof *o);
        uint64_t ones = 0;
        o->values_ok = o->mask_ok = o->critical_ok = 1;
        for (uint32_t i = 0; i < n_floats; i++) {
            ones += mask[i];
            if (mask[i] > 1) o->mask_ok = 0;
            if (mask[i] && memcmp(&got[i], &vec[w][i], 4) != 0) o->values_ok = 0;
            if (!mask[i] && got[i] != 0.0f) o->values_ok = 0;   /* holes are zero */
            if (i * 4 < critical_bytes && !mask[i]) o->critical_ok = 0;
        }
        o->frac = (double)st.received_bytes / (double)st.total_bytes;
        if (fabs(o->frac - (double)ones / n_floats) > 1e-12) o->mask_ok = 0;
        o->threshold = st.threshold_frac;
        o->reason = (int)st.close_reason;
        o->elapsed_us = st.elapsed_us;
        o->retransmits_rx = st.retransmits;
        o->duplicates = st.duplicates;
        ltp_core_send_status(s->core[w + 1], 0, msg_id, 0, &o->send, s->now);
        ltp_core_send_release(s->core[w + 1], 0, msg_id, 0);
    }
    for (int w = 0; w < nw; w++) free(vec[w]);
    free(got);
    free(mask);
    return ok;
}

#define N_FLOATS 109386u   /* 437,544 bytes: the gradient size of the reference model */

/* ------------------------------------------------------------------ tests */
static void test_full_delivery(void)
{
    ltp_config_t c = base_cfg();
    sim_t s;
    sim_init(&s, 2, &c, &c, (netcfg_t){.delay_us = 100, .seed = 1});
    outcome_t o;
    int ok = push_round(&s, 1, N_FLOATS, 0, 2000000, &o);
    CHECK(ok, "message not delivered");
    CHECK(o.frac == 1.0, "frac %f", o.frac);
    CHECK(o.values_ok && o.mask_ok, "values/mask wrong");
    CHECK(o.reason == LTP_CLOSE_COMPLETE, "reason %d", o.reason);
    CHECK(o.send.retransmits == 0, "retransmits %llu at no loss", (unsigned long long)o.send.retransmits);
    CHECK(o.send.done == LTP_SEND_CLOSED || o.send.done == LTP_SEND_ALL_ACKED, "send done %llu",
          (unsigned long long)o.send.done);
    sim_free(&s);
}

static void test_orders(void)
{
    for (uint32_t order = 0; order < 3; order++) {
        ltp_config_t c = base_cfg();
        c.send_order = order;
        sim_t s;
        sim_init(&s, 2, &c, &c, (netcfg_t){.delay_us = 50, .loss = 0.05, .seed = 7 + order});
        c.threshold_min = c.threshold_max = 1.0;   /* reliable: every order must deliver all */
        ltp_core_set_policy(s.core[0], 0, 1.0, 1.0);
        outcome_t o;
        int ok = push_round(&s, 3, N_FLOATS, 4096, 5000000, &o);
        CHECK(ok && o.frac == 1.0 && o.values_ok && o.mask_ok, "order %u: ok %d frac %f", order, ok, o.frac);
        sim_free(&s);
    }
}

static void test_lossy(double loss)
{
    ltp_config_t c = base_cfg();
    sim_t s;
    sim_init(&s, 2, &c, &c, (netcfg_t){.delay_us = 250, .loss = loss, .seed = (uint64_t)(loss * 1000) + 11});
    /* p_hat needs loss_window messages of history before the threshold moves */
    for (uint32_t it = 1; it <= c.loss_window + 2; it++) {
        outcome_t o;
        uint64_t start = s.now;
        int ok = push_round(&s, it, N_FLOATS, 0, 3000000, &o);
        CHECK(ok, "loss %.2f it %u: not closed", loss, it);
        if (!ok) break;
        CHECK(o.values_ok && o.mask_ok, "loss %.2f it %u: values/mask wrong", loss, it);
        CHECK(o.frac >= c.threshold_min, "loss %.2f it %u: frac %f", loss, it, o.frac);
        CHECK(o.frac >= o.threshold || o.reason == LTP_CLOSE_COMPLETE, "loss %.2f: frac %f < th %f", loss, o.frac,
              o.threshold);
        CHECK(o.reason == LTP_CLOSE_COMPLETE || o.reason == LTP_CLOSE_EARLY,
              "loss %.2f it %u: closed by %d (the hard cap), not before the deadline", loss, it, o.reason);
        CHECK(o.elapsed_us < c.max_wait_us, "loss %.2f: elapsed %llu", loss, (unsigned long long)o.elapsed_us);
        if (it == 1 || it == c.loss_window + 2)
            printf("  loss %.2f it %u: frac %.4f threshold %.4f reason %d close after %.2f ms, round %.2f ms, rtx %llu\n",
                   loss, it, o.frac, o.threshold, o.reason, (double)o.elapsed_us / 1000, (double)(s.now - start) / 1000,
                   (unsigned long long)o.send.retransmits);
        CHECK(s.now - start < 200000, "loss %.2f it %u: round took %llu us", loss, it,
              (unsigned long long)(s.now - start));
    }
    double th = ltp_core_threshold(s.core[0], 0, 0);
    CHECK(th >= c.threshold_min && th <= c.threshold_max, "threshold %f out of bounds", th);
    if (loss >= 0.05) CHECK(th < c.threshold_max, "loss %.2f: threshold did not adapt (%f)", loss, th);
    sim_free(&s);
}

static void test_fixed_reliable(void)
{
    ltp_config_t c = base_cfg();
    c.threshold_min = c.threshold_max = 1.0;
    sim_t s;
    sim_init(&s, 2, &c, &c, (netcfg_t){.delay_us = 200, .loss = 0.10, .seed = 5});
    for (uint32_t it = 1; it <= 3; it++) {
        outcome_t o;
        int ok = push_round(&s, it, N_FLOATS, 0, 5000000, &o);
        CHECK(ok && o.frac == 1.0 && o.values_ok && o.reason == LTP_CLOSE_COMPLETE, "reliable it %u frac %f", it,
              o.frac);
    }
    CHECK(ltp_core_threshold(s.core[0], 0, 0) == 1.0, "fixed threshold moved");
    sim_free(&s);
}

static void test_no_rtx_after_close(void)
{
    ltp_config_t c = base_cfg();
    c.threshold_min = 0.5;
    c.threshold_max = 0.6;   /* close early with many packets still missing */
    sim_t s;
    sim_init(&s, 2, &c, &c, (netcfg_t){.delay_us = 300, .loss = 0.30, .seed = 99});
    s.watch_id = 42;
    outcome_t o;
    int ok = push_round(&s, 42, N_FLOATS, 0, 3000000, &o);
    CHECK(ok && o.reason == LTP_CLOSE_EARLY && o.frac < 1.0, "expected an early close, got reason %d frac %f",
          o.reason, o.frac);
    CHECK(o.send.done == LTP_SEND_CLOSED, "sender done by %llu", (unsigned long long)o.send.done);
    /* Send the message again under a new id and keep the network busy: id 42 must stay silent. */
    uint64_t closed_at = s.now;
    s.watch_last_data_us[1] = 0;
    int ok2 = push_round(&s, 43, N_FLOATS, 0, 3000000, &o);
    sim_run(&s, 200000, NULL, NULL);
    CHECK(ok2, "second message not delivered");
    CHECK(s.watch_last_data_us[1] == 0, "DATA of closed message sent at %llu (closed at %llu)",
          (unsigned long long)s.watch_last_data_us[1], (unsigned long long)closed_at);

    /* Directly: with packets lost in flight, a CLOSE stops every retransmission and probe. */
    ltp_core_t *tx = ltp_core_new(&c, 0);
    ltp_core_add_peer(tx, LTP_RANK_SERVER);
    float *v = make_vec(4096, 3);
    CHECK(ltp_core_send(tx, 0, 7, 0, v, 4096 * 4, 0, 0) == 0, "send");
    uint8_t b[LTP_MAX_DATAGRAM];
    int slot, n, sent = 0;
    uint64_t t = 0;
    uint8_t echo[8];   /* the first DATA's timestamp and tx_seq, which a genuine CLOSE may echo */
    while ((n = ltp_core_poll_tx(tx, t, b, sizeof b, &slot)) > 0 || sent < 12) {   /* all "lost" */
        if (n > 0 && sent++ == 0) { memcpy(echo, b + WIRE_DATA_TS, 4); memcpy(echo + 4, b + WIRE_DATA_TX_SEQ, 4); }
        else if (n <= 0) t = ltp_core_next_timeout(tx, t);
    }
    uint8_t cl[LTP_CLOSE_BYTES] = {0x4C, 0x50, LTP_VERSION, LTP_T_CLOSE, 0, 0, 0xFF, 0xFF, 1, 0, 0, 0, 7, 0, 0, 0,
                                   0, 0, 0, 0, 3, 0, 0, 0, 12, 0, 0, 0, LTP_CLOSE_EARLY, 0, 0, 0};
    memcpy(cl + WIRE_CLOSE_ECHO_TS, echo, 8);
    CHECK(ltp_core_input(tx, 0, cl, sizeof cl, t) == 0, "CLOSE rejected");
    CHECK(ltp_core_send_status(tx, 0, 7, 0, NULL, t) == 1, "send not done after CLOSE");
    int after = 0;
    for (uint64_t k = 0; k < 200; k++) {
        t += 10000;   /* well past every PTO */
        while ((n = ltp_core_poll_tx(tx, t, b, sizeof b, &slot)) > 0) if (b[WIRE_TYPE] == LTP_T_DATA) after++;
    }
    CHECK(after == 0, "%d DATA datagrams after CLOSE", after);
    CHECK(ltp_core_next_timeout(tx, t) == UINT64_MAX, "timers still armed after CLOSE");
    free(v);
    ltp_core_free(tx);
    sim_free(&s);
}

/* A message that stays open below its threshold after its close deadlines asks for no timer: a
 * driver sleeping until next_timeout would otherwise wake over and over while it waits (the
 * driver once polled every 50 us that way). It still closes on the DATA that lifts it over the
 * threshold. */
static void test_wait_below_threshold_no_timer(void)
{
    ltp_config_t c = base_cfg();
    c.threshold_min = c.threshold_max = 0.9;
    c.max_wait_us = 5000;
    ltp_core_t *tx = ltp_core_new(&c, 0), *rx = ltp_core_new(&c, LTP_RANK_SERVER);
    ltp_core_add_peer(tx, LTP_RANK_SERVER);
    ltp_core_add_peer(rx, 0);
    float *v = make_vec(4096, 5);   /* 16,384 bytes: 12 packets of 1,420 */
    CHECK(ltp_core_send(tx, 0, 9, 0, v, 4096 * 4, 0, 0) == 0, "send");
    static uint8_t b[LTP_MAX_DATAGRAM], held[LTP_MAX_DATAGRAM];
    int slot, n, data = 0, held_len = 0;
    uint64_t t = 0;
    while (data < 12) {   /* the first pass, without packets 1 and 2: 10/12 < 0.9 */
        if ((n = ltp_core_poll_tx(tx, t, b, sizeof b, &slot)) <= 0) { t = ltp_core_next_timeout(tx, t); continue; }
        if (b[WIRE_TYPE] != LTP_T_DATA) continue;
        data++;
        uint32_t idx = b[WIRE_DATA_INDEX] | (uint32_t)b[WIRE_DATA_INDEX + 1] << 8;
        if (idx == 1) { memcpy(held, b, (size_t)n); held_len = n; }
        if (idx != 1 && idx != 2) ltp_core_input(rx, 0, b, (size_t)n, t);
    }
    t += 100000;   /* past the grace period and max_wait */
    while (ltp_core_poll_tx(rx, t, b, sizeof b, &slot) > 0) {}   /* due ACKs; evaluates the close rule */
    CHECK(ltp_core_rx_ready(rx, 0, 9, 0) == 0, "closed below its threshold");
    CHECK(ltp_core_next_timeout(rx, t) > t, "a timer due at once while the message waits for DATA");
    CHECK(held_len > 0 && ltp_core_input(rx, 0, held, (size_t)held_len, t + 10) == 0, "held packet");
    CHECK(ltp_core_rx_ready(rx, 0, 9, 0) == 1, "not closed once over its threshold");
    free(v);
    ltp_core_free(tx);
    ltp_core_free(rx);
}

static void test_reorder_duplicate(void)
{
    ltp_config_t c = base_cfg();
    c.send_order = LTP_ORDER_RANDOM;
    sim_t s;
    sim_init(&s, 2, &c, &c, (netcfg_t){.delay_us = 100, .jitter_us = 800, .dup = 0.05, .seed = 3});
    ltp_core_set_policy(s.core[0], 0, 1.0, 1.0);
    outcome_t o;
    int ok = push_round(&s, 9, N_FLOATS, 0, 5000000, &o);
    CHECK(ok && o.frac == 1.0 && o.values_ok && o.mask_ok, "reorder: ok %d frac %f", ok, o.frac);
    CHECK(o.duplicates > 0, "no duplicates seen");
    uint64_t st[LTP_S__COUNT];
    ltp_core_stats(s.core[0], st, LTP_S__COUNT);
    CHECK(st[LTP_S_DUPLICATES] >= o.duplicates, "duplicates not counted");
    sim_free(&s);
}

static void test_critical(void)
{
    ltp_config_t c = base_cfg();
    c.threshold_min = 0.5;
    c.threshold_max = 0.6;
    sim_t s;
    sim_init(&s, 2, &c, &c, (netcfg_t){.delay_us = 200, .loss = 0.25, .seed = 21});
    uint32_t crit = 40 * ltp_chunk_bytes(&c) - 100;   /* 40 critical packets */
    for (uint32_t it = 1; it <= 5; it++) {
        outcome_t o;
        int ok = push_round(&s, it, N_FLOATS, crit, 3000000, &o);
        CHECK(ok && o.critical_ok, "it %u: critical span incomplete", it);
        CHECK(o.values_ok, "it %u: values wrong", it);
    }
    sim_free(&s);
}

static void test_segment_policy(void)
{
    /* One core, two policies: segment 1 is reliable, segment 0 loss tolerant. */
    ltp_config_t c = base_cfg();
    c.threshold_min = 0.5;
    c.threshold_max = 0.5;
    ltp_core_t *rx = ltp_core_new(&c, LTP_RANK_SERVER);
    ltp_core_add_peer(rx, 0);
    CHECK(ltp_core_set_policy(rx, 1, 1.0, 1.0) == 0, "set policy");
    CHECK(ltp_core_threshold(rx, 0, 0) == 0.5 && ltp_core_threshold(rx, 0, 1) == 1.0, "policy lookup");
    CHECK(ltp_core_set_policy(rx, 2, 0.9, 0.8) == LTP_EINVAL, "inverted policy accepted");
    ltp_core_free(rx);
}

/* Build a valid DATA datagram by hand so every field can be corrupted one at a time. */
static size_t mk_data(uint8_t *b, uint16_t rank, uint32_t session, uint32_t index, uint32_t count, uint32_t chunk,
                      uint32_t total)
{
    uint32_t off = index * chunk, len = index + 1 < count ? chunk : total - off;
    memset(b, 0, LTP_DATA_HDR_BYTES + len);
    b[WIRE_MAGIC] = 0x4C; b[WIRE_MAGIC + 1] = 0x50; b[WIRE_VERSION] = LTP_VERSION; b[WIRE_TYPE] = LTP_T_DATA;
    b[WIRE_SENDER] = (uint8_t)rank; b[WIRE_SENDER + 1] = (uint8_t)(rank >> 8);
    memcpy(b + WIRE_SESSION, &session, 4);
    uint32_t msg = 5;
    memcpy(b + WIRE_MSG_ID, &msg, 4);
    memcpy(b + WIRE_DATA_INDEX, &index, 4); memcpy(b + WIRE_DATA_COUNT, &count, 4);
    memcpy(b + WIRE_DATA_OFFSET, &off, 4); memcpy(b + WIRE_DATA_TOTAL, &total, 4);
    uint16_t pl = (uint16_t)len;
    memcpy(b + WIRE_DATA_LEN, &pl, 2);
    return LTP_DATA_HDR_BYTES + len;
}

/* Polls a by reference (into a buffer of ref_cap bytes) and b copied, both sending the same
 * message, until each gave n DATA; the copies land in dg and lens. 1 if every pair is the same
 * datagram: by reference, the header in the buffer, then the payload, then the tag_bytes of tag
 * the core wrote behind the header. */
static int data_by_ref_as_copied(ltp_core_t *a, ltp_core_t *b, size_t ref_cap, uint32_t tag_bytes, int n,
                                 uint8_t (*dg)[LTP_MAX_DATAGRAM], int *lens, uint64_t *t)
{
    static uint8_t pb[LTP_MAX_DATAGRAM];
    uint8_t *pa = malloc(ref_cap);   /* its own size, so ASan sees a write past it */
    int n_dg = 0, slot, same = 1;
    while (n_dg < n) {
        const uint8_t *pl;
        uint32_t plen;
        int na = ltp_core_poll_tx_ref(a, *t, pa, ref_cap, &pl, &plen, &slot);
        int nb = ltp_core_poll_tx(b, *t, pb, sizeof pb, &slot);
        if (na <= 0 || nb <= 0) { same &= na == nb; *t = ltp_core_next_timeout(a, *t); continue; }
        same &= pa[WIRE_TYPE] == LTP_T_DATA && na == (int)LTP_DATA_HDR_BYTES &&
                (uint32_t)nb == na + plen + tag_bytes && memcmp(pa, pb, (size_t)na) == 0 &&
                memcmp(pl, pb + na, plen) == 0 && memcmp(pa + na, pb + na + plen, tag_bytes) == 0;
        memcpy(dg[n_dg], pb, (size_t)nb);
        lens[n_dg++] = nb;
    }
    free(pa);
    return same;
}

/* The driver's copy-free paths give the same datagrams and the same messages as the plain ones:
 * DATA by reference (poll_tx_ref) are byte for byte what poll_tx writes; a receiver reading into
 * a posted buffer and into guessed places (input_split), with one guess gone wrong the way a
 * reordered packet makes it, takes exactly the message sent; an unposted buffer is never written
 * again; the datagram size changes only while nothing is being sent. */
static void test_copy_free_paths(void)
{
    ltp_config_t c = base_cfg();
    c.max_udp_payload_bytes = 16384;
    const uint32_t n_floats = 40000;   /* 160,000 bytes: 10 packets of 16,332 */
    float *v = make_vec(n_floats, 11);
    ltp_core_t *a = ltp_core_new(&c, 0), *b = ltp_core_new(&c, 0), *rx = ltp_core_new(&c, LTP_RANK_SERVER);
    ltp_core_add_peer(a, LTP_RANK_SERVER);
    ltp_core_add_peer(b, LTP_RANK_SERVER);
    ltp_core_add_peer(rx, 0);
    CHECK(ltp_core_datagram(a) == 16384, "datagram %u", ltp_core_datagram(a));
    CHECK(ltp_core_send(a, 0, 3, 0, v, n_floats * 4, 0, 0) == 0 && ltp_core_send(b, 0, 3, 0, v, n_floats * 4, 0, 0) == 0,
          "send");
    CHECK(ltp_core_set_datagram(a, 1472) == LTP_EBUSY, "datagram size changed while sending");
    static uint8_t pb[LTP_MAX_DATAGRAM], dg[20][LTP_MAX_DATAGRAM];
    int lens[20], slot;
    uint64_t t = 0;
    CHECK(data_by_ref_as_copied(a, b, LTP_MAX_DATAGRAM, 0, 10, dg, lens, &t),
          "DATA by reference differ from DATA copied");

    /* Receive into a posted buffer; packet 0 opens the message, 1..9 go through guesses, and the
     * guess for packet 4 receives packet 5 (reordered) before packet 4 itself arrives. */
    float *posted = malloc(n_floats * 4), *other = malloc(n_floats * 4);
    for (uint32_t i = 0; i < n_floats; i++) posted[i] = -1.0f;
    CHECK(ltp_core_rx_post(rx, 0, 3, 0, posted, n_floats * 4) == 0, "post");
    CHECK(ltp_core_input(rx, 0, dg[0], (size_t)lens[0], t) == 0, "packet 0");
    ltp_rx_guess_t g[16];
    int ng = ltp_core_rx_guess(rx, 0, g, 16);
    CHECK(ng == 9 && g[0].index == 1 && g[0].dst == (uint8_t *)posted + 16332 && g[8].len == 160000 - 9 * 16332,
          "guesses %d", ng);
    int order[9] = {1, 2, 3, 5, 4, 6, 7, 8, 9};   /* arrival order; guesses are 1..9 */
    uint8_t head[LTP_DATA_HDR_BYTES];
    for (int k = 0; k < 9; k++) {   /* the driver's scatter read: header apart, payload to guess k */
        memcpy(head, dg[order[k]], LTP_DATA_HDR_BYTES);
        memcpy(g[k].dst, dg[order[k]] + LTP_DATA_HDR_BYTES, (size_t)lens[order[k]] - LTP_DATA_HDR_BYTES);
        memcpy(dg[order[k]] + LTP_DATA_HDR_BYTES, g[k].dst, (size_t)lens[order[k]] - LTP_DATA_HDR_BYTES);
    }
    for (int k = 0; k < 9; k++) {   /* misses made whole first (as the driver does), then fed */
        const uint8_t *d = dg[order[k]];
        if ((uint32_t)order[k] == g[k].index)
            CHECK(ltp_core_input_split(rx, 0, d, LTP_DATA_HDR_BYTES, g[k].dst, (size_t)lens[order[k]] - LTP_DATA_HDR_BYTES,
                                       t, t) == 0, "in place %d", order[k]);
        else
            CHECK(ltp_core_input(rx, 0, d, (size_t)lens[order[k]], t) == 0, "whole %d", order[k]);
    }
    uint8_t *mask = malloc(n_floats);
    ltp_msg_stats_t st;
    CHECK(ltp_core_rx_ready(rx, 0, 3, 0) == 1, "not closed");
    CHECK(ltp_core_rx_take(rx, 0, 3, 0, posted, n_floats * 4, mask, &st) == 0, "take");
    CHECK(memcmp(posted, v, n_floats * 4) == 0 && st.packets == 10, "posted buffer holds the wrong message");
    CHECK(ltp_core_rx_unpost(rx, 0, 3, 0) == 0 && ltp_core_rx_unpost(rx, 0, 3, 0) == LTP_ENOTFOUND, "unpost");

    /* Unposted halfway: the buffer keeps what it had, and the message completes elsewhere. */
    ltp_core_send_release(b, 0, 3, 0);
    CHECK(ltp_core_send(b, 0, 4, 0, v, n_floats * 4, 0, t) == 0, "send 4");
    for (uint32_t i = 0; i < n_floats; i++) posted[i] = -1.0f;
    CHECK(ltp_core_rx_post(rx, 0, 4, 0, posted, n_floats * 4) == 0, "post 4");
    int fed = 0;
    while (fed < 10) {
        int n = ltp_core_poll_tx(b, t, pb, sizeof pb, &slot);
        if (n <= 0) { t = ltp_core_next_timeout(b, t); continue; }
        if (pb[WIRE_TYPE] != LTP_T_DATA) continue;
        if (fed++ == 5) {
            CHECK(ltp_core_rx_unpost(rx, 0, 4, 0) == 0, "unpost 4");
            memcpy(other, posted, n_floats * 4);
        }
        ltp_core_input(rx, 0, pb, (size_t)n, t);
    }
    CHECK(memcmp(other, posted, n_floats * 4) == 0, "an unposted buffer was written");
    CHECK(ltp_core_rx_take(rx, 0, 4, 0, other, n_floats * 4, NULL, NULL) == 0 && memcmp(other, v, n_floats * 4) == 0,
          "message 4 wrong after unposting");
    ltp_core_send_release(b, 0, 4, 0);
    CHECK(ltp_core_set_datagram(b, 1472) == 0 && ltp_core_datagram(b) == 1472, "datagram size not set when idle");
    CHECK(ltp_core_set_datagram(b, 40) == LTP_EINVAL, "datagram of 40 bytes accepted");
    free(v); free(posted); free(other); free(mask);
    ltp_core_free(a); ltp_core_free(b); ltp_core_free(rx);
}

/* The copy-free paths with auth on: a DATA sent by reference carries the same trailer as the one
 * poll_tx writes (its number and the tag over header, payload and number, behind the header in
 * buf, sent after the payload); on the split receive path the MAC covers the payload read into its
 * guessed place, so one flipped payload byte there, or in the tag, or in the header, is refused as bad_mac before
 * anything is stored, and the genuine datagram read into the same place afterwards is taken. */
static void test_copy_free_auth(void)
{
    ltp_config_t c = base_cfg();
    c.auth = 1;
    c.max_udp_payload_bytes = 16384;
    const uint32_t n_floats = 40000;   /* 160,000 bytes: 10 packets of 16,316 */
    const uint32_t chunk = 16384 - LTP_DATA_HDR_BYTES - LTP_TRAILER_BYTES;
    float *v = make_vec(n_floats, 12);
    uint8_t key[LTP_KEY_BYTES] = {7, 1, 2};
    ltp_core_t *a = ltp_core_new(&c, 0), *b = ltp_core_new(&c, 0), *rx = ltp_core_new(&c, LTP_RANK_SERVER);
    ltp_core_add_peer(a, LTP_RANK_SERVER);
    ltp_core_add_peer(b, LTP_RANK_SERVER);
    ltp_core_add_peer(rx, 0);
    ltp_core_set_peer_key(a, 0, key, sizeof key);
    ltp_core_set_peer_key(b, 0, key, sizeof key);
    ltp_core_set_peer_key(rx, 0, key, sizeof key);
    CHECK(ltp_core_expect(rx, 0, n_floats * 4, 0) == 0, "expect");
    CHECK(ltp_core_send(a, 0, 3, 0, v, n_floats * 4, 0, 0) == 0 && ltp_core_send(b, 0, 3, 0, v, n_floats * 4, 0, 0) == 0,
          "send");
    static uint8_t dg[10][LTP_MAX_DATAGRAM];
    int lens[10];
    uint64_t t = 0;
    CHECK(data_by_ref_as_copied(a, b, LTP_ETH_DATAGRAM, LTP_TRAILER_BYTES, 10, dg, lens, &t),
          "sealed DATA by reference differ from sealed DATA copied");

    float *posted = malloc(n_floats * 4);
    CHECK(ltp_core_rx_post(rx, 0, 3, 0, posted, n_floats * 4) == 0, "post");
    CHECK(ltp_core_input(rx, 0, dg[0], (size_t)lens[0], t) == 0, "packet 0");
    ltp_rx_guess_t g[16];
    int ng = ltp_core_rx_guess(rx, 0, g, 16);
    CHECK(ng == 9 && g[0].index == 1 && g[0].len == chunk, "guesses %d (len %u)", ng, ng ? g[0].len : 0);
    /* The driver's scatter read of packet 1 into guess 0: header, then the trailer behind it. */
    uint8_t head[LTP_DATA_HDR_BYTES + LTP_TRAILER_BYTES];
    const uint8_t *d1 = dg[1];
    size_t plen1 = (size_t)lens[1] - LTP_DATA_HDR_BYTES - LTP_TRAILER_BYTES;
    uint64_t st[LTP_S__COUNT];
    const size_t flips[] = {0, 1, 4093, plen1 - 1};   /* payload bytes, in place */
    int refused = 0;
    for (size_t k = 0; k < sizeof flips / sizeof flips[0]; k++) {
        memcpy(head, d1, LTP_DATA_HDR_BYTES);
        memcpy(head + LTP_DATA_HDR_BYTES, d1 + LTP_DATA_HDR_BYTES + plen1, LTP_TRAILER_BYTES);
        memcpy(g[0].dst, d1 + LTP_DATA_HDR_BYTES, plen1);
        g[0].dst[flips[k]] ^= 0x01;
        refused += ltp_core_input_split(rx, 0, head, sizeof head, g[0].dst, plen1, t, t) == LTP_EAUTH;
    }
    memcpy(head, d1, sizeof head - LTP_TRAILER_BYTES);
    memcpy(g[0].dst, d1 + LTP_DATA_HDR_BYTES, plen1);
    memcpy(head + LTP_DATA_HDR_BYTES, d1 + LTP_DATA_HDR_BYTES + plen1, LTP_TRAILER_BYTES);
    head[LTP_DATA_HDR_BYTES + LTP_PSEQ_BYTES + 3] ^= 0x80;   /* the tag */
    refused += ltp_core_input_split(rx, 0, head, sizeof head, g[0].dst, plen1, t, t) == LTP_EAUTH;
    head[LTP_DATA_HDR_BYTES + LTP_PSEQ_BYTES + 3] ^= 0x80;
    head[WIRE_DATA_TOTAL] ^= 0x04;   /* the header */
    refused += ltp_core_input_split(rx, 0, head, sizeof head, g[0].dst, plen1, t, t) == LTP_EAUTH;
    head[WIRE_DATA_TOTAL] ^= 0x04;
    ltp_core_stats(rx, st, LTP_S__COUNT);
    CHECK(refused == 6 && st[LTP_S_BAD_MAC] == 6, "altered split datagrams: %d refused, bad_mac %llu", refused,
          (unsigned long long)st[LTP_S_BAD_MAC]);
    CHECK(ltp_core_rx_frac(rx, 0, 3, 0) < 0.15, "a refused datagram was stored (%.3f)", ltp_core_rx_frac(rx, 0, 3, 0));
    CHECK(ltp_core_input_split(rx, 0, head, LTP_DATA_HDR_BYTES, g[0].dst, plen1 + LTP_TRAILER_BYTES, t, t) == LTP_EINVAL,
          "a split without its tag accepted");
    CHECK(ltp_core_input_split(rx, 0, head, sizeof head, g[0].dst, plen1, t, t) == 0, "genuine split datagram refused");
    for (int k = 2; k < 10; k++) CHECK(ltp_core_input(rx, 0, dg[k], (size_t)lens[k], t) == 0, "packet %d", k);
    CHECK(ltp_core_rx_take(rx, 0, 3, 0, posted, n_floats * 4, NULL, NULL) == 0 && memcmp(posted, v, n_floats * 4) == 0,
          "message wrong after refused split datagrams");
    ltp_core_stats(rx, st, LTP_S__COUNT);
    CHECK(st[LTP_S_BAD_MAC] == 6 && st[LTP_S_DUP_CONFLICT] == 0, "bad_mac %llu, dup_conflict %llu",
          (unsigned long long)st[LTP_S_BAD_MAC], (unsigned long long)st[LTP_S_DUP_CONFLICT]);
    free(v); free(posted);
    ltp_core_free(a); ltp_core_free(b); ltp_core_free(rx);
}

/* A guess outlives its message when taking in one datagram frees the context it points into (a
 * full table gives up its highest id for a lower one, ltp_admit.c): the driver asks
 * ltp_core_rx_guess_holds before it passes a payload read into place, and it must say no, also
 * once the same message opened again, and without touching the freed buffer (ASan). */
static void test_guess_after_room(void)
{
    ltp_config_t c = base_cfg();
    c.max_udp_payload_bytes = 16384;
    c.max_open_per_peer = 2;
    const uint32_t n_floats = 40000;
    float *v = make_vec(n_floats, 13);
    ltp_core_t *tx = ltp_core_new(&c, 0), *rx = ltp_core_new(&c, LTP_RANK_SERVER);
    ltp_core_add_peer(tx, LTP_RANK_SERVER);
    ltp_core_add_peer(rx, 0);
    static uint8_t first[3][LTP_MAX_DATAGRAM];   /* packet 0 of messages 3, 5 and 10 */
    int lens[3], slot;
    const uint32_t ids[3] = {3, 5, 10};
    uint64_t t = 0;
    for (int k = 0; k < 3; k++) {
        CHECK(ltp_core_send(tx, 0, ids[k], 0, v, n_floats * 4, 0, t) == 0, "send %u", ids[k]);
        lens[k] = 0;
        while (!lens[k]) {
            int n = ltp_core_poll_tx(tx, t, first[k], sizeof first[k], &slot);
            if (n <= 0) { t = ltp_core_next_timeout(tx, t); continue; }
            if (first[k][WIRE_TYPE] == LTP_T_DATA && le32(first[k] + WIRE_MSG_ID) == ids[k]) lens[k] = n;
        }
        ltp_core_send_release(tx, 0, ids[k], 0);
    }
    CHECK(ltp_core_input(rx, 0, first[1], (size_t)lens[1], t) == 0, "message 5 opens");
    CHECK(ltp_core_input(rx, 0, first[2], (size_t)lens[2], t) == 0, "message 10 opens");
    ltp_rx_guess_t g[4];
    int ng = ltp_core_rx_guess(rx, 0, g, 4);
    CHECK(ng == 4 && g[0].msg_id == 10 && ltp_core_rx_guess_holds(rx, 0, &g[0]) == 1, "guesses %d", ng);
    uint64_t st[LTP_S__COUNT];
    CHECK(ltp_core_input(rx, 0, first[0], (size_t)lens[0], t) == 0, "message 3 opens");
    ltp_core_stats(rx, st, LTP_S__COUNT);
    CHECK(st[LTP_S_RX_EVICTED] == 1 && ltp_core_rx_frac(rx, 0, 10, 0) < 0, "message 10 was not evicted");
    CHECK(ltp_core_rx_guess_holds(rx, 0, &g[0]) == 0, "a guess into a freed message holds");
    t += c.rx_idle_evict_us + 1;   /* messages 3 and 5 go idle and make room */
    while (ltp_core_poll_tx(rx, t, first[1], sizeof first[1], &slot) > 0) {}
    CHECK(ltp_core_input(rx, 0, first[2], (size_t)lens[2], t) == 0, "message 10 opens again");
    CHECK(ltp_core_rx_guess_holds(rx, 0, &g[0]) == 0, "a guess into an earlier opening holds");
    free(v);
    ltp_core_free(tx); ltp_core_free(rx);
}

static void test_malformed(void)
{
    ltp_config_t c = base_cfg();
    c.max_msg_bytes = 1 << 20;
    ltp_core_t *rx = ltp_core_new(&c, LTP_RANK_SERVER);
    ltp_core_add_peer(rx, 0);
    uint8_t b[2048], t[2048];
    uint64_t st[LTP_S__COUNT];
    size_t n = mk_data(b, 0, 1, 1, 4, 400, 1500);
    CHECK(ltp_core_input(rx, 0, b, n, 1) == 0, "valid packet rejected");
    int expect_malformed = 0;
#define BAD(mutation)                                                                   \
    do {                                                                                \
        memcpy(t, b, n);                                                                \
        size_t tn = n;                                                                  \
        mutation;                                                                       \
        int rc = ltp_core_input(rx, 0, t, tn, 2);                                       \
        CHECK(rc == LTP_EMALFORMED, "%s accepted (rc %d)", #mutation, rc);              \
        expect_malformed++;                                                             \
    } while (0)
    uint32_t v32;
    BAD(tn = 10);                                                  /* short */
    BAD(tn = LTP_DATA_HDR_BYTES - 1);                              /* short DATA header */
    BAD(t[WIRE_MAGIC] ^= 1);                                       /* magic */
    BAD(t[WIRE_VERSION] = 9);                                      /* version */
    BAD(t[WIRE_TYPE] = 77);                                        /* type */
    BAD(tn -= 4);                                                  /* payload length vs datagram */
    BAD((v32 = 1200, memcpy(t + WIRE_DATA_OFFSET, &v32, 4)));      /* offset not index*chunk */
    BAD((v32 = 1, memcpy(t + WIRE_DATA_TOTAL, &v32, 4)));          /* total not multiple of 4 */
    BAD((v32 = 4, memcpy(t + WIRE_DATA_INDEX, &v32, 4)));          /* index >= count */
    BAD((v32 = 0, memcpy(t + WIRE_DATA_COUNT, &v32, 4)));          /* count == 0 */
    BAD((v32 = 1000, memcpy(t + WIRE_DATA_COUNT, &v32, 4)));       /* count too large for total */
    BAD((v32 = 2u << 20, memcpy(t + WIRE_DATA_TOTAL, &v32, 4)));   /* total > max_msg_bytes */
    BAD((v32 = 402, memcpy(t + WIRE_DATA_OFFSET, &v32, 4)));       /* offset not multiple of 4 */
    BAD(t[WIRE_FLAGS] = LTP_F_CRITICAL);                           /* critical flag vs count */
    BAD(t[WIRE_MAC] = 7);                                          /* unknown MAC kind */
    /* the last packet must end exactly at total */
    size_t ln = mk_data(b + 1024, 0, 1, 3, 4, 400, 1500);
    memcpy(t, b + 1024, ln);
    v32 = 1204;
    memcpy(t + WIRE_DATA_OFFSET, &v32, 4);
    CHECK(ltp_core_input(rx, 0, t, ln, 3) == LTP_EMALFORMED, "last packet offset");
    expect_malformed++;
    /* an ACK whose bitmap length disagrees with the datagram */
    uint8_t ack[LTP_ACK_HDR_BYTES + 8] = {0x4C, 0x50, LTP_VERSION, LTP_T_ACK};
    ack[WIRE_ACK_BITS] = 16;
    CHECK(ltp_core_input(rx, 0, ack, LTP_ACK_HDR_BYTES + 1, 3) == LTP_EMALFORMED, "ACK bitmap length");
    expect_malformed++;
    /* a version-1 ACK: 44 bytes, no rate hint field */
    ack[WIRE_ACK_BITS] = 0;
    CHECK(ltp_core_input(rx, 0, ack, 44, 3) == LTP_EMALFORMED, "44-byte ACK accepted");
    expect_malformed++;
    ack[WIRE_VERSION] = 1;
    CHECK(ltp_core_input(rx, 0, ack, LTP_ACK_HDR_BYTES, 3) == LTP_EMALFORMED, "version-1 ACK accepted");
    expect_malformed++;
    ltp_core_stats(rx, st, LTP_S__COUNT);
    CHECK(st[LTP_S_MALFORMED] == (uint64_t)expect_malformed, "malformed %llu, expected %d",
          (unsigned long long)st[LTP_S_MALFORMED], expect_malformed);
    /* consistent with the datagram alone but not with the message already open */
    n = mk_data(t, 0, 1, 0, 5, 300, 1500);
    CHECK(ltp_core_input(rx, 0, t, n, 4) == LTP_EMALFORMED, "inconsistent count accepted");
    /* unknown peer: no slot, or a slot whose rank differs from the header */
    n = mk_data(t, 0, 1, 0, 4, 400, 1500);
    CHECK(ltp_core_input(rx, -1, t, n, 5) == LTP_EPEER, "unknown address accepted");
    n = mk_data(t, 3, 1, 0, 4, 400, 1500);
    CHECK(ltp_core_input(rx, 0, t, n, 5) == LTP_EPEER, "wrong rank accepted");
    n = mk_data(t, 0, 2, 0, 4, 400, 1500);
    CHECK(ltp_core_input(rx, 0, t, n, 5) == LTP_ESESSION, "wrong session accepted");
    ltp_core_stats(rx, st, LTP_S__COUNT);
    CHECK(st[LTP_S_UNKNOWN_PEER] == 2 && st[LTP_S_WRONG_SESSION] == 1, "peer %llu session %llu",
          (unsigned long long)st[LTP_S_UNKNOWN_PEER], (unsigned long long)st[LTP_S_WRONG_SESSION]);
    CHECK(ltp_core_rx_frac(rx, 0, 5, 0) > 0.26 && ltp_core_rx_frac(rx, 0, 5, 0) < 0.27, "only the valid packet counted");
    ltp_core_free(rx);
}

static void test_stale(void)
{
    ltp_config_t c = base_cfg();
    ltp_core_t *rx = ltp_core_new(&c, LTP_RANK_SERVER);
    ltp_core_add_peer(rx, 0);
    uint8_t b[2048];
    uint32_t id;
    size_t n = mk_data(b, 0, 1, 0, 1, 400, 400);
    for (id = 10; id <= 11; id++) {
        memcpy(b + WIRE_MSG_ID, &id, 4);
        CHECK(ltp_core_input(rx, 0, b, n, 1) == 0, "msg %u rejected", id);
    }
    float out[100];
    CHECK(ltp_core_rx_take(rx, 0, 11, 0, out, sizeof out, NULL, NULL) == 0, "take 11");
    CHECK(ltp_core_rx_ready(rx, 0, 10, 0) == 0, "older message kept after a newer one was taken");
    id = 9;
    memcpy(b + WIRE_MSG_ID, &id, 4);
    CHECK(ltp_core_input(rx, 0, b, n, 2) == LTP_ESTALE, "stale message accepted");
    uint64_t st[LTP_S__COUNT];
    ltp_core_stats(rx, st, LTP_S__COUNT);
    CHECK(st[LTP_S_STALE] >= 1, "stale not counted");
    /* late data for a taken message is answered with CLOSE, never reopens it */
    id = 11;
    memcpy(b + WIRE_MSG_ID, &id, 4);
    CHECK(ltp_core_input(rx, 0, b, n, 3) == 0 && ltp_core_rx_ready(rx, 0, 11, 0) == 0, "taken message reopened");
    uint8_t o[LTP_MAX_DATAGRAM];
    int slot, len, closes = 0;
    while ((len = ltp_core_poll_tx(rx, 4, o, sizeof o, &slot)) > 0) closes += o[3] == LTP_T_CLOSE;
    CHECK(closes >= 1, "no CLOSE answer to late data");
    ltp_core_free(rx);
}

static void test_options(void)
{
    ltp_config_t c = base_cfg();
    CHECK(ltp_config_set(&c, "threshold_min", 0.7) == 0 && c.threshold_min == 0.7, "set by name");
    CHECK(ltp_config_set(&c, "no_such_option", 1) == LTP_EOPTION, "unknown name accepted");
    CHECK(ltp_config_set(&c, "threshold_max", 1.5) == LTP_EOPTION, "out of range accepted");
    CHECK(ltp_config_set(&c, "ack_every", 2.5) == LTP_EOPTION, "fraction for an integer accepted");
    CHECK(ltp_config_set(&c, "threshold_max", NAN) == LTP_EOPTION, "NaN accepted");
    c.threshold_min = 0.9;
    c.threshold_max = 0.8;
    CHECK(ltp_config_validate(&c) == LTP_EOPTION && ltp_core_new(&c, 0) == NULL, "inverted thresholds accepted");
    c = base_cfg();
    CHECK(ltp_chunk_bytes(&c) == 1420, "chunk %u", ltp_chunk_bytes(&c));
    CHECK(c.rate_hint == 1 && c.hint_gain == 1.10, "rate hint defaults %u %f", c.rate_hint, c.hint_gain);
    CHECK(ltp_config_set(&c, "rate_hint", 2) == LTP_EOPTION, "rate_hint 2 accepted");
    CHECK(ltp_config_set(&c, "hint_gain", 0.2) == LTP_EOPTION, "hint_gain 0.2 accepted");
    CHECK(ltp_config_set(&c, "hint_gain", 1.1) == 0 && c.hint_gain == 1.1, "hint_gain by name");
    CHECK(ltp_config_set(&c, "rate_hint", 0) == 0 && c.rate_hint == 0, "rate_hint by name");
}

/* The option table is the one description of ltp_config_t that bindings and docs read. */
static void test_option_table(void)
{
    int n = ltp_option_count();
    CHECK(n > 40 && ltp_option(-1) == NULL && ltp_option(n) == NULL, "option count %d", n);
    ltp_config_t def, byname;
    ltp_config_default(&def);
    ltp_config_default(&byname);
    for (int i = 0; i < n; i++) {
        const ltp_option_t *o = ltp_option(i);
        CHECK(o->min <= o->default_value && o->default_value <= o->max, "%s default out of range", o->name);
        CHECK(o->help && o->help[0] && o->unit, "%s has no help", o->name);
        CHECK(ltp_config_set(&byname, o->name, o->default_value) == 0, "%s default refused", o->name);
        int twice = 0;
        for (int j = 0; j < i; j++) twice += strcmp(ltp_option(j)->name, o->name) == 0;
        CHECK(!twice, "%s twice", o->name);
        if (o->type == LTP_OPT_ENUM)
            CHECK(ltp_enum_name(o->enum_id, (int)o->max) && !ltp_enum_name(o->enum_id, (int)o->max + 1),
                  "%s: enum names do not match its range", o->name);
        else
            CHECK(o->enum_id == -1, "%s names an enum", o->name);
    }
    CHECK(memcmp(&def, &byname, sizeof def) == 0, "defaults set by name differ from ltp_config_default");
    CHECK(strcmp(ltp_enum_name(LTP_ENUM_CLOSE_REASON, LTP_CLOSE_MAX_WAIT), "max_wait") == 0, "close names");
    CHECK(strcmp(ltp_enum_name(LTP_ENUM_ORDER, LTP_ORDER_PRIORITY), "priority") == 0, "order names");
    CHECK(ltp_enum_name(LTP_ENUM__COUNT, 0) == NULL && ltp_enum_name(LTP_ENUM_SEND_DONE, -1) == NULL, "bad enum");
    CHECK(ltp_config_set(&byname, "seed", 18446744073709551616.0) == LTP_EOPTION, "seed 2^64 accepted");
    char why[200] = "";
    CHECK(ltp_config_explain(&def, why, sizeof why) == LTP_OK && why[0] == 0, "default config explained");
    def.threshold_min = 0.9;
    def.threshold_max = 0.8;
    CHECK(ltp_config_explain(&def, why, sizeof why) == LTP_EOPTION && strstr(why, "threshold_min"), "why: %s", why);
    def = base_cfg();
    def.hint_gain = 5;
    CHECK(ltp_config_explain(&def, why, sizeof why) == LTP_EOPTION && strstr(why, "hint_gain"), "why: %s", why);
    for (int code = LTP_EREJECTED; code < 0; code++)
        CHECK(strcmp(ltp_strerror(code), ltp_strerror(-99)) != 0, "no text for %d", code);
}

/* 8 workers push at once into a 64-packet drop-tail queue: the link must stay busy and nobody
 * may collapse. Later rounds reuse the congestion state learned in earlier ones. */
static void test_incast(int reliable)
{
    ltp_config_t c = base_cfg();
    if (reliable) c.threshold_min = c.threshold_max = 1.0;
    sim_t s;
    double rate = 12.5;   /* bytes per microsecond: 100 Mbit/s */
    sim_init(&s, 9, &c, &c, (netcfg_t){.delay_us = 250, .bottleneck_bytes_per_us = rate, .queue_pkts = 64, .seed = 8});
    double best_util = 0;
    for (uint32_t it = 1; it <= 6; it++) {
        outcome_t o[8];
        uint64_t start = s.now, bytes0 = s.bottleneck_bytes, drops0 = s.q_drops;
        int ok = push_round(&s, it, N_FLOATS, 0, 10000000, o);
        CHECK(ok, "incast it %u did not finish", it);
        if (!ok) break;
        double payload = 0;
        for (int w = 0; w < 8; w++) {
            CHECK(o[w].values_ok && o[w].frac >= c.threshold_min, "incast it %u worker %d frac %f", it, w, o[w].frac);
            payload += o[w].frac * N_FLOATS * 4;
        }
        double util = payload / ((double)(s.now - start) * rate);
        (void)bytes0;
        if (util > best_util) best_util = util;
        if (it >= 3) CHECK(util > 0.70, "incast it %u: goodput %.2f of the link (%llu bytes through the queue)", it,
                           util, (unsigned long long)(s.bottleneck_bytes - bytes0));
        printf("  incast%s it %u: %.1f ms, goodput %.0f%% of link, queue drops %.1f%%\n",
               reliable ? " (reliable)" : "", it, (double)(s.now - start) / 1000, 100 * util,
               100.0 * (double)(s.q_drops - drops0) / (double)(s.q_drops - drops0 + s.bottleneck_bytes / 1472 - bytes0 / 1472));
    }
    CHECK(best_util > 0.8, "best goodput %.2f", best_util);
    sim_free(&s);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ------------------------------------------------------------------ broadcast schedule */
typedef struct { int n_workers; uint32_t msg_id; uint64_t done_us[MAXN]; } bcast_t;

static int bcast_done(sim_t *s, void *arg)
{
    bcast_t *g = arg;
    int all = 1;
    for (int w = 0; w < g->n_workers; w++) {
        if (!g->done_us[w] && ltp_core_rx_ready(s->core[w + 1], 0, g->msg_id, 0) == 1) g->done_us[w] = s->now;
        if (!g->done_us[w] || ltp_core_send_status(s->core[0], w, g->msg_id, 0, NULL, s->now) != 1) all = 0;
    }
    return all;
}

/* The PS sends one message to 8 workers through its own 100 Mbit/s link. Fair: every worker gets
 * its copy at about the end. Serial: one after another at the link's rate, so the first arrives
 * after about an eighth of the time, the fourth after half of it, and the last no later. */
static void test_broadcast_schedule(uint32_t schedule)
{
    ltp_config_t c = base_cfg();
    c.peer_schedule = schedule;
    sim_t s;
    double rate = 12.5;
    sim_init(&s, 9, &c, &c, (netcfg_t){.delay_us = 250, .egress_bytes_per_us = rate, .egress_queue_pkts = 1000, .seed = 21});
    float *vec = make_vec(N_FLOATS, 5), *got = malloc(N_FLOATS * 4);
    double bound_us = 8.0 * (N_FLOATS * 4 + 298 * 42.0) / rate;   /* frames: 298 packets per copy */
    for (uint32_t it = 1; it <= 6; it++) {
        for (int w = 0; w < 8; w++) ltp_core_send(s.core[0], w, it, 0, vec, N_FLOATS * 4, 0, s.now);
        bcast_t g = {8, it, {0}};
        uint64_t start = s.now;
        int ok = sim_run(&s, 10000000, bcast_done, &g);
        CHECK(ok, "broadcast it %u did not finish", it);
        if (!ok) break;
        double t[8];
        for (int w = 0; w < 8; w++) {
            t[w] = (double)(g.done_us[w] - start);
            ltp_core_send_release(s.core[0], w, it, 0);
            int rc = ltp_core_rx_take(s.core[w + 1], 0, it, 0, got, N_FLOATS * 4, NULL, NULL);
            CHECK(rc == 0, "broadcast take rc %d", rc);
        }
        qsort(t, 8, sizeof t[0], cmp_double);
        printf("  broadcast %s it %u: first %.1f ms, 4th %.1f ms, last %.1f ms (bound %.1f ms)\n",
               schedule ? "serial" : "fair", it, t[0] / 1000, t[3] / 1000, t[7] / 1000, bound_us / 1000);
        if (it < 3) continue;   /* the first rounds find the link's rate */
        CHECK(t[7] < 1.25 * bound_us, "broadcast it %u: last copy after %.0f us, bound %.0f", it, t[7], bound_us);
        if (schedule == LTP_SCHED_SERIAL)
            CHECK(t[0] < 0.3 * t[7] && t[3] < 0.65 * t[7], "serial it %u: first %.0f 4th %.0f last %.0f us", it,
                  t[0], t[3], t[7]);
        else
            CHECK(t[0] > 0.6 * t[7], "fair it %u: first %.0f last %.0f us", it, t[0], t[7]);
    }
    free(vec);
    free(got);
    sim_free(&s);
}

/* Serial broadcast with the first worker cut off (a dead host, a cut link): its copy goes out
 * first and is never acknowledged, but once its probe timeout fires it gives up the head, so the
 * other seven copies arrive within the time the schedule needs for them, not never. */
static void test_serial_skips_silent_peer(void)
{
    ltp_config_t c = base_cfg();
    c.peer_schedule = LTP_SCHED_SERIAL;
    /* One rate model per peer: with shared_link the cut-off peer's packets in flight would hold
     * the one shared window (a limit docs/faults.md states), whatever the head. */
    c.shared_link = 0;
    sim_t s;
    double rate = 12.5;
    sim_init(&s, 9, &c, &c, (netcfg_t){.delay_us = 250, .egress_bytes_per_us = rate, .egress_queue_pkts = 1000,
                                       .cut_node = 1, .seed = 22});
    float *vec = make_vec(N_FLOATS, 6), *got = malloc(N_FLOATS * 4);
    double bound_us = 8.0 * (N_FLOATS * 4 + 298 * 42.0) / rate;
    for (int w = 0; w < 8; w++) ltp_core_send(s.core[0], w, 1, 0, vec, N_FLOATS * 4, 0, s.now);
    uint64_t start = s.now, done_us[8] = {0};
    for (int n_done = 0; n_done < 7 && s.now - start < 5000000;) {
        sim_run(&s, 1000, NULL, NULL);
        for (int w = 1; w < 8; w++)
            if (!done_us[w] && ltp_core_rx_ready(s.core[w + 1], 0, 1, 0) == 1) { done_us[w] = s.now; n_done++; }
    }
    double last = 0;
    for (int w = 1; w < 8; w++) {
        CHECK(done_us[w], "worker %d never got its copy behind a cut-off worker", w);
        if ((double)(done_us[w] - start) > last) last = (double)(done_us[w] - start);
        CHECK(ltp_core_rx_take(s.core[w + 1], 0, 1, 0, got, N_FLOATS * 4, NULL, NULL) == 0, "take");
    }
    printf("  serial broadcast, worker 0 cut off: last of the other 7 after %.1f ms (bound for 8 %.1f ms)\n",
           last / 1000, bound_us / 1000);
    CHECK(last < 2.0 * bound_us, "the others waited %.0f us behind the cut-off worker", last);
    CHECK(ltp_core_send_status(s.core[0], 0, 1, 0, NULL, s.now) == 0, "the cut-off copy counts as done");
    free(vec);
    free(got);
    sim_free(&s);
}

/* ------------------------------------------------------------------ rate hint */
/* A hand-made ACK for message msg from the PS: everything below base arrived, echoing tx_seq 0. */
static size_t mk_ack(uint8_t *b, uint32_t msg, uint32_t base, uint32_t echo_ts, uint32_t hint_kbps)
{
    memset(b, 0, LTP_ACK_HDR_BYTES);
    b[WIRE_MAGIC] = 0x4C; b[WIRE_MAGIC + 1] = 0x50; b[WIRE_VERSION] = LTP_VERSION; b[WIRE_TYPE] = LTP_T_ACK;
    b[WIRE_SENDER] = 0xFF; b[WIRE_SENDER + 1] = 0xFF; b[WIRE_SESSION] = 1;
    memcpy(b + WIRE_MSG_ID, &msg, 4);
    memcpy(b + WIRE_ACK_RECEIVED, &base, 4); memcpy(b + WIRE_ACK_BASE, &base, 4);
    memcpy(b + WIRE_ACK_ECHO_TS, &echo_ts, 4);
    memcpy(b + WIRE_ACK_HINT, &hint_kbps, 4);
    return LTP_ACK_HDR_BYTES;
}

/* A send's timing stats: its wait for the first DATA, the longest pause between two DATA, the
 * probe timeouts that fired, and when its first pass ended. No ACK ever comes: the window
 * closes after the initial window and only probes go out. */
static void test_send_timing_stats(void)
{
    ltp_config_t c = base_cfg();
    c.rate_hint = 0;
    ltp_core_t *tx = ltp_core_new(&c, 0);
    ltp_core_add_peer(tx, LTP_RANK_SERVER);
    float *v = make_vec(4096, 9);   /* 12 packets: inside the initial window */
    CHECK(ltp_core_send(tx, 0, 3, 0, v, 4096 * 4, 0, 1000) == 0, "send");
    uint8_t b[LTP_MAX_DATAGRAM];
    int slot, sent = 0;
    uint64_t now = 1500;
    ltp_send_stats_t ss;
    CHECK(ltp_core_send_status(tx, 0, 3, 0, &ss, now) == 0 && ss.wait_us == 0 && ss.first_pass_us == 0,
          "stats before any DATA: wait %llu first pass %llu", (unsigned long long)ss.wait_us,
          (unsigned long long)ss.first_pass_us);
    while (ltp_core_poll_tx(tx, now, b, sizeof b, &slot) > 0) sent++;
    for (int k = 0; k < 100 && sent < 12; k++) {   /* paced: wait for each packet's turn */
        now = ltp_core_next_timeout(tx, now);
        while (ltp_core_poll_tx(tx, now, b, sizeof b, &slot) > 0) sent++;
    }
    CHECK(sent == 12, "first pass sent %d of 12", sent);
    ltp_core_send_status(tx, 0, 3, 0, &ss, now);
    CHECK(ss.wait_us == 500, "wait %llu us, not 500", (unsigned long long)ss.wait_us);
    CHECK(ss.first_pass_us > 0 && ss.first_pass_us <= now - 1000, "first pass %llu us", (unsigned long long)ss.first_pass_us);
    CHECK(ss.probes == 0, "probes %llu before any timeout", (unsigned long long)ss.probes);
    uint64_t last = now, pto = ltp_core_next_timeout(tx, now);
    CHECK(pto > now && pto != UINT64_MAX, "no probe timeout armed");
    CHECK(ltp_core_poll_tx(tx, pto, b, sizeof b, &slot) > 0, "no probe at the timeout");
    ltp_core_send_status(tx, 0, 3, 0, &ss, pto);
    CHECK(ss.probes == 1 && ss.retransmits == 1, "probes %llu retransmits %llu", (unsigned long long)ss.probes,
          (unsigned long long)ss.retransmits);
    CHECK(ss.max_gap_us >= pto - last, "max gap %llu us < the probe's wait %llu", (unsigned long long)ss.max_gap_us,
          (unsigned long long)(pto - last));
    free(v);
    ltp_core_free(tx);
}

/* The sender paces at a fresh hint, falls back to BBR when it goes stale or the receiver sends
 * "no hint", and ignores hints entirely with rate_hint off. */
static void test_rate_hint_sender(void)
{
    for (int on = 0; on <= 1; on++) {
        ltp_config_t c = base_cfg();
        c.rate_hint = (uint32_t)on;
        ltp_core_t *tx = ltp_core_new(&c, 0);
        ltp_core_add_peer(tx, LTP_RANK_SERVER);
        float *v = make_vec(4096, 5);
        CHECK(ltp_core_send(tx, 0, 7, 0, v, 4096 * 4, 0, 0) == 0, "send");
        uint8_t b[LTP_MAX_DATAGRAM], a[LTP_ACK_HDR_BYTES];
        int slot;
        CHECK(ltp_core_poll_tx(tx, 100, b, sizeof b, &slot) > 0, "no DATA");   /* tx_seq 0, sent at 100 */
        ltp_send_stats_t ss;
        CHECK(ltp_core_input(tx, 0, a, mk_ack(a, 7, 1, 100, 5000), 1000) == 0, "hinted ACK rejected");
        ltp_core_send_status(tx, 0, 7, 0, &ss, 1000);
        double bbr = 0;
        if (on) CHECK(fabs(ss.pacing_rate_mbps - 5.0) < 1e-9, "paced at %f, not the 5 Mbit/s hint", ss.pacing_rate_mbps);
        else CHECK(ss.pacing_rate_mbps != 5.0, "hint obeyed with rate_hint off");
        /* 8 packets at 5 Mbit/s take 18.8 ms: the hint outlives that, then BBR is back */
        ltp_core_send_status(tx, 0, 7, 0, &ss, 1000 + 18000);
        if (on) CHECK(fabs(ss.pacing_rate_mbps - 5.0) < 1e-9, "hint expired early");
        ltp_core_send_status(tx, 0, 7, 0, &ss, 1000 + 20000);
        bbr = ss.pacing_rate_mbps;
        CHECK(bbr != 5.0, "stale hint still obeyed");
        CHECK(ltp_core_input(tx, 0, a, mk_ack(a, 7, 1, 100, 5000), 2000) == 0, "hinted ACK rejected");
        CHECK(ltp_core_input(tx, 0, a, mk_ack(a, 7, 1, 100, 0), 2100) == 0, "ACK rejected");
        ltp_core_send_status(tx, 0, 7, 0, &ss, 2100);
        CHECK(ss.pacing_rate_mbps != 5.0, "\"no hint\" did not end the hint");
        uint64_t st[LTP_S__COUNT];
        ltp_core_stats(tx, st, LTP_S__COUNT);
        CHECK(st[LTP_S_HINTS_RECEIVED] == (on ? 2u : 0u), "hints_received %llu", (unsigned long long)st[LTP_S_HINTS_RECEIVED]);
        free(v);
        ltp_core_free(tx);
    }
}

/* The receiver: with two senders through a bottleneck, ACKs carry about half the capacity and the
 * capacity estimate is right; with one sender, or with rate_hint off, no ACK carries a hint. */
static void test_rate_hint_receiver(void)
{
    double mbps = 100, rate = mbps / 8;
    /* datagram bytes per microsecond the simulated link carries (a frame is the datagram + 42;
     * the link keeps fractions of a microsecond, sim/sim_link.h) */
    double link_dgram = 1472.0 / ((1472 + 42) / rate);
    for (int n_workers = 1; n_workers <= 2; n_workers++) {
        for (int on = 0; on <= 1; on++) {
            ltp_config_t c = base_cfg();
            c.rate_hint = (uint32_t)on;
            sim_t s;
            sim_init(&s, n_workers + 1, &c, &c, (netcfg_t){.delay_us = 150, .bottleneck_bytes_per_us = rate,
                                                           .queue_pkts = 64, .seed = 17});
            outcome_t o[2];
            for (uint32_t it = 1; it <= 3; it++) {
                int ok = push_round(&s, it, N_FLOATS, 0, 5000000, o);
                CHECK(ok, "hint receiver: %d workers, push %u not done", n_workers, it);
            }
            uint64_t st[LTP_S__COUNT], ws[LTP_S__COUNT];
            ltp_core_stats(s.core[0], st, LTP_S__COUNT);
            ltp_core_stats(s.core[1], ws, LTP_S__COUNT);
            double q_us, cap = ltp_core_rx_capacity_mbps(s.core[0], &q_us) / 8;
            if (n_workers == 2 && on) {
                double mean_share = s.hint_kbps_sum / (double)s.hinted_from_server / 8000.0;
                CHECK(s.hinted_from_server > s.acks_from_server / 2, "only %llu of %llu ACKs hinted",
                      (unsigned long long)s.hinted_from_server, (unsigned long long)s.acks_from_server);
                CHECK(cap <= link_dgram * 1.001 && cap >= 0.9 * link_dgram, "capacity %.3f B/us, link %.3f", cap,
                      link_dgram);
                CHECK(mean_share > 0.4 * link_dgram && mean_share < 0.55 * link_dgram,
                      "mean hinted share %.3f B/us of %.3f", mean_share, link_dgram);
                CHECK(ws[LTP_S_HINTS_RECEIVED] > 0, "the worker obeyed no hint");
            } else {
                CHECK(st[LTP_S_ACKS_HINTED] == 0 && s.hinted_from_server == 0, "%d workers, hint %d: %llu ACKs hinted",
                      n_workers, on, (unsigned long long)s.hinted_from_server);
                CHECK(ws[LTP_S_HINTS_RECEIVED] == 0, "a hint was obeyed");
                if (!on) CHECK(cap == 0, "capacity measured with rate_hint off");
            }
            CHECK(st[LTP_S_ACKS_HINTED] == s.hinted_from_server, "acks_hinted %llu",
                  (unsigned long long)st[LTP_S_ACKS_HINTED]);
            sim_free(&s);
        }
    }
}

/* ------------------------------------------------------------------ incast push time vs the bound */
typedef struct { int n_workers; uint32_t msg_id; uint64_t rx_done_us; } push_wait_t;

static int push_wait_done(sim_t *s, void *arg)
{
    push_wait_t *g = arg;
    if (!g->rx_done_us) {
        for (int w = 0; w < g->n_workers; w++)
            if (ltp_core_rx_ready(s->core[0], w, g->msg_id, 0) != 1) return 0;
        g->rx_done_us = s->now;   /* the PS's gather returns here */
    }
    for (int w = 0; w < g->n_workers; w++)
        if (ltp_core_send_status(s->core[w + 1], 0, g->msg_id, 0, NULL, s->now) != 1) return 0;
    return 1;
}

/* numpy.percentile's default (linear interpolation between closest ranks). */
static double percentile(double *v, int n, double q)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double r = q / 100.0 * (n - 1);
    int i = (int)r;
    return i + 1 < n ? v[i] + (r - i) * (v[i + 1] - v[i]) : v[n - 1];
}

typedef struct { double median, p99, max, queue_drop_frac, min_frac; int ok; } incast_result_t;

/* The bench's synchronized push on the emulated incast, simulated: 8 workers start within
 * `skew_us` of each other and push 437,544 B each through `mbps` with a 64-packet queue; random
 * loss `loss` at every host's ingress; an idle gap between pushes (the PS broadcasts then). Push
 * time = first start to the last receive context closing, over the bound 8 x bytes / link rate. */
static incast_result_t incast_push_times(double mbps, double loss, int rate_hint, int iterations, uint64_t rx_poll_us,
                                         uint64_t wake_mean_us, double burst_bytes, uint64_t seed)
{
    enum { NW = 8 };
    ltp_config_t c = base_cfg();
    c.rate_hint = (uint32_t)rate_hint;
    sim_t s;
    double rate = mbps / 8.0;   /* bytes per microsecond */
    sim_init(&s, NW + 1, &c, &c, (netcfg_t){.delay_us = 150, .loss = loss, .bottleneck_bytes_per_us = rate,
                                            .queue_pkts = 64, .burst_bytes = burst_bytes, .rx_poll_us = rx_poll_us,
                                            .wake_mean_us = wake_mean_us, .seed = seed});
    double bound_us = NW * N_FLOATS * 4.0 / rate;
    double ratios[64];
    incast_result_t res = {0, 0, 0, 0, 1.0, 1};
    uint64_t drops0 = s.q_drops, pk0 = s.bottleneck_bytes;
    float *vec[NW];
    for (int w = 0; w < NW; w++) vec[w] = make_vec(N_FLOATS, seed * 31u + (uint64_t)w);
    float *got = malloc(N_FLOATS * sizeof *got);
    uint64_t rng = seed ^ 0xABCDEFull;
    for (int it = 0; it < iterations && it < 64; it++) {
        uint32_t msg = (uint32_t)it + 1;
        uint64_t start = s.now, at[NW];
        for (int w = 0; w < NW; w++) at[w] = start + (uint64_t)(ltp_uniform(&rng) * 1000.0);   /* release skew */
        for (int k = 0; k < NW; k++) {
            int w = 0;
            for (int j = 1; j < NW; j++) if (at[j] < at[w]) w = j;
            if (at[w] > s.now) sim_run(&s, at[w] - s.now, NULL, NULL);
            int rc = ltp_core_send(s.core[w + 1], 0, msg, 0, vec[w], N_FLOATS * 4, 0, s.now);
            CHECK(rc == 0, "incast send rc %d", rc);
            at[w] = UINT64_MAX;
        }
        push_wait_t g = {NW, msg, 0};
        int ok = sim_run(&s, 10000000, push_wait_done, &g);
        CHECK(ok, "incast %.0f Mbit/s loss %.2f hint %d it %d: not done", mbps, loss, rate_hint, it);
        if (!ok) { res.ok = 0; break; }
        ratios[it] = (double)(g.rx_done_us - start) / bound_us;
        for (int w = 0; w < NW; w++) {
            ltp_msg_stats_t st;
            CHECK(ltp_core_rx_take(s.core[0], w, msg, 0, got, N_FLOATS * 4, NULL, &st) == 0, "take");
            double frac = (double)st.received_bytes / (double)st.total_bytes;
            if (frac < res.min_frac) res.min_frac = frac;
            CHECK(frac >= c.threshold_min, "incast frac %f", frac);
            ltp_core_send_release(s.core[w + 1], 0, msg, 0);
        }
        sim_run(&s, 300000, NULL, NULL);   /* idle: the PS broadcasts, workers compute */
    }
    int n = res.ok ? iterations : 0;
    if (n) {
        double sorted[64];
        memcpy(sorted, ratios, sizeof(double) * (size_t)n);
        res.median = percentile(sorted, n, 50);
        res.p99 = percentile(sorted, n, 99);
        res.max = sorted[n - 1];
    }
    uint64_t through = (s.bottleneck_bytes - pk0) / 1472, drops = s.q_drops - drops0;
    res.queue_drop_frac = (double)drops / (double)(drops + through);
    for (int w = 0; w < NW; w++) free(vec[w]);
    free(got);
    sim_free(&s);
    return res;
}

/* The rate hint's acceptance test: push time over the bound at 0-10 % loss, hint on (asserted)
 * and off (reported: the ablation), on a model of the emulated testbed on a busy 2-core machine:
 * the PS reads its socket about once a millisecond, every thread wakes 1 ms late on average, and
 * the shaper passes a 15 kB burst after a lull, as Mininet's HTB does. */
static void test_incast_push_time(void)
{
    const double losses[] = {0.0, 0.01, 0.05, 0.10};
    const double rates[] = {100, 200};
    printf("  incast push time / bound, 20 pushes each (q%%: queue drops):\n");
    printf("  %6s %6s  %-20s %-20s\n", "Mbit/s", "loss", "hint on: med p99 q%", "hint off: med p99 q%");
    for (int b = 0; b < 2; b++) {
        for (int i = 0; i < 4; i++) {
            incast_result_t on = incast_push_times(rates[b], losses[i], 1, 20, 1000, 1000, 15000, 100 + (uint64_t)i);
            incast_result_t off = incast_push_times(rates[b], losses[i], 0, 20, 1000, 1000, 15000, 100 + (uint64_t)i);
            printf("  %6.0f %5.0f%%  %5.3f %5.3f %5.1f%%    %5.3f %5.3f %5.1f%%\n", rates[b], 100 * losses[i],
                   on.median, on.p99, 100 * on.queue_drop_frac, off.median, off.p99, 100 * off.queue_drop_frac);
            CHECK(on.ok && on.median <= 1.15, "%.0f Mbit/s loss %.2f: median push %.3f x bound with the hint", rates[b],
                  losses[i], on.median);
            CHECK(on.ok && on.p99 <= 1.5, "%.0f Mbit/s loss %.2f: p99 push %.3f x bound with the hint", rates[b],
                  losses[i], on.p99);
        }
    }
}

#include "test_edge.c"   /* training iterations at edge RTTs, closing: the scenarios of issue 10 */
#include "test_resume.c" /* sends that outlast their caller's deadline: suspended, resumed */
#include "test_loss.c"   /* the loss estimate behind the adaptive threshold: per segment */
#include "test_timers.c" /* the timer floors follow the host */

int main(void)
{
    if (getenv("LTP_BSP_ONE")) { edge_one(); return 0; }
    if (getenv("LTP_EDGE_REPORT")) { edge_report(); return 0; }
    test_options();
    test_option_table();
    test_full_delivery();
    test_orders();
    const double losses[] = {0.01, 0.05, 0.10, 0.20};
    for (int i = 0; i < 4; i++) test_lossy(losses[i]);
    test_fixed_reliable();
    test_no_rtx_after_close();
    test_wait_below_threshold_no_timer();
    test_copy_free_paths();
    test_copy_free_auth();
    test_guess_after_room();
    test_reorder_duplicate();
    test_critical();
    test_segment_policy();
    test_malformed();
    test_stale();
    test_incast(0);
    test_incast(1);
    test_broadcast_schedule(LTP_SCHED_FAIR);
    test_broadcast_schedule(LTP_SCHED_SERIAL);
    test_serial_skips_silent_peer();
    test_rate_hint_sender();
    test_send_timing_stats();
    test_rate_hint_receiver();
    test_incast_push_time();
    test_edge_bsp();
    test_busy_broadcast();
    test_linger();
    test_resume();
    test_loss();
    test_timer_floors();
    return check_summary();
}
