/* SPDX-License-Identifier: MIT */
/* cgroup_slot.c - one slot's cgroup: made with its limits ahead of any incarnation, the leaf each incarnation is born into, killing it and waiting until it is empty, the OOM count.
 */
#define _GNU_SOURCE
#include "cgroup.h"

#include "base/internal.h"
#include "base/rawsys.h"
#include "procmesh.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* pread from 0 of an fd kept open (cgroupfs files regenerate on each read). */
static int pread_text(int fd, char *buf, size_t size)
{
    ssize_t n = pread(fd, buf, size - 1, 0);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    return 0;
}

static int open_in(const char *dir, const char *file, int flags)
{
    char path[PM__CG_PATH + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    int fd = open(path, flags | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
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
            int rc = pm__cg_write_text(dir, "memory.limit_in_bytes", v);
            if (rc == 0)
                (void)pm__cg_write_text(dir, "memory.memsw.limit_in_bytes", v);
            return rc;
        }
        int rc = pm__cg_write_text(dir, "memory.max", v);
        if (rc == 0)
            (void)pm__cg_write_text(dir, "memory.swap.max", "0");
        return rc;
    }
    if (ctrl == PM__CG_PIDS) {
        snprintf(v, sizeof(v), "%d", lim->pids_max);
        return pm__cg_write_text(dir, "pids.max", v);
    }
    if (v2) {
        snprintf(v, sizeof(v), "%" PRIu64 " %" PRIu64, lim->cpu_quota_us, lim->cpu_period_us);
        return pm__cg_write_text(dir, "cpu.max", v);
    }
    /* v1: the period first, so the quota is checked against it. */
    snprintf(v, sizeof(v), "%" PRIu64, lim->cpu_period_us);
    int rc = pm__cg_write_text(dir, "cpu.cfs_period_us", v);
    snprintf(v, sizeof(v), "%" PRIu64, lim->cpu_quota_us);
    return rc < 0 ? rc : pm__cg_write_text(dir, "cpu.cfs_quota_us", v);
}

/* ------------------------------------------------------------ leaves */

/* The leaf g<gen>'s path from at: the slot's directory (up "") or one of
 * its leaves (up "../"). The supervisor holds no fd of the slot's
 * directory itself, one fewer that every later fork copies (channel.h,
 * pm__channel_drop_worker_ends). A leaf is never a mount's root, so its
 * ".." is the slot's directory. */
static void leaf_name(char name[32], const char *up, unsigned gen)
{
    snprintf(name, 32, "%sg%u", up, gen);
}

/* Opens the leaf g<gen> that exists: l->dir_fd, the other fds -1. */
static int leaf_dir(int at, const char *up, unsigned gen, pm__cg_leaf *l)
{
    char name[32];
    leaf_name(name, up, gen);
    l->gen = gen;
    l->procs_fd = l->events_fd = -1;
    l->dir_fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return l->dir_fd < 0 ? -errno : 0;
}

/* Makes the leaf g<gen> (an existing one is fine) and opens it, as
 * leaf_dir. */
static int leaf_make(int at, const char *up, unsigned gen, pm__cg_leaf *l)
{
    char name[32];
    leaf_name(name, up, gen);
    l->dir_fd = l->procs_fd = l->events_fd = -1;
    if (mkdirat(at, name, 0755) < 0 && errno != EEXIST)
        return -errno;
    int rc = leaf_dir(at, up, gen, l);
    if (rc < 0)
        (void)unlinkat(at, name, AT_REMOVEDIR);
    return rc;
}

/* Opens the files of leaf l (made by leaf_make). A leaf made ahead holds
 * no fd while it waits (pm__cg_slot_prepare): its directory and these two
 * openat calls are cheap (no lock the kernel shares with forks), its mkdir
 * is not. Not cgroup.kill: it is written only
 * when an incarnation left processes behind, and opened then
 * (pm__cg_slot_end); every fd the supervisor holds is copied by each
 * later fork and closed by each child (channel.h,
 * pm__channel_drop_worker_ends). On failure l's fds are closed. */
static int leaf_open(pm__cg_leaf *l)
{
    /* Read and write: kill_listed reads the pids through it, so that a
     * supervisor out of fds can still empty a leaf (kill_leaf). */
    if ((l->procs_fd = openat(l->dir_fd, "cgroup.procs", O_RDWR | O_CLOEXEC)) >= 0 &&
        (l->events_fd = openat(l->dir_fd, "cgroup.events", O_RDONLY | O_CLOEXEC)) >= 0)
        return 0;
    int rc = -errno;
    pm__close(l->dir_fd);
    pm__close(l->procs_fd);
    pm__close(l->events_fd);
    l->dir_fd = l->procs_fd = l->events_fd = -1;
    errno = -rc;
    return rc;
}

static void leaf_release(const pm__cg_leaf *l)
{
    pm__close(l->dir_fd);
    pm__close(l->procs_fd);
    pm__close(l->events_fd);
}

/* The slot's current leaf becomes l (its fds are the slot's now). */
static void leaf_take(pm__cg_slot *s, pm__cg_leaf *l)
{
    s->dir_fd = l->dir_fd;
    s->procs_fd = l->procs_fd;
    s->events_fd = l->events_fd;
    s->gen = l->gen;
    s->killed = 0;
    l->dir_fd = l->procs_fd = l->events_fd = -1;
}

/* Removes the leaf retired last, once it is empty: rmdir refuses one that
 * still holds a process (one in uninterruptible sleep past the wait). */
static void retired_remove(pm__cg_slot *s)
{
    char name[32];
    leaf_name(name, "../", s->retired);
    if (s->retired != 0 && (unlinkat(s->dir_fd, name, AT_REMOVEDIR) == 0 || errno == ENOENT))
        s->retired = 0;
}

void pm__cg_slot_prepare(pm__cg_slot *s)
{
    if (!s->growing || s->dir_fd < 0)
        return;
    int saved = errno;
    retired_remove(s);
    if (s->next_gen == 0) {
        /* Made, not opened: rotate opens it when a kill takes it, so that
         * no fd is held for it meanwhile (leaf_name). */
        char name[32];
        leaf_name(name, "../", ++s->last_gen);
        if (mkdirat(s->dir_fd, name, 0755) == 0 || errno == EEXIST)
            s->next_gen = s->last_gen;
    }
    errno = saved;
}

/* The current leaf is retired (removed by the next pm__cg_slot_prepare,
 * once empty) and next becomes the current one. */
static void retire_and_take(pm__cg_slot *s, pm__cg_leaf *next)
{
    pm__cg_leaf old = {s->dir_fd, s->procs_fd, s->events_fd, s->gen};
    if (s->retired != 0)
        retired_remove(s); /* two kills before a ready: the older one now */
    s->retired = old.gen;
    leaf_take(s, next);
    leaf_release(&old); /* after: retired_remove above walks up from it */
}

/* The leaf made ahead, gen, opened into *l: the fds a waiting standby's
 * leaf holds (pm__cg_slot_standby_open), handed over, else opened now.
 * 0 or -errno. */
static int ahead_open(pm__cg_slot *s, unsigned gen, pm__cg_leaf *l)
{
    if (s->standby_leaf.dir_fd >= 0 && s->standby_leaf.gen == gen) {
        *l = s->standby_leaf;
        s->standby_leaf.dir_fd = s->standby_leaf.procs_fd = s->standby_leaf.events_fd = -1;
        s->standby_leaf.gen = 0;
        s->standby_procs_fd = -1; /* its alias, -1 since the standby's fork */
        return 0;
    }
    int rc = leaf_dir(s->dir_fd, "../", gen, l);
    return rc < 0 ? rc : leaf_open(l);
}

/* The current leaf was killed: the next incarnation is born into the leaf
 * made ahead (or one made now, when it died before it was ready, or the
 * one ahead cannot be opened), and the killed one is removed by the next
 * pm__cg_slot_prepare. Without a new leaf the killed one stays, joined by
 * a write (spawn.c). */
static void rotate(pm__cg_slot *s)
{
    if (!s->growing || s->dir_fd < 0) /* closing, or no leaf */
        return;
    /* The leaf made ahead is only opened here (no mkdir, which locks the
     * slot's directory, on the way to the replacement); made now if there
     * is none or it is gone. */
    pm__cg_leaf next;
    unsigned ahead = s->next_gen;
    s->next_gen = 0;
    if ((ahead == 0 || ahead_open(s, ahead, &next) < 0) &&
        (leaf_make(s->dir_fd, "../", ++s->last_gen, &next) < 0 || leaf_open(&next) < 0))
        return; /* a directory made is removed with the slot's */
    retire_and_take(s, &next);
}

/* ------------------------------------------------------------ a slot's cgroup */

unsigned pm__cg_slot_standby_open(pm__cg_slot *s)
{
    pm__cg_slot_standby_drop(s);
    /* None made ahead. (A slot being closed has no leaf fd: the openat
     * below fails, and so does it where there is no cgroup at all.) */
    if (s->next_gen == 0)
        return 0;
    int saved = errno;
    /* leaf_open leaves every fd -1 when it fails. */
    if (leaf_dir(s->dir_fd, "../", s->next_gen, &s->standby_leaf) < 0 || leaf_open(&s->standby_leaf) < 0) {
        s->standby_leaf.gen = 0;
        errno = saved;
        return 0;
    }
    s->standby_procs_fd = s->standby_leaf.procs_fd;
    errno = saved;
    return s->next_gen;
}

void pm__cg_slot_standby_close(pm__cg_slot *s)
{
    s->standby_procs_fd = -1; /* standby_leaf's: kept */
}

void pm__cg_slot_standby_drop(pm__cg_slot *s)
{
    int saved = errno;
    leaf_release(&s->standby_leaf);
    s->standby_leaf.dir_fd = s->standby_leaf.procs_fd = s->standby_leaf.events_fd = -1;
    s->standby_leaf.gen = 0;
    s->standby_procs_fd = -1;
    errno = saved;
}

int pm__cg_slot_advance(pm__cg_slot *s, unsigned gen)
{
    if (gen == 0)
        return -ESTALE; /* it joined none */
    if (gen == s->gen)
        return 0; /* a kill at the reap made it current (rotate) */
    if (gen != s->next_gen)
        return -ESTALE;
    pm__cg_leaf next;
    int rc = ahead_open(s, gen, &next); /* the standby's leaf, held open while it waited */
    if (rc < 0)
        return rc; /* left made ahead: a kill takes it, or the slot's close removes it */
    /* The current leaf was not rotated away by a kill (which would have
     * made gen current). When it is empty (its incarnation was reaped
     * with nothing left), it is the next standby's to wait in: two leaves
     * taking turns, no mkdir and rmdir of a cgroup for every restart,
     * whose teardown the kernel finishes in its workers while the next
     * restart runs. When it is not, or cannot be read (a kill that could
     * not be written, Linux < 5.14 or no fd for cgroup.kill, whose wait
     * ran out: its pids were killed one by one), it is retired as a
     * killed one is, never reused: a later incarnation must not run
     * beside what an earlier one left. */
    s->next_gen = 0; /* gen: the current one from here, never also the one ahead */
    if (pm__cg_slot_populated(s) != 0) {
        retire_and_take(s, &next);
        return 0;
    }
    pm__cg_leaf old = {s->dir_fd, s->procs_fd, s->events_fd, s->gen};
    leaf_take(s, &next);
    leaf_release(&old);
    s->next_gen = old.gen;
    return 0;
}

/* 1 when the calling process is one thread: procfs gives
 * /proc/<pid>/task a link count of 2 + its threads. 0 when it is more, or
 * when that cannot be read (no /proc; an architecture whose raw stat
 * layout is not libc's). Raw: a vfork child runs this too (rawsys.h). */
PM__READY_TEXT int pm__cg_lone_thread(void)
{
#if defined(SYS_newfstatat) && (defined(__x86_64__) || defined(__aarch64__))
    char path[] = "/proc/self/task"; /* on the stack: scrub.h on a fork child's reads */
    struct stat st;
    return pm__sys4(SYS_newfstatat, AT_FDCWD, path, &st, 0) == 0 && st.st_nlink == 3;
#else
    return 0;
#endif
}

void pm__cg_slot_zero(pm__cg_slot *s)
{
    memset(s, 0, sizeof(*s));
    s->dir_fd = s->procs_fd = s->events_fd = s->standby_procs_fd = -1;
    s->standby_leaf.dir_fd = s->standby_leaf.procs_fd = s->standby_leaf.events_fd = -1;
    for (int i = 0; i < PM__CG_NCTRL; i++)
        s->v1_procs[i] = s->v1_tasks[i] = -1;
    s->oom_base = -1;
}

PM__READY_TEXT void pm__cg_slot_fds(const pm__cg_slot *s, int fds[PM__CG_SLOT_NFDS])
{
    int k = 0;
    fds[k++] = s->dir_fd;
    fds[k++] = s->procs_fd;
    fds[k++] = s->events_fd;
    /* standby_procs_fd is standby_leaf's procs_fd, listed once. */
    fds[k++] = s->standby_leaf.dir_fd;
    fds[k++] = s->standby_leaf.procs_fd;
    fds[k++] = s->standby_leaf.events_fd;
    for (int i = 0; i < PM__CG_NCTRL; i++) {
        fds[k++] = s->v1_procs[i];
        fds[k++] = s->v1_tasks[i];
    }
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
    s->dir_fd = s->procs_fd = s->events_fd = s->standby_procs_fd = -1;
    s->standby_leaf.dir_fd = s->standby_leaf.procs_fd = s->standby_leaf.events_fd = -1;
    for (int i = 0; i < PM__CG_NCTRL; i++)
        s->v1_procs[i] = s->v1_tasks[i] = -1;
}

static long long oom_count(const pm__cg_slot *s);

/* The limit of controller i in the slot's directory dir (v2), or in one of
 * its own in the controller's v1 hierarchy. */
static int slot_limit(const pm__cg_root *r, unsigned index, const pm__cg_limits *lim, int i,
                      pm__cg_slot *s, char *dir, size_t size, const char **what)
{
    int rc;
    *what = "set a limit in";
    if (r->v2_ctrl[i]) {
        if ((rc = write_limit(dir, i, 1, lim)) < 0)
            return rc;
        if (i == PM__CG_MEMORY)
            if (snprintf(s->oom_file, sizeof(s->oom_file), "%s/memory.events", dir) >=
                (int)sizeof(s->oom_file))
                s->oom_file[0] = '\0'; /* too long a path: OOM kills go uncounted */
        return 0;
    }
    snprintf(dir, size, "%s/slot%u", r->v1[i], index);
    *what = "create";
    if ((rc = pm__cg_mkdir(dir)) < 0)
        return rc;
    *what = "set a limit in";
    if ((rc = write_limit(dir, i, 0, lim)) < 0)
        return rc;
    *what = "open";
    /* tasks beside cgroup.procs: a child that is one thread joins by
     * moving that thread, without the kernel's global lock (cgroup.c). */
    if ((rc = s->v1_procs[i] = open_in(dir, "cgroup.procs", O_WRONLY)) < 0 ||
        (rc = s->v1_tasks[i] = open_in(dir, "tasks", O_WRONLY)) < 0)
        return rc;
    if (i == PM__CG_MEMORY)
        if (snprintf(s->oom_file, sizeof(s->oom_file), "%s/memory.oom_control", dir) >=
            (int)sizeof(s->oom_file))
            s->oom_file[0] = '\0';
    snprintf(dir, size, "%s/slot%u", r->v2, index);
    return 0;
}

int pm__cg_slot_open(const pm__cg_root *r, unsigned index, const pm__cg_limits *lim,
                     pm__cg_slot *s, char *why, size_t size)
{
    char dir[PM__CG_PATH + 32];
    const char *what = "";
    int rc, slot_fd = -1;
    pm__cg_slot_zero(s);
    s->index = index;
    s->has_kill = r->has_kill;
    snprintf(dir, sizeof(dir), "%s/slot%u", r->v2, index);
    what = "create";
    if ((rc = pm__cg_mkdir(dir)) < 0)
        goto fail;
    what = "open";
    if ((slot_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        rc = -errno;
        goto fail;
    }
    for (int i = 0; i < PM__CG_NCTRL; i++)
        if (pm__cg_wants(lim, i) && (rc = slot_limit(r, index, lim, i, s, dir, sizeof(dir), &what)) < 0)
            goto fail;
    /* The first incarnation's leaf. The slot's directory itself holds no
     * process: its limits cover the leaves below it, whose processes are
     * charged to it (the leaves enable no controller of their own). */
    pm__cg_leaf first;
    what = "create a leaf in";
    if ((rc = leaf_make(slot_fd, "", ++s->last_gen, &first)) < 0 ||
        (rc = leaf_open(&first)) < 0)
        goto fail;
    leaf_take(s, &first);
    pm__close(slot_fd); /* the leaves are made from the current one from now on */
    s->growing = 1;
    s->oom_base = oom_count(s);
    return 0;
fail:
    snprintf(why, size, "cannot %s the cgroup %s: %s", what, dir, strerror(-rc));
    pm__close(slot_fd);
    pm__cg_slot_close(r, s);
    return rc;
}

static long long oom_count(const pm__cg_slot *s)
{
    char text[512];
    if (s->oom_file[0] == '\0' || pm__cg_read_text(s->oom_file, text, sizeof(text)) < 0)
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

/* Without cgroup.kill (Linux < 5.14, or none could be opened): SIGKILL
 * each pid listed. A process forking meanwhile adds a pid after our read:
 * the caller's wait loop calls this again until the cgroup is empty. The
 * pids are safe to signal: a pid listed in cgroup.procs is alive (or a
 * zombie, which keeps it). Read through the leaf's own cgroup.procs fd, no
 * new one: this is what still works when the supervisor is out of fds. */
static void kill_listed(const pm__cg_slot *s)
{
    char text[4096];
    if (pread_text(s->procs_fd, text, sizeof(text)) < 0)
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

/* Kills what is left in the current leaf. Through cgroup.kill, opened
 * now (a leaf holds no fd for it: leaf_open) and written once: the kernel
 * kills every process in it, including one forking at that moment (the
 * cgroup is marked while it walks). Without it (Linux < 5.14), or while
 * it cannot be opened (out of fds: the caller's wait loop tries again
 * every 10 ms), each pid listed, which needs no new fd. *kfd: the open
 * cgroup.kill, or -1. */
static void kill_leaf(pm__cg_slot *s, int *kfd)
{
    if (s->has_kill)
        *kfd = openat(s->dir_fd, "cgroup.kill", O_WRONLY | O_CLOEXEC);
    if (*kfd >= 0) {
        s->killed = 1;
        if (write(*kfd, "1", 1) == 1)
            return;
    }
    kill_listed(s);
}

int pm__cg_slot_end(pm__cg_slot *s, int timeout_ms, unsigned *oom_kills)
{
    *oom_kills = 0;
    if (s->events_fd < 0)
        return 0;
    int rc = pm__cg_slot_populated(s);
    if (rc == 1) {
        int kfd = -1;
        kill_leaf(s, &kfd);
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
            if (kfd < 0)
                kill_leaf(s, &kfd);
        }
        pm__close(kfd);
    }
    long long now = oom_count(s);
    if (now > 0 && s->oom_base >= 0 && now > s->oom_base)
        *oom_kills = (unsigned)(now - s->oom_base);
    s->oom_base = now;
    if (s->killed)
        rotate(s);
    return rc < 0 ? rc : 0;
}

void pm__cg_slot_close(const pm__cg_root *r, pm__cg_slot *s)
{
    int saved = errno;
    unsigned oom;
    /* No new leaf for an incarnation that will not come (rotate). */
    s->growing = 0;
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
        /* Its leaves with it: the current, the one made ahead, a retired
         * one (or several, when one held a process past its wait). */
        snprintf(dir, sizeof(dir), "%s/slot%u", r->v2, s->index);
        pm__cg_rmdir_tree(dir, 1);
    }
    errno = saved;
}
