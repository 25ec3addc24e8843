/* ltp_udp.c: the UDP driver around one LTP core: socket, clock and the event loop (the batched
 * datagram I/O it calls is ltp_udp_io.c).
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
#include "ltp_udp_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>   /* UDP_GRO */
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void *progress(void *arg);

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
    u->tag_bytes = (uint32_t)auth_trailer(cfg);
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
    /* Without IP_RECVERR Linux's UDP reports success for a datagram the host's own queue (a full
     * qdisc) dropped, and counts it only in UdpSndbufErrors: the protocol would take it for a
     * network loss and send it again an RTT later. With it, sendmmsg stops at that datagram with
     * ENOBUFS and do_tx keeps it for a moment later. (ICMP errors then reach the error queue,
     * which do_rx reads.) */
    setsockopt(u->fd, IPPROTO_IP, IP_RECVERR, &one, sizeof one);
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
    free(u->addrs); free(u->rxbuf); free(u->txbuf); free(u->seg_tos); free(u);
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

/* The body of a call that only asks the core (or the handle) under the handle's lock: `bad` when
 * there is no handle, else what `expr` gives. */
#define LOCKED(u, bad, type, expr)             \
    do {                                       \
        if (!(u)) return (bad);                \
        pthread_mutex_lock(&(u)->mu);          \
        type locked_ = (expr);                 \
        pthread_mutex_unlock(&(u)->mu);        \
        return locked_;                        \
    } while (0)

int ltp_udp_offload(ltp_udp_t *u)
{
    LOCKED(u, LTP_EINVAL, int, (u->gso ? LTP_OFFLOAD_GSO : 0) | (u->gro ? LTP_OFFLOAD_GRO : 0));
}

int ltp_udp_datagram(ltp_udp_t *u)
{
    LOCKED(u, LTP_EINVAL, int, (int)ltp_core_datagram(u->core));
}

int ltp_udp_local_port(const ltp_udp_t *u)
{
    struct sockaddr_in sa;
    socklen_t n = sizeof sa;
    if (!u || getsockname(u->fd, (struct sockaddr *)&sa, &n) != 0) return LTP_ESYS;
    return ntohs(sa.sin_port);
}

typedef int (*done_fn)(ltp_udp_t *u, void *arg);

/* A count that changes whenever something a blocking call waits for happens: a message closed
 * (ltp_udp_recv), a send completed or found stale (ltp_udp_send), a HELLO or HELLO_ACK arrived (wait_greeted,
 * join). The core counts the first two anyway. */
static uint64_t app_events(const ltp_udp_t *u)
{
    const uint64_t *st = u->core->st;
    return st[LTP_S_CLOSE_COMPLETE] + st[LTP_S_CLOSE_EARLY] + st[LTP_S_CLOSE_MAX_WAIT] +
           st[LTP_S_SENDS_CLOSED] + st[LTP_S_SENDS_ALL_ACKED] + st[LTP_S_SENDS_STALE] + u->hellos_in;
}

/* The progress thread: the event loop, for as long as the endpoint is open. */
static void *progress(void *arg)
{
    ltp_udp_t *u = arg;
    prctl(PR_SET_TIMERSLACK, TIMER_SLACK_NS, 0, 0, 0);
    pthread_mutex_lock(&u->mu);
    while (!u->stop) {
        uint64_t seen = app_events(u);
        /* A lingering caller waits for the moment it may leave, which moves without any event
         * above: the farewell CLOSEs going out (until then it is UINT64_MAX) and datagrams
         * arriving. Without a wake-up it would sleep to linger's bound. */
        uint64_t leave = u->core->linger_from_us ? ltp_core_linger_until(u->core, 0) : 0;
        int got = do_rx(u);
        int sent = got < 0 ? 0 : do_tx(u);
        if (got < 0 || sent < 0) {
            u->error = got < 0 ? got : sent;
            u->saved_errno = errno;
        }
        if (u->error || app_events(u) != seen ||
            (u->core->linger_from_us && ltp_core_linger_until(u->core, 0) != leave))
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
 * thread met a socket error (LTP_ESYS, errno restored). done == NULL waits the whole time. A call
 * that gave the core something to send kicks the thread first; one that only waits (a receive, a
 * service, waiting for HELLOs) does not: posting buffers or taking messages moves no timer
 * earlier, and a kick would cost the thread a wake-up for nothing (on loopback, one per gather). */
static int wait_for(ltp_udp_t *u, uint64_t timeout_us, done_fn done, void *arg)
{
    uint64_t deadline = now_us() + timeout_us;
    struct timespec abs = {(time_t)(deadline / 1000000u), (long)(deadline % 1000000u) * 1000};
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
    if (!rc) {
        kick(u);   /* the HELLO goes out now */
        rc = wait_for(u, timeout_us, joined_done, &peer);
    }
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
    LOCKED(u, LTP_EINVAL, int, wait_for(u, timeout_us, greeted_done, NULL));
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

/* Keep request r's mark as its segment's (ltp_send_req_t.tos); the table exists once a send
 * marks something. LTP_OK, LTP_EINVAL for a mark that is neither 0 nor LTP_TOS_MARK | byte. */
static int mark_segment(ltp_udp_t *u, const ltp_send_req_t *r)
{
    if (r->tos && (r->tos & ~0xFFu) != LTP_TOS_MARK) return LTP_EINVAL;
    if (!r->tos && r->segment >= u->n_seg_tos) return LTP_OK;   /* unmarked and never marked */
    if (grow_zeroed((void **)&u->seg_tos, &u->n_seg_tos, (uint16_t)r->segment, sizeof *u->seg_tos))
        return LTP_ENOMEM;
    u->seg_tos[r->segment] = (uint16_t)r->tos;
    return LTP_OK;
}

int ltp_udp_send(ltp_udp_t *u, ltp_send_req_t *reqs, int n, uint64_t timeout_us)
{
    if (!u || !reqs || n < 0) return LTP_EINVAL;
    pthread_mutex_lock(&u->mu);
    uint64_t now = now_us();
    for (int i = 0; i < n; i++) {
        ltp_send_req_t *r = &reqs[i];
        memset(&r->stats, 0, sizeof r->stats);
        r->status = r->segment > 0xFFFF ? LTP_EINVAL : mark_segment(u, r);
        if (r->status == LTP_OK)
            r->status = ltp_core_send(u->core, r->peer, r->msg_id, (uint16_t)r->segment, r->data,
                                      r->len_bytes, r->critical_bytes, now);
        if (r->status == LTP_OK) r->status = 1;
    }
    send_set_t set = {reqs, n};
    kick(u);   /* the new sends go out now, not at the thread's next timer */
    int rc = wait_for(u, timeout_us, sends_done, &set);
    int first_err = rc < 0 && rc != LTP_ETIMEDOUT ? rc : LTP_OK;
    now = now_us();
    /* A caller whose deadline passed sends the same messages again (a worker's push is retried in
     * slices): every send of the call is kept, the unfinished ones paused, so the retry goes on
     * where they stopped and finds the others done. Released and sent again, each started over,
     * and a message the receiver already closed was refused its CLOSE until it had been sent
     * whole again (docs/plot-protocol.md, the stall of the early iterations). */
    int keep = !sends_done(u, &set);
    for (int i = 0; i < n; i++) {
        ltp_send_req_t *r = &reqs[i];
        if (r->status != 1) { if (!first_err) first_err = r->status; continue; }
        int st = ltp_core_send_status(u->core, r->peer, r->msg_id, (uint16_t)r->segment, &r->stats, now);
        r->status = st != 1 ? (rc < 0 ? rc : LTP_ETIMEDOUT) : r->stats.done == LTP_SEND_STALE ? LTP_ESTALE : LTP_OK;
        if (r->status && !first_err) first_err = r->status;
        forget_payload(u, r->data, r->len_bytes);   /* the caller may free it once we return */
        if (keep) ltp_core_send_suspend(u->core, r->peer, r->msg_id, (uint16_t)r->segment);
        else ltp_core_send_release(u->core, r->peer, r->msg_id, (uint16_t)r->segment);
    }
    pthread_mutex_unlock(&u->mu);
    return first_err;
}

typedef struct { ltp_recv_req_t *reqs; int n; int min_done; } recv_set_t;

/* At least min_done of the requests have a closed message to take. */
static int recvs_done(ltp_udp_t *u, void *arg)
{
    recv_set_t *s = arg;
    int ready = 0;
    for (int i = 0; i < s->n; i++) {
        ltp_recv_req_t *r = &s->reqs[i];
        if (r->segment > 0xFFFF) continue;
        if (ltp_core_rx_ready(u->core, r->peer, r->msg_id, (uint16_t)r->segment) > 0) ready++;
        else if (s->min_done >= s->n) return 0;   /* waiting for all: no need to count on */
    }
    return ready >= s->min_done;
}

/* A message its sender finished with before any of it arrived, taken as an empty one: nothing
 * received, every value 0 and masked out (LTP_CLOSE_ABANDONED). */
static int take_gone(ltp_recv_req_t *r)
{
    if (r->data) memset(r->data, 0, r->cap_bytes);
    if (r->mask) memset(r->mask, 0, r->cap_bytes / 4);
    r->stats.total_bytes = r->cap_bytes;
    r->stats.close_reason = LTP_CLOSE_ABANDONED;
    r->stats.early_closed = 1;
    return LTP_OK;
}

/* Post every request, wait for min_done of them, take every one that closed. Returns how many
 * were taken, or < 0 on a socket error; *first_err gets the first request's error. */
static int recv_wait(ltp_udp_t *u, ltp_recv_req_t *reqs, int n, int min_done, uint64_t timeout_us,
                     int *first_err)
{
    /* DATA land in the caller's buffers while we wait, so taking them copies nothing; whatever is
     * not taken by the time we return moves back into the core's own buffers. */
    for (int i = 0; i < n; i++)
        if (reqs[i].segment <= 0xFFFF && reqs[i].data)
            ltp_core_rx_post(u->core, reqs[i].peer, reqs[i].msg_id, (uint16_t)reqs[i].segment, reqs[i].data,
                             reqs[i].cap_bytes);
    recv_set_t set = {reqs, n, min_done};
    int rc = wait_for(u, timeout_us, recvs_done, &set);
    int taken = 0;
    *first_err = rc < 0 && rc != LTP_ETIMEDOUT ? rc : LTP_OK;
    for (int i = 0; i < n; i++) {
        ltp_recv_req_t *r = &reqs[i];
        memset(&r->stats, 0, sizeof r->stats);
        int ready = r->segment > 0xFFFF ? LTP_EINVAL
                    : ltp_core_rx_ready(u->core, r->peer, r->msg_id, (uint16_t)r->segment);
        if (r->segment > 0xFFFF) r->status = LTP_EINVAL;
        else if (ready == 1)
            r->status = ltp_core_rx_take(u->core, r->peer, r->msg_id, (uint16_t)r->segment, r->data, r->cap_bytes,
                                         r->mask, &r->stats);
        else if (ready == LTP_RX_GONE) r->status = take_gone(r);
        else r->status = rc < 0 && rc != LTP_ETIMEDOUT ? rc : LTP_ETIMEDOUT;
        if (r->status == LTP_OK) taken++;
        else if (!*first_err) *first_err = r->status;
    }
    for (int i = 0; i < n; i++)
        if (reqs[i].segment <= 0xFFFF && reqs[i].data)
            ltp_core_rx_unpost(u->core, reqs[i].peer, reqs[i].msg_id, (uint16_t)reqs[i].segment);
    return rc < 0 && rc != LTP_ETIMEDOUT ? rc : taken;
}

int ltp_udp_recv(ltp_udp_t *u, ltp_recv_req_t *reqs, int n, uint64_t timeout_us)
{
    if (!u || !reqs || n < 0) return LTP_EINVAL;
    pthread_mutex_lock(&u->mu);
    int first_err;
    recv_wait(u, reqs, n, n, timeout_us, &first_err);
    pthread_mutex_unlock(&u->mu);
    return first_err;
}

int ltp_udp_recv_some(ltp_udp_t *u, ltp_recv_req_t *reqs, int n, int min_done, uint64_t timeout_us)
{
    if (!u || !reqs || n < 0 || min_done < 0 || min_done > n) return LTP_EINVAL;
    pthread_mutex_lock(&u->mu);
    int first_err;
    int rc = recv_wait(u, reqs, n, min_done, timeout_us, &first_err);
    pthread_mutex_unlock(&u->mu);
    return rc;
}

int ltp_udp_service(ltp_udp_t *u, uint64_t timeout_us)
{
    LOCKED(u, LTP_EINVAL, int, wait_for(u, timeout_us, NULL, NULL));
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
    LOCKED(u, -1.0, double, ltp_core_threshold(u->core, peer, segment));
}

int ltp_udp_set_policy(ltp_udp_t *u, uint16_t segment, double lo, double hi)
{
    if (!u) return LTP_EINVAL;
    pthread_mutex_lock(&u->mu);
    int rc = ltp_core_set_policy(u->core, segment, lo, hi);
    pthread_mutex_unlock(&u->mu);
    kick(u);   /* new thresholds may close open messages now: the thread's next turn does */
    return rc;
}

int ltp_udp_expect(ltp_udp_t *u, uint16_t segment, uint32_t total_bytes, uint32_t critical_bytes)
{
    LOCKED(u, LTP_EINVAL, int, ltp_core_expect(u->core, segment, total_bytes, critical_bytes));
}

int ltp_udp_set_tos(ltp_udp_t *u, int tos)
{
    if (!u || tos < 0 || tos > 0xFF) return LTP_EINVAL;
    pthread_mutex_lock(&u->mu);
    int rc = setsockopt(u->fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos) == 0 ? LTP_OK : LTP_ESYS;
    pthread_mutex_unlock(&u->mu);
    return rc;
}

int ltp_udp_set_peer_key(ltp_udp_t *u, int peer, const uint8_t *key, size_t len)
{
    LOCKED(u, LTP_EINVAL, int, ltp_core_set_peer_key(u->core, peer, key, len));
}
