/*
 * ggmlite/mpi.h: attention blocks split across processes (library
 * ggmlite::mpi, built with -DGGMLITE_MPI=ON; Open MPI, Debian's openmpi-bin
 * and libopenmpi-dev). The engine, the models and io know nothing of MPI.
 *
 * Head-parallel (tensor-parallel) blocks. Rank r of P holds a share of the
 * query heads, the key/value heads they read, the matching rows of W_q, W_k,
 * W_v (output features) and columns of W_o (input features); for the LLaMA
 * layer also rows of gate_proj/up_proj and columns of down_proj. Each rank
 * computes a partial output [B, T, D] (its heads through its columns of W_o);
 * the block's output is the sum of the P partials, one sum per block (the
 * LLaMA layer: one after the attention, one after the MLP).
 *
 *     gml_tp_share s;                  // rank r's share of H, G, F
 *     gml_tp_share_of(H, G, F, P, r, &s, err, sizeof err);
 *     gml_tensor *part = gml_tp_attn(ctx, &cfg, &w, x, NULL, &s, r == 0); // [B, T, D]
 *     ... build, plan, compute; then, on every rank,
 *     gml_mpi_sum_ordered(MPI_COMM_WORLD, data, B * T * D, false, err, sizeof err);
 *     // rank 0 now holds the block's output
 *
 * The split. Query heads go in contiguous ranges: rank r takes heads
 * [floor(r H / P), floor((r+1) H / P)), H / P each when P divides H, else
 * sizes differing by one (H = 8, P = 3: 2, 3, 3). When P divides G, rank r
 * takes kv heads [r G / P, (r+1) G / P): each kv head on one rank. Otherwise
 * a rank takes every kv head one of its query heads reads (head h reads
 * h / (H/G)), so a kv head whose group straddles two ranks is projected by
 * both (replicated; G = 2, P = 3, H = 8: rank 1 takes query heads 2..4 and
 * kv heads 0 and 1). The MLP's F rows are split as the query heads. Every
 * rank needs at least one query head and one MLP row: P <= H, P <= F.
 *
 * The builders use public ops only, and the weights as given: the shares
 * are views (rows of W_q: a contiguous block; columns of W_o: a strided
 * view, never a copy), so weights mapped from a safetensors file
 * (gml_safetensors_open) are read only where a rank's share lies. Biases:
 * the q/k/v (gate/up) biases are sliced like their rows; the output bias
 * (b_o, down_proj.bias) is added by the rank given with_out_bias (one rank,
 * e.g. rank 0), so that the sum holds it once.
 *
 * (Context-parallel decoding, the KV cache sharded by position over the
 * ranks: gml_kv_shard and gml_shard_*, in the section at the end.)
 *
 * Misuse (MISUSE in docs/contracts.md, as <ggmlite/ggmlite.h> states it):
 * every function here given NULL for a pointer argument returns its error
 * value (NULL, false, 0, -1 for gml_kv_shard_owner, GML_ERR_INVALID, a
 * zero gml_kv_shard_params, a step without positions) with the message
 * "<function>: <arg> is NULL", kept on ctx when the call has a live one,
 * else for the calling thread (gml_last_error(NULL)), and written into err
 * too where the function takes one; or does nothing (gml_tp_range, the
 * freers). The check comes before any MPI call, so it holds before
 * MPI_Init as well. May be NULL: err (no message written there), optional
 * tensors (positions, x_new of a step with no new rows), the buffers of a
 * collective when their count is 0, gml_mpi_gather_f32's recv on a rank
 * other than root (root's is not checked: telling it would take a
 * collective), gml_mpi_agree's msg and out and gml_mpi_weights_agree's
 * wctx (see there). A freed
 * context is refused by the engine calls these make; a tensor of a freed
 * context, a freed gml_kv_shard or gml_cp cannot be told from a live one.
 *
 * Numerics. Every query head is computed as the single-process block
 * computes it (same ops, same shapes per head). The output projection
 * differs: a single process sums over all H*d_k inputs of W_o in one dot
 * product; here each rank sums over its share and the partials are added in
 * rank order. The result is equal within rounding (run-graph's tests: within
 * 1e-6 of the largest output), and bitwise equal for P = 1.
 */
#ifndef GGMLITE_MPI_H
#define GGMLITE_MPI_H

#include <ggmlite/attention.h>
#include <ggmlite/layers.h>

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One rank's share of a head-parallel block. */
typedef struct gml_tp_share {
    int rank, n_ranks;
    int n_heads, n_kv_heads; /* H, G of the whole block */
    int h0, nh;              /* query heads [h0, h0 + nh) */
    int g0, ng;              /* kv heads [g0, g0 + ng) it projects */
    bool kv_split;           /* P divides G: each kv head on exactly one rank */
    int64_t f0, nf;          /* MLP rows [f0, f0 + nf) (0, 0 when F is 0) */
} gml_tp_share;

/* Rank `rank` of n_ranks's share of H query heads, G kv heads (0: H) and F
 * MLP rows (0: no MLP). GML_ERR_INVALID with a message in err when G does
 * not divide H, or H or F (when > 0) is smaller than n_ranks, e.g.
 *     heads 2 cannot be split over 3 ranks: each rank needs a query head */
GML_API gml_status gml_tp_share_of(int n_heads, int n_kv_heads, int64_t ffn, int n_ranks, int rank,
                           gml_tp_share *s, char *err, size_t err_size);

/* [start, start + len): the contiguous share of n items of rank r of p
 * (start floor(r n / p)). */
GML_API void gml_tp_range(int64_t n, int p, int r, int64_t *start, int64_t *len);

/* Self-attention's partial output: x [B, T, D] -> [B, T, D], the rank's
 * heads through its columns of W_o (+ b_o when with_out_bias). cfg.dims
 * gives the whole block's H and G (d_model: 0 or D); w the whole block's
 * weights (w_q, w_k, w_v, w_o and their biases, or nn.MultiheadAttention's
 * in_proj_weight/in_proj_bias; sinks [H]); positions as gml_attn_inputs'
 * (NULL: 0..T-1). Everything of cfg.score and cfg.pos applies except ALiBi
 * (its slopes depend on the head's place in all H), refused as are
 * GPT-2's Conv1D weights, bias_k/bias_v and add_zero_attn. The graph is
 * cfg.graph's (fused unless UNFUSED); want_weights is refused. NULL on
 * failure, with a message on ctx naming "tp_attn", the tensor and shapes. */
GML_API gml_tensor *gml_tp_attn(gml_context *ctx, const gml_attn_config *cfg, const gml_attn_weights *w,
                        gml_tensor *x, gml_tensor *positions, const gml_tp_share *s,
                        bool with_out_bias);

/* The LLaMA layer (layers.h) split in two halves, around the two sums:
 *     a = sum over ranks of gml_tp_llama_attn(x)      [B, T, D]
 *     h = x + a
 *     m = sum over ranks of gml_tp_llama_mlp(h)       [B, T, D]
 *     out = h + m
 * gml_tp_llama_attn: RMSNorm (replicated on every rank), then the rank's
 * heads (rope, causal, cfg's window, softcap, sinks) through its columns of
 * o_proj. gml_tp_llama_mlp: RMSNorm of h, then silu(gate) * up on the
 * rank's F rows through its columns of down_proj. w: the whole layer's
 * weights (gml_llama_weights_find). NULL on failure, the message naming
 * "tp_llama" and the HF tensor name. */
GML_API gml_tensor *gml_tp_llama_attn(gml_context *ctx, const gml_llama_config *cfg,
                              const gml_llama_weights *w, gml_tensor *x, gml_tensor *positions,
                              const gml_tp_share *s, bool with_out_bias);
GML_API gml_tensor *gml_tp_llama_mlp(gml_context *ctx, const gml_llama_config *cfg,
                             const gml_llama_weights *w, gml_tensor *h, const gml_tp_share *s,
                             bool with_out_bias);

/* ---- MPI ------------------------------------------------------------------ */

/* The sum of every rank's buf[0..n) in rank order, (((p_0 + p_1) + p_2) + ...)
 * in float, into rank 0's buf (all: into every rank's buf, by a broadcast
 * from rank 0). Collective over comm. The order is fixed, so the bits do not
 * depend on the MPI library's reduction algorithm (MPI_Allreduce's order and
 * tree are implementation-defined and change with P and the message size):
 * rank 0 receives the partials one by one (MPI_Recv from rank 1, 2, ...)
 * and adds each as it comes. GML_OK, or GML_ERR_IO with the MPI error in err
 * (also GML_ERR_NOMEM on rank 0). */
GML_API gml_status gml_mpi_sum_ordered(MPI_Comm comm, float *buf, size_t n, bool all, char *err,
                               size_t err_size);

/* Broadcast of n floats (any n, in chunks MPI's int counts take). */
GML_API gml_status gml_mpi_bcast_f32(MPI_Comm comm, float *buf, size_t n, int root, char *err,
                             size_t err_size);

/* The status exchange: every rank says whether its step worked (ok) and,
 * if not, why (msg). Collective over comm: returns true on every rank when
 * every rank was ok; otherwise false on every rank, with out = "rank R:
 * <R's msg>" for the lowest failing rank R ("rank R (and 2 more): ..." when
 * several failed). Call it after each step that can fail on one rank only
 * (loading a slice, computing), before the next collective, so a failure is
 * an error on every rank and never a hang. msg is cut at 1023 bytes; msg
 * NULL or "" is "failed (no message)"; out NULL (or out_size 0): not
 * written. */
GML_API bool gml_mpi_agree(MPI_Comm comm, bool ok, const char *msg, char *out, size_t out_size);

/* The ranks agree on their weights before computing (mpi/weights.c). On a
 * cluster each rank reads its own copy of a checkpoint; a stale or other
 * copy on one rank would otherwise give a wrong result with no error. Each
 * rank describes every tensor of wctx (its whole weights as it loaded them,
 * before any slicing to its share): name, type, shape and the XXH3-64 digest
 * of its bytes (row-major; a strided tensor hashes as its contiguous copy).
 * Rank 0 broadcasts its list; every other rank compares its own with it, in
 * rank 0's order (then any name rank 0 lacks). Collective over comm, called
 * by every rank after loading (wctx NULL: no tensors). Every rank returns
 * GML_OK when every rank holds the same names, and for each name the same
 * type, shape and digest; otherwise every rank returns GML_ERR_INVALID with
 * the same message in err, naming each rank that differs from rank 0 (the
 * first 4, then how many more), its first differing tensor and how, e.g.
 *     the ranks' weights differ (every rank must read the same checkpoint):
 *     rank 1: tensor 'mlp.gate_proj.weight' is f32 [96,64], rank 0's is f32
 *     [128,64] (shape); rank 2: tensor 'w_q.weight' f32 [64,64] has XXH3
 *     5d1c..., rank 0's 0e27... (digest: same name and shape, other values)
 * ("rank 2 has no tensor 'x' ... (names)", "... (dtype)" likewise). A
 * tensor without data (no_alloc) is an error on every rank. Reads every
 * byte of wctx once (XXH3 runs at memory speed: mapped weights are paged
 * in); P = 1 returns GML_OK at once. */
GML_API gml_status gml_mpi_weights_agree(MPI_Comm comm, const gml_context *wctx, char *err,
                                         size_t err_size);

/* ---- context-parallel decoding: a KV cache sharded by position (shard.c) ---
 *
 * The KV cache of one attention block, positions 0 .. P C - 1, cut into P
 * shards of C positions (C, the capacity per rank, may be much smaller than
 * the whole context: P C is what the job holds). Rank r's shard K, V
 * [B, G, C, d_k] (f32, f16 or bf16) holds positions [r C, (r + 1) C): its
 * row i is position r C + i. A context fills rank 0's shard, then rank 1's,
 * and so on. Why contiguous ranges in rank order: a shard's keys are then
 * key0 + row with key0 = r C fixed when the graph is built, so
 * gml_flash_attn_partial applies causal, a window and ALiBi at the keys'
 * absolute positions with no mask; merging the ranks' partials in rank order
 * is merging them in key order; each position is written once, by its
 * owner, and nothing ever moves between ranks. The cost: while the context
 * is shorter than P C the last ranks hold nothing and attend over nothing
 * (the work per token goes with the fullest shard); with C = ceil(L / P)
 * for a context of L positions (run-graph's default) every shard is full at
 * the end.
 *
 * A step of n new tokens at positions [L, L + n) (L: the context so far, the
 * same on every rank): each rank projects K and V of the new tokens it holds
 * (n_new of them, 0 on the others; rope at their absolute positions) and
 * writes them into its shard (gml_set_rows at run-time rows, as kv_cache.h),
 * and every rank projects the queries of the step's last n_query tokens
 * (rope at their positions) and attends them over its shard's keys: a
 * partial [B, H, n_query, d_k + 2] (gml_flash_attn_partial: o, m, l). The
 * partials go to one rank (gml_mpi_gather_f32: placed in rank order, no
 * arithmetic), which merges them in rank order, finishes with the sinks and
 * applies W_o (gml_shard_attn_out). The graphs are built once and computed
 * at every position: positions, rows and valid lengths are run-time data
 * that gml_kv_shard_step_compute fills.
 *
 *     gml_kv_shard *s = gml_kv_shard_new((gml_kv_shard_params){.batch = B, .n_kv_heads = G,
 *         .d_k = D / H, .capacity = C, .rank = r, .n_ranks = P}, err, sizeof err);
 *     // two one-token graphs: rank r writes the token's K, V (n_new 1) or only reads (0)
 *     gml_kv_shard_step st = gml_kv_shard_step_new(ctx, s, owner ? 1 : 0, 1);
 *     gml_tensor *part = gml_shard_attn_partial(ctx, &cfg, &w, owner ? x : NULL, x, &st);
 *     ... build, plan; per token (x broadcast), on every rank:
 *     gml_kv_shard_step_compute(&st, g, 1, threads, err, sizeof err); // the graph of
 *     //   gml_kv_shard_owned(s, 1) new rows
 *     gml_mpi_gather_f32(comm, part's data, n, parts, 0, err, sizeof err);
 *     // rank 0: out = gml_shard_attn_out(ctx, &cfg, &w, parts, P)   [B, n_query, D]
 *
 * A prompt of T tokens is one step with n = T: each rank writes the prompt
 * rows it holds and attends the last token's query (n_query 1), whose merged
 * output is the prompt's last output.
 *
 * Numerics. The projections and rope are the single-process decode step's
 * ops on the same rows (a prompt chunk of at most 4 rows takes the
 * matrix-vector kernels instead of the GEMM: within rounding). The attention
 * is flash_attn's split into the ranks' pieces, merged by the log-sum-exp
 * merge in key order: within rounding of the single-process decode
 * (tests/test_shard.c: within 1e-6 of the largest output, every ISA), the
 * same bits on every run, thread count and timing (the
 * order is fixed). One shard holding the whole context (P = 1, C = the
 * single-process cache's length) gives the single-process decode step's
 * bits on the fast ISAs: the same flash_attn decode kernels over the same
 * keys. */

/* One rank's shard of a sharded cache: B, G, d_k as gml_kv_cache_params;
 * capacity C positions per rank, rank r of n_ranks (P C <= INT32_MAX). */
typedef struct gml_kv_shard_params {
    int64_t batch;   /* B */
    int n_kv_heads;  /* G */
    int64_t d_k;     /* per-head size of keys and values */
    int64_t capacity; /* C: positions per rank */
    gml_type type;   /* of K and V: GML_F32 (0), GML_F16 or GML_BF16 (rounded as they are
                        written, as gml_kv_cache_params.type; the partials read them as
                        flash_attn does) */
    int rank, n_ranks;
} gml_kv_shard_params;

typedef struct gml_kv_shard gml_kv_shard;

/* A shard of zeros, context length 0. NULL, with a message in err naming
 * "kv_shard" and the bad value, on bad parameters or no memory. */
GML_API gml_kv_shard *gml_kv_shard_new(gml_kv_shard_params p, char *err, size_t err_size);
GML_API void gml_kv_shard_free(gml_kv_shard *s);
GML_API gml_kv_shard_params gml_kv_shard_get_params(const gml_kv_shard *s);
/* The shard's K and V, [B, G, C, d_k] of its type. */
GML_API gml_tensor *gml_kv_shard_k(const gml_kv_shard *s);
GML_API gml_tensor *gml_kv_shard_v(const gml_kv_shard *s);
/* The whole context's length so far (all ranks: the next token's position). */
GML_API int64_t gml_kv_shard_len(const gml_kv_shard *s);
/* The first position this rank holds (rank C), and how many of the context's
 * positions it holds now (0 .. C). */
GML_API int64_t gml_kv_shard_first(const gml_kv_shard *s);
GML_API int64_t gml_kv_shard_held(const gml_kv_shard *s);
/* The rank holding position pos (pos / C), -1 past P C or below 0. */
GML_API int gml_kv_shard_owner(const gml_kv_shard *s, int64_t pos);
/* How many of the next n positions [L, L + n) this rank holds: the n_new
 * of the step graph to compute for them. */
GML_API int64_t gml_kv_shard_owned(const gml_kv_shard *s, int64_t n);
/* Bytes of K and V: 2 B G C d_k times the type's size. */
GML_API size_t gml_kv_shard_bytes(const gml_kv_shard *s);
/* Keeps the first len positions of the context (0 <= len <= its length;
 * else false, nothing changes); call it on every rank alike. */
GML_API bool gml_kv_shard_truncate(gml_kv_shard *s, int64_t len);

/* The run-time inputs of a step graph: n_new rows written by this rank, the
 * last n_query tokens of the step attended (n_query >= 1). */
typedef struct gml_kv_shard_step {
    gml_kv_shard *shard;
    int64_t n_new, n_query;
    gml_tensor *new_pos; /* i32 [B, n_new]: absolute positions of the rows written (rope),
                            "shard_new_pos"; NULL when n_new is 0 */
    gml_tensor *rows;    /* i32 [B, n_new]: their rows in the shard, "shard_rows" */
    gml_tensor *q_pos;   /* i32 [B, n_query]: the queries' absolute positions, "shard_q_pos" */
    gml_tensor *lens;    /* i32 [B, n_query]: absolute valid lengths, min(q_pos + 1, rank C + C),
                            "shard_lens" */
} gml_kv_shard_step;

/* Makes the step's inputs in ctx, flagged as inputs. On failure .q_pos is
 * NULL and ctx holds the message (n_new outside [0, C], n_query < 1). */
GML_API gml_kv_shard_step gml_kv_shard_step_new(gml_context *ctx, gml_kv_shard *s, int64_t n_new,
                                        int64_t n_query);

/* This rank's partial of a step:
 *     x_new [B, n_new, D] (NULL when n_new is 0): K, V projected, rope at
 *           new_pos, written into the shard at rows;
 *     x_q   [B, n_query, D]: q projected, rope at q_pos, attended over the
 *           shard's keys (after the write) with key0 = rank C
 *     -> [B, H, n_query, d_k + 2] f32 contiguous (o, m, l), named "partial".
 * cfg and w as for gml_attn_decode (kv_cache.h): self-attention, causal
 * bottom-right, fused; window, softcap, ALiBi and rope apply at absolute
 * positions; w->sinks is left to gml_shard_attn_out. G, d_k, B must be the
 * shard's. NULL with a message on ctx naming "shard_attn" otherwise. */
GML_API gml_tensor *gml_shard_attn_partial(gml_context *ctx, const gml_attn_config *cfg,
                                   const gml_attn_weights *w, gml_tensor *x_new, gml_tensor *x_q,
                                   const gml_kv_shard_step *step);

/* The block's output from the ranks' partials: parts f32 [P B, H, n_query,
 * d_k + 2], rank r's partial in rows [r B, (r + 1) B) (as gml_mpi_gather_f32
 * places them) -> merged in rank order (gml_attn_partial_merge), finished
 * with w->sinks (gml_attn_partial_finish), through W_o (+ b_o): out [B,
 * n_query, D], named "out". NULL with a message on ctx otherwise. */
GML_API gml_tensor *gml_shard_attn_out(gml_context *ctx, const gml_attn_config *cfg,
                               const gml_attn_weights *w, gml_tensor *parts, int n_ranks);

/* The LLaMA layer (layers.h) as a sharded decode step: the rank's partial of
 * the attention of RMSNorm(x) (rope at the positions, causal, cfg's window
 * and softcap; x_new and x_q as gml_shard_attn_partial's, before the norm),
 * and, on the merging rank, the layer's output from the partials and the
 * step's queries' inputs x_q [B, n_query, D]:
 *     h = x_q + W_o(merged attention)   out = h + MLP(RMSNorm(h))
 * as gml_llama_decode computes them over one cache. NULL with a message on
 * ctx ("shard_llama: ...") otherwise. */
GML_API gml_tensor *gml_shard_llama_partial(gml_context *ctx, const gml_llama_config *cfg,
                                    const gml_llama_weights *w, gml_tensor *x_new, gml_tensor *x_q,
                                    const gml_kv_shard_step *step);
GML_API gml_tensor *gml_shard_llama_out(gml_context *ctx, const gml_llama_config *cfg,
                                const gml_llama_weights *w, gml_tensor *parts, int n_ranks,
                                gml_tensor *x_q);

/* Fills the step's inputs for n new tokens at positions [L, L + n) (L =
 * gml_kv_shard_len) and computes g, a graph holding the step's
 * gml_shard_attn_partial; on success the context's length becomes L + n.
 * Call it on every rank for every step (the length is kept by each).
 * GML_ERR_INVALID with a message in err, nothing computed, when L + n
 * passes P C ("the context of ... positions would pass the sharded cache's
 * P x C = ..."), when this rank holds a number of those positions other
 * than step->n_new, or n < n_query; compute failures pass through with
 * gml_graph_error's message. */
GML_API gml_status gml_kv_shard_step_compute(gml_kv_shard_step *step, gml_graph *g, int64_t n,
                                     int n_threads, char *err, size_t err_size);

/* MPI_Gather of n floats from every rank into root's recv (rank r's at
 * recv + r n; recv may be NULL on the other ranks): no arithmetic, so the
 * result does not depend on the MPI library's algorithm. GML_ERR_IO with
 * the MPI error in err; GML_ERR_INVALID when n exceeds MPI's int count. */
GML_API gml_status gml_mpi_gather_f32(MPI_Comm comm, const float *send, size_t n, float *recv, int root,
                              char *err, size_t err_size);
/* ---- context-parallel prefill (ring attention), mpi/ring.c ----------------- */

/* Self-attention over a sequence split by rows across the ranks of comm
 * (every head on every rank; weights replicated, e.g. mapped):
 *
 *     gml_cp *cp = gml_cp_attn_create(MPI_COMM_WORLD, &cfg, &w, GML_CP_CONTIGUOUS, B, T, D,
 *                                     err, sizeof err);
 *     int64_t t0[2], n[2];
 *     gml_cp_rows(cp, t0, n);                   // this rank's rows [t0, t0 + n) (1 range)
 *     ... fill gml_cp_input(cp): x[:, t0:t0+n, :] as [B, n, D] f32
 *     gml_cp_run(cp, n_threads, &stats, err, sizeof err);
 *     ... gml_cp_output(cp): the block's output rows [B, n, D]
 *     gml_cp_free(cp);
 *
 * Layout (GML_CP_CONTIGUOUS): rank r of P holds rows gml_tp_range(T, P, r)
 * (T/P each when P divides T, else sizes differing by one); T >= P. Or
 * GML_CP_ZIGZAG (below): two segments per rank. It projects q, k, v of
 * its rows (the LLaMA layer: after RMSNorm), rope at the absolute
 * positions t0.., and keeps its own K/V as chunk r. The ring: at step s
 * (0 .. P-1) the rank holds chunk (r - s) mod P; it first posts the next
 * exchange (MPI_Isend of that chunk to rank r+1, MPI_Irecv of the next from
 * r-1, two buffers in turn), then computes gml_flash_attn_partial of its
 * queries over the chunk in hand (key0 = the chunk's first row; causal,
 * window and ALiBi from the absolute positions), kept in one buffer per
 * chunk. Causal (and window): a chunk no query of the rank can see is not
 * computed (it still travels). With two segments per rank each pair
 * (query segment, key segment) is a partial of its own, skipped alike.
 * After the last step the kept partials merge in key order, chunk (key
 * segment) 0, 1, ... (gml_attn_partial_merge, left to right; zigzag: per
 * query segment, the two then concatenated by rows), then
 * gml_attn_partial_finish with the sinks, W_o (+ b_o); the
 * LLaMA layer adds the residual and its MLP on the rank's rows.
 *
 * Numerics. The order of every sum is fixed by (T, P) and the shapes, not
 * by arrival order or threads: results are bitwise the same from run to
 * run and at any thread count. P = 1 builds the single-process graph
 * (gml_mha / gml_gqa fused, gml_llama_layer): bitwise the single process.
 * P > 1 differs from it by rounding (the partial/merge path rounds its own
 * way): within 1e-6 of the largest output in the tests.
 *
 * cfg, w as gml_mha / gml_gqa take them (mha, gqa, rope, causal either
 * alignment, window, softcap, scale, ALiBi, sinks, in_proj and Conv1D
 * weights); refused: add_zero_attn, bias_k/bias_v, want_weights. The graph
 * impl is ignored for P > 1 (always the partial ops). Both creates are
 * collective and check everything first, with the single-process block's
 * own messages ("gqa: w_k.weight is ..."): a failure on any rank returns
 * NULL on every rank with err "rank R: <cause>". The weights and config must
 * stay valid while the runner lives. */
typedef struct gml_cp gml_cp;

/* How the rows are laid out over the ranks. CONTIGUOUS: rank r holds
 * gml_tp_range(T, P, r). ZIGZAG (load balance for causal attention): the
 * sequence is cut in 2P segments (gml_tp_range(T, 2P, i)); rank r holds
 * segments r and 2P-1-r (T >= 2P), so every rank's queries see about as
 * many keys: each rank computes 2P + 1 segment pairs instead of rank r's
 * 2r + 1 (in chunk units: rank P-1 doing P times rank 0's work). */
typedef enum gml_cp_layout { GML_CP_CONTIGUOUS = 0, GML_CP_ZIGZAG = 1 } gml_cp_layout;

typedef struct gml_cp_stats {
    double compute_ms; /* in graph computes */
    double wait_ms;    /* in MPI_Waitall for the ring's exchanges (not hidden by compute) */
    double bytes_sent; /* K/V bytes this rank sent */
    int chunks;        /* partials computed (causal: rank r computes r + 1) */
} gml_cp_stats;

GML_API gml_cp *gml_cp_attn_create(MPI_Comm comm, const gml_attn_config *cfg, const gml_attn_weights *w,
                           gml_cp_layout layout, int64_t B, int64_t T, int64_t D, char *err,
                           size_t err_size);
GML_API gml_cp *gml_cp_llama_create(MPI_Comm comm, const gml_llama_config *cfg, const gml_llama_weights *w,
                            gml_cp_layout layout, int64_t B, int64_t T, int64_t D, char *err,
                            size_t err_size);
/* Rank r's rows under a layout: ranges [t0[i], t0[i] + n[i]), ascending;
 * returns their count (1 contiguous, 2 zigzag). gml_cp_rows: this rank's. */
GML_API int gml_cp_rows_of(int64_t T, int P, int r, gml_cp_layout layout, int64_t t0[2], int64_t n[2]);
GML_API int gml_cp_rows(const gml_cp *cp, int64_t t0[2], int64_t n[2]);
/* The rank's input rows [B, n, D] (contiguous f32; n = the ranges' rows, in
 * their order), to fill before a run. */
GML_API float *gml_cp_input(gml_cp *cp);
/* Collective: one forward pass. A compute that fails on one rank lets the
 * ring finish its exchanges and fails on every rank ("rank R: ..."). */
GML_API gml_status gml_cp_run(gml_cp *cp, int n_threads, gml_cp_stats *stats, char *err, size_t err_size);
/* The rank's output rows [B, n, D] after a run (valid until the next run or free). */
GML_API const float *gml_cp_output(const gml_cp *cp);
GML_API void gml_cp_free(gml_cp *cp);

#ifdef __cplusplus
}
#endif
#endif /* GGMLITE_MPI_H */
