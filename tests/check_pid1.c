/*
 * check_pid1.c - procmesh as PID 1 of a new PID namespace (as in a
 * container): it reaps an orphaned grandchild it never started, drains on
 * SIGTERM and exits 0. Skipped (77) where unshare(CLONE_NEWPID) is not
 * permitted (an unprivileged container), with the reason.
 */
#include "helpers.h"

#include <fcntl.h>

START_TEST(test_pid1_reaps_orphans_and_drains)
{
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    pid_t u = fork();
    ck_assert_int_ge(u, 0);
    if (u == 0) {
        dup2(p[1], 2);
        /* The worker's subshell leaves an orphan (sleep 0.3) behind, then
         * becomes a long sleep. */
        char *argv[] = {"unshare", "--pid", "--fork", "--mount-proc", PM_DAEMON_BIN, "run",
                        "--workers", "1", "--ready", "exec", "--", "sh", "-c",
                        "(sleep 0.3 &); exec sleep 100", NULL};
        char *envp[] = {"PATH=/usr/bin:/bin:/usr/sbin:/sbin", NULL};
        execve("/usr/bin/unshare", argv, envp);
        _exit(127);
    }
    close(p[1]);
    /* Find procmesh: unshare's only child. */
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)u, (int)u);
    int daemon = 0;
    for (int i = 0; i < 200 && daemon == 0; i++) {
        usleep(20000);
        FILE *f = fopen(path, "r");
        if (f != NULL) {
            if (fscanf(f, "%d", &daemon) != 1)
                daemon = 0;
            fclose(f);
        }
    }
    ck_assert_int_gt(daemon, 0);
    usleep(1200000); /* the orphan exits after 0.3 s and must be reaped */
    kill(daemon, SIGTERM);
    int status = pm_test_reap(u, 15000);
    char out[16384];
    pm_test_read_all(p[0], out, sizeof(out));
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d: %s", status, out);
    ck_assert_msg(strstr(out, "event=drain_end workers_killed=false orphans_reaped=1") != NULL,
                  "log: %s", out);
}
END_TEST

int main(void)
{
    /* unshare(CLONE_NEWPID) needs privilege (root, or a user namespace). */
    if (system("unshare --pid --fork --mount-proc true >/dev/null 2>&1") != 0)
        pm_test_skip("cannot create a PID namespace here (unshare --pid refused)");
    Suite *s = suite_create("pid1");
    PM_ADD_TEST(s, test_pid1_reaps_orphans_and_drains, 60);
    return pm_test_main(s);
}
