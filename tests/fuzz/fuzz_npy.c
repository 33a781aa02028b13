/* libFuzzer target: gml_parse_npy and gml_parse_npy_converted on any bytes
 * return a context or a one-line message naming the input; they never
 * crash, hang, read out of bounds or leak (ASan, UBSan and LeakSanitizer
 * watch). What they accept is consistent: one tensor whose data is the
 * input's last bytes (converted: nelements times the source dtype's size,
 * f32 values, and exactly what gml_parse_npy gives when no conversion was
 * needed; for '<f2', which gml_parse_npy keeps as f16, its values widened). */
#include <ggmlite/ggmlite.h>
#include <ggmlite/io.h>

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
static void converted(const uint8_t *data, size_t size, const gml_context *plain);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512] = "";
    gml_context *ctx = gml_parse_npy(data, size, "fuzz.npy", "x", err, sizeof err);
    converted(data, size, ctx);
    if (!ctx) {
        if (strncmp(err, "fuzz.npy: ", 10) != 0 || strchr(err, '\n')) __builtin_trap();
        return 0;
    }
    const gml_tensor *t = gml_get_tensor(ctx, "x");
    if (!t || (t->type != GML_F32 && t->type != GML_I32 && t->type != GML_F16) || t->n_dims < 1 ||
        t->n_dims > 4)
        __builtin_trap();
    size_t nbytes = (size_t)gml_nelements(t) * gml_type_size(t->type); /* '<f2': 2 */
    if (nbytes > size || memcmp(t->data, data + size - nbytes, nbytes) != 0) __builtin_trap();
    gml_free(ctx);
    return 0;
}

/* The converting parser: a superset, equal where both accept. */
static void converted(const uint8_t *data, size_t size, const gml_context *plain) {
    char err[512] = "";
    const char *from = "unset";
    gml_context *ctx = gml_parse_npy_converted(data, size, "fuzz.npy", "x", &from, err, sizeof err);
    if (!ctx) {
        if (plain || from != NULL || strncmp(err, "fuzz.npy: ", 10) != 0 || strchr(err, '\n')) __builtin_trap();
        return;
    }
    const gml_tensor *t = gml_get_tensor(ctx, "x");
    if (!t || t->n_dims < 1 || t->n_dims > 4) __builtin_trap();
    const size_t n = (size_t)gml_nelements(t);
    if (!from) {
        const gml_tensor *p = plain ? gml_get_tensor((gml_context *)plain, "x") : NULL;
        if (!p || p->type != t->type || memcmp(p->data, t->data, n * 4) != 0) __builtin_trap();
    } else {
        const size_t esize = !strcmp(from, "float64") ? 8 : !strcmp(from, "float16") ? 2 : !strcmp(from, "bool") ? 1 : 0;
        /* '<f2' the plain parser also takes, as f16: the converted values are its values */
        const gml_tensor *p = plain ? gml_get_tensor((gml_context *)plain, "x") : NULL;
        if ((plain && (esize != 2 || !p || p->type != GML_F16 || gml_nelements(p) != (int64_t)n)) ||
            t->type != GML_F32 || !esize || n * esize > size)
            __builtin_trap();
        for (size_t i = 0; p && i < n; i++) {
            const float want = gml_fp16_to_fp32(((const uint16_t *)p->data)[i]), got = ((const float *)t->data)[i];
            if (memcmp(&want, &got, 4) != 0) __builtin_trap();
        }
        if (esize == 1)
            for (size_t i = 0; i < n; i++)
                if (((const float *)t->data)[i] != (float)data[size - n + i]) __builtin_trap();
    }
    gml_free(ctx);
}
