/* SPDX-License-Identifier: MIT */
/* record.h - the peer link record layer: length-prefixed encrypted records over a Noise transport, and their incremental decoder. */
#ifndef PM_RECORD_H
#define PM_RECORD_H

/*
 * After the handshake a link carries records (doc/protocol.md, "Records"):
 *
 *   u32 length (little-endian) || ciphertext[length]
 *
 * The ciphertext is one to PM__REC_MAX_SEGS Noise transport messages
 * ("segments"): every segment but the last holds exactly
 * PM__REC_SEG_PLAIN plaintext bytes (PM__NOISE_MAX_MSG ciphertext bytes),
 * the last 1..PM__REC_SEG_PLAIN. Each segment is encrypted with the 4 length
 * bytes as associated data, so the length is authenticated. The plaintext
 * is "u8 type || body":
 *
 *   FRAMES     (1)  one or more "u32 len || frame[len]", 1 <= len <=
 *                   PM__REC_MAX_FRAME, filling the body exactly (batching)
 *   HEARTBEAT  (2)  empty body, or an echo: u8 kind (1 PING, 2 PONG) || u64
 *                   stamp (a PING's stamp comes back in a PONG: the RTT)
 *   CLOSE      (3)  u16 reason; the last record its sender sends
 *   REKEY      (4)  empty body; the sender Rekey()s its sending key right
 *                   after this record, the receiver its receiving key
 *                   right after reading it
 *
 * Pure: no sockets, no clock. The decoder is fed bytes as they arrive and
 * never allocates: its buffer of PM__REC_MAX_CT bytes is allocated once with
 * the link, and a length above it is refused as soon as its 4 bytes are in.
 *
 * Errors (negative errno). Every error but -ENOBUFS, -EINVAL and the
 * sender's -EOVERFLOW kills its direction: every later call of that
 * direction returns it again, and the link must be closed. A receiving
 * error leaves sending usable (the CLOSE 1 that reports it still goes
 * out), except -EBADMSG: a segment that does not authenticate wipes the
 * transport's keys, both directions, and every seal then fails with it.
 *   -EMSGSIZE     a length on the wire above PM__REC_MAX_CT
 *   -EPROTO       a malformed record: a length that is no valid
 *                 segmentation, an unknown type, a body of the wrong size,
 *                 a bad frame length
 *   -EBADMSG      a segment that does not authenticate: tampered,
 *                 truncated, replayed, reordered, reflected
 *   -ECONNRESET   end of stream without a CLOSE record (truncation)
 *   -EOVERFLOW    receiving: the nonce limit was reached. Sending: the
 *                 record would leave no nonce for the CLOSE record; the
 *                 state stays usable for pm__rec_seal_close only
 *   -EPIPE        sending after our CLOSE
 *   -ENOBUFS      the output buffer is too small (nothing changed)
 *   -EINVAL       a caller error
 */

#include <stddef.h>
#include <stdint.h>

#include "noise.h"

#define PM__REC_HDR 4u
#define PM__REC_SEG_CT PM__NOISE_MAX_MSG                        /* 65535 */
#define PM__REC_SEG_PLAIN (PM__NOISE_MAX_MSG - PM__NOISE_TAG_LEN) /* 65519 */
#define PM__REC_MAX_SEGS 4u
#define PM__REC_MIN_CT (PM__NOISE_TAG_LEN + 1u)                 /* the type byte */
#define PM__REC_MAX_CT (PM__REC_MAX_SEGS * PM__REC_SEG_CT)       /* 262140 */
#define PM__REC_MAX_PLAIN (PM__REC_MAX_SEGS * PM__REC_SEG_PLAIN) /* 262076 */
#define PM__REC_WIRE_MAX (PM__REC_HDR + PM__REC_MAX_CT)          /* one record on the wire */
/* The largest frame a record carries: a procmesh frame of the largest
 * payload (PM_MAX_PAYLOAD + the 56-byte header). */
#define PM__REC_MAX_FRAME (64u * 1024u + 56u)
#define PM__REC_FRAME_HDR 4u

enum pm__rec_type {
    PM__REC_FRAMES = 1,
    PM__REC_HEARTBEAT = 2,
    PM__REC_CLOSE = 3,
    PM__REC_REKEY = 4,
};

/* CLOSE reasons. A receiver accepts any value (unknown ones mean "other"). */
enum pm__rec_close_reason {
    PM__REC_CLOSE_SHUTDOWN = 0, /* the sender is stopping or dropping the link */
    PM__REC_CLOSE_PROTOCOL = 1, /* the sender received something it refuses */
    PM__REC_CLOSE_NONCE = 2,    /* the sender's nonces are (nearly) spent */
    PM__REC_CLOSE_TIMEOUT = 3,  /* the sender heard nothing for the peer timeout */
};

typedef struct pm__rec pm__rec;

/* A decoded record. body points into the decoder's buffer, valid until the
 * next pm__rec_feed. */
typedef struct pm__rec_in {
    int type;
    const unsigned char *body;
    size_t len;
    uint16_t close_reason; /* CLOSE only */
    uint8_t echo;          /* HEARTBEAT: 0 none, PM__REC_ECHO_PING or _PONG */
    uint64_t echo_stamp;   /* the echo's stamp, opaque to its receiver */
} pm__rec_in;

#define PM__REC_ECHO_PING 1u
#define PM__REC_ECHO_PONG 2u
#define PM__REC_ECHO_BODY 9u

/* A record state over t (owned from now on: freed with the state, also on
 * failure). */
int pm__rec_new(pm__rec **out, pm__noise_transport *t);
void pm__rec_free(pm__rec *r);

/* ---- sending ---------------------------------------------------------- */

/* Bytes on the wire of a record of plain_len plaintext bytes (type byte
 * included); 0 when plain_len is 0 or above PM__REC_MAX_PLAIN. */
size_t pm__rec_wire_size(size_t plain_len);

/*
 * One FRAMES record of a plaintext the caller laid out itself (the link's
 * staging area): plain[0] = PM__REC_FRAMES, then "u32 len || frame" per
 * frame, as the body is on the wire. Sealed straight from plain, without
 * copying it first. Checked as a receiver checks a FRAMES body: -EINVAL
 * for anything the peer would refuse; -ENOBUFS when cap is short.
 */
int pm__rec_seal_frames_plain(pm__rec *r, const void *plain, size_t len, void *out, size_t cap, size_t *out_len);
int pm__rec_seal_heartbeat(pm__rec *r, void *out, size_t cap, size_t *out_len);
/* A HEARTBEAT carrying an echo (kind PM__REC_ECHO_PING or _PONG). */
int pm__rec_seal_echo(pm__rec *r, unsigned kind, uint64_t stamp, void *out, size_t cap,
                      size_t *out_len);
/* Rekey()s the sending direction once the record is sealed. */
int pm__rec_seal_rekey(pm__rec *r, void *out, size_t cap, size_t *out_len);
/* The last record: every later seal is -EPIPE. Always has a nonce left (the
 * other seals keep one for it). */
int pm__rec_seal_close(pm__rec *r, uint16_t reason, void *out, size_t cap, size_t *out_len);

/* ---- receiving -------------------------------------------------------- */

/*
 * Feeds data[0..len) (any bytes: hostile input). Consumes bytes up to the
 * end of the first complete record and returns 1 with it in *in, or
 * consumes everything and returns 0 (a record is incomplete, or a CLOSE
 * was received: what follows a CLOSE is ignored, never judged), or a
 * negative errno (the link is dead). *used says how many bytes were consumed; call
 * again with the rest. A FRAMES record is fully checked before it is
 * returned, so pm__rec_next_frame cannot fail on it.
 */
int pm__rec_feed(pm__rec *r, const void *data, size_t len, size_t *used, pm__rec_in *in);

/* The frames of a FRAMES record, in order: 1 and the next frame (start *off
 * at 0), 0 after the last. */
int pm__rec_next_frame(const pm__rec_in *in, size_t *off, const unsigned char **frame, size_t *len);

/* The stream ended: 0 when the peer's CLOSE arrived and nothing followed,
 * -ECONNRESET (truncation) otherwise. */
int pm__rec_eof(pm__rec *r);

#endif /* PM_RECORD_H */
