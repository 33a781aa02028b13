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
#include "file.h"

#include <cjson/cJSON.h>
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
    char shown[100];
    for (int i = 0; i < n; i++) {
        const gml_tensor *t = ts[i];
        if (!t) return gml_errf(err, es, "%s: tensor %d is NULL", path, i);
        const char *name = gml_printable(t->name, shown, sizeof shown);
        if (t->type != GML_F32 && t->type != GML_I32)
            return gml_errf(err, es, "%s: tensor '%s' is %s; only f32 and i32 tensors are saved",
                            path, name, gml_type_name(t->type));
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
