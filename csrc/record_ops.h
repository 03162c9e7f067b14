/* What the flight recorder (record.h) is told of jaxmpi's own calls: a
 * decoded call (handlers.c's dispatch), the wait of a start (wait.c, when
 * the wait's call finds its request), an eager call Python makes through
 * mpi4py. Above ffi.c. */
#ifndef JAXMPI_RECORD_OPS_H
#define JAXMPI_RECORD_OPS_H

#include "ffi.h"

/* Begin recording decoded call c of op desc (a blocking op or a start);
 * the caller ends it (jm_record_end) when the call returns. */
jm_record_ref jm_record_op(const jm_call *c, const jm_op_desc *desc);
/* Begin recording the wait of the start whose call is `start` (a
 * request's copy: its rec is the start's entry); ended when the request
 * completes (request.c). */
jm_record_ref jm_record_wait_of(const jm_call *start);

/* The eager path (_eager.py): a blocking collective `op` (JM_OP_<name>)
 * that Python makes through mpi4py, on communicator `comm` (root: its
 * root, or -1), `bytes` of XLA type `dtype`. Returns the call's number (0:
 * not recorded) and its sequence number in *seq (seq may be NULL); end
 * takes both back (only the number matters to it). */
__attribute__((visibility("default"))) int64_t jaxmpi_record_eager_begin(
    int op, uint64_t comm, int root, int dtype, int64_t bytes, int64_t site,
    int64_t *seq);
__attribute__((visibility("default"))) void jaxmpi_record_eager_end(
    int64_t number, int64_t seq, int state);

#endif
