/* SPDX-License-Identifier: MIT */
/* secretmem.c - guarded memory for secrets, wiped or absent in a forked child; see secretmem.h. */
#define _GNU_SOURCE
#include "secretmem.h"

#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "os/dep_sodium.h"
#include "os/deps.h"

/* Blocks allocated and not yet freed (pm__secretmem_live). Atomic:
 * clusters may run in threads of one process (cipher.c locks its cache
 * of freed blocks for the same reason). */
static unsigned long live_blocks;

/*
 * sodium_malloc() puts the block at the end of its own page-aligned,
 * guard-paged region, so the page-rounded span of [p, p + size) covers only
 * this allocation. MADV_WIPEONFORK (Linux 4.14) gives a child zero pages
 * there; MADV_DONTFORK, the fallback, gives it no mapping at all. Either way a
 * fork-mode worker cannot read a key its supervisor holds (doc/reliability.md,
 * fault 33). madvise is the one system call here besides libsodium's own.
 */
void *pm__secretmem_alloc(size_t size)
{
    /* libsodium is loaded on first use (os/deps.h); its callers ask first
     * and say why, this keeps a missed ask from calling through NULL. */
    if (pm__dep_load(PM__DEP_SODIUM, NULL, 0) < 0) {
        errno = ELIBACC;
        return NULL;
    }
    void *p = sodium_malloc(size);
    if (p == NULL) {
        errno = errno > 0 ? errno : ENOMEM;
        return NULL;
    }
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p & ~(page - 1);
    uintptr_t hi = ((uintptr_t)p + size + page - 1) & ~(page - 1);
    if (madvise((void *)lo, hi - lo, MADV_WIPEONFORK) != 0 &&
        madvise((void *)lo, hi - lo, MADV_DONTFORK) != 0) {
        int saved = errno;
        sodium_free(p);
        errno = saved;
        return NULL;
    }
    sodium_memzero(p, size); /* sodium_malloc fills with 0xdb */
    __atomic_add_fetch(&live_blocks, 1, __ATOMIC_RELAXED);
    return p;
}

void pm__secretmem_free(void *p)
{
    if (p == NULL)
        return;
    sodium_free(p);
    __atomic_sub_fetch(&live_blocks, 1, __ATOMIC_RELAXED);
}

unsigned long pm__secretmem_live(void)
{
    return __atomic_load_n(&live_blocks, __ATOMIC_RELAXED);
}
