/* SPDX-License-Identifier: MIT */
/* check_crash.c - crash reports: what a crashing worker records, what the supervisor accepts, and that the exit itself is unchanged. */
#include "helpers.h"
#include "internals.h"
#include "supervise.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <linux/seccomp.h>

#include "os/crash.h"

#ifndef PM_DAEMON_BIN
#error "PM_DAEMON_BIN must name the procmesh binary"
#endif

enum kind {
    K_NULL = 1, K_WILD, K_ACCERR, K_BUS, K_FPE, K_ABORT, K_OVERFLOW, /* real crashes */
    K_CALL_NULL, K_CALL_WILD, K_USER, K_KERNEL, K_CALL_DATA, K_CALL_EDGE_LO, K_CALL_EDGE_HI,
    K_ABRT_CODE, K_SYS_CODE, K_CALL_DEEP, K_CALL_FAKED_PROBE,
    K_SCRIBBLE, K_HALF, K_MISMATCH, K_FAKE_EXIT, K_NO_HANDLER         /* records to distrust */
};

static void *volatile null_ptr;
static volatile int zero_div;
static volatile int keep_going = 1;
/* A page shared with the forked worker: where it is about to fault. */
static volatile uint64_t *shared;

CRASHER static void crash_null(void)
{
    *(volatile int *)null_ptr = 1;
}

CRASHER static void crash_at(void *p)
{
    *(volatile int *)p = 1;
}

/* A call through a function pointer that is not code: the call itself
 * succeeds (the return address is pushed, or put in the link register),
 * the fetch at the target faults. The store after it keeps the call a
 * call (not a tail jump, which would leave no return address here). */
static void (*volatile fn_ptr)(void);
static volatile int after_call;

CRASHER static void call_through(void)
{
    fn_ptr();
    after_call = 1;
}

static volatile int fpe_sink, fpe_numerator = 7;

CRASHER static void crash_fpe(void)
{
    /* Both operands unknown and the result stored, so that a real idiv is
     * emitted (1 / x compiles to a compare) and not dropped as unused. */
    fpe_sink = fpe_numerator / zero_div;
}

static void call_through(void);

/* A call through NULL under depth frames of its own: more frames than the
 * unwinder is asked for. Not a tail call (the sum after it). */
CRASHER static int deep_call(int depth)
{
    if (depth == 0) {
        call_through();
        return 0;
    }
    return deep_call(depth - 1) + (int)after_call;
}

CRASHER static int recurse(volatile char *prev)
{
    volatile char buf[1024];
    buf[0] = (char)(prev != NULL ? prev[0] + 1 : 0);
    if (!keep_going)
        return buf[0];
    return recurse(buf) + buf[1];
}

static void do_crash(int kind)
{
    switch (kind) {
    case K_NULL:
        crash_null();
        break;
    case K_WILD: {
        /* An address that is certainly not mapped: one just unmapped. */
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        munmap(p, 4096);
        *shared = (uint64_t)(uintptr_t)p;
        crash_at(p);
        break;
    }
    case K_ACCERR: {
        void *p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        *shared = (uint64_t)(uintptr_t)p;
        crash_at(p);
        break;
    }
    case K_BUS: {
        /* The second page of a mapping past the end of its one-page file. */
        int fd = memfd_create("check-crash-bus", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, 4096) < 0)
            _exit(97);
        char *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        *shared = (uint64_t)(uintptr_t)(p + 4096);
        crash_at(p + 4096);
        break;
    }
    case K_FPE:
        crash_fpe();
        break;
    case K_ABORT:
        abort();
    case K_CALL_DATA:
    case K_CALL_EDGE_LO:
    case K_CALL_EDGE_HI: {
        /* Three pages; the middle one readable, not executable, its last
         * 8 bytes 0x48 (the first byte of x86-64's sigreturn stub, which
         * makes libgcc's fallback read 8 bytes more). DATA calls its
         * start; EDGE_LO the byte before it (the first page unmapped:
         * the 8 bytes at pc cannot be read, those at pc + 1 can); EDGE_HI
         * its last 8 bytes (the third page unmapped: the 8 at pc can be
         * read, the 8 at pc + 1 cannot). */
        char *p = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            _exit(97);
        memset(p + 2 * 4096 - 8, 0x48, 8);
        munmap(p, 4096);
        munmap(p + 2 * 4096, 4096);
        mprotect(p + 4096, 4096, PROT_READ);
        char *target = kind == K_CALL_DATA ? p + 4096 : kind == K_CALL_EDGE_LO ? p + 4095 : p + 2 * 4096 - 8;
        *shared = (uint64_t)(uintptr_t)target;
        fn_ptr = (void (*)(void))(void *)target;
        call_through();
        break;
    }
    case K_CALL_FAKED_PROBE: {
        /* A seccomp filter that answers the handler's readability probe
         * (rt_sigprocmask with how -1) with a success it did not run, and
         * an errno left at EINVAL: the probe must still say "unreadable"
         * (it takes only a failure with EINVAL as "readable"), or the
         * unwinder would be started at a pc that faults. */
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        munmap(p, 4096);
        *shared = (uint64_t)(uintptr_t)p;
        if (pm_test_filter_call_arg(__NR_rt_sigprocmask, 0, UINT32_MAX, SECCOMP_RET_ERRNO | 0) != 0)
            _exit(96);
        fn_ptr = (void (*)(void))p;
        errno = EINVAL;
        call_through();
        break;
    }
    case K_CALL_DEEP:
        fn_ptr = NULL;
        deep_call(PM_CRASH_FRAMES + 30);
        break;
    case K_ABRT_CODE:
    case K_SYS_CODE: {
        /* A signal a process may send itself with any si_code (the
         * kernel refuses si_code >= 0 only towards another process) and
         * an si_addr: SIGABRT and SIGSYS carry no fault address. */
        siginfo_t si;
        memset(&si, 0, sizeof(si));
        si.si_signo = kind == K_ABRT_CODE ? SIGABRT : SIGSYS;
        si.si_code = 1;
        si.si_addr = (void *)(uintptr_t)0x1234;
        syscall(SYS_rt_sigqueueinfo, getpid(), si.si_signo, &si);
        break;
    }
    case K_USER: /* sent by a process: si_code SI_USER, the same for every signal */
        kill(getpid(), SIGSEGV);
        break;
    case K_KERNEL:
#if defined(__x86_64__)
        /* A non-canonical address: a general protection fault, which the
         * kernel reports as SIGSEGV with SI_KERNEL (0x80), not a per-signal
         * SEGV_ code. */
        crash_at((void *)(uintptr_t)0x8000000000000000ull);
#endif
        break;
    case K_CALL_NULL:
        fn_ptr = NULL;
        call_through();
        break;
    case K_CALL_WILD: {
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        munmap(p, 4096);
        *shared = (uint64_t)(uintptr_t)p;
        fn_ptr = (void (*)(void))p;
        call_through();
        break;
    }
    case K_OVERFLOW: {
        struct rlimit rl = {8u << 20, 8u << 20};
        struct rlimit cur;
        if (getrlimit(RLIMIT_STACK, &cur) == 0 && cur.rlim_cur > rl.rlim_cur)
            (void)setrlimit(RLIMIT_STACK, &rl);
        recurse(NULL);
        break;
    }
    default:
        break;
    }
    _exit(98); /* did not crash */
}

/* The worker writes its own record and then dies of SIGSEGV with the
 * default action, so the handler cannot overwrite it. */
static void distrust(pm_node *n, int kind)
{
    struct pm__crash_rec *r = pm_test_node_crash_record(n);
    static pm__crash_modules none;
    uint64_t frames[2] = {0x1234, 0x5678};
    switch (kind) {
    case K_SCRIBBLE:
        memset((void *)r, 0xa5, sizeof(*r));
        atomic_store(&r->seq, PM__CRASH_COMMITTED);
        r->signo = SIGSEGV;
        r->nframes = 1000;
        break;
    case K_HALF:
        pm__crash_fill(r, &none, SIGSEGV, 1, 0, 0x1234, frames, 2);
        atomic_store(&r->seq, PM__CRASH_WRITING);
        break;
    case K_MISMATCH:
        pm__crash_fill(r, &none, SIGBUS, 2, 0, 0x1234, frames, 2);
        break;
    case K_FAKE_EXIT:
        pm__crash_fill(r, &none, SIGSEGV, 1, 0, 0x1234, frames, 2);
        _exit(3);
    default:
        break;
    }
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
    _exit(98);
}

static int boot_crash(pm_node *n, void *arg)
{
    worker_init();
    int kind = (int)(intptr_t)arg;
    if (pm_node_ready(n) < 0)
        return 50;
    if (kind >= K_SCRIBBLE)
        distrust(n, kind);
    do_crash(kind);
    return 0;
}

/* What a plain child of the test (no procmesh, no handler) dies of with
 * the same crash: the status procmesh's worker must end with too. */
static int control_status(int kind)
{
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGABRT, SIG_DFL);
        /* The core limit a worker gets by default (soft 0): core_dumped is
         * compared with this child's. */
        struct rlimit rl;
        if (getrlimit(RLIMIT_CORE, &rl) == 0) {
            rl.rlim_cur = 0;
            (void)setrlimit(RLIMIT_CORE, &rl);
        }
        do_crash(kind);
    }
    int st = pm_test_reap(pid, 30000);
    ck_assert_msg(st != -1, "the control child of kind %d did not end", kind);
    return st;
}

static pm_crash_report report;
static pm_slot_info info;
/* Where the worker said it would fault (read before the control child
 * overwrites the shared page). */
static uint64_t where;

/* Runs one fork-mode worker that crashes by kind, until its exit is
 * handled; leaves its slot's report in `report` and info in `info`. */
static void run_crash(int kind)
{
    shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne((void *)shared, MAP_FAILED);
    pm_options *o = opts(1);
    pm_options_set_restart_policy(o, PM_RESTART_NEVER);
    pm_options_set_bootstrap(o, boot_crash, (void *)(intptr_t)kind);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, count(PM_EVENT_EXITED, 0) == 1, 30000);
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &info), 0);
    report = info.last_crash;
    where = *shared;
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    assert_all_started_gone();
    pm_options_free(o);
}

/* A real crash: recorded, with the signal and exit status of the control. */
static void expect_recorded(int kind, int sig, const char *code)
{
    run_crash(kind);
    ck_assert_msg(report.state == PM_CRASH_RECORDED, "kind %d: state %d, not recorded", kind,
                  report.state);
    ck_assert_int_eq(report.signal, sig);
    ck_assert_uint_eq(report.incarnation, 1);
    ck_assert_str_eq(report.code_name, code);
    ck_assert_uint_ge(report.nframes, 1);
    ck_assert_uint_le(report.nframes, PM_CRASH_FRAMES);
    /* The exit itself is what it would have been without the handler. */
    ck_assert_int_eq(info.last_signal, sig);
    ck_assert_int_eq(info.last_exit_code, -1);
    int st = control_status(kind);
    ck_assert(WIFSIGNALED(st));
    ck_assert_int_eq(WTERMSIG(st), sig);
    ck_assert_int_eq(report.core_dumped, WCOREDUMP(st) ? 1 : 0);
}

/* The path of the test binary, as the worker's module table names it. */
static void self_path(char *buf, size_t size)
{
    ssize_t k = readlink("/proc/self/exe", buf, size - 1);
    ck_assert_int_gt(k, 0);
    buf[k] = '\0';
}

/* 1 when some frame is in the test binary. */
static int has_frame_in_self(void)
{
    char self[PM_CRASH_PATH_MAX];
    self_path(self, sizeof(self));
    for (unsigned i = 0; i < report.nframes; i++) {
        int m = report.frames[i].module;
        if (m >= 0 && strcmp(report.modules[m], self) == 0)
            return 1;
    }
    return 0;
}

START_TEST(test_segv_null)
{
    expect_recorded(K_NULL, SIGSEGV, "SEGV_MAPERR");
    ck_assert_uint_eq(report.fault_addr, 0);
#if defined(__x86_64__) || defined(__aarch64__)
    /* The first frame is the faulting instruction, in the test binary. */
    ck_assert_uint_ne(report.pc, 0);
    ck_assert_uint_eq(report.frames[0].addr, report.pc);
    ck_assert_int_ge(report.pc_module, 0);
    char self[PM_CRASH_PATH_MAX];
    self_path(self, sizeof(self));
    ck_assert_str_eq(report.modules[report.pc_module], self);
    /* module+offset symbolises offline. */
    if (system("command -v addr2line >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_segv_null: addr2line not found, symbolisation not checked\n");
        return;
    }
    char cmd[PM_CRASH_PATH_MAX + 64], line[256] = "";
    snprintf(cmd, sizeof(cmd), "addr2line -f -e '%s' 0x%llx", report.modules[report.pc_module],
             (unsigned long long)report.pc_offset);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
    pclose(f);
    ck_assert_msg(strncmp(line, "crash_null", 10) == 0, "addr2line says '%s' for %s", line, cmd);
#endif
}
END_TEST

/* addr2line's function name for offset off of module m of the report,
 * or "" when addr2line is absent. */
static void symbol(int m, uint64_t off, char *line, size_t size)
{
    line[0] = '\0';
    if (system("command -v addr2line >/dev/null 2>&1") != 0)
        return;
    char cmd[PM_CRASH_PATH_MAX + 64];
    snprintf(cmd, sizeof(cmd), "addr2line -f -e '%s' 0x%llx", report.modules[m],
             (unsigned long long)off);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(line, (int)size, f));
    pclose(f);
}

/* A call to an address that is not code (0, or `where` for K_CALL_WILD):
 * frames[0] is that address, frames[1] the return address into
 * call_through, in the test binary; more follow (do_crash, boot_crash ...)
 * where the unwinder goes on from the caller. */
static void expect_called_from(int kind)
{
    expect_recorded(kind, SIGSEGV, kind == K_CALL_DATA || kind == K_CALL_EDGE_HI ? "SEGV_ACCERR" : "SEGV_MAPERR");
    uint64_t target = kind == K_CALL_NULL ? 0 : where;
    ck_assert_uint_eq(report.fault_addr, target);
#if defined(__x86_64__) || defined(__aarch64__)
    ck_assert_uint_eq(report.pc, target);
    ck_assert_int_eq(report.pc_module, -1);
    ck_assert_uint_ge(report.nframes, 2);
    ck_assert_uint_eq(report.frames[0].addr, target);
    ck_assert_int_eq(report.frames[0].module, -1);
    int m = report.frames[1].module;
    ck_assert_int_ge(m, 0);
    char self[PM_CRASH_PATH_MAX];
    self_path(self, sizeof(self));
    ck_assert_str_eq(report.modules[m], self);
    /* A return address: the call instruction is the byte before it. */
    char line[256];
    symbol(m, report.frames[1].offset - 1, line, sizeof(line));
    if (line[0] == '\0') {
        fprintf(stderr, "expect_called_from: addr2line not found, symbolisation not checked\n");
        return;
    }
    ck_assert_msg(strncmp(line, "call_through", 12) == 0, "frame 1 is '%s', not call_through",
                  line);
    /* The unwinder went on from the caller: do_crash, which called
     * call_through, is the next frame (not the caller again). */
    ck_assert_uint_ge(report.nframes, 3);
    ck_assert_int_ge(report.frames[2].module, 0);
    symbol(report.frames[2].module, report.frames[2].offset - 1, line, sizeof(line));
    ck_assert_msg(strncmp(line, "do_crash", 8) == 0, "frame 2 is '%s', not do_crash", line);
    int below = 0;
    for (unsigned i = 2; i < report.nframes; i++) {
        m = report.frames[i].module;
        if (m < 0)
            continue;
        symbol(m, report.frames[i].offset - 1, line, sizeof(line));
        below |= strncmp(line, "do_crash", 8) == 0;
    }
    ck_assert_msg(below, "no frame below call_through is do_crash (%u frames)", report.nframes);
#endif
}

START_TEST(test_call_null)
{
    expect_called_from(K_CALL_NULL);
}
END_TEST

/* A call into a readable page that is not code: the unwinder stops at
 * the pc (no unwind information there), which it did not get past, so the
 * frames come from the context as for a wild call. And the two edges of
 * the unwinder's read at the pc (9 bytes): a pc one byte below a readable
 * page, and one 8 bytes before the end of one; either way the unwinder is
 * not started at the pc, whose read would fault inside the handler and
 * leave the record half-written. */
START_TEST(test_call_data)
{
    expect_called_from(K_CALL_DATA);
    expect_called_from(K_CALL_EDGE_LO);
    expect_called_from(K_CALL_EDGE_HI);
}
END_TEST

/* A fault address only for a fault: a SIGABRT or SIGSYS the worker sent
 * itself with a positive si_code and an si_addr, and a SIGSEGV a process
 * sent, record none. */
START_TEST(test_no_fault_addr)
{
    expect_recorded(K_ABRT_CODE, SIGABRT, "1");
    ck_assert_uint_eq(report.fault_addr, 0);
    expect_recorded(K_SYS_CODE, SIGSYS, "SYS_SECCOMP");
    ck_assert_uint_eq(report.fault_addr, 0);
    expect_recorded(K_USER, SIGSEGV, "SI_USER");
    ck_assert_uint_eq(report.fault_addr, 0);
}
END_TEST

/* The same under a stack deeper than the frames kept: the unwinder's
 * frames from the caller on fill the record, none read past what it gave. */
START_TEST(test_call_deep)
{
    expect_recorded(K_CALL_DEEP, SIGSEGV, "SEGV_MAPERR");
    ck_assert_uint_eq(report.pc, 0);
    ck_assert_uint_eq(report.frames[0].addr, 0);
    ck_assert_int_ge(report.frames[1].module, 0);
    ck_assert_uint_eq(report.nframes, PM_CRASH_FRAMES);
}
END_TEST

/* A wild call where the readability probe's system call is faked to
 * succeed (do_crash above): every probe says "unreadable", so on x86-64
 * the record holds the pc alone (the caller's address is read from the
 * stack only where the probe vouches for it), and the handler reads
 * nothing through the unwinder. */
START_TEST(test_call_probe_faked)
{
    expect_recorded(K_CALL_FAKED_PROBE, SIGSEGV, "SEGV_MAPERR");
#if defined(__x86_64__)
    ck_assert_uint_eq(report.nframes, 1);
    ck_assert_uint_eq(report.frames[0].addr, where);
#elif defined(__aarch64__)
    /* The caller is in the link register there, read without a probe. */
    ck_assert_uint_le(report.nframes, 2);
    ck_assert_uint_eq(report.frames[0].addr, where);
#endif
}
END_TEST

/* An exec'd worker of mode that ends by abort() with its node closed:
 * it ends of SIGABRT, as it would without procmesh, and nothing is
 * recorded. */
static void expect_abort_unrecorded(const char *mode)
{
    pm_options *o = opts(1);
    exec_opts(o, mode, NULL);
    pm_options_set_restart_policy(o, PM_RESTART_NEVER);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, count(PM_EVENT_EXITED, 0) + count(PM_EVENT_STOPPED, 0) >= 1, 30000);
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &info), 0);
    ck_assert_msg(info.last_signal == SIGABRT, "%s: ended with signal %d, exit %d", mode, info.last_signal,
                  info.last_exit_code);
    ck_assert_int_eq(info.last_crash.state, PM_CRASH_UNRECORDED);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    assert_all_started_gone();
    pm_options_free(o);
}

START_TEST(test_exec_child_crash_not_recorded)
{
    /* A child the worker forked dies of SIGSEGV: it inherited the handler
     * and the mapping of the record, and writes nothing into it; the
     * worker then aborts with its node closed: nothing recorded (a record
     * the child wrote would read INVALID: SIGSEGV, not the worker's
     * SIGABRT). */
    expect_abort_unrecorded("child-crash-abort");
}
END_TEST

START_TEST(test_call_wild)
{
    expect_called_from(K_CALL_WILD);
}
END_TEST

START_TEST(test_segv_wild)
{
    expect_recorded(K_WILD, SIGSEGV, "SEGV_MAPERR");
    ck_assert_uint_eq(report.fault_addr, where);
    ck_assert(has_frame_in_self());
}
END_TEST

START_TEST(test_segv_accerr)
{
    expect_recorded(K_ACCERR, SIGSEGV, "SEGV_ACCERR");
    ck_assert_uint_eq(report.fault_addr, where);
}
END_TEST

START_TEST(test_sigbus)
{
    expect_recorded(K_BUS, SIGBUS, "BUS_ADRERR");
    ck_assert_uint_eq(report.fault_addr, where);
    ck_assert(has_frame_in_self());
}
END_TEST

START_TEST(test_sigfpe)
{
    expect_recorded(K_FPE, SIGFPE, "FPE_INTDIV");
    ck_assert_uint_ne(report.fault_addr, 0); /* the dividing instruction */
    ck_assert(has_frame_in_self());
}
END_TEST

START_TEST(test_abort)
{
    expect_recorded(K_ABORT, SIGABRT, "SI_TKILL");
    ck_assert_uint_eq(report.fault_addr, 0);
    /* abort() is called from the test binary: the frames reach it. */
    ck_assert(has_frame_in_self());
}
END_TEST

/* si_code values that mean the same for every signal: a SIGSEGV a process
 * sent (SI_USER, 0) and one the kernel raised for a general protection
 * fault (SI_KERNEL, 0x80) are named as such, not looked up among SIGSEGV's
 * own codes (where 0 and 0x80 name nothing). */
START_TEST(test_generic_codes)
{
    expect_recorded(K_USER, SIGSEGV, "SI_USER");
#if defined(__x86_64__)
    expect_recorded(K_KERNEL, SIGSEGV, "SI_KERNEL");
#endif
    ck_assert_ptr_null(pm__crash_code_name(SIGSEGV, 0x7f));
    ck_assert_ptr_null(pm__crash_code_name(SIGSEGV, 0x81));
}
END_TEST

START_TEST(test_stack_overflow)
{
    /* Only an alternate stack leaves room for the handler here. */
    run_crash(K_OVERFLOW);
    ck_assert_msg(report.state == PM_CRASH_RECORDED, "state %d, not recorded", report.state);
    ck_assert_int_eq(report.signal, SIGSEGV);
    ck_assert(strcmp(report.code_name, "SEGV_MAPERR") == 0 ||
              strcmp(report.code_name, "SEGV_ACCERR") == 0);
    ck_assert(has_frame_in_self());
    int st = control_status(K_OVERFLOW);
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    ck_assert_int_eq(report.core_dumped, WCOREDUMP(st) ? 1 : 0);
}
END_TEST

static void expect_state(int kind, int state)
{
    run_crash(kind);
    ck_assert_msg(report.state == state, "kind %d: state %d, expected %d", kind, report.state,
                  state);
    if (state != PM_CRASH_NONE) {
        ck_assert_int_eq(report.signal, SIGSEGV);
        /* Nothing of a distrusted record is shown. */
        ck_assert_uint_eq(report.nframes, 0);
        ck_assert_uint_eq(report.nmodules, 0);
        ck_assert_uint_eq(report.pc, 0);
        ck_assert_str_eq(report.code_name, "");
    }
}

START_TEST(test_scribbled_record)
{
    expect_state(K_SCRIBBLE, PM_CRASH_INVALID);
    expect_state(K_HALF, PM_CRASH_INVALID);
    expect_state(K_MISMATCH, PM_CRASH_INVALID);
    expect_state(K_NO_HANDLER, PM_CRASH_UNRECORDED);
    /* A record but a clean exit status: no crash at all. */
    expect_state(K_FAKE_EXIT, PM_CRASH_NONE);
    ck_assert_int_eq(info.last_exit_code, 3);
}
END_TEST

/* The decoder alone, on records built by hand. */
START_TEST(test_decode)
{
    static pm__crash_modules t;
    static struct pm__crash_rec r, bad;
    static pm_crash_report out;
    t.n = 2;
    t.m[0] = (pm__crash_module){0x1000, 0x2000, 0x1000, "/bin/a"};
    t.m[1] = (pm__crash_module){0x5000, 0x6000, 0x0, "/lib/b.so"};
    /* Two handler frames before the pc are dropped. */
    uint64_t frames[] = {0x9999, 0x8888, 0x1010, 0x5050, 0x1020, 0x7777};
    pm__crash_fill(&r, &t, SIGSEGV, 1, 0x42, 0x1010, frames, 6);
    ck_assert_int_eq(pm__crash_decode(&r, SIGSEGV, &out), PM_CRASH_RECORDED);
    ck_assert_str_eq(out.code_name, "SEGV_MAPERR");
    ck_assert_uint_eq(out.nframes, 4);
    ck_assert_uint_eq(out.nmodules, 2);
    ck_assert_str_eq(out.modules[0], "/bin/a");
    ck_assert_int_eq(out.frames[0].module, 0);
    ck_assert_uint_eq(out.frames[0].offset, 0x10);
    ck_assert_int_eq(out.frames[1].module, 1);
    ck_assert_uint_eq(out.frames[1].offset, 0x5050);
    ck_assert_int_eq(out.frames[3].module, -1);
    ck_assert_uint_eq(out.pc_offset, 0x10);
    /* Unknown codes are shown as numbers. */
    pm__crash_fill(&r, &t, SIGSEGV, 77, 0, 0, frames, 0);
    memset(&out, 0, sizeof(out));
    ck_assert_int_eq(pm__crash_decode(&r, SIGSEGV, &out), PM_CRASH_RECORDED);
    ck_assert_str_eq(out.code_name, "77");
    ck_assert_str_eq(pm__crash_code_name(SIGABRT, -6), "SI_TKILL");
    ck_assert_str_eq(pm__crash_code_name(SIGBUS, 2), "BUS_ADRERR");
    ck_assert_ptr_null(pm__crash_code_name(SIGABRT, 2));
    /* Everything the decoder refuses. */
    pm__crash_fill(&r, &t, SIGSEGV, 1, 0x42, 0x1010, frames, 6);
    memset(&bad, 0, sizeof(bad));
    ck_assert_int_eq(pm__crash_decode(&bad, SIGSEGV, &out), PM_CRASH_UNRECORDED);
    ck_assert_int_eq(pm__crash_decode(&r, SIGBUS, &out), PM_CRASH_INVALID);
    bad = r;
    atomic_store(&bad.seq, PM__CRASH_WRITING);
    ck_assert_int_eq(pm__crash_decode(&bad, SIGSEGV, &out), PM_CRASH_INVALID);
    bad = r;
    bad.nframes = PM_CRASH_FRAMES + 1;
    ck_assert_int_eq(pm__crash_decode(&bad, SIGSEGV, &out), PM_CRASH_INVALID);
    bad = r;
    bad.nmodules = PM_CRASH_MODULES + 1;
    ck_assert_int_eq(pm__crash_decode(&bad, SIGSEGV, &out), PM_CRASH_INVALID);
    bad = r;
    bad.frame_module[1] = 2;
    ck_assert_int_eq(pm__crash_decode(&bad, SIGSEGV, &out), PM_CRASH_INVALID);
    bad = r;
    bad.pc_module = 7;
    ck_assert_int_eq(pm__crash_decode(&bad, SIGSEGV, &out), PM_CRASH_INVALID);
    bad = r;
    bad.frames[0] = 0x10; /* below its module's bias */
    ck_assert_int_eq(pm__crash_decode(&bad, SIGSEGV, &out), PM_CRASH_INVALID);
    bad = r;
    memset(bad.modules[1].path, 'x', PM_CRASH_PATH_MAX); /* no NUL */
    ck_assert_int_eq(pm__crash_decode(&bad, SIGSEGV, &out), PM_CRASH_INVALID);
    /* A path with quotes and control characters is shown harmless. */
    bad = r;
    memcpy(bad.modules[0].path, "/a\"b\n\\c", 8);
    ck_assert_int_eq(pm__crash_decode(&bad, SIGSEGV, &out), PM_CRASH_RECORDED);
    ck_assert_str_eq(out.modules[0], "/a?b??c");
}
END_TEST

/* ---------------------------------------------------------------- exec mode and the daemon */

/* Reads fd until needle appears (or EOF, or timeout_ms). */
static int read_until(int fd, char *buf, size_t size, size_t *len, const char *needle,
                      int timeout_ms)
{
    uint64_t end = pm_test_ms() + (uint64_t)timeout_ms;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    while (strstr(buf, needle) == NULL && pm_test_ms() < end && *len + 1 < size) {
        if (poll(&pfd, 1, 100) != 1)
            continue;
        ssize_t k = read(fd, buf + *len, size - 1 - *len);
        if (k <= 0)
            break;
        *len += (size_t)k;
        buf[*len] = '\0';
    }
    return strstr(buf, needle) != NULL;
}

START_TEST(test_daemon_log_line)
{
    /* An exec-mode worker that joined: recorded too; the daemon logs it. */
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(p[1], STDERR_FILENO);
        char *argv[] = {"procmesh", "run", "--workers", "1", "--restart", "never", "--",
                        PM_TEST_WORKER, "segv", NULL};
        execv(PM_DAEMON_BIN, argv);
        _exit(127);
    }
    close(p[1]);
    static char log[64 * 1024];
    size_t len = 0;
    log[0] = '\0';
    int got = read_until(p[0], log, sizeof(log), &len, "crash_modules", 30000);
    close(p[0]);
    pm_test_reap(pid, 30000);
    ck_assert_msg(got, "waited for the crash_modules line; log:\n%s", log);
    const char *line = strstr(log, "exited");
    ck_assert_msg(line != NULL, "no exited line:\n%s", log);
    ck_assert_msg(strstr(line, "signal=SIGSEGV") != NULL, "%s", log);
    ck_assert_msg(strstr(line, "code=SI_TKILL") != NULL, "%s", log);
    ck_assert_msg(strstr(line, "fault_addr=0x0") != NULL, "%s", log);
    ck_assert_msg(strstr(line, "frames=\"") != NULL, "%s", log);
    ck_assert_msg(strstr(line, "pm-test-worker+0x") != NULL, "%s", log);
    const char *mods = strstr(log, "crash_modules");
    ck_assert_msg(strstr(mods, "/pm-test-worker") != NULL || strstr(mods, "/lt-pm-test-worker") != NULL,
                  "the modules name the worker's path:\n%s", log);
}
END_TEST

/* An exec'd worker that crashes before ready, its unwinder not loaded yet
 * (it is loaded after ready, os/crash.h): still recorded, with the
 * faulting pc as its one frame, placed in the worker's binary. Incarnation
 * 1 crashes after ready (a full backtrace), 2 before it. */
START_TEST(test_exec_crash_before_ready)
{
    pm_options *o = opts(1);
    exec_opts(o, "segv-unready", NULL);
    pm_options_set_max_restarts(o, 1);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, count(PM_EVENT_EXITED, 0) == 2, 30000);
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &info), 0);
    report = info.last_crash;
    ck_assert_msg(report.state == PM_CRASH_RECORDED, "state %d, not recorded", report.state);
    ck_assert_uint_eq(report.incarnation, 2);
    ck_assert_int_eq(report.signal, SIGSEGV);
    ck_assert_uint_eq(report.fault_addr, 0x40);
    ck_assert_uint_eq(report.nframes, 1);
    ck_assert_uint_eq(report.frames[0].addr, report.pc);
    ck_assert_int_ge(report.pc_module, 0);
    ck_assert_msg(strstr(report.modules[report.pc_module], "pm-test-worker") != NULL,
                  "the pc is in %s", report.modules[report.pc_module]);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    assert_all_started_gone();
    pm_options_free(o);
}
END_TEST

/* The application's own handler for a crash signal, installed in the
 * supervisor before the spawn: a fork-mode worker inherits it. */
static void app_trap(int sig)
{
    (void)sig;
}

/* The application's own alternate stack, set in the supervisor before
 * the spawn: a fork-mode worker inherits it, and procmesh's is not put in
 * its place (node_crash.c use_stack). */
static char app_stack[64 * 1024];

/* 0 when the worker's dispositions are what pm__node_crash_arm_forked
 * promises: the application's SIGTRAP handler kept, procmesh's on SIGSEGV
 * (SA_SIGINFO, on the alternate stack, reset when it runs, blocking no
 * other signal), and the application's alternate stack kept. */
static int boot_check_handlers(pm_node *n, void *arg)
{
    (void)arg;
    worker_init();
    struct sigaction trap, segv;
    stack_t ss;
    if (sigaction(SIGTRAP, NULL, &trap) < 0 || sigaction(SIGSEGV, NULL, &segv) < 0 ||
        sigaltstack(NULL, &ss) < 0)
        return 60;
    if ((trap.sa_flags & SA_SIGINFO) != 0 || trap.sa_handler != app_trap)
        return 61;
    if ((segv.sa_flags & (SA_SIGINFO | SA_ONSTACK | SA_RESETHAND)) !=
        (SA_SIGINFO | SA_ONSTACK | SA_RESETHAND))
        return 62;
    if ((ss.ss_flags & SS_DISABLE) != 0 || ss.ss_sp != app_stack)
        return 63;
    if (!sigisemptyset(&segv.sa_mask))
        return 64;
    /* Every crash signal but the application's SIGTRAP has a handler of
     * SA_SIGINFO kind: ours (or, under a sanitizer, the sanitizer's, kept
     * as an application's would be), none left at SIG_DFL. */
    static const int crash_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGSYS};
    for (size_t i = 0; i < PM__ARRAY_SIZE(crash_sigs); i++) {
        struct sigaction a;
        if (sigaction(crash_sigs[i], NULL, &a) < 0 || (a.sa_flags & SA_SIGINFO) == 0)
            return 65;
    }
    if (pm_node_ready(n) < 0)
        return 50;
    return 0;
}

/* Runs slot 0 of o, once (no restart), until its worker ends: the worker's
 * own check must have exited 0; nothing is left behind. Frees o. */
static void run_worker_check(pm_options *o)
{
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, count(PM_EVENT_EXITED, 0) + count(PM_EVENT_STOPPED, 0) >= 1, 30000);
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &info), 0);
    ck_assert_msg(info.last_exit_code == 0, "the worker's check exited %d (signal %d)",
                  info.last_exit_code, info.last_signal);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    assert_all_started_gone();
    pm_options_free(o);
}

START_TEST(test_fork_keeps_app_handler)
{
    /* The fork child sets each crash handler with one call and puts back
     * the one it replaced when that was the application's; the
     * application's alternate stack stays its own. */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = app_trap;
    sigemptyset(&sa.sa_mask);
    ck_assert_int_eq(sigaction(SIGTRAP, &sa, NULL), 0);
    stack_t ss = {.ss_sp = app_stack, .ss_size = sizeof(app_stack), .ss_flags = 0};
    ck_assert_int_eq(sigaltstack(&ss, NULL), 0);
    pm_options *o = opts(1);
    pm_options_set_restart_policy(o, PM_RESTART_NEVER);
    pm_options_set_bootstrap(o, boot_check_handlers, NULL);
    run_worker_check(o);
}
END_TEST

/* The loader's module walks of this process: dl_iterate_phdr interposed
 * (procmesh is linked in statically here, so its calls come to this one;
 * the sanitizer runtime's own interceptor, if any, is the next). The
 * count a fork child starts with, kept by an atfork handler that runs
 * before any of procmesh's code in the child. */
static atomic_int walks;
static int walks_at_fork = -1;

extern char __executable_start[], etext[]; /* this program's text (GNU ld) */

int dl_iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
{
    static int (*next)(int (*)(struct dl_phdr_info *, size_t, void *), void *);
    if (next == NULL)
        *(void **)&next = dlsym(RTLD_NEXT, "dl_iterate_phdr");
    /* Only procmesh's walks (linked into this program): the sanitizer
     * runtime's or libgcc's, which this definition catches too, are not
     * what the test is about. */
    const char *from = __builtin_return_address(0);
    if (from >= __executable_start && from < etext)
        atomic_fetch_add(&walks, 1);
    return next(cb, data);
}

static void walks_in_child(void)
{
    walks_at_fork = atomic_load(&walks);
}

static int boot_no_walk(pm_node *n, void *arg)
{
    (void)arg;
    int walked = walks_at_fork < 0 || atomic_load(&walks) != walks_at_fork;
    if (pm_node_ready(n) < 0)
        return 50;
    return walked ? 9 : 0;
}

START_TEST(test_fork_child_walks_nothing)
{
    /* node_crash.h: a fork child of a primed supervisor neither walks the
     * loaded modules nor maps; its supervisor walked for it before the
     * fork. Exit 9 from the worker: it walked. */
    ck_assert_int_eq(pthread_atfork(NULL, NULL, walks_in_child), 0);
    int before = atomic_load(&walks);
    pm_options *o = opts(1);
    pm_options_set_restart_policy(o, PM_RESTART_NEVER);
    pm_options_set_bootstrap(o, boot_no_walk, NULL);
    run_worker_check(o);
    ck_assert_int_gt(atomic_load(&walks), before); /* the supervisor's own */
}
END_TEST

/* An exec'd worker of mode that checks its handlers itself, once, and
 * exits 0 when they are right (run_worker_check). */
static void exec_worker_check(const char *mode)
{
    pm_options *o = opts(1);
    exec_opts(o, mode, NULL);
    pm_options_set_restart_policy(o, PM_RESTART_NEVER);
    run_worker_check(o);
}

START_TEST(test_exec_keeps_app_handler)
{
    /* An exec'd worker of one thread: each crash handler set with one
     * call, the crash signals blocked meanwhile, the application's
     * handler (SIGTRAP) and ignored signal (SIGBUS) put back, the mask as
     * it was (pm-test-worker "handlers" checks and exits 0). */
    exec_worker_check("handlers");
}
END_TEST

START_TEST(test_exec_threaded_keeps_app_handler)
{
    /* The same in an exec'd worker that started a thread before it
     * joined: the handlers go in only where the disposition is the
     * default, looked at one by one (pm-test-worker "handlers-threaded"). */
    exec_worker_check("handlers-threaded");
}
END_TEST

/* The helper of test_exec_threaded_no_window: takes the listener and the
 * pipe from the worker (sock), then for each rt_sigaction of SIGTRAP the
 * worker's main thread makes, before it runs: SIGTRAP to the worker's
 * second thread, and the call goes on once that thread said its handler
 * ran (or the worker died). Exits 0 after at least one. */
static int window_helper(int sock)
{
    pid_t tid = 0;
    int fds[2] = {-1, -1};
    char cbuf[CMSG_SPACE(sizeof(fds))];
    struct iovec iov = {&tid, sizeof(tid)};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    struct pollfd in = {.fd = sock, .events = POLLIN};
    if (poll(&in, 1, 30000) != 1 || recvmsg(sock, &m, 0) != (ssize_t)sizeof(tid))
        return 2;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    if (cm == NULL || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(sizeof(fds)))
        return 3;
    memcpy(fds, CMSG_DATA(cm), sizeof(fds));
    struct seccomp_notif_sizes sz;
    if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sz) != 0)
        return 4;
    struct seccomp_notif *req = calloc(1, sz.seccomp_notif > sizeof(*req) ? sz.seccomp_notif : sizeof(*req));
    struct seccomp_notif_resp *resp =
        calloc(1, sz.seccomp_notif_resp > sizeof(*resp) ? sz.seccomp_notif_resp : sizeof(*resp));
    int seen = 0;
    for (;;) {
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        if (poll(&p, 1, 30000) != 1 || (p.revents & POLLIN) == 0)
            break; /* every thread of the filter gone (POLLHUP), or a stall */
        memset(req, 0, sz.seccomp_notif);
        if (ioctl(fds[0], SECCOMP_IOCTL_NOTIF_RECV, req) != 0)
            continue; /* the caller went away meanwhile */
        seen++;
        (void)syscall(SYS_tgkill, req->pid, tid, SIGTRAP);
        struct pollfd t = {.fd = fds[1], .events = POLLIN};
        char x;
        if (poll(&t, 1, 10000) == 1)
            (void)read(fds[1], &x, 1); /* its handler ran, or EOF: the worker died */
        memset(resp, 0, sz.seccomp_notif_resp);
        resp->id = req->id;
        resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        (void)ioctl(fds[0], SECCOMP_IOCTL_NOTIF_SEND, resp);
    }
    return seen > 0 ? 0 : 5;
}

START_TEST(test_exec_threaded_no_window)
{
    /* An exec'd worker with a second thread: at every look at SIGTRAP's
     * disposition the join makes, that thread gets a SIGTRAP, and the
     * application's handler runs it every time. Had the join put its own
     * handler in first and the application's back after (the one-call
     * swap, right only with one thread), the second thread would meet
     * procmesh's handler in between and the worker would end with SIGTRAP. */
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    pid_t helper = pm_test_fork();
    ck_assert_int_ge(helper, 0);
    if (helper == 0) {
        close(sv[1]);
        _exit(window_helper(sv[0]));
    }
    close(sv[0]);
    pm_options *o = opts(1);
    exec_opts(o, "handlers-window", NULL);
    ck_assert_int_eq(pm_options_set_pass_fds(o, &sv[1], 1), 0);
    pm_options_set_restart_policy(o, PM_RESTART_NEVER);
    run_worker_check(o);
    close(sv[1]);
    int st = pm_test_reap(helper, 30000);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the helper: status %#x", st);
}
END_TEST

START_TEST(test_exec_closed_records_nothing)
{
    /* A worker that closed its node (the handler stays installed, its
     * record gone) and then aborts. */
    expect_abort_unrecorded("close-abort");
}
END_TEST

/* A library not loaded yet that can be: NULL when none of a few is. */
static void *load_new_library(const char **name)
{
    static const char *const candidates[] = {"libz.so.1", "libutil.so.1", "libanl.so.1",
                                             "libcrypt.so.1", "libresolv.so.2"};
    for (size_t i = 0; i < PM__ARRAY_SIZE(candidates); i++) {
        void *h = dlopen(candidates[i], RTLD_NOW | RTLD_NOLOAD);
        if (h != NULL) {
            dlclose(h);
            continue;
        }
        if ((h = dlopen(candidates[i], RTLD_NOW)) != NULL) {
            *name = candidates[i];
            return h;
        }
    }
    return NULL;
}

static int table_names(const pm__crash_modules *t, const char *name)
{
    for (unsigned i = 0; i < t->n; i++)
        if (strstr(t->m[i].path, name) != NULL)
            return 1;
    return 0;
}

START_TEST(test_modules_refresh)
{
    /* The supervisor refreshes the table before each fork: a walk only when
     * a library was loaded or unloaded since (the sentinel below survives
     * a refresh with no change), and then the new one is in it. */
    static pm__crash_modules t;
    pm__crash_modules_load(&t);
    ck_assert_uint_gt(t.n, 0);
    uint64_t lo0 = t.m[0].lo;
    t.m[0].lo = 1;
    pm__crash_modules_refresh(&t);
    ck_assert_msg(t.m[0].lo == 1, "a refresh with no library change walked the modules again");
    t.m[0].lo = lo0;
    const char *name = NULL;
    void *h = load_new_library(&name);
    if (h == NULL) {
        fprintf(stderr, "test_modules_refresh: no library left to load, the reload not checked\n");
        return;
    }
    ck_assert(!table_names(&t, name));
    pm__crash_modules_refresh(&t);
    ck_assert_msg(table_names(&t, name), "%s loaded, not in the refreshed table", name);
    dlclose(h);
}
END_TEST

/* ---------------------------------------------------------------- the record, row by row */

/* A table of n modules, module i spanning [0x10000 (i + 1), + 0x1000) with
 * bias 0x10000 (i + 1) - 0x100 and path "/m<i>". */
static void table_of(pm__crash_modules *t, unsigned n)
{
    memset(t, 0, sizeof(*t));
    t->n = n;
    for (unsigned i = 0; i < n; i++) {
        uint64_t lo = 0x10000u * (i + 1);
        t->m[i] = (pm__crash_module){lo, lo + 0x1000, lo - 0x100, ""};
        snprintf(t->m[i].path, sizeof(t->m[i].path), "/m%u", i);
    }
}

/* The decoder at its bounds and with junk where a record has no entries:
 * every array entry past nframes and nmodules is ignored (a worker's
 * record is read only up to its counts), the counts are refused one past
 * their maximum and at any size, a frame at its module's bias is offset 0,
 * the si_code is copied, and a module path keeps printable ASCII only. */
START_TEST(test_decode_rows)
{
    static pm__crash_modules t;
    static struct pm__crash_rec r, bad;
    static pm_crash_report out;
    uint64_t frames[PM_CRASH_FRAMES + 8];
    table_of(&t, PM_CRASH_MODULES + 1);
    for (unsigned i = 0; i < PM__ARRAY_SIZE(frames); i++)
        frames[i] = 0x10000u * (i % (PM_CRASH_MODULES + 1) + 1) + 8 * i;
    pm__crash_fill(&r, &t, SIGSEGV, 2, 0x42, frames[0], frames, PM__ARRAY_SIZE(frames));
    /* Full: every frame and every module the record can hold. */
    ck_assert_uint_eq(r.nframes, PM_CRASH_FRAMES);
    ck_assert_uint_eq(r.nmodules, PM_CRASH_MODULES);
    memset(&out, 0, sizeof(out));
    ck_assert_int_eq(pm__crash_decode(&r, SIGSEGV, &out), PM_CRASH_RECORDED);
    ck_assert_int_eq(out.code, 2);
    ck_assert_str_eq(out.code_name, "SEGV_ACCERR");
    ck_assert_uint_eq(out.nframes, PM_CRASH_FRAMES);
    ck_assert_uint_eq(out.nmodules, PM_CRASH_MODULES);
    ck_assert_str_eq(out.modules[PM_CRASH_MODULES - 1], "/m7");
    /* Counts past the maximum, by one and by far: refused before any read. */
    static const uint32_t over_frames[] = {PM_CRASH_FRAMES + 1, UINT32_MAX / 2, UINT32_MAX};
    for (size_t i = 0; i < PM__ARRAY_SIZE(over_frames); i++) {
        bad = r;
        bad.nframes = over_frames[i];
        ck_assert_int_eq(pm__crash_decode(&bad, SIGSEGV, &out), PM_CRASH_INVALID);
        bad = r;
        bad.nmodules = over_frames[i] - PM_CRASH_FRAMES + PM_CRASH_MODULES;
        ck_assert_int_eq(pm__crash_decode(&bad, SIGSEGV, &out), PM_CRASH_INVALID);
    }
    /* Two modules, three frames, junk in every entry past them: recorded,
     * and nothing of the junk reaches the report. */
    table_of(&t, 2);
    uint64_t few[] = {0x10010, 0x20020, 0x10030, 0x99999};
    pm__crash_fill(&r, &t, SIGSEGV, 1, 0, few[0], few, 3);
    ck_assert_uint_eq(r.nframes, 3);
    ck_assert_uint_eq(r.nmodules, 2);
    r.frames[2] = r.modules[0].bias; /* the decoder judges an address by its bias only */
    for (unsigned i = 3; i < PM_CRASH_FRAMES; i++) {
        r.frames[i] = 1;
        r.frame_module[i] = 5; /* no such module: a frame of it would be refused */
    }
    for (unsigned j = 2; j < PM_CRASH_MODULES; j++) {
        memset(r.modules[j].path, 'x', PM_CRASH_PATH_MAX); /* no NUL */
        r.modules[j].bias = UINT64_MAX;
    }
    memset(&out, 0, sizeof(out));
    ck_assert_int_eq(pm__crash_decode(&r, SIGSEGV, &out), PM_CRASH_RECORDED);
    ck_assert_uint_eq(out.nframes, 3);
    ck_assert_uint_eq(out.frames[3].addr, 0);
    ck_assert_uint_eq(out.nmodules, 2);
    ck_assert_str_eq(out.modules[2], "");
    /* The third frame sits at its module's bias: offset 0, not refused. */
    ck_assert_int_eq(out.frames[2].module, 0);
    ck_assert_uint_eq(out.frames[2].offset, 0);
    bad = r;
    bad.frames[2] = r.modules[0].bias - 1; /* one below: refused */
    ck_assert_int_eq(pm__crash_decode(&bad, SIGSEGV, &out), PM_CRASH_INVALID);
    /* Printable ASCII only: 0x1f, DEL and bytes above 0x7f become '?'. */
    bad = r;
    memcpy(bad.modules[1].path, "\x1f \x7e\x7f\x80\xff/", 8);
    memset(&out, 0, sizeof(out));
    ck_assert_int_eq(pm__crash_decode(&bad, SIGSEGV, &out), PM_CRASH_RECORDED);
    ck_assert_str_eq(out.modules[1], "? ~?" "?" "?/");
}
END_TEST

/* The worker's fill: the frames start at the pc among the first n (the
 * handler's own frames before it dropped), all n kept when the pc is not
 * among them or is 0; an address belongs to a module's [lo, hi) (lo in,
 * hi out), only the table's first n modules count, and a record holds at
 * most PM_CRASH_MODULES modules (frames of a ninth are in no module). */
START_TEST(test_fill_rows)
{
    static pm__crash_modules t;
    static struct pm__crash_rec r;
    table_of(&t, 3);
    /* The pc just past the n frames given: not found, all n kept. */
    uint64_t f1[] = {0x10001, 0x10002, 0x10003, 0x20000, 0x30000, 0x20004};
    pm__crash_fill(&r, &t, SIGSEGV, 1, 0, 0x20000, f1, 3);
    ck_assert_uint_eq(r.nframes, 3);
    ck_assert_uint_eq(r.frames[0], 0x10001);
    pm__crash_fill(&r, &t, SIGSEGV, 1, 0, 0x20004, f1, 3);
    ck_assert_uint_eq(r.nframes, 3);
    ck_assert_uint_eq(r.frames[0], 0x10001);
    /* Found: the frames from it. */
    pm__crash_fill(&r, &t, SIGSEGV, 1, 0, 0x10003, f1, 4);
    ck_assert_uint_eq(r.nframes, 2);
    ck_assert_uint_eq(r.frames[0], 0x10003);
    /* A pc of 0 (none known) is not looked for, even among frames of 0. */
    uint64_t f2[] = {0x10001, 0, 0x10003};
    pm__crash_fill(&r, &t, SIGSEGV, 1, 0, 0, f2, 3);
    ck_assert_uint_eq(r.nframes, 3);
    ck_assert_uint_eq(r.frames[0], 0x10001);
    ck_assert_uint_eq(r.pc_module, PM__CRASH_NO_MODULE);
    /* [lo, hi): lo is in, hi is not; a module past the table's n is not. */
    t.n = 2; /* module 2 still written at [0x30000, 0x31000) */
    uint64_t f3[] = {0x10000, 0x11000, 0x30000, 0x1ffff + 1};
    pm__crash_fill(&r, &t, SIGSEGV, 1, 0, 0, f3, 4);
    ck_assert_uint_eq(r.frame_module[0], 0);
    ck_assert_uint_eq(r.frame_module[1], PM__CRASH_NO_MODULE);
    ck_assert_uint_eq(r.frame_module[2], PM__CRASH_NO_MODULE);
    ck_assert_uint_eq(r.frame_module[3], 1);
    ck_assert_uint_eq(r.nmodules, 2);
    /* Nine modules used: eight in the record, the ninth's frame in none. */
    table_of(&t, PM_CRASH_MODULES + 1);
    uint64_t f4[PM_CRASH_MODULES + 1];
    for (unsigned i = 0; i <= PM_CRASH_MODULES; i++)
        f4[i] = 0x10000u * (i + 1) + 0x10;
    pm__crash_fill(&r, &t, SIGSEGV, 1, 0, 0, f4, PM_CRASH_MODULES + 1);
    ck_assert_uint_eq(r.nmodules, PM_CRASH_MODULES);
    ck_assert_uint_eq(r.frame_module[PM_CRASH_MODULES - 1], PM_CRASH_MODULES - 1);
    ck_assert_uint_eq(r.frame_module[PM_CRASH_MODULES], PM__CRASH_NO_MODULE);
    /* A table whose count was scribbled past its size: only its entries. */
    table_of(&t, 1);
    t.n = PM__CRASH_TABLE_MAX + 100;
    pm__crash_fill(&r, &t, SIGSEGV, 1, 0, 0, f4, 2);
    ck_assert_uint_eq(r.frame_module[0], 0);
    ck_assert_uint_eq(r.frame_module[1], PM__CRASH_NO_MODULE);
}
END_TEST

/* The supervisor's collection: the report says the incarnation, signal and
 * core dump whatever the record; no record at all is UNRECORDED, a record
 * that fails its checks INVALID with nothing of it shown; a signal the
 * handler does not record makes no report. */
START_TEST(test_collect_rows)
{
    static pm__crash_modules t;
    static struct pm__crash_rec r;
    table_of(&t, 1);
    uint64_t f[] = {0x10010, 0x10020};
    pm__crash_fill(&r, &t, SIGBUS, 2, 0x77, f[0], f, 2);
    pm_crash_report *rep = NULL;
    pm__crash_collect(&rep, &r, 5, SIGKILL, 0);
    ck_assert_ptr_null(rep);
    for (int row = 0; row < 3; row++) {
        struct pm__crash_rec copy = r;
        if (row == 2)
            atomic_store(&copy.seq, PM__CRASH_WRITING);
        pm__crash_collect(&rep, row == 0 ? NULL : &copy, 7 + (uint64_t)row, SIGBUS, 1);
        ck_assert_ptr_nonnull(rep);
        ck_assert_int_eq(rep->state, row == 0 ? PM_CRASH_UNRECORDED : row == 1 ? PM_CRASH_RECORDED : PM_CRASH_INVALID);
        ck_assert_uint_eq(rep->incarnation, 7 + (uint64_t)row);
        ck_assert_int_eq(rep->signal, SIGBUS);
        ck_assert_int_eq(rep->core_dumped, 1);
        ck_assert_int_eq(rep->pc_module, row == 1 ? 0 : -1);
        ck_assert_uint_eq(rep->nframes, row == 1 ? 2 : 0);
        ck_assert_uint_eq(rep->fault_addr, row == 1 ? 0x77 : 0);
    }
    pm__wipemem_free(rep, sizeof(*rep));
}
END_TEST

/* ---------------------------------------------------------------- the module table, through the loader */

static char crash_bss_probe[4096]; /* zeroed data: in the binary's last segment */

static const pm__crash_module *holder(const pm__crash_modules *t, const void *p)
{
    uint64_t a = (uint64_t)(uintptr_t)p;
    for (unsigned i = 0; i < t->n; i++)
        if (a >= t->m[i].lo && a < t->m[i].hi)
            return &t->m[i];
    return NULL;
}

/* A small library to copy: libanl.so.1 (a stub of glibc's since 2.34) from
 * the directory libc.so.6 was loaded from, whatever the architecture's;
 * "" when there is none. */
static const char *small_lib(void)
{
    static char path[PATH_MAX];
    if (path[0] != '\0')
        return path;
    FILE *f = fopen("/proc/self/maps", "r");
    char line[PATH_MAX + 128];
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        char *p = strchr(line, '/'), *base = p != NULL ? strstr(p, "/libc.so.6") : NULL;
        if (base == NULL)
            continue;
        snprintf(path, sizeof(path), "%.*s/libanl.so.1", (int)(base - p), p);
        break;
    }
    if (f != NULL)
        fclose(f);
    if (path[0] != '\0' && access(path, R_OK) != 0)
        path[0] = '\0';
    return path;
}

/* A copy of small_lib() at path. */
static int copy_lib(const char *path)
{
    const char *src = small_lib();
    int in = open(src, O_RDONLY | O_CLOEXEC), out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    char buf[65536];
    ssize_t k = 0;
    while (in >= 0 && out >= 0 && (k = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)k) != k)
            k = -1;
    int ok = in >= 0 && out >= 0 && k == 0;
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return ok ? 0 : -1;
}

/* The module table as the loader gives it: each module spans its loadable
 * segments (the binary's zeroed data with its code), a second load is the
 * same table, a refresh reloads after an unload as after a load, and an
 * emptied table is reloaded; a library's path longer than a record holds
 * is cut to PM_CRASH_PATH_MAX - 1 bytes; past PM__CRASH_TABLE_MAX modules
 * the table holds the first ones. */
START_TEST(test_modules_loader)
{
    static pm__crash_modules t;
    pm__crash_modules_load(&t);
    unsigned n = t.n;
    ck_assert_uint_gt(n, 0);
    const pm__crash_module *code = holder(&t, (const void *)(uintptr_t)test_modules_loader);
    ck_assert_ptr_nonnull(code);
    ck_assert_ptr_eq(holder(&t, crash_bss_probe + sizeof(crash_bss_probe) - 1), code);
    pm__crash_modules_load(&t);
    ck_assert_uint_eq(t.n, n);
    t.n = 0; /* emptied, its counts still the loader's */
    pm__crash_modules_refresh(&t);
    ck_assert_uint_eq(t.n, n);

    if (small_lib()[0] == '\0') {
        fprintf(stderr, "test_modules_loader: no libanl.so.1 beside libc.so.6: the long path and the "
                        "table's bound not checked\n");
        return;
    }
    /* In the build tree, not /tmp (which may be mounted noexec). */
    char made[] = "pm-crash-mods.XXXXXX", here[PATH_MAX], dir[PATH_MAX + 32], path[2 * PATH_MAX], deep[PATH_MAX + 400];
    ck_assert_ptr_nonnull(getcwd(here, sizeof(here)));
    ck_assert_ptr_nonnull(mkdtemp(made));
    snprintf(dir, sizeof(dir), "%s/%s", here, made);
    /* A path of at least 250 bytes: cut. */
    int pad = 250 - (int)strlen(dir) - 1 - 12;
    snprintf(deep, sizeof(deep), "%s/%0*d", dir, pad > 1 ? pad : 1, 0);
    ck_assert_int_eq(mkdir(deep, 0755), 0);
    snprintf(path, sizeof(path), "%s/libx.so.1.2", deep);
    ck_assert_uint_ge(strlen(path), 250);
    ck_assert_int_eq(copy_lib(path), 0);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(h != NULL, "dlopen %s: %s", path, dlerror());
    pm__crash_modules_refresh(&t);
    ck_assert_uint_eq(t.n, n + 1);
    int cut = 0;
    for (unsigned i = 0; i < t.n; i++)
        if (strncmp(t.m[i].path, path, PM_CRASH_PATH_MAX - 1) == 0) {
            ck_assert_uint_eq(strlen(t.m[i].path), PM_CRASH_PATH_MAX - 1);
            cut++;
        }
    ck_assert_int_eq(cut, 1);
    /* Unloaded: the next refresh walks again and it is gone. */
    ck_assert_int_eq(dlclose(h), 0);
    pm__crash_modules_refresh(&t);
    ck_assert_uint_eq(t.n, n);
    unlink(path);
    rmdir(deep);

    /* More libraries than the table holds: the first PM__CRASH_TABLE_MAX. */
    enum { MORE = PM__CRASH_TABLE_MAX + 4 };
    static void *hs[MORE];
    int opened = 0;
    for (int i = 0; i < MORE; i++) {
        snprintf(path, sizeof(path), "%s/l%d.so", dir, i);
        ck_assert_int_eq(copy_lib(path), 0);
        hs[i] = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        opened += hs[i] != NULL;
        unlink(path);
    }
    ck_assert_int_eq(opened, MORE);
    pm__crash_modules_load(&t);
    ck_assert_uint_eq(t.n, PM__CRASH_TABLE_MAX);
    for (int i = 0; i < MORE; i++)
        dlclose(hs[i]);
    rmdir(dir);
}
END_TEST

/* The crash handler's walk: the frames above the caller, a bound kept,
 * and, when configure linked libgcc's unwinder in (PM_STATIC_UNWIND), no
 * libgcc_s.so loaded by the first walk: an exec'd worker would otherwise
 * map it after every ready (os/crash.c). */
static __attribute__((noinline)) int walk_here(void **frames, int max, void **ra)
{
    *ra = __builtin_return_address(0);
    int n = pm__crash_backtrace(frames, max);
    __asm__ volatile("" ::: "memory"); /* a call, not a tail jump */
    return n;
}

static int mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[PATH_MAX + 128];
    int found = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        found |= strstr(line, name) != NULL;
    if (f != NULL)
        fclose(f);
    return found;
}

/* Both walks from one frame: the crash handler's (pm__crash_backtrace)
 * and glibc's backtrace(), each into an array filled with a sentinel. */
#define WALK_MAX 64
static __attribute__((noinline)) void walk_both(void **mine, int *nm, void **glibcs, int *ng, void **ra)
{
    *ra = __builtin_return_address(0);
    for (int i = 0; i < WALK_MAX; i++)
        mine[i] = glibcs[i] = (void *)(uintptr_t)1;
    *nm = pm__crash_backtrace(mine, WALK_MAX);
    *ng = backtrace(glibcs, WALK_MAX);
    __asm__ volatile("" ::: "memory");
}

START_TEST(test_unwinder_walk)
{
    int before = mapped("libgcc_s");
    pm__crash_unwinder_prime();
    void *frames[16], *ra;
    int n = walk_here(frames, 16, &ra);
    ck_assert_int_ge(n, 2);
    int seen = 0;
    for (int i = 0; i < n; i++)
        seen |= frames[i] == ra;
    ck_assert_msg(seen, "the caller's return address %p is not among the %d frames", ra, n);
    ck_assert_int_eq(walk_here(frames, 1, &ra), 1);
    /* Cut by the bound, not ended: no frame dropped. */
    ck_assert_int_eq(walk_here(frames, 2, &ra), 2);
    ck_assert_int_eq(walk_here(frames, 3, &ra), 3);
    ck_assert_int_eq(walk_here(frames, 0, &ra), 0);
    ck_assert_int_eq(walk_here(frames, -1, &ra), 0);
#if PM_STATIC_UNWIND
    /* Nothing new mapped: a runtime that needs libgcc_s itself (the
     * sanitizers') had it before. */
    ck_assert_msg(mapped("libgcc_s") == before, "the walk loaded libgcc_s.so");
#else
    (void)before;
#endif
    /* The whole stack, as glibc's backtrace() gives it (which loads
     * libgcc_s, hence after the check above): every frame written, none
     * NULL (the walk's end above _start is dropped), and from walk_both's
     * caller on the same frames (below it each walk has its own call
     * site, and a sanitizer's interceptor of backtrace() a frame more). */
    void *mine[WALK_MAX], *glibcs[WALK_MAX];
    int nm, ng;
    walk_both(mine, &nm, glibcs, &ng, &ra);
    ck_assert_int_gt(ng, 2);
    ck_assert_int_lt(ng, WALK_MAX);
    ck_assert_int_lt(nm, WALK_MAX);
    for (int i = 0; i < nm; i++)
        ck_assert_msg(mine[i] != NULL && mine[i] != (void *)(uintptr_t)1, "frame %d of %d is %p", i, nm,
                      mine[i]);
    int im = 0, ig = 0;
    while (im < nm && mine[im] != ra)
        im++;
    while (ig < ng && glibcs[ig] != ra)
        ig++;
    ck_assert_msg(im < nm && ig < ng, "walk_both's return address %p: at %d of %d, glibc's at %d of %d", ra, im,
                  nm, ig, ng);
    ck_assert_int_eq(nm - im, ng - ig);
    for (int i = 0; im + i < nm; i++)
        ck_assert_msg(mine[im + i] == glibcs[ig + i], "caller %d: %p, glibc's %p", i, mine[im + i],
                      glibcs[ig + i]);
}
END_TEST

#if defined(__x86_64__)
/* A frame whose unwind table does not move on: pm_test_stuck(fn) calls fn
 * with its own return address slot pointing back at the call's return
 * address, and its CFA defined by rbx, which its table leaves unsaved
 * (the same in the caller): the unwinder finds the same pc and the same
 * CFA again and again, as on a corrupt stack. The walk must stop there,
 * not fill its array with the one frame. */
void pm_test_stuck(void (*fn)(void));
__asm__(".text\n"
        ".globl pm_test_stuck\n"
        ".type pm_test_stuck, @function\n"
        "pm_test_stuck:\n"
        "    .cfi_startproc\n"
        "    pushq %r12\n"
        "    .cfi_def_cfa_offset 16\n"
        "    pushq %rbx\n"
        "    .cfi_def_cfa_offset 24\n"
        "    movq %rsp, %rbx\n"
        "    .cfi_def_cfa rbx, 24\n"
        "    movq 16(%rbx), %r12\n" /* the real return address */
        "    leaq 1f(%rip), %rax\n"
        "    movq %rax, 16(%rbx)\n"
        "    subq $8, %rsp\n"
        "    call *%rdi\n"
        "1:  movq %r12, 16(%rbx)\n"
        "    movq %rbx, %rsp\n"
        "    .cfi_def_cfa rsp, 24\n"
        "    popq %rbx\n"
        "    .cfi_def_cfa_offset 16\n"
        "    popq %r12\n"
        "    .cfi_def_cfa_offset 8\n"
        "    ret\n"
        "    .cfi_endproc\n"
        ".size pm_test_stuck, .-pm_test_stuck\n");

static void *stuck_frames[WALK_MAX];
static int stuck_n;

static __attribute__((noinline)) void stuck_walk(void)
{
    for (int i = 0; i < WALK_MAX; i++)
        stuck_frames[i] = NULL;
    stuck_n = pm__crash_backtrace(stuck_frames, WALK_MAX);
    __asm__ volatile("" ::: "memory");
}

START_TEST(test_unwinder_stuck_frame)
{
    pm__crash_unwinder_prime();
    pm_test_stuck(stuck_walk);
    ck_assert_int_gt(stuck_n, 1);
    ck_assert_msg(stuck_n < WALK_MAX, "the walk filled its %d frames", stuck_n);
    /* The stuck frame last, twice at most: a frame's CFA as the unwinder
     * reports it is its callee's, so the first repeat of the pc comes
     * with stuck_walk's CFA and only the second with the same one (as in
     * glibc's backtrace(), whose rule this is). */
    void *last = stuck_frames[stuck_n - 1];
    int count = 0;
    for (int i = 0; i < stuck_n; i++)
        count += stuck_frames[i] == last;
    ck_assert_int_le(count, 2);
}
END_TEST
#endif

static Suite *suite(void)
{
    Suite *s = suite_create("crash");
    PM_ADD_TEST(s, test_decode, 0);
    PM_ADD_TEST(s, test_segv_null, 0);
    PM_ADD_TEST(s, test_segv_wild, 0);
    PM_ADD_TEST(s, test_call_null, 0);
    PM_ADD_TEST(s, test_call_wild, 0);
    PM_ADD_TEST(s, test_segv_accerr, 0);
    PM_ADD_TEST(s, test_sigbus, 0);
    PM_ADD_TEST(s, test_sigfpe, 0);
    PM_ADD_TEST(s, test_abort, 0);
    PM_ADD_TEST(s, test_generic_codes, 0);
    PM_ADD_TEST(s, test_call_data, 0);
    PM_ADD_TEST(s, test_call_deep, 0);
    PM_ADD_TEST(s, test_unwinder_walk, 0);
#if defined(__x86_64__)
    PM_ADD_TEST(s, test_unwinder_stuck_frame, 0);
#endif
    PM_ADD_TEST(s, test_call_probe_faked, 0);
    PM_ADD_TEST(s, test_exec_child_crash_not_recorded, 0);
    PM_ADD_TEST(s, test_no_fault_addr, 0);
    PM_ADD_TEST(s, test_exec_threaded_keeps_app_handler, 0);
    PM_ADD_TEST(s, test_exec_threaded_no_window, 0);
    PM_ADD_TEST(s, test_exec_closed_records_nothing, 0);
    PM_ADD_TEST(s, test_stack_overflow, 0);
    PM_ADD_TEST(s, test_scribbled_record, 0);
    PM_ADD_TEST(s, test_daemon_log_line, 0);
    PM_ADD_TEST(s, test_exec_crash_before_ready, 0);
    PM_ADD_TEST(s, test_fork_keeps_app_handler, 0);
    PM_ADD_TEST(s, test_exec_keeps_app_handler, 0);
    PM_ADD_TEST(s, test_modules_refresh, 0);
    PM_ADD_TEST(s, test_fork_child_walks_nothing, 0);
    PM_ADD_TEST(s, test_decode_rows, 0);
    PM_ADD_TEST(s, test_fill_rows, 0);
    PM_ADD_TEST(s, test_collect_rows, 0);
    PM_ADD_TEST(s, test_modules_loader, 0);
    return s;
}

int main(void)
{
    return pm_test_main(suite());
}
