/* fuzz_parse.c: libFuzzer target for the LTP datagram input path (parser + state updates).
 *
 * Build and run with `make -C transports/native fuzz FUZZ_SECONDS=10`. The input is a sequence of
 * datagrams, each prefixed by a 2-byte little-endian length, fed to a core that is also sending
 * a message to the same peer, so DATA, ACK, CLOSE and HELLO all reach stateful code. After each
 * datagram the core's output is drained, which exercises ACK and CLOSE construction. A set
 * high bit in a record's peer byte stamps a valid header prefix onto the datagram.
 */
#include "ltp.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static float payload[4096];
    static uint8_t out[LTP_MAX_DATAGRAM];
    ltp_config_t cfg;
    ltp_config_default(&cfg);
    cfg.max_msg_bytes = 1 << 20;     /* keeps allocations small enough for ASan */
    cfg.max_udp_payload_bytes = 256; /* small chunks: many packets per message */
    cfg.max_open_per_peer = 2;
    cfg.closed_ring = 4;
    ltp_core_t *c = ltp_core_new(&cfg, LTP_RANK_SERVER);
    if (!c) abort();
    ltp_core_add_peer(c, 0);
    ltp_core_add_peer(c, 1);
    ltp_core_send(c, 0, 5, 0, payload, sizeof payload, 1000, 0);
    uint64_t now = 1;
    int slot;
    while (ltp_core_poll_tx(c, now, out, sizeof out, &slot) > 0) {}
    while (size >= 3) {
        size_t len = (size_t)(data[0] | data[1] << 8) % 2048;
        int peer = (data[2] & 3) % 3 - 1;   /* -1: unknown address */
        int templated = data[2] & 0x80;
        data += 3;
        size -= 3;
        if (len > size) len = size;
        /* Copy so ASan sees any read past the datagram's end. */
        uint8_t *dg = malloc(len ? len : 1);
        memcpy(dg, data, len);
        if (templated && len >= 12) {
            /* Valid magic, version, rank and session, so mutations reach the semantic checks. */
            static const uint8_t head[12] = {0x4C, 0x50, LTP_VERSION, 0, 0, 0, 0, 0, 1, 0, 0, 0};
            memcpy(dg, head, 2);
            dg[2] = head[2];
            memcpy(dg + 5, head + 5, 7);
            dg[3] = (uint8_t)(1 + dg[3] % 5);
        }
        ltp_core_input(c, peer, dg, len, now);
        free(dg);
        data += len;
        size -= len;
        now += 137;
        int n;
        while ((n = ltp_core_poll_tx(c, now, out, sizeof out, &slot)) > 0) {}
        if (n < 0) abort();
        uint64_t t = ltp_core_next_timeout(c, now);
        if (t < now) abort();
        float got[4096];
        uint8_t mask[4096];
        for (uint32_t id = 0; id < 8; id++)
            if (ltp_core_rx_ready(c, 0, id, 0) == 1) ltp_core_rx_take(c, 0, id, 0, got, sizeof got, mask, NULL);
    }
    ltp_core_free(c);
    return 0;
}
