/* SPDX-License-Identifier: MIT */
/* shm.c - sealed memfds: the one maker and the seal sets; rings' shared memory. */
#define _GNU_SOURCE
#include "base/internal.h"
#include "shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif
#ifndef MFD_ALLOW_SEALING
#define MFD_ALLOW_SEALING 0x0002U
#endif

/* The seal sets, the one place they are spelled. A ring's memory: both
 * ends write it, nobody changes its size. A message: nobody changes it at
 * all once it is sealed. F_SEAL_SEAL in both: the set is final. */
#define PM__SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
#define PM__SEALS_FROZEN (PM__SEALS | F_SEAL_WRITE)

size_t pm__page_size(void)
{
    static size_t page;
    if (page == 0) {
        long p = sysconf(_SC_PAGESIZE);
        page = p > 0 ? (size_t)p : 4096;
    }
    return page;
}

int pm__memfd_new(const char *name)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    return fd < 0 ? -errno : fd;
}

/* Checked before a memfd is sized or written, not left to the kernel: past
 * RLIMIT_FSIZE, ftruncate and write fail with EFBIG only after raising
 * SIGXFSZ, whose default action ends the process: a supervisor under
 * systemd's LimitFSIZE= would die of a peer's large message, a worker
 * given `fsize` of its own pm_node_send. A library does not take over
 * the signal's disposition; it asks first. The limit is read each time:
 * it can change under us (prlimit). */
int pm__memfd_size_ok(uint64_t len)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_FSIZE, &r) < 0 || r.rlim_cur == RLIM_INFINITY)
        return 0;
    return len > (uint64_t)r.rlim_cur ? -EFBIG : 0;
}

static int seals_of(int kind)
{
    return kind == PM__SEAL_FROZEN ? PM__SEALS_FROZEN : PM__SEALS;
}

int pm__memfd_seal(int fd, int kind)
{
    return fcntl(fd, F_ADD_SEALS, seals_of(kind)) < 0 ? -errno : 0;
}

int pm__memfd_sealed(int fd, int kind)
{
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0)
        return -errno;
    return (seals & seals_of(kind)) == seals_of(kind);
}

int pm__shm_create(const char *name, size_t size, int *fd_out, void **map_out)
{
    int fd = -1;
    void *map = MAP_FAILED;
    int err;

    if (size == 0 || size % pm__page_size() != 0)
        return -EINVAL;
    /* Asked first: the supervisor makes every channel, and past its
     * RLIMIT_FSIZE the ftruncate below would end it with SIGXFSZ. */
    if ((err = pm__memfd_size_ok(size)) < 0)
        return err;
    fd = pm__memfd_new(name);
    if (fd < 0)
        return fd;
    if (ftruncate(fd, (off_t)size) < 0) {
        err = -errno;
        goto fail;
    }
    if ((err = pm__memfd_seal(fd, PM__SEAL_RING)) < 0)
        goto fail;
    map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        err = -errno;
        goto fail;
    }
    *fd_out = fd;
    *map_out = map;
    return 0;

fail:
    pm__close(fd);
    return err;
}

/* Maps size bytes of fd once its object is known to hold them and to be
 * sealed against shrinking. */
PM__READY_TEXT static int map_checked(int fd, size_t size, void **map_out)
{
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0)
        return -errno;
    /* Without the shrink seal a peer could truncate the object under us. */
    if ((seals & F_SEAL_SHRINK) == 0)
        return -EPERM;
    void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
        return -errno;
    *map_out = map;
    return 0;
}

int pm__shm_map(int fd, size_t size, void **map_out)
{
    struct stat st;
    if (fd < 0 || size == 0)
        return -EINVAL;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (st.st_size < 0 || (size_t)st.st_size < size)
        return -EINVAL;
    return map_checked(fd, size, map_out);
}

PM__READY_TEXT int pm__shm_map_whole(int fd, size_t min, size_t max, void **map_out, size_t *size_out)
{
    struct stat st;
    if (fd < 0 || min == 0 || max < min)
        return -EINVAL;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (st.st_size < 0 || (size_t)st.st_size < min || (size_t)st.st_size > max)
        return -EINVAL;
    int rc = map_checked(fd, (size_t)st.st_size, map_out);
    if (rc == 0)
        *size_out = (size_t)st.st_size;
    return rc;
}

void pm__shm_unmap(void *map, size_t size)
{
    if (map != NULL && map != MAP_FAILED) {
        int saved = errno;
        (void)munmap(map, size);
        pm__errno_restore(saved);
    }
}
