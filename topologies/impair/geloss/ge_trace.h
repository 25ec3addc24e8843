/*
 * ge_trace.h: loss traces (which packet positions of one ingress were dropped) on disk and in the
 * kernel, for the loader ge_loss.c.
 *
 * The file: the 8 bytes "GETRACE1", then two little-endian 64-bit numbers, the positions covered
 * (packets) and the drops among them (the bits set), then ceil(packets / 64) little-endian 64-bit
 * words, bit i % 64 of word i / 64 set if the i-th IPv4 packet at the ingress was dropped (the
 * layout of the map ge_bits, ge_map.h). Bits past `packets` are zero. Python reads the same
 * format (topologies/impair/loss.py, read_trace).
 */
#ifndef GE_TRACE_H
#define GE_TRACE_H

#include <stdint.h>

#define GE_TRACE_MAGIC "GETRACE1"

struct ge_trace {
    uint64_t packets;   /* positions covered, at most GE_TRACE_PACKETS */
    uint64_t drops;     /* bits set */
    uint64_t *words;    /* GE_TRACE_WORDS words, zero past packets */
};

/* A zeroed trace of no packets; 0, or -1 (out of memory, message printed). */
int ge_trace_new(struct ge_trace *t);
void ge_trace_free(struct ge_trace *t);
/* Record a drop at position pos (ignored past the end). */
void ge_trace_set(struct ge_trace *t, uint64_t pos);
/* Whether position pos is a drop (0 past the trace's end). */
int ge_trace_get(const struct ge_trace *t, uint64_t pos);
/* Cut the trace to `packets` positions (zeroing the bits past them) and count its drops. */
void ge_trace_cut(struct ge_trace *t, uint64_t packets);
/* Read or write a trace file; 0, or -1 with a message on stderr. */
int ge_trace_read(const char *path, struct ge_trace *t);
int ge_trace_write(const char *path, const struct ge_trace *t);

/* The file descriptors of the maps of program prog_id (ge_map and ge_bits); 0, or -1 with a
 * message on stderr. The caller closes both. */
int ge_open_maps(uint32_t prog_id, int *value_fd, int *bits_fd);
/* Write `packets` positions of a trace into the ge_bits map; 0, or -1 with a message. */
int ge_trace_load(int bits_fd, const struct ge_trace *t);
/* Read the ge_bits map into t, cut to `packets` positions; 0, or -1 with a message. */
int ge_trace_dump(int bits_fd, uint64_t packets, struct ge_trace *t);

#endif
