/* SPDX-License-Identifier: MIT */
/* check_noise.c - the Noise handshake and transport: the published vectors, hostile messages, secrets across fork, a small benchmark. */
#include "helpers.h"

#include <sodium.h>
#include <sys/mman.h>

#include "peer/cipher.h"
#include "peer/noise.h"
#include "hooks.h"

#ifndef PM_NOISE_VECTORS
#error "PM_NOISE_VECTORS must name tests/data/noise-25519-chachapoly-sha256.json"
#endif

#define XXPSK3 "Noise_XXpsk3_25519_ChaChaPoly_SHA256"
#define NN "Noise_NN_25519_ChaChaPoly_SHA256"

/* ------------------------------------------------------------ the vector file */

/*
 * A strict reader for exactly the shape of the vector file: an object with
 * "vectors", an array of objects whose values are strings (hex, but for
 * protocol_name), arrays of hex strings (the psks) or the array "messages"
 * of {payload, ciphertext}. No escapes, numbers or unknown keys: anything
 * else fails the test with the offset where reading stopped.
 */
#define HEX_MAX 512
#define VEC_MAX_MSGS 8
#define VEC_MAX_PSKS 4
#define VEC_MAX 128

struct hexbuf {
    unsigned char b[HEX_MAX];
    size_t len;
    int set;
};

struct vector {
    char name[96];
    struct hexbuf prologue[2], ephemeral[2], stat[2], remote_static[2], psk[2][VEC_MAX_PSKS];
    unsigned npsk[2];
    struct hexbuf hash;
    struct {
        struct hexbuf payload, ciphertext;
    } msg[VEC_MAX_MSGS];
    unsigned nmsg;
};

struct reader {
    const char *p, *start, *end;
};

static void fail_at(const struct reader *r, const char *what)
{
    ck_abort_msg("%s: %s at byte %ld", PM_NOISE_VECTORS, what, (long)(r->p - r->start));
}

static void ws(struct reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\n' || *r->p == '\t' || *r->p == '\r'))
        r->p++;
}

static void expect(struct reader *r, char c)
{
    ws(r);
    if (r->p >= r->end || *r->p != c) {
        char what[32];
        snprintf(what, sizeof(what), "expected '%c'", c);
        fail_at(r, what);
    }
    r->p++;
}

/* 1 and the next character consumed if it is c. */
static int json_accept(struct reader *r, char c)
{
    ws(r);
    if (r->p < r->end && *r->p == c) {
        r->p++;
        return 1;
    }
    return 0;
}

static void string(struct reader *r, char *out, size_t cap)
{
    expect(r, '"');
    size_t n = 0;
    while (r->p < r->end && *r->p != '"') {
        if (*r->p == '\\' || (unsigned char)*r->p < 0x20 || n + 1 >= cap)
            fail_at(r, "escape, control character or over-long string");
        out[n++] = *r->p++;
    }
    if (r->p >= r->end)
        fail_at(r, "unterminated string");
    r->p++;
    out[n] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static void hex(struct reader *r, struct hexbuf *h)
{
    char text[2 * HEX_MAX + 1];
    if (h->set)
        fail_at(r, "duplicate key");
    string(r, text, sizeof(text));
    size_t n = strlen(text);
    if (n % 2 != 0)
        fail_at(r, "odd-length hex string");
    for (size_t i = 0; i < n; i += 2) {
        int hi = hexval(text[i]), lo = hexval(text[i + 1]);
        if (hi < 0 || lo < 0)
            fail_at(r, "not lower-case hex");
        h->b[i / 2] = (unsigned char)(hi << 4 | lo);
    }
    h->len = n / 2;
    h->set = 1;
}

static void psks(struct reader *r, struct hexbuf *out, unsigned *n)
{
    expect(r, '[');
    if (json_accept(r, ']'))
        return;
    do {
        if (*n >= VEC_MAX_PSKS)
            fail_at(r, "too many psks");
        hex(r, &out[(*n)++]);
    } while (json_accept(r, ','));
    expect(r, ']');
}

static void messages(struct reader *r, struct vector *v)
{
    expect(r, '[');
    do {
        if (v->nmsg >= VEC_MAX_MSGS)
            fail_at(r, "too many messages");
        expect(r, '{');
        do {
            char key[32];
            string(r, key, sizeof(key));
            expect(r, ':');
            if (strcmp(key, "payload") == 0)
                hex(r, &v->msg[v->nmsg].payload);
            else if (strcmp(key, "ciphertext") == 0)
                hex(r, &v->msg[v->nmsg].ciphertext);
            else
                fail_at(r, "unknown message key");
        } while (json_accept(r, ','));
        expect(r, '}');
        if (!v->msg[v->nmsg].payload.set || !v->msg[v->nmsg].ciphertext.set)
            fail_at(r, "message without payload or ciphertext");
        v->nmsg++;
    } while (json_accept(r, ','));
    expect(r, ']');
}

static void vector(struct reader *r, struct vector *v)
{
    memset(v, 0, sizeof(*v));
    expect(r, '{');
    do {
        char key[32];
        string(r, key, sizeof(key));
        expect(r, ':');
        /* "init_x" and "resp_x": side 0 and 1, x in k. */
        int side = strncmp(key, "init_", 5) == 0 ? 0 : 1;
        const char *k = strncmp(key, "init_", 5) == 0 || strncmp(key, "resp_", 5) == 0 ? key + 5 : "";
        if (strcmp(key, "protocol_name") == 0)
            string(r, v->name, sizeof(v->name));
        else if (strcmp(key, "handshake_hash") == 0)
            hex(r, &v->hash);
        else if (strcmp(key, "messages") == 0)
            messages(r, v);
        else if (strcmp(k, "prologue") == 0)
            hex(r, &v->prologue[side]);
        else if (strcmp(k, "ephemeral") == 0)
            hex(r, &v->ephemeral[side]);
        else if (strcmp(k, "static") == 0)
            hex(r, &v->stat[side]);
        else if (strcmp(k, "remote_static") == 0)
            hex(r, &v->remote_static[side]);
        else if (strcmp(k, "psks") == 0)
            psks(r, v->psk[side], &v->npsk[side]);
        else
            fail_at(r, "unknown vector key");
    } while (json_accept(r, ','));
    expect(r, '}');
    if (v->name[0] == '\0' || !v->hash.set || v->nmsg == 0)
        fail_at(r, "vector without protocol_name, handshake_hash or messages");
}

/* Reads the whole file into vecs; returns how many. */
static size_t load_vectors(struct vector *vecs, size_t max)
{
    FILE *f = fopen(PM_NOISE_VECTORS, "r");
    ck_assert_msg(f != NULL, "cannot open %s: %s", PM_NOISE_VECTORS, strerror(errno));
    static char buf[1 << 20];
    size_t len = fread(buf, 1, sizeof(buf), f);
    ck_assert_msg(feof(f) && !ferror(f), "%s: read error or larger than 1 MiB", PM_NOISE_VECTORS);
    fclose(f);
    struct reader r = { buf, buf, buf + len };
    char key[32];
    size_t n = 0;
    expect(&r, '{');
    string(&r, key, sizeof(key));
    if (strcmp(key, "vectors") != 0)
        fail_at(&r, "expected \"vectors\"");
    expect(&r, ':');
    expect(&r, '[');
    do {
        if (n >= max)
            fail_at(&r, "too many vectors");
        vector(&r, &vecs[n++]);
    } while (json_accept(&r, ','));
    expect(&r, ']');
    expect(&r, '}');
    ws(&r);
    if (r.p != r.end)
        fail_at(&r, "trailing bytes");
    return n;
}

/* ------------------------------------------------------------ running a vector */

static void hex_eq(const char *name, unsigned i, const char *what, const unsigned char *got, size_t got_len,
                   const struct hexbuf *want)
{
    ck_assert_msg(got_len == want->len && memcmp(got, want->b, got_len) == 0,
                  "%s: message %u: %s differs (%zu bytes, want %zu)", name, i, what, got_len, want->len);
}

static void set_side(const struct vector *v, pm__noise_hs *hs, int side)
{
    if (v->stat[side].set)
        ck_assert_int_eq(pm_test_noise_set_static(hs, v->stat[side].b), 0);
    if (v->remote_static[side].set)
        ck_assert_int_eq(pm_test_noise_set_remote_static(hs, v->remote_static[side].b), 0);
    if (v->ephemeral[side].set)
        ck_assert_int_eq(pm_test_noise_set_ephemeral(hs, v->ephemeral[side].b), 0);
    for (unsigned k = 0; k < v->npsk[side]; k++)
        ck_assert_int_eq(pm__noise_hs_set_psk(hs, k, v->psk[side][k].b), 0);
}

/*
 * Both sides of one vector in lockstep: every handshake message must come
 * out byte for byte and read back to its payload, both handshake hashes
 * must match, and so must the transport messages after Split(). Messages
 * alternate initiator, responder, ... by index throughout; after a one-way
 * pattern's single message, all are the initiator's. Returns 0, or -1 if
 * the protocol name is not supported.
 */
static int run_vector(const struct vector *v)
{
    pm__noise_hs *hs[2];
    pm__noise_transport *t[2] = { NULL, NULL };
    const char *why = NULL;
    for (int side = 0; side < 2; side++) {
        int rc = pm__noise_hs_new(&hs[side], v->name, side == 0, v->prologue[side].b, v->prologue[side].len, &why);
        if (rc == -EPROTONOSUPPORT && side == 0)
            return -1;
        ck_assert_msg(rc == 0, "%s: hs_new: %d (%s)", v->name, rc, why ? why : "");
        set_side(v, hs[side], side);
    }
    unsigned hs_msgs = 0;
    for (unsigned i = 0; i < v->nmsg; i++) {
        const struct hexbuf *pl = &v->msg[i].payload, *ct = &v->msg[i].ciphertext;
        unsigned char out[HEX_MAX + 64], back[HEX_MAX + 64];
        size_t out_len = 0, back_len = 0;
        if (!pm__noise_hs_done(hs[0])) {
            int s = i % 2;
            ck_assert_int_eq(pm_test_noise_my_turn(hs[s]), 1);
            ck_assert_int_eq(pm__noise_write_size(hs[s], pl->len), (long)ct->len);
            ck_assert_int_eq(pm__noise_write_message(hs[s], pl->b, pl->len, out, sizeof(out), &out_len), 0);
            hex_eq(v->name, i, "handshake ciphertext", out, out_len, ct);
            ck_assert_int_eq(pm__noise_read_message(hs[1 - s], out, out_len, back, sizeof(back), &back_len), 0);
            hex_eq(v->name, i, "handshake payload", back, back_len, pl);
            hs_msgs = i + 1;
            continue;
        }
        if (t[0] == NULL) {
            ck_assert_int_eq(pm__noise_hs_done(hs[1]), 1);
            for (int side = 0; side < 2; side++) {
                unsigned char h[PM__NOISE_KEY_LEN];
                ck_assert_int_eq(pm_test_noise_hash(hs[side], h), 0);
                hex_eq(v->name, i, "handshake hash", h, sizeof(h), &v->hash);
                ck_assert_int_eq(pm__noise_split(hs[side], 0, &t[side]), 0);
            }
        }
        int s = hs_msgs == 1 ? 0 : (int)(i % 2);
        ck_assert_int_eq(pm__noise_encrypt(t[s], NULL, 0, pl->b, pl->len, out, sizeof(out), &out_len), 0);
        hex_eq(v->name, i, "transport ciphertext", out, out_len, ct);
        ck_assert_int_eq(pm__noise_decrypt(t[1 - s], NULL, 0, out, out_len, back, sizeof(back), &back_len), 0);
        hex_eq(v->name, i, "transport payload", back, back_len, pl);
    }
    ck_assert_msg(t[0] != NULL, "%s: no transport message after the handshake", v->name);
    for (int side = 0; side < 2; side++) {
        pm__noise_transport_free(t[side]);
        pm__noise_hs_free(hs[side]);
    }
    return 0;
}

/* Constant-time equality of two keys. */
static int key_equal(const unsigned char a[PM__NOISE_KEY_LEN], const unsigned char b[PM__NOISE_KEY_LEN])
{
    return sodium_memcmp(a, b, PM__NOISE_KEY_LEN) == 0;
}

/* A direction's current key (cipher.h publishes the transport's struct),
 * for checking Rekey() against its definition. */
static int transport_key(const pm__noise_transport *t, int tx, unsigned char out[PM__NOISE_KEY_LEN])
{
    if (t == NULL)
        return -EINVAL;
    if (t->err != 0)
        return t->err;
    memcpy(out, t->sec->k[tx ? 1 : 0], PM__NOISE_KEY_LEN);
    return 0;
}

START_TEST(test_vectors)
{
    static struct vector vecs[VEC_MAX];
    size_t n = load_vectors(vecs, VEC_MAX);
    static const char *required[] = { "XXpsk3", "NNpsk0", "KKpsk0", "NN", "XX" };
    unsigned seen[ARRAY_LEN(required)] = { 0 };
    unsigned run = 0, skipped = 0;
    char list[4096] = "";
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        const char *pat = vecs[i].name + strlen("Noise_");
        size_t plen = strcspn(pat, "_");
        if (run_vector(&vecs[i]) < 0) {
            fprintf(stderr, "noise vectors: skipped %s (not supported)\n", vecs[i].name);
            skipped++;
            continue;
        }
        run++;
        for (size_t r = 0; r < ARRAY_LEN(required); r++)
            if (strlen(required[r]) == plen && strncmp(pat, required[r], plen) == 0)
                seen[r]++;
        used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%.*s", run > 1 ? " " : "", (int)plen, pat);
        ck_assert_uint_lt(used, sizeof(list));
    }
    printf("noise vectors: %u of %zu run, %u skipped: %s\n", run, n, skipped, list);
    for (size_t r = 0; r < ARRAY_LEN(required); r++) {
        printf("noise vectors: %s: %u\n", required[r], seen[r]);
        ck_assert_msg(seen[r] > 0, "no %s vector was run", required[r]);
    }
    fflush(stdout);
    /* The machinery is generic: every pattern of the file (one-way,
     * fundamental, deferred, psk) is supported. */
    ck_assert_uint_eq(skipped, 0);
    ck_assert_uint_ge(n, 59);
}
END_TEST

/* ------------------------------------------------------------ helpers */

static const unsigned char key_i[32] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
static const unsigned char key_r[32] = { 0xaa, 0xbb, 0xcc, 0xdd, 1 };
static const unsigned char psk_a[32] = "procmesh test psk, 32 bytes....";
static const unsigned char psk_b[32] = "procmesh test psk, not the same";
static const unsigned char eph_i[32] = { 0x42 };
static const unsigned char eph_r[32] = { 0x43 };

/* An XXpsk3 pair (or another pattern that needs at most statics and one
 * psk), with fixed ephemerals if fixed, else random ones. */
static void new_pair(pm__noise_hs *hs[2], const char *name, const char *prologue, int fixed)
{
    for (int side = 0; side < 2; side++) {
        const char *why = NULL;
        int rc = pm__noise_hs_new(&hs[side], name, side == 0, prologue, strlen(prologue), &why);
        ck_assert_msg(rc == 0, "hs_new(%s): %d (%s)", name, rc, why ? why : "");
        ck_assert_int_eq(pm_test_noise_set_static(hs[side], side == 0 ? key_i : key_r), 0);
        if (strstr(name, "psk") != NULL)
            ck_assert_int_eq(pm__noise_hs_set_psk(hs[side], 0, psk_a), 0);
        if (fixed)
            ck_assert_int_eq(pm_test_noise_set_ephemeral(hs[side], side == 0 ? eph_i : eph_r), 0);
    }
}

/* One message from hs[s] to hs[1-s]; its bytes are left in msg. */
static void pass(pm__noise_hs *hs[2], int s, unsigned char *msg, size_t *len)
{
    unsigned char back[256];
    size_t back_len;
    ck_assert_int_eq(pm__noise_write_message(hs[s], "hi", 2, msg, 256, len), 0);
    ck_assert_int_eq(pm__noise_read_message(hs[1 - s], msg, *len, back, sizeof(back), &back_len), 0);
    ck_assert_uint_eq(back_len, 2);
}

/* Runs a whole handshake and splits both sides. */
static void connect_pair(pm__noise_hs *hs[2], pm__noise_transport *t[2], uint64_t rekey_every)
{
    unsigned char msg[256];
    size_t len;
    for (int i = 0; !pm__noise_hs_done(hs[0]); i++)
        pass(hs, i % 2, msg, &len);
    ck_assert_int_eq(pm__noise_hs_done(hs[1]), 1);
    for (int side = 0; side < 2; side++)
        ck_assert_int_eq(pm__noise_split(hs[side], rekey_every, &t[side]), 0);
}

static void free_pair(pm__noise_hs *hs[2], pm__noise_transport *t[2])
{
    for (int side = 0; side < 2; side++) {
        pm__noise_hs_free(hs[side]);
        if (t != NULL)
            pm__noise_transport_free(t[side]);
    }
}

/* ------------------------------------------------------------ the API */

START_TEST(test_names)
{
    static const char *bad[] = {
        "",
        "Noise_",
        "Noise_XX",
        "Noise_XX_25519_ChaChaPoly_SHA512",
        "Noise_XX_448_ChaChaPoly_SHA256",
        "Noise_XX_25519_AESGCM_SHA256",
        "Noise_XX_25519_ChaChaPoly_SHA256_",
        "Noise_ZZ_25519_ChaChaPoly_SHA256",
        "Noise_xx_25519_ChaChaPoly_SHA256",
        "Noise_XXpsk4_25519_ChaChaPoly_SHA256",   /* XX has 3 messages */
        "Noise_XXpsk3+psk0_25519_ChaChaPoly_SHA256", /* out of order */
        "Noise_XXpsk3+psk3_25519_ChaChaPoly_SHA256",
        "Noise_XXpsk3+_25519_ChaChaPoly_SHA256",
        "Noise_XXpsk_25519_ChaChaPoly_SHA256",
        "Noise_XXpsk03_25519_ChaChaPoly_SHA256",
        "Noise_XXfallback_25519_ChaChaPoly_SHA256",
        "Noise_NNpsk0psk2_25519_ChaChaPoly_SHA256",
        "Nois_XX_25519_ChaChaPoly_SHA256",
    };
    pm__noise_hs *hs = (pm__noise_hs *)&hs;
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        const char *why = NULL;
        ck_assert_msg(pm__noise_hs_new(&hs, bad[i], 1, NULL, 0, &why) == -EPROTONOSUPPORT, "%s accepted", bad[i]);
        ck_assert_ptr_nonnull(why);
        ck_assert_ptr_null(hs);
    }
    char longname[400];
    memset(longname, 'X', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    memcpy(longname, "Noise_", 6);
    const char *why = NULL;
    ck_assert_int_eq(pm__noise_hs_new(&hs, longname, 1, NULL, 0, &why), -EPROTONOSUPPORT);
    ck_assert_str_eq(why, "protocol name longer than 255 bytes");
    ck_assert_int_eq(pm__noise_hs_new(&hs, NULL, 1, NULL, 0, &why), -EINVAL);
    ck_assert_int_eq(pm__noise_hs_new(NULL, XXPSK3, 1, NULL, 0, NULL), -EINVAL);
    ck_assert_int_eq(pm__noise_hs_new(&hs, XXPSK3, 2, NULL, 0, NULL), -EINVAL);
    ck_assert_int_eq(pm__noise_hs_new(&hs, XXPSK3, 1, NULL, 3, NULL), -EINVAL);

    /* Two psk modifiers: two keys, used in order. */
    pm__noise_hs *p[2];
    pm__noise_transport *t[2];
    for (int side = 0; side < 2; side++) {
        ck_assert_int_eq(pm__noise_hs_new(&p[side], "Noise_XXpsk0+psk3_25519_ChaChaPoly_SHA256", side == 0, "", 0, NULL), 0);
        ck_assert_int_eq(pm_test_noise_set_static(p[side], side ? key_r : key_i), 0);
        ck_assert_int_eq(pm__noise_hs_set_psk(p[side], 0, psk_a), 0);
        ck_assert_int_eq(pm__noise_hs_set_psk(p[side], 1, psk_b), 0);
        ck_assert_int_eq(pm__noise_hs_set_psk(p[side], 2, psk_b), -EINVAL);
    }
    connect_pair(p, t, 0);
    free_pair(p, t);
}
END_TEST

/* The protocol name's checks (noise.c parse_name, psk_number), one row a
 * condition with the rest of the name valid: the result and which reason
 * refused it, so that a check that lets a name through to a later one
 * is seen. */
#define SUITE_ "_25519_ChaChaPoly_SHA256"
static const char W_LONG[] = "protocol name longer than 255 bytes";
static const char W_PREFIX[] = "protocol name does not start with \"Noise_\"";
static const char W_NOSUITE[] = "protocol name has no \"_25519_ChaChaPoly_SHA256\" after the pattern";
static const char W_SUITE[] = "unsupported DH, cipher or hash: only 25519_ChaChaPoly_SHA256";
static const char W_PATTERN[] = "unknown handshake pattern";
static const char W_MODIFIER[] = "unsupported pattern modifier: only psk0..pskN";
static const char W_BEYOND[] = "psk modifier beyond the last message of the pattern";
static const char W_ORDER[] = "psk modifiers must be distinct and in ascending order";
static const char W_MANY[] = "too many psk modifiers";
static const char W_EMPTY[] = "empty pattern modifier after '+'";

static const struct {
    const char *name, *why; /* why NULL: accepted */
} name_rows[] = {
    {"Noise_XX" SUITE_, NULL},
    {"NoiseZXX" SUITE_, W_PREFIX},      /* the sixth byte of the prefix */
    {"noise_XX" SUITE_, W_PREFIX},
    {"Noise_XX", W_NOSUITE},
    {"Noise_XX_25519_ChaChaPoly_SHA25", W_SUITE},
    {"Noise_XX" SUITE_ "_", W_SUITE},
    /* The pattern is its capitals and digits: each edge of the two ranges
     * ends it at the same place (an unknown pattern, not X and a
     * modifier). */
    {"Noise_XA" SUITE_, W_PATTERN},
    {"Noise_XZ" SUITE_, W_PATTERN},
    {"Noise_X0" SUITE_, W_PATTERN},
    {"Noise_X9" SUITE_, W_PATTERN},
    {"Noise_X@" SUITE_, W_MODIFIER}, /* one below 'A': a modifier */
    {"Noise_X[" SUITE_, W_MODIFIER}, /* one above 'Z' */
    {"Noise_X/" SUITE_, W_MODIFIER}, /* one below '0' */
    {"Noise_X:" SUITE_, W_MODIFIER}, /* one above '9' */
    {"Noise_X1X1" SUITE_, NULL},
    {"Noise_XXpsk0" SUITE_, NULL},
    {"Noise_XXpsk3" SUITE_, NULL},
    {"Noise_NNpsk2" SUITE_, NULL},     /* NN's last message */
    {"Noise_NNpsk3" SUITE_, W_BEYOND},
    {"Noise_XXpsk" SUITE_, W_MODIFIER},  /* three bytes: no number */
    {"Noise_XXpsk10" SUITE_, W_BEYOND},  /* two digits are a number */
    {"Noise_XXpsk12" SUITE_, W_BEYOND},
    {"Noise_XXpsk99" SUITE_, W_BEYOND},
    {"Noise_XXpsk100" SUITE_, W_MODIFIER}, /* three are not */
    {"Noise_XXpsk03" SUITE_, W_MODIFIER},  /* a leading zero */
    {"Noise_XXpsk9" SUITE_, W_BEYOND},
    {"Noise_XXpsk/" SUITE_, W_MODIFIER},
    {"Noise_XXpsk:" SUITE_, W_MODIFIER},
    {"Noise_XXpsk1)" SUITE_, W_MODIFIER}, /* ')' - '0' is -7: 10 - 7 would be psk3 */
    {"Noise_XXpsx3" SUITE_, W_MODIFIER},
    {"Noise_XXpak3" SUITE_, W_MODIFIER},
    {"Noise_XXqsk3" SUITE_, W_MODIFIER},
    {"Noise_XXabc3" SUITE_, W_MODIFIER},
    {"Noise_XXpsk3+psk0" SUITE_, W_ORDER},
    {"Noise_XXpsk3+psk3" SUITE_, W_ORDER},
    {"Noise_XXpsk0+psk1+psk2+psk3" SUITE_, NULL},   /* four: the most */
    {"Noise_X1K1psk0+psk1+psk2+psk3+psk4" SUITE_, W_MANY},
    {"Noise_XXpsk3+" SUITE_, W_EMPTY},
    {"Noise_XXpsk0psk2" SUITE_, W_MODIFIER},
};

/* "Noise_" + 'X' * (len - 6 - the suite) + the suite: a name of len bytes. */
static void long_name(char *out, size_t len)
{
    size_t sl = strlen(SUITE_);
    memcpy(out, "Noise_", 6);
    memset(out + 6, 'X', len - 6 - sl);
    memcpy(out + len - sl, SUITE_, sl + 1);
}

START_TEST(test_name_rows)
{
    for (size_t i = 0; i < ARRAY_LEN(name_rows); i++) {
        pm__noise_hs *hs = NULL;
        const char *why = "unset";
        int rc = pm__noise_hs_new(&hs, name_rows[i].name, 1, NULL, 0, &why);
        if (name_rows[i].why == NULL) {
            ck_assert_msg(rc == 0, "row %zu: %s refused: %s", i, name_rows[i].name, why);
            ck_assert_msg(why == NULL, "row %zu: accepted, with a reason left: %s", i, why);
            pm__noise_hs_free(hs);
            continue;
        }
        ck_assert_msg(rc == -EPROTONOSUPPORT && hs == NULL, "row %zu: %s: %d", i, name_rows[i].name, rc);
        ck_assert_msg(why != NULL && strcmp(why, name_rows[i].why) == 0, "row %zu: %s: \"%s\", not \"%s\"", i,
                      name_rows[i].name, why, name_rows[i].why);
    }
    /* 255 bytes is the longest name: refused for its pattern, 256 for
     * its length. */
    char name[300];
    for (size_t len = 254; len <= 256; len++) {
        pm__noise_hs *hs = NULL;
        const char *why = NULL;
        long_name(name, len);
        ck_assert_uint_eq(strlen(name), len);
        ck_assert_int_eq(pm__noise_hs_new(&hs, name, 1, NULL, 0, &why), -EPROTONOSUPPORT);
        ck_assert_str_eq(why, len <= 255 ? W_PATTERN : W_LONG);
    }
    /* No secret memory (madvise refused, in a fork child, whose cache
     * holds none of this process's blocks): refused with the reason and
     * an errno, nothing returned. */
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        pm__noise_hs *hs = (pm__noise_hs *)&pid;
        const char *why = NULL;
        int bad = pm_test_filter_call(__NR_madvise, SECCOMP_RET_ERRNO | EINVAL) != 0;
        int rc = pm__noise_hs_new(&hs, "Noise_XX" SUITE_, 1, NULL, 0, &why);
        bad = bad || rc >= 0 || hs != NULL || why == NULL ||
              strcmp(why, "no secret memory (sodium_malloc or madvise failed)") != 0;
        _exit(bad ? 1 : 0);
    }
    int status = pm_test_reap(pid, 20000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "without secret memory: status %#x", status);
}
END_TEST

/* The keys a pattern needs before its first message (noise.c start), one
 * row a rule with the others met: our static key when we send it in a
 * message (the initiator's in message 0 or 2, the responder's in 1) or it
 * is our pre-message; the peer's when it is the peer's pre-message; every
 * psk. The first write (initiator) or read (responder) is -ENOKEY; with
 * the key given, it goes on. */
static const struct {
    const char *name;
    int initiator, s, rs, psk, want;
} key_rows[] = {
    {"Noise_X" SUITE_, 1, 0, 1, 0, -ENOKEY},  /* s in message 0 */
    {"Noise_X" SUITE_, 1, 1, 1, 0, 0},
    {"Noise_XX" SUITE_, 1, 0, 0, 0, -ENOKEY}, /* s in message 2 */
    {"Noise_XX" SUITE_, 1, 1, 0, 0, 0},
    {"Noise_XX" SUITE_, 0, 0, 0, 0, -ENOKEY}, /* s in message 1 */
    {"Noise_XX" SUITE_, 0, 1, 0, 0, 0},
    {"Noise_X1K1" SUITE_, 1, 0, 1, 0, -ENOKEY}, /* s in message 2 of 4 */
    {"Noise_K" SUITE_, 1, 0, 1, 0, -ENOKEY},  /* our pre-message, sent in none */
    {"Noise_K" SUITE_, 1, 1, 1, 0, 0},
    {"Noise_K" SUITE_, 0, 0, 1, 0, -ENOKEY},  /* the responder's pre-message */
    {"Noise_K" SUITE_, 0, 1, 0, 0, -ENOKEY},  /* the initiator's, as its rs */
    {"Noise_K" SUITE_, 0, 1, 1, 0, 0},
    {"Noise_NK" SUITE_, 1, 0, 0, 0, -ENOKEY}, /* the peer's pre-message */
    {"Noise_NK" SUITE_, 1, 0, 1, 0, 0},
    {"Noise_NN" SUITE_, 1, 0, 0, 0, 0},       /* nothing to give */
    {"Noise_NN" SUITE_, 0, 0, 0, 0, 0},
    {"Noise_NNpsk0" SUITE_, 1, 0, 0, 0, -ENOKEY},
    {"Noise_NNpsk0" SUITE_, 1, 0, 0, 1, 0},
};

START_TEST(test_start_key_rows)
{
    unsigned char pub_i[32], pub_r[32], msg[512], back[512];
    ck_assert_int_eq(crypto_scalarmult_curve25519_base(pub_i, key_i), 0);
    ck_assert_int_eq(crypto_scalarmult_curve25519_base(pub_r, key_r), 0);
    for (size_t i = 0; i < ARRAY_LEN(key_rows); i++) {
        pm__noise_hs *hs;
        int ini = key_rows[i].initiator;
        ck_assert_int_eq(pm__noise_hs_new(&hs, key_rows[i].name, ini, NULL, 0, NULL), 0);
        if (key_rows[i].s)
            ck_assert_int_eq(pm_test_noise_set_static(hs, ini ? key_i : key_r), 0);
        if (key_rows[i].rs)
            ck_assert_int_eq(pm_test_noise_set_remote_static(hs, ini ? pub_r : pub_i), 0);
        if (key_rows[i].psk)
            ck_assert_int_eq(pm__noise_hs_set_psk(hs, 0, psk_a), 0);
        size_t len;
        int rc;
        if (ini) {
            /* An empty payload given as NULL: nothing is read from it. */
            rc = pm__noise_write_message(hs, NULL, 0, msg, sizeof(msg), &len);
        } else {
            /* The initiator's first message, made by a peer with every key. */
            pm__noise_hs *peer;
            ck_assert_int_eq(pm__noise_hs_new(&peer, key_rows[i].name, 1, NULL, 0, NULL), 0);
            (void)pm_test_noise_set_static(peer, key_i);
            (void)pm_test_noise_set_remote_static(peer, pub_r);
            ck_assert_int_eq(pm__noise_write_message(peer, NULL, 0, msg, sizeof(msg), &len), 0);
            pm__noise_hs_free(peer);
            /* Without a key yet (NN) the empty payload needs no buffer:
             * NULL, nothing written to it. */
            int keyless = strncmp(key_rows[i].name, "Noise_NN_", 9) == 0;
            rc = pm__noise_read_message(hs, msg, len, keyless ? NULL : back, keyless ? 0 : sizeof(back), &len);
        }
        ck_assert_msg(rc == key_rows[i].want, "row %zu: %s, %s: %d, not %d", i, key_rows[i].name,
                      ini ? "initiator" : "responder", rc, key_rows[i].want);
        pm__noise_hs_free(hs);
    }
}
END_TEST

/* The arguments of the message calls, one row a condition with the
 * others valid: a misuse is -EINVAL and moves nothing (the same pair then
 * completes its handshake); what the checks let through is not refused. */
START_TEST(test_message_argument_rows)
{
    pm__noise_hs *hs[2];
    unsigned char msg[PM__NOISE_MAX_MSG], back[PM__NOISE_MAX_MSG];
    size_t len = 0, got = 0;
    new_pair(hs, XXPSK3, "", 0);
    /* write: out, out_len, a payload length without a payload. */
    ck_assert_int_eq(pm__noise_write_message(hs[0], "hi", 2, NULL, sizeof(msg), &len), -EINVAL);
    ck_assert_int_eq(pm__noise_write_message(hs[0], "hi", 2, msg, sizeof(msg), NULL), -EINVAL);
    ck_assert_int_eq(pm__noise_write_message(hs[0], NULL, 1, msg, sizeof(msg), &len), -EINVAL);
    ck_assert_int_eq(pm_test_noise_my_turn(hs[0]), 1);
    /* The largest message there is: PM__NOISE_MAX_MSG bytes, read whole. */
    static unsigned char big[PM__NOISE_MAX_MSG];
    size_t room = PM__NOISE_MAX_MSG - 48; /* e (32) and the payload's tag (16) */
    memset(big, 'b', room);
    ck_assert_int_eq(pm__noise_write_message(hs[0], big, room, msg, sizeof(msg), &len), 0);
    ck_assert_uint_eq(len, PM__NOISE_MAX_MSG);
    /* read: a length without a message, a room without a buffer, no
     * length out. */
    ck_assert_int_eq(pm__noise_read_message(hs[1], NULL, len, back, sizeof(back), &got), -EINVAL);
    ck_assert_int_eq(pm__noise_read_message(hs[1], msg, len, NULL, sizeof(back), &got), -EINVAL);
    ck_assert_int_eq(pm__noise_read_message(hs[1], msg, len, back, sizeof(back), NULL), -EINVAL);
    ck_assert_int_eq(pm__noise_read_message(hs[1], msg, len, back, sizeof(back), &got), 0);
    ck_assert_uint_eq(got, room);
    ck_assert_int_eq(memcmp(back, big, room), 0);
    /* The rest of the handshake, unharmed by the refusals. */
    pass(hs, 1, msg, &len);
    pass(hs, 0, msg, &len);
    ck_assert_int_eq(pm__noise_hs_done(hs[1]), 1);
    unsigned char rs[32];
    ck_assert_int_eq(pm__noise_hs_remote_static(hs[1], NULL), -EINVAL);
    ck_assert_int_eq(pm__noise_hs_remote_static(hs[1], rs), 0);
    ck_assert_int_eq(pm__noise_split(hs[1], 0, NULL), -EINVAL);
    pm__noise_transport *tr;
    ck_assert_int_eq(pm__noise_split(hs[1], 0, &tr), 0); /* the refusal moved nothing */
    pm__noise_transport_free(tr);
    pm__noise_hs_free(hs[0]);
    pm__noise_hs_free(hs[1]);

    /* A message of no bytes, given as NULL: let through the argument
     * checks, refused as too short for the pattern (and the handshake
     * failed). An empty payload with no room for it: let through. */
    new_pair(hs, XXPSK3, "", 0);
    ck_assert_int_eq(pm__noise_write_message(hs[0], NULL, 0, msg, sizeof(msg), &len), 0);
    ck_assert_int_eq(pm__noise_read_message(hs[1], msg, len, NULL, 0, &got), 0);
    ck_assert_uint_eq(got, 0);
    pm__noise_hs_free(hs[0]);
    pm__noise_hs_free(hs[1]);
    new_pair(hs, XXPSK3, "", 0);
    ck_assert_int_eq(pm__noise_read_message(hs[1], NULL, 0, back, sizeof(back), &got), -EBADMSG);
    pm__noise_hs_free(hs[0]);
    pm__noise_hs_free(hs[1]);

    /* split without secret memory (madvise refused in a fork child, whose
     * cache has none of this process's blocks): an errno, no transport. */
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        pm__noise_transport *t[2];
        new_pair(hs, XXPSK3, "", 0);
        for (int i = 0; i < 3; i++)
            pass(hs, i % 2, msg, &len);
        int bad = pm_test_filter_call(__NR_madvise, SECCOMP_RET_ERRNO | EINVAL) != 0;
        t[0] = (pm__noise_transport *)&pid;
        int rc = pm__noise_split(hs[0], 0, &t[0]);
        bad = bad || rc >= 0 || t[0] != NULL;
        _exit(bad ? 1 : 0);
    }
    int status = pm_test_reap(pid, 20000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "split without secret memory: %#x", status);
}
END_TEST

/* After the last message: no size, no write, no read. */
START_TEST(test_done_refuses)
{
    pm__noise_hs *hs[2];
    unsigned char msg[512], back[512];
    size_t len;
    new_pair(hs, XXPSK3, "", 0);
    /* A payload length that would wrap the sum of the message's parts. */
    ck_assert_int_eq(pm__noise_write_size(hs[0], SIZE_MAX), -EMSGSIZE);
    ck_assert_int_eq(pm__noise_write_size(hs[0], SIZE_MAX - 47), -EMSGSIZE);
    pass(hs, 0, msg, &len);
    pass(hs, 1, msg, &len);
    pass(hs, 0, msg, &len);
    for (int side = 0; side < 2; side++) {
        ck_assert_int_eq(pm__noise_hs_done(hs[side]), 1);
        ck_assert_int_eq(pm__noise_write_size(hs[side], 0), -EINVAL);
        ck_assert_int_eq(pm__noise_write_message(hs[side], NULL, 0, msg, sizeof(msg), &len), -EINVAL);
        ck_assert_int_eq(pm__noise_read_message(hs[side], msg, 64, back, sizeof(back), &len), -EINVAL);
    }
    pm__noise_hs_free(hs[0]);
    pm__noise_hs_free(hs[1]);
}
END_TEST

START_TEST(test_misuse)
{
    pm__noise_hs *hs[2];
    unsigned char msg[256], back[256];
    size_t len, back_len;

    /* Keys the pattern needs. */
    ck_assert_int_eq(pm__noise_hs_new(&hs[0], XXPSK3, 1, NULL, 0, NULL), 0);
    ck_assert_int_eq(pm__noise_write_message(hs[0], NULL, 0, msg, sizeof(msg), &len), -ENOKEY);
    ck_assert_int_eq(pm_test_noise_set_static(hs[0], key_i), 0);
    ck_assert_int_eq(pm__noise_write_message(hs[0], NULL, 0, msg, sizeof(msg), &len), -ENOKEY); /* the psk */
    ck_assert_int_eq(pm_test_noise_set_remote_static(hs[0], key_r), -EINVAL); /* XX has no pre-message */
    ck_assert_int_eq(pm__noise_hs_set_psk(hs[0], 1, psk_a), -EINVAL);
    ck_assert_int_eq(pm__noise_hs_set_psk(hs[0], 0, NULL), -EINVAL);
    ck_assert_int_eq(pm__noise_hs_set_psk(hs[0], 0, psk_a), 0);
    pm__noise_hs_free(hs[0]);

    ck_assert_int_eq(pm__noise_hs_new(&hs[0], "Noise_KK_25519_ChaChaPoly_SHA256", 1, NULL, 0, NULL), 0);
    ck_assert_int_eq(pm_test_noise_set_static(hs[0], key_i), 0);
    ck_assert_int_eq(pm__noise_write_message(hs[0], NULL, 0, msg, sizeof(msg), &len), -ENOKEY); /* rs */
    pm__noise_hs_free(hs[0]);

    /* Turns, buffers, sizes; none of these breaks the state. */
    new_pair(hs, XXPSK3, "", 0);
    ck_assert_int_eq(pm_test_noise_my_turn(hs[0]), 1);
    ck_assert_int_eq(pm_test_noise_my_turn(hs[1]), 0);
    ck_assert_int_eq(pm__noise_write_message(hs[1], NULL, 0, msg, sizeof(msg), &len), -EINVAL);
    ck_assert_int_eq(pm__noise_read_message(hs[0], msg, 64, back, sizeof(back), &back_len), -EINVAL);
    ck_assert_int_eq(pm__noise_write_message(hs[0], "hi", 2, msg, 49, &len), -ENOBUFS); /* needs 32 + 2 + 16 */
    ck_assert_int_eq(pm__noise_write_size(hs[0], 2), 50);
    ck_assert_int_eq(pm__noise_write_size(hs[0], PM__NOISE_MAX_MSG), -EMSGSIZE);
    ck_assert_int_eq(pm__noise_write_size(hs[0], PM__NOISE_MAX_MSG - 47), -EMSGSIZE);
    ck_assert_int_eq(pm__noise_write_size(hs[0], PM__NOISE_MAX_MSG - 48), (long)PM__NOISE_MAX_MSG);
    ck_assert_int_eq(pm__noise_write_message(hs[0], "hi", 2, msg, 50, &len), 0);
    ck_assert_int_eq(pm__noise_hs_set_psk(hs[0], 0, psk_a), -EINVAL); /* started */
    ck_assert_int_eq(pm__noise_read_message(hs[1], msg, len, back, 1, &back_len), -ENOBUFS);
    ck_assert_int_eq(pm__noise_read_message(hs[1], msg, len, back, 2, &back_len), 0);
    ck_assert_int_eq(memcmp(back, "hi", 2), 0);
    unsigned char h[32], rs[32];
    ck_assert_int_eq(pm_test_noise_hash(hs[0], h), -EINVAL);
    ck_assert_int_eq(pm__noise_hs_remote_static(hs[0], rs), -ENOKEY);
    pm__noise_transport *t[2];
    ck_assert_int_eq(pm__noise_split(hs[0], 0, &t[0]), -EINVAL);
    pass(hs, 1, msg, &len);
    pass(hs, 0, msg, &len);
    ck_assert_int_eq(pm__noise_hs_done(hs[0]), 1);
    ck_assert_int_eq(pm_test_noise_my_turn(hs[0]), 0);
    ck_assert_int_eq(pm__noise_write_message(hs[0], NULL, 0, msg, sizeof(msg), &len), -EINVAL);
    ck_assert_int_eq(pm__noise_read_message(hs[0], msg, len, back, sizeof(back), &back_len), -EINVAL);
    /* Both sides learnt the other's static key and agree on h. */
    unsigned char h1[32];
    ck_assert_int_eq(pm_test_noise_hash(hs[0], h), 0);
    ck_assert_int_eq(pm_test_noise_hash(hs[1], h1), 0);
    ck_assert(key_equal(h, h1));
    unsigned char pub_r[32];
    crypto_scalarmult_curve25519_base(pub_r, key_r);
    ck_assert_int_eq(pm__noise_hs_remote_static(hs[0], rs), 0);
    ck_assert(key_equal(rs, pub_r));
    ck_assert(!key_equal(rs, key_r));
    for (int side = 0; side < 2; side++)
        ck_assert_int_eq(pm__noise_split(hs[side], 0, &t[side]), 0);
    ck_assert_int_eq(pm__noise_split(hs[0], 0, &t[0]), -EINVAL);
    ck_assert_int_eq(pm_test_noise_hash(hs[0], h1), 0); /* still readable */
    ck_assert(key_equal(h, h1));

    /* Transport sizes. */
    static unsigned char big[PM__NOISE_MAX_MSG + 16];
    ck_assert_int_eq(pm__noise_encrypt(t[0], NULL, 0, big, PM__NOISE_MAX_MSG - 15, big, sizeof(big), &len), -EMSGSIZE);
    ck_assert_int_eq(pm__noise_encrypt(t[0], NULL, 0, "abc", 3, msg, 18, &len), -ENOBUFS);
    ck_assert_int_eq(pm__noise_encrypt(t[0], "ad", 2, "abc", 3, msg, 19, &len), 0);
    ck_assert_int_eq(pm__noise_decrypt(t[1], "ad", 2, msg, len, back, 2, &back_len), -ENOBUFS);
    ck_assert_int_eq(pm__noise_decrypt(t[1], "ad", 2, msg, len, back, 3, &back_len), 0);
    /* In place. */
    memcpy(msg, "in place", 8);
    ck_assert_int_eq(pm__noise_encrypt(t[1], NULL, 0, msg, 8, msg, sizeof(msg), &len), 0);
    ck_assert_int_eq(pm__noise_decrypt(t[0], NULL, 0, msg, len, msg, sizeof(msg), &back_len), 0);
    ck_assert_int_eq(memcmp(msg, "in place", 8), 0);
    ck_assert_int_eq(pm__noise_encrypt(t[0], NULL, 0, big, PM__NOISE_MAX_MSG - 16, big, sizeof(big), &len), 0);
    ck_assert_uint_eq(len, PM__NOISE_MAX_MSG);
    ck_assert_int_eq(pm__noise_decrypt(t[1], NULL, 0, big, len, big, sizeof(big), &back_len), 0);
    free_pair(hs, t);

    /* A one-way pattern's responder only receives. */
    ck_assert_int_eq(pm__noise_hs_new(&hs[0], "Noise_N_25519_ChaChaPoly_SHA256", 1, NULL, 0, NULL), 0);
    ck_assert_int_eq(pm__noise_hs_new(&hs[1], "Noise_N_25519_ChaChaPoly_SHA256", 0, NULL, 0, NULL), 0);
    crypto_scalarmult_curve25519_base(pub_r, key_r);
    ck_assert_int_eq(pm_test_noise_set_remote_static(hs[0], pub_r), 0);
    ck_assert_int_eq(pm_test_noise_set_static(hs[1], key_r), 0);
    connect_pair(hs, t, 0);
    ck_assert_int_eq(pm__noise_encrypt(t[1], NULL, 0, "x", 1, msg, sizeof(msg), &len), -EINVAL);
    ck_assert_int_eq(pm__noise_encrypt(t[0], NULL, 0, "x", 1, msg, sizeof(msg), &len), 0);
    ck_assert_int_eq(pm__noise_decrypt(t[0], NULL, 0, msg, len, back, sizeof(back), &back_len), -EINVAL);
    ck_assert_int_eq(pm__noise_decrypt(t[1], NULL, 0, msg, len, back, sizeof(back), &back_len), 0);
    free_pair(hs, t);

    ck_assert_int_eq(pm__noise_write_size(NULL, 0), -EINVAL);
    ck_assert_int_eq(pm__noise_encrypt(NULL, NULL, 0, "x", 1, msg, sizeof(msg), &len), -EINVAL);
    pm__noise_hs_free(NULL);
    pm__noise_transport_free(NULL);
}
END_TEST

/* ------------------------------------------------------------ hostile messages */

/* A fresh XXpsk3 pair brought to the point where hs[s] reads message i;
 * the honest message i is left in msg. */
static void pair_at(pm__noise_hs *hs[2], unsigned i, unsigned char *msg, size_t *len)
{
    new_pair(hs, XXPSK3, "mesh-a", 1);
    for (unsigned k = 0; k < i; k++)
        pass(hs, (int)(k % 2), msg, len);
    ck_assert_int_eq(pm__noise_write_message(hs[i % 2], "hi", 2, msg, 256, len), 0);
}

START_TEST(test_tampered_handshake)
{
    /* Every bit-flipped byte and every truncation of each of the three
     * messages is refused, and the reader is unusable afterwards. */
    for (unsigned i = 0; i < 3; i++) {
        pm__noise_hs *hs[2];
        unsigned char msg[256], back[256];
        size_t len, back_len;
        pair_at(hs, i, msg, &len);
        free_pair(hs, NULL);
        for (size_t at = 0; at < 2 * len; at++) {
            unsigned char bad[256];
            size_t bad_len = len;
            pair_at(hs, i, bad, &bad_len);
            int r = 1 - (int)(i % 2);
            if (at < len)
                bad[at] ^= (unsigned char)(1u << (at % 8));
            else
                bad_len = at - len;
            ck_assert_msg(pm__noise_read_message(hs[r], bad, bad_len, back, sizeof(back), &back_len) == -EBADMSG,
                          "message %u: %s at %zu accepted", i, at < len ? "flip" : "truncation", at % len);
            ck_assert_int_eq(pm__noise_read_message(hs[r], msg, len, back, sizeof(back), &back_len), -EBADMSG);
            ck_assert_int_eq(pm__noise_hs_done(hs[r]), -EBADMSG);
            size_t size;
            const unsigned char *sec = pm_test_noise_secret(hs[r], &size);
            ck_assert(sodium_is_zero(sec, size));
            free_pair(hs, NULL);
        }
    }
}
END_TEST

START_TEST(test_hostile_handshake)
{
    pm__noise_hs *hs[2], *other[2];
    unsigned char msg[256], back[256], m3[256];
    size_t len, back_len, m3_len;

    /* Over-long. */
    static unsigned char big[PM__NOISE_MAX_MSG + 1];
    new_pair(hs, XXPSK3, "", 0);
    ck_assert_int_eq(pm__noise_read_message(hs[1], big, sizeof(big), big, sizeof(big), &back_len), -EBADMSG);
    free_pair(hs, NULL);

    /* A replayed third message from a real session never completes another. */
    new_pair(hs, XXPSK3, "", 0);
    pass(hs, 0, msg, &len);
    pass(hs, 1, msg, &len);
    pass(hs, 0, m3, &m3_len);
    new_pair(other, XXPSK3, "", 0);
    pass(other, 0, msg, &len);
    pass(other, 1, msg, &len);
    ck_assert_int_eq(pm__noise_read_message(other[1], m3, m3_len, back, sizeof(back), &back_len), -EBADMSG);
    free_pair(hs, NULL);
    free_pair(other, NULL);

    /* Our own first message reflected back as the second. */
    new_pair(hs, XXPSK3, "", 0);
    ck_assert_int_eq(pm__noise_write_message(hs[0], NULL, 0, msg, sizeof(msg), &len), 0);
    memcpy(msg + len, msg, len); /* long enough for message 2's tokens */
    ck_assert_int_eq(pm__noise_read_message(hs[0], msg, 2 * len + 48, back, sizeof(back), &back_len), -EBADMSG);
    free_pair(hs, NULL);

    /* Another mesh (prologue) fails at the first message; a wrong psk at
     * the third, where psk3 mixes it in. */
    new_pair(hs, XXPSK3, "mesh-a", 0);
    new_pair(other, XXPSK3, "mesh-b", 0);
    ck_assert_int_eq(pm__noise_write_message(hs[0], NULL, 0, msg, sizeof(msg), &len), 0);
    ck_assert_int_eq(pm__noise_read_message(other[1], msg, len, back, sizeof(back), &back_len), -EBADMSG);
    free_pair(hs, NULL);
    free_pair(other, NULL);
    new_pair(hs, XXPSK3, "", 0);
    pm__noise_hs_free(hs[1]);
    ck_assert_int_eq(pm__noise_hs_new(&hs[1], XXPSK3, 0, "", 0, NULL), 0);
    ck_assert_int_eq(pm_test_noise_set_static(hs[1], key_r), 0);
    ck_assert_int_eq(pm__noise_hs_set_psk(hs[1], 0, psk_b), 0);
    pass(hs, 0, msg, &len);
    pass(hs, 1, msg, &len);
    ck_assert_int_eq(pm__noise_write_message(hs[0], NULL, 0, msg, sizeof(msg), &len), 0);
    ck_assert_int_eq(pm__noise_read_message(hs[1], msg, len, back, sizeof(back), &back_len), -EBADMSG);
    free_pair(hs, NULL);

    /* A low-order (all-zero) ephemeral key: the responder's ee refuses it
     * when it writes, the initiator's when it reads. */
    memset(msg, 0, sizeof(msg));
    new_pair(hs, NN, "", 0);
    ck_assert_int_eq(pm__noise_read_message(hs[1], msg, 32, back, sizeof(back), &back_len), 0);
    ck_assert_int_eq(pm__noise_write_message(hs[1], NULL, 0, msg, sizeof(msg), &len), -EKEYREJECTED);
    ck_assert_int_eq(pm__noise_write_message(hs[1], NULL, 0, msg, sizeof(msg), &len), -EKEYREJECTED);
    free_pair(hs, NULL);
    new_pair(hs, NN, "", 0);
    ck_assert_int_eq(pm__noise_write_message(hs[0], NULL, 0, msg, sizeof(msg), &len), 0);
    memset(msg, 0, 48);
    ck_assert_int_eq(pm__noise_read_message(hs[0], msg, 48, back, sizeof(back), &back_len), -EBADMSG);
    free_pair(hs, NULL);

    /* Random bytes, random lengths, into each reading position: always
     * refused, never a crash (the sanitizer build checks every access). */
    uint64_t seed = 34;
    int rounds = pm_test_sanitized() ? 300 : 2000;
    for (int k = 0; k < rounds; k++) {
        unsigned i = (unsigned)(pm_test_rand(&seed) % 3);
        pair_at(hs, i, msg, &len);
        len = pm_test_rand(&seed) % sizeof(msg);
        for (size_t b = 0; b < len; b++)
            msg[b] = (unsigned char)pm_test_rand(&seed);
        ck_assert_int_eq(pm__noise_read_message(hs[1 - i % 2], msg, len, back, sizeof(back), &back_len), -EBADMSG);
        free_pair(hs, NULL);
    }
}
END_TEST

/* ------------------------------------------------------------ transport */

START_TEST(test_transport_faults)
{
    pm__noise_hs *hs[2];
    pm__noise_transport *t[2];
    unsigned char m1[64], m2[64], back[64];
    size_t l1, l2, back_len;

    /* Tampered, truncated, wrong AD, reflected: refused, and then the
     * receiver is unusable even for the genuine message. */
    for (int kind = 0; kind < 4; kind++) {
        new_pair(hs, XXPSK3, "", 0);
        connect_pair(hs, t, PM__NOISE_REKEY_EVERY);
        ck_assert_int_eq(pm__noise_encrypt(t[0], "ad", 2, "frame", 5, m1, sizeof(m1), &l1), 0);
        memcpy(m2, m1, l1);
        l2 = l1;
        pm__noise_transport *rx = t[1];
        const char *ad = "ad";
        if (kind == 0)
            m2[3] ^= 0x10;
        else if (kind == 1)
            l2 = 15;
        else if (kind == 2)
            ad = "AD";
        else
            rx = t[0]; /* our own frame sent back to us */
        int rc = rx == t[0] ? pm__noise_decrypt(t[0], ad, 2, m2, l2, back, sizeof(back), &back_len)
                            : pm__noise_decrypt(t[1], ad, 2, m2, l2, back, sizeof(back), &back_len);
        ck_assert_msg(rc == -EBADMSG, "fault %d: %d", kind, rc);
        ck_assert_int_eq(pm__noise_decrypt(rx, "ad", 2, m1, l1, back, sizeof(back), &back_len), -EBADMSG);
        ck_assert_int_eq(pm__noise_encrypt(rx, NULL, 0, "x", 1, m2, sizeof(m2), &l2), -EBADMSG);
        unsigned char k[32];
        ck_assert_int_eq(transport_key(rx, 1, k), -EBADMSG);
        free_pair(hs, t);
    }

    /* Replayed and reordered frames. */
    new_pair(hs, XXPSK3, "", 0);
    connect_pair(hs, t, 0);
    ck_assert_int_eq(pm__noise_encrypt(t[0], NULL, 0, "one", 3, m1, sizeof(m1), &l1), 0);
    ck_assert_int_eq(pm__noise_encrypt(t[0], NULL, 0, "two", 3, m2, sizeof(m2), &l2), 0);
    ck_assert_int_eq(pm__noise_decrypt(t[1], NULL, 0, m2, l2, back, sizeof(back), &back_len), -EBADMSG);
    free_pair(hs, t);
    new_pair(hs, XXPSK3, "", 0);
    connect_pair(hs, t, 0);
    ck_assert_int_eq(pm__noise_encrypt(t[0], NULL, 0, "one", 3, m1, sizeof(m1), &l1), 0);
    ck_assert_int_eq(pm__noise_decrypt(t[1], NULL, 0, m1, l1, back, sizeof(back), &back_len), 0);
    ck_assert_int_eq(pm__noise_decrypt(t[1], NULL, 0, m1, l1, back, sizeof(back), &back_len), -EBADMSG);
    free_pair(hs, t);

    /* The nonce limit: the last nonce below it works, then the direction
     * and the whole transport are closed. */
    new_pair(hs, XXPSK3, "", 0);
    connect_pair(hs, t, 0);
    t[0]->n[1] = PM__NOISE_NONCE_LIMIT - 1; /* cipher.h: [1] sending, [0] receiving */
    t[1]->n[0] = PM__NOISE_NONCE_LIMIT - 1;
    ck_assert_int_eq(pm__noise_encrypt(t[0], NULL, 0, "last", 4, m1, sizeof(m1), &l1), 0);
    ck_assert_int_eq(pm__noise_decrypt(t[1], NULL, 0, m1, l1, back, sizeof(back), &back_len), 0);
    ck_assert_int_eq(pm__noise_encrypt(t[0], NULL, 0, "over", 4, m1, sizeof(m1), &l1), -EOVERFLOW);
    ck_assert_int_eq(pm__noise_decrypt(t[0], NULL, 0, m2, 20, back, sizeof(back), &back_len), -EOVERFLOW);
    ck_assert_int_eq(pm__noise_decrypt(t[1], NULL, 0, m1, 20, back, sizeof(back), &back_len), -EOVERFLOW);
    free_pair(hs, t);
}
END_TEST

/* Two identical sessions (fixed ephemerals): one rekeys every 3 messages,
 * the other is rekeyed by hand; both agree, and Rekey() is the spec's
 * REKEY(k) = ENCRYPT(k, 2^64-1, "", zeros)[:32], the nonce unchanged. */
START_TEST(test_rekey)
{
    pm__noise_hs *a[2], *b[2];
    pm__noise_transport *ta[2], *tb[2];
    new_pair(a, XXPSK3, "", 1);
    new_pair(b, XXPSK3, "", 1);
    connect_pair(a, ta, 3);
    connect_pair(b, tb, 0);
    unsigned char ca[64], cb[64], back[64];
    size_t la, lb, back_len;
    for (int i = 0; i < 10; i++) {
        if (i > 0 && i % 3 == 0) {
            unsigned char before[32], after[32], want[48], nonce[12];
            ck_assert_int_eq(transport_key(tb[0], 1, before), 0);
            ck_assert_int_eq(pm__noise_rekey(tb[0], 1), 0);
            ck_assert_int_eq(pm__noise_rekey(tb[1], 0), 0);
            ck_assert_int_eq(transport_key(tb[0], 1, after), 0);
            static const unsigned char zeros[32];
            memset(nonce, 0, 4);
            memset(nonce + 4, 0xff, 8);
            crypto_aead_chacha20poly1305_ietf_encrypt(want, NULL, zeros, 32, NULL, 0, NULL, nonce, before);
            ck_assert_int_eq(memcmp(after, want, 32), 0);
            ck_assert(memcmp(after, before, 32) != 0);
        }
        ck_assert_int_eq(pm__noise_encrypt(ta[0], NULL, 0, "same", 4, ca, sizeof(ca), &la), 0);
        ck_assert_int_eq(pm__noise_encrypt(tb[0], NULL, 0, "same", 4, cb, sizeof(cb), &lb), 0);
        ck_assert_msg(la == lb && memcmp(ca, cb, la) == 0, "message %d differs", i);
        ck_assert_int_eq(pm__noise_decrypt(ta[1], NULL, 0, ca, la, back, sizeof(back), &back_len), 0);
        ck_assert_int_eq(pm__noise_decrypt(tb[1], NULL, 0, cb, lb, back, sizeof(back), &back_len), 0);
        /* The other direction rekeys on its own count. */
        ck_assert_int_eq(pm__noise_encrypt(ta[1], NULL, 0, "back", 4, ca, sizeof(ca), &la), 0);
        ck_assert_int_eq(pm__noise_decrypt(ta[0], NULL, 0, ca, la, back, sizeof(back), &back_len), 0);
    }
    free_pair(a, ta);
    free_pair(b, tb);
}
END_TEST

/* ------------------------------------------------------------ fork */

START_TEST(test_fork_secrets)
{
    /* A forked child (a fork-mode worker) finds the secret pages zeroed
     * (MADV_WIPEONFORK) or unmapped (MADV_DONTFORK: SIGSEGV), is refused
     * every call, and may free the handle without the abort that
     * sodium_free of a wiped block would cause. */
    pm__noise_hs *hs[2];
    pm__noise_transport *t[2];
    new_pair(hs, XXPSK3, "", 0);
    size_t size;
    const volatile unsigned char *sec = pm_test_noise_secret(hs[0], &size);
    ck_assert(!sodium_is_zero((const unsigned char *)sec, size));
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        for (size_t i = 0; i < size; i++)
            if (sec[i] != 0)
                _exit(1);
        unsigned char msg[256];
        size_t len;
        if (pm__noise_write_message(hs[0], NULL, 0, msg, sizeof(msg), &len) != -EPERM ||
            pm__noise_hs_set_psk(hs[0], 0, psk_a) != -EPERM)
            _exit(2);
        pm__noise_hs_free(hs[0]);
        pm__noise_hs_free(hs[1]);
        _exit(0);
    }
    int status = pm_test_reap(pid, 20000);
    ck_assert_msg((WIFEXITED(status) && WEXITSTATUS(status) == 0) || (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV),
                  "child saw the secrets or was not refused: status %#x", status);
    /* The parent's state is untouched and works. */
    ck_assert(!sodium_is_zero((const unsigned char *)sec, size));
    connect_pair(hs, t, 0);

    pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        unsigned char m[32];
        size_t len;
        int rc = pm__noise_encrypt(t[0], NULL, 0, "x", 1, m, sizeof(m), &len);
        pm__noise_transport_free(t[0]);
        _exit(rc == -EPERM ? 0 : 3);
    }
    status = pm_test_reap(pid, 20000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child used the transport: status %#x", status);
    unsigned char m[32], back[32];
    size_t len, back_len;
    ck_assert_int_eq(pm__noise_encrypt(t[0], NULL, 0, "x", 1, m, sizeof(m), &len), 0);
    ck_assert_int_eq(pm__noise_decrypt(t[1], NULL, 0, m, len, back, sizeof(back), &back_len), 0);
    free_pair(hs, t);
}
END_TEST

/* ------------------------------------------------------------ ahead of time */

/* Message 1 of a fresh XXpsk3 initiator: its first 32 bytes are e. */
static void first_e(pm__noise_hs **hs, int fixed, unsigned char e[32])
{
    unsigned char msg[256];
    size_t len;
    ck_assert_int_eq(pm__noise_hs_new(hs, XXPSK3, 1, "", 0, NULL), 0);
    ck_assert_int_eq(pm_test_noise_set_static(*hs, key_i), 0);
    ck_assert_int_eq(pm__noise_hs_set_psk(*hs, 0, psk_a), 0);
    if (fixed)
        ck_assert_int_eq(pm_test_noise_set_ephemeral(*hs, eph_i), 0);
    ck_assert_int_eq(pm__noise_write_message(*hs, NULL, 0, msg, sizeof(msg), &len), 0);
    memcpy(e, msg, 32);
}

START_TEST(test_ahead)
{
    /* The spare ephemeral pair serves one handshake: two handshakes never
     * send the same e, prepared or not. */
    pm__noise_hs *a, *b, *c, *d;
    unsigned char ea[32], eb[32], ec[32], ed[32], want[32];
    ck_assert_int_eq(pm__noise_ephemeral_prepare(), 0);
    ck_assert_int_eq(pm__noise_ephemeral_prepare(), 0); /* one waits: a no-op */
    first_e(&a, 0, ea);
    ck_assert_int_eq(pm__noise_ephemeral_prepare(), 0);
    first_e(&b, 0, eb);
    first_e(&c, 0, ec); /* none prepared: made inline */
    ck_assert(memcmp(ea, eb, 32) != 0 && memcmp(eb, ec, 32) != 0 && memcmp(ea, ec, 32) != 0);
    /* A fixed ephemeral (the vectors) wins over a prepared one, which
     * stays for the next handshake. */
    ck_assert_int_eq(pm__noise_ephemeral_prepare(), 0);
    first_e(&d, 1, ed);
    ck_assert_int_eq(crypto_scalarmult_curve25519_base(want, eph_i), 0);
    ck_assert_mem_eq(ed, want, 32);
    pm__noise_hs_free(a);
    pm__noise_hs_free(b);
    pm__noise_hs_free(c);
    pm__noise_hs_free(d);

    /* A static key given with its public half: the handshake completes and
     * the peer learns that key; a public half that is not the private
     * key's fails at the peer. */
    unsigned char pub_i[32], got[32];
    ck_assert_int_eq(crypto_scalarmult_curve25519_base(pub_i, key_i), 0);
    for (int wrong = 0; wrong < 2; wrong++) {
        pm__noise_hs *hs[2];
        unsigned char msg[256], back[256], bad_pub[32];
        size_t len, back_len;
        memcpy(bad_pub, pub_i, 32);
        bad_pub[5] ^= 1;
        for (int side = 0; side < 2; side++) {
            ck_assert_int_eq(pm__noise_hs_new(&hs[side], XXPSK3, side == 0, "", 0, NULL), 0);
            ck_assert_int_eq(pm__noise_hs_set_psk(hs[side], 0, psk_a), 0);
        }
        ck_assert_int_eq(pm__noise_hs_set_static_pair(hs[0], key_i, NULL), -EINVAL);
        ck_assert_int_eq(pm__noise_hs_set_static_pair(hs[0], key_i, wrong ? bad_pub : pub_i), 0);
        ck_assert_int_eq(pm_test_noise_set_static(hs[1], key_r), 0);
        int rc = 0;
        for (int i = 0; i < 3 && rc == 0; i++) {
            ck_assert_int_eq(pm__noise_write_message(hs[i % 2], NULL, 0, msg, sizeof(msg), &len), 0);
            rc = pm__noise_read_message(hs[1 - i % 2], msg, len, back, sizeof(back), &back_len);
        }
        if (wrong) {
            ck_assert_int_eq(rc, -EBADMSG);
        } else {
            ck_assert_int_eq(rc, 0);
            ck_assert_int_eq(pm__noise_hs_remote_static(hs[1], got), 0);
            ck_assert_mem_eq(got, pub_i, 32);
        }
        pm__noise_hs_free(hs[0]);
        pm__noise_hs_free(hs[1]);
    }

    /* Released secret blocks are kept for reuse: many handshakes in a row
     * still work, and a forked child (whose copies of the kept blocks are
     * zeroed or absent) uses none of them: it allocates, handshakes and
     * frees its own without the abort sodium_free of a wiped block gives. */
    for (int i = 0; i < 20; i++) {
        pm__noise_hs *hs[2];
        pm__noise_transport *t[2];
        new_pair(hs, XXPSK3, "", 0);
        connect_pair(hs, t, 0);
        free_pair(hs, t);
    }
    ck_assert_int_eq(pm__noise_ephemeral_prepare(), 0);
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        pm__noise_hs *hs[2];
        pm__noise_transport *t[2];
        unsigned char msg[256], back[256];
        size_t len, back_len;
        int bad = pm__noise_ephemeral_prepare() != 0;
        for (int i = 0; i < 3 && !bad; i++) {
            for (int side = 0; side < 2 && !bad; side++)
                bad = pm__noise_hs_new(&hs[side], XXPSK3, side == 0, "", 0, NULL) != 0 ||
                      pm_test_noise_set_static(hs[side], side ? key_r : key_i) != 0 ||
                      pm__noise_hs_set_psk(hs[side], 0, psk_a) != 0;
            for (int m = 0; m < 3 && !bad; m++)
                bad = pm__noise_write_message(hs[m % 2], NULL, 0, msg, sizeof(msg), &len) != 0 ||
                      pm__noise_read_message(hs[1 - m % 2], msg, len, back, sizeof(back), &back_len) != 0;
            for (int side = 0; side < 2 && !bad; side++)
                bad = pm__noise_split(hs[side], 0, &t[side]) != 0;
            if (!bad)
                free_pair(hs, t);
        }
        _exit(bad ? 1 : 0);
    }
    int status = pm_test_reap(pid, 20000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "a forked child's handshakes failed or aborted: status %#x", status);
}
END_TEST

/* The transport's arguments, one row per condition with all the others
 * valid: a misuse is -EINVAL and leaves the transport as it was (the next
 * honest message goes through); a NULL buffer of length 0 is no misuse; a
 * message shorter than its tag or longer than the most a message may be is
 * -EBADMSG, which fails the transport. */
/* An AEAD whose decryption accepts anything: only the length rules refuse. */
static int accept_all(unsigned char *out, const unsigned char *k, uint64_t n, const void *ad, size_t ad_len,
                      const unsigned char *in, size_t len)
{
    (void)out, (void)k, (void)n, (void)ad, (void)ad_len, (void)in, (void)len;
    return 0;
}

START_TEST(test_transport_argument_rows)
{
    enum { E_OUT_NULL, E_OUTLEN_NULL, E_IN_NULL, E_IN_NULL_EMPTY, E_AD_NULL, E_AD_NULL_EMPTY, E_ROWS };
    enum { D_IN_NULL, D_IN_NULL_EMPTY, D_OUT_NULL, D_OUT_NULL_EMPTY, D_OUTLEN_NULL, D_AD_NULL, D_TAG_ONLY,
           D_SHORT, D_LONG, D_ROWS };
    static unsigned char big[PM__NOISE_MAX_MSG + 2];
    const pm__noise_aead *was = pm__noise_transport_aead;
    unsigned char msg[256], back[256];
    size_t len, back_len;
    for (int row = 0; row < E_ROWS + D_ROWS; row++) {
        pm__noise_hs *hs[2];
        pm__noise_transport *t[2];
        new_pair(hs, XXPSK3, "", 0);
        connect_pair(hs, t, 0);
        int rc, want = -EINVAL;
        if (row < E_ROWS) {
            const void *in = row == E_IN_NULL || row == E_IN_NULL_EMPTY ? NULL : "abc";
            size_t in_len = row == E_IN_NULL_EMPTY ? 0 : 3;
            const void *ad = row == E_AD_NULL || row == E_AD_NULL_EMPTY ? NULL : "ad";
            size_t ad_len = row == E_AD_NULL_EMPTY ? 0 : 2;
            rc = pm__noise_encrypt(t[0], ad, ad_len, in, in_len, row == E_OUT_NULL ? NULL : msg, sizeof(msg),
                                   row == E_OUTLEN_NULL ? NULL : &len);
            if (row == E_IN_NULL_EMPTY || row == E_AD_NULL_EMPTY) {
                want = 0;
                ck_assert_uint_eq(len, in_len + 16);
                ck_assert_int_eq(pm__noise_decrypt(t[1], ad, ad_len, msg, len, back, sizeof(back), &back_len), 0);
                ck_assert_uint_eq(back_len, in_len);
            }
        } else {
            int d = row - E_ROWS;
            /* An honest message of 3 bytes, or of none for the empty rows. */
            size_t plain = d == D_OUT_NULL_EMPTY || d == D_TAG_ONLY ? 0 : 3;
            ck_assert_int_eq(pm__noise_encrypt(t[0], "ad", 2, plain ? "abc" : NULL, plain, msg, sizeof(msg), &len), 0);
            const void *in = d == D_IN_NULL || d == D_IN_NULL_EMPTY ? NULL : d == D_LONG ? (const void *)big : msg;
            size_t in_len = d == D_IN_NULL_EMPTY ? 0 : d == D_SHORT ? 15 : d == D_LONG ? PM__NOISE_MAX_MSG + 1 : len;
            void *out = d == D_OUT_NULL || d == D_OUT_NULL_EMPTY ? NULL : d == D_LONG ? (void *)big : back;
            size_t cap = d == D_OUT_NULL_EMPTY ? 0 : d == D_LONG ? sizeof(big) : sizeof(back);
            /* A message too long is refused for its length, even one that
             * would authenticate (a peer's own encoder may make one). */
            static const pm__noise_aead lenient = {pm__noise_aead_encrypt, accept_all};
            if (d == D_LONG || d == D_SHORT)
                pm__noise_transport_aead = &lenient;
            rc = pm__noise_decrypt(t[1], d == D_AD_NULL ? NULL : "ad", 2, in, in_len, out, cap,
                                   d == D_OUTLEN_NULL ? NULL : &back_len);
            pm__noise_transport_aead = was;
            if (d == D_OUT_NULL_EMPTY || d == D_TAG_ONLY) {
                want = 0;
                ck_assert_uint_eq(back_len, 0);
            }
            if (d == D_IN_NULL_EMPTY || d == D_SHORT || d == D_LONG)
                want = -EBADMSG;
        }
        ck_assert_msg(rc == want, "row %d: %d, want %d", row, rc, want);
        if (want == -EINVAL) {
            /* Nothing moved: the next message in each direction is read. */
            ck_assert_int_eq(pm__noise_encrypt(t[0], NULL, 0, "ok", 2, msg, sizeof(msg), &len), 0);
            if (row >= E_ROWS) /* the row's own honest message is still the peer's next */
                ck_assert_int_eq(pm__noise_decrypt(t[1], NULL, 0, msg, len, back, sizeof(back), &back_len),
                                 -EBADMSG);
            else
                ck_assert_int_eq(pm__noise_decrypt(t[1], NULL, 0, msg, len, back, sizeof(back), &back_len), 0);
        }
        if (want == -EBADMSG) /* failed for good */
            ck_assert_int_eq(pm__noise_decrypt(t[1], "ad", 2, msg, len, back, sizeof(back), &back_len), -EBADMSG);
        free_pair(hs, t);
    }
}
END_TEST

/* Secret blocks (cipher.c's cache): a freed block is zeroed and kept,
 * still mapped, and handed out again for the same size; at most eight are
 * kept (SECRET_CACHE), the others unmapped. In a fork child whose parent's
 * blocks are not mapped at all (MADV_DONTFORK, where MADV_WIPEONFORK is
 * refused), none of them is handed out or touched, and the child's own
 * blocks are kept and reused in turn. A NULL block is no block. */
static int mapped(const void *p)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    return msync((void *)((uintptr_t)p & ~(page - 1)), page, MS_ASYNC) == 0;
}

static int zeroed(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return 0;
    return 1;
}

START_TEST(test_secret_cache)
{
    ck_assert_int_eq(pm__noise_sodium_ready(), 0);
    enum { SIZE = 72, MANY = 20, KEPT = 8 };
    unsigned char *b[MANY];
    for (int i = 0; i < MANY; i++) {
        b[i] = pm__noise_secret_alloc(SIZE);
        ck_assert_ptr_nonnull(b[i]);
        ck_assert(zeroed(b[i], SIZE));
        memset(b[i], 0xa5, SIZE);
    }
    for (int i = 0; i < MANY; i++)
        pm__noise_secret_free(b[i], SIZE, pm__fork_gen());
    int kept = 0;
    for (int i = 0; i < MANY; i++)
        kept += mapped(b[i]);
    ck_assert_int_eq(kept, KEPT);
    ck_assert(mapped(b[0]) && zeroed(b[0], SIZE));
    unsigned char *again = pm__noise_secret_alloc(SIZE);
    ck_assert_msg(again != NULL && mapped(again) && zeroed(again, SIZE), "a kept block not handed out again");
    int found = 0; /* one of the kept blocks, whichever */
    for (int i = 0; i < MANY; i++)
        found += again == b[i];
    ck_assert_int_eq(found, 1);
    pm__noise_secret_free(again, SIZE, pm__fork_gen());
    pm__noise_secret_free(NULL, SIZE, pm__fork_gen());

    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* MADV_WIPEONFORK refused: blocks made from now on are MADV_DONTFORK. */
        if (pm_test_filter_call_arg(__NR_madvise, 2, MADV_WIPEONFORK, SECCOMP_RET_ERRNO | EINVAL) != 0)
            _exit(10);
        unsigned char *p = pm__noise_secret_alloc(SIZE), *q = pm__noise_secret_alloc(SIZE + 8);
        if (p == NULL || q == NULL)
            _exit(11);
        /* The blocks kept from before the filter stay kept; these join them
         * or are freed: either way none must reach the grandchild. */
        uint32_t gen = pm__fork_gen();
        pm__noise_secret_free(p, SIZE, gen);
        pid_t g = pm_test_fork();
        if (g == 0) {
            unsigned char *r = pm__noise_secret_alloc(SIZE);
            if (r == NULL || r == p || !zeroed(r, SIZE))
                _exit(1);
            memset(r, 0x5a, SIZE);
            pm__noise_secret_free(q, SIZE + 8, gen); /* the parent's: not touched (absent here) */
            pm__noise_secret_free(NULL, SIZE, pm__fork_gen());
            pm__noise_secret_free(r, SIZE, pm__fork_gen());
            unsigned char *s2 = pm__noise_secret_alloc(SIZE);
            _exit(s2 == r && zeroed(s2, SIZE) ? 0 : 2);
        }
        int st = g < 0 ? -1 : pm_test_reap(g, 20000);
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 20 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0));
    }
    int status = pm_test_reap(pid, 20000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the fork child (1-2: a check; 10-11: set-up; 20 + N: signal N): status %#x", status);
}
END_TEST

/* A process that never initialised libsodium: pm__noise_sodium_ready
 * loads and initialises it (sodium_init then says 1, done already). Run in
 * a fresh exec of this program (PM_NOISE_FRESH), since main initialises
 * libsodium before any test. */
static int fresh_sodium_ready(void)
{
    int rc = pm__noise_sodium_ready();
    if (rc != 0)
        return 1;
    return sodium_init() == 1 ? 0 : 2;
}

START_TEST(test_sodium_ready_fresh)
{
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        setenv("PM_NOISE_FRESH", "1", 1);
        char *argv[] = {"check_noise", NULL};
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    int status = pm_test_reap(pid, 20000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "fresh process (1: not ready; 2: libsodium not initialised; 127: exec): status %#x", status);
}
END_TEST

/* A counting, predictable random source for test_ahead_pair_taken: the
 * n-th draw fills its buffer with the byte 0x40 + n. */
static unsigned rb_calls;

static const char *rb_name(void)
{
    return "pm-test-counting";
}

static uint32_t rb_random(void)
{
    return 0x9e3779b9u * ++rb_calls;
}

static void rb_buf(void *const buf, const size_t size)
{
    rb_calls++;
    memset(buf, (int)(0x40 + rb_calls), size);
}

static randombytes_implementation rb_counting = {
    .implementation_name = rb_name, .random = rb_random, .buf = rb_buf};

/* The pair taken is the pair prepared, whole, with no draw of its own; it
 * is taken once; a prepare while one waits draws nothing. And where the
 * secret memory cannot be had (madvise refused, so neither
 * MADV_WIPEONFORK nor MADV_DONTFORK can keep it from a fork child), the
 * prepare says -ENOMEM and a handshake still gets a fresh pair, drawn
 * inline: in a fork child, which forgets the parent's prepared memory
 * rather than write into what a fork left of it. A fork child with secret
 * memory prepares and takes its own pair like its parent. */
START_TEST(test_ahead_pair_taken)
{
    unsigned char priv[32], pub[32], want[32], pat[32];
    ck_assert_int_eq(pm__noise_sodium_ready(), 0);
    ck_assert_int_eq(randombytes_set_implementation(&rb_counting), 0);
    pm__noise_ephemeral_take(priv, pub); /* whatever was prepared before */
    rb_calls = 0;
    ck_assert_int_eq(pm__noise_ephemeral_prepare(), 0);
    ck_assert_uint_eq(rb_calls, 1);
    ck_assert_int_eq(pm__noise_ephemeral_prepare(), 0);
    ck_assert_uint_eq(rb_calls, 1);
    for (unsigned draw = 1; draw <= 3; draw++) {
        pm__noise_ephemeral_take(priv, pub);
        ck_assert_uint_eq(rb_calls, draw == 2 ? 2 : draw);
        memset(pat, 0x40 + (int)draw, sizeof(pat));
        ck_assert_mem_eq(priv, pat, 32);
        ck_assert_int_eq(crypto_scalarmult_curve25519_base(want, pat), 0);
        ck_assert_mem_eq(pub, want, 32);
        if (draw == 2) /* the next take's pair prepared again, in the same memory */
            ck_assert_int_eq(pm__noise_ephemeral_prepare(), 0);
    }
    ck_assert_uint_eq(rb_calls, 3);

    ck_assert_int_eq(pm__noise_ephemeral_prepare(), 0); /* one waits in the parent */
    for (int nomem = 0; nomem < 2; nomem++) {
        pid_t pid = pm_test_fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            /* A fork child: its own prepared pair, taken as in the parent;
             * or, without secret memory, -ENOMEM and pairs drawn inline. */
            int bad = nomem && pm_test_filter_call(__NR_madvise, SECCOMP_RET_ERRNO | EINVAL) != 0;
            unsigned before = rb_calls;
            bad = bad || pm__noise_ephemeral_prepare() != (nomem ? -ENOMEM : 0) ||
                  rb_calls != before + !nomem;
            bad = bad || pm__noise_ephemeral_prepare() != (nomem ? -ENOMEM : 0);
            pm__noise_ephemeral_take(priv, pub);
            memset(pat, 0x40 + (int)before + 1, sizeof(pat));
            bad = bad || rb_calls != before + 1 || memcmp(priv, pat, 32) != 0 ||
                  crypto_scalarmult_curve25519_base(want, pat) != 0 || memcmp(pub, want, 32) != 0;
            _exit(bad ? 1 : 0);
        }
        int status = pm_test_reap(pid, 20000);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the fork child%s: status %#x",
                      nomem ? " without secret memory" : "", status);
    }
    pm__noise_ephemeral_take(priv, pub); /* the parent's waits for it still */
    ck_assert_uint_eq(rb_calls, 4);
    memset(pat, 0x44, sizeof(pat));
    ck_assert_mem_eq(priv, pat, 32);
    /* A real source again, should anything after this run in the process. */
    ck_assert_int_eq(randombytes_set_implementation(&randombytes_sysrandom_implementation), 0);
}
END_TEST

/* A pair prepared before a fork serves neither process twice: the child
 * (a fork-mode worker, or any fork of the supervisor) forgets the parent's
 * prepared pair and makes its own, so the two never send the same e
 * (Noise: an ephemeral key serves one handshake). The child's e comes
 * back through a pipe; the parent's next e, from its prepared pair. */
START_TEST(test_ahead_fork_forgets)
{
    ck_assert_int_eq(pm__noise_ephemeral_prepare(), 0);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        pm__noise_hs *hs;
        unsigned char e[32], msg[256];
        size_t len;
        int bad = pm__noise_hs_new(&hs, XXPSK3, 1, "", 0, NULL) != 0 ||
                  pm_test_noise_set_static(hs, key_i) != 0 || pm__noise_hs_set_psk(hs, 0, psk_a) != 0 ||
                  pm__noise_write_message(hs, NULL, 0, msg, sizeof(msg), &len) != 0;
        if (!bad)
            memcpy(e, msg, 32);
        _exit(bad || write(p[1], e, 32) != 32 ? 1 : 0);
    }
    close(p[1]);
    unsigned char child_e[32], mine[32];
    ssize_t got = read(p[0], child_e, 32);
    int status = pm_test_reap(pid, 20000);
    close(p[0]);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's handshake: status %#x",
                  status);
    ck_assert_int_eq(got, 32);
    pm__noise_hs *hs;
    first_e(&hs, 0, mine);
    ck_assert_msg(memcmp(mine, child_e, 32) != 0, "a fork child sent its parent's prepared e");
    pm__noise_hs_free(hs);
}
END_TEST

/* ------------------------------------------------------------ measurements */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The timed loops make no Check assertion: each one writes to Check's
 * pipe, which would be most of what is measured. Failures are counted. */
static void bench_encrypt(pm__noise_transport *t, size_t size, unsigned count)
{
    static unsigned char in[4096], out[4096 + 16];
    size_t len;
    unsigned bad = 0;
    uint64_t t0 = pm_test_now_ns();
    for (unsigned i = 0; i < count; i++)
        bad += pm__noise_encrypt(t, NULL, 0, in, size, out, sizeof(out), &len) != 0;
    double s = (double)(pm_test_now_ns() - t0) / 1e9;
    ck_assert_uint_eq(bad, 0);
    printf("noise bench: encrypt %zu B records: %.0f records/s, %.1f MB/s (%u records)\n", size, count / s,
           (double)count * (double)size / s / 1e6, count);
}

/* One XXpsk3 handshake, both sides, allocation to Split and free; 0 or the
 * number of calls that failed. */
static unsigned bench_handshake(void)
{
    pm__noise_hs *hs[2] = { NULL, NULL };
    pm__noise_transport *t[2] = { NULL, NULL };
    unsigned char msg[256], back[256];
    size_t len, back_len;
    unsigned bad = 0;
    for (int side = 0; side < 2; side++) {
        bad += pm__noise_hs_new(&hs[side], XXPSK3, side == 0, "procmesh", 8, NULL) != 0;
        bad += pm_test_noise_set_static(hs[side], side == 0 ? key_i : key_r) != 0;
        bad += pm__noise_hs_set_psk(hs[side], 0, psk_a) != 0;
    }
    for (int i = 0; i < 3 && bad == 0; i++) {
        bad += pm__noise_write_message(hs[i % 2], "hi", 2, msg, sizeof(msg), &len) != 0;
        bad += pm__noise_read_message(hs[1 - i % 2], msg, len, back, sizeof(back), &back_len) != 0;
    }
    for (int side = 0; side < 2 && bad == 0; side++)
        bad += pm__noise_split(hs[side], PM__NOISE_REKEY_EVERY, &t[side]) != 0;
    free_pair(hs, t);
    return bad;
}

/* Figures for the report, never asserted: an XXpsk3 handshake with both
 * sides in this process (state allocation, three messages, Split, free),
 * median of 1000; transport encryption of 64 B and 4 KiB records. */
START_TEST(test_bench)
{
    unsigned n = pm_test_sanitized() ? 100 : 1000, bad = 0;
    uint64_t *ns = calloc(n, sizeof(*ns));
    ck_assert_ptr_nonnull(ns);
    for (unsigned i = 0; i < n; i++) {
        uint64_t t0 = pm_test_now_ns();
        bad += bench_handshake();
        ns[i] = pm_test_now_ns() - t0;
    }
    ck_assert_uint_eq(bad, 0);
    qsort(ns, n, sizeof(*ns), cmp_u64);
    printf("noise bench: XXpsk3 handshake, both sides: median %.1f us, p10 %.1f us, p90 %.1f us (%u runs)\n",
           ns[n / 2] / 1e3, ns[n / 10] / 1e3, ns[n * 9 / 10] / 1e3, n);
    free(ns);

    pm__noise_hs *hs[2];
    pm__noise_transport *t[2];
    new_pair(hs, XXPSK3, "procmesh", 0);
    connect_pair(hs, t, PM__NOISE_REKEY_EVERY);
    unsigned scale = pm_test_sanitized() ? 10 : 1;
    bench_encrypt(t[0], 64, 500000 / scale);
    bench_encrypt(t[0], 4096, 50000 / scale);
    fflush(stdout);
    free_pair(hs, t);
}
END_TEST

int main(void)
{
    if (getenv("PM_NOISE_FRESH") != NULL)
        return fresh_sodium_ready();
    if (sodium_init() < 0)
        pm_test_skip("libsodium does not initialise");
    Suite *s = suite_create("noise");
    PM_ADD_TEST(s, test_vectors, 60);
    PM_ADD_TEST(s, test_name_rows, 30);
    PM_ADD_TEST(s, test_start_key_rows, 30);
    PM_ADD_TEST(s, test_done_refuses, 30);
    PM_ADD_TEST(s, test_message_argument_rows, 30);
    PM_ADD_TEST(s, test_names, 30);
    PM_ADD_TEST(s, test_misuse, 30);
    PM_ADD_TEST(s, test_tampered_handshake, 120);
    PM_ADD_TEST(s, test_hostile_handshake, 120);
    PM_ADD_TEST(s, test_transport_faults, 30);
    PM_ADD_TEST(s, test_rekey, 30);
    PM_ADD_TEST(s, test_fork_secrets, 30);
    PM_ADD_TEST(s, test_ahead, 60);
    PM_ADD_TEST(s, test_ahead_fork_forgets, 60);
    PM_ADD_TEST(s, test_ahead_pair_taken, 60);
    PM_ADD_TEST(s, test_transport_argument_rows, 60);
    PM_ADD_TEST(s, test_secret_cache, 60);
    PM_ADD_TEST(s, test_sodium_ready_fresh, 60);
    PM_ADD_TEST(s, test_bench, 120);
    return pm_test_main(s);
}
