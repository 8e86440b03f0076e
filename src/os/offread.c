/* SPDX-License-Identifier: MIT */
/*
 * offread.c - the pipes a worker shares with the supervisor, read and
 * closed on threads of their own, watched through an epoll set of the
 * pool's (offread.h says why: a worker can hold its pipe's mutex in
 * splice(), and a read or the last close of either end then sleeps).
 *
 * A thread per read that waits, not a fixed pool: a thread that reads or
 * closes a pipe whose mutex a worker holds sleeps until the worker lets go
 * or dies, and the jobs queued behind it must not wait for that
 * (threads_for_queue says how many are made; at most the pool's most, and
 * PM__OFFREAD_GROUP_MAX for one group). Two idle threads are kept.
 *
 * Threads block every signal (they must not take the signals the
 * supervisor's signalfd waits for, nor run the application's handlers),
 * allocate nothing, and touch only this pool: a fork made by the owner
 * while one of them holds the lock leaves the child with a lock it never
 * takes. The bytes read are other workers' output: their buffers are
 * wiped on fork (pm__wipemem_alloc), the job records (fds, states) are not,
 * so that the child finds the fds it must close.
 *
 * The epoll set (watchset.c): the loop polls its fd, never a pipe; a pipe
 * leaves it on the owner's thread before a thread may close it.
 */
#define _GNU_SOURCE
#include "base/internal.h"
#include "offread.h"
#include "offread_int.h"
#include "watchset.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* Idle threads kept waiting for jobs; more exit after their job. */
#define IDLE_MAX 2u
/* Released jobs kept for reuse by the owner: a stream read in every turn
 * allocates nothing. */
#define SPARE_MAX 4u
/* A thread's stack: it calls read(), dup3(), close() and the lock's
 * functions only. Enough for the sanitizers' instrumentation; virtual
 * memory until touched. */
#define STACK_BYTES ((size_t)256 * 1024)

/* ------------------------------------------------------------------ jobs */

static void job_free(pm__offjob *j)
{
    if (j->buf != NULL)
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

static struct jobq *queue_of(pm__offread *p, const pm__offjob *j)
{
    return &p->q[j->kind == KIND_READ ? 0 : 1];
}

/* Under the lock: j at the end of its queue, a thread told. */
static void enqueue(pm__offread *p, pm__offjob *j)
{
    struct jobq *q = queue_of(p, j);
    j->state = JOB_QUEUED;
    j->next = NULL;
    if (q->tail != NULL)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
    q->n++;
    /* A close waits for pm__offread_kick (the closes of a turn go to a
     * thread together); a read is some worker's output: told now. */
    if (j->kind == KIND_READ)
        pthread_cond_signal(&p->work);
}

/* Under the lock: queued job j out of its queue. */
static void dequeue(pm__offread *p, pm__offjob *j)
{
    struct jobq *q = queue_of(p, j);
    list_remove(&q->head, &q->tail, j);
    q->n--;
}

/* Under the lock: 1 when group g runs as many jobs as it may. */
static int group_full(const pm__offread *p, unsigned g)
{
    return g < p->ngroups && p->running[g] >= PM__OFFREAD_GROUP_MAX;
}

/* Under the lock: the oldest job of q whose group may run one more, or
 * NULL. */
static pm__offjob *queue_pick(const pm__offread *p, const struct jobq *q)
{
    for (pm__offjob *j = q->head; j != NULL; j = j->next)
        if (!group_full(p, j->group))
            return j;
    return NULL;
}

/* Under the lock: the next job to run, reads first, or NULL. A group
 * that runs PM__OFFREAD_GROUP_MAX jobs already (a slot whose pipes are
 * held: its jobs do not return) has the rest wait in the queue, behind
 * nobody else's. */
static pm__offjob *queue_next(pm__offread *p)
{
    pm__offjob *j = queue_pick(p, &p->q[0]);
    if (j == NULL)
        j = queue_pick(p, &p->q[1]);
    return j;
}

/* Under the lock: job j starts on a thread, or returned. */
static void group_count(pm__offread *p, pm__offjob *j, int delta)
{
    if (j->group >= p->ngroups)
        return;
    int was_full = group_full(p, j->group);
    p->running[j->group] = (unsigned)((int)p->running[j->group] + delta);
    if (delta > 0)
        return;
    if (j->stuck) {
        p->stuck[j->group]--;
        j->stuck = 0;
    }
    /* Its queued jobs may run now: a thread is told (this one, most
     * likely: it looks at the queue next). Only then: a wake-up of an
     * idle thread for nothing at every job's end cost a restart with
     * captured output 0.5 ms on a 2-vCPU machine (doc/benchmarks.md). */
    if (was_full)
        pthread_cond_signal(&p->work);
}

/* A job kept for reuse, or freed. */
static void job_put(pm__offread *p, pm__offjob *j)
{
    j->fd = -1;
    if (p->nspare < SPARE_MAX) {
        j->next = p->spare;
        p->spare = j;
        p->nspare++;
        return;
    }
    job_free(j);
}

/* The owner drops a job no thread touches any more. A close's fd is the
 * placeholder's number now (or -1): closing it never releases a pipe. */
static void owner_drop(pm__offread *p, pm__offjob *j)
{
    if (j->kind == KIND_CLOSE)
        pm__close(j->fd);
    all_unlink(p, j);
    job_put(p, j);
}

/* ------------------------------------------------------------------ threads */

static void pool_destroy(pm__offread *p)
{
    free(p->running);
    pm__close(p->wake_fd);
    pm__close(p->hold_fd);
    pm__close(p->epfd);
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

/* Drops the pipe j->fd holds, leaving the number taken by the placeholder
 * hold (dup3 releases the file it replaces, here, on this thread: the
 * release may wait for the pipe's mutex). Freed now, the number could be
 * given to a new file of the owner's while a fork child still takes it
 * for this one, and closes it. Where dup3 fails (it cannot with two open
 * fds) the number is closed; j->fd -1 then. */
static void job_close(pm__offjob *j, int hold)
{
    if (hold >= 0 && dup3(hold, j->fd, O_CLOEXEC) >= 0)
        return;
    pm__close(j->fd);
    j->fd = -1;
}

/* Under the lock: the job's read or close returned. After pm__offread_free
 * nobody will take it: the thread closes what was handed over and frees
 * it. */
static void job_finished(pm__offread *p, pm__offjob *j)
{
    if (p->stopping) {
        pm__close(j->fd); /* a close's placeholder, or an abandoned read's pipe */
        job_free(j);
        return;
    }
    if (j->kind == KIND_READ && j->abandoned) {
        /* Abandoned while its read was under way: closed by a thread (this
         * one, most likely: it looks at the queue next), never by the
         * owner. */
        j->kind = KIND_CLOSE;
        enqueue(p, j);
        return;
    }
    j->state = JOB_DONE;
    j->next = NULL;
    if (j->kind == KIND_CLOSE) {
        if (p->ctail != NULL)
            p->ctail->next = j;
        else
            p->chead = j;
        p->ctail = j;
        return;
    }
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

/* Runs job j (taken from the queue, the lock released). */
static void job_run(pm__offread *p, pm__offjob *j, int kind)
{
    if (kind == KIND_READ)
        job_read(j);
    else
        job_close(j, p->hold_fd);
}

static void *thread_main(void *arg)
{
    pm__offread *p = arg;
    pthread_mutex_lock(&p->mu);
    p->starting--;
    for (;;) {
        while (queue_next(p) == NULL && !p->stopping) {
            p->idle++;
            pthread_cond_wait(&p->work, &p->mu);
            p->idle--;
        }
        pm__offjob *j = queue_next(p);
        if (j == NULL)
            break; /* the pool ends, and nothing queued may run */
        dequeue(p, j);
        group_count(p, j, +1);
        j->state = JOB_RUNNING;
        int kind = j->kind;
        if (p->stopping)
            pthread_cond_broadcast(&p->done); /* pm__offread_free waits for the queue to empty */
        pthread_mutex_unlock(&p->mu);
        /* Outside the lock: this is the read or close that may sleep until
         * the worker holding the pipe lets go, and the owner must still be
         * able to start, take and abandon other jobs meanwhile. */
        job_run(p, j, kind);
        pthread_mutex_lock(&p->mu);
        group_count(p, j, -1);
        job_finished(p, j);
        if (p->idle >= IDLE_MAX && queue_next(p) == NULL)
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
    p->starting++;
    p->refs++;
    return 0;
}

/* Under the lock: threads enough for the jobs queued, as far as the most
 * allows and threads can be made: one for each read that no idle thread
 * will take (a read must never wait behind one that does not return: it
 * is a worker's output), and one for the closes together (they take
 * microseconds unless a pipe is held, and a spawn queues two, a teardown
 * two per worker: a thread each would be made for nothing; one held
 * close delays the others only until the owner's next kick, which makes
 * another thread while a close waits). Jobs of a full group are not
 * counted: they wait for their group's own threads. A thread just made
 * counts as idle: it cannot take the lock we hold to say so. 1 when some
 * thread will run every queued job eventually: one exists. */
static int threads_for_queue(pm__offread *p)
{
    unsigned need = 0;
    for (const pm__offjob *j = p->q[0].head; j != NULL; j = j->next)
        need += !group_full(p, j->group);
    need += queue_pick(p, &p->q[1]) != NULL;
    while (p->idle + p->starting < need && p->nthreads < p->max)
        if (thread_add(p) < 0)
            break;
    return p->nthreads > 0;
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
    p->max = PM__OFFREAD_THREADS_MAX;
    p->hold_fd = p->epfd = -1;
    /* A duplicate: a thread whose read returns after the owner closed its
     * eventfd (the cluster ended) writes to this one, never to whatever
     * file took the number. */
    p->wake_fd = fcntl(wake_fd, F_DUPFD_CLOEXEC, 0);
    rc = p->wake_fd < 0 || (p->hold_fd = eventfd(0, EFD_CLOEXEC)) < 0 ? -errno
                                                                       : pm__watchset_new();
    if (rc < 0) {
        pool_destroy(p);
        return rc;
    }
    p->epfd = rc;
    *out = p;
    return 0;
}

int pm__offread_set_groups(pm__offread *p, unsigned n)
{
    unsigned *r = calloc(n > 0 ? 2 * (size_t)n : 1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    pthread_mutex_lock(&p->mu);
    free(p->running);
    p->running = r;
    p->stuck = r + n;
    p->ngroups = n;
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int pm__offread_group_held(pm__offread *p, unsigned group)
{
    pthread_mutex_lock(&p->mu);
    int held = group_full(p, group) && p->stuck[group] > 0;
    pthread_mutex_unlock(&p->mu);
    return held;
}

int pm__offread_job_waits(pm__offread *p, const pm__offjob *j)
{
    pthread_mutex_lock(&p->mu);
    int waits = j->state == JOB_QUEUED && group_full(p, j->group);
    pthread_mutex_unlock(&p->mu);
    return waits;
}

void pm__offread_set_max(pm__offread *p, unsigned max)
{
    pthread_mutex_lock(&p->mu);
    p->max = max < 1 ? 1 : max > PM__OFFREAD_THREADS_MAX ? PM__OFFREAD_THREADS_MAX : max;
    pthread_mutex_unlock(&p->mu);
}

static pm__offjob *job_get(pm__offread *p, int need_buf)
{
    pm__offjob *j = p->spare;
    if (j != NULL) {
        p->spare = j->next;
        p->nspare--;
    } else if ((j = calloc(1, sizeof(*j))) == NULL) {
        return NULL;
    }
    if (need_buf && j->buf == NULL && (j->buf = pm__wipemem_alloc(PM__OFFREAD_BYTES)) == NULL) {
        job_put(p, j);
        return NULL;
    }
    j->next = NULL;
    j->abandoned = 0;
    j->stuck = 0;
    j->len = 0;
    j->end = j->err = 0;
    return j;
}

int pm__offread_start(pm__offread *p, int fd, uint64_t tag, unsigned group, pm__offjob **out)
{
    *out = NULL;
    pm__offjob *j = job_get(p, 1);
    if (j == NULL)
        return -ENOMEM;
    j->fd = fd;
    j->tag = tag;
    j->group = group;
    j->kind = KIND_READ;
    pthread_mutex_lock(&p->mu);
    enqueue(p, j);
    /* Every idle thread has a queued job already (or is about to take
     * one): this one would wait behind them, perhaps behind a read that
     * never returns, so a thread is made for it. Without any thread and
     * none to be made, nothing runs it: refused. */
    if (!threads_for_queue(p)) {
        dequeue(p, j);
        pthread_mutex_unlock(&p->mu);
        job_put(p, j);
        return -EAGAIN;
    }
    pthread_mutex_unlock(&p->mu);
    all_link(p, j);
    *out = j;
    return 0;
}

/* The finished closes: their numbers closed, their records dropped. */
static void take_closed(pm__offread *p)
{
    pthread_mutex_lock(&p->mu);
    pm__offjob *j = p->chead;
    p->chead = p->ctail = NULL;
    pthread_mutex_unlock(&p->mu);
    for (pm__offjob *n; j != NULL; j = n) {
        n = j->next;
        owner_drop(p, j);
    }
}

pm__offjob *pm__offread_next(pm__offread *p)
{
    take_closed(p);
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
    return j;
}

/* Under the lock: the first of jobs[0..n-1] (NULL entries skipped) that
 * finished, taken, or -1. */
static int first_done(pm__offread *p, pm__offjob *const *jobs, int n)
{
    for (int i = 0; i < n; i++) {
        pm__offjob *j = jobs[i];
        if (j == NULL || j->state == JOB_QUEUED || j->state == JOB_RUNNING)
            continue;
        if (j->state == JOB_DONE) {
            list_remove(&p->dhead, &p->dtail, j);
            j->state = JOB_TAKEN;
        }
        return i;
    }
    return -1;
}

int pm__offread_wait_any(pm__offread *p, pm__offjob *const *jobs, int n, uint64_t deadline_ms)
{
    struct timespec ts = {(time_t)(deadline_ms / 1000), (long)(deadline_ms % 1000) * 1000000L};
    pthread_mutex_lock(&p->mu);
    int i;
    while ((i = first_done(p, jobs, n)) < 0)
        if (pthread_cond_timedwait(&p->done, &p->mu, &ts) == ETIMEDOUT) {
            i = first_done(p, jobs, n);
            break;
        }
    pthread_mutex_unlock(&p->mu);
    return i;
}

int pm__offread_wait(pm__offread *p, pm__offjob *j, uint64_t deadline_ms)
{
    return pm__offread_wait_any(p, &j, 1, deadline_ms) == 0;
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
    all_unlink(p, j);
    job_put(p, j);
}

/* Under the lock: j (not running, not queued) becomes a close, queued
 * until the owner's next pm__offread_kick (or until PM__OFFREAD_KICK_AT
 * are waiting, when this one kicks). If no thread exists or can be made,
 * it waits in the queue all the same (the next kick tries again): closed
 * on the owner's thread, it could hang the loop. */
static void queue_close(pm__offread *p, pm__offjob *j)
{
    j->kind = KIND_CLOSE;
    enqueue(p, j);
    p->close_pending = 1;
    if (++p->unkicked >= PM__OFFREAD_KICK_AT) {
        p->unkicked = 0;
        (void)threads_for_queue(p);
        pthread_cond_signal(&p->work);
    }
}

void pm__offread_kick(pm__offread *p)
{
    /* Not only the closes queued since the last kick: one queued behind
     * a close that sleeps (its pipe held) has no thread until a kick makes
     * one (threads_for_queue counts one thread for the closes, and that
     * one sleeps), however quiet the pool is. */
    if (p == NULL || !p->close_pending)
        return;
    pthread_mutex_lock(&p->mu);
    p->unkicked = 0;
    p->close_pending = p->q[1].head != NULL;
    (void)threads_for_queue(p);
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
}

void pm__offread_close(pm__offread *p, int fd, unsigned group)
{
    if (fd < 0)
        return;
    take_closed(p); /* the numbers of the last ones, free again before more are held */
    pm__watchset_del(p->epfd, fd);
    pm__offjob *j = job_get(p, 0);
    if (j == NULL)
        return; /* no memory for the record: the fd is left open rather than closed here */
    j->fd = fd;
    j->tag = 0;
    j->group = group;
    j->abandoned = 1;
    all_link(p, j);
    pthread_mutex_lock(&p->mu);
    queue_close(p, j);
    pthread_mutex_unlock(&p->mu);
}

void pm__offread_abandon(pm__offread *p, pm__offjob *j)
{
    pm__watchset_del(p->epfd, j->fd);
    pthread_mutex_lock(&p->mu);
    j->abandoned = 1;
    if (j->state == JOB_RUNNING && j->group < p->ngroups && !j->stuck) {
        /* A read abandoned under way: the drain gave up on it, its pipe
         * held. */
        j->stuck = 1;
        p->stuck[j->group]++;
    } else if (j->state == JOB_QUEUED) {
        dequeue(p, j); /* not read: closed instead */
        queue_close(p, j);
    } else if (j->state != JOB_RUNNING) {
        if (j->state == JOB_DONE)
            list_remove(&p->dhead, &p->dtail, j);
        queue_close(p, j);
    }
    /* A read under way keeps the job: a thread closes the fd when the
     * read returns (job_finished), and only then (closed before, the number
     * could be given to another file, which the thread would read). */
    pthread_mutex_unlock(&p->mu);
}

/* The set (watchset.c): a pipe leaves it (in pm__offread_close and
 * pm__offread_abandon) before it is handed to a thread to close. */
int pm__offread_watch_fd(const pm__offread *p)
{
    return p->epfd;
}

/* pm__offread_free's part under the lock: the jobs not running sorted out.
 * Finished ones (taken or not) are the owner's to drop (returned, linked
 * by all_next); every fd not closed yet is queued for a close. */
static pm__offjob *free_sort(pm__offread *p)
{
    pm__offjob *drop = NULL;
    for (pm__offjob *j = p->all, *n; j != NULL; j = n) {
        n = j->all_next;
        if (j->state == JOB_RUNNING) {
            j->abandoned = 1;
            continue; /* its thread closes and frees it (job_finished) */
        }
        if (j->state == JOB_QUEUED && j->kind == KIND_CLOSE)
            continue; /* likewise, once a thread took it */
        if (j->state == JOB_QUEUED)
            dequeue(p, j); /* a read never started: closed instead */
        if (j->state == JOB_DONE && j->kind == KIND_CLOSE)
            list_remove(&p->chead, &p->ctail, j);
        else if (j->state == JOB_DONE)
            list_remove(&p->dhead, &p->dtail, j);
        if (j->kind == KIND_READ) {
            j->abandoned = 1;
            queue_close(p, j); /* a read not run, or its result never taken: the pipe is open */
            continue;
        }
        j->all_next = drop; /* reused as the drop list: p->all is not read again */
        drop = j;
    }
    return drop;
}

void pm__offread_free(pm__offread *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    pm__offjob *drop = free_sort(p);
    p->stopping = 1;
    p->unkicked = 0;
    (void)threads_for_queue(p);
    /* Taken while the pool is surely alive: once the owner's reference is
     * dropped below, a thread that returns may destroy the pool (the last
     * reference), and p must not be touched again. */
    pm__offjob *spare = p->spare;
    p->spare = NULL;
    p->all = NULL;
    /* No thread writes the eventfd from now on (job_finished), and only
     * the owner uses the set: both closed now, not when the last thread
     * leaves, so that the owner's fds are all closed when it returns (but
     * the placeholder, while a thread may still use it). */
    pm__close(p->wake_fd);
    p->wake_fd = -1;
    pm__close(p->epfd);
    p->epfd = -1;
    pthread_cond_broadcast(&p->work);
    /* Every thread gone (the last one closes the placeholder): waited for
     * briefly, so that a process that ended its cluster has no thread or
     * fd of ours left but when a read or close has not returned (a close
     * still under way here left the placeholder open after the cluster
     * ended: check_output test_no_fd_leak under ASan, CI). */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += 1;
    while ((queue_next(p) != NULL || p->nthreads > 0) &&
           pthread_cond_timedwait(&p->done, &p->mu, &ts) == 0)
        ;
    int last = --p->refs == 0;
    pthread_mutex_unlock(&p->mu);
    for (pm__offjob *j = drop, *n; j != NULL; j = n) {
        n = j->all_next;
        pm__close(j->fd); /* the placeholder's number */
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
    fn(arg, p->hold_fd);
    fn(arg, p->epfd);
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
