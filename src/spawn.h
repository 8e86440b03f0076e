/*
 * spawn.h - fork a worker: the child-side set-up that must happen between
 * fork and exec (or the bootstrap), and nothing else.
 */
#ifndef PM_SPAWN_H
#define PM_SPAWN_H

#include <signal.h>
#include <sys/types.h>

typedef struct pm__spawn_req {
    pid_t parent;          /* the supervisor: the child dies with it */
    const sigset_t *mask;  /* signal mask to restore in the child */
    /* exec mode (path != NULL) */
    const char *path;
    char *const *argv;
    char *const *envp;
    const int *fds;        /* placed at 3, 4, ... in this order */
    int nfds;
    int err_pipe;          /* write end, close-on-exec: gets errno if exec fails */
    char *pid_digits;      /* if set: 11 bytes inside an envp string, filled with
                              the child's own pid (LISTEN_PID) and a NUL */
    /* fork mode (path == NULL): runs in the child, never returns */
    void (*child)(void *ctx);
    void *ctx;
} pm__spawn_req;

/* Forks. Returns the child's pid to the parent, or -errno. The exec-mode
 * child performs only async-signal-safe calls before execve. */
pid_t pm__spawn(const pm__spawn_req *r);

/* pidfd helpers with the raw system calls (glibc 2.36 has wrappers, older
 * ones do not; the numbers are the same everywhere). -errno on failure. */
int pm__pidfd_open(pid_t pid);
int pm__pidfd_signal(int pidfd, int sig);

#endif /* PM_SPAWN_H */
