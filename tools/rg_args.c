/* run-graph's command line: one table of flags gives each its argument, its
 * help line and the models it applies to; --help prints the table. */
#define _POSIX_C_SOURCE 200809L
#include "rg.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool rg_fail(rg_err *e, int status, const char *fmt, ...) {
    if (e->status) return false;
    e->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return false;
}

const char *const RG_SYM[RG_NSYM] = {"B", "T", "S", "D", "H", "G", "P", "M", "N", "K"};
const char *const RG_FLAG[RG_NSYM] = {"--batch", "--seq", "--kv-seq", "--d-model", "--heads",
                                      "--kv-heads", "--max-rel", "--m", "--n", "--k"};

/* Which modes a flag applies to: the single process's models, the layers,
 * the --parallel modes. --parallel context --decode takes the single
 * process's flags for mha and gqa (and checks them as it does) plus
 * --cache-per-rank; M_CDEC marks the ones its help lists. */
enum {
    M_MHA = 1 << RG_MHA,
    M_GQA = 1 << RG_GQA,
    M_REL = 1 << RG_RELPOS,
    M_MAT = 1 << RG_MATMUL,
    M_GRAPH = 1 << RG_GRAPH,
    M_LLAMA = 1 << 5,
    M_GPT2 = 1 << 6,
    M_BERT = 1 << 7,
    M_HEADS = 1 << 8,   /* --parallel heads */
    M_CONTEXT = 1 << 9, /* --parallel context */
    M_CDEC = 1 << 10,   /* --parallel context --decode */
    M_TRAIN = 1 << 11,  /* train gpt2 | llama */
    M_ATTN = M_MHA | M_GQA | M_REL | M_GRAPH,
    M_ALL = M_ATTN | M_MAT, /* every single-process model */
    M_LAYER = M_LLAMA | M_GPT2 | M_BERT,
    M_PAR = M_HEADS | M_CONTEXT,
    M_EVERY = M_ALL | M_LAYER | M_PAR | M_CDEC | M_TRAIN,
};

typedef enum flag_id {
    F_DIM, /* first RG_NSYM entries: the sizes, in RG_SYM order */
    F_CAUSAL = RG_NSYM, F_VALID_LENS, F_ATTN, F_DECODE, F_MAX_LEN, F_CACHE_DTYPE, F_WEIGHTS, F_WEIGHTS_DTYPE, F_COMPUTE, F_INPUT, F_QUERY, F_KEY, F_VALUE, F_BIND, F_SEED,
    F_PREFIX, F_NON_STRICT, F_SEQ_FIRST, F_ATTN_MASK, F_KEY_PADDING_MASK,
    F_OUTPUT, F_ATTN_WEIGHTS, F_ATTN_SVG, F_TOKENS, F_QUERY_TOKENS, F_ATTN_BATCH, F_DOT,
    F_SAVE_GRAPH, F_SAVE_INPUTS, F_THREADS, F_REPEAT, F_ISA, F_PROFILE, F_NAN_TRAP, F_PRINT_GRAPH,
    F_JSON, F_HELP, F_LIST_OPS, F_VERSION,
    F_CAUSAL_TOP_LEFT, F_WINDOW, F_ALIBI, F_SOFTCAP, F_SINKS, F_ROPE, F_ROPE_THETA,
    F_ADD_ZERO_ATTN, F_LAYERS, F_FFN, F_RMS_EPS, F_ZIGZAG, F_CACHE_PER_RANK, F_PARALLEL,
    F_DATA, F_OPTIMIZER, F_LR, F_BETAS, F_EPS, F_WEIGHT_DECAY, F_MOMENTUM, F_CLIP_GRAD_NORM, F_STEPS,
    F_LOG, F_SAVE_WEIGHTS, F_GRADS,
} flag_id;

typedef struct flag {
    const char *name;
    const char *arg; /* NULL: takes no value */
    unsigned models; /* M_* */
    const char *help;
    const char *group; /* starts a group in the single process's --help */
    const char *help2; /* the help in the layers' and --parallel's pages when it differs */
} flag;

/* Indexed by flag_id (the sizes first, in RG_SYM order); --help prints them in
 * this order. */
static const flag FLAGS[] = {
    [RG_B] = {"--batch", "B", M_ATTN | M_LAYER | M_PAR | M_CDEC, "batch size", "Sizes (inferred from the input and weight files when given)", "batch size (default 2)"},
    [RG_T] = {"--seq", "T", M_ATTN | M_LAYER | M_PAR | M_CDEC, "query length", NULL, "query length (default 10)"},
    [RG_S] = {"--kv-seq", "S", M_ATTN, "key/value length (default T; S != T makes random inputs cross-attention)", NULL, NULL},
    [RG_D] = {"--d-model", "D", M_ATTN | M_LAYER | M_PAR | M_CDEC, "model width d_model", NULL, "model width d_model (default: the weights'; random: 256, --parallel mha and gqa 512)"},
    [RG_H] = {"--heads", "H", M_ATTN | M_LAYER | M_PAR | M_CDEC | M_TRAIN, "query heads (needed with --weights unless rel_k.weight tells d_k)", NULL, "query heads (required with --weights unless llama's self_attn.sinks tells; default 8)"},
    [RG_G] = {"--kv-heads", "G", M_GQA | M_REL | M_GRAPH | M_LLAMA | M_PAR | M_CDEC | M_TRAIN, "key/value heads, dividing H (gqa default H/4)", NULL, "key/value heads (default: from the weights' k_proj rows, else H/4)"},
    [RG_P] = {"--max-rel", "P", M_REL | M_GRAPH, "relpos: relative distances clipped to [-P, P] (P = 0 allowed)", NULL, NULL},
    [RG_M] = {"--m", "M", M_MAT | M_GRAPH, "matmul: rows of a [M, K]", NULL, NULL},
    [RG_N] = {"--n", "N", M_MAT | M_GRAPH, "matmul: columns of b [K, N]", NULL, NULL},
    [RG_K] = {"--k", "K", M_MAT | M_GRAPH, "matmul: inner size", NULL, NULL},
    [F_CAUSAL] = {"--causal", NULL, M_ATTN | M_PAR | M_CDEC, "query i sees key j iff j <= i + (S - T)", "Masks", NULL},
    [F_VALID_LENS] = {"--valid-lens", "L1,L2,..", M_ATTN | M_BERT, "one length per batch: keys j >= L are masked", NULL, "one length per batch row; keys j >= L are padding"},
    [F_ATTN] = {"--attn", "fused|unfused", M_MHA | M_GQA | M_REL,
     "fused: one flash_attn op, memory independent of S, no attention weights; unfused: scores, "
     "softmax and context as ops (default: fused, unless --attn-weights or --attn-svg asks for the "
     "weights; relpos is unfused only)",
     "Attention graph and decoding", NULL},
    [F_DECODE] = {"--decode", "N", M_MHA | M_GQA | M_CDEC,
     "decodes N tokens after a prompt (the input's T tokens, taken in one step) through a KV cache, "
     "each new token fed the output of the one before; reports tokens/s and the cache size; "
     "--output gets the N outputs [B, N, D]. Causal, self-attention, fused",
     NULL, NULL},
    [F_MAX_LEN] = {"--max-len", "T_MAX", M_MHA | M_GQA,
     "--decode: the KV cache's positions (default T + N); passing it is an error", NULL, NULL},
    [F_CACHE_DTYPE] = {"--cache-dtype", "f32|f16|bf16", M_MHA | M_GQA | M_CDEC,
     "--decode: the type of the KV cache's K and V (default f32); f16 and bf16 halve its bytes, "
     "the new K and V rows rounded into it (round to nearest even)", NULL, NULL},
    [F_WEIGHTS] = {"--weights", "FILE", M_ATTN | M_LAYER | M_PAR | M_CDEC | M_TRAIN,
     "f32 safetensors (mapped; or a sharded checkpoint's index .json): w_q.weight, w_q.bias, w_k.*, w_v.*, w_o.*, rel_k.weight, rel_v.weight, or "
     "in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias",
     "Data (without files: deterministic random data from --seed)", "safetensors (default: deterministic random weights, the same in every mode); --parallel: the ranks check they read the same tensors (digests), then heads computes on each rank's share only; context: mapped by every rank"},
    [F_WEIGHTS_DTYPE] = {"--weights-dtype", "f32|f16|bf16|q8_0", M_ATTN | M_LAYER | M_CDEC,
     "converts the f32 weight matrices (2-D) to this type at load (biases and "
     "norm weights stay f32; q8_0 needs rows of a multiple of 32). F16 and BF16 matrices of a "
     "--weights file are used as they are; its 1-D F16/BF16 tensors are made f32", NULL, "converts the f32 weight matrices (2-D) to this type at load (norm weights and biases stay f32; a file's F16/BF16 matrices are used as they are; gpt2 takes no q8_0)"},
    [F_COMPUTE] = {"--compute", "f32|bf16|int8", M_MHA | M_GQA | M_MAT | M_LAYER,
     "the matmuls' precision (docs/types.md): f32 (default); bf16 rounds both operands to bf16 "
     "and sums in f32 (weights f32, f16 or bf16; matmul: a and b, random or --bind, rounded to "
     "bf16 values); int8 quantizes the activations per row against --weights-dtype q8_0 "
     "weights (int32 sums, f32 scales)", NULL, NULL},
    [F_INPUT] = {"--input", "FILE", M_ATTN | M_LAYER | M_PAR | M_CDEC, "self-attention input .npy [B, T, D]", NULL, "x .npy f32 [B, T, D] (default: random); --parallel: read by rank 0"},
    [F_QUERY] = {"--query", "FILE", M_ATTN, "cross-attention query .npy [B, T, D]", NULL, NULL},
    [F_KEY] = {"--key", "FILE", M_ATTN, "cross-attention key .npy [B, S, D] (default: the query)", NULL, NULL},
    [F_VALUE] = {"--value", "FILE", M_ATTN, "cross-attention value .npy [B, S, D] (default: the key)", NULL, NULL},
    [F_BIND] = {"--bind", "NAME=FILE", M_MAT | M_GRAPH, "binds a graph file's input or param NAME (matmul: a, b) to a .npy", NULL, NULL},
    [F_SEED] = {"--seed", "N", M_ALL | M_LAYER | M_PAR | M_CDEC, "seed of the random weights and inputs (default 0)", NULL, NULL},
    [F_PREFIX] = {"--prefix", "P", M_ATTN | M_LAYER | M_CDEC,
     "--weights: the module's tensors, named as PyTorch prefixes them ('layers.0.self_attn.' or "
     "'layers.0.self_attn'); default: detected when the file holds one block", NULL,
     "--weights: the layers' list as PyTorch names it, layer i under P.<i>. ('model.layers', "
     "'transformer.h'; one layer: also the layer itself); default: detected"},
    [F_NON_STRICT] = {"--non-strict", NULL, M_ATTN | M_LAYER | M_PAR | M_CDEC,
     "allow tensors under the prefix that the block does not use (by default an error, as "
     "load_state_dict(strict=True)), and tensors of a sharded index's shards that its weight_map "
     "leaves out (ignored, with a note)", NULL,
     "allow tensors of the file that the layers do not use (a whole checkpoint's embeddings and "
     "final norm, layers past --layers, a shard's tensors its index leaves out): ignored, listed "
     "on stderr (by default an error, as load_state_dict(strict=True))"},
    [F_SEQ_FIRST] = {"--seq-first", NULL, M_ATTN | M_CDEC,
     "inputs and output are [T, B, D] (nn.MultiheadAttention's batch_first=False)", NULL, NULL},
    [F_ATTN_MASK] = {"--attn-mask", "FILE", M_ATTN,
     ".npy mask [T, S] or [B*H, T, S] as nn.MultiheadAttention's attn_mask: bool (True: not "
     "allowed) or float (added to the scores); also [B or 1, H or 1, T, S] (as --save-inputs writes it)", NULL, NULL},
    [F_KEY_PADDING_MASK] = {"--key-padding-mask", "FILE", M_ATTN,
     ".npy [B, S]: bool (True: a padding key, ignored) or float (added), any pattern; both masks "
     "combine with --causal and --valid-lens, and a query left with no key gets zeros", NULL, NULL},
    [F_OUTPUT] = {"--output", "FILE", M_ALL | M_LAYER | M_PAR | M_CDEC, "writes the output .npy", "Outputs (written only when the whole run succeeds)", "writes the output .npy [B, T, D]; --parallel: rank 0 writes it"},
    [F_ATTN_WEIGHTS] = {"--attn-weights", "FILE", M_ATTN, "writes the attention weights .npy [B, H, T, S]", NULL, NULL},
    [F_ATTN_SVG] = {"--attn-svg", "FILE", M_ATTN, "draws the attention weights as an SVG heatmap, a panel per head; keys masked (causal, --window, --valid-lens, -inf or True in a mask) are hatched, apart from weights that are 0 unmasked", NULL, NULL},
    [F_TOKENS] = {"--tokens", "A,B,..", M_ATTN, "--attn-svg labels of the S keys (and of the queries when T = S)", NULL, NULL},
    [F_QUERY_TOKENS] = {"--query-tokens", "A,B,..", M_ATTN, "--attn-svg labels of the T queries", NULL, NULL},
    [F_ATTN_BATCH] = {"--attn-batch", "I", M_ATTN, "--attn-svg draws batch element I (default 0)", NULL, NULL},
    [F_DOT] = {"--dot", "FILE", M_ALL, "writes the graph as Graphviz DOT", NULL, NULL},
    [F_SAVE_GRAPH] = {"--save-graph", "FILE", M_ALL, "writes the graph as a graph file (tools/graphs/README.md)", NULL, NULL},
    [F_SAVE_INPUTS] = {"--save-inputs", "DIR", M_ALL, "writes the weights and inputs used: DIR/weights.safetensors, DIR/<input>.npy, and DIR/args, the arguments that run the same case in DIR (every option that changes the result: sizes, masks, --attn, --seq-first, the scoring and position flags)", NULL, NULL},
    [F_THREADS] = {"--threads", "N", M_ALL | M_LAYER | M_PAR | M_CDEC | M_TRAIN, "compute threads (default: all cores)", "Running", "compute threads (default: all cores); --parallel: per rank, default the cores over the ranks on the machine"},
    [F_REPEAT] = {"--repeat", "N", M_ALL | M_LAYER | M_PAR | M_CDEC, "one warm-up, then N timed runs: median and min ms, GFLOP/s", NULL, NULL},
    [F_ISA] = {"--isa", "NAME", M_ALL | M_LAYER | M_PAR | M_CDEC | M_TRAIN, "kernels: reference, scalar, avx2 or avx512 (default: the best the CPU has)", NULL, NULL},
    [F_PROFILE] = {"--profile", NULL, M_ALL, "per-node times (op, shape, ms, share) and per-op totals", NULL, NULL},
    [F_NAN_TRAP] = {"--nan-trap", NULL, M_ALL | M_LAYER | M_HEADS | M_CDEC,
     "stop at the first node that makes a NaN or Inf, and name it", NULL,
     "stop at the first node that makes a NaN or Inf, and name it (--parallel heads: and the rank; "
     "not context: its ring runner has no trap)"},
    [F_PRINT_GRAPH] = {"--print-graph", NULL, M_ALL | M_LAYER, "prints the graph's nodes (to stderr with --json)", NULL, NULL},
    [F_JSON] = {"--json", NULL, M_ALL | M_LAYER | M_PAR | M_CDEC | M_TRAIN,
     "prints one JSON object on stdout instead of the summary", NULL,
     "prints one JSON object on stdout instead of the summary; --parallel: rank 0 does, with ranks and parallel"},
    [F_HELP] = {"--help", NULL, M_EVERY, "this text", "Other", NULL},
    [F_LIST_OPS] = {"--list-ops", NULL, M_ALL, "the ops a graph file can call, as the Markdown table of tools/graphs/README.md", NULL, NULL},
    [F_VERSION] = {"--version", NULL, M_ALL, "the version", NULL, NULL},
    [F_CAUSAL_TOP_LEFT] = {"--causal-top-left", NULL, M_MHA | M_GQA,
     "causal aligned top-left: query i sees key j iff j <= i (--causal is bottom-right)",
     "Attention scoring and positions (mha, gqa; no dense mask is made)", NULL},
    [F_WINDOW] = {"--window", "W", M_MHA | M_GQA | M_LLAMA | M_PAR | M_CDEC,
     "sliding window: query at position i sees key j iff 0 <= i - j < W (implies --causal)", NULL, "sliding window: each query sees its last W keys"},
    [F_ALIBI] = {"--alibi", NULL, M_MHA | M_GQA | M_CONTEXT | M_CDEC, "ALiBi linear biases, max bias 8 (the paper's slopes)", NULL, NULL},
    [F_ADD_ZERO_ATTN] = {"--add-zero-attn", NULL, M_MHA | M_GQA,
     "nn.MultiheadAttention(add_zero_attn=True): a zero key and value row appended (after "
     "bias_k/bias_v, which are used whenever --weights holds them), seen by every query", NULL, NULL},
    [F_SOFTCAP] = {"--softcap", "C", M_MHA | M_GQA | M_LLAMA | M_PAR | M_CDEC, "logit soft-capping: scaled score s -> C tanh(s / C)", NULL, "attention logits capped as C tanh(s / C)"},
    [F_SINKS] = {"--sinks", NULL, M_MHA | M_GQA | M_PAR | M_CDEC,
     "attention sinks: a logit per head in the softmax's denominator, the weight 'sinks' "
     "(or 'self_attn.sinks') [H] from --weights (random with random weights)", NULL, NULL},
    [F_ROPE] = {"--rope", NULL, M_MHA | M_GQA | M_PAR | M_CDEC,
     "rotary position embeddings on q and k (Hugging Face's rotate_half), queries and keys at "
     "0 .. T-1 (cross-attention: queries at S - T + i, or i with --causal-top-left)", NULL, NULL},
    [F_ROPE_THETA] = {"--rope-theta", "THETA", M_MHA | M_GQA | M_LLAMA | M_PAR | M_CDEC | M_TRAIN, "--rope's base (default 10000)", NULL, "rope base (default 10000)"},
    [F_LAYERS] = {"--layers", "N", M_LAYER, "layers stacked (default 1)", NULL, NULL},
    [F_FFN] = {"--ffn", "F", M_LAYER | M_PAR,
     "the MLP's width for random weights (default 4D; llama 8D/3 rounded up to 16)", NULL, NULL},
    [F_RMS_EPS] = {"--rms-eps", "EPS", M_LLAMA | M_PAR | M_TRAIN, "llama: RMSNorm eps (default 1e-6)", NULL, NULL},
    [F_ZIGZAG] = {"--zigzag", NULL, M_CONTEXT,
     "the load-balanced layout for causal attention: 2P segments, rank r holds segments r and "
     "2P-1-r (T >= 2P)", NULL, NULL},
    [F_CACHE_PER_RANK] = {"--cache-per-rank", "C", M_CDEC,
     "positions each rank's shard holds (default ceil((T + N) / P)); T + N must fit in P x C", NULL, NULL},
    [F_PARALLEL] = {"--parallel", "heads|context", M_MHA | M_GQA | M_LLAMA | M_PAR | M_CDEC,
     "one block over the ranks of an MPI job (mpirun; run-graph built with -DGGMLITE_MPI=ON): "
     "heads splits the heads, context the sequence (with --decode: the KV cache by position); "
     "run-graph MODEL --parallel heads --help lists their flags",
     "Over MPI", NULL},
    [F_DATA] = {"--data", "TOKENS.npy", M_TRAIN,
     "int32 or int64 token ids [S, B, T+1] (required): step s trains on data[s, :, :-1] with the "
     "targets data[s, :, 1:]; every id in [0, V)", NULL, NULL},
    [F_OPTIMIZER] = {"--optimizer", "adamw|sgd", M_TRAIN,
     "torch.optim.AdamW or torch.optim.SGD (required), their defaults and first steps", NULL, NULL},
    [F_LR] = {"--lr", "LR", M_TRAIN, "learning rate (required, >= 0)", NULL, NULL},
    [F_BETAS] = {"--betas", "B1,B2", M_TRAIN, "adamw: the moments' decay rates, each in [0, 1) (default 0.9,0.999)", NULL, NULL},
    [F_EPS] = {"--eps", "E", M_TRAIN, "adamw: added to the denominator (default 1e-8)", NULL, NULL},
    [F_WEIGHT_DECAY] = {"--weight-decay", "WD", M_TRAIN,
     "adamw: decoupled, w -= lr WD w (default 0.01); sgd: L2, WD w added to the gradient (default 0)", NULL, NULL},
    [F_MOMENTUM] = {"--momentum", "M", M_TRAIN, "sgd: momentum (default 0; its buffer starts at the first gradient)", NULL, NULL},
    [F_CLIP_GRAD_NORM] = {"--clip-grad-norm", "C", M_TRAIN,
     "scales the gradients so that their global L2 norm is at most C before each update "
     "(torch.nn.utils.clip_grad_norm_; default: none)", NULL, NULL},
    [F_STEPS] = {"--steps", "S", M_TRAIN, "steps to train, at most the data's S (default S)", NULL, NULL},
    [F_LOG] = {"--log", "LOSSES.npy", M_TRAIN, "writes each step's loss (before its update), f32 [S]", NULL, NULL},
    [F_SAVE_WEIGHTS] = {"--save-weights", "FILE", M_TRAIN,
     "writes every tensor of --weights after the last step, under its name (safetensors)", NULL, NULL},
    [F_GRADS] = {"--grads", "FILE", M_TRAIN,
     "writes the first step's gradients (before clipping), f32, under the parameters' names (safetensors)",
     NULL, NULL},
};
#define N_FLAGS (int)(sizeof FLAGS / sizeof *FLAGS)

/* The help in train's page where it differs from the flag's help. */
static const char *const TRAIN_HELP[N_FLAGS] = {
    [RG_H] = "query heads (required)",
    [RG_G] = "llama: key/value heads (default: layer 0's k_proj rows over the head size)",
    [F_WEIGHTS] = "INIT.safetensors (required): the whole model under Hugging Face's names, every tensor f32 "
                 "and a parameter (one group)",
    [F_JSON] = "prints one JSON object on stdout (losses, median_ms per step with the first excluded, "
              "tokens_per_s, ...) instead of the summary, and no line per step",
    [F_ROPE_THETA] = "llama: rope base (default 10000)",
};
_Static_assert(sizeof FLAGS / sizeof *FLAGS == F_GRADS + 1, "FLAGS follows flag_id");

bool rg_size_applies(rg_kind kind, int sym) { return FLAGS[sym].models >> kind & 1; }

/* ---- --help, made from the table -------------------------------------------- */

/* A page of --help: the text before and after the flags, and the modes
 * whose flags it lists (a flag that applies to some of them only is
 * followed by their names). */
typedef struct page {
    unsigned modes;
    const char *const *names; /* of the mode bits, from bit 0 */
    bool groups, help2;       /* the table's groups; the help2 texts */
    const char *head, *tail;
} page;

static const char *const MODE_NAMES[] = {"mha", "gqa", "relpos", "matmul", "graph files",
                                         "llama", "gpt2", "bert"};

static const page PAGES[] = {
    [RG_MODE_SINGLE] = {M_ALL, MODE_NAMES, true, false,
     "usage: run-graph MODEL [options]\n"
     "\n"
     "Runs an attention block (or a matmul, or a graph file) with ggmlite: binds weights\n"
     "and inputs from files (or makes deterministic random ones), computes, and writes,\n"
     "prints, times, profiles and draws the result.\n"
     "\n"
     "MODEL: mha | gqa | relpos | matmul | a graph file (see tools/graphs/README.md)\n"
     "  mha     multi-head attention           out [B, T, D], weights [B, H, T, S]\n"
     "  gqa     grouped-query attention        (G key/value heads)\n"
     "  relpos  Shaw et al. relative-position attention (rel_k, rel_v tables [2P+1, D/H])\n"
     "  matmul  a [M, K] @ b [K, N]            out [M, N]\n"
     "  llama | gpt2 | bert   whole layers on Hugging Face weights (first argument; their\n"
     "          own flags: run-graph llama --help)\n"
     "  train gpt2|llama      trains a whole language model (run-graph train --help)\n"
     "A graph file sees the sizes as symbols B T S D H G P M N K and CAUSAL (0 or 1); its\n"
     "inputs x, query, key, value, valid_lens bind to the flags of those names, attn_mask\n"
     "to --attn-mask and --key-padding-mask, its params to --weights by name, anything else\n"
     "to --bind (random data only when no file is given). Its first output is the result,\n"
     "a second one the attention weights.\n"
     "Weights are read as PyTorch's load_state_dict(strict=True): the module's tensors\n"
     "(--prefix, or detected), each used, none missing. .npy inputs in float64, float16\n"
     "or bool are converted to f32, with a note.\n"
     "A flag that applies to some models only is followed by their names in brackets.\n",
     "\n"
     "Without --json: a short summary (output shape, XXH3 digest of the output bytes, time).\n"
     "With --json: model, output_shape, xxh3, threads, runs, median_ms, min_ms, flops,\n"
     "peak_bytes and more.\n"
     "Exit status: 0 ok, 1 a run-time problem (a bad file, sizes that do not fit, a\n"
     "failed compute), 2 a usage error. Errors are one line: run-graph: <file>: <what>.\n"
     "\n"
     "Example:\n"
     "  run-graph mha --seq 6 --d-model 64 --heads 4 --causal \\\n"
     "      --tokens \"The,cat,sat,on,the,mat\" --attn-svg attn.svg\n"},
    [RG_MODE_LAYER] = {M_LAYER, MODE_NAMES, false, true,
     "usage: run-graph llama|gpt2|bert [options]\n"
     "\n"
     "Runs one transformer layer, or --layers N stacked, as Hugging Face computes it:\n"
     "  llama  RMSNorm, grouped-query attention with rope (causal), residual, RMSNorm,\n"
     "         SwiGLU MLP, residual. Tensors: input_layernorm.weight,\n"
     "         self_attn.{q,k,v,o}_proj.weight (.bias optional), self_attn.sinks [H]\n"
     "         (optional), post_attention_layernorm.weight, mlp.{gate,up,down}_proj.weight\n"
     "  gpt2   pre-LayerNorm, causal multi-head attention with biases, GELU-tanh MLP (eps\n"
     "         1e-5). Tensors: ln_1.*, attn.c_attn.* (Conv1D [D, 3D]), attn.c_proj.*, ln_2.*,\n"
     "         mlp.c_fc.*, mlp.c_proj.* (weight and bias each)\n"
     "  bert   attention with a padding mask, post-LayerNorm, GELU MLP (eps 1e-12). Tensors:\n"
     "         attention.self.{query,key,value}.*, attention.output.dense.*,\n"
     "         attention.output.LayerNorm.*, intermediate.dense.*, output.dense.*,\n"
     "         output.LayerNorm.*\n"
     "Layer i's tensors carry the prefix model.layers.<i>. or layers.<i>. (llama), h.<i>. or\n"
     "transformer.h.<i>. (gpt2), encoder.layer.<i>. or bert.encoder.layer.<i>. (bert), or\n"
     "--prefix P's P.<i>.; a single layer's may have none. --weights is a safetensors file or a\n"
     "sharded checkpoint's model.safetensors.index.json. Every tensor of the file must be\n"
     "used (--non-strict: the others are ignored and listed).\n"
     "A flag that applies to some layers only is followed by their names in brackets.\n",
     "\n"
     "Prints the output's shape and the XXH3 digest of its bytes, the time and the memory;\n"
     "--json prints the keys of run-graph --help's --json (model, sizes, output_shape, xxh3,\n"
     "...) and layers, valid_lens.\n"
     "Exit status: 0 ok, 1 a run-time problem, 2 a usage error.\n"},
    [RG_MODE_HEADS] = {M_HEADS, NULL, false, true,
     "usage: mpirun -np P run-graph mha|gqa|llama [options] --parallel heads\n"
     "\n"
     "Head-parallel (tensor-parallel) block over P MPI ranks: rank r takes a contiguous\n"
     "range of the query heads (H/P each when P divides H, else sizes differing by one),\n"
     "the kv heads they read (split when P divides G, else a straddled kv head is\n"
     "projected on both ranks), those rows of W_q/W_k/W_v and columns of W_o (llama:\n"
     "also rows of gate/up_proj and columns of down_proj). Rank 0 reads the input and\n"
     "writes the output; the partial outputs are summed in rank order.\n"
     "mha and gqa take --causal, --window, --softcap, --rope, --rope-theta and --sinks as\n"
     "run-graph's single process; llama is causal with rope, and takes --ffn, --rms-eps,\n"
     "--window, --softcap and --rope-theta as run-graph llama.\n",
     "(--parallel context: the sequence split instead, see mpirun ... --parallel context --help)\n"},
    [RG_MODE_CONTEXT] = {M_CONTEXT, NULL, false, true,
     "usage: mpirun -np P run-graph mha|gqa|llama [options] --parallel context\n"
     "\n"
     "Context-parallel prompt (ring attention) over P MPI ranks: rank r holds rows\n"
     "[floor(r T / P), floor((r+1) T / P)) of the sequence and all the weights; its K/V\n"
     "chunk travels the ring of ranks (non-blocking, posted before each step's compute),\n"
     "each rank keeps the partial attention of its queries over every chunk it can see\n"
     "(causal: the chunks up to its own) and merges them in key order (chunk 0, 1, ...),\n"
     "then W_o (llama: residual and MLP) on its rows. Rank 0 reads the input and writes\n"
     "the output (rows gathered in rank order). With --decode N (mha, gqa) it decodes\n"
     "instead, the KV cache sharded by position (--cache-per-rank C).\n"
     "mha and gqa take --causal, --window, --softcap, --rope, --rope-theta, --sinks and\n"
     "--alibi as run-graph's single process; llama is causal with rope (sinks from its\n"
     "weights), and takes --ffn, --rms-eps, --window, --softcap and --rope-theta as\n"
     "run-graph llama.\n",
     ""},
    [RG_MODE_CONTEXT_DECODE] = {M_CDEC, NULL, false, false,
     "usage: mpirun -np P run-graph mha|gqa [options] --decode N --parallel context "
     "[--cache-per-rank C]\n"
     "\n"
     "Context-parallel decoding: the KV cache is sharded by position over the P ranks.\n"
     "Rank r's shard [B, G, C, d_k] holds positions [r C, (r+1) C): the context fills\n"
     "rank 0's shard, then rank 1's, ... The prompt (the input's T tokens) is written\n"
     "into the shards by the ranks holding its rows; then each token's input (the\n"
     "previous output) is broadcast, every rank attends its shard, and rank 0 merges\n"
     "the partials in rank order (= key order) and applies W_o. Rank 0 reads the input\n"
     "and writes the output [B, N, D], as run-graph ... --decode N in one process.\n"
     "The flags are the single process's (run-graph --help) for mha and gqa; --threads is\n"
     "per rank (default the cores over the ranks on the machine).\n",
     "--json: rank 0 prints the single process's --decode keys (flops, gflops, peak_bytes null),\n"
     "with parallel, ranks, cache_per_rank. Not: --max-len (use --cache-per-rank), --print-graph.\n"},
    [RG_MODE_TRAIN] = {M_TRAIN, NULL, false, false,
     "usage: run-graph train gpt2|llama --weights INIT.safetensors --data TOKENS.npy --heads H\n"
     "           --optimizer adamw|sgd --lr LR [options]\n"
     "\n"
     "Trains a whole language model as PyTorch does: each step the logits of data[s, :, :-1],\n"
     "the mean cross-entropy against data[s, :, 1:] over the B*T targets, the gradient of\n"
     "every parameter, then one torch.optim update of them all (one group). The step is one\n"
     "graph, planned once; results are the same bits at every thread count.\n"
     "  gpt2   wte.weight, wpe.weight, h.<i>.* (as run-graph gpt2), ln_f.{weight,bias};\n"
     "         the head is wte unless lm_head.weight is given; 'transformer.' optional\n"
     "  llama  model.embed_tokens.weight, model.layers.<i>.* (as run-graph llama),\n"
     "         model.norm.weight, lm_head.weight (tied to embed_tokens when absent);\n"
     "         'model.' optional\n",
     "\n"
     "A line per step on stderr (step, loss, ms, tokens/s), then a summary on stdout; --json\n"
     "prints losses, median_ms, tokens_per_s and more instead. Output files are written only\n"
     "when every step succeeded. Exit status: 0 ok, 1 a run-time problem (a bad file, a\n"
     "token id outside [0, V)), 2 a usage error.\n"
     "\n"
     "Example:\n"
     "  run-graph train gpt2 --weights init.safetensors --data tokens.npy --heads 8 \\\n"
     "      --optimizer adamw --lr 3e-4 --log losses.npy --save-weights trained.safetensors\n"},
};

/* text at column 25, wrapped at 100 columns */
static void wrap(FILE *f, const char *text) {
    int col = 25;
    for (const char *w = text; *w;) {
        int len = (int)strcspn(w, " ");
        if (col > 25 && col + 1 + len > 100) {
            fprintf(f, "\n%25s", "");
            col = 25;
        } else if (col > 25) {
            fputc(' ', f);
            col++;
        }
        fprintf(f, "%.*s", len, w);
        col += len;
        w += len;
        while (*w == ' ') w++;
    }
}

void rg_print_help(FILE *f, rg_mode mode) {
    const page *p = &PAGES[mode];
    fputs(p->head, f);
    if (!p->groups) fputc('\n', f);
    for (int i = 0; i < N_FLAGS; i++) {
        const flag *fl = &FLAGS[i];
        if (!(fl->models & p->modes)) continue;
        if (fl->group && p->groups) fprintf(f, "\n%s:\n", fl->group);
        char left[48], text[1024];
        snprintf(left, sizeof left, "%s%s%s", fl->name, fl->arg ? " " : "", fl->arg ? fl->arg : "");
        fprintf(f, "  %-22s ", left);
        /* the help, then the page's modes it applies to when not all */
        const char *help = mode == RG_MODE_TRAIN && TRAIN_HELP[i] ? TRAIN_HELP[i]
                           : p->help2 && fl->help2       ? fl->help2
                                                         : fl->help;
        size_t k = (size_t)snprintf(text, sizeof text, "%s", help);
        const char *sep = " [";
        for (int b = 0; p->names && (fl->models & p->modes) != p->modes && b < 8 && k < sizeof text; b++)
            if (fl->models & p->modes & (1u << b)) {
                k += (size_t)snprintf(text + k, sizeof text - k, "%s%s", sep, p->names[b]);
                sep = ", ";
            }
        if (*sep == ',' && k < sizeof text) snprintf(text + k, sizeof text - k, "]");
        wrap(f, text);
        fputc('\n', f);
    }
    fputs(p->tail, f);
}

/* ---- values ---------------------------------------------------------------- */

/* A whole decimal number in [lo, hi]. */
static bool parse_int(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out,
                      rg_err *e) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        return rg_fail(e, RG_USAGE, "%s: '%s' is not a whole number in [%lld, %lld]", flag, s,
                       (long long)lo, (long long)hi);
    *out = v;
    return true;
}

/* A finite number > 0 (the layers' and --parallel's --softcap, --rope-theta, --rms-eps). */
static bool parse_real(const char *flag, const char *s, float *out, rg_err *e) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v <= 0)
        return rg_fail(e, RG_USAGE, "%s: '%s' is not a finite number > 0", flag, s);
    *out = v;
    return true;
}

/* A finite number >= 0 (zero: also 0), as train's --lr, --eps, --weight-decay,
 * --momentum (>= 0) and --clip-grad-norm (> 0) take. */
static bool parse_nonneg(const char *flag, const char *s, bool zero, float *out, rg_err *e) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < 0 || (!zero && v == 0))
        return rg_fail(e, RG_USAGE, "%s: '%s' is not a finite number %s", flag, s, zero ? ">= 0" : "> 0");
    *out = v;
    return true;
}

/* like: the example the message gives ("3,2"; the layers' "9,5"). */
static bool parse_lens(const char *s, const char *like, rg_opts *o, rg_err *e) {
    free(o->valid_lens);
    o->n_valid_lens = 0;
    int cap = 1;
    for (const char *c = s; *c; c++) cap += *c == ',';
    o->valid_lens = malloc((size_t)cap * sizeof *o->valid_lens);
    if (!o->valid_lens) return rg_fail(e, RG_RUNTIME, "out of memory");
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (n == 0 || n >= sizeof item)
            return rg_fail(e, RG_USAGE, "--valid-lens: '%s' is not a list of lengths like %s", s, like);
        memcpy(item, p, n);
        item[n] = '\0';
        int64_t v = 0;
        if (!parse_int("--valid-lens", item, 0, INT32_MAX, &v, e)) return false;
        o->valid_lens[o->n_valid_lens++] = (int32_t)v;
        if (!comma) return true;
        p = comma + 1;
    }
}

static bool set_model(rg_opts *o, const char *m, rg_err *e) {
    if (o->model) return rg_fail(e, RG_USAGE, "%s: a second MODEL (the first is '%s'); see --help", m, o->model);
    static const char *const NAMES[] = {"mha", "gqa", "relpos", "matmul"};
    o->model = m;
    for (int i = 0; i < 4; i++)
        if (strcmp(m, NAMES[i]) == 0) {
            o->kind = (rg_kind)i;
            return true;
        }
    o->kind = RG_GRAPH;
    if (access(m, R_OK) != 0)
        return rg_fail(e, RG_USAGE, "%s: not a model (mha, gqa, relpos, matmul) nor a readable graph file: %s",
                       m, strerror(errno));
    return true;
}

static const flag *find_flag(const char *name, size_t len) {
    for (int i = 0; i < N_FLAGS; i++)
        if (strlen(FLAGS[i].name) == len && strncmp(FLAGS[i].name, name, len) == 0) return &FLAGS[i];
    return NULL;
}

/* The flag's value into o. The single process's flags (single) and the
 * layers' and --parallel's differ in a few ranges and messages. */
static bool apply(rg_opts *o, flag_id id, const char *v, bool single, rg_err *e) {
    const char *name = FLAGS[id].name;
    int64_t n = 0;
    if ((int)id < RG_NSYM) { /* --max-rel 0 is a valid relative-position block: distances clipped to [0, 0] */
        /* the layers and --parallel: B, T, D, H, G */
        static const int64_t MAX[RG_NSYM] = {[RG_B] = 1 << 20, [RG_T] = 1 << 24, [RG_D] = 1 << 20,
                                             [RG_H] = 1 << 16, [RG_G] = 1 << 16};
        const int64_t hi = single ? (int64_t)1 << 30 : MAX[id];
        if (!parse_int(name, v, (int)id == RG_P ? 0 : 1, hi, &n, e)) return false;
        o->dim[id] = n;
        o->dim_given[id] = true;
        return true;
    }
    switch (id) {
    case F_CAUSAL: o->causal = true; return true;
    case F_VALID_LENS: return parse_lens(v, single ? "3,2" : "9,5", o, e);
    case F_LAYERS:
        if (!parse_int(name, v, 1, RG_MAX_LAYERS, &n, e)) return false;
        o->layers = (int)n;
        return true;
    case F_FFN: return parse_int(name, v, 1, 1 << 22, &o->ffn, e);
    case F_RMS_EPS: return parse_real(name, v, &o->rms_eps, e);
    case F_ZIGZAG: o->zigzag = true; return true;
    case F_CACHE_PER_RANK: return parse_int(name, v, 1, INT32_MAX, &o->cache_per_rank, e);
    case F_PARALLEL: return true; /* the mode, read by rg_parse_args */
    case F_ATTN:
        if (strcmp(v, "fused") == 0) o->attn_impl = GML_ATTN_FUSED;
        else if (strcmp(v, "unfused") == 0) o->attn_impl = GML_ATTN_UNFUSED;
        else return rg_fail(e, RG_USAGE, "--attn: '%s' is not fused or unfused", v);
        return true;
    case F_DECODE: return parse_int(name, v, 1, INT32_MAX, &o->decode, e);
    case F_MAX_LEN: return parse_int(name, v, 1, INT32_MAX, &o->max_len, e);
    case F_CACHE_DTYPE:
        if (strcmp(v, "f32") == 0) o->cache_dtype = GML_F32;
        else if (strcmp(v, "f16") == 0) o->cache_dtype = GML_F16;
        else if (strcmp(v, "bf16") == 0) o->cache_dtype = GML_BF16;
        else return rg_fail(e, RG_USAGE, "--cache-dtype: '%s' is not f32, f16 or bf16", v);
        return true;
    case F_WEIGHTS: o->weights = v; return true;
    case F_WEIGHTS_DTYPE:
        if (!gml_type_from_name(v, &o->weights_dtype) || o->weights_dtype == GML_I32)
            return rg_fail(e, RG_USAGE, "--weights-dtype: '%s' is not f32, f16, bf16 or q8_0", v);
        o->has_weights_dtype = true;
        return true;
    case F_COMPUTE:
        if (!gml_compute_from_name(v, &o->compute))
            return rg_fail(e, RG_USAGE, "--compute: '%s' is not f32, bf16 or int8", v);
        return true;
    case F_INPUT: o->input = v; return true;
    case F_QUERY: o->query = v; return true;
    case F_KEY: o->key = v; return true;
    case F_VALUE: o->value = v; return true;
    case F_BIND: {
        const char *eq = strchr(v, '=');
        if (!eq || eq == v || !eq[1])
            return rg_fail(e, RG_USAGE, "--bind: '%s' is not NAME=FILE.npy", v);
        if (o->n_bind == RG_MAX_BINDS) return rg_fail(e, RG_USAGE, "--bind: more than %d", RG_MAX_BINDS);
        size_t len = (size_t)(eq - v);
        char *nm = strndup(v, len);
        if (!nm) return rg_fail(e, RG_RUNTIME, "out of memory");
        for (int i = 0; i < o->n_bind; i++)
            if (strcmp(o->bind[i].name, nm) == 0) {
                free(nm);
                return rg_fail(e, RG_USAGE, "--bind: '%.*s' is bound twice", (int)len, v);
            }
        o->bind[o->n_bind].name = nm;
        o->bind[o->n_bind++].path = eq + 1;
        return true;
    }
    case F_SEED: {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 10);
        if (!*v || *end || errno || v[0] == '-')
            return rg_fail(e, RG_USAGE, "--seed: '%s' is not a whole number in [0, 2^64)", v);
        o->seed = s;
        return true;
    }
    case F_PREFIX: o->prefix = v; return true;
    case F_NON_STRICT: o->non_strict = true; return true;
    case F_SEQ_FIRST: o->seq_first = true; return true;
    case F_ATTN_MASK: o->attn_mask = v; return true;
    case F_KEY_PADDING_MASK: o->key_padding_mask = v; return true;
    case F_OUTPUT: o->output = v; return true;
    case F_ATTN_WEIGHTS: o->attn_weights = v; return true;
    case F_ATTN_SVG: o->attn_svg = v; return true;
    case F_TOKENS: o->tokens = v; return true;
    case F_QUERY_TOKENS: o->query_tokens = v; return true;
    case F_ATTN_BATCH:
        if (!parse_int(name, v, 0, INT32_MAX, &n, e)) return false;
        o->attn_batch = (int)n;
        return true;
    case F_DOT: o->dot = v; return true;
    case F_SAVE_GRAPH: o->save_graph = v; return true;
    case F_SAVE_INPUTS: o->save_inputs = v; return true;
    case F_THREADS:
        if (!parse_int(name, v, 1, 512, &n, e)) return false;
        o->threads = (int)n;
        return true;
    case F_REPEAT:
        if (!parse_int(name, v, 1, 1000000, &n, e)) return false;
        o->repeat = (int)n;
        return true;
    case F_ISA: {
        gml_isa isa;
        if (!gml_isa_from_name(v, &isa) || isa == GML_ISA_AUTO)
            return rg_fail(e, RG_USAGE, "--isa: '%s' is not reference, scalar, avx2 or avx512", v);
        o->isa = v;
        return true;
    }
    case F_PROFILE: o->profile = true; return true;
    case F_PRINT_GRAPH: o->print_graph = true; return true;
    case F_JSON: o->json = true; return true;
    case F_NAN_TRAP: o->nan_trap = true; return true;
    case F_HELP: o->help = o->done = true; return true;
    case F_LIST_OPS: gml_write_op_table(stdout); o->done = true; return true;
    case F_VERSION: printf("run-graph (ggmlite) %s\n", GML_VERSION); o->done = true; return true;
    case F_CAUSAL_TOP_LEFT: o->causal_top_left = true; return true;
    case F_WINDOW: return parse_int(name, v, 1, INT32_MAX, &o->window, e);
    case F_ALIBI: o->alibi = true; return true;
    case F_ADD_ZERO_ATTN: o->add_zero_attn = true; return true;
    case F_SINKS: o->sinks = true; return true;
    case F_ROPE: o->rope = true; return true;
    case F_SOFTCAP:
    case F_ROPE_THETA: {
        if (!single) return parse_real(name, v, id == F_SOFTCAP ? &o->softcap : &o->rope_theta, e);
        char *end;
        errno = 0;
        const double x = strtod(v, &end);
        const bool cap = id == F_SOFTCAP;
        if (!*v || *end || errno || !(x > 0 && x < 1e30) || (!cap && x == 1))
            return rg_fail(e, RG_USAGE, "%s: '%s' is not a number %s", name, v,
                           cap ? "> 0" : "> 0 other than 1");
        *(cap ? &o->softcap : &o->rope_theta) = (float)x;
        return true;
    }
    case F_DATA: o->data = v; return true;
    case F_OPTIMIZER:
        if (strcmp(v, "adamw") && strcmp(v, "sgd"))
            return rg_fail(e, RG_USAGE, "--optimizer: '%s' is not adamw or sgd", v);
        o->sgd = strcmp(v, "sgd") == 0;
        o->optimizer_given = true;
        return true;
    case F_LR: o->lr_given = true; return parse_nonneg(name, v, true, &o->lr, e);
    case F_BETAS: {
        char *end, *end2;
        errno = 0;
        const float b1 = strtof(v, &end);
        const float b2 = *end == ',' ? strtof(end + 1, &end2) : NAN;
        if (!*v || *end != ',' || *end2 || errno || !(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1))
            return rg_fail(e, RG_USAGE, "--betas: '%s' is not two numbers in [0, 1) like 0.9,0.999", v);
        o->betas[0] = b1, o->betas[1] = b2;
        o->betas_given = true;
        return true;
    }
    case F_EPS: o->eps_given = true; return parse_nonneg(name, v, true, &o->eps, e);
    case F_WEIGHT_DECAY: o->weight_decay_given = true; return parse_nonneg(name, v, true, &o->weight_decay, e);
    case F_MOMENTUM: o->momentum_given = true; return parse_nonneg(name, v, true, &o->momentum, e);
    case F_CLIP_GRAD_NORM: return parse_nonneg(name, v, false, &o->clip_grad_norm, e);
    case F_STEPS: return parse_int(name, v, 1, INT32_MAX, &o->steps, e);
    case F_LOG: o->log = v; return true;
    case F_SAVE_WEIGHTS: o->save_weights = v; return true;
    case F_GRADS: o->grads = v; return true;
    default: return rg_fail(e, RG_USAGE, "%s: not handled", name);
    }
}

/* The names of the M_* bits, from bit 0, for the messages. */
static const char *const EVERY_MODE_NAME[] = {"mha", "gqa", "relpos", "matmul", "graph files",
                                              "llama", "gpt2", "bert", "--parallel heads",
                                              "--parallel context", "--parallel context --decode",
                                              "train"};

/* "mha, gqa, relpos, matmul, graph files, --parallel heads": the modes fl applies to. */
static const char *modes_of(const flag *fl, char *list, size_t size) {
    size_t k = 0;
    unsigned models = fl->models;
    list[0] = '\0';
    if ((models & M_ALL) == M_ALL) { /* the single process's models, in one word */
        k += (size_t)snprintf(list, size, "mha, gqa, relpos, matmul, graph files");
        models &= ~(unsigned)M_ALL;
    }
    for (int b = 0; b < 12 && k < size; b++)
        if (models >> b & 1) k += (size_t)snprintf(list + k, size - k, "%s%s", k ? ", " : "", EVERY_MODE_NAME[b]);
    return list;
}

/* Refuses fl in `mode`: "--json does not apply to llama (it applies to
 * mha, gqa, ...); see <see>". */
static bool refuse(const flag *fl, const char *mode, const char *see, rg_err *e) {
    char list[256];
    return rg_fail(e, RG_USAGE, "%s does not apply to %s (it applies to %s); see %s", fl->name, mode,
                   modes_of(fl, list, sizeof list), see);
}

/* --compute against the weights' type: the pairings there are kernels for. */
static bool check_compute(const rg_opts *o, rg_err *e) {
    static const char *const SUPPORTED =
        "supported: --compute f32 with any --weights-dtype, --compute bf16 with f32, f16 or bf16 "
        "weights (--weights-dtype bf16 for bf16 checkpoints), --compute int8 with --weights-dtype q8_0";
    const gml_type wt = o->has_weights_dtype ? o->weights_dtype : GML_F32;
    if (o->compute == GML_COMPUTE_F32) return true;
    if (o->decode)
        return rg_fail(e, RG_USAGE, "--compute %s does not apply with --decode (the decoding steps "
                       "compute in f32)", gml_compute_name(o->compute));
    if (o->compute == GML_COMPUTE_INT8 && o->mode == RG_MODE_SINGLE && o->kind == RG_MATMUL)
        return rg_fail(e, RG_USAGE, "--compute int8 multiplies q8_0 weights; matmul takes f32 "
                       "operands (supported for matmul: --compute f32 or bf16)");
    if (o->compute == GML_COMPUTE_INT8 && wt != GML_Q8_0)
        return rg_fail(e, RG_USAGE, "--compute int8 needs q8_0 weights, got %s (%s)",
                       o->has_weights_dtype ? gml_type_name(wt) : "f32, no --weights-dtype", SUPPORTED);
    if (o->compute == GML_COMPUTE_BF16 && wt == GML_Q8_0)
        return rg_fail(e, RG_USAGE, "--compute bf16 does not take q8_0 weights (%s)", SUPPORTED);
    return true;
}

/* Flags that only make sense together, and files given two ways. */
static bool check(rg_opts *o, rg_err *e, const unsigned given[N_FLAGS]) {
    static const char *const KIND[] = {"mha", "gqa", "relpos", "matmul", "graph files"};
    for (int i = 0; i < N_FLAGS; i++)
        if (given[i] && !(FLAGS[i].models & (1u << o->kind))) {
            if (i == RG_G && o->kind == RG_MHA)
                return rg_fail(e, RG_USAGE, "--kv-heads does not apply to mha (grouped-query attention is gqa); see --help");
            return refuse(&FLAGS[i], KIND[o->kind], "--help", e);
        }
    if (o->input && (o->query || o->key || o->value))
        return rg_fail(e, RG_USAGE, "--input is self-attention; for cross-attention give --query, --key, --value");
    if (o->value && !o->key) return rg_fail(e, RG_USAGE, "--value needs --key");
    if (o->key && !o->query) return rg_fail(e, RG_USAGE, "--key needs --query");
    if (!rg_check_output_paths(o, e)) return false;
    if (o->attn_impl == GML_ATTN_FUSED && (o->attn_weights || o->attn_svg))
        return rg_fail(e, RG_USAGE, "%s needs the attention weights, which the fused graph does not "
                       "make: drop --attn fused (or give --attn unfused)",
                       o->attn_weights ? "--attn-weights" : "--attn-svg");
    if (o->kind == RG_RELPOS && o->attn_impl == GML_ATTN_FUSED)
        return rg_fail(e, RG_USAGE, "--attn fused: relpos has no fused graph (its relative-position "
                       "terms need the scores); drop --attn or give --attn unfused");
    if ((o->prefix || o->non_strict) && !o->weights)
        return rg_fail(e, RG_USAGE, "%s is for --weights", o->prefix ? "--prefix" : "--non-strict");
    if (given[F_MAX_LEN] && !o->decode) return rg_fail(e, RG_USAGE, "--max-len is for --decode");
    if (given[F_CACHE_DTYPE] && !o->decode)
        return rg_fail(e, RG_USAGE, "--cache-dtype is for --decode (the KV cache's type)");
    if (o->decode) { /* a prompt, then one token at a time: causal self-attention, fused */
        static const flag_id NOT_WITH_DECODE[] = {
            F_VALID_LENS, F_QUERY, F_KEY, F_VALUE, F_ATTN_WEIGHTS, F_ATTN_SVG, F_DOT, F_SAVE_GRAPH,
            F_SAVE_INPUTS, F_PROFILE, F_ATTN_MASK, F_KEY_PADDING_MASK, (flag_id)RG_S};
        for (size_t i = 0; i < sizeof NOT_WITH_DECODE / sizeof *NOT_WITH_DECODE; i++)
            if (given[NOT_WITH_DECODE[i]])
                return rg_fail(e, RG_USAGE, "%s does not apply with --decode (causal self-attention "
                               "of a prompt, then one token at a time)",
                               FLAGS[NOT_WITH_DECODE[i]].name);
        if (o->attn_impl == GML_ATTN_UNFUSED)
            return rg_fail(e, RG_USAGE, "--decode runs the fused graph: drop --attn unfused");
        o->causal = true;
    }
    if (o->causal_top_left && given[F_CAUSAL])
        return rg_fail(e, RG_USAGE, "--causal and --causal-top-left are two alignments: give one");
    if (o->causal_top_left && o->decode)
        return rg_fail(e, RG_USAGE, "--causal-top-left does not apply with --decode (decoding is "
                       "causal bottom-right: each new token sees every cached one)");
    if (given[F_ROPE_THETA] && !o->rope)
        return rg_fail(e, RG_USAGE, "--rope-theta is for --rope: give --rope too");
    if (!o->rope_theta) o->rope_theta = 10000.0f;
    if ((o->tokens || o->query_tokens || given[F_ATTN_BATCH]) && !o->attn_svg)
        return rg_fail(e, RG_USAGE, "%s is for the --attn-svg heatmap: give --attn-svg too",
                       o->tokens ? "--tokens" : o->query_tokens ? "--query-tokens" : "--attn-batch");
    return check_compute(o, e);
}

gml_attn_config rg_attn_config(const rg_opts *o) {
    return (gml_attn_config){
        .score = {.causal = o->causal_top_left ? GML_CAUSAL_TOP_LEFT
                            : o->causal        ? GML_CAUSAL_BOTTOM_RIGHT
                                               : GML_CAUSAL_NONE,
                  .window = o->window,
                  .softcap = o->softcap,
                  .alibi_max_bias = o->alibi ? 8.0f : 0.0f,
                  .add_zero_attn = o->add_zero_attn},
        .pos = {.kind = o->rope ? GML_POS_ROPE : GML_POS_NONE, .rope.theta = o->rope_theta},
        .graph = {.impl = o->attn_impl, .want_weights = o->attn_weights || o->attn_svg}};
}

const char *rg_attn_options(const rg_opts *o, bool flags, char *buf, size_t size) {
    size_t k = 0;
    buf[0] = '\0';
#define RG_ADD(...) (k += k < size ? (size_t)snprintf(buf + k, size - k, __VA_ARGS__) : 0)
    if (o->causal_top_left) RG_ADD("%s", flags ? " --causal-top-left" : ", causal top-left");
    if (o->window) RG_ADD(flags ? " --window %lld" : ", window %lld", (long long)o->window);
    if (o->softcap) RG_ADD(flags ? " --softcap %g" : ", softcap %g", (double)o->softcap);
    if (o->alibi) RG_ADD("%s", flags ? " --alibi" : ", alibi");
    if (o->add_zero_attn) RG_ADD("%s", flags ? " --add-zero-attn" : ", add_zero_attn");
    if (o->sinks) RG_ADD("%s", flags ? " --sinks" : ", sinks");
    if (o->rope) RG_ADD(flags ? " --rope --rope-theta %g" : ", rope theta %g", (double)o->rope_theta);
#undef RG_ADD
    return buf;
}

/* ---- the parse ------------------------------------------------------------- */

/* One argument, or a flag with its value. */
typedef struct item {
    const char *arg;  /* as given ("-h" read as "--help") */
    const flag *fl;   /* NULL: a positional argument, or a flag no mode knows */
    bool is_flag;
    int len;          /* the flag's name: arg up to '=' */
    bool has_eq;      /* --flag=value */
    const char *v;    /* its value, for a flag that takes one; NULL when missing */
} item;

static const char *const LAYER_NAME[] = {"llama", "gpt2", "bert"};

/* The single process's flags (mha, gqa, relpos, matmul, a graph file), in
 * argv order; cdec: --parallel context --decode, which also has
 * --cache-per-rank and --parallel (read before). */
static bool parse_single(const item *it, int n, bool cdec, rg_opts *o, rg_err *e) {
    unsigned given[N_FLAGS] = {0};
    for (int i = 0; i < n; i++) {
        const item *a = &it[i];
        if (!a->is_flag) {
            if (!set_model(o, a->arg, e)) return false;
            continue;
        }
        const flag *fl = a->fl;
        if (cdec && fl && (fl == &FLAGS[F_PARALLEL] || fl == &FLAGS[F_CACHE_PER_RANK])) continue;
        if (!fl) return rg_fail(e, RG_USAGE, "%.*s: unknown flag; see --help", a->len, a->arg);
        if (cdec && !(fl->models & M_CDEC) && fl == &FLAGS[F_PRINT_GRAPH])
            return refuse(fl, "--parallel context --decode", "mpirun ... --decode N --parallel context --help", e);
        if (!(fl->models & M_ALL)) /* a flag of the layers' or --parallel's; the MODEL may come later */
            return refuse(fl, !o->model ? "mha, gqa, relpos, matmul or graph files"
                              : o->kind == RG_GRAPH ? "graph files" : o->model, "--help", e);
        if (fl->arg && !a->v) return rg_fail(e, RG_USAGE, "%s: missing its value (%s)", fl->name, fl->arg);
        if (!fl->arg && a->has_eq) return rg_fail(e, RG_USAGE, "%s takes no value", fl->name);
        const flag_id id = (flag_id)(fl - FLAGS);
        given[id] = 1;
        if (!apply(o, id, a->v, true, e)) return false;
        if (o->done) return true;
    }
    if (!o->model) return rg_fail(e, RG_USAGE, "no MODEL given (mha, gqa, relpos, matmul or a graph file); see --help");
    return check(o, e, given);
}

/* run-graph llama | gpt2 | bert: model is the item naming the layer. */
static bool parse_layer(const item *it, int n, int model, rg_opts *o, rg_err *e) {
    const char *name = it[model].arg;
    o->model = name;
    for (int k = 0; k < 3; k++)
        if (strcmp(name, LAYER_NAME[k]) == 0) o->layer = (rg_layer)k;
    const unsigned mine = M_LLAMA << o->layer;
    for (int i = 0; i < n; i++) {
        const item *a = &it[i];
        const flag *fl = a->fl;
        if (i == model) continue;
        if (fl == &FLAGS[F_HELP]) {
            o->help = o->done = true;
            return true;
        }
        if (!a->is_flag) return rg_fail(e, RG_USAGE, "%s: a second MODEL (the first is '%s')", a->arg, name);
        char see[32];
        snprintf(see, sizeof see, "run-graph %s --help", name);
        if (!fl)
            return rg_fail(e, RG_USAGE, "%.*s: unknown flag for %s; see %s", a->len, a->arg, name, see);
        char list[256];
        if (fl == &FLAGS[F_CAUSAL]) /* as --parallel refuses it for llama */
            return rg_fail(e, RG_USAGE, "--causal does not apply to %s: %s (it applies to %s); see %s", name,
                           o->layer == RG_BERT ? "an encoder, each token sees every key (--valid-lens masks padding)"
                                               : "it is causal always, the flag would change nothing; drop it",
                           modes_of(fl, list, sizeof list), see);
        if (!(fl->models & mine)) return refuse(fl, name, see, e);
        if (fl->arg && !a->v) return rg_fail(e, RG_USAGE, "%s: missing its value (%s); see %s", fl->name, fl->arg, see);
        if (!fl->arg && a->has_eq) return rg_fail(e, RG_USAGE, "%s takes no value; see %s", fl->name, see);
        if (!apply(o, (flag_id)(fl - FLAGS), a->v, false, e)) return false;
    }
    if ((o->prefix || o->non_strict) && !o->weights)
        return rg_fail(e, RG_USAGE, "%s is for --weights", o->prefix ? "--prefix" : "--non-strict");
    return check_compute(o, e);
}

/* run-graph train gpt2 | llama: model is the item "train". */
static bool parse_train(const item *it, int n, int model, rg_opts *o, rg_err *e) {
    static const char *const see = "run-graph train --help";
    unsigned given[N_FLAGS] = {0};
    for (int i = 0; i < n; i++)
        if (it[i].fl == &FLAGS[F_HELP]) {
            o->help = o->done = true;
            return true;
        }
    for (int i = 0; i < n; i++) {
        const item *a = &it[i];
        const flag *fl = a->fl;
        if (i == model) continue;
        if (!a->is_flag) {
            if (o->model)
                return rg_fail(e, RG_USAGE, "%s: a second model to train (the first is '%s'); see %s", a->arg,
                               o->model, see);
            if (strcmp(a->arg, "gpt2") && strcmp(a->arg, "llama"))
                return rg_fail(e, RG_USAGE, "train: '%s' is not a model run-graph trains: gpt2 or llama; see %s",
                               a->arg, see);
            o->model = a->arg;
            o->layer = strcmp(a->arg, "gpt2") == 0 ? RG_GPT2 : RG_LLAMA;
            continue;
        }
        if (!fl) return rg_fail(e, RG_USAGE, "%.*s: unknown flag for train; see %s", a->len, a->arg, see);
        if (!(fl->models & M_TRAIN)) return refuse(fl, "train", see, e);
        if (fl->arg && !a->v) return rg_fail(e, RG_USAGE, "%s: missing its value (%s); see %s", fl->name, fl->arg, see);
        if (!fl->arg && a->has_eq) return rg_fail(e, RG_USAGE, "%s takes no value; see %s", fl->name, see);
        const flag_id id = (flag_id)(fl - FLAGS);
        given[id] = 1;
        if (!apply(o, id, a->v, false, e)) return false;
    }
    if (!o->model) return rg_fail(e, RG_USAGE, "train: give the model to train: gpt2 or llama; see %s", see);
    static const flag_id REQUIRED[] = {F_WEIGHTS, F_DATA, (flag_id)RG_H, F_OPTIMIZER, F_LR};
    for (size_t i = 0; i < sizeof REQUIRED / sizeof *REQUIRED; i++)
        if (!given[REQUIRED[i]])
            return rg_fail(e, RG_USAGE, "train %s: %s %s is required; see %s", o->model, FLAGS[REQUIRED[i]].name,
                           FLAGS[REQUIRED[i]].arg, see);
    if (o->layer == RG_GPT2) {
        static const flag_id LLAMA_ONLY[] = {(flag_id)RG_G, F_ROPE_THETA, F_RMS_EPS};
        for (size_t i = 0; i < sizeof LLAMA_ONLY / sizeof *LLAMA_ONLY; i++)
            if (given[LLAMA_ONLY[i]])
                return rg_fail(e, RG_USAGE, "%s is for train llama (GPT-2 has %s); see %s", FLAGS[LLAMA_ONLY[i]].name,
                               LLAMA_ONLY[i] == F_RMS_EPS ? "LayerNorm, eps 1e-5"
                               : LLAMA_ONLY[i] == F_ROPE_THETA ? "learned positions, wpe.weight"
                                                               : "a key/value head per query head", see);
    }
    static const flag_id ADAMW_ONLY[] = {F_BETAS, F_EPS}, SGD_ONLY[] = {F_MOMENTUM};
    for (int i = 0; i < 2; i++)
        if (o->sgd && given[ADAMW_ONLY[i]])
            return rg_fail(e, RG_USAGE, "%s is AdamW's: give --optimizer adamw, or drop it; see %s",
                           FLAGS[ADAMW_ONLY[i]].name, see);
    if (!o->sgd && given[SGD_ONLY[0]])
        return rg_fail(e, RG_USAGE, "--momentum is SGD's: give --optimizer sgd, or drop it; see %s", see);
    return rg_check_output_paths(o, e);
}

/* --parallel heads|context (without --decode): mode "heads" or "context". */
static bool parse_parallel(const item *it, int n, const char *mode, rg_opts *o, rg_err *e) {
    const unsigned mine = strcmp(mode, "heads") == 0 ? M_HEADS : M_CONTEXT;
    for (int i = 0; i < n; i++) {
        const item *a = &it[i];
        const flag *fl = a->fl;
        if (fl == &FLAGS[F_PARALLEL]) continue;
        if (fl == &FLAGS[F_HELP]) {
            o->help = o->done = true;
            return true;
        }
        if (!a->is_flag) {
            if (o->model) return rg_fail(e, RG_USAGE, "%s: a second MODEL (the first is '%s')", a->arg, o->model);
            if (strcmp(a->arg, "mha") && strcmp(a->arg, "gqa") && strcmp(a->arg, "llama"))
                return rg_fail(e, RG_USAGE, "--parallel %s runs mha, gqa or llama, not '%s'", mode, a->arg);
            o->model = a->arg;
            o->kind = strcmp(a->arg, "gqa") == 0 ? RG_GQA : RG_MHA; /* llama: see o->model */
            continue;
        }
        char list[256];
        if (!fl)
            return rg_fail(e, RG_USAGE, "%.*s: not a flag of --parallel %s (see run-graph --parallel %s --help)",
                           a->len, a->arg, mode, mode);
        if (!(fl->models & mine))
            return rg_fail(e, RG_USAGE, "%s: not a flag of --parallel %s (it applies to %s; see run-graph "
                           "--parallel %s --help)", fl->name, mode, modes_of(fl, list, sizeof list), mode);
        if (!fl->arg && a->has_eq)
            return rg_fail(e, RG_USAGE, "%s takes no value (see run-graph --parallel %s --help)", fl->name, mode);
        if (fl->arg && !a->v) return rg_fail(e, RG_USAGE, "%s: missing its value", fl->name);
        if (!apply(o, (flag_id)(fl - FLAGS), a->v, false, e)) return false;
    }
    if (!o->model) return rg_fail(e, RG_USAGE, "--parallel %s: give the MODEL: mha, gqa or llama", mode);
    if (o->non_strict && !o->weights) return rg_fail(e, RG_USAGE, "--non-strict is for --weights");
    return true;
}

static bool parse(int argc, char **argv, item *it, rg_opts *o, rg_err *e) {
    /* The arguments once: each flag with its value (the table says which
     * take one), the rest positional (all of them after "--"). */
    int n = 0, par = -1, decode = -1, model = -1, cache = -1;
    bool only_positional = false;
    for (int i = 1; i < argc; i++) {
        item *a = &it[n];
        a->arg = argv[i];
        if (only_positional || a->arg[0] != '-' || !a->arg[1]) {
            if (model < 0) model = n;
            n++;
            continue;
        }
        if (strcmp(a->arg, "--") == 0) {
            only_positional = true;
            continue;
        }
        if (strcmp(a->arg, "-h") == 0) a->arg = "--help";
        const char *eq = strchr(a->arg, '=');
        a->is_flag = true;
        a->len = eq ? (int)(eq - a->arg) : (int)strlen(a->arg);
        a->has_eq = eq != NULL;
        a->fl = find_flag(a->arg, (size_t)a->len);
        if (a->fl && a->fl->arg) a->v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        const flag_id id = a->fl ? (flag_id)(a->fl - FLAGS) : F_DIM;
        if (a->fl && id == F_PARALLEL && par < 0) par = n;
        if (a->fl && id == F_DECODE && decode < 0) decode = n;
        if (a->fl && id == F_CACHE_PER_RANK && cache < 0) cache = n;
        n++;
    }
    /* The mode: --parallel's, else a layer named as MODEL, else the single process. */
    if (par >= 0) {
        const char *mode = it[par].v;
        if (!mode || !mode[0]) return rg_fail(e, RG_USAGE, "--parallel: missing its value, heads or context");
        if (strcmp(mode, "heads") != 0 && strcmp(mode, "context") != 0)
            return rg_fail(e, RG_USAGE, "--parallel: '%s' is not heads or context", mode);
        if (!rg_parallel_built(mode, e)) return false;
        o->mode = strcmp(mode, "heads") == 0 ? RG_MODE_HEADS : decode >= 0 ? RG_MODE_CONTEXT_DECODE : RG_MODE_CONTEXT;
        if (o->mode != RG_MODE_CONTEXT_DECODE) return parse_parallel(it, n, mode, o, e);
        /* the single process's flags for mha and gqa, and --cache-per-rank */
        for (int i = cache; i >= 0 && i < n; i++)
            if (it[i].fl == &FLAGS[F_CACHE_PER_RANK]) {
                if (!it[i].v) return rg_fail(e, RG_USAGE, "--cache-per-rank: missing its value");
                if (!apply(o, F_CACHE_PER_RANK, it[i].v, true, e)) return false;
            }
        for (int i = 0; i < n; i++)
            if (it[i].fl == &FLAGS[F_HELP]) {
                o->help = o->done = true;
                return true;
            }
        for (int k = 0; model >= 0 && k < 3; k++)
            if (strcmp(it[model].arg, LAYER_NAME[k]) == 0)
                return rg_fail(e, RG_USAGE, "--parallel context --decode runs mha or gqa, not '%s'", it[model].arg);
        if (!parse_single(it, n, true, o, e)) return false;
        if (o->kind != RG_MHA && o->kind != RG_GQA)
            return rg_fail(e, RG_USAGE, "--parallel context --decode runs mha or gqa, not '%s'", o->model);
        return true;
    }
    if (model >= 0 && strcmp(it[model].arg, "train") == 0) {
        o->mode = RG_MODE_TRAIN;
        return parse_train(it, n, model, o, e);
    }
    for (int k = 0; model >= 0 && k < 3; k++)
        if (strcmp(it[model].arg, LAYER_NAME[k]) == 0) {
            o->mode = RG_MODE_LAYER;
            return parse_layer(it, n, model, o, e);
        }
    return parse_single(it, n, false, o, e);
}

bool rg_parse_args(int argc, char **argv, rg_opts *o, rg_err *e) {
    *o = (rg_opts){.threads = 0, .repeat = 1, .layers = 1};
    item *it = calloc((size_t)argc + 1, sizeof *it);
    if (!it) return rg_fail(e, RG_RUNTIME, "out of memory");
    const bool ok = parse(argc, argv, it, o, e);
    free(it);
    return ok;
}

void rg_opts_free(rg_opts *o) {
    free(o->valid_lens);
    for (int i = 0; i < o->n_bind; i++) free((char *)o->bind[i].name);
    *o = (rg_opts){0};
}
