/* SPDX-License-Identifier: MIT */
/* deps.h - liburing, libsodium and libseccomp, loaded on first use: a worker never maps what only a supervisor calls. */
#ifndef PM_DEPS_H
#define PM_DEPS_H

/*
 * An exec'd worker links libprocmesh for the node side (join, rings,
 * ready), which needs none of the three; a DT_NEEDED entry for each would
 * make the dynamic loader open, map and relocate them in every worker at
 * every start. So the library records none of them: deps.c opens each by
 * the SONAME configure found (dlopen, so another distribution's soname is
 * the one built against) the first time the supervisor needs it, and
 * resolves the functions procmesh calls into a table, once, thread-safely.
 *
 * Call sites keep the functions' own names: they include os/dep_uring.h,
 * os/dep_sodium.h or os/dep_seccomp.h instead of the real header, which
 * includes it and defines each function procmesh calls as its table entry
 * (pm__uring()->io_uring_submit ...); a call site that can do without the
 * library asks pm__dep_load first.
 * Configured with --disable-lazy-deps (a fully static program, which cannot
 * dlopen), those headers are the real headers alone, the library links
 * the three as before and pm__dep_load succeeds for what was built in.
 *
 * Where a dependency is missing at run time the caller says what it gives
 * up: io_uring -> the loop uses epoll; libsodium -> peer links and secrets
 * are refused (-ELIBACC, the reason naming the library and dlerror());
 * libseccomp -> the seccomp option is refused (-ENOTSUP).
 */
#include <stddef.h>

#include "base/internal.h"

enum pm__dep { PM__DEP_URING, PM__DEP_SODIUM, PM__DEP_SECCOMP, PM__DEP_COUNT_ };

/* Loads d (the first call; later calls return the first's result). 0, or
 * -ELIBACC with why (when not NULL) saying which library could not be
 * loaded and dlerror()'s words. Thread-safe; not async-signal-safe. */
PM__DAEMON_API int pm__dep_load(enum pm__dep d, char *why, size_t whysize);

/* The reason d could not be loaded ("" when it was, or was never tried). */
const char *pm__dep_error(enum pm__dep d);

#endif /* PM_DEPS_H */
