/* SPDX-License-Identifier: MIT */
/*
 * scrub.c - a fork-mode child's clean start: nothing of the supervisor's
 * earlier work (other workers' traffic it moved) left in the registers or
 * on the stack the child inherits. Called by pm__spawn's fork child only.
 */
#define _GNU_SOURCE
#include "base/internal.h" /* PM__READY_TEXT */
#include "scrub.h"

#include <stdint.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <stddef.h>
#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The page size, set by the supervisor (pm__scrub_prime); 0 in a child
 * forked by code that did not prime it, which then asks sysconf. Relaxed
 * atomics: supervisors in several threads may prime it at once (with the
 * same value). */
static uintptr_t scrub_page;

static int vector_level(void);

/* Which vector registers a child clears (pm__clear_vector_registers): 0
 * the SSE ones, 1 AVX's, 2 AVX-512's too; -1 not read yet. Read here with
 * cpuid and xgetbv, not by __builtin_cpu_supports: that one pulls in
 * libgcc's constructor, which runs cpuid at every load of the library (a
 * trap to the hypervisor each, in a virtual machine) and writes a page of
 * its own, in every exec'd worker too, which never clears anything. */
static int scrub_vec = -1;

/* The lowest address of the forking thread's stack, [floor_lo, floor_hi)
 * the whole stack, as pm__scrub_prime last read it; 0: unknown (a child
 * forked by code that did not prime it). The wipe's walk stops there:
 * below a stack the application gave a thread (pthread_attr_setstack)
 * glibc puts no guard page, and the resident pages below it are the
 * application's own (a heap, globals), which the walk would otherwise
 * give back in the child. Written only under the fork lock (every
 * fork-mode fork is serialized: incarnation.c fork_onto), read by the
 * child of that fork. */
static uintptr_t floor_lo, floor_hi;

/* Pages pm__wipe_dead_stack asks mincore about at once. */
#define WALK_PAGES 16

/* The calling thread's stack bounds, read again only when this frame is
 * not inside the ones kept (another thread forks now): pthread_getattr_np
 * reads /proc/self/maps for the main thread, not a cost for every spawn. */
static void prime_floor(void)
{
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    if (floor_lo != 0 && here >= floor_lo && here < floor_hi)
        return;
    uintptr_t lo = 0, hi = 0;
    pthread_attr_t a;
    void *addr;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &a) == 0) {
        if (pthread_attr_getstack(&a, &addr, &size) == 0) {
            lo = (uintptr_t)addr;
            hi = lo + size;
        }
        pthread_attr_destroy(&a);
    }
    /* Bounds that do not hold this frame are not this stack's (an
     * alternate signal stack, a libc that cannot tell): none, as before. */
    if (here < lo || here >= hi)
        lo = hi = 0;
    floor_lo = lo;
    floor_hi = hi;
}

void pm__scrub_prime(void)
{
    if (__atomic_load_n(&scrub_page, __ATOMIC_RELAXED) == 0)
        __atomic_store_n(&scrub_page, (uintptr_t)sysconf(_SC_PAGESIZE), __ATOMIC_RELAXED);
    if (__atomic_load_n(&scrub_vec, __ATOMIC_RELAXED) < 0)
        __atomic_store_n(&scrub_vec, vector_level(), __ATOMIC_RELAXED);
    prime_floor();
}

/* The walk's system calls, and its last write. On x86-64 without libc's
 * wrappers: a wrapper's frame (or an interposer's, LD_PRELOAD) lies below
 * the caller's stack pointer, in the pages the drop gives back, and must
 * not be there when they go. The write is one string instruction up to the
 * stack pointer, which uses no stack (C cannot name the stack pointer).
 * Elsewhere libc's wrappers, and the write stops at near's first page. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
static inline __attribute__((always_inline)) long sys3(long n, long a, long b, long c)
{
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return ret;
}

/* The stack pointer's page: the last page the wipe writes rather than
 * drops, as nothing is ever written below the stack pointer here (the
 * system calls are inline). The caller's frame is fixed (no alloca), so
 * this is where zero_up_to_sp stops too. */
static inline __attribute__((always_inline)) uintptr_t sp_page(uintptr_t page, uintptr_t top)
{
    (void)top;
    uintptr_t sp;
    __asm__ volatile("movq %%rsp, %0" : "=r"(sp));
    return sp & ~(page - 1);
}

/* near's size: a reference below the caller's frame; small, so that near
 * shares the page of the caller's frame (written by the child already)
 * and the pages below are dropped instead of written. */
#define NEAR_BYTES 256

static inline __attribute__((always_inline)) void zero_up_to_sp(uintptr_t from, uintptr_t top)
{
    (void)top;
    uintptr_t sp;
    __asm__ volatile("movq %%rsp, %0" : "=r"(sp));
    if (sp <= from)
        return;
    void *d = (void *)from;
    size_t n = sp - from;
    __asm__ volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(0) : "memory");
}
#else
static inline long sys3(long n, long a, long b, long c)
{
    long ret = syscall(n, a, b, c);
    return ret < 0 ? -errno : ret;
}

/* libc's wrappers' frames lie below the stack pointer: the page below
 * near's first one is written, not dropped, and near is large enough to
 * keep this frame's own variables above it. */
static inline __attribute__((always_inline)) uintptr_t sp_page(uintptr_t page, uintptr_t top)
{
    return top - page;
}

#define NEAR_BYTES 8192

static inline __attribute__((always_inline)) void zero_up_to_sp(uintptr_t from, uintptr_t top)
{
    for (volatile uint64_t *w = (volatile uint64_t *)from; (uintptr_t)w < top; w++)
        *w = 0;
}
#endif

/* Fork mode: the child is a copy of the supervisor, dead stack included.
 * Below the stack pointer lie the frames of the supervisor's earlier calls
 * (ring reads, message callbacks, the user's own code), and with them
 * copies of other workers' traffic that the worker's code could read. They
 * are cleared here: every resident page from this frame down to the first
 * page the supervisor never touched (a stack is used contiguously from the
 * top, so that page is where its dead frames end; below it lies the
 * unmapped gap or a thread's guard page, which the walk must not pass),
 * and never below the stack's bottom (floor_lo: a stack given to a thread
 * may have no guard page, and another object's pages right below).
 * A page swapped out stops the walk early: accepted, the scan of a swapped
 * page would need the swap device.
 *
 * The pages are dropped, not written: MADV_DONTNEED takes the child's
 * copy-on-write share of them away, and the child reads zeros there from
 * then on. Writing zeros would make the child copy each page first (a
 * copy-on-write fault per page, costly, more so in a virtual machine) only
 * to throw the copy's contents away. Written instead: near, this frame's
 * own bytes below its caller (256 on x86-64, where they share the caller's
 * page, already the child's; 8 KiB elsewhere); on x86-64 the stack
 * pointer's page up to the stack pointer (nothing runs below it: the
 * system calls are inline), elsewhere from the page below near's first
 * one up to it, where libc's wrappers run; and a lowest page on a 2 MiB
 * boundary. That one is left out of the drop because
 * hugetlb memory (a stack an application gave a thread) takes
 * MADV_DONTNEED only from a huge-page boundary and then rounds the end
 * down (Linux 6.2 on: pages past it stay) or up (5.18 to 6.1: into the
 * live frame); from any other start it refuses (EINVAL), as device memory
 * does, and then every page is written. Memory locks are not inherited by
 * a fork child, so a supervisor's mlockall does not stop the drop. Signals
 * are blocked by the caller, so no handler frame is being written where
 * this writes. Not instrumented, as a sanitizer would check these writes
 * against the shadow of frames that no longer exist. */
#if defined(__has_attribute)
#if __has_attribute(no_sanitize)
__attribute__((no_sanitize("address", "undefined")))
#endif
#endif
PM__READY_TEXT __attribute__((noinline)) void pm__wipe_dead_stack(void)
{
    volatile unsigned char near[NEAR_BYTES];
    for (size_t i = 0; i < sizeof(near); i++)
        near[i] = 0;
    uintptr_t page = __atomic_load_n(&scrub_page, __ATOMIC_RELAXED);
    if (page == 0)
        page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t top = (uintptr_t)&near[0] & ~(page - 1);
    /* [low, top): the resident pages below. 8 MiB, the usual stack
     * rlimit: a bound, not an expectation. Asked WALK_PAGES at a time: a
     * mincore costs about the same for one page as for sixteen (3 us on a
     * guest that virtualises page tables, where a page at a time made five
     * calls a restart, stop 69). A window that reaches past the mapping
     * (ENOMEM: the gap below a stack) is asked again a page at a time, so
     * the walk still ends at the last mapped page. */
    uintptr_t low = top;
    const uintptr_t floor = floor_lo;
    unsigned left = (8u << 20) / (unsigned)page, k = WALK_PAGES;
    while (left > 0 && low - page >= floor) {
        unsigned ask = k < left ? k : left;
        while (ask > 1 && low - (uintptr_t)ask * page < floor)
            ask--;
        unsigned char vec[WALK_PAGES];
        if (sys3(SYS_mincore, (long)(low - (uintptr_t)ask * page), (long)((uintptr_t)ask * page),
                 (long)vec) != 0) {
            if (ask == 1)
                break;
            k = 1;
            continue;
        }
        /* vec[ask - 1] is the page right below low: resident ones from
         * there down are the dead frames'; the first that is not ends them. */
        unsigned i = ask;
        while (i > 0 && (vec[i - 1] & 1) != 0)
            i--;
        low -= (uintptr_t)(ask - i) * page;
        left -= ask - i;
        if (i > 0)
            break;
    }
    uintptr_t from = low;
    /* [drop, keep) is dropped: keep is the first page written. */
    const uintptr_t keep = sp_page(page, top);
    const uintptr_t drop = (low & ((2u << 20) - 1)) == 0 ? low + page : low;
    if (drop < keep && sys3(SYS_madvise, (long)drop, (long)(keep - drop), MADV_DONTNEED) == 0) {
        for (volatile uint64_t *w = (volatile uint64_t *)low; (uintptr_t)w < drop; w++)
            *w = 0;
        from = keep;
    }
    zero_up_to_sp(from, top);
}

/* Fork mode: the child starts with the supervisor's registers, and the
 * vector registers hold whatever its last memcpy moved (up to 64 bytes of
 * a payload in a zmm register). They do not stay there: the first call the
 * child makes through a not yet bound PLT entry runs the dynamic linker's
 * _dl_runtime_resolve_xsave, which stores every vector register on the
 * stack, and so does any signal delivery; check_hostile's scan found
 * another worker's message on a replacement's stack that way. They are
 * cleared before anything else runs. General-purpose registers keep their
 * values (addresses and counters, 8 bytes each): accepted. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
PM__READY_TEXT __attribute__((target("avx"))) static void clear_ymm(void)
{
    __asm__ volatile("vzeroall" ::: "memory"); /* ymm0-15, and zmm0-15 whole */
}

PM__READY_TEXT __attribute__((target("avx512f"))) static void clear_zmm_high(void)
{
    __asm__ volatile("vpxord %%zmm16, %%zmm16, %%zmm16\n\tvpxord %%zmm17, %%zmm17, %%zmm17\n\t"
                     "vpxord %%zmm18, %%zmm18, %%zmm18\n\tvpxord %%zmm19, %%zmm19, %%zmm19\n\t"
                     "vpxord %%zmm20, %%zmm20, %%zmm20\n\tvpxord %%zmm21, %%zmm21, %%zmm21\n\t"
                     "vpxord %%zmm22, %%zmm22, %%zmm22\n\tvpxord %%zmm23, %%zmm23, %%zmm23\n\t"
                     "vpxord %%zmm24, %%zmm24, %%zmm24\n\tvpxord %%zmm25, %%zmm25, %%zmm25\n\t"
                     "vpxord %%zmm26, %%zmm26, %%zmm26\n\tvpxord %%zmm27, %%zmm27, %%zmm27\n\t"
                     "vpxord %%zmm28, %%zmm28, %%zmm28\n\tvpxord %%zmm29, %%zmm29, %%zmm29\n\t"
                     "vpxord %%zmm30, %%zmm30, %%zmm30\n\tvpxord %%zmm31, %%zmm31, %%zmm31" ::
                         : "memory");
}

/* As __builtin_cpu_supports decides: the CPU has the instructions and the
 * kernel saves their registers (XCR0: SSE and AVX state; opmask and both
 * halves of the upper ZMM state for AVX-512). */
static int vector_level(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_AVX))
        return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0x6) != 0x6)
        return 0;
    /* __get_cpuid_count is missing from older compilers' cpuid.h. */
    if (__get_cpuid_max(0, NULL) < 7)
        return 1;
    __cpuid_count(7, 0, a, b, c, d);
    if ((b & bit_AVX512F) && (lo & 0xe0) == 0xe0)
        return 2;
    return 1;
}

PM__READY_TEXT void pm__clear_vector_registers(void)
{
    int level = __atomic_load_n(&scrub_vec, __ATOMIC_RELAXED);
    if (level < 0)
        level = vector_level(); /* a child of a supervisor that did not prime */
    if (level > 0) {
        clear_ymm();
        if (level > 1)
            clear_zmm_high();
        return;
    }
    __asm__ volatile("pxor %%xmm0, %%xmm0\n\tpxor %%xmm1, %%xmm1\n\tpxor %%xmm2, %%xmm2\n\t"
                     "pxor %%xmm3, %%xmm3\n\tpxor %%xmm4, %%xmm4\n\tpxor %%xmm5, %%xmm5\n\t"
                     "pxor %%xmm6, %%xmm6\n\tpxor %%xmm7, %%xmm7\n\tpxor %%xmm8, %%xmm8\n\t"
                     "pxor %%xmm9, %%xmm9\n\tpxor %%xmm10, %%xmm10\n\tpxor %%xmm11, %%xmm11\n\t"
                     "pxor %%xmm12, %%xmm12\n\tpxor %%xmm13, %%xmm13\n\tpxor %%xmm14, %%xmm14\n\t"
                     "pxor %%xmm15, %%xmm15" ::
                         : "memory");
}
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
static int vector_level(void)
{
    return 0; /* one register file: nothing to read */
}

PM__READY_TEXT void pm__clear_vector_registers(void)
{
    /* A write to a V register also zeroes the upper part of its SVE Z
     * register. */
    __asm__ volatile("movi v0.16b, #0\n\tmovi v1.16b, #0\n\tmovi v2.16b, #0\n\tmovi v3.16b, #0\n\t"
                     "movi v4.16b, #0\n\tmovi v5.16b, #0\n\tmovi v6.16b, #0\n\tmovi v7.16b, #0\n\t"
                     "movi v8.16b, #0\n\tmovi v9.16b, #0\n\tmovi v10.16b, #0\n\tmovi v11.16b, #0\n\t"
                     "movi v12.16b, #0\n\tmovi v13.16b, #0\n\tmovi v14.16b, #0\n\tmovi v15.16b, #0\n\t"
                     "movi v16.16b, #0\n\tmovi v17.16b, #0\n\tmovi v18.16b, #0\n\tmovi v19.16b, #0\n\t"
                     "movi v20.16b, #0\n\tmovi v21.16b, #0\n\tmovi v22.16b, #0\n\tmovi v23.16b, #0\n\t"
                     "movi v24.16b, #0\n\tmovi v25.16b, #0\n\tmovi v26.16b, #0\n\tmovi v27.16b, #0\n\t"
                     "movi v28.16b, #0\n\tmovi v29.16b, #0\n\tmovi v30.16b, #0\n\tmovi v31.16b, #0" ::
                         : "memory");
}
#else
static int vector_level(void)
{
    return 0;
}

PM__READY_TEXT void pm__clear_vector_registers(void)
{
    /* Other architectures: not done (see above); said in doc/design.md. */
}
#endif

/* Fork mode: the frames above the child's, from pm__spawn's up to the
 * library's entry point, were live in the supervisor when it forked; their
 * unused parts (arrays a function never filled, padding) still hold what
 * earlier calls left there, traffic included. The child never returns into
 * them, so they are zeroed: [from, to) where from is the CFA of the
 * caller's frame (nothing of the caller lives below it) and to the CFA the
 * public entry noted. Same care as pm__wipe_dead_stack. */
#if defined(__has_attribute)
#if __has_attribute(no_sanitize)
__attribute__((no_sanitize("address", "undefined")))
#endif
#endif
PM__READY_TEXT __attribute__((noinline)) void pm__wipe_live_frames(char *from, char *to)
{
    if (to == NULL || to <= from || (size_t)(to - from) > (8u << 20))
        return;
    for (volatile char *p = from; p < to; p++)
        *p = 0;
}
