/* The wait (ops.h's wait row): finding the request a wait completes, when
 * its call is decoded (jm_wait_bind), and its body on XLA:CPU (jm_run_wait;
 * on XLA:GPU, request_gpu.c's jm_cuda_wait). See request.h. */
#include <string.h>

#include "cuda_staging.h"
#include "record_ops.h"
#include "request.h"

/* The request's buffers a wait was handed: its arguments after the
 * handle. */
static int wait_buffers(const jm_call *c, void **bufs) {
  int n = 0;
  for (int i = 1; i < c->nargs; i++) bufs[n++] = c->arg[i].data;
  return n;
}

static XLA_FFI_Error *no_request(jm_call *c, float hv, int inflight) {
  return jm_error(c, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                  "handle %.0f names no request in flight (a request "
                  "waited twice, or a handle made outside jaxmpi; %d in "
                  "flight)",
                  (double)hv, inflight);
}

/* The handle's value: read from the host (XLA:CPU), or from GPU memory
 * after the work XLA's stream holds now (synchronising it). */
static XLA_FFI_Error *read_handle(jm_call *c, int on_gpu, float *hv) {
  if (!on_gpu) {
    memcpy(hv, c->arg[0].data, sizeof *hv);
    return NULL;
  }
  jm_cuda_scope scope;
  XLA_FFI_Error *err = jm_cuda_enter(c, &scope);
  if (!err) err = jm_cuda_read_f32(c, c->arg[0].data, hv);
  return jm_cuda_leave(c, &scope, err);
}

/* A GPU wait finds its request without reading the handle, which lives in
 * GPU memory behind the kernels enqueued since the start: by the device
 * addresses of the handle and of the buffers it is handed, which are the
 * start's results and stay where the start saw them (XLA keeps them alive
 * and in place until the wait; the CPU path relies on the same and checks
 * it). Only where that does not name exactly one request (a copied handle)
 * does it read the handle. */
XLA_FFI_Error *jm_wait_bind(jm_call *c, int on_gpu) {
  if (c->nargs < 1 || c->arg[0].dtype != XLA_FFI_DataType_F32 ||
      c->arg[0].ndim != 0 || (on_gpu && !c->arg[0].data))
    return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                    "argument 0 must be a request handle (float32 scalar)");
  void *bufs[JM_MAX_BUFFERS];
  const int nbufs = wait_buffers(c, bufs);
  jm_req *r = on_gpu ? jm_req_claim_gpu(c->arg[0].data, bufs, nbufs) : NULL;
  float hv = -1;
  int inflight = 0, wrong_platform = 0;
  if (!r) {
    XLA_FFI_Error *err = read_handle(c, on_gpu, &hv);
    if (err) return err;
    r = jm_req_claim(hv, on_gpu, &inflight, &wrong_platform);
  }
  if (wrong_platform)
    return jm_error(c, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                    on_gpu ? "a request started on the CPU is waited on the GPU"
                           : "a request started on the GPU is waited on the "
                             "CPU");
  if (!r) return no_request(c, hv, inflight);
  /* From here the wait's call names its request: the start's communicator
   * (the debug log's rank and size). */
  c->req = r;
  c->of = &r->call;
  c->comm = r->call.comm;
  c->rank = r->call.rank;
  c->size = r->call.size;
  /* The wait's record, from the start's numbers (record_ops.h): carried by
   * the request's call, whose failures and MPI calls name it, until the
   * request completes (request.c ends it, on whichever thread). */
  r->started = r->call.rec;
  c->rec = r->call.rec = jm_record_wait_of(&r->call);
  return NULL;
}

XLA_FFI_Error *jm_run_wait(jm_call *c) {
  void *bufs[JM_MAX_BUFFERS];
  const int nbufs = wait_buffers(c, bufs);
  jm_req *r = c->req;
  return jm_req_wait(r, c, !jm_req_same_buffers(r, bufs, nbufs));
}
