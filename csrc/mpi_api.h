/* The MPI boundary. jaxmpi links no MPI: at import it binds to the very
 * library mpi4py loaded (dlopen RTLD_NOLOAD + dlsym) and takes every handle
 * and constant from mpi4py. The types of one ABI family come from the header
 * selected by JAXMPI_ABI at build time (abi/mpich.h, abi/openmpi.h,
 * abi/mpiabi.h); nothing outside this header and mpi_api.c knows which. */
#ifndef JAXMPI_MPI_API_H
#define JAXMPI_MPI_API_H

#include <stddef.h>
#include <stdint.h>

#if defined(JAXMPI_ABI_OPENMPI)
#include "abi/openmpi.h"
#elif defined(JAXMPI_ABI_MPIABI)
#include "abi/mpiabi.h"
#else
#include "abi/mpich.h"
#endif

typedef int64_t jm_Count;
typedef intptr_t jm_Aint;
typedef void jm_User_function(void *invec, void *inoutvec, int *len,
                              jm_Datatype *datatype);
typedef int jm_Comm_copy_attr_function(jm_Comm, int, void *, void *, void *,
                                       int *);
typedef int jm_Comm_delete_attr_function(jm_Comm, int, void *, void *);

/* A handle travels from Python as an unsigned 64-bit integer (mpi4py's
 * MPI._handleof, sign-extended for int handles). */
#if JM_HANDLES_ARE_INTS
#define JM_HANDLE(T, u64) ((T)(int32_t)(uint32_t)(u64))
#define JM_U64(h) ((uint64_t)(int64_t)(h))
#else
#define JM_HANDLE(T, u64) ((T)(uintptr_t)(u64))
#define JM_U64(h) ((uint64_t)(uintptr_t)(h))
#endif

/* Every MPI function jaxmpi calls: X(return type, name, required, params).
 * Optional entries (required = 0) are MPI-4 large-count variants, NULL when
 * the library lacks them. */
#define JM_MPI_FUNCTIONS(X)                                                    \
  X(int, Initialized, 1, (int *))                                              \
  X(int, Finalized, 1, (int *))                                                \
  X(int, Query_thread, 1, (int *))                                             \
  X(int, Get_library_version, 1, (char *, int *))                              \
  X(int, Get_version, 1, (int *, int *))                                       \
  X(double, Wtime, 1, (void))                                                  \
  X(int, Error_string, 1, (int, char *, int *))                                \
  X(int, Error_class, 1, (int, int *))                                         \
  X(int, Comm_rank, 1, (jm_Comm, int *))                                       \
  X(int, Comm_size, 1, (jm_Comm, int *))                                       \
  X(int, Comm_test_inter, 1, (jm_Comm, int *))                                 \
  X(int, Type_contiguous, 1, (int, jm_Datatype, jm_Datatype *))                \
  X(int, Type_create_struct, 1,                                                \
    (int, const int *, const jm_Aint *, const jm_Datatype *, jm_Datatype *))   \
  X(int, Type_create_resized, 1,                                               \
    (jm_Datatype, jm_Aint, jm_Aint, jm_Datatype *))                            \
  X(int, Type_commit, 1, (jm_Datatype *))                                      \
  X(int, Type_free, 1, (jm_Datatype *))                                        \
  X(int, Op_create, 1, (jm_User_function *, int, jm_Op *))                     \
  X(int, Get_count, 1, (const jm_Status *, jm_Datatype, int *))                \
  X(int, Barrier, 1, (jm_Comm))                                                \
  X(int, Allreduce, 1,                                                         \
    (const void *, void *, int, jm_Datatype, jm_Op, jm_Comm))                  \
  X(int, Allreduce_c, 0,                                                       \
    (const void *, void *, jm_Count, jm_Datatype, jm_Op, jm_Comm))             \
  X(int, Reduce, 1,                                                            \
    (const void *, void *, int, jm_Datatype, jm_Op, int, jm_Comm))             \
  X(int, Reduce_local, 1, (const void *, void *, int, jm_Datatype, jm_Op))     \
  X(int, Reduce_c, 0,                                                          \
    (const void *, void *, jm_Count, jm_Datatype, jm_Op, int, jm_Comm))        \
  X(int, Scan, 1, (const void *, void *, int, jm_Datatype, jm_Op, jm_Comm))    \
  X(int, Scan_c, 0,                                                            \
    (const void *, void *, jm_Count, jm_Datatype, jm_Op, jm_Comm))             \
  X(int, Bcast, 1, (void *, int, jm_Datatype, int, jm_Comm))                   \
  X(int, Bcast_c, 0, (void *, jm_Count, jm_Datatype, int, jm_Comm))            \
  X(int, Gather, 1,                                                            \
    (const void *, int, jm_Datatype, void *, int, jm_Datatype, int, jm_Comm))  \
  X(int, Gather_c, 0,                                                          \
    (const void *, jm_Count, jm_Datatype, void *, jm_Count, jm_Datatype, int,  \
     jm_Comm))                                                                 \
  X(int, Scatter, 1,                                                           \
    (const void *, int, jm_Datatype, void *, int, jm_Datatype, int, jm_Comm))  \
  X(int, Scatter_c, 0,                                                         \
    (const void *, jm_Count, jm_Datatype, void *, jm_Count, jm_Datatype, int,  \
     jm_Comm))                                                                 \
  X(int, Allgather, 1,                                                         \
    (const void *, int, jm_Datatype, void *, int, jm_Datatype, jm_Comm))       \
  X(int, Allgather_c, 0,                                                       \
    (const void *, jm_Count, jm_Datatype, void *, jm_Count, jm_Datatype,       \
     jm_Comm))                                                                 \
  X(int, Alltoall, 1,                                                          \
    (const void *, int, jm_Datatype, void *, int, jm_Datatype, jm_Comm))       \
  X(int, Alltoall_c, 0,                                                        \
    (const void *, jm_Count, jm_Datatype, void *, jm_Count, jm_Datatype,       \
     jm_Comm))                                                                 \
  X(int, Send, 1, (const void *, int, jm_Datatype, int, int, jm_Comm))         \
  X(int, Send_c, 0, (const void *, jm_Count, jm_Datatype, int, int, jm_Comm))  \
  X(int, Recv, 1,                                                              \
    (void *, int, jm_Datatype, int, int, jm_Comm, jm_Status *))                \
  X(int, Recv_c, 0,                                                            \
    (void *, jm_Count, jm_Datatype, int, int, jm_Comm, jm_Status *))           \
  X(int, Sendrecv, 1,                                                          \
    (const void *, int, jm_Datatype, int, int, void *, int, jm_Datatype, int,  \
     int, jm_Comm, jm_Status *))                                               \
  X(int, Sendrecv_c, 0,                                                        \
    (const void *, jm_Count, jm_Datatype, int, int, void *, jm_Count,          \
     jm_Datatype, int, int, jm_Comm, jm_Status *))                             \
  X(int, Isend, 1,                                                             \
    (const void *, int, jm_Datatype, int, int, jm_Comm, jm_Request *))         \
  X(int, Isend_c, 0,                                                           \
    (const void *, jm_Count, jm_Datatype, int, int, jm_Comm, jm_Request *))    \
  X(int, Irecv, 1, (void *, int, jm_Datatype, int, int, jm_Comm, jm_Request *)) \
  X(int, Irecv_c, 0,                                                           \
    (void *, jm_Count, jm_Datatype, int, int, jm_Comm, jm_Request *))          \
  X(int, Waitall, 1, (int, jm_Request *, jm_Status *))                         \
  X(int, Wait, 1, (jm_Request *, jm_Status *))                                 \
  X(int, Cancel, 1, (jm_Request *))                                            \
  X(int, Request_free, 1, (jm_Request *))                                     \
  JM_MPI_VFUNCTIONS(X)                                                         \
  JM_MPI_RELIABILITY_FUNCTIONS(X)                                              \
  JM_MPI_NATIVE_FUNCTIONS(X)                                                   \
  JM_MPI_RECORD_FUNCTIONS(X)

/* What only XLA's own collectives need (native.c): their communicators
 * are split from COMM_WORLD's duplicate; MPI_Abort for their MPI_Abort. */
#define JM_MPI_NATIVE_FUNCTIONS(X)                                             \
  X(int, Comm_split, 1, (jm_Comm, int, int, jm_Comm *))                        \
  X(int, Abort, 1, (jm_Comm, int))

/* The flight recorder's (record.c): which COMM_WORLD ranks a communicator
 * holds, once per communicator. */
#define JM_MPI_RECORD_FUNCTIONS(X)                                             \
  X(int, Comm_group, 1, (jm_Comm, jm_Group *))                                 \
  X(int, Group_translate_ranks, 1, (jm_Group, int, const int *, jm_Group,      \
                                    int *))                                    \
  X(int, Group_free, 1, (jm_Group *))

/* Variable-count collectives: the plain calls, their nonblocking variants
 * (the watchdog), the MPI-4 large-count variants (optional) and
 * MPI_Alltoallw (large counts without them: one derived datatype per
 * peer, its displacement inside). */
#define JM_MPI_VFUNCTIONS(X)                                                   \
  X(int, Allgatherv, 1,                                                        \
    (const void *, int, jm_Datatype, void *, const int *, const int *,         \
     jm_Datatype, jm_Comm))                                                    \
  X(int, Allgatherv_c, 0,                                                      \
    (const void *, jm_Count, jm_Datatype, void *, const jm_Count *,            \
     const jm_Aint *, jm_Datatype, jm_Comm))                                   \
  X(int, Iallgatherv, 1,                                                       \
    (const void *, int, jm_Datatype, void *, const int *, const int *,         \
     jm_Datatype, jm_Comm, jm_Request *))                                      \
  X(int, Gatherv, 1,                                                           \
    (const void *, int, jm_Datatype, void *, const int *, const int *,         \
     jm_Datatype, int, jm_Comm))                                               \
  X(int, Gatherv_c, 0,                                                         \
    (const void *, jm_Count, jm_Datatype, void *, const jm_Count *,            \
     const jm_Aint *, jm_Datatype, int, jm_Comm))                              \
  X(int, Igatherv, 1,                                                          \
    (const void *, int, jm_Datatype, void *, const int *, const int *,         \
     jm_Datatype, int, jm_Comm, jm_Request *))                                 \
  X(int, Scatterv, 1,                                                          \
    (const void *, const int *, const int *, jm_Datatype, void *, int,         \
     jm_Datatype, int, jm_Comm))                                               \
  X(int, Scatterv_c, 0,                                                        \
    (const void *, const jm_Count *, const jm_Aint *, jm_Datatype, void *,     \
     jm_Count, jm_Datatype, int, jm_Comm))                                     \
  X(int, Iscatterv, 1,                                                         \
    (const void *, const int *, const int *, jm_Datatype, void *, int,         \
     jm_Datatype, int, jm_Comm, jm_Request *))                                 \
  X(int, Alltoallv, 1,                                                         \
    (const void *, const int *, const int *, jm_Datatype, void *, const int *, \
     const int *, jm_Datatype, jm_Comm))                                       \
  X(int, Alltoallv_c, 0,                                                       \
    (const void *, const jm_Count *, const jm_Aint *, jm_Datatype, void *,     \
     const jm_Count *, const jm_Aint *, jm_Datatype, jm_Comm))                 \
  X(int, Ialltoallv, 1,                                                        \
    (const void *, const int *, const int *, jm_Datatype, void *, const int *, \
     const int *, jm_Datatype, jm_Comm, jm_Request *))                         \
  X(int, Alltoallw, 1,                                                         \
    (const void *, const int *, const int *, const jm_Datatype *, void *,      \
     const int *, const int *, const jm_Datatype *, jm_Comm))

/* Nonblocking calls, probes and communicator attributes: the deadlock
 * watchdog (JAXMPI_TIMEOUT) and cross-rank checks (JAXMPI_CHECK), MPI-3. */
#define JM_MPI_RELIABILITY_FUNCTIONS(X)                                        \
  X(int, Comm_create_keyval, 1,                                                \
    (jm_Comm_copy_attr_function *, jm_Comm_delete_attr_function *, int *,      \
     void *))                                                                  \
  X(int, Comm_set_attr, 1, (jm_Comm, int, void *))                             \
  X(int, Comm_get_attr, 1, (jm_Comm, int, void *, int *))                      \
  X(int, Comm_idup, 1, (jm_Comm, jm_Comm *, jm_Request *))                     \
  X(int, Comm_free, 1, (jm_Comm *))                                            \
  X(int, Test, 1, (jm_Request *, int *, jm_Status *))                          \
  X(int, Testall, 1, (int, jm_Request *, int *, jm_Status *))                  \
  X(int, Probe, 1, (int, int, jm_Comm, jm_Status *))                           \
  X(int, Iprobe, 1, (int, int, jm_Comm, int *, jm_Status *))                   \
  X(int, Ibarrier, 1, (jm_Comm, jm_Request *))                                 \
  X(int, Iallreduce, 1,                                                        \
    (const void *, void *, int, jm_Datatype, jm_Op, jm_Comm, jm_Request *))    \
  X(int, Ireduce, 1,                                                           \
    (const void *, void *, int, jm_Datatype, jm_Op, int, jm_Comm,              \
     jm_Request *))                                                            \
  X(int, Iscan, 1,                                                             \
    (const void *, void *, int, jm_Datatype, jm_Op, jm_Comm, jm_Request *))    \
  X(int, Ibcast, 1, (void *, int, jm_Datatype, int, jm_Comm, jm_Request *))    \
  X(int, Igather, 1,                                                           \
    (const void *, int, jm_Datatype, void *, int, jm_Datatype, int, jm_Comm,   \
     jm_Request *))                                                            \
  X(int, Iscatter, 1,                                                          \
    (const void *, int, jm_Datatype, void *, int, jm_Datatype, int, jm_Comm,   \
     jm_Request *))                                                            \
  X(int, Iallgather, 1,                                                        \
    (const void *, int, jm_Datatype, void *, int, jm_Datatype, jm_Comm,        \
     jm_Request *))                                                            \
  X(int, Ialltoall, 1,                                                         \
    (const void *, int, jm_Datatype, void *, int, jm_Datatype, jm_Comm,        \
     jm_Request *))                                                            \
  JM_MPI_REDUCE_SCATTER_EXSCAN_FUNCTIONS(X)

/* reduce_scatter and exscan (MPI-2/3; the _c variants MPI-4, optional). */
#define JM_MPI_REDUCE_SCATTER_EXSCAN_FUNCTIONS(X)                              \
  X(int, Reduce_scatter_block, 1,                                              \
    (const void *, void *, int, jm_Datatype, jm_Op, jm_Comm))                  \
  X(int, Reduce_scatter_block_c, 0,                                            \
    (const void *, void *, jm_Count, jm_Datatype, jm_Op, jm_Comm))             \
  X(int, Ireduce_scatter_block, 1,                                             \
    (const void *, void *, int, jm_Datatype, jm_Op, jm_Comm, jm_Request *))    \
  X(int, Reduce_scatter, 1,                                                    \
    (const void *, void *, const int *, jm_Datatype, jm_Op, jm_Comm))          \
  X(int, Reduce_scatter_c, 0,                                                  \
    (const void *, void *, const jm_Count *, jm_Datatype, jm_Op, jm_Comm))     \
  X(int, Ireduce_scatter, 1,                                                   \
    (const void *, void *, const int *, jm_Datatype, jm_Op, jm_Comm,           \
     jm_Request *))                                                            \
  X(int, Exscan, 1, (const void *, void *, int, jm_Datatype, jm_Op, jm_Comm))  \
  X(int, Exscan_c, 0,                                                          \
    (const void *, void *, jm_Count, jm_Datatype, jm_Op, jm_Comm))             \
  X(int, Iexscan, 1,                                                           \
    (const void *, void *, int, jm_Datatype, jm_Op, jm_Comm, jm_Request *))

#define JM_DECLARE_FN(ret, name, req, params) ret(*name) params;
typedef struct jm_mpi_api {
  JM_MPI_FUNCTIONS(JM_DECLARE_FN)
} jm_mpi_api;
#undef JM_DECLARE_FN

/* Constants of the running MPI, from mpi4py. */
typedef struct jm_mpi_consts {
  int any_source, any_tag, proc_null, undefined;
  int thread_serialized;
  int err_truncate; /* MPI_ERR_TRUNCATE's class, -1 until configured */
  int err_pending;  /* MPI_ERR_PENDING's, likewise */
  jm_Datatype byte;
  void *in_place; /* MPI_IN_PLACE, from mpi4py (int(MPI.IN_PLACE)) */
} jm_mpi_consts;

extern jm_mpi_api jm_mpi;        /* written once by jm_mpi_bind, then read-only */
extern jm_mpi_consts jm_const;   /* likewise */

/* Bind the function table to the loaded MPI library; `libpath` may be NULL
 * (search the process for it). Returns 0 or writes a message to err. */
int jm_mpi_bind(const char *libpath, char *err, size_t errlen);
const char *jm_mpi_library_path(void);
/* 1 or 0 from MPIX_Query_cuda_support, -1 if the library cannot tell. */
int jm_mpi_cuda_aware(void);

/* Large counts. Every wrapper takes 64-bit element counts and works whatever
 * the count: up to `jm_count_limit` elements it makes the plain call; beyond
 * it, the MPI-4 `_c` call where the library has one (unless disabled), else a
 * derived datatype (data movement) or a loop over chunks (reductions, whose
 * predefined ops take only predefined datatypes). `elsize` is the byte size
 * of one element of `type`. */
typedef struct jm_count_cfg {
  int64_t limit;   /* largest count passed as a C int (INT_MAX by default) */
  int use_c;       /* use MPI-4 large-count calls when present */
} jm_count_cfg;
extern jm_count_cfg jm_count;

#endif
