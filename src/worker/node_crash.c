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

/* The calls that arm the handler, raw on x86-64 (base/rawsys.h): libc's
 * sigaction, sigprocmask and sigaltstack share one 64 KiB stretch of its
 * text that a fork child, and an exec'd worker, would fault in on the way
 * to READY for these calls alone (doc/benchmarks.md, stop 58). The
 * kernel's struct sigaction is not libc's, and a handler set by
 * rt_sigaction needs the return trampoline that libc's wrapper would have put
 * there (SA_RESTORER). Elsewhere libc's calls. */
#if PM__RAWSYS /* x86-64, 64-bit ABI (base/rawsys.h) */
/* The kernel's struct sigaction (arch/x86/include/uapi/asm/signal.h); the
 * mask is the kernel's 8 bytes, bit sig - 1 as CRASH_SIGNALS has them. */
typedef struct {
    void *handler;
    unsigned long flags;
    void (*restorer)(void);
    uint64_t mask;
} action;
typedef uint64_t mask_set;
#define KSA_RESTORER 0x04000000UL

/* The signal-return trampoline: rt_sigreturn (15) in the very bytes of glibc's
 * and musl's __restore_rt, 48 c7 c0 0f 00 00 00 0f 05, which libgcc's
 * unwinder (x86_64_fallback_frame_state) and gdb recognise as a signal
 * frame: the crash handler's backtrace goes on through it into the
 * frames that faulted. Written as bytes: an assembler that optimises
 * (as -O1) would shorten the mov to b8 0f 00 00 00, which nothing
 * recognises. The nop before it, as glibc's and musl's have: the unwinder
 * looks up the unwind info of the return address minus one, which without
 * it is the last byte of whatever the linker put before the trampoline (another
 * function's, at -Os), and that function's rules would be applied to the
 * signal frame. In the ready section, beside the code that arms it. */
void pm__crash_restore_rt(void);
__asm__(".pushsection .text.hot.pm_ready,\"ax\",@progbits\n"
        "\tnop\n"
        ".globl pm__crash_restore_rt\n"
        ".hidden pm__crash_restore_rt\n"
        ".type pm__crash_restore_rt,@function\n"
        "pm__crash_restore_rt:\n"
        "\t.byte 0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05\n"
        ".size pm__crash_restore_rt, .-pm__crash_restore_rt\n"
        ".popsection\n");

/* Our handler: nothing blocked beyond the signal itself (the mask zero,
 * with every byte of the struct). */
PM__READY_TEXT static void action_crash(action *a)
{
    memset(a, 0, sizeof(*a));
    a->handler = (void *)on_fatal;
    a->flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND | KSA_RESTORER;
    a->restorer = pm__crash_restore_rt;
}

/* sigaction(2): 0 or -errno. */
PM__READY_TEXT static int action_swap(int sig, const action *a, action *old)
{
    return (int)pm__sys4(SYS_rt_sigaction, sig, a, old, sizeof(uint64_t));
}

/* The kernel's rule: a handler of 0 is the default action, whatever the
 * flags say (SA_SIGINFO with a null sa_sigaction too). */
PM__READY_TEXT static int action_is_default(const action *a)
{
    return a->handler == (void *)SIG_DFL;
}

PM__READY_TEXT static int mask_block_crash(mask_set *saved)
{
    const uint64_t block = CRASH_SIGNALS;
    return pm__sys4(SYS_rt_sigprocmask, SIG_BLOCK, &block, saved, sizeof(uint64_t)) == 0;
}

PM__READY_TEXT static void mask_restore(const mask_set *saved)
{
    (void)pm__sys4(SYS_rt_sigprocmask, SIG_SETMASK, saved, NULL, sizeof(uint64_t));
}

/* stack_t is the kernel's layout on x86-64. */
PM__READY_TEXT static int stack_swap(const stack_t *ss, stack_t *old)
{
    return (int)pm__sys2(SYS_sigaltstack, ss, old);
}

PM__READY_TEXT static pid_t own_pid(void)
{
    return (pid_t)pm__sys1(SYS_getpid, 0);
}
#else
typedef struct sigaction action;
typedef sigset_t mask_set;

static void action_crash(action *a)
{
    memset(a, 0, sizeof(*a));
    a->sa_sigaction = on_fatal;
    a->sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&a->sa_mask);
}

static int action_swap(int sig, const action *a, action *old)
{
    return sigaction(sig, a, old) == 0 ? 0 : -errno;
}

static int action_is_default(const action *a)
{
    return a->sa_handler == SIG_DFL; /* sa_sigaction shares its place */
}

static int mask_block_crash(mask_set *saved)
{
    sigset_t block;
    sigemptyset(&block);
    for (uint64_t left = CRASH_SIGNALS; left != 0; left &= left - 1)
        sigaddset(&block, __builtin_ctzll(left) + 1);
    return sigprocmask(SIG_BLOCK, &block, saved) == 0;
}

static void mask_restore(const mask_set *saved)
{
    (void)sigprocmask(SIG_SETMASK, saved, NULL);
}

static int stack_swap(const stack_t *ss, stack_t *old)
{
    return sigaltstack(ss, old) == 0 ? 0 : -errno;
}

static pid_t own_pid(void)
{
    return getpid();
}
#endif

/* Our stack for this thread, unless it has one: set, and the one it
 * replaced put back (one call when there was none, the usual case). */
PM__READY_TEXT static void use_stack(void)
{
    if (crash.stack == NULL)
        return;
    stack_t ss = {.ss_sp = crash.stack, .ss_size = PM__CRASH_STACK, .ss_flags = 0}, old;
    if (stack_swap(&ss, &old) == 0 && (old.ss_flags & SS_DISABLE) == 0)
        (void)stack_swap(&old, NULL);
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
    atomic_store_explicit(&crash_pid, own_pid(), memory_order_relaxed);
    atomic_store_explicit(&crash_target, &ctl->crash, memory_order_release);
    action sa, old;
    action_crash(&sa);
    mask_set saved;
    int blocked = 0;
    /* Fails only for a bad argument: then the look-first loop. */
    if (!forked && single_threaded())
        blocked = mask_block_crash(&saved);
    for (uint64_t left = CRASH_SIGNALS; left != 0; left &= left - 1) {
        int sig = __builtin_ctzll(left) + 1;
        if (forked || blocked) {
            if (action_swap(sig, &sa, &old) == 0 && !action_is_default(&old))
                (void)action_swap(sig, &old, NULL);
        } else if (action_swap(sig, NULL, &old) == 0 && action_is_default(&old)) {
            (void)action_swap(sig, &sa, NULL);
        }
    }
    if (blocked)
        mask_restore(&saved);
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
