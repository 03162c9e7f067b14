/* Point-to-point operations. A receive that delivers fewer bytes than the
 * result holds is an error, never silently uninitialised memory. */
#include "ffi.h"

#include <string.h>

#include "check.h"

static XLA_FFI_Error *check_received(jm_call *c, const jm_buffer *y,
                                     const jm_Status *st) {
  if (st->MPI_SOURCE == jm_const.proc_null) { /* nothing arrives: zeros */
    if (y->count) memset(y->data, 0, (size_t)y->count * y->elsize);
    if (c->status) *c->status = *st;
    return NULL;
  }
  int64_t got = jm_received_bytes(st);
  int64_t want = y->count * (int64_t)y->elsize;
  if (got >= 0 && got != want)
    return jm_error(c, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                    "rank %d received %lld bytes from rank %d (tag %d) but "
                    "expected %lld elements of %s (%lld bytes): the sender's "
                    "shape or dtype differs",
                    c->rank, (long long)got, st->MPI_SOURCE, st->MPI_TAG,
                    (long long)y->count, jm_dtypes[y->dtype].name,
                    (long long)want);
  if (c->status) *c->status = *st;
  return NULL;
}

XLA_FFI_Error *jm_run_send(jm_call *c) {
  jm_buffer *x = &c->arg[0];
  JM_MPI(c, "MPI_Send", "dest", c->dest, x->count, x->dtype,
         jm_Send(x->data, x->count, x->elsize, x->mpi, c->dest, c->tag,
                 c->comm));
  return NULL;
}

XLA_FFI_Error *jm_run_recv(jm_call *c) {
  jm_buffer *y = &c->ret[0];
  jm_Status st;
  if (jm_check_on()) {
    XLA_FFI_Error *err = jm_check_incoming(c, y, c->source, c->tag);
    if (err) return err;
  }
  JM_MPI(c, "MPI_Recv", "source", c->source, y->count, y->dtype,
         jm_Recv(y->data, y->count, y->elsize, y->mpi, c->source, c->tag,
                 c->comm, &st));
  return check_received(c, y, &st);
}

XLA_FFI_Error *jm_run_sendrecv(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  jm_Status st;
  JM_MPI(c, "MPI_Sendrecv", "source", c->source, y->count, y->dtype,
         jm_Sendrecv(x->data, x->count, x->elsize, x->mpi, c->dest, c->sendtag,
                     y->data, y->count, y->elsize, y->mpi, c->source,
                     c->recvtag, c->comm, &st));
  return check_received(c, y, &st);
}
