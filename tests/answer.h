/* SPDX-License-Identifier: MIT */
/*
 * answer.h - makes one system call give a chosen answer, for the tests of
 * error paths no kernel takes on demand (a futex wait refused, an F_GETFL
 * that fails, a sendmsg that "succeeds" sending nothing, as a sandbox's
 * policy may answer a call it neuters).
 *
 * pm_test_answer installs a seccomp filter on the calling process (and what
 * it forks and execs from then on: call it in a child of the test) that
 * answers system call nr with -err (err 0: the call returns 0 having done
 * nothing), or only the calls whose argument arg has value as its low 32
 * bits (arg -1: every call of nr), and lets every other call through.
 * Filters stack: two calls answer two system calls. 0 once installed;
 * -errno when this kernel takes no filter, -ENOSYS on an architecture the
 * filter does not know (the test then says it skipped, never passes
 * silently).
 */
#ifndef PM_TEST_ANSWER_H
#define PM_TEST_ANSWER_H

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define PM_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define PM_AUDIT_ARCH AUDIT_ARCH_AARCH64
#elif defined(__i386__)
#define PM_AUDIT_ARCH AUDIT_ARCH_I386
#endif

#define PM_ANSWER_ANY (-1)

static inline int pm_test_answer(long nr, int arg, uint32_t value, int err)
{
#ifdef PM_AUDIT_ARCH
    struct sock_filter prog[10];
    unsigned short n = 0;
    /* Another architecture's numbers (an x32 or i386 call on x86-64) mean
     * other calls: let them through. */
    prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
    prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PM_AUDIT_ARCH, 1, 0);
    prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 1, 0);
    prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    if (arg >= 0 && arg < 6) {
        /* The argument's low word: BPF loads 32 bits. */
        uint32_t at = (uint32_t)(offsetof(struct seccomp_data, args) + 8u * (unsigned)arg +
                                 (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? 4u : 0u));
        prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, at);
        prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 1, 0);
        prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    }
    prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K,
                                             SECCOMP_RET_ERRNO | ((uint32_t)err & SECCOMP_RET_DATA));
    struct sock_fprog fprog = {.len = n, .filter = prog};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0)
        return -errno;
    return 0;
#else
    (void)nr;
    (void)arg;
    (void)value;
    (void)err;
    return -ENOSYS;
#endif
}

#endif
