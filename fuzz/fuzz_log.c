/* SPDX-License-Identifier: MIT */
/* fuzz_log.c - libFuzzer harness for the daemon's log formatter (pmd_log_formatv) on a worker's bytes. */
/*
 * A worker's output line is logged as the value of "text", with its length
 * (it may hold NUL), exactly as events.c does. The input's first byte picks
 * the key (text, a number key, a bool key), the rest is the value, copied
 * into a buffer of exactly its size (a line is not NUL-terminated for the
 * formatter: reading past it is a finding). Oracle, for each format and
 * for the whole buffer, the exact size of the line plus one, one byte less,
 * half of it and the smallest line: the length is below the size and is
 * the string's; JSON is one strict object of the four fields (or the first
 * of them that fit, in order) with its newline; logfmt is one line, no NUL,
 * no newline but the last, and a value written bare is the input itself;
 * a size of the whole line plus three cuts nothing (the formatter keeps 4
 * bytes for its closers, a value's quote among them, which a line ending
 * in a bare value, a number or logfmt's bare text, does not use).
 */
#include "fuzz.h"
#include "log.h"
#include "../tests/jsoncheck.h"

static const char *const keys[] = {"text", "slot", "core_dumped"};

static size_t format(char *buf, size_t size, int fmt, const char *key, const char *v, size_t n)
{
    const char *kv[] = {key, v};
    size_t vlen[] = {n};
    size_t len = pmd_log_formatv(buf, size, fmt, "T", "info", "output", kv, vlen, 1);
    FUZZ_ASSERT(size == 0 ? len == 0 : len < size);
    if (size > 0)
        FUZZ_ASSERT(buf[len] == '\0' && strlen(buf) == len);
    return len;
}

static void check_json(const char *buf, size_t len)
{
    if (len == 0)
        return;
    FUZZ_ASSERT(buf[len - 1] == '\n');
    pm_json_field f[8];
    size_t nf = 0, at = 0;
    const char *why = NULL;
    FUZZ_ASSERT(pm_json_check(buf, len - 1, &why) == 0); /* one document */
    FUZZ_ASSERT(pm_json_check_object(buf, len - 1, f, 8, &nf, &why, &at) == 0);
    static const char *const order[] = {"ts", "level", "event"};
    for (size_t i = 0; i < nf && i < 3; i++)
        FUZZ_ASSERT(strcmp(f[i].key, order[i]) == 0);
    FUZZ_ASSERT(nf <= 4);
}

static void check_logfmt(const char *buf, size_t len, const char *key, const char *v, size_t n)
{
    if (len == 0)
        return;
    FUZZ_ASSERT(buf[len - 1] == '\n');
    FUZZ_ASSERT(memchr(buf, '\n', len - 1) == NULL);
    char want[16];
    int wl = snprintf(want, sizeof(want), " %s=", key);
    const char *at = strstr(buf, want);
    if (at == NULL || at[wl] == '"')
        return; /* cut before it, or quoted */
    /* Bare: the value itself, whole, then the newline. */
    FUZZ_ASSERT((size_t)(buf + len - 1 - (at + wl)) == n);
    FUZZ_ASSERT(memcmp(at + wl, v, n) == 0);
    for (size_t i = 0; i < n; i++)
        FUZZ_ASSERT((unsigned char)v[i] > ' ' && v[i] != '"' && v[i] != '=' && v[i] != 0x7f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *key = keys[data[0] % 3];
    size_t n = size - 1 > 4096 ? 4096 : size - 1; /* PM_OUTPUT_LINE_MAX */
    char *v = malloc(n ? n : 1);
    /* Room for each byte escaped (at most 6) and the fixed fields. */
    size_t cap = 6 * n + 256;
    char *whole = malloc(cap), *cut = malloc(cap);
    if (v == NULL || whole == NULL || cut == NULL)
        goto out;
    memcpy(v, data + 1, n);
    for (int fmt = PMD_LOG_TEXT; fmt <= PMD_LOG_JSON; fmt++) {
        size_t len = format(whole, cap, fmt, key, v, n);
        if (fmt == PMD_LOG_JSON)
            check_json(whole, len);
        else
            check_logfmt(whole, len, key, v, n);
        size_t sizes[] = {len + 3, len + 1, len, len / 2, 6, 5, 0};
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            size_t k = format(cut, sizes[i], fmt, key, v, n);
            if (sizes[i] == len + 3)
                FUZZ_ASSERT(k == len && memcmp(cut, whole, len) == 0);
            if (fmt == PMD_LOG_JSON)
                check_json(cut, k);
            else if (k > 0) {
                FUZZ_ASSERT(cut[k - 1] == '\n');
                FUZZ_ASSERT(memchr(cut, '\n', k - 1) == NULL);
            }
        }
    }
out:
    free(v);
    free(whole);
    free(cut);
    return 0;
}
