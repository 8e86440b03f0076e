/* SPDX-License-Identifier: MIT */
/*
 * notify.h - readiness by the sd_notify protocol: one abstract datagram
 * socket per incarnation (NOTIFY_SOCKET), and a pure parser of what a
 * worker sends on it.
 */
#ifndef PM_NOTIFY_H
#define PM_NOTIFY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum { PM__NOTIFY_READY = 1, PM__NOTIFY_WATCHDOG = 2, PM__NOTIFY_STOPPING = 4 };

/* What one datagram says: the PM__NOTIFY_* flags of the lines it holds
 * ("READY=1", "WATCHDOG=1", "STOPPING=1", separated by newlines; anything
 * else is ignored, as systemd does). Pure: no system call. */
unsigned pm__notify_parse(const char *buf, size_t len);

/* Random bytes in a notify socket's name (128 bits), and names tried
 * before giving up. */
#define PM__NOTIFY_RANDOM_BYTES 16
#define PM__NOTIFY_TRIES 8

/* Opens the socket of slot/inc (SO_PASSCRED, so every datagram names its
 * sender's pid), bound in the abstract namespace under
 * "procmesh/<supervisor>/<slot>/<inc>/<32 random hex digits>": another
 * process cannot bind the name first, as it cannot guess it. A name found
 * taken all the same is retried under a fresh one, PM__NOTIFY_TRIES times.
 * *name gets the NOTIFY_SOCKET value ("@..."). Returns the fd
 * (non-blocking, close-on-exec) or -errno: -EADDRINUSE only when every
 * name tried was taken, which is never the worker's doing. */
int pm__notify_open(pid_t supervisor, unsigned slot, uint64_t inc, char *name, size_t size);

/* Where the random part of the names comes from: getrandom(2), 0 or
 * -errno. A seam for the tests (a predictable source shows the retry). */
extern int (*pm__notify_random)(void *buf, size_t len);

/* Reads what is waiting (at most 16 datagrams) and returns the flags of
 * those sent by pid `from`; datagrams from any other process (a forger, or
 * the worker's own children) are counted in *dropped. Passed fds are
 * closed. */
unsigned pm__notify_read(int fd, pid_t from, uint64_t *dropped);

#endif /* PM_NOTIFY_H */
