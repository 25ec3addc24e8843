/* ltp.h: Loss-tolerant Transmission Protocol (LTP), public C API.
 *
 * Two layers share this header:
 *   - ltp_core_*: the sans-IO protocol core. It never opens a socket and never reads a clock; the
 *     caller feeds datagrams in (ltp_core_input), pulls datagrams out (ltp_core_poll_tx), passes
 *     the current time in microseconds to every call, and sleeps until ltp_core_next_timeout.
 *   - ltp_udp_*: a UDP driver around one core (socket, clock, sendmmsg/recvmmsg, ppoll pacing).
 *     A progress thread per endpoint runs the event loop while the endpoint is open; every
 *     blocking call registers its requests and waits until they are done or its deadline passes.
 *
 * Wire format, state machines and defaults: docs/ltp-protocol.md. Handles are opaque and owned
 * by one thread at a time. Every function that can fail returns 0 (or a count) on success and a
 * negative LTP_E* code on failure.
 */
#ifndef LTP_H
#define LTP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LTP_VERSION 5               /* 2: ACKs carry a rate hint; 3: MAC trailer, CLOSE echo, HELLO nonce;
                                       4: per-pair keys, a datagram number in the trailer;
                                       5: DATA says how many older messages are still open */
#define LTP_MAGIC 0x504Cu           /* "LP" in little-endian byte order */
#define LTP_HDR_BYTES 20u           /* common header of every packet */
#define LTP_DATA_HDR_BYTES 52u      /* common header + DATA fields */
#define LTP_ACK_HDR_BYTES 48u       /* common header + ACK fields, bitmap follows */
#define LTP_CLOSE_BYTES 40u         /* 3: carries the echo of the DATA it answers */
#define LTP_MAC_BYTES 8u            /* MAC tag at the end of every datagram with auth on */
#define LTP_PSEQ_BYTES 8u           /* the datagram's number, before the tag (auth on) */
#define LTP_TRAILER_BYTES 16u       /* what every datagram ends with, auth on: number, then tag */
#define LTP_KEY_BYTES 16u           /* a pair's MAC key */
#define LTP_RANK_SERVER 0xFFFFu     /* the parameter server's rank on the wire */
#define LTP_MAX_DATAGRAM 65507u     /* largest UDP payload over IPv4 */
#define LTP_ETH_DATAGRAM 1472u      /* a 1500-byte MTU minus IPv4 and UDP headers */
#define LTP_LOSS_WINDOW_MAX 64      /* largest loss_window */

enum ltp_type { LTP_T_DATA = 1, LTP_T_ACK = 2, LTP_T_CLOSE = 3, LTP_T_HELLO = 4,
                LTP_T_HELLO_ACK = 5 };

enum ltp_flag { LTP_F_CRITICAL = 0x01, LTP_F_RETRANSMIT = 0x02, LTP_F_PASS_DONE = 0x04,
                LTP_F_PROBE = 0x08 };

enum ltp_err {
    LTP_OK = 0,
    LTP_EINVAL = -1,       /* bad argument */
    LTP_ENOMEM = -2,
    LTP_ETIMEDOUT = -3,    /* the deadline passed before the request completed */
    LTP_ESYS = -4,         /* an OS call failed; errno holds the reason */
    LTP_EFULL = -5,        /* a bounded table (peers, open messages) is full */
    LTP_ENOTFOUND = -6,    /* no such peer or message */
    LTP_EBUSY = -7,        /* a message with that key is already being sent */
    LTP_EMALFORMED = -8,   /* the datagram failed validation */
    LTP_EPEER = -9,        /* the datagram came from an unknown peer */
    LTP_ESESSION = -10,    /* the datagram carried another session id */
    LTP_ESTALE = -11,      /* the datagram belongs to a message the application discarded */
    LTP_EOPTION = -12,     /* unknown configuration name or value out of range */
    LTP_EDROPPED = -13,    /* valid but dropped (receive table full, duplicate control) */
    LTP_EAUTH = -14,       /* the datagram's MAC is missing or wrong; no key for that peer yet */
    LTP_EREJECTED = -15,   /* well-formed but refused: not what this endpoint expects or sent,
                              or (auth on) a datagram number already seen */
};

/* Why a receive context closed (also reported to the sender in CLOSE). */
enum ltp_close_reason { LTP_CLOSE_NONE = 0, LTP_CLOSE_COMPLETE = 1, LTP_CLOSE_EARLY = 2,
                        LTP_CLOSE_MAX_WAIT = 3, LTP_CLOSE_STALE = 4,
                        /* never sent: the sender finished with a message none of whose DATA
                           arrived (its later DATA said so); taken empty */
                        LTP_CLOSE_ABANDONED = 5 };

/* How a send completed. STALE: the receiver refused it (it had moved past the message); not a
 * success, ltp_udp_send reports LTP_ESTALE for it. */
enum ltp_send_done { LTP_SEND_PENDING = 0, LTP_SEND_CLOSED = 1, LTP_SEND_ALL_ACKED = 2,
                     LTP_SEND_STALE = 3 };

enum ltp_order { LTP_ORDER_SEQUENTIAL = 0, LTP_ORDER_RANDOM = 1, LTP_ORDER_PRIORITY = 2 };

/* How the link is shared among the messages queued to different peers (one-to-many sends).
 * FAIR: round robin over peers, each at its own pacing rate. SERIAL: the message queued first
 * has the link at its peer's pacing rate; a later one sends only while every earlier one is
 * window-limited or has nothing left to send, so a broadcast reaches its peers one after another
 * and the first can answer while the last still receives. */
enum ltp_schedule { LTP_SCHED_FAIR = 0, LTP_SCHED_SERIAL = 1 };

/* The MAC of every datagram with auth on (docs/ltp-protocol.md §11): SipHash-2-4, or AES-128-GMAC
 * (GCM over the datagram as additional data, libcrypto). Both ends of a run must use the same. */
enum ltp_mac { LTP_MAC_ALG_SIPHASH24 = 0, LTP_MAC_ALG_GMAC128 = 1 };

/* Every tunable of one endpoint. Fill with ltp_config_default, change fields (or set them by name
 * with ltp_config_set), then pass to ltp_core_new / ltp_udp_open, which copy it. */
typedef struct ltp_config {
    uint32_t session_id;
    uint32_t max_udp_payload_bytes;   /* datagram size incl. LTP header; 0: from the path MTU */
    uint32_t udp_gso;                 /* driver: 1 = UDP GSO writes and GRO reads where they work */
    uint32_t max_msg_bytes;           /* largest message accepted or sent */
    uint32_t max_peers;
    uint32_t max_open_per_peer;       /* receive contexts per peer (incl. closed, untaken) */
    uint32_t max_tx_per_peer;         /* concurrent sends per peer */
    uint32_t closed_ring;             /* recently closed keys remembered per peer */
    uint32_t send_order;              /* enum ltp_order */
    uint32_t peer_schedule;           /* enum ltp_schedule */
    uint32_t shared_link;             /* serial: one rate model for the sends to every peer */
    uint64_t seed;
    /* early close */
    double threshold_min;
    double threshold_max;
    double loss_weight;
    double rtt_weight;
    uint32_t loss_window;             /* p_hat: least first-pass loss of this many recent messages */
    uint32_t loss_min_packets;        /* a smaller message counts toward its own segment's p_hat only */
    uint32_t close_grace_min_us;
    double grace_rtt_mult;
    uint32_t max_wait_us;
    uint32_t close_copies;            /* CLOSE datagrams sent when a message closes */
    uint32_t linger_rtts;             /* closing: quiet this many RTTs before leaving ... */
    uint32_t linger_min_us;           /* ... and at least this long */
    /* acknowledgements */
    uint32_t ack_every;
    uint32_t ack_delay_us;
    /* loss recovery */
    uint32_t reorder_window_min_us;
    uint32_t pto_min_us;
    uint32_t timer_floors_host;       /* 1: the floors above follow the host's measured timer slack */
    uint32_t timer_floor_min_us;      /* ... never below this */
    uint32_t timer_slack_window_us;   /* the host's slack: its largest lateness over this long */
    uint32_t pto_max_backoff;         /* PTO doubles at most this many times */
    uint32_t initial_rtt_us;
    uint32_t hello_interval_us;
    /* congestion control */
    uint32_t cc;                      /* 1 = BBR-like, 0 = fixed rate */
    double fixed_rate_mbps;           /* pacing rate with cc off; 0 = unpaced */
    uint32_t init_cwnd_pkts;
    uint32_t cwnd_ack_extra_us;       /* window allowance for late ACKs: this long at the estimated rate */
    uint32_t min_cwnd_pkts;
    uint32_t pacing_quantum_us;       /* burst allowance: this many microseconds at pacing rate */
    uint32_t pacing_quantum_min_pkts;
    uint32_t pacing_quantum_max_pkts;
    uint32_t link_catchup_us;         /* the serial schedule's link: tokens for this long */
    uint32_t bw_window_rounds;
    uint32_t min_rtt_window_us;
    /* receiver-driven fair-share rate hint (incast); rate_hint = 0 is the plain BBR-like CC */
    uint32_t rate_hint;               /* 1: send hints in ACKs and obey received ones */
    double hint_gain;                 /* share = capacity x hint_gain / active senders */
    uint32_t hint_window_min_us;      /* capacity sample window: max(this, largest peer srtt) */
    uint32_t hint_bw_window_us;       /* capacity = max of the samples over this long */
    uint32_t hint_ttl_rtts;           /* a received hint is obeyed this many srtt ... */
    uint32_t hint_ttl_min_us;         /* ... and at least this long (and 8 packets' time) */
    uint32_t hint_drain_us;           /* a standing queue of q us lowers the gain by q / this */
    uint32_t hint_sample_pkts;        /* a capacity sample spans at least this many packets */
    uint32_t hint_catchup_us;         /* a hinted sender's token bucket holds this long at the hint */
    /* trusting nothing on the wire (docs/ltp-protocol.md §11) */
    uint32_t auth;                    /* 1: every datagram is numbered and tagged (ltp_core_set_peer_key) */
    uint32_t rx_msg_window;           /* new message ids accepted this far past the last taken one */
    uint32_t rx_first_msg_id;         /* where that window starts before any message was taken */
    uint32_t rx_idle_evict_us;        /* an open receive context that heard nothing this long is evicted */
    double hint_min_mbps;             /* a received hint below this is raised to it */
    double hint_max_mbps;             /* a received hint above this is lowered to it */
    uint32_t hint_ttl_max_us;         /* a received hint is obeyed at most this long */
    uint32_t replay_window;           /* auth on: datagram numbers remembered per peer */
    uint32_t mac;                     /* auth on: enum ltp_mac, the tag's algorithm */
} ltp_config_t;

/* Per-message receive statistics, filled by ltp_core_rx_take. */
typedef struct ltp_msg_stats {
    uint64_t packets;          /* distinct packets received */
    uint64_t count;            /* packets in the message */
    uint64_t duplicates;
    uint64_t retransmits;      /* packets that arrived flagged as retransmissions */
    uint64_t critical_count;
    uint64_t received_bytes;
    uint64_t total_bytes;
    uint64_t close_reason;     /* enum ltp_close_reason */
    uint64_t early_closed;     /* 1 if closed before every packet arrived */
    uint64_t elapsed_us;       /* first packet to close */
    uint64_t pass_us;          /* first packet to end of the sender's first pass (0: unseen) */
    double threshold_frac;     /* threshold in force when it closed */
    double peer_srtt_us;
    uint64_t conflicts;        /* packets whose copies disagreed: delivered as missing */
} ltp_msg_stats_t;

/* Per-message send statistics. */
typedef struct ltp_send_stats {
    uint64_t packets;          /* first-pass packets sent */
    uint64_t retransmits;
    uint64_t wire_bytes;       /* every DATA datagram incl. headers */
    uint64_t acked_packets;
    uint64_t count;
    uint64_t done;             /* enum ltp_send_done */
    uint64_t peer_received;    /* packets the receiver reported in CLOSE */
    uint64_t elapsed_us;
    double srtt_us;
    double pacing_rate_mbps;
    double btl_bw_mbps;
    uint64_t wait_us;          /* from the send call to its first DATA (a serial schedule queues it) */
    uint64_t first_pass_us;    /* from the send call to its last first-pass DATA (0: not yet) */
    uint64_t max_gap_us;       /* longest pause between two of its DATA datagrams */
    uint64_t probes;           /* probe timeouts that fired (section 4 of docs/ltp-protocol.md) */
} ltp_send_stats_t;

/* Cumulative counters of an endpoint; names from ltp_stat_name. */
enum ltp_stat {
    LTP_S_RX_DATAGRAMS, LTP_S_TX_DATAGRAMS, LTP_S_RX_BYTES, LTP_S_TX_BYTES,
    LTP_S_MALFORMED, LTP_S_UNKNOWN_PEER, LTP_S_WRONG_SESSION, LTP_S_STALE,
    LTP_S_RX_TABLE_FULL, LTP_S_DUPLICATES, LTP_S_LATE_DATA, LTP_S_CLOSE_RESENT,
    LTP_S_DATA_SENT, LTP_S_RETRANSMITS, LTP_S_PROBES, LTP_S_LOST_DETECTED,
    LTP_S_ACKS_SENT, LTP_S_ACKS_RECEIVED, LTP_S_STRAY_CONTROL,
    LTP_S_CLOSE_COMPLETE, LTP_S_CLOSE_EARLY, LTP_S_CLOSE_MAX_WAIT, LTP_S_CLOSE_STALE,
    LTP_S_SENDS_CLOSED, LTP_S_SENDS_ALL_ACKED, LTP_S_SENDS_CANCELLED,
    LTP_S_RX_DROPPED_HOOK, LTP_S_TX_EAGAIN,
    LTP_S_ACKS_HINTED, LTP_S_HINTS_RECEIVED,
    LTP_S_TX_GSO_RUNS, LTP_S_RX_GRO_RUNS,   /* UDP driver: writes / reads of 2+ datagrams */
    LTP_S_RX_PLACED,                        /* UDP driver: DATA read straight into place */
    LTP_S_RX_PLACE_LOST,                    /* ... into a place its message no longer had */
    LTP_S_BAD_MAC, LTP_S_BAD_SHAPE, LTP_S_OUT_OF_WINDOW, LTP_S_RX_EVICTED, LTP_S_DUP_CONFLICT,
    LTP_S_BAD_ECHO, LTP_S_BAD_CLOSE, LTP_S_HINTS_CLAMPED, LTP_S_SENDS_STALE, LTP_S_CLOSE_RING_FULL,
    LTP_S_TX_REFUSED, LTP_S_ICMP_ERRORS,
    LTP_S_SENDS_SUSPENDED, LTP_S_SENDS_RESUMED,   /* unfinished sends kept at a deadline, resumed */
    LTP_S_REPLAYED,                         /* auth on: a datagram number seen, or too old */
    LTP_S__COUNT
};

/* What a counter counts (ltp_stat_kind). REJECT: datagrams, or fields of them, that validation
 * refused or clamped; an endpoint that only ever hears its own run's peers keeps these at 0
 * (stragglers of an earlier session aside), so any other value is noise or an attack. */
enum ltp_stat_kind { LTP_STAT_TRAFFIC = 0, LTP_STAT_REJECT = 1 };

typedef struct ltp_core ltp_core_t;
typedef struct ltp_udp ltp_udp_t;

/* ---- configuration ---- */
size_t ltp_config_size(void);
void ltp_config_default(ltp_config_t *cfg);
int ltp_config_set(ltp_config_t *cfg, const char *name, double value);
int ltp_config_validate(const ltp_config_t *cfg);
/* ltp_config_validate, saying why: on LTP_EOPTION writes one sentence (no final period) naming
 * the option or the rule that failed to buf. */
int ltp_config_explain(const ltp_config_t *cfg, char *buf, size_t cap);
/* Payload bytes per DATA packet (with max_udp_payload_bytes 0: those of LTP_ETH_DATAGRAM, what a
 * core uses until its driver sets the path's size). */
uint32_t ltp_chunk_bytes(const ltp_config_t *cfg);
const char *ltp_strerror(int code);
const char *ltp_stat_name(int index);
int ltp_stat_count(void);
int ltp_stat_kind(int index);                         /* enum ltp_stat_kind, -1 if out of range */

/* ---- the option table: every ltp_config_t field, for bindings and documentation ----
 * ltp_config_default sets every field to its default_value; ltp_config_set and
 * ltp_config_validate accept exactly min..max (integers for every type but DOUBLE). */
enum ltp_opt_type { LTP_OPT_U32 = 0, LTP_OPT_U64 = 1, LTP_OPT_DOUBLE = 2, LTP_OPT_BOOL = 3,
                    LTP_OPT_ENUM = 4 };

/* Enums whose value names are exported (ltp_enum_name); option tables refer to them. */
enum ltp_enum_id { LTP_ENUM_ORDER = 0, LTP_ENUM_SCHEDULE = 1, LTP_ENUM_CLOSE_REASON = 2,
                   LTP_ENUM_SEND_DONE = 3, LTP_ENUM_MAC = 4, LTP_ENUM__COUNT };

typedef struct ltp_option {
    const char *name;          /* the ltp_config_t field, as ltp_config_set takes it */
    int type;                  /* enum ltp_opt_type (BOOL and ENUM are stored as uint32_t) */
    int enum_id;               /* ENUM: enum ltp_enum_id naming the values 0..max; else -1 */
    double min, max;           /* accepted range, inclusive */
    double default_value;
    const char *unit;          /* "us", "bytes", "packets", "Mbit/s", "fraction", ... or "" */
    const char *help;          /* one line */
} ltp_option_t;

int ltp_option_count(void);
const ltp_option_t *ltp_option(int index);            /* NULL if out of range */
const char *ltp_enum_name(int enum_id, int value);    /* lowercase name, NULL if out of range */

/* ---- sans-IO core ---- */
ltp_core_t *ltp_core_new(const ltp_config_t *cfg, uint16_t self_rank);
void ltp_core_free(ltp_core_t *core);
int ltp_core_add_peer(ltp_core_t *core, uint16_t rank);          /* returns the peer slot */
/* Per-segment thresholds. Every segment of this table (and segment 0) also keeps its own loss
 * window per peer (docs/ltp-protocol.md §4): LTP_ENOMEM if a peer's cannot grow. */
int ltp_core_set_policy(ltp_core_t *core, uint16_t segment, double threshold_min,
                        double threshold_max);
/* The endpoint's datagram size incl. the LTP header (max_udp_payload_bytes; a configured 0 is
 * LTP_ETH_DATAGRAM until set). A driver sets it from the path MTU toward its peers before it
 * sends: LTP_EBUSY while a send is in progress, LTP_EINVAL outside 56..LTP_MAX_DATAGRAM. */
int ltp_core_set_datagram(ltp_core_t *core, uint32_t bytes);
uint32_t ltp_core_datagram(const ltp_core_t *core);
/* The receive side's layout: DATA of `segment` must describe a message of exactly total_bytes
 * with ceil(critical_bytes / chunk) critical packets, cut into this endpoint's chunk size. Once
 * one segment is expected, DATA of any other segment or shape is refused (counted bad_shape);
 * with none, any shape the parser accepts opens a context. Each expected segment also reserves
 * room in every peer's ring of closed keys (at least 4 per segment). */
int ltp_core_expect(ltp_core_t *core, uint16_t segment, uint32_t total_bytes, uint32_t critical_bytes);
/* The MAC key of the pair this endpoint and `peer` form (LTP_KEY_BYTES): both ends of a pair hold
 * the same one, and nobody else does. Each direction seals under its own key, derived from it and
 * the receiver's rank. With auth on nothing is sent to a peer or accepted from it before its key
 * is set (ltp_core_send and ltp_core_hello say LTP_EAUTH), and a datagram from no peer slot
 * cannot be checked (unknown_peer). A key other than the peer's current one starts a new replay
 * window (docs/ltp-protocol.md §11); the same key again changes nothing. */
int ltp_core_set_peer_key(ltp_core_t *core, int peer, const uint8_t *key, size_t len);
/* SipHash-2-4 of msg under a 16-byte key (the construction of the MAC; exported for tests). */
uint64_t ltp_siphash24(const uint8_t key[16], const uint8_t *msg, size_t len);
/* AES-128-GMAC of msg under a 16-byte key with IV pseq (8 bytes little-endian, then 4 zero
 * bytes), its tag's first 8 bytes read little-endian (the MAC of mac=gmac128; exported for tests). */
uint64_t ltp_gmac128(const uint8_t key[16], uint64_t pseq, const uint8_t *msg, size_t len);

/* Feed one datagram; peer is the slot the source address maps to, or -1 if it maps to none.
 * Returns 0 if accepted, or the reason it was dropped (also counted). */
int ltp_core_input(ltp_core_t *core, int peer, const uint8_t *buf, size_t len, uint64_t now_us);
/* The same, with the time the datagram reached the host (e.g. the kernel's receive timestamp,
 * <= now_us). The rate hint measures capacity and queueing delay from it, so a receiver that reads
 * late or reads a backlog does not distort them; everything else runs on now_us. */
int ltp_core_input_at(ltp_core_t *core, int peer, const uint8_t *buf, size_t len, uint64_t now_us,
                      uint64_t arrival_us);
/* The same for a DATA read in two parts, as a scatter read into a guessed place leaves it: its
 * 52-byte header at head, then (auth on) the LTP_MAC_BYTES tag the datagram ends with, head_len
 * bytes in all; its payload at payload (payload_len). The MAC covers header and payload as if
 * they were one datagram, and is checked before anything is taken in. A payload that is already
 * where the message keeps it is not copied. With payload_len 0, head is a whole datagram;
 * anything else but a DATA split after its header (and tag) is LTP_EINVAL. */
int ltp_core_input_split(ltp_core_t *core, int peer, const uint8_t *head, size_t head_len,
                         const uint8_t *payload, size_t payload_len, uint64_t now_us,
                         uint64_t arrival_us);
/* Next datagram due now: writes it to buf, its peer slot to *peer, returns its length; 0 if
 * nothing is due (call ltp_core_next_timeout), < 0 on error. */
int ltp_core_poll_tx(ltp_core_t *core, uint64_t now_us, uint8_t *buf, size_t cap, int *peer);
/* ltp_core_poll_tx without copying a DATA's payload: buf gets the datagram's first n bytes (the
 * return value: a DATA's header, or any other packet whole) and *payload, *payload_len the rest,
 * a span of the message being sent that stays valid until its send is released or suspended
 * (NULL and 0 for packets other than DATA). The datagram is buf[0..n) followed by the payload,
 * for a gather write (sendmsg with two iovecs); with auth on a DATA's MAC tag is written to
 * buf[n..n + 8) and goes on the wire after the payload (a third iovec). */
int ltp_core_poll_tx_ref(ltp_core_t *core, uint64_t now_us, uint8_t *buf, size_t cap,
                         const uint8_t **payload, uint32_t *payload_len, int *peer);
/* Absolute time at which the core next needs attention (UINT64_MAX: only input can wake it). */
uint64_t ltp_core_next_timeout(ltp_core_t *core, uint64_t now_us);

int ltp_core_hello(ltp_core_t *core, int peer, uint64_t now_us);   /* start joining peer */
int ltp_core_peer_joined(const ltp_core_t *core, int peer);        /* HELLO_ACK received */
int ltp_core_peer_greeted(const ltp_core_t *core, int peer);       /* HELLO received */

/* Start sending; data is referenced, not copied, and must stay valid until the send is
 * released or suspended. The first ceil(critical_bytes / chunk) packets are critical. If a
 * suspended send of this (peer, msg_id, segment) holds the same bytes (length, critical span and
 * a digest of the payload), it resumes instead: where it stopped, with its counters, its packets
 * in flight and the receiver's view of it; done meanwhile, it is done at once. A suspended send
 * of other bytes under the key is released first. LTP_EBUSY while a send of the key is held
 * and not suspended. */
int ltp_core_send(ltp_core_t *core, int peer, uint32_t msg_id, uint16_t segment,
                  const void *data, uint32_t len_bytes, uint32_t critical_bytes, uint64_t now_us);
/* 1 when done (CLOSE or all acked), 0 while in progress; fills *stats if non-NULL. */
int ltp_core_send_status(ltp_core_t *core, int peer, uint32_t msg_id, uint16_t segment,
                         ltp_send_stats_t *stats, uint64_t now_us);
/* The caller stops waiting for a send but may send the same message again (a deadline in a loop
 * of retries): the send is kept, paused (no DATA; ACKs and CLOSEs are still taken in, so it may
 * finish meanwhile), and data is no longer referenced. ltp_core_send of the same message resumes
 * it. A suspended send is released when a send of a newer id of its segment to its peer starts,
 * when a new send needs its slot (the one queued first goes), or by ltp_core_send_release. */
int ltp_core_send_suspend(ltp_core_t *core, int peer, uint32_t msg_id, uint16_t segment);
/* Forget a send (cancelling it if still in progress). */
int ltp_core_send_release(ltp_core_t *core, int peer, uint32_t msg_id, uint16_t segment);

/* 1 if the message is closed and ready to take, 0 if open, not seen yet or older than one the
 * application took, LTP_RX_GONE if nothing of it arrived and never will: the peer's later DATA
 * say its sender finished with it (wire version 5's open_back). ltp_udp_recv takes a gone message as an empty one (close reason
 * LTP_CLOSE_ABANDONED); ltp_core_rx_take answers LTP_ENOTFOUND for it. */
#define LTP_RX_GONE 2
int ltp_core_rx_ready(const ltp_core_t *core, int peer, uint32_t msg_id, uint16_t segment);
/* Copy a closed message out (missing bytes are zero) and free it. mask, if non-NULL, gets one
 * byte per 4-byte word: 1 received, 0 missing. Messages of this peer up to msg_id that have no
 * context left become stale (late data for them is answered with CLOSE stale), and the window of
 * acceptable new message ids moves to start after msg_id. */
int ltp_core_rx_take(ltp_core_t *core, int peer, uint32_t msg_id, uint16_t segment, void *out,
                     uint32_t cap_bytes, uint8_t *mask, ltp_msg_stats_t *stats);
/* Receive a message straight into the application's buffer (cap bytes, at least the message's
 * size): its DATA land there as they arrive, and ltp_core_rx_take into the same buffer copies
 * nothing. If the message is already open, what arrived moves over. The core writes to buf until
 * the message is taken or ltp_core_rx_unpost is called; unposting a message not taken moves what
 * arrived back into a buffer of the core's. */
int ltp_core_rx_post(ltp_core_t *core, int peer, uint32_t msg_id, uint16_t segment, void *buf,
                     uint32_t cap_bytes);
int ltp_core_rx_unpost(ltp_core_t *core, int peer, uint32_t msg_id, uint16_t segment);

/* Where the next DATA from a peer probably land: up to n guesses that they continue the last one
 * stored in index order (message, index, and the part of the message's buffer its payload goes
 * to, which has not arrived yet). A driver may read payloads straight there and pass them to
 * ltp_core_input_split; a datagram that turns out to be another must be passed whole (the bytes it
 * left in the guessed place are in a part that has not arrived, which taking the message zeroes).
 * Guesses are valid until the next call into the core. Returns how many. */
typedef struct ltp_rx_guess {
    uint32_t msg_id;
    uint32_t index;
    uint16_t segment;
    uint8_t *dst;
    uint32_t len;
    uint64_t context;   /* which opening of the message (a freed and reopened one is another) */
} ltp_rx_guess_t;
int ltp_core_rx_guess(ltp_core_t *core, int peer, ltp_rx_guess_t *guesses, int n);
/* 1 if a guess's place still belongs to its message: taking in one datagram may free another
 * message's context (a full table makes room for a lower id), and a payload read into its buffer
 * is then gone; the driver asks before passing each datagram read into place. */
int ltp_core_rx_guess_holds(const ltp_core_t *core, int peer, const ltp_rx_guess_t *guess);
/* Received fraction of an open or closed message (for tests), < 0 if unknown. */
double ltp_core_rx_frac(const ltp_core_t *core, int peer, uint32_t msg_id, uint16_t segment);
/* The early-close threshold in force for peer's messages of segment (< 0: no such peer). */
double ltp_core_threshold(const ltp_core_t *core, int peer, uint16_t segment);
void ltp_core_stats(const ltp_core_t *core, uint64_t *out, int n);
/* The rate hint's view of the path toward this endpoint: capacity estimate in Mbit/s of
 * datagram bytes (0 before the first sample) and the standing queueing delay in microseconds. */
double ltp_core_rx_capacity_mbps(const ltp_core_t *core, double *standing_queue_us);
/* Closing: a peer may still need this end after its last message (a sender whose CLOSE copies
 * were all lost keeps probing until one arrives). ltp_core_linger sends one more CLOSE for each
 * peer's newest closed message; ltp_core_linger_until then says when the end may go: once no
 * CLOSE copy is pending and no peer has sent anything for linger_rtts round trips (the largest
 * smoothed RTT either way, at least linger_min_us). UINT64_MAX while CLOSE copies are pending. */
int ltp_core_linger(ltp_core_t *core, uint64_t now_us);
uint64_t ltp_core_linger_until(const ltp_core_t *core, uint64_t now_us);

/* ---- UDP driver ---- */
/* The IP TOS byte of a message's DATA datagrams (ltp_send_req_t.tos): 0 leaves them the socket's
 * (ltp_udp_set_tos), LTP_TOS_MARK | byte gives them that byte, set per datagram (an IP_TOS control
 * message; a GSO run carries one mark). The driver keeps one mark per segment: the latest send of
 * a segment marks every DATA of that segment it sends from then on, retransmissions included. */
#define LTP_TOS_MARK 0x100u
typedef struct ltp_send_req {
    int32_t peer;
    uint32_t msg_id;
    uint32_t segment;
    uint32_t len_bytes;
    const void *data;
    uint32_t critical_bytes;
    uint32_t tos;              /* 0, or LTP_TOS_MARK | the TOS byte of this message's DATA */
    int32_t status;            /* out: 0 or LTP_E* */
    ltp_send_stats_t stats;    /* out */
} ltp_send_req_t;

typedef struct ltp_recv_req {
    int32_t peer;
    uint32_t msg_id;
    uint32_t segment;
    uint32_t cap_bytes;
    void *data;                /* out: message bytes, missing ones zero */
    uint8_t *mask;             /* out: one byte per 4-byte word, may be NULL */
    int32_t status;            /* out: 0 or LTP_E* */
    ltp_msg_stats_t stats;     /* out */
} ltp_recv_req_t;

/* rx_drop_frac drops that fraction of incoming DATA datagrams (seeded), a loopback test hook. */
ltp_udp_t *ltp_udp_open(const ltp_config_t *cfg, uint16_t self_rank, const char *bind_ip,
                        uint16_t bind_port, double rx_drop_frac, int *err);
void ltp_udp_close(ltp_udp_t *udp);
int ltp_udp_add_peer(ltp_udp_t *udp, uint16_t rank, const char *ip, uint16_t port);
int ltp_udp_local_port(const ltp_udp_t *udp);
/* The datagram size in use (incl. the LTP header). With max_udp_payload_bytes 0 the driver takes
 * the path MTU toward each peer as it is added, minus IPv4 and UDP headers, and keeps the least
 * over the peers (loopback: LTP_MAX_DATAGRAM; Ethernet: LTP_ETH_DATAGRAM). */
int ltp_udp_datagram(ltp_udp_t *udp);
/* UDP offloads in use (udp_gso): LTP_OFFLOAD_GSO while runs of datagrams to a peer go out as one
 * GSO write (cleared for good the first time the kernel refuses one), LTP_OFFLOAD_GRO if the
 * socket reads coalesced runs. */
#define LTP_OFFLOAD_GSO 1
#define LTP_OFFLOAD_GRO 2
int ltp_udp_offload(ltp_udp_t *udp);
int ltp_udp_join(ltp_udp_t *udp, int peer, uint64_t timeout_us);
int ltp_udp_wait_greeted(ltp_udp_t *udp, uint64_t timeout_us);  /* every peer said HELLO */
/* Send n messages concurrently; returns when all are done or the deadline passed. A send the
 * receiver refused as stale has status LTP_ESTALE; an unfinished one has status LTP_ETIMEDOUT.
 * When any is unfinished, every send of the call is suspended (ltp_core_send_suspend) rather
 * than released: calling again with the same messages resumes the unfinished ones where they
 * stopped and finds the finished ones done. The caller may free the messages once it returns. */
int ltp_udp_send(ltp_udp_t *udp, ltp_send_req_t *reqs, int n, uint64_t timeout_us);
/* Wait for n messages to close and take them. */
int ltp_udp_recv(ltp_udp_t *udp, ltp_recv_req_t *reqs, int n, uint64_t timeout_us);
/* Receive from whichever peers deliver first: wait until at least min_done (0..n) of the n
 * messages have closed, or the deadline; then take every one that has closed by then (status 0)
 * and return how many were taken (fewer than min_done at the deadline), or < 0 on a socket error.
 * A message not taken has status LTP_ETIMEDOUT and stays with the core, what arrived of it
 * included: a later call that asks for it again takes it. min_done 1 is "receive from any";
 * min_done n with a deadline is a gather that goes on without the peers that did not deliver. */
int ltp_udp_recv_some(ltp_udp_t *udp, ltp_recv_req_t *reqs, int n, int min_done,
                      uint64_t timeout_us);
/* Wait timeout_us while the progress thread runs (it answers late data with CLOSE, acks, probes);
 * useful before closing, since closing stops the thread. */
int ltp_udp_service(ltp_udp_t *udp, uint64_t timeout_us);
/* Linger before closing (ltp_core_linger): returns when the core says no peer can need this end
 * any more, or after max_us at the latest. */
int ltp_udp_linger(ltp_udp_t *udp, uint64_t max_us);
void ltp_udp_stats(ltp_udp_t *udp, uint64_t *out, int n);
double ltp_udp_threshold(ltp_udp_t *udp, int peer, uint16_t segment);
int ltp_udp_set_policy(ltp_udp_t *udp, uint16_t segment, double threshold_min,
                       double threshold_max);
int ltp_udp_expect(ltp_udp_t *udp, uint16_t segment, uint32_t total_bytes, uint32_t critical_bytes);
/* ltp_core_set_peer_key of the endpoint's core. */
int ltp_udp_set_peer_key(ltp_udp_t *udp, int peer, const uint8_t *key, size_t len);
/* The IP TOS byte (0..255) of every datagram the endpoint sends that no send request marks
 * (control packets, unmarked DATA): the socket's IP_TOS. LTP_EINVAL out of range, LTP_ESYS if the
 * kernel refuses it. */
int ltp_udp_set_tos(ltp_udp_t *udp, int tos);

#ifdef __cplusplus
}
#endif
#endif
