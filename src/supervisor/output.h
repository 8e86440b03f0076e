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
 * (doc/reliability.md, faults 6 and 37). */
#define PM__OUTPUT_TURN_BYTES ((size_t)64 * 1024)
/* Bytes read from one stream after its worker was reaped. Everything the
 * worker itself wrote is in the pipe by then (at most its capacity,
 * 1 MiB unless root raised fs.pipe-max-size); more can only come from a
 * descendant that still holds the write end, and that must not keep the
 * supervisor reading: the rest is left unread. */
#define PM__OUTPUT_DRAIN_BYTES ((size_t)2 * 1024 * 1024)
/* How long the drain after the reap waits, for each stream, for the
 * reads of what is left (os/offread.h: they run on threads of
 * their own). A read returns in microseconds unless a process still holds
 * the pipe's mutex (a descendant of the worker in splice(): doc/
 * reliability.md, the faults table). Past the bound the rest is left
 * unread, with a diagnostic: the loop is held twice this long at most
 * per incarnation, and the restart budget spaces incarnations out. Generous
 * so that a thread not scheduled at once on a loaded machine does not
 * lose an innocent worker's last words. */
#define PM__OUTPUT_DRAIN_WAIT_MS 1000

/* Lines the rate limit dropped that one stream keeps (the last ones, up to
 * this many and this many bytes of text): delivered past the limit when
 * the incarnation ends, so that a worker's last words before a crash are
 * never lost to a flood it wrote just before. Bounded per incarnation, so
 * the limit still holds for a worker that floods and crashes in a loop.
 * The byte bound is one whole piece, so the last one always fits. */
#define PM__OUTPUT_KEEP_LINES 16u
#define PM__OUTPUT_KEEP_BYTES ((size_t)PM_OUTPUT_LINE_MAX)

typedef struct pm__outkeep {
    unsigned n;     /* lines kept */
    unsigned first; /* index in ent of the oldest */
    size_t used;    /* bytes of text kept */
    size_t head;    /* where the next line's text goes in text (circular) */
    struct {
        uint32_t off, len;
        int truncated;
    } ent[PM__OUTPUT_KEEP_LINES];
    char text[PM__OUTPUT_KEEP_BYTES];
} pm__outkeep;

/* Everything a slot's output holds of what its workers wrote: the line
 * each stream is assembling and the lines each stream keeps (the bytes
 * read are in the reading job's buffer, os/offread.c, wiped on fork as
 * well). One private
 * mapping per slot (pm__wipemem_alloc), never the heap: a fork-mode worker
 * of another slot inherits it zeroed, and it is wiped when freed. */

typedef struct pm__outmem {
    char line[2][PM_OUTPUT_LINE_MAX + 1];
    pm__outkeep keep[2];
} pm__outmem;

/* One stream of one incarnation. */
typedef struct pm__outstream {
    int fd;          /* the read end (O_NONBLOCK, O_CLOEXEC), or -1 */
    struct pm__offjob *job; /* the read of fd under way on a thread (os/offread.h), or NULL */
    size_t len;      /* bytes of the line being assembled in buf */
    char *buf;       /* PM_OUTPUT_LINE_MAX + 1 bytes: its line in the slot's pm__outmem */
} pm__outstream;

/* A slot's output: its two streams (index PM_OUTPUT_STDOUT - 1 and
 * PM_OUTPUT_STDERR - 1) and its rate limit, which outlives incarnations
 * (a worker that floods and crashes in a loop does not get a fresh burst
 * every restart). */
typedef struct pm__output {
    pm__outstream s[2];
    pm__outmem *mem;     /* allocated on the first capture, or NULL */
    double tokens;       /* lines that may be delivered now, up to PM_OUTPUT_BURST */
    uint64_t at_ms;      /* when tokens was last brought up to date; 0: never */
    uint64_t suppressed; /* lines dropped since the last one delivered (kept ones not counted) */
} pm__output;

/* The output's part of the cluster (c->output): every slot's together. */
typedef struct pm__output_totals {
    uint64_t suppressed; /* captured lines dropped by the rate limit */
    uint64_t abandoned;  /* drains that left a pipe unread: its read did not return in time */
    struct pm__offread *reader; /* the threads that read the pipes (os/offread.h): capture only */
} pm__output_totals;

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

/* Keeps a line the limit dropped, as the newest; the oldest kept lines
 * make room. Returns how many it pushed out (dropped for good now). len is
 * at most PM__OUTPUT_KEEP_BYTES. Pure. */
unsigned pm__output_keep(pm__outkeep *k, const char *text, size_t len, int truncated);

/* Forgets every kept line (a later line was delivered, or the stream
 * ended without a drain); returns how many. Pure. */
unsigned pm__output_keep_clear(pm__outkeep *k);

/* Takes the oldest kept line out, copied into buf (PM_OUTPUT_LINE_MAX + 1
 * bytes, NUL-terminated): 1, or 0 when none is kept. Pure. */
int pm__output_keep_pop(pm__outkeep *k, char *buf, size_t *len, int *truncated);

/* ------------------------------------------------ a slot's pipes (output.c) */

struct pm__slot;

/* Creates the incarnation's two pipes: our read ends in s->out, the write
 * ends (close-on-exec; the child dup2s them onto 1 and 2, the caller closes
 * them after the fork) in wfd. 0 or -errno with nothing left open. */
int pm__output_open(pm_cluster *c, struct pm__slot *s, int wfd[2]);
/* The same with the pipes made ahead by pm__output_pipes (p[i][0] the read
 * end, p[i][1] the write end of stdout then stderr), which it takes: every
 * entry is -1 after it, on failure too (closed then). */
int pm__output_open_made(pm_cluster *c, struct pm__slot *s, int wfd[2], int p[2][2]);
/* Two pipes for an incarnation not started yet, as pm__output_open makes
 * them (both ends close-on-exec, the read end non-blocking). 0 or -errno
 * with every entry -1. */
int pm__output_pipes(int p[2][2]);
/* The threads that read and close the pipes, when output is captured, and
 * their epoll set armed on the loop (PM__TAG_OUTPUT): 0 or -errno.
 * wake_fd: the eventfd whose readiness makes the loop call
 * pm__output_collect. */
int pm__output_init(pm_cluster *c, int wake_fd);
/* Takes the reads that finished: their lines delivered, their streams
 * polled again or closed at EOF. On the loop, when wake_fd was readable. */
void pm__output_collect(pm_cluster *c);
/* Watches the read ends (the reader's epoll set, which the loop polls). */
void pm__output_arm(pm_cluster *c, struct pm__slot *s);
/* The reader's epoll set is readable (PM__TAG_OUTPUT): for each read end
 * reported, the read of a bounded slice starts on a thread
 * (pm__output_collect delivers its lines and watches it again). */
void pm__output_on_ready(pm_cluster *c);
/* Hands the supervisor's copies of an incarnation's write ends (fd[i] >= 0)
 * to the reader's threads to close, and sets them -1: once the worker
 * closed its own, ours is the last, and its release would wait for a
 * mutex a descendant may hold (output.c, close_stream). */
void pm__output_close_ends(pm_cluster *c, const struct pm__slot *s, int fd[2]);
/* After the reap, before the exit is reported: reads what is left (bounded
 * in bytes and in time: PM__OUTPUT_DRAIN_WAIT_MS), delivers the last
 * partial line, the kept lines and the suppressed count, closes. Returns
 * how many streams were left unread, err[i] saying why for stream i
 * (-ETIMEDOUT: its read did not return in time; a start's -errno), 0 for
 * one read to its end. */
int pm__output_drain(pm_cluster *c, struct pm__slot *s, int err[2]);
/* Closes the read ends without reading (on the reader's threads). */
void pm__output_close(pm_cluster *c, struct pm__slot *s);
/* Closes and frees everything of a slot's output (cluster teardown). */
void pm__output_free(pm_cluster *c, struct pm__slot *s);
/* 1 when processes that outlived s's earlier incarnations hold their pipes
 * and keep the slot's share of the reading threads (os/offread.h,
 * PM__OFFREAD_GROUP_MAX): a new incarnation's output could not be read, so
 * its start is refused (-EBUSY, incarnation.c), charged to the budget.
 * With capture on only (the reader exists). */
int pm__output_held(pm_cluster *c, const struct pm__slot *s);
/* The drain of one stream after the reap (pm__output_drain): its rules,
 * pure, so that each is tried alone (check_output test_drain_rules). */
typedef struct pm__drain {
    size_t left; /* bytes it may still read (PM__OUTPUT_DRAIN_BYTES at first) */
    int stale;   /* its read under way started before the reap */
    int done;    /* its drain ended */
    int err;     /* 0, or why it ended unread: -EBUSY, a start's -errno */
} pm__drain;
/* Its start: a read under way or not, the stream closed already, the
 * slot's group held (os/offread.h), the read under way waiting in the
 * queue behind the held ones. Held, a stream with no read or a waiting
 * one is not read at all (-EBUSY). */
void pm__output_drain_begin(pm__drain *d, int reading, int closed, int held, int waits);
/* 1 when a read of it starts now: not ended, none under way, the pipe not
 * ended empty, the deadline not reached (either ends it: done, no error). */
int pm__output_drain_go(pm__drain *d, int reading, int ended, uint64_t now_ms, uint64_t deadline_ms);
/* Its read could not start: ended with err. */
void pm__output_drain_failed(pm__drain *d, int err);
/* A read of it returned got bytes, at the stream's end (ended) or not: it
 * ends at EOF, at a fresh read that emptied the pipe, or at the bound. */
void pm__output_drain_took(pm__drain *d, int ended, size_t got);
/* At the end: 0, its err, or -ETIMEDOUT when its read had not returned
 * by the deadline. */
int pm__output_drain_result(const pm__drain *d);
/* 1 when the pipe fd reads from is empty and nobody holds its write end
 * any more: its end, known without a read (output.c says why nothing is
 * read on the loop even then). 0 while a writer holds it or bytes are
 * left, and for anything poll cannot tell. */
int pm__output_ended_empty(int fd);
/* The pipes handed over to be closed since the last call go to a reader
 * thread together: before the loop sleeps, and before a call returns to
 * the application. */
void pm__output_kick(pm_cluster *c);
/* Ends the reading threads, after every slot's pm__output_free. */
void pm__output_fini(pm_cluster *c);

#endif /* PM_OUTPUT_H */
