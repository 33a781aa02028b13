/* ggmlite's contexts, tensors and op builders. Part of <ggmlite/ggmlite.h>,
 * which includes it. */
#ifndef GGMLITE_TENSOR_H
#define GGMLITE_TENSOR_H

#include <ggmlite/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- context ---------------------------------------------------------- */

typedef struct gml_init_params {
    size_t mem_size;   /* arena size in bytes */
    void *mem_buffer;  /* caller-owned arena, or NULL to malloc one (with data,
                          from 4 MiB on: 2 MiB-aligned, advised onto
                          transparent huge pages on Linux, as a plan's own
                          buffer, so its resident memory counts in 2 MiB
                          pages; environment GGMLITE_HUGEPAGES=0: not); if it
                          is not 64-byte aligned, give 63 bytes more than
                          needed */
    bool no_alloc;     /* headers only: tensors get data == NULL */
} gml_init_params;

/* NULL, with a message naming the size for the thread (gml_last_error(NULL)),
 * if mem_size is over PTRDIFF_MAX (no object is that large: the arena's
 * rounding would wrap), if mem_buffer + mem_size passes the end of the
 * address space, or if the arena cannot be allocated. A context is live
 * from gml_init until gml_free: ggmlite keeps a list of the live ones (under
 * a lock) and looks every context argument up in it by address, reading a
 * context only if it is live (MISUSE). */
GML_API gml_context *gml_init(gml_init_params params);
/* Frees the arena and every tensor in it. A context that is not live
 * (freed already): does nothing, the thread's message says so. Tensors of
 * ctx that a graph or another context's nodes use are gone too: see
 * gml_build_graph. */
GML_API void gml_free(gml_context *ctx);

/* "" when none. ctx NULL: the calling thread's message, of the last call
 * that had no live context to keep it (gml_init, a NULL or freed context,
 * a NULL graph, ...). A ctx that is not live: a message saying so. */
GML_API const char *gml_last_error(const gml_context *ctx);
GML_API void gml_clear_error(gml_context *ctx);             /* ctx NULL: the thread's */
/* For builders of your own (as the attention blocks of <ggmlite/attention.h>
 * are): records a message on ctx as ggmlite's builders do, replacing any
 * earlier one, and returns NULL, so a builder can report a mistake with
 *     char s[GML_SHAPE_MAX];
 *     if (x->ne[3] % 2) return gml_set_error(ctx, "my_rope(x): odd last dim: %s",
 *                                            gml_format_shape(x, s, sizeof s));
 * and gml_build_graph then refuses the context, as for any builder error.
 * The message is cut at 511 bytes. ctx NULL: the message is the thread's
 * (gml_last_error(NULL)). gml_set_error_v takes a va_list, for wrappers of
 * your own. */
GML_API gml_tensor *gml_set_error(gml_context *ctx, const char *fmt, ...) GML_PRINTF(2, 3);
GML_API gml_tensor *gml_set_error_v(gml_context *ctx, const char *fmt, va_list ap) GML_PRINTF(2, 0);

GML_API size_t gml_used_mem(const gml_context *ctx);     /* arena bytes in use */
/* Bytes an allocating arena needs for every tensor created so far (headers
 * and data), whether or not this context allocates data. Build once with
 * no_alloc, ask, then make an arena of that size. */
GML_API size_t gml_mem_required(const gml_context *ctx);
GML_API size_t gml_tensor_overhead(void);                /* arena bytes per header */
GML_API bool gml_get_no_alloc(const gml_context *ctx);

/* ---- tensors ---------------------------------------------------------- */

/* New leaf tensor, contiguous, shape ne[0..n_dims-1] outermost first.
 * Data is uninitialized (NULL in a no_alloc context). */
GML_API gml_tensor *gml_new_tensor(gml_context *ctx, gml_type type, int n_dims, const int64_t *ne);
GML_API gml_tensor *gml_new_tensor_1d(gml_context *ctx, gml_type type, int64_t n0);
GML_API gml_tensor *gml_new_tensor_2d(gml_context *ctx, gml_type type, int64_t n0, int64_t n1);
GML_API gml_tensor *gml_new_tensor_3d(gml_context *ctx, gml_type type, int64_t n0, int64_t n1, int64_t n2);
GML_API gml_tensor *gml_new_tensor_4d(gml_context *ctx, gml_type type, int64_t n0, int64_t n1,
                              int64_t n2, int64_t n3);

GML_API gml_tensor *gml_set_name(gml_tensor *t, const char *name);  /* returns t (name NULL: t, its name kept) */
GML_API const char *gml_get_name(const gml_tensor *t);       /* t NULL: "(null)" */
GML_API gml_tensor *gml_get_tensor(gml_context *ctx, const char *name); /* first with name */
/* Every tensor of a context in creation order:
 *     for (gml_tensor *t = gml_get_first_tensor(ctx); t; t = gml_get_next_tensor(ctx, t))
 * gml_get_next_tensor gives NULL (with a message) for a t not of ctx. */
GML_API gml_tensor *gml_get_first_tensor(const gml_context *ctx);
GML_API gml_tensor *gml_get_next_tensor(const gml_context *ctx, const gml_tensor *t);
GML_API void gml_set_flags(gml_tensor *t, int flags);                /* ORs GML_FLAG_* */

GML_API const char *gml_op_name(gml_op op);
GML_API int64_t gml_nelements(const gml_tensor *t);
GML_API size_t gml_nbytes(const gml_tensor *t);   /* bytes spanned, from first to last element */
GML_API int64_t gml_dim(const gml_tensor *t, int d); /* size of dim d (negative from the end) */
GML_API bool gml_is_contiguous(const gml_tensor *t);
GML_API bool gml_is_view(const gml_tensor *t);
GML_API bool gml_same_shape(const gml_tensor *a, const gml_tensor *b);
/* Writes "[2,8,10,64]" into buf ("(null)" for t NULL); returns buf. */
GML_API char *gml_format_shape(const gml_tensor *t, char *buf, size_t size);

/* Element access by outermost-first index (n_dims entries, each in
 * [0, size)). Every call is checked, in every build: a NULL tensor or index,
 * an index out of range, the other type (get_f32 of an i32 tensor) or a
 * tensor without data (no_alloc) reads and writes nothing; the getters then
 * return NAN (f32) or INT32_MIN (i32), the setters false. */
GML_API float gml_get_f32(const gml_tensor *t, const int64_t *idx);
GML_API bool gml_set_f32(gml_tensor *t, const int64_t *idx, float v);  /* false: nothing written */
GML_API int32_t gml_get_i32(const gml_tensor *t, const int64_t *idx);
GML_API bool gml_set_i32(gml_tensor *t, const int64_t *idx, int32_t v); /* false: nothing written */

/* ---- builders ------------------------------------------------------------
 * Every call below that takes a ctx makes its result in ctx; its tensor
 * arguments may be tensors of any live context (weights loaded once into a
 * context of their own, a KV cache's): a graph over them then needs each of
 * those contexts alive (gml_build_graph). A tensor whose context was freed,
 * a graph's copy of a header (gml_graph_tensor, a node callback's node) or
 * a header of your own is refused (NULL, message), told by its address
 * without being read (MISUSE). A NULL tensor where one is required gives
 * NULL and keeps the message already on ctx (ERRORS: it says why that input
 * is NULL), or records "gml_add: b is NULL" if there is none. */

/* ---- views (no copy) ---------------------------------------------------- */

/* out: shape ne[0..n_dims-1], byte strides nb[0..n_dims-1], starting offset
 * bytes into a's data. Every element must lie inside a's storage. Elements
 * may repeat (a stride 0) for reading; gml_cpy and gml_set_rows refuse such
 * a view as their destination. */
GML_API gml_tensor *gml_view(gml_context *ctx, gml_tensor *a, int n_dims, const int64_t *ne,
                     const size_t *nb, size_t offset);
/* a contiguous, same element count -> out [ne...]. One entry may be -1. */
GML_API gml_tensor *gml_reshape(gml_context *ctx, gml_tensor *a, int n_dims, const int64_t *ne);
/* a [d0..dn-1] -> out [d_perm[0], ..., d_perm[n-1]] (PyTorch's permute). */
GML_API gml_tensor *gml_permute(gml_context *ctx, gml_tensor *a, const int *perm);
/* a -> a with dims d0 and d1 swapped (negative dims count from the end). */
GML_API gml_tensor *gml_transpose(gml_context *ctx, gml_tensor *a, int d0, int d1);
/* x [.., n, ..] -> out [.., len, ..]: elements start .. start+len-1 along
 * dim, as torch.narrow(x, dim, start, len) (x[.., start:start+len, ..]).
 * A view with x's strides (no copy; writable through gml_cpy/gml_set_rows).
 * dim and start may be negative, counting from the end (start -2: the last
 * two); then 0 <= start, len >= 1, start + len <= n. */
GML_API gml_tensor *gml_slice(gml_context *ctx, gml_tensor *x, int dim, int64_t start, int64_t len);

/* t -> t (a view, nothing computed) that runs after dep: whoever reads the
 * result is ordered after dep. For writes a graph cannot see from the data
 * flow, e.g. a cpy into a slot of a cache that a later node reads whole:
 *     gml_tensor *slot = gml_cpy(ctx, k_new, gml_view(ctx, cache, ...));
 *     gml_tensor *all = gml_after(ctx, cache, slot);  // the cache, slot written */
GML_API gml_tensor *gml_after(gml_context *ctx, gml_tensor *t, gml_tensor *dep);

/* ---- copies ------------------------------------------------------------- */

/* any strides -> contiguous copy, same shape and type (f32, i32, f16, bf16). */
GML_API gml_tensor *gml_cont(gml_context *ctx, gml_tensor *a);
/* Writes a into dst (same shape; dst typically a view into a cache) and
 * returns a view of dst that depends on the copy. Types: the same type, or
 * any pair of f32, f16, bf16 and q8_0, converted as the conversions above
 * do (through f32: f16 -> bf16 is bf16(f32(x)); into q8_0 quantizes each
 * block of 32 along the last dim). Refused (NULL, message)
 * if two elements of dst share memory, or if dst and a share memory, e.g.
 *     cpy(x (transposed), x): the destination overlaps the source:
 *     x (transposed) [64,64] and x [64,64] share storage (source [0,0] and
 *     destination [0,0] share memory; copy the source first: cont)
 * (gml_cpy(ctx, gml_cont(ctx, gml_transpose(ctx, x, 0, 1)), x) transposes x
 * in place). One exception: a with exactly dst's elements (the same storage,
 * offset, shape and strides) is allowed, a copy that moves nothing. See
 * WRITES THAT ALIAS (docs/contracts.md). */
GML_API gml_tensor *gml_cpy(gml_context *ctx, gml_tensor *a, gml_tensor *dst);
/* a [.., n_a, ..], b [.., n_b, ..] (the other sizes equal, one type, f32
 * or i32, any strides) -> out [.., n_a + n_b, ..] contiguous: a then b along
 * dim (negative from the end), as torch.cat([a, b], dim). No broadcasting. */
GML_API gml_tensor *gml_concat(gml_context *ctx, gml_tensor *a, gml_tensor *b, int dim);

/* ---- arithmetic --------------------------------------------------------- */

/* [..., M, K] @ [..., K, N] -> [..., M, N]; 2-D to 4-D, leading dims broadcast.
 * a is f32; b is f32, f16 or bf16 (any strides), or q8_0 as the transpose of
 * a q8_0 weight [N, K] (transpose(w), what gml_linear makes), K then a
 * multiple of 32. f32 accumulation on b's values converted to f32 (q8_0:
 * d * q), never a whole f32 copy of b. More than 4 rows (M, batches
 * folded): bitwise what an f32 b holding the converted values gives. Up to
 * 4 rows against a weight (decoding): the same bits on every ISA and thread
 * count, within a few ulp of sum_k |a b| of the f32 result
 * (docs/contracts.md, "gml_matmul"). */
GML_API gml_tensor *gml_matmul(gml_context *ctx, gml_tensor *a, gml_tensor *b);
/* x [..., in] (1-D to 4-D), w [out, in] (nn.Linear layout), bias [out] or NULL
 * -> [..., out]. w may be f32, f16, bf16 or q8_0 (see gml_matmul); x and
 * bias are f32. */
GML_API gml_tensor *gml_linear(gml_context *ctx, gml_tensor *x, gml_tensor *w, gml_tensor *bias);
/* ---- compute precision (gml_compute, <ggmlite/types.h>; docs/numerics.md)
 * Per op, as ggml's ggml_mul_mat_set_prec: gml_set_compute sets the
 * precision of node op, a matmul (gml_linear's too: with a bias it returns
 * the add, whose src[0] is the matmul) or a flash_attn (F32 or BF16: q, k,
 * v and the softmax weights rounded to bf16, statistics and output f32).
 * GML_OK, or GML_ERR_INVALID with the message on ctx (naming the node, its
 * operands and what is supported) when the node cannot compute in c: an op
 * other than matmul and flash_attn, BF16 with a q8_0 b, INT8 with any b but
 * a q8_0 one (quantize an f32 weight to q8_0 first) or on a flash_attn, a
 * value outside gml_compute. A message is
 * a builder's error: gml_build_graph refuses ctx until gml_clear_error.
 * ctx may be NULL (no message). The choice is stored in the node (graph
 * files write matmul(a, b, compute=bf16), flash_attn(..., compute=bf16));
 * set it before building the graph that computes the node. gml_grad
 * refuses a gradient through a bf16 flash_attn.
 *
 * Per context, as PyTorch's autocast: gml_set_default_compute makes every
 * matmul built on ctx after the call (gml_matmul, gml_linear, the attention
 * blocks' projections, graph files' matmuls without compute=) take c where
 * its b allows it and F32 where it does not (a q8_0 b under BF16, any
 * other b under INT8: q k^T stays f32), and every flash_attn built after
 * it (gml_flash_attn_ext, the fused attention of the blocks and layers)
 * take BF16 under BF16 (F32 under INT8). Nodes built before keep theirs; F32
 * until set. GML_ERR_INVALID (message on ctx) for values outside
 * gml_compute, or a NULL ctx. */
GML_API gml_status gml_set_compute(gml_context *ctx, gml_tensor *op, gml_compute c);
GML_API gml_compute gml_get_compute(const gml_tensor *op); /* F32 for any op but matmul, flash_attn */
GML_API gml_status gml_set_default_compute(gml_context *ctx, gml_compute c);
GML_API gml_compute gml_get_default_compute(const gml_context *ctx); /* F32 for NULL */
/* a + b, a * b: shapes broadcast as in PyTorch (right-aligned, 1 or equal). */
GML_API gml_tensor *gml_add(gml_context *ctx, gml_tensor *a, gml_tensor *b);
GML_API gml_tensor *gml_mul(gml_context *ctx, gml_tensor *a, gml_tensor *b);
/* a - b, a / b: broadcast as add and mul; IEEE float division (x / 0 is
 * +-inf, 0 / 0 NaN), as torch.sub and torch.div. */
GML_API gml_tensor *gml_sub(gml_context *ctx, gml_tensor *a, gml_tensor *b);
GML_API gml_tensor *gml_div(gml_context *ctx, gml_tensor *a, gml_tensor *b);
/* a * s, same shape */
GML_API gml_tensor *gml_scale(gml_context *ctx, gml_tensor *a, float s);

/* ---- elementwise functions (ops/unary.c) -----------------------------------
 * x [...] (any strides) -> [...] contiguous, f applied to each element; may
 * run in place (the planner may give the result x's memory). The reference
 * kernels compute each element in double, rounded once; the fast ones are
 * within 3 ulp of that (docs/contracts.md, "Elementwise functions"). Special values
 * as PyTorch: NaN in, NaN out; silu, gelu, gelu_tanh of -inf are NaN (-inf
 * * 0), of +inf +inf; sigmoid(+-inf) = 1, 0; tanh(+-inf) = +-1. Where
 * PyTorch's float flushes a tiny negative result to -0 (silu, sigmoid of x
 * < -88.7; gelu of x < -5.9) these keep its value. */
GML_API gml_tensor *gml_neg(gml_context *ctx, gml_tensor *x);       /* -x */
GML_API gml_tensor *gml_exp(gml_context *ctx, gml_tensor *x);       /* torch.exp */
GML_API gml_tensor *gml_tanh(gml_context *ctx, gml_tensor *x);      /* torch.tanh */
GML_API gml_tensor *gml_sigmoid(gml_context *ctx, gml_tensor *x);   /* torch.sigmoid */
/* x * sigmoid(x): F.silu; silu(-inf) is NaN (-inf * 0) as in PyTorch */
GML_API gml_tensor *gml_silu(gml_context *ctx, gml_tensor *x);
/* 0.5 x (1 + erf(x / sqrt 2)): F.gelu (exact); gelu(-inf) is NaN */
GML_API gml_tensor *gml_gelu(gml_context *ctx, gml_tensor *x);
/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): F.gelu(approximate='tanh') */
GML_API gml_tensor *gml_gelu_tanh(gml_context *ctx, gml_tensor *x);

/* softmax over the last dim of x*scale + mask, with an optional causal mask.
 * x [..., Tq, Tk]; mask NULL or f32 broadcastable to x (0 keep, -inf drop).
 * Causal: query i sees key j iff j <= i + (Tk - Tq). A key is masked by
 * causality or a -inf mask value (a -inf x does not mask: it is a score that
 * overflowed); masked keys weigh exactly 0 and fully masked rows are all 0.
 * A visible key whose x * scale (+ mask) is NaN or +-inf (a float overflow
 * included), or a +inf or NaN mask value at a visible key, makes its row
 * NaN (MASKS). */
GML_API gml_tensor *gml_softmax(gml_context *ctx, gml_tensor *x, gml_tensor *mask, float scale,
                        bool causal);

/* Where the causal diagonal lies when Tq != Tk. */
typedef enum gml_causal {
    GML_CAUSAL_NONE = 0,
    GML_CAUSAL_BOTTOM_RIGHT = 1, /* query i at position i + Tk - Tq (decoding; gml_flash_attn's causal=true) */
    GML_CAUSAL_TOP_LEFT = 2,     /* query i at position i (PyTorch's is_causal, torch.ones(Tq, Tk).tril()) */
} gml_causal;

/* Options of the attention ops; zero-initialised = none of them. The order
 * in which they shape a score, and what they mask: MASKS, "Options". */
typedef struct gml_attn_opts {
    gml_tensor *mask;       /* f32 additive, broadcastable to the scores [B, H, Tq, Tk], or NULL */
    gml_tensor *valid_lens; /* i32 [B] or [B, Tq]: key j seen iff j < len; or NULL */
    gml_tensor *positions;  /* i32 [B, Tq]: absolute position i' of each query, or NULL; when given,
                               causal, window and alibi use it instead of the alignment rule
                               (a KV-cache step passes its cache rows); any value (a negative
                               one with causal or a window: no key, zeros) */
    gml_tensor *sinks;      /* f32 [H]: one logit per query head in every row's denominator, or NULL */
    gml_causal causal;      /* NONE, BOTTOM_RIGHT or TOP_LEFT */
    int64_t window;         /* W > 0: key j seen iff 0 <= i' - j < W (implies causal: with causal NONE,
                               bottom-right alignment); 0 = no window */
    float softcap;          /* c > 0: scaled score s -> c tanh(s / c), before masks and alibi; 0 = none */
    float alibi_max_bias;   /* > 0: ALiBi, head h's slope from max_bias (8 = the paper's 2^(-8(h+1)/H),
                               BLOOM's rule for H not a power of two, as ggml's max_bias); 0 = none.
                               With causal NONE and no positions, i' = i + Tk - Tq */
} gml_attn_opts;

/* ALiBi slope of head h of H for max_bias (ggml's rule): with n = the
 * largest power of two <= H, m0 = 2^(-max_bias / n), m1 = 2^(-max_bias / 2
 * / n): h < n: m0^(h + 1); else m1^(2 (h - n) + 1). For max_bias 8 that is
 * the paper's 2^(-8 (h + 1) / H) when H is a power of two, and BLOOM's
 * interleaving otherwise. */
GML_API float gml_alibi_slope(float max_bias, int64_t h, int64_t H);

/* softmax with options over x [..., Tq, Tk]; valid_lens, positions, sinks and alibi need
 * x 4-D [B, H, Tq, Tk] (head = dim 1). opts may be NULL. Fails (NULL, message) on window < 0,
 * softcap or alibi_max_bias < 0 or not finite, a causal value outside the enum, sinks not
 * f32 [H], positions not i32 [B, Tq]. A valid length outside [0, Tk] fails compute. */
GML_API gml_tensor *gml_softmax_ext(gml_context *ctx, gml_tensor *x, float scale, const gml_attn_opts *opts);

/* Reductions over the last dim, keeping it as size 1 (keepdim=True; a
 * reshape drops it): x [..., n] -> [..., 1], any strides.
 * sum:  torch.sum(x, -1, keepdim=True)
 * mean: torch.mean(x, -1, keepdim=True)
 * max:  torch.amax(x, -1, keepdim=True) (the values of torch.max(x, -1,
 *       keepdim=True)); a row with a NaN gives NaN.
 * sum and mean add in float within blocks of 256 and in double across them,
 * in one order on every ISA and thread count (bitwise the same result); the
 * reference kernels add in order in double (a few ulp apart). */
GML_API gml_tensor *gml_sum(gml_context *ctx, gml_tensor *x);
GML_API gml_tensor *gml_mean(gml_context *ctx, gml_tensor *x);
GML_API gml_tensor *gml_max(gml_context *ctx, gml_tensor *x);

/* Normalizations over the last dim d: x [..., d] (any strides), w and b [d]
 * f32 or NULL (none) -> [..., d] contiguous; eps finite, >= 0.
 * rms_norm:   y = x / sqrt(mean(x^2) + eps) * w, as Hugging Face's
 *             LlamaRMSNorm in float32 (x * rsqrt(var + eps), then * w).
 * layer_norm: y = (x - mean) / sqrt(var + eps) * w + b with the biased
 *             variance, as torch.nn.LayerNorm (normalized_shape [d]).
 * The statistics are summed in float within blocks of 256 and in double
 * across them (layer_norm's variance in a second pass over x - mean), the
 * inverse root in double; each y is then formed in float in the order
 * above. Bitwise the same on every ISA and thread count. A NaN in a row
 * makes the row NaN; so does an inf for layer_norm, while rms_norm gives NaN
 * at the inf and 0 (times w) elsewhere in its row: x * rsqrt(inf), as
 * PyTorch; an |x| above about 1.8e19 squares to inf in float, as in
 * PyTorch, with the same effect. Graph files:
 * rms_norm(x, w, eps=1e-6), layer_norm(x, w, b, eps=1e-5), w and b may be
 * none. */
GML_API gml_tensor *gml_rms_norm(gml_context *ctx, gml_tensor *x, gml_tensor *w, float eps);
GML_API gml_tensor *gml_layer_norm(gml_context *ctx, gml_tensor *x, gml_tensor *w, gml_tensor *b,
                           float eps);

/* PyTorch's repeat_interleave(x, repeats, dim): each slice along dim is
 * repeated `repeats` times in place. [.., n, ..] -> [.., n*repeats, ..] */
GML_API gml_tensor *gml_repeat_interleave(gml_context *ctx, gml_tensor *x, int repeats, int dim);

/* table [N, d] f32, f16, bf16 or q8_0 (rows converted to f32), idx i32 of
 * any shape [...] (up to 3-D) -> [..., d] f32:
 * out[..., :] = table[idx[...], :]. An index outside [0, N) fails compute. */
GML_API gml_tensor *gml_get_rows(gml_context *ctx, gml_tensor *table, gml_tensor *idx);

/* Scatter, the inverse of get_rows: writes the rows of src into dst at the
 * row indices idx and returns a view of all of dst that stands for "dst after
 * the write" (read it, not dst, so the graph orders the readers after it).
 * dst [.., N, d] f32 or i32 (any strides; typically a KV cache), src [.., n,
 * d] of its type with the same leading dims (or f32 src rows into an f16 or
 * bf16 dst: each element rounded as gml_fp32_to_fp16 / gml_fp32_to_bf16,
 * the same bits on every ISA: a half-precision KV cache), idx i32 [n] (every slice alike) or [A, n] (slice
 * [a, ...] uses row a; A = dst's first dim):
 *     dst[a, .., idx[a, i], :] = src[a, .., i, :]
 * An index outside [0, N) fails compute (nothing is written). An index may
 * repeat: the last src row given for it wins (for idx [n], in every slice;
 * for [A, n], in slice a by idx[a, :]), whatever the thread count and ISA,
 * since each slice of dst is written by one thread in index order.
 * Refused (NULL, message) if two elements of dst share memory (a 0-stride
 * or overlapping-rows view) or dst shares memory with src or idx; see WRITES
 * THAT ALIAS above. */
GML_API gml_tensor *gml_set_rows(gml_context *ctx, gml_tensor *dst, gml_tensor *src, gml_tensor *idx);

/* ---- attention helpers -------------------------------------------------- */

/* Fused attention, softmax(q k^T * scale + mask) v, as one op that never
 * makes the [B, H, Tq, Tk] scores: keys are taken in blocks with a running
 * max and sum (online softmax), so its memory is that of its output.
 *   q [B, H, Tq, d_k], k [B, G, Tk, d_k], v [B, G, Tk, d_v] -> out [B, H, Tq, d_v]
 * Any strides on q, k, v (permuted views straight from the projections).
 * Query head h reads kv head h / (H / G) (G must divide H; K and V are never
 * repeated). Tq may differ from Tk (cross-attention, decoding).
 * Masks, combined: mask f32 broadcastable to [B, H, Tq, Tk] (additive, as
 * softmax's) or NULL; valid_lens i32 [B] or [B, Tq] (key j seen iff j < len;
 * a length outside [0, Tk] fails compute) or NULL; causal (query i sees key j
 * iff j <= i + (Tk - Tq)). A query that sees no key gets zeros.
 * Masked keys (MASKS: causal, valid lengths, a -inf mask value) are
 * skipped: a NaN or inf in their K or V rows changes nothing, so garbage in
 * a KV cache's unused slots may stay there (the unfused softmax + matmul
 * would give NaN: 0 * NaN). A visible key's score that is NaN or +-inf in
 * float (q k^T * scale overflowing, NaN/inf in q or K, a +inf or NaN mask
 * value, score + mask overflowing), or a NaN or inf in its V row, makes the
 * row NaN. The fast kernels compute in float: an overflow of their partial
 * dot products, of q * scale or of their value sums gives NaN where the
 * exact result fits in float; the reference kernel (double) gives the
 * finite answer there (MASKS).
 * The output is stored head-interleaved, as [B, Tq, H, d_v] memory seen as
 * [B, H, Tq, d_v] (it is not contiguous): permuting it to [B, Tq, H, d_v]
 * gives a contiguous tensor, so merging the heads costs no copy. Results
 * do not depend on the thread count (how the work is split:
 * docs/contracts.md, "gml_flash_attn"). */
GML_API gml_tensor *gml_flash_attn(gml_context *ctx, gml_tensor *q, gml_tensor *k, gml_tensor *v,
                           gml_tensor *mask, gml_tensor *valid_lens, float scale, bool causal);
/* flash_attn with options: q [B, H, Tq, d_k], k [B, G, Tk, d_k], v [B, G, Tk, d_v]
 * -> [B, H, Tq, d_v] (layout as gml_flash_attn). opts may be NULL (checks as
 * gml_softmax_ext's). A window skips the key blocks outside [i' - W + 1, i']
 * of a block of rows: the cost grows with W, not Tk. Sinks enter the final
 * normalisation of the online softmax. k and v (both gml_flash_attn and
 * _ext) may be f16 or bf16 as well as f32, each independently (q is f32):
 * their rows are converted to f32 as they are read (never a whole f32
 * copy), so the result is bitwise that of f32 k and v holding the converted
 * values, on every ISA; q8_0 k or v is refused. */
GML_API gml_tensor *gml_flash_attn_ext(gml_context *ctx, gml_tensor *q, gml_tensor *k, gml_tensor *v,
                               float scale, const gml_attn_opts *opts);

/* Partial attention, to split the keys across threads or machines and
 * join the pieces exactly (the log-sum-exp merge). flash_attn_partial is
 * flash_attn over the keys given, stopped before the normalisation:
 *   q [B, H, Tq, d_k], k [B, G, Tk, d_k], v [B, G, Tk, d_v]
 *   -> p [B, H, Tq, d_v + 2] contiguous: per query row o (d_v values), m, l
 * with, over the keys j the row sees (MASKS), s_j its score as flash_attn
 * forms it: m = max_j s_j, l = sum_j e^(s_j - m), o = sum_j e^(s_j - m) v_j.
 * A row that sees no key gets (0, -inf, 0); a row flash_attn would make NaN
 * gets l NaN (a NaN or inf in a V row it sees reaches o instead). k and v
 * are keys key0 .. key0 + Tk - 1 of the whole sequence: the mask covers the
 * keys given ([.., Tk]), valid_lens (key j seen iff j < len, any len >= 0)
 * and positions count absolutely; bottom-right causal, a window or ALiBi
 * need positions (the whole Tk is not known here; top-left causal needs
 * none); sinks are refused (give them to gml_attn_partial_finish: they join once).
 * k and v may be f16 or bf16 (q f32), read as flash_attn reads them.
 * Bitwise the same at every thread count.
 * gml_attn_partial_merge(a, b): two partials of the same rows, b's keys after a's
 * -> their partial: m = max(ma, mb), o = oa e^(ma - m) + ob e^(mb - m), l
 * likewise (expf in float; an empty side, l = 0, leaves the other bit for
 * bit; a NaN l stays NaN). gml_attn_partial_finish(p, sinks): [..., d_v + 2] ->
 * [..., d_v] contiguous, o / l with the sink (f32 [H], or NULL; p 4-D then)
 * folded in as flash_attn folds it; zeros where l = 0, the row NaN where l
 * is NaN or an output is not finite. Merging the partials of any split of
 * the keys in key order and finishing gives flash_attn's result within
 * rounding (not its bits: the merge rounds its own way; flash_attn's layout
 * is head-interleaved, gml_attn_partial_finish's contiguous). */
GML_API gml_tensor *gml_flash_attn_partial(gml_context *ctx, gml_tensor *q, gml_tensor *k, gml_tensor *v,
                                   float scale, const gml_attn_opts *opts, int64_t key0);
GML_API gml_tensor *gml_attn_partial_merge(gml_context *ctx, gml_tensor *a, gml_tensor *b);
GML_API gml_tensor *gml_attn_partial_finish(gml_context *ctx, gml_tensor *p, gml_tensor *sinks);


/* Additive key mask from valid lengths: lens i32 [B] or [B, Tq] ->
 * f32 [B, 1, 1, Tk] or [B, 1, Tq, Tk], 0 where key j < len, -inf elsewhere.
 * A length outside [0, Tk] fails compute. */
GML_API gml_tensor *gml_valid_len_mask(gml_context *ctx, gml_tensor *lens, int64_t tk);
/* Shaw et al. relative positions: i32 [Tq, Tk], clip(j - i, -P, P) + P. */
GML_API gml_tensor *gml_relpos_index(gml_context *ctx, int64_t tq, int64_t tk, int max_rel);
/* i32 [n]: start, start + 1, ..., start + n - 1 (torch.arange(start, start +
 * n)); default positions for rope and attention. n in [1, 2^31 - 1], every
 * value must fit in i32. */
GML_API gml_tensor *gml_arange(gml_context *ctx, int64_t n, int64_t start);

/* Rotary position embeddings (RoPE) on the heads of q or k, as Hugging Face's
 * apply_rotary_pos_emb with its rotate_half (GPT-NeoX, LLaMA, Mistral, Qwen)
 * or, interleaved, with pairs (2i, 2i+1) (GPT-J, Meta's original LLaMA).
 *   x f32 [B, H, T, d] (seq_dim -2: after the head-split permute) or
 *   [B, T, H, d] (seq_dim -3: a projection reshaped), any strides;
 *   pos i32 [T] (every batch item alike) or [B, T] (a row per item: left
 *   padding) -> out, x's shape, contiguous.
 * With r = rotary_dim (even, <= d; 0 means d) and, for i < r/2, in float as
 * HF computes them:
 *   inv_freq_i = 1 / theta^((2i) / r),  a = (pos / pos_scale) * inv_freq_i
 * pair i, (j0, j1) = (i, i + r/2), or (2i, 2i + 1) when interleaved, is
 *   out[j0] = x[j0] cos a - x[j1] sin a,  out[j1] = x[j1] cos a + x[j0] sin a
 * and dims r..d-1 pass through (partial rotary: GPT-NeoX, Phi). pos_scale is
 * HF's linear rope_scaling factor (positions divided by it, as its
 * LinearScalingRotaryEmbedding did; 1: none; newer HF divides inv_freq by
 * it instead, which rounds differently: the angles agree within an ulp). Any
 * int32 position is accepted (negative ones rotate backwards, so rope with
 * -pos undoes rope with pos); positions beyond 2^24 are rounded to float as
 * HF's position_ids.float() does. The same bits on every ISA and thread
 * count; how close to a double rotation and to HF: docs/contracts.md,
 * "gml_rope". */
GML_API gml_tensor *gml_rope(gml_context *ctx, gml_tensor *x, gml_tensor *pos, int seq_dim, int rotary_dim,
                     float theta, float pos_scale, bool interleaved);

#ifdef __cplusplus
}
#endif
#endif /* GGMLITE_TENSOR_H */
