/* SPDX-License-Identifier: MIT */
/*
 * node.c - the worker side: join (exec mode), the handshake, ready, close.
 * Sending and receiving are node_messaging.c's; the crash handler is
 * node_crash.c's.
 */
#define _GNU_SOURCE
#include "node.h"
#include "base/defaults.h" /* PM__NODE_ENV */

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "channel/proto.h"
#include "node_crash.h"
#include "node_lanes.h"
#include "os/crash.h" /* pm__crash_unwinder_prime */

/* How long to wait for INIT between checks that the supervisor still
 * exists. PR_SET_PDEATHSIG normally kills us first; this is the backstop. */
#define PM__NODE_POLL_MS 100

/* One fd number of PROCMESH_NODE: decimal digits, at most 1 << 24.
 * Hand-written: strtol would be the only caller of its code and of the
 * locale's character table on an exec'd worker's way to ready, two page
 * faults (tens of microseconds each in a VM) for a field procmesh writes
 * as plain digits; a sign or a space is refused, as strtol refused "-3". */
PM__READY_TEXT static int parse_fd(const char **s, int *fd)
{
    const char *p = *s;
    long v = 0;
    for (; *p >= '0' && *p <= '9'; p++)
        if ((v = v * 10 + (*p - '0')) > 1 << 24)
            return -EINVAL;
    if (p == *s)
        return -EINVAL; /* no digit: an empty field, a sign, a space */
    *fd = (int)v;
    *s = p;
    return 0;
}

/* The INIT's fields into n, its data copied (m's points into the frame's
 * copy, freed by the caller). */
PM__READY_TEXT static int take_init(pm_node *n, const pm__init_msg *m)
{
    n->slot = m->slot;
    n->self = m->addr;
    if (m->len > 0) {
        if ((n->init_data = malloc(m->len)) == NULL)
            return -ENOMEM;
        memcpy(n->init_data, m->data, m->len);
    }
    n->init_len = m->len;
    return 0;
}

/* A ring's -EBADMSG (its shared indices are nonsense: poisoned) is the
 * worker's -EPROTO (pm_node(3): the shared memory is corrupt); any other
 * error is returned as it is. */
PM__READY_TEXT static int ring_error(int rc)
{
    return rc == -EBADMSG ? -EPROTO : rc;
}

PM__READY_TEXT int pm__node_handshake(pm_node *n)
{
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = PM__FT_HELLO;
    h.dst = PM__NODE_MAIN;
    unsigned char ver[4] = {PM__PROTO_VERSION, 0, 0, 0};
    int rc = pm__frame_send(&n->channel.tx, &h, ver, sizeof(ver));
    if (rc < 0)
        return -EPROTO; /* a fresh ring has room for a HELLO: this one was full or corrupt */
    for (;;) {
        rc = pm__ring_wait(&n->channel.rx, PM__NODE_POLL_MS);
        if (rc < 0) /* a poisoned ring, or the wait's own failure (poll without futexes) */
            return ring_error(rc);
        if (rc == 0) {
            if (getppid() != n->supervisor)
                return -ESHUTDOWN;
            continue;
        }
        const void *payload;
        rc = pm__frame_recv(&n->channel.rx, PM__CHANNEL_MAX_FRAME, &h, &payload);
        if (rc < 0) /* a malformed frame */
            return -EPROTO;
        if (rc == 0)
            continue;
        if (h.type == PM__FT_STOP) {
            pm__ring_consume(&n->channel.rx);
            return -ESHUTDOWN; /* stopped during the handshake (pm_node(3)) */
        }
        if (h.type != PM__FT_INIT) {
            pm__ring_consume(&n->channel.rx);
            continue;
        }
        pm__init_msg m;
        /* The supervisor is trusted, but a private copy costs nothing here:
         * on the stack when the init data is small (the usual INIT: the
         * worker's first malloc would initialise the allocator, a
         * getrandom, two brk and a heap page on the way to ready). */
        _Alignas(8) unsigned char small[PM__INIT_FIXED + 256];
        void *copy = h.len <= sizeof(small) ? small : malloc(h.len);
        if (copy == NULL)
            return -ENOMEM;
        memcpy(copy, payload, h.len);
        pm__ring_consume(&n->channel.rx);
        pm__ring_release(&n->channel.rx);
        rc = pm__init_decode(copy, h.len, &m) < 0 ? -EPROTO : take_init(n, &m);
        if (copy != small)
            free(copy);
        return rc;
    }
}

void pm__node_fork_prime(void)
{
    pm__node_crash_prime();
}

PM__READY_TEXT int pm__node_from_hub_channel(pm_node *n, const pm__channel *hub, const struct pm__init_msg *init,
                           pid_t supervisor)
{
    memset(n, 0, sizeof(*n));
    n->magic = PM__MAGIC_NODE;
    n->gen = pm__fork_gen();
    /* pm__spawn's child checked getppid() against it after arming its
     * parent-death signal. */
    n->supervisor = supervisor;
    /* The supervisor's channel with the roles of the worker, mapped
     * here: the fork did not copy it (pm__channel_adopt_fork). */
    int rc = pm__channel_adopt_fork(&n->channel, hub);
    if (rc < 0)
        return rc;
    /* Free here: the supervisor loaded the unwinder before the fork. */
    pm__crash_unwinder_prime();
    pm__node_crash_arm_forked(n->channel.map);
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

/* The node of this process's first join, in static storage: the usual
 * exec'd worker joins once, and its first malloc would initialise the
 * allocator (a getrandom, two brk and a heap page) on its way to ready.
 * Taken by the first join, given back by its pm_node_close; a second node
 * while it is taken (a join after a failed or closed one is fine) comes
 * from the heap. */
static pm_node first_node;
static atomic_int first_node_taken;

PM__READY_TEXT static pm_node *node_alloc(void)
{
    if (atomic_exchange_explicit(&first_node_taken, 1, memory_order_acquire) == 0) {
        memset(&first_node, 0, sizeof(first_node));
        return &first_node;
    }
    return calloc(1, sizeof(pm_node));
}

static void node_free(pm_node *n)
{
    if (n == &first_node)
        atomic_store_explicit(&first_node_taken, 0, memory_order_release);
    else
        free(n);
}

PM__READY_TEXT PM_EXTERN int pm_node_join(pm_node **out)
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
    pm_node *n = node_alloc();
    if (n == NULL)
        return -ENOMEM;
    n->magic = PM__MAGIC_NODE;
    n->gen = pm__fork_gen();
    n->heap = 1;
    n->supervisor = getppid();
    int rc = pm__channel_attach(&n->channel, memfd, node_efd, hub_efd, sock);
    rc = ring_error(rc); /* a ring poisoned at the attach: not a channel's */
    if (rc == 0) {
        pm__node_crash_arm(n->channel.map);
        rc = pm__node_handshake(n);
    }
    if (rc < 0) {
        if (n->channel.map != NULL)
            pm__node_crash_disarm(n->channel.map);
        pm__channel_close(&n->channel);
        free(n->init_data);
        node_free(n);
        return rc;
    }
    /* Our children must not think they are workers too. */
    unsetenv(PM__NODE_ENV);
    *out = n;
    return 0;
}

PM_EXTERN const pm_address *pm_node_self(const pm_node *n)
{
    return pm__node_check(n) == 0 ? &n->self : NULL;
}

PM_EXTERN unsigned pm_node_slot(const pm_node *n)
{
    return pm__node_check(n) == 0 ? n->slot : 0;
}

PM_EXTERN int pm_node_init_data(const pm_node *n, const void **data, size_t *len)
{
    int rc = pm__node_check(n);
    if (rc < 0)
        return rc;
    if (data == NULL || len == NULL)
        return -EINVAL;
    *data = n->init_data;
    *len = n->init_len;
    return 0;
}

PM__READY_TEXT PM_EXTERN int pm_node_ready(pm_node *n)
{
    int rc = pm__node_check(n);
    if (rc < 0)
        return rc;
    if (n->ready_sent)
        return 0;
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = PM__FT_READY;
    h.dst = PM__NODE_MAIN;
    while ((rc = pm__frame_send(&n->channel.tx, &h, NULL, 0)) == -EAGAIN)
        if ((rc = pm__ring_wait_space(&n->channel.tx, PM__FRAME_HDR_SIZE, 1000)) < 0)
            break;
    if (rc < 0)
        return ring_error(rc);
    n->ready_sent = 1;
    /* The crash handler's unwinder, off the way to ready (crash.h): a
     * crash before this records the faulting pc as its one frame. */
    pm__crash_unwinder_prime();
    return 0;
}

/* The messages pm_node_request set aside and the one returned last. */
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

PM_EXTERN void pm_node_close(pm_node *n)
{
    /* NULL, not a node, a child's copy, or a fork-mode node (procmesh's,
     * on the worker's stack): nothing to release here. */
    if (pm__node_check(n) < 0 || !n->heap)
        return;
    n->magic = 0;
    stash_free(n);
    pm__node_ls_free(n->ls);
    n->ls = NULL;
    pm__node_crash_disarm(n->channel.map);
    pm__channel_close(&n->channel);
    free(n->init_data);
    node_free(n);
}
