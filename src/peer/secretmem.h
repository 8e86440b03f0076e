/* SPDX-License-Identifier: MIT */
/*
 * secretmem.h - the one allocator of secret memory (secretmem.c): keys of
 * the handshake, the transport and the keyring, and the daemon's own key
 * buffers: the daemon calls these two through the shared library
 * (PM__DAEMON_API), so its process has this allocator once.
 */
#ifndef PM_SECRETMEM_H
#define PM_SECRETMEM_H

#include <stddef.h>

#include "base/internal.h"

/*
 * A zeroed block of size bytes in libsodium's guarded, mlock'ed memory that
 * a forked child sees zeroed or not at all (MADV_WIPEONFORK, else
 * MADV_DONTFORK). NULL with errno set. Needs sodium_init() done.
 */
PM__DAEMON_API void *pm__secretmem_alloc(size_t size);

/* Frees a block of pm__secretmem_alloc (sodium_free, which wipes it). Only
 * in the process that allocated it: in a forked child the canary in front
 * of the block is zeros (or unmapped) and sodium_free would abort; the
 * caller keeps the owner (a fork generation, a pid) and leaks the child's
 * mapping of zeros, which dies with the child or its exec. NULL: nothing. */
PM__DAEMON_API void pm__secretmem_free(void *p);

/* The blocks of pm__secretmem_alloc this process holds: what a test reads
 * to see that connections give their key memory back (cipher.c keeps a
 * few freed blocks, wiped, for the next handshake: they count here). A
 * forked child's count is its parent's at the fork. */
unsigned long pm__secretmem_live(void);

#endif /* PM_SECRETMEM_H */
