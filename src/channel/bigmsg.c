/* SPDX-License-Identifier: MIT */
/* bigmsg.c - large messages as sealed memfds over the channel's socket; see bigmsg.h. */
#define _GNU_SOURCE
#include "base/internal.h"
#include "bigmsg.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "base/le.h"
#include "os/fdpass.h"
#include "shm.h"

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

#define RECORD_MAGIC 0x44464d50u /* "PMFD" */

void pm__announce_encode(const pm__announce *a, void *buf)
{
    unsigned char *p = buf;
    pm__put64(p, a->len);
    pm__put32(p + 8, a->seq);
    pm__put32(p + 12, 0);
}

int pm__announce_decode(const void *buf, size_t size, pm__announce *a)
{
    const unsigned char *p = buf;
    if (buf == NULL || size != PM__ANNOUNCE_SIZE)
        return -EBADMSG;
    uint64_t len = pm__get64(p);
    uint32_t seq = pm__get32(p + 8);
    if (len <= PM_MAX_PAYLOAD || len > PM__BIGMSG_MAX || seq == 0 || pm__get32(p + 12) != 0)
        return -EBADMSG;
    a->len = len;
    a->seq = seq;
    return 0;
}

int pm__bigmsg_create(const void *data, size_t len)
{
    int err;
    int fd = pm__memfd_new("procmesh-msg");
    if (fd < 0)
        return fd;
    /* write(), not a mapping: F_SEAL_WRITE fails with EBUSY while any
     * writable shared mapping of the object exists. */
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, (const char *)data + done, len - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            err = -errno;
            goto fail;
        }
        done += (size_t)n;
    }
    if ((err = pm__memfd_seal(fd, PM__SEAL_FROZEN)) < 0)
        goto fail;
    return fd;
fail:
    pm__close(fd);
    return err;
}

/* Whether fd's pages [0, len) all exist: the sender has paid for them. A
 * hole would be allocated by the first reader that touches it and charged
 * to the reader's memory cgroup, while the sender's reference keeps the
 * pages alive: a way round the sender's memory.max. SEEK_HOLE, not
 * st_blocks: blocks allocated past the end with FALLOC_FL_KEEP_SIZE count
 * in st_blocks and cover nothing inside. A tmpfs page out on swap is data,
 * not a hole (shmem reports swap entries as data). Only called on a memfd
 * sealed against writes, which also forbids FALLOC_FL_PUNCH_HOLE: no hole
 * can appear after the check. */
static int paid_for(int fd, uint64_t len)
{
    /* Moves the file offset the sender shares; nobody reads the sealed
     * memfd through it (write is sealed, readers map it or use pread). */
    off_t hole = lseek(fd, 0, SEEK_HOLE);
    return hole >= 0 && (uint64_t)hole >= len;
}

int pm__bigmsg_check_from_hub(int fd, uint64_t len, size_t max)
{
    struct stat st;
    /* A pipe, socket or ordinary file fails F_GET_SEALS (EINVAL): foreign. */
    if (pm__memfd_sealed(fd, PM__SEAL_FROZEN) != 1)
        return -EPROTO;
    /* Sealed against shrinking: the size cannot change after this fstat,
     * so a mapping of len bytes can never fault (no SIGBUS). */
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < 0 ||
        (uint64_t)st.st_size != len || len > max)
        return -EPROTO;
    /* Readable: the same memfd reopened write-only (/proc/self/fd/N,
     * O_WRONLY) passes everything else, and every receiver's read-only
     * mapping of it fails with EACCES. */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || (fl & O_ACCMODE) == O_WRONLY)
        return -EPROTO;
    /* A tmpfs memfd only: a hugetlbfs one (MFD_HUGETLB) is sealable too,
     * but its pages come from the hugetlb pool, outside memory.max. */
    struct statfs sf;
    if (fstatfs(fd, &sf) < 0 || sf.f_type != TMPFS_MAGIC)
        return -EPROTO;
    return 0;
}

int pm__bigmsg_check(int fd, uint64_t len, size_t max)
{
    int rc = pm__bigmsg_check_from_hub(fd, len, max);
    if (rc == 0 && !paid_for(fd, len))
        rc = -EPROTO;
    return rc;
}

int pm__bigmsg_map(int fd, size_t len, const void **map)
{
    void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -errno;
    *map = p;
    return 0;
}

int pm__bigmsg_send(int sock, int fd, uint32_t seq)
{
    unsigned char rec[PM__BIGMSG_RECORD];
    pm__put32(rec, RECORD_MAGIC);
    pm__put32(rec + 4, seq);
    ssize_t n = pm__fdpass_send(sock, rec, sizeof(rec), &fd, 1);
    if (n < 0)
        return (int)n;
    return n == (ssize_t)sizeof(rec) ? 0 : -EIO;
}

int pm__bigmsg_recv(int sock, uint32_t seq, int *out)
{
    unsigned char rec[PM__BIGMSG_RECORD + 1];
    int fds[16];
    size_t nfds;
    ssize_t n = pm__fdpass_recv(sock, rec, sizeof(rec), fds, PM__ARRAY_SIZE(fds), &nfds);
    if (n < 0)
        return (int)n;
    if (n != PM__BIGMSG_RECORD || pm__get32(rec) != RECORD_MAGIC || pm__get32(rec + 4) != seq ||
        nfds != 1) {
        for (size_t i = 0; i < nfds; i++)
            pm__close(fds[i]);
        return -EPROTO;
    }
    *out = fds[0];
    return 0;
}
