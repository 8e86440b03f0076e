/* error.c - error strings and the version string. */
#define _GNU_SOURCE
#include "internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define PM__STR2(x) #x
#define PM__STR(x) PM__STR2(x)

PM_EXTERN const char *pm_version_string(void)
{
    return PM__STR(PM_VERSION_MAJOR) "." PM__STR(PM_VERSION_MINOR) "." PM__STR(PM_VERSION_PATCH);
}

PM_EXTERN const char *pm_strerror(int err)
{
    if (err == 0)
        return "Success";
    if (err < 0)
        err = -err;
    /* strerrordesc_np (glibc >= 2.32) returns a static string and, unlike
     * strerror, never writes a shared buffer, so this is thread safe. */
    const char *s = strerrordesc_np(err);
    return s != NULL ? s : "Unknown error";
}

uint64_t pm__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
