/* Collective operations. Each handler checks what Python promised about the
 * buffers, then makes its MPI call. Where a rooted op's MPI call delivers
 * nothing (reduce and gather off the root, bcast on it), the result is a copy
 * of the input: that keeps every rank's program linear in the same values,
 * so derivatives of any order make the same calls on every rank. */
#include "collectives.h"
#include "cuda_staging.h"
#include "mpi_calls.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "shadow.h"
#include "watchdog.h"

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

/* In place, MPI_Alltoall (MPI_IN_PLACE) copies each exchanged block through a
 * temporary buffer it allocates per call (MPICH and Open MPI alike): at 64
 * MiB blocks 2.9 x slower than out of place. From JM_PAIRWISE_MIN_BYTES per
 * block on, jaxmpi exchanges the blocks itself, pair by pair, through one
 * cached scratch block, on the communicator's shadow (no user message can
 * match). At step k rank r pairs with (k - r) mod size, whose partner at that
 * step is r: a step's pairs are disjoint, each swaps one block each way. */
#define JM_PAIRWISE_MIN_BYTES ((size_t)2 << 20)
/* The largest scratch block kept between calls. */
#define JM_SCRATCH_KEEP ((size_t)256 << 20)

typedef struct jm_scratch {
  size_t bytes;
  void *data;
} jm_scratch;

/* One block kept for the next call; a call takes it atomically (a
 * concurrent call allocates its own) and gives it back. */
static _Atomic(jm_scratch *) scratch_cache;

static void scratch_free(jm_scratch *s) {
  if (s) free(s->data);
  free(s);
}

static jm_scratch *scratch_take(size_t bytes) {
  jm_scratch *s = atomic_exchange(&scratch_cache, NULL);
  if (s && s->bytes >= bytes) return s;
  scratch_free(s);
  s = malloc(sizeof *s);
  if (!s) return NULL;
  s->bytes = bytes;
  s->data = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!s->data) {
    free(s);
    return NULL;
  }
  return s;
}

static void scratch_give(jm_scratch *s) {
  if (s->bytes > JM_SCRATCH_KEEP) {
    scratch_free(s);
    return;
  }
  scratch_free(atomic_exchange(&scratch_cache, s));
}

/* The blocks of y an exchange in place swaps: block j, count(j) elements
 * from element displ(j), goes to rank j, and rank j's block for this rank,
 * as many elements, comes back into its place. alltoall: equal blocks
 * (count and displ NULL, `block` elements at j * block); alltoallv with
 * equal send and receive counts: its plan (`block` the largest). */
typedef struct jm_blocks {
  const int64_t *count, *displ;
  int64_t block;
} jm_blocks;

/* Pair by pair (see above); a pair whose block is empty both ways (the
 * counts of a pair are one number on both sides) exchanges nothing. */
static XLA_FFI_Error *swap_blocks(jm_call *c, jm_Comm comm, jm_buffer *y,
                                  const jm_blocks *b, void *scratch) {
  for (int k = 0; k < c->size; k++) {
    const int peer = ((k - c->rank) % c->size + c->size) % c->size;
    const int64_t n = b->count ? b->count[peer] : b->block;
    if (peer == c->rank || n == 0) continue;
    const int64_t at = b->displ ? b->displ[peer] : (int64_t)peer * b->block;
    char *mine = (char *)y->data + (size_t)at * y->elsize;
    jm_Status st;
    memcpy(scratch, mine, (size_t)n * y->elsize);
    JM_MPI(c, "MPI_Sendrecv (exchange in place)", "peer", peer, n, y->dtype,
           jm_Sendrecv(scratch, n, y->elsize, y->mpi, peer, 0, mine, n,
                       y->elsize, y->mpi, peer, 0, comm, &st));
  }
  return NULL;
}

static XLA_FFI_Error *exchange_pairwise(jm_call *c, jm_buffer *y,
                                        const jm_blocks *b) {
  jm_shadow *sh;
  XLA_FFI_Error *err = jm_call_shadow(c, "the exchange in place", &sh);
  if (err) return err;
  const size_t bytes = (size_t)b->block * y->elsize;
  jm_scratch *s = scratch_take(bytes);
  if (!s)
    return jm_error(c, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                    "out of memory for a %lld-byte %s block", (long long)bytes,
                    c->opname);
  err = swap_blocks(c, sh->dup, y, b, s->data);
  /* A send the watchdog abandoned may still read the block: leave it
   * allocated, as check.c does with its abandoned exchange. */
  if (!(err && jm_watchdog_on())) scratch_give(s);
  return err;
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
  /* (Host memory only: a CUDA-aware MPI gets device pointers.) */
  if (s == jm_const.in_place && c->size > 1 && !c->on_device &&
      (size_t)block * x->elsize >= JM_PAIRWISE_MIN_BYTES)
    return exchange_pairwise(c, y, &(jm_blocks){NULL, NULL, block});
  JM_MPI(c, "MPI_Alltoall", NULL, 0, block, x->dtype,
         jm_Alltoall(s, y->data, block, x->elsize, x->mpi, c->comm));
  return NULL;
}

XLA_FFI_Error *jm_run_barrier(jm_call *c) {
  JM_MPI(c, "MPI_Barrier", NULL, 0, 0, 0, jm_Barrier(c->comm));
  return NULL;
}

/* ---- variable counts along axis 0 ------------------------------------------
 * Row counts per rank come as attributes (c->rows); a row of an array is
 * the product of its dimensions after the first. The element counts and
 * displacements of the MPI call are made here, per call (on the stack up to
 * JM_VPLAN_STACK ranks). */
#define JM_VPLAN_STACK 64

typedef struct jm_vplan {
  int64_t *count, *displ; /* elements, one per rank */
  int64_t total;          /* rows */
  int64_t stack[2 * JM_VPLAN_STACK];
} jm_vplan;

int64_t jm_row_elems(const jm_buffer *b) {
  int64_t n = 1;
  for (int64_t d = 1; d < b->ndim; d++) n *= b->dims[d];
  return n;
}

int jm_same_rows(const jm_buffer *a, const jm_buffer *b) {
  if (a->dtype != b->dtype || a->ndim < 1 || a->ndim != b->ndim) return 0;
  for (int64_t d = 1; d < a->ndim; d++)
    if (a->dims[d] != b->dims[d]) return 0;
  return 1;
}

int64_t jm_rows_total(const jm_call *c, int k) {
  int64_t t = 0;
  for (int i = 0; i < c->size; i++) t += jm_rows(c, k, i);
  return t;
}

static void vplan_free(jm_vplan *p);

static XLA_FFI_Error *vplan_make(jm_call *c, jm_vplan *p, int k,
                                 int64_t row) {
  const size_t n = (size_t)c->size;
  p->count = n <= JM_VPLAN_STACK ? p->stack : malloc(2 * n * sizeof(int64_t));
  if (!p->count)
    return jm_error(c, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                    "out of memory for %d counts", c->size);
  p->displ = p->count + n;
  int64_t at = 0;
  for (int i = 0; i < c->size; i++) {
    p->displ[i] = at;
    /* Counts a buffer holds cannot overflow; guard against any others. */
    if (__builtin_mul_overflow(jm_rows(c, k, i), row, &p->count[i]) ||
        __builtin_add_overflow(at, p->count[i], &at)) {
      vplan_free(p);
      return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                      "the counts' elements overflow 64 bits");
    }
  }
  p->total = jm_rows_total(c, k);
  return NULL;
}

static void vplan_free(jm_vplan *p) {
  if (p->count != p->stack) free(p->count);
}

static XLA_FFI_Error *allgatherv_call(jm_call *c, jm_buffer *x, jm_buffer *y,
                                      const jm_vplan *p) {
  JM_MPI(c, "MPI_Allgatherv", NULL, 0, y->count, x->dtype,
         jm_Allgatherv(x->data, x->count, y->data, p->count, p->displ, c->size,
                       x->elsize, x->mpi, c->comm));
  return NULL;
}

XLA_FFI_Error *jm_run_allgatherv(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  JM_EXPECT(c,
            jm_same_rows(x, y) &&
                x->dims[0] == jm_rows(c, JM_ROWS_COUNTS, c->rank) &&
                y->dims[0] == jm_rows_total(c, JM_ROWS_COUNTS),
            "the input must have counts[rank] rows and the result sum(counts) "
            "rows of the input's shape and dtype");
  jm_vplan p;
  XLA_FFI_Error *err = vplan_make(c, &p, JM_ROWS_COUNTS, jm_row_elems(x));
  if (err) return err;
  err = allgatherv_call(c, x, y, &p);
  vplan_free(&p);
  return err;
}

static XLA_FFI_Error *gatherv_call(jm_call *c, jm_buffer *x, jm_buffer *y,
                                   const jm_vplan *p) {
  JM_MPI(c, "MPI_Gatherv", "root", c->root, x->count, x->dtype,
         jm_Gatherv(x->data, x->count, y->data, p->count, p->displ,
                    c->rank == c->root, c->size, x->elsize, x->mpi, c->root,
                    c->comm));
  return NULL;
}

XLA_FFI_Error *jm_run_gatherv(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  int root = c->rank == c->root;
  JM_EXPECT(c,
            jm_same_rows(x, y) &&
                x->dims[0] == jm_rows(c, JM_ROWS_COUNTS, c->rank) &&
                y->dims[0] ==
                    (root ? jm_rows_total(c, JM_ROWS_COUNTS) : x->dims[0]),
            "the input must have counts[rank] rows; the result sum(counts) "
            "rows on the root, the input's shape elsewhere");
  /* Every rank makes the root's plan: all choose the same path. */
  jm_vplan p;
  XLA_FFI_Error *err = vplan_make(c, &p, JM_ROWS_COUNTS, jm_row_elems(x));
  if (err) return err;
  err = gatherv_call(c, x, y, &p);
  vplan_free(&p);
  return err || root ? err : pass_through(c, x, y);
}

static XLA_FFI_Error *scatterv_call(jm_call *c, jm_buffer *x, jm_buffer *y,
                                    const jm_vplan *p) {
  JM_MPI(c, "MPI_Scatterv", "root", c->root, y->count, y->dtype,
         jm_Scatterv(x->data, p->count, p->displ, c->rank == c->root,
                     y->data, y->count, c->size, y->elsize, y->mpi, c->root,
                     c->comm));
  return NULL;
}

XLA_FFI_Error *jm_run_scatterv(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  int root = c->rank == c->root;
  JM_EXPECT(c,
            jm_same_rows(x, y) &&
                y->dims[0] == jm_rows(c, JM_ROWS_COUNTS, c->rank) &&
                x->dims[0] ==
                    (root ? jm_rows_total(c, JM_ROWS_COUNTS) : y->dims[0]),
            "the result must have counts[rank] rows; the root's input "
            "sum(counts) rows of the result's shape and dtype");
  jm_vplan p;
  XLA_FFI_Error *err = vplan_make(c, &p, JM_ROWS_COUNTS, jm_row_elems(y));
  if (err) return err;
  err = scatterv_call(c, x, y, &p);
  vplan_free(&p);
  return err;
}

static XLA_FFI_Error *alltoallv_call(jm_call *c, jm_buffer *x, jm_buffer *y,
                                     const jm_vplan *s, const jm_vplan *r) {
  JM_MPI(c, "MPI_Alltoallv", NULL, 0, x->count, x->dtype,
         jm_Alltoallv(x->data, s->count, s->displ, y->data, r->count,
                      r->displ, jm_row_elems(x), c->size, x->elsize, x->mpi,
                      c->comm));
  return NULL;
}

/* alltoallv in place: with equal send and receive counts each block comes back
 * into the place it left, and _prims_vcollectives.py aliases the result to x,
 * so a loop's carry is not copied every iteration (at 1 MiB, 2 ranks, that
 * copy made alltoallv 2.2 x alltoall). Every rank must take the same path: MPI
 * wants MPI_IN_PLACE on all ranks or none, and the pairwise exchange below
 * meets no MPI_Alltoallv. A rank knows only its own counts: at 2 ranks they
 * are equal exactly when the peer's are (each compares the one pair's two
 * counts), from 3 ranks not (rank 0's can be equal and rank 1's not), so from
 * 3 ranks every rank makes the out-of-place call (_prims_vcollectives.py
 * aliases nothing there). The choice is made from the counts, not from the
 * buffers, so an empty x (whose address XLA may share with the result in any
 * case) takes the same path as its peer. */
static int alltoallv_in_place(const jm_call *c) {
  if (c->size > 2) return 0;
  for (int j = 0; j < c->size; j++)
    if (jm_rows(c, JM_ROWS_SEND, j) != jm_rows(c, JM_ROWS_RECV, j)) return 0;
  return 1;
}

/* p: the plan of both sides. On host memory the blocks are swapped pair by
 * pair through the cached scratch block, as alltoall's from 2 MiB (MPICH's
 * in-place alltoallv also goes pair by pair, through a temporary it
 * allocates per call). On GPU memory (CUDA-aware MPI) the core has no
 * scratch: MPI_Alltoallv with MPI_IN_PLACE, which jm_Alltoallv hands
 * unchanged to whichever call it makes (plain, in rows, MPI-4 _c; each
 * then ignores the send counts and displacements). */
static XLA_FFI_Error *alltoallv_swap(jm_call *c, jm_buffer *x, jm_buffer *y,
                                     const jm_vplan *p) {
  /* Aliased, x is y (jm_copy does nothing); should XLA hand two buffers,
   * y = x first. */
  XLA_FFI_Error *err =
      jm_copy(c, y->data, x->data, (size_t)x->count * x->elsize);
  if (err || c->size == 1) return err;
  if (c->on_device) {
    JM_MPI(c, "MPI_Alltoallv (in place)", NULL, 0, y->count, y->dtype,
           jm_Alltoallv(jm_const.in_place, p->count, p->displ, y->data,
                        p->count, p->displ, jm_row_elems(y), c->size,
                        y->elsize, y->mpi, c->comm));
    return NULL;
  }
  jm_blocks b = {p->count, p->displ, 0};
  for (int j = 0; j < c->size; j++)
    if (j != c->rank && p->count[j] > b.block) b.block = p->count[j];
  /* Nothing to swap on either side of the one pair. */
  return b.block ? exchange_pairwise(c, y, &b) : NULL;
}

XLA_FFI_Error *jm_run_alltoallv(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  JM_EXPECT(c,
            jm_same_rows(x, y) &&
                x->dims[0] == jm_rows_total(c, JM_ROWS_SEND) &&
                y->dims[0] == jm_rows_total(c, JM_ROWS_RECV),
            "the input must have sum(sendcounts) rows and the result "
            "sum(recvcounts) rows of the input's shape and dtype");
  jm_vplan s, r;
  XLA_FFI_Error *err = vplan_make(c, &s, JM_ROWS_SEND, jm_row_elems(x));
  if (err) return err;
  err = vplan_make(c, &r, JM_ROWS_RECV, jm_row_elems(y));
  if (err) {
    vplan_free(&s);
    return err;
  }
  err = alltoallv_in_place(c) ? alltoallv_swap(c, x, y, &r)
                               : alltoallv_call(c, x, y, &s, &r);
  vplan_free(&s);
  vplan_free(&r);
  return err;
}

/* ---- reduce_scatter and exscan ------------------------------------------ */

static char empty_result;

void *jm_recv_ptr(void *data, int64_t n) {
  return n ? data : (void *)&empty_result;
}

/* x holds size blocks of y's size; rank r gets op over ranks of block r.
 * Never in place: MPI_IN_PLACE would take the input from the (smaller)
 * result buffer. */
XLA_FFI_Error *jm_run_reduce_scatter_block(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  JM_EXPECT(c, same_type(x, y) && x->count == y->count * (int64_t)c->size,
            "the input must hold size x result elements");
  JM_MPI(c, "MPI_Reduce_scatter_block", NULL, 0, y->count, y->dtype,
         jm_Reduce_scatter_block(x->data, jm_recv_ptr(y->data, y->count),
                                 y->count, y->elsize, y->mpi, c->op, c->comm));
  return NULL;
}

static XLA_FFI_Error *check_counts(jm_call *c, const jm_buffer *x,
                                   const jm_buffer *y, int64_t *counts) {
  JM_EXPECT(c, c->nrows[JM_ROWS_COUNTS] == c->size,
            "counts has %lld entries for a communicator of %d ranks",
            (long long)c->nrows[JM_ROWS_COUNTS], c->size);
  int64_t total = 0;
  for (int j = 0; j < c->size; j++) {
    int64_t n = jm_rows(c, JM_ROWS_COUNTS, j);
    JM_EXPECT(c, n >= 0, "counts[%d] = %lld is negative", j, (long long)n);
    total += n;
  }
  const int64_t row = total ? x->count / total : 0;
  JM_EXPECT(c, same_type(x, y) && x->count == row * total &&
                   y->count == row * jm_rows(c, JM_ROWS_COUNTS, c->rank),
            "the input must hold sum(counts) = %lld rows and the result "
            "counts[%d] = %lld rows (got %lld and %lld elements)",
            (long long)total, c->rank, (long long)jm_rows(c, JM_ROWS_COUNTS, c->rank),
            (long long)x->count, (long long)y->count);
  for (int j = 0; j < c->size; j++) counts[j] = row * jm_rows(c, JM_ROWS_COUNTS, j);
  return NULL;
}

XLA_FFI_Error *jm_reduce_scatter_counts(jm_call *c, const jm_buffer *x,
                                        const jm_buffer *y, int64_t **counts,
                                        int **ints) {
  /* The counts as int64 (aligned) and as int, for MPI. */
  const size_t n = (size_t)c->size;
  char *mem = malloc(n * (sizeof(int64_t) + sizeof(int)));
  *counts = NULL;
  *ints = NULL;
  if (!mem)
    return jm_error(c, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                    "out of memory for %d counts", c->size);
  XLA_FFI_Error *err = check_counts(c, x, y, (int64_t *)(void *)mem);
  if (err) {
    free(mem);
    return err;
  }
  *counts = (int64_t *)(void *)mem;
  *ints = (int *)(void *)(mem + n * sizeof(int64_t));
  return NULL;
}

/* counts[r] rows (of x's first axis) to rank r, the blocks of x in rank
 * order. The counts are rows, as the user wrote them (and as JAXMPI_CHECK
 * reports them); a row is x's elements over sum(counts). */
XLA_FFI_Error *jm_run_reduce_scatter(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  int64_t *counts;
  int *ints;
  XLA_FFI_Error *err = jm_reduce_scatter_counts(c, x, y, &counts, &ints);
  if (err) return err;
  double t0 = jm_log_start();
  int rc = jm_Reduce_scatter(x->data, jm_recv_ptr(y->data, y->count), counts,
                             ints, c->size, c->rank, y->elsize, y->mpi, c->op,
                             c->comm);
  if (jm_cfg.debug)
    jm_log(c, "MPI_Reduce_scatter", NULL, 0, y->count, y->dtype, t0);
  /* A call the watchdog abandoned may still read the counts: keep them. */
  if (!(rc && jm_watchdog_on())) free(counts);
  if (rc) return jm_mpi_failure(c, "MPI_Reduce_scatter", NULL, 0, rc);
  return NULL;
}

/* Rank r gets op over ranks 0..r-1. Rank 0's result, which MPI leaves
 * undefined, is the op's identity, written by the lowering
 * (_prims_collectives.py). */
XLA_FFI_Error *jm_run_exscan(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  JM_EXPECT(c, same_type(x, y) && x->count == y->count,
            "result must match the input's shape and dtype");
  const void *s = send_buffer(x, y);
  JM_MPI(c, "MPI_Exscan", NULL, 0, x->count, x->dtype,
         jm_Exscan(s, jm_recv_ptr(y->data, y->count), x->count, x->elsize,
                   x->mpi, c->op, c->comm));
  return NULL;
}
