/* SPDX-License-Identifier: MIT */
/* defaults.h - pm-bench relay's "defaults" rows (defaults.c): the paused request/reply a user writes. */
#ifndef PM_BENCH_DEFAULTS_H
#define PM_BENCH_DEFAULTS_H

#include <stdint.h>

/* How the requester keeps its cadence: a sleep of the period before each
 * request (as pm-bench's paused row), or an absolute schedule, one request
 * every period (clock_nanosleep with TIMER_ABSTIME). */
enum { DEFAULTS_SLEEP = 0, DEFAULTS_SCHEDULE = 1 };

/* `rounds` 64 B requests, one per `period_us` as `cadence` says, from one
 * forked process to another: through a cluster made with the options'
 * defaults (pipes 0), or through a relay process over default-sized pipes
 * (pipes 1). Fills samples[rounds] (ns per round trip) and *csw (the
 * context switches of every process taking part, during the requests).
 * PM_BENCH_DEFAULTS (a comma-separated list) moves one thing toward
 * pm-bench's own paused row at a time: "tick" (main runs pm_cluster_run(c,
 * 1) in a loop), "bench" (bench_options' restart settings, handle_signals 0
 * and the ring size given explicitly), "bigpipes" (the pipes sized to 1 MiB
 * as pm-bench's), "mainreq" (the pipe requester is main, not a fork).
 * Returns 0 or -1 after a message on stderr. */
int defaults_relay(int pipes, int cadence, unsigned rounds, unsigned period_us, uint64_t *samples,
                   uint64_t *csw);

#endif
