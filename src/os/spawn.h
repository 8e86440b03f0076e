/* SPDX-License-Identifier: MIT */
/*
 * spawn.h - fork a worker: the child-side set-up that must happen between
 * fork and exec (or the bootstrap), and nothing else.
 */
#ifndef PM_SPAWN_H
#define PM_SPAWN_H

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h> /* before P_PIDFD below: glibc >= 2.36 declares it as an enumerator */

#include "procmesh.h"
#include "cgroup.h"

#define PM__SPAWN_CTX_MAX 64

struct pm__seccomp_prog;

typedef struct pm__spawn_req {
    pid_t parent;          /* the supervisor: the child dies with it */
    const sigset_t *mask;  /* signal mask to restore in the child; fork mode
                              only: NULL for the mask the child was born with
                              (the forking thread's), read by the child's own
                              first rt_sigprocmask, not by a call of the
                              supervisor before the fork */
    /* exec mode (path != NULL) */
    const char *path;
    char *const *argv;
    char *const *envp;
    const int *fds;        /* placed at 3, 4, ... in this order */
    int nfds;
    int err_pipe;          /* write end, close-on-exec: gets errno if exec fails
                              (from the fork child, or from the parent after a
                              vfork child failed) */
    char *pid_digits;      /* if set: 11 bytes inside an envp string, filled with
                              the child's own pid (LISTEN_PID) and a NUL */
    uint64_t sig_ignored;  /* the signals ignored in the supervisor (bit sig - 1,
                              pm__sig_ignored): when the clone reset every handler
                              (CLONE_CLEAR_SIGHAND), the only ones the child still
                              sets back to SIG_DFL */
    int sig_ignored_known; /* 0: sig_ignored unknown, every signal is reset */
    int no_wait;           /* exec mode: one of several children started back to
                              back (the first starts of a spawn of 2 to 256):
                              forked, not the vfork clone, whose wait for each
                              child's execve would keep the supervisor from
                              the next (spawn.c) */
    /* fork mode (path == NULL): runs in the child, never returns; it gets
     * the child's own copy of this request and calls
     * pm__child_privileges() with it after procmesh's join and before the
     * application's code. ctx is copied (ctx_size <= PM__SPAWN_CTX_MAX)
     * onto the child's own frame before the supervisor's frames are
     * zeroed, so it must not point into the caller's stack. */
    void (*child)(void *ctx, const struct pm__spawn_req *r);
    const void *ctx;
    size_t ctx_size;
    /* fork mode: the supervisor's frames from pm__spawn's up to here (a
     * CFA noted by PM__ENTER) are zeroed in the child; NULL: only the dead
     * stack below is. */
    void *scrub_to;
    /* both modes: stdio[0] becomes the child's fd 1 and stdio[1] its fd 2
     * (captured output) when capture is 1; else both are inherited */
    int capture;
    int stdio[2];
    /* containment (pm__child_contain) */
    const pm__cg_slot *cg;              /* the slot's cgroup, or NULL (process group only) */
    const unsigned char *rlimit_set;    /* PM__MAX_RLIMIT entries, or NULL */
    const uint64_t *rlimit_soft;        /* UINT64_MAX: unlimited */
    const uint64_t *rlimit_hard;
    /* privileges (pm__child_privileges), in the order they are applied */
    int set_ids;           /* drop to uid/gid (the supervisor is root) */
    uid_t uid;
    gid_t gid;
    int no_new_privs;      /* PR_SET_NO_NEW_PRIVS */
    int dumpable;          /* PR_SET_DUMPABLE 1 again: the supervisor made itself
                              non-dumpable and a fork child inherits that */
    struct pm__seccomp_prog *seccomp; /* loaded last; NULL: none */
} pm__spawn_req;

/* In the child, the first thing after fork: its own process group, the
 * slot's cgroup (v2, and the v1 controllers of the limits) unless clone3
 * already put it there (placed), the rlimits. Before pm__child_privileges
 * (a cgroup.procs write or a raised hard rlimit may need the root the
 * privilege step gives up) and, in fork mode, before the stack scrubbing
 * and the bootstrap. Async-signal-safe. 0 or an
 * errno (positive, as the exec error pipe carries it). */
int pm__child_contain(const pm__spawn_req *r, int placed);

/* Forks (fork mode), or clones with CLONE_VM|CLONE_VFORK (exec mode,
 * spawn.c says when it falls back to fork). Returns the child's pid to the
 * parent, or -errno. The exec-mode child performs only system calls before
 * execve; a failed step's errno reaches err_pipe either way. */
pid_t pm__spawn(const pm__spawn_req *r);

/* 1 when an exec-mode pm__spawn returns only once its child has exec'd or
 * exited (the vfork clone; not known refused): no child of ours is then
 * between its clone and its exec while the caller runs, holding copies
 * of the caller's close-on-exec fds, but for no_wait ones (the first
 * starts of a spawn of several, forked), which hold them until their
 * execve, a few milliseconds, as the vfork child does from its parent's
 * release to its close-on-exec (readiness.c allows for both). 0 when it
 * forks. */
int pm__spawn_waits_exec(void);

/* The child's last steps before exec (or the bootstrap): its user, then
 * no_new_privs, dumpability, and the seccomp filter, from r. Called once in
 * each child: by pm__spawn just before execve in exec mode, by the child
 * function after the join in fork mode. Async-signal-safe. 0 or -errno
 * (the caller exits; exec mode reports the errno through the error pipe). */
int pm__child_privileges(const pm__spawn_req *r);

/* Places out at fd 1 and err at fd 2 (each -1: left alone), whatever
 * numbers they have (0..2 included), clearing close-on-exec on 1 and 2;
 * the caller closes out and err afterwards if it wants. Async-signal-safe.
 * 0 or -errno. */
int pm__child_stdio(int out, int err);

/* The signals (1..64, bit sig - 1) whose disposition is SIG_IGN in this
 * process now: one rt_sigaction per signal. */
uint64_t pm__sig_ignored(void);

/* pidfd helpers with the raw system calls (glibc 2.36 has wrappers, older
 * ones do not; the numbers are the same everywhere). -errno on failure. */
int pm__pidfd_open(pid_t pid);
#ifndef P_PIDFD
#define P_PIDFD 3 /* waitid(P_PIDFD, ...): linux/wait.h; glibc < 2.36 lacks it */
#endif
int pm__pidfd_signal(int pidfd, int sig);

/* exec_env.c */

/* Exec mode: the program's path looked up in PATH once, at create time,
 * as execvp looks (a name with a slash is taken as it is; an empty entry
 * is the working directory, whose candidate is made absolute; a directory
 * is skipped; a name not found gives "", which exec refuses ENOENT,
 * never the bare name, which execve would take relative to the working
 * directory). NULL only when out of memory (or, for an empty entry's
 * find, when the working directory cannot be named). */
char *pm__exec_resolve(const char *name);

/* The environment template of exec-mode workers: the supervisor's own,
 * less every PROCMESH_* variable (its configuration; PROCMESH_NODE is set
 * per worker by pm__exec_env) and what describes its own service manager
 * contracts (NOTIFY_SOCKET, WATCHDOG_*, LISTEN_*). 0 or -ENOMEM. Freed with
 * pm__env_free. */
int pm__env_template(char ***env, size_t *count);
void pm__env_free(char **env, size_t count);

/* One worker's environment: the template, then PROCMESH_NODE (mesh
 * readiness), NOTIFY_SOCKET (notify readiness) and the LISTEN_* variables
 * (listen fds). */
typedef struct pm__exec_env_req {
    char *const *tmpl;
    size_t ntmpl;
    int node_fd_at;              /* PROCMESH_NODE's first fd, or -1 */
    const char *notify;          /* NOTIFY_SOCKET, or NULL */
    int listen_env;              /* the fds are listening sockets */
    size_t nfds;
    const char (*fd_names)[PM_NAME_MAX];
} pm__exec_env_req;

/* The extra strings live in *text (freed by the caller after the fork);
 * *pid_digits points into LISTEN_PID's value for the child to fill in.
 * NULL when out of memory. */
char **pm__exec_env(const pm__exec_env_req *q, char **text, char **pid_digits);

#endif /* PM_SPAWN_H */
