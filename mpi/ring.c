/* Context-parallel prefill (ring attention) over MPI (ggmlite/mpi.h,
 * gml_cp_*): each rank holds a contiguous range of the sequence's rows, K/V
 * chunks travel the ring of ranks between graph computations, every chunk's
 * partial attention (gml_flash_attn_partial) is kept and the partials merge
 * in key order. Graphs of public ops and attention stages only. */
#include <ggmlite/mpi.h>

#include "misuse.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CP "context_parallel"

struct gml_cp {
    MPI_Comm comm;
    int rank, P;
    bool llama;
    gml_cp_layout layout;
    int64_t B, T, D, H, G, dk, n; /* n: this rank's rows, over its segments */
    int S, ns;            /* segments of the sequence (P, or 2P zigzag); this rank's (1 or 2) */
    int64_t *seg0, *segn; /* [S]: segment i is rows [seg0[i], seg0[i] + segn[i]) */
    int64_t *rows;        /* [P]: rank r's rows (its chunk's) */
    int mine[2];          /* this rank's segments, ascending */
    int64_t qoff[2];      /* their first row among the rank's rows */
    bool *use;            /* [2 * S]: use[x * S + y]: my segment x can see segment y */
    float *x;             /* [B, n, D] the rank's input rows */
    float *q;             /* [B, H, n, dk] its queries, positioned */
    float *buf[2];        /* chunks in flight: K [B, G, m, dk] then V [B, G, m, dk] */
    size_t buf_floats;
    float *parts;         /* [P] partials [B, H, n, dk + 2] */
    int32_t *pos;         /* [B, n] absolute positions of the rank's rows */
    int32_t *spos[2];     /* [B, n_x] those of each of its segments */
    gml_context *gctx;    /* no_alloc: every graph's tensors */
    gml_graph *proj, **part, *merge, *whole; /* whole: P = 1, the single-process block */
    gml_tensor *out;
};

static gml_cp *cp_fail(char *err, size_t size, const char *fmt, ...) GML_PRINTF(3, 4);
static gml_cp *cp_fail(char *err, size_t size, const char *fmt, ...) {
    if (err && size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, size, fmt, ap);
        va_end(ap);
    }
    return NULL;
}

void gml_cp_free(gml_cp *cp) {
    if (!cp) return;
    gml_graph_free(cp->proj);
    gml_graph_free(cp->merge);
    gml_graph_free(cp->whole);
    for (int c = 0; cp->part && c < cp->P; c++) gml_graph_free(cp->part[c]);
    free(cp->part);
    gml_free(cp->gctx);
    free(cp->seg0);
    free(cp->segn);
    free(cp->rows);
    free(cp->use);
    free(cp->spos[0]);
    free(cp->spos[1]);
    free(cp->x);
    free(cp->q);
    free(cp->buf[0]);
    free(cp->buf[1]);
    free(cp->parts);
    free(cp->pos);
    free(cp);
}

/* A leaf over memory of ours: [ne...] f32 (or i32) at data. */
static gml_tensor *over(gml_context *ctx, gml_type type, int n_dims, const int64_t *ne, void *data,
                        const char *name) {
    gml_tensor *t = gml_new_tensor(ctx, type, n_dims, ne);
    if (!t) return NULL;
    t->data = data;
    gml_set_flags(t, GML_FLAG_INPUT);
    return gml_set_name(t, name);
}

static gml_graph *planned(gml_context *ctx, gml_tensor *const *outs, int n, char *err, size_t size) {
    gml_graph *g = gml_build_graph(ctx, outs, n);
    if (!g) {
        cp_fail(err, size, "%s", gml_last_error(ctx)[0] ? gml_last_error(ctx) : "out of memory for a graph");
        return NULL;
    }
    if (gml_graph_plan(g, NULL) != GML_OK) {
        cp_fail(err, size, "placing the graph's tensors: %s", gml_graph_error(g));
        gml_graph_free(g);
        return NULL;
    }
    return g;
}

/* The llama layer's attention in attention.h's terms (as layers.h's layer). */
static gml_attn_config llama_attn(const gml_llama_config *lc, int64_t D) {
    return (gml_attn_config){
        .dims = {.d_model = D, .n_heads = lc->n_heads, .n_kv_heads = lc->n_kv_heads},
        .score = {.causal = GML_CAUSAL_BOTTOM_RIGHT, .window = lc->window, .softcap = lc->softcap},
        .pos = {.kind = GML_POS_ROPE, .rope = {.theta = lc->rope_theta != 0 ? lc->rope_theta : 10000.0f}},
    };
}

/* Whether chunk c's keys [s, s + m) can be seen by queries [t0, t0 + n):
 * causal, a query sees keys at or before it; with a window W also after
 * i - W. Without causal or window every chunk counts. */
static bool reaches(const gml_attn_config *cfg, int64_t s, int64_t m, int64_t t0, int64_t n) {
    const bool causal = cfg->score.causal != GML_CAUSAL_NONE || cfg->score.window > 0;
    if (!causal) return true;
    if (s > t0 + n - 1) return false;                  /* every key after every query */
    if (cfg->score.window > 0 && s + m - 1 < t0)       /* wholly before: the nearest pair */
        return t0 - (s + m - 1) < cfg->score.window;
    return true;
}

/* Rank r's segments, ascending: {r}, or zigzag {r, 2P - 1 - r}; their count. */
static int segments_of(const gml_cp *cp, int r, int sg[2]) {
    sg[0] = r;
    sg[1] = cp->S - 1 - r;
    return cp->ns;
}

static gml_cp *create(MPI_Comm comm, const gml_attn_config *acfg, const gml_attn_weights *aw,
                      const gml_llama_config *lcfg, const gml_llama_weights *lw, gml_cp_layout layout,
                      int64_t B, int64_t T, int64_t D, char *err, size_t err_size);

gml_cp *gml_cp_attn_create(MPI_Comm comm, const gml_attn_config *cfg, const gml_attn_weights *w,
                           gml_cp_layout layout, int64_t B, int64_t T, int64_t D, char *err,
                           size_t err_size) {
    GML_MPI_NONNULL_ERR(cfg, NULL, err, err_size);
    GML_MPI_NONNULL_ERR(w, NULL, err, err_size);
    return create(comm, cfg, w, NULL, NULL, layout, B, T, D, err, err_size);
}

gml_cp *gml_cp_llama_create(MPI_Comm comm, const gml_llama_config *cfg, const gml_llama_weights *w,
                            gml_cp_layout layout, int64_t B, int64_t T, int64_t D, char *err,
                            size_t err_size) {
    GML_MPI_NONNULL_ERR(cfg, NULL, err, err_size);
    GML_MPI_NONNULL_ERR(w, NULL, err, err_size);
    return create(comm, NULL, NULL, cfg, w, layout, B, T, D, err, err_size);
}

/* Checks what the ring cannot do and what the single-process block would
 * refuse (built once in a scratch context, for its own messages). */
static bool check(const gml_cp *cp, const gml_attn_config *acfg, const gml_attn_weights *aw,
                  const gml_llama_config *lcfg, const gml_llama_weights *lw, char *err, size_t size) {
    if (cp->llama ? !lcfg || !lw : !acfg || !aw)
        return cp_fail(err, size, CP ": no %s (NULL)", (cp->llama ? !lcfg : !acfg) ? "config" : "weights"), false;
    if (cp->B < 1 || cp->T < 1 || cp->D < 1)
        return cp_fail(err, size, CP ": sizes B=%" PRId64 " T=%" PRId64 " D=%" PRId64 " must be >= 1",
                       cp->B, cp->T, cp->D), false;
    if (cp->layout != GML_CP_CONTIGUOUS && cp->layout != GML_CP_ZIGZAG)
        return cp_fail(err, size, CP ": layout %d is not GML_CP_CONTIGUOUS or GML_CP_ZIGZAG", (int)cp->layout), false;
    const int S = cp->layout == GML_CP_ZIGZAG ? 2 * cp->P : cp->P;
    if (cp->T < S)
        return cp_fail(err, size, CP ": %" PRId64 " rows of the sequence cannot be split over %d ranks%s: "
                       "each %s needs a row (use at most %" PRId64 " ranks)", cp->T, cp->P,
                       S > cp->P ? " in zigzag segments" : "", S > cp->P ? "of the 2P segments" : "rank",
                       S > cp->P ? cp->T / 2 : cp->T), false;
    if (!cp->llama) {
        if (acfg->score.add_zero_attn || aw->bias_k || aw->bias_v)
            return cp_fail(err, size, CP ": %s is not supported (an extra key row outside the ring's "
                           "chunks)", acfg->score.add_zero_attn ? "add_zero_attn" : "bias_k/bias_v"), false;
        if (acfg->graph.want_weights)
            return cp_fail(err, size, CP ": the attention weights are not gathered across ranks "
                           "(want_weights)"), false;
    }
    gml_context *s = gml_init((gml_init_params){.mem_size = 256 * gml_tensor_overhead(), .no_alloc = true});
    if (!s) return cp_fail(err, size, CP ": out of memory"), false;
    gml_tensor *x = gml_new_tensor_3d(s, GML_F32, cp->B, cp->T, cp->D);
    gml_tensor *o;
    if (cp->llama) {
        o = gml_llama_layer(s, lcfg, lw, x, NULL);
    } else {
        gml_attn_config c = *acfg;
        c.graph.impl = GML_ATTN_FUSED;
        const int G = c.dims.n_kv_heads ? c.dims.n_kv_heads : c.dims.n_heads;
        o = (G == c.dims.n_heads ? gml_mha : gml_gqa)(s, c, aw, (gml_attn_inputs){.query = x}).out;
    }
    if (!o) cp_fail(err, size, "%s", gml_last_error(s));
    gml_free(s);
    return o != NULL;
}

/* Projection: x rows -> (llama: RMSNorm) -> q, k, v positioned at t0..;
 * q into cp->q, k and v into buf[0] (the rank's own chunk, step 0). */
static gml_tensor *proj_graph(gml_cp *cp, const gml_attn_config *cfg, const gml_attn_weights *aw,
                              const gml_llama_config *lcfg, const gml_llama_weights *lw,
                              gml_tensor *x, gml_tensor *pos, char *err, size_t size) {
    gml_context *c = cp->gctx;
    gml_tensor *h = x;
    if (cp->llama)
        h = gml_set_name(gml_rms_norm(c, x, lw->attn_norm, lcfg->rms_eps != 0 ? lcfg->rms_eps : 1e-6f),
                         "attn_norm");
    gml_attn_inputs in = {.query = h, .positions = pos};
    gml_attn_qkv qkv = gml_attn_project(c, cfg, aw, in);
    if (qkv.q) qkv = gml_attn_position(c, cfg, qkv, in);
    if (!qkv.q) return cp_fail(err, size, "%s", gml_last_error(c)), NULL;
    const int64_t B = cp->B, n = cp->n, H = cp->H, G = cp->G, dk = cp->dk;
    gml_tensor *qd = over(c, GML_F32, 4, (int64_t[]){B, H, n, dk}, cp->q, "q_rows");
    gml_tensor *kd = over(c, GML_F32, 4, (int64_t[]){B, G, n, dk}, cp->buf[0], "k_chunk");
    gml_tensor *vd = over(c, GML_F32, 4, (int64_t[]){B, G, n, dk}, cp->buf[0] + B * G * n * dk, "v_chunk");
    gml_tensor *outs[3] = {gml_cpy(c, qkv.q, qd), gml_cpy(c, qkv.k, kd), gml_cpy(c, qkv.v, vd)};
    if (!outs[0] || !outs[1] || !outs[2]) return cp_fail(err, size, "%s", gml_last_error(c)), NULL;
    cp->proj = planned(c, outs, 3, err, size);
    return cp->proj ? outs[0] : NULL;
}

static gml_cp *create(MPI_Comm comm, const gml_attn_config *acfg, const gml_attn_weights *aw,
                      const gml_llama_config *lcfg, const gml_llama_weights *lw, gml_cp_layout layout,
                      int64_t B, int64_t T, int64_t D, char *err, size_t err_size) {
    char msg[1024] = "";
    gml_cp *cp = calloc(1, sizeof *cp);
    bool ok = cp != NULL;
    if (!ok) snprintf(msg, sizeof msg, CP ": out of memory");
    int rank = 0, P = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &P);
    if (ok) {
        *cp = (gml_cp){.comm = comm, .rank = rank, .P = P, .llama = lcfg != NULL || lw != NULL,
                       .layout = layout, .B = B, .T = T, .D = D};
        ok = check(cp, acfg, aw, lcfg, lw, msg, sizeof msg);
    }
    gml_attn_config cfg = {0};
    gml_attn_weights w = {0};
    if (ok) {
        cfg = cp->llama ? llama_attn(lcfg, D) : *acfg;
        w = cp->llama ? (gml_attn_weights){.w_q = lw->wq, .b_q = lw->bq, .w_k = lw->wk, .b_k = lw->bk,
                                           .w_v = lw->wv, .b_v = lw->bv, .w_o = lw->wo, .b_o = lw->bo,
                                           .sinks = lw->sinks}
                      : *aw;
        cp->H = cfg.dims.n_heads;
        cp->G = cfg.dims.n_kv_heads ? cfg.dims.n_kv_heads : cp->H;
        cp->dk = D / cp->H;
        cp->S = layout == GML_CP_ZIGZAG ? 2 * P : P;
        cp->ns = layout == GML_CP_ZIGZAG ? 2 : 1;
        cp->seg0 = calloc((size_t)cp->S, sizeof *cp->seg0);
        cp->segn = calloc((size_t)cp->S, sizeof *cp->segn);
        cp->rows = calloc((size_t)P, sizeof *cp->rows);
        cp->use = calloc((size_t)(2 * cp->S), sizeof *cp->use);
        cp->part = calloc((size_t)P, sizeof *cp->part);
        ok = cp->seg0 && cp->segn && cp->rows && cp->use && cp->part;
        if (!ok) snprintf(msg, sizeof msg, CP ": out of memory");
    }
    int64_t max_m = 0;
    if (ok) {
        for (int i = 0; i < cp->S; i++) gml_tp_range(T, cp->S, i, &cp->seg0[i], &cp->segn[i]);
        for (int r = 0; r < P; r++) {
            int sg[2];
            const int k = segments_of(cp, r, sg);
            for (int j = 0; j < k; j++) cp->rows[r] += cp->segn[sg[j]];
            if (cp->rows[r] > max_m) max_m = cp->rows[r];
        }
        segments_of(cp, rank, cp->mine);
        cp->n = cp->rows[rank];
        cp->qoff[1] = cp->ns == 2 ? cp->segn[cp->mine[0]] : 0;
        cp->buf_floats = (size_t)(2 * B * cp->G * max_m * cp->dk);
        if (cp->buf_floats > INT_MAX) {
            snprintf(msg, sizeof msg, CP ": a K/V chunk of %zu floats (2 B G T/P d_k) is more than one MPI "
                     "message takes (2^31 - 1): use more ranks or a smaller batch", cp->buf_floats);
            ok = false;
        }
    }
    const int64_t n = ok ? cp->n : 0, H = cp ? cp->H : 0, dk = cp ? cp->dk : 0;
    const size_t slot = (size_t)(B * H * n * (dk + 2)); /* the partials of both my segments, per key segment */
    if (ok) {
        cp->x = malloc((size_t)(B * n * D) * sizeof(float));
        cp->pos = malloc((size_t)(B * n) * sizeof(int32_t));
        for (int xs = 0; xs < cp->ns; xs++) cp->spos[xs] = malloc((size_t)(B * cp->segn[cp->mine[xs]]) * sizeof(int32_t));
        if (P > 1) {
            cp->q = malloc((size_t)(B * H * n * dk) * sizeof(float));
            cp->buf[0] = malloc(cp->buf_floats * sizeof(float));
            cp->buf[1] = malloc(cp->buf_floats * sizeof(float));
            cp->parts = malloc((size_t)cp->S * slot * sizeof(float));
        }
        cp->gctx = gml_init((gml_init_params){.mem_size = (size_t)(256 + 48 * P) * gml_tensor_overhead(),
                                              .no_alloc = true});
        ok = cp->x && cp->pos && cp->spos[0] && (cp->ns == 1 || cp->spos[1]) && cp->gctx &&
             (P == 1 || (cp->q && cp->buf[0] && cp->buf[1] && cp->parts));
        if (!ok) snprintf(msg, sizeof msg, CP ": out of memory for %" PRId64 " rows", n);
    }
    if (ok) {
        for (int xs = 0; xs < cp->ns; xs++) {
            const int64_t t0 = cp->seg0[cp->mine[xs]], m = cp->segn[cp->mine[xs]];
            for (int64_t b = 0; b < B; b++)
                for (int64_t i = 0; i < m; i++)
                    cp->pos[b * n + cp->qoff[xs] + i] = cp->spos[xs][b * m + i] = (int32_t)(t0 + i);
        }
        memset(cp->x, 0, (size_t)(B * n * D) * sizeof(float));
    }
    gml_context *c = ok ? cp->gctx : NULL;
    gml_tensor *x = ok ? over(c, GML_F32, 3, (int64_t[]){B, n, D}, cp->x, "x_rows") : NULL;
    gml_tensor *fin[2] = {NULL, NULL}; /* each of my segments' heads [B, H, n_x, dk] */
    if (ok && P == 1) { /* the single process's graph, so its bits */
        if (cp->llama) {
            cp->out = gml_llama_layer(c, lcfg, lw, x, NULL);
        } else {
            gml_attn_config one = cfg;
            if (one.graph.impl == GML_ATTN_AUTO) one.graph.impl = GML_ATTN_FUSED;
            cp->out = (cp->G == cp->H ? gml_mha : gml_gqa)(c, one, aw, (gml_attn_inputs){.query = x}).out;
        }
        ok = cp->out && (cp->whole = planned(c, &cp->out, 1, msg, sizeof msg)) != NULL;
        if (!cp->out) snprintf(msg, sizeof msg, "%s", gml_last_error(c));
    } else if (ok) {
        gml_tensor *pos = over(c, GML_I32, 2, (int64_t[]){B, n}, cp->pos, "positions");
        ok = proj_graph(cp, &cfg, &w, lcfg, lw, x, pos, msg, sizeof msg) != NULL;
        gml_tensor *qin = ok ? over(c, GML_F32, 4, (int64_t[]){B, H, n, dk}, cp->q, "q") : NULL;
        gml_tensor *qs[2] = {qin, NULL}, *ps[2] = {pos, NULL};
        for (int xs = 0; ok && cp->ns == 2 && xs < 2; xs++) { /* each segment's queries: a view */
            const int64_t m = cp->segn[cp->mine[xs]];
            qs[xs] = gml_view(c, qin, 4, (int64_t[]){B, H, m, dk}, (size_t[]){qin->nb[0], qin->nb[1], qin->nb[2], qin->nb[3]},
                              (size_t)cp->qoff[xs] * qin->nb[2]);
            ps[xs] = over(c, GML_I32, 2, (int64_t[]){B, m}, cp->spos[xs], xs ? "positions[1]" : "positions[0]");
            ok = qs[xs] && ps[xs];
        }
        const float scale = cfg.score.scale ? cfg.score.scale : (float)(1.0 / sqrt((double)dk));
        gml_tensor *acc[2] = {NULL, NULL};
        size_t xoff[2] = {0, (size_t)(B * H * cp->qoff[1] * (dk + 2))}; /* my segment's place in a slot */
        for (int ch = 0; ok && ch < P; ch++) { /* chunk ch (rank ch's rows) arrives at step (rank - ch) mod P */
            const int step = (rank - ch + P) % P;
            const int64_t m = cp->rows[ch];
            float *kv = cp->buf[step % 2];
            char name[GML_MAX_NAME];
            snprintf(name, sizeof name, "k[rank %d]", ch);
            gml_tensor *k = over(c, GML_F32, 4, (int64_t[]){B, cp->G, m, dk}, kv, name);
            snprintf(name, sizeof name, "v[rank %d]", ch);
            gml_tensor *v = over(c, GML_F32, 4, (int64_t[]){B, cp->G, m, dk}, kv + B * cp->G * m * dk, name);
            int ys[2];
            const int ny = segments_of(cp, ch, ys);
            gml_tensor *outs[4];
            int n_out = 0;
            for (int j = 0, koff = 0; ok && j < ny; koff += (int)cp->segn[ys[j]], j++) {
                const int y = ys[j];
                gml_tensor *ky = k, *vy = v;
                if (ny == 2) { /* the segment's keys: views of the chunk */
                    const int64_t e[4] = {B, cp->G, cp->segn[y], dk};
                    ky = gml_view(c, k, 4, e, (size_t[]){k->nb[0], k->nb[1], k->nb[2], k->nb[3]}, (size_t)koff * k->nb[2]);
                    vy = gml_view(c, v, 4, e, (size_t[]){v->nb[0], v->nb[1], v->nb[2], v->nb[3]}, (size_t)koff * v->nb[2]);
                }
                for (int xs = 0; ok && xs < cp->ns; xs++) {
                    const int xg = cp->mine[xs];
                    cp->use[xs * cp->S + y] = reaches(&cfg, cp->seg0[y], cp->segn[y], cp->seg0[xg], cp->segn[xg]);
                    if (!cp->use[xs * cp->S + y]) continue;
                    const gml_attn_opts opts = {
                        .positions = ps[xs],
                        .causal = cfg.score.causal != GML_CAUSAL_NONE ? GML_CAUSAL_BOTTOM_RIGHT : GML_CAUSAL_NONE,
                        .window = cfg.score.window, .softcap = cfg.score.softcap,
                        .alibi_max_bias = cfg.score.alibi_max_bias};
                    gml_tensor *pt = gml_flash_attn_partial(c, qs[xs], ky, vy, scale, &opts, cp->seg0[y]);
                    if (!pt) {
                        snprintf(msg, sizeof msg, "%s", gml_last_error(c));
                        ok = false;
                        break;
                    }
                    pt->data = cp->parts + (size_t)y * slot + xoff[xs]; /* kept until the merge */
                    snprintf(name, sizeof name, "partial[%d][%d]", xg, y);
                    outs[n_out++] = gml_set_name(pt, name);
                }
            }
            if (ok && n_out) {
                cp->part[ch] = planned(c, outs, n_out, msg, sizeof msg);
                ok = cp->part[ch] != NULL;
            }
        }
        for (int xs = 0; ok && xs < cp->ns; xs++) { /* key order: segment 0, 1, ... */
            const int64_t m = cp->segn[cp->mine[xs]];
            for (int y = 0; ok && y < cp->S; y++) {
                if (!cp->use[xs * cp->S + y]) continue;
                char name[GML_MAX_NAME];
                snprintf(name, sizeof name, "kept[%d][%d]", cp->mine[xs], y);
                /* the merge graph reads the kept partial as a leaf */
                gml_tensor *in = over(c, GML_F32, 4, (int64_t[]){B, H, m, dk + 2}, cp->parts + (size_t)y * slot + xoff[xs], name);
                acc[xs] = acc[xs] ? gml_attn_partial_merge(c, acc[xs], in) : in;
            }
            fin[xs] = gml_attn_partial_finish(c, acc[xs], w.sinks); /* [B, H, m, dk] */
            if (!fin[xs]) {
                snprintf(msg, sizeof msg, "%s", gml_last_error(c));
                ok = false;
            }
        }
        if (ok) {
            gml_tensor *heads = cp->ns == 1 ? fin[0] : gml_concat(c, fin[0], fin[1], 2); /* [B, H, n, dk] */
            gml_tensor *att = heads ? gml_attn_merge(c, &w, heads) : NULL; /* [B, n, D] */
            if (att && cp->llama) {
                const float eps = lcfg->rms_eps != 0 ? lcfg->rms_eps : 1e-6f;
                gml_tensor *h = gml_set_name(gml_add(c, x, att), "h");
                gml_tensor *nm = gml_set_name(gml_rms_norm(c, h, lw->mlp_norm, eps), "mlp_norm");
                gml_tensor *g = gml_set_name(gml_silu(c, gml_linear(c, nm, lw->w_gate, lw->b_gate)), "gate");
                gml_tensor *u = gml_set_name(gml_linear(c, nm, lw->w_up, lw->b_up), "up");
                gml_tensor *mm = gml_linear(c, gml_mul(c, g, u), lw->w_down, lw->b_down);
                att = gml_set_name(gml_add(c, h, mm), "out");
            }
            cp->out = att;
            ok = att && (cp->merge = planned(c, &cp->out, 1, msg, sizeof msg)) != NULL;
            if (!att) snprintf(msg, sizeof msg, "%s", gml_last_error(c));
        }
    }
    char why[1200];
    if (!gml_mpi_agree(comm, ok, msg, why, sizeof why)) {
        gml_cp_free(cp);
        return cp_fail(err, err_size, "%s", why);
    }
    return cp;
}

int gml_cp_rows_of(int64_t T, int P, int r, gml_cp_layout layout, int64_t t0[2], int64_t n[2]) {
    GML_MPI_NONNULL(NULL, t0, 0);
    GML_MPI_NONNULL(NULL, n, 0);
    if (layout != GML_CP_ZIGZAG) {
        gml_tp_range(T, P, r, &t0[0], &n[0]);
        return 1;
    }
    gml_tp_range(T, 2 * P, r, &t0[0], &n[0]);
    gml_tp_range(T, 2 * P, 2 * P - 1 - r, &t0[1], &n[1]);
    return 2;
}

int gml_cp_rows(const gml_cp *cp, int64_t t0[2], int64_t n[2]) {
    GML_MPI_NONNULL(NULL, cp, 0);
    GML_MPI_NONNULL(NULL, t0, 0);
    GML_MPI_NONNULL(NULL, n, 0);
    for (int xs = 0; xs < cp->ns; xs++) {
        t0[xs] = cp->seg0[cp->mine[xs]];
        n[xs] = cp->segn[cp->mine[xs]];
    }
    return cp->ns;
}

float *gml_cp_input(gml_cp *cp) {
    GML_MPI_NONNULL(NULL, cp, NULL);
    return cp->x;
}

const float *gml_cp_output(const gml_cp *cp) {
    GML_MPI_NONNULL(NULL, cp, NULL);
    const gml_graph *g = cp->whole ? cp->whole : cp->merge;
    return g ? gml_graph_data(g, cp->out) : NULL;
}

static double now_ms(void) { return MPI_Wtime() * 1e3; }

static void compute(gml_graph *g, int n_threads, bool *ok, char *msg, size_t size, const char *what,
                    double *ms) {
    if (!*ok) return; /* the ring goes on without computing: no rank waits for ever */
    const double t0 = now_ms();
    if (gml_graph_compute(g, n_threads) != GML_OK) {
        snprintf(msg, size, CP ": computing %s failed: %s", what, gml_graph_error(g));
        *ok = false;
    }
    *ms += now_ms() - t0;
}

static gml_status mpi_fail(int rc, const char *what, char *err, size_t size) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
    if (err && size) snprintf(err, size, CP ": %s: %s", what, s);
    return GML_ERR_IO;
}

gml_status gml_cp_run(gml_cp *cp, int n_threads, gml_cp_stats *stats, char *err, size_t err_size) {
    GML_MPI_NONNULL_ERR(cp, GML_ERR_INVALID, err, err_size);
    gml_cp_stats st = {0};
    char msg[1024] = "";
    bool ok = true;
    if (cp->whole) {
        compute(cp->whole, n_threads, &ok, msg, sizeof msg, "the block", &st.compute_ms);
    } else {
        const int P = cp->P, r = cp->rank, next = (r + 1) % P, prev = (r - 1 + P) % P;
        const int64_t per = 2 * cp->B * cp->G * cp->dk; /* floats per row of a chunk */
        compute(cp->proj, n_threads, &ok, msg, sizeof msg, "the projections", &st.compute_ms);
        MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        for (int s = 0; s < P; s++) {
            const int ch = (r - s + P) % P; /* the chunk in hand: buf[s % 2] */
            if (s > 0) {
                const double t0 = now_ms();
                int rc = MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
                st.wait_ms += now_ms() - t0;
                if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Waitall", err, err_size);
            }
            if (s + 1 < P) { /* the next exchange, posted before computing on this chunk */
                const int in = (r - s - 1 + P) % P;
                int rc = MPI_Irecv(cp->buf[(s + 1) % 2], (int)(per * cp->rows[in]), MPI_FLOAT, prev, s,
                                   cp->comm, &req[0]);
                if (rc == MPI_SUCCESS)
                    rc = MPI_Isend(cp->buf[s % 2], (int)(per * cp->rows[ch]), MPI_FLOAT, next, s, cp->comm, &req[1]);
                if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Isend/MPI_Irecv", err, err_size);
                st.bytes_sent += (double)(per * cp->rows[ch]) * sizeof(float);
            }
            if (cp->part[ch]) {
                char what[64];
                snprintf(what, sizeof what, "the partial of chunk %d", ch);
                compute(cp->part[ch], n_threads, &ok, msg, sizeof msg, what, &st.compute_ms);
                st.chunks++;
            }
        }
        compute(cp->merge, n_threads, &ok, msg, sizeof msg, "the merge and output", &st.compute_ms);
    }
    if (stats) *stats = st;
    char why[1200];
    if (!gml_mpi_agree(cp->comm, ok, msg, why, sizeof why)) return cp_fail(err, err_size, "%s", why), GML_ERR_INVALID;
    return GML_OK;
}
