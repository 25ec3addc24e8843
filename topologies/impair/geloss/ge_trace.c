/*
 * ge_trace.c: loss traces in memory, on disk and in the program's map ge_bits (ge_trace.h), for
 * the loader ge_loss.c's attach --trace, dump and simulate.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <linux/bpf.h>
#include <bpf/bpf.h>

#define GE_U64 uint64_t
#define GE_U32 uint32_t
#include "ge_map.h"
#include "ge_trace.h"

int ge_trace_new(struct ge_trace *t)
{
    memset(t, 0, sizeof *t);
    t->words = calloc(GE_TRACE_WORDS, sizeof *t->words);
    if (!t->words) {
        fprintf(stderr, "ge-loss: out of memory for a trace\n");
        return -1;
    }
    return 0;
}

void ge_trace_free(struct ge_trace *t)
{
    free(t->words);
    t->words = NULL;
}

void ge_trace_set(struct ge_trace *t, uint64_t pos)
{
    if (pos < GE_TRACE_PACKETS)
        t->words[pos >> 6] |= 1ULL << (pos & 63);
}

int ge_trace_get(const struct ge_trace *t, uint64_t pos)
{
    return pos < t->packets && ((t->words[pos >> 6] >> (pos & 63)) & 1);
}

void ge_trace_cut(struct ge_trace *t, uint64_t packets)
{
    if (packets > GE_TRACE_PACKETS)
        packets = GE_TRACE_PACKETS;
    uint64_t used = (packets + 63) / 64;
    if (packets % 64)
        t->words[used - 1] &= (1ULL << (packets % 64)) - 1;
    memset(t->words + used, 0, (GE_TRACE_WORDS - used) * sizeof *t->words);
    t->packets = packets;
    t->drops = 0;
    for (uint64_t i = 0; i < used; i++)
        t->drops += (uint64_t)__builtin_popcountll(t->words[i]);
}

static int ge_io_fail(const char *what, const char *path, FILE *f)
{
    fprintf(stderr, "ge-loss: %s %s: %s\n", what, path, errno ? strerror(errno) : "short file");
    if (f)
        fclose(f);
    return -1;
}

int ge_trace_read(const char *path, struct ge_trace *t)
{
    char magic[8];
    uint64_t head[2];
    errno = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ge_io_fail("cannot open the trace", path, NULL);
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, GE_TRACE_MAGIC, 8)
        || fread(head, sizeof head[0], 2, f) != 2) {
        fclose(f);
        fprintf(stderr, "ge-loss: %s is not a loss trace (no GETRACE1 header)\n", path);
        return -1;
    }
    uint64_t packets = le64toh(head[0]), drops = le64toh(head[1]);
    if (packets > GE_TRACE_PACKETS) {
        fclose(f);
        fprintf(stderr, "ge-loss: %s covers %llu packets, above the %llu a trace holds\n", path,
                (unsigned long long)packets, (unsigned long long)GE_TRACE_PACKETS);
        return -1;
    }
    uint64_t used = (packets + 63) / 64;
    if (fread(t->words, sizeof *t->words, used, f) != used)
        return ge_io_fail("cannot read the trace", path, f);
    fclose(f);
    for (uint64_t i = 0; i < used; i++)
        t->words[i] = le64toh(t->words[i]);
    ge_trace_cut(t, packets);
    if (t->drops != drops) {
        fprintf(stderr, "ge-loss: %s says %llu drops but holds %llu\n", path,
                (unsigned long long)drops, (unsigned long long)t->drops);
        return -1;
    }
    return 0;
}

int ge_trace_write(const char *path, const struct ge_trace *t)
{
    uint64_t head[2] = {htole64(t->packets), htole64(t->drops)};
    uint64_t used = (t->packets + 63) / 64;
    errno = 0;
    FILE *f = fopen(path, "wb");
    if (!f)
        return ge_io_fail("cannot write the trace", path, NULL);
    if (fwrite(GE_TRACE_MAGIC, 1, 8, f) != 8 || fwrite(head, sizeof head[0], 2, f) != 2)
        return ge_io_fail("cannot write the trace", path, f);
    for (uint64_t i = 0; i < used; i++) {
        uint64_t w = htole64(t->words[i]);
        if (fwrite(&w, sizeof w, 1, f) != 1)
            return ge_io_fail("cannot write the trace", path, f);
    }
    if (fclose(f))
        return ge_io_fail("cannot write the trace", path, NULL);
    return 0;
}

int ge_open_maps(uint32_t prog_id, int *value_fd, int *bits_fd)
{
    uint32_t ids[4] = {0};
    struct bpf_prog_info info;
    uint32_t len = sizeof info;
    int prog_fd = bpf_prog_get_fd_by_id(prog_id);
    *value_fd = *bits_fd = -1;
    if (prog_fd < 0) {
        fprintf(stderr, "ge-loss: program %u: %s\n", prog_id, strerror(errno));
        return -1;
    }
    memset(&info, 0, sizeof info);
    info.nr_map_ids = 4;
    info.map_ids = (uint64_t)(uintptr_t)ids;
    int err = bpf_obj_get_info_by_fd(prog_fd, &info, &len);
    close(prog_fd);
    for (uint32_t i = 0; !err && i < info.nr_map_ids && i < 4; i++) {
        struct bpf_map_info map;
        uint32_t map_len = sizeof map;
        int fd = bpf_map_get_fd_by_id(ids[i]);
        memset(&map, 0, sizeof map);
        if (fd < 0 || bpf_obj_get_info_by_fd(fd, &map, &map_len)) {
            if (fd >= 0)
                close(fd);
            continue;
        }
        int *slot = !strcmp(map.name, "ge_map") ? value_fd : !strcmp(map.name, "ge_bits")
                                                                 ? bits_fd : NULL;
        if (slot && *slot < 0)
            *slot = fd;
        else
            close(fd);
    }
    if (*value_fd < 0 || *bits_fd < 0) {
        fprintf(stderr, "ge-loss: program %u lacks the maps ge_map and ge_bits\n", prog_id);
        if (*value_fd >= 0)
            close(*value_fd);
        if (*bits_fd >= 0)
            close(*bits_fd);
        return -1;
    }
    return 0;
}

int ge_trace_load(int bits_fd, const struct ge_trace *t)
{
    for (uint32_t i = 0; i < (t->packets + 63) / 64; i++) {
        if (t->words[i] && bpf_map_update_elem(bits_fd, &i, &t->words[i], BPF_ANY)) {
            fprintf(stderr, "ge-loss: writing the trace failed: %s\n", strerror(errno));
            return -1;
        }
    }
    return 0;
}

int ge_trace_dump(int bits_fd, uint64_t packets, struct ge_trace *t)
{
    if (packets > GE_TRACE_PACKETS)
        packets = GE_TRACE_PACKETS;
    for (uint32_t i = 0; i < (packets + 63) / 64; i++) {
        if (bpf_map_lookup_elem(bits_fd, &i, &t->words[i])) {
            fprintf(stderr, "ge-loss: reading the trace failed: %s\n", strerror(errno));
            return -1;
        }
    }
    ge_trace_cut(t, packets);
    return 0;
}
