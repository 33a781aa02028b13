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
 * as [1]). Beyond what ggmlite needs, we reject what the format forbids, as
 * the reference loader (huggingface/safetensors, SafeTensors::read_metadata
 * and Metadata::validate) does:
 *  - the header is at most 100,000,000 bytes of UTF-8, one JSON object that
 *    starts with '{' at offset 8, padded at the end with whitespace only;
 *  - JSON as RFC 8259 has it: no raw control byte inside a string, numbers
 *    as the grammar writes them (cJSON alone takes "01", "1." and "-.5");
 *  - shape sizes and data_offsets are integers written as plain digits: no
 *    sign, fraction or exponent ("2.0", "2e0" and "-0" are not sizes);
 *  - dtype, shape and data_offsets appear once in an entry; other fields
 *    are ignored; __metadata__ is null or maps strings to strings;
 *  - data_offsets tile the data buffer: sorted by begin, the first begins at
 *    0, each begins where the one before ends, the last ends at the end of
 *    the file (no gap, no overlap, no unused byte after the last tensor);
 *  - each tensor's bytes are exactly prod(shape) * 4 (F32, I32) or * 2 (F16,
 *    BF16, loaded as GML_F16 and GML_BF16, bits unchanged).
 * And where ggmlite is stricter than the reference: tensor names are
 * printable (no byte below 0x20, nor 0x7f, written raw or as \u escapes;
 * UTF-8 is fine), unique and shorter than GML_MAX_NAME; no string ggmlite
 * reads (dtype, an entry's field names) holds \u0000, which cJSON would cut
 * short; sizes are >= 1 (no empty tensors). The JSON is parsed by cJSON,
 * and a second pass over its text (st_scan) checks what only the text
 * shows. We write tensors in the order given, packed, with a header padded
 * by spaces to a multiple of 8 bytes, and refuse to write a name the loader
 * would refuse. */
#define _POSIX_C_SOURCE 200809L /* strdup, posix_memalign */
#include "file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <sys/mman.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_HEADER ((uint64_t)100000000) /* as the reference implementation */
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
    bool any_name_length; /* gml_safetensors_open: names of any length (kept as strings) */
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
    if (cJSON_IsNull(meta)) return true; /* as the reference's Option: no metadata */
    if (!cJSON_IsObject(meta))
        return gml_errf(h->err, h->err_size, "%s: header: __metadata__ is %s, expected an object "
                        "of strings (or null)", h->what, json_type(meta));
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
    if (!h->any_name_length && strlen(name) >= GML_MAX_NAME)
        return entry_fail(h, name, "name is %zu bytes; ggmlite tensor names hold at most %d "
                          "(gml_safetensors_open reads names of any length)",
                          strlen(name), GML_MAX_NAME - 1);
    if (!cJSON_IsObject(j))
        return entry_fail(h, name, "entry is %s, expected an object with dtype, shape and "
                          "data_offsets", json_type(j));
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    const char *missing = !dtype ? "dtype" : !shape ? "shape" : !offs ? "data_offsets" : NULL;
    if (missing) return entry_fail(h, name, "entry has no \"%s\"", missing);
    for (const cJSON *a = j->child; a; a = a->next) /* the Get calls found the first */
        if ((a != dtype && strcmp(a->string, "dtype") == 0) ||
            (a != shape && strcmp(a->string, "shape") == 0) ||
            (a != offs && strcmp(a->string, "data_offsets") == 0))
            return entry_fail(h, name, "entry has \"%s\" twice", a->string);

    if (!cJSON_IsString(dtype))
        return entry_fail(h, name, "dtype is %s, expected a string like \"F32\"", json_type(dtype));
    if (strcmp(dtype->valuestring, "F32") == 0) e->type = GML_F32;
    else if (strcmp(dtype->valuestring, "I32") == 0) e->type = GML_I32;
    else if (strcmp(dtype->valuestring, "F16") == 0) e->type = GML_F16;
    else if (strcmp(dtype->valuestring, "BF16") == 0) e->type = GML_BF16;
    else {
        char shown[40];
        return entry_fail(h, name, "dtype '%s' is not supported; expected F32, I32, F16 or BF16",
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
    uint64_t bytes = gml_dense_bytes(e->ne, n); /* 4-byte elements: halved for F16, BF16 */
    if (bytes != UINT64_MAX && gml_type_size(e->type) == 2) bytes /= 2;
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

/* Duplicate names, and byte ranges that do not tile the data buffer (the
 * first at 0, each where the one before ends, the last at its end): found
 * by sorting. */
static bool check_all(st_header *h) {
    const st_entry **s = malloc((size_t)h->n * sizeof *s + 1);
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
    uint64_t at = 0; /* where the tensors so far end */
    for (int i = 0; i < h->n && ok; i++) {
        const st_entry *e = s[i], *p = i ? s[i - 1] : NULL;
        if (p && e->begin < at)
            ok = gml_errf(h->err, h->err_size, "%s: tensors '%s' [%" PRIu64 ", %" PRIu64 "] and "
                          "'%s' [%" PRIu64 ", %" PRIu64 "] overlap (data buffer at file offset %"
                          PRIu64 ")", h->what, gml_printable(p->name, a, sizeof a),
                          p->begin, p->end, gml_printable(e->name, b, sizeof b),
                          e->begin, e->end, h->data_at);
        else if (!p && e->begin > 0)
            ok = entry_fail(h, e->name, "data_offsets [%" PRIu64 ", %" PRIu64 "]: the first "
                            "tensor starts at %" PRIu64 ", not 0, leaving a gap at file offset %"
                            PRIu64 " (the format allows none)", e->begin, e->end, e->begin,
                            h->data_at);
        else if (e->begin > at)
            ok = entry_fail(h, e->name, "data_offsets [%" PRIu64 ", %" PRIu64 "]: a gap of %"
                            PRIu64 " bytes after tensor '%s' (ends at %" PRIu64 "; file offset %"
                            PRIu64 "); the format allows none", e->begin, e->end, e->begin - at,
                            gml_printable(p->name, a, sizeof a), at, h->data_at + at);
        at = e->end;
    }
    if (ok && at != h->data_len)
        ok = gml_errf(h->err, h->err_size, "%s: offset %" PRIu64 ": %" PRIu64 " unused bytes "
                      "after the %s (the data buffer is %" PRIu64 " bytes; the format allows "
                      "no trailing bytes)", h->what, h->data_at + at, h->data_len - at,
                      h->n ? "last tensor's data" : "header, which lists no tensors",
                      h->data_len);
    free(s);
    return ok;
}

/* ---- the header's text ---------------------------------------------------
 * cJSON keeps neither how a number was written ("2.0" and "2" are both 2.0)
 * nor a string past a \u0000 ("w\u0000junk" is "w"), and takes some text
 * JSON forbids; this pass over the text that cJSON parsed checks those. */

typedef struct st_scan {
    st_header *h;
    const char *s;
    size_t n, i;                /* text length, position */
    char name[GML_MAX_NAME * 2]; /* the tensor whose entry is being read (decoded, cut) */
    size_t name_len;
} st_scan;

/* A string token, decoded (UTF-8; the first bytes only). */
typedef struct st_str {
    char text[GML_MAX_NAME * 2];
    size_t len, full_len;       /* bytes kept, bytes in all */
    int bad;                    /* the first byte < 0x20 or 0x7f, or -1 */
    size_t bad_at;              /* its text offset (a raw byte or the escape's '\') */
} st_str;

/* What a value is: the header, __metadata__, a tensor's entry, its dtype,
 * shape or data_offsets, an element of those arrays, or anything else. */
enum { AT_ROOT, AT_META, AT_ENTRY, AT_DTYPE, AT_SHAPE, AT_DIM, AT_OFFSETS, AT_OFFSET, AT_OTHER };

/* "<what>: offset <file offset of text offset at>: <message>" */
static bool scan_fail(const st_scan *sc, size_t at, const char *fmt, ...) GML_PRINTF(3, 4);
static bool scan_fail(const st_scan *sc, size_t at, const char *fmt, ...) {
    char msg[GML_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gml_errf(sc->h->err, sc->h->err_size, "%s: offset %" PRIu64 ": %s", sc->h->what,
                    (uint64_t)(8 + at), msg);
}

static bool str_is(const st_str *t, const char *lit) {
    return t->full_len == strlen(lit) && t->len == t->full_len && memcmp(t->text, lit, t->len) == 0;
}

static void str_put(st_str *t, unsigned char c) {
    if (t->len < sizeof t->text) t->text[t->len++] = (char)c;
    t->full_len++;
}

static int hex4(const char *p) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The string at sc->i (a '"'), decoded into t. */
static bool scan_string(st_scan *sc, st_str *t) {
    *t = (st_str){.bad = -1};
    const char *s = sc->s;
    size_t i = sc->i + 1;
    while (i < sc->n && s[i] != '"') {
        const size_t at = i;
        unsigned char c = (unsigned char)s[i];
        uint32_t cp;
        if (c < 0x20)
            return scan_fail(sc, i, "byte 0x%02x inside a string; JSON needs control characters "
                             "escaped", c);
        if (c != '\\') {
            str_put(t, c);
            if (c == 0x7f && t->bad < 0) t->bad = c, t->bad_at = at;
            i++;
            continue;
        }
        if (i + 1 >= sc->n) break;
        char e = s[i + 1];
        i += 2;
        switch (e) {
        case '"': case '\\': case '/': cp = (unsigned char)e; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u': {
            int v = i + 4 <= sc->n ? hex4(s + i) : -1;
            if (v < 0) return scan_fail(sc, at, "a \\u escape needs 4 hex digits");
            i += 4;
            cp = (uint32_t)v;
            int lo = cp >= 0xd800 && cp < 0xdc00 && i + 6 <= sc->n && s[i] == '\\' && s[i + 1] == 'u'
                         ? hex4(s + i + 2) : -1;
            if (lo >= 0xdc00 && lo < 0xe000) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (uint32_t)(lo - 0xdc00);
                i += 6;
            } else if (cp >= 0xd800 && cp < 0xe000) {
                return scan_fail(sc, at, "\\u%04x is half a UTF-16 surrogate pair", (unsigned)cp);
            }
            break;
        }
        default:
            return scan_fail(sc, at, "unknown escape '\\%c' in a string", e);
        }
        if ((cp < 0x20 || cp == 0x7f) && t->bad < 0) t->bad = (int)cp, t->bad_at = at;
        if (cp < 0x80) {
            str_put(t, (unsigned char)cp);
        } else if (cp < 0x800) {
            str_put(t, (unsigned char)(0xc0 | cp >> 6));
            str_put(t, (unsigned char)(0x80 | (cp & 0x3f)));
        } else if (cp < 0x10000) {
            str_put(t, (unsigned char)(0xe0 | cp >> 12));
            str_put(t, (unsigned char)(0x80 | (cp >> 6 & 0x3f)));
            str_put(t, (unsigned char)(0x80 | (cp & 0x3f)));
        } else {
            str_put(t, (unsigned char)(0xf0 | cp >> 18));
            str_put(t, (unsigned char)(0x80 | (cp >> 12 & 0x3f)));
            str_put(t, (unsigned char)(0x80 | (cp >> 6 & 0x3f)));
            str_put(t, (unsigned char)(0x80 | (cp & 0x3f)));
        }
    }
    if (i >= sc->n) return scan_fail(sc, sc->i, "string without its closing quote");
    sc->i = i + 1;
    return true;
}

static void skip_ws(st_scan *sc) {
    while (sc->i < sc->n && strchr(" \t\r\n", sc->s[sc->i]) && sc->s[sc->i]) sc->i++;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* The number at sc->i: JSON's grammar, and where it is a size or an offset
 * (where is AT_DIM or AT_OFFSET, index k), plain digits. */
static bool scan_number(st_scan *sc, int where, int k) {
    const char *s = sc->s;
    const size_t at = sc->i;
    size_t i = at;
    while (i < sc->n && s[i] && strchr("0123456789+-eE.", s[i])) i++;
    const size_t len = i - at;
    sc->i = i;
    /* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
    size_t j = at;
    bool ok = true;
    if (j < i && s[j] == '-') j++;
    if (j < i && s[j] == '0') j++;
    else if (j < i && is_digit(s[j])) while (j < i && is_digit(s[j])) j++;
    else ok = false;
    if (ok && j < i && s[j] == '.') {
        size_t d = ++j;
        while (j < i && is_digit(s[j])) j++;
        ok = j > d;
    }
    if (ok && j < i && (s[j] == 'e' || s[j] == 'E')) {
        j++;
        if (j < i && (s[j] == '+' || s[j] == '-')) j++;
        size_t d = j;
        while (j < i && is_digit(s[j])) j++;
        ok = j > d;
    }
    const int shown = (int)GML_MIN(len, (size_t)40);
    if (!ok || j != i)
        return scan_fail(sc, at, "header is not valid JSON: '%.*s' is not a number", shown, s + at);
    if (where != AT_DIM && where != AT_OFFSET) return true;
    bool whole = true;
    for (size_t p = at; p < i; p++) whole = whole && is_digit(s[p]);
    if (whole) return true;
    char name[100], field[40];
    gml_printable_n(sc->name, sc->name_len, name, sizeof name);
    if (where == AT_DIM) snprintf(field, sizeof field, "shape dim %d", k);
    else snprintf(field, sizeof field, "data_offsets[%d]", k);
    const bool negative = !memchr(s + at, '.', len) && !memchr(s + at, 'e', len) &&
                          !memchr(s + at, 'E', len);
    return scan_fail(sc, at, "tensor '%s': %s is %.*s, %s (%s are written as plain digits: no "
                     "sign, point or exponent)", name, field, shown, s + at,
                     negative ? "negative" : "not a whole number",
                     where == AT_DIM ? "sizes" : "offsets");
}

/* The value at sc->i (after whitespace); where says what it is. */
static bool scan_value(st_scan *sc, int where, int k) {
    skip_ws(sc);
    if (sc->i >= sc->n) return scan_fail(sc, sc->i, "header is not valid JSON: it ends early");
    const char c = sc->s[sc->i];
    char shown[100], name[100];
    if (c == '"') {
        const size_t at = sc->i;
        st_str t;
        if (!scan_string(sc, &t)) return false;
        if (where == AT_DTYPE && memchr(t.text, '\0', t.len))
            return scan_fail(sc, at, "tensor '%s': dtype '%s' is not supported; expected F32 or I32",
                             gml_printable_n(sc->name, sc->name_len, name, sizeof name),
                             gml_printable_n(t.text, t.len, shown, 40));
        return true;
    }
    if (c == '-' || is_digit(c)) return scan_number(sc, where, k);
    if (c != '{' && c != '[') { /* true, false, null: cJSON checked them */
        while (sc->i < sc->n && sc->s[sc->i] >= 'a' && sc->s[sc->i] <= 'z') sc->i++;
        return true;
    }
    const bool object = c == '{';
    const char close = object ? '}' : ']';
    sc->i++;
    skip_ws(sc);
    if (sc->i < sc->n && sc->s[sc->i] == close) {
        sc->i++;
        return true;
    }
    for (int n = 0;; n++) {
        int child = AT_OTHER;
        if (object) {
            skip_ws(sc);
            const size_t at = sc->i;
            st_str key;
            if (sc->i >= sc->n || sc->s[sc->i] != '"')
                return scan_fail(sc, sc->i, "header is not valid JSON: expected a key");
            if (!scan_string(sc, &key)) return false;
            if (where == AT_ROOT && str_is(&key, "__metadata__")) {
                child = AT_META;
            } else if (where == AT_ROOT) {
                if (key.bad >= 0)
                    return scan_fail(sc, key.bad_at, "tensor name '%s' holds byte 0x%02x, a control "
                                     "character; names must be printable",
                                     gml_printable_n(key.text, key.len, shown, sizeof shown),
                                     key.bad);
                memcpy(sc->name, key.text, key.len);
                sc->name_len = key.len;
                child = AT_ENTRY;
            } else if (where == AT_ENTRY) {
                if (memchr(key.text, '\0', key.len))
                    return scan_fail(sc, at, "tensor '%s': field name '%s' holds byte 0x00",
                                     gml_printable_n(sc->name, sc->name_len, name, sizeof name),
                                     gml_printable_n(key.text, key.len, shown, sizeof shown));
                child = str_is(&key, "dtype")          ? AT_DTYPE
                        : str_is(&key, "shape")        ? AT_SHAPE
                        : str_is(&key, "data_offsets") ? AT_OFFSETS
                                                       : AT_OTHER;
            }
            skip_ws(sc);
            if (sc->i >= sc->n || sc->s[sc->i] != ':')
                return scan_fail(sc, sc->i, "header is not valid JSON: expected ':'");
            sc->i++;
        }
        if (!object) child = where == AT_SHAPE ? AT_DIM : where == AT_OFFSETS ? AT_OFFSET : AT_OTHER;
        if (!scan_value(sc, child, n)) return false;
        skip_ws(sc);
        if (sc->i < sc->n && sc->s[sc->i] == ',') {
            sc->i++;
            continue;
        }
        if (sc->i < sc->n && sc->s[sc->i] == close) {
            sc->i++;
            return true;
        }
        return scan_fail(sc, sc->i, "header is not valid JSON: expected ',' or '%c'", close);
    }
}

/* The first byte that is not UTF-8 (RFC 3629: no overlong forms, no
 * surrogates, nothing past U+10FFFF), or n. */
static size_t utf8_check(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                     : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!len || len > n - i) return i;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xc0) != 0x80) return i;
        if ((c == 0xe0 && s[i + 1] < 0xa0) || (c == 0xed && s[i + 1] > 0x9f) ||
            (c == 0xf0 && s[i + 1] < 0x90) || (c == 0xf4 && s[i + 1] > 0x8f))
            return i;
        i += len;
    }
    return n;
}

/* What the first 8 bytes of a file that is not safetensors say it is, or
 * NULL: a zip archive (torch.save since PyTorch 1.6), a pickle (torch.save
 * with the legacy format, pickle.dump), a NumPy file, a JSON text (a
 * sharded checkpoint's index). Asked only of a file refused as safetensors. */
const char *gml_st_other_format(const unsigned char b[8]) {
    if (memcmp(b, "PK\x03\x04", 4) == 0 || memcmp(b, "PK\x05\x06", 4) == 0)
        return "a zip archive (torch.save writes one: a PyTorch checkpoint)";
    if (b[0] == 0x80 && b[1] >= 2 && b[1] <= 5)
        return "a Python pickle (torch.save's legacy format, or pickle.dump)";
    if (memcmp(b, "\x93NUMPY", 6) == 0) return "a NumPy .npy file";
    bool text = true; /* a header length (< 2^27) has zero bytes; text has none */
    for (int i = 1; i < 8; i++) text = text && b[i] >= 0x09 && b[i] < 0x7f;
    if (text && (b[0] == '{' || b[0] == '[' || b[0] == ' ' || b[0] == '\n'))
        return "a JSON text (a sharded checkpoint's index is read from a path ending in .json)";
    return NULL;
}

static bool read_header_checked(const gml_source *s, st_header *h);

/* Reads and checks the header of s into h (free it with free_header). A file
 * refused whose first bytes say it is another format is named as that. */
static bool read_header(const gml_source *s, st_header *h) {
    if (read_header_checked(s, h)) return true;
    unsigned char b[8];
    const char *other = s->size >= 8 && gml_source_read(s, 0, b, 8, NULL, 0)
                            ? gml_st_other_format(b) : NULL;
    if (other)
        gml_errf(h->err, h->err_size, "%s: offset 0: %s, not a safetensors file (which starts "
                 "with an 8-byte header length, then '{')%s", s->what, other, GML_ST_CONVERT_HINT);
    return false;
}

static bool read_header_checked(const gml_source *s, st_header *h) {
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
    const size_t bad = utf8_check((const unsigned char *)text, (size_t)n);
    if (bad < n) {
        gml_errf(h->err, h->err_size, "%s: offset %" PRIu64 ": header is not UTF-8 (byte 0x%02x); "
                 "the format's header is UTF-8 JSON", what, 8 + (uint64_t)bad,
                 (unsigned char)text[bad]);
        free(text);
        return false;
    }
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
    } else if (text[0] != '{') {
        ok = gml_errf(h->err, h->err_size, "%s: offset 8: header starts with byte 0x%02x, "
                      "expected '{' (the format allows no space before the JSON object)", what,
                      (unsigned char)text[0]);
    } else {
        for (uint64_t i = stop; i < n && ok; i++)
            if (!strchr(" \t\r\n", text[i]) || !text[i])
                ok = gml_errf(h->err, h->err_size, "%s: offset %" PRIu64 ": unexpected byte 0x%02x "
                              "after the header's JSON object (only spaces may pad it)", what,
                              8 + i, (unsigned char)text[i]);
    }
    if (ok) {
        st_scan sc = {.h = h, .s = text, .n = (size_t)stop};
        ok = scan_value(&sc, AT_ROOT, 0);
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
        mem += gml_tensor_overhead() + gml_round_up((size_t)(h.e[i].end - h.e[i].begin), GML_ALIGN);
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
    GML_IO_NONNULL(buf, NULL, err, err_size);
    gml_source s = gml_source_memory(buf, len, what);
    return read_safetensors(&s, err, err_size);
}

gml_context *gml_load_safetensors(const char *path, char *err, size_t err_size) {
    GML_IO_NONNULL(path, NULL, err, err_size);
    gml_source s;
    if (!gml_source_open(&s, path, err, err_size)) return NULL;
    gml_context *ctx = read_safetensors(&s, err, err_size);
    gml_source_close(&s);
    return ctx;
}

/* ---- mapped files and sharded checkpoints ----------------------------------- */

typedef struct st_item {
    char *name;                /* the full name, any length */
    gml_type type;
    int n_dims;
    int64_t ne[GML_MAX_DIMS];
    const unsigned char *data; /* in the mapping */
    size_t bytes;
    void *copy;                /* a 64-byte aligned copy when data is not 4-byte aligned, made on first use */
    int shard;
} st_item;

typedef struct st_map {
    char *path;
    void *addr;
    size_t len;
} st_map;

struct gml_safetensors {
    st_item *items;
    int n;
    st_map *maps;
    int n_maps;
    st_item *unlisted; /* an index's shards' tensors its weight_map leaves out (GML_ST_UNLISTED) */
    int n_unlisted;
};

static void unmap_all(gml_safetensors *st) {
    for (int i = 0; i < st->n_maps; i++) {
        if (st->maps[i].addr && st->maps[i].len) munmap(st->maps[i].addr, st->maps[i].len);
        free(st->maps[i].path);
    }
    free(st->maps);
    st->maps = NULL;
    st->n_maps = 0;
}

void gml_safetensors_close(gml_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n; i++) {
        free(st->items[i].name);
        free(st->items[i].copy);
    }
    free(st->items);
    for (int i = 0; i < st->n_unlisted; i++) free(st->unlisted[i].name);
    free(st->unlisted);
    unmap_all(st);
    free(st);
}

/* Maps path read-only into a new st->maps entry; its index, or -1. */
static int map_file(gml_safetensors *st, const char *path, char *err, size_t es) {
    st_map *m = realloc(st->maps, (size_t)(st->n_maps + 1) * sizeof *m);
    if (!m) return gml_errf(err, es, "%s: out of memory", path), -1;
    st->maps = m;
    m = &st->maps[st->n_maps];
    *m = (st_map){.path = strdup(path)};
    if (!m->path) return gml_errf(err, es, "%s: out of memory", path), -1;
    st->n_maps++;
    gml_source src;
    if (!gml_source_open(&src, path, err, es)) return -1;
    if (src.size > SIZE_MAX / 2) {
        gml_source_close(&src);
        return gml_errf(err, es, "%s: %" PRIu64 " bytes is too large to map", path, src.size), -1;
    }
    m->len = (size_t)src.size;
    if (m->len) {
        void *a = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, src.fd, 0);
        if (a == MAP_FAILED) {
            int e = errno;
            gml_source_close(&src);
            m->len = 0;
            return gml_errf(err, es, "%s: cannot map %zu bytes: %s", path, (size_t)src.size,
                            strerror(e)), -1;
        }
        m->addr = a;
    }
    gml_source_close(&src); /* the mapping stays valid */
    return st->n_maps - 1;
}

/* Appends the tensors of one mapped file (all, or those `want` names with
 * this shard: want_shard[i] == shard). */
static bool add_file(gml_safetensors *st, int shard, const char *what, char *err, size_t es) {
    const st_map *m = &st->maps[shard];
    gml_source src = gml_source_memory(m->addr ? m->addr : "", m->len, what);
    st_header h = {.what = what, .err = err, .err_size = es, .any_name_length = true};
    bool ok = read_header(&src, &h);
    if (ok) {
        st_item *items = realloc(st->items, (size_t)(st->n + h.n + 1) * sizeof *items);
        if (!items) ok = gml_errf(err, es, "%s: out of memory", what);
        else st->items = items;
    }
    for (int i = 0; ok && i < h.n; i++) {
        const st_entry *e = &h.e[i];
        st_item *it = &st->items[st->n];
        *it = (st_item){.name = strdup(e->name), .type = e->type, .n_dims = e->n_dims,
                        .data = (const unsigned char *)m->addr + h.data_at + e->begin,
                        .bytes = (size_t)(e->end - e->begin), .shard = shard};
        memcpy(it->ne, e->ne, sizeof it->ne);
        if (!it->name) ok = gml_errf(err, es, "%s: out of memory", what);
        else st->n++;
    }
    free_header(&h);
    return ok;
}

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

/* The index of a sharded checkpoint, {"metadata": {...}, "weight_map":
 * {"name": "shard file", ...}}, as huggingface's save_pretrained writes it:
 * its pairs, checked (an object of strings; a shard is a relative file name
 * with no "/.." climbing out, no control byte; no name twice). */
/* cJSON cuts a string at a \u0000 ("w\u0000zz" is "w") and takes raw control
 * bytes inside strings; this pass over the text of the JSON value (len
 * bytes, valid JSON) refuses both, naming the string as written and, for a
 * value, its key. (Escaped control characters other than \u0000 reach the
 * checks of names and paths decoded.) */
/* The JSON string of n bytes at s (quotes included) decoded for a message:
 * escapes of ASCII as the byte (so \u0000 shows as \x00), others as
 * written; then as gml_printable_n shows it. */
static const char *json_string_shown(const char *s, size_t n, char *buf, size_t size) {
    char dec[256];
    size_t k = 0;
    for (size_t i = 1; i + 1 < n && k < sizeof dec; i++) {
        char c = s[i];
        if (c == '\\' && i + 2 < n) {
            char e = s[++i];
            int v = e == 'u' && i + 5 < n ? hex4(s + i + 1) : -1;
            if (v >= 0 && v < 0x80) c = (char)v, i += 4;
            else if (e == 'u') c = '\\', i--;
            else c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b'
                     : e == 'f' ? '\f' : e;
        }
        dec[k++] = c;
    }
    return gml_printable_n(dec, k, buf, size);
}

static bool index_strings_check(const char *s, size_t len, const char *what, char *err,
                                size_t err_size) {
    size_t key_at = 0, key_len = 0; /* the last key seen, as written (quotes included) */
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '"') continue;
        const size_t at = i;
        int raw = -1;     /* the first raw control byte */
        bool nul = false; /* a \u0000 */
        for (i++; i < len && s[i] != '"'; i++) {
            unsigned char c = (unsigned char)s[i];
            if (c < 0x20 && raw < 0) raw = c;
            if (c != '\\' || i + 1 >= len) continue;
            if (s[i + 1] == 'u' && i + 5 < len && hex4(s + i + 2) == 0) nul = true;
            i++; /* the escaped character: a quote there does not end the string */
        }
        const size_t str_len = i < len ? i - at + 1 : len - at;
        size_t j = i + 1;
        while (j < len && s[j] && strchr(" \t\r\n", s[j])) j++;
        const bool is_key = j < len && s[j] == ':';
        if (raw >= 0 || nul) {
            char shown[160], key[120], what_bad[96];
            json_string_shown(s + at, str_len, shown, sizeof shown);
            if (nul)
                snprintf(what_bad, sizeof what_bad, "\\u0000 (a NUL byte, which would cut it short)");
            else
                snprintf(what_bad, sizeof what_bad, "raw byte 0x%02x (JSON needs control characters "
                         "escaped)", raw);
            if (is_key)
                return gml_errf(err, err_size, "%s: offset %zu: key '%s' holds %s; tensor names and "
                                "shard paths must not", what, at, shown, what_bad);
            return gml_errf(err, err_size, "%s: offset %zu: the value '%s' of key '%s' holds %s; tensor "
                            "names and shard paths must not", what, at, shown,
                            key_len ? json_string_shown(s + key_at, key_len, key, sizeof key) : "",
                            what_bad);
        }
        if (is_key) key_at = at, key_len = str_len;
    }
    return true;
}

gml_status gml_parse_safetensors_index(const void *buf, size_t len, const char *what,
                                       gml_st_index_entry **entries, int *n, char *err,
                                       size_t err_size) {
    GML_IO_NONNULL(entries, GML_ERR_INVALID, err, err_size);
    GML_IO_NONNULL(n, GML_ERR_INVALID, err, err_size);
    *entries = NULL;
    *n = 0;
    GML_IO_NONNULL(buf, GML_ERR_INVALID, err, err_size);
    GML_IO_NONNULL(what, GML_ERR_INVALID, err, err_size);
    char shown[100], sh2[100];
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(buf, len, &end, false);
    if (!root) {
        size_t at = end ? (size_t)(end - (const char *)buf) : 0;
        return gml_errf(err, err_size, "%s: offset %zu: not valid JSON (a sharded checkpoint's "
                        "index is {\"metadata\": {...}, \"weight_map\": {name: shard file}})", what,
                        at), GML_ERR_INVALID;
    }
    gml_status st = GML_ERR_INVALID;
    if (!index_strings_check(buf, (size_t)(end - (const char *)buf), what, err, err_size)) goto done;
    for (size_t i = (size_t)(end - (const char *)buf); i < len; i++)
        if (!strchr(" \t\r\n", ((const char *)buf)[i]) || !((const char *)buf)[i]) {
            gml_errf(err, err_size, "%s: offset %zu: unexpected byte 0x%02x after the JSON object",
                     what, i, ((const unsigned char *)buf)[i]);
            goto done;
        }
    const cJSON *map = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(map)) {
        gml_errf(err, err_size, "%s: no \"weight_map\" object (a sharded checkpoint's index maps "
                 "each tensor name to its shard file)", what);
        goto done;
    }
    int count = cJSON_GetArraySize(map);
    gml_st_index_entry *e = calloc((size_t)count + 1, sizeof *e);
    if (!e) {
        gml_errf(err, err_size, "%s: out of memory", what);
        goto done;
    }
    *entries = e;
    for (const cJSON *x = map->child; x; x = x->next) {
        gml_printable(x->string, shown, sizeof shown);
        if (!cJSON_IsString(x)) {
            gml_errf(err, err_size, "%s: weight_map '%s' is %s, expected a shard file name", what,
                     shown, json_type(x));
            goto done;
        }
        const char *f = x->valuestring;
        bool bad = !*f || f[0] == '/' || strstr(f, "..") != NULL;
        for (const char *c = x->string; *c && !bad; c++) bad = (unsigned char)*c < 0x20 || *c == 0x7f;
        for (const char *c = f; *c && !bad; c++) bad = (unsigned char)*c < 0x20 || *c == 0x7f;
        if (bad || strlen(f) > 4000) {
            gml_errf(err, err_size, "%s: weight_map '%s': '%s' is not a shard file name beside the "
                     "index (relative, no '..', printable)", what, shown,
                     gml_printable(f, sh2, sizeof sh2));
            goto done;
        }
        for (int k = 0; k < *n; k++)
            if (strcmp(e[k].name, x->string) == 0) {
                gml_errf(err, err_size, "%s: weight_map names '%s' twice", what, shown);
                goto done;
            }
        e[*n].name = strdup(x->string);
        e[*n].shard = strdup(f);
        (*n)++;
        if (!e[*n - 1].name || !e[*n - 1].shard) {
            gml_errf(err, err_size, "%s: out of memory", what);
            goto done;
        }
    }
    st = GML_OK;
done:
    cJSON_Delete(root);
    if (st != GML_OK) {
        gml_free_safetensors_index(*entries, *n);
        *entries = NULL;
        *n = 0;
    }
    return st;
}

void gml_free_safetensors_index(gml_st_index_entry *entries, int n) {
    if (!entries) return;
    for (int i = 0; i < n; i++) {
        free(entries[i].name);
        free(entries[i].shard);
    }
    free(entries);
}

static int cmp_item_name(const void *a, const void *b) {
    return strcmp(((const st_item *)a)->name, ((const st_item *)b)->name);
}

static gml_safetensors *open_index(gml_safetensors *st, const char *path, unsigned flags, char *err,
                                   size_t es) {
    void *text;
    size_t len;
    gml_st_index_entry *ent = NULL;
    int n = 0;
    gml_status rc = gml_read_file(path, &text, &len, err, es)
                        ? gml_parse_safetensors_index(text, len, path, &ent, &n, err, es)
                        : GML_ERR_IO;
    if (rc != GML_ERR_IO) free(text);
    if (rc != GML_OK) {
        gml_safetensors_close(st);
        return NULL;
    }
    const char *slash = strrchr(path, '/');
    const size_t dir_len = slash ? (size_t)(slash - path + 1) : 0;
    bool ok = n > 0 || gml_errf(err, es, "%s: weight_map is empty", path);
    /* each shard once, in the order the index first names it */
    for (int i = 0; ok && i < n; i++) {
        bool seen = false;
        for (int k = 0; k < i && !seen; k++) seen = strcmp(ent[k].shard, ent[i].shard) == 0;
        if (seen) continue;
        char *full = malloc(dir_len + strlen(ent[i].shard) + 1);
        if (!full) {
            ok = gml_errf(err, es, "%s: out of memory", path);
            break;
        }
        memcpy(full, path, dir_len);
        strcpy(full + dir_len, ent[i].shard);
        int shard = map_file(st, full, err, es);
        ok = shard >= 0 && add_file(st, shard, st->maps[shard].path, err, es);
        free(full);
    }
    /* every name of the index is in the shard it names */
    for (int i = 0; ok && i < n; i++) {
        st_item *it = NULL;
        for (int k = 0; k < st->n && !it; k++)
            if (st->items[k].shard >= 0 && strcmp(st->items[k].name, ent[i].name) == 0 &&
                ends_with(st->maps[st->items[k].shard].path, ent[i].shard) &&
                strlen(st->maps[st->items[k].shard].path) == dir_len + strlen(ent[i].shard))
                it = &st->items[k];
        if (!it) {
            char shown[100];
            ok = gml_errf(err, es, "%s: weight_map puts '%s' in %s, which does not hold it", path,
                          gml_printable(ent[i].name, shown, sizeof shown), ent[i].shard);
        } else {
            it->shard = -1 - it->shard; /* listed: kept */
        }
    }
    /* a tensor a shard holds that weight_map leaves out: unexpected, as
     * load_state_dict(strict=True) says; with GML_ST_UNLISTED set aside */
    int kept = 0, n_out = 0;
    for (int k = 0; ok && k < st->n; k++) n_out += st->items[k].shard >= 0;
    if (ok && n_out && !(flags & GML_ST_UNLISTED)) {
        const st_item *it = NULL;
        for (int k = 0; !it; k++)
            if (st->items[k].shard >= 0) it = &st->items[k];
        char shown[100];
        ok = gml_errf(err, es, "%s: weight_map leaves out '%s', which shard %s holds: an unexpected "
                      "tensor (%d in all); an index lists every tensor of its shards",
                      path, gml_printable(it->name, shown, sizeof shown),
                      st->maps[it->shard].path + dir_len, n_out);
    }
    if (ok && n_out) {
        st->unlisted = malloc((size_t)n_out * sizeof *st->unlisted);
        if (!st->unlisted) ok = gml_errf(err, es, "%s: out of memory", path);
    }
    for (int k = 0; ok && k < st->n; k++) {
        if (st->items[k].shard < 0) {
            st->items[k].shard = -1 - st->items[k].shard;
            st->items[kept++] = st->items[k];
        } else {
            st->unlisted[st->n_unlisted++] = st->items[k];
        }
    }
    if (ok) st->n = kept;
    /* one name in two shards: the index cannot say which */
    if (ok && st->n > 1) {
        st_item *sorted = malloc((size_t)st->n * sizeof *sorted);
        if (!sorted) ok = gml_errf(err, es, "%s: out of memory", path);
        else {
            memcpy(sorted, st->items, (size_t)st->n * sizeof *sorted);
            qsort(sorted, (size_t)st->n, sizeof *sorted, cmp_item_name);
            for (int k = 1; k < st->n && ok; k++)
                if (strcmp(sorted[k - 1].name, sorted[k].name) == 0) {
                    char shown[100];
                    ok = gml_errf(err, es, "%s: tensor '%s' is in two shards", path,
                                  gml_printable(sorted[k].name, shown, sizeof shown));
                }
            free(sorted);
        }
    }
    gml_free_safetensors_index(ent, n);
    if (ok) return st;
    gml_safetensors_close(st);
    return NULL;
}

gml_safetensors *gml_safetensors_open_flags(const char *path, unsigned flags, char *err,
                                            size_t err_size) {
    GML_IO_NONNULL(path, NULL, err, err_size);
    if (flags & ~(unsigned)GML_ST_UNLISTED)
        return gml_errf(err, err_size, "%s: unknown flags 0x%x", path, flags), NULL;
    gml_safetensors *st = calloc(1, sizeof *st);
    if (!st) return gml_errf(err, err_size, "%s: out of memory", path), NULL;
    if (ends_with(path, ".json")) return open_index(st, path, flags, err, err_size);
    int shard = map_file(st, path, err, err_size);
    if (shard < 0 || !add_file(st, shard, path, err, err_size)) {
        gml_safetensors_close(st);
        return NULL;
    }
    return st;
}

gml_safetensors *gml_safetensors_open(const char *path, char *err, size_t err_size) {
    GML_IO_NONNULL(path, NULL, err, err_size);
    return gml_safetensors_open_flags(path, 0, err, err_size);
}

int gml_safetensors_count(const gml_safetensors *st) {
    GML_IO_NONNULL(st, 0, NULL, 0);
    return st->n;
}

const char *gml_safetensors_unlisted(const gml_safetensors *st, int i, const char **file) {
    GML_IO_NONNULL(st, NULL, NULL, 0);
    if (!st || i < 0 || i >= st->n_unlisted) return NULL;
    if (file) *file = st->maps[st->unlisted[i].shard].path;
    return st->unlisted[i].name;
}

const char *gml_safetensors_name(const gml_safetensors *st, int i) {
    GML_IO_NONNULL(st, NULL, NULL, 0);
    return st && i >= 0 && i < st->n ? st->items[i].name : NULL;
}

const char *gml_safetensors_file(const gml_safetensors *st, int i) {
    GML_IO_NONNULL(st, NULL, NULL, 0);
    return st && i >= 0 && i < st->n ? st->maps[st->items[i].shard].path : NULL;
}

int gml_safetensors_find(const gml_safetensors *st, const char *name) {
    GML_IO_NONNULL(st, -1, NULL, 0);
    GML_IO_NONNULL(name, -1, NULL, 0);
    for (int i = 0; st && name && i < st->n; i++)
        if (strcmp(st->items[i].name, name) == 0) return i;
    return -1;
}

gml_tensor *gml_safetensors_tensor(gml_safetensors *st, int i, gml_context *ctx, const char *name,
                                   char *err, size_t err_size) {
    GML_IO_NONNULL(st, NULL, err, err_size);
    GML_IO_NONNULL(ctx, NULL, err, err_size);
    if (!st || i < 0 || i >= st->n || !ctx)
        return gml_errf(err, err_size, "safetensors: tensor %d: no such tensor (or no context)", i),
               NULL;
    st_item *it = &st->items[i];
    const char *what = st->maps[it->shard].path;
    char shown[100];
    if (!name) name = it->name;
    if (strlen(name) >= GML_MAX_NAME)
        return gml_errf(err, err_size, "%s: tensor '%s': name is %zu bytes; give a shorter one "
                        "(ggmlite tensor names hold at most %d)", what,
                        gml_printable(name, shown, sizeof shown), strlen(name), GML_MAX_NAME - 1),
               NULL;
    gml_tensor *t = gml_new_tensor(ctx, it->type, it->n_dims, it->ne);
    if (!t)
        return gml_errf(err, err_size, "%s: tensor '%s': %s", what,
                        gml_printable(it->name, shown, sizeof shown), gml_last_error(ctx)), NULL;
    gml_set_name(t, name);
    if (t->data) { /* an allocating context: a copy */
        memcpy(t->data, it->data, it->bytes);
        return t;
    }
    if ((uintptr_t)it->data % 4 == 0) {
        t->data = (void *)(uintptr_t)it->data; /* read-only: the mapping is PROT_READ */
        return t;
    }
    if (!it->copy) { /* unaligned in the file (an odd header length): copied once */
        if (posix_memalign(&it->copy, GML_ALIGN, it->bytes ? it->bytes : 1) != 0) {
            it->copy = NULL;
            return gml_errf(err, err_size, "%s: tensor '%s': out of memory for %zu bytes", what,
                            gml_printable(it->name, shown, sizeof shown), it->bytes), NULL;
        }
        memcpy(it->copy, it->data, it->bytes);
    }
    t->data = it->copy;
    return t;
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

/* The safetensors dtype a tensor of type t is saved as, or NULL (q8_0: the
 * format has no blocked types). */
static const char *st_dtype_name(gml_type t) {
    switch (t) {
    case GML_F32: return "F32";
    case GML_I32: return "I32";
    case GML_F16: return "F16";
    case GML_BF16: return "BF16";
    default: return NULL;
    }
}

static bool check_save_args(const char *path, const gml_tensor *const *ts, int n, char *err,
                            size_t es) {
    if (n < 0 || (n > 0 && !ts)) return gml_errf(err, es, "%s: no tensors given (n = %d)", path, n);
    char shown[100];
    for (int i = 0; i < n; i++) {
        const gml_tensor *t = ts[i];
        if (!t) return gml_errf(err, es, "%s: tensor %d is NULL", path, i);
        const char *name = gml_printable(t->name, shown, sizeof shown);
        if (!st_dtype_name(t->type))
            return gml_errf(err, es, "%s: tensor '%s' is %s, which safetensors has no dtype for "
                            "(f32, i32, f16 and bf16 are saved); convert it first (gml_cpy into "
                            "an f32, f16 or bf16 tensor)", path, name, gml_type_name(t->type));
        if (!t->data)
            return gml_errf(err, es, "%s: tensor '%s' has no data (made in a no_alloc context?)",
                            path, name);
        if (strcmp(t->name, "__metadata__") == 0)
            return gml_errf(err, es, "%s: tensor %d is named '__metadata__', which the format "
                            "reserves", path, i);
        for (const char *p = t->name; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f) /* the loader refuses them */
                return gml_errf(err, es, "%s: tensor %d's name '%s' holds byte 0x%02x, a control "
                                "character; names must be printable", path, i, name,
                                (unsigned char)*p);
        for (int k = 0; k < i; k++)
            if (strcmp(ts[k]->name, t->name) == 0)
                return gml_errf(err, es, "%s: tensors %d and %d are both named '%s'", path, k, i,
                                name);
    }
    return true;
}

gml_status gml_save_safetensors(const char *path, const gml_tensor *const *tensors, int n,
                                char *err, size_t err_size) {
    GML_IO_NONNULL(path, GML_ERR_INVALID, err, err_size);
    if (n > 0) GML_IO_NONNULL(tensors, GML_ERR_INVALID, err, err_size);
    if (!check_save_args(path, tensors, n, err, err_size)) return GML_ERR_INVALID;

    strbuf b = {0};
    sb_put(&b, "{", 1);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const gml_tensor *t = tensors[i];
        uint64_t bytes = (uint64_t)gml_nelements(t) * gml_type_size(t->type);
        sb_put(&b, i ? "," : "", i ? 1 : 0);
        sb_json_string(&b, t->name);
        sb_printf(&b, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(t->type));
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
