/* SPDX-License-Identifier: MIT */
/*
 * address.h - the nodes of a mesh and their names (address.c): which slot,
 * host or supervisor an address names, and the host table frames index.
 */
#ifndef PM_ADDRESS_H
#define PM_ADDRESS_H

#include <stddef.h>
#include <stdint.h>

#include "procmesh.h"

/* The node number of a supervisor itself; slots are 0..nslots - 1. */
#define PM__NODE_MAIN 0xFFFFFFFFu
/* Host indices are below this; 0 is the local host. */
#define PM__MAX_HOSTS 128u
#define PM__HOST_LOCAL 0u

/* The hosts of a mesh with peer links, by the index frames carry
 * (frame.h): entry 0 is this supervisor's own host, 1.. the remote hosts in
 * the order they first linked. Entries below count are written before
 * count is stored (release) and never change, so a reader that loads count
 * with acquire reads whole names, and an index never names another host
 * later. The hub keeps the table in private memory and copies it into every
 * worker's control block (channel.h), where the worker reads it. */
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

/* The address of node (a slot, or PM__NODE_MAIN) at incarnation inc. */
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

#endif /* PM_ADDRESS_H */
