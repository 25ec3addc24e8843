/* bench_mac.c: what each MAC of auth costs per datagram size on this machine
 * (`make -C transports/native bench-mac`, `invoke bench-mac`): SipHash-2-4 (mac=siphash24) and
 * AES-128-GMAC (mac=gmac128) through OpenSSL as the core computes it, and the staged AES-NI
 * GMAC (gmac/gmac.c; the same tags), ns per tag and GB/s, over a buffer that stays in cache, as
 * the progress thread's datagrams do. A benchmark, not a test: it asserts nothing. */
#define _POSIX_C_SOURCE 199309L
#include "gmac.h"
#include "ltp_internal.h"

#include <openssl/evp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 0.3;   /* per algorithm and size */
    static const size_t sizes[] = {64, 1472, 8192, 65000};
    uint8_t key[16] = {1, 2, 3}, *msg = malloc(65536);
    void *ctx = auth_gmac_new(key);
    static gmac_key_t staged;
    int n_alg = gmac_native_ok() ? 3 : 2;
    if (!msg || !ctx) return 1;
    if (n_alg == 3) gmac_key(&staged, key);
    memset(msg, 7, 65536);
    printf("%-8s %-14s %12s %10s\n", "bytes", "MAC", "ns per tag", "GB/s");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (int alg = 1; alg <= n_alg; alg++) {
            volatile uint64_t sink = 0;
            long n = 0;
            double t0 = now_s(), t = 0;
            /* GMAC through a context keyed once, as the core keeps one per peer and direction */
            while ((t = now_s() - t0) < seconds) {
                for (int k = 0; k < 64; k++, n++)
                    sink += alg == 1 ? ltp_siphash24(key, msg, sizes[i])
                          : alg == 2 ? auth_gmac_parts(ctx, (uint64_t)n, msg, sizes[i], NULL, 0,
                                                       NULL, 0)
                                     : gmac_tag(&staged, (uint64_t)n, msg, sizes[i], NULL, 0,
                                                NULL, 0);
            }
            (void)sink;
            static const char *names[] = {"", "SipHash-2-4", "AES-128-GMAC", "GMAC AES-NI"};
            printf("%-8zu %-14s %12.0f %10.2f\n", sizes[i], names[alg],
                   t / (double)n * 1e9, (double)sizes[i] * (double)n / t / 1e9);
        }
    }
    free(msg);
    EVP_CIPHER_CTX_free(ctx);
    return 0;
}
