/* SPDX-License-Identifier: MIT */
/*
 * output.h - a worker's captured stdout and stderr (pm_options_set_output):
 * the two pipes of one incarnation, the line splitter, the slot's rate
 * limit. The splitter and the bucket are pure; output.c reads the pipes
 * and delivers the lines.
 */
#ifndef PM_OUTPUT_H
#define PM_OUTPUT_H

#include <stddef.h>
#include <stdint.h>

#include "procmesh.h"

/* Bytes read from one stream in one loop turn: a worker that floods its
 * output is read a slice at a time, so every other fd still gets its turn
 * (FAULTS.md 6, 37). */
#define PM__OUTPUT_TURN_BYTES ((size_t)64 * 1024)
/* Bytes read from one stream after its worker was reaped. Everything the
 * worker itself wrote is in the pipe by then (at most its capacity,
 * 1 MiB unless root raised fs.pipe-max-size); more can only come from a
 * descendant that still holds the write end, and that must not keep the
 * supervisor reading: the rest is left unread. */
#define PM__OUTPUT_DRAIN_BYTES ((size_t)2 * 1024 * 1024)

/* One stream of one incarnation. */
typedef struct pm__outstream {
    int fd;          /* the read end (O_NONBLOCK, O_CLOEXEC), or -1 */
    int armed;       /* a poll on fd is outstanding */
    size_t len;      /* bytes of the line being assembled in buf */
    char *buf;       /* PM_OUTPUT_LINE_MAX + 1 bytes, allocated on the first capture */
} pm__outstream;

/* A slot's output: its two streams (index PM_OUTPUT_STDOUT - 1 and
 * PM_OUTPUT_STDERR - 1) and its rate limit, which outlives incarnations
 * (a worker that floods and crashes in a loop does not get a fresh burst
 * every restart). */
typedef struct pm__output {
    pm__outstream s[2];
    double tokens;       /* lines that may be delivered now, up to PM_OUTPUT_BURST */
    uint64_t at_ms;      /* when tokens was last brought up to date; 0: never */
    uint64_t suppressed; /* lines dropped since the last one delivered */
} pm__output;

/* A finished line (or piece) from the splitter: emit(arg, text, len,
 * truncated). text is NUL-terminated. */
typedef void (*pm__output_emit)(void *arg, const char *text, size_t len, int truncated);

/* Appends n bytes to the stream's line, calling emit for every line ended
 * by '\n' (without it) and for every PM_OUTPUT_LINE_MAX bytes of a longer
 * one (truncated = 1). Pure. */
void pm__output_split(pm__outstream *st, const char *data, size_t n, pm__output_emit emit,
                      void *arg);

/* Emits what is left of a line the stream's end cut short (no '\n'). Pure. */
void pm__output_flush(pm__outstream *st, pm__output_emit emit, void *arg);

/* Takes a token at now_ms: 1 when a line may be delivered, else 0 (the
 * caller counts it as suppressed). Pure. */
int pm__output_take(pm__output *o, uint64_t now_ms);

#endif /* PM_OUTPUT_H */
