/* MPI-5 standard ABI (libmpi_abi.so.1). Handles are pointers to opaque
 * structs; the status has three public fields and five reserved ints. */
#ifndef JAXMPI_ABI_MPIABI_H
#define JAXMPI_ABI_MPIABI_H

#include <stdint.h>

#define JM_ABI_NAME "mpiabi"
#define JM_HANDLES_ARE_INTS 0

typedef struct MPI_ABI_Comm *jm_Comm;
typedef struct MPI_ABI_Datatype *jm_Datatype;
typedef struct MPI_ABI_Op *jm_Op;
typedef struct MPI_ABI_Request *jm_Request;
typedef struct MPI_ABI_Group *jm_Group;

typedef struct jm_Status {
  int MPI_SOURCE;
  int MPI_TAG;
  int MPI_ERROR;
  int MPI_internal[5];
} jm_Status;

#endif
