/* SPDX-License-Identifier: MIT */
/*
 * check_containment.c - what a worker holds and what the supervisor takes
 * back: the exact fd set and mappings of a fork-mode and an exec-mode
 * worker (its own memory and doorbells, nothing of the supervisor or of
 * another slot), no channel in the application's own fork child or in a
 * second cluster's worker, and orphans re-parented to a subreaping
 * supervisor.
 */
#include "helpers.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h> /* mincore */
#include <sys/prctl.h>
#include <sys/stat.h>

#include "procmesh.h"
#include "inspect.h"
#include "internals.h"
#include "supervise.h"

#ifndef PM_TEST_WORKER
#error "PM_TEST_WORKER must name the pm-test-worker binary"
#endif


/* ------------------------------------------------------------ reports */

/* One worker's report (see inspect.h). */
struct fdrep {
    int fd;
    char target[300];
    unsigned long long ino;
};

struct report {
    unsigned slot;
    int nfds;
    struct fdrep fds[64];
    char maps[1024];
    int ended;
};

/* Reads reports from fd until `want` of them have ended (or EOF). */
static void read_reports(int fd, struct report *r, int want)
{
    static char buf[32768];
    size_t got = 0;
    int ended = 0;
    while (ended < want && got < sizeof(buf) - 1) {
        ssize_t k = read(fd, buf + got, sizeof(buf) - 1 - got);
        ck_assert_msg(k > 0, "EOF or error before %d worker reports ended (%d did)", want, ended);
        for (ssize_t i = 0; i < k; i++)
            ended += memcmp(buf + got + i, "end\n", 4) == 0 && (got + i == 0 || buf[got + i - 1] == '\n');
        got += (size_t)k;
    }
    buf[got] = '\0';
    memset(r, 0, sizeof(*r) * (size_t)want);
    struct report *cur = NULL;
    int n = 0;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        unsigned slot;
        unsigned long long inc;
        if (sscanf(line, "slot %u inc %llu", &slot, &inc) == 2) {
            ck_assert_int_lt(n, want);
            cur = &r[n++];
            cur->slot = slot;
            continue;
        }
        ck_assert_msg(cur != NULL, "report line before its slot line: %s", line);
        if (strcmp(line, "end") == 0) {
            cur->ended = 1;
            continue;
        }
        if (strncmp(line, "map ", 4) == 0) {
            snprintf(cur->maps + strlen(cur->maps), sizeof(cur->maps) - strlen(cur->maps), "%s\n",
                     line + 4);
            continue;
        }
        ck_assert_int_lt(cur->nfds, (int)ARRAY_LEN(cur->fds));
        struct fdrep *e = &cur->fds[cur->nfds++];
        ck_assert_msg(sscanf(line, "fd %d %299s %llu", &e->fd, e->target, &e->ino) == 3,
                      "bad report line: %s", line);
    }
    ck_assert_int_eq(n, want);
}

static const struct fdrep *rep_fd(const struct report *r, int fd)
{
    for (int i = 0; i < r->nfds; i++)
        if (r->fds[i].fd == fd)
            return &r->fds[i];
    return NULL;
}

/* fd's target as the worker would report it (spaces as '_'). */
static void fd_target(int fd, char *out, size_t size)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t k = readlink(path, out, size - 1);
    ck_assert_int_gt(k, 0);
    out[k] = '\0';
    for (char *p = out; *p != '\0'; p++)
        if (*p == ' ')
            *p = '_';
}

static unsigned long long fd_ino(int fd)
{
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    return (unsigned long long)st.st_ino;
}

/* The worker's own memory: the supervisor's end of the same memfd. */
static void assert_own_memfd(const pm_cluster *c, const struct report *r, const struct fdrep *e)
{
    char want[64];
    snprintf(want, sizeof(want), "/memfd:procmesh-slot%u-inc1_(deleted)", r->slot);
    ck_assert_msg(strcmp(e->target, want) == 0, "slot %u fd %d is %s, want %s", r->slot, e->fd,
                  e->target, want);
    unsigned long long ino = pm_test_slot_memfd_ino(c, r->slot);
    ck_assert_uint_ne(ino, 0);
    ck_assert_msg(e->ino == ino, "slot %u holds a memfd (inode %llu) that is not its own (%llu)",
                  r->slot, e->ino, ino);
}

/* The socket is the worker's own end of its slot's fd socket. */
/* 1 when e is its slot's end of the fd socket. */
static int is_own_sock(const pm_cluster *c, const struct report *r, const struct fdrep *e)
{
    int sock = pm_test_slot_node_sock(c, r->slot);
    char want[64];
    snprintf(want, sizeof(want), "socket:[%llu]", (unsigned long long)fd_ino(sock));
    return sock >= 0 && strcmp(e->target, want) == 0;
}

static void assert_own_sock(const pm_cluster *c, const struct report *r, const struct fdrep *e)
{
    int sock = pm_test_slot_node_sock(c, r->slot);
    ck_assert_int_ge(sock, 0);
    char want[64];
    snprintf(want, sizeof(want), "socket:[%llu]", (unsigned long long)fd_ino(sock));
    ck_assert_msg(strcmp(e->target, want) == 0, "slot %u fd %d is %s, want its own %s", r->slot,
                  e->fd, e->target, want);
}

/* Every procmesh mapping is the worker's own slot's; no io_uring ring. */
static void assert_own_maps(const struct report *r)
{
    char mine[64];
    snprintf(mine, sizeof(mine), "procmesh-slot%u-", r->slot);
    ck_assert_msg(strstr(r->maps, mine) != NULL, "slot %u maps none of its memory", r->slot);
    char copy[sizeof(r->maps)], *save = NULL;
    snprintf(copy, sizeof(copy), "%s", r->maps);
    for (char *line = strtok_r(copy, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save))
        ck_assert_msg(strstr(line, mine) != NULL, "slot %u maps foreign memory: %s", r->slot, line);
}

/* ------------------------------------------------------------ fork mode */

static int report_fd = -1;

static int boot_inspect(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    pm_node_ready(n);
    /* fdopen adds no fd: report_fd is inherited from the test. */
    FILE *out = fdopen(report_fd, "w");
    if (out == NULL)
        return 3;
    pm_test_inspect(out, pm_node_slot(n), (unsigned long long)pm_node_self(n)->incarnation);
    idle();
    return 0;
}

START_TEST(test_containment_fork)
{
    /* A fork-mode worker holds exactly what the test process held before
     * the spawn (same fd numbers, same files), plus its own slot's memfd and
     * its two doorbells (the hub's eventfd, its own end of its doorbell's
     * socket pair, never the hub's end): no io_uring, signalfd, timerfd,
     * pidfd, epoll fd,
     * exec pipe, and nothing of another slot. _i 1: the application closed
     * its stdin first, so that the supervisor's first fd is fd 0 (a
     * daemon's usual start), which the child drops as any other. */
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    int saved0 = -1;
    if (_i) {
        saved0 = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
        ck_assert_int_ge(saved0, 0);
        ck_assert_int_eq(close(STDIN_FILENO), 0);
    }
    report_fd = p[1];
    struct fdrep before[64];
    int nbefore = 0;
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
            continue;
        ck_assert_int_lt(nbefore, (int)ARRAY_LEN(before));
        before[nbefore].fd = atoi(e->d_name);
        fd_target(before[nbefore].fd, before[nbefore].target, sizeof(before[nbefore].target));
        ck_assert_msg(strstr(before[nbefore].target, "eventfd") == NULL,
                      "the test itself holds an eventfd: %s", before[nbefore].target);
        nbefore++;
    }
    closedir(d);
    pm_options *o = opts(3);
    pm_options_set_bootstrap(o, boot_inspect, NULL);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    close(p[1]);
    static struct report r[3];
    read_reports(p[0], r, 3);
    for (int w = 0; w < 3; w++) {
        for (int i = 0; i < nbefore; i++) {
            const struct fdrep *f = rep_fd(&r[w], before[i].fd);
            ck_assert_msg(f != NULL, "slot %u lost fd %d (%s)", r[w].slot, before[i].fd,
                          before[i].target);
            ck_assert_msg(strcmp(f->target, before[i].target) == 0, "slot %u fd %d is %s, was %s",
                          r[w].slot, f->fd, f->target, before[i].target);
        }
        int memfds = 0, eventfds = 0, bells = 0, socks = 0;
        for (int i = 0; i < r[w].nfds; i++) {
            const struct fdrep *f = &r[w].fds[i];
            int inherited = 0;
            for (int j = 0; j < nbefore; j++)
                inherited |= before[j].fd == f->fd;
            if (inherited)
                continue;
            if (strncmp(f->target, "/memfd:", 7) == 0) {
                assert_own_memfd(c, &r[w], f);
                memfds++;
            } else if (strcmp(f->target, "anon_inode:[eventfd]") == 0) {
                eventfds++; /* the doorbell it writes to wake the hub */
            } else if (strncmp(f->target, "socket:", 7) == 0 && !is_own_sock(c, &r[w], f)) {
                bells++; /* its own doorbell's end (the hub's end of the same
                            pair would be a second socket here, which it must
                            not hold: counted, refused below) */
            } else if (strncmp(f->target, "socket:", 7) == 0) {
                socks++;
            } else {
                ck_abort_msg("slot %u holds fd %d: %s", r[w].slot, f->fd, f->target);
            }
        }
        ck_assert_msg(memfds == 1 && eventfds == 1 && bells == 1 && socks == 1,
                      "slot %u holds %d memfds, %d eventfds, %d doorbell sockets and %d fd "
                      "sockets, want its own 1, 1, 1, 1",
                      r[w].slot, memfds, eventfds, bells, socks);
        ck_assert_int_eq(r[w].nfds, nbefore + 4);
        assert_own_maps(&r[w]);
    }
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    close(p[0]);
    pm_options_free(o);
    if (saved0 >= 0)
        ck_assert_int_eq(dup2(saved0, STDIN_FILENO), STDIN_FILENO);
}
END_TEST

/* Incarnation 1 says ready and idles; a later one reports what it holds. */
static int boot_inspect_later(pm_node *n, void *arg)
{
    if (pm_node_self(n)->incarnation == 1) {
        worker_init();
        (void)arg;
        pm_node_ready(n);
        idle();
        return 0;
    }
    return boot_inspect(n, arg);
}

START_TEST(test_containment_fork_restart)
{
    /* A replacement forked at once after a crash (no backoff: the reap
     * forks it before it lets the dead incarnation's channel go, reap.c)
     * holds what the test held before the spawn and its own channel, and
     * nothing of the incarnation it replaces: not its memfd, doorbells or
     * socket, not its mapping. _i 1: among 12 slots whose other channels
     * pretend to have been copied by the fork (nofork 0), so that its
     * drop plan lists some 24 mappings (its list starts at 8 and grows), and
     * with the loop's rings copied too (pm__loop_fork_rings). */
    unsigned workers = _i ? 12 : 1;
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    report_fd = p[1];
    int nbefore = 0;
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        nbefore += e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d);
    closedir(d);
    pm_options *o = opts((int)workers);
    pm_options_set_bootstrap(o, boot_inspect_later, NULL);
    pm_options_set_restart_min_backoff_ms(o, 0);
    pm_options_set_restart_max_backoff_ms(o, 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    if (_i) {
        PM_RUN_UNTIL(c, pm_test_successors_made(c), 20000);
        pm_test_pretend_copied(c, 0, 1);
        /* The loop's rings copied too, as where MADV_DONTFORK is refused:
         * the replacement must unmap them itself (forkdrop.c). */
        ck_assert_int_eq(pm__loop_fork_rings(c->loop), 0);
    }
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    ck_assert_int_eq(kill(si.pid, SIGKILL), 0);
    PM_RUN_UNTIL(c, pm_cluster_slot_info(c, 0, &si) == 0 && si.incarnation == 2 &&
                        si.state == PM_SLOT_READY, 20000);
    static struct report r[1];
    read_reports(p[0], r, 1);
    int memfds = 0;
    for (int i = 0; i < r[0].nfds; i++) {
        const struct fdrep *f = &r[0].fds[i];
        if (strncmp(f->target, "/memfd:", 7) != 0)
            continue;
        memfds++;
        ck_assert_msg(strcmp(f->target, "/memfd:procmesh-slot0-inc2_(deleted)") == 0,
                      "the replacement holds fd %d: %s", f->fd, f->target);
        ck_assert_uint_eq(f->ino, pm_test_slot_memfd_ino(c, 0));
    }
    ck_assert_int_eq(memfds, 1);
    ck_assert_msg(r[0].nfds == nbefore + 4, "the replacement holds %d fds, want %d + its own 4",
                  r[0].nfds, nbefore);
    ck_assert_msg(strstr(r[0].maps, "procmesh-slot0-inc2") != NULL &&
                      strstr(r[0].maps, "procmesh-slot0-inc1") == NULL,
                  "the replacement's mappings: %s", r[0].maps);
    ck_assert_msg(strstr(r[0].maps, "io_uring") == NULL, "the replacement maps the loop's rings: %s", r[0].maps);
    pm_test_pretend_copied(c, 0, 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    close(p[0]);
    close(p[1]); /* open until now: the replacement is forked from us */
    pm_options_free(o);
}
END_TEST

/* Mappings of workers' channels in this process. */
static int channel_maps(void)
{
    FILE *m = fopen("/proc/self/maps", "r");
    if (m == NULL)
        return -1;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof(line), m) != NULL)
        n += strstr(line, "memfd:procmesh-slot") != NULL;
    fclose(m);
    return n;
}

START_TEST(test_forks_copy_no_channel)
{
    /* A channel's mapping is copied by no fork (design.md, "Spawning";
     * what keeps a fork's cost flat in N; a worker maps its own from its
     * memfd): the application's own fork child maps none, a worker of a
     * second cluster in the same process only its own. Before, both mapped
     * every channel of the first cluster, spares included. */
    pm_options *oa = opts(1); /* one: the second cluster's worker inherits its fds (64 reported) */
    pm_options_set_bootstrap(oa, boot_ready, NULL);
    pm_cluster *a;
    ck_assert_int_eq(pm_cluster_spawn(oa, &a), 0);
    RUN_UNTIL(a, pm_test_successors_made(a), 30000);
    ck_assert_int_ge(channel_maps(), 2); /* the supervisor maps them: channel and spare */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(channel_maps() & 0x7f);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    ck_assert_msg(WEXITSTATUS(st) == 0, "the application's fork child maps %d channels",
                  WEXITSTATUS(st));

    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    report_fd = p[1];
    pm_options *ob = opts(1);
    pm_options_set_bootstrap(ob, boot_inspect, NULL);
    pm_cluster *b;
    ck_assert_int_eq(pm_cluster_spawn(ob, &b), 0);
    close(p[1]);
    static struct report r[1];
    read_reports(p[0], r, 1);
    int n = 0;
    for (const char *q = r[0].maps; (q = strstr(q, "memfd:procmesh-slot")) != NULL; q++)
        n++;
    ck_assert_msg(n == 1, "the second cluster's worker maps %d channels, want its own:\n%s", n,
                  r[0].maps);
    ck_assert_int_eq(pm_cluster_terminate(b), 0);
    ck_assert_int_eq(pm_cluster_terminate(a), 0);
    close(p[0]);
    pm_options_free(ob);
    pm_options_free(oa);
}
END_TEST

/* A worker that supervises: its own cluster of one fork-mode worker. */
static int boot_nested(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    pm_node_ready(n);
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, 1);
    pm_options_set_bootstrap(o, boot_ready, NULL);
    /* Its cgroups would nest in this worker's leaf: not what is tested. */
    pm_options_set_containment(o, PM_CONTAIN_PROCESS_GROUP);
    pm_cluster *c;
    int rc = pm_cluster_spawn(o, &c);
    char line[32];
    int len = snprintf(line, sizeof(line), "nested %d\n", rc);
    if (write(report_fd, line, (size_t)len) != len)
        return 3;
    if (rc == 0)
        pm_cluster_terminate(c);
    pm_options_free(o);
    idle();
    return 0;
}

/* The line a worker wrote to the report pipe's read end fd, waited for
 * (30 s, else the test fails saying what never came). */
static void read_report_line(int fd, char *line, size_t size, const char *never)
{
    struct pollfd pfd = {fd, POLLIN, 0};
    ck_assert_msg(poll(&pfd, 1, 30000) == 1, "%s", never);
    memset(line, 0, size);
    ck_assert_int_gt(read(fd, line, size - 1), 0);
}

START_TEST(test_worker_starts_own_cluster)
{
    /* Fork-mode forks are serialized by a process-wide lock, held across
     * the fork (incarnation.c fork_onto): a worker inherits it held, and
     * it must be free there (its page wiped by the fork, or the atfork
     * handler's reset without MADV_WIPEONFORK), or a bootstrap that
     * starts a cluster of its own waits on it for ever. */
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    report_fd = p[1];
    pm_options *o = opts(1);
    pm_options_set_bootstrap(o, boot_nested, NULL);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    close(p[1]);
    char line[32];
    read_report_line(p[0], line, sizeof(line), "the worker's own spawn never returned");
    ck_assert_str_eq(line, "nested 0\n");
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    close(p[0]);
    pm_options_free(o);
}
END_TEST

/* The cluster a worker forked after the spawn returned inherits. */
static pm_cluster *slots_owner;

/* A worker's look at its inherited copy of the slot table: "none" (not
 * mapped: MADV_DONTFORK, before Linux 4.14), "zero" (every byte 0:
 * MADV_WIPEONFORK) or "held N" (N bytes that are not 0: the supervisor's
 * table, copied by the fork). Only a worker forked once slots_owner is
 * set reports. */
static int boot_slot_table(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    if (slots_owner != NULL) {
        const unsigned char *at;
        size_t len, held = 0;
        pm_test_slot_table(slots_owner, &at, &len);
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        unsigned char vec;
        char line[64];
        int k;
        if (mincore((void *)((uintptr_t)at & ~(page - 1)), 1, &vec) != 0) {
            k = snprintf(line, sizeof(line), "none\n");
        } else {
            for (size_t i = 0; i < len; i++)
                held += at[i] != 0;
            k = held ? snprintf(line, sizeof(line), "held %zu\n", held) : snprintf(line, sizeof(line), "zero\n");
        }
        if (write(report_fd, line, (size_t)k) != k)
            return 3;
    }
    pm_node_ready(n);
    idle();
    return 0;
}

START_TEST(test_fork_worker_has_no_slot_table)
{
    /* The slot table is the supervisor's: every slot's pid, pidfd, cgroup
     * handles, channel fds and mappings. A fork-mode worker gets none of
     * it (cluster.c: a mapping no fork shares), only copies of what it
     * reads of its own slot, made before its fork (incarnation.c). Until
     * stop 58 every worker inherited the whole table. A replacement
     * forked after the table was filled looks. */
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    report_fd = p[1];
    pm_options *o = opts(3);
    pm_options_set_bootstrap(o, boot_slot_table, NULL);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    slots_owner = c;
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 1, &si), 0);
    ck_assert_int_eq(kill(si.pid, SIGKILL), 0);
    PM_RUN_UNTIL(c, pm_cluster_slot_info(c, 1, &si) == 0 && si.incarnation == 2 &&
                        si.state == PM_SLOT_READY, 20000);
    char line[64];
    read_report_line(p[0], line, sizeof(line), "the replacement never reported");
    ck_assert_msg(strcmp(line, "zero\n") == 0 || strcmp(line, "none\n") == 0,
                  "a fork-mode worker's copy of the slot table: %s", line);
    slots_owner = NULL;
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    close(p[0]);
    close(p[1]);
    pm_options_free(o);
}
END_TEST

/* ------------------------------------------------------------ exec mode */

START_TEST(test_containment_exec)
{
    /* An exec-mode worker holds exactly: stdin/out/err as the test has
     * them, the fd we passed (3), its own memfd (4), its two doorbells
     * (5, 6) and its end of the fd socket (7); and maps only its own slot's
     * memory. */
    pm_options *o = opts(2);
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    char passed[300];
    fd_target(p[1], passed, sizeof(passed));
    exec_opts(o, "inspect", NULL);
    ck_assert_int_eq(pm_options_set_pass_fds(o, &p[1], 1), 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    close(p[1]);
    static struct report r[2];
    read_reports(p[0], r, 2);
    for (int w = 0; w < 2; w++) {
        ck_assert_msg(r[w].nfds == 8, "slot %u holds %d fds, want 8 (0-7)", r[w].slot, r[w].nfds);
        for (int fd = 0; fd <= 2; fd++) {
            char want[300];
            fd_target(fd, want, sizeof(want));
            const struct fdrep *f = rep_fd(&r[w], fd);
            ck_assert_msg(f != NULL && strcmp(f->target, want) == 0, "slot %u fd %d is %s, want %s",
                          r[w].slot, fd, f ? f->target : "(closed)", want);
        }
        const struct fdrep *f = rep_fd(&r[w], 3);
        ck_assert_msg(f != NULL && strcmp(f->target, passed) == 0, "slot %u fd 3 is %s, want %s",
                      r[w].slot, f ? f->target : "(closed)", passed);
        f = rep_fd(&r[w], 4);
        ck_assert_msg(f != NULL, "slot %u has no fd 4", r[w].slot);
        assert_own_memfd(c, &r[w], f);
        /* 5: its own doorbell, its end of a socket pair (channel.h
         * node_wake); 6: the hub's, an eventfd it writes. */
        for (int fd = 5; fd <= 6; fd++) {
            f = rep_fd(&r[w], fd);
            const char *want = fd == 5 ? "socket:" : "anon_inode:[eventfd]";
            ck_assert_msg(f != NULL && strncmp(f->target, want, strlen(want)) == 0,
                          "slot %u fd %d is %s, want its doorbell (%s)", r[w].slot, fd,
                          f ? f->target : "(closed)", want);
        }
        f = rep_fd(&r[w], 7);
        ck_assert_msg(f != NULL, "slot %u has no fd 7", r[w].slot);
        assert_own_sock(c, &r[w], f);
        assert_own_maps(&r[w]);
    }
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    close(p[0]);
    pm_options_free(o);
}
END_TEST

START_TEST(test_reap_orphans)
{
    /* As a subreaper, orphans come to the supervisor: with reap_orphans
     * they are reaped and counted, workers still go their own way. */
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    pm_options *o = opts(1);
    pm_options_set_bootstrap(o, boot_crash_first, (void *)(intptr_t)SIGSEGV);
    ck_assert_int_eq(pm_options_set_handle_signals(o, 1), 0); /* reap_orphans needs it */
    ck_assert_int_eq(pm_options_set_reap_orphans(o, 1), 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    /* A grandchild orphaned to us: a child that forks and exits at once. */
    pid_t mid = pm_test_fork();
    if (mid == 0) {
        /* Plain fork: the grandchild must outlive mid to be an orphan. It
         * is ours as the subreaper and ends by itself in 100 ms. */
        if (fork() == 0) {
            usleep(100000);
            _exit(0);
        }
        _exit(0);
    }
    struct pm_cluster_stats st;
    RUN_UNTIL(c, (pm_cluster_stats(c, &st), st.orphans_reaped >= 2), 5000);
    RUN_UNTIL(c, count(PM_EVENT_READY, 0) == 2, 5000); /* the worker crash was still seen */
    ck_assert_int_eq(find(PM_EVENT_EXITED, 0, 0)->signal, SIGSEGV);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
    pm_options_free(o);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("containment");
    PM_ADD_LOOP_TEST(s, test_containment_fork, 0, 2, 60);
    PM_ADD_LOOP_TEST(s, test_containment_fork_restart, 0, 2, 60);
    PM_ADD_TEST(s, test_containment_exec, 60);
    PM_ADD_TEST(s, test_forks_copy_no_channel, 60);
    PM_ADD_TEST(s, test_worker_starts_own_cluster, 60);
    PM_ADD_TEST(s, test_fork_worker_has_no_slot_table, 60);
    PM_ADD_TEST(s, test_reap_orphans, 60);
    return pm_test_main(s);
}
