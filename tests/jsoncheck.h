/* SPDX-License-Identifier: MIT */
/*
 * jsoncheck.h - a strict JSON validator for the tests (RFC 8259 as written:
 * UTF-8 checked, no raw control character in a string, only the defined
 * escapes, a surrogate escape only in a valid pair, numbers by the
 * grammar, nothing after the value, no duplicate key in an object), with
 * the type of each top-level field of an object, so that a test can check
 * that a key always has the same type. Header-only: static functions.
 */
#ifndef PM_TEST_JSONCHECK_H
#define PM_TEST_JSONCHECK_H

#include <stdio.h>
#include <string.h>

/* The JSON type of a value. */
enum { PM_JSON_STRING = 's', PM_JSON_NUMBER = 'n', PM_JSON_BOOL = 'b', PM_JSON_NULL = 'z',
       PM_JSON_OBJECT = 'o', PM_JSON_ARRAY = 'a' };

typedef struct pm_json_field {
    char key[64];   /* the key (keys longer than 63 bytes are cut) */
    int type;       /* PM_JSON_* */
    char str[256];  /* a string value, decoded (cut at 255 bytes; \u0000 kept as a byte) */
    size_t str_len;
} pm_json_field;

typedef struct pm_json {
    const unsigned char *p, *end;
    int depth;
    const char *why;
    pm_json_field *fields; /* top-level fields of the object, or NULL */
    size_t cap, n;
} pm_json;

static int pm_json_value(pm_json *j, int *type, pm_json_field *into);

static int pm_json_fail(pm_json *j, const char *why)
{
    if (j->why == NULL)
        j->why = why;
    return -1;
}

static void pm_json_ws(pm_json *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int pm_json_hex4(pm_json *j, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++, j->p++) {
        if (j->p >= j->end)
            return pm_json_fail(j, "short \\u escape");
        unsigned c = *j->p;
        unsigned d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                   : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 16;
        if (d == 16)
            return pm_json_fail(j, "bad hex digit in \\u escape");
        *v = *v * 16 + d;
    }
    return 0;
}

/* One UTF-8 character (RFC 3629) at j->p; its length, or -1. */
static int pm_json_utf8(pm_json *j)
{
    const unsigned char *p = j->p;
    size_t left = (size_t)(j->end - p);
    int len = p[0] < 0x80 ? 1 : p[0] >= 0xf5 ? 0 : p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 ? 2 : 0;
    if (len == 0 || (size_t)len > left)
        return pm_json_fail(j, "invalid UTF-8");
    for (int i = 1; i < len; i++)
        if ((p[i] & 0xc0) != 0x80)
            return pm_json_fail(j, "invalid UTF-8");
    if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0) ||
        (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))
        return pm_json_fail(j, "invalid UTF-8 (overlong, surrogate or too large)");
    return len;
}

static void pm_json_keep(pm_json_field *f, const unsigned char *s, size_t n)
{
    if (f == NULL)
        return;
    for (size_t i = 0; i < n && f->str_len + 1 < sizeof(f->str); i++)
        f->str[f->str_len++] = (char)s[i];
    f->str[f->str_len] = '\0';
}

/* A string at j->p (its opening quote); decoded into f when not NULL. */
static int pm_json_string(pm_json *j, pm_json_field *f)
{
    if (f != NULL) {
        f->str_len = 0;
        f->str[0] = '\0';
    }
    j->p++;
    for (;;) {
        if (j->p >= j->end)
            return pm_json_fail(j, "unterminated string");
        unsigned char c = *j->p;
        if (c == '"') {
            j->p++;
            return 0;
        }
        if (c < 0x20)
            return pm_json_fail(j, "raw control character in a string");
        if (c != '\\') {
            int len = pm_json_utf8(j);
            if (len < 0)
                return -1;
            pm_json_keep(f, j->p, (size_t)len);
            j->p += len;
            continue;
        }
        if (++j->p >= j->end)
            return pm_json_fail(j, "unterminated escape");
        c = *j->p;
        const char *simple = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *at = c != '\0' ? strchr(simple, c) : NULL;
        if (at != NULL) {
            pm_json_keep(f, (const unsigned char *)&to[at - simple], 1);
            j->p++;
            continue;
        }
        if (c != 'u')
            return pm_json_fail(j, "unknown escape");
        j->p++;
        unsigned v;
        if (pm_json_hex4(j, &v) < 0)
            return -1;
        if (v >= 0xdc00 && v <= 0xdfff)
            return pm_json_fail(j, "lone low surrogate escape");
        if (v >= 0xd800 && v <= 0xdbff) {
            unsigned lo;
            if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
                return pm_json_fail(j, "high surrogate escape without its pair");
            j->p += 2;
            if (pm_json_hex4(j, &lo) < 0)
                return -1;
            if (lo < 0xdc00 || lo > 0xdfff)
                return pm_json_fail(j, "high surrogate escape without its pair");
            v = 0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00);
        }
        unsigned char u[4];
        size_t n = v < 0x80 ? 1 : v < 0x800 ? 2 : v < 0x10000 ? 3 : 4;
        if (n == 1)
            u[0] = (unsigned char)v;
        else if (n == 2)
            u[0] = (unsigned char)(0xc0 | v >> 6), u[1] = (unsigned char)(0x80 | (v & 0x3f));
        else if (n == 3)
            u[0] = (unsigned char)(0xe0 | v >> 12), u[1] = (unsigned char)(0x80 | ((v >> 6) & 0x3f)),
            u[2] = (unsigned char)(0x80 | (v & 0x3f));
        else
            u[0] = (unsigned char)(0xf0 | v >> 18), u[1] = (unsigned char)(0x80 | ((v >> 12) & 0x3f)),
            u[2] = (unsigned char)(0x80 | ((v >> 6) & 0x3f)), u[3] = (unsigned char)(0x80 | (v & 0x3f));
        pm_json_keep(f, u, n);
    }
}

static int pm_json_digits(pm_json *j)
{
    const unsigned char *start = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
        j->p++;
    return j->p > start ? 0 : pm_json_fail(j, "number without digits");
}

static int pm_json_number(pm_json *j)
{
    if (*j->p == '-')
        j->p++;
    if (j->p < j->end && *j->p == '0')
        j->p++;
    else if (pm_json_digits(j) < 0)
        return -1;
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (pm_json_digits(j) < 0)
            return -1;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (pm_json_digits(j) < 0)
            return -1;
    }
    return 0;
}

static int pm_json_word(pm_json *j, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0)
        return pm_json_fail(j, "unknown literal");
    j->p += n;
    return 0;
}

/* An object; top: record its fields in j->fields. */
static int pm_json_object_body(pm_json *j, int top)
{
    j->p++;
    pm_json_ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
        return 0;
    }
    for (;;) {
        pm_json_ws(j);
        if (j->p >= j->end || *j->p != '"')
            return pm_json_fail(j, "expected a key");
        pm_json_field key;
        if (pm_json_string(j, &key) < 0)
            return -1;
        pm_json_ws(j);
        if (j->p >= j->end || *j->p != ':')
            return pm_json_fail(j, "expected ':'");
        j->p++;
        pm_json_ws(j);
        pm_json_field *f = NULL;
        if (top && j->fields != NULL) {
            for (size_t i = 0; i < j->n; i++)
                if (strcmp(j->fields[i].key, key.str) == 0)
                    return pm_json_fail(j, "duplicate key");
            if (j->n < j->cap) {
                f = &j->fields[j->n++];
                memset(f, 0, sizeof(*f));
                snprintf(f->key, sizeof(f->key), "%.63s", key.str);
            }
        }
        int type;
        if (pm_json_value(j, &type, f) < 0)
            return -1;
        if (f != NULL)
            f->type = type;
        pm_json_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == '}') {
            j->p++;
            return 0;
        }
        return pm_json_fail(j, "expected ',' or '}'");
    }
}

static int pm_json_array(pm_json *j)
{
    j->p++;
    pm_json_ws(j);
    if (j->p < j->end && *j->p == ']') {
        j->p++;
        return 0;
    }
    for (;;) {
        pm_json_ws(j);
        int type;
        if (pm_json_value(j, &type, NULL) < 0)
            return -1;
        pm_json_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == ']') {
            j->p++;
            return 0;
        }
        return pm_json_fail(j, "expected ',' or ']'");
    }
}

static int pm_json_value(pm_json *j, int *type, pm_json_field *into)
{
    if (j->p >= j->end)
        return pm_json_fail(j, "expected a value");
    if (++j->depth > 64)
        return pm_json_fail(j, "nested too deep");
    int rc;
    unsigned char c = *j->p;
    if (c == '{') {
        *type = PM_JSON_OBJECT;
        rc = pm_json_object_body(j, 0);
    } else if (c == '[') {
        *type = PM_JSON_ARRAY;
        rc = pm_json_array(j);
    } else if (c == '"') {
        *type = PM_JSON_STRING;
        rc = pm_json_string(j, into);
    } else if (c == 't' || c == 'f') {
        *type = PM_JSON_BOOL;
        rc = pm_json_word(j, c == 't' ? "true" : "false");
    } else if (c == 'n') {
        *type = PM_JSON_NULL;
        rc = pm_json_word(j, "null");
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        *type = PM_JSON_NUMBER;
        rc = pm_json_number(j);
    } else {
        rc = pm_json_fail(j, "unexpected character");
    }
    j->depth--;
    return rc;
}

/*
 * Checks that s[0..len) is exactly one JSON object (whitespace around it
 * allowed) and records up to cap of its top-level fields in fields (*nf of
 * them). Returns 0, or -1 with *why saying what was wrong and *at where.
 */
static int pm_json_check_object(const char *s, size_t len, pm_json_field *fields, size_t cap,
                                size_t *nf, const char **why, size_t *at)
{
    pm_json j = {(const unsigned char *)s, (const unsigned char *)s + len, 0, NULL, fields, cap, 0};
    pm_json_ws(&j);
    int rc = j.p < j.end && *j.p == '{' ? pm_json_object_body(&j, 1) : pm_json_fail(&j, "not an object");
    if (rc == 0) {
        pm_json_ws(&j);
        if (j.p != j.end)
            rc = pm_json_fail(&j, "data after the object");
    }
    if (nf != NULL)
        *nf = j.n;
    if (why != NULL)
        *why = j.why;
    if (at != NULL)
        *at = (size_t)(j.p - (const unsigned char *)s);
    return rc;
}

/* A whole document (any value): 0 or -1. */
static int pm_json_check(const char *s, size_t len, const char **why)
{
    pm_json j = {(const unsigned char *)s, (const unsigned char *)s + len, 0, NULL, NULL, 0, 0};
    int type;
    pm_json_ws(&j);
    int rc = pm_json_value(&j, &type, NULL);
    pm_json_ws(&j);
    if (rc == 0 && j.p != j.end)
        rc = pm_json_fail(&j, "data after the value");
    if (why != NULL)
        *why = j.why;
    return rc;
}

#endif /* PM_TEST_JSONCHECK_H */
