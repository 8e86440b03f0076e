/* SPDX-License-Identifier: MIT */
/*
 * keyreload.h - peer mode: re-reading the --secret-file files on their own
 * trigger (SIGUSR2), without restarting any worker; SIGHUP's rolling
 * restart does the same reload first.
 */
#ifndef PMD_KEYRELOAD_H
#define PMD_KEYRELOAD_H

#include "dconf.h"
#include "procmesh.h"

typedef struct pmd_keyreload {
    int fd;      /* signalfd for SIGUSR2, watched in the cluster's loop; -1 none */
    int pending; /* a SIGUSR2 arrived: reload at the loop's next turn */
} pmd_keyreload;

/* Before the workers start: SIGUSR2 caught and remembered, so that one
 * sent while they start neither ends procmesh nor is lost (the reload is
 * done once pmd_keyreload_arm ran). Workers never inherit the handler
 * (exec resets it). */
void pmd_keyreload_early(void);

/* Once pm_cluster_spawn returned: SIGUSR2 blocked in this thread and read
 * from a signalfd the cluster's loop watches; pm_cluster_run returns soon
 * after one arrives, with k->pending set (set at once, and the loop's
 * first run stopped, when one came during the spawn). Blocking it only
 * now keeps it out of the signal mask workers get (the one from before
 * the spawn). 0, or -errno (logged; SIGUSR2 then stays caught and unused). */
int pmd_keyreload_arm(pmd_keyreload *k, pm_cluster *c);

/* Closes the signalfd (after the cluster is gone); SIGUSR2 stays caught. */
void pmd_keyreload_close(pmd_keyreload *k);

/*
 * Re-reads every --secret-file (the same paths as at start, the same
 * checks) and hands the secrets to the cluster, for the handshakes to
 * come; links that are up stay up, workers are untouched. The steps of a
 * rotation (doc/protocol.md 1) need no restart: the second file may be
 * missing (the old secret was dropped: only the first is kept), or hold
 * the same secret as the first (taken once). Any other problem keeps the
 * keys in use and logs why. Logs peer_keys_reloaded (with the secrets'
 * ids, never the secrets) or peer_keys_reload_failed; outside peer mode,
 * or without --secret-file, peer_keys_reload_skipped.
 */
void pmd_keys_reload(pm_cluster *c, const pmd_dconf *conf, const char *trigger);

#endif /* PMD_KEYRELOAD_H */
