/*
 * ge_loss.bpf.c: Gilbert-Elliott loss, or a recorded trace replayed, at a host interface's tc
 * ingress (cls_bpf, direct-action).
 *
 * Every IPv4 packet steps the two-state chain under the map value's spin lock: the chain of
 * ge_chain.h, which moves once per packet, or the one of ge_time.h, which moves with the clock
 * (CLOCK_MONOTONIC, read just before taking the lock), as the loader chose. Under a trace
 * (GE_MODEL_TRACE) a packet instead takes the next position (an atomic counter) and is dropped if
 * the trace's bit for that position is set. Under either chain a dropped packet's position is
 * written into the trace map (ge_bits, ge_map.h) after the lock is released, so every run's
 * losses can be read back packet position by packet position. A packet the chain
 * drops is not dropped here but marked (skb->mark = GE_MARK) and passed on, so the nftables
 * netdev ingress table that runs next (topologies/impair/loss.py) counts it as arrived, drops it and
 * counts it as dropped, exactly as it does for uniform loss. Other packets pass untouched and do
 * not step the chain. Loaded and configured by the loader (ge_loss.c).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <linux/types.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define GE_U64 __u64
#define GE_U32 __u32
#include "ge_map.h"

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct ge_value);
} ge_map SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, GE_TRACE_WORDS);
    __type(key, __u32);
    __type(value, __u64);
} ge_bits SEC(".maps");

/* The trace word that holds position pos, or NULL past the trace's end. */
static __always_inline __u64 *ge_word(__u64 pos)
{
    __u32 index = (__u32)(pos >> 6);

    if (pos >= GE_TRACE_PACKETS)
        return NULL;
    return bpf_map_lookup_elem(&ge_bits, &index);
}

SEC("tc")
int ge_ingress(struct __sk_buff *skb)
{
    __u32 key = 0;
    struct ge_value *v;
    __u64 now_ns, pos, *word;
    int drop;

    if (skb->protocol != bpf_htons(ETH_P_IP))
        return TC_ACT_OK;
    v = bpf_map_lookup_elem(&ge_map, &key);
    if (!v)
        return TC_ACT_OK;
    if (v->model == GE_MODEL_TRACE) {
        pos = __sync_fetch_and_add(&v->trace_next, 1);
        word = pos < v->trace_packets ? ge_word(pos) : NULL;
        drop = word ? (int)((*word >> (pos & 63)) & 1) : 0;
        bpf_spin_lock(&v->lock);
        ge_tally(&v->chain, drop ? 0 : 1, 1); /* counted as a chain counts its packets */
        bpf_spin_unlock(&v->lock);
    } else {
        if (v->model == GE_MODEL_TIME) {
            now_ns = bpf_ktime_get_ns(); /* no helper calls while the lock is held */
            bpf_spin_lock(&v->lock);
            pos = v->chain.packets;
            drop = ge_time_step(&v->tcfg, &v->chain, &v->clock, now_ns);
            bpf_spin_unlock(&v->lock);
        } else {
            bpf_spin_lock(&v->lock);
            pos = v->chain.packets;
            drop = ge_step(&v->cfg, &v->chain);
            bpf_spin_unlock(&v->lock);
        }
        word = drop ? ge_word(pos) : NULL;
        if (word)
            __sync_fetch_and_or(word, 1ULL << (pos & 63));
    }
    if (drop)
        skb->mark = GE_MARK;
    return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
