/* Point-to-point operations. A receive that delivers fewer bytes than the
 * result holds is an error, never silently uninitialised memory. */
#include "ffi.h"

#include <limits.h>
#include <string.h>

#include "check.h"
#include "watchdog.h"

XLA_FFI_Error *jm_check_received(jm_call *c, const jm_buffer *y,
                                 const jm_Status *st) {
  if (st->MPI_SOURCE == jm_const.proc_null) { /* nothing arrives: zeros */
    if (c->status) *c->status = *st;
    return jm_zero(c, y->data, (size_t)y->count * y->elsize);
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
  return jm_check_received(c, y, &st);
}

XLA_FFI_Error *jm_run_sendrecv(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  jm_Status st;
  JM_MPI(c, "MPI_Sendrecv", "source", c->source, y->count, y->dtype,
         jm_Sendrecv(x->data, x->count, x->elsize, x->mpi, c->dest, c->sendtag,
                     y->data, y->count, y->elsize, y->mpi, c->source,
                     c->recvtag, c->comm, &st));
  return jm_check_received(c, y, &st);
}

/* Undo the first `nrecv` receives and `nsend` sends posted by an exchange
 * that could not post the rest: the receives are cancelled (they must never
 * write into buffers XLA reuses), the sends left to complete on their own. */
static void abandon(jm_Request *recvs, int nrecv, jm_Request *sends,
                    int nsend) {
  for (int i = 0; i < nrecv; i++) {
    jm_Status st;
    jm_mpi.Cancel(&recvs[i]);
    jm_mpi.Wait(&recvs[i], &st);
  }
  for (int i = 0; i < nsend; i++) jm_mpi.Request_free(&sends[i]);
}

/* Request k of an exchange of n pairs: the receive of pair k (k < n), else
 * the send of pair k - n. */
typedef struct {
  jm_buffer *buf;
  int peer, recv;
  const char *fn, *peer_kind;
} jm_leg;

static jm_leg leg(jm_call *c, int k) {
  const int n = c->nargs, recv = k < n, i = recv ? k : k - n;
  return (jm_leg){recv ? &c->ret[i] : &c->arg[i],
                  recv ? c->sources[i] : c->dests[i], recv,
                  recv ? "MPI_Irecv" : "MPI_Isend", recv ? "source" : "dest"};
}

/* Pair i sends arg[i] to dests[i] and receives ret[i] from sources[i], both
 * with tag + i: every receive is posted, then every send, then one wait. */
XLA_FFI_Error *jm_run_neighbor_exchange(jm_call *c) {
  const int n = c->nargs;
  JM_EXPECT(c, c->nrets == n && c->nsources == n && c->ndests == n,
            "%d send buffers, %d results, %d sources and %d dests differ",
            n, c->nrets, c->nsources, c->ndests);
  JM_EXPECT(c, c->tag >= 0 && (int64_t)c->tag + n - 1 <= INT_MAX,
            "tags %d to %d + %d - 1 are not all valid MPI tags", c->tag,
            c->tag, n);
  jm_Request reqs[2 * JM_MAX_BUFFERS];
  jm_Status st[2 * JM_MAX_BUFFERS];
  memset(st, 0, sizeof st); /* MPI_ERROR stays 0 where MPI sets nothing */
  for (int k = 0; k < 2 * n; k++) {
    jm_leg l = leg(c, k);
    const int tag = c->tag + (l.recv ? k : k - n);
    double t0 = jm_log_start();
    int rc = l.recv ? jm_Irecv(l.buf->data, l.buf->count, l.buf->elsize,
                               l.buf->mpi, l.peer, tag, c->comm, &reqs[k])
                    : jm_Isend(l.buf->data, l.buf->count, l.buf->elsize,
                               l.buf->mpi, l.peer, tag, c->comm, &reqs[k]);
    if (jm_cfg.debug)
      jm_log(c, l.fn, l.peer_kind, l.peer, l.buf->count, l.buf->dtype, t0);
    if (rc) {
      abandon(reqs, l.recv ? k : n, reqs + n, l.recv ? 0 : k - n);
      return jm_mpi_failure(c, l.fn, l.peer_kind, l.peer, rc);
    }
  }
  double t0 = jm_log_start();
  int rc = jm_waitall(2 * n, reqs, st, n);
  if (jm_cfg.debug) jm_log(c, "MPI_Waitall", NULL, 0, 2 * n, -1, t0);
  if (rc == JM_ERR_TIMEOUT) return jm_mpi_failure(c, "MPI_Waitall", NULL, 0, rc);
  if (rc) {
    /* MPI_ERR_IN_STATUS: name the first request that failed. */
    for (int k = 0; k < 2 * n; k++) {
      if (st[k].MPI_ERROR == 0) continue;
      jm_leg l = leg(c, k);
      return jm_mpi_failure(c, l.recv ? "MPI_Waitall (receive)"
                                      : "MPI_Waitall (send)",
                            l.peer_kind, l.peer, st[k].MPI_ERROR);
    }
    return jm_mpi_failure(c, "MPI_Waitall", NULL, 0, rc);
  }
  for (int i = 0; i < n; i++) {
    XLA_FFI_Error *err = jm_check_received(c, &c->ret[i], &st[i]);
    if (err) return err;
  }
  return NULL;
}
