/* safetensors.c: a strict reader and an atomic writer for safetensors files. */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

/*
 * The reader accepts exactly what the reference implementation (the Rust `safetensors` crate)
 * accepts, and says precisely why it rejects the rest: the header length must fit the file and stay
 * under 100 MB; the header must be UTF-8 JSON holding one object; every entry but "__metadata__" is
 * a tensor with a known dtype, a shape of non-negative integers and data_offsets [begin, end] whose
 * span is the shape's size in bytes; the tensors must tile the data area exactly (no overlap, no
 * gap, nothing after the last one). cJSON keeps duplicate keys, so they are looked for explicitly.
 *
 * After the header is checked the data area is moved to the start of the buffer, so every tensor
 * lies at malloc alignment plus its own offset, whatever the header's length.
 *
 * safetensors' "F4" counts 4-bit values; kiln's float4_e2m1fn_x2 (like PyTorch's) counts bytes, two
 * values each, so the reader halves the last dimension and the writer doubles it.
 */

#define ST_MAX_HEADER_BYTES 100000000ULL      /* the reference implementation's limit */
#define JSON_MAX_EXACT_INT 9007199254740992.0 /* 2^53: cJSON holds numbers as doubles */

struct kiln_st {
    char *buf; /* the data area, at offset 0 */
    int n;
    kiln_st_tensor *tensors;
    int n_meta;
    char **meta_keys, **meta_values;
};

/* One header entry while it is checked. */
typedef struct {
    const char *name;
    kiln_dtype dtype;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    uint64_t begin, end, n_bytes;
} st_entry;

/* ---- helpers ---- */

/* Offset of the first byte that breaks UTF-8 (overlong forms and surrogates included), or len. */
static size_t utf8_check(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        size_t n;
        unsigned min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 1, min = 0x80, c &= 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2, min = 0x800, c &= 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3, min = 0x10000, c &= 0x07;
        } else {
            return i;
        }
        if (len - i <= n)
            return i;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return i;
            c = (c << 6) | (s[i + k] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
            return i;
        i += n + 1;
    }
    return len;
}

/* A JSON number that is a non-negative integer cJSON holds exactly. */
static int json_uint(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item))
        return -1;
    double v = item->valuedouble;
    if (!(v >= 0 && v <= JSON_MAX_EXACT_INT) || v != (double)(uint64_t)v)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

/* The member called key; *dup is set when it appears more than once. */
static const cJSON *member(const cJSON *obj, const char *key, int *dup) {
    const cJSON *found = NULL;
    for (const cJSON *c = obj->child; c; c = c->next) {
        if (c->string && strcmp(c->string, key) == 0) {
            if (found)
                *dup = 1;
            else
                found = c;
        }
    }
    return found;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name that appears twice among names[0..n), or NULL. Sorts a copy: O(n log n). */
static const char *first_duplicate(const char **names, int n) {
    if (n < 2)
        return NULL;
    const char **sorted = xmalloc((size_t)n * sizeof *sorted);
    memcpy(sorted, names, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_str_ptr);
    const char *dup = NULL;
    for (int i = 1; i < n && !dup; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0)
            dup = sorted[i];
    free(sorted);
    return dup;
}

/* A tensor's place in the data area, sorted to check the tiling (qsort has no context argument). */
typedef struct {
    uint64_t begin, end;
    int index;
} st_span;

static int cmp_spans(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

static void shape_text(const int64_t *shape, int ndim, char *buf, size_t cap) {
    size_t len = 0;
    len += (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && len < cap; d++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
}

/* Dtype names the format defines but kiln has no type for: unsupported rather than malformed. */
static int st_dtype_known_elsewhere(const char *name) {
    static const char *const others[] = {"U16",         "U32",         "U64",     "C64",
                                         "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0", "F6_E2M3",
                                         "F6_E3M2",     "E8M0"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        if (strcmp(name, others[i]) == 0)
            return 1;
    return 0;
}

/* ---- reading ---- */

static int parse_entry(const cJSON *item, const char *label, st_entry *e, kiln_err *err) {
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return kiln_errf(err, KILN_ERR_FORMAT, "%s: tensor '%s': entry is not a JSON object", label,
                         name);
    int dup = 0;
    const cJSON *dtype = member(item, "dtype", &dup);
    const cJSON *shape = member(item, "shape", &dup);
    const cJSON *offsets = member(item, "data_offsets", &dup);
    if (dup)
        return kiln_errf(err, KILN_ERR_FORMAT, "%s: tensor '%s': a field appears twice", label,
                         name);
    if (!dtype)
        return kiln_errf(err, KILN_ERR_FORMAT, "%s: tensor '%s': field 'dtype' is missing", label,
                         name);
    if (!cJSON_IsString(dtype))
        return kiln_errf(err, KILN_ERR_FORMAT, "%s: tensor '%s': field 'dtype' is not a string",
                         label, name);
    if (kiln_dtype_parse_st(dtype->valuestring, &e->dtype) != 0) {
        int other = st_dtype_known_elsewhere(dtype->valuestring);
        return kiln_errf(err, other ? KILN_ERR_UNSUPPORTED : KILN_ERR_FORMAT,
                         "%s: tensor '%s': field 'dtype': %s dtype '%.40s'", label, name,
                         other ? "kiln does not support" : "unknown", dtype->valuestring);
    }
    if (!shape)
        return kiln_errf(err, KILN_ERR_FORMAT, "%s: tensor '%s': field 'shape' is missing", label,
                         name);
    if (!cJSON_IsArray(shape))
        return kiln_errf(err, KILN_ERR_FORMAT, "%s: tensor '%s': field 'shape' is not an array",
                         label, name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > KILN_MAX_DIMS)
        return kiln_errf(err, KILN_ERR_UNSUPPORTED,
                         "%s: tensor '%s': field 'shape' has %d dimensions, more than kiln's %d",
                         label, name, ndim, KILN_MAX_DIMS);
    e->ndim = 0;
    uint64_t numel = 1;
    int overflow = 0;
    for (const cJSON *d = shape->child; d; d = d->next) {
        uint64_t v;
        if (json_uint(d, &v) != 0)
            return kiln_errf(err, KILN_ERR_FORMAT,
                             "%s: tensor '%s': field 'shape': dimension %d is not a non-negative "
                             "integer",
                             label, name, e->ndim);
        e->shape[e->ndim++] = (int64_t)v;
        overflow |= __builtin_mul_overflow(numel, v, &numel);
    }
    if (!offsets)
        return kiln_errf(err, KILN_ERR_FORMAT, "%s: tensor '%s': field 'data_offsets' is missing",
                         label, name);
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
        json_uint(offsets->child, &e->begin) != 0 || json_uint(offsets->child->next, &e->end) != 0)
        return kiln_errf(err, KILN_ERR_FORMAT,
                         "%s: tensor '%s': field 'data_offsets' is not [begin, end] with two "
                         "non-negative integers",
                         label, name);
    char sh[256]; /* as the file gives it, for the messages */
    shape_text(e->shape, e->ndim, sh, sizeof sh);
    if (e->dtype == KILN_F4_E2M1X2) {
        if (e->ndim == 0 || e->shape[e->ndim - 1] % 2 != 0)
            return kiln_errf(err, KILN_ERR_UNSUPPORTED,
                             "%s: tensor '%s': field 'shape': F4 data needs an even last dimension "
                             "to be held as float4_e2m1fn_x2",
                             label, name);
        e->shape[e->ndim - 1] /= 2;
        numel /= 2;
    }
    if (overflow || __builtin_mul_overflow(numel, (uint64_t)kiln_dtype_size(e->dtype), &e->n_bytes))
        return kiln_errf(err, KILN_ERR_FORMAT,
                         "%s: tensor '%s': field 'shape': the size in bytes overflows 64 bits",
                         label, name);
    if (e->begin > e->end)
        return kiln_errf(err, KILN_ERR_FORMAT,
                         "%s: tensor '%s': field 'data_offsets': begin %" PRIu64
                         " is after end %" PRIu64,
                         label, name, e->begin, e->end);
    if (e->end - e->begin != e->n_bytes)
        return kiln_errf(err, KILN_ERR_FORMAT,
                         "%s: tensor '%s': field 'data_offsets' spans %" PRIu64
                         " bytes but dtype %s and shape %s need %" PRIu64,
                         label, name, e->end - e->begin, dtype->valuestring, sh, e->n_bytes);
    e->name = name;
    return KILN_OK;
}

static int parse_metadata(const cJSON *item, const char *label, kiln_st *st, kiln_err *err) {
    if (cJSON_IsNull(item))
        return KILN_OK;
    if (!cJSON_IsObject(item))
        return kiln_errf(err, KILN_ERR_FORMAT, "%s: field '__metadata__' is not a JSON object",
                         label);
    int n = cJSON_GetArraySize(item);
    const char **keys = xcalloc((size_t)n + 1, sizeof *keys);
    int i = 0;
    for (const cJSON *c = item->child; c; c = c->next) {
        if (!cJSON_IsString(c)) {
            free(keys);
            return kiln_errf(err, KILN_ERR_FORMAT,
                             "%s: field '__metadata__': value of '%.100s' is not a string", label,
                             c->string);
        }
        keys[i++] = c->string;
    }
    const char *dup = first_duplicate(keys, n);
    free(keys);
    if (dup)
        return kiln_errf(err, KILN_ERR_FORMAT,
                         "%s: field '__metadata__': key '%.100s' appears twice", label, dup);
    st->meta_keys = xcalloc((size_t)n + 1, sizeof(char *));
    st->meta_values = xcalloc((size_t)n + 1, sizeof(char *));
    for (const cJSON *c = item->child; c; c = c->next) {
        st->meta_keys[st->n_meta] = xstrdup(c->string);
        st->meta_values[st->n_meta++] = xstrdup(c->valuestring);
    }
    return KILN_OK;
}

/* Checks that the tensors tile [0, data_len) exactly. */
static int check_layout(const st_entry *ents, int n, uint64_t data_len, const char *label,
                        kiln_err *err) {
    int rc = KILN_OK;
    st_span *order = xmalloc(((size_t)n + 1) * sizeof *order);
    for (int i = 0; i < n; i++)
        order[i] = (st_span){ents[i].begin, ents[i].end, i};
    qsort(order, (size_t)n, sizeof *order, cmp_spans);
    uint64_t cursor = 0;
    int prev = -1;
    for (int k = 0; k < n && rc == KILN_OK; k++) {
        const st_entry *e = &ents[order[k].index];
        if (e->end > data_len)
            rc = kiln_errf(err, KILN_ERR_FORMAT,
                           "%s: tensor '%s': field 'data_offsets' [%" PRIu64 ", %" PRIu64
                           "] runs past the data area (%" PRIu64 " bytes)",
                           label, e->name, e->begin, e->end, data_len);
        else if (e->begin < cursor)
            rc = kiln_errf(err, KILN_ERR_FORMAT,
                           "%s: tensor '%s': field 'data_offsets' [%" PRIu64 ", %" PRIu64
                           "] overlaps tensor '%s'",
                           label, e->name, e->begin, e->end, ents[prev].name);
        else if (e->begin > cursor)
            rc = kiln_errf(err, KILN_ERR_FORMAT,
                           "%s: tensor '%s': field 'data_offsets': bytes [%" PRIu64 ", %" PRIu64
                           ") of the data area before it belong to no tensor",
                           label, e->name, cursor, e->begin);
        if (e->end > cursor || prev < 0) {
            cursor = e->end;
            prev = order[k].index;
        }
    }
    if (rc == KILN_OK && cursor != data_len)
        rc = kiln_errf(err, KILN_ERR_FORMAT,
                       "%s: field 'data_offsets': the data area has %" PRIu64
                       " bytes but the tensors end at %" PRIu64,
                       label, data_len, cursor);
    free(order);
    return rc;
}

/* Parses buf (xmalloc'ed, len bytes), taking ownership of it whatever the outcome. */
static int parse_owned(char *buf, size_t len, const char *label, kiln_st **out, kiln_err *err) {
    int rc = KILN_OK;
    char *hdr = NULL;
    cJSON *root = NULL;
    st_entry *ents = NULL;
    const char **names = NULL;
    kiln_st *st = xcalloc(1, sizeof *st);
    *out = NULL;

    if (len < 8) {
        rc = kiln_errf(err, KILN_ERR_FORMAT,
                       "%s: header length: the file has %zu bytes, fewer than the 8 of the length",
                       label, len);
        goto done;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | (unsigned char)buf[i];
    if (n > ST_MAX_HEADER_BYTES) {
        rc = kiln_errf(err, KILN_ERR_FORMAT,
                       "%s: header length %" PRIu64 " is over the limit of %llu bytes", label, n,
                       ST_MAX_HEADER_BYTES);
        goto done;
    }
    if (n > len - 8) {
        rc = kiln_errf(err, KILN_ERR_FORMAT,
                       "%s: header length %" PRIu64
                       " runs past the end of the file (%zu bytes follow "
                       "the length)",
                       label, n, len - 8);
        goto done;
    }
    /* cJSON gets a NUL-terminated copy, so that it cannot read past the header whatever it holds.
     */
    hdr = xstrndup(buf + 8, (size_t)n);
    if (strlen(hdr) != n) {
        rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: header: NUL byte at offset %zu", label,
                       strlen(hdr));
        goto done;
    }
    size_t bad = utf8_check((const unsigned char *)hdr, (size_t)n);
    if (bad != n) {
        rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: header: not valid UTF-8 at offset %zu", label,
                       bad);
        goto done;
    }
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(hdr, (size_t)n, &end, 0);
    if (!root) {
        rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: header: not valid JSON (error near offset %zu)",
                       label, end ? (size_t)(end - hdr) : (size_t)0);
        goto done;
    }
    for (const char *p = end; *p; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            rc = kiln_errf(err, KILN_ERR_FORMAT,
                           "%s: header: text after the JSON object at offset %zu", label,
                           (size_t)(p - hdr));
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: header: not a JSON object", label);
        goto done;
    }

    int n_items = cJSON_GetArraySize(root), n_ents = 0, seen_meta = 0;
    ents = xcalloc((size_t)n_items + 1, sizeof *ents);
    names = xcalloc((size_t)n_items + 1, sizeof *names);
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (seen_meta++) {
                rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: field '__metadata__' appears twice",
                               label);
                goto done;
            }
            if ((rc = parse_metadata(c, label, st, err)) != KILN_OK)
                goto done;
            continue;
        }
        if ((rc = parse_entry(c, label, &ents[n_ents], err)) != KILN_OK)
            goto done;
        names[n_ents] = ents[n_ents].name;
        n_ents++;
    }
    const char *dup = first_duplicate(names, n_ents);
    if (dup) {
        rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: tensor '%.100s' appears twice in the header",
                       label, dup);
        goto done;
    }
    uint64_t data_len = (uint64_t)len - 8 - n;
    if ((rc = check_layout(ents, n_ents, data_len, label, err)) != KILN_OK)
        goto done;

    memmove(buf, buf + 8 + n, (size_t)data_len);
    st->buf = buf;
    buf = NULL;
    st->n = n_ents;
    st->tensors = xcalloc((size_t)n_ents + 1, sizeof *st->tensors);
    for (int i = 0; i < n_ents; i++) {
        kiln_st_tensor *t = &st->tensors[i];
        t->name = xstrdup(ents[i].name);
        t->dtype = ents[i].dtype;
        t->ndim = ents[i].ndim;
        memcpy(t->shape, ents[i].shape, sizeof t->shape);
        t->n_bytes = (size_t)ents[i].n_bytes;
        t->data = st->buf + ents[i].begin;
    }
    *out = st;
    st = NULL;
done:
    free(names);
    free(ents);
    cJSON_Delete(root);
    free(hdr);
    free(buf);
    kiln_st_free(st);
    return rc;
}

int kiln_st_parse(const void *buf, size_t len, const char *label, kiln_st **out, kiln_err *err) {
    char *copy = xmalloc(len);
    if (len)
        memcpy(copy, buf, len);
    return parse_owned(copy, len, label ? label : "<memory>", out, err);
}

int kiln_st_load(const char *path, kiln_st **out, kiln_err *err) {
    char *buf;
    size_t len;
    *out = NULL;
    int rc = kiln_read_file(path, &buf, &len, err);
    if (rc != KILN_OK)
        return rc;
    return parse_owned(buf, len, path, out, err);
}

int kiln_st_parse_owned(char *buf, size_t len, const char *label, kiln_st **out, kiln_err *err) {
    *out = NULL;
    return parse_owned(buf, len, label, out, err);
}

void kiln_st_free(kiln_st *st) {
    if (!st)
        return;
    for (int i = 0; i < st->n; i++)
        free((char *)st->tensors[i].name);
    free(st->tensors);
    for (int i = 0; i < st->n_meta; i++) {
        free(st->meta_keys[i]);
        free(st->meta_values[i]);
    }
    free(st->meta_keys);
    free(st->meta_values);
    free(st->buf);
    free(st);
}

int kiln_st_count(const kiln_st *st) {
    return st->n;
}

const kiln_st_tensor *kiln_st_at(const kiln_st *st, int i) {
    KILN_ASSERT(i >= 0 && i < st->n);
    return &st->tensors[i];
}

const kiln_st_tensor *kiln_st_find(const kiln_st *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->tensors[i].name, name) == 0)
            return &st->tensors[i];
    return NULL;
}

const char *kiln_st_metadata(const kiln_st *st, const char *key) {
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_keys[i], key) == 0)
            return st->meta_values[i];
    return NULL;
}

/* ---- writing ---- */

typedef struct {
    char *p;
    size_t len, cap;
} strbuf;

static void sb_add(strbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(strbuf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    KILN_ASSERT(n >= 0 && (size_t)n < sizeof tmp);
    sb_add(b, tmp, (size_t)n);
}

static void sb_json_string(strbuf *b, const char *s) {
    sb_add(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            sb_add(b, esc, 2);
        } else if (c < 0x20) {
            sb_printf(b, "\\u%04x", c);
        } else {
            sb_add(b, s, 1);
        }
    }
    sb_add(b, "\"", 1);
}

static int check_for_write(const kiln_st_tensor *t, int i, const char *path, kiln_err *err) {
    if (!t->name)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: tensor %d has no name", path, i);
    if (strcmp(t->name, "__metadata__") == 0 ||
        utf8_check((const unsigned char *)t->name, strlen(t->name)) != strlen(t->name))
        return kiln_errf(err, KILN_ERR_INVALID, "%s: tensor %d: name '%.100s' is not allowed", path,
                         i, t->name);
    if ((int)t->dtype < 0 || t->dtype >= KILN_DTYPE_COUNT)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: tensor '%s': invalid dtype %d", path, t->name,
                         (int)t->dtype);
    if (!kiln_dtype_st_name(t->dtype))
        return kiln_errf(err, KILN_ERR_UNSUPPORTED, "%s: tensor '%s': safetensors cannot hold %s",
                         path, t->name, kiln_dtype_name(t->dtype));
    if (t->ndim < 0 || t->ndim > KILN_MAX_DIMS || (t->dtype == KILN_F4_E2M1X2 && t->ndim == 0))
        return kiln_errf(err, KILN_ERR_INVALID, "%s: tensor '%s': %d dimensions", path, t->name,
                         t->ndim);
    uint64_t numel = 1, n_bytes;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)t->shape[d], &numel))
            return kiln_errf(err, KILN_ERR_INVALID, "%s: tensor '%s': bad dimension %d", path,
                             t->name, d);
    }
    if (__builtin_mul_overflow(numel, (uint64_t)kiln_dtype_size(t->dtype), &n_bytes) ||
        n_bytes != t->n_bytes)
        return kiln_errf(err, KILN_ERR_INVALID,
                         "%s: tensor '%s': n_bytes %zu does not match its dtype and shape", path,
                         t->name, t->n_bytes);
    if (t->n_bytes > 0 && !t->data)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: tensor '%s': no data", path, t->name);
    return KILN_OK;
}

int kiln_st_write(const char *path, const kiln_st_tensor *tensors, int n, kiln_err *err) {
    KILN_ASSERT(path && n >= 0 && (n == 0 || tensors));
    int rc = KILN_OK;
    strbuf hdr = {0};
    char *tmp = NULL;
    FILE *f = NULL;
    const char **names = xcalloc((size_t)n + 1, sizeof *names);
    for (int i = 0; i < n; i++) {
        if ((rc = check_for_write(&tensors[i], i, path, err)) != KILN_OK)
            goto done;
        names[i] = tensors[i].name;
    }
    const char *dup = first_duplicate(names, n);
    if (dup) {
        rc = kiln_errf(err, KILN_ERR_INVALID, "%s: tensor name '%.100s' is given twice", path, dup);
        goto done;
    }

    sb_add(&hdr, "{", 1);
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const kiln_st_tensor *t = &tensors[i];
        if (i)
            sb_add(&hdr, ",", 1);
        sb_json_string(&hdr, t->name);
        sb_printf(&hdr, ":{\"dtype\":\"%s\",\"shape\":[", kiln_dtype_st_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) {
            int64_t dim = t->shape[d];
            if (t->dtype == KILN_F4_E2M1X2 && d == t->ndim - 1)
                dim *= 2; /* safetensors counts 4-bit values */
            sb_printf(&hdr, "%s%" PRId64, d ? "," : "", dim);
        }
        sb_printf(&hdr, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", offset,
                  offset + (uint64_t)t->n_bytes);
        offset += t->n_bytes;
    }
    sb_add(&hdr, "}", 1);
    while (hdr.len % 8 != 0) /* as the reference writer does: data starts 8-byte aligned */
        sb_add(&hdr, " ", 1);

    unsigned char len_bytes[8];
    for (int i = 0; i < 8; i++)
        len_bytes[i] = (unsigned char)((uint64_t)hdr.len >> (8 * i));
    tmp = xasprintf("%s.tmp.%d", path, (int)getpid());
    f = fopen(tmp, "wb");
    if (!f) {
        rc = kiln_errf(err, KILN_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        goto done;
    }
    bool ok = fwrite(len_bytes, 1, 8, f) == 8 && fwrite(hdr.p, 1, hdr.len, f) == hdr.len;
    for (int i = 0; i < n && ok; i++)
        ok = tensors[i].n_bytes == 0 ||
             fwrite(tensors[i].data, 1, tensors[i].n_bytes, f) == tensors[i].n_bytes;
    int close_rc = fclose(f);
    f = NULL;
    if (!ok || close_rc != 0) {
        rc = kiln_errf(err, KILN_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        unlink(tmp);
        goto done;
    }
    if (rename(tmp, path) != 0) {
        rc = kiln_errf(err, KILN_ERR_IO, "%s: rename failed: %s", path, strerror(errno));
        unlink(tmp);
    }
done:
    free(names);
    free(hdr.p);
    free(tmp);
    return rc;
}
