/* SPDX-License-Identifier: MIT */
/* log.c - the daemon's log lines: logfmt or JSON formatting, one write each. */
#define _GNU_SOURCE
#include "log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const level_names[] = {"", "error", "warn", "info", "debug"};

static int log_format = PMD_LOG_TEXT, log_max_level = PMD_LOG_INFO;

typedef struct out {
    char *buf;
    size_t size, len;
} out;

static void put(out *o, const char *s, size_t n)
{
    for (size_t i = 0; i < n && o->len + 1 < o->size; i++)
        o->buf[o->len++] = s[i];
    o->buf[o->len] = '\0';
}

static void puts_(out *o, const char *s)
{
    put(o, s, strlen(s));
}

static int numeric(const char *v)
{
    const char *p = v + (v[0] == '-');
    if (*p == '\0' || (p[0] == '0' && p[1] != '\0'))
        return 0;
    for (; *p; p++)
        if (*p < '0' || *p > '9')
            return 0;
    return 1;
}

static void json_string(out *o, const char *v)
{
    puts_(o, "\"");
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            put(o, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", *p);
            puts_(o, esc);
        } else {
            put(o, (const char *)p, 1);
        }
    }
    puts_(o, "\"");
}

static void logfmt_value(out *o, const char *v)
{
    int quote = *v == '\0';
    for (const char *p = v; *p && !quote; p++)
        quote = *p == ' ' || *p == '"' || *p == '=' || (unsigned char)*p < 0x20;
    if (!quote) {
        puts_(o, v);
        return;
    }
    json_string(o, v); /* the same escaping rules serve logfmt's quoted form */
}

size_t pmd_log_format(char *buf, size_t size, int format, const char *ts, const char *level,
                      const char *event, const char *const *kv, size_t nkv)
{
    out o = {buf, size, 0};
    if (size == 0)
        return 0;
    buf[0] = '\0';
    const char *fixed[6] = {"ts", ts, "level", level, "event", event};
    if (format == PMD_LOG_JSON) {
        puts_(&o, "{");
        for (size_t i = 0; i < 3 + nkv; i++) {
            const char *k = i < 3 ? fixed[2 * i] : kv[2 * (i - 3)];
            const char *v = i < 3 ? fixed[2 * i + 1] : kv[2 * (i - 3) + 1];
            if (i > 0)
                puts_(&o, ",");
            json_string(&o, k);
            puts_(&o, ":");
            if (i >= 3 && numeric(v))
                puts_(&o, v);
            else
                json_string(&o, v);
        }
        puts_(&o, "}\n");
    } else {
        for (size_t i = 0; i < 3 + nkv; i++) {
            const char *k = i < 3 ? fixed[2 * i] : kv[2 * (i - 3)];
            const char *v = i < 3 ? fixed[2 * i + 1] : kv[2 * (i - 3) + 1];
            if (i > 0)
                puts_(&o, " ");
            puts_(&o, k);
            puts_(&o, "=");
            logfmt_value(&o, v);
        }
        puts_(&o, "\n");
    }
    /* Keep the newline even when truncated. */
    if (o.len > 0 && buf[o.len - 1] != '\n')
        buf[o.len - 1] = '\n';
    return o.len;
}

void pmd_log_setup(int format, int max_level)
{
    log_format = format;
    log_max_level = max_level;
}

void pmd_log(int level, const char *event, const char *const *kv, size_t nkv)
{
    if (level > log_max_level || level < PMD_LOG_ERROR || level > PMD_LOG_DEBUG)
        return;
    struct timespec ts;
    struct tm tm;
    char tsbuf[40], line[2048];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(tsbuf, sizeof(tsbuf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(tsbuf + n, sizeof(tsbuf) - n, ".%03ldZ", ts.tv_nsec / 1000000);
    size_t len =
        pmd_log_format(line, sizeof(line), log_format, tsbuf, level_names[level], event, kv, nkv);
    /* One write per line, so lines from concurrent writers never interleave. */
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
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
