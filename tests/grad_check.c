/* The gradient checker (see grad_check.h): analytic gradients under every
 * ISA and thread count against central differences of a double evaluator. */
#include "grad_check.h"
#include "check.h" /* element access and poison only; failures are returned */

double grad_check_max_rel = 0;

/* ---- the double evaluator ----------------------------------------------------
 * One double per element of each storage root (a leaf, or a node that owns
 * its data), at the element's place in that storage: a view's element is
 * the root's cell at (view_offs + sum i_k nb_k) / element size. */

typedef struct ev_root {
    const gml_tensor *t;
    double *v;
} ev_root;

typedef struct ev {
    gml_graph *g; /* the forward: out and what it depends on */
    ev_root *roots;
    int n_roots;
    ev_root cache[8]; /* recent lookups, by the root's address */
    char err[256];
} ev;

static const gml_tensor *root_of(const gml_tensor *t) { return t->view_src ? t->view_src : t; }

static double *ev_buf(ev *e, const gml_tensor *t) {
    const gml_tensor *r = root_of(t);
    ev_root *c = &e->cache[((uintptr_t)r >> 6) % 8];
    if (c->t == r) return c->v;
    for (int i = 0; i < e->n_roots; i++)
        if (e->roots[i].t == r) {
            *c = e->roots[i];
            return c->v;
        }
    return NULL;
}

/* A tensor's cells: its root's values, its offset and strides in cells. */
typedef struct ev_view {
    double *v;
    int64_t off, st[GML_MAX_DIMS];
} ev_view;

static ev_view ev_view_of(ev *e, const gml_tensor *t) {
    ev_view w = {NULL, 0, {0, 0, 0, 0}};
    if (!t) return w;
    const size_t es = gml_type_size(t->type);
    w.v = ev_buf(e, t);
    w.off = (int64_t)(t->view_offs / es);
    for (int d = 0; d < GML_MAX_DIMS; d++) w.st[d] = (int64_t)(t->nb[d] / es);
    return w;
}

static inline double *vat4(const ev_view *w, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return w->v + w->off + i0 * w->st[0] + i1 * w->st[1] + i2 * w->st[2] + i3 * w->st[3];
}
static inline double *vat(const ev_view *w, const int64_t i[GML_MAX_DIMS]) {
    return vat4(w, i[0], i[1], i[2], i[3]);
}

static double *ev_at(ev *e, const gml_tensor *t, const int64_t i[GML_MAX_DIMS]) {
    const ev_view w = ev_view_of(e, t);
    return vat(&w, i);
}

/* Flat logical index -> right-aligned index, and the element count. */
static void unflat(const gml_tensor *t, int64_t f, int64_t i[GML_MAX_DIMS]) {
    for (int d = GML_MAX_DIMS - 1; d >= 0; d--) {
        i[d] = f % t->ne[d];
        f /= t->ne[d];
    }
}
static int64_t numel(const gml_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }

static double leaf_value(const gml_tensor *t, size_t k) {
    const char *p = (const char *)t->data + k * gml_type_size(t->type);
    float f;
    int32_t n;
    uint16_t h;
    switch (t->type) {
    case GML_F32: memcpy(&f, p, 4); return f;
    case GML_I32: memcpy(&n, p, 4); return n;
    case GML_F16: memcpy(&h, p, 2); return gml_fp16_to_fp32(h);
    case GML_BF16: memcpy(&h, p, 2); return gml_bf16_to_fp32(h);
    default: return NAN;
    }
}

static bool ev_init(ev *e, gml_graph *g) {
    memset(e, 0, sizeof *e);
    e->g = g;
    const int n = gml_graph_n_tensors(g);
    e->roots = calloc((size_t)n, sizeof *e->roots);
    for (int k = 0; k < n; k++) {
        const gml_tensor *t = gml_graph_tensor_at(g, k);
        if (t->view_src) continue;
        if (t->type == GML_Q8_0) {
            snprintf(e->err, sizeof e->err, "'%s' is q8_0: the evaluator has no q8_0", t->name);
            return false;
        }
        const size_t cells = gml_nbytes(t) / gml_type_size(t->type);
        e->roots[e->n_roots++] = (ev_root){t, calloc(cells ? cells : 1, sizeof(double))};
    }
    /* roots outside the graph (a view's storage that is no source of it) */
    for (int k = 0; k < n; k++) {
        const gml_tensor *t = gml_graph_tensor_at(g, k);
        if (!t->view_src || ev_buf(e, t)) continue;
        const gml_tensor *r = t->view_src;
        const size_t cells = gml_nbytes(r) / gml_type_size(r->type);
        e->roots[e->n_roots++] = (ev_root){r, calloc(cells ? cells : 1, sizeof(double))};
    }
    return true;
}

static void ev_free(ev *e) {
    for (int i = 0; i < e->n_roots; i++) free(e->roots[i].v);
    free(e->roots);
}

/* The op's arguments (its params) through the registry. */
static gml_arg arg(const gml_tensor *t, int k) {
    gml_arg a[GML_MAX_ARGS];
    gml_form_get_args(t, a);
    return a[k];
}

static double unary(gml_op op, double x) {
    switch (op) {
    case GML_OP_NEG: return -x;
    case GML_OP_EXP: return exp(x);
    case GML_OP_TANH: return tanh(x);
    case GML_OP_SIGMOID: return 1 / (1 + exp(-x));
    case GML_OP_SILU: return x / (1 + exp(-x));
    case GML_OP_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    default: /* GELU_TANH */
        return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    }
}

/* rms_norm and layer_norm over the last dim, from their definitions:
 * rms: x / sqrt(mean(x^2) + eps) * w; layer: (x - mean) / sqrt(var + eps) * w
 * + b, the biased variance. */
static bool ev_norm(ev *e, const gml_tensor *t) {
    const bool layer = t->op == GML_OP_LAYER_NORM;
    const gml_tensor *a = t->src[0], *w = arg(t, 1).t, *b = layer ? arg(t, 2).t : NULL;
    const double eps = arg(t, layer ? 3 : 2).f;
    const ev_view vt = ev_view_of(e, t), va = ev_view_of(e, a), vw = ev_view_of(e, w),
                  vb = ev_view_of(e, b);
    const int64_t d = a->ne[3];
    for (int64_t r = 0; r < numel(a) / d; r++) {
        int64_t i[GML_MAX_DIMS];
        unflat(a, r * d, i);
        double mean = 0, ss = 0;
        if (layer) {
            for (int64_t k = 0; k < d; k++) mean += *vat4(&va, i[0], i[1], i[2], k);
            mean /= (double)d;
        }
        for (int64_t k = 0; k < d; k++) {
            const double x = *vat4(&va, i[0], i[1], i[2], k) - mean;
            ss += x * x;
        }
        const double inv = 1 / sqrt(ss / (double)d + eps);
        for (int64_t k = 0; k < d; k++) {
            double y = (*vat4(&va, i[0], i[1], i[2], k) - mean) * inv;
            if (w) y *= *vat4(&vw, 0, 0, 0, k);
            if (b) y += *vat4(&vb, 0, 0, 0, k);
            *vat4(&vt, i[0], i[1], i[2], k) = y;
        }
    }
    return true;
}

/* rope from its definition (ggmlite.h, gml_rope): pair (j, j + r/2), or
 * (2j, 2j + 1) interleaved, of a row at position p rotated by the angle
 * (p / pos_scale) theta^(-2j / r); dims r.. pass through. */
static bool ev_rope(ev *e, const gml_tensor *t) {
    const gml_tensor *a = t->src[0], *pos = arg(t, 1).t;
    const int seq_axis = GML_MAX_DIMS + (int)arg(t, 2).i; /* seq_dim -2 or -3 */
    const int64_t d = a->ne[3], r = arg(t, 3).i ? arg(t, 3).i : d;
    const double theta = arg(t, 4).f, pos_scale = arg(t, 5).f;
    const bool inter = arg(t, 6).i != 0;
    const ev_view vt = ev_view_of(e, t), va = ev_view_of(e, a), vp = ev_view_of(e, pos);
    if (seq_axis < 1 || seq_axis > 2) {
        snprintf(e->err, sizeof e->err, "rope '%s': seq_dim %d", t->name, (int)arg(t, 2).i);
        return false;
    }
    for (int64_t f = 0; f < numel(t); f++) {
        int64_t i[GML_MAX_DIMS];
        unflat(t, f, i);
        const int64_t k = i[3];
        if (k >= r) {
            *vat(&vt, i) = *vat(&va, i);
            continue;
        }
        const int64_t tpos = i[seq_axis];
        const double p = pos->n_dims == 1 ? *vat4(&vp, 0, 0, 0, tpos) : *vat4(&vp, 0, 0, i[0], tpos);
        const int64_t j = inter ? k / 2 : k % (r / 2);                 /* the pair */
        const bool second = inter ? k % 2 == 1 : k >= r / 2;
        const int64_t k0 = inter ? 2 * j : j, k1 = inter ? 2 * j + 1 : j + r / 2;
        const double ang = p / pos_scale * pow(theta, -2.0 * (double)j / (double)r);
        int64_t i0[GML_MAX_DIMS], i1[GML_MAX_DIMS];
        memcpy(i0, i, sizeof i0);
        memcpy(i1, i, sizeof i1);
        i0[3] = k0, i1[3] = k1;
        const double x0 = *vat(&va, i0), x1 = *vat(&va, i1);
        *vat(&vt, i) = second ? x1 * cos(ang) + x0 * sin(ang) : x0 * cos(ang) - x1 * sin(ang);
    }
    return true;
}

/* flash_attn from its definition: softmax over the keys query i sees of
 * q k^T * scale (softcapped), times v; query head h reads kv head h / (H/G);
 * causal bottom-right (query i at i + Tk - Tq) or top-left (at i); a row
 * that sees no key is zeros. Masks, valid lengths, positions, sinks,
 * windows and ALiBi are not written here: refused by name. */
static bool ev_flash_attn(ev *e, const gml_tensor *t) {
    const gml_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2];
    static const char *const opt[] = {"mask", "valid_lens", "positions", "sinks"};
    const int opt_arg[] = {3, 4, 7, 8};
    for (int o = 0; o < 4; o++)
        if (arg(t, opt_arg[o]).t) {
            snprintf(e->err, sizeof e->err, "the evaluator has no flash_attn %s (node '%s')",
                     opt[o], t->name);
            return false;
        }
    if (arg(t, 9).i || arg(t, 11).f != 0) {
        snprintf(e->err, sizeof e->err, "the evaluator has no flash_attn window or alibi (node '%s')",
                 t->name);
        return false;
    }
    const double scale = arg(t, 5).f, cap = arg(t, 10).f;
    const int64_t causal = arg(t, 6).i; /* 0 none, 1 bottom-right, 2 top-left */
    const ev_view vt = ev_view_of(e, t), vq = ev_view_of(e, q), vk = ev_view_of(e, k),
                  vv = ev_view_of(e, v);
    const int64_t B = q->ne[0], H = q->ne[1], Tq = q->ne[2], dk = q->ne[3];
    const int64_t G = k->ne[1], Tk = k->ne[2], dv = v->ne[3];
    double *s = malloc((size_t)Tk * sizeof *s);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Tq; i++) {
                const int64_t g = h / (H / G), last = causal == 1 ? i + Tk - Tq : causal == 2 ? i : Tk - 1;
                double m = -INFINITY, z = 0;
                for (int64_t j = 0; j < Tk && j <= last; j++) {
                    double x = 0;
                    for (int64_t c = 0; c < dk; c++)
                        x += *vat4(&vq, b, h, i, c) * *vat4(&vk, b % k->ne[0], g, j, c);
                    x *= scale;
                    if (cap > 0) x = cap * tanh(x / cap);
                    s[j] = x;
                    m = fmax(m, x);
                }
                for (int64_t j = 0; j < Tk && j <= last; j++) z += exp(s[j] - m);
                for (int64_t c = 0; c < dv; c++) {
                    double o = 0;
                    for (int64_t j = 0; j < Tk && j <= last; j++)
                        o += exp(s[j] - m) / z * *vat4(&vv, b % v->ne[0], g, j, c);
                    *vat4(&vt, b, h, i, c) = o;
                }
            }
    free(s);
    return true;
}

/* Computes node t from its sources' cells into its own. */
static bool ev_node(ev *e, const gml_tensor *t) {
    const gml_tensor *a = t->src[0], *b = t->src[1];
    const int64_t n = numel(t);
    int64_t i[GML_MAX_DIMS], j[GML_MAX_DIMS];
    const ev_view vt = ev_view_of(e, t), va = ev_view_of(e, a), vb = ev_view_of(e, b);
    const ev_view vc = ev_view_of(e, t->src[2]);
    switch (t->op) {
    case GML_OP_VIEW:
    case GML_OP_RESHAPE:
    case GML_OP_PERMUTE:
    case GML_OP_TRANSPOSE:
    case GML_OP_SLICE:
    case GML_OP_AFTER:
        return true; /* the source's cells */
    case GML_OP_CONT:
    case GML_OP_CPY: /* cpy: t is a view of the destination */
        for (int64_t f = 0; f < n; f++) {
            unflat(t, f, i);
            *vat(&vt, i) = *vat(&va, i);
        }
        return true;
    case GML_OP_FULL:
        for (int64_t f = 0; f < n; f++) {
            unflat(t, f, i);
            *vat(&vt, i) = arg(t, 1).f;
        }
        return true;
    case GML_OP_ADD:
    case GML_OP_SUB:
    case GML_OP_MUL:
    case GML_OP_DIV:
        for (int64_t f = 0; f < n; f++) {
            unflat(t, f, i);
            for (int d = 0; d < GML_MAX_DIMS; d++) j[d] = i[d] % b->ne[d];
            int64_t k[GML_MAX_DIMS];
            for (int d = 0; d < GML_MAX_DIMS; d++) k[d] = i[d] % a->ne[d];
            const double x = *vat(&va, k), y = *vat(&vb, j);
            *vat(&vt, i) = t->op == GML_OP_ADD   ? x + y
                              : t->op == GML_OP_SUB ? x - y
                              : t->op == GML_OP_MUL ? x * y
                                                    : x / y;
        }
        return true;
    case GML_OP_SCALE:
        for (int64_t f = 0; f < n; f++) {
            unflat(t, f, i);
            *vat(&vt, i) = *vat(&va, i) * (double)arg(t, 1).f;
        }
        return true;
    case GML_OP_NEG:
    case GML_OP_EXP:
    case GML_OP_TANH:
    case GML_OP_SIGMOID:
    case GML_OP_SILU:
    case GML_OP_GELU:
    case GML_OP_GELU_TANH:
        for (int64_t f = 0; f < n; f++) {
            unflat(t, f, i);
            *vat(&vt, i) = unary(t->op, *vat(&va, i));
        }
        return true;
    case GML_OP_SUM:
    case GML_OP_MEAN:
    case GML_OP_MAX:
        for (int64_t f = 0; f < n; f++) {
            unflat(t, f, i);
            double s = t->op == GML_OP_MAX ? -INFINITY : 0;
            for (int64_t k = 0; k < a->ne[3]; k++) {
                const double x = *vat4(&va, i[0], i[1], i[2], k);
                s = t->op == GML_OP_MAX ? fmax(s, x) : s + x;
            }
            *vat(&vt, i) = t->op == GML_OP_MEAN ? s / (double)a->ne[3] : s;
        }
        return true;
    case GML_OP_SUM_TO:
        for (int64_t f = 0; f < n; f++) {
            unflat(t, f, i);
            *vat(&vt, i) = 0;
        }
        for (int64_t f = 0; f < numel(a); f++) {
            unflat(a, f, i);
            for (int d = 0; d < GML_MAX_DIMS; d++) j[d] = i[d] % t->ne[d];
            *vat(&vt, j) += *vat(&va, i);
        }
        return true;
    case GML_OP_MATMUL: {
        const int64_t K = a->ne[3];
        for (int64_t f = 0; f < n; f++) {
            unflat(t, f, i);
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += *vat4(&va, i[0] % a->ne[0], i[1] % a->ne[1], i[2], k) *
                     *vat4(&vb, i[0] % b->ne[0], i[1] % b->ne[1], k, i[3]);
            *vat(&vt, i) = s;
        }
        return true;
    }
    case GML_OP_CONCAT: {
        const int axis = GML_MAX_DIMS - t->n_dims + (int)arg(t, 2).i;
        for (int64_t f = 0; f < n; f++) {
            unflat(t, f, i);
            memcpy(j, i, sizeof j);
            const ev_view *from = &va;
            if (j[axis] >= a->ne[axis]) {
                j[axis] -= a->ne[axis];
                from = &vb;
            }
            *vat(&vt, i) = *vat(from, j);
        }
        return true;
    }
    case GML_OP_REPEAT_INTERLEAVE: {
        const int reps = (int)arg(t, 1).i, axis = GML_MAX_DIMS - t->n_dims + (int)arg(t, 2).i;
        for (int64_t f = 0; f < n; f++) {
            unflat(t, f, i);
            memcpy(j, i, sizeof j);
            j[axis] /= reps;
            *vat(&vt, i) = *vat(&va, j);
        }
        return true;
    }
    case GML_OP_GET_ROWS: /* a [N, d], b i32: out [.., d] = a[b[..]] */
        for (int64_t f = 0; f < n; f++) {
            unflat(t, f, i);
            const int64_t row = (int64_t)*vat4(&vb, 0, i[0], i[1], i[2]);
            *vat(&vt, i) = *vat4(&va, 0, 0, row, i[3]);
        }
        return true;
    case GML_OP_SET_ROWS: { /* t: a view of dst (a) with src b's rows at idx src[2] */
        const gml_tensor *src = b, *idx = t->src[2];
        const int first = GML_MAX_DIMS - t->n_dims;
        for (int64_t f = 0; f < numel(src); f++) {
            unflat(src, f, i);
            const int64_t s = first == 0 ? i[0] : first == 1 ? i[1] : 0;
            const int64_t row = (int64_t)(idx->n_dims == 1 ? *vat4(&vc, 0, 0, 0, i[2])
                                                           : *vat4(&vc, 0, 0, s, i[2]));
            *vat4(&vt, i[0], i[1], row, i[3]) = *vat(&vb, i);
        }
        return true;
    }
    case GML_OP_ARANGE:
        for (int64_t f = 0; f < n; f++) *vat4(&vt, 0, 0, 0, f) = (double)(arg(t, 1).i + f);
        return true;
    case GML_OP_RELPOS_INDEX: { /* [tq, tk]: clip(j - i, -P, P) + P */
        const double P = (double)arg(t, 2).i;
        for (int64_t f = 0; f < n; f++) {
            unflat(t, f, i);
            *vat(&vt, i) = fmin(fmax((double)(i[3] - i[2]), -P), P) + P;
        }
        return true;
    }
    case GML_OP_CROSS_ENTROPY: { /* [1]: mean over rows of log(sum exp(row)) - row[target] */
        const int64_t V = a->ne[3], rows = a->ne[0] * a->ne[1] * a->ne[2];
        double s = 0;
        for (int64_t r = 0; r < rows; r++) {
            const int64_t i0 = r / (a->ne[1] * a->ne[2]), i1 = r / a->ne[2] % a->ne[1],
                          i2 = r % a->ne[2];
            double z = 0;
            for (int64_t k = 0; k < V; k++) z += exp(*vat4(&va, i0, i1, i2, k));
            const int64_t tgt = (int64_t)*vat4(&vb, 0, i0, i1, i2);
            s += log(z) - *vat4(&va, i0, i1, i2, tgt);
        }
        *vat4(&vt, 0, 0, 0, 0) = s / (double)rows;
        return true;
    }
    case GML_OP_MSE_LOSS: { /* [1]: mean((a - b)^2) */
        double s = 0;
        for (int64_t f = 0; f < numel(a); f++) {
            unflat(a, f, i);
            const double d = *vat(&va, i) - *vat(&vb, i);
            s += d * d;
        }
        *vat4(&vt, 0, 0, 0, 0) = s / (double)numel(a);
        return true;
    }
    case GML_OP_RMS_NORM:   /* x [..., d], w [d] or none, eps */
    case GML_OP_LAYER_NORM: /* x [..., d], w, b [d] or none, eps */
        return ev_norm(e, t);
    case GML_OP_ROPE: /* x [B, H, T, d] or [B, T, H, d], pos [T] or [B, T] */
        return ev_rope(e, t);
    case GML_OP_FLASH_ATTN: /* q [B, H, Tq, dk], k [B, G, Tk, dk], v [B, G, Tk, dv] */
        return ev_flash_attn(e, t);
    default:
        snprintf(e->err, sizeof e->err, "the evaluator has no op '%s' (node '%s')",
                 gml_op_name(t->op), t->name);
        return false;
    }
}

/* L = sum(out * dy) in double, after adding delta to cell (root, cell) of
 * the leafs' values. */
static bool ev_loss(ev *e, const gml_tensor *out, const float *dy, const gml_tensor *pert_root,
                    size_t pert_cell, double delta, double *loss) {
    for (int r = 0; r < e->n_roots; r++) {
        const gml_tensor *t = e->roots[r].t;
        const size_t cells = gml_nbytes(t) / gml_type_size(t->type);
        for (size_t k = 0; k < cells; k++)
            e->roots[r].v[k] = t->op == GML_OP_NONE && t->data ? leaf_value(t, k) : 0;
        if (t == pert_root) e->roots[r].v[pert_cell] += delta;
    }
    for (int k = 0; k < gml_graph_n_nodes(e->g); k++)
        if (!ev_node(e, gml_graph_node(e->g, k))) return false;
    double s = 0;
    int64_t i[GML_MAX_DIMS];
    for (int64_t f = 0; f < numel(out); f++) {
        unflat(out, f, i);
        s += *ev_at(e, out, i) * (double)dy[f];
    }
    *loss = s;
    return true;
}

/* ---- the check ---------------------------------------------------------------- */

int grad_check(const char *name, gml_context *ctx, gml_tensor *out, gml_tensor *const *wrt,
               int n_wrt, const grad_check_opts *opts) {
    grad_check_opts o = opts ? *opts : (grad_check_opts){0};
    if (o.h == 0) o.h = 1e-4;
    if (o.rtol == 0) o.rtol = 1e-4;
    if (o.atol == 0) o.atol = 1e-6;
    if (o.seed == 0) o.seed = 1;
    int fails = 0;
#define FAIL(...)                                                                          \
    do {                                                                                   \
        fprintf(stderr, "FAIL grad_check %s: ", name);                                     \
        fprintf(stderr, __VA_ARGS__);                                                      \
        fputc('\n', stderr);                                                               \
        fails++;                                                                           \
    } while (0)

    /* dy: fixed random values of out's shape */
    chk_rng rng = chk_seed(o.seed);
    gml_tensor *dy = gml_set_name(gml_new_tensor(ctx, GML_F32, out->n_dims,
                                                 out->ne + GML_MAX_DIMS - out->n_dims), "dy");
    if (!dy) {
        FAIL("dy: %s", gml_last_error(ctx));
        return fails;
    }
    chk_fill_uniform(dy, &rng, -1.0f, 1.0f);
    gml_tensor *grads[GRAD_CHECK_MAX_WRT];
    if (n_wrt > GRAD_CHECK_MAX_WRT) {
        FAIL("at most %d wrt", GRAD_CHECK_MAX_WRT);
        return fails;
    }
    if (gml_grad(ctx, out, dy, wrt, n_wrt, grads) != GML_OK) {
        FAIL("gml_grad: %s", gml_last_error(ctx));
        return fails;
    }
    gml_graph *g = gml_build_graph(ctx, grads, n_wrt);
    gml_graph *fwd = gml_build_graph(ctx, &out, 1);
    if (!g || !fwd) {
        FAIL("build_graph: %s", gml_last_error(ctx));
        gml_graph_free(g);
        gml_graph_free(fwd);
        return fails;
    }

    /* the numeric gradients */
    ev e;
    double **fd = calloc((size_t)n_wrt, sizeof *fd);
    double *scale = calloc((size_t)n_wrt, sizeof *scale);
    int64_t total = 0;
    if (!ev_init(&e, fwd)) FAIL("%s", e.err);
    for (int w = 0; w < n_wrt && !fails; w++) {
        const gml_tensor *x = wrt[w], *r = root_of(x);
        if (r->op != GML_OP_NONE) {
            FAIL("wrt '%s' is no leaf nor a view of one", x->name);
            break;
        }
        const int64_t nx = numel(x);
        const int64_t step = o.samples > 0 && nx > o.samples ? (nx + o.samples - 1) / o.samples : 1;
        fd[w] = malloc((size_t)nx * sizeof(double));
        int64_t i[GML_MAX_DIMS];
        for (int64_t f = 0; f < nx; f++) fd[w][f] = NAN; /* NaN: not sampled */
        for (int64_t f = (step > 1 ? (int64_t)(o.seed % (uint64_t)step) : 0); f < nx && !fails;
             f += step) {
            total++;
            unflat(x, f, i);
            const size_t cell = (x->view_offs + (size_t)i[0] * x->nb[0] + (size_t)i[1] * x->nb[1] +
                                 (size_t)i[2] * x->nb[2] + (size_t)i[3] * x->nb[3]) /
                                gml_type_size(x->type);
            double lp, lm;
            if (!ev_loss(&e, out, dy->data, r, cell, o.h, &lp) ||
                !ev_loss(&e, out, dy->data, r, cell, -o.h, &lm)) {
                FAIL("%s", e.err);
                break;
            }
            fd[w][f] = (lp - lm) / (2 * o.h);
            if (isnan(fd[w][f])) FAIL("d/d%s: the differences are NaN", x->name);
            scale[w] = fmax(scale[w], fabs(fd[w][f]));
        }
    }

    /* the analytic ones, every ISA and thread count */
    static const gml_isa isas[] = {GML_TEST_ISAS};
    int n_threads; /* 1-4 and 7; 1, 3, 7 in the quick mode (check.h) */
    const int *threads = chk_threads(&n_threads);
    const gml_isa saved = gml_get_isa();
    double worst = 0;
    int n_isas = 0;
    for (size_t s = 0; s < sizeof isas / sizeof *isas && !fails; s++) {
        if (!gml_cpu_has(isas[s])) continue;
        gml_set_isa(isas[s]);
        n_isas++;
        float **first = calloc((size_t)n_wrt, sizeof *first);
        for (int tc = 0; tc < n_threads && !fails; tc++) {
            for (int k = 0; k < gml_graph_n_nodes(g); k++) { /* unwritten elements show */
                gml_tensor *t = gml_graph_node(g, k);
                if (!gml_is_view(t) && t->data) chk_poison_bytes(t->data, gml_nbytes(t));
            }
            if (gml_graph_compute(g, threads[tc]) != GML_OK) {
                FAIL("compute (%s, %d threads): %s", gml_isa_name(isas[s]), threads[tc],
                     gml_graph_error(g));
                break;
            }
            for (int w = 0; w < n_wrt; w++) {
                const int64_t nx = numel(grads[w]);
                float *got = chk_dense(grads[w]);
                if (!first[w]) {
                    first[w] = got;
                    for (int64_t f = 0; f < nx; f++) {
                        if (isnan(fd[w][f])) continue;
                        const double tol = o.rtol * (fabs(fd[w][f]) + scale[w]) + o.atol;
                        const double err = fabs((double)got[f] - fd[w][f]);
                        const double rel = err / (fabs(fd[w][f]) + scale[w] + 1e-300);
                        if (!(err <= tol)) {
                            char idx[64];
                            FAIL("d/d%s %s at %s (%s): analytic %.9g, finite differences %.9g "
                                 "(|diff| %.3g > tol %.3g)", wrt[w]->name,
                                 chk_shape(wrt[w], (char[64]){0}, 64),
                                 chk_fmt_index(grads[w], f, idx, sizeof idx),
                                 gml_isa_name(isas[s]), (double)got[f], fd[w][f], err, tol);
                            break;
                        }
                        worst = fmax(worst, rel);
                    }
                } else {
                    if (memcmp(got, first[w], (size_t)nx * sizeof *got) != 0)
                        FAIL("d/d%s (%s): %d threads give other bits than 1", wrt[w]->name,
                             gml_isa_name(isas[s]), threads[tc]);
                    free(got);
                }
            }
        }
        for (int w = 0; w < n_wrt; w++) free(first[w]);
        free(first);
    }
    gml_set_isa(saved);
    if (!fails)
        printf("grad_check %-40s %6lld elements, %d ISAs x %d thread counts: max |g - fd| / (|fd| "
               "+ max|fd|) %.2e\n", name, (long long)total, n_isas, n_threads, worst);
    grad_check_max_rel = fmax(grad_check_max_rel, worst);
    for (int w = 0; w < n_wrt; w++) free(fd[w]);
    free(fd);
    free(scale);
    ev_free(&e);
    gml_graph_free(g);
    gml_graph_free(fwd);
    return fails;
#undef FAIL
}
