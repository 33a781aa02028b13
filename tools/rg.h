/* run-graph's pieces, shared by its files:
 *
 *   rg_args.c    the command line of every mode: one table of flags -> rg_opts, --help
 *   rg_data.c    input and weight files, shapes (from files, flags, defaults),
 *                deterministic random data
 *   rg_model.c   the graph: a built-in block or a graph file, bound to the data,
 *                its tensors placed by the memory planner
 *   rg_run.c     placing a graph (every mode), compute: timing, per-node profile
 *   rg_time.c    the clock, the median and the timed runs of every mode and of bench
 *                (rg_time.h)
 *   rg_decode.c  --decode: a prompt, then tokens one at a time through a KV cache
 *   rg_svg.c     the attention heatmap (--attn-svg)
 *   rg_out.c     output files, staged so that a failed run leaves none
 *   rg_layers.c  llama | gpt2 | bert: whole transformer layers
 *   rg_grad.c    --grad-output/--grads: the gradients of every weight and input
 *   rg_train.c   train gpt2 | llama: a language model trained (models' <ggmlite/train.h>)
 *   rg_mpi.c     --parallel: the dispatch, and heads (mha, gqa, llama split by heads; GGMLITE_MPI)
 *   rg_mpi_decode.c  --parallel context --decode: the KV cache sharded by position (GGMLITE_MPI)
 *   rg_mpi_ring.c --parallel context: the prompt split by rows, ring attention (rg_mpi.h)
 *   run-graph.c  main: the steps in order, the summary and --json
 *
 * run-graph uses only ggmlite's public headers (ggmlite.h, attention.h,
 * kv_cache.h, layers.h, train.h). */
#ifndef RUN_GRAPH_RG_H
#define RUN_GRAPH_RG_H

#include <ggmlite/attention.h>
#include <ggmlite/ggmlite.h>
#include <ggmlite/io.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#if defined(__GNUC__)
#define RG_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define RG_PRINTF(f, a)
#endif

/* ---- errors: one line, and the exit status it means ---------------------- */

enum { RG_OK = 0, RG_RUNTIME = 1, RG_USAGE = 2 };

typedef struct rg_err {
    int status;     /* RG_RUNTIME or RG_USAGE once failed */
    char msg[1536]; /* printed as "run-graph: <msg>" */
} rg_err;

/* Records the first failure (later ones are dropped) and returns false. */
bool rg_fail(rg_err *e, int status, const char *fmt, ...) RG_PRINTF(3, 4);

/* ---- sizes ----------------------------------------------------------------- */

/* The sizes run-graph knows, also the symbols a graph file sees. */
enum { RG_B, RG_T, RG_S, RG_D, RG_H, RG_G, RG_P, RG_M, RG_N, RG_K, RG_NSYM };
extern const char *const RG_SYM[RG_NSYM];  /* "B", "T", ... */
extern const char *const RG_FLAG[RG_NSYM]; /* "--batch", "--seq", ... */

typedef enum rg_kind { RG_MHA, RG_GQA, RG_RELPOS, RG_MATMUL, RG_GRAPH } rg_kind;

/* run-graph's entrances: the one parse (rg_parse_args) says which the
 * command line asks for, and main hands the options to it. */
typedef enum rg_mode {
    RG_MODE_SINGLE,         /* mha | gqa | relpos | matmul | a graph file, one process (run-graph.c) */
    RG_MODE_LAYER,          /* llama | gpt2 | bert: whole layers (rg_layers.c) */
    RG_MODE_HEADS,          /* --parallel heads (rg_mpi.c) */
    RG_MODE_CONTEXT,        /* --parallel context (rg_mpi_ring.c) */
    RG_MODE_CONTEXT_DECODE, /* --parallel context with --decode (rg_mpi_decode.c) */
    RG_MODE_TRAIN,          /* train gpt2 | llama: a language model trained (rg_train.c) */
} rg_mode;

typedef enum rg_layer { RG_LLAMA, RG_GPT2, RG_BERT } rg_layer;

#define RG_MAX_LAYERS 1024 /* --layers */

/* ---- the command line (rg_args.c) ------------------------------------------ */

#define RG_MAX_BINDS 16

typedef struct rg_opts {
    rg_mode mode;
    const char *model; /* as given: "mha", "llama" or a path */
    rg_kind kind;      /* the single process's model (--parallel: mha or gqa; llama by its name) */
    rg_layer layer;    /* RG_MODE_LAYER: which */
    int64_t dim[RG_NSYM]; /* sizes given by flags, 0 = not given */
    bool causal;
    int32_t *valid_lens; /* --valid-lens, malloc'd; n_valid_lens of them */
    int n_valid_lens;
    gml_attn_impl attn_impl; /* --attn: AUTO (fused unless the weights are asked for) */
    int64_t decode;          /* --decode N: tokens decoded after the prompt; 0: no decoding */
    int64_t max_len;         /* --max-len: the KV cache's positions; 0: prompt + N */
    gml_type cache_dtype;    /* --cache-dtype: the KV cache's K and V, GML_F32 (default), F16, BF16 */
    const char *weights, *input, *query, *key, *value;
    gml_type weights_dtype; /* --weights-dtype (has_weights_dtype): 2-D f32 weights made this */
    bool has_weights_dtype;
    gml_compute compute;        /* --compute: the matmuls' and flash_attn's precision (default f32) */
    const char *prefix;         /* --prefix: the module's tensors in --weights, NULL: detected */
    bool non_strict;            /* --non-strict: tensors under the prefix the block does not use are allowed */
    bool seq_first;             /* --seq-first: inputs and output [T, B, D] (batch_first=False) */
    const char *attn_mask, *key_padding_mask; /* --attn-mask, --key-padding-mask files */
    bool dim_given[RG_NSYM];    /* a size flag was given (--max-rel 0 is a size) */
    struct { const char *name, *path; } bind[RG_MAX_BINDS]; /* --bind NAME=FILE */
    int n_bind;
    uint64_t seed;
    /* outputs */
    const char *output, *attn_weights, *attn_svg, *dot, *save_graph, *save_inputs;
    const char *grad_output; /* --grad-output DY.npy (with --grads, below) */
    const char *tokens, *query_tokens; /* comma-separated labels for --attn-svg */
    int attn_batch;                    /* which batch element --attn-svg draws */
    /* running */
    int threads, repeat;
    const char *isa;
    bool profile, print_graph, json, nan_trap;
    bool done; /* --help, --list-ops or --version was handled: exit 0 */
    bool help; /* --help: the mode's help to print (rg_print_help) */
    /* attention scoring and position encoding (mha, gqa) */
    bool causal_top_left; /* --causal-top-left: causal, query i sees key j iff j <= i */
    int64_t window;       /* --window W; 0 none */
    float softcap;        /* --softcap C; 0 none */
    bool alibi, sinks, rope;
    bool add_zero_attn; /* --add-zero-attn */
    float rope_theta;     /* --rope-theta (default 10000; the layers and --parallel: 0, their default) */
    /* whole layers and --parallel */
    int layers;             /* --layers (default 1) */
    int64_t ffn;            /* --ffn: the MLP's width, 0: the default */
    float rms_eps;          /* --rms-eps, 0: the default */
    bool zigzag;            /* --zigzag (--parallel context) */
    int64_t cache_per_rank; /* --cache-per-rank (--parallel context --decode), 0: the default */
    /* train gpt2 | llama (o->layer: which) */
    const char *data;         /* --data TOKENS.npy [S, B, T+1] */
    bool sgd;                 /* --optimizer sgd (else adamw) */
    bool optimizer_given;     /* --optimizer was given (required) */
    float lr;                 /* --lr (required; lr_given) */
    bool lr_given;
    float betas[2], eps, weight_decay, momentum, clip_grad_norm; /* given when *_given */
    bool betas_given, eps_given, weight_decay_given, momentum_given;
    int64_t steps;            /* --steps, 0: every step of --data */
    const char *log, *save_weights, *grads; /* --log, --save-weights, --grads (train: the first
                                             * step's; the other modes: with --grad-output) */
} rg_opts;

/* The attention config the flags ask for (dims from d->dim, by the caller). */
gml_attn_config rg_attn_config(const rg_opts *o);
/* Those options for people (", window 4, rope theta 10000") or, flags true,
 * as the flags that give them (" --window 4 --rope --rope-theta 10000");
 * "" when none is set. */
const char *rg_attn_options(const rg_opts *o, bool flags, char *buf, size_t size);

/* Whether a model takes the size sym (has its flag): mha B T S D H; gqa
 * and relpos G too, relpos P; matmul M N K; graph files all. */
bool rg_size_applies(rg_kind kind, int sym);

/* Fills o from argv, for every mode: one pass over the arguments (each
 * flag with its value), then the mode's flags checked in argv order with
 * its messages. False with a usage error (status 2) in e; o->mode is set
 * once --parallel's value is known, so that the --parallel modes say the
 * error on rank 0 only. --help sets o->help and o->done; --list-ops and
 * --version print and set o->done. */
bool rg_parse_args(int argc, char **argv, rg_opts *o, rg_err *e);
void rg_opts_free(rg_opts *o);
/* The --help of a mode, made from the table: its flags, each with the
 * models (or layers) it applies to when not all of the page's. */
void rg_print_help(FILE *f, rg_mode mode);

/* ---- data (rg_data.c) ------------------------------------------------------- */

#define RG_MAX_CTX 24

typedef struct rg_data {
    gml_context *ctxs[RG_MAX_CTX]; /* everything loaded or made here, freed at the end */
    int n_ctxs;
    /* Weights: the --weights file, or random ones for a built-in block; NULL
     * for a graph file without --weights (its params are made random). */
    gml_context *wctx;
    bool random_weights;
    gml_safetensors *st;   /* --weights, mapped: wctx's data points into it */
    char prefix[256];      /* the prefix of the weights used ("" for none), given or detected */
    int *w_index;          /* [n_w]: the st index of each tensor under the prefix */
    gml_tensor **w_tensor; /* [n_w]: its header in wctx, or NULL (a name too long to use) */
    int n_w;
    /* The attention mask from --attn-mask and --key-padding-mask, f32 additive
     * [B or 1, H or 1, T, S] (bool True: -inf), or NULL. */
    gml_tensor *mask;
    bool any_file;         /* a weights, input, mask or --bind file was given */
    bool seq_first;        /* --seq-first: input files are [T, B, D] */
    /* Inputs: self-attention has x only; cross-attention query, key (NULL:
     * the query) and value (NULL: the key). matmul has a and b. */
    gml_tensor *x, *query, *key, *value, *valid_lens, *a, *b;
    gml_tensor *bound[RG_MAX_BINDS]; /* --bind, named by their NAME */
    bool random_inputs;
    /* Sizes, and where each came from ("x.npy [2,10,512]", "--heads 8",
     * "default"); known[i] false: not known (only for graph files). */
    int64_t dim[RG_NSYM];
    bool known[RG_NSYM];
    char src[RG_NSYM][160];
} rg_data;

/* Loads the files the options name, works out the sizes (flags that disagree
 * with files are errors naming both), and makes the random inputs and
 * weights the files do not give. */
bool rg_data_load(const rg_opts *o, rg_data *d, rg_err *e);
void rg_data_free(rg_data *d);
/* The weights under the prefix that the graph g (or, g NULL, the block's
 * weights w) does not use: an error listing them unless --non-strict, as
 * load_state_dict(strict=True). */
bool rg_check_unused_weights(const rg_opts *o, rg_data *d, const gml_graph *g,
                             const gml_attn_weights *w, rg_err *e);
/* The weights loader of every single-process mode and the layers: maps path
 * (a safetensors file, or a sharded checkpoint's index .json) into d->st.
 * A tensor an index's shard holds that its weight_map leaves out is an
 * error naming them (unexpected, as load_state_dict(strict=True) says);
 * non_strict: ignored, listed in a note on stderr. */
bool rg_weights_open(const char *path, bool non_strict, rg_data *d, rg_err *e);
/* Then d->wctx: a header for each tensor of d->st whose name starts with
 * d->prefix, named without it, its data in the mapping (d->w_index,
 * d->w_tensor, d->n_w); none under the prefix is an error naming path. */
bool rg_weights_under_prefix(const char *path, rg_data *d, rg_err *e);
/* rg_convert_weights on d->wctx, keeping d's lists of it up to date. */
bool rg_weights_convert(rg_data *d, bool has_dtype, gml_type dtype, rg_err *e);
/* Whether t is one of the tensors an attention block's weights w bind. */
bool rg_attn_weights_hold(const gml_attn_weights *w, const gml_tensor *t);
/* --sinks (`sinks`): the weight 'sinks' [H] is used only when asked for
 * (else it is dropped from w, and strict loading names it as unused); asked
 * for without it, an error naming `file` and the tensors wctx holds. Every
 * mode's loader calls it, the --parallel ones too. */
bool rg_attn_sinks_asked(bool sinks, gml_attn_weights *w, gml_context *wctx, const char *file,
                         rg_err *e);
/* A list of names for an error: rg_names_add appends the n-th (from 0) as
 * "'name'" while n < 5; rg_names_end adds " and N more" past 5. */
void rg_names_add(char *list, size_t size, int n, const char *name);
void rg_names_end(char *list, size_t size, int n);
/* How an output is written: t itself, or with --seq-first a 3-D [B, T, D]
 * as the view [T, B, D] (a copy of the header into *buf). */
const gml_tensor *rg_output_view(const rg_opts *o, const gml_tensor *t, gml_tensor *buf);

/* The weights' types as --weights-dtype asks (has_dtype: the flag was
 * given): 2-D f32 matrices converted to dtype, 1-D F16/BF16 tensors widened
 * to f32, in a new context replacing *wctx (the old one freed) when
 * anything changes. False, with a message, if q8_0 meets rows that are not
 * a multiple of 32 or memory runs out. */
bool rg_convert_weights(gml_context **wctx, bool has_dtype, gml_type dtype, rg_err *e);

/* False, with a message, if `bytes` of tensor data for `what` exceed the
 * machine's memory. */
bool rg_check_memory(uint64_t bytes, const char *what, rg_err *e);

/* Deterministic random values from (seed, t's name), so equal names get equal
 * data whichever way the graph was made: params uniform in +-1/sqrt(last
 * dim) (nn.Linear's init), inputs uniform in [-1, 1]. t contiguous f32. */
void rg_fill_random(gml_tensor *t, uint64_t seed, bool is_param);

/* The weight a graph-file param of this name binds to: the tensor of that
 * name, or its nn.MultiheadAttention equivalent (out_proj.*, or rows of
 * in_proj_weight / in_proj_bias made as views in ctx). NULL if none. */
gml_tensor *rg_find_weight(gml_context *wctx, gml_context *ctx, const char *name);
/* "; present: a [2,3], b [4]" listing wctx's tensors, into buf. */
void rg_list_weights(gml_context *wctx, char *buf, size_t size);

/* ---- the graph (rg_model.c) ---------------------------------------------------- */

typedef struct rg_model {
    gml_context *ctx; /* no_alloc: the planner places the data */
    gml_graph *g;
    /* After rg_model_build, the graph's copies (gml_graph_tensor) of the
     * result and attention weights: their data is where the graph puts them. */
    const gml_tensor *out;  /* the result */
    const gml_tensor *attn; /* attention weights [B, H, Tq, Tk], or NULL */
    gml_tensor *outs[2];
    int n_outs;
    struct rg_grads *grads; /* --grads: the gradients the graph computes besides, or NULL */
    /* The graph's weights: its leafs flagged GML_FLAG_PARAM while it was
     * built (the blocks' weights, a graph file's params). rg_model_build
     * takes the flag off them, so that the computes pack them once per graph
     * for the bf16 and int8 products (a param is never packed, compute.h);
     * the files run-graph writes tell weights from inputs by this list. */
    gml_tensor **weights;
    int n_weights;
} rg_model;

bool rg_model_build(const rg_opts *o, rg_data *d, rg_model *m, rg_err *e);
/* Whether t (a leaf of m->g, the header the graph was built from) is one of
 * m's weights. */
bool rg_model_is_weight(const rg_model *m, const gml_tensor *t);
/* Flags m's weights GML_FLAG_PARAM again (flagged true) or takes the flag
 * off (false): gml_save_graph writes the flagged leafs as params. Not while
 * m->g computes. */
void rg_model_flag_weights(rg_model *m, bool flagged);
/* Bytes of the data g's leafs hold themselves (not placed by a plan): inputs,
 * weights, caches; each rounded up to 64 bytes. */
size_t rg_leaf_bytes(const gml_graph *g);
/* Bytes of tensor data g holds once it has computed (--json's peak_bytes;
 * naive: naive_bytes): its leafs' data (rg_leaf_bytes), its planned buffer
 * (naive: the same tensors without reuse) and the packed copies of its
 * weights that its first compute made for the bf16 and int8 products
 * (gml_graph_packed_bytes). Not the kernels' scratch. */
size_t rg_tensor_bytes(const gml_graph *g, bool naive);
/* The summary's line "memory  X MiB of tensor data (Y MiB without reuse), N
 * nodes", naming the packed weights' part of X when there are some. */
void rg_print_memory(const gml_graph *g);
void rg_model_free(rg_model *m);

/* ---- running (rg_run.c) --------------------------------------------------------- */

typedef struct rg_timing {
    int runs;
    double median_ms, min_ms;
    double flops;
    double *node_ms; /* --profile: mean ms per node over the timed runs, or NULL */
} rg_timing;

/* Places g's tensors with the memory planner: measured first and refused
 * (naming `what`) when its peak plus `own` bytes (the data its leafs hold)
 * exceed the machine's memory, then planned. Every mode's graphs. */
bool rg_place(gml_graph *g, const char *what, size_t own, rg_err *e);
/* One warm-up when repeat > 1, then `repeat` timed runs. */
bool rg_run(const rg_opts *o, rg_model *m, rg_timing *t, rg_err *e);
/* The per-node table and the per-op totals. */
void rg_print_profile(FILE *f, const rg_model *m, const rg_timing *t);

/* ---- decoding (rg_decode.c) ------------------------------------------------------- */

/* --decode N: the input's T tokens are the prompt, taken by one step through
 * a KV cache; then N tokens are decoded one at a time, each fed the output of
 * the one before (a block has no vocabulary), by a step graph built once. */
typedef struct rg_decode {
    gml_context *ctx;   /* holds out */
    gml_tensor *out;    /* [B, N, D]: the decoded tokens' outputs */
    int64_t prompt, tokens, max_len;
    size_t cache_bytes; /* K and V */
    double prompt_ms;   /* the prompt step */
    int runs;           /* timed decodes of the N tokens (--repeat) */
    double median_ms, min_ms; /* per token */
    double flops;             /* of one token's step */
    size_t peak_bytes;        /* tensor data: weights, prompt, cache and both steps' buffers */
    int step_nodes;
} rg_decode;

bool rg_decode_run(const rg_opts *o, rg_data *d, rg_decode *r, rg_err *e);
void rg_decode_free(rg_decode *r);

/* ---- outputs (rg_svg.c, rg_out.c) ------------------------------------------------- */

/* t's elements in logical C order (any strides), malloc'd; *n_bytes set. */
void *rg_dense(const gml_tensor *t, size_t *n_bytes);

typedef struct rg_heatmap {
    const float *attn; /* dense [B, H, Tq, Tk] */
    int64_t B, H, Tq, Tk;
    int batch;                        /* which batch element to draw */
    char **key_labels, **query_labels; /* Tk / Tq labels, or NULL for indices */
    const char *title;
    /* [H, Tq, Tk] of the drawn batch element: 1 where the options mask the
     * key (causal, window, valid lengths, an -inf mask entry), or NULL. A
     * masked cell of weight 0 is drawn hatched, apart from a weight that is
     * 0 without a mask (an underflow). */
    const unsigned char *masked;
} rg_heatmap;

/* Writes the heatmap as SVG to path; false with a message in err. */
bool rg_write_svg(const char *path, const rg_heatmap *h, char *err, size_t err_size);
/* Splits "a,b,c" into a malloc'd array of n strings (free with rg_free_labels). */
char **rg_split_labels(const char *s, int *n);
void rg_free_labels(char **labels, int n);

/* Output files are written to "<path>.run-graph-tmp" and renamed into place
 * only once every one of them was written: a failure leaves none. Each
 * staged path (and a directory made for them) is in the library's cleanup
 * table (gml_cleanup_register) until renamed or removed, so a fatal signal
 * (gml_cleanup_on_signals, installed by main) leaves none either. */
#define RG_MAX_STAGED 16
typedef struct rg_stage {
    char *final[RG_MAX_STAGED], *tmp[RG_MAX_STAGED];
    int slot[RG_MAX_STAGED]; /* tmp[i]'s cleanup slot + 1 (0: none) */
    int n;
    char *made_dir; /* a directory made for the outputs (--save-inputs), removed on abort */
    int dir_slot;   /* made_dir's cleanup slot + 1 (0: none) */
} rg_stage;

/* The temporary path to write `path` to (owned by s). */
const char *rg_stage_add(rg_stage *s, const char *path);
/* Library messages name the temporary file: this names path instead. */
void rg_stage_message(const rg_stage *s, char *msg, size_t size);
bool rg_stage_commit(rg_stage *s, rg_err *e);
/* Before any work: each output path's directory exists, the path is not a
 * directory (--save-inputs: is one, or is new), and no file is named twice,
 * however spelled ("x.npy", "./x.npy"; a usage error). */
bool rg_check_output_paths(const rg_opts *o, rg_err *e);
void rg_stage_abort(rg_stage *s);

/* Writes every output the options ask for, all or nothing. */
bool rg_write_outputs(const rg_opts *o, rg_data *d, rg_model *m, rg_err *e);

/* ---- --json (rg_out.c) ---------------------------------------------------------- */

/* What every --json report says of a run (for --decode: of one token). */
typedef struct rg_summary {
    const char *model;
    const int64_t *dim; /* [RG_NSYM]: the sizes, those with shown[i] reported */
    const bool *shown;
    bool causal;
    const gml_tensor *out; /* the output, and the XXH3 of its bytes */
    uint64_t digest;
    int threads, runs;
    double median_ms, min_ms, flops;
    size_t peak_bytes;
    bool random_weights, random_inputs;
} rg_summary;

struct cJSON;
/* The keys every --json report has: model, sizes, causal, output_shape,
 * xxh3, threads, isa, runs, median_ms, min_ms, flops, gflops, peak_bytes,
 * random_weights, random_inputs. NULL when out of memory. */
struct cJSON *rg_json_head(const rg_summary *s);
/* t's shape as a JSON array, outermost first. */
struct cJSON *rg_json_shape(const gml_tensor *t);
/* Prints j on one line on stdout and frees it. */
bool rg_json_print(struct cJSON *j, rg_err *e);

/* ---- gradients (rg_grad.c) ------------------------------------------------------- */

/* --grad-output DY.npy --grads OUT.safetensors: dL/d(each weight and input)
 * for L = sum(out * DY), built by gml_grad beside the forward and computed
 * in the same graph. Every mode that takes the flags: rg_grads_load_dy,
 * rg_grads_add for each tensor the gradients may be asked for (under the
 * name it is written with), rg_grads_build before the graph is built (the
 * graph's outputs: the forward's, then gr->grad[0 .. n)), rg_grads_save
 * after the compute. */
typedef struct rg_grads {
    gml_context *dctx; /* DY's data */
    gml_tensor *dy;    /* f32 of the output's shape ([B, T, D] under --seq-first) */
    int n, cap;
    gml_tensor **wrt, **grad; /* [n]: the tensor, its gradient (a node of the graph's context) */
    char **name;              /* [n]: the name it is written under */
    bool *seq_first;          /* [n]: an input read [T, B, D] (--seq-first), written so */
    int n_inputs;             /* of them, inputs (the rest are weights) */
} rg_grads;

/* DY from --grad-output, checked against out (its shape as written: [T, B,
 * D] under --seq-first, then read as [B, T, D]). */
bool rg_grads_load_dy(const rg_opts *o, const gml_tensor *out, rg_grads *gr, rg_err *e);
/* t may get a gradient, written under name (an input, else a weight; a
 * tensor or name given twice is taken once). */
bool rg_grads_add(rg_grads *gr, gml_tensor *t, const char *name, bool is_input, bool seq_first, rg_err *e);
/* Keeps the tensors the forward outs[0 .. n_outs) reads (q8_0 ones are
 * refused), then builds their gradients with gml_grad in ctx. */
bool rg_grads_build(gml_context *ctx, gml_tensor *const *outs, int n_outs, rg_grads *gr, rg_err *e);
/* Writes the gradients, g's data, to path (staged in s): F32 safetensors. */
bool rg_grads_save(rg_stage *s, const char *path, const gml_graph *g, const rg_grads *gr, rg_err *e);
/* "N gradients (W weights, I inputs)" for the summaries. */
void rg_grads_describe(const rg_grads *gr, const char *path, char *buf, size_t size);
void rg_grads_free(rg_grads *gr);

/* ---- whole layers (rg_layers.c) ----------------------------------------------------- */

/* run-graph llama | gpt2 | bert (RG_MODE_LAYER), on the parsed options
 * (threads and ISA set by main). Returns the exit status. */
int rg_layers_main(const rg_opts *o);

/* ---- training (rg_train.c) ------------------------------------------------------------ */

/* run-graph train gpt2 | llama (RG_MODE_TRAIN), on the parsed options
 * (threads and ISA set by main). Returns the exit status. */
int rg_train_main(const rg_opts *o);

/* ---- over MPI (rg_mpi.c) ------------------------------------------------------------ */

/* --parallel MODE: true in a run-graph built with MPI; without
 * (-DGGMLITE_MPI=OFF), false with a message saying how to build it. */
bool rg_parallel_built(const char *mode, rg_err *e);
/* The --parallel modes (o->mode RG_MODE_HEADS, CONTEXT, CONTEXT_DECODE):
 * starts MPI and runs the mode; parsed false: the parse's usage error in e,
 * said by rank 0. Returns the exit status. */
int rg_parallel_main(int argc, char **argv, rg_opts *o, bool parsed, const rg_err *e);

#endif
