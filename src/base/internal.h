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
#include "rawsys.h"


/* An internal call the daemon (src/daemon/) makes through the shared
 * library: exported from libprocmesh.so like a PM_EXTERN call but declared
 * only in an internal header, so it is no public contract (the daemon is
 * built from the same tree and ships with the library). The key files and
 * the secret allocator: the daemon holds keys too, and calling the
 * library's code rather than linking its own copy leaves one secret
 * allocator and one dependency loader in its process. */
#define PM__DAEMON_API __attribute__((visibility("default")))

#define PM__ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define PM__ALIGN8(n) (((n) + (size_t)7) & ~(size_t)7)
#define PM__LIKELY(x) __builtin_expect(!!(x), 1)
#define PM__UNLIKELY(x) __builtin_expect(!!(x), 0)


/* One cache line pair: adjacent-line prefetchers on x86 pull lines in pairs,
 * so two indices that must not false-share sit 128 bytes apart. */
#define PM__CACHELINE 128

/* The code a worker runs on its way to its READY frame, gathered in one
 * input section. Two paths share it (a function on both, such as the
 * ring's reserve, commit and publish, pm_node_ready or the crash
 * handler's arming, can be in one section only):
 * - a fork-mode child, from the fork: a fork copies no page-table entries
 *   of code, so the child's first instruction in each stretch of the
 *   library's text the kernel maps at once (64 KiB, or a large folio) is a
 *   page fault. Spread over the library, that path touched three or four
 *   such stretches; here it is a few KiB together, beside the PLT the
 *   child's libc calls go through.
 * - an exec'd worker, from pm_node_join (and its sends and receives
 *   after): spread over the library's files the path touched five 64 KiB
 *   code windows, a page fault each at every start (the kernel maps the
 *   16 pages around a faulting code page: fault-around); grouped, one or
 *   two.
 * GNU ld and gold place .text.hot.* first in .text (right after
 * .text.startup); lld without -z keep-text-section-prefix and other
 * linkers keep it in .text, where it costs nothing. Only the order
 * changes. Only where the function is defined. */
#if defined(__ELF__) && (defined(__GNUC__) || defined(__clang__))
#define PM__READY_TEXT __attribute__((section(".text.hot.pm_ready")))
#else
#define PM__READY_TEXT
#endif

/* The words the fork child itself must write on its way to READY (the fork
 * generation, its crash handler's target and pid): each page of them is a
 * copy-on-write fault in the child, and the supervisor's .bss put them
 * pages apart. In .data, which is small (under a page in procmesh), they
 * share a page. */
#if defined(__ELF__) && (defined(__GNUC__) || defined(__clang__))
#define PM__CHILD_DATA __attribute__((section(".data.pm_child")))
#else
#define PM__CHILD_DATA
#endif

/* Puts errno back as a cleanup found it, writing it only if it changed:
 * errno lives in the thread's TLS page, which after every fork is shared
 * copy-on-write with the child, so a store of the value already there
 * costs the supervisor a page fault (a copy while the child lives) on
 * the restart path, where the munmap and closes of a buried channel
 * succeed and change nothing. */
static inline void pm__errno_restore(int saved)
{
    if (errno != saved)
        errno = saved;
}

/* close() that keeps errno: cleanup paths run after the error that made
 * them run, and must not overwrite it (skalibs fd_close, libuv uv__close).
 * A raw system call (rawsys.h), which never touches errno: libc's close
 * and errno's location are two stretches of libc a fork child would fault
 * in on its way to READY, and out of line (the compiler made a .part.0 of
 * it in some files) a third, outside the ready section. */
static inline __attribute__((always_inline)) void pm__close(int fd)
{
    if (fd >= 0)
        (void)pm__sys1(SYS_close, fd);
}

/* Handle kinds, the first field of every opaque handle: a handle of the
 * wrong kind (a pm_node * cast to pm_cluster *) is refused with -EINVAL. A
 * freed handle has its magic cleared. */
/* Memory for bytes of other workers (wipemem.c): a private anonymous
 * mapping of size bytes (zeroed) that a fork-mode worker inherits zeroed
 * (MADV_WIPEONFORK) or not at all (MADV_DONTFORK, before Linux 4.14); NULL
 * with errno on failure. pm__wipemem_free wipes it and unmaps it (NULL is
 * ignored); only the process that allocated it may call it, since with the
 * fallback a child has nothing there. */
void *pm__wipemem_alloc(size_t size);
void pm__wipemem_free(void *p, size_t size);

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

/* Held across a channel's creation (channel.c: between its mmap and its
 * MADV_DONTFORK a fork would copy it) and across every worker's fork
 * (incarnation.c), so that no worker fork of one cluster falls in another
 * thread's creation window: every cluster of the process takes it, in
 * any thread. It is free again in every child, where the thread that held
 * it does not exist (a bootstrap may start a cluster of its own): its
 * page is wiped by the fork (error.c), or, without MADV_WIPEONFORK, the
 * atfork child handler above resets it. Taking it registers that
 * handler. */
void pm__fork_serial_lock(void);
void pm__fork_serial_unlock(void);

/* Nanoseconds of CLOCK_MONOTONIC. */
uint64_t pm__now_ns(void);

/* Milliseconds of CLOCK_MONOTONIC: the unit of every deadline. */
static inline uint64_t pm__now_ms(void)
{
    return pm__now_ns() / 1000000u;
}

#endif /* PM_INTERNAL_H */
