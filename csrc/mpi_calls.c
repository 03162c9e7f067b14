/* The large-count and watchdog layer over the bound MPI: every blocking
 * call of an op body goes through here (mpi_calls.h). */
#include "mpi_calls.h"

#include "watchdog.h"

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
