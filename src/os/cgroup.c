/* SPDX-License-Identifier: MIT */
/* cgroup.c - the cluster's cgroups: where they live, the cluster's directory, the controllers its limits need; the parsers of the cgroup files.
 *
 * Layout: <the supervisor's own v2 cgroup>/procmesh.<pid>.<pidns>.<k>/slot<N>/g<K>,
 * k the cluster's number in its process (two clusters of one process at
 * once each have their own slot<N>: a kill of one's must not end the
 * other's worker; check_tree test_two_clusters_apart).
 * slot<N> is made with its limits when the cluster is created and holds no
 * process; its limits cover the leaves g<K> below it, whose processes are
 * charged to it (a leaf enables no controller of its own). An exec-mode
 * incarnation is born into the current leaf (clone3 CLONE_INTO_CGROUP),
 * which serves every incarnation until one is killed through cgroup.kill:
 * a killed cgroup must not take clone3 children (spawn.c fork_into), and
 * joining it instead by a write to cgroup.procs takes the kernel's
 * cgroup_threadgroup_rwsem for writing, whose write side waits for an RCU
 * grace period (milliseconds, tens on a loaded machine) on the way from a
 * crash to its replacement. So the next leaf is made once the incarnation
 * is ready (pm__cg_slot_prepare) and a killed leaf removed then too: the
 * restart path makes no directory, removes none, and writes no cgroup.procs.
 * A fork-mode child still joins its leaf by a write (spawn.c: glibc's fork
 * has no CLONE_INTO_CGROUP), but a warm standby makes that write as it
 * starts, into the leaf made ahead; taking it makes that leaf the current
 * one and the old one, empty, the one made ahead (pm__cg_slot_advance), so
 * that two leaves take turns and no restart makes or removes a cgroup.
 * procmesh.<pid>.<pidns>.<k> goes into the supervisor's own cgroup; when
 * that is a delegated one holding procmesh alone, procmesh first moves
 * into a leaf of it (leave_own).
 *
 * On hybrid hosts whose v2 tree has no controllers (the limits'
 * controllers are bound to v1 hierarchies), the v2 tree still tracks and
 * kills the processes, and the limits are written in <own v1
 * cgroup>/procmesh.<pid>.<pidns>.<k>/slot<N> per controller, which each child
 * joins by a write (v1 has no CLONE_INTO_CGROUP). A child that is one
 * thread writes "0" to the `tasks` file, not `cgroup.procs`: a thread
 * moving itself alone is moved without cgroup_threadgroup_rwsem (the
 * kernel's "single thread migration" path; a pid written, or any write to
 * cgroup.procs, takes it), which on 6.18 took the 10-22 ms grace-period
 * waits off 6 % of the restarts with limits (stop 69). A child of more
 * threads (an application's pthread_atfork handler can start one before
 * the join) writes cgroup.procs, so that every thread is moved
 * (cgroup_slot.c pm__cg_lone_thread; check_tree test_limit_atfork_thread). A kernel
 * without that path takes the lock for either file. v2 has no such way
 * in: cgroup.threads moves a thread only within its domain.
 *
 * The parsers at the top are pure; everything that touches cgroupfs takes
 * paths, so tests run it against a scratch directory tree.
 */
#define _GNU_SOURCE
#include "cgroup.h"

#include "base/internal.h"
#include "procmesh.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const ctrl_name[PM__CG_NCTRL] = {"memory", "pids", "cpu"};

/* ------------------------------------------------------------ parsers */

int pm__cg_has_word(const char *list, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = list; p != NULL && *p != '\0';) {
        while (*p == ' ' || *p == ',' || *p == '\n')
            p++;
        size_t k = strcspn(p, " ,\n");
        if (k == n && strncmp(p, w, n) == 0)
            return 1;
        p += k;
    }
    return 0;
}

int pm__cg_parse_self(const char *text, char *v2, size_t size, char v1[PM__CG_NCTRL][PM__CG_PATH])
{
    v2[0] = '\0';
    for (int i = 0; i < PM__CG_NCTRL; i++)
        v1[i][0] = '\0';
    for (const char *line = text; line != NULL && *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
        /* hierarchy-ID:controller-list:cgroup-path */
        const char *c1 = memchr(line, ':', len);
        const char *c2 = c1 != NULL ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
        if (c2 == NULL)
            return -EINVAL;
        char ctrls[256], path[PM__CG_PATH];
        size_t cl = (size_t)(c2 - c1 - 1), pl = len - (size_t)(c2 + 1 - line);
        if (cl >= sizeof(ctrls) || pl >= sizeof(path) || pl == 0 || c2[1] != '/')
            return -EINVAL;
        memcpy(ctrls, c1 + 1, cl);
        ctrls[cl] = '\0';
        memcpy(path, c2 + 1, pl);
        path[pl] = '\0';
        if (strncmp(line, "0::", 3) == 0) {
            if (pl >= size)
                return -EINVAL;
            strcpy(v2, path);
        }
        for (int i = 0; i < PM__CG_NCTRL; i++)
            if (pm__cg_has_word(ctrls, ctrl_name[i]))
                strcpy(v1[i], path);
        line = end != NULL ? end + 1 : NULL;
    }
    return 0;
}

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
    char *o = s;
    for (; *s != '\0'; s++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' && s[2] <= '7' &&
            s[3] >= '0' && s[3] <= '7') {
            *o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
            s += 3;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
}

void pm__cg_parse_mounts(const char *text, char *v2mnt, char *v2root,
                         char v1mnt[PM__CG_NCTRL][PM__CG_PATH],
                         char v1root[PM__CG_NCTRL][PM__CG_PATH])
{
    v2mnt[0] = v2root[0] = '\0';
    for (int i = 0; i < PM__CG_NCTRL; i++)
        v1mnt[i][0] = v1root[i][0] = '\0';
    for (const char *line = text; line != NULL && *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
        char buf[2048];
        if (len < sizeof(buf)) {
            memcpy(buf, line, len);
            buf[len] = '\0';
            /* id parent major:minor root mountpoint options [optional...] - fstype source superopts */
            char root[PM__CG_PATH], mnt[PM__CG_PATH], fstype[32], super[512];
            const char *dash = strstr(buf, " - ");
            if (dash != NULL &&
                sscanf(buf, "%*s %*s %*s %511s %511s", root, mnt) == 2 &&
                sscanf(dash + 3, "%31s %*s %511s", fstype, super) == 2) {
                unescape(root);
                unescape(mnt);
                if (strcmp(fstype, "cgroup2") == 0 && v2mnt[0] == '\0') {
                    strcpy(v2mnt, mnt);
                    strcpy(v2root, root);
                } else if (strcmp(fstype, "cgroup") == 0) {
                    for (int i = 0; i < PM__CG_NCTRL; i++)
                        if (v1mnt[i][0] == '\0' && pm__cg_has_word(super, ctrl_name[i])) {
                            strcpy(v1mnt[i], mnt);
                            strcpy(v1root[i], root);
                        }
                }
            }
        }
        line = end != NULL ? end + 1 : NULL;
    }
}

long pm__cg_cluster_dir_pid(const char *name, unsigned long long ns)
{
    if (strncmp(name, "procmesh.", 9) != 0 || name[9] < '1' || name[9] > '9')
        return -1;
    char *end;
    errno = 0;
    long pid = strtol(name + 9, &end, 10);
    /* Only a directory of our own pid namespace: its pid means something
     * here. Another namespace's (a container, procmesh as PID 1 of its
     * own) is its owner's to sweep, and a pid that does not exist here
     * may well be alive there. */
    if (errno != 0 || *end != '.' || end[1] < '0' || end[1] > '9' || strtoull(end + 1, &end, 10) != ns ||
        errno != 0)
        return -1;
    if (*end == '.' && end[1] >= '0' && end[1] <= '9')
        (void)strtoul(end + 1, &end, 10);
    return *end == '\0' ? pid : -1;
}

int pm__cg_join(char *out, size_t size, const char *mnt, const char *root, const char *rel)
{
    size_t rl = strlen(root);
    if (strcmp(root, "/") == 0)
        rl = 0;
    else if (strncmp(rel, root, rl) != 0 || (rel[rl] != '/' && rel[rl] != '\0'))
        return -ENOENT;
    const char *tail = rel + rl;
    if (strcmp(tail, "/") == 0)
        tail = "";
    int n = snprintf(out, size, "%s%s", mnt, tail);
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int pm__cg_parse_populated(const char *text)
{
    for (const char *p = text; p != NULL && *p != '\0'; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, "populated ", 10) == 0 && (p[10] == '0' || p[10] == '1'))
            return p[10] - '0';
    }
    return -EINVAL;
}

long long pm__cg_parse_oom_kill(const char *text)
{
    for (const char *p = text; p != NULL && *p != '\0'; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        long long n;
        if (strncmp(p, "oom_kill ", 9) == 0 && sscanf(p + 9, "%lld", &n) == 1 && n >= 0)
            return n;
    }
    return -1;
}

/* ------------------------------------------------------------ small I/O */

/* Reads a small file whole into buf (NUL-terminated); -errno. */
int pm__cg_read_text(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, size - 1);
    int err = n < 0 ? -errno : 0;
    pm__close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return err;
}

int pm__cg_write_text(const char *dir, const char *file, const char *text)
{
    char path[PM__CG_PATH + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, text, strlen(text));
    int err = n < 0 ? -errno : 0;
    pm__close(fd);
    return err;
}

int pm__cg_mkdir(const char *path)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return 0;
    return -errno;
}

/* Entry e of d is a directory, "." and ".." aside. A file system that
 * does not fill d_type (DT_UNKNOWN: XFS without ftype, a test's scratch
 * tree) is asked. */
static int subdir(DIR *d, const struct dirent *e)
{
    struct stat st;
    return e->d_name[0] != '.' &&
           (e->d_type == DT_DIR ||
            (e->d_type == DT_UNKNOWN && fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
             S_ISDIR(st.st_mode)));
}

void pm__cg_rmdir_tree(const char *dir, int depth)
{
    DIR *d = depth > 0 ? opendir(dir) : NULL;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        /* cgroupfs lists its interface files too: only directories are
         * cgroups. */
        if (!subdir(d, e))
            continue;
        char sub[PM__CG_PATH + 300];
        if (snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name) < (int)sizeof(sub))
            pm__cg_rmdir_tree(sub, depth - 1);
    }
    if (d != NULL)
        closedir(d);
    (void)rmdir(dir);
}

/* 1 when dir has a subdirectory (or cannot be read: then it is not
 * taken either). */
static int has_subdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return 1;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d)) != NULL)
        found = subdir(d, e);
    closedir(d);
    return found;
}

/* ------------------------------------------------------------ stale directories */

/* Our pid namespace, as the inode of /proc/self/ns/pid (0 when /proc
 * cannot say): part of the cluster directory's name,
 * procmesh.<pid>.<ns>.<k>, because a pid alone names a process only within
 * its namespace. */
static unsigned long long pidns_id(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

/* Removes what a supervisor killed before it could clean up (SIGKILL, a
 * crash) left below parent: procmesh.<pid>.<ns>.<k> (or procmesh.<pid>.<ns>,
 * as versions before the cluster number named it) of a pid that no longer
 * exists in our namespace ns, and its slot directories. rmdir refuses a
 * cgroup that still holds a process, so nothing alive is ever cut loose. */
static void sweep_stale(const char *parent, unsigned long long ns)
{
    DIR *d = opendir(parent);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long pid = pm__cg_cluster_dir_pid(e->d_name, ns);
        if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char dir[PM__CG_PATH + 300];
        snprintf(dir, sizeof(dir), "%s/%s", parent, e->d_name);
        pm__cg_rmdir_tree(dir, 2); /* procmesh.<pid>.<ns>.<k>/slot<N>/g<K> */
    }
    closedir(d);
}

int pm__cg_wants(const pm__cg_limits *lim, int ctrl)
{
    return ctrl == PM__CG_MEMORY ? lim->memory_max > 0
           : ctrl == PM__CG_PIDS ? lim->pids_max > 0
                                 : lim->cpu_quota_us > 0;
}

/* Some limit is set: only then does a cluster need its controllers. */
static int wants_any(const pm__cg_limits *lim)
{
    return pm__cg_wants(lim, PM__CG_MEMORY) || pm__cg_wants(lim, PM__CG_PIDS) ||
           pm__cg_wants(lim, PM__CG_CPU);
}

static int why_fmt(pm__cg_root *r, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int why_fmt(pm__cg_root *r, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof(r->why), fmt, ap);
    va_end(ap);
    return rc;
}

/* ------------------------------------------------------------ a delegated cgroup holding procmesh */

int pm__cg_enable_decide(int err, int own_is_root, const char *procs, long self, unsigned *others)
{
    *others = 0;
    /* The root may hold processes and still enable controllers: an EBUSY
     * there is something else, and so is any other error. */
    if (err != -EBUSY || own_is_root)
        return PM__CG_ENABLE_FAIL;
    int mine = 0;
    for (const char *p = procs; p != NULL && *p != '\0';) {
        char *end;
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        /* A process of another pid namespace is listed as 0: not us. */
        if (pid == self)
            mine = 1;
        else
            (*others)++;
        p = end;
    }
    if (*others > 0)
        return PM__CG_ENABLE_SHARED;
    return mine ? PM__CG_ENABLE_MOVE_SELF : PM__CG_ENABLE_FAIL;
}

/* Once this process has moved itself from X into X/supervisor, its later
 * clusters build beside it in X again, not one level deeper each. */
static pthread_mutex_t moved_lock = PTHREAD_MUTEX_INITIALIZER;
static char moved_from[PM__CG_PATH];

/* own is where the tree goes: X when this process moved itself from X. */
static void own_base(char *own)
{
    pthread_mutex_lock(&moved_lock);
    size_t n = strlen(moved_from);
    if (n > 0 && strncmp(own, moved_from, n) == 0 && strcmp(own + n, "/supervisor") == 0)
        own[n] = '\0';
    pthread_mutex_unlock(&moved_lock);
}

/* Enabling a controller for own's children failed with EBUSY: the
 * kernel's no-internal-processes rule (a cgroup other than the root that
 * holds processes enables no controller below it), met by procmesh itself
 * under systemd's Delegate=yes, which starts the service in the delegated
 * cgroup. When procmesh is alone there, it moves into the leaf
 * own/supervisor (the layout DelegateSubgroup=supervisor would have made)
 * and own holds none. Only when alone: moving another process would change
 * its placement (and its limits) behind its back. Writing our pid moves
 * every thread of the process; the caller does this before any worker of
 * the cluster exists, and earlier clusters' workers are in their own slot
 * cgroups, which a move of their parent does not touch. */
static int leave_own(pm__cg_root *r, const char *own, int own_is_root, const char *ctrl, int err)
{
    char path[PM__CG_PATH + 32], procs[4096];
    snprintf(path, sizeof(path), "%s/cgroup.procs", own);
    if (pm__cg_read_text(path, procs, sizeof(procs)) < 0)
        procs[0] = '\0';
    unsigned others;
    int d = pm__cg_enable_decide(err, own_is_root, procs, (long)getpid(), &others);
    if (d == PM__CG_ENABLE_SHARED)
        return why_fmt(r, -EBUSY, "%u other process%s procmesh's cgroup %s: run procmesh "
                       "alone there (systemd: Delegate=yes) to enable %s below it (no "
                       "controller below a cgroup with processes)", others,
                       others == 1 ? " shares" : "es share", own, ctrl);
    if (d != PM__CG_ENABLE_MOVE_SELF)
        return err;
    snprintf(path, sizeof(path), "%s/supervisor", own);
    int rc = pm__cg_mkdir(path);
    if (rc == 0)
        rc = pm__cg_write_text(path, "cgroup.procs", "0");
    if (rc < 0)
        return why_fmt(r, rc, "cannot enable the %s controller below %s (it holds procmesh), "
                       "nor move procmesh into %s: %s", ctrl, own, path, strerror(-rc));
    pthread_mutex_lock(&moved_lock);
    snprintf(moved_from, sizeof(moved_from), "%s", own);
    pthread_mutex_unlock(&moved_lock);
    return 0;
}

int pm__cg_enable(pm__cg_root *r, const char *own, int own_is_root, const char *dir,
                  const char *ctrl)
{
    char plus[16];
    snprintf(plus, sizeof(plus), "+%s", ctrl);
    r->why[0] = '\0';
    int rc = pm__cg_write_text(own, "cgroup.subtree_control", plus);
    if (rc == -EBUSY) {
        rc = leave_own(r, own, own_is_root, ctrl, rc);
        if (rc == 0)
            rc = pm__cg_write_text(own, "cgroup.subtree_control", plus);
    }
    if (rc == 0)
        rc = pm__cg_write_text(dir, "cgroup.subtree_control", plus);
    if (rc < 0 && r->why[0] == '\0')
        why_fmt(r, 0, "cannot enable the %s controller below %s: %s", ctrl, own, strerror(-rc));
    return rc < 0 ? -EOPNOTSUPP : 0;
}

/* ------------------------------------------------------------ the cluster's directory */

/* Where this process sits in the cgroup trees, from the texts of
 * /proc/self/cgroup and /proc/self/mountinfo. */
struct where {
    char v2rel[PM__CG_PATH], v1rel[PM__CG_NCTRL][PM__CG_PATH];
    char v2mnt[PM__CG_PATH], v2root[PM__CG_PATH];
    char v1mnt[PM__CG_NCTRL][PM__CG_PATH], v1root[PM__CG_NCTRL][PM__CG_PATH];
    char own[PM__CG_PATH]; /* our v2 cgroup's directory, where the tree goes */
    int own_is_root;
};

atomic_uint pm__cg_clusters;

/* Finds our v2 cgroup and makes procmesh.<pid>.<ns>.<k> in it: 0, or 1
 * with why filled when there is none to use (process groups then). */
static int make_dir(pm__cg_root *r, struct where *w, const char *proc_cgroup,
                    const char *mountinfo)
{
    char dir[PM__CG_PATH + 96]; /* own, '/', the name (64) or "cgroup.kill" */
    pm__cg_parse_mounts(mountinfo, w->v2mnt, w->v2root, w->v1mnt, w->v1root);
    if (pm__cg_parse_self(proc_cgroup, w->v2rel, sizeof(w->v2rel), w->v1rel) < 0 ||
        w->v2rel[0] == '\0' || w->v2mnt[0] == '\0')
        return why_fmt(r, 1, "process group per incarnation: no cgroup v2 tree mounted");
    if (pm__cg_join(w->own, sizeof(w->own), w->v2mnt, w->v2root, w->v2rel) < 0)
        return why_fmt(r, 1, "process group per incarnation: our cgroup %s is not visible "
                       "under %s", w->v2rel, w->v2mnt);
    w->own_is_root = strcmp(w->v2rel, "/") == 0;
    own_base(w->own);
    /* Our own child directory: several supervisors (and tests) share a
     * parent; none writes outside its procmesh.<pid>.<pidns>.<k>. */
    unsigned long long ns = pidns_id();
    sweep_stale(w->own, ns);
    /* A name that exists already is another process's of our pid before
     * us (a supervisor killed before its cleanup whose pid came back, or
     * this process before an execve, which keeps the pid and counts from
     * 1 again). With a slot in it, it may still hold that one's orphans
     * or even its workers: the next number instead, never a slot shared
     * with them. Without one it holds no process (the cluster's directory
     * itself never does) and is taken as it is. */
    int rc = -EEXIST;
    for (int tries = 0; rc == -EEXIST && tries < 64; tries++) {
        snprintf(r->name, sizeof(r->name), "procmesh.%d.%llu.%u", (int)getpid(), ns,
                 atomic_fetch_add(&pm__cg_clusters, 1) + 1);
        snprintf(dir, sizeof(dir), "%s/%s", w->own, r->name);
        if (strlen(dir) >= sizeof(r->v2))
            return why_fmt(r, 1, "process group per incarnation: cgroup path too long");
        rc = mkdir(dir, 0755) == 0 ? 0 : -errno;
        if (rc == -EEXIST && !has_subdir(dir))
            rc = 0;
    }
    if (rc < 0)
        return why_fmt(r, 1, "process group per incarnation: cannot create %s: %s (cgroup v2 "
                       "needs root or a delegated cgroup, e.g. systemd's Delegate=yes)", dir,
                       strerror(-rc));
    strcpy(r->v2, dir);
    r->mode = PM_CONTAIN_CGROUP;
    snprintf(dir, sizeof(dir), "%s/cgroup.kill", r->v2);
    r->has_kill = access(dir, F_OK) == 0;
    return 0;
}

/* The v1 hierarchy's directory for controller i (hybrid hosts). */
static int make_v1_dir(pm__cg_root *r, const struct where *w, int i)
{
    char v1own[PM__CG_PATH];
    if (w->v1mnt[i][0] == '\0' || w->v1rel[i][0] == '\0' ||
        pm__cg_join(v1own, sizeof(v1own), w->v1mnt[i], w->v1root[i], w->v1rel[i]) < 0)
        return why_fmt(r, -EOPNOTSUPP, "no %s controller for the %s limit (neither in the "
                       "cgroup v2 tree nor as a v1 hierarchy)", ctrl_name[i], ctrl_name[i]);
    sweep_stale(v1own, pidns_id());
    int n = snprintf(r->v1[i], sizeof(r->v1[i]), "%s/%s", v1own, r->name);
    int rc = n < 0 || (size_t)n >= sizeof(r->v1[i]) ? -ENAMETOOLONG : pm__cg_mkdir(r->v1[i]);
    if (rc < 0) {
        why_fmt(r, 0, "cannot create %s: %s", r->v1[i], strerror(-rc));
        r->v1[i][0] = '\0';
        return -EOPNOTSUPP;
    }
    return 0;
}

/* Each limit: in the v2 tree when it offers the controller, else in the
 * v1 hierarchy that has it. used[] lists them, for why. */
static int limits_setup(pm__cg_root *r, const struct where *w, const pm__cg_limits *lim,
                        char v2used[64], char v1used[64])
{
    char text[1024] = "", path[PM__CG_PATH + 32];
    /* Read only when a limit asks for a controller: a spawn without
     * limits (the default) does not pay the kernfs open and read. */
    snprintf(path, sizeof(path), "%s/cgroup.controllers", w->own);
    if (wants_any(lim) && pm__cg_read_text(path, text, sizeof(text)) < 0)
        text[0] = '\0';
    for (int i = 0; i < PM__CG_NCTRL; i++) {
        if (!pm__cg_wants(lim, i))
            continue;
        int v2 = pm__cg_has_word(text, ctrl_name[i]);
        int rc = v2 ? pm__cg_enable(r, w->own, w->own_is_root, r->v2, ctrl_name[i])
                    : make_v1_dir(r, w, i);
        if (rc < 0)
            return rc;
        r->v2_ctrl[i] = v2;
        char *used = v2 ? v2used : v1used;
        strcat(strcat(used, used[0] ? "," : ""), ctrl_name[i]);
    }
    return 0;
}

int pm__cg_root_setup(pm__cg_root *r, const char *proc_cgroup, const char *mountinfo,
                      const pm__cg_limits *lim)
{
    struct where w;
    memset(r, 0, sizeof(*r));
    r->mode = PM_CONTAIN_PROCESS_GROUP;
    if (make_dir(r, &w, proc_cgroup, mountinfo) > 0) {
        if (!wants_any(lim))
            return 0;
        static const char head[] = "limits need a cgroup: ";
        size_t len = strlen(r->why), room = sizeof(r->why) - sizeof(head);
        /* A cut sentence is still the reason. */
        memmove(r->why + sizeof(head) - 1, r->why, len < room ? len + 1 : room);
        r->why[sizeof(r->why) - 1] = '\0';
        memcpy(r->why, head, sizeof(head) - 1);
        return -EOPNOTSUPP;
    }
    char v1used[64] = "", v2used[64] = "";
    int rc = limits_setup(r, &w, lim, v2used, v1used);
    if (rc < 0)
        return rc;
    /* A long path cuts the sentence, never the directory's own name. */
    if (snprintf(r->why, sizeof(r->why), "cgroup v2 %s%s%s%s%s%s", r->v2,
                 v2used[0] ? ", limits " : "", v2used, v1used[0] ? ", v1 limits " : "", v1used,
                 r->has_kill ? "" : ", no cgroup.kill: kills each listed pid") < 0)
        r->why[0] = '\0';
    return 0;
}

int pm__cg_root_setup_self(pm__cg_root *r, const pm__cg_limits *lim)
{
    /* mountinfo can be long (containers): read it into a growing buffer. */
    char self[4096];
    int rc = pm__cg_read_text("/proc/self/cgroup", self, sizeof(self));
    if (rc < 0)
        self[0] = '\0';
    size_t cap = 1 << 16, len = 0;
    char *mi = malloc(cap);
    int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    while (mi != NULL && fd >= 0) {
        if (len + 1 == cap) {
            char *m = realloc(mi, cap * 2);
            if (m == NULL)
                break;
            mi = m;
            cap *= 2;
        }
        ssize_t n = read(fd, mi + len, cap - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    pm__close(fd);
    if (mi == NULL)
        return -ENOMEM;
    mi[len] = '\0';
    rc = pm__cg_root_setup(r, self, mi, lim);
    free(mi);
    return rc;
}

void pm__cg_root_close(pm__cg_root *r)
{
    int saved = errno;
    if (r->v2[0] != '\0')
        (void)rmdir(r->v2);
    for (int i = 0; i < PM__CG_NCTRL; i++)
        if (r->v1[i][0] != '\0')
            (void)rmdir(r->v1[i]);
    r->v2[0] = '\0';
    errno = saved;
}
