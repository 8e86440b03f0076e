/* SPDX-License-Identifier: MIT */
/* check_netns.c - three procmesh daemons, each in its own network namespace on a veth pair to a bridge: a link down, one-way loss and a partition of a from c (nftables), each healed; every request answered exactly once. */
#define _GNU_SOURCE
#include <check.h>

#include "helpers.h"
#include "proclog.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/*
 * The network: four network namespaces, none of them named. A switch (sw)
 * holds a bridge br0; hosts a, b and c each hold one end of a veth pair,
 * eth0 with 10.77.0.1, .2 and .3/24, whose other end is a port of br0. Each
 * namespace is made by a holder process (unshare(CLONE_NEWNET), then it
 * waits) forked with PR_SET_PDEATHSIG, and everything else enters it with
 * setns() through the holder's /proc/PID/ns/net: a namespace, its veth
 * ends, its bridge and its nftables rules exist exactly as long as the
 * processes in it, all of which die with the test however it ends (a
 * failed assertion, Check's timeout, a SIGKILLed run). No name is ever
 * made in the initial namespace or in /var/run/netns, so a killed run
 * leaves nothing that could break the next one.
 *
 * Each host runs `procmesh run` (system t, base port 10, one exec-mode
 * worker "pm-test-worker mesh ...", --peer-timeout 2000 ms) listening on
 * its eth0 address, port 7000; a dials b and c, b dials c. a's worker asks
 * c's worker every 100 ms (c answers after 500 ms, so a request is nearly
 * always in flight when a fault starts), b's worker asks a's worker every
 * 300 ms (a worker sends only after an idle period, so b must leave a's
 * worker idle gaps of 100 ms): the a<->c traffic is what the faults break,
 * the a<->b traffic must keep flowing through them. Each caller prints one
 * line per request and exactly one per outcome ("reply N ..." or "error N
 * RC"); each daemon logs them as event=output, and the test counts them.
 *
 * The faults: (a) c's eth0 set down: nothing reaches c or leaves it;
 * (b) a's packets to c lost: an nftables rule in c drops its input from
 * a (on the wire, as far as a can tell: a's stack sees no error), c's
 * packets to a still arrive; (c) a partitioned from c both ways by input
 * rules in both, while b reaches both. tc netem is not available on this
 * kernel; nftables does both the loss and the partition.
 */

enum { SW, HA, HB, HC, NNS };

static pid_t holder[NNS];
static int nsfd[NNS] = {-1, -1, -1, -1};
static const char *ns_name[NNS] = {"sw", "a", "b", "c"};

static char dir[64];
static char secret[96];
static char run_mark[256]; /* "PM_TEST_RUN=...", or empty outside the suite */

/* Joins the network namespace whose fd *arg is (proc_start's pre). */
static int join_netns(void *arg)
{
    return setns(*(const int *)arg, CLONE_NEWNET) == 0 ? 0 : -errno;
}

/* Runs "sh -c cmd" inside namespace ns (-1: a fresh one of its own, for
 * the probe); returns its exit status (-1: killed at the 10 s bound) with
 * what it wrote in out. */
static int sh_in(int ns, const char *cmd, char *out, size_t size)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    pid_t pid = pm_test_fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(p[1], STDOUT_FILENO);
        dup2(p[1], STDERR_FILENO);
        if (ns >= 0 ? setns(nsfd[ns], CLONE_NEWNET) != 0 : unshare(CLONE_NEWNET) != 0) {
            dprintf(STDERR_FILENO, "%s: %s\n", ns >= 0 ? "setns" : "unshare(CLONE_NEWNET)",
                    strerror(errno));
            _exit(125);
        }
        char *argv[] = {"sh", "-c", (char *)cmd, NULL};
        char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", run_mark[0] != '\0' ? run_mark : NULL, NULL};
        execve("/bin/sh", argv, envp);
        _exit(127);
    }
    close(p[1]);
    /* Read to EOF within the bound (a hung command must not hang the
     * probe, which runs outside Check's timeout), then reap or kill it. */
    size_t got = 0;
    uint64_t end = pm_test_ms() + 10000;
    struct pollfd pfd = {.fd = p[0], .events = POLLIN};
    while (got + 1 < size && pm_test_ms() < end && poll(&pfd, 1, 100) >= 0) {
        if (pfd.revents == 0)
            continue;
        ssize_t k = read(p[0], out + got, size - 1 - got);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    out[got] = '\0';
    close(p[0]);
    uint64_t now = pm_test_ms();
    return pm_test_reap(pid, now < end ? (int)(end - now) : 0);
}

/* sh_in that must succeed: a failure names the namespace, the command
 * and what it wrote. */
static void ns_sh(int ns, const char *fmt, ...)
{
    char cmd[512], out[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    ck_assert_int_lt(n, (int)sizeof(cmd));
    int st = sh_in(ns, cmd, out, sizeof(out));
    ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "in namespace %s: `%s` failed: %s",
                  ns_name[ns], cmd, out);
}

/* A namespace held by a process of its own. */
static void make_ns(int i)
{
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    holder[i] = pm_test_fork();
    ck_assert_int_ge(holder[i], 0);
    if (holder[i] == 0) {
        int e = unshare(CLONE_NEWNET) == 0 ? 0 : errno;
        if (write(p[1], &e, sizeof(e)) != (ssize_t)sizeof(e) || e != 0)
            _exit(125);
        close(p[1]);
        for (;;)
            pause(); /* until SIGKILL: by net_down() or with the test */
    }
    close(p[1]);
    int e = -1;
    ck_assert_int_eq(read(p[0], &e, sizeof(e)), (ssize_t)sizeof(e));
    close(p[0]);
    ck_assert_msg(e == 0, "unshare(CLONE_NEWNET) for %s: %s", ns_name[i], strerror(e));
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)holder[i]);
    nsfd[i] = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_msg(nsfd[i] >= 0, "open %s: %s", path, strerror(errno));
}

static const char *const addr[NNS] = {NULL, "10.77.0.1", "10.77.0.2", "10.77.0.3"};

/* The switch and three hosts on it. Each veth pair is made in sw with its
 * host end created straight into the host's namespace, so no interface
 * ever exists in the initial namespace. */
static void net_up(void)
{
    pm_test_run_env(run_mark, sizeof(run_mark));
    for (int i = 0; i < NNS; i++)
        make_ns(i);
    ns_sh(SW, "ip link set lo up && ip link add br0 type bridge && ip link set br0 up");
    for (int h = HA; h <= HC; h++) {
        ns_sh(SW, "ip link add p%s type veth peer name eth0 netns %d && ip link set p%s master br0 && "
                  "ip link set p%s up",
              ns_name[h], (int)holder[h], ns_name[h], ns_name[h]);
        ns_sh(h, "ip link set lo up && ip addr add %s/24 dev eth0 && ip link set eth0 up", addr[h]);
    }
}

/* ------------------------------------------------------- processes, logs */

static proc ha, hb, hc;
static proc *all[3] = {&ha, &hb, &hc};

/* Waits until the process has written needle n times (reading the other
 * processes' pipes meanwhile, so no daemon blocks on a full stderr). */
static void wait_log(proc *r, const char *needle, int n, int timeout_ms)
{
    proc_wait_among(r, all, ARRAY_LEN(all), needle, n, timeout_ms);
}

/* The secret's directory, if there is one. */
static void remove_dir(void)
{
    char was[sizeof(dir)];
    snprintf(was, sizeof(was), "%s", dir);
    if (proc_remove_dir(dir) != 0)
        fprintf(stderr, "check_netns: could not remove %s\n", was);
}

/* Everything a test made, in any state: the daemons (their workers die
 * with them), then the holders, which takes the namespaces with their
 * interfaces and rules; then the secret's directory if it is still there.
 * A failed assertion ends the test process at once (Check's fork mode
 * does not return to the test): the processes and namespaces go with
 * PR_SET_PDEATHSIG then, and start_three() has removed the directory as
 * soon as the daemons no longer need it. */
static void net_down(void)
{
    for (unsigned i = 0; i < ARRAY_LEN(all); i++)
        if (all[i]->log != NULL || all[i]->pid > 0)
            proc_free(all[i]);
    for (int i = 0; i < NNS; i++) {
        if (nsfd[i] >= 0)
            close(nsfd[i]);
        nsfd[i] = -1;
        if (holder[i] > 0) {
            kill(holder[i], SIGKILL);
            pm_test_reap(holder[i], 5000);
        }
        holder[i] = 0;
    }
    remove_dir();
}

/* The secret file every daemon of a test shares, in a fresh directory. */
static void make_secret(void)
{
    proc_make_secret(dir, sizeof(dir), secret, sizeof(secret), "netns");
}

/* The daemon of host h, dialling `peers` (NULL: none), whose worker runs
 * "mesh to ms delay". */
static proc start_host(int h, const char *peers, const char *to, const char *ms, const char *delay)
{
    char listen[32];
    snprintf(listen, sizeof(listen), "%s:7000", addr[h]);
    proc_mesh_host m = {.host = ns_name[h], .listen = listen, .peer_timeout = "2000", .secret = secret,
                        .peers = peers, .to = to, .ms = ms, .delay = delay};
    return proc_start_mesh_host(&m, join_netns, &nsfd[h]);
}

/* Waits until r's worker has had `more` further replies from host h. */
static void wait_more_replies(proc *r, const char *h, int more, int timeout_ms)
{
    proc_wait_more_replies(r, all, ARRAY_LEN(all), h, more, timeout_ms);
}


/* The network up, the three daemons started and linked (each pair once),
 * and both callers answered at least once. */
static void start_three(void)
{
    net_up();
    make_secret();
    hc = start_host(HC, NULL, "-", "0", "500");
    hb = start_host(HB, "10.77.0.3:7000", "t@a:10", "300", "0");
    ha = start_host(HA, "10.77.0.2:7000,10.77.0.3:7000", "t@c:10", "100", "0");
    proc_wait_linked3(all, all, ARRAY_LEN(all), 30000);
    /* Linked: every daemon has read the secret (they read it again only
     * on SIGHUP, which these tests never send), so the file goes now and a
     * failure from here on leaves nothing behind in /tmp. */
    remove_dir();
    wait_more_replies(&ha, "c", 1, 30000);
    wait_more_replies(&hb, "a", 1, 30000);
}

/* Waits for c's worker to take a request from a (it then holds it for
 * 500 ms): the fault that follows finds it in flight. */
static void wait_request_held(void)
{
    char needle[64];
    snprintf(needle, sizeof(needle), "text=\"got req %ld from ", last_of(hc.log, "text=\"got req ") + 1);
    wait_log(&hc, needle, 1, 20000);
}



/* The fault is on: a's request to c in flight is answered once, at the
 * link's end (-EHOSTUNREACH, not at its 20 s deadline), and b's requests
 * to a are still answered (a<->b does not cross the fault). */
static void while_partitioned(void)
{
    wait_log(&ha, "-113\"", 1, 20000);
    wait_more_replies(&hb, "a", 3, 20000);
}

/* A link goes down here only by silence: the links a fault crosses must,
 * and the others stay up as far as a loaded machine allows (a daemon
 * starved of CPU past the peer timeout is silent to its peers, and they
 * rightly drop it: seen with a load average above 200 on this 2-core
 * machine). So every peer_down of r for host must be by silence:
 * "timeout" where the silence was found, and at the other end "closed"
 * (the close record that end sent) or "truncated" (that close cut short
 * by a reset, as closing a socket with unread bytes does); never for any
 * other reason (a protocol failure). Returns how often it went down,
 * noted on stderr. */
static int only_by_silence(const proc *r, const char *who, const char *host)
{
    char needle[64];
    snprintf(needle, sizeof(needle), "event=peer_down host=%s ", host);
    int n = 0;
    for (const char *p = strstr(r->log, needle); p != NULL; p = strstr(p + 1, needle)) {
        const char *eol = strchr(p, '\n');
        const char *why = strstr(p, "reason=");
        int ok = why != NULL && (eol == NULL || why < eol) &&
                 (strncmp(why, "reason=timeout", 14) == 0 || strncmp(why, "reason=closed", 13) == 0 ||
                  strncmp(why, "reason=truncated", 16) == 0);
        ck_assert_msg(ok, "%s dropped %s, not by silence: %.200s", who, host, p);
        n++;
    }
    if (n > 0)
        fprintf(stderr, "check_netns: %s dropped %s %d time(s), by silence\n", who, host, n);
    return n;
}

/* After the heal: a relinks with c and a's worker hears from c again;
 * then the counts. a<->b went down only by silence (only_by_silence) and,
 * unless it did, b's requests to a never failed once they had begun to be
 * answered. */
static void after_heal(int c_links_b)
{
    wait_log(&ha, "event=peer_up host=c", 2, 30000);
    wait_log(&hc, "event=peer_up host=a", 2, 30000);
    if (c_links_b)
        wait_log(&hc, "event=peer_up host=b", 2, 30000);
    wait_more_replies(&ha, "c", 2, 30000);
    wait_more_replies(&hb, "a", 2, 30000);
    long sent_a = exactly_once(ha.log, "a");
    no_duplicates(hc.log, sent_a, "c");
    long sent_b = exactly_once(hb.log, "b");
    no_duplicates(ha.log, sent_b, "a");
    int drops = only_by_silence(&ha, "a", "b") + only_by_silence(&hb, "b", "a");
    const char *r = strstr(hb.log, " from t@a:10#");
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(drops > 0 || strstr(r, "text=\"error ") == NULL,
                  "b's request to a failed after the first reply %s", tail_of(hb.log));
}

START_TEST(test_link_down_and_up)
{
    /* c's only link goes down: a and b find c silent past the peer
     * timeout and drop it, c drops both; a's request in flight is
     * answered -EHOSTUNREACH once; link up: both relink with c. */
    start_three();
    wait_request_held();
    ns_sh(HC, "ip link set eth0 down");
    wait_log(&ha, "event=peer_down host=c", 1, 20000);
    wait_log(&hb, "event=peer_down host=c", 1, 20000);
    wait_log(&hc, "event=peer_down host=a", 1, 20000);
    wait_log(&hc, "event=peer_down host=b", 1, 20000);
    /* Nothing crossed the dead link: found by silence ("timeout"; on a
     * machine loaded enough to starve c past the timeout before the fault,
     * c's close may have come first: only_by_silence). */
    only_by_silence(&ha, "a", "c");
    only_by_silence(&hb, "b", "c");
    while_partitioned();
    ns_sh(HC, "ip link set eth0 up");
    wait_log(&hb, "event=peer_up host=c", 2, 30000);
    after_heal(1);
    net_down();
}
END_TEST

START_TEST(test_one_way_loss)
{
    /* a's packets to c are lost on the way (dropped at c's input), c's to
     * a arrive: c hears nothing past its timeout and drops the link, and
     * a sees it go (c's close or its own timeout); b keeps both links. */
    start_three();
    wait_request_held();
    ns_sh(HC, "nft 'add table inet pmt; add chain inet pmt in { type filter hook input priority 0; }; "
              "add rule inet pmt in ip saddr %s drop'",
          addr[HA]);
    wait_log(&hc, "event=peer_down host=a", 1, 20000);
    wait_log(&ha, "event=peer_down host=c", 1, 20000);
    while_partitioned();
    only_by_silence(&hc, "c", "b");
    only_by_silence(&hb, "b", "c");
    ns_sh(HC, "nft delete table inet pmt");
    after_heal(0);
    net_down();
}
END_TEST

START_TEST(test_partition_a_from_c)
{
    /* a and c lose each other both ways (each drops the other's packets at
     * its input), b still reaches both: a and c each find the other silent
     * and drop the link; a<->b and b<->c stay up; after the heal a and c
     * relink. */
    start_three();
    wait_request_held();
    ns_sh(HC, "nft 'add table inet pmt; add chain inet pmt in { type filter hook input priority 0; }; "
              "add rule inet pmt in ip saddr %s drop'",
          addr[HA]);
    ns_sh(HA, "nft 'add table inet pmt; add chain inet pmt in { type filter hook input priority 0; }; "
              "add rule inet pmt in ip saddr %s drop'",
          addr[HC]);
    wait_log(&ha, "event=peer_down host=c", 1, 20000);
    wait_log(&hc, "event=peer_down host=a", 1, 20000);
    only_by_silence(&ha, "a", "c");
    only_by_silence(&hc, "c", "a");
    while_partitioned();
    /* b's link to c is untouched too. */
    only_by_silence(&hc, "c", "b");
    only_by_silence(&hb, "b", "c");
    ns_sh(HA, "nft delete table inet pmt");
    ns_sh(HC, "nft delete table inet pmt");
    after_heal(0);
    net_down();
}
END_TEST

/* Exit 77 with the reason unless this process can make what the tests
 * need: root, ip and nft, a network namespace with a veth pair, a bridge
 * and an nftables table in it. */
static void probe(void)
{
    if (geteuid() != 0)
        pm_test_skip("check_netns needs root (network namespaces, veth pairs, nftables)");
    pm_test_run_env(run_mark, sizeof(run_mark));
    char out[2048];
    int st = sh_in(-1, "command -v ip >/dev/null || { echo 'ip (iproute2) not found'; exit 1; }; "
                       "command -v nft >/dev/null || { echo 'nft (nftables) not found'; exit 1; }; "
                       "ip link add pmv0 type veth peer name pmv1 && ip link add pmbr0 type bridge && "
                       "nft add table inet pmprobe",
                   out, sizeof(out));
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char why[2300];
        size_t n = strlen(out);
        while (n > 0 && out[n - 1] == '\n')
            out[--n] = '\0';
        snprintf(why, sizeof(why), "cannot make a network namespace with a veth pair, a bridge and "
                 "an nftables table: %s", out[0] != '\0' ? out : "(no output)");
        pm_test_skip(why);
    }
}

int main(void)
{
    probe();
    Suite *s = suite_create("netns");
    PM_ADD_TEST(s, test_link_down_and_up, 120);
    PM_ADD_TEST(s, test_one_way_loss, 120);
    PM_ADD_TEST(s, test_partition_a_from_c, 120);
    return pm_test_main(s);
}
