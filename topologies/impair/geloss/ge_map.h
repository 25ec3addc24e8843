/*
 * ge_map.h: the one value of the eBPF program's map "ge_map" (key 0): a lock, which chain runs
 * (per packet or in time), both chains' parameters, and their state and counters. Shared by
 * ge_loss.bpf.c and the loader ge_loss.c, so the layout has one owner. Needs <linux/bpf.h>
 * (struct bpf_spin_lock) included first.
 */
#ifndef GE_MAP_H
#define GE_MAP_H

#include "ge_chain.h"
#include "ge_time.h"

#define GE_MODEL_PACKET 0   /* ge_chain.h: the state moves once per packet */
#define GE_MODEL_TIME 1     /* ge_time.h: the state moves with the clock */

struct ge_value {
    struct bpf_spin_lock lock;   /* packets of one interface may arrive on both CPUs at once */
    GE_U32 model;                /* GE_MODEL_*; also keeps cfg 8-byte aligned in both compilers */
    struct ge_config cfg;        /* GE_MODEL_PACKET's parameters */
    struct ge_chain chain;       /* either model's state bit, random numbers, packet counters */
    struct ge_time_config tcfg;  /* GE_MODEL_TIME's parameters */
    struct ge_clock clock;       /* GE_MODEL_TIME's clock and period counters */
};

#endif
