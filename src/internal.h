/* SPDX-License-Identifier: MIT */
/*
 * internal.h - what every module of libprocmesh shares and nothing installs.
 *
 * Internal functions that are not static carry the pm__ prefix; they are
 * hidden from the shared library by -fvisibility=hidden (only PM_EXTERN
 * symbols are exported) and reach the tests through the static convenience
 * library libpmcore.la.
 */
#ifndef PM_INTERNAL_H
#define PM_INTERNAL_H

#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "procmesh.h"

#include "frame.h"

#define PM__ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define PM__ALIGN8(n) (((n) + (size_t)7) & ~(size_t)7)
#define PM__LIKELY(x) __builtin_expect(!!(x), 1)
#define PM__UNLIKELY(x) __builtin_expect(!!(x), 0)

/* One cache line pair: adjacent-line prefetchers on x86 pull lines in pairs,
 * so two indices that must not false-share sit 128 bytes apart. */
#define PM__CACHELINE 128

/* close() that keeps errno: cleanup paths run after the error that made
 * them run, and must not overwrite it (skalibs fd_close, libuv uv__close). */
static inline void pm__close(int fd)
{
    if (fd >= 0) {
        int saved = errno;
        (void)close(fd);
        errno = saved;
    }
}

/* Memory for bytes of other workers (wipemem.c): a private anonymous
 * mapping of size bytes (zeroed) that a fork-mode worker inherits zeroed
 * (MADV_WIPEONFORK) or not at all (MADV_DONTFORK, before Linux 4.14); NULL
 * with errno on failure. pm__wipemem_free wipes it and unmaps it (NULL is
 * ignored); only the process that allocated it may call it, since with the
 * fallback a child has nothing there. */
void *pm__wipemem_alloc(size_t size);
void pm__wipemem_free(void *p, size_t size);

/* Handle kinds, the first field of every opaque handle: a handle of the
 * wrong kind (a pm_node * cast to pm_cluster *) is refused with -EINVAL. A
 * freed handle has its magic cleared. */
#define PM__MAGIC_CLUSTER 0x636d7070u /* "ppmc" */
#define PM__MAGIC_NODE 0x6e6d7070u    /* "ppmn" */

/* Which process a handle belongs to: a generation counter that a
 * pthread_atfork child handler bumps in every child (error.c). A cluster
 * used in a forked child (a fork-mode worker), or a node used in a child
 * of its worker, sees another generation and refuses with -EPERM: both
 * would otherwise act on structures whose other end is not theirs.
 * pm__fork_gen() registers the handler on first use (call it when a handle
 * is created); pm__fork_generation is then read with a plain atomic load,
 * which is async-signal-safe (pm_cluster_stop may run in a handler). */
extern _Atomic uint32_t pm__fork_generation;
uint32_t pm__fork_gen(void);

/* Nanoseconds of CLOCK_MONOTONIC. */
uint64_t pm__now_ns(void);

/* Milliseconds of CLOCK_MONOTONIC: the unit of every deadline. */
static inline uint64_t pm__now_ms(void)
{
    return pm__now_ns() / 1000000u;
}

/* The hosts of a mesh with peer links, by the index frames carry
 * (frame.h): entry 0 is this supervisor's own host, 1.. the remote hosts in
 * the order they first linked. Entries below count are written before
 * count is stored (release) and never change, so a reader that loads count
 * with acquire reads whole names, and an index never names another host
 * later. The hub keeps the table in private memory and copies it into every
 * worker's control block (link.h), where the worker reads it. */
typedef struct pm__hosts {
    _Atomic uint32_t count;
    uint32_t reserved;
    char name[PM__MAX_HOSTS][PM_NAME_MAX];
} pm__hosts;

/* The index of host name (1.. count - 1; 0 is the local host, never
 * matched here), or -1. */
int pm__hosts_find(const pm__hosts *t, const char *name);

/* What names the nodes of one supervisor's mesh (address.c). The strings are
 * borrowed, valid names. nslots may be UINT32_MAX where it is not known (a
 * worker: the hub answers -ENOENT past the last slot). hosts is NULL
 * without peer links; in peer mode the supervisor is also port 0 of its own
 * host, and other hosts are reached through the table. */
typedef struct pm__names {
    const char *system;
    const char *host;
    unsigned base_port;
    uint32_t nslots;
    const pm__hosts *hosts;
} pm__names;

/* The address of node (a slot, or PM__NODE_MAIN: frame.h) at incarnation inc. */
void pm__node_address(const pm__names *n, uint32_t node, uint64_t inc, pm_address *a);
/* The same for a node of host index `host` (frame.h: a remote node is its
 * address port, 0 its supervisor). */
void pm__node_address_at(const pm__names *n, uint16_t host, uint32_t node, uint64_t inc,
                         pm_address *a);
/* The node an address names: 0 and *node, or -ENOENT when it is not one of
 * this supervisor's nodes (a remote one included). */
int pm__address_node(const pm__names *n, const pm_address *to, uint32_t *node);
/* Where an address leads: *host (PM__HOST_LOCAL or a remote index) and
 * *node (a slot or PM__NODE_MAIN locally; the address port remotely).
 * -ENOENT: another system, or no local node of that port; -EHOSTUNREACH:
 * peer mode, and no link ever came up with that host name. */
int pm__address_route(const pm__names *n, const pm_address *to, uint16_t *host, uint32_t *node);

/* Names (a system, a host): 1..PM_NAME_MAX - 1 characters of [A-Za-z0-9._-].
 * The one check, in address.c: 1 when s[0..n) is a valid name, 0 if not. */
int pm__name_valid_n(const char *s, size_t n);
/* The same for a NUL-terminated s (NULL is not valid). */
int pm__name_valid(const char *s);

#endif /* PM_INTERNAL_H */
