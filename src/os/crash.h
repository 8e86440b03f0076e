/* SPDX-License-Identifier: MIT */
/* crash.h - a worker's crash record: its layout in the control block, the worker's async-signal-safe fill, and the supervisor's validating decoder. */
#ifndef PM_CRASH_H
#define PM_CRASH_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/internal.h"

/* seq of a record: 0 none, WRITING while the handler fills it (a worker that
 * dies in the middle leaves it so), COMMITTED once every field is written. */
#define PM__CRASH_WRITING 1u
#define PM__CRASH_COMMITTED 2u
/* frame_module / pc_module of an address in no module known at join. */
#define PM__CRASH_NO_MODULE 0xffu

/* The record in the worker's control block (channel.h). Written only by the
 * worker's fatal-signal handler, read by the supervisor once, after the
 * reap, as a private copy that is validated before any field is used. */
struct pm__crash_rec {
    _Atomic uint32_t seq;
    int32_t signo;
    int32_t code;       /* si_code */
    uint32_t nframes;   /* <= PM_CRASH_FRAMES */
    uint32_t nmodules;  /* <= PM_CRASH_MODULES */
    uint32_t pc_module; /* index into modules, or PM__CRASH_NO_MODULE */
    uint64_t fault_addr;
    uint64_t pc;
    uint64_t frames[PM_CRASH_FRAMES];
    uint8_t frame_module[PM_CRASH_FRAMES];
    struct {
        uint64_t bias; /* load bias: address - bias is what addr2line takes */
        char path[PM_CRASH_PATH_MAX];
    } modules[PM_CRASH_MODULES];
};

/* A module of the worker, as found at join (dl_iterate_phdr): the span of
 * its loadable segments and its load bias. Kept in the worker's own memory;
 * the handler only reads it. */
typedef struct pm__crash_module {
    uint64_t lo, hi; /* [lo, hi) */
    uint64_t bias;
    char path[PM_CRASH_PATH_MAX];
} pm__crash_module;

#define PM__CRASH_TABLE_MAX 128

typedef struct pm__crash_modules {
    unsigned n;
    unsigned long long adds, subs; /* the loader's counts when it was loaded */
    /* /proc/self/exe, read by the first load ("" until then). Here, beside
     * the first entries, not in a buffer of its own: an exec'd worker's
     * join writes the table's first page anyway, and a separate buffer was
     * one more page written (a page fault) on its way to ready. */
    char exe[PM_CRASH_PATH_MAX];
    pm__crash_module m[PM__CRASH_TABLE_MAX];
} pm__crash_modules;

/* Worker side. Fills *t with the modules loaded now (the main program's path
 * from /proc/self/exe, read once per process into t->exe: only an exec
 * changes it, and an exec starts the process's memory afresh). *t starts
 * zeroed (static storage). Not async-signal-safe: run at join. */
void pm__crash_modules_load(pm__crash_modules *t);
/* The same, unless *t was loaded by this process (or the one it was forked
 * from) and no library has been loaded or unloaded since (the loader's
 * counts, read from the first module alone): a supervisor refreshes the
 * table before each fork at the cost of one short call. */
void pm__crash_modules_refresh(pm__crash_modules *t);

/* Worker side. glibc's backtrace() loads its unwinder (libgcc_s: dlopen,
 * malloc) on its first call, which must not be a signal handler's; loading
 * it at every exec'd worker's start would put a library's open, maps and
 * relocations on the way to ready. pm__crash_unwinder_prime makes that
 * first call (not async-signal-safe; once per process, a fork child
 * inherits it); the worker calls it once it is ready. pm__crash_backtrace
 * is backtrace() after that, async-signal-safe, and 0 frames before it. */
void pm__crash_unwinder_prime(void);
int pm__crash_backtrace(void **frames, int max);

/* Worker side, async-signal-safe and pure: writes a record (seq WRITING,
 * every field, then COMMITTED with a release store). frames[0..n) are the
 * raw return addresses; leading frames before the one equal to pc (the
 * handler's own) are dropped; each frame and pc is placed in its module,
 * whose path is copied into the record (at most PM_CRASH_MODULES distinct
 * ones; further modules' frames stay absolute addresses). */
void pm__crash_fill(struct pm__crash_rec *r, const pm__crash_modules *t, int signo, int code,
                    uint64_t fault_addr, uint64_t pc, const uint64_t *frames, unsigned n);

/* Supervisor side, pure. Decodes a private copy of a record of a worker that
 * died of exit_signal: PM_CRASH_RECORDED with *out filled, PM_CRASH_UNRECORDED
 * (no record), PM_CRASH_INVALID (half-written, another signal than the one
 * the process died of, a count out of range, a module index or path that is
 * not one). Only the copy is read; nothing in it is trusted before its check. */
int pm__crash_decode(const struct pm__crash_rec *copy, int exit_signal, pm_crash_report *out);

/* The name of si_code for signo ("SEGV_MAPERR", "SI_USER"), or NULL. */
const char *pm__crash_code_name(int signo, int code);

/* 1 for the signals the worker's handler records. */
int pm__crash_signal_recorded(int signo);

/* Supervisor side, after the reap of an incarnation that died of signal:
 * copies the record out of shared_rec (the crash field of the dead
 * incarnation's control block, still mapped; NULL when it is not) and
 * replaces *last with what it says (allocated on first use). Nothing for a
 * signal the handler does not record (SIGKILL, SIGTERM ...). */
void pm__crash_collect(pm_crash_report **last, const void *shared_rec, uint64_t incarnation,
                       int signal, int core_dumped);

#endif /* PM_CRASH_H */
