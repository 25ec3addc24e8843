/*
 * ge_args.h: the loader's command line (ge_loss.c), parsed and checked by ge_args.c.
 */
#ifndef GE_ARGS_H
#define GE_ARGS_H

#include <stdint.h>
#include <stdio.h>

/* The chain options, indexed as their short option characters '0'..'5' are. */
enum { GE_P_GB, GE_P_BG, GE_LOSS_GOOD, GE_LOSS_BAD, GE_GOOD_MS, GE_BAD_MS, GE_NPARAM };

typedef struct {
    const char *cmd, *dev, *obj, *trace, *out;
    double p[GE_NPARAM];
    int have_p[GE_NPARAM];
    uint64_t seed, stream, packets;
    double interval_us;
    int have_seed, time_chain;
} ge_args;

/* Print the usage to out. */
void ge_usage(FILE *out);
/* Parse argv into *a (zeroed by the caller); return 0, or 2 (usage error, message printed). */
int ge_parse(int argc, char **argv, ge_args *a);

#endif
