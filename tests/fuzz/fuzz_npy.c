/* libFuzzer target: gml_parse_npy on any bytes returns a context or a
 * one-line message naming the input; it never crashes, hangs, reads out of
 * bounds or leaks (ASan, UBSan and LeakSanitizer watch). What it accepts is
 * consistent: one tensor whose data is the input's last bytes. */
#include <ggmlite/ggmlite.h>
#include <ggmlite/io.h>

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512] = "";
    gml_context *ctx = gml_parse_npy(data, size, "fuzz.npy", "x", err, sizeof err);
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
