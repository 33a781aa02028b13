/* ggmlite's graphs: building, inspecting, computing, threads and memory
 * planning. Part of <ggmlite/ggmlite.h>, which includes it. */
#ifndef GGMLITE_COMPUTE_H
#define GGMLITE_COMPUTE_H

#include <ggmlite/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- graphs ------------------------------------------------------------- */

/* Collects everything the outputs depend on by DFS, each tensor once, nodes
 * in topological order, leafs (tensors no op made) apart. The outputs are
 * the graph's: its plan keeps them, and its copies of them
 * (gml_graph_tensor) are flagged GML_FLAG_OUTPUT; the headers are not
 * marked, so a later graph over the same tensors keeps only its own
 * outputs (and what is flagged by hand). Returns NULL if an output is NULL, if the
 * context holds an error from an earlier builder call (the message stays),
 * or if a tensor it reaches is of no live context (freed since a node over
 * it was built; the message names the node). The graph is malloc'd: free
 * it with gml_graph_free, before or after gml_free of its context (freeing
 * touches no tensor: its plan and its copies of the headers are its own).
 * Several graphs may share the tensors of a context.
 * A graph reads the headers of its tensors when it plans, computes, prints
 * or hands one out, so it remembers every context they belong to (its own
 * and any other: weights, a KV cache) and checks that each is still live
 * first. After a gml_free of one of them, compute and plan return
 * GML_ERR_INVALID naming a tensor of the freed context, and gml_graph_node,
 * _leaf, _tensor_at, _data, _print, _dump_dot, _digest and _flops give
 * nothing (NULL, 0, GML_ERR_INVALID) with the thread's message; the
 * counts, the lookups by pointer (_find, _use_count, _tensor_index),
 * gml_graph_tensor (the graph's own copies), gml_graph_error, the setters
 * and gml_graph_free still work. A freed graph cannot be told from a live
 * one: do not use it. */
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
/* CPU features beyond the ISA levels above, which single kernels look for
 * (within the AVX-512 level, AVX512_BF16's VDPBF16PS runs bf16 compute:
 * docs/numerics.md). True when CPUID lists the feature and the OS saves the
 * registers it uses (XCR0: zmm state for the AVX-512 ones, ymm for
 * AVX_VNNI, the tile state for AMX). AMX also needs Linux's per-process
 * permission (arch_prctl ARCH_REQ_XCOMP_PERM), which an AMX kernel asks
 * for itself: this says only that the CPU and OS have it. False off x86. */
typedef enum gml_cpu_feature {
    GML_CPU_AVX512_BF16 = 0, /* VDPBF16PS, VCVTNE2PS2BF16 */
    GML_CPU_AVX512_VNNI,     /* VPDPBUSD on zmm */
    GML_CPU_AVX_VNNI,        /* VPDPBUSD on ymm, VEX-encoded */
    GML_CPU_AMX_TILE,
    GML_CPU_AMX_BF16,        /* TDPBF16PS */
    GML_CPU_AMX_INT8,        /* TDPBSSD, TDPBUSD */
    GML_CPU_FEATURE_COUNT
} gml_cpu_feature;
GML_API bool gml_cpu_has_feature(gml_cpu_feature f);
/* "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16",
 * "amx_int8"; "?" for an unknown value. */
GML_API const char *gml_cpu_feature_name(gml_cpu_feature f);
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
/* Packed weights. A matmul with compute bf16 or int8 whose b is a weight
 * of g (a leaf, or a view of one, that no node of g writes and that is
 * flagged neither GML_FLAG_INPUT nor GML_FLAG_PARAM) has it packed into its
 * kernel's layout once, by the first compute that runs the node at the ISA
 * (and again when the weight's data pointer, strides or the ISA change),
 * and g keeps the packed copy (freed with g) for every later compute. So
 * values written into a weight's memory in place after a compute are not
 * seen until this is called: the next compute packs every weight of g
 * again. Inputs (a KV cache, x) and params are never packed. Not from a
 * node callback of g (GML_ERR_INVALID there). docs/memory-and-threads.md. */
GML_API gml_status gml_graph_weights_changed(gml_graph *g);
/* The bytes of packed weights g keeps (0 before its first compute, or when
 * none of its matmuls packs one). */
GML_API size_t gml_graph_packed_bytes(const gml_graph *g);
/* The message of the last failed compute or plan of g ("" when none). A
 * compute refused because g was busy (from a node callback) keeps its
 * message for the refused thread alone, never overwriting the running
 * compute's, until that thread's own compute of g ends (a callback that
 * computed its own graph and then returned false: the outer compute's
 * "stopped by the node callback"). Read it on the thread that computed.
 * g NULL: the thread's message, as gml_last_error(NULL). */
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
#endif /* GGMLITE_COMPUTE_H */
