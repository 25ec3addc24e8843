/* index_diff.c: a seeded random workload over one PS core with up to 48 peers and a worker core
 * for each, printing one hash of everything the cores answered: every datagram poll_tx gave (its
 * bytes, peer and time), every next_timeout, every input's result, the stats of every message
 * taken and send finished, the counters at the end. tests/index_diff.sh builds it against this
 * core and against the core before the peer index (src/ltp_index.c) and compares: equal hashes
 * for a seed mean the index changed nothing the caller can see.
 *
 *   build/index_diff SEED STEPS [back]     back: now and then a call with a clock gone back
 *
 * Each seed draws a configuration (schedule, shared_link, auth, cc, rate hint, send order,
 * datagram size, ACK and close settings, table sizes, thresholds, segments per message), a lossy
 * network with duplication and reordering, and runs rounds: the PS broadcasts to most workers,
 * each worker takes its parameters and pushes, the PS takes what closed and moves on (sometimes
 * without waiting). Now and then something unusual: a send suspended, resumed or released, a new
 * policy, a buffer posted or unposted, a HELLO, a next_timeout between polls.
 */
#include "ltp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXN 48
#define MAXP 4096

static uint64_t hash = 1469598103934665603ull, rs;
static void mix(const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++) hash = (hash ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
}
static uint64_t rnd(void)   /* SplitMix64, as the core's own generator */
{
    uint64_t z = (rs += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }
static int chance(int per_mille) { return (int)below(1000) < per_mille; }

typedef struct { uint64_t at; int to, slot, len; uint8_t b[1600]; } pkt_t;
static pkt_t net[MAXP];
static int n_net, n, segs;
static ltp_core_t *core[MAXN + 1];            /* 0: the PS; k: the worker of rank k - 1 */
static uint64_t due[MAXN + 1], now, delay_us, jitter_us;
static uint32_t msg_bytes, round_ps, wround[MAXN + 1], taken_ps[MAXN + 1];
static float *data, *bufs[MAXN + 1];
static int loss_pm, dup_pm;
static const char *schedule;

static uint16_t seg_of(int s) { return (uint16_t)(segs > 1 ? s + 1 : 0); }

/* Everything node k has to send at t onto the network, then its next timeout. */
static void poll_node(int k, uint64_t t)
{
    uint8_t b[1600];
    int slot, len, guard = 0;
    while ((len = ltp_core_poll_tx(core[k], t, b, sizeof b, &slot)) > 0 && guard++ < 10000) {
        mix(&t, 8); mix(&len, 4); mix(&slot, 4); mix(b, (size_t)len);
        if (chance(loss_pm)) continue;
        for (int c = chance(dup_pm) ? 2 : 1; c > 0 && n_net < MAXP; c--) {
            pkt_t *p = &net[n_net++];
            uint64_t at = t + delay_us + below(jitter_us + 1);
            *p = (pkt_t){at, k ? 0 : slot + 1, k ? k - 1 : 0, len, {0}};
            memcpy(p->b, b, (size_t)len);
        }
    }
    mix(&len, 4);
    uint64_t to = ltp_core_next_timeout(core[k], t);
    mix(&to, 8);
    due[k] = to == UINT64_MAX ? UINT64_MAX : to <= t ? t + 1 : to;
}

static void ps_round(void)
{
    for (int w = 0; w < n; w++) {
        if (chance(100)) continue;   /* not every worker every round */
        uint32_t critical = chance(300) ? 1500 : 0;
        int rc = ltp_core_send(core[0], w, round_ps, 0, data, msg_bytes, critical, now);
        mix(&rc, 4);
    }
}

static void take(int k, int peer, uint32_t id, uint16_t seg)
{
    static uint8_t mask[1 << 18];
    ltp_msg_stats_t st;
    memset(&st, 0, sizeof st);
    uint8_t *m = chance(500) ? mask : NULL;
    int rc = ltp_core_rx_take(core[k], peer, id, seg, bufs[k], msg_bytes, m, &st);
    mix(&rc, 4); mix(&st, sizeof st);
}

static void release_done(int k, int peer, uint32_t id, uint16_t seg)
{
    ltp_send_stats_t st;
    memset(&st, 0, sizeof st);
    if (ltp_core_send_status(core[k], peer, id, seg, &st, now) != 1) return;
    mix(&st, sizeof st);
    ltp_core_send_release(core[k], peer, id, seg);
}

/* The application of node k after something reached it or it ran. */
static void app(int k)
{
    if (k == 0) {
        int all = 1;
        for (int w = 0; w < n; w++) {
            for (int s = 0; s < segs; s++)
                if (ltp_core_rx_ready(core[0], w, round_ps, seg_of(s)) == 1) {
                    take(0, w, round_ps, seg_of(s));
                    taken_ps[w]++;
                }
            all &= taken_ps[w] >= (uint32_t)segs;
            for (uint32_t d = 0; d < 3; d++) release_done(0, w, round_ps - d, 0);
        }
        if (all || chance(3)) {   /* the next round, now and then without waiting */
            round_ps++;
            memset(taken_ps, 0, sizeof taken_ps);
            for (int w = 0; w < n && chance(300); w++)
                for (int s = 0; s < segs; s++)
                    ltp_core_rx_post(core[0], w, round_ps, seg_of(s), bufs[0], msg_bytes);
            ps_round();
        }
        return;
    }
    for (uint32_t id = round_ps; id + 1 >= round_ps && id <= round_ps; id--) {
        if (ltp_core_rx_ready(core[k], 0, id, 0) != 1) continue;
        take(k, 0, id, 0);
        uint32_t per = msg_bytes / (uint32_t)segs / 4 * 4;
        for (int s = 0; s < segs; s++) {
            const uint8_t *part = (const uint8_t *)data + (size_t)s * per;
            int rc = ltp_core_send(core[k], 0, id, seg_of(s), part, per, 0, now);
            mix(&rc, 4);
        }
        wround[k] = id;
        break;
    }
    for (int s = 0; s < segs; s++)
        for (uint32_t d = 0; d < 3; d++) release_done(k, 0, wround[k] - d, seg_of(s));
}

/* Something unusual on a random node. */
static void disturb(void)
{
    int k = (int)below((uint64_t)n + 1), w = (int)below((uint64_t)n), rc = 0;
    switch (below(9)) {
    case 0: rc = ltp_core_send_suspend(core[0], w, round_ps, 0); break;
    case 1:   /* sent again: resumed if suspended */
        rc = ltp_core_send(core[0], w, round_ps, 0, data, msg_bytes, 0, now);
        break;
    case 2: rc = ltp_core_send_release(core[0], w, round_ps, 0); break;
    case 3: {
        double lo = 0.5 + 0.5 * (double)below(100) / 100.0;
        uint16_t seg = (uint16_t)below((uint64_t)segs + 1);
        rc = ltp_core_set_policy(core[0], seg, lo, lo + (1 - lo) * 0.5);
        break;
    }
    case 4: rc = ltp_core_rx_post(core[0], w, round_ps, 0, bufs[0], msg_bytes); break;
    case 5: rc = ltp_core_rx_unpost(core[0], w, round_ps, 0); break;
    case 6: if (k) rc = ltp_core_hello(core[k], 0, now); break;
    case 7: if (k) rc = ltp_core_send_suspend(core[k], 0, wround[k], seg_of(0)); break;
    case 8: {   /* a look between polls */
        uint64_t t = ltp_core_next_timeout(core[k], now);
        mix(&t, 8);
        break;
    }
    }
    mix(&rc, 4);
    if (k) poll_node(k, now);
}

static void setup(uint64_t seed)
{
    rs = seed * 0x2545F4914F6CDD1Dull + 7;
    n = 1 + (int)below(MAXN);
    ltp_config_t cfg;
    ltp_config_default(&cfg);
    cfg.peer_schedule = chance(400) ? LTP_SCHED_FAIR : LTP_SCHED_SERIAL;
    cfg.shared_link = !chance(300);
    cfg.auth = chance(500);
    cfg.cc = !chance(150);
    if (!cfg.cc) cfg.fixed_rate_mbps = chance(500) ? 0 : 50 + (double)below(500);
    cfg.rate_hint = !chance(200);
    cfg.send_order = (uint32_t)below(3);
    cfg.max_udp_payload_bytes = 200 + 4 * (uint32_t)below(320);
    cfg.ack_every = 1 + (uint32_t)below(10);
    cfg.ack_delay_us = (uint32_t)below(500);
    cfg.max_wait_us = chance(300) ? 5000 + (uint32_t)below(20000) : 1000000;
    cfg.close_copies = 1 + (uint32_t)below(3);
    cfg.max_open_per_peer = 2 + (uint32_t)below(4);
    cfg.max_tx_per_peer = 2 + (uint32_t)below(4);
    cfg.closed_ring = 2 + (uint32_t)below(10);
    cfg.pto_min_us = 200 + (uint32_t)below(2000);
    cfg.hint_window_min_us = 100 + (uint32_t)below(2000);
    cfg.rx_idle_evict_us = 1000 + (uint32_t)below(50000);
    cfg.threshold_min = 0.5 + 0.4 * (double)below(100) / 100.0;
    cfg.threshold_max = cfg.threshold_min + (1 - cfg.threshold_min) * (double)below(100) / 100.0;
    cfg.max_peers = (uint32_t)n;
    schedule = cfg.peer_schedule == LTP_SCHED_FAIR ? "fair"
               : cfg.shared_link                     ? "serial"
                                                     : "serial own-flow";
    segs = chance(300) ? 1 + (int)below(3) : 1;
    msg_bytes = 4 * (1 + (uint32_t)below(6000));
    cfg.max_msg_bytes = msg_bytes;
    loss_pm = (int)below(150); dup_pm = (int)below(30);
    delay_us = below(3000); jitter_us = below(500);
    data = calloc(msg_bytes / 4 + 16, 4);
    for (uint32_t i = 0; i < msg_bytes / 4; i++) data[i] = (float)i;
    uint8_t key[16];
    for (int i = 0; i < 16; i++) key[i] = (uint8_t)(seed + (uint64_t)i);
    core[0] = ltp_core_new(&cfg, LTP_RANK_SERVER);
    ltp_config_t wc = cfg;
    wc.max_peers = 1;
    for (int w = 1; w <= n; w++) {
        core[w] = ltp_core_new(&wc, (uint16_t)(w - 1));
        ltp_core_add_peer(core[w], LTP_RANK_SERVER);
        ltp_core_add_peer(core[0], (uint16_t)(w - 1));
#ifdef LTP_TRAILER_BYTES   /* one key per pair (the core before it took one key per run) */
        key[0] = (uint8_t)w;
        ltp_core_set_peer_key(core[w], 0, key, 16);
        ltp_core_set_peer_key(core[0], w - 1, key, 16);
#else
        ltp_core_set_key(core[w], key, 16);
#endif
    }
#ifndef LTP_TRAILER_BYTES
    ltp_core_set_key(core[0], key, 16);
#endif
    for (int s = 0; segs > 1 && s < segs; s++)
        ltp_core_set_policy(core[0], (uint16_t)(s + 1), 0.6, 0.9);
    for (int k = 0; k <= n; k++) { bufs[k] = calloc(msg_bytes / 4 + 16, 4); due[k] = UINT64_MAX; }
}

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: index_diff SEED STEPS [back]\n"); return 2; }
    uint64_t seed = strtoull(argv[1], NULL, 10);
    long steps = atol(argv[2]);
    int back = argc > 3;
    setup(seed);
    now = 1000 + below(1u << 20);
    for (int w = 1; w <= n; w++) {
        if (!chance(500)) continue;
        ltp_core_hello(core[w], 0, now);
        poll_node(w, now);
    }
    ps_round();
    poll_node(0, now);
    for (long step = 0; step < steps; step++) {
        uint64_t t = UINT64_MAX;
        int kind = -1, which = -1;
        for (int i = 0; i < n_net; i++) if (net[i].at < t) { t = net[i].at; kind = 0; which = i; }
        for (int k = 0; k <= n; k++) if (due[k] < t) { t = due[k]; kind = 1; which = k; }
        if (kind < 0 || chance(20)) { t = now + 1 + below(3000); kind = 2; }   /* a spurious wake */
        if (t > now) now = t;
        if (kind == 0) {
            pkt_t p = net[which];
            net[which] = net[--n_net];
            int rc = ltp_core_input(core[p.to], p.slot, p.b, (size_t)p.len, now);
            mix(&rc, 4);
            if (!chance(50)) poll_node(p.to, now);   /* sometimes the next input comes first */
            app(p.to);
            poll_node(p.to, now);
        } else if (kind == 1) {
            poll_node(which, now);
            app(which);
            poll_node(which, now);
        } else {
            poll_node((int)below((uint64_t)n + 1), now);
        }
        if (chance(15)) disturb();
        if (back && chance(10)) {   /* a caller whose clock steps back a little */
            uint64_t by = below(2000);
            poll_node((int)below((uint64_t)n + 1), now > by ? now - by : 0);
        }
        if (chance(2)) poll_node(0, now);
    }
    for (int k = 0; k <= n; k++) {
        ltp_core_linger(core[k], now);
        poll_node(k, now);
        uint64_t st[LTP_S__COUNT], until = ltp_core_linger_until(core[k], now);
        ltp_core_stats(core[k], st, LTP_S__COUNT);
        mix(st, sizeof st); mix(&until, 8);
        ltp_core_free(core[k]);
        free(bufs[k]);
    }
    free(data);
    printf("seed %llu: %d workers, %s, %d segment(s), hash %016llx\n", (unsigned long long)seed, n,
           schedule, segs, (unsigned long long)hash);
    return 0;
}
