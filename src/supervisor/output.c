/* SPDX-License-Identifier: MIT */
/*
 * output.c - workers' captured stdout and stderr: the pipes of each
 * incarnation, read on the loop a bounded slice at a time, split into
 * tagged lines under the slot's rate limit, drained after the reap. The
 * reads themselves run on threads (os/offread.c; start_read says why).
 *
 * One pipe per stream per incarnation, not one per slot reused: a
 * descendant of an ended incarnation that still holds the old write end can
 * never pass its lines off as the replacement's (they would carry the new
 * pid and incarnation), and the end of the pipe (EOF) is the end of that
 * incarnation's writers. The price is two pipe2 calls per start.
 */
#define _GNU_SOURCE
#include "output.h"
#include "types.h"
#include "hub/hub.h"
#include "os/loop.h"
#include "os/offread.h"
#include "os/watchset.h"
#include "options.h"

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/uio.h>

/* ------------------------------------------------------------------ pure */

void pm__output_split(pm__outstream *st, const char *data, size_t n, pm__output_emit emit,
                      void *arg)
{
    while (n > 0) {
        size_t room = PM_OUTPUT_LINE_MAX - st->len;
        size_t take = n < room ? n : room;
        /* One byte further for the '\n': a line of exactly the bound is
         * one piece, not a full piece and an empty one. */
        const char *nl = memchr(data, '\n', n > room ? room + 1 : n);
        if (nl != NULL) {
            size_t k = (size_t)(nl - data);
            memcpy(st->buf + st->len, data, k);
            st->len += k;
            st->buf[st->len] = '\0';
            emit(arg, st->buf, st->len, 0);
            st->len = 0;
            data += k + 1;
            n -= k + 1;
            continue;
        }
        memcpy(st->buf + st->len, data, take);
        st->len += take;
        data += take;
        n -= take;
        if (st->len == PM_OUTPUT_LINE_MAX) {
            /* A full piece and no end in sight: out it goes, marked, so
             * that memory per stream stays bounded whatever the worker
             * writes. */
            st->buf[st->len] = '\0';
            emit(arg, st->buf, st->len, 1);
            st->len = 0;
        }
    }
}

void pm__output_flush(pm__outstream *st, pm__output_emit emit, void *arg)
{
    if (st->len == 0)
        return;
    st->buf[st->len] = '\0';
    emit(arg, st->buf, st->len, 0);
    st->len = 0;
}

int pm__output_take(pm__output *o, uint64_t now_ms)
{
    if (o->at_ms == 0) {
        o->tokens = PM_OUTPUT_BURST;
        o->at_ms = now_ms;
    } else if (now_ms > o->at_ms) {
        o->tokens += (double)(now_ms - o->at_ms) * PM_OUTPUT_PER_S / 1000.0;
        if (o->tokens > PM_OUTPUT_BURST)
            o->tokens = PM_OUTPUT_BURST;
        o->at_ms = now_ms;
    }
    if (o->tokens < 1.0)
        return 0;
    o->tokens -= 1.0;
    return 1;
}

/* Copies len bytes into the circular text at off, or out of it. */
static void ring_put(pm__outkeep *k, size_t off, const char *src, size_t len)
{
    size_t first = len < PM__OUTPUT_KEEP_BYTES - off ? len : PM__OUTPUT_KEEP_BYTES - off;
    memcpy(k->text + off, src, first);
    memcpy(k->text, src + first, len - first);
}

static void ring_get(const pm__outkeep *k, size_t off, char *dst, size_t len)
{
    size_t first = len < PM__OUTPUT_KEEP_BYTES - off ? len : PM__OUTPUT_KEEP_BYTES - off;
    memcpy(dst, k->text + off, first);
    memcpy(dst + first, k->text, len - first);
}

static void keep_drop_oldest(pm__outkeep *k)
{
    k->used -= k->ent[k->first].len;
    k->first = (k->first + 1) % PM__OUTPUT_KEEP_LINES;
    k->n--;
}

unsigned pm__output_keep(pm__outkeep *k, const char *text, size_t len, int truncated)
{
    unsigned out = 0;
    if (len > PM__OUTPUT_KEEP_BYTES)
        len = PM__OUTPUT_KEEP_BYTES; /* cannot happen: a piece is at most this */
    while (k->n > 0 && (k->n == PM__OUTPUT_KEEP_LINES || k->used + len > PM__OUTPUT_KEEP_BYTES)) {
        keep_drop_oldest(k);
        out++;
    }
    /* The text of the kept lines is contiguous (modulo the ring) and ends
     * at head: the new one follows it, in the room the loop made. */
    unsigned i = (k->first + k->n) % PM__OUTPUT_KEEP_LINES;
    k->ent[i].off = (uint32_t)k->head;
    k->ent[i].len = (uint32_t)len;
    k->ent[i].truncated = truncated;
    ring_put(k, k->head, text, len);
    k->head = (k->head + len) % PM__OUTPUT_KEEP_BYTES;
    k->used += len;
    k->n++;
    return out;
}

unsigned pm__output_keep_clear(pm__outkeep *k)
{
    unsigned n = k->n;
    k->n = 0;
    k->first = 0;
    k->used = 0;
    k->head = 0;
    return n;
}

int pm__output_keep_pop(pm__outkeep *k, char *buf, size_t *len, int *truncated)
{
    if (k->n == 0)
        return 0;
    unsigned i = k->first;
    ring_get(k, k->ent[i].off, buf, k->ent[i].len);
    buf[k->ent[i].len] = '\0';
    *len = k->ent[i].len;
    *truncated = k->ent[i].truncated;
    keep_drop_oldest(k);
    if (k->n == 0)
        k->head = 0;
    return 1;
}

/* ------------------------------------------------------------------ delivery */

typedef struct deliver_ctx {
    pm_cluster *c;
    pm__slot *s;
    int stream;
    uint64_t now_ms;
} deliver_ctx;

/* No callback: one write per line on the supervisor's stderr, tagged. */
static void default_sink(const pm_output_line *l)
{
    char head[160];
    int k = snprintf(head, sizeof(head), "procmesh: slot=%u pid=%d incarnation=%llu stream=%s",
                     l->slot, (int)l->pid, (unsigned long long)l->incarnation,
                     l->stream == PM_OUTPUT_STDOUT   ? "stdout"
                     : l->stream == PM_OUTPUT_STDERR ? "stderr"
                                                     : "none");
    if (l->truncated && k > 0 && (size_t)k < sizeof(head))
        k += snprintf(head + k, sizeof(head) - (size_t)k, " truncated=1");
    if (l->suppressed > 0 && k > 0 && (size_t)k < sizeof(head))
        k += snprintf(head + k, sizeof(head) - (size_t)k, " suppressed=%llu",
                      (unsigned long long)l->suppressed);
    if (k > 0 && (size_t)k < sizeof(head))
        k += snprintf(head + k, sizeof(head) - (size_t)k, ": ");
    if (k < 0 || (size_t)k >= sizeof(head))
        return;
    struct iovec iov[3] = {{head, (size_t)k}, {(void *)l->text, l->len}, {"\n", 1}};
    /* One writev: lines from several writers never interleave mid-line (for
     * a pipe up to PIPE_BUF bytes; a terminal or file takes it whole). */
    ssize_t w = writev(STDERR_FILENO, iov, 3);
    (void)w;
}

static void deliver(pm_cluster *c, const pm__slot *s, int stream, const char *text, size_t len,
                    int truncated, uint64_t suppressed)
{
    pm_output_line l;
    memset(&l, 0, sizeof(l));
    l.slot = s->index;
    l.pid = s->pid;
    l.incarnation = s->incarnation;
    l.stream = stream;
    l.text = text;
    l.len = len;
    l.truncated = truncated;
    l.suppressed = suppressed;
    if (c->o->on_output == NULL) {
        default_sink(&l);
        return;
    }
    PM__APP_CALLBACK(c->hub, c->o->on_output(c, &l, c->o->on_output_arg));
}

/* Lines dropped for good by the rate limit: counted (reported with the
 * next line delivered, or at the incarnation's end). */
static void dropped(pm_cluster *c, pm__output *o, unsigned n)
{
    o->suppressed += n;
    c->output.suppressed += n;
}

/* A line from the splitter: delivered if the slot's bucket has a token,
 * carrying the count of the lines dropped before it; else kept as one of
 * its stream's last lines (pushing out, and counting, the oldest kept). */
static void on_line(void *arg, const char *text, size_t len, int truncated)
{
    deliver_ctx *d = arg;
    pm__output *o = &d->s->out;
    pm__outkeep *k = &o->mem->keep[d->stream - 1];
    if (!pm__output_take(o, d->now_ms)) {
        dropped(d->c, o, pm__output_keep(k, text, len, truncated));
        return;
    }
    /* The kept lines came before this one: delivered after it they would
     * be out of order, so they are dropped now. */
    dropped(d->c, o, pm__output_keep_clear(k));
    uint64_t n = o->suppressed;
    o->suppressed = 0;
    deliver(d->c, d->s, d->stream, text, len, truncated, n);
}

/* The incarnation ended: the lines stream i kept are its last words, read
 * before the reap or in the drain and held back by the limit. They are
 * delivered now, past it (at most PM__OUTPUT_KEEP_LINES per stream and
 * incarnation), the count of every line dropped before them riding on the
 * first. st->buf is free: the stream was flushed. */
static void deliver_kept(pm_cluster *c, pm__slot *s, int i)
{
    pm__outstream *st = &s->out.s[i];
    size_t len;
    int truncated;
    while (pm__output_keep_pop(&s->out.mem->keep[i], st->buf, &len, &truncated)) {
        uint64_t n = s->out.suppressed;
        s->out.suppressed = 0;
        deliver(c, s, i + 1, st->buf, len, truncated, n);
    }
}

/* ------------------------------------------------------------------ pipes */

static uint64_t stream_tag(const pm__slot *s, int i)
{
    return PM__TAG(i == 0 ? PM__TAG_STDOUT : PM__TAG_STDERR, s->index, s->incarnation);
}

int pm__output_pipes(int p[2][2])
{
    int rc = 0;
    p[0][0] = p[0][1] = p[1][0] = p[1][1] = -1;
    for (int i = 0; i < 2; i++) {
        /* Close-on-exec on both ends: the child gets its end by dup2 onto
         * 1 or 2 (which clears the flag there), and no other worker may
         * inherit either end (a write end held elsewhere would keep the
         * pipe from ever reaching EOF). */
        if (pipe2(p[i], O_CLOEXEC) < 0) {
            p[i][0] = p[i][1] = -1;
            rc = -errno;
            goto fail;
        }
        /* Only our end is non-blocking (the flag belongs to the open file,
         * and each end is its own): the worker's writes block on a full
         * pipe, ours never wait. */
        if (fcntl(p[i][0], F_SETFL, O_NONBLOCK) < 0) {
            rc = -errno;
            goto fail;
        }
    }
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        pm__close(p[i][0]);
        pm__close(p[i][1]);
        p[i][0] = p[i][1] = -1;
    }
    return rc;
}

int pm__output_open_made(pm_cluster *c, pm__slot *s, int wfd[2], int p[2][2])
{
    (void)c;
    if (s->out.mem == NULL) {
        if ((s->out.mem = pm__wipemem_alloc(sizeof(*s->out.mem))) == NULL) {
            for (int i = 0; i < 2; i++) {
                pm__close(p[i][0]);
                pm__close(p[i][1]);
                p[i][0] = p[i][1] = -1;
            }
            return -ENOMEM;
        }
        for (int i = 0; i < 2; i++)
            s->out.s[i].buf = s->out.mem->line[i];
    }
    for (int i = 0; i < 2; i++) {
        s->out.s[i].fd = p[i][0];
        s->out.s[i].len = 0;
        (void)pm__output_keep_clear(&s->out.mem->keep[i]);
        wfd[i] = p[i][1];
        p[i][0] = p[i][1] = -1;
    }
    s->out.suppressed = 0;
    return 0;
}

int pm__output_open(pm_cluster *c, pm__slot *s, int wfd[2])
{
    int p[2][2];
    int rc = pm__output_pipes(p);
    if (rc < 0)
        return rc;
    return pm__output_open_made(c, s, wfd, p);
}

/* A stream is watched one-shot (os/watchset.c): reported once, it leaves
 * the set's ready list until rewatch puts it back, so no flag of ours says
 * whether it is watched; each stream is added once, at its incarnation's
 * start, and rewatched only after a report. A failed add or rewatch (no
 * memory for epoll's item) leaves the stream unread until the drain after
 * the reap, which reads it whole: its lines come late, none is lost. */
void pm__output_arm(pm_cluster *c, pm__slot *s)
{
    for (int i = 0; i < 2; i++)
        if (s->out.s[i].fd >= 0)
            (void)pm__watchset_add(pm__offread_watch_fd(c->output.reader), s->out.s[i].fd,
                                   stream_tag(s, i));
}

/* The stream was reported and its read taken, or not started: watched
 * again, unless closed (a callback of the delivery may have ended it: a
 * nested pm_cluster_run that reaped the worker). A nested run that also
 * restarted the slot and started a read of the new stream makes this a
 * rewatch with a read under way: its report is passed over by
 * stream_ready (job set), and the read's result rewatches it. */
static void rewatch(pm_cluster *c, pm__slot *s, int i)
{
    pm__outstream *st = &s->out.s[i];
    if (st->fd >= 0)
        (void)pm__watchset_mod(pm__offread_watch_fd(c->output.reader), st->fd, stream_tag(s, i));
}

/* The loop never closes a read end itself. The last close of either end
 * of a pipe takes the pipe's mutex (the kernel's pipe_release), which a
 * descendant of the worker may hold for as long as it likes (output.c,
 * start_read, says how): a thread of the reader closes it, after the
 * reader's epoll set let go of it, and a read under way takes the fd with
 * it (closed once no thread reads it: closed now, its number could be
 * reused by a file the thread would then read). */
static void close_stream(pm_cluster *c, pm__slot *s, int i)
{
    pm__outstream *st = &s->out.s[i];
    if (st->job != NULL) {
        pm__offread_abandon(c->output.reader, st->job);
        st->job = NULL;
    } else {
        pm__offread_close(c->output.reader, st->fd, s->index);
    }
    st->fd = -1;
    /* Closed without a drain (a failed start): what it kept is dropped. */
    dropped(c, &s->out, pm__output_keep_clear(&s->out.mem->keep[i]));
}

void pm__output_close_ends(pm_cluster *c, const pm__slot *s, int fd[2])
{
    /* -1 when capture is off (no reader then): pm__offread_close takes
     * nothing for -1. */
    for (int i = 0; i < 2; i++) { /* the worker's write ends */
        pm__offread_close(c->output.reader, fd[i], s->index);
        fd[i] = -1;
    }
}

/* Passes what a finished read got to the splitter. 1 when the stream
 * ended (EOF, or an error that will not go away). */
static int take_result(pm_cluster *c, pm__slot *s, int i, pm__offjob *j, size_t *got)
{
    pm__outstream *st = &s->out.s[i];
    pm__offread_result r;
    pm__offread_outcome(j, &r);
    deliver_ctx d = {c, s, i + 1, pm__now_ms()};
    st->job = NULL;
    pm__output_split(st, r.data, r.len, on_line, &d);
    if (got != NULL)
        *got = r.len;
    pm__offread_release(c->output.reader, j);
    if (r.end == PM__OFFREAD_MORE)
        return 0;
    /* EOF: every holder of the write end closed it. */
    pm__output_flush(st, on_line, &d);
    return 1;
}

/* The loop's side of the supervisor's one rule about these pipes: it
 * never reads them itself. Every end of a pipe shares the pipe's mutex,
 * which a worker can hold for as long as it likes (splice() into its
 * stdout from a socket nobody writes to; sendfile() likewise): a read()
 * on the loop's thread, non-blocking or not, would then sleep
 * uninterruptibly, and the whole cluster with it, the heartbeat fence
 * that would end the worker included. A thread reads instead
 * (os/offread.c); the loop starts the read and takes its result. */
static int start_read(pm_cluster *c, pm__slot *s, int i)
{
    pm__outstream *st = &s->out.s[i];
    return pm__offread_start(c->output.reader, st->fd, stream_tag(s, i), s->index, &st->job);
}

/* 1 when the pipe is empty and nobody holds its write end any more
 * (POLLHUP without POLLIN; poll reads the pipe's counts without its
 * mutex): its end, known without a read. Nothing is read on the loop even
 * then: a descendant can still hold the pipe's mutex through a read end
 * (open("/proc/self/fd/1", O_RDONLY) gives one; splice() from the pipe
 * into a full socket then sleeps with the mutex held). Bytes a writer
 * added through such a reopened end after this are not the ended
 * incarnation's to report. The common case at a worker's end, which then
 * costs no thread wake-up. */
int pm__output_ended_empty(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLIN)) == POLLHUP;
}

int pm__output_init(pm_cluster *c, int wake_fd)
{
    if (c->o->output != PM_OUTPUT_CAPTURE)
        return 0;
    int rc = pm__offread_new(&c->output.reader, wake_fd);
    if (rc == 0)
        rc = pm__offread_set_groups(c->output.reader, c->nslots); /* a group per slot */
    if (rc < 0)
        return rc;
    return pm__loop_arm(c->loop, pm__offread_watch_fd(c->output.reader),
                        PM__TAG(PM__TAG_OUTPUT, 0, 0));
}

/* Stream i is readable, or ended: its read starts on a thread. */
static void stream_ready(pm_cluster *c, pm__slot *s, int i)
{
    pm__outstream *st = &s->out.s[i];
    if (st->job != NULL)
        return; /* cannot be: watched again only once its read was taken */
    if (pm__output_ended_empty(st->fd)) {
        /* The worker closed its stdout (or stderr) and lives on, or just
         * died: what it kept was the stream's last words. */
        deliver_ctx d = {c, s, i + 1, pm__now_ms()};
        pm__output_flush(st, on_line, &d);
        deliver_kept(c, s, i);
        close_stream(c, s, i);
        return;
    }
    if (pm__offread_group_held(c->output.reader, s->index))
        return; /* a read would wait behind the slot's held ones: left unwatched until the drain */
    if (start_read(c, s, i) == 0)
        return;
    /* No memory for the job, no thread to run it: watched again, it is
     * reported in the next turn (the data is still there), after every
     * other fd had its chance. */
    rewatch(c, s, i);
}

void pm__output_on_ready(pm_cluster *c)
{
    uint64_t tags[64];
    int n = pm__watchset_ready(pm__offread_watch_fd(c->output.reader), tags, (int)PM__ARRAY_SIZE(tags));
    /* Armed again before the streams are handled: a stream with more than
     * these reported waits in the set, and the poll fires at once. */
    (void)pm__loop_arm(c->loop, pm__offread_watch_fd(c->output.reader),
                       PM__TAG(PM__TAG_OUTPUT, 0, 0));
    for (int k = 0; k < n; k++) {
        unsigned idx = PM__TAG_SLOT(tags[k]);
        int i = PM__TAG_KIND(tags[k]) == PM__TAG_STDOUT ? 0 : 1;
        if (idx >= c->nslots)
            continue;
        pm__slot *s = &c->slots[idx];
        /* A stream leaves the set before it is closed, so a report is
         * always about the slot's open stream; checked all the same. */
        if (s->out.s[i].fd < 0 || PM__TAG_INC(tags[k]) != (s->incarnation & 0xffffffffu))
            continue;
        stream_ready(c, s, i);
    }
}

/* One finished read of stream i: its lines delivered; the stream closed
 * at its end, else watched again. With data left, it is reported in the
 * next turn, after every other fd had its chance. */
static void collect_one(pm_cluster *c, pm__slot *s, int i, pm__offjob *j)
{
    if (take_result(c, s, i, j, NULL)) {
        /* The worker closed its stdout (or stderr) and lives on: nothing
         * more can come through this pipe, and what it kept was the
         * stream's last words. */
        deliver_kept(c, s, i);
        close_stream(c, s, i);
        return;
    }
    /* A callback of the delivery may have ended the stream (fd -1):
     * rewatch checks. */
    rewatch(c, s, i);
}

void pm__output_collect(pm_cluster *c)
{
    if (c->output.reader == NULL)
        return;
    pm__offjob *j;
    while ((j = pm__offread_next(c->output.reader)) != NULL) {
        pm__offread_result r;
        pm__offread_outcome(j, &r);
        unsigned idx = PM__TAG_SLOT(r.tag);
        int i = PM__TAG_KIND(r.tag) == PM__TAG_STDOUT ? 0 : 1;
        /* Only the read a stream has under way finishes here: a stream
         * that ended or was drained abandoned its read (the pool drops
         * it). */
        if (idx < c->nslots && c->slots[idx].out.s[i].job == j)
            collect_one(c, &c->slots[idx], i, j);
        else
            pm__offread_release(c->output.reader, j);
    }
}

/* ------------------------------------------------------------------ the drain's rules (pure) */

void pm__output_drain_begin(pm__drain *d, int reading, int closed, int held, int waits)
{
    d->left = PM__OUTPUT_DRAIN_BYTES;
    d->stale = reading;
    d->done = closed;
    d->err = 0;
    /* Held: a read would wait in the queue behind the slot's own, which
     * may never return; one already waiting there too. */
    if (!closed && held && (!reading || waits)) {
        d->err = -EBUSY;
        d->done = 1;
    }
}

int pm__output_drain_go(pm__drain *d, int reading, int ended, uint64_t now_ms, uint64_t deadline_ms)
{
    if (d->done || reading)
        return 0;
    if (ended || now_ms >= deadline_ms) {
        /* Ended; or out of time with no read under way: bounded like the
         * bytes, not held (no -ETIMEDOUT). */
        d->done = 1;
        return 0;
    }
    return 1;
}

void pm__output_drain_failed(pm__drain *d, int err)
{
    d->err = err;
    d->done = 1;
}

void pm__output_drain_took(pm__drain *d, int ended, size_t got)
{
    /* A fresh read that did not fill its buffer emptied the pipe: what its
     * writers wrote before the reap is all read. A stale one (started
     * before the reap) proves nothing about the writes after it. */
    if (ended || (got < PM__OFFREAD_BYTES && !d->stale)) {
        d->done = 1;
        return;
    }
    d->stale = 0;
    d->left = got < d->left ? d->left - got : 0;
    if (d->left == 0)
        d->done = 1;
}

int pm__output_drain_result(const pm__drain *d)
{
    return d->done ? d->err : -ETIMEDOUT; /* its job is abandoned by close_stream */
}

/* ------------------------------------------------------------------ the drain */

/* Starts stream i's next read of the drain, unless it waits for the read
 * under way or its drain ended. */
static void drain_next(pm_cluster *c, pm__slot *s, int i, pm__drain *d, uint64_t deadline)
{
    pm__outstream *st = &s->out.s[i];
    int reading = st->job != NULL;
    /* The pipe is polled only when a read could start: one poll a read,
     * none for a stream whose drain ended or whose read is under way
     * (the reap is on every restart's path). */
    int ended = !d->done && !reading && pm__output_ended_empty(st->fd);
    if (!pm__output_drain_go(d, reading, ended, pm__now_ms(), deadline))
        return;
    int rc = start_read(c, s, i);
    if (rc < 0)
        pm__output_drain_failed(d, rc);
}

/* Reads what is left of both streams after the reap, until one deadline:
 * the reads under way first (their bytes came first), then reads to EOF,
 * or to an empty pipe when a descendant still holds the write end (what it
 * writes later is not this incarnation's to report), never more than the
 * bound. The streams are read side by side, each read's result taken as
 * it comes: a stream whose pipe is held costs the other nothing but the
 * deadline. err[i]: pm__output_drain_result's. */
static void drain_streams(pm_cluster *c, pm__slot *s, int err[2])
{
    pm__drain d[2];
    err[0] = err[1] = 0;
    if (c->output.reader == NULL)
        return; /* output not captured: no pipe */
    uint64_t deadline = pm__now_ms() + PM__OUTPUT_DRAIN_WAIT_MS;
    int held = pm__offread_group_held(c->output.reader, s->index);
    for (int i = 0; i < 2; i++) {
        const pm__outstream *st = &s->out.s[i];
        pm__output_drain_begin(&d[i], st->job != NULL, st->fd < 0, held,
                               held && st->job != NULL &&
                                   pm__offread_job_waits(c->output.reader, st->job));
    }
    for (;;) {
        pm__offjob *jobs[2] = {NULL, NULL};
        for (int i = 0; i < 2; i++) {
            drain_next(c, s, i, &d[i], deadline);
            if (!d[i].done)
                jobs[i] = s->out.s[i].job;
        }
        if (jobs[0] == NULL && jobs[1] == NULL)
            break;
        int k = pm__offread_wait_any(c->output.reader, jobs, 2, deadline);
        if (k < 0)
            break;
        size_t got = 0;
        int ended = take_result(c, s, k, s->out.s[k].job, &got);
        pm__output_drain_took(&d[k], ended, got);
    }
    for (int i = 0; i < 2; i++)
        err[i] = pm__output_drain_result(&d[i]);
}

int pm__output_drain(pm_cluster *c, pm__slot *s, int err[2])
{
    int left = 0;
    drain_streams(c, s, err);
    for (int i = 0; i < 2; i++) {
        pm__outstream *st = &s->out.s[i];
        if (st->fd < 0)
            continue;
        if (err[i] < 0) {
            c->output.abandoned++;
            left++;
        }
        deliver_ctx d = {c, s, i + 1, pm__now_ms()};
        pm__output_flush(st, on_line, &d);
        deliver_kept(c, s, i);
        close_stream(c, s, i);
    }
    if (s->out.suppressed > 0) {
        /* The count of the lines dropped after the last delivered one, so
         * that no drop goes unreported. Not rate-limited: one per
         * incarnation. */
        uint64_t n = s->out.suppressed;
        s->out.suppressed = 0; /* reported once */
        deliver(c, s, PM_OUTPUT_NONE, "", 0, 0, n);
    }
    return left;
}

void pm__output_close(pm_cluster *c, pm__slot *s)
{
    for (int i = 0; i < 2; i++)
        if (s->out.s[i].fd >= 0)
            close_stream(c, s, i);
}

void pm__output_free(pm_cluster *c, pm__slot *s)
{
    /* Every path closes a slot's streams before the cluster is freed (the
     * drain after a reap, the release of an incarnation killed at the end,
     * a failed start's pm__output_close): whatever a future path left open
     * is closed the same way. */
    pm__output_close(c, s);
    pm__wipemem_free(s->out.mem, sizeof(*s->out.mem));
    s->out.mem = NULL;
}

int pm__output_held(pm_cluster *c, const pm__slot *s)
{
    return pm__offread_group_held(c->output.reader, s->index);
}

void pm__output_kick(pm_cluster *c)
{
    pm__offread_kick(c->output.reader);
}

void pm__output_fini(pm_cluster *c)
{
    pm__offread_free(c->output.reader);
    c->output.reader = NULL;
}
