/* SPDX-License-Identifier: MIT */
/*
 * node_crash.c - the worker's crash handler: a fatal signal writes a crash
 * record (os/crash.h) into the worker's control block, then ends the
 * process as the signal would have.
 */
#define _GNU_SOURCE
#include "base/internal.h"
#include "node_crash.h"

#include <signal.h>
#if defined(__has_include)
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#endif
#endif
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <ucontext.h>

#include "channel/channel.h" /* struct pm__ctl */
#include "os/crash.h"

/* The signals whose handler records a crash (crash.c keeps the same list),
 * bit sig - 1 each: a constant in the code, where an array would be
 * read-only data, a page a fork child would fault in on its way to READY
 * for these seven numbers alone. Armed in this order (lowest first). */
#define CRASH_BIT(sig) (1ULL << ((sig) - 1))
#define CRASH_SIGNALS                                                                   \
    (CRASH_BIT(SIGSEGV) | CRASH_BIT(SIGBUS) | CRASH_BIT(SIGFPE) | CRASH_BIT(SIGILL) |   \
     CRASH_BIT(SIGABRT) | CRASH_BIT(SIGTRAP) | CRASH_BIT(SIGSYS))
/* The alternate stack: a stack overflow leaves no room on the thread's own
 * stack for a handler, and the unwinder wants a few KiB. */
#define PM__CRASH_STACK (256u * 1024u)

/* What the handler may touch, all prepared at join: the record to write
 * (in this worker's control block), the pid that armed it (a child of the
 * worker inherits the handler but must not write its parent's record), the
 * module table, and a flag so that only one thread writes. */
/* The two words a fork child writes on its way to READY, on the .data
 * page of its other written words (PM__CHILD_DATA); an exec'd worker's
 * join writes that page too (the fork generation's registration). */
PM__CHILD_DATA static _Atomic(struct pm__crash_rec *) crash_target;
PM__CHILD_DATA static _Atomic pid_t crash_pid;
static struct {
    atomic_flag taken;
    void *stack;
    /* Last: one object, so that what join writes (the stack pointer, the
     * table's head and its first entries) shares a page; as separate
     * statics the compiler put the 27 KiB table between them, and an
     * exec'd worker wrote one page more on its way to ready. */
    pm__crash_modules modules;
} crash = {.taken = ATOMIC_FLAG_INIT};

/* 1 on the architectures whose signal context we read: the faulting pc
 * and, for a jump to an address that is not code, the caller. */
#if defined(__x86_64__) || defined(__aarch64__)
#define PM__CRASH_CONTEXT 1
#else
#define PM__CRASH_CONTEXT 0
#endif

static uint64_t context_pc(const void *ucv)
{
    const ucontext_t *uc = ucv;
#if defined(__x86_64__)
    return (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    return (uint64_t)uc->uc_mcontext.pc;
#else
    (void)uc;
    return 0; /* not read on this architecture: frames still say where */
#endif
}

/* 1 when the 8 bytes at a can be read without a fault. rt_sigprocmask
 * copies its new set (8 bytes on x86-64 and arm64) from the caller before
 * it looks at `how`: with an invalid `how` it fails with EFAULT on memory
 * it cannot read and EINVAL on memory it can, and changes nothing. A system
 * call, so async-signal-safe, with no fd to prepare, and one that both
 * seccomp profiles allow: process_vm_readv on ourselves, the other classic
 * probe, is denied by `basic` and would end the worker with SIGSYS in
 * place of its own signal. */
static int readable(uint64_t a)
{
    if (a == 0)
        return 0;
    int saved = errno;
    long rc = syscall(SYS_rt_sigprocmask, -1, (void *)(uintptr_t)a, NULL, (size_t)8);
    int ok = rc == -1 && errno == EINVAL;
    errno = saved;
    return ok;
}

/* 1 when the unwinder may start at pc: libgcc's fallback for an address
 * without unwind info reads the 9 bytes there (is it a sigreturn stub?). */
static int code_readable(uint64_t pc)
{
    return readable(pc) && readable(pc + 1);
}

/* The return address of the call that jumped to the faulting pc, read from
 * the context: a call pushed it at the stack pointer (x86-64) or left it in
 * the link register (arm64). 0 when it cannot be read. */
static uint64_t context_caller(const void *ucv)
{
    const ucontext_t *uc = ucv;
#if defined(__x86_64__)
    uint64_t sp = (uint64_t)uc->uc_mcontext.gregs[REG_RSP];
    return readable(sp) ? *(const uint64_t *)(uintptr_t)sp : 0;
#elif defined(__aarch64__)
    return (uint64_t)uc->uc_mcontext.regs[30];
#else
    (void)uc;
    return 0;
#endif
}

/* The interrupted context made the caller's, as if the call to the bad pc
 * had returned (x86-64: the return address popped; arm64: sp unchanged,
 * pc from the link register), so that the unwinder, which reads the
 * interrupted registers from this context, goes on from the caller; and
 * put back after. The process never resumes this context either way: the
 * handler re-raises the signal. */
static void context_retarget(void *ucv, uint64_t ra, uint64_t saved[2])
{
    ucontext_t *uc = ucv;
#if defined(__x86_64__)
    saved[0] = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
    saved[1] = (uint64_t)uc->uc_mcontext.gregs[REG_RSP];
    uc->uc_mcontext.gregs[REG_RIP] = (greg_t)ra;
    uc->uc_mcontext.gregs[REG_RSP] = (greg_t)(saved[1] + 8);
#elif defined(__aarch64__)
    saved[0] = (uint64_t)uc->uc_mcontext.pc;
    saved[1] = 0;
    uc->uc_mcontext.pc = ra;
#else
    (void)uc, (void)ra, (void)saved;
#endif
}

static void context_restore(void *ucv, const uint64_t saved[2])
{
    ucontext_t *uc = ucv;
#if defined(__x86_64__)
    uc->uc_mcontext.gregs[REG_RIP] = (greg_t)saved[0];
    uc->uc_mcontext.gregs[REG_RSP] = (greg_t)saved[1];
#elif defined(__aarch64__)
    uc->uc_mcontext.pc = saved[0];
#else
    (void)uc, (void)saved;
#endif
}

#define PM__RAW_FRAMES (PM_CRASH_FRAMES + 8)

/* The unwinder's frames from here (the handler's own first), 0 before it
 * is primed. */
static int unwind(uint64_t *frames)
{
    void *raw[PM__RAW_FRAMES];
    int n = pm__crash_backtrace(raw, PM__RAW_FRAMES);
    for (int i = 0; i < n; i++)
        frames[i] = (uint64_t)(uintptr_t)raw[i];
    return n > 0 ? n : 0;
}

/* 1 when the unwinder got past pc: pc is a frame and not the last one. It
 * stops at pc when pc is 0 or has no unwind info (not code at all). */
static int unwound_past(const uint64_t *frames, int n, uint64_t pc)
{
    for (int i = 0; i + 1 < n; i++)
        if (frames[i] == pc)
            return 1;
    return 0;
}

/* The frames of a jump to a pc that is not code (a call through a NULL or
 * stale function pointer): pc, the caller the context names, then what the
 * unwinder finds from that caller on, or those two alone. */
static int from_context(void *ucv, uint64_t pc, uint64_t *frames)
{
    frames[0] = pc;
    uint64_t ra = context_caller(ucv);
    if (ra == 0)
        return 1;
    frames[1] = ra;
    if (!code_readable(ra))
        return 2;
    uint64_t more[PM__RAW_FRAMES], saved[2];
    context_retarget(ucv, ra, saved);
    int m = unwind(more);
    context_restore(ucv, saved);
    int n = 2;
    for (int i = 0; i < m; i++)
        if (more[i] == ra) {
            for (int j = i + 1; j < m && n < PM__RAW_FRAMES; j++)
                frames[n++] = more[j];
            break;
        }
    return n;
}

/* The frames to record, the faulting pc first where the context has it. */
static int crash_frames(void *ucv, uint64_t pc, uint64_t *frames)
{
    if (!PM__CRASH_CONTEXT)
        return unwind(frames); /* no pc: the handler's frames and all below */
    if (!code_readable(pc))
        return from_context(ucv, pc, frames); /* the unwinder would read pc */
    int n = unwind(frames);
    /* Before the unwinder is primed (an exec'd worker, before ready):
     * the faulting pc is the one frame. */
    if (n == 0) {
        frames[0] = pc;
        return 1;
    }
    return unwound_past(frames, n, pc) ? n : from_context(ucv, pc, frames);
}

/* Runs on the alternate stack with SA_RESETHAND (the disposition is the
 * default again from entry on). Only async-signal-safe work: loads, plain
 * stores into our own mapping and the signal context, pm__crash_backtrace
 * (crash.h), rt_sigprocmask as a probe, getpid, raise. */
static void on_fatal(int sig, siginfo_t *si, void *ucv)
{
    int saved = errno;
    struct pm__crash_rec *r = atomic_load_explicit(&crash_target, memory_order_acquire);
    if (r != NULL && getpid() == atomic_load_explicit(&crash_pid, memory_order_relaxed) &&
        !atomic_flag_test_and_set(&crash.taken)) {
        uint64_t frames[PM__RAW_FRAMES];
        uint64_t pc = context_pc(ucv);
        int n = crash_frames(ucv, pc, frames);
        /* si_addr means an address only for a fault the kernel raised;
         * for kill/raise/abort the union holds the sender's pid and uid. */
        int fault = si->si_code > 0 && sig != SIGABRT && sig != SIGSYS;
        uint64_t addr = fault ? (uint64_t)(uintptr_t)si->si_addr : 0;
        pm__crash_fill(r, &crash.modules, sig, si->si_code, addr, pc, frames, (unsigned)n);
    }
    /* The same signal again, now with the default action: it is blocked
     * until we return (no SA_NODEFER), so it is delivered on the way out,
     * before a faulting instruction re-executes, and the process ends just
     * as it would have without us: same signal, same core dump. Returning
     * alone would not do for a signal that does not recur (kill, SIGTRAP of
     * int3, SIGSYS of a seccomp filter that let the call fail). */
    raise(sig);
    errno = saved;
}

/* The alternate stack, mapped once per process (a fork child inherits
 * the mapping, untouched: its pages are its own only once a crash writes
 * them). */
PM__READY_TEXT static void map_stack(void)
{
    if (crash.stack != NULL)
        return;
    void *p = mmap(NULL, PM__CRASH_STACK, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    crash.stack = p == MAP_FAILED ? NULL : p;
}

/* Our stack for this thread, unless it has one: set, and the one it
 * replaced put back (one call when there was none, the usual case). */
PM__READY_TEXT static void use_stack(void)
{
    if (crash.stack == NULL)
        return;
    stack_t ss = {.ss_sp = crash.stack, .ss_size = PM__CRASH_STACK, .ss_flags = 0}, old;
    if (sigaltstack(&ss, &old) == 0 && (old.ss_flags & SS_DISABLE) == 0)
        (void)sigaltstack(&old, NULL);
}

PM__READY_TEXT static int is_default(const struct sigaction *a)
{
    return (a->sa_flags & SA_SIGINFO) == 0 && a->sa_handler == SIG_DFL;
}

/* 1 when this process has one thread: glibc's __libc_single_threaded
 * (2.32 on) is true until a second thread is created (a thread made by a
 * raw clone, unknown to libc, is not counted; glibc then skips its own
 * locks too, and such a program is outside what libc supports). 0 where
 * it is not known (another libc, an older glibc): then the caller assumes
 * threads. */
PM__READY_TEXT static int single_threaded(void)
{
#if defined(__has_include)
#if __has_include(<sys/single_threaded.h>)
    return __libc_single_threaded != 0;
#endif
#endif
    return 0;
}

/* forked: pm__node_crash_arm_forked's one call per signal. Otherwise the
 * same one call per signal in a process of one thread, with the crash
 * signals blocked around the loop: no other thread can meet our handler
 * in place of its own, and a crash signal sent from outside meanwhile
 * waits until the application's handler is back (two rt_sigprocmask and
 * seven rt_sigaction where a look and a set took fourteen, on every
 * exec'd worker's way to ready). In a process that has started threads
 * the disposition is looked at first, so that another thread never
 * meets our handler in place of its own, even briefly. */
PM__READY_TEXT static void arm(struct pm__ctl *ctl, int forked)
{
    atomic_store_explicit(&crash_pid, getpid(), memory_order_relaxed);
    atomic_store_explicit(&crash_target, &ctl->crash, memory_order_release);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_fatal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigset_t block, saved;
    int blocked = 0;
    if (!forked && single_threaded()) {
        sigemptyset(&block);
        for (uint64_t left = CRASH_SIGNALS; left != 0; left &= left - 1)
            sigaddset(&block, __builtin_ctzll(left) + 1);
        /* Fails only for a bad argument: then the look-first loop. */
        blocked = sigprocmask(SIG_BLOCK, &block, &saved) == 0;
    }
    for (uint64_t left = CRASH_SIGNALS; left != 0; left &= left - 1) {
        int sig = __builtin_ctzll(left) + 1;
        struct sigaction old;
        if (forked || blocked) {
            if (sigaction(sig, &sa, &old) == 0 && !is_default(&old))
                (void)sigaction(sig, &old, NULL);
        } else if (sigaction(sig, NULL, &old) == 0 && is_default(&old)) {
            (void)sigaction(sig, &sa, NULL);
        }
    }
    if (blocked)
        (void)sigprocmask(SIG_SETMASK, &saved, NULL);
}

/* Records this worker's crashes into its control block from now on: the
 * module table, an alternate stack for this thread (unless it has one), and
 * the handler for every crash signal whose disposition is still the default
 * (a handler the application installed is its own business and stays). */
PM__READY_TEXT void pm__node_crash_arm(struct pm__ctl *ctl)
{
    pm__crash_modules_load(&crash.modules);
    map_stack();
    use_stack();
    arm(ctl, 0);
}

void pm__node_crash_prime(void)
{
    pm__crash_modules_refresh(&crash.modules);
    map_stack();
}

PM__READY_TEXT void pm__node_crash_arm_forked(struct pm__ctl *ctl)
{
    /* Primed by the supervisor that forked us; if it was not, loaded
     * here as an exec'd worker does. */
    if (crash.modules.n == 0)
        pm__crash_modules_load(&crash.modules);
    map_stack();
    use_stack();
    arm(ctl, 1);
}

/* Before the node's memory goes: the handler must not write into it. */
void pm__node_crash_disarm(struct pm__ctl *ctl)
{
    struct pm__crash_rec *mine = &ctl->crash;
    atomic_compare_exchange_strong(&crash_target, &mine, NULL);
}
