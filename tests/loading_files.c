/* Makes the small files tests/test_loading.sh feeds run-graph (no Python
 * at test time):
 *
 *   loading_files seq-first IN.npy OUT.npy        f32 [A, B, C] -> [B, A, C]
 *   loading_files astype IN.npy OUT.npy f8|f2      f32 data as float64 / float16
 *   loading_files npy OUT.npy f4|f8|f2|b1|i8 D0,D1,.. V,V,..
 *                                                  values repeated to fill the shape
 *   loading_files st-rename IN.safetensors OUT.safetensors PREFIX [odd] [extra=NAME]... [dup=P2]
 *       every tensor under PREFIX + its name (any length); odd: a header
 *       length of 4k+2 bytes, so the data sits at offsets no multiple of 4;
 *       extra=NAME: one more F32 [1] tensor PREFIX + NAME (up to 8 of them);
 *       dup=P2: every tensor also under P2 (a second block)
 *   loading_files st-shard IN.safetensors DIR PREFIX
 *       DIR/model-0000{1,2}-of-00002.safetensors (tensors alternately) and
 *       DIR/model.safetensors.index.json, names under PREFIX
 *
 * Float16 is written by round-to-nearest-even from the float; the tests use
 * values it holds exactly. Exit 0, or 1 with a message. */
#include <ggmlite/ggmlite.h>
#include <ggmlite/io.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(const char *msg, const char *arg) {
    fprintf(stderr, "loading_files: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    return 1;
}

static uint16_t float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t man = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) { /* subnormal or zero */
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = sign | (uint32_t)exp << 10 | man >> 13, rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)h;
}

/* A .npy v1.0 file of dtype descr, shape ne[n], raw data. */
static int write_npy(const char *path, const char *descr, const int64_t *ne, int n, const void *data,
                     size_t bytes) {
    char shape[128] = "(";
    for (int i = 0; i < n; i++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%lld%s", (long long)ne[i],
                 n == 1 ? "," : i + 1 < n ? ", " : "");
    strcat(shape, ")");
    char dict[256];
    int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    size_t total = ((size_t)(10 + dl + 1) + 63) / 64 * 64;
    FILE *f = fopen(path, "wb");
    if (!f) return die("cannot create", path);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)((total - 10) & 0xff),
                             (unsigned char)((total - 10) >> 8)};
    fwrite(pre, 1, 10, f);
    fwrite(dict, 1, (size_t)dl, f);
    for (size_t i = 10 + (size_t)dl; i + 1 < total; i++) fputc(' ', f);
    fputc('\n', f);
    fwrite(data, 1, bytes, f);
    return fclose(f) == 0 ? 0 : die("write failed", path);
}

static const char *descr_of(const char *dt, size_t *size) {
    static const struct { const char *name, *descr; size_t size; } T[] = {
        {"f4", "<f4", 4}, {"f8", "<f8", 8}, {"f2", "<f2", 2}, {"b1", "|b1", 1}, {"i8", "<i8", 8}};
    for (size_t i = 0; i < sizeof T / sizeof *T; i++)
        if (strcmp(dt, T[i].name) == 0) {
            *size = T[i].size;
            return T[i].descr;
        }
    return NULL;
}

/* n floats as dtype dt into a malloc'd buffer. */
static void *encode(const float *v, int64_t n, const char *dt, size_t *bytes) {
    size_t size = 0;
    descr_of(dt, &size);
    unsigned char *out = malloc((size_t)n * size + 1);
    for (int64_t i = 0; i < n && out; i++) {
        unsigned char *p = out + (size_t)i * size;
        if (strcmp(dt, "f4") == 0) memcpy(p, &v[i], 4);
        else if (strcmp(dt, "f8") == 0) {
            double d = v[i];
            memcpy(p, &d, 8);
        } else if (strcmp(dt, "f2") == 0) {
            uint16_t h = float_to_half(v[i]);
            memcpy(p, &h, 2);
        } else if (strcmp(dt, "b1") == 0) {
            *p = v[i] != 0;
        } else {
            int64_t k = (int64_t)v[i];
            memcpy(p, &k, 8);
        }
    }
    *bytes = (size_t)n * size;
    return out;
}

static gml_tensor *load_f32(const char *path, gml_context **ctx) {
    char err[512];
    *ctx = gml_load_npy(path, "t", err, sizeof err);
    if (!*ctx) {
        fprintf(stderr, "loading_files: %s\n", err);
        return NULL;
    }
    return gml_get_tensor(*ctx, "t");
}

/* ---- safetensors with any names ---------------------------------------------- */

typedef struct st_out {
    char *json;
    size_t len, cap;
} st_out;

static void put(st_out *o, const char *s) {
    size_t n = strlen(s);
    if (o->len + n + 1 > o->cap) {
        o->cap = (o->len + n + 1) * 2;
        o->json = realloc(o->json, o->cap);
    }
    memcpy(o->json + o->len, s, n + 1);
    o->len += n;
}

/* Writes tensors ts[i] for i with (i % parts == part) under prefix (+ extra). */
static int write_st(const char *path, gml_tensor **ts, int n, int parts, int part, const char *prefix,
                    bool odd, const char *const *extra, int n_extra, const char *dup) {
    st_out o = {0};
    char buf[512];
    uint64_t at = 0;
    put(&o, "{");
    bool first = true;
    for (int i = 0; i < n; i++) {
        if (i % parts != part) continue;
        const gml_tensor *t = ts[i];
        snprintf(buf, sizeof buf, "%s\"%s%s\":{\"dtype\":\"%s\",\"shape\":[", first ? "" : ",", prefix, t->name,
                 t->type == GML_F32 ? "F32" : "I32");
        put(&o, buf);
        for (int d = GML_MAX_DIMS - t->n_dims; d < GML_MAX_DIMS; d++) {
            snprintf(buf, sizeof buf, "%s%lld", d > GML_MAX_DIMS - t->n_dims ? "," : "", (long long)t->ne[d]);
            put(&o, buf);
        }
        snprintf(buf, sizeof buf, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                 (unsigned long long)(at + gml_nbytes(t)));
        put(&o, buf);
        at += gml_nbytes(t);
        first = false;
    }
    for (int k = 0; k < n_extra; k++) {
        snprintf(buf, sizeof buf, "%s\"%s%s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%llu,%llu]}",
                 first ? "" : ",", prefix, extra[k], (unsigned long long)at, (unsigned long long)at + 4);
        put(&o, buf);
        at += 4;
        first = false;
    }
    for (int i = 0; dup && i < n; i++) { /* the same data again, under dup */
        const gml_tensor *t = ts[i];
        snprintf(buf, sizeof buf, ",\"%s%s\":{\"dtype\":\"%s\",\"shape\":[", dup, t->name,
                 t->type == GML_F32 ? "F32" : "I32");
        put(&o, buf);
        for (int d = GML_MAX_DIMS - t->n_dims; d < GML_MAX_DIMS; d++) {
            snprintf(buf, sizeof buf, "%s%lld", d > GML_MAX_DIMS - t->n_dims ? "," : "", (long long)t->ne[d]);
            put(&o, buf);
        }
        snprintf(buf, sizeof buf, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                 (unsigned long long)(at + gml_nbytes(t)));
        put(&o, buf);
        at += gml_nbytes(t);
    }
    put(&o, "}");
    while (odd ? o.len % 4 != 2 : o.len % 8 != 0) put(&o, " ");
    FILE *f = fopen(path, "wb");
    if (!f) return die("cannot create", path);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)o.len >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(o.json, 1, o.len, f);
    for (int i = 0; i < n; i++)
        if (i % parts == part) fwrite(ts[i]->data, 1, gml_nbytes(ts[i]), f);
    for (int k = 0; k < n_extra; k++) fwrite("\0\0\0\0", 1, 4, f);
    for (int i = 0; dup && i < n; i++) fwrite(ts[i]->data, 1, gml_nbytes(ts[i]), f);
    free(o.json);
    return fclose(f) == 0 ? 0 : die("write failed", path);
}

static int load_st(const char *path, gml_context **ctx, gml_tensor **ts, int max) {
    char err[512];
    *ctx = gml_load_safetensors(path, err, sizeof err);
    if (!*ctx) return die(err, NULL), -1;
    int n = 0;
    for (gml_tensor *t = gml_get_first_tensor(*ctx); t && n < max; t = gml_get_next_tensor(*ctx, t)) ts[n++] = t;
    return n;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "seq-first") == 0) {
        gml_context *c;
        gml_tensor *t = load_f32(argv[2], &c);
        if (!t) return 1;
        if (t->n_dims != 3 || t->type != GML_F32) return die("not an f32 3-D array", argv[2]);
        const int64_t A = t->ne[1], B = t->ne[2], C = t->ne[3];
        float *out = malloc((size_t)(A * B * C) * 4);
        for (int64_t a = 0; a < A; a++)
            for (int64_t b = 0; b < B; b++)
                memcpy(out + (b * A + a) * C, (float *)t->data + (a * B + b) * C, (size_t)C * 4);
        int rc = write_npy(argv[3], "<f4", (int64_t[]){B, A, C}, 3, out, (size_t)(A * B * C) * 4);
        free(out);
        gml_free(c);
        return rc;
    }
    if (argc == 5 && strcmp(argv[1], "astype") == 0) {
        gml_context *c;
        gml_tensor *t = load_f32(argv[2], &c);
        size_t size;
        const char *descr = descr_of(argv[4], &size);
        if (!t || !descr) return t ? die("unknown dtype", argv[4]) : 1;
        size_t bytes;
        void *data = encode(t->data, gml_nelements(t), argv[4], &bytes);
        int rc = write_npy(argv[3], descr, t->ne + GML_MAX_DIMS - t->n_dims, t->n_dims, data, bytes);
        free(data);
        gml_free(c);
        return rc;
    }
    if (argc == 6 && strcmp(argv[1], "npy") == 0) {
        size_t size;
        const char *descr = descr_of(argv[3], &size);
        if (!descr) return die("unknown dtype", argv[3]);
        int64_t ne[4];
        int nd = 0;
        for (char *p = argv[4]; nd < 4; nd++) {
            ne[nd] = strtoll(p, &p, 10);
            if (*p != ',') {
                nd++;
                break;
            }
            p++;
        }
        int64_t n = 1;
        for (int i = 0; i < nd; i++) n *= ne[i];
        float vals[4096];
        int nv = 0;
        for (char *p = argv[5]; *p && nv < 4096;) {
            vals[nv++] = strtof(p, &p);
            if (*p == ',') p++;
            else if (*p) return die("bad value list", argv[5]);
        }
        if (!nv) return die("no values", NULL);
        float *v = malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) v[i] = vals[i % nv];
        size_t bytes;
        void *data = encode(v, n, argv[3], &bytes);
        int rc = write_npy(argv[2], descr, ne, nd, data, bytes);
        free(v);
        free(data);
        return rc;
    }
    if (argc >= 5 && strcmp(argv[1], "st-rename") == 0) {
        gml_context *c;
        gml_tensor *ts[64];
        int n = load_st(argv[2], &c, ts, 64);
        if (n < 0) return 1;
        bool odd = false;
        const char *extra[8], *dup = NULL;
        int n_extra = 0;
        for (int i = 5; i < argc; i++) {
            if (strcmp(argv[i], "odd") == 0) odd = true;
            else if (strncmp(argv[i], "extra=", 6) == 0 && n_extra < 8) extra[n_extra++] = argv[i] + 6;
            else if (strncmp(argv[i], "dup=", 4) == 0) dup = argv[i] + 4;
            else return die("unknown option", argv[i]);
        }
        int rc = write_st(argv[3], ts, n, 1, 0, argv[4], odd, extra, n_extra, dup);
        gml_free(c);
        return rc;
    }
    if (argc == 5 && strcmp(argv[1], "st-shard") == 0) {
        gml_context *c;
        gml_tensor *ts[64];
        int n = load_st(argv[2], &c, ts, 64);
        if (n < 0) return 1;
        char path[4096];
        int rc = 0;
        for (int part = 0; part < 2 && !rc; part++) {
            snprintf(path, sizeof path, "%s/model-%05d-of-00002.safetensors", argv[3], part + 1);
            rc = write_st(path, ts, n, 2, part, argv[4], false, NULL, 0, NULL);
        }
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", argv[3]);
        FILE *f = rc ? NULL : fopen(path, "w");
        if (!rc && !f) rc = die("cannot create", path);
        if (f) {
            fprintf(f, "{\n  \"metadata\": {\"total_size\": 0},\n  \"weight_map\": {\n");
            for (int i = 0; i < n; i++)
                fprintf(f, "    \"%s%s\": \"model-%05d-of-00002.safetensors\"%s\n", argv[4], ts[i]->name,
                        i % 2 + 1, i + 1 < n ? "," : "");
            fprintf(f, "  }\n}\n");
            if (fclose(f) != 0) rc = die("write failed", path);
        }
        gml_free(c);
        return rc;
    }
    fprintf(stderr, "usage: loading_files seq-first|astype|npy|st-rename|st-shard ... (see the top of "
                    "tests/loading_files.c)\n");
    return 2;
}
