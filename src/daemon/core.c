/* SPDX-License-Identifier: MIT */
/* core.c - --core-dir: where kernel.core_pattern sends a worker's core, said in words for the log. */
#include "core.h"

#include <stdio.h>
#include <string.h>

/* path lies below dir (both absolute; dir without a trailing slash but
 * for "/"). */
static int below(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    if (n == 1 && dir[0] == '/')
        return path[0] == '/';
    return strncmp(path, dir, n) == 0 && path[n] == '/';
}

int pmd_core_pattern_check(const char *pattern, const char *dir, const char *cwd, char *why,
                           size_t size)
{
    /* The kernel keeps at most 128 bytes (CORENAME_MAX_SIZE). */
    char pat[256], path[4352];
    size_t n = strcspn(pattern, "\n");
    if (n >= sizeof(pat))
        n = sizeof(pat) - 1;
    memcpy(pat, pattern, n);
    pat[n] = '\0';
    if (n == 0) {
        snprintf(why, size, "kernel.core_pattern is empty: the kernel writes no core file; set "
                 "kernel.core_pattern=%s/core.%%e.%%p.%%t", dir);
        return PMD_CORE_NONE;
    }
    if (pat[0] == '|') {
        /* The kernel pipes whatever RLIMIT_CORE says (but for 1); the
         * handlers (systemd-coredump, apport) honour the limit they get. */
        snprintf(why, size, "kernel.core_pattern '%s' pipes cores to a program, not into %s; set "
                 "kernel.core_pattern=%s/core.%%e.%%p.%%t to have them there", pat, dir, dir);
        return PMD_CORE_PIPE;
    }
    if (pat[0] == '/') {
        if (below(pat, dir)) {
            snprintf(why, size, "kernel.core_pattern '%s' writes cores into %s", pat, dir);
            return PMD_CORE_IN_DIR;
        }
        snprintf(why, size, "kernel.core_pattern '%s' writes cores outside %s; set "
                 "kernel.core_pattern=%s/core.%%e.%%p.%%t to have them there", pat, dir, dir);
        return PMD_CORE_ELSEWHERE;
    }
    /* Relative: the crashing process's working directory decides, which
     * procmesh leaves as it is (a worker's relative paths are its own). */
    if (cwd != NULL) {
        snprintf(path, sizeof(path), "%s/%s", strcmp(cwd, "/") == 0 ? "" : cwd, pat);
        if (below(path, dir)) {
            snprintf(why, size, "kernel.core_pattern '%s' is relative: cores land in the workers' "
                     "working directory %s, inside %s (unless a worker changes it)", pat, cwd, dir);
            return PMD_CORE_IN_DIR;
        }
    }
    snprintf(why, size, "kernel.core_pattern '%s' is relative: cores land in each worker's "
             "working directory (%s), not in %s, and procmesh does not change it; set "
             "kernel.core_pattern=%s/core.%%e.%%p.%%t", pat, cwd != NULL ? cwd : "unknown", dir, dir);
    return PMD_CORE_RELATIVE;
}
