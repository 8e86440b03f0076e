/* SPDX-License-Identifier: MIT */
/* seccomp_filter.h - a worker's system-call filter: built in the supervisor, loaded in the child. */
#ifndef PM_SECCOMP_FILTER_H
#define PM_SECCOMP_FILTER_H

/* Not "seccomp.h": src/ is on the include path, and that name is
 * libseccomp's header. */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "seccomp_compares.h"

struct sock_filter;

/*
 * A classic BPF program for seccomp(2). libseccomp builds it in the
 * supervisor (it allocates and is not async-signal-safe); the child only
 * patches its own pid into its copy and hands it to the kernel.
 */
typedef struct pm__seccomp_prog {
    struct sock_filter *insns;
    unsigned short len;
    int scope_signals; /* basic, where the kernel has it: a Landlock domain scoping
                          signals is entered before the filter (landlock.h) */
} pm__seccomp_prog;

/* 1 when procmesh was built with libseccomp. */
int pm__seccomp_available(void);

/*
 * Builds the filter of `level` (PM_SECCOMP_BASIC or PM_SECCOMP_STRICT) for
 * workers of the supervisor `supervisor` (checked, > 0; the program never
 * names it: what a worker may signal or limit is pinned to the worker
 * itself, see seccomp_filter.c): a denied call fails with EPERM
 * (PM_SECCOMP_ERRNO) or kills the worker (PM_SECCOMP_KILL). 0, -EINVAL for
 * a bad argument, -ENOTSUP without libseccomp, -ENOMEM, -E2BIG (a program
 * the kernel would not take), -EPROTO (what libseccomp exported does not
 * compare with every call the rules name, or has no stand-in for the
 * worker's pid; or libseccomp's child ended without a verdict, or with
 * one that is not an errno), -ETIMEDOUT (libseccomp spun, or its child
 * could not be heard from: pm__seccomp_build_timeout_ms), fork's -EAGAIN
 * or -ENOMEM (libseccomp runs in a short-lived child, so that its crash
 * out of memory is not the supervisor's), or another -errno from
 * libseccomp; on failure *out holds nothing.
 */
int pm__seccomp_build(int level, int action, pid_t supervisor, pm__seccomp_prog *out);

/* How long the build waits for libseccomp's child before it kills it
 * (ms; 10,000). Only a hang reaches it; tests that make libseccomp hang
 * on purpose shorten it. */
extern int pm__seccomp_build_timeout_ms;

void pm__seccomp_free(pm__seccomp_prog *p);

/*
 * The rules of `level` on this architecture (the calls it has), the first
 * max of them into out: each call's number and, for a rule that compares
 * an argument's low word with a constant, the argument and the value (arg
 * -1 otherwise). What a built program must show (pm__seccomp_build
 * refuses one that does not: -EPROTO). Their count, -EINVAL for a bad
 * level, -ENOTSUP without libseccomp.
 */
typedef struct pm__seccomp_named {
    int nr;
    int arg;
    uint32_t val;
} pm__seccomp_named;
#define PM__SECCOMP_NAMED_MAX 256 /* above both tables' lengths */
int pm__seccomp_named_rules(int level, pm__seccomp_named *out, size_t max);

/*
 * In the child, after its credentials are final and no_new_privs is set:
 * enters the Landlock signal scope when p->scope_signals, writes the
 * child's own pid where the program compares with "self" (both levels let
 * a worker signal, renice or limit only itself) and loads it. Writes only
 * into the child's copy-on-write copy of p. Async-signal-safe. 0 or
 * -errno (EACCES: neither no_new_privs nor CAP_SYS_ADMIN).
 */
int pm__seccomp_load(pm__seccomp_prog *p);

/*
 * The calls `basic` refuses, in the filter's own order: whole calls
 * (NULL-terminated), and calls refused only when their argument number arg
 * (low 32 bits) equals val (ended by a NULL name; built with libseccomp
 * only). The filter is built from these tables; tests/check_privileges.c
 * also tries every row of them, so that a row added here is tried at once.
 */
extern const char *const pm__seccomp_basic_denied[];

typedef struct pm__seccomp_denied_when {
    const char *name;
    unsigned arg;
    unsigned long val;
} pm__seccomp_denied_when;

extern const pm__seccomp_denied_when pm__seccomp_basic_denied_when[];

#endif /* PM_SECCOMP_FILTER_H */
