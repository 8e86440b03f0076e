/* SPDX-License-Identifier: MIT */
/* fuzz_cgroup.c - libFuzzer harness for the cgroup texts procmesh reads: a cluster directory's name (pm__cg_cluster_dir_pid), /proc/self/cgroup (pm__cg_parse_self), /proc/self/mountinfo (pm__cg_parse_mounts), cgroup.events and memory.events. */
/*
 * The first byte chooses the parser, the rest is the text, NUL-terminated.
 * A directory's name comes from whoever can write the supervisor's own
 * cgroup (another supervisor, another tenant of a delegated tree); the
 * others are the kernel's, read whole into a fixed buffer. Oracle: nothing
 * is read or written out of bounds (the sanitizers), every path written is
 * NUL-terminated within its buffer, a name's pid is -1 or positive,
 * formatting that pid back with the namespace gives a name the parser
 * reads the same, and the name is not another namespace's.
 */
#include "fuzz.h"
#include "os/cgroup.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    char *text = malloc(size);
    if (text == NULL)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    switch (data[0] % 5) {
    case 0: {
        unsigned long long ns = 4026531836ULL;
        long pid = pm__cg_cluster_dir_pid(text, ns);
        FUZZ_ASSERT(pid == -1 || pid > 0);
        if (pid > 0) {
            char back[96];
            snprintf(back, sizeof(back), "procmesh.%ld.%llu", pid, ns);
            FUZZ_ASSERT(pm__cg_cluster_dir_pid(back, ns) == pid);
            FUZZ_ASSERT(pm__cg_cluster_dir_pid(text, ns + 1) == -1);
        }
        break;
    }
    case 1: {
        char v2[PM__CG_PATH], v1[PM__CG_NCTRL][PM__CG_PATH];
        if (pm__cg_parse_self(text, v2, sizeof(v2), v1) >= 0) {
            FUZZ_ASSERT(memchr(v2, '\0', sizeof(v2)) != NULL);
            for (int i = 0; i < PM__CG_NCTRL; i++)
                FUZZ_ASSERT(memchr(v1[i], '\0', sizeof(v1[i])) != NULL);
        }
        break;
    }
    case 2: {
        char v2mnt[PM__CG_PATH], v2root[PM__CG_PATH], v1mnt[PM__CG_NCTRL][PM__CG_PATH],
            v1root[PM__CG_NCTRL][PM__CG_PATH];
        pm__cg_parse_mounts(text, v2mnt, v2root, v1mnt, v1root);
        FUZZ_ASSERT(memchr(v2mnt, '\0', sizeof(v2mnt)) != NULL && memchr(v2root, '\0', sizeof(v2root)) != NULL);
        for (int i = 0; i < PM__CG_NCTRL; i++)
            FUZZ_ASSERT(memchr(v1mnt[i], '\0', PM__CG_PATH) != NULL && memchr(v1root[i], '\0', PM__CG_PATH) != NULL);
        break;
    }
    case 3: {
        int p = pm__cg_parse_populated(text);
        FUZZ_ASSERT(p == 0 || p == 1 || p < 0);
        break;
    }
    default: {
        long long n = pm__cg_parse_oom_kill(text);
        FUZZ_ASSERT(n >= -1);
        break;
    }
    }
    free(text);
    return 0;
}
