/* SPDX-License-Identifier: MIT */
/*
 * frame.h - the versioned header of everything that crosses a ring (and,
 * later, a peer link).
 *
 * Wire layout, little-endian, 56 bytes, then `len` payload bytes:
 *
 *   0  u8  version (PM__FRAME_VERSION)     8  u32 dst node    16 u64 dst incarnation
 *   1  u8  type                            12 u32 src node    24 u64 src incarnation
 *   2  u16 flags (none defined: must be 0)                    32 u64 request id
 *   4  u32 payload length                                     40 i64 deadline (ms, CLOCK_MONOTONIC, 0 = none)
 *                                                             48 i32 error (0 or -errno)
 *                                                             52 u32 reserved (must be 0)
 *
 * A node is a slot number, or PM__NODE_MAIN for the supervisor. The source
 * fields are filled in by the hub from the ring a frame arrived on; what a
 * worker writes there is overwritten (see doc/design.md, "identity").
 */
#ifndef PM_FRAME_H
#define PM_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define PM__FRAME_VERSION 1u
#define PM__FRAME_HDR_SIZE 56u
#define PM__NODE_MAIN 0xFFFFFFFFu

enum pm__frame_type {
    PM__FT_HELLO = 1,         /* worker -> hub: protocol version */
    PM__FT_INIT = 2,          /* hub -> worker: slot, address, init data */
    PM__FT_READY = 3,         /* worker -> hub */
    PM__FT_MSG = 4,           /* plain message */
    PM__FT_REQUEST = 5,
    PM__FT_REPLY = 6,
    PM__FT_UNDELIVERABLE = 7, /* hub -> sender: request_id, error */
    PM__FT_STOP = 8,          /* hub -> worker: please exit */
    PM__FT_MAX_ = PM__FT_STOP
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
} pm__frame_hdr;

/* Writes the 56-byte header into buf. The version is always the current. */
void pm__frame_encode(const pm__frame_hdr *h, void *buf);

/*
 * Decodes and validates the frame in buf[0..size): the header, then exactly
 * h->len payload bytes, at most max_payload. Returns 0, -EPROTO for an
 * unknown version, -EBADMSG for anything else malformed (short buffer, bad
 * type, unknown flags, non-zero reserved bits, a length that disagrees with
 * size or exceeds max_payload). *out is written only on success.
 */
int pm__frame_decode(const void *buf, size_t size, size_t max_payload, pm__frame_hdr *out);

/* The same, reading only the PM__FRAME_HDR_SIZE bytes at hdr (a private
 * copy) and checking them against a frame of size bytes. */
int pm__frame_decode_header(const void *hdr, size_t size, size_t max_payload, pm__frame_hdr *out);

/* A name for a frame type, for logs. */
const char *pm__frame_type_name(unsigned type);

#endif /* PM_FRAME_H */
