/* SPDX-License-Identifier: MIT */
/* peerdns.h - resolving --peers-dns off the supervisor's loop: one resolver thread per resolution, its result handed back through an eventfd. */
#ifndef PM_PEERDNS_H
#define PM_PEERDNS_H

/*
 * A name of --peers-dns (a Kubernetes headless Service) has one address per
 * live pod; getaddrinfo may block for seconds on a slow or absent DNS
 * server, and the supervisor's loop must never block. A resolution runs in
 * a thread of its own, and its result comes back through an eventfd the loop
 * watches (doc/design.md "Peers from DNS" says why a thread and not
 * getaddrinfo_a or a child process).
 *
 * No clock and no policy here: mesh.c decides when to resolve (every
 * PM__PEERDNS_REFRESH_MS, with backoff while it fails) and what to dial.
 */

#include <stddef.h>
#include <sys/socket.h>

/* Addresses kept of one resolution (a larger answer is cut, counted). */
#define PM__PEERDNS_MAX 32u
/* Re-resolution while it works, and the backoff while it fails or returns
 * nothing: from MIN doubling to MAX; +-25 % jitter on each. */
#define PM__PEERDNS_REFRESH_MS 30000u
#define PM__PEERDNS_RETRY_MIN_MS 1000u
#define PM__PEERDNS_RETRY_MAX_MS 30000u

typedef struct pm__peerdns pm__peerdns;

typedef struct pm__peerdns_addr {
    struct sockaddr_storage ss;
    socklen_t len;
} pm__peerdns_addr;

/* For name_port "NAME:PORT" (checked when it was set). 0, -EINVAL, -ENOMEM. */
int pm__peerdns_new(pm__peerdns **out, const char *name_port);

/* Starts a resolution in a new thread (every signal blocked in it). Its fd
 * (pm__peerdns_fd) becomes readable when it is done. 0, -EBUSY (one runs),
 * or -errno (eventfd, pthread_create: try again later). */
int pm__peerdns_start(pm__peerdns *d);

/* The fd of the resolution that runs, or -1 when none does. */
int pm__peerdns_fd(const pm__peerdns *d);

/* The resolution is done (its fd was readable): takes its result. Up to
 * cap distinct addresses into out (A and AAAA records, in the resolver's
 * order); returns their number, or -EAGAIN (not done yet; nothing changed),
 * or -EADDRNOTAVAIL (the name did not resolve; *gai_err the getaddrinfo code
 * when not NULL). The fd is closed: a new resolution may start. */
int pm__peerdns_take(pm__peerdns *d, pm__peerdns_addr *out, size_t cap, int *gai_err);

/* Frees d. A resolution still running is abandoned: its thread frees what
 * it used when getaddrinfo returns; the loop is never made to wait. */
void pm__peerdns_free(pm__peerdns *d);

/* Fork mode, in the child: closes the fd and touches nothing else (the
 * thread does not exist in the child, and its lock may be held). */
void pm__peerdns_forget(pm__peerdns *d);

/* "NAME" of "NAME:PORT", for messages. */
const char *pm__peerdns_name(const pm__peerdns *d);

#endif /* PM_PEERDNS_H */
