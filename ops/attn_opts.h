/* The options of softmax and flash_attn (gml_attn_opts, ggmlite.h MASKS,
 * "Options"), shared by ops/softmax.c and the flash_attn files: the op
 * params, the checks of the builders and the key range a query row sees
 * (the functions: ops/attn_opts.c). */
#ifndef GGMLITE_ATTN_OPTS_H
#define GGMLITE_ATTN_OPTS_H

#include "internal.h"

#include <string.h>

/* The op params of both ops. */
typedef struct gml_attn_params {
    float scale;
    int32_t causal; /* gml_causal */
    int64_t window; /* 0: none */
    float softcap;  /* 0: none */
    float alibi;    /* max bias, 0: none */
} gml_attn_params;
GML_PARAMS_FIT(gml_attn_params);

static inline gml_attn_params gml_attn_params_of(const gml_tensor *t) {
    gml_attn_params p;
    gml_get_params(t, &p, sizeof p);
    return p;
}

/* The names of causal= in the call forms (gml_causal's values). */
extern const char *const gml_causal_names[];

/* The builders' checks of opts (op "softmax" or "flash_attn"; B, H, Tq the
 * scores' dims, heads_known false for a softmax whose x is not 4-D: then
 * valid_lens, positions, sinks and alibi are refused). False with the
 * message on ctx. */
bool gml_attn_opts_check(gml_context *ctx, const char *op, const char *x_name,
                         const gml_attn_opts *o, bool heads_known, int64_t B, int64_t H,
                         int64_t Tq, int64_t Tk);

/* Every valid length is in [0, tk], else the kernel fails (the first in
 * row-major order, whatever the thread count). */
bool gml_attn_lens_ok(const gml_compute_params *p, const char *op, const gml_tensor *lens,
                      int64_t tk);

/* i32 element [b, i] of a [B] (i ignored) or [B, Tq] tensor. */
static inline int32_t gml_attn_i32_at(const gml_tensor *t, int64_t b, int64_t i) {
    int32_t v;
    memcpy(&v, t->n_dims == 1 ? gml_ptr(t, 0, 0, 0, b) : gml_ptr(t, 0, 0, b, i), sizeof v);
    return v;
}

/* Query i (of Tq, batch b) at absolute position i': positions[b, i] when
 * given, else i (TOP_LEFT) or i + Tk - Tq. */
static inline int64_t gml_attn_qpos(const gml_attn_params *par, const gml_tensor *positions,
                                    int64_t b, int64_t i, int64_t tq, int64_t tk) {
    if (positions) return gml_attn_i32_at(positions, b, i);
    return par->causal == GML_CAUSAL_TOP_LEFT ? i : i + tk - tq;
}

/* The keys [*lo, *hi) query i of batch b may see (a mask may still hide
 * some): causal and window by its position, valid lengths (checked). */
static inline void gml_attn_key_range(const gml_attn_params *par, const gml_tensor *lens,
                                      const gml_tensor *positions, int64_t b, int64_t i,
                                      int64_t tq, int64_t tk, int64_t *lo, int64_t *hi) {
    int64_t l = 0, h = tk;
    if (par->causal != GML_CAUSAL_NONE || par->window > 0) {
        const int64_t ip = gml_attn_qpos(par, positions, b, i, tq, tk); /* |ip| < 2^32 */
        h = GML_MAX(0, GML_MIN(tk, ip + 1));
        if (par->window > 0 && ip + 1 > par->window) l = GML_MIN(h, ip + 1 - par->window);
    }
    if (lens) h = GML_MIN(h, (int64_t)gml_attn_i32_at(lens, b, i));
    *lo = GML_MIN(l, h);
    *hi = h;
}

#endif /* GGMLITE_ATTN_OPTS_H */
