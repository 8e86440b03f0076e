/* SPDX-License-Identifier: MIT */
/* check_record.c - the peer link record layer: round trips, batching, hostile streams, close and truncation, rekey, the nonce limit. */
#include "helpers.h"

#include <sodium.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/internal.h"
#include "base/le.h"
#include "peer/noise.h"
#include "peer/record.h"
#include "hooks.h"

#define XXPSK3 "Noise_XXpsk3_25519_ChaChaPoly_SHA256"

/* Two transports from a real XXpsk3 handshake: t[0] the initiator's. */
static void handshake(pm__noise_transport *t[2])
{
    static const unsigned char psk[32] = {7};
    unsigned char s[2][32], msg[512], payload[64];
    pm__noise_hs *hs[2];
    ck_assert_int_ge(sodium_init(), 0);
    for (int i = 0; i < 2; i++) {
        randombytes_buf(s[i], 32);
        ck_assert_int_eq(pm__noise_hs_new(&hs[i], XXPSK3, i == 0, "test", 4, NULL), 0);
        ck_assert_int_eq(pm_test_noise_set_static(hs[i], s[i]), 0);
        ck_assert_int_eq(pm__noise_hs_set_psk(hs[i], 0, psk), 0);
    }
    for (int m = 0; m < 3; m++) {
        int w = m % 2, r = 1 - w;
        size_t len, plen;
        ck_assert_int_eq(pm__noise_write_message(hs[w], NULL, 0, msg, sizeof(msg), &len), 0);
        ck_assert_int_eq(pm__noise_read_message(hs[r], msg, len, payload, sizeof(payload), &plen), 0);
    }
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(pm__noise_split(hs[i], PM__NOISE_REKEY_EVERY, &t[i]), 0);
        pm__noise_hs_free(hs[i]);
    }
}

/* Two record states facing each other: r[0] the initiator's. */
static void pair(pm__rec *r[2])
{
    pm__noise_transport *t[2];
    handshake(t);
    ck_assert_int_eq(pm__rec_new(&r[0], t[0]), 0);
    ck_assert_int_eq(pm__rec_new(&r[1], t[1]), 0);
}

static unsigned char wire[PM__REC_WIRE_MAX];

/* Feeds all of buf[0..len) to r, collecting at most one record. Returns the
 * last result (1: a record, ending exactly at len). */
static int feed_all(pm__rec *r, const void *buf, size_t len, pm__rec_in *in)
{
    size_t used = 0;
    int rc = pm__rec_feed(r, buf, len, &used, in);
    if (rc == 1)
        ck_assert_uint_eq(used, len);
    return rc;
}

static int seal_hb(pm__rec *r, size_t *len)
{
    return pm__rec_seal_heartbeat(r, wire, sizeof(wire), len);
}

/* ------------------------------------------------------------ round trips */

START_TEST(test_round_trip)
{
    pm__rec *r[2];
    pair(r);
    pm__rec_in in;
    size_t len;
    ck_assert_int_eq(pm_test_rec_up(r[1]), 0);
    ck_assert_int_eq(seal_hb(r[0], &len), 0);
    ck_assert_uint_eq(len, 4 + 1 + 16);
    ck_assert_uint_eq(pm__get32(wire), 17);
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), 1);
    ck_assert_int_eq(in.type, PM__REC_HEARTBEAT);
    ck_assert_uint_eq(in.len, 0);
    ck_assert_int_eq(pm_test_rec_up(r[1]), 1); /* a valid transport record: up */

    /* And the other way. */
    ck_assert_int_eq(seal_hb(r[1], &len), 0);
    ck_assert_int_eq(feed_all(r[0], wire, len, &in), 1);
    ck_assert_int_eq(pm_test_rec_up(r[0]), 1);

    /* Fed one byte at a time: the same record, 0 until its last byte. */
    const char f[] = "hello";
    struct iovec iov = {(void *)f, 5};
    size_t taken;
    ck_assert_int_eq(pm_test_rec_seal_frames(r[0], &iov, 1, &taken, wire, sizeof(wire), &len), 0);
    ck_assert_uint_eq(taken, 1);
    ck_assert_uint_eq(len, pm__rec_wire_size(1 + 4 + 5));
    for (size_t i = 0; i < len; i++) {
        size_t used;
        int rc = pm__rec_feed(r[1], wire + i, 1, &used, &in);
        ck_assert_uint_eq(used, 1);
        ck_assert_int_eq(rc, i + 1 == len ? 1 : 0);
    }
    ck_assert_int_eq(in.type, PM__REC_FRAMES);
    size_t off = 0, flen;
    const unsigned char *frame;
    ck_assert_int_eq(pm__rec_next_frame(&in, &off, &frame, &flen), 1);
    ck_assert_uint_eq(flen, 5);
    ck_assert_mem_eq(frame, "hello", 5);
    ck_assert_int_eq(pm__rec_next_frame(&in, &off, &frame, &flen), 0);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);
}
END_TEST

START_TEST(test_batching)
{
    /* Many frames share a record and come back exactly, in order; a batch
     * larger than a record is cut at a frame boundary; records larger than
     * one Noise message are segmented. Several records in one feed buffer
     * come out one by one. */
    pm__rec *r[2];
    pair(r);
    enum { N = 64 };
    static unsigned char data[N][PM__REC_MAX_FRAME];
    struct iovec iov[N];
    uint64_t seed = 42;
    size_t sizes[N];
    for (size_t i = 0; i < N; i++) {
        /* From 1 byte to the largest frame, with the edges. */
        sizes[i] = i == 0 ? 1 : i == 1 ? PM__REC_MAX_FRAME : 1 + pm_test_rand(&seed) % (i % 3 ? 300 : 40000);
        for (size_t j = 0; j < sizes[i]; j++)
            data[i][j] = (unsigned char)pm_test_rand(&seed);
        iov[i].iov_base = data[i];
        iov[i].iov_len = sizes[i];
    }
    static unsigned char stream[8 * PM__REC_WIRE_MAX];
    size_t stream_len = 0, sent = 0, records = 0;
    while (sent < N) {
        size_t taken, len;
        ck_assert_int_eq(pm_test_rec_seal_frames(r[0], iov + sent, N - sent, &taken, stream + stream_len,
                                             sizeof(stream) - stream_len, &len),
                         0);
        ck_assert_uint_ge(taken, 1);
        ck_assert_uint_le(len, PM__REC_WIRE_MAX);
        stream_len += len;
        sent += taken;
        records++;
    }
    ck_assert_uint_lt(records, N); /* batched */
    size_t got = 0, pos = 0;
    while (pos < stream_len) {
        pm__rec_in in;
        size_t used;
        int rc = pm__rec_feed(r[1], stream + pos, stream_len - pos, &used, &in);
        ck_assert_int_eq(rc, 1);
        pos += used;
        size_t off = 0, flen;
        const unsigned char *frame;
        while (pm__rec_next_frame(&in, &off, &frame, &flen) == 1) {
            ck_assert_uint_lt(got, N);
            ck_assert_uint_eq(flen, sizes[got]);
            ck_assert_mem_eq(frame, data[got], flen);
            got++;
        }
    }
    ck_assert_uint_eq(got, N);

    /* cap limits the batch too: room for two small frames takes two. */
    struct iovec small[3] = {{data[2], 10}, {data[3], 10}, {data[4], 10}};
    size_t taken, len;
    size_t cap = pm__rec_wire_size(1 + 2 * (4 + 10));
    ck_assert_int_eq(pm_test_rec_seal_frames(r[0], small, 3, &taken, wire, cap, &len), 0);
    ck_assert_uint_eq(taken, 2);
    ck_assert_uint_eq(len, cap);
    pm__rec_in in;
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), 1);
    ck_assert_int_eq(pm_test_rec_seal_frames(r[0], small, 3, &taken, wire, 20, &len), -ENOBUFS);
    struct iovec empty = {data[0], 0}, huge = {data[0], PM__REC_MAX_FRAME + 1};
    ck_assert_int_eq(pm_test_rec_seal_frames(r[0], &empty, 1, &taken, wire, sizeof(wire), &len), -EINVAL);
    ck_assert_int_eq(pm_test_rec_seal_frames(r[0], &huge, 1, &taken, wire, sizeof(wire), &len), -EINVAL);
    /* Another type's byte before valid frames: not a FRAMES plaintext. */
    static unsigned char other[1 + 4 + 3] = {PM__REC_HEARTBEAT, 3, 0, 0, 0, 'a', 'b', 'c'};
    ck_assert_int_eq(pm__rec_seal_frames_plain(r[0], other, sizeof(other), wire, sizeof(wire), &len),
                     -EINVAL);
    other[0] = PM__REC_FRAMES;
    ck_assert_int_eq(pm__rec_seal_frames_plain(r[0], other, sizeof(other), wire, sizeof(wire), &len), 0);
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), 1);
    /* A plaintext of exactly the maximum, four frames filling it: sealed,
     * and it opens; one byte more is not. */
    static unsigned char full[PM__REC_MAX_PLAIN + 1];
    memset(full, 'f', sizeof(full));
    full[0] = PM__REC_FRAMES;
    size_t at = 1, left = PM__REC_MAX_PLAIN - 1 - 4 * PM__REC_FRAME_HDR;
    for (int k = 0; k < 4; k++) {
        size_t fl = k < 3 ? left / 4 : left - 3 * (left / 4);
        ck_assert_uint_le(fl, PM__REC_MAX_FRAME);
        pm__put32(full + at, (uint32_t)fl);
        at += PM__REC_FRAME_HDR + fl;
    }
    ck_assert_uint_eq(at, PM__REC_MAX_PLAIN);
    ck_assert_int_eq(pm__rec_seal_frames_plain(r[0], full, PM__REC_MAX_PLAIN, wire, sizeof(wire), &len), 0);
    ck_assert_uint_eq(len, PM__REC_WIRE_MAX);
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), 1);
    ck_assert_uint_eq(in.len, PM__REC_MAX_PLAIN - 1);
    ck_assert_int_eq(pm__rec_seal_frames_plain(r[0], full, PM__REC_MAX_PLAIN + 1, wire, sizeof(wire), &len),
                     -EINVAL);
    /* None of these moved the sender: the next record still opens. */
    ck_assert_int_eq(pm_test_rec_seal_frames(r[0], small, 1, &taken, wire, sizeof(wire), &len), 0);
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), 1);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);
}
END_TEST

START_TEST(test_seal_plain)
{
    /* A plaintext laid out by the caller (the link's stage) is sealed as
     * is: a small frame and a largest one, across two segments. */
    pm__rec *r[2];
    pair(r);
    static unsigned char plain[1 + 2 * 4 + 3 + PM__REC_MAX_FRAME];
    size_t n = 0, len;
    plain[n++] = PM__REC_FRAMES;
    pm__put32(plain + n, 3);
    memcpy(plain + n + 4, "abc", 3);
    n += 4 + 3;
    pm__put32(plain + n, PM__REC_MAX_FRAME);
    memset(plain + n + 4, 0x5a, PM__REC_MAX_FRAME);
    n += 4 + PM__REC_MAX_FRAME;
    ck_assert_uint_gt(n, PM__REC_SEG_PLAIN);
    ck_assert_int_eq(pm__rec_seal_frames_plain(r[0], plain, n, wire, sizeof(wire), &len), 0);
    ck_assert_uint_eq(len, pm__rec_wire_size(n));
    pm__rec_in in;
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), 1);
    ck_assert_int_eq(in.type, PM__REC_FRAMES);
    size_t off = 0, flen;
    const unsigned char *frame;
    ck_assert_int_eq(pm__rec_next_frame(&in, &off, &frame, &flen), 1);
    ck_assert_uint_eq(flen, 3);
    ck_assert_mem_eq(frame, "abc", 3);
    ck_assert_int_eq(pm__rec_next_frame(&in, &off, &frame, &flen), 1);
    ck_assert_uint_eq(flen, PM__REC_MAX_FRAME);
    ck_assert_int_eq(frame[0], 0x5a);
    ck_assert_int_eq(frame[PM__REC_MAX_FRAME - 1], 0x5a);
    ck_assert_int_eq(pm__rec_next_frame(&in, &off, &frame, &flen), 0);

    /* What a receiver would refuse is never sealed: another type, a frame
     * length of 0 or past the body, a body that is not whole frames, an
     * empty plaintext; a short cap is -ENOBUFS. */
    unsigned char bad[16] = {PM__REC_HEARTBEAT};
    ck_assert_int_eq(pm__rec_seal_frames_plain(r[0], bad, 1, wire, sizeof(wire), &len), -EINVAL);
    bad[0] = PM__REC_FRAMES;
    ck_assert_int_eq(pm__rec_seal_frames_plain(r[0], bad, 1, wire, sizeof(wire), &len), -EINVAL);
    pm__put32(bad + 1, 0);
    ck_assert_int_eq(pm__rec_seal_frames_plain(r[0], bad, 5, wire, sizeof(wire), &len), -EINVAL);
    pm__put32(bad + 1, 9);
    ck_assert_int_eq(pm__rec_seal_frames_plain(r[0], bad, 13, wire, sizeof(wire), &len), -EINVAL);
    pm__put32(bad + 1, 8);
    ck_assert_int_eq(pm__rec_seal_frames_plain(r[0], bad, 14, wire, sizeof(wire), &len), -EINVAL);
    ck_assert_int_eq(pm__rec_seal_frames_plain(r[0], bad, 0, wire, sizeof(wire), &len), -EINVAL);
    ck_assert_int_eq(pm__rec_seal_frames_plain(r[0], NULL, 13, wire, sizeof(wire), &len), -EINVAL);
    ck_assert_int_eq(pm__rec_seal_frames_plain(r[0], bad, 13, wire, 20, &len), -ENOBUFS);
    /* An empty plaintext is refused before its first byte is read: one
     * that ends where a page nobody may read begins. */
    long pg = sysconf(_SC_PAGESIZE);
    unsigned char *two = mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(two != MAP_FAILED);
    ck_assert_int_eq(mprotect(two + pg, (size_t)pg, PROT_NONE), 0);
    ck_assert_int_eq(pm__rec_seal_frames_plain(r[0], two + pg, 0, wire, sizeof(wire), &len), -EINVAL);
    munmap(two, (size_t)pg * 2);
    /* A frame one byte longer than PM__REC_MAX_FRAME, whole and within
     * the plaintext's bound: refused as a receiver refuses it. */
    static unsigned char big[1 + 4 + PM__REC_MAX_FRAME + 1];
    big[0] = PM__REC_FRAMES;
    pm__put32(big + 1, PM__REC_MAX_FRAME + 1);
    ck_assert_uint_le(sizeof(big), PM__REC_MAX_PLAIN);
    ck_assert_int_eq(pm__rec_seal_frames_plain(r[0], big, sizeof(big), wire, sizeof(wire), &len), -EINVAL);
    /* None of these moved the sender: the next record still opens. */
    ck_assert_int_eq(pm__rec_seal_frames_plain(r[0], bad, 13, wire, sizeof(wire), &len), 0);
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), 1);
    ck_assert_int_eq(in.len, 12);
    /* Each of next_frame's outputs is required: no frame is read without
     * a place for its length. */
    off = 0;
    ck_assert_int_eq(pm__rec_next_frame(&in, &off, &frame, NULL), -EINVAL);
    ck_assert_uint_eq(off, 0);
    size_t flen2 = 0;
    ck_assert_int_eq(pm__rec_next_frame(NULL, &off, &frame, &flen2), -EINVAL);
    ck_assert_int_eq(pm__rec_next_frame(&in, NULL, &frame, &flen2), -EINVAL);
    ck_assert_int_eq(pm__rec_next_frame(&in, &off, NULL, &flen2), -EINVAL);
    ck_assert_uint_eq(off, 0);
    /* Only a FRAMES record has frames: a heartbeat's body is not read. */
    pm__rec_in hb = in;
    hb.type = PM__REC_HEARTBEAT;
    ck_assert_int_eq(pm__rec_next_frame(&hb, &off, &frame, &flen2), -EINVAL);
    ck_assert_uint_eq(off, 0);
    ck_assert_int_eq(pm__rec_next_frame(&in, &off, &frame, &flen2), 1); /* the record itself */
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);
}
END_TEST

START_TEST(test_segment_edges)
{
    /* Plaintexts at the segment boundaries round-trip, and the wire length
     * is exactly plaintext + 16 per segment. */
    static const size_t plains[] = {1 + 4 + 1, PM__REC_SEG_PLAIN, PM__REC_SEG_PLAIN + 1, 2 * PM__REC_SEG_PLAIN,
                                    2 * PM__REC_SEG_PLAIN + 1};
    pm__rec *r[2];
    pair(r);
    static unsigned char frame[PM__REC_MAX_FRAME];
    memset(frame, 0xab, sizeof(frame));
    for (size_t i = 0; i < ARRAY_LEN(plains); i++) {
        /* One frame makes the plaintext 1 + 4 + n; two if n would be over the max frame. */
        size_t want = plains[i], body = want - 1;
        struct iovec iov[2];
        size_t n = 0;
        while (body > 0) {
            size_t f = body - 4 > PM__REC_MAX_FRAME ? PM__REC_MAX_FRAME : body - 4;
            if (body - 4 - f > 0 && body - 4 - f < 5)
                f -= 5; /* leave room for a frame of at least 1 byte */
            iov[n].iov_base = frame;
            iov[n++].iov_len = f;
            body -= 4 + f;
        }
        size_t taken, len;
        ck_assert_int_eq(pm_test_rec_seal_frames(r[0], iov, n, &taken, wire, sizeof(wire), &len), 0);
        ck_assert_uint_eq(taken, n);
        size_t nseg = (want + PM__REC_SEG_PLAIN - 1) / PM__REC_SEG_PLAIN;
        ck_assert_uint_eq(len, 4 + want + 16 * nseg);
        pm__rec_in in;
        ck_assert_int_eq(feed_all(r[1], wire, len, &in), 1);
        ck_assert_uint_eq(in.len, want - 1);
    }
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);
}
END_TEST

/* ------------------------------------------------------------ hostile */

START_TEST(test_reorder_replay_reflect)
{
    pm__rec *r[2];
    pm__rec_in in;
    size_t a_len, b_len;
    static unsigned char a[64], b[64];

    /* Reordered: the second record first. */
    pair(r);
    ck_assert_int_eq(pm__rec_seal_heartbeat(r[0], a, sizeof(a), &a_len), 0);
    ck_assert_int_eq(pm__rec_seal_heartbeat(r[0], b, sizeof(b), &b_len), 0);
    ck_assert_int_eq(feed_all(r[1], b, b_len, &in), -EBADMSG);
    ck_assert_int_eq(feed_all(r[1], a, a_len, &in), -EBADMSG); /* dead for good */
    ck_assert_int_eq(pm__rec_eof(r[1]), -EBADMSG);
    ck_assert_int_eq(pm_test_rec_up(r[1]), 0);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);

    /* Duplicated (replayed). */
    pair(r);
    ck_assert_int_eq(pm__rec_seal_heartbeat(r[0], a, sizeof(a), &a_len), 0);
    ck_assert_int_eq(feed_all(r[1], a, a_len, &in), 1);
    ck_assert_int_eq(feed_all(r[1], a, a_len, &in), -EBADMSG);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);

    /* Reflected: our own record sent back to us. */
    pair(r);
    ck_assert_int_eq(pm__rec_seal_heartbeat(r[0], a, sizeof(a), &a_len), 0);
    ck_assert_int_eq(feed_all(r[0], a, a_len, &in), -EBADMSG);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);

    /* From another session. */
    pm__rec *other[2];
    pair(r);
    pair(other);
    ck_assert_int_eq(pm__rec_seal_heartbeat(other[0], a, sizeof(a), &a_len), 0);
    ck_assert_int_eq(feed_all(r[1], a, a_len, &in), -EBADMSG);
    for (int i = 0; i < 2; i++) {
        pm__rec_free(r[i]);
        pm__rec_free(other[i]);
    }
}
END_TEST

START_TEST(test_bit_flips)
{
    /* Every single-bit flip of a record: never delivered. Flips in the
     * ciphertext fail authentication; flips in the length are refused at
     * once (too long, no valid segmentation), fail authentication (the
     * length is the associated data), or leave the decoder waiting for
     * bytes that never come: truncation at the end of the stream. */
    const char f[] = "frame";
    struct iovec iov = {(void *)f, 5};
    size_t len, taken;
    int seen[4] = {0};
    for (size_t bit = 0;; bit++) {
        pm__rec *r[2];
        pair(r);
        ck_assert_int_eq(pm_test_rec_seal_frames(r[0], &iov, 1, &taken, wire, sizeof(wire), &len), 0);
        if (bit >= len * 8) {
            pm__rec_free(r[0]);
            pm__rec_free(r[1]);
            break;
        }
        wire[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        pm__rec_in in;
        int rc = feed_all(r[1], wire, len, &in);
        ck_assert_msg(rc != 1, "bit %zu flipped: record delivered", bit);
        if (rc == 0) {
            ck_assert_int_eq(pm__rec_eof(r[1]), -ECONNRESET);
            seen[0]++;
        } else {
            ck_assert_msg(rc == -EBADMSG || rc == -EPROTO || rc == -EMSGSIZE, "bit %zu: %d", bit, rc);
            seen[rc == -EBADMSG ? 1 : rc == -EPROTO ? 2 : 3]++;
            ck_assert_int_eq(pm__rec_eof(r[1]), rc);
        }
        pm__rec_free(r[0]);
        pm__rec_free(r[1]);
    }
    ck_assert_int_gt(seen[0], 0);
    ck_assert_int_gt(seen[1], 0);
    ck_assert_int_gt(seen[3], 0);
}
END_TEST

START_TEST(test_length_limits)
{
    /* A length over the maximum is refused as soon as its 4 bytes are in:
     * no byte after them is consumed (nothing waits for, or is allocated
     * from, 4 GiB). Lengths with no valid segmentation likewise. */
    static const struct {
        uint32_t len;
        int rc;
    } cases[] = {
        {0xFFFFFFFFu, -EMSGSIZE},
        {PM__REC_MAX_CT + 1, -EMSGSIZE},
        {0, -EPROTO},
        {16, -EPROTO},                       /* a tag and no type byte */
        {PM__REC_SEG_CT + 16, -EPROTO},      /* a last segment too short */
        {2 * PM__REC_SEG_CT + 1, -EPROTO},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        pm__rec *r[2];
        pair(r);
        unsigned char buf[64] = {0};
        pm__put32(buf, cases[i].len);
        pm__rec_in in;
        size_t used;
        ck_assert_int_eq(pm__rec_feed(r[1], buf, sizeof(buf), &used, &in), cases[i].rc);
        ck_assert_uint_eq(used, 4);
        ck_assert_int_eq(pm__rec_feed(r[1], buf, sizeof(buf), &used, &in), cases[i].rc);
        ck_assert_uint_eq(used, 0);
        pm__rec_free(r[0]);
        pm__rec_free(r[1]);
    }
    /* The largest valid length is accepted (the decoder waits for it). */
    pm__rec *r[2];
    pair(r);
    unsigned char hdr[4];
    pm__put32(hdr, PM__REC_MAX_CT);
    pm__rec_in in;
    size_t used;
    ck_assert_int_eq(pm__rec_feed(r[1], hdr, 4, &used, &in), 0);
    ck_assert_int_eq(pm__rec_eof(r[1]), -ECONNRESET);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);
}
END_TEST

/* A record made by hand: plaintext p[0..len) encrypted by a raw transport
 * exactly as the layer does (one segment), fed to a record state. */
static int feed_crafted(const unsigned char *p, size_t len)
{
    pm__noise_transport *t[2];
    handshake(t);
    pm__rec *rx;
    ck_assert_int_eq(pm__rec_new(&rx, t[1]), 0);
    unsigned char *out = wire;
    pm__put32(out, (uint32_t)(len + 16));
    size_t ct;
    ck_assert_int_eq(pm__noise_encrypt(t[0], out, 4, p, len, out + 4, sizeof(wire) - 4, &ct), 0);
    pm__rec_in in;
    int rc = feed_all(rx, out, 4 + ct, &in);
    pm__rec_free(rx);
    pm__noise_transport_free(t[0]);
    return rc;
}

START_TEST(test_malformed_plaintext)
{
    /* Authentic records whose content breaks the format: the peer holds the
     * keys but misbehaves. Each is a protocol error that ends the link. */
    unsigned char p[64];
    memset(p, 0, sizeof(p));
    p[0] = 0;
    ck_assert_int_eq(feed_crafted(p, 1), -EPROTO); /* type 0 */
    p[0] = 5;
    ck_assert_int_eq(feed_crafted(p, 1), -EPROTO); /* unknown type */
    p[0] = PM__REC_HEARTBEAT;
    ck_assert_int_eq(feed_crafted(p, 2), -EPROTO); /* a body */
    /* An echo's kind with a body one byte short, one long, or alone: only
     * the exact 1 + PM__REC_ECHO_BODY bytes are an echo. */
    for (unsigned kind = PM__REC_ECHO_PING; kind <= PM__REC_ECHO_PONG; kind++) {
        p[1] = (unsigned char)kind;
        ck_assert_int_eq(feed_crafted(p, 2), -EPROTO);
        ck_assert_int_eq(feed_crafted(p, 1 + PM__REC_ECHO_BODY - 1), -EPROTO);
        ck_assert_int_eq(feed_crafted(p, 1 + PM__REC_ECHO_BODY + 1), -EPROTO);
        ck_assert_int_eq(feed_crafted(p, 1 + PM__REC_ECHO_BODY), 1);
    }
    p[1] = 0;
    p[0] = PM__REC_REKEY;
    ck_assert_int_eq(feed_crafted(p, 2), -EPROTO);
    p[0] = PM__REC_CLOSE;
    ck_assert_int_eq(feed_crafted(p, 2), -EPROTO); /* reason cut short */
    ck_assert_int_eq(feed_crafted(p, 4), -EPROTO);
    ck_assert_int_eq(feed_crafted(p, 3), 1);
    p[0] = PM__REC_FRAMES;
    ck_assert_int_eq(feed_crafted(p, 1), -EPROTO); /* no frame */
    ck_assert_int_eq(feed_crafted(p, 5), -EPROTO); /* a frame of length 0 */
    pm__put32(p + 1, 3);
    ck_assert_int_eq(feed_crafted(p, 1 + 4 + 3), 1);
    ck_assert_int_eq(feed_crafted(p, 1 + 4 + 2), -EPROTO); /* past the body */
    ck_assert_int_eq(feed_crafted(p, 1 + 4 + 3 + 2), -EPROTO); /* a stray tail */
    pm__put32(p + 1, PM__REC_MAX_FRAME + 1);
    ck_assert_int_eq(feed_crafted(p, 1 + 4 + 3), -EPROTO);
    pm__put32(p + 1, 3);
    /* A tail of 1 to 3 bytes, too short for a frame's length. */
    for (size_t tail = 1; tail < 4; tail++)
        ck_assert_int_eq(feed_crafted(p, 1 + 4 + 3 + tail), -EPROTO);
    pm__put32(p + 1, 0xFFFFFFFFu);
    ck_assert_int_eq(feed_crafted(p, 1 + 4 + 3), -EPROTO);
}
END_TEST

/* ------------------------------------------------------------ close, eof */

START_TEST(test_close_and_eof)
{
    pm__rec *r[2];
    pm__rec_in in;
    size_t len;
    uint16_t reason;

    /* CLOSE, then EOF: a clean end. */
    pair(r);
    ck_assert_int_eq(seal_hb(r[0], &len), 0);
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), 1);
    ck_assert_int_eq(pm__rec_seal_close(r[0], PM__REC_CLOSE_SHUTDOWN, wire, sizeof(wire), &len), 0);
    ck_assert_int_eq(seal_hb(r[0], &len), -EPIPE); /* nothing after our close */
    ck_assert_int_eq(pm__rec_seal_close(r[0], 0, wire, sizeof(wire), &len), -EPIPE);
    ck_assert_int_eq(pm__rec_seal_close(r[1], PM__REC_CLOSE_TIMEOUT, wire, sizeof(wire), &len), 0);
    ck_assert_int_eq(feed_all(r[0], wire, len, &in), 1);
    ck_assert_int_eq(in.type, PM__REC_CLOSE);
    ck_assert_uint_eq(in.close_reason, PM__REC_CLOSE_TIMEOUT);
    ck_assert_int_eq(pm_test_rec_closed(r[0], &reason), 1);
    ck_assert_uint_eq(reason, PM__REC_CLOSE_TIMEOUT);
    ck_assert_int_eq(pm__rec_eof(r[0]), 0);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);

    /* EOF without CLOSE: truncation, at a record boundary or inside one. */
    pair(r);
    ck_assert_int_eq(seal_hb(r[0], &len), 0);
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), 1);
    ck_assert_int_eq(pm__rec_eof(r[1]), -ECONNRESET);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);
    pair(r);
    ck_assert_int_eq(pm__rec_seal_close(r[0], 0, wire, sizeof(wire), &len), 0);
    ck_assert_int_eq(feed_all(r[1], wire, len - 1, &in), 0); /* the close cut short */
    ck_assert_int_eq(pm__rec_eof(r[1]), -ECONNRESET);
    ck_assert_int_eq(pm_test_rec_closed(r[1], NULL), 0);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);

    /* Bytes after CLOSE, in the same buffer or later: never read (one rule
     * whatever TCP's timing), and the stream still ended in order. */
    pair(r);
    ck_assert_int_eq(pm__rec_seal_close(r[0], 0, wire, sizeof(wire), &len), 0);
    memset(wire + len, 0xff, 8); /* a hostile length among them */
    size_t used;
    ck_assert_int_eq(pm__rec_feed(r[1], wire, len + 8, &used, &in), 1);
    ck_assert_uint_eq(used, len);
    ck_assert_int_eq(in.type, PM__REC_CLOSE);
    ck_assert_int_eq(pm__rec_feed(r[1], wire + len, 8, &used, &in), 0);
    ck_assert_uint_eq(used, 8);
    ck_assert_int_eq(pm__rec_eof(r[1]), 0);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);
    pair(r);
    ck_assert_int_eq(pm__rec_seal_close(r[0], 0, wire, sizeof(wire), &len), 0);
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), 1);
    ck_assert_int_eq(pm__rec_feed(r[1], "x", 1, &used, &in), 0);
    ck_assert_uint_eq(used, 1);
    ck_assert_int_eq(pm__rec_eof(r[1]), 0);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);

    /* A receiving error leaves the sending direction usable: the CLOSE 1
     * that reports it goes out. A segment that fails to authenticate
     * wipes the transport: nothing more can be sealed. */
    pair(r);
    static const unsigned char bad_type[] = {9};
    ck_assert_int_eq(pm_test_rec_seal_raw(r[0], bad_type, 1, wire, sizeof(wire), &len), 0);
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), -EPROTO);
    ck_assert_int_eq(pm__rec_seal_close(r[1], PM__REC_CLOSE_PROTOCOL, wire, sizeof(wire), &len), 0);
    ck_assert_int_eq(feed_all(r[0], wire, len, &in), 1);
    ck_assert_int_eq(in.close_reason, PM__REC_CLOSE_PROTOCOL);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);
    pair(r);
    ck_assert_int_eq(seal_hb(r[0], &len), 0);
    wire[len - 1] ^= 1;
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), -EBADMSG);
    ck_assert_int_eq(pm__rec_seal_close(r[1], PM__REC_CLOSE_PROTOCOL, wire, sizeof(wire), &len), -EBADMSG);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);
}
END_TEST

/* ------------------------------------------------------------ rekey, nonces */

START_TEST(test_rekey)
{
    /* Both directions rekey on REKEY records, in step, many times; traffic
     * keeps flowing. A receiver that misses one cannot read what follows,
     * so the key did change. */
    pm__rec *r[2];
    pair(r);
    pm__rec_in in;
    size_t len;
    for (int round = 0; round < 5; round++) {
        for (int dir = 0; dir < 2; dir++) {
            ck_assert_int_eq(pm__rec_seal_rekey(r[dir], wire, sizeof(wire), &len), 0);
            ck_assert_int_eq(feed_all(r[1 - dir], wire, len, &in), 1);
            ck_assert_int_eq(in.type, PM__REC_REKEY);
            ck_assert_int_eq(seal_hb(r[dir], &len), 0);
            ck_assert_int_eq(feed_all(r[1 - dir], wire, len, &in), 1);
            ck_assert_int_eq(in.type, PM__REC_HEARTBEAT);
        }
    }
    ck_assert_int_eq(pm__rec_seal_rekey(r[0], wire, sizeof(wire), &len), 0); /* lost on the way */
    ck_assert_int_eq(seal_hb(r[0], &len), 0);
    ck_assert_int_eq(pm_test_rec_set_nonce(r[1], 0, 11), 0); /* as if the rekey record's nonce was used */
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), -EBADMSG);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);
}
END_TEST

START_TEST(test_nonce_limit)
{
    pm__rec *r[2];
    pair(r);
    pm__rec_in in;
    size_t len, taken;
    uint64_t last = PM__NOISE_NONCE_LIMIT - 1;
    ck_assert_int_eq(pm_test_rec_set_nonce(r[0], 1, last - 1), 0);
    ck_assert_int_eq(pm_test_rec_set_nonce(r[1], 0, last - 1), 0);
    ck_assert_int_eq(seal_hb(r[0], &len), 0); /* nonce last - 1 */
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), 1);
    /* Only the last nonce is left: it is the CLOSE's. Data is refused
     * without killing the state. */
    ck_assert_int_eq(seal_hb(r[0], &len), -EOVERFLOW);
    static unsigned char big[PM__REC_MAX_FRAME];
    struct iovec iov = {big, sizeof(big)};
    ck_assert_int_eq(pm_test_rec_seal_frames(r[0], &iov, 1, &taken, wire, sizeof(wire), &len), -EOVERFLOW);
    ck_assert_int_eq(pm__rec_seal_rekey(r[0], wire, sizeof(wire), &len), -EOVERFLOW);
    ck_assert_int_eq(pm__rec_seal_close(r[0], PM__REC_CLOSE_NONCE, wire, sizeof(wire), &len), 0);
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), 1);
    ck_assert_uint_eq(in.close_reason, PM__REC_CLOSE_NONCE);
    ck_assert_int_eq(pm__rec_eof(r[1]), 0);

    /* A two-segment record needs two nonces and the close's. */
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);
    pair(r);
    ck_assert_int_eq(pm_test_rec_set_nonce(r[0], 1, last - 1), 0);
    ck_assert_int_eq(pm_test_rec_seal_frames(r[0], &iov, 1, &taken, wire, sizeof(wire), &len), -EOVERFLOW);
    ck_assert_int_eq(seal_hb(r[0], &len), 0);

    /* A receiver whose counter reached the limit refuses: the link closes
     * rather than reuse a nonce. */
    ck_assert_int_eq(pm_test_rec_set_nonce(r[1], 0, PM__NOISE_NONCE_LIMIT), 0);
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), -EOVERFLOW);
    ck_assert_int_eq(pm__rec_eof(r[1]), -EOVERFLOW);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);
}
END_TEST

/* A FRAMES record of two segments whose last frame leaves a tail of
 * three bytes: too short for a frame's length, refused. The plaintext's
 * last 16 bytes are also what lies just past it in the state's buffer
 * (the second segment moved down over the first's tag), so a decoder that
 * read a length there would find a small one (the tail's 1, 0, 0 and a
 * zero byte from inside the frame) and accept the record. */
START_TEST(test_frames_short_tail_two_segments)
{
    static unsigned char plain[PM__REC_SEG_PLAIN + 100];
    size_t a = 40000, b = sizeof(plain) - 1 - 2 * PM__REC_FRAME_HDR - a - 3;
    for (int with_tail = 1; with_tail >= 0; with_tail--) {
        pm__rec *r[2];
        pair(r);
        memset(plain, 0, sizeof(plain));
        plain[0] = PM__REC_FRAMES;
        pm__put32(plain + 1, (uint32_t)a);
        pm__put32(plain + 1 + PM__REC_FRAME_HDR + a, (uint32_t)(with_tail ? b : b + 3));
        if (with_tail)
            plain[sizeof(plain) - 3] = 1;
        size_t len;
        ck_assert_int_eq(pm_test_rec_seal_raw(r[0], plain, sizeof(plain), wire, sizeof(wire), &len), 0);
        pm__rec_in in;
        /* Without the tail the same record is accepted. */
        ck_assert_int_eq(feed_all(r[1], wire, len, &in), with_tail ? -EPROTO : 1);
        pm__rec_free(r[0]);
        pm__rec_free(r[1]);
    }
}
END_TEST

/* The receiving nonces running out ends the receiving direction only: the
 * state's own count refuses the record before the transport would (which
 * would wipe both keys), so the CLOSE that says why still goes out. At
 * the limit, and one record before it. */
START_TEST(test_rx_limit_keeps_tx)
{
    for (int before = 0; before < 2; before++) {
        pm__rec *r[2];
        pair(r);
        pm__rec_in in;
        size_t len;
        if (before) {
            /* The receiver's count reaches the limit by a record: one
             * sealed with the last nonce (as a CLOSE may be). */
            const unsigned char hb = PM__REC_HEARTBEAT;
            ck_assert_int_eq(pm_test_rec_set_nonce(r[0], 1, PM__NOISE_NONCE_LIMIT - 1), 0);
            ck_assert_int_eq(pm_test_rec_set_nonce(r[1], 0, PM__NOISE_NONCE_LIMIT - 1), 0);
            ck_assert_int_eq(pm__rec_seal(r[0], &hb, 1, true, wire, sizeof(wire), &len), 0);
            ck_assert_int_eq(feed_all(r[1], wire, len, &in), 1);
        } else {
            ck_assert_int_eq(pm_test_rec_set_nonce(r[1], 0, PM__NOISE_NONCE_LIMIT), 0);
        }
        /* Any record now: refused before it is decrypted. */
        ck_assert_int_eq(pm_test_rec_set_nonce(r[0], 1, 0), 0);
        ck_assert_int_eq(seal_hb(r[0], &len), 0);
        ck_assert_int_eq(feed_all(r[1], wire, len, &in), -EOVERFLOW);
        ck_assert_int_eq(pm__rec_seal_close(r[1], PM__REC_CLOSE_NONCE, wire, sizeof(wire), &len), 0);
        pm__rec_free(r[0]);
        pm__rec_free(r[1]);
    }
}
END_TEST

/* A state that cannot have its memory is -ENOMEM, *out NULL, the
 * transport freed: the address space capped below the state's one mapping
 * (RLIMIT_AS; not in sanitizer builds, whose shadow memory the cap would
 * take). */
START_TEST(test_new_no_memory)
{
    if (pm_test_sanitized())
        return;
    pm__noise_transport *t[2];
    handshake(t);
    struct rlimit before;
    pm_test_cap_address_space(PM__REC_MAX_CT / 2, &before);
    pm__rec sentinel, *got = &sentinel;
    int rc = pm__rec_new(&got, t[0]);
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &before), 0);
    ck_assert_int_eq(rc, -ENOMEM);
    ck_assert_ptr_null(got);
    /* Uncapped: the same call works. */
    ck_assert_int_eq(pm__rec_new(&got, t[1]), 0);
    pm__rec_free(got);
}
END_TEST

/* A CLOSE that cannot be sealed for want of nonces ends the sending
 * direction for good (record_state.h: sticky): nothing is sealed after
 * it, even once the counter would allow it again (moved back by the test:
 * no product path does). */
START_TEST(test_close_refused_sticky)
{
    pm__rec *r[2];
    pair(r);
    size_t len;
    ck_assert_int_eq(pm_test_rec_set_nonce(r[0], 1, PM__NOISE_NONCE_LIMIT), 0);
    ck_assert_int_eq(pm__rec_seal_close(r[0], PM__REC_CLOSE_NONCE, wire, sizeof(wire), &len),
                     -EOVERFLOW);
    ck_assert_int_eq(pm_test_rec_set_nonce(r[0], 1, 0), 0);
    ck_assert_int_eq(seal_hb(r[0], &len), -EOVERFLOW);
    ck_assert_int_eq(pm__rec_seal_close(r[0], PM__REC_CLOSE_NONCE, wire, sizeof(wire), &len),
                     -EOVERFLOW);
    /* A refused data record leaves it alive: only the CLOSE's is fatal. */
    ck_assert_int_eq(pm_test_rec_set_nonce(r[1], 1, PM__NOISE_NONCE_LIMIT - 1), 0);
    ck_assert_int_eq(seal_hb(r[1], &len), -EOVERFLOW);
    ck_assert_int_eq(pm_test_rec_set_nonce(r[1], 1, 0), 0);
    ck_assert_int_eq(seal_hb(r[1], &len), 0);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);
}
END_TEST

/* The bytes this process has mapped (/proc/self/maps: adjacent anonymous
 * mappings merge, so their count would not tell). */
static unsigned long long mapped_bytes(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    unsigned long long total = 0, a, b;
    char line[512];
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "%llx-%llx", &a, &b) == 2)
            total += b - a;
    fclose(f);
    return total;
}

/* A state's traffic buffers are mappings of their own (a fork child
 * finds them zeroed: doc/reliability.md, fault 33), given back at free:
 * states made and freed leave no mapping behind. */
START_TEST(test_free_unmaps)
{
    pm__rec *r[2];
    pair(r); /* the first: whatever libsodium or the allocator maps once */
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);
    unsigned long long before = mapped_bytes();
    for (int i = 0; i < 8; i++) {
        pair(r);
        pm__rec_free(r[0]);
        pm__rec_free(r[1]);
    }
    ck_assert_uint_eq(mapped_bytes(), before);
}
END_TEST

START_TEST(test_caller_errors)
{
    pm__rec *r[2];
    pair(r);
    size_t len, taken, used;
    pm__rec_in in;
    ck_assert_int_eq(pm__rec_new(NULL, NULL), -EINVAL);
    ck_assert_int_eq(pm__rec_eof(NULL), -EINVAL);
    /* Each argument wrong with the other valid (the transport is owned
     * from the call on: freed on refusal too, which the sanitizer build's
     * leak check sees). */
    pm__noise_transport *t[2];
    handshake(t);
    pm__rec *sentinel = (pm__rec *)&len, *got = sentinel;
    ck_assert_int_eq(pm__rec_new(NULL, t[0]), -EINVAL);
    ck_assert_int_eq(pm__rec_new(&got, NULL), -EINVAL);
    ck_assert_ptr_eq(got, sentinel); /* refused before anything was written */
    pm__noise_transport_free(t[1]);
    ck_assert_int_eq(pm__rec_seal_heartbeat(r[0], wire, 20, &len), -ENOBUFS);
    ck_assert_int_eq(pm_test_rec_seal_frames(r[0], NULL, 1, &taken, wire, sizeof(wire), &len), -EINVAL);
    ck_assert_int_eq(pm__rec_feed(r[1], NULL, 1, &used, &in), -EINVAL);
    ck_assert_int_eq(pm__rec_feed(NULL, wire, 1, &used, &in), -EINVAL);
    ck_assert_int_eq(pm__rec_feed(r[1], wire, 1, NULL, &in), -EINVAL);
    ck_assert_int_eq(pm__rec_feed(r[1], wire, 1, &used, NULL), -EINVAL);
    ck_assert_int_eq(pm__rec_feed(r[1], NULL, 0, &used, &in), 0);
    /* Every seal refuses a missing state, output or length, each alone
     * (the others valid), and leaves the state usable. */
    static const unsigned char one_frame[] = {PM__REC_FRAMES, 1, 0, 0, 0, 'x'};
    for (int fn = 0; fn < 5; fn++) {
        for (int bad = 0; bad < 3; bad++) {
            pm__rec *rr = bad == 0 ? NULL : r[0];
            void *o = bad == 1 ? NULL : wire;
            size_t *ol = bad == 2 ? NULL : &len;
            int rc = fn == 0   ? pm__rec_seal_heartbeat(rr, o, sizeof(wire), ol)
                     : fn == 1 ? pm__rec_seal_echo(rr, PM__REC_ECHO_PING, 1, o, sizeof(wire), ol)
                     : fn == 2 ? pm__rec_seal_rekey(rr, o, sizeof(wire), ol)
                     : fn == 3 ? pm__rec_seal_close(rr, 0, o, sizeof(wire), ol)
                               : pm__rec_seal_frames_plain(rr, one_frame, sizeof(one_frame), o,
                                                           sizeof(wire), ol);
            ck_assert_msg(rc == -EINVAL, "seal %d with argument %d missing: %d", fn, bad, rc);
        }
    }
    /* The common step itself refuses a length no record has (its callers
     * check first: record_state.h), before anything is written. */
    len = 7;
    ck_assert_int_eq(pm__rec_seal(r[0], r[0]->tx, 0, false, wire, sizeof(wire), &len), -EINVAL);
    ck_assert_int_eq(pm__rec_seal(r[0], r[0]->tx, PM__REC_MAX_PLAIN + 1, false, wire, sizeof(wire), &len),
                     -EINVAL);
    ck_assert_uint_eq(len, 7);
    ck_assert_uint_eq(pm__rec_wire_size(0), 0);
    ck_assert_uint_eq(pm__rec_wire_size(PM__REC_MAX_PLAIN + 1), 0);
    ck_assert_uint_eq(pm__rec_wire_size(PM__REC_MAX_PLAIN), PM__REC_WIRE_MAX);
    /* None of it harmed either side. */
    ck_assert_int_eq(seal_hb(r[0], &len), 0);
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), 1);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);
    pm__rec_free(NULL);
}
END_TEST

START_TEST(test_heartbeat_echo)
{
    /* A HEARTBEAT may carry an echo (kind, stamp): 1 + 9 bytes of
     * plaintext; the stamp comes out as it went in. An empty one has none. */
    pm__rec *r[2];
    pair(r);
    pm__rec_in in;
    size_t len;
    ck_assert_int_eq(pm__rec_seal_echo(r[0], PM__REC_ECHO_PING, 0x0102030405060708ull, wire,
                                       sizeof(wire), &len), 0);
    ck_assert_uint_eq(len, PM__REC_HDR + 1 + PM__REC_ECHO_BODY + 16);
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), 1);
    ck_assert_int_eq(in.type, PM__REC_HEARTBEAT);
    ck_assert_uint_eq(in.echo, PM__REC_ECHO_PING);
    ck_assert_uint_eq(in.echo_stamp, 0x0102030405060708ull);
    ck_assert_int_eq(pm__rec_seal_echo(r[1], PM__REC_ECHO_PONG, 42, wire, sizeof(wire), &len), 0);
    ck_assert_int_eq(feed_all(r[0], wire, len, &in), 1);
    ck_assert_uint_eq(in.echo, PM__REC_ECHO_PONG);
    ck_assert_uint_eq(in.echo_stamp, 42);
    ck_assert_int_eq(seal_hb(r[0], &len), 0);
    ck_assert_int_eq(feed_all(r[1], wire, len, &in), 1);
    ck_assert_uint_eq(in.echo, 0);
    ck_assert_int_eq(pm__rec_seal_echo(r[0], 3, 1, wire, sizeof(wire), &len), -EINVAL);
    pm__rec_free(r[0]);
    pm__rec_free(r[1]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("record");
    PM_ADD_TEST(s, test_round_trip, 0);
    PM_ADD_TEST(s, test_batching, 0);
    PM_ADD_TEST(s, test_seal_plain, 0);
    PM_ADD_TEST(s, test_segment_edges, 0);
    PM_ADD_TEST(s, test_reorder_replay_reflect, 0);
    PM_ADD_TEST(s, test_bit_flips, 120);
    PM_ADD_TEST(s, test_length_limits, 0);
    PM_ADD_TEST(s, test_malformed_plaintext, 0);
    PM_ADD_TEST(s, test_close_and_eof, 0);
    PM_ADD_TEST(s, test_rekey, 0);
    PM_ADD_TEST(s, test_nonce_limit, 0);
    PM_ADD_TEST(s, test_caller_errors, 0);
    PM_ADD_TEST(s, test_close_refused_sticky, 0);
    PM_ADD_TEST(s, test_free_unmaps, 0);
    PM_ADD_TEST(s, test_new_no_memory, 0);
    PM_ADD_TEST(s, test_frames_short_tail_two_segments, 0);
    PM_ADD_TEST(s, test_rx_limit_keeps_tx, 0);
    PM_ADD_TEST(s, test_heartbeat_echo, 0);
    return pm_test_main(s);
}
