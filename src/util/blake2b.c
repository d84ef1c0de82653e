/* blake2b.c: BLAKE2b as RFC 7693 specifies it (sections 2 and 3), written for kiln. */
#include "blake2b.h"

#include <stdio.h>
#include <string.h>

static const uint64_t iv[8] = {0x6a09e667f3bcc908ull, 0xbb67ae8584caa73bull, 0x3c6ef372fe94f82bull,
                               0xa54ff53a5f1d36f1ull, 0x510e527fade682d1ull, 0x9b05688c2b3e6c1full,
                               0x1f83d9abfb41bd6bull, 0x5be0cd19137e2179ull};

/* The message schedule: round r reads the message words in the order sigma[r % 10]. */
static const unsigned char sigma[10][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
};

static inline uint64_t rotr(uint64_t x, int n) {
    return (x >> n) | (x << (64 - n));
}

/* A little-endian 64-bit word (one load on the little-endian machines kiln runs on). */
static inline uint64_t load64(const unsigned char *p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
#else
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
#endif
}

#define G(a, b, c, d, x, y)                                                                        \
    do {                                                                                           \
        v[a] = v[a] + v[b] + (x);                                                                  \
        v[d] = rotr(v[d] ^ v[a], 32);                                                              \
        v[c] = v[c] + v[d];                                                                        \
        v[b] = rotr(v[b] ^ v[c], 24);                                                              \
        v[a] = v[a] + v[b] + (y);                                                                  \
        v[d] = rotr(v[d] ^ v[a], 16);                                                              \
        v[c] = v[c] + v[d];                                                                        \
        v[b] = rotr(v[b] ^ v[c], 63);                                                              \
    } while (0)

static void compress(kiln_blake2b *s, const unsigned char *block, int last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++)
        m[i] = load64(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = s->h[i];
        v[i + 8] = iv[i];
    }
    v[12] ^= s->t[0];
    v[13] ^= s->t[1];
    if (last)
        v[14] = ~v[14];
        /* the twelve rounds unrolled, so that every message index is a constant */
#define ROUND(r)                                                                                   \
    do {                                                                                           \
        G(0, 4, 8, 12, m[sigma[r][0]], m[sigma[r][1]]);                                            \
        G(1, 5, 9, 13, m[sigma[r][2]], m[sigma[r][3]]);                                            \
        G(2, 6, 10, 14, m[sigma[r][4]], m[sigma[r][5]]);                                           \
        G(3, 7, 11, 15, m[sigma[r][6]], m[sigma[r][7]]);                                           \
        G(0, 5, 10, 15, m[sigma[r][8]], m[sigma[r][9]]);                                           \
        G(1, 6, 11, 12, m[sigma[r][10]], m[sigma[r][11]]);                                         \
        G(2, 7, 8, 13, m[sigma[r][12]], m[sigma[r][13]]);                                          \
        G(3, 4, 9, 14, m[sigma[r][14]], m[sigma[r][15]]);                                          \
    } while (0)
    ROUND(0);
    ROUND(1);
    ROUND(2);
    ROUND(3);
    ROUND(4);
    ROUND(5);
    ROUND(6);
    ROUND(7);
    ROUND(8);
    ROUND(9);
    ROUND(0);
    ROUND(1);
#undef ROUND
    for (int i = 0; i < 8; i++)
        s->h[i] ^= v[i] ^ v[i + 8];
}

static void count(kiln_blake2b *s, size_t n) {
    s->t[0] += n;
    if (s->t[0] < n)
        s->t[1]++;
}

void kiln_blake2b_init(kiln_blake2b *s, size_t out_len) {
    memset(s, 0, sizeof *s);
    s->out_len = out_len < 1 ? 1 : out_len > 64 ? 64 : out_len;
    memcpy(s->h, iv, sizeof iv);
    s->h[0] ^= 0x01010000ull ^ (uint64_t)s->out_len; /* depth 1, fanout 1, no key */
}

void kiln_blake2b_update(kiln_blake2b *s, const void *data, size_t len) {
    const unsigned char *p = data;
    /* A full buffer is compressed only once more input arrives: the last block must be compressed
     * with the final flag. */
    while (len > 0) {
        if (s->n_buf == 128) {
            count(s, 128);
            compress(s, s->buf, 0);
            s->n_buf = 0;
        }
        if (s->n_buf == 0 && len > 128) {
            count(s, 128);
            compress(s, p, 0);
            p += 128;
            len -= 128;
            continue;
        }
        size_t take = 128 - s->n_buf < len ? 128 - s->n_buf : len;
        memcpy(s->buf + s->n_buf, p, take);
        s->n_buf += take;
        p += take;
        len -= take;
    }
}

void kiln_blake2b_final(kiln_blake2b *s, unsigned char *out) {
    count(s, s->n_buf);
    memset(s->buf + s->n_buf, 0, 128 - s->n_buf);
    compress(s, s->buf, 1);
    for (size_t i = 0; i < s->out_len; i++)
        out[i] = (unsigned char)(s->h[i / 8] >> (8 * (i % 8)));
}

void kiln_blake2b_hex(const void *data, size_t len, size_t out_len, char *hex) {
    kiln_blake2b s;
    unsigned char d[64];
    kiln_blake2b_init(&s, out_len);
    kiln_blake2b_update(&s, data, len);
    kiln_blake2b_final(&s, d);
    for (size_t i = 0; i < s.out_len; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}
