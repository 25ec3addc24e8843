/*
 * ge_map.h: the one value of the eBPF program's map "ge_map" (key 0): a lock, which model runs
 * (the chain per packet or in time, or a recorded trace), both chains' parameters, and their
 * state and counters; and the layout of the second map, "ge_bits": the trace, one bit per packet
 * position (bit i % 64 of word i / 64 set: the i-th IPv4 packet at this ingress was dropped).
 * Every model writes the packets it drops into ge_bits, so any run's losses can be read back
 * (ge-loss dump) and replayed (GE_MODEL_TRACE drops exactly the packets whose bits are set).
 * Shared by ge_loss.bpf.c and the loader, so the layout has one owner. Needs <linux/bpf.h>
 * (struct bpf_spin_lock) included first.
 */
#ifndef GE_MAP_H
#define GE_MAP_H

#include "ge_chain.h"
#include "ge_time.h"

#define GE_MODEL_PACKET 0   /* ge_chain.h: the state moves once per packet */
#define GE_MODEL_TIME 1     /* ge_time.h: the state moves with the clock */
#define GE_MODEL_TRACE 2    /* replay ge_bits: packet i is dropped if its bit is set */

/* Words of ge_bits: 2^17 words of 64 bits, a trace of 8,388,608 packet positions (1 MiB). A
 * packet past the end is not recorded, and under GE_MODEL_TRACE not dropped. */
#define GE_TRACE_WORDS (1u << 17)
#define GE_TRACE_PACKETS ((GE_U64)GE_TRACE_WORDS * 64)

struct ge_value {
    struct bpf_spin_lock lock;   /* packets of one interface may arrive on both CPUs at once */
    GE_U32 model;                /* GE_MODEL_*; also keeps cfg 8-byte aligned in both compilers */
    struct ge_config cfg;        /* GE_MODEL_PACKET's parameters */
    struct ge_chain chain;       /* either model's state bit, random numbers, packet counters */
    struct ge_time_config tcfg;  /* GE_MODEL_TIME's parameters */
    struct ge_clock clock;       /* GE_MODEL_TIME's clock and period counters */
    GE_U64 trace_packets;        /* GE_MODEL_TRACE: the trace's length in packet positions */
    GE_U64 trace_next;           /* GE_MODEL_TRACE: the next packet's position (atomic) */
};

#endif
