/* fuzz_rx.c: libFuzzer target for the UDP driver's receive path and the core's placement of
 * payloads (src/ltp_udp_io.c's batches, src/ltp_place.c's posted buffers and guessed places).
 *
 * Build and run with `make -C transports/native fuzz`. A sending core (a worker) and a receiving
 * driver end (the PS: its core, its receive slots, no socket) are driven by a program: a
 * configuration byte, then operations. The worker starts messages (ids in order or skipping
 * some), its DATA go into a pool of genuine datagrams, and the program builds receive batches
 * the way recvmmsg fills the driver's slots: it asks the driver to point its slots at guessed
 * places (ltp_udp__rx_prepare), then writes each slot's datagram through the slot's scatter list
 * as the kernel would (header, then the guessed place, then the rest), with a source address, a
 * receive timestamp and a UDP_GRO segment size of its choosing, and hands the batch over
 * (ltp_udp__rx_batch). A slot holds a genuine datagram, a GRO run of several (with their size or
 * another), a copy with one byte changed, a truncated one, an untagged one (auth on), or one from
 * an address that is no peer. The PS posts buffers for messages, unposts them, takes what is
 * ready, and sends its ACKs and CLOSEs back to the worker (or loses them); time moves.
 *
 * Invariants (a violation aborts): every datagram the core accepts from the driver is seen
 * (ltp_core_input_at and ltp_core_input_split are wrapped at link time); with auth on it is one
 * the worker sealed, byte for byte, carries a tag, and was not accepted before (a replay or an
 * untagged datagram is never accepted). A taken message (auth on) holds the worker's bytes
 * wherever its mask says they arrived and zeros elsewhere. A buffer that is not posted (never
 * yet, unposted, or taken) is never written: it keeps the canary the program wrote into it.
 */
#define _GNU_SOURCE
#include "ltp_udp_internal.h"

#include <arpa/inet.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>

#ifndef UDP_GRO
#define UDP_GRO 104
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int __real_ltp_core_input_at(ltp_core_t *c, int peer, const uint8_t *buf, size_t len, uint64_t now,
                             uint64_t arrival);
int __real_ltp_core_input_split(ltp_core_t *c, int peer, const uint8_t *head, size_t head_len,
                                const uint8_t *payload, size_t payload_len, uint64_t now,
                                uint64_t arrival);

#define CHECK(c) do { if (!(c)) abort(); } while (0)
enum { WK = 0, PS = 0xFFFF, POOL = 160, DGMAX = 4608, MSGS = 8, MAXPK = 12, CANARY = 0xA5 };

typedef struct { int len, taken; uint8_t b[DGMAX]; } dgram_t;

typedef struct {
    uint32_t id, len;       /* len 0: slot unused */
    uint8_t *data;          /* what the worker sends */
    uint8_t *post;          /* the PS's buffer for it */
    int posted;             /* the core may write to post */
} msg_t;

typedef struct { const uint8_t *p; size_t n; } input_t;

static uint8_t u8(input_t *in) { if (!in->n) return 0; in->n--; return *in->p++; }
static uint16_t u16(input_t *in) { uint16_t v = u8(in); return (uint16_t)(v | u8(in) << 8); }

static const uint8_t KEY[LTP_KEY_BYTES] = {9, 8, 7, 6, 5, 4, 3, 2, 1};
static ltp_udp_t *U;            /* the PS's driver end, kept across inputs (its slots are large) */
static ltp_core_t *Wk;          /* the worker */
static int Auth;
static dgram_t Pool[POOL];
static int PoolN;
static msg_t Msg[MSGS];
static uint8_t Scratch[RX_SLOT_BYTES];

/* The datagram the core accepted, whole: is it one the worker sealed, and new? */
static void accepted(const uint8_t *d, size_t len)
{
    if (!Auth) return;
    CHECK(len > LTP_TRAILER_BYTES && d[WIRE_MAC] != LTP_MAC_NONE);
    for (int i = 0; i < PoolN; i++) {
        dgram_t *g = &Pool[i];
        if ((size_t)g->len != len || memcmp(g->b, d, len) != 0) continue;
        CHECK(!g->taken);   /* accepted once, never again */
        g->taken = 1;
        return;
    }
    abort();   /* accepted, but the worker never sealed it */
}

int __wrap_ltp_core_input_at(ltp_core_t *c, int peer, const uint8_t *buf, size_t len, uint64_t now,
                             uint64_t arrival)
{
    int rc = __real_ltp_core_input_at(c, peer, buf, len, now, arrival);
    if (rc == LTP_OK && c == U->core) accepted(buf, len);
    return rc;
}

int __wrap_ltp_core_input_split(ltp_core_t *c, int peer, const uint8_t *head, size_t head_len,
                                const uint8_t *payload, size_t payload_len, uint64_t now,
                                uint64_t arrival)
{
    int rc = __real_ltp_core_input_split(c, peer, head, head_len, payload, payload_len, now, arrival);
    if (rc != LTP_OK || c != U->core) return rc;
    /* the wire's order: header, payload, then the trailer the driver kept behind the header */
    CHECK(head_len >= LTP_DATA_HDR_BYTES && head_len - LTP_DATA_HDR_BYTES + payload_len <= DGMAX);
    memcpy(Scratch, head, LTP_DATA_HDR_BYTES);
    memcpy(Scratch + LTP_DATA_HDR_BYTES, payload, payload_len);
    memcpy(Scratch + LTP_DATA_HDR_BYTES + payload_len, head + LTP_DATA_HDR_BYTES,
           head_len - LTP_DATA_HDR_BYTES);
    accepted(Scratch, head_len + payload_len);
    return rc;
}

static uint8_t pattern(uint32_t id, size_t j) { return (uint8_t)(id * 131u + j * 7u + 1u); }

static void reset(uint8_t conf)
{
    if (!U) {
        U = calloc(1, sizeof *U);
        U->rxbuf = malloc((size_t)BATCH * RX_SLOT_BYTES);
        U->addrs = calloc(1, sizeof *U->addrs);
        for (int i = 0; i < MSGS; i++) {
            Msg[i].data = malloc(MAXPK * DGMAX);
            Msg[i].post = malloc(MAXPK * DGMAX);
        }
    }
    ltp_core_free(U->core);
    ltp_core_free(Wk);
    Auth = conf & 1;
    ltp_config_t cfg;
    ltp_config_default(&cfg);
    cfg.auth = (uint32_t)Auth;
    cfg.cc = conf & 2 ? 1 : 0;
    cfg.max_udp_payload_bytes = 4200 + (conf >> 2 & 3) * 100;   /* payloads above RX_GUESS_MIN_BYTES */
    cfg.max_open_per_peer = conf & 16 ? 2 : 8;   /* small: a full table frees a context mid-batch */
    cfg.mac = conf & 32 ? LTP_MAC_ALG_SIPHASH24 : LTP_MAC_ALG_GMAC128;   /* both MACs */
    cfg.rx_msg_window = 16;
    U->core = ltp_core_new(&cfg, PS);
    Wk = ltp_core_new(&cfg, WK);
    CHECK(U->core && Wk);
    ltp_core_add_peer(U->core, WK);
    ltp_core_add_peer(Wk, PS);
    if (Auth) {
        ltp_core_set_peer_key(U->core, 0, KEY, sizeof KEY);
        ltp_core_set_peer_key(Wk, 0, KEY, sizeof KEY);
    }
    U->tag_bytes = (uint32_t)auth_trailer(&cfg);
    U->last_data_peer = -1;
    U->large_data = 0;
    U->guess_hits = U->guess_misses = 0;
    U->max_peers = U->n_peers = 1;
    U->addrs[0] = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(5000),
                                       .sin_addr.s_addr = htonl(0x0A000001)};
    for (int i = 0; i < BATCH; i++) {
        U->rxiov[i] = (struct iovec){U->rxbuf + (size_t)i * RX_SLOT_BYTES, RX_SLOT_BYTES};
        U->rxm[i].msg_hdr.msg_iov = &U->rxiov[i];
        U->rxm[i].msg_hdr.msg_iovlen = 1;
        U->rxm[i].msg_hdr.msg_name = &U->rxaddr[i];
    }
    PoolN = 0;
    for (int i = 0; i < MSGS; i++) {
        Msg[i].len = 0;
        Msg[i].posted = 0;
        memset(Msg[i].post, CANARY, MAXPK * DGMAX);
    }
}

static msg_t *msg_of(uint32_t id)
{
    for (int i = 0; i < MSGS; i++) if (Msg[i].len && Msg[i].id == id) return &Msg[i];
    return NULL;
}

/* A buffer the core must not write keeps its canary. */
static void check_canaries(void)
{
    for (int i = 0; i < MSGS; i++) {
        if (Msg[i].posted) continue;
        for (size_t j = 0; j < MAXPK * DGMAX; j += 251) CHECK(Msg[i].post[j] == CANARY);
    }
}

static void op_send(input_t *in, uint32_t *next_id, uint64_t now)
{
    uint32_t id = *next_id + u8(in) % 3;
    msg_t *m = NULL;
    for (int i = 0; i < MSGS && !m; i++) if (!Msg[i].len) m = &Msg[i];
    if (!m || msg_of(id)) return;
    uint32_t chunk = ltp_chunk_bytes(&U->core->cfg);
    uint32_t len = (1 + u8(in) % MAXPK) * chunk - u16(in) % chunk;
    len &= ~3u;
    if (!len) return;
    for (uint32_t j = 0; j < len; j++) m->data[j] = pattern(id, j);
    if (ltp_core_send(Wk, 0, id, 0, m->data, len, 0, now) != LTP_OK) return;
    m->id = id;
    m->len = len;
    *next_id = id + 1;
}

/* The worker's datagrams due now: DATA into the pool, anything else to the PS at once. */
static void op_poll_worker(uint64_t now)
{
    uint8_t b[DGMAX];
    int peer;
    for (int k = 0; k < 64; k++) {
        int n = ltp_core_poll_tx(Wk, now, b, sizeof b, &peer);
        if (n <= 0) break;
        if (b[WIRE_TYPE] != LTP_T_DATA) { ltp_core_input(U->core, 0, b, (size_t)n, now); continue; }
        if (PoolN == POOL) continue;   /* lost on the way */
        Pool[PoolN].len = n;
        Pool[PoolN].taken = 0;
        memcpy(Pool[PoolN++].b, b, (size_t)n);
    }
}

/* Write slot i's datagram (len bytes at d) through its scatter list, as recvmmsg would, from src,
 * with an optional receive timestamp and GRO segment size in its control buffer. */
static void fill_slot(int i, const uint8_t *d, size_t len, struct sockaddr_in src, int stamp,
                      int gro, uint64_t now)
{
    struct msghdr *mh = &U->rxm[i].msg_hdr;
    size_t off = 0;
    for (size_t v = 0; v < mh->msg_iovlen && off < len; v++) {
        size_t n = MIN(mh->msg_iov[v].iov_len, len - off);
        memcpy(mh->msg_iov[v].iov_base, d + off, n);
        off += n;
    }
    U->rxm[i].msg_len = (unsigned)off;
    U->rxaddr[i] = src;
    mh->msg_namelen = sizeof src;
    mh->msg_flags = 0;
    size_t ctl = 0;
    uint8_t *cbuf = (uint8_t *)U->rxctl[i].buf;
    memset(cbuf, 0, sizeof U->rxctl[i].buf);
    if (stamp) {
        struct cmsghdr *cm = (struct cmsghdr *)cbuf;
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_TIMESTAMPNS;
        cm->cmsg_len = CMSG_LEN(sizeof(struct timespec));
        struct timespec ts = {1700000000 + (time_t)(now / 1000000), (long)(now % 1000000) * 1000};
        memcpy(CMSG_DATA(cm), &ts, sizeof ts);
        ctl += CMSG_SPACE(sizeof(struct timespec));
    }
    if (gro) {
        struct cmsghdr *cm = (struct cmsghdr *)(cbuf + ctl);
        cm->cmsg_level = SOL_UDP;
        cm->cmsg_type = UDP_GRO;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &gro, sizeof gro);
        ctl += CMSG_SPACE(sizeof(int));
    }
    mh->msg_control = ctl ? cbuf : NULL;
    mh->msg_controllen = ctl;
}

static void op_batch(input_t *in, uint64_t now)
{
    if (!PoolN) return;
    int vlen = ltp_udp__rx_prepare(U);
    int n = 1 + u8(in) % vlen;
    static uint8_t d[RX_SLOT_BYTES];
    for (int i = 0; i < n; i++) {
        uint8_t kind = u8(in), flags = u8(in);
        const dgram_t *g = &Pool[u8(in) % PoolN];
        size_t len = (size_t)g->len;
        int gro = 0;
        memcpy(d, g->b, len);
        switch (kind % 10) {
        case 6: {   /* a GRO run of datagrams that follow g in the pool, maybe cut elsewhere */
            int first = (int)(g - Pool), runs = 2 + u8(in) % 8;
            for (int k = first + 1; k < PoolN && k <= first + runs && len + (size_t)Pool[k].len <= RX_SLOT_BYTES; k++) {
                memcpy(d + len, Pool[k].b, (size_t)Pool[k].len);
                len += (size_t)Pool[k].len;
            }
            gro = flags & 8 ? 1 + u16(in) % (int)len : g->len;
            break;
        }
        case 7: d[u16(in) % len] ^= (uint8_t)(u8(in) | 1); break;   /* one byte changed */
        case 8: len = u16(in) % len; break;                          /* cut short */
        case 9:   /* untagged: what an end without auth would send */
            if (len > U->tag_bytes) len -= U->tag_bytes;
            d[WIRE_MAC] = LTP_MAC_NONE;
            break;
        default: break;   /* genuine, a copy or a replay of one */
        }
        struct sockaddr_in src = U->addrs[0];
        if (flags & 1) src.sin_port = htons(5001);   /* no peer's address */
        fill_slot(i, d, len, src, flags & 2, gro, now);
    }
    struct timespec real = {1700000000 + (time_t)(now / 1000000), (long)(now % 1000000) * 1000};
    ltp_udp__rx_batch(U, n, now, &real);
}

/* The PS's ACKs and CLOSEs to the worker, each lost when the program says so. */
static void op_control(input_t *in, uint64_t now)
{
    uint8_t b[DGMAX];
    int peer;
    uint8_t lose = u8(in);
    for (int k = 0; k < 32; k++) {
        int n = ltp_core_poll_tx(U->core, now, b, sizeof b, &peer);
        if (n <= 0) break;
        if (!(lose >> (k % 8) & 1)) ltp_core_input(Wk, 0, b, (size_t)n, now);
    }
}

static void op_post(input_t *in)
{
    msg_t *m = &Msg[u8(in) % MSGS];
    if (!m->len) return;
    uint8_t how = u8(in);
    if (how & 1) {
        if (m->posted && ltp_core_rx_unpost(U->core, 0, m->id, 0) == LTP_OK) {
            m->posted = 0;
            memset(m->post, CANARY, MAXPK * DGMAX);
        }
        return;
    }
    uint32_t cap = how & 2 ? m->len - 4 : m->len;   /* too small: refused, never written */
    if (!m->posted && ltp_core_rx_post(U->core, 0, m->id, 0, m->post, cap) == LTP_OK) m->posted = 1;
}

/* Take every message ready, into its posted buffer or a fresh one, and check its bytes. */
static void op_take(void)
{
    static uint8_t out[MAXPK * DGMAX], mask[MAXPK * DGMAX / 4];
    for (int i = 0; i < MSGS; i++) {
        msg_t *m = &Msg[i];
        if (!m->len || ltp_core_rx_ready(U->core, 0, m->id, 0) != 1) continue;
        uint8_t *dst = m->posted ? m->post : out;
        ltp_msg_stats_t st;
        if (ltp_core_rx_take(U->core, 0, m->id, 0, dst, m->len, mask, &st) != LTP_OK) continue;
        if (Auth) {
            for (uint32_t w = 0; w < m->len / 4; w++)
                for (uint32_t j = 4 * w; j < 4 * w + 4; j++)
                    CHECK(dst[j] == (mask[w] ? pattern(m->id, j) : 0));
        }
        m->posted = 0;
        memset(m->post, CANARY, MAXPK * DGMAX);
        ltp_core_send_release(Wk, 0, m->id, 0);
        m->len = 0;
    }
}

/* The worker gives a message up; the PS stops waiting for it (unposted first, if posted). */
static void op_release(input_t *in)
{
    msg_t *m = &Msg[u8(in) % MSGS];
    if (!m->len) return;
    ltp_core_send_release(Wk, 0, m->id, 0);
    if (m->posted && ltp_core_rx_unpost(U->core, 0, m->id, 0) != LTP_OK) return;
    m->posted = 0;
    memset(m->post, CANARY, MAXPK * DGMAX);
    m->len = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    input_t in = {data, size};
    reset(u8(&in));
    uint64_t now = 100000000;
    uint32_t next_id = 1;
    for (int step = 0; in.n && step < 400; step++) {
        switch (u8(&in) % 9) {
        case 0: op_send(&in, &next_id, now); break;
        case 1: op_poll_worker(now); break;
        case 2: case 3: op_batch(&in, now); check_canaries(); break;
        case 4: op_control(&in, now); break;
        case 5: op_post(&in); break;
        case 6: op_take(); break;
        case 7: op_release(&in); break;
        case 8: now += u8(&in) & 1 ? 1 + u16(&in) : (uint64_t)u16(&in) * 1000; break;
        }
    }
    return 0;
}
