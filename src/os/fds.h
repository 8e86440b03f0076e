/* SPDX-License-Identifier: MIT */
/* fds.h - marking fds close-on-exec in an exec child; see fds.c. */
#ifndef PM_FDS_H
#define PM_FDS_H

/* Marks every open fd numbered first or above close-on-exec, as listed by
 * /proc/self/fd, whatever its number: the fallback of the exec child for
 * kernels without close_range (< 5.11). Async-signal-safe. 0, or -errno
 * when /proc/self/fd cannot be read. */
int pm__cloexec_proc_fds(int first);

/* Marks every fd from first up close-on-exec (fds.c): close_range (5.11),
 * else pm__cloexec_proc_fds, else one fcntl per fd up to RLIMIT_NOFILE
 * (no /proc: an fd above a lowered limit is then missed).
 * Async-signal-safe. */
void pm__cloexec_from(int first);

#endif
