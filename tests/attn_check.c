/* The attention test harness (see attn_check.h). */
#include "attn_check.h"
#include "isas.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- data ---------------------------------------------------------------- */

static uint64_t next_u64(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float uniform(uint64_t *s) { /* [-1, 1) */
    return (float)((double)(next_u64(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *random_array(uint64_t *s, size_t n, float scale) {
    float *a = malloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++)
        a[i] = uniform(s) * scale;
    return a;
}

attn_data *attn_data_new(const attn_case *c0, uint64_t seed) {
    attn_data *d = calloc(1, sizeof *d);
    d->c = *c0;
    attn_case *c = &d->c;
    if (!c->cross) c->Tk = c->Tq;
    if (!c->G) c->G = c->H;
    uint64_t s = seed;
    const int dk = c->D / c->H, kvd = c->G * dk;
    const float ws = 1.0f / sqrtf((float)c->D);
    d->xq = random_array(&s, (size_t)c->B * c->Tq * c->D, 1.0f);
    d->xk = c->cross ? random_array(&s, (size_t)c->B * c->Tk * c->D, 1.0f) : d->xq;
    d->xv = c->cross ? random_array(&s, (size_t)c->B * c->Tk * c->D, 1.0f) : d->xq;
    d->wq = random_array(&s, (size_t)c->D * c->D, ws);
    d->wk = random_array(&s, (size_t)kvd * c->D, ws);
    d->wv = random_array(&s, (size_t)kvd * c->D, ws);
    d->wo = random_array(&s, (size_t)c->D * c->D, ws);
    if (c->bias) {
        d->bq = random_array(&s, (size_t)c->D, 0.5f);
        d->bk = random_array(&s, (size_t)kvd, 0.5f);
        d->bv = random_array(&s, (size_t)kvd, 0.5f);
        d->bo = random_array(&s, (size_t)c->D, 0.5f);
    }
    const size_t rows = 2 * (size_t)c->P + 1;
    d->rel_k =
        c->zero_tables ? calloc(rows * dk, sizeof(float)) : random_array(&s, rows * dk, 1.0f);
    d->rel_v =
        c->zero_tables ? calloc(rows * dk, sizeof(float)) : random_array(&s, rows * dk, 1.0f);
    const size_t mask_n = c->mask == ATTN_MASK_QK ? (size_t)c->Tq * c->Tk : (size_t)c->B * c->Tk;
    if (c->mask) {
        d->mask = random_array(&s, mask_n, 1.0f);
        for (size_t i = 0; i < mask_n; i++)
            if (next_u64(&s) % 6 == 0) d->mask[i] = -INFINITY;
    }
    if (c->positions) {
        d->positions = malloc((size_t)c->B * c->Tq * sizeof *d->positions);
        for (int b = 0; b < c->B; b++) {
            const int32_t start = (int32_t)(next_u64(&s) % 40);
            for (int i = 0; i < c->Tq; i++) d->positions[b * c->Tq + i] = start + i;
        }
    }
    if (c->qk_norm) {
        d->q_norm = random_array(&s, (size_t)dk, 1.0f);
        d->k_norm = random_array(&s, (size_t)dk, 1.0f);
    }
    if (c->sinks) d->sinks = random_array(&s, (size_t)c->H, 1.0f);
    if (c->lens != ATTN_LENS_NONE) {
        size_t n = c->lens == ATTN_LENS_BATCH ? (size_t)c->B : (size_t)c->B * c->Tq;
        d->lens = malloc(n * sizeof *d->lens);
        for (size_t i = 0; i < n; i++)
            d->lens[i] = (int32_t)(next_u64(&s) % (uint64_t)(c->Tk + 1));
        /* the edges: a full row and, when there is more than one, an empty one */
        d->lens[0] = c->Tk;
        if (n > 1) d->lens[n - 1] = 0;
    }
    return d;
}

void attn_data_free(attn_data *d) {
    if (!d) return;
    if (d->xk != d->xq) free(d->xk);
    if (d->xv != d->xq) free(d->xv);
    float *arrays[] = {d->xq, d->wq,    d->bq,    d->wk,   d->bk,     d->wv,     d->bv,
                       d->wo, d->bo,    d->rel_k, d->rel_v, d->mask, d->q_norm, d->k_norm,
                       d->sinks};
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++)
        free(arrays[i]);
    free(d->lens);
    free(d->positions);
    free(d);
}

void attn_reference(const attn_data *d, float *out, float *attn) {
    const attn_case *c = &d->c;
    gml_ref_attn r = {
        .B = c->B,
        .Tq = c->Tq,
        .Tk = c->Tk,
        .D = c->D,
        .H = c->H,
        .G = c->G,
        .causal = c->causal,
        .lens = d->lens,
        .lens_per_query = c->lens == ATTN_LENS_QUERY,
        .P = c->P,
        .rel_k = c->rel ? d->rel_k : NULL,
        .rel_v = c->rel && c->rel_v ? d->rel_v : NULL,
        .xq = d->xq,
        .xk = d->xk,
        .xv = d->xv,
        .wq = d->wq,
        .bq = d->bq,
        .wk = d->wk,
        .bk = d->bk,
        .wv = d->wv,
        .bv = d->bv,
        .wo = d->wo,
        .bo = d->bo,
        .top_left = c->top_left,
        .q_pos = d->positions,
        .k_pos = c->cross ? NULL : d->positions, /* self-attention: the queries' */
        .window = c->window,
        .softcap = c->softcap,
        .alibi_max_bias = c->alibi,
        .scale = c->scale,
        .sinks = d->sinks,
        .mask = d->mask,
        .rope = c->rope,
        .theta = c->theta ? c->theta : 10000.0,
        .pos_scale = c->pos_scale ? c->pos_scale : 1.0,
        .rotary_dim = c->rotary_dim,
        .interleaved = c->interleaved,
        .q_norm = d->q_norm,
        .k_norm = d->k_norm,
    };
    if (c->mask == ATTN_MASK_QK) memcpy(r.mask_ne, (int[]){1, 1, c->Tq, c->Tk}, sizeof r.mask_ne);
    if (c->mask == ATTN_MASK_B) memcpy(r.mask_ne, (int[]){c->B, 1, 1, c->Tk}, sizeof r.mask_ne);
    gml_ref_attention(&r, out, attn);
}

const char *attn_case_str(const attn_case *c, char *buf, size_t size) {
    char rel[48] = "";
    if (c->rel)
        snprintf(rel, sizeof rel, " P%d%s%s", c->P, c->rel_v ? " rel_v" : "",
                 c->zero_tables ? " zero" : "");
    snprintf(buf, size, "B%d Tq%d Tk%d D%d H%d G%d d_k%d%s%s%s%s%s%s%s%s", c->B, c->Tq,
             c->cross ? c->Tk : c->Tq, c->D, c->H, c->G ? c->G : c->H, c->D / c->H,
             c->cross ? " cross" : "", c->causal ? " causal" : "",
             c->lens == ATTN_LENS_BATCH   ? " lens[B]"
             : c->lens == ATTN_LENS_QUERY ? " lens[B,Tq]"
                                          : "",
             c->bias ? " bias" : "", c->conv1d ? " conv1d" : c->packed ? " packed" : "", c->strided ? " strided" : "",
             c->form == GML_GQA_REPEAT ? " repeat" : "", rel);
    size_t n = strlen(buf);
    if (n < size)
        snprintf(buf + n, size - n, "%s%s%s%s%s%s", c->top_left ? " top-left" : "",
                 c->mask == ATTN_MASK_QK  ? " mask[Tq,Tk]"
                 : c->mask == ATTN_MASK_B ? " mask[B,1,1,Tk]"
                                          : "",
                 c->positions ? " positions" : "",
                 c->rope ? (c->interleaved ? " rope-interleaved" : " rope") : "",
                 c->rotary_dim ? " partial" : "", c->qk_norm ? " qk_norm" : "");
    n = strlen(buf);
    if (n < size && c->window) n += (size_t)snprintf(buf + n, size - n, " window %lld", (long long)c->window);
    if (n < size && c->softcap) n += (size_t)snprintf(buf + n, size - n, " softcap %g", (double)c->softcap);
    if (n < size && c->alibi) n += (size_t)snprintf(buf + n, size - n, " alibi %g", (double)c->alibi);
    if (n < size && c->scale) n += (size_t)snprintf(buf + n, size - n, " scale %g", (double)c->scale);
    if (n < size && c->sinks) snprintf(buf + n, size - n, " sinks");
    if (c->impl == GML_ATTN_FUSED) {
        size_t n = strlen(buf);
        if (n < size) snprintf(buf + n, size - n, " fused");
    }
    return buf;
}

/* ---- graphs ------------------------------------------------------------- */

static int g_max_rel; /* the case's P, for attn_relpos */
gml_tensor *attn_q_norm, *attn_k_norm;

/* A named leaf [ne...] holding src (row-major) unless ctx is no_alloc. */
static gml_tensor *leaf(gml_context *ctx, const char *name, gml_type type, int n, const int64_t *ne,
                        const void *src) {
    gml_tensor *t = gml_set_name(gml_new_tensor(ctx, type, n, ne), name);
    if (t && t->data && src) memcpy(t->data, src, (size_t)gml_nelements(t) * 4);
    return t;
}

/* Copies row-major src into t of any strides. */
static void fill(gml_tensor *t, const float *src) {
    if (!t || !t->data) return;
    int64_t idx[4], n = gml_nelements(t);
    for (int64_t flat = 0; flat < n; flat++) {
        int64_t r = flat;
        for (int dd = t->n_dims - 1; dd >= 0; dd--) {
            idx[dd] = r % t->ne[4 - t->n_dims + dd];
            r /= t->ne[4 - t->n_dims + dd];
        }
        gml_set_f32(t, idx, src[flat]);
    }
}

/* An input [B, T, D]: contiguous, or (strided) a view that is not. */
static gml_tensor *input(gml_context *ctx, const char *name, const attn_case *c, int T,
                         const float *src, bool as_query) {
    gml_tensor *t;
    if (!c->strided) {
        t = gml_new_tensor_3d(ctx, GML_F32, c->B, T, c->D);
    } else if (as_query) { /* sequence-first storage [T, B, D], seen as [B, T, D] */
        t = gml_transpose(ctx, gml_new_tensor_3d(ctx, GML_F32, T, c->B, c->D), 0, 1);
    } else { /* a slice [B, T, D] of [B, T+2, D+3], starting at [0, 1, 2] */
        gml_tensor *big = gml_new_tensor_3d(ctx, GML_F32, c->B, T + 2, c->D + 3);
        t = big ? gml_view(ctx, big, 3, (int64_t[]){c->B, T, c->D},
                           (size_t[]){big->nb[1], big->nb[2], big->nb[3]},
                           big->nb[2] + 2 * big->nb[3])
                : NULL;
    }
    gml_set_name(t, name);
    fill(t, src);
    return t;
}

/* Everything of d in ctx, then the block. */
static gml_attn_result build_into(gml_context *ctx, attn_block_fn fn, const attn_data *d) {
    const attn_case *c = &d->c;
    const int64_t D = c->D, dk = c->D / c->H, kvd = c->G * dk;
    gml_attn_weights w = {0};
    if (c->packed) {
        const int64_t rows = D + 2 * kvd;
        float *pw = malloc((size_t)(rows * D) * sizeof *pw),
              *pb = malloc((size_t)rows * sizeof *pb);
        memcpy(pw, d->wq, (size_t)(D * D) * 4);
        memcpy(pw + D * D, d->wk, (size_t)(kvd * D) * 4);
        memcpy(pw + (D + kvd) * D, d->wv, (size_t)(kvd * D) * 4);
        if (c->conv1d) { /* GPT-2's Conv1D c_attn.weight [D, 3D]: its transpose, a view */
            gml_tensor *st = gml_new_tensor_2d(ctx, GML_F32, D, rows);
            w.in_proj_weight = gml_transpose(ctx, gml_set_name(st, "c_attn.weight"), 0, 1);
            fill(w.in_proj_weight, pw);
        } else {
            w.in_proj_weight = leaf(ctx, "in_proj_weight", GML_F32, 2, (int64_t[]){rows, D}, pw);
        }
        if (c->bias) {
            memcpy(pb, d->bq, (size_t)D * 4);
            memcpy(pb + D, d->bk, (size_t)kvd * 4);
            memcpy(pb + D + kvd, d->bv, (size_t)kvd * 4);
            w.in_proj_bias = leaf(ctx, "in_proj_bias", GML_F32, 1, (int64_t[]){rows}, pb);
        }
        free(pw);
        free(pb);
    } else {
        w.w_q = leaf(ctx, "w_q.weight", GML_F32, 2, (int64_t[]){D, D}, d->wq);
        w.w_k = leaf(ctx, "w_k.weight", GML_F32, 2, (int64_t[]){kvd, D}, d->wk);
        w.w_v = leaf(ctx, "w_v.weight", GML_F32, 2, (int64_t[]){kvd, D}, d->wv);
        if (c->bias) {
            w.b_q = leaf(ctx, "w_q.bias", GML_F32, 1, (int64_t[]){D}, d->bq);
            w.b_k = leaf(ctx, "w_k.bias", GML_F32, 1, (int64_t[]){kvd}, d->bk);
            w.b_v = leaf(ctx, "w_v.bias", GML_F32, 1, (int64_t[]){kvd}, d->bv);
        }
    }
    if (c->conv1d) { /* c_proj.weight [D_in, D_out] */
        gml_tensor *st = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, D, D), "c_proj.weight");
        w.w_o = gml_transpose(ctx, st, 0, 1);
        fill(w.w_o, d->wo);
    } else {
        w.w_o = leaf(ctx, "w_o.weight", GML_F32, 2, (int64_t[]){D, D}, d->wo);
    }
    if (c->bias) w.b_o = leaf(ctx, "w_o.bias", GML_F32, 1, (int64_t[]){D}, d->bo);
    if (c->rel)
        w.rel_k = leaf(ctx, "rel_k.weight", GML_F32, 2, (int64_t[]){2 * c->P + 1, dk}, d->rel_k);
    if (c->rel && c->rel_v)
        w.rel_v = leaf(ctx, "rel_v.weight", GML_F32, 2, (int64_t[]){2 * c->P + 1, dk}, d->rel_v);

    gml_attn_inputs in = {.query = input(ctx, "query", c, c->Tq, d->xq, true)};
    if (c->cross) {
        in.key = input(ctx, "key", c, c->Tk, d->xk, false);
        in.value = input(ctx, "value", c, c->Tk, d->xv, false);
    }
    if (c->lens == ATTN_LENS_BATCH)
        in.valid_lens = leaf(ctx, "valid_lens", GML_I32, 1, (int64_t[]){c->B}, d->lens);
    else if (c->lens == ATTN_LENS_QUERY)
        in.valid_lens = leaf(ctx, "valid_lens", GML_I32, 2, (int64_t[]){c->B, c->Tq}, d->lens);
    if (c->mask == ATTN_MASK_QK)
        in.mask = leaf(ctx, "attn_mask", GML_F32, 2, (int64_t[]){c->Tq, c->Tk}, d->mask);
    else if (c->mask == ATTN_MASK_B)
        in.mask = leaf(ctx, "key_padding_mask", GML_F32, 4, (int64_t[]){c->B, 1, 1, c->Tk},
                       d->mask);
    if (c->positions)
        in.positions = leaf(ctx, "positions", GML_I32, 2, (int64_t[]){c->B, c->Tq}, d->positions);
    if (c->sinks) w.sinks = leaf(ctx, "sinks", GML_F32, 1, (int64_t[]){c->H}, d->sinks);
    attn_q_norm = c->qk_norm ? leaf(ctx, "q_norm.weight", GML_F32, 1, (int64_t[]){dk}, d->q_norm)
                          : NULL;
    attn_k_norm = c->qk_norm ? leaf(ctx, "k_norm.weight", GML_F32, 1, (int64_t[]){dk}, d->k_norm)
                          : NULL;
    gml_attn_config cfg = {
        .dims = {.d_model = c->D, .n_heads = c->H, .n_kv_heads = c->G},
        .score = {.causal = !c->causal     ? GML_CAUSAL_NONE
                            : c->top_left ? GML_CAUSAL_TOP_LEFT
                                          : GML_CAUSAL_BOTTOM_RIGHT,
                  .window = c->window,
                  .softcap = c->softcap,
                  .alibi_max_bias = c->alibi,
                  .scale = c->scale},
        .pos = {.kind = c->rope ? GML_POS_ROPE : GML_POS_NONE,
                .rope = {.theta = c->theta,
                         .rotary_dim = c->rotary_dim,
                         .pos_scale = c->pos_scale,
                         .interleaved = c->interleaved}},
        .graph = {.impl = c->impl, .want_weights = c->impl != GML_ATTN_FUSED, .gqa_form = c->form}};
    g_max_rel = c->P;
    return fn(ctx, cfg, &w, in);
}

gml_attn_result attn_relpos(gml_context *ctx, gml_attn_config cfg, const gml_attn_weights *w,
                            gml_attn_inputs in) {
    return gml_relpos_attn(ctx, cfg, g_max_rel, w, in);
}

bool attn_graph_build(attn_graph *ag, attn_block_fn fn, const attn_data *d, bool no_alloc) {
    *ag = (attn_graph){0};
    /* Size the arena from a no_alloc build first. */
    gml_context *probe = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
    gml_attn_result r = build_into(probe, fn, d);
    size_t need = gml_mem_required(probe);
    if (!r.out) {
        fprintf(stderr, "  build failed: %s\n", gml_last_error(probe));
        gml_free(probe);
        return false;
    }
    gml_free(probe);
    ag->ctx = gml_init((gml_init_params){.mem_size = need + 4096, .no_alloc = no_alloc});
    ag->r = build_into(ag->ctx, fn, d);
    if (ag->r.out)
        ag->g = gml_build_graph(ag->ctx, (gml_tensor *[]){ag->r.out, ag->r.weights},
                                ag->r.weights ? 2 : 1);
    if (!ag->g) {
        fprintf(stderr, "  build failed: %s\n", gml_last_error(ag->ctx));
        gml_free(ag->ctx);
        *ag = (attn_graph){0};
        return false;
    }
    return true;
}

void attn_graph_free(attn_graph *ag) {
    gml_graph_free(ag->g);
    gml_free(ag->ctx);
    *ag = (attn_graph){0};
}

bool attn_graph_run(attn_graph *ag, gml_isa isa, int n_threads) {
    if (gml_set_isa(isa) != GML_OK) {
        fprintf(stderr, "  cannot select ISA %s\n", gml_isa_name(isa));
        return false;
    }
    gml_status st = gml_graph_compute(ag->g, n_threads);
    if (st != GML_OK) {
        fprintf(stderr, "  compute (%s, %d threads) failed: %s\n", gml_isa_name(isa), n_threads,
                gml_graph_error(ag->g));
        return false;
    }
    return true;
}

/* ---- comparisons ----------------------------------------------------------- */

void attn_read(const gml_tensor *t, float *dst) {
    int64_t idx[4], n = gml_nelements(t);
    for (int64_t flat = 0; flat < n; flat++) {
        int64_t r = flat;
        for (int dd = t->n_dims - 1; dd >= 0; dd--) {
            idx[dd] = r % t->ne[4 - t->n_dims + dd];
            r /= t->ne[4 - t->n_dims + dd];
        }
        dst[flat] = gml_get_f32(t, idx);
    }
}

double attn_max_err(const float *got, const float *want, size_t n, double atol, double rtol,
                    size_t *n_bad) {
    double max = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)want[i]);
        if (!(e <= atol + rtol * fabs((double)want[i]))) bad++; /* NaN is bad */
        if (e > max || e != e) max = e != e ? INFINITY : e;
    }
    if (n_bad) *n_bad = bad;
    return max;
}

double attn_fused_max_rel;

/* The unfused graph's output for d (reference kernels, 1 thread) into out. */
static bool unfused_out(attn_block_fn fn, const attn_data *d, float *out) {
    attn_data u = *d;
    u.c.impl = GML_ATTN_UNFUSED;
    attn_graph ag;
    if (!attn_graph_build(&ag, fn, &u, false)) return false;
    bool ok = attn_graph_run(&ag, GML_ISA_REFERENCE, 1);
    if (ok) attn_read(ag.r.out, out);
    attn_graph_free(&ag);
    return ok;
}

int attn_check(const char *block, attn_block_fn fn, const attn_case *c0, uint64_t seed) {
    attn_data *d = attn_data_new(c0, seed);
    const attn_case *c = &d->c;
    const bool fused = c->impl == GML_ATTN_FUSED;
    char desc[256];
    attn_case_str(c, desc, sizeof desc);
    const size_t n_out = (size_t)c->B * c->Tq * c->D, n_attn = (size_t)c->B * c->H * c->Tq * c->Tk;
    float *want_out = malloc(n_out * 4), *want_attn = malloc(n_attn * 4);
    float *got_out = malloc(n_out * 4), *got_attn = calloc(n_attn, 4);
    float *first_out = malloc(n_out * 4), *first_attn = malloc(n_attn * 4);
    float *unfused = fused ? malloc(n_out * 4) : NULL;
    attn_reference(d, want_out, want_attn);

    int fails = 0;
    double err_out = 0, err_attn = 0, err_fused = 0;
    attn_graph ag, plan;
    if (fused && !unfused_out(fn, d, unfused)) {
        fails = 1;
        goto done;
    }
    if (!attn_graph_build(&ag, fn, d, false)) {
        fails = 1;
        goto done;
    }
    if (fused != (ag.r.weights == NULL)) {
        fprintf(stderr, "  the %s graph %s weights\n", fused ? "fused" : "unfused",
                fused ? "returns" : "lacks");
        fails = 1;
    }
    /* The same graph built without data: same structure. */
    if (!attn_graph_build(&plan, fn, d, true)) {
        fails = 1;
    } else {
        if (gml_graph_digest(plan.g) != gml_graph_digest(ag.g)) {
            fprintf(stderr, "  no_alloc build differs from the allocating one\n");
            fails = 1;
        }
        attn_graph_free(&plan);
    }
    /* every kernel set this CPU runs (one it lacks is skipped) */
    const gml_isa isas[] = {GML_TEST_ISAS};
    for (size_t ii = 0; ii < sizeof isas / sizeof *isas && !fails; ii++) {
        if (gml_set_isa(isas[ii]) != GML_OK) continue;
        for (int nth = 1; nth <= 3 && !fails; nth++) {
            if (!attn_graph_run(&ag, isas[ii], nth)) {
                fails = 1;
                break;
            }
            attn_read(ag.r.out, got_out);
            if (!fused) attn_read(ag.r.weights, got_attn);
            size_t bad_out, bad_attn = 0;
            double eo = attn_max_err(got_out, want_out, n_out, ATTN_ATOL, ATTN_RTOL, &bad_out);
            double ea = fused ? 0
                              : attn_max_err(got_attn, want_attn, n_attn, ATTN_ATOL, ATTN_RTOL,
                                             &bad_attn);
            err_out = fmax(err_out, eo);
            err_attn = fmax(err_attn, ea);
            if (bad_out || bad_attn) {
                fprintf(stderr,
                        "  %s, %d threads: %zu of %zu outputs, %zu of %zu weights off "
                        "(max err %.3g, %.3g)\n",
                        gml_isa_name(isas[ii]), nth, bad_out, n_out, bad_attn, n_attn, eo, ea);
                fails = 1;
            }
            if (fused) {
                size_t bad;
                attn_max_err(got_out, unfused, n_out, ATTN_FUSED_ATOL, ATTN_FUSED_RTOL, &bad);
                for (size_t i = 0; i < n_out; i++)
                    err_fused = fmax(err_fused, fabs((double)got_out[i] - unfused[i]) /
                                                    fmax(fabs((double)unfused[i]), 1e-1));
                if (bad) {
                    fprintf(stderr, "  %s, %d threads: %zu of %zu outputs differ from the unfused "
                            "graph's by more than %.0e + %.0e |unfused|\n", gml_isa_name(isas[ii]),
                            nth, bad, n_out, ATTN_FUSED_ATOL, ATTN_FUSED_RTOL);
                    fails = 1;
                }
            }
            if (nth == 1) {
                memcpy(first_out, got_out, n_out * 4);
                memcpy(first_attn, got_attn, n_attn * 4);
            } else if (memcmp(first_out, got_out, n_out * 4) ||
                       memcmp(first_attn, got_attn, n_attn * 4)) {
                fprintf(stderr, "  %s: %d threads give other bits than 1 thread\n",
                        gml_isa_name(isas[ii]), nth);
                fails = 1;
            }
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    attn_graph_free(&ag);
    attn_fused_max_rel = fmax(attn_fused_max_rel, err_fused);
done:
    if (fused)
        printf("%s %-6s %-60s max err out %.2e, vs unfused %.2e rel\n", fails ? "FAIL" : "ok  ",
               block, desc, err_out, err_fused);
    else
        printf("%s %-6s %-60s max err out %.2e attn %.2e\n", fails ? "FAIL" : "ok  ", block,
               desc, err_out, err_attn);
    free(want_out), free(want_attn), free(got_out), free(got_attn), free(first_out),
        free(first_attn), free(unfused);
    attn_data_free(d);
    return fails;
}
