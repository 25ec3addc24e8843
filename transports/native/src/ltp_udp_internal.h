/* ltp_udp_internal.h: the UDP driver's parsing of what the kernel hands it, exported only so the
 * fuzzer (fuzz/fuzz_udp.c) can drive it with arbitrary input. Not API. */
#ifndef LTP_UDP_INTERNAL_H
#define LTP_UDP_INTERNAL_H

#include <stdint.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <time.h>

/* The peer slot of a datagram's source address (alen bytes of it), or -1 if it is none of the n. */
int ltp_udp__peer_of(const struct sockaddr_in *addrs, int n, const struct sockaddr_in *a, socklen_t alen);
/* When the datagram described by mh reached the host: its kernel timestamp (SCM_TIMESTAMPNS,
 * realtime) moved onto the monotonic clock by real, the realtime reading taken with now; now
 * itself when there is no usable stamp. */
uint64_t ltp_udp__arrival_us(struct msghdr *mh, uint64_t now, const struct timespec *real);

#endif
