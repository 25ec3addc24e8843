/* index_trace.c: the simulator with every core call it makes hashed (tests/index_diff.sh). The
 * simulator's sim/ltp_sim.c is compiled with its three calls renamed to these, which pass them on
 * and mix their arguments and results into one hash: every datagram poll_tx gives (bytes, peer,
 * time), every next_timeout, every input's result and the counters after it. The hash is printed
 * on stderr at exit, so runs on two cores compare with one line.
 */
#include "ltp.h"

#include <stdio.h>
#include <stdlib.h>

int trace_poll_tx(ltp_core_t *c, uint64_t now, uint8_t *b, size_t cap, int *peer);
uint64_t trace_next_timeout(ltp_core_t *c, uint64_t now);
int trace_input(ltp_core_t *c, int peer, const uint8_t *b, size_t len, uint64_t now);

static uint64_t hash = 1469598103934665603ull, calls;

static void mix(const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++) hash = (hash ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
}

static void report(void)
{
    fprintf(stderr, "trace %016llx over %llu calls\n", (unsigned long long)hash,
            (unsigned long long)calls);
}

static void count(void)
{
    if (!calls++) atexit(report);
}

int trace_poll_tx(ltp_core_t *c, uint64_t now, uint8_t *b, size_t cap, int *peer)
{
    count();
    int n = ltp_core_poll_tx(c, now, b, cap, peer);
    mix(&now, 8);
    mix(&n, 4);
    if (n > 0) { mix(b, (size_t)n); mix(peer, 4); }
    return n;
}

uint64_t trace_next_timeout(ltp_core_t *c, uint64_t now)
{
    count();
    uint64_t t = ltp_core_next_timeout(c, now);
    mix(&now, 8);
    mix(&t, 8);
    return t;
}

int trace_input(ltp_core_t *c, int peer, const uint8_t *b, size_t len, uint64_t now)
{
    count();
    int rc = ltp_core_input(c, peer, b, len, now);
    uint64_t st[LTP_S__COUNT];
    ltp_core_stats(c, st, LTP_S__COUNT);
    mix(&rc, 4); mix(&now, 8); mix(&peer, 4); mix(st, sizeof st);
    return rc;
}
