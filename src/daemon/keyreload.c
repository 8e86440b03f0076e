/* SPDX-License-Identifier: MIT */
/* keyreload.c - peer keys re-read on SIGUSR2 (or before SIGHUP's rolling
 * restart); see keyreload.h. */
#define _GNU_SOURCE
#include "keyreload.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <sodium.h>

#include "log.h"
#include "peer/peerkeys.h"
#include "peer/secretmem.h"

/* A SIGUSR2 that came before pmd_keyreload_arm, while the workers were
 * starting: the keys were read at start, but a file may have changed
 * since, so a reload asked for then is done once the loop runs, never
 * dropped. */
static volatile sig_atomic_t early_request;

static void on_early(int sig)
{
    (void)sig;
    early_request = 1;
}

void pmd_keyreload_early(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_early;
    /* A wait it interrupts is restarted, or returns EINTR to the loop,
     * which takes that as a turn with nothing done (loop.c). */
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGUSR2, &sa, NULL);
}

/* The watch callback: takes every queued SIGUSR2, asks for a reload, and
 * makes pm_cluster_run return so that the reload happens on the daemon's
 * side of the loop. */
static void on_sigusr2(pm_cluster *c, int fd, void *arg)
{
    pmd_keyreload *k = arg;
    struct signalfd_siginfo si;
    while (read(fd, &si, sizeof(si)) == (ssize_t)sizeof(si))
        k->pending = 1;
    pm_cluster_watch_fd(c, fd, on_sigusr2, k);
    if (k->pending)
        pm_cluster_stop(c);
}

int pmd_keyreload_arm(pmd_keyreload *k, pm_cluster *c)
{
    k->fd = -1;
    k->pending = 0;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    /* Blocked, so that it queues for the signalfd; its handler stays
     * (pmd_keyreload_early), so that one left pending when the mask is
     * restored at the end (pm_cluster_terminate) does not end procmesh. */
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    /* One that came while the workers started: reload on the first turn.
     * Read after the block: one arriving from now on queues instead. */
    if (early_request) {
        early_request = 0;
        k->pending = 1;
        pm_cluster_stop(c);
    }
    int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    int rc = fd < 0 ? -errno : pm_cluster_watch_fd(c, fd, on_sigusr2, k);
    if (rc < 0) {
        if (fd >= 0)
            close(fd);
        const char *kv[] = {"error", strerror(-rc), "detail", "SIGUSR2 (peer key reload) is ignored"};
        pmd_log(PMD_LOG_WARN, "key_reload_signal_failed", kv, 2);
        return rc;
    }
    k->fd = fd;
    return 0;
}

void pmd_keyreload_close(pmd_keyreload *k)
{
    if (k->fd >= 0)
        close(k->fd);
    k->fd = -1;
}

/* Loads the files into keys (2 slots); the number of distinct secrets, or
 * -errno with why filled. */
static int load_secrets(const pmd_dconf *conf, unsigned char *keys, char *why, size_t size)
{
    unsigned n = 0;
    for (size_t i = 0; i < conf->nsecret_files; i++) {
        unsigned char *k = keys + n * PM__PEER_KEY_LEN;
        int rc = pm__peer_key_load(conf->secret_file[i], conf->allow_insecure_secret_mode, k, why, size);
        if (rc == -ENOENT && i > 0)
            continue; /* the next secret's file removed: the old one dropped */
        if (rc < 0)
            return rc;
        if (n == 1 && sodium_memcmp(keys, k, PM__PEER_KEY_LEN) == 0)
            continue; /* the same secret twice: taken once */
        n++;
    }
    return (int)n;
}

void pmd_keys_reload(pm_cluster *c, const pmd_dconf *conf, const char *trigger)
{
    if (!conf->peer_flags || conf->nsecret_files == 0) {
        const char *kv[] = {"trigger", trigger, "reason", "no --secret-file to re-read"};
        pmd_log(PMD_LOG_INFO, "peer_keys_reload_skipped", kv, 2);
        return;
    }
    char why[384] = "";
    unsigned char *keys = pm__secretmem_alloc(2 * PM__PEER_KEY_LEN);
    if (keys == NULL) {
        const char *kv[] = {"trigger", trigger, "reason", "no secret memory"};
        pmd_log(PMD_LOG_ERROR, "peer_keys_reload_failed", kv, 2);
        return;
    }
    int rc = load_secrets(conf, keys, why, sizeof(why));
    unsigned n = rc > 0 ? (unsigned)rc : 0;
    if (rc >= 0) {
        rc = pm_cluster_set_secrets(c, keys, n);
        if (rc < 0)
            snprintf(why, sizeof(why), "%s", pm_strerror(rc));
    }
    char ids[2 * (2 * PM__PEER_KEY_ID_LEN + 1)] = "";
    for (unsigned i = 0; rc == 0 && i < n; i++) {
        unsigned char id[PM__PEER_KEY_ID_LEN];
        pm__peer_key_id(keys + i * PM__PEER_KEY_LEN, id);
        size_t at = strlen(ids);
        if (i > 0)
            ids[at++] = ',';
        sodium_bin2hex(ids + at, sizeof(ids) - at, id, sizeof(id));
    }
    pm__secretmem_free(keys); /* wipes them */
    if (rc < 0) {
        const char *kv[] = {"trigger", trigger, "reason", why, "keeping", "the keys in use"};
        pmd_log(PMD_LOG_ERROR, "peer_keys_reload_failed", kv, 3);
        return;
    }
    char count[16];
    snprintf(count, sizeof(count), "%u", n);
    const char *kv[] = {"secrets", count, "ids", ids, "trigger", trigger};
    pmd_log(PMD_LOG_INFO, "peer_keys_reloaded", kv, 3);
}
