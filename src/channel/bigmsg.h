/* SPDX-License-Identifier: MIT */
/*
 * bigmsg.h - messages larger than a frame: a sealed memfd handed over the
 * channel's socket (SCM_RIGHTS), announced by a ring frame.
 *
 * A message above PM_MAX_PAYLOAD travels as a memfd that holds exactly its
 * bytes, sealed F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL
 * before it leaves its sender. The sender first sends one record on the
 * channel's SOCK_SEQPACKET socket (8 bytes: "PMFD", u32 sequence; exactly one
 * fd in SCM_RIGHTS), then the frame: type MSG, REQUEST or REPLY with flag
 * PM__FF_MEMFD and a 16-byte payload, the announcement (u64 length, u32 the
 * same sequence, u32 zero). Records are numbered per channel and direction
 * (1, 2, ...), so a record sent without its frame shows up as a sequence
 * mismatch at the next announcement. The receiver takes exactly one record
 * per announcement and checks it (pm__bigmsg_recv, pm__bigmsg_check)
 * before it maps anything.
 */
#ifndef PM_BIGMSG_H
#define PM_BIGMSG_H

#include <stddef.h>
#include <stdint.h>

/* Records a sender may have sent ahead of the frames that announce them:
 * its large messages whose frames the receiving end has not consumed yet (a
 * record goes out just before its frame). A worker waits before its next
 * record while this many of its large frames are unconsumed in its up ring
 * (node_messaging.c); the hub takes every record off its socket as it arrives and fences
 * a worker that goes past it (port.c): so at most this many of a worker's fds
 * wait at the hub, none for long in the kernel, whatever the worker does to
 * its own socket (doc/design.md, "Life of a large message"). */
#define PM__BIGMSG_AHEAD_MAX 8u

#define PM__ANNOUNCE_SIZE 16u
#define PM__BIGMSG_RECORD 8u
/* The largest message a channel can announce (frame lengths are u32 on the
 * receiving side's pm__frame_hdr). */
#define PM__BIGMSG_MAX ((size_t)UINT32_MAX)

/* The sequence after seq (0 is never used: it means "none yet"). */
static inline uint32_t pm__bigmsg_next(uint32_t seq)
{
    return seq == UINT32_MAX ? 1 : seq + 1;
}

typedef struct pm__announce {
    uint64_t len;
    uint32_t seq;
} pm__announce;

/* Pure codec of the announcement. decode: -EBADMSG unless len is above
 * PM_MAX_PAYLOAD and at most PM__BIGMSG_MAX, seq is not 0 and the reserved
 * word is 0. buf must be a private copy (PM__ANNOUNCE_SIZE bytes). */
void pm__announce_encode(const pm__announce *a, void *buf);
int pm__announce_decode(const void *buf, size_t size, pm__announce *a);

/* A sealed memfd holding data[0..len). Returns the fd (O_CLOEXEC) or a
 * negative errno with nothing left open. */
int pm__bigmsg_create(const void *data, size_t len);

/* Checks a received fd: a memfd (F_GET_SEALS works: anything else is
 * foreign) with all four seals, exactly len bytes, len <= max, open for
 * reading, on tmpfs (not hugetlbfs) and with no hole in [0, len): every
 * page was paid for by its sender (doc/design.md, "The sender pays"). 0,
 * or -EPROTO naming nothing more (the caller counts a protocol fault). */
int pm__bigmsg_check(int fd, uint64_t len, size_t max);

/* The same without the scan for holes, which walks every page (its cost
 * grows with the length: doc/benchmarks.md): for a worker taking an fd from
 * its hub, which scanned every fd it passes on (pm__bigmsg_check at the
 * sending host's hub) or wrote it whole itself (main's, a peer link's), and
 * F_SEAL_WRITE (which forbids punching a hole) has held since. */
int pm__bigmsg_check_from_hub(int fd, uint64_t len, size_t max);

/* Maps a checked fd read-only. 0 with *map, or -errno. */
int pm__bigmsg_map(int fd, size_t len, const void **map);

/* Sends the record for sequence seq with fd on sock, without blocking and
 * without SIGPIPE. 0, -EAGAIN (the socket is full), or -errno. The caller
 * keeps its fd either way (the kernel holds a reference of its own). */
int pm__bigmsg_send(int sock, int fd, uint32_t seq);

/* Receives one record without blocking: 0 with *fd when it is a record for
 * seq carrying exactly one fd; -EAGAIN when there is none (for an announced
 * frame: a protocol fault, the sender sends the record first); -EPROTO for
 * anything else (wrong size or sequence, no fd, more than one fd, a
 * truncated control message). Every fd received is closed on failure. */
int pm__bigmsg_recv(int sock, uint32_t seq, int *fd);

#endif /* PM_BIGMSG_H */
