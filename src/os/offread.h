/* SPDX-License-Identifier: MIT */
/*
 * offread.h - the pipes a worker shares with the supervisor, watched,
 * read and closed so that the loop's thread never waits for one
 * (offread.c).
 *
 * Why: every end of a pipe shares the pipe's mutex, and splice() or
 * sendfile() into a pipe hold it while they block on their source. A
 * worker that makes the write end of its captured stdout blocking and
 * splices from a socket nobody writes to holds it for as long as it likes,
 * and a read() of the read end, O_NONBLOCK or not, sleeps uninterruptibly
 * until it lets go; so does the last close of either end (the kernel's
 * pipe_release takes the mutex). Only a thread that may sleep there reads
 * or closes such a pipe. The loop learns that one is readable through the
 * pool's epoll set (pm__offread_watch_fd, watchset.h), whose calls never take the pipe's
 * mutex, and polls only that set: a poll of its own on a pipe would hold a
 * reference to the file, and the loop could end up dropping the last one.
 *
 * The pool's owner (one thread: the loop's) starts jobs; each reads one fd
 * until it is empty (EAGAIN), ended (EOF), failed or the job's buffer is
 * full, on a pool thread; the owner learns that jobs finished from the
 * wake-up fd it gave the pool (written once per batch of finished jobs)
 * and takes them with pm__offread_next, or waits for one with
 * pm__offread_wait. The owner never closes a pipe it gave the pool:
 * pm__offread_abandon (a job's fd) and pm__offread_close (any other) hand
 * it over, and a pool thread closes it once no thread reads it. The thread
 * does not free the fd's number: it puts a placeholder there (dup3 of a
 * file of the pool's own) and the owner closes the number when it takes
 * the finished job, so that a fork made by the owner meanwhile finds every
 * number it must close in pm__offread_child_fds, none of them reused.
 */
#ifndef PM_OFFREAD_H
#define PM_OFFREAD_H

#include <stddef.h>
#include <stdint.h>

/* Bytes a job reads at most: a default pipe's capacity, what the loop
 * reads of one stream in one turn (PM__OUTPUT_TURN_BYTES). */
#define PM__OFFREAD_BYTES ((size_t)64 * 1024)
/* Threads a pool has at most. A thread sleeps in a read or a close for as
 * long as a process holds that pipe's mutex; past this many, jobs wait in
 * the queue for a thread to come back (reads of honest pipes take
 * microseconds, so only held pipes keep threads), and the memory a pool
 * can be made to take stays bounded (a 256 KiB stack each). */
#define PM__OFFREAD_THREADS_MAX 64u
/* Jobs of one group (the caller's: a slot) under way at once, at most: a
 * slot's two streams' reads and the closes of its last incarnation's
 * pipes. A slot whose pipes are held has its further jobs wait for its
 * own threads to come back, so it keeps at most this many threads, and
 * nobody else's jobs wait behind its. */
#define PM__OFFREAD_GROUP_MAX 4u
/* Closes queued without a kick before one kicks itself. */
#define PM__OFFREAD_KICK_AT 64u
/* A job in no group: never held back. */
#define PM__OFFREAD_NO_GROUP (~0u)

typedef struct pm__offread pm__offread;
typedef struct pm__offjob pm__offjob;

/* How a job's reading ended. */
enum pm__offread_end {
    PM__OFFREAD_MORE = 0,  /* the fd is empty for now (EAGAIN), or the buffer is full */
    PM__OFFREAD_EOF = 1,   /* every writer closed its end */
    PM__OFFREAD_ERROR = 2  /* a read failed (err) */
};

typedef struct pm__offread_result {
    const char *data; /* the bytes read (in wiped-on-fork memory), valid until released */
    size_t len;
    int end;          /* enum pm__offread_end */
    int err;          /* the errno of PM__OFFREAD_ERROR, else 0 */
    uint64_t tag;     /* the start's */
} pm__offread_result;

/* A pool in *out whose threads write 1 to (a duplicate of) wake_fd, an
 * eventfd, when a job finishes. No thread exists until the first start.
 * 0 or -errno. */
int pm__offread_new(pm__offread **out, int wake_fd);
/* Ends the pool: finished jobs are dropped, the fds handed over and not
 * closed yet are closed by the threads (made if need be), reads under way
 * are left to their threads, which close what they hold and free what is
 * left when the last one returns (until then the pool's placeholder file
 * stays open). Every job still started must have been abandoned. NULL is a
 * no-op. */
void pm__offread_free(pm__offread *p);
/* Groups 0 to n-1 counted and limited (PM__OFFREAD_GROUP_MAX jobs under
 * way each); others are not. Before the first job. 0 or -ENOMEM. */
int pm__offread_set_groups(pm__offread *p, unsigned n);
/* 1 when group's pipes are held: it runs PM__OFFREAD_GROUP_MAX jobs now,
 * one of them a read abandoned under way (a drain gave up on it). Its
 * further jobs wait until one returns, which may be never. */
int pm__offread_group_held(pm__offread *p, unsigned group);
/* 1 when job j waits in the queue behind its full group. */
int pm__offread_job_waits(pm__offread *p, const pm__offjob *j);
/* The most threads the pool may have (tests; at most and by default
 * PM__OFFREAD_THREADS_MAX, at least 1). */
void pm__offread_set_max(pm__offread *p, unsigned max);

/* The pool's epoll set (watchset.h): the fd the owner's loop polls for
 * the pipes the owner watches there (pm__watchset_add, _mod, _ready). A
 * pipe handed over to be closed leaves it first (pm__offread_close,
 * pm__offread_abandon). */
int pm__offread_watch_fd(const pm__offread *p);
/* The closes handed over since the last kick go to a thread: the owner
 * calls it before it sleeps (a close costs a thread's wake-up, one per
 * batch; on a loaded machine the wake-up is what costs). */
void pm__offread_kick(pm__offread *p);
/* Hands fd (the owner's, read by no job; group's) over to be closed by a
 * thread (at the next pm__offread_kick):
 * no longer watched from now on, closed soon, its number free once the
 * owner took the finished job (pm__offread_next). */
void pm__offread_close(pm__offread *p, int fd, unsigned group);

/* Starts reading fd on a pool thread (a new one when none is idle and
 * fewer than the most run; once one of group's returned when the group is
 * full), tag given back with the result. 0 and the job
 * in *out, or -errno (no memory for the job, no thread to run it: nothing
 * started). */
int pm__offread_start(pm__offread *p, int fd, uint64_t tag, unsigned group, pm__offjob **out);
/* A finished job not taken yet (its result for pm__offread_outcome, then
 * pm__offread_release), or NULL. Drops finished jobs that were abandoned
 * or closes (closing the number that held the placeholder). */
pm__offjob *pm__offread_next(pm__offread *p);
/* Waits until job j finished, or until the CLOCK_MONOTONIC time deadline_ms
 * (pm__now_ms): 1 when it did (then it is taken: pm__offread_next will not
 * give it again), else 0. */
int pm__offread_wait(pm__offread *p, pm__offjob *j, uint64_t deadline_ms);
/* The same for any of jobs[0..n-1] (NULL entries skipped): the index of
 * one that finished (taken), or -1 at the deadline. */
int pm__offread_wait_any(pm__offread *p, pm__offjob *const *jobs, int n, uint64_t deadline_ms);
/* The result of a taken job. */
void pm__offread_outcome(const pm__offjob *j, pm__offread_result *r);
/* The owner is done with a taken job's result: the job is reused or freed
 * (its fd stays the owner's). */
void pm__offread_release(pm__offread *p, pm__offjob *j);
/* The owner wants no result from j, started and not released, and hands
 * its fd over as pm__offread_close does: closed by a thread, at once if
 * none reads it, else once the read returns. */
void pm__offread_abandon(pm__offread *p, pm__offjob *j);

/* Calls fn(arg, fd) for the pool's own fds (wake-up, epoll set,
 * placeholder) and every fd a job holds: what a child forked by the owner
 * must close. Takes no lock (a pool
 * thread may have held it at the fork) and reads only what the owner's
 * thread writes. */
void pm__offread_child_fds(const pm__offread *p, void (*fn)(void *arg, int fd), void *arg);

/* Threads the pool has now (running or idle): for the tests. */
unsigned pm__offread_threads(pm__offread *p);

#endif /* PM_OFFREAD_H */
