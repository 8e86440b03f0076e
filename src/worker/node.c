/* SPDX-License-Identifier: MIT */
/*
 * node.c - the worker side: join (exec mode), the handshake, ready.
 */
#define _GNU_SOURCE
#include "node.h"
#include "base/defaults.h" /* PM__NODE_ENV */

#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "channel/bigmsg.h"
#include "os/crash.h"
#include "channel/proto.h"

/* How long to wait for INIT between checks that the supervisor still
 * exists. PR_SET_PDEATHSIG normally kills us first; this is the backstop. */
#define PM__NODE_POLL_MS 100

static int parse_fd(const char **s, int *fd)
{
    char *end;
    errno = 0;
    long v = strtol(*s, &end, 10);
    if (end == *s || errno != 0 || v < 0 || v > 1 << 24)
        return -EINVAL;
    *fd = (int)v;
    *s = end;
    return 0;
}

int pm__node_handshake(pm_node *n)
{
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = PM__FT_HELLO;
    h.dst = PM__NODE_MAIN;
    unsigned char ver[4] = {PM__PROTO_VERSION, 0, 0, 0};
    int rc = pm__frame_send(&n->link.tx, &h, ver, sizeof(ver));
    if (rc < 0)
        return rc == -EBADMSG ? -EPROTO : rc;
    for (;;) {
        rc = pm__ring_wait(&n->link.rx, PM__NODE_POLL_MS);
        if (rc < 0)
            return -EPROTO;
        if (rc == 0) {
            if (getppid() != n->supervisor)
                return -ESHUTDOWN;
            continue;
        }
        const void *payload;
        rc = pm__frame_recv(&n->link.rx, PM__LINK_MAX_FRAME, &h, &payload);
        if (rc < 0)
            return -EPROTO;
        if (rc == 0)
            continue;
        if (h.type != PM__FT_INIT) {
            pm__ring_consume(&n->link.rx);
            continue;
        }
        pm__init_msg m;
        /* The supervisor is trusted, but a private copy costs nothing here. */
        void *copy = malloc(h.len > 0 ? h.len : 1);
        if (copy == NULL)
            return -ENOMEM;
        memcpy(copy, payload, h.len);
        pm__ring_consume(&n->link.rx);
        pm__ring_release(&n->link.rx);
        if (pm__init_decode(copy, h.len, &m) < 0) {
            free(copy);
            return -EPROTO;
        }
        n->slot = m.slot;
        n->self = m.addr;
        if (m.len > 0) {
            n->init_data = malloc(m.len);
            if (n->init_data == NULL) {
                free(copy);
                return -ENOMEM;
            }
            memcpy(n->init_data, m.data, m.len);
        }
        n->init_len = m.len;
        free(copy);
        return 0;
    }
}

/* ------------------------------------------------------------------ crash handler */

/* The signals whose handler records a crash (crash.c keeps the same list). */
static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS};
/* The alternate stack: a stack overflow leaves no room on the thread's own
 * stack for a handler, and the unwinder wants a few KiB. */
#define PM__CRASH_STACK (256u * 1024u)

/* What the handler may touch, all prepared at join: the record to write
 * (in this worker's control block), the pid that armed it (a child of the
 * worker inherits the handler but must not write its parent's record), the
 * module table, and a flag so that only one thread writes. */
static _Atomic(struct pm__crash_rec *) crash_target;
static _Atomic pid_t crash_pid;
static atomic_flag crash_taken = ATOMIC_FLAG_INIT;
static pm__crash_modules crash_modules;
static void *crash_stack;

static uint64_t context_pc(const void *ucv)
{
    const ucontext_t *uc = ucv;
#if defined(__x86_64__)
    return (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    return (uint64_t)uc->uc_mcontext.pc;
#else
    (void)uc;
    return 0; /* not read on this architecture: frames still say where */
#endif
}

/* Runs on the alternate stack with SA_RESETHAND (the disposition is the
 * default again from entry on). Only async-signal-safe work: loads, plain
 * stores into our own mapping, pm__crash_backtrace (crash.h), getpid, raise. */
static void on_fatal(int sig, siginfo_t *si, void *ucv)
{
    int saved = errno;
    struct pm__crash_rec *r = atomic_load_explicit(&crash_target, memory_order_acquire);
    if (r != NULL && getpid() == atomic_load_explicit(&crash_pid, memory_order_relaxed) &&
        !atomic_flag_test_and_set(&crash_taken)) {
        void *raw[PM_CRASH_FRAMES + 8];
        uint64_t frames[PM_CRASH_FRAMES + 8];
        int n = pm__crash_backtrace(raw, (int)PM__ARRAY_SIZE(raw));
        for (int i = 0; i < n; i++)
            frames[i] = (uint64_t)(uintptr_t)raw[i];
        /* Before the unwinder is primed (an exec'd worker, before ready):
         * the faulting pc is the one frame. */
        uint64_t pc = context_pc(ucv);
        if (n <= 0 && pc != 0) {
            frames[0] = pc;
            n = 1;
        }
        /* si_addr means an address only for a fault the kernel raised;
         * for kill/raise/abort the union holds the sender's pid and uid. */
        int fault = si->si_code > 0 && sig != SIGABRT && sig != SIGSYS;
        uint64_t addr = fault ? (uint64_t)(uintptr_t)si->si_addr : 0;
        pm__crash_fill(r, &crash_modules, sig, si->si_code, addr, pc, frames, n > 0 ? (unsigned)n : 0);
    }
    /* The same signal again, now with the default action: it is blocked
     * until we return (no SA_NODEFER), so it is delivered on the way out,
     * before a faulting instruction re-executes, and the process ends just
     * as it would have without us: same signal, same core dump. Returning
     * alone would not do for a signal that does not recur (kill, SIGTRAP of
     * int3, SIGSYS of a seccomp filter that let the call fail). */
    raise(sig);
    errno = saved;
}

/* Records this worker's crashes into its control block from now on: the
 * module table, an alternate stack for this thread (unless it has one), and
 * the handler for every crash signal whose disposition is still the default
 * (a handler the application installed is its own business and stays). */
static void crash_arm(pm_node *n)
{
    pm__crash_modules_load(&crash_modules);
    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && (cur.ss_flags & SS_DISABLE) != 0) {
        if (crash_stack == NULL) {
            void *p = mmap(NULL, PM__CRASH_STACK, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
            crash_stack = p == MAP_FAILED ? NULL : p;
        }
        if (crash_stack != NULL) {
            stack_t ss = {.ss_sp = crash_stack, .ss_size = PM__CRASH_STACK, .ss_flags = 0};
            (void)sigaltstack(&ss, NULL);
        }
    }
    struct pm__ctl *ctl = n->link.map;
    atomic_store_explicit(&crash_pid, getpid(), memory_order_relaxed);
    atomic_store_explicit(&crash_target, &ctl->crash, memory_order_release);
    for (size_t i = 0; i < PM__ARRAY_SIZE(crash_signals); i++) {
        struct sigaction old, sa;
        if (sigaction(crash_signals[i], NULL, &old) < 0 || (old.sa_flags & SA_SIGINFO) != 0 ||
            old.sa_handler != SIG_DFL)
            continue;
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = on_fatal;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        (void)sigaction(crash_signals[i], &sa, NULL);
    }
}

/* Before the node's memory goes: the handler must not write into it. */
static void crash_disarm(const pm_node *n)
{
    struct pm__crash_rec *mine = &((struct pm__ctl *)n->link.map)->crash;
    atomic_compare_exchange_strong(&crash_target, &mine, NULL);
}

int pm__node_from_hub_link(pm_node *n, const pm__link *hub, const struct pm__init_msg *init)
{
    memset(n, 0, sizeof(*n));
    n->magic = PM__MAGIC_NODE;
    n->gen = pm__fork_gen();
    n->supervisor = getppid();
    /* The mapping the child inherited, with the roles of the worker
     * (pm__link_adopt: no second mapping on the way to ready). */
    int rc = pm__link_adopt(&n->link, hub);
    if (rc < 0)
        return rc;
    /* Free here: the supervisor loaded the unwinder before the fork. */
    pm__crash_unwinder_prime();
    crash_arm(n);
    /* No HELLO and no INIT: what INIT would carry was written into this
     * process's memory by the fork, and the version is ours by
     * construction. The round trip cost the worker a sleep on its ring
     * and the supervisor a wake-up, about half the way from fork to
     * ready; the hub takes READY as the first frame of a fork-mode
     * worker (incarnation.c). init->data is the child's own copy of the
     * options' bytes: a fork-mode node is never freed, nor is it. */
    n->slot = init->slot;
    n->self = init->addr;
    n->init_data = (void *)(uintptr_t)init->data;
    n->init_len = init->len;
    return 0;
}

PM_EXTERN int pm_node_join(pm_node **out)
{
    if (out == NULL)
        return -EINVAL;
    const char *env = getenv(PM__NODE_ENV);
    if (env == NULL)
        return -ENOENT;
    int memfd, node_efd, hub_efd, sock = -1;
    const char *s = env;
    if (parse_fd(&s, &memfd) < 0 || *s++ != ',' || parse_fd(&s, &node_efd) < 0 || *s++ != ',' ||
        parse_fd(&s, &hub_efd) < 0)
        return -EINVAL;
    /* The fourth, the fd socket for large messages, is absent when a
     * caller other than procmesh's spawn set the variable. */
    if (*s == ',' && (s++, parse_fd(&s, &sock) < 0))
        return -EINVAL;
    if (*s != '\0')
        return -EINVAL;
    pm_node *n = calloc(1, sizeof(*n));
    if (n == NULL)
        return -ENOMEM;
    n->magic = PM__MAGIC_NODE;
    n->gen = pm__fork_gen();
    n->heap = 1;
    n->supervisor = getppid();
    int rc = pm__link_attach(&n->link, memfd, node_efd, hub_efd, sock);
    if (rc == 0) {
        crash_arm(n);
        rc = pm__node_handshake(n);
    }
    if (rc < 0) {
        if (n->link.map != NULL)
            crash_disarm(n);
        pm__link_close(&n->link);
        free(n->init_data);
        free(n);
        return rc;
    }
    /* Our children must not think they are workers too. */
    unsetenv(PM__NODE_ENV);
    *out = n;
    return 0;
}

/* 0 when n is a live node of this process, else -EINVAL (NULL, not a node,
 * closed) or -EPERM (used in a child of the worker: the link is the
 * worker's, and a second user would corrupt its rings). */
static int node_check(const pm_node *n)
{
    if (n == NULL || n->magic != PM__MAGIC_NODE)
        return -EINVAL;
    if (n->gen != atomic_load_explicit(&pm__fork_generation, memory_order_relaxed))
        return -EPERM;
    return 0;
}

PM_EXTERN const pm_address *pm_node_self(const pm_node *n)
{
    return node_check(n) == 0 ? &n->self : NULL;
}

PM_EXTERN unsigned pm_node_slot(const pm_node *n)
{
    return node_check(n) == 0 ? n->slot : 0;
}

PM_EXTERN int pm_node_init_data(const pm_node *n, const void **data, size_t *len)
{
    int rc = node_check(n);
    if (rc < 0)
        return rc;
    if (data == NULL || len == NULL)
        return -EINVAL;
    *data = n->init_data;
    *len = n->init_len;
    return 0;
}

PM_EXTERN int pm_node_ready(pm_node *n)
{
    int rc = node_check(n);
    if (rc < 0)
        return rc;
    if (n->ready_sent)
        return 0;
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = PM__FT_READY;
    h.dst = PM__NODE_MAIN;
    while ((rc = pm__frame_send(&n->link.tx, &h, NULL, 0)) == -EAGAIN)
        if ((rc = pm__ring_wait_space(&n->link.tx, PM__FRAME_HDR_SIZE, 1000)) < 0)
            return rc;
    if (rc < 0)
        return rc == -EBADMSG ? -EPROTO : rc;
    n->ready_sent = 1;
    /* The crash handler's unwinder, off the way to ready (crash.h): a
     * crash before this records the faulting pc as its one frame. */
    pm__crash_unwinder_prime();
    return 0;
}

static void stash_free(pm_node *n);

PM_EXTERN void pm_node_close(pm_node *n)
{
    /* NULL, not a node, a child's copy, or a fork-mode node (procmesh's,
     * on the worker's stack): nothing to release here. */
    if (node_check(n) < 0 || !n->heap)
        return;
    n->magic = 0;
    stash_free(n);
    crash_disarm(n);
    pm__link_close(&n->link);
    free(n->init_data);
    free(n);
}

/* ------------------------------------------------------------------ messaging */

#define PM__STASH_MAX ((size_t)4 << 20)
/* Large messages pm_node_request may set aside (their fds stay open). */
#define PM__STASH_MAX_FDS 64u
/* Longest single wait between checks that the supervisor is still there. */
#define PM__WAIT_CHUNK_MS 100

static void stash_free(pm_node *n)
{
    free(n->cur_stash);
    n->cur_stash = NULL;
    if (n->cur_map != NULL)
        munmap((void *)n->cur_map, n->cur_map_len);
    n->cur_map = NULL;
    while (n->stash_head != NULL) {
        pm__stash *e = n->stash_head;
        n->stash_head = e->next;
        pm__close(e->fd);
        free(e);
    }
    n->stash_tail = NULL;
    n->stash_bytes = 0;
    n->stash_fds = 0;
}

/* The supervisor asked us to stop or fenced us (flags in the control
 * block): two loads, no system call. */
static int told_to_stop(const pm_node *n)
{
    const struct pm__ctl *ctl = pm__link_ctl(&n->link);
    return n->stopping || atomic_load_explicit(&ctl->stop, memory_order_acquire) != 0 ||
           atomic_load_explicit(&ctl->fenced, memory_order_acquire) != 0;
}

/* told_to_stop, or the supervisor is gone (PDEATHSIG normally kills us
 * first; this is for when it could not). */
static int shut_down(pm_node *n)
{
    return told_to_stop(n) || getppid() != n->supervisor;
}

/* Progress for the supervisor's liveness check: a plain store to our own
 * cache line of the control block, no system call. */
static inline void beat(pm_node *n)
{
    struct pm__ctl *ctl = n->link.map;
    atomic_store_explicit(&ctl->beats, atomic_load_explicit(&ctl->beats, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* Longest single wait: short enough to notice a dead supervisor within a
 * second and to beat at least four times per heartbeat timeout while we
 * wait (waiting for work counts as alive; a stopped process does not beat). */
static int wait_chunk(const pm_node *n)
{
    uint32_t hb = pm__link_ctl(&n->link)->heartbeat_ms;
    int chunk = PM__WAIT_CHUNK_MS;
    if (hb > 0 && hb / 4 < (uint32_t)chunk)
        chunk = hb / 4 > 0 ? (int)(hb / 4) : 1;
    return chunk;
}

/* Whether a frame of this type may still be sent, from the control block
 * alone (two loads, no system call on the send path). Fenced: nothing (the
 * hub no longer reads our ring, so a "sent" frame would be lost silently).
 * Asked to stop: no new messages or requests (pm_node_send documents
 * -ESHUTDOWN from then on), but replies, so a worker can finish the
 * requests it already has: the hub still relays from a stopping worker. */
static int refused(pm_node *n, int type)
{
    const struct pm__ctl *ctl = pm__link_ctl(&n->link);
    if (atomic_load_explicit(&ctl->fenced, memory_order_acquire) != 0)
        return 1;
    if (type == PM__FT_REPLY)
        return 0;
    return n->stopping || atomic_load_explicit(&ctl->stop, memory_order_acquire) != 0;
}

PM_EXTERN int pm_node_beat(pm_node *n)
{
    int rc = node_check(n);
    if (rc < 0)
        return rc;
    beat(n);
    return shut_down(n) ? -ESHUTDOWN : 0;
}

/* What names this mesh's nodes, from what this worker knows about its own
 * address (the number of slots is not known here: the hub answers -ENOENT
 * past the last one). */
static pm__names names_of(const pm_node *n)
{
    const struct pm__ctl *ctl = pm__link_ctl(&n->link);
    pm__names names = {n->self.system, n->self.host, (unsigned)n->self.port - n->slot, UINT32_MAX,
                       ctl->peer_mode ? &ctl->hosts : NULL};
    return names;
}

static void fill_msg(const pm_node *n, const pm__frame_hdr *h, const void *data, pm_message *m)
{
    /* (a large message's data and len are set by the caller afterwards) */
    memset(m, 0, sizeof(*m));
    pm__names names = names_of(n);
    pm__node_address_at(&names, h->src_host, h->src, h->src_inc, &m->from);
    m->to = n->self;
    m->request_id = h->request_id;
    m->kind = h->type == PM__FT_REQUEST ? PM_MSG_REQUEST
              : h->type == PM__FT_REPLY ? PM_MSG_REPLY
              : h->type == PM__FT_UNDELIVERABLE ? PM_MSG_UNDELIVERABLE
                                                : PM_MSG_PLAIN;
    m->error = h->error;
    m->deadline_ms = h->deadline_ms;
    m->data = data;
    m->len = h->len;
}

/* Undoes the arming a timed-out receive left for pm_node_fd. Only when it
 * is set: the flag shares its cache line with our index, and a store on
 * every receive would bounce that line to the hub for nothing. The
 * doorbell the hub may have rung meanwhile is drained here, once: our own
 * waits park on a futex and never read it, and left full it would keep
 * pm_node_fd readable for a caller's poll. */
static void disarm(pm_node *n)
{
    if (!n->fd_armed)
        return;
    n->fd_armed = 0;
    if (atomic_load_explicit(&n->link.rx.sh->cons_waiting, memory_order_relaxed) != 0)
        pm__ring_disarm(&n->link.rx);
    uint64_t v;
    ssize_t k = read(n->link.node_efd, &v, sizeof(v)); /* nonblocking */
    (void)k;
}

/* Lets go of the message returned last: its ring space or its stash entry. */
static void drop_current(pm_node *n)
{
    if (n->cur_in_ring) {
        pm__ring_consume(&n->link.rx);
        n->cur_in_ring = 0;
        /* Hand space back in batches; a wait releases everything anyway. */
        if (n->link.rx.tail - n->link.rx.released >= n->link.rx.cap / 8)
            pm__ring_release(&n->link.rx);
    }
    free(n->cur_stash);
    n->cur_stash = NULL;
    if (n->cur_map != NULL) {
        munmap((void *)n->cur_map, n->cur_map_len);
        n->cur_map = NULL;
    }
}

/* The fd of the large message the frame at the head of our ring announces:
 * its record is taken from our socket (the hub sends it before the frame)
 * and checked like any sender's: the hub passes on fds it did not map, and
 * the memfd came from another worker. All but the scan for holes, which
 * the sending host's hub made (pm__bigmsg_check_from_hub). 0 with *fd and
 * *len, -EPROTO. */
static int take_big(pm_node *n, const void *payload, int *fd, uint64_t *len)
{
    unsigned char copy[PM__ANNOUNCE_SIZE];
    memcpy(copy, payload, sizeof(copy));
    pm__announce a;
    if (n->link.sock < 0 || pm__announce_decode(copy, sizeof(copy), &a) < 0 ||
        a.seq != pm__bigmsg_next(n->link.rx_seq) ||
        pm__bigmsg_recv(n->link.sock, a.seq, fd) < 0)
        return -EPROTO;
    n->link.rx_seq = a.seq;
    if (pm__bigmsg_check_from_hub(*fd, a.len, (size_t)pm__link_ctl(&n->link)->max_message) < 0) {
        pm__close(*fd);
        return -EPROTO;
    }
    *len = a.len;
    return 0;
}

/* Maps a checked large message as the current one: m shows all of it. */
static int show_big(pm_node *n, int fd, uint64_t len, pm_message *m)
{
    const void *map;
    int rc = pm__bigmsg_map(fd, (size_t)len, &map);
    pm__close(fd);
    if (rc < 0)
        return rc;
    n->cur_map = map;
    n->cur_map_len = (size_t)len;
    m->data = map;
    m->len = (size_t)len;
    return 0;
}

/* A large message we cannot map (our address space is full: RLIMIT_AS,
 * vm.max_map_count) is skipped and counted, never an error of the
 * receive, and its sender is told -EMSGSIZE with the one UNDELIVERABLE
 * frame a worker may send (the hub checks it against what it delivered to
 * us). A reply has nobody waiting to tell. */
static void refuse_big(pm_node *n, const pm__frame_hdr *h)
{
    n->big_skipped++;
    if (h->type == PM__FT_REPLY)
        return;
    pm__frame_hdr u;
    memset(&u, 0, sizeof(u));
    u.type = PM__FT_UNDELIVERABLE;
    u.dst_host = h->src_host;
    u.dst = h->src;
    u.dst_inc = h->src_inc;
    u.request_id = h->request_id;
    u.error = -EMSGSIZE;
    while (pm__frame_send(&n->link.tx, &u, NULL, 0) == -EAGAIN && !shut_down(n))
        (void)pm__ring_wait_space(&n->link.tx, PM__FRAME_HDR_SIZE, wait_chunk(n));
}

/* Consumes a frame nobody will read (a late answer): a large message's
 * record is taken too, so the next one's sequence still matches. */
static void discard(pm_node *n, const pm__frame_hdr *h, const void *payload)
{
    int fd;
    uint64_t len;
    if ((h->flags & PM__FF_MEMFD) != 0 && take_big(n, payload, &fd, &len) == 0)
        pm__close(fd);
    pm__ring_consume(&n->link.rx);
}

/* The spin gate of a worker waiting for a frame (doc/design.md, "Adaptive
 * spinning"). Every frame to us comes through the hub, so the hub is the
 * one other spinner a worker must leave a CPU for: while the hub is awake
 * (it has not announced a sleep on our up ring: it is working, or spinning
 * for the next frame) we spin only if a CPU is left beside it and the
 * process doing the work. On two CPUs a worker that handed its frame to an
 * awake hub therefore parks at once and leaves the hub, the receiver of
 * that frame, to spin: three spinners on two CPUs would take the CPU the
 * working process needs. A parked hub leaves the CPU to us. */
static int may_spin(const pm_node *n)
{
    return pm__spin_gate(pm__spin_cpus(), pm__ring_consumer_parked(&n->link.tx) ? 0u : 1u);
}

/* Waits for the next frame until deadline_ms (0: none; now: poll) and
 * peeks it. 1 with *h and *payload, -ETIMEDOUT, -ESHUTDOWN, -EPROTO. STOP
 * frames and malformed frames are consumed here. */
static int next_frame(pm_node *n, uint64_t deadline_ms, int forever, pm__frame_hdr *h,
                      const void **payload)
{
    /* Whether the supervisor might be gone: only after a wait that saw
     * nothing for a whole chunk. A parked round trip then makes no getppid()
     * call, and a dead supervisor is still noticed within a chunk. */
    int quiet = 0;
    for (;;) {
        int rc = pm__frame_recv(&n->link.rx, PM__LINK_MAX_FRAME, h, payload);
        if (rc == -EBADMSG)
            return -EPROTO; /* our supervisor wrote nonsense: nothing to do */
        if (rc < 0)
            continue; /* malformed frame, consumed */
        if (rc == 1) {
            if (h->type == PM__FT_STOP) {
                pm__ring_consume(&n->link.rx);
                n->stopping = 1;
                return -ESHUTDOWN;
            }
            return 1;
        }
        if (quiet ? shut_down(n) : told_to_stop(n))
            return -ESHUTDOWN;
        beat(n);
        int wait = wait_chunk(n);
        if (!forever) {
            uint64_t now = pm__now_ms();
            if (now >= deadline_ms) {
                /* Leave the doorbell armed so pm_node_fd turns readable
                 * when the next frame arrives. */
                if (pm__ring_arm(&n->link.rx) != 0)
                    continue;
                n->fd_armed = 1;
                return -ETIMEDOUT;
            }
            if (deadline_ms - now < (uint64_t)wait)
                wait = (int)(deadline_ms - now);
        }
        struct pm__ctl *ctl = n->link.map;
        atomic_store_explicit(&ctl->waiting, 1, memory_order_relaxed);
        rc = pm__ring_wait_gated(&n->link.rx, wait, may_spin(n));
        atomic_store_explicit(&ctl->waiting, 0, memory_order_relaxed);
        if (rc < 0)
            return -EPROTO;
        quiet = rc == 0;
    }
}

static int stash_current(pm_node *n, const pm__frame_hdr *h, const void *payload)
{
    int big = (h->flags & PM__FF_MEMFD) != 0;
    if (n->stash_bytes + h->len > PM__STASH_MAX || (big && n->stash_fds >= PM__STASH_MAX_FDS))
        return -ENOBUFS;
    pm__stash *e = malloc(sizeof(*e) + h->len);
    if (e == NULL)
        return -ENOBUFS;
    e->next = NULL;
    e->h = *h;
    e->fd = -1;
    e->big_len = 0;
    if (big) {
        int rc = take_big(n, payload, &e->fd, &e->big_len);
        if (rc < 0) {
            free(e);
            return rc;
        }
        n->stash_fds++;
    }
    memcpy(e->data, payload, h->len);
    if (n->stash_tail != NULL)
        n->stash_tail->next = e;
    else
        n->stash_head = e;
    n->stash_tail = e;
    n->stash_bytes += h->len;
    pm__ring_consume(&n->link.rx);
    return 0;
}

/* A reply (or a notice about a request) nobody waits for any more. */
static int is_late_answer(const pm__frame_hdr *h)
{
    return h->type == PM__FT_REPLY || (h->type == PM__FT_UNDELIVERABLE && h->request_id != 0);
}

/* Room for one more record ahead of its frame (bigmsg.h): forgets our
 * large frames the hub has consumed, and waits (or -EAGAIN without wait)
 * while PM__BIGMSG_AHEAD_MAX are not. The hub takes records off the socket
 * as they arrive and fences a worker past that many, so this, not the
 * socket's buffer, is what holds a sender back before its frames are
 * read. 0, -EAGAIN, -ESHUTDOWN, -EPROTO (our ring is poisoned). */
static int ahead_room(pm_node *n, int wait)
{
    for (;;) {
        while (n->ahead_n > 0) {
            int rc = pm__ring_consumed(&n->link.tx, n->ahead_end[n->ahead_head]);
            if (rc < 0)
                return -EPROTO;
            if (rc == 0)
                break;
            n->ahead_head = (n->ahead_head + 1) % PM__BIGMSG_AHEAD_MAX;
            n->ahead_n--;
        }
        if (n->ahead_n < PM__BIGMSG_AHEAD_MAX)
            return 0;
        if (!wait)
            return -EAGAIN;
        if (shut_down(n))
            return -ESHUTDOWN;
        beat(n);
        if (pm__ring_wait_consumed(&n->link.tx, n->ahead_end[n->ahead_head], wait_chunk(n)) < 0)
            return -EPROTO;
    }
}

/* Sends a large message (above PM_MAX_PAYLOAD) as a sealed memfd: room in
 * the ring is reserved first, then the record goes on the socket, then the
 * frame is committed, so that the hub always finds the record when it
 * reads the frame and a record never goes without its frame. A record the
 * kernel refuses for now (our user's fds in flight past our RLIMIT_NOFILE,
 * or no memory: hub.h) is -EAGAIN. */
static int send_big(pm_node *n, const pm__frame_hdr *h0, const void *data, size_t len, int wait)
{
    int fd = pm__bigmsg_create(data, len);
    if (fd < 0)
        return fd == -EMFILE || fd == -ENFILE || fd == -ENOMEM ? -ENOBUFS : fd;
    pm__frame_hdr h = *h0;
    h.flags = PM__FF_MEMFD;
    h.len = PM__ANNOUNCE_SIZE;
    size_t total = PM__FRAME_HDR_SIZE + PM__ANNOUNCE_SIZE;
    int rc;
    for (;;) {
        beat(n);
        void *p;
        if ((rc = ahead_room(n, wait)) < 0)
            break;
        rc = pm__ring_reserve(&n->link.tx, total, &p);
        if (rc == 0) {
            uint32_t seq = pm__bigmsg_next(n->link.tx_seq);
            rc = pm__bigmsg_send(n->link.sock, fd, seq);
            if (rc == 0) {
                n->link.tx_seq = seq;
                pm__frame_encode(&h, p);
                pm__announce a = {len, seq};
                pm__announce_encode(&a, (char *)p + PM__FRAME_HDR_SIZE);
                pm__ring_commit(&n->link.tx, total);
                pm__ring_publish(&n->link.tx);
                n->ahead_end[(n->ahead_head + n->ahead_n++) % PM__BIGMSG_AHEAD_MAX] =
                    pm__ring_head(&n->link.tx);
                break;
            }
            pm__ring_unreserve(&n->link.tx);
            if (rc == -ETOOMANYREFS || rc == -ENOBUFS || rc == -ENOMEM) {
                pm__close(fd);
                return -EAGAIN; /* refused for now, not a wait given up */
            }
            if (rc != -EAGAIN)
                break;
            /* The hub has not taken our earlier fds yet. */
            if (!wait || shut_down(n))
                break;
            struct pollfd pfd = {n->link.sock, POLLOUT, 0};
            (void)poll(&pfd, 1, wait_chunk(n));
            continue;
        }
        if (rc != -EAGAIN || !wait)
            break;
        if (shut_down(n)) {
            rc = -ESHUTDOWN;
            break;
        }
        rc = pm__ring_wait_space(&n->link.tx, total, wait_chunk(n));
        if (rc < 0)
            break;
    }
    pm__close(fd); /* sent: the socket holds its own reference */
    if (rc == -EAGAIN && wait)
        rc = -ESHUTDOWN; /* gave up waiting because we must stop */
    return rc == -EBADMSG ? -EPROTO : rc;
}

static int node_send(pm_node *n, const pm_address *to, int type, uint64_t request_id,
                     int64_t deadline_ms, const void *data, size_t len, int wait)
{
    int rc = node_check(n);
    if (rc < 0)
        return rc;
    if (data == NULL && len > 0)
        return -EINVAL;
    if (len > PM_MAX_PAYLOAD &&
        (len > pm__link_ctl(&n->link)->max_message || n->link.sock < 0))
        return -EMSGSIZE;
    uint32_t node;
    uint16_t host;
    pm__names names = names_of(n);
    rc = pm__address_route(&names, to, &host, &node);
    if (rc < 0)
        return rc;
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = (uint8_t)type;
    h.dst_host = host;
    h.dst = node;
    h.dst_inc = node == PM__NODE_MAIN || (host != PM__HOST_LOCAL && node == 0) ? 0 : to->incarnation;
    h.request_id = request_id;
    h.deadline_ms = deadline_ms;
    /* src and src_inc are left 0: the hub stamps them from our ring. */
    if (refused(n, type))
        return -ESHUTDOWN;
    if (len > PM_MAX_PAYLOAD)
        return send_big(n, &h, data, len, wait);
    for (;;) {
        beat(n);
        rc = pm__frame_send(&n->link.tx, &h, data, len);
        if (rc != -EAGAIN || !wait)
            return rc == -EBADMSG ? -EPROTO : rc;
        if (shut_down(n))
            return -ESHUTDOWN;
        rc = pm__ring_wait_space(&n->link.tx, PM__FRAME_HDR_SIZE + len, wait_chunk(n));
        if (rc < 0)
            return rc == -EBADMSG ? -EPROTO : rc;
    }
}

PM_EXTERN int pm_node_send(pm_node *n, const pm_address *to, const void *data, size_t len)
{
    return node_send(n, to, PM__FT_MSG, 0, 0, data, len, 1);
}

PM_EXTERN int pm_node_try_send(pm_node *n, const pm_address *to, const void *data, size_t len)
{
    return node_send(n, to, PM__FT_MSG, 0, 0, data, len, 0);
}

PM_EXTERN int pm_node_reply(pm_node *n, const pm_message *request, const void *data, size_t len)
{
    if (request == NULL || request->kind != PM_MSG_REQUEST)
        return -EINVAL;
    return node_send(n, &request->from, PM__FT_REPLY, request->request_id, 0, data, len, 1);
}

/* What starts every wait for a message: a live node and somewhere to put
 * the message, the previous message released, the doorbell disarmed. */
static int begin_wait(pm_node *n, const pm_message *out)
{
    int rc = node_check(n);
    if (rc < 0)
        return rc;
    if (out == NULL)
        return -EINVAL;
    drop_current(n);
    disarm(n);
    return 0;
}

/* The current ring frame h announces a large message: take, check and map
 * it. -EPROTO when the hub sent nonsense (it is trusted: nothing to do),
 * -EMSGSIZE when we cannot map it (refused: refuse_big). */
static int recv_big(pm_node *n, const pm__frame_hdr *h, const void *payload, pm_message *m)
{
    int fd;
    uint64_t len;
    int rc = take_big(n, payload, &fd, &len);
    if (rc == 0 && show_big(n, fd, len, m) < 0) {
        refuse_big(n, h);
        rc = -EMSGSIZE;
    }
    if (rc < 0) {
        m->data = NULL;
        m->len = 0;
    }
    return rc;
}

PM_EXTERN int pm_node_recv(pm_node *n, pm_message *m, int timeout_ms)
{
    int rc = begin_wait(n, m);
    if (rc < 0)
        return rc;
    beat(n);
    while (n->stash_head != NULL) {
        pm__stash *e = n->stash_head;
        n->stash_head = e->next;
        if (n->stash_head == NULL)
            n->stash_tail = NULL;
        n->stash_bytes -= e->h.len;
        n->cur_stash = e;
        fill_msg(n, &e->h, e->data, m);
        if (e->fd < 0)
            return 0;
        n->stash_fds--;
        int fd = e->fd;
        e->fd = -1;
        if (show_big(n, fd, e->big_len, m) == 0)
            return 0;
        refuse_big(n, &e->h);
        drop_current(n);
    }
    if (n->stopping)
        return -ESHUTDOWN;
    uint64_t deadline = timeout_ms < 0 ? 0 : pm__now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        pm__frame_hdr h;
        const void *payload;
        rc = next_frame(n, deadline, timeout_ms < 0, &h, &payload);
        if (rc < 0)
            return rc;
        if (is_late_answer(&h)) {
            discard(n, &h, payload);
            n->late_replies++;
            continue;
        }
        fill_msg(n, &h, payload, m);
        n->cur_in_ring = 1;
        if ((h.flags & PM__FF_MEMFD) == 0)
            return 0;
        rc = recv_big(n, &h, payload, m);
        if (rc != -EMSGSIZE)
            return rc;
        drop_current(n); /* skipped: on to the next message */
    }
}

PM_EXTERN int pm_node_request(pm_node *n, const pm_address *to, const void *data, size_t len,
                              int timeout_ms, pm_message *reply)
{
    int rc = begin_wait(n, reply);
    if (rc < 0)
        return rc;
    uint64_t id = ++n->next_req;
    uint64_t deadline = timeout_ms < 0 ? 0 : pm__now_ms() + (uint64_t)timeout_ms;
    rc = node_send(n, to, PM__FT_REQUEST, id, (int64_t)deadline, data, len, 1);
    if (rc < 0)
        return rc;
    for (;;) {
        pm__frame_hdr h;
        const void *payload;
        rc = next_frame(n, deadline, timeout_ms < 0, &h, &payload);
        if (rc < 0)
            return rc;
        if ((h.type == PM__FT_REPLY || h.type == PM__FT_UNDELIVERABLE) && h.request_id == id) {
            fill_msg(n, &h, payload, reply);
            n->cur_in_ring = 1;
            if ((h.flags & PM__FF_MEMFD) != 0)
                return recv_big(n, &h, payload, reply);
            return h.type == PM__FT_REPLY ? 0 : (h.error < 0 ? h.error : -EHOSTDOWN);
        }
        if (is_late_answer(&h)) {
            discard(n, &h, payload);
            n->late_replies++;
            continue;
        }
        /* Someone else's message: keep it for pm_node_recv. With the stash
         * full we can no longer reach our reply: say so at once. (Waiting
         * out the deadline here would not beat, and a request timeout
         * longer than the heartbeat timeout would get us fenced.) */
        if (stash_current(n, &h, payload) < 0)
            return -ENOBUFS;
    }
}

PM_EXTERN int pm_node_fd(const pm_node *n)
{
    int rc = node_check(n);
    return rc < 0 ? rc : n->link.node_efd;
}
