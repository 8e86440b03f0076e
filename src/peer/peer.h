/* SPDX-License-Identifier: MIT */
/* peer.h - one peer link's protocol as a pure state machine: preamble, XXpsk3 handshake with hello payloads, then records (doc/protocol.md 2-8). */
#ifndef PM_PEER_H
#define PM_PEER_H

/*
 * No sockets, no clock: the caller feeds the bytes it received
 * (pm__pconn_input), sends the bytes the state machine queued
 * (pm__pconn_output / pm__pconn_sent), and tells it when its timers fire.
 * That keeps every rule of doc/protocol.md testable without a network,
 * and lets a fuzzer drive it. What it decides is reported as the return
 * of pm__pconn_input (an event) and, for frames, through a callback.
 *
 *   initiator:  pm__pconn_init(.., 1) queues the preamble and message 1
 *   responder:  pm__pconn_init(.., 0) queues nothing until it has read the
 *               whole preamble and message 1
 *
 * Every length read off the wire is checked against a fixed bound before
 * the bytes it covers are read; nothing is allocated from it. The input
 * buffer before the records is PM__PCONN_HS_MAX bytes; after Split() the
 * record decoder's own fixed buffer takes over. The output queue is
 * bounded (PM__PCONN_OUT_CAP): a sender past it gets -EAGAIN
 * (backpressure into the hub).
 */

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "noise.h"
#include "peerkeys.h"
#include "record.h"

#define PM__PEER_MAGIC "PMLINK"
#define PM__PEER_VERSION_STR "procmesh-link/1"
#define PM__PEER_MAX_VERSION 1u
#define PM__PEER_PREAMBLE_MAX (16u + 32u + 63u) /* 111 */
#define PM__PEER_HS_MSG_MAX 512u
#define PM__PEER_HELLO_FORMAT 1u
/* Capabilities our hello announces (doc/protocol.md 4): bit 0, credit-based
 * flow control on the link (CREDIT frames); bit 1, large messages as FRAG
 * frames. */
#define PM__PEER_CAPS 0x3u
#define PM__PEER_HELLO_MIN 20u /* 19 + a 1-byte host name */
#define PM__PEER_IDLE_MIN_MS 100u
#define PM__PEER_IDLE_MAX_MS 600000u
#define PM__PCONN_HS_MAX (PM__PEER_PREAMBLE_MAX + 4u + PM__PEER_HS_MSG_MAX)
#define PM__PCONN_OUT_CAP ((size_t)2 * PM__REC_WIRE_MAX)
/* The room a CLOSE record takes in the output queue (a 2-byte body).
 * Every other record leaves it free (pm__pconn_stage's reservation, the
 * control records), so that an orderly end's CLOSE always goes out after
 * everything queued before it (doc/protocol.md 7). */
#define PM__PCONN_CLOSE_ROOM (PM__REC_HDR + PM__REC_MIN_CT + 2u)
/* The staging area of one link (pm__pconn_stage): frames gathered during a
 * loop turn and sealed as one FRAMES record. Any frame fits an empty stage;
 * the frame count bounds the iovec table sealing walks. */
#define PM__PCONN_STAGE_CAP ((size_t)PM__REC_MAX_FRAME)
#define PM__PCONN_STAGE_FRAMES 256u
/* The staging buffer: the record's type byte and every frame's length. */
#define PM__PCONN_STAGE_BUF (1u + PM__PCONN_STAGE_FRAMES * PM__REC_FRAME_HDR + PM__PCONN_STAGE_CAP)

/* Why a link ended (counted by reason, in /metrics). */
enum pm__peer_fail {
    PM__PF_NONE = 0,
    PM__PF_PREAMBLE,    /* bad magic or a length out of range */
    PM__PF_VERSION,     /* a version string we do not speak, or a version mismatch */
    PM__PF_SYSTEM,      /* another mesh's system name */
    PM__PF_KEY_ID,      /* an unknown key id, or a downgrade to / from no secret */
    PM__PF_HS_LENGTH,   /* a handshake message of a length the table forbids */
    PM__PF_HS_DECRYPT,  /* a handshake message that fails (wrong psk, altered, replayed) */
    PM__PF_HELLO,       /* message 1 with a payload, a malformed hello */
    PM__PF_PIN,         /* a static key not pinned for the host it claims */
    PM__PF_SELF,        /* a connection to ourselves */
    PM__PF_TIMEOUT,     /* handshake deadline, or silence past idle_ms */
    PM__PF_RECORD,      /* a record that fails: length, segmentation, tag, body */
    PM__PF_TRUNCATED,   /* end of stream without CLOSE */
    PM__PF_CLOSED,      /* the peer sent CLOSE (an orderly end) */
    PM__PF_LOCAL,       /* we closed it (shutdown, a replaced link, no memory) */
    PM__PF_DUPLICATE,   /* a new incarnation of a host whose live link stays (unpinned) */
    PM__PF_RATE,        /* accepted and closed at once: its source's handshake rate */
    PM__PF_NO_FDS,      /* accept failed for lack of fds (the waiting connection is then
                           accepted on the reserve fd and closed) or of memory */
    PM__PF_COUNT_
};

/* Its name for logs and metrics ("preamble", "version", ...). */
const char *pm__peer_fail_name(int why);

enum pm__pconn_state {
    PM__PC_PREAMBLE = 1, /* responder: reading the preamble */
    PM__PC_HANDSHAKE,    /* Noise messages 1..3 */
    PM__PC_SPLIT,        /* transport keys, our HEARTBEAT sent, no record received yet */
    PM__PC_UP,           /* a valid record received: frames flow */
    PM__PC_DEAD          /* closed; fail says why */
};

/* What the link needs to know about this host. The pointers are borrowed
 * and must outlive the connection. */
typedef struct pm__pconn_cfg {
    const char *system;      /* the mesh's system name */
    const char *host;        /* this host's name */
    uint64_t incarnation;    /* this supervisor's, random and non-zero */
    uint32_t idle_ms;        /* our peer timeout, sent in the hello */
    const pm__keyring *keys; /* secrets (none: insecure, Noise_XX) and our static key */
    const pm__pins *pins;    /* NULL: no pinning */
} pm__pconn_cfg;

/* What the peer said about itself (valid from PM__PC_SPLIT on). */
typedef struct pm__peer_hello {
    unsigned max_version;
    uint32_t capabilities;
    uint64_t incarnation;
    uint32_t idle_ms;
    char host[64];
} pm__peer_hello;

typedef struct pm__pconn {
    int initiator;
    int state;               /* PM__PC_* */
    int fail;                /* PM__PF_* once dead */
    int err;                 /* the negative errno behind fail, or 0 */
    int psk;                 /* XXpsk3 (1) or XX without a secret (0) */
    int hs_msgs_in;          /* handshake messages received so far */
    const pm__pconn_cfg *cfg;
    pm__noise_hs *hs;
    pm__rec *rec;
    unsigned char prologue[PM__PEER_PREAMBLE_MAX];
    size_t prologue_len;
    unsigned char in[PM__PCONN_HS_MAX]; /* handshake bytes not yet used */
    size_t in_len;
    unsigned char *out;      /* bytes to send: out[out_off .. out_len) */
    size_t out_off, out_len;
    int close_sent;
    int close_received;      /* the peer's CLOSE arrived */
    uint16_t close_reason;   /* the peer's, once received */
    uint64_t frames_after_close; /* frames that arrived after our CLOSE: discarded */
    pm__peer_hello peer;
    uint32_t caps;           /* what our hello announces: PM__PEER_CAPS (a test
                                peer without large messages clears bit 1) */
    unsigned char peer_static[PM__PEER_KEY_LEN];
    uint64_t frames_in, frames_out, bytes_in, bytes_out;
    /* FRAMES records sealed and opened (frames / records: the batching). */
    uint64_t frame_records_out, frame_records_in;
    /* Frames staged, not yet sealed, laid out as their FRAMES record's
     * plaintext (type byte, then "u32 len || frame" each): stage[0..
     * stage_used), sealed from there without another copy. stage_len
     * counts the frames' own bytes. Their record's room in `out` is
     * reserved already. */
    unsigned char *stage;
    size_t stage_used;
    size_t stage_len;
    size_t stage_n;
    /* Records sealed since our last REKEY (the sender's count for its
     * interval), and REKEY records sent and received. */
    uint64_t records_since_rekey, rekeys_out, rekeys_in;
    uint64_t pongs;          /* PONGs received; the last one's stamp: */
    uint64_t pong_stamp;
    /* The first record when it carries frames (doc/protocol.md 2, step
     * 6): pm__pconn_input returns PM__PCE_UP before taking it, so the
     * caller installs the link first, and takes it at its next call. A
     * link that dies before then counts its frames in frames_after_close. */
    int held;
    pm__rec_in held_in;
    /* A FRAMES record's frames, one call each (frame, len), during input. */
    void (*on_frame)(void *arg, const unsigned char *frame, size_t len);
    void *on_frame_arg;
} pm__pconn;

/* Events of pm__pconn_input. */
enum pm__pconn_event {
    PM__PCE_NONE = 0,  /* need more bytes (output may have been queued) */
    PM__PCE_UP = 1,    /* the link just came up: install routes */
    PM__PCE_DEAD = 2   /* the link died (fail, err); send what is queued, then close */
};

/* Sets up one side. 0, -ENOMEM, -EINVAL (a bad configuration: no static
 * key, a name the rules refuse). The initiator's preamble and message 1 are
 * queued. */
int pm__pconn_init(pm__pconn *c, const pm__pconn_cfg *cfg, int initiator);
/* Wipes and frees what c holds and leaves it DEAD with nothing held: a
 * second call does nothing, as does one after a pm__pconn_init that failed
 * (which freed what it had made). */
void pm__pconn_free(pm__pconn *c);

/* Feeds received bytes (any bytes). Consumes all of them unless the link
 * dies or comes up (then *used says how far it got; call again with the
 * rest while the event is PM__PCE_UP, also when no byte is left: a first
 * record of frames is delivered by that call). Returns a PM__PCE_* event. */
int pm__pconn_input(pm__pconn *c, const void *data, size_t len, size_t *used);

/* The peer closed its end of the stream (recv returned 0). */
int pm__pconn_eof(pm__pconn *c);

/* What to send next (NULL, 0 when nothing), and how much was sent. */
const unsigned char *pm__pconn_output(const pm__pconn *c, size_t *len);
void pm__pconn_sent(pm__pconn *c, size_t n);

/*
 * Batching (doc/protocol.md 6, "How procmesh fills records"): copies one
 * frame into the staging area, to be sealed with the frames staged with it
 * as one FRAMES record by pm__pconn_flush_stage (the caller's end of a loop
 * turn), or at once when the stage fills. Never waits for company: the
 * caller flushes every turn. Room for the staged record in the output
 * queue is reserved as frames are staged, so a staged frame is always
 * sealed; every other record seals the stage first (frames keep their
 * order). A dying link discards the stage, as it does its output queue.
 *   0          taken
 *   -EAGAIN    the output queue has no room for it (what was staged is
 *              sealed: send output, then try again)
 *   -ENOTCONN  the link is not up; -EINVAL a length of 0 or above
 *              PM__REC_MAX_FRAME; -EOVERFLOW the link ran out of nonces
 *              (it is closed)
 */
int pm__pconn_stage(pm__pconn *c, const void *frame, size_t len);
/* Seals the staged frames as one FRAMES record: 0 (also with nothing
 * staged), -EOVERFLOW (the link is closed, the frames lost). */
int pm__pconn_flush_stage(pm__pconn *c);

/* Queues a HEARTBEAT (when nothing else was sent for a while). */
int pm__pconn_heartbeat(pm__pconn *c);
/* Queues a HEARTBEAT with a PING of stamp: the peer answers with a PONG of
 * the same stamp (pongs, pong_stamp), the caller's clock gives the RTT. A
 * PING received is answered here, in pm__pconn_input. */
int pm__pconn_ping(pm__pconn *c, uint64_t stamp);

/* Queues a REKEY record; the sending key changes right after it
 * (doc/protocol.md 6). 0; -EAGAIN: the output queue is full (nothing
 * queued: try again later); -ENOTCONN before the transport; -EOVERFLOW:
 * the nonces are spent, the link was closed (CLOSE 2). */
int pm__pconn_rekey(pm__pconn *c);

/* Ends the link: a CLOSE record with reason (when the transport is up),
 * state dead with fail (PM__PF_LOCAL, PM__PF_TIMEOUT ...). */
void pm__pconn_close(pm__pconn *c, uint16_t reason, int fail);

/*
 * After our CLOSE (doc/protocol.md 7, orderly end): reads the peer's
 * records from data[0..len) up to its CLOSE, delivering nothing (frames are
 * counted in frames_after_close, a PING is not answered: nothing follows a
 * CLOSE). 1: the peer's CLOSE arrived (close_received, close_reason);
 * 0: more bytes are needed; a negative errno: the records failed or there
 * is no transport, nothing more to wait for. Bytes after the peer's CLOSE
 * are ignored. Only for a dead connection that sent its CLOSE.
 */
int pm__pconn_linger(pm__pconn *c, const void *data, size_t len);

/* The preamble for these settings (doc/protocol.md 3) into out; its length. */
size_t pm__peer_preamble(const char *system, const unsigned char id[PM__PEER_KEY_ID_LEN],
                         unsigned char out[PM__PEER_PREAMBLE_MAX]);

/* Hello payload codec (doc/protocol.md 4): encode returns the length;
 * decode 0 or -EBADMSG for anything malformed. */
size_t pm__peer_hello_encode(const pm__peer_hello *h, unsigned char *out, size_t cap);
int pm__peer_hello_decode(const unsigned char *p, size_t len, pm__peer_hello *out);

#endif /* PM_PEER_H */
