/* SPDX-License-Identifier: MIT */
/* mesh.h - the supervisor's peer links on its loop: the TCP listener, the dialer and one peer.c state machine per connection. The mesh sits below the supervisor: it is given its loop, its hub and its configuration (pm__mesh_env) and reports up through pm__mesh_ops; it never sees the cluster. */
#ifndef PM_MESH_H
#define PM_MESH_H

#include <stddef.h>
#include <stdint.h>

#include "mesh_env.h"

/* Peer mode, after the loop exists: keys (the node key file, created 0600
 * when missing, or a key pair for this start), pins, the listener bound
 * and listening, the configured peers dialled. 0 with *out set, or -errno;
 * why (when not NULL) names what failed. */
int pm__mesh_init(pm__mesh **out, const pm__mesh_env *env, char *why, size_t whysize);
/* Closes every link (a CLOSE record where the transport is up, best
 * effort) and frees everything. NULL: nothing. */
void pm__mesh_free(pm__mesh *m);
/* Fork mode, in the child: closes the mesh's fds, touches nothing else
 * (the keys are in MADV_WIPEONFORK memory and are never freed there). */
void pm__mesh_forget(pm__mesh *m);
/* A loop completion with one of the mesh's tag kinds. */
void pm__mesh_ready(pm__mesh *m, uint64_t tag);
/* Writes what the links queued, closes the dead ones, arms the loop. */
void pm__mesh_flush(pm__mesh *m);
/* The earliest handshake deadline or redial (ms, 0 none), and firing them. */
uint64_t pm__mesh_next_deadline(const pm__mesh *m);
void pm__mesh_fire(pm__mesh *m, uint64_t now_ms);

/* The accessors below take NULL (no peer mode) and answer nothing. */
/* Failures of reason why (PM__PF_*) since the start: /metrics. */
uint64_t pm__mesh_fails(const pm__mesh *m, int why);
/* The public view of the links (pm_cluster_peers): up to cap into out,
 * returns how many there are. */
size_t pm__mesh_peers(const pm__mesh *m, pm_peer_info *out, size_t cap);
/* Swaps the pre-shared secrets (n of 32 bytes at keys) for every handshake
 * from now on; links up and handshakes under way keep theirs. -ENOTCONN
 * when not in peer mode, -EINVAL for none, more than two, or a cluster that
 * runs without a secret; the keyring's errors (-EEXIST, -EINVAL, -ENOMEM). */
int pm__mesh_set_secrets(pm__mesh *m, const unsigned char *keys, unsigned n);

#endif /* PM_MESH_H */
