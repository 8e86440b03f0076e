/* SPDX-License-Identifier: MIT */
/* watch.c - application fds watched by the supervisor's loop (pm_cluster_watch_fd). */
#define _GNU_SOURCE
#include "watch.h"
#include "hub/hub.h"
#include "os/loop.h"

#include <stdlib.h>

PM_EXTERN int pm_cluster_watch_fd(pm_cluster *c, int fd, void (*cb)(pm_cluster *, int, void *),
                                  void *arg)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    if (fd < 0 || cb == NULL)
        return -EINVAL;
    if (c->watches == NULL) {
        c->watches = malloc(PM__MAX_WATCH * sizeof(*c->watches));
        if (c->watches == NULL)
            return -ENOMEM;
        for (unsigned i = 0; i < PM__MAX_WATCH; i++) {
            c->watches[i].fd = -1;
            c->watches[i].gen = 0;
            c->watches[i].armed = 0;
        }
    }
    pm__watch *w = NULL, *fr = NULL;
    for (unsigned i = 0; i < PM__MAX_WATCH && w == NULL; i++) {
        if (c->watches[i].fd == fd)
            w = &c->watches[i];
        else if (fr == NULL && c->watches[i].fd < 0)
            fr = &c->watches[i];
    }
    if (w == NULL) {
        if (fr == NULL)
            return -ENOSPC;
        w = fr;
        w->fd = fd;
        w->gen++;
        w->armed = 0;
    }
    w->cb = cb;
    w->arg = arg;
    if (w->armed)
        return 0;
    unsigned idx = (unsigned)(w - c->watches);
    rc = pm__loop_arm(c->loop, fd, PM__TAG(PM__TAG_USER, idx, w->gen));
    if (rc == 0)
        w->armed = 1;
    return rc;
}

PM_EXTERN int pm_cluster_unwatch_fd(pm_cluster *c, int fd)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    if (c->watches == NULL)
        return -ENOENT; /* nothing was ever watched */
    for (unsigned i = 0; i < PM__MAX_WATCH; i++) {
        pm__watch *w = &c->watches[i];
        if (w->fd != fd)
            continue;
        if (w->armed)
            pm__loop_disarm(c->loop, fd, PM__TAG(PM__TAG_USER, i, w->gen));
        /* The poll holds its own reference to the file until the removal is
         * processed: submit now so the caller may close fd right away. */
        pm__loop_flush(c->loop);
        w->fd = -1;
        w->armed = 0;
        w->gen++;
        return 0;
    }
    return -ENOENT;
}

void pm__watch_fire(pm_cluster *c, unsigned idx, uint32_t gen)
{
    if (c->watches == NULL || idx >= PM__MAX_WATCH)
        return;
    pm__watch *w = &c->watches[idx];
    if (w->fd < 0 || gen != w->gen)
        return; /* unwatched meanwhile */
    w->armed = 0;
    PM__APP_CALLBACK(c->hub, w->cb(c, w->fd, w->arg));
}
