/* SPDX-License-Identifier: MIT */
/* fuzz_hub.c - libFuzzer harness for the hub fed a frame sequence by hostile workers through the port interface. */
/*
 * Three ports, each with a hand-made link: the control block and two rings
 * of the smallest capacity that takes a maximal frame (PM__CHANNEL_MAX_FRAME),
 * in one heap block of exactly the link's size, with no doorbells (no
 * system call, deterministic). The harness plays the cluster (a fake
 * pm__hub_ops whose fault cuts the port off as the contract says, whose
 * control answers HELLO with INIT and READY with the ready state), main
 * (sends, broadcasts, replies from on_message, deadlines) and the workers
 * (frames written into their up rings: well-formed, malformed, or raw
 * header bytes; hostile stores into their shared indices and records;
 * draining their down rings; restarts with fresh memory). Large messages
 * too: each incarnation has a real SOCK_SEQPACKET socketpair (send buffer
 * at the minimum, as channel.c makes it, so it fills after a few records),
 * and a worker sends records carrying a sealed memfd of the announced
 * length, one of another length, an unsealed memfd, a sparse one, one
 * reopened write-only, a pipe, no fd or two,
 * with the right sequence or any, with or without the announcing frame
 * (PM__FF_MEMFD), or an announcement with no record; main sends large
 * messages (sealed memfds the hub makes) to the workers.
 *
 * Oracle, beyond ASan/UBSan and LeakSanitizer: every frame the hub writes
 * into a down ring decodes, is addressed to that port's incarnation and,
 * if it carries traffic, names as its source a port and an incarnation that
 * port has had (identity comes from the ring, never from the frame); no
 * frame reaches main with a payload above PM_MAX_PAYLOAD or from a port cut
 * off or not ready; a fault is reported only for a port that exists, with
 * reason protocol or corrupt-ring; a control frame is HELLO or READY with
 * at most PM__HUB_CONTROL_MAX bytes. Large messages: every PM__FF_MEMFD
 * frame in a down ring finds its record already waiting on the worker's
 * socket, with the next sequence and a sealed memfd of exactly the
 * announced length within the maximum; a port said to have a full socket
 * (sock_full) has one that is not writable; the hub never holds more than
 * PM__HOLD_MAX_FDS queued fds per sender; and no fd is left open in the
 * process after a run (every memfd received, made or passed on is closed).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "channel/bigmsg.h"

#include "fuzz.h"
#include "fuzz_wport.h"
#include "hub/hub_core.h"
#include "base/le.h"
#include "channel/proto.h"

#define NPORTS 3u
#define FORGED_SRC 0x5eadbeefu
#define FORGED_INC 0x5eadbeef5eadbeefull
/* The cluster's limit on a message here: large messages stay cheap (at
 * most 256 KiB of zeros, written). */
#define MAX_MSG ((size_t)PM_MAX_PAYLOAD * 4)

static pm__hub hub;
static wport w[NPORTS];
static int reply_from_callback; /* on_message answers requests at once */

/* ---- the fake owner (what cluster.c does, minus processes) ---- */

static void fake_fault(void *owner, unsigned i, int reason)
{
    FUZZ_ASSERT(owner == &w[0] && i < NPORTS);
    FUZZ_ASSERT(reason == PM_REASON_PROTOCOL || reason == PM_REASON_CORRUPT_RING);
    FUZZ_ASSERT(w[i].open);
    w[i].cut = 1;
    pm__hub_port_cut(&hub, i); /* the contract: cut off before returning */
}

static void fake_control(void *owner, unsigned i, int type, const void *payload, size_t len)
{
    FUZZ_ASSERT(owner == &w[0] && i < NPORTS && w[i].open && !w[i].cut);
    FUZZ_ASSERT(type == PM__FT_HELLO || type == PM__FT_READY);
    FUZZ_ASSERT(len <= PM__HUB_CONTROL_MAX);
    FUZZ_ASSERT(type != PM__FT_READY || len == 0);
    volatile unsigned sum = 0;
    for (size_t k = 0; k < len; k++)
        sum += ((const unsigned char *)payload)[k];
    (void)sum;
    if (type == PM__FT_HELLO) {
        if (w[i].hello || len != 4 || pm__get32(payload) != PM__PROTO_VERSION) {
            fake_fault(owner, i, PM_REASON_PROTOCOL);
            return;
        }
        w[i].hello = 1;
        unsigned char buf[PM__INIT_FIXED + 8];
        pm__init_msg m;
        memset(&m, 0, sizeof(m));
        m.slot = i;
        pm__node_address(&hub.names, i, w[i].inc, &m.addr);
        m.data = "initdata";
        m.len = 8;
        pm__init_encode(&m, buf);
        (void)pm__hub_send_control(&hub, i, PM__FT_INIT, buf, sizeof(buf));
        return;
    }
    if (!w[i].hello) {
        fake_fault(owner, i, PM_REASON_PROTOCOL);
        return;
    }
    pm__hub_port_set_state(&hub, i, PM__PORT_READY);
}

/* A destination that stops draining is only reported: nothing to check. */
static void fake_not_draining(void *owner, unsigned p)
{
    (void)owner;
    (void)p;
}

static const pm__hub_ops fake_ops = {fake_fault, fake_control, fake_not_draining, NULL};

/* ---- main ---- */

static void on_message(pm_cluster *app, const pm_message *m, void *arg)
{
    FUZZ_ASSERT(app == NULL && arg == &hub);
    FUZZ_ASSERT(m->len <= MAX_MSG && (m->len == 0 || m->data != NULL));
    volatile unsigned sum = 0;
    if (m->len > PM_MAX_PAYLOAD) /* mapped from a checked memfd: first and last byte */
        sum += ((const unsigned char *)m->data)[0] + ((const unsigned char *)m->data)[m->len - 1];
    else
        for (size_t k = 0; k < m->len; k++)
            sum += ((const unsigned char *)m->data)[k];
    (void)sum;
    uint32_t node;
    FUZZ_ASSERT(pm__address_node(&hub.names, &m->from, &node) == 0 && node < NPORTS);
    FUZZ_ASSERT(!w[node].cut && w[node].open);
    FUZZ_ASSERT(m->from.incarnation == w[node].inc);
    FUZZ_ASSERT(hub.ports[node].state == PM__PORT_READY ||
                hub.ports[node].state == PM__PORT_STOPPING);
    if (reply_from_callback && m->kind == PM_MSG_REQUEST) /* pm_cluster_reply, re-entering the hub */
        (void)pm__hub_main_send(&hub, &m->from, PM__FT_REPLY, m->request_id, m->data, m->len);
}

static void on_broadcast(pm_cluster *app, const pm_message *r, size_t n, void *arg)
{
    FUZZ_ASSERT(app == NULL && arg == &hub && n <= NPORTS);
    for (size_t k = 0; k < n; k++) {
        FUZZ_ASSERT(r[k].error <= 0 && r[k].len <= MAX_MSG);
        FUZZ_ASSERT(r[k].error == 0 || r[k].len == 0);
        volatile unsigned sum = 0;
        for (size_t j = 0; j < r[k].len; j++)
            sum += ((const unsigned char *)r[k].data)[j];
        (void)sum;
    }
}

/* ---- a worker ---- */

/* Writes one frame into port i's up ring as its worker would, or with the
 * header bytes taken raw from the input. */
static void worker_send(fuzz_in *in, unsigned i)
{
    wport *p = &w[i];
    uint8_t mode = fuzz_u8(in);
    static const uint32_t lens[] = {0, 1, 4, 8, 63, 64, 65, 1000, PM_MAX_PAYLOAD,
                                    PM_MAX_PAYLOAD + 1, PM__CHANNEL_MAX_FRAME - PM__FRAME_HDR_SIZE};
    uint32_t len = (mode & 0x80) ? fuzz_u16(in) % (PM__CHANNEL_MAX_FRAME - PM__FRAME_HDR_SIZE + 1)
                                 : lens[fuzz_u8(in) % (sizeof(lens) / sizeof(lens[0]))];
    unsigned char hdr[PM__FRAME_HDR_SIZE];
    if (mode & 0x40) {
        memset(hdr, 0, sizeof(hdr));
        fuzz_bytes(in, hdr, sizeof(hdr)); /* anything at all */
    } else {
        pm__frame_hdr f;
        memset(&f, 0, sizeof(f));
        f.type = (uint8_t)(fuzz_u8(in) % (PM__FT_MAX_ + 2));
        uint8_t d = fuzz_u8(in);
        f.dst = d % 8 < NPORTS + 1 ? d % 8 : d % 8 == 6 ? PM__NODE_MAIN : fuzz_u32(in);
        uint8_t di = fuzz_u8(in) % 4;
        f.dst_inc = di == 0 ? 0 : f.dst < NPORTS ? w[f.dst].inc - (di == 2) : fuzz_u64(in);
        f.src = FORGED_SRC; /* the hub must overwrite both */
        f.src_inc = FORGED_INC;
        f.request_id = fuzz_u8(in) % 8; /* few ids: collisions and duplicates */
        uint8_t dl = fuzz_u8(in) % 4;
        f.deadline_ms = dl == 0 ? 0 : dl == 1 ? 1 : (int64_t)(pm__now_ms() + 60000);
        f.error = -(int32_t)(fuzz_u8(in) % 4);
        f.len = (mode & 0x20) ? fuzz_u32(in) : len; /* a header that lies about its length */
        pm__frame_encode(&f, hdr);
    }
    void *slot;
    if (pm__ring_reserve(&p->up, PM__FRAME_HDR_SIZE + len, &slot) != 0)
        return; /* its ring is full (or its own end poisoned by hostile stores) */
    memcpy(slot, hdr, sizeof(hdr));
    memset((unsigned char *)slot + PM__FRAME_HDR_SIZE, (int)i + 'a', len);
    pm__ring_commit(&p->up, PM__FRAME_HDR_SIZE + len);
    wport_publish(&hub, p, i);
}

/* Writes len zeros at the start of fd: pages the sender has paid for
 * (fallocate would allocate them, but tmpfs reports unwritten pages as
 * holes, which the check refuses). 0 or -1. */
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

/* A memfd of len bytes, sealed or not, written (zeros) or sparse
 * (ftruncate only: refused); -1 when the system refuses (then the worker
 * sends without it). */
static int make_memfd(uint64_t len, int sealed, int sparse)
{
    int fd = memfd_create("fz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    if ((sparse ? ftruncate(fd, (off_t)len) : write_zeros(fd, len)) < 0 ||
        (sealed && fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) < 0)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* fd reopened write-only (closed either way): sealed, whole, and no
 * receiver can map it. */
static int write_only(int fd)
{
    if (fd < 0)
        return -1;
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    int w = open(path, O_WRONLY | O_CLOEXEC);
    close(fd);
    return w;
}

/* One record on the worker's socket, as bigmsg.c writes it, with nfds fds
 * (0..2). 0, or -1 when the socket is full. */
static int raw_record(wport *p, const int *fds, int nfds, uint32_t seq)
{
    unsigned char rec[PM__BIGMSG_RECORD];
    pm__put32(rec, 0x44464d50u); /* "PMFD" */
    pm__put32(rec + 4, seq);
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(2 * sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof(ctl));
    struct iovec iov = {rec, sizeof(rec)};
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (nfds > 0) {
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
    }
    return sendmsg(p->wsock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof(rec) ? 0 : -1;
}

/* A large message from port i's worker, honest or not: the record (with
 * the fd the input picks) and/or the announcing frame. */
static void worker_big(fuzz_in *in, unsigned i)
{
    wport *p = &w[i];
    uint8_t k = fuzz_u8(in), k2 = fuzz_u8(in);
    static const uint64_t lens[] = {PM_MAX_PAYLOAD + 1, MAX_MSG, MAX_MSG + 1, PM_MAX_PAYLOAD};
    uint64_t len = k & 4 ? PM_MAX_PAYLOAD + 1 + fuzz_u16(in) % MAX_MSG : lens[k & 3];
    enum { SEALED, WRONG_SIZE, UNSEALED, PIPE, NO_RECORD, TWO_FDS, NO_FD, SPARSE, WRITE_ONLY, KINDS };
    int kind = (k >> 3) % KINDS;
    uint32_t seq = (k2 & 1) ? fuzz_u32(in) : pm__bigmsg_next(p->tx_seq);
    int fds[2] = {-1, -1}, nfds = 0;
    switch (kind) {
    case SEALED:
    case TWO_FDS:
        fds[nfds++] = make_memfd(len, 1, 0);
        if (kind == TWO_FDS)
            fds[nfds++] = make_memfd(len, 1, 0);
        break;
    case WRONG_SIZE:
        fds[nfds++] = make_memfd(len - 1, 1, 0);
        break;
    case UNSEALED:
        fds[nfds++] = make_memfd(len, 0, 0);
        break;
    case SPARSE:
        fds[nfds++] = make_memfd(len, 1, 1);
        break;
    case WRITE_ONLY:
        fds[nfds++] = write_only(make_memfd(len, 1, 0));
        break;
    case PIPE: {
        int pp[2];
        if (pipe2(pp, O_CLOEXEC) == 0) {
            close(pp[1]);
            fds[nfds++] = pp[0];
        }
        break;
    }
    }
    int sent = 1;
    if (kind != NO_RECORD) {
        int n = 0;
        for (int j = 0; j < nfds; j++)
            if (fds[j] >= 0)
                fds[n++] = fds[j];
        sent = raw_record(p, fds, n, seq) == 0;
        for (int j = 0; j < n; j++)
            close(fds[j]); /* the socket holds its own references */
    }
    if (!sent || (k2 & 2)) /* socket full, or a record without its frame */
        return;
    if (kind == SEALED)
        p->tx_seq = seq;
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    static const uint8_t types[] = {PM__FT_MSG, PM__FT_REQUEST, PM__FT_REPLY, PM__FT_HELLO};
    f.type = types[(k2 >> 2) & 3];
    f.flags = PM__FF_MEMFD;
    uint8_t d = (uint8_t)(k2 >> 4);
    f.dst = d % 4 < NPORTS ? d % 4 : PM__NODE_MAIN;
    f.dst_inc = (k2 & 0x40) && f.dst < NPORTS ? w[f.dst].inc : 0;
    f.request_id = (k >> 6) & 3;
    f.len = PM__ANNOUNCE_SIZE;
    unsigned char ann[PM__ANNOUNCE_SIZE];
    pm__announce a = {len, seq};
    pm__announce_encode(&a, ann);
    if (k2 & 0x80)
        ann[15] = 1; /* the reserved word, not zero */
    void *slot;
    if (pm__ring_reserve(&p->up, PM__FRAME_HDR_SIZE + PM__ANNOUNCE_SIZE, &slot) != 0)
        return;
    pm__frame_encode(&f, slot);
    memcpy((unsigned char *)slot + PM__FRAME_HDR_SIZE, ann, sizeof(ann));
    pm__ring_commit(&p->up, PM__FRAME_HDR_SIZE + PM__ANNOUNCE_SIZE);
    wport_publish(&hub, p, i);
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

/* Reads everything in port i's down ring as its worker would, checking what
 * the hub wrote there. */
static void worker_drain(unsigned i)
{
    wport *p = &w[i];
    for (int n = 0; n < 4096; n++) {
        const void *b;
        size_t len;
        int rc = pm__ring_peek(&p->down, &b, &len);
        if (rc <= 0) {
            FUZZ_ASSERT(rc == 0 || p->down_tainted);
            break;
        }
        pm__frame_hdr f;
        int d = pm__frame_decode(b, len, PM__CHANNEL_MAX_FRAME, &f);
        if (!p->down_tainted) {
            FUZZ_ASSERT(d == 0);                                  /* the hub writes valid frames */
            FUZZ_ASSERT(f.dst == i && f.dst_inc == p->inc);      /* to this incarnation */
            FUZZ_ASSERT(f.type != PM__FT_HELLO && f.type != PM__FT_READY);
            if (f.type != PM__FT_INIT)
                FUZZ_ASSERT(f.len <= PM_MAX_PAYLOAD);
            if (f.type == PM__FT_MSG || f.type == PM__FT_REQUEST || f.type == PM__FT_REPLY) {
                /* Identity from the ring: a port and one of its incarnations. */
                FUZZ_ASSERT(f.src == PM__NODE_MAIN ||
                            (f.src < NPORTS && f.src_inc >= 1 && f.src_inc <= w[f.src].inc));
                FUZZ_ASSERT(f.src != FORGED_SRC && f.src_inc != FORGED_INC);
            }
            if (f.type == PM__FT_UNDELIVERABLE)
                FUZZ_ASSERT(f.error < 0 && f.len == 0);
            if (f.flags & PM__FF_MEMFD) {
                /* Its record waits already, next in sequence, with a
                 * sealed memfd of the announced length. */
                unsigned char copy[PM__ANNOUNCE_SIZE];
                pm__announce a;
                FUZZ_ASSERT(f.len == PM__ANNOUNCE_SIZE);
                memcpy(copy, (const unsigned char *)b + PM__FRAME_HDR_SIZE, sizeof(copy));
                FUZZ_ASSERT(pm__announce_decode(copy, sizeof(copy), &a) == 0);
                FUZZ_ASSERT(a.seq == pm__bigmsg_next(p->rx_seq));
                int fd = -1;
                FUZZ_ASSERT(pm__bigmsg_recv(p->wsock, a.seq, &fd) == 0);
                p->rx_seq = a.seq;
                FUZZ_ASSERT(pm__bigmsg_check(fd, a.len, MAX_MSG) == 0);
                close(fd);
            }
        }
        pm__ring_consume(&p->down);
    }
    pm__ring_release(&p->down);
}

/* A store a worker may make anywhere in its own memory. */
static void worker_scribble(fuzz_in *in, unsigned i)
{
    wport *p = &w[i];
    struct pm__ring_shared *up = ring_region(p, 1), *down = ring_region(p, 0);
    uint8_t what = fuzz_u8(in) % 5;
    uint64_t v = fuzz_u64(in);
    if (what != 3)
        p->up_tainted = 1;
    switch (what) {
    case 0: /* its producer index: near the honest one, or anywhere */
        if (v & 1)
            v = atomic_load(&up->head) + (uint64_t)(int64_t)(int8_t)(v >> 8) * 8;
        atomic_store(&up->head, v);
        break;
    case 1: /* a record header, or a frame header being read (double fetch) */
    case 2: {
        uint64_t off = (what == 1 ? p->channel.rx.tail : v >> 32) & (CAP - 8);
        uint64_t rec = what == 1 ? (v & 0x3ffffffffull) : v;
        unsigned char *data = (unsigned char *)up + PM__RING_HDR_SIZE;
        memcpy(data + off, &rec, sizeof(rec));
        if (off + sizeof(rec) > p->dirty[1])
            p->dirty[1] = off + sizeof(rec);
        break;
    }
    case 3: /* the index of its down ring, which the hub reads as a producer */
        atomic_store(&down->tail, v);
        p->down_tainted = 1;
        break;
    case 4: /* fields the hub owns: geometry, its own consumer index */
        up->capacity = v;
        up->max_frame = (uint32_t)v;
        atomic_store(&up->tail, v >> 3);
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int once;
    if (!once) {
        once = 1;
        for (unsigned i = 0; i < NPORTS; i++) {
            wport_alloc(&w[i]);
        }
    }
    pm__names names = {.system = "fz", .host = "h", .base_port = 9000, .nslots = NPORTS};
    size_t fds_before = count_fds();
    FUZZ_ASSERT(pm__hub_init(&hub, NPORTS, &names, NULL, &fake_ops, &w[0]) == 0);
    hub.max_message = MAX_MSG;
    hub.on_message = on_message;
    hub.on_message_arg = &hub;
    reply_from_callback = 0;
    for (unsigned i = 0; i < NPORTS; i++) {
        w[i].inc = 1;
        channel_fresh(&w[i]);
        w[i].open = 1;
        w[i].hello = 1; /* ports start ready, as after a handshake */
        pm__hub_port_open(&hub, i, &w[i].channel, w[i].inc);
        pm__hub_port_set_state(&hub, i, PM__PORT_READY);
    }

    fuzz_in in = {data, size};
    while (fuzz_more(&in)) {
        uint8_t op = fuzz_u8(&in);
        unsigned i = (op >> 4) % NPORTS;
        switch (op % 13) {
        case 0:
        case 1:
            worker_send(&in, i);
            break;
        case 2:
            pm__hub_port_service(&hub, i);
            pm__hub_publish(&hub);
            if (hub.ports[i].reading && hub.ports[i].sock_full) {
                /* The owner waits for POLLOUT, so it must not hold now (a
                 * port cut off is not flushed again: its flag is stale). */
                struct pollfd pfd = {w[i].channel.sock, POLLOUT, 0};
                FUZZ_ASSERT(poll(&pfd, 1, 0) == 0);
            }
            break;
        case 11:
        case 12:
            worker_big(&in, i);
            break;
        case 3:
            worker_drain(i);
            break;
        case 4:
            worker_scribble(&in, i);
            break;
        case 5: { /* main sends to a port (its incarnation now, any, or a stale one) */
            pm_address to;
            uint8_t k = fuzz_u8(&in);
            pm__node_address(&hub.names, k % 4 == 3 ? PM__NODE_MAIN : i,
                             k & 4 ? 0 : w[i].inc - ((k & 8) != 0), &to);
            size_t len = (k & 16) ? PM_MAX_PAYLOAD + (k >> 7) * (MAX_MSG - PM_MAX_PAYLOAD + 1)
                                  : (k & 64) ? PM_MAX_PAYLOAD + 1 + fuzz_u16(&in)
                                             : fuzz_u8(&in);
            void *buf = calloc(1, len ? len : 1);
            int rc = pm__hub_main_send(&hub, &to, k & 32 ? PM__FT_REQUEST : PM__FT_MSG,
                                       fuzz_u8(&in), buf, len);
            FUZZ_ASSERT(rc == 0 || rc == -EMSGSIZE || rc == -ENOENT || rc == -EHOSTDOWN ||
                        rc == -ESTALE || rc == -EAGAIN || rc == -EINVAL);
            free(buf);
            break;
        }
        case 6: { /* main broadcasts */
            char buf[32] = "broadcast";
            int rc = pm__hub_broadcast(&hub, buf, fuzz_u8(&in) % sizeof(buf),
                                       1 + fuzz_u16(&in), on_broadcast, &hub);
            FUZZ_ASSERT(rc == 0);
            break;
        }
        case 7: /* time passes: deadlines fire */
            pm__hub_fire(&hub, pm__now_ms() + ((uint64_t)fuzz_u8(&in) << 10));
            break;
        case 8: /* the worker dies: the port closes; a new incarnation starts */
            pm__hub_port_close(&hub, i);
            w[i].inc++;
            channel_fresh(&w[i]);
            pm__hub_port_open(&hub, i, &w[i].channel, w[i].inc);
            if (fuzz_u8(&in) & 1) {
                w[i].hello = 1;
                pm__hub_port_set_state(&hub, i, PM__PORT_READY);
            }
            break;
        case 9: /* stop request: the port keeps sending, takes nothing new */
            if (hub.ports[i].state == PM__PORT_READY)
                pm__hub_port_set_state(&hub, i, PM__PORT_STOPPING);
            pm__hub_stop_request(&hub, i);
            break;
        case 10: { /* a loop turn's pass over the ready list, then it is about to sleep */
            unsigned k;
            pm__hub_pass_begin(&hub);
            while (pm__hub_pass_next(&hub, &k))
                pm__hub_port_service(&hub, k);
            pm__hub_publish(&hub);
            (void)pm__hub_any_arrived(&hub);
            (void)pm__hub_arm_idle(&hub);
            (void)pm__hub_any_busy(&hub);
            /* The arm protocol (port.c): no readable port has a frame in
             * its ring unless it is on the ready list or armed (its next
             * publish rings). Anything else would sleep with work. */
            for (k = 0; k < NPORTS; k++) {
                const pm__port *p = &hub.ports[k];
                if (!p->reading || p->blocked_on >= 0 || w[k].up_tainted ||
                    pm__ring_empty(&p->channel->rx))
                    continue;
                struct pm__ring_shared *sh = ring_region(&w[k], 1);
                FUZZ_ASSERT(p->in_ready || atomic_load(&sh->cons_waiting) != 0);
            }
            reply_from_callback = !reply_from_callback;
            break;
        }
        }
        for (unsigned k = 0; k < NPORTS; k++) {
            FUZZ_ASSERT(!w[k].cut || !hub.ports[k].reading);
            FUZZ_ASSERT(hub.ports[k].held_fds <= PM__HOLD_MAX_FDS);
        }
        FUZZ_ASSERT(hub.main_held_fds <= PM__HOLD_MAX_FDS);
    }
    for (unsigned i = 0; i < NPORTS; i++) {
        pm__hub_port_close(&hub, i);
        socks_close(&w[i]);
    }
    pm__hub_free(&hub);
    FUZZ_ASSERT(count_fds() == fds_before); /* every memfd closed */
    return 0;
}
