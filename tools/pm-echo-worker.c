/* SPDX-License-Identifier: MIT */
/*
 * pm-echo-worker - an example procmesh worker (mesh readiness) that serves
 * the TCP or unix socket procmesh hands over as fd 3 (LISTEN_FDS) with
 * io_uring: multishot accept (single-shot on kernels before 5.19), then recv
 * and send per connection. Every line it receives is answered with
 * "slot N pid P: LINE". The line "CRASH" makes it crash on purpose (SIGSEGV),
 * to show containment: procmesh restarts it while the socket keeps
 * accepting.
 *
 *   procmesh run --listen tcp:127.0.0.1:7000 -- pm-echo-worker
 *
 * Exit status: 0 when procmesh asked it to stop, 1 on a setup error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <procmesh.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_CONN 256
#define BUF 4096

enum { OP_ACCEPT = 1, OP_RECV, OP_SEND };

typedef struct conn {
    int fd;             /* -1: free */
    char in[BUF];
    size_t inlen;
    char out[2 * BUF];
    size_t outlen;      /* bytes waiting to be sent */
    int sending;        /* a send is in flight for out[0..sending) */
} conn;

static conn conns[MAX_CONN];
static struct io_uring ring;
static int listen_fd = 3;
static int multishot = 1;
static unsigned slot;

static void *tag(int op, int idx)
{
    return (void *)(uintptr_t)(((uintptr_t)op << 32) | (uint32_t)idx);
}

static struct io_uring_sqe *sqe_get(void)
{
    struct io_uring_sqe *s = io_uring_get_sqe(&ring);
    if (s == NULL) {
        io_uring_submit(&ring);
        s = io_uring_get_sqe(&ring);
    }
    return s;
}

static void arm_accept(void)
{
    struct io_uring_sqe *s = sqe_get();
    if (multishot)
        io_uring_prep_multishot_accept(s, listen_fd, NULL, NULL, SOCK_CLOEXEC);
    else
        io_uring_prep_accept(s, listen_fd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data(s, tag(OP_ACCEPT, 0));
}

static void arm_recv(int i)
{
    struct io_uring_sqe *s = sqe_get();
    io_uring_prep_recv(s, conns[i].fd, conns[i].in + conns[i].inlen, BUF - conns[i].inlen, 0);
    io_uring_sqe_set_data(s, tag(OP_RECV, i));
}

static void arm_send(int i)
{
    conn *k = &conns[i];
    if (k->sending || k->outlen == 0)
        return;
    k->sending = (int)k->outlen;
    struct io_uring_sqe *s = sqe_get();
    io_uring_prep_send(s, k->fd, k->out, k->outlen, MSG_NOSIGNAL);
    io_uring_sqe_set_data(s, tag(OP_SEND, i));
}

static void conn_close(int i)
{
    close(conns[i].fd);
    conns[i].fd = -1;
}

/* Answers every complete line in the input buffer. */
static void lines(int i)
{
    conn *k = &conns[i];
    char *start = k->in, *nl;
    while ((nl = memchr(start, '\n', k->inlen - (size_t)(start - k->in))) != NULL) {
        *nl = '\0';
        if (nl > start && nl[-1] == '\r')
            nl[-1] = '\0';
        if (strcmp(start, "CRASH") == 0)
            raise(SIGSEGV); /* on purpose: procmesh contains and restarts it */
        int room = (int)(sizeof(k->out) - k->outlen);
        int n = snprintf(k->out + k->outlen, (size_t)room, "slot %u pid %d: %s\n", slot,
                         (int)getpid(), start);
        if (n > 0 && n < room)
            k->outlen += (size_t)n;
        start = nl + 1;
    }
    k->inlen -= (size_t)(start - k->in);
    memmove(k->in, start, k->inlen);
}

static void on_cqe(struct io_uring_cqe *cqe)
{
    uintptr_t t = (uintptr_t)io_uring_cqe_get_data(cqe);
    int op = (int)(t >> 32), i = (int)(uint32_t)t, res = cqe->res;
    if (op == OP_ACCEPT) {
        if (res == -EINVAL && multishot) {
            multishot = 0; /* kernel < 5.19: no multishot accept */
            arm_accept();
            return;
        }
        if (res >= 0) {
            int k = 0;
            while (k < MAX_CONN && conns[k].fd >= 0)
                k++;
            if (k == MAX_CONN) {
                close(res);
            } else {
                conns[k].fd = res;
                conns[k].inlen = conns[k].outlen = 0;
                conns[k].sending = 0;
                arm_recv(k);
            }
        }
        if (!multishot || !(cqe->flags & IORING_CQE_F_MORE))
            arm_accept();
    } else if (op == OP_RECV) {
        if (conns[i].fd < 0)
            return;
        if (res <= 0) {
            if (!conns[i].sending)
                conn_close(i);
            else
                conns[i].fd = -conns[i].fd - 2; /* close when the send completes */
            return;
        }
        conns[i].inlen += (size_t)res;
        lines(i);
        if (conns[i].inlen == BUF) { /* a line longer than our buffer */
            conn_close(i);
            return;
        }
        arm_send(i);
        arm_recv(i);
    } else if (op == OP_SEND) {
        conn *k = &conns[i];
        int sent = k->sending;
        k->sending = 0;
        if (k->fd < -1) { /* peer closed meanwhile */
            k->fd = -k->fd - 2;
            conn_close(i);
            return;
        }
        if (res < 0) {
            conn_close(i);
            return;
        }
        (void)sent;
        memmove(k->out, k->out + res, k->outlen - (size_t)res);
        k->outlen -= (size_t)res;
        arm_send(i);
    }
}

int main(void)
{
    const char *n = getenv("LISTEN_FDS");
    if (n == NULL || atoi(n) < 1) {
        fprintf(stderr, "pm-echo-worker: no LISTEN_FDS: run it with procmesh run --listen ...\n");
        return 1;
    }
    pm_node *node;
    int rc = pm_node_join(&node);
    if (rc < 0) {
        fprintf(stderr, "pm-echo-worker: pm_node_join: %s\n", pm_strerror(rc));
        return 1;
    }
    slot = pm_node_slot(node);
    if ((rc = io_uring_queue_init(256, &ring, 0)) < 0) {
        fprintf(stderr, "pm-echo-worker: io_uring: %s\n", strerror(-rc));
        return 1;
    }
    for (int i = 0; i < MAX_CONN; i++)
        conns[i].fd = -1;
    arm_accept();
    pm_node_ready(node);
    for (;;) {
        io_uring_submit(&ring);
        struct io_uring_cqe *cqe;
        struct __kernel_timespec ts = {0, 250 * 1000 * 1000};
        rc = io_uring_wait_cqe_timeout(&ring, &cqe, &ts);
        if (rc == 0) {
            unsigned head, seen = 0;
            io_uring_for_each_cqe(&ring, head, cqe)
            {
                on_cqe(cqe);
                seen++;
            }
            io_uring_cq_advance(&ring, seen);
        }
        /* Between events: prove liveness to procmesh and see a stop request
         * (no system call unless a message is there). */
        pm_message m;
        if (pm_node_recv(node, &m, 0) == -ESHUTDOWN)
            break;
    }
    io_uring_queue_exit(&ring);
    pm_node_close(node);
    return 0;
}
