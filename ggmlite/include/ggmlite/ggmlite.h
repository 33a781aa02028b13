/*
 * ggmlite: a small tensor graph engine for attention blocks, in C11.
 *
 * You build a graph of ops on tensors, then compute it on CPU threads.
 *
 *     gml_context *ctx = gml_init((gml_init_params){ .mem_size = 16 << 20 });
 *     gml_tensor *x = gml_new_tensor(ctx, GML_F32, 3, (int64_t[]){2, 10, 64});
 *     gml_tensor *w = gml_new_tensor(ctx, GML_F32, 2, (int64_t[]){32, 64});
 *     gml_tensor *y = gml_linear(ctx, x, w, NULL);     // [2, 10, 32]
 *     if (!y) fprintf(stderr, "%s\n", gml_last_error(ctx));
 *     gml_graph *g = gml_build_graph(ctx, &y, 1);
 *     ... fill x->data and w->data ...
 *     if (gml_graph_compute(g, 4) != GML_OK) fprintf(stderr, "%s\n", gml_graph_error(g));
 *     gml_graph_free(g);
 *     gml_free(ctx);
 *
 * Conventions (read these once):
 *
 * - DIMENSION ORDER. Shapes are written outermost first, as PyTorch and the
 *   attention literature write them: [B, T, d_model], [B, h, T, d_k]. The
 *   last dimension is the contiguous one. `gml_permute` takes PyTorch's
 *   argument order: out.shape[i] = in.shape[perm[i]]. Negative dims count
 *   from the end, as in PyTorch. Every op's comment below gives its shapes.
 *
 * - STORAGE. A tensor has 1 to 4 dimensions. `ne` and `nb` always hold four
 *   entries, right-aligned: ne[GML_MAX_DIMS - n_dims .. 3] are the sizes of
 *   the tensor's dimensions outermost first, leading unused entries are 1.
 *   So ne[3] is always the last (innermost) dimension and PyTorch dim d of
 *   an n-dim tensor is entry 4 - n + d. `nb` are byte strides (for the unused
 *   leading entries, the extent of the tensor). Element [i0,i1,i2,i3] lives
 *   at data + i0*nb[0] + i1*nb[1] + i2*nb[2] + i3*nb[3].
 *
 * - MATMUL means torch.matmul: [..., M, K] @ [..., K, N] -> [..., M, N], with
 *   leading dimensions broadcast (each 1 or equal). Either input may have any
 *   strides: k.transpose(-2, -1) works as it is. (ggml's mul_mat(a, b) means
 *   b a^T; ours does not.) gml_linear takes nn.Linear's [out, in] weight.
 *
 * - MASKS. A softmax mask is additive and broadcasts against the scores:
 *   0 keeps a key, -INFINITY removes it. Causal means query i sees key j iff
 *   j <= i + (Tk - Tq) (bottom-right aligned, as PyTorch's is_causal for
 *   Tq == Tk and as KV-cache decoding needs). Every ISA and thread count
 *   keeps these rules (softmax, flash_attn):
 *   . A key is MASKED (hidden) iff causality hides it, a valid length hides
 *     it (flash_attn), or its additive mask value is -inf. Nothing else
 *     masks: a -inf score (gml_softmax's input x included) is an overflow,
 *     not a mask, so PyTorch's masked_fill(-inf) then softmax is written
 *     here with the mask argument.
 *   . A masked key weighs exactly 0, whatever its score, mask value, K or V
 *     hold (NaN and inf too): flash_attn skips it, its K and V never enter
 *     the sums. A row with no visible key gives zeros (all-zero weights),
 *     never NaN.
 *   . Any other non-finite term makes the whole row NaN, never zeros and
 *     never a silently finite answer: a NaN score, a visible key's score
 *     that is +-inf in float because of overflow (finite q, k whose scaled
 *     dot product is +-inf; for softmax, an x or x * scale that is +-inf,
 *     or a score plus a finite mask value), a +inf or NaN mask value at a
 *     visible key, a NaN or inf in q or in a visible key's K or V (flash_attn: q is
 *     only multiplied with visible keys, so a row with no visible key is
 *     zeros even then). The NaN trap (gml_graph_set_nan_trap) stops on such
 *     rows.
 *   . Scores are judged as floats. The reference kernels (GML_ISA_REFERENCE;
 *     flash_attn's accumulates in double) round each scaled score to float
 *     and apply the same rules. Where the fast kernels' float arithmetic
 *     overflows though the exact result fits in float, they give NaN and
 *     the reference the finite answer: flash_attn's dot products are FMA
 *     chains on q * scale (a partial sum such as 3e38 + 3e38 - 3e38, or
 *     q * scale itself, can overflow) and its value sums are float
 *     (sum_j e_j v_j, unnormalized, can pass FLT_MAX when V is near it).
 *   . Options (gml_attn_opts: gml_softmax_ext, gml_flash_attn_ext). A score
 *     is formed as s = x * scale (flash: q.k * scale); softcap c: s = c
 *     tanh(s / c); + mask; + ALiBi slope_h (j - i'). Query i's absolute
 *     position i' is positions[b, i] when given, else i + Tk - Tq (causal
 *     BOTTOM_RIGHT or NONE) or i (TOP_LEFT). Causal hides key j iff j > i';
 *     a window W hides it iff i' - j >= W as well (a window implies causal).
 *     Keys the window hides are masked keys as above (skipped, weight 0, a
 *     row with none left is zeros). A sink logit s_h (not scaled, capped or
 *     biased) joins the row's max and denominator only: w_j = e^(s_j - m) /
 *     (sum_k e^(s_k - m) + e^(s_h - m)), m = max(s_h, max_k s_k); a row with
 *     no visible key is zeros even with a sink; a NaN or +inf sink makes
 *     a row with a visible key NaN (-inf is no sink).
 *   . The unfused graph (scores = matmul(q, k^T), softmax, matmul with v)
 *     keeps the same rules in softmax, but its matmuls are plain IEEE: a
 *     NaN or inf in a masked V row gives 0 * NaN = NaN in the output (use
 *     flash_attn where V may hold garbage at masked positions, e.g. a KV
 *     cache's unused slots); a score that overflows in the scores matmul
 *     reaches softmax as a +-inf x and makes its row NaN, as in flash_attn.
 *
 * - ERRORS. A builder call that gets inputs it cannot use returns NULL and
 *   records a message on the context (gml_last_error) that names the op, the
 *   inputs and their shapes, e.g.
 *     matmul(q, k): inner sizes differ: [2,8,10,64] @ [2,8,32,10]
 *   Builders given a NULL input return NULL and keep the first message, so a
 *   whole graph can be built and checked once at the end. Since a NULL is
 *   also how optional inputs (a bias, a mask) are left out, gml_build_graph
 *   refuses a context that holds an error: a failed optional input never
 *   silently becomes "none" (gml_clear_error after handling a failure you
 *   meant to recover from). Compute returns a
 *   status; runtime problems (an index out of range, a NaN trap) are described
 *   by gml_graph_error. Nothing aborts on a user mistake; asserts guard only
 *   ggmlite's own invariants.
 *
 * - MEMORY. A context owns one arena: tensor headers and data are bump-
 *   allocated from one block and freed at once by gml_free. With no_alloc,
 *   only headers are made (data == NULL) and a planner or the user places data
 *   later; gml_mem_required tells how large an allocating arena would need to
 *   be for everything created so far, in either mode.
 *   Tensors describe, graphs execute: a tensor's `data` is the data the user
 *   (or an allocating context) gave it, and nothing else ever writes it. A
 *   tensor the memory planner placed keeps data == NULL in its header: the
 *   place belongs to the graph that was planned (several graphs over shared
 *   tensors each have their own), and gml_graph_data(g, t) gives it. It
 *   stays valid until that graph is planned again or freed. A header that has
 *   data when a graph computes always wins over that graph's plan.
 *
 * - WRITES THAT ALIAS. The ops that write into a tensor given to them
 *   (gml_cpy, gml_set_rows) refuse, when they are built, a destination two of
 *   whose elements share memory (a stride 0 on a dim of size > 1, or strides
 *   such that two indices reach one byte) and a destination that shares
 *   memory with what the op reads (x and its own transpose, two slices of one
 *   cache that intersect), as PyTorch refuses "some elements of the
 *   written-to tensor refer to a single memory location": such a write would
 *   depend on the order of the threads and the ISA. Slices of one tensor
 *   that do not meet (two halves; the even and the odd columns) are fine.
 *   The check is made at build time on the headers: views by their offsets
 *   into one storage and their strides, so a no_alloc context is checked as
 *   well; two different tensors whose data the user placed by hand by their
 *   data pointers, if both have data then (data placed later, or by a
 *   planner that never overlaps live tensors, is not checked). It is exact;
 *   only strides interleaved beyond what it searches give a "may overlap"
 *   refusal.
 *
 * - THREADS. Results do not depend on the thread count: every output element
 *   is computed by one thread in a fixed order (flash_attn's decode path and
 *   flash_attn_partial: partials over key chunks fixed by the shapes, merged
 *   in chunk order by one thread). Nor, bitwise, on the fast ISA
 *   (scalar, AVX2, AVX-512) for matmul, linear, copies, gathers, add, mul,
 *   sub, div, scale, neg and the index ops; softmax and flash_attn
 *   agree across ISAs within a few ulp (their exp and the width of their
 *   sums differ; their AVX2 and AVX-512 exp makes no subnormal, whose
 *   arithmetic costs a microcode assist on Intel: a term exp(s - max)
 *   below 2^-125.5 is +0, so a weight under about 2^-125 may be +0 where
 *   the scalar variant gives a subnormal), exp, tanh, sigmoid, silu, gelu and gelu_tanh too (AVX2
 *   and AVX-512 bitwise; the scalar variants, on libm, and they each within
 *   3 ulp of the double reference; gelu's within 1), and the
 *   reference kernels (GML_ISA_REFERENCE) within a tolerance. The
 *   differential fuzzer (tests/fuzz/fuzz_diff.c) holds every ISA to this. Several threads may compute
 *   different graphs at once, also graphs that share tensors of one context:
 *   each reads the shared headers and writes only its own planned data (see
 *   MEMORY). Data two such graphs both write through a header (an allocating
 *   context's intermediates, a cache placed by hand) is one memory: do not
 *   compute them at once. Computes of one graph take turns.
 *
 * Every name ggmlite exports starts with gml_ (types, functions) or GML_
 * (macros, enum constants).
 */
#ifndef GGMLITE_H
#define GGMLITE_H

#include <ggmlite/export.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of these headers: GML_VERSION_MAJOR.MINOR.PATCH, the one
 * place it is written (CMake's project() reads it from here), GML_VERSION
 * the same as a string, and GML_VERSION_NUMBER for #if comparisons
 * (MAJOR * 10000 + MINOR * 100 + PATCH: 0.1.0 is 100). */
#define GML_VERSION_MAJOR 0
#define GML_VERSION_MINOR 1
#define GML_VERSION_PATCH 0
#define GML_VERSION "0.1.0"
#define GML_VERSION_NUMBER (GML_VERSION_MAJOR * 10000 + GML_VERSION_MINOR * 100 + GML_VERSION_PATCH)
#define GML_MAX_DIMS 4
#define GML_MAX_SRC 8
#define GML_MAX_NAME 64
#define GML_MAX_OP_PARAMS 16 /* int32 slots */
#define GML_SHAPE_MAX 64 /* room for any shape gml_format_shape writes */
#define GML_ERR_MAX 512  /* room for any message ggmlite keeps: 511 bytes and the NUL */
/* Tensor data in an allocating arena starts at a multiple of GML_ALIGN
 * bytes: a tensor of n data bytes takes gml_tensor_overhead() + n rounded
 * up to GML_ALIGN of the arena. */
#define GML_ALIGN 64

/* printf-style format checking (GCC, Clang) of the functions taking one. */
#if defined(__GNUC__)
#define GML_PRINTF(fmt_arg, first_arg) __attribute__((format(printf, fmt_arg, first_arg)))
#else
#define GML_PRINTF(fmt_arg, first_arg)
#endif

/* Element types. F16 is IEEE binary16, BF16 the top half of an f32; both
 * are ordinary 2-byte elements (any strides, any view). Q8_0 is blocked as
 * ggml's q8_0: each run of 32 values along the last dim is one 34-byte
 * gml_block_q8_0 (an f16 scale d and 32 int8 q, value = d * q), so the last
 * dim must be a multiple of 32 and a row of n values takes n / 32 * 34
 * bytes; nb[3] of a q8_0 tensor is the block size, 34. A q8_0 tensor is a
 * leaf (gml_new_tensor) or a transpose/permute of one (B = w^T for
 * gml_matmul); other views of it are refused. Which ops take which types:
 * every op takes f32; cpy converts between f32, f16, bf16 and q8_0 (any
 * pair); cont takes f16 and bf16 as well; matmul's b (linear's w) may be
 * f16, bf16 or q8_0 against an f32 a; get_rows reads f16, bf16 and q8_0
 * tables into f32 rows; set_rows writes f32 rows into an f16 or bf16 dst
 * (rounded); flash_attn's k and v may be f16 or bf16 (q f32); the index
 * ops take i32. Any other op refuses the
 * other types when built, naming the op, the tensor and its type. */
typedef enum gml_type {
    GML_F32 = 0,
    GML_I32 = 1,
    GML_F16 = 2,
    GML_BF16 = 3,
    GML_Q8_0 = 4,
    GML_TYPE_COUNT
} gml_type;

#define GML_QK8_0 32 /* values per q8_0 block */
typedef struct gml_block_q8_0 {
    uint16_t d;             /* the scale, an IEEE binary16 */
    int8_t qs[GML_QK8_0];   /* value i = d * qs[i] */
} gml_block_q8_0;

/* The op list lives in ggmlite/include/ggmlite/ops.inc; each entry becomes GML_OP_<ID>. */
typedef enum gml_op {
#define GML_OP(id, name) GML_OP_##id,
#include <ggmlite/ops.inc>
#undef GML_OP
    GML_OP_COUNT
} gml_op;

typedef enum gml_status {
    GML_OK = 0,
    GML_ERR_INVALID = 1, /* bad arguments or data (message says which) */
    GML_ERR_NOMEM = 2,   /* arena or malloc exhausted */
    GML_ERR_NONFINITE = 3, /* NaN/Inf trap fired */
    GML_ERR_ABORTED = 4, /* the node callback asked to stop */
    GML_ERR_IO = 5,      /* a file could not be read or written */
} gml_status;

/* What a tensor is to a graph; the memory planner never reuses the data of
 * inputs, outputs and params. */
enum {
    GML_FLAG_INPUT = 1,
    GML_FLAG_OUTPUT = 2,
    GML_FLAG_PARAM = 4,
};

typedef struct gml_tensor {
    gml_type type;
    int n_dims;                  /* 1..4 */
    int64_t ne[GML_MAX_DIMS];    /* sizes, right-aligned, outermost first */
    size_t nb[GML_MAX_DIMS];     /* byte strides */

    gml_op op;                   /* GML_OP_NONE for leafs */
    int32_t op_params[GML_MAX_OP_PARAMS];
    struct gml_tensor *src[GML_MAX_SRC];

    struct gml_tensor *view_src; /* for views: the tensor that owns the data */
    size_t view_offs;            /* byte offset into view_src's data */

    void *data;
    int flags;
    int id;                      /* creation index within its context */
    char name[GML_MAX_NAME];
} gml_tensor;

typedef struct gml_context gml_context;
typedef struct gml_graph gml_graph;

/* The version of the library linked in: GML_VERSION as it was when the
 * library was built, e.g. "0.1.0". It differs from GML_VERSION when a
 * program was compiled against other headers than the library it runs with. */
GML_API const char *gml_version(void);

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

/* Returns NULL only if malloc fails or mem_size is too small to be useful. */
GML_API gml_context *gml_init(gml_init_params params);
GML_API void gml_free(gml_context *ctx);

GML_API const char *gml_last_error(const gml_context *ctx); /* "" when none (or ctx NULL) */
GML_API void gml_clear_error(gml_context *ctx);             /* ctx NULL: does nothing */
/* For builders of your own (as the attention blocks of <ggmlite/attention.h>
 * are): records a message on ctx as ggmlite's builders do, replacing any
 * earlier one, and returns NULL, so a builder can report a mistake with
 *     char s[GML_SHAPE_MAX];
 *     if (x->ne[3] % 2) return gml_set_error(ctx, "my_rope(x): odd last dim: %s",
 *                                            gml_format_shape(x, s, sizeof s));
 * and gml_build_graph then refuses the context, as for any builder error.
 * The message is cut at 511 bytes. ctx NULL: does nothing. gml_set_error_v
 * takes a va_list, for wrappers of your own. */
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

GML_API gml_tensor *gml_set_name(gml_tensor *t, const char *name);  /* returns t */
GML_API const char *gml_get_name(const gml_tensor *t);
GML_API gml_tensor *gml_get_tensor(gml_context *ctx, const char *name); /* first with name */
/* Every tensor of a context in creation order:
 *     for (gml_tensor *t = gml_get_first_tensor(ctx); t; t = gml_get_next_tensor(ctx, t)) */
GML_API gml_tensor *gml_get_first_tensor(const gml_context *ctx);
GML_API gml_tensor *gml_get_next_tensor(const gml_context *ctx, const gml_tensor *t);
GML_API void gml_set_flags(gml_tensor *t, int flags);                /* ORs GML_FLAG_* */

/* Bytes of one element, or of one block for a blocked type (q8_0: 34). */
GML_API size_t gml_type_size(gml_type type);
/* Elements per block: 32 for q8_0, 1 for the others. */
GML_API int64_t gml_type_block_size(gml_type type);
/* Bytes of a contiguous row of n elements (n a multiple of the block size). */
GML_API size_t gml_row_size(gml_type type, int64_t n);
/* "f32", "i32", "f16", "bf16", "q8_0" (graph files and printing use these);
 * "?" for an unknown value. gml_type_from_name is the reverse (false if
 * name is none of them). */
GML_API const char *gml_type_name(gml_type type);
GML_API bool gml_type_from_name(const char *name, gml_type *out);

/* ---- conversions -------------------------------------------------------------
 * f32 -> f16 and f32 -> bf16 round to nearest, ties to even; values past
 * the largest finite f16 (65504, once rounded) become +-inf; f16
 * subnormals are produced exactly as IEEE rounding gives them (bf16 keeps
 * f32's range and subnormals); a NaN stays a NaN of the same sign, made
 * quiet, its top payload bits kept (as the F16C and AVX-512 instructions
 * do). f16 -> f32 and bf16 -> f32 are exact (an f16 NaN comes out quiet,
 * its payload kept, as vcvtph2ps gives it; a bf16 NaN keeps its bits). */
GML_API uint16_t gml_fp32_to_fp16(float x);
GML_API float gml_fp16_to_fp32(uint16_t h);
GML_API uint16_t gml_fp32_to_bf16(float x);
GML_API float gml_bf16_to_fp32(uint16_t h);
/* n values (a multiple of 32) into n / 32 q8_0 blocks, as ggml's reference
 * quantize_row_q8_0: per block amax = max |x|, d = amax / 127, q =
 * roundf(x * (1 / d)) (ties away from zero; q = 0 when d is 0), the scale
 * stored as f16(d). A block holding a NaN or an infinity gets a NaN scale
 * (all its values dequantize to NaN: never silently finite). Blocks whose
 * amax / 127 passes 65504 (|x| > ~8.3e6) get an infinite scale. */
GML_API void gml_quantize_row_q8_0(const float *x, gml_block_q8_0 *y, int64_t n);
/* n values (a multiple of 32) out of n / 32 blocks: y = f32(d) * q, exact. */
GML_API void gml_dequantize_row_q8_0(const gml_block_q8_0 *x, float *y, int64_t n);
GML_API const char *gml_op_name(gml_op op);
GML_API int64_t gml_nelements(const gml_tensor *t);
GML_API size_t gml_nbytes(const gml_tensor *t);   /* bytes spanned, from first to last element */
GML_API int64_t gml_dim(const gml_tensor *t, int d); /* size of dim d (negative from the end) */
GML_API bool gml_is_contiguous(const gml_tensor *t);
GML_API bool gml_is_view(const gml_tensor *t);
GML_API bool gml_same_shape(const gml_tensor *a, const gml_tensor *b);
/* Writes "[2,8,10,64]" into buf; returns buf. */
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
 * WRITES THAT ALIAS above. */
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
 * d * q), in registers or while packing panels, never a whole f32 copy of
 * b. More than 4 rows (M, batches folded): bitwise what an f32 b holding
 * the converted values gives. Up to 4 rows against a weight (decoding):
 * dot products along k in a fixed order (ops/gemm.h), the same bits on
 * every ISA and thread count, within a few ulp of sum_k |a b| of the f32
 * result (measured: <= 1.4e-7 of sum_k |a b| from it, <= 4.2e-8 from the
 * exact product on the converted values). */
GML_API gml_tensor *gml_matmul(gml_context *ctx, gml_tensor *a, gml_tensor *b);
/* x [..., in] (1-D to 4-D), w [out, in] (nn.Linear layout), bias [out] or NULL
 * -> [..., out]. w may be f32, f16, bf16 or q8_0 (see gml_matmul); x and
 * bias are f32. */
GML_API gml_tensor *gml_linear(gml_context *ctx, gml_tensor *x, gml_tensor *w, gml_tensor *bias);
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
 * within 3 ulp of that (exp 0.9, tanh 2, sigmoid 2.2, silu 3, gelu 0.5,
 * gelu_tanh 3; AVX2 and AVX-512 bitwise equal, scalar within the same
 * bounds), measured in ops/vunary.h and tests/test_unary.c. Special values
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
 * finite answer there (MASKS). The fast kernels compute a block of rows
 * twice when a NaN or inf in a V row its masks hide reached it.
 * The output is stored head-interleaved, as [B, Tq, H, d_v] memory seen as
 * [B, H, Tq, d_v] (it is not contiguous): permuting it to [B, Tq, H, d_v]
 * gives a contiguous tensor, so merging the heads costs no copy.
 * Threads split over batch, head and query rows; when a kv head has at
 * most 8 query rows (r = H / G heads times Tq: decoding) the keys are split
 * too, in chunks whose length depends only on B G and Tk (at least 256 keys,
 * up to 16 chunks over all kv heads), each chunk's partial softmax (o, m, l)
 * merged in chunk order by one log-sum-exp merge: results do not depend on
 * the thread count. That decode path reads K and V rows in place (f16 and
 * bf16 converted in registers), lanes along d, the rows of a kv head sharing
 * each K and V load. */
GML_API gml_tensor *gml_flash_attn(gml_context *ctx, gml_tensor *q, gml_tensor *k, gml_tensor *v,
                           gml_tensor *mask, gml_tensor *valid_lens, float scale, bool causal);
/* flash_attn with options: q [B, H, Tq, d_k], k [B, G, Tk, d_k], v [B, G, Tk, d_v]
 * -> [B, H, Tq, d_v] (layout as gml_flash_attn). opts may be NULL (checks as
 * gml_softmax_ext's). A window skips the key blocks outside [i' - W + 1, i']
 * of a block of rows: the cost grows with W, not Tk. Sinks enter the final
 * normalisation of the online softmax. softcap uses a vector tanh (ops/vunary.h)
 * in the AVX2 / AVX-512 variants, tanhf in the scalar one. k and v (both
 * gml_flash_attn and _ext) may be f16 or bf16 as well as f32, each
 * independently (q is f32): each key block's rows are converted to f32 as
 * the micro-kernels load them (a block buffer per thread, or registers on
 * the decode path; never a whole f32 copy), so the result is bitwise that of
 * f32 k and v holding the converted values, on every ISA; q8_0 k or v is
 * refused. */
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
 * Runs the decode micro-kernels (rows in groups of 8 per kv head, keys in
 * chunks merged in order: bitwise the same at every thread count).
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
 * HF's position_ids.float() does. cos and sin are computed in the kernel
 * (double, from the float angle); the fast kernel rounds them to float, once
 * per position, shared by the heads, and rotates in float (multiplies and
 * adds, no FMA: the same bits on every ISA and thread count): measured
 * within 2 units of 2^-24 (|x0| + |x1|) of a double rotation (the
 * reference: 1).
 * Against HF in float32 on the same data: within 1.2e-7 (x in [-1, 1]) where
 * our inv_freq (glibc powf) equals torch's float pow, which differs by an ulp
 * on about 1.4% of (theta, r, i); the angle then differs by pos * that ulp
 * (measured 2.6e-5 at positions near 2^20). */
GML_API gml_tensor *gml_rope(gml_context *ctx, gml_tensor *x, gml_tensor *pos, int seq_dim, int rotary_dim,
                     float theta, float pos_scale, bool interleaved);

/* ---- graphs ------------------------------------------------------------- */

/* Collects everything the outputs depend on by DFS, each tensor once, nodes
 * in topological order, leafs (tensors no op made) apart. The outputs are
 * flagged GML_FLAG_OUTPUT. Returns NULL if an output is NULL or the context
 * holds an error from an earlier builder call (the message stays). The
 * graph is malloc'd: free it with gml_graph_free, before or after gml_free
 * of its context (it touches no tensor: its plan and its copies of the
 * headers are its own). Several graphs may share the tensors of a context. */
GML_API gml_graph *gml_build_graph(gml_context *ctx, gml_tensor *const *outputs, int n_outputs);
GML_API void gml_graph_free(gml_graph *g);

GML_API int gml_graph_n_nodes(const gml_graph *g);
GML_API gml_tensor *gml_graph_node(const gml_graph *g, int i);   /* negative i from the end */
GML_API int gml_graph_n_leafs(const gml_graph *g);
GML_API gml_tensor *gml_graph_leaf(const gml_graph *g, int i);
/* How many source edges of g's nodes point at t (add(t, t) counts two);
 * an output counts one more. */
GML_API int gml_graph_use_count(const gml_graph *g, const gml_tensor *t);
/* Index of t among nodes, or -1. */
GML_API int gml_graph_find(const gml_graph *g, const gml_tensor *t);
/* Every tensor of g (its leafs and its nodes, n_leafs + n_nodes of them)
 * in the order gml_build_graph first reached each: the outputs in the order
 * given, each followed depth-first by the sources it reached first.
 * gml_graph_tensor_at: the i-th (0 <= i < gml_graph_n_tensors), else NULL.
 * gml_graph_tensor_index: t's index in that order, or -1 if t is not in g;
 * expected O(1) (a hash index). */
GML_API int gml_graph_n_tensors(const gml_graph *g);
GML_API gml_tensor *gml_graph_tensor_at(const gml_graph *g, int i);
GML_API int gml_graph_tensor_index(const gml_graph *g, const gml_tensor *t);

/* A table: node, name, op, shape, strides, uses, and the call that made it
 * (gml_format_node). */
GML_API void gml_graph_print(const gml_graph *g, FILE *f);
/* Graphviz DOT. Returns GML_OK or GML_ERR_IO. */
GML_API gml_status gml_graph_dump_dot(const gml_graph *g, const char *path);
/* XXH3-64 over ops, types, shapes, strides, op params and edges (not names,
 * not data): equal for equal graphs. */
GML_API uint64_t gml_graph_digest(const gml_graph *g);
/* Estimated floating-point operations of one compute (matmul 2*M*N*K, ...). */
GML_API double gml_graph_flops(const gml_graph *g);

/* ---- ops as calls: the registry ---------------------------------------------
 * Every op of ops.inc, and the builder-only forms (linear: a matmul and an
 * add), has a call form, "softmax(s, mask=m, scale=0.125, causal=true)": its
 * named arguments, a builder taking their values, and for ops the way back
 * from a node to the values. Graph files (ggmlite/io.h), gml_graph_print and
 * DOT labels all use it, and so can a bindings generator. Read-only. */

typedef enum gml_arg_kind {
    GML_ARG_TENSOR,     /* a tensor; none there makes the whole call none */
    GML_ARG_OPT_TENSOR, /* a tensor or none (NULL): a bias, a mask */
    GML_ARG_INT,        /* a whole number */
    GML_ARG_FLOAT,      /* a number, as a float */
    GML_ARG_BOOL,       /* true or false */
    GML_ARG_INTS,       /* a list of 1 to GML_MAX_DIMS whole numbers */
    GML_ARG_ENUM,       /* one of the spec's names (its index in i), or that index */
} gml_arg_kind;

typedef struct gml_arg_spec {
    const char *name;
    gml_arg_kind kind;
    bool optional;      /* may be left out (then its default applies) */
    const char *def;    /* the default as the reference shows it ("none", "1",
                           "1/sqrt(d_k)"), NULL for a required argument */
    const char *const *names; /* ENUM: value i is names[i], NULL-terminated; a name
                                 may list aliases after '|' ("true|bottom_right"),
                                 the first is the one printed; an ENUM whose first
                                 names are false and true also takes a whole number
                                 as BOOL does: 0 is names[0], any other names[1] */
    bool omit_zero;           /* INT, FLOAT: left out of printed calls when 0 (options
                                 added later: older calls print as they did) */
} gml_arg_spec;

/* One argument's value (the field of its kind). */
typedef struct gml_arg {
    bool given;                 /* false: an optional argument left out */
    gml_tensor *t;              /* TENSOR, OPT_TENSOR (NULL: none) */
    int64_t i;                  /* INT; BOOL as 0 or 1; ENUM as the name's index */
    float f;                    /* FLOAT */
    int64_t list[GML_MAX_DIMS]; /* INTS: list[0..n-1] */
    int n;
} gml_arg;

#define GML_MAX_ARGS 16

/* The index of word (len bytes, no NUL needed) among an ENUM spec's names,
 * aliases after '|' included, or -1. */
GML_API int gml_enum_index(const gml_arg_spec *spec, const char *word, size_t len);

typedef struct gml_op_form gml_op_form;
/* The forms: the ops of ops.inc in order (GML_OP_NONE has none), then the
 * builder-only ones. */
GML_API int gml_form_count(void);
GML_API const gml_op_form *gml_form_at(int i);                /* NULL outside [0, count) */
GML_API const gml_op_form *gml_form_find(const char *name);   /* NULL if unknown */
GML_API const gml_op_form *gml_form_of_op(gml_op op);         /* NULL for GML_OP_NONE */
GML_API const char *gml_form_name(const gml_op_form *f);
/* The op whose nodes the form writes; GML_OP_NONE for a builder-only form. */
GML_API gml_op gml_form_op(const gml_op_form *f);
GML_API int gml_form_n_args(const gml_op_form *f);
GML_API const gml_arg_spec *gml_form_arg(const gml_op_form *f, int i);
/* What the arguments are and what the result is, one phrase each (Markdown). */
GML_API const char *gml_form_doc_args(const gml_op_form *f);
GML_API const char *gml_form_doc_result(const gml_op_form *f);
/* Calls the builder with args[0..n_args-1] (an optional one not `given`
 * takes its default); it checks what the C types cannot (an axis of 2^32 is
 * out of range as written, not cut to an int). NULL with the message on ctx,
 * as any builder; a NULL tensor argument that is not optional gives NULL and
 * keeps the first message, as builders do. */
GML_API gml_tensor *gml_form_build(gml_context *ctx, const gml_op_form *f, const gml_arg *args);
/* The argument values that build node again from its sources: false if node
 * has no form (a leaf). */
GML_API bool gml_form_get_args(const gml_tensor *node, gml_arg args[GML_MAX_ARGS]);
/* Writes node's call, "softmax(s, mask=m, scale=0.125, causal=false)", into
 * buf (always terminated): required arguments positional, optional ones as
 * name=value, none left out; floats with 9 digits, so they read back exactly.
 * name(user, t) gives each tensor argument's text (NULL: t's name). Returns
 * the length of the whole text, as snprintf does, or -1 if node has no form. */
GML_API int gml_format_node(const gml_tensor *node, const char *(*name)(void *user, const gml_tensor *t),
                    void *user, char *buf, size_t size);

/* ---- compute ------------------------------------------------------------ */

/* Which kernels compute runs. AUTO picks the best the CPU has (x86-64:
 * AVX-512F, else AVX2+FMA, else scalar; AArch64: NEON); REFERENCE runs every
 * op's plain reference kernel. The environment variable
 * GGMLITE_ISA=reference|scalar|avx2|avx512|neon sets the initial choice.
 * Process-wide; set it between computes. */
typedef enum gml_isa {
    GML_ISA_AUTO = 0,
    GML_ISA_REFERENCE,
    GML_ISA_SCALAR,
    GML_ISA_AVX2,
    GML_ISA_AVX512,
    GML_ISA_NEON,
} gml_isa;
/* GML_ERR_INVALID (and nothing changes) if the CPU lacks isa. */
GML_API gml_status gml_set_isa(gml_isa isa);
GML_API gml_isa gml_get_isa(void);           /* in effect; never AUTO */
GML_API bool gml_cpu_has(gml_isa isa);
GML_API const char *gml_isa_name(gml_isa isa);
/* "avx2" -> GML_ISA_AVX2; false if unknown. */
GML_API bool gml_isa_from_name(const char *name, gml_isa *out);
/* Which code node i (negative: from the end) ran in the last compute of g:
 * the micro-kernel, XNNPACK-style, with its path when the op has several,
 * e.g. "gml_f32_flash_ukernel__avx512_x32", "gml_f32_gemm_ukernel__avx2_6x16
 * (rows)"; "reference" under GML_ISA_REFERENCE, or "reference (why)" when a
 * fast kernel could not take the node; the op's name for an op with one
 * kernel. NULL for a node that computes nothing (a view), an index out of
 * range, or before the first compute. The string lives forever. */
GML_API const char *gml_graph_node_kernel(const gml_graph *g, int i);

/* Called after each node, on the thread that called compute; return false
 * to stop (compute returns GML_ERR_ABORTED). node is the graph's bound copy
 * of the node, gml_graph_tensor(g, gml_graph_node(g, index)): node->data
 * (and node->src[i]->data) are the data this graph computes with, readable
 * with gml_get_f32 and friends even where the header has none (a planned
 * tensor). Compare names or the index, not node with a header pointer. A
 * compute or plan started from a callback runs alone on its thread; if its
 * graph is being computed (by this thread, or by another: a callback cannot
 * wait), it returns GML_ERR_INVALID. */
typedef bool (*gml_node_callback)(const gml_tensor *node, int index, void *user);
GML_API void gml_graph_set_callback(gml_graph *g, gml_node_callback cb, void *user);
/* Check each node's output for NaN/Inf after computing it; stop with
 * GML_ERR_NONFINITE naming the first bad node and element. NaN and +inf
 * always stop it; -inf only where it is not by design: masks hold it, and so
 * may nodes that only move or add values of masks or inputs (views, cont,
 * cpy, repeat_interleave, get_rows, add: a mask added to scores). */
GML_API void gml_graph_set_nan_trap(gml_graph *g, bool on);

/* Runs every node in order on n_threads threads (1 to GML_MAX_THREADS) of
 * the process-wide pool below. Results are bitwise the same for any count.
 * Every tensor needs data: allocate the context, or plan the graph. Each
 * compute binds the graph's data afresh: a tensor whose header has data then
 * uses it (an input re-pointed between computes), any other one its place
 * in this graph's plan; a view, its source's plus its offset. Kernels run on
 * the graph's own copies of the headers and never write a header.
 * The threads meet at a barrier only before a node that reads memory an
 * earlier node since the last barrier writes, or writes memory one reads or
 * writes (found from the bound addresses): independent nodes such as the q,
 * k and v projections run back to back. A tiny node (under 2^18 flops plus
 * elements) runs on the calling thread alone while the others go on. This
 * schedule is made by the first compute and kept until the bindings, the
 * thread count, the ISA or the callback/NaN trap change (with either, the
 * threads meet after every node). A kernel failure (a bad index) stops the
 * threads at the next barrier, and the earliest failing node's message is
 * the one kept.
 * A graph computes once at a time: a compute (or plan) of a graph that
 * another thread is computing waits for it to finish. */
GML_API gml_status gml_graph_compute(gml_graph *g, int n_threads);
/* The message of the last failed compute or plan of g ("" when none). A
 * compute refused because g was busy (from a node callback) keeps its
 * message for the refused thread alone, never overwriting the running
 * compute's. Read it on the thread that computed. */
GML_API const char *gml_graph_error(const gml_graph *g);

/* The data t has in g's computes: the header's data if it has some, else
 * its place in g's plan (for a view, its source's plus its offset), NULL if
 * t is not in g or has none (not planned, measure_only). For a planned
 * tensor this is where g's compute writes it (outputs) and reads it (inputs:
 * fill them here, after planning); valid until g is planned again or freed.
 * Two graphs sharing t may give two different addresses. */
GML_API void *gml_graph_data(const gml_graph *g, const gml_tensor *t);
/* g's own copy of t's header (NULL if t is not in g): the same shape,
 * strides, name and op, its data the one g computes with, its src[] and
 * view_src g's copies too. Read results through it with gml_get_f32,
 * gml_get_i32 or the strides, e.g. gml_get_f32(gml_graph_tensor(g, y), idx).
 * The copy is refreshed by gml_graph_plan and at the start of each compute
 * (so after changing a header, plan or compute before reading it); it lives
 * as long as g. Do not read it while another thread computes g. */
GML_API const gml_tensor *gml_graph_tensor(const gml_graph *g, const gml_tensor *t);

/* ---- threads ---------------------------------------------------------------
 * gml_graph_compute runs on a process-wide pool of worker threads, made by
 * the first compute that asks for more than one thread and replaced by a
 * bigger one when a compute asks for more. The calling thread is thread 0.
 * Between computes the workers sleep (no CPU). Computes from several threads
 * take turns on the pool; a compute started from inside a node callback, or
 * one for which threads cannot be created, runs on its calling thread alone
 * (with the same results). A second compute of a graph that is being
 * computed waits for the first; from inside a node callback, where waiting
 * could deadlock, it returns GML_ERR_INVALID instead. The workers are
 * joined at exit (atexit) or by gml_threadpool_shutdown; a forked child makes
 * a fresh pool when it needs one. For computes side by side, give each its
 * own pool.
 * Built with GGMLITE_OPENMP=ON, computes run in one OpenMP parallel region
 * each instead, and a pool only fixes the thread count; idle threads then
 * follow OpenMP's wait policy (OMP_WAIT_POLICY=passive: sleep at once), and
 * a forked child computes on one thread (GCC's runtime hangs there). */
#define GML_MAX_THREADS 512

typedef struct gml_threadpool gml_threadpool;
/* A pool of n_threads threads: the caller of each compute and n_threads - 1
 * workers. NULL if n_threads is outside [1, GML_MAX_THREADS] or threads
 * cannot be created. */
GML_API gml_threadpool *gml_threadpool_new(int n_threads);
/* Waits for a compute that uses the pool, then joins its workers. */
GML_API void gml_threadpool_free(gml_threadpool *pool);
GML_API int gml_threadpool_n_threads(const gml_threadpool *pool);
/* gml_graph_compute on all of pool's threads. */
GML_API gml_status gml_graph_compute_pool(gml_graph *g, gml_threadpool *pool);
/* Joins the default pool's workers now (after a compute that uses it); the
 * next compute with more than one thread makes a new pool. */
GML_API void gml_threadpool_shutdown(void);

/* ---- memory planning -------------------------------------------------------
 * For a graph built in a no_alloc context: gives every tensor of the graph
 * that has no data a place in one buffer, reusing the memory of
 * intermediates whose last use has passed. Plan once, compute many times:
 * after the first compute (which makes the kernels' scratch), none allocates.
 *   - a view takes its source's data plus its offset, no memory of its own;
 *   - an intermediate lives from the node that makes it to the last node that
 *     reads it, directly or through a view;
 *   - leafs without data (inputs, weights) and tensors flagged GML_FLAG_INPUT,
 *     OUTPUT or PARAM (directly or through a view of them) get memory no
 *     other tensor ever uses, so outputs survive the compute;
 *   - an elementwise node (add, mul, scale, softmax) may write over its first
 *     source when the node is that source's last use and the sizes match.
 * Offsets are 64-byte aligned. Tensors that already have data keep it.
 * The plan is the graph's own: no tensor header is written (a placed tensor's
 * data stays NULL); gml_graph_data(g, t) gives a placed tensor's address,
 * gml_graph_tensor(g, t) a header that points there. Placed data stays valid
 * until the graph is freed or planned again. What gets a place is decided
 * from the headers at plan time; a header given data after planning wins at
 * compute (plan again to drop the place it no longer needs). Graphs sharing
 * tensors plan, compute, re-plan and free in any order; a graph may also be
 * freed after its context (it touches no tensor then). */
typedef struct gml_plan_options {
    bool no_reuse;      /* debugging: every tensor its own memory; the
                           environment variable GGMLITE_PLAN_NOREUSE=1 forces it */
    bool no_inplace;    /* reuse dead tensors' memory, but never write a node
                           over its source */
    bool measure_only;  /* only work out the sizes below; place nothing */
    void *buffer;       /* NULL: the graph allocates (and frees) the buffer; */
    size_t buffer_size; /* else place into this 64-byte aligned caller buffer */
} gml_plan_options;

/* opt NULL: the defaults (all zero). GML_ERR_NOMEM if the buffer cannot be
 * allocated or the caller's is too small (the message gives the size);
 * nothing is placed then. Planning again first drops the previous plan.
 * Waits for a compute of g on another thread; from a node callback of a
 * compute of g, GML_ERR_INVALID. */
GML_API gml_status gml_graph_plan(gml_graph *g, const gml_plan_options *opt);
/* Bytes of the planned buffer (0 before planning). */
GML_API size_t gml_graph_plan_peak(const gml_graph *g);
/* Bytes the same tensors take without reuse (each 64-byte aligned). */
GML_API size_t gml_graph_plan_naive(const gml_graph *g);

#ifdef __cplusplus
}
#endif
#endif /* GGMLITE_H */
