/* run-graph --grad-output DY.npy --grads OUT.safetensors: the forward, then
 * dL/d(every weight) and dL/d(every input) for L = sum(out * DY), built by
 * the library's gml_grad as nodes of the forward's context and computed in
 * the same graph (so in the same planned buffer, bitwise the same at every
 * thread count). Written as F32 safetensors: each weight under the name it
 * has in the weights file (its prefix included; random weights under the
 * block's own names), each input under its flag's name (input, or query,
 * key, value; a graph file's --bind NAME). f16 and bf16 weights get f32
 * gradients; q8_0 weights have none and are refused. The callers
 * (rg_model.c, rg_layers.c) say which tensors may get one. */
#define _POSIX_C_SOURCE 200809L
#include "rg.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void rg_grads_free(rg_grads *gr) {
    if (!gr) return;
    for (int i = 0; i < gr->n; i++) free(gr->name[i]);
    free(gr->wrt);
    free(gr->grad);
    free(gr->name);
    free(gr->seq_first);
    if (gr->dctx) gml_free(gr->dctx);
    *gr = (rg_grads){0};
}

bool rg_grads_load_dy(const rg_opts *o, const gml_tensor *out, rg_grads *gr, rg_err *e) {
    char err[1024], want[64], got[64];
    const char *from = NULL;
    gml_context *c = gml_load_npy_converted(o->grad_output, "grad_output", &from, err, sizeof err);
    if (!c) return rg_fail(e, RG_RUNTIME, "--grad-output %s", err);
    gr->dctx = c;
    gml_tensor *dy = gml_get_first_tensor(c);
    if (from)
        fprintf(stderr, "run-graph: note: %s: %s data converted to f32\n", o->grad_output, from);
    gml_tensor view; /* the output as it is written: [T, B, D] under --seq-first */
    const gml_tensor *shown = rg_output_view(o, out, &view);
    gml_format_shape(shown, want, sizeof want);
    gml_format_shape(dy, got, sizeof got);
    bool same = dy->type == GML_F32 && dy->n_dims == shown->n_dims;
    for (int k = 0; same && k < GML_MAX_DIMS; k++) same = dy->ne[k] == shown->ne[k];
    if (!same)
        return rg_fail(e, RG_RUNTIME, "--grad-output %s: DY is %s %s, but the output is f32 %s%s: DY is "
                       "dL/d(output), of the output's shape", o->grad_output, gml_type_name(dy->type), got,
                       want, shown != out ? " (--seq-first: [T, B, D])" : "");
    if (shown != out) { /* [T, B, D] read as [B, T, D]: a contiguous copy */
        const int64_t T = dy->ne[1], B = dy->ne[2], D = dy->ne[3];
        gml_context *t = gml_init((gml_init_params){.mem_size = gml_tensor_overhead() + gml_nbytes(dy) + 256});
        gml_tensor *u = t ? gml_new_tensor_3d(t, GML_F32, B, T, D) : NULL;
        if (!u) {
            gml_free(t);
            return rg_fail(e, RG_RUNTIME, "out of memory for --grad-output %s", o->grad_output);
        }
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < T; i++)
                memcpy((float *)u->data + (b * T + i) * D, (const float *)dy->data + (i * B + b) * D,
                       (size_t)D * sizeof(float));
        gml_free(c);
        gr->dctx = t;
        dy = u;
    }
    gr->dy = gml_set_name(dy, "grad_output");
    return true;
}

bool rg_grads_add(rg_grads *gr, gml_tensor *t, const char *name, bool is_input, bool seq_first, rg_err *e) {
    if (!t) return true;
    for (int i = 0; i < gr->n; i++)
        if (gr->wrt[i] == t || strcmp(gr->name[i], name) == 0) return true;
    if (gr->n == gr->cap) {
        const int cap = gr->cap ? 2 * gr->cap : 32;
        gml_tensor **w = realloc(gr->wrt, (size_t)cap * sizeof *w);
        if (w) gr->wrt = w;
        gml_tensor **g = realloc(gr->grad, (size_t)cap * sizeof *g);
        if (g) gr->grad = g;
        char **nm = realloc(gr->name, (size_t)cap * sizeof *nm);
        if (nm) gr->name = nm;
        bool *sf = realloc(gr->seq_first, (size_t)cap * sizeof *sf);
        if (sf) gr->seq_first = sf;
        if (!w || !g || !nm || !sf) return rg_fail(e, RG_RUNTIME, "out of memory");
        gr->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) return rg_fail(e, RG_RUNTIME, "out of memory");
    /* the inputs first: they keep their places when weights follow */
    int at = gr->n;
    if (is_input) {
        at = gr->n_inputs++;
        memmove(gr->wrt + at + 1, gr->wrt + at, (size_t)(gr->n - at) * sizeof *gr->wrt);
        memmove(gr->name + at + 1, gr->name + at, (size_t)(gr->n - at) * sizeof *gr->name);
        memmove(gr->seq_first + at + 1, gr->seq_first + at, (size_t)(gr->n - at) * sizeof *gr->seq_first);
    }
    gr->wrt[at] = t;
    gr->name[at] = copy;
    gr->seq_first[at] = seq_first;
    gr->n++;
    return true;
}

bool rg_grads_build(gml_context *ctx, gml_tensor *const *outs, int n_outs, rg_grads *gr, rg_err *e) {
    /* the tensors the forward reads: a weight the graph does not use
     * (--non-strict), an integer input, have no gradient to ask for */
    gml_graph *fwd = gml_build_graph(ctx, outs, n_outs);
    if (!fwd) return rg_fail(e, RG_RUNTIME, "%s", gml_last_error(ctx));
    for (int i = 0; i < gr->n; i++) {
        const gml_tensor *t = gr->wrt[i];
        char s[64];
        if (t->type == GML_Q8_0 && gml_graph_tensor_index(fwd, t) >= 0) {
            gml_graph_free(fwd);
            return rg_fail(e, RG_RUNTIME, "--grads: '%s' %s is q8_0, which has no gradient (its values are "
                           "quantized blocks); give the weights as f32, f16 or bf16 (--weights-dtype)",
                           gr->name[i], gml_format_shape(t, s, sizeof s));
        }
    }
    int kept = 0, inputs = 0;
    for (int i = 0; i < gr->n; i++) {
        gml_tensor *t = gr->wrt[i];
        const bool read = gml_graph_tensor_index(fwd, t) >= 0;
        if (!read || (t->type != GML_F32 && t->type != GML_F16 && t->type != GML_BF16)) {
            free(gr->name[i]);
            continue;
        }
        inputs += i < gr->n_inputs;
        gr->wrt[kept] = t, gr->name[kept] = gr->name[i], gr->seq_first[kept] = gr->seq_first[i];
        kept++;
    }
    gml_graph_free(fwd);
    gr->n = kept;
    gr->n_inputs = inputs;
    if (!kept) return rg_fail(e, RG_RUNTIME, "--grads: the output reads no float weight or input to differentiate");
    if (gml_grad(ctx, outs[0], gr->dy, gr->wrt, gr->n, gr->grad) != GML_OK)
        return rg_fail(e, RG_RUNTIME, "--grads: %s", gml_last_error(ctx));
    return true;
}

/* An f32 gradient that holds NaN or an infinity: an error naming it. */
static bool check_finite(const gml_tensor *g, const char *name, rg_err *e) {
    size_t n_bytes;
    float *v = rg_dense(g, &n_bytes);
    if (!v) return rg_fail(e, RG_RUNTIME, "out of memory");
    int64_t bad = 0, first = 0;
    for (size_t i = 0; i < n_bytes / sizeof *v; i++)
        if (!isfinite(v[i]) && !bad++) first = (int64_t)i;
    free(v);
    if (!bad) return true;
    char s[64];
    return rg_fail(e, RG_RUNTIME, "the gradient of '%s' %s holds %" PRId64 " non-finite value%s (the first at "
                   "element %" PRId64 "); the inputs, weights or DY may hold NaN or inf", name,
                   gml_format_shape(g, s, sizeof s), bad, bad == 1 ? "" : "s", first);
}

bool rg_grads_save(rg_stage *s, const char *path, const gml_graph *g, const rg_grads *gr, rg_err *e) {
    gml_tensor *heads = malloc((size_t)gr->n * sizeof *heads + 1);
    const gml_tensor **list = malloc((size_t)gr->n * sizeof *list + 1);
    bool ok = heads && list ? true : rg_fail(e, RG_RUNTIME, "out of memory");
    for (int i = 0; ok && i < gr->n; i++) {
        const gml_tensor *t = gml_graph_tensor(g, gr->grad[i]); /* planned: the graph's data */
        if (strlen(gr->name[i]) >= GML_MAX_NAME) {
            ok = rg_fail(e, RG_RUNTIME, "--grads %s: the name '%s' is %zu bytes; a tensor name holds at most "
                         "%d (a shorter --prefix?)", path, gr->name[i], strlen(gr->name[i]), GML_MAX_NAME - 1);
            break;
        }
        ok = check_finite(t, gr->name[i], e);
        gml_tensor view; /* an input read [T, B, D] is written so */
        heads[i] = *(gr->seq_first[i] ? rg_output_view(&(rg_opts){.seq_first = true}, t, &view) : t);
        snprintf(heads[i].name, sizeof heads[i].name, "%s", gr->name[i]);
        list[i] = &heads[i];
    }
    const char *tmp = ok ? rg_stage_add(s, path) : NULL;
    if (ok && !tmp) ok = rg_fail(e, RG_USAGE, "%s: given for two outputs", path);
    char err[1024];
    if (ok && gml_save_safetensors(tmp, list, gr->n, err, sizeof err) != GML_OK) {
        rg_stage_message(s, err, sizeof err);
        ok = rg_fail(e, RG_RUNTIME, "--grads %s", err);
    }
    free(heads);
    free(list);
    return ok;
}

void rg_grads_describe(const rg_grads *gr, const char *path, char *buf, size_t size) {
    const int w = gr->n - gr->n_inputs;
    snprintf(buf, size, "%d gradient%s (%d weight%s, %d input%s) of L = sum(out * DY) -> %s", gr->n,
             gr->n == 1 ? "" : "s", w, w == 1 ? "" : "s", gr->n_inputs, gr->n_inputs == 1 ? "" : "s", path);
}
