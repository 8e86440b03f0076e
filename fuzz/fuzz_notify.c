/* SPDX-License-Identifier: MIT */
/* fuzz_notify.c - libFuzzer harness for the sd_notify datagram parser (pm__notify_parse). */
/*
 * The input is one datagram, copied into a buffer of exactly its size (a
 * worker's datagram is not NUL-terminated). Oracle: only the three known
 * flags come back, and a flag comes back exactly when its line ("READY=1",
 * "WATCHDOG=1", "STOPPING=1") is one of the newline-separated lines,
 * computed here the slow way.
 */
#include "fuzz.h"
#include "os/notify.h"

/* 1 when buf[0..len) holds line as one whole line. */
static int has_line(const char *buf, size_t len, const char *line)
{
    size_t n = strlen(line);
    for (size_t start = 0; start <= len;) {
        size_t end = start;
        while (end < len && buf[end] != '\n')
            end++;
        if (end - start == n && memcmp(buf + start, line, n) == 0)
            return 1;
        start = end + 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    unsigned flags = pm__notify_parse(buf, size);
    FUZZ_ASSERT((flags & ~(unsigned)(PM__NOTIFY_READY | PM__NOTIFY_WATCHDOG | PM__NOTIFY_STOPPING)) == 0);
    FUZZ_ASSERT(!!(flags & PM__NOTIFY_READY) == has_line(buf, size, "READY=1"));
    FUZZ_ASSERT(!!(flags & PM__NOTIFY_WATCHDOG) == has_line(buf, size, "WATCHDOG=1"));
    FUZZ_ASSERT(!!(flags & PM__NOTIFY_STOPPING) == has_line(buf, size, "STOPPING=1"));
    free(buf);
    return 0;
}
