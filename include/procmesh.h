/*
 * procmesh.h - the public interface of libprocmesh.
 *
 * procmesh supervises worker processes: a supervisor forks them, links each
 * one to itself by a pair of single-producer/single-consumer rings in shared
 * memory, relays frames between them and restarts crashed workers under a
 * restart budget.
 *
 * Conventions (the same for every function declared here):
 *  - every call that can fail returns 0 (or a non-negative count) on success
 *    and a negative errno value on failure; pm_strerror() describes it;
 *  - handles are opaque, so the ABI can evolve without breaking callers;
 *  - names are NUL-terminated and at most PM_NAME_MAX - 1 bytes long.
 */
#ifndef PROCMESH_H
#define PROCMESH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && __GNUC__ >= 4
#define PM_EXTERN __attribute__((visibility("default")))
#else
#define PM_EXTERN
#endif

#define PM_VERSION_MAJOR 0
#define PM_VERSION_MINOR 1
#define PM_VERSION_PATCH 0

/* Room for a name (system or host) including its terminating NUL. */
#define PM_NAME_MAX 64
/* Room for any formatted address, "system@host:port#incarnation" plus NUL. */
#define PM_ADDRESS_STRLEN (2 * (PM_NAME_MAX - 1) + 1 + 1 + 5 + 1 + 20 + 1)

/* The library's version as "MAJOR.MINOR.PATCH"; never NULL. */
PM_EXTERN const char *pm_version_string(void);

/*
 * A static description of an error code returned by any pm_ function (a
 * negative errno value); also accepts a positive errno. Never NULL, thread
 * safe, the string must not be freed.
 */
PM_EXTERN const char *pm_strerror(int err);

/*
 * The address of a node of a mesh. `system` names the mesh, `host` the
 * machine or role ("main" for the supervisor), `port` the slot's port and
 * `incarnation` which life of that slot (0 = unspecified, matches any).
 */
typedef struct pm_address {
    char system[PM_NAME_MAX];
    char host[PM_NAME_MAX];
    uint16_t port;
    uint64_t incarnation;
} pm_address;

/*
 * Writes "system@host:port" (plus "#incarnation" when it is not 0) and a
 * terminating NUL into buf. Returns the length written without the NUL, or
 * -ENOSPC when buf is too small (buf then holds an empty string if size > 0),
 * or -EINVAL when addr holds a name that is empty, unterminated or has a
 * character that parsing would reject.
 */
PM_EXTERN int pm_address_format(const pm_address *addr, char *buf, size_t size);

/*
 * Parses the text form written by pm_address_format(). Names are 1 to
 * PM_NAME_MAX - 1 characters from [A-Za-z0-9._-]; the port is a decimal
 * 0..65535 and the incarnation a decimal 1..2^64-1, both without sign,
 * blanks or leading zeros. Returns 0, or -EINVAL on any malformed text
 * (out is then left untouched).
 */
PM_EXTERN int pm_address_parse(const char *text, pm_address *out);

/* 1 when both addresses name the same node: same names and port, and the
 * same incarnation unless either of them is 0 (unspecified). */
PM_EXTERN int pm_address_match(const pm_address *a, const pm_address *b);

#ifdef __cplusplus
}
#endif

#endif /* PROCMESH_H */
