/* SPDX-License-Identifier: MIT */
/* cgroup.c - each slot's cgroup: where it lives, its limits, killing it and waiting until it is empty.
 *
 * Layout: <the supervisor's own v2 cgroup>/procmesh.<pid>.<pidns>/slot<N>, one per
 * slot, made when the cluster is created and reused by every incarnation of
 * the slot (it is emptied between two), so the restart path makes no
 * directory. On hybrid hosts whose v2 tree has no controllers (the limits'
 * controllers are bound to v1 hierarchies), the v2 tree still tracks and
 * kills the processes, and the limits are written in the same layout below
 * the supervisor's own v1 cgroup of each controller.
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
#include <poll.h>
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
static int read_text(const char *path, char *buf, size_t size)
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

/* pread from 0 of an fd kept open (cgroupfs files regenerate on each read). */
static int pread_text(int fd, char *buf, size_t size)
{
    ssize_t n = pread(fd, buf, size - 1, 0);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    return 0;
}

static int write_text(const char *dir, const char *file, const char *text)
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

static int open_in(const char *dir, const char *file, int flags)
{
    char path[PM__CG_PATH + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    int fd = open(path, flags | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

static int mkdir_ok(const char *path)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return 0;
    return -errno;
}

/* ------------------------------------------------------------ the cluster's directory */

/* Our pid namespace, as the inode of /proc/self/ns/pid (0 when /proc
 * cannot say): part of the cluster directory's name, procmesh.<pid>.<ns>,
 * because a pid alone names a process only within its namespace. */
static unsigned long long pidns_id(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

/* Removes what a supervisor killed before it could clean up (SIGKILL, a
 * crash) left below parent: procmesh.<pid>.<ns> of a pid that no longer
 * exists in our namespace,
 * and its slot directories. rmdir refuses a cgroup that still holds a
 * process, so nothing alive is ever cut loose. */
static void sweep_stale(const char *parent)
{
    DIR *d = opendir(parent);
    if (d == NULL)
        return;
    unsigned long long ns = pidns_id();
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        if (strncmp(e->d_name, "procmesh.", 9) != 0)
            continue;
        long pid = strtol(e->d_name + 9, &end, 10);
        /* Only a directory of our own pid namespace: its pid means
         * something here. Another namespace's (a container, procmesh as
         * PID 1 of its own) is its owner's to sweep, and a pid that does
         * not exist here may well be alive there. */
        if (*end != '.' || strtoull(end + 1, &end, 10) != ns || *end != '\0')
            continue;
        if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char dir[PM__CG_PATH + 300], sub[PM__CG_PATH + 600];
        snprintf(dir, sizeof(dir), "%s/%s", parent, e->d_name);
        DIR *s = opendir(dir);
        struct dirent *f;
        while (s != NULL && (f = readdir(s)) != NULL) {
            if (strncmp(f->d_name, "slot", 4) != 0)
                continue;
            snprintf(sub, sizeof(sub), "%s/%s", dir, f->d_name);
            (void)rmdir(sub);
        }
        if (s != NULL)
            closedir(s);
        (void)rmdir(dir);
    }
    closedir(d);
}

/* The limit's value as its v2 file (memory.max, pids.max, cpu.max) or v1
 * file (memory.limit_in_bytes, pids.max, cpu.cfs_quota_us + period) takes. */
static int write_limit(const char *dir, int ctrl, int v2, const pm__cg_limits *lim)
{
    char v[64];
    if (ctrl == PM__CG_MEMORY) {
        snprintf(v, sizeof(v), "%" PRIu64, lim->memory_max);
        if (!v2) {
            /* Swap too when the host accounts it, so the limit is not
             * simply moved to swap; its absence is fine. */
            int rc = write_text(dir, "memory.limit_in_bytes", v);
            if (rc == 0)
                (void)write_text(dir, "memory.memsw.limit_in_bytes", v);
            return rc;
        }
        int rc = write_text(dir, "memory.max", v);
        if (rc == 0)
            (void)write_text(dir, "memory.swap.max", "0");
        return rc;
    }
    if (ctrl == PM__CG_PIDS) {
        snprintf(v, sizeof(v), "%d", lim->pids_max);
        return write_text(dir, "pids.max", v);
    }
    if (v2) {
        snprintf(v, sizeof(v), "%" PRIu64 " %" PRIu64, lim->cpu_quota_us, lim->cpu_period_us);
        return write_text(dir, "cpu.max", v);
    }
    /* v1: the period first, so the quota is checked against it. */
    snprintf(v, sizeof(v), "%" PRIu64, lim->cpu_period_us);
    int rc = write_text(dir, "cpu.cfs_period_us", v);
    snprintf(v, sizeof(v), "%" PRIu64, lim->cpu_quota_us);
    return rc < 0 ? rc : write_text(dir, "cpu.cfs_quota_us", v);
}

static int wants(const pm__cg_limits *lim, int ctrl)
{
    return ctrl == PM__CG_MEMORY ? lim->memory_max > 0
           : ctrl == PM__CG_PIDS ? lim->pids_max > 0
                                 : lim->cpu_quota_us > 0;
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

int pm__cg_root_setup(pm__cg_root *r, const char *proc_cgroup, const char *mountinfo,
                      const pm__cg_limits *lim)
{
    char v2rel[PM__CG_PATH], v1rel[PM__CG_NCTRL][PM__CG_PATH];
    char v2mnt[PM__CG_PATH], v2root[PM__CG_PATH], v1mnt[PM__CG_NCTRL][PM__CG_PATH],
        v1root[PM__CG_NCTRL][PM__CG_PATH];
    char own[PM__CG_PATH], dir[PM__CG_PATH + 32], text[1024];
    int nlimits = wants(lim, PM__CG_MEMORY) + wants(lim, PM__CG_PIDS) + wants(lim, PM__CG_CPU);
    int rc;
    memset(r, 0, sizeof(*r));
    r->mode = PM_CONTAIN_PROCESS_GROUP;
    pm__cg_parse_mounts(mountinfo, v2mnt, v2root, v1mnt, v1root);
    if (pm__cg_parse_self(proc_cgroup, v2rel, sizeof(v2rel), v1rel) < 0 || v2rel[0] == '\0' ||
        v2mnt[0] == '\0') {
        why_fmt(r, 0, "process group per incarnation: no cgroup v2 tree mounted");
        goto fallback;
    }
    if (pm__cg_join(own, sizeof(own), v2mnt, v2root, v2rel) < 0) {
        why_fmt(r, 0, "process group per incarnation: our cgroup %s is not visible under %s", v2rel,
                v2mnt);
        goto fallback;
    }
    /* Our own child directory: several supervisors (and tests) share a
     * parent; none writes outside its procmesh.<pid>.<pidns>. */
    sweep_stale(own);
    snprintf(dir, sizeof(dir), "%s/procmesh.%d.%llu", own, (int)getpid(), pidns_id());
    if (strlen(dir) >= sizeof(r->v2)) {
        why_fmt(r, 0, "process group per incarnation: cgroup path too long");
        goto fallback;
    }
    rc = mkdir_ok(dir);
    if (rc < 0) {
        why_fmt(r, 0, "process group per incarnation: cannot create %s: %s (cgroup v2 needs root "
                "or a delegated cgroup, e.g. systemd's Delegate=yes)", dir, strerror(-rc));
        goto fallback;
    }
    strcpy(r->v2, dir);
    r->mode = PM_CONTAIN_CGROUP;
    char probe[PM__CG_PATH + 32];
    snprintf(probe, sizeof(probe), "%s/cgroup.kill", dir);
    r->has_kill = access(probe, F_OK) == 0;
    /* Each limit: in the v2 tree when it offers the controller, else in
     * the v1 hierarchy that has it (hybrid hosts). */
    snprintf(probe, sizeof(probe), "%s/cgroup.controllers", own);
    if (nlimits == 0 || read_text(probe, text, sizeof(text)) < 0)
        text[0] = '\0';
    char v1used[64] = "", v2used[64] = "";
    for (int i = 0; i < PM__CG_NCTRL; i++) {
        if (!wants(lim, i))
            continue;
        if (pm__cg_has_word(text, ctrl_name[i])) {
            char plus[16];
            snprintf(plus, sizeof(plus), "+%s", ctrl_name[i]);
            /* Needed for procmesh.<pid> to have the controller: the only
             * write outside it. Refused (EBUSY) when our own cgroup holds
             * processes and is not the root: run procmesh in a leaf of a
             * delegated subtree whose parent enables the controllers. */
            rc = write_text(own, "cgroup.subtree_control", plus);
            if (rc == 0)
                rc = write_text(dir, "cgroup.subtree_control", plus);
            if (rc < 0)
                return why_fmt(r, -EOPNOTSUPP, "cannot enable the %s controller below %s: %s",
                               ctrl_name[i], own, strerror(-rc));
            r->v2_ctrl[i] = 1;
            strcat(strcat(v2used, v2used[0] ? "," : ""), ctrl_name[i]);
            continue;
        }
        char v1own[PM__CG_PATH];
        if (v1mnt[i][0] == '\0' || v1rel[i][0] == '\0' ||
            pm__cg_join(v1own, sizeof(v1own), v1mnt[i], v1root[i], v1rel[i]) < 0)
            return why_fmt(r, -EOPNOTSUPP, "no %s controller for the %s limit (neither in the "
                           "cgroup v2 tree nor as a v1 hierarchy)", ctrl_name[i],
                           ctrl_name[i]);
        sweep_stale(v1own);
        int n = snprintf(r->v1[i], sizeof(r->v1[i]), "%s/procmesh.%d.%llu", v1own, (int)getpid(),
                         pidns_id());
        rc = n < 0 || (size_t)n >= sizeof(r->v1[i]) ? -ENAMETOOLONG : mkdir_ok(r->v1[i]);
        if (rc < 0) {
            int e = rc;
            why_fmt(r, 0, "cannot create %s: %s", r->v1[i], strerror(-e));
            r->v1[i][0] = '\0';
            return -EOPNOTSUPP;
        }
        strcat(strcat(v1used, v1used[0] ? "," : ""), ctrl_name[i]);
    }
    snprintf(r->why, sizeof(r->why), "cgroup v2 %s%s%s%s%s%s", r->v2,
             v2used[0] ? ", limits " : "", v2used, v1used[0] ? ", v1 limits " : "", v1used,
             r->has_kill ? "" : ", no cgroup.kill: kills each listed pid");
    return 0;
fallback:
    if (nlimits > 0) {
        static const char head[] = "limits need a cgroup: ";
        size_t len = strlen(r->why), room = sizeof(r->why) - sizeof(head);
        /* A cut sentence is still the reason. */
        memmove(r->why + sizeof(head) - 1, r->why, len < room ? len + 1 : room);
        r->why[sizeof(r->why) - 1] = '\0';
        memcpy(r->why, head, sizeof(head) - 1);
        return -EOPNOTSUPP;
    }
    return 0;
}

int pm__cg_root_setup_self(pm__cg_root *r, const pm__cg_limits *lim)
{
    /* mountinfo can be long (containers): read it into a growing buffer. */
    char self[4096];
    int rc = read_text("/proc/self/cgroup", self, sizeof(self));
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

/* ------------------------------------------------------------ a slot's cgroup */

void pm__cg_slot_zero(pm__cg_slot *s)
{
    memset(s, 0, sizeof(*s));
    s->dir_fd = s->procs_fd = s->events_fd = s->kill_fd = -1;
    for (int i = 0; i < PM__CG_NCTRL; i++)
        s->v1_procs[i] = -1;
    s->oom_base = -1;
}

void pm__cg_slot_fds(const pm__cg_slot *s, int fds[PM__CG_SLOT_NFDS])
{
    fds[0] = s->dir_fd;
    fds[1] = s->procs_fd;
    fds[2] = s->events_fd;
    fds[3] = s->kill_fd;
    for (int i = 0; i < PM__CG_NCTRL; i++)
        fds[4 + i] = s->v1_procs[i];
}

void pm__cg_slot_release_copy(const pm__cg_slot *s)
{
    int saved = errno;
    int fds[PM__CG_SLOT_NFDS];
    pm__cg_slot_fds(s, fds);
    for (int i = 0; i < PM__CG_SLOT_NFDS; i++)
        pm__close(fds[i]);
    errno = saved;
}

void pm__cg_slot_close_fds(pm__cg_slot *s)
{
    pm__cg_slot_release_copy(s);
    s->dir_fd = s->procs_fd = s->events_fd = s->kill_fd = -1;
    for (int i = 0; i < PM__CG_NCTRL; i++)
        s->v1_procs[i] = -1;
}

static long long oom_count(const pm__cg_slot *s);

int pm__cg_slot_open(const pm__cg_root *r, unsigned index, const pm__cg_limits *lim,
                     pm__cg_slot *s, char *why, size_t size)
{
    char dir[PM__CG_PATH + 32];
    const char *what = "";
    int rc;
    pm__cg_slot_zero(s);
    s->index = index;
    snprintf(dir, sizeof(dir), "%s/slot%u", r->v2, index);
    what = "create";
    if ((rc = mkdir_ok(dir)) < 0)
        goto fail;
    what = "open";
    if ((rc = s->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        rc = -errno;
        goto fail;
    }
    if ((rc = s->procs_fd = open_in(dir, "cgroup.procs", O_WRONLY)) < 0 ||
        (rc = s->events_fd = open_in(dir, "cgroup.events", O_RDONLY)) < 0)
        goto fail;
    if (r->has_kill && (rc = s->kill_fd = open_in(dir, "cgroup.kill", O_WRONLY)) < 0)
        goto fail;
    what = "set a limit in";
    for (int i = 0; i < PM__CG_NCTRL; i++) {
        if (!wants(lim, i))
            continue;
        if (r->v2_ctrl[i]) {
            if ((rc = write_limit(dir, i, 1, lim)) < 0)
                goto fail;
            if (i == PM__CG_MEMORY)
                if (snprintf(s->oom_file, sizeof(s->oom_file), "%s/memory.events", dir) >=
                    (int)sizeof(s->oom_file))
                    s->oom_file[0] = '\0'; /* too long a path: OOM kills go uncounted */
            continue;
        }
        snprintf(dir, sizeof(dir), "%s/slot%u", r->v1[i], index);
        what = "create";
        if ((rc = mkdir_ok(dir)) < 0)
            goto fail;
        what = "set a limit in";
        if ((rc = write_limit(dir, i, 0, lim)) < 0)
            goto fail;
        what = "open";
        if ((rc = s->v1_procs[i] = open_in(dir, "cgroup.procs", O_WRONLY)) < 0)
            goto fail;
        if (i == PM__CG_MEMORY)
            if (snprintf(s->oom_file, sizeof(s->oom_file), "%s/memory.oom_control", dir) >=
                (int)sizeof(s->oom_file))
                s->oom_file[0] = '\0';
        snprintf(dir, sizeof(dir), "%s/slot%u", r->v2, index);
    }
    s->oom_base = oom_count(s);
    return 0;
fail:
    snprintf(why, size, "cannot %s the cgroup %s: %s", what, dir, strerror(-rc));
    pm__cg_slot_close(r, s);
    return rc;
}

static long long oom_count(const pm__cg_slot *s)
{
    char text[512];
    if (s->oom_file[0] == '\0' || read_text(s->oom_file, text, sizeof(text)) < 0)
        return -1;
    return pm__cg_parse_oom_kill(text);
}

int pm__cg_slot_move(const pm__cg_slot *s, pid_t pid)
{
    char text[16];
    int n = snprintf(text, sizeof(text), "%d", (int)pid);
    if (write(s->procs_fd, text, (size_t)n) < 0)
        return -errno;
    for (int i = 0; i < PM__CG_NCTRL; i++)
        if (s->v1_procs[i] >= 0 && write(s->v1_procs[i], text, (size_t)n) < 0)
            return -errno;
    return 0;
}

int pm__cg_slot_populated(const pm__cg_slot *s)
{
    char text[128];
    int rc = pread_text(s->events_fd, text, sizeof(text));
    return rc < 0 ? rc : pm__cg_parse_populated(text);
}

/* Without cgroup.kill (Linux < 5.14): SIGKILL each pid listed. A process
 * forking meanwhile adds a pid after our read: the caller's wait loop
 * calls this again until the cgroup is empty. The pids are safe to signal:
 * a pid listed in cgroup.procs is alive (or a zombie, which keeps it). */
static void kill_listed(const pm__cg_slot *s)
{
    char path[64], text[4096];
    snprintf(path, sizeof(path), "/proc/self/fd/%d/cgroup.procs", s->dir_fd);
    if (read_text(path, text, sizeof(text)) < 0)
        return;
    for (char *p = text; *p != '\0';) {
        char *end;
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        if (pid > 0)
            (void)kill((pid_t)pid, SIGKILL);
        p = end;
    }
}

int pm__cg_slot_end(pm__cg_slot *s, int timeout_ms, unsigned *oom_kills)
{
    *oom_kills = 0;
    if (s->events_fd < 0)
        return 0;
    int rc = pm__cg_slot_populated(s);
    if (rc == 1) {
        /* cgroup.kill: the kernel kills every process in it, including one
         * forking at that moment (the cgroup is marked while it walks). */
        if (s->kill_fd >= 0) {
            s->killed = 1;
            if (write(s->kill_fd, "1", 1) < 0)
                kill_listed(s);
        } else {
            kill_listed(s);
        }
        uint64_t deadline = pm__now_ms() + (uint64_t)timeout_ms;
        /* cgroup.events raises POLLPRI (a "modified" notification) when
         * populated changes; check after arming so a change between the
         * read and the poll is not lost (the next read sees it). */
        while ((rc = pm__cg_slot_populated(s)) == 1) {
            uint64_t now = pm__now_ms();
            if (now >= deadline) {
                rc = -ETIMEDOUT;
                break;
            }
            struct pollfd p = {s->events_fd, POLLPRI, 0};
            int wait = (int)(deadline - now);
            (void)poll(&p, 1, wait < 10 ? wait : 10);
            if (s->kill_fd < 0)
                kill_listed(s);
        }
    }
    long long now = oom_count(s);
    if (now > 0 && s->oom_base >= 0 && now > s->oom_base)
        *oom_kills = (unsigned)(now - s->oom_base);
    s->oom_base = now;
    return rc < 0 ? rc : 0;
}

void pm__cg_slot_close(const pm__cg_root *r, pm__cg_slot *s)
{
    int saved = errno;
    unsigned oom;
    if (s->events_fd >= 0)
        (void)pm__cg_slot_end(s, 1000, &oom);
    pm__cg_slot_close_fds(s);
    char dir[PM__CG_PATH + 32];
    for (int i = 0; i < PM__CG_NCTRL; i++) {
        if (r->v1[i][0] == '\0')
            continue;
        snprintf(dir, sizeof(dir), "%s/slot%u", r->v1[i], s->index);
        (void)rmdir(dir);
    }
    if (r->v2[0] != '\0') {
        snprintf(dir, sizeof(dir), "%s/slot%u", r->v2, s->index);
        (void)rmdir(dir);
    }
    errno = saved;
}
