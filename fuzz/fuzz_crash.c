/* SPDX-License-Identifier: MIT */
/* fuzz_crash.c - libFuzzer harness for the supervisor's crash-record decoder (pm__crash_decode). */
/*
 * A crash record is written by the worker into its control block, so the
 * supervisor's copy of it is hostile input. The first input byte is the
 * signal the process died of; the rest is the record (zero-padded or cut to
 * its size). Oracle: one of the three documented states; a RECORDED report
 * has counts in range, module indexes that name a module, and terminated,
 * printable strings (they reach logs and JSON).
 */
#include "fuzz.h"
#include "os/crash.h"

static int printable(const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    if (n == max)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    struct pm__crash_rec *rec = calloc(1, sizeof(*rec));
    if (rec == NULL)
        return 0;
    size_t n = size - 1 < sizeof(*rec) ? size - 1 : sizeof(*rec);
    memcpy(rec, data + 1, n);
    pm_crash_report out;
    memset(&out, 0xa5, sizeof(out));
    int st = pm__crash_decode(rec, data[0] % 65, &out);
    FUZZ_ASSERT(st == PM_CRASH_RECORDED || st == PM_CRASH_UNRECORDED || st == PM_CRASH_INVALID);
    if (st == PM_CRASH_RECORDED) {
        FUZZ_ASSERT(out.nframes <= PM_CRASH_FRAMES);
        FUZZ_ASSERT(out.nmodules <= PM_CRASH_MODULES);
        FUZZ_ASSERT(out.pc_module >= -1 && out.pc_module < (int)out.nmodules);
        for (unsigned i = 0; i < out.nframes; i++)
            FUZZ_ASSERT(out.frames[i].module >= -1 && out.frames[i].module < (int)out.nmodules);
        for (unsigned i = 0; i < out.nmodules; i++)
            FUZZ_ASSERT(printable(out.modules[i], PM_CRASH_PATH_MAX));
        FUZZ_ASSERT(printable(out.code_name, sizeof(out.code_name)));
    }
    free(rec);
    return 0;
}
