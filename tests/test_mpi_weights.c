/* gml_mpi_weights_agree under mpirun (test_mpi_weights.sh runs it at P = 1,
 * 2 and 7): every rank builds a weights context that differs from rank 0's
 * in one way of its own, and every rank must get the same answer.
 *
 *   rank 0  a_t f32 [5,3], a f32 [3,5] (a_t transposed, contiguous), b f32 [32],
 *           q q8_0 [2,32]
 *   rank 1  as rank 0, but a is a strided view (gml_transpose of a_t): the same
 *           values, so the same digest (agrees)
 *   rank 2  b's element 17 one ulp up (digest)
 *   rank 3  q is f32 [2,32] (dtype)
 *   rank 4  no b (names: a tensor rank 0 has)
 *   rank 5  one more tensor z (names: a tensor rank 0 lacks)
 *   rank 6  b is [33] (shape)
 *
 * At P = 7 ranks 2..6 differ: the message names the first four, each with its
 * tensor and how, and "and 1 more rank"; at P <= 2 every rank agrees. Then a
 * tensor without data on the last rank: an error on every rank. */
#include <ggmlite/ggmlite.h>
#include <ggmlite/mpi.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

static float value(int i) { return sinf(0.37f * (float)i + 0.11f); }

static gml_context *weights_of(int rank) {
    gml_context *c = gml_init((gml_init_params){.mem_size = 1 << 20});
    gml_tensor *a_t = gml_set_name(gml_new_tensor_2d(c, GML_F32, 5, 3), "a_t");
    for (int i = 0; i < 15; i++) ((float *)a_t->data)[i] = value(i);
    if (rank == 1) {
        gml_set_name(gml_transpose(c, a_t, 0, 1), "a");
    } else {
        gml_tensor *a = gml_set_name(gml_new_tensor_2d(c, GML_F32, 3, 5), "a");
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 5; j++) ((float *)a->data)[i * 5 + j] = value(j * 3 + i);
    }
    if (rank != 4) {
        const int n = rank == 6 ? 33 : 32;
        gml_tensor *b = gml_set_name(gml_new_tensor_1d(c, GML_F32, n), "b");
        for (int i = 0; i < n; i++) ((float *)b->data)[i] = value(100 + i);
        if (rank == 2) ((float *)b->data)[17] = nextafterf(((float *)b->data)[17], INFINITY);
    }
    float rows[64];
    for (int i = 0; i < 64; i++) rows[i] = value(200 + i);
    gml_tensor *q = gml_set_name(gml_new_tensor_2d(c, rank == 3 ? GML_F32 : GML_Q8_0, 2, 32), "q");
    if (rank == 3) memcpy(q->data, rows, sizeof rows);
    else gml_quantize_row_q8_0(rows, q->data, 64);
    if (rank == 5) {
        gml_tensor *z = gml_set_name(gml_new_tensor_1d(c, GML_F32, 1), "z");
        ((float *)z->data)[0] = 1;
    }
    return c;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    char err[2048];
    chk_case("P = %d, rank %d", P, rank);
    gml_context *c = weights_of(rank);
    gml_status st = gml_mpi_weights_agree(MPI_COMM_WORLD, c, err, sizeof err);
    if (P <= 2) {
        CHECK(st == GML_OK && err[0] == '\0', "status %d: %s", (int)st, err);
    } else if (P == 7) {
        CHECK(st == GML_ERR_INVALID, "status %d", (int)st);
        static const char *const want[] = {
            "the ranks' weights differ (every rank must read the same checkpoint): ",
            "rank 2: tensor 'b' f32 [32] has XXH3 ",
            "(digest: same name and shape, other values); rank 3: tensor 'q' is f32 [2,32], rank 0's is "
            "q8_0 [2,32] (dtype); rank 4 has no tensor 'b' (rank 0's f32 [32]) (names); rank 5 has tensor "
            "'z' (f32 [1]), rank 0 has none of that name (names); and 1 more rank"};
        for (size_t i = 0; i < sizeof want / sizeof *want; i++)
            CHECK(strstr(err, want[i]) != NULL, "the message lacks \"%s\": %s", want[i], err);
        CHECK(strstr(err, "rank 1") == NULL && strstr(err, "rank 6") == NULL, "names rank 1 or 6: %s", err);
        if (rank == 0) printf("P = 7: %s\n", err);
        /* the same text on every rank */
        char first[2048];
        memcpy(first, err, sizeof first);
        MPI_Bcast(first, (int)sizeof first, MPI_CHAR, 0, MPI_COMM_WORLD);
        CHECK(strcmp(first, err) == 0, "rank %d's message differs from rank 0's: %s", rank, err);
    }
    /* a tensor without data on the last rank: every rank fails, naming it */
    gml_context *n = gml_init((gml_init_params){.mem_size = 4 * gml_tensor_overhead(), .no_alloc = true});
    gml_set_name(gml_new_tensor_1d(n, GML_F32, 4), "unbound");
    st = gml_mpi_weights_agree(MPI_COMM_WORLD, rank == P - 1 ? n : NULL, err, sizeof err);
    char want[128];
    snprintf(want, sizeof want, "rank %d: weight 'unbound' has no data", P - 1);
    if (P > 1) CHECK(st == GML_ERR_INVALID && strstr(err, want), "status %d: %s", (int)st, err);
    /* NULL on every rank: no tensors, the same */
    st = gml_mpi_weights_agree(MPI_COMM_WORLD, NULL, err, sizeof err);
    CHECK(st == GML_OK, "NULL everywhere: status %d: %s", (int)st, err);
    gml_free(n);
    gml_free(c);
    int fails = chk_summary() != 0, any = 0;
    MPI_Allreduce(&fails, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
