/* SPDX-License-Identifier: MIT */
/* A downstream exec'd worker, linked with procmesh-worker.pc (libprocmesh.a
 * inside the program). Started by procmesh it joins and says it is ready;
 * started by hand, pm_node_join says there is no supervisor (-ENOENT). */
#include <errno.h>
#include <procmesh.h>
#include <stdio.h>

int main(void)
{
    pm_node *n;
    int rc = pm_node_join(&n);
    if (rc == 0) {
        rc = pm_node_ready(n);
        pm_node_close(n);
        return rc == 0 ? 0 : 1;
    }
    printf("consumer-worker: libprocmesh %s linked in, without a supervisor: %s\n",
           pm_version_string(), pm_strerror(rc));
    return rc == -ENOENT ? 0 : 1;
}
