/* SPDX-License-Identifier: MIT */
/*
 * watchset.h - an epoll set that a loop polls through its one fd, for fds
 * the loop must hold no poll of its own on (watchset.c): the output
 * reader's pipes (offread.h says why). Level-triggered and one-shot: an fd
 * is reported once, then again only after pm__watchset_mod.
 */
#ifndef PM_WATCHSET_H
#define PM_WATCHSET_H

#include <stdint.h>

/* A new set (close-on-exec): its fd, or -errno. */
int pm__watchset_new(void);
/* Watches fd for input (EPOLLIN, and its end: EPOLLHUP), reported with
 * tag: add a new one, mod to watch it again. 0 or -errno. */
int pm__watchset_add(int set, int fd, uint64_t tag);
int pm__watchset_mod(int set, int fd, uint64_t tag);
/* fd no longer watched (not watched: nothing to do). */
void pm__watchset_del(int set, int fd);
/* The tags of up to max watched fds ready now (never waits): the count,
 * or -errno. */
int pm__watchset_ready(int set, uint64_t *tags, int max);

#endif /* PM_WATCHSET_H */
