/*
 * ge_args.c: the loader's command line (ge_args.h): options, their ranges, and which go with
 * which command; every mistake is a usage error (status 2) that touches nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GE_U64 uint64_t
#define GE_U32 uint32_t
#include "ge_chain.h"
#include "ge_time.h"
#include "ge_args.h"

void ge_usage(FILE *out)
{
    fprintf(out,
            "usage: ge-loss attach --dev IF MODEL [--seed S] [--stream K] [--obj PATH]\n"
            "       ge-loss read --dev IF\n"
            "       ge-loss dump --dev IF --out FILE\n"
            "       ge-loss detach --dev IF\n"
            "       ge-loss simulate --packets N MODEL [--interval-us T] [--seed S] [--stream K]"
            " [--out FILE]\n"
            "       ge-loss table\n"
            "       ge-loss count\n"
            "MODEL: --p-gb P --p-bg P --loss-good P --loss-bad P      (per packet)\n"
            "    or --good-ms D --bad-ms D --loss-good P --loss-bad P (in time)\n"
            "    or --trace FILE                                      (a trace, replayed)\n");
}

static int ge_parse_prob(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0.0 && v <= 1.0))
        return -1;
    *out = v;
    return 0;
}

/* A finite number within [lo, hi]. */
static int ge_parse_range(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

static int ge_parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*s == '-' || *s == '\0')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

/* Check which model the options describe; return 0, or 2 (usage error, message printed). */
static int ge_check_chain(ge_args *a)
{
    int per_packet = a->have_p[GE_P_GB] || a->have_p[GE_P_BG];
    int in_time = a->have_p[GE_GOOD_MS] || a->have_p[GE_BAD_MS];
    if (a->trace) {
        int any = 0;
        for (int i = 0; i < GE_NPARAM; i++)
            any |= a->have_p[i];
        if (any || a->interval_us > 0) {
            fprintf(stderr, "ge-loss: --trace replays a trace and takes no chain options\n");
            return 2;
        }
        return 0;
    }
    if (per_packet && in_time) {
        fprintf(stderr, "ge-loss: give either --p-gb and --p-bg (per packet) or --good-ms and "
                        "--bad-ms (in time), not both\n");
        return 2;
    }
    a->time_chain = in_time;
    int first = in_time ? GE_GOOD_MS : GE_P_GB;
    if (!(a->have_p[first] && a->have_p[first + 1] && a->have_p[GE_LOSS_GOOD]
          && a->have_p[GE_LOSS_BAD])) {
        fprintf(stderr, "ge-loss: %s needs %s, --loss-good and --loss-bad\n", a->cmd,
                in_time ? "--good-ms, --bad-ms" : "--p-gb, --p-bg");
        return 2;
    }
    if (!strcmp(a->cmd, "simulate") && in_time != (a->interval_us > 0)) {
        fprintf(stderr, "ge-loss: --interval-us goes with the time-based chain, and it needs one\n");
        return 2;
    }
    return 0;
}

/* Parse argv into *a; return 0, or 2 (usage error, message printed). */
int ge_parse(int argc, char **argv, ge_args *a)
{
    static const struct option opts[] = {
        {"p-gb", required_argument, NULL, '0'},      {"p-bg", required_argument, NULL, '1'},
        {"loss-good", required_argument, NULL, '2'}, {"loss-bad", required_argument, NULL, '3'},
        {"good-ms", required_argument, NULL, '4'},   {"bad-ms", required_argument, NULL, '5'},
        {"dev", required_argument, NULL, 'd'},       {"seed", required_argument, NULL, 's'},
        {"stream", required_argument, NULL, 'k'},    {"packets", required_argument, NULL, 'n'},
        {"interval-us", required_argument, NULL, 'i'}, {"obj", required_argument, NULL, 'o'},
        {"trace", required_argument, NULL, 't'},    {"out", required_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0},
    };
    int c;
    if (argc < 2) {
        ge_usage(stderr);
        return 2;
    }
    a->cmd = argv[1];
    optind = 2;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'd': a->dev = optarg; break;
        case '0': case '1': case '2': case '3':
            if (ge_parse_prob(optarg, &a->p[c - '0'])) {
                fprintf(stderr, "ge-loss: --%s must be a probability from 0 to 1, not %s\n",
                        opts[c - '0'].name, optarg);
                return 2;
            }
            a->have_p[c - '0'] = 1;
            break;
        case '4': case '5':
            if (ge_parse_range(optarg, GE_TIME_MIN_MS, GE_TIME_MAX_MS, &a->p[c - '0'])) {
                fprintf(stderr, "ge-loss: --%s must be a mean duration from %g to %g ms, not %s\n",
                        opts[c - '0'].name, GE_TIME_MIN_MS, GE_TIME_MAX_MS, optarg);
                return 2;
            }
            a->have_p[c - '0'] = 1;
            break;
        case 's':
            if (ge_parse_u64(optarg, &a->seed)) {
                fprintf(stderr, "ge-loss: --seed must be a whole number >= 0, not %s\n", optarg);
                return 2;
            }
            a->have_seed = 1;
            break;
        case 'k':
            if (ge_parse_u64(optarg, &a->stream)) {
                fprintf(stderr, "ge-loss: --stream must be a whole number >= 0, not %s\n", optarg);
                return 2;
            }
            break;
        case 'n':
            if (ge_parse_u64(optarg, &a->packets) || a->packets == 0) {
                fprintf(stderr, "ge-loss: --packets must be a whole number >= 1, not %s\n", optarg);
                return 2;
            }
            break;
        case 'i':
            /* At least a nanosecond, at most an hour. */
            if (ge_parse_range(optarg, 1e-3, 3.6e9, &a->interval_us)) {
                fprintf(stderr, "ge-loss: --interval-us must be from 0.001 to 3.6e9 "
                                "microseconds, not %s\n", optarg);
                return 2;
            }
            break;
        case 'o': a->obj = optarg; break;
        case 't': a->trace = optarg; break;
        case 'w': a->out = optarg; break;
        case 'h': ge_usage(stdout); exit(0);
        default: ge_usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        ge_usage(stderr);
        return 2;
    }
    int chain = !strcmp(a->cmd, "attach") || !strcmp(a->cmd, "simulate");
    if (!strcmp(a->cmd, "count") || !strcmp(a->cmd, "table"))
        return 0;
    int dump = !strcmp(a->cmd, "dump");
    if (!chain && !dump && strcmp(a->cmd, "read") && strcmp(a->cmd, "detach")) {
        fprintf(stderr, "ge-loss: unknown command %s\n", a->cmd);
        return 2;
    }
    if (chain && ge_check_chain(a))
        return 2;
    int simulate = !strcmp(a->cmd, "simulate");
    if ((a->trace && !chain) || (a->out && !dump && !simulate) || (dump && !a->out)) {
        fprintf(stderr, "ge-loss: --trace goes with attach and simulate, --out with dump (which "
                        "needs it) and simulate\n");
        return 2;
    }
    if (strcmp(a->cmd, "simulate") ? a->dev == NULL : a->packets == 0) {
        fprintf(stderr, "ge-loss: %s needs %s\n", a->cmd,
                strcmp(a->cmd, "simulate") ? "--dev" : "--packets");
        return 2;
    }
    return 0;
}
