/* ltp_udp.c: the UDP driver around one LTP core: socket, clock, batching and the event loop.
 *
 * Each endpoint has one progress thread that runs the loop for as long as the endpoint is open:
 * drain the socket with recvmmsg, feed the core, send what the core says is due with sendmmsg,
 * then sleep in ppoll until the core's next timer (pacing, ACK delay, RACK, PTO, close deadline),
 * a datagram, or a kick from an API call. So the protocol keeps running while the application
 * computes or waits elsewhere: a receiver whose CLOSE was lost still answers the sender's
 * retransmissions with another CLOSE, and ACKs go out on time. (A kernel transport does the same
 * from interrupts.) The core and the driver state are guarded by one mutex; an API call takes
 * it, registers its requests, kicks the thread through an eventfd and waits on a condition
 * variable until its requests are done or its deadline passes. The thread signals it only after
 * a turn in which something a caller waits for happened (a message closed, a send completed, a
 * HELLO or HELLO_ACK arrived, a socket error): waking the caller on every turn cost a context
 * switch per received batch. The thread itself sleeps until an event or the core's next timer,
 * never on a polling interval; its timer slack is lowered so sub-ms pacing sleeps are honoured
 * without busy-waiting.
 */
#define _GNU_SOURCE
#include "ltp_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64              /* datagrams (or GRO runs of them) per recvmmsg */
#define RX_SLOT_BYTES 65536u  /* a datagram or a GRO run of them: at most 64 KiB */
#define TX_SLOTS 512          /* datagrams in one send batch */
#define TX_BATCH_BYTES (1u << 20)   /* ... and at most this many bytes */
#define GSO_MAX_SEGS 64       /* UDP_MAX_SEGMENTS of kernels before 6.10 */
#define RX_GUESS_MIN_BYTES 4096u   /* payloads this large are read straight into their place */
#define TX_SLOT_BYTES LTP_ETH_DATAGRAM   /* a DATA header or a control packet (ACK bitmaps fit) */
#define SOCK_BUF_BYTES (8 << 20)
#define TIMER_SLACK_NS 1000ul
#define IDLE_FLOOR_US 50   /* a loop turn that moved nothing never sleeps less than this */
#define IDLE_MAX_US 1000000u   /* with no timer pending, the thread still wakes once a second */

/* One datagram of the send batch: its first hlen bytes in its txbuf slot (a DATA's header, or a
 * control packet whole), then plen payload bytes referenced in the message being sent. */
typedef struct { const uint8_t *payload; uint32_t hlen, plen; int peer; } txdg_t;

struct ltp_udp {
    ltp_core_t *core;
    int fd;
    int path_dgram;           /* datagram size from the path MTU (configured 0) */
    int gso, gro;             /* UDP GSO writes in use; the socket reads GRO runs */
    struct sockaddr_in *addrs;
    int n_peers, max_peers;
    double drop_frac;
    uint64_t drop_rng;
    uint8_t *rxbuf, *txbuf;
    struct mmsghdr rxm[BATCH];
    struct iovec rxiov[BATCH];
    struct sockaddr_in rxaddr[BATCH];
    struct iovec rxsplit[BATCH][3];   /* a slot read into a guessed place: header, payload, rest */
    ltp_rx_guess_t guess[BATCH];
    int guessed[BATCH];               /* slot i reads into guess[i] */
    int last_data_peer;               /* whose DATA came last: the peer guesses are made for */
    int large_data;                   /* and it was large enough to read into place */
    uint64_t guess_hits, guess_misses;
    /* room for SCM_TIMESTAMPNS and UDP_GRO per received slot (cmsghdr-aligned) */
    union { struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(struct timespec)) + CMSG_SPACE(sizeof(int))]; } rxctl[BATCH];
    /* the send batch: datagrams polled from the core, and the messages (one datagram, or a GSO
     * run of them to one peer) that carry them; dg_off and m_off count what already went out */
    txdg_t txdg[TX_SLOTS];
    int dg_n, dg_off, m_n, m_off;
    int m_first[TX_SLOTS];    /* first datagram of each message */
    struct mmsghdr txm[TX_SLOTS];
    struct iovec txiov[2 * TX_SLOTS];   /* datagram i: header 2i, payload 2i+1 */
    struct sockaddr_in txaddr[TX_SLOTS];
    union { struct cmsghdr align; char buf[CMSG_SPACE(sizeof(uint16_t))]; } txctl[TX_SLOTS];
    /* progress thread */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* signalled after every loop turn */
    int efd;                  /* eventfd: API calls kick the thread out of ppoll */
    int stop;
    int started;              /* thread, mutex and condition variable exist */
    int error;                /* last socket error the thread met (LTP_ESYS), 0 if none */
    int saved_errno;
    uint64_t hellos_in;       /* HELLO and HELLO_ACK datagrams fed to the core */
};

static void *progress(void *arg);

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int set_buf(int fd, int opt_force, int opt)
{
    int v = SOCK_BUF_BYTES;
    /* FORCE ignores rmem_max/wmem_max (needs CAP_NET_ADMIN); fall back to the capped request. */
    if (setsockopt(fd, SOL_SOCKET, opt_force, &v, sizeof v) == 0) return 0;
    return setsockopt(fd, SOL_SOCKET, opt, &v, sizeof v);
}

ltp_udp_t *ltp_udp_open(const ltp_config_t *cfg, uint16_t self_rank, const char *bind_ip,
                        uint16_t bind_port, double rx_drop_frac, int *err)
{
    int e = LTP_OK;
    ltp_udp_t *u = NULL;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(bind_port)};
    if (!cfg || !bind_ip || !(rx_drop_frac >= 0 && rx_drop_frac < 1) || inet_pton(AF_INET, bind_ip, &sa.sin_addr) != 1) {
        e = LTP_EINVAL;
        goto fail;
    }
    if (ltp_config_validate(cfg) != LTP_OK) { e = LTP_EOPTION; goto fail; }
    u = calloc(1, sizeof *u);
    if (!u) { e = LTP_ENOMEM; goto fail; }
    u->fd = -1;
    u->efd = -1;
    u->path_dgram = cfg->max_udp_payload_bytes == 0;
    u->gso = cfg->udp_gso != 0;
    u->last_data_peer = -1;
    u->max_peers = (int)cfg->max_peers;
    u->drop_frac = rx_drop_frac;
    u->drop_rng = cfg->seed * 0x2545F4914F6CDD1Dull + self_rank;
    u->core = ltp_core_new(cfg, self_rank);
    u->addrs = calloc(cfg->max_peers, sizeof *u->addrs);
    /* Receive slots take the largest datagram so oversized garbage is seen whole and rejected. */
    u->rxbuf = malloc((size_t)BATCH * RX_SLOT_BYTES);
    u->txbuf = malloc((size_t)TX_SLOTS * TX_SLOT_BYTES);
    if (!u->core || !u->addrs || !u->rxbuf || !u->txbuf) { e = LTP_ENOMEM; goto fail; }
    u->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (u->fd < 0) { e = LTP_ESYS; goto fail; }
    set_buf(u->fd, SO_RCVBUFFORCE, SO_RCVBUF);
    set_buf(u->fd, SO_SNDBUFFORCE, SO_SNDBUF);
    /* The kernel's receive time of each datagram: the rate hint measures arrivals at the host,
     * not when a busy thread got round to reading them. Without it, read times stand in. */
    int one = 1;
    setsockopt(u->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    /* GRO: the kernel may hand over a run of equal datagrams from one sender as one read (a GSO
     * write that crossed loopback whole, or packets a NIC or veth coalesced); do_rx splits it. */
    u->gro = cfg->udp_gso && setsockopt(u->fd, IPPROTO_UDP, UDP_GRO, &one, sizeof one) == 0;
    if (bind(u->fd, (struct sockaddr *)&sa, sizeof sa) != 0) { e = LTP_ESYS; goto fail; }
    for (int i = 0; i < BATCH; i++) {
        u->rxiov[i] = (struct iovec){u->rxbuf + (size_t)i * RX_SLOT_BYTES, RX_SLOT_BYTES};
        u->rxm[i].msg_hdr.msg_iov = &u->rxiov[i];
        u->rxm[i].msg_hdr.msg_iovlen = 1;
        u->rxm[i].msg_hdr.msg_name = &u->rxaddr[i];
    }
    u->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (u->efd < 0) { e = LTP_ESYS; goto fail; }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);   /* deadlines use the protocol's clock */
    pthread_cond_init(&u->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&u->mu, NULL);
    if (pthread_create(&u->thread, NULL, progress, u) != 0) {
        pthread_cond_destroy(&u->cv);
        pthread_mutex_destroy(&u->mu);
        e = LTP_ENOMEM;
        goto fail;
    }
    u->started = 1;
    if (err) *err = LTP_OK;
    return u;
fail:
    if (e == LTP_ESYS) {
        int saved = errno;
        ltp_udp_close(u);
        errno = saved;
    } else {
        ltp_udp_close(u);
    }
    if (err) *err = e;
    return NULL;
}

static void kick(ltp_udp_t *u)
{
    uint64_t one = 1;
    ssize_t n = write(u->efd, &one, sizeof one);   /* a full counter already means "wake up" */
    (void)n;
}

void ltp_udp_close(ltp_udp_t *u)
{
    if (!u) return;
    if (u->started) {
        pthread_mutex_lock(&u->mu);
        u->stop = 1;
        pthread_mutex_unlock(&u->mu);
        kick(u);
        pthread_join(u->thread, NULL);
        pthread_cond_destroy(&u->cv);
        pthread_mutex_destroy(&u->mu);
    }
    if (u->efd >= 0) close(u->efd);
    if (u->fd >= 0) close(u->fd);
    ltp_core_free(u->core);
    free(u->addrs); free(u->rxbuf); free(u->txbuf); free(u);
}

/* The largest UDP payload the route toward a reaches without fragmenting: its MTU (the kernel's
 * route, through a connected probe socket) minus IPv4 and UDP headers; LTP_ETH_DATAGRAM if the
 * kernel does not say. */
static uint32_t path_datagram(const struct sockaddr_in *a)
{
    int mtu = 0;
    socklen_t n = sizeof mtu;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return LTP_ETH_DATAGRAM;
    int ok = connect(fd, (const struct sockaddr *)a, sizeof *a) == 0 &&
             getsockopt(fd, IPPROTO_IP, IP_MTU, &mtu, &n) == 0 && mtu > 28;
    close(fd);
    if (!ok) return LTP_ETH_DATAGRAM;
    uint32_t d = (uint32_t)mtu - 28u;
    return d < LTP_DATA_HDR_BYTES + 4 ? LTP_DATA_HDR_BYTES + 4 : d > LTP_MAX_DATAGRAM ? LTP_MAX_DATAGRAM : d;
}

int ltp_udp_add_peer(ltp_udp_t *u, uint16_t rank, const char *ip, uint16_t port)
{
    if (!u || !ip) return LTP_EINVAL;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1) return LTP_EINVAL;
    uint32_t d = u->path_dgram ? path_datagram(&sa) : 0;
    pthread_mutex_lock(&u->mu);
    int slot = ltp_core_add_peer(u->core, rank);
    if (slot >= 0) {
        u->addrs[slot] = sa;
        u->n_peers = slot + 1;
        /* One size per endpoint: the least over its paths. (Peers are added before sending; a
         * later one that needs smaller datagrams while a send is in progress keeps the size.) */
        if (d && (slot == 0 || d < ltp_core_datagram(u->core))) ltp_core_set_datagram(u->core, d);
    }
    pthread_mutex_unlock(&u->mu);
    return slot;
}

int ltp_udp_offload(ltp_udp_t *u)
{
    if (!u) return LTP_EINVAL;
    pthread_mutex_lock(&u->mu);
    int bits = (u->gso ? LTP_OFFLOAD_GSO : 0) | (u->gro ? LTP_OFFLOAD_GRO : 0);
    pthread_mutex_unlock(&u->mu);
    return bits;
}

int ltp_udp_datagram(ltp_udp_t *u)
{
    if (!u) return LTP_EINVAL;
    pthread_mutex_lock(&u->mu);
    int d = (int)ltp_core_datagram(u->core);
    pthread_mutex_unlock(&u->mu);
    return d;
}

int ltp_udp_local_port(const ltp_udp_t *u)
{
    struct sockaddr_in sa;
    socklen_t n = sizeof sa;
    if (!u || getsockname(u->fd, (struct sockaddr *)&sa, &n) != 0) return LTP_ESYS;
    return ntohs(sa.sin_port);
}

static uint16_t rd16le(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int peer_of(const ltp_udp_t *u, const struct sockaddr_in *a)
{
    for (int i = 0; i < u->n_peers; i++)
        if (u->addrs[i].sin_port == a->sin_port && u->addrs[i].sin_addr.s_addr == a->sin_addr.s_addr) return i;
    return -1;
}

/* Drain the socket into the core. Returns datagrams read, or LTP_ESYS. */
/* When datagram i of the last recvmmsg reached the host, on the monotonic clock: its kernel
 * timestamp (realtime) moved by the realtime-to-monotonic offset of this instant. */
static uint64_t arrival_us(ltp_udp_t *u, int i, uint64_t now, const struct timespec *real)
{
    struct msghdr *mh = &u->rxm[i].msg_hdr;
    if (mh->msg_flags & MSG_CTRUNC) return now;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_TIMESTAMPNS) continue;
        struct timespec ts;
        memcpy(&ts, CMSG_DATA(cm), sizeof ts);
        int64_t age_ns = ((int64_t)real->tv_sec - (int64_t)ts.tv_sec) * 1000000000 + (real->tv_nsec - ts.tv_nsec);
        /* A clock step or a stale stamp is no measurement: fall back to the read time. */
        if (age_ns < 0 || age_ns > 1000000000 || (uint64_t)(age_ns / 1000) > now) return now;
        return now - (uint64_t)(age_ns / 1000);
    }
    return now;
}

/* The datagram size of the GRO run in received slot i, or 0 if it holds one datagram. */
static size_t gro_segment(ltp_udp_t *u, int i)
{
    struct msghdr *mh = &u->rxm[i].msg_hdr;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
        if (cm->cmsg_level != SOL_UDP || cm->cmsg_type != UDP_GRO) continue;
        int seg;
        memcpy(&seg, CMSG_DATA(cm), sizeof seg);
        return seg > 0 ? (size_t)seg : 0;
    }
    return 0;
}

/* One received datagram of len bytes into the core (or into the drop hook); with payload != NULL
 * a DATA read into its guessed place, its header alone at b. */
static void rx_datagram(ltp_udp_t *u, int peer, const uint8_t *b, size_t len, const uint8_t *payload,
                        uint64_t now, uint64_t at)
{
    if (u->drop_frac > 0 && len >= 4 && b[WIRE_TYPE] == LTP_T_DATA && ltp_uniform(&u->drop_rng) < u->drop_frac) {
        ltp_core__count(u->core, LTP_S_RX_DROPPED_HOOK, 1);
        return;
    }
    if (len > WIRE_TYPE && (b[WIRE_TYPE] == LTP_T_HELLO || b[WIRE_TYPE] == LTP_T_HELLO_ACK)) u->hellos_in++;
    if (len > WIRE_TYPE && b[WIRE_TYPE] == LTP_T_DATA && peer >= 0) {
        u->last_data_peer = peer;
        u->large_data = len >= LTP_DATA_HDR_BYTES + RX_GUESS_MIN_BYTES;
    }
    if (payload)
        ltp_core_input_split(u->core, peer, b, LTP_DATA_HDR_BYTES, payload, len - LTP_DATA_HDR_BYTES, now, at);
    else
        ltp_core_input_at(u->core, peer, b, len, now, at);
}

/* Point receive slots at guessed places: slot i reads a datagram's header into itself and its
 * payload straight into the i-th guessed part of the message (ltp_core_rx_guess), anything longer
 * into the rest of the slot. Only for large payloads (a small one costs less to copy than a
 * guess) and while guesses mostly hit. Returns how many slots the next read may fill: one while
 * large DATA are expected but nothing can be guessed (a message's first packet: once it opened
 * the message, the rest of the burst can go into place), else all of them. */
static int guess_places(ltp_udp_t *u)
{
    int n = 0;
    if (u->last_data_peer >= 0 && u->guess_hits >= u->guess_misses)
        n = ltp_core_rx_guess(u->core, u->last_data_peer, u->guess, BATCH);
    if (u->guess_hits < u->guess_misses) u->guess_hits = u->guess_misses = 0;   /* try again next round */
    for (int i = 0; i < BATCH; i++) {
        struct msghdr *mh = &u->rxm[i].msg_hdr;
        uint8_t *slot = u->rxbuf + (size_t)i * RX_SLOT_BYTES;
        mh->msg_namelen = sizeof(struct sockaddr_in);
        mh->msg_control = u->rxctl[i].buf;
        mh->msg_controllen = sizeof u->rxctl[i].buf;
        mh->msg_iov = &u->rxiov[i];
        mh->msg_iovlen = 1;
        u->guessed[i] = i < n && u->guess[i].len >= RX_GUESS_MIN_BYTES;
        if (!u->guessed[i]) continue;
        struct iovec *v = u->rxsplit[i];
        v[0] = (struct iovec){slot, LTP_DATA_HDR_BYTES};
        v[1] = (struct iovec){u->guess[i].dst, u->guess[i].len};
        v[2] = (struct iovec){slot + LTP_DATA_HDR_BYTES + u->guess[i].len,
                              RX_SLOT_BYTES - LTP_DATA_HDR_BYTES - u->guess[i].len};
        mh->msg_iov = v;
        mh->msg_iovlen = 3;
    }
    return n == 0 && u->large_data ? 1 : BATCH;
}

/* Slot i was read into a guessed place: 1 if it is that DATA, whose payload is in place; else its
 * payload is copied back behind its header, so the slot holds the datagram whole. */
static int guess_hit(ltp_udp_t *u, int i, int peer)
{
    const ltp_rx_guess_t *g = &u->guess[i];
    uint8_t *b = u->rxbuf + (size_t)i * RX_SLOT_BYTES;
    size_t len = u->rxm[i].msg_len;
    if (len > LTP_DATA_HDR_BYTES && len - LTP_DATA_HDR_BYTES <= g->len && !gro_segment(u, i) &&
        peer == u->last_data_peer && b[WIRE_TYPE] == LTP_T_DATA && rd32le(b + WIRE_MSG_ID) == g->msg_id &&
        rd16le(b + WIRE_SEGMENT) == g->segment && rd32le(b + WIRE_DATA_INDEX) == g->index)
        return 1;
    if (len > LTP_DATA_HDR_BYTES) memcpy(b + LTP_DATA_HDR_BYTES, g->dst, MIN(len - LTP_DATA_HDR_BYTES, g->len));
    return 0;
}

static int do_rx(ltp_udp_t *u)
{
    int total = 0;
    for (int round = 0; round < 16; round++) {   /* bounded so sending is never starved */
        int vlen = guess_places(u);
        int n = recvmmsg(u->fd, u->rxm, (unsigned)vlen, MSG_DONTWAIT, NULL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
            if (errno == ECONNREFUSED) continue;   /* ICMP from a peer not up yet */
            return LTP_ESYS;
        }
        uint64_t now = now_us();
        struct timespec real;
        clock_gettime(CLOCK_REALTIME, &real);
        /* Every miss is made whole before any datagram reaches the core, which may store into
         * a place another slot was read into. */
        int peers[BATCH], hit[BATCH];
        for (int i = 0; i < n; i++) {
            peers[i] = peer_of(u, &u->rxaddr[i]);
            hit[i] = u->guessed[i] && guess_hit(u, i, peers[i]);
            if (u->guessed[i]) { if (hit[i]) u->guess_hits++; else u->guess_misses++; }
            if (u->guess_hits + u->guess_misses > 1024) { u->guess_hits /= 2; u->guess_misses /= 2; }
        }
        for (int i = 0; i < n; i++) {
            const uint8_t *b = u->rxbuf + (size_t)i * RX_SLOT_BYTES;
            size_t len = u->rxm[i].msg_len, seg = gro_segment(u, i), off = 0;
            int peer = peers[i];
            uint64_t at = arrival_us(u, i, now, &real);
            if (hit[i]) {
                ltp_core__count(u->core, LTP_S_RX_PLACED, 1);
                rx_datagram(u, peer, b, len, u->guess[i].dst, now, at);
                continue;
            }
            if (!seg || seg > len) seg = len;
            if (seg < len) ltp_core__count(u->core, LTP_S_RX_GRO_RUNS, 1);
            do {   /* a GRO run is datagrams of seg bytes, the last one maybe shorter */
                rx_datagram(u, peer, b + off, MIN(seg, len - off), NULL, now, at);
                off += seg;
            } while (off < len);
        }
        total += n;
        if (n < vlen) break;
    }
    return total;
}

/* Group the batch's unsent datagrams into messages: each datagram alone, or, with GSO, a run of
 * DATA of one size to one peer (the last may be shorter) as one write that the kernel cuts into
 * those datagrams, each on the wire exactly as if sent alone. */
static void build_msgs(ltp_udp_t *u)
{
    u->m_n = u->m_off = 0;
    for (int i = u->dg_off; i < u->dg_n;) {
        const txdg_t *d = &u->txdg[i];
        uint32_t seg = d->hlen + d->plen;
        int j = i + 1;
        if (u->gso && d->plen) {
            int most = MIN(GSO_MAX_SEGS, (int)(LTP_MAX_DATAGRAM / seg));
            while (j < u->dg_n && j - i < most) {
                const txdg_t *e = &u->txdg[j];
                uint32_t len = e->hlen + e->plen;
                if (!e->plen || e->peer != d->peer || len > seg) break;
                j++;
                if (len < seg) break;   /* only the last segment may be shorter */
            }
        }
        int m = u->m_n++;
        struct msghdr *mh = &u->txm[m].msg_hdr;
        memset(mh, 0, sizeof *mh);
        u->txaddr[m] = u->addrs[d->peer];
        mh->msg_name = &u->txaddr[m];
        mh->msg_namelen = sizeof u->txaddr[m];
        mh->msg_iov = &u->txiov[2 * i];
        mh->msg_iovlen = j - i > 1 ? (size_t)(2 * (j - i)) : d->plen ? 2 : 1;
        if (j - i > 1) {
            mh->msg_control = u->txctl[m].buf;
            mh->msg_controllen = sizeof u->txctl[m].buf;
            struct cmsghdr *cm = CMSG_FIRSTHDR(mh);
            cm->cmsg_level = SOL_UDP;
            cm->cmsg_type = UDP_SEGMENT;
            cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
            uint16_t gso_size = (uint16_t)seg;
            memcpy(CMSG_DATA(cm), &gso_size, sizeof gso_size);
        }
        u->m_first[m] = i;
        i = j;
    }
}

/* Refill the empty batch from the core: every datagram due now, up to TX_SLOTS datagrams and
 * TX_BATCH_BYTES. Payloads stay in the messages being sent (ltp_core_poll_tx_ref). */
static void fill_batch(ltp_udp_t *u)
{
    u->dg_n = u->dg_off = 0;
    uint64_t now = now_us(), bytes = 0;
    while (u->dg_n < TX_SLOTS && bytes < TX_BATCH_BYTES) {
        int i = u->dg_n, peer = -1;
        uint8_t *b = u->txbuf + (size_t)i * TX_SLOT_BYTES;
        const uint8_t *payload;
        uint32_t plen;
        int n = ltp_core_poll_tx_ref(u->core, now, b, TX_SLOT_BYTES, &payload, &plen, &peer);
        if (n <= 0) break;
        u->txdg[i] = (txdg_t){payload, (uint32_t)n, plen, peer};
        u->txiov[2 * i] = (struct iovec){b, (size_t)n};
        u->txiov[2 * i + 1] = (struct iovec){(void *)(uintptr_t)payload, plen};
        u->dg_n++;
        bytes += (uint64_t)n + plen;
    }
    build_msgs(u);
}

/* The batch's first unsent datagram once messages [0, m_off) went out. */
static void msgs_sent(ltp_udp_t *u) { u->dg_off = u->m_off < u->m_n ? u->m_first[u->m_off] : u->dg_n; }

/* Drop unsent DATA whose payload lies in [data, data + len): that send is finished and about to be
 * released, so its memory may go away (and the receiver needs none of it any more). */
static void forget_payload(ltp_udp_t *u, const void *data, size_t len)
{
    const uint8_t *lo = data, *hi = lo + len;
    int k = u->dg_off;
    for (int i = u->dg_off; i < u->dg_n; i++) {
        txdg_t d = u->txdg[i];
        if (d.plen && d.payload >= lo && d.payload < hi) continue;
        if (k != i) {
            uint8_t *to = u->txbuf + (size_t)k * TX_SLOT_BYTES;
            memcpy(to, u->txbuf + (size_t)i * TX_SLOT_BYTES, d.hlen);
            u->txdg[k] = d;
            u->txiov[2 * k] = (struct iovec){to, d.hlen};
            u->txiov[2 * k + 1] = u->txiov[2 * i + 1];
        }
        k++;
    }
    if (k == u->dg_n) return;
    u->dg_n = k;
    build_msgs(u);
}

/* Send the pending batch, then refill it from the core while it has datagrams due. Returns the
 * number of datagrams sent, 1 << 30 if the socket is full (wait for POLLOUT), or LTP_ESYS. */
static int do_tx(ltp_udp_t *u)
{
    int sent = 0;
    for (;;) {
        if (u->m_off == u->m_n) {
            fill_batch(u);
            if (u->dg_n == 0) return sent;
        }
        int before = u->dg_off;
        int n = sendmmsg(u->fd, u->txm + u->m_off, (unsigned)(u->m_n - u->m_off), MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
                ltp_core__count(u->core, LTP_S_TX_EAGAIN, 1);
                return 1 << 30;
            }
            if (errno == EINTR) continue;
            if (u->gso && u->txm[u->m_off].msg_hdr.msg_controllen && (errno == EIO || errno == EINVAL)) {
                u->gso = 0;   /* the kernel or the device refuses GSO here: datagram by datagram */
                build_msgs(u);
                continue;
            }
            if (errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH) {
                u->m_off++;   /* the network lost it; the protocol recovers */
                msgs_sent(u);
                continue;
            }
            return LTP_ESYS;
        }
        for (int k = u->m_off; k < u->m_off + n; k++)
            if (u->txm[k].msg_hdr.msg_controllen) ltp_core__count(u->core, LTP_S_TX_GSO_RUNS, 1);
        u->m_off += n;
        msgs_sent(u);
        sent += u->dg_off - before;
    }
}

typedef int (*done_fn)(ltp_udp_t *u, void *arg);

/* A count that changes whenever something a blocking call waits for happens: a message closed
 * (ltp_udp_recv), a send completed (ltp_udp_send), a HELLO or HELLO_ACK arrived (wait_greeted,
 * join). The core counts the first two anyway. */
static uint64_t app_events(const ltp_udp_t *u)
{
    const uint64_t *st = u->core->st;
    return st[LTP_S_CLOSE_COMPLETE] + st[LTP_S_CLOSE_EARLY] + st[LTP_S_CLOSE_MAX_WAIT] +
           st[LTP_S_SENDS_CLOSED] + st[LTP_S_SENDS_ALL_ACKED] + u->hellos_in;
}

/* The progress thread: the event loop, for as long as the endpoint is open. */
static void *progress(void *arg)
{
    ltp_udp_t *u = arg;
    prctl(PR_SET_TIMERSLACK, TIMER_SLACK_NS, 0, 0, 0);
    pthread_mutex_lock(&u->mu);
    while (!u->stop) {
        uint64_t seen = app_events(u);
        int got = do_rx(u);
        int sent = got < 0 ? 0 : do_tx(u);
        if (got < 0 || sent < 0) {
            u->error = got < 0 ? got : sent;
            u->saved_errno = errno;
        }
        if (u->error || app_events(u) != seen) pthread_cond_broadcast(&u->cv);
        uint64_t now = now_us();
        short events = POLLIN;
        uint64_t wake;
        if (sent == 1 << 30) {
            events |= POLLOUT;
            wake = now + IDLE_MAX_US;
        } else {
            wake = ltp_core_next_timeout(u->core, now);
            if (got < 0 || sent < 0 || (wake <= now && got == 0 && sent == 0)) wake = now + IDLE_FLOOR_US;
            if (wake > now + IDLE_MAX_US) wake = now + IDLE_MAX_US;
        }
        if (wake <= now) continue;
        pthread_mutex_unlock(&u->mu);
        uint64_t wait = wake - now;
        struct timespec ts = {(time_t)(wait / 1000000u), (long)(wait % 1000000u) * 1000};
        struct pollfd pfd[2] = {{u->fd, events, 0}, {u->efd, POLLIN, 0}};
        if (ppoll(pfd, 2, &ts, NULL) > 0 && (pfd[1].revents & POLLIN)) {
            uint64_t drained;
            ssize_t n = read(u->efd, &drained, sizeof drained);
            (void)n;
        }
        pthread_mutex_lock(&u->mu);
    }
    pthread_mutex_unlock(&u->mu);
    return NULL;
}

/* Wait, with u->mu held, until done() says so (0), the deadline passes (LTP_ETIMEDOUT), or the
 * thread met a socket error (LTP_ESYS, errno restored). done == NULL waits the whole time. */
static int wait_for(ltp_udp_t *u, uint64_t timeout_us, done_fn done, void *arg)
{
    uint64_t deadline = now_us() + timeout_us;
    struct timespec abs = {(time_t)(deadline / 1000000u), (long)(deadline % 1000000u) * 1000};
    kick(u);   /* new requests: let the thread send now instead of at its next timer */
    for (;;) {
        if (done && done(u, arg)) return LTP_OK;
        if (u->error) {
            int rc = u->error;
            errno = u->saved_errno;
            u->error = 0;
            return rc;
        }
        if (pthread_cond_timedwait(&u->cv, &u->mu, &abs) == ETIMEDOUT) {
            if (done && done(u, arg)) return LTP_OK;
            return done ? LTP_ETIMEDOUT : LTP_OK;
        }
    }
}

static int joined_done(ltp_udp_t *u, void *arg) { return ltp_core_peer_joined(u->core, *(int *)arg) == 1; }

int ltp_udp_join(ltp_udp_t *u, int peer, uint64_t timeout_us)
{
    if (!u) return LTP_EINVAL;
    pthread_mutex_lock(&u->mu);
    int rc = ltp_core_hello(u->core, peer, now_us());
    if (!rc) rc = wait_for(u, timeout_us, joined_done, &peer);
    pthread_mutex_unlock(&u->mu);
    return rc;
}

static int greeted_done(ltp_udp_t *u, void *arg)
{
    (void)arg;
    for (int i = 0; i < u->n_peers; i++) if (ltp_core_peer_greeted(u->core, i) != 1) return 0;
    return 1;
}

int ltp_udp_wait_greeted(ltp_udp_t *u, uint64_t timeout_us)
{
    if (!u) return LTP_EINVAL;
    pthread_mutex_lock(&u->mu);
    int rc = wait_for(u, timeout_us, greeted_done, NULL);
    pthread_mutex_unlock(&u->mu);
    return rc;
}

typedef struct { ltp_send_req_t *reqs; int n; } send_set_t;

static int sends_done(ltp_udp_t *u, void *arg)
{
    send_set_t *s = arg;
    uint64_t now = now_us();
    for (int i = 0; i < s->n; i++) {
        ltp_send_req_t *r = &s->reqs[i];
        if (r->status != 1) continue;   /* 1 marks "in progress" inside this call */
        if (ltp_core_send_status(u->core, r->peer, r->msg_id, (uint16_t)r->segment, NULL, now) != 1) return 0;
    }
    return 1;
}

int ltp_udp_send(ltp_udp_t *u, ltp_send_req_t *reqs, int n, uint64_t timeout_us)
{
    if (!u || !reqs || n < 0) return LTP_EINVAL;
    pthread_mutex_lock(&u->mu);
    uint64_t now = now_us();
    for (int i = 0; i < n; i++) {
        ltp_send_req_t *r = &reqs[i];
        memset(&r->stats, 0, sizeof r->stats);
        r->status = r->segment > 0xFFFF ? LTP_EINVAL
                    : ltp_core_send(u->core, r->peer, r->msg_id, (uint16_t)r->segment, r->data, r->len_bytes,
                                    r->critical_bytes, now);
        if (r->status == LTP_OK) r->status = 1;
    }
    send_set_t set = {reqs, n};
    int rc = wait_for(u, timeout_us, sends_done, &set);
    int first_err = rc < 0 && rc != LTP_ETIMEDOUT ? rc : LTP_OK;
    now = now_us();
    for (int i = 0; i < n; i++) {
        ltp_send_req_t *r = &reqs[i];
        if (r->status != 1) { if (!first_err) first_err = r->status; continue; }
        int st = ltp_core_send_status(u->core, r->peer, r->msg_id, (uint16_t)r->segment, &r->stats, now);
        r->status = st == 1 ? LTP_OK : rc < 0 ? rc : LTP_ETIMEDOUT;
        if (r->status && !first_err) first_err = r->status;
        forget_payload(u, r->data, r->len_bytes);   /* the caller may free it once we return */
        ltp_core_send_release(u->core, r->peer, r->msg_id, (uint16_t)r->segment);
    }
    pthread_mutex_unlock(&u->mu);
    return first_err;
}

typedef struct { ltp_recv_req_t *reqs; int n; } recv_set_t;

static int recvs_done(ltp_udp_t *u, void *arg)
{
    recv_set_t *s = arg;
    for (int i = 0; i < s->n; i++) {
        ltp_recv_req_t *r = &s->reqs[i];
        if (r->segment > 0xFFFF) continue;
        if (ltp_core_rx_ready(u->core, r->peer, r->msg_id, (uint16_t)r->segment) != 1) return 0;
    }
    return 1;
}

int ltp_udp_recv(ltp_udp_t *u, ltp_recv_req_t *reqs, int n, uint64_t timeout_us)
{
    if (!u || !reqs || n < 0) return LTP_EINVAL;
    pthread_mutex_lock(&u->mu);
    /* DATA land in the caller's buffers while we wait, so taking them copies nothing; whatever is
     * not taken by the time we return moves back into the core's own buffers. */
    for (int i = 0; i < n; i++)
        if (reqs[i].segment <= 0xFFFF && reqs[i].data)
            ltp_core_rx_post(u->core, reqs[i].peer, reqs[i].msg_id, (uint16_t)reqs[i].segment, reqs[i].data,
                             reqs[i].cap_bytes);
    recv_set_t set = {reqs, n};
    int rc = wait_for(u, timeout_us, recvs_done, &set);
    int first_err = rc < 0 && rc != LTP_ETIMEDOUT ? rc : LTP_OK;
    for (int i = 0; i < n; i++) {
        ltp_recv_req_t *r = &reqs[i];
        memset(&r->stats, 0, sizeof r->stats);
        if (r->segment > 0xFFFF) r->status = LTP_EINVAL;
        else if (ltp_core_rx_ready(u->core, r->peer, r->msg_id, (uint16_t)r->segment) == 1)
            r->status = ltp_core_rx_take(u->core, r->peer, r->msg_id, (uint16_t)r->segment, r->data, r->cap_bytes,
                                         r->mask, &r->stats);
        else r->status = rc < 0 ? rc : LTP_ETIMEDOUT;
        if (r->status && !first_err) first_err = r->status;
    }
    for (int i = 0; i < n; i++)
        if (reqs[i].segment <= 0xFFFF && reqs[i].data)
            ltp_core_rx_unpost(u->core, reqs[i].peer, reqs[i].msg_id, (uint16_t)reqs[i].segment);
    pthread_mutex_unlock(&u->mu);
    return first_err;
}

int ltp_udp_service(ltp_udp_t *u, uint64_t timeout_us)
{
    if (!u) return LTP_EINVAL;
    pthread_mutex_lock(&u->mu);
    int rc = wait_for(u, timeout_us, NULL, NULL);
    pthread_mutex_unlock(&u->mu);
    return rc;
}

void ltp_udp_stats(ltp_udp_t *u, uint64_t *out, int n)
{
    if (!u) return;
    pthread_mutex_lock(&u->mu);
    ltp_core_stats(u->core, out, n);
    pthread_mutex_unlock(&u->mu);
}

double ltp_udp_threshold(ltp_udp_t *u, int peer, uint16_t segment)
{
    if (!u) return -1.0;
    pthread_mutex_lock(&u->mu);
    double th = ltp_core_threshold(u->core, peer, segment);
    pthread_mutex_unlock(&u->mu);
    return th;
}

int ltp_udp_set_policy(ltp_udp_t *u, uint16_t segment, double lo, double hi)
{
    if (!u) return LTP_EINVAL;
    pthread_mutex_lock(&u->mu);
    int rc = ltp_core_set_policy(u->core, segment, lo, hi);
    pthread_mutex_unlock(&u->mu);
    return rc;
}
