/* SPDX-License-Identifier: MIT */
/*
 * frozenfs.h - a process SIGKILL cannot end at once, for the tests of what
 * the supervisor does when a slot's cgroup does not empty after cgroup.kill
 * (check_tree, check_daemon).
 *
 * One in uninterruptible sleep: a write to a frozen filesystem (FIFREEZE,
 * fsfreeze(8)) waits for the thaw in sb_start_write, uninterruptibly (D),
 * whatever signal comes; the way a process stuck on a hung NFS server or a
 * failing disk outlasts cgroup.kill. The filesystem is a loop-mounted ext4
 * image of the test's own, frozen only during the test: frozen_guard makes
 * sure it is thawed and removed however the test ends.
 */
#ifndef PM_TEST_FROZENFS_H
#define PM_TEST_FROZENFS_H

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <check.h>

static char frozen_dir[64]; /* mkdtemp: the image, and mnt/ */
static char frozen_mnt[96];

static int frozen_cmd(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static int frozen_cmd(const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    return system(cmd);
}

/* Makes and mounts the image (not frozen yet): 0, or -1 with why. */
static __attribute__((unused)) int frozen_setup(char *why, size_t size)
{
    snprintf(frozen_dir, sizeof(frozen_dir), "/tmp/pm-frozen.XXXXXX");
    if (mkdtemp(frozen_dir) == NULL) {
        snprintf(why, size, "mkdtemp: %s", strerror(errno));
        return -1;
    }
    snprintf(frozen_mnt, sizeof(frozen_mnt), "%s/mnt", frozen_dir);
    if (frozen_cmd("truncate -s 16M %s/img && mkfs.ext4 -q -F %s/img >/dev/null 2>&1 && "
                   "mkdir %s && mount -o loop %s/img %s 2>/dev/null",
                   frozen_dir, frozen_dir, frozen_mnt, frozen_dir, frozen_mnt) != 0) {
        snprintf(why, size, "no loop-mounted ext4 here (truncate, mkfs.ext4, mount -o loop "
                 "as root)");
        (void)frozen_cmd("rm -rf %s", frozen_dir);
        return -1;
    }
    if (frozen_cmd("command -v fsfreeze >/dev/null") != 0) {
        snprintf(why, size, "no fsfreeze(8)");
        (void)frozen_cmd("umount %s; rm -rf %s", frozen_mnt, frozen_dir);
        return -1;
    }
    return 0;
}

/* Thaws, unmounts and removes the image (each step may have been done). */
static __attribute__((unused)) void frozen_teardown(void)
{
    (void)frozen_cmd("fsfreeze -u %s 2>/dev/null; umount %s 2>/dev/null || umount -l %s "
                     "2>/dev/null; rm -rf %s",
                     frozen_mnt, frozen_mnt, frozen_mnt, frozen_dir);
}

/* A process of its own session (Check's timeout kills the test's group)
 * that thaws and removes the filesystem once the test process is gone,
 * however it ended: a failed assertion must not leave a frozen filesystem
 * and a process in D behind. */
static __attribute__((unused)) void frozen_guard(void)
{
    pid_t parent = getpid();
    pid_t g = fork();
    ck_assert_int_ge(g, 0);
    if (g > 0)
        return;
    setsid();
    int pfd = (int)syscall(SYS_pidfd_open, parent, 0);
    struct pollfd p = {.fd = pfd, .events = POLLIN};
    while (pfd >= 0 && poll(&p, 1, -1) < 0 && errno == EINTR)
        ;
    if (pfd < 0) /* no pidfd_open (before 5.3): the parent's end by polling */
        while (kill(parent, 0) == 0)
            usleep(100000);
    frozen_teardown();
    _exit(0);
}

/* Whether a test can make a frozen filesystem here: 0, or -1 with why. */
static __attribute__((unused)) int frozen_probe(char *why, size_t size)
{
    if (geteuid() != 0) {
        snprintf(why, size, "needs root (a loop mount and FIFREEZE)");
        return -1;
    }
    if (frozen_setup(why, size) < 0)
        return -1;
    frozen_teardown();
    return 0;
}

#endif /* PM_TEST_FROZENFS_H */
