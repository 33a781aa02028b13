/* ggmlite's types: the sizes and limits, element types, the op and status
 * enums, the tensor header; sizes of types and conversions between them.
 * Part of <ggmlite/ggmlite.h>, which includes it. */
#ifndef GGMLITE_TYPES_H
#define GGMLITE_TYPES_H

#include <ggmlite/export.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

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
 * leaf (gml_new_tensor), a block of a leaf's whole rows (gml_view with the
 * leaf's strides at a multiple of a row's bytes: rows [r0, r0 + n) of a
 * weight [R, K], as linear's w) or a transpose/permute of either (B = w^T
 * for gml_matmul); other views of it are refused. Which ops take which types:
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

/* Compute precision of an op that multiplies (matmul, and linear through
 * it; flash_attn, F32 and BF16): what its products are computed in, per node (gml_set_compute,
 * <ggmlite/tensor.h>; a context's default for the nodes built after it).
 * The values are stored in the node (graph files write "compute=bf16"), so
 * they never change: new ones go at the end. docs/numerics.md gives each
 * one's arithmetic and error bound.
 *   F32:  the default: products and sums in f32 (b of f16, bf16, q8_0
 *         converted exactly to f32 first), as ggmlite always computed.
 *   BF16: a and b rounded to bf16 (nearest, ties to even), products summed
 *         in f32 in a fixed order, f32 out; b f32, f16 or bf16.
 *   INT8: a quantized per row to int8 against a q8_0 b, int32 sums scaled
 *         in f32 (ggml's q8_0 x q8 dot products). */
typedef enum gml_compute {
    GML_COMPUTE_F32 = 0,
    GML_COMPUTE_BF16 = 1,
    GML_COMPUTE_INT8 = 2,
    GML_COMPUTE_COUNT
} gml_compute;

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
 * inputs, outputs and params. gml_build_graph marks its outputs in the
 * graph (its copies: gml_graph_tensor), not on the headers; OUTPUT set on
 * a header by hand keeps that tensor in every graph. RECOMPUTE: gml_grad's backwards read a copy
 * of the node computed again in the backward, not the node (<ggmlite/grad.h>,
 * gml_checkpoint). */
enum {
    GML_FLAG_INPUT = 1,
    GML_FLAG_OUTPUT = 2,
    GML_FLAG_PARAM = 4,
    GML_FLAG_RECOMPUTE = 8,
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

/* "f32", "bf16", "int8" (graph files, run-graph --compute); "?" for an
 * unknown value. gml_compute_from_name is the reverse (false if unknown). */
GML_API const char *gml_compute_name(gml_compute c);
GML_API bool gml_compute_from_name(const char *name, gml_compute *out);

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

#ifdef __cplusplus
}
#endif
#endif /* GGMLITE_TYPES_H */
