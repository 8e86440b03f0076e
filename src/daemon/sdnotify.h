/* SPDX-License-Identifier: MIT */
/* sdnotify.h - the systemd notify protocol towards procmesh's own service
 * manager: READY=1, WATCHDOG=1, STOPPING=1 on $NOTIFY_SOCKET. */
#ifndef PMD_SDNOTIFY_H
#define PMD_SDNOTIFY_H

#include <stdint.h>

/* Sends msg to $NOTIFY_SOCKET; nothing when it is unset. Best effort: a
 * service manager that is gone must not stop procmesh. */
void pmd_notify(const char *msg);

/* How often to send WATCHDOG=1: half of $WATCHDOG_USEC, in ms, when the
 * manager watches us (and $WATCHDOG_PID, if set, is us); else 0. */
uint64_t pmd_watchdog_interval_ms(void);

#endif /* PMD_SDNOTIFY_H */
