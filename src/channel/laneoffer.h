/* SPDX-License-Identifier: MIT */
/*
 * laneoffer.h - what the supervisor hands a worker to attach a direct lane
 * (doc/design.md, "Direct lanes", The hand-over): one record on the
 * worker's fd socket carrying the lane's three fds, and the frame on its
 * down ring that names the record and says who is at the other end.
 *
 * The record: 8 bytes ("PMLN", u32 sequence) and exactly three fds in one
 * SCM_RIGHTS message: the lane's memfd, this worker's doorbell, the
 * peer's doorbell. One sendmsg: a record is sent whole or not at all, so a
 * full socket can never leave a worker holding half a lane or a broken
 * sequence. Sequences are the channel's, shared with large messages'
 * records (bigmsg.h: numbered per channel and direction from 1).
 *
 * The offer (the frame's payload, little-endian, PM__LANE_OFFER_SIZE):
 *   0 u32 record sequence   4 u32 index (< PM__LANES_MAX)   8 u32 generation (not 0)
 *  12 u32 end (0 or 1)     16 u32 peer slot                 20 u64 peer incarnation
 */
#ifndef PM_LANEOFFER_H
#define PM_LANEOFFER_H

#include <stddef.h>
#include <stdint.h>

#define PM__LANE_OFFER_SIZE 28u
#define PM__LANE_RECORD 8u

typedef struct pm__lane_offer {
    uint32_t seq;
    uint32_t index;
    uint32_t gen;
    uint32_t end;
    uint32_t peer_slot;
    uint64_t peer_inc;
} pm__lane_offer;

void pm__lane_offer_encode(const pm__lane_offer *o, void *buf);
/* -EBADMSG unless len is PM__LANE_OFFER_SIZE and every field is in range
 * (sequence and generation not 0, index below PM__LANES_MAX, end 0 or 1);
 * *o is written only on success. The worker trusts its supervisor: this
 * is a check against a bug, not an attacker. */
int pm__lane_offer_decode(const void *buf, size_t len, pm__lane_offer *o);

/*
 * The revocation's wake-up (a PM__FT_LANE frame whose payload is
 * PM__LANE_REVOKED_SIZE bytes, little-endian): 0 u32 index, 4 u32
 * generation, the lane it is about. It follows, on the receiver's down
 * ring, every frame the revoked lane's dead peer sent through the hub, its
 * switch-over marker among them: the receiver finishes that lane at it,
 * even unmarked, and only that one (a wake-up for another lane, or an
 * offer, may be ahead of the marker: design.md, "Direct lanes",
 * Revocation). A payload of 0 bytes is the wake-up of a supervisor of
 * stop 44 and before, which named no lane.
 */
#define PM__LANE_REVOKED_SIZE 8u
void pm__lane_revoked_encode(uint32_t index, uint32_t gen, void *buf);
/* -EBADMSG unless len is PM__LANE_REVOKED_SIZE, the index below
 * PM__LANES_MAX and the generation not 0; *index and *gen written only
 * on success. */
int pm__lane_revoked_decode(const void *buf, size_t len, uint32_t *index, uint32_t *gen);

/* Sends the record of sequence seq with fds[0..3) (memfd, the receiver's
 * doorbell, the peer's doorbell) without blocking. 0, -EAGAIN (the socket
 * is full: nothing was sent), or -errno. The fds stay the caller's. */
int pm__lane_record_send(int sock, uint32_t seq, const int fds[3]);

/* Takes the next record off sock: 0 with fds[0..3) (close-on-exec, now
 * the caller's), -EAGAIN when none is there, -EPROTO when it is not the
 * lane record of sequence seq with exactly three fds (every fd it carried
 * is closed), or -errno. */
int pm__lane_record_recv(int sock, uint32_t seq, int fds[3]);

#endif /* PM_LANEOFFER_H */
