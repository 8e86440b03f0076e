/* SPDX-License-Identifier: MIT */
/* fuzz_link.c - libFuzzer harness for the hub fed frames by authenticated peer links (hub_link*.c, hub_bcast.c's mesh broadcast, hub_main.c's remote requests). */
/*
 * The hub runs in peer mode as host "h" with two local workers (ports made
 * by hand, fuzz_wport.h) and main, and knows three remote hosts: "b" and
 * "c" have a link (a fake pm__hub_link.send that decodes and checks every
 * frame the hub hands it, and can refuse it: full or going down), "d" is
 * known and never linked. The input is a sequence of operations: a frame
 * arriving on a link (any type, BCAST/BRESULT/BDONE included, built from
 * fields or raw header bytes: forged hosts, lying lengths, negative or huge
 * deadlines, any incarnation and request id), honest answers from the far
 * end to what the hub sent it (REPLY or UNDELIVERABLE to a request,
 * BRESULTs and a right or wrong BDONE to a BCAST), links going down and up,
 * local workers' frames to remote hosts and their replies to remote
 * requests, main's requests, sends and mesh broadcasts to remote hosts,
 * cancels, time passing, worker restarts.
 *
 * Every payload byte says where it was written: 'a' + slot by a local
 * worker, 'M' by main, 'A' + host index by the far end of that host's link.
 * Oracle, beyond ASan/UBSan and LeakSanitizer:
 * - identity: a frame that reaches a local worker or main from another host
 *   carries the tag of the link it came in by (the source host is stamped
 *   from the link, never from the frame), and names only a linked host;
 *   what goes out on a link is in wire form (hosts 0, no fd flag), from
 *   main (address port 0) or a local worker's port, with that sender's tag;
 * - main's requests and mesh broadcasts: each callback runs exactly once
 *   (never twice, and every one by the end of the run, hub freed); a call
 *   that returned an error never runs it; a request to a local worker is
 *   never settled by a frame from a link; the hub's count of pending
 *   requests is the number whose callback has not run;
 * - a notice (UNDELIVERABLE) that reaches a worker has a negative error
 *   and no payload, whoever sent it;
 * - the remote in-flight table of a link never holds more entries than
 *   requests went out on it since it came up, and stays within
 *   PM__REMOTE_INFLIGHT_MAX;
 * - counters: a link's frames_in and forged grow by exactly the frames the
 *   harness fed that decode with hosts 0 / claim another host (computed
 *   independently), frames_out by exactly the frames its send accepted.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "channel/bigmsg.h"

#include "fuzz.h"
#include "fuzz_wport.h"
#include "hub/hub_core.h"
#include "base/le.h"
#include "peer/linkfrag.h"
#include "channel/proto.h"

#define NPORTS 2u
#define NLINKS 2u       /* hosts 1 ("b") and 2 ("c"); 3 ("d") is never linked */
#define BASE 9000u      /* this host's base port */
#define MAX_RECS 256u   /* main's requests and broadcasts tracked per run */
#define NSEEN 16u       /* requests remembered per link and per worker, to answer */
/* The hub's max_message: a large message is 2 to 4 fragments (sparse
 * memfds: only what a fragment writes is allocated). */
#define MAX_MSG ((size_t)PM_MAX_PAYLOAD * 3)

typedef struct seen_req {
    uint16_t host;      /* where the request came from (0: here) */
    uint32_t src;       /* its requester: an address port (remote) or a node */
    uint64_t src_inc;
    uint32_t dst;       /* its target as sent: an address port (remote) or a node */
    uint64_t dst_inc;
    uint64_t id;
} seen_req;

/* The far end of one link, as the harness plays it. */
typedef struct flink {
    int up;
    int mode;           /* what send answers: 0 taken, 1 -EAGAIN (full), 2 -EPIPE (going down) */
    uint64_t exp_in, exp_forged, exp_out;
    uint32_t reqs_since_up; /* REQUEST frames taken since the link came up */
    seen_req req[NSEEN];    /* requests the hub sent out on it */
    unsigned nreq;
    uint64_t bcast[4];      /* BCAST ids it sent */
    unsigned nbcast;
    uint64_t bresults;      /* BRESULTs fed (bounds a mesh broadcast's results) */
    uint32_t caps;          /* the capability bits its peer announced at up */
    /* What went out, for the credit and window bounds (since up). */
    uint64_t msgreq_in;     /* MSG/REQUEST frames fed that the hub may credit */
    uint64_t credited;      /* frames the hub's CREDITs gave back */
    uint64_t msgreq_out;    /* MSG/REQUEST frames its send took */
    /* The far end's reassembly of the hub's FRAGs (what it was sent). */
    int tx_active;
    uint32_t tx_id;
    uint64_t tx_total, tx_off;
    /* The far end's own large message being sent as FRAGs (frag_feed). */
    uint32_t fr_id;
    uint8_t fr_kind;
    uint64_t fr_total, fr_off;
    pm__frame_hdr fr_hdr;
} flink;

typedef struct rec {
    int kind;           /* 1 a request, 2 a mesh broadcast */
    int local;          /* a request to a local worker: no link frame may settle it */
    int expect;         /* 1: the call returned an id / 0, its callback must run once */
    int calls;
} rec;

static pm__hub hub;
static wport w[NPORTS];
static flink lk[NLINKS];
static seen_req wreq[NPORTS][NSEEN]; /* requests each worker took from its ring */
static unsigned nwreq[NPORTS];
static rec recs[MAX_RECS];
static unsigned nrecs;
static int reply_from_callback;
static int in_link_frame; /* pm__hub_link_frame is running */
static unsigned char fbuf[PM__FRAME_HDR_SIZE + PM_MAX_PAYLOAD + 64];
static unsigned char tagged[MAX_MSG + 2];

static uint16_t host_of(unsigned x)
{
    return (uint16_t)(x + 1);
}

static unsigned char tag_local(uint32_t node)
{
    return node == PM__NODE_MAIN ? 'M' : (unsigned char)('a' + node);
}

static unsigned char tag_remote(uint16_t host)
{
    return (unsigned char)('A' + host);
}

/* The first and last byte carry the writer's tag (the whole payload is
 * filled with it; the ends are enough and keep the harness fast). */
static void check_tag(const void *data, size_t len, unsigned char tag)
{
    if (len == 0)
        return;
    const unsigned char *b = data;
    FUZZ_ASSERT(b[0] == tag && b[len - 1] == tag);
}

/* The bytes the far end of a link puts in its large messages: its tag
 * first, then a pattern of the offset, so a byte written at the wrong
 * place, twice, or from another message is seen. */
static unsigned char pat(unsigned char tag, uint64_t pos)
{
    return (unsigned char)(tag + pos * 131u + (pos >> 9));
}

static void check_big(const unsigned char *b, size_t len, unsigned char tag)
{
    for (size_t k = 0; k < len; k++)
        FUZZ_ASSERT(b[k] == pat(tag, k)); /* exactly the bytes the fragments carried */
}

/* A large message's payload: from a link, every byte; from here (a
 * worker's sparse memfd, main's buffer) its ends carry the tag. */
static void check_payload(const void *data, size_t len, unsigned char tag)
{
    if (len > PM_MAX_PAYLOAD && tag >= tag_remote(1) && tag <= tag_remote(NLINKS))
        check_big(data, len, tag);
    else
        check_tag(data, len, tag);
}

static size_t count_fds(void)
{
    size_t n = 0;
    DIR *dir = opendir("/proc/self/fd");
    if (dir == NULL)
        return 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(dir);
    return n;
}

/* Who wrote a frame main received: its address's host and node. */
static unsigned char tag_of_address(const pm_address *a)
{
    uint16_t host;
    uint32_t node;
    FUZZ_ASSERT(pm__address_route(&hub.names, a, &host, &node) == 0);
    if (host == PM__HOST_LOCAL) {
        FUZZ_ASSERT(node < NPORTS);
        return tag_local(node);
    }
    FUZZ_ASSERT(host >= 1 && host <= NLINKS); /* only a linked host speaks */
    return tag_remote(host);
}

/* ---- the fake owner (as fuzz_hub: a fault cuts the port off) ---- */

static void fake_fault(void *owner, unsigned i, int reason)
{
    FUZZ_ASSERT(owner == &w[0] && i < NPORTS);
    FUZZ_ASSERT(reason == PM_REASON_PROTOCOL || reason == PM_REASON_CORRUPT_RING);
    FUZZ_ASSERT(w[i].open);
    w[i].cut = 1;
    pm__hub_port_cut(&hub, i);
}

/* Ports start ready: a handshake frame afterwards is a protocol fault. */
static void fake_control(void *owner, unsigned i, int type, const void *payload, size_t len)
{
    (void)type;
    (void)payload;
    FUZZ_ASSERT(len <= PM__HUB_CONTROL_MAX);
    fake_fault(owner, i, PM_REASON_PROTOCOL);
}

static void fake_not_draining(void *owner, unsigned p)
{
    (void)owner;
    (void)p;
}

static const pm__hub_ops fake_ops = {fake_fault, fake_control, fake_not_draining,
                                     NULL /* timed_out: never asked */};

/* ---- a link's far end: what the hub sends it ---- */

static void remember(seen_req *v, unsigned *n, const seen_req *r)
{
    v[*n % NSEEN] = *r;
    (*n)++;
}

static int link_send(void *arg, const void *frame, size_t len)
{
    flink *L = arg;
    unsigned x = (unsigned)(L - lk);
    FUZZ_ASSERT(x < NLINKS && L->up);
    pm__frame_hdr f;
    FUZZ_ASSERT(pm__frame_decode(frame, len, PM_MAX_PAYLOAD, &f) == 0);
    /* Wire form: hosts relative to the two ends, no fd, a deadline left. */
    FUZZ_ASSERT(f.src_host == 0 && f.dst_host == 0 && f.flags == 0);
    FUZZ_ASSERT(f.deadline_ms >= 0);
    const unsigned char *payload = (const unsigned char *)frame + PM__FRAME_HDR_SIZE;
    switch (f.type) {
    case PM__FT_MSG:
    case PM__FT_REQUEST:
    case PM__FT_REPLY:
        FUZZ_ASSERT(f.src == 0 || (f.src >= BASE && f.src < BASE + NPORTS));
        check_tag(payload, f.len, f.src == 0 ? 'M' : tag_local(f.src - BASE));
        break;
    case PM__FT_UNDELIVERABLE:
        FUZZ_ASSERT(f.error < 0 && f.len == 0);
        break;
    case PM__FT_BCAST:
        FUZZ_ASSERT(f.dst == 0 && f.src == 0 && f.request_id >= PM__BCAST_ID_BASE &&
                    f.deadline_ms >= 1);
        check_tag(payload, f.len, 'M');
        break;
    case PM__FT_BRESULT:
        /* One of our workers' results for a BCAST the far end sent. */
        FUZZ_ASSERT(f.src >= BASE && f.src < BASE + NPORTS && f.error <= 0);
        FUZZ_ASSERT(f.error == 0 || f.len == 0);
        check_tag(payload, f.len, tag_local(f.src - BASE));
        break;
    case PM__FT_BDONE:
        FUZZ_ASSERT(f.len == 4 && f.dst == 0);
        break;
    case PM__FT_CREDIT:
        /* Only to a peer that does credits, for frames it sent. */
        FUZZ_ASSERT((L->caps & PM__PEER_CAP_CREDIT) != 0);
        FUZZ_ASSERT(f.len == 8 && f.dst == 0 && f.request_id == 0 && f.src <= 0xFFFFu);
        break;
    case PM__FT_FRAG: {
        FUZZ_ASSERT((L->caps & PM__PEER_CAP_FRAG) != 0);
        pm__frag_hdr fh;
        size_t n;
        FUZZ_ASSERT(pm__frag_decode(payload, f.len, &fh, &n) == 0);
        FUZZ_ASSERT(fh.total <= MAX_MSG);
        FUZZ_ASSERT(f.src == 0 || (f.src >= BASE && f.src < BASE + NPORTS));
        unsigned char tag = f.src == 0 ? 'M' : tag_local(f.src - BASE);
        const unsigned char *d = payload + PM__FRAG_HDR_SIZE;
        if (fh.offset == 0)
            FUZZ_ASSERT(d[0] == tag);
        if (fh.offset + n == fh.total)
            FUZZ_ASSERT(d[n - 1] == tag);
        if (fh.offset == 0 && fh.kind == PM__FT_REQUEST)
            L->reqs_since_up++; /* its entry is made before the first try */
        break;
    }
    default:
        FUZZ_ASSERT(!"a lifecycle frame went out on a link");
    }
    if (L->mode == 1)
        return -EAGAIN;
    if (L->mode == 2)
        return -EPIPE;
    L->exp_out++;
    if (f.type == PM__FT_MSG || f.type == PM__FT_REQUEST)
        L->msgreq_out++;
    if (f.type == PM__FT_CREDIT) {
        L->credited += pm__get32(payload);
        FUZZ_ASSERT(L->credited <= L->msgreq_in); /* never more than it was sent */
    }
    if (f.type == PM__FT_FRAG) {
        /* The far end reassembles: one message at a time, ids 1, 2, ...
         * since the link came up, offsets back to back. */
        pm__frag_hdr fh;
        size_t n;
        FUZZ_ASSERT(pm__frag_decode(payload, f.len, &fh, &n) == 0);
        if (fh.offset == 0) {
            FUZZ_ASSERT(!L->tx_active);
            FUZZ_ASSERT(fh.msg_id == L->tx_id + 1);
            L->tx_active = 1;
            L->tx_id = fh.msg_id;
            L->tx_total = fh.total;
            L->tx_off = 0;
            if (fh.kind == PM__FT_REQUEST) {
                seen_req r = {0, f.src, f.src_inc, f.dst, f.dst_inc, f.request_id};
                remember(L->req, &L->nreq, &r);
            }
        }
        FUZZ_ASSERT(L->tx_active && fh.msg_id == L->tx_id && fh.total == L->tx_total &&
                    fh.offset == L->tx_off);
        L->tx_off += n;
        if (L->tx_off == L->tx_total)
            L->tx_active = 0;
    }
    if (f.type == PM__FT_REQUEST) {
        seen_req r = {0, f.src, f.src_inc, f.dst, f.dst_inc, f.request_id};
        remember(L->req, &L->nreq, &r);
        L->reqs_since_up++;
    }
    if (f.type == PM__FT_BCAST)
        L->bcast[L->nbcast++ % 4] = f.request_id;
    return 0;
}

static void link_set_up(unsigned x, int up, uint32_t caps)
{
    flink *L = &lk[x];
    if (up && !L->up) {
        L->up = 1;
        L->reqs_since_up = 0;
        L->nreq = 0;
        L->nbcast = 0;
        L->caps = caps;
        L->msgreq_in = L->credited = L->msgreq_out = 0;
        L->tx_active = 0;
        L->tx_id = 0;
        L->fr_total = 0;
        pm__hub_link_up(&hub, host_of(x), link_send, L);
        pm__hub_link_caps(&hub, host_of(x), caps); /* from the peer's hello, at once */
    } else if (!up && L->up) {
        /* Down first as mesh.c does (conn_close): then the hub answers. */
        pm__hub_link_down(&hub, host_of(x));
        L->up = 0;
    }
}

/* Hands a frame to the hub as link x's decoded FRAMES record would
 * (mesh.c conn_frame), with the counters it must move computed here. */
static void link_deliver(unsigned x, const unsigned char *frame, size_t len)
{
    flink *L = &lk[x];
    if (L->up) {
        pm__frame_hdr f;
        if (pm__frame_decode(frame, len, PM_MAX_PAYLOAD, &f) == 0 && f.deadline_ms >= 0) {
            if (f.src_host != 0 || f.dst_host != 0)
                L->exp_forged++;
            else if ((f.flags & PM__FF_MEMFD) == 0) {
                L->exp_in++;
                if ((f.type == PM__FT_MSG || f.type == PM__FT_REQUEST) && f.src <= 0xFFFFu)
                    L->msgreq_in++;
                /* Any BRESULT the hub takes may be a result (link_feed's
                 * raw ones too, whose id may be a broadcast's). */
                if (f.type == PM__FT_BRESULT)
                    L->bresults++;
            }
        }
    }
    in_link_frame = 1;
    pm__hub_link_frame(&hub, host_of(x), frame, len);
    in_link_frame = 0;
}

static void fill_tag(unsigned char *p, size_t len, unsigned char tag)
{
    memset(p, tag, len);
}

/* A frame on link x built from the input: any field, honest or not. */
static void link_feed(fuzz_in *in, unsigned x)
{
    uint8_t m = fuzz_u8(in);
    uint32_t len = (m & 8) ? fuzz_u16(in) % (PM_MAX_PAYLOAD + 2) : fuzz_u8(in) % 64;
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = (uint8_t)(fuzz_u8(in) % (PM__FT_MAX_ + 2));
    uint8_t d = fuzz_u8(in);
    switch (d % 8) {
    case 0: f.dst = 0; break;
    case 1: case 2: f.dst = BASE + (d % 8 - 1); break;
    case 3: f.dst = BASE + NPORTS; break;     /* no such port here */
    case 4: f.dst = BASE - 1; break;
    case 5: f.dst = PM__NODE_MAIN; break;
    default: f.dst = fuzz_u32(in); break;
    }
    uint32_t node = f.dst >= BASE && f.dst < BASE + NPORTS ? f.dst - BASE : 0;
    switch ((d >> 3) % 4) {
    case 0: f.dst_inc = 0; break;
    case 1: f.dst_inc = w[node].inc; break;
    case 2: f.dst_inc = w[node].inc - 1; break; /* an earlier incarnation */
    default: f.dst_inc = fuzz_u64(in); break;
    }
    uint8_t s = fuzz_u8(in);
    switch (s % 4) {
    case 0: f.src = 0; break;
    case 1: f.src = 7000 + s / 4 % 4; break;
    case 2: f.src = fuzz_u16(in); break;
    default: f.src = fuzz_u32(in); break;         /* not an address port */
    }
    f.src_inc = (s >> 2) % 4;
    uint8_t r = fuzz_u8(in);
    switch (r % 4) {
    case 0: f.request_id = 0; break;
    case 1: f.request_id = r / 4 % 8; break;      /* collides with main's ids */
    case 2: f.request_id = lk[x].nbcast ? lk[x].bcast[(r / 4) % (lk[x].nbcast < 4 ? lk[x].nbcast : 4)]
                                        : PM__BCAST_ID_BASE + r / 4 % 4; break;
    default: f.request_id = fuzz_u64(in); break;
    }
    switch ((r >> 4) % 4) {
    case 0: f.deadline_ms = 0; break;
    case 1: f.deadline_ms = 1 + fuzz_u8(in); break;
    case 2: f.deadline_ms = 60000; break;
    default: f.deadline_ms = (int64_t)fuzz_u64(in); break; /* negative, or past any clock */
    }
    f.error = (r & 0x40) ? (int32_t)fuzz_u32(in) : -(int32_t)(fuzz_u8(in) % 8);
    if (m & 1)
        f.dst_host = (uint16_t)(fuzz_u8(in) % (PM__MAX_HOSTS + 2));
    if (m & 2)
        f.src_host = (uint16_t)(fuzz_u8(in) % (PM__MAX_HOSTS + 2)); /* forged */
    if (m & 4)
        f.flags = (m & 0x80) ? fuzz_u16(in) : PM__FF_MEMFD;
    f.len = len;
    size_t actual = len;
    if (m & 16) { /* the header lies about its length: a few bytes more or fewer */
        int64_t a = (int64_t)len + (int8_t)fuzz_u8(in);
        actual = a < 0 ? 0 : a > (int64_t)PM_MAX_PAYLOAD + 32 ? PM_MAX_PAYLOAD + 32 : (size_t)a;
    }
    pm__frame_encode(&f, fbuf);
    if (m & 32) /* header bytes straight from the input */
        fuzz_bytes(in, fbuf, PM__FRAME_HDR_SIZE);
    fill_tag(fbuf + PM__FRAME_HDR_SIZE, actual, tag_remote(host_of(x)));
    if (f.type == PM__FT_BDONE && !(m & 64) && actual >= 4)
        pm__put32(fbuf + PM__FRAME_HDR_SIZE, fuzz_u8(in) % 4); /* a count */
    link_deliver(x, fbuf, PM__FRAME_HDR_SIZE + actual);
}

/* One frame on link x in wire form, payload tagged as the far end's. */
static void link_put_frame(unsigned x, pm__frame_hdr *f)
{
    pm__frame_encode(f, fbuf);
    fill_tag(fbuf + PM__FRAME_HDR_SIZE, f->len, tag_remote(host_of(x)));
    link_deliver(x, fbuf, PM__FRAME_HDR_SIZE + f->len);
}

/* The far end answers one of the requests the hub sent it: a reply, or
 * the notice its hub would send. The request may stay remembered, so a
 * duplicate answer comes later. */
static void link_answer(fuzz_in *in, unsigned x)
{
    flink *L = &lk[x];
    uint8_t k = fuzz_u8(in);
    if (L->nreq == 0)
        return;
    unsigned n = L->nreq < NSEEN ? L->nreq : NSEEN;
    seen_req *q = &L->req[k % n];
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    static const int32_t errs[] = {-EHOSTDOWN, -ESTALE, -ENOENT, -EBUSY, -ENOBUFS, -EMSGSIZE};
    f.type = (k & 0x80) ? PM__FT_UNDELIVERABLE : PM__FT_REPLY;
    f.error = f.type == PM__FT_UNDELIVERABLE ? errs[(k >> 4) % 6] : 0;
    f.dst = q->src;
    f.dst_inc = (k & 0x40) ? 0 : q->src_inc;
    f.src = q->dst;
    f.src_inc = (k & 0x20) ? fuzz_u8(in) : q->dst_inc;
    f.request_id = q->id;
    f.len = f.type == PM__FT_REPLY ? fuzz_u8(in) : 0;
    link_put_frame(x, &f);
}

/* The far end's part of one of our mesh broadcasts: BRESULTs from its
 * workers, then a BDONE with their count (or a wrong one, or none). */
static void link_bresults(fuzz_in *in, unsigned x)
{
    flink *L = &lk[x];
    uint8_t k = fuzz_u8(in);
    if (L->nbcast == 0)
        return;
    unsigned nb = L->nbcast < 4 ? L->nbcast : 4;
    uint64_t id = L->bcast[k % nb];
    unsigned n = (k >> 2) % 4;
    for (unsigned j = 0; j < n; j++) {
        pm__frame_hdr f;
        memset(&f, 0, sizeof(f));
        f.type = PM__FT_BRESULT;
        f.src = 7000 + j;
        f.src_inc = 1 + fuzz_u8(in);
        f.request_id = id;
        uint8_t e = fuzz_u8(in);
        f.error = e & 1 ? -(int32_t)(e % 8) : 0;
        f.len = f.error == 0 ? e / 4 : 0;
        link_put_frame(x, &f);
    }
    if (k & 0x40)
        return; /* no BDONE: the deadline settles it */
    pm__frame_hdr d;
    memset(&d, 0, sizeof(d));
    d.type = PM__FT_BDONE;
    d.request_id = id;
    d.len = 4;
    pm__frame_encode(&d, fbuf);
    pm__put32(fbuf + PM__FRAME_HDR_SIZE, n + ((k & 0x80) != 0));
    link_deliver(x, fbuf, PM__FRAME_HDR_SIZE + 4);
}

/* The far end's large message as FRAG frames (doc/protocol.md 6): a new
 * message, its next fragments or the rest at once, and broken sequences
 * (a gap, an overlap, an unknown id, another total or kind, a new first
 * fragment mid-message); its bytes are pat() of the link's tag. */
static void frag_feed(fuzz_in *in, unsigned x)
{
    flink *L = &lk[x];
    uint8_t k = fuzz_u8(in);
    int whole = 0;
    pm__frag_hdr fh;
    if ((k & 7) < 2 || L->fr_total == 0) {
        /* A new message (the same id again when k & 8). */
        if (!(k & 8) || L->fr_id == 0)
            L->fr_id = L->fr_id == UINT32_MAX ? 1 : L->fr_id + 1;
        static const uint8_t kinds[] = {PM__FT_MSG, PM__FT_REQUEST, PM__FT_REPLY};
        L->fr_kind = kinds[(k >> 4) % 3];
        uint8_t t = fuzz_u8(in);
        L->fr_total = t % 4 == 0   ? MAX_MSG
                      : t % 4 == 1 ? MAX_MSG + 1 /* above max_message: refused */
                                   : PM_MAX_PAYLOAD + 1 + fuzz_u16(in) % (MAX_MSG - PM_MAX_PAYLOAD);
        L->fr_off = 0;
        pm__frame_hdr *f = &L->fr_hdr;
        memset(f, 0, sizeof(*f));
        uint8_t d = fuzz_u8(in);
        if (L->fr_kind == PM__FT_REPLY && L->nreq > 0 && !(d & 0x80)) {
            /* The answer to a request the hub sent it. */
            unsigned n = L->nreq < NSEEN ? L->nreq : NSEEN;
            seen_req *q = &L->req[d % n];
            f->dst = q->src;
            f->dst_inc = q->src_inc;
            f->src = q->dst;
            f->src_inc = q->dst_inc;
            f->request_id = q->id;
        } else {
            static const uint32_t dsts[] = {BASE, BASE + 1, 0, BASE + NPORTS};
            f->dst = dsts[d % 4];
            f->dst_inc = (d & 4) && f->dst >= BASE && f->dst < BASE + NPORTS ? w[f->dst - BASE].inc : 0;
            f->src = 7000 + (d >> 3) % 4;
            f->src_inc = 1 + (d >> 5) % 2;
            f->request_id = 1 + fuzz_u8(in) % 8;
            f->deadline_ms = (d & 0x40) ? 60000 : 0;
        }
        fh = (pm__frag_hdr){L->fr_kind, L->fr_id, L->fr_total, 0};
    } else {
        fh = (pm__frag_hdr){L->fr_kind, L->fr_id, L->fr_total, L->fr_off};
        switch (k & 7) {
        case 2: case 3: break;           /* the next one */
        case 4: whole = 1; break;        /* the rest, fragment by fragment */
        case 5:                          /* broken */
            switch ((k >> 3) % 6) {
            case 0: fh.offset++; break;                          /* a gap */
            case 1: fh.offset -= fh.offset > 0; break;           /* an overlap */
            case 2: fh.msg_id += 5; break;                       /* an unknown id */
            case 3: fh.total++; break;                           /* another total */
            case 4: fh.kind = fh.kind == PM__FT_MSG ? PM__FT_REQUEST : PM__FT_MSG; break;
            default: fh.offset = fuzz_u64(in) % (fh.total + 1); break;
            }
            break;
        default: break;
        }
    }
    do {
        if (fh.offset >= fh.total && fh.total > 0)
            fh.offset = fh.total - 1;
        uint16_t k2 = fuzz_u16(in);
        uint64_t n = k2 == 0 || whole ? PM__FRAG_DATA_MAX : 1 + k2 % PM__FRAG_DATA_MAX;
        if (n > fh.total - fh.offset)
            n = fh.total - fh.offset;
        pm__frame_hdr f = L->fr_hdr;
        f.type = PM__FT_FRAG;
        f.len = (uint32_t)(PM__FRAG_HDR_SIZE + n);
        pm__frame_encode(&f, fbuf);
        unsigned char *body = fbuf + PM__FRAME_HDR_SIZE;
        pm__frag_encode(&fh, body);
        unsigned char tag = tag_remote(host_of(x));
        for (uint64_t j = 0; j < n; j++)
            body[PM__FRAG_HDR_SIZE + j] = pat(tag, fh.offset + j);
        link_deliver(x, fbuf, PM__FRAME_HDR_SIZE + f.len);
        if (fh.offset == L->fr_off && fh.msg_id == L->fr_id && fh.total == L->fr_total)
            L->fr_off += n;
        fh.offset += n;
        if (L->fr_off >= L->fr_total)
            L->fr_total = 0; /* sent whole: the next is a new one */
    } while (whole && L->fr_total != 0 && L->up);
}

/* A CREDIT from the far end: for a port the hub writes to, honest (a few
 * frames) or not (more than it ever sent, a wrong length or destination). */
static void credit_feed(fuzz_in *in, unsigned x)
{
    uint8_t k = fuzz_u8(in);
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_CREDIT;
    f.src = (k & 3) == 3 ? fuzz_u16(in) : 7000 + (k & 3);
    f.len = (k & 4) ? fuzz_u8(in) % 12 : 8;
    f.dst = (k & 8) ? 1 : 0;
    pm__frame_encode(&f, fbuf);
    unsigned char *b = fbuf + PM__FRAME_HDR_SIZE;
    memset(b, 0, 12);
    if (k & 0x10) {
        pm__put32(b, fuzz_u32(in));
        pm__put32(b + 4, fuzz_u32(in));
    } else {
        pm__put32(b, fuzz_u8(in) % 8);
        pm__put32(b + 4, fuzz_u16(in));
    }
    link_deliver(x, fbuf, PM__FRAME_HDR_SIZE + f.len);
}

/* ---- main ---- */

static void on_message(pm_cluster *app, const pm_message *m, void *arg)
{
    FUZZ_ASSERT(app == NULL && arg == &hub);
    FUZZ_ASSERT(m->len <= MAX_MSG);
    check_payload(m->data, m->len, tag_of_address(&m->from));
    if (reply_from_callback && m->kind == PM_MSG_REQUEST) /* pm_cluster_reply, re-entering */
        (void)pm__hub_main_send(&hub, &m->from, PM__FT_REPLY, m->request_id, tagged, m->len);
}

static void on_reply(pm_cluster *app, const pm_message *m, void *arg)
{
    rec *r = arg;
    FUZZ_ASSERT(app == NULL && r >= recs && r < recs + MAX_RECS);
    FUZZ_ASSERT(r->expect == 1 && r->calls == 0); /* exactly once */
    FUZZ_ASSERT(!(r->local && in_link_frame)); /* a peer answers only what went to it */
    r->calls++;
    FUZZ_ASSERT(m->error <= 0 && m->len <= MAX_MSG);
    FUZZ_ASSERT(m->error == 0 || m->len == 0);
    if (m->len > 0)
        check_payload(m->data, m->len, tag_of_address(&m->from));
}

static void on_bcast(pm_cluster *app, const pm_message *res, size_t n, void *arg)
{
    rec *r = arg;
    FUZZ_ASSERT(app == NULL && r >= recs && r < recs + MAX_RECS);
    FUZZ_ASSERT(r->expect == 1 && r->calls == 0);
    r->calls++;
    /* Local workers, the parts that failed as one result each, and what
     * the far ends sent. */
    FUZZ_ASSERT(n <= NPORTS + 3 + lk[0].bresults + lk[1].bresults);
    for (size_t k = 0; k < n; k++) {
        /* A local worker's result may be a large reply (its memfd). */
        FUZZ_ASSERT(res[k].error <= 0 && res[k].len <= MAX_MSG);
        FUZZ_ASSERT(res[k].error == 0 || res[k].len == 0);
        if (res[k].len > 0)
            check_payload(res[k].data, res[k].len, tag_of_address(&res[k].from));
    }
}

static rec *rec_new(int kind)
{
    if (nrecs == MAX_RECS)
        return NULL;
    rec *r = &recs[nrecs++];
    r->kind = kind;
    r->local = 0;
    r->expect = 0;
    r->calls = 0;
    return r;
}

/* An address of host (0..3) for main to use: a worker port, the
 * supervisor (0), or one that does not exist. */
static void remote_address(fuzz_in *in, uint16_t host, pm_address *a)
{
    uint8_t k = fuzz_u8(in);
    uint32_t port = k % 4 == 0 ? 0 : k % 4 == 3 ? fuzz_u16(in) : 7000 + k % 4;
    uint64_t inc = (k & 4) ? fuzz_u8(in) : 0;
    pm__node_address_at(&hub.names, host, host == PM__HOST_LOCAL && port == 0 ? PM__NODE_MAIN : port,
                        inc, a);
}

static void main_request(fuzz_in *in)
{
    uint8_t k = fuzz_u8(in);
    rec *r = rec_new(1);
    if (r == NULL)
        return;
    pm_address to;
    const pm_address *top = &to;
    uint16_t host = (uint16_t)(k % 4);
    if (host == 0) {
        top = NULL; /* any local worker */
        r->local = 1;
    } else {
        remote_address(in, host, &to);
    }
    size_t len = (k & 0x10) ? PM_MAX_PAYLOAD + (k >> 7) : fuzz_u8(in);
    if ((k & 0x30) == 0x30) /* a large request: FRAGs, or refused */
        len = (k & 8) ? MAX_MSG + 1 : PM_MAX_PAYLOAD + 1 + fuzz_u16(in) % (MAX_MSG - PM_MAX_PAYLOAD);
    int timeout = 1 + (int)fuzz_u16(in);
    int rc = pm__hub_request(&hub, top, tagged, len, timeout, on_reply, r);
    FUZZ_ASSERT(rc > 0 || r->calls == 0);
    if (rc > 0)
        r->expect = 1;
    else
        FUZZ_ASSERT(rc == -EINVAL || rc == -EMSGSIZE || rc == -EHOSTUNREACH || rc == -EAGAIN ||
                    rc == -EBUSY || rc == -ENOENT || rc == -ESTALE || rc == -EHOSTDOWN ||
                    rc == -ENOMEM);
}

static void main_bcast(fuzz_in *in)
{
    rec *r = rec_new(2);
    if (r == NULL)
        return;
    size_t len = fuzz_u8(in);
    int timeout = 1 + (int)fuzz_u16(in);
    r->expect = 1; /* the callback may run before it returns */
    int rc = pm__hub_broadcast_mesh(&hub, tagged, len, timeout, on_bcast, r);
    FUZZ_ASSERT(rc == 0);
}

static void main_send(fuzz_in *in)
{
    uint8_t k = fuzz_u8(in);
    pm_address to;
    remote_address(in, (uint16_t)(1 + k % 3), &to);
    size_t len = (k & 8) ? PM_MAX_PAYLOAD + 1 : fuzz_u8(in);
    if ((k & 0x18) == 0x18) /* a large message: FRAGs, or refused */
        len = (k & 0x20) ? MAX_MSG + 1 : PM_MAX_PAYLOAD + 1 + fuzz_u16(in) % (MAX_MSG - PM_MAX_PAYLOAD);
    int rc = pm__hub_main_send(&hub, &to, (k & 4) ? PM__FT_REPLY : PM__FT_MSG, fuzz_u8(in),
                               tagged, len);
    FUZZ_ASSERT(rc == 0 || rc == -EHOSTUNREACH || rc == -EAGAIN || rc == -EMSGSIZE ||
                rc == -EPIPE || rc == -ENOENT || rc == -EINVAL);
}

/* ---- a local worker ---- */

static void worker_write(unsigned i, const pm__frame_hdr *f)
{
    wport *p = &w[i];
    void *slot;
    if (p->cut || pm__ring_reserve(&p->up, PM__FRAME_HDR_SIZE + f->len, &slot) != 0)
        return;
    pm__frame_encode(f, slot);
    fill_tag((unsigned char *)slot + PM__FRAME_HDR_SIZE, f->len, tag_local(i));
    pm__ring_commit(&p->up, PM__FRAME_HDR_SIZE + f->len);
    wport_publish(&hub, p, i);
}

/* A frame from worker i, mostly for another host: any type, any host
 * index (linked, known and down, unknown, out of range), any port. */
static void worker_send(fuzz_in *in, unsigned i)
{
    uint8_t m = fuzz_u8(in);
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    static const uint8_t types[] = {PM__FT_MSG, PM__FT_REQUEST, PM__FT_REPLY, PM__FT_REQUEST};
    f.type = (m & 0x80) ? (uint8_t)(fuzz_u8(in) % (PM__FT_MAX_ + 2)) : types[m & 3];
    uint8_t h = fuzz_u8(in);
    static const uint16_t hosts[] = {1, 2, 3, 0, 5, 1, 2, 200};
    f.dst_host = (h & 0x80) ? fuzz_u8(in) : hosts[h & 7];
    switch ((h >> 3) % 4) {
    case 0: f.dst = 0; break;
    case 1: f.dst = 7000 + (h >> 5) % 4; break;
    case 2: f.dst = f.dst_host == 0 ? (h >> 5) % NPORTS : BASE + (h >> 5) % NPORTS; break;
    default: f.dst = fuzz_u32(in); break;
    }
    f.dst_inc = (m & 4) ? fuzz_u8(in) : 0;
    f.src = 0x5eadbeefu; /* the hub overwrites both */
    f.src_inc = 0x5eadbeef5eadbeefull;
    f.request_id = fuzz_u8(in) % 8;
    uint8_t dl = (m >> 3) % 4;
    f.deadline_ms = dl == 0 ? 0 : dl == 1 ? 1 : (int64_t)(pm__now_ms() + 60000);
    if (m & 0x20)
        f.flags = PM__FF_MEMFD; /* no record behind it: a protocol fault */
    f.len = (m & 0x40) ? fuzz_u16(in) % (PM_MAX_PAYLOAD + 1) : fuzz_u8(in) % 64;
    if (f.flags)
        f.len = PM__ANNOUNCE_SIZE;
    worker_write(i, &f);
}

/* Worker i answers one of the requests it took from its ring (from main,
 * a local worker, or another host), or one it never got. */
static void worker_reply(fuzz_in *in, unsigned i)
{
    uint8_t k = fuzz_u8(in);
    if (nwreq[i] == 0)
        return;
    unsigned n = nwreq[i] < NSEEN ? nwreq[i] : NSEEN;
    seen_req *q = &wreq[i][k % n];
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_REPLY;
    f.dst_host = q->host;
    f.dst = q->src;
    f.dst_inc = q->src_inc;
    f.request_id = (k & 0x80) ? q->id + 1 : q->id;
    f.len = fuzz_u8(in);
    worker_write(i, &f);
}

/* One record on worker i's fd socket, as bigmsg.c writes it. 0, or -1
 * (the socket is full). */
static int big_record(wport *p, int fd, uint32_t seq)
{
    unsigned char rec[PM__BIGMSG_RECORD];
    pm__put32(rec, 0x44464d50u); /* "PMFD" */
    pm__put32(rec + 4, seq);
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof(ctl));
    struct iovec iov = {rec, sizeof(rec)};
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.buf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    return sendmsg(p->wsock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof(rec) ? 0 : -1;
}

/* Writes len zeros at the start of fd: a large message's pages are paid
 * for by its sender, and the hub refuses a memfd with a hole. 0 or -1. */
static int write_zeros(int fd, uint64_t len)
{
    static const unsigned char zeros[65536];
    while (len > 0) {
        size_t n = len < sizeof(zeros) ? (size_t)len : sizeof(zeros);
        ssize_t k = write(fd, zeros, n);
        if (k <= 0)
            return -1;
        len -= (uint64_t)k;
    }
    return 0;
}

/* A large message from worker i, mostly to another host (the fd path of
 * fuzz_hub: a sealed memfd written whole, its record on the socket, then
 * the announcing frame), its first and last byte the worker's tag; a reply
 * answers a request it took from a link. */
static void worker_big(fuzz_in *in, unsigned i)
{
    wport *p = &w[i];
    if (p->cut)
        return;
    uint8_t k = fuzz_u8(in), h = fuzz_u8(in);
    uint64_t len = (k & 3) == 0   ? MAX_MSG
                   : (k & 3) == 1 ? MAX_MSG + 1
                                  : PM_MAX_PAYLOAD + 1 + fuzz_u16(in) % (MAX_MSG - PM_MAX_PAYLOAD);
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    static const uint8_t types[] = {PM__FT_MSG, PM__FT_REQUEST, PM__FT_REPLY, PM__FT_REQUEST};
    f.type = types[(k >> 2) & 3];
    static const uint16_t hosts[] = {1, 2, 3, 1, 2, 0, 1, 2};
    f.dst_host = hosts[h & 7];
    f.dst = f.dst_host == 0 ? (h >> 3) % NPORTS : 7000 + (h >> 3) % 4;
    f.request_id = 1 + (h >> 5);
    f.deadline_ms = (k & 0x10) ? (int64_t)(pm__now_ms() + 60000) : 0;
    if (f.type == PM__FT_REPLY && nwreq[i] > 0) {
        unsigned n = nwreq[i] < NSEEN ? nwreq[i] : NSEEN;
        seen_req *q = &wreq[i][h % n];
        f.dst_host = q->host;
        f.dst = q->src;
        f.dst_inc = q->src_inc;
        f.request_id = q->id;
        f.deadline_ms = 0;
    }
    int fd = memfd_create("fz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return;
    unsigned char tag = tag_local(i);
    int ok = write_zeros(fd, len) == 0 && pwrite(fd, &tag, 1, 0) == 1 &&
             pwrite(fd, &tag, 1, (off_t)len - 1) == 1 &&
             fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) == 0;
    uint32_t seq = pm__bigmsg_next(p->tx_seq);
    ok = ok && big_record(p, fd, seq) == 0;
    close(fd); /* the socket holds its own reference */
    if (!ok)
        return;
    p->tx_seq = seq;
    f.flags = PM__FF_MEMFD;
    f.len = PM__ANNOUNCE_SIZE;
    pm__announce a = {len, seq};
    void *slot;
    if (pm__ring_reserve(&p->up, PM__FRAME_HDR_SIZE + PM__ANNOUNCE_SIZE, &slot) != 0)
        return; /* its record waits alone: the hub's next one finds it out of sequence */
    pm__frame_encode(&f, slot);
    pm__announce_encode(&a, (unsigned char *)slot + PM__FRAME_HDR_SIZE);
    pm__ring_commit(&p->up, PM__FRAME_HDR_SIZE + PM__ANNOUNCE_SIZE);
    wport_publish(&hub, p, i);
}

/* A large message worker i was handed (its frame announces it): the
 * record waits on its socket, next in sequence, with a sealed memfd of
 * the announced length; its bytes are its writer's. */
static void worker_take_big(wport *p, const pm__frame_hdr *f, const unsigned char *ann)
{
    unsigned char copy[PM__ANNOUNCE_SIZE];
    pm__announce a;
    FUZZ_ASSERT(f->len == PM__ANNOUNCE_SIZE);
    memcpy(copy, ann, sizeof(copy));
    FUZZ_ASSERT(pm__announce_decode(copy, sizeof(copy), &a) == 0);
    FUZZ_ASSERT(a.seq == pm__bigmsg_next(p->rx_seq));
    int fd = -1;
    FUZZ_ASSERT(pm__bigmsg_recv(p->wsock, a.seq, &fd) == 0);
    p->rx_seq = a.seq;
    FUZZ_ASSERT(pm__bigmsg_check(fd, a.len, MAX_MSG) == 0);
    const void *map;
    FUZZ_ASSERT(pm__bigmsg_map(fd, (size_t)a.len, &map) == 0);
    if (f->src_host != 0) {
        FUZZ_ASSERT(f->src_host >= 1 && f->src_host <= NLINKS && f->src <= 0xFFFFu);
        check_big(map, (size_t)a.len, tag_remote(f->src_host));
    } else {
        FUZZ_ASSERT(f->src == PM__NODE_MAIN || f->src < NPORTS);
        check_tag(map, (size_t)a.len, tag_local(f->src));
    }
    munmap((void *)map, (size_t)a.len);
    close(fd);
}

/* Reads worker i's down ring, checking what the hub wrote there, once the
 * loop turn that wrote it has ended (the hub publishes at a turn's end). */
static void worker_drain(unsigned i)
{
    wport *p = &w[i];
    pm__hub_publish(&hub);
    for (int n = 0; n < 4096; n++) {
        const void *b;
        size_t len;
        int rc = pm__ring_peek(&p->down, &b, &len);
        FUZZ_ASSERT(rc >= 0);
        if (rc == 0)
            break;
        pm__frame_hdr f;
        FUZZ_ASSERT(pm__frame_decode(b, len, PM__CHANNEL_MAX_FRAME, &f) == 0);
        FUZZ_ASSERT(f.dst == i && f.dst_inc == p->inc && f.dst_host == 0);
        FUZZ_ASSERT(f.len <= PM_MAX_PAYLOAD);
        const unsigned char *payload = (const unsigned char *)b + PM__FRAME_HDR_SIZE;
        switch (f.type) {
        case PM__FT_MSG:
        case PM__FT_REQUEST:
        case PM__FT_REPLY:
            if (f.flags & PM__FF_MEMFD) {
                worker_take_big(p, &f, payload);
            } else if (f.src_host != 0) {
                /* From a link: its host, an address port, its tag. */
                FUZZ_ASSERT(f.src_host >= 1 && f.src_host <= NLINKS && f.src <= 0xFFFFu);
                check_tag(payload, f.len, tag_remote(f.src_host));
            } else if (f.src == PM__NODE_MAIN && f.type == PM__FT_REQUEST &&
                       f.request_id >= PM__BCAST_ID_BASE && f.len > 0 && payload[0] != 'M') {
                /* A remote host's mesh broadcast, fanned out here by our
                 * supervisor (a BCAST): its payload, from our main. */
                FUZZ_ASSERT(payload[0] >= tag_remote(1) && payload[0] <= tag_remote(NLINKS));
                check_tag(payload, f.len, payload[0]);
            } else {
                FUZZ_ASSERT(f.src == PM__NODE_MAIN || f.src < NPORTS);
                check_tag(payload, f.len, tag_local(f.src));
            }
            if (f.type == PM__FT_REQUEST) {
                seen_req r = {f.src_host, f.src, f.src_inc, f.dst, f.dst_inc, f.request_id};
                remember(wreq[i], &nwreq[i], &r);
            }
            break;
        case PM__FT_UNDELIVERABLE:
            FUZZ_ASSERT(f.error < 0 && f.len == 0);
            break;
        case PM__FT_STOP:
        case PM__FT_INIT:
            break;
        default:
            FUZZ_ASSERT(!"a frame type no worker is sent");
        }
        pm__ring_consume(&p->down);
    }
    pm__ring_release(&p->down);
}

static void worker_restart(unsigned i)
{
    pm__hub_port_close(&hub, i);
    w[i].inc++;
    channel_fresh(&w[i]);
    nwreq[i] = 0;
    pm__hub_hosts_copy(&hub, &w[i].channel);
    pm__hub_port_open(&hub, i, &w[i].channel, w[i].inc);
    pm__hub_port_set_state(&hub, i, PM__PORT_READY);
}

static void loop_pass(void)
{
    unsigned k;
    pm__hub_pass_begin(&hub);
    while (pm__hub_pass_next(&hub, &k))
        pm__hub_port_service(&hub, k);
    pm__hub_publish(&hub);
    (void)pm__hub_arm_idle(&hub);
}

/* What must hold after every operation. */
static void check_state(void)
{
    unsigned pending = 0;
    for (unsigned k = 0; k < nrecs; k++) {
        FUZZ_ASSERT(recs[k].calls <= recs[k].expect);
        pending += recs[k].kind == 1 && recs[k].expect && recs[k].calls == 0;
    }
    FUZZ_ASSERT(hub.main_request_count == pending); /* the hub's pending requests: those not settled */
    for (unsigned x = 0; x < NLINKS; x++) {
        const pm__hub_link *l = &hub.links[host_of(x)];
        const flink *L = &lk[x];
        FUZZ_ASSERT(l->up == L->up);
        FUZZ_ASSERT(l->ninflight <= l->cap && l->cap <= PM__REMOTE_INFLIGHT_MAX);
        FUZZ_ASSERT(l->ninflight <= (L->up ? L->reqs_since_up : 0));
        FUZZ_ASSERT(l->frames_in == L->exp_in);
        FUZZ_ASSERT(l->forged == L->exp_forged);
        FUZZ_ASSERT(l->frames_out == L->exp_out);
        /* At most one message reassembled, its fd only while it is; one
         * being sent, only while the link is up; a link down holds no
         * sender (they were read again and answered). */
        FUZZ_ASSERT((l->rx_fd >= 0) == (l->rx.active != 0));
        FUZZ_ASSERT(!l->rx.active || (l->rx.got < l->rx.total && l->rx.total <= MAX_MSG));
        FUZZ_ASSERT(l->tx_fd < 0 || l->up);
        if (!l->up)
            FUZZ_ASSERT(l->held_head == -1 && l->window_held_head == -1 && l->frag_held_head == -1);
        /* Windows never below zero (they would wrap): never more than went
         * out since the link came up. */
        for (uint32_t j = 0; j < l->win.cap; j++) {
            const pm__hub_link_window *e = &l->win.v[j];
            if (e->key == 0)
                continue;
            FUZZ_ASSERT(e->frames <= L->msgreq_out);
            FUZZ_ASSERT(e->bytes <= L->msgreq_out * (PM__FRAME_HDR_SIZE + PM_MAX_PAYLOAD));
        }
    }
    for (unsigned k = 0; k < NPORTS; k++)
        FUZZ_ASSERT(!w[k].cut || !hub.ports[k].reading);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int once;
    if (!once) {
        once = 1;
        for (unsigned i = 0; i < NPORTS; i++)
            wport_alloc(&w[i]);
        memset(tagged, 'M', sizeof(tagged));
    }
    size_t fds_before = count_fds();
    pm__names names = {.system = "fz", .host = "h", .base_port = BASE, .nslots = NPORTS};
    FUZZ_ASSERT(pm__hub_init(&hub, NPORTS, &names, NULL, &fake_ops, &w[0]) == 0);
    hub.max_message = MAX_MSG;
    pm__hub_peer_mode(&hub);
    FUZZ_ASSERT(pm__hub_host_index(&hub, "b") == 1);
    FUZZ_ASSERT(pm__hub_host_index(&hub, "c") == 2);
    FUZZ_ASSERT(pm__hub_host_index(&hub, "d") == 3);
    hub.on_message = on_message;
    hub.on_message_arg = &hub;
    reply_from_callback = 0;
    nrecs = 0;
    memset(lk, 0, sizeof(lk));
    for (unsigned i = 0; i < NPORTS; i++) {
        w[i].inc = 1;
        channel_fresh(&w[i]);
        w[i].open = 1;
        w[i].hello = 1;
        nwreq[i] = 0;
        pm__hub_hosts_copy(&hub, &w[i].channel);
        pm__hub_port_open(&hub, i, &w[i].channel, w[i].inc);
        pm__hub_port_set_state(&hub, i, PM__PORT_READY);
    }
    for (unsigned x = 0; x < NLINKS; x++)
        link_set_up(x, 1, PM__PEER_CAP_CREDIT | PM__PEER_CAP_FRAG);

    fuzz_in in = {data, size};
    while (fuzz_more(&in)) {
        uint8_t op = fuzz_u8(&in);
        unsigned x = (op >> 5) & 1;
        unsigned i = (op >> 6) % NPORTS;
        if ((op & 0x10) && op % 16 < 8) {
            /* Large messages and flow control (bit 4 is free above). */
            switch (op % 8) {
            case 0:
            case 1:
            case 2:
                frag_feed(&in, x);
                break;
            case 3:
                credit_feed(&in, x);
                break;
            case 4:
            case 5:
                worker_big(&in, i);
                break;
            case 6: /* the link drains: its cursor and held senders go on */
                lk[x].mode = 0;
                pm__hub_link_writable(&hub, host_of(x));
                break;
            default: /* down, or up with the capability bits the input picks */
                link_set_up(x, !lk[x].up, fuzz_u8(&in) % 4);
                break;
            }
            check_state();
            continue;
        }
        switch (op % 16) {
        case 0:
        case 1:
            link_feed(&in, x);
            break;
        case 2:
            link_answer(&in, x);
            break;
        case 3:
            link_bresults(&in, x);
            break;
        case 4: /* down, or up again */
            link_set_up(x, !lk[x].up, PM__PEER_CAP_CREDIT | PM__PEER_CAP_FRAG);
            break;
        case 5: /* the link's buffer fills, or it starts going down */
            lk[x].mode = fuzz_u8(&in) % 3;
            break;
        case 6:
            worker_send(&in, i);
            break;
        case 7:
            worker_reply(&in, i);
            break;
        case 8:
            worker_drain(i);
            break;
        case 9:
            loop_pass();
            break;
        case 10:
            main_request(&in);
            break;
        case 11:
            main_bcast(&in);
            break;
        case 12:
            main_send(&in);
            break;
        case 13: { /* time passes (sometimes past every lifetime) */
            uint8_t t = fuzz_u8(&in);
            uint64_t ahead = (t & 0x80) ? PM__INFLIGHT_LIFETIME_MS + 1000 : (uint64_t)t << 10;
            pm__hub_fire(&hub, pm__now_ms() + ahead);
            break;
        }
        case 14: /* main gives up on a request */
            if (nrecs > 0)
                (void)pm__hub_cancel(&hub, fuzz_u8(&in) % (2 * nrecs + 1));
            reply_from_callback = !reply_from_callback;
            break;
        case 15:
            worker_restart(i);
            break;
        }
        check_state();
    }
    /* The end: one link goes down first (its requests are answered
     * -EHOSTUNREACH), the other is still up when the hub is freed (the
     * mesh is gone then: nothing may be sent, pm__hub_free). */
    link_set_up(0, 0, 0);
    for (unsigned i = 0; i < NPORTS; i++) {
        pm__hub_port_close(&hub, i); /* may answer over link 1, still up */
        socks_close(&w[i]);
        w[i].open = 0;
    }
    lk[1].up = 0;
    pm__hub_free(&hub);
    for (unsigned k = 0; k < nrecs; k++)
        FUZZ_ASSERT(recs[k].calls == recs[k].expect); /* every callback ran, once */
    FUZZ_ASSERT(count_fds() == fds_before); /* every memfd closed: sent, reassembled, passed on */
    return 0;
}
