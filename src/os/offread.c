/* SPDX-License-Identifier: MIT */
/*
 * offread.c - reads of a pipe that may never return, on threads of their
 * own (offread.h says why: a worker can hold its pipe's mutex in splice()).
 *
 * A thread per job that waits, not a fixed pool: a thread that reads a
 * pipe whose mutex a worker holds sleeps until the worker lets go or dies,
 * and the jobs queued behind it must not wait for that. So a start makes a
 * thread whenever no idle one is left for the jobs queued; a thread that
 * finishes a job waits for the next unless IDLE_MAX others already do. At
 * most one job per stream is under way (the caller's rule), so the threads
 * number at most the streams read at once, and two or three in the steady
 * state.
 *
 * Threads block every signal (they must not take the signals the
 * supervisor's signalfd waits for, nor run the application's handlers),
 * allocate nothing, and touch only this pool: a fork made by the owner
 * while one of them holds the lock leaves the child with a lock it never
 * takes. The bytes read are other workers' output: their buffers are
 * wiped on fork (pm__wipemem_alloc), the job records (fds, states) are not,
 * so that the child finds the fds it must close.
 */
#define _GNU_SOURCE
#include "base/internal.h"
#include "offread.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Idle threads kept waiting for jobs; more exit after their job. */
#define IDLE_MAX 2u
/* Released jobs (with their 64 KiB buffers) kept for reuse by the owner:
 * a stream read in every turn allocates nothing. */
#define SPARE_MAX 4u
/* A thread's stack: it calls read() and the lock's functions only. Enough
 * for the sanitizers' instrumentation; virtual memory until touched. */
#define STACK_BYTES ((size_t)256 * 1024)

enum { JOB_QUEUED = 1, JOB_RUNNING, JOB_DONE, JOB_TAKEN };

struct pm__offjob {
    pm__offjob *next;             /* in the queue or the done list (under the lock) */
    pm__offjob *all_prev, *all_next; /* in p->all: the owner's only */
    int fd;                       /* written by the owner before the job is queued */
    int state;                    /* under the lock */
    int abandoned;                /* under the lock: the pool closes fd */
    uint64_t tag;
    size_t len;                   /* the result: written by the thread that ran it */
    int end, err;
    char *buf;                    /* PM__OFFREAD_BYTES, wiped on fork */
};

struct pm__offread {
    pthread_mutex_t mu;
    pthread_cond_t work; /* a job was queued, or the pool ends */
    pthread_cond_t done; /* a job finished */
    pm__offjob *qhead, *qtail;  /* queued, oldest first */
    pm__offjob *dhead, *dtail;  /* finished, not taken */
    unsigned nqueued, nthreads, idle;
    unsigned refs;              /* the owner's (until pm__offread_free) and each thread's */
    int stopping;
    int wake_fd;                /* ours: a duplicate of the owner's eventfd */
    /* The owner's only: */
    pm__offjob *all;            /* every job started and not released or dropped */
    pm__offjob *spare;          /* released jobs kept for reuse (linked by next) */
    unsigned nspare;
};

/* ------------------------------------------------------------------ jobs */

static void job_free(pm__offjob *j)
{
    pm__wipemem_free(j->buf, PM__OFFREAD_BYTES);
    free(j);
}

static void all_link(pm__offread *p, pm__offjob *j)
{
    j->all_prev = NULL;
    j->all_next = p->all;
    if (p->all != NULL)
        p->all->all_prev = j;
    p->all = j;
}

static void all_unlink(pm__offread *p, pm__offjob *j)
{
    if (j->all_prev != NULL)
        j->all_prev->all_next = j->all_next;
    else
        p->all = j->all_next;
    if (j->all_next != NULL)
        j->all_next->all_prev = j->all_prev;
    j->all_prev = j->all_next = NULL;
}

/* Removes j from the singly linked list at *head (tail kept right). */
static void list_remove(pm__offjob **head, pm__offjob **tail, pm__offjob *j)
{
    pm__offjob *prev = NULL;
    for (pm__offjob *k = *head; k != NULL; prev = k, k = k->next) {
        if (k != j)
            continue;
        if (prev != NULL)
            prev->next = k->next;
        else
            *head = k->next;
        if (*tail == k)
            *tail = prev;
        k->next = NULL;
        return;
    }
}

/* The owner drops a job whose fd is no longer read by anyone: closed if it
 * was handed over, the record reused or freed. */
static void owner_drop(pm__offread *p, pm__offjob *j)
{
    if (j->abandoned)
        pm__close(j->fd);
    j->fd = -1;
    all_unlink(p, j);
    if (p->nspare < SPARE_MAX) {
        j->next = p->spare;
        p->spare = j;
        p->nspare++;
        return;
    }
    job_free(j);
}

/* ------------------------------------------------------------------ threads */

static void pool_destroy(pm__offread *p)
{
    pm__close(p->wake_fd);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* Reads until the fd is empty, ended or failed, or the buffer is full. The
 * fd is the supervisor's end of the pipe, non-blocking: apart from the
 * pipe's mutex, nothing here waits. */
static void job_read(pm__offjob *j)
{
    size_t got = 0;
    j->end = PM__OFFREAD_MORE;
    j->err = 0;
    while (got < PM__OFFREAD_BYTES) {
        ssize_t n = read(j->fd, j->buf + got, PM__OFFREAD_BYTES - got);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        if (n == 0) {
            j->end = PM__OFFREAD_EOF;
            break;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN) {
            j->end = PM__OFFREAD_ERROR;
            j->err = errno;
        }
        break;
    }
    j->len = got;
}

/* Under the lock: the job's read returned. After pm__offread_free nobody
 * will take it: the thread closes what was handed over and frees it. */
static void job_finished(pm__offread *p, pm__offjob *j)
{
    if (p->stopping) {
        if (j->abandoned)
            pm__close(j->fd);
        job_free(j);
        return;
    }
    j->state = JOB_DONE;
    j->next = NULL;
    int was_empty = p->dhead == NULL;
    if (p->dtail != NULL)
        p->dtail->next = j;
    else
        p->dhead = j;
    p->dtail = j;
    pthread_cond_broadcast(&p->done);
    /* One wake-up per batch: the owner takes every finished job when it
     * wakes, so a write while the list was not empty would only wake it
     * again for nothing. */
    if (was_empty) {
        uint64_t one = 1;
        ssize_t w = write(p->wake_fd, &one, sizeof(one));
        (void)w; /* EAGAIN: the counter is full, so the owner wakes anyway */
    }
}

static void *thread_main(void *arg)
{
    pm__offread *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->qhead == NULL && !p->stopping) {
            p->idle++;
            pthread_cond_wait(&p->work, &p->mu);
            p->idle--;
        }
        pm__offjob *j = p->qhead;
        if (j == NULL)
            break; /* the pool ends (its queue was emptied by pm__offread_free) */
        p->qhead = j->next;
        if (p->qhead == NULL)
            p->qtail = NULL;
        j->next = NULL;
        p->nqueued--;
        j->state = JOB_RUNNING;
        pthread_mutex_unlock(&p->mu);
        /* Outside the lock: this is the read that may sleep until the
         * worker holding the pipe lets go, and the owner must still be
         * able to start, take and abandon other jobs meanwhile. */
        job_read(j);
        pthread_mutex_lock(&p->mu);
        job_finished(p, j);
        if (p->idle >= IDLE_MAX && p->qhead == NULL)
            break;
    }
    p->nthreads--;
    int last = --p->refs == 0;
    pthread_cond_broadcast(&p->done); /* pm__offread_free waits for the idle ones to leave */
    pthread_mutex_unlock(&p->mu);
    if (last)
        pool_destroy(p);
    return NULL;
}

/* Under the lock: one more thread, detached, every signal blocked. */
static int thread_add(pm__offread *p)
{
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc != 0)
        return -rc;
    (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    (void)pthread_attr_setstacksize(&attr, STACK_BYTES);
    /* The mask is inherited from the creating thread: set it there for
     * the call, then put the owner's back. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    rc = pthread_create(&t, &attr, thread_main, p);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        return -rc;
    p->nthreads++;
    p->refs++;
    return 0;
}

/* ------------------------------------------------------------------ the owner's */

int pm__offread_new(pm__offread **out, int wake_fd)
{
    *out = NULL;
    pm__offread *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc != 0) {
        free(p);
        return -rc;
    }
    /* Waits end at a CLOCK_MONOTONIC deadline (pm__now_ms): a change of
     * the wall clock must not stretch or cut a drain's wait. */
    if ((rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC)) != 0) {
        pthread_condattr_destroy(&ca);
        free(p);
        return -rc;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, &ca);
    pthread_condattr_destroy(&ca);
    p->refs = 1;
    /* A duplicate: a thread whose read returns after the owner closed its
     * eventfd (the cluster ended) writes to this one, never to whatever
     * file took the number. */
    p->wake_fd = fcntl(wake_fd, F_DUPFD_CLOEXEC, 0);
    if (p->wake_fd < 0) {
        rc = -errno;
        pool_destroy(p);
        return rc;
    }
    *out = p;
    return 0;
}

static pm__offjob *job_get(pm__offread *p)
{
    pm__offjob *j = p->spare;
    if (j != NULL) {
        p->spare = j->next;
        p->nspare--;
    } else {
        if ((j = calloc(1, sizeof(*j))) == NULL)
            return NULL;
        if ((j->buf = pm__wipemem_alloc(PM__OFFREAD_BYTES)) == NULL) {
            free(j);
            return NULL;
        }
    }
    j->next = NULL;
    j->abandoned = 0;
    j->len = 0;
    j->end = j->err = 0;
    return j;
}

int pm__offread_start(pm__offread *p, int fd, uint64_t tag, pm__offjob **out)
{
    *out = NULL;
    pm__offjob *j = job_get(p);
    if (j == NULL)
        return -ENOMEM;
    j->fd = fd;
    j->tag = tag;
    j->state = JOB_QUEUED;
    pthread_mutex_lock(&p->mu);
    if (p->idle <= p->nqueued) {
        /* Every idle thread has a queued job already (or is about to
         * take one): this one would wait behind them, perhaps behind a
         * read that never returns. Without any thread and none to be
         * made, nothing runs it: refused. */
        int rc = thread_add(p);
        if (rc < 0 && p->nthreads == 0) {
            pthread_mutex_unlock(&p->mu);
            j->fd = -1;
            if (p->nspare < SPARE_MAX) {
                j->next = p->spare, p->spare = j, p->nspare++;
            } else {
                job_free(j);
            }
            return rc;
        }
    }
    if (p->qtail != NULL)
        p->qtail->next = j;
    else
        p->qhead = j;
    p->qtail = j;
    p->nqueued++;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
    all_link(p, j);
    *out = j;
    return 0;
}

pm__offjob *pm__offread_next(pm__offread *p)
{
    for (;;) {
        pthread_mutex_lock(&p->mu);
        pm__offjob *j = p->dhead;
        if (j != NULL) {
            p->dhead = j->next;
            if (p->dhead == NULL)
                p->dtail = NULL;
            j->next = NULL;
            j->state = JOB_TAKEN;
        }
        pthread_mutex_unlock(&p->mu);
        if (j == NULL || !j->abandoned)
            return j;
        owner_drop(p, j);
    }
}

int pm__offread_wait(pm__offread *p, pm__offjob *j, uint64_t deadline_ms)
{
    struct timespec ts = {(time_t)(deadline_ms / 1000), (long)(deadline_ms % 1000) * 1000000L};
    pthread_mutex_lock(&p->mu);
    while (j->state == JOB_QUEUED || j->state == JOB_RUNNING) {
        int rc = pthread_cond_timedwait(&p->done, &p->mu, &ts);
        if (rc == ETIMEDOUT)
            break;
    }
    int done = j->state == JOB_DONE || j->state == JOB_TAKEN;
    if (j->state == JOB_DONE) {
        list_remove(&p->dhead, &p->dtail, j);
        j->state = JOB_TAKEN;
    }
    pthread_mutex_unlock(&p->mu);
    return done;
}

void pm__offread_outcome(const pm__offjob *j, pm__offread_result *r)
{
    r->data = j->buf;
    r->len = j->len;
    r->end = j->end;
    r->err = j->err;
    r->tag = j->tag;
}

void pm__offread_release(pm__offread *p, pm__offjob *j)
{
    owner_drop(p, j);
}

void pm__offread_abandon(pm__offread *p, pm__offjob *j)
{
    pthread_mutex_lock(&p->mu);
    j->abandoned = 1;
    int state = j->state;
    if (state == JOB_QUEUED) {
        list_remove(&p->qhead, &p->qtail, j);
        p->nqueued--;
    } else if (state == JOB_DONE) {
        list_remove(&p->dhead, &p->dtail, j);
    }
    pthread_mutex_unlock(&p->mu);
    /* A read under way keeps the job: pm__offread_next drops it when the
     * read returns, and only then is its fd closed (closed before, the
     * number could be given to another file, which the thread would
     * read). Its record stays in p->all so that a fork meanwhile closes
     * the fd in the child. */
    if (state != JOB_RUNNING)
        owner_drop(p, j);
}

void pm__offread_free(pm__offread *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pm__offjob *drop = NULL;
    unsigned nrunning = 0;
    for (pm__offjob *j = p->all, *n; j != NULL; j = n) {
        n = j->all_next;
        if (j->state == JOB_RUNNING) {
            nrunning++;
            continue; /* its thread frees it (job_finished) */
        }
        if (j->state == JOB_QUEUED)
            list_remove(&p->qhead, &p->qtail, j);
        else if (j->state == JOB_DONE)
            list_remove(&p->dhead, &p->dtail, j);
        j->all_next = drop; /* reused as the drop list: p->all is not read again */
        drop = j;
    }
    p->nqueued = 0;
    /* Taken while the pool is surely alive: once the owner's reference is
     * dropped below, a read that returns lets its thread destroy the pool
     * (the last reference), and p must not be touched again. */
    pm__offjob *spare = p->spare;
    p->spare = NULL;
    p->all = NULL;
    /* No thread writes the eventfd from now on (job_finished): closed
     * now, not when the last thread leaves, so that the owner's fds are
     * all closed when it returns. */
    pm__close(p->wake_fd);
    p->wake_fd = -1;
    pthread_cond_broadcast(&p->work);
    /* The idle threads leave at once: waited for (briefly), so that a
     * process that ended its cluster has no thread of ours left but the
     * ones in a read that has not returned. */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += 1;
    while (p->nthreads > nrunning && pthread_cond_timedwait(&p->done, &p->mu, &ts) == 0)
        ;
    int last = --p->refs == 0;
    pthread_mutex_unlock(&p->mu);
    for (pm__offjob *j = drop, *n; j != NULL; j = n) {
        n = j->all_next;
        if (j->abandoned)
            pm__close(j->fd);
        job_free(j);
    }
    for (pm__offjob *j = spare, *n; j != NULL; j = n) {
        n = j->next;
        job_free(j);
    }
    if (last)
        pool_destroy(p);
}

PM__READY_TEXT void pm__offread_child_fds(const pm__offread *p, void (*fn)(void *arg, int fd),
                                          void *arg)
{
    if (p == NULL)
        return;
    fn(arg, p->wake_fd);
    for (const pm__offjob *j = p->all; j != NULL; j = j->all_next)
        fn(arg, j->fd);
}

unsigned pm__offread_threads(pm__offread *p)
{
    pthread_mutex_lock(&p->mu);
    unsigned n = p->nthreads;
    pthread_mutex_unlock(&p->mu);
    return n;
}
