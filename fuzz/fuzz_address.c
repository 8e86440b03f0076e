/* SPDX-License-Identifier: MIT */
/* fuzz_address.c - libFuzzer harness for the address text parser (pm_address_parse). */
/*
 * The input is a text, given NUL-terminated; when it is at least
 * PM_ADDRESS_STRLEN bytes long it is also given unterminated, in a buffer of
 * exactly its size, which the parser promises never to read past. Oracle:
 * a parsed address formats back to the very same text (one text per
 * address), parses again to the same address and matches itself; a refused
 * text leaves the output untouched.
 */
#include <errno.h>

#include "fuzz.h"
#include "procmesh.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    pm_address a, untouched;
    memset(&a, 0x5a, sizeof(a));
    memcpy(&untouched, &a, sizeof(a));
    int rc = pm_address_parse(text, &a);
    if (rc < 0) {
        FUZZ_ASSERT(rc == -EINVAL);
        FUZZ_ASSERT(memcmp(&a, &untouched, sizeof(a)) == 0);
    } else {
        FUZZ_ASSERT(rc == 0);
        char back[PM_ADDRESS_STRLEN];
        int n = pm_address_format(&a, back, sizeof(back));
        FUZZ_ASSERT(n >= 0 && (size_t)n == strlen(text) && strcmp(back, text) == 0);
        pm_address b;
        FUZZ_ASSERT(pm_address_parse(back, &b) == 0);
        FUZZ_ASSERT(pm_address_match(&a, &b) && a.incarnation == b.incarnation);
        /* Too small a buffer: -ENOSPC and an empty string, never an overrun. */
        char small[8];
        if ((size_t)n >= sizeof(small))
            FUZZ_ASSERT(pm_address_format(&a, small, sizeof(small)) == -ENOSPC && small[0] == '\0');
    }
    if (size >= PM_ADDRESS_STRLEN) {
        char *raw = malloc(size);
        if (raw != NULL) {
            memcpy(raw, data, size);
            for (size_t i = 0; i < size; i++)
                raw[i] = raw[i] == '\0' ? 'x' : raw[i]; /* no terminator anywhere */
            FUZZ_ASSERT(pm_address_parse(raw, &a) == -EINVAL);
            free(raw);
        }
    }
    free(text);
    return 0;
}
