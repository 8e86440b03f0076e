/* SPDX-License-Identifier: MIT */
/* peerkeys.c - loading, validating and holding the peer links' secrets, static keys and pinned peer keys. */
#define _GNU_SOURCE
#include "peerkeys.h"
#include "secretmem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "os/dep_sodium.h"
#include "os/deps.h"

#define KEY PM__PEER_KEY_LEN
#define ID PM__PEER_KEY_ID_LEN

static int why_set(char *why, size_t size, int err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Fills why (if any) and returns err: every failure path names its cause. */
static int why_set(char *why, size_t size, int err, const char *fmt, ...)
{
    if (why != NULL && size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, size, fmt, ap);
        va_end(ap);
    }
    return err;
}

/* Loads libsodium on first use (os/deps.h: -ELIBACC when it cannot be),
 * then sodium_init (idempotent, thread-safe). */
static int sodium_ready(void)
{
    int rc = pm__dep_load(PM__DEP_SODIUM, NULL, 0);
    if (rc < 0)
        return rc;
    return sodium_init() < 0 ? -EIO : 0;
}

/* The words for a failure rc of sodium_ready. */
static const char *sodium_why(int rc)
{
    return rc == -ELIBACC ? pm__dep_error(PM__DEP_SODIUM) : "libsodium failed to initialise";
}

/* ------------------------------------------------------------ pure */

int pm__peer_key_parse(const void *buf, size_t len, unsigned char out[KEY], char *why, size_t whysize)
{
    const unsigned char *b = buf;
    unsigned char key[KEY];
    if (buf == NULL || out == NULL)
        return why_set(why, whysize, -EINVAL, "no key buffer");
    if (len == 0)
        return why_set(why, whysize, -EINVAL, "is empty: expected 32 raw bytes, or 64 hex characters");
    if (len == KEY) {
        memcpy(key, b, KEY);
    } else if (len == 2 * KEY || (len == 2 * KEY + 1 && b[2 * KEY] == '\n')) {
        size_t bin_len = 0;
        const char *end = NULL;
        /* Constant time in the digits: the hex is the key. */
        if (sodium_hex2bin(key, KEY, (const char *)b, 2 * KEY, NULL, &bin_len, &end) != 0 ||
            bin_len != KEY || end != (const char *)b + 2 * KEY) {
            sodium_memzero(key, sizeof(key));
            return why_set(why, whysize, -EINVAL,
                           "is 64 bytes but not 64 hex characters (0-9, a-f, A-F)");
        }
    } else {
        return why_set(why, whysize, -EINVAL,
                       "is %zu bytes: expected 32 raw bytes, or 64 hex characters and an optional newline",
                       len);
    }
    if (sodium_is_zero(key, KEY)) {
        sodium_memzero(key, sizeof(key));
        return why_set(why, whysize, -EINVAL, "is all zeros: not a secret (write one with procmesh keygen)");
    }
    memcpy(out, key, KEY);
    sodium_memzero(key, sizeof(key));
    return 0;
}

void pm__peer_key_id(const unsigned char key[KEY], unsigned char id[ID])
{
    /* A keyed hash: the id says which key, and nothing about it. HMAC-SHA256
     * because every language's standard library has it. */
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256_state st;
    (void)sodium_ready();
    crypto_auth_hmacsha256_init(&st, key, KEY);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)PM__PEER_KEY_ID_LABEL,
                                  sizeof(PM__PEER_KEY_ID_LABEL) - 1);
    crypto_auth_hmacsha256_final(&st, mac);
    memcpy(id, mac, ID);
    sodium_memzero(&st, sizeof(st));
    sodium_memzero(mac, sizeof(mac));
}

void pm__peer_key_b64(const unsigned char pub[KEY], char out[PM__PEER_KEY_B64_LEN + 1])
{
    sodium_bin2base64(out, PM__PEER_KEY_B64_LEN + 1, pub, KEY, sodium_base64_VARIANT_ORIGINAL);
}

int pm__peer_host_valid(const char *s, size_t n)
{
    if (s == NULL || n == 0 || n >= 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* ------------------------------------------------------------ key files */

int pm__peer_key_load(const char *path, int allow_insecure_mode, unsigned char out[KEY], char *why,
                      size_t whysize)
{
    unsigned char buf[2 * KEY + 2];
    size_t got = 0;
    int fd = -1, rc;
    if (path == NULL || path[0] == '\0' || out == NULL)
        return why_set(why, whysize, -EINVAL, "no file name");
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        rc = -errno;
        return why_set(why, whysize, rc, "cannot open '%s': %s", path, strerror(-rc));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = why_set(why, whysize, -errno, "cannot stat '%s': %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = why_set(why, whysize, -EINVAL, "'%s' is not a regular file", path);
        goto out;
    }
    /* Checked on the open file, so a rename in between cannot swap in a file
     * whose mode was not checked. Write access counts too: whoever can
     * replace the key knows it. */
    if ((st.st_mode & 077) != 0 && !allow_insecure_mode) {
        rc = why_set(why, whysize, -EPERM,
                     "'%s' is accessible by group or others (mode %04o): chmod 600 it, or allow it "
                     "with --allow-insecure-secret-mode",
                     path, (unsigned)(st.st_mode & 07777));
        goto out;
    }
    /* One byte more than the longest valid content, to tell "too long". */
    for (;;) {
        ssize_t k = read(fd, buf + got, sizeof(buf) - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            rc = why_set(why, whysize, -errno, "cannot read '%s': %s", path, strerror(errno));
            goto out;
        }
        if (k == 0 || (got += (size_t)k) == sizeof(buf))
            break;
    }
    char inner[160];
    rc = pm__peer_key_parse(buf, got, out, inner, sizeof(inner));
    if (rc < 0)
        why_set(why, whysize, rc, "'%s' %s", path, inner);
out:
    sodium_memzero(buf, sizeof(buf));
    if (fd >= 0) {
        int saved = errno;
        close(fd);
        errno = saved;
    }
    return rc;
}

int pm__peer_key_create(const char *path, unsigned char out[KEY], char *why, size_t whysize)
{
    unsigned char key[KEY];
    char hex[2 * KEY + 2];
    int fd = -1, rc = 0;
    if (path == NULL || path[0] == '\0')
        return why_set(why, whysize, -EINVAL, "no file name");
    if ((rc = sodium_ready()) < 0)
        return why_set(why, whysize, rc, "%s", sodium_why(rc));
    do
        randombytes_buf(key, KEY);
    while (sodium_is_zero(key, KEY));
    sodium_bin2hex(hex, sizeof(hex), key, KEY);
    hex[2 * KEY] = '\n';
    /* O_EXCL: a key file is never replaced by accident (its peers would be
     * locked out); O_NOFOLLOW: a planted symlink is not followed. */
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
    if (fd < 0) {
        rc = why_set(why, whysize, -errno, "cannot create '%s': %s", path, strerror(errno));
        goto out;
    }
    size_t done = 0;
    while (done < 2 * KEY + 1) {
        ssize_t k = write(fd, hex + done, 2 * KEY + 1 - done);
        if (k < 0 && errno == EINTR) /* a write interrupted before any byte */
            continue;
        if (k <= 0) {
            rc = why_set(why, whysize, k < 0 ? -errno : -EIO, "cannot write '%s': %s", path,
                         strerror(k < 0 ? errno : EIO));
            break;
        }
        done += (size_t)k;
    }
    if (rc == 0 && fsync(fd) != 0)
        rc = why_set(why, whysize, -errno, "cannot write '%s': %s", path, strerror(errno));
    if (rc < 0) {
        int saved = errno;
        unlink(path); /* no half-written key left behind */
        errno = saved;
        goto out;
    }
    if (out != NULL)
        memcpy(out, key, KEY);
out:
    sodium_memzero(key, sizeof(key));
    sodium_memzero(hex, sizeof(hex));
    if (fd >= 0) {
        int saved = errno;
        close(fd);
        errno = saved;
    }
    return rc;
}

/* ------------------------------------------------------------ keyring */

struct keyring_secret {
    unsigned char psk[PM__PEER_MAX_SECRETS][KEY];
    unsigned char static_priv[KEY];
};

struct pm__keyring {
    /* The process that allocated the secret block: since glibc 2.25
     * getpid() is not cached, so a child always sees its own pid. */
    pid_t owner;
    struct keyring_secret *sec;
    unsigned nsecrets;
    unsigned char id[PM__PEER_MAX_SECRETS][ID];
    bool has_static;
    unsigned char static_pub[KEY];
};

/* Keyrings made by this process and not freed (pm__keyring_live).
 * Atomic: clusters may run in threads of one process, each with its
 * own loop and keys. */
static unsigned long keyrings_live;

int pm__keyring_new(pm__keyring **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    int ready = sodium_ready();
    if (ready < 0)
        return ready;
    pm__keyring *kr = calloc(1, sizeof(*kr));
    if (kr == NULL)
        return -ENOMEM;
    kr->sec = pm__secretmem_alloc(sizeof(*kr->sec));
    if (kr->sec == NULL) {
        int rc = -errno;
        free(kr);
        return rc;
    }
    kr->owner = getpid();
    __atomic_add_fetch(&keyrings_live, 1, __ATOMIC_RELAXED);
    *out = kr;
    return 0;
}

/* A keyring used in a forked child has zeros (or nothing) where its keys
 * were: refuse it rather than hand out a zero key. */
static int owned(const pm__keyring *kr)
{
    return kr != NULL && kr->owner == getpid();
}

int pm__keyring_add_secret(pm__keyring *kr, const unsigned char key[KEY])
{
    if (key == NULL || kr == NULL)
        return -EINVAL;
    if (!owned(kr))
        return -EPERM;
    if (sodium_is_zero(key, KEY))
        return -EINVAL;
    for (unsigned i = 0; i < kr->nsecrets; i++)
        if (sodium_memcmp(kr->sec->psk[i], key, KEY) == 0)
            return -EEXIST;
    if (kr->nsecrets >= PM__PEER_MAX_SECRETS)
        return -ENOSPC;
    unsigned char id[ID];
    pm__peer_key_id(key, id);
    if (sodium_is_zero(id, ID))
        return -EINVAL; /* all-zero id means "no secret" on the wire */
    memcpy(kr->sec->psk[kr->nsecrets], key, KEY);
    memcpy(kr->id[kr->nsecrets], id, ID);
    kr->nsecrets++;
    return 0;
}

unsigned pm__keyring_nsecrets(const pm__keyring *kr)
{
    return kr != NULL ? kr->nsecrets : 0;
}

int pm__keyring_secret_id(const pm__keyring *kr, unsigned i, unsigned char id[ID])
{
    if (kr == NULL || id == NULL || i >= kr->nsecrets)
        return -EINVAL;
    memcpy(id, kr->id[i], ID);
    return 0;
}

const unsigned char *pm__keyring_secret(const pm__keyring *kr, unsigned i)
{
    if (!owned(kr) || i >= kr->nsecrets)
        return NULL;
    return kr->sec->psk[i];
}

int pm__keyring_find(const pm__keyring *kr, const unsigned char id[ID])
{
    if (kr == NULL || id == NULL)
        return -EINVAL;
    /* Ids are public (sent in the clear): a plain comparison is enough. */
    for (unsigned i = 0; i < kr->nsecrets; i++)
        if (memcmp(kr->id[i], id, ID) == 0)
            return (int)i;
    return -ENOKEY;
}

int pm__keyring_set_static(pm__keyring *kr, const unsigned char priv[KEY])
{
    if (kr == NULL || priv == NULL)
        return -EINVAL;
    if (!owned(kr))
        return -EPERM;
    unsigned char pub[KEY];
    /* X25519 clamps any 32 bytes into a scalar; only an all-zero public
     * result (impossible for a clamped scalar times the base) is refused. */
    if (crypto_scalarmult_curve25519_base(pub, priv) != 0)
        return -EINVAL;
    memcpy(kr->sec->static_priv, priv, KEY);
    memcpy(kr->static_pub, pub, KEY);
    kr->has_static = true;
    return 0;
}

int pm__keyring_random_static(pm__keyring *kr)
{
    if (kr == NULL)
        return -EINVAL;
    if (!owned(kr))
        return -EPERM;
    /* Generated in place: the private key never touches ordinary memory. */
    randombytes_buf(kr->sec->static_priv, KEY);
    if (crypto_scalarmult_curve25519_base(kr->static_pub, kr->sec->static_priv) != 0)
        return -EINVAL;
    kr->has_static = true;
    return 0;
}

const unsigned char *pm__keyring_static_priv(const pm__keyring *kr)
{
    if (!owned(kr) || !kr->has_static)
        return NULL;
    return kr->sec->static_priv;
}

int pm__keyring_static_pub(const pm__keyring *kr, unsigned char pub[KEY])
{
    if (kr == NULL || pub == NULL)
        return -EINVAL;
    if (!kr->has_static)
        return -ENOKEY;
    memcpy(pub, kr->static_pub, KEY);
    return 0;
}

pm__keyring *pm__keyring_dup(const pm__keyring *kr)
{
    pm__keyring *c = NULL;
    if (!owned(kr)) {
        errno = kr == NULL ? EINVAL : EPERM;
        return NULL;
    }
    int rc = pm__keyring_new(&c);
    if (rc < 0) {
        errno = -rc;
        return NULL;
    }
    struct keyring_secret *sec = c->sec;
    *c = *kr;
    c->sec = sec;
    c->owner = getpid();
    memcpy(c->sec, kr->sec, sizeof(*c->sec));
    return c;
}

void pm__keyring_free(pm__keyring *kr)
{
    if (kr == NULL)
        return;
    /* In a child the canary before the block is zeros (or unmapped) and
     * sodium_free would abort; the child leaks a mapping of zeros, which
     * ends with it or its exec. */
    if (owned(kr)) {
        sodium_memzero(kr->sec, sizeof(*kr->sec));
        pm__secretmem_free(kr->sec);
        __atomic_sub_fetch(&keyrings_live, 1, __ATOMIC_RELAXED);
    }
    sodium_memzero(kr, sizeof(*kr));
    free(kr);
}

unsigned long pm__keyring_live(void)
{
    return __atomic_load_n(&keyrings_live, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------ pinned keys */

static bool blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* One line [p, end): 0 and *pin, 1 for a line to skip, or -EINVAL. */
static int pin_line(const char *p, const char *end, pm__pin *pin, const char **what)
{
    while (p < end && blank(*p))
        p++;
    if (p == end || *p == '#')
        return 1;
    const char *host = p;
    while (p < end && !blank(*p))
        p++;
    size_t hlen = (size_t)(p - host);
    while (p < end && blank(*p))
        p++;
    const char *b64 = p;
    while (p < end && !blank(*p))
        p++;
    size_t blen = (size_t)(p - b64);
    while (p < end && blank(*p))
        p++;
    if (blen == 0 || p != end)
        return *what = "expected 'HOST BASE64-PUBLIC-KEY'", -EINVAL;
    if (!pm__peer_host_valid(host, hlen))
        return *what = "the host must be 1..63 characters of [A-Za-z0-9._-]", -EINVAL;
    size_t bin_len = 0;
    const char *b64_end = NULL;
    if (blen != PM__PEER_KEY_B64_LEN ||
        sodium_base642bin(pin->pub, KEY, b64, blen, NULL, &bin_len, &b64_end,
                          sodium_base64_VARIANT_ORIGINAL) != 0 ||
        bin_len != KEY || b64_end != b64 + blen)
        return *what = "the key must be 32 bytes in standard base64 (44 characters, as procmesh keygen "
                       "--public prints)",
               -EINVAL;
    memcpy(pin->host, host, hlen);
    pin->host[hlen] = '\0';
    return 0;
}

int pm__pins_parse(const char *text, size_t len, pm__pins *out, char *why, size_t whysize)
{
    if (out == NULL || (text == NULL && len > 0))
        return why_set(why, whysize, -EINVAL, "no text");
    int ready = sodium_ready();
    if (ready < 0)
        return why_set(why, whysize, ready, "%s", sodium_why(ready));
    /* The count of lines bounds the entries: one allocation from the size
     * of text the caller already holds, never from a number in the text. */
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    pm__pin *v = calloc(lines, sizeof(*v));
    if (v == NULL)
        return why_set(why, whysize, -ENOMEM, "out of memory");
    size_t n = 0, lineno = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl != NULL ? nl : end;
        lineno++;
        if (memchr(p, '\0', (size_t)(le - p)) != NULL) {
            free(v);
            return why_set(why, whysize, -EINVAL, "line %zu: a NUL byte", lineno);
        }
        const char *what = NULL;
        int rc = pin_line(p, le, &v[n], &what);
        if (rc < 0) {
            free(v);
            return why_set(why, whysize, rc, "line %zu: %s", lineno, what);
        }
        if (rc == 0)
            n++;
        p = nl != NULL ? nl + 1 : end;
    }
    out->v = v;
    out->n = n;
    return 0;
}

int pm__pins_load(const char *path, pm__pins *out, char *why, size_t whysize)
{
    int rc;
    char *buf = NULL;
    if (path == NULL || path[0] == '\0' || out == NULL)
        return why_set(why, whysize, -EINVAL, "no file name");
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return why_set(why, whysize, -errno, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = why_set(why, whysize, -EINVAL, "'%s' is not a regular file", path);
        goto out;
    }
    buf = malloc(PM__PEER_PINS_MAX_FILE + 1);
    if (buf == NULL) {
        rc = why_set(why, whysize, -ENOMEM, "out of memory");
        goto out;
    }
    size_t got = 0;
    for (;;) {
        ssize_t k = read(fd, buf + got, PM__PEER_PINS_MAX_FILE + 1 - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            rc = why_set(why, whysize, -errno, "cannot read '%s': %s", path, strerror(errno));
            goto out;
        }
        if (k == 0 || (got += (size_t)k) > PM__PEER_PINS_MAX_FILE)
            break;
    }
    if (got > PM__PEER_PINS_MAX_FILE) {
        rc = why_set(why, whysize, -EFBIG, "'%s' is larger than %zu bytes", path, PM__PEER_PINS_MAX_FILE);
        goto out;
    }
    char inner[200];
    rc = pm__pins_parse(buf, got, out, inner, sizeof(inner));
    if (rc < 0)
        why_set(why, whysize, rc, "'%s' %s", path, inner);
out:
    free(buf);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

int pm__pins_allow(const pm__pins *p, const char *host, const unsigned char pub[KEY])
{
    if (p == NULL || host == NULL || pub == NULL)
        return 0;
    int ok = 0;
    /* Host names are public; the keys are compared in constant time and
     * every key of the host is compared, so the time says nothing about
     * which one (or how much of one) matched. */
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->v[i].host, host) == 0)
            ok |= sodium_memcmp(p->v[i].pub, pub, KEY) == 0;
    return ok;
}

void pm__pins_free(pm__pins *p)
{
    if (p == NULL)
        return;
    free(p->v);
    p->v = NULL;
    p->n = 0;
}
