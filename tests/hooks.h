/* SPDX-License-Identifier: MIT */
/*
 * hooks.h - what the tests and the fuzzers set or read inside the peer
 * layer's opaque states: a Noise handshake (the fixed keys the published
 * vectors need, its hash, where its secrets lie) and a record state (a
 * hostile record, a nonce near its limit, frames laid out for the
 * product's FRAMES seal).
 *
 * No product path reaches these, so the library carries none of them: they
 * are written here on the layouts noise.c and record.c publish for the
 * purpose (peer/noise_state.h, peer/record_state.h) and on the product's
 * own calls. Each is static inline, so a program (check_noise,
 * check_record, pm-bad-peer, fuzz_noise, fuzz_record) takes only what it
 * uses. tests/internals.h is the same for the supervisor's and the node's
 * structures.
 */
#ifndef PM_TEST_HOOKS_H
#define PM_TEST_HOOKS_H

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include <sodium.h>

#include "base/internal.h"
#include "base/le.h"
#include "peer/noise.h"
#include "peer/noise_state.h"
#include "peer/record.h"
#include "peer/record_state.h"

/* ------------------------------------------------------------ Noise */

/* A key may be set: a live state of this process, before its first
 * message (noise.c's setter rule). */
static inline int pm_test_noise_settable(const pm__noise_hs *hs, const void *key)
{
    if (hs == NULL || key == NULL)
        return -EINVAL;
    if (hs->gen != pm__fork_gen())
        return -EPERM;
    if (hs->err != 0)
        return hs->err;
    return hs->started ? -EINVAL : 0;
}

/* Our static key pair from its private key (any 32 bytes; X25519 clamps),
 * set through the product's pm__noise_hs_set_static_pair. */
static inline int pm_test_noise_set_static(pm__noise_hs *hs, const unsigned char priv[PM__NOISE_KEY_LEN])
{
    unsigned char pub[PM__NOISE_KEY_LEN];
    if (priv == NULL)
        return -EINVAL;
    if (crypto_scalarmult_curve25519_base(pub, priv) != 0)
        return -EKEYREJECTED;
    return pm__noise_hs_set_static_pair(hs, priv, pub);
}

/* The peer's static public key, for patterns where it is known beforehand
 * (a pre-message: NK, KK, IK, ...); -EINVAL for other patterns. */
static inline int pm_test_noise_set_remote_static(pm__noise_hs *hs, const unsigned char pub[PM__NOISE_KEY_LEN])
{
    int rc = pm_test_noise_settable(hs, pub);
    if (rc < 0)
        return rc;
    /* Only a pre-message key: a static the pattern transmits is checked
     * after the handshake (pm__noise_hs_remote_static). */
    if (!hs->pre_s[hs->initiator ? 1 : 0])
        return -EINVAL;
    memcpy(hs->rs, pub, PM__NOISE_KEY_LEN);
    hs->has_rs = true;
    return 0;
}

/* The ephemeral key the next "e" token uses, instead of a random one. */
static inline int pm_test_noise_set_ephemeral(pm__noise_hs *hs, const unsigned char priv[PM__NOISE_KEY_LEN])
{
    int rc = pm_test_noise_settable(hs, priv);
    if (rc < 0)
        return rc;
    memcpy(hs->sec->e, priv, PM__NOISE_KEY_LEN);
    if (crypto_scalarmult_curve25519_base(hs->e_pub, hs->sec->e) != 0)
        return -EKEYREJECTED;
    hs->fixed_e = true;
    return 0;
}

/* Where the secret memory of a handshake state lies (the fork test reads it
 * in a child). */
static inline const void *pm_test_noise_secret(const pm__noise_hs *hs, size_t *size)
{
    *size = sizeof(*hs->sec);
    return hs->sec;
}

/* 1 when it is this side's turn to write, 0 to read (or when done),
 * negative errno: the product's pm__noise_write_size refuses a write out of
 * turn with -EINVAL and never refuses an empty payload otherwise. */
static inline int pm_test_noise_my_turn(const pm__noise_hs *hs)
{
    if (hs == NULL)
        return -EINVAL;
    long n = pm__noise_write_size(hs, 0);
    return n >= 0 ? 1 : n == -EINVAL ? 0 : (int)n;
}

/* The handshake hash h (channel binding); valid once done. */
static inline int pm_test_noise_hash(const pm__noise_hs *hs, unsigned char out[PM__NOISE_KEY_LEN])
{
    if (hs == NULL)
        return -EINVAL;
    if (hs->gen != pm__fork_gen())
        return -EPERM;
    if (hs->err != 0)
        return hs->err;
    if (out == NULL || hs->msg < hs->nmsg)
        return -EINVAL;
    memcpy(out, hs->h, PM__NOISE_KEY_LEN);
    return 0;
}

/* ------------------------------------------------------------ records */

/* record.c's check before any seal: a live sending direction. */
static inline int pm_test_rec_sendable(const pm__rec *r, const void *out, const size_t *out_len)
{
    if (r == NULL || out == NULL || out_len == NULL)
        return -EINVAL;
    if (r->tx_err != 0)
        return r->tx_err;
    return r->sent_close ? -EPIPE : 0;
}

/*
 * One FRAMES record from frames[0..n): as many whole frames, in order, as
 * fit in one record and in cap (at least one). *taken says how many. A
 * frame of length 0 or above PM__REC_MAX_FRAME is -EINVAL. Laid out in the
 * state's own plaintext buffer and sealed by the product's
 * pm__rec_seal_frames_plain, as the link's staging area is.
 */
static inline int pm_test_rec_seal_frames(pm__rec *r, const struct iovec *frames, size_t n, size_t *taken,
                                          void *out, size_t cap, size_t *out_len)
{
    int rc = pm_test_rec_sendable(r, out, out_len);
    if (rc < 0)
        return rc;
    if (frames == NULL || n == 0 || taken == NULL)
        return -EINVAL;
    size_t plain = 1, k = 0;
    for (; k < n; k++) {
        size_t len = frames[k].iov_len;
        if (len == 0 || len > PM__REC_MAX_FRAME || frames[k].iov_base == NULL)
            return -EINVAL;
        size_t next = plain + PM__REC_FRAME_HDR + len;
        if (next > PM__REC_MAX_PLAIN || pm__rec_wire_size(next) > cap)
            break;
        plain = next;
    }
    if (k == 0)
        return pm__rec_wire_size(plain + PM__REC_FRAME_HDR + frames[0].iov_len) > cap ? -ENOBUFS : -EINVAL;
    unsigned char *p = r->tx;
    *p++ = PM__REC_FRAMES;
    for (size_t i = 0; i < k; i++) {
        pm__put32(p, (uint32_t)frames[i].iov_len);
        memcpy(p + PM__REC_FRAME_HDR, frames[i].iov_base, frames[i].iov_len);
        p += PM__REC_FRAME_HDR + frames[i].iov_len;
    }
    rc = pm__rec_seal_frames_plain(r, r->tx, plain, out, cap, out_len);
    if (rc == 0)
        *taken = k;
    return rc;
}

/* 1 once a valid record has been received: the link may count as up. */
static inline int pm_test_rec_up(const pm__rec *r)
{
    return r != NULL && r->got_any;
}

/* 1 once a CLOSE record was received (its reason in *reason). */
static inline int pm_test_rec_closed(const pm__rec *r, uint16_t *reason)
{
    if (r == NULL || !r->got_close)
        return 0;
    if (reason != NULL)
        *reason = r->close_reason;
    return 1;
}

/* Seals plain[0..len) as one record, whatever it says (a type or body a
 * receiver refuses): the hostile peer of the tests. */
static inline int pm_test_rec_seal_raw(pm__rec *r, const void *plain, size_t len, void *out, size_t cap,
                                       size_t *out_len)
{
    int rc = pm_test_rec_sendable(r, out, out_len);
    if (rc < 0)
        return rc;
    if (plain == NULL || len < 1 || len > PM__REC_MAX_PLAIN)
        return -EINVAL;
    return pm__rec_seal(r, plain, len, false, out, cap, out_len);
}

/* Moves a direction's nonce, in the record state and its transport
 * (cipher.h publishes the transport's struct). */
static inline int pm_test_rec_set_nonce(pm__rec *r, int tx, uint64_t n)
{
    if (r == NULL || r->t == NULL)
        return -EINVAL;
    r->t->n[tx ? 1 : 0] = n;
    if (tx)
        r->n_tx = n;
    else
        r->n_rx = n;
    return 0;
}

#endif /* PM_TEST_HOOKS_H */
