/* Collective operations. Each handler checks what Python promised about the
 * buffers, then makes its MPI call. Where a rooted op's MPI call delivers
 * nothing (reduce and gather off the root, bcast on it), the result is a copy
 * of the input: that keeps every rank's program linear in the same values,
 * so derivatives of any order make the same calls on every rank. */
#include "ffi.h"

static XLA_FFI_Error *pass_through(jm_call *c, const jm_buffer *x,
                                   jm_buffer *y) {
  return jm_copy(c, y->data, x->data, (size_t)x->count * x->elsize);
}

static int same_type(const jm_buffer *a, const jm_buffer *b) {
  return a->dtype == b->dtype;
}

/* Results of equal size are aliased to the input (XLA copies x first where
 * x is still needed), so these ops run in place: no copy where x is dead,
 * e.g. a loop's carry, and none inside MPI either. The send buffer is then
 * MPI_IN_PLACE. */
static const void *send_buffer(const jm_buffer *x, const jm_buffer *y) {
  return x->data == y->data && x->count ? jm_const.in_place : x->data;
}

XLA_FFI_Error *jm_run_allreduce(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  JM_EXPECT(c, same_type(x, y) && x->count == y->count,
            "result must match the input's shape and dtype");
  const void *s = send_buffer(x, y);
  JM_MPI(c, "MPI_Allreduce", NULL, 0, x->count, x->dtype,
         jm_Allreduce(s, y->data, x->count, x->elsize, x->mpi, c->op,
                      c->comm));
  return NULL;
}

XLA_FFI_Error *jm_run_reduce(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  int root = c->rank == c->root;
  JM_EXPECT(c, same_type(x, y) && y->count == x->count,
            "result must match the input's shape and dtype");
  /* Off the root MPI delivers nothing: y is x (aliased) or a copy of it. */
  const void *s = root ? send_buffer(x, y) : x->data;
  JM_MPI(c, "MPI_Reduce", "root", c->root, x->count, x->dtype,
         jm_Reduce(s, root ? y->data : NULL, x->count, x->elsize, x->mpi,
                   c->op, c->root, c->comm));
  return root ? NULL : pass_through(c, x, y);
}

XLA_FFI_Error *jm_run_scan(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  JM_EXPECT(c, same_type(x, y) && x->count == y->count,
            "result must match the input's shape and dtype");
  const void *s = send_buffer(x, y);
  JM_MPI(c, "MPI_Scan", NULL, 0, x->count, x->dtype,
         jm_Scan(s, y->data, x->count, x->elsize, x->mpi, c->op,
                 c->comm));
  return NULL;
}

XLA_FFI_Error *jm_run_bcast(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  int root = c->rank == c->root;
  JM_EXPECT(c, same_type(x, y) && y->count == x->count,
            "result must match the input's shape and dtype");
  /* The root sends from its result. */
  XLA_FFI_Error *err = root ? pass_through(c, x, y) : NULL;
  if (err) return err;
  JM_MPI(c, "MPI_Bcast", "root", c->root, x->count, x->dtype,
         jm_Bcast(y->data, x->count, x->elsize, x->mpi, c->root, c->comm));
  return NULL;
}

XLA_FFI_Error *jm_run_gather(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  int root = c->rank == c->root;
  JM_EXPECT(c,
            same_type(x, y) &&
                y->count == (root ? x->count * (int64_t)c->size : x->count),
            "result must hold size x input elements on the root, the "
            "input's elsewhere");
  JM_MPI(c, "MPI_Gather", "root", c->root, x->count, x->dtype,
         jm_Gather(x->data, root ? y->data : NULL, x->count, x->elsize, x->mpi,
                   c->root, c->comm));
  return root ? NULL : pass_through(c, x, y);
}

XLA_FFI_Error *jm_run_scatter(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  int root = c->rank == c->root;
  JM_EXPECT(c,
            same_type(x, y) &&
                x->count == (root ? y->count * (int64_t)c->size : y->count),
            "the root's input must hold size x result elements");
  JM_MPI(c, "MPI_Scatter", "root", c->root, y->count, y->dtype,
         jm_Scatter(root ? x->data : NULL, y->data, y->count, y->elsize,
                    y->mpi, c->root, c->comm));
  return NULL;
}

XLA_FFI_Error *jm_run_allgather(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  JM_EXPECT(c, same_type(x, y) && y->count == x->count * (int64_t)c->size,
            "result must hold size x input elements");
  JM_MPI(c, "MPI_Allgather", NULL, 0, x->count, x->dtype,
         jm_Allgather(x->data, y->data, x->count, x->elsize, x->mpi, c->comm));
  return NULL;
}

XLA_FFI_Error *jm_run_alltoall(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  JM_EXPECT(c,
            same_type(x, y) && x->count == y->count &&
                x->count % c->size == 0,
            "input and result must have equal sizes divisible by the "
            "communicator size");
  int64_t block = x->count / c->size;
  const void *s = send_buffer(x, y);
  JM_MPI(c, "MPI_Alltoall", NULL, 0, block, x->dtype,
         jm_Alltoall(s, y->data, block, x->elsize, x->mpi, c->comm));
  return NULL;
}

XLA_FFI_Error *jm_run_barrier(jm_call *c) {
  JM_MPI(c, "MPI_Barrier", NULL, 0, 0, 0, jm_Barrier(c->comm));
  return NULL;
}
