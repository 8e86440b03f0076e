/* SPDX-License-Identifier: MIT */
/* check_peer.c - peer links: routing by host (the host table, remote addresses), and the link itself. */
#include "helpers.h"

#include <sodium.h>
#include <stdatomic.h>

#include "base/internal.h"
#include "base/address.h"
#include "base/le.h"
#include "peer/peer.h"
#include "hooks.h"
#include "failalloc.h" /* malloc and its siblings, failing on demand */

/* Routing with peer links: the host table turns names into the indices
 * frames carry, and back. */
/* Frames into one FRAMES record the way the mesh sends them: staged, then
 * the stage sealed (*taken: the frames staged). */
static int send_frames(pm__pconn *c, const struct iovec *v, size_t n, size_t *taken)
{
    *taken = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = pm__pconn_stage(c, v[i].iov_base, v[i].iov_len);
        if (rc < 0)
            return rc;
        (*taken)++;
    }
    return pm__pconn_flush_stage(c);
}

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

/* ---- the link protocol, two state machines wired back to back ---------- */

static const unsigned char secret1[32] = {1, 2, 3};
static const unsigned char secret2[32] = {4, 5, 6};

typedef struct side {
    pm__keyring *kr;
    pm__pconn_cfg cfg;
    pm__pconn c;
    int up;
    int dead;
    size_t nframes;
    unsigned char last[128];
    size_t last_len;
    uint32_t next_seq;  /* the next "SEQ:" frame's number expected */
    int disorder;       /* a "SEQ:" frame came out of order */
} side;

static void got_frame(void *arg, const unsigned char *f, size_t len)
{
    side *s = arg;
    s->nframes++;
    s->last_len = len < sizeof(s->last) ? len : sizeof(s->last);
    memcpy(s->last, f, s->last_len);
    if (len >= 8 && memcmp(f, "SEQ:", 4) == 0) {
        uint32_t q;
        memcpy(&q, f + 4, 4);
        if (q != s->next_seq)
            s->disorder = 1;
        s->next_seq = q + 1;
    }
}

/* A frame of len bytes (8..) numbered q. */
static void seq_frame(unsigned char *f, size_t len, uint32_t q)
{
    memset(f, (int)(q & 0xff), len);
    memcpy(f, "SEQ:", 4);
    memcpy(f + 4, &q, 4);
}

/* The system name every side says (test_bytewise changes it). */
static const char *side_system = "sys";

/* A side named host with the given secrets (NULL: insecure). */
static void side_init(side *s, const char *host, const unsigned char *sec_a,
                      const unsigned char *sec_b, int initiator)
{
    ck_assert_int_ge(sodium_init(), 0);
    memset(s, 0, sizeof(*s));
    ck_assert_int_eq(pm__keyring_new(&s->kr), 0);
    if (sec_a != NULL)
        ck_assert_int_eq(pm__keyring_add_secret(s->kr, sec_a), 0);
    if (sec_b != NULL)
        ck_assert_int_eq(pm__keyring_add_secret(s->kr, sec_b), 0);
    ck_assert_int_eq(pm__keyring_random_static(s->kr), 0);
    s->cfg.system = side_system;
    s->cfg.host = host;
    s->cfg.incarnation = initiator ? 1111 : 2222;
    s->cfg.idle_ms = 5000;
    s->cfg.keys = s->kr;
    ck_assert_int_eq(pm__pconn_init(&s->c, &s->cfg, initiator), 0);
    s->c.on_frame = got_frame;
    s->c.on_frame_arg = s;
}

static void side_free(side *s)
{
    pm__pconn_free(&s->c);
    pm__keyring_free(s->kr);
}

/* Moves what from has queued into to, event by event. */
static int move(side *from, side *to)
{
    size_t len, used;
    const unsigned char *p = pm__pconn_output(&from->c, &len);
    if (p == NULL || to->dead)
        return 0;
    size_t off = 0;
    while (off < len && !to->dead) {
        int ev = pm__pconn_input(&to->c, p + off, len - off, &used);
        off += used;
        if (ev == PM__PCE_UP)
            to->up = 1;
        if (ev == PM__PCE_DEAD)
            to->dead = 1;
    }
    pm__pconn_sent(&from->c, len);
    return 1;
}

static void pump(side *a, side *b)
{
    for (int i = 0; i < 20; i++)
        if (!move(a, b) && !move(b, a))
            break;
}

/* a and b through the handshake up to b's split, a's message 3 fed to b
 * alone: the HEARTBEAT a queued after it is dropped and its nonce given
 * back, so that the record the test seals with a's record state next is
 * the first b reads (as tests/pm-bad-peer.c does). */
static void to_first_record(side *a, side *b)
{
    side_init(a, "a", secret1, NULL, 1);
    side_init(b, "b", secret1, NULL, 0);
    ck_assert_int_eq(move(a, b), 1); /* preamble and message 1 */
    ck_assert_int_eq(move(b, a), 1); /* message 2: a answers with 3, then its HEARTBEAT */
    size_t len, used;
    const unsigned char *p = pm__pconn_output(&a->c, &len);
    ck_assert_ptr_nonnull(p);
    size_t third = 4 + pm__get32(p);
    ck_assert_uint_gt(len, third); /* the HEARTBEAT is queued after it */
    unsigned char msg3[512];
    ck_assert_uint_le(third, sizeof(msg3));
    memcpy(msg3, p, third);
    pm__pconn_sent(&a->c, len);
    ck_assert_int_eq(pm_test_rec_set_nonce(a->c.rec, 1, 0), 0);
    ck_assert_int_eq(pm__pconn_input(&b->c, msg3, third, &used), PM__PCE_NONE);
    ck_assert_uint_eq(used, third);
    ck_assert_int_eq(b->c.state, PM__PC_SPLIT);
}

/* A peer whose first record after message 3 is a FRAMES record (not the
 * HEARTBEAT procmesh sends first): the record brings the link up and is
 * held over PM__PCE_UP (the caller installs the link), its frames
 * delivered at the next input, once; the records after it each once too
 * (peer.c's mutant at `c->held &&` took the held record again at every
 * later input; check_hostnet's first-frames does the same over TCP). The
 * HEARTBEAT queued after message 3 is dropped and its nonce given back, as
 * tests/pm-bad-peer.c does. */
START_TEST(test_first_record_held_once)
{
    side a, b;
    size_t used;
    to_first_record(&a, &b);
    /* a is not up (it has read nothing of b's): its records are sealed
     * with its record state directly, each fed to b on its own. */
    struct iovec v[3] = {{"one", 3}, {"two!", 4}, {"three", 5}};
    int ev[3];
    for (int k = 0; k < 3; k++) {
        unsigned char rec[128];
        size_t taken = 0, n = 0;
        ck_assert_int_ge(pm_test_rec_seal_frames(a.c.rec, &v[k], 1, &taken, rec, sizeof(rec), &n), 0);
        ck_assert_uint_eq(taken, 1);
        ev[k] = pm__pconn_input(&b.c, rec, n, &used);
        ck_assert_uint_eq(used, n);
        if (k == 0)
            ck_assert_uint_eq(b.nframes, 0); /* held over PM__PCE_UP */
    }
    ck_assert_int_eq(ev[0], PM__PCE_UP);
    ck_assert_int_eq(ev[1], PM__PCE_NONE);
    ck_assert_int_eq(ev[2], PM__PCE_NONE);
    ck_assert_uint_eq(b.nframes, 3);
    ck_assert_mem_eq(b.last, "three", 5);
    ck_assert(!b.dead);
    side_free(&a);
    side_free(&b);
}
END_TEST

START_TEST(test_link_up_and_frames)
{
    side a, b;
    side_init(&a, "a", secret1, NULL, 1);
    side_init(&b, "b", secret2, secret1, 0); /* rotation: the responder holds both */
    pump(&a, &b);
    ck_assert_msg(a.up && b.up, "both sides up (a %d/%s, b %d/%s)", a.c.state,
                  pm__peer_fail_name(a.c.fail), b.c.state, pm__peer_fail_name(b.c.fail));
    ck_assert_str_eq(a.c.peer.host, "b");
    ck_assert_str_eq(b.c.peer.host, "a");
    ck_assert_uint_eq(a.c.peer.incarnation, 2222);
    ck_assert_uint_eq(b.c.peer.incarnation, 1111);
    ck_assert_uint_eq(b.c.peer.idle_ms, 5000);

    /* Frames both ways, batched. */
    struct iovec v[3] = {{"one", 3}, {"two!", 4}, {"three", 5}};
    size_t taken;
    ck_assert_int_eq(send_frames(&a.c, v, 3, &taken), 0);
    ck_assert_uint_eq(taken, 3);
    ck_assert_int_eq(send_frames(&b.c, v, 1, &taken), 0);
    pump(&a, &b);
    ck_assert_uint_eq(b.nframes, 3);
    ck_assert_uint_eq(b.last_len, 5);
    ck_assert_mem_eq(b.last, "three", 5);
    ck_assert_uint_eq(a.nframes, 1);
    ck_assert_uint_eq(a.c.frames_out, 3);

    /* An orderly close: the other side answers with its CLOSE and ends. */
    pm__pconn_close(&a.c, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
    pump(&a, &b);
    ck_assert(b.dead);
    ck_assert_int_eq(b.c.fail, PM__PF_CLOSED);
    ck_assert_int_eq(send_frames(&b.c, v, 1, &taken), -ENOTCONN);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* Two sides up with secret1. */
static void pair_up(side *a, side *b)
{
    side_init(a, "a", secret1, NULL, 1);
    side_init(b, "b", secret1, NULL, 0);
    pump(a, b);
    ck_assert_msg(a->up && b->up, "both sides up");
}

/* Linked, and what each side queued on the way (its first HEARTBEAT)
 * taken by the other: both output queues empty. */
static void pair_up_emptied(side *a, side *b)
{
    pair_up(a, b);
    pump(a, b);
}

/* A transport that hands over one byte at a time, and output taken one
 * byte at a time: every frame arrives whole and in order. A record not
 * complete yet is no error (peer.c: pm__rec_feed's 0), and output taken in
 * part keeps the rest (the cursor is reset only once all is taken). The
 * system name is one character, the shortest a preamble takes (the
 * mutants-auto sample of stop 40 found all three rules untested). */
START_TEST(test_bytewise)
{
    side a, b;
    side_system = "s";
    pair_up(&a, &b);
    unsigned char f[40];
    for (uint32_t q = 0; q < 5; q++) {
        seq_frame(f, sizeof(f), q);
        struct iovec v = {f, sizeof(f)};
        size_t taken;
        ck_assert_int_eq(send_frames(&a.c, &v, 1, &taken), 0);
        ck_assert_uint_eq(taken, 1);
    }
    size_t len, used, moved = 0;
    const unsigned char *p;
    while ((p = pm__pconn_output(&a.c, &len)) != NULL && len > 0) {
        ck_assert_int_ne(pm__pconn_input(&b.c, p, 1, &used), PM__PCE_DEAD);
        ck_assert_uint_eq(used, 1);
        pm__pconn_sent(&a.c, 1);
        moved++;
    }
    ck_assert_uint_gt(moved, 5 * sizeof(f));
    ck_assert_uint_eq(b.nframes, 5);
    ck_assert(!b.disorder);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* Batching: many frames staged in one turn share few records, arrive all
 * and in order; the stage is sealed mid-turn when its frame count or its
 * bytes run out. */
START_TEST(test_stage_batches)
{
    side a, b;
    pair_up(&a, &b);
    unsigned char f[64];
    for (uint32_t q = 0; q < 1000; q++) {
        seq_frame(f, sizeof(f), q);
        ck_assert_int_eq(pm__pconn_stage(&a.c, f, sizeof(f)), 0);
    }
    /* Three full stages of PM__PCONN_STAGE_FRAMES were sealed mid-turn. */
    ck_assert_uint_eq(a.c.frame_records_out, 1000 / PM__PCONN_STAGE_FRAMES);
    ck_assert_int_eq(pm__pconn_flush_stage(&a.c), 0);
    ck_assert_uint_eq(a.c.frame_records_out, (1000 + PM__PCONN_STAGE_FRAMES - 1) / PM__PCONN_STAGE_FRAMES);
    ck_assert_uint_eq(a.c.frames_out, 1000);
    ck_assert_int_eq(pm__pconn_flush_stage(&a.c), 0); /* nothing staged: no record */
    ck_assert_uint_eq(a.c.frame_records_out, 4);
    pump(&a, &b);
    ck_assert_uint_eq(b.nframes, 1000);
    ck_assert_msg(!b.disorder && b.next_seq == 1000, "1000 frames in order (next %u)", b.next_seq);

    /* Full by bytes: two frames near the largest size need two records. */
    static unsigned char big[PM__REC_MAX_FRAME];
    uint64_t recs = a.c.frame_records_out;
    seq_frame(big, 60000, 1000);
    ck_assert_int_eq(pm__pconn_stage(&a.c, big, 60000), 0);
    seq_frame(big, sizeof(big), 1001);
    ck_assert_int_eq(pm__pconn_stage(&a.c, big, sizeof(big)), 0);
    ck_assert_uint_eq(a.c.frame_records_out, recs + 1); /* the first, sealed mid-turn */
    ck_assert_int_eq(pm__pconn_flush_stage(&a.c), 0);
    pump(&a, &b);
    ck_assert_uint_eq(b.nframes, 1002);
    ck_assert_uint_eq(b.last_len, sizeof(b.last));
    ck_assert_msg(!b.disorder && b.next_seq == 1002, "large frames in order");

    /* Bad input is refused, nothing staged. */
    ck_assert_int_eq(pm__pconn_stage(&a.c, big, 0), -EINVAL);
    ck_assert_int_eq(pm__pconn_stage(&a.c, big, PM__REC_MAX_FRAME + 1), -EINVAL);
    ck_assert_uint_eq(a.c.stage_n, 0);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* A lone frame is one record of its own at the flush: it waits for no
 * company. */
START_TEST(test_stage_lone_frame)
{
    side a, b;
    pair_up(&a, &b);
    unsigned char f[64];
    seq_frame(f, sizeof(f), 0);
    ck_assert_int_eq(pm__pconn_stage(&a.c, f, sizeof(f)), 0);
    size_t len;
    ck_assert_ptr_null(pm__pconn_output(&a.c, &len)); /* staged, not sealed yet */
    ck_assert_int_eq(pm__pconn_flush_stage(&a.c), 0);
    ck_assert_ptr_nonnull(pm__pconn_output(&a.c, &len));
    ck_assert_uint_eq(len, pm__rec_wire_size(1 + 4 + sizeof(f)));
    pump(&a, &b);
    ck_assert_uint_eq(b.nframes, 1);
    ck_assert_uint_eq(a.c.frame_records_out, 1);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* The output queue full: a frame once taken is never lost (its record's
 * room was reserved), -EAGAIN refuses the rest; other records seal the
 * stage first and frames keep their order. */
START_TEST(test_stage_full_queue)
{
    side a, b;
    pair_up(&a, &b);
    static unsigned char f[8192];
    uint32_t q = 0;
    int rc = 0;
    for (; q < 10000; q++) {
        seq_frame(f, sizeof(f), q);
        if (q == 7)
            ck_assert_int_eq(pm__pconn_heartbeat(&a.c), 0); /* between staged frames */
        if ((rc = pm__pconn_stage(&a.c, f, sizeof(f))) != 0)
            break;
    }
    ck_assert_int_eq(rc, -EAGAIN);
    ck_assert_uint_gt(q, 8);
    ck_assert_uint_eq(a.c.stage_n, 0); /* what was staged is sealed */
    ck_assert_int_eq(pm__pconn_stage(&a.c, f, sizeof(f)), -EAGAIN); /* still no room */
    ck_assert_int_eq(pm__pconn_flush_stage(&a.c), 0);
    ck_assert_uint_eq(a.c.frames_out, q);
    pump(&a, &b); /* the queue drains: room again */
    ck_assert_int_eq(pm__pconn_stage(&a.c, f, sizeof(f)), 0);
    ck_assert_int_eq(pm__pconn_flush_stage(&a.c), 0);
    pump(&a, &b);
    ck_assert_uint_eq(b.nframes, q + 1);
    ck_assert_msg(!b.disorder && b.next_seq == q + 1, "%u frames in order (next %u)", q + 1, b.next_seq);
    ck_assert(!a.dead && !b.dead);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* A link ending with frames staged: an orderly close sends them before its
 * CLOSE; a dead link (truncation) drops them, as its queue. */
START_TEST(test_stage_link_ends)
{
    side a, b;
    pair_up(&a, &b);
    unsigned char f[64];
    for (uint32_t q = 0; q < 10; q++) {
        seq_frame(f, sizeof(f), q);
        ck_assert_int_eq(pm__pconn_stage(&a.c, f, sizeof(f)), 0);
    }
    pm__pconn_close(&a.c, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
    ck_assert_uint_eq(a.c.stage_n, 0);
    ck_assert_int_eq(pm__pconn_stage(&a.c, f, sizeof(f)), -ENOTCONN);
    pump(&a, &b);
    ck_assert(b.dead);
    ck_assert_int_eq(b.c.fail, PM__PF_CLOSED);
    ck_assert_uint_eq(b.nframes, 10);
    ck_assert(!b.disorder);
    side_free(&a);
    side_free(&b);

    pair_up(&a, &b);
    for (uint32_t q = 0; q < 10; q++) {
        seq_frame(f, sizeof(f), q);
        ck_assert_int_eq(pm__pconn_stage(&a.c, f, sizeof(f)), 0);
    }
    ck_assert_int_eq(pm__pconn_eof(&a.c), PM__PCE_DEAD);
    ck_assert_uint_eq(a.c.stage_n, 0);
    ck_assert_int_eq(pm__pconn_flush_stage(&a.c), 0); /* nothing left to seal */
    size_t len;
    ck_assert_ptr_null(pm__pconn_output(&a.c, &len));
    ck_assert_uint_eq(a.c.frames_out, 0);
    side_free(&a);
    side_free(&b);
}
END_TEST

START_TEST(test_insecure_link)
{
    side a, b;
    side_init(&a, "a", NULL, NULL, 1);
    side_init(&b, "b", NULL, NULL, 0);
    pump(&a, &b);
    ck_assert(a.up && b.up);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* Each mismatch the responder can see in the preamble: no reply at all. */
START_TEST(test_wrong_keys_refused)
{
    static const struct {
        const unsigned char *ia, *rb, *rc; /* initiator's secret; responder's two */
        int fail;
    } cases[] = {
        {secret1, secret2, NULL, PM__PF_KEY_ID},  /* another secret */
        {NULL, secret1, NULL, PM__PF_KEY_ID},     /* a downgrade to no secret */
        {secret1, NULL, NULL, PM__PF_KEY_ID},     /* a secret where none is held */
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        side a, b;
        side_init(&a, "a", cases[i].ia, NULL, 1);
        side_init(&b, "b", cases[i].rb, cases[i].rc, 0);
        pump(&a, &b);
        ck_assert_msg(b.dead && b.c.fail == cases[i].fail, "case %zu: %s", i,
                      pm__peer_fail_name(b.c.fail));
        size_t len;
        ck_assert_ptr_null(pm__pconn_output(&b.c, &len)); /* nothing answered */
        ck_assert(!a.up);
        side_free(&a);
        side_free(&b);
    }
}
END_TEST

/* Feeds bytes to a fresh responder; returns its state. */
static int respond_to(side *b, const void *bytes, size_t len)
{
    size_t used;
    int ev = pm__pconn_input(&b->c, bytes, len, &used);
    return ev;
}

START_TEST(test_hostile_preamble)
{
    side b;
    side_init(&b, "b", secret1, NULL, 0);
    ck_assert_int_eq(respond_to(&b, "GET / HTTP/1.1\r\n\r\n", 18), PM__PCE_DEAD);
    ck_assert_int_eq(b.c.fail, PM__PF_PREAMBLE);
    side_free(&b);

    /* Another magic, its version length valid: refused from the 7 bytes. */
    side_init(&b, "b", secret1, NULL, 0);
    ck_assert_int_eq(respond_to(&b, "XMLINK\x05", 7), PM__PCE_DEAD);
    ck_assert_int_eq(b.c.fail, PM__PF_PREAMBLE);
    side_free(&b);

    /* No session yet: nothing to rekey or beat on. */
    side_init(&b, "b", secret1, NULL, 0);
    ck_assert_int_eq(pm__pconn_rekey(&b.c), -ENOTCONN);
    ck_assert_int_eq(pm__pconn_heartbeat(&b.c), -ENOTCONN);
    side_free(&b);

    /* A version length over 32 is refused from the 7 bytes that carry it. */
    side_init(&b, "b", secret1, NULL, 0);
    ck_assert_int_eq(respond_to(&b, "PMLINK\xff", 7), PM__PCE_DEAD);
    ck_assert_int_eq(b.c.fail, PM__PF_PREAMBLE);
    side_free(&b);
    side_init(&b, "b", secret1, NULL, 0);
    ck_assert_int_eq(respond_to(&b, "PMLINK\x21", 7), PM__PCE_DEAD); /* 33: one past the longest */
    ck_assert_int_eq(b.c.fail, PM__PF_PREAMBLE);
    side_free(&b);
    side_init(&b, "b", secret1, NULL, 0);
    ck_assert_int_eq(respond_to(&b, "PMLINK\0", 7), PM__PCE_DEAD); /* version length 0 */
    ck_assert_int_eq(b.c.fail, PM__PF_PREAMBLE);
    side_free(&b);

    /* A system name length out of 1..63, all else valid: refused from its
     * byte, before the name it claims is read (not as another mesh). */
    unsigned char id[8], pre[PM__PEER_PREAMBLE_MAX];
    pm__peer_key_id(secret1, id);
    static const unsigned char bad_sn[] = {0, 64, 255};
    for (size_t i = 0; i < ARRAY_LEN(bad_sn); i++) {
        side_init(&b, "b", secret1, NULL, 0);
        (void)pm__peer_preamble("sys", id, pre);
        size_t v = pre[6];
        pre[7 + v] = bad_sn[i];
        ck_assert_int_eq(respond_to(&b, pre, 8 + v), PM__PCE_DEAD);
        ck_assert_msg(b.c.fail == PM__PF_PREAMBLE, "system name length %u: %s", bad_sn[i],
                      pm__peer_fail_name(b.c.fail));
        side_free(&b);
    }

    /* The longest system name allowed (63 bytes) is read whole and judged
     * as a name (another mesh's here), not refused as a malformed
     * preamble. */
    {
        char name63[64];
        memset(name63, 'n', 63);
        name63[63] = '\0';
        side_init(&b, "b", secret1, NULL, 0);
        size_t m = pm__peer_preamble(name63, id, pre);
        ck_assert_uint_gt(m, 0);
        ck_assert_uint_eq(pre[7 + pre[6]], 63);
        ck_assert_int_eq(respond_to(&b, pre, m), PM__PCE_DEAD);
        ck_assert_msg(b.c.fail == PM__PF_SYSTEM, "%s", pm__peer_fail_name(b.c.fail));
        side_free(&b);
    }

    /* A version of the longest length allowed (32 bytes), and of the
     * shortest (1), is read whole and judged as a version (unknown here),
     * not refused as a malformed preamble. */
    static const unsigned vlens[] = {32, 1};
    for (size_t i = 0; i < ARRAY_LEN(vlens); i++) {
        side_init(&b, "b", secret1, NULL, 0);
        size_t m = pm__peer_preamble("sys", id, pre), v = pre[6];
        unsigned char longv[PM__PEER_PREAMBLE_MAX + 32];
        memcpy(longv, pre, 6);
        longv[6] = (unsigned char)vlens[i];
        memset(longv + 7, 'x', vlens[i]);
        memcpy(longv + 7 + vlens[i], pre + 7 + v, m - 7 - v);
        ck_assert_int_eq(respond_to(&b, longv, m - v + vlens[i]), PM__PCE_DEAD);
        ck_assert_msg(b.c.fail == PM__PF_VERSION, "version of %u bytes: %s", vlens[i],
                      pm__peer_fail_name(b.c.fail));
        side_free(&b);
    }

    /* Our version cut by its last byte (a prefix of it, its length one
     * less): another version. */
    side_init(&b, "b", secret1, NULL, 0);
    {
        size_t m = pm__peer_preamble("sys", id, pre), v = pre[6];
        unsigned char cut[PM__PEER_PREAMBLE_MAX];
        memcpy(cut, pre, 7 + v - 1);
        cut[6] = (unsigned char)(v - 1);
        memcpy(cut + 7 + v - 1, pre + 7 + v, m - 7 - v);
        ck_assert_int_eq(respond_to(&b, cut, m - 1), PM__PCE_DEAD);
        ck_assert_msg(b.c.fail == PM__PF_VERSION, "version cut: %s", pm__peer_fail_name(b.c.fail));
    }
    side_free(&b);

    /* Each byte of the magic counts: the valid preamble with one of them
     * changed is refused from its first 7 bytes. */
    for (size_t k = 0; k < 6; k++) {
        side_init(&b, "b", secret1, NULL, 0);
        size_t m = pm__peer_preamble("sys", id, pre);
        pre[k] ^= 0x20;
        ck_assert_int_eq(respond_to(&b, pre, m), PM__PCE_DEAD);
        ck_assert_msg(b.c.fail == PM__PF_PREAMBLE, "magic byte %zu changed: %s", k, pm__peer_fail_name(b.c.fail));
        side_free(&b);
    }

    /* A valid preamble one byte at a time: no byte is judged before it
     * came (the magic's 6, then the version length: 7 before anything is
     * read of it), and the responder starts its handshake. */
    side_init(&b, "b", secret1, NULL, 0);
    {
        size_t m = pm__peer_preamble("sys", id, pre);
        for (size_t k = 0; k < m; k++)
            ck_assert_msg(respond_to(&b, pre + k, 1) != PM__PCE_DEAD, "byte %zu of the preamble: %s", k,
                          pm__peer_fail_name(b.c.fail));
        ck_assert_int_eq(b.c.state, PM__PC_HANDSHAKE);
    }
    side_free(&b);

    /* Another mesh's name, one row per way a name can differ from ours
     * ("sys"), each preamble valid otherwise: longer, a prefix of ours
     * (its bytes all match), as long but another name, ours and more. */
    static const char *const other_sys[] = {"other", "sy", "syt", "sysx", "s"};
    for (size_t i = 0; i < ARRAY_LEN(other_sys); i++) {
        side_init(&b, "b", secret1, NULL, 0);
        size_t m = pm__peer_preamble(other_sys[i], id, pre);
        ck_assert_uint_gt(m, 0);
        ck_assert_int_eq(respond_to(&b, pre, m), PM__PCE_DEAD);
        ck_assert_msg(b.c.fail == PM__PF_SYSTEM, "system \"%s\": %s", other_sys[i],
                      pm__peer_fail_name(b.c.fail));
        side_free(&b);
    }
    size_t n;

    side_init(&b, "b", secret1, NULL, 0);
    n = pm__peer_preamble("sys", id, pre);
    pre[7 + 14] = '2'; /* "procmesh-link/2" */
    ck_assert_int_eq(respond_to(&b, pre, n), PM__PCE_DEAD);
    ck_assert_int_eq(b.c.fail, PM__PF_VERSION);
    side_free(&b);

    /* A valid preamble, then a message length of 0xFFFFFFFF: refused from
     * its 4 bytes, nothing read or allocated for it. */
    side_init(&b, "b", secret1, NULL, 0);
    n = pm__peer_preamble("sys", id, pre);
    ck_assert_int_eq(respond_to(&b, pre, n), PM__PCE_NONE);
    ck_assert_int_eq(respond_to(&b, "\xff\xff\xff\xff", 4), PM__PCE_DEAD);
    ck_assert_int_eq(b.c.fail, PM__PF_HS_LENGTH);
    side_free(&b);

    /* A truncated handshake: the stream ends in message 1. */
    side_init(&b, "b", secret1, NULL, 0);
    ck_assert_int_eq(respond_to(&b, pre, n), PM__PCE_NONE);
    ck_assert_int_eq(respond_to(&b, "\x30\0\0\0abc", 7), PM__PCE_NONE);
    ck_assert_int_eq(pm__pconn_eof(&b.c), PM__PCE_DEAD);
    ck_assert_int_eq(b.c.fail, PM__PF_TRUNCATED);
    side_free(&b);
}
END_TEST

/* A bit flipped in message 2 (and one in a record once up) ends the link. */
START_TEST(test_tampered)
{
    side a, b;
    side_init(&a, "a", secret1, NULL, 1);
    side_init(&b, "b", secret1, NULL, 0);
    ck_assert(move(&a, &b)); /* preamble and message 1 */
    size_t len;
    unsigned char *p = (unsigned char *)pm__pconn_output(&b.c, &len);
    ck_assert_ptr_nonnull(p);
    p[len - 3] ^= 0x20; /* inside the encrypted hello */
    ck_assert(move(&b, &a));
    ck_assert(a.dead);
    ck_assert_int_eq(a.c.fail, PM__PF_HS_DECRYPT);
    side_free(&a);
    side_free(&b);

    side_init(&a, "a", secret1, NULL, 1);
    side_init(&b, "b", secret1, NULL, 0);
    pump(&a, &b);
    ck_assert(a.up && b.up);
    struct iovec v = {"frame", 5};
    size_t taken;
    ck_assert_int_eq(send_frames(&a.c, &v, 1, &taken), 0);
    p = (unsigned char *)pm__pconn_output(&a.c, &len);
    p[len - 1] ^= 1;
    move(&a, &b);
    ck_assert(b.dead);
    ck_assert_int_eq(b.c.fail, PM__PF_RECORD);
    ck_assert_uint_eq(b.nframes, 0);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* The CLOSE's reason reaches the other side, which records it as the
 * peer's (doc/protocol.md 6: a receiver accepts any value). */
START_TEST(test_close_reason)
{
    static const uint16_t reasons[] = {PM__REC_CLOSE_PROTOCOL, PM__REC_CLOSE_NONCE, PM__REC_CLOSE_TIMEOUT,
                                       7 /* unknown: "other" */, PM__REC_CLOSE_SHUTDOWN};
    for (size_t i = 0; i < ARRAY_LEN(reasons); i++) {
        side a, b;
        pair_up(&a, &b);
        pm__pconn_close(&a.c, reasons[i], PM__PF_LOCAL);
        pump(&a, &b);
        ck_assert(b.dead);
        ck_assert_int_eq(b.c.fail, PM__PF_CLOSED);
        ck_assert(b.c.close_received);
        ck_assert_msg(b.c.close_reason == reasons[i], "reason %u recorded as %u", reasons[i],
                      b.c.close_reason);
        side_free(&a);
        side_free(&b);
    }
}
END_TEST

/* The CLOSE a failing side sends names why (doc/protocol.md 6): the nonce
 * limit, sending or receiving, is reason 2 (NONCE); a record refused is
 * reason 1 (PROTOCOL). The other side reads the reason. */
START_TEST(test_close_codes)
{
    side a, b;
    unsigned char f[64];
    size_t taken;
    struct iovec v = {"frame", 5};

    /* Sending: a's nonces leave room for its CLOSE only (b's receiving
     * nonce in step): the staged frame cannot be sealed, CLOSE 2 goes. */
    pair_up(&a, &b);
    ck_assert_int_eq(pm_test_rec_set_nonce(a.c.rec, 1, PM__NOISE_NONCE_LIMIT - 1), 0);
    ck_assert_int_eq(pm_test_rec_set_nonce(b.c.rec, 0, PM__NOISE_NONCE_LIMIT - 1), 0);
    seq_frame(f, sizeof(f), 0);
    ck_assert_int_eq(pm__pconn_stage(&a.c, f, sizeof(f)), 0);
    ck_assert_int_eq(pm__pconn_flush_stage(&a.c), -EOVERFLOW);
    ck_assert_int_eq(a.c.state, PM__PC_DEAD);
    pump(&a, &b);
    ck_assert(b.dead);
    ck_assert_int_eq(b.c.fail, PM__PF_CLOSED);
    ck_assert_uint_eq(b.c.close_reason, PM__REC_CLOSE_NONCE);
    ck_assert_uint_eq(b.nframes, 0);
    side_free(&a);
    side_free(&b);

    /* The same through a control record: a PING seals the stage first
     * (frames keep their order), which fails at the limit: the PING is not
     * sent (-ENOTCONN) and the CLOSE is a's last record. */
    pair_up(&a, &b);
    ck_assert_int_eq(pm_test_rec_set_nonce(a.c.rec, 1, PM__NOISE_NONCE_LIMIT - 1), 0);
    ck_assert_int_eq(pm_test_rec_set_nonce(b.c.rec, 0, PM__NOISE_NONCE_LIMIT - 1), 0);
    ck_assert_int_eq(pm__pconn_stage(&a.c, f, sizeof(f)), 0);
    ck_assert_int_eq(pm__pconn_ping(&a.c, 9), -ENOTCONN);
    ck_assert_int_eq(a.c.state, PM__PC_DEAD);
    pump(&a, &b);
    ck_assert(b.dead);
    ck_assert_uint_eq(b.c.close_reason, PM__REC_CLOSE_NONCE);
    ck_assert_uint_eq(b.nframes, 0);
    side_free(&a);
    side_free(&b);

    /* Receiving: b's next nonce is at the limit when a's record comes. */
    pair_up(&a, &b);
    ck_assert_int_eq(pm_test_rec_set_nonce(b.c.rec, 0, PM__NOISE_NONCE_LIMIT), 0);
    ck_assert_int_eq(send_frames(&a.c, &v, 1, &taken), 0);
    ck_assert(move(&a, &b));
    ck_assert(b.dead);
    ck_assert_int_eq(b.c.fail, PM__PF_RECORD);
    ck_assert_int_eq(b.c.err, -EOVERFLOW);
    ck_assert_uint_eq(b.nframes, 0);
    ck_assert(move(&b, &a));
    ck_assert(a.dead && a.c.close_received);
    ck_assert_uint_eq(a.c.close_reason, PM__REC_CLOSE_NONCE);
    side_free(&a);
    side_free(&b);

    /* A record length above the largest, refused on its 4 bytes: CLOSE 1. */
    pair_up(&a, &b);
    ck_assert_int_eq(respond_to(&b, "\xff\xff\xff\xff", 4), PM__PCE_DEAD);
    ck_assert_int_eq(b.c.fail, PM__PF_RECORD);
    ck_assert(move(&b, &a));
    ck_assert(a.dead && a.c.close_received);
    ck_assert_uint_eq(a.c.close_reason, PM__REC_CLOSE_PROTOCOL);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* A heartbeat or a PING that finds the output queue full is no error: the
 * records queued prove liveness as well (doc/protocol.md 6). Heartbeats
 * until one no longer fits: each returns 0; the link stays up. */
START_TEST(test_control_full_queue)
{
    side a, b;
    pair_up(&a, &b);
    size_t bound = PM__PCONN_OUT_CAP / (PM__REC_HDR + PM__REC_MIN_CT) + 2;
    int full = 0;
    for (size_t i = 0; i < bound && !full; i++) {
        size_t before = a.c.out_len - a.c.out_off;
        ck_assert_int_eq(pm__pconn_heartbeat(&a.c), 0);
        full = a.c.out_len - a.c.out_off == before;
    }
    ck_assert_msg(full, "the output queue never filled");
    ck_assert_int_eq(pm__pconn_ping(&a.c, 42), 0);
    /* A REKEY must go out (the key change is at the record): the caller
     * is told to try again, nothing else changes. */
    uint64_t rekeys = a.c.rekeys_out;
    ck_assert_int_eq(pm__pconn_rekey(&a.c), -EAGAIN);
    ck_assert_uint_eq(a.c.rekeys_out, rekeys);
    ck_assert_int_eq(a.c.state, PM__PC_UP);
    pump(&a, &b);
    ck_assert(!a.dead && !b.dead);
    side_free(&a);
    side_free(&b);
}
END_TEST

START_TEST(test_self_and_pins)
{
    side a, b;
    side_init(&a, "a", secret1, NULL, 1);
    side_init(&b, "a", secret1, NULL, 0); /* our own name */
    pump(&a, &b);
    ck_assert(a.dead && !b.up);
    ck_assert_int_eq(a.c.fail, PM__PF_SELF);
    side_free(&a);
    side_free(&b);

    /* Pinning: the responder's key is pinned for "b" only under another
     * key: the initiator refuses it after message 2. */
    pm__pins pins;
    char text[128], b64[PM__PEER_KEY_B64_LEN + 1];
    unsigned char other[32];
    memset(other, 9, sizeof(other));
    pm__peer_key_b64(other, b64);
    snprintf(text, sizeof(text), "b %s\n", b64);
    char why[128];
    ck_assert_int_eq(pm__pins_parse(text, strlen(text), &pins, why, sizeof(why)), 0);
    side_init(&a, "a", secret1, NULL, 1);
    a.cfg.pins = &pins;
    side_init(&b, "b", secret1, NULL, 0);
    pump(&a, &b);
    ck_assert(a.dead && !b.up);
    ck_assert_int_eq(a.c.fail, PM__PF_PIN);
    side_free(&a);
    side_free(&b);
    pm__pins_free(&pins);
}
END_TEST

/* doc/protocol.md 9, test vectors: the preamble for "procmesh-link/1",
 * system "procmesh" and the key id of the secret 01 .. 20 is the 39 bytes
 * given there; a HEARTBEAT is 21 bytes on the wire (11 00 00 00 and 17 of
 * ciphertext), a FRAMES record with one 5-byte frame 30 (1a 00 00 00 ...),
 * as two real links queue them. */
START_TEST(test_section9_vectors)
{
    ck_assert_int_ge(sodium_init(), 0);
    unsigned char secret[32], id[8], pre[PM__PEER_PREAMBLE_MAX];
    for (int i = 0; i < 32; i++)
        secret[i] = (unsigned char)(i + 1);
    pm__peer_key_id(secret, id);
    size_t n = pm__peer_preamble("procmesh", id, pre);
    ck_assert_uint_eq(n, 39);
    char got[2 * 39 + 1];
    for (size_t i = 0; i < n; i++)
        snprintf(got + 2 * i, 3, "%02x", pre[i]);
    ck_assert_str_eq(got, "504d4c494e4b0f70726f636d6573682d6c696e6b2f310870726f636d657368c84e02fb1ac295b0");

    side a, b;
    pair_up(&a, &b);
    size_t len;
    ck_assert_ptr_null(pm__pconn_output(&a.c, &len)); /* all sent */
    ck_assert_int_eq(pm__pconn_heartbeat(&a.c), 0);
    const unsigned char *p = pm__pconn_output(&a.c, &len);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(len, 21);
    ck_assert_mem_eq(p, "\x11\0\0\0", 4);
    pump(&a, &b);
    ck_assert_int_eq(pm__pconn_stage(&a.c, "hello", 5), 0);
    ck_assert_int_eq(pm__pconn_flush_stage(&a.c), 0);
    p = pm__pconn_output(&a.c, &len);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(len, 30);
    ck_assert_mem_eq(p, "\x1a\0\0\0", 4);
    pump(&a, &b);
    ck_assert_mem_eq(b.last, "hello", 5);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* doc/protocol.md 6, HEARTBEAT: a PING is answered with a PONG of its
 * stamp, but not once the receiver has sent its CLOSE ("a PING that crossed
 * the CLOSE goes unanswered"): a lingers after its CLOSE, b's PING comes
 * in, and nothing follows a's CLOSE. */
START_TEST(test_ping_after_close_unanswered)
{
    side a, b;
    pair_up(&a, &b);
    ck_assert_int_eq(pm__pconn_ping(&b.c, 41), 0);
    pump(&a, &b);
    ck_assert_uint_eq(b.c.pongs, 1);
    ck_assert_uint_eq(b.c.pong_stamp, 41);
    pm__pconn_close(&a.c, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
    size_t alen0 = 0, alen1 = 0, blen = 0;
    ck_assert_ptr_nonnull(pm__pconn_output(&a.c, &alen0)); /* its CLOSE */
    ck_assert_int_eq(pm__pconn_ping(&b.c, 42), 0);
    const unsigned char *bp = pm__pconn_output(&b.c, &blen);
    ck_assert_ptr_nonnull(bp);
    ck_assert_int_eq(pm__pconn_linger(&a.c, bp, blen), 0); /* b's CLOSE not yet */
    pm__pconn_sent(&b.c, blen);
    ck_assert_ptr_nonnull(pm__pconn_output(&a.c, &alen1));
    ck_assert_uint_eq(alen1, alen0); /* no PONG after the CLOSE */
    ck_assert(move(&a, &b));
    ck_assert(b.dead);
    ck_assert_int_eq(b.c.fail, PM__PF_CLOSED);
    ck_assert_uint_eq(b.c.pongs, 1);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* Feeds a handshake message's 4 length bytes (len) to s: its event. */
static int feed_len(side *s, uint32_t len)
{
    unsigned char b[4];
    b[0] = (unsigned char)len;
    b[1] = (unsigned char)(len >> 8);
    b[2] = (unsigned char)(len >> 16);
    b[3] = (unsigned char)(len >> 24);
    size_t used;
    return pm__pconn_input(&s->c, b, 4, &used);
}

/* doc/protocol.md 4 and 8: "a length other than the table's, or above
 * 512: close before reading the message". Each message's bounds, one past
 * each edge, judged from its 4 length bytes alone (the reader is dead at
 * once, nothing of the message sent); the edges themselves wait for the
 * message. Message 1 is exactly 48 bytes (32 without a secret), messages
 * 2 and 3 at least 96 and 64 plus the shortest hello (20), at most 512. A
 * message 1 with a payload is longer than 48: it is refused by this
 * length (handshake_length) before a byte of it is read. */
START_TEST(test_handshake_lengths_each)
{
    unsigned char id[8], zero[8] = {0}, pre[PM__PEER_PREAMBLE_MAX];
    pm__peer_key_id(secret1, id);
    static const struct {
        int psk;
        uint32_t len;
        int dead;
    } m1[] = {{1, 47, 1}, {1, 49, 1}, {1, 48, 0}, {0, 31, 1}, {0, 33, 1}, {0, 32, 0}};
    for (size_t i = 0; i < ARRAY_LEN(m1); i++) {
        side b;
        side_init(&b, "b", m1[i].psk ? secret1 : NULL, NULL, 0);
        size_t n = pm__peer_preamble("sys", m1[i].psk ? id : zero, pre);
        ck_assert_int_eq(respond_to(&b, pre, n), PM__PCE_NONE);
        int ev = feed_len(&b, m1[i].len);
        ck_assert_msg(m1[i].dead ? ev == PM__PCE_DEAD && b.c.fail == PM__PF_HS_LENGTH : ev == PM__PCE_NONE,
                      "message 1 (%s) of %u bytes: event %d, fail %s", m1[i].psk ? "psk" : "no secret",
                      m1[i].len, ev, pm__peer_fail_name(b.c.fail));
        if (m1[i].dead) /* the error the mesh logs beside the reason */
            ck_assert_int_eq(b.c.err, -EBADMSG);
        size_t len;
        ck_assert_ptr_null(pm__pconn_output(&b.c, &len)); /* no message 2 */
        side_free(&b);
    }
    static const struct {
        uint32_t len;
        int dead;
    } m2[] = {{96 + PM__PEER_HELLO_MIN - 1, 1}, {PM__PEER_HS_MSG_MAX + 1, 1}, {0xffffffffu, 1},
              {96 + PM__PEER_HELLO_MIN, 0}, {PM__PEER_HS_MSG_MAX, 0}};
    for (size_t i = 0; i < ARRAY_LEN(m2); i++) {
        side a;
        side_init(&a, "a", secret1, NULL, 1); /* its preamble and message 1 are queued */
        int ev = feed_len(&a, m2[i].len);
        ck_assert_msg(m2[i].dead ? ev == PM__PCE_DEAD && a.c.fail == PM__PF_HS_LENGTH : ev == PM__PCE_NONE,
                      "message 2 of %u bytes: event %d, fail %s", m2[i].len, ev,
                      pm__peer_fail_name(a.c.fail));
        side_free(&a);
    }
    static const struct {
        uint32_t len;
        int dead;
    } m3[] = {{64 + PM__PEER_HELLO_MIN - 1, 1}, {PM__PEER_HS_MSG_MAX + 1, 1}, {64 + PM__PEER_HELLO_MIN, 0},
              {PM__PEER_HS_MSG_MAX, 0}};
    for (size_t i = 0; i < ARRAY_LEN(m3); i++) {
        side a, b;
        side_init(&a, "a", secret1, NULL, 1);
        side_init(&b, "b", secret1, NULL, 0);
        ck_assert(move(&a, &b)); /* preamble and message 1: b answers with message 2 */
        ck_assert(!b.dead);
        int ev = feed_len(&b, m3[i].len);
        ck_assert_msg(m3[i].dead ? ev == PM__PCE_DEAD && b.c.fail == PM__PF_HS_LENGTH : ev == PM__PCE_NONE,
                      "message 3 of %u bytes: event %d, fail %s", m3[i].len, ev,
                      pm__peer_fail_name(b.c.fail));
        ck_assert(!b.up);
        side_free(&a);
        side_free(&b);
    }

    /* A length is judged once its fourth byte is in, not from three (the
     * reader's buffer still holds the preamble's bytes there): the
     * initiator's real message 1, its length cut after 3 bytes, the rest
     * in one later input, is answered with message 2; and behind a length
     * whose low bytes say 48 and whose top byte says 2^24 more, the top
     * byte arriving with the message, refused. */
    for (int top = 0; top < 2; top++) {
        side a, b;
        side_init(&a, "a", secret1, NULL, 1);
        side_init(&b, "b", secret1, NULL, 0);
        size_t len, n = pm__peer_preamble("sys", id, pre);
        const unsigned char *out = pm__pconn_output(&a.c, &len);
        ck_assert_ptr_nonnull(out);
        ck_assert_uint_eq(len, n + 4 + 48);
        unsigned char wire[PM__PEER_PREAMBLE_MAX + 4 + 48];
        memcpy(wire, out, len);
        ck_assert_uint_eq(wire[n], 48);
        wire[n + 3] = (unsigned char)top;
        size_t wlen = len;
        ck_assert_int_eq(respond_to(&b, wire, n + 3), PM__PCE_NONE);
        int ev = respond_to(&b, wire + n + 3, wlen - n - 3);
        if (top) {
            ck_assert_int_eq(ev, PM__PCE_DEAD);
            ck_assert_msg(b.c.fail == PM__PF_HS_LENGTH, "%s", pm__peer_fail_name(b.c.fail));
            ck_assert_ptr_null(pm__pconn_output(&b.c, &len)); /* no message 2 */
        } else {
            ck_assert_msg(ev == PM__PCE_NONE, "length cut after 3 bytes: %s", pm__peer_fail_name(b.c.fail));
            ck_assert_ptr_nonnull(pm__pconn_output(&b.c, &len)); /* message 2 */
        }
        side_free(&a);
        side_free(&b);
    }
}
END_TEST

/* doc/protocol.md 4, Payloads: "A hello with another format, another
 * length, an invalid host name, a zero incarnation or idle_ms out of range
 * is a protocol error (the reader closes)"; unknown capability bits are
 * ignored. Each condition alone, through a real handshake of the two state
 * machines: the sender's hello is built from its configuration, changed
 * after pm__pconn_init (which refuses such a configuration) so that the
 * bad value goes on the wire. Both directions: the initiator's hello
 * (message 3, judged by the responder) and the responder's (message 2,
 * judged by the initiator, which then never writes message 3). The edges
 * of the range link. A hello too short (an empty host name) is caught one
 * step earlier, by its message's length (handshake_length). */
static const char host63[] = "h23456789012345678901234567890123456789012345678901234567890123";

static void hello_case(int i, int from_initiator, int want_up)
{
    side a, b;
    side_init(&a, "a", secret1, NULL, 1);
    side_init(&b, "b", secret1, NULL, 0);
    side *s = from_initiator ? &a : &b, *judge = from_initiator ? &b : &a;
    switch (i) {
    case 0: s->cfg.incarnation = 0; break;
    case 1: s->cfg.idle_ms = PM__PEER_IDLE_MIN_MS - 1; break;
    case 2: s->cfg.idle_ms = PM__PEER_IDLE_MAX_MS + 1; break;
    case 3: s->cfg.host = "a b"; break;
    case 4: s->cfg.host = ""; break;
    case 5: s->cfg.idle_ms = PM__PEER_IDLE_MIN_MS; break;
    case 6: s->cfg.idle_ms = PM__PEER_IDLE_MAX_MS; break;
    case 7: s->cfg.host = host63; break;
    case 8: s->c.caps = 0xffffffffu; break;
    }
    pump(&a, &b);
    if (want_up) {
        ck_assert_msg(a.up && b.up, "case %d from the %s: not linked (a %d, b %d)", i,
                      from_initiator ? "initiator" : "responder", a.c.fail, b.c.fail);
        if (i == 7)
            ck_assert_str_eq(judge->c.peer.host, host63);
        if (i == 8)
            ck_assert_uint_eq(judge->c.peer.capabilities, 0xffffffffu);
        if (i == 5 || i == 6)
            ck_assert_uint_eq(judge->c.peer.idle_ms, s->cfg.idle_ms);
    } else {
        /* An empty host name makes the hello 19 bytes, the message below
         * its least length: refused by that length, before decryption. */
        int want = i == 4 ? PM__PF_HS_LENGTH : PM__PF_HELLO;
        ck_assert_msg(judge->dead && judge->c.fail == want,
                      "case %d from the %s: the reader %s (fail %d)", i,
                      from_initiator ? "initiator" : "responder", judge->dead ? "closed" : "did not close",
                      judge->c.fail);
        ck_assert(!judge->up);
        if (!from_initiator) /* the initiator closed without message 3 */
            ck_assert(!b.up);
    }
    side_free(&a);
    side_free(&b);
}

START_TEST(test_hello_each_condition)
{
    for (int from_initiator = 0; from_initiator < 2; from_initiator++) {
        for (int i = 0; i <= 4; i++)
            hello_case(i, from_initiator, 0);
        for (int i = 5; i <= 8; i++)
            hello_case(i, from_initiator, 1);
    }
}
END_TEST

/* The initiator a's message 3 with the hello bytes h (hlen) in place of
 * its own: a's own handshake state reads b's message 2 and writes message
 * 3 with that payload, so b judges bytes no configuration could make (a
 * hello of another format, a host length that disagrees with the
 * message). b's last event. */
static int crafted_hello_to(side *a, side *b, const unsigned char *h, size_t hlen)
{
    ck_assert(move(a, b)); /* a's preamble and message 1: b answers with message 2 */
    ck_assert(!b->dead);
    size_t len;
    const unsigned char *p = pm__pconn_output(&b->c, &len);
    ck_assert_ptr_nonnull(p);
    uint32_t mlen = pm__get32(p);
    ck_assert_uint_eq(len, 4 + (size_t)mlen);
    unsigned char payload[PM__PEER_HS_MSG_MAX];
    size_t plen = 0;
    ck_assert_int_eq(pm__noise_read_message(a->c.hs, p + 4, mlen, payload, sizeof(payload), &plen), 0);
    pm__pconn_sent(&b->c, len);
    unsigned char m3[4 + PM__PEER_HS_MSG_MAX];
    size_t n = 0;
    ck_assert_int_eq(pm__noise_write_message(a->c.hs, h, hlen, m3 + 4, PM__PEER_HS_MSG_MAX, &n), 0);
    pm__put32(m3, (uint32_t)n);
    size_t off = 0, used;
    int ev = PM__PCE_NONE;
    while (off < 4 + n && ev != PM__PCE_DEAD) {
        ev = pm__pconn_input(&b->c, m3 + off, 4 + n - off, &used);
        off += used;
        if (ev == PM__PCE_UP)
            b->up = 1;
        if (used == 0)
            break;
    }
    return ev;
}

/* doc/protocol.md 4, Payloads, the hello's fields no configuration can
 * put on the wire, each alone in a hello otherwise valid (row 0, which
 * links): its format byte, its host length against the message's, its
 * max_version (0 has no version in common; a later one is met at 1).
 * Judged by the responder, through the real handshake (a valid hello
 * splits: the link is up at the initiator's first record). */
START_TEST(test_hello_wire_fields)
{
    static const struct {
        const char *what;
        int at;          /* the byte changed, -1: none */
        int value;
        int cut;         /* bytes taken off the end */
        int want;        /* PM__PF_NONE: linked */
    } rows[] = {
        {"valid", -1, 0, 0, PM__PF_NONE},
        {"format 2", 0, 2, 0, PM__PF_HELLO},
        {"format 0", 0, 0, 0, PM__PF_HELLO},
        {"host length one past the message", 18, 6, 0, PM__PF_HELLO},
        {"host length one short of the message", 18, 4, 0, PM__PF_HELLO},
        {"host cut by a byte, its length kept", -1, 0, 1, PM__PF_HELLO},
        {"max_version 0", 1, 0, 0, PM__PF_VERSION},
        {"max_version 2", 1, 2, 0, PM__PF_NONE},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        side a, b;
        side_init(&a, "alpha", secret1, NULL, 1);
        side_init(&b, "b", secret1, NULL, 0);
        pm__peer_hello h;
        memset(&h, 0, sizeof(h));
        h.max_version = 1;
        h.incarnation = 1111;
        h.idle_ms = 5000;
        snprintf(h.host, sizeof(h.host), "alpha"); /* 5 bytes: [18] is 5 */
        unsigned char bytes[19 + 64];
        size_t n = pm__peer_hello_encode(&h, bytes, sizeof(bytes));
        ck_assert_uint_eq(n, 24);
        if (rows[i].at >= 0)
            bytes[rows[i].at] = (unsigned char)rows[i].value;
        n -= (size_t)rows[i].cut;
        int ev = crafted_hello_to(&a, &b, bytes, n);
        if (rows[i].want == PM__PF_NONE) /* split: up at the initiator's first record */
            ck_assert_msg(ev != PM__PCE_DEAD && b.c.state == PM__PC_SPLIT && b.c.fail == PM__PF_NONE,
                          "%s: not linked (event %d, fail %s)", rows[i].what, ev, pm__peer_fail_name(b.c.fail));
        else
            ck_assert_msg(ev == PM__PCE_DEAD && b.c.fail == rows[i].want, "%s: event %d, fail %s", rows[i].what,
                          ev, pm__peer_fail_name(b.c.fail));
        side_free(&a);
        side_free(&b);
    }
}
END_TEST

/* The hello's codec at its edges, where the handshake's length table
 * already refuses what reaches it (pm__peer_hello_decode is also the
 * codec a tool or a fuzzer calls): a buffer of each length below the
 * shortest hello, allocated to its size so that a read past it is seen
 * (the sanitizer build); the encoder's room, one byte short and exact. */
START_TEST(test_hello_codec_edges)
{
    pm__peer_hello h, out;
    memset(&h, 0, sizeof(h));
    h.max_version = 1;
    h.incarnation = 7;
    h.idle_ms = 5000;
    snprintf(h.host, sizeof(h.host), "x");
    unsigned char full[PM__PEER_HELLO_MIN];
    ck_assert_uint_eq(pm__peer_hello_encode(&h, full, PM__PEER_HELLO_MIN - 1), 0);
    ck_assert_uint_eq(pm__peer_hello_encode(&h, full, PM__PEER_HELLO_MIN), PM__PEER_HELLO_MIN);
    ck_assert_int_eq(pm__peer_hello_decode(full, PM__PEER_HELLO_MIN, &out), 0);
    ck_assert_str_eq(out.host, "x");
    for (size_t len = 0; len < PM__PEER_HELLO_MIN; len++) {
        unsigned char *p = malloc(len > 0 ? len : 1);
        ck_assert_ptr_nonnull(p);
        memcpy(p, full, len);
        if (len > 18)
            p[18] = (unsigned char)(len - 19); /* a host length that agrees */
        ck_assert_msg(pm__peer_hello_decode(p, len, &out) == -EBADMSG, "a hello of %zu bytes", len);
        free(p);
    }
}
END_TEST

/* The output queue takes a record that fills it to the CLOSE's room
 * (PM__PCONN_CLOSE_ROOM, which only a CLOSE takes), and nothing past it
 * (peer.c out_room: room for exactly n bytes is room):
 * FRAMES records sized so that exactly one heartbeat's record is left,
 * then that heartbeat (queued), then another (no room: dropped, 0), and
 * the peer reads it all. */
static unsigned char big_frame[PM__REC_MAX_FRAME];

/* The room left in s's output queue. */
static size_t out_left(const side *s)
{
    return PM__PCONN_OUT_CAP - (s->c.out_len - s->c.out_off);
}

/* Fills s's output queue with FRAMES records of one frame each, sized so
 * that exactly leave bytes of room are left (at least the CLOSE's room,
 * which no FRAMES record may take). The number of records. */
static size_t fill_leaving(side *s, size_t leave)
{
    const size_t least = pm__rec_wire_size(1 + PM__REC_FRAME_HDR + 1);
    memset(big_frame, 7, sizeof(big_frame));
    size_t records = 0;
    for (;;) {
        ck_assert_uint_ge(out_left(s), leave);
        size_t want = out_left(s) - leave;
        if (want == 0)
            return records;
        size_t len = want < PM__REC_MAX_FRAME ? want : PM__REC_MAX_FRAME;
        for (; len > 0; len--) {
            size_t w = pm__rec_wire_size(1 + PM__REC_FRAME_HDR + len);
            if (w <= want && (w == want || want - w >= least))
                break;
        }
        ck_assert_uint_gt(len, 0);
        ck_assert_int_eq(pm__pconn_stage(&s->c, big_frame, len), 0);
        ck_assert_int_eq(pm__pconn_flush_stage(&s->c), 0);
        ck_assert_uint_lt(++records, 64);
    }
}

START_TEST(test_output_queue_exact_fill)
{
    side a, b;
    pair_up_emptied(&a, &b);
    const size_t hb = PM__REC_HDR + PM__REC_MIN_CT; /* a heartbeat's record */
    /* Full means full but for the CLOSE's room, which only a CLOSE takes. */
    size_t records = fill_leaving(&a, hb + PM__PCONN_CLOSE_ROOM);
    size_t before = a.c.out_len - a.c.out_off;
    ck_assert_int_eq(pm__pconn_heartbeat(&a.c), 0);
    ck_assert_msg(a.c.out_len - a.c.out_off == before + hb,
                  "the heartbeat that fills the queue exactly was not queued (%zu of %zu)",
                  a.c.out_len - a.c.out_off, (size_t)PM__PCONN_OUT_CAP);
    ck_assert_int_eq(pm__pconn_heartbeat(&a.c), 0); /* full: dropped, not an error */
    ck_assert_uint_eq(out_left(&a), PM__PCONN_CLOSE_ROOM);
    pump(&a, &b);
    ck_assert(!a.dead && !b.dead);
    ck_assert_uint_eq(b.nframes, records);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* Output taken in part (a short write), then more queued: what was not
 * taken moves to the front first (peer.c out_room) and the peer reads the
 * rest of the first record, then the second: two pings answered. */
START_TEST(test_output_partial_then_more)
{
    side a, b;
    pair_up_emptied(&a, &b);
    ck_assert_int_eq(pm__pconn_ping(&b.c, 1), 0);
    size_t len, used;
    const unsigned char *p = pm__pconn_output(&b.c, &len);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_gt(len, 3);
    ck_assert_int_eq(pm__pconn_input(&a.c, p, 3, &used), PM__PCE_NONE);
    ck_assert_uint_eq(used, 3);
    pm__pconn_sent(&b.c, 3);
    ck_assert_int_eq(pm__pconn_ping(&b.c, 2), 0);
    ck_assert_uint_eq(b.c.out_off, 0);
    p = pm__pconn_output(&b.c, &len);
    ck_assert_uint_eq(len, 2 * (PM__REC_HDR + PM__REC_MIN_CT + PM__REC_ECHO_BODY) - 3);
    ck_assert(move(&b, &a));
    ck_assert(!a.dead);
    ck_assert(move(&a, &b));
    ck_assert(!b.dead);
    ck_assert_uint_eq(b.c.pongs, 2);
    ck_assert_uint_eq(b.c.pong_stamp, 2);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* pm__pconn_stage's rules (peer.c), each at its edge:
 * - a frame must be bytes: NULL, empty or past PM__REC_MAX_FRAME, -EINVAL;
 * - frames share a record up to the stage's capacity, exactly: two frames
 *   that fill it to its last byte are one record, and one more byte starts
 *   a second record;
 * - a frame is taken only with its record's room reserved: with room for
 *   exactly its record it is taken (and sealed into the last bytes), with
 *   a byte less it is refused (-EAGAIN) and the link stays up;
 * - the counters procmesh(1) reports per link (frames_out, bytes_out,
 *   records_out) count what was sealed, and the peer's the same in. */
START_TEST(test_stage_rules)
{
    side a, b;
    pair_up_emptied(&a, &b);
    ck_assert_int_eq(pm__pconn_stage(&a.c, NULL, 10), -EINVAL);
    ck_assert_int_eq(pm__pconn_stage(&a.c, "x", 0), -EINVAL);
    ck_assert_int_eq(pm__pconn_stage(&a.c, big_frame, PM__REC_MAX_FRAME + 1), -EINVAL);
    ck_assert_uint_eq(a.c.stage_n, 0);
    /* 100 + (cap - 100) bytes: one record; then 101 + (cap - 100): two. */
    uint64_t r0 = a.c.frame_records_out, f0 = a.c.frames_out, b0 = a.c.bytes_out;
    ck_assert_int_eq(pm__pconn_stage(&a.c, big_frame, 100), 0);
    ck_assert_int_eq(pm__pconn_stage(&a.c, big_frame, PM__PCONN_STAGE_CAP - 100), 0);
    ck_assert_int_eq(pm__pconn_flush_stage(&a.c), 0);
    ck_assert_uint_eq(a.c.frame_records_out, r0 + 1);
    ck_assert_int_eq(pm__pconn_stage(&a.c, big_frame, 101), 0);
    ck_assert_int_eq(pm__pconn_stage(&a.c, big_frame, PM__PCONN_STAGE_CAP - 100), 0);
    ck_assert_int_eq(pm__pconn_flush_stage(&a.c), 0);
    ck_assert_uint_eq(a.c.frame_records_out, r0 + 3);
    ck_assert_uint_eq(a.c.frames_out, f0 + 4);
    ck_assert_uint_eq(a.c.bytes_out, b0 + 201 + 2 * (PM__PCONN_STAGE_CAP - 100));
    pump(&a, &b);
    ck_assert(!a.dead && !b.dead);
    ck_assert_uint_eq(b.c.frames_in, a.c.frames_out);
    ck_assert_uint_eq(b.c.bytes_in, a.c.bytes_out);
    ck_assert_uint_eq(b.c.frame_records_in, a.c.frame_records_out);
    /* The reservation: room for exactly one record of a 1,000-byte frame. */
    size_t w = pm__rec_wire_size(1 + PM__REC_FRAME_HDR + 1000);
    fill_leaving(&a, w + PM__PCONN_CLOSE_ROOM);
    ck_assert_int_eq(pm__pconn_stage(&a.c, big_frame, 1000), 0);
    ck_assert_int_eq(pm__pconn_flush_stage(&a.c), 0);
    ck_assert_uint_eq(out_left(&a), PM__PCONN_CLOSE_ROOM); /* the CLOSE's, untouched */
    ck_assert_int_eq(a.c.state, PM__PC_UP);
    pump(&a, &b);
    /* A byte less: refused, nothing staged, the link up. */
    fill_leaving(&a, w - 1 + PM__PCONN_CLOSE_ROOM);
    ck_assert_int_eq(pm__pconn_stage(&a.c, big_frame, 1000), -EAGAIN);
    ck_assert_uint_eq(a.c.stage_n, 0);
    ck_assert_int_eq(a.c.state, PM__PC_UP);
    pump(&a, &b);
    ck_assert(!a.dead && !b.dead);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* The link closed as it comes up, its first record held over PM__PCE_UP
 * (the mesh closes a duplicate host there): the record's frames are never
 * delivered, counted in frames_after_close, all of them; nothing is held
 * afterwards. */
/* Brings b up with a FRAMES record of 3 frames as its first record, held
 * over PM__PCE_UP (nothing delivered yet). */
static void held_up(side *a, side *b)
{
    size_t used;
    to_first_record(a, b);
    struct iovec v[3] = {{"one", 3}, {"two!", 4}, {"three", 5}};
    unsigned char rec[256];
    size_t taken = 0, n = 0;
    ck_assert_int_ge(pm_test_rec_seal_frames(a->c.rec, v, 3, &taken, rec, sizeof(rec), &n), 0);
    ck_assert_uint_eq(taken, 3);
    ck_assert_int_eq(pm__pconn_input(&b->c, rec, n, &used), PM__PCE_UP);
    ck_assert_int_eq(b->c.held, 1);
    ck_assert_uint_eq(b->nframes, 0);
}

START_TEST(test_held_record_counted_at_close)
{
    side a, b;
    held_up(&a, &b);
    pm__pconn_close(&b.c, PM__REC_CLOSE_SHUTDOWN, PM__PF_DUPLICATE);
    ck_assert_uint_eq(b.c.frames_after_close, 3);
    ck_assert_int_eq(b.c.held, 0);
    ck_assert_int_eq(b.c.fail, PM__PF_DUPLICATE);
    ck_assert_int_eq(b.c.err, 0);
    ck_assert_uint_eq(b.nframes, 0);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* doc/protocol.md 6: "An end of stream without a CLOSE is truncation: an
 * error, even at a record boundary." One row per place the stream can
 * end on a live link: in the handshake, split (our HEARTBEAT out, none of
 * the peer's records in), up at a record boundary, up inside a record.
 * After a CLOSE the link is DEAD already and stays `closed`. */
START_TEST(test_eof_each_place)
{
    for (int place = 0; place < 5; place++) {
        side a, b;
        side_init(&a, "a", secret1, NULL, 1);
        side_init(&b, "b", secret1, NULL, 0);
        side *s = &b;
        if (place == 0) {
            ck_assert(move(&a, &b)); /* the preamble and message 1 only */
        } else if (place == 1) {
            ck_assert(move(&a, &b));
            ck_assert(move(&b, &a)); /* a splits on message 2 */
            s = &a;
            ck_assert_int_eq(a.c.state, PM__PC_SPLIT);
        } else {
            pump(&a, &b);
            ck_assert(a.up && b.up);
        }
        if (place == 3) {
            /* A record of a's cut after its first 5 bytes. */
            struct iovec v = {"frame", 5};
            unsigned char rec[128];
            size_t taken = 0, n = 0, used;
            ck_assert_int_ge(pm_test_rec_seal_frames(a.c.rec, &v, 1, &taken, rec, sizeof(rec), &n), 0);
            ck_assert_int_eq(pm__pconn_input(&b.c, rec, 5, &used), PM__PCE_NONE);
        }
        if (place == 4) {
            pm__pconn_close(&a.c, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
            ck_assert(move(&a, &b));
            ck_assert(b.dead);
        }
        ck_assert_int_eq(pm__pconn_eof(&s->c), PM__PCE_DEAD);
        ck_assert_int_eq(s->c.state, PM__PC_DEAD);
        if (place == 4) {
            ck_assert_msg(b.c.fail == PM__PF_CLOSED, "%s", pm__peer_fail_name(b.c.fail));
            ck_assert_int_eq(b.c.err, 0);
        } else {
            ck_assert_msg(s->c.fail == PM__PF_TRUNCATED && s->c.err == -ECONNRESET, "place %d: %s, %d",
                          place, pm__peer_fail_name(s->c.fail), s->c.err);
        }
        side_free(&a);
        side_free(&b);
    }
}
END_TEST

/* A CLOSE as the peer's first record: the link ends in that input (the
 * caller never sees it come up), closed with the peer's reason, nothing
 * held. */
START_TEST(test_first_record_close)
{
    side a, b;
    size_t used;
    to_first_record(&a, &b);
    unsigned char rec[64];
    size_t n = 0;
    ck_assert_int_eq(pm__rec_seal_close(a.c.rec, PM__REC_CLOSE_TIMEOUT, rec, sizeof(rec), &n), 0);
    ck_assert_int_eq(pm__pconn_input(&b.c, rec, n, &used), PM__PCE_DEAD);
    ck_assert_int_eq(b.c.fail, PM__PF_CLOSED);
    ck_assert_int_eq(b.c.close_received, 1);
    ck_assert_uint_eq(b.c.close_reason, PM__REC_CLOSE_TIMEOUT);
    ck_assert_int_eq(b.c.held, 0);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* pm__pconn_linger reads only after our own CLOSE: -ENOTCONN in the
 * handshake (no record state), on a link up that sent none, and once
 * freed; the bytes offered are not read. */
START_TEST(test_linger_needs_close)
{
    side a, b;
    side_init(&a, "a", secret1, NULL, 1);
    side_init(&b, "b", secret1, NULL, 0);
    ck_assert_int_eq(pm__pconn_linger(&a.c, "x", 1), -ENOTCONN);
    /* In the handshake there is nothing to send records with either. */
    size_t hlen;
    const unsigned char *hp = pm__pconn_output(&a.c, &hlen);
    ck_assert_int_eq(pm__pconn_heartbeat(&a.c), -ENOTCONN);
    ck_assert_int_eq(pm__pconn_rekey(&a.c), -ENOTCONN);
    ck_assert_int_eq(pm__pconn_ping(&a.c, 7), -ENOTCONN);
    size_t hlen2;
    ck_assert_ptr_eq(pm__pconn_output(&a.c, &hlen2), hp);
    ck_assert_uint_eq(hlen2, hlen);
    pump(&a, &b);
    ck_assert(a.up && b.up);
    ck_assert_int_eq(pm__pconn_heartbeat(&b.c), 0);
    size_t blen;
    const unsigned char *bp = pm__pconn_output(&b.c, &blen);
    ck_assert_ptr_nonnull(bp);
    ck_assert_int_eq(pm__pconn_linger(&a.c, bp, blen), -ENOTCONN);
    ck_assert_int_eq(a.c.state, PM__PC_UP); /* nothing judged */
    pm__pconn_close(&a.c, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
    /* Closed: a sends nothing more, whatever is asked of it. */
    size_t alen;
    const unsigned char *ap = pm__pconn_output(&a.c, &alen);
    ck_assert_ptr_nonnull(ap); /* its CLOSE */
    ck_assert_int_eq(pm__pconn_heartbeat(&a.c), -ENOTCONN);
    ck_assert_int_eq(pm__pconn_rekey(&a.c), -ENOTCONN);
    ck_assert_int_eq(pm__pconn_ping(&a.c, 7), -ENOTCONN);
    size_t alen2;
    ck_assert_ptr_eq(pm__pconn_output(&a.c, &alen2), ap);
    ck_assert_uint_eq(alen2, alen);
    /* A HEARTBEAT read while lingering is no REKEY, a REKEY is counted. */
    uint64_t rekeys = a.c.rekeys_in;
    ck_assert_int_eq(pm__pconn_linger(&a.c, bp, blen), 0);
    ck_assert_uint_eq(a.c.rekeys_in, rekeys);
    pm__pconn_sent(&b.c, blen);
    ck_assert_int_eq(pm__pconn_rekey(&b.c), 0);
    bp = pm__pconn_output(&b.c, &blen);
    ck_assert_ptr_nonnull(bp);
    ck_assert_int_eq(pm__pconn_linger(&a.c, bp, blen), 0);
    ck_assert_uint_eq(a.c.rekeys_in, rekeys + 1);
    pm__pconn_sent(&b.c, blen);
    /* b, not yet seeing a's CLOSE, sends frames, then its own CLOSE: the
     * lingering side counts the frames (never delivered) and stops at
     * the CLOSE with its reason. */
    struct iovec v[2] = {{"late", 4}, {"later", 5}};
    size_t taken;
    ck_assert_int_eq(send_frames(&b.c, v, 2, &taken), 0);
    ck_assert_uint_eq(taken, 2);
    pm__pconn_close(&b.c, PM__REC_CLOSE_TIMEOUT, PM__PF_LOCAL);
    bp = pm__pconn_output(&b.c, &blen);
    ck_assert_ptr_nonnull(bp);
    ck_assert_int_eq(pm__pconn_linger(&a.c, bp, blen), 1);
    ck_assert_uint_eq(a.c.frames_after_close, 2);
    ck_assert_uint_eq(a.nframes, 0);
    ck_assert_int_eq(a.c.close_received, 1);
    ck_assert_uint_eq(a.c.close_reason, PM__REC_CLOSE_TIMEOUT);
    pm__pconn_free(&a.c);
    ck_assert_int_eq(pm__pconn_linger(&a.c, bp, blen), -ENOTCONN);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* A link freed with its first record still held (its caller gave up
 * before installing it) is DEAD (peer.h): input then delivers nothing,
 * not the held record, whose body went with the record state. */
START_TEST(test_input_after_free)
{
    side a, b;
    held_up(&a, &b);
    pm__pconn_free(&b.c);
    size_t used = 1;
    ck_assert_int_eq(pm__pconn_input(&b.c, "", 0, &used), PM__PCE_DEAD);
    ck_assert_uint_eq(used, 0);
    ck_assert_int_eq(pm__pconn_input(&b.c, "x", 1, &used), PM__PCE_DEAD);
    ck_assert_uint_eq(b.nframes, 0);
    side_free(&a);
    side_free(&b); /* a second free does nothing */
}
END_TEST

/* pm__pconn_close at the edges: during the handshake (no record state
 * yet: no CLOSE record, the handshake's own bytes stay as they were), and
 * with the output queue as full as any other record can make it: the room
 * left is the CLOSE's (PM__PCONN_CLOSE_ROOM), the CLOSE takes it to the
 * queue's last byte and the peer reads it after everything queued
 * (doc/protocol.md 7), nothing written past the queue. Control records count towards the rekey (records_since_rekey),
 * a REKEY starts the count again. */
START_TEST(test_close_edges)
{
    side a, b;
    side_init(&a, "a", secret1, NULL, 1);
    size_t len0, len1;
    ck_assert_ptr_nonnull(pm__pconn_output(&a.c, &len0)); /* preamble and message 1 */
    pm__pconn_close(&a.c, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
    ck_assert_int_eq(a.c.state, PM__PC_DEAD);
    ck_assert_int_eq(a.c.fail, PM__PF_LOCAL);
    ck_assert_ptr_nonnull(pm__pconn_output(&a.c, &len1));
    ck_assert_uint_eq(len1, len0);
    side_free(&a);

    pair_up_emptied(&a, &b);
    uint64_t r0 = a.c.records_since_rekey;
    ck_assert_int_eq(pm__pconn_heartbeat(&a.c), 0);
    ck_assert_int_eq(pm__pconn_ping(&a.c, 3), 0);
    ck_assert_uint_eq(a.c.records_since_rekey, r0 + 2);
    ck_assert_int_eq(pm__pconn_rekey(&a.c), 0);
    ck_assert_uint_eq(a.c.records_since_rekey, 0);
    pump(&a, &b);
    ck_assert(!a.dead && !b.dead);
    size_t records = fill_leaving(&a, PM__PCONN_CLOSE_ROOM);
    ck_assert_int_eq(pm__pconn_heartbeat(&a.c), 0); /* no room but the CLOSE's: dropped */
    ck_assert_uint_eq(out_left(&a), PM__PCONN_CLOSE_ROOM);
    pm__pconn_close(&a.c, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
    ck_assert_int_eq(a.c.state, PM__PC_DEAD);
    ck_assert(a.c.close_sent);
    ck_assert_uint_eq(a.c.out_len - a.c.out_off, PM__PCONN_OUT_CAP);
    pump(&a, &b);
    ck_assert_uint_eq(b.nframes, records);
    ck_assert(b.c.close_received);
    ck_assert_uint_eq(b.c.close_reason, PM__REC_CLOSE_SHUTDOWN);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* A PING with room for a heartbeat's record but not for its own (the
 * echo's 9 bytes more): not sent, no error (queued records prove
 * liveness), the queue as it was, the link up. */
START_TEST(test_ping_room)
{
    side a, b;
    pair_up_emptied(&a, &b);
    fill_leaving(&a, PM__REC_HDR + PM__REC_MIN_CT + PM__REC_ECHO_BODY - 1 + PM__PCONN_CLOSE_ROOM);
    size_t before = a.c.out_len - a.c.out_off;
    ck_assert_int_eq(pm__pconn_ping(&a.c, 5), 0);
    ck_assert_uint_eq(a.c.out_len - a.c.out_off, before);
    ck_assert_int_eq(a.c.state, PM__PC_UP);
    pump(&a, &b);
    ck_assert(!a.dead && !b.dead);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* A PING that finds the peer's queue with room for a heartbeat's record
 * but not for the PONG: the PONG is not sent, and both sides go on (the
 * next record's nonce is the one the peer expects: a refused seal used
 * none); a later PING is answered. */
START_TEST(test_pong_room)
{
    side a, b;
    pair_up_emptied(&a, &b);
    ck_assert_int_eq(pm__pconn_ping(&a.c, 7), 0);
    fill_leaving(&b, PM__REC_HDR + PM__REC_MIN_CT + PM__REC_ECHO_BODY - 1 + PM__PCONN_CLOSE_ROOM);
    size_t before = b.c.out_len - b.c.out_off;
    ck_assert(move(&a, &b)); /* the PING: no room for the PONG */
    ck_assert(!b.dead);
    ck_assert_uint_eq(b.c.out_len - b.c.out_off, before);
    pump(&b, &a); /* b's frames; no PONG among them */
    ck_assert(!a.dead && !b.dead);
    ck_assert_uint_eq(a.c.pongs, 0);
    ck_assert_int_eq(pm__pconn_ping(&a.c, 8), 0);
    pump(&a, &b);
    ck_assert(!a.dead && !b.dead);
    ck_assert_uint_eq(a.c.pongs, 1);
    ck_assert_uint_eq(a.c.pong_stamp, 8);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* pm__pconn_init refuses a configuration it could not link with, one
 * condition at a time with the others valid (doc/protocol.md 4: the names
 * and the hello's ranges), and takes the edges of the idle range; the
 * hello announces PM__PEER_CAPS. */
START_TEST(test_init_each_condition)
{
    pm__keyring *kr, *nostatic;
    ck_assert_int_ge(sodium_init(), 0);
    ck_assert_int_eq(pm__keyring_new(&kr), 0);
    ck_assert_int_eq(pm__keyring_random_static(kr), 0);
    ck_assert_int_eq(pm__keyring_new(&nostatic), 0);
    static const struct {
        const char *what;
        int field;        /* 0 none, 1 keys NULL, 2 no static key, 3 system, 4 host, 5 incarnation, 6 idle */
        const char *text;
        uint64_t value;
        int want;
    } rows[] = {
        {"valid", 0, NULL, 0, 0},
        {"no keyring", 1, NULL, 0, -EINVAL},
        {"no static key", 2, NULL, 0, -EINVAL},
        {"system with a space", 3, "a b", 0, -EINVAL},
        {"empty system", 3, "", 0, -EINVAL},
        {"host with a space", 4, "a b", 0, -EINVAL},
        {"empty host", 4, "", 0, -EINVAL},
        {"incarnation 0", 5, NULL, 0, -EINVAL},
        {"idle below the least", 6, NULL, PM__PEER_IDLE_MIN_MS - 1, -EINVAL},
        {"idle the least", 6, NULL, PM__PEER_IDLE_MIN_MS, 0},
        {"idle the most", 6, NULL, PM__PEER_IDLE_MAX_MS, 0},
        {"idle past the most", 6, NULL, PM__PEER_IDLE_MAX_MS + 1, -EINVAL},
    };
    for (int initiator = 0; initiator < 2; initiator++) {
        for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
            pm__pconn_cfg cfg;
            memset(&cfg, 0, sizeof(cfg));
            cfg.system = "sys";
            cfg.host = "h";
            cfg.incarnation = 9;
            cfg.idle_ms = 5000;
            cfg.keys = kr;
            switch (rows[i].field) {
            case 1: cfg.keys = NULL; break;
            case 2: cfg.keys = nostatic; break;
            case 3: cfg.system = rows[i].text; break;
            case 4: cfg.host = rows[i].text; break;
            case 5: cfg.incarnation = 0; break;
            case 6: cfg.idle_ms = (uint32_t)rows[i].value; break;
            }
            pm__pconn c;
            int rc = pm__pconn_init(&c, &cfg, initiator);
            ck_assert_msg(rc == rows[i].want, "%s (%s): %d", rows[i].what,
                          initiator ? "initiator" : "responder", rc);
            if (rc == 0)
                pm__pconn_free(&c);
        }
    }
    pm__pconn c;
    ck_assert_int_eq(pm__pconn_init(&c, NULL, 1), -EINVAL);
    pm__keyring_free(kr);
    pm__keyring_free(nostatic);
    side a, b;
    pair_up(&a, &b);
    ck_assert_uint_eq(b.c.peer.capabilities, PM__PEER_CAPS);
    ck_assert_uint_eq(a.c.peer.capabilities, PM__PEER_CAPS);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* pm__pconn_init out of memory: each of its allocations failing in turn
 * (its output queue, its stage, the initiator's handshake state) fails it
 * -ENOMEM, with nothing held (pm__pconn_free after a failed init is safe
 * and frees nothing more); the first run that met no failure links. */
START_TEST(test_init_alloc_failures)
{
    if (!pm_failalloc_here("test_init_alloc_failures"))
        return;
    pm__keyring *kr;
    ck_assert_int_ge(sodium_init(), 0);
    ck_assert_int_eq(pm__keyring_new(&kr), 0);
    ck_assert_int_eq(pm__keyring_add_secret(kr, secret1), 0);
    ck_assert_int_eq(pm__keyring_random_static(kr), 0);
    pm__pconn_cfg cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.system = "sys";
    cfg.host = "h";
    cfg.incarnation = 9;
    cfg.idle_ms = 5000;
    cfg.keys = kr;
    for (int initiator = 0; initiator < 2; initiator++) {
        long failed = 0;
        for (long k = 1;; k++) {
            ck_assert_int_lt(k, 100);
            pm__pconn c;
            pm_failalloc_arm(k);
            int rc = pm__pconn_init(&c, &cfg, initiator);
            int hit = pm_failalloc_disarm();
            if (!hit) {
                ck_assert_int_eq(rc, 0);
                pm__pconn_free(&c);
                break;
            }
            ck_assert_msg(rc == -ENOMEM, "%s: allocation %ld failed, init returned %d",
                          initiator ? "initiator" : "responder", k, rc);
            ck_assert_ptr_null(c.out);
            ck_assert_ptr_null(c.stage);
            failed++;
        }
        ck_assert_int_ge(failed, 2); /* the queue and the stage at least */
    }
    pm__keyring_free(kr);
}
END_TEST

/* The split's allocation failing (pm__noise_split's transport state) ends
 * the link as a local failure carrying that allocation's error, at either
 * end: the initiator splits as it takes message 2, the responder message
 * 3. Every allocation of that step fails in turn. */
START_TEST(test_split_alloc_failures)
{
    if (!pm_failalloc_here("test_split_alloc_failures"))
        return;
    for (int responder = 0; responder < 2; responder++) {
        long failed = 0;
        for (long k = 1;; k++) {
            ck_assert_int_lt(k, 100);
            side a, b;
            side_init(&a, "a", secret1, NULL, 1);
            side_init(&b, "b", secret1, NULL, 0);
            ck_assert(move(&a, &b)); /* the preamble and message 1 */
            if (responder)
                ck_assert(move(&b, &a)); /* message 2: a splits */
            side *s = responder ? &b : &a;
            /* No ck_assert while armed: Check allocates to record one. */
            pm_failalloc_arm(k);
            int moved = responder ? move(&a, &b) : move(&b, &a); /* the message s splits on */
            int hit = pm_failalloc_disarm();
            ck_assert(moved);
            if (!hit) {
                ck_assert_msg(!s->dead && s->c.state >= PM__PC_SPLIT, "%s: state %d, %s",
                              responder ? "responder" : "initiator", s->c.state,
                              pm__peer_fail_name(s->c.fail));
                side_free(&a);
                side_free(&b);
                break;
            }
            ck_assert_msg(s->dead && s->c.fail == PM__PF_LOCAL && s->c.err == -ENOMEM,
                          "%s, allocation %ld failed: dead %d, %s, err %d",
                          responder ? "responder" : "initiator", k, s->dead,
                          pm__peer_fail_name(s->c.fail), s->c.err);
            side_free(&a);
            side_free(&b);
            failed++;
        }
        ck_assert_int_ge(failed, 1); /* the transport state at least */
    }
}
END_TEST

/* pm__pconn_free leaves nothing held and the link DEAD, so that a second
 * call, or one after a pm__pconn_init that failed (which frees what it
 * made), does nothing (peer.h). */
START_TEST(test_free_twice)
{
    side a, b;
    pair_up(&a, &b);
    pm__pconn_free(&a.c);
    ck_assert_int_eq(a.c.state, PM__PC_DEAD);
    ck_assert_ptr_null(a.c.out);
    ck_assert_ptr_null(a.c.stage);
    ck_assert_ptr_null(a.c.rec);
    ck_assert_ptr_null(a.c.hs);
    pm__pconn_free(&a.c);
    ck_assert_int_eq(a.c.state, PM__PC_DEAD);
    side_free(&a); /* a third time */
    side_free(&b);
    /* In the handshake (its state held), freed twice. */
    side_init(&a, "a", secret1, NULL, 1);
    ck_assert_ptr_nonnull(a.c.hs);
    pm__pconn_free(&a.c);
    ck_assert_ptr_null(a.c.hs);
    side_free(&a);
    pm__pconn_cfg cfg;
    memset(&cfg, 0, sizeof(cfg)); /* refused: no keys */
    pm__pconn c;
    ck_assert_int_eq(pm__pconn_init(&c, &cfg, 1), -EINVAL);
    pm__pconn_free(&c);
}
END_TEST

/* 1 when the first n bytes at p are all zero. */
static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return 0;
    return 1;
}

/* The stage holds a worker's frames in clear until its record is sealed:
 * emptied, its bytes are wiped (peer.c stage_drop), whether the record was
 * sealed (flushed) or the link died with frames staged. */
START_TEST(test_stage_wiped)
{
    side a, b;
    pair_up_emptied(&a, &b);
    static const char secret[] = "a worker's message in clear";
    ck_assert_int_eq(pm__pconn_stage(&a.c, secret, sizeof(secret)), 0);
    size_t used = a.c.stage_used;
    ck_assert_uint_gt(used, sizeof(secret));
    ck_assert_int_eq(pm__pconn_flush_stage(&a.c), 0);
    ck_assert_msg(all_zero(a.c.stage, used), "a sealed stage kept its frames' bytes");
    ck_assert_int_eq(pm__pconn_stage(&a.c, secret, sizeof(secret)), 0);
    pm__pconn_close(&a.c, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
    ck_assert_msg(a.c.stage == NULL || all_zero(a.c.stage, used), "a closed link's stage kept its frames");
    ck_assert_uint_eq(a.c.stage_used, 0);
    side_free(&a);
    side_free(&b);
}
END_TEST

/* pm__peer_fail_name: every reason has its name, what is not a reason
 * ("other") has none, at both ends of the range. */
START_TEST(test_fail_names)
{
    ck_assert_str_eq(pm__peer_fail_name(PM__PF_NONE), "none");
    ck_assert_str_eq(pm__peer_fail_name(PM__PF_NO_FDS), "no_fds");
    ck_assert_str_eq(pm__peer_fail_name(PM__PF_COUNT_ - 1), "no_fds");
    ck_assert_str_eq(pm__peer_fail_name(PM__PF_COUNT_), "other");
    ck_assert_str_eq(pm__peer_fail_name(-1), "other");
    for (int i = 0; i < PM__PF_COUNT_; i++)
        ck_assert_msg(pm__peer_fail_name(i) != NULL && strcmp(pm__peer_fail_name(i), "other") != 0,
                      "reason %d has no name", i);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("peer");
    TCase *tc = pm_tcase("routing", 30);
    tcase_add_test(tc, test_route_hosts);
    suite_add_tcase(s, tc);
    tc = pm_tcase("protocol", 30);
    tcase_add_test(tc, test_link_up_and_frames);
    tcase_add_test(tc, test_first_record_held_once);
    tcase_add_test(tc, test_bytewise);
    tcase_add_test(tc, test_insecure_link);
    tcase_add_test(tc, test_wrong_keys_refused);
    tcase_add_test(tc, test_hostile_preamble);
    tcase_add_test(tc, test_tampered);
    tcase_add_test(tc, test_self_and_pins);
    tcase_add_test(tc, test_hello_each_condition);
    tcase_add_test(tc, test_hello_wire_fields);
    tcase_add_test(tc, test_hello_codec_edges);
    tcase_add_test(tc, test_fail_names);
    tcase_add_test(tc, test_output_queue_exact_fill);
    tcase_add_test(tc, test_output_partial_then_more);
    tcase_add_test(tc, test_stage_wiped);
    tcase_add_test(tc, test_stage_rules);
    tcase_add_test(tc, test_held_record_counted_at_close);
    tcase_add_test(tc, test_input_after_free);
    tcase_add_test(tc, test_eof_each_place);
    tcase_add_test(tc, test_first_record_close);
    tcase_add_test(tc, test_linger_needs_close);
    tcase_add_test(tc, test_close_edges);
    tcase_add_test(tc, test_ping_room);
    tcase_add_test(tc, test_pong_room);
    tcase_add_test(tc, test_init_each_condition);
    tcase_add_test(tc, test_init_alloc_failures);
    tcase_add_test(tc, test_split_alloc_failures);
    tcase_add_test(tc, test_free_twice);
    tcase_add_test(tc, test_handshake_lengths_each);
    tcase_add_test(tc, test_section9_vectors);
    tcase_add_test(tc, test_ping_after_close_unanswered);
    tcase_add_test(tc, test_stage_batches);
    tcase_add_test(tc, test_stage_lone_frame);
    tcase_add_test(tc, test_stage_full_queue);
    tcase_add_test(tc, test_stage_link_ends);
    tcase_add_test(tc, test_close_reason);
    tcase_add_test(tc, test_close_codes);
    tcase_add_test(tc, test_control_full_queue);
    suite_add_tcase(s, tc);
    return pm_test_main(s);
}
