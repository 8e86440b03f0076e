/* SPDX-License-Identifier: MIT */
/* check_options.c - pm_options setters, validation messages, auto workers. */
#include "helpers.h"

#include <sys/resource.h>

#include "supervisor/options.h"

static int boot(pm_node *n, void *arg)
{
    (void)n;
    (void)arg;
    return 0;
}

/* The defaults are check_api's test_header_defaults; here, the ranges. */
START_TEST(test_ranges)
{
    pm_options *o = pm_options_new();
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(pm_options_set_workers(o, -1), -EINVAL);
    ck_assert_int_eq(pm_options_set_workers(o, PM_MAX_WORKERS + 1), -EINVAL);
    ck_assert_int_eq(pm_options_set_workers(o, 3), 0);
    ck_assert_int_eq(o->workers, 3);
    ck_assert_int_eq(pm_options_set_bootstrap(o, NULL, NULL), -EINVAL);
    ck_assert_int_eq(pm_options_set_exec(o, NULL, NULL), -EINVAL);
    ck_assert_int_eq(pm_options_set_exec(o, "", NULL), -EINVAL);
    ck_assert_int_eq(pm_options_set_system_name(o, "bad name"), -EINVAL);
    ck_assert_int_eq(pm_options_set_system_name(o, ""), -EINVAL);
    ck_assert_int_eq(pm_options_set_system_name(o, NULL), -EINVAL);
    ck_assert_str_eq(o->system_name, "procmesh"); /* unchanged on error */
    ck_assert_int_eq(pm_options_set_hostname(o, "h.example-1"), 0);
    ck_assert_int_eq(pm_options_set_base_port(o, 65536), -EINVAL);
    ck_assert_int_eq(pm_options_set_base_port(o, -1), -EINVAL);
    char big[PM_MAX_INIT_DATA + 1];
    memset(big, 1, sizeof(big));
    ck_assert_int_eq(pm_options_set_init_data(o, big, sizeof(big)), -EINVAL);
    ck_assert_int_eq(pm_options_set_init_data(o, big, PM_MAX_INIT_DATA), 0);
    ck_assert_int_eq(pm_options_set_init_data(o, NULL, 5), -EINVAL);
    ck_assert_int_eq(pm_options_set_restart_policy(o, 0), -EINVAL);
    ck_assert_int_eq(pm_options_set_restart_policy(o, PM_RESTART_NEVER), 0);
    ck_assert_int_eq(pm_options_set_ready_timeout_ms(o, 0), -EINVAL);
    ck_assert_int_eq(pm_options_set_restart_min_backoff_ms(o, -1), -EINVAL);
    ck_assert_int_eq(pm_options_set_restart_min_backoff_ms(o, 0), 0);
    ck_assert_int_eq(pm_options_set_restart_random_factor(o, 1.01), -EINVAL);
    ck_assert_int_eq(pm_options_set_restart_random_factor(o, -0.1), -EINVAL);
    ck_assert_int_eq(pm_options_set_restart_random_factor(o, 0.0 / 0.0), -EINVAL);
    ck_assert_int_eq(pm_options_set_restart_random_factor(o, 1.0), 0);
    ck_assert_int_eq(pm_options_set_max_restarts(o, -2), -EINVAL);
    ck_assert_int_eq(pm_options_set_max_restarts(o, PM_MAX_RESTARTS_LIMIT + 1), -EINVAL);
    ck_assert_int_eq(pm_options_set_max_restarts(o, -1), 0);
    ck_assert_int_eq(pm_options_set_restart_window_ms(o, -1), -EINVAL);
    ck_assert_int_eq(pm_options_set_restart_window_ms(o, 0), 0);
    ck_assert_int_eq(pm_options_set_stop_timeout_ms(o, -5), -EINVAL);
    ck_assert_int_eq(pm_options_set_ring_size(o, 4096), -EINVAL);
    ck_assert_int_eq(pm_options_set_ring_size(o, 3 << 20), -EINVAL);
    ck_assert_int_eq(pm_options_set_ring_size(o, 1 << 17), -EINVAL);
    ck_assert_int_eq(pm_options_set_ring_size(o, 1 << 18), 0);
    int fds[2] = {5, -1};
    ck_assert_int_eq(pm_options_set_pass_fds(o, fds, 2), -EINVAL);
    ck_assert_int_eq(pm_options_set_handle_signals(o, 2), -EINVAL);
    pm_options_free(o);
    pm_options_free(NULL);
}
END_TEST

START_TEST(test_validate)
{
    char why[256];
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, 2);
    ck_assert_int_eq(pm_options_validate(o, why, sizeof(why)), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "bootstrap/exec"));
    ck_assert_int_eq(pm_options_set_bootstrap(o, boot, NULL), 0);
    ck_assert_int_eq(pm_options_validate(o, why, sizeof(why)), 0);
    ck_assert_str_eq(why, "");
    char *argv[] = {"x", NULL};
    ck_assert_int_eq(pm_options_set_exec(o, "/bin/true", argv), 0);
    ck_assert_int_eq(pm_options_validate(o, why, sizeof(why)), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "both"));
    pm_options_free(o);

    o = pm_options_new();
    pm_options_set_exec(o, "/bin/true", NULL);
    pm_options_set_workers(o, 10);
    pm_options_set_base_port(o, 65530);
    ck_assert_int_eq(pm_options_validate(o, why, sizeof(why)), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "base_port: 65530"));
    pm_options_set_base_port(o, 65526);
    ck_assert_int_eq(pm_options_validate(o, why, sizeof(why)), 0);
    pm_options_set_restart_min_backoff_ms(o, 500);
    pm_options_set_restart_max_backoff_ms(o, 100);
    ck_assert_int_eq(pm_options_validate(o, why, sizeof(why)), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "restart_max_backoff_ms: 100"));
    pm_options_set_restart_max_backoff_ms(o, 500);
    int fds[2] = {0, 0};
    ck_assert_int_eq(pm_options_set_pass_fds(o, fds, 2), 0);
    ck_assert_int_eq(pm_options_validate(o, why, sizeof(why)), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "twice"));
    ck_assert_int_eq(pm_options_validate(o, NULL, 0), -EINVAL);
    ck_assert_int_eq(pm_options_validate(NULL, why, sizeof(why)), -EINVAL);
    pm_options_free(o);

    /* Spawning with invalid options fails before starting anything. */
    pm_cluster *c = (pm_cluster *)1;
    o = pm_options_new();
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -EINVAL);
    ck_assert_ptr_null(c);
    pm_options_free(o);
}
END_TEST

START_TEST(test_cpu_max)
{
    ck_assert_int_eq(pm__cpu_max_parse("max 100000\n"), 0);
    ck_assert_int_eq(pm__cpu_max_parse("100000 100000\n"), 1);
    ck_assert_int_eq(pm__cpu_max_parse("150000 100000"), 2);
    ck_assert_int_eq(pm__cpu_max_parse("50000 100000"), 1);
    ck_assert_int_eq(pm__cpu_max_parse("400000 100000"), 4);
    ck_assert_int_eq(pm__cpu_max_parse(""), -EINVAL);
    ck_assert_int_eq(pm__cpu_max_parse("max"), -EINVAL);
    ck_assert_int_eq(pm__cpu_max_parse("-5 100000"), -EINVAL);
    ck_assert_int_eq(pm__cpu_max_parse("0 100000"), -EINVAL);
    ck_assert_int_eq(pm__cpu_max_parse("100 0"), -EINVAL);
    ck_assert_int_eq(pm__cpu_max_parse("abc 100000"), -EINVAL);
    ck_assert_int_eq(pm__cpu_max_parse("1 2 3"), -EINVAL);
    ck_assert_int_eq(pm__cpu_max_parse(NULL), -EINVAL);
    int n = pm__cpus_available();
    ck_assert_int_ge(n, 1);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    ck_assert_int_le(n, online > 0 ? online : n);
    pm_options *o = pm_options_new();
    ck_assert_int_eq(pm__options_workers(o), n);
    pm_options_free(o);
}
END_TEST

/*
 * pm_options(3): "Every setter checks its value alone and returns -EINVAL
 * for a value out of range, leaving the object unchanged." One row per
 * bound pm_options(3) names: the value just past it is refused and the
 * object's bytes are exactly what they were; the value at it is taken. A
 * new bound is a new row.
 */
#define REFUSED(call)                                                                      \
    do {                                                                                   \
        struct pm_options before_;                                                         \
        memcpy(&before_, o, sizeof(before_));                                              \
        int rc_ = (call);                                                                  \
        ck_assert_msg(rc_ == -EINVAL, "%s returned %d, want -EINVAL", #call, rc_);         \
        ck_assert_msg(memcmp(&before_, o, sizeof(before_)) == 0, "%s changed the options", \
                      #call);                                                              \
    } while (0)
#define TAKEN(call)                                                       \
    do {                                                                  \
        int rc_ = (call);                                                 \
        ck_assert_msg(rc_ == 0, "%s returned %d, want 0", #call, rc_);    \
    } while (0)

START_TEST(test_every_setter_bound)
{
    pm_options *o = pm_options_new();
    ck_assert_ptr_nonnull(o);
    char n63[64], n64[65];
    memset(n63, 'n', 63);
    n63[63] = '\0';
    memset(n64, 'n', 64);
    n64[64] = '\0';
    static char init[PM_MAX_INIT_DATA + 1];
    int fds[65];
    for (int i = 0; i < 65; i++)
        fds[i] = 100 + i;
    int negfd[2] = {3, -1};
    static const char *const empty_name[] = {""};
    static const char *const colon_name[] = {"a:b"};
    const char *const long_name[] = {n64};
    const char *const good_names[] = {n63, NULL};

    /* What runs in each slot. */
    REFUSED(pm_options_set_bootstrap(o, NULL, NULL));
    REFUSED(pm_options_set_exec(o, NULL, NULL));
    REFUSED(pm_options_set_exec(o, "", NULL));
    REFUSED(pm_options_set_pass_fds(o, fds, 65)); /* up to 64 */
    REFUSED(pm_options_set_pass_fds(o, negfd, 2));
    TAKEN(pm_options_set_pass_fds(o, fds, 64));
    REFUSED(pm_options_set_listen_fds(o, fds, empty_name, 1));
    REFUSED(pm_options_set_listen_fds(o, fds, long_name, 1));
    REFUSED(pm_options_set_listen_fds(o, fds, colon_name, 1));
    REFUSED(pm_options_set_listen_fds(o, fds, NULL, 65));
    TAKEN(pm_options_set_listen_fds(o, fds, good_names, 2));
    TAKEN(pm_options_set_listen_fds(o, fds, NULL, 64));
    REFUSED(pm_options_set_ready_mode(o, 0));
    REFUSED(pm_options_set_ready_mode(o, PM_READY_NOTIFY + 1));
    TAKEN(pm_options_set_ready_mode(o, PM_READY_NOTIFY));
    TAKEN(pm_options_set_ready_mode(o, PM_READY_MESH));

    /* Names and data. */
    REFUSED(pm_options_set_workers(o, -1));
    REFUSED(pm_options_set_workers(o, PM_MAX_WORKERS + 1));
    TAKEN(pm_options_set_workers(o, PM_MAX_WORKERS));
    TAKEN(pm_options_set_workers(o, 0));
    REFUSED(pm_options_set_system_name(o, ""));
    REFUSED(pm_options_set_system_name(o, n64));
    REFUSED(pm_options_set_system_name(o, "a/b"));
    REFUSED(pm_options_set_hostname(o, n64));
    REFUSED(pm_options_set_hostname(o, "a:b"));
    TAKEN(pm_options_set_system_name(o, n63));
    TAKEN(pm_options_set_hostname(o, "AZaz09._-"));
    REFUSED(pm_options_set_base_port(o, -1));
    REFUSED(pm_options_set_base_port(o, 65536));
    TAKEN(pm_options_set_base_port(o, 65535));
    TAKEN(pm_options_set_base_port(o, 0));
    REFUSED(pm_options_set_init_data(o, init, PM_MAX_INIT_DATA + 1));
    TAKEN(pm_options_set_init_data(o, init, PM_MAX_INIT_DATA));

    /* Restarts. */
    REFUSED(pm_options_set_restart_policy(o, 0));
    REFUSED(pm_options_set_restart_policy(o, PM_RESTART_NEVER + 1));
    TAKEN(pm_options_set_restart_policy(o, PM_RESTART_ALWAYS));
    REFUSED(pm_options_set_ready_timeout_ms(o, 0)); /* > 0 */
    TAKEN(pm_options_set_ready_timeout_ms(o, 1));
    REFUSED(pm_options_set_restart_min_backoff_ms(o, -1));
    REFUSED(pm_options_set_restart_max_backoff_ms(o, -1));
    TAKEN(pm_options_set_restart_min_backoff_ms(o, 0));
    TAKEN(pm_options_set_restart_max_backoff_ms(o, 0));
    REFUSED(pm_options_set_restart_random_factor(o, -1e-9));
    REFUSED(pm_options_set_restart_random_factor(o, 1.0 + 1e-9));
    REFUSED(pm_options_set_restart_random_factor(o, 0.0 / 0.0));
    TAKEN(pm_options_set_restart_random_factor(o, 0.0));
    TAKEN(pm_options_set_restart_random_factor(o, 1.0));
    REFUSED(pm_options_set_max_restarts(o, -2));
    REFUSED(pm_options_set_max_restarts(o, PM_MAX_RESTARTS_LIMIT + 1));
    TAKEN(pm_options_set_max_restarts(o, PM_MAX_RESTARTS_LIMIT));
    TAKEN(pm_options_set_max_restarts(o, -1));
    REFUSED(pm_options_set_restart_window_ms(o, -1));
    TAKEN(pm_options_set_restart_window_ms(o, 0));
    REFUSED(pm_options_set_stop_timeout_ms(o, -1));
    TAKEN(pm_options_set_stop_timeout_ms(o, 0));
    REFUSED(pm_options_set_heartbeat_timeout_ms(o, -1));
    TAKEN(pm_options_set_heartbeat_timeout_ms(o, 0));

    /* The supervisor. */
    REFUSED(pm_options_set_ring_size(o, (size_t)128 << 10));
    REFUSED(pm_options_set_ring_size(o, (size_t)3 << 19)); /* not a power of two */
    REFUSED(pm_options_set_ring_size(o, (size_t)2 << 30));
    TAKEN(pm_options_set_ring_size(o, (size_t)256 << 10));
    TAKEN(pm_options_set_ring_size(o, (size_t)1 << 30));
    REFUSED(pm_options_set_max_message(o, PM_MAX_PAYLOAD - 1));
    if (sizeof(size_t) > 4)
        REFUSED(pm_options_set_max_message(o, (size_t)UINT32_MAX + 1)); /* 4 GiB - 1 */
    TAKEN(pm_options_set_max_message(o, PM_MAX_PAYLOAD));
    TAKEN(pm_options_set_max_message(o, (size_t)UINT32_MAX));
    REFUSED(pm_options_set_hub_spin_us(o, -1));
    REFUSED(pm_options_set_hub_spin_us(o, 1000001));
    TAKEN(pm_options_set_hub_spin_us(o, 1000000));
    REFUSED(pm_options_set_drain_timeout_ms(o, -1));
    TAKEN(pm_options_set_drain_timeout_ms(o, 0));
    static int (*const flags[])(pm_options *, int) = {
        pm_options_set_warm_standby,     pm_options_set_handle_signals,
        pm_options_set_reap_orphans,     pm_options_set_fence_not_draining,
        pm_options_set_kill_on_timeout,  pm_options_set_no_new_privs,
        pm_options_set_protect_supervisor, pm_options_set_insecure_no_secret,
    };
    for (size_t i = 0; i < ARRAY_LEN(flags); i++) {
        REFUSED(flags[i](o, 2));
        REFUSED(flags[i](o, -1));
        TAKEN(flags[i](o, 1));
        TAKEN(flags[i](o, 0));
    }

    /* The pool. */
    REFUSED(pm_options_set_requests_per_worker(o, 0));
    REFUSED(pm_options_set_requests_per_worker(o, 1025));
    TAKEN(pm_options_set_requests_per_worker(o, 1024));
    TAKEN(pm_options_set_requests_per_worker(o, 1));
    REFUSED(pm_options_set_request_queue_max(o, 0));
    REFUSED(pm_options_set_request_queue_max(o, 1048577));
    TAKEN(pm_options_set_request_queue_max(o, 1048576));
    TAKEN(pm_options_set_request_queue_max(o, 1));

    /* Privileges: 0 and -1 refused, (-1, -1) unsets. */
    REFUSED(pm_options_set_user(o, 0, 1000));
    REFUSED(pm_options_set_user(o, 1000, 0));
    REFUSED(pm_options_set_user(o, (uid_t)-1, 1000));
    REFUSED(pm_options_set_user(o, 1000, (gid_t)-1));
    TAKEN(pm_options_set_user(o, 1000, 1000));
    TAKEN(pm_options_set_user(o, (uid_t)-1, (gid_t)-1));
    ck_assert_int_eq(o->set_user, 0);
    TAKEN(pm_options_set_uid_range(o, 0, 0)); /* 0 unsets */
    REFUSED(pm_options_set_seccomp(o, -1));
    REFUSED(pm_options_set_seccomp(o, 99));
    TAKEN(pm_options_set_seccomp(o, PM_SECCOMP_OFF));
    REFUSED(pm_options_set_seccomp_action(o, 0));
    REFUSED(pm_options_set_seccomp_action(o, PM_SECCOMP_KILL + 1));
    TAKEN(pm_options_set_seccomp_action(o, PM_SECCOMP_KILL));
    TAKEN(pm_options_set_seccomp_action(o, PM_SECCOMP_ERRNO));
    REFUSED(pm_options_set_output(o, 0));
    REFUSED(pm_options_set_output(o, PM_OUTPUT_CAPTURE + 1));
    TAKEN(pm_options_set_output(o, PM_OUTPUT_CAPTURE));
    TAKEN(pm_options_set_output(o, PM_OUTPUT_INHERIT));

    /* Containment. */
    REFUSED(pm_options_set_containment(o, -1));
    REFUSED(pm_options_set_containment(o, 3));
    TAKEN(pm_options_set_containment(o, PM_CONTAIN_CGROUP));
    TAKEN(pm_options_set_containment(o, PM_CONTAIN_PROCESS_GROUP));
    TAKEN(pm_options_set_containment(o, 0));
    REFUSED(pm_options_set_memory_max(o, ((uint64_t)1 << 20) - 1)); /* at least 1 MiB */
    TAKEN(pm_options_set_memory_max(o, (uint64_t)1 << 20));
    TAKEN(pm_options_set_memory_max(o, 0));
    REFUSED(pm_options_set_pids_max(o, -1));
    REFUSED(pm_options_set_pids_max(o, 4194305));
    TAKEN(pm_options_set_pids_max(o, 4194304));
    TAKEN(pm_options_set_pids_max(o, 1));
    TAKEN(pm_options_set_pids_max(o, 0));
    REFUSED(pm_options_set_cpu_max(o, 1000, 999));     /* period 1000.. */
    REFUSED(pm_options_set_cpu_max(o, 1000, 1000001)); /* ..1000000 */
    REFUSED(pm_options_set_cpu_max(o, 999, 100000));   /* quota at least 1000 */
    TAKEN(pm_options_set_cpu_max(o, 1000, 1000));
    TAKEN(pm_options_set_cpu_max(o, 200000, 1000000));
    TAKEN(pm_options_set_cpu_max(o, 0, 0));
    REFUSED(pm_options_set_rlimit(o, RLIMIT_NOFILE, 2, 1)); /* soft at most hard */
    REFUSED(pm_options_set_rlimit(o, -1, 1, 1));
    TAKEN(pm_options_set_rlimit(o, RLIMIT_NOFILE, 1, 1));
    TAKEN(pm_options_set_rlimit(o, RLIMIT_CORE, PM_RLIM_INFINITY, PM_RLIM_INFINITY));
    REFUSED(pm_options_set_core_dir(o, ""));

    /* Peer links. */
    REFUSED(pm_options_set_peer_listen(o, "host:0"));
    REFUSED(pm_options_set_peer_listen(o, "host:65536"));
    TAKEN(pm_options_set_peer_listen(o, "host:65535"));
    TAKEN(pm_options_set_peer_listen(o, "[::1]:1"));
    TAKEN(pm_options_set_peer_listen(o, NULL));
    REFUSED(pm_options_set_peer_timeout_ms(o, 0)); /* > 0 */
    TAKEN(pm_options_set_peer_timeout_ms(o, 1));
    REFUSED(pm_options_set_node_key_file(o, ""));
    REFUSED(pm_options_set_peer_keys_file(o, ""));
    TAKEN(pm_options_set_node_key_file(o, NULL));
    pm_options_free(o);
}
END_TEST

/*
 * pm_options(3), ERRORS: each combination pm_options_validate refuses,
 * broken alone in options that validate otherwise: -EINVAL, a reason that
 * names the option, and pm_cluster_spawn refuses it too, *out NULL,
 * before any worker is forked. A new combination is a new row.
 */
static int set_pass_fd(pm_options *o)
{
    static const int fd[1] = {1};
    return pm_options_set_pass_fds(o, fd, 1);
}
static int set_notify(pm_options *o)
{
    return pm_options_set_ready_mode(o, PM_READY_NOTIFY);
}
static int set_exec_too(pm_options *o)
{
    return pm_options_set_exec(o, "/bin/true", NULL);
}
static int set_capture_and_standby(pm_options *o)
{
    int rc = pm_options_set_warm_standby(o, 1);
    return rc < 0 ? rc : pm_options_set_output(o, PM_OUTPUT_CAPTURE);
}
static int set_orphans(pm_options *o)
{
    return pm_options_set_reap_orphans(o, 1);
}
static int set_backoffs(pm_options *o)
{
    int rc = pm_options_set_restart_min_backoff_ms(o, 300);
    return rc < 0 ? rc : pm_options_set_restart_max_backoff_ms(o, 299);
}
static int set_last_port(pm_options *o)
{
    int rc = pm_options_set_workers(o, 3);
    return rc < 0 ? rc : pm_options_set_base_port(o, 65534);
}
static int set_peer_without_secret(pm_options *o)
{
    return pm_options_add_peer(o, "127.0.0.1:9");
}

static const struct {
    int (*set)(pm_options *);
    const char *names;
} validate_rows[] = {
    {set_pass_fd, "pass_fds"},                  /* pass_fds in fork mode */
    {set_notify, "ready_mode"},                 /* a ready mode other than mesh without exec */
    {set_exec_too, "bootstrap/exec"},           /* both bootstrap and exec */
    {set_capture_and_standby, "warm_standby"},  /* a standby with captured output */
    {set_orphans, "reap_orphans"},              /* without handle_signals */
    {set_backoffs, "restart_max_backoff_ms"},   /* max below min */
    {set_last_port, "base_port"},               /* the last port above 65535 */
    {set_peer_without_secret, "secret"},        /* a peer without a secret */
};

START_TEST(test_validate_each_refusal)
{
    pm_options *o = pm_options_new();
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(pm_options_set_bootstrap(o, boot, NULL), 0);
    ck_assert_int_eq(pm_options_set_workers(o, 1), 0);
    char why[256] = "";
    ck_assert_int_eq(pm_options_validate(o, why, sizeof(why)), 0);
    ck_assert_int_eq(validate_rows[_i].set(o), 0); /* each setter alone takes it */
    ck_assert_int_eq(pm_options_validate(o, why, sizeof(why)), -EINVAL);
    ck_assert_msg(strstr(why, validate_rows[_i].names) != NULL, "row %d: the reason '%s' does not name %s",
                  _i, why, validate_rows[_i].names);
    /* Truncated to size, NUL-terminated. */
    char small[8];
    memset(small, 'x', sizeof(small));
    ck_assert_int_eq(pm_options_validate(o, small, sizeof(small)), -EINVAL);
    ck_assert_int_eq(small[sizeof(small) - 1], '\0');
    ck_assert_int_eq(strncmp(small, why, sizeof(small) - 1), 0);
    pm_cluster *c = (pm_cluster *)o;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -EINVAL);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
    ck_assert_int_eq(errno, ECHILD);
    pm_options_free(o);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("options");
    TCase *tc = pm_tcase("options", 30);
    tcase_add_test(tc, test_ranges);
    tcase_add_test(tc, test_validate);
    tcase_add_test(tc, test_cpu_max);
    tcase_add_test(tc, test_every_setter_bound);
    tcase_add_loop_test(tc, test_validate_each_refusal, 0, (int)ARRAY_LEN(validate_rows));
    suite_add_tcase(s, tc);
    return pm_test_main(s);
}
