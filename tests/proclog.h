/* SPDX-License-Identifier: MIT */
/* A process a test started and what it wrote: starting it with its log
 * read from a pipe, counting lines in it, waiting for lines, what a request
 * loop's log must show, and the daemon's HTTP port (check_daemon,
 * check_daemon_api, check_peerops, check_mesh3, check_netns). Include after
 * helpers.h. */
#ifndef PM_TESTS_PROCLOG_H
#define PM_TESTS_PROCLOG_H

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/types.h>
#include <unistd.h>

typedef struct proc {
    pid_t pid;
    int fd;    /* the read end of the pipe it writes its log to */
    int in;    /* a pipe to its stdin, or -1 (unused: 0 or -1) */
    int eof;
    char *log; /* what it wrote so far, NUL-terminated */
    size_t len, cap;
} proc;

/* Runs in the child before exec: an affinity mask, a cgroup or a network
 * namespace to join. Returns 0, or a negative errno and the child exits
 * 126. */
typedef int (*proc_pre_exec)(void *arg);

/* How proc_start runs a program; a zeroed field takes its default. */
typedef struct proc_how {
    char *const *envp; /* NULL: a PATH and the suite's PM_TEST_RUN mark */
    int want_in;       /* its stdin from a pipe, whose write end is proc.in */
    size_t cap;        /* the log's size (0: 256 KiB) */
    proc_pre_exec pre; /* NULL: nothing */
    void *arg;         /* pre's */
} proc_how;

/* Starts path with argv, its fd `capture` into the log's pipe (how NULL:
 * the defaults). The child is forked with pm_test_fork: it dies with the
 * test (a daemon's workers with the daemon), so nothing a failed test
 * started is left holding a port or a socket. */
static inline proc proc_start(const char *path, char *const argv[], int capture, const proc_how *how)
{
    static const proc_how defaults;
    if (how == NULL)
        how = &defaults;
    int p[2], q[2] = {-1, -1};
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    if (how->want_in)
        ck_assert_int_eq(pipe2(q, O_CLOEXEC), 0);
    proc r = {.fd = -1, .in = -1, .cap = how->cap != 0 ? how->cap : 256 * 1024};
    r.log = malloc(r.cap);
    ck_assert_ptr_nonnull(r.log);
    r.log[0] = '\0';
    char mark[256];
    char *env[] = {"PATH=/usr/bin:/bin", pm_test_run_env(mark, sizeof(mark)), NULL};
    r.pid = pm_test_fork();
    ck_assert_int_ge(r.pid, 0); /* a pid, or fork failed */
    if (r.pid == 0) {
        if (how->pre != NULL && how->pre(how->arg) < 0)
            _exit(126);
        dup2(p[1], capture);
        if (how->want_in)
            dup2(q[0], STDIN_FILENO);
        execve(path, argv, how->envp != NULL ? how->envp : env);
        _exit(127);
    }
    close(p[1]);
    if (how->want_in) {
        close(q[0]);
        r.in = q[1];
    }
    r.fd = p[0];
    return r;
}

/* Appends what r wrote, waiting up to ms for the first bytes; never past
 * the buffer (a full log stops growing: the tests wait on what they need
 * long before that). */
static inline void proc_read(proc *r, int ms)
{
    struct pollfd pfd = {.fd = r->fd, .events = POLLIN};
    while (!r->eof && r->len + 1 < r->cap && poll(&pfd, 1, ms) == 1) {
        ssize_t k = read(r->fd, r->log + r->len, r->cap - 1 - r->len);
        if (k <= 0) {
            r->eof = 1;
            break;
        }
        r->len += (size_t)k;
        r->log[r->len] = '\0';
        ms = 0;
    }
}

/* How many times needle occurs in text. */
static inline int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* Ends r (SIGCONT first: it may be stopped) and reaps it; closes its
 * stdin pipe. Its log stays readable. */
static inline void proc_kill(proc *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGCONT);
        kill(r->pid, SIGKILL);
        pm_test_reap(r->pid, 5000);
        r->pid = 0;
    }
    if (r->in >= 0)
        close(r->in);
    r->in = -1;
}

/* proc_kill, then the log and its pipe go too. */
static inline void proc_free(proc *r)
{
    proc_kill(r);
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    free(r->log);
    r->log = NULL;
}

/* The processes whose parent is pid, from /proc: their count (-1: none
 * readable), the first cap of their pids in out. */
static inline int proc_children(pid_t pid, int *out, int cap)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int n = 0, c;
    while (fscanf(f, "%d", &c) == 1) {
        if (n < cap)
            out[n] = c;
        n++;
    }
    fclose(f);
    return n;
}

/* ---- the log of a request loop (pm-test-worker's "sent N" / "reply N
 * from ..." / "error N ..." lines; check_mesh3, check_netns). These assert,
 * so check.h comes first. */

/* The end of a log on stderr: Check's messages have a size limit, so a
 * failure message names what was awaited and the log goes here. */
static inline const char *tail_of(const char *log)
{
    size_t n = strlen(log);
    const char *t = n > 6000 ? log + n - 6000 : log;
    fprintf(stderr, "---- log (last %zu bytes) ----\n%s\n---- end of log ----\n", strlen(t), t);
    return "(log on stderr)";
}

/* The last non-empty line of log, at most 300 bytes of it, in a static
 * buffer ("(none)" for an empty log). */
static inline const char *proc_last_line(const char *log)
{
    static char line[304];
    size_t end = strlen(log);
    while (end > 0 && log[end - 1] == '\n')
        end--;
    size_t start = end;
    while (start > 0 && log[start - 1] != '\n')
        start--;
    if (end - start > 300)
        start = end - 300;
    snprintf(line, sizeof(line), "%.*s", (int)(end - start), log + start);
    return end == 0 ? "(none)" : line;
}

/* Waits until r has written needle n times, reading the pipes of others
 * (nothers of them, r among them or not) meanwhile so that no process
 * blocks on a full pipe. Fails the test, its log's end on stderr, when that
 * does not happen within timeout_ms or r closes its output first. */
static inline void proc_wait_among(proc *r, proc *const *others, size_t nothers, const char *needle,
                                   int n, int timeout_ms)
{
    uint64_t end = pm_test_ms() + (uint64_t)timeout_ms;
    while (count_of(r->log, needle) < n && !r->eof && pm_test_ms() < end) {
        proc_read(r, 50);
        for (size_t i = 0; i < nothers; i++)
            if (others[i] != r && others[i]->pid > 0)
                proc_read(others[i], 0);
    }
    if (count_of(r->log, needle) >= n)
        return;
    /* CI shows Check's message but not always stderr: the message names
     * how the process ended and its last line, the whole tail goes to
     * stderr. */
    char how[64] = "";
    if (r->eof && r->pid > 0) {
        int st = pm_test_reap(r->pid, 2000);
        r->pid = 0;
        if (st == -1)
            snprintf(how, sizeof(how), ", still running 2 s later");
        else if (WIFEXITED(st))
            snprintf(how, sizeof(how), ", exit status %d", WEXITSTATUS(st));
        else
            snprintf(how, sizeof(how), ", killed by signal %d", WTERMSIG(st));
    }
    ck_abort_msg("waited %d ms for %d line(s) with \"%s\"%s%s%s; its last line: %s; %s", timeout_ms, n,
                 needle, r->eof ? " (the process closed its output" : "", how, r->eof ? ")" : "",
                 proc_last_line(r->log), tail_of(r->log));
}

/* Waits until each of the mesh hosts named "a", "b", "c" (h[0..2]) has
 * logged its link with the other two up, reading the pipes of others
 * meanwhile (proc_wait_among). */
static inline void proc_wait_linked3(proc *const h[3], proc *const *others, size_t nothers, int timeout_ms)
{
    static const char *const want[3][2] = {{"event=peer_up host=b", "event=peer_up host=c"},
                                           {"event=peer_up host=a", "event=peer_up host=c"},
                                           {"event=peer_up host=a", "event=peer_up host=b"}};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 2; k++)
            proc_wait_among(h[i], others, nothers, want[i][k], 1, timeout_ms);
}

/* Waits for r's exit (bounded), returns its exit code (128 + signal when
 * killed) and copies all it wrote into out; its log is freed. */
static inline int proc_finish(proc *r, char *out, size_t size, int timeout_ms)
{
    int status = pm_test_reap(r->pid, timeout_ms);
    ck_assert_msg(status != -1, "the process did not exit within %d ms; %s", timeout_ms,
                  status != -1 ? "" : tail_of(r->log));
    r->pid = 0;
    while (!r->eof)
        proc_read(r, -1);
    close(r->fd);
    r->fd = -1;
    snprintf(out, size, "%s", r->log);
    free(r->log);
    r->log = NULL;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Waits until r has written needle n times (proc_wait_among, no others). */
static inline void proc_wait_log(proc *r, const char *needle, int n, int timeout_ms)
{
    proc_wait_among(r, NULL, 0, needle, n, timeout_ms);
}

/* Waits until r's worker has had `more` further replies from host h's
 * worker (port 10), reading the pipes of others meanwhile
 * (proc_wait_among). */
static inline void proc_wait_more_replies(proc *r, proc *const *others, size_t nothers, const char *h,
                                          int more, int timeout_ms)
{
    char needle[64];
    snprintf(needle, sizeof(needle), " from t@%s:10#", h);
    int have = count_of(r->log, needle);
    proc_wait_among(r, others, nothers, needle, have + more, timeout_ms);
}

/* Counts the caller's lines in log: requests sent (the highest N), and
 * fails unless every request has exactly one outcome (the last may still
 * be in flight: at most one). Returns the highest N sent. */
static inline long exactly_once(const char *log, const char *who)
{
    long sent = 0;
    char needle[64];
    for (;;) {
        snprintf(needle, sizeof(needle), "text=\"sent %ld\"", sent + 1);
        if (strstr(log, needle) == NULL)
            break;
        sent++;
    }
    /* Every case waits for replies first: no "sent" line means the log
     * format changed, not that nothing was sent. */
    ck_assert_msg(sent >= 2, "%s: no requests found in the log %s", who, sent >= 2 ? "" : tail_of(log));
    for (long i = 1; i <= sent; i++) {
        snprintf(needle, sizeof(needle), "text=\"reply %ld from ", i);
        int replies = count_of(log, needle);
        snprintf(needle, sizeof(needle), "text=\"error %ld ", i);
        int errors = count_of(log, needle);
        ck_assert_msg(replies + errors == 1 || (i == sent && replies + errors == 0),
                      "%s: request %ld got %d replies and %d errors (exactly one expected); %s",
                      who, i, replies, errors, replies + errors == 1 ? "" : tail_of(log));
    }
    return sent;
}

/* No request was delivered twice to the answering worker. */
static inline void no_duplicates(const char *log, long sent, const char *who)
{
    char needle[64];
    for (long i = 1; i <= sent; i++) {
        snprintf(needle, sizeof(needle), "text=\"got req %ld from ", i);
        ck_assert_msg(count_of(log, needle) <= 1, "%s: request %ld delivered %d times %s", who, i,
                      count_of(log, needle), count_of(log, needle) <= 1 ? "" : tail_of(log));
    }
}

/* The highest N with a line "PREFIX N " in log (0: none). */
static inline long last_of(const char *log, const char *prefix)
{
    long best = 0;
    size_t pl = strlen(prefix);
    for (const char *p = strstr(log, prefix); p != NULL; p = strstr(p + 1, prefix)) {
        long v = strtol(p + pl, NULL, 10);
        if (v > best)
            best = v;
    }
    return best;
}

#ifdef PM_TEST_WORKER /* programs that run pm-test-worker's mesh loop */
/* A mesh host's daemon, as check_mesh3 and check_netns run it: system "t",
 * one worker at port 10 running pm-test-worker's "mesh TO MS DELAY". */
typedef struct proc_mesh_host {
    const char *host, *listen; /* its name, its --peer-listen address */
    const char *peer_timeout;  /* ms, as text */
    const char *secret;        /* the --secret-file */
    const char *peers;         /* --peers, or NULL: none */
    const char *to, *ms, *delay; /* the worker's mesh loop */
} proc_mesh_host;

/* Starts that daemon (in the process that runs pre, when not NULL: a
 * namespace to join), its log from its stderr, and returns it. */
static inline proc proc_start_mesh_host(const proc_mesh_host *h, proc_pre_exec pre, void *arg)
{
    char *argv[32];
    int n = 0;
    char *fixed[] = {"procmesh", "run", "--system-name", "t", "--hostname", (char *)h->host,
                     "--base-port", "10", "--workers", "1", "--peer-listen", (char *)h->listen,
                     "--peer-timeout", (char *)h->peer_timeout, "--secret-file", (char *)h->secret};
    for (size_t i = 0; i < ARRAY_LEN(fixed); i++)
        argv[n++] = fixed[i];
    if (h->peers != NULL) {
        argv[n++] = "--peers";
        argv[n++] = (char *)h->peers;
    }
    char *tail[] = {"--", PM_TEST_WORKER, "mesh", (char *)h->to, (char *)h->ms, (char *)h->delay, NULL};
    for (size_t i = 0; i < ARRAY_LEN(tail); i++)
        argv[n++] = tail[i];
    return proc_start(PM_DAEMON_BIN, argv, STDERR_FILENO,
                      &(proc_how){.cap = 1024 * 1024, .pre = pre, .arg = arg});
}
#endif

/* A daemon of host `host` (system "t", base port 10) whose one worker
 * sleeps (--ready exec), listening on the address listen (dial 0) or
 * dialling it (dial 1), with the secret file `secret` and, unless NULL, a
 * second one `next`; PATH is all its environment. Its log from its
 * stderr. */
static inline proc proc_start_sleeper(const char *host, const char *listen, int dial, const char *secret,
                                      const char *next)
{
    char *argv[24];
    int n = 0;
    char *fixed[] = {"procmesh", "run", "--system-name", "t", "--hostname", (char *)host,
                     "--base-port", "10", "--workers", "1", "--ready", "exec",
                     dial ? "--peers" : "--peer-listen", (char *)listen, "--secret-file", (char *)secret};
    for (size_t i = 0; i < ARRAY_LEN(fixed); i++)
        argv[n++] = fixed[i];
    if (next != NULL) {
        argv[n++] = "--secret-file";
        argv[n++] = (char *)next;
    }
    char *tail[] = {"--", "/bin/sleep", "60", NULL};
    for (size_t i = 0; i < ARRAY_LEN(tail); i++)
        argv[n++] = tail[i];
    static char *const envp[] = {"PATH=/usr/bin:/bin", NULL};
    return proc_start(PM_DAEMON_BIN, argv, STDERR_FILENO, &(proc_how){.envp = envp});
}

/* ---- a daemon's keys and its HTTP port */

/* A fresh directory /tmp/pm-TAG-XXXXXX in dir and a secret made in it by
 * `procmesh keygen`, its path in secret. */
static inline void proc_make_secret(char *dir, size_t dsize, char *secret, size_t ssize, const char *tag)
{
    snprintf(dir, dsize, "/tmp/pm-%s-XXXXXX", tag);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(secret, ssize, "%s/secret", dir);
    char *argv[] = {"procmesh", "keygen", secret, NULL};
    proc k = proc_start(PM_DAEMON_BIN, argv, STDOUT_FILENO, NULL);
    int st = pm_test_reap(k.pid, 10000);
    ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "procmesh keygen failed");
    k.pid = 0;
    proc_free(&k);
}

/* Removes dir and all in it, if dir is not empty; empties it. Returns 0,
 * or -1 when rm failed. */
static inline int proc_remove_dir(char *dir)
{
    if (dir[0] == '\0')
        return 0;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    int rc = system(cmd) == 0 ? 0 : -1;
    dir[0] = '\0';
    return rc;
}

/* The listen address "127.0.0.1:PORT" in buf (--health, --peer-listen). */
static inline void http_addr(int port, char *buf, size_t size)
{
    snprintf(buf, size, "127.0.0.1:%d", port);
}

/* A port nobody listens on now (pm_test_free_port), as a listen address
 * in buf (http_addr). Returns the port. */
static inline int http_free_listen(char *buf, size_t size)
{
    int port = pm_test_free_port();
    http_addr(port, buf, size);
    return port;
}

/* A TCP connection to 127.0.0.1:port, reads bounded to 10 s; -1 when
 * refused. */
static inline int http_connect(int port)
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

/* Reads an answer to its end: its status code (the body in out), 0 when
 * the server closed without a word, -1 when the read failed. */
static inline int http_answer(int fd, char *out, size_t size)
{
    size_t got = 0;
    ssize_t k = 0;
    while (got + 1 < size && (k = read(fd, out + got, size - 1 - got)) > 0)
        got += (size_t)k;
    out[got] = '\0';
    if (got == 0)
        return k == 0 ? 0 : -1;
    int code = -1;
    if (sscanf(out, "HTTP/1.1 %d", &code) != 1)
        return -1;
    char *body = strstr(out, "\r\n\r\n");
    if (body != NULL)
        memmove(out, body + 4, strlen(body + 4) + 1);
    return code;
}

/* Sends req on a new connection to port and reads the answer
 * (http_answer; -1 also when the connection or the write failed). */
static inline int http_exchange(int port, const char *req, size_t reqlen, char *out, size_t size)
{
    int fd = http_connect(port);
    if (fd < 0)
        return -1;
    if (write(fd, req, reqlen) != (ssize_t)reqlen) {
        close(fd);
        return -1;
    }
    int code = http_answer(fd, out, size);
    close(fd);
    return code;
}

static inline int http_get(int port, const char *path, char *out, size_t size)
{
    char req[256];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    return http_exchange(port, req, (size_t)n, out, size);
}

/* Asks GET path every 20 ms until it answers want; fails the test if it
 * does not within timeout_ms. */
static inline void http_wait(int port, const char *path, int want, int timeout_ms)
{
    static char body[65536];
    uint64_t end = pm_test_ms() + (uint64_t)timeout_ms;
    int code;
    while ((code = http_get(port, path, body, sizeof(body))) != want && pm_test_ms() < end)
        usleep(20000);
    ck_assert_msg(code == want, "waited %d ms for GET %s on port %d to answer %d; last: %d",
                  timeout_ms, path, port, want, code);
}

/* The value of the metric line "NAME VALUE" in /metrics, or -1. */
static inline long long http_metric(int port, const char *name)
{
    static char body[65536];
    if (http_get(port, "/metrics", body, sizeof(body)) != 200)
        return -1;
    char want[160];
    snprintf(want, sizeof(want), "\n%s ", name);
    const char *at = strstr(body, want);
    return at != NULL ? atoll(at + strlen(want)) : -1;
}

#endif
