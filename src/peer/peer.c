/* SPDX-License-Identifier: MIT */
/* peer.c - one peer link's protocol as a pure state machine (peer.h): preamble, handshake and hellos, records; no sockets, no clock. */
#define _GNU_SOURCE
#include "base/internal.h"
#include "base/address.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/le.h"
#include "peer.h"

#define XXPSK3 "Noise_XXpsk3_25519_ChaChaPoly_SHA256"
#define XX "Noise_XX_25519_ChaChaPoly_SHA256"

const char *pm__peer_fail_name(int why)
{
    static const char *const names[PM__PF_COUNT_] = {
        [PM__PF_NONE] = "none",           [PM__PF_PREAMBLE] = "preamble",
        [PM__PF_VERSION] = "version",     [PM__PF_SYSTEM] = "system",
        [PM__PF_KEY_ID] = "key_id",       [PM__PF_HS_LENGTH] = "handshake_length",
        [PM__PF_HS_DECRYPT] = "handshake_decrypt", [PM__PF_HELLO] = "hello",
        [PM__PF_PIN] = "pin",             [PM__PF_SELF] = "self",
        [PM__PF_TIMEOUT] = "timeout",     [PM__PF_RECORD] = "record",
        [PM__PF_TRUNCATED] = "truncated", [PM__PF_CLOSED] = "closed",
        [PM__PF_LOCAL] = "local",         [PM__PF_DUPLICATE] = "duplicate_host",
        [PM__PF_RATE] = "rate_limited",   [PM__PF_NO_FDS] = "no_fds",
    };
    return why >= 0 && why < PM__PF_COUNT_ ? names[why] : "other";
}

/* ------------------------------------------------------------------ codecs */

size_t pm__peer_preamble(const char *system, const unsigned char id[PM__PEER_KEY_ID_LEN],
                         unsigned char out[PM__PEER_PREAMBLE_MAX])
{
    size_t v = strlen(PM__PEER_VERSION_STR), n = strlen(system), k = 0;
    memcpy(out, PM__PEER_MAGIC, 6);
    k = 6;
    out[k++] = (unsigned char)v;
    memcpy(out + k, PM__PEER_VERSION_STR, v);
    k += v;
    out[k++] = (unsigned char)n;
    memcpy(out + k, system, n);
    k += n;
    memcpy(out + k, id, PM__PEER_KEY_ID_LEN);
    return k + PM__PEER_KEY_ID_LEN;
}

size_t pm__peer_hello_encode(const pm__peer_hello *h, unsigned char *out, size_t cap)
{
    size_t hl = strlen(h->host);
    if (cap < 19 + hl)
        return 0;
    out[0] = PM__PEER_HELLO_FORMAT;
    out[1] = (unsigned char)h->max_version;
    pm__put32(out + 2, h->capabilities);
    pm__put64(out + 6, h->incarnation);
    pm__put32(out + 14, h->idle_ms);
    out[18] = (unsigned char)hl;
    memcpy(out + 19, h->host, hl);
    return 19 + hl;
}

int pm__peer_hello_decode(const unsigned char *p, size_t len, pm__peer_hello *out)
{
    if (len < PM__PEER_HELLO_MIN || p[0] != PM__PEER_HELLO_FORMAT)
        return -EBADMSG;
    size_t hl = p[18];
    if (len != 19 + hl || !pm__peer_host_valid((const char *)p + 19, hl))
        return -EBADMSG;
    pm__peer_hello h;
    memset(&h, 0, sizeof(h));
    h.max_version = p[1];
    h.capabilities = pm__get32(p + 2); /* unknown bits are ignored */
    h.incarnation = pm__get64(p + 6);
    h.idle_ms = pm__get32(p + 14);
    memcpy(h.host, p + 19, hl);
    if (h.incarnation == 0 || h.idle_ms < PM__PEER_IDLE_MIN_MS || h.idle_ms > PM__PEER_IDLE_MAX_MS)
        return -EBADMSG;
    *out = h;
    return 0;
}

/* ------------------------------------------------------------------ output */

/* Room for n more bytes at the end of the output queue (moving what is
 * left to the front first), or NULL when the queue cannot take them. */
static unsigned char *out_room(pm__pconn *c, size_t n, size_t *cap)
{
    if (c->out_off > 0) {
        memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
        c->out_len -= c->out_off;
        c->out_off = 0;
    }
    if (PM__PCONN_OUT_CAP - c->out_len < n)
        return NULL;
    *cap = PM__PCONN_OUT_CAP - c->out_len;
    return c->out + c->out_len;
}

/* Bytes free in the output queue, counting what out_room would move. */
static size_t out_free(const pm__pconn *c)
{
    return PM__PCONN_OUT_CAP - (c->out_len - c->out_off);
}

/* ------------------------------------------------------------------ stage */

/* Plaintext bytes of a FRAMES record of n frames of len bytes in all. */
static size_t stage_plain(size_t n, size_t len)
{
    return 1 + n * PM__REC_FRAME_HDR + len;
}

/* Empties the stage; its bytes are a worker's messages in clear. */
static void stage_drop(pm__pconn *c)
{
    if (c->stage != NULL && c->stage_used > 0)
        explicit_bzero(c->stage, c->stage_used);
    c->stage_used = 0;
    c->stage_len = 0;
    c->stage_n = 0;
}

/* Seals the stage as one FRAMES record into the room reserved for it.
 * The stage is empty afterwards, sealed or not: on failure the caller
 * closes the link, so the frames are answered as a dead link's. */
static int stage_seal(pm__pconn *c)
{
    if (c->stage_n == 0)
        return 0;
    size_t cap = 0, len = 0;
    unsigned char *p = out_room(c, pm__rec_wire_size(c->stage_used), &cap);
    int rc = -ENOBUFS; /* cannot happen: pm__pconn_stage reserved the room */
    if (p != NULL)
        rc = pm__rec_seal_frames_plain(c->rec, c->stage, c->stage_used, p, cap, &len);
    if (rc == 0) {
        c->out_len += len;
        c->records_since_rekey++;
        c->frame_records_out++;
        c->frames_out += c->stage_n;
        c->bytes_out += c->stage_len;
    }
    stage_drop(c);
    return rc;
}

int pm__pconn_flush_stage(pm__pconn *c)
{
    int rc = stage_seal(c);
    if (rc < 0)
        /* A frame taken and never sent would leave its request unanswered
         * on a live link: the link dies, and its requests are answered. */
        pm__pconn_close(c, rc == -EOVERFLOW ? PM__REC_CLOSE_NONCE : PM__REC_CLOSE_PROTOCOL, PM__PF_LOCAL);
    return rc;
}

int pm__pconn_stage(pm__pconn *c, const void *frame, size_t len)
{
    if (c->state != PM__PC_UP)
        return -ENOTCONN;
    if (frame == NULL || len == 0 || len > PM__REC_MAX_FRAME)
        return -EINVAL;
    int rc;
    if (c->stage_n == PM__PCONN_STAGE_FRAMES || c->stage_len + len > PM__PCONN_STAGE_CAP) {
        /* Full: its record goes now, mid-turn; the frame starts the next. */
        if ((rc = pm__pconn_flush_stage(c)) < 0)
            return rc;
    }
    /* The room of the stage's record with this frame, reserved now: a
     * frame once taken must never meet a full queue when it is sealed;
     * and the CLOSE's room beyond it. */
    if (out_free(c) < pm__rec_wire_size(stage_plain(c->stage_n + 1, c->stage_len + len)) + PM__PCONN_CLOSE_ROOM) {
        if ((rc = pm__pconn_flush_stage(c)) < 0)
            return rc;
        return -EAGAIN;
    }
    /* The frame goes where its record's plaintext has it: this copy (from
     * the hub's buffer) is the only one before the cipher reads it. */
    if (c->stage_n == 0)
        c->stage[c->stage_used++] = PM__REC_FRAMES;
    pm__put32(c->stage + c->stage_used, (uint32_t)len);
    memcpy(c->stage + c->stage_used + PM__REC_FRAME_HDR, frame, len);
    c->stage_used += PM__REC_FRAME_HDR + len;
    c->stage_n++;
    c->stage_len += len;
    return 0;
}

/* ------------------------------------------------------------------ output */

const unsigned char *pm__pconn_output(const pm__pconn *c, size_t *len)
{
    *len = c->out != NULL ? c->out_len - c->out_off : 0;
    return *len > 0 ? c->out + c->out_off : NULL;
}

void pm__pconn_sent(pm__pconn *c, size_t n)
{
    if (n > c->out_len - c->out_off)
        n = c->out_len - c->out_off;
    c->out_off += n;
    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
}

/* The control records: one record each, with no frames. */
enum { CTL_HEARTBEAT, CTL_PING, CTL_PONG, CTL_REKEY };

/* Seals one control record into the output queue. The stage is sealed
 * first, as before every other record: the room reserved for it stays its
 * own, and frames keep their order. 0 queued; 1 when the queue has no room
 * for it (nothing sent); -ENOTCONN when the stage could not be sealed and
 * -EOVERFLOW at the nonce limit (the link is closed for both); else the
 * sealing's error. */
static int send_control(pm__pconn *c, int kind, uint64_t stamp)
{
    if (pm__pconn_flush_stage(c) < 0)
        return -ENOTCONN;
    size_t cap, len;
    int echo = kind == CTL_PING || kind == CTL_PONG;
    /* The CLOSE's room stays free (PM__PCONN_CLOSE_ROOM). */
    unsigned char *p =
        out_room(c, PM__REC_HDR + PM__REC_MIN_CT + (echo ? PM__REC_ECHO_BODY : 0) + PM__PCONN_CLOSE_ROOM, &cap);
    if (p == NULL)
        return 1;
    int rc;
    if (kind == CTL_REKEY)
        rc = pm__rec_seal_rekey(c->rec, p, cap, &len);
    else if (kind == CTL_HEARTBEAT)
        rc = pm__rec_seal_heartbeat(c->rec, p, cap, &len);
    else
        rc = pm__rec_seal_echo(c->rec, kind == CTL_PING ? PM__REC_ECHO_PING : PM__REC_ECHO_PONG, stamp,
                               p, cap, &len);
    if (rc == -EOVERFLOW)
        pm__pconn_close(c, PM__REC_CLOSE_NONCE, PM__PF_LOCAL);
    if (rc < 0)
        return rc;
    c->out_len += len;
    if (kind == CTL_REKEY) {
        c->records_since_rekey = 0;
        c->rekeys_out++;
    } else {
        c->records_since_rekey++;
    }
    return 0;
}

/* ------------------------------------------------------------------ life */

/* Frames in a record, for counting one that is not delivered. */
static uint64_t frames_of(const pm__rec_in *in)
{
    size_t off = 0, flen;
    const unsigned char *f;
    uint64_t n = 0;
    while (pm__rec_next_frame(in, &off, &f, &flen) == 1)
        n++;
    return n;
}

static int die(pm__pconn *c, int fail, int err)
{
    stage_drop(c); /* as the output queue: the peer never sees these */
    if (c->held) {
        /* The link died before its first record was taken (its caller
         * closed it as it came up): discarded, and counted as such. */
        c->frames_after_close += frames_of(&c->held_in);
        c->held = 0;
    }
    if (c->state != PM__PC_DEAD) {
        c->state = PM__PC_DEAD;
        c->fail = fail;
        c->err = err;
    }
    /* The handshake state holds the chaining key: wipe it now. */
    pm__noise_hs_free(c->hs);
    c->hs = NULL;
    return PM__PCE_DEAD;
}

void pm__pconn_close(pm__pconn *c, uint16_t reason, int fail)
{
    if (c->state == PM__PC_DEAD)
        return;
    if (c->rec != NULL && !c->close_sent) {
        size_t cap, n;
        /* Staged frames go out before the CLOSE, as queued ones do (best
         * effort: their requests are answered by the link's end anyway). */
        (void)stage_seal(c);
        /* Its room was left by every record before it
         * (PM__PCONN_CLOSE_ROOM): the CLOSE follows all of them. */
        unsigned char *p = out_room(c, PM__PCONN_CLOSE_ROOM, &cap);
        if (p != NULL && pm__rec_seal_close(c->rec, reason, p, cap, &n) == 0)
            c->out_len += n;
        c->close_sent = 1;
    }
    die(c, fail, 0);
}

/* A new handshake state for the prologue in c->prologue, with the secret
 * of index `secret` (or none: -1). */
static int hs_start(pm__pconn *c, int secret)
{
    const pm__keyring *kr = c->cfg->keys;
    c->psk = secret >= 0;
    int rc = pm__noise_hs_new(&c->hs, c->psk ? XXPSK3 : XX, c->initiator, c->prologue,
                              c->prologue_len, NULL);
    if (rc < 0)
        return rc;
    unsigned char pub[PM__PEER_KEY_LEN];
    if ((rc = pm__keyring_static_pub(kr, pub)) < 0 ||
        (rc = pm__noise_hs_set_static_pair(c->hs, pm__keyring_static_priv(kr), pub)) < 0)
        return rc;
    if (secret >= 0 && (rc = pm__noise_hs_set_psk(c->hs, 0, pm__keyring_secret(kr, (unsigned)secret))) < 0)
        return rc;
    return 0;
}

/* Writes the next handshake message with payload, framed u32 length. */
static int hs_write(pm__pconn *c, const void *payload, size_t plen)
{
    size_t cap, n;
    unsigned char *p = out_room(c, 4 + PM__PEER_HS_MSG_MAX, &cap);
    if (p == NULL)
        return -ENOBUFS;
    int rc = pm__noise_write_message(c->hs, payload, plen, p + 4, PM__PEER_HS_MSG_MAX, &n);
    if (rc < 0)
        return rc;
    pm__put32(p, (uint32_t)n);
    c->out_len += 4 + n;
    return 0;
}

int pm__pconn_init(pm__pconn *c, const pm__pconn_cfg *cfg, int initiator)
{
    memset(c, 0, sizeof(*c));
    c->initiator = initiator ? 1 : 0;
    c->caps = PM__PEER_CAPS;
    c->cfg = cfg;
    if (cfg == NULL || cfg->keys == NULL || pm__keyring_static_priv(cfg->keys) == NULL ||
        !pm__name_valid(cfg->system) || !pm__peer_host_valid(cfg->host, strlen(cfg->host)) ||
        cfg->incarnation == 0 || cfg->idle_ms < PM__PEER_IDLE_MIN_MS ||
        cfg->idle_ms > PM__PEER_IDLE_MAX_MS)
        return -EINVAL;
    c->out = malloc(PM__PCONN_OUT_CAP);
    c->stage = malloc(PM__PCONN_STAGE_BUF);
    if (c->out == NULL || c->stage == NULL) {
        pm__pconn_free(c);
        return -ENOMEM;
    }
    if (!c->initiator) {
        c->state = PM__PC_PREAMBLE;
        return 0;
    }
    /* The initiator uses its first secret (rotation: the current one). */
    unsigned char id[PM__PEER_KEY_ID_LEN] = {0};
    int secret = pm__keyring_nsecrets(cfg->keys) > 0 ? 0 : -1;
    if (secret == 0)
        pm__keyring_secret_id(cfg->keys, 0, id);
    c->prologue_len = pm__peer_preamble(cfg->system, id, c->prologue);
    memcpy(c->out, c->prologue, c->prologue_len);
    c->out_len = c->prologue_len;
    c->state = PM__PC_HANDSHAKE;
    int rc = hs_start(c, secret);
    if (rc == 0)
        rc = hs_write(c, NULL, 0); /* message 1: e, and nothing else */
    if (rc < 0) {
        pm__pconn_free(c);
        return rc == -ENOMEM ? rc : -EINVAL;
    }
    return 0;
}

void pm__pconn_free(pm__pconn *c)
{
    pm__noise_hs_free(c->hs);
    c->hs = NULL;
    pm__rec_free(c->rec);
    c->rec = NULL;
    if (c->out != NULL) {
        explicit_bzero(c->out, PM__PCONN_OUT_CAP); /* ciphertext only, but inherited on fork */
        free(c->out);
    }
    c->out = NULL;
    stage_drop(c);
    free(c->stage);
    c->stage = NULL;
    explicit_bzero(c->in, sizeof(c->in));
    c->state = PM__PC_DEAD;
}

/* ------------------------------------------------------------------ handshake */

/* How many handshake bytes the unit being read needs in total (in[] holds
 * in_len of them), or 0 with *fail set when what is in already breaks a
 * rule. Every length is judged before the bytes it covers are read. */
static size_t need_preamble(pm__pconn *c, int *fail)
{
    const unsigned char *p = c->in;
    size_t n = c->in_len;
    if (n < 7)
        return 7;
    if (memcmp(p, PM__PEER_MAGIC, 6) != 0 || p[6] < 1 || p[6] > 32) {
        *fail = PM__PF_PREAMBLE;
        return 0;
    }
    size_t v = p[6];
    if (n < 8 + v)
        return 8 + v;
    size_t sn = p[7 + v];
    if (sn < 1 || sn > 63) {
        *fail = PM__PF_PREAMBLE;
        return 0;
    }
    return 16 + v + sn;
}

/* The expected length bounds of handshake message `idx` (0, 1, 2) framed
 * by the peer. */
static void msg_bounds(int psk, int idx, size_t *lo, size_t *hi)
{
    if (idx == 0) {
        *lo = *hi = psk ? 48 : 32;
    } else {
        *lo = (idx == 1 ? 96u : 64u) + PM__PEER_HELLO_MIN;
        *hi = PM__PEER_HS_MSG_MAX;
    }
}

/* The framed length of the message being read (in[0..4) is in): 4 + its
 * length, or *fail when the table of doc/protocol.md 4 forbids it. Which
 * message the peer sends next: the responder reads 0 and 2, the initiator
 * 1. */
static size_t msg_need(const pm__pconn *c, int *fail)
{
    int idx = c->initiator ? 1 : c->hs_msgs_in == 0 ? 0 : 2;
    size_t lo, hi, mlen = pm__get32(c->in);
    msg_bounds(c->psk, idx, &lo, &hi);
    if (mlen < lo || mlen > hi)
        *fail = PM__PF_HS_LENGTH;
    return 4 + mlen;
}

/* The responder has the whole preamble in in[0..n): judge it and start the
 * handshake. */
static int take_preamble(pm__pconn *c, size_t n)
{
    const unsigned char *p = c->in;
    size_t v = p[6], sn = p[7 + v];
    if (v != strlen(PM__PEER_VERSION_STR) || memcmp(p + 7, PM__PEER_VERSION_STR, v) != 0)
        return die(c, PM__PF_VERSION, -EPROTONOSUPPORT);
    if (sn != strlen(c->cfg->system) || memcmp(p + 8 + v, c->cfg->system, sn) != 0)
        return die(c, PM__PF_SYSTEM, -EPERM);
    const unsigned char *id = p + 8 + v + sn;
    static const unsigned char zero[PM__PEER_KEY_ID_LEN];
    unsigned nsecrets = pm__keyring_nsecrets(c->cfg->keys);
    int secret = -1;
    if (memcmp(id, zero, sizeof(zero)) == 0) {
        if (nsecrets > 0)
            return die(c, PM__PF_KEY_ID, -EKEYREJECTED); /* never a downgrade to no psk */
    } else {
        if (nsecrets == 0 || (secret = pm__keyring_find(c->cfg->keys, id)) < 0)
            return die(c, PM__PF_KEY_ID, -EKEYREJECTED);
    }
    memcpy(c->prologue, p, n);
    c->prologue_len = n;
    int rc = hs_start(c, secret);
    if (rc < 0)
        return die(c, PM__PF_LOCAL, rc);
    c->state = PM__PC_HANDSHAKE;
    return PM__PCE_NONE;
}

static void my_hello(const pm__pconn *c, pm__peer_hello *h)
{
    memset(h, 0, sizeof(*h));
    h->max_version = PM__PEER_MAX_VERSION;
    h->incarnation = c->cfg->incarnation;
    h->idle_ms = c->cfg->idle_ms;
    h->capabilities = c->caps;
    snprintf(h->host, sizeof(h->host), "%s", c->cfg->host);
}

/* The checks on a received hello and the static key behind it. */
static int judge_hello(pm__pconn *c, const unsigned char *payload, size_t len)
{
    if (pm__peer_hello_decode(payload, len, &c->peer) < 0)
        return die(c, PM__PF_HELLO, -EBADMSG);
    unsigned use = PM__PEER_MAX_VERSION < c->peer.max_version ? PM__PEER_MAX_VERSION : c->peer.max_version;
    if (use != 1) /* the version of the preamble, "procmesh-link/1" */
        return die(c, PM__PF_VERSION, -EPROTONOSUPPORT);
    /* Our own name: ourselves (same incarnation) or a clash no route could
     * tell apart; neither is linked. */
    if (strcmp(c->peer.host, c->cfg->host) == 0)
        return die(c, PM__PF_SELF, -ELOOP);
    if (pm__noise_hs_remote_static(c->hs, c->peer_static) < 0)
        return die(c, PM__PF_HS_DECRYPT, -EBADMSG);
    if (c->cfg->pins != NULL && !pm__pins_allow(c->cfg->pins, c->peer.host, c->peer_static))
        return die(c, PM__PF_PIN, -EKEYREJECTED);
    return PM__PCE_NONE;
}

/* Split, then our first record (a HEARTBEAT): doc/protocol.md 2, step 5. */
static int split(pm__pconn *c)
{
    pm__noise_transport *t = NULL;
    int rc = pm__noise_split(c->hs, PM__NOISE_REKEY_EVERY, &t);
    pm__noise_hs_free(c->hs);
    c->hs = NULL;
    if (rc < 0 || (rc = pm__rec_new(&c->rec, t)) < 0)
        return die(c, PM__PF_LOCAL, rc);
    c->state = PM__PC_SPLIT;
    rc = pm__pconn_heartbeat(c);
    return rc < 0 ? die(c, PM__PF_LOCAL, rc) : PM__PCE_NONE;
}

/* One complete handshake message in in[4 .. 4 + mlen). */
static int take_message(pm__pconn *c, size_t mlen)
{
    unsigned char payload[PM__PEER_HS_MSG_MAX];
    size_t plen = 0;
    int rc = pm__noise_read_message(c->hs, c->in + 4, mlen, payload, sizeof(payload), &plen);
    if (rc < 0)
        return die(c, PM__PF_HS_DECRYPT, rc);
    pm__peer_hello mine;
    unsigned char hello[19 + 64];
    my_hello(c, &mine);
    size_t hlen = pm__peer_hello_encode(&mine, hello, sizeof(hello));
    if (!c->initiator && !pm__noise_hs_done(c->hs)) {
        /* Message 1: its payload MUST be empty; answer with message 2. */
        if (plen != 0)
            return die(c, PM__PF_HELLO, -EBADMSG);
        rc = hs_write(c, hello, hlen);
        return rc < 0 ? die(c, PM__PF_LOCAL, rc) : PM__PCE_NONE;
    }
    if ((rc = judge_hello(c, payload, plen)) != PM__PCE_NONE)
        return rc;
    if (c->initiator) {
        rc = hs_write(c, hello, hlen); /* message 3 */
        if (rc < 0)
            return die(c, PM__PF_LOCAL, rc);
    }
    return split(c);
}

/* Feeds handshake bytes: takes as many as the unit being read needs. */
static int hs_input(pm__pconn *c, const unsigned char *data, size_t len, size_t *used)
{
    int fail = PM__PF_NONE;
    size_t need;
    if (c->state == PM__PC_PREAMBLE) {
        need = need_preamble(c, &fail);
    } else {
        need = c->in_len < 4 ? 4 : msg_need(c, &fail);
    }
    if (fail != PM__PF_NONE)
        return die(c, fail, -EBADMSG);
    size_t take = need - c->in_len;
    if (take > len)
        take = len;
    memcpy(c->in + c->in_len, data, take);
    c->in_len += take;
    *used += take;
    if (c->in_len < need)
        return PM__PCE_NONE;
    /* need grows with what is in (lengths first): judge again when the
     * unit may still be incomplete. */
    if (c->state == PM__PC_PREAMBLE) {
        size_t again = need_preamble(c, &fail);
        if (fail != PM__PF_NONE)
            return die(c, fail, -EBADMSG);
        if (again > c->in_len)
            return PM__PCE_NONE;
        int rc = take_preamble(c, c->in_len);
        c->in_len = 0;
        return rc;
    }
    if (c->in_len == 4) {
        /* The length is in: judged now, before a byte of the message. */
        msg_need(c, &fail);
        return fail != PM__PF_NONE ? die(c, fail, -EBADMSG) : PM__PCE_NONE;
    }
    c->hs_msgs_in++;
    int rc = take_message(c, c->in_len - 4);
    explicit_bzero(c->in, c->in_len);
    c->in_len = 0;
    return rc;
}

/* ------------------------------------------------------------------ records */

static int take_record(pm__pconn *c, const pm__rec_in *in)
{
    switch (in->type) {
    case PM__REC_FRAMES: {
        size_t off = 0, flen;
        const unsigned char *f;
        c->frame_records_in++;
        while (pm__rec_next_frame(in, &off, &f, &flen) == 1) {
            c->frames_in++;
            c->bytes_in += flen;
            if (c->on_frame != NULL)
                c->on_frame(c->on_frame_arg, f, flen);
        }
        break;
    }
    case PM__REC_CLOSE:
        c->close_reason = in->close_reason;
        c->close_received = 1;
        pm__pconn_close(c, PM__REC_CLOSE_SHUTDOWN, PM__PF_CLOSED);
        return PM__PCE_DEAD;
    case PM__REC_REKEY: /* the key change itself is the decoder's */
        c->rekeys_in++;
        break;
    case PM__REC_HEARTBEAT:
        if (in->echo == PM__REC_ECHO_PONG) {
            c->pongs++;
            c->pong_stamp = in->echo_stamp;
        } else if (in->echo == PM__REC_ECHO_PING) {
            /* Answered at once; with the queue full it is skipped (an RTT
             * sample lost, nothing else: records queued prove liveness).
             * A stage that cannot be sealed, or the nonce limit, closes
             * the link; any other failure only loses the sample. */
            (void)send_control(c, CTL_PONG, in->echo_stamp);
            if (c->state == PM__PC_DEAD)
                return PM__PCE_DEAD;
        }
        break;
    default: /* no other type reaches here */
        break;
    }
    return PM__PCE_NONE;
}

int pm__pconn_input(pm__pconn *c, const void *data, size_t len, size_t *used)
{
    const unsigned char *p = data;
    *used = 0;
    if (c->held && c->state == PM__PC_UP) {
        /* The first record, held over PM__PCE_UP: its body is still in the
         * decoder's buffer (nothing was fed since). */
        c->held = 0;
        int rc = take_record(c, &c->held_in);
        if (rc != PM__PCE_NONE)
            return rc;
    }
    while (*used < len) {
        if (c->state == PM__PC_DEAD)
            return PM__PCE_DEAD;
        int rc;
        if (c->state == PM__PC_PREAMBLE || c->state == PM__PC_HANDSHAKE) {
            rc = hs_input(c, p + *used, len - *used, used);
            if (rc != PM__PCE_NONE)
                return rc;
            continue;
        }
        pm__rec_in in;
        size_t u = 0;
        rc = pm__rec_feed(c->rec, p + *used, len - *used, &u, &in);
        *used += u;
        if (rc < 0) {
            /* The receiving direction failed; ours still works: say why. */
            pm__pconn_close(c, rc == -EOVERFLOW ? PM__REC_CLOSE_NONCE : PM__REC_CLOSE_PROTOCOL,
                            PM__PF_RECORD);
            c->err = rc;
            return PM__PCE_DEAD;
        }
        if (rc == 0)
            continue;
        int first = c->state == PM__PC_SPLIT;
        if (first)
            c->state = PM__PC_UP; /* a valid record: doc/protocol.md 2, step 6 */
        if (first && in.type == PM__REC_FRAMES) {
            /* Frames before the link is installed would find no route:
             * the caller installs it first, the next call delivers them. */
            c->held = 1;
            c->held_in = in;
            return PM__PCE_UP;
        }
        rc = take_record(c, &in);
        if (rc != PM__PCE_NONE)
            return rc;
        if (first)
            return PM__PCE_UP;
    }
    return c->state == PM__PC_DEAD ? PM__PCE_DEAD : PM__PCE_NONE;
}

int pm__pconn_eof(pm__pconn *c)
{
    if (c->state == PM__PC_DEAD)
        return PM__PCE_DEAD;
    /* A live link has received no CLOSE: the record that carries one is
     * taken as it is decoded (take_record), and that ends the link. So a
     * stream that ends now ends without one, in the handshake or after
     * it: truncated (doc/protocol.md 6). */
    return die(c, PM__PF_TRUNCATED, -ECONNRESET);
}

int pm__pconn_linger(pm__pconn *c, const void *data, size_t len)
{
    const unsigned char *p = data;
    size_t off = 0;
    if (c->rec == NULL || !c->close_sent)
        return -ENOTCONN;
    while (off < len && !c->close_received) {
        pm__rec_in in;
        size_t u = 0;
        int got = pm__rec_feed(c->rec, p + off, len - off, &u, &in);
        off += u;
        if (got < 0)
            return got;
        if (got == 0)
            continue; /* every byte taken, no record complete */
        if (in.type == PM__REC_FRAMES) {
            size_t foff = 0, flen;
            const unsigned char *f;
            while (pm__rec_next_frame(&in, &foff, &f, &flen) == 1)
                c->frames_after_close++;
        } else if (in.type == PM__REC_CLOSE) {
            c->close_reason = in.close_reason;
            c->close_received = 1;
        } else if (in.type == PM__REC_REKEY) {
            c->rekeys_in++; /* the key change itself is the decoder's */
        }
        /* A HEARTBEAT: its PING goes unanswered (our CLOSE was the last). */
    }
    return c->close_received ? 1 : 0;
}

/* ------------------------------------------------------------------ sending */

int pm__pconn_heartbeat(pm__pconn *c)
{
    if (c->rec == NULL || c->state == PM__PC_DEAD)
        return -ENOTCONN;
    int rc = send_control(c, CTL_HEARTBEAT, 0);
    return rc == 1 ? 0 : rc; /* queue full: queued records prove liveness as well */
}

int pm__pconn_rekey(pm__pconn *c)
{
    if (c->rec == NULL || c->state == PM__PC_DEAD)
        return -ENOTCONN;
    int rc = send_control(c, CTL_REKEY, 0);
    return rc == 1 ? -EAGAIN : rc;
}

int pm__pconn_ping(pm__pconn *c, uint64_t stamp)
{
    if (c->rec == NULL || c->state == PM__PC_DEAD)
        return -ENOTCONN;
    int rc = send_control(c, CTL_PING, stamp);
    return rc == 1 ? 0 : rc; /* as pm__pconn_heartbeat: what is queued proves liveness */
}
