/* SPDX-License-Identifier: MIT */
/*
 * bench.h - what pm-bench's subcommands share: options, the helpers for the
 * baseline processes and pipes, statistics and output (all in common.c),
 * and the subcommands' entry points.
 *
 * pm-bench measures and prints; it asserts nothing (performance targets are
 * checked by people reading its output, never by timed tests). Every
 * subcommand returns the exit status: 0 done, 1 a measurement failed (the
 * transport is broken, not slow).
 */
#ifndef PM_BENCH_H
#define PM_BENCH_H

#include "base/internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

/* Every transport under test holds as much as one ring, so that none of
 * them wins by buffering more. */
#define RING_CAP ((uint64_t)1 << 20)
#define RING_MAX_FRAME (64u * 1024u)

typedef struct bench_opts {
    uint64_t frames; /* 0 in relay: a count per frame size */
    size_t size;
    unsigned runs;
    unsigned rounds;
    int privileges; /* restart: also measure with --user nobody + seccomp basic */
    int quick;      /* compare, scale: tiny counts, one run (a smoke test, not a figure) */
    unsigned pause_us; /* relay: the pause before each paused request, 0: none */
    unsigned max_n;    /* scale, spawn: the largest N measured (0: the default set) */
    unsigned row;      /* restart: only this row (1..), no baseline; 0: every row */
    unsigned settle_ms; /* restart: the pause between a worker's ready and its kill */
} bench_opts;

/* Which options a subcommand takes. */
enum {
    OPT_FRAMES = 1,
    OPT_SIZE = 2,
    OPT_RUNS = 4,
    OPT_ROUNDS = 8,
    OPT_PRIVILEGES = 16,
    OPT_QUICK = 32, /* --quick, no value */
    OPT_CSV = 64,   /* --csv FILE: every figure also as a CSV row (csv_row) */
    OPT_PAUSE = 128, /* --pause-us P */
    OPT_MAX = 256,   /* --max N */
    OPT_ROW = 512,   /* --row K */
    OPT_SETTLE = 1024 /* --settle-ms S */
};

/* Reads the options after the subcommand's name (argv[2] on) into *o, which
 * holds the subcommand's defaults. Returns 0, 1 when --help was asked for,
 * or -1 after a one-line message on stderr. */
int parse_options(int argc, char **argv, unsigned allowed, bench_opts *o);

/* This program, for re-executing itself as a worker or a baseline child. */
extern char self_exe[4096];
/* Direct lanes in the clusters bench_options makes: -1 the library's
 * default (or PM_BENCH_LANES), 0 off, 1 on (lane.c sets it per row). */
extern int bench_lanes;
/* lanerestart.c: rounds restarts of a worker its peer talks to (over a
 * lane, or through the hub with lanes 0): kill -> ready and kill -> the
 * peer's first answer from the replacement, ns per round. 0 or -1. */
int lane_restart_run(int lanes, unsigned rounds, uint64_t *ready, uint64_t *answer);

/* The exec-mode entries: "pm-bench __worker" idles as a mesh worker,
 * "pm-bench __child" writes one byte to fd 3 and exits; "pm-bench
 * __child ring" first maps the memfd at fd 4 (the spawn floor's ring) and
 * writes to it. */
int worker_main(void);
int child_main(int argc, char **argv);
/* "pm-bench __floor MEMFD EFD": restart's floor row's exec'd replacement. */
int floor_child_main(int argc, char **argv);

/* cgfloor.c: the floor rows' cgroups (restart, spawn), one leaf per
 * process in a procmesh.<pid>.<pidns>.<k> directory of the bench's own. cgfloor_open:
 * 0, or -1 with why filled (no cgroup v2 tree to write: the rows are
 * skipped with the reason). cgfloor_leaf makes leaf i and opens it and its
 * cgroup.procs (0 or -1, errno set); cgfloor_leaf_remove closes and
 * removes it once its processes are reaped (its fds may be closed before,
 * cgfloor_leaf_close). cgfloor_clone_into: a child born in the leaf
 * (clone3 CLONE_INTO_CGROUP, fork semantics, and CLONE_VFORK when
 * vfork_wait), whose only calls may be execve and _exit (no fork handlers
 * ran); the pid, 0 in the child, or -1. */
typedef struct cgfloor_leaf_t {
    int dir_fd, procs_fd;
} cgfloor_leaf_t;
int cgfloor_open(char *why, size_t size);
void cgfloor_close(void);
int cgfloor_leaf(unsigned i, cgfloor_leaf_t *l);
void cgfloor_leaf_remove(unsigned i, cgfloor_leaf_t *l);
void cgfloor_leaf_close(cgfloor_leaf_t *l);
pid_t cgfloor_clone_into(const cgfloor_leaf_t *l, int vfork_wait);
/* A child born in the leaf that execs path: the vfork-style clone of
 * procmesh's exec spawn where it has one (the child shares our memory
 * until its execve), else cgfloor_clone_into's. The pid or -1. */
pid_t cgfloor_vfork_exec(const cgfloor_leaf_t *l, const char *path, char *const argv[]);

/* A supervisor of `workers` idle workers restarted at once (no backoff, no
 * budget) whose READY events set ready_inc and stop pm_cluster_run. */
/* PM_BENCH_OUTPUT=capture: bench_options captures the workers' output. */
int pm_bench_capture(void);
pm_options *bench_options(int workers, int exec_mode);
extern volatile uint64_t ready_inc;
/* pm__now_ns() when that READY event was handled: the moment the
 * supervisor knows the worker is ready, before the rest of that loop turn
 * (the next spare channel, a warm standby's fork) runs. */
extern volatile uint64_t ready_at_ns;

/* Processes and pipes. die() prints what failed with errno and exits 1. */
__attribute__((noreturn)) void die(const char *what);
int write_all(int fd, const void *buf, size_t len);
int read_all(int fd, void *buf, size_t len);
pid_t fork_or_die(void);
void close_pair(const int fds[2]);
/* The control pipe: one byte for "ready", one for "done", so that process
 * start-up and exit stay outside the timed part. */
void ctl_open(int ctl[2]);
void ctl_send(int fd);
void ctl_wait(int fd);
int wait_child(pid_t pid);
/* kind 0: a pipe, 1: a Unix socketpair; both sized to RING_CAP. */
void fd_pair(int kind, int fds[2]);
/* The baseline readers: drain() reads `total` bytes in large reads,
 * echo() writes each of `n` frames of `size` bytes back. 0 or -1. */
int drain(int fd, uint64_t total);
int echo(int in, int out, void *buf, size_t size, uint64_t n);

/* Statistics; median() and print_p50_p99() sort v in place. */
void sort_u64(uint64_t *v, size_t n);
uint64_t median(uint64_t *v, size_t n);
uint64_t percentile(const uint64_t *sorted, size_t n, double p);

/* Output. print_build says how pm-bench was compiled (compiler, flags). */
void print_machine(void);
void print_build(void);
/* With --csv FILE, one row "bench,workload,size,who,metric,value" per
 * figure (the file gets a header when it is new); without it, nothing. */
extern FILE *csv_out;
void csv_row(const char *bench, const char *workload, uint64_t size, const char *who,
             const char *metric, double value);
void print_p50_p99(int width, const char *name, uint64_t *v, size_t n);
/* "-" when t is the base itself (base == 0), else "<t / base>x". */
void format_ratio(char *buf, size_t size, uint64_t t, uint64_t base, int decimals);

int cmd_ring(const bench_opts *o);
int cmd_restart(const bench_opts *o);
int cmd_spawn(const bench_opts *o);
int cmd_relay(const bench_opts *o);
int cmd_lane(const bench_opts *o);
int cmd_daemon(const bench_opts *o);
int cmd_compare(const bench_opts *o);
int cmd_scale(const bench_opts *o);

/* Shared between subcommands: the measuring cores of relay and restart,
 * reused by compare. */
/* The relay process baseline (kind 0 pipes, 1 Unix sockets): stream
 * `count` frames of `size` bytes, or ping-pong `count` round trips (their
 * ns in samples[count]). 0 with the elapsed ns, or -1. */
/* The hub's relay between two fork-mode workers (relay.c): awake 1 all spin,
 * 0 nobody spins, 2 a stream's default spins; a stream of count frames or
 * count round trips (samples[count], ns). 0 or -1. */
int mesh_relay_run(int awake, int pingpong, size_t size, uint64_t count, uint64_t *ns,
                   uint64_t *samples);
/* ring.c's round trips, for lane: over the ring (spin_ns: SPIN_FOREVER
 * awake, 0 parked), over a pipe (kind 0) or a socketpair (1). */
int ring_pingpong(const bench_opts *o, uint32_t spin_ns, uint64_t *samples);
int fd_pingpong(int kind, const bench_opts *o, uint64_t *samples);
int fd_relay_run(int kind, int pingpong, size_t size, uint64_t count, uint64_t *ns,
                 uint64_t *samples);
/* K crash-to-ready rounds of a one-worker cluster spawned with o (v[K], ns). 0 or 1. */
int restart_rounds(pm_options *o, unsigned rounds, uint64_t *v);
/* The pause between a worker's ready and its kill in restart_rounds and
 * the floor (default 10 ms; pm-bench restart --settle-ms). */
void restart_set_settle_ms(unsigned ms);
/* K bare fork + _exit (or fork + exec) + waitpid rounds (v[K], ns). */
void restart_baseline(int exec_mode, unsigned rounds, uint64_t *v);
/* The exec-mode entry of compare's workers ("pm-bench __compare"). */
int compare_worker_main(void);
int cmd_bigcall(const bench_opts *o);
int cmd_peer(const bench_opts *o);
/* batch.c / forkeach.c: pm-bench batch and its fork-per-input baseline. */
int cmd_batch(const bench_opts *o);
size_t batch_answer(const char *in, char *out, size_t cap);
int forkeach_batch(const char *const *inputs, size_t n, unsigned w, size_t *wrong);

#endif
