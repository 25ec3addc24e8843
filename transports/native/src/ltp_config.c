/* ltp_config.c: the option table of ltp_config_t (one row per field: name, type, range, default,
 * unit, help), setting options by name, validation, and the names the core exports (errors,
 * counters, enum values). Bindings and the documentation read these tables through ltp.h; nothing
 * here is restated elsewhere.
 */
#include "ltp_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct { ltp_option_t pub; size_t off; } optdef_t;

#define OPT(f, type, en, lo, hi, def, unit, help) \
    {{#f, type, en, lo, hi, def, unit, help}, offsetof(ltp_config_t, f)}
#define U32(f, lo, hi, def, unit, help) OPT(f, LTP_OPT_U32, -1, lo, hi, def, unit, help)
#define U64(f, lo, hi, def, unit, help) OPT(f, LTP_OPT_U64, -1, lo, hi, def, unit, help)
#define DBL(f, lo, hi, def, unit, help) OPT(f, LTP_OPT_DOUBLE, -1, lo, hi, def, unit, help)
#define BOOL(f, def, help) OPT(f, LTP_OPT_BOOL, -1, 0, 1, def, "", help)
#define ENUM(f, en, hi, def, help) OPT(f, LTP_OPT_ENUM, en, 0, hi, def, "", help)

static const optdef_t OPTS[] = {
    U32(session_id, 0, 4294967295.0, 1, "", "datagrams of another session are dropped and counted"),
    U32(max_udp_payload_bytes, 0, LTP_MAX_DATAGRAM, 0, "bytes",
        "datagram size including the LTP header; 0: the path MTU minus IPv4 and UDP headers "
        "(1472 on Ethernet, 65507 on loopback)"),
    BOOL(udp_gso, 1, "UDP driver: send runs of full datagrams to a peer as one GSO write and read "
         "coalesced ones (GRO); off where the kernel refuses"),
    U32(max_msg_bytes, 4, 2147483648.0, 64u << 20, "bytes", "largest message accepted or sent"),
    U32(max_peers, 1, 65535, 64, "peers", "peer slots of one endpoint"),
    U32(max_open_per_peer, 1, 1024, 4, "messages", "receive contexts per peer (closed ones not yet taken included)"),
    U32(max_tx_per_peer, 1, 1024, 4, "messages", "concurrent sends per peer"),
    U32(closed_ring, 1, 65536, 64, "messages", "recently closed receive keys remembered per peer (late data gets a CLOSE)"),
    ENUM(send_order, LTP_ENUM_ORDER, LTP_ORDER_PRIORITY, LTP_ORDER_PRIORITY,
         "first-pass order: index order, seeded shuffle, or index order with only critical retransmissions first"),
    ENUM(peer_schedule, LTP_ENUM_SCHEDULE, LTP_SCHED_SERIAL, LTP_SCHED_SERIAL,
         "one sender's link among peers: round robin, or one message after another in queueing order"),
    BOOL(shared_link, 1, "with the serial schedule, the sends to all peers share one rate model (one flow over this end's link)"),
    /* The largest double below 2^64, so every accepted value converts to uint64_t. */
    U64(seed, 0, 18446744073709549568.0, 1, "", "seeds the random send order and the bandwidth-probing phase"),
    DBL(threshold_min, 0, 1, 0.80, "fraction", "lowest early-close threshold (received fraction of a message)"),
    DBL(threshold_max, 0, 1, 0.99, "fraction", "highest early-close threshold; equal to threshold_min for a fixed one"),
    DBL(loss_weight, 0, 100, 1.0, "", "weight of the first-pass loss estimate p_hat in the threshold"),
    DBL(rtt_weight, 0, 1, 0.0, "", "weight of srtt / T_pass in the threshold"),
    U32(loss_window, 1, LTP_LOSS_WINDOW_MAX, 8, "messages",
        "p_hat is the least first-pass loss of this many recent messages of a segment from a peer "
        "(until there are that many: of the peer's messages, any segment)"),
    U32(loss_min_packets, 1, 4294967295.0, 2, "packets",
        "a message of fewer packets counts toward its own segment's p_hat only (one packet loses all or nothing)"),
    U32(close_grace_min_us, 0, 60e6, 1000, "us", "least wait after the sender's first pass before an early close"),
    DBL(grace_rtt_mult, 0, 1000, 2.0, "RTTs", "wait after the first pass in sender srtt (at least close_grace_min_us)"),
    U32(max_wait_us, 1, 3600e6, 1000000, "us", "hard cap after the first packet; closes only at threshold_min or above"),
    U32(close_copies, 1, 16, 2, "datagrams", "CLOSE copies sent when a message closes"),
    U32(linger_rtts, 0, 1000, 8, "RTTs", "a closing end leaves once no peer sent anything for this many round trips"),
    U32(linger_min_us, 0, 60e6, 100000, "us", "a closing end stays quiet at least this long (see linger_rtts)"),
    U32(ack_every, 1, 1024, 8, "packets", "an ACK at least every this many DATA packets"),
    U32(ack_delay_us, 0, 1e6, 200, "us",
        "longest an ACK waits for more DATA (a sender believes an ACK's ack_delay up to this; with "
        "timer_floors_host an ACK waits a quarter of the sender's srtt, within the host's floor and this)"),
    U32(reorder_window_min_us, 0, 1e6, 100, "us",
        "least reordering window of RACK (else min RTT / 4; with timer_floors_host: at most this)"),
    U32(pto_min_us, 10, 10e6, 500, "us", "least probe timeout (with timer_floors_host: at most this)"),
    BOOL(timer_floors_host, 1,
         "the probe timeout's and RACK's floors and the ACK delay follow how late this host runs its "
         "timers (measured), between timer_floor_min_us and the fixed values; off: the fixed values"),
    U32(timer_floor_min_us, 1, 1e6, 10, "us", "least floor and ACK delay with timer_floors_host"),
    U32(timer_slack_window_us, 1000, 3600e6, 1000000, "us",
        "with timer_floors_host: the host's timer slack is the largest lateness measured over this long"),
    U32(pto_max_backoff, 0, 16, 6, "doublings", "the probe timeout doubles at most this many times"),
    U32(initial_rtt_us, 1, 10e6, 1000, "us", "RTT assumed before the first sample"),
    U32(hello_interval_us, 100, 10e6, 20000, "us", "HELLO repeat interval while joining"),
    BOOL(cc, 1, "BBR-like congestion control; off: pacing at fixed_rate_mbps"),
    DBL(fixed_rate_mbps, 0, 1e6, 0, "Mbit/s", "pacing rate with cc off (0: unpaced)"),
    U32(init_cwnd_pkts, 2, 65536, 32, "packets", "initial congestion window"),
    U32(cwnd_ack_extra_us, 0, 1e6, 2000, "us", "window allowance for late ACKs: this long at the estimated rate"),
    U32(min_cwnd_pkts, 1, 65536, 4, "packets", "smallest congestion window"),
    U32(pacing_quantum_us, 1, 1e6, 500, "us", "burst allowance: this long at the pacing rate"),
    U32(pacing_quantum_min_pkts, 1, 1024, 2, "packets", "smallest burst allowance"),
    U32(pacing_quantum_max_pkts, 1, 1024, 32, "packets", "largest burst allowance"),
    U32(link_catchup_us, 0, 1e6, 1000, "us", "the serial schedule's link (shared_link) keeps pacing tokens this long: a late thread catches up"),
    U32(bw_window_rounds, 1, 1000, 10, "round trips", "bottleneck bandwidth is the largest sample over this many rounds"),
    U32(min_rtt_window_us, 1000, 3600e6, 10000000, "us", "min RTT is the least sample over this long"),
    BOOL(rate_hint, 1, "receiver-driven fair share on incast: send hints in ACKs and obey received ones"),
    DBL(hint_gain, 0.5, 4, 1.10, "", "a hinted share is capacity x hint_gain / active senders"),
    U32(hint_window_min_us, 100, 1e6, 100, "us", "capacity sample window: at least this and the largest peer srtt"),
    U32(hint_bw_window_us, 1000, 3600e6, 10000000, "us", "capacity is the largest sample over this long"),
    U32(hint_ttl_rtts, 1, 1000, 4, "RTTs", "a received hint is obeyed this many srtt (see hint_ttl_min_us)"),
    U32(hint_ttl_min_us, 0, 10e6, 2000, "us", "a received hint is obeyed at least this long (and 8 packets' time)"),
    U32(hint_drain_us, 100, 10e6, 10000, "us", "a standing queue of q us lowers the gain by q / this"),
    U32(hint_sample_pkts, 1, 1e6, 256, "packets", "a capacity sample spans at least this many packets"),
    U32(hint_catchup_us, 0, 1e6, 4000, "us", "a hinted sender's token bucket holds this long at the hint"),
    BOOL(auth, 1, "number every datagram and tag it under its pair's key (by mac)"),
    U32(rx_msg_window, 1, 2147483648.0, 64, "messages",
        "new message ids are accepted at most this far past the last one taken"),
    U32(rx_first_msg_id, 0, 4294967295.0, 0, "", "first message id accepted before any message was taken"),
    U32(rx_idle_evict_us, 1000, 3600e6, 5000000, "us", "an open receive context that heard nothing this long gives way to a new key when the table is full"),
    DBL(hint_min_mbps, 0, 1e6, 0.1, "Mbit/s", "a received rate hint below this is raised to it"),
    DBL(hint_max_mbps, 0.001, 1e9, 10000, "Mbit/s", "a received rate hint above this is lowered to it"),
    U32(hint_ttl_max_us, 1000, 60e6, 200000, "us", "a received rate hint is obeyed at most this long"),
    U32(replay_window, 64, 65536, 4096, "datagrams",
        "auth on: a datagram whose number this peer sent before, or sent this many numbers before its "
        "newest, is refused as a replay"),
    ENUM(mac, LTP_ENUM_MAC, LTP_MAC_ALG_GMAC128, LTP_MAC_ALG_GMAC128,
         "auth on: the tag's algorithm, SipHash-2-4 or AES-128-GMAC; both ends must agree"),
};
#define N_OPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

int ltp_option_count(void) { return N_OPTS; }
const ltp_option_t *ltp_option(int i) { return (i >= 0 && i < N_OPTS) ? &OPTS[i].pub : NULL; }

static void store(ltp_config_t *c, const optdef_t *o, double v)
{
    char *p = (char *)c + o->off;
    if (o->pub.type == LTP_OPT_U64) *(uint64_t *)p = (uint64_t)v;
    else if (o->pub.type == LTP_OPT_DOUBLE) *(double *)p = v;
    else *(uint32_t *)p = (uint32_t)v;
}

static double load(const ltp_config_t *c, const optdef_t *o)
{
    const char *p = (const char *)c + o->off;
    if (o->pub.type == LTP_OPT_U64) return (double)*(const uint64_t *)p;
    if (o->pub.type == LTP_OPT_DOUBLE) return *(const double *)p;
    return *(const uint32_t *)p;
}

size_t ltp_config_size(void) { return sizeof(ltp_config_t); }

void ltp_config_default(ltp_config_t *c)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < N_OPTS; i++) store(c, &OPTS[i], OPTS[i].pub.default_value);
}

int ltp_config_set(ltp_config_t *c, const char *name, double v)
{
    if (!c || !name) return LTP_EINVAL;
    for (int i = 0; i < N_OPTS; i++) {
        const optdef_t *o = &OPTS[i];
        if (strcmp(o->pub.name, name) != 0) continue;
        if (!(v >= o->pub.min && v <= o->pub.max)) return LTP_EOPTION;   /* also rejects NaN */
        if (o->pub.type != LTP_OPT_DOUBLE && v != floor(v)) return LTP_EOPTION;
        store(c, o, v);
        return LTP_OK;
    }
    return LTP_EOPTION;
}

uint32_t ltp_chunk_bytes(const ltp_config_t *c)
{
    /* a configured 0 is the Ethernet datagram until a driver sets it from the path MTU */
    size_t d = c->max_udp_payload_bytes ? c->max_udp_payload_bytes : LTP_ETH_DATAGRAM;
    size_t room = LTP_DATA_HDR_BYTES + auth_trailer(c);
    if (d < room + 4) return 0;
    return (uint32_t)((d - room) & ~(size_t)3);
}

/* Why c is not a valid configuration, or NULL: every field within its table range, then the
 * rules that tie fields together. `scratch` holds a range message. */
static const char *problem(const ltp_config_t *c, char *scratch, size_t n)
{
    if (!c) return "no configuration was given";
    for (int i = 0; i < N_OPTS; i++) {
        const ltp_option_t *o = &OPTS[i].pub;
        double v = load(c, &OPTS[i]);
        if (v >= o->min && v <= o->max) continue;
        snprintf(scratch, n, "%s must be from %.17g to %.17g", o->name, o->min, o->max);
        return scratch;
    }
    if (c->max_udp_payload_bytes && c->max_udp_payload_bytes < LTP_DATA_HDR_BYTES + 4)
        return "max_udp_payload_bytes must be 0 (the path MTU) or from 56 to 65507";
    if (c->threshold_min > c->threshold_max)
        return "threshold_min must not exceed threshold_max (set them equal for a fixed threshold)";
    if (c->pacing_quantum_min_pkts > c->pacing_quantum_max_pkts)
        return "pacing_quantum_min_pkts must not exceed pacing_quantum_max_pkts";
    if (c->max_msg_bytes % 4) return "max_msg_bytes must be a multiple of 4";
    if (c->auth && c->max_udp_payload_bytes && c->max_udp_payload_bytes < LTP_DATA_HDR_BYTES + 4 + LTP_TRAILER_BYTES)
        return "max_udp_payload_bytes must be 0 (the path MTU) or leave room for the trailer with auth on (at least 72)";
    if (c->hint_min_mbps > c->hint_max_mbps) return "hint_min_mbps must not exceed hint_max_mbps";
    return NULL;
}

int ltp_config_explain(const ltp_config_t *c, char *buf, size_t cap)
{
    char scratch[160];
    const char *why = problem(c, scratch, sizeof scratch);
    if (!why) return LTP_OK;
    if (buf && cap) snprintf(buf, cap, "%s", why);
    return LTP_EOPTION;
}

int ltp_config_validate(const ltp_config_t *c) { return ltp_config_explain(c, NULL, 0); }

const char *ltp_strerror(int code)
{
    switch (code) {
    case LTP_OK: return "ok";
    case LTP_EINVAL: return "an argument was invalid";
    case LTP_ENOMEM: return "the native core ran out of memory";
    case LTP_ETIMEDOUT: return "the deadline passed before the peer finished";
    case LTP_ESYS: return "a socket call failed";
    case LTP_EFULL: return "a bounded table (peers or open messages) is full";
    case LTP_ENOTFOUND: return "no such peer or message";
    case LTP_EBUSY: return "a message with that id is already being sent";
    case LTP_EMALFORMED: return "a datagram was malformed";
    case LTP_EPEER: return "a datagram came from an unknown peer";
    case LTP_ESESSION: return "a datagram carried another session id";
    case LTP_ESTALE: return "the message is stale";
    case LTP_EOPTION: return "an option name or value was rejected";
    case LTP_EDROPPED: return "a datagram was dropped";
    case LTP_EAUTH: return "a datagram failed authentication";
    case LTP_EREJECTED: return "a datagram was refused as not what this endpoint expects or sent";
    default: return "unknown error code";
    }
}

static const char *const STAT_NAMES[] = {
    "rx_datagrams", "tx_datagrams", "rx_bytes", "tx_bytes", "malformed", "unknown_peer",
    "wrong_session", "stale", "rx_table_full", "duplicates", "late_data", "close_resent",
    "data_sent", "retransmits", "probes", "lost_detected", "acks_sent", "acks_received",
    "stray_control", "close_complete", "close_early", "close_max_wait", "close_stale",
    "sends_closed", "sends_all_acked", "sends_cancelled", "rx_dropped_hook", "tx_eagain",
    "acks_hinted", "hints_received", "tx_gso_runs", "rx_gro_runs",
    "rx_placed", "rx_place_lost",
    "bad_mac", "bad_shape", "out_of_window", "rx_evicted", "dup_conflict",
    "bad_echo", "bad_close", "hints_clamped", "sends_stale", "close_ring_full",
    "tx_refused", "icmp_errors", "sends_suspended", "sends_resumed", "replayed",
};
_Static_assert(sizeof STAT_NAMES / sizeof STAT_NAMES[0] == LTP_S__COUNT, "one name per counter");
const char *ltp_stat_name(int i) { return (i >= 0 && i < LTP_S__COUNT) ? STAT_NAMES[i] : NULL; }
int ltp_stat_count(void) { return LTP_S__COUNT; }

int ltp_stat_kind(int i)
{
    switch (i) {
    case LTP_S_MALFORMED: case LTP_S_UNKNOWN_PEER: case LTP_S_WRONG_SESSION: case LTP_S_BAD_MAC:
    case LTP_S_BAD_SHAPE: case LTP_S_OUT_OF_WINDOW: case LTP_S_RX_EVICTED: case LTP_S_DUP_CONFLICT:
    case LTP_S_BAD_ECHO: case LTP_S_BAD_CLOSE: case LTP_S_HINTS_CLAMPED: case LTP_S_REPLAYED:
        return LTP_STAT_REJECT;
    default:
        return (i >= 0 && i < LTP_S__COUNT) ? LTP_STAT_TRAFFIC : -1;
    }
}

/* Value names of the exported enums, indexed by value (each enum starts at 0 and has no gaps). */
static const char *const ORDER_NAMES[] = {"sequential", "random", "priority"};
static const char *const SCHEDULE_NAMES[] = {"fair", "serial"};
static const char *const CLOSE_NAMES[] = {"none", "complete", "early", "max_wait", "stale", "abandoned"};
static const char *const DONE_NAMES[] = {"pending", "closed", "all_acked", "stale"};
static const char *const MAC_NAMES[] = {"siphash24", "gmac128"};
#define N_NAMES(a) ((int)(sizeof a / sizeof a[0]))
_Static_assert(N_NAMES(ORDER_NAMES) == LTP_ORDER_PRIORITY + 1, "enum ltp_order names");
_Static_assert(N_NAMES(SCHEDULE_NAMES) == LTP_SCHED_SERIAL + 1, "enum ltp_schedule names");
_Static_assert(N_NAMES(CLOSE_NAMES) == LTP_CLOSE_ABANDONED + 1, "enum ltp_close_reason names");
_Static_assert(N_NAMES(DONE_NAMES) == LTP_SEND_STALE + 1, "enum ltp_send_done names");
_Static_assert(N_NAMES(MAC_NAMES) == LTP_MAC_ALG_GMAC128 + 1, "enum ltp_mac names");

const char *ltp_enum_name(int enum_id, int value)
{
    const char *const *names;
    int n;
    switch (enum_id) {
    case LTP_ENUM_ORDER: names = ORDER_NAMES; n = N_NAMES(ORDER_NAMES); break;
    case LTP_ENUM_SCHEDULE: names = SCHEDULE_NAMES; n = N_NAMES(SCHEDULE_NAMES); break;
    case LTP_ENUM_CLOSE_REASON: names = CLOSE_NAMES; n = N_NAMES(CLOSE_NAMES); break;
    case LTP_ENUM_SEND_DONE: names = DONE_NAMES; n = N_NAMES(DONE_NAMES); break;
    case LTP_ENUM_MAC: names = MAC_NAMES; n = N_NAMES(MAC_NAMES); break;
    default: return NULL;
    }
    return (value >= 0 && value < n) ? names[value] : NULL;
}
