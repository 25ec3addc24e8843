/* gmac.h: AES-128-GMAC with the CPU's AES and carry-less multiply instructions, staged beside
 * the core. The core's mac=gmac128 computes its tags through OpenSSL (src/ltp_auth.c); this is
 * the candidate to replace it (issue 28: OpenSSL's two contexts per peer leave the caches at
 * thousands of peers). Until the core uses it, `invoke bench-mac` times it beside OpenSSL's and
 * tests/test_gmac.c checks that its tags are OpenSSL's, bit for bit. It lives outside src/ so
 * that staging it changes no code fingerprint (harness/running/fingerprint.py).
 *
 * The tag is the one ltp_auth.c defines: GCM (NIST SP 800-38D) with a 96-bit IV made of the
 * datagram's number (8 bytes, little-endian) and four zero bytes, the datagram as additional
 * data in up to three parts, nothing encrypted; the first 8 bytes of the 16-byte tag, read
 * little-endian. docs/ltp-protocol.md §11. */
#ifndef LTP_GMAC_H
#define LTP_GMAC_H

#include <stddef.h>
#include <stdint.h>

/* One direction's key: the AES round keys and H^1..H^8 (H = AES_K(0), each byte-reversed, as
 * the multiplication takes them), 304 contiguous bytes. */
typedef struct {
    _Alignas(16) uint8_t round[11][16];
    _Alignas(16) uint8_t hpow[8][16];
} gmac_key_t;

/* Whether this CPU has the instructions (AES-NI, PCLMULQDQ, SSSE3); call nothing else when not. */
int gmac_native_ok(void);

/* Derive a direction's key state from its 16-byte key. */
void gmac_key(gmac_key_t *k, const uint8_t key[16]);

/* The tag of the datagram numbered pseq whose bytes are the three parts in order (a part may be
 * empty; its pointer is then not read). */
uint64_t gmac_tag(const gmac_key_t *k, uint64_t pseq, const uint8_t *a, size_t a_len,
                  const uint8_t *b, size_t b_len, const uint8_t *c, size_t c_len);

#endif
