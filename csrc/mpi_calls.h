/* The MPI calls of the op bodies, each taking 64-bit counts and made
 * through the watchdog (see mpi_api.h for the large-count rules and
 * watchdog.h for the deadline). Above mpi_api.c and watchdog.c. */
#ifndef JAXMPI_MPI_CALLS_H
#define JAXMPI_MPI_CALLS_H

#include "mpi_api.h"

int jm_Allreduce(const void *s, void *r, int64_t n, size_t elsize,
                 jm_Datatype t, jm_Op op, jm_Comm comm);
int jm_Reduce(const void *s, void *r, int64_t n, size_t elsize, jm_Datatype t,
              jm_Op op, int root, jm_Comm comm);
int jm_Scan(const void *s, void *r, int64_t n, size_t elsize, jm_Datatype t,
            jm_Op op, jm_Comm comm);
int jm_Bcast(void *buf, int64_t n, size_t elsize, jm_Datatype t, int root,
             jm_Comm comm);
int jm_Gather(const void *s, void *r, int64_t n, size_t elsize, jm_Datatype t,
              int root, jm_Comm comm);
int jm_Scatter(const void *s, void *r, int64_t n, size_t elsize,
               jm_Datatype t, int root, jm_Comm comm);
int jm_Allgather(const void *s, void *r, int64_t n, size_t elsize,
                 jm_Datatype t, jm_Comm comm);
int jm_Alltoall(const void *s, void *r, int64_t n, size_t elsize,
                jm_Datatype t, jm_Comm comm);
int jm_Send(const void *buf, int64_t n, size_t elsize, jm_Datatype t,
            int dest, int tag, jm_Comm comm);
int jm_Recv(void *buf, int64_t n, size_t elsize, jm_Datatype t, int source,
            int tag, jm_Comm comm, jm_Status *status);
int jm_Sendrecv(const void *s, int64_t sn, size_t selsize, jm_Datatype st,
                int dest, int sendtag, void *r, int64_t rn, size_t relsize,
                jm_Datatype rt, int source, int recvtag, jm_Comm comm,
                jm_Status *status);

/* Rank r gets op over ranks of s's block r (n elements per block). */
int jm_Reduce_scatter_block(const void *s, void *r, int64_t n, size_t elsize,
                            jm_Datatype t, jm_Op op, jm_Comm comm);
/* Rank r gets op over ranks of s's block r of counts[r] elements (blocks in
 * rank order); `size` counts; `ints`: room for `size` ints, which MPI reads
 * until the call completes (a call the watchdog abandoned: keep it). */
int jm_Reduce_scatter(const void *s, void *r, const int64_t *counts,
                      int *ints, int size, int rank, size_t elsize,
                      jm_Datatype t, jm_Op op, jm_Comm comm);
/* Exclusive prefix reduction (the receive buffer of rank 0 is untouched or
 * undefined, as MPI says: the caller fills it). */
int jm_Exscan(const void *s, void *r, int64_t n, size_t elsize, jm_Datatype t,
              jm_Op op, jm_Comm comm);

/* Variable counts. Counts and displacements are in elements of `t`, one
 * per rank of `comm` (`size` of them); for the rooted ops every rank passes
 * the root's arrays (the same on every rank: every rank then chooses the
 * same path). Within the limit the plain call (its nonblocking variant
 * under the watchdog); beyond it the MPI-4 `_c` call, else MPI_Alltoallw
 * with one derived datatype per peer that holds the block's byte
 * displacement (MPI_Aint) and covers its count. */
int jm_Allgatherv(const void *s, int64_t sn, void *r, const int64_t *rcounts,
                  const int64_t *rdispls, int size, size_t elsize,
                  jm_Datatype t, jm_Comm comm);
int jm_Gatherv(const void *s, int64_t sn, void *r, const int64_t *counts,
               const int64_t *displs, int is_root, int size, size_t elsize,
               jm_Datatype t, int root, jm_Comm comm);
int jm_Scatterv(const void *s, const int64_t *counts, const int64_t *displs,
                int is_root, void *r, int64_t rn, int size, size_t elsize,
                jm_Datatype t, int root, jm_Comm comm);
/* Each rank's counts are its own here, so no rank can know whether
 * another takes a large-count path: beyond the limit in elements, the
 * counts are passed in rows of `row` elements (a contiguous datatype: the
 * same type signature), else the MPI-4 call; with neither, JM_ERR_COUNT. */
int jm_Alltoallv(const void *s, const int64_t *scounts,
                 const int64_t *sdispls, void *r, const int64_t *rcounts,
                 const int64_t *rdispls, int64_t row, int size, size_t elsize,
                 jm_Datatype t, jm_Comm comm);

/* Barrier, through the watchdog like every other call. */
int jm_Barrier(jm_Comm comm);

/* Nonblocking point-to-point; a derived datatype made for a large count is
 * freed at once (MPI keeps it alive until the request completes). */
int jm_Isend(const void *buf, int64_t n, size_t elsize, jm_Datatype t,
             int dest, int tag, jm_Comm comm, jm_Request *req);
int jm_Irecv(void *buf, int64_t n, size_t elsize, jm_Datatype t, int source,
             int tag, jm_Comm comm, jm_Request *req);

/* Bytes a completed receive delivered, or -1 if MPI cannot say in an int. */
int64_t jm_received_bytes(const jm_Status *status);

#endif
