/* Non-blocking operations: see request.h. */
#define _POSIX_C_SOURCE 200809L
#include "request.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <sched.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "collectives.h"
#include "cuda_staging.h"
#include "mpi_calls.h"
#include "record_ops.h"
#include "watchdog.h"

enum { R_STARTING = 1, R_POSTED, R_WAITING };

typedef struct jm_req {
  int slot, state;
  uint32_t handle;
  jm_call call;     /* the start's decoded call (frame NULL): names, peers,
                       buffers (data, count, dtype) for messages and checks */
  const char *fn;   /* the MPI call, for messages */
  const char *peer_kind;
  int peer;
  int nreq, nrecv;  /* MPI requests; the first nrecv are receives */
  jm_Request reqs[JM_MAX_REQS];
  jm_Status st[JM_MAX_REQS];
  int recv_ret[JM_MAX_REQS]; /* receive k delivers call.ret[recv_ret[k]] */
  int nkeep;                 /* buffers the wait must get, in order (NULL:
                                an empty one, at any address) */
  void *keep[JM_MAX_REQS + 1];
  int collective;            /* MPI forbids cancelling or freeing these */
  void *mem;                 /* what MPI reads until completion (counts) */
  int complete, rc;          /* all requests done; MPI's code (or timeout) */
  char what[48];             /* "wait of MPI_Irecv", for the watchdog */
  XLA_FFI_Future *future;    /* a wait pending on this request */
  const XLA_FFI_Api *api;
  double deadline;           /* of the pending wait (0: none) */
  int on_gpu;                /* started by a CUDA handler: */
  jm_cuda_stage *gpu;        /* its staging (keep[] holds device pointers) */
  void *gpu_handle;          /* the device address of its handle result */
} jm_req;

/* The table: slot pointers, generations and the list of active slots,
 * guarded by `lock`; every MPI_Test* on a request is made under it too
 * (MPI forbids testing one request from two threads at once). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;
static jm_req *table[JM_SLOTS];
static uint32_t gens[JM_SLOTS];
static int active[JM_SLOTS], nactive, next_slot;
static _Atomic int async_on, kicked;
static int stopping; /* under `lock`: MPI is about to be finalized */
static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
static int threads_ok;

void jaxmpi_set_async(int on) { atomic_store(&async_on, on ? 1 : 0); }
int jaxmpi_get_async(void) { return atomic_load(&async_on); }

int jaxmpi_requests_shutdown(void) {
  /* Every MPI call of the progress thread is made holding `lock`: once we
   * have held it with `stopping` set, it makes none any more. */
  pthread_mutex_lock(&lock);
  stopping = 1;
  atomic_store(&async_on, 0);
  int n = nactive;
  pthread_mutex_unlock(&lock);
  return n;
}

int jaxmpi_requests_in_flight(void) {
  pthread_mutex_lock(&lock);
  int n = nactive;
  pthread_mutex_unlock(&lock);
  return n;
}

/* Free a request MPI is done with. A collective the watchdog gave up on
 * may still read its counts: they stay allocated (its buffers are XLA's). */
static void req_free(jm_req *r) {
  /* A wait that never completed (its buffers moved, the start withdrawn). */
  jm_record_end(r->call.rec, JM_REC_FAILED);
  if (!(r->rc == JM_ERR_TIMEOUT && r->collective)) free(r->mem);
  /* After a failure MPI may still read or write the staging (a send left
   * to complete, a collective's chunks): it is never reused. */
  jm_cuda_stage_free(r->gpu, r->rc != 0);
  free(r);
}

/* ---- the table (callers hold `lock`) ------------------------------------ */

static int reserve(jm_req *r) {
  if (nactive >= JM_SLOTS) return -1;
  while (table[next_slot]) next_slot = (next_slot + 1) % JM_SLOTS;
  int s = next_slot;
  next_slot = (next_slot + 1) % JM_SLOTS;
  gens[s] = gens[s] % (JM_GENS - 1) + 1; /* 1 .. JM_GENS-1: never handle 0 */
  table[s] = r;
  active[nactive++] = s;
  r->slot = s;
  r->handle = gens[s] * JM_SLOTS + (uint32_t)s;
  r->state = R_STARTING;
  return 0;
}

static void release(jm_req *r) {
  table[r->slot] = NULL;
  for (int i = 0; i < nactive; i++)
    if (active[i] == r->slot) {
      active[i] = active[--nactive];
      break;
    }
}

/* ---- completion --------------------------------------------------------- */

/* The error of a completed request (NULL: success), and the receives'
 * checks (zeros for PROC_NULL, sizes). */
static XLA_FFI_Error *completed(jm_req *r) {
  jm_call *c = &r->call;
  if (r->rc == JM_ERR_TIMEOUT) {
    snprintf(r->what, sizeof r->what, "the wait of %s", r->fn);
    return jm_mpi_failure(c, r->what, r->peer_kind, r->peer, r->rc);
  }
  if (r->rc) {
    for (int k = 0; k < r->nreq; k++) {
      if (!jm_status_failed(&r->st[k])) continue;
      return jm_mpi_failure(c, k < r->nrecv ? "MPI_Wait (receive)"
                                            : r->fn,
                            r->peer_kind, r->peer, r->st[k].MPI_ERROR);
    }
    return jm_mpi_failure(c, r->fn, r->peer_kind, r->peer, r->rc);
  }
  for (int k = 0; k < r->nrecv; k++) {
    if (r->recv_ret[k] < 0) continue;
    XLA_FFI_Error *err = jm_check_received(c, &c->ret[r->recv_ret[k]], &r->st[k]);
    if (err) return err;
  }
  return NULL;
}

/* completed(), and the end of the wait's record. */
static XLA_FFI_Error *finish(jm_req *r) {
  XLA_FFI_Error *err = completed(r);
  jm_record_end(r->call.rec, err ? JM_REC_FAILED : JM_REC_DONE);
  return err;
}

/* Futures to complete, handed from the progress thread to the completion
 * thread (XLA runs the program's continuation on the completing thread). */
typedef struct jm_done {
  XLA_FFI_Future *future;
  XLA_FFI_Error *error;
  const XLA_FFI_Api *api;
  struct jm_done *next;
} jm_done;

static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcond = PTHREAD_COND_INITIALIZER;
static jm_done *qhead, *qtail;

static void complete_future(const XLA_FFI_Api *api, XLA_FFI_Future *f,
                            XLA_FFI_Error *err) {
  if (err) {
    XLA_FFI_Future_SetError_Args a;
    memset(&a, 0, sizeof a);
    a.struct_size = XLA_FFI_Future_SetError_Args_STRUCT_SIZE;
    a.future = f;
    a.error = err;
    XLA_FFI_Error *e = api->XLA_FFI_Future_SetError(&a);
    if (e) {
      XLA_FFI_Error_Destroy_Args d = {XLA_FFI_Error_Destroy_Args_STRUCT_SIZE,
                                      NULL, e};
      api->XLA_FFI_Error_Destroy(&d);
    }
    return;
  }
  XLA_FFI_Future_SetAvailable_Args a;
  memset(&a, 0, sizeof a);
  a.struct_size = XLA_FFI_Future_SetAvailable_Args_STRUCT_SIZE;
  a.future = f;
  XLA_FFI_Error *e = api->XLA_FFI_Future_SetAvailable(&a);
  if (e) {
    XLA_FFI_Error_Destroy_Args d = {XLA_FFI_Error_Destroy_Args_STRUCT_SIZE,
                                    NULL, e};
    api->XLA_FFI_Error_Destroy(&d);
  }
}

static void *completion_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&qlock);
  for (;;) {
    while (!qhead) pthread_cond_wait(&qcond, &qlock);
    jm_done *d = qhead;
    qhead = d->next;
    if (!qhead) qtail = NULL;
    pthread_mutex_unlock(&qlock);
    complete_future(d->api, d->future, d->error);
    free(d);
    pthread_mutex_lock(&qlock);
  }
  return NULL;
}

static void hand_over(jm_req *r, XLA_FFI_Error *err) {
  jm_done *d = malloc(sizeof *d);
  if (!d) { /* no memory for the queue item: complete it here */
    complete_future(r->api, r->future, err);
    return;
  }
  d->future = r->future;
  d->error = err;
  d->api = r->api;
  d->next = NULL;
  pthread_mutex_lock(&qlock);
  if (qtail)
    qtail->next = d;
  else
    qhead = d;
  qtail = d;
  pthread_cond_signal(&qcond);
  pthread_mutex_unlock(&qlock);
}

/* Poll without a pause at first (a message due any moment), then sleep a
 * little between polls so that the thread does not take a core from XLA's
 * computation while messages are long in coming. */
static void backoff(int64_t idle) {
  if (idle < 64) {
    sched_yield();
    return;
  }
  struct timespec ts = {0, idle < 4096 ? 20000L : 200000L};
  nanosleep(&ts, NULL);
}

/* Test one request (lock held); past a pending wait's deadline, cancel its
 * receives and complete it with the watchdog's error. */
static void poll_one(jm_req *r, double *now) {
  if (!r->complete) {
    int flag = 0;
    int rc = jm_mpi.Testall(r->nreq, r->reqs, &flag, r->st);
    if (rc) jm_settle(r->nreq, r->reqs, r->nrecv);
    if (rc || flag) {
      r->complete = 1;
      r->rc = rc;
    }
  }
  if (r->complete || r->state != R_WAITING || r->deadline <= 0) return;
  if (*now < 0) *now = jm_mpi.Wtime();
  if (*now <= r->deadline) return;
  jm_cancel_receives(r->nrecv, r->reqs);
  r->complete = 1;
  r->rc = JM_ERR_TIMEOUT;
}

static void *progress_main(void *arg) {
  (void)arg;
  jm_req *finished[JM_SLOTS];
  int64_t idle = 0;
  pthread_mutex_lock(&lock);
  for (;;) {
    while (nactive == 0 || stopping) {
      pthread_cond_wait(&work, &lock);
      idle = 0;
    }
    int nfinished = 0, progressed = 0;
    double now = -1;
    for (int i = 0; i < nactive; i++) {
      jm_req *r = table[active[i]];
      if (r->state == R_STARTING) continue;
      int was = r->complete;
      poll_one(r, &now);
      progressed |= r->complete != was;
      if (r->complete && r->state == R_WAITING) finished[nfinished++] = r;
    }
    for (int i = 0; i < nfinished; i++) release(finished[i]);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < nfinished; i++) {
      XLA_FFI_Error *err = finish(finished[i]);
      hand_over(finished[i], err);
      req_free(finished[i]);
    }
    if (atomic_exchange(&kicked, 0) || progressed) idle = 0;
    backoff(idle++);
    pthread_mutex_lock(&lock);
  }
  return NULL;
}

static void start_threads(void) {
  pthread_attr_t attr;
  pthread_t t;
  if (pthread_attr_init(&attr)) return;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  threads_ok = pthread_create(&t, &attr, completion_main, NULL) == 0 &&
               pthread_create(&t, &attr, progress_main, NULL) == 0;
  pthread_attr_destroy(&attr);
}

/* ---- starts ------------------------------------------------------------- */

static XLA_FFI_Error *begin(jm_call *c, jm_req **out, const char *fn,
                            const char *peer_kind, int peer) {
  jm_req *r = calloc(1, sizeof *r);
  if (!r)
    return jm_error(c, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                    "out of memory for a request");
  r->call = *c;
  r->call.frame = NULL;
  r->call.stream = NULL;
  for (size_t i = 0; i < sizeof r->call.arg / sizeof *r->call.arg; i++)
    r->call.arg[i].dims = NULL;
  for (size_t i = 0; i < sizeof r->call.ret / sizeof *r->call.ret; i++)
    r->call.ret[i].dims = NULL;
  for (int k = 0; k < 3; k++) {
    r->call.rows[k] = NULL; /* the frame's attributes: see the v-starts */
    r->call.nrows[k] = 0;
  }
  r->fn = fn;
  r->peer_kind = peer_kind;
  r->peer = peer;
  c->req = r;
  pthread_mutex_lock(&lock);
  int full = reserve(r);
  pthread_mutex_unlock(&lock);
  if (full) {
    free(r);
    c->req = NULL;
    return jm_error(c, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                    "%d requests are in flight on rank %d, the most jaxmpi "
                    "allows: wait some before starting more",
                    JM_SLOTS, c->rank);
  }
  *out = r;
  return NULL;
}

/* A buffer the wait must get. An empty one holds nothing MPI reads or
 * writes, and XLA may hand it to the wait at another address: NULL, any. */
static void keep(jm_req *r, const jm_buffer *b) {
  r->keep[r->nkeep++] = b->count ? b->data : NULL;
}

/* Undo a start whose MPI call failed: cancel what was posted (receives
 * must never write into buffers XLA reuses), free the slot. */
static XLA_FFI_Error *abandon(jm_call *c, jm_req *r, int rc) {
  /* A collective's chunks already posted are left pending: MPI forbids
   * cancelling or freeing them. */
  jm_cancel_receives(r->nrecv < r->nreq ? r->nrecv : r->nreq, r->reqs);
  if (!r->collective)
    for (int k = r->nrecv; k < r->nreq; k++) jm_mpi.Request_free(&r->reqs[k]);
  pthread_mutex_lock(&lock);
  release(r);
  pthread_mutex_unlock(&lock);
  XLA_FFI_Error *err = jm_mpi_failure(c, r->fn, r->peer_kind, r->peer, rc);
  req_free(r);
  return err;
}

/* Publish a posted request and write its handle into result 0. */
static XLA_FFI_Error *post(jm_call *c, jm_req *r, int rc, double t0) {
  if (jm_cfg.debug)
    jm_log(c, r->fn, r->peer_kind, r->peer, c->nargs ? c->arg[0].count : 0,
           c->nargs ? c->arg[0].dtype : -1, t0);
  if (rc) return abandon(c, r, rc);
  float h = (float)r->handle;
  memcpy(c->ret[0].data, &h, sizeof h);
  pthread_mutex_lock(&lock);
  r->state = R_POSTED;
  pthread_cond_signal(&work);
  pthread_mutex_unlock(&lock);
  return NULL;
}

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
  XLA_FFI_Error *err = begin(c, &r, "MPI_Isend", "dest", c->dest);
  if (err) return err;
  keep(r, x);
  double t0 = jm_log_start();
  int rc = jm_Isend(x->data, x->count, x->elsize, x->mpi, c->dest, c->tag,
                    c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return post(c, r, rc, t0);
}

XLA_FFI_Error *jm_run_irecv(jm_call *c) {
  jm_buffer *y = &c->ret[1];
  jm_req *r;
  XLA_FFI_Error *err = begin(c, &r, "MPI_Irecv", "source", c->source);
  if (err) return err;
  keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_Irecv(y->data, y->count, y->elsize, y->mpi, c->source, c->tag,
                    c->comm, &r->reqs[0]);
  r->nreq = r->nrecv = rc ? 0 : 1;
  r->recv_ret[0] = 1;
  return post(c, r, rc, t0);
}

XLA_FFI_Error *jm_run_isendrecv(jm_call *c) {
  jm_buffer *x = &c->ret[1], *y = &c->ret[2]; /* aliased to the arguments */
  JM_EXPECT(c, x->data != y->data || !x->count || !y->count,
            "the send and receive buffers must differ");
  jm_req *r;
  XLA_FFI_Error *err = begin(c, &r, "MPI_Irecv", "source", c->source);
  if (err) return err;
  keep(r, x);
  keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_Irecv(y->data, y->count, y->elsize, y->mpi, c->source,
                    c->recvtag, c->comm, &r->reqs[0]);
  if (rc) return post(c, r, rc, t0);
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
  return post(c, r, rc, t0);
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
  XLA_FFI_Error *err = begin(c, &r, fn, NULL, 0);
  if (err) return err;
  r->collective = 1;
  keep(r, y);
  const void *s = x->data == y->data && x->count ? jm_const.in_place : x->data;
  double t0 = jm_log_start();
  int rc = 0;
  JM_CHUNKS(r, x->count, x->elsize,
            call(offset(s, off, x->elsize),
                 jm_recv_ptr((void *)offset(y->data, off, x->elsize), m), cn,
                 x->mpi, c->op, c->comm, rq));
  return post(c, r, rc, t0);
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
  XLA_FFI_Error *err = begin(c, &r, "MPI_Ibcast", "root", c->root);
  if (err) return err;
  r->collective = 1;
  keep(r, y);
  double t0 = jm_log_start();
  int rc = 0;
  JM_CHUNKS(r, x->count, x->elsize,
            jm_mpi.Ibcast((void *)offset(y->data, off, x->elsize), cn, x->mpi,
                          c->root, c->comm, rq));
  return post(c, r, rc, t0);
}

XLA_FFI_Error *jm_run_ibarrier(jm_call *c) {
  jm_req *r;
  XLA_FFI_Error *err = begin(c, &r, "MPI_Ibarrier", NULL, 0);
  if (err) return err;
  double t0 = jm_log_start();
  int rc = jm_mpi.Ibarrier(c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return post(c, r, rc, t0);
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
  XLA_FFI_Error *err = begin(c, &r, "MPI_Ireduce", "root", c->root);
  if (err) return err;
  r->collective = 1;
  keep(r, y);
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
  return post(c, r, rc, t0);
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
  XLA_FFI_Error *err = begin(c, &r, "MPI_Igather", "root", c->root);
  if (err) return err;
  r->collective = 1;
  keep(r, x);
  if (root) keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_mpi.Igather(x->data, (int)x->count, x->mpi,
                          root ? y->data : NULL, (int)x->count, x->mpi,
                          c->root, c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return post(c, r, rc, t0);
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
  XLA_FFI_Error *err = begin(c, &r, "MPI_Iscatter", "root", c->root);
  if (err) return err;
  r->collective = 1;
  if (root) keep(r, x);
  keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_mpi.Iscatter(root ? x->data : NULL, (int)y->count, y->mpi,
                           y->data, (int)y->count, y->mpi, c->root, c->comm,
                           &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return post(c, r, rc, t0);
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
      begin(c, &r, gather ? "MPI_Iallgather" : "MPI_Ialltoall", NULL, 0);
  if (err) return err;
  r->collective = 1;
  keep(r, x);
  keep(r, y);
  double t0 = jm_log_start();
  int rc = gather ? jm_mpi.Iallgather(x->data, (int)block, x->mpi, y->data,
                                      (int)block, x->mpi, c->comm, &r->reqs[0])
                  : jm_mpi.Ialltoall(x->data, (int)block, x->mpi, y->data,
                                     (int)block, x->mpi, c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return post(c, r, rc, t0);
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
  XLA_FFI_Error *err = begin(c, &r, "MPI_Ireduce_scatter_block", NULL, 0);
  if (err) return err;
  r->collective = 1;
  keep(r, x);
  keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_mpi.Ireduce_scatter_block(x->data,
                                        jm_recv_ptr(y->data, y->count),
                                        (int)y->count, y->mpi, c->op, c->comm,
                                        &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return post(c, r, rc, t0);
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
  if (!err) err = begin(c, &r, "MPI_Ireduce_scatter", NULL, 0);
  if (err) {
    free(counts);
    return err;
  }
  r->collective = 1;
  r->mem = counts;
  keep(r, x);
  keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_mpi.Ireduce_scatter(x->data, jm_recv_ptr(y->data, y->count),
                                  ints, y->mpi, c->op, c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return post(c, r, rc, t0);
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
  XLA_FFI_Error *err = begin(c, r, fn, peer_kind, peer);
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
  keep(r, x);
  keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_mpi.Iallgatherv(send_ptr(x), (int)x->count, x->mpi,
                              jm_recv_ptr(y->data, y->count), ints,
                              ints + c->size, x->mpi, c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return post(c, r, rc, t0);
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
  keep(r, x);
  if (root) keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_mpi.Igatherv(send_ptr(x), (int)x->count, x->mpi,
                           root ? jm_recv_ptr(y->data, y->count) : NULL,
                           root ? ints : NULL, root ? ints + c->size : NULL,
                           x->mpi, c->root, c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return post(c, r, rc, t0);
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
  if (root) keep(r, x);
  keep(r, y);
  double t0 = jm_log_start();
  int rc = jm_mpi.Iscatterv(root ? send_ptr(x) : NULL, root ? ints : NULL,
                            root ? ints + c->size : NULL, y->mpi,
                            jm_recv_ptr(y->data, y->count), (int)y->count,
                            y->mpi, c->root, c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  return post(c, r, rc, t0);
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
  keep(r, x);
  keep(r, y);
  double t0 = jm_log_start();
  rc = jm_mpi.Ialltoallv(send_ptr(x), ints, ints + n, t,
                         jm_recv_ptr(y->data, y->count), ints + 2 * n,
                         ints + 3 * n, t, c->comm, &r->reqs[0]);
  r->nreq = rc ? 0 : 1;
  if (unit > 1) jm_mpi.Type_free(&t); /* MPI keeps it for the request */
  return post(c, r, rc, t0);
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
  XLA_FFI_Error *err = begin(c, &r, "MPI_Irecv", "source", 0);
  if (err) return err;
  for (int i = 0; i < n; i++) keep(r, &c->ret[1 + i]);
  for (int i = 0; i < n; i++) keep(r, &c->ret[1 + n + i]);
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
  if (rc) return post(c, r, rc, t0);
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
  return post(c, r, rc, t0);
}

/* ---- the wait ----------------------------------------------------------- */

static jm_call wait_call(const XLA_FFI_Api *api) {
  jm_call c;
  memset(&c, 0, sizeof c);
  c.api = api;
  c.opname = "wait";
  return c;
}

/* Whether a wait was handed the very buffers the request uses. */
static int same_buffers(const jm_req *r, void *const *bufs, int nbufs) {
  if (nbufs != r->nkeep) return 0;
  for (int i = 0; i < nbufs; i++)
    if (r->keep[i] && bufs[i] != r->keep[i]) return 0;
  return 1;
}

static XLA_FFI_Error *moved_error(jm_req *r) {
  return jm_error(&r->call, XLA_FFI_Error_Code_INTERNAL,
                  "the wait received other buffers than the request uses (XLA "
                  "copied one: the request's buffers must reach its wait "
                  "untouched; please report this with the program)");
}

static XLA_FFI_Error *no_request(jm_call *wc, float hv, int inflight) {
  return jm_error(wc, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                  "handle %.0f names no request in flight (a request "
                  "waited twice, or a handle made outside jaxmpi; %d in "
                  "flight)",
                  (double)hv, inflight);
}

/* Complete r in this thread (blocking, through the watchdog). */
static void complete_here(jm_req *r) {
  if (r->complete) return;
  double t0 = jm_log_start();
  r->rc = jm_waitall(r->nreq, r->reqs, r->st, r->nrecv);
  if (jm_cfg.debug) jm_log(&r->call, "MPI_Waitall", NULL, 0, r->nreq, -1, t0);
  r->complete = 1;
}

/* Complete r in this thread, free it. */
static XLA_FFI_Error *finish_here(jm_req *r) {
  complete_here(r);
  XLA_FFI_Error *err = finish(r);
  req_free(r);
  return err;
}

/* XLA:CPU has consumed futures asynchronously since jaxlib 0.4.34; the
 * Future_* entries of the API table sit after ThreadPool_NumThreads, which
 * was inserted into the table: trust them only in an API at least as new as
 * the header we were built with. */
static int api_has_futures(const XLA_FFI_Api *api) {
  return api->api_version.major_version == XLA_FFI_API_MAJOR &&
         api->api_version.minor_version >= XLA_FFI_API_MINOR &&
         api->struct_size >= offsetof(XLA_FFI_Api, XLA_FFI_Future_SetError) +
                                 sizeof(void *);
}

XLA_FFI_Error *jaxmpi_ffi_wait(XLA_FFI_CallFrame *frame) {
  if (jm_answer_metadata_query(frame)) return NULL;
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  const XLA_FFI_Api *api = frame->api;
  jm_call wc = wait_call(api);
  /* Argument 0 the handle; then the request's buffers; tokens skipped. */
  void *bufs[JM_MAX_REQS + 2];
  int nbufs = 0;
  float hv = -1;
  int have_handle = 0;
  for (int64_t i = 0; i < frame->args.size; i++) {
    XLA_FFI_Buffer *b = frame->args.args[i];
    if (frame->args.types[i] != XLA_FFI_ArgType_BUFFER ||
        b->dtype == XLA_FFI_DataType_TOKEN)
      continue;
    if (!have_handle) {
      if (b->dtype != XLA_FFI_DataType_F32 || b->rank != 0)
        return jm_error(&wc, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                        "argument 0 must be a request handle (float32 "
                        "scalar)");
      memcpy(&hv, b->data, sizeof hv);
      have_handle = 1;
      continue;
    }
    if (nbufs == JM_MAX_REQS + 2) break;
    bufs[nbufs++] = b->data;
  }
  uint32_t h = hv >= 1 && hv < (float)(JM_SLOTS * JM_GENS) ? (uint32_t)hv : 0;
  int slot = (int)(h % JM_SLOTS);
  pthread_mutex_lock(&lock);
  jm_req *r = h && (float)h == hv ? table[slot] : NULL;
  if (!r || r->handle != h || r->state != R_POSTED) {
    int n = nactive;
    pthread_mutex_unlock(&lock);
    return no_request(&wc, hv, n);
  }
  if (r->on_gpu) {
    pthread_mutex_unlock(&lock);
    return jm_error(&wc, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                    "a request started on the GPU is waited on the CPU");
  }
  r->state = R_WAITING;
  r->call.rec = jm_record_wait_of(&r->call); /* ends in finish, req_free */
  int moved = !same_buffers(r, bufs, nbufs);
  /* Over several devices a wait blocks in its handler: XLA runs the rest of
   * a program on the thread that completes its future, and with one
   * completion thread one position's next blocking call would hold up
   * another position's completion, which a peer may be waiting for
   * (tests/launch/test_devices.py hung so at 2 x 2 and 3 x 2). Each
   * device's thread then waits for its own requests only. */
  int async = !moved && !r->complete && atomic_load(&async_on) &&
              api_has_futures(api) && r->call.ndevices == 0;
  if (async) {
    /* One more test: a request complete by now needs no future. */
    double now = -1;
    poll_one(r, &now);
    async = !r->complete;
  }
  if (!async) {
    release(r);
    pthread_mutex_unlock(&lock);
    if (moved) {
      /* Complete it (MPI must be done with the buffers), then fail. */
      complete_here(r);
      XLA_FFI_Error *err = moved_error(r);
      req_free(r);
      return err;
    }
    return finish_here(r);
  }
  pthread_once(&threads_once, start_threads);
  if (!threads_ok) {
    release(r);
    pthread_mutex_unlock(&lock);
    return finish_here(r);
  }
  XLA_FFI_Future_Create_Args fa;
  memset(&fa, 0, sizeof fa);
  fa.struct_size = XLA_FFI_Future_Create_Args_STRUCT_SIZE;
  XLA_FFI_Error *ferr = api->XLA_FFI_Future_Create(&fa);
  if (ferr || !fa.future) {
    if (ferr) {
      XLA_FFI_Error_Destroy_Args d = {XLA_FFI_Error_Destroy_Args_STRUCT_SIZE,
                                      NULL, ferr};
      api->XLA_FFI_Error_Destroy(&d);
    }
    release(r);
    pthread_mutex_unlock(&lock);
    return finish_here(r);
  }
  r->future = fa.future;
  r->api = api;
  double limit = jm_watchdog_timeout();
  r->deadline = limit > 0 ? jm_mpi.Wtime() + limit : 0;
  frame->future = fa.future;
  atomic_store(&kicked, 1);
  pthread_mutex_unlock(&lock);
  return NULL;
}

/* ---- on the GPU ------------------------------------------------------------
 * A CUDA start (jm_cuda_istart) stages its buffers (cuda_staging.c: jaxmpi's
 * copy stream after an event of XLA's stream; synchronised only where the
 * start reads data), runs the same body as on the CPU on host pointers (or,
 * CUDA-aware, device pointers), and then writes the handle on XLA's stream.
 * It blocks XLA's thread only until the data it sends is on the host:
 * XLA enqueues the program's later kernels after it returns, and they run
 * while the message travels.
 *
 * The CUDA wait finds its request without reading the handle, which lives
 * in GPU memory behind the kernels enqueued since the start: by the device
 * addresses of the handle and of the buffers it is handed, which are the
 * start's results and stay where the start saw them (XLA keeps them alive
 * and in place until the wait; the CPU path relies on the same and checks
 * it). Only where that does not name exactly one request (a copied handle)
 * does it read the handle, synchronising XLA's stream. It then blocks until
 * MPI completes the request (the kernels already enqueued keep running) and
 * enqueues the copies back on jaxmpi's stream, XLA's stream waiting for
 * their event: XLA's thread goes on at once. XLA:GPU runs handlers
 * synchronously (no futures), so the wait blocks its thread as the CPU
 * path's blocking wait does. */

XLA_FFI_Error *jm_cuda_istart(jm_call *c, const jm_op_desc *desc) {
  jm_cuda_scope scope;
  jm_cuda_stage *st = NULL;
  XLA_FFI_Error *err = jm_cuda_enter(c, &scope);
  if (!err) err = jm_cuda_stage_start(c, desc, &scope, &st);
  if (err) return jm_cuda_leave(c, &scope, err);
  c->req = NULL;
  err = desc->run(c);
  jm_req *r = c->req;
  if (err) {
    /* Where a request was made (and freed), MPI may have been handed the
     * staging (a collective's chunks left pending): never reuse it. */
    jm_cuda_stage_free(st, r != NULL);
    return jm_cuda_leave(c, &scope, err);
  }
  pthread_mutex_lock(&lock);
  r->on_gpu = 1;
  r->gpu = st;
  r->gpu_handle = jm_cuda_stage_handle(st);
  for (int i = 0; i < r->nkeep; i++)
    r->keep[i] = jm_cuda_stage_device(st, r->keep[i]);
  pthread_mutex_unlock(&lock);
  err = jm_cuda_leave(c, &scope, jm_cuda_stage_posted(c, st));
  if (err) {
    /* No wait will come (the program fails): withdraw the request. The
     * table first, so that the progress thread no longer tests it. */
    pthread_mutex_lock(&lock);
    release(r);
    pthread_mutex_unlock(&lock);
    jm_cancel_receives(r->nrecv, r->reqs);
    if (!r->collective)
      for (int k = r->nrecv; k < r->nreq; k++) jm_mpi.Request_free(&r->reqs[k]);
    r->rc = JM_ERR_TIMEOUT; /* abandoned: its staging is never reused */
    req_free(r);
    return err;
  }
  /* The progress thread moves the message on while XLA's thread enqueues
   * work or waits for the GPU (it needs MPI_THREAD_MULTIPLE). */
  if (atomic_load(&async_on)) pthread_once(&threads_once, start_threads);
  return NULL;
}

/* The one GPU request in flight whose handle and buffers are at these
 * device addresses, or NULL (none, or more than one). Lock held. */
static jm_req *find_gpu(const void *handle, void *const *bufs, int nbufs) {
  jm_req *found = NULL;
  for (int i = 0; i < nactive; i++) {
    jm_req *r = table[active[i]];
    if (!r->on_gpu || r->state != R_POSTED || r->gpu_handle != handle ||
        !same_buffers(r, bufs, nbufs))
      continue;
    if (found) return NULL;
    found = r;
  }
  return found;
}

static XLA_FFI_Error *wait_gpu(jm_call *wc, const void *handle,
                               void *const *bufs, int nbufs,
                               void *const *results, int nresults) {
  pthread_mutex_lock(&lock);
  jm_req *r = find_gpu(handle, bufs, nbufs);
  if (!r) {
    /* Read the handle (after the GPU work before this wait). */
    pthread_mutex_unlock(&lock);
    float hv = -1;
    XLA_FFI_Error *err = jm_cuda_read_f32(wc, handle, &hv);
    if (err) return err;
    uint32_t h =
        hv >= 1 && hv < (float)(JM_SLOTS * JM_GENS) ? (uint32_t)hv : 0;
    pthread_mutex_lock(&lock);
    r = h && (float)h == hv ? table[h % JM_SLOTS] : NULL;
    if (!r || r->handle != h || r->state != R_POSTED) {
      int n = nactive;
      pthread_mutex_unlock(&lock);
      return no_request(wc, hv, n);
    }
  }
  if (!r->on_gpu) {
    pthread_mutex_unlock(&lock);
    return jm_error(wc, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                    "a request started on the CPU is waited on the GPU");
  }
  r->state = R_WAITING;
  r->call.rec = jm_record_wait_of(&r->call); /* ends in finish, req_free */
  int moved = !same_buffers(r, bufs, nbufs);
  release(r);
  pthread_mutex_unlock(&lock);
  r->call.stream = wc->stream; /* for the zeros of a PROC_NULL receive */
  complete_here(r);
  XLA_FFI_Error *err = moved ? moved_error(r) : finish(r);
  if (!err) err = jm_cuda_stage_finish(&r->call, r->gpu, results, nresults);
  req_free(r);
  return err;
}

XLA_FFI_Error *jaxmpi_ffi_wait_cuda(XLA_FFI_CallFrame *frame) {
  if (jm_answer_metadata_query(frame)) return NULL;
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  jm_call wc = wait_call(frame->api);
  wc.frame = frame;
  /* Argument 0 the handle; then the request's buffers; tokens skipped. */
  void *bufs[JM_MAX_REQS + 2], *results[JM_MAX_REQS + 2];
  int nbufs = 0, nresults = 0;
  const void *handle = NULL;
  for (int64_t i = 0; i < frame->args.size; i++) {
    XLA_FFI_Buffer *b = frame->args.args[i];
    if (frame->args.types[i] != XLA_FFI_ArgType_BUFFER ||
        b->dtype == XLA_FFI_DataType_TOKEN)
      continue;
    if (!handle) {
      if (b->dtype != XLA_FFI_DataType_F32 || b->rank != 0 || !b->data)
        return jm_error(&wc, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                        "argument 0 must be a request handle (float32 "
                        "scalar)");
      handle = b->data;
      continue;
    }
    if (nbufs == JM_MAX_REQS + 2) break;
    bufs[nbufs++] = b->data;
  }
  if (!handle)
    return jm_error(&wc, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                    "argument 0 must be a request handle (float32 scalar)");
  for (int64_t i = 0; i < frame->rets.size && nresults < JM_MAX_REQS + 2;
       i++) {
    XLA_FFI_Buffer *b = frame->rets.rets[i];
    if (frame->rets.types[i] != XLA_FFI_RetType_BUFFER ||
        b->dtype == XLA_FFI_DataType_TOKEN)
      continue;
    results[nresults++] = b->data;
  }
  jm_cuda_scope scope;
  XLA_FFI_Error *err = jm_cuda_enter(&wc, &scope);
  if (!err) err = wait_gpu(&wc, handle, bufs, nbufs, results, nresults);
  return jm_cuda_leave(&wc, &scope, err);
}
