/* SPDX-License-Identifier: MIT */
/*
 * incarnation.c - starting one incarnation of a slot: its shared memory, its
 * environment and fds, the fork (and exec), and the fds the loop watches for
 * it. Nothing is left behind when a start fails. The next incarnation's link
 * is prepared ahead (the spare) so that a restart does not create it
 * between the death and the fork.
 */
#define _GNU_SOURCE
#include "incarnation.h"
#include "core.h"
#include "standby.h"

#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "worker/node.h"
#include "os/notify.h"
#include "channel/proto.h" /* pm__init_msg, PM__PROTO_VERSION */
#include "os/seccomp_filter.h"
#include "os/spawn.h"

struct child_ctx {
    pm_cluster *c;
    pm__slot *own;
    pm__link *link;   /* its link: own->link, or own->spare for a standby */
    uint64_t inc;     /* its incarnation */
    int go_fd;        /* a standby's go eventfd (blocking), -1 otherwise */
};

/* Fork mode, in the child: drop everything of procmesh that is not this
 * slot's, join, run the bootstrap. */
static void fork_child(void *arg, const pm__spawn_req *req)
{
    (void)req;
    struct child_ctx *x = arg;
    pm_cluster *c = x->c;
    /* What the hub's INIT would carry (cluster.c send_init), from this
     * process's copy of the supervisor's state, read before any of it is
     * closed or wiped. pm__slot_address would say incarnation 0 here: the
     * parent records the pid only after the fork returns. */
    pm__init_msg init;
    init.slot = x->own->index;
    pm__node_address(&c->hub.names, x->own->index, x->inc, &init.addr);
    init.data = c->o->init_data;
    init.len = (uint32_t)c->o->init_len;
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *t = &c->slots[i];
        pm__close(t->pidfd);
        pm__close(t->exec_pipe);
        /* Every slot's read ends, this one's too: a worker reading its own
         * output would steal lines from the supervisor. */
        pm__close(t->out.s[0].fd);
        pm__close(t->out.s[1].fd);
        /* The _copy forms close without writing to the slot table, which
         * this process shares copy-on-write with the supervisor: writing a
         * sentinel into every slot faulted in a private copy of the whole
         * table, O(N) page faults (and TLB flushes) per new worker. */
        if (&t->link != x->link)
            pm__link_release_copy(&t->link);
        /* Every prepared link too, its own slot's included: a spare is
         * the memory of an incarnation that does not exist yet (unless
         * this process is the standby that will be it). */
        if (t->spare != NULL && t->spare != x->link)
            pm__link_release_copy(t->spare);
        /* The standbys' handles: no worker may start or kill another. */
        if (t->standby.pid > 0) {
            pm__close(t->standby.pidfd);
            pm__close(t->standby.go_fd);
        }
        /* It has joined its cgroup: no worker keeps a handle on any slot's
         * (another's cgroup.kill would let it end its siblings). */
        pm__cg_slot_release_copy(&t->cg);
    }
    pm__loop_forget(&c->loop);
    pm__mesh_forget(c->mesh); /* the link sockets: the supervisor's alone */
    pm__close(c->sigfd);
    pm__close(c->timerfd);
    pm__close(c->wakefd);
    /* Other workers' traffic the hub holds (queued frames, broadcast
     * replies) must not be readable by this worker's code. */
    pm__hub_wipe(&c->hub);
    if (req->capture) {
        if (pm__child_stdio(req->stdio[0], req->stdio[1]) < 0)
            _exit(125);
        /* The originals, unless one already was fd 1 or 2 (now the
         * other's or its own place); one at fd 0 goes too. */
        for (int i = 0; i < 2; i++)
            if (req->stdio[i] != 1 && req->stdio[i] != 2)
                close(req->stdio[i]);
        /* stdout on a pipe would be block-buffered by stdio: a worker that
         * crashes would lose what it printed. Line by line, as on a
         * terminal (pm__spawn flushed the buffer before the fork). */
        setvbuf(stdout, NULL, _IOLBF, BUFSIZ);
    }
    pm_node node;
    int rc = pm__node_from_hub_link(&node, x->link, &init);
    /* The hub's end of the fd socket: the worker keeps only its own. */
    pm__close(x->link->sock);
    /* The node took over the inherited mapping (pm__link_adopt): it is
     * not unmapped here. */
    if (rc < 0)
        _exit(125);
    /* Joined: now the worker gives up what it will not need (user,
     * no_new_privs, seccomp), before the application's code runs. */
    if (pm__child_privileges(req) < 0)
        _exit(127);
    if (x->go_fd >= 0) {
        /* A warm standby (standby.c): everything above is done, off the
         * crash path; it waits here, before the bootstrap and reaching no
         * one (its ring is no port of the hub until then), for the
         * supervisor to make it the slot's incarnation. An eventfd read
         * returns its 8 bytes or fails; a standby given up is SIGKILLed,
         * and one whose supervisor died gets the parent-death signal:
         * neither comes back from this read. */
        uint64_t go;
        ssize_t n;
        while ((n = read(x->go_fd, &go, sizeof(go))) < 0 && errno == EINTR)
            ;
        if (n != (ssize_t)sizeof(go))
            _exit(0);
        pm__close(x->go_fd);
    }
    int code = c->o->bootstrap(&node, c->o->bootstrap_arg);
    fflush(stdout);
    fflush(stderr);
    _exit(code & 0xff);
}

/* The privilege steps of s's worker (pm__child_privileges). The filter is
 * built on the first start, here in the supervisor (libseccomp is not
 * async-signal-safe), and kept for every later one. 0 or -errno. */
static int privileges(pm_cluster *c, const pm__slot *s, pm__spawn_req *req)
{
    pm_options *o = c->o;
    if (o->uid_count > 0) {
        req->set_ids = 1;
        req->uid = o->uid_first + s->index;
        req->gid = o->set_user ? o->gid : (gid_t)req->uid;
    } else if (o->set_user) {
        req->set_ids = 1;
        req->uid = o->uid;
        req->gid = o->gid;
    }
    req->no_new_privs = o->no_new_privs;
    if (o->protect_supervisor) {
        /* Before the first worker exists, so none of them ever sees a
         * dumpable supervisor; idempotent, one system call per start. */
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
            return -errno;
        /* A fork child inherits it: give the worker its own core dumps
         * back, unless a credential change made it non-dumpable anyway
         * (its memory is a copy of ours; other workers under the same uid
         * must not read it). exec resets it by itself. */
        req->dumpable = o->exec_path == NULL && !req->set_ids;
    }
    /* A core directory asks for the workers' cores: a fork-mode worker
     * made non-dumpable by the supervisor's flag or by its credential
     * change (setresuid clears it) becomes dumpable again, which also lets
     * other workers under the same uid ptrace it (the price, documented:
     * --uid-range avoids it). exec resets it to dumpable by itself when
     * the real and effective ids agree, as they do here. */
    if (o->core_dir != NULL && o->exec_path == NULL)
        req->dumpable = 1;
    if (o->seccomp != PM_SECCOMP_OFF) {
        if (o->seccomp_prog == NULL) {
            pm__seccomp_prog *p = calloc(1, sizeof(*p));
            if (p == NULL)
                return -ENOMEM;
            int rc = pm__seccomp_build(o->seccomp, o->seccomp_action, c->self, p);
            if (rc < 0) {
                free(p);
                return rc;
            }
            o->seccomp_prog = p;
        }
        req->seccomp = o->seccomp_prog;
    }
    return 0;
}

/* ------------------------------------------------------------------ the spare link */

/* Creating a link (memfd_create, ftruncate, the seals, mmap, the ring
 * headers' first-touch faults, two eventfds, a socketpair and its two
 * buffer sizes) between the reap and the fork would put it on the
 * crash-to-ready path. It is made ahead instead: once an incarnation is
 * ready, the supervisor prepares the link of the one after it. Fencing
 * holds:
 * a spare is a fresh memfd (and fresh doorbells and socket) made after the
 * fork of the incarnation before it, so no process that ever ran holds a
 * byte of it; every fork child closes every slot's spare (fork_child), and
 * exec children never see it (close-on-exec, and the exec replaces the
 * mappings). The spare goes when the slot stops or retires
 * (pm__cluster_set_state) or the cluster is freed. */

void pm__incarnation_spare_drop(pm_cluster *c, pm__slot *s)
{
    /* A standby lives on the spare: it goes first, and with it. */
    pm__standby_end(c, s);
    if (s->spare == NULL)
        return;
    int saved = errno;
    pm__link_close(s->spare);
    free(s->spare);
    s->spare = NULL;
    errno = saved;
}

/* A spare may serve only the incarnation it was made for, with the
 * geometry and settings the cluster uses now. It is our own memory, mapped
 * by no worker (a warm standby maps it, but its fields read here are set
 * before that standby's fork and checked only by the supervisor, and a
 * standby that died is dropped with its spare before this runs): reading
 * its control block is safe. */
static int spare_fits(const pm_cluster *c, const pm__slot *s, const pm__link *l)
{
    const struct pm__ctl *ctl = l->map;
    return ctl->incarnation == s->incarnation && ctl->slot == s->index &&
           ctl->ring_cap == c->o->ring_size && ctl->supervisor_pid == (int32_t)c->self &&
           ctl->heartbeat_ms == (uint32_t)c->o->heartbeat_timeout_ms &&
           ctl->max_message == c->o->max_message;
}

/* The link for the incarnation now starting: the spare when it fits, a new
 * one otherwise. 0 or -errno. */
static int link_take(pm_cluster *c, pm__slot *s)
{
    if (s->spare != NULL && spare_fits(c, s, s->spare)) {
        /* By value: nothing points into the pm__link itself (its rings
         * point into the mapping). */
        s->link = *s->spare;
        free(s->spare);
        s->spare = NULL;
        return 0;
    }
    pm__incarnation_spare_drop(c, s);
    return pm__link_create(&s->link, s->index, s->incarnation, c->o->ring_size, c->self,
                           (uint32_t)c->o->heartbeat_timeout_ms, c->o->max_message);
}

/* A spare holds five fds: it is kept only while they sit below half the
 * fd limit (fds are allocated lowest first, so the highest of them tells
 * how many are in use), so that spares never take the fds that the slots'
 * own links, pidfds and pipes need: a large cluster under a small limit
 * simply restarts without them. */
int pm__fds_affordable(const int *fds, size_t n)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return 0;
    if (rl.rlim_cur == RLIM_INFINITY)
        return 1;
    for (size_t i = 0; i < n; i++)
        if ((rlim_t)fds[i] >= rl.rlim_cur / 2)
            return 0;
    return 1;
}

static int spare_affordable(const pm__link *l)
{
    int fds[] = {l->memfd, l->hub_efd, l->node_efd, l->sock, l->node_sock};
    return pm__fds_affordable(fds, sizeof(fds) / sizeof(fds[0]));
}

/* Best effort: without a spare the next start creates its link itself.
 * errno preserved (called on the success path).
 *
 * Called once the incarnation is ready (cluster.c act_ready), not right
 * after its fork: on two CPUs the child often waits for the CPU its parent
 * is on (the wake-up of a new task prefers the parent's CPU when the other
 * is busy), so the link's system calls and first-touch faults made then
 * would delay the worker's start, on the very path the spare keeps clear.
 * A worker that dies before ready restarts without one (its link is made
 * at the start). */
void pm__incarnation_spare_prepare(pm_cluster *c, pm__slot *s)
{
    if (s->spare != NULL)
        return;
    int saved = errno;
    pm__link *l = malloc(sizeof(*l));
    if (l != NULL &&
        pm__link_create(l, s->index, s->incarnation + 1, c->o->ring_size, c->self,
                        (uint32_t)c->o->heartbeat_timeout_ms, c->o->max_message) == 0) {
        if (spare_affordable(l)) {
            s->spare = l;
            l = NULL;
        } else {
            pm__link_close(l);
        }
    }
    free(l);
    errno = saved;
}

/* Fork mode: the worker's crash handler (node.c crash_arm) calls
 * backtrace() once at join so that the handler itself allocates nothing;
 * glibc's first backtrace() loads libgcc_s (dlopen: about fifteen system
 * calls, the relocations' page faults). Done once here in the supervisor,
 * every fork child inherits the loaded library instead of loading it on
 * its way to ready. */
static void warm_unwinder(void)
{
    static int warm;
    if (__atomic_exchange_n(&warm, 1, __ATOMIC_RELAXED))
        return;
    void *frames[4];
    (void)backtrace(frames, 4);
}

/* What every child of s gets: who its parent is, the signal mask it
 * restores, its cgroup (when cg), its rlimits and its privilege steps. 0 or
 * -errno. cur holds the mask when the cluster did not change it. */
static int base_req(pm_cluster *c, pm__slot *s, pm__spawn_req *req, sigset_t *cur, int cg)
{
    sigset_t *mask = c->mask_changed ? &c->old_mask : NULL;
    if (mask == NULL) {
        pthread_sigmask(SIG_SETMASK, NULL, cur);
        mask = cur;
    }
    memset(req, 0, sizeof(*req));
    req->parent = c->self;
    req->mask = mask;
    if (cg && c->cg.mode == PM_CONTAIN_CGROUP)
        req->cg = &s->cg;
    req->rlimit_set = c->o->rlimit_set;
    req->rlimit_soft = c->o->rlimit_soft;
    req->rlimit_hard = c->o->rlimit_hard;
    return privileges(c, s, req);
}

/* Fork mode, with the child's own frames: the ctx is copied onto the
 * child's stack by pm__spawn (PM__SPAWN_CTX_MAX). */
static void fork_req(pm_cluster *c, pm__spawn_req *req, struct child_ctx *ctx)
{
    warm_unwinder();
    req->child = fork_child;
    req->ctx = ctx;
    req->ctx_size = sizeof(*ctx);
    req->scrub_to = c->entry_cfa;
}

/* A standby is forked like an incarnation, minus the cgroup: it joins the
 * slot's only when it is taken (standby.c), so that the kill of the
 * incarnation it replaces (cgroup.kill, or the listed pids) cannot reach
 * it. Its process group is its own (pm__child_contain). */
pid_t pm__incarnation_fork_standby(pm_cluster *c, pm__slot *s, pm__link *l, uint64_t inc, int go_fd)
{
    pm__spawn_req req;
    sigset_t cur;
    int rc = base_req(c, s, &req, &cur, 0);
    if (rc < 0)
        return rc;
    struct child_ctx ctx = {c, s, l, inc, go_fd};
    fork_req(c, &req, &ctx);
    return pm__spawn(&req);
}

/* Starts the next incarnation of s. Returns 0, or -errno with nothing left
 * behind (no process, no fd, no memory). -EADDRINUSE means the notify
 * socket's name was taken under every fresh random name (notify.h): the
 * caller must not count that as the slot's failure. */
int pm__incarnation_start(pm_cluster *c, pm__slot *s)
{
    int pipefd[2] = {-1, -1};
    int outw[2] = {-1, -1}; /* the write ends of the output pipes (captured) */
    char **env = NULL;
    char *envtext = NULL;
    int rc;
    pid_t pid = -1;

    s->incarnation++;
    s->exec_errno = 0;
    s->linked = c->o->exec_path == NULL;
    s->kill_reason = 0;
    pm__standby_check(c, s);
    rc = link_take(c, s);
    if (rc < 0)
        goto fail;
    /* The standby waiting on the link just taken, if any: it becomes this
     * incarnation, started below once its port is open. One that could
     * not be taken was ended, and its link (memory another process had)
     * is replaced by a fresh one before anything else is forked onto it. */
    pid_t standby = c->o->exec_path == NULL ? pm__standby_take(c, s) : 0;
    if (standby < 0) {
        pm__link_close(&s->link);
        rc = pm__link_create(&s->link, s->index, s->incarnation, c->o->ring_size, c->self,
                             (uint32_t)c->o->heartbeat_timeout_ms, c->o->max_message);
        if (rc < 0)
            goto fail;
        standby = 0;
    }
    pm__hub_hosts_copy(&c->hub, &s->link); /* peer mode: the hosts it can address */

    pm__spawn_req req;
    sigset_t cur;
    rc = standby > 0 ? 0 : base_req(c, s, &req, &cur, 1);
    if (rc < 0)
        goto fail;
    if (c->o->output == PM_OUTPUT_CAPTURE) {
        rc = pm__output_open(c, s, outw);
        if (rc < 0)
            goto fail;
        req.capture = 1;
        req.stdio[0] = outw[0];
        req.stdio[1] = outw[1];
    }
    struct child_ctx ctx = {c, s, &s->link, s->incarnation, -1};
    int fds[PM__MAX_PASS_FDS + 4];
    if (standby > 0) {
        /* Already forked and set up (pm__standby_take). */
    } else if (c->o->exec_path != NULL) {
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
            fds[n + 3] = s->link.node_sock; /* large messages (bigmsg.h) */
        }
        char notify[sizeof(((struct sockaddr_un *)0)->sun_path) + 2];
        if (c->o->ready_mode == PM_READY_NOTIFY) {
            rc = pm__notify_open(c->self, s->index, s->incarnation, notify, sizeof(notify));
            if (rc < 0)
                goto fail;
            s->notify_fd = rc;
            s->watchdog = 0;
        }
        pm__exec_env_req q = {c->env, c->nenv, mesh ? 3 + (int)n : -1,
                              c->o->ready_mode == PM_READY_NOTIFY ? notify : NULL,
                              c->o->listen_env, n, c->o->fd_names};
        env = pm__exec_env(&q, &envtext, &req.pid_digits);
        if (env == NULL) {
            rc = -ENOMEM;
            goto fail;
        }
        req.path = c->exec_path;
        req.argv = c->o->exec_argv;
        req.envp = env;
        req.fds = fds;
        req.nfds = (int)n + (mesh ? 4 : 0);
        req.err_pipe = pipefd[1];
    } else {
        fork_req(c, &req, &ctx);
    }
    pid = standby > 0 ? standby : pm__spawn(&req);
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
    /* Only the worker (and what it starts) may hold the write ends: ours
     * would keep its pipes from ever reaching EOF. */
    pm__close(outw[0]);
    pm__close(outw[1]);
    outw[0] = outw[1] = -1;
    s->pid = pid;
    if (c->o->exec_path == NULL) {
        /* A fork-mode worker skips the handshake (node.c
         * pm__node_from_hub_link): it is our own code at our own protocol
         * version, and its first frame is READY. A HELLO from it would
         * now be a protocol fault (cluster.c on_control). */
        s->hello = 1;
        s->hello_version = PM__PROTO_VERSION;
    }
    s->exec_pipe = pipefd[0];
    pipefd[0] = -1;
    if (s->exec_pipe >= 0)
        (void)fcntl(s->exec_pipe, F_SETFL, O_NONBLOCK);
    rc = standby > 0 ? s->pidfd : pm__pidfd_open(pid);
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
    pm__output_arm(c, s);
    pm__cluster_set_state(c, s, PM_SLOT_STARTING);
    pm__slot_set_deadline(s, pm__now_ms() + (uint64_t)c->o->ready_timeout_ms, PM__EV_READY_TIMEOUT);
    if (s->pidfd >= 0) {
        if (pm__loop_arm(&c->loop, s->pidfd, PM__TAG(PM__TAG_PIDFD, s->index, s->incarnation)) == 0)
            s->pid_armed = 1;
    }
    /* Announce that the hub waits on this ring before the worker can say
     * hello, so its first publish rings the doorbell. */
    if (c->o->ready_mode == PM_READY_EXEC &&
        pm__loop_arm(&c->loop, s->exec_pipe, PM__TAG(PM__TAG_EXECPIPE, s->index, s->incarnation)) == 0)
        s->pipe_armed = 1; /* EOF on the error pipe = exec succeeded = ready */
    if (s->notify_fd >= 0 &&
        pm__loop_arm(&c->loop, s->notify_fd, PM__TAG(PM__TAG_NOTIFY, s->index, s->incarnation)) == 0)
        s->notify_armed = 1;
    if (pm__hub_port_open(&c->hub, s->index, &s->link, s->incarnation) == 0 &&
        pm__loop_arm_multi(&c->loop, s->link.hub_efd,
                           PM__TAG(PM__TAG_HUB, s->index, s->incarnation)) == 0)
        s->hub_armed = 1;
    pm__cluster_arm_sock(c, s); /* records are taken from the start */
    if (standby > 0)
        pm__standby_go(s); /* its port is open and armed: it may say READY */
    pm__cluster_emit(c, PM_EVENT_STARTED, s, PM_REASON_SPAWN, 0);
    return 0;

fail:
    free(env);
    free(envtext);
    pm__close(s->notify_fd);
    s->notify_fd = -1;
    pm__close(pipefd[0]);
    pm__close(pipefd[1]);
    pm__close(outw[0]);
    pm__close(outw[1]);
    pm__output_close(c, s);
    pm__close(s->exec_pipe);
    s->exec_pipe = -1;
    pm__link_close(&s->link);
    s->pid = 0;
    return rc;
}
