/* test_udp.c: tests of the UDP driver's blocking calls over real sockets on 127.0.0.1.
 *
 * Run with `make -C transports/native test` (or test-asan). Each test opens a server endpoint and
 * worker endpoints on loopback ports the kernel picks, so it needs no privileges and no network.
 * What it checks: ltp_udp_recv_some returns as soon as the asked-for number of messages closed,
 * takes every closed one, leaves the others with the core (a later call takes them), and at the
 * deadline returns what it has instead of failing the whole set; ltp_udp_linger returns after the
 * quiet period once the farewell CLOSEs are out, not at its bound; the segments of one message id
 * can be taken one by one; a send cut short by its deadline resumes when called again. Exit status
 * is non-zero if any check fails.
 */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime under -std=c11 */
#include "ltp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define N_WORKERS 3
#define N_FLOATS 20000   /* 80 KB: many datagrams */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct {
    ltp_udp_t *ps;
    ltp_udp_t *w[N_WORKERS];
    float data[N_WORKERS][N_FLOATS];
    float out[N_WORKERS][N_FLOATS];   /* where the server takes each worker's message */
    ltp_recv_req_t q[N_WORKERS];      /* the server's requests, one a worker */
} job_t;

/* Auth is on by default: the PS and worker r share pair key KEY with its last byte r. */
static const uint8_t KEY[LTP_KEY_BYTES] = "test_udp: a key";

static const uint8_t *pair_key(int r)
{
    static uint8_t k[LTP_KEY_BYTES];
    memcpy(k, KEY, sizeof k);
    k[LTP_KEY_BYTES - 1] = (uint8_t)r;
    return k;
}

static int open_job(job_t *j)
{
    ltp_config_t cfg;
    ltp_config_default(&cfg);
    ltp_config_set(&cfg, "max_msg_bytes", N_FLOATS * 4.0);
    ltp_config_set(&cfg, "threshold_min", 1.0);   /* reliable: a message closes when whole */
    ltp_config_set(&cfg, "threshold_max", 1.0);
    int err = 0;
    j->ps = ltp_udp_open(&cfg, LTP_RANK_SERVER, "127.0.0.1", 0, 0.0, &err);
    if (!j->ps) return err ? err : -1;
    int ps_port = ltp_udp_local_port(j->ps);
    for (int r = 0; r < N_WORKERS; r++) {
        j->w[r] = ltp_udp_open(&cfg, (uint16_t)r, "127.0.0.1", 0, 0.0, &err);
        if (!j->w[r]) return err ? err : -1;
        int rc = ltp_udp_add_peer(j->ps, (uint16_t)r, "127.0.0.1", (uint16_t)ltp_udp_local_port(j->w[r]));
        if (rc != r) return rc < 0 ? rc : -1;
        if (ltp_udp_set_peer_key(j->ps, r, pair_key(r), LTP_KEY_BYTES) < 0) return -1;
        rc = ltp_udp_add_peer(j->w[r], LTP_RANK_SERVER, "127.0.0.1", (uint16_t)ps_port);
        if (rc < 0) return rc;
        if (ltp_udp_set_peer_key(j->w[r], rc, pair_key(r), LTP_KEY_BYTES) < 0) return -1;
        rc = ltp_udp_join(j->w[r], rc, 2000000);
        if (rc < 0) return rc;
        for (int i = 0; i < N_FLOATS; i++) j->data[r][i] = (float)(r * 1000 + i % 997);
    }
    return 0;
}

/* The job a test runs, opened afresh; not opening is a failed check. */
static job_t *start_job(void)
{
    static job_t j;   /* too large for the stack */
    memset(&j, 0, sizeof j);
    int rc = open_job(&j);
    CHECK(rc == 0, "opening the job: %d", rc);
    return &j;
}

static void close_job(job_t *j)
{
    for (int r = 0; r < N_WORKERS; r++) ltp_udp_close(j->w[r]);
    ltp_udp_close(j->ps);
}

static int push(job_t *j, int r, uint32_t msg_id)
{
    ltp_send_req_t s = {.peer = 0, .msg_id = msg_id, .segment = 0, .len_bytes = N_FLOATS * 4,
                        .data = j->data[r]};
    return ltp_udp_send(j->w[r], &s, 1, 2000000);
}

/* The server's requests (j->q) for message ids[r] of every worker r, into j->out[r]. */
static void ask_for(job_t *j, const uint32_t *ids)
{
    memset(j->q, 0, sizeof j->q);
    for (int r = 0; r < N_WORKERS; r++) {
        j->q[r].peer = r;
        j->q[r].msg_id = ids[r];
        j->q[r].cap_bytes = N_FLOATS * 4;
        j->q[r].data = j->out[r];
    }
}

/* One worker delivers: recv_some(min_done 1) returns it at once, the others stay pending. */
static void test_recv_any(void)
{
    job_t *j = start_job();
    uint32_t ids[N_WORKERS] = {7, 3, 5};   /* every peer has its own message sequence */
    CHECK(push(j, 1, 3) == 0, "worker 1 push");
    ask_for(j, ids);
    double t0 = now_s();
    int got = ltp_udp_recv_some(j->ps, j->q, N_WORKERS, 1, 5000000);
    CHECK(got == 1, "took %d messages, not 1", got);
    CHECK(now_s() - t0 < 1.0, "recv any waited %.2f s", now_s() - t0);
    CHECK(j->q[1].status == 0 && j->q[0].status == LTP_ETIMEDOUT && j->q[2].status == LTP_ETIMEDOUT,
          "statuses %d %d %d", j->q[0].status, j->q[1].status, j->q[2].status);
    CHECK(memcmp(j->out[1], j->data[1], sizeof j->out[1]) == 0, "worker 1's values differ");
    CHECK(j->q[1].stats.received_bytes == N_FLOATS * 4, "received %llu bytes",
          (unsigned long long)j->q[1].stats.received_bytes);

    /* Nobody else delivers: at the deadline nothing is taken, and that is not an error. */
    ids[1] = 4;
    ask_for(j, ids);
    t0 = now_s();
    got = ltp_udp_recv_some(j->ps, j->q, N_WORKERS, 1, 100000);
    double waited = now_s() - t0;
    CHECK(got == 0, "took %d at the deadline", got);
    CHECK(waited >= 0.09 && waited < 1.0, "waited %.3f s for a 0.1 s deadline", waited);

    /* Worker 2 and 0 deliver while nobody asks; a later gather of all three takes both and times
     * out on worker 1 only. */
    CHECK(push(j, 2, 5) == 0, "worker 2 push");
    CHECK(push(j, 0, 7) == 0, "worker 0 push");
    ask_for(j, ids);
    got = ltp_udp_recv_some(j->ps, j->q, N_WORKERS, N_WORKERS, 200000);
    CHECK(got == 2, "gather with a deadline took %d, not 2", got);
    CHECK(j->q[0].status == 0 && j->q[2].status == 0 && j->q[1].status == LTP_ETIMEDOUT,
          "statuses %d %d %d", j->q[0].status, j->q[1].status, j->q[2].status);
    CHECK(memcmp(j->out[0], j->data[0], sizeof j->out[0]) == 0 &&
          memcmp(j->out[2], j->data[2], sizeof j->out[2]) == 0, "values of workers 0 and 2 differ");
    close_job(j);
}

/* A message that started arriving before the deadline is not lost by being left: the next call
 * takes it whole. */
static void test_left_message_is_kept(void)
{
    job_t *j = start_job();
    uint32_t ids[N_WORKERS] = {1, 1, 1};
    ask_for(j, ids);
    CHECK(ltp_udp_recv_some(j->ps, j->q, N_WORKERS, 1, 1000) == 0, "took something before any push");
    CHECK(push(j, 0, 1) == 0, "worker 0 push");   /* arrives while nobody asks */
    ask_for(j, ids);
    int got = ltp_udp_recv_some(j->ps, j->q, N_WORKERS, 1, 2000000);
    CHECK(got == 1 && j->q[0].status == 0, "took %d, status %d", got, j->q[0].status);
    CHECK(memcmp(j->out[0], j->data[0], sizeof j->out[0]) == 0, "worker 0's values differ");
    CHECK(ltp_udp_recv_some(j->ps, j->q, N_WORKERS, 4, 1000) == LTP_EINVAL, "min_done > n accepted");
    close_job(j);
}

/* Lingering ends leave within the quiet period (linger_min_us, 100 ms here) once their farewell
 * CLOSEs are out and the peers are quiet, not at linger's bound: the progress thread sends the
 * farewell after the caller first found it pending, and must wake the caller for it. */
static void test_linger_leaves_when_quiet(void)
{
    job_t *j = start_job();
    uint32_t ids[N_WORKERS] = {1, 1, 1};
    for (int r = 0; r < N_WORKERS; r++) CHECK(push(j, r, 1) == 0, "worker %d push", r);
    ask_for(j, ids);
    CHECK(ltp_udp_recv(j->ps, j->q, N_WORKERS, 2000000) == 0, "the server's gather failed");
    double t0 = now_s();
    CHECK(ltp_udp_linger(j->ps, 5000000) == 0, "server linger failed");
    double waited = now_s() - t0;
    CHECK(waited >= 0.09 && waited < 1.0, "the server lingered %.2f s (quiet period 0.1 s, bound 5 s)", waited);
    for (int r = 0; r < N_WORKERS; r++) {
        t0 = now_s();
        CHECK(ltp_udp_linger(j->w[r], 5000000) == 0, "worker %d linger failed", r);
        waited = now_s() - t0;
        CHECK(waited < 1.0, "worker %d lingered %.2f s (quiet period 0.1 s, bound 5 s)", r, waited);
    }
    close_job(j);
}

/* A message of several segments (PLOT's layers, one id) is taken segment by segment as each
 * closes: a segment whose first DATA arrives after another segment of its id was taken still
 * opens and is delivered; an older id is stale. */
static void test_segments_taken_one_by_one(void)
{
    job_t *j = start_job();
    for (int k = 0; k < 2; k++)
        j->q[k] = (ltp_recv_req_t){.peer = 0, .msg_id = 2, .segment = (uint32_t)(1 + k),
                                   .cap_bytes = N_FLOATS * 4, .data = j->out[k]};
    ltp_send_req_t s = {.peer = 0, .msg_id = 2, .segment = 1, .len_bytes = N_FLOATS * 4,
                        .data = j->data[0]};
    CHECK(ltp_udp_send(j->w[0], &s, 1, 2000000) == 0, "segment 1 push");
    int got = ltp_udp_recv_some(j->ps, j->q, 2, 1, 2000000);
    CHECK(got == 1 && j->q[0].status == 0 && j->q[1].status == LTP_ETIMEDOUT, "took %d, statuses %d %d",
          got, j->q[0].status, j->q[1].status);
    s.segment = 2;
    s.data = j->data[1];
    int rc = ltp_udp_send(j->w[0], &s, 1, 2000000);
    CHECK(rc == 0, "segment 2 of the id just taken was refused: %d", rc);
    got = ltp_udp_recv_some(j->ps, &j->q[1], 1, 1, 2000000);
    CHECK(got == 1 && j->q[1].status == 0, "segment 2: took %d, status %d", got, j->q[1].status);
    CHECK(memcmp(j->out[1], j->data[1], sizeof j->out[1]) == 0, "segment 2's values differ");
    s.msg_id = 1;   /* older than the id taken */
    CHECK(ltp_udp_send(j->w[0], &s, 1, 2000000) == LTP_ESTALE, "an older id was not stale");
    close_job(j);
}

static uint64_t stat_named(ltp_udp_t *u, const char *name)
{
    uint64_t st[256] = {0};
    ltp_udp_stats(u, st, ltp_stat_count());
    for (int i = 0; i < ltp_stat_count(); i++) if (strcmp(ltp_stat_name(i), name) == 0) return st[i];
    return UINT64_MAX;
}

/* A send cut short by the caller's deadline is kept: calling again with the same message (from
 * another buffer) resumes it, and the message arrives whole. The PS is not there yet when the
 * worker first sends, so the first call cannot finish. */
static void test_send_resumes_after_deadline(void)
{
    ltp_config_t cfg;
    ltp_config_default(&cfg);
    ltp_config_set(&cfg, "max_msg_bytes", N_FLOATS * 4.0);
    int err = 0, fd = socket(AF_INET, SOCK_DGRAM, 0);   /* a port nobody listens on, yet */
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof sa;
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && getsockname(fd, (struct sockaddr *)&sa, &n) == 0,
          "no free port");
    close(fd);
    uint16_t port = ntohs(sa.sin_port);
    ltp_udp_t *w = ltp_udp_open(&cfg, 0, "127.0.0.1", 0, 0.0, &err);
    CHECK(w && ltp_udp_add_peer(w, LTP_RANK_SERVER, "127.0.0.1", port) == 0 &&
          ltp_udp_set_peer_key(w, 0, KEY, sizeof KEY) == 0, "opening the worker: %d", err);
    static float data[2][N_FLOATS], again[2][N_FLOATS], out[2][N_FLOATS];
    ltp_send_req_t s[2];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < N_FLOATS; i++) data[k][i] = (float)(k * 1000 + i % 991);
        s[k] = (ltp_send_req_t){.peer = 0, .msg_id = 1, .segment = (uint32_t)(1 + k), .len_bytes = N_FLOATS * 4,
                                .data = data[k]};
    }
    CHECK(ltp_udp_send(w, s, 2, 50000) == LTP_ETIMEDOUT, "a send to nobody finished");
    CHECK(s[0].status == LTP_ETIMEDOUT && s[1].status == LTP_ETIMEDOUT, "statuses %d %d", s[0].status, s[1].status);
    CHECK(stat_named(w, "sends_suspended") == 2 && stat_named(w, "sends_cancelled") == 0, "suspended %llu cancelled %llu",
          (unsigned long long)stat_named(w, "sends_suspended"), (unsigned long long)stat_named(w, "sends_cancelled"));
    ltp_udp_t *ps = ltp_udp_open(&cfg, LTP_RANK_SERVER, "127.0.0.1", port, 0.0, &err);
    CHECK(ps && ltp_udp_add_peer(ps, 0, "127.0.0.1", (uint16_t)ltp_udp_local_port(w)) == 0 &&
          ltp_udp_set_peer_key(ps, 0, KEY, sizeof KEY) == 0, "opening the PS: %d", err);
    memcpy(again, data, sizeof data);   /* the caller's retry sends from elsewhere */
    memset(data, 0, sizeof data);
    s[0].data = again[0];
    s[1].data = again[1];
    CHECK(ltp_udp_send(w, s, 2, 2000000) == 0, "the retry failed: %d %d", s[0].status, s[1].status);
    CHECK(stat_named(w, "sends_resumed") == 2 && stat_named(w, "bad_close") == 0, "resumed %llu bad_close %llu",
          (unsigned long long)stat_named(w, "sends_resumed"), (unsigned long long)stat_named(w, "bad_close"));
    ltp_recv_req_t q[2];
    for (int k = 0; k < 2; k++)
        q[k] = (ltp_recv_req_t){.peer = 0, .msg_id = 1, .segment = (uint32_t)(1 + k), .cap_bytes = N_FLOATS * 4,
                                .data = out[k]};
    CHECK(ltp_udp_recv(ps, q, 2, 2000000) == 0, "the server did not get both segments");
    CHECK(memcmp(out, again, sizeof out) == 0, "values differ");
    ltp_udp_close(w);
    ltp_udp_close(ps);
}

int main(void)
{
    test_send_resumes_after_deadline();
    test_segments_taken_one_by_one();
    test_linger_leaves_when_quiet();
    test_recv_any();
    test_left_message_is_kept();
    return check_summary();
}
