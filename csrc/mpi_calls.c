/* The large-count and watchdog layer over the bound MPI: every blocking
 * call of an op body goes through here (mpi_calls.h). */
#include "mpi_calls.h"

#include "watchdog.h"

#include <stdlib.h>
#include <string.h>

/* ---- large counts ------------------------------------------------------- */

static int fits(int64_t n) { return n <= jm_count.limit; }

static int use_c(const void *fn) { return jm_count.use_c && fn != NULL; }

/* One datatype covering n consecutive elements of t (extent n * elsize), for
 * counts beyond the limit: chunks of `limit` elements, nested as deep as
 * needed, plus a tail. */
static int make_big(int64_t n, size_t elsize, jm_Datatype t, jm_Datatype *out) {
  const int64_t c = jm_count.limit, q = n / c, r = n % c;
  jm_Datatype chunk, body, tail, joined;
  int rc = jm_mpi.Type_contiguous((int)c, t, &chunk);
  if (rc) return rc;
  if (fits(q))
    rc = jm_mpi.Type_contiguous((int)q, chunk, &body);
  else
    rc = make_big(q, (size_t)c * elsize, chunk, &body);
  jm_mpi.Type_free(&chunk);
  if (rc) return rc;
  if (r == 0) {
    joined = body;
  } else {
    rc = jm_mpi.Type_contiguous((int)r, t, &tail);
    if (rc) {
      jm_mpi.Type_free(&body);
      return rc;
    }
    const int lens[2] = {1, 1};
    const jm_Aint displs[2] = {0, (jm_Aint)(q * c * (int64_t)elsize)};
    const jm_Datatype types[2] = {body, tail};
    rc = jm_mpi.Type_create_struct(2, lens, displs, types, &joined);
    jm_mpi.Type_free(&body);
    jm_mpi.Type_free(&tail);
    if (rc) return rc;
  }
  rc = jm_mpi.Type_create_resized(joined, 0, (jm_Aint)(n * (int64_t)elsize), out);
  jm_mpi.Type_free(&joined);
  if (rc) return rc;
  rc = jm_mpi.Type_commit(out);
  if (rc) jm_mpi.Type_free(out);
  return rc;
}

/* Data movement beyond the limit is made with one element of a big type:
 * freed(&big, call) frees it after the call and returns the call's code. */
static int freed(jm_Datatype *big, int rc) {
  jm_mpi.Type_free(big);
  return rc;
}

static const char *at(const void *p, int64_t off, size_t elsize) {
  if (!p || p == jm_const.in_place) return p; /* MPI_IN_PLACE stays so */
  return (const char *)p + off * (int64_t)elsize;
}

/* Reductions beyond the limit are elementwise, so made chunk by chunk: the
 * chunk at element `off` of n holds chunk_len(n, off) elements. */
static int chunk_len(int64_t n, int64_t off) {
  return (int)(n - off < jm_count.limit ? n - off : jm_count.limit);
}

/* With the watchdog on, a call within the plain count limit is made as its
 * nonblocking variant and completed by jm_wait (large counts stay
 * blocking): `if (watched(n)) return finish(Icall(..., &rq), &rq, ...)`. */
static int watched(int64_t n) { return jm_watchdog_on() && fits(n); }
static int finish(int rc, jm_Request *rq, jm_Status *status, int cancellable) {
  return rc ? rc : jm_wait(rq, status, cancellable);
}

int jm_Barrier(jm_Comm comm) {
  jm_Request rq;
  if (watched(0))
    return finish(jm_mpi.Ibarrier(comm, &rq), &rq, NULL, 0);
  return jm_mpi.Barrier(comm);
}

int jm_Allreduce(const void *s, void *r, int64_t n, size_t elsize,
                 jm_Datatype t, jm_Op op, jm_Comm comm) {
  jm_Request rq;
  if (watched(n))
    return finish(jm_mpi.Iallreduce(s, r, (int)n, t, op, comm, &rq),
                  &rq, NULL, 0);
  if (fits(n)) return jm_mpi.Allreduce(s, r, (int)n, t, op, comm);
  if (use_c(jm_mpi.Allreduce_c)) return jm_mpi.Allreduce_c(s, r, n, t, op, comm);
  for (int64_t off = 0; off < n; off += jm_count.limit) {
    int rc = jm_mpi.Allreduce(at(s, off, elsize), (void *)at(r, off, elsize),
                   chunk_len(n, off), t, op, comm);
    if (rc) return rc;
  }
  return 0;
}

int jm_Reduce(const void *s, void *r, int64_t n, size_t elsize, jm_Datatype t,
              jm_Op op, int root, jm_Comm comm) {
  jm_Request rq;
  if (watched(n))
    return finish(jm_mpi.Ireduce(s, r, (int)n, t, op, root, comm, &rq),
                  &rq, NULL, 0);
  if (fits(n)) return jm_mpi.Reduce(s, r, (int)n, t, op, root, comm);
  if (use_c(jm_mpi.Reduce_c))
    return jm_mpi.Reduce_c(s, r, n, t, op, root, comm);
  for (int64_t off = 0; off < n; off += jm_count.limit) {
    int rc = jm_mpi.Reduce(at(s, off, elsize), (void *)at(r, off, elsize),
                   chunk_len(n, off), t, op, root, comm);
    if (rc) return rc;
  }
  return 0;
}

int jm_Scan(const void *s, void *r, int64_t n, size_t elsize, jm_Datatype t,
            jm_Op op, jm_Comm comm) {
  jm_Request rq;
  if (watched(n))
    return finish(jm_mpi.Iscan(s, r, (int)n, t, op, comm, &rq), &rq, NULL, 0);
  if (fits(n)) return jm_mpi.Scan(s, r, (int)n, t, op, comm);
  if (use_c(jm_mpi.Scan_c)) return jm_mpi.Scan_c(s, r, n, t, op, comm);
  for (int64_t off = 0; off < n; off += jm_count.limit) {
    int rc = jm_mpi.Scan(at(s, off, elsize), (void *)at(r, off, elsize),
                   chunk_len(n, off), t, op, comm);
    if (rc) return rc;
  }
  return 0;
}

/* Beyond the count limit without MPI-4's _c calls, reduce-scatter cannot be
 * chunked elementwise (each chunk's blocks would not be contiguous): it
 * becomes one (chunked) MPI_Reduce per block onto its rank, correct but
 * without reduce-scatter's bandwidth. */
int jm_Reduce_scatter_block(const void *s, void *r, int64_t n, size_t elsize,
                            jm_Datatype t, jm_Op op, jm_Comm comm) {
  jm_Request rq;
  if (watched(n))
    return finish(jm_mpi.Ireduce_scatter_block(s, r, (int)n, t, op, comm, &rq),
                  &rq, NULL, 0);
  if (fits(n)) return jm_mpi.Reduce_scatter_block(s, r, (int)n, t, op, comm);
  if (use_c(jm_mpi.Reduce_scatter_block_c))
    return jm_mpi.Reduce_scatter_block_c(s, r, n, t, op, comm);
  int rank = 0, size = 0, rc = jm_mpi.Comm_rank(comm, &rank);
  if (!rc) rc = jm_mpi.Comm_size(comm, &size);
  for (int j = 0; j < size && !rc; j++)
    rc = jm_Reduce(at(s, (int64_t)j * n, elsize), j == rank ? r : NULL, n,
                   elsize, t, op, j, comm);
  return rc;
}

int jm_Reduce_scatter(const void *s, void *r, const int64_t *counts,
                      int *ints, int size, int rank, size_t elsize,
                      jm_Datatype t, jm_Op op, jm_Comm comm) {
  int fit = 1;
  for (int j = 0; j < size; j++) fit &= fits(counts[j]);
  if (fit) {
    for (int j = 0; j < size; j++) ints[j] = (int)counts[j];
    jm_Request rq;
    if (watched(0))
      return finish(jm_mpi.Ireduce_scatter(s, r, ints, t, op, comm, &rq), &rq,
                    NULL, 0);
    return jm_mpi.Reduce_scatter(s, r, ints, t, op, comm);
  }
  if (use_c(jm_mpi.Reduce_scatter_c))
    return jm_mpi.Reduce_scatter_c(s, r, (const jm_Count *)counts, t, op, comm);
  int rc = 0;
  int64_t off = 0;
  for (int j = 0; j < size && !rc; j++) {
    rc = jm_Reduce(at(s, off, elsize), j == rank ? r : NULL, counts[j], elsize,
                   t, op, j, comm);
    off += counts[j];
  }
  return rc;
}

int jm_Exscan(const void *s, void *r, int64_t n, size_t elsize, jm_Datatype t,
              jm_Op op, jm_Comm comm) {
  jm_Request rq;
  if (watched(n))
    return finish(jm_mpi.Iexscan(s, r, (int)n, t, op, comm, &rq), &rq, NULL, 0);
  if (fits(n)) return jm_mpi.Exscan(s, r, (int)n, t, op, comm);
  if (use_c(jm_mpi.Exscan_c)) return jm_mpi.Exscan_c(s, r, n, t, op, comm);
  for (int64_t off = 0; off < n; off += jm_count.limit) {
    int rc = jm_mpi.Exscan(at(s, off, elsize), (void *)at(r, off, elsize),
                           chunk_len(n, off), t, op, comm);
    if (rc) return rc;
  }
  return 0;
}

int jm_Bcast(void *buf, int64_t n, size_t elsize, jm_Datatype t, int root,
             jm_Comm comm) {
  jm_Request rq;
  if (watched(n))
    return finish(jm_mpi.Ibcast(buf, (int)n, t, root, comm, &rq), &rq, NULL, 0);
  if (fits(n)) return jm_mpi.Bcast(buf, (int)n, t, root, comm);
  if (use_c(jm_mpi.Bcast_c)) return jm_mpi.Bcast_c(buf, n, t, root, comm);
  jm_Datatype big;
  int rc = make_big(n, elsize, t, &big);
  return rc ? rc : freed(&big, jm_mpi.Bcast(buf, 1, big, root, comm));
}

int jm_Gather(const void *s, void *r, int64_t n, size_t elsize, jm_Datatype t,
              int root, jm_Comm comm) {
  jm_Request rq;
  if (watched(n))
    return finish(jm_mpi.Igather(s, (int)n, t, r, (int)n, t, root, comm, &rq),
                  &rq, NULL, 0);
  if (fits(n)) return jm_mpi.Gather(s, (int)n, t, r, (int)n, t, root, comm);
  if (use_c(jm_mpi.Gather_c))
    return jm_mpi.Gather_c(s, n, t, r, n, t, root, comm);
  jm_Datatype big;
  int rc = make_big(n, elsize, t, &big);
  return rc ? rc : freed(&big, jm_mpi.Gather(s, 1, big, r, 1, big, root, comm));
}

int jm_Scatter(const void *s, void *r, int64_t n, size_t elsize,
               jm_Datatype t, int root, jm_Comm comm) {
  jm_Request rq;
  if (watched(n))
    return finish(jm_mpi.Iscatter(s, (int)n, t, r, (int)n, t, root, comm, &rq),
                  &rq, NULL, 0);
  if (fits(n)) return jm_mpi.Scatter(s, (int)n, t, r, (int)n, t, root, comm);
  if (use_c(jm_mpi.Scatter_c))
    return jm_mpi.Scatter_c(s, n, t, r, n, t, root, comm);
  jm_Datatype big;
  int rc = make_big(n, elsize, t, &big);
  return rc ? rc : freed(&big,
                         jm_mpi.Scatter(s, 1, big, r, 1, big, root, comm));
}

int jm_Allgather(const void *s, void *r, int64_t n, size_t elsize,
                 jm_Datatype t, jm_Comm comm) {
  jm_Request rq;
  if (watched(n))
    return finish(jm_mpi.Iallgather(s, (int)n, t, r, (int)n, t, comm, &rq),
                  &rq, NULL, 0);
  if (fits(n)) return jm_mpi.Allgather(s, (int)n, t, r, (int)n, t, comm);
  if (use_c(jm_mpi.Allgather_c))
    return jm_mpi.Allgather_c(s, n, t, r, n, t, comm);
  jm_Datatype big;
  int rc = make_big(n, elsize, t, &big);
  return rc ? rc : freed(&big, jm_mpi.Allgather(s, 1, big, r, 1, big, comm));
}

int jm_Alltoall(const void *s, void *r, int64_t n, size_t elsize,
                jm_Datatype t, jm_Comm comm) {
  jm_Request rq;
  if (watched(n))
    return finish(jm_mpi.Ialltoall(s, (int)n, t, r, (int)n, t, comm, &rq),
                  &rq, NULL, 0);
  if (fits(n)) return jm_mpi.Alltoall(s, (int)n, t, r, (int)n, t, comm);
  if (use_c(jm_mpi.Alltoall_c))
    return jm_mpi.Alltoall_c(s, n, t, r, n, t, comm);
  jm_Datatype big;
  int rc = make_big(n, elsize, t, &big);
  return rc ? rc : freed(&big, jm_mpi.Alltoall(s, 1, big, r, 1, big, comm));
}

int jm_Send(const void *buf, int64_t n, size_t elsize, jm_Datatype t,
            int dest, int tag, jm_Comm comm) {
  jm_Request rq;
  if (watched(n))
    return finish(jm_mpi.Isend(buf, (int)n, t, dest, tag, comm, &rq),
                  &rq, NULL, 0);
  if (fits(n)) return jm_mpi.Send(buf, (int)n, t, dest, tag, comm);
  if (use_c(jm_mpi.Send_c)) return jm_mpi.Send_c(buf, n, t, dest, tag, comm);
  jm_Datatype big;
  int rc = make_big(n, elsize, t, &big);
  return rc ? rc : freed(&big, jm_mpi.Send(buf, 1, big, dest, tag, comm));
}

int jm_Recv(void *buf, int64_t n, size_t elsize, jm_Datatype t, int source,
            int tag, jm_Comm comm, jm_Status *status) {
  jm_Request rq;
  if (watched(n))
    return finish(jm_mpi.Irecv(buf, (int)n, t, source, tag, comm, &rq),
                  &rq, status, 1);
  if (fits(n)) return jm_mpi.Recv(buf, (int)n, t, source, tag, comm, status);
  if (use_c(jm_mpi.Recv_c))
    return jm_mpi.Recv_c(buf, n, t, source, tag, comm, status);
  jm_Datatype big;
  int rc = make_big(n, elsize, t, &big);
  return rc ? rc : freed(&big,
                         jm_mpi.Recv(buf, 1, big, source, tag, comm, status));
}

int jm_Sendrecv(const void *s, int64_t sn, size_t selsize, jm_Datatype st,
                int dest, int sendtag, void *r, int64_t rn, size_t relsize,
                jm_Datatype rt, int source, int recvtag, jm_Comm comm,
                jm_Status *status) {
  if (jm_watchdog_on() && fits(sn) && fits(rn)) {
    /* Post the receive first, then the send; complete both. A receive that
     * times out is cancelled; the send is left pending. */
    jm_Request rr, sr;
    int rc = jm_mpi.Irecv(r, (int)rn, rt, source, recvtag, comm, &rr);
    if (rc) return rc;
    rc = jm_mpi.Isend(s, (int)sn, st, dest, sendtag, comm, &sr);
    if (rc) {
      jm_mpi.Cancel(&rr);
      jm_wait(&rr, NULL, 1);
      return rc;
    }
    rc = jm_wait(&rr, status, 1);
    if (rc && rc != JM_ERR_TIMEOUT) jm_settle(1, &sr, 0); /* see jm_settle */
    if (rc) return rc;
    return jm_wait(&sr, NULL, 0);
  }
  if (fits(sn) && fits(rn))
    return jm_mpi.Sendrecv(s, (int)sn, st, dest, sendtag, r, (int)rn, rt,
                           source, recvtag, comm, status);
  if (use_c(jm_mpi.Sendrecv_c))
    return jm_mpi.Sendrecv_c(s, sn, st, dest, sendtag, r, rn, rt, source,
                             recvtag, comm, status);
  /* Describe each side as one element (of a big type only where needed). */
  jm_Datatype sbig = st, rbig = rt;
  int scount = (int)sn, rcount = (int)rn, rc = 0;
  if (!fits(sn)) {
    rc = make_big(sn, selsize, st, &sbig);
    if (rc) return rc;
    scount = 1;
  }
  if (!fits(rn)) {
    rc = make_big(rn, relsize, rt, &rbig);
    if (rc) {
      if (scount == 1 && !fits(sn)) jm_mpi.Type_free(&sbig);
      return rc;
    }
    rcount = 1;
  }
  rc = jm_mpi.Sendrecv(s, scount, sbig, dest, sendtag, r, rcount, rbig, source,
                       recvtag, comm, status);
  if (!fits(sn)) jm_mpi.Type_free(&sbig);
  if (!fits(rn)) jm_mpi.Type_free(&rbig);
  return rc;
}

int jm_Isend(const void *buf, int64_t n, size_t elsize, jm_Datatype t,
             int dest, int tag, jm_Comm comm, jm_Request *req) {
  if (fits(n)) return jm_mpi.Isend(buf, (int)n, t, dest, tag, comm, req);
  if (use_c(jm_mpi.Isend_c))
    return jm_mpi.Isend_c(buf, n, t, dest, tag, comm, req);
  jm_Datatype big;
  int rc = make_big(n, elsize, t, &big);
  return rc ? rc : freed(&big, jm_mpi.Isend(buf, 1, big, dest, tag, comm, req));
}

int jm_Irecv(void *buf, int64_t n, size_t elsize, jm_Datatype t, int source,
             int tag, jm_Comm comm, jm_Request *req) {
  if (fits(n)) return jm_mpi.Irecv(buf, (int)n, t, source, tag, comm, req);
  if (use_c(jm_mpi.Irecv_c))
    return jm_mpi.Irecv_c(buf, n, t, source, tag, comm, req);
  jm_Datatype big;
  int rc = make_big(n, elsize, t, &big);
  return rc ? rc : freed(&big,
                         jm_mpi.Irecv(buf, 1, big, source, tag, comm, req));
}

int64_t jm_received_bytes(const jm_Status *status) {
  int count = 0;
  if (jm_mpi.Get_count(status, jm_const.byte, &count)) return -1;
  if (count == jm_const.undefined) return -1;
  return count;
}

/* ---- variable counts ---------------------------------------------------- */

/* 1 if every count and displacement fits a C int (an array NULL: none). */
static int all_fit(int n, const int64_t *counts, const int64_t *displs) {
  if (!counts) return 1;
  for (int i = 0; i < n; i++)
    if (!fits(counts[i]) || !fits(displs[i])) return 0;
  return 1;
}

/* The C int arrays of a plain call: on the stack for small communicators.
 * Under the watchdog they are always allocated, and a timed-out call leaves
 * them allocated: its nonblocking MPI call may still read them. */
#define JM_INTS_STACK 256
typedef struct jm_ints {
  int *p;
  int stack[JM_INTS_STACK];
} jm_ints;

static int *ints_get(jm_ints *b, int n, int watched) {
  b->p = (!watched && n <= JM_INTS_STACK) ? b->stack
                                          : malloc(sizeof(int) * (size_t)(n ? n : 1));
  return b->p;
}

static void ints_put(jm_ints *b, int rc) {
  if (b->p != b->stack && rc != JM_ERR_TIMEOUT) free(b->p);
}

/* Copy n int64 values that fit into out (a NULL source: nothing). */
static const int *to_ints(int *out, const int64_t *v, int n) {
  if (!v) return NULL;
  for (int i = 0; i < n; i++) out[i] = (int)v[i];
  return out;
}

static jm_Aint *to_aints(const int64_t *v, int n, int *rc) {
  if (!v) return NULL;
  jm_Aint *a = malloc(sizeof(jm_Aint) * (size_t)(n ? n : 1));
  if (!a) {
    *rc = JM_ERR_NOMEM;
    return NULL;
  }
  for (int i = 0; i < n; i++) a[i] = (jm_Aint)v[i];
  return a;
}

/* n elements of t at element displacement d, as one datatype whose lower
 * bound holds the byte displacement (an MPI_Aint: no int overflow). */
static int block_type(int64_t n, int64_t d, size_t elsize, jm_Datatype t,
                      jm_Datatype *out) {
  jm_Datatype inner;
  int rc = fits(n) ? jm_mpi.Type_contiguous((int)n, t, &inner)
                   : make_big(n, elsize, t, &inner);
  if (rc) return rc;
  const int len = 1;
  const jm_Aint disp = (jm_Aint)(d * (int64_t)elsize);
  rc = jm_mpi.Type_create_struct(1, &len, &disp, &inner, out);
  jm_mpi.Type_free(&inner);
  if (rc) return rc;
  rc = jm_mpi.Type_commit(out);
  if (rc) jm_mpi.Type_free(out);
  return rc;
}

/* Large counts without the MPI-4 calls: MPI_Alltoallw, one element of a
 * block type per peer with anything to move (counts 0 or 1, displacements
 * 0: the types hold them). A NULL count array moves nothing that way. */
static int alltoallw_blocks(const void *s, const int64_t *sc,
                            const int64_t *sd, void *r, const int64_t *rc_,
                            const int64_t *rd, int size, size_t elsize,
                            jm_Datatype t, jm_Comm comm) {
  int *ints = calloc((size_t)size * 4, sizeof(int));
  jm_Datatype *types = calloc((size_t)size * 2, sizeof(jm_Datatype));
  int rc = 0, made = 0;
  if (!ints || !types) {
    free(ints);
    free(types);
    return JM_ERR_NOMEM;
  }
  int *scnt = ints, *sdsp = ints + size, *rcnt = ints + 2 * size,
      *rdsp = ints + 3 * size;
  jm_Datatype *st = types, *rt = types + size;
  for (int i = 0; i < size; i++) {
    st[i] = rt[i] = t;
  }
  for (int i = 0; i < size && !rc; i++) {
    if (sc && sc[i] > 0) {
      rc = block_type(sc[i], sd[i], elsize, t, &st[i]);
      if (!rc) scnt[i] = 1;
    }
    if (!rc && rc_ && rc_[i] > 0) {
      rc = block_type(rc_[i], rd[i], elsize, t, &rt[i]);
      if (!rc) rcnt[i] = 1;
    }
    made = i + 1;
  }
  if (!rc)
    rc = jm_mpi.Alltoallw(s, scnt, sdsp, st, r, rcnt, rdsp, rt, comm);
  for (int i = 0; i < made; i++) {
    if (scnt[i]) jm_mpi.Type_free(&st[i]);
    if (rcnt[i]) jm_mpi.Type_free(&rt[i]);
  }
  free(ints);
  free(types);
  return rc;
}

/* A variable-count collective, in elements of t: each side's counts and
 * displacements (v[0], v[1] the send side's, v[2], v[3] the receive
 * side's; NULL where the call takes none here: a non-root's of a rooted
 * op), or the one count of a side that moves one block (sn, rn). */
enum { JM_V_ALLGATHER, JM_V_GATHER, JM_V_SCATTER, JM_V_ALLTOALL };
typedef struct jm_vcall {
  int kind;
  const void *s;
  void *r;
  int64_t sn, rn;
  const int64_t *v[4];
  int size, root;
  jm_Datatype t;
  jm_Comm comm;
} jm_vcall;

/* MPI's `call`(args), or, with the watchdog on (q), its nonblocking
 * variant `icall`(args, q) completed by it. */
#define JM_WATCHED(q, icall, call, ...)                                        \
  ((q) ? finish(jm_mpi.icall(__VA_ARGS__, (q)), (q), NULL, 0)                  \
       : jm_mpi.call(__VA_ARGS__))

/* The plain call: every count and displacement an int. */
static int v_plain(const jm_vcall *c) {
  const int watched = jm_watchdog_on(), n = c->size;
  jm_ints b;
  int *ip = ints_get(&b, 4 * n, watched);
  if (!ip) return JM_ERR_NOMEM;
  const int *i[4];
  for (int k = 0; k < 4; k++) i[k] = to_ints(ip + k * n, c->v[k], n);
  const int sn = (int)c->sn, rn = (int)c->rn;
  jm_Request rq, *q = watched ? &rq : NULL;
  int rc;
  switch (c->kind) {
    case JM_V_ALLGATHER:
      rc = JM_WATCHED(q, Iallgatherv, Allgatherv, c->s, sn, c->t, c->r, i[2],
                      i[3], c->t, c->comm);
      break;
    case JM_V_GATHER:
      rc = JM_WATCHED(q, Igatherv, Gatherv, c->s, sn, c->t, c->r, i[2], i[3],
                      c->t, c->root, c->comm);
      break;
    case JM_V_SCATTER:
      rc = JM_WATCHED(q, Iscatterv, Scatterv, c->s, i[0], i[1], c->t, c->r, rn,
                      c->t, c->root, c->comm);
      break;
    default:
      rc = JM_WATCHED(q, Ialltoallv, Alltoallv, c->s, i[0], i[1], c->t, c->r,
                      i[2], i[3], c->t, c->comm);
  }
  ints_put(&b, rc);
  return rc;
}

/* Whether the library has the MPI-4 large-count form of the call. */
static int v_has_c(const jm_vcall *c) {
  switch (c->kind) {
    case JM_V_ALLGATHER: return use_c(jm_mpi.Allgatherv_c);
    case JM_V_GATHER: return use_c(jm_mpi.Gatherv_c);
    case JM_V_SCATTER: return use_c(jm_mpi.Scatterv_c);
    default: return use_c(jm_mpi.Alltoallv_c);
  }
}

/* The MPI-4 call: counts as MPI_Count, displacements as MPI_Aint. */
static int v_large(const jm_vcall *c) {
  int rc = 0;
  jm_Aint *sd = to_aints(c->v[1], c->size, &rc), *rd = NULL;
  if (!rc) rd = to_aints(c->v[3], c->size, &rc);
  if (rc) {
    free(sd);
    return rc;
  }
  switch (c->kind) {
    case JM_V_ALLGATHER:
      rc = jm_mpi.Allgatherv_c(c->s, c->sn, c->t, c->r, c->v[2], rd, c->t,
                               c->comm);
      break;
    case JM_V_GATHER:
      rc = jm_mpi.Gatherv_c(c->s, c->sn, c->t, c->r, c->v[2], rd, c->t,
                            c->root, c->comm);
      break;
    case JM_V_SCATTER:
      rc = jm_mpi.Scatterv_c(c->s, c->v[0], sd, c->t, c->r, c->rn, c->t,
                             c->root, c->comm);
      break;
    default:
      rc = jm_mpi.Alltoallv_c(c->s, c->v[0], sd, c->t, c->r, c->v[2], rd,
                              c->t, c->comm);
  }
  free(sd);
  free(rd);
  return rc;
}

/* allgatherv, gatherv and scatterv choose their path from the counts every
 * rank has (`fit`: all within the limit), so all ranks make the same call:
 * plain, the MPI-4 call, or MPI_Alltoallw with one block type per peer (the
 * side that moves one block has it for the root, or for every rank:
 * allgatherv). */
static int v_choose(const jm_vcall *c, int fit, size_t elsize) {
  if (fit) return v_plain(c);
  if (v_has_c(c)) return v_large(c);
  const int n = c->size, scatter = c->kind == JM_V_SCATTER;
  int64_t *one = calloc((size_t)n * 2, sizeof(int64_t)); /* displs: 0 */
  if (!one) return JM_ERR_NOMEM;
  for (int i = 0; i < n; i++)
    if (c->kind == JM_V_ALLGATHER || i == c->root)
      one[i] = scatter ? c->rn : c->sn;
  const int rc =
      scatter ? alltoallw_blocks(c->s, c->v[0], c->v[1], c->r, one, one + n,
                                 n, elsize, c->t, c->comm)
              : alltoallw_blocks(c->s, one, one + n, c->r, c->v[2], c->v[3],
                                 n, elsize, c->t, c->comm);
  free(one);
  return rc;
}

int jm_Allgatherv(const void *s, int64_t sn, void *r, const int64_t *rcounts,
                  const int64_t *rdispls, int size, size_t elsize,
                  jm_Datatype t, jm_Comm comm) {
  const jm_vcall c = {JM_V_ALLGATHER, s, r, sn, 0,
                      {NULL, NULL, rcounts, rdispls}, size, 0, t, comm};
  return v_choose(&c, fits(sn) && all_fit(size, rcounts, rdispls), elsize);
}

/* MPI reads the counts and displacements on the root only; every rank has
 * them (the same everywhere) and chooses the path from them. */
int jm_Gatherv(const void *s, int64_t sn, void *r, const int64_t *counts,
               const int64_t *displs, int is_root, int size, size_t elsize,
               jm_Datatype t, int root, jm_Comm comm) {
  const jm_vcall c = {JM_V_GATHER, s, r, sn, 0,
                      {NULL, NULL, is_root ? counts : NULL,
                       is_root ? displs : NULL},
                      size, root, t, comm};
  return v_choose(&c, all_fit(size, counts, displs), elsize);
}

int jm_Scatterv(const void *s, const int64_t *counts, const int64_t *displs,
                int is_root, void *r, int64_t rn, int size, size_t elsize,
                jm_Datatype t, int root, jm_Comm comm) {
  const jm_vcall c = {JM_V_SCATTER, s, r, 0, rn,
                      {is_root ? counts : NULL, is_root ? displs : NULL, NULL,
                       NULL},
                      size, root, t, comm};
  return v_choose(&c, all_fit(size, counts, displs), elsize);
}

/* Counts and displacements in units of `row` elements (they are whole
 * rows), into out[0..4n). */
static void in_rows(int64_t *out, const int64_t *const v[4], int n,
                    int64_t row) {
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < n; i++) out[k * n + i] = v[k][i] / row;
}

int jm_Alltoallv(const void *s, const int64_t *scounts,
                 const int64_t *sdispls, void *r, const int64_t *rcounts,
                 const int64_t *rdispls, int64_t row, int size, size_t elsize,
                 jm_Datatype t, jm_Comm comm) {
  /* Each rank knows only its own counts, so each chooses alone: every
   * choice below is MPI_Alltoallv with the same type signature per pair
   * (elements of t, or rows of them), which MPI lets ranks mix; the MPI-4
   * call is the same collective in its large-count form. */
  jm_vcall c = {JM_V_ALLTOALL, s, r, 0, 0,
                {scounts, sdispls, rcounts, rdispls}, size, 0, t, comm};
  if (all_fit(size, scounts, sdispls) && all_fit(size, rcounts, rdispls))
    return v_plain(&c);
  int rc = 0;
  if (row > 1) {
    int64_t *v = malloc(sizeof(int64_t) * 4 * (size_t)size);
    if (!v) return JM_ERR_NOMEM;
    in_rows(v, c.v, size, row);
    if (all_fit(size, v, v + size) && all_fit(size, v + 2 * size, v + 3 * size)) {
      jm_vcall rows = {JM_V_ALLTOALL, s, r, 0, 0,
                       {v, v + size, v + 2 * size, v + 3 * size}, size, 0, t,
                       comm};
      rc = fits(row) ? jm_mpi.Type_contiguous((int)row, t, &rows.t)
                     : make_big(row, elsize, t, &rows.t);
      if (!rc && fits(row)) rc = jm_mpi.Type_commit(&rows.t);
      if (!rc) {
        rc = v_plain(&rows);
        jm_mpi.Type_free(&rows.t);
      }
      free(v);
      return rc;
    }
    free(v);
  }
  if (v_has_c(&c)) return v_large(&c);
  return JM_ERR_COUNT;
}
