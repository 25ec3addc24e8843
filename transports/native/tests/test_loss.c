/* test_loss.c: the first-pass loss estimate behind the adaptive threshold (p_hat), over the
 * simulator of test_core.c, which includes this file. docs/ltp-protocol.md §4 ("Adaptive
 * threshold") and docs/plot-protocol.md §2 ("adaptive").
 *
 * p_hat was the least first-pass loss of a peer's last loss_window messages, whatever their
 * segment. PLOT sends one message per layer, and a layer of one packet loses all of it or nothing,
 * mostly nothing: one such message among the recent ones held p_hat at 0 and every layer at the
 * top of its range. Now each segment of the policy table (and segment 0) keeps its own window, and
 * the peer's window, which stands in for a segment until its own is full, takes only messages of
 * at least loss_min_packets packets. These tests hold the core to two things: for a peer that
 * sends one segment (LTP), every threshold is the one the former estimate gave, to the bit; and
 * for layers sent side by side (PLOT), each layer's threshold follows its own losses.
 */

/* ------------------------------------------------------------------ the former estimate */
/* One window per peer over every message it closed: the reference LTP's thresholds must match. */
typedef struct { uint32_t n; float ring[LTP_LOSS_WINDOW_MAX]; } ref_loss_t;

static void ref_note(ref_loss_t *r, double sample) { r->ring[r->n++ % LTP_LOSS_WINDOW_MAX] = (float)sample; }

/* The least of the last w samples; 0 until there are w. */
static double ref_p_hat(const ref_loss_t *r, uint32_t w)
{
    if (r->n < w) return 0;
    double lo = 1.0;
    for (uint32_t i = 0; i < w; i++) lo = MIN(lo, (double)r->ring[(r->n - 1 - i) % LTP_LOSS_WINDOW_MAX]);
    return lo;
}

/* The threshold rule of ltp_recv.c for a given p_hat: the segment's range, the RTT term. */
static double ref_threshold(const ltp_core_t *c, const peer_t *p, uint16_t seg, double p_hat)
{
    double lo = c->cfg.threshold_min, hi = c->cfg.threshold_max;
    if (seg < c->n_policy && c->policy[seg].set) { lo = c->policy[seg].lo; hi = c->policy[seg].hi; }
    if (lo >= hi) return hi;
    double rtt_term = 0;
    if (p->has_tpass && p->t_pass_us > 0) rtt_term = MIN(1.0, p->peer_srtt_us / p->t_pass_us);
    double th = MIN(hi, 1.0 - c->cfg.loss_weight * p_hat) - c->cfg.rtt_weight * rtt_term;
    return th < lo ? lo : th > hi ? hi : th;
}

/* The first-pass loss a closed message reports (rx_close); < 0 if it reports none. */
static double first_pass_loss(const rxmsg_t *m)
{
    uint32_t n_first = m->pass_end_us ? m->count : MIN(m->count, m->max_first_seq + 1);
    return n_first ? 1.0 - (double)MIN(m->first_rcvd, n_first) / n_first : -1.0;
}

/* ------------------------------------------------------------------ LTP: one segment */
/* Two workers each push a stream of segment-0 messages through 8 % loss, of sizes from one
 * packet to 85, so that one-packet messages (which enter only their segment's window, not the
 * peer's) are among them. After every close, the threshold the message closed at and the one in
 * force next must equal the former estimate's, exactly; under several configurations: the
 * defaults, every message in the peer's window (loss_min_packets 1) with a policy on segment 0 and
 * a policy table of eight segments, none in it (loss_min_packets far above every message) with
 * the RTT term on, and a window of three. */
static void test_loss_one_segment_unchanged(void)
{
    /* 57, 85, 34, 71, 51, 62, 43, 79, 23, 65, 48, 57 packets, then 1, 3, 1, 1: eight in a row
     * without a small one, where the threshold moves, and small ones, where it does not. */
    static const uint32_t sizes[] = {20000, 30000, 12000, 25000, 18000, 22000, 15000, 28000,
                                     8000, 23000, 17000, 20000, 100, 1000, 300, 64};
    enum { NW = 2, MSGS = 48 };
    uint64_t one_packet = 0, one_packet_lost = 0, adapted = 0, skipped = 0;
    for (int v = 0; v < 4; v++) {
        ltp_config_t c = base_cfg();
        if (v == 1) c.loss_min_packets = 1;
        if (v == 2) { c.loss_min_packets = 1000000; c.rtt_weight = 0.05; }
        if (v == 3) { c.loss_window = 3; c.threshold_min = 0.5; }
        sim_t s;
        sim_init(&s, NW + 1, &c, &c, (netcfg_t){.delay_us = 250, .loss = 0.08, .seed = 61 + (uint64_t)v});
        ltp_core_t *ps = s.core[0];
        if (v == 1) {
            CHECK(ltp_core_set_policy(ps, 0, 0.6, 0.99) == 0 && ltp_core_set_policy(ps, 7, 0.9, 1.0) == 0, "policies");
            CHECK(ps->peers[0].n_seg_loss == 8, "windows %u for a table of 8 segments", ps->peers[0].n_seg_loss);
        }
        ref_loss_t ref[NW];
        memset(ref, 0, sizeof ref);
        uint64_t mismatch = 0;
        float *vec = make_vec(sizes[1], 5), *got = malloc(sizes[1] * sizeof *got);   /* the largest */
        for (uint32_t id = 1; id <= MSGS; id++) {
            uint32_t n = sizes[id % (sizeof sizes / sizeof *sizes)];
            for (int w = 0; w < NW; w++) CHECK(ltp_core_send(s.core[w + 1], 0, id, 0, vec, n * 4, 0, s.now) == 0, "send");
            gather_t g = {NW, id};
            int ok = sim_run(&s, 3000000, gather_done, &g);
            CHECK(ok, "variant %d message %u not delivered", v, id);
            if (!ok) break;
            for (int w = 0; w < NW; w++) {
                const peer_t *p = &ps->peers[w];
                const rxmsg_t *m = rx_lookup(ps, p, id, 0);
                double sample = first_pass_loss(m);
                /* The threshold at the close was taken before the message's own sample, with the
                 * RTT term of that instant; without the term it is the estimate's alone. */
                if (c.rtt_weight == 0) mismatch += m->threshold != ref_threshold(ps, p, 0, ref_p_hat(&ref[w], c.loss_window));
                adapted += m->threshold < ref_threshold(ps, p, 0, 0);
                if (sample >= 0) ref_note(&ref[w], sample);
                mismatch += ltp_core_threshold(ps, w, 0) != ref_threshold(ps, p, 0, ref_p_hat(&ref[w], c.loss_window));
                one_packet += m->count == 1;
                one_packet_lost += m->count == 1 && sample == 1.0;
                CHECK(ltp_core_rx_take(ps, w, id, 0, got, n * 4, NULL, NULL) == 0, "take");
                ltp_core_send_release(s.core[w + 1], 0, id, 0);
            }
        }
        CHECK(mismatch == 0, "variant %d: %llu thresholds differ from the former estimate's", v,
              (unsigned long long)mismatch);
        skipped += ps->peers[0].seg_n_loss[0] - ps->peers[0].n_loss;
        printf("  LTP, one segment, variant %d: %u messages per worker, every threshold the former one\n", v, MSGS);
        free(vec);
        free(got);
        sim_free(&s);
    }
    /* Else the comparison above proved less than it says. */
    CHECK(adapted > 20, "only %llu closes below the top of the range", (unsigned long long)adapted);
    CHECK(one_packet >= 60 && one_packet_lost > 0, "one-packet messages %llu, of them lost in the first pass %llu",
          (unsigned long long)one_packet, (unsigned long long)one_packet_lost);
    CHECK(skipped > 0, "the peer's window took every message: its filter was not tested");
    printf("  (%llu closes below the range's top; %llu one-packet messages, %llu lost whole in the first pass)\n",
           (unsigned long long)adapted, (unsigned long long)one_packet, (unsigned long long)one_packet_lost);
}

/* ------------------------------------------------------------------ PLOT: layers side by side */
typedef struct { uint32_t msg; int n; } layers_t;
#define LAYER_SEG(i) ((uint16_t)(1 + (i)))

static int layers_done(sim_t *s, void *arg)
{
    const layers_t *l = arg;
    for (int i = 0; i < l->n; i++)
        if (ltp_core_rx_ready(s->core[0], 0, l->msg, LAYER_SEG(i)) != 1 ||
            ltp_core_send_status(s->core[1], 0, l->msg, LAYER_SEG(i), NULL, s->now) != 1)
            return 0;
    return 1;
}

/* A worker pushes three layers per iteration, as PLOT does, through 5 % loss: 57 packets, one
 * packet, 85 packets, each with the range [0.7, 1]. At the end of every iteration each layer's
 * threshold must be the one its own window gives, or, until that is full, the peer's window of
 * the multi-packet messages; and once the windows are full, the large layers close below the top
 * of their range in most iterations, where the former estimate, with the one-packet layer's
 * lossless messages among its last eight, would have held them at the top. A segment outside the
 * policy table has no window of its own and follows the peer's. */
static void test_loss_per_segment(void)
{
    static const uint32_t layers[] = {20000, 64, 30000};
    enum { NL = 3, ITERS = 20 };
    ltp_config_t c = base_cfg();
    c.max_tx_per_peer = c.max_open_per_peer = 2 * NL;
    sim_t s;
    sim_init(&s, 2, &c, &c, (netcfg_t){.delay_us = 250, .loss = 0.05, .seed = 73});
    ltp_core_t *ps = s.core[0];
    const peer_t *p = &ps->peers[0];
    for (int i = 0; i < NL; i++) CHECK(ltp_core_set_policy(ps, LAYER_SEG(i), 0.7, 1.0) == 0, "policy");
    CHECK(p->n_seg_loss == NL + 1, "windows %u for segments 0..%d", p->n_seg_loss, NL);
    uint32_t w = c.loss_window;
    ref_loss_t own[NL], multi;   /* each layer's window; the peer's (messages of 2 packets or more) */
    memset(own, 0, sizeof own);
    memset(&multi, 0, sizeof multi);
    double one_packet[ITERS];
    float *vec[NL], *got = malloc(layers[2] * sizeof *got);
    for (int i = 0; i < NL; i++) vec[i] = make_vec(layers[i], 9 + (uint64_t)i);
    uint64_t mismatch = 0, large = 0, below = 0, former_top = 0;
    for (uint32_t t = 0; t < ITERS; t++) {
        for (int i = 0; i < NL; i++)
            CHECK(ltp_core_send(s.core[1], 0, t, LAYER_SEG(i), vec[i], layers[i] * 4, 0, s.now) == 0, "send");
        layers_t l = {t, NL};
        int ok = sim_run(&s, 3000000, layers_done, &l);
        CHECK(ok, "iteration %u not delivered", t);
        if (!ok) break;
        for (int i = 0; i < NL; i++) {
            const rxmsg_t *m = rx_lookup(ps, p, t, LAYER_SEG(i));
            double sample = first_pass_loss(m);
            if (i == 1) one_packet[t] = sample;
            if (i != 1 && t >= w) {   /* a large layer, with its own window full */
                large++;
                below += m->threshold < 1.0;
                /* The former window at this close held every message of the two iterations before
                 * it (six closes of eight): p_hat was at most their one-packet layer's loss. */
                former_top += one_packet[t - 1] == 0 && one_packet[t - 2] == 0;
            }
            if (sample >= 0) {
                ref_note(&own[i], sample);
                if (m->count >= c.loss_min_packets) ref_note(&multi, sample);
            }
            CHECK(ltp_core_rx_take(ps, 0, t, LAYER_SEG(i), got, layers[i] * 4, NULL, NULL) == 0, "take");
            ltp_core_send_release(s.core[1], 0, t, LAYER_SEG(i));
        }
        /* At the iteration's end the peer's window holds the last w multi-packet messages whatever
         * order this iteration's closed in (two per iteration, w even). */
        for (int i = 0; i < NL; i++) {
            double ph = own[i].n >= w ? ref_p_hat(&own[i], w) : ref_p_hat(&multi, w);
            mismatch += ltp_core_threshold(ps, 0, LAYER_SEG(i)) != ref_threshold(ps, p, LAYER_SEG(i), ph);
        }
        mismatch += ltp_core_threshold(ps, 0, 9) != ref_threshold(ps, p, 9, ref_p_hat(&multi, w));
    }
    CHECK(mismatch == 0, "%llu thresholds are not their window's", (unsigned long long)mismatch);
    CHECK(below * 2 >= large, "the large layers closed below the top of their range %llu times of %llu",
          (unsigned long long)below, (unsigned long long)large);
    CHECK(former_top * 4 >= large * 3, "the former estimate would have been at the top only %llu times of %llu",
          (unsigned long long)former_top, (unsigned long long)large);
    CHECK(p->n_seg_loss == NL + 1, "windows grew to %u", p->n_seg_loss);
    printf("  PLOT, three layers (57, 1, 85 packets) at 5 %% loss: the large ones closed below the top %llu times "
           "of %llu (the former estimate: at the top at least %llu times)\n",
           (unsigned long long)below, (unsigned long long)large, (unsigned long long)former_top);
    for (int i = 0; i < NL; i++) free(vec[i]);
    free(got);
    sim_free(&s);
}

/* The windows cover segment 0 and the policy table, for peers added before and after it grew;
 * segments outside it, however many arrive, add none. */
static void test_loss_windows_bounded(void)
{
    ltp_config_t c = base_cfg();
    ltp_core_t *rx = ltp_core_new(&c, LTP_RANK_SERVER);
    CHECK(ltp_core_add_peer(rx, 0) == 0, "add peer");
    CHECK(rx->peers[0].n_seg_loss == 1, "windows before any policy: %u", rx->peers[0].n_seg_loss);
    CHECK(ltp_core_set_policy(rx, 5, 0.7, 1.0) == 0 && ltp_core_set_policy(rx, 2, 0.7, 1.0) == 0, "policies");
    CHECK(ltp_core_add_peer(rx, 1) == 1, "add peer");
    CHECK(rx->peers[0].n_seg_loss == 6 && rx->peers[1].n_seg_loss == 6, "windows %u and %u for 6 segments",
          rx->peers[0].n_seg_loss, rx->peers[1].n_seg_loss);
    ltp_core_free(rx);
}

static void test_loss(void)
{
    test_loss_windows_bounded();
    test_loss_one_segment_unchanged();
    test_loss_per_segment();
}
