/* gml_mpi_weights_agree (ggmlite/mpi.h): before computing, the ranks check
 * that they hold the same weights. Each rank describes every tensor of its
 * weights context (name, type, shape, XXH3-64 of its bytes); rank 0
 * broadcasts its list; each rank compares its own against it and the first
 * difference, if any, becomes its message; the messages of the first ranks
 * that differ are broadcast, so every rank returns the same error. */
#include <ggmlite/mpi.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* One tensor as rank 0 sends it (plain bytes: the ranks run one build). */
typedef struct wrec {
    char name[GML_MAX_NAME];
    int32_t type, n_dims;
    int64_t ne[GML_MAX_DIMS];
    uint64_t digest;
} wrec;

#define N_NAMED 4  /* ranks whose difference is spelled out; the rest are counted */
#define MSG_MAX 400 /* one rank's difference */

/* XXH3-64 of t's elements in row-major order (its bytes when contiguous;
 * a strided tensor hashes as its contiguous copy would). q8_0 rows are
 * whole blocks: a row of n values is n / 32 blocks of 34 bytes. */
static uint64_t digest_of(const gml_tensor *t) {
    if (gml_is_contiguous(t)) return XXH3_64bits(t->data, gml_nbytes(t));
    XXH3_state_t *st = XXH3_createState();
    if (!st) return 0;
    XXH3_64bits_reset(st);
    const size_t es = gml_type_size(t->type);
    const int64_t bs = gml_type_block_size(t->type), inner = t->ne[3] / bs;
    const bool rows = t->nb[3] == es; /* the last dim contiguous: whole rows at once */
    for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++) {
                const char *row = (const char *)t->data + i0 * (int64_t)t->nb[0] +
                                  i1 * (int64_t)t->nb[1] + i2 * (int64_t)t->nb[2];
                if (rows) {
                    XXH3_64bits_update(st, row, (size_t)inner * es);
                    continue;
                }
                for (int64_t i3 = 0; i3 < inner; i3++)
                    XXH3_64bits_update(st, row + i3 * (int64_t)t->nb[3], es);
            }
    const uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

static void shape_text(const wrec *r, char *buf, size_t size) {
    size_t k = (size_t)snprintf(buf, size, "%s [", gml_type_name((gml_type)r->type));
    for (int d = GML_MAX_DIMS - r->n_dims; d < GML_MAX_DIMS && k < size; d++)
        k += (size_t)snprintf(buf + k, size - k, "%s%" PRId64, d > GML_MAX_DIMS - r->n_dims ? "," : "", r->ne[d]);
    if (k < size) snprintf(buf + k, size - k, "]");
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const wrec *)a)->name, ((const wrec *)b)->name);
}

/* This rank's list (in ctx's order) into *out; false with the cause in msg. */
static bool describe(const gml_context *ctx, wrec **out, int *n_out, char *msg, size_t size) {
    int n = 0;
    for (gml_tensor *t = ctx ? gml_get_first_tensor(ctx) : NULL; t; t = gml_get_next_tensor(ctx, t)) n++;
    wrec *r = calloc((size_t)n + 1, sizeof *r);
    if (!r) return snprintf(msg, size, "out of memory for the list of %d weights", n), false;
    int i = 0;
    for (gml_tensor *t = ctx ? gml_get_first_tensor(ctx) : NULL; t; t = gml_get_next_tensor(ctx, t), i++) {
        if (!t->data) {
            free(r);
            return snprintf(msg, size, "weight '%s' has no data (a no_alloc context: bind or map it "
                            "before the check)", t->name), false;
        }
        snprintf(r[i].name, sizeof r[i].name, "%s", t->name);
        r[i].type = (int32_t)t->type;
        r[i].n_dims = t->n_dims;
        memcpy(r[i].ne, t->ne, sizeof r[i].ne);
        r[i].digest = digest_of(t);
    }
    *out = r;
    *n_out = n;
    return true;
}

/* The first difference between rank 0's list (in its order) and this rank's;
 * "" when none. */
static void compare(const wrec *r0, int n0, const wrec *mine, int n, int rank, char *msg, size_t size) {
    msg[0] = '\0';
    wrec *sorted = malloc(((size_t)n + 1) * sizeof *sorted);
    if (!sorted) {
        snprintf(msg, size, "rank %d: out of memory comparing its weights with rank 0's", rank);
        return;
    }
    if (n) memcpy(sorted, mine, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, by_name);
    char s0[GML_SHAPE_MAX + 8], s1[GML_SHAPE_MAX + 8];
    int found = 0;
    for (int i = 0; i < n0 && !msg[0]; i++) {
        const wrec *m = n ? bsearch(&r0[i], sorted, (size_t)n, sizeof *sorted, by_name) : NULL;
        if (!m) {
            shape_text(&r0[i], s0, sizeof s0);
            snprintf(msg, size, "rank %d has no tensor '%s' (rank 0's %s) (names)", rank, r0[i].name, s0);
            continue;
        }
        found++;
        shape_text(&r0[i], s0, sizeof s0);
        shape_text(m, s1, sizeof s1);
        if (strcmp(s0, s1) != 0)
            snprintf(msg, size, "rank %d: tensor '%s' is %s, rank 0's is %s (%s)", rank, m->name, s1, s0,
                     m->type != r0[i].type ? "dtype" : "shape");
        else if (m->digest != r0[i].digest)
            snprintf(msg, size, "rank %d: tensor '%s' %s has XXH3 %016" PRIx64 ", rank 0's %016" PRIx64
                     " (digest: same name and shape, other values)", rank, m->name, s1, m->digest,
                     r0[i].digest);
    }
    free(sorted);
    if (msg[0] || found == n) return;
    for (int i = 0; i < n; i++) { /* a tensor rank 0 lacks: the first in this rank's order */
        bool in0 = false;
        for (int j = 0; j < n0 && !in0; j++) in0 = strcmp(r0[j].name, mine[i].name) == 0;
        if (!in0) {
            shape_text(&mine[i], s1, sizeof s1);
            snprintf(msg, size, "rank %d has tensor '%s' (%s), rank 0 has none of that name (names)", rank,
                     mine[i].name, s1);
            return;
        }
    }
}

gml_status gml_mpi_weights_agree(MPI_Comm comm, const gml_context *wctx, char *err, size_t err_size) {
    char msg[MSG_MAX] = "", why[1200];
    if (err && err_size) err[0] = '\0';
    int rank = 0, size = 1;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS || MPI_Comm_size(comm, &size) != MPI_SUCCESS) {
        if (err && err_size) snprintf(err, err_size, "weights_agree: MPI_Comm_rank/size failed");
        return GML_ERR_IO;
    }
    if (size == 1) return GML_OK; /* nothing to compare */
    /* 1. every rank: its list (a failure here is every rank's) */
    wrec *mine = NULL, *r0 = NULL;
    int n = 0, n0 = 0;
    bool ok = describe(wctx, &mine, &n, msg, sizeof msg);
    if (!gml_mpi_agree(comm, ok, msg, why, sizeof why)) {
        free(mine);
        if (err && err_size) snprintf(err, err_size, "weights_agree: %s", why);
        return GML_ERR_INVALID;
    }
    /* 2. rank 0's list to everyone */
    n0 = n;
    MPI_Bcast(&n0, 1, MPI_INT, 0, comm);
    r0 = rank == 0 ? mine : calloc((size_t)n0 + 1, sizeof *r0);
    ok = r0 != NULL;
    if (!ok) snprintf(msg, sizeof msg, "out of memory for rank 0's list of %d weights", n0);
    if (!gml_mpi_agree(comm, ok, msg, why, sizeof why)) {
        free(mine);
        if (err && err_size) snprintf(err, err_size, "weights_agree: %s", why);
        return GML_ERR_NOMEM;
    }
    const size_t bytes = (size_t)n0 * sizeof *r0, step = (size_t)1 << 30;
    for (size_t at = 0; at < bytes; at += step)
        MPI_Bcast((char *)r0 + at, (int)(bytes - at < step ? bytes - at : step), MPI_BYTE, 0, comm);
    /* 3. each rank's first difference; the first ranks' messages to everyone */
    if (rank != 0) compare(r0, n0, mine, n, rank, msg, sizeof msg);
    if (r0 != mine) free(r0);
    free(mine);
    int mine_bad = msg[0] != '\0', n_bad = 0;
    MPI_Allreduce(&mine_bad, &n_bad, 1, MPI_INT, MPI_SUM, comm);
    if (!n_bad) return GML_OK;
    size_t k = (size_t)snprintf(why, sizeof why, "the ranks' weights differ (every rank must read the same "
                                "checkpoint): ");
    int last = 0;
    for (int i = 0; i < N_NAMED && i < n_bad; i++) {
        int cand = mine_bad && rank > last ? rank : size, first = size;
        MPI_Allreduce(&cand, &first, 1, MPI_INT, MPI_MIN, comm);
        char one[MSG_MAX];
        if (rank == first) memcpy(one, msg, sizeof one);
        MPI_Bcast(one, (int)sizeof one, MPI_CHAR, first, comm);
        one[sizeof one - 1] = '\0';
        if (k < sizeof why) k += (size_t)snprintf(why + k, sizeof why - k, "%s%s", i ? "; " : "", one);
        last = first;
    }
    if (n_bad > N_NAMED && k < sizeof why)
        snprintf(why + k, sizeof why - k, "; and %d more rank%s", n_bad - N_NAMED, n_bad - N_NAMED == 1 ? "" : "s");
    if (err && err_size) snprintf(err, err_size, "%s", why);
    return GML_ERR_INVALID;
}
