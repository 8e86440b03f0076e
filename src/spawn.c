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
#include "spawn.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

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

/* Marks every fd from `first` up close-on-exec: close_range (5.11) when the
 * kernel has it, else one fcntl per possible fd (both async-signal-safe). */
static void cloexec_from(int first)
{
    if (syscall(SYS_close_range, (unsigned)first, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
        return;
    struct rlimit rl;
    int max = 65536;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 65536)
        max = (int)rl.rlim_cur;
    for (int fd = first; fd < max; fd++)
        (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
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

pid_t pm__spawn(const pm__spawn_req *r)
{
    if (r->path != NULL && r->nfds > 64 + 8)
        return -EINVAL;
    /* Buffered output of the parent would otherwise be written twice. */
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid > 0)
        return pid;
    if (r->path != NULL)
        exec_child(r);
    sigprocmask(SIG_SETMASK, r->mask, NULL);
    die_with_parent(r->parent);
    r->child(r->ctx);
    _exit(127); /* not reached */
}
