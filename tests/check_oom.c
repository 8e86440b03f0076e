/* SPDX-License-Identifier: MIT */
/*
 * check_oom.c - a worker killed by the kernel's OOM killer is logged by
 * procmesh as reason=oom (from the memory cgroup's oom_kill count). Runs
 * procmesh inside a fresh memory cgroup with a small limit. Skipped (77)
 * where no memory cgroup can be created here, with the reason.
 */
#include "helpers.h"

#include <fcntl.h>
#include <sys/stat.h>

static char cg[512];

/* A v1 memory cgroup below ours; "" when not possible. */
static int make_cgroup(void)
{
    char line[512];
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f == NULL)
        return -1;
    char rel[400] = "";
    while (fgets(line, sizeof(line), f) != NULL) {
        char *m = strstr(line, ":memory:");
        if (m != NULL) {
            snprintf(rel, sizeof(rel), "%s", m + 8);
            rel[strcspn(rel, "\n")] = '\0';
        }
    }
    fclose(f);
    if (rel[0] == '\0')
        return -1;
    snprintf(cg, sizeof(cg), "/sys/fs/cgroup/memory%s/pm-oom-%d", strcmp(rel, "/") ? rel : "",
             (int)getpid());
    if (mkdir(cg, 0755) < 0)
        return -1;
    char path[600];
    snprintf(path, sizeof(path), "%s/memory.limit_in_bytes", cg);
    int fd = open(path, O_WRONLY);
    int ok = fd >= 0 && write(fd, "67108864", 8) == 8;
    if (fd >= 0)
        close(fd);
    snprintf(path, sizeof(path), "%s/memory.memsw.limit_in_bytes", cg);
    fd = open(path, O_WRONLY); /* no swap escape, where swap accounting exists */
    if (fd >= 0) {
        ssize_t w = write(fd, "67108864", 8);
        (void)w;
        close(fd);
    }
    if (!ok) {
        rmdir(cg);
        return -1;
    }
    return 0;
}

START_TEST(test_oom_logged)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t d = pm_test_fork();
    ck_assert_int_ge(d, 0);
    if (d == 0) {
        char path[600];
        snprintf(path, sizeof(path), "%s/cgroup.procs", cg);
        int fd = open(path, O_WRONLY);
        if (fd < 0 || write(fd, "0", 1) != 1)
            _exit(120);
        close(fd);
        dup2(p[1], 2);
        char *argv[] = {"procmesh", "run", "--workers", "1", "--ready", "exec", "--max-restarts", "0",
                        "--", PM_TEST_WORKER, "hog", NULL};
        char env0[] = "PATH=/usr/bin:/bin", mark[512];
        char *envp[] = {env0, pm_test_run_env(mark, sizeof(mark)), NULL};
        execve(PM_DAEMON_BIN, argv, envp);
        _exit(127);
    }
    close(p[1]);
    /* The hog is OOM-killed, the slot retired (max-restarts 0): exit 3. */
    int status = pm_test_reap(d, 30000);
    char out[16384];
    pm_test_read_all(p[0], out, sizeof(out));
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 3, "status %d: %s", status, out);
    ck_assert_msg(strstr(out, "event=exited slot=0") != NULL && strstr(out, "reason=oom") != NULL,
                  "log: %s", out);
}
END_TEST

int main(void)
{
    if (geteuid() != 0 || make_cgroup() < 0)
        pm_test_skip("cannot create a memory cgroup (cgroup v1 memory controller, as root) here");
    Suite *s = suite_create("oom");
    PM_ADD_TEST(s, test_oom_logged, 60);
    int rc = pm_test_main(s);
    rmdir(cg);
    return rc;
}
