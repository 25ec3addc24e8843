/* test_pairs.c: keys per pair and no replay (project issue 29, items 1 and 2), a test a finding.
 *
 * Run with `make -C transports/native test` (or test-asan). A PS core and two worker cores (ranks 0
 * and 1) exchange datagrams in virtual time through a tap that can capture, change or drop them,
 * with a fixed one-way delay. Each test below is a finding of the review that the core before this
 * change lets through: `make -C transports/native test-before-pairs` builds this file against that
 * core (PAIRS_OLD_CORE, with -DLTP_BEFORE_PAIRS: one key per run, handed to every host, as that
 * core took it) and succeeds only if every test marked NEW fails there; here every test passes.
 *   - a captured ACK re-sent to its receiver, eight times in two seconds: refused and counted
 *     (replayed), the sender's srtt does not move; and every other type replayed once is refused;
 *   - without auth the replays are taken in, but one echo gives one RTT sample at most, so the
 *     srtt still does not move;
 *   - a genuine ACK whose ack_delay was raised (auth off) cannot take min RTT below the echo's age
 *     minus ack_delay_us, the longest the receiver's ACK timer holds an ACK;
 *   - a worker holding only its own pair's key cannot forge a datagram the PS accepts as another
 *     worker's, nor one another worker accepts as the PS's;
 * and (not NEW: it holds before as after) a worker restarted under the same pair key is heard.
 */
#include "ltp_internal.h"   /* a peer's min RTT, and the wire offsets */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "link.h"

#ifdef LTP_BEFORE_PAIRS   /* the core before: one run key for every host, no replay counter */
#define LTP_S_REPLAYED (-1)
static int set_pair_key(ltp_core_t *c, int peer, const uint8_t *key)
{
    (void)peer;
    return ltp_core_set_key(c, key, LTP_KEY_BYTES);
}
#else
static int set_pair_key(ltp_core_t *c, int peer, const uint8_t *key)
{
    return ltp_core_set_peer_key(c, peer, key, LTP_KEY_BYTES);
}
#endif

/* Worker w's pair key (PS and worker w share it). The core before took one key per run, which
 * every host held: there every "pair key" is that one. */
static const uint8_t *pair_key(int w)
{
    static uint8_t k[LTP_KEY_BYTES];
    for (unsigned i = 0; i < LTP_KEY_BYTES; i++) k[i] = (uint8_t)(0x40 + i);
#ifndef LTP_BEFORE_PAIRS
    k[LTP_KEY_BYTES - 1] = (uint8_t)(0x80 + w);
#else
    (void)w;
#endif
    return k;
}

static uint64_t stat_of(const ltp_core_t *c, int i)
{
    if (i < 0) return UINT64_MAX;   /* the core has no such counter */
    uint64_t st[LTP_S__COUNT];
    ltp_core_stats(c, st, LTP_S__COUNT);
    return st[i];
}

/* ------------------------------------------------------------------ a PS and its workers */
enum { PS = 0, MAXN = 3, DELAY_US = 100, QCAP = 4096 };

typedef struct net net_t;
/* Sees every datagram from node `from` to node `to` before it is queued: 0 deliver (possibly
 * changed), 1 drop. */
typedef int (*tap_fn)(net_t *N, int from, int to, uint8_t *b, int *len);

/* Node 0 is the PS (rank LTP_RANK_SERVER); node w + 1 is worker w, the PS's slot w. */
struct net {
    ltp_config_t cfg;
    int n;
    ltp_core_t *c[MAXN];
    uint64_t now;
    link_t link;
    tap_fn tap;
    uint8_t kept[2][8][LINK_DG];  /* the first datagram of each type, by direction (0: to the PS) */
    int kept_len[2][8];
    int data_passed;         /* what a tap let through */
};

static int slot_of(int at, int node) { return at == PS ? node - 1 : 0; }
static int node_of(int at, int slot) { return at == PS ? slot + 1 : PS; }

static void net_init(net_t *N, int workers, int auth, const char *name, double value)
{
    memset(N, 0, sizeof *N);
    ltp_config_default(&N->cfg);
    ltp_config_set(&N->cfg, "auth", auth);
    ltp_config_set(&N->cfg, "max_udp_payload_bytes", 472);   /* 404-byte chunks, many packets */
    if (name) ltp_config_set(&N->cfg, name, value);
    N->n = workers + 1;
    N->c[PS] = ltp_core_new(&N->cfg, LTP_RANK_SERVER);
    for (int w = 0; w < workers; w++) {
        N->c[w + 1] = ltp_core_new(&N->cfg, (uint16_t)w);
        ltp_core_add_peer(N->c[PS], (uint16_t)w);
        ltp_core_add_peer(N->c[w + 1], LTP_RANK_SERVER);
        if (auth) {
            set_pair_key(N->c[PS], w, pair_key(w));
            set_pair_key(N->c[w + 1], 0, pair_key(w));
        }
    }
    link_init(&N->link, QCAP);
    N->now = 100000000;   /* 100 s */
}

static void net_free(net_t *N)
{
    for (int i = 0; i < N->n; i++) ltp_core_free(N->c[i]);
    link_free(&N->link);
}

/* Hand node `to` a datagram as if from node `from` (the slot its source address maps to). */
static int inject(net_t *N, int to, int from, const uint8_t *b, int len)
{
    return ltp_core_input(N->c[to], slot_of(to, from), b, (size_t)len, N->now);
}

typedef int (*done_fn)(net_t *N, void *arg);

/* Run every core until done() or limit_us of virtual time passed. */
static int net_run(net_t *N, uint64_t limit_us, done_fn done, void *arg)
{
    uint64_t end = N->now + limit_us;
    uint8_t b[LINK_DG];
    for (;;) {
        for (int k = 0; k < N->n; k++) {
            int slot, len;
            while ((len = ltp_core_poll_tx(N->c[k], N->now, b, sizeof b, &slot)) > 0) {
                int to = node_of(k, slot), dir = to == PS ? 0 : 1, type = b[WIRE_TYPE] & 7;
                if (!N->kept_len[dir][type]) {
                    memcpy(N->kept[dir][type], b, (size_t)len);
                    N->kept_len[dir][type] = len;
                }
                if (N->tap && N->tap(N, k, to, b, &len)) continue;
                link_push(&N->link, N->now + DELAY_US, k, to, b, len);
            }
        }
        if (done && done(N, arg)) return 1;
        uint64_t next = link_next(&N->link, N->c, N->n, N->now);
        if (next == UINT64_MAX || next > end) { N->now = end; return done ? done(N, arg) : 1; }
        N->now = next > N->now ? next : N->now + 1;
        for (ev_t *e; (e = link_due(&N->link, N->now));)
            inject(N, e->to, e->from, e->b, e->len);
    }
}

#define N_FLOATS 4000u   /* 16,000 bytes: 40 packets */

static float *vec(float base)
{
    float *v = malloc(N_FLOATS * sizeof *v);
    for (uint32_t i = 0; i < N_FLOATS; i++) v[i] = base + (float)i * 0.001f;
    return v;
}

typedef struct { int w; uint32_t msg; } key_t_;

static int ps_ready(net_t *N, void *arg)
{
    key_t_ *k = arg;
    return ltp_core_rx_ready(N->c[PS], k->w, k->msg, 0) == 1;
}

/* Worker w (node w + 1) sends message msg of v to the PS: 1 once the PS can take it (within 2 s
 * of virtual time). */
static int net_deliver(net_t *N, int w, uint32_t msg, const float *v)
{
    key_t_ k = {w, msg};
    ltp_core_send(N->c[w + 1], 0, msg, 0, v, N_FLOATS * 4, 0, N->now);
    return net_run(N, 2000000, ps_ready, &k);
}

static int sent(net_t *N, void *arg)
{
    key_t_ *k = arg;
    return ltp_core_send_status(N->c[k->w + 1], 0, k->msg, 0, NULL, N->now) == 1;
}

/* Worker 0's message `msg` delivered to the PS and taken out whole into `got`. */
static int net_deliver_taken(net_t *N, uint32_t msg, const float *v, float *got)
{
    return net_deliver(N, 0, msg, v) &&
           ltp_core_rx_take(N->c[PS], 0, msg, 0, got, N_FLOATS * 4, NULL, NULL) == 0;
}

/* A test's end: what it allocated freed, the network taken down; it passed (CHECK returns 0). */
static int net_done(net_t *N, float *v, float *got)
{
    free(v);
    free(got);
    net_free(N);
    return 1;
}

static double srtt_of(net_t *N, int node)
{
    return N->c[node]->peers[0].has_rtt ? N->c[node]->peers[0].srtt_us : -1;
}

/* Worker 0's DATA: the first goes through, every later one is lost, so its send stays open and
 * the PS's ACKs keep echoing that one. */
static int tap_first_data_only(net_t *N, int from, int to, uint8_t *b, int *len)
{
    (void)to; (void)len;
    return from == 1 && b[WIRE_TYPE] == LTP_T_DATA && N->data_passed++ > 0;
}

/* Worker 0 starts message 1 to the PS; only its first DATA arrives. The PS's first ACK (in
 * N->kept[1][LTP_T_ACK]) has been delivered and its RTT sample taken when this returns. */
static void open_send_with_one_ack(net_t *N, float *v)
{
    N->tap = tap_first_data_only;
    ltp_core_send(N->c[1], 0, 1, 0, v, N_FLOATS * 4, 0, N->now);
    net_run(N, 5000, NULL, NULL);
}

/* One worker and the PS (auth on or off) through a send's first ACK; returns that ACK's length. */
static int net_with_one_ack(net_t *N, int auth, float **v, float fill)
{
    net_init(N, 1, auth, NULL, 0);
    *v = vec(fill);
    open_send_with_one_ack(N, *v);
    return N->kept_len[1][LTP_T_ACK];
}

/* ------------------------------------------------------------------ 1. replays, auth on */
/* The review: eight replays of one genuine ACK in two seconds took the sender's srtt from 200 us to
 * 0.85 s, no counter moving. Each is refused and counted now, the srtt exactly as it was. */
static int test_replayed_ack(void)
{
    net_t N;
    float *v;
    int len = net_with_one_ack(&N, 1, &v, 1.0f);
    CHECK(len > 0, "no ACK to replay");
    double before = srtt_of(&N, 1);
    CHECK(before > 0 && before < 1000, "srtt %.0f us before the replays", before);
    int refused = 0;
    for (int i = 0; i < 8; i++) {
        N.now += 250000;
        refused += inject(&N, 1, PS, N.kept[1][LTP_T_ACK], len) != 0;
    }
    CHECK(refused == 8, "%d of 8 replayed ACKs accepted", 8 - refused);
    CHECK(stat_of(N.c[1], LTP_S_REPLAYED) == 8, "replayed %llu, not 8",
          (unsigned long long)stat_of(N.c[1], LTP_S_REPLAYED));
    CHECK(srtt_of(&N, 1) == before, "srtt moved from %.0f to %.0f us", before, srtt_of(&N, 1));
    return net_done(&N, v, NULL);
}

/* Every type that changes state, replayed once after the genuine exchange is over: HELLO and DATA
 * to the PS, HELLO_ACK, ACK and CLOSE to the worker. Each is refused and counted. */
static int test_every_type_replayed(void)
{
    net_t N;
    net_init(&N, 1, 1, NULL, 0);
    float *v = vec(2.0f), *got = malloc(N_FLOATS * 4);
    ltp_core_hello(N.c[1], 0, N.now);
    CHECK(net_deliver_taken(&N, 1, v, got), "message 1 not delivered and taken");
    key_t_ k = {0, 1};
    CHECK(net_run(&N, 2000000, sent, &k), "the send never ended");
    static const struct { int dir, type; const char *name; } kinds[] = {
        {0, LTP_T_HELLO, "HELLO"}, {0, LTP_T_DATA, "DATA"}, {1, LTP_T_HELLO_ACK, "HELLO_ACK"},
        {1, LTP_T_ACK, "ACK"}, {1, LTP_T_CLOSE, "CLOSE"}};
    uint64_t before[2] = {stat_of(N.c[PS], LTP_S_REPLAYED), stat_of(N.c[1], LTP_S_REPLAYED)};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        int dir = kinds[i].dir, to = dir == 0 ? PS : 1, len = N.kept_len[dir][kinds[i].type];
        CHECK(len > 0, "no %s was sent", kinds[i].name);
        N.now += 1000;
        int rc = len > 0 ? inject(&N, to, dir == 0 ? 1 : PS, N.kept[dir][kinds[i].type], len) : 0;
        CHECK(rc == LTP_EREJECTED, "a replayed %s was not refused as a replay (%d)", kinds[i].name,
              rc);
    }
    CHECK(stat_of(N.c[PS], LTP_S_REPLAYED) == before[0] + 2 &&
          stat_of(N.c[1], LTP_S_REPLAYED) == before[1] + 3, "replayed: PS %llu, worker %llu",
          (unsigned long long)stat_of(N.c[PS], LTP_S_REPLAYED),
          (unsigned long long)stat_of(N.c[1], LTP_S_REPLAYED));
    return net_done(&N, v, got);
}

/* ------------------------------------------------------------------ 2. one sample per echo */
/* Without auth nothing tells a replay from the original; the replayed ACK is taken in, but the
 * echo it carries gave its RTT sample already. */
static int test_one_sample_per_echo(void)
{
    net_t N;
    float *v;
    int len = net_with_one_ack(&N, 0, &v, 3.0f);
    CHECK(len > 0, "no ACK to replay");
    double before = srtt_of(&N, 1), var = N.c[1]->peers[0].rttvar_us;
    for (int i = 0; i < 8; i++) {
        N.now += 250000;
        inject(&N, 1, PS, N.kept[1][LTP_T_ACK], len);
    }
    CHECK(srtt_of(&N, 1) == before && N.c[1]->peers[0].rttvar_us == var,
          "eight copies of one echo moved srtt from %.0f to %.0f us", before, srtt_of(&N, 1));
    return net_done(&N, v, NULL);
}

/* ------------------------------------------------------------------ 3. a forged ack_delay */
static uint32_t forged_delays;

/* Every ACK to worker 0 claims the receiver held it 60 s (auth off: nothing stops the change). */
static int tap_long_ack_delay(net_t *N, int from, int to, uint8_t *b, int *len)
{
    (void)N; (void)from; (void)len;
    if (to != 1 || b[WIRE_TYPE] != LTP_T_ACK) return 0;
    uint32_t d = 60000000u;
    memcpy(b + WIRE_ACK_DELAY, &d, 4);
    forged_delays++;
    return 0;
}

/* The review: a genuine echo with a forged ack_delay set min RTT to 1 us. The path's RTT is
 * 2 x DELAY_US; the receiver's ACK timer holds an ACK at most ack_delay_us (50 here), so no sample,
 * and so neither min RTT nor srtt, can go below 2 x DELAY_US - 50. */
static int test_forged_ack_delay(void)
{
    net_t N;
    const double ack_delay_us = 50, bound = 2 * DELAY_US - ack_delay_us;
    net_init(&N, 1, 0, "ack_delay_us", ack_delay_us);
    float *v = vec(4.0f);
    key_t_ k = {0, 1};
    forged_delays = 0;
    N.tap = tap_long_ack_delay;
    ltp_core_send(N.c[1], 0, 1, 0, v, N_FLOATS * 4, 0, N.now);
    CHECK(net_run(&N, 2000000, sent, &k), "the send never ended");
    const peer_t *p = &N.c[1]->peers[0];
    CHECK(forged_delays > 0 && p->has_rtt, "no forged ACK was taken in (%u)", forged_delays);
    CHECK(p->min_rtt_us >= bound && p->fl->min_rtt_us >= bound && p->srtt_us >= bound,
          "min RTT %.0f us (flow %.0f), srtt %.0f: below %.0f", p->min_rtt_us, p->fl->min_rtt_us,
          p->srtt_us, bound);
    return net_done(&N, v, NULL);
}

/* ------------------------------------------------------------------ 4. one key per pair */
/* What worker 0 can build holding only its own pair's key: a core of any rank with that key. Its
 * genuine datagrams, sent from `rank` to `peer_rank`, as the list of what it polled. */
static int forge_from(net_t *N, uint16_t rank, uint16_t peer_rank, int hello, uint8_t (*out)[LINK_DG],
                      int *lens, int max)
{
    ltp_core_t *f = ltp_core_new(&N->cfg, rank);
    ltp_core_add_peer(f, peer_rank);
    set_pair_key(f, 0, pair_key(0));   /* all worker 0 holds */
    static float v[N_FLOATS];
    if (hello) ltp_core_hello(f, 0, N->now);
    else ltp_core_send(f, 0, 1, 0, v, sizeof v, 0, N->now);
    int n = 0, slot, len;
    uint8_t b[LINK_DG];
    for (int round = 0; round < 4 && n < max; round++) {
        while (n < max && (len = ltp_core_poll_tx(f, N->now, b, sizeof b, &slot)) > 0) {
            memcpy(out[n], b, (size_t)len);
            lens[n++] = len;
        }
        N->now += 1000;
    }
    ltp_core_free(f);
    return n;
}

static int test_worker_cannot_forge_another_pair(void)
{
    net_t N;
    net_init(&N, 2, 1, NULL, 0);
    static uint8_t dg[64][LINK_DG];
    int lens[64], accepted = 0;
    /* As worker 1, to the PS (from worker 1's address, which this testbed lets anyone spoof). */
    int n = forge_from(&N, 1, LTP_RANK_SERVER, 1, dg, lens, 64);
    n += forge_from(&N, 1, LTP_RANK_SERVER, 0, dg + n, lens + n, 64 - n);
    CHECK(n > 2, "nothing to forge with (%d)", n);
    for (int i = 0; i < n; i++) accepted += inject(&N, PS, 2, dg[i], lens[i]) == 0;
    CHECK(accepted == 0 && ltp_core_peer_greeted(N.c[PS], 1) == 0 &&
          ltp_core_rx_frac(N.c[PS], 1, 1, 0) < 0, "the PS took %d of %d datagrams as worker 1's",
          accepted, n);
    CHECK(stat_of(N.c[PS], LTP_S_BAD_MAC) == (uint64_t)n, "bad_mac %llu of %d",
          (unsigned long long)stat_of(N.c[PS], LTP_S_BAD_MAC), n);
    /* As the PS, to worker 1. */
    n = forge_from(&N, LTP_RANK_SERVER, 1, 0, dg, lens, 64);
    accepted = 0;
    for (int i = 0; i < n; i++) accepted += inject(&N, 2, PS, dg[i], lens[i]) == 0;
    CHECK(n > 0 && accepted == 0 && ltp_core_rx_frac(N.c[2], 0, 1, 0) < 0,
          "worker 1 took %d of %d datagrams as the PS's", accepted, n);
    /* The genuine pairs work. */
    float *v = vec(5.0f);
    CHECK(net_deliver(&N, 1, 7, v), "worker 1's genuine message not delivered");
    return net_done(&N, v, NULL);
}

/* ------------------------------------------------------------------ 5. a restart (not NEW) */
/* Worker 0's process is killed and started again in the same run (a fault the harness injects):
 * the new core holds the same pair key and numbers its datagrams from its clock, so the PS hears it
 * although it remembers the numbers of the first one. */
static int test_restarted_worker_is_heard(void)
{
    net_t N;
    net_init(&N, 1, 1, NULL, 0);
    float *v = vec(6.0f), *got = malloc(N_FLOATS * 4);
    CHECK(net_deliver_taken(&N, 1, v, got), "message 1 not delivered and taken");
    ltp_core_free(N.c[1]);
    N.now += 500000;
    N.c[1] = ltp_core_new(&N.cfg, 0);
    ltp_core_add_peer(N.c[1], LTP_RANK_SERVER);
    set_pair_key(N.c[1], 0, pair_key(0));
    CHECK(net_deliver(&N, 0, 2, v), "the restarted worker's message not delivered");
    return net_done(&N, v, got);
}

/* ------------------------------------------------------------------ */
typedef struct { int (*fn)(void); const char *name; int new_defence; } test_t;

int main(void)
{
    static const test_t tests[] = {
        {test_replayed_ack, "a replayed ACK", 1},
        {test_every_type_replayed, "every type replayed", 1},
        {test_one_sample_per_echo, "one RTT sample per echo", 1},
        {test_forged_ack_delay, "a forged ack_delay", 1},
        {test_worker_cannot_forge_another_pair, "a worker forging another pair", 1},
        {test_restarted_worker_is_heard, "a restarted worker", 0},
    };
    int n_new = 0, failed_new = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int before = n_fail;
        tests[i].fn();
        int failed = n_fail > before;
        printf("%-34s %s\n", tests[i].name, failed ? "FAILED" : "passed");
        n_new += tests[i].new_defence;
        failed_new += tests[i].new_defence && failed;
    }
#ifdef LTP_BEFORE_PAIRS
    /* Against the core before: every NEW test must fail (the findings reproduce there). */
    printf("%d of %d new tests fail against the core before\n", failed_new, n_new);
    return failed_new == n_new ? 0 : 1;
#else
    (void)failed_new; (void)n_new;
    return check_summary();
#endif
}
