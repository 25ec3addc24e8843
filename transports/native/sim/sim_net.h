/* sim_net.h: a seeded discrete-event network of one parameter server and N workers, for driving
 * sans-IO endpoints (the LTP core, or a model of TCP) at scales the emulated testbed cannot reach.
 *
 * The model is the emulated incast of docs/architecture.md, packet by packet:
 *
 *   worker w --[own link: worker_mbps, FIFO of worker_queue_pkts]--> switch
 *   switch   --[bottleneck: bottleneck_mbps, drop-tail queue_pkts, optional token bucket]--> PS
 *   PS       --[own link: ps_mbps, FIFO of ps_queue_pkts, refuses when full (IP_RECVERR)]--> w
 *
 * A datagram occupies a link as an Ethernet frame (datagram + 42 bytes: Ethernet 14, IPv4 20,
 * UDP 8). Loss (uniform, or a per-packet Gilbert-Elliott chain per receiving host, as the
 * testbed's eBPF program) and the one-way delay strike at the receiving host's ingress, after
 * every queue, so a lost frame still used the links. Two optional host effects of a busy
 * machine: every endpoint thread wakes `wake_mean_us` late on average (exponential), and the PS
 * reads its socket once per `rx_poll_us` slot. Virtual time in microseconds; one seed gives one
 * run. Endpoints are scheduled by their own next timeout (a heap entry per endpoint), so an event
 * costs what the endpoints it touches cost, whatever N is.
 */
#ifndef SIM_NET_H
#define SIM_NET_H

#include <stddef.h>
#include <stdint.h>

/* What the network calls on an endpoint (LTP core or a model). */
typedef struct sim_ops {
    int (*input)(void *ep, int slot, const uint8_t *buf, size_t len, uint64_t now_us);
    int (*poll_tx)(void *ep, uint64_t now_us, uint8_t *buf, size_t cap, int *slot);
    uint64_t (*next_timeout)(void *ep, uint64_t now_us);
    /* SIM_PKT_* flags of a datagram, for the counters (DATA, retransmission). */
    int (*classify)(const uint8_t *buf, size_t len);
} sim_ops_t;

enum { SIM_PKT_DATA = 1, SIM_PKT_RTX = 2 };

typedef struct sim_netcfg {
    int n_workers;                 /* node 0 is the PS, node k the worker of rank k-1 */
    double bottleneck_mbps;        /* the switch port toward the PS */
    double worker_mbps;            /* each worker's own link */
    double ps_mbps;                /* the PS's own link (its broadcasts) */
    int queue_pkts;                /* bottleneck drop-tail queue */
    int worker_queue_pkts, ps_queue_pkts;
    double burst_bytes;            /* 0: frame after frame; else HTB-like token bucket allowance */
    uint64_t delay_us;             /* one way, per direction, at the receiver's ingress */
    /* Loss at every host's ingress: a Gilbert-Elliott chain stepped per packet (uniform loss is
     * p_gb = 0 with loss_good = the rate). Probabilities, not percent. */
    double p_gb, p_bg, loss_good, loss_bad;
    uint64_t wake_mean_us, rx_poll_us;
    uint64_t seed;
} sim_netcfg_t;

typedef struct sim_counters {
    uint64_t events, datagrams, delivered, data_sent, rtx_sent[2];   /* [0] by the PS, [1] by workers */
    uint64_t queue_drops, worker_link_drops, ps_refused, random_drops;
    uint64_t data_lost[2];                                /* DATA lost: [0] from PS, [1] from workers */
    uint64_t bottleneck_frames, bottleneck_bytes;         /* through the bottleneck (frames) */
    uint64_t loss_bursts;                                 /* runs of consecutive drops at a host */
    uint64_t ps_datagrams;                                /* datagrams the PS's endpoint took in or gave out */
    uint64_t ps_cpu_ns;                                   /* wall time inside the PS endpoint's calls */
} sim_counters_t;

typedef struct sim sim_t;

/* Why the application hook is called for a node. */
enum { SIM_HOOK_INPUT = 1, SIM_HOOK_RUN = 2, SIM_HOOK_APP = 3 };
/* Called after a datagram from `slot` was input to `node` (SIM_HOOK_INPUT), after a node ran on
 * its own timer (SIM_HOOK_RUN, slot -1), or at the application's timer (SIM_HOOK_APP, node -1).
 * Returns 1 to stop sim_run. */
typedef int (*sim_hook_fn)(sim_t *s, void *arg, int why, int node, int slot);

/* NULL with a message in err (one sentence) on a bad configuration. eps[0..n_workers]. */
sim_t *sim_new(const sim_netcfg_t *cfg, const sim_ops_t *ops, void **eps, char *err, size_t err_len);
void sim_free(sim_t *s);
uint64_t sim_now(const sim_t *s);
/* The application called into node's endpoint: let its thread run now (late, if so configured). */
void sim_kick(sim_t *s, int node);
/* The application's own timer (one; 0 or UINT64_MAX: none). */
void sim_app_timer(sim_t *s, uint64_t at_us);
/* Advance until the hook returns 1 (returns 1) or `limit_us` of virtual time passed (returns 0). */
int sim_run(sim_t *s, uint64_t limit_us, sim_hook_fn hook, void *arg);
const sim_counters_t *sim_counters(const sim_t *s);
/* Datagrams on a link or in a queue now (sent, neither delivered nor dropped). Every datagram
 * sent is delivered, dropped (queue_drops, worker_link_drops, random_drops) or in flight. */
uint64_t sim_in_flight(const sim_t *s);
/* Bytes the network itself holds at its peak (event heap and queues). */
size_t sim_peak_bytes(const sim_t *s);

#endif
