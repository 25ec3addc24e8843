/*
 * ge_time.h: the time-based Gilbert-Elliott loss chain, whose state moves with the clock rather
 * than with packets; shared, like ge_chain.h, by the eBPF program (time from bpf_ktime_get_ns)
 * and the loader's "simulate" command (time from a paced packet schedule).
 *
 * Two states, good and bad, each held for an exponentially distributed time (mean mean_ns[0]
 * when good, mean_ns[1] when bad) and then left for the other: a continuous-time Markov chain.
 * The chain keeps its state and the time the current period ends (end_ns). At each packet, at
 * time now:
 *   1. while now >= end_ns: switch state, draw the new period's duration, end_ns += it;
 *      after GE_TIME_MAX_STEPS switches, or at the first packet, restart instead: draw the state
 *      from the stationary distribution (bad with probability p_bad) and a fresh period from
 *      now. That is exact to far below anything measurable: 64 periods, each at least as long
 *      on average as the chain's relaxation time tau = 1 / (1/good + 1/bad), lie between this
 *      packet and the one before, so the state the chain had then no longer matters (their
 *      correlation is exp(-gap/tau), and a gap of 64 periods is shorter than 30 tau with
 *      probability 5e-8), and by memorylessness a fresh exponential period from now is what
 *      the rest of the current one would be;
 *   2. drop the packet with probability loss[state], counted as in ge_chain.h (packets, drops,
 *      bursts of consecutive drops, packets seen in the bad state).
 * Every period begun is counted with its drawn duration (periods[], period_ns[]), so the mean
 * duration of bad periods over a run is period_ns[1] / periods[1], measured, not configured.
 *
 * Durations without floating point: an exponential with mean m is m * -ln(U), U uniform in
 * (0, 1]. With U = r / 2^64 for a 64-bit random r whose leading one bit is at position 63 - k,
 * U = 2^-(k+1) * M with the mantissa M in [1, 2), so -ln U = k ln2 + (ln2 - ln M). k (the number
 * of leading zero bits, geometric: the octave) is exact; the next GE_EXP_BITS bits of r pick one
 * of 256 equally likely slices of M, and exp_q20[i] holds the mean of ln2 - ln M over slice i
 * (the loader computes it with libm), in units of 2^-20. So a draw is never more than 0.002
 * means from the exact -ln U it stands for (one slice's width at most), and the distribution
 * (computed exactly from the table in tests/unit/test_loss_time.py) has mean 0.9999995 and
 * variance 0.999998 against the exponential's 1 and 1, a distribution function within 0.001
 * of the exponential's everywhere, and a tail to 38.8 means (k is capped at
 * GE_EXP_MAX_OCTAVE: probability 2^-55).
 */
#ifndef GE_TIME_H
#define GE_TIME_H

#include "ge_chain.h"

#ifndef GE_INLINE
#define GE_INLINE static inline __attribute__((always_inline))
#endif

#define GE_EXP_BITS 8
#define GE_EXP_SIZE (1 << GE_EXP_BITS)
#define GE_EXP_FRAC 20                 /* table entries are multiples of 2^-20 of a mean */
#define GE_LN2_Q20 726817ULL           /* ln 2 * 2^20, rounded */
#define GE_EXP_MAX_OCTAVE 55           /* leaves GE_EXP_BITS bits below the leading one */
#define GE_TIME_MAX_STEPS 64           /* state switches per packet before a restart */
/* Mean durations a chain accepts, in milliseconds: at most 100 s keeps (draw * mean_ns) within
 * 64 bits (draws are below 2^26 in units of 2^-20 of a mean, 100 s is below 2^37 ns). */
#define GE_TIME_MIN_MS 0.001
#define GE_TIME_MAX_MS 100000.0

/* The time chain's parameters, in the order a loader writes them. */
struct ge_time_config {
    GE_U64 mean_ns[2];             /* mean duration of a good [0] and a bad [1] period */
    GE_U64 loss[2];                /* P(drop) when good and when bad, out of GE_ONE */
    GE_U64 p_bad;                  /* stationary P(bad) = bad / (good + bad), out of GE_ONE */
    GE_U32 exp_q20[GE_EXP_SIZE];   /* -ln U per slice, see above */
};

/* The clock of the time chain (its state bit, random numbers and packet counters are a
 * struct ge_chain). */
struct ge_clock {
    GE_U64 end_ns;                 /* when the current period ends; 0: no packet yet */
    GE_U64 periods[2];             /* good and bad periods begun */
    GE_U64 period_ns[2];           /* their durations as drawn, summed */
    GE_U64 restarts;               /* state drawn from the stationary distribution */
};

/* Leading zero bits of x (64 for 0), by halving: BPF has no such instruction. */
GE_INLINE GE_U32 ge_clz64(GE_U64 x)
{
    GE_U32 n = 0;
    if (!x)
        return 64;
    if (!(x >> 32)) { n += 32; x <<= 32; }
    if (!(x >> 48)) { n += 16; x <<= 16; }
    if (!(x >> 56)) { n += 8; x <<= 8; }
    if (!(x >> 60)) { n += 4; x <<= 4; }
    if (!(x >> 62)) { n += 2; x <<= 2; }
    if (!(x >> 63)) { n += 1; }
    return n;
}

/* An exponentially distributed duration with mean mean_ns, from the random number r. */
GE_INLINE GE_U64 ge_exp_ns(const GE_U32 *exp_q20, GE_U64 mean_ns, GE_U64 r)
{
    GE_U32 k = ge_clz64(r);
    if (k > GE_EXP_MAX_OCTAVE)
        k = GE_EXP_MAX_OCTAVE;
    GE_U32 slice = (GE_U32)(((r << k) << 1) >> (64 - GE_EXP_BITS));
    GE_U64 x = k * GE_LN2_Q20 + exp_q20[slice & (GE_EXP_SIZE - 1)];
    return (x * mean_ns) >> GE_EXP_FRAC;
}

/* Enter state (0 good, 1 bad) at start_ns for a freshly drawn period. */
GE_INLINE void ge_time_enter(const struct ge_time_config *cfg, struct ge_chain *c,
                             struct ge_clock *k, GE_U32 state, GE_U64 start_ns)
{
    state &= 1;
    GE_U64 d = ge_exp_ns(cfg->exp_q20, cfg->mean_ns[state], ge_next(&c->rng));
    c->bad = state;
    k->end_ns = start_ns + d;
    k->periods[state]++;
    k->period_ns[state] += d;
}

/* One packet arriving at now_ns; returns 1 if it is to be dropped. */
GE_INLINE int ge_time_step(const struct ge_time_config *cfg, struct ge_chain *c,
                           struct ge_clock *k, GE_U64 now_ns)
{
    int restart = k->end_ns == 0;
    if (!restart) {
        for (GE_U32 i = 0; i < GE_TIME_MAX_STEPS && now_ns >= k->end_ns; i++)
            ge_time_enter(cfg, c, k, !c->bad, k->end_ns);
        restart = now_ns >= k->end_ns;
    }
    if (restart) {
        k->restarts++;
        ge_time_enter(cfg, c, k, (ge_next(&c->rng) >> 32) < cfg->p_bad, now_ns);
    }
    GE_U64 r = ge_next(&c->rng);
    return ge_tally(c, r >> 32, cfg->loss[c->bad & 1]);
}

#endif
