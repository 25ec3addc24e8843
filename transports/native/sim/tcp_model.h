/* tcp_model.h: the TCP reference of the simulator: a stated model of TCP, not Linux's code.
 *
 * One connection per worker and direction, byte stream cut into 1,448-byte segments (a 1,514-byte
 * frame with timestamps), NewReno congestion control (slow start from an initial window of 10,
 * which it restarts after each idle barrier as Linux's tcp_slow_start_after_idle does; congestion
 * avoidance; fast retransmit on 3 duplicate ACKs and NewReno's partial-ACK recovery, no SACK),
 * Linux's retransmission timer (RTO = srtt + 4 rttvar, at least 200 ms, and 200 ms from the start
 * as after a handshake on a sub-millisecond path; doubling on each expiry, go-back-N after it), and a receiver that ACKs every second
 * segment, at once on a hole or a filled hole, else after 40 ms. Unpaced: a sender sends whenever
 * its window allows, as CUBIC and Reno do. It speaks through sim_net like the LTP core does, so
 * the network is the same. docs/simulation.md says how it compares with the testbed's tcp-cubic.
 */
#ifndef TCP_MODEL_H
#define TCP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "sim_net.h"

typedef struct tcp_ep tcp_ep_t;

tcp_ep_t *tcp_new(int n_peers, uint32_t rto_min_us);
void tcp_free(tcp_ep_t *e);
extern const sim_ops_t TCP_OPS;

/* One message per peer and direction at a time. */
int tcp_send(tcp_ep_t *e, int peer, uint32_t msg, const void *data, uint32_t len, uint64_t now);
int tcp_send_done(const tcp_ep_t *e, int peer, uint32_t msg, uint64_t *retransmits);
int tcp_rx_ready(const tcp_ep_t *e, int peer, uint32_t msg);
/* Messages taken and sends ended so far (the application looks at its peers when this moves). */
uint64_t tcp_progress(const tcp_ep_t *e);

#endif
