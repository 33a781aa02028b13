/* A hash index: an open-addressing table from a key's 64-bit XXH3 hash to a
 * non-negative int, normally the key's position in an array the caller owns.
 * The index keeps no keys: the caller keeps them in its own array (tensors
 * of a graph, names of a file) and says how to compare one through an
 * equality callback, so one table serves pointer keys and string keys.
 * Part of libggmlite (graphs index their tensors with it, the graph-file
 * reader and writer of ggmlite_io their names); ggmlite.h does not include it.
 *
 *     gml_hashindex ix = {0};                      // empty, owns nothing
 *     if (!gml_hashindex_add(&ix, gml_hash_str(s), i)) ... out of memory ...
 *     int i = gml_hashindex_find(&ix, gml_hash_str(s), same_name, names, s);
 *     gml_hashindex_free(&ix);
 *
 * Linear probing over a power-of-two capacity, grown (doubled) before the
 * table gets over half full, so a find or an add takes expected O(1). */
#ifndef GGMLITE_HASHINDEX_H
#define GGMLITE_HASHINDEX_H

#include <ggmlite/export.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gml_hashindex {
    uint64_t *hashes; /* [cap] the hash of each slot's key */
    int *vals;        /* [cap] the value of each slot, -1 for an empty slot */
    size_t cap;       /* 0 (nothing allocated yet) or a power of two */
    size_t n;         /* slots in use */
} gml_hashindex;

/* Whether the caller's key stored at val equals key (user: the caller's
 * array or whatever it needs to find its keys). */
typedef bool (*gml_hashindex_eq)(const void *user, int val, const void *key);

/* The hashes to key the index with: of a pointer's value, and of a string's
 * bytes up to its NUL (NULL hashes as ""). */
GML_API uint64_t gml_hash_ptr(const void *p);
GML_API uint64_t gml_hash_str(const char *s);

/* The value of a slot whose hash is hash and whose key eq says equals key,
 * or -1. If several were added for equal keys, one of them. */
GML_API int gml_hashindex_find(const gml_hashindex *ix, uint64_t hash, gml_hashindex_eq eq,
                       const void *user, const void *key);

/* Adds val (which must be >= 0) under hash; it does not look for an equal
 * key first (the caller knows whether there is one). Returns false, leaving
 * the index as it was, if malloc fails or val < 0. */
GML_API bool gml_hashindex_add(gml_hashindex *ix, uint64_t hash, int val);

/* Empties the index, keeping its memory. */
GML_API void gml_hashindex_clear(gml_hashindex *ix);

/* Frees the index's memory; it is then empty and can be used again. */
GML_API void gml_hashindex_free(gml_hashindex *ix);

#ifdef __cplusplus
}
#endif

#endif
