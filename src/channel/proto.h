/* SPDX-License-Identifier: MIT */
/*
 * proto.h - the handshake between a worker and the hub, on top of frames.
 *
 *   worker -> hub   HELLO  payload: u32 protocol version
 *   hub -> worker   INIT   payload: see below
 *   worker -> hub   READY  no payload
 *
 * INIT payload (little-endian): u32 slot, u16 port, u16 zero, u64
 * incarnation, char system[64], char host[64] (NUL-padded), u32 init_len,
 * init_len bytes of init data.
 */
#ifndef PM_PROTO_H
#define PM_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "procmesh.h"

#include "frame.h"
#include "ring.h"

#define PM__PROTO_VERSION ((uint32_t)PM_PROTOCOL_VERSION)
/* The oldest version a supervisor takes (an exec'd worker built against
 * an older libprocmesh), and the first whose library takes direct lanes
 * (it knows PM__FT_LANE and reads the control block's lane_revoked). */
#define PM__PROTO_MIN_VERSION 2u
#define PM__PROTO_LANES_VERSION 3u
/* The first whose library reads a revocation's wake-up naming its lane
 * (laneoffer.h, PM__LANE_REVOKED_SIZE). */
#define PM__PROTO_LANE_NOTES_VERSION 4u
#define PM__INIT_FIXED 148u

typedef struct pm__init_msg {
    uint32_t slot;
    pm_address addr;
    const void *data; /* points into the decoded buffer */
    uint32_t len;
} pm__init_msg;

/* Bytes an INIT payload needs for init_len bytes of data. */
static inline size_t pm__init_size(size_t init_len)
{
    return PM__INIT_FIXED + init_len;
}

/* Writes the INIT payload into buf (pm__init_size(m->len) bytes). */
void pm__init_encode(const pm__init_msg *m, void *buf);

/* Decodes an INIT payload of size bytes: -EBADMSG unless it is well formed
 * (names valid and terminated, lengths consistent). */
int pm__init_decode(const void *buf, size_t size, pm__init_msg *m);

/* Sends one frame (header + payload) on a producer ring and publishes it.
 * -EAGAIN when the ring is full, -EMSGSIZE, -EBADMSG when poisoned. */
int pm__frame_send(pm__ring *r, const pm__frame_hdr *h, const void *payload, size_t len);

/* Peeks the next frame of a consumer ring into a private copy of its header
 * (*payload points into shared memory: copy before parsing). Returns 1, 0
 * when empty, -EBADMSG for a ring fault (poisoned), or -EPROTO / -EINVAL for
 * a malformed frame that was consumed and must be counted and dropped. */
int pm__frame_recv(pm__ring *r, size_t max_payload, pm__frame_hdr *h, const void **payload);

#endif /* PM_PROTO_H */
