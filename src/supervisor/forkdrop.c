/* SPDX-License-Identifier: MIT */
/*
 * forkdrop.c - what a fork-mode child drops of the supervisor: every other
 * slot's fds and rings, the supervisor's own fds, the loop's fd and rings,
 * the fds of other workers' traffic the hub holds.
 *
 * The supervisor plans it just before each fork (pm__forkdrop_plan): a
 * bitmap of the fds to close and the mappings to unmap, sorted. The child
 * only carries it out (pm__forkdrop_run): the fds closed by runs of
 * consecutive numbers (close_range), the mappings unmapped by runs of
 * adjacent ones. The slots' fds and rings are made one after another, so
 * the runs are few: the child's system calls barely grow with the number
 * of slots, where one per fd and per mapping made a spawn of N workers
 * O(N^2).
 *
 * Why in the supervisor: a walk over every slot and every port is O(N)
 * wherever it runs, but in the child each page of the slot table and the
 * hub it touches is its first touch in a new address space, dear on a
 * paravirtual guest (shadow page tables): at N = 1,024 the child's two
 * walks cost some 0.8 ms per child, a fifth of the whole spawn, where the
 * supervisor, whose pages are warm, walks in about 60 us (doc/benchmarks.md,
 * stop 49). The child reads the bitmap (a page per 32,768 fds) and
 * nothing else of the slots: its page faults stay flat in N
 * (check_spawn's test_fork_child_faults_flat_in_n).
 */
#define _GNU_SOURCE
#include "forkdrop.h"
#include "spare.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hub/hub.h"
#include "mesh/mesh.h"
#include "os/loop.h"
#include "os/offread.h"

/* ------------------------------------------------------------------ the plan (supervisor) */

/* Grows the bitmap to hold fd (zeroed beyond what it held): 0, or -1 and
 * d->failed. */
static int bits_room(pm__forkdrop *d, int fd)
{
    size_t need = (size_t)fd / 64 + 1;
    if (need <= d->words)
        return 0;
    size_t words = d->words > 0 ? d->words : 64;
    while (words < need)
        words *= 2;
    uint64_t *b = realloc(d->bits, words * sizeof(*b));
    if (b == NULL) {
        d->failed = 1;
        return -1;
    }
    memset(b + d->words, 0, (words - d->words) * sizeof(*b));
    d->bits = b;
    d->words = words;
    return 0;
}

static void plan_fd(pm__forkdrop *d, int fd)
{
    if (fd < 0 || bits_room(d, fd) < 0)
        return;
    d->bits[fd / 64] |= 1ULL << (fd % 64);
    if (fd > d->maxfd)
        d->maxfd = fd;
}

static void plan_fd_cb(void *d, int fd)
{
    plan_fd(d, fd);
}

static void plan_map(pm__forkdrop *d, void *at, size_t len)
{
    if (at == NULL || at == MAP_FAILED)
        return;
    if (d->nmaps == d->maps_cap) {
        size_t cap = d->maps_cap > 0 ? d->maps_cap * 2 : 8;
        struct pm__forkdrop_map *m = realloc(d->maps, cap * sizeof(*m));
        if (m == NULL) {
            d->failed = 1;
            return;
        }
        d->maps = m;
        d->maps_cap = cap;
    }
    d->maps[d->nmaps++] = (struct pm__forkdrop_map){(uintptr_t)at, len};
}

static void plan_channel(pm__forkdrop *d, const pm__channel *l)
{
    int fds[PM__CHANNEL_NFDS];
    pm__channel_fds(l, fds);
    for (int i = 0; i < PM__CHANNEL_NFDS; i++)
        plan_fd(d, fds[i]);
    /* A fork copies a channel's mapping only where its MADV_DONTFORK
     * failed (nofork 0): only then is there one to unmap (channel.h,
     * pm__channel_adopt_fork). */
    if (!l->nofork)
        plan_map(d, l->map, l->map_size);
}

/* One slot's fds and memory, but the channel the child runs on. */
static void plan_slot(pm__forkdrop *d, const pm__slot *t, const pm__channel *own)
{
    plan_fd(d, t->pidfd);
    plan_fd(d, t->exec_pipe);
    /* Every slot's read ends, this one's too: a worker reading its own
     * output would steal lines from the supervisor. */
    plan_fd(d, t->out.s[0].fd);
    plan_fd(d, t->out.s[1].fd);
    if (&t->channel != own)
        plan_channel(d, &t->channel);
    else
        plan_fd(d, own->sock); /* the hub's end of the fd socket: the worker keeps its own */
    /* Every prepared channel too, its own slot's included: a spare is the
     * memory of an incarnation that does not exist yet (unless this
     * process is the standby that will be it). */
    if (t->spare != NULL && t->spare != own)
        plan_channel(d, t->spare);
    else if (t->spare != NULL)
        plan_fd(d, own->sock); /* a standby's own channel: the same */
    if (t->spare != NULL) {
        const pm__spare *sp = pm__spare_of(t);
        plan_fd(d, sp->err_pipe[0]);
        plan_fd(d, sp->err_pipe[1]);
        plan_fd(d, sp->notify_fd);
        for (int k = 0; k < 2; k++) {
            plan_fd(d, sp->out[k][0]);
            plan_fd(d, sp->out[k][1]);
        }
    }
    /* The standbys' handles: no worker may start or kill another. */
    if (t->standby.pid > 0) {
        plan_fd(d, t->standby.pidfd);
        plan_fd(d, t->standby.go_fd);
    }
    /* It has joined its cgroup: no worker keeps a handle on any slot's
     * (another's cgroup.kill would let it end its siblings). */
    int cg[PM__CG_SLOT_NFDS];
    pm__cg_slot_fds(&t->cg, cg);
    for (int k = 0; k < PM__CG_SLOT_NFDS; k++)
        plan_fd(d, cg[k]);
}

/* The supervisor's own fds (among the first made: in the same runs as the
 * slots'), the channels of incarnations not yet buried, and the loop's fd
 * and rings (pm__loop_child_drop: none where the rings are DONTFORK; where
 * they are mapped apart and not DONTFORK, the child forgets the loop
 * instead). */
static void plan_own(pm__forkdrop *d, const pm_cluster *c)
{
    plan_fd(d, c->sigfd);
    plan_fd(d, c->timerfd);
    plan_fd(d, c->wakefd);
    for (unsigned i = 0; i < c->ndying; i++)
        plan_channel(d, &c->dying[i]);
    int fd;
    void *at[2];
    size_t len[2];
    int n = pm__loop_child_drop(c->loop, &fd, at, len);
    d->loop_forget = n < 0;
    if (n < 0)
        return;
    plan_fd(d, fd);
    for (int i = 0; i < n; i++)
        plan_map(d, at[i], len[i]);
}

static int map_cmp(const void *a, const void *b)
{
    uintptr_t x = ((const struct pm__forkdrop_map *)a)->at;
    uintptr_t y = ((const struct pm__forkdrop_map *)b)->at;
    return (x > y) - (x < y);
}

int pm__forkdrop_plan(pm__forkdrop *d, const pm_cluster *c, const pm__channel *own)
{
    /* Only the words the last plan may have set: the bitmap keeps its
     * size from plan to plan. */
    if (d->bits != NULL && d->maxfd >= 0)
        memset(d->bits, 0, ((size_t)d->maxfd / 64 + 1) * sizeof(*d->bits));
    d->maxfd = -1;
    d->nmaps = 0;
    d->failed = 0;
    plan_own(d, c);
    for (unsigned i = 0; i < c->nslots; i++)
        plan_slot(d, &c->slots[i], own);
    d->hub_ports = pm__hub_child_fds(c->hub, plan_fd_cb, d);
    if (d->failed)
        return -ENOMEM;
    /* None with epoll and every channel's mapping not copied: then the
     * list is NULL, which qsort may not be given even for 0 entries. */
    if (d->nmaps > 1)
        qsort(d->maps, d->nmaps, sizeof(*d->maps), map_cmp);
    return 0;
}

void pm__forkdrop_free(pm__forkdrop *d)
{
    free(d->bits);
    free(d->maps);
    memset(d, 0, sizeof(*d));
}

/* ------------------------------------------------------------------ carried out (child) */

/* Unmaps the sorted mappings by runs of adjacent ones. */
PM__READY_TEXT static void unmap_runs(const pm__forkdrop *d)
{
    const struct pm__forkdrop_map *m = d->maps;
    for (size_t i = 0, j; i < d->nmaps; i = j + 1) {
        uintptr_t end = m[i].at + m[i].len;
        for (j = i; j + 1 < d->nmaps && m[j + 1].at == end; j++)
            end += m[j + 1].len;
        (void)pm__sys2(SYS_munmap, m[i].at, end - m[i].at); /* raw: rawsys.h */
    }
}

PM__READY_TEXT static int marked(const pm__forkdrop *d, int fd)
{
    return (int)(d->bits[fd / 64] >> (fd % 64) & 1);
}

/* Closes the marked fds, a run of consecutive numbers at a time. */
PM__READY_TEXT static void close_runs(const pm__forkdrop *d)
{
    for (int fd = 0; fd <= d->maxfd;) {
        if (!marked(d, fd)) {
            fd++;
            continue;
        }
        int last = fd;
        while (last + 1 <= d->maxfd && marked(d, last + 1))
            last++;
        /* close_range: Linux 5.9; before it, one close each. */
        if (pm__sys3(SYS_close_range, (unsigned)fd, (unsigned)last, 0) < 0)
            for (int k = fd; k <= last; k++)
                pm__close(k);
        fd = last + 1;
    }
}

PM__READY_TEXT static void close_cb(void *arg, int fd)
{
    (void)arg;
    pm__close(fd);
}

PM__READY_TEXT void pm__forkdrop_run(const pm__forkdrop *d, pm_cluster *c)
{
    unmap_runs(d);
    close_runs(d);
    if (d->loop_forget)
        pm__loop_forget(c->loop);
    /* The output reader's eventfd and every pipe a read is or was under
     * way on: its threads change them, so they are read here, from the
     * state the fork copied, not planned. A handful, closed one by one. */
    pm__offread_child_fds(c->output.reader, close_cb, NULL);
    pm__mesh_forget(c->mesh); /* the link sockets: the supervisor's alone */
    /* Other workers' traffic the hub holds (queued frames, broadcast
     * replies) must not be readable by this worker's code. */
    pm__hub_wipe_data(c->hub, d->hub_ports);
}
