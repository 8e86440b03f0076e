/* SPDX-License-Identifier: MIT */
/* Fork mode in a dozen lines: two crash-isolated workers, supervised for a
 * second, then stopped. Built and run by `make check`. */
#include <procmesh.h>
#include <stdio.h>

static int worker(pm_node *node, void *arg)
{
    (void)arg;
    pm_node_ready(node); /* handshake done: this worker serves */
    fprintf(stderr, "worker %u ready\n", pm_node_slot(node));
    pm_message m;        /* serve until the supervisor says stop (-ESHUTDOWN) */
    while (pm_node_recv(node, &m, -1) == 0)
        if (m.kind == PM_MSG_REQUEST)
            pm_node_reply(node, &m, "pong", 4); /* a crash here is restarted */
    return 0;
}

int main(void)
{
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, 2);
    pm_options_set_bootstrap(o, worker, NULL);
    pm_cluster *c;
    int rc = pm_cluster_spawn(o, &c);
    if (rc < 0) {
        fprintf(stderr, "spawn: %s\n", pm_strerror(rc));
        return 1;
    }
    pm_cluster_run(c, 1000);  /* supervise for a second */
    pm_cluster_terminate(c);  /* stop request, SIGKILL after the timeout, reap */
    pm_options_free(o);
    return 0;
}
