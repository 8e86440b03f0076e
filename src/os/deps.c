/* SPDX-License-Identifier: MIT */
/* deps.c - liburing, libsodium and libseccomp opened by SONAME on first use, their functions resolved once into tables (deps.h). */
#define _GNU_SOURCE
#include "base/internal.h"
#define PM__DEPS_IMPL /* the dep_*.h headers declare their tables only */
#include "os/deps.h"
#include "os/dep_seccomp.h"
#include "os/dep_sodium.h"
#include "os/dep_uring.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if PM_LAZY_DEPS

static struct pm__uring_fns uring_fns;
static struct pm__sodium_fns sodium_fns;
#ifdef HAVE_SECCOMP
static struct pm__seccomp_fns seccomp_fns;
#endif

/* Each fill resolves every function of its table from handle h: NULL, or
 * the name of the first one the library lacks (an older version than
 * configure checked for). */
#define PM__DEP_FILL(f)                                                                            \
    if ((t->f = (__typeof__(t->f))dlsym(h, #f)) == NULL)                                           \
        return #f;

static const char *fill_uring(void *h)
{
    struct pm__uring_fns *t = &uring_fns;
    PM__URING_FNS(PM__DEP_FILL)
    return NULL;
}

static const char *fill_sodium(void *h)
{
    struct pm__sodium_fns *t = &sodium_fns;
    PM__SODIUM_FNS(PM__DEP_FILL)
    return NULL;
}

#ifdef HAVE_SECCOMP
static const char *fill_seccomp(void *h)
{
    struct pm__seccomp_fns *t = &seccomp_fns;
    PM__SECCOMP_FNS(PM__DEP_FILL)
    return NULL;
}
#endif

struct dep {
    const char *name;   /* for messages: "libsodium" */
    const char *soname; /* configure's (PM_SONAME_*) */
    const void *fns;
    const char *(*fill)(void *h);
    /* Written once, by the pthread_once routine; read after pthread_once
     * returned, which orders them. */
    int rc;
    char why[256];
};

static struct dep deps[PM__DEP_COUNT_] = {
    [PM__DEP_URING] = {"liburing", PM_SONAME_URING, &uring_fns, fill_uring, 0, ""},
    [PM__DEP_SODIUM] = {"libsodium", PM_SONAME_SODIUM, &sodium_fns, fill_sodium, 0, ""},
#ifdef HAVE_SECCOMP
    [PM__DEP_SECCOMP] = {"libseccomp", PM_SONAME_SECCOMP, &seccomp_fns, fill_seccomp, 0, ""},
#else
    [PM__DEP_SECCOMP] = {"libseccomp", NULL, NULL, NULL, 0, ""},
#endif
};

static pthread_once_t once[PM__DEP_COUNT_] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
                                              PTHREAD_ONCE_INIT};
static _Atomic int tried[PM__DEP_COUNT_];

static void load(struct dep *d)
{
    if (d->soname == NULL || d->fill == NULL) {
        snprintf(d->why, sizeof(d->why), "%s: procmesh was built without it", d->name);
        d->rc = -ELIBACC;
        return;
    }
    /* RTLD_LOCAL: only our table sees its symbols. A program that links
     * the library itself already has it mapped, and dlopen returns that
     * same copy. Never closed: the table points into it. */
    void *h = dlopen(d->soname, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(d->why, sizeof(d->why), "%s cannot be loaded: %s", d->name, e != NULL ? e : d->soname);
        d->rc = -ELIBACC;
        return;
    }
    const char *missing = d->fill(h);
    if (missing != NULL) {
        snprintf(d->why, sizeof(d->why), "%s (%s) has no %s: too old for procmesh", d->name, d->soname,
                 missing);
        d->rc = -ELIBACC;
        return;
    }
    d->rc = 0;
}

static void load_uring(void)
{
    load(&deps[PM__DEP_URING]);
}

static void load_sodium(void)
{
    load(&deps[PM__DEP_SODIUM]);
}

static void load_seccomp(void)
{
    load(&deps[PM__DEP_SECCOMP]);
}

static void (*const loaders[PM__DEP_COUNT_])(void) = {load_uring, load_sodium, load_seccomp};

int pm__dep_load(enum pm__dep d, char *why, size_t whysize)
{
    if ((unsigned)d >= PM__DEP_COUNT_)
        return -EINVAL;
    /* Stored once, not on every call: pm__uring() comes here for each
     * ring operation, and a store to a page a fork child shares would copy
     * the page after every fork (a page fault on the supervisor's way to
     * its new worker's READY). */
    if (!atomic_load_explicit(&tried[d], memory_order_relaxed))
        atomic_store_explicit(&tried[d], 1, memory_order_relaxed);
    (void)pthread_once(&once[d], loaders[d]);
    if (deps[d].rc < 0 && why != NULL && whysize > 0)
        snprintf(why, whysize, "%s", deps[d].why);
    return deps[d].rc;
}

static const void *dep_fns(enum pm__dep d)
{
    if (pm__dep_load(d, NULL, 0) < 0) {
        fprintf(stderr, "procmesh: %s\n", deps[d].why);
        abort();
    }
    return deps[d].fns;
}

const struct pm__uring_fns *pm__uring(void)
{
    return dep_fns(PM__DEP_URING);
}

const struct pm__sodium_fns *pm__sodium(void)
{
    return dep_fns(PM__DEP_SODIUM);
}

#ifdef HAVE_SECCOMP
const struct pm__seccomp_fns *pm__seccomp(void)
{
    return dep_fns(PM__DEP_SECCOMP);
}
#endif

const char *pm__dep_error(enum pm__dep d)
{
    if ((unsigned)d >= PM__DEP_COUNT_ || !atomic_load_explicit(&tried[d], memory_order_relaxed))
        return "";
    (void)pthread_once(&once[d], loaders[d]);
    return deps[d].why;
}

#else /* !PM_LAZY_DEPS: linked directly */

int pm__dep_load(enum pm__dep d, char *why, size_t whysize)
{
    (void)why;
    (void)whysize;
    if ((unsigned)d >= PM__DEP_COUNT_)
        return -EINVAL;
#ifndef HAVE_SECCOMP
    if (d == PM__DEP_SECCOMP) {
        if (why != NULL && whysize > 0)
            snprintf(why, whysize, "libseccomp: procmesh was built without it");
        return -ELIBACC;
    }
#endif
    return 0;
}

const char *pm__dep_error(enum pm__dep d)
{
    (void)d;
    return "";
}

#endif /* PM_LAZY_DEPS */
