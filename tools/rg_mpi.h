/* run-graph --parallel: the pieces of rg_mpi.c (heads) that the other
 * --parallel modes reuse (rg_mpi_ring.c: context, the prompt;
 * rg_mpi_decode.c: context with --decode), with MPI (GGMLITE_HAVE_MPI) only. */
#ifndef RUN_GRAPH_RG_MPI_H
#define RUN_GRAPH_RG_MPI_H

#include "rg.h"
#include "rg_time.h"

#include <ggmlite/layers.h>
#include <ggmlite/mpi.h>

enum { K_MHA, K_GQA, K_LLAMA };
extern const char *const RG_MPI_KIND[3]; /* "mha", "gqa", "llama" */

typedef struct popts {
    int kind;
    const char *weights, *input, *output, *isa;
    int64_t B, T, D, F, window;
    int H, G, threads, repeat;
    bool causal, rope, done;
    float rope_theta, rms_eps, softcap;
    uint64_t seed;
    bool context;      /* --parallel context (set before parsing) */
    bool sinks, alibi; /* --sinks, --alibi (mha, gqa; context only) */
    bool zigzag;       /* --zigzag (context only): the load-balanced layout */
    bool json;         /* --json: rank 0 prints one JSON object instead of the summary */
    bool nan_trap;     /* --nan-trap (heads only): each rank traps in its own graphs */
    bool non_strict;   /* --non-strict: the file's tensors the block does not bind are allowed */
} popts;

/* One rank's state (the heads mode's graphs at the end). */
typedef struct prun {
    popts o;
    int rank, P;
    const char *weights; /* the file this rank reads (the fault hook may change it) */
    gml_safetensors *st;
    gml_context *wctx, *dctx, *gctx;
    gml_attn_weights aw;
    gml_llama_weights lw;
    char prefix[32];
    int64_t B, T, D, F;
    int H, G;
    bool random_weights, random_input;
    gml_tp_share s;
    gml_tensor *x, *att, *part, *h, *mlp, *out; /* out: rank 0's result */
    gml_graph *g1, *g2;
} prun;

/* The options of --parallel heads or context (context true) from the
 * parse, and the checks that depend on the model. */
bool rg_mpi_options(const rg_opts *g, bool context, popts *o, rg_err *e);
/* The weights file mapped, bound and checked strictly. */
bool rg_mpi_map_weights(prun *r, char *msg, size_t size);
/* The sizes from the input's dims (rank 0's, broadcast), weights, flags, defaults. */
bool rg_mpi_settle(prun *r, const int64_t xdim[3], char *msg, size_t size);
/* Random weights named and filled as the single-process run-graph's. */
bool rg_mpi_random_weights(prun *r, char *msg, size_t size);
/* The steps every --parallel mode takes (rg_mpi.c, also rg_mpi_decode.c's):
 * the number of threads per rank by default, the machine's cores over the
 * ranks on it; --isa (false, with the message, when the CPU lacks it); the
 * weights file rank `rank` reads (GGMLITE_MPI_TEST_FAULT="R:PATH" makes
 * rank R read PATH instead, for the tests); rank 0's input x, f32 [B, T, D]
 * (its dims into xdim; false with the message otherwise). */
int rg_mpi_default_threads(void);
bool rg_mpi_set_isa(const char *name, char *msg, size_t size);
const char *rg_mpi_weights_of(const char *weights, int rank);
bool rg_mpi_read_x(const char *path, gml_context **xctx, int64_t xdim[3], char *msg, size_t size);
/* The first collective step of the prompt modes: --isa, then rank 0's input
 * (rg_mpi_read_x, when given); the ranks agree (a failure is rank R's
 * message on every rank, in e) and rank 0's dims are broadcast to xdim. */
bool rg_mpi_start(int rank, const char *isa, const char *input, gml_context **xctx,
                  int64_t xdim[3], rg_err *e);
/* Collective: every rank holds the same weights (gml_mpi_weights_agree over
 * wctx, the file's tensors as loaded; NULL on every rank for random weights,
 * made alike from the seed); false on every rank, with the message naming
 * the ranks and tensors that differ, otherwise. */
bool rg_mpi_weights_agree(const gml_context *wctx, rg_err *e);
/* The start of the prompt modes (heads, context), collective, after the
 * options: the threads per rank (default), rg_mpi_start (--isa, rank 0's
 * input into *xctx, NULL without --input), the weights mapped
 * (rg_mpi_map_weights) or made random and the same on every rank
 * (rg_mpi_weights_agree), the sizes (rg_mpi_settle). false on every rank,
 * with rank R's message in e, when a step fails on any. */
bool rg_mpi_setup(prun *r, gml_context **xctx, rg_err *e);
/* Collective: x [B, T, D] on every rank holds rank 0's input, xctx's
 * tensor or (xctx NULL) random from the seed; r->random_input says which. */
bool rg_mpi_share_input(prun *r, const gml_context *xctx, gml_tensor *x, rg_err *e);
/* The end of every mode: the cause said (rank 0 for all; a runtime cause by
 * each rank with it), MPI_Finalize, run-graph's exit status. */
int rg_mpi_finish(bool ok, int rank, int n_ranks, const rg_err *e);

/* rg_mpi_ring.c: --parallel context without --decode; rg_mpi_decode.c: with
 * --decode. As rg_parallel_main. */
int rg_mpi_ring_main(int argc, char **argv, const rg_opts *g, bool parsed, const rg_err *pe);
int rg_mpi_decode_main(int argc, char **argv, const rg_opts *g, bool parsed, const rg_err *pe);

#endif
