/* SPDX-License-Identifier: MIT */
/*
 * address.c - the text form of a pm_address: "system@host:port#incarnation".
 *
 * Pure string handling, no system calls. Parsing is strict (no blanks, signs
 * or leading zeros) so that every accepted text has exactly one meaning and
 * format(parse(text)) == text.
 */
#include "internal.h"

#include "address.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

PM__READY_TEXT int pm__name_valid_n(const char *s, size_t n)
{
    if (n == 0 || n >= PM_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

PM__READY_TEXT int pm__name_valid(const char *s)
{
    /* strnlen stops at PM_NAME_MAX, which pm__name_valid_n refuses: a name
     * held in a full PM_NAME_MAX array without its NUL is never read past. */
    return s != NULL && pm__name_valid_n(s, strnlen(s, PM_NAME_MAX));
}

PM_EXTERN int pm_address_format(const pm_address *addr, char *buf, size_t size)
{
    if (addr == NULL || (buf == NULL && size > 0))
        return -EINVAL;
    if (!pm__name_valid(addr->system) || !pm__name_valid(addr->host))
        return -EINVAL;
    int n;
    if (addr->incarnation != 0)
        n = snprintf(buf, size, "%s@%s:%u#%llu", addr->system, addr->host, (unsigned)addr->port,
                     (unsigned long long)addr->incarnation);
    else
        n = snprintf(buf, size, "%s@%s:%u", addr->system, addr->host, (unsigned)addr->port);
    if (n < 0)
        return -EINVAL;
    if ((size_t)n >= size) {
        if (size > 0)
            buf[0] = '\0';
        return -ENOSPC;
    }
    return n;
}

/* Copies the name in [s, end) into out; -EINVAL unless it is a valid name. */
static int parse_name(const char *s, const char *end, char out[PM_NAME_MAX])
{
    size_t n = (size_t)(end - s);
    if (!pm__name_valid_n(s, n))
        return -EINVAL;
    memcpy(out, s, n);
    out[n] = '\0';
    return 0;
}

/* Parses the decimal in [s, end) into *out, at most max. No sign, no
 * leading zero (except "0" itself), no overflow. */
static int parse_decimal(const char *s, const char *end, uint64_t max, uint64_t *out)
{
    if (s == end || (end - s > 1 && s[0] == '0'))
        return -EINVAL;
    uint64_t v = 0;
    for (const char *p = s; p < end; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (max - d) / 10)
            return -EINVAL;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

PM_EXTERN int pm_address_parse(const char *text, pm_address *out)
{
    if (text == NULL || out == NULL)
        return -EINVAL;
    /* Bound the scan: anything longer than the longest valid form is bad,
     * and we never walk an unterminated buffer further than that. */
    size_t len = strnlen(text, PM_ADDRESS_STRLEN);
    if (len >= PM_ADDRESS_STRLEN)
        return -EINVAL;
    const char *end = text + len;
    const char *at = memchr(text, '@', len);
    if (at == NULL)
        return -EINVAL;
    const char *colon = memchr(at + 1, ':', (size_t)(end - at - 1));
    if (colon == NULL)
        return -EINVAL;
    const char *hash = memchr(colon + 1, '#', (size_t)(end - colon - 1));
    const char *port_end = hash != NULL ? hash : end;

    pm_address a;
    memset(&a, 0, sizeof(a));
    uint64_t port = 0, inc = 0;
    if (parse_name(text, at, a.system) < 0 || parse_name(at + 1, colon, a.host) < 0 ||
        parse_decimal(colon + 1, port_end, 65535, &port) < 0)
        return -EINVAL;
    if (hash != NULL) {
        /* "#0" is rejected: 0 means unspecified and is written by omitting
         * the suffix, so accepting it would give one address two texts. */
        if (parse_decimal(hash + 1, end, UINT64_MAX, &inc) < 0 || inc == 0)
            return -EINVAL;
    }
    a.port = (uint16_t)port;
    a.incarnation = inc;
    *out = a;
    return 0;
}

PM_EXTERN int pm_address_match(const pm_address *a, const pm_address *b)
{
    if (a == NULL || b == NULL)
        return 0;
    if (a->port != b->port || strncmp(a->system, b->system, PM_NAME_MAX) != 0 ||
        strncmp(a->host, b->host, PM_NAME_MAX) != 0)
        return 0;
    return a->incarnation == 0 || b->incarnation == 0 || a->incarnation == b->incarnation;
}

/* ------------------------------------------------------------------ nodes */

/* Copies at most PM_NAME_MAX - 1 bytes of name into to, which the caller
 * zeroed. A loop, not snprintf: a fork-mode child calls pm__node_address
 * on its way to ready, and each page of library code it runs that the
 * supervisor's fork did not map for it costs it a page fault (os/scrub.h). */
PM__READY_TEXT static void name_copy(char to[PM_NAME_MAX], const char *name)
{
    for (size_t i = 0; i < PM_NAME_MAX - 1 && name[i] != '\0'; i++)
        to[i] = name[i];
}

/* The one place where a node id (a slot, or main) and an address of one
 * supervisor's mesh are turned into each other: the hub, the queries, the
 * handshake and the worker side all come here. */
PM__READY_TEXT void pm__node_address(const pm__names *n, uint32_t node, uint64_t inc, pm_address *a)
{
    memset(a, 0, sizeof(*a));
    name_copy(a->system, n->system);
    if (node == PM__NODE_MAIN) {
        strcpy(a->host, "main");
        return;
    }
    name_copy(a->host, n->host);
    a->port = (uint16_t)((unsigned)n->base_port + node);
    a->incarnation = inc;
}

int pm__hosts_find(const pm__hosts *t, const char *name)
{
    /* Acquire: pairs with the release store that published the entries. */
    uint32_t count = atomic_load_explicit(&t->count, memory_order_acquire);
    if (count > PM__MAX_HOSTS)
        count = PM__MAX_HOSTS; /* a worker's copy is the hub's word, but stay in bounds */
    for (uint32_t i = 1; i < count; i++)
        if (strncmp(t->name[i], name, PM_NAME_MAX) == 0)
            return (int)i;
    return -1;
}

void pm__node_address_at(const pm__names *n, uint16_t host, uint32_t node, uint64_t inc,
                         pm_address *a)
{
    if (host == PM__HOST_LOCAL || n->hosts == NULL) {
        pm__node_address(n, node, inc, a);
        return;
    }
    memset(a, 0, sizeof(*a));
    name_copy(a->system, n->system);
    uint32_t count = atomic_load_explicit(&n->hosts->count, memory_order_acquire);
    if (host < count && host < PM__MAX_HOSTS)
        name_copy(a->host, n->hosts->name[host]);
    else
        strcpy(a->host, "unknown-host"); /* never delivered by a hub; stays a valid name */
    a->port = node == PM__NODE_MAIN || node > 65535 ? 0 : (uint16_t)node;
    a->incarnation = a->port == 0 ? 0 : inc;
}

int pm__address_route(const pm__names *n, const pm_address *to, uint16_t *host, uint32_t *node)
{
    if (to == NULL || strncmp(to->system, n->system, PM_NAME_MAX) != 0)
        return -ENOENT;
    if (strncmp(to->host, "main", PM_NAME_MAX) == 0 && to->port == 0) {
        *host = PM__HOST_LOCAL;
        *node = PM__NODE_MAIN;
        return 0;
    }
    if (strncmp(to->host, n->host, PM_NAME_MAX) == 0) {
        if (n->hosts != NULL && to->port == 0) {
            /* Peer mode: the supervisor is port 0 of its host. */
            *host = PM__HOST_LOCAL;
            *node = PM__NODE_MAIN;
            return 0;
        }
        if (to->port < n->base_port || (unsigned)(to->port - n->base_port) >= n->nslots)
            return -ENOENT;
        *host = PM__HOST_LOCAL;
        *node = (uint32_t)(to->port - n->base_port);
        return 0;
    }
    if (n->hosts == NULL)
        return -ENOENT;
    int idx = pm__hosts_find(n->hosts, to->host);
    if (idx < 0)
        return -EHOSTUNREACH;
    *host = (uint16_t)idx;
    *node = to->port; /* a remote node is its port; 0 its supervisor (frame.h) */
    return 0;
}

int pm__address_node(const pm__names *n, const pm_address *to, uint32_t *node)
{
    uint16_t host;
    uint32_t nd;
    int rc = pm__address_route(n, to, &host, &nd);
    if (rc < 0 || host != PM__HOST_LOCAL)
        return -ENOENT;
    *node = nd;
    return 0;
}
