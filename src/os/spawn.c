/* SPDX-License-Identifier: MIT */
/*
 * spawn.c - forking workers without leaking anything into them.
 *
 * Exec mode follows libuv's uv__spawn_and_init_child(): everything that
 * needs memory is prepared by the parent before fork; the child only makes
 * async-signal-safe system calls, and a failed execve writes errno into a
 * close-on-exec pipe, so the parent learns of the failure (a successful
 * exec closes the pipe and the parent reads nothing). On x86-64 the exec
 * child is a vfork-style clone (spawn_vfork, below): no page tables copied.
 */
#define _GNU_SOURCE
#include "base/internal.h"
#include "spawn.h"
#include "base/defaults.h" /* PM__MAX_RLIMIT */

#include "fds.h"
#include "scrub.h"
#include "seccomp_filter.h"

#include <fcntl.h>
#include <sched.h> /* CLONE_VM, CLONE_VFORK */
#include <linux/filter.h> /* struct sock_filter: the seccomp program copy */
#include <stdio.h>
#include <stdio_ext.h> /* __fpending */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL /* linux/sched.h, 5.7 */
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

/* The fork child's system calls are raw (rawsys.h), inline in this ready
 * text: a fork child maps none of the supervisor's code, so its first
 * call into each 64 KiB stretch of libc is a page fault (scrub.h), and
 * prctl, pthread_sigmask, write, setrlimit and syscall() itself sit in
 * three stretches the child would touch for nothing else before READY.
 * All are async-signal-safe, and none touches errno. */

/* The child must die with its supervisor. PDEATHSIG is set after fork and
 * then the parent is checked: if it died between fork and prctl, the signal
 * was never armed and we would live on as an orphan. */
PM__READY_TEXT static void die_with_parent(pid_t parent)
{
    if (pm__sys2(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL) < 0 || pm__sys1(SYS_getppid, 0) != parent)
        _exit(127);
}

PM__READY_TEXT int pm__child_privileges(const pm__spawn_req *r)
{
    if (r->set_ids) {
        /* Raw system calls: they change this thread only, which in a fork
         * child is the whole process, and are async-signal-safe (glibc's
         * setuid takes locks to reach every thread). Groups first, then the
         * gid, then the uid: once the uid is dropped nothing else may
         * change. setres*id sets the saved ids too, so nothing can be
         * taken back. */
        long rc;
        if ((rc = pm__sys2(SYS_setgroups, 0, NULL)) < 0 ||
            (rc = pm__sys3(SYS_setresgid, r->gid, r->gid, r->gid)) < 0 ||
            (rc = pm__sys3(SYS_setresuid, r->uid, r->uid, r->uid)) < 0)
            return (int)rc;
        uid_t ru, eu, su;
        gid_t rg, eg, sg;
        if (getresuid(&ru, &eu, &su) < 0 || getresgid(&rg, &eg, &sg) < 0)
            return -errno;
        if (ru != r->uid || eu != r->uid || su != r->uid || rg != r->gid || eg != r->gid ||
            sg != r->gid)
            return -EPERM;
        /* Root is gone for good: getting it back must fail. */
        if (pm__sys3(SYS_setresuid, 0, 0, 0) == 0)
            return -EPERM;
        /* A credential change clears the parent-death signal: arm it again,
         * and check again that the supervisor did not die meanwhile. */
        if ((rc = pm__sys2(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL)) < 0)
            return (int)rc;
        if (pm__sys1(SYS_getppid, 0) != r->parent)
            return -ESRCH;
    }
    long rc;
    if (r->no_new_privs && (rc = pm__sys5(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) < 0)
        return (int)rc;
    if (r->dumpable && (rc = pm__sys2(SYS_prctl, PR_SET_DUMPABLE, 1)) < 0)
        return (int)rc;
    /* Last: every call above would otherwise have to be allowed by the
     * filter, and under strict they are not. */
    if (r->seccomp != NULL)
        return pm__seccomp_load(r->seccomp);
    return 0;
}

PM__READY_TEXT int pm__child_stdio(int out, int err)
{
    int src[2] = {out, err}, moved[2] = {-1, -1}, rc = 0;
    /* A source at 0..2 could be overwritten by the other's dup2 (or be the
     * target itself, where dup2 does nothing and keeps close-on-exec):
     * move it above them first. */
    for (int i = 0; i < 2; i++) {
        if (src[i] >= 0 && src[i] <= 2) {
            moved[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 3);
            if (moved[i] < 0)
                return -errno;
            src[i] = moved[i];
        }
    }
    for (int i = 0; i < 2 && rc == 0; i++)
        if (src[i] >= 0 && dup2(src[i], 1 + i) < 0) /* dup2 clears close-on-exec on 1 + i */
            rc = -errno;
    for (int i = 0; i < 2; i++)
        if (moved[i] >= 0)
            close(moved[i]);
    return rc;
}

/* How the exec child reports a failed step: fork: errno into the error
 * pipe (the parent is running); vfork: into *shared, memory the parent
 * reads once the clone returns (it is suspended until then). */
typedef struct child_report {
    int pipe_fd;        /* fork: the error pipe's write end */
    volatile int *shared; /* vfork: the parent's variable, or NULL */
    int cleared;        /* the clone reset every handled signal (CLONE_CLEAR_SIGHAND) */
} child_report;

static void child_fail(const child_report *rep, int err)
{
    if (rep->shared != NULL) {
        *rep->shared = err;
    } else {
        ssize_t n = write(rep->pipe_fd, &err, sizeof(err));
        (void)n;
    }
    _exit(127);
}

/* The kernel's sigaction for SIG_DFL: every field zero (handler SIG_DFL,
 * no flags, empty mask); larger than any architecture's layout. */
static const unsigned long dfl_action[16];

/* The kernel's signal set size (8 bytes on most architectures, 16 on
 * MIPS), which the raw rt_sig* calls must be given exactly. */
#define KERNEL_SIGSET_SIZE ((size_t)(_NSIG / 8))

uint64_t pm__sig_ignored(void)
{
    uint64_t set = 0;
    for (int sig = 1; sig < NSIG && sig <= 64; sig++) {
        unsigned long act[16];
        if (sig != SIGKILL && sig != SIGSTOP &&
            syscall(SYS_rt_sigaction, sig, NULL, act, KERNEL_SIGSET_SIZE) == 0 &&
            act[0] == (unsigned long)(uintptr_t)SIG_IGN)
            set |= 1ULL << (sig - 1);
    }
    return set;
}

/* Before anything is unblocked, every signal with a handler goes back to
 * SIG_DFL, so that no handler of the supervisor can run in the child (in
 * the vfork child it would run on the supervisor's memory); so does every
 * signal the request lists as ignored (ignored when the cluster's first
 * worker started: a fresh program expects SIG_DFL, and exec keeps
 * SIG_IGN). A signal ignored since is kept ignored, whichever way the
 * child was made. When the clone reset the handlers (CLONE_CLEAR_SIGHAND),
 * only the listed signals are left to do, a system call each; otherwise
 * each signal is read first. Without a list, every signal is reset. Not
 * CLONE_SIGHAND: the parent's dispositions are untouched. */
static void reset_signals(const pm__spawn_req *r, const child_report *rep)
{
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP)
            continue;
        int listed = sig <= 64 && (r->sig_ignored >> (sig - 1) & 1);
        if (r->sig_ignored_known && !listed) {
            unsigned long act[16];
            if (rep->cleared ||
                (syscall(SYS_rt_sigaction, sig, NULL, act, KERNEL_SIGSET_SIZE) == 0 &&
                 (act[0] == (unsigned long)(uintptr_t)SIG_DFL ||
                  act[0] == (unsigned long)(uintptr_t)SIG_IGN)))
                continue;
        }
        (void)syscall(SYS_rt_sigaction, sig, dfl_action, NULL, KERNEL_SIGSET_SIZE);
    }
}

/* LISTEN_PID must name the process that execs: only known in the child.
 * The string was allocated by the parent, which frees it after the spawn
 * returns; writing digits into it is async-signal-safe. */
static void fill_pid_digits(char *digits)
{
    char rev[12];
    int k = 0;
    for (unsigned long v = (unsigned long)getpid(); v > 0 || k == 0; v /= 10)
        rev[k++] = (char)('0' + v % 10);
    /* Left-aligned and NUL-terminated, no zero padding: sd_listen_fds
     * parses with base 0, so a leading 0 would read as octal. */
    for (int i = 0; i < k; i++)
        digits[i] = rev[k - 1 - i];
    digits[k] = '\0';
}

/* fd itself when placing fds at 3..top-1 cannot clobber it, else a
 * close-on-exec copy of it at top or above (-1 and errno on failure). A
 * source at 3 + i itself is moved too: dup2 onto itself would keep its
 * close-on-exec flag. A source below 3 is placed before the output pipes
 * are put at 1 and 2. */
static int above_targets(int fd, int top)
{
    if (fd < 3 || fd >= top)
        return fd;
    return fcntl(fd, F_DUPFD_CLOEXEC, top);
}

/* The exec-mode child, after pm__child_contain: handlers, mask, death
 * signal, LISTEN_PID, the fds, the privileges, execve. Raw system calls
 * and glibc's thin wrappers of one system call each only (fcntl, dup2,
 * getpid, prctl): no allocation, no lock, nothing that signals the
 * parent's other threads (glibc's set*id do), so that it can run in the
 * vfork child, which shares the supervisor's memory. */
static void exec_child(const pm__spawn_req *r, child_report *rep)
{
    int top = 3 + r->nfds;
    int tmp[64 + 8];
    reset_signals(r, rep);
    (void)syscall(SYS_rt_sigprocmask, SIG_SETMASK, r->mask, NULL, KERNEL_SIGSET_SIZE);
    die_with_parent(r->parent);
    if (r->pid_digits != NULL)
        fill_pid_digits(r->pid_digits);

    /* Move the error pipe (fork: the child writes into it) and every
     * source fd inside the target range above it first, so that placing
     * fd i at 3 + i can never clobber a source not yet placed. A source
     * outside 3..top-1 (the supervisor's fds usually are) is placed from
     * where it is: nothing placed lands on it. */
    if (rep->shared == NULL && rep->pipe_fd < top) {
        /* Reported through the pipe where it is: a failure before the
         * exec must never end the child with nothing written (readiness.c
         * pm__exec_pipe_verdict reads "nothing" as exec'd). */
        int moved = fcntl(rep->pipe_fd, F_DUPFD_CLOEXEC, top);
        if (moved < 0)
            child_fail(rep, errno);
        rep->pipe_fd = moved;
    }
    for (int i = 0; i < r->nfds; i++) {
        tmp[i] = above_targets(r->fds[i], top);
        if (tmp[i] < 0)
            child_fail(rep, errno);
    }
    /* The output pipes too: placing fd 3 + i must not clobber them. */
    int out = -1, err = -1;
    if (r->capture) {
        out = above_targets(r->stdio[0], top);
        err = above_targets(r->stdio[1], top);
        if (out < 0 || err < 0)
            child_fail(rep, errno);
    }
    for (int i = 0; i < r->nfds; i++)
        if (dup2(tmp[i], 3 + i) < 0) /* dup2 clears close-on-exec on 3 + i */
            child_fail(rep, errno);
    if (r->capture) {
        int rc = pm__child_stdio(out, err);
        if (rc < 0)
            child_fail(rep, -rc);
    }
    /* Everything else procmesh or the application had open is closed by the
     * exec; the error pipe too, which is how the parent learns it worked. */
    pm__cloexec_from(top);
    int rc = pm__child_privileges(r);
    if (rc < 0)
        child_fail(rep, -rc);
    (void)syscall(SYS_execve, r->path, r->argv, r->envp);
    child_fail(rep, errno);
}

PM__READY_TEXT int pm__child_contain(const pm__spawn_req *r, int placed)
{
    /* Its own process group: where no cgroup can be made, killing the
     * group when the worker is reaped is what ends its descendants (all
     * but a setsid() one). Only ever signalled after the worker died, so
     * the parent need not also call setpgid to close a race. */
    if (setpgid(0, 0) < 0)
        return errno;
    if (r->cg != NULL) {
        /* "0" moves the writer: no pid to format. Before the exec or the
         * bootstrap, so nothing the worker starts is ever outside. The
         * byte is on the stack, not a string constant: a fork child's
         * first read of a read-only data page the fork did not map for it
         * is a page fault (scrub.h). Unless placed, this write waits for
         * an RCU grace period (5-20 ms) when no migration happened for a
         * grace period before (doc/design.md, "The cgroup join"): a fork
         * child cannot be born in its leaf without leaving glibc's fork. */
        char zero = '0';
        long rc;
        if (!placed && (rc = pm__sys3(SYS_write, r->cg->procs_fd, &zero, 1)) < 0)
            return (int)-rc;
        /* The v1 hierarchies of a hybrid host: through their tasks files
         * when this thread is all the child is, which moves it without
         * that wait (cgroup.c); else (a thread an application's
         * pthread_atfork handler started in the child, or no /proc to
         * tell: pm__cg_lone_thread) through cgroup.procs, which moves
         * every thread, so none stays outside the slot's limits. */
        int alone = -1; /* asked once, and only where there is a v1 join */
        for (int i = 0; i < PM__CG_NCTRL; i++) {
            if (r->cg->v1_procs[i] < 0)
                continue;
            if (alone < 0)
                alone = pm__cg_lone_thread();
            int fd = alone ? r->cg->v1_tasks[i] : r->cg->v1_procs[i];
            if ((rc = pm__sys3(SYS_write, fd, &zero, 1)) < 0)
                return (int)-rc;
        }
    }
    for (int i = 0; r->rlimit_set != NULL && i < PM__MAX_RLIMIT; i++) {
        if (!r->rlimit_set[i])
            continue;
        /* prlimit64's own struct (two 64-bit words on every architecture,
         * where struct rlimit may be two 32-bit ones), whose infinity is
         * all ones, as UINT64_MAX says here. */
        const uint64_t rl[2] = {r->rlimit_soft[i], r->rlimit_hard[i]};
        long rc = pm__sys4(SYS_prlimit64, 0, i, rl, NULL);
        if (rc < 0)
            return (int)-rc;
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
 * EINVAL for the flag) or a seccomp profile that refuses it (EPERM; the
 * cgroup's own permissions answer EACCES) fall back to fork() and a write
 * from the child, remembered so the next spawn does not try again.
 * *placed is set in the child.
 *
 * Not into a cgroup that was ever killed through cgroup.kill: Linux 6.x
 * compares the kill sequence number of the cgroup a child is born into
 * with the one its parent's cgroup had at fork, and CLONE_INTO_CGROUP
 * makes them different cgroups, so once the slot's cgroup has been killed
 * (its number moved on, ours did not) every child cloned into it is
 * SIGKILLed at birth (seen on 6.18: every replacement after the first
 * tree kill died before it ran; tests/check_tree.c test_tree_exec_crash).
 * Joining by a write from the child has no such check. */
PM__READY_TEXT static pid_t fork_into(const pm__spawn_req *r, int *placed)
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
        if (errno != ENOSYS && errno != E2BIG && errno != EINVAL && errno != EPERM)
            return -1;
        __atomic_store_n(&clone3_state, -1, __ATOMIC_RELAXED);
    }
#endif
    return fork();
}

/* The fork-mode child: everything it needs of r copied onto its own frame,
 * with signals blocked (no handler frame on the stack being zeroed), the
 * supervisor's stack cleaned above and below, then the bootstrap. */
/* Not instrumented: a sanitizer's red zones between this frame's variables
 * are bytes nothing writes, which would keep the dead frames' contents. */
#if defined(__has_attribute)
#if __has_attribute(no_sanitize)
__attribute__((no_sanitize("address")))
#endif
#endif
PM__READY_TEXT __attribute__((noinline, noreturn)) static void fork_child_main(const pm__spawn_req *r,
                                                               const unsigned char *ctx_in)
{
    /* The vector registers were cleared by pm__spawn, first thing. */
    /* Every byte of this frame is written before the wipes: it lies above
     * the dead stack they clear, and a byte left unwritten keeps what the
     * supervisor's dead frames held at this depth. glibc's sigset_t is 128
     * bytes, of which the kernel uses 8: the rest is zeroed here, and only
     * the kernel's part of a mask is copied or read (the rest of the
     * supervisor's copy was never written either). Every signal is blocked
     * by the raw call, which also reads the mask the child was born with
     * (the forking thread's): that is the one restored when the request
     * names none, so the supervisor need not read it before the fork. */
    const uint64_t all[2] = {~0ULL, ~0ULL}; /* 16 bytes: KERNEL_SIGSET_SIZE <= 16 */
    sigset_t mask;
    memset(&mask, 0, sizeof(mask));
    if (pm__sys4(SYS_rt_sigprocmask, SIG_SETMASK, all, &mask, KERNEL_SIGSET_SIZE) < 0)
        _exit(127);
    if (r->mask != NULL)
        memcpy(&mask, r->mask, KERNEL_SIGSET_SIZE);
    /* All of it, a fixed size (pm__spawn padded it): no call to libc's
     * memcpy, whose code is another 64 KiB the child would fault in. */
    _Alignas(16) unsigned char ctx[PM__SPAWN_CTX_MAX];
    memcpy(ctx, ctx_in, sizeof(ctx));
    pm__spawn_req req = *r;
    req.mask = &mask;
    req.ctx = ctx;
    char *to = r->scrub_to;
    /* r points into a frame about to be zeroed: not used past here. */
    pm__wipe_dead_stack();
    pm__wipe_live_frames(__builtin_dwarf_cfa(), to);
    (void)pm__sys4(SYS_rt_sigprocmask, SIG_SETMASK, &mask, NULL, KERNEL_SIGSET_SIZE);
    die_with_parent(req.parent);
    /* The child function calls pm__child_privileges itself, once
     * procmesh's own side of the worker (the handshake, the crash handler,
     * which loads libgcc for its unwinder) is set up and before the
     * application's bootstrap runs: a strict seccomp filter admits the
     * bootstrap's calls, not the join's. */
    req.child(ctx, &req);
    _exit(127); /* not reached */
}

/* ------------------------------------------------------------------ exec mode: vfork */

/* Exec mode spawns the way glibc's posix_spawn does: clone3 with
 * CLONE_VM|CLONE_VFORK, the child on a stack of its own, the parent
 * suspended until the child has exec'd or exited. fork() copies the
 * supervisor's page tables (the bigger the supervisor, the more: rings,
 * io_uring, the hub's queues) only for execve to throw them away, and
 * every page the parent then writes takes a copy-on-write fault; a vfork
 * child copies nothing. The price: the child runs on the supervisor's
 * memory, so it may only make system calls (exec_child's rules), its
 * stack is a mapping of its own (returning into the parent's frames would
 * corrupt them), the parent blocks every signal around the clone (a
 * handler running in the child would run on the parent's data), and what
 * the child patches (the seccomp program's pid) is a copy made here.
 *
 * Not under AddressSanitizer: its instrumented stack frames and fake
 * stacks allocate and poison shadow memory, which the child would do on
 * the supervisor's behalf on a stack that is unmapped afterwards; the
 * sanitizer build forks (the child steps are the same code).
 * x86_64 only: the trampoline that switches stacks is assembly (glibc
 * exports no clone3); other architectures fork. */
#if defined(__SANITIZE_ADDRESS__)
#define PM__SPAWN_VFORK 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PM__SPAWN_VFORK 0
#endif
#endif
#if !defined(PM__SPAWN_VFORK) && defined(__x86_64__) && defined(SYS_clone3)
#define PM__SPAWN_VFORK 1
#endif
#ifndef PM__SPAWN_VFORK
#define PM__SPAWN_VFORK 0
#endif

#if PM__SPAWN_VFORK
/* clone3(args, size), then in the child fn(arg) on the new stack and exit
 * with its value; the parent gets the pid or -errno. rcx and r11 are
 * clobbered by syscall, so arg moves to r8 first; the kernel starts the
 * child with rsp = stack + stack_size (16-aligned), and the call makes the
 * frame fn expects. rbp = 0 and rip undefined end any unwinding there. */
long pm__clone3_run(void *args, size_t size, int (*fn)(void *), void *arg);
__asm__(".text\n"
        ".globl pm__clone3_run\n"
        ".hidden pm__clone3_run\n"
        ".type pm__clone3_run, @function\n"
        ".p2align 4\n"
        "pm__clone3_run:\n"
        "    .cfi_startproc\n"
        "    movq %rcx, %r8\n"
        "    movl $435, %eax\n" /* SYS_clone3 */
        "    syscall\n"
        "    testq %rax, %rax\n"
        "    jz 1f\n"
        "    ret\n"
        "1:  .cfi_undefined rip\n"
        "    xorl %ebp, %ebp\n"
        "    movq %r8, %rdi\n"
        "    call *%rdx\n"
        "    movl %eax, %edi\n"
        "    movl $231, %eax\n" /* SYS_exit_group: the child is its own process */
        "    syscall\n"
        "    hlt\n"
        "    .cfi_endproc\n"
        ".size pm__clone3_run, .-pm__clone3_run\n");

/* clone3 works for the vfork spawn: 0 unknown, 1 yes, -1 no (fork). */
static int vfork_state;

#define VFORK_STACK (128u << 10) /* the child's deepest use is a few KiB */

#ifndef CLONE_CLEAR_SIGHAND
#define CLONE_CLEAR_SIGHAND 0x100000000ULL /* linux/sched.h, 5.5 */
#endif

/* clone3(CLONE_CLEAR_SIGHAND) works here: 0 unknown, 1 yes, -1 no. */
static int clear_sighand_state;

struct vfork_arg {
    const pm__spawn_req *r;
    int placed;           /* born in the slot's cgroup (CLONE_INTO_CGROUP) */
    int cleared;          /* born with every handler reset (CLONE_CLEAR_SIGHAND) */
    volatile int err;     /* the failing step's errno, read by the parent */
};

static int vfork_child(void *p)
{
    struct vfork_arg *a = p;
    child_report rep = {-1, &a->err, a->cleared};
    int err = pm__child_contain(a->r, a->placed);
    if (err != 0)
        child_fail(&rep, err);
    exec_child(a->r, &rep);
    return 127; /* not reached: exec_child execs or exits */
}

/* The child's stack, one mapping: a guard page (a stack overflow faults
 * instead of writing into whatever lies below), the stack, room for the
 * seccomp program's copy. One is kept for the next spawn (its pages stay
 * resident, and the mmap, mprotect and munmap leave the restart path),
 * taken by whichever spawn finds it free: two threads spawning at once
 * (two clusters) make the second map its own. It holds nothing of a
 * worker's: the vfork child runs only procmesh's steps on it. */
struct vfork_stack {
    char *map;
    size_t size;
};
static struct vfork_stack stack_kept;
static int stack_kept_busy;

static int stack_take(size_t need, struct vfork_stack *st, int *kept)
{
    *kept = !__atomic_exchange_n(&stack_kept_busy, 1, __ATOMIC_ACQUIRE);
    if (*kept && stack_kept.size >= need) {
        *st = stack_kept;
        return 0;
    }
    if (*kept && stack_kept.map != NULL) {
        munmap(stack_kept.map, stack_kept.size);
        stack_kept.map = NULL;
        stack_kept.size = 0;
    }
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    int e = 0;
    st->size = need;
    st->map = mmap(NULL, need, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
    if (st->map == MAP_FAILED)
        e = errno;
    else if (mprotect(st->map, page, PROT_NONE) < 0)
        e = errno, munmap(st->map, need);
    if (e != 0) {
        if (*kept)
            __atomic_store_n(&stack_kept_busy, 0, __ATOMIC_RELEASE);
        return -e;
    }
    if (*kept)
        stack_kept = *st;
    return 0;
}

/* The child has exec'd or exited: nothing uses its stack any more. */
static void stack_give(struct vfork_stack *st, int kept)
{
    if (kept)
        __atomic_store_n(&stack_kept_busy, 0, __ATOMIC_RELEASE);
    else
        munmap(st->map, st->size);
}

struct clone_args3 {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
        set_tid_size, cgroup;
};

/* The clone, with every signal blocked, raw (glibc's pthread_sigmask
 * keeps its own two unblocked): the child inherits the mask, so no handler
 * can run in it before it has reset them. A kernel that refuses a flag
 * (EINVAL, or E2BIG for the struct's cgroup field) is asked again without
 * it, and it is not asked for again: CLONE_INTO_CGROUP (5.7) first, the
 * child then joins by a write, as after fork_into's fallback; then
 * CLONE_CLEAR_SIGHAND (5.5), the child then resets every signal itself. */
static long vfork_clone(struct clone_args3 *ca, struct vfork_arg *a)
{
    const unsigned long all = ~0UL;
    unsigned long old;
    (void)syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, (size_t)8);
    long pid;
    for (;;) {
        pid = pm__clone3_run(ca, sizeof(*ca), vfork_child, a);
        if (pid != -EINVAL && pid != -E2BIG)
            break;
        if (a->placed) {
            __atomic_store_n(&clone3_state, -1, __ATOMIC_RELAXED);
            ca->flags &= ~(uint64_t)CLONE_INTO_CGROUP;
            ca->cgroup = 0;
            a->placed = 0;
        } else if (a->cleared) {
            __atomic_store_n(&clear_sighand_state, -1, __ATOMIC_RELAXED);
            ca->flags &= ~(uint64_t)CLONE_CLEAR_SIGHAND;
            a->cleared = 0;
        } else {
            break;
        }
    }
    (void)syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, (size_t)8);
    return pid;
}

/* The vfork spawn. The pid, -errno, or -ENOSYS when clone3 is refused
 * (kernel < 5.3, or a container's seccomp profile: ENOSYS or EPERM), then
 * remembered: the caller forks, now and on every later spawn. */
static pid_t spawn_vfork(const pm__spawn_req *r)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t prog_bytes = r->seccomp != NULL ? r->seccomp->len * sizeof(*r->seccomp->insns) : 0;
    struct vfork_stack st;
    int kept;
    int rc = stack_take(page + VFORK_STACK + ((prog_bytes + page - 1) & ~(page - 1)), &st, &kept);
    if (rc < 0)
        return rc;
    pm__spawn_req cr = *r;
    pm__seccomp_prog prog;
    if (r->seccomp != NULL) {
        /* pm__seccomp_load writes the child's pid into the program: in a
         * child sharing our memory that would be the supervisor's program,
         * whose placeholder the next worker needs. */
        prog = *r->seccomp;
        prog.insns = (struct sock_filter *)(void *)(st.map + page + VFORK_STACK);
        memcpy(prog.insns, r->seccomp->insns, prog_bytes);
        cr.seccomp = &prog;
    }
    struct vfork_arg a = {&cr, 0, 0, 0};
    struct clone_args3 ca;
    memset(&ca, 0, sizeof(ca));
    ca.flags = CLONE_VM | CLONE_VFORK;
    ca.exit_signal = SIGCHLD;
    ca.stack = (uint64_t)(uintptr_t)(st.map + page);
    ca.stack_size = VFORK_STACK;
    /* Born in the slot's cgroup: see fork_into for when it cannot be. */
    if (r->cg != NULL && r->cg->dir_fd >= 0 && !r->cg->killed &&
        __atomic_load_n(&clone3_state, __ATOMIC_RELAXED) >= 0) {
        ca.flags |= CLONE_INTO_CGROUP;
        ca.cgroup = (uint64_t)r->cg->dir_fd;
        a.placed = 1;
    }
    if (__atomic_load_n(&clear_sighand_state, __ATOMIC_RELAXED) >= 0) {
        ca.flags |= CLONE_CLEAR_SIGHAND;
        a.cleared = 1;
    }
    /* The child's setresuid makes the mm non-dumpable (suid_dumpable), and
     * the mm is ours until its execve: that is what keeps a process of the
     * worker's uid from ptracing it, and our memory with it, in that
     * window. Afterwards the supervisor gets back what it had (a fork
     * child's credential change never touched it). */
    int was_dumpable = r->set_ids ? prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) : -1;
    long pid = vfork_clone(&ca, &a);
    if (was_dumpable == 1 && prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 1)
        (void)prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    stack_give(&st, kept);
    if (pid == -ENOSYS || pid == -EPERM) {
        __atomic_store_n(&vfork_state, -1, __ATOMIC_RELAXED);
        return -ENOSYS;
    }
    if (pid < 0)
        return (pid_t)pid;
    __atomic_store_n(&vfork_state, 1, __ATOMIC_RELAXED);
    if (a.cleared)
        __atomic_store_n(&clear_sighand_state, 1, __ATOMIC_RELAXED);
    if (a.err != 0) {
        /* The child failed before or at execve and has exited: report as a
         * fork child would, through the error pipe, which the loop reads
         * like any other (exec_errno, the PM_REASON_EXEC exit). Empty
         * pipe, 4 bytes: the write cannot block or be short. */
        int e = a.err;
        ssize_t n = write(r->err_pipe, &e, sizeof(e));
        (void)n;
    }
    return (pid_t)pid;
}
#endif

int pm__spawn_waits_exec(void)
{
#if PM__SPAWN_VFORK
    return __atomic_load_n(&vfork_state, __ATOMIC_RELAXED) >= 0;
#else
    return 0;
#endif
}

PM__READY_TEXT pid_t pm__spawn(const pm__spawn_req *r)
{
    if (r->path != NULL && r->nfds > 64 + 8)
        return -EINVAL;
    /* Buffered output of the parent would otherwise be written twice.
     * Flushed only when something is buffered: fflush locks and writes
     * the stream (libc's lock and the FILE, two pages) even when it is
     * empty, and since the previous fork shared them copy-on-write each
     * write is a page fault on the way from a crash to the replacement's
     * fork. A stream another thread writes meanwhile is the same race as
     * with an unconditional flush (its bytes could land after it). */
    if (__fpending(stdout) > 0)
        fflush(stdout);
    if (__fpending(stderr) > 0)
        fflush(stderr);
#if PM__SPAWN_VFORK
    /* no_wait forks instead: the vfork clone returns only once its child
     * has reached execve, and while the workers started before it load
     * and start on every CPU, the child waits for one, and the supervisor
     * with it, doing nothing. A fork's copy of our page tables costs more
     * for one child (a restart, N = 1) than it saves; for N = 8 and 64 the
     * supervisor going on with the next child is worth more (pm-bench
     * spawn, doc/benchmarks.md stop 64). Its children hold copies of our
     * close-on-exec fds until their exec, as the fallback's do: the exec
     * pipe's reading allows for it (readiness.c). */
    if (r->path != NULL && !r->no_wait && __atomic_load_n(&vfork_state, __ATOMIC_RELAXED) >= 0) {
        pid_t vpid = spawn_vfork(r);
        if (vpid != -ENOSYS)
            return vpid;
        /* clone3 refused: fork below, as on every later spawn. */
    }
#endif
    /* Fork mode: the child's context, padded to its fixed size here in
     * the supervisor (fork_child_main copies it whole). */
    _Alignas(16) unsigned char ctx[PM__SPAWN_CTX_MAX];
    if (r->path == NULL) {
        if (r->ctx_size > sizeof(ctx))
            return -EINVAL;
        memset(ctx, 0, sizeof(ctx));
        memcpy(ctx, r->ctx, r->ctx_size);
        pm__scrub_prime(); /* here, in the supervisor: the child's walk reads it */
    }
    int placed;
    pid_t pid = fork_into(r, &placed);
    if (pid < 0)
        return -errno;
    if (pid > 0)
        return pid;
    /* Fork mode: the registers are cleared before the containment step
     * too, whose first calls (setpgid, setrlimit) may go through a PLT
     * entry the supervisor never bound, and the resolver stores every
     * vector register on the stack (see scrub.h). */
    if (r->path == NULL)
        pm__clear_vector_registers();
    int err = pm__child_contain(r, placed);
    if (err != 0) {
        if (r->path != NULL) {
            child_report rep = {r->err_pipe, NULL, 0};
            child_fail(&rep, err);
        }
        _exit(127);
    }
    if (r->path != NULL) {
        child_report rep = {r->err_pipe, NULL, 0};
        exec_child(r, &rep);
    }
    fork_child_main(r, ctx);
}
