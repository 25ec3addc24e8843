/*
 * ge-loss: load, configure, read and remove the Gilbert-Elliott loss program (ge_loss.bpf.o)
 * at one interface's tc ingress, in the current network namespace.
 *
 *     ge-loss attach   --dev IF MODEL [--seed S] [--stream K] [--obj PATH]
 *     ge-loss read     --dev IF
 *     ge-loss dump     --dev IF --out FILE
 *     ge-loss detach   --dev IF
 *     ge-loss simulate --packets N MODEL [--interval-us T] [--seed S] [--stream K] [--out FILE]
 *     ge-loss table
 *     ge-loss count
 *
 * MODEL is one of
 *     --p-gb P --p-bg P --loss-good P --loss-bad P       the per-packet chain (ge_chain.h)
 *     --good-ms D --bad-ms D --loss-good P --loss-bad P  the time-based chain (ge_time.h)
 *     --trace FILE                                       a recorded trace, replayed (ge_trace.h)
 * with each P a probability from 0 to 1 and each D a mean duration in milliseconds
 * (GE_TIME_MIN_MS to GE_TIME_MAX_MS).
 *
 * attach loads the object, writes the parameters and the seeded chain state into its map, and
 * only then attaches it as a direct-action cls_bpf filter (handle 1, priority 1) under a clsact
 * qdisc it creates if needed; an attached program is replaced atomically, with fresh counters.
 * Nothing is pinned: the filter holds the program and the program its map, so deleting the
 * filter, the qdisc or the interface (its namespace) frees everything.
 * read prints the map's parameters and counters as one JSON line (read under the map's lock).
 * dump writes the positions dropped so far (under a trace: the trace up to the packets seen) to
 * a trace file: what `attach --trace` replays, packet position by packet position.
 * detach removes the filter and the clsact qdisc; it is not an error if they are absent.
 * simulate runs the same chain in user space over N packets and prints the same counters: what
 * the kernel will do, testable without root. Under the time-based chain the packets arrive every
 * T microseconds (--interval-us, needed there and only there), from 1 s on. With --out it also
 * writes the drops as a trace file, the one the kernel records for the same packets.
 * table prints, as JSON, the table the time-based chain draws its durations from and the
 * constants that go with it (ge_time.h), so tests can check the distribution it gives.
 * count prints how many programs named ge_ingress the kernel holds, in every namespace (for
 * tests that check nothing is left behind).
 *
 * The seed (an unsigned 64-bit number) and the stream (e.g. the host's index) together fix the
 * chain's random numbers; without --seed they come from getrandom(). Exit status: 0 ok,
 * 2 usage error, 1 runtime failure (message on stderr).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <linux/bpf.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#define GE_U64 uint64_t
#define GE_U32 uint32_t
#include "ge_map.h"
#include "ge_trace.h"
#include "ge_args.h"

#define GE_HANDLE 1
#define GE_PRIORITY 1
#define GE_STREAM_MIX 0xD1B54A32D192ED03ULL

static uint64_t ge_threshold(double p)
{
    return (uint64_t)llround(p * (double)GE_ONE);
}

/* The mean of ln 2 - ln M over each of the GE_EXP_SIZE equal slices of M in [1, 2), in units of
 * 2^-GE_EXP_FRAC (see ge_time.h): the integral of ln m is m ln m - m. */
static void ge_exp_table(GE_U32 *table)
{
    for (int i = 0; i < GE_EXP_SIZE; i++) {
        double lo = 1.0 + (double)i / GE_EXP_SIZE, hi = 1.0 + (double)(i + 1) / GE_EXP_SIZE;
        double mean_ln = (hi * log(hi) - hi - (lo * log(lo) - lo)) / (hi - lo);
        table[i] = (GE_U32)llround((M_LN2 - mean_ln) * (double)(1 << GE_EXP_FRAC));
    }
}

static uint64_t ge_ms_to_ns(double ms)
{
    return (uint64_t)llround(ms * 1e6);
}

/* Parameters and a seeded, zeroed chain from the arguments (under a trace, its length). */
static int ge_fill(const ge_args *a, const struct ge_trace *trace, struct ge_value *v)
{
    memset(v, 0, sizeof *v);
    if (a->trace) {
        v->model = GE_MODEL_TRACE;
        v->trace_packets = trace->packets;
    } else if (a->time_chain) {
        v->model = GE_MODEL_TIME;
        v->tcfg.mean_ns[0] = ge_ms_to_ns(a->p[GE_GOOD_MS]);
        v->tcfg.mean_ns[1] = ge_ms_to_ns(a->p[GE_BAD_MS]);
        v->tcfg.loss[0] = ge_threshold(a->p[GE_LOSS_GOOD]);
        v->tcfg.loss[1] = ge_threshold(a->p[GE_LOSS_BAD]);
        v->tcfg.p_bad = ge_threshold(a->p[GE_BAD_MS] / (a->p[GE_GOOD_MS] + a->p[GE_BAD_MS]));
        ge_exp_table(v->tcfg.exp_q20);
        /* The clock starts at the first packet (end_ns 0), in the stationary distribution. */
    } else {
        v->model = GE_MODEL_PACKET;
        v->cfg.p_gb = ge_threshold(a->p[GE_P_GB]);
        v->cfg.p_bg = ge_threshold(a->p[GE_P_BG]);
        v->cfg.loss_good = ge_threshold(a->p[GE_LOSS_GOOD]);
        v->cfg.loss_bad = ge_threshold(a->p[GE_LOSS_BAD]);
    }
    uint64_t seed = a->seed;
    if (!a->have_seed && getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed) {
        perror("ge-loss: getrandom");
        return -1;
    }
    v->chain.rng = seed ^ (a->stream * GE_STREAM_MIX);
    /* Start in the stationary distribution's more likely state: good unless bad dominates. */
    v->chain.bad = v->cfg.p_gb > v->cfg.p_bg;
    return 0;
}

static double ge_prob(uint64_t threshold)
{
    return (double)threshold / (double)GE_ONE;
}

static void ge_print(const struct ge_value *v)
{
    if (v->model == GE_MODEL_TRACE) {
        printf("{\"model\": \"trace\", \"packets\": %" PRIu64 ", \"drops\": %" PRIu64
               ", \"bursts\": %" PRIu64 ", \"trace_packets\": %" PRIu64 ", \"mark\": %u}\n",
               v->chain.packets, v->chain.drops, v->chain.bursts, v->trace_packets, GE_MARK);
        return;
    }
    if (v->model == GE_MODEL_TIME) {
        const struct ge_clock *k = &v->clock;
        printf("{\"model\": \"time\", \"packets\": %" PRIu64 ", \"drops\": %" PRIu64
               ", \"bursts\": %" PRIu64 ", \"bad_packets\": %" PRIu64 ", \"bad\": %u"
               ", \"good_periods\": %" PRIu64 ", \"bad_periods\": %" PRIu64
               ", \"good_ns\": %" PRIu64 ", \"bad_ns\": %" PRIu64 ", \"restarts\": %" PRIu64
               ", \"good_ms\": %.9g, \"bad_ms\": %.9g, \"loss_good\": %.9g, \"loss_bad\": %.9g"
               ", \"mark\": %u}\n",
               v->chain.packets, v->chain.drops, v->chain.bursts, v->chain.bad_packets,
               v->chain.bad, k->periods[0], k->periods[1], k->period_ns[0], k->period_ns[1],
               k->restarts, (double)v->tcfg.mean_ns[0] / 1e6, (double)v->tcfg.mean_ns[1] / 1e6,
               ge_prob(v->tcfg.loss[0]), ge_prob(v->tcfg.loss[1]), GE_MARK);
        return;
    }
    printf("{\"model\": \"packet\", \"packets\": %" PRIu64 ", \"drops\": %" PRIu64 ", \"bursts\": %" PRIu64
           ", \"bad_packets\": %" PRIu64 ", \"bad\": %u, \"p_gb\": %.9g, \"p_bg\": %.9g"
           ", \"loss_good\": %.9g, \"loss_bad\": %.9g, \"mark\": %u}\n",
           v->chain.packets, v->chain.drops, v->chain.bursts, v->chain.bad_packets, v->chain.bad,
           ge_prob(v->cfg.p_gb), ge_prob(v->cfg.p_bg), ge_prob(v->cfg.loss_good),
           ge_prob(v->cfg.loss_bad), GE_MARK);
}

/* The device's ingress hook and our filter on it (its handle and priority): what attaching,
 * reading and removing the program name. */
static int ge_filter(const char *dev, struct bpf_tc_hook *hook, struct bpf_tc_opts *opts)
{
    unsigned ifindex = if_nametoindex(dev);
    if (!ifindex) {
        fprintf(stderr, "ge-loss: no interface %s in this network namespace\n", dev);
        return -1;
    }
    memset(hook, 0, sizeof *hook);
    hook->sz = sizeof *hook;
    hook->ifindex = (int)ifindex;
    hook->attach_point = BPF_TC_INGRESS;
    memset(opts, 0, sizeof *opts);
    opts->sz = sizeof *opts;
    opts->handle = GE_HANDLE;
    opts->priority = GE_PRIORITY;
    return 0;
}

static int ge_attach(const ge_args *a)
{
    struct ge_value v;
    struct bpf_tc_hook hook;
    struct bpf_tc_opts opts;
    struct ge_trace trace = {0};
    int rc = 1, err;
    if (a->trace && (ge_trace_new(&trace) || ge_trace_read(a->trace, &trace))) {
        ge_trace_free(&trace);
        return 1;
    }
    if (ge_fill(a, &trace, &v) || ge_filter(a->dev, &hook, &opts)) {
        ge_trace_free(&trace);
        return 1;
    }
    struct bpf_object *obj = bpf_object__open_file(a->obj, NULL);
    if (!obj) {
        fprintf(stderr, "ge-loss: cannot open %s: %s\n", a->obj, strerror(errno));
        ge_trace_free(&trace);
        return 1;
    }
    if ((err = bpf_object__load(obj))) {
        fprintf(stderr, "ge-loss: the kernel refused %s: %s\n", a->obj, strerror(-err));
        goto out;
    }
    struct bpf_map *map = bpf_object__find_map_by_name(obj, "ge_map");
    struct bpf_map *bits = bpf_object__find_map_by_name(obj, "ge_bits");
    struct bpf_program *prog = bpf_object__find_program_by_name(obj, "ge_ingress");
    if (!map || !bits || !prog) {
        fprintf(stderr, "ge-loss: %s lacks ge_map, ge_bits or ge_ingress\n", a->obj);
        goto out;
    }
    uint32_t key = 0;
    if (bpf_map_update_elem(bpf_map__fd(map), &key, &v, BPF_ANY)) {
        fprintf(stderr, "ge-loss: writing the parameters failed: %s\n", strerror(errno));
        goto out;
    }
    if (a->trace && ge_trace_load(bpf_map__fd(bits), &trace))
        goto out;
    err = bpf_tc_hook_create(&hook);
    if (err && err != -EEXIST) {
        fprintf(stderr, "ge-loss: cannot add a clsact qdisc to %s: %s\n", a->dev, strerror(-err));
        goto out;
    }
    opts.prog_fd = bpf_program__fd(prog);
    opts.flags = BPF_TC_F_REPLACE;
    if ((err = bpf_tc_attach(&hook, &opts))) {
        fprintf(stderr, "ge-loss: cannot attach to %s ingress: %s\n", a->dev, strerror(-err));
        goto out;
    }
    printf("{\"prog_id\": %u}\n", opts.prog_id);
    rc = 0;
out:
    bpf_object__close(obj); /* the attached filter keeps the program and its maps */
    ge_trace_free(&trace);
    return rc;
}

/* The maps of the program at dev's ingress and its map value, read under the lock; 0 or 1. */
static int ge_lookup(const char *dev, struct ge_value *v, int *bits_fd)
{
    struct bpf_tc_hook hook;
    struct bpf_tc_opts opts;
    int value_fd;
    uint32_t key = 0;
    if (ge_filter(dev, &hook, &opts))
        return 1;
    int err = bpf_tc_query(&hook, &opts);
    if (err) {
        fprintf(stderr, "ge-loss: no loss program on %s: %s\n", dev, strerror(-err));
        return 1;
    }
    if (ge_open_maps(opts.prog_id, &value_fd, bits_fd))
        return 1;
    err = bpf_map_lookup_elem_flags(value_fd, &key, v, BPF_F_LOCK);
    if (err)
        fprintf(stderr, "ge-loss: reading the loss program's map failed: %s\n", strerror(errno));
    close(value_fd);
    if (err)
        close(*bits_fd);
    return err ? 1 : 0;
}

static int ge_read(const ge_args *a)
{
    struct ge_value v;
    int bits_fd;
    if (ge_lookup(a->dev, &v, &bits_fd))
        return 1;
    close(bits_fd);
    ge_print(&v);
    return 0;
}

static int ge_dump(const ge_args *a)
{
    struct ge_value v;
    struct ge_trace trace;
    int bits_fd, rc = 1;
    if (ge_lookup(a->dev, &v, &bits_fd))
        return 1;
    if (!ge_trace_new(&trace) && !ge_trace_dump(bits_fd, v.chain.packets, &trace)
        && !ge_trace_write(a->out, &trace)) {
        printf("{\"packets\": %" PRIu64 ", \"drops\": %" PRIu64 "}\n", trace.packets,
               trace.drops);
        rc = 0;
    }
    close(bits_fd);
    ge_trace_free(&trace);
    return rc;
}

static int ge_detach(const ge_args *a)
{
    struct bpf_tc_hook hook;
    struct bpf_tc_opts opts;
    if (ge_filter(a->dev, &hook, &opts))
        return 1;
    int err = bpf_tc_detach(&hook, &opts);
    if (err && err != -ENOENT && err != -EINVAL) {
        fprintf(stderr, "ge-loss: cannot remove the filter from %s: %s\n", a->dev, strerror(-err));
        return 1;
    }
    hook.attach_point = BPF_TC_INGRESS | BPF_TC_EGRESS; /* the whole clsact qdisc */
    err = bpf_tc_hook_destroy(&hook);
    if (err && err != -ENOENT && err != -EINVAL) {
        fprintf(stderr, "ge-loss: cannot remove clsact from %s: %s\n", a->dev, strerror(-err));
        return 1;
    }
    return 0;
}

/* The kernel program's steps in user space; the drops recorded as the kernel records them. */
static int ge_simulate(const ge_args *a)
{
    struct ge_value v;
    struct ge_trace trace, out;
    int rc = 1;
    if (ge_trace_new(&trace) || ge_trace_new(&out))
        goto done;
    if ((a->trace && ge_trace_read(a->trace, &trace)) || ge_fill(a, &trace, &v))
        goto done;
    for (uint64_t i = 0; i < a->packets; i++) {
        int drop;
        if (v.model == GE_MODEL_TRACE) {
            drop = ge_trace_get(&trace, i);
            ge_tally(&v.chain, drop ? 0 : 1, 1);
        } else if (v.model == GE_MODEL_TIME) {
            /* Packet i arrives at 1 s + i * interval, in whole nanoseconds as the kernel's. */
            uint64_t now_ns = 1000000000ULL + (uint64_t)llround((double)i * a->interval_us * 1e3);
            drop = ge_time_step(&v.tcfg, &v.chain, &v.clock, now_ns);
        } else {
            drop = ge_step(&v.cfg, &v.chain);
        }
        if (drop)
            ge_trace_set(&out, i);
    }
    ge_trace_cut(&out, a->packets);
    if (a->out && ge_trace_write(a->out, &out))
        goto done;
    ge_print(&v);
    rc = 0;
done:
    ge_trace_free(&trace);
    ge_trace_free(&out);
    return rc;
}

static int ge_table(void)
{
    GE_U32 table[GE_EXP_SIZE];
    ge_exp_table(table);
    printf("{\"bits\": %d, \"frac_bits\": %d, \"ln2\": %llu, \"max_octave\": %d, \"table\": [",
           GE_EXP_BITS, GE_EXP_FRAC, GE_LN2_Q20, GE_EXP_MAX_OCTAVE);
    for (int i = 0; i < GE_EXP_SIZE; i++)
        printf("%s%u", i ? ", " : "", table[i]);
    printf("]}\n");
    return 0;
}

static int ge_count(void)
{
    uint32_t id = 0, n = 0;
    while (!bpf_prog_get_next_id(id, &id)) {
        int fd = bpf_prog_get_fd_by_id(id);
        if (fd < 0)
            continue; /* unloaded meanwhile */
        struct bpf_prog_info info;
        uint32_t len = sizeof info;
        memset(&info, 0, sizeof info);
        if (!bpf_obj_get_info_by_fd(fd, &info, &len) && !strcmp(info.name, "ge_ingress"))
            n++;
        close(fd);
    }
    printf("%u\n", n);
    return 0;
}

static int ge_libbpf_log(enum libbpf_print_level level, const char *fmt, va_list args)
{
    return level == LIBBPF_WARN ? vfprintf(stderr, fmt, args) : 0;
}


int main(int argc, char **argv)
{
    static char default_obj[4096];
    ge_args a;
    memset(&a, 0, sizeof a);
    int rc = ge_parse(argc, argv, &a);
    if (rc)
        return rc;
    if (!a.obj) {
        /* The object is built next to this binary. */
        ssize_t n = readlink("/proc/self/exe", default_obj, sizeof default_obj - 32);
        if (n <= 0) {
            perror("ge-loss: readlink /proc/self/exe");
            return 1;
        }
        default_obj[n] = '\0';
        char *slash = strrchr(default_obj, '/');
        strcpy(slash ? slash + 1 : default_obj, "ge_loss.bpf.o");
        a.obj = default_obj;
    }
    libbpf_set_print(ge_libbpf_log);
    if (!strcmp(a.cmd, "count"))
        return ge_count();
    if (!strcmp(a.cmd, "table"))
        return ge_table();
    if (!strcmp(a.cmd, "attach"))
        return ge_attach(&a);
    if (!strcmp(a.cmd, "read"))
        return ge_read(&a);
    if (!strcmp(a.cmd, "dump"))
        return ge_dump(&a);
    if (!strcmp(a.cmd, "detach"))
        return ge_detach(&a);
    return ge_simulate(&a);
}
