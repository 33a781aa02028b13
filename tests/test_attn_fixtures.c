/* The attention blocks against PyTorch: every case folder under the fixtures
 * directory (argv[1]: tests/fixtures, written by tests/fixtures/gen_fixtures.py) holds
 * weights.safetensors, inputs (x.npy or q/k/v.npy), the expected out.npy
 * [B, Tq, D] and attn.npy [B, H, Tq, Tk], and `args`, the run-graph command
 * line that reproduces it (block, heads, kv heads, masks, max_rel), which
 * this test parses. Files are read with the library's own loaders. Each case
 * runs under the reference and auto ISAs at 1, 2 and 3 threads (GQA cases in
 * both graph forms, MHA and GQA also through the fused gml_flash_attn graph)
 * and must match within 2e-4 + 2e-4 |want|; the fused output must also match
 * the unfused one within 1e-5 relative; the naive reference of attn_ref.c is
 * checked against the same numbers. */
#define _POSIX_C_SOURCE 200809L /* strtok_r, strdup, opendir */

#include <ggmlite/io.h>
#include <ggmlite/attention.h>
#include "attn_check.h"
#include "attn_ref.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TOL_ABS 2e-4
#define TOL_REL 2e-4

/* The cases tests/fixtures/gen_fixtures.py writes; each must be there (a
 * missing one fails). Between them: no mask, causal, valid lengths per batch
 * [B] and per query [B, Tq] (with 0, rows that see no key), causal with
 * lengths, cross-attention (Tq != Tk) with lengths, Tk past the fused
 * kernel's 32-key block, MHA, GQA (G = 1, G < H: both graph forms), relative
 * positions (with G < H too), biases and nn.MultiheadAttention's names,
 * rope (Hugging Face's rotate_half; MHA, and GQA with lengths). */
static const char *const REQUIRED[] = {
    "mha_seed",
    "mha_d2l_cross_validlens",
    "mha_bias_causal",
    "mha_torch_native",
    "gqa_seed_small",
    "mqa",
    "relpos_key",
    "relpos_key_value",
    "mha_validlens",
    "mha_causal_validlens",
    "mha_validlens_per_query",
    "mha_cross_causal_validlens",
    "mha_cross_validlens_per_query",
    "mha_long_causal",
    "gqa_causal_validlens",
    "gqa_cross_validlens_per_query",
    "gqa_long_causal_validlens",
    "relpos_gqa_causal",
    "mha_rope_causal",
    "gqa_rope_causal_validlens",
};

typedef struct {
    char block[16];
    int heads, kv_heads, max_rel;
    bool causal, rope;
    float rope_theta;
    char weights[256], input[256], query[256], key[256], value[256];
    int32_t lens[64];
    int n_lens;
} fixture_args;

/* Parses the one-line `args` file; false with a message on anything unknown. */
static bool parse_args(const char *path, fixture_args *a) {
    *a = (fixture_args){.max_rel = -1, .rope_theta = 10000.0f};
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        return false;
    }
    char line[2048];
    bool ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (!ok) {
        fprintf(stderr, "%s: empty\n", path);
        return false;
    }
    char *save = NULL, *tok = strtok_r(line, " \t\r\n", &save);
    if (!tok || strlen(tok) >= sizeof a->block) {
        fprintf(stderr, "%s: no block name first\n", path);
        return false;
    }
    strcpy(a->block, tok);
    while ((tok = strtok_r(NULL, " \t\r\n", &save))) {
        if (strcmp(tok, "--causal") == 0 || strcmp(tok, "--rope") == 0) {
            *(tok[2] == 'c' ? &a->causal : &a->rope) = true;
            continue;
        }
        char *val = strtok_r(NULL, " \t\r\n", &save);
        if (!val) {
            fprintf(stderr, "%s: %s has no value\n", path, tok);
            return false;
        }
        char *file = strcmp(tok, "--weights") == 0 ? a->weights
                     : strcmp(tok, "--input") == 0 ? a->input
                     : strcmp(tok, "--query") == 0 ? a->query
                     : strcmp(tok, "--key") == 0   ? a->key
                     : strcmp(tok, "--value") == 0 ? a->value
                                                   : NULL;
        if (file) {
            snprintf(file, 256, "%s", val);
        } else if (strcmp(tok, "--heads") == 0) {
            a->heads = atoi(val);
        } else if (strcmp(tok, "--kv-heads") == 0) {
            a->kv_heads = atoi(val);
        } else if (strcmp(tok, "--max-rel") == 0) {
            a->max_rel = atoi(val);
        } else if (strcmp(tok, "--rope-theta") == 0) {
            a->rope_theta = strtof(val, NULL);
        } else if (strcmp(tok, "--valid-lens") == 0) {
            for (char *s2 = NULL, *n = strtok_r(val, ",", &s2); n; n = strtok_r(NULL, ",", &s2)) {
                if (a->n_lens == (int)(sizeof a->lens / sizeof *a->lens)) return false;
                a->lens[a->n_lens++] = (int32_t)atoi(n);
            }
        } else if (strcmp(tok, "--output") != 0 && strcmp(tok, "--attn-weights") != 0) {
            fprintf(stderr, "%s: unknown option %s\n", path, tok);
            return false;
        }
    }
    if (a->heads < 1 || !a->weights[0] || !(a->input[0] || (a->query[0] && a->key[0]))) {
        fprintf(stderr, "%s: needs --heads, --weights and --input or --query/--key\n", path);
        return false;
    }
    return true;
}

/* Loads dir/file as one tensor; the context goes into *owner. */
static gml_tensor *load_npy(const char *dir, const char *file, gml_context **owner) {
    char path[1400], err[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    *owner = gml_load_npy(path, NULL, err, sizeof err);
    if (!*owner) {
        fprintf(stderr, "  %s\n", err);
        return NULL;
    }
    return gml_get_first_tensor(*owner);
}

/* How far a result is from PyTorch's: the max |got - want|, and the max
 * share of the tolerance used, |got - want| / (TOL_ABS + TOL_REL |want|). */
typedef struct fix_err {
    double abs, tol_used;
} fix_err;

static void err_max(fix_err *acc, fix_err e) {
    acc->abs = fmax(acc->abs, e.abs);
    acc->tol_used = fmax(acc->tol_used, e.tol_used);
}

/* got against want (same shape); *bad counts the elements out of tolerance. */
static fix_err compare(const gml_tensor *got, const gml_tensor *want, size_t *bad) {
    size_t n = (size_t)gml_nelements(want);
    float *g = malloc(n * sizeof *g), *w = malloc(n * sizeof *w);
    attn_read(got, g);
    attn_read(want, w);
    fix_err e = {.abs = attn_max_err(g, w, n, TOL_ABS, TOL_REL, bad)};
    for (size_t i = 0; i < n; i++)
        e.tol_used = fmax(e.tol_used, fabs((double)g[i] - w[i]) / (TOL_ABS + TOL_REL * fabs(w[i])));
    free(g);
    free(w);
    return e;
}

static bool same_shape(const char *what, const gml_tensor *got, const gml_tensor *want) {
    if (gml_same_shape(got, want)) return true;
    char sg[64], sw[64];
    fprintf(stderr, "  %s is %s, expected %s\n", what, gml_format_shape(got, sg, sizeof sg),
            gml_format_shape(want, sw, sizeof sw));
    return false;
}

/* The naive reference on the loaded tensors (all contiguous). */
static void reference(const fixture_args *a, const gml_attn_weights *w, const gml_tensor *xq,
                      const gml_tensor *xk, const gml_tensor *xv, float *out, float *attn) {
    const int D = (int)xq->ne[3], H = a->heads, G = a->kv_heads ? a->kv_heads : a->heads;
    const int kvd = G * (D / H);
    gml_ref_attn r = {
        .B = (int)xq->ne[1],
        .Tq = (int)xq->ne[2],
        .Tk = (int)xk->ne[2],
        .D = D,
        .H = H,
        .G = G,
        .causal = a->causal,
        .lens = a->n_lens ? a->lens : NULL,
        .lens_per_query = a->n_lens && a->n_lens != (int)xq->ne[1],
        .P = a->max_rel,
        .rope = a->rope,
        .theta = a->rope_theta,
        .pos_scale = 1.0,
        .xq = xq->data,
        .xk = xk->data,
        .xv = xv->data,
        .wo = w->w_o->data,
        .bo = w->b_o ? w->b_o->data : NULL,
    };
    if (strcmp(a->block, "relpos") == 0) {
        r.rel_k = w->rel_k->data;
        r.rel_v = w->rel_v ? w->rel_v->data : NULL;
    }
    if (w->in_proj_weight) {
        const float *pw = w->in_proj_weight->data;
        const float *pb = w->in_proj_bias ? w->in_proj_bias->data : NULL;
        r.wq = pw, r.wk = pw + (size_t)D * D, r.wv = pw + (size_t)(D + kvd) * D;
        if (pb) r.bq = pb, r.bk = pb + D, r.bv = pb + D + kvd;
    } else {
        r.wq = w->w_q->data, r.wk = w->w_k->data, r.wv = w->w_v->data;
        r.bq = w->b_q ? w->b_q->data : NULL;
        r.bk = w->b_k ? w->b_k->data : NULL;
        r.bv = w->b_v ? w->b_v->data : NULL;
    }
    gml_ref_attention(&r, out, attn);
}

/* Runs one case folder; prints its max errors; returns the failure count. */
/* gml_relpos_attn with the fixture's max_rel, as an attn_block_fn. */
static int g_max_rel;
static gml_attn_result relpos_block(gml_context *ctx, gml_attn_config cfg,
                                    const gml_attn_weights *w, gml_attn_inputs in) {
    return gml_relpos_attn(ctx, cfg, g_max_rel, w, in);
}

static int run_case(const char *root, const char *name) {
    char dir[1024], path[1400], err[1024];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    snprintf(path, sizeof path, "%s/args", dir);
    fixture_args a;
    if (!parse_args(path, &a)) return 1;

    attn_block_fn fn = strcmp(a.block, "mha") == 0      ? gml_mha
                       : strcmp(a.block, "gqa") == 0    ? gml_gqa
                       : strcmp(a.block, "relpos") == 0 ? relpos_block
                                                        : NULL;
    if (!fn) {
        fprintf(stderr, "%s: unknown block '%s'\n", path, a.block);
        return 1;
    }
    int fails = 0;
    gml_context *owners[6] = {0};
    snprintf(path, sizeof path, "%s/%s", dir, a.weights);
    gml_context *wctx = gml_load_safetensors(path, err, sizeof err);
    gml_attn_weights w;
    if (!wctx) {
        fprintf(stderr, "  %s\n", err);
        return 1;
    }
    if (gml_attn_weights_find(wctx, &w, err, sizeof err) != GML_OK) {
        fprintf(stderr, "  %s: %s\n", path, err);
        gml_free(wctx);
        return 1;
    }
    gml_attn_inputs in = {0};
    gml_tensor *xq, *xk, *xv;
    if (a.input[0]) {
        xq = xk = xv = in.query = load_npy(dir, a.input, &owners[0]);
    } else {
        xq = in.query = load_npy(dir, a.query, &owners[0]);
        xk = in.key = load_npy(dir, a.key, &owners[1]);
        xv = in.value = a.value[0] ? load_npy(dir, a.value, &owners[2]) : in.key;
    }
    gml_tensor *out_want = load_npy(dir, "out.npy", &owners[3]);
    gml_tensor *attn_want = load_npy(dir, "attn.npy", &owners[4]);
    if (!xq || !xk || !xv || !out_want || !attn_want) {
        fails = 1;
        goto done;
    }
    if (a.n_lens) {
        owners[5] = gml_init((gml_init_params){.mem_size = 1 << 12});
        const int64_t B = xq->ne[1], Tq = xq->ne[2];
        in.valid_lens = a.n_lens == B ? gml_new_tensor_1d(owners[5], GML_I32, B)
                                      : gml_new_tensor_2d(owners[5], GML_I32, B, a.n_lens / B);
        if (a.n_lens != B && a.n_lens != B * Tq) {
            fprintf(stderr, "  %d valid lengths for B %lld, Tq %lld\n", a.n_lens, (long long)B,
                    (long long)Tq);
            fails = 1;
            goto done;
        }
        memcpy(in.valid_lens->data, a.lens, (size_t)a.n_lens * sizeof *a.lens);
    }

    fix_err err_out[3] = {{0}}, err_attn[3] = {{0}}; /* per form */
    double err_fused = 0;
    bool built = true; /* the block accepted the case: shapes are consistent */
    /* Graphs: the unfused one (for grouped kv heads in the broadcast and the
     * repeat form), then the fused one (mha, gqa), compared with PyTorch and
     * with the unfused out. */
    const bool has_fused = strcmp(a.block, "relpos") != 0;
    const bool grouped = strcmp(a.block, "mha") != 0 && a.kv_heads && a.kv_heads != a.heads;
    const int n_unfused = grouped ? 2 : 1; /* GQA: the broadcast and the repeat form */
    const int n_forms = n_unfused + has_fused;
    float *unfused_out = malloc((size_t)gml_nelements(out_want) * sizeof(float));
    for (int form = 0; form < n_forms && !fails; form++) {
        const bool fused = form == n_unfused;
        gml_attn_config cfg = {
            .dims = {.n_heads = a.heads, .n_kv_heads = a.kv_heads},
            .score = {.causal = a.causal ? GML_CAUSAL_BOTTOM_RIGHT : GML_CAUSAL_NONE},
            .pos = {.kind = a.rope ? GML_POS_ROPE : GML_POS_NONE, .rope.theta = a.rope_theta},
            .graph = {.gqa_form = form == 1 ? GML_GQA_REPEAT : GML_GQA_BROADCAST,
                      .impl = fused ? GML_ATTN_FUSED : GML_ATTN_UNFUSED,
                      .want_weights = !fused}};
        g_max_rel = a.max_rel < 0 ? 0 : a.max_rel;
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 64 << 20});
        gml_attn_result r = fn(ctx, cfg, &w, in);
        gml_graph *g = r.out ? gml_build_graph(ctx, (gml_tensor *[]){r.out, r.weights},
                                               fused ? 1 : 2)
                             : NULL;
        if (!g) {
            fprintf(stderr, "  %s: %s\n", name, gml_last_error(ctx));
            fails = 1;
            built = false;
        } else if (!same_shape("out", r.out, out_want) ||
                   (!fused && !same_shape("attn", r.weights, attn_want))) {
            fails = 1;
            built = false;
        }
        const gml_isa isas[] = {GML_ISA_REFERENCE, GML_ISA_AUTO};
        for (int ii = 0; ii < 2 && !fails; ii++)
            for (int nth = 1; nth <= 3 && !fails; nth++) {
                gml_set_isa(isas[ii]);
                if (gml_graph_compute(g, nth) != GML_OK) {
                    fprintf(stderr, "  %s: compute: %s\n", name, gml_graph_error(g));
                    fails = 1;
                    break;
                }
                size_t bad_out, bad_attn = 0;
                const fix_err eo = compare(r.out, out_want, &bad_out);
                const fix_err ea = fused ? (fix_err){0} : compare(r.weights, attn_want, &bad_attn);
                err_max(&err_out[form], eo);
                err_max(&err_attn[form], ea);
                if (bad_out || bad_attn) {
                    fprintf(stderr,
                            "  %s (%s%s, %d threads): %zu outputs, %zu weights out "
                            "of tolerance (max err %.3g, %.3g)\n",
                            name,
                            fused       ? "fused, "
                            : n_unfused == 1 ? ""
                            : form      ? "repeat form, "
                                        : "broadcast form, ",
                            gml_isa_name(isas[ii]), nth, bad_out, bad_attn, eo.abs, ea.abs);
                    fails = 1;
                }
                const size_t n_out = (size_t)gml_nelements(out_want);
                if (form == 0 && ii == 0 && nth == 1) attn_read(r.out, unfused_out);
                if (fused) { /* fused against unfused: 1e-5 relative */
                    float *got = malloc(n_out * sizeof *got);
                    attn_read(r.out, got);
                    size_t bad;
                    attn_max_err(got, unfused_out, n_out, ATTN_FUSED_ATOL, ATTN_FUSED_RTOL, &bad);
                    for (size_t e = 0; e < n_out; e++)
                        err_fused = fmax(err_fused, fabs((double)got[e] - unfused_out[e]) /
                                                        fmax(fabs((double)unfused_out[e]), 1e-1));
                    if (bad) {
                        fprintf(stderr, "  %s (fused, %s, %d threads): %zu outputs differ from the "
                                "unfused graph's by more than %.0e + %.0e |unfused|\n", name,
                                gml_isa_name(isas[ii]), nth, bad, ATTN_FUSED_ATOL, ATTN_FUSED_RTOL);
                        fails = 1;
                    }
                    free(got);
                }
            }
        gml_set_isa(GML_ISA_AUTO);
        gml_graph_free(g);
        gml_free(ctx);
    }

    /* The naive reference agrees with PyTorch too. */
    size_t no = (size_t)gml_nelements(out_want), na = (size_t)gml_nelements(attn_want);
    float *ro = malloc(no * 4), *ra = malloc(na * 4), *wo = malloc(no * 4), *wa = malloc(na * 4);
    double ref_out = 0, ref_attn = 0;
    if (built) {
        reference(&a, &w, xq, xk, xv, ro, ra);
        attn_read(out_want, wo);
        attn_read(attn_want, wa);
        size_t b1, b2;
        ref_out = attn_max_err(ro, wo, no, TOL_ABS, TOL_REL, &b1);
        ref_attn = attn_max_err(ra, wa, na, TOL_ABS, TOL_REL, &b2);
        if (b1 || b2) {
            fprintf(stderr, "  %s: the naive reference is off PyTorch by %.3g (out), %.3g (attn)\n",
                    name, ref_out, ref_attn);
            fails = 1;
        }
    }
    free(ro), free(ra), free(wo), free(wa);
    free(unfused_out);
    char shape[64], opts[64];
    snprintf(opts, sizeof opts, "H%d G%d%s%s%s%s", a.heads, a.kv_heads ? a.kv_heads : a.heads,
             a.causal ? " causal" : "", a.n_lens ? " lens" : "", a.max_rel >= 0 ? " rel" : "",
             a.rope ? " rope" : "");
    printf("%s %-24s %-6s %-16s out %-11s naive reference: max |err| out %.2e, attn %.2e\n",
           fails ? "FAIL" : "ok  ", name, a.block, opts,
           gml_format_shape(out_want, shape, sizeof shape), ref_out, ref_attn);
    for (int form = 0; form < n_forms && built; form++) {
        const bool fused = form == n_unfused;
        printf("       %-9s max |err| out %.2e (%5.2f%% of the tolerance)",
               fused ? "fused" : form ? "repeat" : n_unfused == 2 ? "broadcast" : "unfused",
               err_out[form].abs, 100 * err_out[form].tol_used);
        if (!fused)
            printf(", attn %.2e (%5.2f%%)", err_attn[form].abs, 100 * err_attn[form].tol_used);
        else
            printf(", vs the unfused graph %.2e rel", err_fused);
        printf("\n");
    }
done:
    for (int i = 0; i < 6; i++)
        gml_free(owners[i]);
    gml_free(wctx);
    return fails;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : getenv("GGMLITE_FIXTURES");
    if (!root) {
        fprintf(stderr, "usage: test_attn_fixtures FIXTURES_DIR (tests/fixtures)\n");
        return 1;
    }
    DIR *dir = opendir(root);
    if (!dir) {
        fprintf(stderr, "test_attn_fixtures: FAIL: cannot open the fixtures directory %s\n", root);
        return 1;
    }
    /* Every folder with an args file is a case. */
    char *names[256];
    int n = 0;
    for (struct dirent *e; (e = readdir(dir)) && n < 256;) {
        char path[1400];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s/args", root, e->d_name);
        if (e->d_name[0] != '.' && stat(path, &st) == 0) names[n++] = strdup(e->d_name);
    }
    closedir(dir);
    qsort(names, (size_t)n, sizeof *names, cmp_str);

    int fails = 0;
    for (size_t i = 0; i < sizeof REQUIRED / sizeof *REQUIRED; i++) {
        bool found = false;
        for (int j = 0; j < n; j++)
            found |= strcmp(names[j], REQUIRED[i]) == 0;
        if (!found) {
            fprintf(stderr, "FAIL: fixture %s/%s is missing\n", root, REQUIRED[i]);
            fails++;
        }
    }
    for (int i = 0; i < n; i++) {
        fails += run_case(root, names[i]);
        free(names[i]);
    }
    if (fails) {
        fprintf(stderr, "test_attn_fixtures: %d failures\n", fails);
        return 1;
    }
    printf("test_attn_fixtures: all %d cases within %.0e + %.0e |want|\n", n, TOL_ABS, TOL_REL);
    return 0;
}
