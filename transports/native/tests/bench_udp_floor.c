/* bench_udp_floor.c: what any transport over UDP pays on loopback at the least, for issue 28's
 * loopback targets (`invoke bench-transport --loopback-only -t udp-floor,tcp-cubic`; the scheme
 * `udp-floor` of harness/bench/loopback.py runs this program). A benchmark, not a test.
 *
 * One process, two threads, as the loopback benchmark's worker and PS: per push the sender hands
 * the message to the kernel in the largest datagrams loopback carries (65,507 bytes), many to a
 * sendmmsg call, and the receiver takes them with recvmmsg straight into the message's place;
 * the push ends when the last byte is there. No header, no MAC, no acknowledgement, no pacing,
 * no loss recovery (a receive buffer that holds a whole message keeps loopback from dropping any;
 * a drop ends the program with an error). What is left is the kernel's path: the system calls
 * and the two copies of every byte (into the kernel, out of it) that a UDP receiver in user space
 * cannot avoid on loopback, where a zero-copy send is copied on delivery.
 *
 * Usage: bench_udp_floor BYTES PUSHES. Prints one line per push: its wall seconds and the
 * process's CPU seconds (both threads, user + system) over it. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

enum { DATAGRAM = 65507, BATCH = 64 };

static size_t n_bytes;
static long n_pushes;
static uint8_t *dst;
static int rx_fd;
static sem_t done;
static volatile int failed;

static double clock_s(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Up to BATCH datagrams' worth of the message from byte `at` on, in place at `base`, as
 * message headers for sendmmsg or recvmmsg; returns how many. */
static int batch(struct mmsghdr *msgs, struct iovec *iov, uint8_t *base, size_t at)
{
    int n = 0;
    for (; n < BATCH && at < n_bytes; n++, at += DATAGRAM) {
        iov[n].iov_base = base + at;
        iov[n].iov_len = n_bytes - at < DATAGRAM ? n_bytes - at : DATAGRAM;
        memset(&msgs[n], 0, sizeof msgs[n]);
        msgs[n].msg_hdr.msg_iov = &iov[n];
        msgs[n].msg_hdr.msg_iovlen = 1;
    }
    return n;
}

static void *receiver(void *arg)
{
    (void)arg;
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    for (long k = 0; k < n_pushes; k++) {
        size_t got = 0;
        while (got < n_bytes) {
            int n = batch(msgs, iov, dst, got);
            int r = recvmmsg(rx_fd, msgs, (unsigned)n, MSG_WAITFORONE, NULL);
            if (r < 0) {   /* the receive timeout: a datagram was lost */
                failed = errno;
                sem_post(&done);
                return NULL;
            }
            for (int i = 0; i < r; i++) got += msgs[i].msg_len;
        }
        sem_post(&done);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3 || atol(argv[1]) <= 0 || atol(argv[2]) <= 0) {
        fprintf(stderr, "usage: bench_udp_floor BYTES PUSHES\n");
        return 2;
    }
    n_bytes = (size_t)atol(argv[1]);
    n_pushes = atol(argv[2]);
    uint8_t *src = malloc(n_bytes);
    dst = malloc(n_bytes);
    if (!src || !dst) return 1;
    memset(src, 1, n_bytes);
    memset(dst, 0, n_bytes);

    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    rx_fd = socket(AF_INET, SOCK_DGRAM, 0);
    int tx_fd = socket(AF_INET, SOCK_DGRAM, 0);
    int room = (int)(2 * n_bytes + (1 << 20));   /* a whole message, with the kernel's overhead */
    struct timeval wait = {.tv_sec = 5};
    if (rx_fd < 0 || tx_fd < 0 ||
        (setsockopt(rx_fd, SOL_SOCKET, SO_RCVBUFFORCE, &room, sizeof room) != 0 &&
         setsockopt(rx_fd, SOL_SOCKET, SO_RCVBUF, &room, sizeof room) != 0) ||
        setsockopt(rx_fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait) != 0 ||
        bind(rx_fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        getsockname(rx_fd, (struct sockaddr *)&addr, &len) != 0 ||
        connect(tx_fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        perror("bench_udp_floor: socket setup");
        return 1;
    }
    sem_init(&done, 0, 0);
    pthread_t thread;
    if (pthread_create(&thread, NULL, receiver, NULL) != 0) return 1;

    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    for (long k = 0; k < n_pushes; k++) {
        double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        for (size_t at = 0; at < n_bytes;) {
            int n = batch(msgs, iov, src, at);
            int r = sendmmsg(tx_fd, msgs, (unsigned)n, 0);
            if (r < 0) {
                if (errno == EINTR || errno == ENOBUFS || errno == EAGAIN) continue;
                perror("bench_udp_floor: sendmmsg");
                return 1;
            }
            for (int i = 0; i < r; i++) at += iov[i].iov_len;
        }
        sem_wait(&done);
        if (failed) {
            fprintf(stderr, "bench_udp_floor: a datagram of push %ld was lost on loopback (%s): "
                            "the receive buffer of %d bytes did not hold the message\n",
                    k, strerror(failed), room);
            return 1;
        }
        printf("%.9f %.9f\n", clock_s(CLOCK_MONOTONIC) - t0,
               clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0);
    }
    pthread_join(thread, NULL);
    close(tx_fd);
    close(rx_fd);
    free(src);
    free(dst);
    return 0;
}
