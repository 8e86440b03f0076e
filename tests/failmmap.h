/* SPDX-License-Identifier: MIT */
/*
 * failmmap.h - this program's mmap: the real call, or, while
 * pm_test_mmap_fail_len is set, a refusal (ENOMEM) of every mapping of
 * exactly that length, as when the address space is full (the hub's
 * scratch buffer is PM_MAX_PAYLOAD; a large message main cannot map).
 * Defined in the program, it is the one the library calls there (glibc's
 * own allocator maps through its internal entry, not this one). One file
 * of a test program includes it.
 */
#ifndef PM_TESTS_FAILMMAP_H
#define PM_TESTS_FAILMMAP_H

#include <errno.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

static size_t pm_test_mmap_fail_len;

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (pm_test_mmap_fail_len != 0 && len == pm_test_mmap_fail_len) {
        errno = ENOMEM;
        return MAP_FAILED;
    }
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

#endif
