/* Cross-rank checks (JAXMPI_CHECK=1). Before each collective, the ranks of
 * the communicator exchange a small fixed-size signature of the call (op,
 * dtype, shape, reduction op, root, call number) with one MPI_Allgather on
 * the communicator's shadow (shadow.h), so the check never matches user
 * traffic. Any difference is an error on every rank, naming the ranks and
 * what differs. A receive probes the incoming message
 * first and reports a size mismatch instead of truncating. Off, it costs one
 * atomic load per call. */
#ifndef JAXMPI_CHECK_H
#define JAXMPI_CHECK_H

#include "ffi.h"

void jm_check_set(int on);
int jm_check_on(void);
/* Name a predefined (or jaxmpi's own) reduction op, so that signatures can
 * compare ops across processes, where handles may differ. */
int jm_check_name_op(jm_Op op, const char *name);

/* The collective check; NULL when the ranks agree. */
XLA_FFI_Error *jm_check_collective(jm_call *c, const jm_op_desc *desc);
/* Probe the message a receive into `y` from (source, tag) will match and
 * fail, after receiving and discarding it, if its size differs. */
XLA_FFI_Error *jm_check_incoming(jm_call *c, const jm_buffer *y, int source,
                                 int tag);

#endif
