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

/* The version of the library linked in: GML_VERSION as it was when the
 * library was built, e.g. "0.1.0". It differs from GML_VERSION when a
 * program was compiled against other headers than the library it runs with. */
GML_API const char *gml_version(void);

#ifdef __cplusplus
}
#endif

#include <ggmlite/types.h>
#include <ggmlite/tensor.h>
#include <ggmlite/registry.h>
#include <ggmlite/compute.h>

#endif /* GGMLITE_H */
