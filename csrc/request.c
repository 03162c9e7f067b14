/* The table of requests in flight and its threads: see request.h. The
 * starts (starts.c) take a slot and publish their request here; the wait
 * (wait.c, request_gpu.c) claims one and completes it here or leaves it to
 * the progress thread. */
#define _POSIX_C_SOURCE 200809L
#include "request.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "cuda_staging.h"
#include "record_ops.h"
#include "watchdog.h"

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
void jm_req_free(jm_req *r) {
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
  r->state = JM_R_STARTING;
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

/* An error XLA's API returned where nothing can report it. */
static void drop_error(const XLA_FFI_Api *api, XLA_FFI_Error *e) {
  if (!e) return;
  XLA_FFI_Error_Destroy_Args d = {XLA_FFI_Error_Destroy_Args_STRUCT_SIZE, NULL,
                                  e};
  api->XLA_FFI_Error_Destroy(&d);
}

static void complete_future(const XLA_FFI_Api *api, XLA_FFI_Future *f,
                            XLA_FFI_Error *err) {
  if (err) {
    XLA_FFI_Future_SetError_Args a;
    memset(&a, 0, sizeof a);
    a.struct_size = XLA_FFI_Future_SetError_Args_STRUCT_SIZE;
    a.future = f;
    a.error = err;
    drop_error(api, api->XLA_FFI_Future_SetError(&a));
    return;
  }
  XLA_FFI_Future_SetAvailable_Args a;
  memset(&a, 0, sizeof a);
  a.struct_size = XLA_FFI_Future_SetAvailable_Args_STRUCT_SIZE;
  a.future = f;
  drop_error(api, api->XLA_FFI_Future_SetAvailable(&a));
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
  if (r->complete || r->state != JM_R_WAITING || r->deadline <= 0) return;
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
      if (r->state == JM_R_STARTING) continue;
      int was = r->complete;
      poll_one(r, &now);
      progressed |= r->complete != was;
      if (r->complete && r->state == JM_R_WAITING) finished[nfinished++] = r;
    }
    for (int i = 0; i < nfinished; i++) release(finished[i]);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < nfinished; i++) {
      XLA_FFI_Error *err = finish(finished[i]);
      hand_over(finished[i], err);
      jm_req_free(finished[i]);
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

/* ---- a start's request -------------------------------------------------- */

XLA_FFI_Error *jm_req_begin(jm_call *c, jm_req **out, const char *fn,
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

/* An empty buffer holds nothing MPI reads or writes, and XLA may hand it to
 * the wait at another address: NULL, any. */
void jm_req_keep(jm_req *r, const jm_buffer *b) {
  r->keep[r->nkeep++] = b->count ? b->data : NULL;
}

/* Cancel what was posted of a request no wait will complete (receives must
 * never write into buffers XLA reuses); a collective's requests are left
 * pending: MPI forbids cancelling or freeing them. The table first, so
 * that the progress thread no longer tests it. */
static void withdraw(jm_req *r) {
  pthread_mutex_lock(&lock);
  release(r);
  pthread_mutex_unlock(&lock);
  jm_cancel_receives(r->nrecv < r->nreq ? r->nrecv : r->nreq, r->reqs);
  if (!r->collective)
    for (int k = r->nrecv; k < r->nreq; k++) jm_mpi.Request_free(&r->reqs[k]);
}

XLA_FFI_Error *jm_req_post(jm_call *c, jm_req *r, int rc, double t0) {
  if (jm_cfg.debug)
    jm_log(c, r->fn, r->peer_kind, r->peer, c->nargs ? c->arg[0].count : 0,
           c->nargs ? c->arg[0].dtype : -1, t0);
  if (rc) { /* undo the start */
    withdraw(r);
    XLA_FFI_Error *err = jm_mpi_failure(c, r->fn, r->peer_kind, r->peer, rc);
    jm_req_free(r);
    return err;
  }
  float h = (float)r->handle;
  memcpy(c->ret[0].data, &h, sizeof h);
  pthread_mutex_lock(&lock);
  r->state = JM_R_POSTED;
  pthread_cond_signal(&work);
  pthread_mutex_unlock(&lock);
  return NULL;
}

void jm_req_withdraw(jm_req *r) {
  withdraw(r);
  r->rc = JM_ERR_TIMEOUT; /* abandoned: its staging is never reused */
  jm_req_free(r);
}

void jm_req_set_gpu(jm_req *r, jm_cuda_stage *st) {
  pthread_mutex_lock(&lock);
  r->on_gpu = 1;
  r->gpu = st;
  r->gpu_handle = jm_cuda_stage_handle(st);
  for (int i = 0; i < r->nkeep; i++)
    r->keep[i] = jm_cuda_stage_device(st, r->keep[i]);
  pthread_mutex_unlock(&lock);
}

void jm_req_progress(void) {
  if (atomic_load(&async_on)) pthread_once(&threads_once, start_threads);
}

/* ---- a wait's request --------------------------------------------------- */

jm_req *jm_req_claim(float hv, int on_gpu, int *inflight,
                     int *wrong_platform) {
  uint32_t h = hv >= 1 && hv < (float)(JM_SLOTS * JM_GENS) ? (uint32_t)hv : 0;
  pthread_mutex_lock(&lock);
  jm_req *r = h && (float)h == hv ? table[h % JM_SLOTS] : NULL;
  if (!r || r->handle != h || r->state != JM_R_POSTED) {
    *inflight = nactive;
    r = NULL;
  } else if (r->on_gpu != on_gpu) {
    *wrong_platform = 1;
    r = NULL;
  } else {
    r->state = JM_R_CLAIMED;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

void jm_req_unclaim(jm_req *r) {
  jm_record_end(r->call.rec, JM_REC_FAILED);
  r->call.rec = r->started;
  pthread_mutex_lock(&lock);
  r->state = JM_R_POSTED;
  pthread_mutex_unlock(&lock);
}

int jm_req_same_buffers(const jm_req *r, void *const *bufs, int nbufs) {
  if (nbufs != r->nkeep) return 0;
  for (int i = 0; i < nbufs; i++)
    if (r->keep[i] && bufs[i] != r->keep[i]) return 0;
  return 1;
}

jm_req *jm_req_claim_gpu(const void *handle, void *const *bufs, int nbufs) {
  jm_req *found = NULL;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < nactive; i++) {
    jm_req *r = table[active[i]];
    if (!r->on_gpu || r->state != JM_R_POSTED || r->gpu_handle != handle ||
        !jm_req_same_buffers(r, bufs, nbufs))
      continue;
    if (found) {
      found = NULL;
      break;
    }
    found = r;
  }
  if (found) found->state = JM_R_CLAIMED;
  pthread_mutex_unlock(&lock);
  return found;
}

/* Complete r in this thread (blocking, through the watchdog), and its
 * error: the wait's, where it received other buffers than the request
 * uses (XLA copied one: MPI wrote where nobody reads), else the
 * completion's. */
static XLA_FFI_Error *complete_here(jm_req *r, int moved) {
  if (!r->complete) {
    double t0 = jm_log_start();
    r->rc = jm_waitall(r->nreq, r->reqs, r->st, r->nrecv);
    if (jm_cfg.debug)
      jm_log(&r->call, "MPI_Waitall", NULL, 0, r->nreq, -1, t0);
    r->complete = 1;
  }
  if (moved)
    return jm_error(&r->call, XLA_FFI_Error_Code_INTERNAL,
                    "the wait received other buffers than the request uses "
                    "(XLA copied one: the request's buffers must reach its "
                    "wait untouched; please report this with the program)");
  return finish(r);
}

XLA_FFI_Error *jm_req_complete(jm_req *r, int moved) {
  pthread_mutex_lock(&lock);
  r->state = JM_R_WAITING;
  release(r);
  pthread_mutex_unlock(&lock);
  return complete_here(r, moved);
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

XLA_FFI_Error *jm_req_wait(jm_req *r, jm_call *wc, int moved) {
  const XLA_FFI_Api *api = wc->api;
  pthread_mutex_lock(&lock);
  r->state = JM_R_WAITING;
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
  if (async) {
    pthread_once(&threads_once, start_threads);
    async = threads_ok;
  }
  XLA_FFI_Future_Create_Args fa;
  memset(&fa, 0, sizeof fa);
  fa.struct_size = XLA_FFI_Future_Create_Args_STRUCT_SIZE;
  if (async) {
    XLA_FFI_Error *ferr = api->XLA_FFI_Future_Create(&fa);
    drop_error(api, ferr);
    async = !ferr && fa.future;
  }
  if (!async) {
    release(r);
    pthread_mutex_unlock(&lock);
    /* Moved: complete it (MPI must be done with the buffers), then fail. */
    XLA_FFI_Error *err = complete_here(r, moved);
    jm_req_free(r);
    return err;
  }
  r->future = fa.future;
  r->api = api;
  double limit = jm_watchdog_timeout();
  r->deadline = limit > 0 ? jm_mpi.Wtime() + limit : 0;
  wc->frame->future = fa.future;
  atomic_store(&kicked, 1);
  pthread_mutex_unlock(&lock);
  return NULL;
}
