/* safetensors files (huggingface/safetensors, the format in its README):
 *
 *   offset 0   N, u64 little-endian: the header length
 *   offset 8   N bytes of JSON, an object, padded with spaces:
 *                {"__metadata__": {"k": "v", ...},            (optional)
 *                 "w_q.weight": {"dtype": "F32", "shape": [512, 512],
 *                                "data_offsets": [0, 1048576]}, ...}
 *   offset 8+N the data buffer; data_offsets [begin, end) count from here.
 *
 * We read F32 and I32 tensors of 0 to 4 dims (a 0-D scalar, shape [], loads
 * as [1]); each tensor's bytes must be exactly prod(shape) * 4 and lie in
 * the data buffer, and no two tensors may overlap. Gaps between tensors and
 * bytes after the last one are tolerated (the format forbids them; nothing
 * here needs them gone). __metadata__ must map strings to strings and is
 * otherwise ignored; unknown fields of a tensor entry are ignored. The JSON
 * is parsed by cJSON. We write tensors in the order given, packed, with a
 * header padded by spaces to a multiple of 8 bytes. */
#include "file.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_HEADER ((uint64_t)100 << 20) /* as the reference implementation */
#define ST_MAX_DIM ((uint64_t)1 << 40)      /* ggmlite's largest dimension */

/* One tensor of the header, checked. */
typedef struct st_entry {
    const char *name;        /* the JSON key (owned by the cJSON tree) */
    gml_type type;
    int n_dims;              /* 1..4 */
    int64_t ne[GML_MAX_DIMS];
    uint64_t begin, end;     /* bytes [begin, end) of the data buffer */
} st_entry;

/* What a file's header says, and where its parts are. */
typedef struct st_header {
    const char *what;
    uint64_t data_at, data_len; /* the data buffer: file offset and size */
    cJSON *root;
    st_entry *e;
    int n;
    char *err;
    size_t err_size;
} st_header;

static const char *json_type(const cJSON *j) {
    if (cJSON_IsObject(j)) return "an object";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsBool(j)) return "a boolean";
    if (cJSON_IsNull(j)) return "null";
    return "invalid";
}

/* "<what>: tensor '<name>': <message>" */
static bool entry_fail(st_header *h, const char *name, const char *fmt, ...) GML_PRINTF(3, 4);
static bool entry_fail(st_header *h, const char *name, const char *fmt, ...) {
    char msg[GML_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char shown[100];
    return gml_errf(h->err, h->err_size, "%s: tensor '%s': %s", h->what,
                    gml_printable(name, shown, sizeof shown), msg);
}

/* A JSON number that is an integer in [0, max]. */
static bool json_uint(const cJSON *j, double max, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double v = j->valuedouble;
    if (!(v >= 0 && v <= max) || v != floor(v)) return false;
    *out = (uint64_t)v;
    return true;
}

/* "[2, 10, 512]" from a JSON array of numbers (any values), for messages. */
static void format_json_list(const cJSON *arr, char *buf, size_t size) {
    size_t k = (size_t)snprintf(buf, size, "[");
    int i = 0;
    for (const cJSON *x = arr->child; x && k < size; x = x->next, i++) {
        if (i == 6) {
            k += (size_t)snprintf(buf + k, size - k, ", ...");
            break;
        }
        if (cJSON_IsNumber(x))
            k += (size_t)snprintf(buf + k, size - k, "%s%.17g", i ? ", " : "", x->valuedouble);
        else
            k += (size_t)snprintf(buf + k, size - k, "%s(%s)", i ? ", " : "", json_type(x));
    }
    if (k < size) snprintf(buf + k, size - k, "]");
}

static bool check_metadata(st_header *h, const cJSON *meta) {
    if (!cJSON_IsObject(meta))
        return gml_errf(h->err, h->err_size, "%s: header: __metadata__ is %s, expected an object "
                        "of strings", h->what, json_type(meta));
    char shown[100];
    for (const cJSON *x = meta->child; x; x = x->next)
        if (!cJSON_IsString(x))
            return gml_errf(h->err, h->err_size, "%s: header: __metadata__ '%s' is %s, "
                            "expected a string", h->what,
                            gml_printable(x->string, shown, sizeof shown), json_type(x));
    return true;
}

/* Checks one "name": {dtype, shape, data_offsets} entry into e. */
static bool read_entry(st_header *h, const cJSON *j, st_entry *e) {
    const char *name = j->string;
    e->name = name;
    if (strlen(name) >= GML_MAX_NAME)
        return entry_fail(h, name, "name is %zu bytes; ggmlite names hold at most %d",
                          strlen(name), GML_MAX_NAME - 1);
    if (!cJSON_IsObject(j))
        return entry_fail(h, name, "entry is %s, expected an object with dtype, shape and "
                          "data_offsets", json_type(j));
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    const char *missing = !dtype ? "dtype" : !shape ? "shape" : !offs ? "data_offsets" : NULL;
    if (missing) return entry_fail(h, name, "entry has no \"%s\"", missing);

    if (!cJSON_IsString(dtype))
        return entry_fail(h, name, "dtype is %s, expected a string like \"F32\"", json_type(dtype));
    if (strcmp(dtype->valuestring, "F32") == 0) e->type = GML_F32;
    else if (strcmp(dtype->valuestring, "I32") == 0) e->type = GML_I32;
    else {
        char shown[40];
        return entry_fail(h, name, "dtype '%s' is not supported; expected F32 or I32",
                          gml_printable(dtype->valuestring, shown, sizeof shown));
    }

    char list[160];
    if (!cJSON_IsArray(shape))
        return entry_fail(h, name, "shape is %s, expected an array of sizes", json_type(shape));
    int n = cJSON_GetArraySize(shape);
    format_json_list(shape, list, sizeof list);
    if (n > GML_MAX_DIMS)
        return entry_fail(h, name, "shape %s has %d dims; ggmlite tensors have 1 to %d", list, n,
                          GML_MAX_DIMS);
    int d = 0;
    for (const cJSON *x = shape->child; x; x = x->next, d++) {
        uint64_t v;
        if (!json_uint(x, (double)ST_MAX_DIM, &v) || v == 0)
            return entry_fail(h, name, "shape %s: dim %d must be a whole number in [1, 2^40]",
                              list, d);
        e->ne[d] = (int64_t)v;
    }
    uint64_t bytes = gml_dense_bytes(e->ne, n);
    e->n_dims = n;
    if (n == 0) { /* a scalar: [1] */
        e->n_dims = 1;
        e->ne[0] = 1;
    }

    if (!cJSON_IsArray(offs))
        return entry_fail(h, name, "data_offsets is %s, expected [begin, end]", json_type(offs));
    if (cJSON_GetArraySize(offs) != 2 || !json_uint(offs->child, 9.0e18, &e->begin) ||
        !json_uint(offs->child->next, 9.0e18, &e->end)) {
        format_json_list(offs, list, sizeof list);
        return entry_fail(h, name, "data_offsets %s: expected [begin, end], two integers >= 0",
                          list);
    }
    if (e->begin > e->end)
        return entry_fail(h, name, "data_offsets [%" PRIu64 ", %" PRIu64 "]: begin is after end",
                          e->begin, e->end);
    if (e->end > h->data_len)
        return entry_fail(h, name, "data_offsets [%" PRIu64 ", %" PRIu64 "] end past the data "
                          "buffer (%" PRIu64 " bytes, at file offset %" PRIu64 ")", e->begin,
                          e->end, h->data_len, h->data_at);
    if (e->end - e->begin != bytes) {
        char needs[24];
        return entry_fail(h, name, "data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64 " bytes, "
                          "but %s shape %s needs %s (at file offset %" PRIu64 ")", e->begin,
                          e->end, e->end - e->begin, dtype->valuestring, list,
                          gml_bytes_text(bytes, needs), h->data_at + e->begin);
    }
    return true;
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}
static int by_begin(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Duplicate names and overlapping byte ranges, each found by sorting. */
static bool check_all(st_header *h) {
    if (h->n < 2) return true;
    const st_entry **s = malloc((size_t)h->n * sizeof *s);
    if (!s) return gml_errf(h->err, h->err_size, "%s: out of memory", h->what);
    for (int i = 0; i < h->n; i++) s[i] = &h->e[i];
    bool ok = true;
    char a[100], b[100];
    qsort(s, (size_t)h->n, sizeof *s, by_name);
    for (int i = 1; i < h->n && ok; i++)
        if (strcmp(s[i - 1]->name, s[i]->name) == 0)
            ok = gml_errf(h->err, h->err_size, "%s: header: tensor name '%s' appears twice",
                          h->what, gml_printable(s[i]->name, a, sizeof a));
    qsort(s, (size_t)h->n, sizeof *s, by_begin);
    for (int i = 1; i < h->n && ok; i++)
        if (s[i]->begin < s[i - 1]->end)
            ok = gml_errf(h->err, h->err_size, "%s: tensors '%s' [%" PRIu64 ", %" PRIu64 "] and "
                          "'%s' [%" PRIu64 ", %" PRIu64 "] overlap (data buffer at file offset %"
                          PRIu64 ")", h->what, gml_printable(s[i - 1]->name, a, sizeof a),
                          s[i - 1]->begin, s[i - 1]->end, gml_printable(s[i]->name, b, sizeof b),
                          s[i]->begin, s[i]->end, h->data_at);
    free(s);
    return ok;
}

/* Reads and checks the header of s into h (free it with free_header). */
static bool read_header(const gml_source *s, st_header *h) {
    const char *what = s->what;
    unsigned char len8[8];
    if (s->size < 8)
        return gml_errf(h->err, h->err_size, "%s: file is %" PRIu64 " bytes; a safetensors file "
                        "starts with an 8-byte header length", what, s->size);
    if (!gml_source_read(s, 0, len8, 8, h->err, h->err_size)) return false;
    uint64_t n = gml_le64(len8);
    if (n > s->size - 8)
        return gml_errf(h->err, h->err_size, "%s: offset 0: header length %" PRIu64 " goes past the "
                        "end of the file (%" PRIu64 " bytes, so at most %" PRIu64 ")", what, n,
                        s->size, s->size - 8);
    if (n > ST_MAX_HEADER)
        return gml_errf(h->err, h->err_size, "%s: offset 0: header length %" PRIu64 " is over the "
                        "limit of %" PRIu64 " bytes", what, n, ST_MAX_HEADER);
    h->data_at = 8 + n;
    h->data_len = s->size - h->data_at;

    char *text = malloc((size_t)n + 1);
    if (!text) return gml_errf(h->err, h->err_size, "%s: out of memory", what);
    if (!gml_source_read(s, 8, text, (size_t)n, h->err, h->err_size)) {
        free(text);
        return false;
    }
    text[n] = '\0';
    const char *end = NULL;
    h->root = cJSON_ParseWithLengthOpts(text, (size_t)n, &end, false);
    uint64_t stop = end ? (uint64_t)(end - text) : 0;
    bool ok = true;
    if (!h->root) {
        ok = gml_errf(h->err, h->err_size, "%s: offset %" PRIu64 ": header is not valid JSON "
                      "(the %" PRIu64 "-byte header at offset 8 should be one JSON object)", what,
                      8 + stop, n);
    } else if (!cJSON_IsObject(h->root)) {
        ok = gml_errf(h->err, h->err_size, "%s: offset 8: header is %s, expected a JSON object",
                      what, json_type(h->root));
    } else {
        for (uint64_t i = stop; i < n && ok; i++)
            if (!strchr(" \t\r\n", text[i]) || !text[i])
                ok = gml_errf(h->err, h->err_size, "%s: offset %" PRIu64 ": unexpected byte 0x%02x "
                              "after the header's JSON object (only spaces may pad it)", what,
                              8 + i, (unsigned char)text[i]);
    }
    free(text);
    if (!ok) return false;

    int count = cJSON_GetArraySize(h->root);
    h->e = calloc((size_t)count + 1, sizeof *h->e);
    if (!h->e) return gml_errf(h->err, h->err_size, "%s: out of memory", what);
    bool seen_meta = false;
    for (const cJSON *j = h->root->child; j; j = j->next) {
        if (strcmp(j->string, "__metadata__") == 0) {
            if (seen_meta)
                return gml_errf(h->err, h->err_size, "%s: header: __metadata__ appears twice", what);
            seen_meta = true;
            if (!check_metadata(h, j)) return false;
            continue;
        }
        if (!read_entry(h, j, &h->e[h->n])) return false;
        h->n++;
    }
    return check_all(h);
}

static void free_header(st_header *h) {
    cJSON_Delete(h->root);
    free(h->e);
}

static gml_context *read_safetensors(const gml_source *s, char *err, size_t es) {
    st_header h = {.what = s->what, .err = err, .err_size = es};
    gml_context *ctx = NULL;
    if (!read_header(s, &h)) goto done;

    /* The arena holds exactly the tensors: a header and 64-byte aligned data each. */
    size_t mem = 0;
    for (int i = 0; i < h.n; i++)
        mem += gml_tensor_overhead() + gml_align_up((size_t)(h.e[i].end - h.e[i].begin), GML_ALIGN);
    ctx = gml_init((gml_init_params){.mem_size = mem});
    if (!ctx) {
        gml_errf(err, es, "%s: out of memory for %zu bytes of tensors", s->what, mem);
        goto done;
    }
    for (int i = 0; i < h.n; i++) {
        const st_entry *e = &h.e[i];
        gml_tensor *t = gml_new_tensor(ctx, e->type, e->n_dims, e->ne);
        if (!t) {
            char shown[100];
            gml_errf(err, es, "%s: tensor '%s': %s", s->what,
                     gml_printable(e->name, shown, sizeof shown), gml_last_error(ctx));
            goto fail;
        }
        gml_set_name(t, e->name);
        if (!gml_source_read(s, h.data_at + e->begin, t->data, (size_t)(e->end - e->begin), err, es))
            goto fail;
    }
    goto done;
fail:
    gml_free(ctx);
    ctx = NULL;
done:
    free_header(&h);
    return ctx;
}

gml_context *gml_parse_safetensors(const void *buf, size_t len, const char *what, char *err,
                                   size_t err_size) {
    gml_source s = gml_source_memory(buf, len, what);
    return read_safetensors(&s, err, err_size);
}

gml_context *gml_load_safetensors(const char *path, char *err, size_t err_size) {
    gml_source s;
    if (!gml_source_open(&s, path, err, err_size)) return NULL;
    gml_context *ctx = read_safetensors(&s, err, err_size);
    gml_source_close(&s);
    return ctx;
}

/* ---- saving --------------------------------------------------------------- */

/* A growing text buffer for the header. */
typedef struct strbuf {
    char *p;
    size_t len, cap;
    bool oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = GML_MAX(b->cap * 2, b->len + n + 256);
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_printf(strbuf *b, const char *fmt, ...) GML_PRINTF(2, 3);
static void sb_printf(strbuf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_put(b, tmp, (size_t)GML_MIN(n, (int)sizeof tmp - 1));
}

/* s as a JSON string: quotes, backslashes and control bytes escaped; other
 * bytes (UTF-8) as they are. */
static void sb_json_string(strbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            sb_put(b, esc, 2);
        } else if (c < 0x20) {
            sb_printf(b, "\\u%04x", c);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static bool check_save_args(const char *path, const gml_tensor *const *ts, int n, char *err,
                            size_t es) {
    if (n < 0 || (n > 0 && !ts)) return gml_errf(err, es, "%s: no tensors given (n = %d)", path, n);
    for (int i = 0; i < n; i++) {
        const gml_tensor *t = ts[i];
        if (!t) return gml_errf(err, es, "%s: tensor %d is NULL", path, i);
        if (t->type != GML_F32 && t->type != GML_I32)
            return gml_errf(err, es, "%s: tensor '%s' has unknown type %d", path, t->name,
                            (int)t->type);
        if (!t->data)
            return gml_errf(err, es, "%s: tensor '%s' has no data (made in a no_alloc context?)",
                            path, t->name);
        if (strcmp(t->name, "__metadata__") == 0)
            return gml_errf(err, es, "%s: tensor %d is named '__metadata__', which the format "
                            "reserves", path, i);
        for (int k = 0; k < i; k++)
            if (strcmp(ts[k]->name, t->name) == 0)
                return gml_errf(err, es, "%s: tensors %d and %d are both named '%s'", path, k, i,
                                t->name);
    }
    return true;
}

gml_status gml_save_safetensors(const char *path, const gml_tensor *const *tensors, int n,
                                char *err, size_t err_size) {
    if (!path) return gml_errf(err, err_size, "save_safetensors: no path given"), GML_ERR_INVALID;
    if (!check_save_args(path, tensors, n, err, err_size)) return GML_ERR_INVALID;

    strbuf b = {0};
    sb_put(&b, "{", 1);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const gml_tensor *t = tensors[i];
        uint64_t bytes = (uint64_t)gml_nelements(t) * gml_type_size(t->type);
        sb_put(&b, i ? "," : "", i ? 1 : 0);
        sb_json_string(&b, t->name);
        sb_printf(&b, ":{\"dtype\":\"%s\",\"shape\":[", t->type == GML_F32 ? "F32" : "I32");
        for (int d = GML_MAX_DIMS - t->n_dims; d < GML_MAX_DIMS; d++)
            sb_printf(&b, "%s%" PRId64, d > GML_MAX_DIMS - t->n_dims ? "," : "", t->ne[d]);
        sb_printf(&b, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + bytes);
        off += bytes;
    }
    sb_put(&b, "}", 1);
    while (!b.oom && b.len % 8 != 0) sb_put(&b, " ", 1);
    if (b.oom) {
        free(b.p);
        return gml_errf(err, err_size, "%s: out of memory", path), GML_ERR_NOMEM;
    }

    unsigned char len8[8];
    gml_put_le64(len8, b.len);
    gml_outfile out;
    bool ok = gml_outfile_open(&out, path, err, err_size);
    if (ok) {
        ok = gml_outfile_write(&out, len8, 8, err, err_size) &&
             gml_outfile_write(&out, b.p, b.len, err, err_size);
        for (int i = 0; i < n && ok; i++) ok = gml_outfile_write_tensor(&out, tensors[i], err, err_size);
        if (ok) ok = gml_outfile_commit(&out, err, err_size);
        else gml_outfile_abort(&out);
    }
    free(b.p);
    return ok ? GML_OK : GML_ERR_IO;
}
