/* SPDX-License-Identifier: MIT */
/*
 * fds.c - marking every fd above a number close-on-exec, in the exec
 * child between its fork and its execve (spawn.c): close_range where the
 * kernel has it, /proc/self/fd where it does not, a loop up to the limit
 * where there is no /proc. Async-signal-safe throughout.
 */
#define _GNU_SOURCE
#include "base/internal.h"
#include "fds.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

struct linux_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

int pm__cloexec_proc_fds(int first)
{
    /* open and getdents64 are async-signal-safe; opendir is not (it
     * allocates). The directory fd is itself close-on-exec. */
    int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -errno;
    char buf[4096] __attribute__((aligned(8)));
    int rc = 0;
    for (;;) {
        long n = syscall(SYS_getdents64, dir, buf, sizeof(buf));
        if (n < 0) {
            rc = -errno;
            break;
        }
        if (n == 0)
            break;
        for (long off = 0; off < n;) {
            struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + off);
            off += d->d_reclen;
            int fd = 0, digits = 0;
            for (const char *p = d->d_name; *p >= '0' && *p <= '9'; p++, digits++)
                fd = fd * 10 + (*p - '0');
            /* "." and ".." have no digits. Marking an fd while the
             * directory is read is fine: the flag changes no entry. */
            if (digits > 0 && fd >= first && fd != dir)
                (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
    }
    close(dir);
    return rc;
}

void pm__cloexec_from(int first)
{
    /* close_range (5.11) does it in one call. */
    if (syscall(SYS_close_range, (unsigned)first, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
        return;
    /* Older kernels: every fd that is open, from /proc/self/fd, whatever
     * its number (an fd may sit above RLIMIT_NOFILE if the limit was
     * lowered after it was opened). */
    if (pm__cloexec_proc_fds(first) == 0)
        return;
    /* No /proc (a bare chroot): one fcntl per possible fd up to the
     * limit, which cannot see an fd above a lowered limit. */
    struct rlimit rl;
    long max = 1L << 20; /* fs.nr_open's default: no fd can be higher */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < (rlim_t)max)
        max = (long)rl.rlim_cur;
    for (long fd = first; fd < max; fd++)
        (void)fcntl((int)fd, F_SETFD, FD_CLOEXEC);
}
