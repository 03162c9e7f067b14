/* MPICH ABI family: MPICH, Intel MPI, MVAPICH, Cray MPICH (libmpi.so.12).
 * Handles are 32-bit integers; the status holds the count in its first two
 * words. Nothing else differs for jaxmpi: every constant comes from mpi4py at
 * run time. */
#ifndef JAXMPI_ABI_MPICH_H
#define JAXMPI_ABI_MPICH_H

#include <stdint.h>

#define JM_ABI_NAME "mpich"
#define JM_HANDLES_ARE_INTS 1

typedef int jm_Comm;
typedef int jm_Datatype;
typedef int jm_Op;
typedef int jm_Request;
typedef int jm_Group;

typedef struct jm_Status {
  int count_lo;
  int count_hi_and_cancelled;
  int MPI_SOURCE;
  int MPI_TAG;
  int MPI_ERROR;
} jm_Status;

#endif
