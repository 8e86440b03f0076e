/* SPDX-License-Identifier: MIT */
/*
 * options_contain.c - pm_options: how the workers are confined. Their
 * privileges (user, uid range, no_new_privs, seccomp), their containment
 * and its cgroup limits, rlimits and where cores go. Setters with their
 * range checks; the checks of the combination are pm_options_validate's
 * (options.c).
 */
#define _GNU_SOURCE
#include "options.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "base/defaults.h"
#include "os/seccomp_filter.h"

/* ------------------------------------------------------------------ privileges */

PM_EXTERN int pm_options_set_user(pm_options *o, uid_t uid, gid_t gid)
{
    if (o == NULL)
        return -EINVAL;
    if (uid == (uid_t)-1 && gid == (gid_t)-1) {
        o->set_user = 0;
        return 0;
    }
    /* 0 would be no drop at all; -1 means "unchanged" to setresuid. */
    if (uid == 0 || gid == 0 || uid == (uid_t)-1 || gid == (gid_t)-1)
        return -EINVAL;
    o->set_user = 1;
    o->uid = uid;
    o->gid = gid;
    return 0;
}

PM_EXTERN int pm_options_set_uid_range(pm_options *o, uid_t first, unsigned count)
{
    if (o == NULL)
        return -EINVAL;
    if (count == 0) {
        o->uid_count = 0;
        return 0;
    }
    /* The last uid, first + count - 1, must stay below (uid_t)-1. */
    if (first == 0 || count > PM_MAX_WORKERS || first > (uid_t)-1 - count)
        return -EINVAL;
    o->uid_first = first;
    o->uid_count = count;
    return 0;
}

PM_EXTERN int pm_options_set_no_new_privs(pm_options *o, int on)
{
    if (o == NULL || (on != 0 && on != 1))
        return -EINVAL;
    o->no_new_privs = on;
    return 0;
}

PM_EXTERN int pm_options_set_protect_supervisor(pm_options *o, int on)
{
    if (o == NULL || (on != 0 && on != 1))
        return -EINVAL;
    o->protect_supervisor = on;
    return 0;
}

PM_EXTERN int pm_options_set_seccomp(pm_options *o, int level)
{
    if (o == NULL ||
        (level != PM_SECCOMP_OFF && level != PM_SECCOMP_BASIC && level != PM_SECCOMP_STRICT))
        return -EINVAL;
    if (level != PM_SECCOMP_OFF && !pm__seccomp_available())
        return -ENOTSUP; /* built without libseccomp */
    o->seccomp = level;
    return 0;
}

PM_EXTERN int pm_options_set_seccomp_action(pm_options *o, int action)
{
    if (o == NULL || (action != PM_SECCOMP_ERRNO && action != PM_SECCOMP_KILL))
        return -EINVAL;
    o->seccomp_action = action;
    return 0;
}

/* ------------------------------------------------------------------ containment */

PM_EXTERN int pm_options_set_memory_max(pm_options *o, uint64_t bytes)
{
    /* Below 1 MiB no program gets as far as its main(): surely a unit
     * mistake (kilobytes for bytes). */
    if (o == NULL || (bytes != 0 && bytes < PM__MIN_MEMORY_MAX))
        return -EINVAL;
    o->memory_max = bytes;
    return 0;
}

PM_EXTERN int pm_options_set_pids_max(pm_options *o, int n)
{
    if (o == NULL || n < 0 || n > PM__MAX_PIDS_MAX)
        return -EINVAL;
    o->pids_max = n;
    return 0;
}

PM_EXTERN int pm_options_set_cpu_max(pm_options *o, uint64_t quota_us, uint64_t period_us)
{
    if (o == NULL)
        return -EINVAL;
    if (quota_us == 0) {
        o->cpu_quota_us = o->cpu_period_us = 0;
        return 0;
    }
    if (period_us < PM__MIN_CPU_PERIOD_US || period_us > PM__MAX_CPU_PERIOD_US ||
        quota_us < PM__MIN_CPU_QUOTA_US || quota_us > PM__MAX_CPU_QUOTA_US)
        return -EINVAL;
    o->cpu_quota_us = quota_us;
    o->cpu_period_us = period_us;
    return 0;
}

PM_EXTERN int pm_options_set_containment(pm_options *o, int mode)
{
    if (o == NULL || (mode != 0 && mode != PM_CONTAIN_CGROUP && mode != PM_CONTAIN_PROCESS_GROUP))
        return -EINVAL;
    o->containment = mode;
    return 0;
}

PM_EXTERN int pm_options_set_rlimit(pm_options *o, int resource, uint64_t soft, uint64_t hard)
{
    if (o == NULL || resource < 0 || resource >= PM__MAX_RLIMIT || soft > hard)
        return -EINVAL;
    o->rlimit_set[resource] = 1;
    o->rlimit_soft[resource] = soft;
    o->rlimit_hard[resource] = hard;
    return 0;
}

PM_EXTERN int pm_options_set_core_dir(pm_options *o, const char *dir)
{
    if (o == NULL || (dir != NULL && dir[0] == '\0'))
        return -EINVAL;
    char *abs = NULL;
    if (dir != NULL) {
        /* Checked now, so the caller learns at once; again at validation,
         * since it may vanish meanwhile. Kept absolute: the operator's
         * core_pattern names it, whatever the workers' directory. */
        struct stat st;
        if (stat(dir, &st) < 0)
            return -errno;
        if (!S_ISDIR(st.st_mode))
            return -ENOTDIR;
        abs = realpath(dir, NULL);
        if (abs == NULL)
            return -errno;
    }
    free(o->core_dir);
    o->core_dir = abs;
    return 0;
}

void pm__core_rlimit(int core_dir, int may_raise, uint64_t hard, uint64_t *soft_out,
                     uint64_t *hard_out)
{
    if (!core_dir) {
        *soft_out = 0;
        *hard_out = hard;
        return;
    }
    uint64_t v = may_raise ? PM_RLIM_INFINITY : hard;
    *soft_out = *hard_out = v;
}
