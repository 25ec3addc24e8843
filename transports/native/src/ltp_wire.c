/* ltp_wire.c: the LTP wire codec. Every field is read and written at its named offset
 * (ltp_internal.h, WIRE_*); docs/ltp-protocol.md §2 describes the format. Parsing is stateless
 * validation: everything that can be checked from the datagram alone is checked here, so the
 * state machines only ever see well-formed headers.
 */
#include "ltp_internal.h"

#include <string.h>

/* ---------------------------------------------------------------- little-endian helpers */
static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static void wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

/* ---------------------------------------------------------------- parse */
/* Packets are equal chunks with a shorter last one, so a DATA's offset is determined by its index
 * and the message's shape must be one that a sender could have cut. */
static int parse_data(const ltp_config_t *cfg, const uint8_t *b, size_t len, hdr_t *h)
{
    if (len < LTP_DATA_HDR_BYTES || (h->flags & ~0x0Fu)) return LTP_EMALFORMED;
    h->index = rd32(b + WIRE_DATA_INDEX); h->count = rd32(b + WIRE_DATA_COUNT);
    h->offset = rd32(b + WIRE_DATA_OFFSET); h->total = rd32(b + WIRE_DATA_TOTAL);
    h->payload_len = rd16(b + WIRE_DATA_LEN); h->open_back = rd16(b + WIRE_DATA_OPEN_BACK);
    h->tx_seq = rd32(b + WIRE_DATA_TX_SEQ); h->ts = rd32(b + WIRE_DATA_TS);
    h->srtt = rd32(b + WIRE_DATA_SRTT);
    h->payload = b + LTP_DATA_HDR_BYTES;
    uint64_t off = h->offset, pl = h->payload_len, tot = h->total, cnt = h->count;
    if (pl != len - LTP_DATA_HDR_BYTES || pl == 0) return LTP_EMALFORMED;
    if (tot == 0 || tot > cfg->max_msg_bytes || (tot | off | pl) % 4) return LTP_EMALFORMED;
    if (cnt == 0 || h->index >= cnt || cnt > tot / 4 || off + pl > tot) return LTP_EMALFORMED;
    if (h->critical > cnt || ((h->flags & LTP_F_CRITICAL) != 0) != (h->index < h->critical))
        return LTP_EMALFORMED;
    if (h->index + 1 < cnt) {
        if (off != (uint64_t)h->index * pl || (cnt - 1) * pl >= tot || tot > cnt * pl) return LTP_EMALFORMED;
    } else if (cnt == 1) {
        if (off != 0 || pl != tot) return LTP_EMALFORMED;
    } else {
        uint64_t ch = off / (cnt - 1);
        if (off % (cnt - 1) || ch == 0 || ch % 4 || off + pl != tot || pl > ch) return LTP_EMALFORMED;
    }
    return LTP_OK;
}

static int parse_ack(const uint8_t *b, size_t len, hdr_t *h)
{
    if (len < LTP_ACK_HDR_BYTES) return LTP_EMALFORMED;
    h->received = rd32(b + WIRE_ACK_RECEIVED); h->base = rd32(b + WIRE_ACK_BASE);
    h->echo_ts = rd32(b + WIRE_ACK_ECHO_TS); h->ack_delay = rd32(b + WIRE_ACK_DELAY);
    h->echo_seq = rd32(b + WIRE_ACK_ECHO_SEQ); h->bits = rd16(b + WIRE_ACK_BITS);
    h->hint_kbps = rd32(b + WIRE_ACK_HINT);   /* any value is a rate; 0 means "no hint" */
    h->bitmap = b + LTP_ACK_HDR_BYTES;
    if (rd16(b + WIRE_ACK_PAD) != 0 || h->bits % 8 || len != LTP_ACK_HDR_BYTES + h->bits / 8u)
        return LTP_EMALFORMED;
    if (h->received < h->base) return LTP_EMALFORMED;
    return LTP_OK;
}

static int parse_close(const uint8_t *b, size_t len, hdr_t *h)
{
    if (len != LTP_CLOSE_BYTES) return LTP_EMALFORMED;
    h->received = rd32(b + WIRE_CLOSE_RECEIVED); h->close_count = rd32(b + WIRE_CLOSE_COUNT);
    h->reason = b[WIRE_CLOSE_REASON];
    h->echo_ts = rd32(b + WIRE_CLOSE_ECHO_TS); h->echo_seq = rd32(b + WIRE_CLOSE_ECHO_SEQ);
    const uint8_t *pad = b + WIRE_CLOSE_PAD;
    if (pad[0] || pad[1] || pad[2] || h->reason < LTP_CLOSE_COMPLETE || h->reason > LTP_CLOSE_STALE ||
        h->received > h->close_count)
        return LTP_EMALFORMED;
    return LTP_OK;
}

/* Worth authenticating: long enough for a header, ours by magic and version. */
int wire_plausible(const uint8_t *b, size_t len)
{
    return b && len >= LTP_HDR_BYTES && len <= LTP_MAX_DATAGRAM && rd16(b + WIRE_MAGIC) == LTP_MAGIC &&
           b[WIRE_VERSION] == LTP_VERSION;
}

/* b holds len bytes without the MAC trailer (auth_check stripped and checked it). */
int wire_parse(const ltp_config_t *cfg, const uint8_t *b, size_t len, hdr_t *h)
{
    if (!b || len < LTP_HDR_BYTES || len > LTP_MAX_DATAGRAM) return LTP_EMALFORMED;
    if (rd16(b + WIRE_MAGIC) != LTP_MAGIC || b[WIRE_VERSION] != LTP_VERSION || b[WIRE_MAC] > LTP_MAC_GMAC128)
        return LTP_EMALFORMED;
    memset(h, 0, sizeof *h);
    h->type = b[WIRE_TYPE]; h->flags = b[WIRE_FLAGS]; h->sender = rd16(b + WIRE_SENDER);
    h->session = rd32(b + WIRE_SESSION); h->msg_id = rd32(b + WIRE_MSG_ID);
    h->segment = rd16(b + WIRE_SEGMENT); h->critical = rd16(b + WIRE_CRITICAL);
    if (h->type != LTP_T_DATA && (h->flags || h->critical)) return LTP_EMALFORMED;
    switch (h->type) {
    case LTP_T_DATA: return parse_data(cfg, b, len, h);
    case LTP_T_ACK: return parse_ack(b, len, h);
    case LTP_T_CLOSE: return parse_close(b, len, h);
    case LTP_T_HELLO:
    case LTP_T_HELLO_ACK:
        return len == LTP_HDR_BYTES ? LTP_OK : LTP_EMALFORMED;
    default:
        return LTP_EMALFORMED;
    }
}

/* ---------------------------------------------------------------- write */
static void put_common(uint8_t *b, const hdr_t *h)
{
    wr16(b + WIRE_MAGIC, LTP_MAGIC); b[WIRE_VERSION] = LTP_VERSION; b[WIRE_TYPE] = h->type;
    b[WIRE_FLAGS] = h->flags; b[WIRE_MAC] = LTP_MAC_NONE;   /* auth_seal marks and tags it */
    wr16(b + WIRE_SENDER, h->sender); wr32(b + WIRE_SESSION, h->session);
    wr32(b + WIRE_MSG_ID, h->msg_id); wr16(b + WIRE_SEGMENT, h->segment);
    wr16(b + WIRE_CRITICAL, h->critical);
}

int wire_put_data_hdr(uint8_t *b, const hdr_t *h)
{
    put_common(b, h);
    wr32(b + WIRE_DATA_INDEX, h->index); wr32(b + WIRE_DATA_COUNT, h->count);
    wr32(b + WIRE_DATA_OFFSET, h->offset); wr32(b + WIRE_DATA_TOTAL, h->total);
    wr16(b + WIRE_DATA_LEN, h->payload_len); wr16(b + WIRE_DATA_OPEN_BACK, h->open_back);
    wr32(b + WIRE_DATA_TX_SEQ, h->tx_seq); wr32(b + WIRE_DATA_TS, h->ts);
    wr32(b + WIRE_DATA_SRTT, h->srtt);
    return (int)LTP_DATA_HDR_BYTES;
}

int wire_put_data(uint8_t *b, const hdr_t *h)
{
    wire_put_data_hdr(b, h);
    memcpy(b + LTP_DATA_HDR_BYTES, h->payload, h->payload_len);
    return (int)(LTP_DATA_HDR_BYTES + h->payload_len);
}

int wire_put_ack(uint8_t *b, const hdr_t *h)
{
    put_common(b, h);
    wr32(b + WIRE_ACK_RECEIVED, h->received); wr32(b + WIRE_ACK_BASE, h->base);
    wr32(b + WIRE_ACK_ECHO_TS, h->echo_ts); wr32(b + WIRE_ACK_DELAY, h->ack_delay);
    wr32(b + WIRE_ACK_ECHO_SEQ, h->echo_seq); wr16(b + WIRE_ACK_BITS, h->bits);
    wr16(b + WIRE_ACK_PAD, 0); wr32(b + WIRE_ACK_HINT, h->hint_kbps);
    return (int)(LTP_ACK_HDR_BYTES + h->bits / 8u);
}

int wire_put_close(uint8_t *b, const hdr_t *h)
{
    put_common(b, h);
    wr32(b + WIRE_CLOSE_RECEIVED, h->received); wr32(b + WIRE_CLOSE_COUNT, h->close_count);
    b[WIRE_CLOSE_REASON] = h->reason;
    memset(b + WIRE_CLOSE_PAD, 0, 3);
    wr32(b + WIRE_CLOSE_ECHO_TS, h->echo_ts); wr32(b + WIRE_CLOSE_ECHO_SEQ, h->echo_seq);
    return (int)LTP_CLOSE_BYTES;
}

int wire_put_hello(uint8_t *b, const hdr_t *h)
{
    put_common(b, h);
    return (int)LTP_HDR_BYTES;
}
