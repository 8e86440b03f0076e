/* SPDX-License-Identifier: MIT */
/* listen.h - the listening sockets procmesh opens and hands to its workers
 * (--listen, the LISTEN_FDS convention). */
#ifndef PMD_LISTEN_H
#define PMD_LISTEN_H

#include "dconf.h"

/* Opens c's --listen sockets into fds[0..c->nlisten), close-on-exec
 * (procmesh passes them to the workers explicitly). Returns their count, or
 * -1 with a log line (and none left open). */
int pmd_listen_open(const pmd_dconf *c, int *fds);

#endif /* PMD_LISTEN_H */
