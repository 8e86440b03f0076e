/* SPDX-License-Identifier: MIT */
/* core.h - --core-dir: where kernel.core_pattern sends a worker's core, said in words for the log. */
#ifndef PMD_CORE_H
#define PMD_CORE_H

#include <stddef.h>

enum pmd_core_where {
    PMD_CORE_IN_DIR = 0,   /* cores land in the directory */
    PMD_CORE_RELATIVE,     /* a relative pattern: in each worker's working directory */
    PMD_CORE_PIPE,         /* |program: handed to that program */
    PMD_CORE_ELSEWHERE,    /* an absolute path outside the directory */
    PMD_CORE_NONE          /* an empty pattern: no core file is written */
};

/*
 * Where the kernel writes a worker's core under pattern (the text of
 * /proc/sys/kernel/core_pattern; a trailing newline is ignored), against
 * dir (absolute, the --core-dir). cwd is the workers' working directory
 * (procmesh's own: it does not change theirs), or NULL when unknown; a
 * relative pattern that lands in dir from there counts as in it. Writes
 * the answer in words into why (naming the pattern, and the pattern to set
 * when it is not in dir). Returns enum pmd_core_where. Pure.
 */
int pmd_core_pattern_check(const char *pattern, const char *dir, const char *cwd, char *why,
                           size_t size);

#endif /* PMD_CORE_H */
