/*
 * ge_chain.h: the Gilbert-Elliott loss chain, one step per packet (ge_time.h has the chain that
 * moves with time instead); shared by the eBPF program (ge_loss.bpf.c, in the kernel) and the
 * loader (ge_loss.c: its "simulate" command runs the very same step in user space, so the chain
 * is tested without root or a kernel).
 *
 * Two states, good (G) and bad (B). For each packet, in this order:
 *   1. drop it with probability loss_good (in G) or loss_bad (in B);
 *   2. move G -> B with probability p_gb, or B -> G with probability p_bg.
 * Probabilities are thresholds out of 2^32 (GE_ONE = always), compared with 32-bit uniform
 * random numbers from splitmix64, whose state is seeded by the loader: one seed, one sequence of
 * decisions for one sequence of packets.
 *
 * Counters (kept by ge_tally, which the time-based chain shares): packets stepped, drops,
 * bursts (a drop after a packet that was not dropped, i.e. the number of runs of consecutive
 * drops), packets seen in the bad state. The mean burst length is drops / bursts, measured,
 * not configured.
 *
 * No libc, no kernel headers: only fixed-width integer types, which the includer provides
 * (<linux/types.h> in the kernel program, <stdint.h> in user space via the GE_U64 macros).
 */
#ifndef GE_CHAIN_H
#define GE_CHAIN_H

#ifndef GE_U64
#define GE_U64 unsigned long long
#define GE_U32 unsigned int
#endif

#define GE_ONE (1ULL << 32)    /* threshold meaning probability 1 */
#define GE_MARK 0x4745u        /* skb->mark of a packet to drop ("GE"); nftables drops it */

/* The chain's parameters, in the order a loader writes them. */
struct ge_config {
    GE_U64 p_gb;       /* P(good -> bad) per packet, out of GE_ONE */
    GE_U64 p_bg;       /* P(bad -> good) per packet */
    GE_U64 loss_good;  /* P(drop) in the good state */
    GE_U64 loss_bad;   /* P(drop) in the bad state */
};

/* The chain's state and counters. */
struct ge_chain {
    GE_U64 rng;            /* splitmix64 state */
    GE_U32 bad;            /* current state: 1 = bad */
    GE_U32 last_dropped;   /* the previous packet was dropped */
    GE_U64 packets;
    GE_U64 drops;
    GE_U64 bursts;
    GE_U64 bad_packets;
};

/* splitmix64: 64 good bits per call from a counter (Steele, Lea, Flood 2014). */
static inline GE_U64 ge_next(GE_U64 *state)
{
    GE_U64 z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Count one packet in state c->bad, dropped if r_drop (32 random bits) is below the threshold;
 * returns 1 if it is to be dropped. Shared by both chains (ge_time.h). */
static inline int ge_tally(struct ge_chain *c, GE_U64 r_drop, GE_U64 threshold)
{
    int drop = r_drop < threshold;

    c->packets++;
    if (c->bad)
        c->bad_packets++;
    if (drop) {
        c->drops++;
        if (!c->last_dropped)
            c->bursts++;
    }
    c->last_dropped = (GE_U32)drop;
    return drop;
}

/* One packet through the chain; returns 1 if it is to be dropped. */
static inline int ge_step(const struct ge_config *cfg, struct ge_chain *c)
{
    GE_U64 r = ge_next(&c->rng);
    int drop = ge_tally(c, r >> 32, c->bad ? cfg->loss_bad : cfg->loss_good);
    GE_U64 r_move = r & 0xFFFFFFFFULL;

    if (c->bad) {
        if (r_move < cfg->p_bg)
            c->bad = 0;
    } else if (r_move < cfg->p_gb) {
        c->bad = 1;
    }
    return drop;
}

#endif
