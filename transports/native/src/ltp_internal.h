/* ltp_internal.h: what the files of the LTP core share (state, wire layout, cross-file calls).
 *
 * The core is split along its mechanisms, one file each:
 *   ltp_config.c  option table (names, ranges, defaults, units, help), error texts, stat names
 *   ltp_wire.c    the wire codec: parse and write every packet type at the offsets below
 *   ltp_rate.c    sender rate control: RTT estimate, BBR-like model, window, pacing tokens,
 *                 obeying the receiver's rate hint
 *   ltp_hint.c    receiver side of the rate hint: capacity and standing-queue estimates, the share
 *   ltp_recv.c    receive contexts: early close, adaptive threshold, ACKs, taking messages
 *   ltp_place.c   where received payloads land: posted application buffers, guessed places
 *   ltp_admit.c   what the receive side lets in: the expected layout, the message-id window,
 *                 duplicates that disagree, evicting idle contexts
 *   ltp_auth.c    SipHash-2-4, the per-pair keys, the trailer of every datagram (its number and
 *                 tag) and the replay window
 *   ltp_send.c    send contexts: transmission order, RACK and PTO loss recovery, ACK and CLOSE
 *   ltp_sched.c   which peer's message sends the next DATA packet, and when
 *   ltp_core.c    the endpoint: peers, datagram dispatch, timers, poll_tx and next_timeout
 *   ltp_index.c   which peers have work due and when (poll_tx and next_timeout look at those only)
 *   ltp_udp.c     the UDP driver around one core: socket, event loop, blocking API; its batched
 *   ltp_udp_io.c  datagram I/O; ltp_udp_internal.h (not part of the sans-IO core)
 * Nothing here is public API: bindings read ltp.h only. The C tests include this header for the
 * shared random generator.
 */
#ifndef LTP_INTERNAL_H
#define LTP_INTERNAL_H

#include "ltp.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define NEVER UINT64_MAX

/* ---------------------------------------------------------------- random numbers */
/* SplitMix64: the one generator of the project's C code (core, driver's drop hook, C tests). */
static inline uint64_t ltp_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) from the top 53 bits. */
static inline double ltp_uniform(uint64_t *s)
{
    return (double)(ltp_splitmix64(s) >> 11) / 9007199254740992.0;
}

static inline int seq_lt(uint32_t a, uint32_t b) { return (int32_t)(a - b) < 0; }

/* Grows a per-segment table of *n entries of `size` bytes so that index `seg` exists, the new
 * entries zeroed: LTP_OK, or LTP_ENOMEM with the table as it was. */
static inline int grow_zeroed(void **table, uint32_t *n, uint16_t seg, size_t size)
{
    if (seg < *n) return LTP_OK;
    uint32_t want = (uint32_t)seg + 1;
    char *t = realloc(*table, want * size);
    if (!t) return LTP_ENOMEM;
    memset(t + (size_t)*n * size, 0, (size_t)(want - *n) * size);
    *table = t;
    *n = want;
    return LTP_OK;
}

/* ---------------------------------------------------------------- wire layout */
/* Byte offsets of every field (all little-endian); docs/ltp-protocol.md §2 draws them. */
enum {
    /* common header, every packet */
    WIRE_MAGIC = 0,             /* u16 LTP_MAGIC */
    WIRE_VERSION = 2,           /* u8 LTP_VERSION */
    WIRE_TYPE = 3,              /* u8 enum ltp_type */
    WIRE_FLAGS = 4,             /* u8 enum ltp_flag, DATA only */
    WIRE_MAC = 5,               /* u8 LTP_MAC_*: what trails the datagram */
    WIRE_SENDER = 6,            /* u16 sender rank */
    WIRE_SESSION = 8,           /* u32 */
    WIRE_MSG_ID = 12,           /* u32 */
    WIRE_SEGMENT = 16,          /* u16 */
    WIRE_CRITICAL = 18,         /* u16 critical packets, DATA only */
    /* DATA, then the payload at LTP_DATA_HDR_BYTES */
    WIRE_DATA_INDEX = 20,       /* u32 packet index */
    WIRE_DATA_COUNT = 24,       /* u32 packets in the message */
    WIRE_DATA_OFFSET = 28,      /* u32 byte offset of the payload in the message */
    WIRE_DATA_TOTAL = 32,       /* u32 message bytes */
    WIRE_DATA_LEN = 36,         /* u16 payload bytes */
    WIRE_DATA_OPEN_BACK = 38,   /* u16 ids below this message still open at the sender (capped) */
    WIRE_DATA_TX_SEQ = 40,      /* u32 transmission sequence (per message) */
    WIRE_DATA_TS = 44,          /* u32 sender's clock, low 32 bits of microseconds */
    WIRE_DATA_SRTT = 48,        /* u32 sender's smoothed RTT in microseconds, 0: none yet */
    /* ACK, then the bitmap at LTP_ACK_HDR_BYTES */
    WIRE_ACK_RECEIVED = 20,     /* u32 distinct packets received */
    WIRE_ACK_BASE = 24,         /* u32 every packet below this arrived */
    WIRE_ACK_ECHO_TS = 28,      /* u32 ts of the DATA that triggered it */
    WIRE_ACK_DELAY = 32,        /* u32 microseconds that DATA waited for this ACK */
    WIRE_ACK_ECHO_SEQ = 36,     /* u32 tx_seq of that DATA */
    WIRE_ACK_BITS = 40,         /* u16 bitmap length in bits, a multiple of 8 */
    WIRE_ACK_PAD = 42,          /* u16, zero */
    WIRE_ACK_HINT = 44,         /* u32 fair-share rate hint in kbit/s, 0: none */
    /* CLOSE */
    WIRE_CLOSE_RECEIVED = 20,   /* u32 packets the receiver had */
    WIRE_CLOSE_COUNT = 24,      /* u32 packets in the message */
    WIRE_CLOSE_REASON = 28,     /* u8 enum ltp_close_reason */
    WIRE_CLOSE_PAD = 29,        /* 3 bytes, zero */
    WIRE_CLOSE_ECHO_TS = 32,    /* u32 ts of the DATA it answers (as in an ACK) */
    WIRE_CLOSE_ECHO_SEQ = 36,   /* u32 tx_seq of that DATA */
};
enum { LTP_MAC_NONE = 0, LTP_MAC_SIPHASH24 = 1, LTP_MAC_GMAC128 = 2 };
_Static_assert(WIRE_CRITICAL + 2 == LTP_HDR_BYTES, "common header size");
_Static_assert(WIRE_DATA_SRTT + 4 == LTP_DATA_HDR_BYTES, "DATA header size");
_Static_assert(WIRE_ACK_HINT + 4 == LTP_ACK_HDR_BYTES, "ACK header size");
_Static_assert(WIRE_CLOSE_ECHO_SEQ + 4 == LTP_CLOSE_BYTES, "CLOSE size");

/* One packet's header fields, as parsed or as to be written. */
typedef struct {
    uint8_t type, flags;
    uint16_t sender, segment, critical;
    uint32_t session, msg_id;
    /* DATA */
    uint32_t index, count, offset, total, tx_seq, ts, srtt;
    uint16_t payload_len, open_back;
    const uint8_t *payload;
    /* ACK / CLOSE */
    uint32_t received, base, echo_ts, ack_delay, echo_seq, close_count, hint_kbps;
    uint16_t bits;
    uint8_t reason;
    const uint8_t *bitmap;
} hdr_t;

/* ---------------------------------------------------------------- state */
enum { PK_UNSENT = 0, PK_INFLIGHT = 1, PK_LOST = 2, PK_ACKED = 3 };
enum { BBR_STARTUP = 0, BBR_DRAIN = 1, BBR_PROBE_BW = 2 };

/* Released sends remembered per peer (peer_t.released): at least this many, and one per send slot
 * (max_tx_per_peer), so every send of one call fits. */
#define LTP_RELEASED_MIN 8

/* Windowed max (Linux's minmax): the best of three samples over a window. */
typedef struct { uint64_t t; double v; } mm_sample_t;
typedef struct { mm_sample_t s[3]; } minmax_t;

typedef struct {
    uint64_t sent_us, delivered, delivered_us, first_sent_us;
    uint32_t tx_seq;
    uint8_t state, app_limited;
} txpkt_t;

typedef struct {
    int used, done;
    uint32_t msg_id;
    uint16_t segment;
    const uint8_t *data;
    uint32_t total, count, chunk, critical;
    uint32_t *order, next_first;     /* first-pass schedule and cursor */
    txpkt_t *pk;
    uint64_t *lost;                  /* bitmap of packets waiting for retransmission */
    uint32_t n_lost, lost_cursor, ack_floor;
    uint32_t *seq_idx, seq_cap;      /* packet index of every transmission, by tx_seq */
    uint32_t *seq_ts;                /* its timestamp on the wire: what a genuine echo carries */
    uint64_t *seq_rtt;               /* bitmap by tx_seq: its echo gave an RTT sample already */
    uint32_t tx_seq_next, scan_seq;
    int rack_valid;
    uint32_t rack_seq;
    uint64_t rack_sent_us, rack_rtt_us, rack_timer_us;
    uint64_t start_us, last_sent_us, done_us;
    uint64_t enq_seq;                /* queueing order across all peers (serial schedule) */
    uint32_t pto_count, n_acked, inflight_pkts;
    uint64_t packets, retransmits, wire_bytes, peer_received;
    int done_reason;
    uint32_t sent_before;            /* distinct packets released sends of this key sent */
    int suspended;                   /* the caller stopped waiting: paused, data not referenced */
    uint64_t digest;                 /* of the payload, taken when suspended: a retry's must match */
    uint64_t first_tx_us, last_tx_us, first_pass_us, max_gap_us;   /* ltp_send_stats_t */
    uint32_t probes;
} txmsg_t;

typedef struct {
    int used, closed;
    uint32_t msg_id;
    uint16_t segment;
    uint8_t *buf;
    int posted;                      /* buf is the application's (ltp_core_rx_post) */
    uint64_t context;                /* which opening this is (c->n_opened when it opened) */
    uint64_t *bits;
    uint32_t total, count, chunk, critical;
    uint32_t received, crit_rcvd, first_rcvd, base, max_idx, max_first_seq;
    uint64_t received_bytes, duplicates, retransmits;
    uint64_t first_us, pass_end_us, close_us;
    uint64_t checked_us;             /* the close rule was last evaluated then (rx_check_close), */
    uint64_t checked_seq;            /* as the eval_seq'th evaluation (index_checked_us) */
    uint32_t ack_pending, echo_ts, echo_seq;
    uint64_t ack_due_us, echo_arrival_us;
    uint64_t last_us;                /* last DATA that changed it (idle contexts are evicted) */
    uint64_t *disputed;              /* packets whose copies disagreed (NULL until one did) */
    uint64_t conflicts;
    double threshold;
    int reason;
} rxmsg_t;

typedef struct {
    int used;
    uint32_t msg_id, received, count;
    uint32_t echo_ts, echo_seq;            /* the DATA the CLOSE answers */
    uint16_t segment;
    uint8_t reason, close_pending;
} closed_t;

typedef struct {
    int mode, filled_pipe, full_bw_cnt, cycle_idx, has_bw;
    minmax_t bw_filter;
    double btl_bw, full_bw, pacing_gain, cwnd_gain, pacing_rate;
    uint64_t round_count, next_round_delivered, cycle_stamp_us;
    uint64_t delivered, delivered_us, first_sent_us, app_limited_until;
    uint64_t round_max_inflight;           /* most bytes in flight since the round started */
} bbr_t;

/* The rate model of one flow (ltp_rate.c): a peer's path, or, with shared_link under the serial
 * schedule, the sends to every peer together, as one flow over this endpoint's own link. */
typedef struct {
    bbr_t bbr;
    int rtt_seen;                          /* pacing was set from a measured RTT */
    double tokens, min_rtt_us;
    uint64_t tokens_us, inflight_bytes, min_rtt_stamp_us;
} flow_t;

typedef struct { uint32_t msg_id, packets; uint16_t segment; uint8_t used; } released_t;

/* A buffer the application posted for a message (ltp_core_rx_post). */
typedef struct { int peer; uint32_t msg_id, cap; uint16_t segment; uint8_t *buf; } post_t;

typedef struct {
    uint16_t rank;
    int greeted, joined, hello_active, hello_ack_pending;
    uint32_t hello_nonce, hello_echo;      /* ours in HELLO; the peer's, echoed in HELLO_ACK */
    uint16_t hello_echo_number;            /* the peer's HELLO's number, echoed in HELLO_ACK */
    /* Authentication (ltp_auth.c): the pair's keys, one per direction, and the numbers. */
    int has_key;
    uint8_t pair_key[LTP_KEY_BYTES];       /* as set (ltp_core_set_peer_key) */
    uint8_t tx_key[LTP_KEY_BYTES];         /* MAC key of datagrams to this peer */
    uint8_t rx_key[LTP_KEY_BYTES];         /* MAC key of datagrams from it */
    void *tx_gmac, *rx_gmac;               /* mac gmac128: those keys' AES-128 schedules (EVP) */
    uint64_t tx_pseq;                      /* number of the next datagram to it; 0: none sent yet */
    int rx_any;                            /* a datagram from it was accepted: rx_top is its newest */
    uint64_t rx_top;
    uint64_t *rx_seen;                     /* ring bitmap of the replay_window numbers up to rx_top */
    uint64_t hello_next_us;
    uint64_t hello_sent_us;                /* when our last HELLO went out */
    uint32_t hello_sends;                  /* HELLOs of this join so far; each carries its number */
    int has_rtt;
    double srtt_us, rttvar_us, min_rtt_us, peer_srtt_us;
    uint64_t min_rtt_stamp_us;
    flow_t own;                            /* this path's rate model ... */
    flow_t *fl;                            /* ... or the endpoint's shared one (shared_link) */
    uint32_t probe_credit;
    double hint_rate;                      /* fair-share rate the receiver asked for, bytes/us */
    uint64_t hint_until_us;                /* obeyed until then; 0: no hint */
    uint64_t last_data_us;                 /* last DATA from this peer (receiver's activity view) */
    int has_owd;
    uint32_t owd_ref;                      /* first one-way delay sample (clock offset included) */
    minmax_t owd_filter;                   /* max of -(owd - owd_ref): the base one-way delay */
    txmsg_t *tx;
    rxmsg_t *rx;
    closed_t *ring;
    uint32_t ring_head, n_close_pending;   /* ring entries with CLOSE copies to send */
    int has_last;                          /* the last DATA stored: its key and index */
    uint32_t last_msg_id, last_idx;        /* (where the next one probably goes, ltp_place.c) */
    uint16_t last_seg;
    int has_tpass, floor_valid;
    /* First-pass loss, two kinds of window (ltp_recv.c, p_hat): the peer's, of its messages of
     * any segment with at least loss_min_packets packets, and one per segment with every message
     * of that segment, for segment 0 and each segment of the policy table (n_seg_loss of them). */
    uint32_t n_loss;                       /* samples the peer's window took (ring below) */
    float loss_ring[LTP_LOSS_WINDOW_MAX];
    uint32_t *seg_n_loss;                  /* samples each segment's window took */
    float *seg_loss;                       /* n_seg_loss rings of loss_window samples */
    uint32_t n_seg_loss;
    double t_pass_us;
    uint32_t floor;                        /* the newest id the application took */
    /* The sender's floor as its DATA say (id - open_back, the newest seen): every id below it is
     * finished at the sender, so one with no receive context will never come (rx_ready: gone). */
    uint32_t sender_floor;
    uint8_t sender_floor_known;
    uint16_t *floor_segs;                  /* the segments of id floor it took (PLOT: layers) */
    uint32_t n_floor_segs, cap_floor_segs;
    uint8_t floor_whole;                   /* no room to list them: every segment of floor is taken */
    /* Sends released (finished, or cancelled unfinished), newest last: their receiver may hold
     * those packets, so a later send of the same key may be closed with more than it sent. */
    released_t *released;                  /* core.released_cap of them */
    uint32_t released_head;
    post_t *posts;                         /* buffers posted for its messages (ltp_place.c) */
    uint32_t n_posts, cap_posts;
    /* The index (ltp_index.c) and the rate hint's view of it (ltp_hint.c). */
    uint8_t dirty;                         /* touched since the last poll_tx (pindex_t.dirty) */
    uint32_t n_rx_open;                    /* receive contexts used and not closed */
    int32_t act_prev, act_next;            /* in the hint's list of open peers (n_rx_open > 0) */
} peer_t;

typedef struct { float lo, hi; uint8_t set; } policy_t;

/* ---------------------------------------------------------------- the peer index (ltp_index.c) */
/* A binary min-heap of peer slots ordered by (key, slot), each slot at most once. */
typedef struct { int32_t *at, *pos; uint64_t *key; int32_t n; } pheap_t;
/* A set of peer slots that finds its next member from any slot: three levels of bitmaps. */
typedef struct { uint64_t *w[3]; uint32_t words[3]; } pset_t;

/* Which peers have work due and when, so that poll_tx and next_timeout look at those only. Every
 * peer's keys are what its state says (index_rekey); a call that changes a peer's state touches
 * it (index_touch), which re-keys it before the index is next read and has poll_tx look at it
 * once more. */
typedef struct {
    pheap_t timer;            /* peers with a timer: a close deadline, RACK, PTO; by its time */
    pheap_t ctl;              /* peers with a control datagram to come (HELLO, ACK), by its time */
    pheap_t ready;            /* peers with a control datagram due: the lowest slot goes first */
    pheap_t urgent;           /* peers with a HELLO_ACK or CLOSE copies pending */
    pheap_t head;             /* serial: peers with a packet to send, by (silent, queueing order) */
    pset_t cand;              /* fair: peers with a packet to send */
    pset_t unmarked;          /* own flows changed since the scheduler last looked at them */
    int marks;                /* the scheduler marks idle own flows (unmarked is kept) */
    int32_t *dirty, n_dirty;  /* peers touched since the last poll_tx */
    uint64_t ready_us;        /* ready was last filled then (an earlier call empties it) */
    /* poll_tx evaluates every open message's close rule (rx_check_close); the index does it for
     * the peers it ticks and records the call for the others (index_checked_us). */
    uint64_t tick_us, tick_seq, eval_seq;
} pindex_t;
/* One expected segment: the exact shape its DATA must have (ltp_core_expect). */
typedef struct { uint32_t total, critical_bytes, count, critical; uint8_t set; } expect_t;


struct ltp_core {
    ltp_config_t cfg;
    uint16_t self_rank;
    uint32_t chunk;
    peer_t *peers;
    int n_peers, rr;
    uint64_t n_opened;                     /* receive contexts opened so far: the next context */
    uint64_t n_enqueued;                   /* messages queued so far: the next enq_seq */
    flow_t shared;                         /* every peer's flow with shared_link (serial) */
    policy_t *policy;
    uint32_t n_policy;
    expect_t *expect;                      /* by segment; none set: any parsable shape */
    uint32_t n_expect_slots, n_expected;
    uint32_t ring_cap;                     /* closed keys per peer: closed_ring, more per segment */
    uint32_t released_cap;                 /* released sends remembered per peer */
    uint64_t last_rx_us;                   /* last valid datagram from any peer (linger) */
    uint64_t linger_from_us;               /* ltp_core_linger was called then (0: not closing) */
    /* How late the host runs this core (ltp_rate.c, host_entry): the time ltp_core_next_timeout
     * last named (NEVER: none outstanding) and the largest lateness of the entries after it. */
    uint64_t due_us;
    uint64_t n_late;
    minmax_t late_max;
    uint64_t rng;
    /* Receiver side of the rate hint: aggregate DATA arrivals, see hint_on_data. */
    int est_open;                          /* arrivals are close enough together to measure */
    uint64_t last_arrival_us;
    double read_gap_us;                    /* mean time between distinct arrival instants */
    uint64_t qw_start_us, qw_len_us;       /* queue window */
    double q_win_us, q_standing_us;        /* least queueing delay in it; over the last 4 */
    double q_ring[4];
    uint32_t q_n;
    uint64_t cw_start_us, cw_len_us, cw_bytes, cw_first_len;   /* capacity window */
    minmax_t cap_filter;
    double cap_bw;                         /* capacity toward this endpoint, bytes/us */
    /* The rate hint's view of the open peers (peer_t.n_rx_open > 0): how many, the largest srtt,
     * and a list in order of their last DATA with a cursor at the first at or after act_thr
     * (act_ge: members from it on), which moves as little as the hint's idle horizon does. */
    uint32_t n_open_peers;
    pheap_t srtt;                          /* open peers, largest MIN(peer_srtt_us, 1e6) first */
    int32_t act_head, act_tail, act_cur;
    uint32_t act_ge;
    uint64_t act_thr;
    pindex_t ix;
    uint64_t st[LTP_S__COUNT];
};

/* ---------------------------------------------------------------- calls between files */
/* ltp_core.c */
peer_t *core_peer(const ltp_core_t *c, int peer);            /* NULL if no such slot */
int core_peer_slot(const ltp_core_t *c, const peer_t *p);
hdr_t core_header(const ltp_core_t *c, uint8_t type, uint32_t msg_id, uint16_t segment);
/* Driver hook: the driver counts its own events in the core's table so stats stay in one place. */
void ltp_core__count(ltp_core_t *c, int stat, uint64_t n);

/* ltp_index.c */
int ph_init(pheap_t *h, uint32_t cap);
void ph_free(pheap_t *h);
void ph_put(pheap_t *h, int slot, uint64_t key);   /* key NEVER: slot leaves the heap */
int ph_top(const pheap_t *h);                      /* the least (key, slot); -1 if empty */
int pset_next(const pset_t *s, int from);          /* the least member >= from; -1 if none */
void pset_put(pset_t *s, int slot, int in);
int index_init(ltp_core_t *c);
void index_free(ltp_core_t *c);
void index_touch(ltp_core_t *c, peer_t *p);        /* p's state changed (any call on it does) */
void index_touch_all(ltp_core_t *c);
/* When the close rule of open message m was last evaluated; index_eval records one. */
uint64_t index_checked_us(const ltp_core_t *c, const rxmsg_t *m);
void index_eval(ltp_core_t *c, rxmsg_t *m, uint64_t now);
/* poll_tx's timers: every peer whose timer is due or that was touched has its close rules and
 * send timers run; the close rules of the others count as evaluated now. */
void index_tick(ltp_core_t *c, uint64_t now);
int index_ready(ltp_core_t *c, uint64_t now);      /* lowest slot with a control datagram due */
void index_refresh(ltp_core_t *c, uint64_t now);   /* keys up to date (next_timeout) */
int index_urgent(const ltp_core_t *c);             /* lowest slot with HELLO_ACK/CLOSE; -1 */
uint64_t index_due(const ltp_core_t *c);           /* earliest timer or control datagram */

/* ltp_auth.c */
/* Bytes a datagram of this endpoint gives to its trailer (LTP_TRAILER_BYTES with auth on, else 0). */
size_t auth_trailer(const ltp_config_t *cfg);
void auth_derive(const uint8_t key[LTP_KEY_BYTES], uint16_t rank, uint8_t out[LTP_KEY_BYTES]);
/* Check and strip the trailer of an incoming datagram of len bytes from peer p (NULL: no slot):
 * its length without it, or LTP_EAUTH (LTP_EPEER with auth on and no slot to take a key from);
 * *pseq gets its number. With payload != NULL a DATA read apart (ltp_core_input_split): b holds
 * its header and then its trailer, payload the len - 68 bytes between them. */
int auth_check(const ltp_core_t *c, const peer_t *p, const uint8_t *b, size_t len, const uint8_t *payload,
               uint64_t *pseq);
/* The replay window (auth on): 0 if p never sent number pseq (now recorded as seen), else
 * LTP_EREJECTED (counted replayed). Called once the datagram passed every check before dispatch. */
int auth_window(ltp_core_t *c, peer_t *p, uint64_t pseq);
/* Number an outgoing datagram of n bytes and append its trailer (cap has room); returns the new
 * length. With payload != NULL a DATA sent by reference: b holds its header, payload the n - 52
 * bytes after it, and the trailer goes to b + LTP_DATA_HDR_BYTES (sent after the payload). */
int auth_seal(const ltp_core_t *c, peer_t *p, uint8_t *b, int n, const uint8_t *payload, uint64_t now);
/* With auth on, a peer without its key can neither be sent to nor heard: LTP_EAUTH, else 0. */
int auth_ready(const ltp_core_t *c, const peer_t *p);
void auth_free(peer_t *p);
/* The WIRE_MAC byte of this endpoint's datagrams: LTP_MAC_NONE with auth off, else its mac's. */
int auth_kind(const ltp_core_t *c);
/* AES-128-GMAC (mac gmac128): a context keyed with key (NULL if out of memory; EVP_CIPHER_CTX_free
 * frees it), and the tag of head, payload and tail under it with IV pseq. */
void *auth_gmac_new(const uint8_t key[LTP_KEY_BYTES]);
uint64_t auth_gmac_parts(void *ctx, uint64_t pseq, const uint8_t *head, size_t head_len,
                         const uint8_t *payload, size_t payload_len, const uint8_t *tail,
                         size_t tail_len);

/* ltp_wire.c */
int wire_plausible(const uint8_t *b, size_t len);
int wire_parse(const ltp_config_t *cfg, const uint8_t *b, size_t len, hdr_t *h);
int wire_put_data(uint8_t *b, const hdr_t *h);                /* header and payload */
int wire_put_data_hdr(uint8_t *b, const hdr_t *h);            /* header only: 52 bytes */
int wire_put_ack(uint8_t *b, const hdr_t *h);                 /* header; bitmap follows */
int wire_put_close(uint8_t *b, const hdr_t *h);
int wire_put_hello(uint8_t *b, const hdr_t *h);               /* HELLO and HELLO_ACK */

/* ltp_rate.c */
double minmax_running_max(minmax_t *m, uint64_t win, uint64_t t, double v);
double pkt_wire(const ltp_core_t *c);
void rate_init_flow(const ltp_core_t *c, flow_t *f);
int rate_shared(const ltp_core_t *c);
void rtt_sample(ltp_core_t *c, peer_t *p, double rtt, uint64_t now);
double srtt_or_initial(const ltp_core_t *c, const peer_t *p);
void host_entry(ltp_core_t *c, uint64_t now);             /* the core entered at now */
double host_floor(const ltp_core_t *c, double fixed);     /* a timer floor: fixed, or the host's */
double ack_hold_us(const ltp_core_t *c, double srtt_us);  /* an ACK's wait for more DATA */
double cwnd_bytes(const ltp_core_t *c, const peer_t *p, uint64_t now);
double pacing_rate(const ltp_core_t *c, const peer_t *p, uint64_t now);
void bbr_on_ack(ltp_core_t *c, peer_t *p, const txpkt_t *pk, uint64_t now);
void rate_on_hint(ltp_core_t *c, peer_t *p, uint32_t kbps, uint64_t now);
int rate_paced(const ltp_core_t *c);
uint64_t pacing_due(const ltp_core_t *c, peer_t *p, uint64_t now);

/* ltp_hint.c */
void hint_on_data(ltp_core_t *c, peer_t *p, const hdr_t *h, size_t len, uint64_t now, uint64_t at);
uint32_t hint_kbps(ltp_core_t *c, uint64_t now);
int hint_init(ltp_core_t *c);
void hint_free(ltp_core_t *c);
void hint_open(ltp_core_t *c, peer_t *p, int open);   /* p's first context opened / last closed */
void hint_srtt(ltp_core_t *c, peer_t *p);             /* p's peer_srtt_us changed */

/* ltp_admit.c */
/* DATA this endpoint can take at all: its segment and shape are expected (counted if not). */
int admit_shape(ltp_core_t *c, const hdr_t *h);
/* admit_shape, and a key with no context must be one admit_new_id lets open (or stale). */
int admit_data(ltp_core_t *c, const peer_t *p, const hdr_t *h);
/* A DATA for a key with no context and not in the ring: 0 if it may open one, LTP_ESTALE if the
 * application moved past it (an older id, or this very key taken), LTP_EREJECTED (counted) if it
 * is too far ahead. Other segments of the id last taken may still open: a message of several
 * segments (PLOT's layers) is taken segment by segment as each closes. */
int admit_new_id(ltp_core_t *c, const peer_t *p, uint32_t msg_id, uint16_t seg);
/* The application took (msg_id, seg) from p: older ids become stale, and so does this key. */
void admit_taken(ltp_core_t *c, peer_t *p, uint32_t msg_id, uint16_t seg);
/* DATA for a packet already stored: 1 if its bytes differ from the stored ones (counted; both
 * copies are dropped, the packet counts as missing again). */
int admit_conflict(ltp_core_t *c, rxmsg_t *m, const hdr_t *h);
void admit_evict_idle(ltp_core_t *c, peer_t *p, uint64_t now);
/* The table of p is full and a DATA of msg_id wants a context: free the one with the highest id
 * if msg_id is lower (counted), and return it; NULL if msg_id is no lower than every held one. */
rxmsg_t *admit_make_room(ltp_core_t *c, peer_t *p, uint32_t msg_id);
uint64_t admit_evict_deadline(const ltp_core_t *c, const rxmsg_t *m);
/* The sender's srtt as a DATA states it, within what a receiver will wait for (max_wait). */
double admit_peer_srtt(const ltp_core_t *c, uint32_t srtt_us);
int admit_ring_grow(ltp_core_t *c, uint32_t cap);
/* Cut every expected segment into the endpoint's chunk size again (after it changed). */
void admit_reshape(ltp_core_t *c);

/* ltp_recv.c */
void rx_free(rxmsg_t *m);
/* Grow p's per-segment loss windows to cover segment 0 and the policy table: LTP_OK or LTP_ENOMEM
 * (p keeps the windows it had). */
int rx_loss_fit(const ltp_core_t *c, peer_t *p);
rxmsg_t *rx_lookup(const ltp_core_t *c, const peer_t *p, uint32_t msg_id, uint16_t segment);
closed_t *ring_lookup(const ltp_core_t *c, const peer_t *p, uint32_t msg_id, uint16_t segment);
void rx_check_close(ltp_core_t *c, peer_t *p, rxmsg_t *m, uint64_t now);
/* When open message m's close rule next needs evaluating by time alone; NEVER if closed. */
uint64_t rx_close_deadline(const ltp_core_t *c, const peer_t *p, const rxmsg_t *m);
void rx_release(ltp_core_t *c, peer_t *p, rxmsg_t *m);   /* rx_free, keeping the open count */
int rx_on_data(ltp_core_t *c, peer_t *p, const hdr_t *h, uint64_t now);
void rx_note_sender_floor(peer_t *p, const hdr_t *h);   /* its DATA: ids below id - open_back done */
int rx_poll_control(ltp_core_t *c, peer_t *p, uint64_t now, uint8_t *b, size_t cap);
void rx_farewell(ltp_core_t *c, peer_t *p);   /* one more CLOSE for p's newest closed message */

/* ltp_place.c */
uint8_t *rx_posted(const ltp_core_t *c, int peer, uint32_t msg_id, uint16_t seg, uint32_t total);
void rx_note_stored(peer_t *p, const rxmsg_t *m, uint32_t index);

/* ltp_send.c */
void tx_free(txmsg_t *m);
uint32_t tx_pkt_len(const txmsg_t *m, uint32_t i);
uint32_t tx_pick(const ltp_core_t *c, txmsg_t *m, int *retrans);
int tx_on_ack(ltp_core_t *c, peer_t *p, const hdr_t *h, uint64_t now);
int tx_on_close(ltp_core_t *c, peer_t *p, const hdr_t *h, uint64_t now);
void tx_on_timers(ltp_core_t *c, peer_t *p, txmsg_t *m, uint64_t now);
uint64_t tx_deadline(const ltp_core_t *c, const peer_t *p, const txmsg_t *m);
/* Returns the datagram's length; with payload != NULL only the header goes to b and *payload
 * points at the payload in the message (zero copy). */
int tx_build_data(ltp_core_t *c, peer_t *p, txmsg_t *m, uint32_t i, int retrans, int probe,
                  uint64_t now, uint8_t *b, size_t cap, const uint8_t **payload);

/* ltp_sched.c */
/* The scheduler's choice of the peer that sends the next DATA packet. */
typedef struct {
    int peer;                 /* slot, -1: none yet */
    txmsg_t *m;               /* its message with a packet to send */
    uint32_t idx;             /* that packet */
    int retrans;              /* it is a retransmission */
    uint64_t due;             /* when it may go: NEVER while none is known to be ready */
    int silent;               /* SERIAL: its peer has not answered since a probe timeout */
} sched_t;

void sched_begin(sched_t *s);
/* The message of peer p with a packet to send (and the packet), or NULL. */
txmsg_t *sched_pick(const ltp_core_t *c, peer_t *p, uint32_t *idx, int *retrans);
/* The serial schedule's order of p's message m: unanswered probes (silent) last, then queueing. */
uint64_t sched_rank(const peer_t *p, const txmsg_t *m);
/* Consider every peer the choice depends on: poll (poll_tx) also marks idle flows; stop >= 0
 * (next_timeout, an urgent peer there) only the slots below it. */
void sched_scan(ltp_core_t *c, sched_t *s, uint64_t now, int poll, int stop);
void sched_mark_idle(flow_t *f);   /* nothing to send: rate samples until delivered are app-limited */
void sched_consider(ltp_core_t *c, sched_t *s, int pi, uint64_t now, int mark_idle);
uint64_t sched_decide(ltp_core_t *c, sched_t *s, uint64_t now);
int sched_emit(ltp_core_t *c, const sched_t *s, uint64_t now, uint8_t *b, size_t cap, int *peer,
               const uint8_t **payload);

#endif
