/* ltp_send.c: the send side. Send contexts (a message referenced, not copied), the order of the
 * first pass, per-packet state, ACK and CLOSE processing, loss detection by RACK (time-based,
 * per message) and probe timeouts, suspending a send its caller stopped waiting for and resuming
 * it when the caller sends the same message again, and writing DATA. docs/ltp-protocol.md §3.
 */
#include "ltp_internal.h"

#include <stdlib.h>
#include <string.h>

void tx_free(txmsg_t *m)
{
    free(m->order); free(m->pk); free(m->lost); free(m->seq_idx); free(m->seq_ts); free(m->seq_rtt);
    memset(m, 0, sizeof *m);
}

static txmsg_t *tx_find(const ltp_core_t *c, const peer_t *p, uint32_t msg_id, uint16_t seg)
{
    for (uint32_t i = 0; i < c->cfg.max_tx_per_peer; i++)
        if (p->tx[i].used && p->tx[i].msg_id == msg_id && p->tx[i].segment == seg) return &p->tx[i];
    return NULL;
}

/* How many ids below m's are still open toward p (unfinished sends of any segment): the DATA's
 * open_back, capped at its u16. Everything older is finished here, so a receiver that has nothing
 * of it may stop waiting (ltp_core_rx_ready: gone). max_tx_per_peer slots, a few. */
static uint16_t open_back(const ltp_core_t *c, const peer_t *p, const txmsg_t *m)
{
    uint32_t oldest = m->msg_id;
    for (uint32_t i = 0; i < c->cfg.max_tx_per_peer; i++) {
        const txmsg_t *o = &p->tx[i];
        if (o->used && !o->done && seq_lt(o->msg_id, oldest)) oldest = o->msg_id;
    }
    return (uint16_t)MIN(m->msg_id - oldest, 0xFFFFu);
}

uint32_t tx_pkt_len(const txmsg_t *m, uint32_t i)
{
    return i + 1 < m->count ? m->chunk : m->total - (m->count - 1) * m->chunk;
}

/* Bytes packet i occupies on the path (what the window and the delivery rate count). */
static uint64_t wire_len(const txmsg_t *m, uint32_t i) { return tx_pkt_len(m, i) + LTP_DATA_HDR_BYTES; }

static void tx_finish(ltp_core_t *c, peer_t *p, txmsg_t *m, int reason, uint64_t now)
{
    /* Whatever is still in flight will never be acknowledged: stop counting it. */
    for (uint32_t i = 0; i < m->count; i++)
        if (m->pk[i].state == PK_INFLIGHT) p->fl->inflight_bytes -= wire_len(m, i);
    m->inflight_pkts = 0;
    m->n_lost = 0;
    memset(m->lost, 0, ((m->count + 63) / 64) * sizeof *m->lost);
    m->next_first = m->count;
    m->done = 1;
    m->done_reason = reason;
    m->done_us = now;
    if (reason == LTP_SEND_CLOSED) c->st[LTP_S_SENDS_CLOSED]++;
    if (reason == LTP_SEND_ALL_ACKED) c->st[LTP_S_SENDS_ALL_ACKED]++;
    if (reason == LTP_SEND_STALE) c->st[LTP_S_SENDS_STALE]++;
}

/* An ACK or CLOSE echoes the tx_seq and timestamp of a DATA it answers: genuine ones echo a
 * transmission of ours exactly; a forger who never saw it has to guess both. */
static int echo_sent(const txmsg_t *m, const hdr_t *h)
{
    return h->echo_seq < m->tx_seq_next && m->seq_ts[h->echo_seq] == h->echo_ts;
}

/* ---------------------------------------------------------------- loss detection */
static void mark_lost(ltp_core_t *c, peer_t *p, txmsg_t *m, uint32_t i)
{
    txpkt_t *k = &m->pk[i];
    if (k->state != PK_INFLIGHT) return;
    k->state = PK_LOST;
    p->fl->inflight_bytes -= wire_len(m, i);
    m->inflight_pkts--;
    m->lost[i / 64] |= 1ull << (i % 64);
    m->n_lost++;
    if (i < m->lost_cursor) m->lost_cursor = i;
    c->st[LTP_S_LOST_DETECTED]++;
}

static double reo_window(const ltp_core_t *c, const peer_t *p)
{
    return MAX(host_floor(c, c->cfg.reorder_window_min_us), p->min_rtt_us / 4);
}

/* RACK: a packet is lost once one sent after it was delivered and a reorder window passed. */
static void rack_detect(ltp_core_t *c, peer_t *p, txmsg_t *m, uint64_t now)
{
    m->rack_timer_us = NEVER;
    if (!m->rack_valid) return;
    double reo = reo_window(c, p);
    /* Send times grow with tx_seq, so the scan stops at the first packet not yet overdue. */
    for (uint32_t s = m->scan_seq; s < m->rack_seq; s++) {
        uint32_t i = m->seq_idx[s];
        txpkt_t *k = &m->pk[i];
        if (k->tx_seq == s && k->state == PK_INFLIGHT) {
            double due = (double)k->sent_us + (double)m->rack_rtt_us + reo;
            if (due > (double)now) { m->rack_timer_us = (uint64_t)due; break; }
            mark_lost(c, p, m, i);
        }
        m->scan_seq = s + 1;
    }
}

static uint64_t pto_us(const ltp_core_t *c, const peer_t *p, const txmsg_t *m)
{
    /* The peer holds an ACK as this end would (ack_hold_us): it reads our srtt in our DATA. */
    double srtt = srtt_or_initial(c, p);
    double base = srtt + 4 * (p->has_rtt ? p->rttvar_us : c->cfg.initial_rtt_us / 2.0) + ack_hold_us(c, srtt);
    base = MAX(base, host_floor(c, c->cfg.pto_min_us));
    /* A suspended send sends no probe, so nothing backs off: it lets go of the window on time. */
    return (uint64_t)base << (m->suspended ? 0 : MIN(m->pto_count, c->cfg.pto_max_backoff));
}

static uint64_t pto_deadline(const ltp_core_t *c, const peer_t *p, const txmsg_t *m)
{
    if (m->done || m->inflight_pkts == 0) return NEVER;
    return m->last_sent_us + pto_us(c, p, m);
}

/* Suspended send m marks what it has in flight lost: it leaves the window (a peer that is gone
 * would hold it for the other sends, the whole link's under shared_link), and is sent again if the
 * send resumes. */
static void tx_let_go(ltp_core_t *c, peer_t *p, txmsg_t *m)
{
    for (uint32_t s = m->scan_seq; s < m->tx_seq_next; s++)
        if (m->pk[m->seq_idx[s]].tx_seq == s) mark_lost(c, p, m, m->seq_idx[s]);
}

/* When send m next needs a timer (RACK or PTO); NEVER if none. */
uint64_t tx_deadline(const ltp_core_t *c, const peer_t *p, const txmsg_t *m)
{
    if (!m->used || m->done) return NEVER;
    return MIN(m->rack_timer_us, pto_deadline(c, p, m));
}

/* Fire m's RACK timer and probe timeout if due. A probe re-sends the oldest packet in flight;
 * its ACK restarts RACK. */
void tx_on_timers(ltp_core_t *c, peer_t *p, txmsg_t *m, uint64_t now)
{
    if (!m->used || m->done) return;
    if (m->rack_timer_us <= now) rack_detect(c, p, m, now);
    if (pto_deadline(c, p, m) > now) return;
    if (m->suspended) { tx_let_go(c, p, m); return; }   /* nobody waits for it: no probe */
    for (uint32_t s = m->scan_seq; s < m->tx_seq_next; s++) {
        uint32_t i = m->seq_idx[s];
        if (m->pk[i].tx_seq == s && m->pk[i].state == PK_INFLIGHT) {
            mark_lost(c, p, m, i);
            break;
        }
    }
    p->probe_credit++;
    m->pto_count++;
    m->probes++;
    m->last_sent_us = now;
    c->st[LTP_S_PROBES]++;
}

/* ---------------------------------------------------------------- ACK and CLOSE in */
static void ack_pkt(peer_t *p, txmsg_t *m, uint32_t i, const txpkt_t **newest)
{
    txpkt_t *k = &m->pk[i];
    if (k->state == PK_ACKED || k->state == PK_UNSENT) return;
    if (k->state == PK_INFLIGHT) {
        p->fl->inflight_bytes -= wire_len(m, i);
        m->inflight_pkts--;
    } else {   /* lost, then delivered after all: no retransmission needed */
        m->lost[i / 64] &= ~(1ull << (i % 64));
        m->n_lost--;
    }
    k->state = PK_ACKED;
    m->n_acked++;
    p->fl->bbr.delivered += wire_len(m, i);
    if (!*newest || k->delivered > (*newest)->delivered ||
        (k->delivered == (*newest)->delivered && k->sent_us > (*newest)->sent_us))
        *newest = k;
}

/* The echoed timestamp is our own clock's low 32 bits, so RTT needs no clock sync. Each
 * transmission's echo gives one sample (and one RACK update) at most: a genuine receiver echoes
 * each in one ACK (the next ACK waits for new DATA), so a second ACK echoing it (replayed, or
 * duplicated by the network) would only count its ever older age again. The receiver's ack_delay
 * is believed up to ack_delay_us, the longest its ACK timer holds an ACK (both ends of a run share
 * the option): a larger one, forged or a receiver late to send, leaves the rest in the sample,
 * which can be too large but never smaller than the echo's age minus ack_delay_us. */
static void ack_rtt(ltp_core_t *c, peer_t *p, txmsg_t *m, const hdr_t *h, uint64_t now)
{
    uint32_t age = (uint32_t)now - h->echo_ts;
    txpkt_t *echo = &m->pk[m->seq_idx[h->echo_seq]];
    if (echo->tx_seq != h->echo_seq || (uint64_t)age > now || age >= 60000000u) return;
    uint64_t bit = 1ull << (h->echo_seq % 64), *w = &m->seq_rtt[h->echo_seq / 64];
    if (*w & bit) return;
    *w |= bit;
    uint32_t delay = MIN(h->ack_delay, c->cfg.ack_delay_us);
    double rtt = (double)age - (double)MIN(delay, age);
    rtt_sample(c, p, rtt, now);
    if (!m->rack_valid || h->echo_seq >= m->rack_seq) {
        m->rack_valid = 1;
        m->rack_seq = h->echo_seq;
        m->rack_sent_us = now - age;
        m->rack_rtt_us = age;
    }
}

int tx_on_ack(ltp_core_t *c, peer_t *p, const hdr_t *h, uint64_t now)
{
    c->st[LTP_S_ACKS_RECEIVED]++;
    txmsg_t *m = tx_find(c, p, h->msg_id, h->segment);
    if (!m || m->done) { c->st[LTP_S_STRAY_CONTROL]++; return LTP_OK; }
    if (h->base > m->count || h->received > m->count || (uint64_t)h->base + h->bits > (uint64_t)m->count + 7) {
        c->st[LTP_S_MALFORMED]++;
        return LTP_EMALFORMED;
    }
    if (!echo_sent(m, h)) { c->st[LTP_S_BAD_ECHO]++; return LTP_EREJECTED; }
    rate_on_hint(c, p, h->hint_kbps, now);
    const txpkt_t *newest = NULL;
    uint32_t acked_before = m->n_acked;
    for (uint32_t i = m->ack_floor; i < h->base; i++) ack_pkt(p, m, i, &newest);
    if (h->base > m->ack_floor) m->ack_floor = h->base;
    for (uint32_t j = 0; j < h->bits; j += 8) {
        uint8_t byte = h->bitmap[j / 8];
        for (uint32_t k = 0; byte && k < 8; k++, byte >>= 1)
            if ((byte & 1) && h->base + j + k < m->count) ack_pkt(p, m, h->base + j + k, &newest);
    }
    ack_rtt(c, p, m, h, now);
    if (newest) {
        p->fl->bbr.delivered_us = now;
        if (c->cfg.cc) bbr_on_ack(c, p, newest, now);
    }
    if (m->n_acked > acked_before) m->pto_count = 0;
    if (m->n_acked == m->count) { tx_finish(c, p, m, LTP_SEND_ALL_ACKED, now); return LTP_OK; }
    rack_detect(c, p, m, now);
    return LTP_OK;
}

int tx_on_close(ltp_core_t *c, peer_t *p, const hdr_t *h, uint64_t now)
{
    txmsg_t *m = tx_find(c, p, h->msg_id, h->segment);
    if (!m || m->done) { c->st[LTP_S_STRAY_CONTROL]++; return LTP_OK; }
    if (!echo_sent(m, h)) { c->st[LTP_S_BAD_ECHO]++; return LTP_EREJECTED; }
    /* The receiver cannot hold more distinct packets than we sent (m->packets: the first pass
     * sends each index once; sent_before: what released sends of this key sent), nor count the
     * message differently. */
    if (h->close_count != m->count || h->received > m->packets + m->sent_before) {
        c->st[LTP_S_BAD_CLOSE]++;
        return LTP_EREJECTED;
    }
    m->peer_received = h->received;
    tx_finish(c, p, m, h->reason == LTP_CLOSE_STALE ? LTP_SEND_STALE : LTP_SEND_CLOSED, now);
    return LTP_OK;
}

/* ---------------------------------------------------------------- the application's side */
static int build_order(ltp_core_t *c, peer_t *p, txmsg_t *m)
{
    m->order = malloc((size_t)m->count * sizeof *m->order);
    if (!m->order) return LTP_ENOMEM;
    for (uint32_t i = 0; i < m->count; i++) m->order[i] = i;
    if (c->cfg.send_order == LTP_ORDER_RANDOM && m->count > m->critical + 1) {
        /* Seeded per (seed, peer, message) so a run is reproducible; critical packets stay first. */
        uint64_t s = c->cfg.seed ^ ((uint64_t)p->rank << 32) ^ m->msg_id ^ ((uint64_t)m->segment << 48);
        for (uint32_t i = m->count - 1; i > m->critical; i--) {
            uint32_t j = m->critical + (uint32_t)(ltp_splitmix64(&s) % (i - m->critical + 1));
            uint32_t t = m->order[i]; m->order[i] = m->order[j]; m->order[j] = t;
        }
    }
    return LTP_OK;
}

/* A digest of a message's bytes: a retry resumes a suspended send only if it carries the same
 * message (the PS may send other parameters under an id whose send timed out). The key is fixed:
 * it tells an application's messages apart and authenticates nothing. */
static uint64_t payload_digest(const void *data, uint32_t len)
{
    static const uint8_t key[LTP_KEY_BYTES] = {0};
    return ltp_siphash24(key, data, len);
}

/* Forget send m, cancelling it if unfinished. Its receiver may hold what it sent, so a later
 * send of the key may be closed with that many packets: remember them (sent_before). */
static void tx_drop(ltp_core_t *c, peer_t *p, txmsg_t *m)
{
    if (!m->done) {
        tx_finish(c, p, m, LTP_SEND_PENDING, 0);
        c->st[LTP_S_SENDS_CANCELLED]++;
    }
    released_t *r = &p->released[p->released_head++ % c->released_cap];
    *r = (released_t){m->msg_id, (uint32_t)MIN((uint64_t)m->count, m->packets + m->sent_before), m->segment, 1};
    tx_free(m);
}

/* The caller sends suspended send m again (the same message, now at data): it goes on where it
 * stopped, or, done meanwhile, is done at once. */
static void tx_resume(ltp_core_t *c, txmsg_t *m, const void *data, uint64_t now)
{
    m->data = data;
    m->suspended = 0;
    m->pto_count = 0;
    m->last_sent_us = now;   /* its probe timeout runs from the retry */
    if (!m->done) c->st[LTP_S_SENDS_RESUMED]++;
}

/* A slot for a new send to p: a free one, else that of the suspended send queued first. A
 * suspended send of an older id of the segment is dropped first: its caller moved on. */
static txmsg_t *tx_slot(ltp_core_t *c, peer_t *p, uint32_t msg_id, uint16_t seg)
{
    txmsg_t *m = NULL, *oldest = NULL;
    for (uint32_t i = 0; i < c->cfg.max_tx_per_peer; i++) {
        txmsg_t *o = &p->tx[i];
        if (o->used && o->suspended && o->segment == seg && seq_lt(o->msg_id, msg_id)) tx_drop(c, p, o);
        if (!o->used) { if (!m) m = o; }
        else if (o->suspended && (!oldest || o->enq_seq < oldest->enq_seq)) oldest = o;
    }
    if (!m && oldest) { tx_drop(c, p, oldest); m = oldest; }
    return m;
}

int ltp_core_send(ltp_core_t *c, int peer, uint32_t msg_id, uint16_t seg, const void *data,
                  uint32_t len, uint32_t critical_bytes, uint64_t now)
{
    peer_t *p = core_peer(c, peer);
    if (!p || !data || len == 0 || len % 4 || len > c->cfg.max_msg_bytes || critical_bytes > len)
        return LTP_EINVAL;
    if (auth_ready(c, p)) return LTP_EAUTH;
    index_touch(c, p);   /* whatever follows changes p's sends (ltp_index.c) */
    uint32_t count = (uint32_t)(((uint64_t)len + c->chunk - 1) / c->chunk);
    uint32_t critical = (uint32_t)(((uint64_t)critical_bytes + c->chunk - 1) / c->chunk);
    if (critical > 0xFFFF) return LTP_EINVAL;
    txmsg_t *m = tx_find(c, p, msg_id, seg);
    if (m && !m->suspended) return LTP_EBUSY;
    if (m && m->total == len && m->critical == critical && m->digest == payload_digest(data, len)) {
        tx_resume(c, m, data, now);
        return LTP_OK;
    }
    if (m) tx_drop(c, p, m);   /* another message under the key: a new send */
    m = tx_slot(c, p, msg_id, seg);
    if (!m) return LTP_EFULL;
    memset(m, 0, sizeof *m);
    m->msg_id = msg_id; m->segment = seg; m->data = data; m->total = len; m->count = count;
    m->chunk = c->chunk; m->critical = critical; m->start_us = now; m->last_sent_us = now;
    for (uint32_t i = 0; i < c->released_cap; i++)   /* sent before, then released */
        if (p->released[i].used && p->released[i].msg_id == msg_id && p->released[i].segment == seg)
            m->sent_before = MAX(m->sent_before, p->released[i].packets);
    m->pk = calloc(count, sizeof *m->pk);
    m->lost = calloc((count + 63) / 64, sizeof *m->lost);
    m->seq_cap = count + count / 4 + 16;
    m->seq_idx = malloc((size_t)m->seq_cap * sizeof *m->seq_idx);
    m->seq_ts = malloc((size_t)m->seq_cap * sizeof *m->seq_ts);
    m->seq_rtt = calloc((m->seq_cap + 63) / 64, sizeof *m->seq_rtt);
    m->lost_cursor = count;
    m->rack_timer_us = NEVER;
    m->enq_seq = c->n_enqueued++;
    if (!m->pk || !m->lost || !m->seq_idx || !m->seq_ts || !m->seq_rtt || build_order(c, p, m) != LTP_OK) {
        tx_free(m);
        return LTP_ENOMEM;
    }
    m->used = 1;
    return LTP_OK;
}

int ltp_core_send_status(ltp_core_t *c, int peer, uint32_t msg_id, uint16_t seg, ltp_send_stats_t *s,
                         uint64_t now)
{
    peer_t *p = core_peer(c, peer);
    if (!p) return LTP_EINVAL;
    txmsg_t *m = tx_find(c, p, msg_id, seg);
    if (!m) return LTP_ENOTFOUND;
    if (s) {
        s->packets = m->packets; s->retransmits = m->retransmits; s->wire_bytes = m->wire_bytes;
        s->acked_packets = m->n_acked; s->count = m->count; s->done = (uint64_t)m->done_reason;
        s->peer_received = m->done_reason == LTP_SEND_ALL_ACKED ? m->count : m->peer_received;
        s->elapsed_us = (m->done ? m->done_us : now) - m->start_us;
        s->srtt_us = p->srtt_us;
        s->pacing_rate_mbps = pacing_rate(c, p, now) * 8.0;
        s->btl_bw_mbps = p->fl->bbr.btl_bw * 8.0;
        s->wait_us = m->tx_seq_next ? m->first_tx_us - m->start_us : 0;
        s->first_pass_us = m->first_pass_us;
        s->max_gap_us = m->max_gap_us;
        s->probes = m->probes;
    }
    return m->done ? 1 : 0;
}

int ltp_core_send_suspend(ltp_core_t *c, int peer, uint32_t msg_id, uint16_t seg)
{
    peer_t *p = core_peer(c, peer);
    if (!p) return LTP_EINVAL;
    txmsg_t *m = tx_find(c, p, msg_id, seg);
    if (!m) return LTP_ENOTFOUND;
    if (m->suspended) return LTP_OK;
    index_touch(c, p);
    /* The caller may free its message now: a suspended send sends no DATA (tx_pick), so nothing
     * points into it, and the digest is all a retry is checked against. */
    m->digest = payload_digest(m->data, m->total);
    m->data = NULL;
    m->suspended = 1;
    if (!m->done) c->st[LTP_S_SENDS_SUSPENDED]++;
    /* Probed without an answer: its peer is silent (gone, cut off), so no ACK will free the
     * window. Otherwise its packets in flight stay there, and their ACKs still count. */
    if (!m->done && m->pto_count) tx_let_go(c, p, m);
    return LTP_OK;
}

int ltp_core_send_release(ltp_core_t *c, int peer, uint32_t msg_id, uint16_t seg)
{
    peer_t *p = core_peer(c, peer);
    if (!p) return LTP_EINVAL;
    txmsg_t *m = tx_find(c, p, msg_id, seg);
    if (!m) return LTP_ENOTFOUND;
    tx_drop(c, p, m);
    index_touch(c, p);
    return LTP_OK;
}

/* ---------------------------------------------------------------- DATA out */
/* Lowest index waiting for retransmission, or count if none. */
static uint32_t lowest_lost(txmsg_t *m)
{
    if (!m->n_lost) return m->count;
    uint32_t nw = (m->count + 63) / 64;
    for (uint32_t w = m->lost_cursor / 64; w < nw; w++) {
        uint64_t bits = m->lost[w];
        if (w == m->lost_cursor / 64) bits &= ~0ull << (m->lost_cursor % 64);
        if (bits) {
            m->lost_cursor = w * 64 + (uint32_t)__builtin_ctzll(bits);
            return m->lost_cursor;
        }
    }
    m->lost_cursor = m->count;
    return m->count;   /* unreachable while n_lost is right */
}

/* Which packet of m goes next, or count if none. Sets *retrans. */
uint32_t tx_pick(const ltp_core_t *c, txmsg_t *m, int *retrans)
{
    if (m->done || m->suspended) return m->count;
    uint32_t lost = lowest_lost(m);
    int first_left = m->next_first < m->count;
    /* sequential: retransmissions before new data (TCP-like); priority/random: only critical
     * retransmissions jump ahead of the first pass, so the first pass ends as early as possible. */
    int rtx_first = c->cfg.send_order == LTP_ORDER_SEQUENTIAL || lost < m->critical;
    if (lost < m->count && (rtx_first || !first_left)) { *retrans = 1; return lost; }
    if (first_left) { *retrans = 0; return m->order[m->next_first]; }
    return m->count;
}

/* Account packet i of m as sent now (first pass or retransmission). */
static void tx_account(ltp_core_t *c, peer_t *p, txmsg_t *m, uint32_t i, int retrans, uint64_t now)
{
    txpkt_t *k = &m->pk[i];
    if (retrans) {
        m->lost[i / 64] &= ~(1ull << (i % 64));
        m->n_lost--;
        m->retransmits++;
        c->st[LTP_S_RETRANSMITS]++;
    } else {
        m->next_first++;
        m->packets++;
        if (m->next_first == m->count) m->first_pass_us = MAX(now - m->start_us, 1);
    }
    if (m->tx_seq_next == 0) m->first_tx_us = now;
    else m->max_gap_us = MAX(m->max_gap_us, now - m->last_tx_us);
    m->last_tx_us = now;
    if (p->fl->inflight_bytes == 0) p->fl->bbr.first_sent_us = p->fl->bbr.delivered_us = now;
    k->state = PK_INFLIGHT;
    k->tx_seq = m->tx_seq_next;
    k->sent_us = now;
    k->delivered = p->fl->bbr.delivered;
    k->delivered_us = p->fl->bbr.delivered_us;
    k->first_sent_us = p->fl->bbr.first_sent_us;
    k->app_limited = p->fl->bbr.app_limited_until != 0;
    m->seq_idx[m->tx_seq_next++] = i;
    m->inflight_pkts++;
    m->last_sent_us = now;
    p->fl->inflight_bytes += wire_len(m, i);
    p->fl->bbr.round_max_inflight = MAX(p->fl->bbr.round_max_inflight, p->fl->inflight_bytes);
}

int tx_build_data(ltp_core_t *c, peer_t *p, txmsg_t *m, uint32_t i, int retrans, int probe,
                  uint64_t now, uint8_t *b, size_t cap, const uint8_t **payload)
{
    uint32_t len = tx_pkt_len(m, i);
    if (cap < LTP_DATA_HDR_BYTES + (payload ? 0 : len)) return LTP_EINVAL;
    if (m->tx_seq_next >= m->seq_cap) {
        uint32_t ncap = m->seq_cap * 2;
        uint32_t *n = realloc(m->seq_idx, (size_t)ncap * sizeof *n);
        if (!n) return LTP_ENOMEM;
        m->seq_idx = n;
        uint32_t *ts = realloc(m->seq_ts, (size_t)ncap * sizeof *ts);
        if (!ts) return LTP_ENOMEM;
        m->seq_ts = ts;
        size_t words = (m->seq_cap + 63) / 64, nwords = (ncap + 63) / 64;
        uint64_t *rtt = realloc(m->seq_rtt, nwords * sizeof *rtt);
        if (!rtt) return LTP_ENOMEM;
        memset(rtt + words, 0, (nwords - words) * sizeof *rtt);
        m->seq_rtt = rtt;
        m->seq_cap = ncap;
    }
    tx_account(c, p, m, i, retrans, now);
    hdr_t h = core_header(c, LTP_T_DATA, m->msg_id, m->segment);
    h.flags = (uint8_t)((i < m->critical ? LTP_F_CRITICAL : 0) | (retrans ? LTP_F_RETRANSMIT : 0) |
                        (m->next_first >= m->count ? LTP_F_PASS_DONE : 0) | (probe ? LTP_F_PROBE : 0));
    h.critical = (uint16_t)m->critical;
    h.index = i; h.count = m->count; h.offset = i * m->chunk; h.total = m->total;
    h.payload_len = (uint16_t)len; h.tx_seq = m->pk[i].tx_seq; h.ts = (uint32_t)now;
    h.open_back = open_back(c, p, m);
    m->seq_ts[h.tx_seq] = h.ts;
    h.srtt = (uint32_t)MIN(p->has_rtt ? p->srtt_us : 0, 4e9);
    h.payload = m->data + (size_t)i * m->chunk;
    int n = (int)(LTP_DATA_HDR_BYTES + len);
    if (payload) {
        wire_put_data_hdr(b, &h);
        *payload = h.payload;
    } else {
        wire_put_data(b, &h);
    }
    m->wire_bytes += (uint64_t)n + auth_trailer(&c->cfg);
    c->st[LTP_S_DATA_SENT]++;
    return n;
}
