/* SPDX-License-Identifier: MIT */
/* landlock.h - Landlock signal scoping: a worker may signal only itself and what it starts. */
#ifndef PM_LANDLOCK_H
#define PM_LANDLOCK_H

/*
 * 1 when the running kernel scopes signals with Landlock
 * (LANDLOCK_SCOPE_SIGNAL, ABI 6, Linux 6.12), else 0: Landlock missing
 * (ENOSYS: older than 5.13 or built without it), disabled at boot
 * (EOPNOTSUPP: not in lsm=), older than ABI 6, or refused by a container's
 * seccomp profile. Asked in the supervisor, once per filter it builds.
 */
int pm__landlock_signal_scope_available(void);

/*
 * In the child, after no_new_privs (or as root) and before the seccomp
 * filter (strict refuses the calls): puts the process in a Landlock domain
 * that scopes signals, so that kill, tgkill, rt_sigqueueinfo and the
 * SIGIO/SIGURG of an F_SETOWN owner reach only processes of this domain
 * (the worker and what it starts), whatever pid or tid they name; nothing
 * else is restricted (no file system or network rule). The kernel maps a
 * tid to its process, which a seccomp filter cannot. Async-signal-safe;
 * 0 or -errno.
 */
int pm__landlock_scope_signals(void);

#endif /* PM_LANDLOCK_H */
