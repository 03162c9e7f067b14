/* Point-to-point operations. A receive that delivers fewer bytes than the
 * result holds is an error, never silently uninitialised memory. */
#include "ffi.h"
#include "cuda_staging.h"
#include "mpi_calls.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "watchdog.h"

/* A receive whose message was longer than its result (MPI's truncation
 * error): jaxmpi's message, with the size the result holds. */
static XLA_FFI_Error *receive_failure(jm_call *c, const char *fn,
                                      const jm_buffer *y, int source, int tag,
                                      const jm_Status *st, int rc) {
  int cls = -1;
  if (rc == JM_ERR_TIMEOUT || jm_mpi.Error_class(rc, &cls) != 0 ||
      cls != jm_const.err_truncate || jm_const.err_truncate < 0)
    return jm_mpi_failure(c, fn, "source", source, rc);
  if (source == jm_const.any_source) source = st->MPI_SOURCE;
  if (tag == jm_const.any_tag) tag = st->MPI_TAG;
  char expect[160];
  jm_format_array(y, expect, sizeof expect);
  return jm_error(c, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                  "rank %d expects %s (%lld bytes) but the message from rank "
                  "%d with tag %d is larger (%s: message truncated): the "
                  "sender's shape or dtype differs",
                  c->rank, expect, (long long)(y->count * (int64_t)y->elsize),
                  source, tag, fn);
}

static const char *const one_rank_hint =
    "; at 1 rank: was the job started without mpirun/mpiexec -n N?";

/* A blocking send to itself completes only if MPI buffers it (MPICH never
 * does, measured: MPI_Send of 24 bytes to itself hangs; Open MPI up to its
 * eager limit) or a receive is already posted: the matching jaxmpi recv
 * comes later in this process's program, which cannot go on while the send
 * blocks. So send without blocking, and if MPI has not completed it after a
 * few polls, it never will: cancel it and say so instead of hanging. */
static XLA_FFI_Error *send_to_self(jm_call *c, const jm_buffer *x) {
  jm_Request rq;
  double t0 = jm_log_start();
  int rc = jm_Isend(x->data, x->count, x->elsize, x->mpi, c->dest, c->tag,
                    c->comm, &rq);
  if (jm_cfg.debug)
    jm_log(c, "MPI_Isend (to itself)", "dest", c->dest, x->count, x->dtype,
           t0);
  if (rc) return jm_mpi_failure(c, "MPI_Isend (to itself)", "dest", c->dest, rc);
  jm_Status st;
  for (int polls = 0; polls < 1000; polls++) {
    int done = 0;
    rc = jm_mpi.Test(&rq, &done, &st);
    if (rc) return jm_mpi_failure(c, "MPI_Test (to itself)", "dest", c->dest, rc);
    if (done) return NULL;
  }
  int cancelled = 0;
  if (jm_mpi.Cancel(&rq) == 0) {
    double until = jm_mpi.Wtime() + 1.0;
    while (jm_mpi.Wtime() < until) {
      int done = 0;
      if (jm_mpi.Test(&rq, &done, &st) || done) {
        cancelled = done;
        break;
      }
    }
  }
  char what[160];
  jm_format_array(x, what, sizeof what);
  return jm_error(
      c, XLA_FFI_Error_Code_FAILED_PRECONDITION,
      "rank %d of %d sends %s (%lld bytes) to itself (tag %d), which cannot "
      "complete: MPI did not buffer it (MPICH buffers no message a rank "
      "sends to itself, other MPIs only up to an eager limit) and the "
      "matching recv could only run after this send returns (jaxmpi calls "
      "run one at a time, in program order). To pass data to the same rank "
      "use sendrecv with source=dest=rank%s (the send was %s)",
      c->rank, c->size, what, (long long)(x->count * (int64_t)x->elsize),
      c->tag, c->size == 1 ? one_rank_hint : "",
      cancelled ? "cancelled"
                : "not cancelled: the communicator cannot be used any more");
}

XLA_FFI_Error *jm_run_send(jm_call *c) {
  jm_buffer *x = &c->arg[0];
  if (c->dest == c->rank) return send_to_self(c, x);
  JM_MPI(c, "MPI_Send", "dest", c->dest, x->count, x->dtype,
         jm_Send(x->data, x->count, x->elsize, x->mpi, c->dest, c->tag,
                 c->comm));
  return NULL;
}

/* A receive only this process could send to (from itself, or from any
 * source at 1 rank) can never complete unless the message is already
 * there: nothing else of this program runs while it waits. */
static XLA_FFI_Error *check_from_self(jm_call *c) {
  if (c->source != c->rank &&
      !(c->source == jm_const.any_source && c->size == 1))
    return NULL;
  /* A message it sent itself may still be on its way through the network
   * layer (MPICH at 2 ranks: an mpi4py Isend to itself was not yet seen by
   * the first MPI_Iprobe): poll for up to a second before concluding. */
  int found = 0;
  jm_Status st;
  const double until = jm_mpi.Wtime() + 1.0;
  do {
    int rc = jm_mpi.Iprobe(c->source, c->tag, c->comm, &found, &st);
    if (rc) return jm_mpi_failure(c, "MPI_Iprobe", "source", c->source, rc);
    if (found) return NULL;
  } while (jm_mpi.Wtime() < until);
  char src[48], tag[48];
  if (c->source == jm_const.any_source)
    snprintf(src, sizeof src, "MPI.ANY_SOURCE");
  else
    snprintf(src, sizeof src, "%d", c->source);
  if (c->tag == jm_const.any_tag)
    snprintf(tag, sizeof tag, "MPI.ANY_TAG");
  else
    snprintf(tag, sizeof tag, "%d", c->tag);
  return jm_error(
      c, XLA_FFI_Error_Code_FAILED_PRECONDITION,
      "rank %d of %d receives from itself (source %s, tag %s) but no such "
      "message from itself is waiting, and none can come while it waits "
      "(jaxmpi calls run one at a time, in program order): send it first, or "
      "use sendrecv with source=dest=rank%s",
      c->rank, c->size, src, tag, c->size == 1 ? one_rank_hint : "");
}

XLA_FFI_Error *jm_run_recv(jm_call *c) {
  jm_buffer *y = &c->ret[0];
  jm_Status st;
  memset(&st, 0, sizeof st);
  XLA_FFI_Error *err = check_from_self(c);
  if (err) return err;
  /* The probe costs no round trip and waits for nothing (a few polls; the
   * receive does the waiting): on in the default mode too. */
  if (jm_check_mode()) {
    err = jm_check_incoming(c, y, c->source, c->tag);
    if (err) return err;
  }
  double t0 = jm_log_start();
  int rc = jm_Recv(y->data, y->count, y->elsize, y->mpi, c->source, c->tag,
                   c->comm, &st);
  if (jm_cfg.debug)
    jm_log(c, "MPI_Recv", "source", c->source, y->count, y->dtype, t0);
  if (rc) return receive_failure(c, "MPI_Recv", y, c->source, c->tag, &st, rc);
  return jm_check_received(c, y, &st);
}

XLA_FFI_Error *jm_run_sendrecv(jm_call *c) {
  jm_buffer *x = &c->arg[0], *y = &c->ret[0];
  jm_Status st;
  memset(&st, 0, sizeof st);
  double t0 = jm_log_start();
  int rc = jm_Sendrecv(x->data, x->count, x->elsize, x->mpi, c->dest,
                       c->sendtag, y->data, y->count, y->elsize, y->mpi,
                       c->source, c->recvtag, c->comm, &st);
  if (jm_cfg.debug)
    jm_log(c, "MPI_Sendrecv", "source", c->source, y->count, y->dtype, t0);
  if (rc)
    return receive_failure(c, "MPI_Sendrecv", y, c->source, c->recvtag, &st,
                           rc);
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
                               l.buf->mpi, l.peer, tag, jm_recv_comm(c, k),
                               &reqs[k])
                    : jm_Isend(l.buf->data, l.buf->count, l.buf->elsize,
                               l.buf->mpi, l.peer, tag, jm_send_comm(c, k - n),
                               &reqs[k]);
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
      if (!jm_status_failed(&st[k])) continue;
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

/* neighbor_alltoallv: result i is received from sources[i], argument j is
 * sent to dests[j], every message with the one tag `tag` (the lists may
 * differ in length: a distributed graph's in- and out-degrees). MPI's
 * non-overtaking order matches the k-th message from a rank to a peer with
 * the peer's k-th receive from that rank, as MPI_Neighbor_alltoallv matches
 * the edges of a multigraph in the order they were given. Every receive is
 * posted, then every send, then one wait. */
XLA_FFI_Error *jm_run_neighbor_alltoallv(jm_call *c) {
  const int nr = c->nrets, ns = c->nargs;
  JM_EXPECT(c, c->nsources == nr && c->ndests == ns,
            "%d results with %d sources, %d send buffers with %d dests", nr,
            c->nsources, ns, c->ndests);
  JM_EXPECT(c, c->tag >= 0, "tag %d is not a valid MPI tag", c->tag);
  jm_Request reqs[2 * JM_MAX_BUFFERS];
  jm_Status st[2 * JM_MAX_BUFFERS];
  memset(st, 0, sizeof st);
  for (int k = 0; k < nr + ns; k++) {
    const int recv = k < nr;
    jm_buffer *b = recv ? &c->ret[k] : &c->arg[k - nr];
    const int peer = recv ? c->sources[k] : c->dests[k - nr];
    double t0 = jm_log_start();
    int rc = recv ? jm_Irecv(b->data, b->count, b->elsize, b->mpi, peer,
                             c->tag, jm_recv_comm(c, k), &reqs[k])
                  : jm_Isend(b->data, b->count, b->elsize, b->mpi, peer,
                             c->tag, jm_send_comm(c, k - nr), &reqs[k]);
    if (jm_cfg.debug)
      jm_log(c, recv ? "MPI_Irecv" : "MPI_Isend", recv ? "source" : "dest",
             peer, b->count, b->dtype, t0);
    if (rc) {
      abandon(reqs, recv ? k : nr, reqs + nr, recv ? 0 : k - nr);
      return jm_mpi_failure(c, recv ? "MPI_Irecv" : "MPI_Isend",
                            recv ? "source" : "dest", peer, rc);
    }
  }
  double t0 = jm_log_start();
  int rc = jm_waitall(nr + ns, reqs, st, nr);
  if (jm_cfg.debug) jm_log(c, "MPI_Waitall", NULL, 0, nr + ns, -1, t0);
  if (rc == JM_ERR_TIMEOUT) return jm_mpi_failure(c, "MPI_Waitall", NULL, 0, rc);
  if (rc) {
    for (int k = 0; k < nr + ns; k++) {
      if (!jm_status_failed(&st[k])) continue;
      const int recv = k < nr;
      return jm_mpi_failure(
          c, recv ? "MPI_Waitall (receive)" : "MPI_Waitall (send)",
          recv ? "source" : "dest",
          recv ? c->sources[k] : c->dests[k - nr], st[k].MPI_ERROR);
    }
    return jm_mpi_failure(c, "MPI_Waitall", NULL, 0, rc);
  }
  for (int i = 0; i < nr; i++) {
    XLA_FFI_Error *err = jm_check_received(c, &c->ret[i], &st[i]);
    if (err) return err;
  }
  return NULL;
}
