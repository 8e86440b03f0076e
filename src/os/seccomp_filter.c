/* SPDX-License-Identifier: MIT */
/* seccomp_filter.c - the worker system-call filters (basic, strict): their rules, built with libseccomp. */
/*
 * libseccomp allocates and takes no care to be async-signal-safe, so the
 * supervisor builds each filter once (per cluster), exports the classic BPF
 * program, and the child between fork and exec only hands its copy to
 * seccomp(2) (pm__seccomp_load). libseccomp itself runs in a short-lived
 * child of the supervisor (export_in_child): out of memory it can crash.
 * doc/privileges.md says what each level protects against.
 */
#define _GNU_SOURCE
#include "base/internal.h"
#include "seccomp_filter.h"
#include "landlock.h"
#include "os/deps.h"

#include <fcntl.h>
#include <linux/filter.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#ifdef HAVE_SECCOMP
#include <fcntl.h>
#include "os/dep_seccomp.h"
#include <linux/sockios.h> /* FIOSETOWN, SIOCSPGRP */
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#endif

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif
/* Every memfd_create flag bit but these refuses the call under strict
 * (the kernel reads an unsigned int: the upper half is ignored). */
#define MEMFD_OTHER_FLAGS \
    (0xffffffffULL & ~(uint64_t)(MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL))

#ifndef PR_SCHED_CORE
#define PR_SCHED_CORE 62
#endif

/* Stands for the worker's own pid in the strict filter until the child
 * writes its pid over it. Above PID_MAX_LIMIT (2^22), so no real pid and
 * no system call number can be mistaken for it. */
#define PM__SECCOMP_SELF 0x7ffffffeU

/*
 * strict: exactly what a fork-mode worker makes on its own, from the
 * child's set-up (spawn.c, incarnation.c fork_child) to glibc's exit and the
 * crash handler's re-raise. Found with `strace -f` on the compute worker of
 * tests/check_privileges.c (recv, compute, reply, exit; a crash): close,
 * fcntl(F_GET_SEALS), getppid, mmap, munmap, newfstatat, poll, read, write,
 * getpid, gettid, rt_sigprocmask, tgkill, exit_group; the rest is what glibc's
 * malloc, stdio, vDSO fallback and signal delivery may make on the same
 * paths, and what a large message takes (bigmsg.c: memfd_create,
 * F_ADD_SEALS, sendmsg; recvmsg, F_GET_SEALS, F_GETFL, fstat, fstatfs,
 * mmap). A large message
 * must never break a strict worker: refusing them would let any sender,
 * remote ones too, fail its receive or kill it. recvmsg and sendmsg reach
 * only sockets the worker already holds, and every fd they carry passes
 * the hub's checks. One comment per call says who makes it. tgkill is
 * allowed only towards the worker itself (see add_strict); kill and tkill
 * not at all.
 */
static const struct {
    const char *name;
    long arg1; /* >= 0: only with this second argument (a command) */
    const char *why;
} strict_calls[] = {
    {"read", -1, "drains its doorbell eventfd where preadv2 is refused (doorbell.c)"},
    {"preadv2", -1, "drains its doorbell eventfd without blocking, whatever the file's flags "
                    "(doorbell.c: the supervisor shares it)"},
    {"write", -1, "rings the hub's doorbell eventfd; stdio on inherited stdout/stderr"},
    {"poll", -1, "parks on its doorbell eventfd where futexes are refused (ring.c)"},
    {"ppoll", -1, "poll() on architectures without poll"},
    {"futex", -1, "parks on its ring's wait flag (ring.c); glibc locks, pthread primitives"},
    {"sched_yield", -1, "the ring's short spin before parking"},
    {"clock_gettime", -1, "deadlines, when the vDSO falls back to the system call"},
    {"getppid", -1, "is the supervisor still there (node.c)"},
    {"getpid", -1, "raise() and abort(): tgkill's first argument"},
    {"gettid", -1, "raise(): tgkill's second argument (glibc asks the kernel in a fork child)"},
    {"tgkill", -1, "raise()/abort() and the crash handler's re-raise: to itself only"},
    {"rt_sigprocmask", -1, "raise()/abort() block signals around tgkill; the child's set-up"},
    {"rt_sigaction", -1, "the crash handler resets a signal to SIG_DFL before re-raising"},
    {"rt_sigreturn", -1, "returning from any signal handler"},
    {"sigaltstack", -1, "a crash handler on its own stack"},
    {"restart_syscall", -1, "a sleep interrupted by SIGSTOP/SIGCONT resumes"},
    {"close", -1, "fork_child drops the other slots' fds; pm_node_close"},
    {"mmap", -1, "its ring memory (node.c); malloc of large blocks"},
    {"munmap", -1, "fork_child drops the hub's mappings; free of large blocks"},
    {"mremap", -1, "realloc of large blocks"},
    {"madvise", -1, "glibc malloc trimming"},
    {"mprotect", -1, "glibc malloc growing a thread arena"},
    {"brk", -1, "malloc"},
    {"fcntl", F_GET_SEALS, "node.c checks its ring memory's seals, bigmsg.c a large "
                           "message's (only the seal commands: F_SETOWN would have the "
                           "kernel signal someone)"},
    {"fcntl", F_ADD_SEALS, "bigmsg.c seals a large message before sending it"},
    {"fcntl", F_GETFL, "bigmsg.c checks a received large message is open for reading"},
    {"fstatfs", -1, "bigmsg.c checks a received large message is a tmpfs memfd"},
    {"memfd_create", -1, "bigmsg.c: a large message's memory (flags checked, add_strict)"},
    {"recvmsg", -1, "bigmsg.c takes a large message's fd from its socket; a direct lane's "
                    "three fds (laneoffer.c)"},
    {"epoll_create1", -1, "pm_node_fd: one fd for the hub's doorbell and each lane's "
                          "(node_lanes.c)"},
    {"epoll_ctl", -1, "pm_node_fd: a lane's doorbell added (node_lanes.c)"},
    {"epoll_wait", -1, "waits on the hub ring and its lanes at once, edge-triggered "
                       "(node_lanes.c, ringwait.c)"},
    {"epoll_pwait", -1, "epoll_wait on architectures without it"},
    {"sendmsg", -1, "bigmsg.c passes a large message's fd over its socket"},
    {"sendto", -1, "ring.c wakes a lane's peer: send on its doorbell socket, MSG_DONTWAIT | "
                   "MSG_NOSIGNAL"},
    {"fstat", -1, "stdio's first write to stdout/stderr"},
    {"newfstatat", -1, "fstat on glibc >= 2.33"},
    {"exit_group", -1, "the worker ends (_exit after the bootstrap)"},
};

/*
 * basic: calls a contained worker never needs and that reach outside it.
 * Every other call is allowed.
 */
const char *const pm__seccomp_basic_denied[] = {
    /* Another process's memory and fds: ptrace, read/write its memory,
     * steal an fd. */
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp",
    /* A pidfd can name any process: a filter cannot see an fd's target, so
     * signalling or opening through one is refused outright. */
    "pidfd_open", "pidfd_send_signal", "pidfd_getfd",
    /* tkill names a thread by tid alone, without its thread group, so it
     * cannot be pinned to the worker as tgkill is (glibc signals with
     * tgkill). */
    "tkill",
    /* The file system tree and namespaces. */
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "setns", "unshare", "open_by_handle_at",
    /* The kernel's keyrings, programs, tracing and modules. */
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    /* The machine: power, swap, clocks, accounting, the kernel log, ports. */
    "reboot", "swapon", "swapoff", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "acct", "quotactl", "syslog", "iopl", "ioperm", NULL};

#ifdef HAVE_SECCOMP

/* The kernel reads a pid_t or a command (int) from the low 32 bits of the
 * register; a hostile worker may put anything in the upper half, and glibc
 * sign-extends a negative int. So every comparison looks at the low 32
 * bits only (masked here; the pin block loads only that half). (libseccomp's
 * SCMP_CMP32 does not mask: it compares all 64 bits with a zero-extended
 * value.) */
#define LO32_EQ(arg, v) SCMP_CMP64((arg), SCMP_CMP_MASKED_EQ, 0xffffffffULL, (uint64_t)(uint32_t)(v))

static uint32_t scmp_action(int action)
{
    return action == PM_SECCOMP_KILL ? SCMP_ACT_KILL_PROCESS : SCMP_ACT_ERRNO(EPERM);
}

/* A name the running architecture does not have (iopl on arm64 ...) is
 * skipped: nothing to deny. */
static int deny(scmp_filter_ctx ctx, uint32_t act, const char *name, unsigned n,
                const struct scmp_arg_cmp *cmp)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return 0;
    return seccomp_rule_add_array(ctx, act, nr, n, cmp);
}

/*
 * basic's pins: every call that sends a signal or changes an rlimit, a
 * scheduling policy or parameter, an affinity, an I/O priority or where
 * pages live acts on the worker itself only: its target must be 0 where
 * the call reads 0 as "the caller", or the worker's own pid, written into
 * the program by the child (pm__seccomp_load) as strict's tgkill is.
 * Comparing with the supervisor's pid is not enough: a seccomp filter sees
 * integers only, and kill(tid) of any thread of the supervisor (a
 * resolver's, an application's) reaches the whole process; a list of tids
 * would always be stale. The forms that name a group or a user
 * (setpriority PRIO_PGRP/PRIO_USER, ioprio_set IOPRIO_WHO_PGRP/USER) are
 * refused: the worker's group is the supervisor's after a setpgid, and its
 * user the supervisor's unless --user. kill's 0 is the caller's group, so
 * kill takes its own pid only.
 *
 * libseccomp allows one comparison per argument in a rule, so "0 or self"
 * cannot be said with it; these pins are a hand-built block placed before
 * libseccomp's program: it only ever refuses or falls through to it (never
 * allows), so libseccomp's rules still apply to every call it lets pass.
 */
enum { PIN_ANY, PIN_WHEN, PIN_MUST };

static const struct pin {
    const char *name;
    unsigned pid_arg;  /* the argument naming the target (a pid_t: low 32 bits) */
    int zero_self;     /* 0 there names the caller */
    int cmd_kind;      /* PIN_WHEN: the pin applies only when cmd_arg is cmd;
                          PIN_MUST: refused unless cmd_arg is cmd */
    unsigned cmd_arg;
    uint32_t cmd;
} pins[] = {
    {"kill", 0, 0, PIN_ANY, 0, 0},
    {"tgkill", 0, 0, PIN_ANY, 0, 0}, /* the kernel checks the tid is in that group */
    {"rt_sigqueueinfo", 0, 0, PIN_ANY, 0, 0},
    {"rt_tgsigqueueinfo", 0, 0, PIN_ANY, 0, 0},
    /* SIGIO, or any signal chosen with F_SETSIG, goes to the owner on I/O;
     * 0 clears the owner; a negative owner is a group. */
    {"fcntl", 2, 1, PIN_WHEN, 1, F_SETOWN},
    {"fcntl64", 2, 1, PIN_WHEN, 1, F_SETOWN},
    {"prlimit64", 0, 1, PIN_ANY, 0, 0},
    {"sched_setscheduler", 0, 1, PIN_ANY, 0, 0},
    {"sched_setparam", 0, 1, PIN_ANY, 0, 0},
    {"sched_setattr", 0, 1, PIN_ANY, 0, 0},
    {"sched_setaffinity", 0, 1, PIN_ANY, 0, 0},
    {"setpriority", 1, 1, PIN_MUST, 0, PRIO_PROCESS},
    {"ioprio_set", 1, 1, PIN_MUST, 0, 1 /* IOPRIO_WHO_PROCESS */},
    {"migrate_pages", 0, 1, PIN_ANY, 0, 0},
    {"move_pages", 0, 1, PIN_ANY, 0, 0},
};

#define PIN_MAX 160 /* instructions: 3 + at most 6 a pin + 1, with room to spare */


/* Jump targets while the block is built: an instruction index, or one of
 * the labels fixed up at the end. */
enum { TO_NEXT_INSN = -1, TO_DENY = -2, TO_CONT = -3, TO_NEXT_PIN = -4 };

struct pin_block {
    struct sock_filter f[PIN_MAX];
    int jt[PIN_MAX], jf[PIN_MAX];
    size_t n;
};

static void pin_emit(struct pin_block *b, uint16_t code, uint32_t k, int jt, int jf)
{
    if (b->n < PIN_MAX) {
        b->f[b->n] = (struct sock_filter)BPF_STMT(code, k);
        b->jt[b->n] = jt;
        b->jf[b->n] = jf;
    }
    b->n++;
}

/* One pin: entered with the call's number in A. */
static void pin_one(struct pin_block *b, const struct pin *p, int nr)
{
    pin_emit(b, BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, TO_NEXT_INSN, TO_NEXT_PIN);
    if (p->cmd_kind != PIN_ANY) {
        pin_emit(b, BPF_LD | BPF_W | BPF_ABS, PM__SECCOMP_ARG_LO(p->cmd_arg), 0, 0);
        pin_emit(b, BPF_JMP | BPF_JEQ | BPF_K, p->cmd, TO_NEXT_INSN,
                 p->cmd_kind == PIN_WHEN ? TO_CONT : TO_DENY);
    }
    pin_emit(b, BPF_LD | BPF_W | BPF_ABS, PM__SECCOMP_ARG_LO(p->pid_arg), 0, 0);
    if (p->zero_self)
        pin_emit(b, BPF_JMP | BPF_JEQ | BPF_K, 0, TO_CONT, TO_NEXT_INSN);
    pin_emit(b, BPF_JMP | BPF_JEQ | BPF_K, PM__SECCOMP_SELF, TO_CONT, TO_DENY);
}

/* Resolves the labels into the relative offsets of classic BPF (8 bits). */
static int pin_fixup(struct pin_block *b, const size_t *starts, size_t npins)
{
    size_t deny = b->n - 1, cont = b->n;
    size_t pin = 0;
    for (size_t i = 0; i < b->n; i++) {
        while (pin < npins && starts[pin] <= i)
            pin++;
        if (BPF_CLASS(b->f[i].code) != BPF_JMP)
            continue;
        int lab[2] = {b->jt[i], b->jf[i]};
        size_t to[2];
        for (int k = 0; k < 2; k++) {
            to[k] = lab[k] >= 0        ? (size_t)lab[k]
                    : lab[k] == TO_NEXT_INSN ? i + 1
                    : lab[k] == TO_DENY      ? deny
                    : lab[k] == TO_CONT      ? cont
                    : pin < npins            ? starts[pin]
                                             : cont;
            if (to[k] <= i || to[k] - i - 1 > 255)
                return -E2BIG;
        }
        b->f[i].jt = (uint8_t)(to[0] - i - 1);
        b->f[i].jf = (uint8_t)(to[1] - i - 1);
    }
    return 0;
}

/* Builds the pin block for the native architecture; a call it does not
 * have (fcntl64 on 64-bit ones) is skipped. */
static int pin_build(uint32_t act, struct pin_block *b)
{
    /* One more than the pins: pin_fixup's walk stops at the sentinel. */
    size_t starts[PM__ARRAY_SIZE(pins) + 1], npins = 0;
    b->n = 0;
    pin_emit(b, BPF_LD | BPF_W | BPF_ABS, (uint32_t)offsetof(struct seccomp_data, arch), 0, 0);
    /* Another architecture's calls: libseccomp's program kills them. */
    pin_emit(b, BPF_JMP | BPF_JEQ | BPF_K, seccomp_arch_native(), TO_NEXT_INSN, TO_CONT);
    pin_emit(b, BPF_LD | BPF_W | BPF_ABS, (uint32_t)offsetof(struct seccomp_data, nr), 0, 0);
    for (size_t i = 0; i < PM__ARRAY_SIZE(pins); i++) {
        int nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_NATIVE, pins[i].name);
        if (nr < 0) /* a pin this architecture does not have */
            continue;
        starts[npins++] = b->n;
        pin_one(b, &pins[i], nr);
    }
    starts[npins] = SIZE_MAX;
    pin_emit(b, BPF_RET | BPF_K, act, 0, 0);
    if (b->n > PIN_MAX)
        return -E2BIG;
    return pin_fixup(b, starts, npins);
}

/*
 * basic: calls refused when one argument (the low 32 bits) is one value.
 * F_SETOWN_EX, FIOSETOWN and SIOCSPGRP name the owner that SIGIO (or
 * any signal chosen with F_SETSIG, SIGSTOP too) goes to through a
 * pointer the filter cannot read (F_OWNER_TID names any thread):
 * refused outright; plain F_SETOWN is pinned to the worker (pins).
 * TIOCSTI pushes input into a terminal the worker shares with the
 * supervisor, TIOCSPGRP makes its group the terminal's foreground one
 * (the supervisor's reads and writes there would stop it with
 * SIGTTIN/SIGTTOU). PR_SCHED_CORE moves a task named by pid into a
 * core-scheduling group.
 */
const pm__seccomp_denied_when pm__seccomp_basic_denied_when[] = {
    {"fcntl", 1, F_SETOWN_EX},
    {"ioctl", 1, FIOSETOWN},
    {"ioctl", 1, SIOCSPGRP},
    {"ioctl", 1, TIOCSTI},
    {"ioctl", 1, TIOCSPGRP},
    {"prctl", 0, PR_SCHED_CORE},
    {NULL, 0, 0},
};

static int add_basic(scmp_filter_ctx ctx, uint32_t act)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && pm__seccomp_basic_denied[i] != NULL; i++)
        rc = deny(ctx, act, pm__seccomp_basic_denied[i], 0, NULL);
    for (const pm__seccomp_denied_when *w = pm__seccomp_basic_denied_when; rc == 0 && w->name != NULL; w++) {
        struct scmp_arg_cmp c = LO32_EQ(w->arg, w->val);
        rc = deny(ctx, act, w->name, 1, &c);
    }
    return rc;
}

static int add_strict(scmp_filter_ctx ctx)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < PM__ARRAY_SIZE(strict_calls); i++) {
        int nr = seccomp_syscall_resolve_name(strict_calls[i].name);
        if (nr == __NR_SCMP_ERROR)
            continue; /* poll on arm64 ... */
        if (strict_calls[i].arg1 >= 0) {
            struct scmp_arg_cmp cmd = LO32_EQ(1, strict_calls[i].arg1);
            rc = seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, nr, 1, &cmd);
        } else if (strcmp(strict_calls[i].name, "memfd_create") == 0) {
            /* Only the flags bigmsg.c uses (and MFD_NOEXEC_SEAL): a
             * hugetlb memfd's pages are charged outside the worker's
             * memory.max. */
            struct scmp_arg_cmp fl = SCMP_CMP64(1, SCMP_CMP_MASKED_EQ, MEMFD_OTHER_FLAGS, 0);
            rc = seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, nr, 1, &fl);
        } else if (strcmp(strict_calls[i].name, "tgkill") == 0) {
            /* To itself only: the child writes its pid over the stand-in
             * (pm__seccomp_load). tkill and kill are not allowed at all. */
            struct scmp_arg_cmp self = LO32_EQ(0, PM__SECCOMP_SELF);
            rc = seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, nr, 1, &self);
        } else {
            rc = seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, nr, 0, NULL);
        }
    }
    return rc;
}

/* basic: the pin block, then libseccomp's program, which the block's
 * "fall through" reaches as its next instruction. */
static int prepend_pins(uint32_t act, pm__seccomp_prog *out)
{
    /* On the stack (2.6 KB, built in the supervisor, never in a worker):
     * no allocation that could fail and leave a filter without its pins.
     * Zeroed: pin_build starts its count at 0 anyway, and an entry past
     * the count is then a harmless zero. */
    struct pin_block blk = {0};
    struct pin_block *b = &blk;
    int rc = pin_build(act, b);
    struct sock_filter *all = NULL;
    if (rc == 0 && b->n + out->len > BPF_MAXINSNS)
        rc = -E2BIG;
    if (rc == 0 && (all = malloc((b->n + out->len) * sizeof(*all))) == NULL)
        rc = -ENOMEM;
    if (rc == 0) {
        memcpy(all, b->f, b->n * sizeof(*all));
        memcpy(all + b->n, out->insns, out->len * sizeof(*all));
        free(out->insns);
        out->insns = all;
        out->len = (unsigned short)(out->len + b->n);
    }
    return rc;
}

/* The program libseccomp exported into memfd fd, read back (its
 * in-memory export is 2.6 only). */
static int read_back(int fd, pm__seccomp_prog *out)
{
    int rc = 0;
    struct stat st = {0}; /* read only after a successful fstat */
    if (fstat(fd, &st) < 0)
        rc = -errno;
    if (rc == 0 && (st.st_size <= 0 || st.st_size % (off_t)sizeof(struct sock_filter) != 0 ||
                    st.st_size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS))
        rc = -E2BIG;
    char *buf = NULL;
    if (rc == 0 && (buf = malloc((size_t)st.st_size)) == NULL)
        rc = -ENOMEM;
    for (off_t got = 0; rc == 0 && got < st.st_size;) {
        ssize_t k = pread(fd, buf + got, (size_t)(st.st_size - got), got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            rc = k < 0 ? -errno : -EIO;
        else
            got += k;
    }
    if (rc < 0) {
        free(buf);
        return rc;
    }
    out->insns = (struct sock_filter *)(void *)buf;
    out->len = (unsigned short)(st.st_size / (off_t)sizeof(struct sock_filter));
    return 0;
}

/* libseccomp's whole part: the rules, exported into fd. 0 or libseccomp's
 * negative errno. Runs in the build's child (export_in_child). */
static int libseccomp_export(int level, uint32_t act, int fd)
{
    scmp_filter_ctx ctx = seccomp_init(level == PM_SECCOMP_BASIC ? SCMP_ACT_ALLOW : act);
    if (ctx == NULL)
        return -ENOMEM;
    /* The child sets no_new_privs itself (or is root with it off); loading
     * must not change that behind the option's back. A foreign
     * architecture's calls (int 0x80 on x86-64) keep libseccomp's default:
     * the process is killed, so the rules cannot be bypassed that way. */
    int rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
    if (rc == 0)
        rc = level == PM_SECCOMP_BASIC ? add_basic(ctx, act) : add_strict(ctx);
    if (rc == 0)
        rc = seccomp_export_bpf(ctx, fd);
    seccomp_release(ctx);
    return rc;
}

/* Closes the child's fds from first to last (none when first > last):
 * close_range where the kernel has it (5.9), else nothing (the child's
 * exit closes them all the same, only later). */
static void close_span(int first, int last)
{
    if (first <= last)
        (void)syscall(SYS_close_range, (unsigned)first, (unsigned)last, 0);
}

/*
 * The build's child, before libseccomp runs in it. Every signal stays
 * blocked (the parent blocked them around the fork): the application's
 * handlers (SIGTERM, SIGINT ...) never run in this copy of it, and a
 * terminal's Ctrl-C to the process group does not end it; a fault still
 * kills it (the kernel unblocks and resets a synchronous fault's signal),
 * abort() too (it unblocks SIGABRT), and the crash signals go back to
 * their default action so that none reaches a handler of the
 * application's. It dies with the supervisor (a build is milliseconds,
 * but none outlives it: the supervisor may have died before the prctl,
 * so its pid is checked after). A crash leaves no core, whatever the
 * core pattern (a pipe ignores RLIMIT_CORE; not dumpable is refused by
 * both): the child is a copy of the supervisor, keys included. Only
 * stdio, the memfd and the verdict's pipe stay open: a worker's pipe or
 * socket the supervisor holds is not kept from its EOF by this child.
 */
static void build_child_setup(pid_t parent, int a, int b)
{
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != parent)
        _exit(1);
    (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    struct rlimit none = {0, 0};
    (void)setrlimit(RLIMIT_CORE, &none);
    static const int crash[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGTRAP, SIGSYS};
    for (size_t i = 0; i < PM__ARRAY_SIZE(crash); i++)
        (void)signal(crash[i], SIG_DFL);
    int lo = a < b ? a : b, hi = a < b ? b : a;
    close_span(3, lo - 1);
    close_span(lo + 1, hi - 1);
    close_span(hi + 1, INT_MAX);
}

/* How long a build's child may take: libseccomp builds a filter in a
 * millisecond or two; out of memory, 2.5.4's export was seen to spin
 * forever (tests/check_privileges.c test_seccomp_out_of_memory). Only a
 * hang reaches it, so it is far above any machine's build time. A
 * variable only so that that test, which meets dozens of hangs, can
 * shorten it (seccomp_filter.h). */
int pm__seccomp_build_timeout_ms = 10000;

/* 0 once fd (the verdict's pipe) is readable (a verdict, or EOF: the
 * child died), -ETIMEDOUT after timeout_ms, -errno. */
static int wait_verdict(int fd, int timeout_ms)
{
    uint64_t end = pm__now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        uint64_t now = pm__now_ms();
        if (now >= end)
            return -ETIMEDOUT;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int n = poll(&pfd, 1, (int)(end - now));
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

/*
 * Runs libseccomp_export in a short-lived child and returns its verdict.
 * Out of memory, libseccomp 2.5.4 was seen to crash (a later allocation
 * failing after an earlier one it did not check: tests/check_privileges.c
 * test_seccomp_out_of_memory): in the supervisor that is the whole
 * cluster's death, in the child it is a failed build. The program goes
 * through fd (a memfd: the child's writes are the parent's file), the
 * verdict through a pipe, written only once the export returned: a child
 * that died before (EOF and no verdict) failed, whatever it left in fd;
 * one that spins (libseccomp 2.5.4 did, out of memory) is killed after
 * pm__seccomp_build_timeout_ms and the build fails -ETIMEDOUT.
 * Not the exit status: a cluster reaping orphans as PID 1 (reap.c) in
 * another thread may take it first (then waitpid says ECHILD; waited for
 * and killed by pid, as spawn.c's children are before their pidfd: an
 * application that reaps every child, waitpid(-1), is not supported).
 * Once per options, at the first start that needs the filter
 * (incarnation.c): a fork there is cheap beside the spawn it precedes,
 * and seccomp is off by default; a failed build is not kept, so a start
 * after it builds again. It runs on the loop's thread: a spin holds the
 * loop for the whole wait. fork() runs the application's pthread_atfork
 * handlers (glibc's fork also keeps malloc usable in the child, which
 * libseccomp needs). Limits left: the child's exit closes what it did
 * not close first, and a close that is the last of a pipe a worker's
 * descendant holds in splice() sleeps until it lets go (doc/design.md,
 * Worker output, the same open case as a fork-mode spawn's); and a
 * fork-mode worker another thread forks meanwhile (another cluster)
 * inherits the memfd and the pipe for as long as the build runs.
 */
static int export_in_child(int level, uint32_t act, int fd)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    /* Blocked across the fork, for the child's sake (build_child_setup);
     * the parent's mask is back right after. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t parent = getpid();
    pid_t pid = fork();
    int fork_errno = errno;
    if (pid != 0)
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        pm__close(p[0]);
        pm__close(p[1]);
        return -fork_errno;
    }
    if (pid == 0) {
        pm__close(p[0]);
        build_child_setup(parent, fd, p[1]);
        int32_t v = libseccomp_export(level, act, fd);
        /* Not retried on EINTR: 4 bytes into a fresh pipe nobody else
         * writes never wait for room, so nothing can interrupt the write
         * (and a reader gone is EPIPE, SIGPIPE blocked here). */
        ssize_t w = write(p[1], &v, sizeof(v));
        _exit(w == (ssize_t)sizeof(v) ? 0 : 1);
    }
    pm__close(p[1]);
    int32_t v = 0;
    ssize_t k = -1;
    int rc = wait_verdict(p[0], pm__seccomp_build_timeout_ms);
    if (rc == 0) {
        do
            k = read(p[0], &v, sizeof(v));
        while (k < 0 && errno == EINTR);
        rc = k < 0 ? -errno : 0;
    }
    pm__close(p[0]);
    if (rc < 0) /* hung, or its verdict unreadable: it ends here */
        (void)kill(pid, SIGKILL);
    /* ECHILD when another reaper took it: the verdict is in already. */
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    if (rc < 0)
        return rc;
    /* No verdict: it died in libseccomp. A verdict that is not 0 or an
     * errno: not libseccomp's either. */
    if (k != (ssize_t)sizeof(v) || v > 0 || v < -4095)
        return -EPROTO;
    return v;
}

/* libseccomp's program for level, exported in a child (export_in_child)
 * and read back here. */
static int export_bpf(int level, uint32_t act, pm__seccomp_prog *out)
{
    int fd = memfd_create("procmesh-seccomp", MFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = export_in_child(level, act, fd);
    if (rc == 0)
        rc = read_back(fd, out);
    pm__close(fd);
    return rc;
}

/* A name's number on this architecture, or -1 where it has none (a
 * pseudo-call, or a name libseccomp does not know). */
static int native_nr(const char *name)
{
    int nr = seccomp_syscall_resolve_name(name);
    return nr < 0 ? -1 : nr;
}

static void add_rule(pm__seccomp_named *out, size_t max, size_t *n, const char *name, int arg,
                     uint32_t val)
{
    int nr = native_nr(name);
    if (nr < 0)
        return;
    if (*n < max)
        out[*n] = (pm__seccomp_named){nr, arg, val};
    (*n)++;
}

int pm__seccomp_named_rules(int level, pm__seccomp_named *out, size_t max)
{
    if (level != PM_SECCOMP_BASIC && level != PM_SECCOMP_STRICT)
        return -EINVAL;
    if (pm__dep_load(PM__DEP_SECCOMP, NULL, 0) < 0)
        return -ENOTSUP;
    size_t n = 0;
    if (level == PM_SECCOMP_STRICT) {
        /* memfd_create's flags (masked) and tgkill's stand-in (the build
         * checks it apart) are not plain equalities of a constant. */
        for (size_t i = 0; i < PM__ARRAY_SIZE(strict_calls); i++)
            add_rule(out, max, &n, strict_calls[i].name, strict_calls[i].arg1 >= 0 ? 1 : -1,
                     (uint32_t)strict_calls[i].arg1);
        return (int)n;
    }
    for (size_t i = 0; pm__seccomp_basic_denied[i] != NULL; i++)
        add_rule(out, max, &n, pm__seccomp_basic_denied[i], -1, 0);
    for (const pm__seccomp_denied_when *w = pm__seccomp_basic_denied_when; w->name != NULL; w++)
        add_rule(out, max, &n, w->name, (int)w->arg, (uint32_t)w->val);
    return (int)n;
}

_Static_assert(PM__ARRAY_SIZE(strict_calls) <= PM__SECCOMP_NAMED_MAX, "strict's rules fit");
_Static_assert(PM__ARRAY_SIZE(pm__seccomp_basic_denied) - 1 +
                       PM__ARRAY_SIZE(pm__seccomp_basic_denied_when) - 1 <=
                   PM__SECCOMP_NAMED_MAX,
               "basic's rules fit");

/* Every rule shows in what libseccomp exported: its call's number is
 * compared with, and an argument's value where the rule compares one.
 * 0, else -EPROTO. Out of memory, libseccomp 2.5.4's export was seen to
 * hand out, as a success, basic's program cut down to its architecture
 * checks and an allow: a filter that denies nothing
 * (tests/check_privileges.c test_seccomp_alloc_failures). A value is not
 * tied to its call here (the same value compared for another call would
 * stand in for it), nor is where a comparison leads: this catches a
 * program that lost rules, not one built wrong. Checked before the pins
 * are put in front (they compare with some of the same calls). */
static int check_named(int level, const pm__seccomp_prog *p)
{
    pm__seccomp_named r[PM__SECCOMP_NAMED_MAX];
    int n = pm__seccomp_named_rules(level, r, PM__ARRAY_SIZE(r));
    if (n < 0)
        return n;
    pm__seccomp_compared c;
    pm__seccomp_compares(p->insns, p->len, &c);
    for (int i = 0; i < n; i++)
        if (!pm__seccomp_compared_nr(&c, r[i].nr) ||
            (r[i].arg >= 0 && !pm__seccomp_compared_eq(&c, (unsigned)r[i].arg, r[i].val)))
            return -EPROTO;
    return 0;
}

int pm__seccomp_available(void)
{
    /* Built with it, but the library is loaded only now (deps.h): the
     * option is refused where it cannot be, not at the first spawn. */
    return pm__dep_load(PM__DEP_SECCOMP, NULL, 0) == 0;
}

int pm__seccomp_build(int level, int action, pid_t supervisor, pm__seccomp_prog *out)
{
    memset(out, 0, sizeof(*out));
    if ((level != PM_SECCOMP_BASIC && level != PM_SECCOMP_STRICT) ||
        (action != PM_SECCOMP_ERRNO && action != PM_SECCOMP_KILL) || supervisor <= 0)
        return -EINVAL;
    if (pm__dep_load(PM__DEP_SECCOMP, NULL, 0) < 0)
        return -ENOTSUP;
    uint32_t act = scmp_action(action);
    int rc = export_bpf(level, act, out);
    if (rc == 0)
        rc = check_named(level, out);
    if (rc == 0 && level == PM_SECCOMP_BASIC)
        rc = prepend_pins(act, out);
    if (rc < 0) {
        pm__seccomp_free(out);
        return rc;
    }
    /* Landlock scopes signals by process, tid or not: where the kernel has
     * it (6.12+), basic workers get it as well as the pins, which stay for
     * older kernels and for what Landlock does not cover (rlimits,
     * scheduling, I/O priority). */
    out->scope_signals = level == PM_SECCOMP_BASIC && pm__landlock_signal_scope_available();
    /* The stand-in must be there for the child to fill in, or strict
     * would refuse the crash handler's re-raise and basic every signal. */
    int found = 0;
    for (unsigned i = 0; i < out->len; i++)
        found += BPF_CLASS(out->insns[i].code) == BPF_JMP && out->insns[i].k == PM__SECCOMP_SELF;
    if (found == 0) {
        pm__seccomp_free(out);
        return -EPROTO;
    }
    return 0;
}

#else /* !HAVE_SECCOMP */

int pm__seccomp_available(void)
{
    return 0;
}

int pm__seccomp_build(int level, int action, pid_t supervisor, pm__seccomp_prog *out)
{
    (void)level;
    (void)action;
    (void)supervisor;
    memset(out, 0, sizeof(*out));
    return -ENOTSUP;
}

int pm__seccomp_named_rules(int level, pm__seccomp_named *out, size_t max)
{
    (void)level;
    (void)out;
    (void)max;
    return -ENOTSUP;
}

#endif /* HAVE_SECCOMP */

void pm__seccomp_free(pm__seccomp_prog *p)
{
    if (p == NULL)
        return;
    free(p->insns);
    p->insns = NULL;
    p->len = 0;
}

PM__READY_TEXT int pm__seccomp_load(pm__seccomp_prog *p)
{
    /* getpid is a system call in glibc >= 2.25 (no cached pid), so this is
     * our own pid even right after fork. */
    if (p->scope_signals) {
        int rc = pm__landlock_scope_signals();
        if (rc < 0)
            return rc;
    }
    uint32_t self = (uint32_t)getpid();
    for (unsigned i = 0; i < p->len; i++)
        if (BPF_CLASS(p->insns[i].code) == BPF_JMP && p->insns[i].k == PM__SECCOMP_SELF)
            p->insns[i].k = self;
    struct sock_fprog prog = {.len = p->len, .filter = p->insns};
    /* One thread (a fork child): no TSYNC needed. */
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
        return -errno;
    return 0;
}
