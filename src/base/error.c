/* SPDX-License-Identifier: MIT */
/* error.c - error strings and the version string. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PM__STR2(x) #x
#define PM__STR(x) PM__STR2(x)

PM_EXTERN const char *pm_version_string(void)
{
    return PM__STR(PM_VERSION_MAJOR) "." PM__STR(PM_VERSION_MINOR) "." PM__STR(PM_VERSION_PATCH);
}

PM_EXTERN const char *pm_strerror(int err)
{
    if (err == 0)
        return "Success";
    if (err < 0)
        err = -err;
    /* strerrordesc_np (glibc >= 2.32) returns a static string and, unlike
     * strerror, never writes a shared buffer, so this is thread safe. */
    const char *s = strerrordesc_np(err);
    return s != NULL ? s : "Unknown error";
}

PM__CHILD_DATA _Atomic uint32_t pm__fork_generation;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
/* Beside the counter: the child's handler writes both, on one page. Used
 * only where the lock's own page (below) could not be had. */
PM__CHILD_DATA static pthread_mutex_t fork_serial_static = PTHREAD_MUTEX_INITIALIZER;
/* The lock every fork-mode fork takes (pm__fork_serial_lock), on a page
 * of its own that each fork gives the child zeroed (MADV_WIPEONFORK,
 * Linux 4.14): a zeroed mutex is an unlocked one (checked before it is
 * used). The supervisor unlocks it just after the fork; on a page the
 * child shared, that write would copy the page between the fork and the
 * supervisor's sleep, while the child waits for its CPU. Set once, at the
 * first lock (choose_serial), read-only after. */
PM__CHILD_DATA static pthread_mutex_t *fork_serial = &fork_serial_static;

PM__READY_TEXT static void on_fork_child(void)
{
    atomic_fetch_add_explicit(&pm__fork_generation, 1, memory_order_relaxed);
    if (fork_serial == &fork_serial_static)
        fork_serial_static = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
}

/* The lock's own wiped page (fork_serial); NULL where the kernel has no
 * MADV_WIPEONFORK, or where an unlocked mutex is not all zero bytes. */
static pthread_mutex_t *fork_serial_page(void)
{
    static const pthread_mutex_t unlocked = PTHREAD_MUTEX_INITIALIZER;
    static const unsigned char zero[sizeof(pthread_mutex_t)];
    if (memcmp(&unlocked, zero, sizeof(zero)) != 0)
        return NULL;
    long page = sysconf(_SC_PAGESIZE);
    size_t size = page > 0 ? (size_t)page : 4096u;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (madvise(p, size, MADV_WIPEONFORK) != 0) {
        (void)munmap(p, size);
        return NULL;
    }
    return p; /* zero-filled: unlocked; kept for the process's life */
}

/* Set once register_fork ran: read before pthread_once, whose code a fork
 * child would otherwise fault in (its own 64 KiB of libc) on its way to
 * READY only to learn that the supervisor registered long ago. On the
 * counter's page, which the child's handler has already written. */
PM__CHILD_DATA static _Atomic int fork_registered;

PM__READY_TEXT static void register_fork(void)
{
    /* Cannot fail but for ENOMEM; then a handle used across a fork is not
     * detected (its use is still undefined, as without this check), which
     * is no reason to refuse to start. */
    (void)pthread_atfork(NULL, NULL, on_fork_child);
    atomic_store_explicit(&fork_registered, 1, memory_order_release);
}

/* Only a supervisor takes the lock: an exec'd worker, which registers the
 * handler on its way to READY (pm__fork_gen), makes no page for it. */
static pthread_once_t serial_once = PTHREAD_ONCE_INIT;

static void choose_serial(void)
{
    int saved = errno;
    pthread_mutex_t *page = fork_serial_page();
    if (page != NULL)
        fork_serial = page;
    errno = saved;
}

void pm__fork_serial_lock(void)
{
    pthread_once(&fork_once, register_fork);
    pthread_once(&serial_once, choose_serial);
    pthread_mutex_lock(fork_serial);
}

void pm__fork_serial_unlock(void)
{
    pthread_mutex_unlock(fork_serial);
}

PM__READY_TEXT uint32_t pm__fork_gen(void)
{
    if (!atomic_load_explicit(&fork_registered, memory_order_acquire))
        pthread_once(&fork_once, register_fork);
    return atomic_load_explicit(&pm__fork_generation, memory_order_relaxed);
}

uint64_t pm__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
