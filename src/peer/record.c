/* SPDX-License-Identifier: MIT */
/* record.c - sealing and incrementally decoding the peer links' length-authenticated records. */
#include "base/internal.h"
#include "channel/frame.h"
#include "base/le.h"
#include "record.h"
#include "record_state.h"

#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>

_Static_assert(PM__REC_MAX_FRAME == PM_MAX_PAYLOAD + PM__FRAME_HDR_SIZE,
               "a record carries the largest procmesh frame");
_Static_assert(PM__REC_FRAME_HDR + PM__REC_MAX_FRAME + 1 <= PM__REC_MAX_PLAIN,
               "the largest frame fits one record");

/* The receiving direction is dead for good. */
static int fail(pm__rec *r, int err)
{
    r->rx_err = err;
    return err;
}

/* The sending direction is dead for good. */
static int tx_fail(pm__rec *r, int err)
{
    r->tx_err = err;
    return err;
}

/* rx and tx hold plaintext traffic of other hosts: they live in a mapping
 * of their own that a fork-mode worker finds zeroed (or absent), never in
 * heap memory it inherits (doc/reliability.md, fault 33). The state itself
 * shares that mapping, ahead of the buffers: one allocation, so one
 * failure to handle, and a fork child that inherits none of the state's
 * nonces or errors either. */
#define REC_ALIGN(n) (((n) + 63) / 64 * 64)
#define REC_RX_AT REC_ALIGN(sizeof(pm__rec))
#define REC_TX_AT (REC_RX_AT + REC_ALIGN(PM__REC_MAX_CT))
#define REC_MAP_SIZE (REC_TX_AT + PM__REC_MAX_PLAIN)

int pm__rec_new(pm__rec **out, pm__noise_transport *t)
{
    if (out == NULL || t == NULL) {
        pm__noise_transport_free(t);
        return -EINVAL;
    }
    *out = NULL;
    unsigned char *m = pm__wipemem_alloc(REC_MAP_SIZE); /* zeroed: a fresh anonymous mapping */
    if (m == NULL) {
        pm__noise_transport_free(t);
        return -ENOMEM;
    }
    pm__rec *r = (pm__rec *)m;
    r->rx = m + REC_RX_AT;
    r->tx = m + REC_TX_AT;
    r->t = t;
    *out = r;
    return 0;
}

void pm__rec_free(pm__rec *r)
{
    if (r == NULL)
        return;
    pm__noise_transport_free(r->t);
    /* Not wiped first: the pages go back to the kernel, which zeroes
     * them before any other use. */
    munmap(r, REC_MAP_SIZE);
}

/* ------------------------------------------------------------ segmentation */

static size_t segments_of_plain(size_t plain)
{
    return (plain + PM__REC_SEG_PLAIN - 1) / PM__REC_SEG_PLAIN;
}

size_t pm__rec_wire_size(size_t plain_len)
{
    if (plain_len == 0 || plain_len > PM__REC_MAX_PLAIN)
        return 0;
    return PM__REC_HDR + plain_len + segments_of_plain(plain_len) * PM__NOISE_TAG_LEN;
}

/*
 * The one segmentation of a ciphertext length: full segments of
 * PM__REC_SEG_CT bytes, then a last one of PM__REC_MIN_CT..PM__REC_SEG_CT
 * bytes. 0 when ct is above the maximum or leaves a last segment too short
 * to hold a tag and a byte (no plaintext length gives it).
 */
static size_t segments_of_ct(uint32_t ct)
{
    if (ct < PM__REC_MIN_CT || ct > PM__REC_MAX_CT)
        return 0;
    size_t nseg = ((size_t)ct + PM__REC_SEG_CT - 1) / PM__REC_SEG_CT;
    size_t last = ct - (nseg - 1) * PM__REC_SEG_CT;
    return last >= PM__REC_MIN_CT ? nseg : 0;
}

/* ------------------------------------------------------------ sending */

static int check_frames(const unsigned char *b, size_t len);

static int send_check(const pm__rec *r, void *out, size_t *out_len)
{
    if (r == NULL || out == NULL || out_len == NULL)
        return -EINVAL;
    if (r->tx_err != 0)
        return r->tx_err;
    return r->sent_close ? -EPIPE : 0;
}

int pm__rec_seal(pm__rec *r, const unsigned char *src, size_t plain, bool is_close, void *out, size_t cap,
                 size_t *out_len)
{
    size_t wire = pm__rec_wire_size(plain);
    size_t nseg = segments_of_plain(plain);
    if (wire == 0)
        return -EINVAL;
    if (cap < wire)
        return -ENOBUFS;
    uint64_t room = PM__NOISE_NONCE_LIMIT - (r->n_tx < PM__NOISE_NONCE_LIMIT ? r->n_tx : PM__NOISE_NONCE_LIMIT);
    if (room < nseg + (is_close ? 0 : 1))
        return is_close ? tx_fail(r, -EOVERFLOW) : -EOVERFLOW;
    unsigned char *o = out;
    pm__put32(o, (uint32_t)(wire - PM__REC_HDR));
    for (size_t i = 0; i < nseg; i++) {
        size_t off = i * PM__REC_SEG_PLAIN;
        size_t len = plain - off < PM__REC_SEG_PLAIN ? plain - off : PM__REC_SEG_PLAIN;
        size_t ct_len;
        /* The 4 length bytes are every segment's associated data: a changed
         * length fails authentication, not only the framing. */
        int rc = pm__noise_encrypt(r->t, o, PM__REC_HDR, src + off, len, o + PM__REC_HDR + i * PM__REC_SEG_CT,
                                   PM__REC_SEG_CT, &ct_len);
        if (rc < 0)
            return tx_fail(r, rc); /* a half-written record cannot be taken back */
        r->n_tx++;
    }
    *out_len = wire;
    return 0;
}

int pm__rec_seal_frames_plain(pm__rec *r, const void *plain, size_t len, void *out, size_t cap, size_t *out_len)
{
    int rc = send_check(r, out, out_len);
    if (rc < 0)
        return rc;
    const unsigned char *p = plain;
    /* Judged as the receiver will judge it: a record we seal is never one
     * the peer must refuse (and kill the link over). */
    if (p == NULL || len < 1 || len > PM__REC_MAX_PLAIN || p[0] != PM__REC_FRAMES ||
        check_frames(p + 1, len - 1) < 0)
        return -EINVAL;
    return pm__rec_seal(r, p, len, false, out, cap, out_len);
}

int pm__rec_seal_heartbeat(pm__rec *r, void *out, size_t cap, size_t *out_len)
{
    int rc = send_check(r, out, out_len);
    if (rc < 0)
        return rc;
    r->tx[0] = PM__REC_HEARTBEAT;
    return pm__rec_seal(r, r->tx, 1, false, out, cap, out_len);
}

int pm__rec_seal_echo(pm__rec *r, unsigned kind, uint64_t stamp, void *out, size_t cap,
                      size_t *out_len)
{
    if (kind != PM__REC_ECHO_PING && kind != PM__REC_ECHO_PONG)
        return -EINVAL;
    int rc = send_check(r, out, out_len);
    if (rc < 0)
        return rc;
    r->tx[0] = PM__REC_HEARTBEAT;
    r->tx[1] = (unsigned char)kind;
    pm__put64(r->tx + 2, stamp);
    return pm__rec_seal(r, r->tx, 1 + PM__REC_ECHO_BODY, false, out, cap, out_len);
}

int pm__rec_seal_rekey(pm__rec *r, void *out, size_t cap, size_t *out_len)
{
    int rc = send_check(r, out, out_len);
    if (rc < 0)
        return rc;
    r->tx[0] = PM__REC_REKEY;
    rc = pm__rec_seal(r, r->tx, 1, false, out, cap, out_len);
    if (rc < 0)
        return rc;
    /* After the record, so the peer decrypts it with the key it has, and
     * switches exactly where we do. */
    rc = pm__noise_rekey(r->t, 1);
    return rc < 0 ? tx_fail(r, rc) : 0;
}

int pm__rec_seal_close(pm__rec *r, uint16_t reason, void *out, size_t cap, size_t *out_len)
{
    int rc = send_check(r, out, out_len);
    if (rc < 0)
        return rc;
    r->tx[0] = PM__REC_CLOSE;
    pm__put16(r->tx + 1, reason);
    rc = pm__rec_seal(r, r->tx, 3, true, out, cap, out_len);
    if (rc == 0)
        r->sent_close = true;
    return rc;
}

/* ------------------------------------------------------------ receiving */

/* Checks a FRAMES body: at least one frame, each 1..PM__REC_MAX_FRAME bytes,
 * exactly filling it. */
static int check_frames(const unsigned char *b, size_t len)
{
    if (len == 0)
        return -EPROTO;
    size_t off = 0;
    while (off < len) {
        if (len - off < PM__REC_FRAME_HDR)
            return -EPROTO;
        uint32_t flen = pm__get32(b + off);
        off += PM__REC_FRAME_HDR;
        if (flen == 0 || flen > PM__REC_MAX_FRAME || flen > len - off)
            return -EPROTO;
        off += flen;
    }
    return 0;
}

/* A complete record in rx[0..ct_len): decrypt segment by segment, in place,
 * closing up the tags so the plaintext is contiguous; then check it. */
static int open_record(pm__rec *r, pm__rec_in *in)
{
    size_t nseg = segments_of_ct(r->ct_len);
    size_t plain = 0;
    for (size_t i = 0; i < nseg; i++) {
        unsigned char *seg = r->rx + i * PM__REC_SEG_CT;
        size_t seg_ct = i + 1 < nseg ? PM__REC_SEG_CT : r->ct_len - i * PM__REC_SEG_CT;
        size_t got;
        if (r->n_rx >= PM__NOISE_NONCE_LIMIT)
            return fail(r, -EOVERFLOW);
        /* libsodium decrypts in place (m == c); the plaintext then moves
         * down over the tags of the segments before it. */
        int rc = pm__noise_decrypt(r->t, r->hdr, PM__REC_HDR, seg, seg_ct, seg, seg_ct, &got);
        if (rc < 0)
            return fail(r, rc);
        r->n_rx++;
        if (seg != r->rx + plain) /* the first segment is in place already */
            memmove(r->rx + plain, seg, got);
        plain += got;
    }
    const unsigned char *p = r->rx;
    memset(in, 0, sizeof(*in));
    in->type = p[0];
    in->body = p + 1;
    in->len = plain - 1;
    switch (p[0]) {
    case PM__REC_FRAMES:
        if (check_frames(in->body, in->len) < 0)
            return fail(r, -EPROTO);
        break;
    case PM__REC_HEARTBEAT:
        /* Empty, or an echo (doc/protocol.md 6): nothing else. */
        if (in->len == PM__REC_ECHO_BODY &&
            (in->body[0] == PM__REC_ECHO_PING || in->body[0] == PM__REC_ECHO_PONG)) {
            in->echo = in->body[0];
            in->echo_stamp = pm__get64(in->body + 1);
        } else if (in->len != 0) {
            return fail(r, -EPROTO);
        }
        break;
    case PM__REC_CLOSE:
        if (in->len != 2)
            return fail(r, -EPROTO);
        in->close_reason = pm__get16(in->body);
        r->close_reason = in->close_reason;
        r->got_close = true;
        break;
    case PM__REC_REKEY: {
        if (in->len != 0)
            return fail(r, -EPROTO);
        int rc = pm__noise_rekey(r->t, 0);
        if (rc < 0)
            return fail(r, rc);
        break;
    }
    default:
        return fail(r, -EPROTO);
    }
    r->got_any = true;
    return 1;
}

int pm__rec_feed(pm__rec *r, const void *data, size_t len, size_t *used, pm__rec_in *in)
{
    if (r == NULL || used == NULL || in == NULL || (data == NULL && len > 0))
        return -EINVAL;
    *used = 0;
    if (r->rx_err != 0)
        return r->rx_err;
    const unsigned char *d = data;
    size_t pos = 0;
    /* A CLOSE is the last record: its receiver reads nothing more
     * (doc/protocol.md 6). Bytes after it are ignored, never judged,
     * whether they came in the same read as the CLOSE or later: which of
     * the two happens is TCP's timing, and the outcome must not depend on
     * it. */
    if (r->got_close) {
        *used = len;
        return 0;
    }
    while (pos < len) {
        if (r->hdr_got < PM__REC_HDR) {
            size_t k = PM__REC_HDR - r->hdr_got;
            if (k > len - pos)
                k = len - pos;
            memcpy(r->hdr + r->hdr_got, d + pos, k);
            r->hdr_got += (unsigned)k;
            pos += k;
            if (r->hdr_got < PM__REC_HDR)
                break;
            /* The length is judged the moment it is complete, before a byte
             * of the record is taken: nothing is allocated from it (rx is
             * fixed), and a hostile 0xFFFFFFFF ends the link at once. */
            r->ct_len = pm__get32(r->hdr);
            if (segments_of_ct(r->ct_len) == 0) { /* above the maximum, or no segmentation */
                *used = pos;
                return fail(r, r->ct_len > PM__REC_MAX_CT ? -EMSGSIZE : -EPROTO);
            }
            continue; /* ct_got is 0: the last record's end reset it */
        }
        size_t k = r->ct_len - r->ct_got;
        if (k > len - pos)
            k = len - pos;
        memcpy(r->rx + r->ct_got, d + pos, k);
        r->ct_got += k;
        pos += k;
        if (r->ct_got == r->ct_len) {
            r->hdr_got = 0;
            r->ct_got = 0;
            *used = pos;
            return open_record(r, in);
        }
    }
    *used = pos;
    return 0;
}

int pm__rec_next_frame(const pm__rec_in *in, size_t *off, const unsigned char **frame, size_t *len)
{
    if (in == NULL || off == NULL || frame == NULL || len == NULL || in->type != PM__REC_FRAMES)
        return -EINVAL;
    /* The body was checked by the decoder: every length here is in range. */
    if (*off + PM__REC_FRAME_HDR > in->len)
        return 0;
    uint32_t flen = pm__get32(in->body + *off);
    *frame = in->body + *off + PM__REC_FRAME_HDR;
    *len = flen;
    *off += PM__REC_FRAME_HDR + flen;
    return 1;
}

int pm__rec_eof(pm__rec *r)
{
    if (r == NULL)
        return -EINVAL;
    if (r->rx_err != 0)
        return r->rx_err;
    /* A partial record can only be under way before a CLOSE: what comes
     * after one is never decoded (pm__rec_feed). */
    if (!r->got_close)
        return fail(r, -ECONNRESET);
    return 0;
}
