/* llm_text.c: the text helpers the llm agent's two files share: a growing string, and the repair
 * of bytes that are not UTF-8 (a model's reply, a device name) before the store, the dashboard
 * and JSON readers see them. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "llm_impl.h"

void llm_buf_add(llm_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1)
            cap *= 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void llm_buf_puts(llm_buf *b, const char *s) {
    llm_buf_add(b, s, strlen(s));
}

void llm_buf_printf(llm_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    KILN_ASSERT(n >= 0 && s);
    llm_buf_add(b, s, (size_t)n);
    free(s);
}

char *llm_buf_take(llm_buf *b) {
    if (!b->p)
        return xstrdup("");
    char *p = b->p;
    b->p = NULL;
    b->n = b->cap = 0;
    return p;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 when it is not one. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, min = 0x10000;
    else
        return 0;
    if (n < len)
        return 0;
    unsigned cp = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/* A copy of n bytes that is valid UTF-8 without NUL bytes: each byte that starts no valid sequence
 * becomes '?', NUL becomes a space. */
char *llm_utf8_clean(const char *s, size_t n) {
    char *out = xmalloc(n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (k == 0) {
            out[o++] = '?';
            i++;
        } else if (k == 1 && s[i] == 0) {
            out[o++] = ' ';
            i++;
        } else {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        }
    }
    out[o] = 0;
    return out;
}
