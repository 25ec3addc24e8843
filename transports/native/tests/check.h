/* What the C unit tests share: CHECK counts a passed or failed condition and names a failure on
 * stderr with its file, line and a printf-style explanation; check_summary() prints the counts
 * and gives main() its exit status. Include it once per test program. */
#ifndef LTP_TESTS_CHECK_H
#define LTP_TESTS_CHECK_H

#include <stdio.h>

static int n_pass, n_fail;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (cond) n_pass++;                                               \
        else {                                                            \
            n_fail++;                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
        }                                                                 \
    } while (0)

/* "N passed, M failed" on stdout; 1 when any check failed, else 0. */
static inline int check_summary(void)
{
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}

#endif
