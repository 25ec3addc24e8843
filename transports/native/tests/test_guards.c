/* test_guards.c: one test per defence that no other test guarded (project issue 29, item 4).
 *
 * Removing any of these once left the whole C suite green: refusing an untagged datagram when
 * auth is on (a MAC downgrade), the HELLO_ACK nonce, the CLOSE's echo, the upper bound on how
 * long a rate hint is obeyed (hint_ttl_max_us) and the clamp on the srtt a DATA advertises. Each
 * test forges what the defence refuses by mutating a genuine datagram, and fails without it:
 * tests/mutants.py removes each defence in turn (and the others the suite already guarded) and
 * requires `make test` to fail (`invoke mutants`).
 *
 * Tests 6 to 8 guard what wire version 5 added: a receiver stops waiting for a message none of
 * whose DATA arrived once its sender's later, authenticated DATA say the sender finished with it
 * (open_back), never before (a message still open at the sender, as a pipeline's older chunk
 * is), and never on an unauthenticated DATA's word.
 *
 * Test 9 guards the join's RTT sample (project issue 28): the answer to the latest HELLO times
 * the path, an answer to the HELLO before it joins without timing it (Karn's rule), and an answer
 * to neither joins nothing.
 */
#include "ltp.h"

#include "pair.h"

enum { O_MAC = 5, O_SRTT = 48, O_CLOSE_ECHO_TS = 32, TRAILER = 16, O_OPEN_BACK = 38 };

static const uint8_t KEY[16] = {7, 1, 2, 3};

/* 1. With auth on, a genuine DATA stripped of its trailer and marked untagged is refused, also
 * by a PS that has heard nothing yet (whose replay window would not refuse it instead). */
static void test_untagged_refused_with_auth_on(void)
{
    pair_t P;
    pair_init(&P, (const char *[]){"auth"}, (double[]){1}, 1);
    ltp_core_set_peer_key(P.c[WK], 0, KEY, 16);
    ltp_core_set_peer_key(P.c[PS], 0, KEY, 16);
    float *v = vec(N, 1.0f);
    P.tap = tap_keep_data;
    CHECK(deliver(&P, 1, v), "the genuine message was not delivered");
    CHECK(P.kept_len[0] > DATA_HDR + TRAILER, "no DATA to strip");
    uint8_t f[1600];
    int len = P.kept_len[0] - TRAILER;
    memcpy(f, P.kept[0], (size_t)len);
    f[O_MAC] = 0;
    ltp_core_t *fresh = ltp_core_new(&P.cfg, 0xFFFF);
    ltp_core_add_peer(fresh, 0);
    ltp_core_set_peer_key(fresh, 0, KEY, 16);
    CHECK(ltp_core_input(fresh, 0, f, (size_t)len, P.now) != 0, "an untagged DATA accepted with auth on");
    CHECK(stat(fresh, "bad_mac") == 1, "the downgrade not counted as bad_mac");
    CHECK(ltp_core_input(fresh, 0, P.kept[0], (size_t)P.kept_len[0], P.now) == 0,
          "the genuine DATA refused by the fresh PS");
    ltp_core_free(fresh);
    free(v);
    pair_free(&P);
}

/* 2. A HELLO_ACK that does not echo the HELLO's nonce joins nothing. */
static void test_hello_ack_nonce(void)
{
    pair_t P;
    pair_init(&P, NULL, NULL, 0);
    ltp_core_hello(P.c[WK], 0, P.now);
    uint8_t b[1600], ack[1600];
    int slot, len, ack_len = 0;
    while ((len = ltp_core_poll_tx(P.c[WK], P.now, b, sizeof b, &slot)) > 0) inject(&P, PS, b, len);
    while ((len = ltp_core_poll_tx(P.c[PS], P.now, b, sizeof b, &slot)) > 0)
        if (b[O_TYPE] == 5 && !ack_len) { memcpy(ack, b, (size_t)len); ack_len = len; }
    CHECK(ack_len > 0, "no HELLO_ACK to forge from");
    uint8_t f[1600];
    memcpy(f, ack, (size_t)ack_len);
    wr32(f + O_MSG, rd32(ack + O_MSG) ^ 0x10u);
    CHECK(inject(&P, WK, f, ack_len) != 0 && ltp_core_peer_joined(P.c[WK], 0) == 0,
          "a HELLO_ACK with another nonce joined the worker");
    CHECK(stat(P.c[WK], "bad_echo") == 1, "bad_echo %g", stat(P.c[WK], "bad_echo"));
    CHECK(inject(&P, WK, ack, ack_len) == 0 && ltp_core_peer_joined(P.c[WK], 0) == 1,
          "the genuine HELLO_ACK did not join the worker");
    pair_free(&P);
}

/* Drop every CLOSE the PS sends, keeping the first aside (its ACKs pass: the last ones, which
 * the CLOSE replaces, never come, so the send stays open). */
static int tap_keep_close(pair_t *P, int from, uint8_t *b, int *len)
{
    if (from != PS || b[O_TYPE] != 3) return 0;
    if (!P->kept_len[2]) { memcpy(P->kept[2], b, (size_t)*len); P->kept_len[2] = *len; }
    return 1;
}

/* 3. A CLOSE whose echo names no DATA the sender sent ends nothing. */
static void test_close_echo(void)
{
    pair_t P;
    float *v = pair_send_tapped(&P, tap_keep_close, 200000);
    CHECK(P.kept_len[2] > 0, "no CLOSE to forge from");
    uint8_t f[1600];
    memcpy(f, P.kept[2], (size_t)P.kept_len[2]);
    wr32(f + O_CLOSE_ECHO_TS, rd32(f + O_CLOSE_ECHO_TS) + 7000000u);   /* 7 s after any DATA */
    CHECK(inject(&P, WK, f, P.kept_len[2]) != 0, "a CLOSE with a forged echo accepted");
    CHECK(ltp_core_send_status(P.c[WK], 0, 1, 0, NULL, P.now) == 0, "a forged CLOSE ended the send");
    CHECK(inject(&P, WK, P.kept[2], P.kept_len[2]) == 0 &&
          ltp_core_send_status(P.c[WK], 0, 1, 0, NULL, P.now) == 1, "the genuine CLOSE did not end it");
    free(v);
    pair_free(&P);
}

/* 4. A hint of the slowest rate is obeyed no longer than hint_ttl_max_us, however long its own
 * TTL (8 packets at 0.01 Mbit/s: about 3 s). */
static void test_hint_ttl_max(void)
{
    pair_t P;
    pair_init(&P, (const char *[]){"hint_min_mbps"}, (double[]){0.01}, 1);
    float *v = vec(N, 1.0f);
    P.tap = tap_first_data_and_ack;
    ltp_core_send(P.c[WK], 0, 1, 0, v, N * 4, 0, P.now);
    pair_run(&P, 5000, NULL, NULL);
    CHECK(P.kept_len[1] > 0, "no ACK to forge from");
    uint8_t a[1600];
    memcpy(a, P.kept[1], (size_t)P.kept_len[1]);
    wr32(a + O_ACK_HINT, 1);   /* 1 kbit/s, raised to 0.01 Mbit/s */
    inject(&P, WK, a, P.kept_len[1]);
    ltp_send_stats_t ss;
    ltp_core_send_status(P.c[WK], 0, 1, 0, &ss, P.now);
    CHECK(ss.pacing_rate_mbps < 0.02, "the hint was not obeyed (%g Mbit/s)", ss.pacing_rate_mbps);
    double ttl_max = P.cfg.hint_ttl_max_us;
    ltp_core_send_status(P.c[WK], 0, 1, 0, &ss, P.now + (uint64_t)(1.25 * ttl_max));
    CHECK(ss.pacing_rate_mbps > 0.02, "the hint still paces the sender %.0f us later (%g Mbit/s)",
          1.25 * ttl_max, ss.pacing_rate_mbps);
    free(v);
    pair_free(&P);
}

/* Every DATA the worker sends advertises the largest srtt the field holds. */
static int tap_huge_srtt(pair_t *P, int from, uint8_t *b, int *len)
{
    (void)P; (void)len;
    if (from == WK && b[O_TYPE] == 1) wr32(b + O_SRTT, 0xFFFFFFFFu);
    return 0;
}

/* 5. The srtt a DATA advertises is believed only up to max_wait_us. */
static void test_srtt_clamp(void)
{
    pair_t P;
    pair_init(&P, NULL, NULL, 0);
    float *v = vec(N, 1.0f), *got = calloc(N, sizeof *got);
    P.tap = tap_huge_srtt;
    CHECK(deliver(&P, 1, v), "message not delivered");
    ltp_msg_stats_t ms;
    ltp_core_rx_take(P.c[PS], 0, 1, 0, got, N * 4, NULL, &ms);
    CHECK(ms.peer_srtt_us <= P.cfg.max_wait_us, "an advertised srtt of %.0f us believed",
          ms.peer_srtt_us);
    free(v); free(got);
    pair_free(&P);
}

/* Drops every DATA of message 1 while on. */
static int tap_drop_msg1(pair_t *P, int from, uint8_t *b, int *len)
{
    (void)P; (void)len;
    return from == WK && b[O_TYPE] == 1 && rd32(b + O_MSG) == 1;
}

/* A pair (auth on when `auth`) whose worker sends message 1, every DATA of it lost on the way.
 * Unpaced (cc off): a later message's DATA leave while message 1's wait for their loss to show. */
static float *send_msg1_lost(pair_t *P, int auth)
{
    pair_init(P, (const char *[]){"auth", "cc"}, (double[]){auth, 0}, 2);
    if (auth) {
        ltp_core_set_peer_key(P->c[WK], 0, KEY, 16);
        ltp_core_set_peer_key(P->c[PS], 0, KEY, 16);
    }
    float *v = vec(N, 1.0f);
    P->tap = tap_drop_msg1;
    ltp_core_send(P->c[WK], 0, 1, 0, v, N * 4, 0, P->now);
    pair_run(P, 20000, NULL, NULL);
    CHECK(ltp_core_rx_ready(P->c[PS], 0, 1, 0) == 0, "message 1 not open at the PS while sent");
    return v;
}

/* 6. The worker gives up on message 1 (none of it arrived) and sends message 2: message 1 is
 * gone at the PS at once, not waited for until a deadline. */
static void test_left_behind_is_gone(void)
{
    pair_t P;
    float *v = send_msg1_lost(&P, 1);
    ltp_core_send_release(P.c[WK], 0, 1, 0);
    CHECK(deliver(&P, 2, v), "message 2 not delivered");
    int r = ltp_core_rx_ready(P.c[PS], 0, 1, 0);
    CHECK(r == LTP_RX_GONE, "message 1 left behind: rx_ready %d, not gone", r);
    CHECK(ltp_core_rx_ready(P.c[PS], 0, 3, 0) == 0, "a message not yet sent called gone");
    free(v);
    pair_free(&P);
}

/* 7. A newer message alone ends nothing: message 2 sent while message 1 is still open at the
 * worker (its DATA say open_back 1, as a pipeline's newer chunk does) leaves 1 awaited; once the
 * worker gives 1 up, its message 3 says so and 1 is gone. */
static void test_open_older_message_is_not_gone(void)
{
    pair_t P;
    float *v = send_msg1_lost(&P, 1);
    CHECK(deliver(&P, 2, v), "message 2 not delivered");
    int r = ltp_core_rx_ready(P.c[PS], 0, 1, 0);
    CHECK(r == 0, "message 1, still open at its sender, called %d by the PS", r);
    ltp_core_send_release(P.c[WK], 0, 1, 0);
    CHECK(deliver(&P, 3, v), "message 3 not delivered");
    r = ltp_core_rx_ready(P.c[PS], 0, 1, 0);
    CHECK(r == LTP_RX_GONE, "message 1, finished at its sender, not gone: %d", r);
    free(v);
    pair_free(&P);
}

/* 8. Without auth a DATA's open_back is nobody's word (one forged DATA would end every genuine
 * message below it): test 6's message 1 is not gone, and a forged open_back 0 ends nothing. */
static int tap_keep_msg2(pair_t *P, int from, uint8_t *b, int *len)
{
    if (tap_drop_msg1(P, from, b, len)) return 1;
    if (from == WK && b[O_TYPE] == 1 && rd32(b + O_MSG) == 2 && !P->kept_len[0]) {
        memcpy(P->kept[0], b, (size_t)*len);
        P->kept_len[0] = *len;
    }
    return 0;
}

static void test_open_back_ignored_without_auth(void)
{
    pair_t P;
    float *v = send_msg1_lost(&P, 0);
    ltp_core_send_release(P.c[WK], 0, 1, 0);
    P.tap = tap_keep_msg2;
    CHECK(deliver(&P, 2, v), "message 2 not delivered");
    CHECK(ltp_core_rx_ready(P.c[PS], 0, 1, 0) == 0, "message 1 called gone without auth");
    CHECK(P.kept_len[0] > 0, "no DATA of message 2 to forge from");
    uint8_t f[1600];
    memcpy(f, P.kept[0], (size_t)P.kept_len[0]);
    wr32(f + O_MSG, 4);   /* a later id that says every one below it is finished */
    f[O_OPEN_BACK] = 0; f[O_OPEN_BACK + 1] = 0;
    inject(&P, PS, f, P.kept_len[0]);
    CHECK(ltp_core_rx_ready(P.c[PS], 0, 3, 0) == 0, "a forged open_back ended message 3");
    free(v);
    pair_free(&P);
}

/* The srtt a send sees before any of its DATA was acknowledged. */
static double first_srtt(pair_t *P)
{
    float *v = vec(N, 1.0f);
    ltp_send_stats_t st;
    CHECK(ltp_core_send(P->c[WK], 0, 1, 0, v, N * 4, 0, P->now) == 0, "the send was refused");
    CHECK(ltp_core_send_status(P->c[WK], 0, 1, 0, &st, P->now) >= 0, "no send status");
    free(v);
    return st.srtt_us;
}

/* Poll core k, handing its HELLO or HELLO_ACK (type t) to the other core or keeping it in keep. */
static int hello_out(pair_t *P, int k, int t, uint8_t *keep)
{
    uint8_t b[1600];
    int slot, len, got = 0;
    while ((len = ltp_core_poll_tx(P->c[k], P->now, b, sizeof b, &slot)) > 0)
        if (b[O_TYPE] == t) {
            if (keep) memcpy(keep, b, (size_t)len); else inject(P, 1 - k, b, len);
            got = len;
        }
    return got;
}

/* 9. The join's first RTT sample. */
static void test_hello_times_the_path(void)
{
    pair_t P;
    pair_init(&P, NULL, NULL, 0);
    ltp_core_hello(P.c[WK], 0, P.now);
    hello_out(&P, WK, 4, NULL);                    /* HELLO reaches the PS */
    P.now += 300;
    hello_out(&P, PS, 5, NULL);                    /* its answer, 300 us after the HELLO left */
    CHECK(ltp_core_peer_joined(P.c[WK], 0) == 1, "the answer did not join the worker");
    double srtt = first_srtt(&P);
    CHECK(fabs(srtt - 300) < 1, "the join gave srtt %.1f us, not its 300 us", srtt);
    pair_free(&P);

    /* Two HELLOs (the first unanswered in time): the late answer to the first joins, untimed. */
    pair_init(&P, NULL, NULL, 0);
    uint8_t first[1600], ack[1600];
    ltp_core_hello(P.c[WK], 0, P.now);
    int len1 = hello_out(&P, WK, 4, first);
    P.now += P.cfg.hello_interval_us;
    uint8_t second[1600];
    int len2 = hello_out(&P, WK, 4, second);
    CHECK(len1 > 0 && len2 > 0 && memcmp(first + O_SEG, second + O_SEG, 2) != 0,
          "the second HELLO did not carry a number of its own");
    inject(&P, PS, first, len1);
    int ack_len = hello_out(&P, PS, 5, ack);
    P.now += 50;
    CHECK(ack_len > 0 && inject(&P, WK, ack, ack_len) == 0 && ltp_core_peer_joined(P.c[WK], 0) == 1,
          "the answer to the earlier HELLO did not join the worker");
    srtt = first_srtt(&P);
    CHECK(srtt == 0, "an answer that may be to either HELLO was timed (srtt %.1f us)", srtt);
    pair_free(&P);

    /* A round trip of many HELLO intervals: the answer to the first HELLO arrives after ten more
     * went out and still joins (it did not when each HELLO had a nonce of its own), untimed; the
     * answer to the latest, 300 us after it left, is timed from it. */
    for (int answer_latest = 0; answer_latest < 2; answer_latest++) {
        pair_init(&P, NULL, NULL, 0);
        ltp_core_hello(P.c[WK], 0, P.now);
        uint8_t hello[1600], later[1600];   /* the HELLOs after the first are still on their way */
        int len = hello_out(&P, WK, 4, hello);
        for (int k = 0; k < 10; k++) {
            P.now += P.cfg.hello_interval_us;
            int again = hello_out(&P, WK, 4, answer_latest ? hello : later);
            if (answer_latest) len = again;
        }
        inject(&P, PS, hello, len);
        P.now += 300;
        ack_len = hello_out(&P, PS, 5, ack);
        CHECK(ack_len > 0 && inject(&P, WK, ack, ack_len) == 0 &&
              ltp_core_peer_joined(P.c[WK], 0) == 1,
              "the answer to HELLO %d of 11 did not join the worker", answer_latest ? 11 : 1);
        srtt = first_srtt(&P);
        CHECK(answer_latest ? fabs(srtt - 300) < 1 : srtt == 0,
              "the answer to HELLO %d of 11 gave srtt %.1f us", answer_latest ? 11 : 1, srtt);
        pair_free(&P);
    }
}

int main(void)
{
    test_untagged_refused_with_auth_on();
    test_hello_ack_nonce();
    test_close_echo();
    test_hint_ttl_max();
    test_srtt_clamp();
    test_left_behind_is_gone();
    test_open_older_message_is_not_gone();
    test_open_back_ignored_without_auth();
    test_hello_times_the_path();
    return check_summary();
}
