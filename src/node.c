/*
 * node.c - the worker side: join (exec mode), the handshake, ready.
 */
#define _GNU_SOURCE
#include "node.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

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

int pm__node_from_hub_link(pm_node *n, const pm__link *hub)
{
    memset(n, 0, sizeof(*n));
    n->supervisor = getppid();
    /* Re-attach over the same memory (the mapping the child inherited),
     * with the roles of the worker. */
    int rc = pm__link_attach(&n->link, hub->memfd, hub->node_efd, hub->hub_efd);
    if (rc < 0)
        return rc;
    return pm__node_handshake(n);
}

PM_EXTERN int pm_node_join(pm_node **out)
{
    if (out == NULL)
        return -EINVAL;
    const char *env = getenv(PM__NODE_ENV);
    if (env == NULL)
        return -ENOENT;
    int memfd, node_efd, hub_efd;
    const char *s = env;
    if (parse_fd(&s, &memfd) < 0 || *s++ != ',' || parse_fd(&s, &node_efd) < 0 || *s++ != ',' ||
        parse_fd(&s, &hub_efd) < 0 || *s != '\0')
        return -EINVAL;
    pm_node *n = calloc(1, sizeof(*n));
    if (n == NULL)
        return -ENOMEM;
    n->supervisor = getppid();
    int rc = pm__link_attach(&n->link, memfd, node_efd, hub_efd);
    if (rc == 0)
        rc = pm__node_handshake(n);
    if (rc < 0) {
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

PM_EXTERN const pm_address *pm_node_self(const pm_node *n)
{
    return n != NULL ? &n->self : NULL;
}

PM_EXTERN unsigned pm_node_slot(const pm_node *n)
{
    return n != NULL ? n->slot : 0;
}

PM_EXTERN int pm_node_init_data(const pm_node *n, const void **data, size_t *len)
{
    if (n == NULL || data == NULL || len == NULL)
        return -EINVAL;
    *data = n->init_data;
    *len = n->init_len;
    return 0;
}

PM_EXTERN int pm_node_ready(pm_node *n)
{
    if (n == NULL)
        return -EINVAL;
    if (n->ready_sent)
        return 0;
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = PM__FT_READY;
    h.dst = PM__NODE_MAIN;
    int rc;
    while ((rc = pm__frame_send(&n->link.tx, &h, NULL, 0)) == -EAGAIN)
        if ((rc = pm__ring_wait_space(&n->link.tx, PM__FRAME_HDR_SIZE, 1000)) < 0)
            return rc;
    if (rc < 0)
        return rc == -EBADMSG ? -EPROTO : rc;
    n->ready_sent = 1;
    return 0;
}

PM_EXTERN void pm_node_close(pm_node *n)
{
    if (n == NULL)
        return;
    pm__link_close(&n->link);
    free(n->init_data);
    free(n);
}
