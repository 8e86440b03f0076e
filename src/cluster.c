/*
 * cluster.c - the supervisor: spawns slots, watches them in one loop,
 * restarts them under the budget, terminates them.
 *
 * Everything that happens to a slot enters through dispatch(): an event is
 * looked up in the state x event table (slot.c) and the action function
 * runs. The loop only turns readiness into events:
 *   pidfd readable          -> reap (waitid) -> PM__EV_EXITED
 *   hub eventfd readable    -> read the slot's inbound ring -> READY, FAULT
 *   timerfd                 -> the due slot deadlines -> READY_TIMEOUT,
 *                              BACKOFF_DONE, STOP_TIMEOUT
 *   signalfd                -> SIGCHLD: try to reap every slot (a second
 *                              report of the same exit is dropped);
 *                              SIGTERM/SIGINT: pm_cluster_run returns -EINTR
 * No logic runs in a signal handler; there are none.
 */
#define _GNU_SOURCE
#include "cluster.h"

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>

#include "node.h"
#include "proto.h"
#include "spawn.h"

#ifndef P_PIDFD
#define P_PIDFD 3 /* linux/wait.h; glibc < 2.36 lacks it */
#endif

extern char **environ;

/* Loop tags: kind in the top 4 bits, slot in the next 28, then the low 32
 * bits of the incarnation, so a late completion about a dead incarnation is
 * recognised and dropped. */
enum { TAG_SIGNAL = 1, TAG_TIMER, TAG_WAKE, TAG_PIDFD, TAG_HUB, TAG_EXECPIPE, TAG_USER, TAG_NOTIFY };
#define TAG(kind, slot, inc) \
    (((uint64_t)(kind) << 60) | ((uint64_t)(slot) << 32) | ((inc) & 0xffffffffu))
#define TAG_KIND(t) ((int)((t) >> 60))
#define TAG_SLOT(t) ((unsigned)(((t) >> 32) & 0x0fffffffu))
#define TAG_INC(t) ((t) & 0xffffffffu)

/* Frames read from one slot per loop turn: a flooding worker waits for the
 * next turn instead of starving the others. */
#define PM__FRAMES_PER_TURN 256
/* Without pidfds and signals, how often exits are looked for. */
#define PM__SCAN_MS 50

static double rand01(pm_cluster *c)
{
    uint64_t x = c->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    c->rng = x;
    return (double)((x * 0x2545F4914F6CDD1DULL) >> 11) * 0x1.0p-53;
}

static int slot_has_process(const pm__slot *s)
{
    return s->pid > 0;
}

/* ------------------------------------------------------------------ events */

static void emit(pm_cluster *c, int type, const pm__slot *s, int reason, uint32_t delay)
{
    if (c->o->on_event == NULL)
        return;
    pm_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.type = type;
    ev.slot = s->index;
    ev.pid = s->pid;
    ev.incarnation = s->incarnation;
    ev.delay_ms = delay;
    ev.restarts = s->budget.total;
    ev.reason_code = reason;
    ev.reason = pm_reason_name(reason);
    if (type == PM_EVENT_EXITED) {
        ev.exit_code = s->last_exit_code;
        ev.signal = s->last_signal;
        ev.core_dumped = s->last_core;
    } else if (type == PM_EVENT_SPAWN_FAILED) {
        ev.exit_code = s->last_exit_code;
    }
    c->o->on_event(c, &ev, c->o->on_event_arg);
}

static void slot_address(const pm_cluster *c, const pm__slot *s, pm_address *a)
{
    memset(a, 0, sizeof(*a));
    strcpy(a->system, c->o->system_name);
    strcpy(a->host, c->o->hostname);
    a->port = (uint16_t)(c->o->base_port + (int)s->index);
    a->incarnation = slot_has_process(s) ? s->incarnation : 0;
}

void pm__slot_address(const pm_cluster *c, const pm__slot *s, pm_address *a)
{
    slot_address(c, s, a);
}

static void default_on_down(pm_cluster *c, unsigned slot, const pm_address *a, unsigned restarts,
                            void *arg)
{
    (void)c;
    (void)arg;
    char text[PM_ADDRESS_STRLEN];
    if (pm_address_format(a, text, sizeof(text)) < 0)
        strcpy(text, "?");
    fprintf(stderr, "procmesh: slot %u (%s) is permanently down after %u restarts\n", slot, text,
            restarts);
}

/* ------------------------------------------------------------------ deadlines */

static void set_deadline(pm__slot *s, uint64_t at, int event)
{
    s->deadline = at;
    s->deadline_event = event;
}

/* Points the timerfd at the earliest slot deadline. */
static int rearm_timer(pm_cluster *c)
{
    uint64_t next = pm__hub_next_deadline(c);
    if (c->next_check != 0 && (next == 0 || c->next_check < next))
        next = c->next_check;
    for (unsigned i = 0; i < c->nslots; i++) {
        uint64_t d = c->slots[i].deadline;
        if (d != 0 && (next == 0 || d < next))
            next = d;
    }
    if (next == c->timer_at)
        return 0;
    struct itimerspec its;
    memset(&its, 0, sizeof(its));
    if (next != 0) {
        /* A deadline already past still needs a non-zero value: zero would
         * disarm the timer. */
        uint64_t ns = next * 1000000u;
        its.it_value.tv_sec = (time_t)(ns / 1000000000u);
        its.it_value.tv_nsec = (long)(ns % 1000000000u);
        if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
            its.it_value.tv_nsec = 1;
    }
    if (timerfd_settime(c->timerfd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
        return -errno;
    c->timer_at = next;
    return 0;
}

/* ------------------------------------------------------------------ process */

static void slot_signal(pm__slot *s, int sig)
{
    if (!slot_has_process(s))
        return;
    /* Through the pidfd: the pid itself may belong to another process once
     * reaped. Without pidfd support, kill() is still safe here because only
     * this supervisor reaps its children and this one is not reaped yet. */
    if (s->pidfd >= 0)
        (void)pm__pidfd_signal(s->pidfd, sig);
    else
        (void)kill(s->pid, sig);
    if (sig == SIGKILL)
        s->kill_sent = 1;
}

/* Stops reading the slot's ring for good (this incarnation). */
static void disarm_hub(pm_cluster *c, pm__slot *s)
{
    if (s->hub_armed) {
        pm__loop_disarm(&c->loop, s->link.hub_efd, TAG(TAG_HUB, s->index, s->incarnation));
        s->hub_armed = 0;
    }
    s->reading = 0;
    s->busy = 0;
}

/* Everything the dead incarnation had: its pidfd, its error pipe, its
 * memory (unmapped and closed, never reused). */
static void release_process(pm_cluster *c, pm__slot *s)
{
    disarm_hub(c, s);
    if (s->pid_armed) {
        pm__loop_disarm(&c->loop, s->pidfd, TAG(TAG_PIDFD, s->index, s->incarnation));
        s->pid_armed = 0;
    }
    pm__close(s->pidfd);
    s->pidfd = -1;
    if (s->pipe_armed) {
        pm__loop_disarm(&c->loop, s->exec_pipe, TAG(TAG_EXECPIPE, s->index, s->incarnation));
        s->pipe_armed = 0;
    }
    pm__close(s->exec_pipe);
    s->exec_pipe = -1;
    if (s->notify_armed) {
        pm__loop_disarm(&c->loop, s->notify_fd, TAG(TAG_NOTIFY, s->index, s->incarnation));
        s->notify_armed = 0;
    }
    pm__close(s->notify_fd);
    s->notify_fd = -1;
    pm__hub_slot_gone(c, s);
    pm__link_close(&s->link);
    s->pid = 0;
    s->hello = 0;
    s->kill_sent = 0;
}

static void dispatch(pm_cluster *c, pm__slot *s, int event);
static void service_ring(pm_cluster *c, pm__slot *s);
static void fault(pm_cluster *c, pm__slot *s, int reason);

/* waitid without blocking: through the pidfd when the kernel knows
 * P_PIDFD (5.4), else by pid, which is just as safe here because nobody but
 * this supervisor reaps its children, so the pid cannot have been reused. */
static int wait_nohang(const pm__slot *s, siginfo_t *si)
{
    if (s->pidfd >= 0) {
        if (waitid((idtype_t)P_PIDFD, (id_t)s->pidfd, si, WEXITED | WNOHANG) == 0)
            return 0;
        if (errno != EINVAL)
            return -errno;
    }
    if (waitid(P_PID, (id_t)s->pid, si, WEXITED | WNOHANG) == 0)
        return 0;
    return -errno;
}

/* Collects the exit status if the process has ended and drives the slot.
 * Returns 1 when reaped. A second report about the same exit (pidfd and
 * SIGCHLD both fire) finds no process and does nothing. */
static int try_reap(pm_cluster *c, pm__slot *s)
{
    if (!slot_has_process(s))
        return 0;
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    int rc = wait_nohang(s, &si);
    if (rc == -ECHILD) {
        /* Someone else (an application SIGCHLD handler calling
         * waitpid(-1)) took the status: the process is gone, how is lost. */
        s->last_exit_code = -1;
        s->last_signal = 0;
        s->last_core = 0;
    } else if (rc < 0 || si.si_pid == 0) {
        return 0; /* still running */
    } else if (si.si_code == CLD_EXITED) {
        s->last_exit_code = si.si_status;
        s->last_signal = 0;
        s->last_core = 0;
    } else {
        s->last_exit_code = -1;
        s->last_signal = si.si_status;
        s->last_core = si.si_code == CLD_DUMPED;
    }
    /* A READY published just before the exit still counts: read what the
     * worker completed before its end is handled. */
    if (s->reading)
        service_ring(c, s);
    if (s->exec_pipe >= 0 && s->exec_errno == 0) {
        int e = 0;
        /* The child wrote errno before exiting, so it is already there. */
        if (read(s->exec_pipe, &e, sizeof(e)) == (ssize_t)sizeof(e))
            s->exec_errno = e;
    }
    int reason = s->kill_reason != 0 ? s->kill_reason
                         : s->exec_errno != 0   ? PM_REASON_EXEC
                         : s->last_signal != 0  ? PM_REASON_SIGNAL
                                                : PM_REASON_EXIT;
    emit(c, PM_EVENT_EXITED, s, reason, 0);
    release_process(c, s);
    dispatch(c, s, PM__EV_EXITED);
    return 1;
}

/* ------------------------------------------------------------------ spawn */

struct child_ctx {
    pm_cluster *c;
    pm__slot *own;
};

/* Fork mode, in the child: drop everything of procmesh that is not this
 * slot's, join, run the bootstrap. */
static void fork_child(void *arg)
{
    struct child_ctx *x = arg;
    pm_cluster *c = x->c;
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *t = &c->slots[i];
        pm__close(t->pidfd);
        pm__close(t->exec_pipe);
        if (t != x->own)
            pm__link_close(&t->link);
    }
    pm__loop_forget(&c->loop);
    pm__close(c->sigfd);
    pm__close(c->timerfd);
    pm__close(c->wakefd);
    pm_node node;
    int rc = pm__node_from_hub_link(&node, &x->own->link);
    /* The node has its own mapping; drop the copy of the hub's. */
    if (x->own->link.map != NULL)
        munmap(x->own->link.map, x->own->link.map_size);
    if (rc < 0)
        _exit(125);
    int code = c->o->bootstrap(&node, c->o->bootstrap_arg);
    fflush(stdout);
    fflush(stderr);
    _exit(code & 0xff);
}

/* The environment of an exec-mode worker: the template, then
 * PROCMESH_NODE (mesh readiness) and the LISTEN_* variables (listen fds).
 * The extra strings live in *text (freed by the caller after the fork);
 * *pid_digits points into LISTEN_PID's value for the child to fill in. */
static char **exec_env(pm_cluster *c, int node_fd_at, const char *notify, char **text,
                       char **pid_digits)
{
    const pm_options *o = c->o;
    size_t names = 0;
    for (size_t i = 0; i < o->npass_fds; i++)
        names += strlen(o->fd_names[i]) + 1;
    size_t size = 64 + (o->listen_env ? 64 + names : 0) + (notify ? 32 + strlen(notify) : 0);
    char **env = malloc((c->nenv + 6) * sizeof(*env));
    char *t = malloc(size);
    if (env == NULL || t == NULL) {
        free(env);
        free(t);
        return NULL;
    }
    memcpy(env, c->env, c->nenv * sizeof(*env));
    size_t k = c->nenv, used = 0;
    *pid_digits = NULL;
    if (node_fd_at >= 0) {
        env[k++] = t + used;
        used += (size_t)snprintf(t + used, size - used, "%s=%d,%d,%d", PM__NODE_ENV, node_fd_at,
                                 node_fd_at + 1, node_fd_at + 2) + 1;
    }
    if (notify != NULL) {
        env[k++] = t + used;
        used += (size_t)snprintf(t + used, size - used, "NOTIFY_SOCKET=%s", notify) + 1;
    }
    if (o->listen_env && o->npass_fds > 0) {
        env[k++] = t + used;
        used += (size_t)snprintf(t + used, size - used, "LISTEN_FDS=%zu", o->npass_fds) + 1;
        env[k++] = t + used;
        used += (size_t)snprintf(t + used, size - used, "LISTEN_FDNAMES=");
        for (size_t i = 0; i < o->npass_fds; i++)
            used += (size_t)snprintf(t + used, size - used, "%s%s", i ? ":" : "", o->fd_names[i]);
        used++;
        env[k++] = t + used;
        used += (size_t)snprintf(t + used, size - used, "LISTEN_PID=") ;
        *pid_digits = t + used;
        memset(t + used, '0', 11);
        used += 12;
    }
    env[k] = NULL;
    *text = t;
    return env;
}

/* Notify readiness: a datagram socket for this incarnation in the abstract
 * namespace (nothing to clean up on disk), with SO_PASSCRED so that every
 * datagram carries its sender's pid: only the slot's own process counts. */
static int open_notify(pm_cluster *c, pm__slot *s, char *name, size_t size)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    int len = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "procmesh/%d/%u/%llu",
                       (int)c->self, s->index, (unsigned long long)s->incarnation);
    snprintf(name, size, "@%s", sa.sun_path + 1);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                                                     (size_t)len)) < 0) {
        int err = -errno;
        pm__close(fd);
        return err;
    }
    s->notify_fd = fd;
    s->watchdog = 0;
    return 0;
}

/* Reads what the worker sent on its NOTIFY_SOCKET. */
static void on_notify(pm_cluster *c, pm__slot *s)
{
    for (int i = 0; i < 16 && s->notify_fd >= 0; i++) {
        char buf[4096];
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(sizeof(struct ucred))];
        } ctl;
        struct iovec iov = {buf, sizeof(buf) - 1};
        struct msghdr mh;
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = ctl.b;
        mh.msg_controllen = sizeof(ctl.b);
        ssize_t n = recvmsg(s->notify_fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0)
            break;
        buf[n] = '\0';
        pid_t from = 0;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS) {
                struct ucred cr;
                memcpy(&cr, CMSG_DATA(cm), sizeof(cr));
                from = cr.pid;
            }
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                /* Passed fds (FDSTORE=1) are not supported: close them. */
                size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t k = 0; k < nfd; k++) {
                    int fd;
                    memcpy(&fd, CMSG_DATA(cm) + k * sizeof(int), sizeof(int));
                    close(fd);
                }
            }
        }
        if (from != s->pid) {
            c->stats.notify_dropped++; /* not the slot's worker: forged or a child */
            continue;
        }
        for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line != NULL;
             line = strtok_r(NULL, "\n", &save)) {
            if (strcmp(line, "READY=1") == 0) {
                dispatch(c, s, PM__EV_READY);
            } else if (strcmp(line, "WATCHDOG=1") == 0) {
                s->watchdog = 1;
                s->progress_ms = pm__now_ms();
            } else if (strcmp(line, "STOPPING=1") == 0) {
                emit(c, PM_EVENT_STOPPING, s, PM_REASON_NOTIFY, 0);
            }
        }
    }
    if (s->notify_fd >= 0 &&
        pm__loop_arm(&c->loop, s->notify_fd, TAG(TAG_NOTIFY, s->index, s->incarnation)) == 0)
        s->notify_armed = 1;
}

/* Starts the next incarnation of s. Returns 0, or -errno with nothing left
 * behind (no process, no fd, no memory). */
static int start_incarnation(pm_cluster *c, pm__slot *s)
{
    int pipefd[2] = {-1, -1};
    char **env = NULL;
    char *envtext = NULL;
    int rc;
    pid_t pid = -1;

    s->incarnation++;
    s->exec_errno = 0;
    s->kill_reason = 0;
    rc = pm__link_create(&s->link, s->index, s->incarnation, c->o->ring_size, c->self,
                         (uint32_t)c->o->heartbeat_timeout_ms);
    if (rc < 0)
        goto fail;

    sigset_t *mask = c->mask_changed ? &c->old_mask : NULL;
    sigset_t cur;
    if (mask == NULL) {
        pthread_sigmask(SIG_SETMASK, NULL, &cur);
        mask = &cur;
    }
    pm__spawn_req req;
    memset(&req, 0, sizeof(req));
    req.parent = c->self;
    req.mask = mask;
    struct child_ctx ctx = {c, s};
    int fds[PM__MAX_PASS_FDS + 3];
    if (c->o->exec_path != NULL) {
        if (pipe2(pipefd, O_CLOEXEC) < 0) {
            rc = -errno;
            goto fail;
        }
        size_t n = c->o->npass_fds;
        int mesh = c->o->ready_mode == PM_READY_MESH;
        memcpy(fds, c->o->pass_fds, n * sizeof(int));
        if (mesh) {
            /* Only a worker that links libprocmesh gets its memory. */
            fds[n] = s->link.memfd;
            fds[n + 1] = s->link.node_efd;
            fds[n + 2] = s->link.hub_efd;
        }
        char notify[sizeof(((struct sockaddr_un *)0)->sun_path) + 2];
        if (c->o->ready_mode == PM_READY_NOTIFY) {
            rc = open_notify(c, s, notify, sizeof(notify));
            if (rc < 0)
                goto fail;
        }
        env = exec_env(c, mesh ? 3 + (int)n : -1,
                       c->o->ready_mode == PM_READY_NOTIFY ? notify : NULL, &envtext,
                       &req.pid_digits);
        if (env == NULL) {
            rc = -ENOMEM;
            goto fail;
        }
        req.path = c->exec_path;
        req.argv = c->o->exec_argv;
        req.envp = env;
        req.fds = fds;
        req.nfds = (int)n + (mesh ? 3 : 0);
        req.err_pipe = pipefd[1];
    } else {
        req.child = fork_child;
        req.ctx = &ctx;
    }
    pid = pm__spawn(&req);
    if (pid < 0) {
        rc = (int)pid;
        goto fail;
    }
    free(env);
    env = NULL;
    free(envtext);
    envtext = NULL;
    pm__close(pipefd[1]);
    pipefd[1] = -1;
    s->pid = pid;
    s->exec_pipe = pipefd[0];
    pipefd[0] = -1;
    if (s->exec_pipe >= 0)
        (void)fcntl(s->exec_pipe, F_SETFL, O_NONBLOCK);
    rc = pm__pidfd_open(pid);
    if (rc >= 0) {
        s->pidfd = rc;
    } else if (rc == -ENOSYS) {
        /* Kernel < 5.3: exits are found by SIGCHLD or by scanning. */
        s->pidfd = -1;
        if (!c->o->handle_signals)
            c->poll_children = 1;
    } else {
        /* EMFILE and friends: we cannot watch it, so it must not live.
         * kill() is safe: it is our unreaped child. */
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        s->pid = 0;
        goto fail;
    }
    s->state = PM_SLOT_STARTING;
    set_deadline(s, pm__now_ms() + (uint64_t)c->o->ready_timeout_ms, PM__EV_READY_TIMEOUT);
    if (s->pidfd >= 0) {
        if (pm__loop_arm(&c->loop, s->pidfd, TAG(TAG_PIDFD, s->index, s->incarnation)) == 0)
            s->pid_armed = 1;
    }
    /* Announce that the hub waits on this ring before the worker can say
     * hello, so its first publish rings the doorbell. */
    if (c->o->ready_mode == PM_READY_EXEC &&
        pm__loop_arm(&c->loop, s->exec_pipe, TAG(TAG_EXECPIPE, s->index, s->incarnation)) == 0)
        s->pipe_armed = 1; /* EOF on the error pipe = exec succeeded = ready */
    if (s->notify_fd >= 0 &&
        pm__loop_arm(&c->loop, s->notify_fd, TAG(TAG_NOTIFY, s->index, s->incarnation)) == 0)
        s->notify_armed = 1;
    s->reading = 1;
    if (pm__ring_arm(&s->link.rx) != 0)
        s->busy = 1;
    else if (pm__loop_arm(&c->loop, s->link.hub_efd, TAG(TAG_HUB, s->index, s->incarnation)) == 0)
        s->hub_armed = 1;
    emit(c, PM_EVENT_STARTED, s, PM_REASON_SPAWN, 0);
    return 0;

fail:
    free(env);
    free(envtext);
    pm__close(s->notify_fd);
    s->notify_fd = -1;
    pm__close(pipefd[0]);
    pm__close(pipefd[1]);
    pm__close(s->exec_pipe);
    s->exec_pipe = -1;
    pm__link_close(&s->link);
    s->pid = 0;
    return rc;
}

/* ------------------------------------------------------------------ actions */

static int spawn_error_of(const pm__slot *s)
{
    if (s->exec_errno != 0)
        return -s->exec_errno;
    if (s->kill_reason == PM_REASON_READY_TIMEOUT)
        return -ETIMEDOUT;
    return -ECHILD;
}

static void set_stopped(pm_cluster *c, pm__slot *s, int reason)
{
    s->state = PM_SLOT_STOPPED;
    set_deadline(s, 0, 0);
    emit(c, PM_EVENT_STOPPED, s, reason, 0);
}

/* The incarnation failed: restart it under the budget, or retire it. */
static void after_failure(pm_cluster *c, pm__slot *s)
{
    if (c->spawning && !s->ever_ready) {
        /* pm_cluster_spawn gives up on the first failure of a first start. */
        if (c->spawn_error == 0)
            c->spawn_error = spawn_error_of(s);
        set_stopped(c, s, PM_REASON_SPAWN_ABORTED);
        return;
    }
    if (c->terminating) {
        set_stopped(c, s, PM_REASON_STOP);
        return;
    }
    if (c->o->restart_policy == PM_RESTART_NEVER) {
        set_stopped(c, s, PM_REASON_POLICY);
        return;
    }
    uint32_t delay = 0;
    int v = pm__budget_on_failure(&s->budget, &c->bcfg, pm__now_ms(), rand01(c), &delay);
    if (v == -ENOMEM) {
        /* Could not record the restart: try again after the longest
         * backoff rather than restarting without a budget. */
        v = PM__BUDGET_RESTART;
        delay = c->bcfg.max_backoff_ms;
    }
    if (v == PM__BUDGET_RETIRE) {
        s->state = PM_SLOT_RETIRED;
        set_deadline(s, 0, 0);
        emit(c, PM_EVENT_RETIRED, s, PM_REASON_BUDGET, 0);
        pm_address a;
        slot_address(c, s, &a);
        a.incarnation = s->incarnation;
        void (*cb)(pm_cluster *, unsigned, const pm_address *, unsigned, void *) =
            c->o->on_down != NULL ? c->o->on_down : default_on_down;
        cb(c, s->index, &a, s->budget.total, c->o->on_down_arg);
        return;
    }
    s->state = PM_SLOT_BACKOFF;
    set_deadline(s, pm__now_ms() + delay, PM__EV_BACKOFF_DONE);
    emit(c, PM_EVENT_RESTART_SCHEDULED, s, PM_REASON_BACKOFF, delay);
}

static void act_ignore(pm_cluster *c, pm__slot *s)
{
    (void)c;
    (void)s;
}

static void act_ready(pm_cluster *c, pm__slot *s)
{
    s->state = PM_SLOT_READY;
    s->ever_ready = 1;
    set_deadline(s, 0, 0);
    /* The heartbeat period starts at ready: a slow start is the ready
     * timeout's business, never a hang. */
    s->progress_ms = pm__now_ms();
    s->last_beats = atomic_load_explicit(&((const struct pm__ctl *)s->link.map)->beats,
                                         memory_order_relaxed);
    pm__budget_on_ready(&s->budget, pm__now_ms());
    emit(c, PM_EVENT_READY, s, PM_REASON_READY, 0);
}

static void act_failed(pm_cluster *c, pm__slot *s)
{
    after_failure(c, s);
}

static void act_ended(pm_cluster *c, pm__slot *s)
{
    int clean = s->last_exit_code == 0 && s->last_signal == 0 && s->kill_reason == 0;
    if (!clean) {
        after_failure(c, s);
        return;
    }
    if (c->o->restart_policy == PM_RESTART_ALWAYS && !c->terminating) {
        after_failure(c, s); /* a restart like any other, under the same budget */
        return;
    }
    set_stopped(c, s, PM_REASON_EXIT);
}

static void act_kill(pm_cluster *c, pm__slot *s)
{
    (void)c;
    slot_signal(s, SIGKILL);
    set_deadline(s, 0, 0);
    if (s->state == PM_SLOT_STOPPING)
        c->any_killed = 1;
}

static void act_spawn(pm_cluster *c, pm__slot *s)
{
    set_deadline(s, 0, 0);
    int rc = start_incarnation(c, s);
    if (rc == 0)
        return;
    /* fork, memfd or mmap failed (EAGAIN, EMFILE, ENOMEM): a failed start,
     * charged to the budget and retried after the backoff. */
    s->last_exit_code = rc;
    emit(c, PM_EVENT_SPAWN_FAILED, s, PM_REASON_SPAWN, 0);
    if (c->spawning && c->spawn_error == 0)
        c->spawn_error = rc;
    after_failure(c, s);
}

static void act_stop_request(pm_cluster *c, pm__slot *s)
{
    s->state = PM_SLOT_STOPPING;
    /* The stop request: in band (a flag in the control block and a STOP
     * frame, so pm_node_recv returns -ESHUTDOWN) and SIGTERM for workers
     * that do not read their messages. */
    pm__hub_stop_request(c, s);
    slot_signal(s, SIGTERM);
    if (c->o->stop_timeout_ms == 0) {
        slot_signal(s, SIGKILL);
        c->any_killed = 1;
        set_deadline(s, 0, 0);
        return;
    }
    set_deadline(s, pm__now_ms() + (uint64_t)c->o->stop_timeout_ms, PM__EV_STOP_TIMEOUT);
}

static void act_stop_kill(pm_cluster *c, pm__slot *s)
{
    /* A replacement still in its handshake is killed, never registered. */
    s->state = PM_SLOT_STOPPING;
    s->kill_reason = PM_REASON_STOP;
    slot_signal(s, SIGKILL);
    set_deadline(s, 0, 0);
    c->any_killed = 1;
}

static void act_cancel(pm_cluster *c, pm__slot *s)
{
    set_stopped(c, s, PM_REASON_STOP);
}

static void act_stopped(pm_cluster *c, pm__slot *s)
{
    if (s->replace && !c->terminating) {
        /* A replacement asked for by pm_cluster_restart_slot: start it now,
         * without a backoff and without charging the budget. */
        s->replace = 0;
        s->state = PM_SLOT_BACKOFF;
        set_deadline(s, pm__now_ms(), PM__EV_BACKOFF_DONE);
        emit(c, PM_EVENT_RESTART_SCHEDULED, s, PM_REASON_REPLACE, 0);
        return;
    }
    set_stopped(c, s, PM_REASON_STOP);
}

static void (*const actions[PM__A_COUNT])(pm_cluster *, pm__slot *) = {
    [PM__A_IGNORE] = act_ignore,
    [PM__A_READY] = act_ready,
    [PM__A_FAILED] = act_failed,
    [PM__A_ENDED] = act_ended,
    [PM__A_KILL] = act_kill,
    [PM__A_SPAWN] = act_spawn,
    [PM__A_STOP_REQUEST] = act_stop_request,
    [PM__A_STOP_KILL] = act_stop_kill,
    [PM__A_CANCEL] = act_cancel,
    [PM__A_STOPPED] = act_stopped,
};

static void dispatch(pm_cluster *c, pm__slot *s, int event)
{
    actions[pm__slot_action(s->state, event)](c, s);
}

/* A fault found by the hub: the worker is killed; the exit that follows is
 * charged as a failure with this reason. */
static void fault(pm_cluster *c, pm__slot *s, int reason)
{
    if (!slot_has_process(s) || !s->reading)
        return; /* already cut off */
    if (s->kill_reason == 0)
        s->kill_reason = reason;
    disarm_hub(c, s); /* never read from this incarnation again */
    /* Tell the worker, in case the SIGKILL below takes a while to land (a
     * process in uninterruptible sleep): its next procmesh call returns
     * -ESHUTDOWN. */
    struct pm__ctl *ctl = s->link.map;
    if (ctl != NULL) {
        atomic_store_explicit(&ctl->fenced, 1, memory_order_release);
        atomic_store_explicit(&ctl->stop, 1, memory_order_release);
    }
    s->fences++;
    s->last_fence_reason = reason;
    if (reason == PM_REASON_HEARTBEAT)
        c->stats.fences_heartbeat++;
    else if (reason == PM_REASON_CORRUPT_RING)
        c->stats.fences_corrupt_ring++;
    else
        c->stats.fences_protocol++;
    emit(c, PM_EVENT_FENCED, s, reason, 0);
    dispatch(c, s, PM__EV_FAULT);
}

static uint64_t boottime_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* How often the liveness check runs: four times per heartbeat timeout. */
static uint64_t check_period(const pm_cluster *c)
{
    uint64_t p = (uint64_t)c->o->heartbeat_timeout_ms / 4;
    return p < 5 ? 5 : p;
}

/*
 * The liveness check (a timer, every heartbeat_timeout / 4).
 *
 * First the supervisor checks itself: if this check runs later than it
 * should by more than half the timeout (we were stopped, starved, or the
 * application did not call pm_cluster_run), or CLOCK_BOOTTIME ran ahead of
 * CLOCK_MONOTONIC by as much (the machine was suspended: MONOTONIC stops,
 * BOOTTIME does not), the silence was ours: every worker gets a fresh period
 * and the stall is counted and reported, instead of fencing workers for it.
 *
 * Then each ready worker: its progress counter (advanced by every procmesh
 * call it makes, and periodically while it waits in pm_node_recv) is
 * compared with the last value seen. Unchanged for longer than the timeout:
 * hung, fenced. Only change is read, never the value's meaning, so a worker
 * that scribbles on it can at worst look alive or hung.
 */
static void check_liveness(pm_cluster *c, uint64_t now)
{
    uint64_t timeout = (uint64_t)c->o->heartbeat_timeout_ms;
    uint64_t period = check_period(c);
    uint64_t boot = boottime_ms();
    if (c->last_check_mono != 0) {
        uint64_t dm = now - c->last_check_mono;
        uint64_t db = boot - c->last_check_boot;
        uint64_t late = dm > period ? dm - period : 0;
        uint64_t suspended = db > dm ? db - dm : 0;
        uint64_t stall = late > suspended ? late : suspended;
        if (stall > timeout / 2) {
            c->stats.stalls++;
            if (stall > c->stats.longest_stall_ms)
                c->stats.longest_stall_ms = stall;
            for (unsigned i = 0; i < c->nslots; i++)
                c->slots[i].progress_ms = now;
            if (c->o->on_event != NULL) {
                pm_event ev;
                memset(&ev, 0, sizeof(ev));
                ev.type = PM_EVENT_STALLED;
                ev.delay_ms = stall > UINT32_MAX ? UINT32_MAX : (uint32_t)stall;
                ev.reason_code = suspended > late ? PM_REASON_SUSPEND : PM_REASON_STALL;
                ev.reason = pm_reason_name(ev.reason_code);
                c->o->on_event(c, &ev, c->o->on_event_arg);
            }
        }
    }
    c->last_check_mono = now;
    c->last_check_boot = boot;
    for (unsigned i = 0; i < c->nslots && c->o->ready_mode != PM_READY_EXEC; i++) {
        pm__slot *s = &c->slots[i];
        if (s->state != PM_SLOT_READY || !s->reading)
            continue;
        if (c->o->ready_mode == PM_READY_NOTIFY) {
            /* As under systemd's WatchdogSec: only a worker that sends
             * WATCHDOG=1 is held to it; silence otherwise is not a hang. */
            if (s->watchdog && now - s->progress_ms > timeout)
                fault(c, s, PM_REASON_HEARTBEAT);
            continue;
        }
        const struct pm__ctl *ctl = s->link.map;
        uint64_t beats = atomic_load_explicit(&ctl->beats, memory_order_relaxed);
        if (beats != s->last_beats) {
            s->last_beats = beats;
            s->progress_ms = now;
        } else if (now - s->progress_ms > timeout) {
            fault(c, s, PM_REASON_HEARTBEAT);
        }
    }
    c->next_check = now + period;
}

void pm__cluster_fault(pm_cluster *c, pm__slot *s, int reason)
{
    fault(c, s, reason);
}

/* ------------------------------------------------------------------ rings */

static int send_init(pm_cluster *c, pm__slot *s)
{
    unsigned char *buf = malloc(pm__init_size(c->o->init_len));
    if (buf == NULL)
        return -ENOMEM;
    pm__init_msg m;
    m.slot = s->index;
    slot_address(c, s, &m.addr);
    m.data = c->o->init_data;
    m.len = (uint32_t)c->o->init_len;
    pm__init_encode(&m, buf);
    pm__frame_hdr h = pm__main_hdr(PM__FT_INIT, s);
    int rc = pm__frame_send(&s->link.tx, &h, buf, pm__init_size(m.len));
    free(buf);
    return rc;
}

/* Reads up to one turn's worth of frames from the slot's inbound ring. */
static void service_ring(pm_cluster *c, pm__slot *s)
{
    s->busy = 0;
    s->want_arm = 0;
    int drained = 0;
    for (int i = 0; i < PM__FRAMES_PER_TURN && s->reading && s->blocked_on < 0; i++) {
        pm__frame_hdr h;
        const void *payload;
        int rc = pm__frame_recv(&s->link.rx, PM__LINK_MAX_FRAME, &h, &payload);
        if (rc == 0) {
            drained = 1;
            break;
        }
        c->active = 1;
        if (rc == -EBADMSG) {
            fault(c, s, PM_REASON_CORRUPT_RING);
            return;
        }
        if (rc < 0) {
            s->malformed++;
            continue;
        }
        /* The ring admits frames up to PM__LINK_MAX_FRAME (room for INIT),
         * but nothing a worker may send is longer than PM_MAX_PAYLOAD: every
         * consumer of a worker's frame (main's receive buffer, another
         * worker's recv) is sized for that. Checked here, once, for every
         * destination: a longer frame is a protocol fault. */
        if (h.len > PM_MAX_PAYLOAD) {
            s->malformed++;
            fault(c, s, PM_REASON_PROTOCOL);
            return;
        }
        if (h.type == PM__FT_MSG || h.type == PM__FT_REQUEST || h.type == PM__FT_REPLY) {
            if (s->state != PM_SLOT_READY && s->state != PM_SLOT_STOPPING) {
                pm__ring_consume(&s->link.rx);
                s->malformed++; /* traffic before ready */
                continue;
            }
            /* Identity comes from the ring, never from the frame. */
            h.src = s->index;
            h.src_inc = s->incarnation;
            if (pm__hub_relay(c, s, &h, payload) == -EAGAIN)
                break; /* the destination is full: leave it in the ring */
            pm__ring_consume(&s->link.rx);
            continue;
        }
        unsigned char ver[4] = {0, 0, 0, 0};
        if (h.type == PM__FT_HELLO && h.len == 4)
            memcpy(ver, payload, 4);
        pm__ring_consume(&s->link.rx);
        if (h.type == PM__FT_HELLO) {
            if (s->hello || h.len != 4 || ver[0] != PM__PROTO_VERSION || ver[1] || ver[2] || ver[3]) {
                fault(c, s, PM_REASON_PROTOCOL);
                return;
            }
            s->hello = 1;
            if (send_init(c, s) < 0) {
                fault(c, s, PM_REASON_PROTOCOL);
                return;
            }
        } else if (h.type == PM__FT_READY) {
            if (!s->hello) {
                fault(c, s, PM_REASON_PROTOCOL);
                return;
            }
            dispatch(c, s, PM__EV_READY);
        } else {
            s->malformed++;
        }
    }
    pm__ring_release(&s->link.rx);
    if (!s->reading || s->blocked_on >= 0)
        return; /* a blocked sender is read again when it is unblocked */
    if (drained)
        s->want_arm = 1; /* armed just before the loop sleeps (arm_idle) */
    else
        s->busy = 1; /* its turn is over; more next turn */
}

/* Before the loop sleeps: tell every drained worker to ring our doorbell
 * (pm__ring_arm), unless its ring is no longer empty. Deferred to here so a
 * busy hub, or one spinning for the next frame, lets its workers publish
 * without a wake-up system call. Returns 1 when something needs a turn. */
static int arm_idle(pm_cluster *c)
{
    int work = 0;
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *s = &c->slots[i];
        if (!s->want_arm)
            continue;
        s->want_arm = 0;
        if (!s->reading || s->blocked_on >= 0)
            continue;
        int more = pm__ring_arm(&s->link.rx);
        if (more < 0) {
            fault(c, s, PM_REASON_CORRUPT_RING);
        } else if (more > 0) {
            s->busy = 1;
            work = 1;
        }
    }
    return work;
}

/* Spins up to the hub spin time for a frame on a drained ring or a loop
 * completion. 1 when there is work. */
static int spin_for_work(pm_cluster *c)
{
    uint64_t end = pm__now_ns() + c->o->hub_spin_us * 1000u;
    do {
        for (unsigned i = 0; i < c->nslots; i++) {
            pm__slot *s = &c->slots[i];
            if (s->want_arm && s->reading && s->blocked_on < 0 && !pm__ring_empty(&s->link.rx)) {
                s->busy = 1;
                return 1;
            }
        }
        if (pm__loop_ready(&c->loop))
            return 1;
    } while (pm__now_ns() < end);
    return 0;
}

/* The slot's doorbell rang (from_poll) or its ring had work left over. */
static void on_hub(pm_cluster *c, pm__slot *s, int from_poll)
{
    if (from_poll) {
        uint64_t v;
        s->hub_armed = 0;
        /* Drain the doorbell; the ring is the truth, the count is not. */
        ssize_t n = read(s->link.hub_efd, &v, sizeof(v));
        (void)n;
    }
    if (!s->reading)
        return;
    if (s->q_head != NULL)
        pm__hub_flush(c, s); /* it made room in its down ring */
    if (!s->reading)
        return;
    pm__ring_disarm(&s->link.rx);
    service_ring(c, s);
    if (s->reading && !s->busy && !s->hub_armed &&
        pm__loop_arm(&c->loop, s->link.hub_efd, TAG(TAG_HUB, s->index, s->incarnation)) == 0)
        s->hub_armed = 1;
}

/* ------------------------------------------------------------------ loop */

static void reap_all(pm_cluster *c)
{
    for (unsigned i = 0; i < c->nslots; i++)
        try_reap(c, &c->slots[i]);
}

/* As PID 1 or a subreaper: every child that has exited, worker or not.
 * WNOWAIT peeks without reaping, so a worker is reaped by its own path
 * (try_reap, which reports it) and anything else here. */
static void reap_children(pm_cluster *c)
{
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof(si));
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
            break;
        pm__slot *w = NULL;
        for (unsigned i = 0; i < c->nslots && w == NULL; i++)
            if (c->slots[i].pid == si.si_pid)
                w = &c->slots[i];
        if (w != NULL) {
            if (!try_reap(c, w))
                break; /* cannot happen: it is a zombie; never loop on it */
        } else {
            while (waitpid(si.si_pid, NULL, 0) < 0 && errno == EINTR)
                ;
            c->stats.orphans_reaped++;
        }
    }
}

static void on_signal(pm_cluster *c)
{
    struct signalfd_siginfo si[16];
    ssize_t n;
    while ((n = read(c->sigfd, si, sizeof(si))) > 0) {
        for (size_t i = 0; i < (size_t)n / sizeof(si[0]); i++) {
            if (si[i].ssi_signo == SIGCHLD) {
                if (c->o->reap_orphans)
                    reap_children(c);
                else
                    reap_all(c);
            }
            else
                c->last_signal = (int)si[i].ssi_signo;
        }
    }
}

static void fire_due(pm_cluster *c)
{
    uint64_t now = pm__now_ms();
    /* Liveness first: after a stall of our own, no worker may be judged on
     * the silence before it is given a fresh period. */
    if (c->next_check != 0 && now >= c->next_check)
        check_liveness(c, now);
    pm__hub_fire(c, now);
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *s = &c->slots[i];
        if (s->deadline != 0 && s->deadline <= now) {
            int ev = s->deadline_event;
            set_deadline(s, 0, 0);
            if (ev == PM__EV_READY_TIMEOUT && s->kill_reason == 0)
                s->kill_reason = PM_REASON_READY_TIMEOUT;
            dispatch(c, s, ev);
        }
    }
}

static void handle_tag(pm_cluster *c, uint64_t tag)
{
    int kind = TAG_KIND(tag);
    if (kind == TAG_SIGNAL) {
        on_signal(c);
        pm__loop_arm(&c->loop, c->sigfd, TAG(TAG_SIGNAL, 0, 0));
        return;
    }
    if (kind == TAG_TIMER) {
        uint64_t v;
        ssize_t n = read(c->timerfd, &v, sizeof(v));
        (void)n;
        c->timer_at = 0; /* fired: rearm_timer sets it again */
        pm__loop_arm(&c->loop, c->timerfd, TAG(TAG_TIMER, 0, 0));
        return;
    }
    if (kind == TAG_WAKE) {
        uint64_t v;
        ssize_t n = read(c->wakefd, &v, sizeof(v));
        (void)n;
        pm__loop_arm(&c->loop, c->wakefd, TAG(TAG_WAKE, 0, 0));
        return;
    }
    unsigned idx = TAG_SLOT(tag);
    if (kind == TAG_USER) {
        if (c->watches == NULL || idx >= PM__MAX_WATCH)
            return;
        pm__watch *w = &c->watches[idx];
        if (w->fd < 0 || TAG_INC(tag) != w->gen)
            return; /* unwatched meanwhile */
        w->armed = 0;
        w->cb(c, w->fd, w->arg);
        return;
    }
    if (idx >= c->nslots)
        return;
    pm__slot *s = &c->slots[idx];
    /* A completion about an incarnation that is gone: drop it. */
    if (!slot_has_process(s) || TAG_INC(tag) != (s->incarnation & 0xffffffffu))
        return;
    if (kind == TAG_PIDFD) {
        s->pid_armed = 0;
        if (!try_reap(c, s) && s->pidfd >= 0 &&
            pm__loop_arm(&c->loop, s->pidfd, TAG(TAG_PIDFD, s->index, s->incarnation)) == 0)
            s->pid_armed = 1;
    } else if (kind == TAG_HUB) {
        on_hub(c, s, 1);
    } else if (kind == TAG_NOTIFY) {
        s->notify_armed = 0;
        on_notify(c, s);
    } else if (kind == TAG_EXECPIPE) {
        s->pipe_armed = 0;
        int e = 0;
        ssize_t k = read(s->exec_pipe, &e, sizeof(e));
        if (k == 0)
            dispatch(c, s, PM__EV_READY); /* exec succeeded */
        else if (k == (ssize_t)sizeof(e))
            s->exec_errno = e; /* the exit follows */
        else if (k < 0 && errno == EAGAIN &&
                 pm__loop_arm(&c->loop, s->exec_pipe, TAG(TAG_EXECPIPE, s->index, s->incarnation)) == 0)
            s->pipe_armed = 1;
    }
}

static int any_busy(const pm_cluster *c)
{
    for (unsigned i = 0; i < c->nslots; i++)
        if (c->slots[i].busy)
            return 1;
    return 0;
}

/* One turn: wait up to timeout_ms for readiness, handle it, fire deadlines.
 * Returns 0 or a negative errno from the loop itself. */
static int run_once(pm_cluster *c, int timeout_ms)
{
    uint64_t tags[64];
    if (any_busy(c))
        timeout_ms = 0;
    if (timeout_ms != 0) {
        /* About to sleep: spin first if traffic is flowing and the hub is
         * allowed to (pm_options_set_hub_spin_us), then arm the doorbells
         * of the drained rings. */
        if (c->active && c->o->hub_spin_us > 0 && spin_for_work(c))
            timeout_ms = 0;
        else if (arm_idle(c))
            timeout_ms = 0;
    }
    c->active = 0;
    if (c->poll_children && (timeout_ms < 0 || timeout_ms > PM__SCAN_MS))
        timeout_ms = PM__SCAN_MS;
    int rc = rearm_timer(c);
    if (rc < 0)
        return rc;
    int n = pm__loop_wait(&c->loop, timeout_ms, tags, 64);
    if (n < 0)
        return n;
    for (int i = 0; i < n; i++)
        handle_tag(c, tags[i]);
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *s = &c->slots[i];
        if (s->busy && slot_has_process(s))
            on_hub(c, s, 0);
    }
    if (c->poll_children)
        reap_all(c);
    fire_due(c);
    /* One publish (and at most one wake-up) per destination per turn. */
    pm__hub_publish(c);
    return 0;
}

PM_EXTERN int pm_cluster_run(pm_cluster *c, int timeout_ms)
{
    if (c == NULL)
        return -EINVAL;
    uint64_t end = timeout_ms < 0 ? 0 : pm__now_ms() + (uint64_t)timeout_ms;
    int rc = 0;
    c->last_signal = 0;
    for (;;) {
        int wait = -1;
        if (timeout_ms >= 0) {
            uint64_t now = pm__now_ms();
            wait = now >= end ? 0 : (int)(end - now);
        }
        rc = run_once(c, wait);
        if (rc < 0)
            break;
        if (c->last_signal != 0) {
            rc = -EINTR;
            break;
        }
        if (atomic_exchange(&c->stop, 0))
            break;
        if (timeout_ms >= 0 && pm__now_ms() >= end)
            break;
    }
    pm__loop_flush(&c->loop);
    rearm_timer(c);
    return rc;
}

PM_EXTERN void pm_cluster_stop(pm_cluster *c)
{
    if (c == NULL)
        return;
    atomic_store(&c->stop, 1);
    uint64_t one = 1;
    ssize_t n = write(c->wakefd, &one, sizeof(one));
    (void)n;
}

/* ------------------------------------------------------------------ create/free */

static char *resolve_path(const char *name)
{
    if (strchr(name, '/') != NULL)
        return strdup(name);
    const char *path = getenv("PATH");
    if (path == NULL || *path == '\0')
        path = "/usr/local/bin:/usr/bin:/bin";
    size_t nlen = strlen(name);
    for (const char *p = path; *p != '\0';) {
        const char *colon = strchr(p, ':');
        size_t dlen = colon != NULL ? (size_t)(colon - p) : strlen(p);
        char *cand = malloc(dlen + nlen + 3);
        if (cand == NULL)
            return NULL;
        snprintf(cand, dlen + nlen + 3, "%.*s/%s", (int)dlen, dlen > 0 ? p : ".", name);
        if (access(cand, X_OK) == 0)
            return cand;
        free(cand);
        if (colon == NULL)
            break;
        p = colon + 1;
    }
    /* Not found: exec reports ENOENT, which is the right error. */
    return strdup(name);
}

static int build_env(pm_cluster *c)
{
    size_t n = 0;
    for (char **e = environ; e != NULL && *e != NULL; e++)
        n++;
    c->env = calloc(n + 1, sizeof(*c->env));
    if (c->env == NULL)
        return -ENOMEM;
    size_t k = 0;
    size_t plen = strlen(PM__NODE_ENV);
    for (size_t i = 0; i < n; i++) {
        /* Drop an inherited PROCMESH_NODE: ours is appended per worker. */
        if (strncmp(environ[i], PM__NODE_ENV, plen) == 0 && environ[i][plen] == '=')
            continue;
        /* These describe the supervisor's own service manager contract
         * (systemd notify and socket activation); a worker that inherited
         * them would talk to systemd behind our back or claim our sockets. */
        static const char *const own[] = {"NOTIFY_SOCKET=", "WATCHDOG_USEC=", "WATCHDOG_PID=",
                                          "LISTEN_FDS=", "LISTEN_PID=", "LISTEN_FDNAMES="};
        int skip = 0;
        for (size_t k2 = 0; k2 < PM__ARRAY_SIZE(own); k2++)
            skip |= strncmp(environ[i], own[k2], strlen(own[k2])) == 0;
        if (skip)
            continue;
        c->env[k] = strdup(environ[i]);
        if (c->env[k] == NULL)
            return -ENOMEM;
        k++;
    }
    c->nenv = k;
    return 0;
}

static void cluster_free(pm_cluster *c)
{
    if (c == NULL)
        return;
    int saved = errno;
    pm__hub_free(c);
    for (unsigned i = 0; c->slots != NULL && i < c->nslots; i++) {
        pm__slot *s = &c->slots[i];
        pm__close(s->pidfd);
        pm__close(s->exec_pipe);
        pm__close(s->notify_fd);
        pm__link_close(&s->link);
        pm__budget_free(&s->budget);
    }
    free(c->slots);
    free(c->watches);
    if (c->loop.backend != 0)
        pm__loop_fini(&c->loop);
    pm__close(c->sigfd);
    pm__close(c->timerfd);
    pm__close(c->wakefd);
    if (c->mask_changed)
        pthread_sigmask(SIG_SETMASK, &c->old_mask, NULL);
    for (size_t i = 0; c->env != NULL && i < c->nenv; i++)
        free(c->env[i]);
    free(c->env);
    free(c->exec_path);
    pm_options_free(c->o);
    free(c);
    errno = saved;
}

static int cluster_create(const pm_options *o, pm_cluster **out)
{
    int rc;
    pm_cluster *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    c->sigfd = c->timerfd = c->wakefd = -1;
    c->o = pm__options_dup(o);
    if (c->o == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    c->nslots = (unsigned)pm__options_workers(c->o);
    c->slots = calloc(c->nslots, sizeof(*c->slots));
    if (c->slots == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *s = &c->slots[i];
        s->index = i;
        s->state = PM_SLOT_BACKOFF; /* no process yet; started at once below */
        s->pidfd = s->exec_pipe = s->notify_fd = -1;
        s->last_exit_code = -1;
        pm__link_zero(&s->link);
        pm__budget_init(&s->budget);
        pm__hub_slot_reset(s);
    }
    c->scratch = malloc(PM_MAX_PAYLOAD);
    if (c->scratch == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    c->self = getpid();
    c->ncpus = pm__cpus_available();
    c->bcfg.min_backoff_ms = (uint32_t)c->o->min_backoff_ms;
    c->bcfg.max_backoff_ms = (uint32_t)c->o->max_backoff_ms;
    c->bcfg.random_factor = c->o->random_factor;
    c->bcfg.max_restarts = c->o->max_restarts;
    c->bcfg.window_ms = (uint32_t)c->o->restart_window_ms;
    if (getrandom(&c->rng, sizeof(c->rng), GRND_NONBLOCK) != sizeof(c->rng))
        c->rng = pm__now_ns() ^ ((uint64_t)getpid() << 32);
    c->rng |= 1; /* xorshift must not start at 0 */
    if (c->o->exec_path != NULL) {
        c->exec_path = resolve_path(c->o->exec_path);
        if (c->exec_path == NULL || build_env(c) < 0) {
            rc = -ENOMEM;
            goto fail;
        }
    }
    rc = pm__loop_init(&c->loop, 2 * c->nslots + 8);
    if (rc < 0)
        goto fail;
    c->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    c->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->timerfd < 0 || c->wakefd < 0) {
        rc = -errno;
        goto fail;
    }
    if (c->o->handle_signals) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGCHLD);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP);
        /* Blocked so that they queue for the signalfd instead of running
         * their default action. */
        pthread_sigmask(SIG_BLOCK, &set, &c->old_mask);
        c->mask_changed = 1;
        c->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
        if (c->sigfd < 0) {
            rc = -errno;
            goto fail;
        }
        pm__loop_arm(&c->loop, c->sigfd, TAG(TAG_SIGNAL, 0, 0));
    }
    pm__loop_arm(&c->loop, c->timerfd, TAG(TAG_TIMER, 0, 0));
    pm__loop_arm(&c->loop, c->wakefd, TAG(TAG_WAKE, 0, 0));
    if (c->o->heartbeat_timeout_ms > 0)
        c->next_check = pm__now_ms() + check_period(c);
    *out = c;
    return 0;
fail:
    cluster_free(c);
    return rc;
}

/* Kills and reaps every process of the cluster. Only returns when all are
 * gone. First through the loop (so events are reported), then, if the loop
 * fails, by blocking waits. */
static void kill_and_reap_all(pm_cluster *c)
{
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *s = &c->slots[i];
        if (slot_has_process(s)) {
            s->state = PM_SLOT_STOPPING;
            if (s->kill_reason == 0)
                s->kill_reason = PM_REASON_STOP;
            slot_signal(s, SIGKILL);
        }
        set_deadline(s, 0, 0);
    }
    for (;;) {
        int alive = 0;
        for (unsigned i = 0; i < c->nslots; i++)
            alive += slot_has_process(&c->slots[i]);
        if (alive == 0)
            return;
        if (run_once(c, 100) < 0)
            break;
        reap_all(c);
    }
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *s = &c->slots[i];
        if (!slot_has_process(s))
            continue;
        siginfo_t si;
        slot_signal(s, SIGKILL);
        while (waitid(P_PID, (id_t)s->pid, &si, WEXITED) < 0 && errno == EINTR)
            ;
        release_process(c, s);
        s->state = PM_SLOT_STOPPED;
    }
}

PM_EXTERN int pm_cluster_spawn(const pm_options *o, pm_cluster **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    int rc = pm_options_validate(o, NULL, 0);
    if (rc < 0)
        return rc;
    pm_cluster *c = NULL;
    rc = cluster_create(o, &c);
    if (rc < 0)
        return rc;
    c->spawning = 1;
    for (unsigned i = 0; i < c->nslots && c->spawn_error == 0; i++)
        dispatch(c, &c->slots[i], PM__EV_BACKOFF_DONE);
    for (;;) {
        if (c->spawn_error != 0)
            break;
        /* Done once every slot has been ready: one that was ready and has
         * exited since is handled by the normal rules, not as a failed
         * spawn. */
        unsigned ready = 0;
        for (unsigned i = 0; i < c->nslots; i++)
            ready += c->slots[i].ever_ready;
        if (ready == c->nslots)
            break;
        rc = run_once(c, -1);
        /* SIGHUP asks to replace running workers; while they are still
         * being started there is nothing to replace: it is dropped. */
        if (c->last_signal == SIGHUP)
            c->last_signal = 0;
        if (rc == 0 && c->last_signal != 0)
            rc = -EINTR;
        if (rc < 0) {
            c->spawn_error = rc;
            break;
        }
    }
    if (c->spawn_error != 0) {
        rc = c->spawn_error;
        kill_and_reap_all(c);
        cluster_free(c);
        return rc;
    }
    c->spawning = 0;
    pm__loop_flush(&c->loop);
    *out = c;
    return 0;
}

PM_EXTERN int pm_cluster_watch_fd(pm_cluster *c, int fd, void (*cb)(pm_cluster *, int, void *),
                                  void *arg)
{
    if (c == NULL || fd < 0 || cb == NULL)
        return -EINVAL;
    if (c->watches == NULL) {
        c->watches = malloc(PM__MAX_WATCH * sizeof(*c->watches));
        if (c->watches == NULL)
            return -ENOMEM;
        for (unsigned i = 0; i < PM__MAX_WATCH; i++) {
            c->watches[i].fd = -1;
            c->watches[i].gen = 0;
            c->watches[i].armed = 0;
        }
    }
    pm__watch *w = NULL, *fr = NULL;
    for (unsigned i = 0; i < PM__MAX_WATCH && w == NULL; i++) {
        if (c->watches[i].fd == fd)
            w = &c->watches[i];
        else if (fr == NULL && c->watches[i].fd < 0)
            fr = &c->watches[i];
    }
    if (w == NULL) {
        if (fr == NULL)
            return -ENOSPC;
        w = fr;
        w->fd = fd;
        w->gen++;
        w->armed = 0;
    }
    w->cb = cb;
    w->arg = arg;
    if (w->armed)
        return 0;
    unsigned idx = (unsigned)(w - c->watches);
    int rc = pm__loop_arm(&c->loop, fd, TAG(TAG_USER, idx, w->gen));
    if (rc == 0)
        w->armed = 1;
    return rc;
}

PM_EXTERN int pm_cluster_unwatch_fd(pm_cluster *c, int fd)
{
    if (c == NULL || c->watches == NULL)
        return -EINVAL;
    for (unsigned i = 0; i < PM__MAX_WATCH; i++) {
        pm__watch *w = &c->watches[i];
        if (w->fd != fd)
            continue;
        if (w->armed)
            pm__loop_disarm(&c->loop, fd, TAG(TAG_USER, i, w->gen));
        /* The poll holds its own reference to the file until the removal is
         * processed: submit now so the caller may close fd right away. */
        pm__loop_flush(&c->loop);
        w->fd = -1;
        w->armed = 0;
        w->gen++;
        return 0;
    }
    return -ENOENT;
}

PM_EXTERN int pm_cluster_restart_slot(pm_cluster *c, unsigned slot)
{
    if (c == NULL || slot >= c->nslots)
        return -EINVAL;
    pm__slot *s = &c->slots[slot];
    if (s->state != PM_SLOT_READY)
        return -EBUSY;
    /* The usual stop (request, then SIGKILL after the stop timeout); the
     * replacement starts once the old incarnation is reaped, so the slot
     * never has two live incarnations. */
    s->replace = 1;
    dispatch(c, s, PM__EV_STOP);
    pm__hub_publish(c);
    pm__loop_flush(&c->loop);
    rearm_timer(c);
    return 0;
}

PM_EXTERN int pm_cluster_terminate(pm_cluster *c)
{
    if (c == NULL)
        return -EINVAL;
    c->terminating = 1;
    c->last_signal = 0;
    for (unsigned i = 0; i < c->nslots; i++)
        dispatch(c, &c->slots[i], PM__EV_STOP);
    int rc = 0;
    for (;;) {
        int alive = 0;
        for (unsigned i = 0; i < c->nslots; i++)
            alive += slot_has_process(&c->slots[i]);
        if (alive == 0)
            break;
        rc = run_once(c, 1000);
        /* A second SIGTERM/SIGINT, or a broken loop: skip the grace period. */
        if (rc < 0 || c->last_signal != 0) {
            c->any_killed = 1;
            kill_and_reap_all(c);
            break;
        }
    }
    int killed = c->any_killed;
    cluster_free(c);
    return rc < 0 ? rc : killed;
}

/* ------------------------------------------------------------------ queries */

PM_EXTERN size_t pm_cluster_size(const pm_cluster *c)
{
    if (c == NULL)
        return 0;
    size_t n = 0;
    for (unsigned i = 0; i < c->nslots; i++)
        n += c->slots[i].state != PM_SLOT_RETIRED && c->slots[i].state != PM_SLOT_STOPPED;
    return n;
}

PM_EXTERN int pm_cluster_addresses(const pm_cluster *c, pm_address *out, size_t cap)
{
    if (c == NULL || (out == NULL && cap > 0))
        return -EINVAL;
    size_t n = 0;
    for (unsigned i = 0; i < c->nslots; i++) {
        const pm__slot *s = &c->slots[i];
        if (s->state == PM_SLOT_RETIRED || s->state == PM_SLOT_STOPPED)
            continue;
        if (n < cap)
            slot_address(c, s, &out[n]);
        n++;
    }
    return (int)n;
}

PM_EXTERN int pm_cluster_fd(const pm_cluster *c)
{
    return c != NULL ? pm__loop_fd(&c->loop) : -EINVAL;
}

PM_EXTERN unsigned pm_cluster_slots(const pm_cluster *c)
{
    return c != NULL ? c->nslots : 0;
}

PM_EXTERN int pm_cluster_last_signal(const pm_cluster *c)
{
    return c != NULL ? c->last_signal : 0;
}

PM_EXTERN int pm_cluster_slot_info(const pm_cluster *c, unsigned slot, pm_slot_info *info)
{
    if (c == NULL || info == NULL || slot >= c->nslots)
        return -EINVAL;
    const pm__slot *s = &c->slots[slot];
    memset(info, 0, sizeof(*info));
    info->state = s->state;
    info->pid = s->pid;
    info->incarnation = s->incarnation;
    info->restarts_in_window = pm__budget_in_window(&s->budget, &c->bcfg, pm__now_ms());
    info->restarts_total = s->budget.total;
    info->last_exit_code = s->last_exit_code;
    info->last_signal = s->last_signal;
    if (s->state == PM_SLOT_READY && s->progress_ms != 0)
        info->heartbeat_age_ms = (uint32_t)(pm__now_ms() - s->progress_ms);
    info->last_fence_reason = s->last_fence_reason != 0 ? pm_reason_name(s->last_fence_reason) : NULL;
    info->fences = s->fences;
    info->kill_pending = s->kill_sent && slot_has_process(s);
    if (s->link.map != NULL)
        info->waiting = atomic_load_explicit(&((const struct pm__ctl *)s->link.map)->waiting,
                                             memory_order_relaxed) != 0;
    return 0;
}

PM_EXTERN int pm_cluster_stats(const pm_cluster *c, struct pm_cluster_stats *out)
{
    if (c == NULL || out == NULL)
        return -EINVAL;
    *out = c->stats;
    for (unsigned i = 0; i < c->nslots; i++) {
        const pm__slot *s = &c->slots[i];
        out->frames_relayed += s->relayed;
        out->bytes_relayed += s->relayed_bytes;
        out->malformed_dropped += s->malformed;
        out->undeliverable += s->undeliverable;
    }
    out->late_replies = c->late_replies;
    return 0;
}
