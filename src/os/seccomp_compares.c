/* SPDX-License-Identifier: MIT */
/*
 * seccomp_compares.c - what a classic BPF program compares with constants:
 * the call numbers and the arguments' values its JEQs test, found by
 * following what the accumulator may hold. Pure logic, no system call:
 * the check that a program libseccomp exported shows every rule
 * (seccomp_filter.c check_named) stands on it, and
 * tests/check_privileges.c test_seccomp_compares tries it on hand-made
 * programs.
 */
#include "seccomp_compares.h"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* x32's call numbers are x86-64's own with this bit set (asm/unistd.h
 * __X32_SYSCALL_BIT); libseccomp names x32's calls by them. */
#define X32_BIT 0x40000000u

/* What A may hold at an instruction (pm__seccomp_compares): bit 0 the
 * call number, bit 1 + k the low word of argument k, bit 7 anything
 * else; several bits where ways with different contents meet. */
#define A_NR 1u
#define A_ARG(k) (2u << (k))
#define A_OTHER 0x80u

static void flow_to(uint8_t *may, size_t n, size_t to, uint8_t a)
{
    if (to < n)
        may[to] |= a;
}

/* A after a load of the word at offset k of struct seccomp_data. */
static uint8_t loaded(uint32_t k)
{
    if (k == offsetof(struct seccomp_data, nr))
        return A_NR;
    for (unsigned i = 0; i < 6; i++)
        if (k == PM__SECCOMP_ARG_LO(i))
            return (uint8_t)A_ARG(i);
    return A_OTHER;
}

/* A JEQ against k with A as a: a call number or an argument's value
 * compared, when A holds the same thing on every way here. */
static void compared(pm__seccomp_compared *c, uint8_t a, uint32_t k)
{
    if (a == A_NR) {
        uint32_t nr = k & ~X32_BIT;
        if (nr < PM__SECCOMP_NR_BITS)
            c->nr[nr / 8] |= (unsigned char)(1u << (nr % 8));
        return;
    }
    if (a == A_OTHER || (a & (a - 1)) != 0)
        return;
    unsigned arg = 0;
    while (A_ARG(arg) != a)
        arg++;
    if (c->neq < PM__SECCOMP_EQ_MAX)
        c->eq[c->neq] = (struct pm__seccomp_eq){arg, k};
    c->neq++;
}

void pm__seccomp_compares(const struct sock_filter *f, size_t n, pm__seccomp_compared *c)
{
    memset(c, 0, sizeof(*c));
    /* Classic BPF jumps forward only: one pass in order carries what A
     * may hold to every instruction before it is visited. */
    uint8_t may[BPF_MAXINSNS];
    if (n > BPF_MAXINSNS)
        n = BPF_MAXINSNS;
    memset(may, 0, n);
    if (n > 0)
        may[0] = A_OTHER; /* A starts as 0 */
    for (size_t i = 0; i < n; i++) {
        uint8_t a = may[i];
        uint16_t code = f[i].code;
        if (a == 0)
            continue; /* unreachable */
        switch (BPF_CLASS(code)) {
        case BPF_LD:
            /* Only a whole word loaded from its offset is the call
             * number or an argument's low word. */
            a = BPF_MODE(code) == BPF_ABS && BPF_SIZE(code) == BPF_W ? loaded(f[i].k) : A_OTHER;
            break;
        case BPF_ALU:
            a = A_OTHER;
            break;
        case BPF_MISC:
            a = BPF_MISCOP(code) == BPF_TAX ? a : A_OTHER; /* TXA: A = X */
            break;
        case BPF_RET:
            continue;
        case BPF_JMP:
            if (BPF_OP(code) == BPF_JA) {
                flow_to(may, n, i + 1 + f[i].k, a);
                continue;
            }
            if (BPF_OP(code) == BPF_JEQ && BPF_SRC(code) == BPF_K)
                compared(c, a, f[i].k);
            flow_to(may, n, i + 1 + f[i].jt, a);
            flow_to(may, n, i + 1 + f[i].jf, a);
            continue;
        default: /* BPF_LDX, BPF_ST, BPF_STX: A unchanged */
            break;
        }
        flow_to(may, n, i + 1, a);
    }
}

int pm__seccomp_compared_nr(const pm__seccomp_compared *c, int nr)
{
    if (nr < 0)
        return 0;
    uint32_t k = (uint32_t)nr & ~X32_BIT;
    return k < PM__SECCOMP_NR_BITS && (c->nr[k / 8] >> (k % 8) & 1);
}

int pm__seccomp_compared_eq(const pm__seccomp_compared *c, unsigned arg, uint32_t val)
{
    size_t n = c->neq < PM__SECCOMP_EQ_MAX ? c->neq : PM__SECCOMP_EQ_MAX;
    for (size_t i = 0; i < n; i++)
        if (c->eq[i].arg == arg && c->eq[i].val == val)
            return 1;
    return 0;
}
