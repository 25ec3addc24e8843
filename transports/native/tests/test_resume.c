/* test_resume.c: sends that outlast their caller's deadline, over the simulator of test_core.c,
 * which includes this file. A worker waits for its push in 1-second slices (the harness's
 * SLICE_S) and calls again with the same messages when a slice ends. The UDP driver then
 * suspends every send of the call (ltp_core_send_suspend) and the next call resumes them; it used
 * to release them, and the retry started each message over. For PLOT's per-layer messages that
 * stalled the early iterations for seconds at low bandwidth: a layer the PS had already closed
 * was sent again from its first packet, and its CLOSE, counting the whole layer, was refused as
 * bad_close until the new send had sent the whole layer again; a closed message gets no ACKs, so
 * those packets held the window, and the push waited on backed-off probes. docs/plot-protocol.md
 * ("The stall of the early iterations") and docs/ltp-protocol.md §3 ("Deadlines").
 */

/* The reference model's tensors (the MLP on Fashion-MNIST), in floats: PLOT's layer messages,
 * segments 1..6. 437,544 bytes in all. */
static const uint32_t MLP_LAYERS[] = {100352, 128, 8192, 64, 640, 10};
#define N_LAYERS 6
#define SLICE_US 1000000u   /* harness/hosts/node.py SLICE_S */

static uint64_t st_of(const ltp_core_t *c, int stat) { return c->st[stat]; }

/* One worker's send of segment seg of message msg. */
static const txmsg_t *send_of(const ltp_core_t *c, uint32_t msg, uint16_t seg)
{
    for (uint32_t j = 0; j < c->cfg.max_tx_per_peer; j++)
        if (c->peers[0].tx[j].used && c->peers[0].tx[j].msg_id == msg && c->peers[0].tx[j].segment == seg)
            return &c->peers[0].tx[j];
    return NULL;
}

static int send_done(sim_t *s, void *arg)
{
    const uint32_t *key = arg;   /* worker node, msg, segment */
    return ltp_core_send_status(s->core[key[0]], 0, key[1], (uint16_t)key[2], NULL, s->now) == 1;
}

/* A small layer and a large one, pushed together at 3 Mbit/s: the first slice ends with the small
 * one closed by the PS (and taken) and the large one half sent. Calling again resumes the large
 * one where it stopped and finds the small one done; the CLOSE that completes the large one is
 * accepted. A forged CLOSE claiming more than the resumed send has sent is still refused. Then
 * the same with the sends released, as the driver did, for the accounting of a key sent again
 * after its send was released: the receiver's CLOSE for the small layer counts every packet of
 * it, and is genuine. */
static void test_resume_after_deadline(void)
{
    ltp_config_t c = base_cfg();
    c.max_tx_per_peer = 2 * N_LAYERS;
    c.max_open_per_peer = 4 * N_LAYERS;
    for (int release = 0; release < 2; release++) {
        sim_t s;
        sim_init(&s, 2, &c, &c, (netcfg_t){.delay_us = 100, .bottleneck_bytes_per_us = 3e6 / 8e6, .queue_pkts = 64,
                                           .seed = 41});
        ltp_core_t *w = s.core[1], *ps = s.core[0];
        ltp_core_set_policy(ps, 1, 1.0, 1.0);   /* the profiling phase: every layer whole */
        ltp_core_set_policy(ps, 2, 1.0, 1.0);
        float *small = make_vec(MLP_LAYERS[2], 3), *large = make_vec(MLP_LAYERS[0], 4);
        float *got = malloc(MLP_LAYERS[0] * sizeof *got);
        uint32_t n_small = MLP_LAYERS[2] * 4, n_large = MLP_LAYERS[0] * 4;
        CHECK(ltp_core_send(w, 0, 7, 1, small, n_small, 0, s.now) == 0, "send small");
        CHECK(ltp_core_send(w, 0, 7, 2, large, n_large, 0, s.now) == 0, "send large");
        uint32_t key_small[3] = {1, 7, 1};
        sim_run(&s, SLICE_US / 2, send_done, key_small);
        CHECK(ltp_core_rx_ready(ps, 0, 7, 1) == 1, "the small layer did not close in time (nothing tested)");
        CHECK(ltp_core_rx_take(ps, 0, 7, 1, got, n_small, NULL, NULL) == 0, "take the small layer");
        sim_run(&s, SLICE_US / 2, NULL, NULL);   /* the rest of the slice: the large one goes on */
        uint64_t packets_before = send_of(w, 7, 2)->packets;
        CHECK(packets_before > 20 && packets_before < send_of(w, 7, 2)->count,
              "the large layer sent %llu of %u packets in the slice (nothing tested)",
              (unsigned long long)packets_before, send_of(w, 7, 2)->count);
        for (uint16_t seg = 1; seg <= 2; seg++) {   /* the deadline: what ltp_udp_send does */
            if (release) ltp_core_send_release(w, 0, 7, seg);
            else ltp_core_send_suspend(w, 0, 7, seg);
        }
        uint64_t data0 = st_of(w, LTP_S_DATA_SENT);
        /* The caller's retry: the same messages, from buffers of its own (copies here). */
        float *small2 = malloc(n_small), *large2 = malloc(n_large);
        memcpy(small2, small, n_small);
        memcpy(large2, large, n_large);
        free(small); free(large);
        CHECK(ltp_core_send(w, 0, 7, 1, small2, n_small, 0, s.now) == 0, "send small again");
        CHECK(ltp_core_send(w, 0, 7, 2, large2, n_large, 0, s.now) == 0, "send large again");
        if (!release) {
            CHECK(ltp_core_send_status(w, 0, 7, 1, NULL, s.now) == 1, "the small layer is not done at once");
            const txmsg_t *m = send_of(w, 7, 2);
            CHECK(m->packets == packets_before, "the resumed send restarted: %llu packets, %llu before",
                  (unsigned long long)m->packets, (unsigned long long)packets_before);
            /* A CLOSE echoing a real transmission but claiming the whole layer: refused. */
            uint8_t b[LTP_CLOSE_BYTES];
            hdr_t h = core_header(ps, LTP_T_CLOSE, 7, 2);
            h.received = m->count; h.close_count = m->count; h.reason = LTP_CLOSE_COMPLETE;
            h.echo_seq = 0; h.echo_ts = m->seq_ts[0];
            uint64_t bad0 = st_of(w, LTP_S_BAD_CLOSE);
            ltp_core_input(w, 0, b, (size_t)wire_put_close(b, &h), s.now);
            CHECK(st_of(w, LTP_S_BAD_CLOSE) == bad0 + 1, "a forged CLOSE of a resumed send was not refused");
            CHECK(ltp_core_send_status(w, 0, 7, 2, NULL, s.now) == 0, "a forged CLOSE ended the resumed send");
        }
        uint32_t key_large[3] = {1, 7, 2};
        int ok = sim_run(&s, 4 * SLICE_US, send_done, key_large);
        sim_run(&s, 100000, send_done, key_small);
        ltp_send_stats_t ss, sl;
        ltp_core_send_status(w, 0, 7, 1, &ss, s.now);
        ltp_core_send_status(w, 0, 7, 2, &sl, s.now);
        uint64_t data = st_of(w, LTP_S_DATA_SENT) - data0;
        printf("  retried after a deadline (%s): small done %llu, large done %llu after %.2f s, DATA after the "
               "retry %llu (large: %llu of %llu sent before), bad_close %llu\n", release ? "released" : "suspended",
               (unsigned long long)ss.done, (unsigned long long)sl.done, (double)sl.elapsed_us / 1e6,
               (unsigned long long)data, (unsigned long long)packets_before, (unsigned long long)sl.count,
               (unsigned long long)st_of(w, LTP_S_BAD_CLOSE));
        CHECK(ok && sl.done == LTP_SEND_CLOSED, "%s: the large layer did not complete (done %llu)",
              release ? "released" : "suspended", (unsigned long long)sl.done);
        CHECK(ss.done == LTP_SEND_CLOSED || ss.done == LTP_SEND_STALE, "%s: the small layer is not done",
              release ? "released" : "suspended");
        CHECK(st_of(w, LTP_S_BAD_CLOSE) == (uint64_t)!release, "%s: bad_close %llu",
              release ? "released" : "suspended", (unsigned long long)st_of(w, LTP_S_BAD_CLOSE));
        CHECK(ltp_core_rx_take(ps, 0, 7, 2, got, n_large, NULL, NULL) == 0, "take the large layer");
        for (uint32_t i = 0; i < MLP_LAYERS[0]; i++)
            if (memcmp(&got[i], &large2[i], 4)) { CHECK(0, "float %u differs", i); break; }
        if (!release) {
            /* Nothing sent twice: the rest of the large layer and its losses, no DATA for the small. */
            CHECK(data <= sl.count - packets_before + sl.retransmits, "%llu DATA after the retry",
                  (unsigned long long)data);
            CHECK(st_of(w, LTP_S_SENDS_SUSPENDED) == 1 && st_of(w, LTP_S_SENDS_RESUMED) == 1,
                  "suspended %llu resumed %llu", (unsigned long long)st_of(w, LTP_S_SENDS_SUSPENDED),
                  (unsigned long long)st_of(w, LTP_S_SENDS_RESUMED));
        }
        ltp_core_send_release(w, 0, 7, 1);
        ltp_core_send_release(w, 0, 7, 2);
        free(small2); free(large2); free(got);
        sim_free(&s);
    }
}

/* A suspended send holds its slot but not the link: it sends nothing, what it had in flight
 * leaves the window (at once if its peer is silent, else at its probe timeout), a newer id of its
 * segment releases it, and other bytes under its key start a new send. */
static void test_suspended_sends_let_go(void)
{
    ltp_config_t c = base_cfg();
    sim_t s;
    sim_init(&s, 2, &c, &c, (netcfg_t){.delay_us = 100, .seed = 43, .cut_node = 1});   /* nothing arrives */
    ltp_core_t *w = s.core[1];
    float *v = make_vec(N_FLOATS, 5);
    CHECK(ltp_core_send(w, 0, 1, 0, v, N_FLOATS * 4, 0, s.now) == 0, "send 1");
    sim_run(&s, 20000, NULL, NULL);
    CHECK(w->peers[0].fl->inflight_bytes > 0 && send_of(w, 1, 0)->pto_count > 0,
          "nothing in flight, or no probe timeout yet (nothing tested)");
    ltp_core_send_suspend(w, 0, 1, 0);
    CHECK(w->peers[0].fl->inflight_bytes == 0, "a suspended send to a silent peer holds %llu bytes in flight",
          (unsigned long long)w->peers[0].fl->inflight_bytes);
    uint64_t data0 = st_of(w, LTP_S_DATA_SENT);
    sim_run(&s, 2000000, NULL, NULL);
    CHECK(st_of(w, LTP_S_DATA_SENT) == data0, "a suspended send sent %llu DATA",
          (unsigned long long)(st_of(w, LTP_S_DATA_SENT) - data0));
    CHECK(ltp_core_next_timeout(w, s.now) == NEVER, "a suspended send keeps a timer");
    v[0] += 1;   /* other bytes under the key: a new send, not a resumed one */
    CHECK(ltp_core_send(w, 0, 1, 0, v, N_FLOATS * 4, 0, s.now) == 0, "send 1 with other bytes");
    CHECK(send_of(w, 1, 0)->packets == 0 && st_of(w, LTP_S_SENDS_RESUMED) == 0 &&
          st_of(w, LTP_S_SENDS_CANCELLED) == 1, "other bytes resumed the send");
    ltp_core_send_suspend(w, 0, 1, 0);
    CHECK(ltp_core_send(w, 0, 2, 0, v, N_FLOATS * 4, 0, s.now) == 0, "send 2");
    CHECK(!send_of(w, 1, 0) && st_of(w, LTP_S_SENDS_CANCELLED) == 2, "a newer id did not release the suspended send");
    free(v);
    sim_free(&s);
}

/* PLOT's early iterations at 3 Mbit/s: four workers push the MLP's six layers at once, each
 * waiting in 1-second slices and calling again with the same layers; the PS takes each layer as
 * it closes (bound 1.0: the profiling phase). The reproducer of the stall on the testbed. Kept
 * (suspended and resumed), the gather completes near the time its frames need on the link and no
 * CLOSE is refused; released and sent again, as the driver did, no worker's push finishes. */
typedef struct {
    int nw, keep;
    uint32_t msg;
    float *grad[MAXN];
    int pushed[MAXN], taken[MAXN][N_LAYERS];
    uint64_t push_us[MAXN], gather_us, start;
} plot_push_t;

static uint32_t layer_off(int l) { uint32_t o = 0; for (int i = 0; i < l; i++) o += MLP_LAYERS[i]; return o; }

static void plot_call(sim_t *s, plot_push_t *pp, int wk)
{
    for (int l = 0; l < N_LAYERS; l++) {
        int rc = ltp_core_send(s->core[wk + 1], 0, pp->msg, (uint16_t)(1 + l), pp->grad[wk] + layer_off(l),
                               MLP_LAYERS[l] * 4, 0, s->now);
        CHECK(rc == 0, "push of layer %d rc %d", l, rc);
    }
}

/* Takes at the PS what closed and returns the pushes that finished (their sends released); done
 * when every layer was taken and every push returned. */
static int plot_progress(sim_t *s, void *arg)
{
    plot_push_t *pp = arg;
    static float buf[100352];
    int all = 1;
    for (int wk = 0; wk < pp->nw; wk++) {
        for (int l = 0; l < N_LAYERS; l++)
            if (!pp->taken[wk][l] && ltp_core_rx_ready(s->core[0], wk, pp->msg, (uint16_t)(1 + l)) == 1) {
                CHECK(ltp_core_rx_take(s->core[0], wk, pp->msg, (uint16_t)(1 + l), buf, sizeof buf, NULL, NULL) == 0,
                      "take");
                pp->taken[wk][l] = 1;
            }
        int done = 1;
        for (int l = 0; l < N_LAYERS; l++) {
            all &= pp->taken[wk][l];
            done &= ltp_core_send_status(s->core[wk + 1], 0, pp->msg, (uint16_t)(1 + l), NULL, s->now) == 1;
        }
        if (!pp->pushed[wk] && done) {
            pp->pushed[wk] = 1;
            pp->push_us[wk] = s->now - pp->start;
            for (int l = 0; l < N_LAYERS; l++) ltp_core_send_release(s->core[wk + 1], 0, pp->msg, (uint16_t)(1 + l));
        }
        all &= pp->pushed[wk];
    }
    if (!pp->gather_us && all) pp->gather_us = s->now - pp->start;
    return all;
}

static void plot_slices(int keep, uint64_t limit_us, plot_push_t *pp, uint64_t *bad_close, uint64_t *resumed)
{
    enum { NW = 4 };
    ltp_config_t c = base_cfg();
    c.max_tx_per_peer = 2 * N_LAYERS;    /* what transports/plot.py sets */
    c.max_open_per_peer = 4 * N_LAYERS;
    sim_t s;
    sim_init(&s, NW + 1, &c, &c, (netcfg_t){.delay_us = 100, .bottleneck_bytes_per_us = 3e6 / 8e6,
                                            .queue_pkts = 64, .seed = 47});
    for (int l = 0; l < N_LAYERS; l++) ltp_core_set_policy(s.core[0], (uint16_t)(1 + l), 1.0, 1.0);
    memset(pp, 0, sizeof *pp);
    pp->nw = NW; pp->keep = keep; pp->msg = 1; pp->start = s.now;
    for (int wk = 0; wk < NW; wk++) {
        pp->grad[wk] = make_vec(N_FLOATS, 50 + (uint64_t)wk);
        plot_call(&s, pp, wk);
    }
    while (!plot_progress(&s, pp) && s.now - pp->start < limit_us) {
        uint64_t slice_end = pp->start + (((s.now - pp->start) / SLICE_US) + 1) * SLICE_US;
        if (sim_run(&s, slice_end - s.now, plot_progress, pp)) break;
        for (int wk = 0; wk < NW; wk++) {   /* the slice ended: ltp_udp_send returns, the worker calls again */
            if (pp->pushed[wk]) continue;
            for (int l = 0; l < N_LAYERS; l++) {
                if (keep) ltp_core_send_suspend(s.core[wk + 1], 0, pp->msg, (uint16_t)(1 + l));
                else ltp_core_send_release(s.core[wk + 1], 0, pp->msg, (uint16_t)(1 + l));
            }
            plot_call(&s, pp, wk);
        }
    }
    *bad_close = *resumed = 0;
    for (int wk = 0; wk < NW; wk++) {
        *bad_close += st_of(s.core[wk + 1], LTP_S_BAD_CLOSE);
        *resumed += st_of(s.core[wk + 1], LTP_S_SENDS_RESUMED);
        free(pp->grad[wk]);
    }
    sim_free(&s);
}

static void test_plot_push_in_slices(void)
{
    /* Frames of the 4 x 312 packets (payload, 52-byte header, 42 bytes of UDP, IP and Ethernet). */
    double bound_s = 4.0 * (N_FLOATS * 4.0 + 312 * 94.0) / (3e6 / 8);
    for (int keep = 1; keep >= 0; keep--) {
        plot_push_t pp;
        uint64_t bad_close, resumed;
        plot_slices(keep, keep ? 30000000 : 12000000, &pp, &bad_close, &resumed);
        int finished = 0;
        for (int wk = 0; wk < pp.nw; wk++) finished += pp.pushed[wk];
        printf("  PLOT push of 4 workers at 3 Mbit/s in 1 s slices, sends %s: gather %.2f s (%.2f x the frames' "
               "time), pushes finished %d of 4, bad_close %llu, resumed %llu\n", keep ? "suspended" : "released",
               (double)pp.gather_us / 1e6, (double)pp.gather_us / 1e6 / bound_s, finished,
               (unsigned long long)bad_close, (unsigned long long)resumed);
        if (!keep) continue;   /* the old driver's way: reported, it does not finish */
        CHECK(pp.gather_us && (double)pp.gather_us / 1e6 <= 1.15 * bound_s, "gather %.2f s, bound %.2f s",
              (double)pp.gather_us / 1e6, bound_s);
        CHECK(bad_close == 0, "bad_close %llu", (unsigned long long)bad_close);
        CHECK(resumed > 0, "no send outlasted a slice (nothing tested)");
    }
}

static void test_resume(void)
{
    test_resume_after_deadline();
    test_suspended_sends_let_go();
    test_plot_push_in_slices();
}
