/* SPDX-License-Identifier: MIT */
/* peers.h - the supervisor's side of the peer links (peers.c). */
#ifndef PM_SUPERVISOR_PEERS_H
#define PM_SUPERVISOR_PEERS_H

#include "types.h"

/* Peer mode, after the loop exists: the mesh (c->mesh) started with its
 * environment. 0 or -errno; why names what failed. */
int pm__peers_start(pm_cluster *c, char *why, size_t whysize);

#endif /* PM_SUPERVISOR_PEERS_H */
