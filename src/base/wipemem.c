/* SPDX-License-Identifier: MIT */
/*
 * wipemem.c - memory for other workers' bytes in the supervisor: a private
 * anonymous mapping of its own that a fork-mode worker inherits zeroed,
 * wiped before it is unmapped.
 *
 * A fork-mode worker is a copy of the supervisor's address space: whatever
 * the supervisor keeps of another worker (a line it printed, a frame it
 * sent, a crash report) is readable by the new worker's code unless the
 * kernel drops it at the fork. malloc'd memory cannot be marked (its pages
 * are shared with other allocations); a mapping of its own can.
 * MADV_WIPEONFORK (Linux 4.14) gives the child zero pages; the fallback,
 * MADV_DONTFORK, gives it no mapping at all. Wiping in the child instead
 * would cost a copy-on-write fault per page on every fork.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <string.h>
#include <sys/mman.h>

void *pm__wipemem_alloc(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (madvise(p, size, MADV_WIPEONFORK) != 0 && madvise(p, size, MADV_DONTFORK) != 0) {
        int saved = errno;
        munmap(p, size);
        errno = saved;
        return NULL;
    }
    return p;
}

void pm__wipemem_free(void *p, size_t size)
{
    if (p == NULL)
        return;
    int saved = errno;
    explicit_bzero(p, size);
    munmap(p, size);
    errno = saved;
}
