/* SPDX-License-Identifier: MIT */
/* pm-bad-peer.c - a hostile peer for tests: connects to a procmesh peer port, performs one attack of doc/protocol.md 8 and waits for the supervisor to close the connection. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "channel/frame.h"
#include "base/le.h"
#include "peer/noise.h"
#include "peer/peer.h"
#include "peer/peerkeys.h"
#include "peer/record.h"
#include "mesh/mesh_env.h" /* PM__MESH_CONNS */
#include "hooks.h"

/*
 * usage: pm-bad-peer PORT SYSTEM SECRET_HEX ATTACK [HOST]
 *
 * Connects to 127.0.0.1:PORT, a supervisor of system SYSTEM whose secret
 * is SECRET_HEX (64 hex characters: the attacks after a real handshake
 * hold it, as a compromised or replayed host would), performs ATTACK and
 * then reads until the supervisor closes the connection. HOST is the host
 * name it authenticates as where it completes a handshake (default "x").
 *
 * Exit: 0 the attack was made and the supervisor closed the connection
 * (or, for forged-host and forged-notices, kept it and then accepted our
 * CLOSE; for unknown-type, heartbeat-1, zero-frame and oversize-close,
 * sent CLOSE 1 first; for bitflip-close, sent no CLOSE; for the
 * close-junk ones, answered our CLOSE with CLOSE 0; for first-frames,
 * answered the request of our first record and two more, each once; for
 * two-links, closed our second link with CLOSE 0 and answered over the
 * first; for two-links-eof, the same, the second closed once we ended our
 * stream after its CLOSE (no CLOSE of ours); two-links-open answers that
 * CLOSE and then holds both links open until it is killed;
 * two-links-frames answers it with a record of three frames, then its
 * CLOSE; two-links-first-frames makes the second link's first record
 * two MSGs; for no-frag,
 * answered the big request UNDELIVERABLE -EMSGSIZE and the small one;
 * for silent, sent CLOSE 3 when we said nothing past our first record;
 * for version-2, sent its first record after our hello of max_version 2;
 * for window, let exactly one window of its worker's frames out before
 * main's and more after our CREDIT; for credit, sent its CREDITs at 128
 * frames and at 512 KiB exactly; for close-full, once SIGUSR1 came and
 * our CLOSE went, sent every frame it had queued, then its CLOSE; for
 * relink, brought up and answered over a second link of ours while the
 * first, closed by it, lingered; for late-answer, read our answer to its
 * CLOSE, sent 300 ms after that CLOSE came, no reset); hold gives up
 * (exit 1) only after WAIT_MS;
 * hold-64 never exits by itself;
 * 1 it did
 * not close within WAIT_MS, or a step that must fail succeeded; 2 usage;
 * 3 setup failed (connect, the real handshake an attack needs).
 *
 * The library's pure objects (peer.c, noise.c, record.c) do the honest
 * parts; the attack is what it does with their bytes.
 */

#define WAIT_MS 30000
#define XXPSK3 "Noise_XXpsk3_25519_ChaChaPoly_SHA256"

static int port;
static const char *sys_name;
static const char *host = "x";
static unsigned char secret[PM__PEER_KEY_LEN];

static void fail(int code, const char *what)
{
    fprintf(stderr, "pm-bad-peer: %s\n", what);
    exit(code);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int dial(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        fail(3, "connect to the peer port failed");
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* Writes everything; a write the supervisor refused (it closed already) is
 * not an error of the attack: the wait that follows sees the close. */
static void send_all(int fd, const void *p, size_t n)
{
    const unsigned char *b = p;
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        b += w;
        n -= (size_t)w;
    }
}

/* Reads exactly n bytes within WAIT_MS; 0, or -1 on EOF, error, time out. */
static int recv_exact(int fd, void *p, size_t n)
{
    unsigned char *b = p;
    uint64_t end = now_ms() + WAIT_MS;
    while (n > 0) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        uint64_t now = now_ms();
        if (now >= end || poll(&pf, 1, (int)(end - now)) <= 0)
            return -1;
        ssize_t r = recv(fd, b, n, 0);
        if (r <= 0)
            return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Reads (and discards) until the supervisor closes: EOF or a reset. 0, or
 * exits 1 when it has not closed within WAIT_MS. */
static void wait_closed(int fd, const char *attack)
{
    uint64_t end = now_ms() + WAIT_MS;
    unsigned char buf[4096];
    for (;;) {
        uint64_t now = now_ms();
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (now >= end || poll(&pf, 1, (int)(end - now)) < 0)
            break;
        ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            close(fd);
            return;
        }
    }
    fprintf(stderr, "pm-bad-peer: %s: the supervisor did not close the connection\n", attack);
    exit(1);
}

/* One framed handshake message from the supervisor (u32 length || message)
 * into buf, framed; its framed length. */
static size_t recv_msg(int fd, unsigned char *buf, size_t cap)
{
    if (recv_exact(fd, buf, 4) < 0)
        fail(1, "no handshake message from the supervisor");
    size_t n = pm__get32(buf);
    if (n > cap - 4 || recv_exact(fd, buf + 4, n) < 0)
        fail(1, "a handshake message of a bad length from the supervisor");
    return 4 + n;
}

/* ---------------------------------------------------------------- honest */

static pm__keyring *ring_with(const unsigned char *key)
{
    pm__keyring *kr = NULL;
    if (pm__keyring_new(&kr) < 0 || pm__keyring_random_static(kr) < 0 ||
        (key != NULL && pm__keyring_add_secret(kr, key) < 0))
        fail(3, "keyring");
    return kr;
}

static pm__keyring *keys;
static pm__pconn_cfg cfg;

/* Bytes of a real handshake, kept for the replays. */
static unsigned char first[PM__PEER_PREAMBLE_MAX + 4 + 64];
static size_t first_len;
static unsigned char third[4 + PM__PEER_HS_MSG_MAX];
static size_t third_len;

static void send_output(int fd, pm__pconn *pc)
{
    size_t n;
    const unsigned char *p = pm__pconn_output(pc, &n);
    if (n > 0) {
        send_all(fd, p, n);
        pm__pconn_sent(pc, n);
    }
}

/* A real handshake as initiator on fd, up to the link being up on our side
 * (the supervisor's first record received). Captures the preamble and
 * message 1 (first) and message 3 (third). */
static int skip_first_heartbeat; /* first-frames: our first record is a FRAMES one */
static unsigned char rest[4096];  /* bytes honest() read past the link coming up */
static size_t rest_len;
static uint32_t caps_off; /* capability bits our hello leaves out */

static void honest(int fd, pm__pconn *pc)
{
    if (pm__pconn_init(pc, &cfg, 1) < 0)
        fail(3, "pm__pconn_init");
    pc->caps &= ~caps_off; /* our hello is sent in message 3 */
    size_t n;
    const unsigned char *p = pm__pconn_output(pc, &n);
    if (n > sizeof(first))
        fail(3, "preamble too long");
    memcpy(first, p, n);
    first_len = n;
    send_output(fd, pc);
    unsigned char buf[4096];
    uint64_t end = now_ms() + WAIT_MS;
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        uint64_t now = now_ms();
        if (now >= end || poll(&pf, 1, (int)(end - now)) <= 0)
            fail(3, "the real handshake timed out");
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r <= 0)
            fail(3, "the supervisor closed during the real handshake");
        size_t off = 0;
        while (off < (size_t)r) {
            size_t used = 0;
            int ev = pm__pconn_input(pc, buf + off, (size_t)r - off, &used);
            off += used;
            if (third_len == 0 && pc->state >= PM__PC_SPLIT) {
                /* Message 3 is the first thing queued after message 2. */
                p = pm__pconn_output(pc, &n);
                if (n < 4 || 4 + (size_t)pm__get32(p) > sizeof(third))
                    fail(3, "message 3 not queued");
                third_len = 4 + pm__get32(p);
                memcpy(third, p, third_len);
                if (skip_first_heartbeat) {
                    /* Message 3 alone: the HEARTBEAT queued after it is
                     * dropped and its nonce given back, so the record we
                     * seal next is the first the supervisor reads. */
                    send_all(fd, third, third_len);
                    pm__pconn_sent(pc, n);
                    if (pm_test_rec_set_nonce(pc->rec, 1, 0) < 0)
                        fail(3, "nonce reset");
                }
            }
            send_output(fd, pc);
            if (ev == PM__PCE_DEAD)
                fail(3, "the real handshake failed");
            if (ev == PM__PCE_UP) {
                /* What came with the supervisor's first record (its CLOSE,
                 * a frame) is for the caller: pump() takes it. */
                rest_len = (size_t)r - off;
                memcpy(rest, buf + off, rest_len);
                return;
            }
            if (used == 0)
                break;
        }
    }
}

/* ---------------------------------------------------------------- crafted */

/* The max_version crafted() writes in its hello (message 3). */
static unsigned hello_version = PM__PEER_MAX_VERSION;

/* A handshake of our own making: the preamble `wire` is sent, but Noise
 * uses `prologue` and `psk`; message 3 is sent only when the supervisor
 * answered message 1 (send3). */
static void crafted(int fd, const unsigned char *wire, size_t wire_len, const unsigned char *prologue,
                    size_t prologue_len, const unsigned char *psk, int send3)
{
    pm__noise_hs *hs = NULL;
    unsigned char pub[PM__PEER_KEY_LEN];
    if (pm__noise_hs_new(&hs, XXPSK3, 1, prologue, prologue_len, NULL) < 0 ||
        pm__keyring_static_pub(keys, pub) < 0 ||
        pm__noise_hs_set_static_pair(hs, pm__keyring_static_priv(keys), pub) < 0 ||
        pm__noise_hs_set_psk(hs, 0, psk) < 0)
        fail(3, "noise setup");
    unsigned char out[PM__PEER_PREAMBLE_MAX + 4 + PM__PEER_HS_MSG_MAX];
    size_t n = 0;
    memcpy(out, wire, wire_len);
    if (pm__noise_write_message(hs, NULL, 0, out + wire_len + 4, PM__PEER_HS_MSG_MAX, &n) < 0)
        fail(3, "message 1");
    pm__put32(out + wire_len, (uint32_t)n);
    send_all(fd, out, wire_len + 4 + n);
    if (send3) {
        unsigned char m2[4 + PM__PEER_HS_MSG_MAX], pl[PM__PEER_HS_MSG_MAX];
        size_t m2len = recv_msg(fd, m2, sizeof(m2)), plen;
        if (pm__noise_read_message(hs, m2 + 4, m2len - 4, pl, sizeof(pl), &plen) < 0)
            fail(3, "message 2 did not decrypt");
        pm__peer_hello h;
        memset(&h, 0, sizeof(h));
        h.max_version = hello_version;
        h.incarnation = 7;
        h.idle_ms = 5000;
        snprintf(h.host, sizeof(h.host), "%s", host);
        unsigned char hello[19 + 64];
        size_t hl = pm__peer_hello_encode(&h, hello, sizeof(hello));
        if (pm__noise_write_message(hs, hello, hl, out + 4, PM__PEER_HS_MSG_MAX, &n) < 0)
            fail(3, "message 3");
        pm__put32(out, (uint32_t)n);
        send_all(fd, out, 4 + n);
    }
    pm__noise_hs_free(hs);
}

/* ---------------------------------------------------------------- attacks */

/* After a real handshake: one sealed HEARTBEAT into buf; its length. */
static size_t sealed_heartbeat(pm__pconn *pc, unsigned char *buf, size_t cap)
{
    size_t n = 0;
    if (pm__rec_seal_heartbeat(pc->rec, buf, cap, &n) < 0)
        fail(3, "seal");
    return n;
}

/* A frame from our port 10 to the supervisor (port 0) claiming to come
 * from host index 2: on a link, hosts are relative and must be 0. */
/* One frame from our port 10, incarnation 1, with the header fields f sets
 * (its source fields and length are filled in here) and the payload, sealed
 * in one record and sent. */
static void send_frame(int fd, pm__pconn *pc, pm__frame_hdr *f, const char *payload)
{
    size_t len = strlen(payload);
    unsigned char frame[PM__FRAME_HDR_SIZE + 64];
    if (len > sizeof(frame) - PM__FRAME_HDR_SIZE)
        fail(3, "payload too long");
    f->len = (uint32_t)len;
    f->src = 10;
    f->src_inc = 1;
    pm__frame_encode(f, frame);
    memcpy(frame + PM__FRAME_HDR_SIZE, payload, len);
    struct iovec iov = {.iov_base = frame, .iov_len = PM__FRAME_HDR_SIZE + len};
    unsigned char buf[256];
    size_t taken = 0, n = 0;
    if (pm_test_rec_seal_frames(pc->rec, &iov, 1, &taken, buf, sizeof(buf), &n) < 0 || taken != 1)
        fail(3, "seal frames");
    send_all(fd, buf, n);
}

static void forged_host(int fd, pm__pconn *pc)
{
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_MSG;
    f.dst = 0;
    f.src_host = 2;
    send_frame(fd, pc, &f, "forged");
    unsigned char buf[256];
    size_t n = 0;
    /* Then an orderly end: the link was not cut for the frame. */
    if (pm__rec_seal_close(pc->rec, PM__REC_CLOSE_SHUTDOWN, buf, sizeof(buf), &n) < 0)
        fail(3, "seal close");
    send_all(fd, buf, n);
    shutdown(fd, SHUT_WR);
}

/* Undeliverable notices to our peer's worker (port 10) under every request
 * id from 1 to 3000: none answers a request that worker sent over this
 * link, so none may reach it (its local requests have ids in that range). */
static void forged_notices(int fd, pm__pconn *pc)
{
    enum { PER = 64, IDS = 3000 };
    static unsigned char frames[PER][PM__FRAME_HDR_SIZE];
    static unsigned char buf[PER * (PM__FRAME_HDR_SIZE + 8) + 256];
    struct iovec iov[PER];
    for (unsigned id = 1; id <= IDS;) {
        unsigned k = 0;
        for (; k < PER && id <= IDS; k++, id++) {
            pm__frame_hdr f;
            memset(&f, 0, sizeof(f));
            f.type = PM__FT_UNDELIVERABLE;
            f.dst = 10;
            f.src = 10;
            f.request_id = id;
            f.error = -EHOSTDOWN;
            pm__frame_encode(&f, frames[k]);
            iov[k].iov_base = frames[k];
            iov[k].iov_len = PM__FRAME_HDR_SIZE;
        }
        size_t taken = 0, n = 0;
        if (pm_test_rec_seal_frames(pc->rec, iov, k, &taken, buf, sizeof(buf), &n) < 0 || taken != k)
            fail(3, "seal frames");
        send_all(fd, buf, n);
    }
    size_t n = 0;
    if (pm__rec_seal_close(pc->rec, PM__REC_CLOSE_SHUTDOWN, buf, sizeof(buf), &n) < 0)
        fail(3, "seal close");
    send_all(fd, buf, n);
    shutdown(fd, SHUT_WR);
}

/* Reads the supervisor's records after an attack until its CLOSE or the
 * end of the stream, decrypting them with pc. The CLOSE's reason, or -1:
 * the stream ended without a CLOSE (or the records failed). Frames that
 * come first are handed to on_frame (may be NULL). */
static int read_close_after(int fd, pm__pconn *pc, void (*on_frame)(const unsigned char *, size_t),
                            const unsigned char *pre, size_t npre)
{
    unsigned char buf[4096];
    size_t n = npre;
    if (npre > sizeof(buf))
        fail(3, "too many bytes left over");
    if (npre > 0)
        memcpy(buf, pre, npre);
    uint64_t end = now_ms() + WAIT_MS;
    for (;;) {
        ssize_t r = (ssize_t)n;
        n = 0;
        if (r == 0) {
            struct pollfd pf = {.fd = fd, .events = POLLIN};
            uint64_t now = now_ms();
            if (now >= end || poll(&pf, 1, (int)(end - now)) <= 0) {
                fprintf(stderr, "pm-bad-peer: no CLOSE and no end of stream within %d ms\n", WAIT_MS);
                exit(1);
            }
            r = recv(fd, buf, sizeof(buf), 0);
            if (r <= 0)
                return -1;
        }
        size_t off = 0;
        while (off < (size_t)r) {
            pm__rec_in in;
            size_t used = 0;
            int rc = pm__rec_feed(pc->rec, buf + off, (size_t)r - off, &used, &in);
            off += used;
            if (rc < 0)
                return -1;
            if (rc == 0)
                break;
            if (in.type == PM__REC_CLOSE)
                return in.close_reason;
            size_t foff = 0, flen;
            const unsigned char *f;
            while (in.type == PM__REC_FRAMES && pm__rec_next_frame(&in, &foff, &f, &flen) == 1)
                if (on_frame != NULL)
                    on_frame(f, flen);
        }
    }
}

static int read_close(int fd, pm__pconn *pc, void (*on_frame)(const unsigned char *, size_t))
{
    return read_close_after(fd, pc, on_frame, NULL, 0);
}

/* The answers to the first-frames requests (request_id 77, 78, 79), counted. */
static unsigned answers[3];

static void first_answer(const unsigned char *f, size_t len)
{
    pm__frame_hdr h;
    if (pm__frame_decode(f, len, 65536, &h) == 0 && h.request_id >= 77 && h.request_id <= 79 &&
        h.dst == 10 && (h.type == PM__FT_REPLY || h.type == PM__FT_UNDELIVERABLE))
        answers[h.request_id - 77]++;
}

/* Sends request id to the supervisor (port 0) in a record of its own, and
 * reads until it is answered (the answers to every id counted). 0, or -1
 * when no answer came. */
static int ask_main(int fd, pm__pconn *pc, uint64_t id)
{
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_REQUEST;
    f.dst = 0;
    f.request_id = id;
    f.deadline_ms = 10000;
    send_frame(fd, pc, &f, "ping");
    uint64_t end = now_ms() + WAIT_MS;
    unsigned char in[4096];
    while (answers[id - 77] == 0 && now_ms() < end) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0)
            continue;
        ssize_t r = recv(fd, in, sizeof(in), 0);
        if (r <= 0)
            break;
        size_t off = 0;
        while (off < (size_t)r) {
            pm__rec_in rin;
            size_t used = 0;
            int rc = pm__rec_feed(pc->rec, in + off, (size_t)r - off, &used, &rin);
            off += used;
            if (rc <= 0)
                break;
            size_t foff = 0, flen;
            const unsigned char *fr;
            while (rin.type == PM__REC_FRAMES && pm__rec_next_frame(&rin, &foff, &fr, &flen) == 1)
                first_answer(fr, flen);
        }
    }
    return answers[id - 77] > 0 ? 0 : -1;
}

/* first-frames: our first record is a request to the supervisor (port 0),
 * not a HEARTBEAT: it must be delivered (and answered) exactly once, the
 * supervisor holding it over the link coming up and taking it at the next
 * input; then two more requests, each in a record of its own, each
 * answered once (the held record is never taken again: a mutant that did
 * took it at every later input, stop 42). Then our orderly end. Exits 1
 * when an answer did not come or came twice. */
static void first_frames(int fd, pm__pconn *pc)
{
    unsigned char buf[256];
    size_t n = 0;
    for (uint64_t id = 77; id <= 79; id++) {
        if (ask_main(fd, pc, id) < 0) {
            fprintf(stderr, "pm-bad-peer: first-frames: request %llu was not answered\n",
                    (unsigned long long)id);
            exit(1);
        }
    }
    /* 79's answer came after any second answer to 77 or 78 could have
     * (the supervisor answers in the order it takes the requests). */
    if (answers[0] != 1 || answers[1] != 1) {
        fprintf(stderr, "pm-bad-peer: first-frames: answers to 77 and 78: %u and %u\n",
                answers[0], answers[1]);
        exit(1);
    }
    if (pm__rec_seal_close(pc->rec, PM__REC_CLOSE_SHUTDOWN, buf, sizeof(buf), &n) < 0)
        fail(3, "seal close");
    send_all(fd, buf, n);
    shutdown(fd, SHUT_WR);
}

/* ---------------------------------------------------------------- links */

/* The answer to request want_id (to our port 10), once seen. */
static uint64_t want_id;
static int got_answer;
static pm__frame_hdr answer_hdr;

static void on_answer(void *arg, const unsigned char *f, size_t len)
{
    (void)arg;
    pm__frame_hdr h;
    if (pm__frame_decode(f, len, 65536, &h) == 0 && h.request_id == want_id && h.dst == 10 &&
        (h.type == PM__FT_REPLY || h.type == PM__FT_UNDELIVERABLE)) {
        answer_hdr = h;
        got_answer = 1;
    }
}

/* Feeds the supervisor's records on fd to pc (after the bytes pre[0..npre)
 * honest() left) until the answer to want_id arrived (until: 1), or the
 * link died or the stream ended (the CLOSE, if any, in pc). 1 answered, 0
 * not; exits 1 after WAIT_MS. */
static int mute_close_answer; /* two-links-eof: pump sends nothing once a CLOSE came */
static int mute_all;          /* two-links-frames: pump sends nothing (sent after) */

static int pump(int fd, pm__pconn *pc, int until, const unsigned char *pre, size_t npre)
{
    unsigned char buf[4096];
    size_t n = npre;
    if (npre > 0)
        memcpy(buf, pre, npre);
    pc->on_frame = on_answer;
    uint64_t end = now_ms() + WAIT_MS;
    for (;;) {
        size_t off = 0;
        while (off < n || pc->held) {
            size_t used = 0;
            int ev = pm__pconn_input(pc, buf + off, n - off, &used);
            off += used;
            if (!mute_all && !(mute_close_answer && pc->close_received))
                send_output(fd, pc); /* muted: the CLOSE the library answers with */
            if (ev == PM__PCE_DEAD)
                return until && got_answer;
            if (used == 0 && !pc->held)
                break;
        }
        if (until && got_answer)
            return 1;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        uint64_t now = now_ms();
        if (now >= end || poll(&pf, 1, (int)(end - now)) <= 0) {
            fprintf(stderr, "pm-bad-peer: no answer and no end of the link within %d ms\n", WAIT_MS);
            exit(1);
        }
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r <= 0)
            return 0;
        n = (size_t)r;
    }
}

/* A request from our port 10 to port dst of the supervisor's host, through
 * pc's own stage (so it follows what pc queued); its answer's header, or
 * exits 1 when none came. */
static pm__frame_hdr ask(int fd, pm__pconn *pc, uint32_t dst, uint64_t id, const char *payload,
                         const unsigned char *pre, size_t npre)
{
    size_t len = strlen(payload);
    unsigned char frame[PM__FRAME_HDR_SIZE + 64];
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_REQUEST;
    f.dst = dst;
    f.src = 10;
    f.src_inc = 1;
    f.request_id = id;
    f.deadline_ms = 10000;
    f.len = (uint32_t)len;
    pm__frame_encode(&f, frame);
    memcpy(frame + PM__FRAME_HDR_SIZE, payload, len);
    if (pm__pconn_stage(pc, frame, PM__FRAME_HDR_SIZE + len) < 0 || pm__pconn_flush_stage(pc) < 0)
        fail(3, "stage the request");
    send_output(fd, pc);
    want_id = id;
    got_answer = 0;
    if (!pump(fd, pc, 1, pre, npre)) {
        fprintf(stderr, "pm-bad-peer: request %llu to port %u not answered\n", (unsigned long long)id,
                (unsigned)dst);
        exit(1);
    }
    return answer_hdr;
}

/* Our orderly end of pc's link on fd. */
static void orderly_end(int fd, pm__pconn *pc, const char *attack)
{
    pm__pconn_close(pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
    send_output(fd, pc);
    shutdown(fd, SHUT_WR);
    wait_closed(fd, attack);
    pm__pconn_free(pc);
}

/* One frame (header f, its length set here, payload p[0..len)) through
 * pc's stage; what the stage's record cannot wait for is sent. */
static void stage_frame(int fd, pm__pconn *pc, pm__frame_hdr *f, const void *p, size_t len)
{
    static unsigned char frame[PM__FRAME_HDR_SIZE + 65536];
    if (len > 65536)
        fail(3, "frame too long");
    f->len = (uint32_t)len;
    pm__frame_encode(f, frame);
    memcpy(frame + PM__FRAME_HDR_SIZE, p, len);
    int rc;
    while ((rc = pm__pconn_stage(pc, frame, PM__FRAME_HDR_SIZE + len)) == -EAGAIN)
        send_output(fd, pc); /* blocking: the supervisor reads all the time */
    if (rc < 0)
        fail(3, "stage a frame");
}

static void flush_frames(int fd, pm__pconn *pc)
{
    if (pm__pconn_flush_stage(pc) < 0)
        fail(3, "seal the staged frames");
    send_output(fd, pc);
}

/* A MSG from our port 10 to the supervisor (port 0), through pc's stage. */
static void stage_msg_to_main(int fd, pm__pconn *pc, const void *p, size_t len)
{
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_MSG;
    f.dst = 0;
    f.src = 10;
    f.src_inc = 1;
    stage_frame(fd, pc, &f, p, len);
}

static int eof_after_close;  /* two-links-eof */
static int hold_after_close; /* two-links-open */
static int frames_after_close; /* two-links-frames */
static int first_frames_on_2;  /* two-links-first-frames */

/* two-links (doc/protocol.md 2): we dial twice as the same host and
 * incarnation. The later link is closed before it is installed, with CLOSE
 * 0; the first keeps working: main answers a request over it after. */
static void two_links(void)
{
    int fd1 = dial(), fd2;
    pm__pconn a, b;
    honest(fd1, &a);
    unsigned char pre[sizeof(rest)];
    size_t npre = rest_len;
    memcpy(pre, rest, npre);
    fd2 = dial();
    /* two-links-first-frames: the later link's first record is one of two
     * MSGs to main, not a HEARTBEAT (message 3 captured again, so that
     * honest drops the HEARTBEAT queued after it): the record its
     * duplicate is found on, whose frames are discarded, and counted. */
    if (first_frames_on_2) {
        skip_first_heartbeat = 1;
        third_len = 0;
    }
    honest(fd2, &b);
    if (first_frames_on_2) {
        skip_first_heartbeat = 0;
        for (int i = 0; i < 2; i++)
            stage_msg_to_main(fd2, &b, "first", 5);
        flush_frames(fd2, &b);
    }
    /* two-links-frames: a record of three frames sealed now (the next
     * nonce), sent only once the supervisor's CLOSE is read, then what our
     * side queued meanwhile (its CLOSE answer last), so that the frames
     * come after that CLOSE and before ours, in nonce order. */
    unsigned char frames[64];
    size_t nframes = 0;
    if (frames_after_close) {
        unsigned char body[1 + 3 * (4 + 5)];
        size_t o = 0;
        body[o++] = PM__REC_FRAMES;
        for (int i = 0; i < 3; i++) {
            pm__put32(body + o, 5);
            memcpy(body + o + 4, "after", 5);
            o += 4 + 5;
        }
        if (pm_test_rec_seal_raw(b.rec, body, o, frames, sizeof(frames), &nframes) < 0)
            fail(3, "seal frames");
        mute_all = 1;
    }
    mute_close_answer = eof_after_close;
    (void)pump(fd2, &b, 0, rest, rest_len);
    mute_close_answer = mute_all = 0;
    if (!b.close_received || b.close_reason != PM__REC_CLOSE_SHUTDOWN) {
        fprintf(stderr, "pm-bad-peer: two-links: the later link got %s %d, expected CLOSE 0\n",
                b.close_received ? "CLOSE" : "no CLOSE", b.close_received ? b.close_reason : -1);
        exit(1);
    }
    /* two-links-eof: our answer to that CLOSE is the end of our stream
     * alone, no CLOSE of ours (doc/protocol.md 7: either ends its wait). */
    if (eof_after_close)
        shutdown(fd2, SHUT_WR);
    /* two-links-open: our CLOSE answered it (pump sent it) and our stream
     * stays open, both links too, until we are killed: the supervisor's
     * wait must end at our CLOSE alone. */
    for (uint64_t end = now_ms() + WAIT_MS; hold_after_close;) {
        if (now_ms() >= end)
            fail(1, "two-links-open: not killed within WAIT_MS");
        struct timespec t = {0, 20 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    if (frames_after_close) {
        send_all(fd2, frames, nframes);
        send_output(fd2, &b);
        shutdown(fd2, SHUT_WR);
    }
    wait_closed(fd2, "two-links");
    pm__pconn_free(&b);
    pm__frame_hdr h = ask(fd1, &a, 0, 77, "ping", pre, npre);
    if (h.type != PM__FT_REPLY)
        fail(1, "two-links: the first link's request was not answered by main");
    orderly_end(fd1, &a, "two-links");
}

/* late-answer: an honest link, the supervisor's CLOSE (its cluster is
 * terminated) answered 300 ms late; with PM_BAD_PEER_SIGNAL_PARENT set,
 * SIGUSR1 sent to our parent (the test, whose process the supervisor is)
 * every 20 ms meanwhile. The supervisor ends its writing half
 * after its CLOSE and reads on until the answer (doc/protocol.md 7;
 * mesh.c's linger_all, at pm_cluster_terminate), then closes: our answer
 * is read. A supervisor that stopped waiting has closed its socket, and
 * the kernel answers our CLOSE with a reset, which comes back at once on
 * loopback and leaves its error on our socket. */
static void late_answer(void)
{
    int fd = dial();
    pm__pconn pc;
    honest(fd, &pc);
    mute_close_answer = 1;
    (void)pump(fd, &pc, 0, rest, rest_len);
    mute_close_answer = 0;
    if (!pc.close_received)
        fail(1, "late-answer: the link ended without the supervisor's CLOSE");
    /* The supervisor waits for our answer now: signals (which the test
     * handles) interrupt that wait, which must go on. One every 20 ms,
     * so that some come while it sleeps in poll(2), not only before. */
    struct timespec t = {0, 300 * 1000 * 1000}, tick = {0, 20 * 1000 * 1000};
    int signal_parent = getenv("PM_BAD_PEER_SIGNAL_PARENT") != NULL;
    for (int i = 0; i < 15; i++) {
        if (signal_parent)
            (void)kill(getppid(), SIGUSR1);
        nanosleep(&tick, NULL);
    }
    /* The CLOSE our library answered with, held until now; a send that
     * fails met a reset already (and took its error). */
    size_t n;
    const unsigned char *p = pm__pconn_output(&pc, &n);
    if (n == 0)
        fail(3, "late-answer: no CLOSE answer queued");
    if (send(fd, p, n, MSG_NOSIGNAL) != (ssize_t)n) {
        fprintf(stderr, "pm-bad-peer: late-answer: our answer to its CLOSE could not be sent (%s): the "
                        "supervisor had stopped waiting for it\n", strerror(errno));
        exit(1);
    }
    pm__pconn_sent(&pc, n);
    nanosleep(&t, NULL);
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) {
        fprintf(stderr, "pm-bad-peer: late-answer: our answer to its CLOSE got %s: the supervisor "
                        "had stopped waiting for it\n", strerror(err));
        exit(1);
    }
    wait_closed(fd, "late-answer");
    pm__pconn_free(&pc);
}

/* relink: our link gets the supervisor's CLOSE (the test closes its
 * links), which we neither answer nor end: that connection lingers on
 * its side, still ours here. We dial again as the same host and
 * incarnation: the new link must come up and carry a request (a
 * lingering connection is no link any more), then ends in order. */
static void relink(void)
{
    int fd1 = dial(), fd2;
    pm__pconn a, b;
    honest(fd1, &a);
    mute_all = 1;
    (void)pump(fd1, &a, 0, rest, rest_len);
    mute_all = 0;
    if (!a.close_received)
        fail(1, "relink: the first link got no CLOSE");
    fd2 = dial();
    honest(fd2, &b);
    pm__frame_hdr h = ask(fd2, &b, 0, 78, "ping", rest, rest_len);
    if (h.type != PM__FT_REPLY)
        fail(1, "relink: the second link's request was not answered by main");
    orderly_end(fd2, &b, "relink");
    close(fd1); /* the first one's end of stream, only now */
    pm__pconn_free(&a);
}

/* no-frag: our hello leaves out capability bit 1 (no large messages). A
 * request ("big") to the worker at port 10, which answers it with more
 * than PM_MAX_PAYLOAD: the answer is UNDELIVERABLE -EMSGSIZE from the
 * worker's port; a small request after it gets its REPLY. */
static void no_frag(void)
{
    int fd = dial();
    pm__pconn pc;
    honest(fd, &pc);
    pm__frame_hdr h = ask(fd, &pc, 10, 78, "big", rest, rest_len);
    if (h.type != PM__FT_UNDELIVERABLE || h.error != -EMSGSIZE || h.src != 10) {
        fprintf(stderr, "pm-bad-peer: no-frag: the big reply came as type %u error %d from %u, expected "
                        "UNDELIVERABLE %d from 10\n", h.type, h.error, h.src, -EMSGSIZE);
        exit(1);
    }
    h = ask(fd, &pc, 10, 79, "small", NULL, 0);
    if (h.type != PM__FT_REPLY)
        fail(1, "no-frag: the worker did not answer the small request after the big one");
    orderly_end(fd, &pc, "no-frag");
}

/* ---------------------------------------------------------------- flow control */

/* Feeds the supervisor's records on fd to pc (after pre[0..npre)),
 * answering its PINGs, until done() holds once a chunk is in. Every byte
 * read is fed (the record decoder keeps a partial record), so the next
 * call goes on where this one stopped. Exits 1 when the link ends or
 * WAIT_MS pass first. */
static void pump_until(int fd, pm__pconn *pc, int (*done)(const pm__pconn *), const unsigned char *pre,
                       size_t npre, const char *what)
{
    unsigned char buf[4096];
    size_t n = npre;
    if (npre > sizeof(buf))
        fail(3, "too many bytes left over");
    if (npre > 0)
        memcpy(buf, pre, npre);
    uint64_t end = now_ms() + WAIT_MS;
    for (;;) {
        size_t off = 0;
        while (off < n || pc->held) {
            size_t used = 0;
            int ev = pm__pconn_input(pc, buf + off, n - off, &used);
            off += used;
            if (!mute_all && !(mute_close_answer && pc->close_received))
                send_output(fd, pc); /* muted: the CLOSE the library answers with */
            if (ev == PM__PCE_DEAD) {
                fprintf(stderr, "pm-bad-peer: %s: the link ended first (its CLOSE: %d, -1 none)\n", what,
                        pc->close_received ? pc->close_reason : -1);
                exit(1);
            }
            if (used == 0 && !pc->held)
                break;
        }
        if (done(pc))
            return;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        uint64_t now = now_ms();
        if (now >= end || poll(&pf, 1, (int)(end - now)) <= 0) {
            fprintf(stderr, "pm-bad-peer: %s: not within %d ms\n", what, WAIT_MS);
            exit(1);
        }
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r <= 0) {
            fprintf(stderr, "pm-bad-peer: %s: the stream ended first\n", what);
            exit(1);
        }
        n = (size_t)r;
    }
}


/* window (doc/protocol.md 6, "Flow control"): we announce credits (bit
 * 0) and never send one. The supervisor's worker at port 10 streams MSGs
 * of one size to our port 10; once the test sees it held by the window,
 * main sends one MSG to our port 10 (main's frames are never held), which
 * comes after every frame the worker got onto the link. The worker's
 * frames before it must be exactly 512, or as many as fit in 2 MiB
 * counting 56 + payload each, and none after it. Then our CREDIT for all
 * of them: the worker's frames flow again. */
static unsigned win_before, win_after, win_marks;
static uint32_t win_len;

static void on_window(void *arg, const unsigned char *f, size_t len)
{
    (void)arg;
    pm__frame_hdr h;
    if (pm__frame_decode(f, len, 65536, &h) < 0 || h.type != PM__FT_MSG || h.dst != 10)
        return;
    if (h.src == 0) {
        win_marks++; /* main's */
    } else if (h.src == 10 && win_marks > 0) {
        win_after++;
    } else if (h.src == 10) {
        win_before++;
        win_len = h.len;
    }
}

static int window_marked(const pm__pconn *pc)
{
    (void)pc;
    return win_marks > 0;
}

static int window_reopened(const pm__pconn *pc)
{
    (void)pc;
    return win_after > 0;
}

static void window(void)
{
    int fd = dial();
    pm__pconn pc;
    honest(fd, &pc);
    pc.on_frame = on_window;
    pump_until(fd, &pc, window_marked, rest, rest_len, "window: main's MSG");
    uint32_t frame_bytes = PM__FRAME_HDR_SIZE + win_len;
    uint32_t want = (2u << 20) / frame_bytes < 512u ? (2u << 20) / frame_bytes : 512u;
    if (win_before != want || win_after != 0) {
        fprintf(stderr, "pm-bad-peer: window: %u frames of %u bytes before main's MSG and %u after it, "
                        "expected %u (512 frames or 2 MiB) and 0\n",
                win_before, frame_bytes, win_after, want);
        exit(1);
    }
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_CREDIT;
    f.dst = 0;
    f.src = 10; /* the port credited: ours, as the worker addressed it */
    unsigned char body[8];
    pm__put32(body, win_before);
    pm__put32(body + 4, win_before * frame_bytes);
    stage_frame(fd, &pc, &f, body, sizeof(body));
    flush_frames(fd, &pc);
    pump_until(fd, &pc, window_reopened, NULL, 0, "window: the worker's frames after our CREDIT");
    orderly_end(fd, &pc, "window");
}

/* hold: linked, then we read nothing (a small receive buffer) and wait
 * to be killed: killed with the supervisor's bytes unread, our kernel
 * answers its next segment with a reset. */
static void hold(void)
{
    int fd = dial();
    int small = 4096;
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    pm__pconn pc;
    honest(fd, &pc);
    for (uint64_t end = now_ms() + WAIT_MS; now_ms() < end;) {
        struct timespec t = {0, 20 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    fail(1, "hold: not killed within WAIT_MS");
}

/* close-full (doc/protocol.md 7): we read nothing (a small receive
 * buffer) while the supervisor's worker streams to our port 10, until the
 * test says (SIGUSR1: the supervisor's output queue is full); then our
 * CLOSE, and only then we read: every frame it had queued, then its CLOSE,
 * then the end of the stream. A supervisor that ended the link at our
 * CLOSE without writing its queue out would end the stream with no CLOSE. */
static volatile sig_atomic_t close_now;
static unsigned full_frames;

static void on_usr1(int sig)
{
    (void)sig;
    close_now = 1;
}

static void count_frame(const unsigned char *f, size_t len)
{
    (void)f;
    (void)len;
    full_frames++;
}

static void close_full(void)
{
    signal(SIGUSR1, on_usr1);
    int fd = dial();
    int small = 4096;
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    pm__pconn pc;
    honest(fd, &pc);
    /* A flag set by the handler, looked at between short sleeps: the
     * order of events decides, not how long the sleeps are. */
    for (uint64_t end = now_ms() + WAIT_MS; !close_now;) {
        if (now_ms() >= end)
            fail(1, "close-full: no SIGUSR1 within WAIT_MS");
        struct timespec t = {0, 5 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    unsigned char buf[256];
    size_t n = 0;
    if (pm__rec_seal_close(pc.rec, PM__REC_CLOSE_SHUTDOWN, buf, sizeof(buf), &n) < 0)
        fail(3, "seal close");
    send_all(fd, buf, n);
    shutdown(fd, SHUT_WR);
    int got = read_close_after(fd, &pc, count_frame, rest, rest_len);
    if (got != PM__REC_CLOSE_SHUTDOWN || full_frames == 0) {
        fprintf(stderr, "pm-bad-peer: close-full: %u frames, then CLOSE reason %d (expected frames, then 0; "
                        "-1: no CLOSE)\n", full_frames, got);
        exit(1);
    }
    wait_closed(fd, "close-full");
    pm__pconn_free(&pc);
}

/* credit (doc/protocol.md 6, "Flow control"): MSGs from our port 10 to
 * the supervisor (port 0), each batch followed by a PING. The supervisor
 * owes a CREDIT for port 0 at 128 frames or 512 KiB (56 + payload each):
 * none after 127 small frames, one for 128 frames after the 128th; none
 * after 8 frames of 60,000 bytes (480,448), one for 9 frames and 540,504
 * bytes after the 9th. A PONG is sealed after what the hub staged before
 * it (peer.c: every record seals the stage first), so once the PONG is in,
 * the CREDIT those frames earned is in too. */
static unsigned credits;
static uint32_t credit_port, credit_frames, credit_bytes;
static uint64_t pongs_want;

static void on_credit(void *arg, const unsigned char *f, size_t len)
{
    (void)arg;
    pm__frame_hdr h;
    if (pm__frame_decode(f, len, 65536, &h) < 0 || h.type != PM__FT_CREDIT)
        return;
    credits++;
    credit_port = h.src;
    credit_frames = h.len == 8 ? pm__get32(f + PM__FRAME_HDR_SIZE) : 0;
    credit_bytes = h.len == 8 ? pm__get32(f + PM__FRAME_HDR_SIZE + 4) : 0;
}

static int ponged(const pm__pconn *pc)
{
    return pc->pongs >= pongs_want;
}

static void msgs_then_ping(int fd, pm__pconn *pc, unsigned n, size_t len)
{
    static unsigned char payload[60000];
    memset(payload, 'c', sizeof(payload));
    for (unsigned i = 0; i < n; i++)
        stage_msg_to_main(fd, pc, payload, len);
    flush_frames(fd, pc);
    if (pm__pconn_ping(pc, ++pongs_want) < 0)
        fail(3, "ping");
    send_output(fd, pc);
    pump_until(fd, pc, ponged, NULL, 0, "credit: the PONG");
}

static void credit_expect(unsigned n, uint32_t frames, uint32_t bytes, const char *after)
{
    if (credits == n && (n == 0 || (credit_port == 0 && credit_frames == frames && credit_bytes == bytes)))
        return;
    fprintf(stderr, "pm-bad-peer: credit: after %s, %u CREDITs (the last for port %u: %u frames, %u bytes); "
                    "expected %u (for port 0: %u frames, %u bytes)\n",
            after, credits, credit_port, credit_frames, credit_bytes, n, frames, bytes);
    exit(1);
}

static void credit(void)
{
    int fd = dial();
    pm__pconn pc;
    honest(fd, &pc);
    pc.on_frame = on_credit;
    pump_until(fd, &pc, ponged, rest, rest_len, "credit"); /* what honest() left: no PONG is due */
    msgs_then_ping(fd, &pc, 127, 8);
    credit_expect(0, 0, 0, "127 frames of 64 bytes");
    msgs_then_ping(fd, &pc, 1, 8);
    credit_expect(1, 128, 128 * (PM__FRAME_HDR_SIZE + 8), "128 frames of 64 bytes");
    msgs_then_ping(fd, &pc, 8, 60000);
    credit_expect(1, 128, 128 * (PM__FRAME_HDR_SIZE + 8), "8 frames of 60,056 bytes");
    msgs_then_ping(fd, &pc, 1, 60000);
    credit_expect(2, 9, 9 * (PM__FRAME_HDR_SIZE + 60000), "9 frames of 60,056 bytes");
    orderly_end(fd, &pc, "credit");
}

/* hold-64 (doc/protocol.md 2, "What a responder admits"): as many links as
 * the supervisor holds connections (64), as hosts h0, h1, ..., each from
 * its own source address (127.0.1.1, 127.0.1.2, ...: the per-source rate
 * limit is not what is tried), then silence until killed. Our side of
 * each link is dropped once it is up (only its fd stays open): the
 * supervisor keeps the link until its peer timeout. */
static int dial_from(unsigned i)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(0x7f000101u + i); /* 127.0.1.1 + i */
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        fail(3, "bind to a source address in 127.0.1.0/24");
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        fail(3, "connect to the peer port failed");
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static void hold_links(void)
{
    static char names[PM__MESH_CONNS][16];
    for (unsigned i = 0; i < PM__MESH_CONNS; i++) {
        snprintf(names[i], sizeof(names[i]), "h%u", i);
        cfg.host = names[i];
        int fd = dial_from(i);
        pm__pconn pc;
        honest(fd, &pc);
        pm__pconn_free(&pc);
    }
    for (;;)
        pause();
}

/* Seals plain[0..len) as a record, whatever it says, and sends it. */
static void send_raw(int fd, pm__pconn *pc, const void *plain, size_t len)
{
    unsigned char buf[256];
    size_t n = 0;
    if (pm_test_rec_seal_raw(pc->rec, plain, len, buf, sizeof(buf), &n) < 0)
        fail(3, "seal raw");
    send_all(fd, buf, n);
}

/* The attacks whose outcome is the supervisor's CLOSE (doc/protocol.md 8):
 * a record it refuses gets CLOSE 1 (protocol error) before it closes;
 * bytes after our CLOSE are never read (its CLOSE 0 answers ours); a
 * first record of frames is delivered (its request answered). 0 if the
 * attack is one of them and got that, 1 if it got something else, -1
 * not one of them. */
static int close_attack(int fd, pm__pconn *pc, const char *attack)
{
    static const unsigned char unknown[] = {9};
    static const unsigned char hb1[] = {PM__REC_HEARTBEAT, 1};
    static const unsigned char frame0[] = {PM__REC_FRAMES, 0, 0, 0, 0};
    static const unsigned char huge[4] = {0xff, 0xff, 0xff, 0xff};
    unsigned char buf[256];
    size_t n = 0;
    int want, got;
    if (strcmp(attack, "unknown-type") == 0) {
        send_raw(fd, pc, unknown, sizeof(unknown));
        want = PM__REC_CLOSE_PROTOCOL;
    } else if (strcmp(attack, "heartbeat-1") == 0) {
        send_raw(fd, pc, hb1, sizeof(hb1));
        want = PM__REC_CLOSE_PROTOCOL;
    } else if (strcmp(attack, "zero-frame") == 0) {
        send_raw(fd, pc, frame0, sizeof(frame0));
        want = PM__REC_CLOSE_PROTOCOL;
    } else if (strcmp(attack, "oversize-close") == 0) {
        send_all(fd, huge, sizeof(huge));
        want = PM__REC_CLOSE_PROTOCOL;
    } else if (strcmp(attack, "bitflip-close") == 0) {
        /* A segment that fails to authenticate wipes the supervisor's
         * keys: no CLOSE can follow, only the end of the stream. */
        n = sealed_heartbeat(pc, buf, sizeof(buf));
        buf[n - 3] ^= 0x20;
        send_all(fd, buf, n);
        want = -1;
    } else if (strcmp(attack, "close-junk-same") == 0 || strcmp(attack, "close-junk-later") == 0) {
        int same = strcmp(attack, "close-junk-same") == 0;
        if (pm__rec_seal_close(pc->rec, PM__REC_CLOSE_SHUTDOWN, buf, sizeof(buf), &n) < 0)
            fail(3, "seal close");
        /* A whole record's worth of junk after it: in the same write (one
         * read for the supervisor), or once its answer shows it has read
         * our CLOSE. */
        memset(buf + n, 0x5a, 40);
        if (same) {
            send_all(fd, buf, n + 40);
            got = read_close(fd, pc, NULL);
        } else {
            send_all(fd, buf, n);
            got = read_close(fd, pc, NULL);
            send_all(fd, buf + n, 40);
        }
        want = PM__REC_CLOSE_SHUTDOWN;
        goto judge;
    } else if (strcmp(attack, "close-first") == 0) {
        /* CLOSE as our first record: the supervisor's link never came up
         * (its first record from us is the end), an orderly end all the
         * same, answered with its own CLOSE. */
        if (pm__rec_seal_close(pc->rec, PM__REC_CLOSE_SHUTDOWN, buf, sizeof(buf), &n) < 0)
            fail(3, "seal close");
        send_all(fd, buf, n);
        got = read_close(fd, pc, NULL);
        want = PM__REC_CLOSE_SHUTDOWN;
        goto judge;
    } else if (strcmp(attack, "first-frames") == 0) {
        first_frames(fd, pc);
        want = PM__REC_CLOSE_SHUTDOWN;
    } else if (strcmp(attack, "silent") == 0) {
        /* doc/protocol.md 7: after its first record our side says nothing
         * more (its PINGs read, never answered): at its idle_ms it sends
         * CLOSE 3 and closes. What honest() read past the link coming up
         * is the start of the supervisor's records. */
        got = read_close_after(fd, pc, NULL, rest, rest_len);
        want = PM__REC_CLOSE_TIMEOUT;
        goto judge;
    } else {
        return -1;
    }
    got = read_close(fd, pc, NULL);
judge:
    if (got != want) {
        fprintf(stderr, "pm-bad-peer: %s: the supervisor's CLOSE reason %d, expected %d (-1: no CLOSE)\n",
                attack, got, want);
        return 1;
    }
    return 0;
}

static void post_handshake(const char *attack)
{
    int fd = dial();
    pm__pconn pc;
    skip_first_heartbeat = strcmp(attack, "first-frames") == 0 || strcmp(attack, "close-first") == 0;
    honest(fd, &pc);
    int crc = close_attack(fd, &pc, attack);
    if (crc >= 0) {
        wait_closed(fd, attack);
        pm__pconn_free(&pc);
        if (crc != 0)
            exit(1);
        return;
    }
    unsigned char a[64], b[64];
    size_t na = sealed_heartbeat(&pc, a, sizeof(a));
    if (strcmp(attack, "truncated") == 0) {
        send_all(fd, a, na - 5); /* then end of stream without CLOSE */
        shutdown(fd, SHUT_WR);
    } else if (strcmp(attack, "reordered") == 0) {
        size_t nb = sealed_heartbeat(&pc, b, sizeof(b));
        send_all(fd, b, nb);
        send_all(fd, a, na);
    } else if (strcmp(attack, "duplicated") == 0) {
        send_all(fd, a, na);
        send_all(fd, a, na);
    } else if (strcmp(attack, "bitflip") == 0) {
        a[na - 3] ^= 0x20; /* in the tag */
        send_all(fd, a, na);
    } else if (strcmp(attack, "oversize") == 0) {
        static const unsigned char huge[4] = {0xff, 0xff, 0xff, 0xff};
        send_all(fd, huge, sizeof(huge));
    } else if (strcmp(attack, "forged-host") == 0) {
        send_all(fd, a, na); /* sealed above: its nonce is spent, so it goes out */
        forged_host(fd, &pc);
    } else if (strcmp(attack, "forged-notices") == 0) {
        send_all(fd, a, na);
        forged_notices(fd, &pc);
    } else {
        fail(2, "unknown attack");
    }
    wait_closed(fd, attack);
    pm__pconn_free(&pc);
}

/* A real handshake whose bytes the replays reuse; its link is then ended
 * with a CLOSE (an orderly end). */
static void capture(void)
{
    int fd = dial();
    pm__pconn pc;
    honest(fd, &pc);
    pm__pconn_close(&pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
    send_output(fd, &pc);
    shutdown(fd, SHUT_WR);
    wait_closed(fd, "capture");
    pm__pconn_free(&pc);
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

int main(int argc, char **argv)
{
    if (argc < 5 || argc > 6 || strlen(argv[3]) != 64) {
        fprintf(stderr, "usage: pm-bad-peer PORT SYSTEM SECRET_HEX ATTACK [HOST]\n"
                        "attacks: wrong-key unknown-key-id bad-magic other-system tamper-prologue\n"
                        "         replay-msg3 replay-msg1 reflect slow-handshake\n"
                        "         truncated reordered duplicated bitflip oversize forged-host\n"
                        "         forged-notices unknown-type heartbeat-1 zero-frame\n"
                        "         oversize-close bitflip-close close-junk-same close-junk-later\n"
                        "         first-frames close-first two-links two-links-eof two-links-open late-answer\n"
                        "         two-links-frames two-links-first-frames no-frag silent\n"
                        "         version-0 version-2\n"
                        "         window credit hold-64 close-full relink hold\n");
        return 2;
    }
    port = atoi(argv[1]);
    sys_name = argv[2];
    for (int i = 0; i < 32; i++) {
        int hi = hexval(argv[3][2 * i]), lo = hexval(argv[3][2 * i + 1]);
        if (hi < 0 || lo < 0)
            fail(2, "SECRET_HEX: not 64 hexadecimal characters");
        secret[i] = (unsigned char)(hi * 16 + lo);
    }
    const char *attack = argv[4];
    if (argc == 6)
        host = argv[5];
    if (port <= 0 || port > 65535 || !pm__peer_host_valid(host, strlen(host)))
        fail(2, "PORT or HOST invalid");
    if (sodium_init() < 0)
        fail(3, "sodium_init");
    keys = ring_with(secret);
    cfg.system = sys_name;
    cfg.host = host;
    randombytes_buf(&cfg.incarnation, sizeof(cfg.incarnation));
    cfg.incarnation |= 1u;
    cfg.idle_ms = 5000;
    cfg.keys = keys;

    unsigned char id[PM__PEER_KEY_ID_LEN], pre[PM__PEER_PREAMBLE_MAX], tampered[PM__PEER_PREAMBLE_MAX];
    pm__keyring_secret_id(keys, 0, id);
    size_t plen = pm__peer_preamble(sys_name, id, pre);

    if (strcmp(attack, "wrong-key") == 0) {
        /* The mesh's key id, but another secret behind it: message 3 (where
         * psk3 mixes the secret in) fails to decrypt. */
        unsigned char wrong[PM__PEER_KEY_LEN];
        memcpy(wrong, secret, sizeof(wrong));
        wrong[0] ^= 1;
        int fd = dial();
        crafted(fd, pre, plen, pre, plen, wrong, 1);
        wait_closed(fd, attack);
    } else if (strcmp(attack, "unknown-key-id") == 0) {
        unsigned char other[PM__PEER_KEY_ID_LEN];
        randombytes_buf(other, sizeof(other));
        plen = pm__peer_preamble(sys_name, other, pre);
        int fd = dial();
        crafted(fd, pre, plen, pre, plen, secret, 0);
        wait_closed(fd, attack);
    } else if (strcmp(attack, "bad-magic") == 0) {
        pre[5] = 'X';
        int fd = dial();
        send_all(fd, pre, plen);
        wait_closed(fd, attack);
    } else if (strcmp(attack, "other-system") == 0) {
        plen = pm__peer_preamble("othermesh", id, pre);
        int fd = dial();
        crafted(fd, pre, plen, pre, plen, secret, 0);
        wait_closed(fd, attack);
    } else if (strcmp(attack, "tamper-prologue") == 0) {
        /* A man in the middle rewrote our "procmesh-link/2" into ".../1"
         * (a downgrade): the supervisor accepts the preamble, but our Noise
         * hashed the original, so message 1 fails to authenticate. */
        memcpy(tampered, pre, plen);
        tampered[7 + strlen(PM__PEER_VERSION_STR) - 1] = '2';
        int fd = dial();
        crafted(fd, pre, plen, tampered, plen, secret, 0);
        wait_closed(fd, attack);
    } else if (strcmp(attack, "replay-msg3") == 0 || strcmp(attack, "replay-msg1") == 0) {
        capture();
        int fd = dial();
        send_all(fd, first, first_len);
        unsigned char m2[4 + PM__PEER_HS_MSG_MAX];
        (void)recv_msg(fd, m2, sizeof(m2)); /* fresh ephemeral: not the captured session's */
        if (strcmp(attack, "replay-msg3") == 0)
            send_all(fd, third, third_len);
        /* replay-msg1: nothing more; only the handshake deadline ends it. */
        wait_closed(fd, attack);
    } else if (strcmp(attack, "reflect") == 0) {
        /* The supervisor's own message 2 sent back as our message 3. */
        int fd = dial();
        pm__pconn pc;
        if (pm__pconn_init(&pc, &cfg, 1) < 0)
            fail(3, "pm__pconn_init");
        send_output(fd, &pc);
        unsigned char m2[4 + PM__PEER_HS_MSG_MAX];
        size_t n = recv_msg(fd, m2, sizeof(m2));
        send_all(fd, m2, n);
        wait_closed(fd, attack);
        pm__pconn_free(&pc);
    } else if (strcmp(attack, "version-0") == 0 || strcmp(attack, "version-2") == 0) {
        /* doc/protocol.md 5: the version in use (the preamble's, 1) must
         * be min(own max_version, the peer's). Our hello (message 3) says
         * 0: min(1, 0) is not 1, closed (`version`). Or 2, a peer that
         * speaks more: min(1, 2) = 1, accepted: the supervisor splits and
         * sends its first record (a HEARTBEAT: 21 bytes); we end the
         * stream then, without a record of ours. */
        hello_version = attack[8] == '0' ? 0 : 2;
        int fd = dial();
        crafted(fd, pre, plen, pre, plen, secret, 1);
        if (hello_version == 0) {
            wait_closed(fd, attack);
        } else {
            unsigned char hb[21];
            if (recv_exact(fd, hb, sizeof(hb)) < 0 || pm__get32(hb) != 17)
                fail(1, "version-2: no first record from the supervisor");
            close(fd);
        }
    } else if (strcmp(attack, "window") == 0) {
        window();
    } else if (strcmp(attack, "credit") == 0) {
        credit();
    } else if (strcmp(attack, "close-full") == 0) {
        close_full();
    } else if (strcmp(attack, "relink") == 0) {
        relink();
    } else if (strcmp(attack, "late-answer") == 0) {
        late_answer();
    } else if (strcmp(attack, "hold") == 0) {
        hold();
    } else if (strcmp(attack, "hold-64") == 0) {
        hold_links();
    } else if (strcmp(attack, "two-links") == 0 || strcmp(attack, "two-links-eof") == 0 ||
               strcmp(attack, "two-links-open") == 0 || strcmp(attack, "two-links-frames") == 0 ||
               strcmp(attack, "two-links-first-frames") == 0) {
        eof_after_close = strcmp(attack, "two-links-eof") == 0;
        hold_after_close = strcmp(attack, "two-links-open") == 0;
        frames_after_close = strcmp(attack, "two-links-frames") == 0;
        first_frames_on_2 = strcmp(attack, "two-links-first-frames") == 0;
        two_links();
    } else if (strcmp(attack, "no-frag") == 0) {
        caps_off = 0x2u; /* PM__PEER_CAP_FRAG: no large messages */
        no_frag();
    } else if (strcmp(attack, "slow-handshake") == 0) {
        /* The preamble and part of message 1, then silence. */
        int fd = dial();
        pm__pconn pc;
        if (pm__pconn_init(&pc, &cfg, 1) < 0)
            fail(3, "pm__pconn_init");
        size_t n;
        const unsigned char *p = pm__pconn_output(&pc, &n);
        send_all(fd, p, plen + 10);
        wait_closed(fd, attack);
        pm__pconn_free(&pc);
    } else {
        post_handshake(attack);
    }
    pm__keyring_free(keys);
    return 0;
}
