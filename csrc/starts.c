/* The non-blocking starts, jm_run_i<op> (ops.h JM_IOPS): each checks its
 * buffers, takes a request of the table (request.c), posts the MPI_I* calls
 * and publishes the request (jm_req_post), whose wait completes it
 * (wait.c). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "collectives.h"
#include "cuda_staging.h"
#include "mpi_calls.h"
#include "request.h"

/* An elementwise collective (allreduce, bcast) in chunks of at most the
 * count limit, one request each. */
#define JM_CHUNKS(r, n, elsize, call)                                          \
  do {                                                                         \
    for (int64_t off = 0; off < (n) || (off == 0 && (n) == 0);                 \
         off += jm_count.limit) {                                              \
      int64_t m = (n)-off < jm_count.limit ? (n)-off : jm_count.limit;         \
      int cn = (int)m;                                                         \
      jm_Request *rq = &(r)->reqs[(r)->nreq];                                  \
      rc = (call);                                                             \
      if (rc) break;                                                           \
      (r)->nreq++;                                                             \
      if ((n) == 0) break;                                                     \
    }                                                                          \
  } while (0)

static const char *offset(const void *p, int64_t off, size_t elsize) {
  if (!p || p == jm_const.in_place) return p;
  return (const char *)p + off * (int64_t)elsize;
}

static XLA_FFI_Error *too_many_chunks(jm_call *c, int64_t n) {
  return jm_error(c, XLA_FFI_Error_Code_UNIMPLEMENTED,
                  "%lld elements need more than %d requests of at most %lld "
                  "elements each (JAXMPI_MAX_COUNT)",
                  (long long)n, JM_MAX_REQS, (long long)jm_count.limit);
}

XLA_FFI_Error *jm_run_isend(jm_call *c) {
  jm_buffer *x = &c->ret[1]; /* aliased to the input: the request's own */
  jm_req *r;
  XLA_FFI_Error *err = jm_req_begin(c, &r, "MPI_Isend", "dest", c->dest);
  if (err) return err;
  jm_req_keep(r, x);
  double t0 = jm_log_start();
  int rc = jm_Isend(x->data, x->count, x->elsize, x->mpi, c->dest, c->tag,
                    c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return jm_req_post(c, r, rc, t0);
}

XLA_FFI_Error *jm_run_irecv(jm_call *c) {
  jm_buffer *y = &c->ret[1];
  jm_req *r;
  XLA_FFI_Error *err = jm_req_begin(c, &r, "MPI_Irecv", "source", c->source);
  if (err) return err;
  jm_req_keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_Irecv(y->data, y->count, y->elsize, y->mpi, c->source, c->tag,
                    c->comm, &r->reqs[0]);
  r->nreq = r->nrecv = rc ? 0 : 1;
  r->recv_ret[0] = 1;
  return jm_req_post(c, r, rc, t0);
}

XLA_FFI_Error *jm_run_isendrecv(jm_call *c) {
  jm_buffer *x = &c->ret[1], *y = &c->ret[2]; /* aliased to the arguments */
  JM_EXPECT(c, x->data != y->data || !x->count || !y->count,
            "the send and receive buffers must differ");
  jm_req *r;
  XLA_FFI_Error *err = jm_req_begin(c, &r, "MPI_Irecv", "source", c->source);
  if (err) return err;
  jm_req_keep(r, x);
  jm_req_keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_Irecv(y->data, y->count, y->elsize, y->mpi, c->source,
                    c->recvtag, c->comm, &r->reqs[0]);
  if (rc) return jm_req_post(c, r, rc, t0);
  r->nreq = r->nrecv = 1;
  r->recv_ret[0] = 2;
  rc = jm_Isend(x->data, x->count, x->elsize, x->mpi, c->dest, c->sendtag,
                c->comm, &r->reqs[1]);
  if (rc) {
    r->fn = "MPI_Isend";
    r->peer_kind = "dest";
    r->peer = c->dest;
  } else {
    r->nreq = 2;
  }
  return jm_req_post(c, r, rc, t0);
}

static int too_many(int64_t n) {
  return n > 0 && (n - 1) / jm_count.limit + 1 > JM_MAX_REQS;
}

/* An elementwise reduction over ranks (MPI_Iallreduce, MPI_Iscan,
 * MPI_Iexscan), in chunks of at most the count limit. In place: the result
 * is aliased to x (XLA copies x first where x is still needed). */
typedef int jm_ireduction(const void *, void *, int, jm_Datatype, jm_Op,
                          jm_Comm, jm_Request *);

static XLA_FFI_Error *reduction(jm_call *c, const char *fn,
                                jm_ireduction *call) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[1];
  JM_EXPECT(c, x->dtype == y->dtype && x->count == y->count,
            "result must match the input's shape and dtype");
  if (too_many(x->count)) return too_many_chunks(c, x->count);
  jm_req *r;
  XLA_FFI_Error *err = jm_req_begin(c, &r, fn, NULL, 0);
  if (err) return err;
  r->collective = 1;
  jm_req_keep(r, y);
  const void *s = x->data == y->data && x->count ? jm_const.in_place : x->data;
  double t0 = jm_log_start();
  int rc = 0;
  JM_CHUNKS(r, x->count, x->elsize,
            call(offset(s, off, x->elsize),
                 jm_recv_ptr((void *)offset(y->data, off, x->elsize), m), cn,
                 x->mpi, c->op, c->comm, rq));
  return jm_req_post(c, r, rc, t0);
}

XLA_FFI_Error *jm_run_iallreduce(jm_call *c) {
  return reduction(c, "MPI_Iallreduce", jm_mpi.Iallreduce);
}

XLA_FFI_Error *jm_run_ibcast(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[1];
  JM_EXPECT(c, x->dtype == y->dtype && x->count == y->count,
            "result must match the input's shape and dtype");
  if (too_many(x->count)) return too_many_chunks(c, x->count);
  if (c->rank == c->root && x->data != y->data) { /* aliased: never copies */
    XLA_FFI_Error *err =
        jm_copy(c, y->data, x->data, (size_t)x->count * x->elsize);
    if (err) return err;
  }
  jm_req *r;
  XLA_FFI_Error *err = jm_req_begin(c, &r, "MPI_Ibcast", "root", c->root);
  if (err) return err;
  r->collective = 1;
  jm_req_keep(r, y);
  double t0 = jm_log_start();
  int rc = 0;
  JM_CHUNKS(r, x->count, x->elsize,
            jm_mpi.Ibcast((void *)offset(y->data, off, x->elsize), cn, x->mpi,
                          c->root, c->comm, rq));
  return jm_req_post(c, r, rc, t0);
}

XLA_FFI_Error *jm_run_ibarrier(jm_call *c) {
  jm_req *r;
  XLA_FFI_Error *err = jm_req_begin(c, &r, "MPI_Ibarrier", NULL, 0);
  if (err) return err;
  double t0 = jm_log_start();
  int rc = jm_mpi.Ibarrier(c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return jm_req_post(c, r, rc, t0);
}

static XLA_FFI_Error *over_limit(jm_call *c, int64_t n) {
  return jm_error(c, XLA_FFI_Error_Code_UNIMPLEMENTED,
                  "%lld elements per rank exceed the count limit %lld of the "
                  "non-blocking form (use the blocking operation)",
                  (long long)n, (long long)jm_count.limit);
}

XLA_FFI_Error *jm_run_ireduce(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[1];
  JM_EXPECT(c, x->dtype == y->dtype && x->count == y->count,
            "result must match the input's shape and dtype");
  if (too_many(x->count)) return too_many_chunks(c, x->count);
  int root = c->rank == c->root;
  jm_req *r;
  XLA_FFI_Error *err = jm_req_begin(c, &r, "MPI_Ireduce", "root", c->root);
  if (err) return err;
  r->collective = 1;
  jm_req_keep(r, y);
  /* y is x's buffer (aliased): the root reduces in place; elsewhere it is
   * only sent from, and the result is x passed through, as reduce does. */
  const void *s = root && x->count ? jm_const.in_place : y->data;
  double t0 = jm_log_start();
  int rc = 0;
  JM_CHUNKS(r, x->count, x->elsize,
            jm_mpi.Ireduce(offset(s, off, x->elsize),
                           root ? (void *)offset(y->data, off, x->elsize)
                                : NULL,
                           cn, x->mpi, c->op, c->root, c->comm, rq));
  return jm_req_post(c, r, rc, t0);
}

XLA_FFI_Error *jm_run_iscan(jm_call *c) {
  return reduction(c, "MPI_Iscan", jm_mpi.Iscan);
}

/* Rank 0's result, which MPI leaves undefined, is the op's identity,
 * written after the wait (_prims_collectives.py), as exscan's lowering
 * does. */
XLA_FFI_Error *jm_run_iexscan(jm_call *c) {
  return reduction(c, "MPI_Iexscan", jm_mpi.Iexscan);
}

/* gather: the root's results [xs (x's own buffer), y (size blocks)];
 * elsewhere [y] (x's buffer, sent from and passed through). */
XLA_FFI_Error *jm_run_igather(jm_call *c) {
  int root = c->rank == c->root;
  JM_EXPECT(c, c->nrets == (root ? 3 : 2), "expected %d results, got %d",
            root ? 3 : 2, c->nrets);
  jm_buffer *x = &c->ret[1], *y = &c->ret[root ? 2 : 1];
  JM_EXPECT(c, x->dtype == y->dtype &&
                   y->count == (root ? c->size : 1) * x->count,
            "result must hold %s", root ? "size copies of x" : "x");
  if (x->count > jm_count.limit) return over_limit(c, x->count);
  jm_req *r;
  XLA_FFI_Error *err = jm_req_begin(c, &r, "MPI_Igather", "root", c->root);
  if (err) return err;
  r->collective = 1;
  jm_req_keep(r, x);
  if (root) jm_req_keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_mpi.Igather(x->data, (int)x->count, x->mpi,
                          root ? y->data : NULL, (int)x->count, x->mpi,
                          c->root, c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return jm_req_post(c, r, rc, t0);
}

/* scatter: the root's results [xs (x's own buffer), y (one block)];
 * elsewhere [y] (the template's buffer). */
XLA_FFI_Error *jm_run_iscatter(jm_call *c) {
  int root = c->rank == c->root;
  JM_EXPECT(c, c->nrets == (root ? 3 : 2), "expected %d results, got %d",
            root ? 3 : 2, c->nrets);
  jm_buffer *x = &c->ret[1], *y = &c->ret[root ? 2 : 1];
  JM_EXPECT(c, x->dtype == y->dtype &&
                   x->count == (root ? c->size : 1) * y->count,
            "the root's x must hold size blocks of the result");
  if (y->count > jm_count.limit) return over_limit(c, y->count);
  jm_req *r;
  XLA_FFI_Error *err = jm_req_begin(c, &r, "MPI_Iscatter", "root", c->root);
  if (err) return err;
  r->collective = 1;
  if (root) jm_req_keep(r, x);
  jm_req_keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_mpi.Iscatter(root ? x->data : NULL, (int)y->count, y->mpi,
                           y->data, (int)y->count, y->mpi, c->root, c->comm,
                           &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return jm_req_post(c, r, rc, t0);
}

static XLA_FFI_Error *all_to_all(jm_call *c, int gather) {
  jm_buffer *x = &c->ret[1], *y = &c->ret[2];
  int64_t block = gather ? x->count : x->count / (c->size ? c->size : 1);
  JM_EXPECT(c, x->dtype == y->dtype &&
                   y->count == (gather ? c->size * x->count : x->count) &&
                   (gather || block * c->size == x->count) &&
                   x->data != y->data,
            "buffers do not match the communicator's size");
  if (block > jm_count.limit) return over_limit(c, block);
  jm_req *r;
  XLA_FFI_Error *err =
      jm_req_begin(c, &r, gather ? "MPI_Iallgather" : "MPI_Ialltoall", NULL, 0);
  if (err) return err;
  r->collective = 1;
  jm_req_keep(r, x);
  jm_req_keep(r, y);
  double t0 = jm_log_start();
  int rc = gather ? jm_mpi.Iallgather(x->data, (int)block, x->mpi, y->data,
                                      (int)block, x->mpi, c->comm, &r->reqs[0])
                  : jm_mpi.Ialltoall(x->data, (int)block, x->mpi, y->data,
                                     (int)block, x->mpi, c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return jm_req_post(c, r, rc, t0);
}

XLA_FFI_Error *jm_run_iallgather(jm_call *c) { return all_to_all(c, 1); }
XLA_FFI_Error *jm_run_ialltoall(jm_call *c) { return all_to_all(c, 0); }

/* reduce_scatter: results [xs (x's own buffer, sent from), y (this rank's
 * block)]. Never in place: MPI_IN_PLACE would take the input from the
 * (smaller) result buffer. Equal blocks: */
XLA_FFI_Error *jm_run_ireduce_scatter_block(jm_call *c) {
  jm_buffer *x = &c->ret[1], *y = &c->ret[2];
  JM_EXPECT(c, x->dtype == y->dtype && x->count == y->count * (int64_t)c->size,
            "the input must hold size x result elements");
  if (y->count > jm_count.limit) return over_limit(c, y->count);
  jm_req *r;
  XLA_FFI_Error *err =
      jm_req_begin(c, &r, "MPI_Ireduce_scatter_block", NULL, 0);
  if (err) return err;
  r->collective = 1;
  jm_req_keep(r, x);
  jm_req_keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_mpi.Ireduce_scatter_block(x->data,
                                        jm_recv_ptr(y->data, y->count),
                                        (int)y->count, y->mpi, c->op, c->comm,
                                        &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return jm_req_post(c, r, rc, t0);
}

/* counts[r] rows to rank r (collectives.c's plan); MPI reads the int
 * counts until the request completes: the request owns them. */
XLA_FFI_Error *jm_run_ireduce_scatter(jm_call *c) {
  jm_buffer *x = &c->ret[1], *y = &c->ret[2];
  int64_t *counts;
  int *ints;
  XLA_FFI_Error *err = jm_reduce_scatter_counts(c, x, y, &counts, &ints);
  if (err) return err;
  for (int j = 0; j < c->size && !err; j++) {
    /* Every rank has the same counts: all fail alike, before MPI. */
    if (counts[j] > jm_count.limit) err = over_limit(c, counts[j]);
    ints[j] = (int)counts[j];
  }
  jm_req *r = NULL;
  if (!err) err = jm_req_begin(c, &r, "MPI_Ireduce_scatter", NULL, 0);
  if (err) {
    free(counts);
    return err;
  }
  r->collective = 1;
  r->mem = counts;
  jm_req_keep(r, x);
  jm_req_keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_mpi.Ireduce_scatter(x->data, jm_recv_ptr(y->data, y->count),
                                  ints, y->mpi, c->op, c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return jm_req_post(c, r, rc, t0);
}

/* ---- variable counts along axis 0 ---------------------------------------
 * The row counts (int64 attributes, one per rank) times a row's elements
 * are the int counts and displacements of MPI_I*v, which MPI reads until
 * the request completes: the request owns them (r->mem). Out of place: the
 * results never share the buffer MPI sends from. */

/* An empty send buffer's address: XLA may give an empty buffer the address
 * of another one (see jm_recv_ptr); nothing is read there. */
static const char empty_send;

static const void *send_ptr(const jm_buffer *b) {
  return b->count ? b->data : &empty_send;
}

/* Where a block passes the count limit: row counts `name`[rank] of `rows`
 * rows, `at` units after the buffer's start. */
typedef struct jm_vbad {
  const char *name;
  int rank;
  int64_t rows, at;
} jm_vbad;

/* Counts and displacements of row counts k (attribute `name`) in units of
 * `unit` elements (a row holds `row`), as ints: out[0..size) and
 * out[size..2 size). 0, or -1 with *bad where one is above the count
 * limit. An empty block's displacement is never read: 0. */
static int v_ints(const jm_call *c, int k, const char *name, int64_t row,
                  int64_t unit, int *out, jm_vbad *bad) {
  const int64_t per_row = row / unit;
  int64_t at = 0;
  for (int i = 0; i < c->size; i++) {
    const int64_t rows = jm_rows(c, k, i);
    int64_t n;
    if (__builtin_mul_overflow(rows, per_row, &n) || n > jm_count.limit ||
        (n && at > jm_count.limit)) {
      *bad = (jm_vbad){name, i, rows, at};
      return -1;
    }
    out[i] = (int)n;
    out[c->size + i] = n ? (int)at : 0;
    at += n; /* both at most INT_MAX: no overflow */
  }
  return 0;
}

static XLA_FFI_Error *v_over_limit(jm_call *c, const jm_vbad *b, int64_t row,
                                   const char *unit) {
  return jm_error(c, XLA_FFI_Error_Code_UNIMPLEMENTED,
                  "%s[%d] = %lld rows of %lld elements, %lld %s after the "
                  "start of the buffer, exceed the count limit %lld of the "
                  "non-blocking form (use the blocking %s, which has none)",
                  b->name, b->rank, (long long)b->rows, (long long)row,
                  (long long)b->at, unit, (long long)jm_count.limit,
                  c->opname + 1);
}

/* The ints of the `counts` attribute in elements, 2 * size of them,
 * allocated (*ints; the caller frees them, or hands them to a request).
 * Every rank has the same counts and rows (JAXMPI_CHECK compares them), so
 * every rank fails alike, before MPI. */
static XLA_FFI_Error *v_counts(jm_call *c, int64_t row, int **ints) {
  *ints = malloc(sizeof(int) * 2 * (size_t)c->size);
  if (!*ints)
    return jm_error(c, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                    "out of memory for %d counts", c->size);
  jm_vbad bad = {NULL, 0, 0, 0};
  if (!v_ints(c, JM_ROWS_COUNTS, "counts", row, 1, *ints, &bad)) return NULL;
  free(*ints);
  *ints = NULL;
  return v_over_limit(c, &bad, row, "elements");
}

/* A v-start's request: collective, owning `ints`; on an error `ints` is
 * freed. */
static XLA_FFI_Error *v_begin(jm_call *c, jm_req **r, const char *fn,
                              const char *peer_kind, int peer, int *ints) {
  XLA_FFI_Error *err = jm_req_begin(c, r, fn, peer_kind, peer);
  if (err) {
    free(ints);
    return err;
  }
  (*r)->collective = 1;
  (*r)->mem = ints;
  return NULL;
}

/* allgatherv: results [xs (x's own buffer, sent from), y (sum(counts)
 * rows)]. */
XLA_FFI_Error *jm_run_iallgatherv(jm_call *c) {
  jm_buffer *x = &c->ret[1], *y = &c->ret[2];
  JM_EXPECT(c,
            jm_same_rows(x, y) &&
                x->dims[0] == jm_rows(c, JM_ROWS_COUNTS, c->rank) &&
                y->dims[0] == jm_rows_total(c, JM_ROWS_COUNTS) &&
                (x->data != y->data || !x->count || !y->count),
            "the input must have counts[rank] rows and the result, another "
            "buffer, sum(counts) rows of the input's shape and dtype");
  int *ints;
  XLA_FFI_Error *err = v_counts(c, jm_row_elems(x), &ints);
  jm_req *r;
  if (!err) err = v_begin(c, &r, "MPI_Iallgatherv", NULL, 0, ints);
  if (err) return err;
  jm_req_keep(r, x);
  jm_req_keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_mpi.Iallgatherv(send_ptr(x), (int)x->count, x->mpi,
                              jm_recv_ptr(y->data, y->count), ints,
                              ints + c->size, x->mpi, c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return jm_req_post(c, r, rc, t0);
}

/* gatherv: the root's results [xs, y (sum(counts) rows)]; elsewhere [xs]
 * (x's buffer, sent from and passed through, as gatherv gives it). Every
 * rank makes the root's counts, so all pass or fail the limit alike. */
XLA_FFI_Error *jm_run_igatherv(jm_call *c) {
  const int root = c->rank == c->root;
  JM_EXPECT(c, c->nrets == (root ? 3 : 2), "expected %d results, got %d",
            root ? 3 : 2, c->nrets);
  jm_buffer *x = &c->ret[1], *y = &c->ret[root ? 2 : 1];
  JM_EXPECT(c,
            x->ndim >= 1 &&
                x->dims[0] == jm_rows(c, JM_ROWS_COUNTS, c->rank) &&
                (!root || (jm_same_rows(x, y) &&
                           y->dims[0] == jm_rows_total(c, JM_ROWS_COUNTS) &&
                           (x->data != y->data || !x->count || !y->count))),
            "the input must have counts[rank] rows; the root's result, "
            "another buffer, sum(counts) rows of the input's shape");
  int *ints;
  XLA_FFI_Error *err = v_counts(c, jm_row_elems(x), &ints);
  jm_req *r;
  if (!err) err = v_begin(c, &r, "MPI_Igatherv", "root", c->root, ints);
  if (err) return err;
  jm_req_keep(r, x);
  if (root) jm_req_keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_mpi.Igatherv(send_ptr(x), (int)x->count, x->mpi,
                           root ? jm_recv_ptr(y->data, y->count) : NULL,
                           root ? ints : NULL, root ? ints + c->size : NULL,
                           x->mpi, c->root, c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return jm_req_post(c, r, rc, t0);
}

/* scatterv: the root's results [xs (sum(counts) rows, sent from), y
 * (counts[root] rows)]; elsewhere [y] (the template's buffer). */
XLA_FFI_Error *jm_run_iscatterv(jm_call *c) {
  const int root = c->rank == c->root;
  JM_EXPECT(c, c->nrets == (root ? 3 : 2), "expected %d results, got %d",
            root ? 3 : 2, c->nrets);
  jm_buffer *x = &c->ret[1], *y = &c->ret[root ? 2 : 1];
  JM_EXPECT(c,
            y->ndim >= 1 &&
                y->dims[0] == jm_rows(c, JM_ROWS_COUNTS, c->rank) &&
                (!root || (jm_same_rows(x, y) &&
                           x->dims[0] == jm_rows_total(c, JM_ROWS_COUNTS) &&
                           (x->data != y->data || !x->count || !y->count))),
            "the result must have counts[rank] rows; the root's input, "
            "another buffer, sum(counts) rows of the result's shape");
  int *ints;
  XLA_FFI_Error *err = v_counts(c, jm_row_elems(y), &ints);
  jm_req *r;
  if (!err) err = v_begin(c, &r, "MPI_Iscatterv", "root", c->root, ints);
  if (err) return err;
  if (root) jm_req_keep(r, x);
  jm_req_keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_mpi.Iscatterv(root ? send_ptr(x) : NULL, root ? ints : NULL,
                            root ? ints + c->size : NULL, y->mpi,
                            jm_recv_ptr(y->data, y->count), (int)y->count,
                            y->mpi, c->root, c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return jm_req_post(c, r, rc, t0);
}

/* alltoallv: results [xs (x's own buffer, sent from), y (sum(recvcounts)
 * rows)]. A rank knows only its own counts, so it cannot know whether
 * another's pass the limit: as the blocking alltoallv, each rank chooses
 * alone between calls with the same type signature per pair, counts in
 * elements or in rows (a contiguous datatype of a row; MPI keeps it until
 * the request completes); beyond INT_MAX rows, an error on the ranks whose
 * counts are that large only. */
XLA_FFI_Error *jm_run_ialltoallv(jm_call *c) {
  jm_buffer *x = &c->ret[1], *y = &c->ret[2];
  JM_EXPECT(c,
            jm_same_rows(x, y) &&
                x->dims[0] == jm_rows_total(c, JM_ROWS_SEND) &&
                y->dims[0] == jm_rows_total(c, JM_ROWS_RECV) &&
                (x->data != y->data || !x->count || !y->count),
            "the input must have sum(sendcounts) rows and the result, "
            "another buffer, sum(recvcounts) rows of the input's shape and "
            "dtype");
  const int n = c->size;
  const int64_t row = jm_row_elems(x);
  int *ints = malloc(sizeof(int) * 4 * (size_t)n);
  if (!ints)
    return jm_error(c, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                    "out of memory for %d counts", n);
  int64_t unit = 1;
  jm_vbad bad = {NULL, 0, 0, 0};
  int fail = v_ints(c, JM_ROWS_SEND, "sendcounts", row, 1, ints, &bad) ||
             v_ints(c, JM_ROWS_RECV, "recvcounts", row, 1, ints + 2 * n, &bad);
  if (fail && row > 1 && row <= jm_count.limit) {
    unit = row;
    fail = v_ints(c, JM_ROWS_SEND, "sendcounts", row, row, ints, &bad) ||
           v_ints(c, JM_ROWS_RECV, "recvcounts", row, row, ints + 2 * n, &bad);
  }
  if (fail) {
    free(ints);
    return v_over_limit(c, &bad, row, unit > 1 ? "rows" : "elements");
  }
  jm_Datatype t = x->mpi;
  int rc = 0;
  if (unit > 1) {
    rc = jm_mpi.Type_contiguous((int)unit, x->mpi, &t);
    if (!rc) {
      rc = jm_mpi.Type_commit(&t);
      if (rc) jm_mpi.Type_free(&t);
    }
    if (rc) {
      free(ints);
      return jm_mpi_failure(c, "MPI_Type_contiguous (a row)", NULL, 0, rc);
    }
  }
  jm_req *r;
  XLA_FFI_Error *err = v_begin(c, &r, "MPI_Ialltoallv", NULL, 0, ints);
  if (err) {
    if (unit > 1) jm_mpi.Type_free(&t);
    return err;
  }
  jm_req_keep(r, x);
  jm_req_keep(r, y);
  double t0 = jm_log_start();
  rc = jm_mpi.Ialltoallv(send_ptr(x), ints, ints + n, t,
                         jm_recv_ptr(y->data, y->count), ints + 2 * n,
                         ints + 3 * n, t, c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  if (unit > 1) jm_mpi.Type_free(&t); /* MPI keeps it for the request */
  return jm_req_post(c, r, rc, t0);
}

/* Pair i sends xs[i] to dests[i] and receives ys[i] from sources[i], both
 * with tag + i. Results [xs' (the sends' own buffers), ys]. */
XLA_FFI_Error *jm_run_ineighbor_exchange(jm_call *c) {
  const int n = c->nargs;
  JM_EXPECT(c, c->nrets == 1 + 2 * n && c->nsources == n && c->ndests == n,
            "%d send buffers, %d results, %d sources and %d dests do not "
            "match", n, c->nrets, c->nsources, c->ndests);
  JM_EXPECT(c, c->tag >= 0 && (int64_t)c->tag + n - 1 <= INT_MAX,
            "tags %d to %d + %d - 1 are not all valid MPI tags", c->tag,
            c->tag, n);
  jm_req *r;
  XLA_FFI_Error *err = jm_req_begin(c, &r, "MPI_Irecv", "source", 0);
  if (err) return err;
  for (int i = 0; i < n; i++) jm_req_keep(r, &c->ret[1 + i]);
  for (int i = 0; i < n; i++) jm_req_keep(r, &c->ret[1 + n + i]);
  double t0 = jm_log_start();
  int rc = 0;
  for (int i = 0; i < n && !rc; i++) {
    jm_buffer *y = &c->ret[1 + n + i];
    r->peer = c->sources[i];
    rc = jm_Irecv(y->data, y->count, y->elsize, y->mpi, c->sources[i],
                  c->tag + i, jm_recv_comm(c, i), &r->reqs[i]);
    if (!rc) {
      r->recv_ret[i] = 1 + n + i;
      r->nreq = r->nrecv = i + 1;
    }
  }
  if (rc) return jm_req_post(c, r, rc, t0);
  r->fn = "MPI_Isend";
  r->peer_kind = "dest";
  for (int i = 0; i < n && !rc; i++) {
    jm_buffer *x = &c->ret[1 + i];
    r->peer = c->dests[i];
    rc = jm_Isend(x->data, x->count, x->elsize, x->mpi, c->dests[i],
                  c->tag + i, jm_send_comm(c, i), &r->reqs[n + i]);
    if (!rc) r->nreq = n + i + 1;
  }
  if (!rc) {
    r->fn = "MPI_Irecv/MPI_Isend";
    r->peer_kind = NULL;
  }
  return jm_req_post(c, r, rc, t0);
}
