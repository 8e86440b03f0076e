/* SPDX-License-Identifier: MIT */
/* check_address.c - pm_address text form, pm_strerror, pm_version_string. */
#include "helpers.h"

#include "procmesh.h"


static pm_address addr(const char *sys, const char *host, uint16_t port, uint64_t inc)
{
    pm_address a;
    memset(&a, 0, sizeof(a));
    snprintf(a.system, sizeof(a.system), "%s", sys);
    snprintf(a.host, sizeof(a.host), "%s", host);
    a.port = port;
    a.incarnation = inc;
    return a;
}

START_TEST(test_format)
{
    char buf[PM_ADDRESS_STRLEN];
    pm_address a = addr("procmesh", "worker", 7, 0);
    ck_assert_int_eq(pm_address_format(&a, buf, sizeof(buf)), 17);
    ck_assert_str_eq(buf, "procmesh@worker:7");
    a.incarnation = 42;
    ck_assert_int_eq(pm_address_format(&a, buf, sizeof(buf)), 20);
    ck_assert_str_eq(buf, "procmesh@worker:7#42");
    /* Exactly enough room, and one byte short. */
    ck_assert_int_eq(pm_address_format(&a, buf, 21), 20);
    ck_assert_int_eq(pm_address_format(&a, buf, 20), -ENOSPC);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(pm_address_format(&a, NULL, 0), -ENOSPC);
    /* The longest address fits PM_ADDRESS_STRLEN. */
    char longname[PM_NAME_MAX];
    memset(longname, 'x', PM_NAME_MAX - 1);
    longname[PM_NAME_MAX - 1] = '\0';
    a = addr(longname, longname, 65535, UINT64_MAX);
    int n = pm_address_format(&a, buf, sizeof(buf));
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(n, PM_ADDRESS_STRLEN - 1);
    /* Names that parsing would reject cannot be formatted. */
    a = addr("", "h", 1, 0);
    ck_assert_int_eq(pm_address_format(&a, buf, sizeof(buf)), -EINVAL);
    a = addr("a b", "h", 1, 0);
    ck_assert_int_eq(pm_address_format(&a, buf, sizeof(buf)), -EINVAL);
    memset(a.system, 'y', sizeof(a.system)); /* unterminated */
    ck_assert_int_eq(pm_address_format(&a, buf, sizeof(buf)), -EINVAL);
    ck_assert_int_eq(pm_address_format(NULL, buf, sizeof(buf)), -EINVAL);
}
END_TEST

START_TEST(test_parse_ok)
{
    pm_address a;
    ck_assert_int_eq(pm_address_parse("procmesh@main:0", &a), 0);
    ck_assert_str_eq(a.system, "procmesh");
    ck_assert_str_eq(a.host, "main");
    ck_assert_uint_eq(a.port, 0);
    ck_assert_uint_eq(a.incarnation, 0);
    ck_assert_int_eq(pm_address_parse("a.b-c_d@host-1.example:65535#18446744073709551615", &a), 0);
    ck_assert_uint_eq(a.port, 65535);
    ck_assert_uint_eq(a.incarnation, UINT64_MAX);
    /* Round trip. */
    static const char *const texts[] = {"s@h:1", "s@h:1#1", "A9@z.z:100#99", "x@y:65535"};
    for (size_t i = 0; i < ARRAY_LEN(texts); i++) {
        char buf[PM_ADDRESS_STRLEN];
        ck_assert_int_eq(pm_address_parse(texts[i], &a), 0);
        ck_assert_int_eq(pm_address_format(&a, buf, sizeof(buf)), (int)strlen(texts[i]));
        ck_assert_str_eq(buf, texts[i]);
    }
}
END_TEST

START_TEST(test_parse_bad)
{
    char n63[64], n64[65], text[200];
    memset(n63, 'n', 63);
    n63[63] = '\0';
    memset(n64, 'n', 64);
    n64[64] = '\0';
    static const char *const bad[] = {
        "", "@", "s@h", "s@h:", "@h:1", "s@:1", "s:1", "s@h:1#", "s@h:1#0", "s@h:01",
        "s@h:65536", "s@h:-1", "s@h:+1", "s@h: 1", "s@h:1 ", " s@h:1", "s@h:1x", "s@h:1#01",
        "s@h:1#18446744073709551616", "s@h:1#-1", "s@h:1#1#2", "s@h@i:1", "s p@h:1",
        "s@h/x:1", "s@h:1:2", "s@h:99999999999999999999", "\xff@h:1", "s@h:1\n",
    };
    pm_address a = {.port = 4242};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        ck_assert_msg(pm_address_parse(bad[i], &a) == -EINVAL, "accepted \"%s\"", bad[i]);
    ck_assert_uint_eq(a.port, 4242); /* untouched on failure */
    snprintf(text, sizeof(text), "%s@h:1", n63);
    ck_assert_int_eq(pm_address_parse(text, &a), 0);
    snprintf(text, sizeof(text), "%s@h:1", n64);
    ck_assert_int_eq(pm_address_parse(text, &a), -EINVAL);
    snprintf(text, sizeof(text), "s@%s:1", n64);
    ck_assert_int_eq(pm_address_parse(text, &a), -EINVAL);
    ck_assert_int_eq(pm_address_parse(NULL, &a), -EINVAL);
    ck_assert_int_eq(pm_address_parse("s@h:1", NULL), -EINVAL);
    /* A very long string is rejected without reading it all. */
    char *huge = malloc(1 << 20);
    memset(huge, 'a', (1 << 20) - 1);
    huge[(1 << 20) - 1] = '\0';
    ck_assert_int_eq(pm_address_parse(huge, &a), -EINVAL);
    free(huge);
}
END_TEST

START_TEST(test_match)
{
    pm_address a = addr("s", "h", 1, 0), b = addr("s", "h", 1, 5), c = addr("s", "h", 1, 6);
    ck_assert_int_eq(pm_address_match(&a, &b), 1);
    ck_assert_int_eq(pm_address_match(&b, &c), 0);
    ck_assert_int_eq(pm_address_match(&b, &b), 1);
    c = addr("s", "h", 2, 0);
    ck_assert_int_eq(pm_address_match(&a, &c), 0);
    c = addr("s", "g", 1, 0);
    ck_assert_int_eq(pm_address_match(&a, &c), 0);
    /* A differing system name alone: the same host, port and incarnation
     * in another mesh is another node, either way round and whether or not
     * an incarnation is given; a name that only starts like the other is
     * another name too. */
    c = addr("t", "h", 1, 5);
    ck_assert_int_eq(pm_address_match(&b, &c), 0);
    ck_assert_int_eq(pm_address_match(&c, &b), 0);
    ck_assert_int_eq(pm_address_match(&a, &c), 0);
    c = addr("s2", "h", 1, 0);
    ck_assert_int_eq(pm_address_match(&a, &c), 0);
    ck_assert_int_eq(pm_address_match(&c, &a), 0);
    ck_assert_int_eq(pm_address_match(&a, NULL), 0);
}
END_TEST

START_TEST(test_strerror_version)
{
    ck_assert_str_eq(pm_strerror(-EINVAL), "Invalid argument");
    ck_assert_str_eq(pm_strerror(EINVAL), "Invalid argument");
    ck_assert_str_eq(pm_strerror(0), "Success");
    ck_assert_ptr_nonnull(pm_strerror(-100000));
    ck_assert_ptr_nonnull(pm_strerror(-EBADMSG));
    char want[32];
    snprintf(want, sizeof(want), "%d.%d.%d", PM_VERSION_MAJOR, PM_VERSION_MINOR, PM_VERSION_PATCH);
    ck_assert_str_eq(pm_version_string(), want);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("address");
    TCase *tc = pm_tcase("address", 30);
    tcase_add_test(tc, test_format);
    tcase_add_test(tc, test_parse_ok);
    tcase_add_test(tc, test_parse_bad);
    tcase_add_test(tc, test_match);
    tcase_add_test(tc, test_strerror_version);
    suite_add_tcase(s, tc);
    return pm_test_main(s);
}
