/*
 * check_daemon.c - the procmesh program: its configuration (flags,
 * environment, errors) and log lines exactly, then the real binary with
 * real processes and signals: exit codes, drain, retirement, socket hand-off.
 */
#include "helpers.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <stddef.h>
#include <sys/un.h>

#include "dconf.h"
#include "options.h"
#include "log.h"
#include "health.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>

/* ---------------------------------------------------------------- config */

static const char *fake_env[32][2];

static const char *getenv_fake(const char *name)
{
    for (int i = 0; i < 32 && fake_env[i][0] != NULL; i++)
        if (strcmp(fake_env[i][0], name) == 0)
            return fake_env[i][1];
    return NULL;
}

static void setenv_fake(const char *name, const char *value)
{
    int i = 0;
    while (fake_env[i][0] != NULL && strcmp(fake_env[i][0], name) != 0)
        i++;
    fake_env[i][0] = name;
    fake_env[i][1] = value;
}

static int parse(pm__dconf *c, char *err, ...)
{
    char *argv[64];
    int argc = 0;
    va_list ap;
    va_start(ap, err);
    for (char *a = va_arg(ap, char *); a != NULL; a = va_arg(ap, char *))
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    static char *keep[64];
    memcpy(keep, argv, sizeof(argv));
    return pm__dconf_parse(c, argc, keep, getenv_fake, err, 256);
}

START_TEST(test_config_defaults_and_flags)
{
    memset(fake_env, 0, sizeof(fake_env));
    pm__dconf c;
    char err[256];
    ck_assert_int_eq(parse(&c, err, "--", "/bin/true", NULL), 0);
    ck_assert_int_eq(c.workers, 0);
    ck_assert_int_eq(c.restart, PM_RESTART_ON_FAILURE);
    ck_assert_int_eq(c.backoff_min, 200);
    ck_assert_int_eq(c.backoff_max, 10000);
    ck_assert(c.jitter == 0.2);
    ck_assert_int_eq(c.max_restarts, 10);
    ck_assert_int_eq(c.stop_timeout, 5000);
    ck_assert_int_eq(c.ready, PM__D_READY_MESH);
    ck_assert_int_eq(c.log_format, PM__LOG_TEXT);
    ck_assert_int_eq(c.argc, 1);
    ck_assert_str_eq(c.argv[0], "/bin/true");
    /* The daemon's defaults are the library's (no drift between the two). */
    pm_options *lib = pm_options_new();
    ck_assert_int_eq(c.workers, lib->workers);
    ck_assert_int_eq(c.restart, lib->restart_policy);
    ck_assert_int_eq(c.backoff_min, lib->min_backoff_ms);
    ck_assert_int_eq(c.backoff_max, lib->max_backoff_ms);
    ck_assert(c.jitter == lib->random_factor);
    ck_assert_int_eq(c.max_restarts, lib->max_restarts);
    ck_assert_int_eq(c.restart_window, lib->restart_window_ms);
    ck_assert_int_eq(c.ready_timeout, lib->ready_timeout_ms);
    ck_assert_int_eq(c.heartbeat_timeout, lib->heartbeat_timeout_ms);
    ck_assert_int_eq(c.stop_timeout, lib->stop_timeout_ms);
    ck_assert_str_eq(c.system_name, lib->system_name);
    ck_assert_str_eq(c.hostname, lib->hostname);
    ck_assert_int_eq(c.base_port, lib->base_port);
    pm_options_free(lib);
    pm__dconf_free(&c);

    ck_assert_int_eq(parse(&c, err, "--workers", "3", "--restart=always", "--backoff-min", "5",
                           "--backoff-max", "50", "--backoff-jitter", "0", "--max-restarts", "-1",
                           "--restart-window", "0", "--ready-timeout", "100",
                           "--heartbeat-timeout", "0", "--stop-timeout", "0", "--system-name",
                           "sys", "--hostname", "h1", "--base-port", "8000", "--init-data", "hello",
                           "--ready", "exec", "--listen", "web=tcp:127.0.0.1:8080", "--listen",
                           "unix:/tmp/x.sock", "--min-ready", "2", "--log-format", "json",
                           "--log-level", "debug", "--", "prog", "a", "b", NULL),
                     0);
    ck_assert_int_eq(c.workers, 3);
    ck_assert_int_eq(c.restart, PM_RESTART_ALWAYS);
    ck_assert_int_eq(c.max_restarts, -1);
    ck_assert_str_eq(c.system_name, "sys");
    ck_assert_int_eq(c.base_port, 8000);
    ck_assert_uint_eq(c.init_len, 5);
    ck_assert_int_eq(c.ready, PM__D_READY_EXEC);
    ck_assert_uint_eq(c.nlisten, 2);
    ck_assert_str_eq(c.listen[0].name, "web");
    ck_assert_str_eq(c.listen[0].host, "127.0.0.1");
    ck_assert_uint_eq(c.listen[0].port, 8080);
    ck_assert_int_eq(c.listen[1].unix_socket, 1);
    ck_assert_str_eq(c.listen[1].path, "/tmp/x.sock");
    ck_assert_int_eq(c.log_format, PM__LOG_JSON);
    ck_assert_int_eq(c.log_level, PM__LOG_DEBUG);
    ck_assert_int_eq(c.argc, 3);
    pm__dconf_free(&c);
}
END_TEST

START_TEST(test_config_env_precedence)
{
    memset(fake_env, 0, sizeof(fake_env));
    setenv_fake("PROCMESH_WORKERS", "7");
    setenv_fake("PROCMESH_RESTART", "never");
    setenv_fake("PROCMESH_LISTEN", "a=unix:/tmp/a,b=tcp:0.0.0.0:99");
    pm__dconf c;
    char err[256];
    ck_assert_int_eq(parse(&c, err, "--workers", "2", "--", "x", NULL), 0);
    ck_assert_int_eq(c.workers, 2);                 /* the flag wins */
    ck_assert_int_eq(c.restart, PM_RESTART_NEVER);  /* the variable applies */
    ck_assert_uint_eq(c.nlisten, 2);
    ck_assert_str_eq(c.listen[1].name, "b");
    pm__dconf_free(&c);
    /* A bad variable is reported with its name. */
    setenv_fake("PROCMESH_BACKOFF_JITTER", "2");
    ck_assert_int_eq(parse(&c, err, "--", "x", NULL), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "PROCMESH_BACKOFF_JITTER"));
    ck_assert_ptr_nonnull(strstr(err, "'2'"));
    pm__dconf_free(&c);
}
END_TEST

START_TEST(test_config_errors)
{
    memset(fake_env, 0, sizeof(fake_env));
    pm__dconf c;
    char err[256];
    static const struct {
        const char *a, *b, *want;
    } cases[] = {
        {"--workers", "zero", "--workers: 'zero' is not auto or a whole number"},
        {"--workers", "0", "--workers: '0'"},
        {"--restart", "sometimes", "--restart: 'sometimes' is not one of always, on-failure, never"},
        {"--backoff-jitter", "1.5", "--backoff-jitter: '1.5' is not a number in 0..1"},
        {"--max-restarts", "-2", "--max-restarts: '-2'"},
        {"--ready", "maybe", "--ready: 'maybe' is not one of mesh, notify, exec"},
        {"--listen", "udp:1.2.3.4:5", "--listen: 'udp:1.2.3.4:5'"},
        {"--listen", "tcp:nohostport", "--listen"},
        {"--log-format", "xml", "--log-format: 'xml'"},
        {"--system-name", "a b", "--system-name: 'a b'"},
        {"--base-port", "70000", "--base-port: '70000'"},
        {"--init-data", "@/nonexistent/file", "--init-data: cannot read '/nonexistent/file'"},
        {"--frobnicate", "1", "'--frobnicate': unknown option"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        ck_assert_int_eq(parse(&c, err, cases[i].a, cases[i].b, "--", "x", NULL), -EINVAL);
        ck_assert_msg(strstr(err, cases[i].want) != NULL, "%s %s: got \"%s\"", cases[i].a,
                      cases[i].b, err);
        pm__dconf_free(&c);
    }
    ck_assert_int_eq(parse(&c, err, "--workers", "2", NULL), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "missing COMMAND"));
    ck_assert_int_eq(parse(&c, err, "--workers", NULL), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "--workers: missing value"));
    ck_assert_int_eq(parse(&c, err, "--workers", "1", "--workers", "2", "--", "x", NULL), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "given twice"));
    ck_assert_int_eq(parse(&c, err, "--backoff-min", "500", "--backoff-max", "100", "--", "x", NULL),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "--backoff-max: 100 is below --backoff-min 500"));
    ck_assert_int_eq(parse(&c, err, "prog", NULL), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "'prog': expected an option or '--'"));
}
END_TEST

START_TEST(test_log_format)
{
    char buf[512];
    const char *kv[] = {"slot", "2", "signal", "SIGSEGV", "reason", "a \"b\" c", "neg", "-3",
                        "lead", "007"};
    size_t n = pm__log_format(buf, sizeof(buf), PM__LOG_TEXT, "T", "warn", "exited", kv, 5);
    ck_assert_uint_eq(n, strlen(buf));
    ck_assert_str_eq(buf, "ts=T level=warn event=exited slot=2 signal=SIGSEGV reason=\"a \\\"b\\\" c\" "
                          "neg=-3 lead=007\n");
    pm__log_format(buf, sizeof(buf), PM__LOG_JSON, "T", "warn", "exited", kv, 5);
    ck_assert_str_eq(buf, "{\"ts\":\"T\",\"level\":\"warn\",\"event\":\"exited\",\"slot\":2,"
                          "\"signal\":\"SIGSEGV\",\"reason\":\"a \\\"b\\\" c\",\"neg\":-3,"
                          "\"lead\":\"007\"}\n");
    const char *ctl[] = {"x", "a\nb"};
    pm__log_format(buf, sizeof(buf), PM__LOG_JSON, "T", "info", "e", ctl, 1);
    ck_assert_ptr_nonnull(strstr(buf, "\"a\\u000ab\""));
    /* Truncation keeps a newline and never overflows. */
    n = pm__log_format(buf, 20, PM__LOG_TEXT, "T", "info", "event", kv, 5);
    ck_assert_uint_eq(n, 19);
    ck_assert_int_eq(buf[18], '\n');
}
END_TEST

/* ---------------------------------------------------------------- the binary */

typedef struct proc {
    pid_t pid;
    int err_fd; /* its stderr */
} proc;

static proc start(char *const argv[], char *const envp[])
{
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    proc r;
    r.pid = fork();
    ck_assert_int_ge(r.pid, 0);
    if (r.pid == 0) {
        dup2(p[1], 2);
        execve(PM_DAEMON_BIN, argv, envp);
        _exit(127);
    }
    close(p[1]);
    r.err_fd = p[0];
    return r;
}

/* Waits for exit (bounded), returns the exit code, collects stderr. */
static int finish(proc *r, char *out, size_t size, int timeout_ms)
{
    int status = pm_test_reap(r->pid, timeout_ms);
    ck_assert_msg(status != -1, "procmesh did not exit within %d ms", timeout_ms);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < size && (k = read(r->err_fd, out + got, size - 1 - got)) > 0)
        got += (size_t)k;
    out[got] = '\0';
    close(r->err_fd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static char *base_env[] = {"PATH=/usr/bin:/bin", NULL};

/* Waits until pid has n children (its workers are up), then a little more
 * for its start-up to finish. */
static void wait_workers(pid_t pid, int n)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(path, "r");
        int k = 0, c;
        while (f != NULL && fscanf(f, "%d", &c) == 1)
            k++;
        if (f != NULL)
            fclose(f);
        if (k >= n)
            break;
        usleep(20000);
    }
    usleep(200000);
}

START_TEST(test_bin_usage_errors)
{
    static char out[8192];
    char *a1[] = {"procmesh", "run", "--workers", "zero", "--", "/bin/true", NULL};
    proc p = start(a1, base_env);
    ck_assert_int_eq(finish(&p, out, sizeof(out), 10000), 2);
    ck_assert_ptr_nonnull(strstr(out, "--workers: 'zero'"));
    char *a2[] = {"procmesh", "frob", NULL};
    p = start(a2, base_env);
    ck_assert_int_eq(finish(&p, out, sizeof(out), 10000), 2);
    ck_assert_ptr_nonnull(strstr(out, "unknown command 'frob'"));
    char *a3[] = {"procmesh", "version", NULL};
    p = start(a3, base_env);
    ck_assert_int_eq(finish(&p, out, sizeof(out), 10000), 0);
    /* A bad variable is as fatal as a bad flag: nothing is started. */
    char *env[] = {"PATH=/usr/bin:/bin", "PROCMESH_RESTART=sometimes", NULL};
    char *a4[] = {"procmesh", "run", "--", "/bin/sleep", "100", NULL};
    p = start(a4, env);
    ck_assert_int_eq(finish(&p, out, sizeof(out), 10000), 2);
    ck_assert_ptr_nonnull(strstr(out, "PROCMESH_RESTART"));
    ck_assert_ptr_null(strstr(out, "event=started"));
}
END_TEST

START_TEST(test_bin_drain_exit_codes)
{
    static char out[16384];
    /* Workers that die of SIGTERM stop by themselves: exit 0. */
    char *a1[] = {"procmesh", "run", "--workers", "2", "--ready", "exec", "--", "sleep", "100", NULL};
    proc p = start(a1, base_env);
    wait_workers(p.pid, 2);
    kill(p.pid, SIGTERM);
    ck_assert_int_eq(finish(&p, out, sizeof(out), 10000), 0);
    ck_assert_ptr_nonnull(strstr(out, "event=ready"));
    ck_assert_ptr_nonnull(strstr(out, "event=drain_begin signal=SIGTERM"));
    ck_assert_ptr_nonnull(strstr(out, "event=drain_end"));
    /* Workers that ignore SIGTERM are killed after --stop-timeout: exit 1. */
    char *a2[] = {"procmesh", "run", "--workers", "1", "--ready", "exec", "--stop-timeout", "300",
                  "--", "sh", "-c", "trap '' TERM; exec sleep 100", NULL};
    p = start(a2, base_env);
    wait_workers(p.pid, 1);
    uint64_t t0 = pm_test_now_ns();
    kill(p.pid, SIGINT);
    ck_assert_int_eq(finish(&p, out, sizeof(out), 10000), 1);
    uint64_t took = (pm_test_now_ns() - t0) / 1000000u;
    ck_assert_uint_ge(took, 250);
    ck_assert_uint_lt(took, 5000);
    ck_assert_ptr_nonnull(strstr(out, "signal=SIGKILL"));
    /* A second SIGTERM skips the (here 30 s) wait. */
    char *a3[] = {"procmesh", "run", "--workers", "2", "--ready", "exec", "--stop-timeout", "30000",
                  "--", "sh", "-c", "trap '' TERM; exec sleep 100", NULL};
    p = start(a3, base_env);
    wait_workers(p.pid, 2);
    t0 = pm_test_now_ns();
    kill(p.pid, SIGTERM);
    usleep(300000);
    kill(p.pid, SIGTERM);
    ck_assert_int_eq(finish(&p, out, sizeof(out), 10000), 1);
    ck_assert_uint_lt((pm_test_now_ns() - t0) / 1000000u, 5000);
}
END_TEST

START_TEST(test_bin_all_retired_exit_3)
{
    static char out[16384];
    char *a[] = {"procmesh", "run", "--workers", "2", "--ready", "exec", "--max-restarts", "1",
                 "--backoff-min", "10", "--backoff-max", "20", "--log-format", "json", "--",
                 "sh", "-c", "sleep 0.2; exit 4", NULL};
    proc p = start(a, base_env);
    ck_assert_int_eq(finish(&p, out, sizeof(out), 20000), 3);
    ck_assert_ptr_nonnull(strstr(out, "\"event\":\"retired\""));
    ck_assert_ptr_nonnull(strstr(out, "\"exit_code\":4"));
    /* Every line is one JSON object. */
    for (char *line = strtok(out, "\n"); line != NULL; line = strtok(NULL, "\n"))
        ck_assert_msg(line[0] == '{' && line[strlen(line) - 1] == '}', "not JSON: %s", line);
    /* A command that cannot start: exit 4. */
    char *b[] = {"procmesh", "run", "--workers", "1", "--", "/nonexistent/worker", NULL};
    p = start(b, base_env);
    ck_assert_int_eq(finish(&p, out, sizeof(out), 20000), 4);
    ck_assert_ptr_nonnull(strstr(out, "event=start_failed"));
}
END_TEST

static int ask(const char *path, const char *line, char *reply, size_t size)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ssize_t w = write(fd, line, strlen(line));
    (void)w;
    ssize_t k = read(fd, reply, size - 1);
    close(fd);
    if (k < 0)
        return -1;
    reply[k] = '\0';
    return (int)k;
}

START_TEST(test_bin_listen_survives_crash)
{
    /* One worker serves a unix socket handed over by procmesh. It crashes on
     * CRASH; a client connecting right away is queued in the kernel backlog
     * and served by the replacement: the socket never closed. */
    char dir[] = "/tmp/pm-daemon-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[128], listen[160];
    snprintf(path, sizeof(path), "%s/s.sock", dir);
    snprintf(listen, sizeof(listen), "echo=unix:%s", path);
    char *a[] = {"procmesh", "run", "--workers", "1", "--ready", "exec", "--backoff-min", "50",
                 "--backoff-max", "100", "--listen", listen, "--", PM_TEST_WORKER, "serve", NULL};
    proc p = start(a, base_env);
    char reply[128];
    int k = -1;
    for (int i = 0; i < 100 && k < 0; i++) {
        usleep(50000);
        k = ask(path, "hi\n", reply, sizeof(reply));
    }
    ck_assert_int_gt(k, 0);
    int pid1 = 0;
    ck_assert_int_eq(sscanf(reply, "pong %d", &pid1), 1);
    ask(path, "CRASH\n", reply, sizeof(reply)); /* no answer: it crashed */
    k = ask(path, "hi again\n", reply, sizeof(reply));
    ck_assert_int_gt(k, 0);
    int pid2 = 0;
    ck_assert_int_eq(sscanf(reply, "pong %d", &pid2), 1);
    ck_assert_int_ne(pid1, pid2);
    kill(p.pid, SIGTERM);
    static char out[16384];
    ck_assert_int_eq(finish(&p, out, sizeof(out), 10000), 0);
    ck_assert_ptr_nonnull(strstr(out, "signal=SIGSEGV"));
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST


/* Processes whose parent is pid, from /proc. */
static int children_of(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int n = 0, c;
    while (fscanf(f, "%d", &c) == 1)
        n++;
    fclose(f);
    return n;
}



START_TEST(test_http_parse)
{
    const char *path;
    size_t plen;
    int head;
    static const struct {
        const char *req;
        int want;
    } cases[] = {
        {"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200},
        {"GET /readyz HTTP/1.0\r\n\r\n", 200},
        {"HEAD /metrics HTTP/1.1\r\n\r\n", 200},
        {"GET /status?x=1 HTTP/1.1\n\n", 200},
        {"GET /nope HTTP/1.1\r\n\r\n", 404},
        {"POST /healthz HTTP/1.1\r\n\r\n", 405},
        {"DELETE /status HTTP/1.1\r\n\r\n", 405},
        {"GET /healthz\r\n\r\n", 400},
        {"GET healthz HTTP/1.1\r\n\r\n", 400},
        {"get /healthz HTTP/1.1\r\n\r\n", 400},
        {"GET /healthz HTTP/2.0\r\n\r\n", 400},
        {" /healthz HTTP/1.1\r\n\r\n", 400},
        {"GET /a\x01b HTTP/1.1\r\n\r\n", 400},
        {"\r\n\r\n", 400},
        {"GET /healthz HTTP/1.1\r\nHost: x\r\n", 0},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++)
        ck_assert_msg(pm__http_parse(cases[i].req, strlen(cases[i].req), &path, &plen, &head) ==
                          cases[i].want,
                      "case %zu", i);
    ck_assert_int_eq(pm__http_parse("HEAD /status HTTP/1.1\r\n\r\n", 25, &path, &plen, &head), 200);
    ck_assert_int_eq(head, 1);
    ck_assert_uint_eq(plen, 7);
    char big[PM__HTTP_MAX];
    memset(big, 'a', sizeof(big));
    ck_assert_int_eq(pm__http_parse(big, sizeof(big), &path, &plen, &head), 413);
}
END_TEST

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(fd, (struct sockaddr *)&a, sizeof(a));
    socklen_t l = sizeof(a);
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

static int tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Sends a raw request, returns the status code and the body in out. */
static int http(int port, const char *req, size_t reqlen, char *out, size_t size)
{
    int fd = tcp_connect(port);
    if (fd < 0)
        return -1;
    if (write(fd, req, reqlen) != (ssize_t)reqlen) {
        close(fd);
        return -1;
    }
    size_t got = 0;
    ssize_t k;
    while (got + 1 < size && (k = read(fd, out + got, size - 1 - got)) > 0)
        got += (size_t)k;
    out[got] = '\0';
    close(fd);
    int code = -1;
    if (sscanf(out, "HTTP/1.1 %d", &code) != 1)
        return -1;
    char *body = strstr(out, "\r\n\r\n");
    if (body != NULL)
        memmove(out, body + 4, strlen(body + 4) + 1);
    return code;
}

static int get(int port, const char *path, char *out, size_t size)
{
    char req[256];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    return http(port, req, (size_t)n, out, size);
}

START_TEST(test_bin_health_endpoints)
{
    static char out[65536];
    int port = free_port();
    char health[64];
    snprintf(health, sizeof(health), "127.0.0.1:%d", port);
    char *a[] = {"procmesh", "run", "--workers", "2", "--ready", "exec", "--min-ready", "2",
                 "--health", health, "--backoff-min", "300", "--backoff-max", "300", "--",
                 "sleep", "100", NULL};
    proc p = start(a, base_env);
    int code = -1;
    for (int i = 0; i < 200 && code != 200; i++) {
        usleep(20000);
        code = get(port, "/readyz", out, sizeof(out));
    }
    ck_assert_int_eq(code, 200);
    ck_assert_int_eq(get(port, "/healthz", out, sizeof(out)), 200);
    ck_assert_str_eq(out, "ok\n");
    ck_assert_int_eq(get(port, "/status", out, sizeof(out)), 200);
    ck_assert_ptr_nonnull(strstr(out, "\"slots\":[{\"slot\":0,\"state\":\"ready\""));
    ck_assert_int_eq(get(port, "/metrics", out, sizeof(out)), 200);
    /* Prometheus text: comments, or "name{labels} value" / "name value". */
    int samples = 0;
    for (char *line = strtok(out, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (line[0] == '#') {
            ck_assert(strncmp(line, "# HELP ", 7) == 0 || strncmp(line, "# TYPE ", 7) == 0);
            continue;
        }
        char name[128];
        double v;
        ck_assert_msg(sscanf(line, "%127[a-z_]%*[^ ] %lf", name, &v) == 2 ||
                          sscanf(line, "%127[a-z_] %lf", name, &v) == 2,
                      "bad sample: %s", line);
        ck_assert(strncmp(name, "procmesh_", 9) == 0);
        samples++;
    }
    ck_assert_int_gt(samples, 20);
    ck_assert_int_eq(get(port, "/nope", out, sizeof(out)), 404);
    ck_assert_int_eq(http(port, "POST /healthz HTTP/1.1\r\n\r\n", 26, out, sizeof(out)), 405);
    ck_assert_int_eq(http(port, "BLAH\r\n\r\n", 8, out, sizeof(out)), 400);
    char *big = malloc(8192);
    memset(big, 'x', 8192);
    memcpy(big, "GET /", 5);
    ck_assert_int_eq(http(port, big, 8192, out, sizeof(out)), 413);
    free(big);

    /* A slow client (connects, says nothing) is cut off by the header
     * timeout; a flood of idle connections past the cap is refused; and
     * supervision goes on meanwhile: a killed worker is restarted and
     * /readyz answers again. */
    int slow = tcp_connect(port);
    ck_assert_int_ge(slow, 0);
    int flood[100];
    for (int i = 0; i < 100; i++)
        flood[i] = tcp_connect(port);
    char probe[64];
    snprintf(probe, sizeof(probe), "/proc/%d/task/%d/children", (int)p.pid, (int)p.pid);
    FILE *f = fopen(probe, "r");
    int wpid = 0;
    ck_assert_int_eq(fscanf(f, "%d", &wpid), 1);
    fclose(f);
    kill(wpid, SIGKILL);
    uint64_t t0 = pm_test_now_ns();
    struct pollfd pfd = {.fd = slow, .events = POLLIN};
    ck_assert_int_eq(poll(&pfd, 1, 6000), 1);
    ck_assert_uint_lt((pm_test_now_ns() - t0) / 1000000u, 5000);
    close(slow);
    for (int i = 0; i < 100; i++)
        if (flood[i] >= 0)
            close(flood[i]);
    code = -1;
    for (int i = 0; i < 300 && code != 200; i++) {
        usleep(20000);
        code = get(port, "/readyz", out, sizeof(out));
    }
    ck_assert_int_eq(code, 200);
    kill(p.pid, SIGTERM);
    static char log[65536];
    ck_assert_int_eq(finish(&p, log, sizeof(log), 10000), 0);
    ck_assert_ptr_nonnull(strstr(log, "event=started slot=") );
    ck_assert_ptr_nonnull(strstr(log, "incarnation=2"));
}
END_TEST


START_TEST(test_bin_notify_mode)
{
    /* A worker that speaks sd_notify: a READY=1 forged by its child is
     * dropped and counted; its own READY=1 (500 ms later) makes it ready;
     * WATCHDOG=1 then holds it to the heartbeat, and when it falls silent it
     * is fenced. */
    static char out[65536];
    int port = free_port();
    char health[64];
    snprintf(health, sizeof(health), "127.0.0.1:%d", port);
    char *a[] = {"procmesh", "run", "--workers", "1", "--ready", "notify", "--heartbeat-timeout",
                 "400", "--health", health, "--", PM_NOTIFY_SEND, "--fork", "READY=1", "--",
                 PM_NOTIFY_SEND, "--delay", "500", "READY=1", "--", PM_NOTIFY_SEND, "WATCHDOG=1",
                 "--", PM_NOTIFY_SEND, "STOPPING=1", "--", "sleep", "100", NULL};
    proc p = start(a, base_env);
    char body[8192];
    int code = -1;
    for (int i = 0; i < 300 && code != 200; i++) {
        usleep(20000);
        code = get(port, "/readyz", body, sizeof(body));
    }
    ck_assert_int_eq(code, 200);
    ck_assert_int_eq(get(port, "/metrics", body, sizeof(body)), 200);
    ck_assert_ptr_nonnull(strstr(body, "procmesh_notify_dropped_total 1\n"));
    usleep(1500000); /* silent after one WATCHDOG=1: fenced for the heartbeat */
    kill(p.pid, SIGTERM);
    ck_assert_int_eq(finish(&p, out, sizeof(out), 10000), 0);
    char *ready = strstr(out, "event=ready");
    ck_assert_ptr_nonnull(ready);
    ck_assert_ptr_nonnull(strstr(out, "event=stopping slot=0"));
    ck_assert_ptr_nonnull(strstr(out, "event=fenced slot=0"));
    ck_assert_ptr_nonnull(strstr(out, "reason=heartbeat"));
}
END_TEST


START_TEST(test_bin_systemd_notify_and_status)
{
    /* procmesh under systemd: READY=1 once ready, WATCHDOG=1 every half
     * WATCHDOG_USEC, STOPPING=1 on drain; its NOTIFY_SOCKET is not passed
     * to the workers. procmesh status prints the slot table. */
    char name[64];
    snprintf(name, sizeof(name), "pm-test-notify-%d", (int)getpid());
    int nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path + 1, name, strlen(name));
    ck_assert_int_eq(bind(nfd, (struct sockaddr *)&sa,
                          (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name))), 0);
    char notify_env[96], dir[] = "/tmp/pm-sd-XXXXXX", file[96], script[256], health[64];
    snprintf(notify_env, sizeof(notify_env), "NOTIFY_SOCKET=@%s", name);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(file, sizeof(file), "%s/env", dir);
    snprintf(script, sizeof(script), "echo \"[$NOTIFY_SOCKET][$WATCHDOG_USEC]\" > %s; exec sleep 100",
             file);
    int port = free_port();
    snprintf(health, sizeof(health), "127.0.0.1:%d", port);
    char *env[] = {"PATH=/usr/bin:/bin", notify_env, "WATCHDOG_USEC=400000", NULL};
    char *a[] = {"procmesh", "run", "--workers", "2", "--ready", "exec", "--health", health, "--",
                 "sh", "-c", script, NULL};
    proc p = start(a, env);
    char msg[256];
    struct timeval tv = {10, 0};
    setsockopt(nfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ssize_t n = recv(nfd, msg, sizeof(msg) - 1, 0);
    ck_assert_int_gt(n, 0);
    msg[n] = '\0';
    ck_assert_str_eq(msg, "READY=1");
    int wd = 0;
    uint64_t end = pm_test_now_ns() + 1000000000ull;
    while (pm_test_now_ns() < end) {
        struct timeval t2 = {0, 200000};
        setsockopt(nfd, SOL_SOCKET, SO_RCVTIMEO, &t2, sizeof(t2));
        n = recv(nfd, msg, sizeof(msg) - 1, 0);
        if (n > 0) {
            msg[n] = '\0';
            wd += strcmp(msg, "WATCHDOG=1") == 0;
        }
    }
    ck_assert_int_ge(wd, 3); /* every 200 ms */
    /* procmesh status */
    int sp[2];
    ck_assert_int_eq(pipe(sp), 0);
    pid_t st = fork();
    if (st == 0) {
        dup2(sp[1], 1);
        char *sa2[] = {"procmesh", "status", "--health", health, NULL};
        execve(PM_DAEMON_BIN, sa2, base_env);
        _exit(127);
    }
    close(sp[1]);
    char table[4096];
    size_t got = 0;
    ssize_t k;
    while ((k = read(sp[0], table + got, sizeof(table) - 1 - got)) > 0)
        got += (size_t)k;
    table[got] = '\0';
    close(sp[0]);
    int status = pm_test_reap(st, 10000);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_ptr_nonnull(strstr(table, "SLOT  STATE"));
    ck_assert_ptr_nonnull(strstr(table, "0     ready"));
    ck_assert_ptr_nonnull(strstr(table, "1     ready"));
    FILE *f = fopen(file, "r");
    ck_assert_ptr_nonnull(f);
    char line[128] = "";
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
    fclose(f);
    ck_assert_str_eq(line, "[][]\n");
    kill(p.pid, SIGTERM);
    int saw_stopping = 0;
    tv.tv_sec = 5;
    setsockopt(nfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (!saw_stopping && (n = recv(nfd, msg, sizeof(msg) - 1, 0)) > 0) {
        msg[n] = '\0';
        saw_stopping = strcmp(msg, "STOPPING=1") == 0;
    }
    ck_assert(saw_stopping);
    static char out[32768];
    ck_assert_int_eq(finish(&p, out, sizeof(out), 10000), 0);
    close(nfd);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST


START_TEST(test_bin_healthz_503_when_starts_fail)
{
    /* When procmesh can no longer start workers (here: no fd left for a
     * memfd, by lowering its RLIMIT_NOFILE from outside), /healthz turns 503
     * after three failed starts in a row, and back to 200 once a start works. */
    static char out[65536];
    int port = free_port();
    char health[64];
    snprintf(health, sizeof(health), "127.0.0.1:%d", port);
    char *a[] = {"procmesh", "run", "--workers", "1", "--ready", "exec", "--health", health,
                 "--backoff-min", "1000", "--backoff-max", "1000", "--backoff-jitter", "0",
                 "--max-restarts", "-1", "--", "sleep", "100", NULL};
    proc p = start(a, base_env);
    char body[4096];
    int code = -1;
    for (int i = 0; i < 200 && code != 200; i++) {
        usleep(20000);
        code = get(port, "/healthz", body, sizeof(body));
    }
    ck_assert_int_eq(code, 200);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)p.pid, (int)p.pid);
    FILE *f = fopen(path, "r");
    int wpid = 0;
    ck_assert_int_eq(fscanf(f, "%d", &wpid), 1);
    fclose(f);
    struct rlimit old, low;
    ck_assert_int_eq(prlimit(p.pid, RLIMIT_NOFILE, NULL, &old), 0);
    low = old;
    low.rlim_cur = 3; /* its open fds keep working; no new one */
    ck_assert_int_eq(prlimit(p.pid, RLIMIT_NOFILE, &low, NULL), 0);
    uint64_t t0 = pm_test_now_ns();
    kill(wpid, SIGKILL);
    /* Starts fail at about 1, 2 and 3 s; the next try is at about 4 s. */
    usleep(3400000);
    ck_assert_int_eq(prlimit(p.pid, RLIMIT_NOFILE, &old, NULL), 0);
    code = get(port, "/healthz", body, sizeof(body));
    uint64_t at = (pm_test_now_ns() - t0) / 1000000u;
    ck_assert_msg(code == 503, "healthz %d at %llu ms", code, (unsigned long long)at);
    code = -1;
    for (int i = 0; i < 300 && code != 200; i++) {
        usleep(20000);
        code = get(port, "/healthz", body, sizeof(body));
    }
    ck_assert_int_eq(code, 200);
    kill(p.pid, SIGTERM);
    ck_assert_int_eq(finish(&p, out, sizeof(out), 10000), 0);
    ck_assert_ptr_nonnull(strstr(out, "event=spawn_failed slot=0 error=\"Too many open files\""));
}
END_TEST

START_TEST(test_bin_sighup_rolling_restart)
{
    static char out[32768];
    int port = free_port();
    char health[64], body[256];
    snprintf(health, sizeof(health), "127.0.0.1:%d", port);
    char *a[] = {"procmesh", "run", "--workers", "3", "--ready", "exec", "--health", health, "--",
                 "sleep", "100", NULL};
    proc p = start(a, base_env);
    /* Ready first: a SIGHUP while the workers are still starting is dropped. */
    int code = -1;
    for (int i = 0; i < 300 && code != 200; i++) {
        usleep(20000);
        code = get(port, "/readyz", body, sizeof(body));
    }
    ck_assert_int_eq(code, 200);
    ck_assert_int_eq(children_of(p.pid), 3);
    kill(p.pid, SIGHUP);
    int max_kids = 0;
    uint64_t end = pm_test_now_ns() + 3000000000ull;
    while (pm_test_now_ns() < end) {
        int k = children_of(p.pid);
        if (k > max_kids)
            max_kids = k;
        usleep(2000);
    }
    ck_assert_int_le(max_kids, 3 + 1);
    kill(p.pid, SIGTERM);
    int rc = finish(&p, out, sizeof(out), 10000);
    ck_assert_msg(rc == 0, "exit %d, log:\n%s", rc, out);
    ck_assert_ptr_nonnull(strstr(out, "event=rolling_restart_begin"));
    ck_assert_ptr_nonnull(strstr(out, "event=rolling_restart_end"));
    /* Every slot got a second incarnation, in order. */
    char *s0 = strstr(out, "event=ready slot=0 pid=");
    ck_assert_ptr_nonnull(s0);
    for (int slot = 0; slot < 3; slot++) {
        char want[64];
        snprintf(want, sizeof(want), "event=started slot=%d", slot);
        char *first = strstr(out, want);
        ck_assert_ptr_nonnull(first);
        char *second = strstr(first + 1, want);
        ck_assert_msg(second != NULL, "slot %d was not replaced", slot);
        ck_assert_ptr_nonnull(strstr(second, "incarnation=2"));
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("daemon");
    PM_ADD_TEST(s, test_config_defaults_and_flags, 30);
    PM_ADD_TEST(s, test_config_env_precedence, 30);
    PM_ADD_TEST(s, test_config_errors, 30);
    PM_ADD_TEST(s, test_log_format, 30);
    PM_ADD_TEST(s, test_http_parse, 30);
    PM_ADD_TEST(s, test_bin_usage_errors, 60);
    PM_ADD_TEST(s, test_bin_drain_exit_codes, 60);
    PM_ADD_TEST(s, test_bin_all_retired_exit_3, 60);
    PM_ADD_TEST(s, test_bin_listen_survives_crash, 60);
    PM_ADD_TEST(s, test_bin_sighup_rolling_restart, 60);
    PM_ADD_TEST(s, test_bin_health_endpoints, 60);
    PM_ADD_TEST(s, test_bin_notify_mode, 60);
    PM_ADD_TEST(s, test_bin_systemd_notify_and_status, 60);
    PM_ADD_TEST(s, test_bin_healthz_503_when_starts_fail, 60);
    return pm_test_main(s);
}
