/* SPDX-License-Identifier: MIT */
/* check_peer.c - peer links: routing by host (the host table, remote addresses), and the link itself. */
#include "helpers.h"

#include <stdatomic.h>

#include "internal.h"

/* Routing with peer links: the host table turns names into the indices
 * frames carry, and back. */
START_TEST(test_route_hosts)
{
    static pm__hosts t; /* 8 KiB: not on the stack */
    memset(&t, 0, sizeof(t));
    strcpy(t.name[0], "a");
    strcpy(t.name[1], "b");
    strcpy(t.name[2], "c");
    atomic_store(&t.count, 3);
    pm__names local = {"sys", "a", 1, 4, NULL}, peer = {"sys", "a", 1, 4, &t};
    pm_address to;
    uint16_t host = 99;
    uint32_t node = 99;

    /* Without peer links: only this host, other hosts are not ours. */
    ck_assert_int_eq(pm_address_parse("sys@a:2", &to), 0);
    ck_assert_int_eq(pm__address_route(&local, &to, &host, &node), 0);
    ck_assert_uint_eq(host, PM__HOST_LOCAL);
    ck_assert_uint_eq(node, 1);
    ck_assert_int_eq(pm_address_parse("sys@b:2", &to), 0);
    ck_assert_int_eq(pm__address_route(&local, &to, &host, &node), -ENOENT);
    ck_assert_int_eq(pm_address_parse("sys@a:0", &to), 0);
    ck_assert_int_eq(pm__address_route(&local, &to, &host, &node), -ENOENT);

    /* Peer mode: port 0 of our host and "main" are the supervisor. */
    ck_assert_int_eq(pm__address_route(&peer, &to, &host, &node), 0);
    ck_assert_uint_eq(host, PM__HOST_LOCAL);
    ck_assert_uint_eq(node, PM__NODE_MAIN);
    ck_assert_int_eq(pm_address_parse("sys@main:0", &to), 0);
    ck_assert_int_eq(pm__address_route(&peer, &to, &host, &node), 0);
    ck_assert_uint_eq(node, PM__NODE_MAIN);
    ck_assert_int_eq(pm_address_parse("sys@a:5", &to), 0); /* past the last slot */
    ck_assert_int_eq(pm__address_route(&peer, &to, &host, &node), -ENOENT);
    /* A known remote host: its index, and the port as the node. */
    ck_assert_int_eq(pm_address_parse("sys@c:7#9", &to), 0);
    ck_assert_int_eq(pm__address_route(&peer, &to, &host, &node), 0);
    ck_assert_uint_eq(host, 2);
    ck_assert_uint_eq(node, 7);
    uint32_t local_node;
    ck_assert_int_eq(pm__address_node(&peer, &to, &local_node), -ENOENT); /* not one of ours */
    /* An unknown host, another system. */
    ck_assert_int_eq(pm_address_parse("sys@d:1", &to), 0);
    ck_assert_int_eq(pm__address_route(&peer, &to, &host, &node), -EHOSTUNREACH);
    ck_assert_int_eq(pm_address_parse("other@b:1", &to), 0);
    ck_assert_int_eq(pm__address_route(&peer, &to, &host, &node), -ENOENT);
    ck_assert_int_eq(pm__hosts_find(&t, "a"), -1); /* 0 is never matched: it is us */
    ck_assert_int_eq(pm__hosts_find(&t, "b"), 1);

    /* Back to text: a remote worker, a remote supervisor, ours. */
    char s[PM_ADDRESS_STRLEN];
    pm__node_address_at(&peer, 1, 3, 42, &to);
    ck_assert_int_gt(pm_address_format(&to, s, sizeof(s)), 0);
    ck_assert_str_eq(s, "sys@b:3#42");
    pm__node_address_at(&peer, 2, 0, 42, &to);
    ck_assert_int_gt(pm_address_format(&to, s, sizeof(s)), 0);
    ck_assert_str_eq(s, "sys@c:0");
    pm__node_address_at(&peer, PM__HOST_LOCAL, 1, 5, &to);
    ck_assert_int_gt(pm_address_format(&to, s, sizeof(s)), 0);
    ck_assert_str_eq(s, "sys@a:2#5");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("peer");
    TCase *tc = pm_tcase("routing", 30);
    tcase_add_test(tc, test_route_hosts);
    suite_add_tcase(s, tc);
    return pm_test_main(s);
}
