# SPDX-License-Identifier: MIT
"""pmlink - the procmesh peer-link protocol, written from doc/protocol.md alone.

An independent implementation (Python 3, libsodium through ctypes) used by
tests/interop/run.py against a real procmesh: the preamble (section 3), the
Noise_XXpsk3_25519_ChaChaPoly_SHA256 / Noise_XX handshake as initiator and as
responder (sections 4 and 10), the hello payloads, the records (section 6)
and the frames on a link. Everything raises LinkError with a sentence naming
what was wrong; nothing is allocated from a length read off the wire before
that length is checked against its bound.
"""
import ctypes
import ctypes.util
import select
import socket
import struct
import time

VERSION = b"procmesh-link/1"
MAGIC = b"PMLINK"

# Records (section 6).
REC_FRAMES, REC_HEARTBEAT, REC_CLOSE, REC_REKEY = 1, 2, 3, 4
HB_PING, HB_PONG = 1, 2
MAX_RECORD = 262140
SEG_CT = 65535          # a full segment's ciphertext
SEG_PT = SEG_CT - 16    # a full segment's plaintext
MAX_FRAME = 65592

# Frames (procmesh's frame header, version 2, 56 bytes).
FRAME_VERSION = 2
FRAME_HDR = struct.Struct("<BBHIIIQQQqiHH")
assert FRAME_HDR.size == 56
FT_MSG, FT_REQUEST, FT_REPLY, FT_UNDELIVERABLE = 4, 5, 6, 7
FT_BCAST, FT_BRESULT, FT_BDONE = 9, 10, 11

REKEY_EVERY = 1 << 20
NONCE_LIMIT = (1 << 64) - (1 << 16)


class LinkError(Exception):
    """A protocol or transport failure, with the reason as its text."""


# ---------------------------------------------------------------- libsodium

def load_sodium():
    """libsodium's shared object, initialised, or None when it is not here."""
    names = [ctypes.util.find_library("sodium"), "libsodium.so.23", "libsodium.so"]
    for name in names:
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        if lib.sodium_init() < 0:
            return None
        return lib
    return None


_na = None


def sodium():
    global _na
    if _na is None:
        _na = load_sodium()
        if _na is None:
            raise LinkError("libsodium's shared object cannot be loaded")
    return _na


def randombytes(n):
    buf = ctypes.create_string_buffer(n)
    sodium().randombytes_buf(buf, ctypes.c_size_t(n))
    return buf.raw


def x25519_base(priv):
    out = ctypes.create_string_buffer(32)
    if sodium().crypto_scalarmult_curve25519_base(out, priv) != 0:
        raise LinkError("X25519 base multiplication failed")
    return out.raw


def x25519(priv, pub):
    out = ctypes.create_string_buffer(32)
    # libsodium itself refuses an all-zero result (a low-order point); the
    # doc (section 10) asks for the same.
    if sodium().crypto_scalarmult_curve25519(out, priv, pub) != 0 or out.raw == bytes(32):
        raise LinkError("DH with a low-order public key")
    return out.raw


def sha256(data):
    out = ctypes.create_string_buffer(32)
    sodium().crypto_hash_sha256(out, data, ctypes.c_ulonglong(len(data)))
    return out.raw


def hmac_sha256(key, data):
    # crypto_auth_hmacsha256_state is 208 bytes in libsodium; 512 is ample.
    st = ctypes.create_string_buffer(512)
    out = ctypes.create_string_buffer(32)
    na = sodium()
    na.crypto_auth_hmacsha256_init(st, key, ctypes.c_size_t(len(key)))
    na.crypto_auth_hmacsha256_update(st, data, ctypes.c_ulonglong(len(data)))
    na.crypto_auth_hmacsha256_final(st, out)
    return out.raw


def _nonce(n):
    return bytes(4) + struct.pack("<Q", n)


def aead_encrypt(k, n, ad, pt):
    out = ctypes.create_string_buffer(len(pt) + 16)
    outlen = ctypes.c_ulonglong(0)
    sodium().crypto_aead_chacha20poly1305_ietf_encrypt(
        out, ctypes.byref(outlen), pt, ctypes.c_ulonglong(len(pt)), ad,
        ctypes.c_ulonglong(len(ad)), None, _nonce(n), k)
    return out.raw[:outlen.value]


def aead_decrypt(k, n, ad, ct):
    if len(ct) < 16:
        raise LinkError("ciphertext shorter than its tag")
    out = ctypes.create_string_buffer(max(len(ct) - 16, 1))
    outlen = ctypes.c_ulonglong(0)
    rc = sodium().crypto_aead_chacha20poly1305_ietf_decrypt(
        out, ctypes.byref(outlen), None, ct, ctypes.c_ulonglong(len(ct)), ad,
        ctypes.c_ulonglong(len(ad)), _nonce(n), k)
    if rc != 0:
        raise LinkError("decryption failed (authentication tag)")
    return out.raw[:outlen.value]


# ---------------------------------------------------------------- keys

def key_id(secret):
    """Section 1: the first 8 bytes of HMAC-SHA256(secret, "procmesh psk id v1")."""
    return hmac_sha256(secret, b"procmesh psk id v1")[:8]


def read_secret(path):
    data = open(path, "rb").read()
    if len(data) == 32:
        return data
    text = data[:-1] if data.endswith(b"\n") else data
    if len(text) != 64:
        raise LinkError("%s: not 32 raw bytes nor 64 hex characters" % path)
    return bytes.fromhex(text.decode("ascii"))


def preamble(system, kid):
    """Section 3: magic, version, system name, key id."""
    if not 1 <= len(system) <= 63:
        raise LinkError("system name of %d bytes (1..63)" % len(system))
    return (MAGIC + bytes([len(VERSION)]) + VERSION + bytes([len(system)]) + system + kid)


# ---------------------------------------------------------------- Noise

class CipherState:
    def __init__(self, k=None):
        self.k = k
        self.n = 0

    def encrypt_ad(self, ad, pt):
        if self.k is None:
            return pt
        if self.n >= NONCE_LIMIT:
            raise LinkError("send nonce at the limit")
        ct = aead_encrypt(self.k, self.n, ad, pt)
        self.n += 1
        return ct

    def decrypt_ad(self, ad, ct):
        if self.k is None:
            return ct
        if self.n >= NONCE_LIMIT:
            raise LinkError("receive nonce at the limit")
        pt = aead_decrypt(self.k, self.n, ad, ct)
        self.n += 1
        return pt

    def rekey(self):
        # Noise rev 34 11.3: k = ENCRYPT(k, 2^64 - 1, "", 32 zero bytes)[:32].
        self.k = aead_encrypt(self.k, (1 << 64) - 1, b"", bytes(32))[:32]


class SymmetricState:
    def __init__(self, name):
        self.h = name.ljust(32, b"\0") if len(name) <= 32 else sha256(name)
        self.ck = self.h
        self.cs = CipherState()

    @staticmethod
    def hkdf(ck, ikm, n):
        temp = hmac_sha256(ck, ikm)
        o1 = hmac_sha256(temp, b"\x01")
        o2 = hmac_sha256(temp, o1 + b"\x02")
        if n == 2:
            return o1, o2
        return o1, o2, hmac_sha256(temp, o2 + b"\x03")

    def mix_hash(self, data):
        self.h = sha256(self.h + data)

    def mix_key(self, ikm):
        self.ck, k = self.hkdf(self.ck, ikm, 2)
        self.cs = CipherState(k)

    def mix_key_and_hash(self, ikm):
        self.ck, th, k = self.hkdf(self.ck, ikm, 3)
        self.mix_hash(th)
        self.cs = CipherState(k)

    def encrypt_and_hash(self, pt):
        ct = self.cs.encrypt_ad(self.h, pt)
        self.mix_hash(ct)
        return ct

    def decrypt_and_hash(self, ct):
        pt = self.cs.decrypt_ad(self.h, ct)
        self.mix_hash(ct)
        return pt

    def split(self):
        k1, k2 = self.hkdf(self.ck, b"", 2)
        return CipherState(k1), CipherState(k2)


class Handshake:
    """XXpsk3 (psk given) or XX (psk None), as initiator or responder."""

    def __init__(self, initiator, prologue, s_priv, psk, e_priv=None):
        name = (b"Noise_XXpsk3_25519_ChaChaPoly_SHA256" if psk is not None
                else b"Noise_XX_25519_ChaChaPoly_SHA256")
        self.ss = SymmetricState(name)
        self.ss.mix_hash(prologue)
        self.initiator = initiator
        self.psk = psk
        self.s = s_priv
        self.s_pub = x25519_base(s_priv)
        self.e = e_priv if e_priv is not None else randombytes(32)
        self.e_pub = x25519_base(self.e)
        self.re = None
        self.rs = None

    def _write_e(self):
        self.ss.mix_hash(self.e_pub)
        if self.psk is not None:    # rev 34 9.2: with a psk, e is mixed into the key
            self.ss.mix_key(self.e_pub)
        return self.e_pub

    def _read_e(self, msg, off):
        self.re = msg[off:off + 32]
        self.ss.mix_hash(self.re)
        if self.psk is not None:
            self.ss.mix_key(self.re)
        return off + 32

    def _read_s(self, msg, off):
        n = 48 if self.ss.cs.k is not None else 32
        self.rs = self.ss.decrypt_and_hash(msg[off:off + n])
        return off + n

    # -> e
    def write1(self, payload=b""):
        return self._write_e() + self.ss.encrypt_and_hash(payload)

    def read1(self, msg):
        off = self._read_e(msg, 0)
        return self.ss.decrypt_and_hash(msg[off:])

    # <- e, ee, s, es
    def write2(self, payload):
        out = self._write_e()
        self.ss.mix_key(x25519(self.e, self.re))              # ee
        out += self.ss.encrypt_and_hash(self.s_pub)            # s
        self.ss.mix_key(x25519(self.s, self.re))              # es (responder: DH(s, re))
        return out + self.ss.encrypt_and_hash(payload)

    def read2(self, msg):
        off = self._read_e(msg, 0)
        self.ss.mix_key(x25519(self.e, self.re))              # ee
        off = self._read_s(msg, off)                           # s
        self.ss.mix_key(x25519(self.e, self.rs))              # es (initiator: DH(e, rs))
        return self.ss.decrypt_and_hash(msg[off:])

    # -> s, se, psk
    def write3(self, payload):
        out = self.ss.encrypt_and_hash(self.s_pub)             # s
        self.ss.mix_key(x25519(self.s, self.re))              # se (initiator: DH(s, re))
        if self.psk is not None:
            self.ss.mix_key_and_hash(self.psk)                 # psk
        out += self.ss.encrypt_and_hash(payload)
        return out

    def read3(self, msg):
        off = self._read_s(msg, 0)                             # s
        self.ss.mix_key(x25519(self.e, self.rs))              # se (responder: DH(e, rs))
        if self.psk is not None:
            self.ss.mix_key_and_hash(self.psk)
        return self.ss.decrypt_and_hash(msg[off:])

    def split(self):
        c1, c2 = self.ss.split()
        return (c1, c2) if self.initiator else (c2, c1)


# ---------------------------------------------------------------- hello

def hello(host, incarnation, idle_ms, max_version=1, caps=0):
    return struct.pack("<BBIQIB", 1, max_version, caps, incarnation, idle_ms,
                       len(host)) + host


def parse_hello(b):
    if len(b) < 20:
        raise LinkError("hello of %d bytes (at least 20)" % len(b))
    fmt, maxv, caps, inc, idle, hl = struct.unpack_from("<BBIQIB", b)
    if fmt != 1:
        raise LinkError("hello format %d (1)" % fmt)
    if not 1 <= hl <= 63 or len(b) != 19 + hl:
        raise LinkError("hello of %d bytes with a host name of %d" % (len(b), hl))
    if inc == 0:
        raise LinkError("hello with incarnation 0")
    if not 100 <= idle <= 600000:
        raise LinkError("hello with idle_ms %d (100..600000)" % idle)
    return {"max_version": maxv, "caps": caps, "incarnation": inc,
            "idle_ms": idle, "host": b[19:]}


# ---------------------------------------------------------------- frames

def frame(ftype, dst, src, payload=b"", dst_inc=0, src_inc=0, request_id=0,
          deadline=0, error=0, flags=0, dst_host=0, src_host=0):
    return FRAME_HDR.pack(FRAME_VERSION, ftype, flags, len(payload), dst, src,
                          dst_inc, src_inc, request_id, deadline, error,
                          dst_host, src_host) + payload


def parse_frame(b):
    if len(b) < FRAME_HDR.size:
        raise LinkError("frame of %d bytes (header 56)" % len(b))
    f = dict(zip(("version", "type", "flags", "len", "dst", "src", "dst_inc",
                  "src_inc", "request_id", "deadline", "error", "dst_host",
                  "src_host"), FRAME_HDR.unpack_from(b)))
    if f["len"] != len(b) - FRAME_HDR.size:
        raise LinkError("frame length %d with %d payload bytes" % (f["len"], len(b) - 56))
    f["payload"] = b[FRAME_HDR.size:]
    return f


# ---------------------------------------------------------------- the link

class Link:
    """One TCP connection: preamble, handshake, then records both ways."""

    def __init__(self, sock, timeout=5.0):
        self.sock = sock
        self.timeout = timeout
        self.inbuf = b""
        self.tx = self.rx = None
        self.peer = None
        self.closed_by_peer = None    # the CLOSE reason received
        self.eof = False
        self.close_sent = False       # CLOSE is the last record we send
        self.last_send = time.monotonic()

    # -- bytes
    def send(self, data):
        self.sock.sendall(data)
        self.last_send = time.monotonic()

    def keepalive(self):
        """Section 7: a record at least every idle_ms / 3 of the peer's hello."""
        if self.peer is not None and not self.close_sent and \
                time.monotonic() - self.last_send >= self.peer["idle_ms"] / 3000.0:
            self.heartbeat()

    def recv_exact(self, n, deadline=None):
        """n bytes, or LinkError on end of stream or at the deadline."""
        end = deadline if deadline is not None else time.monotonic() + self.timeout
        while len(self.inbuf) < n:
            left = end - time.monotonic()
            if left <= 0:
                raise LinkError("timed out waiting for %d bytes (have %d)" % (n, len(self.inbuf)))
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                continue
            try:
                chunk = self.sock.recv(1 << 16)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                self.eof = True
                raise LinkError("end of stream after %d of %d bytes" % (len(self.inbuf), n))
            self.inbuf += chunk
        out, self.inbuf = self.inbuf[:n], self.inbuf[n:]
        return out

    def send_hs(self, msg):
        self.send(struct.pack("<I", len(msg)) + msg)

    def recv_hs(self, lo, hi):
        (n,) = struct.unpack("<I", self.recv_exact(4))
        if not lo <= n <= hi:
            raise LinkError("handshake message of %d bytes (%d..%d)" % (n, lo, hi))
        return self.recv_exact(n)

    # -- handshake
    def initiate(self, system, secret, s_priv, host, incarnation, idle_ms, psk_override=None,
                 first_heartbeat=True):
        """Section 2 as initiator; returns the responder's hello. Without
        first_heartbeat the caller sends the first record itself (section 2,
        step 6: any valid record brings the link up)."""
        kid = key_id(secret) if secret is not None else bytes(8)
        pre = preamble(system, kid)
        psk = psk_override if psk_override is not None else secret
        hs = Handshake(True, pre, s_priv, psk)
        self.send(pre)
        self.send_hs(hs.write1())
        # Message 2: 96 + P bytes for XX and XXpsk3 alike, P >= 20 (a hello).
        m2 = self.recv_hs(96 + 20, 512)
        self.peer = parse_hello(hs.read2(m2))
        self.peer_static = hs.rs
        self.send_hs(hs.write3(hello(host, incarnation, idle_ms)))
        self.tx, self.rx = hs.split()
        self.handshake_hash = hs.ss.h
        if first_heartbeat:
            self.heartbeat()   # step 5: the first record at once
        return self.peer

    def respond(self, systems, secrets, s_priv, host, incarnation, idle_ms):
        """Section 2 as responder; returns the initiator's hello."""
        magic = self.recv_exact(6)
        if magic != MAGIC:
            raise LinkError("preamble: bad magic %r" % magic)
        v = self.recv_exact(1)[0]
        if not 1 <= v <= 32:
            raise LinkError("preamble: version length %d (1..32)" % v)
        ver = self.recv_exact(v)
        n = self.recv_exact(1)[0]
        if not 1 <= n <= 63:
            raise LinkError("preamble: system name length %d (1..63)" % n)
        system = self.recv_exact(n)
        kid = self.recv_exact(8)
        if ver != VERSION:
            raise LinkError("preamble: version %r" % ver)
        if system not in systems:
            raise LinkError("preamble: system %r" % system)
        psk = None
        if kid != bytes(8):
            for s in secrets:
                if key_id(s) == kid:
                    psk = s
            if psk is None:
                raise LinkError("preamble: unknown key id %s" % kid.hex())
        elif secrets:
            raise LinkError("preamble: zero key id while holding a secret")
        pre = MAGIC + bytes([v]) + ver + bytes([n]) + system + kid
        hs = Handshake(False, pre, s_priv, psk)
        m1 = self.recv_hs(48 if psk is not None else 32, 48 if psk is not None else 32)
        if hs.read1(m1) != b"":
            raise LinkError("message 1 with a payload")
        self.send_hs(hs.write2(hello(host, incarnation, idle_ms)))
        m3 = self.recv_hs(64 + 20, 512)
        self.peer = parse_hello(hs.read3(m3))
        self.peer_static = hs.rs
        self.tx, self.rx = hs.split()
        self.heartbeat()
        return self.peer

    # -- records
    @staticmethod
    def _after_segment(cs):
        # Section 6, "Nonces and Rekey": after the segment with nonce n,
        # Rekey() when (n + 1) mod 2^20 == 0 (cs.n is already n + 1).
        if cs.n % REKEY_EVERY == 0:
            cs.rekey()

    def send_record(self, rtype, body=b""):
        if self.close_sent:
            raise LinkError("a record after our CLOSE (section 6: CLOSE is the last)")
        pt = bytes([rtype]) + body
        if not 1 <= len(pt) <= 262076:
            raise LinkError("record plaintext of %d bytes" % len(pt))
        parts = [pt[i:i + SEG_PT] for i in range(0, len(pt), SEG_PT)]
        length = sum(len(p) + 16 for p in parts)
        ad = struct.pack("<I", length)
        out = ad
        for p in parts:
            out += self.tx.encrypt_ad(ad, p)
            self._after_segment(self.tx)
        if rtype == REC_REKEY:
            self.tx.rekey()
        self.send(out)

    def send_raw_record(self, plaintext):
        """Seals plaintext (type byte and body) as one record, whatever it
        says: for the error cases of section 8."""
        self.send_record(plaintext[0], plaintext[1:])

    def heartbeat(self, kind=None, stamp=0):
        self.send_record(REC_HEARTBEAT, b"" if kind is None else struct.pack("<BQ", kind, stamp))

    def send_frames(self, frames):
        body = b"".join(struct.pack("<I", len(f)) + f for f in frames)
        self.send_record(REC_FRAMES, body)

    def close(self, reason=0):
        try:
            self.send_record(REC_CLOSE, struct.pack("<H", reason))
            self.close_sent = True
            self.sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError, OSError):
            # Answering the peer's CLOSE: procmesh closes at once after its
            # own (section 7), so the connection may be gone already.
            if self.closed_by_peer is None:
                raise
            self.close_sent = True

    def recv_record(self, deadline=None):
        """(type, body) of the next record; raises LinkError on any error."""
        if self.closed_by_peer is not None:
            # Section 6: a receiver reads nothing after a CLOSE; the caller
            # may only wait for the end of stream now.
            raise LinkError("record read after the peer's CLOSE")
        hdr = self.recv_exact(4, deadline)
        (length,) = struct.unpack("<I", hdr)
        if length > MAX_RECORD:
            raise LinkError("record length %d above %d" % (length, MAX_RECORD))
        nseg = (length + SEG_CT - 1) // SEG_CT
        last = length - (nseg - 1) * SEG_CT
        if nseg == 0 or last < 17:
            raise LinkError("record length %d has no valid segmentation" % length)
        ct = self.recv_exact(length, deadline)
        pt = b""
        for i in range(nseg):
            seg = ct[i * SEG_CT:(i + 1) * SEG_CT]
            pt += self.rx.decrypt_ad(hdr, seg)
            self._after_segment(self.rx)
        rtype, body = pt[0], pt[1:]
        if rtype == REC_FRAMES:
            frames, off = [], 0
            while off < len(body):
                if len(body) - off < 4:
                    raise LinkError("FRAMES: a tail of %d bytes" % (len(body) - off))
                (flen,) = struct.unpack_from("<I", body, off)
                if not 1 <= flen <= MAX_FRAME or off + 4 + flen > len(body):
                    raise LinkError("FRAMES: frame length %d" % flen)
                frames.append(body[off + 4:off + 4 + flen])
                off += 4 + flen
            if not frames:
                raise LinkError("FRAMES record without a frame")
            return rtype, frames
        if rtype == REC_HEARTBEAT:
            if len(body) == 0:
                return rtype, None
            if len(body) != 9 or body[0] not in (HB_PING, HB_PONG):
                raise LinkError("HEARTBEAT body %s" % body.hex())
            return rtype, struct.unpack("<BQ", body)
        if rtype == REC_CLOSE:
            if len(body) != 2:
                raise LinkError("CLOSE body of %d bytes" % len(body))
            self.closed_by_peer = struct.unpack("<H", body)[0]
            return rtype, self.closed_by_peer
        if rtype == REC_REKEY:
            if body:
                raise LinkError("REKEY with a body")
            self.rx.rekey()
            return rtype, None
        raise LinkError("record type %d" % rtype)

    def wait_eof(self, deadline):
        """After the peer's CLOSE: the end of stream, nothing else."""
        while True:
            try:
                extra = self.recv_exact(1, deadline)
            except LinkError:
                if self.eof:
                    return
                raise
            # Section 6: a receiver ignores what follows a CLOSE; a sender
            # sends nothing after its own, which is what is checked here.
            raise LinkError("byte %r after CLOSE" % extra)
