/* The hash index (hashindex.h): linear probing over parallel arrays of
 * hashes and values; a value of -1 marks an empty slot. */
#include <ggmlite/hashindex.h>

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define FIRST_CAP 64

uint64_t gml_hash_ptr(const void *p) { return XXH3_64bits(&p, sizeof p); }

uint64_t gml_hash_str(const char *s) { return XXH3_64bits(s ? s : "", s ? strlen(s) : 0); }

int gml_hashindex_find(const gml_hashindex *ix, uint64_t hash, gml_hashindex_eq eq,
                       const void *user, const void *key) {
    if (!ix || !eq || ix->cap == 0) return -1;
    size_t mask = ix->cap - 1;
    /* Ends: at most half the slots are in use, so an empty one comes. */
    for (size_t i = (size_t)hash & mask; ix->vals[i] >= 0; i = (i + 1) & mask)
        if (ix->hashes[i] == hash && eq(user, ix->vals[i], key)) return ix->vals[i];
    return -1;
}

/* Puts (hash, val) in the first empty slot of its probe sequence. */
static void place(uint64_t *hashes, int *vals, size_t cap, uint64_t hash, int val) {
    size_t mask = cap - 1, i = (size_t)hash & mask;
    while (vals[i] >= 0) i = (i + 1) & mask;
    hashes[i] = hash;
    vals[i] = val;
}

/* Doubles the capacity (or makes the first table) and moves every slot. */
static bool grow(gml_hashindex *ix) {
    size_t cap = ix->cap ? ix->cap * 2 : FIRST_CAP;
    if (cap > SIZE_MAX / 2 / sizeof(uint64_t)) return false;
    uint64_t *hashes = malloc(cap * sizeof *hashes);
    int *vals = malloc(cap * sizeof *vals);
    if (!hashes || !vals) {
        free(hashes);
        free(vals);
        return false;
    }
    for (size_t i = 0; i < cap; i++) vals[i] = -1;
    for (size_t i = 0; i < ix->cap; i++)
        if (ix->vals[i] >= 0) place(hashes, vals, cap, ix->hashes[i], ix->vals[i]);
    free(ix->hashes);
    free(ix->vals);
    ix->hashes = hashes;
    ix->vals = vals;
    ix->cap = cap;
    return true;
}

bool gml_hashindex_add(gml_hashindex *ix, uint64_t hash, int val) {
    if (!ix || val < 0) return false; /* -1 marks an empty slot */
    if ((ix->n + 1) * 2 > ix->cap && !grow(ix)) return false;
    place(ix->hashes, ix->vals, ix->cap, hash, val);
    ix->n++;
    return true;
}

void gml_hashindex_clear(gml_hashindex *ix) {
    if (!ix) return;
    for (size_t i = 0; i < ix->cap; i++) ix->vals[i] = -1;
    ix->n = 0;
}

void gml_hashindex_free(gml_hashindex *ix) {
    if (!ix) return;
    free(ix->hashes);
    free(ix->vals);
    *ix = (gml_hashindex){0};
}
