/* SPDX-License-Identifier: MIT */
/* check_frame.c - the frame header codec. */
#include "helpers.h"

#include "channel/bigmsg.h"
#include "channel/frame.h"

static pm__frame_hdr sample(void)
{
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = PM__FT_REQUEST;
    h.len = 5;
    h.dst = 3;
    h.src = PM__NODE_MAIN;
    h.dst_inc = 0x0102030405060708ull;
    h.src_inc = 0xfffffffffffffffeull;
    h.request_id = 0x8000000000000001ull;
    h.deadline_ms = 123456789;
    h.error = -EHOSTDOWN;
    h.dst_host = 5;
    h.src_host = PM__MAX_HOSTS - 1;
    return h;
}

START_TEST(test_round_trip)
{
    unsigned char buf[PM__FRAME_HDR_SIZE + 5];
    pm__frame_hdr h = sample(), d;
    pm__frame_encode(&h, buf);
    memcpy(buf + PM__FRAME_HDR_SIZE, "hello", 5);
    ck_assert_int_eq(pm__frame_decode(buf, sizeof(buf), 65536, &d), 0);
    ck_assert_uint_eq(d.version, PM__FRAME_VERSION);
    ck_assert_uint_eq(d.type, h.type);
    ck_assert_uint_eq(d.len, 5);
    ck_assert_uint_eq(d.dst, h.dst);
    ck_assert_uint_eq(d.src, h.src);
    ck_assert_uint_eq(d.dst_inc, h.dst_inc);
    ck_assert_uint_eq(d.src_inc, h.src_inc);
    ck_assert_uint_eq(d.request_id, h.request_id);
    ck_assert_int_eq(d.deadline_ms, h.deadline_ms);
    ck_assert_int_eq(d.error, h.error);
    ck_assert_uint_eq(d.dst_host, h.dst_host);
    ck_assert_uint_eq(d.src_host, h.src_host);
    /* Fixed little-endian wire form. */
    ck_assert_uint_eq(buf[0], 2);
    ck_assert_uint_eq(buf[52], 5);
    ck_assert_uint_eq(buf[53], 0);
    ck_assert_uint_eq(buf[54], PM__MAX_HOSTS - 1);
    ck_assert_uint_eq(buf[1], PM__FT_REQUEST);
    ck_assert_uint_eq(buf[4], 5);
    ck_assert_uint_eq(buf[16], 0x08);
    ck_assert_uint_eq(buf[23], 0x01);
    ck_assert_int_le(PM__FRAME_HDR_SIZE, 64);
    for (unsigned t = PM__FT_HELLO; t <= PM__FT_MAX_; t++) {
        h.type = (uint8_t)t;
        h.len = 0;
        pm__frame_encode(&h, buf);
        ck_assert_int_eq(pm__frame_decode(buf, PM__FRAME_HDR_SIZE, 0, &d), 0);
    }
}
END_TEST

START_TEST(test_truncated)
{
    unsigned char buf[PM__FRAME_HDR_SIZE + 5];
    pm__frame_hdr h = sample(), d;
    pm__frame_encode(&h, buf);
    /* Every shorter buffer is rejected, and *out stays untouched. */
    for (size_t n = 0; n < sizeof(buf); n++) {
        memset(&d, 0x77, sizeof(d));
        ck_assert_int_eq(pm__frame_decode(buf, n, 65536, &d), -EBADMSG);
        ck_assert_uint_eq(d.type, 0x77);
    }
    /* So is a longer one: the length must match exactly. */
    unsigned char big[PM__FRAME_HDR_SIZE + 6];
    memcpy(big, buf, sizeof(buf));
    ck_assert_int_eq(pm__frame_decode(big, sizeof(big), 65536, &d), -EBADMSG);
    ck_assert_int_eq(pm__frame_decode(NULL, 100, 65536, &d), -EBADMSG);
    /* decode_header (what proto.c and the hub call on a private copy of a
     * record's header) also refuses a record shorter than a header before
     * it reads a byte of it: -EBADMSG, even when the version byte is wrong
     * too (which alone would be -EPROTO). */
    buf[0] = PM__FRAME_VERSION + 1;
    for (size_t n = 0; n < PM__FRAME_HDR_SIZE; n++) {
        memset(&d, 0x77, sizeof(d));
        ck_assert_int_eq(pm__frame_decode_header(buf, n, 65536, &d), -EBADMSG);
        ck_assert_uint_eq(d.type, 0x77);
    }
}
END_TEST

START_TEST(test_rejects)
{
    unsigned char buf[PM__FRAME_HDR_SIZE + 5];
    pm__frame_hdr h = sample(), d;
    pm__frame_encode(&h, buf);
    ck_assert_int_eq(pm__frame_decode(buf, sizeof(buf), 4, &d), -EBADMSG); /* over the maximum */

    unsigned char bad[sizeof(buf)];
    memcpy(bad, buf, sizeof(buf));
    bad[0] = 1; /* version 1 (no host fields) is not spoken any more */
    ck_assert_int_eq(pm__frame_decode(bad, sizeof(bad), 65536, &d), -EPROTO);
    bad[0] = 3;
    ck_assert_int_eq(pm__frame_decode(bad, sizeof(bad), 65536, &d), -EPROTO);
    bad[0] = 0;
    ck_assert_int_eq(pm__frame_decode(bad, sizeof(bad), 65536, &d), -EPROTO);

    static const struct { size_t off; unsigned char v; } cases[] = {
        {1, 0}, {1, PM__FT_MAX_ + 1}, {1, 0xff}, /* unknown type */
        {2, 1}, {3, 0x80},                    /* unknown flags */
        {52, PM__MAX_HOSTS}, {53, 1},         /* dst host out of range */
        {54, PM__MAX_HOSTS}, {55, 0x80},      /* src host out of range */
        {4, 6}, {7, 1},                       /* length disagrees with the buffer */
        {47, 0x80},                           /* negative deadline */
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        memcpy(bad, buf, sizeof(buf));
        bad[cases[i].off] = cases[i].v;
        ck_assert_msg(pm__frame_decode(bad, sizeof(bad), 65536, &d) == -EBADMSG, "case %zu", i);
    }
    h.error = 5; /* errors are 0 or negative */
    pm__frame_encode(&h, bad);
    ck_assert_int_eq(pm__frame_decode(bad, sizeof(bad), 65536, &d), -EBADMSG);
}
END_TEST

/* The announcement rule (frame.h): PM__FF_MEMFD only on MSG, REQUEST and
 * REPLY, with exactly a PM__ANNOUNCE_SIZE payload. One row per type and
 * length, everything else valid; and the bounds of the other checks taken
 * at their edges: a payload of exactly the maximum, error 0, deadline 0. */
START_TEST(test_announce_rules)
{
    unsigned char buf[PM__FRAME_HDR_SIZE + PM__ANNOUNCE_SIZE + 1];
    pm__frame_hdr h = sample(), d;
    for (unsigned t = PM__FT_HELLO; t <= PM__FT_MAX_; t++) {
        for (uint32_t len = PM__ANNOUNCE_SIZE - 1; len <= PM__ANNOUNCE_SIZE + 1; len++) {
            h.type = (uint8_t)t;
            h.flags = PM__FF_MEMFD;
            h.len = len;
            pm__frame_encode(&h, buf);
            int data = t == PM__FT_MSG || t == PM__FT_REQUEST || t == PM__FT_REPLY;
            int want = data && len == PM__ANNOUNCE_SIZE ? 0 : -EBADMSG;
            ck_assert_msg(pm__frame_decode(buf, PM__FRAME_HDR_SIZE + len, 65536, &d) == want,
                          "type %u, announcement of %u bytes: want %d", t, len, want);
            /* Without the flag any length goes. */
            h.flags = 0;
            pm__frame_encode(&h, buf);
            ck_assert_int_eq(pm__frame_decode(buf, PM__FRAME_HDR_SIZE + len, 65536, &d), 0);
        }
    }
    h = sample();
    h.error = 0;
    h.deadline_ms = 0;
    pm__frame_encode(&h, buf);
    ck_assert_int_eq(pm__frame_decode(buf, PM__FRAME_HDR_SIZE + 5, 5, &d), 0);
    ck_assert_int_eq(d.error, 0);
    ck_assert_int_eq(d.deadline_ms, 0);
    ck_assert_int_eq(pm__frame_decode(buf, PM__FRAME_HDR_SIZE + 5, 4, &d), -EBADMSG);
}
END_TEST

START_TEST(test_random_bytes)
{
    /* Whatever the bytes, decode returns 0, -EBADMSG or -EPROTO, and a
     * success always describes a payload inside the buffer. */
    uint64_t seed = 2024;
    unsigned char buf[PM__FRAME_HDR_SIZE + 64];
    for (int i = 0; i < 200000; i++) {
        size_t n = pm_test_rand(&seed) % sizeof(buf);
        for (size_t k = 0; k < n; k++)
            buf[k] = (unsigned char)pm_test_rand(&seed);
        if (n > 0 && pm_test_rand(&seed) % 2)
            buf[0] = PM__FRAME_VERSION;
        pm__frame_hdr d;
        int rc = pm__frame_decode(buf, n, 64, &d);
        ck_assert(rc == 0 || rc == -EBADMSG || rc == -EPROTO);
        if (rc == 0)
            ck_assert_uint_eq(PM__FRAME_HDR_SIZE + d.len, n);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("frame");
    TCase *tc = pm_tcase("codec", 30);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_truncated);
    tcase_add_test(tc, test_rejects);
    tcase_add_test(tc, test_announce_rules);
    tcase_add_test(tc, test_random_bytes);
    suite_add_tcase(s, tc);
    return pm_test_main(s);
}
