/* test_gmac.c: the staged AES-NI GMAC (gmac/gmac.c) gives OpenSSL's tags (src/ltp_auth.c's
 * auth_gmac_parts), bit for bit: random keys, datagram numbers and lengths from 0 to 2,100 bytes
 * (under, across and over the eight-block stride), split into three parts anywhere, at unaligned
 * addresses; and a tag changes with any one flipped bit of the key, the number or the data. On a
 * CPU without the instructions it checks nothing and says so. */
#include "check.h"
#include "gmac.h"
#include "ltp_internal.h"

#include <openssl/evp.h>

#include <stdlib.h>
#include <string.h>

static uint64_t state = 0x9e3779b97f4a7c15ULL;

static uint64_t next(void)   /* xorshift64*: reproducible, no libc rand */
{
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545f4914f6cdd1dULL;
}

static uint64_t theirs(const uint8_t key[16], uint64_t pseq, const uint8_t *m, size_t i,
                       size_t j, size_t n)
{
    void *ctx = auth_gmac_new(key);
    uint64_t t = auth_gmac_parts(ctx, pseq, m, i, m + i, j - i, m + j, n - j);
    EVP_CIPHER_CTX_free(ctx);
    return t;
}

int main(void)
{
    if (!gmac_native_ok()) {
        printf("test_gmac: this CPU lacks AES-NI or PCLMULQDQ; nothing to compare\n");
        return check_summary();
    }
    enum { MAX = 2100 };
    static uint8_t room[MAX + 16];
    gmac_key_t k;
    for (int round = 0; round < 3000; round++) {
        uint8_t key[16];
        for (int b = 0; b < 16; b++) key[b] = (uint8_t)next();
        size_t n = round < 300 ? (size_t)round : (size_t)(next() % (MAX + 1));
        uint8_t *m = room + next() % 16;   /* unaligned */
        for (size_t b = 0; b < n; b++) m[b] = (uint8_t)next();
        size_t i = n ? (size_t)(next() % (n + 1)) : 0, j = i + (n > i ? next() % (n - i + 1) : 0);
        uint64_t pseq = round % 7 ? next() : (uint64_t)round;
        gmac_key(&k, key);
        uint64_t ours = gmac_tag(&k, pseq, m, i, m + i, j - i, m + j, n - j);
        uint64_t want = theirs(key, pseq, m, i, j, n);
        CHECK(ours == want, "round %d: %zu bytes split %zu/%zu: %016llx, OpenSSL %016llx", round,
              n, i, j, (unsigned long long)ours, (unsigned long long)want);
        /* one part or three: the same tag */
        CHECK(gmac_tag(&k, pseq, m, n, NULL, 0, NULL, 0) == ours, "round %d: whole", round);
        if (round % 50 == 0 && n) {
            size_t bit = (size_t)(next() % (8 * n));
            m[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            CHECK(gmac_tag(&k, pseq, m, n, NULL, 0, NULL, 0) != ours, "round %d: data bit", round);
            m[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            CHECK(gmac_tag(&k, pseq ^ 1, m, n, NULL, 0, NULL, 0) != ours, "round %d: number",
                  round);
            key[round % 16] ^= 0x10;
            gmac_key(&k, key);
            CHECK(gmac_tag(&k, pseq, m, n, NULL, 0, NULL, 0) != ours, "round %d: key", round);
        }
    }
    return check_summary();
}
