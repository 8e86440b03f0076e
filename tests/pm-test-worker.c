/* SPDX-License-Identifier: MIT */
/*
 * pm-test-worker - an exec-mode worker for the tests. The first argument
 * says how to behave:
 *
 *   ready              join, ready, exit 0 on SIGTERM
 *   exit N             join, ready, exit N
 *   early N            exit N without joining
 *   segv               join, ready, then SIGSEGV
 *   segv-unready       join; incarnation 1: ready, then SIGSEGV; later
 *                      ones: SIGSEGV (a store to 0x40) before ready
 *   never-ready        join, never ready
 *   ready-on PATH [J]  join (then, given J, create the file J: the test
 *                      sees it joined), then ready once PATH exists (polled
 *                      every 10 ms, at most 60 s), then wait; exit 0 on
 *                      SIGTERM
 *   ignore-term        join, ready, ignore SIGTERM
 *   init TEXT          join, ready, exit 0 if the init data is TEXT, else 9
 *   inspect            join, ready, write a report of what this process
 *                      holds to fd 3 (passed by the test; see inspect.h),
 *                      then wait
 *   env                write "joining: PROCMESH_NODE=VALUE" (or "joining: no
 *                      PROCMESH_NODE") to fd 3 as the program started; join,
 *                      ready, write its environment to fd 3 (one variable a
 *                      line, then "end"), then wait
 *   sigmask            write the SigBlk line of /proc/self/status (the
 *                      signal mask the program started with, read first
 *                      thing) to fd 3; join, ready, wait
 *   handlers           before joining, its own SIGTRAP handler, SIGBUS
 *                      ignored and SIGUSR1 blocked; after join: exit 0 if
 *                      those are as they were, SIGSEGV's is procmesh's
 *                      (SA_SIGINFO, SA_ONSTACK) and no crash signal is
 *                      left blocked (then ready), else 70-75
 *   handlers-threaded  the same with a second thread started first (the
 *                      crash handlers then go in only where the disposition
 *                      is the default, looked at first: exit 0, else 70-75)
 *   handlers-window    handlers-threaded, with every rt_sigaction of
 *                      SIGTRAP the main thread makes paused (a seccomp
 *                      user notification) while the test's helper, given
 *                      the listener on fd 3, sends SIGTRAP to the second
 *                      thread: a handler of procmesh's in place of the
 *                      application's for an instant ends the worker with
 *                      SIGTRAP; exit 0 when the application's handler got
 *                      every one, else 70-76 or 110-113
 *   close-abort        join, ready, pm_node_close, then abort(): the
 *                      handler, still installed, must record nothing and
 *                      end the worker with SIGABRT as it would have
 *   child-crash-abort  join, ready, a child of its own that dies of
 *                      SIGSEGV (with the handler and the control block
 *                      inherited: it must not write the worker's record),
 *                      then as close-abort
 *   hog                no join: allocates and touches memory until killed
 *   echo               join, ready, answer every message to its sender:
 *                      "fds" with the open fd numbers ("fds 0 1 2 ..."),
 *                      "crash" with a SIGSEGV, anything else with
 *                      "echo:" and the message; exit 0 on the stop request
 *   serve              no join (exec readiness): accept on the socket handed
 *                      over as fd 3 (LISTEN_FDS), answer each line with
 *                      "pong <pid>", crash (SIGSEGV) on the line "CRASH"
 *   mesh TO MS DELAY   join, ready; answer each request, after DELAY ms,
 *                      with the address it came from and print "got TEXT
 *                      from ADDR" on stdout; unless TO is "-", every MS ms
 *                      send request N = 1, 2, ... ("req N", deadline 20 s)
 *                      to TO and print "sent N", then exactly one of "reply
 *                      N from ADDR saw TEXT" or "error N RC" (check_mesh3
 *                      counts these lines in the daemon's log)
 *   flood TO           join, ready; the worker whose address is TO (the
 *                      incarnation left 0) never reads anything; every
 *                      other one sends 1 KiB messages to TO as fast as the
 *                      ring lets it, reading its own inbox (undeliverable
 *                      notices) before each send; exit 0 on the stop
 *                      request (check_daemon's not-draining case)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <procmesh.h>
#include <pthread.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "inspect.h"

/* Crashes are the point here: keep ASan's signal handlers out of the way
 * in sanitizer builds so the supervisor sees the real signal. */
__attribute__((used, visibility("default"))) const char *__asan_default_options(void);
__attribute__((used, visibility("default"))) const char *__asan_default_options(void)
{
    return "handle_segv=0:handle_sigbus=0:handle_abort=0";
}

static void on_term(int sig)
{
    (void)sig;
    _exit(0);
}

static void wait_forever(void)
{
    for (;;)
        pause();
}

/* The sigmask mode's report: the "SigBlk:" line of /proc/self/status, as
 * it is now, to fd 3. 0, or -1 when it could not be read or written. */
static int report_sigblk(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return -1;
    char line[256];
    int rc = -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "SigBlk:", 7) == 0) {
            size_t len = strlen(line);
            rc = write(3, line, len) == (ssize_t)len ? 0 : -1;
            break;
        }
    fclose(f);
    return rc;
}

/* The echo mode's loop (see the top of the file). */
static int echo(pm_node *n)
{
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN) {
            pm_node_close(n);
            return 0;
        }
        if (rc < 0 || m.kind != PM_MSG_PLAIN)
            continue;
        char out[512];
        int len;
        if (m.len == 5 && memcmp(m.data, "crash", 5) == 0) {
            raise(SIGSEGV);
            return 102;
        } else if (m.len == 3 && memcmp(m.data, "fds", 3) == 0) {
            len = snprintf(out, sizeof(out), "fds");
            DIR *d = opendir("/proc/self/fd");
            struct dirent *e;
            while (d != NULL && (e = readdir(d)) != NULL && len < (int)sizeof(out) - 12)
                if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d))
                    len += snprintf(out + len, sizeof(out) - (size_t)len, " %s", e->d_name);
            if (d != NULL)
                closedir(d);
        } else {
            size_t k = m.len < 400 ? m.len : 400;
            len = snprintf(out, sizeof(out), "echo:%.*s", (int)k, (const char *)m.data);
        }
        pm_node_send(n, &m.from, out, (size_t)len);
    }
}

/* The mesh mode (see the top of the file). */
static int mesh(pm_node *n, const char *to_text, int ms, int delay_ms)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* the daemon logs it line by line */
    pm_address to;
    int calling = strcmp(to_text, "-") != 0;
    if (calling && pm_address_parse(to_text, &to) < 0)
        return 107;
    uint64_t next = 1;
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, calling ? ms : -1);
        if (rc == -ESHUTDOWN) {
            pm_node_close(n);
            return 0;
        }
        char from[PM_ADDRESS_STRLEN];
        if (rc == 0 && m.kind == PM_MSG_REQUEST) {
            if (pm_address_format(&m.from, from, sizeof(from)) < 0)
                strcpy(from, "?");
            size_t k = m.len < 64 ? m.len : 64;
            printf("got %.*s from %s\n", (int)k, (const char *)m.data, from);
            if (delay_ms > 0)
                usleep((useconds_t)delay_ms * 1000);
            pm_node_reply(n, &m, from, strlen(from));
        }
        if (!calling || rc != -ETIMEDOUT)
            continue;
        /* Idle for MS ms: the next request. */
        char req[32];
        int len = snprintf(req, sizeof(req), "req %llu", (unsigned long long)next);
        printf("sent %llu\n", (unsigned long long)next);
        pm_message r;
        rc = pm_node_request(n, &to, req, (size_t)len, 20000, &r);
        if (rc == 0) {
            if (pm_address_format(&r.from, from, sizeof(from)) < 0)
                strcpy(from, "?");
            size_t k = r.len < 128 ? r.len : 128;
            printf("reply %llu from %s saw %.*s\n", (unsigned long long)next, from, (int)k,
                   (const char *)r.data);
        } else {
            printf("error %llu %d\n", (unsigned long long)next, rc);
        }
        next++;
    }
}

/* The flood mode (see the top of the file). */
static int flood(pm_node *n, const char *to_text)
{
    pm_address to;
    if (pm_address_parse(to_text, &to) < 0)
        return 108;
    if (to.port == pm_node_self(n)->port)
        wait_forever(); /* the one that never drains its ring */
    static char buf[1024];
    memset(buf, 'f', sizeof(buf));
    for (;;) {
        /* Our inbox first (notices of frames the hub could not deliver
         * while TO restarts): only TO is to be the one not draining. */
        pm_message m;
        int rc;
        while ((rc = pm_node_recv(n, &m, 0)) == 0)
            ;
        if (rc == -ETIMEDOUT) {
            rc = pm_node_try_send(n, &to, buf, sizeof(buf));
            if (rc == -EAGAIN) /* full: wait a little, reading */
                rc = pm_node_recv(n, &m, 10);
        }
        if (rc == -ESHUTDOWN) {
            pm_node_close(n);
            return 0;
        }
        if (rc < 0 && rc != -ETIMEDOUT && rc != -ENOENT && rc != -EHOSTDOWN)
            return 109;
    }
}

static int serve(void)
{
    const char *n = getenv("LISTEN_FDS"), *p = getenv("LISTEN_PID");
    if (n == NULL || atoi(n) != 1 || p == NULL || atoi(p) != (int)getpid())
        return 104;
    for (;;) {
        int c = accept(3, NULL, NULL);
        if (c < 0)
            return 105;
        char line[256];
        ssize_t k = read(c, line, sizeof(line) - 1);
        if (k <= 0) {
            close(c);
            continue;
        }
        line[k] = '\0';
        if (strncmp(line, "CRASH", 5) == 0)
            raise(SIGSEGV);
        char out[64];
        int len = snprintf(out, sizeof(out), "pong %d\n", (int)getpid());
        if (write(c, out, (size_t)len) != len)
            return 106;
        close(c);
    }
}

/* A store that faults, as written (not as a sanitizer would have it);
 * through a volatile, so the compiler neither sees nor moves the address. */
static void *volatile crash_addr = (void *)(uintptr_t)0x40;
#if defined(__clang__)
__attribute__((noinline, no_sanitize("address", "undefined")))
#else
__attribute__((noinline, no_sanitize_address, no_sanitize_undefined))
#endif
static void crash_store(void)
{
    *(volatile int *)crash_addr = 1;
}

/* "handlers": what the application set up before pm_node_join, and the
 * check that join kept it (node_crash.c: an application's handler stays;
 * the mask it blocks the crash signals with while it sets its own, in a
 * process of one thread, is put back). */
static volatile sig_atomic_t app_traps;
/* handlers-window: the handler says on a pipe each time it ran (from the
 * handler itself: a byte written after pause() returned would miss a
 * signal that came while the thread was not in pause). */
static volatile int trap_pipe = -1;

static void app_trap(int sig)
{
    (void)sig;
    app_traps++;
    if (trap_pipe >= 0) {
        int saved = errno;
        (void)write(trap_pipe, "t", 1);
        errno = saved;
    }
}

/* handlers-window: the second thread, its id for tgkill. */
static _Atomic pid_t trap_tid;

static void *trap_thread(void *arg)
{
    (void)arg;
    atomic_store(&trap_tid, (pid_t)syscall(SYS_gettid));
    for (;;)
        pause();
    return NULL;
}

/* Every rt_sigaction of SIGTRAP this thread makes from now on waits for the
 * test's helper (a seccomp user notification), which sends SIGTRAP to the
 * second thread first: the listener and the pipe's read end go to it on fd
 * 3, with the second thread's id. 0 or 110-113. */
static int window_watched(void)
{
    int tp[2];
    pthread_t th;
    if (pipe2(tp, O_CLOEXEC) != 0)
        return 110;
    trap_pipe = tp[1];
    if (pthread_create(&th, NULL, trap_thread, NULL) != 0)
        return 110;
    while (atomic_load(&trap_tid) == 0)
        usleep(1000);
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_rt_sigaction, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SIGTRAP, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof(f) / sizeof(f[0])), f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return 111;
    int lfd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (lfd < 0)
        return 111;
    pid_t tid = atomic_load(&trap_tid);
    int fds[2] = {lfd, tp[0]};
    char cbuf[CMSG_SPACE(sizeof(fds))];
    memset(cbuf, 0, sizeof(cbuf));
    struct iovec iov = {&tid, sizeof(tid)};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(fds));
    memcpy(CMSG_DATA(cm), fds, sizeof(fds));
    if (sendmsg(3, &m, MSG_NOSIGNAL) != (ssize_t)sizeof(tid))
        return 112;
    close(lfd);
    close(tp[0]);
    close(3);
    return 0;
}

static void *idle_thread(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

static int set_app_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = app_trap;
    sigemptyset(&sa.sa_mask);
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    if (sigaction(SIGTRAP, &sa, NULL) < 0 || signal(SIGBUS, SIG_IGN) == SIG_ERR ||
        sigprocmask(SIG_BLOCK, &usr1, NULL) < 0)
        return -1;
    return 0;
}

static int check_app_handlers(void)
{
    struct sigaction trap, bus, segv;
    sigset_t mask;
    if (sigaction(SIGTRAP, NULL, &trap) < 0 || sigaction(SIGBUS, NULL, &bus) < 0 ||
        sigaction(SIGSEGV, NULL, &segv) < 0 || sigprocmask(SIG_SETMASK, NULL, &mask) < 0)
        return 70;
    if ((trap.sa_flags & SA_SIGINFO) != 0 || trap.sa_handler != app_trap)
        return 71;
    if ((bus.sa_flags & SA_SIGINFO) != 0 || bus.sa_handler != SIG_IGN)
        return 72;
    if ((segv.sa_flags & (SA_SIGINFO | SA_ONSTACK | SA_RESETHAND)) !=
            (SA_SIGINFO | SA_ONSTACK | SA_RESETHAND) ||
        !sigisemptyset(&segv.sa_mask))
        return 73;
    if (sigismember(&mask, SIGUSR1) != 1)
        return 74;
    static const int crash[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS};
    for (size_t i = 0; i < sizeof(crash) / sizeof(crash[0]); i++)
        if (sigismember(&mask, crash[i]) != 0)
            return 75;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: pm-test-worker MODE [ARG]\n");
        return 2;
    }
    const char *mode = argv[1];
    int rc0;
    /* Before anything else could change the mask. */
    if (strcmp(mode, "sigmask") == 0 && report_sigblk() < 0)
        return 108;
    if (strcmp(mode, "early") == 0)
        return argc > 2 ? atoi(argv[2]) : 0;
    if (strcmp(mode, "serve") == 0)
        return serve();
    if (strcmp(mode, "hog") == 0) {
        for (;;) {
            char *p = malloc(1 << 20);
            if (p == NULL)
                pause();
            else
                memset(p, 1, 1 << 20);
        }
    }
    signal(SIGTERM, on_term);
    if (strcmp(mode, "env") == 0) {
        /* What procmesh gave us to join with, for the test to see that
         * pm_node_join takes it out of the environment (pm_node(3)). */
        const char *node = getenv("PROCMESH_NODE");
        if ((node != NULL ? dprintf(3, "joining: PROCMESH_NODE=%s\n", node)
                          : dprintf(3, "joining: no PROCMESH_NODE\n")) < 0)
            return 103;
    }
    int window = strcmp(mode, "handlers-window") == 0;
    int handlers = strcmp(mode, "handlers") == 0 || strcmp(mode, "handlers-threaded") == 0 || window;
    if (strcmp(mode, "handlers-threaded") == 0) {
        pthread_t th;
        if (pthread_create(&th, NULL, idle_thread, NULL) != 0)
            return 106;
    }
    if (handlers && set_app_handlers() < 0)
        return 105;
    if (window && (rc0 = window_watched()) != 0)
        return rc0;
    pm_node *n;
    int rc = pm_node_join(&n);
    if (rc < 0) {
        fprintf(stderr, "pm-test-worker: join: %s\n", pm_strerror(rc));
        return 100;
    }
    if (handlers && (rc = check_app_handlers()) != 0)
        return rc;
    if (window && app_traps == 0)
        return 76; /* the helper sent none: nothing was watched */
    if (strcmp(mode, "never-ready") == 0)
        wait_forever();
    if (strcmp(mode, "ready-on") == 0) {
        /* Joined, in the handshake: said by a file of the test's naming. */
        if (argc > 3) {
            int fd = open(argv[3], O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
            if (fd < 0)
                return 104;
            close(fd);
        }
        /* The test decides when the start ends: its supervisor is still in
         * its spawn until then. */
        for (int i = 0; argc > 2 && access(argv[2], F_OK) != 0 && i < 6000; i++)
            usleep(10000);
    }
    if (strcmp(mode, "segv-unready") == 0 && pm_node_self(n)->incarnation > 1)
        crash_store();
    if (strcmp(mode, "ignore-term") == 0)
        signal(SIGTERM, SIG_IGN);
    if ((rc = pm_node_ready(n)) < 0) {
        fprintf(stderr, "pm-test-worker: ready: %s\n", pm_strerror(rc));
        return 101;
    }
    if (strcmp(mode, "exit") == 0 || handlers) {
        pm_node_close(n);
        return argc > 2 ? atoi(argv[2]) : 0;
    }
    if (strcmp(mode, "child-crash-abort") == 0) {
        pid_t child = fork();
        if (child == 0) {
            raise(SIGSEGV);
            _exit(107);
        }
        int st;
        if (child < 0 || waitpid(child, &st, 0) != child || !WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV)
            return 109;
    }
    if (strcmp(mode, "close-abort") == 0 || strcmp(mode, "child-crash-abort") == 0) {
        pm_node_close(n);
        abort();
    }
    if (strcmp(mode, "ready-on") == 0)
        wait_forever();
    if (strcmp(mode, "segv") == 0 || strcmp(mode, "segv-unready") == 0) {
        raise(SIGSEGV);
        return 102;
    }
    if (strcmp(mode, "init") == 0) {
        const void *data;
        size_t len;
        pm_node_init_data(n, &data, &len);
        const char *want = argc > 2 ? argv[2] : "";
        int ok = len == strlen(want) && memcmp(data, want, len) == 0;
        pm_node_close(n);
        return ok ? 0 : 9;
    }
    if (strcmp(mode, "echo") == 0)
        return echo(n);
    if (strcmp(mode, "mesh") == 0)
        return mesh(n, argc > 2 ? argv[2] : "-", argc > 3 ? atoi(argv[3]) : 200,
                    argc > 4 ? atoi(argv[4]) : 0);
    if (strcmp(mode, "flood") == 0)
        return flood(n, argc > 2 ? argv[2] : "-");
    if (strcmp(mode, "inspect") == 0) {
        FILE *out = fdopen(3, "w");
        if (out == NULL)
            return 103;
        pm_test_inspect(out, pm_node_slot(n), (unsigned long long)pm_node_self(n)->incarnation);
        fclose(out);
    }
    if (strcmp(mode, "env") == 0) {
        extern char **environ;
        FILE *out = fdopen(3, "w");
        if (out == NULL)
            return 103;
        for (char **e = environ; *e != NULL; e++)
            fprintf(out, "%s\n", *e);
        fprintf(out, "end\n");
        fclose(out);
    }
    wait_forever();
}
