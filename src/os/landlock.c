/* SPDX-License-Identifier: MIT */
/* landlock.c - Landlock signal scoping for workers (see landlock.h), by raw system calls. */
#define _GNU_SOURCE
#include "base/internal.h"
#include "landlock.h"

#include <stdint.h>
#include <sys/syscall.h>

/* The headers of older systems (Debian 12's) lack the scoped field and the
 * system-call numbers: the kernel's ABI, spelled out here. A kernel that
 * does not know `scoped` refuses the larger struct (E2BIG), which the
 * version check below never lets happen. */
struct pm__landlock_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

#define PM__LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#define PM__LANDLOCK_SCOPE_SIGNAL (1ULL << 1)
#define PM__LANDLOCK_ABI_SCOPE_SIGNAL 6

#if defined(SYS_landlock_create_ruleset) && defined(SYS_landlock_restrict_self)
#define PM__NR_CREATE SYS_landlock_create_ruleset
#define PM__NR_RESTRICT SYS_landlock_restrict_self
#elif defined(__x86_64__) || defined(__aarch64__) || defined(__riscv)
/* The same numbers on every architecture (the generic table's). */
#define PM__NR_CREATE 444
#define PM__NR_RESTRICT 446
#endif

#ifdef PM__NR_CREATE

int pm__landlock_signal_scope_available(void)
{
    /* The ABI version, or -1 with ENOSYS/EOPNOTSUPP (see landlock.h). */
    long abi = syscall(PM__NR_CREATE, NULL, 0, PM__LANDLOCK_CREATE_RULESET_VERSION);
    return abi >= PM__LANDLOCK_ABI_SCOPE_SIGNAL;
}

int pm__landlock_scope_signals(void)
{
    struct pm__landlock_ruleset_attr attr = {0, 0, PM__LANDLOCK_SCOPE_SIGNAL};
    long fd = syscall(PM__NR_CREATE, &attr, sizeof(attr), 0);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (syscall(PM__NR_RESTRICT, (int)fd, 0) < 0)
        rc = -errno;
    pm__close((int)fd);
    return rc;
}

#else /* no Landlock numbers for this architecture */

int pm__landlock_signal_scope_available(void)
{
    return 0;
}

int pm__landlock_scope_signals(void)
{
    return -ENOSYS;
}

#endif
