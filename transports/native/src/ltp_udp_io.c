/* ltp_udp_io.c: the UDP driver's datagram I/O, called by the event loop (ltp_udp.c).
 *
 * Sending: the core's due datagrams are polled into a batch with their payloads by reference
 * (ltp_core_poll_tx_ref: a DATA's header in a slot, its payload where the message is), grouped
 * into messages (a datagram alone, or with GSO a run of full-size DATA to one peer that the kernel
 * cuts into exactly those datagrams) and written with sendmmsg.
 * Receiving: recvmmsg into slots, GRO runs split back into datagrams, and large payloads of an
 * in-order burst read straight into the message they belong to (ltp_core_rx_guess), so the core
 * copies nothing. docs/ltp-protocol.md §6.
 */
#define _GNU_SOURCE
#include "ltp_udp_internal.h"

#include <errno.h>
#include <netinet/udp.h>
#include <string.h>

static uint16_t rd16le(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int ltp_udp__peer_of(const struct sockaddr_in *addrs, int n, const struct sockaddr_in *a, socklen_t alen)
{
    if (alen != sizeof *a || a->sin_family != AF_INET) return -1;
    for (int i = 0; i < n; i++)
        if (addrs[i].sin_port == a->sin_port && addrs[i].sin_addr.s_addr == a->sin_addr.s_addr) return i;
    return -1;
}

/* The kernel timestamp (realtime) moved by the realtime-to-monotonic offset of this instant. */
uint64_t ltp_udp__arrival_us(struct msghdr *mh, uint64_t now, const struct timespec *real)
{
    if (mh->msg_flags & MSG_CTRUNC) return now;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_TIMESTAMPNS) continue;
        /* Too short to hold a stamp, or claiming more than the buffer has: no measurement. */
        const uint8_t *end = (const uint8_t *)mh->msg_control + mh->msg_controllen;
        if (cm->cmsg_len < CMSG_LEN(sizeof(struct timespec)) ||
            (const uint8_t *)CMSG_DATA(cm) + sizeof(struct timespec) > end)
            return now;
        struct timespec ts;
        memcpy(&ts, CMSG_DATA(cm), sizeof ts);
        /* Only a stamp within a second or two of now is worth the arithmetic (which then cannot
         * overflow, whatever the buffer held). */
        if (ts.tv_nsec < 0 || ts.tv_nsec >= 1000000000 || ts.tv_sec > real->tv_sec || ts.tv_sec < real->tv_sec - 2)
            return now;
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
        if (cm->cmsg_len < CMSG_LEN(sizeof(int))) return 0;
        int seg;
        memcpy(&seg, CMSG_DATA(cm), sizeof seg);
        return seg > 0 ? (size_t)seg : 0;
    }
    return 0;
}

/* One received datagram of len bytes into the core (or into the drop hook); with payload != NULL
 * a DATA read into its guessed place, its header at b followed by its MAC tag (auth on). */
static void rx_datagram(ltp_udp_t *u, int peer, const uint8_t *b, size_t len, const uint8_t *payload,
                        uint64_t now, uint64_t at)
{
    if (u->drop_frac > 0 && len >= 4 && b[WIRE_TYPE] == LTP_T_DATA && ltp_uniform(&u->drop_rng) < u->drop_frac) {
        ltp_core__count(u->core, LTP_S_RX_DROPPED_HOOK, 1);
        return;
    }
    int rc;
    if (payload) {
        size_t head = LTP_DATA_HDR_BYTES + u->tag_bytes;
        rc = ltp_core_input_split(u->core, peer, b, head, payload, len - head, now, at);
    }
    else
        rc = ltp_core_input_at(u->core, peer, b, len, now, at);
    /* Only a datagram the core took in (its MAC checked, auth on) moves the driver's own state:
     * the placement guesses and the count that wakes HELLO waiters. */
    if (rc != LTP_OK) return;
    if (b[WIRE_TYPE] == LTP_T_HELLO || b[WIRE_TYPE] == LTP_T_HELLO_ACK) u->hellos_in++;
    if (b[WIRE_TYPE] == LTP_T_DATA && peer >= 0) {
        u->last_data_peer = peer;
        u->large_data = len >= LTP_DATA_HDR_BYTES + RX_GUESS_MIN_BYTES;
    }
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

/* Slot i read into its guessed place is to be passed whole: its payload back behind its header
 * (what it left in the place is in a part that has not arrived). */
static void unguess(ltp_udp_t *u, int i)
{
    const ltp_rx_guess_t *g = &u->guess[i];
    uint8_t *b = u->rxbuf + (size_t)i * RX_SLOT_BYTES;
    size_t len = u->rxm[i].msg_len;
    if (len > LTP_DATA_HDR_BYTES) memcpy(b + LTP_DATA_HDR_BYTES, g->dst, MIN(len - LTP_DATA_HDR_BYTES, g->len));
}

/* Slot i was read into a guessed place: 1 if it is that DATA, whose payload (exactly the guessed
 * length) is in place, and its MAC tag (auth on) is moved to just behind its header; else its
 * payload is copied back behind its header, so the slot holds the datagram whole. */
static int guess_hit(ltp_udp_t *u, int i, int peer)
{
    const ltp_rx_guess_t *g = &u->guess[i];
    uint8_t *b = u->rxbuf + (size_t)i * RX_SLOT_BYTES;
    size_t len = u->rxm[i].msg_len;
    if (len == LTP_DATA_HDR_BYTES + g->len + u->tag_bytes && !gro_segment(u, i) &&
        peer == u->last_data_peer && b[WIRE_TYPE] == LTP_T_DATA && rd32le(b + WIRE_MSG_ID) == g->msg_id &&
        rd16le(b + WIRE_SEGMENT) == g->segment && rd32le(b + WIRE_DATA_INDEX) == g->index) {
        /* the tag was read into the rest of the slot, after the space the payload skipped */
        if (u->tag_bytes) memcpy(b + LTP_DATA_HDR_BYTES, b + LTP_DATA_HDR_BYTES + g->len, u->tag_bytes);
        return 1;
    }
    unguess(u, i);
    return 0;
}

/* A hit whose packet also came in another slot of the batch (a copy, genuine or forged) is passed
 * whole instead: whichever copy the core stores first must not have been written over in place by
 * the other before it is compared (admit_conflict). The other slots are misses, rare while
 * guesses hit, and a GRO run is walked datagram by datagram. */
static void demote_copies(ltp_udp_t *u, int n, const int *peers, int *hit)
{
    for (int j = 0; j < n; j++) {
        if (hit[j] || peers[j] != u->last_data_peer) continue;
        const uint8_t *b = u->rxbuf + (size_t)j * RX_SLOT_BYTES;
        size_t len = u->rxm[j].msg_len, seg = gro_segment(u, j);
        if (!seg || seg > len) seg = len;
        for (size_t off = 0; off < len; off += seg) {
            const uint8_t *d = b + off;
            if (MIN(seg, len - off) < LTP_DATA_HDR_BYTES || d[WIRE_TYPE] != LTP_T_DATA) continue;
            for (int i = 0; i < n; i++) {
                if (!hit[i]) continue;
                const ltp_rx_guess_t *g = &u->guess[i];
                if (rd32le(d + WIRE_DATA_INDEX) != g->index || rd32le(d + WIRE_MSG_ID) != g->msg_id ||
                    rd16le(d + WIRE_SEGMENT) != g->segment)
                    continue;
                unguess(u, i);   /* the tag is still after the payload's space (guess_hit copied it) */
                hit[i] = 0;
                if (u->guess_hits) u->guess_hits--;
                u->guess_misses++;
            }
        }
    }
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

/* The n slots recvmmsg filled, into the core: misses made whole, copies in one batch demoted,
 * GRO runs walked datagram by datagram, placed payloads passed split. */
void ltp_udp__rx_batch(ltp_udp_t *u, int n, uint64_t now, const struct timespec *real)
{
    /* Every miss is made whole before any datagram reaches the core, which may store into
     * a place another slot was read into. */
    int peers[BATCH], hit[BATCH], any_hit = 0, any_miss = 0;
    for (int i = 0; i < n; i++) {
        peers[i] = ltp_udp__peer_of(u->addrs, u->n_peers, &u->rxaddr[i], u->rxm[i].msg_hdr.msg_namelen);
        hit[i] = u->guessed[i] && guess_hit(u, i, peers[i]);
        if (u->guessed[i]) { if (hit[i]) u->guess_hits++; else u->guess_misses++; }
        if (u->guess_hits + u->guess_misses > 1024) { u->guess_hits /= 2; u->guess_misses /= 2; }
        any_hit |= hit[i];
        any_miss |= !hit[i];
    }
    if (any_hit && any_miss) demote_copies(u, n, peers, hit);
    for (int i = 0; i < n; i++) {
        const uint8_t *b = u->rxbuf + (size_t)i * RX_SLOT_BYTES;
        size_t len = u->rxm[i].msg_len, seg = gro_segment(u, i), off = 0;
        int peer = peers[i];
        uint64_t at = ltp_udp__arrival_us(&u->rxm[i].msg_hdr, now, real);
        if (hit[i]) {
            /* An earlier datagram of this batch may have freed the message (a full table
             * made room for a lower id): its payload went with it. The protocol recovers. */
            if (!ltp_core_rx_guess_holds(u->core, peer, &u->guess[i])) {
                ltp_core__count(u->core, LTP_S_RX_PLACE_LOST, 1);
                continue;
            }
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
}

int ltp_udp__rx_prepare(ltp_udp_t *u) { return guess_places(u); }

int do_rx(ltp_udp_t *u)
{
    int total = 0;
    if (u->errq) drain_errqueue(u);
    for (int round = 0; round < 16; round++) {   /* bounded so sending is never starved */
        int vlen = guess_places(u);
        int n = recvmmsg(u->fd, u->rxm, (unsigned)vlen, MSG_DONTWAIT, NULL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
            if (icmp_errno(errno)) {   /* e.g. a peer not up yet, or gone */
                drain_errqueue(u);
                continue;
            }
            return LTP_ESYS;
        }
        struct timespec real;
        uint64_t now = now_us();
        clock_gettime(CLOCK_REALTIME, &real);
        ltp_udp__rx_batch(u, n, now, &real);
        total += n;
        if (n < vlen) break;
    }
    return total;
}

/* The control messages of sendmmsg message m: UDP_SEGMENT for a GSO run of seg-byte datagrams
 * (run > 1), IP_TOS for a marked segment's DATA (tos != 0); none for a lone unmarked datagram. */
static void set_control(ltp_udp_t *u, int m, int run, uint32_t seg, uint32_t tos)
{
    struct msghdr *mh = &u->txm[m].msg_hdr;
    size_t len = (run > 1 ? CMSG_SPACE(sizeof(uint16_t)) : 0) + (tos ? CMSG_SPACE(sizeof(int)) : 0);
    if (!len) return;
    memset(u->txctl[m].buf, 0, sizeof u->txctl[m].buf);   /* CMSG_NXTHDR reads the next length */
    mh->msg_control = u->txctl[m].buf;
    mh->msg_controllen = len;
    struct cmsghdr *cm = CMSG_FIRSTHDR(mh);
    if (run > 1) {
        cm->cmsg_level = SOL_UDP;
        cm->cmsg_type = UDP_SEGMENT;
        cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t gso_size = (uint16_t)seg;
        memcpy(CMSG_DATA(cm), &gso_size, sizeof gso_size);
        cm = CMSG_NXTHDR(mh, cm);
    }
    if (tos) {
        cm->cmsg_level = IPPROTO_IP;
        cm->cmsg_type = IP_TOS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        int byte = (int)(tos & 0xFFu);
        memcpy(CMSG_DATA(cm), &byte, sizeof byte);
    }
}

/* How many datagrams message m carries (more than one: a GSO run). */
static int msg_datagrams(const ltp_udp_t *u, int m)
{
    return (m + 1 < u->m_n ? u->m_first[m + 1] : u->dg_n) - u->m_first[m];
}

/* Group the batch's unsent datagrams into messages: each datagram alone, or, with GSO, a run of
 * DATA of one size and one mark to one peer (the last may be shorter) as one write that the
 * kernel cuts into those datagrams, each on the wire exactly as if sent alone. */
static void build_msgs(ltp_udp_t *u)
{
    u->m_n = u->m_off = 0;
    for (int i = u->dg_off; i < u->dg_n;) {
        const txdg_t *d = &u->txdg[i];
        uint32_t seg = d->hlen + d->plen + d->tlen;
        int j = i + 1;
        if (u->gso && d->plen) {
            int most = MIN(GSO_MAX_SEGS, (int)(LTP_MAX_DATAGRAM / seg));
            while (j < u->dg_n && j - i < most) {
                const txdg_t *e = &u->txdg[j];
                uint32_t len = e->hlen + e->plen + e->tlen;
                if (!e->plen || e->peer != d->peer || e->tos != d->tos || len > seg) break;
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
        mh->msg_iov = &u->txiov[3 * i];
        mh->msg_iovlen = d->plen ? (size_t)(3 * (j - i)) : 1;
        set_control(u, m, j - i, seg, d->tos);
        u->m_first[m] = i;
        i = j;
    }
}

/* Refill the empty batch from the core: every datagram due now, up to TX_SLOTS datagrams and
 * TX_BATCH_BYTES (TX_SEAL_BATCH_BYTES with auth on, where polling a datagram costs its tag).
 * Payloads stay in the messages being sent (ltp_core_poll_tx_ref); with auth on a DATA's tag,
 * which the core writes behind its header, is sent after the payload. */
static void fill_batch(ltp_udp_t *u)
{
    u->dg_n = u->dg_off = 0;
    uint64_t now = now_us(), bytes = 0, most = u->tag_bytes ? TX_SEAL_BATCH_BYTES : TX_BATCH_BYTES;
    while (u->dg_n < TX_SLOTS && bytes < most) {
        int i = u->dg_n, peer = -1;
        uint8_t *b = u->txbuf + (size_t)i * TX_SLOT_BYTES;
        const uint8_t *payload;
        uint32_t plen;
        int n = ltp_core_poll_tx_ref(u->core, now, b, TX_SLOT_BYTES, &payload, &plen, &peer);
        if (n <= 0) break;
        uint32_t tlen = payload ? u->tag_bytes : 0;
        /* a DATA takes its segment's mark; control packets keep the socket's TOS */
        uint32_t tos = 0;
        if (n >= (int)LTP_DATA_HDR_BYTES && b[WIRE_TYPE] == LTP_T_DATA) {
            uint16_t seg = rd16le(b + WIRE_SEGMENT);
            tos = seg < u->n_seg_tos ? u->seg_tos[seg] : 0;
        }
        u->txdg[i] = (txdg_t){payload, (uint32_t)n, plen, tlen, peer, tos};
        u->txiov[3 * i] = (struct iovec){b, (size_t)n};
        u->txiov[3 * i + 1] = (struct iovec){(void *)(uintptr_t)payload, plen};
        u->txiov[3 * i + 2] = (struct iovec){b + n, tlen};
        u->dg_n++;
        bytes += (uint64_t)n + plen + tlen;
    }
    build_msgs(u);
}

/* The batch's first unsent datagram once messages [0, m_off) went out. */
static void msgs_sent(ltp_udp_t *u) { u->dg_off = u->m_off < u->m_n ? u->m_first[u->m_off] : u->dg_n; }

/* Drop unsent DATA whose payload lies in [data, data + len): that send is finished and about to be
 * released, so its memory may go away (and the receiver needs none of it any more). */
void forget_payload(ltp_udp_t *u, const void *data, size_t len)
{
    const uint8_t *lo = data, *hi = lo + len;
    int k = u->dg_off;
    for (int i = u->dg_off; i < u->dg_n; i++) {
        txdg_t d = u->txdg[i];
        if (d.plen && d.payload >= lo && d.payload < hi) continue;
        if (k != i) {
            uint8_t *to = u->txbuf + (size_t)k * TX_SLOT_BYTES;
            memcpy(to, u->txbuf + (size_t)i * TX_SLOT_BYTES, d.hlen + d.tlen);
            u->txdg[k] = d;
            u->txiov[3 * k] = (struct iovec){to, d.hlen};
            u->txiov[3 * k + 1] = u->txiov[3 * i + 1];
            u->txiov[3 * k + 2] = (struct iovec){to + d.hlen, d.tlen};
        }
        k++;
    }
    if (k == u->dg_n) return;
    u->dg_n = k;
    build_msgs(u);
}

/* Send the pending batch, then refill it from the core while it has datagrams due. Returns the
 * number of datagrams sent, TX_FULL if the socket is full (wait for POLLOUT), TX_REFUSED if the
 * host's own queue refused a datagram (send it again after refused_us), or LTP_ESYS.
 * A message sendmmsg did not take (its first, or the one after those it reports sent) stays in the
 * batch, unsent: a GSO write is one message, so a refused run is kept whole and counted nowhere. */
int do_tx(ltp_udp_t *u)
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
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                ltp_core__count(u->core, LTP_S_TX_EAGAIN, 1);
                return TX_FULL;
            }
            if (errno == ENOBUFS) {
                /* The qdisc of this host's link is full and dropped the datagram (or the GSO run:
                 * the qdisc takes or drops the write whole): keep it and the rest of the batch
                 * and offer it again once some of the queue has drained. POLLOUT would not wait:
                 * the dropped datagrams no longer count against the socket. */
                ltp_core__count(u->core, LTP_S_TX_REFUSED, 1);
                u->refused_us = u->refused_us ? MIN(2 * u->refused_us, REFUSED_MAX_US) : REFUSED_MIN_US;
                return TX_REFUSED;
            }
            if (errno == EINTR) continue;
            if (u->gso && msg_datagrams(u, u->m_off) > 1 &&
                (errno == EIO || errno == EINVAL || errno == EMSGSIZE)) {
                /* The kernel or the device refuses GSO here (or a configured size beyond the path
                 * MTU, which only a lone datagram may exceed, fragmented): datagram by datagram. */
                u->gso = 0;
                build_msgs(u);
                continue;
            }
            if (errno == ECONNREFUSED) {   /* an earlier datagram's ICMP error: this one is unsent */
                u->errq = 1;
                continue;
            }
            if (errno == EHOSTUNREACH || errno == ENETUNREACH || errno == EHOSTDOWN) {
                u->errq = 1;
                u->m_off++;   /* the network lost it; the protocol recovers */
                msgs_sent(u);
                continue;
            }
            return LTP_ESYS;
        }
        u->refused_us = 0;
        for (int k = u->m_off; k < u->m_off + n; k++)
            if (msg_datagrams(u, k) > 1) ltp_core__count(u->core, LTP_S_TX_GSO_RUNS, 1);
        u->m_off += n;
        msgs_sent(u);
        sent += u->dg_off - before;
    }
}
