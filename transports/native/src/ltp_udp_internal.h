/* ltp_udp_internal.h: what the two files of the UDP driver share: the endpoint's state and the
 * batched datagram I/O that the event loop calls.
 *   ltp_udp.c     socket setup, the progress thread and its event loop, the blocking API
 *   ltp_udp_io.c  moving datagrams: sendmmsg batches (payloads by reference, GSO runs) and
 *                 recvmmsg batches (GRO runs, payloads read into their guessed places)
 * Not part of the sans-IO core; nothing here is public API.
 */
#ifndef LTP_UDP_INTERNAL_H
#define LTP_UDP_INTERNAL_H

#include "ltp_internal.h"

#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>

#define BATCH 64              /* datagrams (or GRO runs of them) per recvmmsg */
#define RX_SLOT_BYTES 65536u  /* a datagram or a GRO run of them: at most 64 KiB */
#define TX_SLOTS 512          /* datagrams in one send batch */
#define TX_BATCH_BYTES (4u << 20)   /* ... and at most this many bytes */
/* ... with auth on: every datagram of a batch is sealed (its tag computed over all its bytes)
 * before the first one leaves, so a large batch keeps the receiver idle at the start and leaves
 * it a backlog at the end. 64 KiB: a loopback datagram leaves as soon as it is sealed (a
 * syscall costs far less than sealing 64 KB); Ethernet-sized ones still fill a GSO run. */
#define TX_SEAL_BATCH_BYTES (64u << 10)
#define GSO_MAX_SEGS 64       /* UDP_MAX_SEGMENTS of kernels before 6.10 */
#define RX_GUESS_MIN_BYTES 4096u   /* payloads this large are read straight into their place */
#define TX_SLOT_BYTES LTP_ETH_DATAGRAM   /* a DATA header or a control packet (ACK bitmaps fit) */
#define SOCK_BUF_BYTES (8 << 20)
#define TIMER_SLACK_NS 1000ul
#define IDLE_FLOOR_US 50   /* a loop turn that moved nothing never sleeps less than this */
#define IDLE_MAX_US 1000000u   /* with no timer pending, the thread still wakes once a second */
#define TX_FULL (1 << 30)      /* do_tx: the socket buffer is full, wait for POLLOUT */
#define TX_REFUSED (1 << 29)   /* do_tx: the local queue refused a datagram, try again shortly */
#define REFUSED_MIN_US 100     /* first retry after ENOBUFS; doubles up to ... */
#define REFUSED_MAX_US 2000

/* One datagram of the send batch: its first hlen bytes in its txbuf slot (a DATA's header, or a
 * control packet whole), then plen payload bytes referenced in the message being sent, then a
 * DATA's tlen-byte MAC tag (auth on), which the slot holds right after the header; tos is its
 * segment's mark (LTP_TOS_MARK | byte), 0 for the socket's TOS. */
typedef struct {
    const uint8_t *payload;
    uint32_t hlen, plen, tlen;
    int peer;
    uint32_t tos;
} txdg_t;

struct ltp_udp {
    ltp_core_t *core;
    int fd;
    int path_dgram;           /* datagram size from the path MTU (configured 0) */
    int gso, gro;             /* UDP GSO writes in use; the socket reads GRO runs */
    uint32_t tag_bytes;       /* the MAC tag every datagram ends with (auth on), else 0 */
    struct sockaddr_in *addrs;
    int n_peers, max_peers;
    double drop_frac;
    uint64_t drop_rng;
    uint16_t *seg_tos;        /* per segment: the mark of its DATA (ltp_send_req_t.tos), 0 none */
    uint32_t n_seg_tos;
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
    struct iovec txiov[3 * TX_SLOTS];   /* datagram i: header 3i, payload 3i+1, tag 3i+2 */
    struct sockaddr_in txaddr[TX_SLOTS];
    /* per message: UDP_SEGMENT (a GSO run) and IP_TOS (a marked segment's DATA) */
    union { struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(uint16_t)) + CMSG_SPACE(sizeof(int))]; } txctl[TX_SLOTS];
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
    int errq;                 /* the socket's error queue has ICMP reports to read */
    uint32_t refused_us;      /* current wait before sending again after ENOBUFS */
};

static inline uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ltp_udp_io.c: parsing what the kernel hands the driver, exported so that the fuzzer
 * (fuzz/fuzz_udp.c) can drive it with arbitrary input. */
/* The peer slot of a datagram's source address (alen bytes of it), or -1 if it is none of the n. */
int ltp_udp__peer_of(const struct sockaddr_in *addrs, int n, const struct sockaddr_in *a, socklen_t alen);
/* When the datagram described by mh reached the host: its kernel timestamp (SCM_TIMESTAMPNS,
 * realtime) moved onto the monotonic clock by real, the realtime reading taken with now; now
 * itself when there is no usable stamp. */
uint64_t ltp_udp__arrival_us(struct msghdr *mh, uint64_t now, const struct timespec *real);

/* The receive batch in two steps, as do_rx runs them around its recvmmsg (and the fuzzer,
 * fuzz/fuzz_rx.c, around slots it fills itself): point the slots at guessed places and return
 * how many the next read may fill; then take the n slots read into the core. */
int ltp_udp__rx_prepare(ltp_udp_t *u);
void ltp_udp__rx_batch(ltp_udp_t *u, int n, uint64_t now, const struct timespec *real);

/* ltp_udp_io.c; each runs with the endpoint's mutex held. */
int do_rx(ltp_udp_t *u);   /* drain the socket into the core: slots read, or LTP_ESYS */
/* send the pending batch, refill it from the core while datagrams are due: datagrams sent,
 * TX_FULL if the socket is full (wait for POLLOUT), TX_REFUSED if the host's own queue refused a
 * datagram (send it again after refused_us), or LTP_ESYS */
int do_tx(ltp_udp_t *u);
void forget_payload(ltp_udp_t *u, const void *data, size_t len);   /* a send is released */

#endif
