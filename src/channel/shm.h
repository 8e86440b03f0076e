/* SPDX-License-Identifier: MIT */
/*
 * shm.h - sealed shared-memory objects (memfd) for rings and control blocks.
 */
#ifndef PM_SHM_H
#define PM_SHM_H

#include <stddef.h>

/*
 * Creates a memfd of `size` bytes (a multiple of the page size), seals it
 * against shrinking and growing, and maps it MAP_SHARED read-write.
 * The seals matter because the other end of every ring is untrusted: without
 * F_SEAL_SHRINK a peer could ftruncate the object and make our next access to
 * the mapping raise SIGBUS. F_SEAL_SEAL stops anyone from changing the set.
 * The fd is O_CLOEXEC. Returns 0 with *fd and *map set, or a negative errno
 * with nothing left open or mapped.
 */
int pm__shm_create(const char *name, size_t size, int *fd, void **map);

/*
 * Maps an inherited memfd created by pm__shm_create. Checks that the object
 * is at least `size` bytes and is sealed against shrinking, so that the
 * mapping can never fault. Returns 0 or a negative errno.
 */
int pm__shm_map(int fd, size_t size, void **map);

/* Unmaps; keeps errno. NULL is accepted. */
void pm__shm_unmap(void *map, size_t size);

/* The page size, cached. */
size_t pm__page_size(void);

#endif /* PM_SHM_H */
