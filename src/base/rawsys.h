/* SPDX-License-Identifier: MIT */
/*
 * rawsys.h - system calls without libc's wrappers, for the code a fork
 * child runs on its way to READY.
 *
 * Why: a fork copies no page-table entry of a file mapping that has no
 * private page, so the child's first instruction in each 64 KiB stretch of
 * libc's text (the kernel maps the 16 pages around a faulting code page:
 * fault-around) is a page fault, 15-40 us each on the guests we measure
 * (doc/benchmarks.md, stop 58). The child's calls to write, close, munmap,
 * syscall() and __errno_location touched four such stretches (0xf0000,
 * 0x100000, 0x20000 of glibc 2.36's libc.so.6, and a procmesh function
 * the compiler outlined out of the ready section: pm__close.part.0) for
 * one system call each. Inline, the instruction is in the caller's text,
 * which is the ready section (internal.h PM__READY_TEXT), and errno is
 * never touched: the result is the kernel's, -errno on failure, which is
 * what procmesh returns anyway.
 *
 * x86-64 only (the machines we measure; PM__RAWSYS 1); elsewhere libc's
 * syscall(), with the same -errno result, except where a call's raw form
 * differs between architectures (mmap: the caller uses libc's there).
 * Bypassing libc also bypasses an interposer (LD_PRELOAD, a sanitizer's fd
 * tracking): pm__close (internal.h) is raw in the whole library, not only
 * in the fork child, so such a tool does not see procmesh's closes; the
 * other calls here are the fork child's and the ring's doorbell.
 */
#ifndef PM_RAWSYS_H
#define PM_RAWSYS_H

#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

/* x86-64's 64-bit ABI only: x32 (__ILP32__) numbers its calls apart. */
#if defined(__x86_64__) && !defined(__ILP32__) && (defined(__GNUC__) || defined(__clang__))
#define PM__RAWSYS 1
static inline __attribute__((always_inline)) long pm__sys6(long n, long a, long b, long c, long d,
                                                           long e, long f)
{
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    /* The kernel clobbers rcx (return address) and r11 (flags); "memory":
     * the call may read or write through any of its pointers. */
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
#else
#define PM__RAWSYS 0
static inline long pm__sys6(long n, long a, long b, long c, long d, long e, long f)
{
    int saved = errno;
    long ret = syscall(n, a, b, c, d, e, f);
    if (ret == -1) {
        ret = -errno;
        errno = saved;
    }
    return ret;
}
#endif

#define pm__sys1(n, a) pm__sys6((n), (long)(a), 0, 0, 0, 0, 0)
#define pm__sys2(n, a, b) pm__sys6((n), (long)(a), (long)(b), 0, 0, 0, 0)
#define pm__sys3(n, a, b, c) pm__sys6((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define pm__sys4(n, a, b, c, d) pm__sys6((n), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define pm__sys5(n, a, b, c, d, e)                                                          \
    pm__sys6((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)

/* A result of mmap is an error when it lies in the last page of the
 * address space, as the kernel returns -errno there. */
static inline int pm__sys_failed(long ret)
{
    return (unsigned long)ret > -4096UL;
}

#endif /* PM_RAWSYS_H */
