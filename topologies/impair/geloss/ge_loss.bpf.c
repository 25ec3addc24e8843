/*
 * ge_loss.bpf.c: Gilbert-Elliott loss at a host interface's tc ingress (cls_bpf, direct-action).
 *
 * Every IPv4 packet steps the two-state chain under the map value's spin lock: the chain of
 * ge_chain.h, which moves once per packet, or the one of ge_time.h, which moves with the clock
 * (CLOCK_MONOTONIC, read just before taking the lock), as the loader chose. A packet the chain
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

SEC("tc")
int ge_ingress(struct __sk_buff *skb)
{
    __u32 key = 0;
    struct ge_value *v;
    __u64 now_ns;
    int drop;

    if (skb->protocol != bpf_htons(ETH_P_IP))
        return TC_ACT_OK;
    v = bpf_map_lookup_elem(&ge_map, &key);
    if (!v)
        return TC_ACT_OK;
    if (v->model == GE_MODEL_TIME) {
        now_ns = bpf_ktime_get_ns(); /* no helper calls while the lock is held */
        bpf_spin_lock(&v->lock);
        drop = ge_time_step(&v->tcfg, &v->chain, &v->clock, now_ns);
        bpf_spin_unlock(&v->lock);
    } else {
        bpf_spin_lock(&v->lock);
        drop = ge_step(&v->cfg, &v->chain);
        bpf_spin_unlock(&v->lock);
    }
    if (drop)
        skb->mark = GE_MARK;
    return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
