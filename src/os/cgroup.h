/* SPDX-License-Identifier: MIT */
/* cgroup.h - each slot's cgroup: discovery, creation, attach, kill, wait-empty, limits, OOM count. */
#ifndef PM_CGROUP_H
#define PM_CGROUP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PM__CG_PATH 512

/* The v1 controllers procmesh can use for limits when the v2 tree lacks
 * them (hybrid hosts). */
enum { PM__CG_MEMORY, PM__CG_PIDS, PM__CG_CPU, PM__CG_NCTRL };

/* Per-slot limits (pm_options); 0 means none for each. */
typedef struct pm__cg_limits {
    uint64_t memory_max;    /* bytes */
    int pids_max;
    uint64_t cpu_quota_us;  /* with cpu_period_us: at most quota per period */
    uint64_t cpu_period_us;
} pm__cg_limits;

/* The cluster's place in the cgroup trees. mode is PM_CONTAIN_CGROUP when
 * v2 is non-empty, else PM_CONTAIN_PROCESS_GROUP. */
typedef struct pm__cg_root {
    int mode;
    char v2[PM__CG_PATH];                 /* <own v2 cgroup>/procmesh.<pid>.<pidns>, or "" */
    char v1[PM__CG_NCTRL][PM__CG_PATH];   /* <v1 mount><own>/procmesh.<pid>.<pidns> per controller used, or "" */
    int has_kill;                         /* cgroup.kill exists (Linux 5.14) */
    int v2_ctrl[PM__CG_NCTRL];            /* the limit is written in the v2 tree */
    char why[256];                        /* the mode in words (logged at start, /status) */
} pm__cg_root;

/* One slot's cgroup, reused by its incarnations (emptied between them). */
typedef struct pm__cg_slot {
    int dir_fd;                  /* the v2 directory: clone3(CLONE_INTO_CGROUP) */
    int procs_fd;                /* its cgroup.procs, written by the child when clone3 cannot */
    int events_fd;               /* cgroup.events: populated 0/1, pollable */
    int kill_fd;                 /* cgroup.kill, or -1 */
    int v1_procs[PM__CG_NCTRL];  /* v1 controllers' cgroup.procs, or -1 */
    char oom_file[PM__CG_PATH];  /* memory.events (v2) or memory.oom_control (v1), or "" */
    long long oom_base;          /* oom_kill count when the incarnation started, -1 unknown */
    int killed;                  /* cgroup.kill was written: no clone3 into it (spawn.c) */
    unsigned index;
} pm__cg_slot;

/* ---- pure parsers (no system calls; tested against text) ---- */

/* From /proc/self/cgroup: the v2 path ("0::/a/b") and the v1 path of each
 * controller in PM__CG_* order ("" when absent). 0 or -EINVAL. */
int pm__cg_parse_self(const char *text, char *v2, size_t size, char v1[PM__CG_NCTRL][PM__CG_PATH]);
/* From /proc/self/mountinfo: where the cgroup2 tree and each v1 controller
 * are mounted, and the cgroup path each mount shows as its root ("/" unless
 * bind-mounted or in a cgroup namespace). "" when not mounted. */
void pm__cg_parse_mounts(const char *text, char *v2mnt, char *v2root,
                         char v1mnt[PM__CG_NCTRL][PM__CG_PATH],
                         char v1root[PM__CG_NCTRL][PM__CG_PATH]);
/* The directory of cgroup path rel in a tree mounted at mnt showing root:
 * 0, or -ENOENT when rel is not below root (outside what we can see). */
int pm__cg_join(char *out, size_t size, const char *mnt, const char *root, const char *rel);
/* "populated N" of cgroup.events: 0 or 1, -EINVAL when missing. */
int pm__cg_parse_populated(const char *text);
/* "oom_kill N" of v2 memory.events or v1 memory.oom_control; -1 when missing. */
long long pm__cg_parse_oom_kill(const char *text);
/* 1 when the space-separated list (cgroup.controllers) names ctrl. */
int pm__cg_has_word(const char *list, const char *ctrl);

/* ---- I/O ---- */

/* Finds a writable place for the cluster's cgroups and creates
 * procmesh.<pid> there (never writing outside it but for enabling the
 * controllers the limits need in its parent's subtree_control). proc_cgroup
 * and mountinfo are the texts of /proc/self/cgroup and /proc/self/mountinfo
 * (read by the caller, so a test can point them at a scratch tree). With no
 * usable v2 tree: mode process group, 0, unless a limit is asked for:
 * -EOPNOTSUPP with why filled. */
int pm__cg_root_setup(pm__cg_root *r, const char *proc_cgroup, const char *mountinfo,
                      const pm__cg_limits *lim);
/* pm__cg_root_setup on this process's own files. */
int pm__cg_root_setup_self(pm__cg_root *r, const pm__cg_limits *lim);
/* Removes procmesh.<pid> (its slots must be closed). errno kept. */
void pm__cg_root_close(pm__cg_root *r);

/* Creates slot index's cgroup with the limits, ahead of any incarnation.
 * -errno with why filled. */
int pm__cg_slot_open(const pm__cg_root *r, unsigned index, const pm__cg_limits *lim,
                     pm__cg_slot *s, char *why, size_t size);
/* Fds set to -1 (before pm__cg_slot_open, so a close is always safe). */
void pm__cg_slot_zero(pm__cg_slot *s);
/* Closes the fds only and sets them to -1. errno kept. */
void pm__cg_slot_close_fds(pm__cg_slot *s);
/* A fork child's copy: closes the fds without writing to *s, errno kept
 * (see pm__link_release_copy: no copy-on-write of the supervisor's slot
 * table). A fork-mode child drops every slot's so. */
void pm__cg_slot_release_copy(const pm__cg_slot *s);

/* The fds pm__cg_slot_release_copy closes, into fds (-1 where none), for
 * a caller that closes many slots' fds together (a fork child). */
#define PM__CG_SLOT_NFDS (4 + PM__CG_NCTRL)
void pm__cg_slot_fds(const pm__cg_slot *s, int fds[PM__CG_SLOT_NFDS]);
/* Ends and removes the slot's cgroup. errno kept. */
void pm__cg_slot_close(const pm__cg_root *r, pm__cg_slot *s);

/* The incarnation ended: kills whatever is left in the cgroup and waits
 * until it is empty, at most timeout_ms. 0, or -ETIMEDOUT (processes in
 * uninterruptible sleep) or another -errno. *oom_kills: OOM kills in the
 * cgroup since the last end (or the open): this incarnation's; 0 unknown. */
int pm__cg_slot_end(pm__cg_slot *s, int timeout_ms, unsigned *oom_kills);
/* 1 when something still runs in the cgroup, 0 not, -errno. */
int pm__cg_slot_populated(const pm__cg_slot *s);
/* Moves process pid (one of ours, not running application code: a warm
 * standby) into the slot's cgroup and its v1 controllers' groups, as the
 * child's own write of "0" would. 0 or -errno. */
int pm__cg_slot_move(const pm__cg_slot *s, pid_t pid);

#endif /* PM_CGROUP_H */
