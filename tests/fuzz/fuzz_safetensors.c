/* libFuzzer target: gml_parse_safetensors on any bytes returns a context or
 * a one-line message naming the input; it never crashes, hangs, reads out of
 * bounds or leaks (ASan, UBSan and LeakSanitizer watch). What it accepts is
 * consistent: every tensor fits in the input, the tensors' bytes add up to
 * exactly the data buffer (the format allows no gap, overlap or trailing
 * byte), and no name holds a control byte. */
#include <ggmlite/ggmlite.h>
#include <ggmlite/io.h>

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512] = "";
    gml_context *ctx = gml_parse_safetensors(data, size, "fuzz.safetensors", err, sizeof err);
    if (!ctx) {
        if (strncmp(err, "fuzz.safetensors: ", 18) != 0 || strchr(err, '\n')) __builtin_trap();
        return 0;
    }
    /* Each tensor takes a header and its data rounded up to 64 bytes; there
     * are at most size / 4 tensors, whose data adds up to at most size. */
    if (gml_used_mem(ctx) > (size / 4) * (gml_tensor_overhead() + 63) + size) __builtin_trap();
    uint64_t hlen = 0, bytes = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | data[i]; /* accepted: size >= 8 */
    for (gml_tensor *t = gml_get_first_tensor(ctx); t; t = gml_get_next_tensor(ctx, t)) {
        bytes += (uint64_t)gml_nbytes(t);
        for (const char *c = t->name; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f) __builtin_trap();
    }
    if (bytes != size - 8 - hlen) __builtin_trap();
    gml_free(ctx);
    return 0;
}
