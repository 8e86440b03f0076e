/* SPDX-License-Identifier: MIT */
/*
 * frame.h - the versioned header of everything that crosses a ring or a
 * peer link.
 *
 * Wire layout, little-endian, 56 bytes, then `len` payload bytes:
 *
 *   0  u8  version (PM__FRAME_VERSION)     8  u32 dst node    16 u64 dst incarnation
 *   1  u8  type                            12 u32 src node    24 u64 src incarnation
 *   2  u16 flags (0 or PM__FF_MEMFD)                          32 u64 request id
 *   4  u32 payload length                                     40 i64 deadline (ms, CLOCK_MONOTONIC, 0 = none)
 *                                                             48 i32 error (0 or -errno)
 *                                                             52 u16 dst host, 54 u16 src host
 *
 * A node is a slot number, or PM__NODE_MAIN for the supervisor. The source
 * fields are filled in by the hub from the ring a frame arrived on; what a
 * worker writes there is overwritten (see doc/design.md, "Trust rules").
 *
 * Hosts (version 2, peer links): 0 is this supervisor's own host; 1 ..
 * PM__MAX_HOSTS - 1 name other hosts of the mesh, by an index this supervisor
 * assigns when it first links with a host name and never reuses
 * (doc/design.md, "Life of a remote request"; the index -> name table is in
 * every worker's control block). When a frame names another host (dst_host or
 * src_host not 0) its node fields hold that host's address port instead of a
 * slot: 0 is the remote supervisor, so no host has to know another's base
 * port.
 */
#ifndef PM_FRAME_H
#define PM_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "base/address.h" /* PM__NODE_MAIN, PM__MAX_HOSTS: the node fields */

/* 2: the host fields (bytes 52..55, reserved in version 1). */
#define PM__FRAME_VERSION 2u
#define PM__FRAME_HDR_SIZE 56u
/* The only flag: the frame announces a message larger than a frame, whose
 * bytes travel as a sealed memfd on the channel's socket (bigmsg.h). Allowed
 * on MSG, REQUEST and REPLY, with exactly a PM__ANNOUNCE_SIZE payload. */
#define PM__FF_MEMFD 0x0001u

enum pm__frame_type {
    PM__FT_HELLO = 1,         /* worker -> hub: protocol version */
    PM__FT_INIT = 2,          /* hub -> worker: slot, address, init data */
    PM__FT_READY = 3,         /* worker -> hub */
    PM__FT_MSG = 4,           /* plain message */
    PM__FT_REQUEST = 5,
    PM__FT_REPLY = 6,
    PM__FT_UNDELIVERABLE = 7, /* hub -> sender: request_id, error */
    PM__FT_STOP = 8,          /* hub -> worker: please exit */
    /* Only on a peer link, between supervisors (doc/protocol.md 6, "Mesh
     * broadcast"); a worker's port drops them as malformed. */
    PM__FT_BCAST = 9,         /* fan out to your ready workers: request_id, deadline */
    PM__FT_BRESULT = 10,      /* one worker's result: src/src_inc, error, payload */
    PM__FT_BDONE = 11,        /* every result sent: payload u32 count */
    /* Flow control on a peer link (doc/protocol.md 6, "Flow control"). */
    PM__FT_CREDIT = 12,       /* frames and bytes for address port src left the
                                 receiver's hands: payload u32 frames, u32 bytes */
    PM__FT_FRAG = 13,         /* one fragment of a large message: payload the
                                 fragment header (linkfrag.h), then its bytes */
    /* Direct lanes between two local workers (doc/design.md, "Direct
     * lanes"); a link carries none of them (dropped as malformed). */
    PM__FT_LANE = 14,         /* hub -> worker: a lane offered (payload the offer,
                                 laneoffer.h), or, with no payload, a lane revoked:
                                 read the control block's lane_revoked */
    PM__FT_LANE_MARK = 15,    /* worker -> its lane's peer, through the hub: the
                                 switch-over marker, payload u32 generation */
    PM__FT_LANE_REPLY = 16,   /* hub -> worker: a reply to a request that came by a
                                 lane, too large for it; the hub holds no record of
                                 that request, so the requester matches it itself */
    PM__FT_MAX_ = PM__FT_LANE_REPLY
};

typedef struct pm__frame_hdr {
    uint8_t version;
    uint8_t type;
    uint16_t flags;
    uint32_t len;
    uint32_t dst;
    uint32_t src;
    uint64_t dst_inc;
    uint64_t src_inc;
    uint64_t request_id;
    int64_t deadline_ms;
    int32_t error;
    uint16_t dst_host;      /* PM__HOST_LOCAL or a remote host's index */
    uint16_t src_host;
} pm__frame_hdr;

/* Writes the 56-byte header into buf. The version is always the current. */
void pm__frame_encode(const pm__frame_hdr *h, void *buf);

/*
 * Decodes and validates the frame in buf[0..size): the header, then exactly
 * h->len payload bytes, at most max_payload. Returns 0, -EPROTO for an
 * unknown version, -EBADMSG for anything else malformed (short buffer, bad
 * type, unknown flags, a host index of PM__MAX_HOSTS or more, a length that
 * disagrees with size or exceeds max_payload). *out is written only on
 * success.
 */
int pm__frame_decode(const void *buf, size_t size, size_t max_payload, pm__frame_hdr *out);

/* The same, reading only the PM__FRAME_HDR_SIZE bytes at hdr (a private
 * copy) and checking them against a frame of size bytes. */
int pm__frame_decode_header(const void *hdr, size_t size, size_t max_payload, pm__frame_hdr *out);

#endif /* PM_FRAME_H */
