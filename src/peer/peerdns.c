/* SPDX-License-Identifier: MIT */
/* peerdns.c - resolving --peers-dns off the supervisor's loop: one resolver thread per resolution, its result handed back through an eventfd. */
#define _GNU_SOURCE
#include "peerdns.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/internal.h"

/*
 * Why a thread, and not getaddrinfo_a or a child process:
 *
 *   - getaddrinfo_a runs getaddrinfo in threads of glibc's own and reports
 *     completion by a signal or by a call in yet another thread: threads
 *     either way, with less control (its pool outlives the request, and a
 *     cancelled request still blocks gai_cancel's caller).
 *   - a child process would be reaped by the supervisor's own reaping of
 *     every child (reap.c counts it as an orphan), and forking a large
 *     supervisor for a lookup costs more than the lookup.
 *
 * So: one short-lived detached thread per resolution, at most one at a time
 * per cluster, that does nothing but getaddrinfo and hand its result over.
 * It shares one job with the loop, guarded by a mutex and freed by whoever
 * lets go last, so the loop never waits for it (pm__peerdns_free abandons a
 * lookup stuck in a slow DNS server).
 *
 * A worker forked while the thread runs (fork mode) is fine: the thread does
 * not exist in the child, the child never touches the job (its mutex may be
 * held), and glibc's fork makes malloc and its NSS state consistent in the
 * child. Every signal is blocked in the thread, so the supervisor's
 * signalfd still receives every signal and no handler ever runs there.
 */

typedef struct pm__dns_job {
    pthread_mutex_t mu;
    int refs;   /* the loop's and the thread's: 2 while both hold it */
    int done;   /* the thread wrote its result (under mu) */
    int efd;    /* written once when done; closed with the job */
    int gai;    /* getaddrinfo's code, 0 on success */
    size_t n;
    char host[256], port[8];
    pm__peerdns_addr addrs[PM__PEERDNS_MAX];
} pm__dns_job;

struct pm__peerdns {
    char host[256], port[8];
    pm__dns_job *cur; /* the resolution running or done and not taken */
};

static void job_put(pm__dns_job *j)
{
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0)
        return;
    pm__close(j->efd);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

/* The distinct addresses of res into a[0..cap). */
static size_t collect(const struct addrinfo *res, pm__peerdns_addr *a, size_t cap)
{
    size_t n = 0;
    for (const struct addrinfo *r = res; r != NULL && n < cap; r = r->ai_next) {
        if (r->ai_addrlen > sizeof(a[0].ss) || (r->ai_family != AF_INET && r->ai_family != AF_INET6))
            continue;
        int dup = 0;
        for (size_t i = 0; i < n && !dup; i++)
            dup = a[i].len == r->ai_addrlen && memcmp(&a[i].ss, r->ai_addr, r->ai_addrlen) == 0;
        if (dup)
            continue;
        memset(&a[n].ss, 0, sizeof(a[n].ss));
        memcpy(&a[n].ss, r->ai_addr, r->ai_addrlen);
        a[n].len = r->ai_addrlen;
        n++;
    }
    return n;
}

static void *resolver(void *arg)
{
    pm__dns_job *j = arg;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC; /* A and AAAA */
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    /* host and port were written before pthread_create, which orders them
     * before this read. */
    int gai = getaddrinfo(j->host, j->port, &hints, &res);
    pthread_mutex_lock(&j->mu);
    j->gai = gai;
    j->n = gai == 0 ? collect(res, j->addrs, PM__PEERDNS_MAX) : 0;
    j->done = 1; /* the mutex orders the result before the loop's read of it */
    pthread_mutex_unlock(&j->mu);
    if (res != NULL)
        freeaddrinfo(res);
    /* The efd lives as long as the job, which this thread still holds: the
     * write can never reach an fd number reused by the loop. */
    uint64_t one = 1;
    ssize_t w = write(j->efd, &one, sizeof(one));
    (void)w;
    job_put(j);
    return NULL;
}

int pm__peerdns_new(pm__peerdns **out, const char *name_port)
{
    if (out == NULL || name_port == NULL)
        return -EINVAL;
    const char *colon = strrchr(name_port, ':');
    if (colon == NULL || colon == name_port)
        return -EINVAL;
    const char *h = name_port;
    size_t hl = (size_t)(colon - name_port);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    pm__peerdns *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return -ENOMEM;
    if (hl == 0 || hl >= sizeof(d->host) || strlen(colon + 1) == 0 || strlen(colon + 1) >= sizeof(d->port)) {
        free(d);
        return -EINVAL;
    }
    memcpy(d->host, h, hl);
    d->host[hl] = '\0';
    strcpy(d->port, colon + 1);
    *out = d;
    return 0;
}

int pm__peerdns_start(pm__peerdns *d)
{
    if (d->cur != NULL)
        return -EBUSY;
    pm__dns_job *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return -ENOMEM;
    j->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (j->efd < 0) {
        int rc = -errno;
        free(j);
        return rc;
    }
    pthread_mutex_init(&j->mu, NULL);
    j->refs = 2;
    memcpy(j->host, d->host, sizeof(j->host));
    memcpy(j->port, d->port, sizeof(j->port));
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* The thread inherits this mask: with every signal blocked there, the
     * process's signals stay for the supervisor's signalfd. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    int rc = pthread_create(&t, &attr, resolver, j);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pm__close(j->efd);
        pthread_mutex_destroy(&j->mu);
        free(j);
        return -rc;
    }
    d->cur = j;
    return 0;
}

int pm__peerdns_fd(const pm__peerdns *d)
{
    return d->cur != NULL ? d->cur->efd : -1;
}

int pm__peerdns_take(pm__peerdns *d, pm__peerdns_addr *out, size_t cap, int *gai_err)
{
    pm__dns_job *j = d->cur;
    if (j == NULL)
        return -EAGAIN;
    pthread_mutex_lock(&j->mu);
    if (!j->done) {
        pthread_mutex_unlock(&j->mu);
        return -EAGAIN;
    }
    int gai = j->gai;
    size_t n = j->n < cap ? j->n : cap;
    memcpy(out, j->addrs, n * sizeof(*out));
    pthread_mutex_unlock(&j->mu);
    uint64_t v;
    ssize_t r = read(j->efd, &v, sizeof(v));
    (void)r;
    d->cur = NULL;
    job_put(j);
    if (gai_err != NULL)
        *gai_err = gai;
    if (gai != 0 || n == 0)
        return -EADDRNOTAVAIL;
    return (int)n;
}

void pm__peerdns_free(pm__peerdns *d)
{
    if (d == NULL)
        return;
    int saved = errno;
    if (d->cur != NULL)
        job_put(d->cur); /* the thread, if it still runs, frees it */
    free(d);
    errno = saved;
}

void pm__peerdns_forget(pm__peerdns *d)
{
    if (d != NULL && d->cur != NULL)
        pm__close(d->cur->efd);
}

const char *pm__peerdns_name(const pm__peerdns *d)
{
    return d->host;
}
