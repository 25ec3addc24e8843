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
 *   - with auth on, one flipped payload byte of a datagram read into place is refused as bad_mac.
 */
#define _GNU_SOURCE
#include "ltp_udp_internal.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int n_pass, n_fail;
#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (cond) n_pass++;                                               \
        else {                                                            \
            n_fail++;                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
        }                                                                 \
    } while (0)

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

/* The receiving end as ltp_udp_open builds it, without its progress thread: peer 0 is `from`. */
static ltp_udp_t *rx_open(const ltp_config_t *cfg, struct sockaddr_in from, struct sockaddr_in *at)
{
    ltp_udp_t *u = calloc(1, sizeof *u);
    u->core = ltp_core_new(cfg, LTP_RANK_SERVER);
    u->tag_bytes = (uint32_t)auth_trailer(cfg);
    u->last_data_peer = -1;
    u->max_peers = 1;
    u->addrs = calloc(1, sizeof *u->addrs);
    u->addrs[0] = from;
    u->n_peers = 1;
    ltp_core_add_peer(u->core, 0);
    if (cfg->auth) ltp_core_set_key(u->core, KEY, sizeof KEY);
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

static void rx_close(ltp_udp_t *u)
{
    close(u->fd);
    ltp_core_free(u->core);
    free(u->addrs);
    free(u->rxbuf);
    free(u);
}

static uint64_t stat_of(ltp_udp_t *u, int i)
{
    uint64_t st[LTP_S__COUNT];
    ltp_core_stats(u->core, st, LTP_S__COUNT);
    return st[i];
}

/* The DATA datagrams of message msg_id (worker rank 0 to the PS), in index order. */
static int message(const ltp_config_t *cfg, uint32_t msg_id, const float *v, uint8_t (*out)[DG], int *lens)
{
    ltp_core_t *tx = ltp_core_new(cfg, 0);
    ltp_core_add_peer(tx, LTP_RANK_SERVER);
    if (cfg->auth) ltp_core_set_key(tx, KEY, sizeof KEY);
    ltp_core_send(tx, 0, msg_id, 0, v, N_FLOATS * 4, 0, 1);
    int n = 0, len, slot;
    static uint8_t b[LTP_MAX_DATAGRAM];
    while (n < 10 && (len = ltp_core_poll_tx(tx, 1, b, sizeof b, &slot)) > 0)
        if (b[WIRE_TYPE] == LTP_T_DATA) { memcpy(out[n], b, (size_t)len); lens[n++] = len; }
    ltp_core_free(tx);
    return n;
}

static void put(int fd, struct sockaddr_in to, const uint8_t *b, int len)
{
    sendto(fd, b, (size_t)len, 0, (struct sockaddr *)&to, sizeof to);
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
    int tx = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in from = bound(tx), at;
    ltp_udp_t *u = rx_open(&c, from, &at);
    static uint8_t dg[10][DG], forged[DG];
    int lens[10];
    float *v = vec(1.0f);
    CHECK(message(&c, 5, v, dg, lens) == 10, "message");
    put(tx, at, dg[0], lens[0]);
    CHECK(do_rx(u) == 1 && ltp_core_rx_frac(u->core, 0, 5, 0) > 0, "packet 0 not taken in");
    memcpy(forged, dg[2], (size_t)lens[2]);
    forged[LTP_DATA_HDR_BYTES + 100] ^= 0x40;
    put(tx, at, forged, lens[2]);
    put(tx, at, dg[2], lens[2]);
    CHECK(do_rx(u) == 2, "the two copies were not read in one batch");
    CHECK(stat_of(u, LTP_S_DUP_CONFLICT) == 1, "copies that disagree were not disputed (%llu)",
          (unsigned long long)stat_of(u, LTP_S_DUP_CONFLICT));
    CHECK(stat_of(u, LTP_S_RX_PLACED) == 0, "a copy that came twice in one batch was passed in place");
    for (int k = 1; k < 10; k++) if (k != 2) put(tx, at, dg[k], lens[k]);
    do_rx(u);
    float *got = malloc(N_FLOATS * 4);
    uint8_t *mask = malloc(N_FLOATS);
    CHECK(ltp_core_rx_take(u->core, 0, 5, 0, got, N_FLOATS * 4, mask, NULL) == 0, "not complete");
    uint32_t chunk = ltp_chunk_bytes(&c) / 4;   /* floats per packet */
    int ok = 1;
    for (uint32_t i = 0; i < N_FLOATS; i++) {
        int disputed = i / chunk == 2;
        ok &= disputed ? mask[i] == 0 && got[i] == 0.0f : mask[i] == 1 && got[i] == v[i];
    }
    CHECK(ok, "the message is not the genuine one with packet 2 missing");
    CHECK(stat_of(u, LTP_S_RX_PLACED) >= 6, "later packets did not land in place (%llu)",
          (unsigned long long)stat_of(u, LTP_S_RX_PLACED));
    free(v); free(got); free(mask);
    rx_close(u);
    close(tx);
}

/* A table of two: messages 5 and 10 open, guesses into 10. One batch, all genuine and sealed:
 * packet 0 of message 3 (lower: 10 is freed to make room), then packet 2 of message 10 read into
 * its place in the freed buffer. It must be dropped and counted, not read (its MAC would be
 * computed over freed memory: ASan). */
static void test_place_freed_in_the_batch(void)
{
    ltp_config_t c = cfg_of(1, 2);
    int tx = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in from = bound(tx), at;
    ltp_udp_t *u = rx_open(&c, from, &at);
    static uint8_t m3[10][DG], m5[10][DG], m10[10][DG];
    int l3[10], l5[10], l10[10];
    float *v = vec(2.0f);
    message(&c, 3, v, m3, l3);
    message(&c, 5, v, m5, l5);
    message(&c, 10, v, m10, l10);
    put(tx, at, m5[0], l5[0]);   /* one batch, read before any guess: no miss to pause guessing */
    put(tx, at, m10[0], l10[0]);
    CHECK(do_rx(u) == 2, "messages 5 and 10 not opened");
    put(tx, at, m3[0], l3[0]);
    put(tx, at, m10[2], l10[2]);
    CHECK(do_rx(u) == 2, "not one batch");
    CHECK(stat_of(u, LTP_S_RX_EVICTED) == 1, "message 10 was not evicted");
    CHECK(stat_of(u, LTP_S_RX_PLACE_LOST) == 1 && stat_of(u, LTP_S_RX_PLACED) == 0,
          "place_lost %llu placed %llu", (unsigned long long)stat_of(u, LTP_S_RX_PLACE_LOST),
          (unsigned long long)stat_of(u, LTP_S_RX_PLACED));
    CHECK(ltp_core_rx_frac(u->core, 0, 10, 0) < 0, "message 10 reopened from a freed buffer");
    free(v);
    rx_close(u);
    close(tx);
}

/* With auth on: a flipped payload byte of a DATA read into place is refused (bad_mac). */
static void test_mac_in_place(void)
{
    ltp_config_t c = cfg_of(1, 4);
    int tx = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in from = bound(tx), at;
    ltp_udp_t *u = rx_open(&c, from, &at);
    static uint8_t dg[10][DG], forged[DG];
    int lens[10];
    float *v = vec(3.0f);
    CHECK(message(&c, 7, v, dg, lens) == 10 && lens[1] == DG, "message");
    put(tx, at, dg[0], lens[0]);
    do_rx(u);
    memcpy(forged, dg[1], (size_t)lens[1]);
    forged[LTP_DATA_HDR_BYTES + 5000] ^= 0x01;
    put(tx, at, forged, lens[1]);
    do_rx(u);
    CHECK(stat_of(u, LTP_S_BAD_MAC) == 1 && stat_of(u, LTP_S_RX_PLACED) == 1,
          "bad_mac %llu placed %llu", (unsigned long long)stat_of(u, LTP_S_BAD_MAC),
          (unsigned long long)stat_of(u, LTP_S_RX_PLACED));
    for (int k = 1; k < 10; k++) put(tx, at, dg[k], lens[k]);
    do_rx(u);
    float *got = malloc(N_FLOATS * 4);
    CHECK(ltp_core_rx_take(u->core, 0, 7, 0, got, N_FLOATS * 4, NULL, NULL) == 0 &&
          memcmp(got, v, N_FLOATS * 4) == 0, "the genuine message did not arrive whole");
    free(v); free(got);
    rx_close(u);
    close(tx);
}

int main(void)
{
    test_copies_in_one_batch();
    test_place_freed_in_the_batch();
    test_mac_in_place();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
