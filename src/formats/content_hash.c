/* content_hash.c: the content hash of a problem directory, by the recipe of docs/capture.md ("A
 * problem is its content"), the same one python/kiln/problem.py follows:
 *
 *   D = definition.json without "name", "description" and "kiln", plus "kiln": {"torch_flags"} when
 *       the definition has them;
 *   W = each line of workload.jsonl (a trace record's "workload"), except random sets, without
 *       "uuid" and "kiln", every safetensors input replaced by its digest, and "kiln": {"drawn"}
 *       kept with each real slice replaced by its digest;
 *   hash = BLAKE2b-128 of "kiln-content-hash 1\n" + the canonical lines of {"definition": D,
 *          "workloads": [W...]}.
 *
 * A digest is {"dtype", "shape"} of the tensor's safetensors header entry and "blake2b" of its data
 * bytes, read in chunks so that a tensor of any size hashes in constant memory.
 *
 * The digests of the data are kept in PROBLEM/kiln/digests.json, each with the file's stat (size,
 * modification and change times in ns, inode, device) and the tensor's data offsets: a later call
 * whose file has the same stat takes the digest from there instead of reading gigabytes again
 * (kiln submit hashes the problem for every kernel, kiln optimize on every resume). Any write to
 * the file changes its change time, so an edited tensor is read again. Writing the cache is best
 * effort: a problem directory kiln may not write is hashed in full every time. */
#include "content_hash.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/blake2b.h"

#define TAG "kiln-content-hash 1\n"
#define HEADER_MAX (100u << 20) /* the most header bytes a safetensors file may claim */
#define CHUNK (16u << 20)

static int io_error(kiln_err *err, const char *path, int e) {
    return kiln_errf(err, KILN_ERR_IO, "%s: cannot read: %s", path, strerror(e));
}

static const char *str_item(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The digest cache of one call (kiln/digests.json: {"<path>|<key>": {"stat", "blake2b"}}). */
typedef struct {
    cJSON *cache;
    int changed;
} digests;

/* *out = {"dtype", "shape", "blake2b"} of tensor key of the safetensors file at path. */
static int tensor_digest(const char *path, const char *key, digests *dg, cJSON **out,
                         kiln_err *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return io_error(err, path, errno);
    struct stat st;
    char sig[192] = "";
    if (fstat(fileno(f), &st) == 0)
        snprintf(sig, sizeof sig, "%lld:%lld.%09ld:%lld.%09ld:%llu:%llu", (long long)st.st_size,
                 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (long long)st.st_ctim.tv_sec,
                 st.st_ctim.tv_nsec, (unsigned long long)st.st_ino, (unsigned long long)st.st_dev);
    char *cache_key = xasprintf("%s|%s", path, key);
    int rc = KILN_ERR_FORMAT;
    cJSON *header = NULL;
    char *hbuf = NULL, *chunk = NULL;
    unsigned char head[8];
    if (fread(head, 1, 8, f) != 8) {
        rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: not a safetensors file", path);
        goto done;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | head[i];
    if (n > HEADER_MAX) {
        rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: safetensors header of %llu bytes", path,
                       (unsigned long long)n);
        goto done;
    }
    hbuf = xmalloc((size_t)n + 1);
    if (fread(hbuf, 1, (size_t)n, f) != (size_t)n) {
        rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: malformed safetensors header", path);
        goto done;
    }
    header = cJSON_ParseWithLength(hbuf, (size_t)n);
    const cJSON *entry =
        cJSON_IsObject(header) ? cJSON_GetObjectItemCaseSensitive(header, key) : NULL;
    if (!cJSON_IsObject(entry)) {
        if (cJSON_IsObject(header))
            rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: no tensor '%s'", path, key);
        else
            rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: malformed safetensors header", path);
        goto done;
    }
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    const cJSON *b = cJSON_GetArrayItem(offs, 0), *e = cJSON_GetArrayItem(offs, 1);
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !cJSON_IsNumber(b) ||
        !cJSON_IsNumber(e) || b->valuedouble < 0 || e->valuedouble < b->valuedouble || !dtype ||
        !shape) {
        rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: malformed safetensors header", path);
        goto done;
    }
    uint64_t begin = (uint64_t)b->valuedouble, left = (uint64_t)e->valuedouble - begin;
    char hex[33];
    char *full_sig =
        xasprintf("%s:%llu:%llu", sig, (unsigned long long)begin, (unsigned long long)left);
    const cJSON *hit = cJSON_GetObjectItemCaseSensitive(dg->cache, cache_key);
    const char *hit_sig = str_item(hit, "stat"), *hit_hex = str_item(hit, "blake2b");
    if (sig[0] && hit_sig && hit_hex && strcmp(hit_sig, full_sig) == 0 && strlen(hit_hex) == 32) {
        snprintf(hex, sizeof hex, "%s", hit_hex);
        free(full_sig);
        goto digest;
    }
    if (fseeko(f, (off_t)(8 + n + begin), SEEK_SET) != 0) {
        rc = io_error(err, path, errno);
        goto done;
    }
    kiln_blake2b h;
    kiln_blake2b_init(&h, 16);
    chunk = xmalloc(left < CHUNK ? (size_t)left + 1 : CHUNK);
    while (left > 0) {
        size_t want = left < CHUNK ? (size_t)left : CHUNK;
        size_t got = fread(chunk, 1, want, f);
        if (got == 0) {
            if (ferror(f))
                rc = io_error(err, path, errno);
            else
                rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: tensor '%s' is cut short", path, key);
            goto done;
        }
        kiln_blake2b_update(&h, chunk, got);
        left -= got;
    }
    unsigned char d[16];
    kiln_blake2b_final(&h, d);
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    if (sig[0]) {
        cJSON *ent = cJSON_CreateObject();
        cJSON_AddStringToObject(ent, "stat", full_sig);
        cJSON_AddStringToObject(ent, "blake2b", hex);
        cJSON_DeleteItemFromObjectCaseSensitive(dg->cache, cache_key);
        cJSON_AddItemToObject(dg->cache, cache_key, ent);
        dg->changed = 1;
    }
    free(full_sig);
digest:
    *out = cJSON_CreateObject();
    cJSON_AddItemToObject(*out, "dtype", cJSON_Duplicate(dtype, 1));
    cJSON_AddItemToObject(*out, "shape", cJSON_Duplicate(shape, 1));
    cJSON_AddStringToObject(*out, "blake2b", hex);
    rc = KILN_OK;
done:
    fclose(f);
    free(cache_key);
    free(hbuf);
    free(chunk);
    cJSON_Delete(header);
    return rc;
}

/* Python's truthiness of a JSON value, as the recipe's `if x:` reads it. */
static int truthy(const cJSON *v) {
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v))
        return 0;
    if (cJSON_IsNumber(v))
        return v->valuedouble != 0;
    if (cJSON_IsString(v))
        return v->valuestring[0] != 0;
    if (cJSON_IsArray(v) || cJSON_IsObject(v))
        return v->child != NULL;
    return 1;
}

/* The digest of the tensor a {"path", "tensor_key"} object names, as "type"-less fields added to
 * into; a relative path is the problem directory's. */
static int add_digest(cJSON *into, const cJSON *ref, const char *dir, digests *dg, const char *what,
                      kiln_err *err) {
    const char *rel = str_item(ref, "path"), *key = str_item(ref, "tensor_key");
    if (!rel || !key)
        return kiln_errf(err, KILN_ERR_FORMAT, "%s/workload.jsonl: %s names no path and tensor_key",
                         dir, what);
    char *path = rel[0] == '/' ? xstrdup(rel) : kiln_path_join(dir, rel);
    cJSON *d = NULL;
    int rc = tensor_digest(path, key, dg, &d, err);
    free(path);
    if (rc)
        return rc;
    for (cJSON *c = d->child; c;) {
        cJSON *next = c->next;
        cJSON_AddItemToObject(into, c->string, cJSON_DetachItemViaPointer(d, c));
        c = next;
    }
    cJSON_Delete(d);
    return KILN_OK;
}

/* *out = the identity of one workload object (the recipe's W). */
static int workload_identity(const cJSON *w, const char *dir, digests *dg, cJSON **result,
                             kiln_err *err) {
    *result = NULL;
    int rc = KILN_OK;
    cJSON *out = cJSON_CreateObject();
    for (const cJSON *c = w->child; c; c = c->next)
        if (strcmp(c->string, "uuid") != 0 && strcmp(c->string, "kiln") != 0 &&
            strcmp(c->string, "inputs") != 0)
            cJSON_AddItemToObject(out, c->string, cJSON_Duplicate(c, 1));
    cJSON *inputs = cJSON_AddObjectToObject(out, "inputs");
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(w, "inputs");
    for (const cJSON *c = cJSON_IsObject(in) ? in->child : NULL; c; c = c->next) {
        const char *type = cJSON_IsObject(c) ? str_item(c, "type") : NULL;
        if (type && strcmp(type, "safetensors") == 0) {
            cJSON *d = cJSON_AddObjectToObject(inputs, c->string);
            cJSON_AddStringToObject(d, "type", "safetensors");
            char what[96];
            snprintf(what, sizeof what, "input '%.64s'", c->string);
            if ((rc = add_digest(d, c, dir, dg, what, err)) != KILN_OK)
                goto fail;
        } else {
            cJSON_AddItemToObject(inputs, c->string, cJSON_Duplicate(c, 1));
        }
    }
    const cJSON *drawn =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(w, "kiln"), "drawn");
    if (truthy(drawn) && cJSON_IsObject(drawn)) {
        cJSON *ident = cJSON_AddObjectToObject(cJSON_AddObjectToObject(out, "kiln"), "drawn");
        for (const cJSON *c = drawn->child; c; c = c->next) {
            cJSON *entry = cJSON_Duplicate(c, 1);
            cJSON_AddItemToObject(ident, c->string, entry);
            const cJSON *sl = cJSON_GetObjectItemCaseSensitive(c, "slice");
            if (!truthy(sl))
                continue;
            cJSON *d = cJSON_CreateObject();
            cJSON_ReplaceItemInObjectCaseSensitive(entry, "slice", d);
            const cJSON *el = cJSON_GetObjectItemCaseSensitive(sl, "elements");
            if (!el)
                goto malformed;
            cJSON_AddItemToObject(d, "elements", cJSON_Duplicate(el, 1));
            char what[96];
            snprintf(what, sizeof what, "the slice of '%.64s'", c->string);
            if ((rc = add_digest(d, sl, dir, dg, what, err)) != KILN_OK)
                goto fail;
        }
    }
    *result = out;
    return KILN_OK;
malformed:
    rc = kiln_errf(err, KILN_ERR_FORMAT, "%s/workload.jsonl: a drawn input's slice has no elements",
                   dir);
fail:
    cJSON_Delete(out);
    return rc;
}

/* Keys in UTF-8 byte order. */
static int by_key(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* Appends the canonical lines of v under prefix (the recipe's step 3) to h. */
static void canonical(kiln_blake2b *h, const cJSON *v, kiln_strbuf *prefix) {
    size_t at = prefix->len;
    kiln_strbuf line = {0};
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        if (n == 0) {
            kiln_strbuf_printf(&line, "%s %s\n", prefix->s ? prefix->s : "",
                               cJSON_IsObject(v) ? "{}" : "[]");
        } else {
            const cJSON **items = xmalloc((size_t)n * sizeof *items);
            int i = 0;
            for (const cJSON *c = v->child; c; c = c->next)
                items[i++] = c;
            if (cJSON_IsObject(v))
                qsort(items, (size_t)n, sizeof *items, by_key);
            for (i = 0; i < n; i++) {
                if (cJSON_IsObject(v))
                    kiln_strbuf_printf(prefix, "%s%s", at ? "." : "", items[i]->string);
                else
                    kiln_strbuf_printf(prefix, "[%d]", i);
                canonical(h, items[i], prefix);
                prefix->len = at;
                prefix->s[at] = 0;
            }
            free(items);
        }
    } else {
        const char *p = prefix->s ? prefix->s : "";
        if (cJSON_IsNull(v))
            kiln_strbuf_printf(&line, "%s null\n", p);
        else if (cJSON_IsTrue(v))
            kiln_strbuf_printf(&line, "%s true\n", p);
        else if (cJSON_IsFalse(v))
            kiln_strbuf_printf(&line, "%s false\n", p);
        else if (cJSON_IsNumber(v))
            kiln_strbuf_printf(&line, "%s n%.17g\n", p, v->valuedouble);
        else if (cJSON_IsString(v))
            kiln_strbuf_printf(&line, "%s s%zu:%s\n", p, strlen(v->valuestring), v->valuestring);
    }
    if (line.s)
        kiln_blake2b_update(h, line.s, line.len);
    free(line.s);
}

static int read_json(const char *dir, const char *name, cJSON **out, kiln_err *err) {
    char *path = kiln_path_join(dir, name), *text = NULL;
    size_t len = 0;
    int rc = kiln_read_file(path, &text, &len, err);
    if (!rc) {
        *out = cJSON_ParseWithLength(text, len);
        if (!cJSON_IsObject(*out)) {
            cJSON_Delete(*out);
            *out = NULL;
            rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: not a JSON object", path);
        }
    }
    free(text);
    free(path);
    return rc;
}

int kiln_content_hash_dir(const char *dir, char hex[KILN_CONTENT_HASH_LEN], kiln_err *err) {
    hex[0] = 0;
    cJSON *def = NULL, *root = cJSON_CreateObject();
    char *wl_path = kiln_path_join(dir, "workload.jsonl"), *wl = NULL;
    char *cache_path = kiln_path_join(dir, "kiln/digests.json");
    size_t wl_len = 0;
    digests dg = {0};
    {
        char *text = NULL;
        size_t len = 0;
        if (access(cache_path, F_OK) == 0 && kiln_read_file(cache_path, &text, &len, NULL) == 0)
            dg.cache = cJSON_ParseWithLength(text, len);
        free(text);
        if (!cJSON_IsObject(dg.cache)) {
            cJSON_Delete(dg.cache);
            dg.cache = cJSON_CreateObject();
        }
    }
    int rc = read_json(dir, "definition.json", &def, err);
    if (!rc)
        rc = kiln_read_file(wl_path, &wl, &wl_len, err);
    if (rc)
        goto done;

    /* D */
    cJSON *d = cJSON_AddObjectToObject(root, "definition");
    for (const cJSON *c = def->child; c; c = c->next)
        if (strcmp(c->string, "name") && strcmp(c->string, "description") &&
            strcmp(c->string, "kiln"))
            cJSON_AddItemToObject(d, c->string, cJSON_Duplicate(c, 1));
    const cJSON *kiln = cJSON_GetObjectItemCaseSensitive(def, "kiln");
    const cJSON *flags =
        cJSON_IsObject(kiln) ? cJSON_GetObjectItemCaseSensitive(kiln, "torch_flags") : NULL;
    if (flags && !cJSON_IsNull(flags))
        cJSON_AddItemToObject(cJSON_AddObjectToObject(d, "kiln"), "torch_flags",
                              cJSON_Duplicate(flags, 1));

    /* W... */
    cJSON *ws = cJSON_AddArrayToObject(root, "workloads");
    int line_no = 0;
    for (char *line = wl; line && *line && !rc; line_no++) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char *next = nl ? nl + 1 : NULL;
        size_t k = 0;
        while (k < len && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r'))
            k++;
        if (k < len) {
            cJSON *obj = cJSON_ParseWithLength(line, len);
            const cJSON *w = obj;
            const cJSON *inner = cJSON_GetObjectItemCaseSensitive(obj, "workload");
            if (cJSON_IsObject(inner))
                w = inner;
            if (!cJSON_IsObject(w)) {
                rc = kiln_errf(err, KILN_ERR_FORMAT, "%s:%d: not a JSON object", wl_path,
                               line_no + 1);
            } else {
                const char *set = str_item(cJSON_GetObjectItemCaseSensitive(w, "kiln"), "set");
                if (!set || strcmp(set, "random") != 0) {
                    cJSON *ident = NULL;
                    rc = workload_identity(w, dir, &dg, &ident, err);
                    if (!rc)
                        cJSON_AddItemToArray(ws, ident);
                }
            }
            cJSON_Delete(obj);
        }
        line = next;
    }
    if (rc)
        goto done;

    kiln_blake2b h;
    kiln_blake2b_init(&h, 16);
    kiln_blake2b_update(&h, TAG, strlen(TAG));
    kiln_strbuf prefix = {0};
    kiln_strbuf_printf(&prefix, "%s", "");
    canonical(&h, root, &prefix);
    free(prefix.s);
    unsigned char out[16];
    kiln_blake2b_final(&h, out);
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", out[i]);
    if (dg.changed) { /* best effort: an unwritable problem directory is hashed in full next time */
        char *kdir = kiln_path_join(dir, "kiln");
        char *text = cJSON_PrintUnformatted(dg.cache);
        if (kiln_mkdirs(kdir, NULL) == 0)
            kiln_write_file(cache_path, text, strlen(text), NULL);
        free(text);
        free(kdir);
    }
done:
    cJSON_Delete(def);
    cJSON_Delete(root);
    cJSON_Delete(dg.cache);
    free(wl);
    free(wl_path);
    free(cache_path);
    return rc;
}
