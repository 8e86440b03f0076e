/* SPDX-License-Identifier: MIT */
/* readiness.h - what a worker says about itself outside its ring: its
 * NOTIFY_SOCKET and its exec pipe (readiness.c). */
#ifndef PM_SUPERVISOR_READINESS_H
#define PM_SUPERVISOR_READINESS_H

#include "types.h"

/* Reads and acts on what a notify-mode worker sent (READY=1, WATCHDOG=1,
 * STOPPING=1); also run when it is reaped, before its exit is handled. */
void pm__cluster_read_notify(pm_cluster *c, pm__slot *s);
/* The loop's completions: its notify socket (PM__TAG_NOTIFY), its exec
 * pipe (PM__TAG_EXECPIPE). */
void pm__readiness_on_notify(pm_cluster *c, pm__slot *s);
void pm__readiness_on_exec_pipe(pm_cluster *c, pm__slot *s);
/* At the reap, the process gone: what its exec pipe holds (errno, or
 * nothing: exec succeeded, which is ready under PM_READY_EXEC;
 * pm__exec_pipe_verdict). */
void pm__readiness_exec_at_reap(pm_cluster *c, pm__slot *s);

/* What an exec-mode child's error pipe says once the child is reaped,
 * pure: got is read()'s result (with err its errno when negative),
 * exit_code and signal how it ended (exit_code -1: not known). */
enum { PM__EXEC_FAILED = 0, PM__EXEC_DONE = 1, PM__EXEC_UNKNOWN = 2 };
int pm__exec_pipe_verdict(long got, int err, int exit_code, int signal);

#endif /* PM_SUPERVISOR_READINESS_H */
