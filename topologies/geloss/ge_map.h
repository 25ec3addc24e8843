/*
 * ge_map.h: the one value of the eBPF program's map "ge_map" (key 0): a lock, the chain's
 * parameters and its state and counters. Shared by ge_loss.bpf.c and the loader ge_loss.c, so
 * the layout has one owner. Needs <linux/bpf.h> (struct bpf_spin_lock) included first.
 */
#ifndef GE_MAP_H
#define GE_MAP_H

#include "ge_chain.h"

struct ge_value {
    struct bpf_spin_lock lock;   /* packets of one interface may arrive on both CPUs at once */
    GE_U32 pad;                  /* cfg starts 8-byte aligned, in both compilers alike */
    struct ge_config cfg;
    struct ge_chain chain;
};

#endif
