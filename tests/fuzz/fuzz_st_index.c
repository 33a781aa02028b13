/* libFuzzer target: gml_parse_safetensors_index (a sharded checkpoint's
 * index .json) on any bytes returns its (name, shard) pairs or a one-line
 * message naming the input; it never crashes, hangs, reads out of bounds or
 * leaks. What it accepts is consistent: names unique and printable, shards
 * relative file names without "..". */
#include <ggmlite/ggmlite.h>
#include <ggmlite/io.h>

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512] = "";
    gml_st_index_entry *e = NULL;
    int n = -1;
    gml_status st = gml_parse_safetensors_index(data, size, "fuzz.json", &e, &n, err, sizeof err);
    if (st != GML_OK) {
        if (e || n != 0 || strncmp(err, "fuzz.json: ", 11) != 0 || strchr(err, '\n')) __builtin_trap();
        return 0;
    }
    for (int i = 0; i < n; i++) {
        if (!e[i].name || !e[i].shard || !e[i].shard[0] || e[i].shard[0] == '/' || strstr(e[i].shard, ".."))
            __builtin_trap();
        for (const char *c = e[i].name; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f) __builtin_trap();
        for (int k = 0; k < i; k++)
            if (strcmp(e[k].name, e[i].name) == 0) __builtin_trap();
    }
    gml_free_safetensors_index(e, n);
    return 0;
}
