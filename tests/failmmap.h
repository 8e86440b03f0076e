/* SPDX-License-Identifier: MIT */
/*
 * failmmap.h - this program's mmap: the real call, or, while
 * pm_test_mmap_fail_len is set, a refusal (ENOMEM) of every mapping of
 * exactly that length, as when the address space is full (the hub's
 * scratch buffer is PM_MAX_PAYLOAD; a large message main cannot map).
 * Defined in the program, it is the one the library calls there (glibc's
 * own allocator maps through its internal entry, not this one). One file
 * of a test program includes it.
 *
 * pm_test_mmap_fail_code, when its end is set, narrows the refusal to
 * mappings asked for by code in [code[0], code[1]) (the caller's return
 * address), after pm_test_mmap_fail_skip of them were let through:
 * libsodium's sodium_malloc maps each block itself (pm_test_lib_span
 * finds a library's span), and a shared library reaches this mmap only
 * when the program exports it (PM_FAILMMAP_EXPORT defined before the
 * include, and Makefile.am's -Wl,--export-dynamic-symbol=mmap).
 */
#ifndef PM_TESTS_FAILMMAP_H
#define PM_TESTS_FAILMMAP_H

#include <errno.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

static size_t pm_test_mmap_fail_len;
__attribute__((unused)) static uintptr_t pm_test_mmap_fail_code[2];
__attribute__((unused)) static unsigned pm_test_mmap_fail_skip;

/* 1 when the mapping asked for from ret is one to refuse. */
static int failmmap_refuse(size_t len, const void *ret)
{
    if (pm_test_mmap_fail_len == 0 || len != pm_test_mmap_fail_len)
        return 0;
    if (pm_test_mmap_fail_code[1] != 0) {
        uintptr_t at = (uintptr_t)ret;
        if (at < pm_test_mmap_fail_code[0] || at >= pm_test_mmap_fail_code[1])
            return 0;
        if (pm_test_mmap_fail_skip > 0) {
            pm_test_mmap_fail_skip--;
            return 0;
        }
    }
    return 1;
}

/* The span [span[0], span[1]) of the mappings of /proc/self/maps whose
 * path contains lib; 0, or -1 when none is mapped. */
__attribute__((unused)) static int pm_test_lib_span(const char *lib, uintptr_t span[2])
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (f == NULL)
        return -1;
    char line[512];
    span[0] = UINTPTR_MAX;
    span[1] = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        if (strstr(line, lib) == NULL || sscanf(line, "%lx-%lx", &lo, &hi) != 2)
            continue;
        if (lo < span[0])
            span[0] = lo;
        if (hi > span[1])
            span[1] = hi;
    }
    fclose(f);
    return span[1] != 0 ? 0 : -1;
}

/* Hidden (the build's -fvisibility=hidden) unless the program asks, as
 * failalloc.h's: PM_FAILMMAP_EXPORT defined before the include. */
#ifdef PM_FAILMMAP_EXPORT
__attribute__((visibility("default")))
#endif
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (failmmap_refuse(len, __builtin_return_address(0))) {
        errno = ENOMEM;
        return MAP_FAILED;
    }
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

#endif
