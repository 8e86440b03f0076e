/* SPDX-License-Identifier: MIT */
/*
 * inspect.h - a worker's report of what it holds, for the containment tests
 * (fork-mode bootstraps in check_containment and pm-test-worker's
 * `inspect`). One line per item:
 *
 *   slot S inc I
 *   fd N TARGET INODE     every open fd: readlink of /proc/self/fd/N and
 *                         the inode fstat gives (a memfd is told from another
 *                         slot's by it; every eventfd shares one anon inode)
 *   map LINE              every mapping of procmesh memory or io_uring
 *   end
 *
 * Written to out, fully buffered, so that a short report reaches a pipe in
 * one write and reports of workers sharing the pipe do not interleave.
 */
#ifndef PM_TEST_INSPECT_H
#define PM_TEST_INSPECT_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static inline void pm_test_inspect(FILE *out, unsigned slot, unsigned long long inc)
{
    static char buf[3500];
    setvbuf(out, buf, _IOFBF, sizeof(buf));
    fprintf(out, "slot %u inc %llu\n", slot, inc);
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
            continue;
        char path[300], target[300];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, target, sizeof(target) - 1);
        if (k < 0)
            continue;
        target[k] = '\0';
        /* No spaces in the target, so that a line splits in three. */
        for (char *p = target; *p != '\0'; p++)
            if (*p == ' ')
                *p = '_';
        struct stat st;
        unsigned long long ino = fstat(atoi(e->d_name), &st) == 0 ? (unsigned long long)st.st_ino : 0;
        fprintf(out, "fd %s %s %llu\n", e->d_name, target, ino);
    }
    if (d != NULL)
        closedir(d);
    FILE *m = fopen("/proc/self/maps", "r");
    char line[512];
    while (m != NULL && fgets(line, sizeof(line), m) != NULL)
        if (strstr(line, "memfd:procmesh") != NULL || strstr(line, "io_uring") != NULL)
            fprintf(out, "map %s", line);
    if (m != NULL)
        fclose(m);
    fprintf(out, "end\n");
    fflush(out);
}

#endif /* PM_TEST_INSPECT_H */
