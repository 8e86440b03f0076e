/* SPDX-License-Identifier: MIT */
/*
 * pm-proxy - a TCP forwarder between two loopback ports whose links the
 * tests break on command: the partitions of issue 12 without tc netem.
 *
 *   pm-proxy LISTEN_PORT TARGET_PORT
 *
 * Accepts on 127.0.0.1:LISTEN_PORT (0: any; the port is printed as "ready
 * PORT" on stdout), connects each client ("a") to 127.0.0.1:TARGET_PORT
 * ("b") and forwards bytes both ways. Commands, one a line on stdin, each
 * answered "ok" on stdout once applied:
 *
 *   pass        forward both ways (and stop cutting new connections)
 *   cut         close every connection; accept new ones and close them at once
 *   drop a2b    read what a sends and throw it away (b2a: the other way)
 *   stall a2b   stop reading what a sends, so TCP backs up (b2a likewise)
 *
 * Exits 0 at the end of stdin, 2 on a bad command line, 1 when a system
 * call it cannot do without fails. Single-threaded, poll().
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PAIRS 16
#define BUF 65536

enum { PASS, DROP, STALL };

/* One direction of a forwarded connection: from -> to, with the bytes read
 * and not yet written. */
typedef struct dir {
    int from, to;
    char buf[BUF];
    size_t off, len;
} dir;

typedef struct pair {
    int used;
    dir d[2]; /* [0] a2b, [1] b2a */
} pair;

static pair pairs[PAIRS];
static int mode[2]; /* per direction: PASS, DROP, STALL */
static int cutting;

static void pair_close(pair *p)
{
    if (!p->used)
        return;
    close(p->d[0].from);
    close(p->d[0].to);
    memset(p, 0, sizeof(*p));
}

static int connect_target(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void on_accept(int l, int target)
{
    int c = accept4(l, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0)
        return;
    int t = cutting ? -1 : connect_target(target);
    pair *p = NULL;
    for (int i = 0; i < PAIRS && p == NULL; i++)
        if (!pairs[i].used)
            p = &pairs[i];
    if (t < 0 || p == NULL) {
        /* Cut, nobody at the target, or full: the client sees its
         * connection closed, as across a broken network. */
        close(c);
        if (t >= 0)
            close(t);
        return;
    }
    int one = 1;
    (void)setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    (void)setsockopt(t, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    p->used = 1;
    p->d[0].from = c;
    p->d[0].to = t;
    p->d[1].from = t;
    p->d[1].to = c;
}

/* Moves what it can one way; -1 when the connection ended. */
static int pump(dir *d, int m, short revents_from, short revents_to)
{
    if (d->len == 0 && (revents_from & (POLLIN | POLLHUP | POLLERR)) && m != STALL) {
        ssize_t k = read(d->from, d->buf, sizeof(d->buf));
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
            return -1;
        if (k > 0 && m == PASS) {
            d->off = 0;
            d->len = (size_t)k;
        }
    }
    (void)revents_to; /* a non-blocking send is tried whenever bytes wait */
    if (d->len > 0) {
        ssize_t w = send(d->to, d->buf + d->off, d->len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
        if (w > 0) {
            d->off += (size_t)w;
            d->len -= (size_t)w;
        }
    }
    return 0;
}

static int command(const char *line)
{
    int which = strstr(line, "b2a") != NULL ? 1 : 0;
    if (strncmp(line, "pass", 4) == 0) {
        mode[0] = mode[1] = PASS;
        cutting = 0;
    } else if (strncmp(line, "cut", 3) == 0) {
        cutting = 1;
        for (int i = 0; i < PAIRS; i++)
            pair_close(&pairs[i]);
    } else if (strncmp(line, "drop", 4) == 0) {
        mode[which] = DROP;
        for (int i = 0; i < PAIRS; i++)
            pairs[i].d[which].len = 0; /* what was in hand is lost too */
    } else if (strncmp(line, "stall", 5) == 0) {
        mode[which] = STALL;
    } else {
        fprintf(stderr, "pm-proxy: unknown command '%s' (pass, cut, drop a2b|b2a, stall a2b|b2a)\n", line);
        return -1;
    }
    printf("ok\n");
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: pm-proxy LISTEN_PORT TARGET_PORT\n");
        return 2;
    }
    int lport = atoi(argv[1]), target = atoi(argv[2]);
    if (lport < 0 || lport > 65535 || target <= 0 || target > 65535) {
        fprintf(stderr, "pm-proxy: ports must be 0..65535 (listen) and 1..65535 (target)\n");
        return 2;
    }
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)lport),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t slen = sizeof(sa);
    if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(l, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(l, 16) != 0 ||
        getsockname(l, (struct sockaddr *)&sa, &slen) != 0) {
        perror("pm-proxy: listen");
        return 1;
    }
    printf("ready %d\n", ntohs(sa.sin_port));
    fflush(stdout);
    char line[128];
    size_t have = 0;
    for (;;) {
        struct pollfd pfd[2 + 2 * PAIRS];
        int n = 0;
        pfd[n++] = (struct pollfd){.fd = 0, .events = POLLIN};
        pfd[n++] = (struct pollfd){.fd = l, .events = POLLIN};
        for (int i = 0; i < PAIRS; i++) {
            pair *p = &pairs[i];
            for (int k = 0; k < 2; k++) {
                short ev = 0;
                if (p->used && p->d[k].len == 0 && mode[k] != STALL)
                    ev |= POLLIN;
                if (p->used && p->d[1 - k].len > 0)
                    ev |= POLLOUT;
                /* pfd index 2 + 2i + k is the fd d[k].from (a for k 0). */
                pfd[n++] = (struct pollfd){.fd = p->used ? p->d[k].from : -1, .events = ev};
            }
        }
        if (poll(pfd, (nfds_t)n, 100) < 0 && errno != EINTR) {
            perror("pm-proxy: poll");
            return 1;
        }
        if (pfd[0].revents) {
            ssize_t k = read(0, line + have, sizeof(line) - 1 - have);
            if (k <= 0)
                return 0;
            have += (size_t)k;
            line[have] = '\0';
            char *nl;
            while ((nl = strchr(line, '\n')) != NULL) {
                *nl = '\0';
                (void)command(line);
                size_t rest = have - (size_t)(nl + 1 - line);
                memmove(line, nl + 1, rest + 1);
                have = rest;
            }
            if (have == sizeof(line) - 1)
                have = 0; /* a line too long: dropped */
        }
        if (pfd[1].revents & POLLIN)
            on_accept(l, target);
        for (int i = 0; i < PAIRS; i++) {
            pair *p = &pairs[i];
            if (!p->used)
                continue;
            short ra = pfd[2 + 2 * i].revents, rb = pfd[3 + 2 * i].revents;
            /* a2b reads a (ra) and writes b (rb's POLLOUT); b2a the reverse. */
            if (pump(&p->d[0], mode[0], ra, rb) < 0 || pump(&p->d[1], mode[1], rb, ra) < 0)
                pair_close(p);
        }
    }
}
