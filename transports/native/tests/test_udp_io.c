/* test_udp_io.c: the UDP driver's receive batches (src/ltp_udp_io.c) over a real loopback socket,
 * driven by hand: the test queues datagrams in the socket, then calls do_rx once, so it decides
 * exactly which datagrams share one recvmmsg batch (the progress thread is never started).
 *
 * Run with `make -C transports/native test` (or test-asan, where the second test is the one
 * AddressSanitizer watches). What it holds the driver to, for payloads read into guessed places
 * (docs/ltp-protocol.md §6):
 *   - two copies of one packet in one batch, the second read into its place: the first one stored
 *     must not overwrite the second in place before the core compares them (a disputed duplicate,
 *     §11, is still found without auth);
 *   - a datagram read into the place of a message that an earlier datagram of the same batch
 *     freed (a full table gives up its highest id for a lower one): dropped and counted
 *     (rx_place_lost), never read from freed memory;
 *   - with auth on, one flipped payload byte of a datagram read into place is refused as bad_mac;
 * and for sending (do_tx):
 *   - a write the host's own queue refuses (ENOBUFS, with IP_RECVERR) stays in the batch, also a
 *     GSO run, and is never counted as sent: every datagram do_tx says it sent arrives. This one
 *     needs root: it runs in a child in a network namespace of its own, whose loopback gets an HTB
 *     class with a two-packet FIFO (skipped, and said so, without root).
 */
#define _GNU_SOURCE
#include "ltp_udp_internal.h"

#include <arpa/inet.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

enum { DG = 16384, N_FLOATS = 40000 };   /* 10 packets of a 160,000-byte message */

static const uint8_t KEY[LTP_KEY_BYTES] = {3, 1, 4, 1, 5, 9, 2, 6};

static ltp_config_t cfg_of(int auth, uint32_t open_per_peer)
{
    ltp_config_t c;
    ltp_config_default(&c);
    c.auth = (uint32_t)auth;
    c.max_udp_payload_bytes = DG;
    c.max_open_per_peer = open_per_peer;
    c.cc = 0;   /* unpaced: a message's packets are all due at once */
    return c;
}

static struct sockaddr_in bound(int fd)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, (struct sockaddr *)&sa, sizeof sa);
    socklen_t n = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &n);
    return sa;
}

/* An end as ltp_udp_open builds it, before its buffers, socket and progress thread: one peer,
 * of rank peer_rank at addr, and the key when auth is on. */
static ltp_udp_t *end_new(const ltp_config_t *cfg, uint16_t rank, uint16_t peer_rank, struct sockaddr_in addr)
{
    ltp_udp_t *u = calloc(1, sizeof *u);
    u->core = ltp_core_new(cfg, rank);
    u->tag_bytes = (uint32_t)auth_trailer(cfg);
    u->last_data_peer = -1;
    u->max_peers = 1;
    u->addrs = calloc(1, sizeof *u->addrs);
    u->addrs[0] = addr;
    u->n_peers = 1;
    ltp_core_add_peer(u->core, peer_rank);
    if (cfg->auth) ltp_core_set_peer_key(u->core, 0, KEY, sizeof KEY);
    return u;
}

/* Either end (each has one of the two buffers; the other is NULL). */
static void end_free(ltp_udp_t *u)
{
    close(u->fd);
    ltp_core_free(u->core);
    free(u->addrs);
    free(u->rxbuf);
    free(u->txbuf);
    free(u);
}

/* The receiving end, without its progress thread: peer 0 is `from`. */
static ltp_udp_t *rx_open(const ltp_config_t *cfg, struct sockaddr_in from, struct sockaddr_in *at)
{
    ltp_udp_t *u = end_new(cfg, LTP_RANK_SERVER, 0, from);
    u->rxbuf = malloc((size_t)BATCH * RX_SLOT_BYTES);
    u->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    int big = 8 << 20;
    setsockopt(u->fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    *at = bound(u->fd);
    for (int i = 0; i < BATCH; i++) {
        u->rxiov[i] = (struct iovec){u->rxbuf + (size_t)i * RX_SLOT_BYTES, RX_SLOT_BYTES};
        u->rxm[i].msg_hdr.msg_iov = &u->rxiov[i];
        u->rxm[i].msg_hdr.msg_iovlen = 1;
        u->rxm[i].msg_hdr.msg_name = &u->rxaddr[i];
    }
    return u;
}

/* A receiving end and the plain socket that plays its peer 0 (a worker). */
typedef struct { ltp_udp_t *u; int tx; struct sockaddr_in at; } rx_bench_t;

static rx_bench_t bench_open(const ltp_config_t *cfg)
{
    rx_bench_t b;
    b.tx = socket(AF_INET, SOCK_DGRAM, 0);
    b.u = rx_open(cfg, bound(b.tx), &b.at);
    return b;
}

static void bench_close(rx_bench_t *b)
{
    end_free(b->u);
    close(b->tx);
}

static uint64_t stat_of(ltp_udp_t *u, int i)
{
    uint64_t st[LTP_S__COUNT];
    ltp_core_stats(u->core, st, LTP_S__COUNT);
    return st[i];
}

/* The DATA datagrams of one message, in index order. */
typedef struct { uint8_t dg[10][DG]; int len[10]; } burst_t;

/* Message msg_id (worker rank 0 to the PS) cut into m; how many DATA it took. Each message's core
 * runs at a clock of its own, 16 us per id apart, so the numbers of its datagrams (auth on) are
 * those of no other message's, within one replay window. */
static int message(const ltp_config_t *cfg, uint32_t msg_id, const float *v, burst_t *m)
{
    ltp_core_t *tx = ltp_core_new(cfg, 0);
    ltp_core_add_peer(tx, LTP_RANK_SERVER);
    if (cfg->auth) ltp_core_set_peer_key(tx, 0, KEY, sizeof KEY);
    uint64_t t = 1 + 16 * (uint64_t)msg_id;
    ltp_core_send(tx, 0, msg_id, 0, v, N_FLOATS * 4, 0, t);
    int n = 0, len, slot;
    static uint8_t b[LTP_MAX_DATAGRAM];
    while (n < 10 && (len = ltp_core_poll_tx(tx, t, b, sizeof b, &slot)) > 0)
        if (b[WIRE_TYPE] == LTP_T_DATA) { memcpy(m->dg[n], b, (size_t)len); m->len[n++] = len; }
    ltp_core_free(tx);
    return n;
}

static void put(const rx_bench_t *b, const uint8_t *dg, int len)
{
    sendto(b->tx, dg, (size_t)len, 0, (const struct sockaddr *)&b->at, sizeof b->at);
}

/* A copy of datagram k of m with `bit` flipped in byte `at`: a forgery made from a genuine one. */
static void put_altered(const rx_bench_t *b, const burst_t *m, int k, int at, uint8_t bit)
{
    static uint8_t f[DG];
    memcpy(f, m->dg[k], (size_t)m->len[k]);
    f[at] ^= bit;
    put(b, f, m->len[k]);
}

static float *vec(float base)
{
    float *v = malloc(N_FLOATS * sizeof *v);
    for (int i = 0; i < N_FLOATS; i++) v[i] = base + (float)i * 0.25f;
    return v;
}

/* Without auth: copy A of packet 2 (altered) and copy B (genuine) arrive in one batch; A's slot
 * was guessed for packet 1 (a miss), B's for packet 2 (a hit). B must be compared, not written
 * over in place by A before it is: the packet is disputed and delivered as missing. */
static void test_copies_in_one_batch(void)
{
    ltp_config_t c = cfg_of(0, 4);
    rx_bench_t b = bench_open(&c);
    static burst_t m;
    float *v = vec(1.0f);
    CHECK(message(&c, 5, v, &m) == 10, "message");
    put(&b, m.dg[0], m.len[0]);
    CHECK(do_rx(b.u) == 1 && ltp_core_rx_frac(b.u->core, 0, 5, 0) > 0, "packet 0 not taken in");
    put_altered(&b, &m, 2, LTP_DATA_HDR_BYTES + 100, 0x40);
    put(&b, m.dg[2], m.len[2]);
    CHECK(do_rx(b.u) == 2, "the two copies were not read in one batch");
    CHECK(stat_of(b.u, LTP_S_DUP_CONFLICT) == 1, "copies that disagree were not disputed (%llu)",
          (unsigned long long)stat_of(b.u, LTP_S_DUP_CONFLICT));
    CHECK(stat_of(b.u, LTP_S_RX_PLACED) == 0, "a copy that came twice in one batch was passed in place");
    for (int k = 1; k < 10; k++) if (k != 2) put(&b, m.dg[k], m.len[k]);
    do_rx(b.u);
    float *got = malloc(N_FLOATS * 4);
    uint8_t *mask = malloc(N_FLOATS);
    CHECK(ltp_core_rx_take(b.u->core, 0, 5, 0, got, N_FLOATS * 4, mask, NULL) == 0, "not complete");
    uint32_t chunk = ltp_chunk_bytes(&c) / 4;   /* floats per packet */
    int ok = 1;
    for (uint32_t i = 0; i < N_FLOATS; i++) {
        int disputed = i / chunk == 2;
        ok &= disputed ? mask[i] == 0 && got[i] == 0.0f : mask[i] == 1 && got[i] == v[i];
    }
    CHECK(ok, "the message is not the genuine one with packet 2 missing");
    CHECK(stat_of(b.u, LTP_S_RX_PLACED) >= 6, "later packets did not land in place (%llu)",
          (unsigned long long)stat_of(b.u, LTP_S_RX_PLACED));
    free(v); free(got); free(mask);
    bench_close(&b);
}

/* A table of two: messages 5 and 10 open, guesses into 10. One batch, all genuine and sealed:
 * packet 0 of message 3 (lower: 10 is freed to make room), then packet 2 of message 10 read into
 * its place in the freed buffer. It must be dropped and counted, not read (its MAC would be
 * computed over freed memory: ASan). */
static void test_place_freed_in_the_batch(void)
{
    ltp_config_t c = cfg_of(1, 2);
    rx_bench_t b = bench_open(&c);
    static burst_t m3, m5, m10;
    float *v = vec(2.0f);
    message(&c, 3, v, &m3);
    message(&c, 5, v, &m5);
    message(&c, 10, v, &m10);
    put(&b, m5.dg[0], m5.len[0]);   /* one batch, read before any guess: no miss to pause guessing */
    put(&b, m10.dg[0], m10.len[0]);
    CHECK(do_rx(b.u) == 2, "messages 5 and 10 not opened");
    put(&b, m3.dg[0], m3.len[0]);
    put(&b, m10.dg[2], m10.len[2]);
    CHECK(do_rx(b.u) == 2, "not one batch");
    CHECK(stat_of(b.u, LTP_S_RX_EVICTED) == 1, "message 10 was not evicted");
    CHECK(stat_of(b.u, LTP_S_RX_PLACE_LOST) == 1 && stat_of(b.u, LTP_S_RX_PLACED) == 0,
          "place_lost %llu placed %llu", (unsigned long long)stat_of(b.u, LTP_S_RX_PLACE_LOST),
          (unsigned long long)stat_of(b.u, LTP_S_RX_PLACED));
    CHECK(ltp_core_rx_frac(b.u->core, 0, 10, 0) < 0, "message 10 reopened from a freed buffer");
    free(v);
    bench_close(&b);
}

/* With auth on: a flipped payload byte of a DATA read into place is refused (bad_mac). */
static void test_mac_in_place(void)
{
    ltp_config_t c = cfg_of(1, 4);
    rx_bench_t b = bench_open(&c);
    static burst_t m;
    float *v = vec(3.0f);
    CHECK(message(&c, 7, v, &m) == 10 && m.len[1] == DG, "message");
    put(&b, m.dg[0], m.len[0]);
    do_rx(b.u);
    put_altered(&b, &m, 1, LTP_DATA_HDR_BYTES + 5000, 0x01);
    do_rx(b.u);
    CHECK(stat_of(b.u, LTP_S_BAD_MAC) == 1 && stat_of(b.u, LTP_S_RX_PLACED) == 1,
          "bad_mac %llu placed %llu", (unsigned long long)stat_of(b.u, LTP_S_BAD_MAC),
          (unsigned long long)stat_of(b.u, LTP_S_RX_PLACED));
    for (int k = 1; k < 10; k++) put(&b, m.dg[k], m.len[k]);
    do_rx(b.u);
    float *got = malloc(N_FLOATS * 4);
    CHECK(ltp_core_rx_take(b.u->core, 0, 7, 0, got, N_FLOATS * 4, NULL, NULL) == 0 &&
          memcmp(got, v, N_FLOATS * 4) == 0, "the genuine message did not arrive whole");
    free(v); free(got);
    bench_close(&b);
}

/* The sending end, without its progress thread: peer 0 (the PS) at `to`. */
static ltp_udp_t *tx_open(const ltp_config_t *cfg, struct sockaddr_in to)
{
    ltp_udp_t *u = end_new(cfg, 0, LTP_RANK_SERVER, to);
    u->gso = cfg->udp_gso != 0;
    u->txbuf = malloc((size_t)TX_SLOTS * TX_SLOT_BYTES);
    u->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    int one = 1, big = 8 << 20;
    setsockopt(u->fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(u->fd, IPPROTO_IP, IP_RECVERR, &one, sizeof one);
    bound(u->fd);
    return u;
}

static int drain(int fd)
{
    static uint8_t b[LTP_MAX_DATAGRAM];
    int n = 0;
    while (recv(fd, b, sizeof b, MSG_DONTWAIT) > 0) n++;
    return n;
}

/* In a child, in a network namespace of its own: a 1 MB message at 1,472-byte datagrams, unpaced,
 * written as GSO runs into a loopback link whose queue holds two writes. */
static int child_refused_writes(void)
{
    if (unshare(CLONE_NEWNET) != 0) return 77;
    if (system("ip link set lo up && tc qdisc add dev lo root handle 1: htb default 1 && "
               "tc class add dev lo parent 1: classid 1:1 htb rate 50mbit ceil 50mbit quantum 1514 && "
               "tc qdisc add dev lo parent 1:1 handle 10: pfifo limit 2") != 0)
        return 77;
    ltp_config_t c;
    ltp_config_default(&c);
    c.max_udp_payload_bytes = 1472;
    c.cc = 0;
    int rx = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0), big = 16 << 20;
    setsockopt(rx, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    struct sockaddr_in at = bound(rx);
    ltp_udp_t *u = tx_open(&c, at);
    float *v = malloc(1 << 20);
    for (int i = 0; i < (1 << 18); i++) v[i] = (float)i;
    ltp_core_send(u->core, 0, 1, 0, v, 1 << 20, 0, now_us());
    uint64_t refused = 0, refused_gso = 0, received = 0;
    const uint64_t packets = ((1u << 20) + ltp_chunk_bytes(&c) - 1) / ltp_chunk_bytes(&c);
    for (int turn = 0; turn < 100000; turn++) {
        int n = do_tx(u);
        if (n == TX_REFUSED) {
            refused++;
            refused_gso += u->txm[u->m_off].msg_hdr.msg_controllen != 0;   /* the write refused */
        } else if (n >= 0 && u->m_off == u->m_n && stat_of(u, LTP_S_DATA_SENT) >= packets) {
            break;   /* every packet of the message went into a write the queue took */
        }
        received += (uint64_t)drain(rx);
        usleep(50);
    }
    for (int i = 0; i < 200; i++) { usleep(1000); received += (uint64_t)drain(rx); }   /* the queue drains */
    CHECK(refused_gso > 0 && stat_of(u, LTP_S_TX_REFUSED) == refused,
          "the queue refused no GSO write (%llu refusals, %llu of GSO runs)", (unsigned long long)refused,
          (unsigned long long)refused_gso);
    CHECK(stat_of(u, LTP_S_TX_GSO_RUNS) > 0, "no GSO run went out");
    /* Nothing the core handed over was lost in this host: everything polled was written, and
     * every datagram written arrived. */
    CHECK(u->m_off == u->m_n && received == stat_of(u, LTP_S_TX_DATAGRAMS),
          "%llu datagrams polled from the core, %llu arrived",
          (unsigned long long)stat_of(u, LTP_S_TX_DATAGRAMS), (unsigned long long)received);
    /* And the driver's own socket asks for the refusals (without IP_RECVERR they are silent). */
    int err = 0;
    ltp_udp_t *o = ltp_udp_open(&c, 0, "127.0.0.1", 0, 0.0, &err);
    int on = 0;
    socklen_t len = sizeof on;
    CHECK(o && getsockopt(o->fd, IPPROTO_IP, IP_RECVERR, &on, &len) == 0 && on == 1, "IP_RECVERR is off");
    ltp_udp_close(o);
    free(v);
    end_free(u);
    close(rx);
    return n_fail ? 1 : 0;
}

static void test_refused_writes(void)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(child_refused_writes());
    int status = 0;
    waitpid(pid, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    if (code == 77) { printf("SKIP test_refused_writes: needs root (a network namespace and tc)\n"); return; }
    CHECK(code == 0, "refused writes: the child failed (%d)", code);
}

int main(void)
{
    test_copies_in_one_batch();
    test_place_freed_in_the_batch();
    test_mac_in_place();
    test_refused_writes();
    return check_summary();
}
