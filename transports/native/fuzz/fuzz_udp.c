/* fuzz_udp.c: libFuzzer target for what the UDP driver parses from the kernel: the control
 * messages of a received datagram (its SCM_TIMESTAMPNS receive time) and its source address (the
 * peer it maps to). Both come from recvmmsg, so a malformed one is the kernel's to give, not a
 * peer's; the driver must still never read past what it was handed.
 *
 * Build and run with `make -C transports/native fuzz`. The input: the control buffer's bytes and
 * flags, a source address with its length, and the table of peer addresses to match it against.
 */
#define _GNU_SOURCE
#include "ltp_udp_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c) do { if (!(c)) abort(); } while (0)
#define MIN_OF(a, b) ((a) < (b) ? (a) : (b))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8) return 0;
    uint8_t flags = data[0], n_peers = data[1] % 9, alen = data[2];
    size_t ctl_len = data[3] % 97;
    data += 4; size -= 4;
    /* The source address and the peers, from the input. */
    struct sockaddr_in peers[8], src;
    memset(peers, 0, sizeof peers);
    memset(&src, 0, sizeof src);
    size_t take = MIN_OF(size, sizeof src);
    memcpy(&src, data, take);
    data += take; size -= take;
    for (int i = 0; i < n_peers && size >= 6; i++) {
        peers[i].sin_family = AF_INET;
        memcpy(&peers[i].sin_addr.s_addr, data, 4);
        memcpy(&peers[i].sin_port, data + 4, 2);
        data += 6; size -= 6;
    }
    if (flags & 1 && n_peers) { src = peers[flags % n_peers]; }   /* often a real peer */
    int slot = ltp_udp__peer_of(peers, n_peers, &src, (socklen_t)(alen % 24));
    CHECK(slot >= -1 && slot < n_peers);
    if (slot >= 0) CHECK(peers[slot].sin_port == src.sin_port && peers[slot].sin_addr.s_addr == src.sin_addr.s_addr);
    /* The control buffer, in its own allocation so ASan sees any read past it. */
    ctl_len = MIN_OF(ctl_len, size);
    void *ctl = malloc(ctl_len ? ctl_len : 1);
    memcpy(ctl, data, ctl_len);
    if (flags & 4 && ctl_len >= sizeof(struct cmsghdr)) {   /* a receive timestamp, of any length */
        struct cmsghdr cm = {.cmsg_len = (size_t)data[0] % (ctl_len + 8), .cmsg_level = SOL_SOCKET,
                             .cmsg_type = SCM_TIMESTAMPNS};
        memcpy(ctl, &cm, sizeof cm);
    }
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_control = ctl_len ? ctl : NULL;
    mh.msg_controllen = ctl_len;
    mh.msg_flags = flags & 2 ? MSG_CTRUNC : 0;
    struct timespec real = {(time_t)(1700000000 + (flags >> 4)), (long)(flags & 0x0F) * 60000000L};
    uint64_t now = 5000000000ull + flags;
    uint64_t at = ltp_udp__arrival_us(&mh, now, &real);
    CHECK(at <= now && now - at <= 1000000);   /* never in the future, never more than 1 s old */
    free(ctl);
    return 0;
}
