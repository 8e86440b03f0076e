/* SPDX-License-Identifier: MIT */
/* cgroup.h - the cluster's cgroups: discovery, a delegated cgroup holding procmesh, each slot's cgroup and leaves, attach, kill, wait-empty, limits, OOM count. */
#ifndef PM_CGROUP_H
#define PM_CGROUP_H

#include <stdatomic.h>
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
    char name[64];                        /* procmesh.<pid>.<pidns>.<k>: this process's k-th cluster */
    char v2[PM__CG_PATH];                 /* <own v2 cgroup>/<name>, or "" */
    char v1[PM__CG_NCTRL][PM__CG_PATH];   /* <v1 mount><own>/<name> per controller used, or "" */
    int has_kill;                         /* cgroup.kill exists (Linux 5.14) */
    int v2_ctrl[PM__CG_NCTRL];            /* the limit is written in the v2 tree */
    char why[256];                        /* the mode in words (logged at start, /status) */
} pm__cg_root;

/* A leaf of a slot's cgroup, g<gen>: where an incarnation is born. */
typedef struct pm__cg_leaf {
    int dir_fd, procs_fd, events_fd;
    unsigned gen;
} pm__cg_leaf;

/* One slot's cgroup: its directory slot<N> with the limits, and the leaf
 * its incarnations are born into (reused until it is killed, or, with a
 * warm standby, the one the standby waited in; see cgroup.c). */
typedef struct pm__cg_slot {
    int dir_fd;                  /* the current leaf: clone3(CLONE_INTO_CGROUP) */
    int procs_fd;                /* its cgroup.procs, written by the child when clone3 cannot */
    int events_fd;               /* cgroup.events: populated 0/1, pollable */
    int v1_procs[PM__CG_NCTRL];  /* v1 controllers' cgroup.procs, or -1 */
    int v1_tasks[PM__CG_NCTRL];  /* their tasks files: a lone thread's join (cgroup.c), or -1 */
    char oom_file[PM__CG_PATH];  /* memory.events (v2) or memory.oom_control (v1), or "" */
    long long oom_base;          /* oom_kill count when the incarnation started, -1 unknown */
    int killed;                  /* cgroup.kill was written: no clone3 into it (spawn.c) */
    unsigned index;
    int growing;                 /* new leaves are made (slot<N>/g<gen>, beside the current one): 1 from the open until the close */
    int has_kill;                /* cgroup.kill exists: opened when written (pm__cg_slot_end) */
    unsigned gen;                /* the current leaf's */
    unsigned last_gen;           /* the last leaf made */
    unsigned retired;            /* a killed leaf not yet removed, or 0 */
    unsigned next_gen;           /* the leaf made ahead for the next incarnation (no fd held but standby_leaf's), or 0 */
    int standby_procs_fd;        /* that leaf's cgroup.procs (standby_leaf's) while a warm standby is forked into it, else -1 */
    pm__cg_leaf standby_leaf;    /* the leaf made ahead, opened while a warm standby waits in it (fds -1 otherwise):
                                    its take opens nothing on the crash's path (pm__cg_slot_advance) */
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

/* Enabling a controller in our own cgroup's cgroup.subtree_control failed
 * with err (-errno); procs is the text of its cgroup.procs, self our pid.
 * MOVE_SELF: EBUSY in a cgroup other than the root that holds this process
 * alone, which may move itself into a leaf below it and try again;
 * SHARED: it holds *others other processes too (nothing is moved);
 * FAIL: err stands. */
enum { PM__CG_ENABLE_FAIL, PM__CG_ENABLE_MOVE_SELF, PM__CG_ENABLE_SHARED };
int pm__cg_enable_decide(int err, int own_is_root, const char *procs, long self, unsigned *others);

/* ---- shared by cgroup.c and cgroup_slot.c ---- */

/* Reads a small file whole into buf (NUL-terminated); -errno. */
int pm__cg_read_text(const char *path, char *buf, size_t size);
/* Writes text to dir/file; 0 or -errno. */
int pm__cg_write_text(const char *dir, const char *file, const char *text);
/* Pure: the pid of a cluster directory's name, procmesh.<pid>.<ns>.<k> (or
 * procmesh.<pid>.<ns>, as versions before the cluster number named it),
 * when its namespace is ns: the pid (> 0), else -1 (another name, another
 * namespace, anything after the numbers, a number out of range). */
long pm__cg_cluster_dir_pid(const char *name, unsigned long long ns);
/* mkdir, an existing directory being fine; 0 or -errno. */
int pm__cg_mkdir(const char *path);
/* 1 when lim asks for controller ctrl (PM__CG_*). */
int pm__cg_wants(const pm__cg_limits *lim, int ctrl);
/* Removes the cgroup dir and the ones below it, depth levels deep, deepest
 * first; rmdir refuses a cgroup that holds a process. errno not kept. */
void pm__cg_rmdir_tree(const char *dir, int depth);

/* ---- I/O ---- */

/* Finds a writable place for the cluster's cgroups and creates
 * procmesh.<pid>.<pidns>.<k> there (never writing outside it but for enabling the
 * controllers the limits need in its parent's subtree_control; when that
 * parent, our own cgroup, holds this process alone and the kernel refuses
 * (EBUSY), this process first moves itself into <own>/supervisor: see
 * pm__cg_enable_decide). Call it before the cluster has any worker. proc_cgroup
 * and mountinfo are the texts of /proc/self/cgroup and /proc/self/mountinfo
 * (read by the caller, so a test can point them at a scratch tree). With no
 * usable v2 tree: mode process group, 0, unless a limit is asked for:
 * -EOPNOTSUPP with why filled. */
int pm__cg_root_setup(pm__cg_root *r, const char *proc_cgroup, const char *mountinfo,
                      const pm__cg_limits *lim);
/* Enables controller ctrl ("memory") for the children of own (the only
 * write outside the cluster's directory), then of dir (that directory), so that the
 * slots below dir have it; own_is_root: own is the tree's root. When own
 * holds this process alone, it moves into own/supervisor first (see
 * pm__cg_enable_decide). 0, or -EOPNOTSUPP with r->why filled. */
int pm__cg_enable(pm__cg_root *r, const char *own, int own_is_root, const char *dir,
                  const char *ctrl);
/* The clusters this process has made cgroups for: the next one's
 * directory is procmesh.<pid>.<pidns>.<pm__cg_clusters + 1>. Two clusters
 * of one process at once must not share one (a kill of one's slot would
 * end the other's worker). */
extern atomic_uint pm__cg_clusters;
/* pm__cg_root_setup on this process's own files. */
int pm__cg_root_setup_self(pm__cg_root *r, const pm__cg_limits *lim);
/* Removes the cluster's directory (its slots must be closed). errno kept. */
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
 * (see pm__channel_release_copy: no copy-on-write of the supervisor's slot
 * table). A fork-mode child drops every slot's so. */
void pm__cg_slot_release_copy(const pm__cg_slot *s);
/* Off the restart path (the incarnation is ready): the leaf the next
 * incarnation will be born into if this one's is killed, made ahead, and
 * a killed leaf removed. Failures are left to pm__cg_slot_end. errno kept. */
void pm__cg_slot_prepare(pm__cg_slot *s);

/* 1 when the calling process is one thread (a child's v1 join through
 * the tasks files, spawn.c), 0 when it is more or /proc cannot tell. */
int pm__cg_lone_thread(void);
/* The fds pm__cg_slot_release_copy closes, into fds (-1 where none), for
 * a caller that closes many slots' fds together (a fork child). */
#define PM__CG_SLOT_NFDS (6 + 2 * PM__CG_NCTRL)
void pm__cg_slot_fds(const pm__cg_slot *s, int fds[PM__CG_SLOT_NFDS]);
/* Ends and removes the slot's cgroup. errno kept. */
void pm__cg_slot_close(const pm__cg_root *r, pm__cg_slot *s);

/* The incarnation ended: kills whatever is left in its leaf and waits
 * until it is empty, at most timeout_ms; a killed leaf is replaced by the
 * one made ahead. 0, or -ETIMEDOUT (processes in
 * uninterruptible sleep) or another -errno. *oom_kills: OOM kills in the
 * cgroup since the last end (or the open): this incarnation's; 0 unknown. */
int pm__cg_slot_end(pm__cg_slot *s, int timeout_ms, unsigned *oom_kills);
/* 1 when something still runs in the cgroup, 0 not, -errno. */
int pm__cg_slot_populated(const pm__cg_slot *s);
/* Moves process pid (one of ours, not running application code: a warm
 * standby) into the slot's cgroup and its v1 controllers' groups, as the
 * child's own write of "0" would. 0 or -errno. */
int pm__cg_slot_move(const pm__cg_slot *s, pid_t pid);
/* A warm standby waits in the leaf made ahead, joined by its own write
 * when it starts, so that taking it moves no process (a write to
 * cgroup.procs may wait for an RCU grace period: cgroup.c). Opens that
 * leaf (s->standby_leaf: its directory, cgroup.procs and cgroup.events,
 * which every fork child drops, pm__cg_slot_fds) and names its
 * cgroup.procs s->standby_procs_fd for the standby's join; the fds are
 * held while it waits, so that its take opens nothing on the crash's path
 * (three kernfs opens there cost some 40 us here: doc/benchmarks.md, stop
 * 64). The leaf's gen, or 0 when there is none to join (no leaf made
 * ahead, or it cannot be opened). errno kept.
 * pm__cg_slot_standby_close: the standby is forked (it has its copy);
 * the leaf stays open for its take. pm__cg_slot_standby_drop: no standby
 * waits (its fork failed, it ended, or it was taken and the leaf was not
 * used): the leaf's fds are closed, the leaf itself stays made ahead.
 * Both errno kept. */
unsigned pm__cg_slot_standby_open(pm__cg_slot *s);
void pm__cg_slot_standby_close(pm__cg_slot *s);
void pm__cg_slot_standby_drop(pm__cg_slot *s);
/* The standby that joined leaf gen is taken: that leaf becomes the
 * slot's current one (a kill at the reap may already have made it so),
 * and the one it replaces, empty, the leaf made ahead, where the next
 * standby waits; one that still holds processes (a kill that could not
 * be written) is retired as a killed one is. 0, or -ESTALE when gen is
 * neither the current leaf nor the one made ahead, or -errno when it
 * cannot be opened: the caller moves the standby instead. */
int pm__cg_slot_advance(pm__cg_slot *s, unsigned gen);

#endif /* PM_CGROUP_H */
