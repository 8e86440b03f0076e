/* SPDX-License-Identifier: MIT */
/*
 * failalloc.h - allocation failures on demand, for the error paths a
 * machine with memory never takes (doc/reliability.md, "Mutation score":
 * a dropped `rc = -ENOMEM` survives every test that cannot make malloc
 * fail). The technique is SQLite's (its "malloc failure" tests): arm the
 * k-th allocation from now to fail, run the code, and again with k + 1,
 * until a run makes no more than k - 1 allocations; every run that met
 * its failure must fail cleanly (an error returned, nothing left
 * behind), never crash or report success.
 *
 * This header defines malloc, calloc, realloc and free for the whole
 * program (one file of a test program includes it), forwarding to glibc's
 * own (__libc_malloc and its siblings, exported for that purpose); free
 * only to show a test each block before it goes (pm_failalloc_free_hook). A program
 * that links procmesh statically (libpmcore) binds the library's calls to
 * these at link time; the shared libraries it loads keep glibc's unless
 * the program exports them (Makefile.am: -Wl,--export-dynamic-symbol=malloc
 * and the others, and PM_FAILALLOC_EXPORT defined before the include,
 * for default visibility). A program
 * linked with libprocmesh.so must export them for the library's calls to
 * reach them (check_spawn does: libc's own allocations then fail in turn
 * too). check_privileges exports them for libseccomp's: out of memory,
 * libseccomp 2.5.4 hands out basic's program without its rules, crashes
 * or spins (doc/reliability.md, "libseccomp out of memory"), which its
 * test_seccomp_out_of_memory makes happen in the child the build runs
 * libseccomp in. Under a sanitizer, whose runtime
 * replaces malloc itself, it defines nothing and PM_FAILALLOC is 0: the
 * tests that need it run in the build without a sanitizer (CI runs both).
 * aligned_alloc counts and fails as malloc does (a revoked lane's copy,
 * lane.c); posix_memalign and memalign are not wrapped (nothing of the
 * library's calls them). The count is the armed process's, every
 * thread of it: a run whose allocations depend on timing (another thread
 * allocating meanwhile) can make a sweep end early or fail elsewhere than
 * where it would alone; the sweeps here arm it around calls that run on
 * the caller's thread (a spawn, a filter's build).
 */
#ifndef PM_TESTS_FAILALLOC_H
#define PM_TESTS_FAILALLOC_H

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define PM_FAILALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PM_FAILALLOC 0
#endif
#endif
#ifndef PM_FAILALLOC
#define PM_FAILALLOC 1
#endif

/* Allocations until the armed one (1: the next fails), 0 when unarmed,
 * and whether it was reached. pm_failalloc_arm counts in the process that
 * armed it only (a fork child keeps a copy of the count, and its
 * allocations are its own); pm_failalloc_arm_shared in a page shared
 * with every child forked while armed, so that a child's allocations
 * count in the same sequence as its parent's (a helper the code forks to
 * run a library in, seccomp_filter.c's build: the parent waits for it, so
 * the order is the same every run). */
/* In memory shared between processes: only lock-free atomics work there. */
_Static_assert(ATOMIC_LONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "failalloc's shared count needs lock-free atomics");
struct failalloc_count {
    _Atomic long left;
    _Atomic int fired;
};
static struct failalloc_count failalloc_own, *failalloc_shared, *failalloc_at = &failalloc_own;
static pid_t failalloc_pid;

/* The k-th allocation from now in this process fails (once); k >= 1. */
static inline void pm_failalloc_arm(long k)
{
    failalloc_pid = getpid();
    failalloc_at = &failalloc_own;
    atomic_store(&failalloc_at->fired, 0);
    atomic_store(&failalloc_at->left, k);
}

/* The k-th allocation from now in this process and the children it forks
 * while armed, together, fails (once); k >= 1. -errno when the shared
 * page cannot be made. */
static inline int pm_failalloc_arm_shared(long k)
{
    if (failalloc_shared == NULL) {
        void *m = mmap(NULL, sizeof(*failalloc_shared), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return -errno;
        failalloc_shared = m;
    }
    failalloc_pid = 0; /* any process */
    failalloc_at = failalloc_shared;
    atomic_store(&failalloc_at->fired, 0);
    atomic_store(&failalloc_at->left, k);
    return 0;
}

/* Disarms; returns 1 when the armed allocation was reached (and failed). */
static inline int pm_failalloc_disarm(void)
{
    atomic_store(&failalloc_at->left, 0);
    int fired = atomic_load(&failalloc_at->fired);
    failalloc_at = &failalloc_own;
    return fired;
}

/* Called with every block given to free, and its usable size, before the
 * heap has it back (NULL: nothing; never called under a sanitizer, whose
 * free is its own): for a test of what a freed block still holds when the
 * heap may hand it on (a broadcast's copies of the workers' replies are
 * wiped first, hub_bcast.c). */
__attribute__((unused)) static void (*pm_failalloc_free_hook)(const void *p, size_t size);

/* Nonzero: every block malloc gives out is filled with this 16-bit value
 * (native order) first, so that a field the code forgets to set reads as
 * something chosen rather than as whatever the heap held (fresh memory
 * from the kernel is zeros, which hides the forgotten store of a 0). */
__attribute__((unused)) static uint16_t pm_failalloc_fill;

#if PM_FAILALLOC
#include <malloc.h>

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
extern void *__libc_memalign(size_t align, size_t n);

/* 1 when this allocation is the armed one (errno ENOMEM, as malloc's). */
static int failalloc_now(void)
{
    struct failalloc_count *at = failalloc_at;
    long left = atomic_load(&at->left);
    if (left > 0 && failalloc_pid != 0 && getpid() != failalloc_pid)
        return 0;
    while (left > 0) {
        if (atomic_compare_exchange_weak(&at->left, &left, left - 1)) {
            if (left > 1)
                return 0;
            atomic_store(&at->fired, 1);
            errno = ENOMEM;
            return 1;
        }
    }
    return 0;
}

/* Hidden unless the program asks (PM_FAILALLOC_EXPORT defined before the
 * include, and Makefile.am's flags): with default visibility the linker
 * exports them to the shared libraries the program links (libseccomp's
 * references to malloc) even without the flags. */
#ifdef PM_FAILALLOC_EXPORT
#define PM_FAILALLOC_VIS __attribute__((visibility("default")))
#else
#define PM_FAILALLOC_VIS __attribute__((visibility("hidden")))
#endif

PM_FAILALLOC_VIS void *malloc(size_t n)
{
    if (failalloc_now())
        return NULL;
    uint16_t *p = __libc_malloc(n);
    for (size_t i = 0; p != NULL && pm_failalloc_fill != 0 && i < n / sizeof(*p); i++)
        p[i] = pm_failalloc_fill;
    return p;
}

PM_FAILALLOC_VIS void *calloc(size_t n, size_t size)
{
    return failalloc_now() ? NULL : __libc_calloc(n, size);
}

PM_FAILALLOC_VIS void *realloc(void *p, size_t n)
{
    return failalloc_now() ? NULL : __libc_realloc(p, n);
}

PM_FAILALLOC_VIS void *aligned_alloc(size_t align, size_t n)
{
    return failalloc_now() ? NULL : __libc_memalign(align, n);
}

PM_FAILALLOC_VIS void free(void *p)
{
    if (p != NULL && pm_failalloc_free_hook != NULL)
        pm_failalloc_free_hook(p, malloc_usable_size(p));
    __libc_free(p);
}
#endif

/* Whether allocation failures can be armed in this build: 1, or 0 with a
 * note naming the test that does nothing here (the sanitizer build, whose
 * malloc and free are its own; the build without one runs it). A test
 * that needs them begins `if (!pm_failalloc_here("name")) return;`. */
static inline int pm_failalloc_here(const char *test)
{
    if (PM_FAILALLOC)
        return 1;
    fprintf(stderr, "note: %s runs in the build without a sanitizer only (the sanitizer's "
                    "malloc and free are its own)\n", test);
    return 0;
}

#endif /* PM_TESTS_FAILALLOC_H */
