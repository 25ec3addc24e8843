/* test_trust.c: the receive path against forged datagrams (project issue 12), one test per finding.
 *
 * Run with `make -C transports/native test` (or test-asan). A worker core and a PS core exchange
 * datagrams through a tap that can capture, drop, forge or batch them, with a fixed one-way
 * delay in virtual time. Every forgery is made by mutating a genuine datagram the core under test
 * produced, counters and options are looked up by name, and `make test-old-core` builds this file
 * against the core before these checks (the parent of the commit that added them, with the new
 * calls stubbed): there each test below fails, here each passes. Exit status is non-zero if any
 * check fails.
 */
#include "ltp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef LTP_OLD_CORE   /* the old header lacks these; test_old_shim.c stubs the calls */
#define LTP_KEY_BYTES 16u
#define WIRE_MAC_BYTE 5
int ltp_core_expect(ltp_core_t *core, uint16_t segment, uint32_t total_bytes, uint32_t critical_bytes);
int ltp_core_set_peer_key(ltp_core_t *core, int peer, const uint8_t *key, size_t len);
uint64_t ltp_siphash24(const uint8_t key[16], const uint8_t *msg, size_t len);
uint64_t ltp_gmac128(const uint8_t key[16], uint64_t pseq, const uint8_t *msg, size_t len);
#endif

#include "pair.h"

/* ------------------------------------------------------------------ 1. a forged one-packet DATA */
static void test_forged_short_message(void)
{
    pair_t P;
    pair_init(&P, NULL, NULL, 0);
    ltp_core_expect(P.c[PS], 0, N * 4, 0);
    float *v = vec(N, 1.0f);
    /* A genuine first DATA, then a forgery from it: one packet, 4 bytes, same message. */
    P.tap = tap_keep_data;
    ltp_core_send(P.c[WK], 0, 1, 0, v, N * 4, 0, P.now);
    uint8_t f[1600];
    key_t_ k1 = {1, 0};
    pair_run(&P, 50, NULL, NULL);   /* the first burst leaves the worker */
    memcpy(f, P.kept[0], DATA_HDR + 4);
    wr32(f + O_INDEX, 0); wr32(f + O_COUNT, 1); wr32(f + O_TOTAL, 4); f[O_LEN] = 4; f[O_LEN + 1] = 0;
    wr32(f + O_MSG, 1);
    CHECK(inject(&P, PS, f, DATA_HDR + 4) != 0, "a 4-byte forgery of an expected 16,000-byte message was accepted");
    CHECK(ltp_core_rx_ready(P.c[PS], 0, 1, 0) == 0, "the forgery opened and completed message 1");
    wr32(f + O_MSG, 2); f[O_SEG] = 7;   /* a segment nobody expects */
    CHECK(inject(&P, PS, f, DATA_HDR + 4) != 0 && ltp_core_rx_ready(P.c[PS], 0, 2, 7) == 0,
          "DATA of an unexpected segment was accepted");
    CHECK(stat(P.c[PS], "bad_shape") == 2, "bad_shape %g", stat(P.c[PS], "bad_shape"));
    int ok = pair_run(&P, 2000000, rx_ready, &k1);
    float *got = calloc(N, sizeof *got);
    uint8_t *mask = calloc(N, 1);
    ltp_msg_stats_t st;
    memset(&st, 0, sizeof st);
    int rc = ok ? ltp_core_rx_take(P.c[PS], 0, 1, 0, got, N * 4, mask, &st) : -1;
    int whole = rc == 0 && st.total_bytes == N * 4 && st.received_bytes == N * 4 && memcmp(got, v, N * 4) == 0;
    CHECK(whole, "the genuine message was not delivered whole (rc %d, %llu of %llu bytes)", rc,
          (unsigned long long)st.received_bytes, (unsigned long long)st.total_bytes);
    free(got); free(mask); free(v);
    pair_free(&P);
}

/* ------------------------------------------------------------------ 2. the first copy wins */
/* Deliver a copy of the worker's first DATA with +inf in its payload ahead of the genuine one. */
static int tap_forge_first(pair_t *P, int from, uint8_t *b, int *len)
{
    if (from == WK && b[O_TYPE] == 1 && !P->kept_len[0]) {
        P->kept_len[0] = *len;
        memcpy(P->kept[0], b, (size_t)*len);
        float inf = INFINITY;
        memcpy(P->kept[0] + DATA_HDR, &inf, 4);
        ltp_core_input(P->c[PS], 0, P->kept[0], (size_t)*len, P->now);
    }
    return 0;
}

static void first_copy(int auth)
{
    pair_t P;
    pair_init(&P, (const char *[]){"auth"}, (double[]){auth}, 1);
    uint8_t key[16] = {0x6b, 0x65, 0x79};   /* the pair's */
    ltp_core_set_peer_key(P.c[PS], 0, key, sizeof key);
    ltp_core_set_peer_key(P.c[WK], 0, key, sizeof key);
    ltp_core_expect(P.c[PS], 0, N * 4, 0);
    float *v = vec(N, 1.0f), *got = calloc(N, sizeof *got);
    uint8_t *mask = calloc(N, 1);
    P.tap = tap_forge_first;
    int ok = deliver(&P, 1, v);
    ltp_msg_stats_t st;
    int rc = ok ? ltp_core_rx_take(P.c[PS], 0, 1, 0, got, N * 4, mask, &st) : -1;
    CHECK(rc == 0, "auth %d: not delivered (rc %d)", auth, rc);
    CHECK(isfinite(got[0]), "auth %d: the injected +inf was delivered", auth);
    if (auth) {
        CHECK(got[0] == v[0] && mask[0] == 1 && stat(P.c[PS], "bad_mac") == 1,
              "auth: the genuine copy lost to the forgery (got %g, bad_mac %g)", got[0], stat(P.c[PS], "bad_mac"));
    } else {
        /* Without a MAC neither copy can be trusted: the packet is delivered as missing. */
        CHECK(mask[0] == 0 && got[0] == 0.0f && mask[N - 1] == 1, "no auth: disputed packet delivered (mask %d)",
              mask[0]);
        CHECK(stat(P.c[PS], "dup_conflict") == 1, "dup_conflict %g", stat(P.c[PS], "dup_conflict"));
    }
    free(v); free(got); free(mask);
    pair_free(&P);
}

/* ------------------------------------------------------------------ 3. forged ACK and CLOSE */
static void test_forged_ack(void)
{
    pair_t P;
    float *v = pair_send_tapped(&P, tap_first_data_and_ack, 5000);
    CHECK(P.kept_len[1] > 0, "no ACK to forge from");
    uint8_t a[1600];
    ltp_send_stats_t ss;
    /* An echo of a timestamp 59 s older than anything sent: the RTT it implies is a lie. */
    memcpy(a, P.kept[1], (size_t)P.kept_len[1]);
    wr32(a + O_ACK_ECHO_TS, rd32(a + O_ACK_ECHO_TS) - 59000000u);
    inject(&P, WK, a, P.kept_len[1]);
    ltp_core_send_status(P.c[WK], 0, 1, 0, &ss, P.now);
    CHECK(ss.srtt_us < 1e6, "a forged echo set srtt to %.0f us", ss.srtt_us);
    /* A hint of 1 kbit/s in an otherwise genuine ACK: raised to hint_min_mbps, gone within
     * hint_ttl_max_us. */
    memcpy(a, P.kept[1], (size_t)P.kept_len[1]);
    wr32(a + O_ACK_HINT, 1);
    inject(&P, WK, a, P.kept_len[1]);
    ltp_core_send_status(P.c[WK], 0, 1, 0, &ss, P.now);
    CHECK(ss.pacing_rate_mbps >= 0.1 - 1e-9, "paced at %g Mbit/s by a 1 kbit/s hint", ss.pacing_rate_mbps);
    ltp_core_send_status(P.c[WK], 0, 1, 0, &ss, P.now + 1000000);
    CHECK(ss.pacing_rate_mbps > 1.0, "a 1 kbit/s hint still slows the sender 1 s later (%g Mbit/s)",
          ss.pacing_rate_mbps);
    free(v);
    pair_free(&P);
}

/* A CLOSE that says the wrong count, or claims more than was sent, ends nothing; a genuine CLOSE
 * with reason stale ends the send as stale, not as success. */
static void test_forged_close(void)
{
    pair_t P;
    pair_init(&P, NULL, NULL, 0);
    float *v = vec(N, 1.0f), *got = calloc(N, sizeof *got);
    /* Messages 6 then 5: by the time 5 arrives the PS has taken 6, so 5 is stale. */
    key_t_ k6 = {6, 0};
    CHECK(deliver(&P, 6, v), "message 6 not delivered");
    ltp_core_rx_take(P.c[PS], 0, 6, 0, got, N * 4, NULL, NULL);
    pair_run(&P, 2000000, tx_done, &k6);
    ltp_core_send_release(P.c[WK], 0, 6, 0);
    /* Capture the PS's CLOSE (stale) for message 5 before the worker sees it. */
    ltp_core_send(P.c[WK], 0, 5, 0, v, N * 4, 0, P.now);
    P.tap = NULL;
    uint8_t b[1600], cl[1600];
    int slot, len, cl_len = 0;
    for (int i = 0; i < 3 && !cl_len; i++) {
        while ((len = ltp_core_poll_tx(P.c[WK], P.now, b, sizeof b, &slot)) > 0) inject(&P, PS, b, len);
        while ((len = ltp_core_poll_tx(P.c[PS], P.now, b, sizeof b, &slot)) > 0)
            if (b[O_TYPE] == 3 && !cl_len) { memcpy(cl, b, (size_t)len); cl_len = len; }
        P.now += 1000;
    }
    CHECK(cl_len > 0 && cl[O_CLOSE_REASON] == 4, "no stale CLOSE for message 5");
    uint8_t f[1600];
    memcpy(f, cl, (size_t)cl_len);
    wr32(f + O_CLOSE_COUNT, rd32(cl + O_CLOSE_COUNT) + 1);
    inject(&P, WK, f, cl_len);
    CHECK(ltp_core_send_status(P.c[WK], 0, 5, 0, NULL, P.now) == 0, "a CLOSE with the wrong count ended the send");
    memcpy(f, cl, (size_t)cl_len);
    wr32(f + O_CLOSE_COUNT - 4, rd32(cl + O_CLOSE_COUNT));   /* received = count: more than was sent */
    f[O_CLOSE_REASON] = 1;
    inject(&P, WK, f, cl_len);
    CHECK(ltp_core_send_status(P.c[WK], 0, 5, 0, NULL, P.now) == 0, "a CLOSE claiming unsent packets ended the send");
    inject(&P, WK, cl, cl_len);
    ltp_send_stats_t ss;
    int st = ltp_core_send_status(P.c[WK], 0, 5, 0, &ss, P.now);
    const char *how = ltp_enum_name(LTP_ENUM_SEND_DONE, (int)ss.done);
    CHECK(st == 1 && how && strcmp(how, "stale") == 0, "a stale CLOSE ended the send as %s", how ? how : "?");
    CHECK(stat(P.c[WK], "bad_close") == 2 && stat(P.c[WK], "sends_stale") == 1, "bad_close %g sends_stale %g",
          stat(P.c[WK], "bad_close"), stat(P.c[WK], "sends_stale"));
    free(v); free(got);
    pair_free(&P);
}

/* Nothing from the PS reaches the worker (its ACKs and CLOSEs are lost). */
static int tap_drop_from_ps(pair_t *P, int from, uint8_t *b, int *len)
{
    (void)P; (void)b; (void)len;
    return from == PS;
}

/* A send cancelled at the application's deadline and started again is closed by the receiver,
 * which took the message whole from the first send: its CLOSE counts more packets than the new
 * send has sent, and that is genuine (a worker's push retried in slices; under bursty loss every
 * CLOSE of the first send was lost, and the new send, window-bound with no ACK to come, waited
 * for ever). */
static void test_close_after_a_cancelled_send(void)
{
    pair_t P;
    pair_init(&P, NULL, NULL, 0);
    float *v = vec(N, 1.0f), *got = calloc(N, sizeof *got);
    key_t_ k = {9, 0};
    P.tap = tap_drop_from_ps;
    CHECK(deliver(&P, 9, v), "message 9 not delivered");
    CHECK(ltp_core_rx_take(P.c[PS], 0, 9, 0, got, N * 4, NULL, NULL) == 0, "take failed");
    CHECK(ltp_core_send_status(P.c[WK], 0, 9, 0, NULL, P.now) == 0, "the send ended with no CLOSE");
    ltp_core_send_release(P.c[WK], 0, 9, 0);   /* the deadline: cancelled */
    P.tap = NULL;
    ltp_core_send(P.c[WK], 0, 9, 0, v, N * 4, 0, P.now);
    CHECK(pair_run(&P, 2000000, tx_done, &k), "the second send of message 9 never ended");
    ltp_send_stats_t ss;
    ltp_core_send_status(P.c[WK], 0, 9, 0, &ss, P.now);
    CHECK(ss.packets < N * 4 / 420 + 1, "the second send sent all %llu packets (nothing tested)",
          (unsigned long long)ss.packets);
    CHECK(stat(P.c[WK], "bad_close") == 0, "bad_close %g", stat(P.c[WK], "bad_close"));
    free(v); free(got);
    pair_free(&P);
}

/* The worker's DATA get through for the first 5, then nothing until gap_until (a sender backed
 * off for longer than the receiver's idle time). */
static uint64_t gap_until;
static int gap_seen;
static int tap_gap(pair_t *P, int from, uint8_t *b, int *len)
{
    (void)len;
    if (from != WK || b[O_TYPE] != 1) return 0;
    return ++gap_seen > 5 && P->now < gap_until;
}

/* An open context that went idle is evicted only when a new key needs its place: its sender may
 * only be backed off (its probe timeout doubles up to 64 x), and once it has counted ACKs for
 * the packets the context held, a context evicted and opened again never completes (the sender
 * finished "all acked", the receiver waited for ever; seen in a bursty-loss sweep). */
static void test_idle_context_kept_while_room(void)
{
    pair_t P;
    pair_init(&P, (const char *[]){"rx_idle_evict_us"}, (double[]){100000}, 1);
    float *v = vec(N, 1.0f), *got = calloc(N, sizeof *got);
    key_t_ k = {3, 0};
    gap_seen = 0;
    gap_until = P.now + 500000;   /* five times the idle time */
    P.tap = tap_gap;
    ltp_core_send(P.c[WK], 0, 3, 0, v, N * 4, 0, P.now);
    CHECK(pair_run(&P, 5000000, rx_ready, &k), "message 3 not delivered after the gap");
    CHECK(ltp_core_rx_take(P.c[PS], 0, 3, 0, got, N * 4, NULL, NULL) == 0 && memcmp(got, v, N * 4) == 0,
          "message 3 not whole");
    CHECK(stat(P.c[PS], "rx_evicted") == 0, "rx_evicted %g", stat(P.c[PS], "rx_evicted"));
    free(v); free(got);
    pair_free(&P);
}

/* ------------------------------------------------------------------ 4. the table, the window, age */
/* Four forged first packets of messages forged_base.. (re-sent before every genuine message when
 * `refresh`: an attacker who keeps them from ever going idle), then 100 genuine messages. */
static void table_after_forgery(uint32_t forged_base, int refresh, const char *what)
{
    /* Idle contexts go after 0.1 s; kept busy, the default 5 s would never come within a message's
     * 2 s (what matters then is that a needed id displaces them). */
    pair_t P;
    pair_init(&P, (const char *[]){"rx_idle_evict_us"}, (double[]){refresh ? 5000000 : 100000}, 1);
    ltp_core_expect(P.c[PS], 0, N * 4, 0);
    float *v = vec(N, 1.0f), *got = calloc(N, sizeof *got);
    P.tap = tap_keep_data;
    ltp_core_send(P.c[WK], 0, 0, 0, v, N * 4, 0, P.now);
    pair_run(&P, 50, NULL, NULL);
    uint8_t f[1600];
    int delivered = 0;
    for (uint32_t id = 0; id < 100; id++) {
        key_t_ k = {id, 0};
        for (uint32_t j = 0; j < 4 && (id == 0 || refresh); j++) {   /* messages nobody sends */
            memcpy(f, P.kept[0], (size_t)P.kept_len[0]);
            wr32(f + O_MSG, forged_base + j);
            wr32(f + O_INDEX, id % 30);   /* a packet the context does not have yet */
            wr32(f + O_OFFSET, id % 30 * 420);
            inject(&P, PS, f, P.kept_len[0]);
        }
        if (id) ltp_core_send(P.c[WK], 0, id, 0, v, N * 4, 0, P.now);
        if (pair_run(&P, 2000000, rx_ready, &k) && ltp_core_rx_take(P.c[PS], 0, id, 0, got, N * 4, NULL, NULL) == 0)
            delivered++;
        pair_run(&P, 2000000, tx_done, &k);
        ltp_core_send_release(P.c[WK], 0, id, 0);
    }
    CHECK(delivered == 100, "%s: %d of 100 messages delivered", what, delivered);
    free(v); free(got);
    pair_free(&P);
}

static void test_table(void)
{
    table_after_forgery(1000000, 0, "four far-future ids");   /* refused: out of the window */
    table_after_forgery(40, 0, "four in-window ids");         /* opened, then evicted when idle */
    /* Kept busy, they never go idle: a lower id evicts the highest instead. */
    table_after_forgery(40, 1, "four in-window ids kept busy");
}

/* ------------------------------------------------------------------ 5. the closed ring */
#define SEGS 100u
#define SEG_FLOATS 100u   /* one packet each */

static int all_segs(pair_t *P, void *arg)
{
    (void)arg;
    for (uint16_t s = 1; s <= SEGS; s++) if (ltp_core_rx_ready(P->c[PS], 0, 1, s) != 1) return 0;
    return 1;
}

/* Hold back the worker's first DATA of every segment. */
static int tap_hold(pair_t *P, int from, uint8_t *b, int *len)
{
    if (from != WK || b[O_TYPE] != 1) return 0;
    if (!P->held) P->held = calloc(256, sizeof *P->held);
    for (int i = 0; i < P->n_held; i++) if (P->held[i][O_SEG] == b[O_SEG]) return 1;
    if (P->n_held < 256 && *len <= 600) { memcpy(P->held[P->n_held], b, (size_t)*len); P->held_len[P->n_held++] = *len; }
    return 1;
}

static void test_ring(void)
{
    /* Unpaced (cc off), so the worker sends every layer at once. */
    const char *names[] = {"max_tx_per_peer", "max_open_per_peer", "cc"};
    double values[] = {SEGS, 2 * SEGS, 0};
    pair_t P;
    pair_init(&P, names, values, 3);
    for (uint16_t s = 1; s <= SEGS; s++) ltp_core_expect(P.c[PS], s, SEG_FLOATS * 4, 0);
    float *v = vec(SEG_FLOATS * SEGS, 1.0f), *got = calloc(SEG_FLOATS, sizeof *got);
    for (uint16_t s = 1; s <= SEGS; s++)
        ltp_core_send(P.c[WK], 0, 1, s, v + (s - 1) * SEG_FLOATS, SEG_FLOATS * 4, 0, P.now);
    /* Every layer arrives, and closes, in one batch; each must be answered with CLOSE. */
    P.tap = tap_hold;
    pair_run(&P, 200000, NULL, NULL);
    CHECK(P.n_held == (int)SEGS, "%d of %u layers sent", P.n_held, SEGS);
    for (int i = 0; i < P.n_held; i++) inject(&P, PS, P.held[i], P.held_len[i]);
    P.tap = NULL;
    int ok = pair_run(&P, 2000000, all_segs, NULL);
    CHECK(ok, "not every layer closed");
    pair_run(&P, 100000, NULL, NULL);
    int unanswered = 0;
    for (uint16_t s = 1; s <= SEGS; s++) unanswered += P.closed_seg[s] == 0;
    CHECK(unanswered == 0, "%d of %u layers closed at once got no CLOSE", unanswered, SEGS);
    for (uint16_t s = 1; s <= SEGS; s++) ltp_core_rx_take(P.c[PS], 0, 1, s, got, SEG_FLOATS * 4, NULL, NULL);
    /* Late data for a taken layer (the first to close) is answered, never opened as a new message. */
    inject(&P, PS, P.held[0], P.held_len[0]);
    CHECK(ltp_core_rx_frac(P.c[PS], 0, 1, P.held[0][O_SEG]) < 0, "late data for a taken layer reopened it");
    free(v); free(got);
    pair_free(&P);

    /* The same with a ring of one and no layout: the taken key falls out of the ring at once. */
    pair_init(&P, (const char *[]){"closed_ring"}, (double[]){1}, 1);
    float *w = vec(N, 1.0f), *g2 = calloc(N, sizeof *g2);
    P.tap = tap_keep_data;
    deliver(&P, 3, w);
    ltp_core_rx_take(P.c[PS], 0, 3, 0, g2, N * 4, NULL, NULL);
    deliver(&P, 4, w);   /* its close pushes 3 out of the ring */
    inject(&P, PS, P.kept[0], P.kept_len[0]);
    CHECK(ltp_core_rx_frac(P.c[PS], 0, 3, 0) < 0, "late data for taken message 3 opened a new context");
    free(w); free(g2);
    pair_free(&P);
}

/* ------------------------------------------------------------------ the MAC itself */
static void test_siphash_vectors(void)
{
    /* SipHash-2-4 with key 00 01 .. 0f over 00 01 .. (n-1): the reference vectors of the paper's
     * authors (the paper's appendix A gives n = 15). */
    static const uint64_t want[] = {
        0x726fdb47dd0e0e31ull, 0x74f839c593dc67fdull, 0x0d6c8009d9a94f5aull, 0x85676696d7fb7e2dull,
        0xcf2794e0277187b7ull, 0x18765564cd99a68dull, 0xcbc9466e58fee3ceull, 0xab0200f58b01d137ull,
        0x93f5f5799a932462ull, 0x9e0082df0ba9e4b0ull, 0x7a5dbbc594ddb9f3ull, 0xf4b32f46226bada7ull,
        0x751e8fbc860ee5fbull, 0x14ea5627c0843d90ull, 0xf723ca908e7af2eeull, 0xa129ca6149be45e5ull,
        0x3f2acc7f57c29bdbull, 0x699ae9f52cbe4794ull, 0x4bc1b3f0968dd39cull, 0xbb6dc91da77961bdull,
        0xbed65cf21aa2ee98ull, 0xd0f2cbb02e3b67c7ull, 0x93536795e3a33e88ull, 0xa80c038ccd5ccec8ull,
        0xb8ad50c6f649af94ull, 0xbce192de8a85b8eaull, 0x17d835b85bbb15f3ull, 0x2f2e6163076bcfadull,
        0xde4daaaca71dc9a5ull, 0xa6a2506687956571ull, 0xad87a3535c49ef28ull, 0x32d892fad841c342ull,
        0x7127512f72f27cceull, 0xa7f32346f95978e3ull, 0x12e0b01abb051238ull, 0x15e034d40fa197aeull,
        0x314dffbe0815a3b4ull, 0x027990f029623981ull,
    };
    uint8_t key[16], msg[64];
    for (int i = 0; i < 16; i++) key[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++) msg[i] = (uint8_t)i;
    int bad = 0;
    for (size_t n = 0; n < sizeof want / sizeof want[0]; n++) bad += ltp_siphash24(key, msg, n) != want[n];
    CHECK(bad == 0, "%d SipHash-2-4 test vectors wrong", bad);
}

static void test_gmac_vectors(void)
{
    /* GCM's test case 1 (McGrew and Viega's GCM specification: zero key, zero IV, nothing in),
     * whose tag begins 58 e2 fc ce fa 7e 30 61; then key 00 01 .. 0f, number 0x0706050403020100
     * and i mod 251 for byte i, as AES-GCM with empty plaintext (Python's cryptography) gives. */
    static const uint8_t zero[16];
    CHECK(ltp_gmac128(zero, 0, NULL, 0) == 0x61307efacefce258ull, "GCM test case 1 wrong");
    static const size_t len[] = {0, 1, 15, 16, 63, 1500};
    static const uint64_t want[] = {0x5150558081c71910ull, 0xee6e8441182f4aa2ull, 0xa084cb670ddc9ef4ull,
                                    0x7d2e071aa3d2402eull, 0x24f9f8b87eb46059ull, 0x71a4af9198db0da2ull};
    uint8_t key[16], msg[1500];
    for (int i = 0; i < 16; i++) key[i] = (uint8_t)i;
    for (int i = 0; i < 1500; i++) msg[i] = (uint8_t)(i % 251);
    int bad = 0;
    for (size_t i = 0; i < sizeof len / sizeof len[0]; i++)
        bad += ltp_gmac128(key, 0x0706050403020100ull, msg, len[i]) != want[i];
    CHECK(bad == 0, "%d AES-128-GMAC test vectors wrong", bad);
}

/* With auth on (mac: 0 SipHash-2-4, 1 AES-128-GMAC): everything genuine arrives; without the
 * pair's key nothing leaves; a datagram sealed for one receiver is refused by another; any
 * changed byte is refused; so is a datagram tagged by the other algorithm under the same key. */
static void test_auth(double mac)
{
    pair_t P;
    pair_init(&P, (const char *[]){"auth", "mac"}, (double[]){1, mac}, 2);
    float *v = vec(N, 1.0f), *got = calloc(N, sizeof *got);
    ltp_core_send(P.c[WK], 0, 1, 0, v, N * 4, 0, P.now);
    uint8_t b[1600];
    int slot;
    CHECK(ltp_core_poll_tx(P.c[WK], P.now, b, sizeof b, &slot) == 0, "sent without a key");
    uint8_t key[16] = {1, 2, 3}, other[16] = {9};
    ltp_core_set_peer_key(P.c[WK], 0, key, 16);
    ltp_core_set_peer_key(P.c[PS], 0, key, 16);
    ltp_core_send(P.c[WK], 0, 1, 0, v, N * 4, 0, P.now);   /* refused without the key: again */
    P.tap = tap_keep_data;
    key_t_ k1 = {1, 0};
    int ok = pair_run(&P, 2000000, rx_ready, &k1);
    CHECK(ok && ltp_core_rx_take(P.c[PS], 0, 1, 0, got, N * 4, NULL, NULL) == 0 && memcmp(got, v, N * 4) == 0,
          "authenticated message not delivered whole");
    uint8_t f[1600];
    int len = P.kept_len[0], rejected = 0;
    for (int i = 0; i < len; i += 37) {   /* flip one bit anywhere, tag included */
        memcpy(f, P.kept[0], (size_t)len);
        f[i] ^= 0x10;
        rejected += inject(&P, PS, f, len) != 0;
    }
    CHECK(rejected == (len + 36) / 37, "%d of %d altered datagrams accepted", (len + 36) / 37 - rejected, (len + 36) / 37);
    /* The worker's datagram, shown to a second PS-side core of another rank: its key differs. */
    ltp_core_t *third = ltp_core_new(&P.cfg, 7);
    ltp_core_add_peer(third, 0);
    ltp_core_set_peer_key(third, 0, key, 16);
    CHECK(ltp_core_input(third, 0, P.kept[0], (size_t)len, P.now) != 0, "a datagram for one receiver accepted by another");
    ltp_core_t *stranger = ltp_core_new(&P.cfg, 0xFFFF);
    ltp_core_add_peer(stranger, 0);
    ltp_core_set_peer_key(stranger, 0, other, 16);
    CHECK(ltp_core_input(stranger, 0, P.kept[0], (size_t)len, P.now) != 0, "a datagram accepted under another key");
    CHECK(stat(stranger, "bad_mac") == 1 && stat(third, "bad_mac") == 1, "bad_mac not counted");
    ltp_config_t cfg = P.cfg;
    ltp_config_set(&cfg, "mac", 1 - mac);
    ltp_core_t *other_alg = ltp_core_new(&cfg, 0xFFFF);
    ltp_core_add_peer(other_alg, 0);
    ltp_core_set_peer_key(other_alg, 0, key, 16);
    CHECK(ltp_core_input(other_alg, 0, P.kept[0], (size_t)len, P.now) != 0 &&
          stat(other_alg, "bad_mac") == 1, "a datagram tagged by the other algorithm accepted");
    ltp_core_free(other_alg);
    ltp_core_free(third);
    ltp_core_free(stranger);
    free(v); free(got);
    pair_free(&P);
}

int main(void)
{
    test_siphash_vectors();
    test_gmac_vectors();
    test_forged_short_message();
    first_copy(0);
    first_copy(1);
    test_forged_ack();
    test_forged_close();
    test_close_after_a_cancelled_send();
    test_idle_context_kept_while_room();
    test_table();
    test_ring();
    test_auth(0);
    test_auth(1);
    return check_summary();
}
