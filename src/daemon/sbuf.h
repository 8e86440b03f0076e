/* SPDX-License-Identifier: MIT */
/*
 * sbuf.h - a bounded string builder for the response bodies (/metrics,
 * /status): appends never overflow, a full buffer truncates and stays
 * NUL-terminated.
 */
#ifndef PMD_SBUF_H
#define PMD_SBUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

typedef struct pmd_sbuf {
    char *p;
    size_t size, len;
} pmd_sbuf;

static inline void pmd_sb_printf(pmd_sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void pmd_sb_printf(pmd_sbuf *b, const char *fmt, ...)
{
    if (b->len + 1 >= b->size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->size - b->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        b->len = b->len + (size_t)n < b->size ? b->len + (size_t)n : b->size - 1;
}

#endif /* PMD_SBUF_H */
