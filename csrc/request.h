/* Non-blocking operations: a table of requests in flight (request.c), the
 * starts (starts.c), the wait (wait.c), and their GPU path (request_gpu.c).
 *
 * A start handler (jaxmpi_ffi_i<op>, ops.h JM_IOPS) posts the MPI_I* calls,
 * records them in a slot of the table and returns the slot's handle as a
 * float32 scalar: gen * JM_SLOTS + slot, an integer below 2^24, so exact in
 * float32. (A float, not an int, because JAX gives integer values float0
 * tangents that carry nothing; a float handle lets a tangent request travel
 * with its primal through autodiff.) The start also records the data
 * pointer of every buffer its wait must receive, in the wait's order.
 *
 * The wait (jaxmpi_ffi_wait, ops.h JM_WAITS) takes the handle and the
 * request's buffers; decoding it finds its request (jm_wait_bind), so the
 * call names the request it completes before it runs. It checks that XLA
 * handed it the very buffers the request uses (a copy would mean MPI writes
 * where nobody reads: an error, never a silent wrong result). A request
 * already complete finishes at once; otherwise the handler creates an
 * XLA_FFI_Future, leaves it with the request and returns, so XLA:CPU keeps
 * running independent work. The progress thread tests every request in
 * flight (MPI progress while XLA computes) and hands finished waits to the
 * completion thread, which completes their futures: XLA runs the rest of the
 * program on the thread that completes a future, and that must not stall
 * the progress of other requests.
 *
 * Without MPI_THREAD_MULTIPLE (or after jaxmpi_set_async(0)) no thread is
 * started and the wait blocks in the handler, as the blocking ops do.
 *
 * On the GPU (jm_cuda_istart, jm_cuda_wait; request_gpu.c says how) the
 * request also owns its pinned staging until the wait, and the wait, which
 * XLA:GPU cannot hand a future, blocks its thread until MPI completes while
 * the GPU goes on with the kernels already enqueued. */
#ifndef JAXMPI_REQUEST_H
#define JAXMPI_REQUEST_H

#include "core.h"
#include "cuda_staging.h"
#include "ffi.h"

#define JM_SLOTS 4096 /* requests in flight at once, per process */
#define JM_GENS 4096  /* handle generations: JM_SLOTS * JM_GENS <= 2^24 */
#define JM_MAX_REQS (2 * JM_MAX_BUFFERS)

/* A request's life in the table: being started, posted (its handle out),
 * claimed by a wait being decoded, waited (complete, or a future pending). */
enum { JM_R_STARTING = 1, JM_R_POSTED, JM_R_CLAIMED, JM_R_WAITING };

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
  jm_record_ref started;     /* the start's record, kept while a wait's is
                                in call.rec (claimed: see jm_wait_bind) */
} jm_req;

/* ---- the table (request.c) ------------------------------------------------ */

/* Asynchronous waits on/off (on needs MPI_THREAD_MULTIPLE: the progress
 * thread calls MPI while XLA's threads do). */
JM_EXPORT void jaxmpi_set_async(int on);
JM_EXPORT int jaxmpi_get_async(void);
/* Requests started and not yet waited. */
JM_EXPORT int jaxmpi_requests_in_flight(void);

/* Before MPI_Finalize: the progress thread stops calling MPI (and waits
 * block in their handlers from then on). Returns the requests still in
 * flight (never waited). */
JM_EXPORT int jaxmpi_requests_shutdown(void);

/* A start's request for call c (c->req set), reserved in the table (state
 * JM_R_STARTING); `fn`, `peer_kind`, `peer` name the MPI call for messages.
 * An error where the table is full. */
XLA_FFI_Error *jm_req_begin(jm_call *c, jm_req **out, const char *fn,
                            const char *peer_kind, int peer);
/* A buffer the wait must get. */
void jm_req_keep(jm_req *r, const jm_buffer *b);
/* After the start's MPI calls (rc: the first failure, or 0): publish the
 * request and write its handle into result 0, or undo the start (what was
 * posted cancelled, the slot freed) and return MPI's error. t0: the debug
 * log's start time of the calls. */
XLA_FFI_Error *jm_req_post(jm_call *c, jm_req *r, int rc, double t0);

/* The posted request of `handle` (a handle's float value), claimed for a
 * wait (JM_R_CLAIMED), or NULL with the number in flight in *inflight.
 * `on_gpu`: the waiting handler's platform, which must be the start's
 * (else *wrong_platform is set and the request stays posted). */
jm_req *jm_req_claim(float handle, int on_gpu, int *inflight,
                     int *wrong_platform);
/* A claimed request posted again (its wait failed before it began: the
 * wait's record ends failed, the start's is the request's again). */
void jm_req_unclaim(jm_req *r);
/* The one posted GPU request whose handle and buffers are at these device
 * addresses, claimed; NULL where none, or more than one, is. */
jm_req *jm_req_claim_gpu(const void *handle, void *const *bufs, int nbufs);
/* Whether a wait was handed the very buffers the request uses. */
int jm_req_same_buffers(const jm_req *r, void *const *bufs, int nbufs);

/* The wait of a claimed request on XLA:CPU: finished here (blocking, through
 * the watchdog) and freed, or left to the progress thread with a future set
 * on the wait's frame (NULL returned). `moved`: the wait received other
 * buffers than the request uses; it completes the request (MPI must be
 * done with them), then fails. */
XLA_FFI_Error *jm_req_wait(jm_req *r, jm_call *wc, int moved);
/* Complete a claimed request in this thread (blocking, through the
 * watchdog), off the table, not freed; the completion's error (the
 * receives' checks, or `moved`'s as above). */
XLA_FFI_Error *jm_req_complete(jm_req *r, int moved);
/* Free a request MPI is done with (its staging never reused after a
 * failure); a wait's record that never ended ends failed (its buffers
 * moved, the start withdrawn). */
void jm_req_free(jm_req *r);
/* A GPU start that no wait will come for (its program fails): withdrawn
 * from the table, its receives cancelled, its staging never reused. */
void jm_req_withdraw(jm_req *r);
/* A started request's GPU facts, once its body posted it (request_gpu.c). */
void jm_req_set_gpu(jm_req *r, jm_cuda_stage *st);
/* Start the progress thread where asynchronous waits are on (a GPU start:
 * MPI moves the message on while XLA's thread waits for the GPU). */
void jm_req_progress(void);

/* ---- the wait (wait.c) and the GPU path (request_gpu.c) ------------------ */

/* The wait's bind step (ops.h's wait row): its request, found by its handle
 * (XLA:CPU) or by the device addresses of its handle and buffers (XLA:GPU),
 * claimed and in c->req, its start's call in c->of; c names the request's
 * communicator, rank and size from then on. The wait's record (c->rec,
 * also the request's call.rec until the request completes) begins here. */
XLA_FFI_Error *jm_wait_bind(jm_call *c, int on_gpu);

/* A start's body (desc->run) for a call whose buffers are GPU memory:
 * staged (or CUDA-aware), then the handle written on XLA's stream. */
XLA_FFI_Error *jm_cuda_istart(jm_call *c, const jm_op_desc *desc);
/* The wait of a GPU request: MPI completed in this thread, the staged
 * results copied back on jaxmpi's stream, XLA's stream waiting for them. */
XLA_FFI_Error *jm_cuda_wait(jm_call *c, const jm_op_desc *desc);

#endif
