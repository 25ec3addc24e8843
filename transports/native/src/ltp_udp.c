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
 * variable, which the thread signals after every turn, until its requests are done or its
 * deadline passes. The thread's timer slack is lowered so sub-ms pacing sleeps are honoured
 * without busy-waiting.
 */
#define _GNU_SOURCE
#include "ltp_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define SOCK_BUF_BYTES (8 << 20)
#define TIMER_SLACK_NS 1000ul
#define IDLE_FLOOR_US 50   /* a loop turn that moved nothing never sleeps less than this */
#define IDLE_MAX_US 1000000u   /* with no timer pending, the thread still wakes once a second */
#define TX_FULL (1 << 30)      /* do_tx: the socket buffer is full, wait for POLLOUT */
#define TX_REFUSED (1 << 29)   /* do_tx: the local queue refused a datagram, try again shortly */
#define REFUSED_MIN_US 100     /* first retry after ENOBUFS; doubles up to ... */
#define REFUSED_MAX_US 2000

struct ltp_udp {
    ltp_core_t *core;
    int fd;
    uint32_t dgram;
    struct sockaddr_in *addrs;
    int n_peers, max_peers;
    double drop_frac;
    uint64_t drop_rng;
    uint8_t *rxbuf, *txbuf;
    struct mmsghdr rxm[BATCH], txm[BATCH];
    struct iovec rxiov[BATCH], txiov[BATCH];
    struct sockaddr_in rxaddr[BATCH], txaddr[BATCH];
    /* room for one SCM_TIMESTAMPNS per received datagram (cmsghdr-aligned) */
    union { struct cmsghdr align; char buf[CMSG_SPACE(sizeof(struct timespec))]; } rxctl[BATCH];
    int tx_n, tx_off;   /* datagrams in the send batch, and how many already went out */
    /* progress thread */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* signalled after every loop turn */
    int efd;                  /* eventfd: API calls kick the thread out of ppoll */
    int stop;
    int started;              /* thread, mutex and condition variable exist */
    int error;                /* last socket error the thread met (LTP_ESYS), 0 if none */
    int saved_errno;
    int errq;                 /* the socket's error queue has ICMP reports to read */
    uint32_t refused_us;      /* current wait before sending again after ENOBUFS */
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
    u->dgram = cfg->max_udp_payload_bytes;
    u->max_peers = (int)cfg->max_peers;
    u->drop_frac = rx_drop_frac;
    u->drop_rng = cfg->seed * 0x2545F4914F6CDD1Dull + self_rank;
    u->core = ltp_core_new(cfg, self_rank);
    u->addrs = calloc(cfg->max_peers, sizeof *u->addrs);
    /* Receive slots take the largest datagram so oversized garbage is seen whole and rejected. */
    u->rxbuf = malloc((size_t)BATCH * LTP_MAX_DATAGRAM);
    u->txbuf = malloc((size_t)BATCH * u->dgram);
    if (!u->core || !u->addrs || !u->rxbuf || !u->txbuf) { e = LTP_ENOMEM; goto fail; }
    u->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (u->fd < 0) { e = LTP_ESYS; goto fail; }
    set_buf(u->fd, SO_RCVBUFFORCE, SO_RCVBUF);
    set_buf(u->fd, SO_SNDBUFFORCE, SO_SNDBUF);
    /* The kernel's receive time of each datagram: the rate hint measures arrivals at the host,
     * not when a busy thread got round to reading them. Without it, read times stand in. */
    int one = 1;
    setsockopt(u->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    /* Without IP_RECVERR Linux's UDP reports success for a datagram the host's own queue (a full
     * qdisc) dropped, and counts it only in UdpSndbufErrors: the protocol would take it for a
     * network loss and send it again an RTT later. With it, sendmmsg stops at that datagram with
     * ENOBUFS and do_tx keeps it for a moment later. (ICMP errors then reach the error queue,
     * which do_rx reads.) */
    setsockopt(u->fd, IPPROTO_IP, IP_RECVERR, &one, sizeof one);
    if (bind(u->fd, (struct sockaddr *)&sa, sizeof sa) != 0) { e = LTP_ESYS; goto fail; }
    for (int i = 0; i < BATCH; i++) {
        u->rxiov[i] = (struct iovec){u->rxbuf + (size_t)i * LTP_MAX_DATAGRAM, LTP_MAX_DATAGRAM};
        u->rxm[i].msg_hdr.msg_iov = &u->rxiov[i];
        u->rxm[i].msg_hdr.msg_iovlen = 1;
        u->rxm[i].msg_hdr.msg_name = &u->rxaddr[i];
        u->txm[i].msg_hdr.msg_iov = &u->txiov[i];
        u->txm[i].msg_hdr.msg_iovlen = 1;
        u->txm[i].msg_hdr.msg_name = &u->txaddr[i];
        u->txm[i].msg_hdr.msg_namelen = sizeof(struct sockaddr_in);
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

int ltp_udp_add_peer(ltp_udp_t *u, uint16_t rank, const char *ip, uint16_t port)
{
    if (!u || !ip) return LTP_EINVAL;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1) return LTP_EINVAL;
    pthread_mutex_lock(&u->mu);
    int slot = ltp_core_add_peer(u->core, rank);
    if (slot >= 0) {
        u->addrs[slot] = sa;
        u->n_peers = slot + 1;
    }
    pthread_mutex_unlock(&u->mu);
    return slot;
}

int ltp_udp_local_port(const ltp_udp_t *u)
{
    struct sockaddr_in sa;
    socklen_t n = sizeof sa;
    if (!u || getsockname(u->fd, (struct sockaddr *)&sa, &n) != 0) return LTP_ESYS;
    return ntohs(sa.sin_port);
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

/* Read the ICMP reports IP_RECVERR queues (a peer's port closed, a host unreachable): counted;
 * the protocol treats them as the losses they are. */
static void drain_errqueue(ltp_udp_t *u)
{
    char data[64], ctl[512];
    for (int i = 0; i < 64; i++) {
        struct iovec iov = {data, sizeof data};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
        if (recvmsg(u->fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) break;
        ltp_core__count(u->core, LTP_S_ICMP_ERRORS, 1);
    }
    u->errq = 0;
}

/* An ICMP error an earlier datagram caused, reported on this call instead of its own result. */
static int icmp_errno(int e)
{
    return e == ECONNREFUSED || e == EHOSTUNREACH || e == ENETUNREACH || e == EHOSTDOWN;
}

static int do_rx(ltp_udp_t *u)
{
    int total = 0;
    if (u->errq) drain_errqueue(u);
    for (int round = 0; round < 16; round++) {   /* bounded so sending is never starved */
        for (int i = 0; i < BATCH; i++) {
            u->rxm[i].msg_hdr.msg_namelen = sizeof(struct sockaddr_in);
            u->rxm[i].msg_hdr.msg_control = u->rxctl[i].buf;
            u->rxm[i].msg_hdr.msg_controllen = sizeof u->rxctl[i].buf;
        }
        int n = recvmmsg(u->fd, u->rxm, BATCH, MSG_DONTWAIT, NULL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
            if (icmp_errno(errno)) {   /* e.g. a peer not up yet, or gone */
                drain_errqueue(u);
                continue;
            }
            return LTP_ESYS;
        }
        uint64_t now = now_us();
        struct timespec real;
        clock_gettime(CLOCK_REALTIME, &real);
        for (int i = 0; i < n; i++) {
            const uint8_t *b = u->rxiov[i].iov_base;
            size_t len = u->rxm[i].msg_len;
            if (u->drop_frac > 0 && len >= 4 && b[WIRE_TYPE] == LTP_T_DATA && ltp_uniform(&u->drop_rng) < u->drop_frac) {
                ltp_core__count(u->core, LTP_S_RX_DROPPED_HOOK, 1);
                continue;
            }
            ltp_core_input_at(u->core, peer_of(u, &u->rxaddr[i]), b, len, now, arrival_us(u, i, now, &real));
        }
        total += n;
        if (n < BATCH) break;
    }
    return total;
}

/* Send the pending batch, then refill it from the core while it has datagrams due. Returns the
 * number sent, TX_FULL if the socket is full (wait for POLLOUT), TX_REFUSED if the host's own
 * queue refused a datagram (send it again after refused_us), or LTP_ESYS. */
static int do_tx(ltp_udp_t *u)
{
    int sent = 0;
    for (;;) {
        if (u->tx_off == u->tx_n) {
            u->tx_off = u->tx_n = 0;
            uint64_t now = now_us();
            while (u->tx_n < BATCH) {
                int peer = -1;
                uint8_t *b = u->txbuf + (size_t)u->tx_n * u->dgram;
                int n = ltp_core_poll_tx(u->core, now, b, u->dgram, &peer);
                if (n <= 0) break;
                u->txiov[u->tx_n] = (struct iovec){b, (size_t)n};
                u->txaddr[u->tx_n] = u->addrs[peer];
                u->tx_n++;
            }
            if (u->tx_n == 0) return sent;
        }
        int n = sendmmsg(u->fd, u->txm + u->tx_off, (unsigned)(u->tx_n - u->tx_off), MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                ltp_core__count(u->core, LTP_S_TX_EAGAIN, 1);
                return TX_FULL;
            }
            if (errno == ENOBUFS) {
                /* The qdisc of this host's link is full and dropped the datagram: keep it (and the
                 * rest of the batch) and offer it again once some of the queue has drained. POLLOUT
                 * would not wait: the dropped datagrams no longer count against the socket. */
                ltp_core__count(u->core, LTP_S_TX_REFUSED, 1);
                u->refused_us = u->refused_us ? MIN(2 * u->refused_us, REFUSED_MAX_US) : REFUSED_MIN_US;
                return TX_REFUSED;
            }
            if (errno == EINTR) continue;
            if (errno == ECONNREFUSED) {   /* an earlier datagram's ICMP error: this one is unsent */
                u->errq = 1;
                continue;
            }
            if (errno == EHOSTUNREACH || errno == ENETUNREACH || errno == EHOSTDOWN) {
                u->errq = 1;
                u->tx_off++;   /* the network lost it; the protocol recovers */
                continue;
            }
            return LTP_ESYS;
        }
        u->refused_us = 0;
        u->tx_off += n;
        sent += n;
    }
}

typedef int (*done_fn)(ltp_udp_t *u, void *arg);

/* The progress thread: the event loop, for as long as the endpoint is open. */
static void *progress(void *arg)
{
    ltp_udp_t *u = arg;
    prctl(PR_SET_TIMERSLACK, TIMER_SLACK_NS, 0, 0, 0);
    pthread_mutex_lock(&u->mu);
    while (!u->stop) {
        int got = do_rx(u);
        int sent = got < 0 ? 0 : do_tx(u);
        if (got < 0 || sent < 0) {
            u->error = got < 0 ? got : sent;
            u->saved_errno = errno;
        }
        pthread_cond_broadcast(&u->cv);
        uint64_t now = now_us();
        short events = POLLIN;
        uint64_t wake;
        if (sent == TX_FULL) {
            events |= POLLOUT;
            wake = now + IDLE_MAX_US;
        } else if (sent == TX_REFUSED) {
            wake = now + u->refused_us;
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
        if (pfd[0].revents & POLLERR) u->errq = 1;   /* else ppoll would return at once, forever */
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

int ltp_udp_linger(ltp_udp_t *u, uint64_t max_us)
{
    if (!u) return LTP_EINVAL;
    pthread_mutex_lock(&u->mu);
    uint64_t end = now_us() + max_us;
    ltp_core_linger(u->core, now_us());
    kick(u);   /* the farewell CLOSE copies go out now */
    for (;;) {
        uint64_t now = now_us(), until = MIN(ltp_core_linger_until(u->core, now), end);
        if (now >= until) break;
        struct timespec abs = {(time_t)(until / 1000000u), (long)(until % 1000000u) * 1000};
        pthread_cond_timedwait(&u->cv, &u->mu, &abs);   /* re-asked after every loop turn */
    }
    pthread_mutex_unlock(&u->mu);
    return LTP_OK;
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
