/* SPDX-License-Identifier: MIT */
/*
 * cgfloor.c - the floor rows' cgroups: what containment in a cgroup of its
 * own costs a process on this kernel, without procmesh.
 *
 * procmesh's default containment puts every incarnation in a cgroup
 * (doc/design.md, "Containment"): a spawn makes one per worker, a fork
 * child joins its by a write to cgroup.procs, an exec child is born in it
 * (clone3 CLONE_INTO_CGROUP). The floor rows of `restart` and `spawn` do
 * the least of that, the kernel's part alone: one leaf per process (not
 * procmesh's slot directory and leaf), joined the cheapest way each mode
 * allows. Their ratio to the bare baseline is what any supervisor that
 * contains its children in cgroups pays here, so a target below it cannot
 * be met with containment on (doc/benchmarks.md, stop 64).
 *
 * The leaves live in a procmesh.<pid>.<ns>.<k> directory made by the library's own
 * code (pm__cg_root_setup_self): the same place, the same delegation rules.
 */
#define _GNU_SOURCE
#include "bench.h"
#include "os/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <stdint.h>
#include <unistd.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL /* linux/sched.h, 5.7 */
#endif

/* clone3's argument, as far as CLONE_INTO_CGROUP (Linux 5.7). */
struct clone_args3 {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
        set_tid_size, cgroup;
};

static pm__cg_root root;
static int root_open;

int cgfloor_open(char *why, size_t size)
{
    pm__cg_limits none;
    memset(&none, 0, sizeof(none));
    int rc = pm__cg_root_setup_self(&root, &none);
    if (rc < 0 || root.mode != PM_CONTAIN_CGROUP || root.v2[0] == '\0') {
        snprintf(why, size, "no cgroup v2 tree procmesh may write (%s)",
                 root.why[0] != '\0' ? root.why : pm_strerror(rc));
        if (rc == 0)
            pm__cg_root_close(&root);
        return -1;
    }
    root_open = 1;
    return 0;
}

void cgfloor_close(void)
{
    if (root_open)
        pm__cg_root_close(&root);
    root_open = 0;
}

int cgfloor_leaf(unsigned i, cgfloor_leaf_t *l)
{
    char path[PM__CG_PATH + 32];
    snprintf(path, sizeof(path), "%s/floor%u", root.v2, i);
    l->dir_fd = l->procs_fd = -1;
    if (mkdir(path, 0755) < 0)
        return -1;
    l->dir_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    l->procs_fd = l->dir_fd >= 0 ? openat(l->dir_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC) : -1;
    if (l->procs_fd < 0) {
        cgfloor_leaf_remove(i, l);
        return -1;
    }
    return 0;
}

void cgfloor_leaf_close(cgfloor_leaf_t *l)
{
    if (l->procs_fd >= 0)
        close(l->procs_fd);
    if (l->dir_fd >= 0)
        close(l->dir_fd);
    l->dir_fd = l->procs_fd = -1;
}

void cgfloor_leaf_remove(unsigned i, cgfloor_leaf_t *l)
{
    char path[PM__CG_PATH + 32];
    snprintf(path, sizeof(path), "%s/floor%u", root.v2, i);
    cgfloor_leaf_close(l);
    /* Its processes are reaped: only the cgroup's own teardown is left,
     * which the kernel may still be finishing (EBUSY for a moment). */
    for (int tries = 0; rmdir(path) < 0 && errno == EBUSY && tries < 1000; tries++)
        usleep(1000);
}

/* x86-64 without AddressSanitizer: the vfork-style clone of procmesh's
 * exec spawn (src/os/spawn.c, pm__clone3_run: the child on a stack of its
 * own, sharing our memory until its execve), so that the exec floor in a
 * cgroup differs from the plain one (vfork) by the cgroup alone; elsewhere
 * a clone3 that copies our memory, as spawn.c's fallback does. */
#if defined(__SANITIZE_ADDRESS__)
#define CGFLOOR_VFORK 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CGFLOOR_VFORK 0
#endif
#endif
#if !defined(CGFLOOR_VFORK) && defined(__x86_64__) && defined(SYS_clone3)
#define CGFLOOR_VFORK 1
#endif
#ifndef CGFLOOR_VFORK
#define CGFLOOR_VFORK 0
#endif

#if CGFLOOR_VFORK
long pm__clone3_run(void *args, size_t size, int (*fn)(void *), void *arg);

struct exec_arg {
    const char *path;
    char *const *argv;
};

static int exec_child(void *p)
{
    const struct exec_arg *e = p;
    execv(e->path, e->argv);
    _exit(127);
}
#endif

pid_t cgfloor_vfork_exec(const cgfloor_leaf_t *l, const char *path, char *const argv[])
{
#if CGFLOOR_VFORK
    static char *stack;
    const size_t size = 64u << 10;
    if (stack == NULL) {
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (m == MAP_FAILED)
            return -1;
        stack = m;
    }
    struct clone_args3 a;
    memset(&a, 0, sizeof(a));
    a.flags = CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP;
    a.exit_signal = SIGCHLD;
    a.stack = (uint64_t)(uintptr_t)stack;
    a.stack_size = size;
    a.cgroup = (uint64_t)l->dir_fd;
    struct exec_arg e = {path, argv};
    /* No handler may run in the child, on our memory, before its exec. */
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    long pid = pm__clone3_run(&a, sizeof(a), exec_child, &e);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        errno = (int)-pid;
        return -1;
    }
    return (pid_t)pid;
#else
    pid_t pid = cgfloor_clone_into(l, 1);
    if (pid == 0) {
        execv(path, argv);
        _exit(127);
    }
    return pid;
#endif
}

pid_t cgfloor_clone_into(const cgfloor_leaf_t *l, int vfork_wait)
{
    struct clone_args3 a;
    memset(&a, 0, sizeof(a));
    /* Without CLONE_VM: a fork's copy of the memory; CLONE_VFORK only
     * holds the parent until the child's execve, as procmesh's exec spawn
     * does. The child runs only execve or _exit after it. */
    a.flags = CLONE_INTO_CGROUP | (vfork_wait ? CLONE_VFORK : 0);
    a.exit_signal = SIGCHLD;
    a.cgroup = (uint64_t)l->dir_fd;
    return (pid_t)syscall(SYS_clone3, &a, sizeof(a));
}
