/*
 * spawn.c - forking workers without leaking anything into them.
 *
 * Exec mode follows libuv's uv__spawn_and_init_child(): everything that
 * needs memory is prepared by the parent before fork; the child only makes
 * async-signal-safe system calls, and a failed execve writes errno into a
 * close-on-exec pipe, so the parent learns of the failure (a successful
 * exec closes the pipe and the parent reads nothing).
 */
#define _GNU_SOURCE
#include "internal.h"
#include "options.h" /* PM__MAX_RLIMIT */
#include "spawn.h"

#include "node.h" /* PM__NODE_ENV */

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL /* linux/sched.h, 5.7 */
#endif

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

int pm__pidfd_open(pid_t pid)
{
#ifdef SYS_pidfd_open
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    return fd < 0 ? -errno : fd;
#else
    (void)pid;
    return -ENOSYS;
#endif
}

int pm__pidfd_signal(int pidfd, int sig)
{
#ifdef SYS_pidfd_send_signal
    if (syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) < 0)
        return -errno;
    return 0;
#else
    (void)pidfd;
    (void)sig;
    return -ENOSYS;
#endif
}

/* The child must die with its supervisor. PDEATHSIG is set after fork and
 * then the parent is checked: if it died between fork and prctl, the signal
 * was never armed and we would live on as an orphan. */
static void die_with_parent(pid_t parent)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
        _exit(127);
}

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

/* Marks every fd from `first` up close-on-exec (async-signal-safe). */
static void cloexec_from(int first)
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

static void child_fail(int pipe_fd, int err)
{
    ssize_t n = write(pipe_fd, &err, sizeof(err));
    (void)n;
    _exit(127);
}

static void exec_child(const pm__spawn_req *r)
{
    int top = 3 + r->nfds;
    int pipe_fd = r->err_pipe;
    int tmp[64 + 8];
    /* Reset every handler before unblocking anything, so no handler of the
     * supervisor can run in the child; ignored signals (SIGPIPE ...) are
     * reset too, as a fresh program expects. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        (void)sigaction(sig, &dfl, NULL);
    sigprocmask(SIG_SETMASK, r->mask, NULL);
    die_with_parent(r->parent);
    if (r->pid_digits != NULL) {
        /* LISTEN_PID must name the process that execs: only known here.
         * The string was allocated by the parent; writing digits into our
         * copy of it is async-signal-safe. */
        char rev[12];
        int k = 0;
        for (unsigned long v = (unsigned long)getpid(); v > 0 || k == 0; v /= 10)
            rev[k++] = (char)('0' + v % 10);
        /* Left-aligned and NUL-terminated, no zero padding: sd_listen_fds
         * parses with base 0, so a leading 0 would read as octal. */
        for (int i = 0; i < k; i++)
            r->pid_digits[i] = rev[k - 1 - i];
        r->pid_digits[k] = '\0';
    }

    /* Move the error pipe and every source fd above the target range first,
     * so that placing fd i at 3 + i can never clobber a source not yet
     * placed. */
    if (pipe_fd < top) {
        pipe_fd = fcntl(pipe_fd, F_DUPFD_CLOEXEC, top);
        if (pipe_fd < 0)
            _exit(127);
    }
    for (int i = 0; i < r->nfds; i++) {
        tmp[i] = fcntl(r->fds[i], F_DUPFD_CLOEXEC, top);
        if (tmp[i] < 0)
            child_fail(pipe_fd, errno);
    }
    for (int i = 0; i < r->nfds; i++)
        if (dup2(tmp[i], 3 + i) < 0) /* dup2 clears close-on-exec on 3 + i */
            child_fail(pipe_fd, errno);
    /* Everything else procmesh or the application had open is closed by the
     * exec; the error pipe too, which is how the parent learns it worked. */
    cloexec_from(top);
    execve(r->path, r->argv, r->envp);
    child_fail(pipe_fd, errno);
}

int pm__child_contain(const pm__spawn_req *r, int placed)
{
    /* Its own process group: where no cgroup can be made, killing the
     * group when the worker is reaped is what ends its descendants (all
     * but a setsid() one). Only ever signalled after the worker died, so
     * the parent need not also call setpgid to close a race. */
    if (setpgid(0, 0) < 0)
        return errno;
    if (r->cg != NULL) {
        /* "0" moves the writer: no pid to format. Before the exec or the
         * bootstrap, so nothing the worker starts is ever outside. */
        if (!placed && write(r->cg->procs_fd, "0", 1) < 0)
            return errno;
        for (int i = 0; i < PM__CG_NCTRL; i++)
            if (r->cg->v1_procs[i] >= 0 && write(r->cg->v1_procs[i], "0", 1) < 0)
                return errno;
    }
    for (int i = 0; r->rlimit_set != NULL && i < PM__MAX_RLIMIT; i++) {
        if (!r->rlimit_set[i])
            continue;
        struct rlimit rl;
        rl.rlim_cur = r->rlimit_soft[i] == UINT64_MAX ? RLIM_INFINITY : (rlim_t)r->rlimit_soft[i];
        rl.rlim_max = r->rlimit_hard[i] == UINT64_MAX ? RLIM_INFINITY : (rlim_t)r->rlimit_hard[i];
        if (setrlimit((__rlimit_resource_t)i, &rl) < 0)
            return errno;
    }
    return 0;
}

/* clone3(CLONE_INTO_CGROUP) works here: 0 unknown, 1 yes, -1 no. */
static int clone3_state;

/* Forks; an exec-mode child with a cgroup is born in it (clone3,
 * CLONE_INTO_CGROUP, Linux 5.7): no write to cgroup.procs in the child and
 * no window in which it runs outside. Only exec mode: a raw clone3 skips
 * glibc's fork handlers (malloc's locks, the cached thread id), which only
 * a child that runs nothing but async-signal-safe calls before execve can
 * do without. Kernels without it (ENOSYS, E2BIG for the struct size,
 * EINVAL for the flag) fall back to fork() and a write from the child,
 * remembered so the next spawn does not try again. *placed is set in the
 * child.
 *
 * Not into a cgroup that was ever killed through cgroup.kill: Linux 6.x
 * compares the kill sequence number of the cgroup a child is born into
 * with the one its parent's cgroup had at fork, and CLONE_INTO_CGROUP
 * makes them different cgroups, so once the slot's cgroup has been killed
 * (its number moved on, ours did not) every child cloned into it is
 * SIGKILLed at birth (seen on 6.18: every replacement after the first
 * tree kill died before it ran; tests/check_tree.c test_tree_exec_crash).
 * Joining by a write from the child has no such check. */
static pid_t fork_into(const pm__spawn_req *r, int *placed)
{
    *placed = 0;
#ifdef SYS_clone3
    if (r->path != NULL && r->cg != NULL && r->cg->dir_fd >= 0 && !r->cg->killed &&
        __atomic_load_n(&clone3_state, __ATOMIC_RELAXED) >= 0) {
        struct {
            uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls,
                set_tid, set_tid_size, cgroup;
        } a;
        memset(&a, 0, sizeof(a));
        a.flags = CLONE_INTO_CGROUP;
        a.exit_signal = SIGCHLD;
        a.cgroup = (uint64_t)r->cg->dir_fd;
        long pid = syscall(SYS_clone3, &a, sizeof(a));
        if (pid == 0)
            *placed = 1;
        if (pid >= 0) {
            __atomic_store_n(&clone3_state, 1, __ATOMIC_RELAXED);
            return (pid_t)pid;
        }
        if (errno != ENOSYS && errno != E2BIG && errno != EINVAL)
            return -1;
        __atomic_store_n(&clone3_state, -1, __ATOMIC_RELAXED);
    }
#endif
    return fork();
}

pid_t pm__spawn(const pm__spawn_req *r)
{
    if (r->path != NULL && r->nfds > 64 + 8)
        return -EINVAL;
    /* Buffered output of the parent would otherwise be written twice. */
    fflush(stdout);
    fflush(stderr);
    int placed;
    pid_t pid = fork_into(r, &placed);
    if (pid < 0)
        return -errno;
    if (pid > 0)
        return pid;
    int err = pm__child_contain(r, placed);
    if (err != 0) {
        if (r->path != NULL)
            child_fail(r->err_pipe, err);
        _exit(127);
    }
    if (r->path != NULL)
        exec_child(r);
    sigprocmask(SIG_SETMASK, r->mask, NULL);
    die_with_parent(r->parent);
    r->child(r->ctx);
    _exit(127); /* not reached */
}

/* ------------------------------------------------------------------ exec environment */

extern char **environ;

/* The environment of an exec-mode worker: the template, then
 * PROCMESH_NODE (mesh readiness) and the LISTEN_* variables (listen fds).
 * The extra strings live in *text (freed by the caller after the fork);
 * *pid_digits points into LISTEN_PID's value for the child to fill in. */
char **pm__exec_env(const pm__exec_env_req *q, char **text, char **pid_digits)
{
    const char *notify = q->notify;
    int node_fd_at = q->node_fd_at;
    size_t names = 0;
    for (size_t i = 0; i < q->nfds; i++)
        names += strlen(q->fd_names[i]) + 1;
    size_t size = 64 + (q->listen_env ? 64 + names : 0) + (notify ? 32 + strlen(notify) : 0);
    char **env = malloc((q->ntmpl + 6) * sizeof(*env));
    char *t = malloc(size);
    if (env == NULL || t == NULL) {
        free(env);
        free(t);
        return NULL;
    }
    memcpy(env, q->tmpl, q->ntmpl * sizeof(*env));
    size_t k = q->ntmpl, used = 0;
    *pid_digits = NULL;
    if (node_fd_at >= 0) {
        env[k++] = t + used;
        used += (size_t)snprintf(t + used, size - used, "%s=%d,%d,%d", PM__NODE_ENV, node_fd_at,
                                 node_fd_at + 1, node_fd_at + 2) + 1;
    }
    if (notify != NULL) {
        env[k++] = t + used;
        used += (size_t)snprintf(t + used, size - used, "NOTIFY_SOCKET=%s", notify) + 1;
    }
    if (q->listen_env && q->nfds > 0) {
        env[k++] = t + used;
        used += (size_t)snprintf(t + used, size - used, "LISTEN_FDS=%zu", q->nfds) + 1;
        env[k++] = t + used;
        used += (size_t)snprintf(t + used, size - used, "LISTEN_FDNAMES=");
        for (size_t i = 0; i < q->nfds; i++)
            used += (size_t)snprintf(t + used, size - used, "%s%s", i ? ":" : "", q->fd_names[i]);
        used++;
        env[k++] = t + used;
        used += (size_t)snprintf(t + used, size - used, "LISTEN_PID=");
        *pid_digits = t + used;
        memset(t + used, '0', 11);
        used += 12;
    }
    env[k] = NULL;
    *text = t;
    return env;
}

char *pm__exec_resolve(const char *name)
{
    if (strchr(name, '/') != NULL)
        return strdup(name);
    const char *path = getenv("PATH");
    if (path == NULL || *path == '\0')
        path = "/usr/local/bin:/usr/bin:/bin";
    size_t nlen = strlen(name);
    for (const char *p = path; *p != '\0';) {
        const char *colon = strchr(p, ':');
        size_t dlen = colon != NULL ? (size_t)(colon - p) : strlen(p);
        char *cand = malloc(dlen + nlen + 3);
        if (cand == NULL)
            return NULL;
        snprintf(cand, dlen + nlen + 3, "%.*s/%s", (int)dlen, dlen > 0 ? p : ".", name);
        if (access(cand, X_OK) == 0)
            return cand;
        free(cand);
        if (colon == NULL)
            break;
        p = colon + 1;
    }
    /* Not found: exec reports ENOENT, which is the right error. */
    return strdup(name);
}

int pm__env_template(char ***out, size_t *count)
{
    size_t n = 0;
    for (char **e = environ; e != NULL && *e != NULL; e++)
        n++;
    char **env = calloc(n + 1, sizeof(*env));
    if (env == NULL)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        /* PROCMESH_* is the supervisor's own configuration (the daemon's
         * PROCMESH_<OPTION> variables, PROCMESH_HEALTH ...) and the
         * contracts procmesh sets on purpose (PROCMESH_NODE, appended per
         * worker): an inherited one would tell a worker what is not meant
         * for it, or claim another worker's memory. */
        if (strncmp(environ[i], "PROCMESH_", 9) == 0)
            continue;
        /* These describe the supervisor's own service manager contract
         * (systemd notify and socket activation); a worker that inherited
         * them would talk to systemd behind our back or claim our sockets. */
        static const char *const own[] = {"NOTIFY_SOCKET=", "WATCHDOG_USEC=", "WATCHDOG_PID=",
                                          "LISTEN_FDS=", "LISTEN_PID=", "LISTEN_FDNAMES="};
        int skip = 0;
        for (size_t k2 = 0; k2 < PM__ARRAY_SIZE(own); k2++)
            skip |= strncmp(environ[i], own[k2], strlen(own[k2])) == 0;
        if (skip)
            continue;
        env[k] = strdup(environ[i]);
        if (env[k] == NULL) {
            pm__env_free(env, k);
            return -ENOMEM;
        }
        k++;
    }
    *out = env;
    *count = k;
    return 0;
}

void pm__env_free(char **env, size_t n)
{
    for (size_t i = 0; env != NULL && i < n; i++)
        free(env[i]);
    free(env);
}
