/* The native calls: the MPI calls of XLA's own collectives (a plain JAX
 * program's psum, all_gather, ... under `python -m jaxmpi.distributed`),
 * served for the surface library jaxlib's MPItrampoline loads
 * (csrc/xla/surface.c, the table csrc/xla/abi.h). Each call is translated
 * from the surface's handles to the running MPI's and made through the
 * watchdog's wrappers (mpi_calls.c). docs/design.md, "Plain JAX on MPI".
 * Above mpi_calls.c and watchdog.c. */
#ifndef JAXMPI_NATIVE_H
#define JAXMPI_NATIVE_H

#include <stdatomic.h>
#include <stdint.h>

#include "mpi_api.h"
#include "record.h"
#include "xla/abi.h"

/* A communicator XLA uses: COMM_WORLD's duplicate, COMM_SELF's, or one
 * split from them (XLA's handle of it: a slot of native.c's table). */
typedef struct jm_native_comm {
  int number;   /* 0 world, 1 self, then 2, 3, ... in creation order */
  jm_Comm comm; /* the running MPI's */
  int rank, size;
  int *members; /* COMM_WORLD's rank of each rank (NULL: the identity) */
  /* Calls made on it so far: collectives (the same count on every member
   * at the same call, so a call's number names it across processes, as
   * the flight recorder's do) and point-to-point calls (this process's). */
  _Atomic int64_t calls, p2p_calls;
} jm_native_comm;

/* One MPI call of XLA's collectives, from its begin to its end: what the
 * timeout's and MPI errors' messages say, and what a recorder sees. */
typedef struct jm_native_call {
  const char *mpi;  /* the MPI call, "MPI_Allreduce" */
  const char *kind; /* XLA's collective that makes it, "all-reduce" */
  const char *rkind; /* kind as the flight recorder names it (its ring
                        keeps 31 bytes), NULL: kind */
  const jm_native_comm *comm;
  int64_t seq;       /* its number among the communicator's collectives, or
                        among its point-to-point calls (from 1) */
  int send_peer;     /* rank in comm sent to, or -1 */
  int recv_peer;     /* rank in comm received from, or -1 */
  int64_t count;     /* elements (per peer for all-gather) */
  int64_t bytes;     /* count * element size */
  const char *dtype; /* "MPI_FLOAT" */
  const char *op;    /* "MPI_SUM", or NULL */
  int color, key;    /* MPI_Comm_split's (0 for the others) */
  jm_record_ref rec; /* its entry in the flight recorder (begin sets it) */
} jm_native_call;

/* Every native call goes through these two: begin numbers the call,
 * records it in the flight recorder (record.h: op the MPI call, kind
 * XLA's collective, JM_REC_NATIVE) and hands it to the hook, or refuses it (JM_XLA_ERR_NATIVE, the message
 * set: another native call in progress on another thread, i.e. several
 * devices per process), returning 0 when the call may go on; end (only
 * after a begin that returned 0) hands it the result and turns a failure
 * (an MPI error code, the watchdog's JM_ERR_TIMEOUT, ...) into this
 * thread's message, returning JM_XLA_ERR_NATIVE, or 0; it ends the
 * call's record (a timeout with the recorder's verdict in the message: the
 * rings of the job's processes, record_read.h). A point-to-point call is
 * one with a send or receive peer (send_peer or recv_peer not -1). */
int jm_native_begin(jm_native_call *c);
int jm_native_end(jm_native_call *c, int rc);

/* A hook called at every begin (phase 0), end (phase 1, with the call's
 * result, before it becomes a message) and refused begin (phase 2): where
 * a flight recorder hooks in. NULL: none (the default; one atomic load per
 * call). */
typedef void jm_native_hook(const jm_native_call *c, int phase, int rc);
void jm_native_set_hook(jm_native_hook *hook);

/* ---- ctypes entry points (jaxmpi/_native.py) ---- */

/* The calls for the surface's jaxmpi_xla_attach. */
const jm_xla_calls *jaxmpi_native_calls(void);

/* Once, before attaching: the duplicates of COMM_WORLD and COMM_SELF
 * (with MPI_ERRORS_RETURN), this process's rank and size in COMM_WORLD,
 * whether MPI runs at MPI_THREAD_MULTIPLE, the address of the surface's
 * sentinels (its POINTER constants) and the devices per process. */
int jaxmpi_native_configure(uint64_t world, uint64_t self, int rank, int size,
                            int multiple, uint64_t sentinels, int devices,
                            char *err, size_t errlen);

/* The running MPI's handle for one of the surface's (a datatype or op),
 * with the datatype's size in bytes and the constant's name. */
int jaxmpi_native_set_handle(uint64_t token, uint64_t handle, int size,
                             const char *name);

/* The number of native calls made since the process started. */
int64_t jaxmpi_native_count(void);

/* JAXMPI_NATIVE_TRACE=1: a line on stderr at every begin and end (the
 * thread, the call, its communicator and sequence number, Comm_split's
 * colour and key and the members it found). */
void jaxmpi_native_set_trace(int on);

#endif
