/* SPDX-License-Identifier: MIT */
/*
 * exec_env.c - what an exec-mode worker is given besides its fds: the
 * program's path, resolved once, and its environment (the supervisor's,
 * less procmesh's own configuration and service-manager contracts, plus
 * the per-worker variables). Plain memory work in the supervisor, before
 * the spawn (spawn.c runs nothing of this in the child).
 */
#define _GNU_SOURCE
#include "base/internal.h"
#include "spawn.h"
#include "base/defaults.h" /* PM__NODE_ENV */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

/* The environment of an exec-mode worker: the template, then
 * PROCMESH_NODE (mesh readiness) and the LISTEN_* variables (listen fds).
 * The extra strings live in *text (freed by the caller after the fork);
 * *pid_digits points into LISTEN_PID's value for the child to fill in. */
char **pm__exec_env(const pm__exec_env_req *q, char **text, char **pid_digits)
{
    const char *notify = q->notify;
    int node_fd_at = q->node_fd_at;
    size_t names = 0;
    for (size_t i = 0; i < q->nfds; i++) /* the names' room */
        names += strlen(q->fd_names[i]) + 1;
    size_t size = 64 + (q->listen_env ? 64 + names : 0) + (notify ? 32 + strlen(notify) : 0);
    char **env = malloc((q->ntmpl + 6) * sizeof(*env));
    char *t = malloc(size);
    if (env == NULL || t == NULL) {
        free(env);
        free(t);
        return NULL;
    }
    memcpy(env, q->tmpl, q->ntmpl * sizeof(*env));
    size_t k = q->ntmpl, used = 0;
    *pid_digits = NULL;
    if (node_fd_at >= 0) {
        env[k++] = t + used;
        used += (size_t)snprintf(t + used, size - used, "%s=%d,%d,%d,%d", PM__NODE_ENV,
                                 node_fd_at, node_fd_at + 1, node_fd_at + 2, node_fd_at + 3) + 1;
    }
    if (notify != NULL) {
        env[k++] = t + used;
        used += (size_t)snprintf(t + used, size - used, "NOTIFY_SOCKET=%s", notify) + 1;
    }
    if (q->listen_env && q->nfds > 0) {
        env[k++] = t + used;
        used += (size_t)snprintf(t + used, size - used, "LISTEN_FDS=%zu", q->nfds) + 1;
        env[k++] = t + used;
        used += (size_t)snprintf(t + used, size - used, "LISTEN_FDNAMES=");
        for (size_t i = 0; i < q->nfds; i++)
            used += (size_t)snprintf(t + used, size - used, "%s%s", i ? ":" : "", q->fd_names[i]);
        used++;
        env[k++] = t + used;
        used += (size_t)snprintf(t + used, size - used, "LISTEN_PID=");
        *pid_digits = t + used;
        memset(t + used, '0', 11);
        used += 12;
    }
    env[k] = NULL;
    *text = t;
    return env;
}

/* A program exec can run: executable by us and a regular file (access
 * alone passes a directory, which execvp skips). */
static int runnable(const char *path)
{
    struct stat st;
    return access(path, X_OK) == 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* An empty PATH entry's candidate, "./name", made absolute: the path is
 * kept for every restart, which must not depend on where the application
 * has chdir'd by then. NULL when out of memory or the working directory
 * cannot be named. */
static char *absolute(const char *name)
{
    char *cwd = getcwd(NULL, 0);
    if (cwd == NULL)
        return NULL;
    size_t size = strlen(cwd) + strlen(name) + 2;
    char *full = malloc(size);
    if (full != NULL)
        snprintf(full, size, "%s/%s", cwd, name);
    free(cwd);
    return full;
}

char *pm__exec_resolve(const char *name)
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
        size_t size = dlen + nlen + 3; /* "./" or "dir/", the name, its NUL */
        char *cand = malloc(size);
        if (cand == NULL)
            return NULL;
        /* An empty entry is the working directory ("./name", as execvp
         * takes it): "." printed whole, not cut to the entry's length. */
        snprintf(cand, size, "%.*s/%s", (int)(dlen > 0 ? dlen : 1), dlen > 0 ? p : ".", name);
        if (runnable(cand)) {
            if (dlen > 0)
                return cand;
            free(cand);
            return absolute(name);
        }
        free(cand);
        if (colon == NULL)
            break;
        p = colon + 1;
    }
    /* Not found: a path no exec can open, so that the spawn fails ENOENT
     * as execvp does. The bare name would not: execve takes a name
     * without a slash relative to the working directory, and would run a
     * program of that name there, which PATH does not name. */
    return strdup("");
}

int pm__env_template(char ***out, size_t *count)
{
    size_t n = 0;
    for (char **e = environ; e != NULL && *e != NULL; e++)
        n++;
    char **env = calloc(n + 1, sizeof(*env));
    if (env == NULL)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        /* PROCMESH_* is the supervisor's own configuration (the daemon's
         * PROCMESH_<OPTION> variables, PROCMESH_HEALTH ...) and the
         * contracts procmesh sets on purpose (PROCMESH_NODE, appended per
         * worker): an inherited one would tell a worker what is not meant
         * for it, or claim another worker's memory. */
        if (strncmp(environ[i], "PROCMESH_", 9) == 0)
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
        env[k] = strdup(environ[i]);
        if (env[k] == NULL) {
            pm__env_free(env, k);
            return -ENOMEM;
        }
        k++;
    }
    *out = env;
    *count = k;
    return 0;
}

void pm__env_free(char **env, size_t n)
{
    for (size_t i = 0; env != NULL && i < n; i++)
        free(env[i]);
    free(env);
}
