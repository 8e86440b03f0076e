/* SPDX-License-Identifier: MIT */
/*
 * check_pid1.c - procmesh as PID 1 of a new PID namespace (as in a
 * container): it reaps an orphaned grandchild it never started, drains on
 * SIGTERM and exits 0. The orphan ends when the test says so (EOF on a
 * FIFO), and the test waits until it is reaped, not for a fixed time. Skipped (77) where unshare(CLONE_NEWPID) is not
 * permitted (an unprivileged container), with the reason.
 */
#include "helpers.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

/* The host pid of a process whose command line is "cat PATH", or 0. */
static int find_cat(const char *path)
{
    DIR *d = opendir("/proc");
    if (d == NULL)
        return 0;
    struct dirent *e;
    int found = 0;
    while (found == 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char p[300], cmd[512];
        snprintf(p, sizeof(p), "/proc/%s/cmdline", e->d_name);
        int fd = open(p, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t k = read(fd, cmd, sizeof(cmd) - 1);
        close(fd);
        if (k > 4 && strcmp(cmd, "cat") == 0 && strcmp(cmd + 4, path) == 0)
            found = atoi(e->d_name);
    }
    closedir(d);
    return found;
}

/* Waits for cond with a deadline, polling every 10 ms; fails naming it. */
#define WAIT_FOR(cond, timeout_ms)                                              \
    do {                                                                        \
        uint64_t end_ = pm_test_ms() + (timeout_ms);                            \
        while (!(cond) && pm_test_ms() < end_)                                  \
            usleep(10000);                                                      \
        ck_assert_msg((cond), "timed out waiting for: %s", #cond);              \
    } while (0)

START_TEST(test_pid1_reaps_orphans_and_drains)
{
    /* The worker's subshell leaves an orphan behind (a cat on a FIFO that
     * the test controls), then becomes a long sleep. */
    char dir[] = "/tmp/pm-pid1-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char fifo[64], script[256];
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    snprintf(script, sizeof(script), "(cat %s >/dev/null &); exec sleep 100", fifo);
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    pid_t u = pm_test_fork();
    ck_assert_int_ge(u, 0);
    if (u == 0) {
        dup2(p[1], 2);
        /* --kill-child: if unshare dies (with the test: PDEATHSIG), so does
         * procmesh, PID 1 of the namespace, and with it everything in it. */
        char *argv[] = {"unshare", "--pid", "--kill-child", "--mount-proc", PM_DAEMON_BIN, "run",
                        "--workers", "1", "--ready", "exec", "--", "sh", "-c", script, NULL};
        char env0[] = "PATH=/usr/bin:/bin:/usr/sbin:/sbin", mark[512];
        char *envp[] = {env0, pm_test_run_env(mark, sizeof(mark)), NULL};
        execve("/usr/bin/unshare", argv, envp);
        _exit(127);
    }
    close(p[1]);
    /* procmesh: unshare's only child. */
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)u, (int)u);
    int daemon = 0;
    FILE *f;
    WAIT_FOR((f = fopen(path, "r")) != NULL && (fscanf(f, "%d", &daemon) == 1 || (daemon = 0, 1)) &&
                 (fclose(f), daemon > 0),
             10000);
    /* The orphan runs; let it end, and wait until procmesh reaped it (its
     * /proc entry stays while it is a zombie). */
    int orphan = 0;
    WAIT_FOR((orphan = find_cat(fifo)) > 0, 10000);
    int w = open(fifo, O_WRONLY);
    ck_assert_int_ge(w, 0);
    close(w);
    char proc[32];
    snprintf(proc, sizeof(proc), "/proc/%d", orphan);
    WAIT_FOR(access(proc, F_OK) != 0, 10000);
    kill(daemon, SIGTERM);
    int status = pm_test_reap(u, 15000);
    char out[16384];
    pm_test_read_all(p[0], out, sizeof(out));
    unlink(fifo);
    rmdir(dir);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d: %s", status, out);
    ck_assert_msg(strstr(out, "event=drain_end workers_killed=false orphans_reaped=1") != NULL,
                  "log: %s", out);
}
END_TEST

int main(void)
{
    /* unshare(CLONE_NEWPID) needs privilege (root, or a user namespace). */
    if (system("unshare --pid --kill-child --mount-proc true >/dev/null 2>&1") != 0)
        pm_test_skip("cannot create a PID namespace here (unshare --pid refused)");
    Suite *s = suite_create("pid1");
    PM_ADD_TEST(s, test_pid1_reaps_orphans_and_drains, 60);
    return pm_test_main(s);
}
