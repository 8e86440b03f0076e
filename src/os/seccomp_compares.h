/* SPDX-License-Identifier: MIT */
/* seccomp_compares.h - what a classic BPF program compares with constants (pure logic). */
#ifndef PM_SECCOMP_COMPARES_H
#define PM_SECCOMP_COMPARES_H

#include <stddef.h>
#include <stdint.h>

struct sock_filter;

/* The low 32 bits of argument i in struct seccomp_data (linux/seccomp.h):
 * where a filter loads it from. */
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define PM__SECCOMP_ARG_LO(i) ((uint32_t)(offsetof(struct seccomp_data, args) + 8 * (i) + 4))
#else
#define PM__SECCOMP_ARG_LO(i) ((uint32_t)(offsetof(struct seccomp_data, args) + 8 * (i)))
#endif

/*
 * What a classic BPF program compares with constants (pm__seccomp_compares,
 * pure): the call numbers, as a bitmap (x32's bit masked off), and the
 * (argument, value) pairs of each argument's low word, in the program's
 * order (neq may pass the room: counted, not kept). A BPF_JEQ against k
 * counts when A holds the same thing on every way to it (a whole word
 * loaded from seccomp_data's nr, or from an argument's low word):
 * a value compared with an argument does not count as a call number,
 * nor the other way round.
 */
#define PM__SECCOMP_NR_BITS 8192 /* above every architecture's own call numbers (MIPS n32: 6000s) */
#define PM__SECCOMP_EQ_MAX 128
typedef struct pm__seccomp_compared {
    unsigned char nr[PM__SECCOMP_NR_BITS / 8];
    struct pm__seccomp_eq {
        unsigned arg;
        uint32_t val;
    } eq[PM__SECCOMP_EQ_MAX];
    size_t neq;
} pm__seccomp_compared;
void pm__seccomp_compares(const struct sock_filter *f, size_t n, pm__seccomp_compared *c);
/* 1 when c shows call nr compared with (x32's bit ignored), else 0. */
int pm__seccomp_compared_nr(const pm__seccomp_compared *c, int nr);
/* 1 when c shows argument arg's low word compared with val, else 0. */
int pm__seccomp_compared_eq(const pm__seccomp_compared *c, unsigned arg, uint32_t val);

#endif /* PM_SECCOMP_COMPARES_H */
