/* SPDX-License-Identifier: MIT */
/*
 * offread_int.h - the output reader's records (offread.c, its only
 * includer: apart so that offread.c holds the logic within the size
 * bound of a file).
 */
#ifndef PM_OFFREAD_INT_H
#define PM_OFFREAD_INT_H

#include "offread.h"

#include <pthread.h>

enum { JOB_QUEUED = 1, JOB_RUNNING, JOB_DONE, JOB_TAKEN };
/* What a job does: read its fd, or close it (a read abandoned under way
 * becomes a close once its read returned). */
enum { KIND_READ = 1, KIND_CLOSE };

struct pm__offjob {
    pm__offjob *next;             /* in the queue, the done list or the spares */
    pm__offjob *all_prev, *all_next; /* in p->all: the owner's only */
    int fd;                       /* the pipe; after a close, the placeholder's number or -1 */
    int state;                    /* under the lock */
    int kind;                     /* under the lock */
    int abandoned;                /* under the lock: the pool closes fd */
    int stuck;                    /* under the lock: abandoned while under way (counted in p->stuck) */
    unsigned group;               /* whose (a slot): PM__OFFREAD_GROUP_MAX of one run at once */
    uint64_t tag;
    size_t len;                   /* the result: written by the thread that ran it */
    int end, err;
    char *buf;                    /* PM__OFFREAD_BYTES, wiped on fork; NULL until a read */
};

struct pm__offread {
    pthread_mutex_t mu;
    pthread_cond_t work; /* a job was queued, or the pool ends */
    pthread_cond_t done; /* a job finished, or a thread left */
    /* Queued, oldest first: reads (q[0]) and closes (q[1]). A thread
     * takes reads first: a read is some worker's output waiting, a close
     * only a release. */
    struct jobq {
        pm__offjob *head, *tail;
        unsigned n;
    } q[2];
    pm__offjob *dhead, *dtail;  /* finished reads, not taken */
    /* Finished closes, their numbers for the owner to close: no wake-up
     * for them (a spawn hands over two; the owner takes them at its next
     * wake-up or pm__offread_close, whichever comes first). */
    pm__offjob *chead, *ctail;
    unsigned nthreads, idle, max;
    unsigned starting;          /* threads made that have not taken the lock yet */
    unsigned unkicked;          /* closes queued since the last kick (the owner's) */
    unsigned *running;          /* jobs under way per group, ngroups of them (set_groups) */
    unsigned *stuck;            /* of those, per group, the ones abandoned under way: held pipes */
    int close_pending;          /* the owner's: closes may wait in the queue (pm__offread_kick) */
    unsigned ngroups;
    unsigned refs;              /* the owner's (until pm__offread_free) and each thread's */
    int stopping;
    int wake_fd;                /* ours: a duplicate of the owner's eventfd */
    /* The file a closing thread puts in place of the pipe (dup3): an
     * eventfd of ours, open until the pool is destroyed (the last
     * reference), since threads use it after pm__offread_free. */
    int hold_fd;
    /* The owner's only: */
    int epfd;                   /* the set of watched pipes */
    pm__offjob *all;            /* every job started and not released or dropped */
    pm__offjob *spare;          /* released jobs kept for reuse (linked by next) */
    unsigned nspare;
};

#endif /* PM_OFFREAD_INT_H */
