/* SPDX-License-Identifier: MIT */
/* fuzz_record.c - libFuzzer harness for the peer link record decoder (pm__rec_feed) against an honest sender. */
/*
 * A deterministic XXpsk3 handshake (fixed keys) gives a sender and a
 * receiver. Input: a mode byte, then operations.
 *
 * Mode 0 (raw): the rest of the input is the byte stream, fed in chunks
 * whose sizes the input chooses. Nobody holding the key wrote it, so the
 * decoder may never deliver a record: every result is 0 (waiting) or a
 * documented error, and after an error every call repeats it.
 *
 * Mode 1 (honest sender, hostile wire): operations make the sender seal
 * records (frames of chosen sizes and contents, batched; heartbeats;
 * rekeys; a close), then mutate the stream (flip, overwrite, insert, cut,
 * duplicate or swap bytes), then it is fed in chosen chunks. Oracle: the
 * records delivered are exactly the sender's, in order, byte for byte, and
 * only those that lie wholly before the first changed byte; end of stream
 * is clean only when nothing was changed and a CLOSE was sent.
 */
#include <errno.h>

#include "fuzz.h"
#include "peer/noise.h"
#include "peer/record.h"
#include "../tests/hooks.h"

#define XXPSK3 "Noise_XXpsk3_25519_ChaChaPoly_SHA256"
#define MAX_RECORDS 16
#define STREAM_MAX (MAX_RECORDS * 2048 + 64)

static void pair(pm__rec *r[2])
{
    static const unsigned char psk[32] = {1, 2, 3};
    unsigned char k[4][32], msg[512], payload[64];
    pm__noise_hs *hs[2];
    pm__noise_transport *t[2];
    for (int i = 0; i < 4; i++)
        memset(k[i], 0x11 * (i + 1), 32);
    for (int i = 0; i < 2; i++) {
        FUZZ_ASSERT(pm__noise_hs_new(&hs[i], XXPSK3, i == 0, "PMLINK", 6, NULL) == 0);
        FUZZ_ASSERT(pm_test_noise_set_static(hs[i], k[i]) == 0);
        FUZZ_ASSERT(pm__noise_hs_set_psk(hs[i], 0, psk) == 0);
        FUZZ_ASSERT(pm_test_noise_set_ephemeral(hs[i], k[2 + i]) == 0);
    }
    for (int m = 0; m < 3; m++) {
        size_t len, plen;
        FUZZ_ASSERT(pm__noise_write_message(hs[m % 2], NULL, 0, msg, sizeof(msg), &len) == 0);
        FUZZ_ASSERT(pm__noise_read_message(hs[1 - m % 2], msg, len, payload, sizeof(payload), &plen) == 0);
    }
    for (int i = 0; i < 2; i++) {
        FUZZ_ASSERT(pm__noise_split(hs[i], PM__NOISE_REKEY_EVERY, &t[i]) == 0);
        pm__noise_hs_free(hs[i]);
        FUZZ_ASSERT(pm__rec_new(&r[i], t[i]) == 0);
    }
}

static int documented(int rc)
{
    return rc == -EMSGSIZE || rc == -EPROTO || rc == -EBADMSG || rc == -EOVERFLOW || rc == -ECONNRESET;
}

/* What the honest sender sent, to compare with what comes out. */
struct sent {
    int type;
    size_t start, end; /* the record's bytes in the stream */
    size_t nframes;
    unsigned char frames[8][256];
    size_t flen[8];
    uint16_t reason;
};

static struct sent sent[MAX_RECORDS];
static unsigned char stream[STREAM_MAX + 256], orig[STREAM_MAX + 256];

static void raw_mode(pm__rec *rx, fuzz_in *in)
{
    int err = 0;
    while (fuzz_more(in)) {
        size_t chunk = 1 + fuzz_u8(in) % 64;
        if (chunk > in->left)
            chunk = in->left;
        unsigned char *buf = malloc(chunk ? chunk : 1); /* exactly its size: ASan sees an overread */
        memcpy(buf, in->p, chunk);
        in->p += chunk;
        in->left -= chunk;
        size_t used;
        pm__rec_in rec;
        int rc = pm__rec_feed(rx, buf, chunk, &used, &rec);
        free(buf);
        FUZZ_ASSERT(rc != 1); /* no record without the key */
        FUZZ_ASSERT(used <= chunk);
        if (err != 0)
            FUZZ_ASSERT(rc == err && used == 0); /* dead for good */
        if (rc < 0) {
            FUZZ_ASSERT(documented(rc));
            err = rc;
        } else {
            FUZZ_ASSERT(used == chunk);
        }
    }
    int rc = pm__rec_eof(rx);
    FUZZ_ASSERT(rc == (err != 0 ? err : -ECONNRESET));
}

static void honest_mode(pm__rec *tx, pm__rec *rx, fuzz_in *in)
{
    size_t nrec = 0, len = 0;
    int closed = 0;
    /* 1. The sender's records. */
    while (fuzz_more(in) && nrec < MAX_RECORDS && !closed) {
        uint8_t op = fuzz_u8(in);
        struct sent *s = &sent[nrec];
        memset(s, 0, sizeof(*s));
        size_t out_len;
        int rc;
        if (op == 0xff)
            break; /* on to the mutations */
        switch (op % 4) {
        case 0: {
            struct iovec iov[8];
            size_t n = 1 + fuzz_u8(in) % 8, taken;
            for (size_t i = 0; i < n; i++) {
                s->flen[i] = 1 + fuzz_u8(in) % 200;
                for (size_t j = 0; j < s->flen[i]; j++)
                    s->frames[i][j] = fuzz_u8(in);
                iov[i].iov_base = s->frames[i];
                iov[i].iov_len = s->flen[i];
            }
            rc = pm_test_rec_seal_frames(tx, iov, n, &taken, stream + len, STREAM_MAX - len, &out_len);
            FUZZ_ASSERT(rc == 0 && taken == n); /* small frames always fit one record */
            s->type = PM__REC_FRAMES;
            s->nframes = n;
            break;
        }
        case 1:
            rc = pm__rec_seal_heartbeat(tx, stream + len, STREAM_MAX - len, &out_len);
            s->type = PM__REC_HEARTBEAT;
            break;
        case 2:
            rc = pm__rec_seal_rekey(tx, stream + len, STREAM_MAX - len, &out_len);
            s->type = PM__REC_REKEY;
            break;
        default:
            s->reason = fuzz_u16(in);
            rc = pm__rec_seal_close(tx, s->reason, stream + len, STREAM_MAX - len, &out_len);
            s->type = PM__REC_CLOSE;
            closed = 1;
        }
        FUZZ_ASSERT(rc == 0);
        s->start = len;
        s->end = len + out_len;
        len += out_len;
        nrec++;
    }
    /* 2. The wire's mutations. */
    size_t sent_len = len;
    memcpy(orig, stream, len);
    size_t nmut = fuzz_u8(in) % 4;
    for (size_t m = 0; m < nmut && len > 0; m++) {
        uint8_t kind = fuzz_u8(in) % 5;
        size_t at = fuzz_u16(in) % len;
        switch (kind) {
        case 0: { /* flip bits */
            uint8_t x = fuzz_u8(in);
            if (x == 0)
                x = 1;
            stream[at] ^= x;
            break;
        }
        case 1: /* cut the stream */
            len = at;
            break;
        case 2: { /* insert a byte */
            if (len >= STREAM_MAX)
                continue;
            memmove(stream + at + 1, stream + at, len - at);
            stream[at] = fuzz_u8(in);
            len++;
            break;
        }
        case 3: { /* duplicate a record at the end (a replay) */
            size_t k = fuzz_u8(in) % (nrec ? nrec : 1);
            if (nrec == 0 || len + (sent[k].end - sent[k].start) > STREAM_MAX || sent[k].end > len)
                continue;
            memcpy(stream + len, stream + sent[k].start, sent[k].end - sent[k].start);
            len += sent[k].end - sent[k].start;
            break;
        }
        default: /* drop a byte */
            memmove(stream + at, stream + at + 1, len - at - 1);
            len--;
        }
    }
    /* The first byte of what was sent that did not arrive as sent (two
     * flips of one byte may cancel out; a cut ends what arrived). */
    size_t first_bad = len < sent_len ? len : sent_len;
    for (size_t i = 0; i < first_bad; i++) {
        if (stream[i] != orig[i]) {
            first_bad = i;
            break;
        }
    }
    int untouched = first_bad == sent_len && len == sent_len;
    /* 3. Feed it in chosen chunks. */
    size_t pos = 0, got = 0;
    int err = 0;
    while (pos < len && err == 0) {
        size_t chunk = 1 + fuzz_u16(in) % 4096;
        if (chunk > len - pos)
            chunk = len - pos;
        size_t used;
        pm__rec_in rec;
        int rc = pm__rec_feed(rx, stream + pos, chunk, &used, &rec);
        FUZZ_ASSERT(used <= chunk);
        pos += used;
        if (rc < 0) {
            FUZZ_ASSERT(documented(rc));
            err = rc;
            break;
        }
        if (rc == 0) {
            FUZZ_ASSERT(used == chunk);
            continue;
        }
        /* A record: the next one sent, wholly before any change. */
        FUZZ_ASSERT(got < nrec);
        const struct sent *s = &sent[got];
        FUZZ_ASSERT(s->end <= first_bad && pos == s->end);
        FUZZ_ASSERT(rec.type == s->type);
        if (s->type == PM__REC_FRAMES) {
            size_t off = 0, flen, i = 0;
            const unsigned char *frame;
            while (pm__rec_next_frame(&rec, &off, &frame, &flen) == 1) {
                FUZZ_ASSERT(i < s->nframes && flen == s->flen[i] && memcmp(frame, s->frames[i], flen) == 0);
                i++;
            }
            FUZZ_ASSERT(i == s->nframes);
        } else if (s->type == PM__REC_CLOSE) {
            FUZZ_ASSERT(rec.close_reason == s->reason);
        } else {
            FUZZ_ASSERT(rec.len == 0);
        }
        got++;
    }
    int rc = pm__rec_eof(rx);
    if (err != 0)
        FUZZ_ASSERT(rc == err);
    else if (untouched && closed)
        FUZZ_ASSERT(rc == 0 && got == nrec);
    else if (rc == 0)
        FUZZ_ASSERT(got > 0 && sent[got - 1].type == PM__REC_CLOSE); /* a change after the close was cut away */
    else
        FUZZ_ASSERT(rc == -ECONNRESET);
    if (untouched)
        FUZZ_ASSERT(err == 0 && got == nrec); /* everything arrives */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    fuzz_in in = {data + 1, size - 1};
    pm__rec *r[2];
    pair(r);
    if (data[0] % 2 == 0)
        raw_mode(r[1], &in);
    else
        honest_mode(r[0], r[1], &in);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);
    return 0;
}
