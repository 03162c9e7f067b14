/* Open MPI ABI (libmpi.so.40, Open MPI 4.x and 5.x). Handles are pointers to
 * library-internal structs; the status ends with a size_t byte count. */
#ifndef JAXMPI_ABI_OPENMPI_H
#define JAXMPI_ABI_OPENMPI_H

#include <stddef.h>
#include <stdint.h>

#define JM_ABI_NAME "openmpi"
#define JM_HANDLES_ARE_INTS 0

typedef struct ompi_communicator_t *jm_Comm;
typedef struct ompi_datatype_t *jm_Datatype;
typedef struct ompi_op_t *jm_Op;
typedef struct ompi_request_t *jm_Request;
typedef struct ompi_group_t *jm_Group;

typedef struct jm_Status {
  int MPI_SOURCE;
  int MPI_TAG;
  int MPI_ERROR;
  int cancelled;
  size_t ucount;
} jm_Status;

#endif
