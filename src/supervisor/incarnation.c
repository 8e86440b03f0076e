/* SPDX-License-Identifier: MIT */
/*
 * incarnation.c - starting one incarnation of a slot: its shared memory, its
 * environment and fds, the fork (and exec), and the fds the loop watches for
 * it. Nothing is left behind when a start fails. The next incarnation's channel
 * (and, in exec mode, its error pipe) is prepared ahead (the spare) so that
 * a restart does not create it between the death and the fork.
 */
#define _GNU_SOURCE
#include "incarnation.h"
#include "core.h"
#include "spare.h"
#include "standby.h"

#include "os/crash.h" /* pm__crash_unwinder_prime */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "worker/node.h"
#include "os/notify.h"
#include "channel/proto.h" /* pm__init_msg, PM__PROTO_VERSION */
#include "os/seccomp_filter.h"
#include "os/spawn.h"
#include "hub/hub.h"
#include "os/loop.h"
#include "os/offread.h"
#include "mesh/mesh.h"
#include "options.h"

struct child_ctx {
    pm_cluster *c;
    unsigned index;   /* its slot's */
    pm__channel *channel; /* its channel (the slot's, or its spare for a standby),
                             until fork_req points it at the copy the child reads */
    uint64_t inc;     /* its incarnation */
    int go_fd;        /* a standby's go eventfd (blocking), -1 otherwise */
    const pm__forkdrop *drop; /* what it drops, planned just before its fork */
};

/* ------------------------------------------------------------------ the fork child */

/* Captured output: the pipes' write ends become fds 1 and 2. */
PM__READY_TEXT static void child_output(const pm__spawn_req *req)
{
    if (pm__child_stdio(req->stdio[0], req->stdio[1]) < 0)
        _exit(125);
    /* The originals, unless one already was fd 1 or 2 (now the other's or
     * its own place); one at fd 0 goes too. */
    for (int i = 0; i < 2; i++)
        if (req->stdio[i] != 1 && req->stdio[i] != 2)
            close(req->stdio[i]);
    /* stdout on a pipe would be block-buffered by stdio: a worker that
     * crashes would lose what it printed. Line by line, as on a terminal
     * (pm__spawn flushed the buffer before the fork). */
    setvbuf(stdout, NULL, _IOLBF, BUFSIZ);
}

/* A warm standby (standby.c): everything before is done, off the crash
 * path; it waits here, before the bootstrap and reaching no one (its ring
 * is no port of the hub until then), for the supervisor to make it the
 * slot's incarnation. An eventfd read returns its 8 bytes or fails; a
 * standby given up is SIGKILLed, and one whose supervisor died gets the
 * parent-death signal: neither comes back from this read. */
PM__READY_TEXT static void standby_wait(int go_fd)
{
    uint64_t go;
    ssize_t n;
    while ((n = read(go_fd, &go, sizeof(go))) < 0 && errno == EINTR)
        ;
    if (n != (ssize_t)sizeof(go))
        _exit(0);
    pm__close(go_fd);
}

/* Fork mode, in the child: drop everything of procmesh that is not this
 * slot's, join, run the bootstrap. */
PM__READY_TEXT static void fork_child(void *arg, const pm__spawn_req *req)
{
    struct child_ctx *x = arg;
    pm_cluster *c = x->c;
    /* What the hub's INIT would carry (cluster.c send_init), from this
     * process's copy of the supervisor's state, read before any of it is
     * closed or wiped. pm__slot_address would say incarnation 0 here: the
     * parent records the pid only after the fork returns. */
    pm__init_msg init;
    init.slot = x->index;
    pm__node_address(pm__hub_names(c->hub), x->index, x->inc, &init.addr);
    init.data = c->o->init_data;
    init.len = (uint32_t)c->o->init_len;
    pm__forkdrop_run(x->drop, c);
    if (req->capture)
        child_output(req);
    pm_node node;
    int rc = pm__node_from_hub_channel(&node, x->channel, &init, c->self);
    /* The node mapped the channel (pm__channel_adopt_fork) and owns the
     * mapping and the worker's fds. */
    if (rc < 0)
        _exit(125);
    /* The hub's write end of this worker's doorbell, inherited: a worker
     * never holds it (channel.h, node_wake: it could block the hub's
     * writes through it). */
    pm__close(x->channel->node_wake);
    /* Joined: now the worker gives up what it will not need (user,
     * no_new_privs, seccomp), before the application's code runs. */
    if (pm__child_privileges(req) < 0)
        _exit(127);
    if (x->go_fd >= 0)
        standby_wait(x->go_fd);
    int code = c->o->bootstrap(&node, c->o->bootstrap_arg);
    fflush(stdout);
    fflush(stderr);
    _exit(code & 0xff);
}

/* The privilege steps of s's worker (pm__child_privileges). The filter is
 * built on the first start, here in the supervisor (libseccomp is not
 * async-signal-safe; it runs in a short-lived child of ours,
 * seccomp_filter.c), and kept for every later one; a build that failed is
 * not kept, the next start builds again. 0 or -errno. */
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

/* Fork mode: the worker's crash handler (node_crash.c) needs the unwinder
 * loaded before any crash, so that the handler itself allocates nothing;
 * glibc's first backtrace() loads libgcc_s (dlopen: about fifteen system
 * calls, the relocations' page faults). Primed once here in the supervisor
 * (os/crash.h), every fork child inherits the loaded library and the
 * primed flag instead of loading it on its way to ready. */
static void warm_unwinder(void)
{
    pm__crash_unwinder_prime();
    /* And the crash handler's module table and alternate stack, made
     * here where the loader's pages are already ours, not in every
     * child (node.h). */
    pm__node_fork_prime();
}

/* What every child of s gets: who its parent is, the signal mask it
 * restores, its cgroup (when cg), its rlimits and its privilege steps. 0 or
 * -errno. cur holds the mask when the cluster did not change it (exec
 * mode; a fork child reads the one it was born with, which is ours:
 * spawn.h). */
static int base_req(pm_cluster *c, pm__slot *s, pm__spawn_req *req, sigset_t *cur, int cg)
{
    sigset_t *mask = c->mask_changed ? &c->old_mask : NULL;
    if (mask == NULL && c->o->exec_path != NULL) {
        pthread_sigmask(SIG_SETMASK, NULL, cur);
        mask = cur;
    }
    memset(req, 0, sizeof(*req));
    req->parent = c->self;
    req->mask = mask;
    /* A copy: a child forked (fork mode, or exec mode where clone3 is
     * refused) has none of the slot table (cluster.c); the vfork child
     * shares our memory and reads the copy as well. */
    if (cg && c->cg.mode == PM_CONTAIN_CGROUP) {
        c->incarnation_state->cg = s->cg;
        req->cg = &c->incarnation_state->cg;
    }
    req->rlimit_set = c->o->rlimit_set;
    req->rlimit_soft = c->o->rlimit_soft;
    req->rlimit_hard = c->o->rlimit_hard;
    if (c->o->exec_path != NULL) {
        /* The signals ignored when the cluster's first worker is started
         * (inherited from whoever started the supervisor, or set by the
         * application before): every exec'd worker gets them back at
         * SIG_DFL, as a fresh program expects. A handler needs no list:
         * the clone clears them all (spawn.c). A signal the application
         * starts to ignore later stays ignored in the workers started
         * after, as exec keeps SIG_IGN (doc/man3/pm_options_set_exec.3). */
        if (!c->incarnation_state->sig_ignored_known) {
            c->incarnation_state->sig_ignored = pm__sig_ignored();
            c->incarnation_state->sig_ignored_known = 1;
        }
        req->sig_ignored = c->incarnation_state->sig_ignored;
        req->sig_ignored_known = 1;
    }
    return privileges(c, s, req);
}

/* Fork mode, with the child's own frames: the ctx is copied onto the
 * child's stack by pm__spawn (PM__SPAWN_CTX_MAX). */
static int fork_req(pm_cluster *c, pm__spawn_req *req, struct child_ctx *ctx)
{
    warm_unwinder();
    int rc = pm__forkdrop_plan(&c->incarnation_state->drop, c, ctx->channel);
    if (rc < 0)
        return rc;
    ctx->drop = &c->incarnation_state->drop;
    /* The plan knows the channel by its place in the slot table, which
     * the child will not have (cluster.c): it reads a copy. */
    c->incarnation_state->channel = *ctx->channel;
    ctx->channel = &c->incarnation_state->channel;
    req->child = fork_child;
    req->ctx = ctx;
    req->ctx_size = sizeof(*ctx);
    req->scrub_to = c->entry_cfa;
    return 0;
}

/* Every fork-mode fork of the process's clusters, one at a time, and
 * never inside another thread's pm__channel_create between its mmap and
 * its MADV_DONTFORK (channel.c): a fork there would copy a channel of
 * another cluster into this worker, which would not know to unmap it.
 * Forks the application makes itself are not held back: one that falls
 * in that window copies that one channel. The child maps its own channel
 * itself (pm__channel_adopt_fork). In the child pm__spawn does not
 * return; the lock is free again there (base/internal.h). */
static pid_t fork_onto(pm__spawn_req *req)
{
    pm__fork_serial_lock();
    pid_t pid = pm__spawn(req);
    pm__fork_serial_unlock();
    return pid;
}

/* A standby is forked like an incarnation, but into the slot's leaf made
 * ahead (s->cg.standby_procs_fd, opened by the caller), not the current
 * one, so that the kill of the incarnation it replaces (cgroup.kill, or
 * the listed pids) cannot reach it; without that leaf it joins none
 * until it is taken (standby.c). Its process group is its own
 * (pm__child_contain). */
pid_t pm__incarnation_fork_standby(pm_cluster *c, pm__slot *s, pm__channel *l, uint64_t inc, int go_fd)
{
    pm__spawn_req req;
    sigset_t cur;
    int rc = base_req(c, s, &req, &cur, s->cg.standby_procs_fd >= 0);
    if (rc < 0)
        return rc;
    if (req.cg != NULL) {
        /* Its own write (spawn.c), into the leaf made ahead; nothing of
         * the current leaf, which its predecessor's kill empties: not its
         * directory (a clone3 into it) nor its events. */
        c->incarnation_state->cg.procs_fd = s->cg.standby_procs_fd;
        c->incarnation_state->cg.dir_fd = -1;
        c->incarnation_state->cg.events_fd = -1;
    }
    struct child_ctx ctx = {c, s->index, l, inc, go_fd, NULL};
    rc = fork_req(c, &req, &ctx);
    return rc < 0 ? rc : fork_onto(&req);
}

/* What a start holds until its worker runs, released on failure. */
typedef struct start_fds {
    int err_pipe[2];     /* exec mode: the error pipe */
    int outw[2];         /* captured output: the write ends the worker gets */
    int outp[2][2];      /* captured output: the pipes the spare had, until opened */
    char **env;          /* exec mode: its environment, and the strings in it */
    char *envtext;
    int fds[PM__MAX_PASS_FDS + 4];
    int notify_fd;       /* notify readiness: the spare's socket, until the worker's */
    char notify[sizeof(((struct sockaddr_un *)0)->sun_path) + 2]; /* its NOTIFY_SOCKET */
} start_fds;

/* The channel of the incarnation now starting, and the standby that becomes
 * it, if any (*standby its pid, else 0). One that could not be taken was
 * ended, and its channel (memory another process had) is replaced by a fresh
 * one before anything else is forked onto it. 0 or -errno. */
static int take_channel(pm_cluster *c, pm__slot *s, start_fds *f, pid_t *standby)
{
    if (pm__standby_dead(s))
        pm__incarnation_spare_drop(c, s); /* ends it, and the memory it had */
    int rc = pm__spare_take(c, s, f->err_pipe, f->outp, &f->notify_fd, f->notify, sizeof(f->notify));
    if (rc < 0)
        return rc;
    *standby = c->o->exec_path == NULL ? pm__standby_take(c, s) : 0;
    if (*standby < 0) {
        *standby = 0;
        pm__channel_close(&s->channel);
        rc = pm__channel_create(&s->channel, s->index, s->incarnation, &c->channel_params);
        if (rc < 0)
            return rc;
    }
    pm__hub_hosts_copy(c->hub, &s->channel); /* peer mode: the hosts it can address */
    return 0;
}

/* Exec mode: the program, its fds (the passed ones, then its channel's when it
 * links libprocmesh), its notify socket, its environment. 0 or -errno. */
static int exec_req(pm_cluster *c, pm__slot *s, pm__spawn_req *req, start_fds *f)
{
    int rc;
    if (f->err_pipe[1] < 0 && (rc = pm__err_pipe_open(f->err_pipe)) < 0)
        return rc;
    size_t n = c->o->npass_fds;
    int mesh = c->o->ready_mode == PM_READY_MESH;
    memcpy(f->fds, c->o->pass_fds, n * sizeof(int));
    if (mesh) {
        /* Only a worker that links libprocmesh gets its memory. */
        f->fds[n] = s->channel.memfd;
        f->fds[n + 1] = s->channel.node_efd;
        f->fds[n + 2] = s->channel.hub_efd;
        f->fds[n + 3] = s->channel.node_sock; /* large messages (bigmsg.h) */
    }
    if (c->o->ready_mode == PM_READY_NOTIFY) {
        /* Made ahead with the spare, else now. */
        rc = f->notify_fd >= 0 ? f->notify_fd
                               : pm__notify_open(c->self, s->index, s->incarnation, f->notify, sizeof(f->notify));
        f->notify_fd = -1;
        if (rc < 0)
            return rc;
        s->notify_fd = rc;
        s->watchdog = 0;
    }
    pm__exec_env_req q = {c->env, c->nenv, mesh ? 3 + (int)n : -1,
                          c->o->ready_mode == PM_READY_NOTIFY ? f->notify : NULL,
                          c->o->listen_env, n, c->o->fd_names};
    f->env = pm__exec_env(&q, &f->envtext, &req->pid_digits);
    if (f->env == NULL)
        return -ENOMEM;
    req->path = c->exec_path;
    req->argv = c->o->exec_argv;
    req->envp = f->env;
    req->fds = f->fds;
    req->nfds = (int)n + (mesh ? 4 : 0);
    req->err_pipe = f->err_pipe[1];
    return 0;
}

/* The most slots a spawn forks its exec children for (spawn.h no_wait). */
#define NO_WAIT_MAX 256u

/* Forks (or clones and execs) the worker. Its pid, or -errno. */
static pid_t spawn_worker(pm_cluster *c, pm__slot *s, start_fds *f)
{
    pm__spawn_req req;
    sigset_t cur;
    int rc = base_req(c, s, &req, &cur, 1);
    if (rc < 0)
        return rc;
    if (f->outw[0] >= 0) {
        req.capture = 1;
        req.stdio[0] = f->outw[0];
        req.stdio[1] = f->outw[1];
    }
    struct child_ctx ctx = {c, s->index, &s->channel, s->incarnation, -1, NULL};
    if (c->o->exec_path != NULL) {
        rc = exec_req(c, s, &req, f);
        if (rc < 0)
            return rc;
        /* No wait (no_wait): the first starts of a spawn of several (a restart
         * inside the spawn keeps the vfork). Not with captured output:
         * the pipes' write ends the supervisor gave earlier slots are
         * closed on the reader's threads after the spawn's loop
         * (output.c), and a forked child would hold copies of them until
         * its execve, delaying an early worker's end of file. Not above
         * NO_WAIT_MAX slots: each fork copies our page tables and walks
         * every mapping (one per slot's channel, not copied but walked),
         * and at N = 1,024 that cost more than the wait it saves (pm-bench
         * spawn --row 2: 1,001-1,110 ms forked against 887-921 vfork'd;
         * at 256, 174-178 against 182-201; doc/benchmarks.md, stop 64). */
        req.no_wait = c->spawning && c->nslots > 1 && c->nslots <= NO_WAIT_MAX && s->incarnation == 1 &&
                    c->o->output != PM_OUTPUT_CAPTURE;
    } else {
        rc = fork_req(c, &req, &ctx);
        return rc < 0 ? rc : fork_onto(&req);
    }
    return pm__spawn(&req);
}

/* The worker runs: what only it may hold is closed here, what the loop
 * watches is recorded. 0, or -errno with the worker killed and reaped (we
 * cannot watch it, so it must not live). */
static int keep_worker(pm_cluster *c, pm__slot *s, start_fds *f, pid_t pid, pid_t standby)
{
    free(f->env);
    f->env = NULL;
    free(f->envtext);
    f->envtext = NULL;
    pm__close(f->err_pipe[1]);
    f->err_pipe[1] = -1;
    pm__close(f->notify_fd); /* taken by exec_req in notify mode: -1 */
    f->notify_fd = -1;
    /* Only the worker (and what it starts) may hold the write ends: ours
     * would keep its pipes from ever reaching EOF. Closed by the output
     * reader's threads: the worker runs already, and if it closed its own
     * ends, ours is the last, whose release waits for the pipe's mutex. */
    pm__output_close_ends(c, s, f->outw);
    /* Its memfd and its doorbell's end: the worker holds its own (channel.h). */
    pm__channel_drop_worker_ends(&s->channel);
    s->pid = pid;
    if (c->o->exec_path == NULL) {
        /* A fork-mode worker skips the handshake (node.c
         * pm__node_from_hub_channel): it is our own code at our own protocol
         * version, and its first frame is READY. A HELLO from it would
         * now be a protocol fault (cluster.c on_control). */
        s->hello = 1;
        s->hello_version = PM__PROTO_VERSION;
    }
    s->exec_pipe = f->err_pipe[0];
    f->err_pipe[0] = -1;
    int rc = standby > 0 ? s->pidfd : pm__pidfd_open(pid);
    if (rc >= 0) {
        s->pidfd = rc;
    } else if (rc == -ENOSYS) {
        /* Kernel < 5.3: exits are found by SIGCHLD or by scanning. */
        s->pidfd = -1;
        if (!c->o->handle_signals)
            c->poll_children = 1;
    } else {
        /* EMFILE and friends. kill() is safe: it is our unreaped child. */
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        s->pid = 0;
        return rc;
    }
    return 0;
}

/* INIT for slot s's current incarnation: written into its ring when the
 * port opens (exec mode, incarnation.c arm), or as the answer to its HELLO
 * if that failed. */
int pm__incarnation_send_init(pm_cluster *c, pm__slot *s)
{
    unsigned char *buf = malloc(pm__init_size(c->o->init_len));
    if (buf == NULL)
        return -ENOMEM;
    pm__init_msg m;
    m.slot = s->index;
    pm__slot_address(c, s, &m.addr);
    m.data = c->o->init_data;
    m.len = (uint32_t)c->o->init_len;
    pm__init_encode(&m, buf);
    int rc = pm__hub_send_control(c->hub, s->index, PM__FT_INIT, buf, pm__init_size(m.len));
    free(buf);
    return rc;
}

/* The loop watches the new incarnation: its exit, its readiness (exec
 * pipe, notify socket), its doorbell and its socket; its deadline. */
static void arm(pm_cluster *c, pm__slot *s)
{
    pm__output_arm(c, s);
    pm__cluster_set_state(c, s, PM_SLOT_STARTING);
    pm__slot_set_deadline(s, pm__now_ms() + (uint64_t)c->o->ready_timeout_ms, PM__EV_READY_TIMEOUT);
    if (s->pidfd >= 0) {
        if (pm__loop_arm(c->loop, s->pidfd, PM__TAG(PM__TAG_PIDFD, s->index, s->incarnation)) == 0)
            s->pid_armed = 1;
    }
    if (c->o->ready_mode == PM_READY_EXEC &&
        pm__loop_arm(c->loop, s->exec_pipe, PM__TAG(PM__TAG_EXECPIPE, s->index, s->incarnation)) == 0)
        s->pipe_armed = 1; /* EOF on the error pipe = exec succeeded = ready */
    if (s->notify_fd >= 0 &&
        pm__loop_arm(c->loop, s->notify_fd, PM__TAG(PM__TAG_NOTIFY, s->index, s->incarnation)) == 0)
        s->notify_armed = 1;
    /* Announce that the hub waits on this ring before the worker can say
     * hello, so its first publish rings the doorbell. */
    int open = pm__hub_port_open(c->hub, s->index, &s->channel, s->incarnation);
    /* Fork mode: our own library, it takes lanes; exec mode: its HELLO
     * says (cluster.c on_control). */
    pm__hub_port_lanes_ok(c->hub, s->index, c->o->exec_path == NULL);
    pm__hub_port_lane_notes(c->hub, s->index, c->o->exec_path == NULL);
    if (open == 0 && pm__loop_arm_multi(c->loop, s->channel.hub_efd,
                                        PM__TAG(PM__TAG_HUB, s->index, s->incarnation)) == 0)
        s->hub_armed = 1;
    /* INIT before HELLO (exec mode): the worker is still in the dynamic
     * loader while we write it, so after its HELLO it finds INIT in its
     * ring instead of sleeping until we have read the HELLO and answered:
     * one wake-up on each side off the restart path. INIT carries nothing
     * the worker would not get anyway (its slot, its address, the
     * options' init data); the HELLO's version is still checked when it
     * comes (cluster.c on_control), and a worker of another version is
     * killed then, whatever it made of the INIT. If this write fails the
     * HELLO is answered as before. */
    s->init_sent = 0;
    if (open == 0 && c->o->exec_path != NULL && pm__incarnation_send_init(c, s) == 0)
        s->init_sent = 1;
    pm__cluster_arm_sock(c, s); /* records are taken from the start */
}

/* Starts the next incarnation of s: take a channel (and a standby), open its
 * output, fork or exec (or take the standby), keep the worker, arm.
 * Returns 0, or -errno with nothing left behind (no process, no fd, no
 * memory). -EADDRINUSE means the notify socket's name was taken under
 * every fresh random name (notify.h): the caller must not count that as
 * the slot's failure. */
int pm__incarnation_start(pm_cluster *c, pm__slot *s)
{
    start_fds f = {{-1, -1}, {-1, -1}, {{-1, -1}, {-1, -1}}, NULL, NULL, {0}, -1, {0}};
    pid_t standby = 0, pid = -1;
    int rc;

    /* Its earlier pipes are held (output.h): its output could not be read,
     * and its pipes would only pile up. A failed start, charged to the
     * budget: the slot retires unless the holders let go. */
    if (c->o->output == PM_OUTPUT_CAPTURE && pm__output_held(c, s))
        return -EBUSY;
    s->incarnation++;
    s->exec_errno = 0;
    s->joined = c->o->exec_path == NULL;
    s->kill_reason = 0;
    rc = take_channel(c, s, &f, &standby);
    if (rc < 0)
        goto fail;
    if (c->o->output == PM_OUTPUT_CAPTURE &&
        (rc = f.outp[0][0] >= 0 ? pm__output_open_made(c, s, f.outw, f.outp)
                                : pm__output_open(c, s, f.outw)) < 0)
        goto fail;
    /* A standby was forked and set up ahead (pm__standby_take). */
    pid = standby > 0 ? standby : spawn_worker(c, s, &f);
    if (pid < 0) {
        rc = (int)pid;
        goto fail;
    }
    rc = keep_worker(c, s, &f, pid, standby);
    if (rc < 0)
        goto fail;
    arm(c, s);
    if (standby > 0)
        pm__standby_go(s); /* its port is open and armed: it may say READY */
    pm__cluster_emit(c, PM_EVENT_STARTED, s, PM_REASON_SPAWN, 0);
    return 0;

fail:
    free(f.env);
    free(f.envtext);
    pm__close(s->notify_fd);
    s->notify_fd = -1;
    pm__close(f.notify_fd);
    pm__close(f.err_pipe[0]);
    pm__close(f.err_pipe[1]);
    pm__output_close_ends(c, s, f.outw); /* a worker may have run (keep_worker) */
    for (int i = 0; i < 2; i++) {
        /* Never a worker's: closed here. */
        pm__close(f.outp[i][0]);
        pm__close(f.outp[i][1]);
    }
    pm__output_close(c, s);
    pm__close(s->exec_pipe);
    s->exec_pipe = -1;
    pm__channel_close(&s->channel);
    s->pid = 0;
    return rc;
}
