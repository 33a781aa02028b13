/* The attention options shared by softmax and flash_attn (ops/attn_opts.h):
 * the names of causal=, the builders' checks of gml_attn_opts, the kernels'
 * check of valid lengths, and ALiBi's slopes. */
#include "attn_opts.h"

#include <math.h>

const char *const gml_causal_names[] = {"false", "true|bottom_right", "top_left", NULL};

bool gml_attn_lens_ok(const gml_compute_params *p, const char *op, const gml_tensor *lens,
                      int64_t tk) {
    if (!lens) return true;
    const int64_t n = lens->ne[2] * lens->ne[3];
    for (int64_t e = 0; e < n; e++) {
        const int64_t b = lens->n_dims == 1 ? e : e / lens->ne[3], i = e % lens->ne[3];
        const int32_t len = gml_attn_i32_at(lens, b, lens->n_dims == 1 ? 0 : i);
        if (len >= 0 && len <= tk) continue;
        char sl[GML_SHAPE_MAX];
        if (lens->n_dims == 1)
            gml_kernel_fail(p, "%s(%s): valid length %d for batch %" PRId64
                            " is outside [0, %" PRId64 "] (Tk = %" PRId64 ", lens %s)",
                            op, lens->name, (int)len, b, tk, tk, GML_SHAPE(lens, sl));
        else
            gml_kernel_fail(p, "%s(%s): valid length %d at [%" PRId64 ",%" PRId64
                            "] is outside [0, %" PRId64 "] (Tk = %" PRId64 ", lens %s)",
                            op, lens->name, (int)len, b, i, tk, tk, GML_SHAPE(lens, sl));
        return false;
    }
    return true;
}

bool gml_attn_opts_check(gml_context *ctx, const char *op, const char *x_name,
                         const gml_attn_opts *o, bool heads_known, int64_t B, int64_t H,
                         int64_t Tq, int64_t Tk) {
    char sx[GML_SHAPE_MAX];
    (void)Tk;
    if (o->causal != GML_CAUSAL_NONE && o->causal != GML_CAUSAL_BOTTOM_RIGHT &&
        o->causal != GML_CAUSAL_TOP_LEFT)
        return gml_fail(ctx, "%s(%s): causal %d is not NONE (0), BOTTOM_RIGHT (1) or "
                        "TOP_LEFT (2)", op, x_name, (int)o->causal) != NULL;
    if (o->window < 0)
        return gml_fail(ctx, "%s(%s): window %" PRId64 " is negative (0: no window)", op,
                        x_name, o->window) != NULL;
    if (!(o->softcap >= 0) || !isfinite(o->softcap))
        return gml_fail(ctx, "%s(%s): softcap %g must be finite and >= 0 (0: none)", op, x_name,
                        (double)o->softcap) != NULL;
    if (!(o->alibi_max_bias >= 0) || !isfinite(o->alibi_max_bias))
        return gml_fail(ctx, "%s(%s): alibi max bias %g must be finite and >= 0 (0: none)", op,
                        x_name, (double)o->alibi_max_bias) != NULL;
    if (!heads_known) {
        const char *what = o->valid_lens ? "valid_lens" : o->positions ? "positions"
                           : o->sinks    ? "sinks"
                           : o->alibi_max_bias > 0 ? "alibi"
                                                   : NULL;
        if (what)
            return gml_fail(ctx, "%s(%s): %s needs 4-D scores [B, H, Tq, Tk] (head = dim 1)", op,
                            x_name, what) != NULL;
        return true;
    }
    if (o->positions && !(o->positions->type == GML_I32 && o->positions->n_dims == 2 &&
                          o->positions->ne[2] == B && o->positions->ne[3] == Tq))
        return gml_fail(ctx, "%s(%s, %s): positions must be i32 [%" PRId64 ",%" PRId64
                        "] ([B, Tq]), got %s %s", op, x_name, o->positions->name, B, Tq,
                        gml_type_name(o->positions->type), GML_SHAPE(o->positions, sx)) != NULL;
    if (o->sinks && !(o->sinks->type == GML_F32 && o->sinks->n_dims == 1 && o->sinks->ne[3] == H))
        return gml_fail(ctx, "%s(%s, %s): sinks must be f32 [%" PRId64 "] ([H], one logit per "
                        "query head), got %s %s", op, x_name, o->sinks->name, H,
                        gml_type_name(o->sinks->type), GML_SHAPE(o->sinks, sx)) != NULL;
    return true;
}

float gml_alibi_slope(float max_bias, int64_t h, int64_t H) {
    if (!(max_bias > 0) || H < 1 || h < 0 || h >= H) return 0.0f;
    int64_t n = 1; /* the largest power of two <= H */
    while (n * 2 <= H) n *= 2;
    const double e = h < n ? -(double)max_bias * (double)(h + 1) / (double)n
                           : -(double)max_bias / 2 * (double)(2 * (h - n) + 1) / (double)n;
    return (float)exp2(e);
}
