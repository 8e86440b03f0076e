/* SPDX-License-Identifier: MIT */
/* dconf_value.h - what dconf.c (the option table) and dconf_value.c (the value parsers) share; besides them only check_daemon includes it (pmd_dconf_lookup_errno). */
#ifndef PMD_DCONF_VALUE_H
#define PMD_DCONF_VALUE_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dconf_types.h"

/* Where a value came from, for the error message. */
typedef struct src {
    const char *flag;  /* "--workers" */
    const char *var;   /* "PROCMESH_WORKERS" or NULL when from the flag */
} src;

/* The error message, formatted into err; returns -EINVAL. Static: the two
 * files that include this header each have their own copy. */
static inline int fail(char *err, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static inline int fail(char *err, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* "--flag", or "--flag (from VAR)" for a variable's value, in buf. */
static inline const char *who(const src *s, char *buf, size_t size)
{
    if (s->var != NULL)
        snprintf(buf, size, "%s (from %s)", s->flag, s->var);
    else
        snprintf(buf, size, "%s", s->flag);
    return buf;
}

/* The value parsers: 0, or a negative errno with err naming the option
 * (who), the value and what it should have been. Where the library has a
 * setter for the value, the setter judges it (each bound lives once, in
 * the library) and the error names the bounds from the constants the
 * setter reads; the parser checks only the spelling. */
int pmd_dconf_int_value(const src *s, const char *v, long min, long max, int *out, char *err,
                        size_t size);
int pmd_dconf_name_value(const src *s, const char *v, char out[PM_NAME_MAX], char *err, size_t size);
int pmd_dconf_choice(const src *s, const char *v, const char *const *names, const int *values,
                     const char *allowed, int *out, char *err, size_t size);
/* HOST:PORT, with [v6]:PORT. */
int pmd_dconf_host_port(const src *s, const char *v, char *host, size_t hostsize, unsigned *port,
                        char *err, size_t size);
/* [NAME=]tcp:HOST:PORT | [NAME=]unix:PATH */
int pmd_dconf_listen_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size);
/* What a lookup in the user or group database that found nothing means,
 * from the errno it left (pure): -ENOENT when there is no such entry
 * (glibc's backends say 0, ENOENT, ESRCH, EBADF or EPERM for that), else
 * -e, the lookup's own error (no memory, an unreadable database), which
 * must not pass for "no user". */
int pmd_dconf_lookup_errno(int e);
/* TEXT or @FILE into c->init_data, which holds none yet. */
int pmd_dconf_init_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size);
/* SIZE: bytes, or with a K, M, G, T suffix (powers of 1024); "max" = none. */
int pmd_dconf_size_value(const src *s, const char *v, uint64_t *out, char *err, size_t size);
/* QUOTA[/PERIOD] in microseconds (period 100000 by default), or max. */
int pmd_dconf_cpu_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size);
/* NAME=VALUE: VALUE is N, SOFT:HARD, or unlimited for either. */
int pmd_dconf_rlimit_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size);
/* USER[:GROUP]; without GROUP, the user's primary group (or, for a number
 * with no account, the same number). */
int pmd_dconf_user_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size);
/* FIRST:COUNT */
int pmd_dconf_uid_range_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size);
/* SIZE with an optional K, M or G suffix (powers of 1024). */
int pmd_dconf_msg_size_value(const src *s, const char *v, size_t *out, char *err, size_t size);
/* HOST:PORT as the library takes it (its check is not exported from the
 * shared library: its setter applies it). */
int pmd_dconf_peer_addr(const src *s, const char *v, char out[PMD_PEER_ADDR_MAX], char *err, size_t size);
/* --peers HOST:PORT[,HOST:PORT...] */
int pmd_dconf_peers_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size);
int pmd_dconf_path_value(const src *s, const char *v, char **out, char *err, size_t size);

#endif /* PMD_DCONF_VALUE_H */
