/* SPDX-License-Identifier: MIT */
/* fuzz_output.c - libFuzzer harness for the worker-output line splitter (pm__output_split, pm__output_flush). */
/*
 * A worker writes whatever it likes to its stdout/stderr pipe, and the
 * supervisor reads it in chunks of whatever size the pipe gives. The input's
 * first byte chooses the chunk size (1..256), the rest is the stream. Oracle:
 * every piece is at most PM_OUTPUT_LINE_MAX bytes, NUL-terminated, without
 * '\n'; only a full-size piece is marked truncated; and the pieces joined
 * are exactly the stream with its newlines removed (nothing lost, nothing
 * added), with one untruncated piece per newline plus the flushed rest.
 */
#include "fuzz.h"
#include "supervisor/output.h"

struct seen {
    char *out;
    size_t len, pieces_plain, cap;
};

static void emit(void *arg, const char *text, size_t len, int truncated)
{
    struct seen *s = arg;
    FUZZ_ASSERT(len <= PM_OUTPUT_LINE_MAX);
    FUZZ_ASSERT(text[len] == '\0');
    FUZZ_ASSERT(memchr(text, '\n', len) == NULL);
    FUZZ_ASSERT(!truncated || len == PM_OUTPUT_LINE_MAX);
    FUZZ_ASSERT(s->len + len <= s->cap);
    memcpy(s->out + s->len, text, len);
    s->len += len;
    s->pieces_plain += !truncated;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t chunk = (size_t)data[0] + 1;
    const char *in = (const char *)data + 1;
    size_t n = size - 1;
    pm__outstream st;
    memset(&st, 0, sizeof(st));
    st.fd = -1;
    st.buf = malloc(PM_OUTPUT_LINE_MAX + 1);
    struct seen s = {malloc(n + 1), 0, 0, n};
    if (st.buf == NULL || s.out == NULL)
        goto out;
    for (size_t at = 0; at < n; at += chunk)
        pm__output_split(&st, in + at, n - at < chunk ? n - at : chunk, emit, &s);
    size_t before_flush = s.pieces_plain;
    pm__output_flush(&st, emit, &s);
    size_t newlines = 0, k = 0;
    for (size_t i = 0; i < n; i++) {
        if (in[i] == '\n') {
            newlines++;
            continue;
        }
        FUZZ_ASSERT(k < s.len && s.out[k] == in[i]);
        k++;
    }
    FUZZ_ASSERT(k == s.len);
    FUZZ_ASSERT(before_flush == newlines);
    FUZZ_ASSERT(s.pieces_plain - before_flush <= 1);
out:
    free(st.buf);
    free(s.out);
    return 0;
}
