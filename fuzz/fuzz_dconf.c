/* SPDX-License-Identifier: MIT */
/* fuzz_dconf.c - libFuzzer harness for `procmesh run` option parsing (pmd_dconf_parse, pmd_dconf_options). */
/*
 * Input: one byte giving the number of command-line words (0..15), then
 * NUL-separated strings: that many words of argv, then environment entries
 * NAME=VALUE read by a fake getenv. Every '@' is replaced by '%' first: an
 * --init-data @FILE value opens a file, and the fuzzer must not read (or
 * block on) whatever path it invents; the file case is in check_daemon.
 * Oracle: the parse returns 0 or -EINVAL with one NUL-terminated error line
 * naming something; on success the values are in their documented ranges,
 * the command lies inside argv, and building library options either works
 * or says why.
 */
#include <errno.h>

#include "dconf.h"
#include "fuzz.h"

#define MAX_WORDS 16
#define MAX_ENV 16

static char *env_names[MAX_ENV];
static char *env_values[MAX_ENV];
static size_t nenv;

static const char *fake_getenv(const char *name)
{
    for (size_t i = 0; i < nenv; i++)
        if (strcmp(env_names[i], name) == 0)
            return env_values[i];
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int nwords = data[0] % MAX_WORDS;
    char *copy = malloc(size);
    if (copy == NULL)
        return 0;
    memcpy(copy, data + 1, size - 1);
    copy[size - 1] = '\0'; /* the last string ends here whatever the input */
    for (size_t i = 0; i + 1 < size; i++)
        copy[i] = copy[i] == '@' ? '%' : copy[i];

    char *argv[MAX_WORDS + 1];
    int argc = 0;
    nenv = 0;
    for (char *s = copy; s < copy + size;) {
        size_t len = strlen(s);
        if (argc < nwords) {
            argv[argc++] = s;
        } else if (nenv < MAX_ENV) {
            char *eq = strchr(s, '=');
            if (eq != NULL) {
                *eq = '\0';
                env_names[nenv] = s;
                env_values[nenv++] = eq + 1;
            }
        }
        s += len + 1;
    }
    argv[argc] = NULL;

    static pmd_dconf c;
    char err[256];
    memset(err, 'x', sizeof(err));
    int rc = pmd_dconf_parse(&c, argc, argv, fake_getenv, err, sizeof(err));
    FUZZ_ASSERT(memchr(err, '\0', sizeof(err)) != NULL);
    if (rc < 0) {
        FUZZ_ASSERT(rc == -EINVAL || rc == -ENOMEM);
        FUZZ_ASSERT(err[0] != '\0'); /* bad input, or no memory, gets a clear error */
    } else {
        FUZZ_ASSERT(rc == 0 && err[0] == '\0');
        FUZZ_ASSERT(c.argc >= 1 && c.argv >= argv && c.argv + c.argc == argv + argc);
        FUZZ_ASSERT(c.workers >= 0 && c.workers <= PM_MAX_WORKERS);
        FUZZ_ASSERT(c.backoff_min >= 0 && c.backoff_max >= c.backoff_min);
        FUZZ_ASSERT(c.jitter >= 0.0 && c.jitter <= 1.0);
        FUZZ_ASSERT(c.base_port >= 0 && c.base_port <= 65535);
        FUZZ_ASSERT(c.nlisten <= PMD_MAX_LISTEN);
        FUZZ_ASSERT(c.init_len <= PM_MAX_INIT_DATA);
        FUZZ_ASSERT(memchr(c.system_name, '\0', sizeof(c.system_name)) != NULL);
        FUZZ_ASSERT(memchr(c.hostname, '\0', sizeof(c.hostname)) != NULL);
        for (size_t i = 0; i < c.nlisten; i++) {
            FUZZ_ASSERT(memchr(c.listen[i].name, '\0', sizeof(c.listen[i].name)) != NULL);
            FUZZ_ASSERT(c.listen[i].unix_socket ? c.listen[i].path[0] != '\0'
                                                : c.listen[i].port <= 65535);
        }
        pm_options *o = NULL;
        char why[256];
        why[0] = '\0';
        int orc = pmd_dconf_options(&c, &o, why, sizeof(why));
        if (orc == 0)
            pm_options_free(o);
        else
            FUZZ_ASSERT(why[0] != '\0' && memchr(why, '\0', sizeof(why)) != NULL);
    }
    pmd_dconf_free(&c);
    free(copy);
    return 0;
}
