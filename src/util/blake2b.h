/* blake2b.h: BLAKE2b (RFC 7693), the content hash of kiln's reference files: Python's
 * hashlib.blake2b writes it, kiln checks it, so a file that changed on disk is rebuilt, never
 * used. Unkeyed, any digest length from 1 to 64 bytes. */
#ifndef KILN_BLAKE2B_H
#define KILN_BLAKE2B_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t h[8], t[2];
    unsigned char buf[128];
    size_t n_buf, out_len;
} kiln_blake2b;

void kiln_blake2b_init(kiln_blake2b *s, size_t out_len);
void kiln_blake2b_update(kiln_blake2b *s, const void *data, size_t len);
void kiln_blake2b_final(kiln_blake2b *s, unsigned char *out);
/* The digest of data as lower-case hex into hex (2 * out_len + 1 bytes). */
void kiln_blake2b_hex(const void *data, size_t len, size_t out_len, char *hex);

#endif
