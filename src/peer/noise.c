/* SPDX-License-Identifier: MIT */
/* noise.c - Noise (rev 34) handshake and transport states from libsodium primitives, byte-exact against the published vectors. */
#include "base/internal.h"
#include "base/le.h"
#include "noise.h"
#include "noise_state.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "os/dep_sodium.h"

#define KEY PM__NOISE_KEY_LEN
#define TAG PM__NOISE_TAG_LEN

/*
 * Layout of the code follows the spec: the pattern table and name parser,
 * the CipherState and SymmetricState operations on a handshake state, the
 * token machinery (WriteMessage / ReadMessage) and Split(); the primitives
 * (DH, cipher, hash, HKDF), the secret memory and the transport's
 * CipherStates are in cipher.c, GENERATE_KEYPAIR() for e tokens in
 * noise_ephemeral.c.
 *
 * Memory. Every secret (ck, k, the static and ephemeral private keys, the
 * psks, the transport keys) lives in a block from pm__noise_secret_alloc() (cipher.c): libsodium's
 * guarded, mlock'ed, never-dumped memory, marked so a forked child sees it
 * zeroed or not at all. The handle around it (the pattern, h, the public
 * keys, counters) is ordinary memory on purpose: a child must still be able
 * to read the generation the handle was made in, to refuse it (-EPERM) and
 * to free it without touching the secret block. Secrets on the stack (a DH
 * output, HKDF temporaries) are wiped before the function returns.
 */

#define MAX_NAME 255 /* Noise protocol names fit in 255 bytes */

/* ------------------------------------------------------------ patterns */

enum { TOK_E = 1, TOK_S, TOK_EE, TOK_ES, TOK_SE, TOK_SS, TOK_PSK };

/*
 * The handshake patterns of rev 34 sections 7.4 (one-way), 7.5
 * (fundamental) and 7.6 (deferred), written as in the spec. Messages
 * alternate, the initiator's first; a pre-message is "" or "s" (the
 * fallback patterns' "e" pre-message is not supported).
 */
static const struct pattern {
    const char *name;
    const char *pre_i, *pre_r;
    const char *msg[PM__NOISE_MAX_MSGS];
} patterns[] = {
    { "N", "", "s", { "e, es" } },
    { "K", "s", "s", { "e, es, ss" } },
    { "X", "", "s", { "e, es, s, ss" } },
    { "NN", "", "", { "e", "e, ee" } },
    { "NK", "", "s", { "e, es", "e, ee" } },
    { "NX", "", "", { "e", "e, ee, s, es" } },
    { "KN", "s", "", { "e", "e, ee, se" } },
    { "KK", "s", "s", { "e, es, ss", "e, ee, se" } },
    { "KX", "s", "", { "e", "e, ee, se, s, es" } },
    { "XN", "", "", { "e", "e, ee", "s, se" } },
    { "XK", "", "s", { "e, es", "e, ee", "s, se" } },
    { "XX", "", "", { "e", "e, ee, s, es", "s, se" } },
    { "IN", "", "", { "e, s", "e, ee, se" } },
    { "IK", "", "s", { "e, es, s, ss", "e, ee, se" } },
    { "IX", "", "", { "e, s", "e, ee, se, s, es" } },
    { "NK1", "", "s", { "e", "e, ee, es" } },
    { "NX1", "", "", { "e", "e, ee, s", "es" } },
    { "X1N", "", "", { "e", "e, ee", "s", "se" } },
    { "X1K", "", "s", { "e, es", "e, ee", "s", "se" } },
    { "XK1", "", "s", { "e", "e, ee, es", "s, se" } },
    { "X1K1", "", "s", { "e", "e, ee, es", "s", "se" } },
    { "X1X", "", "", { "e", "e, ee, s, es", "s", "se" } },
    { "XX1", "", "", { "e", "e, ee, s", "es, s, se" } },
    { "X1X1", "", "", { "e", "e, ee, s", "es, s", "se" } },
    { "K1N", "s", "", { "e", "e, ee", "se" } },
    { "K1K", "s", "s", { "e, es", "e, ee", "se" } },
    { "KK1", "s", "s", { "e", "e, ee, se, es" } },
    { "K1K1", "s", "s", { "e", "e, ee, es", "se" } },
    { "K1X", "s", "", { "e", "e, ee, s, es", "se" } },
    { "KX1", "s", "", { "e", "e, ee, se, s", "es" } },
    { "K1X1", "s", "", { "e", "e, ee, s", "se, es" } },
    { "I1N", "", "", { "e, s", "e, ee", "se" } },
    { "I1K", "", "s", { "e, es, s", "e, ee", "se" } },
    { "IK1", "", "s", { "e, s", "e, ee, se, es" } },
    { "I1K1", "", "s", { "e, s", "e, ee, es", "se" } },
    { "I1X", "", "", { "e, s", "e, ee, s, es", "se" } },
    { "IX1", "", "", { "e, s", "e, ee, se, s", "es" } },
    { "I1X1", "", "", { "e, s", "e, ee, s", "se, es" } },
};

static const char suite[] = "25519_ChaChaPoly_SHA256";

/* Splits "e, ee, s" into tokens. The table is ours: a bad entry is a bug,
 * which the vector test of every pattern would show. */
static int parse_tokens(const char *text, uint8_t *tok, uint8_t *ntok)
{
    static const struct {
        const char *name;
        uint8_t tok;
    } names[] = { { "e", TOK_E }, { "s", TOK_S }, { "ee", TOK_EE }, { "es", TOK_ES }, { "se", TOK_SE }, { "ss", TOK_SS } };
    const char *p = text;
    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        size_t i;
        for (i = 0; i < PM__ARRAY_SIZE(names); i++)
            if (strlen(names[i].name) == len && memcmp(names[i].name, p, len) == 0)
                break;
        if (i == PM__ARRAY_SIZE(names) || *ntok >= PM__NOISE_MAX_TOKENS)
            return -EINVAL;
        tok[(*ntok)++] = names[i].tok;
        p += len;
        while (*p == ',' || *p == ' ')
            p++;
    }
    return 0;
}

/* Inserts a psk token: psk0 at the start of the first message, pskN at the
 * end of the N-th (rev 34 9.2). */
static int add_psk(pm__noise_hs *hs, unsigned pos)
{
    unsigned m = pos == 0 ? 0 : pos - 1;
    if (hs->ntok[m] >= PM__NOISE_MAX_TOKENS)
        return -EPROTONOSUPPORT;
    if (pos == 0) {
        memmove(hs->tok[m] + 1, hs->tok[m], hs->ntok[m]);
        hs->tok[m][0] = TOK_PSK;
    } else {
        hs->tok[m][hs->ntok[m]] = TOK_PSK;
    }
    hs->ntok[m]++;
    return 0;
}

/* "psk3" -> 3; -1 for anything else (no sign, no leading zero, 0..99). */
static int psk_number(const char *p, size_t len)
{
    if (len < 4 || len > 5 || memcmp(p, "psk", 3) != 0)
        return -1;
    int v = 0;
    for (size_t i = 3; i < len; i++) {
        if (p[i] < '0' || p[i] > '9' || (i == 3 && p[i] == '0' && len > 4))
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

/* Parses the protocol name into hs's pattern. */
static int parse_name(pm__noise_hs *hs, const char *name, const char **why)
{
    size_t len = strnlen(name, MAX_NAME + 1);
    if (len > MAX_NAME)
        return *why = "protocol name longer than 255 bytes", -EPROTONOSUPPORT;
    if (strncmp(name, "Noise_", 6) != 0)
        return *why = "protocol name does not start with \"Noise_\"", -EPROTONOSUPPORT;
    const char *pat = name + 6;
    const char *end = strchr(pat, '_');
    if (end == NULL)
        return *why = "protocol name has no \"_25519_ChaChaPoly_SHA256\" after the pattern", -EPROTONOSUPPORT;
    if (strcmp(end + 1, suite) != 0)
        return *why = "unsupported DH, cipher or hash: only 25519_ChaChaPoly_SHA256", -EPROTONOSUPPORT;
    size_t base = 0;
    while (pat + base < end && ((pat[base] >= 'A' && pat[base] <= 'Z') || (pat[base] >= '0' && pat[base] <= '9')))
        base++;
    const struct pattern *p = NULL;
    for (size_t i = 0; i < PM__ARRAY_SIZE(patterns); i++)
        if (strlen(patterns[i].name) == base && memcmp(patterns[i].name, pat, base) == 0)
            p = &patterns[i];
    if (p == NULL)
        return *why = "unknown handshake pattern", -EPROTONOSUPPORT;

    hs->pre_s[0] = p->pre_i[0] != '\0';
    hs->pre_s[1] = p->pre_r[0] != '\0';
    for (hs->nmsg = 0; hs->nmsg < PM__NOISE_MAX_MSGS && p->msg[hs->nmsg] != NULL; hs->nmsg++)
        if (parse_tokens(p->msg[hs->nmsg], hs->tok[hs->nmsg], &hs->ntok[hs->nmsg]) != 0)
            return *why = "internal pattern table entry is malformed", -EINVAL;

    /* Modifiers: pskN joined by '+', ascending, each within the pattern. */
    const char *m = pat + base;
    int last = -1;
    while (m < end) {
        size_t mlen = strcspn(m, "+_");
        int pos = psk_number(m, mlen);
        if (pos < 0)
            return *why = "unsupported pattern modifier: only psk0..pskN", -EPROTONOSUPPORT;
        if (pos > (int)hs->nmsg)
            return *why = "psk modifier beyond the last message of the pattern", -EPROTONOSUPPORT;
        if (pos <= last)
            return *why = "psk modifiers must be distinct and in ascending order", -EPROTONOSUPPORT;
        if (hs->npsk >= PM__NOISE_MAX_PSKS)
            return *why = "too many psk modifiers", -EPROTONOSUPPORT;
        if (add_psk(hs, (unsigned)pos) != 0)
            return *why = "too many tokens in one message", -EPROTONOSUPPORT;
        hs->npsk++;
        last = pos;
        m += mlen;
        if (*m == '+') {
            m++;
            if (m >= end)
                return *why = "empty pattern modifier after '+'", -EPROTONOSUPPORT;
        }
    }
    hs->psk_mode = hs->npsk > 0;
    return 0;
}

/* ------------------------------------------------------------ symmetric state */

/* MixHash(data): h = HASH(h || data). */
static void mix_hash(pm__noise_hs *hs, const void *data, size_t len)
{
    crypto_hash_sha256_state st;
    crypto_hash_sha256_init(&st);
    crypto_hash_sha256_update(&st, hs->h, KEY);
    if (len > 0)
        crypto_hash_sha256_update(&st, data, len);
    crypto_hash_sha256_final(&st, hs->h);
}

/* MixKey(ikm): ck, k = HKDF(ck, ikm, 2), n = 0. */
static void mix_key(pm__noise_hs *hs, const unsigned char *ikm, size_t len)
{
    pm__noise_hkdf(hs->sec->ck, ikm, len, hs->sec->ck, hs->sec->k, NULL);
    hs->has_k = true;
    hs->n = 0;
}

/* MixKeyAndHash(ikm): ck, temp_h, k = HKDF(ck, ikm, 3); MixHash(temp_h). */
static void mix_key_and_hash(pm__noise_hs *hs, const unsigned char *ikm, size_t len)
{
    unsigned char th[KEY];
    pm__noise_hkdf(hs->sec->ck, ikm, len, hs->sec->ck, th, hs->sec->k);
    mix_hash(hs, th, KEY);
    sodium_memzero(th, sizeof(th));
    hs->has_k = true;
    hs->n = 0;
}

/* EncryptAndHash(): out gets len (+ TAG once there is a key) bytes. */
static size_t encrypt_and_hash(pm__noise_hs *hs, const void *in, size_t len, unsigned char *out)
{
    size_t out_len = len;
    if (hs->has_k) {
        pm__noise_aead_encrypt(out, hs->sec->k, hs->n++, hs->h, KEY, in, len);
        out_len += TAG;
    } else if (len > 0) {
        memcpy(out, in, len);
    }
    mix_hash(hs, out, out_len);
    return out_len;
}

/* DecryptAndHash(): in is len bytes (the tag included once there is a key);
 * -1 if it does not authenticate. */
static int decrypt_and_hash(pm__noise_hs *hs, const unsigned char *in, size_t len, unsigned char *out)
{
    if (hs->has_k) {
        if (pm__noise_aead_decrypt(out, hs->sec->k, hs->n, hs->h, KEY, in, len) != 0)
            return -1;
        hs->n++;
    } else if (len > 0) {
        memcpy(out, in, len);
    }
    mix_hash(hs, in, len);
    return 0;
}

/* ------------------------------------------------------------ handshake state */

/* The state is unusable from here on: its secrets are wiped at once. */
static int hs_fail(pm__noise_hs *hs, int err)
{
    hs->err = err;
    sodium_memzero(hs->sec, sizeof(*hs->sec));
    return err;
}

static int hs_check(const pm__noise_hs *hs)
{
    if (hs == NULL)
        return -EINVAL;
    if (hs->gen != pm__fork_gen())
        return -EPERM;
    return hs->err;
}

int pm__noise_hs_new(pm__noise_hs **out, const char *name, int initiator, const void *prologue,
                     size_t prologue_len, const char **why)
{
    const char *dummy;
    if (why == NULL)
        why = &dummy;
    *why = NULL;
    if (out == NULL || name == NULL || (prologue == NULL && prologue_len > 0) || (initiator != 0 && initiator != 1))
        return *why = "NULL argument, or initiator not 0 or 1", -EINVAL;
    *out = NULL;
    int rc = pm__noise_sodium_ready();
    if (rc < 0)
        return *why = "libsodium failed to initialise", rc;
    pm__noise_hs *hs = calloc(1, sizeof(*hs));
    if (hs == NULL)
        return *why = "out of memory", -ENOMEM;
    hs->gen = pm__fork_gen();
    hs->initiator = initiator;
    rc = parse_name(hs, name, why);
    if (rc < 0)
        goto fail;
    hs->sec = pm__noise_secret_alloc(sizeof(*hs->sec));
    if (hs->sec == NULL) {
        rc = -errno;
        *why = "no secret memory (sodium_malloc or madvise failed)";
        goto fail;
    }
    /* InitializeSymmetric(name): h = name zero-padded when it fits in
     * HASHLEN, else HASH(name); ck = h; no key. Then MixHash(prologue). */
    size_t nlen = strlen(name);
    if (nlen <= KEY)
        memcpy(hs->h, name, nlen);
    else
        crypto_hash_sha256(hs->h, (const unsigned char *)name, nlen);
    memcpy(hs->sec->ck, hs->h, KEY);
    mix_hash(hs, prologue, prologue_len);
    *out = hs;
    return 0;
fail:
    free(hs);
    return rc;
}

/* The setters belong before the first message: the pre-messages are hashed
 * then, and a key changed later would make the two sides disagree. */
static int setter_check(const pm__noise_hs *hs, const void *key)
{
    int rc = hs_check(hs);
    if (rc < 0)
        return rc;
    return key == NULL || hs->started ? -EINVAL : 0;
}

int pm__noise_hs_set_static_pair(pm__noise_hs *hs, const unsigned char priv[PM__NOISE_KEY_LEN],
                                 const unsigned char pub[PM__NOISE_KEY_LEN])
{
    int rc = setter_check(hs, priv);
    if (rc < 0)
        return rc;
    if (pub == NULL)
        return -EINVAL;
    /* The caller derived pub from priv once (the keyring, at load): the
     * base-point multiplication is not repeated for every handshake. */
    memcpy(hs->sec->s, priv, KEY);
    memcpy(hs->s_pub, pub, KEY);
    hs->has_s = true;
    return 0;
}

int pm__noise_hs_set_psk(pm__noise_hs *hs, unsigned index, const unsigned char psk[PM__NOISE_KEY_LEN])
{
    int rc = setter_check(hs, psk);
    if (rc < 0)
        return rc;
    if (index >= hs->npsk)
        return -EINVAL;
    memcpy(hs->sec->psk[index], psk, KEY);
    hs->psk_set |= 1u << index;
    return 0;
}

static bool sends_s(const pm__noise_hs *hs, bool initiator)
{
    for (unsigned m = initiator ? 0 : 1; m < hs->nmsg; m += 2)
        if (memchr(hs->tok[m], TOK_S, hs->ntok[m]) != NULL)
            return true;
    return false;
}

/* Before the first message: every key the pattern needs is there, then the
 * pre-messages are hashed, the initiator's first. */
static int start(pm__noise_hs *hs)
{
    unsigned me = hs->initiator ? 0 : 1, peer = 1 - me;
    if ((hs->pre_s[me] || sends_s(hs, hs->initiator)) && !hs->has_s)
        return -ENOKEY;
    if (hs->pre_s[peer] && !hs->has_rs)
        return -ENOKEY;
    if (hs->psk_set != (1u << hs->npsk) - 1)
        return -ENOKEY;
    if (hs->pre_s[0])
        mix_hash(hs, hs->initiator ? hs->s_pub : hs->rs, KEY);
    if (hs->pre_s[1])
        mix_hash(hs, hs->initiator ? hs->rs : hs->s_pub, KEY);
    hs->started = true;
    return 0;
}

static bool my_turn(const pm__noise_hs *hs)
{
    return (hs->msg % 2 == 0) == hs->initiator;
}

/* Bytes of the next message before its payload, and whether the payload
 * gets a tag: the tokens replayed on has_k only, nothing else touched. */
static size_t token_bytes(const pm__noise_hs *hs, bool *tagged)
{
    bool k = hs->has_k;
    size_t n = 0;
    for (unsigned i = 0; i < hs->ntok[hs->msg]; i++) {
        switch (hs->tok[hs->msg][i]) {
        case TOK_E:
            n += KEY;
            k = k || hs->psk_mode; /* the psk modes MixKey(e) */
            break;
        case TOK_S:
            n += KEY + (k ? TAG : 0);
            break;
        default: /* ee, es, se, ss, psk: MixKey */
            k = true;
        }
    }
    *tagged = k;
    return n;
}

long pm__noise_write_size(const pm__noise_hs *hs, size_t payload_len)
{
    int rc = hs_check(hs);
    if (rc < 0)
        return rc;
    if (hs->msg >= hs->nmsg || !my_turn(hs))
        return -EINVAL;
    bool tagged;
    size_t n = token_bytes(hs, &tagged);
    if (payload_len > PM__NOISE_MAX_MSG || n + payload_len + (tagged ? TAG : 0) > PM__NOISE_MAX_MSG)
        return -EMSGSIZE;
    return (long)(n + payload_len + (tagged ? TAG : 0));
}

/* The DH tokens: which of our private keys meets which of the peer's
 * public keys depends on the side (rev 34 5.3). */
static int dh_token(pm__noise_hs *hs, uint8_t tok)
{
    bool i = hs->initiator;
    const unsigned char *priv;
    const unsigned char *pub;
    bool have;
    switch (tok) {
    case TOK_EE:
        priv = hs->sec->e, pub = hs->re, have = hs->has_e && hs->has_re;
        break;
    case TOK_ES:
        priv = i ? hs->sec->e : hs->sec->s, pub = i ? hs->rs : hs->re;
        have = i ? hs->has_e && hs->has_rs : hs->has_s && hs->has_re;
        break;
    case TOK_SE:
        priv = i ? hs->sec->s : hs->sec->e, pub = i ? hs->re : hs->rs;
        have = i ? hs->has_s && hs->has_re : hs->has_e && hs->has_rs;
        break;
    default: /* TOK_SS */
        priv = hs->sec->s, pub = hs->rs, have = hs->has_s && hs->has_rs;
    }
    if (!have)
        return -EINVAL; /* cannot happen with the table's valid patterns */
    unsigned char out[KEY];
    if (pm__noise_dh(out, priv, pub) != 0)
        return -EKEYREJECTED;
    mix_key(hs, out, KEY);
    sodium_memzero(out, sizeof(out));
    return 0;
}

/* The tokens that are the same whichever way the message goes. */
static int common_token(pm__noise_hs *hs, uint8_t tok)
{
    if (tok == TOK_PSK) {
        mix_key_and_hash(hs, hs->sec->psk[hs->psk_used++], KEY);
        return 0;
    }
    return dh_token(hs, tok);
}

int pm__noise_write_message(pm__noise_hs *hs, const void *payload, size_t payload_len, void *out, size_t cap,
                            size_t *out_len)
{
    int rc = hs_check(hs);
    if (rc < 0)
        return rc;
    if (out == NULL || out_len == NULL || (payload == NULL && payload_len > 0))
        return -EINVAL;
    if (!hs->started && (rc = start(hs)) < 0)
        return rc;
    long size = pm__noise_write_size(hs, payload_len);
    if (size < 0)
        return (int)size;
    if ((size_t)size > cap)
        return -ENOBUFS;

    unsigned char *p = out;
    for (unsigned t = 0; t < hs->ntok[hs->msg]; t++) {
        uint8_t tok = hs->tok[hs->msg][t];
        switch (tok) {
        case TOK_E:
            if (!hs->fixed_e)
                pm__noise_ephemeral_take(hs->sec->e, hs->e_pub);
            hs->has_e = true;
            memcpy(p, hs->e_pub, KEY);
            p += KEY;
            mix_hash(hs, hs->e_pub, KEY);
            if (hs->psk_mode)
                mix_key(hs, hs->e_pub, KEY);
            break;
        case TOK_S:
            p += encrypt_and_hash(hs, hs->s_pub, KEY, p);
            break;
        default:
            if ((rc = common_token(hs, tok)) < 0)
                return hs_fail(hs, rc);
        }
    }
    p += encrypt_and_hash(hs, payload, payload_len, p);
    hs->msg++;
    *out_len = (size_t)(p - (unsigned char *)out);
    return 0;
}

int pm__noise_read_message(pm__noise_hs *hs, const void *msg, size_t len, void *payload, size_t cap,
                           size_t *payload_len)
{
    int rc = hs_check(hs);
    if (rc < 0)
        return rc;
    if ((msg == NULL && len > 0) || (payload == NULL && cap > 0) || payload_len == NULL)
        return -EINVAL;
    if (hs->msg >= hs->nmsg || my_turn(hs))
        return -EINVAL;
    if (!hs->started && (rc = start(hs)) < 0)
        return rc;
    /* Every length is checked against the pattern before a byte is used. */
    if (len > PM__NOISE_MAX_MSG)
        return hs_fail(hs, -EBADMSG);
    bool tagged;
    size_t fixed = token_bytes(hs, &tagged) + (tagged ? TAG : 0);
    if (len < fixed)
        return hs_fail(hs, -EBADMSG);
    if (len - fixed > cap)
        return -ENOBUFS; /* nothing read yet: the caller may retry */

    const unsigned char *p = msg;
    for (unsigned t = 0; t < hs->ntok[hs->msg]; t++) {
        uint8_t tok = hs->tok[hs->msg][t];
        switch (tok) {
        case TOK_E:
            memcpy(hs->re, p, KEY);
            hs->has_re = true;
            p += KEY;
            mix_hash(hs, hs->re, KEY);
            if (hs->psk_mode)
                mix_key(hs, hs->re, KEY);
            break;
        case TOK_S: {
            size_t n = KEY + (hs->has_k ? TAG : 0);
            if (decrypt_and_hash(hs, p, n, hs->rs) != 0)
                return hs_fail(hs, -EBADMSG);
            hs->has_rs = true;
            p += n;
            break;
        }
        default:
            /* A DH that gives zeros here comes from a key on the wire. */
            if (common_token(hs, tok) < 0)
                return hs_fail(hs, -EBADMSG);
        }
    }
    size_t rest = len - (size_t)(p - (const unsigned char *)msg);
    if (decrypt_and_hash(hs, p, rest, payload) != 0)
        return hs_fail(hs, -EBADMSG);
    hs->msg++;
    *payload_len = rest - (hs->has_k ? TAG : 0);
    return 0;
}

int pm__noise_hs_done(const pm__noise_hs *hs)
{
    int rc = hs_check(hs);
    if (rc < 0)
        return rc;
    return hs->msg >= hs->nmsg;
}

int pm__noise_hs_remote_static(const pm__noise_hs *hs, unsigned char out[PM__NOISE_KEY_LEN])
{
    int rc = hs_check(hs);
    if (rc < 0)
        return rc;
    if (out == NULL)
        return -EINVAL;
    if (!hs->has_rs)
        return -ENOKEY;
    memcpy(out, hs->rs, KEY);
    return 0;
}

void pm__noise_hs_free(pm__noise_hs *hs)
{
    if (hs == NULL)
        return;
    pm__noise_secret_free(hs->sec, sizeof(*hs->sec), hs->gen);
    sodium_memzero(hs, sizeof(*hs));
    free(hs);
}

/* ------------------------------------------------------------ split */

int pm__noise_split(pm__noise_hs *hs, uint64_t rekey_every, pm__noise_transport **out)
{
    int rc = hs_check(hs);
    if (rc < 0)
        return rc;
    if (out == NULL || hs->msg < hs->nmsg || hs->split)
        return -EINVAL;
    *out = NULL;
    pm__noise_transport *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    t->sec = pm__noise_secret_alloc(sizeof(*t->sec));
    if (t->sec == NULL) {
        rc = -errno;
        free(t);
        return rc;
    }
    t->gen = hs->gen;
    t->rekey_every = rekey_every;
    /* k1 is the initiator's sending key, k2 the responder's. */
    unsigned char *k1 = t->sec->k[hs->initiator ? 1 : 0];
    unsigned char *k2 = t->sec->k[hs->initiator ? 0 : 1];
    pm__noise_hkdf(hs->sec->ck, NULL, 0, k1, k2, NULL);
    /* One-way patterns (N, K, X: a single message) carry traffic from the
     * initiator only; k2 is then never used. */
    bool one_way = hs->nmsg == 1;
    t->can[1] = !one_way || hs->initiator;
    t->can[0] = !one_way || !hs->initiator;
    /* The handshake's secrets are of no more use: only h and the public
     * keys stay readable. */
    sodium_memzero(hs->sec, sizeof(*hs->sec));
    hs->split = true;
    *out = t;
    return 0;
}
