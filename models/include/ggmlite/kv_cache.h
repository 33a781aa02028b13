/*
 * Incremental decoding with a KV cache.
 *
 * Autoregressive decoding feeds one new token at a time; recomputing every
 * earlier token's keys and values each time would cost O(T^2) projections.
 * The cache keeps K and V of every layer, preallocated at the longest
 * sequence: [B, G, T_max, d_k] each. A decode step projects only the new
 * tokens, appends their K and V to the cache (rows written in place: the
 * past is never copied) and attends the new queries over everything cached,
 * with gml_flash_attn.
 *
 * The step graph is built ONCE and computed again at every position: the
 * position is run-time data, not part of the graph. A step of n new tokens
 * reads two i32 inputs that gml_kv_step_compute fills before each compute:
 *     pos  [B, n]  the cache row of each new token (len, len+1, ...)
 *     lens [B, n]  the keys each new token sees: pos + 1 (causal)
 * K and V are appended by gml_set_rows(cache, new_rows, pos), whose result,
 * a view of the whole cache "after the write", is what flash_attn reads (so
 * the graph orders the read after the write); flash_attn's valid lengths
 * hide the rows not written yet, whole key blocks at a time.
 *
 *     gml_kv_cache *cache = gml_kv_cache_new((gml_kv_cache_params){.n_layers = 1,
 *         .batch = B, .n_kv_heads = G, .max_len = 2048, .d_k = D / H}, err, sizeof err);
 *     gml_tensor *x = gml_new_tensor_3d(ctx, GML_F32, B, 1, D);     // one token
 *     gml_kv_step step = gml_kv_step_new(ctx, cache, 1);
 *     gml_tensor *y = gml_attn_decode(ctx, cfg, &w, x, &step, 0);    // [B, 1, D]
 *     gml_graph *g = gml_build_graph(ctx, &y, 1);
 *     for (...) {            // x <- next token's embedding, then
 *         if (gml_kv_step_compute(&step, g, n_threads, err, sizeof err) != GML_OK) break;
 *     }
 *
 * A prompt is one step with n = its length (another graph, same cache): its
 * tokens see each other causally, exactly as the full forward's. Decoding T
 * tokens one at a time gives the outputs of the full causal forward over
 * those T tokens (tests/test_kv_cache.c). All batch rows share one length.
 *
 * Misuse: NULL arguments are refused with a message naming the function
 * and the argument, never a crash (attention.h, "Misuse", states the rule).
 */
#ifndef GGMLITE_KV_CACHE_H
#define GGMLITE_KV_CACHE_H

#include <ggmlite/attention.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gml_kv_cache_params {
    int n_layers;     /* caches kept: one K and one V per layer */
    int64_t batch;    /* B */
    int n_kv_heads;   /* G */
    int64_t max_len;  /* T_max: positions 0 .. T_max - 1; at most INT32_MAX (i32 positions) */
    int64_t d_k;      /* per-head size of keys and values */
    gml_type type;    /* of K and V: GML_F32 (the default, 0), GML_F16 or GML_BF16. The new
                         rows are rounded into it as they are appended (set_rows converting,
                         round to nearest even) and flash_attn converts them back per key
                         block: a step equals, within 1e-5 relative, the step over an f32
                         cache holding the rounded values (tests/test_kv_cache_types.c) */
} gml_kv_cache_params;

typedef struct gml_kv_cache gml_kv_cache;

/* A cache of zeros, length 0, in its own context. NULL, with a message in
 * err, on bad parameters or no memory. */
GML_API gml_kv_cache *gml_kv_cache_new(gml_kv_cache_params params, char *err, size_t err_size);
GML_API void gml_kv_cache_free(gml_kv_cache *c);

GML_API gml_kv_cache_params gml_kv_cache_get_params(const gml_kv_cache *c);
/* K and V of a layer, [B, G, T_max, d_k] of the cache's type (NULL for a
 * layer out of range). */
GML_API gml_tensor *gml_kv_cache_k(const gml_kv_cache *c, int layer);
GML_API gml_tensor *gml_kv_cache_v(const gml_kv_cache *c, int layer);
/* Tokens cached so far: the position of the next one. */
GML_API int64_t gml_kv_cache_len(const gml_kv_cache *c);
/* Bytes of K and V data: 2 n_layers B G T_max d_k (4 bytes each for f32,
 * 2 for f16 and bf16). */
GML_API size_t gml_kv_cache_bytes(const gml_kv_cache *c);
/* Keeps the first len tokens (0 <= len <= the length; else nothing
 * changes and the result is false): decoding goes on from position len, the
 * rows past it masked until rewritten. gml_kv_cache_truncate(c, 0) empties
 * the cache; truncating to a prompt's length reuses the prompt. */
GML_API bool gml_kv_cache_truncate(gml_kv_cache *c, int64_t len);

/* The run-time inputs of a step of n new tokens per batch row. */
typedef struct gml_kv_step {
    gml_kv_cache *cache;
    int64_t n;
    gml_tensor *pos;  /* i32 [B, n]: cache rows written (named "kv_pos") */
    gml_tensor *lens; /* i32 [B, n]: keys seen, pos + 1 (named "kv_lens") */
} gml_kv_step;

/* Makes pos and lens in ctx, flagged as inputs (in a no_alloc context they
 * get data when the graph is planned). On failure .pos is NULL and ctx
 * holds the message. */
GML_API gml_kv_step gml_kv_step_new(gml_context *ctx, gml_kv_cache *c, int64_t n);

/* Multi-head or grouped-query self-attention of the step's new tokens over
 * the cache of `layer`, appending their K and V:
 *     x [B, n, D] -> out [B, n, D], named "out"
 * cfg and w as for gml_gqa (G = cfg.dims.n_kv_heads or H must be the
 * cache's; D / H its d_k); decoding is causal bottom-right (cfg.score.causal
 * = GML_CAUSAL_BOTTOM_RIGHT) and fused (graph.impl auto or fused, no
 * weights). With cfg.pos rope, q and k of the new tokens are rotated at
 * their positions (step->pos, run-time data) before K is appended, as the
 * full forward rotates them at 0 .. T-1. The scoring options (window,
 * ALiBi, soft-capping) and w->sinks apply at the same absolute positions:
 * a step equals the full forward's rows with any of them. NULL with a
 * message on ctx otherwise. */
GML_API gml_tensor *gml_attn_decode(gml_context *ctx, gml_attn_config cfg,
                                    const gml_attn_weights *w, gml_tensor *x,
                                    const gml_kv_step *step, int layer);

/* One step: fills pos and lens (their data in g, gml_graph_data: planned or
 * their own) from the cache's length, computes g (a graph
 * holding the step's gml_attn_decode outputs) and, if that worked, advances
 * the length by n. GML_ERR_INVALID with a message in err, and nothing
 * computed, when the new tokens would pass T_max; compute failures pass
 * through with gml_graph_error's message. */
GML_API gml_status gml_kv_step_compute(gml_kv_step *s, gml_graph *g, int n_threads, char *err,
                                       size_t err_size);

#ifdef __cplusplus
}
#endif
#endif /* GGMLITE_KV_CACHE_H */
