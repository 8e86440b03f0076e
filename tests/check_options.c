/* SPDX-License-Identifier: MIT */
/* check_options.c - pm_options setters, validation messages, auto workers. */
#include "helpers.h"

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

int main(void)
{
    Suite *s = suite_create("options");
    TCase *tc = pm_tcase("options", 30);
    tcase_add_test(tc, test_ranges);
    tcase_add_test(tc, test_validate);
    tcase_add_test(tc, test_cpu_max);
    suite_add_tcase(s, tc);
    return pm_test_main(s);
}
