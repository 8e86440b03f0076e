/* SPDX-License-Identifier: MIT */
/* check_lane.c - a direct lane between two workers: its memory, its rules
 * (identity, types, replies), copy then validate, a peer that scribbles and
 * resizes, revocation with a writer that outlives it, the ordering counts.
 * The peer is a real process wherever what it does matters. */
#include "helpers.h"
#include "failalloc.h" /* malloc and its siblings, failing on demand */
#include "answer.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <poll.h>

#include "channel/bigmsg.h"
#include "channel/frame.h"
#include "channel/lane.h"
#include "channel/laneoffer.h"
#include "channel/bigmsg.h"
#include "channel/proto.h"
#include "channel/ringwait.h"
#include "channel/shm.h"
#include "base/le.h"
#include "hub/hub_int.h"
#include "hub/lanebook.h"
#include "os/doorbell.h"
#include "worker/nodelane.h"

#define MIB ((size_t)1 << 20)

static const pm__lane_who who0 = {.self_slot = 2, .self_inc = 11, .peer_slot = 5, .peer_inc = 23};
static const pm__lane_who who1 = {.self_slot = 5, .self_inc = 23, .peer_slot = 2, .peer_inc = 11};

static void lane_free(pm__lane *l)
{
    pm__lane_detach(l);
    free(l);
}

/* A lane's memory and both ends attached in this process. */
static int make_pair(pm__lane *a, pm__lane *b)
{
    int fd;
    ck_assert_int_eq(pm__lane_create(&fd), 0);
    ck_assert_int_eq(pm__lane_attach(a, fd, 0, &who0, -1, -1), 0);
    ck_assert_int_eq(pm__lane_attach(b, fd, 1, &who1, -1, -1), 0);
    return fd;
}

/* Both ends of a new lane, each in memory of its own (the ends' buffers
 * are large), and their release. */
static void new_pair(pm__lane **a, pm__lane **b)
{
    *a = malloc(sizeof(**a));
    *b = malloc(sizeof(**b));
    ck_assert(*a != NULL && *b != NULL);
    close(make_pair(*a, *b));
}

static void pair_free(pm__lane *a, pm__lane *b)
{
    lane_free(a);
    lane_free(b);
}

static pm__frame_hdr msg_hdr(int type, uint64_t id)
{
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = (uint8_t)type;
    h.request_id = id;
    return h;
}

/* Waits (spinning: these ends have no doorbell) for the next frame. */
static int recv_wait(pm__lane *l, pm__frame_hdr *h, const void **p)
{
    for (int i = 0; i < 20000000; i++) {
        int rc = pm__lane_recv(l, h, p);
        if (rc != 0)
            return rc;
        if (i % 1000 == 999)
            usleep(100);
    }
    return 0;
}

START_TEST(test_create_sealed)
{
    int fd;
    ck_assert_int_eq(pm__lane_create(&fd), 0);
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_int_eq(st.st_size, PM__LANE_SIZE);
    int seals = fcntl(fd, F_GET_SEALS);
    ck_assert_int_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
                     F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    /* A peer's ftruncate cannot shrink it under the other end, nor grow it;
     * nobody can add a seal (F_SEAL_FUTURE_WRITE would stop the second end
     * from mapping it). */
    ck_assert_int_eq(ftruncate(fd, 4096), -1);
    ck_assert_int_eq(errno, EPERM);
    ck_assert_int_eq(ftruncate(fd, PM__LANE_SIZE * 2), -1);
    ck_assert_int_eq(errno, EPERM);
    ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
    /* Both rings formatted (for a reader that trusts the maker: a
     * debugger, this test), indices at 0, the lane's page untouched. */
    unsigned char *m = mmap(NULL, PM__LANE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(m, MAP_FAILED);
    for (int k = 0; k < 2; k++) {
        const struct pm__ring_shared *r =
            (const void *)(m + PM__LANE_PAGE + (size_t)k * (PM__RING_HDR_SIZE + PM__LANE_CAP));
        ck_assert_uint_eq(r->magic, PM__RING_MAGIC);
        ck_assert_uint_eq(r->capacity, PM__LANE_CAP);
        ck_assert_uint_eq(r->max_frame, PM__LANE_MAX_FRAME);
        ck_assert_uint_eq(atomic_load(&r->head), 0);
        ck_assert_uint_eq(atomic_load(&r->tail), 0);
    }
    for (size_t i = 0; i < PM__LANE_PAGE; i++)
        ck_assert_uint_eq(m[i], 0);
    munmap(m, PM__LANE_SIZE);
    /* The maker keeps no mapping of it. */
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    while (fgets(line, sizeof(line), f) != NULL)
        ck_assert_msg(strstr(line, "procmesh-lane") == NULL, "still mapped: %s", line);
    fclose(f);
    close(fd);
}
END_TEST

START_TEST(test_attach_refuses)
{
    pm__lane l;
    int fd;
    ck_assert_int_eq(pm__lane_create(&fd), 0);
    pm__lane_who same = who0;
    same.peer_slot = same.self_slot;
    ck_assert_int_eq(pm__lane_attach(&l, fd, 2, &who0, -1, -1), -EINVAL);
    ck_assert_int_eq(pm__lane_attach(&l, fd, 0, NULL, -1, -1), -EINVAL);
    ck_assert_int_eq(pm__lane_attach(&l, fd, 0, &same, -1, -1), -EINVAL);
    close(fd);
    /* Not sealed against shrinking: the peer could make our next access
     * fault. Too small: the rings would not fit. */
    int raw = pm__memfd_new("unsealed");
    ck_assert_int_ge(raw, 0);
    ck_assert_int_eq(ftruncate(raw, PM__LANE_SIZE), 0);
    ck_assert_int_eq(pm__lane_attach(&l, raw, 0, &who0, -1, -1), -EPERM);
    close(raw);
    int small = pm__memfd_new("small");
    ck_assert_int_eq(ftruncate(small, PM__LANE_SIZE - 4096), 0);
    ck_assert_int_eq(pm__memfd_seal(small, PM__SEAL_RING), 0);
    ck_assert_int_eq(pm__lane_attach(&l, small, 0, &who0, -1, -1), -EINVAL);
    close(small);
    pm__lane_detach(&l); /* never attached: harmless */
}
END_TEST

/* Every frame from one end reaches the other with the sender's identity as
 * the supervisor gave it, whatever the sender wrote. */
START_TEST(test_send_recv_stamped)
{
    pm__lane *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
    int fd = make_pair(a, b);
    close(fd);
    pm__frame_hdr h = msg_hdr(PM__FT_MSG, 77); /* an id on a message is cleared */
    h.src = 9;
    h.src_inc = 999;
    h.src_host = 3;
    h.dst = 1;
    h.dst_inc = 999; /* a stale incarnation: the lane names the peer's own */
    h.error = -5;        /* no lane frame carries one: cleared */
    h.deadline_ms = 700; /* nor a message a deadline: cleared */
    ck_assert_int_eq(pm__lane_send(a, &h, "hello", 5), 0);
    pm__frame_hdr got;
    const void *p;
    ck_assert_int_eq(pm__lane_recv(b, &got, &p), 1);
    ck_assert_uint_eq(got.type, PM__FT_MSG);
    ck_assert_uint_eq(got.src, 2);
    ck_assert_uint_eq(got.src_inc, 11);
    ck_assert_uint_eq(got.src_host, 0);
    ck_assert_uint_eq(got.dst, 5);
    ck_assert_uint_eq(got.dst_inc, 23);
    ck_assert_uint_eq(got.request_id, 0);
    ck_assert_int_eq(got.error, 0);
    ck_assert_int_eq(got.deadline_ms, 0);
    ck_assert_uint_eq(got.len, 5);
    ck_assert_mem_eq(p, "hello", 5);
    /* The payload handed out is the private copy, not the shared ring. */
    ck_assert(p >= (const void *)b->buf && p < (const void *)(b->buf + sizeof(b->buf)));
    ck_assert_int_eq(pm__lane_recv(b, &got, &p), 0);
    /* Request and reply, the other way round. */
    pm__frame_hdr rq = msg_hdr(PM__FT_REQUEST, 41);
    rq.deadline_ms = 12345;
    ck_assert_int_eq(pm__lane_send(b, &rq, "q", 1), 0);
    ck_assert_uint_eq(b->req_out, 41);
    /* A message b sends while it waits does not forget its request. */
    pm__frame_hdr side = msg_hdr(PM__FT_MSG, 0);
    ck_assert_int_eq(pm__lane_send(b, &side, "m", 1), 0);
    ck_assert_uint_eq(b->req_out, 41);
    ck_assert_int_eq(pm__lane_recv(a, &got, &p), 1);
    ck_assert_uint_eq(got.type, PM__FT_REQUEST);
    ck_assert_uint_eq(got.request_id, 41);
    ck_assert_int_eq(got.deadline_ms, 12345);
    ck_assert_uint_eq(got.src, 5);
    ck_assert_int_eq(pm__lane_recv(a, &got, &p), 1);
    ck_assert_uint_eq(got.type, PM__FT_MSG);
    pm__frame_hdr rp = msg_hdr(PM__FT_REPLY, 41);
    ck_assert_int_eq(pm__lane_send(a, &rp, "r", 1), 0);
    ck_assert_int_eq(pm__lane_recv(b, &got, &p), 1);
    ck_assert_uint_eq(got.type, PM__FT_REPLY);
    ck_assert_uint_eq(b->req_out, 0); /* answered: a second reply is refused */
    /* A request that could not be sent (a's ring full) is not waited on. */
    pm__frame_hdr fill = msg_hdr(PM__FT_MSG, 0);
    static char chunk[4096];
    while (pm__lane_send(b, &fill, chunk, sizeof(chunk)) == 0)
        ;
    while (pm__lane_send(b, &fill, NULL, 0) == 0)
        ; /* not even a header's room left */
    pm__frame_hdr rq2 = msg_hdr(PM__FT_REQUEST, 42);
    ck_assert_int_eq(pm__lane_send(b, &rq2, "q", 1), -EAGAIN);
    ck_assert_uint_eq(b->req_out, 0);
    while (pm__lane_recv(a, &got, &p) == 1)
        ; /* a takes the fillers */
    ck_assert_int_eq(pm__lane_send(a, &rp, "r", 1), 0);
    ck_assert_int_eq(pm__lane_recv(b, &got, &p), 0);
    ck_assert_uint_eq(b->dropped[PM__LANE_DROP_REPLY], 1);
    ck_assert_uint_eq(b->delivered, 2);
    /* What a lane never carries. */
    pm__frame_hdr bad = msg_hdr(PM__FT_UNDELIVERABLE, 1);
    ck_assert_int_eq(pm__lane_send(a, &bad, NULL, 0), -EINVAL);
    bad = msg_hdr(PM__FT_MSG, 0);
    bad.flags = PM__FF_MEMFD;
    ck_assert_int_eq(pm__lane_send(a, &bad, NULL, 0), -EINVAL);
    bad = msg_hdr(PM__FT_REQUEST, 0);
    ck_assert_int_eq(pm__lane_send(a, &bad, NULL, 0), -EINVAL);
    static char big[PM__LANE_MAX_PAYLOAD + 1];
    ck_assert_int_eq(pm__lane_send(a, &h, big, sizeof(big)), -EMSGSIZE);
    ck_assert_int_eq(pm__lane_send(a, &h, big, SIZE_MAX), -EMSGSIZE); /* no wrap on the way */
    ck_assert_int_eq(pm__lane_send(a, &h, big, sizeof(big) - 1), 0);
    ck_assert_int_eq(pm__lane_recv(b, &got, &p), 1);
    ck_assert_uint_eq(got.len, PM__LANE_MAX_PAYLOAD);
    pm__lane_detach(a);
    pm__lane_detach(b);
    pm__lane_detach(b); /* twice: harmless */
    free(a);
    free(b);
}
END_TEST

/* One row a condition, every other field valid (issue 27, item 3): what a
 * hostile peer can write into a frame, and what the receiver makes of it. */
struct judge_row {
    const char *what;
    void (*edit)(pm__frame_hdr *h);
    uint64_t reply_id;
    int want;
    size_t len; /* the payload's length: 0 for 3 bytes */
};

static void e_none(pm__frame_hdr *h) { (void)h; }
static void e_stop(pm__frame_hdr *h) { h->type = PM__FT_STOP; }
static void e_undeliverable(pm__frame_hdr *h) { h->type = PM__FT_UNDELIVERABLE; h->request_id = 0; }
static void e_init(pm__frame_hdr *h) { h->type = PM__FT_INIT; }
static void e_bcast(pm__frame_hdr *h) { h->type = PM__FT_BCAST; }
static void e_memfd(pm__frame_hdr *h) { h->flags = PM__FF_MEMFD; }
static void e_error(pm__frame_hdr *h) { h->error = -EHOSTDOWN; }
static void e_dst_host(pm__frame_hdr *h) { h->dst_host = 1; }
static void e_src_host(pm__frame_hdr *h) { h->src_host = 1; }
static void e_msg_id(pm__frame_hdr *h) { h->request_id = 5; }
static void e_msg_deadline(pm__frame_hdr *h) { h->deadline_ms = 5; }
static void e_req(pm__frame_hdr *h) { h->type = PM__FT_REQUEST; h->request_id = 8; }
static void e_req_no_id(pm__frame_hdr *h) { h->type = PM__FT_REQUEST; h->request_id = 0; }
static void e_reply(pm__frame_hdr *h) { h->type = PM__FT_REPLY; h->request_id = 8; }
static void e_reply_no_id(pm__frame_hdr *h) { h->type = PM__FT_REPLY; h->request_id = 0; }
static void e_dst(pm__frame_hdr *h) { h->dst = 6; }
static void e_dst_main(pm__frame_hdr *h) { h->dst = PM__NODE_MAIN; }
static void e_dst_inc(pm__frame_hdr *h) { h->dst_inc = 22; }
static void e_dst_inc0(pm__frame_hdr *h) { h->dst_inc = 0; }
static void e_src(pm__frame_hdr *h) { h->src = 6; h->src_inc = 1; }

static const struct judge_row judge_rows[] = {
    {"a valid message", e_none, 0, PM__LANE_OK, 0},
    {"a forged source (slot and incarnation)", e_src, 0, PM__LANE_OK, 0},
    {"a stop", e_stop, 0, PM__LANE_DROP_TYPE, 0},
    {"a notice (undeliverable)", e_undeliverable, 0, PM__LANE_DROP_TYPE, 0},
    {"an init", e_init, 0, PM__LANE_DROP_TYPE, 0},
    {"a broadcast", e_bcast, 0, PM__LANE_DROP_TYPE, 0},
    {"a large message's announcement", e_memfd, 0, PM__LANE_DROP_TYPE, PM__ANNOUNCE_SIZE},
    {"an announcement's flag on a short payload", e_memfd, 0, PM__LANE_DROP_MALFORMED, 0},
    {"an error", e_error, 0, PM__LANE_DROP_MALFORMED, 0},
    {"another destination host", e_dst_host, 0, PM__LANE_DROP_MALFORMED, 0},
    {"another source host", e_src_host, 0, PM__LANE_DROP_MALFORMED, 0},
    {"a message with a request id", e_msg_id, 0, PM__LANE_DROP_MALFORMED, 0},
    {"a message with a deadline", e_msg_deadline, 0, PM__LANE_DROP_MALFORMED, 0},
    {"a request", e_req, 0, PM__LANE_OK, 0},
    {"a request without an id", e_req_no_id, 0, PM__LANE_DROP_MALFORMED, 0},
    {"a reply to the request waited on", e_reply, 8, PM__LANE_OK, 0},
    {"a reply with no request waited on", e_reply, 0, PM__LANE_DROP_REPLY, 0},
    {"a reply to another request", e_reply, 9, PM__LANE_DROP_REPLY, 0},
    {"a reply without an id", e_reply_no_id, 8, PM__LANE_DROP_MALFORMED, 0},
    {"another slot", e_dst, 0, PM__LANE_DROP_DST, 0},
    {"main", e_dst_main, 0, PM__LANE_DROP_DST, 0},
    {"another incarnation", e_dst_inc, 0, PM__LANE_DROP_DST, 0},
    {"incarnation 0 (whoever holds the slot)", e_dst_inc0, 0, PM__LANE_OK, 0},
};

START_TEST(test_judge_rows)
{
    const struct judge_row *row = &judge_rows[_i];
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = PM__FT_MSG;
    h.dst = who1.self_slot;
    h.dst_inc = who1.self_inc;
    row->edit(&h);
    unsigned char buf[PM__FRAME_HDR_SIZE + 64];
    h.len = row->len != 0 ? (uint32_t)row->len : 3;
    ck_assert_uint_le(h.len, 64);
    memset(buf, 'a', sizeof(buf));
    pm__frame_encode(&h, buf);
    pm__frame_hdr out;
    memset(&out, 0xa5, sizeof(out));
    int rc = pm__lane_judge(&who1, row->reply_id, buf, PM__FRAME_HDR_SIZE + h.len, &out);
    ck_assert_msg(rc == row->want, "%s: %d, want %d", row->what, rc, row->want);
    if (rc == PM__LANE_OK) {
        ck_assert_uint_eq(out.src, who1.peer_slot);
        ck_assert_uint_eq(out.src_inc, who1.peer_inc);
        ck_assert_uint_eq(out.src_host, 0);
        ck_assert_uint_eq(out.dst_inc, who1.self_inc);
        ck_assert_uint_eq(out.type, h.type);
        ck_assert_uint_eq(out.request_id, h.request_id);
    } else {
        ck_assert_uint_eq(out.src, 0xa5a5a5a5u); /* untouched */
    }
}
END_TEST

START_TEST(test_judge_malformed)
{
    pm__frame_hdr h, out;
    memset(&h, 0, sizeof(h));
    h.type = PM__FT_MSG;
    h.dst = who1.self_slot;
    unsigned char buf[PM__FRAME_HDR_SIZE + 8];
    h.len = 8;
    pm__frame_encode(&h, buf);
    /* A length that disagrees with the record, a short record, another
     * version, a payload over the lane's maximum. */
    ck_assert_int_eq(pm__lane_judge(&who1, 0, buf, sizeof(buf) - 1, &out), PM__LANE_DROP_MALFORMED);
    ck_assert_int_eq(pm__lane_judge(&who1, 0, buf, 10, &out), PM__LANE_DROP_MALFORMED);
    buf[0] = 9;
    ck_assert_int_eq(pm__lane_judge(&who1, 0, buf, sizeof(buf), &out), PM__LANE_DROP_MALFORMED);
    static unsigned char big[PM__FRAME_HDR_SIZE + PM__LANE_MAX_PAYLOAD + 8];
    h.len = PM__LANE_MAX_PAYLOAD + 8;
    pm__frame_encode(&h, big);
    ck_assert_int_eq(pm__lane_judge(&who1, 0, big, sizeof(big), &out), PM__LANE_DROP_MALFORMED);
    h.len = PM__LANE_MAX_PAYLOAD;
    pm__frame_encode(&h, big);
    ck_assert_int_eq(pm__lane_judge(&who1, 0, big, sizeof(big) - 8, &out), PM__LANE_OK);
}
END_TEST

/* The peer writes raw frames (not through pm__lane_send: what a hostile
 * worker's own code does): forged sources are stamped over, frames a lane
 * does not carry are dropped and counted, the good ones around them pass. */
START_TEST(test_hostile_frames_dropped_counted)
{
    pm__lane *a, *b;
    new_pair(&a, &b);
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.dst = 5;
    h.dst_inc = 23;
    h.type = PM__FT_UNDELIVERABLE; /* a forged notice */
    h.request_id = 3;
    h.error = -EHOSTDOWN;
    ck_assert_int_eq(pm__frame_send(&a->tx, &h, NULL, 0), 0);
    h.type = PM__FT_REPLY; /* an answer to a request b never sent */
    h.error = 0;
    ck_assert_int_eq(pm__frame_send(&a->tx, &h, "x", 1), 0);
    h.type = PM__FT_MSG; /* addressed to someone else */
    h.request_id = 0;
    h.dst = 4;
    ck_assert_int_eq(pm__frame_send(&a->tx, &h, "y", 1), 0);
    h.dst = 5; /* a good one, claiming to be slot 0 */
    h.src = 0;
    h.src_inc = 1;
    ck_assert_int_eq(pm__frame_send(&a->tx, &h, "z", 1), 0);
    /* A record too short for a header. */
    void *r;
    ck_assert_int_eq(pm__ring_reserve(&a->tx, 8, &r), 0);
    memset(r, 0, 8);
    pm__ring_commit(&a->tx, 8);
    pm__ring_publish(&a->tx);
    pm__frame_hdr got;
    const void *p;
    ck_assert_int_eq(pm__lane_recv(b, &got, &p), 1);
    ck_assert_mem_eq(p, "z", 1);
    ck_assert_uint_eq(got.src, 2);
    ck_assert_uint_eq(got.src_inc, 11);
    ck_assert_int_eq(pm__lane_recv(b, &got, &p), 0);
    ck_assert_uint_eq(b->dropped[PM__LANE_DROP_TYPE], 1);
    ck_assert_uint_eq(b->dropped[PM__LANE_DROP_REPLY], 1);
    ck_assert_uint_eq(b->dropped[PM__LANE_DROP_DST], 1);
    ck_assert_uint_eq(b->dropped[PM__LANE_DROP_MALFORMED], 1);
    ck_assert_uint_eq(b->delivered, 1);
    pair_free(a, b);
}
END_TEST

/* Copy, then validate: a peer process rewrites every frame in place, as
 * fast as it can, while the receiver reads them. Whatever the receiver is
 * handed passed the rules on the bytes it holds, and those bytes do not
 * change afterwards. */
START_TEST(test_rewrite_after_check)
{
    int fd;
    ck_assert_int_eq(pm__lane_create(&fd), 0);
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        pm__lane *a = malloc(sizeof(*a));
        if (pm__lane_attach(a, fd, 0, &who0, -1, -1) != 0)
            _exit(2);
        pm__frame_hdr h = msg_hdr(PM__FT_MSG, 0);
        char pay[64];
        memset(pay, 'g', sizeof(pay));
        uint64_t seed = 7;
        for (int i = 0; i < 20000; i++) {
            uint64_t at = pm__ring_head(&a->tx);
            while (pm__lane_send(a, &h, pay, sizeof(pay)) == -EAGAIN)
                ;
            /* Scribble over what was just published: the type, the
             * destination, the payload, any byte. */
            unsigned char *rec = a->tx.data + (at & a->tx.mask) + PM__RING_REC_HDR;
            for (int k = 0; k < 8; k++)
                rec[pm_test_rand(&seed) % (PM__FRAME_HDR_SIZE + sizeof(pay))] =
                    (unsigned char)pm_test_rand(&seed);
        }
        _exit(0);
    }
    pm__lane *b = malloc(sizeof(*b));
    ck_assert_int_eq(pm__lane_attach(b, fd, 1, &who1, -1, -1), 0);
    close(fd);
    int st, done = 0;
    uint64_t seen = 0;
    while (!done) {
        done = waitpid(pid, &st, WNOHANG) == pid;
        pm__frame_hdr h;
        const void *p;
        int rc;
        while ((rc = pm__lane_recv(b, &h, &p)) == 1) {
            unsigned char keep[PM__LANE_MAX_PAYLOAD];
            memcpy(keep, p, h.len);
            ck_assert(h.type == PM__FT_MSG || h.type == PM__FT_REQUEST);
            ck_assert_uint_eq(h.src, 2);
            ck_assert_uint_eq(h.src_inc, 11);
            ck_assert_uint_eq(h.dst, 5);
            ck_assert(p >= (const void *)b->buf && p < (const void *)(b->buf + sizeof(b->buf)));
            /* Still the bytes judged, whatever the writer does meanwhile. */
            for (int spin = 0; spin < 50; spin++)
                ck_assert_mem_eq(keep, p, h.len);
            seen++;
        }
        /* A record header scribbled over is a broken ring: poisoned, and
         * nothing more is read; that is all the writer can do. */
        ck_assert(rc == 0 || rc == -EBADMSG);
        if (rc == -EBADMSG) {
            ck_assert_int_eq(pm__lane_recv(b, &h, &p), -EBADMSG);
            kill(pid, SIGKILL);
        }
    }
    if (!WIFSIGNALED(st))
        ck_assert_int_eq(WEXITSTATUS(st), 0);
    /* Every frame read was delivered or dropped by a rule, never both. */
    ck_assert_uint_eq(b->delivered, seen);
    ck_assert_uint_le(seen + b->dropped[1] + b->dropped[2] + b->dropped[3] + b->dropped[4], 20000);
    pm__lane_detach(b);
    free(b);
}
END_TEST

/* A peer process scribbles over the whole lane (both rings, both headers,
 * the lane's page), tries to shrink and grow it and punches holes in it,
 * while this end keeps sending and receiving: no crash, no SIGBUS, no
 * hang; every call returns one of its documented values. */
START_TEST(test_scribble_and_resize)
{
    int fd;
    ck_assert_int_eq(pm__lane_create(&fd), 0);
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        unsigned char *m =
            mmap(NULL, PM__LANE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
            _exit(2);
        if (ftruncate(fd, 4096) == 0 || ftruncate(fd, 4 * PM__LANE_SIZE) == 0)
            _exit(3); /* the seals must refuse both */
        uint64_t seed = 99;
        for (int i = 0; i < 3000000; i++) {
            size_t at = pm_test_rand(&seed) % (PM__LANE_SIZE / 8);
            ((uint64_t *)(void *)m)[at] = pm_test_rand(&seed) % 4 == 0 ? 0 : pm_test_rand(&seed);
            if (i % 100000 == 0)
                (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                (off_t)(pm_test_rand(&seed) % PM__LANE_SIZE) & ~(off_t)4095,
                                4096);
        }
        _exit(0);
    }
    pm__lane *b = malloc(sizeof(*b));
    int rc = pm__lane_attach(b, fd, 1, &who1, -1, -1);
    close(fd);
    /* The scribbler may have broken the indices before we attached: then
     * the attach itself refuses the lane. */
    ck_assert(rc == 0 || rc == -EBADMSG);
    int st, done = 0;
    pm__frame_hdr h = msg_hdr(PM__FT_MSG, 0);
    while (rc == 0 && !done) {
        done = waitpid(pid, &st, WNOHANG) == pid;
        int s = pm__lane_send(b, &h, "ping", 4);
        ck_assert(s == 0 || s == -EAGAIN || s == -EBADMSG);
        pm__frame_hdr g;
        const void *p;
        int r = pm__lane_recv(b, &g, &p);
        ck_assert(r == 0 || r == 1 || r == -EBADMSG);
        if (r == 1) {
            ck_assert_uint_eq(g.src, 2);
            ck_assert_uint_le(g.len, PM__LANE_MAX_PAYLOAD);
        }
        int d = pm__lane_drained(b);
        ck_assert(d == 0 || d == 1 || d == -EBADMSG);
        (void)pm__lane_may_send(b);
    }
    if (!done)
        ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    pm__lane_detach(b);
    free(b);
}
END_TEST

/* Revocation: frames published before it are delivered, nothing after it,
 * even from a process that still maps the lane (a worker's fork outlives
 * it). The writer here is a real process: it publishes 3 frames, forks a
 * child that keeps the mapping, and is killed and reaped; then the lane is
 * revoked, then the child writes 5 more and exits. */
START_TEST(test_revoke_writer_outlived)
{
    int fd, go[2], ready[2];
    ck_assert_int_eq(pm__lane_create(&fd), 0);
    ck_assert_int_eq(pipe(go), 0);
    ck_assert_int_eq(pipe(ready), 0);
    pid_t w = pm_test_fork();
    ck_assert_int_ge(w, 0);
    if (w == 0) {
        pm__lane *a = malloc(sizeof(*a));
        if (pm__lane_attach(a, fd, 0, &who0, -1, -1) != 0)
            _exit(2);
        pm__frame_hdr h = msg_hdr(PM__FT_MSG, 0);
        for (char c = '1'; c <= '3'; c++)
            if (pm__lane_send(a, &h, &c, 1) != 0)
                _exit(3);
        pid_t g = fork(); /* not pm_test_fork: it must outlive w */
        if (g == 0) {
            char x;
            close(go[1]); /* EOF, not a wait for ever, if the test dies first */
            if (read(go[0], &x, 1) != 1)
                _exit(4);
            for (char c = '4'; c <= '8'; c++)
                if (pm__lane_send(a, &h, &c, 1) != 0)
                    _exit(5);
            _exit(write(ready[1], "d", 1) == 1 ? 0 : 6);
        }
        (void)write(ready[1], &g, sizeof(g));
        pause();
        _exit(0);
    }
    pid_t g;
    ck_assert_int_eq(read(ready[0], &g, sizeof(g)), (ssize_t)sizeof(g));
    pm__lane *b = malloc(sizeof(*b));
    ck_assert_int_eq(pm__lane_attach(b, fd, 1, &who1, -1, -1), 0);
    close(fd);
    ck_assert_int_eq(kill(w, SIGKILL), 0);
    ck_assert_int_eq(waitpid(w, NULL, 0), w);
    ck_assert_int_eq(pm__lane_revoke(b), 0);
    ck_assert_int_eq(pm__lane_revoke(b), 0); /* idempotent: the first index stays */
    ck_assert_int_eq(write(go[1], "g", 1), 1);
    /* The outliver says when its frames are published (it was forked by
     * the writer: not our child to wait for). */
    char d;
    ck_assert_int_eq(read(ready[0], &d, 1), 1);
    (void)waitpid(g, NULL, WNOHANG);
    pm__frame_hdr h;
    const void *p;
    for (char c = '1'; c <= '3'; c++) {
        ck_assert_int_eq(pm__lane_recv(b, &h, &p), 1);
        ck_assert_int_eq(*(const char *)p, c);
    }
    ck_assert_int_eq(pm__lane_recv(b, &h, &p), 0);
    ck_assert_int_eq(pm__lane_recv(b, &h, &p), 0);
    ck_assert_uint_eq(b->delivered, 3);
    /* The frames the outliver wrote are there, in the shared ring, unread
     * (the reader reads its copy of the ring as it was at the revocation). */
    const struct pm__ring_shared *shared =
        (const void *)((const unsigned char *)b->map + PM__LANE_PAGE);
    ck_assert_uint_gt(atomic_load(&shared->head), b->limit);
    /* Nothing goes to a revoked lane. */
    pm__frame_hdr m = msg_hdr(PM__FT_MSG, 0);
    ck_assert_int_eq(pm__lane_send(b, &m, "x", 1), -EPIPE);
    pm__lane_detach(b);
    free(b);
}
END_TEST

/* A revocation index the peer made up: the ring's checks judge it as any
 * producer index, and a frame straddling it is not read. A revocation
 * without memory for its copy delivers nothing more. */
START_TEST(test_revoke_edges)
{
    pm__lane *a, *b;
    new_pair(&a, &b);
    pm__frame_hdr h = msg_hdr(PM__FT_MSG, 0);
    ck_assert_int_eq(pm__lane_send(a, &h, "12345678", 8), 0);
    /* The peer moves its published index into the middle of its frame. */
    atomic_store(&a->tx.sh->head, 16);
    ck_assert_int_eq(pm__lane_revoke(b), 0);
    ck_assert_uint_eq(b->limit, 16);
    pm__frame_hdr g;
    const void *p;
    atomic_store(&a->tx.sh->head, pm__ring_head(&a->tx));
    /* The frame straddles the index: the ring is broken, nothing read. */
    ck_assert_int_eq(pm__lane_recv(b, &g, &p), -EBADMSG);
    ck_assert_uint_eq(b->delivered, 0);
    /* An impossible index at the revocation: nothing more is read. */
    pm__lane *c = malloc(sizeof(*c)), *d = malloc(sizeof(*d));
    close(make_pair(c, d));
    ck_assert_int_eq(pm__lane_send(c, &h, "1", 1), 0);
    atomic_store(&c->tx.sh->head, 3);
    ck_assert_int_eq(pm__lane_revoke(d), -EBADMSG);
    ck_assert_int_eq(pm__lane_revoke(d), -EBADMSG);
    ck_assert_int_eq(pm__lane_recv(d, &g, &p), -EBADMSG);
    ck_assert_uint_eq(d->limit, 0);
    /* No memory for the copy: -ENOMEM, and nothing more is delivered, not
     * even the frames published before the revocation (the live ring is
     * never read again). */
    pm__lane *e = malloc(sizeof(*e)), *f = malloc(sizeof(*f));
    close(make_pair(e, f));
    if (pm_failalloc_here("test_revoke_edges (the copy's allocation failing)")) {
        ck_assert_int_eq(pm__lane_send(e, &h, "1", 1), 0);
        ck_assert_int_eq(pm__lane_send(e, &h, "2", 1), 0);
        pm_failalloc_arm(1);
        int rc = pm__lane_revoke(f);
        ck_assert_int_eq(pm_failalloc_disarm(), 1);
        ck_assert_int_eq(rc, -ENOMEM);
        ck_assert_int_eq(pm__lane_recv(f, &g, &p), 0);
        ck_assert_int_eq(pm__lane_send(e, &h, "3", 1), 0);
        ck_assert_int_eq(pm__lane_recv(f, &g, &p), 0);
        ck_assert_uint_eq(f->delivered, 0);
        ck_assert_int_eq(pm__lane_send(f, &h, "x", 1), -EPIPE);
    }
    pm__lane_detach(e);
    pm__lane_detach(f);
    free(e);
    free(f);
    pm__lane_detach(a);
    pm__lane_detach(b);
    pm__lane_detach(c);
    pm__lane_detach(d);
    free(a);
    free(b);
    free(c);
    free(d);
}
END_TEST

/* Order across the lane and the hub: a frame takes the lane only once the
 * peer has taken everything sent to it through the hub, and the hub only
 * once the peer has read everything put on the lane. */
START_TEST(test_order_counts)
{
    pm__lane *a, *b;
    new_pair(&a, &b);
    ck_assert_int_eq(pm__lane_may_send(a), 1);
    ck_assert_int_eq(pm__lane_drained(a), 1);
    pm__lane_sent_via_hub(a);
    pm__lane_sent_via_hub(a);
    ck_assert_int_eq(pm__lane_may_send(a), 0);
    pm__lane_took_from_hub(b);
    ck_assert_int_eq(pm__lane_may_send(a), 0);
    pm__lane_took_from_hub(b);
    ck_assert_int_eq(pm__lane_may_send(a), 1);
    ck_assert_uint_eq(atomic_load(&b->sh->end[1].hub_taken), 2);
    ck_assert_uint_eq(atomic_load(&b->sh->end[0].hub_taken), 0);
    pm__frame_hdr h = msg_hdr(PM__FT_MSG, 0);
    ck_assert_int_eq(pm__lane_send(a, &h, "1", 1), 0);
    ck_assert_int_eq(pm__lane_drained(a), 0);
    pm__frame_hdr g;
    const void *p;
    ck_assert_int_eq(pm__lane_send(a, &h, "2", 1), 0);
    ck_assert_int_eq(pm__lane_recv(b, &g, &p), 1);
    /* Read, but with another frame published behind it the space goes back
     * only when the reader finds the lane empty (or a quarter of it is
     * read, or it sleeps)... */
    ck_assert_int_eq(pm__lane_drained(a), 0);
    /* ...or takes the last frame it knows of: at once (a review of stop
     * 40: a large reply, which waits for the lane to drain and never
     * waits long, was dropped while the reader had not looked again). */
    ck_assert_int_eq(pm__lane_recv(b, &g, &p), 1);
    ck_assert_int_eq(pm__lane_drained(a), 1);
    ck_assert_int_eq(pm__lane_recv(b, &g, &p), 0);
    ck_assert_int_eq(pm__lane_drained(a), 1);
    /* The other direction keeps its own counts. */
    ck_assert_int_eq(pm__lane_may_send(b), 1);
    pm__lane_sent_via_hub(b);
    ck_assert_int_eq(pm__lane_may_send(b), 0);
    pm__lane_took_from_hub(a);
    ck_assert_int_eq(pm__lane_may_send(b), 1);
    pair_free(a, b);
}
END_TEST

/* The ring is bounded: a sender that outruns its reader gets -EAGAIN, and
 * what was accepted arrives whole and in order. */
START_TEST(test_bound_and_order)
{
    pm__lane *a, *b;
    new_pair(&a, &b);
    pm__frame_hdr h = msg_hdr(PM__FT_MSG, 0);
    static char pay[PM__LANE_MAX_PAYLOAD];
    uint32_t sent = 0;
    for (;;) {
        memcpy(pay, &sent, sizeof(sent));
        int rc = pm__lane_send(a, &h, pay, sizeof(pay));
        if (rc == -EAGAIN)
            break;
        ck_assert_int_eq(rc, 0);
        sent++;
    }
    ck_assert_uint_ge(sent, 2);
    ck_assert_uint_le((uint64_t)sent * sizeof(pay), PM__LANE_CAP);
    for (uint32_t i = 0; i < sent; i++) {
        pm__frame_hdr g;
        const void *p;
        ck_assert_int_eq(recv_wait(b, &g, &p), 1);
        uint32_t v;
        memcpy(&v, p, sizeof(v));
        ck_assert_uint_eq(v, i);
    }
    ck_assert_int_eq(pm__lane_send(a, &h, pay, sizeof(pay)), 0);
    pair_free(a, b);
}
END_TEST


/* Three lanes to this end, each with its own pair of doorbells: one wait
 * on all of them. */
typedef struct wait_set {
    int fd[3];
    int mine[3];  /* this end's doorbell of lane k: the peer writes it */
    int peers[3]; /* the peer's doorbell of lane k */
    pm__lane *l[3];
    pm__ring *rx[3];
} wait_set;

static void ws_open(wait_set *w)
{
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(pm__lane_create(&w->fd[k]), 0);
        w->mine[k] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        w->peers[k] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        ck_assert_int_ge(w->mine[k], 0);
        ck_assert_int_ge(w->peers[k], 0);
        w->l[k] = malloc(sizeof(pm__lane));
        ck_assert_int_eq(pm__lane_attach(w->l[k], w->fd[k], 1, &who1, w->peers[k], w->mine[k]), 0);
        w->rx[k] = &w->l[k]->rx;
    }
}

/* The peer end of lane k, in this process or a child. */
static pm__lane *ws_peer(const wait_set *w, int k)
{
    pm__lane *a = malloc(sizeof(*a));
    ck_assert_int_eq(pm__lane_attach(a, w->fd[k], 0, &who0, w->mine[k], w->peers[k]), 0);
    return a;
}

static void ws_close(wait_set *w)
{
    for (int k = 0; k < 3; k++) {
        pm__lane_detach(w->l[k]);
        free(w->l[k]);
        close(w->fd[k]);
        close(w->mine[k]);
        close(w->peers[k]);
    }
}

static void ws_assert_disarmed(const wait_set *w)
{
    for (int k = 0; k < 3; k++)
        ck_assert_uint_eq(atomic_load(&w->rx[k]->sh->cons_waiting), 0);
}

/* A peer process that sends "1" on lane k once told (a byte on *go_w)
 * and once this end sleeps on the lane (its wait flag set): an event,
 * not a delay. Its exit status is 0 when the send went. */
static pid_t ws_peer_sends_once_asleep(const wait_set *w, int k, int *go_w)
{
    int go[2];
    ck_assert_int_eq(pipe(go), 0);
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        pm__lane *a = ws_peer(w, k);
        pm__frame_hdr h = msg_hdr(PM__FT_MSG, 0);
        char x;
        if (read(go[0], &x, 1) != 1)
            _exit(2);
        while (atomic_load(&a->tx.sh->cons_waiting) == 0)
            usleep(100);
        _exit(pm__lane_send(a, &h, "1", 1) == 0 ? 0 : 3);
    }
    close(go[0]);
    *go_w = go[1];
    return pid;
}

static void ws_peer_done(pid_t pid, int go_w)
{
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(go_w);
}

START_TEST(test_wait_many)
{
    wait_set w;
    ws_open(&w);
    int rc0;
    /* Nothing anywhere: a poll returns 0, everything disarmed. */
    ck_assert_int_eq(pm__ring_wait_many(w.rx, 3, 0), 0);
    ws_assert_disarmed(&w);
    /* A frame published before the wait is found by the second look of
     * arming, without the doorbell. */
    pm__lane *p2 = ws_peer(&w, 2);
    pm__frame_hdr h = msg_hdr(PM__FT_MSG, 0);
    ck_assert_int_eq(pm__lane_send(p2, &h, "2", 1), 0);
    uint64_t v;
    while (read(w.mine[2], &v, sizeof(v)) == sizeof(v))
        ; /* the doorbell may have rung: forget it */
    ck_assert_int_eq(pm__ring_wait_many(w.rx, 3, 30000), 1);
    ws_assert_disarmed(&w);
    pm__frame_hdr g;
    const void *p;
    ck_assert_int_eq(pm__lane_recv(w.l[2], &g, &p), 1);
    /* A peer process sends on lane 1 once this end is asleep on all three
     * (it sees the flag of its own lane set). */
    int go;
    pid_t pid = ws_peer_sends_once_asleep(&w, 1, &go);
    ck_assert_int_eq(write(go, "g", 1), 1);
    ck_assert_int_eq(pm__ring_wait_many(w.rx, 3, 30000), 1);
    ws_assert_disarmed(&w);
    ck_assert_int_eq(read(w.mine[1], &v, sizeof(v)), -1); /* drained */
    ck_assert_int_eq(pm__lane_recv(w.l[0], &g, &p), 0);
    ck_assert_int_eq(pm__lane_recv(w.l[1], &g, &p), 1);
    ck_assert_mem_eq(p, "1", 1);
    ck_assert_int_eq(pm__lane_recv(w.l[2], &g, &p), 0);
    ws_peer_done(pid, go);
    /* A ring the peer broke counts as ready: its read says so. */
    pm__lane *p0 = ws_peer(&w, 0);
    atomic_store(&p0->tx.sh->head, 3);
    ck_assert_int_eq(pm__ring_wait_many(w.rx, 3, 30000), 1);
    ws_assert_disarmed(&w);
    ck_assert_int_eq(pm__lane_recv(w.l[0], &g, &p), -EBADMSG);
    /* The others, without it: nothing, on timeout. */
    ck_assert_int_eq(pm__ring_wait_many(w.rx + 1, 2, 20), 0);
    ws_assert_disarmed(&w);
    /* What a wait refuses. */
    ck_assert_int_eq(pm__ring_wait_many(w.rx, 0, 0), -EINVAL);
    pm__ring *many[PM__RINGWAIT_MAX + 1];
    for (unsigned i = 0; i < ARRAY_LEN(many); i++)
        many[i] = w.rx[1];
    ck_assert_int_eq(pm__ring_wait_many(many, PM__RINGWAIT_MAX + 1, 0), -EINVAL);
    ck_assert_int_eq(pm__ring_wait_many(many, PM__RINGWAIT_MAX, 0), 0);
    /* The most a wait takes, every doorbell rung (the same one 32 times):
     * 1, drained; each entry looked at once (one past the set is a read
     * past its array, which the sanitizer build reports). */
    uint64_t one = 1;
    ck_assert_int_eq(write(w.mine[1], &one, sizeof(one)), (ssize_t)sizeof(one));
    ck_assert_int_eq(pm__ring_wait_many(many, PM__RINGWAIT_MAX, 0), 1);
    ck_assert_int_eq(read(w.mine[1], &v, sizeof(v)), -1);
    /* fd 0 is a doorbell like any other (a process started without stdin
     * gets its first eventfd there). */
    int saved_in = dup(0);
    ck_assert_int_ge(saved_in, 0);
    ck_assert_int_eq(dup2(w.mine[2], 0), 0);
    int park2 = w.rx[2]->park_fd;
    w.rx[2]->park_fd = 0;
    rc0 = pm__ring_wait_many(w.rx + 1, 2, 0); /* lane 0's is broken: left out */
    w.rx[2]->park_fd = park2;
    ck_assert_int_eq(dup2(saved_in, 0), 0);
    close(saved_in);
    ck_assert_int_eq(rc0, 0);
    w.rx[2]->park_fd = -1;
    ck_assert_int_eq(pm__ring_wait_many(w.rx, 3, 0), -EINVAL);
    ws_assert_disarmed(&w);
    lane_free(p0);
    lane_free(p2);
    ws_close(&w);
}
END_TEST

/*
 * The edge-triggered wait (ringwait.h pm__ring_wait_edge), as
 * test_wait_many takes the polled one: a frame there before the wait is
 * found by arming, no epoll (none in ev); a peer's send while it sleeps
 * is one edge, its doorbell in ev with the data registered; nothing: 0 on
 * timeout; every ring disarmed on return; refused: no rings, more than
 * PM__RINGWAIT_MAX, no epoll fd (fd 0 is one like any other); *nev is 0
 * whenever no doorbell is given back.
 */
START_TEST(test_wait_edge)
{
    wait_set w;
    ws_open(&w);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    ck_assert_int_ge(ep, 0);
    for (int k = 0; k < 3; k++) {
        struct epoll_event e = {.events = EPOLLIN | EPOLLET, .data.u32 = 100u + (uint32_t)k};
        ck_assert_int_eq(epoll_ctl(ep, EPOLL_CTL_ADD, w.mine[k], &e), 0);
    }
    struct epoll_event ev[PM__RINGWAIT_MAX];
    int nev = 99;
    ck_assert_int_eq(pm__ring_wait_edge(w.rx, 3, ep, 0, ev, &nev), 0);
    ck_assert_int_eq(nev, 0);
    ws_assert_disarmed(&w);
    /* Published before: found by the arm's second look. */
    pm__lane *p2 = ws_peer(&w, 2);
    pm__frame_hdr h = msg_hdr(PM__FT_MSG, 0);
    ck_assert_int_eq(pm__lane_send(p2, &h, "2", 1), 0);
    nev = 99;
    ck_assert_int_eq(pm__ring_wait_edge(w.rx, 3, ep, 30000, ev, &nev), 1);
    ck_assert_int_eq(nev, 0);
    ws_assert_disarmed(&w);
    pm__frame_hdr g;
    const void *p;
    ck_assert_int_eq(pm__lane_recv(w.l[2], &g, &p), 1);
    /* Drain what rang so far: the next edge is the peer's. */
    struct epoll_event junk[3];
    while (epoll_wait(ep, junk, 3, 0) > 0)
        ;
    uint64_t v;
    for (int k = 0; k < 3; k++)
        while (read(w.mine[k], &v, sizeof(v)) == sizeof(v))
            ;
    /* A peer process sends on lane 1 once this end sleeps. */
    int go;
    pid_t pid = ws_peer_sends_once_asleep(&w, 1, &go);
    ck_assert_int_eq(write(go, "g", 1), 1);
    nev = 99;
    ck_assert_int_eq(pm__ring_wait_edge(w.rx, 3, ep, 30000, ev, &nev), 1);
    /* Asleep in epoll_wait: one edge, lane 1's doorbell with its data. (A
     * send that lands between arming's flag and its second look is found
     * there instead, with no edge taken: nev 0; rare, and as right.) */
    ck_assert_int_le(nev, 1);
    if (nev == 1)
        ck_assert_uint_eq(ev[0].data.u32, 101);
    ws_assert_disarmed(&w);
    ck_assert_int_eq(pm__lane_recv(w.l[1], &g, &p), 1);
    ck_assert_mem_eq(p, "1", 1);
    ws_peer_done(pid, go);
    /* Nothing: 0 on timeout, no doorbell given back. */
    nev = 99;
    ck_assert_int_eq(pm__ring_wait_edge(w.rx, 3, ep, 20, ev, &nev), 0);
    ck_assert_int_eq(nev, 0);
    ws_assert_disarmed(&w);
    /* A doorbell rung with no frame behind it (a spurious wake-up, or one
     * whose frame was read already): its edge is given back, 1. */
    uint64_t one = 1;
    ck_assert_int_eq(write(w.mine[2], &one, sizeof(one)), (ssize_t)sizeof(one));
    nev = 99;
    ck_assert_int_eq(pm__ring_wait_edge(w.rx, 3, ep, 30000, ev, &nev), 1);
    ck_assert_int_eq(nev, 1);
    ck_assert_uint_eq(ev[0].data.u32, 102);
    ws_assert_disarmed(&w);
    ck_assert_int_eq(read(w.mine[2], &v, sizeof(v)), (ssize_t)sizeof(v)); /* not drained: edges */
    /* What it refuses, *nev 0 each time. */
    pm__ring *many[PM__RINGWAIT_MAX + 1];
    for (unsigned i = 0; i < ARRAY_LEN(many); i++)
        many[i] = w.rx[1];
    nev = 99;
    ck_assert_int_eq(pm__ring_wait_edge(w.rx, 0, ep, 0, ev, &nev), -EINVAL);
    ck_assert_int_eq(nev, 0);
    ck_assert_int_eq(pm__ring_wait_edge(many, PM__RINGWAIT_MAX + 1, ep, 0, ev, &nev), -EINVAL);
    ck_assert_int_eq(pm__ring_wait_edge(w.rx, 3, -1, 0, ev, &nev), -EINVAL);
    ws_assert_disarmed(&w);
    ck_assert_int_eq(pm__ring_wait_edge(many, PM__RINGWAIT_MAX, ep, 0, ev, &nev), 0);
    int saved_in = dup(0);
    ck_assert_int_ge(saved_in, 0);
    ck_assert_int_eq(dup2(ep, 0), 0);
    int rc0 = pm__ring_wait_edge(w.rx, 3, 0, 0, ev, &nev);
    ck_assert_int_eq(dup2(saved_in, 0), 0);
    close(saved_in);
    ck_assert_int_eq(rc0, 0);
    close(ep);
    lane_free(p2);
    ws_close(&w);
}
END_TEST

/* Open fds of this process. */
static int lane_open_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        n += fcntl(fd, F_GETFD) >= 0;
    return n;
}

/*
 * A lane's making and its end's detach, at their edges (lane.c): fd 0 is
 * a memfd like any other (a process started without stdin); a lane
 * larger than RLIMIT_FSIZE allows is refused -EFBIG before any memfd is
 * made (no SIGXFSZ, which would end the supervisor); a detached
 * end no longer maps the lane, and a second detach touches nothing (a
 * mapping made since at the same address survives it).
 */
START_TEST(test_lane_create_detach_edges)
{
    int saved_in = dup(0);
    ck_assert_int_ge(saved_in, 0);
    close(0);
    int fd = -1;
    int rc = pm__lane_create(&fd);
    int at0 = fd;
    if (rc == 0)
        fd = fcntl(fd, F_DUPFD_CLOEXEC, 3); /* the lane moved aside, stdin back */
    ck_assert_int_eq(dup2(saved_in, 0), 0);
    close(saved_in);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(at0, 0);
    ck_assert_int_ge(fd, 3);

    /* SIGXFSZ left at its default, which ends the process: the size is
     * asked first (the supervisor makes lanes). */
    struct rlimit was, small;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &was), 0);
    small = was;
    small.rlim_cur = 4096;
    int before = lane_open_fds();
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
    int fd2 = -1;
    rc = pm__lane_create(&fd2);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &was), 0);
    ck_assert_int_eq(rc, -EFBIG);
    ck_assert_int_eq(fd2, -1);
    ck_assert_int_eq(lane_open_fds(), before);

    int peer = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), mine = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ck_assert_int_ge(peer, 0);
    ck_assert_int_ge(mine, 0);
    pm__lane *l = malloc(sizeof(*l));
    ck_assert_int_eq(pm__lane_attach(l, fd, 1, &who1, peer, mine), 0);
    void *at = l->map;
    pm__lane_detach(l);
    ck_assert_ptr_null(l->map);
    ck_assert_int_eq(msync(at, PM__LANE_SIZE, MS_ASYNC), -1); /* no longer mapped */
    ck_assert_int_eq(errno, ENOMEM);
    void *mine_now = mmap(at, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                          -1, 0);
    ck_assert_ptr_eq(mine_now, at);
    memset(mine_now, 'k', 4096);
    pm__lane_detach(l);
    ck_assert_int_eq(((unsigned char *)mine_now)[4095], 'k');
    munmap(mine_now, 4096);
    free(l);
    close(fd);
    close(peer);
    close(mine);
}
END_TEST

/* A reader hands space back every quarter of the ring (lane.h), not
 * only when it has read all there is: with the ring full of 256-byte
 * records, reading exactly a quarter of them frees room for the writer's
 * next frame, and one record fewer does not. */
START_TEST(test_lane_quarter_release)
{
    pm__lane *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
    int fd = make_pair(a, b);
    close(fd);
    static char pay[256 - 8 - PM__FRAME_HDR_SIZE];
    pm__frame_hdr h = msg_hdr(PM__FT_MSG, 0);
    unsigned sent = 0;
    while (pm__lane_send(b, &h, pay, sizeof(pay)) == 0)
        sent++;
    ck_assert_uint_eq(sent, PM__LANE_CAP / 256); /* exactly full */
    pm__frame_hdr g;
    const void *p;
    for (unsigned i = 0; i + 1 < PM__LANE_CAP / 4 / 256; i++)
        ck_assert_int_eq(pm__lane_recv(a, &g, &p), 1);
    ck_assert_int_eq(pm__lane_send(b, &h, pay, sizeof(pay)), -EAGAIN);
    ck_assert_int_eq(pm__lane_recv(a, &g, &p), 1); /* the quarter's last */
    ck_assert_int_eq(pm__lane_send(b, &h, pay, sizeof(pay)), 0);
    pm__lane_detach(a);
    pm__lane_detach(b);
    free(a);
    free(b);
}
END_TEST

static volatile sig_atomic_t wait_usr1;

static void on_wait_usr1(int sig)
{
    (void)sig;
    wait_usr1++;
}

/* In a child (its exit status says how it went): a SIGUSR1 handler
 * without SA_RESTART, then one wait on w's rings, polled or, with ep >= 0,
 * edge-triggered. 0 when the wait returned 0 once the signal came. */
static pid_t waiter_until_signal(const wait_set *w, int ep)
{
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid != 0)
        return pid;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_wait_usr1;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0)
        _exit(2);
    wait_usr1 = 0;
    int rc, nev = -1;
    if (ep < 0) {
        rc = pm__ring_wait_many(w->rx, 3, 60000);
        nev = 0;
    } else {
        struct epoll_event ev[3];
        rc = pm__ring_wait_edge(w->rx, 3, ep, 60000, ev, &nev);
    }
    _exit(rc == 0 && nev == 0 && wait_usr1 == 1 ? 0 : rc < 0 ? 3 : 4);
}

/* A signal while a wait sleeps (a handler without SA_RESTART: poll and
 * epoll_wait say EINTR) ends it with 0, "on timeout or a signal"
 * (ringwait.h), not an error: the caller looks at its rings and waits
 * again. Both waits, each in a child that the test signals once it sleeps
 * in the call; every ring disarmed after. */
START_TEST(test_wait_signal)
{
    wait_set w;
    ws_open(&w);
    static const long polls[] = {SYS_poll, SYS_ppoll};
    pid_t kid = waiter_until_signal(&w, -1);
    int k = pm_test_signal_when_in(kid, polls, ARRAY_LEN(polls));
    if (k < 0)
        kill(kid, SIGKILL);
    int st;
    ck_assert_int_eq(waitpid(kid, &st, 0), kid);
    ck_assert_msg(k == 0, "the wait was not seen in poll: /proc/%d/syscall: %s", (int)kid, strerror(-k));
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the polled wait: status %#x", st);
    ws_assert_disarmed(&w);

    int ep = epoll_create1(EPOLL_CLOEXEC);
    ck_assert_int_ge(ep, 0);
    for (int i = 0; i < 3; i++) {
        struct epoll_event e = {.events = EPOLLIN | EPOLLET, .data.u32 = (uint32_t)i};
        ck_assert_int_eq(epoll_ctl(ep, EPOLL_CTL_ADD, w.mine[i], &e), 0);
    }
    static const long epolls[] = {SYS_epoll_wait, SYS_epoll_pwait, 441 /* epoll_pwait2 */};
    kid = waiter_until_signal(&w, ep);
    k = pm_test_signal_when_in(kid, epolls, ARRAY_LEN(epolls));
    if (k < 0)
        kill(kid, SIGKILL);
    ck_assert_int_eq(waitpid(kid, &st, 0), kid);
    ck_assert_msg(k == 0, "the wait was not seen in epoll_wait: %s", strerror(-k));
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the edge wait: status %#x", st);
    ws_assert_disarmed(&w);
    close(ep);
    ws_close(&w);
}
END_TEST

/* Review (lanereview): a peer that floods its lane with frames the rules
 * refuse, as fast as the receiver drops them, must not hold the receiver
 * inside one pm__lane_recv (its hub ring and other lanes wait meanwhile:
 * "a peer that floods its lane delays only its own frames"). The peer
 * process refills the ring as soon as space comes back (for one store of
 * its index: the records of the last lap are still there); one call of
 * the receiver reads at most what was published when it first looked: a
 * ring's worth of records at most. Before the fix the call went on for as
 * long as the peer kept up: here ~1 million frames, all it sent. */
START_TEST(test_flood_refused_bounded_per_call)
{
    int fd, full[2];
    ck_assert_int_eq(pm__lane_create(&fd), 0);
    ck_assert_int_eq(pipe(full), 0);
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        pm__lane *a = malloc(sizeof(*a));
        if (pm__lane_attach(a, fd, 0, &who0, -1, -1) != 0)
            _exit(2);
        pm__frame_hdr h = msg_hdr(PM__FT_MSG, 0);
        h.dst = 4; /* not the receiver's slot: refused (DROP_DST) */
        /* 128-byte records: a lap of the ring holds 512 of them, so the
         * records written once stay valid at the same places lap after
         * lap, and refilling the ring costs the flooder one store: its
         * index moved a ring ahead of the reader's. */
        char pay[64];
        memset(pay, 'f', sizeof(pay));
        int rc;
        while ((rc = pm__frame_send(&a->tx, &h, pay, sizeof(pay))) == 0)
            ;
        if (rc != -EAGAIN || pm__ring_head(&a->tx) != PM__LANE_CAP)
            _exit(3);
        if (write(full[1], "f", 1) != 1)
            _exit(4);
        uint64_t head = PM__LANE_CAP;
        while (head < 2000 * PM__LANE_CAP) {
            uint64_t t = atomic_load_explicit(&a->tx.sh->tail, memory_order_acquire);
            if (t + PM__LANE_CAP > head && t <= head && (t & 127) == 0) {
                head = t + PM__LANE_CAP;
                atomic_store_explicit(&a->tx.sh->head, head, memory_order_release);
            }
        }
        _exit(0);
    }
    pm__lane *b = malloc(sizeof(*b));
    ck_assert_int_eq(pm__lane_attach(b, fd, 1, &who1, -1, -1), 0);
    close(fd);
    char x;
    ssize_t got = read(full[0], &x, 1); /* the ring is full: an event, not a delay */
    pm__frame_hdr g;
    const void *p;
    int rc = got == 1 ? pm__lane_recv(b, &g, &p) : -1;
    uint64_t one_call = b->dropped[PM__LANE_DROP_DST];
    kill(pid, SIGKILL);
    ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
    ck_assert_int_eq(got, 1);
    ck_assert_int_eq(rc, 0);
    /* A record is at least 16 bytes: a ring holds at most cap / 16. */
    ck_assert_msg(one_call <= PM__LANE_CAP / 16, "one call dropped %llu frames",
                  (unsigned long long)one_call);
    ck_assert_uint_gt(one_call, 0);
    close(full[0]);
    close(full[1]);
    pm__lane_detach(b);
    free(b);
}
END_TEST

/* Review (lanereview): a frame that straddles the revocation's index once
 * the reader's view of the producer index could move past it. Since the
 * revocation copies the ring, the reader's view stops at the index: the
 * dead writer published an index in the middle of its frame, a process
 * still mapping the lane publishes the rest and another frame, and the
 * reader never sees them; the straddling frame is a broken ring. */
START_TEST(test_revoke_straddle_after_refresh)
{
    pm__lane *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
    int fd;
    ck_assert_int_eq(pm__lane_create(&fd), 0);
    int bell_a = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), bell_b = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ck_assert_int_ge(bell_a, 0);
    ck_assert_int_ge(bell_b, 0);
    ck_assert_int_eq(pm__lane_attach(a, fd, 0, &who0, bell_b, bell_a), 0);
    ck_assert_int_eq(pm__lane_attach(b, fd, 1, &who1, bell_a, bell_b), 0);
    close(fd);
    pm__frame_hdr h = msg_hdr(PM__FT_MSG, 0);
    ck_assert_int_eq(pm__lane_send(a, &h, "1", 1), 0);
    uint64_t first = pm__ring_head(&a->tx);
    ck_assert_int_eq(pm__lane_send(a, &h, "22222222", 8), 0);
    /* The writer's last index, mid-frame: then it is gone, revoked. */
    atomic_store(&a->tx.sh->head, first + 16);
    ck_assert_int_eq(pm__lane_revoke(b), 0);
    ck_assert_uint_eq(b->limit, first + 16);
    /* The outliver: the whole second frame, then a third. */
    atomic_store(&a->tx.sh->head, pm__ring_head(&a->tx));
    a->tx.published = pm__ring_head(&a->tx);
    ck_assert_int_eq(pm__lane_send(a, &h, "3", 1), 0);
    /* Whatever looks at the producer index again sees the limit, never
     * beyond (pm__ring_beyond, scan and arm_beyond refresh it too). */
    ck_assert_int_eq(pm__ring_beyond(&b->rx, 0), 1);
    ck_assert_uint_eq(b->rx.head_cache, b->limit);
    pm__ring *rx = &b->rx;
    pm__frame_hdr g;
    const void *p;
    ck_assert_int_eq(pm__lane_recv(b, &g, &p), 1);
    ck_assert_mem_eq(p, "1", 1);
    /* The straddling frame: a broken ring, never read, for good. */
    ck_assert_int_eq(pm__lane_recv(b, &g, &p), -EBADMSG);
    ck_assert_int_eq(pm__lane_recv(b, &g, &p), -EBADMSG);
    ck_assert_uint_eq(b->delivered, 1);
    /* Review finding (low): such a lane stays ready for every wait, for
     * ever: ringwait.h says the caller must leave a broken or revoked
     * lane out of its next wait. */
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(pm__ring_wait_many(&rx, 1, 10000), 1); /* at once, not after 10 s */
        ck_assert_int_eq(pm__lane_recv(b, &g, &p), -EBADMSG);
    }
    pair_free(a, b);
    close(bell_a);
    close(bell_b);
}
END_TEST

/* Review finding (medium, fixed): the revocation fenced by index only. A
 * process that still maps the lane after the revocation (the outliver of
 * test_revoke_writer_outlived, or anyone the worker passed the fd to)
 * could not add frames past the limit, but it could rewrite the unread
 * frames below it, and the receiver delivered the rewritten bytes. The
 * revocation now copies the ring's bytes once, and the receiver reads the
 * copy: the frames as they were at the revocation. */
START_TEST(test_revoke_rewrite_below_limit)
{
    pm__lane *a, *b;
    new_pair(&a, &b);
    pm__frame_hdr h = msg_hdr(PM__FT_MSG, 0);
    uint64_t at[3];
    for (int i = 0; i < 3; i++) {
        at[i] = pm__ring_head(&a->tx);
        char c = (char)('1' + i);
        ck_assert_int_eq(pm__lane_send(a, &h, &c, 1), 0);
    }
    ck_assert_int_eq(pm__lane_revoke(b), 0);
    /* After the revocation: the outliver rewrites frame 2's payload and
     * retargets frame 3's type, in place, below the limit. */
    unsigned char *f2 = a->tx.data + (at[1] & a->tx.mask) + PM__RING_REC_HDR;
    f2[PM__FRAME_HDR_SIZE] = 'X';
    unsigned char *f3 = a->tx.data + (at[2] & a->tx.mask) + PM__RING_REC_HDR;
    pm__frame_hdr rq = msg_hdr(PM__FT_REQUEST, 99);
    rq.dst = who1.self_slot;
    rq.len = 1;
    pm__frame_encode(&rq, f3);
    pm__frame_hdr g;
    const void *p;
    /* What was there at the revocation, and nothing rewritten after it
     * (before the copy at revocation, "X" and the made-up request were
     * read). */
    for (char c = '1'; c <= '3'; c++) {
        ck_assert_int_eq(pm__lane_recv(b, &g, &p), 1);
        ck_assert_uint_eq(g.type, PM__FT_MSG);
        ck_assert_int_eq(*(const char *)p, c);
    }
    ck_assert_int_eq(pm__lane_recv(b, &g, &p), 0);
    ck_assert_int_eq(pm__lane_recv(b, &g, &p), 0);
    pair_free(a, b);
}
END_TEST

/* Review finding (low, for the node's use of lanes; not fixed): the lazy
 * release hands space back when the reader finds its lane empty, reads a
 * quarter of it, or sleeps as a reader (pm__ring_arm, pm__ring_wait), but
 * not when it sleeps as a writer: a worker that read a frame and then
 * waits for room on its own side of the lane (pm__ring_wait_space on tx)
 * keeps the space of what it read, so its peer waiting for room can stay
 * blocked on frames already read (with a release per frame it would not).
 * A wait for room on a lane must hand the reader's space back first. */
START_TEST(test_reader_asleep_as_writer_keeps_space)
{
    pm__lane *a, *b;
    new_pair(&a, &b);
    pm__frame_hdr h = msg_hdr(PM__FT_MSG, 0);
    char pay[64]; /* 128-byte records: 512 fill a ring exactly */
    memset(pay, 'p', sizeof(pay));
    unsigned n = 0;
    while (pm__lane_send(a, &h, pay, sizeof(pay)) == 0)
        n++;
    ck_assert_uint_eq(n, PM__LANE_CAP / 128);
    pm__frame_hdr g;
    const void *p;
    ck_assert_int_eq(pm__lane_recv(b, &g, &p), 1); /* b has read one of a's frames */
    ck_assert_int_eq(pm__lane_send(a, &h, pay, sizeof(pay)), -EAGAIN);
    /* b fills its own side and waits for room there. */
    while (pm__lane_send(b, &h, pay, sizeof(pay)) == 0)
        ;
    ck_assert_int_eq(pm__ring_wait_space(&b->tx, PM__FRAME_HDR_SIZE + sizeof(pay), 20), 0);
    /* a still cannot send the frame b has read: both wait for room. */
    ck_assert_int_eq(pm__lane_send(a, &h, pay, sizeof(pay)), -EAGAIN);
    /* A wait as a reader would have handed it back. */
    ck_assert_int_eq(pm__ring_wait(&b->rx, 0), 1);
    ck_assert_int_eq(pm__lane_send(a, &h, pay, sizeof(pay)), 0);
    pair_free(a, b);
}
END_TEST

/* Review finding (medium, for the broker's hand-over; not fixed): the
 * ordering counts start at 0 on each end when it attaches, at different
 * moments, with no common origin. Frames a sent b through the hub before
 * a attached are in no count of a's, but b counts them as taken if it
 * takes them after attaching: b's count then covers frames of a's sent
 * after them, still in flight, and a lane frame overtakes them. Here b
 * takes one of two frames a sent before the lane; a sends one more
 * through the hub; a may already send on the lane, ahead of two frames
 * b has not taken. Both counts need one origin (e.g. counted per pair
 * from the incarnations' start, or the supervisor hands each end the
 * other's count at the hand-over, in the hub's order). */
START_TEST(test_order_counts_origin)
{
    pm__lane *a, *b;
    new_pair(&a, &b);
    pm__lane_took_from_hub(b); /* the first of a's two frames from before the lane */
    pm__lane_sent_via_hub(a);  /* a's third frame, through the hub */
    ck_assert_int_eq(pm__lane_may_send(a), 1); /* frames 2 and 3 not taken yet */
    pair_free(a, b);
}
END_TEST

static void on_alarm(int sig)
{
    (void)sig;
}

/* Review finding (high, fixed: src/os/doorbell.c): a doorbell is an
 * eventfd whose open file description both ends share (the peer writes
 * it; a fork, or SCM_RIGHTS, passes the description, not a copy), and
 * O_NONBLOCK belongs to the description. The peer clears it (fcntl
 * F_SETFL, or ioctl FIONBIO), rings, and drains the count itself before
 * the woken receiver reads it: a plain read() in poll_all (ringwait.c;
 * park() in ring.c, and the supervisor's read of each worker's hub_efd,
 * the same) then blocked until the peer wrote again, which it never did:
 * a wait of 50 ms held until a 1 s timer signal broke it. Each drain now
 * asks for EAGAIN on the call itself (preadv2 RWF_NOWAIT): no wait here
 * lasts until the timer, in as many rounds as it took before to hang. */
START_TEST(test_doorbell_made_blocking)
{
    int fd, ready[2];
    ck_assert_int_eq(pm__lane_create(&fd), 0);
    ck_assert_int_eq(pipe(ready), 0);
    int mine = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), peers = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ck_assert_int_ge(mine, 0);
    ck_assert_int_ge(peers, 0);
    pm__lane *b = malloc(sizeof(*b));
    ck_assert_int_eq(pm__lane_attach(b, fd, 1, &who1, peers, mine), 0);
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        pm__lane *a = malloc(sizeof(*a));
        if (pm__lane_attach(a, fd, 0, &who0, mine, peers) != 0)
            _exit(2);
        int fl = fcntl(mine, F_GETFL);
        if (fl < 0 || fcntl(mine, F_SETFL, fl & ~O_NONBLOCK) != 0)
            _exit(3);
        struct sigaction ca;
        memset(&ca, 0, sizeof(ca));
        ca.sa_handler = on_alarm;
        if (sigaction(SIGALRM, &ca, NULL) != 0 || write(ready[1], "r", 1) != 1)
            _exit(4);
        uint64_t seed = 5;
        for (;;) {
            while (atomic_load(&a->tx.sh->cons_waiting) == 0)
                ;
            uint64_t v = 1;
            if (write(mine, &v, sizeof(v)) != sizeof(v))
                _exit(5);
            /* Drain it once the receiver's poll has seen it, before its
             * read: a guess, tried again at each wake-up it causes. */
            uint64_t until = pm__now_ns() + 2000 + pm_test_rand(&seed) % 60000;
            while (pm__now_ns() < until)
                ;
            struct itimerval it = {.it_value = {.tv_sec = 0, .tv_usec = 20000}};
            (void)setitimer(ITIMER_REAL, &it, NULL);
            (void)read(mine, &v, sizeof(v)); /* the peer drains its receiver's doorbell */
            struct itimerval off;
            memset(&off, 0, sizeof(off));
            (void)setitimer(ITIMER_REAL, &off, NULL);
            while (atomic_load(&a->tx.sh->cons_waiting) != 0)
                ;
        }
    }
    char x;
    ck_assert_int_eq(read(ready[0], &x, 1), 1);
    /* The peer changed the receiver's own fd: it blocks now. */
    ck_assert_int_eq(fcntl(mine, F_GETFL) & O_NONBLOCK, 0);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm; /* no SA_RESTART: the blocked read ends with EINTR */
    ck_assert_int_eq(sigaction(SIGALRM, &sa, &old), 0);
    pm__ring *rx = &b->rx;
    uint64_t worst = 0;
    /* Exposure, not a verdict: 6 s of rounds (the unfixed read blocked
     * within a few seconds here; test_doorbell_drain below is the verdict
     * on the drain itself); each round is one wake-up, or the peer's own
     * read broken by its 20 ms timer when we drained first. */
    uint64_t stop_at = pm__now_ns() + 6000000000ull;
    for (int round = 0; round < 20000 && worst < 900000000u && pm__now_ns() < stop_at; round++) {
        struct itimerval it = {.it_value = {.tv_sec = 1, .tv_usec = 0}};
        ck_assert_int_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
        uint64_t t0 = pm__now_ns();
        (void)pm__ring_wait_many(&rx, 1, 50);
        uint64_t took = pm__now_ns() - t0;
        struct itimerval off;
        memset(&off, 0, sizeof(off));
        ck_assert_int_eq(setitimer(ITIMER_REAL, &off, NULL), 0);
        if (took > worst)
            worst = took;
    }
    kill(pid, SIGKILL);
    ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
    sigaction(SIGALRM, &old, NULL);
    /* No wait of 50 ms held until the 1 s timer broke a read. */
    ck_assert_msg(worst < 900000000u, "a wait was held %llu ns", (unsigned long long)worst);
    close(fd);
    close(mine);
    close(peers);
    close(ready[0]);
    close(ready[1]);
    pm__lane_detach(b);
    free(b);
}
END_TEST

/* The drain itself, on an eventfd another holder made blocking: with a
 * count it takes it; empty it returns at once (a 5 s timer is the safety
 * net: a read that blocked would be broken by it, and the test fails). */
START_TEST(test_doorbell_drain)
{
    int fd = eventfd(0, 0); /* blocking, as a peer can make it */
    ck_assert_int_ge(fd, 0);
    uint64_t one = 1, v;
    ck_assert_int_eq(write(fd, &one, sizeof(one)), (ssize_t)sizeof(one));
    errno = 1234;
    pm__doorbell_drain(fd);
    ck_assert_int_eq(errno, 1234); /* kept */
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ck_assert_int_eq(poll(&p, 1, 0), 0); /* taken */
    struct sigaction sa, old;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm;
    ck_assert_int_eq(sigaction(SIGALRM, &sa, &old), 0);
    struct itimerval it = {.it_value = {.tv_sec = 5, .tv_usec = 0}}, off, left;
    memset(&off, 0, sizeof(off));
    ck_assert_int_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
    for (int i = 0; i < 1000; i++)
        pm__doorbell_drain(fd);
    ck_assert_int_eq(setitimer(ITIMER_REAL, &off, &left), 0);
    ck_assert(left.it_value.tv_sec > 0 || left.it_value.tv_usec > 0); /* the timer never fired */
    sigaction(SIGALRM, &old, NULL);
    (void)v;
    close(fd);
}
END_TEST

#if defined(PM_AUDIT_ARCH) && defined(__NR_preadv2)
#define PM_CAN_ANSWER_PREADV2 1
/* In a child of the test: a blocking eventfd holding a count, preadv2
 * answered -err by a seccomp filter, then a drain with errno at 1234.
 * Exits 0 when the drain did what doorbell.c says (err a refusal: the
 * count taken by the read() fallback; err EINTR: the count left for the
 * next wait, and a drain of the empty doorbell returns), 4 to 6 when not,
 * 2 when the filter cannot be installed, 3 when the eventfd cannot be
 * made; a drain that blocks is killed by the test's bound. */
static void drain_answered(int err)
{
    int fd = eventfd(0, EFD_CLOEXEC); /* blocking, as a peer can make it */
    uint64_t one = 1, v;
    if (fd < 0 || write(fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        _exit(3);
    if (pm_test_answer(__NR_preadv2, PM_ANSWER_ANY, 0, err) != 0)
        _exit(2);
    errno = 1234;
    pm__doorbell_drain(fd);
    if (errno != 1234)
        _exit(4);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int left = poll(&p, 1, 0);
    if (err != EINTR)
        _exit(left == 0 ? 0 : 5);
    if (left != 1 || read(fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
        _exit(6);
    pm__doorbell_drain(fd); /* empty and blocking: returns */
    _exit(0);
}
#endif

/* The drain where preadv2 is refused (a kernel before 5.12 answers
 * EOPNOTSUPP for RWF_NOWAIT; a seccomp filter, ENOSYS or EPERM): read()
 * takes the count. Where it is interrupted (EINTR): no read(), which could
 * block. */
START_TEST(test_doorbell_drain_answered)
{
#ifdef PM_CAN_ANSWER_PREADV2
    static const int errs[] = {EOPNOTSUPP, ENOSYS, EPERM, EINTR};
    for (size_t i = 0; i < ARRAY_LEN(errs); i++) {
        pid_t pid = pm_test_fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0)
            drain_answered(errs[i]);
        int st = pm_test_reap(pid, 10000);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 2) {
            fprintf(stderr, "test_doorbell_drain_answered: no seccomp filter here: not tested\n");
            return;
        }
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                      "preadv2 answered %s: status %d (-1: the drain blocked)", strerror(errs[i]),
                      st);
    }
#else
    fprintf(stderr,
            "test_doorbell_drain_answered: no seccomp filter for this architecture: not tested\n");
#endif
}
END_TEST

/* ------------------------------------------------------------------ the broker's book */

START_TEST(test_book_counts_then_lane)
{
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, 0), -EINVAL);
    ck_assert_int_eq(pm__lanebook_init(&b, 4), 0);
    /* Both directions add up; the pair earns a lane at the threshold. */
    for (unsigned i = 1; i < PM__LANEBOOK_AFTER; i++)
        ck_assert_int_eq(i % 2 ? pm__lanebook_count(&b, 2, 20, 1, 10)
                               : pm__lanebook_count(&b, 1, 10, 2, 20), 0);
    ck_assert_int_eq(pm__lanebook_count(&b, 2, 20, 1, 10), 1);
    pm__lanebook_lane l;
    ck_assert_int_eq(pm__lanebook_add(&b, 2, 20, 1, 10, &l), 0);
    ck_assert_uint_eq(l.gen, 1);
    ck_assert_uint_eq(l.end[0].slot, 1); /* the lower slot writes ring 0 */
    ck_assert_uint_eq(l.end[0].inc, 10);
    ck_assert_uint_eq(l.end[1].slot, 2);
    ck_assert_uint_eq(l.end[1].inc, 20);
    ck_assert_uint_eq(l.end[0].index, 0);
    ck_assert_uint_eq(l.end[1].index, 0);
    ck_assert_ptr_nonnull(pm__lanebook_find(&b, 1, 10, 2, 20));
    ck_assert_ptr_nonnull(pm__lanebook_find(&b, 2, 20, 1, 10));
    ck_assert_ptr_null(pm__lanebook_find(&b, 2, 21, 1, 10));
    ck_assert_uint_eq(pm__lanebook_held(&b, 1), 1);
    ck_assert_uint_eq(pm__lanebook_held(&b, 3), 0);
    ck_assert_uint_eq(pm__lanebook_held(&b, 4), 0); /* out of range */
    /* A pair with a lane earns no second one. */
    ck_assert_int_eq(pm__lanebook_count(&b, 1, 10, 2, 20), 0);
    ck_assert_int_eq(pm__lanebook_add(&b, 1, 10, 2, 20, &l), -EEXIST);
    /* What the book refuses. */
    ck_assert_int_eq(pm__lanebook_add(&b, 1, 10, 1, 10, &l), -EINVAL);
    ck_assert_int_eq(pm__lanebook_add(&b, 1, 10, 4, 1, &l), -EINVAL);
    ck_assert_int_eq(pm__lanebook_add(&b, 4, 1, 1, 10, &l), -EINVAL);
    ck_assert_int_eq(pm__lanebook_count(&b, 3, 1, 3, 1), 0);
    ck_assert_int_eq(pm__lanebook_count(&b, 3, 1, 9, 1), 0);
    ck_assert_int_eq(pm__lanebook_count(&b, 9, 1, 3, 1), 0);
    /* Another incarnation of a slot is another pair. */
    ck_assert_int_eq(pm__lanebook_add(&b, 1, 11, 2, 20, &l), 0);
    ck_assert_uint_eq(l.gen, 2);
    ck_assert_uint_eq(l.end[0].index, 1);
    ck_assert_uint_eq(l.end[1].index, 1);
    pm__lanebook_free(&b);
}
END_TEST

START_TEST(test_book_bound)
{
    pm__lanebook b;
    unsigned n = PM__LANEBOOK_PER_WORKER + 2;
    ck_assert_int_eq(pm__lanebook_init(&b, n), 0);
    pm__lanebook_lane l;
    for (unsigned s = 1; s <= PM__LANEBOOK_PER_WORKER; s++) {
        ck_assert_int_eq(pm__lanebook_add(&b, 0, 1, s, 1, &l), 0);
        ck_assert_uint_eq(l.end[0].index, s - 1);
    }
    ck_assert_uint_eq(pm__lanebook_held(&b, 0), PM__LANEBOOK_PER_WORKER);
    unsigned last = PM__LANEBOOK_PER_WORKER + 1;
    ck_assert_int_eq(pm__lanebook_add(&b, 0, 1, last, 1, &l), -ENOSPC);
    ck_assert_int_eq(pm__lanebook_add(&b, last, 1, 0, 1, &l), -ENOSPC);
    /* Past the bound a pair keeps counting but earns nothing. */
    for (unsigned i = 0; i < 2 * PM__LANEBOOK_AFTER; i++)
        ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, last, 1), 0);
    /* One of slot 0's peers ends: the index is free, the pair waiting
     * at its count earns its lane with its next frame. */
    pm__lanebook_lane gone[PM__LANEBOOK_PER_WORKER];
    ck_assert_uint_eq(pm__lanebook_end_of(&b, 3, 1, gone, PM__LANEBOOK_PER_WORKER), 1);
    ck_assert_uint_eq(gone[0].end[0].slot, 0);
    ck_assert_uint_eq(gone[0].end[0].index, 2);
    ck_assert_uint_eq(gone[0].end[1].slot, 3);
    ck_assert_uint_eq(pm__lanebook_held(&b, 0), PM__LANEBOOK_PER_WORKER - 1);
    ck_assert_uint_eq(pm__lanebook_held(&b, 3), 0);
    ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, last, 1), 1);
    ck_assert_int_eq(pm__lanebook_add(&b, 0, 1, last, 1, &l), 0);
    ck_assert_uint_eq(l.end[0].index, 2); /* reused at once */
    ck_assert_uint_gt(l.gen, gone[0].gen); /* never the old lane's number */
    pm__lanebook_free(&b);
}
END_TEST

START_TEST(test_book_end_of)
{
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, 6), 0);
    pm__lanebook_lane l, gone[PM__LANEBOOK_PER_WORKER];
    for (unsigned s = 1; s < 6; s++)
        ck_assert_int_eq(pm__lanebook_add(&b, 0, 7, s, 1, &l), 0);
    ck_assert_int_eq(pm__lanebook_add(&b, 1, 1, 2, 1, &l), 0);
    /* Another incarnation of slot 0 ended: not these lanes'. */
    ck_assert_uint_eq(pm__lanebook_end_of(&b, 0, 6, gone, PM__LANEBOOK_PER_WORKER), 0);
    ck_assert_uint_eq(pm__lanebook_end_of(&b, 9, 7, gone, PM__LANEBOOK_PER_WORKER), 0);
    /* A small cap: the rest on the next calls, none lost. */
    ck_assert_uint_eq(pm__lanebook_end_of(&b, 0, 7, gone, 2), 2);
    ck_assert_uint_eq(pm__lanebook_end_of(&b, 0, 7, gone + 2, 2), 2);
    ck_assert_uint_eq(pm__lanebook_end_of(&b, 0, 7, gone + 4, 2), 1);
    ck_assert_uint_eq(pm__lanebook_end_of(&b, 0, 7, gone, 2), 0);
    ck_assert_uint_eq(pm__lanebook_held(&b, 0), 0);
    ck_assert_uint_eq(pm__lanebook_held(&b, 1), 1); /* its lane to slot 2 stays */
    ck_assert_ptr_nonnull(pm__lanebook_find(&b, 1, 1, 2, 1));
    /* The ended incarnation's counts are gone: its successor starts again,
     * in both rows it was counted in. */
    for (unsigned i = 1; i < PM__LANEBOOK_AFTER; i++) {
        pm__lanebook_count(&b, 0, 7, 3, 1);
        pm__lanebook_count(&b, 5, 2, 4, 1);
    }
    pm__lanebook_lane g2[PM__LANEBOOK_PER_WORKER];
    ck_assert_uint_eq(pm__lanebook_end_of(&b, 0, 7, g2, PM__LANEBOOK_PER_WORKER), 0);
    ck_assert_uint_eq(pm__lanebook_end_of(&b, 5, 2, g2, PM__LANEBOOK_PER_WORKER), 0);
    ck_assert_int_eq(pm__lanebook_count(&b, 0, 7, 3, 1), 0);
    ck_assert_int_eq(pm__lanebook_count(&b, 5, 2, 4, 1), 0);
    pm__lanebook_free(&b);
}
END_TEST

/* A row counts PM__LANEBOOK_COUNTED peers; a new one replaces the one
 * with the fewest frames, so a busy pair is not forgotten for a passer-by. */
START_TEST(test_book_count_row)
{
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, 8), 0);
    for (unsigned i = 0; i < PM__LANEBOOK_AFTER - 1; i++)
        ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 1, 1), 0);
    for (unsigned p = 2; p < 2 + PM__LANEBOOK_COUNTED + 2; p++)
        ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, p, 1), 0);
    ck_assert_int_eq(pm__lanebook_count(&b, 1, 1, 0, 1), 1);
    pm__lanebook_free(&b);
}
END_TEST

/* The edges of what the book counts: a slot equal to its size (either
 * end) and a pair of one slot with itself earn nothing however many
 * frames they pass; nor does a pair whose higher slot holds its
 * PER_WORKER lanes (test_book_bound fills the lower one). The slots' index
 * words are swapped for a copy one longer, whose extra word says every
 * index free, so that a slot past the end read by mistake looks free in
 * every build. */
START_TEST(test_book_count_edges)
{
    pm__lanebook b;
    unsigned n = PM__LANEBOOK_PER_WORKER + 2, top = n - 1;
    ck_assert_int_eq(pm__lanebook_init(&b, n), 0);
    uint32_t *used = calloc(n + 1, sizeof(*used)), *own_used = b.index_used;
    ck_assert_ptr_nonnull(used);
    b.index_used = used;
    for (unsigned i = 0; i < 2 * PM__LANEBOOK_AFTER; i++) {
        ck_assert_int_eq(pm__lanebook_count(&b, n, 1, 1, 1), 0);
        ck_assert_int_eq(pm__lanebook_count(&b, 1, 1, n, 1), 0);
        ck_assert_int_eq(pm__lanebook_count(&b, 1, 1, 1, 1), 0);
    }
    b.index_used = own_used;
    free(used);
    pm__lanebook_lane l;
    for (unsigned s = 1; s <= PM__LANEBOOK_PER_WORKER; s++)
        ck_assert_int_eq(pm__lanebook_add(&b, s, 1, top, 1, &l), 0);
    ck_assert_uint_eq(pm__lanebook_held(&b, top), PM__LANEBOOK_PER_WORKER);
    for (unsigned i = 0; i < 2 * PM__LANEBOOK_AFTER; i++)
        ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, top, 1), 0);
    pm__lanebook_free(&b);
}
END_TEST

/* Another incarnation of either end is another pair for the count, as it
 * is for the lane (test_book_counts_then_lane): a restarted worker's pair
 * starts again from 0, not from its predecessor's count. */
START_TEST(test_book_incarnations_counted_apart)
{
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, 4), 0);
    for (unsigned i = 1; i < PM__LANEBOOK_AFTER; i++)
        ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 1, 1), 0);
    ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 1, 2), 0); /* slot 1's next incarnation */
    ck_assert_int_eq(pm__lanebook_count(&b, 0, 2, 1, 1), 0); /* slot 0's */
    ck_assert_int_eq(pm__lanebook_count(&b, 1, 1, 0, 1), 1); /* the first pair's count went on */
    pm__lanebook_free(&b);
}
END_TEST

/* An ended lane frees the index it held at each of its two ends and no
 * other index: the lane in the entry before it keeps both of its own, and
 * the entry after it (free) names no end. */
START_TEST(test_book_end_of_frees_two_indexes)
{
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, 4), 0);
    pm__lanebook_lane l, gone[PM__LANEBOOK_PER_WORKER];
    ck_assert_int_eq(pm__lanebook_add(&b, 0, 1, 1, 1, &l), 0);
    ck_assert_int_eq(pm__lanebook_add(&b, 2, 1, 3, 1, &l), 0);
    ck_assert_uint_eq(pm__lanebook_end_of(&b, 3, 1, gone, PM__LANEBOOK_PER_WORKER), 1);
    ck_assert_uint_eq(pm__lanebook_held(&b, 0), 1);
    ck_assert_uint_eq(pm__lanebook_held(&b, 1), 1);
    ck_assert_uint_eq(pm__lanebook_held(&b, 2), 0);
    ck_assert_uint_eq(pm__lanebook_held(&b, 3), 0);
    ck_assert_int_eq(pm__lanebook_add(&b, 0, 1, 2, 1, &l), 0);
    ck_assert_uint_eq(l.end[0].index, 1); /* slot 0's index 0 is still its lane's */
    ck_assert_uint_eq(l.end[1].index, 0);
    pm__lanebook_free(&b);
}
END_TEST

/* The counts an ended incarnation takes with it are its own: the pairs of
 * another incarnation of the same slot keep theirs, in the slot's own row
 * and in the rows where it is the peer. */
START_TEST(test_book_end_of_counts_its_own)
{
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, 4), 0);
    for (unsigned i = 1; i < PM__LANEBOOK_AFTER; i++) {
        ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 2, 5), 0); /* slot 2 the peer */
        ck_assert_int_eq(pm__lanebook_count(&b, 2, 5, 3, 1), 0); /* slot 2's own row */
    }
    pm__lanebook_lane gone[PM__LANEBOOK_PER_WORKER];
    ck_assert_uint_eq(pm__lanebook_end_of(&b, 2, 6, gone, PM__LANEBOOK_PER_WORKER), 0);
    ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 2, 5), 1);
    ck_assert_int_eq(pm__lanebook_count(&b, 2, 5, 3, 1), 1);
    pm__lanebook_free(&b);
}
END_TEST

/* Each slot's row of counts is its own, though the rows lie end to end in
 * one array: slot 1's pair with slot 3 is neither found nor cleared from
 * slot 0's row, by a pair of slot 0 with the same incarnations. */
START_TEST(test_book_rows_apart)
{
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, 4), 0);
    for (unsigned i = 1; i < PM__LANEBOOK_AFTER; i++)
        ck_assert_int_eq(pm__lanebook_count(&b, 1, 5, 3, 7), 0);
    ck_assert_int_eq(pm__lanebook_count(&b, 0, 5, 3, 7), 0); /* its first frame */
    pm__lanebook_lane l;
    ck_assert_int_eq(pm__lanebook_add(&b, 0, 5, 3, 7, &l), 0);
    ck_assert_int_eq(pm__lanebook_count(&b, 3, 7, 1, 5), 1); /* slot 1's pair kept its count */
    pm__lanebook_free(&b);
}
END_TEST

/* A lane clears its own pair's count and no other in the row: not a
 * pair with another peer, not a pair of another incarnation of the same
 * slot with the same peer. Distinct incarnations on both sides, so that
 * an end's incarnation taken for the other's matches nothing. */
START_TEST(test_book_add_clears_its_count_only)
{
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, 8), 0);
    for (unsigned i = 1; i < PM__LANEBOOK_AFTER; i++) {
        ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 2, 9), 0); /* another peer */
        ck_assert_int_eq(pm__lanebook_count(&b, 0, 4, 3, 9), 0); /* another incarnation of 0 */
    }
    int earned = 0;
    for (unsigned i = 0; i < PM__LANEBOOK_AFTER && !earned; i++)
        earned = pm__lanebook_count(&b, 0, 1, 3, 9);
    ck_assert_int_eq(earned, 1);
    pm__lanebook_lane l;
    ck_assert_int_eq(pm__lanebook_add(&b, 0, 1, 3, 9, &l), 0);
    /* Its entry is free: two new peers taking turns have an entry each
     * (the row's last and the lane's), so one of them earns a lane. */
    earned = 0;
    for (unsigned i = 0; i < 2 * PM__LANEBOOK_AFTER && !earned; i++)
        earned = pm__lanebook_count(&b, 0, 1, 4 + i % 2, 9);
    ck_assert_msg(earned, "the lane's pair kept its count in the row");
    /* The other two pairs kept theirs: their next frame earns. */
    ck_assert_int_eq(pm__lanebook_count(&b, 2, 9, 0, 1), 1);
    ck_assert_int_eq(pm__lanebook_count(&b, 3, 9, 0, 4), 1);
    pm__lanebook_free(&b);
}
END_TEST

/* The ends of two counters no test reaches by calls in its time, set by
 * hand in the book: a pair's count stops at UINT32_MAX (it does not wrap
 * to 0 and lose the lane it earned), and the generation after UINT32_MAX
 * is 1, never 0 (a free entry). */
START_TEST(test_book_counter_ends)
{
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, 4), 0);
    ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 1, 1), 0);
    pm__lanebook_tally *c = NULL; /* the pair's entry in slot 0's row */
    for (unsigned k = 0; k < PM__LANEBOOK_COUNTED; k++)
        if (b.counts[k].frames != 0)
            c = &b.counts[k];
    ck_assert(c != NULL && c->peer == 1 && c->frames == 1);
    c->frames = UINT32_MAX - 1;
    ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 1, 1), 1);
    ck_assert_uint_eq(c->frames, UINT32_MAX);
    ck_assert_int_eq(pm__lanebook_count(&b, 1, 1, 0, 1), 1);
    ck_assert_uint_eq(c->frames, UINT32_MAX);
    b.next_gen = UINT32_MAX;
    pm__lanebook_lane l;
    ck_assert_int_eq(pm__lanebook_add(&b, 0, 1, 1, 1, &l), 0);
    ck_assert_uint_eq(l.gen, UINT32_MAX);
    ck_assert_int_eq(pm__lanebook_add(&b, 2, 1, 3, 1, &l), 0);
    ck_assert_uint_eq(l.gen, 1);
    ck_assert_ptr_nonnull(pm__lanebook_find(&b, 2, 1, 3, 1));
    ck_assert_ptr_nonnull(pm__lanebook_find(&b, 0, 1, 1, 1));
    pm__lanebook_free(&b);
}
END_TEST

/* The book's loops stay within its arrays. Each array is swapped for a
 * copy one entry longer whose extra entry would match (a lane of slot 2,
 * a bit set for every index, a count naming slot 2 as peer): the calls
 * neither see nor change it. */
START_TEST(test_book_within_arrays)
{
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, 3), 0);
    pm__lanebook_lane *lanes = calloc(b.nlanes + 2, sizeof(*lanes)), *own_lanes = b.lanes;
    uint32_t *used = calloc(b.nslots + 1, sizeof(*used)), *own_used = b.index_used;
    size_t nc = (size_t)b.nslots * PM__LANEBOOK_COUNTED, na = (size_t)b.nslots * PM__LANEBOOK_PER_WORKER;
    pm__lanebook_tally *counts = calloc(nc + 1, sizeof(*counts)), *own_counts = b.counts;
    uint32_t *at = calloc(na + PM__LANEBOOK_PER_WORKER, sizeof(*at)), *own_at = b.at;
    ck_assert(lanes != NULL && used != NULL && counts != NULL && at != NULL);
    /* Past the lanes: one between slots 1 and 2, one between 1 and slot 3
     * (the book has 3), each named by the index row past the last slot's,
     * which a search of slot 2 one index too far, or of slot 3, reads. */
    lanes[b.nlanes] = (pm__lanebook_lane){.gen = 77, .end = {{1, 5, 0}, {2, 5, 0}}};
    lanes[b.nlanes + 1] = (pm__lanebook_lane){.gen = 78, .end = {{1, 5, 1}, {3, 5, 0}}};
    at[na] = (uint32_t)b.nlanes + 1;
    at[na + 1] = (uint32_t)b.nlanes + 2;
    used[b.nslots] = ~0u;
    counts[nc] = (pm__lanebook_tally){.peer = 2, .inc = 5, .peer_inc = 5, .frames = 9};
    b.lanes = lanes;
    b.index_used = used;
    b.counts = counts;
    b.at = at;
    ck_assert_uint_eq(pm__lanebook_held(&b, b.nslots), 0);
    ck_assert_ptr_null(pm__lanebook_find(&b, 1, 5, 2, 5));
    ck_assert_ptr_null(pm__lanebook_find(&b, 2, 5, 1, 5));
    ck_assert_ptr_null(pm__lanebook_find(&b, 3, 5, 1, 5)); /* a slot the book does not have */
    ck_assert_int_eq(pm__lanebook_cancel(&b, 77), 0);      /* past the lanes: not the book's */
    ck_assert_int_eq(pm__lanebook_cancel(&b, 78), 0);
    pm__lanebook_lane gone[PM__LANEBOOK_PER_WORKER];
    ck_assert_uint_eq(pm__lanebook_end_of(&b, 2, 5, gone, PM__LANEBOOK_PER_WORKER), 0);
    ck_assert_uint_eq(lanes[b.nlanes].gen, 77);
    ck_assert_uint_eq(lanes[b.nlanes + 1].gen, 78);
    ck_assert_uint_eq(at[na], b.nlanes + 1);
    ck_assert_uint_eq(counts[nc].frames, 9);
    ck_assert_uint_eq(used[b.nslots], ~0u);
    for (unsigned s = 0; s < b.nslots; s++)
        ck_assert_uint_eq(used[s], 0);
    b.lanes = own_lanes;
    b.index_used = own_used;
    b.counts = own_counts;
    b.at = own_at;
    free(lanes);
    free(used);
    free(counts);
    free(at);
    pm__lanebook_free(&b);
}
END_TEST

/* The entries run out before the indexes: a state no sequence of calls
 * reaches (the array has one entry more than the slots' indexes allow
 * lanes), forged here by taking every entry with lanes of slots the book
 * does not have, in a copy of the array one entry longer whose extra entry
 * is free. The add is refused with -ENOSPC, writes nothing, and does not
 * take the entry past the end. */
START_TEST(test_book_no_free_entry)
{
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, 2), 0);
    pm__lanebook_lane *lanes = calloc(b.nlanes + 1, sizeof(*lanes)), *own_lanes = b.lanes;
    ck_assert_ptr_nonnull(lanes);
    for (size_t i = 0; i < b.nlanes; i++)
        lanes[i] = (pm__lanebook_lane){.gen = 100 + (uint32_t)i, .end = {{7, 7, 0}, {8, 8, 0}}};
    b.lanes = lanes;
    pm__lanebook_lane l;
    memset(&l, 0, sizeof(l));
    ck_assert_int_eq(pm__lanebook_add(&b, 0, 1, 1, 1, &l), -ENOSPC);
    ck_assert_uint_eq(l.gen, 0);
    ck_assert_uint_eq(lanes[b.nlanes].gen, 0);
    ck_assert_uint_eq(pm__lanebook_held(&b, 0), 0);
    ck_assert_uint_eq(pm__lanebook_held(&b, 1), 0);
    b.lanes = own_lanes;
    free(lanes);
    pm__lanebook_free(&b);
}
END_TEST

/* A book that cannot have its memory is -ENOMEM with nothing kept,
 * whether the lanes' allocation failed (the largest, first) or the
 * counts' (the last). The address space is capped between the sizes
 * (RLIMIT_AS; not in sanitizer builds, whose shadow memory the cap would
 * take). */
static void book_capped(unsigned nslots, size_t room)
{
    struct rlimit before;
    pm_test_cap_address_space(room, &before);
    pm__lanebook b;
    int rc = pm__lanebook_init(&b, nslots);
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &before), 0);
    ck_assert_int_eq(rc, -ENOMEM);
    ck_assert(b.lanes == NULL && b.index_used == NULL && b.counts == NULL && b.nslots == 0);
}

START_TEST(test_book_no_memory)
{
    if (pm_test_sanitized())
        return;
    unsigned n = 1u << 18;
    size_t lanes = ((size_t)n * PM__LANEBOOK_PER_WORKER / 2 + 1) * sizeof(pm__lanebook_lane);
    size_t used = (size_t)n * sizeof(uint32_t);
    size_t counts = (size_t)n * PM__LANEBOOK_COUNTED * sizeof(pm__lanebook_tally);
    ck_assert(lanes > used + counts + 16 * MIB && counts > 16 * MIB);
    book_capped(n, (lanes + used + counts) / 2);  /* the lanes' fails, the others' fit */
    book_capped(n, lanes + used + counts / 2);    /* the counts' fails */
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, n), 0); /* uncapped: all three */
    pm__lanebook_free(&b);
}
END_TEST

/* A lane that leaves the book frees its entry: lanes made and ended
 * again and again, more times than the book has entries, are each booked;
 * a lane ended is not found by its generation any more (a cancel of it
 * after its end touches nothing: the indexes it freed may be another
 * lane's by then). */
START_TEST(test_book_entries_reused)
{
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, 2), 0);
    pm__lanebook_lane l, out[PM__LANEBOOK_PER_WORKER];
    for (uint64_t inc = 1; inc <= 4 * b.nlanes; inc++) {
        ck_assert_msg(pm__lanebook_add(&b, 0, inc, 1, 1, &l) == 0, "lane %llu", (unsigned long long)inc);
        uint32_t gen = l.gen;
        if (inc % 2 == 0) {
            ck_assert_uint_eq(pm__lanebook_end_of(&b, 0, inc, out, PM__LANEBOOK_PER_WORKER), 1);
        } else {
            ck_assert_int_eq(pm__lanebook_cancel(&b, gen), 1);
        }
        ck_assert_int_eq(pm__lanebook_cancel(&b, gen), 0);
        ck_assert_uint_eq(pm__lanebook_held(&b, 0), 0);
        ck_assert_uint_eq(pm__lanebook_held(&b, 1), 0);
    }
    pm__lanebook_free(&b);
}
END_TEST

/* pm__lanebook_cancel takes out the lane of that generation only: of two
 * lanes of a worker, the other stays with its indexes; generation 0 (a
 * free entry's) and one the book never gave cancel nothing. */
START_TEST(test_book_cancel_its_own)
{
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, 4), 0);
    pm__lanebook_lane l1, l2;
    ck_assert_int_eq(pm__lanebook_add(&b, 0, 1, 1, 1, &l1), 0);
    ck_assert_int_eq(pm__lanebook_add(&b, 0, 1, 2, 1, &l2), 0);
    ck_assert_int_eq(pm__lanebook_cancel(&b, 0), 0);
    ck_assert_int_eq(pm__lanebook_cancel(&b, l2.gen + 100), 0);
    ck_assert_uint_eq(pm__lanebook_held(&b, 0), 2);
    ck_assert_int_eq(pm__lanebook_cancel(&b, l2.gen), 1);
    ck_assert_ptr_null(pm__lanebook_find(&b, 0, 1, 2, 1));
    const pm__lanebook_lane *f = pm__lanebook_find(&b, 0, 1, 1, 1);
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(f->gen, l1.gen);
    ck_assert_uint_eq(pm__lanebook_held(&b, 0), 1);
    ck_assert_uint_eq(pm__lanebook_held(&b, 1), 1);
    ck_assert_uint_eq(pm__lanebook_held(&b, 2), 0);
    ck_assert_int_eq(pm__lanebook_cancel(&b, 0), 0);
    ck_assert_uint_eq(pm__lanebook_held(&b, 0), 1);
    pm__lanebook_free(&b);
}
END_TEST

/* A new peer takes the place of the first of the entries with the fewest
 * frames (lanebook.h): peers 1 to 4 of slot 0 with 3, 1, 1 and 2 frames,
 * then peer 5: it takes peer 2's entry, so peer 3's count goes on and
 * earns its lane on the frame that brings it to PM__LANEBOOK_AFTER. */
START_TEST(test_book_row_first_least)
{
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, 8), 0);
    static const unsigned frames[] = {3, 1, 1, 2};
    for (unsigned p = 1; p <= 4; p++)
        for (unsigned i = 0; i < frames[p - 1]; i++)
            ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, p, 1), 0);
    ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 5, 1), 0);
    ck_assert_uint_eq(b.counts[1].peer, 5);
    for (unsigned i = 1; i < PM__LANEBOOK_AFTER - 1; i++)
        ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 3, 1), 0);
    ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 3, 1), 1);
    pm__lanebook_free(&b);
}
END_TEST

/* An entry whose pair's count was cleared (the pair got its lane) is
 * unused: that pair, counted again after its lane is cancelled, takes the
 * first unused entry like a new pair, not its old one (lanebook.h). Slot
 * 0's pair with 1 takes entry 0 with a frame, its pair with 2 entry 1 and
 * earns a lane, then the pair with 1 earns one too: both entries cleared.
 * 2's lane is cancelled, and its next frame lands in entry 0. */
START_TEST(test_book_cleared_entry_unused)
{
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, 8), 0);
    pm__lanebook_lane l1, l2;
    ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 1, 1), 0);
    for (unsigned i = 0; i < PM__LANEBOOK_AFTER - 1; i++)
        ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 2, 1), 0);
    ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 2, 1), 1);
    ck_assert_int_eq(pm__lanebook_add(&b, 0, 1, 2, 1, &l2), 0);
    for (unsigned i = 1; i < PM__LANEBOOK_AFTER - 1; i++)
        ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 1, 1), 0);
    ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 1, 1), 1);
    ck_assert_int_eq(pm__lanebook_add(&b, 0, 1, 1, 1, &l1), 0);
    ck_assert(b.counts[0].peer == 1 && b.counts[0].frames == 0);
    ck_assert(b.counts[1].peer == 2 && b.counts[1].frames == 0);
    ck_assert_int_eq(pm__lanebook_cancel(&b, l2.gen), 1);
    ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 2, 1), 0);
    ck_assert(b.counts[0].peer == 2 && b.counts[0].frames == 1);
    ck_assert_uint_eq(b.counts[1].frames, 0);
    pm__lanebook_free(&b);
}
END_TEST

/* A pair with a lane is counted again from 0 each time its count reaches
 * PM__LANEBOOK_AFTER (lanebook.h): once that lane is cancelled, the pair
 * earns another only after PM__LANEBOOK_AFTER more frames. */
START_TEST(test_book_count_restarts_with_lane)
{
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, 8), 0);
    pm__lanebook_lane l;
    ck_assert_int_eq(pm__lanebook_add(&b, 0, 1, 1, 1, &l), 0);
    for (unsigned i = 0; i < PM__LANEBOOK_AFTER; i++)
        ck_assert_int_eq(pm__lanebook_count(&b, 1, 1, 0, 1), 0);
    ck_assert_int_eq(pm__lanebook_cancel(&b, l.gen), 1);
    for (unsigned i = 0; i < PM__LANEBOOK_AFTER - 1; i++)
        ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 1, 1), 0);
    ck_assert_int_eq(pm__lanebook_count(&b, 0, 1, 1, 1), 1);
    pm__lanebook_free(&b);

    /* Also when an end holds PER_WORKER lanes: slot 1's lane with 0 and
     * seven others. Its count restarts at PM__LANEBOOK_AFTER rather than
     * growing for the life of the lane (found by a reviewer: the free
     * indexes were looked at first). */
    ck_assert_int_eq(pm__lanebook_init(&b, 16), 0);
    ck_assert_int_eq(pm__lanebook_add(&b, 0, 1, 1, 1, &l), 0);
    for (uint32_t s = 2; s < 2 + PM__LANEBOOK_PER_WORKER - 1; s++)
        ck_assert_int_eq(pm__lanebook_add(&b, 1, 1, s, 1, &l), 0);
    ck_assert_uint_eq(pm__lanebook_held(&b, 1), PM__LANEBOOK_PER_WORKER);
    for (unsigned i = 0; i < PM__LANEBOOK_AFTER; i++)
        ck_assert_int_eq(pm__lanebook_count(&b, 1, 1, 0, 1), 0);
    ck_assert(b.counts[0].peer == 1 && b.counts[0].frames == 0);
    pm__lanebook_free(&b);
}
END_TEST

/* Each of the book's four allocations failing alone (failalloc.h: the
 * k-th allocation from the arming fails, the others succeed): -ENOMEM,
 * whichever it was, with the book left zeroed and nothing held. The
 * address-space cap above cannot fail the small ones alone. */
START_TEST(test_book_alloc_failures)
{
    if (!pm_failalloc_here("test_book_alloc_failures"))
        return;
    long failed = 0;
    for (long k = 1;; k++) {
        ck_assert_int_lt(k, 10);
        pm__lanebook b;
        /* No ck_assert while armed: Check allocates to record one. */
        pm_failalloc_arm(k);
        int rc = pm__lanebook_init(&b, 8);
        int hit = pm_failalloc_disarm();
        if (!hit) {
            ck_assert_int_eq(rc, 0);
            pm__lanebook_free(&b);
            break;
        }
        ck_assert_msg(rc == -ENOMEM, "allocation %ld failed: init returned %d", k, rc);
        ck_assert(b.lanes == NULL && b.index_used == NULL && b.at == NULL && b.counts == NULL);
        ck_assert_uint_eq(b.nslots, 0);
        failed++;
    }
    ck_assert_int_eq(failed, 4); /* the lanes, the index words, the index, the counts */
}
END_TEST

/* ------------------------------------------------------------------ the hand-over */

START_TEST(test_offer_codec)
{
    pm__lane_offer o = {.seq = 7, .index = 3, .gen = 9, .end = 1, .peer_slot = 4,
                        .peer_inc = 0x1122334455667788ull}, d;
    unsigned char buf[PM__LANE_OFFER_SIZE + 1];
    pm__lane_offer_encode(&o, buf);
    ck_assert_int_eq(pm__lane_offer_decode(buf, PM__LANE_OFFER_SIZE, &d), 0);
    ck_assert(d.seq == o.seq && d.index == o.index && d.gen == o.gen && d.end == o.end &&
              d.peer_slot == o.peer_slot && d.peer_inc == o.peer_inc);
    /* One row a condition, the others valid. */
    struct { const char *what; size_t off; uint32_t value; size_t len; } rows[] = {
        {"a short offer", 0, 7, PM__LANE_OFFER_SIZE - 1},
        {"a long offer", 0, 7, PM__LANE_OFFER_SIZE + 1},
        {"sequence 0", 0, 0, PM__LANE_OFFER_SIZE},
        {"index past the table", 4, PM__LANES_MAX, PM__LANE_OFFER_SIZE},
        {"generation 0", 8, 0, PM__LANE_OFFER_SIZE},
        {"end 2", 12, 2, PM__LANE_OFFER_SIZE},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        pm__lane_offer_encode(&o, buf);
        pm__put32(buf + rows[i].off, rows[i].value);
        memset(&d, 0xa5, sizeof(d));
        ck_assert_msg(pm__lane_offer_decode(buf, rows[i].len, &d) == -EBADMSG, "%s", rows[i].what);
        ck_assert_uint_eq(d.seq, 0xa5a5a5a5u);
    }
    /* The edges that are valid. */
    pm__lane_offer_encode(&o, buf);
    pm__put32(buf + 4, PM__LANES_MAX - 1);
    pm__put32(buf + 12, 0);
    ck_assert_int_eq(pm__lane_offer_decode(buf, PM__LANE_OFFER_SIZE, &d), 0);
    ck_assert_uint_eq(d.index, PM__LANES_MAX - 1);
    ck_assert_uint_eq(d.end, 0);
}
END_TEST

/* Three fds in one record, whole or not at all; anything else refused
 * with every fd it carried closed. */
/* A revocation's wake-up names its lane (laneoffer.h): the note's codec,
 * one refusal per condition with the other fields valid, its edges; and
 * when a lane counts as revoked (pm__node_lane_revoked_by: its index's
 * word at its generation or later, as serial numbers; 0 never). */
START_TEST(test_revoked_note)
{
    unsigned char buf[PM__LANE_REVOKED_SIZE + 1];
    uint32_t k = 99, g = 99;
    pm__lane_revoked_encode(PM__LANES_MAX - 1, 1, buf);
    ck_assert_int_eq(pm__lane_revoked_decode(buf, PM__LANE_REVOKED_SIZE, &k, &g), 0);
    ck_assert_uint_eq(k, PM__LANES_MAX - 1);
    ck_assert_uint_eq(g, 1);
    pm__lane_revoked_encode(0, 0xfffffffeu, buf);
    ck_assert_int_eq(pm__lane_revoked_decode(buf, PM__LANE_REVOKED_SIZE, &k, &g), 0);
    ck_assert_uint_eq(k, 0);
    ck_assert_uint_eq(g, 0xfffffffeu);
    struct { const char *what; uint32_t index, gen; size_t len; } rows[] = {
        {"a short note", 1, 5, PM__LANE_REVOKED_SIZE - 1},
        {"a long note", 1, 5, PM__LANE_REVOKED_SIZE + 1},
        {"no note (an older supervisor's)", 1, 5, 0},
        {"index past the table", PM__LANES_MAX, 5, PM__LANE_REVOKED_SIZE},
        {"generation 0", 1, 0, PM__LANE_REVOKED_SIZE},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        pm__lane_revoked_encode(rows[i].index, rows[i].gen, buf);
        k = g = 77;
        ck_assert_msg(pm__lane_revoked_decode(buf, rows[i].len, &k, &g) == -EBADMSG, "%s",
                      rows[i].what);
        ck_assert_msg(k == 77 && g == 77, "%s: written", rows[i].what);
    }
    ck_assert(!pm__node_lane_revoked_by(0, 5));
    ck_assert(!pm__node_lane_revoked_by(0, 0x90000000u)); /* 0 is never a revocation */
    ck_assert(!pm__node_lane_revoked_by(4, 5));
    ck_assert(pm__node_lane_revoked_by(5, 5));
    ck_assert(pm__node_lane_revoked_by(6, 5)); /* the index's next lane went too */
    ck_assert(pm__node_lane_revoked_by(2, 0xfffffffeu)); /* wrapped */
    ck_assert(!pm__node_lane_revoked_by(0xfffffffeu, 2));
}
END_TEST

static void hub_nop_fault(void *owner, unsigned p, int reason)
{
    (void)owner, (void)p, (void)reason;
    ck_abort_msg("a fault on a test hub");
}

static void hub_nop_control(void *owner, unsigned p, int type, const void *payload, size_t len)
{
    (void)owner, (void)p, (void)type, (void)payload, (void)len;
}

static void hub_nop_drain(void *owner, unsigned p)
{
    (void)owner, (void)p;
}

static const pm__hub_ops hub_nop_ops = {hub_nop_fault, hub_nop_control, hub_nop_drain, NULL};

/* Port 0's worker reads its ring until a PM__FT_LANE frame: 1 with it in
 * *f and its payload copied to note (at most 64 bytes), 0 when the ring
 * and the queue are empty. The hub flushes the queue as room comes. */
static int next_lane_frame(pm__hub *h, pm__channel *w, pm__frame_hdr *f, unsigned char *note)
{
    for (int rounds = 0; rounds < 100000; rounds++) {
        pm__hub_flush(h, &h->ports[0]);
        pm__hub_publish(h);
        const void *p;
        int rc = pm__frame_recv(&w->rx, PM__CHANNEL_MAX_FRAME, f, &p);
        if (rc != 1)
            return 0;
        int lane = f->type == PM__FT_LANE;
        if (lane && f->len <= 64)
            memcpy(note, p, f->len);
        pm__ring_consume(&w->rx);
        pm__ring_release(&w->rx);
        if (lane)
            return 1;
    }
    return 0;
}

/* The revocation's wake-up (hub_lane.c revoke_at) names the lane to a
 * library of protocol 4 (index and generation of the offer) and carries
 * nothing to one of protocol 3; and it is never dropped at main's hold:
 * port 0's ring is filled and main's hold taken to its bound first, and
 * the wake-up still waits in port 0's queue, charged to its lane notes. */
START_TEST(test_hub_revocation_note)
{
    for (int named = 0; named <= 1; named++) {
        static const pm__names names = {"t", "a", 10, 1, NULL};
        pm__hub *h;
        ck_assert_int_eq(pm__hub_new(&h, 2, &names, NULL, &hub_nop_ops, NULL), 0);
        ck_assert_int_eq(pm__hub_lanes_enable(h), 0);
        pm__channel_params cp = {.ring_cap = 1u << 20, .supervisor_pid = getpid(), .max_message = 64u << 10};
        pm__channel hub_end[2], worker[2];
        for (unsigned i = 0; i < 2; i++) {
            ck_assert_int_eq(pm__channel_create(&hub_end[i], i, 1, &cp), 0);
            ck_assert_int_eq(pm__hub_port_open(h, i, &hub_end[i], 1), 0);
            pm__hub_port_set_state(h, i, PM__PORT_READY);
            ck_assert_int_eq(pm__channel_adopt(&worker[i], &hub_end[i]), 0);
            pm__hub_port_lanes_ok(h, i, 1);
            pm__hub_port_lane_notes(h, i, named);
        }
        pm__frame_hdr f;
        memset(&f, 0, sizeof(f));
        f.type = PM__FT_MSG;
        f.dst = 0;
        for (unsigned k = 0; k <= PM__LANEBOOK_AFTER && h->lanes_made == 0; k++)
            pm__hub_lane_count(h, &h->ports[1], &f);
        ck_assert_uint_eq(h->lanes_made, 1);
        unsigned char note[64];
        pm__frame_hdr g;
        ck_assert_int_eq(next_lane_frame(h, &worker[0], &g, note), 1);
        pm__lane_offer o;
        ck_assert_int_eq(pm__lane_offer_decode(note, g.len, &o), 0);
        static unsigned char big[4000];
        pm__frame_hdr m = pm__hub_main_hdr(PM__FT_MSG, &h->ports[0]);
        unsigned pushed = 0;
        while (pm__hub_push(h, &h->ports[0], &m, big, sizeof(big), PM__NODE_MAIN) == 0)
            pushed++;
        ck_assert_uint_ge(h->ports[0].q_frames, 1); /* the ring is full, main's hold too */
        pm__hub_port_close(h, 1);
        ck_assert_uint_eq(h->lanes_revoked, 1);
        ck_assert_uint_eq(h->ports[0].note_frames, 1);
        ck_assert_int_eq(next_lane_frame(h, &worker[0], &g, note), 1);
        ck_assert_uint_eq(h->ports[0].note_frames, 0);
        uint32_t k = 99, gen = 99;
        if (named) {
            ck_assert_int_eq(pm__lane_revoked_decode(note, g.len, &k, &gen), 0);
            ck_assert_uint_eq(k, o.index);
            ck_assert_uint_eq(gen, o.gen);
        } else {
            ck_assert_uint_eq(g.len, 0);
        }
        (void)pushed;
        pm__hub_delete(h);
        for (unsigned i = 0; i < 2; i++) {
            pm__channel_close(&worker[i]);
            pm__channel_close(&hub_end[i]);
        }
    }
}
END_TEST

START_TEST(test_record)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    int fds[3], got[3];
    ck_assert_int_eq(pm__lane_create(&fds[0]), 0);
    fds[1] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    fds[2] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ck_assert_int_eq(pm__lane_record_recv(sv[1], 1, got), -EAGAIN);
    int before = pm_test_count_fds();
    ck_assert_int_eq(pm__lane_record_send(sv[0], 1, fds), 0);
    ck_assert_int_eq(pm__lane_record_recv(sv[1], 1, got), 0);
    for (int k = 0; k < 3; k++) {
        struct stat a, b;
        ck_assert_int_eq(fstat(fds[k], &a), 0);
        ck_assert_int_eq(fstat(got[k], &b), 0);
        ck_assert(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
        ck_assert_int_eq(fcntl(got[k], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
        close(got[k]);
    }
    ck_assert_int_eq(pm_test_count_fds(), before);
    /* The wrong sequence, a large message's record, too many fds: each
     * refused, nothing left open. */
    ck_assert_int_eq(pm__lane_record_send(sv[0], 3, fds), 0);
    ck_assert_int_eq(pm__lane_record_recv(sv[1], 2, got), -EPROTO);
    ck_assert_int_eq(pm_test_count_fds(), before);
    ck_assert_int_eq(pm__bigmsg_send(sv[0], fds[0], 2), 0);
    ck_assert_int_eq(pm__lane_record_recv(sv[1], 2, got), -EPROTO);
    ck_assert_int_eq(pm_test_count_fds(), before);
    int four[4] = {fds[0], fds[1], fds[2], fds[0]};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    unsigned char rec[PM__LANE_RECORD] = {'P', 'M', 'L', 'N', 2, 0, 0, 0};
    struct iovec iov = {rec, sizeof(rec)};
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    memset(&ctl, 0, sizeof(ctl));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof(ctl.buf);
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(four));
    memcpy(CMSG_DATA(c), four, sizeof(four));
    ck_assert_int_eq(sendmsg(sv[0], &mh, 0), (ssize_t)sizeof(rec));
    ck_assert_int_eq(pm__lane_record_recv(sv[1], 2, got), -EPROTO);
    ck_assert_int_eq(pm_test_count_fds(), before);
    /* The same record with three: taken (the sequence is the caller's). */
    c->cmsg_len = CMSG_LEN(3 * sizeof(int));
    mh.msg_controllen = CMSG_SPACE(3 * sizeof(int));
    ck_assert_int_eq(sendmsg(sv[0], &mh, 0), (ssize_t)sizeof(rec));
    ck_assert_int_eq(pm__lane_record_recv(sv[1], 2, got), 0);
    for (int k = 0; k < 3; k++)
        close(got[k]);
    /* A full socket: -EAGAIN and nothing half sent; every record that was
     * accepted arrives whole, in order. */
    int sent = 0, rc;
    while ((rc = pm__lane_record_send(sv[0], (uint32_t)(10 + sent), fds)) == 0)
        sent++;
    ck_assert_int_eq(rc, -EAGAIN);
    ck_assert_int_gt(sent, 0);
    for (int i = 0; i < sent; i++) {
        ck_assert_int_eq(pm__lane_record_recv(sv[1], (uint32_t)(10 + i), got), 0);
        for (int k = 0; k < 3; k++)
            close(got[k]);
    }
    ck_assert_int_eq(pm__lane_record_recv(sv[1], (uint32_t)(10 + sent), got), -EAGAIN);
    ck_assert_int_eq(pm_test_count_fds(), before);
    /* A closed socket. */
    close(sv[1]);
    ck_assert_int_eq(pm__lane_record_send(sv[0], 1, fds), -EPIPE);
    close(sv[0]);
    for (int k = 0; k < 3; k++)
        close(fds[k]);
}
END_TEST

/* One record sent by hand: len bytes, n fds (none when n is 0). */
static ssize_t send_raw(int sock, const void *rec, size_t len, const int *fds, size_t n)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    struct iovec iov = {(void *)rec, len};
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    memset(&ctl, 0, sizeof(ctl));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (n > 0) {
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE(n * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(n * sizeof(int));
        memcpy(CMSG_DATA(c), fds, n * sizeof(int));
    }
    return sendmsg(sock, &mh, MSG_DONTWAIT);
}

/* Records test_record does not try, each with three fds and the right
 * sequence: one byte longer than a lane's, a large message's magic, and
 * empty; then the end of the stream (the sender gone). Each -EPROTO, the
 * fds it carried closed, fds[] untouched. */
START_TEST(test_record_refused_shapes)
{
    int sv[2], fds[3];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    for (int k = 0; k < 3; k++) {
        fds[k] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        ck_assert_int_ge(fds[k], 0);
    }
    int before = pm_test_count_fds();
    struct { const char *what; const char *magic; size_t len; } rows[] = {
        {"a record one byte longer", "PMLN", PM__LANE_RECORD + 1},
        {"a large message's magic", "PMFD", PM__LANE_RECORD},
        {"an empty record", "PMLN", 0},
    };
    unsigned char rec[PM__LANE_RECORD + 1] = {0};
    pm__put32(rec + 4, 2);
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        memcpy(rec, rows[i].magic, 4);
        ck_assert_int_eq(send_raw(sv[0], rec, rows[i].len, fds, 3), (ssize_t)rows[i].len);
        int got[3] = {-2, -2, -2};
        ck_assert_msg(pm__lane_record_recv(sv[1], 2, got) == -EPROTO, "%s", rows[i].what);
        ck_assert(got[0] == -2 && got[1] == -2 && got[2] == -2);
        ck_assert_int_eq(pm_test_count_fds(), before);
    }
    /* The same record as a lane's: taken. */
    memcpy(rec, "PMLN", 4);
    ck_assert_int_eq(send_raw(sv[0], rec, PM__LANE_RECORD, fds, 3), (ssize_t)PM__LANE_RECORD);
    int got[3] = {-2, -2, -2};
    ck_assert_int_eq(pm__lane_record_recv(sv[1], 2, got), 0);
    for (int k = 0; k < 3; k++)
        close(got[k]);
    close(sv[0]);
    got[0] = got[1] = got[2] = -2;
    ck_assert_int_eq(pm__lane_record_recv(sv[1], 3, got), -EPROTO); /* the sender gone */
    ck_assert(got[0] == -2 && got[1] == -2 && got[2] == -2);
    close(sv[1]);
    for (int k = 0; k < 3; k++)
        close(fds[k]);
}
END_TEST

/* A refused record's cleanup closes the fds it took and no more: the slots
 * of its array past them hold what the call before left there (here the
 * numbers of a refused record's four fds, closed, then taken again by
 * dup), and closing one would take an fd from under its owner. Nothing but
 * dup() runs between the two receives, so the second finds the first's
 * numbers in its array (in this build's stack layout; where another leaves
 * something else there, the check is weaker, never wrong): check_bigmsg
 * test_refused_record_closes_only_its_fds, for a lane's record. */
START_TEST(test_record_refused_closes_only_its_fds)
{
    int p[2], sv[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    int four[4] = {p[1], p[1], p[1], p[1]};
    unsigned char rec[PM__LANE_RECORD] = {'P', 'M', 'L', 'N', 2, 0, 0, 0};
    ck_assert_int_eq(send_raw(sv[0], rec, sizeof(rec), four, 4), (ssize_t)sizeof(rec));
    rec[4] = 5;
    ck_assert_int_eq(send_raw(sv[0], rec, sizeof(rec), four, 3), (ssize_t)sizeof(rec));
    int warm = dup(p[0]); /* dup's first call resolved before the window */
    ck_assert_int_ge(warm, 0);
    close(warm);
    int got[3], v[4];
    int rc1 = pm__lane_record_recv(sv[1], 2, got); /* four fds: refused, all closed */
    for (int k = 0; k < 4; k++)
        v[k] = dup(p[0]);                          /* they take those numbers */
    int rc2 = pm__lane_record_recv(sv[1], 2, got); /* sequence 5: refused */
    ck_assert_int_eq(rc1, -EPROTO);
    ck_assert_int_eq(rc2, -EPROTO);
    for (int k = 0; k < 4; k++) {
        ck_assert_int_ge(v[k], 0);
        ck_assert_msg(fcntl(v[k], F_GETFD) >= 0,
                      "a refused record's cleanup closed fd %d, not its own", v[k]);
    }
    for (int k = 0; k < 4; k++)
        close(v[k]);
    close(p[1]);
    /* Every copy of the write end the records carried is closed: EOF. */
    char x;
    ck_assert_int_eq(read(p[0], &x, 1), 0);
    close(p[0]);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

#if defined(PM_AUDIT_ARCH) && defined(__NR_sendmsg) && (defined(__x86_64__) || defined(__aarch64__))
#define PM_CAN_FAKE_SEND 1
/* In a child of the test: every sendmsg answered 0 by a seccomp filter (the
 * call "succeeds" having sent nothing, as a sandbox's policy may neuter a
 * call), then a lane's record sent with errno at EINTR from before. Exits 0
 * when that is -EIO, 1 when not, 2 when the filter cannot be installed. */
static void record_send_answered_zero(int sock, const int fds[3])
{
    if (pm_test_answer(__NR_sendmsg, PM_ANSWER_ANY, 0, 0) != 0)
        _exit(2);
    errno = EINTR;
    _exit(pm__lane_record_send(sock, 1, fds) == -EIO ? 0 : 1);
}
#endif

/* A send the kernel reports as none of the record's 8 bytes is -EIO, not
 * success: the worker would wait for a record that never comes. */
START_TEST(test_record_send_short)
{
#ifdef PM_CAN_FAKE_SEND
    int sv[2], fds[3];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    for (int k = 0; k < 3; k++) {
        fds[k] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        ck_assert_int_ge(fds[k], 0);
    }
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        record_send_answered_zero(sv[0], fds);
    int st = pm_test_reap(pid, 20000);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 2)
        fprintf(stderr, "test_record_send_short: no seccomp filter here: not tested\n");
    else
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                      "a send of 0 bytes did not give -EIO (status %d)", st);
    for (int k = 0; k < 3; k++)
        close(fds[k]);
    close(sv[0]);
    close(sv[1]);
#else
    fprintf(stderr,
            "test_record_send_short: no seccomp filter for this architecture: not tested\n");
#endif
}
END_TEST

/* ------------------------------------------------------------------ a worker's table */

/* A lane's record as the supervisor hands it over: the memfd and the two
 * doorbells, each end's own copies (dup: two workers hold their own fds). */
static void record_fds(int mine[3], int theirs[3])
{
    ck_assert_int_eq(pm__lane_create(&mine[0]), 0);
    mine[1] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    mine[2] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    theirs[0] = dup(mine[0]);
    theirs[1] = dup(mine[2]); /* the peer parks on what we wake, and the reverse */
    theirs[2] = dup(mine[1]);
    for (int k = 0; k < 3; k++)
        ck_assert(mine[k] >= 0 && theirs[k] >= 0);
}

struct sink_log {
    int frames;
    char got[16];
    uint32_t lost_peer;
    uint64_t lost_id;
};

static void sink_frame(void *arg, const pm__frame_hdr *h, const void *payload)
{
    struct sink_log *g = arg;
    ck_assert_uint_eq(h->src, 7);
    if (g->frames < (int)sizeof(g->got) && h->len > 0)
        g->got[g->frames] = *(const char *)payload;
    g->frames++;
}

static void sink_lost(void *arg, uint32_t peer, uint64_t id)
{
    struct sink_log *g = arg;
    g->lost_peer = peer;
    g->lost_id = id;
}

START_TEST(test_node_table)
{
    int before = pm_test_count_fds();
    pm__node_lanes *me = calloc(1, sizeof(*me)), *peer = calloc(1, sizeof(*peer)); /* padding 0 too */
    pm__node_lanes_init(me);
    pm__node_lanes_init(peer);
    int a[3], b[3];
    record_fds(a, b);
    pm__lane_offer oa = {.seq = 1, .index = 2, .gen = 5, .end = 1, .peer_slot = 7, .peer_inc = 70};
    pm__lane_offer ob = {.seq = 1, .index = 0, .gen = 5, .end = 0, .peer_slot = 9, .peer_inc = 90};
    /* An index past the table, the table empty (the supervisor is trusted,
     * but the table never reads or writes past its end): refused, fds
     * closed, nothing held. */
    int x[3], y[3];
    record_fds(x, y);
    for (int k = 0; k < 3; k++)
        close(y[k]);
    pm__lane_offer past = oa;
    past.index = PM__LANES_MAX;
    ck_assert_int_eq(pm__node_lanes_adopt(me, &past, x, 9, 90), -EBUSY);
    ck_assert_int_eq(pm_test_count_fds(), before + 6);
    ck_assert_uint_eq(me->live, 0);
    ck_assert_ptr_null(me->husk);
    ck_assert_int_eq(pm__node_lanes_adopt(me, &oa, a, 9, 90), 0);
    ck_assert_int_eq(pm__node_lanes_adopt(peer, &ob, b, 7, 70), 0);
    ck_assert_uint_eq(me->live, 1);
    /* The memfds were mapped and closed; the doorbells kept. */
    ck_assert_int_eq(pm_test_count_fds(), before + 4);
    pm__node_lane *e = pm__node_lanes_to(me, 7, 70);
    ck_assert_ptr_eq(e, &me->at[2]);
    ck_assert_ptr_eq(pm__node_lanes_to(me, 7, 0), e);
    ck_assert_ptr_null(pm__node_lanes_to(me, 7, 71));
    ck_assert_ptr_null(pm__node_lanes_to(me, 8, 0));
    pm__node_lane *f = pm__node_lanes_to(peer, 9, 90);
    ck_assert_ptr_nonnull(f);
    /* The peer's frames reach us stamped with what the supervisor said. */
    pm__frame_hdr h = msg_hdr(PM__FT_MSG, 0), g;
    const void *p;
    ck_assert_int_eq(pm__lane_send(f->lane, &h, "x", 1), 0);
    ck_assert_int_eq(pm__lane_recv(e->lane, &g, &p), 1);
    ck_assert_uint_eq(g.src, 7);
    ck_assert_uint_eq(g.src_inc, 70);
    /* An index still held: refused, and the offered fds closed. */
    int c[3], d[3];
    record_fds(c, d);
    for (int k = 0; k < 3; k++)
        close(d[k]);
    ck_assert_int_eq(pm__node_lanes_adopt(me, &oa, c, 9, 90), -EBUSY);
    ck_assert_int_eq(pm_test_count_fds(), before + 4);
    /* A memfd that is not a lane's: refused, fds closed. */
    int bad[3] = {pm__memfd_new("x"), eventfd(0, 0), eventfd(0, 0)};
    oa.index = 3;
    ck_assert_int_ne(pm__node_lanes_adopt(me, &oa, bad, 9, 90), 0);
    ck_assert_int_eq(pm_test_count_fds(), before + 4);
    ck_assert_uint_eq(me->live, 1);
    pm__node_lanes_close(me);
    pm__node_lanes_close(peer);
    ck_assert_uint_eq(me->live, 0);
    ck_assert_ptr_null(pm__node_lanes_to(me, 7, 0));
    ck_assert_int_eq(pm_test_count_fds(), before);
    /* Every index free again holds the table's empty state (nodelane.h:
     * fds -1, never 0, a number a later close would take from someone). */
    for (unsigned k = 0; k < PM__LANES_MAX; k++) {
        ck_assert_ptr_null(me->at[k].lane);
        ck_assert_int_eq(me->at[k].efd_self, -1);
        ck_assert_int_eq(me->at[k].efd_peer, -1);
    }
    free(me);
    free(peer);
}
END_TEST

/* Two workers' lane tables (freed by the test) and a control block's
 * revocation words, none revoked. */
static void tables_open(pm__node_lanes **me, pm__node_lanes **peer, _Atomic uint32_t *words)
{
    *me = malloc(sizeof(**me));
    *peer = malloc(sizeof(**peer));
    ck_assert(*me != NULL && *peer != NULL);
    pm__node_lanes_init(*me);
    pm__node_lanes_init(*peer);
    for (unsigned k = 0; k < PM__LANES_MAX; k++)
        atomic_store(&words[k], 0);
}

START_TEST(test_node_revoked)
{
    int before = pm_test_count_fds();
    pm__node_lanes *me, *peer;
    _Atomic uint32_t words[PM__LANES_MAX];
    tables_open(&me, &peer, words);
    int a[3], b[3];
    record_fds(a, b);
    pm__lane_offer oa = {.seq = 1, .index = 4, .gen = 12, .end = 1, .peer_slot = 7, .peer_inc = 70};
    pm__lane_offer ob = {.seq = 1, .index = 0, .gen = 12, .end = 0, .peer_slot = 9, .peer_inc = 90};
    ck_assert_int_eq(pm__node_lanes_adopt(me, &oa, a, 9, 90), 0);
    ck_assert_int_eq(pm__node_lanes_adopt(peer, &ob, b, 7, 70), 0);
    pm__node_lane *e = &me->at[4], *f = &peer->at[0];
    e->marked = 1;
    /* We wait on a request over the lane; the peer wrote three frames, the
     * second a request of its own that happens to carry our request's id
     * (each end numbers its own): only a reply answers ours. */
    pm__frame_hdr q = msg_hdr(PM__FT_REQUEST, 33), m = msg_hdr(PM__FT_MSG, 0);
    ck_assert_int_eq(pm__lane_send(e->lane, &q, "q", 1), 0);
    for (char c = '1'; c <= '3'; c++)
        ck_assert_int_eq(pm__lane_send(f->lane, c == '2' ? &q : &m, &c, 1), 0);
    struct sink_log log;
    memset(&log, 0, sizeof(log));
    pm__node_lanes_sink sink = {sink_frame, sink_lost, &log};
    /* A word of another generation (the index's earlier lane): nothing. */
    atomic_store(&words[4], 11);
    ck_assert_uint_eq(pm__node_lanes_revoked(me, words, &sink), 0);
    ck_assert_uint_eq(me->live, 1);
    atomic_store(&words[4], 12);
    ck_assert_uint_eq(pm__node_lanes_revoked(me, words, &sink), 1);
    ck_assert_int_eq(log.frames, 3);
    ck_assert_mem_eq(log.got, "123", 3);
    ck_assert_uint_eq(log.lost_peer, 7);
    ck_assert_uint_eq(log.lost_id, 33);
    ck_assert_uint_eq(me->live, 0);
    ck_assert_ptr_null(pm__node_lanes_to(me, 7, 0));
    ck_assert_uint_eq(pm__node_lanes_revoked(me, words, &sink), 0); /* once */
    /* The index is free for the next lane at once. */
    pm__node_lanes_close(peer);
    ck_assert_int_eq(pm_test_count_fds(), before);
    int c[3], d[3];
    record_fds(c, d);
    oa.gen = 13;
    ob.gen = 13;
    ck_assert_int_eq(pm__node_lanes_adopt(me, &oa, c, 9, 90), 0);
    ck_assert_int_eq(pm__node_lanes_adopt(peer, &ob, d, 7, 70), 0);
    e = &me->at[4];
    f = &peer->at[0];
    /* A reply written before the revocation answers the request: nothing
     * lost. Not yet marked: the lane's frames are not handed on. */
    ck_assert_int_eq(pm__lane_send(e->lane, &q, "q", 1), 0);
    pm__frame_hdr g;
    const void *p;
    ck_assert_int_eq(pm__lane_recv(f->lane, &g, &p), 1);
    pm__frame_hdr r = msg_hdr(PM__FT_REPLY, 33);
    ck_assert_int_eq(pm__lane_send(f->lane, &r, "r", 1), 0);
    memset(&log, 0, sizeof(log));
    atomic_store(&words[4], 13);
    e->marked = 1;
    ck_assert_uint_eq(pm__node_lanes_revoked(me, words, &sink), 1);
    ck_assert_int_eq(log.frames, 1);
    ck_assert_uint_eq(log.lost_id, 0);
    /* Unmarked: the frames stay unread, the wait still fails. */
    int x[3], y[3];
    record_fds(x, y);
    oa.gen = 14;
    ob.gen = 14;
    pm__node_lanes_close(peer);
    ck_assert_int_eq(pm__node_lanes_adopt(me, &oa, x, 9, 90), 0);
    ck_assert_int_eq(pm__node_lanes_adopt(peer, &ob, y, 7, 70), 0);
    ck_assert_int_eq(pm__lane_send(me->at[4].lane, &q, "q", 1), 0);
    ck_assert_int_eq(pm__lane_send(peer->at[0].lane, &m, "z", 1), 0);
    memset(&log, 0, sizeof(log));
    atomic_store(&words[4], 14);
    ck_assert_uint_eq(pm__node_lanes_revoked(me, words, &sink), 1);
    ck_assert_int_eq(log.frames, 0);
    ck_assert_uint_eq(log.lost_id, 33);
    /* A receive's look (unmarked_too 0) finishes a marked revoked lane
     * only: an unmarked one waits for its own wake-up. */
    int s1[3], s2[3], s3[3], s4[3];
    record_fds(s1, s2);
    record_fds(s3, s4);
    for (int k = 0; k < 3; k++) {
        close(s2[k]);
        close(s4[k]);
    }
    pm__lane_offer om = {.seq = 1, .index = 5, .gen = 20, .end = 1, .peer_slot = 7, .peer_inc = 70};
    pm__lane_offer ou = {.seq = 1, .index = 6, .gen = 21, .end = 1, .peer_slot = 8, .peer_inc = 80};
    ck_assert_int_eq(pm__node_lanes_adopt(me, &om, s1, 9, 90), 0);
    ck_assert_int_eq(pm__node_lanes_adopt(me, &ou, s3, 9, 90), 0);
    me->at[5].marked = 1;
    atomic_store(&words[5], 20);
    atomic_store(&words[6], 21);
    ck_assert_uint_eq(pm__node_lanes_revoked_if(me, words, &sink, 0), 1);
    ck_assert_ptr_null(me->at[5].lane);
    ck_assert_ptr_nonnull(me->at[6].lane);
    ck_assert_uint_eq(pm__node_lanes_revoked_if(me, words, &sink, 1), 1);
    ck_assert_ptr_null(me->at[6].lane);
    /* Two revoked lanes, one kept (the send path's: its buffer holds the
     * caller's last message): only the other is finished; a second pass
     * without keep finishes it. */
    int u[3], v[3], w[3], z[3];
    record_fds(u, v);
    record_fds(w, z);
    pm__node_lanes_close(peer);
    oa.gen = 15;
    ck_assert_int_eq(pm__node_lanes_adopt(me, &oa, u, 9, 90), 0);
    pm__lane_offer oc = {.seq = 1, .index = 2, .gen = 16, .end = 1, .peer_slot = 8, .peer_inc = 80};
    ck_assert_int_eq(pm__node_lanes_adopt(me, &oc, w, 9, 90), 0);
    for (int k = 0; k < 3; k++) {
        close(v[k]);
        close(z[k]);
    }
    atomic_store(&words[4], 15);
    atomic_store(&words[2], 16);
    ck_assert_uint_eq(pm__node_lanes_revoked_but(me, words, &sink, 1, &me->at[2]), 1);
    ck_assert_ptr_null(me->at[4].lane);
    ck_assert_ptr_nonnull(me->at[2].lane);
    /* One index alone: only its lane, and only when revoked. */
    ck_assert_uint_eq(pm__node_lanes_revoked_at(me, words, &sink, 4), 0); /* free */
    atomic_store(&words[2], 15);
    ck_assert_uint_eq(pm__node_lanes_revoked_at(me, words, &sink, 2), 0); /* another gen */
    ck_assert_ptr_nonnull(me->at[2].lane);
    atomic_store(&words[2], 16);
    ck_assert_uint_eq(pm__node_lanes_revoked_at(me, words, &sink, PM__LANES_MAX), 0);
    ck_assert_uint_eq(pm__node_lanes_revoked_at(me, words, &sink, 2), 1);
    ck_assert_ptr_null(me->at[2].lane);
    ck_assert_uint_eq(pm__node_lanes_revoked_but(me, words, &sink, 1, NULL), 0);
    pm__node_lanes_close(me);
    ck_assert_int_eq(pm_test_count_fds(), before);
    free(me);
    free(peer);
}
END_TEST

/* The lane the caller's last message came by, finished from a send path
 * (pm__node_lanes_revoked_kept): its last frames reach the sink, read into
 * a copy's buffer, while the message's bytes stay where the caller has
 * them (the husk) until it lets them go; one husk at a time; the fds all
 * closed in the end. */
START_TEST(test_node_revoked_kept)
{
    int before = pm_test_count_fds();
    pm__node_lanes *me, *peer;
    _Atomic uint32_t words[PM__LANES_MAX];
    tables_open(&me, &peer, words);
    int a[3], b[3], c[3], d[3];
    record_fds(a, b);
    record_fds(c, d);
    pm__lane_offer oa = {.seq = 1, .index = 4, .gen = 12, .end = 1, .peer_slot = 7, .peer_inc = 70};
    pm__lane_offer ob = {.seq = 1, .index = 0, .gen = 12, .end = 0, .peer_slot = 9, .peer_inc = 90};
    pm__lane_offer oc = {.seq = 2, .index = 2, .gen = 13, .end = 1, .peer_slot = 7, .peer_inc = 71};
    ck_assert_int_eq(pm__node_lanes_adopt(me, &oa, a, 9, 90), 0);
    ck_assert_int_eq(pm__node_lanes_adopt(peer, &ob, b, 7, 70), 0);
    ck_assert_int_eq(pm__node_lanes_adopt(me, &oc, c, 9, 90), 0);
    for (int k = 0; k < 3; k++)
        close(d[k]);
    pm__node_lane *e = &me->at[4];
    e->marked = 1;
    pm__frame_hdr m = msg_hdr(PM__FT_MSG, 0), h;
    ck_assert_int_eq(pm__lane_send(peer->at[0].lane, &m, "abc", 3), 0);
    ck_assert_int_eq(pm__lane_send(peer->at[0].lane, &m, "x", 1), 0);
    ck_assert_int_eq(pm__lane_send(peer->at[0].lane, &m, "y", 1), 0);
    const void *p;
    ck_assert_int_eq(pm__lane_recv(e->lane, &h, &p), 1); /* the caller's message */
    ck_assert_mem_eq(p, "abc", 3);
    struct sink_log log;
    memset(&log, 0, sizeof(log));
    pm__node_lanes_sink sink = {sink_frame, sink_lost, &log};
    ck_assert_uint_eq(pm__node_lanes_revoked_kept(me, words, &sink, 4), 0); /* not revoked */
    atomic_store(&words[4], 12);
    atomic_store(&words[2], 13);
    atomic_store(&words[5], 12); /* a word, but no lane there */
    ck_assert_uint_eq(pm__node_lanes_revoked_kept(me, words, &sink, 5), 0);
    ck_assert_uint_eq(pm__node_lanes_revoked_kept(me, words, &sink, PM__LANES_MAX), 0);
    ck_assert_uint_eq(pm__node_lanes_revoked_kept(me, words, &sink, 4), 1);
    ck_assert_int_eq(log.frames, 2);
    ck_assert_mem_eq(log.got, "xy", 2);
    ck_assert_mem_eq(p, "abc", 3); /* read over by nothing, freed by nothing */
    ck_assert_ptr_nonnull(me->husk);
    ck_assert_ptr_null(me->at[4].lane);
    ck_assert_uint_eq(me->live, 1);
    /* A husk is held: the other revoked lane waits. */
    ck_assert_uint_eq(pm__node_lanes_revoked_kept(me, words, &sink, 2), 0);
    ck_assert_ptr_nonnull(me->at[2].lane);
    pm__node_lanes_drop_husk(me);
    ck_assert_ptr_null(me->husk);
    ck_assert_uint_eq(pm__node_lanes_revoked_kept(me, words, &sink, 2), 1);
    pm__node_lanes_close(me); /* the second husk goes with the table */
    ck_assert_ptr_null(me->husk);
    pm__node_lanes_close(peer);
    ck_assert_int_eq(pm_test_count_fds(), before);
    free(me);
    free(peer);
}
END_TEST

START_TEST(test_node_asked)
{
    pm__node_lane e;
    memset(&e, 0, sizeof(e));
    for (uint64_t i = 1; i <= PM__LANE_ASKED_MAX; i++)
        ck_assert_int_eq(pm__node_lane_asked(&e, i), 0);
    /* One more: the oldest (1) is forgotten, never the new one (a review
     * of stop 40: requests the application never answers filled the table
     * and every later request of the lane was dropped). */
    ck_assert_int_eq(pm__node_lane_asked(&e, 999), 0);
    ck_assert_uint_eq(e.asked_dropped, 1);
    ck_assert_int_eq(pm__node_lane_answer(&e, 1), 0);
    ck_assert_int_eq(pm__node_lane_answer(&e, 2), 1);
    ck_assert_int_eq(pm__node_lane_answer(&e, 2), 0); /* once */
    ck_assert_int_eq(pm__node_lane_answer(&e, PM__LANE_ASKED_MAX), 1);
    ck_assert_uint_eq(e.nasked, PM__LANE_ASKED_MAX - 2);
    ck_assert_int_eq(pm__node_lane_asked(&e, 1000), 0);
    for (uint64_t i = 3; i < PM__LANE_ASKED_MAX; i++)
        ck_assert_int_eq(pm__node_lane_answer(&e, i), 1);
    ck_assert_int_eq(pm__node_lane_answer(&e, 999), 1);
    ck_assert_int_eq(pm__node_lane_answer(&e, 1000), 1);
    ck_assert_uint_eq(e.nasked, 0);
}
END_TEST

/* Review (lanereview): a pair that earned its lane left its count in the
 * row with the most frames, for the life of the lane, never replaced. A
 * worker whose row holds PM__LANEBOOK_COUNTED such pairs then counts every
 * other peer in one entry: two peers taking turns replace each other there
 * for ever and neither earns a lane, however much they send, while the
 * worker has free indexes. Fixed: pm__lanebook_add clears the pair's count. */
START_TEST(test_book_lanes_leave_the_row)
{
    pm__lanebook b;
    ck_assert_int_eq(pm__lanebook_init(&b, 8), 0);
    pm__lanebook_lane l;
    for (unsigned s = 1; s <= PM__LANEBOOK_COUNTED; s++) {
        int earned = 0;
        for (unsigned i = 0; i < PM__LANEBOOK_AFTER && !earned; i++)
            earned = pm__lanebook_count(&b, 0, 1, s, 1);
        ck_assert_int_eq(earned, 1);
        ck_assert_int_eq(pm__lanebook_add(&b, 0, 1, s, 1, &l), 0);
    }
    ck_assert_uint_lt(pm__lanebook_held(&b, 0), PM__LANEBOOK_PER_WORKER);
    int earned = 0;
    unsigned p = PM__LANEBOOK_COUNTED + 1;
    for (unsigned i = 0; i < 100 * PM__LANEBOOK_AFTER && !earned; i++)
        earned = pm__lanebook_count(&b, 0, 1, p + i % 2, 1);
    ck_assert_msg(earned, "two busy peers of a worker with free indexes never earn a lane");
    pm__lanebook_free(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("lane");
    TCase *tc = pm_tcase("lane", 60);
    tcase_add_test(tc, test_create_sealed);
    tcase_add_test(tc, test_attach_refuses);
    tcase_add_test(tc, test_send_recv_stamped);
    tcase_add_loop_test(tc, test_judge_rows, 0, (int)ARRAY_LEN(judge_rows));
    tcase_add_test(tc, test_judge_malformed);
    tcase_add_test(tc, test_hostile_frames_dropped_counted);
    tcase_add_test(tc, test_rewrite_after_check);
    tcase_add_test(tc, test_scribble_and_resize);
    tcase_add_test(tc, test_revoke_writer_outlived);
    tcase_add_test(tc, test_revoke_edges);
    tcase_add_test(tc, test_order_counts);
    tcase_add_test(tc, test_bound_and_order);
    tcase_add_test(tc, test_wait_many);
    tcase_add_test(tc, test_wait_signal);
    tcase_add_test(tc, test_wait_edge);
    tcase_add_test(tc, test_lane_create_detach_edges);
    tcase_add_test(tc, test_lane_quarter_release);
    tcase_add_test(tc, test_flood_refused_bounded_per_call);
    tcase_add_test(tc, test_revoke_straddle_after_refresh);
    tcase_add_test(tc, test_revoke_rewrite_below_limit);
    tcase_add_test(tc, test_reader_asleep_as_writer_keeps_space);
    tcase_add_test(tc, test_order_counts_origin);
    tcase_add_test(tc, test_doorbell_made_blocking);
    tcase_add_test(tc, test_doorbell_drain);
    tcase_add_test(tc, test_doorbell_drain_answered);
    suite_add_tcase(s, tc);
    TCase *book = pm_tcase("book", 30);
    tcase_add_test(book, test_book_counts_then_lane);
    tcase_add_test(book, test_book_bound);
    tcase_add_test(book, test_book_end_of);
    tcase_add_test(book, test_book_count_row);
    tcase_add_test(book, test_book_lanes_leave_the_row);
    tcase_add_test(book, test_book_count_edges);
    tcase_add_test(book, test_book_incarnations_counted_apart);
    tcase_add_test(book, test_book_rows_apart);
    tcase_add_test(book, test_book_end_of_frees_two_indexes);
    tcase_add_test(book, test_book_end_of_counts_its_own);
    tcase_add_test(book, test_book_add_clears_its_count_only);
    tcase_add_test(book, test_book_counter_ends);
    tcase_add_test(book, test_book_within_arrays);
    tcase_add_test(book, test_book_no_free_entry);
    tcase_add_test(book, test_book_no_memory);
    tcase_add_test(book, test_book_alloc_failures);
    tcase_add_test(book, test_book_entries_reused);
    tcase_add_test(book, test_book_cancel_its_own);
    tcase_add_test(book, test_book_row_first_least);
    tcase_add_test(book, test_book_cleared_entry_unused);
    tcase_add_test(book, test_book_count_restarts_with_lane);
    suite_add_tcase(s, book);
    TCase *handover = pm_tcase("handover", 30);
    tcase_add_test(handover, test_offer_codec);
    tcase_add_test(handover, test_revoked_note);
    tcase_add_test(handover, test_hub_revocation_note);
    tcase_add_test(handover, test_record);
    tcase_add_test(handover, test_record_refused_shapes);
    tcase_add_test(handover, test_record_refused_closes_only_its_fds);
    tcase_add_test(handover, test_record_send_short);
    suite_add_tcase(s, handover);
    TCase *node = pm_tcase("node", 30);
    tcase_add_test(node, test_node_table);
    tcase_add_test(node, test_node_revoked);
    tcase_add_test(node, test_node_revoked_kept);
    tcase_add_test(node, test_node_asked);
    suite_add_tcase(s, node);
    return pm_test_main(s);
}
