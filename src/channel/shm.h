/* SPDX-License-Identifier: MIT */
/*
 * shm.h - sealed memfds: every one procmesh makes (a ring's memory, a large
 * message) is made and sealed here; shared-memory objects for rings and
 * control blocks.
 */
#ifndef PM_SHM_H
#define PM_SHM_H

#include <stddef.h>
#include <stdint.h>

/* What a sealed memfd holds, which says its seals (shm.c spells them). */
enum {
    PM__SEAL_RING,   /* shared memory both ends write: no shrinking, no growing */
    PM__SEAL_FROZEN, /* a message: no writes either, once sealed */
};

/* A new, empty memfd that can be sealed, close-on-exec: the fd or -errno. */
int pm__memfd_new(const char *name);

/* Whether this process may size or write a memfd to len bytes: 0, or
 * -EFBIG above its RLIMIT_FSIZE (which would raise SIGXFSZ, whose default
 * action ends the process). */
int pm__memfd_size_ok(uint64_t len);

/* Adds kind's seals (and F_SEAL_SEAL: the set is final). 0 or -errno;
 * EBUSY for PM__SEAL_FROZEN while a writable shared mapping exists. */
int pm__memfd_seal(int fd, int kind);

/* 1 when fd has every seal of kind, 0 when not, -errno when fd cannot be
 * sealed at all (a pipe, a socket, an ordinary file: EINVAL). */
int pm__memfd_sealed(int fd, int kind);

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

/*
 * pm__shm_map for an object whose size the caller learns from its contents:
 * maps the whole object, which must be min to max bytes and sealed against
 * shrinking, and says its size in *size. One mapping where a first look at
 * a header and a second mapping of the size it names would take two (and
 * fault the header's page in twice). 0 or a negative errno.
 */
int pm__shm_map_whole(int fd, size_t min, size_t max, void **map, size_t *size);

/* Unmaps; keeps errno. NULL is accepted. */
void pm__shm_unmap(void *map, size_t size);

/* The page size, cached. */
size_t pm__page_size(void);

#endif /* PM_SHM_H */
