/*
 * nfq-delay: hold every packet of one NFQUEUE queue for a fixed time, then accept it, in order.
 *
 *     nfq-delay --queue N --delay-ms D [--maxlen P] [--rt-priority R]
 *
 * Binds queue N in the current network namespace, and for every packet the kernel queues there
 * notes when it was received from the kernel (CLOCK_MONOTONIC) and accepts it D milliseconds later
 * (fractional, e.g. 0.5). The delay is constant, so deadlines come in arrival order and a FIFO of
 * (packet id, deadline) is the whole schedule; one batch verdict ("accept every id up to X")
 * releases all packets that are due. Only packet metadata is copied to user space.
 *
 * Prints one line "ready" (flushed) once the queue is bound. On SIGTERM or SIGINT it accepts
 * everything still held, unbinds, prints its counters as one JSON line and exits 0. Remove the
 * rule that feeds the queue first: the kernel drops what it queues after the last verdict
 * ("dropped_at_unbind"). Exit status 2 is a usage error, 1 a runtime failure (message on stderr).
 *
 * With --rt-priority R (1-99) it runs SCHED_FIFO, ahead of every normal process (the testbed's
 * training and switch processes); it never spins, and the kernel's RT throttling still reserves
 * CPU time for everything else.
 *
 * Overload: the queue is set fail-open, so when the kernel cannot queue a packet (queue full, or
 * this socket's receive buffer full) it lets the packet through undelayed instead of dropping it.
 * Such packets are counted where possible: a gap in the kernel's packet ids ("missed_ids") is a
 * notification that never reached us; "max_backlog" equal to "maxlen" means the queue was full.
 *
 * Built with -DNFQ_DELAY_SELF_TEST, main() is replaced by tests of the FIFO (no root, no kernel).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>

#include <linux/netfilter.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#define ND_MAX_DELAY_MS 1000.0
#define ND_DEFAULT_MAXLEN 131072u /* ~1 s of full-size packets at 1.5 Gbit/s */
#define ND_RCVBUF_BYTES (16 * 1024 * 1024)
#define ND_LATE_NS 1000000    /* a verdict more than 1 ms after its deadline is "late" */
#define ND_RECV_BURST 256     /* messages read before releasing due packets again */

/* ---- the schedule: a ring of (packet id, deadline), oldest first --------------------------- */

typedef struct {
    uint32_t *ids;
    int64_t *due_ns;
    size_t cap, head, len;
} nd_fifo;

typedef struct {
    uint64_t packets;      /* packets received from the kernel */
    uint64_t released;     /* packets accepted at their deadline */
    uint64_t late;         /* ... of which more than ND_LATE_NS after it */
    int64_t max_late_ns;
    int64_t sum_late_ns;
    size_t max_backlog;
    uint64_t ring_full;    /* accepted at once because the ring was full */
    uint64_t missed_ids;   /* ids the kernel assigned but never delivered (fail-open) */
    uint64_t enobufs;      /* receive-buffer overruns reported by the socket */
    uint64_t verdict_errors;
    uint64_t accepted_at_stop;
    uint64_t dropped_at_unbind; /* queued after the last verdict: the kernel drops them */
} nd_stats;

static int nd_fifo_init(nd_fifo *f, size_t cap)
{
    f->ids = calloc(cap, sizeof *f->ids);
    f->due_ns = calloc(cap, sizeof *f->due_ns);
    f->cap = cap;
    f->head = f->len = 0;
    return f->ids && f->due_ns ? 0 : -1;
}

static void nd_fifo_free(nd_fifo *f)
{
    free(f->ids);
    free(f->due_ns);
    f->ids = NULL;
    f->due_ns = NULL;
}

/* Append a packet; -1 if the ring is full. */
static int nd_fifo_push(nd_fifo *f, nd_stats *s, uint32_t id, int64_t due_ns)
{
    if (f->len == f->cap)
        return -1;
    size_t tail = (f->head + f->len) % f->cap;
    f->ids[tail] = id;
    f->due_ns[tail] = due_ns;
    f->len++;
    if (f->len > s->max_backlog)
        s->max_backlog = f->len;
    return 0;
}

/* Pop every packet due at now_ns; return how many, and the newest popped id in *last_id. */
static size_t nd_fifo_pop_due(nd_fifo *f, nd_stats *s, int64_t now_ns, uint32_t *last_id)
{
    size_t n = 0;
    while (f->len > 0 && f->due_ns[f->head] <= now_ns) {
        int64_t late_ns = now_ns - f->due_ns[f->head];
        if (late_ns > ND_LATE_NS)
            s->late++;
        if (late_ns > s->max_late_ns)
            s->max_late_ns = late_ns;
        s->sum_late_ns += late_ns;
        *last_id = f->ids[f->head];
        f->head = (f->head + 1) % f->cap;
        f->len--;
        n++;
    }
    s->released += n;
    return n;
}

static uint32_t nd_fifo_newest(const nd_fifo *f)
{
    return f->ids[(f->head + f->len - 1) % f->cap];
}

static void nd_fifo_clear(nd_fifo *f)
{
    f->head = (f->head + f->len) % f->cap;
    f->len = 0;
}

static int64_t nd_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#ifndef NFQ_DELAY_SELF_TEST

/* ---- the queue ------------------------------------------------------------------------------ */

typedef struct {
    struct nfq_q_handle *qh;
    nd_fifo fifo;
    nd_stats stats;
    int64_t delay_ns;
    int64_t recv_ns;   /* when the message being handled was received */
    uint32_t last_seen_id;
    bool seen_any;
} nd_state;

static volatile sig_atomic_t nd_stop;

static void nd_on_signal(int sig)
{
    (void)sig;
    nd_stop = 1;
}

static int nd_on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa,
                        void *data)
{
    (void)msg;
    nd_state *st = data;
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    if (!ph)
        return 0;
    uint32_t id = ntohl(ph->packet_id);
    st->stats.packets++;
    /* The kernel numbers queued packets consecutively; a gap is a notification that was lost. */
    if (st->seen_any && id != st->last_seen_id + 1u)
        st->stats.missed_ids += (uint32_t)(id - st->last_seen_id - 1u);
    st->last_seen_id = id;
    st->seen_any = true;
    if (nd_fifo_push(&st->fifo, &st->stats, id, st->recv_ns + st->delay_ns) != 0) {
        st->stats.ring_full++;
        if (nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL) < 0)
            st->stats.verdict_errors++;
    }
    return 0;
}

/* Read what the socket holds (at most ND_RECV_BURST messages); -1 on a fatal error. */
static int nd_receive(struct nfq_handle *h, int fd, nd_state *st, char *buf, size_t buf_len)
{
    for (int i = 0; i < ND_RECV_BURST; i++) {
        ssize_t n = recv(fd, buf, buf_len, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (errno == ENOBUFS) { /* the kernel overran our buffer; ids will show the gap */
                st->stats.enobufs++;
                continue;
            }
            if (errno == EINTR)
                continue;
            perror("nfq-delay: recv");
            return -1;
        }
        st->recv_ns = nd_now_ns();
        nfq_handle_packet(h, buf, (int)n);
    }
    return 0;
}

static void nd_release_due(nd_state *st)
{
    uint32_t last_id = 0;
    if (nd_fifo_pop_due(&st->fifo, &st->stats, nd_now_ns(), &last_id) > 0 &&
        nfq_set_verdict_batch(st->qh, last_id, NF_ACCEPT) < 0)
        st->stats.verdict_errors++;
}

/* The kernel's own counters for queue `num` in this namespace (-1 if unreadable). */
static void nd_kernel_counters(unsigned num, long long *dropped, long long *user_dropped)
{
    *dropped = *user_dropped = -1;
    FILE *f = fopen("/proc/net/netfilter/nfnetlink_queue", "r");
    if (!f)
        return;
    unsigned q, copy_mode, copy_range, total, portid, seq, one;
    long long d, ud;
    while (fscanf(f, "%u %u %u %u %u %lld %lld %u %u", &q, &portid, &total, &copy_mode,
                  &copy_range, &d, &ud, &seq, &one) == 9) {
        if (q == num) {
            *dropped = d;
            *user_dropped = ud;
        }
    }
    fclose(f);
}

static void nd_usage(FILE *out)
{
    fprintf(out, "usage: nfq-delay --queue N --delay-ms D [--maxlen P] [--rt-priority R]\n"
                 "  hold each packet of NFQUEUE queue N (0-65535) D ms (0-%g), then accept it;\n"
                 "  P is the kernel queue length and ring size (default %u);\n"
                 "  R (1-99) runs the helper SCHED_FIFO at that priority (default: normal)\n",
            ND_MAX_DELAY_MS, ND_DEFAULT_MAXLEN);
}

static int nd_parse_uint(const char *s, unsigned long max, unsigned long *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v > max)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"queue", required_argument, NULL, 'q'},
        {"delay-ms", required_argument, NULL, 'd'},
        {"maxlen", required_argument, NULL, 'm'},
        {"rt-priority", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    unsigned long queue = 0, maxlen = ND_DEFAULT_MAXLEN, rt_priority = 0;
    double delay_ms = NAN;
    bool have_queue = false;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'q':
            if (nd_parse_uint(optarg, 65535, &queue) != 0) {
                fprintf(stderr, "nfq-delay: --queue must be a number from 0 to 65535.\n");
                return 2;
            }
            have_queue = true;
            break;
        case 'd':
            delay_ms = strtod(optarg, &end);
            if (end == optarg || *end || !(delay_ms >= 0 && delay_ms <= ND_MAX_DELAY_MS)) {
                fprintf(stderr, "nfq-delay: --delay-ms must be from 0 to %g.\n", ND_MAX_DELAY_MS);
                return 2;
            }
            break;
        case 'm':
            if (nd_parse_uint(optarg, 1u << 24, &maxlen) != 0 || maxlen == 0) {
                fprintf(stderr, "nfq-delay: --maxlen must be from 1 to %u.\n", 1u << 24);
                return 2;
            }
            break;
        case 'r':
            if (nd_parse_uint(optarg, 99, &rt_priority) != 0) {
                fprintf(stderr, "nfq-delay: --rt-priority must be from 0 (off) to 99.\n");
                return 2;
            }
            break;
        case 'h':
            nd_usage(stdout);
            return 0;
        default:
            nd_usage(stderr);
            return 2;
        }
    }
    if (!have_queue || isnan(delay_ms) || optind != argc) {
        nd_usage(stderr);
        return 2;
    }

    /* Signals are delivered only inside ppoll(), so a stop request is never missed or torn. */
    sigset_t stop_set, run_mask;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGTERM);
    sigaddset(&stop_set, SIGINT);
    sigprocmask(SIG_BLOCK, &stop_set, &run_mask);
    struct sigaction sa = {.sa_handler = nd_on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    /* The default 50 us timer slack would be added to every deadline. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    if (rt_priority > 0) {
        struct sched_param sp = {.sched_priority = (int)rt_priority};
        if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
            perror("nfq-delay: SCHED_FIFO (needs CAP_SYS_NICE)");
            return 1;
        }
    }

    static nd_state st;
    st.delay_ns = llround(delay_ms * 1e6);
    if (nd_fifo_init(&st.fifo, maxlen) != 0) {
        fprintf(stderr, "nfq-delay: out of memory for a ring of %lu packets.\n", maxlen);
        return 1;
    }
    struct nfq_handle *h = nfq_open();
    if (!h) {
        perror("nfq-delay: nfq_open (needs CAP_NET_ADMIN)");
        return 1;
    }
    st.qh = nfq_create_queue(h, (uint16_t)queue, nd_on_packet, &st);
    if (!st.qh) {
        fprintf(stderr, "nfq-delay: cannot bind queue %lu (already bound in this namespace?): %s\n",
                queue, strerror(errno));
        nfq_close(h);
        return 1;
    }
    if (nfq_set_mode(st.qh, NFQNL_COPY_META, 0) < 0 ||
        nfq_set_queue_maxlen(st.qh, (uint32_t)maxlen) < 0) {
        perror("nfq-delay: configuring the queue");
        nfq_destroy_queue(st.qh);
        nfq_close(h);
        return 1;
    }
    bool fail_open = false;
#ifdef NFQA_CFG_F_FAIL_OPEN
    fail_open = nfq_set_queue_flags(st.qh, NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_FAIL_OPEN) == 0;
#endif
#ifdef NFQA_CFG_F_GSO
    /* Only metadata is copied, so a GSO packet can be queued whole instead of segmented. */
    nfq_set_queue_flags(st.qh, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO);
#endif
    int fd = nfq_fd(h);
    int rcvbuf = ND_RCVBUF_BYTES;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) < 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    socklen_t optlen = sizeof rcvbuf;
    getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &optlen);

    printf("ready\n");
    fflush(stdout);

    static char buf[65536];
    int status = 0;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    while (!nd_stop) {
        nd_release_due(&st);
        struct timespec timeout, *tp = NULL;
        if (st.fifo.len > 0) {
            int64_t wait_ns = st.fifo.due_ns[st.fifo.head] - nd_now_ns();
            if (wait_ns < 0)
                wait_ns = 0;
            timeout.tv_sec = wait_ns / 1000000000;
            timeout.tv_nsec = wait_ns % 1000000000;
            tp = &timeout;
        }
        int r = ppoll(&pfd, 1, tp, &run_mask);
        if (r < 0 && errno != EINTR) {
            perror("nfq-delay: ppoll");
            status = 1;
            break;
        }
        if (r > 0 && nd_receive(h, fd, &st, buf, sizeof buf) != 0) {
            status = 1;
            break;
        }
    }

    /* Hand back everything still held, including what is still in the socket, until nothing
     * more comes: a verdict can itself queue new packets (a reply looped back on lo). Whatever
     * the kernel still queues after that is dropped when we unbind; the caller prevents it by
     * removing its rule first, and the callbacks run during unbinding count it. */
    for (int round = 0; round < 100; round++) {
        nd_receive(h, fd, &st, buf, sizeof buf);
        if (st.fifo.len == 0)
            break;
        st.stats.accepted_at_stop += st.fifo.len;
        if (nfq_set_verdict_batch(st.qh, nd_fifo_newest(&st.fifo), NF_ACCEPT) < 0)
            st.stats.verdict_errors++;
        nd_fifo_clear(&st.fifo);
    }
    long long kernel_dropped, kernel_user_dropped;
    nd_kernel_counters((unsigned)queue, &kernel_dropped, &kernel_user_dropped);
    nfq_destroy_queue(st.qh);
    nfq_close(h);
    st.stats.dropped_at_unbind = st.fifo.len;
    nd_fifo_free(&st.fifo);

    const nd_stats *s = &st.stats;
    printf("{\"queue\": %lu, \"delay_ms\": %.6g, \"maxlen\": %lu, \"rt_priority\": %lu, "
           "\"rcvbuf_bytes\": %d, "
           "\"fail_open\": %s, \"packets\": %llu, \"released\": %llu, \"accepted_at_stop\": %llu, "
           "\"max_backlog\": %zu, \"late_1ms\": %llu, \"mean_late_us\": %.1f, "
           "\"max_late_us\": %.1f, "
           "\"missed_ids\": %llu, "
           "\"dropped_at_unbind\": %llu, \"enobufs\": %llu, \"ring_full\": %llu, "
           "\"verdict_errors\": %llu, "
           "\"kernel_queue_dropped\": %lld, \"kernel_user_dropped\": %lld}\n",
           queue, delay_ms, maxlen, rt_priority, rcvbuf, fail_open ? "true" : "false",
           (unsigned long long)s->packets, (unsigned long long)s->released,
           (unsigned long long)s->accepted_at_stop, s->max_backlog, (unsigned long long)s->late,
           s->released ? (double)s->sum_late_ns / (double)s->released / 1e3 : 0.0,
           (double)s->max_late_ns / 1e3, (unsigned long long)s->missed_ids,
           (unsigned long long)s->dropped_at_unbind, (unsigned long long)s->enobufs,
           (unsigned long long)s->ring_full,
           (unsigned long long)s->verdict_errors, kernel_dropped, kernel_user_dropped);
    fflush(stdout);
    return status;
}

#else /* NFQ_DELAY_SELF_TEST: the schedule, without a kernel */

static int failures;
#define CHECK(cond)                                                                \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                            \
        }                                                                          \
    } while (0)

static void test_releases_in_order_at_deadline(void)
{
    nd_fifo f;
    nd_stats s = {0};
    uint32_t last = 0;
    CHECK(nd_fifo_init(&f, 8) == 0);
    for (uint32_t i = 1; i <= 5; i++)
        CHECK(nd_fifo_push(&f, &s, i, 1000 * (int64_t)i) == 0);
    CHECK(nd_fifo_pop_due(&f, &s, 999, &last) == 0);
    CHECK(nd_fifo_pop_due(&f, &s, 3000, &last) == 3 && last == 3);
    CHECK(f.len == 2 && f.ids[f.head] == 4);
    CHECK(nd_fifo_newest(&f) == 5);
    nd_fifo_clear(&f);
    CHECK(f.len == 0 && nd_fifo_push(&f, &s, 6, 6000) == 0 && f.ids[f.head] == 6);
    CHECK(s.max_backlog == 5 && s.released == 3 && s.late == 0);
    nd_fifo_free(&f);
}

static void test_counts_late_verdicts(void)
{
    nd_fifo f;
    nd_stats s = {0};
    uint32_t last = 0;
    CHECK(nd_fifo_init(&f, 4) == 0);
    nd_fifo_push(&f, &s, 10, 0);
    nd_fifo_push(&f, &s, 11, 500000);
    nd_fifo_push(&f, &s, 12, 2000000);
    /* At 1.6 ms: id 10 is 1.6 ms late, id 11 1.1 ms, id 12 not yet due. */
    CHECK(nd_fifo_pop_due(&f, &s, 1600000, &last) == 2 && last == 11);
    CHECK(s.late == 2 && s.max_late_ns == 1600000 && s.sum_late_ns == 2700000);
    CHECK(nd_fifo_pop_due(&f, &s, 2000100, &last) == 1 && last == 12 && s.late == 2);
    nd_fifo_free(&f);
}

static void test_wraps_around_and_refuses_when_full(void)
{
    nd_fifo f;
    nd_stats s = {0};
    uint32_t last = 0, next_in = 0xfffffffeu, next_out = 0xfffffffeu; /* ids wrap too */
    CHECK(nd_fifo_init(&f, 3) == 0);
    for (int round = 0; round < 10; round++) {
        while (f.len < f.cap)
            CHECK(nd_fifo_push(&f, &s, next_in++, round) == 0);
        CHECK(nd_fifo_push(&f, &s, 0, round) == -1);
        CHECK(nd_fifo_pop_due(&f, &s, round, &last) == 3);
        next_out += 3;
        CHECK(last == next_out - 1);
    }
    CHECK(s.max_backlog == 3 && s.released == 30);
    nd_fifo_free(&f);
}

static void test_clock_is_monotonic(void)
{
    int64_t a = nd_now_ns(), b = nd_now_ns();
    CHECK(a > 0 && b >= a);
}

int main(void)
{
    test_releases_in_order_at_deadline();
    test_counts_late_verdicts();
    test_wraps_around_and_refuses_when_full();
    test_clock_is_monotonic();
    if (failures) {
        fprintf(stderr, "nfq-delay self-test: %d check(s) failed\n", failures);
        return 1;
    }
    printf("nfq-delay self-test: ok\n");
    return 0;
}

#endif
