/* NumPy .npy files (NEP 1; numpy/lib/format.py), versions 1.0, 2.0, 3.0:
 *
 *   offset 0   magic "\x93NUMPY"
 *   offset 6   version: major, minor byte (1.0, 2.0 or 3.0)
 *   offset 8   header length H: u16 little-endian (1.0) or u32 (2.0, 3.0)
 *   offset 10 or 12: H bytes of a Python dict literal, padded with spaces
 *              and a final '\n', e.g.
 *                {'descr': '<f4', 'fortran_order': False, 'shape': (2, 10, 512), }
 *   then the array data, C order, exactly prod(shape) * 4 bytes, to the end
 *   of the file. numpy's np.load reads prod(shape) items and ignores what
 *   follows; we refuse bytes after the data (a .npy file holds one array,
 *   and numpy writes nothing after it), naming how many.
 *
 * We read '<f4' (f32) and '<i4' (i32) arrays of 0 to 4 dims in C order; a 0-D
 * array (shape ()) loads as a 1-D tensor [1], as ggmlite has no 0-D tensors.
 * The dict parser is strict: exactly the keys descr, fortran_order and shape
 * in any order, single- or double-quoted strings without escapes, True or
 * False, a tuple of decimal integers, whitespace and a trailing comma
 * anywhere Python allows them. We write version 1.0 (2.0 if the header
 * would not fit a u16), padded as numpy pads so the data starts at a
 * multiple of 64 bytes. */
#include "file.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char NPY_MAGIC[6] = "\x93NUMPY";
#define NPY_MAX_DIM ((uint64_t)1 << 40) /* ggmlite's largest dimension */

/* ---- the header dict ------------------------------------------------------ */

/* A dtype converted to f32 on request (gml_load_npy_converted). */
enum { NPY_NATIVE, NPY_F64, NPY_F16, NPY_BOOL };

typedef struct npy_header {
    gml_type type;
    int src;      /* NPY_NATIVE, or what the data is before conversion */
    int src_size; /* bytes per element in the file */
    bool convert; /* the caller takes NPY_F64, NPY_F16 and NPY_BOOL */
    int n_dims;                  /* 0..4 */
    int64_t ne[GML_MAX_DIMS];
} npy_header;

typedef struct npy_parser {
    const char *s;
    size_t n, i;                 /* header length, position */
    uint64_t base;               /* file offset of s[0] */
    const char *what;
    char *err;
    size_t err_size;
} npy_parser;

/* "<what>: offset <file offset of position at>: <message>" */
static bool fail_at(npy_parser *p, size_t at, const char *fmt, ...) GML_PRINTF(3, 4);
static bool fail_at(npy_parser *p, size_t at, const char *fmt, ...) {
    char msg[GML_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gml_errf(p->err, p->err_size, "%s: offset %" PRIu64 ": %s", p->what, p->base + at, msg);
}

/* The character at the parser's position, printable: "'x'", "'\x0a'" or "the end". */
static const char *show_next(const npy_parser *p, char buf[16]) {
    if (p->i >= p->n) return "the end of the header";
    unsigned char c = (unsigned char)p->s[p->i];
    if (c >= 0x20 && c < 0x7f) snprintf(buf, 16, "'%c'", c);
    else snprintf(buf, 16, "byte 0x%02x", c);
    return buf;
}

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static void skip_ws(npy_parser *p) {
    while (p->i < p->n && is_space(p->s[p->i])) p->i++;
}

static bool peek(const npy_parser *p, char c) { return p->i < p->n && p->s[p->i] == c; }

static bool expect(npy_parser *p, char c, const char *context) {
    if (peek(p, c)) {
        p->i++;
        return true;
    }
    char b[16];
    return fail_at(p, p->i, "expected '%c' %s in the header dict, found %s", c, context,
                   show_next(p, b));
}

/* A quoted string without escapes into out (cap bytes; longer ones are cut,
 * which only matters for messages). */
static bool parse_string(npy_parser *p, char *out, size_t cap, const char *what) {
    char b[16];
    if (!peek(p, '\'') && !peek(p, '"'))
        return fail_at(p, p->i, "expected %s as a quoted string, found %s", what, show_next(p, b));
    size_t start = p->i;
    char quote = p->s[p->i++];
    size_t len = 0;
    for (;; p->i++) {
        if (p->i >= p->n) return fail_at(p, start, "%s: string is not closed", what);
        unsigned char c = (unsigned char)p->s[p->i];
        if (c == (unsigned char)quote) break;
        if (c == '\\') return fail_at(p, p->i, "%s: escape sequences are not supported", what);
        if (c < 0x20 || c == 0x7f)
            return fail_at(p, p->i, "%s: control byte 0x%02x inside a string", what, c);
        if (len + 1 < cap) out[len++] = (char)c;
    }
    p->i++;
    out[len] = '\0';
    return true;
}

static bool parse_bool(npy_parser *p, bool *out) {
    static const char *const words[2] = {"False", "True"};
    for (int v = 0; v < 2; v++) {
        size_t len = strlen(words[v]);
        if (p->n - p->i >= len && memcmp(p->s + p->i, words[v], len) == 0) {
            p->i += len;
            *out = v;
            return true;
        }
    }
    char b[16];
    return fail_at(p, p->i, "fortran_order: expected True or False, found %s", show_next(p, b));
}

/* A decimal integer >= 0; values above NPY_MAX_DIM saturate at NPY_MAX_DIM + 1. */
static bool parse_uint(npy_parser *p, uint64_t *out) {
    char b[16];
    if (peek(p, '-')) return fail_at(p, p->i, "shape: negative size");
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
        return fail_at(p, p->i, "shape: expected a size (a decimal integer), found %s",
                       show_next(p, b));
    uint64_t v = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = v * 10 + (uint64_t)(p->s[p->i++] - '0');
        if (v > NPY_MAX_DIM) v = NPY_MAX_DIM + 1;
    }
    *out = v;
    return true;
}

/* "()", "(5,)", "(2, 3)", "(2, 3,)": the sizes in h->ne, their count in h->n_dims. */
static bool parse_shape(npy_parser *p, npy_header *h) {
    size_t start = p->i;
    if (!expect(p, '(', "to open the shape tuple")) return false;
    int n = 0;
    skip_ws(p);
    while (!peek(p, ')')) {
        size_t at = p->i;
        uint64_t v = 0;
        if (!parse_uint(p, &v)) return false;
        if (v == 0) return fail_at(p, at, "shape: size 0; ggmlite tensors have sizes >= 1");
        if (v > NPY_MAX_DIM) return fail_at(p, at, "shape: size larger than 2^40");
        if (n < GML_MAX_DIMS) h->ne[n] = (int64_t)v;
        n++;
        skip_ws(p);
        if (peek(p, ')')) {
            if (n == 1) /* (5) is the integer 5 in Python, not a tuple */
                return fail_at(p, start, "shape: a 1-element tuple is written (n,), with a comma");
            break;
        }
        if (!expect(p, ',', "or ')' in the shape tuple")) return false;
        skip_ws(p);
    }
    p->i++;
    if (n > GML_MAX_DIMS)
        return fail_at(p, start, "shape has %d dims; ggmlite tensors have 1 to %d", n, GML_MAX_DIMS);
    h->n_dims = n;
    return true;
}

static bool parse_header(npy_parser *p, npy_header *h) {
    char descr[32] = "", key[32];
    bool fortran = false, seen[3] = {false, false, false};
    size_t descr_at = 0, fortran_at = 0;
    static const char *const keys[3] = {"descr", "fortran_order", "shape"};

    skip_ws(p);
    if (!expect(p, '{', "to open")) return false;
    for (;;) {
        skip_ws(p);
        if (peek(p, '}')) break;
        size_t key_at = p->i;
        if (!parse_string(p, key, sizeof key, "a key")) return false;
        int k = 0;
        while (k < 3 && strcmp(key, keys[k]) != 0) k++;
        if (k == 3)
            return fail_at(p, key_at, "unknown key '%s'; expected 'descr', 'fortran_order', 'shape'",
                           key);
        if (seen[k]) return fail_at(p, key_at, "key '%s' appears twice", key);
        seen[k] = true;
        skip_ws(p);
        if (!expect(p, ':', "after the key")) return false;
        skip_ws(p);
        bool ok;
        if (k == 0) {
            descr_at = p->i;
            ok = parse_string(p, descr, sizeof descr, "descr");
        } else if (k == 1) {
            fortran_at = p->i;
            ok = parse_bool(p, &fortran);
        } else {
            ok = parse_shape(p, h);
        }
        if (!ok) return false;
        skip_ws(p);
        if (peek(p, '}')) break;
        if (!expect(p, ',', "or '}' after a value")) return false;
    }
    p->i++;
    skip_ws(p);
    if (p->i < p->n) {
        char b[16];
        return fail_at(p, p->i, "unexpected %s after the header dict", show_next(p, b));
    }
    for (int k = 0; k < 3; k++)
        if (!seen[k])
            return fail_at(p, 0, "the header dict has no '%s' key (it needs 'descr', "
                           "'fortran_order' and 'shape')", keys[k]);
    h->src = NPY_NATIVE;
    h->src_size = 4;
    if (strcmp(descr, "<f4") == 0) h->type = GML_F32;
    else if (strcmp(descr, "<i4") == 0) h->type = GML_I32;
    else if (h->convert && strcmp(descr, "<f8") == 0) h->type = GML_F32, h->src = NPY_F64, h->src_size = 8;
    else if (h->convert && strcmp(descr, "<f2") == 0) h->type = GML_F32, h->src = NPY_F16, h->src_size = 2;
    else if (h->convert && strcmp(descr, "|b1") == 0) h->type = GML_F32, h->src = NPY_BOOL, h->src_size = 1;
    else if (strcmp(descr, "<f2") == 0) h->type = GML_F16, h->src_size = 2; /* kept as f16 */
    else if (h->convert)
        return fail_at(p, descr_at, "dtype '%s' is not supported; expected '<f4' or '<i4' (or "
                       "'<f8', '<f2', '|b1', converted): convert it with np.save(path, "
                       "a.astype(np.float32)) (np.int32 for lengths or indices)", descr);
    else return fail_at(p, descr_at, "dtype '%s' is not supported; expected '<f4', '<i4' or "
                        "'<f2' (convert with a.astype(np.float32) or np.int32)", descr);
    if (fortran)
        return fail_at(p, fortran_at, "fortran_order is True; only C-order arrays are supported "
                       "(save np.ascontiguousarray(a))");
    return true;
}

/* "(2, 10, 512)" as Python prints a shape. */
static void format_tuple(const int64_t *ne, int n, char *buf, size_t size) {
    size_t k = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < n && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%" PRId64, i ? ", " : "", ne[i]);
    if (k < size) snprintf(buf + k, size - k, n == 1 ? ",)" : ")");
}

/* ---- loading -------------------------------------------------------------- */

/* The tensor name for a file without one given: its base name, less ".npy". */
static void default_name(const char *what, char *out, size_t size) {
    const char *base = strrchr(what, '/');
    base = base ? base + 1 : what;
    size_t len = strlen(base);
    if (len > 4 && strcmp(base + len - 4, ".npy") == 0) len -= 4;
    snprintf(out, size, "%.*s", (int)GML_MIN(len, size - 1), base);
}

/* Reads n elements of src kind at offset `at` into f32 dst, in chunks. */
static bool convert_data(const gml_source *s, uint64_t at, const npy_header *h, float *dst,
                         uint64_t n, char *err, size_t es) {
    enum { CHUNK = 4096 };
    unsigned char buf[CHUNK * 8];
    for (uint64_t i0 = 0; i0 < n; i0 += CHUNK) {
        const size_t m = (size_t)GML_MIN((uint64_t)CHUNK, n - i0);
        if (!gml_source_read(s, at + i0 * (uint64_t)h->src_size, buf, m * (size_t)h->src_size, err,
                             es))
            return false;
        for (size_t j = 0; j < m; j++) {
            const unsigned char *b = buf + j * (size_t)h->src_size;
            if (h->src == NPY_BOOL) {
                if (b[0] > 1)
                    return gml_errf(err, es, "%s: offset %" PRIu64 ": bool element %" PRIu64
                                    " is byte 0x%02x, not 0 or 1", s->what,
                                    at + i0 + j, i0 + j, b[0]);
                dst[i0 + j] = b[0];
            } else if (h->src == NPY_F16) {
                dst[i0 + j] = gml_fp16_to_fp32((uint16_t)gml_le16(b)); /* as the f16 type widens */
            } else {
                uint64_t bits = gml_le64(b);
                double d;
                memcpy(&d, &bits, 8);
                float f = (float)d;
                if (isfinite(d) && !isfinite(f))
                    return gml_errf(err, es, "%s: offset %" PRIu64 ": float64 element %" PRIu64
                                    " is %g, beyond float32's range", s->what,
                                    at + (i0 + j) * 8, i0 + j, d);
                dst[i0 + j] = f;
            }
        }
    }
    return true;
}

static gml_context *read_npy_as(const gml_source *s, const char *name, bool convert,
                                const char **converted_from, char *err, size_t es);

static gml_context *read_npy(const gml_source *s, const char *name, char *err, size_t es) {
    return read_npy_as(s, name, false, NULL, err, es);
}

static gml_context *read_npy_as(const gml_source *s, const char *name, bool convert,
                                const char **converted_from, char *err, size_t es) {
    if (converted_from) *converted_from = NULL;
    const char *what = s->what;
    unsigned char pre[12];
    size_t got = (size_t)GML_MIN(s->size, (uint64_t)sizeof pre);
    if (!gml_source_read(s, 0, pre, got, err, es)) return NULL;

    if (got < 6 || memcmp(pre, NPY_MAGIC, 6) != 0) {
        if (got < 6 && memcmp(pre, NPY_MAGIC, got) == 0) {
            gml_errf(err, es, "%s: file is %zu bytes, too short for a .npy file (the preamble alone "
                     "is 10)", what, got);
            return NULL;
        }
        char found[32] = "";
        for (size_t i = 0, k = 0; i < GML_MIN(got, (size_t)6); i++)
            k += (size_t)snprintf(found + k, sizeof found - k, "\\x%02x", pre[i]);
        gml_errf(err, es, "%s: offset 0: not a .npy file: expected the magic \\x93NUMPY, found %s",
                 what, found);
        return NULL;
    }
    if (got >= 8 && (pre[6] < 1 || pre[6] > 3 || pre[7] != 0)) {
        gml_errf(err, es, "%s: offset 6: .npy version %u.%u is not supported; expected 1.0, 2.0 or "
                 "3.0", what, pre[6], pre[7]);
        return NULL;
    }
    uint64_t hstart = got >= 8 && pre[6] > 1 ? 12 : 10;
    if (got < hstart) {
        gml_errf(err, es, "%s: file is %zu bytes, too short for a .npy preamble (%" PRIu64
                 " bytes: magic, version, header length)", what, got, hstart);
        return NULL;
    }
    uint64_t hlen = pre[6] == 1 ? gml_le16(pre + 8) : gml_le32(pre + 8);
    if (hlen > s->size - hstart) {
        gml_errf(err, es, "%s: offset 8: header length %" PRIu64 " goes past the end of the file "
                 "(the header would end at byte %" PRIu64 "; the file is %" PRIu64 " bytes)", what,
                 hlen, hstart + hlen, s->size);
        return NULL;
    }

    char *text = malloc((size_t)hlen + 1);
    if (!text) {
        gml_errf(err, es, "%s: out of memory for a %" PRIu64 "-byte header", what, hlen);
        return NULL;
    }
    npy_header h = {.n_dims = 0, .convert = convert};
    npy_parser p = {.s = text, .n = (size_t)hlen, .base = hstart, .what = what, .err = err,
                    .err_size = es};
    bool ok = gml_source_read(s, hstart, text, (size_t)hlen, err, es) && parse_header(&p, &h);
    free(text);
    if (!ok) return NULL;

    uint64_t data_at = hstart + hlen, have = s->size - data_at;
    uint64_t need = gml_dense_bytes(h.ne, h.n_dims); /* as f32 / i32 */
    const uint64_t file_need = need == UINT64_MAX ? UINT64_MAX : need / 4 * (uint64_t)h.src_size;
    if (file_need != have) {
        char shape[96], needs[24];
        format_tuple(h.ne, h.n_dims, shape, sizeof shape);
        gml_errf(err, es, "%s: offset %" PRIu64 ": data is %" PRIu64 " bytes, but shape %s of '%s' "
                 "needs %s%s%s", what, data_at, have, shape,
                 h.src == NPY_F64 ? "<f8" : h.src == NPY_F16 ? "<f2" : h.src == NPY_BOOL ? "|b1"
                 : h.type == GML_F32 ? "<f4" : h.type == GML_F16 ? "<f2" : "<i4",
                 file_need < have ? "exactly " : "", gml_bytes_text(file_need, needs),
                 file_need > have ? " (file truncated?)" : "");
        return NULL;
    }
    if (h.n_dims == 0) { /* a 0-D scalar: [1] */
        h.n_dims = 1;
        h.ne[0] = 1;
    }

    char fallback[GML_MAX_NAME];
    if (!name) {
        default_name(what, fallback, sizeof fallback);
        name = fallback;
    }
    if (strlen(name) >= GML_MAX_NAME) {
        char shown[48];
        gml_errf(err, es, "%s: tensor name '%s' is %zu bytes; names hold at most %d", what,
                 gml_printable(name, shown, sizeof shown), strlen(name), GML_MAX_NAME - 1);
        return NULL;
    }
    gml_context *ctx = gml_init((gml_init_params){
        .mem_size = gml_tensor_overhead() + gml_round_up((size_t)need, GML_ALIGN)});
    if (!ctx) {
        gml_errf(err, es, "%s: out of memory for %" PRIu64 " bytes of data", what, need);
        return NULL;
    }
    gml_tensor *t = gml_new_tensor(ctx, h.type, h.n_dims, h.ne);
    if (!t) {
        gml_errf(err, es, "%s: %s", what, gml_last_error(ctx));
        gml_free(ctx);
        return NULL;
    }
    gml_set_name(t, name);
    if (h.src != NPY_NATIVE
            ? !convert_data(s, data_at, &h, t->data, need / 4, err, es)
            : !gml_source_read(s, data_at, t->data, (size_t)file_need, err, es)) {
        gml_free(ctx);
        return NULL;
    }
    if (converted_from && h.src != NPY_NATIVE)
        *converted_from = h.src == NPY_F64 ? "float64" : h.src == NPY_F16 ? "float16" : "bool";
    return ctx;
}

gml_context *gml_parse_npy_converted(const void *buf, size_t len, const char *what,
                                     const char *name, const char **converted_from, char *err,
                                     size_t err_size) {
    GML_IO_NONNULL(buf, NULL, err, err_size);
    gml_source s = gml_source_memory(buf, len, what);
    return read_npy_as(&s, name, true, converted_from, err, err_size);
}

gml_context *gml_load_npy_converted(const char *path, const char *name,
                                    const char **converted_from, char *err, size_t err_size) {
    GML_IO_NONNULL(path, NULL, err, err_size);
    if (converted_from) *converted_from = NULL;
    gml_source s;
    if (!gml_source_open(&s, path, err, err_size)) return NULL;
    gml_context *ctx = read_npy_as(&s, name, true, converted_from, err, err_size);
    gml_source_close(&s);
    return ctx;
}

gml_context *gml_parse_npy(const void *buf, size_t len, const char *what, const char *name,
                           char *err, size_t err_size) {
    GML_IO_NONNULL(buf, NULL, err, err_size);
    gml_source s = gml_source_memory(buf, len, what);
    return read_npy(&s, name, err, err_size);
}

gml_context *gml_load_npy(const char *path, const char *name, char *err, size_t err_size) {
    GML_IO_NONNULL(path, NULL, err, err_size);
    gml_source s;
    if (!gml_source_open(&s, path, err, err_size)) return NULL;
    gml_context *ctx = read_npy(&s, name, err, err_size);
    gml_source_close(&s);
    return ctx;
}

/* ---- saving --------------------------------------------------------------- */

gml_status gml_save_npy(const char *path, const gml_tensor *t, char *err, size_t err_size) {
    GML_IO_NONNULL(path, GML_ERR_INVALID, err, err_size);
    GML_IO_NONNULL(t, GML_ERR_INVALID, err, err_size);
    char shown[100];
    if (t->type != GML_F32 && t->type != GML_I32 && t->type != GML_F16)
        return gml_errf(err, err_size, "%s: tensor '%s' is %s, which .npy has no dtype for (f32, "
                        "i32 and f16 are saved); convert it first (gml_cpy into an f32 tensor), or "
                        "save it as safetensors%s",
                        path, gml_printable(t->name, shown, sizeof shown), gml_type_name(t->type),
                        t->type == GML_BF16 ? ", which has BF16" : ""),
               GML_ERR_INVALID;
    if (!t->data)
        return gml_errf(err, err_size, "%s: tensor '%s' has no data (made in a no_alloc context?)",
                        path, gml_printable(t->name, shown, sizeof shown)), GML_ERR_INVALID;

    /* The dict, then spaces and '\n' up to a multiple of 64, as numpy does. */
    char shape[128], dict[256];
    format_tuple(t->ne + GML_MAX_DIMS - t->n_dims, t->n_dims, shape, sizeof shape);
    int dlen = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                        t->type == GML_F32 ? "<f4" : t->type == GML_F16 ? "<f2" : "<i4", shape);
    size_t pre = 10;
    size_t total = gml_round_up(pre + (size_t)dlen + 1, 64);
    if (total - pre > 0xffff) { /* version 2.0: a u32 header length */
        pre = 12;
        total = gml_round_up(pre + (size_t)dlen + 1, 64);
    }
    unsigned char head[320];
    memcpy(head, NPY_MAGIC, 6);
    head[6] = pre == 10 ? 1 : 2;
    head[7] = 0;
    if (pre == 10) {
        head[8] = (unsigned char)((total - pre) & 0xff);
        head[9] = (unsigned char)((total - pre) >> 8);
    } else {
        gml_put_le32(head + 8, (uint32_t)(total - pre));
    }
    memcpy(head + pre, dict, (size_t)dlen);
    memset(head + pre + dlen, ' ', total - pre - (size_t)dlen - 1);
    head[total - 1] = '\n';

    gml_outfile out;
    if (!gml_outfile_open(&out, path, err, err_size)) return GML_ERR_IO;
    if (!gml_outfile_write(&out, head, total, err, err_size) ||
        !gml_outfile_write_tensor(&out, t, err, err_size)) {
        gml_outfile_abort(&out);
        return GML_ERR_IO;
    }
    return gml_outfile_commit(&out, err, err_size) ? GML_OK : GML_ERR_IO;
}
