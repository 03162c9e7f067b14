/* Non-blocking operations on the GPU: the starts' and the wait's bodies for
 * XLA:GPU's frames (desc->gpu of their rows). See request.h.
 *
 * A CUDA start (jm_cuda_istart) stages its buffers (cuda_staging.c: jaxmpi's
 * copy stream after an event of XLA's stream; synchronised only where the
 * start reads data), runs the same body as on the CPU on host pointers (or,
 * CUDA-aware, device pointers), and then writes the handle on XLA's stream.
 * It blocks XLA's thread only until the data it sends is on the host:
 * XLA enqueues the program's later kernels after it returns, and they run
 * while the message travels.
 *
 * The CUDA wait, its request found by addresses (wait.c), blocks until MPI
 * completes the request (the kernels already enqueued keep running) and
 * enqueues the copies back on jaxmpi's stream, XLA's stream waiting for
 * their event: XLA's thread goes on at once. XLA:GPU runs handlers
 * synchronously (no futures), so the wait blocks its thread as the CPU
 * path's blocking wait does. */
#include "cuda_staging.h"
#include "request.h"

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
  jm_req_set_gpu(r, st);
  err = jm_cuda_leave(c, &scope, jm_cuda_stage_posted(c, st));
  if (err) {
    jm_req_withdraw(r); /* no wait will come: the program fails */
    return err;
  }
  /* The progress thread moves the message on while XLA's thread enqueues
   * work or waits for the GPU (it needs MPI_THREAD_MULTIPLE). */
  jm_req_progress();
  return NULL;
}

XLA_FFI_Error *jm_cuda_wait(jm_call *c, const jm_op_desc *desc) {
  (void)desc;
  jm_req *r = c->req;
  void *bufs[JM_MAX_BUFFERS], *results[JM_MAX_BUFFERS];
  int nbufs = 0;
  for (int i = 1; i < c->nargs; i++) bufs[nbufs++] = c->arg[i].data;
  for (int i = 0; i < c->nrets; i++) results[i] = c->ret[i].data;
  jm_cuda_scope scope;
  XLA_FFI_Error *err = jm_cuda_enter(c, &scope);
  if (err) {
    jm_req_unclaim(r); /* the wait failed before it began: it may be retried */
    return jm_cuda_leave(c, &scope, err);
  }
  const int moved = !jm_req_same_buffers(r, bufs, nbufs);
  r->call.stream = c->stream; /* for the zeros of a PROC_NULL receive */
  err = jm_req_complete(r, moved);
  if (!err) err = jm_cuda_stage_finish(&r->call, r->gpu, results, c->nrets);
  jm_req_free(r);
  return jm_cuda_leave(c, &scope, err);
}
