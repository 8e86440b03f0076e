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
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "channel/channel.h" /* struct pm__ctl */
#include "os/crash.h"

/* The signals whose handler records a crash (crash.c keeps the same list). */
static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS};
/* The alternate stack: a stack overflow leaves no room on the thread's own
 * stack for a handler, and the unwinder wants a few KiB. */
#define PM__CRASH_STACK (256u * 1024u)

/* What the handler may touch, all prepared at join: the record to write
 * (in this worker's control block), the pid that armed it (a child of the
 * worker inherits the handler but must not write its parent's record), the
 * module table, and a flag so that only one thread writes. */
static _Atomic(struct pm__crash_rec *) crash_target;
static _Atomic pid_t crash_pid;
static atomic_flag crash_taken = ATOMIC_FLAG_INIT;
static pm__crash_modules crash_modules;
static void *crash_stack;

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

/* Runs on the alternate stack with SA_RESETHAND (the disposition is the
 * default again from entry on). Only async-signal-safe work: loads, plain
 * stores into our own mapping, pm__crash_backtrace (crash.h), getpid, raise. */
static void on_fatal(int sig, siginfo_t *si, void *ucv)
{
    int saved = errno;
    struct pm__crash_rec *r = atomic_load_explicit(&crash_target, memory_order_acquire);
    if (r != NULL && getpid() == atomic_load_explicit(&crash_pid, memory_order_relaxed) &&
        !atomic_flag_test_and_set(&crash_taken)) {
        void *raw[PM_CRASH_FRAMES + 8];
        uint64_t frames[PM_CRASH_FRAMES + 8];
        int n = pm__crash_backtrace(raw, (int)PM__ARRAY_SIZE(raw));
        for (int i = 0; i < n; i++)
            frames[i] = (uint64_t)(uintptr_t)raw[i];
        /* Before the unwinder is primed (an exec'd worker, before ready):
         * the faulting pc is the one frame. */
        uint64_t pc = context_pc(ucv);
        if (n <= 0 && pc != 0) {
            frames[0] = pc;
            n = 1;
        }
        /* si_addr means an address only for a fault the kernel raised;
         * for kill/raise/abort the union holds the sender's pid and uid. */
        int fault = si->si_code > 0 && sig != SIGABRT && sig != SIGSYS;
        uint64_t addr = fault ? (uint64_t)(uintptr_t)si->si_addr : 0;
        pm__crash_fill(r, &crash_modules, sig, si->si_code, addr, pc, frames, n > 0 ? (unsigned)n : 0);
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
static void map_stack(void)
{
    if (crash_stack != NULL)
        return;
    void *p = mmap(NULL, PM__CRASH_STACK, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    crash_stack = p == MAP_FAILED ? NULL : p;
}

/* Our stack for this thread, unless it has one: set, and the one it
 * replaced put back (one call when there was none, the usual case). */
static void use_stack(void)
{
    if (crash_stack == NULL)
        return;
    stack_t ss = {.ss_sp = crash_stack, .ss_size = PM__CRASH_STACK, .ss_flags = 0}, old;
    if (sigaltstack(&ss, &old) == 0 && (old.ss_flags & SS_DISABLE) == 0)
        (void)sigaltstack(&old, NULL);
}

static int is_default(const struct sigaction *a)
{
    return (a->sa_flags & SA_SIGINFO) == 0 && a->sa_handler == SIG_DFL;
}

/* forked: pm__node_crash_arm_forked's one call per signal; otherwise the
 * disposition is looked at first, so that another thread of an exec'd
 * worker never meets our handler in place of its own, even briefly. */
static void arm(struct pm__ctl *ctl, int forked)
{
    atomic_store_explicit(&crash_pid, getpid(), memory_order_relaxed);
    atomic_store_explicit(&crash_target, &ctl->crash, memory_order_release);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_fatal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < PM__ARRAY_SIZE(crash_signals); i++) {
        struct sigaction old;
        if (forked) {
            if (sigaction(crash_signals[i], &sa, &old) == 0 && !is_default(&old))
                (void)sigaction(crash_signals[i], &old, NULL);
        } else if (sigaction(crash_signals[i], NULL, &old) == 0 && is_default(&old)) {
            (void)sigaction(crash_signals[i], &sa, NULL);
        }
    }
}

/* Records this worker's crashes into its control block from now on: the
 * module table, an alternate stack for this thread (unless it has one), and
 * the handler for every crash signal whose disposition is still the default
 * (a handler the application installed is its own business and stays). */
void pm__node_crash_arm(struct pm__ctl *ctl)
{
    pm__crash_modules_load(&crash_modules);
    map_stack();
    use_stack();
    arm(ctl, 0);
}

void pm__node_crash_prime(void)
{
    pm__crash_modules_refresh(&crash_modules);
    map_stack();
}

void pm__node_crash_arm_forked(struct pm__ctl *ctl)
{
    /* Primed by the supervisor that forked us; if it was not, loaded
     * here as an exec'd worker does. */
    if (crash_modules.n == 0)
        pm__crash_modules_load(&crash_modules);
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
