/*
 * dconf.h - the procmesh daemon's command line and environment. Pure: it
 * turns argv and an environment lookup into a configuration or one error
 * line, and touches nothing else, so tests drive it exactly.
 */
#ifndef PM_DAEMON_DCONF_H
#define PM_DAEMON_DCONF_H

#include <stddef.h>

#include "procmesh.h"

#define PM__D_MAX_LISTEN 16

enum pm__d_log_format { PM__LOG_TEXT = 1, PM__LOG_JSON = 2 };
enum pm__d_log_level { PM__LOG_ERROR = 1, PM__LOG_WARN, PM__LOG_INFO, PM__LOG_DEBUG };
enum pm__d_ready { PM__D_READY_MESH = 1, PM__D_READY_NOTIFY, PM__D_READY_EXEC };

typedef struct pm__d_listen {
    char name[PM_NAME_MAX];
    int unix_socket;        /* 1: path, 0: tcp host:port */
    char path[108];
    char host[256];
    unsigned port;
} pm__d_listen;

typedef struct pm__dconf {
    int workers;            /* 0 = auto */
    int restart;            /* PM_RESTART_* */
    int backoff_min, backoff_max;
    double jitter;
    int max_restarts, restart_window, ready_timeout, heartbeat_timeout, stop_timeout;
    char system_name[PM_NAME_MAX];
    char hostname[PM_NAME_MAX];
    int base_port;
    char *init_data;        /* text, or the contents of @FILE (malloc'd) */
    size_t init_len;
    int ready;              /* PM__D_READY_* */
    pm__d_listen listen[PM__D_MAX_LISTEN];
    size_t nlisten;
    char health_host[256];  /* empty: no health endpoint */
    unsigned health_port;
    int min_ready;          /* -1: all slots */
    int log_format, log_level;
    char **argv;            /* COMMAND [ARG...], pointers into the caller's argv */
    int argc;
} pm__dconf;

/* Returns the value of an environment variable, or NULL (getenv, or a test's
 * fake). */
typedef const char *(*pm__d_getenv)(const char *name);

/*
 * Parses `procmesh run` options: argv[0] is the first option (after "run").
 * Each option may also come from PROCMESH_<NAME> (upper case, '-' as '_');
 * a flag wins over the variable. Returns 0, or -EINVAL with one line in err
 * naming the option or variable, the value and what is allowed.
 */
int pm__dconf_parse(pm__dconf *c, int argc, char **argv, pm__d_getenv env, char *err,
                    size_t errsize);

void pm__dconf_free(pm__dconf *c);

/* Builds library options from a configuration. -errno with err filled. */
int pm__dconf_options(const pm__dconf *c, pm_options **out, char *err, size_t errsize);

#endif /* PM_DAEMON_DCONF_H */
