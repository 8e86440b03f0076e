/* SPDX-License-Identifier: MIT */
/*
 * dconf.h - the procmesh daemon's `run` options from its command line and
 * environment. Pure (but for reading an --init-data @FILE): it turns argv
 * and an environment lookup into a configuration or one error line, so
 * tests drive it exactly. The defaults are the library's (defaults.h).
 * --user resolves a name with getpwnam/getgrnam (numbers are taken as
 * they are).
 */
#ifndef PMD_DCONF_H
#define PMD_DCONF_H

#include <stddef.h>

#include "dconf_types.h"
#include "log.h"
#include "procmesh.h"


/* Returns the value of an environment variable, or NULL (getenv, or a test's
 * fake). */
typedef const char *(*pmd_getenv)(const char *name);

/*
 * Parses `procmesh run` options: argv[0] is the first option (after "run").
 * Each option may also come from PROCMESH_<NAME> (upper case, '-' as '_');
 * a flag wins over the variable. Returns 0, -EINVAL with one line in err
 * naming the option or variable, the value and what is allowed, or
 * -ENOMEM. c is to be freed (pmd_dconf_free) whatever it returns.
 */
int pmd_dconf_parse(pmd_dconf *c, int argc, char **argv, pmd_getenv env, char *err,
                    size_t errsize);

/* Gives back what c holds and leaves it empty: freeing it again is safe. */
void pmd_dconf_free(pmd_dconf *c);

/* Builds library options from a configuration. -errno with err filled. */
int pmd_dconf_options(const pmd_dconf *c, pm_options **out, char *err, size_t errsize);

/*
 * Reads the peer-link key files a configuration names and hands the result
 * to o: each --secret-file (mode and content checked; the key goes through
 * secret memory straight to pm_options_add_secret), the --node-key file
 * (created with mode 0600 when missing), the --peer-keys file (parsed);
 * then the peer addresses, and validates o again. Separate from
 * pmd_dconf_options because it reads and may create files. -errno with one
 * line in err naming the option and the file.
 */
int pmd_dconf_peer_files(const pmd_dconf *c, pm_options *o, char *err, size_t errsize);

#endif /* PMD_DCONF_H */
