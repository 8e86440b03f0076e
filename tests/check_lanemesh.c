/* SPDX-License-Identifier: MIT */
/* check_lanemesh.c - direct lanes in a running cluster (doc/design.md,
 * "Direct lanes"): two fork-mode workers that talk get a lane; order
 * across the set-up and the falls back to the hub for large messages;
 * requests and replies on the lane; a peer's crash revokes it (its frames
 * written before still delivered, the request waiting on it -EHOSTDOWN);
 * lanes off where the option or the containment says so. Real processes
 * throughout; every outcome is decided by what the workers report. */
#include "helpers.h"
#include "internals.h"

#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <sys/mman.h>

#include "channel/proto.h"
#include "worker/node_lanes.h"

static char said[4][256];

static void on_message(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)c;
    (void)arg;
    (void)pm_test_keep_said(said, 4, m);
}

static int fenced[4];

static int exit_code0 = -100; /* slot 0's last exit code (PM_EVENT_EXITED) */

static void on_event(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)c;
    (void)arg;
    if (e->type == PM_EVENT_FENCED && e->slot < 4)
        fenced[e->slot]++;
    if (e->type == PM_EVENT_EXITED && e->slot == 0)
        exit_code0 = e->exit_code;
}

static uint32_t get_u32(const pm_message *m)
{
    uint32_t v = UINT32_MAX;
    if (m->len >= 4)
        memcpy(&v, m->data, 4);
    return v;
}

/* Slot 1: answers every request with its payload, checks that the plain
 * messages (numbered, small and large) come in order, and reports when
 * the message numbered UINT32_MAX - 1 ("done") arrives. On a request
 * saying "die" it sends five numbered messages to its asker and exits
 * without answering. */
static int server(pm_node *n)
{
    uint32_t next = 0;
    int bad = 0;
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc < 0)
            continue;
        if (m.kind == PM_MSG_REQUEST) {
            if (m.len == 3 && memcmp(m.data, "die", 3) == 0) {
                pm_address to = m.from;
                for (uint32_t i = 0; i < 5; i++)
                    pm_node_send(n, &to, &i, sizeof(i));
                _exit(3);
            }
            pm_node_reply(n, &m, m.data, m.len);
            continue;
        }
        uint32_t v = get_u32(&m);
        if (v == UINT32_MAX - 1) {
            pm_test_say(n, "server %s %u lanes=%d", bad ? "bad" : "ok", next,
                        pm__node_ls_live(n->ls));
            continue;
        }
        if (v != next)
            bad = 1;
        next = v + 1;
    }
}

/* Slot 1 may not be ready when slot 0 is: asks until it answers (-1
 * after 20 s). */
static int wait_peer(pm_node *n, const pm_address *to)
{
    for (int k = 0; k < 1000; k++) {
        pm_message r;
        uint32_t q = 0;
        if (pm_node_request(n, to, &q, sizeof(q), 1000, &r) == 0)
            return 0;
        usleep(20000);
    }
    return -1;
}

/* This worker's lane to slot peer, or NULL. */
static pm__node_lane *lane_to(pm_node *n, unsigned peer)
{
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.dst = peer;
    return pm__node_ls_to(n->ls, &h);
}

/* Earns a lane to slot peer (40 requests answered by it: 80 frames, past
 * PM_DIRECT_LANE_AFTER) and returns it, or NULL. */
static pm__node_lane *earn_lane(pm_node *n, unsigned peer)
{
    pm_address to = pm_test_slot_addr(peer, 0);
    pm_message r;
    (void)wait_peer(n, &to);
    for (uint32_t i = 0; i < 40; i++)
        (void)pm_node_request(n, &to, &i, sizeof(i), 10000, &r);
    return lane_to(n, peer);
}

static int boot_order(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    if (pm_node_slot(n) == 1)
        return server(n);
    /* Slot 0: requests and numbered messages to slot 1, a large message
     * now and then (it takes the hub, after the lane's frames). */
    pm_address to = pm_test_slot_addr(1, 0);
    static unsigned char big[40000];
    int bad = wait_peer(n, &to) != 0;
    uint32_t seq = 0;
    for (uint32_t i = 0; i < 3000; i++) {
        if (i % 10 == 0) {
            pm_message r;
            uint32_t q = i;
            int rc = pm_node_request(n, &to, &q, sizeof(q), 10000, &r);
            if (rc != 0 || get_u32(&r) != q) {
                if (!bad)
                    fprintf(stderr, "request %u: %d %u\n", q, rc, rc == 0 ? get_u32(&r) : 0);
                bad = 1;
            }
        }
        if (i % 500 == 250) {
            memcpy(big, &seq, sizeof(seq));
            int rc = pm_node_send(n, &to, big, sizeof(big));
            if (rc != 0) {
                fprintf(stderr, "big %u: %d\n", seq, rc);
                bad = 1;
            }
            seq++;
        }
        if (pm_node_send(n, &to, &seq, sizeof(seq)) != 0)
            bad = 1;
        seq++;
    }
    uint32_t done = UINT32_MAX - 1;
    pm_node_send(n, &to, &done, sizeof(done));
    pm_test_say(n, "client %s %u lanes=%d", bad ? "bad" : "ok", seq, pm__node_ls_live(n->ls));
    pm_message m;
    while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
        ;
    return 0;
}

/* A cluster of workers running boot (NULL: exec mode sets the program). */
static pm_options *lane_options(int (*boot)(pm_node *, void *), int workers)
{
    pm_options *o = pm_test_quick_options(workers, on_event, on_message);
    if (boot != NULL)
        pm_options_set_bootstrap(o, boot, NULL);
    memset(said, 0, sizeof(said));
    return o;
}

/* Lanes need cgroup containment: skipped (77) where the machine gives
 * none, never passed silently. */
static pm_cluster *spawn_with_lanes(pm_options *o)
{
    pm_cluster *c = pm_test_spawn(o);
    char why[256];
    if (pm_cluster_containment(c, why, sizeof(why)) != PM_CONTAIN_CGROUP) {
        pm_cluster_terminate(c);
        pm_options_free(o);
        pm_test_skip("direct lanes need cgroup containment, which this machine does not give");
    }
    return c;
}

/* The worker modes a lane must work in (design.md: fork mode, exec mode,
 * the warm standby, every seccomp level). */
enum { MODE_FORK, MODE_STRICT, MODE_STANDBY_BASIC, MODE_EXEC, MODE_COUNT };
static const char *const mode_name[] = {"fork", "fork, seccomp strict",
                                        "fork, warm standby, seccomp basic", "exec"};
static char self_exe[4096];

static void set_mode(pm_options *o, int mode)
{
    if (mode == MODE_STRICT)
        ck_assert_int_eq(pm_options_set_seccomp(o, PM_SECCOMP_STRICT), 0);
    if (mode == MODE_STANDBY_BASIC) {
        ck_assert_int_eq(pm_options_set_warm_standby(o, 1), 0);
        ck_assert_int_eq(pm_options_set_seccomp(o, PM_SECCOMP_BASIC), 0);
    }
    if (mode == MODE_EXEC) {
        /* This program again, as an exec'd mesh worker (main below). */
        char *argv[] = {"check_lanemesh", "--lane-worker", NULL};
        ck_assert_int_eq(pm_options_set_exec(o, self_exe, argv), 0);
    }
}

/* Two workers that talk get a lane, and every frame of the pair arrives
 * in order across its set-up and the large messages' way through the hub
 * and back; in each worker mode. */
START_TEST(test_lane_order)
{
    pm_options *o = lane_options(_i == MODE_EXEC ? NULL : boot_order, 2);
    set_mode(o, _i);
    fprintf(stderr, "mode: %s\n", mode_name[_i]);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, said[0][0] != 0 && said[1][0] != 0, 40000);
    ck_assert_str_eq(said[0], "#client ok 3006 lanes=1");
    ck_assert_str_eq(said[1], "#server ok 3006 lanes=1");
    ck_assert_uint_eq(c->hub->lanes_made, 1);
    pm_test_finish(c, o);
}
END_TEST

/* The same traffic with lanes off: the same outcome, every frame through
 * the hub, no lane made. */
START_TEST(test_lanes_off)
{
    pm_options *o = lane_options(boot_order, 2);
    ck_assert_int_eq(pm_options_set_direct_lanes(o, 0), 0);
    ck_assert_int_eq(pm_options_set_direct_lanes(o, 2), -EINVAL);
    pm_cluster *c = pm_test_spawn(o);
    PM_RUN_UNTIL(c, said[0][0] != 0 && said[1][0] != 0, 40000);
    ck_assert_str_eq(said[0], "#client ok 3006 lanes=0");
    ck_assert_str_eq(said[1], "#server ok 3006 lanes=0");
    ck_assert_uint_eq(c->hub->lanes_made, 0);
    pm_test_finish(c, o);
}
END_TEST

/* With process groups a setsid() descendant could outlive its worker and
 * keep writing on a revoked lane: no lanes there. */
START_TEST(test_lanes_off_process_group)
{
    pm_options *o = lane_options(boot_order, 2);
    ck_assert_int_eq(pm_options_set_containment(o, PM_CONTAIN_PROCESS_GROUP), 0);
    pm_cluster *c = pm_test_spawn(o);
    PM_RUN_UNTIL(c, said[0][0] != 0 && said[1][0] != 0, 40000);
    ck_assert_str_eq(said[0], "#client ok 3006 lanes=0");
    ck_assert_uint_eq(c->hub->lanes_made, 0);
    pm_test_finish(c, o);
}
END_TEST

/* Slot 0 earns a lane to slot 1, then asks it to die: slot 1 sends five
 * messages on the lane and exits without answering. The request fails
 * -EHOSTDOWN once the lane is revoked, the five messages written before
 * the revocation are still delivered in order, and the next request to
 * slot 1 reaches its new incarnation. */
static int boot_crash(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    if (pm_node_slot(n) == 1)
        return server(n);
    pm_address to = pm_test_slot_addr(1, 0);
    pm_message r;
    (void)wait_peer(n, &to);
    for (uint32_t i = 0; i < 100; i++)
        if (pm_node_request(n, &to, &i, sizeof(i), 10000, &r) != 0)
            break;
    int lanes = pm__node_ls_live(n->ls);
    int rc = pm_node_request(n, &to, "die", 3, 20000, &r);
    uint32_t got = 0;
    int order = 1;
    pm_message m;
    while (got < 5 && pm_node_recv(n, &m, 10000) == 0) {
        if (get_u32(&m) != got)
            order = 0;
        got++;
    }
    /* The replacement answers (through the hub: a new pair). */
    int again = -1;
    for (int k = 0; k < 200 && again != 0; k++) {
        uint32_t q = 7;
        again = pm_node_request(n, &to, &q, sizeof(q), 1000, &r);
        if (again != 0)
            usleep(20000);
    }
    pm_test_say(n, "lanes=%d die=%d got=%u order=%d again=%d after=%d", lanes, rc, got, order,
                again, pm__node_ls_live(n->ls));
    while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
        ;
    return 0;
}

START_TEST(test_lane_peer_crash)
{
    pm_options *o = lane_options(boot_crash, 2);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, said[0][0] != 0, 40000);
    char want[128];
    snprintf(want, sizeof(want), "#lanes=1 die=%d got=5 order=1 again=0 after=0", -EHOSTDOWN);
    ck_assert_str_eq(said[0], want);
    ck_assert_uint_eq(c->hub->lanes_made, 1);
    ck_assert_uint_ge(c->hub->lanes_revoked, 1);
    pm_test_finish(c, o);
}
END_TEST

/* Identity on a lane: slot 0 (hostile) earns a lane to slot 1 (the
 * victim), then writes raw frames on it, past the library's own send:
 * a message claiming to be from slot 2, a notice, a reply to nothing, a
 * reply to the request the victim is waiting on from slot 2, a large
 * message's flag, another host. The victim sees one message, from slot 0
 * (stamped from what the supervisor said), its request to slot 2 answered
 * by slot 2 alone, and nothing else but the closing "end". */
static void raw(pm__lane *l, int type, uint32_t src, uint16_t flags, uint16_t host,
                uint64_t id, int32_t error, const char *text)
{
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = (uint8_t)type;
    h.flags = flags;
    h.src = src;
    h.src_inc = 77;
    h.src_host = host;
    h.dst = 1;
    h.request_id = id;
    h.error = error;
    (void)pm__frame_send(&l->tx, &h, text, strlen(text));
}

static int hostile(pm_node *n)
{
    pm_address to = pm_test_slot_addr(1, 0);
    pm_message r;
    pm__node_lane *e = earn_lane(n, 1);
    pm_test_say(n, "hostile lane=%d", e != NULL);
    if (e == NULL)
        return 1;
    /* Wait for the victim's "go": its request to slot 2 is under way. */
    while (pm_node_recv(n, &r, -1) == 0 && !(r.len == 2 && memcmp(r.data, "go", 2) == 0))
        ;
    raw(e->lane, PM__FT_MSG, 2, 0, 0, 0, 0, "forged");
    raw(e->lane, PM__FT_UNDELIVERABLE, 0, 0, 0, 5, -EHOSTDOWN, "");
    raw(e->lane, PM__FT_REPLY, 0, 0, 0, 999, 0, "nothing");
    for (uint64_t id = 1; id < 200; id++)
        raw(e->lane, PM__FT_REPLY, 2, 0, 0, id, 0, "fake");
    raw(e->lane, PM__FT_MSG, 0, PM__FF_MEMFD, 0, 0, 0, "flag");
    raw(e->lane, PM__FT_MSG, 0, 0, 3, 0, 0, "host");
    pm_node_send(n, &to, "end", 3);
    while (pm_node_recv(n, &r, -1) != -ESHUTDOWN)
        ;
    return 0;
}

static int victim(pm_node *n)
{
    pm_address slot0 = pm_test_slot_addr(0, 0), slot2 = pm_test_slot_addr(2, 0);
    int others = 0, forged_ok = 0, asked = 0;
    char reply[32] = "";
    unsigned reply_from = 0;
    /* Slot 2 ready first: asked before it is, the hub answers -EHOSTDOWN
     * for it (a fresh-clone CI run on a faster machine did, reply=rc-112:
     * slots 0 and 1 had made their lane before slot 2 was up). */
    if (wait_peer(n, &slot2) != 0)
        snprintf(reply, sizeof(reply), "slot 2 never up");
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc < 0)
            continue;
        if (m.kind == PM_MSG_REQUEST) {
            pm_node_reply(n, &m, m.data, m.len);
            /* After the lane is there: ask slot 2 (slow to answer), and
             * tell slot 0 to go while the request waits. */
            if (++asked == 40) {
                pm_node_send(n, &slot0, "go", 2);
                pm_message r;
                int rrc = pm_node_request(n, &slot2, "slow", 4, 20000, &r);
                if (rrc == 0) {
                    snprintf(reply, sizeof(reply), "%.*s", (int)r.len, (const char *)r.data);
                    reply_from = r.from.port;
                } else {
                    snprintf(reply, sizeof(reply), "rc%d", rrc); /* said, for a failure's log */
                }
            }
            continue;
        }
        if (m.len == 6 && memcmp(m.data, "forged", 6) == 0)
            forged_ok = m.from.port == 1 && m.kind == PM_MSG_PLAIN;
        else if (!(m.len == 3 && memcmp(m.data, "end", 3) == 0))
            others++;
        else {
            pm_test_say(n, "victim forged_from_0=%d others=%d reply=%s from=%u lanes=%d", forged_ok,
                        others, reply, reply_from, pm__node_ls_live(n->ls));
        }
    }
}

/* Slot 2: answers "slow" after 300 ms with "real". */
static int slow(pm_node *n)
{
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc == 0 && m.kind == PM_MSG_REQUEST) {
            usleep(300000);
            pm_node_reply(n, &m, "real", 4);
        }
    }
}

static int boot_identity(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    return pm_node_slot(n) == 0 ? hostile(n) : pm_node_slot(n) == 1 ? victim(n) : slow(n);
}

START_TEST(test_lane_identity)
{
    pm_options *o = lane_options(boot_identity, 3);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, said[1][0] != 0, 40000);
    ck_assert_str_eq(said[0], "#hostile lane=1");
    ck_assert_str_eq(said[1], "#victim forged_from_0=1 others=0 reply=real from=3 lanes=1");
    pm_test_finish(c, o);
}
END_TEST

/* The bound: slot 0 talks to nine peers in turn, 40 requests each (80
 * frames, past PM__LANEBOOK_AFTER): the first eight get a lane, the ninth
 * goes on through the hub (no free index at slot 0), and every request is
 * answered. */
static int boot_bound(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    if (pm_node_slot(n) != 0)
        return server(n);
    int ok = 1;
    for (unsigned p = 1; p <= 9; p++) {
        pm_address to = pm_test_slot_addr(p, 0);
        ok &= wait_peer(n, &to) == 0;
        for (uint32_t i = 0; i < 40; i++) {
            pm_message r;
            ok &= pm_node_request(n, &to, &i, sizeof(i), 10000, &r) == 0 && get_u32(&r) == i;
        }
    }
    pm_test_say(n, "bound ok=%d held=%u", ok, pm__node_ls_held(n->ls));
    pm_message m;
    while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
        ;
    return 0;
}

START_TEST(test_lane_bound)
{
    pm_options *o = lane_options(boot_bound, 10);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, said[0][0] != 0, 60000);
    char want[64];
    snprintf(want, sizeof(want), "#bound ok=1 held=%u", PM_DIRECT_LANES_MAX);
    ck_assert_str_eq(said[0], want);
    ck_assert_uint_eq(c->hub->lanes_made, PM_DIRECT_LANES_MAX);
    pm_test_finish(c, o);
}
END_TEST

/* A flood on one lane beside traffic on another: slot 0 streams 200000
 * messages at slot 2 on their lane while slot 1 makes 2000 requests of
 * slot 2 on theirs; slot 2 serves both (its lanes read in turn), so slot
 * 1's requests all complete, and slot 0's stream arrives whole and in
 * order. */
static int boot_flood(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    pm_address to = pm_test_slot_addr(2, 0);
    if (pm_node_slot(n) == 2)
        return server(n);
    int ok = wait_peer(n, &to) == 0;
    pm_message r;
    if (pm_node_slot(n) == 0) {
        for (uint32_t i = 0; i < 100; i++)
            ok &= pm_node_request(n, &to, &i, sizeof(i), 10000, &r) == 0;
        for (uint32_t i = 0; i < 200000; i++)
            ok &= pm_node_send(n, &to, &i, sizeof(i)) == 0;
        uint32_t done = UINT32_MAX - 1;
        pm_node_send(n, &to, &done, sizeof(done));
        pm_test_say(n, "flood ok=%d lanes=%d", ok, pm__node_ls_live(n->ls));
    } else {
        for (uint32_t i = 0; i < 2000; i++)
            ok &= pm_node_request(n, &to, &i, sizeof(i), 20000, &r) == 0 && get_u32(&r) == i;
        pm_test_say(n, "asker ok=%d lanes=%d", ok, pm__node_ls_live(n->ls));
    }
    while (pm_node_recv(n, &r, -1) != -ESHUTDOWN)
        ;
    return 0;
}

/* A receiver takes its lanes and its hub ring in turn (node_messaging.c
 * lanes_first: neither keeps the other waiting): with frames waiting on
 * both, its receives alternate between them from the first. Slot 1 earns
 * a lane to slot 0; slot 0 parks on a gate while slot 1 writes 8 frames
 * on the lane and main 8 through the hub, then reads 16 and says where
 * each came from: L (the lane's peer) or M (main). */
static int turns_gate[2] = {-1, -1};

static int boot_turns(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    pm_message m;
    if (pm_node_slot(n) == 1) {
        pm_test_say(n, "%s", earn_lane(n, 0) != NULL ? "lane" : "nolane");
        while (pm_node_recv(n, &m, -1) == 0 && m.len != 4)
            ;
        pm_address to = pm_test_slot_addr(0, 0);
        int ok = 1;
        for (uint32_t i = 0; i < 8; i++)
            ok &= pm_node_send(n, &to, &i, sizeof(i)) == 0;
        pm_test_say(n, "sent %d", ok);
        while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
            ;
        return 0;
    }
    for (;;) {
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc < 0)
            continue;
        if (m.kind == PM_MSG_REQUEST) {
            pm_node_reply(n, &m, m.data, m.len);
            continue;
        }
        if (m.len != 4 || memcmp(m.data, "park", 4) != 0)
            continue;
        pm_test_say(n, "parked");
        char b;
        while (read(turns_gate[0], &b, 1) < 0 && errno == EINTR)
            ;
        char from[17];
        unsigned k = 0;
        while (k < 16 && pm_node_recv(n, &m, 20000) == 0)
            from[k++] = m.from.port == 0 ? 'M' : 'L';
        from[k] = '\0';
        pm_test_say(n, "turns %s", from);
    }
}

/* Spawns o (slot 0 boot_turns' or alike, slot 1 boot_turns'): slot 1
 * earns its lane to slot 0, slot 0 parks on turns_gate (no heartbeat
 * meanwhile), slot 1 writes its 8 frames on the lane. */
static pm_cluster *parked_beside_lane(pm_options *o)
{
    ck_assert_int_eq(pipe(turns_gate), 0);
    ck_assert_int_eq(pm_options_set_heartbeat_timeout_ms(o, 0), 0);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, said[1][0] != 0, 60000);
    ck_assert_str_eq(said[1], "#lane");
    pm_address a0 = pm_test_slot_addr(0, 0), a1 = pm_test_slot_addr(1, 0);
    ck_assert_int_eq(pm_cluster_send(c, &a0, "park", 4), 0);
    PM_RUN_UNTIL(c, said[0][0] != 0, 20000);
    ck_assert_str_eq(said[0], "#parked");
    said[1][0] = 0;
    ck_assert_int_eq(pm_cluster_send(c, &a1, "send", 4), 0);
    PM_RUN_UNTIL(c, said[1][0] != 0, 20000);
    ck_assert_str_eq(said[1], "#sent 1");
    return c;
}

START_TEST(test_lane_turns)
{
    pm_options *o = lane_options(boot_turns, 2);
    pm_cluster *c = parked_beside_lane(o);
    pm_address a0 = pm_test_slot_addr(0, 0);
    for (uint32_t i = 0; i < 8; i++)
        ck_assert_int_eq(pm_cluster_send(c, &a0, &i, sizeof(i)), 0);
    said[0][0] = 0;
    ck_assert_int_eq(write(turns_gate[1], "x", 1), 1);
    PM_RUN_UNTIL(c, said[0][0] != 0, 30000);
    /* Both sources within the first four receives (a control frame of
     * the hub's between them, such as the lane's marker, may take a turn),
     * 8 of each in all. */
    const char *t = said[0] + strlen("#turns ");
    ck_assert_msg(strncmp(said[0], "#turns ", 7) == 0 && strlen(t) == 16 && memchr(t, 'L', 4) != NULL &&
                      memchr(t, 'M', 4) != NULL,
                  "receives: %s", said[0]);
    unsigned lanes = 0;
    for (const char *p = t; *p != '\0'; p++)
        lanes += *p == 'L';
    ck_assert_msg(lanes == 8, "receives: %s", said[0]);
    pm_test_finish(c, o);
    close(turns_gate[0]);
    close(turns_gate[1]);
}
END_TEST

/* After its stop request a worker receives nothing more, a lane's frames
 * included (pm_node_recv: -ESHUTDOWN once the supervisor asks it to
 * stop): slot 0 (SIGTERM ignored) parks while slot 1 writes 8 frames
 * on their lane and main asks slot 0 to stop; then it receives until
 * -ESHUTDOWN (a lane frame may come first: it was there before the STOP
 * was read) and three more times, and exits 7 when each of those said
 * -ESHUTDOWN, 8 when one gave a message. */
static int boot_after_stop(pm_node *n, void *arg)
{
    if (pm_node_slot(n) == 1)
        return boot_turns(n, arg);
    signal(SIGTERM, SIG_IGN);
    pm_node_ready(n);
    pm_message m;
    for (;;) {
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 9; /* the stop came before the park */
        if (rc < 0)
            continue;
        if (m.kind == PM_MSG_REQUEST) {
            pm_node_reply(n, &m, m.data, m.len);
            continue;
        }
        if (m.len == 4 && memcmp(m.data, "park", 4) == 0)
            break;
    }
    pm_test_say(n, "parked");
    char b;
    while (read(turns_gate[0], &b, 1) < 0 && errno == EINTR)
        ;
    int rc;
    while ((rc = pm_node_recv(n, &m, 20000)) == 0)
        ;
    if (rc != -ESHUTDOWN)
        return 10;
    for (int i = 0; i < 3; i++)
        if (pm_node_recv(n, &m, 0) != -ESHUTDOWN)
            return 8;
    return 7;
}

START_TEST(test_lane_nothing_after_stop)
{
    pm_options *o = lane_options(boot_after_stop, 2);
    ck_assert_int_eq(pm_options_set_stop_timeout_ms(o, 30000), 0);
    pm_cluster *c = parked_beside_lane(o);
    exit_code0 = -100;
    ck_assert_int_eq(pm_cluster_restart_slot(c, 0), 0);
    ck_assert_int_eq(write(turns_gate[1], "x", 1), 1);
    PM_RUN_UNTIL(c, exit_code0 != -100, 40000);
    ck_assert_int_eq(exit_code0, 7);
    /* 1 when slot 0's replacement was still starting (killed): either. */
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    close(turns_gate[0]);
    close(turns_gate[1]);
}
END_TEST

START_TEST(test_lane_flood_beside)
{
    pm_options *o = lane_options(boot_flood, 3);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, said[0][0] != 0 && said[1][0] != 0 && said[2][0] != 0, 60000);
    ck_assert_str_eq(said[0], "#flood ok=1 lanes=1");
    ck_assert_str_eq(said[1], "#asker ok=1 lanes=1");
    ck_assert_str_eq(said[2], "#server ok 200000 lanes=1");
    pm_test_finish(c, o);
}
END_TEST

/* A lane's peer attacks the doorbell its honest end writes to wake it
 * (a review of stop 40): with eventfds it shared the open file
 * description, cleared O_NONBLOCK, filled the counter and raised its wait
 * flags, and the honest end's next wake-up blocked in write() for good:
 * no beat, fenced "heartbeat". A lane's doorbells are socket pairs: the
 * peer holds only its own reading end. The honest end goes on answering. */
static int boot_lane_bell(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    if (pm_node_slot(n) == 1)
        return server(n);
    pm__node_lane *e = earn_lane(n, 1);
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.dst = 1;
    /* Its own writes into its doorbell's reading end fail (EPIPE): no
     * SIGPIPE for the attacker, which goes on. */
    signal(SIGPIPE, SIG_IGN);
    if (e != NULL) {
        int fl = fcntl(e->efd_self, F_GETFL);
        if (fl >= 0)
            (void)fcntl(e->efd_self, F_SETFL, fl & ~O_NONBLOCK);
        uint64_t v = 0xfffffffffffffffeULL;
        (void)!write(e->efd_self, &v, sizeof(v));
        atomic_store(&e->lane->rx.sh->cons_waiting, 1u);
        atomic_store(&e->lane->tx.sh->prod_waiting, 1u);
        /* Requests on the lane, never reading again: slot 1's replies
         * and releases wake it through the pipe until it is full. */
        h.type = PM__FT_REQUEST;
        for (uint64_t id = 1000; id < 1200; id++) {
            h.request_id = id;
            (void)pm__lane_send(e->lane, &h, "x", 1);
        }
    }
    pm_test_say(n, "attacker lane=%d", e != NULL);
    for (;;)
        pause();
    return 0;
}

/* Slot 2 asks slot 1 all along: slot 1 stays responsive, nobody fenced. */
static int boot_lane_bell3(pm_node *n, void *arg)
{
    if (pm_node_slot(n) != 2)
        return boot_lane_bell(n, arg);
    pm_node_ready(n);
    pm_address to = pm_test_slot_addr(1, 0);
    (void)wait_peer(n, &to);
    usleep(500000);
    int ok = 1;
    for (uint32_t i = 0; i < 300; i++) {
        pm_message r;
        ok &= pm_node_request(n, &to, &i, sizeof(i), 10000, &r) == 0;
        usleep(10000);
    }
    pm_test_say(n, "honest ok=%d", ok);
    pm_message m;
    while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
        ;
    return 0;
}

START_TEST(test_lane_doorbell_filled)
{
    pm_options *o = lane_options(boot_lane_bell3, 3);
    ck_assert_int_eq(pm_options_set_heartbeat_timeout_ms(o, 2000), 0);
    memset(fenced, 0, sizeof(fenced));
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, said[0][0] != 0 && said[2][0] != 0, 60000);
    ck_assert_str_eq(said[0], "#attacker lane=1");
    ck_assert_str_eq(said[2], "#honest ok=1");
    ck_assert_int_eq(fenced[1], 0);
    ck_assert_int_eq(fenced[2], 0);
    pm_test_finish(c, o);
}
END_TEST

/* Shared with the fork-mode workers (mapped before any spawn): one
 * worker tells another that its part is done. */
static _Atomic int *flag;

/* Waits (at most 30 s) until main's or a worker's flag is no longer 0
 * (want < 0) or holds want. */
static void wait_flag(int want)
{
    for (int k = 0; k < 3000; k++) {
        int v = atomic_load(flag);
        if (want < 0 ? v != 0 : v == want)
            return;
        usleep(10000);
    }
}

/* Large replies to a lane's requests (20 KiB: they take the hub as
 * LANE_REPLY) forget their requests like any reply: 80 of them, more than
 * a lane remembers (64), all answered (a review of stop 40: each stayed
 * behind, and from the 65th on every lane request was dropped). */
static int big_server(pm_node *n)
{
    static unsigned char big[20000];
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc < 0 || m.kind != PM_MSG_REQUEST)
            continue;
        if (m.len == 1 && ((const char *)m.data)[0] == 'L')
            pm_node_reply(n, &m, big, sizeof(big));
        else
            pm_node_reply(n, &m, m.data, m.len);
    }
}

static int boot_large_replies(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    if (pm_node_slot(n) == 1)
        return big_server(n);
    pm_address to = pm_test_slot_addr(1, 0);
    pm_message r;
    int lanes = earn_lane(n, 1) != NULL, ok = 0;
    for (int i = 0; i < 80; i++)
        ok += pm_node_request(n, &to, "L", 1, 10000, &r) == 0 && r.len == 20000;
    pm_test_say(n, "large lanes=%d ok=%d", lanes, ok);
    while (pm_node_recv(n, &r, -1) != -ESHUTDOWN)
        ;
    return 0;
}

START_TEST(test_lane_large_replies)
{
    pm_options *o = lane_options(boot_large_replies, 2);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, said[0][0] != 0, 60000);
    ck_assert_str_eq(said[0], "#large lanes=1 ok=80");
    pm_test_finish(c, o);
}
END_TEST

/* A requester that writes requests on its lane and never reads again:
 * its server's replies find the lane full and take the hub (a reply never
 * waits; there they are bounded by the server's hold), so the server goes
 * on serving a third worker (a review of stop 40: pm_node_reply waited for
 * good). */
static int boot_reply_never_waits(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    if (pm_node_slot(n) == 1)
        return server(n);
    pm_address to = pm_test_slot_addr(1, 0);
    pm_message r;
    (void)wait_peer(n, &to);
    if (pm_node_slot(n) == 2) {
        wait_flag(-1);
        int rc = pm_node_request(n, &to, "x", 1, 10000, &r);
        pm_test_say(n, "third flag=%d rc=%d", atomic_load(flag), rc);
        while (pm_node_recv(n, &r, -1) != -ESHUTDOWN)
            ;
        return 0;
    }
    pm__node_lane *e = earn_lane(n, 1);
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.dst = 1;
    unsigned sent = 0;
    if (e != NULL) {
        h.type = PM__FT_REQUEST;
        /* Requests until the server's replies have filled the lane back
         * to us (1,000 replies of 60 bytes and more: past its 64 KiB). */
        for (uint64_t id = 1000; id < 3000; id++) {
            h.request_id = id;
            int rc, tries = 0;
            while ((rc = pm__lane_send(e->lane, &h, "0123", 4)) == -EAGAIN && tries++ < 2000)
                usleep(1000);
            if (rc != 0)
                break;
            sent++;
        }
    }
    pm_test_say(n, "hostile lane=%d sent=%u", e != NULL, sent);
    atomic_store(flag, 1);
    for (;;)
        pause(); /* never reads again */
    return 0;
}

START_TEST(test_lane_reply_never_waits)
{
    atomic_store(flag, 0);
    pm_options *o = lane_options(boot_reply_never_waits, 3);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, said[2][0] != 0, 90000);
    ck_assert_str_eq(said[0], "#hostile lane=1 sent=2000");
    ck_assert_str_eq(said[2], "#third flag=1 rc=0");
    pm_test_finish(c, o);
}
END_TEST

/* A peer killed while it sleeps on its lane (its wait flags raised):
 * slot 0 goes on sending to it as fast as it can, so its next frames wake
 * a doorbell whose reader is gone, until the revocation sends them through
 * the hub. Slot 0 lives on (a pipe's write there raised SIGPIPE and killed
 * it: torture, stop 40), and so does the supervisor (its own wake-up of
 * a dead worker: the same). */
static int boot_wake_dead(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    if (pm_node_slot(n) == 1)
        return server(n);
    pm__node_lane *e = earn_lane(n, 1);
    pm_test_say(n, "sender lane=%d", e != NULL);
    pm_address to = pm_test_slot_addr(1, 0);
    uint32_t v = 0;
    pm_message m;
    /* Main kills slot 1 while it sleeps on its lane, then says go: the
     * first frame wakes a doorbell whose reader is gone. */
    while (!(pm_node_recv(n, &m, -1) == 0 && m.len == 2 && memcmp(m.data, "go", 2) == 0))
        ;
    for (int i = 0; i < 1000; i++)
        (void)pm_node_try_send(n, &to, &v, sizeof(v));
    pm_test_say(n, "sender alive");
    while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
        ;
    return 0;
}

START_TEST(test_lane_wake_dead_peer)
{
    pm_options *o = lane_options(boot_wake_dead, 2);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, said[0][0] != 0, 40000);
    ck_assert_str_eq(said[0], "#sender lane=1");
    /* Slot 1 asleep on its lane (its wait flags raised): killed, and slot 0
     * told to send at once, before the supervisor has reaped it and
     * revoked the lane. */
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 1, &si), 0);
    ck_assert_int_eq(kill(si.pid, SIGKILL), 0);
    pm_address a0 = pm_test_slot_addr(0, 0);
    ck_assert_int_eq(pm_cluster_send(c, &a0, "go", 2), 0);
    PM_RUN_UNTIL(c, strcmp(said[0], "#sender alive") == 0, 20000);
    ck_assert_int_eq(fenced[0], 0);
    /* The replacement of slot 1 ready before the end, so that the
     * terminate finds no start to kill. */
    uint64_t dead = si.incarnation;
    PM_RUN_UNTIL(c, pm_cluster_slot_info(c, 1, &si) == 0 && si.state == PM_SLOT_READY &&
                        si.incarnation != dead, 20000);
    pm_test_finish(c, o);
}
END_TEST

/* Slot 1 of the switch tests: reads numbered messages (a large one among
 * them) and reports, at the one numbered UINT32_MAX - 1, whether they
 * came in order and how many came by its lane. It answers requests, and
 * on the request "sleep" reads nothing until main's flag says so. */
static int count_server(pm_node *n)
{
    uint32_t next = 0;
    int bad = 0;
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc < 0)
            continue;
        if (m.kind == PM_MSG_REQUEST) {
            int sleep = m.len == 5 && memcmp(m.data, "sleep", 5) == 0;
            pm_node_reply(n, &m, m.data, m.len);
            while (sleep && atomic_load(flag) == 0)
                usleep(1000);
            continue;
        }
        uint32_t v = get_u32(&m);
        if (v == UINT32_MAX - 1) {
            pm__node_lane *e = lane_to(n, 0);
            pm_test_say(n, "server %s %u by lane %s", bad ? "bad" : "ok", next,
                        e != NULL && e->lane->delivered > 0 ? "some" : "none");
            continue;
        }
        if (v != next)
            bad = 1;
        next = v + 1;
    }
}

/* Slot 0 of the switch tests: sends numbered messages to slot 1 (from 0)
 * until its frames take the lane, then 1,000 more (at most 30 s), then
 * the "done" message, and says whether it switched. */
static int stream_until_switched(pm_node *n, const pm_address *to, int bad)
{
    uint32_t seq = 0, after = 0;
    uint64_t end = pm__now_ms() + 30000;
    while (after < 1000 && pm__now_ms() < end) {
        bad |= pm_node_send(n, to, &seq, sizeof(seq)) != 0;
        seq++;
        pm__node_lane *e = lane_to(n, 1);
        after += e != NULL && e->on_lane;
    }
    uint32_t done = UINT32_MAX - 1;
    bad |= pm_node_send(n, to, &done, sizeof(done)) != 0;
    pm_test_say(n, "sender %s switched=%d", bad ? "bad" : "ok", after == 1000);
    pm_message m;
    while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
        ;
    return 0;
}

/* A worker that only sends (its last receive long past, that message still
 * current) still takes the lane its stream earns: the offer waiting in its
 * hub ring is taken by a send, and its blocking sends wait for the peer to
 * take its hub frames rather than add to them for ever (stop 40 measured
 * a stream no faster with lanes: it never switched). Sends until its
 * frames take the lane, then 1,000 more (at most 30 s). */
static int boot_sender_only(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    if (pm_node_slot(n) == 1)
        return count_server(n);
    pm_address to = pm_test_slot_addr(1, 0);
    int bad = wait_peer(n, &to) != 0; /* its reply stays the current message */
    return stream_until_switched(n, &to, bad);
}

START_TEST(test_lane_sender_only)
{
    pm_options *o = lane_options(boot_sender_only, 2);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, said[0][0] != 0 && said[1][0] != 0, 60000);
    ck_assert_str_eq(said[0], "#sender ok switched=1");
    ck_assert_int_eq(strncmp(said[1], "#server ok ", 11), 0);
    ck_assert_ptr_nonnull(strstr(said[1], " by lane some"));
    pm_test_finish(c, o);
}
END_TEST

/* The wait for the switch is bounded: a peer that stops reading right
 * after a large message took the hub (the lane's frames must then wait
 * for it to take that one) does not hold its sender. 200 small messages
 * are sent while it reads nothing (through the hub, after one short wait);
 * only then does main's flag let it read, and everything arrives in order.
 * A sender held until its peer reads would never get there. */
static int boot_switch_bounded(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    if (pm_node_slot(n) == 1)
        return count_server(n);
    pm_address to = pm_test_slot_addr(1, 0);
    pm_message r;
    static unsigned char big[40000];
    int lane = earn_lane(n, 1) != NULL;
    int bad = pm_node_request(n, &to, "sleep", 5, 10000, &r) != 0;
    uint32_t seq = 0;
    memcpy(big, &seq, sizeof(seq));
    bad |= pm_node_send(n, &to, big, sizeof(big)) != 0;
    for (seq = 1; seq <= 200; seq++)
        bad |= pm_node_send(n, &to, &seq, sizeof(seq)) != 0;
    pm_test_say(n, "sender lane=%d %s", lane, bad ? "bad" : "ok");
    atomic_store(flag, 1);
    uint32_t done = UINT32_MAX - 1;
    pm_node_send(n, &to, &done, sizeof(done));
    while (pm_node_recv(n, &r, -1) != -ESHUTDOWN)
        ;
    return 0;
}

START_TEST(test_lane_switch_bounded)
{
    atomic_store(flag, 0);
    pm_options *o = lane_options(boot_switch_bounded, 2);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, said[0][0] != 0 && said[1][0] != 0, 60000);
    ck_assert_str_eq(said[0], "#sender lane=1 ok");
    ck_assert_int_eq(strncmp(said[1], "#server ok 201 by lane ", 23), 0);
    pm_test_finish(c, o);
}
END_TEST

/* A message forwarded as a request's data, as it came: slot 0 takes a
 * large message from main (a mapping) and sends it on to slot 1 as a
 * request, whose echo must be the same bytes (pm_node_request let the
 * message go, unmapping it, before it sent it: a review of stop 41). */
static int boot_forward(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    if (pm_node_slot(n) == 1)
        return server(n);
    pm_address to = pm_test_slot_addr(1, 0);
    int bad = wait_peer(n, &to) != 0;
    pm_message m, r;
    while (pm_node_recv(n, &m, -1) != 0 || m.len != 100000)
        ;
    int rc = pm_node_request(n, &to, m.data, m.len, 10000, &r);
    int same = 0;
    if (rc == 0 && r.len == 100000) {
        same = 1;
        for (size_t i = 0; i < r.len; i++)
            same &= ((const unsigned char *)r.data)[i] == (unsigned char)(i * 7);
    }
    pm_test_say(n, "forward %s rc=%d same=%d", bad ? "bad" : "ok", rc, same);
    while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
        ;
    return 0;
}

START_TEST(test_forward_as_request)
{
    pm_options *o = lane_options(boot_forward, 2);
    pm_cluster *c = pm_test_spawn(o);
    static unsigned char big[100000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (unsigned char)(i * 7);
    pm_address a0 = pm_test_slot_addr(0, 0);
    PM_RUN_UNTIL(c, pm_cluster_send(c, &a0, big, sizeof(big)) == 0, 20000);
    PM_RUN_UNTIL(c, said[0][0] != 0, 40000);
    ck_assert_str_eq(said[0], "#forward ok rc=0 same=1");
    pm_test_finish(c, o);
}
END_TEST

/* Slot 1 of the restart tests: its first incarnation answers requests
 * until a message `last` says is the last, then sets flag 1 and exits 3;
 * the replacement sets flag 2 and counts (count_server). */
static int is_3000th(const pm_message *m)
{
    return get_u32(m) == 2999;
}

static int is_bye(const pm_message *m)
{
    return m->len == 3 && memcmp(m->data, "bye", 3) == 0;
}

static int restarting_server(pm_node *n, int (*last)(const pm_message *))
{
    if (atomic_load(flag) != 0) {
        atomic_store(flag, 2); /* the replacement */
        return count_server(n);
    }
    for (;;) {
        pm_message m;
        if (pm_node_recv(n, &m, -1) == -ESHUTDOWN)
            return 0;
        if (m.kind == PM_MSG_REQUEST)
            pm_node_reply(n, &m, m.data, m.len);
        else if (last(&m)) {
            atomic_store(flag, 1);
            _exit(3);
        }
    }
}

/* A worker that only sends takes its peer's next lane after the peer
 * restarted: the revocation's wake-up at the head of its hub ring is taken
 * by a send too (a send stopped there, and the stream stayed on the hub
 * for good). Slot 1's first incarnation reads 3,000 frames, then exits;
 * the sender, which received nothing since its first request, waits for
 * the replacement to run (a frame to a dead slot would bring a notice
 * into its ring, which only a receive takes), then sends until its frames
 * take the new lane and 1,000 more (at most 30 s). */
static int boot_sender_restart(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    if (pm_node_slot(n) == 1)
        return restarting_server(n, is_3000th);
    pm_address to = pm_test_slot_addr(1, 0);
    int bad = wait_peer(n, &to) != 0;
    for (uint32_t seq = 0; seq < 3000; seq++)
        bad |= pm_node_send(n, &to, &seq, sizeof(seq)) != 0;
    wait_flag(2);
    return stream_until_switched(n, &to, bad);
}

/* The restart tests' outcome: the sender switched to the lane with the
 * replacement, which got every frame in order, some by that lane. */
static void sender_switches_after_restart(int (*boot)(pm_node *, void *))
{
    atomic_store(flag, 0);
    pm_options *o = lane_options(boot, 2);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, said[0][0] != 0 && (said[1][0] != 0 || strncmp(said[0], "#sender:", 8) == 0),
                 80000);
    ck_assert_str_eq(said[0], "#sender ok switched=1");
    ck_assert_int_eq(strncmp(said[1], "#server ok ", 11), 0);
    ck_assert_ptr_nonnull(strstr(said[1], " by lane some"));
    ck_assert_uint_ge(c->hub->lanes_made, 2);
    pm_test_finish(c, o);
}

START_TEST(test_lane_sender_restart)
{
    sender_switches_after_restart(boot_sender_restart);
}
END_TEST

/* A peer that closes its end of our lane's doorbell (alive: nothing
 * revokes the lane) makes the doorbell read end of file for ever.
 * pm_node_fd must not turn readable for ever on it (an application's
 * poll loop would spin), and the peer's later frames still arrive (the
 * lane is read whenever we look, without its wake-ups). Slot 1 (hostile)
 * answers the victim's requests until they earned a lane, closes its end
 * of the victim's doorbell and sets flag 1; the victim counts for 1 s how
 * often pm_node_fd is readable with nothing to receive, then sets flag 2,
 * and slot 1 sends one message. */
static int boot_bell_hangup(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    pm_message m;
    if (pm_node_slot(n) == 1) {
        int answered = 0;
        while (answered < 40) {
            if (pm_node_recv(n, &m, 20000) != 0)
                return 1;
            if (m.kind == PM_MSG_REQUEST)
                answered += pm_node_reply(n, &m, m.data, m.len) == 0;
        }
        pm__node_lane *e = lane_to(n, 0);
        if (e != NULL && e->efd_peer >= 0) {
            close(e->efd_peer); /* the victim's doorbell, our end */
            e->efd_peer = -1;
        }
        atomic_store(flag, e != NULL ? 1 : -1);
        wait_flag(2);
        pm_address to = pm_test_slot_addr(0, 0);
        pm_node_send(n, &to, "after", 5);
        while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
            ;
        return 0;
    }
    int fd = pm_node_fd(n); /* watches every lane's doorbell from now on */
    pm_address to = pm_test_slot_addr(1, 0);
    (void)wait_peer(n, &to);
    for (uint32_t i = 0; i < 39; i++)
        (void)pm_node_request(n, &to, &i, sizeof(i), 10000, &m);
    wait_flag(-1);
    unsigned readable = 0, got = 0;
    uint64_t end = pm__now_ms() + 1000;
    while (pm__now_ms() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        readable++;
        while (pm_node_recv(n, &m, 0) == 0)
            got++;
    }
    pm__node_lane *e = lane_to(n, 1);
    int hung = e != NULL && e->bell_hung;
    atomic_store(flag, 2);
    int after = pm_node_recv(n, &m, 20000) == 0 && m.len == 5 && memcmp(m.data, "after", 5) == 0;
    pm_test_say(n, "victim spun=%d got=%u hung=%d after=%d", readable > 3, got, hung, after);
    while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
        ;
    return 0;
}

START_TEST(test_lane_bell_hangup)
{
    atomic_store(flag, 0);
    pm_options *o = lane_options(boot_bell_hangup, 2);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, said[0][0] != 0, 80000);
    ck_assert_str_eq(said[0], "#victim spun=0 got=0 hung=1 after=1");
    ck_assert_int_eq(atomic_load(flag), 2);
    pm_test_finish(c, o);
}
END_TEST

/* A sender that saw its lane ready keeps it while the peer rewrites its
 * words of the lane's page (attached 0, nothing taken from the hub): the
 * switch is decided once (a review of stop 41: a peer flipping them could
 * make every send wait for a switch again). Slot 0 streams until its
 * frames take the lane, then slot 1 (hostile) zeroes its words and slot
 * 0 sends 200 more, each of which must take the lane. */
static int boot_flipped_words(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    pm_message m;
    if (pm_node_slot(n) == 1) {
        for (;;) {
            int rc = pm_node_recv(n, &m, 10);
            if (rc == -ESHUTDOWN)
                return 0;
            if (rc == 0 && m.kind == PM_MSG_REQUEST)
                pm_node_reply(n, &m, m.data, m.len);
            pm__node_lane *e = lane_to(n, 0);
            if (atomic_load(flag) == 1 && e != NULL) {
                struct pm__lane_line *me = &e->lane->sh->end[e->lane->end];
                atomic_store(&me->attached, 0);
                atomic_store(&me->hub_taken, 0);
                atomic_store(flag, 2);
            }
        }
    }
    pm_address to = pm_test_slot_addr(1, 0);
    int bad = wait_peer(n, &to) != 0;
    uint32_t seq = 0;
    pm__node_lane *e = NULL;
    uint64_t end = pm__now_ms() + 30000;
    while ((e == NULL || !e->on_lane) && pm__now_ms() < end) {
        bad |= pm_node_send(n, &to, &seq, sizeof(seq)) != 0;
        seq++;
        e = lane_to(n, 1);
    }
    atomic_store(flag, 1);
    wait_flag(2);
    unsigned kept = 0;
    for (int i = 0; i < 200 && e != NULL; i++) {
        uint64_t before = pm__ring_head(&e->lane->tx);
        bad |= pm_node_send(n, &to, &seq, sizeof(seq)) != 0;
        seq++;
        kept += e->on_lane && pm__ring_head(&e->lane->tx) != before;
    }
    pm_test_say(n, "sender %s flipped=%d kept=%u", bad ? "bad" : "ok", atomic_load(flag) == 2,
                kept);
    while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
        ;
    return 0;
}

START_TEST(test_lane_flipped_words)
{
    atomic_store(flag, 0);
    pm_options *o = lane_options(boot_flipped_words, 2);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, said[0][0] != 0, 80000);
    ck_assert_str_eq(said[0], "#sender ok flipped=1 kept=200");
    pm_test_finish(c, o);
}
END_TEST

/* An honest peer's wake-ups never fill a doorbell: each wait arms once
 * and the peer sends at most once per arming, but edges merge and a wait
 * that finds its frame while arming takes none, so the doorbell is
 * emptied by a count of waits (every 32) and not of edges (a review of
 * stop 41: counted by edges it filled, about 270 sends here, and refused
 * the wake-ups after). 3,000 parked requests over the lane; after each,
 * the requester's doorbell holds at most 33 sends of 8 bytes. */
static int boot_bell_bounded(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    if (pm_node_slot(n) == 1)
        return server(n);
    n->channel.rx.spin_ns = 0; /* park at every wait: a wake-up each */
    n->channel.tx.spin_ns = 0;
    pm_address to = pm_test_slot_addr(1, 0);
    pm__node_lane *e = earn_lane(n, 1);
    int bad = e == NULL, most = 0;
    pm_message r;
    for (uint32_t i = 0; i < 3000 && !bad; i++) {
        bad |= pm_node_request(n, &to, &i, sizeof(i), 10000, &r) != 0 || get_u32(&r) != i;
        int q = 0;
        if (ioctl(e->efd_self, FIONREAD, &q) == 0 && q > most)
            most = q;
    }
    pm_test_say(n, "requester %s bounded=%d", bad ? "bad" : "ok", most <= 33 * 8);
    if (most > 33 * 8)
        fprintf(stderr, "doorbell held %d bytes\n", most);
    while (pm_node_recv(n, &r, -1) != -ESHUTDOWN)
        ;
    return 0;
}

START_TEST(test_lane_bell_bounded)
{
    pm_options *o = lane_options(boot_bell_bounded, 2);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, said[0][0] != 0, 80000);
    ck_assert_str_eq(said[0], "#requester ok bounded=1");
    pm_test_finish(c, o);
}
END_TEST

/* A worker whose last receive came by a lane, which is then revoked
 * (its peer exits), and which only sends from then on: its sends take
 * the revocation's wake-up, finish that lane with its buffer kept (the
 * last message may still be in use), and take the offer behind it, so its
 * stream to the peer's replacement switches to their new lane. Before,
 * a send never finished the last message's lane: the wake-up stayed at
 * the head of its hub ring until a receive, and the stream stayed on the
 * hub (design.md, Direct lanes, Known gaps (2)). */
static int boot_last_lane_sender(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    if (pm_node_slot(n) == 1)
        return restarting_server(n, is_bye);
    pm_address to = pm_test_slot_addr(1, 0);
    pm_message r;
    (void)earn_lane(n, 1);
    /* Requests until a reply comes by the lane (the server's replies take
     * it once it has switched); that reply stays the current message: no
     * receive follows. */
    for (uint32_t i = 0; i < 2000 && pm__node_ls_last(n->ls) == NULL; i++)
        (void)pm_node_request(n, &to, &i, sizeof(i), 10000, &r);
    if (pm__node_ls_last(n->ls) == NULL) {
        pm_test_say(n, "sender: the last reply did not come by the lane");
        return 1;
    }
    int bad = pm_node_send(n, &to, "bye", 3) != 0;
    wait_flag(2);
    return stream_until_switched(n, &to, bad);
}

START_TEST(test_lane_sender_after_lane_receive)
{
    sender_switches_after_restart(boot_last_lane_sender);
}
END_TEST

/* A lane's revocation when another lane's wake-up is ahead of its
 * peer's marker (design.md, "Direct lanes", Revocation; the gap the
 * review of stop 42 found): slot 0 (W) holds lane Y to slot 2 (marked)
 * and adopts lane X to slot 1 (P1) while P1 sleeps, then sleeps itself.
 * Slot 2 dies (Y's wake-up goes into W's ring); P1 wakes, takes X, sends
 * its marker (behind Y's wake-up in W's ring), writes five messages on X
 * and exits (X's wake-up follows). W then receives: the five messages,
 * written before P1 ended, must all arrive. Before wake-ups named their
 * lane, Y's finished X unmarked and dropped them (got=0). */
static int idle(pm_node *n)
{
    pm_message m;
    while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
        ;
    return 0;
}

static int marker_behind_w(pm_node *n)
{
    pm_address p1 = pm_test_slot_addr(1, 0);
    pm_message m;
    int lane_y = earn_lane(n, 2) != NULL;
    (void)wait_peer(n, &p1);
    /* Past PM__LANEBOOK_AFTER frames between the pair; then the offer is
     * taken by a receive (nothing else comes: P1 sleeps). */
    for (int i = 0; i < 70; i++)
        (void)pm_node_send(n, &p1, "x", 1);
    for (int i = 0; i < 2000 && lane_to(n, 1) == NULL; i++)
        (void)pm_node_recv(n, &m, 10);
    int lane_x = lane_to(n, 1) != NULL;
    atomic_store(flag, 1);
    wait_flag(3);
    unsigned got = 0;
    while (pm_node_recv(n, &m, 3000) == 0)
        got += m.len == 2 && ((const char *)m.data)[0] == 'L' && m.from.port == 2;
    pm_test_say(n, "w lanes=%d%d got=%u", lane_y, lane_x, got);
    return idle(n);
}

static int marker_behind_p1(pm_node *n)
{
    pm_message m;
    /* One request answered (W's wait_peer), then asleep until told. */
    while (pm_node_recv(n, &m, -1) == 0 && m.kind != PM_MSG_REQUEST)
        ;
    pm_node_reply(n, &m, m.data, m.len);
    wait_flag(2);
    while (pm_node_recv(n, &m, 0) == 0) /* W's frames, the offer, W's marker */
        ;
    pm__node_lane *e = lane_to(n, 0);
    uint64_t head = e != NULL ? e->lane->tx.head : 0;
    pm_address w = pm_test_slot_addr(0, 0);
    char text[2] = {'L', '0'};
    for (int i = 0; i < 5; i++, text[1]++)
        (void)pm_node_send(n, &w, text, 2);
    pm_test_say(n, "p1 lane=%d by_lane=%d", e != NULL, e != NULL && e->lane->tx.head > head);
    _exit(0);
}

static int boot_marker_behind(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    if (pm_node_slot(n) == 0)
        return marker_behind_w(n);
    if (atomic_load(flag) != 0) /* a replacement */
        return idle(n);
    return pm_node_slot(n) == 1 ? marker_behind_p1(n) : server(n);
}

START_TEST(test_lane_marker_behind_other_wakeup)
{
    atomic_store(flag, 0);
    pm_options *o = lane_options(boot_marker_behind, 3);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, atomic_load(flag) == 1, 40000);
    uint64_t revoked = c->hub->lanes_revoked;
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 2, &si), 0);
    ck_assert_int_eq(kill(si.pid, SIGKILL), 0); /* slot 2 dies */
    PM_RUN_UNTIL(c, c->hub->lanes_revoked > revoked, 20000); /* Y, at W */
    atomic_store(flag, 2);
    PM_RUN_UNTIL(c, said[1][0] != 0 && c->hub->lanes_revoked > revoked + 1, 20000); /* X, at W */
    atomic_store(flag, 3);
    PM_RUN_UNTIL(c, said[0][0] != 0, 40000);
    ck_assert_str_eq(said[1], "#p1 lane=1 by_lane=1");
    ck_assert_str_eq(said[0], "#w lanes=11 got=5");
    pm_test_finish(c, o);
}
END_TEST


/* A request on a lane whose peer's marker never reached the requester
 * (the lane unmarked at its end: finished only at its wake-up), then the
 * peer dies holding it (found by the review of stop 45). Slot 1 (P) fills
 * its up ring (a flood at slot 2, which never reads), so that its marker
 * cannot be sent when it adopts its lane to slot 0 (W); W's own marker
 * reaches P, so P is attached and W may write on the lane; W's request
 * goes by the lane, P takes it and exits. The request must fail
 * -EHOSTDOWN when W takes the revocation's wake-up; it waited out its
 * deadline (-ETIMEDOUT), for ever with none, before. */
struct unmarked_seen {
    _Atomic int floods, held, hub_holds;
};
static struct unmarked_seen *unm;

static int unmarked_w(pm_node *n)
{
    pm_address p1 = pm_test_slot_addr(1, 0);
    pm_message m;
    wait_flag(1);
    for (int i = 0; i < 70; i++)
        (void)pm_node_send(n, &p1, "m", 1);
    for (int i = 0; i < 2000 && lane_to(n, 1) == NULL; i++)
        (void)pm_node_recv(n, &m, 10);
    pm__node_lane *e = lane_to(n, 1);
    atomic_store(flag, 2);
    wait_flag(3);
    int ready = 0;
    for (int i = 0; e != NULL && i < 2000 && !(ready = pm__node_lane_switch_ready(e)); i++)
        usleep(10000);
    int unmarked = e != NULL && !e->marked;
    pm_message r;
    int rc = pm_node_request(n, &p1, "q", 1, 20000, &r);
    pm_test_say(n, "w lane=%d ready=%d unmarked=%d rc=%d flooded=%d p_lane=%d", e != NULL, ready,
                unmarked, rc, atomic_load(&unm->floods) > 0, atomic_load(&unm->held) >= 1);
    return idle(n);
}

static int unmarked_p(pm_node *n)
{
    pm_address x = pm_test_slot_addr(2, 0), y = pm_test_slot_addr(3, 0);
    pm_message m;
    (void)wait_peer(n, &x);
    static char buf[16000];
    /* Until the hub holds P back (its frames to X wait in X's queue at
     * P's bound: main sees it, hub_holds) and P's up ring is full (a
     * refusal after that: the hub reads P's ring no more, so it stays
     * full). At most 60 s. */
    int sent = 0;
    for (int i = 0; i < 6000; i++) {
        (void)pm_node_try_send(n, &y, "y", 1);
        if (pm_node_try_send(n, &x, buf, sizeof(buf)) == 0) {
            sent++;
            continue;
        }
        if (atomic_load(&unm->hub_holds))
            break;
        usleep(10000);
    }
    atomic_store(&unm->floods, sent);
    atomic_store(flag, 1);
    wait_flag(2);
    while (pm_node_recv(n, &m, 0) == 0) /* W's 70, the offer, W's marker */
        ;
    atomic_store(&unm->held, (int)pm__node_ls_held(n->ls));
    atomic_store(flag, 3);
    while (pm_node_recv(n, &m, -1) == 0)
        if (m.kind == PM_MSG_REQUEST)
            _exit(0); /* W's request, taken and never answered */
    _exit(0);
}

static int boot_unmarked(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    if (pm_node_slot(n) == 0)
        return unmarked_w(n);
    if (pm_node_slot(n) == 1)
        return atomic_load(flag) != 0 ? idle(n) : unmarked_p(n);
    if (pm_node_slot(n) == 3)
        return idle(n);
    pm_message m; /* X: answers one request, then reads nothing until flag 5 */
    while (pm_node_recv(n, &m, -1) == 0 && m.kind != PM_MSG_REQUEST)
        ;
    pm_node_reply(n, &m, m.data, m.len);
    while (atomic_load(flag) < 5)
        usleep(10000);
    return idle(n);
}

START_TEST(test_lane_request_unmarked)
{
    atomic_store(flag, 0);
    memset(unm, 0, sizeof(*unm));
    pm_options *o = lane_options(boot_unmarked, 4);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, pm_test_slot_blocked_on(c, 1) >= 0, 60000); /* the hub holds P back */
    atomic_store(&unm->hub_holds, 1);
    PM_RUN_UNTIL(c, said[0][0] != 0, 60000);
    atomic_store(flag, 5);
    char want[96];
    snprintf(want, sizeof(want), "#w lane=1 ready=1 unmarked=1 rc=%d flooded=1 p_lane=1",
             -EHOSTDOWN);
    ck_assert_str_eq(said[0], want);
    pm_test_finish(c, o);
}
END_TEST

/* A worker's switch-over marker is relayed only when every field is a
 * marker's and a lane joins the two incarnations (port.c mark_ok): with a
 * real lane to slot 1, slot 0 puts markers in its hub ring, each with one
 * field wrong and the others right (the fields the frame codec already
 * refuses, a flag or a positive error, never reach the rule). Each is
 * dropped and counted once as malformed, nobody is fenced, and the lane
 * serves on. */
static int marks_each_field(pm_node *n)
{
    pm__node_lane *e = earn_lane(n, 1);
    if (e == NULL) {
        pm_test_say(n, "marks lane=0");
        return idle(n);
    }
    for (int row = 0; row < 8; row++) {
        pm__frame_hdr h;
        memset(&h, 0, sizeof(h));
        h.type = PM__FT_LANE_MARK;
        h.dst = 1;
        h.dst_inc = 1;
        size_t len = 4;
        switch (row) {
        case 0: h.dst_host = 1; break;   /* another host's */
        case 1: len = 3; break;          /* short */
        case 2: len = 5; break;          /* long */
        case 3: h.request_id = 1; break; /* a request's id */
        case 4: h.deadline_ms = 100; break;
        case 5: h.error = -5; break;
        case 6: h.dst_inc = 2; break;    /* the peer's next incarnation */
        default: h.dst = 2; break;       /* a slot it shares no lane with */
        }
        if (pm__frame_send(pm_test_node_tx(n), &h, "mark!", len) != 0)
            _exit(22);
    }
    pm_address to = pm_test_slot_addr(1, 0);
    int answered = 0;
    for (uint32_t i = 0; i < 5; i++) {
        pm_message r;
        answered += pm_node_request(n, &to, &i, sizeof(i), 10000, &r) == 0 && get_u32(&r) == i;
    }
    pm_test_say(n, "marks lane=%d after=%d", lane_to(n, 1) != NULL, answered);
    return idle(n);
}

static int boot_marks(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    return pm_node_slot(n) == 0 ? marks_each_field(n) : pm_node_slot(n) == 1 ? server(n) : idle(n);
}

START_TEST(test_lane_marker_each_field)
{
    memset(fenced, 0, sizeof(fenced));
    pm_options *o = lane_options(boot_marks, 3);
    pm_cluster *c = spawn_with_lanes(o);
    PM_RUN_UNTIL(c, said[0][0] != 0, 60000);
    ck_assert_str_eq(said[0], "#marks lane=1 after=5");
    ck_assert_uint_eq(pm_test_slot_malformed(c, 0), 8);
    ck_assert_int_eq(fenced[0] + fenced[1] + fenced[2], 0);
    pm_test_finish(c, o);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--lane-worker") == 0) {
        pm_node *n;
        if (pm_node_join(&n) != 0)
            return 100;
        return boot_order(n, NULL);
    }
    flag = mmap(NULL, sizeof(*flag), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (flag == MAP_FAILED)
        return 99;
    unm = mmap(NULL, sizeof(*unm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (unm == MAP_FAILED)
        return 99;
    ssize_t k = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
    if (k <= 0)
        return 99;
    self_exe[k] = '\0';
    Suite *s = suite_create("lanemesh");
    PM_ADD_LOOP_TEST(s, test_lane_order, 0, MODE_COUNT, 60);
    PM_ADD_TEST(s, test_lanes_off, 60);
    PM_ADD_TEST(s, test_lanes_off_process_group, 60);
    PM_ADD_TEST(s, test_lane_peer_crash, 60);
    PM_ADD_TEST(s, test_lane_identity, 60);
    PM_ADD_TEST(s, test_lane_bound, 90);
    PM_ADD_TEST(s, test_lane_flood_beside, 90);
    PM_ADD_TEST(s, test_lane_turns, 90);
    PM_ADD_TEST(s, test_lane_nothing_after_stop, 120);
    PM_ADD_TEST(s, test_lane_doorbell_filled, 90);
    PM_ADD_TEST(s, test_lane_large_replies, 90);
    PM_ADD_TEST(s, test_lane_reply_never_waits, 120);
    PM_ADD_TEST(s, test_lane_wake_dead_peer, 90);
    PM_ADD_TEST(s, test_lane_sender_only, 90);
    PM_ADD_TEST(s, test_lane_switch_bounded, 90);
    PM_ADD_TEST(s, test_forward_as_request, 60);
    PM_ADD_TEST(s, test_lane_sender_restart, 120);
    PM_ADD_TEST(s, test_lane_bell_hangup, 120);
    PM_ADD_TEST(s, test_lane_flipped_words, 120);
    PM_ADD_TEST(s, test_lane_bell_bounded, 120);
    PM_ADD_TEST(s, test_lane_marker_behind_other_wakeup, 120);
    PM_ADD_TEST(s, test_lane_sender_after_lane_receive, 120);
    PM_ADD_TEST(s, test_lane_request_unmarked, 120);
    PM_ADD_TEST(s, test_lane_marker_each_field, 90);
    return pm_test_main(s);
}
