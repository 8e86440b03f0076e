/* SPDX-License-Identifier: MIT */
/*
 * cgroupfs_ro.h - a host on which no cgroup can be made, for the tests of
 * what procmesh does without one (check_tree, check_daemon): every cgroup
 * filesystem remounted read-only in a mount namespace of the calling
 * process's own, as in a pod. The host's mounts are untouched, and what the
 * process starts afterwards (workers, a daemon) inherits the namespace.
 * The technique of check_fallbacks' test_runtime_default_readonly_cgroupfs.
 * Include after helpers.h.
 */
#ifndef PM_TEST_CGROUPFS_RO_H
#define PM_TEST_CGROUPFS_RO_H

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>

/* Makes every cgroup and cgroup2 mount read-only in a new mount namespace
 * of this process: NULL, or why it cannot (then the namespace may be
 * half made: only in a process of the test's own, Check's fork mode or a
 * child). */
static inline const char *pm_test_cgroupfs_read_only(void)
{
    if (geteuid() != 0)
        return "needs root (a mount namespace and a remount)";
    if (unshare(CLONE_NEWNS) < 0)
        return "unshare(CLONE_NEWNS) refused";
    /* Private first: the remounts must not propagate to the host's. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return "cannot make the mounts private";
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL)
        return "cannot read /proc/self/mountinfo";
    char line[1024];
    int n = 0, refused = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        char mnt[512], type[64];
        const char *dash = strstr(line, " - ");
        if (dash == NULL || sscanf(line, "%*s %*s %*s %*s %511s", mnt) != 1 ||
            sscanf(dash + 3, "%63s", type) != 1)
            continue;
        if (strcmp(type, "cgroup") != 0 && strcmp(type, "cgroup2") != 0)
            continue;
        if (mount(NULL, mnt, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) < 0)
            refused++;
        else
            n++;
    }
    fclose(f);
    if (refused > 0)
        return "a cgroup filesystem could not be remounted read-only";
    return n > 0 ? NULL : "no cgroup filesystem mounted (nothing to take away)";
}

/* Whether pm_test_cgroupfs_read_only works here, tried in a child so that
 * the caller (a program's main, deciding which cases to add) keeps the
 * host's mounts: 0, or -1 with why. */
static inline int pm_test_cgroupfs_read_only_probe(char *why, size_t size)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        snprintf(why, size, "pipe: %s", strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, size, "fork: %s", strerror(errno));
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        close(p[0]);
        const char *r = pm_test_cgroupfs_read_only();
        if (r != NULL && write(p[1], r, strlen(r)) < 0)
            _exit(2);
        _exit(r == NULL ? 0 : 1);
    }
    close(p[1]);
    char text[256];
    pm_test_read_all(p[0], text, sizeof(text));
    close(p[0]);
    int status = pm_test_reap(pid, 10000);
    if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    snprintf(why, size, "a host without writable cgroups cannot be made here: %s",
             text[0] != '\0' ? text : "the probe failed");
    return -1;
}

#endif /* PM_TEST_CGROUPFS_RO_H */
