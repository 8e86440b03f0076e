# SPDX-License-Identifier: MIT
"""run - the independent peer (pmlink.py) against a real procmesh daemon.

Usage: run.py PROCMESH WORKER TMPDIR  (tests/interop.sh passes them).
Starts `procmesh run` with a secret, --peer-listen on a free loopback port and
one pm-test-worker in mesh mode, then, as host "py": dials it (initiator),
sends requests to its worker and to a port it does not have, answers its
PINGs and sends one, sends a REKEY and uses the new key, sends a BCAST
(BRESULT, BDONE), closes with CLOSE 0; dials again with the right key id
but another psk (handshake_decrypt), then stays silent (CLOSE 3), then
drops the connection (truncated); then a second daemon, which pins host py
to this peer's static key, dials it (responder). Every wait has a deadline
and a message naming what it waited for. Exit 0 pass, 1 fail, 77 without
libsodium's shared object.
"""
import base64
import ctypes
import errno
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pmlink as L  # noqa: E402

SYSTEM = b"procmesh"
PM_HOST = b"pm"
PY_HOST = b"py"
WORKER_PORT = 1        # the default base port 1 + slot 0
T_END = time.monotonic() + 50.0   # the whole test, bounded (an ASan build under load)


T_START = time.monotonic()


def say(msg):
    """A progress line with the seconds since the start (for a slow run's log)."""
    print("[%5.1fs] %s" % (time.monotonic() - T_START, msg), flush=True)


DAEMONS = []


def fail(msg):
    say("FAIL: " + msg)
    for d in DAEMONS:
        print("--- the last lines of %s:" % d.log_path)
        print("\n".join(d.text().splitlines()[-15:]), flush=True)
    raise SystemExit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def deadline(seconds):
    return min(time.monotonic() + seconds, T_END)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def die_with_parent():
    # PR_SET_PDEATHSIG (1): the daemon dies with this test, even killed.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


class Daemon:
    def __init__(self, exe, worker, tmp, name, extra):
        self.log_path = os.path.join(tmp, name + ".log")
        self.health = free_port()
        self.port = free_port()
        self.secret_path = os.path.join(tmp, "secret")
        argv = [exe, "run", "--workers", "1", "--hostname", PM_HOST.decode(),
                "--peer-listen", "127.0.0.1:%d" % self.port,
                "--secret-file", self.secret_path, "--peer-timeout", "3000",
                "--health", "127.0.0.1:%d" % self.health] + extra + [
                "--", worker, "mesh", "-"]
        self.terminated = False
        self.log = open(self.log_path, "wb")
        DAEMONS.append(self)
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        say("started: " + " ".join(argv))

    def text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def http(self, path):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.health, path),
                                        timeout=1) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""
        except OSError:
            return None, ""

    def metric(self, name, labels):
        """The value of one /metrics sample, 0 when absent."""
        _, body = self.http("/metrics")
        for line in body.splitlines():
            if line.startswith(name + "{" + labels + "}"):
                return float(line.split()[-1])
        return 0.0

    def failures(self, metric="procmesh_peer_failures_total"):
        _, body = self.http("/metrics")
        out = {}
        for m in re.finditer(r'^' + metric + r'\{reason="([a-z_]+)"\} (\S+)$',
                             body, re.M):
            out[m.group(1)] = float(m.group(2))
        return out

    def logged(self, pattern):
        return re.search(pattern, self.text()) is not None

    def wait_log(self, pattern, what, seconds=10):
        end = deadline(seconds)
        while time.monotonic() < end:
            if re.search(pattern, self.text()):
                return
            check(self.proc.poll() is None, "procmesh exited (%s) while waiting for %s"
                  % (self.proc.returncode, what))
            time.sleep(0.05)
        fail("timed out waiting for %s in the daemon's log:\n%s" % (what, self.text()[-3000:]))

    def terminate(self):
        """SIGTERM once: a second one would skip the drain (procmesh(1))."""
        if not self.terminated:
            self.terminated = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self):
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout=max(1.0, T_END + 1.5 - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def check_clean_exit(self):
        """After stop(): a drain ends with 0, and no sanitizer spoke."""
        check(self.proc.returncode == 0, "procmesh (%s) exited %s after SIGTERM"
              % (self.log_path, self.proc.returncode))
        bad = re.search(r"(AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|"
                        r"runtime error:).*", self.text())
        check(bad is None, "a sanitizer report in %s: %s" % (self.log_path, bad and bad.group(0)))


class Pump:
    """Reads records off a link with deadlines, answering PINGs on the way."""

    def __init__(self, link):
        self.link = link
        self.frames = []
        self.pings = 0
        self.pongs = []
        self.rekeys = 0

    def one(self, until):
        rtype, body = self.link.recv_record(until)
        if rtype == L.REC_HEARTBEAT and body is not None and body[0] == L.HB_PING:
            self.pings += 1
            # After our CLOSE nothing more is sent: a PING that crossed it
            # goes unanswered.
            if not self.link.close_sent:
                self.link.heartbeat(L.HB_PONG, body[1])
        elif rtype == L.REC_HEARTBEAT and body is not None:
            self.pongs.append(body[1])
        elif rtype == L.REC_FRAMES:
            self.frames.extend(L.parse_frame(f) for f in body)
        elif rtype == L.REC_REKEY:
            self.rekeys += 1
        return rtype, body

    def until(self, cond, what, seconds=8):
        """Pumps until cond() holds; fails naming what was awaited."""
        end = deadline(seconds)
        while not cond():
            if time.monotonic() >= end:
                fail("timed out waiting for " + what)
            self.link.keepalive()
            try:
                # Wait at most 200 ms for a record so cond() (which may read
                # the daemon's log) is polled as well.
                r, _, _ = select.select([self.link.sock], [], [], 0.2) \
                    if not self.link.inbuf else ([1], [], [])
                if r:
                    rtype, body = self.one(end)
                    if rtype == L.REC_CLOSE:
                        fail("procmesh sent CLOSE %d while waiting for %s" % (body, what))
            except L.LinkError as e:
                fail("link error while waiting for %s: %s" % (what, e))

    def take(self, pred):
        for i, f in enumerate(self.frames):
            if pred(f):
                return self.frames.pop(i)
        return None


def expect_frame(pump, pred, what):
    got = []
    pump.until(lambda: got.append(pump.take(pred)) or got[-1] is not None, what)
    return got[-1]


def dial(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def self_test():
    """pmlink against section 9's vectors and the cacophony XX and XXpsk3
    vectors, so that a failure against procmesh is not this side's Noise."""
    kid = L.key_id(bytes(range(1, 33)))
    check(kid.hex() == "c84e02fb1ac295b0", "key id vector: %s" % kid.hex())
    pre = L.preamble(b"procmesh", kid).hex()
    check(pre == "504d4c494e4b0f70726f636d6573682d6c696e6b2f310870726f636d657368c84e02fb1ac295b0",
          "preamble vector: %s" % pre)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                        "noise-25519-chachapoly-sha256.json")
    with open(path) as f:
        vectors = json.load(f)
    vectors = vectors["vectors"] if isinstance(vectors, dict) else vectors
    h = bytes.fromhex
    n = 0
    for v in vectors:
        name = v["protocol_name"]
        if name not in ("Noise_XX_25519_ChaChaPoly_SHA256", "Noise_XXpsk3_25519_ChaChaPoly_SHA256"):
            continue
        psk = h(v["init_psks"][0]) if v.get("init_psks") else None
        i = L.Handshake(True, h(v["init_prologue"]), h(v["init_static"]), psk, h(v["init_ephemeral"]))
        r = L.Handshake(False, h(v["resp_prologue"]), h(v["resp_static"]), psk, h(v["resp_ephemeral"]))
        m = v["messages"]
        steps = [(i.write1, r.read1), (r.write2, i.read2), (i.write3, r.read3)]
        for k, (write, read) in enumerate(steps):
            ct = write(h(m[k]["payload"]))
            check(ct == h(m[k]["ciphertext"]), "%s message %d differs from the vector" % (name, k + 1))
            check(read(ct) == h(m[k]["payload"]), "%s message %d payload" % (name, k + 1))
        check(i.ss.h == h(v["handshake_hash"]), "%s handshake hash" % name)
        itx, irx = i.split()
        rtx, rrx = r.split()
        for k, t in enumerate(m[3:]):
            # After the three handshake messages the responder sends first.
            tx, rx = (rtx, irx) if k % 2 == 0 else (itx, rrx)
            ct = tx.encrypt_ad(b"", h(t["payload"]))
            check(ct == h(t["ciphertext"]), "%s transport message %d" % (name, k))
            check(rx.decrypt_ad(b"", ct) == h(t["payload"]), "%s transport %d payload" % (name, k))
        n += 1
    check(n == 2, "%d XX / XXpsk3 vectors found in %s (2)" % (n, path))
    say("self test: key id, preamble and %d Noise vectors reproduced" % n)


def test_initiator(d, secret):
    s_priv = L.randombytes(32)
    inc = int.from_bytes(L.randombytes(8), "little") | 1
    link = L.Link(dial(d.port))
    try:
        peer = link.initiate(SYSTEM, secret, s_priv, PY_HOST, inc, 900)
    except L.LinkError as e:
        fail("handshake as initiator: %s\n%s" % (e, d.text()[-2000:]))
    check(peer["host"] == PM_HOST, "responder's hello names host %r, not %r" % (peer["host"], PM_HOST))
    check(peer["max_version"] == 1, "responder's max_version %d" % peer["max_version"])
    say("handshake done: responder %r incarnation %d idle_ms %d" %
          (peer["host"], peer["incarnation"], peer["idle_ms"]))
    pump = Pump(link)
    # Step 5-6: its first record is a HEARTBEAT; it counts the link up once it
    # has ours (sent by initiate()).
    pump.until(lambda: d.logged(r"event=peer_up host=py "), "peer_up host=py in the daemon's log")
    pump.until(lambda: d.metric("procmesh_peer_links_up", "") >= 1 or
               "procmesh_peer_links_up 1" in d.http("/metrics")[1], "procmesh_peer_links_up 1")

    # A request from this host's supervisor (src 0) to the worker, and its reply.
    rid = (1 << 40) + 7
    link.send_frames([L.frame(L.FT_REQUEST, WORKER_PORT, 0, b"hello from py",
                              src_inc=0, request_id=rid, deadline=8000)])
    r = expect_frame(pump, lambda f: f["request_id"] == rid, "the REPLY to request %d" % rid)
    check(r["type"] == L.FT_REPLY, "answer of type %d (REPLY 6), error %d" % (r["type"], r["error"]))
    check(r["version"] == 2 and r["flags"] == 0, "reply version %d flags %d" % (r["version"], r["flags"]))
    check(r["dst"] == 0 and r["src"] == WORKER_PORT, "reply dst %d src %d" % (r["dst"], r["src"]))
    check(r["dst_host"] == 0 and r["src_host"] == 0, "reply hosts %d/%d" % (r["dst_host"], r["src_host"]))
    check(r["src_inc"] != 0, "reply without the worker's incarnation")
    # pm-test-worker mesh answers with the address the request came from: the
    # source host is the one this link authenticated as.
    check(r["payload"] == b"procmesh@py:0", "reply payload %r (the stamped source "
          "procmesh@py:0)" % r["payload"])
    pump.until(lambda: d.logged(r"got hello from py from procmesh@py:0"),
               "the worker's line for the request in the daemon's log")
    say("request/reply: reply %r from port %d#%d" % (r["payload"], r["src"], r["src_inc"]))

    # A second request from a worker port of this host, with the worker's
    # incarnation as dst_inc: the source is stamped with port and incarnation.
    rid2 = rid + 1
    link.send_frames([L.frame(L.FT_REQUEST, WORKER_PORT, 9, b"second", dst_inc=r["src_inc"],
                              src_inc=42, request_id=rid2, deadline=8000)])
    r2 = expect_frame(pump, lambda f: f["request_id"] == rid2, "the REPLY to request %d" % rid2)
    check(r2["type"] == L.FT_REPLY and r2["dst"] == 9 and r2["dst_inc"] == 42,
          "second reply: type %d dst %d#%d" % (r2["type"], r2["dst"], r2["dst_inc"]))
    check(r2["payload"] == b"procmesh@py:9#42", "second reply payload %r" % r2["payload"])

    # Batching and segmentation: three requests in one FRAMES record whose
    # plaintext (one of them carries PM_MAX_PAYLOAD bytes) needs two segments.
    big = [L.frame(L.FT_REQUEST, WORKER_PORT, 0, b"b%d" % i + (b"x" * 65533 if i == 1 else b""),
                   request_id=rid + 10 + i, deadline=8000) for i in range(3)]
    check(sum(len(f) + 4 for f in big) + 1 > L.SEG_PT, "the batched record fits in one segment")
    link.send_frames(big)
    for i in range(3):
        b = expect_frame(pump, lambda f: f["request_id"] == rid + 10 + i,
                         "the reply to batched request %d" % i)
        check(b["type"] == L.FT_REPLY, "batched request %d: type %d error %d" % (i, b["type"], b["error"]))
    say("batching: 3 requests (%d bytes) in one two-segment record answered"
          % sum(len(f) for f in big))

    # A port it does not have: UNDELIVERABLE -ENOENT.
    rid3 = rid + 2
    link.send_frames([L.frame(L.FT_REQUEST, 99, 0, b"nobody", request_id=rid3, deadline=8000)])
    u = expect_frame(pump, lambda f: f["request_id"] == rid3, "the answer to a request for port 99")
    check(u["type"] == L.FT_UNDELIVERABLE and u["error"] == -errno.ENOENT,
          "request for port 99: type %d error %d (UNDELIVERABLE %d)" % (u["type"], u["error"], -errno.ENOENT))
    say("undeliverable: port 99 answered %d, src %d" % (u["error"], u["src"]))

    # Port 0, the daemon's supervisor, has no message callback: answered at
    # once with UNDELIVERABLE -ENOENT from port 0 (protocol.md 6).
    rid0 = rid + 100
    link.send_frames([L.frame(L.FT_REQUEST, 0, 0, b"supervisor?", request_id=rid0, deadline=8000)])
    u = expect_frame(pump, lambda f: f["request_id"] == rid0, "the answer to a request for port 0")
    check(u["type"] == L.FT_UNDELIVERABLE and u["error"] == -errno.ENOENT and u["src"] == 0,
          "request for port 0: type %d error %d src %d (UNDELIVERABLE %d from 0)"
          % (u["type"], u["error"], u["src"], -errno.ENOENT))
    say("undeliverable: port 0 answered %d" % u["error"])

    # Liveness: procmesh PINGs at least every idle_ms / 3 of our hello (900 ms).
    pump.until(lambda: pump.pings >= 2, "two PINGs from procmesh (answered with PONGs)")
    link.heartbeat(L.HB_PING, 0x1122334455667788)
    pump.until(lambda: 0x1122334455667788 in pump.pongs, "the PONG to our PING")
    say("heartbeats: %d PINGs answered, our PING echoed" % pump.pings)

    # REKEY: our sending key changes; a request after it must still be read.
    link.send_record(L.REC_REKEY)
    rid4 = rid + 3
    link.send_frames([L.frame(L.FT_REQUEST, WORKER_PORT, 0, b"after rekey", request_id=rid4,
                              deadline=8000)])
    r4 = expect_frame(pump, lambda f: f["request_id"] == rid4, "the reply to a request after our REKEY")
    check(r4["type"] == L.FT_REPLY, "request after REKEY: type %d error %d" % (r4["type"], r4["error"]))
    say("rekey: the request after our REKEY was answered (procmesh sent %d REKEY)" % pump.rekeys)

    # Mesh broadcast (section 6): one BCAST to its supervisor, one BRESULT
    # per ready worker (one here), then a BDONE with the count.
    bid = (1 << 32) + 5
    link.send_frames([L.frame(L.FT_BCAST, 0, 0, b"to all", request_id=bid, deadline=5000)])
    done = expect_frame(pump, lambda f: f["type"] == L.FT_BDONE and f["request_id"] == bid,
                        "the BDONE of our BCAST")
    res = pump.take(lambda f: f["type"] == L.FT_BRESULT and f["request_id"] == bid)
    check(done["payload"] == struct.pack("<I", 1) and done["dst"] == 0 and done["error"] == 0,
          "BDONE: payload %r dst %d error %d (count 1)" % (done["payload"], done["dst"], done["error"]))
    check(res is not None and res["src"] == WORKER_PORT and res["src_inc"] == r["src_inc"] and
          res["error"] == 0 and res["dst"] == 0 and res["payload"],
          "the BRESULT before the BDONE: %s" % res)
    say("mesh broadcast: BRESULT from port %d (%r), BDONE count 1" % (res["src"], res["payload"]))

    # Orderly end: CLOSE 0, then its CLOSE and the end of stream.
    link.close(0)
    end = deadline(6)
    while link.closed_by_peer is None:
        try:
            rtype, body = pump.one(end)
        except L.LinkError as e:
            fail("waiting for procmesh's CLOSE: %s" % e)
    check(link.closed_by_peer == 0, "procmesh's CLOSE reason %d (0)" % link.closed_by_peer)
    try:
        link.wait_eof(deadline(6))
    except L.LinkError as e:
        fail("after procmesh's CLOSE: %s" % e)
    link.sock.close()
    d.wait_log(r"event=peer_down host=py .*reason=closed", "peer_down host=py reason=closed")
    # Every ended connection is counted by reason (links_ended); an
    # orderly end is "closed" (the peer sent CLOSE), which is no failure.
    f = d.failures("procmesh_peer_links_ended_total")
    check(f.get("closed") == 1 and sum(f.values()) == 1,
          "connections ended by reason after one orderly session: %s (only closed 1)" % f)
    f = d.failures()
    check("closed" not in f and sum(f.values()) == 0,
          "failures after one orderly session: %s (none, closed not among them)" % f)
    say("close: CLOSE 0 both ways, end of stream; counted closed, no failure")


def test_wrong_psk(d, secret):
    """The right key id with another psk: message 3 fails at the responder."""
    before = d.failures().get("handshake_decrypt", 0)
    link = L.Link(dial(d.port))
    wrong = bytes(b ^ 0x5A for b in secret)
    try:
        link.initiate(SYSTEM, secret, L.randombytes(32), PY_HOST, 5, 900, psk_override=wrong)
        rtype, body = link.recv_record(deadline(6))
        fail("handshake with a wrong psk answered with record %d" % rtype)
    except L.LinkError as e:
        say("wrong psk: %s" % e)
    link.sock.close()
    end = deadline(6)
    while d.failures().get("handshake_decrypt", 0) < before + 1:
        check(time.monotonic() < end, "timed out waiting for handshake_decrypt counted: %s"
              % d.failures())
        time.sleep(0.05)
    say("wrong psk: counted handshake_decrypt")


def test_silence(d, secret):
    """A peer that answers nothing gets CLOSE 3 after procmesh's idle_ms (its
    --peer-timeout, 3000 in its hello); one that drops the TCP connection
    without CLOSE is truncation."""
    before = d.failures()
    link = L.Link(dial(d.port))
    try:
        peer = link.initiate(SYSTEM, secret, L.randombytes(32), PY_HOST, 6, 900)
    except L.LinkError as e:
        fail("handshake (silent peer): %s" % e)
    pings = 0
    end = deadline(peer["idle_ms"] / 1000.0 + 4)
    try:
        while link.closed_by_peer is None:
            rtype, body = link.recv_record(end)
            if rtype == L.REC_HEARTBEAT and body is not None:
                pings += 1     # never answered: the point
        link.wait_eof(deadline(4))
    except L.LinkError as e:
        fail("silent peer: %s" % e)
    check(link.closed_by_peer == 3, "silent peer closed with CLOSE %d (3, timeout)" % link.closed_by_peer)
    link.sock.close()
    link = L.Link(dial(d.port))
    try:
        link.initiate(SYSTEM, secret, L.randombytes(32), PY_HOST, 7, 900)
        link.recv_record(deadline(4))
    except L.LinkError as e:
        fail("handshake (truncating peer): %s" % e)
    link.sock.close()
    end = deadline(6)
    while True:
        f = d.failures()
        if (f.get("timeout", 0) >= before.get("timeout", 0) + 1 and
                f.get("truncated", 0) >= before.get("truncated", 0) + 1):
            break
        check(time.monotonic() < end, "timed out waiting for timeout and truncated counted: %s" % f)
        time.sleep(0.05)
    say("silence: CLOSE 3 after %d unanswered PINGs, counted timeout; "
          "an end without CLOSE counted truncated" % pings)


def read_until_close(link, seconds):
    """Records until the peer's CLOSE (its reason) or the end of the stream
    (None); PINGs are not answered: the link is being refused."""
    end = deadline(seconds)
    try:
        while link.closed_by_peer is None:
            link.recv_record(end)
    except L.LinkError as e:
        if not link.eof:
            fail("waiting for procmesh's CLOSE: %s" % e)
        return None
    return link.closed_by_peer


def test_close_one(d, secret):
    """Section 8: a record procmesh refuses after the handshake gets CLOSE 1
    (protocol error), then the end of the stream: an unknown type, a
    HEARTBEAT of one byte, a frame of length 0, a length above 262140. A
    segment that fails to authenticate gets none (the keys are wiped)."""
    before = d.failures().get("record", 0)
    cases = [("unknown type", lambda k: k.send_raw_record(bytes([9]))),
             ("1-byte HEARTBEAT", lambda k: k.send_raw_record(bytes([L.REC_HEARTBEAT, 1]))),
             ("zero-length frame", lambda k: k.send_raw_record(bytes([L.REC_FRAMES, 0, 0, 0, 0]))),
             ("length above 262140", lambda k: k.send(struct.pack("<I", 262141)))]
    for i, (what, attack) in enumerate(cases):
        link = L.Link(dial(d.port))
        try:
            link.initiate(SYSTEM, secret, L.randombytes(32), PY_HOST, 20 + i, 900)
        except L.LinkError as e:
            fail("handshake (%s): %s" % (what, e))
        attack(link)
        reason = read_until_close(link, 6)
        check(reason == 1, "after a %s: procmesh's CLOSE %s (1, protocol error)" % (what, reason))
        try:
            link.wait_eof(deadline(6))
        except L.LinkError as e:
            fail("after the CLOSE 1 for a %s: %s" % (what, e))
        link.sock.close()
    link = L.Link(dial(d.port))
    try:
        link.initiate(SYSTEM, secret, L.randombytes(32), PY_HOST, 30, 900)
    except L.LinkError as e:
        fail("handshake (bit flip): %s" % e)
    pt = bytes([L.REC_HEARTBEAT])
    ad = struct.pack("<I", len(pt) + 16)
    ct = bytearray(link.tx.encrypt_ad(ad, pt))
    ct[-1] ^= 0x01
    link.send(ad + bytes(ct))
    check(read_until_close(link, 6) is None, "a bit-flipped record answered with a CLOSE")
    link.sock.close()
    end = deadline(6)
    while d.failures().get("record", 0) < before + 5:
        check(time.monotonic() < end, "timed out waiting for 5 record failures: %s" % d.failures())
        time.sleep(0.05)
    say("close 1: unknown type, 1-byte HEARTBEAT, zero frame, oversized length each got CLOSE 1; "
        "a bit-flipped record only the end of stream; counted record")


def test_first_record_frames(d, secret):
    """Section 2, step 6: a first record of frames (no HEARTBEAT before it)
    brings the link up and its frames are delivered: the request is answered."""
    link = L.Link(dial(d.port))
    try:
        link.initiate(SYSTEM, secret, L.randombytes(32), PY_HOST, 40, 900, first_heartbeat=False)
    except L.LinkError as e:
        fail("handshake (first record of frames): %s" % e)
    rid = (1 << 40) + 123
    link.send_frames([L.frame(L.FT_REQUEST, WORKER_PORT, 0, b"first", request_id=rid, deadline=8000)])
    pump = Pump(link)
    r = expect_frame(pump, lambda f: f["request_id"] == rid, "the REPLY to the first record's request")
    check(r["type"] == L.FT_REPLY and r["payload"] == b"procmesh@py:0",
          "first record's request: type %d error %d payload %r" % (r["type"], r["error"], r["payload"]))
    link.close(0)
    end = deadline(6)
    while link.closed_by_peer is None:
        try:
            pump.one(end)
        except L.LinkError as e:
            fail("waiting for procmesh's CLOSE after the first-record case: %s" % e)
    link.sock.close()
    say("first record: a FRAMES record before any HEARTBEAT brought the link up, its request answered")


def test_responder(exe, worker, tmp, secret):
    """A second daemon dials this peer: the responder side."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    port = lsock.getsockname()[1]
    # It pins host py to this peer's static key (section 1, "Pinned peer
    # keys"): the key sent in message 2 must be the one it checks.
    s_priv = L.randombytes(32)
    pins = os.path.join(tmp, "peer-keys")
    with open(pins, "w") as f:
        f.write("# host py: the Python peer\npy %s\n" % base64.b64encode(L.x25519_base(s_priv)).decode())
    d = Daemon(exe, worker, tmp, "procmesh-dial", ["--peers", "127.0.0.1:%d" % port,
                                                    "--peer-keys", pins])
    try:
        r, _, _ = select.select([lsock], [], [], max(0.1, deadline(10) - time.monotonic()))
        check(r, "timed out waiting for procmesh to dial")
        conn, _ = lsock.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = L.Link(conn)
        try:
            peer = link.respond([SYSTEM], [secret], s_priv, PY_HOST, 77, 900)
        except L.LinkError as e:
            fail("handshake as responder: %s\n%s" % (e, d.text()[-2000:]))
        check(peer["host"] == PM_HOST, "initiator's hello names %r" % peer["host"])
        pump = Pump(link)
        pump.until(lambda: d.logged(r"event=peer_up host=py "),
                   "peer_up host=py in the log of the dialling daemon")
        # Its worker may still be starting (procmesh dials at once).
        pump.until(lambda: d.http("/readyz")[0] == 200, "/readyz 200 of the dialling daemon",
                   seconds=15)
        rid = (1 << 40) + 99
        link.send_frames([L.frame(L.FT_REQUEST, WORKER_PORT, 0, b"via responder",
                                  request_id=rid, deadline=8000)])
        r = expect_frame(pump, lambda f: f["request_id"] == rid, "the reply on the dialled link")
        check(r["type"] == L.FT_REPLY and r["payload"] == b"procmesh@py:0",
              "reply on the dialled link: type %d error %d payload %r"
              % (r["type"], r["error"], r["payload"]))
        # This time procmesh ends the link: stopped, it sends CLOSE 0 and
        # closes at once (section 7); our answering CLOSE may find it gone.
        d.terminate()
        end = deadline(8)
        while link.closed_by_peer is None:
            try:
                pump.one(end)
            except L.LinkError as e:
                fail("waiting for the CLOSE of a stopping procmesh: %s" % e)
        check(link.closed_by_peer == 0, "a stopping procmesh sent CLOSE %d (0)" % link.closed_by_peer)
        link.close(0)
        try:
            link.wait_eof(deadline(6))
        except L.LinkError as e:
            fail("after the CLOSE of a stopping procmesh: %s" % e)
        link.sock.close()
        say("responder: handshake, request/reply with procmesh dialling; "
            "stopped, it sent CLOSE 0 and ended the stream")
    finally:
        lsock.close()
        d.stop()
    d.check_clean_exit()


def main():
    if len(sys.argv) != 4:
        print("usage: run.py PROCMESH WORKER TMPDIR", file=sys.stderr)
        return 2
    exe, worker, tmp = sys.argv[1:]
    if L.load_sodium() is None:
        print("SKIP: python3 cannot load libsodium's shared object (libsodium.so.23)")
        return 77
    secret = L.randombytes(32)
    path = os.path.join(tmp, "secret")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, secret.hex().encode() + b"\n")
    os.close(fd)
    self_test()
    d = Daemon(exe, worker, tmp, "procmesh", [])
    try:
        end = deadline(10)
        while d.http("/readyz")[0] != 200:
            check(d.proc.poll() is None, "procmesh exited %s:\n%s" % (d.proc.returncode, d.text()))
            check(time.monotonic() < end, "timed out waiting for /readyz 200 (the worker ready)")
            time.sleep(0.05)
        test_initiator(d, secret)
        test_wrong_psk(d, secret)
        test_silence(d, secret)
        test_close_one(d, secret)
        test_first_record_frames(d, secret)
    finally:
        d.stop()
    d.check_clean_exit()
    test_responder(exe, worker, tmp, secret)
    say("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
