/* ltp_auth.c: the per-datagram MAC and the replay window. SipHash-2-4 (Aumasson and Bernstein,
 * "SipHash: a fast short-input PRF", 2012), written from the paper: a 128-bit key, 2 compression
 * rounds per 8-byte word, 4 finalization rounds, a 64-bit tag. It is a PRF built for short
 * inputs, which is what a datagram is, and costs about 1.5 cycles per byte here with no SIMD,
 * tables or library; its 64-bit tag leaves a forger one chance in 2^64 per try under a key that
 * lives for one run.
 *
 * Keys are per pair: the two ends of a pair (the PS and one worker, two members of a collective)
 * hold the same 16-byte key, set per peer slot (ltp_core_set_peer_key), and no other host has it.
 * Each direction seals under its own key, derived from the pair's and the receiver's rank (two
 * SipHash outputs of "ltp-dst" and the rank), so a datagram cannot be reflected back to its
 * sender either. The sender's rank is inside the tagged header and must be the slot's.
 *
 * Every datagram of an endpoint with auth on ends in a 16-byte trailer: its number (u64, one
 * sequence per direction of a pair, starting at the sender's clock when it first seals for that
 * peer) and then an 8-byte tag over every byte before it; its WIRE_MAC byte says
 * LTP_MAC_SIPHASH24. A receiver keeps per peer the newest number it accepted and a bitmap of the
 * replay_window numbers up to it, and refuses a number seen before or one too old (replayed):
 * a datagram accepted once is never accepted again, whatever its type. The window moves only for
 * a datagram whose tag checked out. docs/ltp-protocol.md §11.
 */
#include "ltp_internal.h"

#include <openssl/evp.h>
#include <string.h>

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void wr64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

/* One SipRound (the paper's figure 2). */
#define SIPROUND                                                         \
    do {                                                                 \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);        \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                           \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                           \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);        \
    } while (0)

/* SipHash-2-4 over a message given in parts (a header here, a payload elsewhere): the state, the
 * bytes of a word not complete yet, and the length so far. */
typedef struct { uint64_t v0, v1, v2, v3, tail; size_t len; } sip_t;

static void sip_init(sip_t *s, const uint8_t key[16])
{
    uint64_t k0 = rd64(key), k1 = rd64(key + 8);
    s->v0 = k0 ^ 0x736f6d6570736575ull; s->v1 = k1 ^ 0x646f72616e646f6dull;
    s->v2 = k0 ^ 0x6c7967656e657261ull; s->v3 = k1 ^ 0x7465646279746573ull;
    s->tail = 0;
    s->len = 0;
}

static void sip_word(sip_t *s, uint64_t m)
{
    uint64_t v0 = s->v0, v1 = s->v1, v2 = s->v2, v3 = s->v3;
    v3 ^= m;
    SIPROUND; SIPROUND;
    v0 ^= m;
    s->v0 = v0; s->v1 = v1; s->v2 = v2; s->v3 = v3;
}

static void sip_update(sip_t *s, const uint8_t *msg, size_t len)
{
    /* Complete a word begun by the previous part, byte by byte. */
    while (len && s->len % 8) {
        s->tail |= (uint64_t)*msg++ << (8 * (s->len % 8));
        s->len++;
        len--;
        if (s->len % 8 == 0) { sip_word(s, s->tail); s->tail = 0; }
    }
    size_t words = len / 8;
    /* The state in locals for the bulk: msg may alias *s as far as the compiler knows. */
    uint64_t v0 = s->v0, v1 = s->v1, v2 = s->v2, v3 = s->v3;
    for (size_t i = 0; i < words; i++) {
        uint64_t m;
        memcpy(&m, msg + 8 * i, 8);   /* the words are little-endian; so is every host we run on */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        m = rd64(msg + 8 * i);
#endif
        v3 ^= m;
        SIPROUND; SIPROUND;
        v0 ^= m;
    }
    s->v0 = v0; s->v1 = v1; s->v2 = v2; s->v3 = v3;
    s->len += 8 * words;
    for (size_t i = 8 * words; i < len; i++) {
        s->tail |= (uint64_t)msg[i] << (8 * (s->len % 8));
        s->len++;
    }
}

static uint64_t sip_final(sip_t *s)
{
    /* The last word: the remaining bytes, then the length modulo 256 in the top byte. */
    uint64_t b = s->tail | (uint64_t)(s->len & 0xFF) << 56;
    sip_word(s, b);
    uint64_t v0 = s->v0, v1 = s->v1, v2 = s->v2 ^ 0xFF, v3 = s->v3;
    SIPROUND; SIPROUND; SIPROUND; SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t ltp_siphash24(const uint8_t key[16], const uint8_t *msg, size_t len)
{
    sip_t s;
    sip_init(&s, key);
    sip_update(&s, msg, len);
    return sip_final(&s);
}

/* The tag of head[0..head_len), then payload[0..payload_len), then tail[0..tail_len). */
static uint64_t sip_parts(const uint8_t key[16], const uint8_t *head, size_t head_len,
                          const uint8_t *payload, size_t payload_len, const uint8_t *tail,
                          size_t tail_len)
{
    sip_t s;
    sip_init(&s, key);
    sip_update(&s, head, head_len);
    if (payload_len) sip_update(&s, payload, payload_len);
    if (tail_len) sip_update(&s, tail, tail_len);
    return sip_final(&s);
}

/* AES-128-GMAC (NIST SP 800-38D: GCM with the datagram as additional data and nothing
 * encrypted) under a direction key, the datagram's number as the first 8 bytes of its 96-bit IV,
 * the tag cut to its first 8 bytes. A context holds the key's AES schedule; each tag only sets
 * the IV. OpenSSL's GCM uses AES-NI and carry-less multiplication where the CPU has them. */
void *auth_gmac_new(const uint8_t key[LTP_KEY_BYTES])
{
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    if (x && EVP_EncryptInit_ex(x, EVP_aes_128_gcm(), NULL, key, NULL) == 1) return x;
    EVP_CIPHER_CTX_free(x);
    return NULL;
}

uint64_t auth_gmac_parts(void *ctx, uint64_t pseq, const uint8_t *head, size_t head_len,
                         const uint8_t *payload, size_t payload_len, const uint8_t *tail,
                         size_t tail_len)
{
    EVP_CIPHER_CTX *x = ctx;
    uint8_t iv[12] = {0}, tag[16];
    int n;
    wr64(iv, pseq);
    /* Each part is additional data; GCM takes it in as many calls as it comes in. A failure
     * (none is expected once the context holds its key) gives a tag no sender made. */
    if (EVP_EncryptInit_ex(x, NULL, NULL, NULL, iv) != 1 ||
        EVP_EncryptUpdate(x, NULL, &n, head, (int)head_len) != 1 ||
        (payload_len && EVP_EncryptUpdate(x, NULL, &n, payload, (int)payload_len) != 1) ||
        (tail_len && EVP_EncryptUpdate(x, NULL, &n, tail, (int)tail_len) != 1) ||
        EVP_EncryptFinal_ex(x, tag, &n) != 1 ||
        EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_GET_TAG, sizeof tag, tag) != 1)
        return ~pseq;
    return rd64(tag);
}

uint64_t ltp_gmac128(const uint8_t key[16], uint64_t pseq, const uint8_t *msg, size_t len)
{
    void *x = auth_gmac_new(key);
    uint64_t tag = x ? auth_gmac_parts(x, pseq, msg, len, NULL, 0, NULL, 0) : ~pseq;
    EVP_CIPHER_CTX_free(x);
    return tag;
}

/* The tag of the parts under p's key of one direction (tx: to it, else from it), by the
 * endpoint's algorithm; pseq is the datagram's number (the GMAC's IV). */
static uint64_t tag_parts(const ltp_core_t *c, const peer_t *p, int tx, uint64_t pseq,
                          const uint8_t *head, size_t head_len, const uint8_t *payload,
                          size_t payload_len, const uint8_t *tail, size_t tail_len)
{
    if (auth_kind(c) == LTP_MAC_GMAC128)
        return auth_gmac_parts(tx ? p->tx_gmac : p->rx_gmac, pseq, head, head_len, payload,
                               payload_len, tail, tail_len);
    return sip_parts(tx ? p->tx_key : p->rx_key, head, head_len, payload, payload_len, tail,
                     tail_len);
}

int auth_kind(const ltp_core_t *c)
{
    if (!c->cfg.auth) return LTP_MAC_NONE;
    return c->cfg.mac == LTP_MAC_ALG_GMAC128 ? LTP_MAC_GMAC128 : LTP_MAC_SIPHASH24;
}

size_t auth_trailer(const ltp_config_t *cfg) { return cfg->auth ? LTP_TRAILER_BYTES : 0; }

void auth_derive(const uint8_t key[LTP_KEY_BYTES], uint16_t rank, uint8_t out[LTP_KEY_BYTES])
{
    uint8_t label[10] = {'l', 't', 'p', '-', 'd', 's', 't', 0, (uint8_t)rank, (uint8_t)(rank >> 8)};
    wr64(out, ltp_siphash24(key, label, sizeof label));
    label[7] = 1;
    wr64(out + 8, ltp_siphash24(key, label, sizeof label));
}

static void auth_free_gmac(peer_t *p)
{
    EVP_CIPHER_CTX_free(p->tx_gmac);
    EVP_CIPHER_CTX_free(p->rx_gmac);
    p->tx_gmac = p->rx_gmac = NULL;
}

static uint32_t window_words(const ltp_config_t *cfg) { return (cfg->replay_window + 63) / 64; }

int ltp_core_set_peer_key(ltp_core_t *c, int peer, const uint8_t *key, size_t len)
{
    peer_t *p = core_peer(c, peer);
    if (!p || !key || len != LTP_KEY_BYTES) return LTP_EINVAL;
    if (p->has_key && memcmp(p->pair_key, key, LTP_KEY_BYTES) == 0) return LTP_OK;
    if (!p->rx_seen && !(p->rx_seen = calloc(window_words(&c->cfg), sizeof *p->rx_seen)))
        return LTP_ENOMEM;
    memcpy(p->pair_key, key, LTP_KEY_BYTES);
    auth_derive(key, c->self_rank, p->rx_key);
    auth_derive(key, p->rank, p->tx_key);
    if (auth_kind(c) == LTP_MAC_GMAC128) {
        auth_free_gmac(p);
        if (!(p->rx_gmac = auth_gmac_new(p->rx_key)) || !(p->tx_gmac = auth_gmac_new(p->tx_key))) {
            auth_free_gmac(p);
            p->has_key = 0;
            return LTP_ENOMEM;
        }
    }
    p->has_key = 1;
    p->rx_any = 0;   /* numbers under another key say nothing about this one's */
    return LTP_OK;
}

int auth_ready(const ltp_core_t *c, const peer_t *p)
{
    return c->cfg.auth && !p->has_key ? LTP_EAUTH : LTP_OK;
}

void auth_free(peer_t *p)
{
    free(p->rx_seen);
    p->rx_seen = NULL;
    auth_free_gmac(p);
}

int auth_check(const ltp_core_t *c, const peer_t *p, const uint8_t *b, size_t len,
               const uint8_t *payload, uint64_t *pseq)
{
    if (!b || len < LTP_HDR_BYTES || b[WIRE_MAC] > LTP_MAC_GMAC128) return LTP_EMALFORMED;
    if (!c->cfg.auth) return b[WIRE_MAC] == LTP_MAC_NONE ? (int)len : LTP_EAUTH;
    if (!p) return LTP_EPEER;   /* no slot, no key to check it with */
    /* Only the endpoint's own algorithm is accepted: a sender cannot choose another. */
    if (!p->has_key || b[WIRE_MAC] != auth_kind(c) || len < LTP_HDR_BYTES + LTP_TRAILER_BYTES)
        return LTP_EAUTH;
    size_t n = len - LTP_TRAILER_BYTES;
    uint8_t want[LTP_MAC_BYTES];
    const uint8_t *trailer = b + n;
    if (payload) {   /* a DATA read apart: header and trailer at b, the payload in its place */
        if (n < LTP_DATA_HDR_BYTES) return LTP_EMALFORMED;
        trailer = b + LTP_DATA_HDR_BYTES;
        wr64(want, tag_parts(c, p, 0, rd64(trailer), b, LTP_DATA_HDR_BYTES, payload,
                             n - LTP_DATA_HDR_BYTES, trailer, LTP_PSEQ_BYTES));
    } else {
        wr64(want, tag_parts(c, p, 0, rd64(trailer), b, n + LTP_PSEQ_BYTES, NULL, 0, NULL, 0));
    }
    /* Constant time: how much of a guessed tag was right must not show in the timing. */
    const uint8_t *tag = trailer + LTP_PSEQ_BYTES;
    uint8_t diff = 0;
    for (size_t i = 0; i < LTP_MAC_BYTES; i++) diff |= (uint8_t)(want[i] ^ tag[i]);
    if (diff) return LTP_EAUTH;
    *pseq = rd64(trailer);
    return (int)n;
}

/* The ring bitmap holds number s at bit s mod W (W: whole words of replay_window). */
static int seen(const peer_t *p, uint64_t s, uint64_t w)
{
    uint64_t i = s % w;
    return (int)(p->rx_seen[i / 64] >> (i % 64) & 1);
}

static void mark(peer_t *p, uint64_t s, uint64_t w, int on)
{
    uint64_t i = s % w;
    if (on) p->rx_seen[i / 64] |= 1ull << (i % 64);
    else p->rx_seen[i / 64] &= ~(1ull << (i % 64));
}

int auth_window(ltp_core_t *c, peer_t *p, uint64_t s)
{
    if (!c->cfg.auth) return LTP_OK;
    uint64_t words = window_words(&c->cfg), w = 64 * words;
    if (p->rx_any && s <= p->rx_top) {
        if (p->rx_top - s >= w || seen(p, s, w)) {
            c->st[LTP_S_REPLAYED]++;
            return LTP_EREJECTED;
        }
    } else {   /* a new newest: the numbers between the last newest and it were not seen */
        if (!p->rx_any || s - p->rx_top >= w) memset(p->rx_seen, 0, words * sizeof *p->rx_seen);
        else for (uint64_t k = p->rx_top + 1; k < s; k++) mark(p, k, w, 0);
        p->rx_top = s;
        p->rx_any = 1;
    }
    mark(p, s, w, 1);
    return LTP_OK;
}

int auth_seal(const ltp_core_t *c, peer_t *p, uint8_t *b, int n, const uint8_t *payload,
              uint64_t now)
{
    if (n <= 0 || !c->cfg.auth) return n;
    /* Numbers start at the sender's clock, so an end restarted in the same run (same pair key)
     * starts above every number its earlier incarnation used, as long as that one sent fewer
     * than one datagram per microsecond on average. */
    if (!p->tx_pseq) p->tx_pseq = MAX(now, 1);
    uint64_t s = p->tx_pseq++;
    b[WIRE_MAC] = (uint8_t)auth_kind(c);
    uint8_t *trailer = payload ? b + LTP_DATA_HDR_BYTES : b + n;
    wr64(trailer, s);
    if (payload)   /* a DATA by reference: the trailer behind its header, sent after the payload */
        wr64(trailer + LTP_PSEQ_BYTES,
             tag_parts(c, p, 1, s, b, LTP_DATA_HDR_BYTES, payload, (size_t)n - LTP_DATA_HDR_BYTES,
                       trailer, LTP_PSEQ_BYTES));
    else
        wr64(trailer + LTP_PSEQ_BYTES,
             tag_parts(c, p, 1, s, b, (size_t)n + LTP_PSEQ_BYTES, NULL, 0, NULL, 0));
    return n + (int)LTP_TRAILER_BYTES;
}
