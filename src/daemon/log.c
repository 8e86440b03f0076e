/* SPDX-License-Identifier: MIT */
/* log.c - the daemon's log lines: logfmt or JSON formatting, one write each. */
#define _GNU_SOURCE
#include "log.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const level_names[] = {"", "error", "warn", "info", "debug"};

static int log_format = PMD_LOG_TEXT, log_max_level = PMD_LOG_INFO;

enum { T_STRING, T_NUMBER, T_BOOL };

/* The JSON type of each field, by its key, so that a field's type never
 * depends on its value: a worker's output "42" is the string "42", and a
 * consumer (jq, JavaScript) that reads "slot" as a number always can. Keys
 * not listed are strings, incarnations among them: 63-bit numbers, which a
 * JavaScript number cannot hold exactly. */
static const struct {
    const char *key;
    int type;
} field_types[] = {
    {"slot", T_NUMBER},           {"pid", T_NUMBER},
    {"exit_code", T_NUMBER},      {"delay_ms", T_NUMBER},
    {"restarts", T_NUMBER},       {"lines", T_NUMBER},
    {"suppressed", T_NUMBER},     {"stall_ms", T_NUMBER},
    {"worker_protocol", T_NUMBER}, {"supervisor_protocol", T_NUMBER},
    {"secrets", T_NUMBER},        {"orphans_reaped", T_NUMBER},
    {"attempt", T_NUMBER},        {"failed_slots", T_NUMBER},
    {"core_dumped", T_BOOL},
    {"truncated", T_BOOL},        {"workers_killed", T_BOOL},
};

int pmd_log_field_type(const char *key)
{
    for (size_t i = 0; i < sizeof(field_types) / sizeof(field_types[0]); i++)
        if (strcmp(field_types[i].key, key) == 0)
            return field_types[i].type == T_NUMBER ? PMD_FIELD_NUMBER
                   : field_types[i].type == T_BOOL ? PMD_FIELD_BOOL
                                                   : PMD_FIELD_STRING;
    return PMD_FIELD_STRING;
}

/*
 * The line being built. Everything goes in as whole units (a key, an escape
 * sequence, one UTF-8 character) and only below limit, which keeps room for
 * the closing characters: a line that does not fit loses the end of a value
 * or whole fields, never its closing quote, brace or newline, so that it
 * stays one valid JSON object (or logfmt line).
 */
typedef struct out {
    char *buf;
    size_t len, limit;
    int cut; /* a unit did not fit: nothing more is added but closers */
} out;

static int unit(out *o, const char *s, size_t n)
{
    if (o->cut || o->len + n > o->limit) {
        o->cut = 1;
        return 0;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    return 1;
}

/* A closing character: the room for it was kept below limit. */
static void closer(out *o, char ch)
{
    o->buf[o->len++] = ch;
}

/* The length of the valid UTF-8 character at p (at most n bytes), or 0
 * when the bytes there are not one (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF). */
static size_t utf8_char(const unsigned char *p, size_t n)
{
    if (p[0] < 0x80)
        return 1;
    size_t len = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 ? 2 : 0;
    if (len == 0 || p[0] > 0xf4 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0) ||
        (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))
        return 0;
    return len;
}

/* U+2028 and U+2029 are valid in JSON but end a line in JavaScript source
 * and in some log viewers: escaped too. */
static int line_separator(const unsigned char *p, size_t len)
{
    return len == 3 && p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9);
}

/* v[0..n) as the inside of a JSON string: '"' and '\\' escaped, control
 * characters (NUL included) and DEL as \u00XX, each invalid UTF-8 byte as
 * U+FFFD. Stops at the limit on a character boundary. */
static void json_chars(out *o, const char *v, size_t n)
{
    const unsigned char *p = (const unsigned char *)v;
    for (size_t i = 0; i < n && !o->cut;) { /* to the cut */
        char esc[8];
        size_t len = utf8_char(p + i, n - i);
        if (len == 0) {
            unit(o, "\xef\xbf\xbd", 3);
            i++;
        } else if (p[i] == '"' || p[i] == '\\') {
            esc[0] = '\\';
            esc[1] = (char)p[i];
            unit(o, esc, 2);
            i++;
        } else if (p[i] < 0x20 || p[i] == 0x7f) {
            snprintf(esc, sizeof(esc), "\\u%04x", p[i]);
            unit(o, esc, 6);
            i++;
        } else if (line_separator(p + i, len)) {
            unit(o, p[i + 2] == 0xa8 ? "\\u2028" : "\\u2029", 6);
            i += len;
        } else {
            unit(o, v + i, len);
            i += len;
        }
    }
}

/* A quoted string; its closing quote always written once it was opened. */
static int json_string(out *o, const char *v, size_t n)
{
    if (!unit(o, "\"", 1))
        return 0;
    json_chars(o, v, n);
    closer(o, '"');
    return 1;
}

/* -?(0|[1-9][0-9]*): an integer as JSON writes it. */
static int json_integer(const char *v, size_t n)
{
    size_t i = n > 0 && v[0] == '-';
    if (i == n || (v[i] == '0' && n - i > 1))
        return 0;
    for (; i < n; i++)
        if (v[i] < '0' || v[i] > '9')
            return 0;
    return 1;
}

/* One JSON value of the key's type. A number field whose value is not an
 * integer would be a bug of the caller (every one formats them with %d or
 * %u; the daemon's tests check the types): it is written as the string it
 * is, not dropped. */
static int json_value(out *o, const char *key, const char *v, size_t n)
{
    int type = pmd_log_field_type(key);
    if (type == PMD_FIELD_BOOL) {
        int yes = (n == 4 && memcmp(v, "true", 4) == 0) || (n == 1 && v[0] == '1');
        return yes ? unit(o, "true", 4) : unit(o, "false", 5);
    }
    if (type == PMD_FIELD_NUMBER && json_integer(v, n))
        return unit(o, v, n);
    return json_string(o, v, n);
}

/* logfmt: bare when the value needs no quoting, else JSON's quoted form. */
static int logfmt_value(out *o, const char *v, size_t n)
{
    int quote = n == 0;
    for (size_t i = 0; i < n && !quote;) {
        const unsigned char *p = (const unsigned char *)v + i;
        size_t len = utf8_char(p, n - i);
        quote = len == 0 || *p <= ' ' || *p == '"' || *p == '=' || *p == 0x7f || line_separator(p, len);
        i += len;
    }
    if (!quote)
        return unit(o, v, n);
    return json_string(o, v, n);
}

/* Field i of the line: the three fixed ones, then kv. */
static void field(size_t i, const char *const fixed[6], const char *const *kv, const size_t *vlen,
                  const char **k, const char **v, size_t *n)
{
    *k = i < 3 ? fixed[2 * i] : kv[2 * (i - 3)];
    *v = i < 3 ? fixed[2 * i + 1] : kv[2 * (i - 3) + 1];
    if (*v == NULL)
        *v = "";
    *n = i >= 3 && vlen != NULL && vlen[i - 3] != (size_t)-1 ? vlen[i - 3] : strlen(*v);
}

/* One field with its separator. A field whose key, or whose value other
 * than a string, does not fit is taken out whole; a string value keeps
 * what fits. 1 while there is room for more. */
static int put_field(out *o, int json, int first, const char *k, const char *v, size_t n)
{
    size_t start = o->len;
    if (!first)
        unit(o, json ? "," : " ", 1);
    if (json) {
        json_string(o, k, strlen(k));
        unit(o, ":", 1);
    } else {
        unit(o, k, strlen(k));
        unit(o, "=", 1);
    }
    if (o->cut || !(json ? json_value(o, k, v, n) : logfmt_value(o, v, n))) {
        o->len = start;
        o->cut = 1;
    }
    return !o->cut;
}

size_t pmd_log_formatv(char *buf, size_t size, int format, const char *ts, const char *level,
                       const char *event, const char *const *kv, const size_t *vlen, size_t nkv)
{
    /* Room kept below the limit for the closers: a value's quote, the
     * brace, the newline, the terminating NUL. */
    enum { RESERVE = 4 };
    if (size < RESERVE + 2) {
        if (size > 0)
            buf[0] = '\0';
        return 0;
    }
    out o = {buf, 0, size - RESERVE, 0};
    const char *fixed[6] = {"ts", ts, "level", level, "event", event};
    int json = format == PMD_LOG_JSON;
    if (json)
        unit(&o, "{", 1);
    for (size_t i = 0; i < 3 + nkv; i++) {
        const char *k, *v;
        size_t n;
        field(i, fixed, kv, vlen, &k, &v, &n);
        if (!put_field(&o, json, i == 0, k, v, n))
            break;
    }
    if (json)
        closer(&o, '}');
    closer(&o, '\n');
    buf[o.len] = '\0';
    return o.len;
}

void pmd_log_setup(int format, int max_level)
{
    log_format = format;
    log_max_level = max_level;
}

int pmd_log_json(void)
{
    return log_format == PMD_LOG_JSON;
}

void pmd_logv(int level, const char *event, const char *const *kv, const size_t *vlen, size_t nkv)
{
    if (level > log_max_level || level < PMD_LOG_ERROR || level > PMD_LOG_DEBUG)
        return;
    struct timespec ts;
    struct tm tm;
    /* Room for a captured output line (PM_OUTPUT_LINE_MAX bytes, each up
     * to 6 once escaped) and its fields. */
    char tsbuf[40], line[6 * 4096 + 1024];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(tsbuf, sizeof(tsbuf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(tsbuf + n, sizeof(tsbuf) - n, ".%03ldZ", ts.tv_nsec / 1000000);
    size_t len = pmd_log_formatv(line, sizeof(line), log_format, tsbuf, level_names[level], event,
                                 kv, vlen, nkv);
    /* One write per line, so lines from concurrent writers never interleave. */
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

void pmd_log(int level, const char *event, const char *const *kv, size_t nkv)
{
    pmd_logv(level, event, kv, NULL, nkv);
}

const char *pmd_signal_name(int sig, char *buf, size_t size)
{
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev != NULL)
        snprintf(buf, size, "SIG%s", abbrev);
    else
        snprintf(buf, size, "%d", sig);
    return buf;
}
