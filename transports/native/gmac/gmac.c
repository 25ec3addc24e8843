/* gmac.c: AES-128-GMAC with AES-NI and PCLMULQDQ (gmac.h says what the tag is and why this
 * is staged beside the core).
 *
 * GHASH works on byte-reversed blocks, so that a 128-bit block is one little-endian integer
 * whose bit order is the field's reflected one: a product of two such blocks is a 256-bit
 * carry-less product shifted left by one bit, reduced modulo x^128 + x^7 + x^2 + x + 1 in its
 * reflected form (Gueron and Kounavis, "Intel Carry-Less Multiplication Instruction and its
 * Usage for Computing the GCM Mode"). Eight blocks are hashed with one reduction: with H^1..H^8
 * kept in the key, (Y + X1) H^8 + X2 H^7 + ... + X8 H is summed unreduced, then reduced once. */
#include "gmac.h"

#include <immintrin.h>
#include <string.h>

#define TARGET __attribute__((target("aes,pclmul,ssse3,sse4.1")))

int gmac_native_ok(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul") &&
           __builtin_cpu_supports("ssse3");
}

TARGET static inline __m128i reversed(__m128i x)
{
    return _mm_shuffle_epi8(x, _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

TARGET static inline __m128i load(const uint8_t *p)
{
    return _mm_loadu_si128((const __m128i *)(const void *)p);
}

/* The unreduced product of a and b added into (lo, mid, hi): lo and hi the low and high
 * 64x64 products, mid the two cross products (a 64-bit shift apart from the others). */
TARGET static inline void mul_add(__m128i a, __m128i b, __m128i *lo, __m128i *mid, __m128i *hi)
{
    *lo = _mm_xor_si128(*lo, _mm_clmulepi64_si128(a, b, 0x00));
    *hi = _mm_xor_si128(*hi, _mm_clmulepi64_si128(a, b, 0x11));
    *mid = _mm_xor_si128(*mid, _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x01),
                                             _mm_clmulepi64_si128(a, b, 0x10)));
}

/* A sum of unreduced products, as one field element. */
TARGET static inline __m128i reduce(__m128i lo, __m128i mid, __m128i hi)
{
    lo = _mm_xor_si128(lo, _mm_slli_si128(mid, 8));
    hi = _mm_xor_si128(hi, _mm_srli_si128(mid, 8));
    /* The operands were reflected, so the 256-bit product [hi:lo] moves up one bit. */
    __m128i lo_top = _mm_srli_epi32(lo, 31), hi_top = _mm_srli_epi32(hi, 31);
    lo = _mm_or_si128(_mm_slli_epi32(lo, 1), _mm_slli_si128(lo_top, 4));
    hi = _mm_or_si128(_mm_or_si128(_mm_slli_epi32(hi, 1), _mm_slli_si128(hi_top, 4)),
                      _mm_srli_si128(lo_top, 12));
    /* Fold the low half into the high one: first the bits that cross a 32-bit lane ... */
    __m128i a = _mm_xor_si128(_mm_xor_si128(_mm_slli_epi32(lo, 31), _mm_slli_epi32(lo, 30)),
                              _mm_slli_epi32(lo, 25));
    __m128i spill = _mm_srli_si128(a, 4);
    lo = _mm_xor_si128(lo, _mm_slli_si128(a, 12));
    /* ... then x + x^2 + x^7's shifts of what remains. */
    __m128i b = _mm_xor_si128(_mm_xor_si128(_mm_srli_epi32(lo, 1), _mm_srli_epi32(lo, 2)),
                              _mm_srli_epi32(lo, 7));
    lo = _mm_xor_si128(lo, _mm_xor_si128(b, spill));
    return _mm_xor_si128(hi, lo);
}

TARGET static inline __m128i field_mul(__m128i a, __m128i b)
{
    __m128i lo = _mm_setzero_si128(), mid = lo, hi = lo;
    mul_add(a, b, &lo, &mid, &hi);
    return reduce(lo, mid, hi);
}

TARGET static inline __m128i key_step(__m128i k, __m128i assist)
{
    assist = _mm_shuffle_epi32(assist, 0xff);
    k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
    k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
    k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
    return _mm_xor_si128(k, assist);
}

TARGET static inline __m128i encrypt(const gmac_key_t *k, __m128i x)
{
    x = _mm_xor_si128(x, _mm_load_si128((const __m128i *)(const void *)k->round[0]));
    for (int r = 1; r < 10; r++)
        x = _mm_aesenc_si128(x, _mm_load_si128((const __m128i *)(const void *)k->round[r]));
    return _mm_aesenclast_si128(x, _mm_load_si128((const __m128i *)(const void *)k->round[10]));
}

TARGET void gmac_key(gmac_key_t *k, const uint8_t key[16])
{
    __m128i r[11];
    r[0] = load(key);
    /* The round constant must be an immediate: one line per round. */
    r[1] = key_step(r[0], _mm_aeskeygenassist_si128(r[0], 0x01));
    r[2] = key_step(r[1], _mm_aeskeygenassist_si128(r[1], 0x02));
    r[3] = key_step(r[2], _mm_aeskeygenassist_si128(r[2], 0x04));
    r[4] = key_step(r[3], _mm_aeskeygenassist_si128(r[3], 0x08));
    r[5] = key_step(r[4], _mm_aeskeygenassist_si128(r[4], 0x10));
    r[6] = key_step(r[5], _mm_aeskeygenassist_si128(r[5], 0x20));
    r[7] = key_step(r[6], _mm_aeskeygenassist_si128(r[6], 0x40));
    r[8] = key_step(r[7], _mm_aeskeygenassist_si128(r[7], 0x80));
    r[9] = key_step(r[8], _mm_aeskeygenassist_si128(r[8], 0x1b));
    r[10] = key_step(r[9], _mm_aeskeygenassist_si128(r[9], 0x36));
    for (int i = 0; i < 11; i++) _mm_store_si128((__m128i *)(void *)k->round[i], r[i]);
    __m128i h = reversed(encrypt(k, _mm_setzero_si128())), p = h;
    for (int i = 0; i < 8; i++) {
        _mm_store_si128((__m128i *)(void *)k->hpow[i], p);
        p = field_mul(p, h);
    }
}

/* GHASH's running state over a stream that arrives in parts: the hash so far and the bytes of
 * a block not yet whole. */
typedef struct {
    __m128i y;
    uint8_t held[16];
    size_t n_held;
} ghash_t;

TARGET static inline __m128i hpow(const gmac_key_t *k, int i)   /* H^i, 1 <= i <= 8 */
{
    return _mm_load_si128((const __m128i *)(const void *)k->hpow[i - 1]);
}

TARGET static void absorb(ghash_t *g, const gmac_key_t *k, const uint8_t *p, size_t n)
{
    if (!n) return;
    if (g->n_held) {
        size_t take = 16 - g->n_held < n ? 16 - g->n_held : n;
        memcpy(g->held + g->n_held, p, take);
        g->n_held += take;
        p += take;
        n -= take;
        if (g->n_held < 16) return;
        g->y = field_mul(_mm_xor_si128(g->y, reversed(load(g->held))), hpow(k, 1));
        g->n_held = 0;
    }
    for (; n >= 128; p += 128, n -= 128) {
        __m128i lo = _mm_setzero_si128(), mid = lo, hi = lo;
        mul_add(_mm_xor_si128(g->y, reversed(load(p))), hpow(k, 8), &lo, &mid, &hi);
        for (int i = 1; i < 8; i++)
            mul_add(reversed(load(p + 16 * i)), hpow(k, 8 - i), &lo, &mid, &hi);
        g->y = reduce(lo, mid, hi);
    }
    for (; n >= 16; p += 16, n -= 16)
        g->y = field_mul(_mm_xor_si128(g->y, reversed(load(p))), hpow(k, 1));
    memcpy(g->held, p, n);
    g->n_held = n;
}

TARGET uint64_t gmac_tag(const gmac_key_t *k, uint64_t pseq, const uint8_t *a, size_t a_len,
                         const uint8_t *b, size_t b_len, const uint8_t *c, size_t c_len)
{
    ghash_t g = {.y = _mm_setzero_si128(), .n_held = 0};
    absorb(&g, k, a, a_len);
    absorb(&g, k, b, b_len);
    absorb(&g, k, c, c_len);
    if (g.n_held) {   /* the last block, zero-padded */
        memset(g.held + g.n_held, 0, 16 - g.n_held);
        g.y = field_mul(_mm_xor_si128(g.y, reversed(load(g.held))), hpow(k, 1));
    }
    /* The lengths block: the additional data's length in bits (big-endian), then zero bits of
     * ciphertext; byte-reversed, the bit count is the high 64 bits. */
    uint64_t bits = (uint64_t)(a_len + b_len + c_len) * 8;
    __m128i lengths = _mm_set_epi64x((long long)bits, 0);
    __m128i s = reversed(field_mul(_mm_xor_si128(g.y, lengths), hpow(k, 1)));
    /* J0 = IV || 0^31 || 1, the IV the datagram's number and four zero bytes. */
    __m128i j0 = _mm_set_epi64x((long long)(1ULL << 56), (long long)pseq);
    return (uint64_t)_mm_cvtsi128_si64(_mm_xor_si128(encrypt(k, j0), s));
}
