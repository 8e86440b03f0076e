/*
 * check_containment.c - what a worker holds and what the supervisor takes
 * back: the exact fd set and mappings of a fork-mode and an exec-mode
 * worker (its own memory and doorbells, nothing of the supervisor or of
 * another slot), and orphans re-parented to a subreaping supervisor.
 */
#include "helpers.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>

#include "procmesh.h"
#include "supervise.h"

#ifndef PM_TEST_WORKER
#error "PM_TEST_WORKER must name the pm-test-worker binary"
#endif


/* Fork mode: what the child holds. */
static int report_fd = -1;

static int boot_inspect(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    pm_node_ready(n);
    char mine[64], buf[512], bad[1024] = "";
    snprintf(mine, sizeof(mine), "procmesh-slot%u-", pm_node_slot(n));
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[300];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, buf, sizeof(buf) - 1);
        if (k <= 0)
            continue;
        buf[k] = '\0';
        if ((strstr(buf, "procmesh-slot") && !strstr(buf, mine)) || strstr(buf, "io_uring") ||
            strstr(buf, "signalfd") || strstr(buf, "timerfd") || strstr(buf, "pidfd"))
            snprintf(bad + strlen(bad), sizeof(bad) - strlen(bad), "fd %s;", buf);
    }
    closedir(d);
    FILE *m = fopen("/proc/self/maps", "r");
    while (fgets(buf, sizeof(buf), m) != NULL)
        if ((strstr(buf, "procmesh-slot") && !strstr(buf, mine)) || strstr(buf, "io_uring"))
            snprintf(bad + strlen(bad), sizeof(bad) - strlen(bad), "map %s;", buf);
    fclose(m);
    char line[1200];
    int len = snprintf(line, sizeof(line), "%u %s\n", pm_node_slot(n), bad[0] ? bad : "clean");
    if (write(report_fd, line, (size_t)len) != len)
        return 3;
    idle();
    return 0;
}

START_TEST(test_containment_fork)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    report_fd = p[1];
    pm_options *o = opts(3);
    pm_options_set_bootstrap(o, boot_inspect, NULL);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    close(p[1]);
    char buf[4096];
    size_t got = 0;
    while (got < sizeof(buf) - 1) {
        int lines = 0;
        for (size_t i = 0; i < got; i++)
            lines += buf[i] == '\n';
        if (lines == 3)
            break;
        ssize_t k = read(p[0], buf + got, sizeof(buf) - 1 - got);
        ck_assert_int_gt(k, 0);
        got += (size_t)k;
    }
    buf[got] = '\0';
    ck_assert_msg(strstr(buf, "fd ") == NULL && strstr(buf, "map ") == NULL, "leaked: %s", buf);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    close(p[0]);
    pm_options_free(o);
}
END_TEST

START_TEST(test_containment_exec)
{
    /* Exec mode: the worker holds exactly stdin/out/err, the fd we passed
     * (fd 3), its memfd and its two doorbells (4, 5, 6), and maps only its
     * own slot's memory. */
    pm_options *o = opts(2);
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    exec_opts(o, "inspect", NULL);
    ck_assert_int_eq(pm_options_set_pass_fds(o, &p[1], 1), 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    close(p[1]);
    char buf[8192];
    size_t got = 0;
    ssize_t k;
    /* Both reports, then EOF once both workers closed fd 3. */
    while ((k = read(p[0], buf + got, sizeof(buf) - 1 - got)) > 0)
        got += (size_t)k;
    buf[got] = '\0';
    int ends = 0;
    for (char *line = strtok(buf, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        static unsigned slot;
        if (sscanf(line, "slot %u", &slot) == 1)
            continue;
        if (strcmp(line, "end") == 0) {
            ends++;
            continue;
        }
        int fd;
        char target[512];
        if (sscanf(line, "fd %d %511s", &fd, target) == 2) {
            ck_assert_msg(fd <= 6, "unexpected fd: %s", line);
            if (fd == 4) {
                char want[64];
                snprintf(want, sizeof(want), "procmesh-slot%u-", slot);
                ck_assert_msg(strstr(target, want) != NULL, "fd 4 is %s", target);
            }
            if (fd == 5 || fd == 6)
                ck_assert_str_eq(target, "anon_inode:[eventfd]");
            continue;
        }
        if (strncmp(line, "map ", 4) == 0) {
            char want[64];
            snprintf(want, sizeof(want), "procmesh-slot%u-", slot);
            ck_assert_msg(strstr(line, want) != NULL, "foreign mapping: %s", line);
        }
    }
    ck_assert_int_eq(ends, 2);
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
    ck_assert_int_eq(pm_options_set_reap_orphans(o, 1), 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    /* A grandchild orphaned to us: a child that forks and exits at once. */
    pid_t mid = fork();
    if (mid == 0) {
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
    PM_ADD_TEST(s, test_containment_fork, 60);
    PM_ADD_TEST(s, test_containment_exec, 60);
    PM_ADD_TEST(s, test_reap_orphans, 60);
    return pm_test_main(s);
}
