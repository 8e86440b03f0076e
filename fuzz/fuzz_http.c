/* SPDX-License-Identifier: MIT */
/* fuzz_http.c - libFuzzer harness for the health endpoint's HTTP request parser (pmd_http_parse). */
/*
 * The input is what a client sent, copied into a buffer of exactly its size
 * (a socket buffer is not NUL-terminated), at most PMD_HTTP_MAX bytes like
 * the connection's buffer. Oracle: the answer is one of the documented
 * statuses; 200 only for GET or HEAD of a known path, with the path inside
 * the buffer; 0 (incomplete) only without a blank line; 413 only for a full
 * buffer; and feeding the same bytes in two pieces gives the same answer
 * once all have arrived (the daemon parses what it has after every read).
 */
#define _GNU_SOURCE /* memmem */
#include "fuzz.h"
#include "health.h"

static int complete(const char *buf, size_t len)
{
    return memmem(buf, len, "\r\n\r\n", 4) != NULL || memmem(buf, len, "\n\n", 2) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > PMD_HTTP_MAX)
        size = PMD_HTTP_MAX;
    char *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);

    const char *path = NULL;
    size_t plen = 0;
    int head = -1;
    int code = pmd_http_parse(buf, size, &path, &plen, &head);
    switch (code) {
    case 0:
        FUZZ_ASSERT(!complete(buf, size) && size < PMD_HTTP_MAX);
        break;
    case 413:
        FUZZ_ASSERT(!complete(buf, size) && size >= PMD_HTTP_MAX);
        break;
    case 200:
        FUZZ_ASSERT(path != NULL && path >= buf && plen > 0 && path + plen <= buf + size);
        FUZZ_ASSERT(path[0] == '/');
        FUZZ_ASSERT(head == 1 ? memcmp(buf, "HEAD ", 5) == 0 : memcmp(buf, "GET ", 4) == 0);
        FUZZ_ASSERT((plen == 8 && memcmp(path, "/healthz", 8) == 0) ||
                    (plen == 7 && memcmp(path, "/readyz", 7) == 0) ||
                    (plen == 8 && memcmp(path, "/metrics", 8) == 0) ||
                    (plen == 7 && memcmp(path, "/status", 7) == 0));
        break;
    case 400:
    case 404:
    case 405:
        FUZZ_ASSERT(complete(buf, size));
        break;
    default:
        FUZZ_ASSERT(!"pmd_http_parse returned an undocumented status");
    }
    /* The daemon parses after every read: every prefix answers 0 until the
     * head is complete, so a split request never changes the answer. */
    if (size > 1) {
        size_t cut = (size_t)data[0] % size;
        const char *p2 = NULL;
        size_t l2 = 0;
        int h2 = 0;
        int early = pmd_http_parse(buf, cut, &p2, &l2, &h2);
        FUZZ_ASSERT(early == 0 || complete(buf, cut));
    }
    free(buf);
    return 0;
}
