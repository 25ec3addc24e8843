/* test_old_shim.c: the calls test_trust.c makes that the core before issue 12 lacks, as no-ops,
 * so `make test-old-core` can build the reproductions against that core and show them failing. */
#include "ltp.h"

#include <stddef.h>

int ltp_core_expect(ltp_core_t *core, uint16_t segment, uint32_t total_bytes, uint32_t critical_bytes);
int ltp_core_set_peer_key(ltp_core_t *core, int peer, const uint8_t *key, size_t len);
uint64_t ltp_siphash24(const uint8_t key[16], const uint8_t *msg, size_t len);

int ltp_core_expect(ltp_core_t *core, uint16_t segment, uint32_t total_bytes, uint32_t critical_bytes)
{
    (void)core; (void)segment; (void)total_bytes; (void)critical_bytes;
    return 0;
}

int ltp_core_set_peer_key(ltp_core_t *core, int peer, const uint8_t *key, size_t len)
{
    (void)core; (void)peer; (void)key; (void)len;
    return 0;
}

uint64_t ltp_siphash24(const uint8_t key[16], const uint8_t *msg, size_t len)
{
    (void)key; (void)msg; (void)len;
    return 0;
}

uint64_t ltp_gmac128(const uint8_t key[16], uint64_t pseq, const uint8_t *msg, size_t len);

uint64_t ltp_gmac128(const uint8_t key[16], uint64_t pseq, const uint8_t *msg, size_t len)
{
    (void)key; (void)pseq; (void)msg; (void)len;
    return 0;
}
