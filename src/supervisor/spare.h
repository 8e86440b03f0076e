/* SPDX-License-Identifier: MIT */
/* spare.h - the next incarnation's channel and pipes, prepared ahead
 * (spare.c). */
#ifndef PM_SUPERVISOR_SPARE_H
#define PM_SUPERVISOR_SPARE_H

#include "types.h"

#include <sys/un.h>

/* A slot's spare (s->spare points at its channel, the first member): the next
 * incarnation's channel; in exec mode its exec error pipe (both ends
 * close-on-exec, the read end non-blocking); with captured output its
 * stdout and stderr pipes (read end, write end each, as pm__output_pipes
 * makes them); with sd_notify readiness its notify socket and the
 * NOTIFY_SOCKET value naming it (notify.h); -1s for what it does not
 * hold. */
typedef struct pm__spare {
    pm__channel channel;
    int err_pipe[2];
    int out[2][2];
    int notify_fd;
    char notify[sizeof(((struct sockaddr_un *)0)->sun_path) + 2];
} pm__spare;

static inline pm__spare *pm__spare_of(const pm__slot *s)
{
    return (pm__spare *)(void *)s->spare;
}

/* Closes and frees s's spare channel, if it has one, and ends (kills and
 * reaps) the standby waiting on it (errno preserved). */
void pm__incarnation_spare_drop(pm_cluster *c, pm__slot *s);
/* Prepares s's next incarnation's channel (the spare) if it has none; best
 * effort, errno preserved. Called when the incarnation becomes ready. */
void pm__incarnation_spare_prepare(pm_cluster *c, pm__slot *s);
/* 1 when every fd of fds sits below half of RLIMIT_NOFILE: what is prepared
 * ahead (spares, standbys) must never take the fds that the slots' own
 * starts need. */
int pm__fds_affordable(const int *fds, size_t n);
/* The error pipe of an exec child. 0 or -errno. */
int pm__err_pipe_open(int p[2]);
/* The channel (and the pipes the spare has, into err_pipe and out, and its
 * notify socket into *notify_fd with its name into notify, else -1s) for
 * the incarnation now starting: the spare when it fits, a new channel
 * otherwise. 0 or -errno. */
int pm__spare_take(pm_cluster *c, pm__slot *s, int err_pipe[2], int out[2][2], int *notify_fd,
                   char *notify, size_t size);

#endif /* PM_SUPERVISOR_SPARE_H */
