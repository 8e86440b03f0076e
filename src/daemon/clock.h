/* SPDX-License-Identifier: MIT */
/*
 * clock.h - the daemon's one monotonic clock, in milliseconds. Its own: the
 * library's pm__now_ms is internal and the shared libprocmesh the daemon
 * links does not export it.
 */
#ifndef PMD_CLOCK_H
#define PMD_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t pmd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

#endif /* PMD_CLOCK_H */
