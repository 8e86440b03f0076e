/* SPDX-License-Identifier: MIT */
/*
 * check_badinput.c - every PM_EXTERN function given bad input: NULL, sizes
 * out of range, a handle of the wrong kind, a call from the wrong process (a
 * cluster used in a fork of its supervisor, a node used in a child of its
 * worker). Each returns its documented negative errno (or its documented
 * neutral value) and changes nothing. Goes through the public, shared
 * library only.
 */
#include "helpers.h"

#include <procmesh.h>
#include <signal.h>
#include <string.h>

#include <sys/wait.h>

/* One row: a call with bad input and what it must return. */
typedef struct row {
    const char *what;
    long got;
    long want;
} row;

#define ROW(call, expect) {#call, (long)(call), (long)(expect)}

static void check_rows(const row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(rows[i].got == rows[i].want, "%s returned %ld, expected %ld", rows[i].what,
                      rows[i].got, rows[i].want);
}

/* Check's fork mode leaves a SIGTERM handler that kills the test's
 * process group; a fork-mode worker inherits it, so it is reset here. */
static void worker_init(void)
{
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
}

static int boot_idle(pm_node *n, void *arg)
{
    (void)arg;
    worker_init();
    if (pm_node_ready(n) < 0)
        return 50;
    pm_message m;
    while (pm_node_recv(n, &m, -1) == 0)
        ;
    return 0;
}

static void cb_msg(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)c, (void)m, (void)arg;
}

static void cb_bcast(pm_cluster *c, const pm_message *r, size_t n, void *arg)
{
    (void)c, (void)r, (void)n, (void)arg;
}

static void cb_fd(pm_cluster *c, int fd, void *arg)
{
    (void)c, (void)fd, (void)arg;
}

static void cb_event(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)c, (void)e, (void)arg;
}

static void cb_down(pm_cluster *c, unsigned s, const pm_address *a, unsigned r, void *arg)
{
    (void)c, (void)s, (void)a, (void)r, (void)arg;
}

START_TEST(test_without_a_handle)
{
    pm_address a;
    char buf[8];
    int fds[1] = {0};
    const void *data;
    size_t len;
    pm_message m;
    memset(&m, 0, sizeof(m));
    const row rows[] = {
        ROW(pm_address_format(NULL, buf, sizeof(buf)), -EINVAL),
        ROW(pm_address_format(&a, NULL, 8), -EINVAL),
        ROW(pm_address_parse(NULL, &a), -EINVAL),
        ROW(pm_address_parse("a@b:1", NULL), -EINVAL),
        ROW(pm_address_parse("", &a), -EINVAL),
        ROW(pm_address_match(NULL, &a), 0),
        ROW(pm_reason_name(-1) != NULL && strcmp(pm_reason_name(-1), "unknown") == 0, 1),
        ROW(pm_reason_name(PM_REASON__COUNT) != NULL, 1),
        ROW(pm_slot_state_name(-1) != NULL, 1),
        ROW(pm_strerror(-EINVAL) != NULL, 1),
        ROW(pm_options_set_workers(NULL, 1), -EINVAL),
        ROW(pm_options_set_bootstrap(NULL, boot_idle, NULL), -EINVAL),
        ROW(pm_options_set_exec(NULL, "/bin/true", NULL), -EINVAL),
        ROW(pm_options_set_pass_fds(NULL, fds, 1), -EINVAL),
        ROW(pm_options_set_system_name(NULL, "x"), -EINVAL),
        ROW(pm_options_set_hostname(NULL, "x"), -EINVAL),
        ROW(pm_options_set_base_port(NULL, 1), -EINVAL),
        ROW(pm_options_set_init_data(NULL, "x", 1), -EINVAL),
        ROW(pm_options_set_restart_policy(NULL, PM_RESTART_NEVER), -EINVAL),
        ROW(pm_options_set_ready_timeout_ms(NULL, 1), -EINVAL),
        ROW(pm_options_set_restart_min_backoff_ms(NULL, 1), -EINVAL),
        ROW(pm_options_set_restart_max_backoff_ms(NULL, 1), -EINVAL),
        ROW(pm_options_set_restart_random_factor(NULL, 0.1), -EINVAL),
        ROW(pm_options_set_max_restarts(NULL, 1), -EINVAL),
        ROW(pm_options_set_restart_window_ms(NULL, 1), -EINVAL),
        ROW(pm_options_set_stop_timeout_ms(NULL, 1), -EINVAL),
        ROW(pm_options_set_on_permanently_down(NULL, cb_down, NULL), -EINVAL),
        ROW(pm_options_set_on_event(NULL, cb_event, NULL), -EINVAL),
        ROW(pm_options_set_handle_signals(NULL, 1), -EINVAL),
        ROW(pm_options_set_hub_spin_us(NULL, 1), -EINVAL),
        ROW(pm_options_set_direct_lanes(NULL, 1), -EINVAL),
        ROW(pm_options_set_heartbeat_timeout_ms(NULL, 1), -EINVAL),
        ROW(pm_options_set_ring_size(NULL, 65536), -EINVAL),
        ROW(pm_options_set_max_message(NULL, PM_MAX_PAYLOAD), -EINVAL),
        ROW(pm_options_set_ready_mode(NULL, PM_READY_MESH), -EINVAL),
        ROW(pm_options_set_listen_fds(NULL, fds, NULL, 1), -EINVAL),
        ROW(pm_options_set_reap_orphans(NULL, 1), -EINVAL),
        ROW(pm_options_set_on_message(NULL, cb_msg, NULL), -EINVAL),
        ROW(pm_options_validate(NULL, NULL, 0), -EINVAL),
        ROW(pm_cluster_spawn(NULL, NULL), -EINVAL),
        ROW(pm_cluster_size(NULL), 0),
        ROW(pm_cluster_addresses(NULL, &a, 1), -EINVAL),
        ROW(pm_cluster_run(NULL, 0), -EINVAL),
        ROW(pm_cluster_fd(NULL), -EINVAL),
        ROW(pm_cluster_slots(NULL), 0),
        ROW(pm_cluster_slot_info(NULL, 0, NULL), -EINVAL),
        ROW(pm_cluster_stats(NULL, NULL), -EINVAL),
        ROW(pm_cluster_restart_slot(NULL, 0), -EINVAL),
        ROW(pm_cluster_set_secrets(NULL, (const unsigned char *)"k", 1), -EINVAL),
        ROW(pm_cluster_watch_fd(NULL, 0, cb_fd, NULL), -EINVAL),
        ROW(pm_cluster_unwatch_fd(NULL, 0), -EINVAL),
        ROW(pm_cluster_last_signal(NULL), 0),
        ROW(pm_cluster_terminate(NULL), -EINVAL),
        ROW(pm_cluster_send(NULL, &a, "x", 1), -EINVAL),
        ROW(pm_cluster_reply(NULL, &m, "x", 1), -EINVAL),
        ROW(pm_cluster_broadcast(NULL, "x", 1, 100, cb_bcast, NULL), -EINVAL),
        ROW(pm_cluster_self(NULL, &a), -EINVAL),
        ROW(pm_node_join(NULL), -EINVAL),
        ROW(pm_node_self(NULL) == NULL, 1),
        ROW(pm_node_slot(NULL), 0),
        ROW(pm_node_init_data(NULL, &data, &len), -EINVAL),
        ROW(pm_node_ready(NULL), -EINVAL),
        ROW(pm_node_send(NULL, &a, "x", 1), -EINVAL),
        ROW(pm_node_try_send(NULL, &a, "x", 1), -EINVAL),
        ROW(pm_node_recv(NULL, &m, 0), -EINVAL),
        ROW(pm_node_request(NULL, &a, "x", 1, 10, &m), -EINVAL),
        ROW(pm_node_reply(NULL, &m, "x", 1), -EINVAL),
        ROW(pm_node_fd(NULL), -EINVAL),
        ROW(pm_node_beat(NULL), -EINVAL),
    };
    check_rows(rows, ARRAY_LEN(rows));
    pm_node_close(NULL);   /* accepted, nothing happens */
    pm_options_free(NULL); /* likewise */
    pm_cluster_stop(NULL); /* likewise */
}
END_TEST

START_TEST(test_options_out_of_range)
{
    pm_options *o = pm_options_new();
    ck_assert_ptr_nonnull(o);
    int fds[PM_MAX_WORKERS + 1];
    for (size_t i = 0; i < ARRAY_LEN(fds); i++)
        fds[i] = 0;
    static char big[PM_MAX_INIT_DATA + 1];
    char *argv[] = {"x", NULL};
    const row rows[] = {
        ROW(pm_options_set_workers(o, -1), -EINVAL),
        ROW(pm_options_set_workers(o, PM_MAX_WORKERS + 1), -EINVAL),
        ROW(pm_options_set_bootstrap(o, NULL, NULL), -EINVAL),
        ROW(pm_options_set_exec(o, NULL, argv), -EINVAL),
        ROW(pm_options_set_exec(o, "", argv), -EINVAL),
        ROW(pm_options_set_pass_fds(o, NULL, 1), -EINVAL),
        ROW(pm_options_set_pass_fds(o, fds, (size_t)-1), -EINVAL),
        ROW(pm_options_set_system_name(o, NULL), -EINVAL),
        ROW(pm_options_set_system_name(o, ""), -EINVAL),
        ROW(pm_options_set_system_name(o, "bad name"), -EINVAL),
        ROW(pm_options_set_hostname(o, "a@b"), -EINVAL),
        ROW(pm_options_set_base_port(o, -1), -EINVAL),
        ROW(pm_options_set_base_port(o, 65536), -EINVAL),
        ROW(pm_options_set_init_data(o, NULL, 1), -EINVAL),
        ROW(pm_options_set_init_data(o, big, sizeof(big)), -EINVAL),
        ROW(pm_options_set_restart_policy(o, 0), -EINVAL),
        ROW(pm_options_set_restart_policy(o, 4), -EINVAL),
        ROW(pm_options_set_ready_timeout_ms(o, 0), -EINVAL),
        ROW(pm_options_set_restart_min_backoff_ms(o, -1), -EINVAL),
        ROW(pm_options_set_restart_max_backoff_ms(o, -1), -EINVAL),
        ROW(pm_options_set_restart_random_factor(o, -0.1), -EINVAL),
        ROW(pm_options_set_restart_random_factor(o, 1.1), -EINVAL),
        ROW(pm_options_set_max_restarts(o, -2), -EINVAL),
        ROW(pm_options_set_max_restarts(o, PM_MAX_RESTARTS_LIMIT + 1), -EINVAL),
        ROW(pm_options_set_stop_timeout_ms(o, -1), -EINVAL),
        ROW(pm_options_set_hub_spin_us(o, -1), -EINVAL),
        ROW(pm_options_set_direct_lanes(o, 2), -EINVAL),
        ROW(pm_options_set_direct_lanes(o, -1), -EINVAL),
        ROW(pm_options_set_heartbeat_timeout_ms(o, -1), -EINVAL),
        ROW(pm_options_set_ring_size(o, 1), -EINVAL),
        ROW(pm_options_set_max_message(o, PM_MAX_PAYLOAD - 1), -EINVAL),
        ROW(pm_options_set_ready_mode(o, 99), -EINVAL),
        ROW(pm_options_set_listen_fds(o, NULL, NULL, 1), -EINVAL),
    };
    check_rows(rows, ARRAY_LEN(rows));
    /* Nothing changed: the options still validate as new ones, after a
     * bootstrap (the one required setting). */
    ck_assert_int_eq(pm_options_set_bootstrap(o, boot_idle, NULL), 0);
    char why[128];
    ck_assert_int_eq(pm_options_validate(o, why, sizeof(why)), 0);
    pm_options_free(o);
}
END_TEST

/* A live cluster: bad arguments, a handle of the wrong kind, and the same
 * cluster used in a fork of the supervisor. */
START_TEST(test_cluster_misuse)
{
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, 1);
    pm_options_set_bootstrap(o, boot_idle, NULL);
    pm_options_set_stop_timeout_ms(o, 2000);
    pm_options_set_max_message(o, PM_MAX_PAYLOAD); /* so that big (one byte more) is too large */
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    pm_address a, self;
    ck_assert_int_eq(pm_cluster_addresses(c, &a, 1), 1);
    ck_assert_int_eq(pm_cluster_self(c, &self), 0);
    pm_slot_info si;
    pm_message m;
    memset(&m, 0, sizeof(m));
    static char big[PM_MAX_PAYLOAD + 1];
    pm_address nowhere = a;
    nowhere.port = 999;
    const row rows[] = {
        ROW(pm_cluster_addresses(c, NULL, 1), -EINVAL),
        ROW(pm_cluster_slot_info(c, 1, &si), -EINVAL),
        ROW(pm_cluster_slot_info(c, 0, NULL), -EINVAL),
        ROW(pm_cluster_stats(c, NULL), -EINVAL),
        ROW(pm_cluster_restart_slot(c, 7), -EINVAL),
        ROW(pm_cluster_set_secrets(c, NULL, 1), -ENOTCONN), /* not in peer mode */
        ROW(pm_cluster_watch_fd(c, -1, cb_fd, NULL), -EINVAL),
        ROW(pm_cluster_watch_fd(c, 0, NULL, NULL), -EINVAL),
        ROW(pm_cluster_unwatch_fd(c, 12345), -ENOENT),
        ROW(pm_cluster_send(c, NULL, "x", 1), -ENOENT),
        ROW(pm_cluster_send(c, &a, NULL, 1), -EINVAL),
        ROW(pm_cluster_send(c, &a, big, sizeof(big)), -EMSGSIZE),
        ROW(pm_cluster_send(c, &nowhere, "x", 1), -ENOENT),
        ROW(pm_cluster_send(c, &self, "x", 1), -EINVAL),
        ROW(pm_cluster_reply(c, NULL, "x", 1), -EINVAL),
        ROW(pm_cluster_reply(c, &m, "x", 1), -EINVAL), /* not a request */
        ROW(pm_cluster_broadcast(c, "x", 1, 0, cb_bcast, NULL), -EINVAL),
        ROW(pm_cluster_broadcast(c, "x", 1, 100, NULL, NULL), -EINVAL),
        ROW(pm_cluster_broadcast(c, big, sizeof(big), 100, cb_bcast, NULL), -EMSGSIZE),
        ROW(pm_cluster_self(c, NULL), -EINVAL),
        /* A handle of the wrong kind: options passed as a cluster. */
        ROW(pm_cluster_run((pm_cluster *)(void *)o, 0), -EINVAL),
        ROW(pm_cluster_terminate((pm_cluster *)(void *)o), -EINVAL),
        ROW(pm_node_send((pm_node *)(void *)c, &a, "x", 1), -EINVAL),
    };
    check_rows(rows, ARRAY_LEN(rows));

    /* The cluster in a fork of the supervisor: refused, and the real one is
     * untouched (its worker is still there, ready, same incarnation). */
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int bad = 0;
        bad += pm_cluster_run(c, 0) != -EPERM;
        bad += pm_cluster_send(c, &a, "x", 1) != -EPERM;
        bad += pm_cluster_restart_slot(c, 0) != -EPERM;
        bad += pm_cluster_set_secrets(c, NULL, 1) != -EPERM;
        bad += pm_cluster_slot_info(c, 0, &si) != -EPERM;
        bad += pm_cluster_fd(c) != -EPERM;
        bad += pm_cluster_slots(c) != 0;
        bad += pm_cluster_terminate(c) != -EPERM;
        pm_cluster_stop(c);
        _exit(bad);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "calls in the fork were not all refused");
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    ck_assert_int_eq(si.state, PM_SLOT_READY);
    ck_assert_uint_eq(si.incarnation, 1);
    ck_assert_int_eq(kill(si.pid, 0), 0);
    ck_assert_int_eq(pm_cluster_run(c, 50), 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
}
END_TEST

/* A worker's node used in a child of the worker: refused. The worker
 * reports the outcome as its exit code. */
static int boot_fork_child_uses_node(pm_node *n, void *arg)
{
    (void)arg;
    worker_init();
    if (pm_node_ready(n) < 0)
        return 50;
    pm_address main_addr;
    memset(&main_addr, 0, sizeof(main_addr));
    strcpy(main_addr.system, "procmesh");
    strcpy(main_addr.host, "main");
    pid_t pid = fork();
    if (pid == 0) {
        int bad = 0;
        bad += pm_node_send(n, &main_addr, "x", 1) != -EPERM;
        pm_message m;
        bad += pm_node_recv(n, &m, 0) != -EPERM;
        bad += pm_node_beat(n) != -EPERM;
        bad += pm_node_fd(n) != -EPERM;
        pm_node_close(n); /* refused silently: a fork-mode node is procmesh's */
        _exit(bad);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        return 60;
    if (WEXITSTATUS(st) != 0)
        return 61;
    /* Nor is it the worker's to close: its close does nothing. */
    pm_node_close(n);
    /* The worker's own node still works. */
    return pm_node_send(n, &main_addr, "ok", 2) == 0 ? 7 : 62;
}

static int worker_code = -1;
static void on_event_code(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)c, (void)arg;
    if (e->type == PM_EVENT_EXITED && worker_code < 0)
        worker_code = e->exit_code;
}

START_TEST(test_node_in_child)
{
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, 1);
    pm_options_set_bootstrap(o, boot_fork_child_uses_node, NULL);
    pm_options_set_restart_policy(o, PM_RESTART_NEVER);
    pm_options_set_on_event(o, on_event_code, NULL);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    PM_RUN_UNTIL(c, worker_code >= 0, 20000);
    ck_assert_int_eq(worker_code, 7);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("badinput");
    PM_ADD_TEST(s, test_without_a_handle, 30);
    PM_ADD_TEST(s, test_options_out_of_range, 30);
    PM_ADD_TEST(s, test_cluster_misuse, 60);
    PM_ADD_TEST(s, test_node_in_child, 60);
    return pm_test_main(s);
}
