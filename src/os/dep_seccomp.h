/* SPDX-License-Identifier: MIT */
/* dep_seccomp.h - <seccomp.h> for the filter builder: each libseccomp function it calls reached through the table deps.c fills on first use. */
#ifndef PM_DEP_SECCOMP_H
#define PM_DEP_SECCOMP_H

#include "config.h"

#ifdef HAVE_SECCOMP
#include <seccomp.h>

/* Every libseccomp function the library calls (seccomp_filter.c). */
#define PM__SECCOMP_FNS(X)                                                                         \
    X(seccomp_arch_native)                                                                         \
    X(seccomp_attr_set)                                                                            \
    X(seccomp_export_bpf)                                                                          \
    X(seccomp_init)                                                                                \
    X(seccomp_release)                                                                             \
    X(seccomp_rule_add_array)                                                                      \
    X(seccomp_syscall_resolve_name)                                                                \
    X(seccomp_syscall_resolve_name_arch)

#if PM_LAZY_DEPS
#ifndef PM__DEP_MEMBER
/* A table member: a pointer of the function's own type. */
#define PM__DEP_MEMBER(f) __typeof__(f) *f;
#endif
struct pm__seccomp_fns {
    PM__SECCOMP_FNS(PM__DEP_MEMBER)
};
/* The table, libseccomp loaded on first use (os/deps.c). A caller that can
 * do without it asks pm__dep_load (os/deps.h) first; reached without that
 * and unloadable, it aborts with the reason rather than call through a
 * null pointer. */
const struct pm__seccomp_fns *pm__seccomp(void);

#ifndef PM__DEPS_IMPL
#define PM__SECCOMP(f) (pm__seccomp()->f)
#define seccomp_arch_native PM__SECCOMP(seccomp_arch_native)
#define seccomp_attr_set PM__SECCOMP(seccomp_attr_set)
#define seccomp_export_bpf PM__SECCOMP(seccomp_export_bpf)
#define seccomp_init PM__SECCOMP(seccomp_init)
#define seccomp_release PM__SECCOMP(seccomp_release)
#define seccomp_rule_add_array PM__SECCOMP(seccomp_rule_add_array)
#define seccomp_syscall_resolve_name PM__SECCOMP(seccomp_syscall_resolve_name)
#define seccomp_syscall_resolve_name_arch PM__SECCOMP(seccomp_syscall_resolve_name_arch)
#endif /* !PM__DEPS_IMPL */
#endif /* PM_LAZY_DEPS */
#endif /* HAVE_SECCOMP */

#endif /* PM_DEP_SECCOMP_H */
