/* The MPI side of ggmlite/mpi.h: the rank-ordered sum, broadcasts, the
 * status exchange. */
#include <ggmlite/mpi.h>

#include "misuse.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK ((size_t)1 << 28) /* floats per MPI call: counts are ints */

static gml_status mpi_error(int rc, const char *what, char *err, size_t err_size) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
    if (err && err_size) snprintf(err, err_size, "%s: %s", what, s);
    return GML_ERR_IO;
}

gml_status gml_mpi_bcast_f32(MPI_Comm comm, float *buf, size_t n, int root, char *err,
                             size_t err_size) {
    if (n > 0) GML_MPI_NONNULL_ERR(buf, GML_ERR_INVALID, err, err_size);
    for (size_t i = 0; i < n; i += CHUNK) {
        const size_t c = n - i < CHUNK ? n - i : CHUNK;
        int rc = MPI_Bcast(buf + i, (int)c, MPI_FLOAT, root, comm);
        if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Bcast", err, err_size);
    }
    return GML_OK;
}

gml_status gml_mpi_sum_ordered(MPI_Comm comm, float *buf, size_t n, bool all, char *err,
                               size_t err_size) {
    if (n > 0) GML_MPI_NONNULL_ERR(buf, GML_ERR_INVALID, err, err_size);
    int rank, size, rc;
    if ((rc = MPI_Comm_rank(comm, &rank)) != MPI_SUCCESS || (rc = MPI_Comm_size(comm, &size)) != MPI_SUCCESS)
        return mpi_error(rc, "MPI_Comm_rank", err, err_size);
    /* Rank 0 allocates before anyone sends; its failure is everyone's. */
    float *tmp = NULL;
    int ok = 1;
    if (rank == 0 && size > 1) {
        tmp = malloc((n < CHUNK ? n : CHUNK) * sizeof *tmp + 1);
        ok = tmp != NULL;
    }
    if ((rc = MPI_Bcast(&ok, 1, MPI_INT, 0, comm)) != MPI_SUCCESS) {
        free(tmp);
        return mpi_error(rc, "MPI_Bcast", err, err_size);
    }
    if (!ok) {
        if (err && err_size) snprintf(err, err_size, "rank 0: out of memory for the sum of %zu floats", n);
        return GML_ERR_NOMEM;
    }
    for (size_t i = 0; i < n && size > 1; i += CHUNK) {
        const size_t c = n - i < CHUNK ? n - i : CHUNK;
        if (rank != 0) {
            rc = MPI_Send(buf + i, (int)c, MPI_FLOAT, 0, 0, comm);
            if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Send", err, err_size);
            continue;
        }
        for (int r = 1; r < size; r++) { /* ((p0 + p1) + p2) + ..., in rank order */
            rc = MPI_Recv(tmp, (int)c, MPI_FLOAT, r, 0, comm, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) {
                free(tmp);
                return mpi_error(rc, "MPI_Recv", err, err_size);
            }
            float *b = buf + i;
            for (size_t j = 0; j < c; j++) b[j] += tmp[j];
        }
    }
    free(tmp);
    return all && size > 1 ? gml_mpi_bcast_f32(comm, buf, n, 0, err, err_size) : GML_OK;
}

bool gml_mpi_agree(MPI_Comm comm, bool ok, const char *msg, char *out, size_t out_size) {
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int mine[2] = {ok ? size : rank, ok ? 0 : 1}, first = size, n_failed = 0;
    MPI_Allreduce(&mine[0], &first, 1, MPI_INT, MPI_MIN, comm);
    if (first == size) return true;
    MPI_Allreduce(&mine[1], &n_failed, 1, MPI_INT, MPI_SUM, comm);
    char why[1024] = "";
    if (rank == first) snprintf(why, sizeof why, "%s", msg && msg[0] ? msg : "failed (no message)");
    MPI_Bcast(why, (int)sizeof why, MPI_CHAR, first, comm);
    why[sizeof why - 1] = '\0';
    if (out && out_size) {
        if (n_failed > 1)
            snprintf(out, out_size, "rank %d (and %d more): %s", first, n_failed - 1, why);
        else
            snprintf(out, out_size, "rank %d: %s", first, why);
    }
    return false;
}
