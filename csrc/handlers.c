/* The top of the C core: the exported FFI handler of every row of ops.h
 * (generated from the table: the blocking ops, the starts and the wait),
 * and the one path every call takes (dispatch): decode the frame (ffi.c;
 * the wait also finds its request, wait.c), check the call across ranks
 * (check.c), run the op body (collectives.c, p2p.c, starts.c, wait.c) on
 * the host or for GPU buffers (cuda_staging.c, request_gpu.c), log. No
 * other file calls into this one. */
#include <stdatomic.h>
#include <stdio.h>

#include "check.h"
#include "cuda_staging.h"
#include "ffi.h"
#include "handlers.h"
#include "record_ops.h"
#include "request.h"

/* jaxmpi calls executed by this process (named in watchdog reports). */
static _Atomic int64_t calls_made;

/* Whether a call is compared across ranks before it runs: the collectives.
 * Point-to-point ops check what they receive instead (p2p.c, starts.c);
 * the wait has no communicator of its own. */
static int checked(const jm_op_desc *desc) {
  return (desc->attrs & JM_A(comm)) &&
         !(desc->attrs &
           (JM_A(source) | JM_A(dest) | JM_A(sources) | JM_A(dests)));
}

/* Every call of every op, blocking, start or wait, on either platform, comes
 * here: the one place that sees each call decoded (its op, communicator,
 * device position, peers, buffers, call site and number) before and after
 * it runs. */
static XLA_FFI_Error *dispatch(XLA_FFI_CallFrame *frame,
                               const jm_op_desc *desc, int on_gpu) {
  if (jm_answer_metadata_query(frame)) return NULL;
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  jm_call c;
  const int64_t callno =
      atomic_fetch_add_explicit(&calls_made, 1, memory_order_relaxed) + 1;
  XLA_FFI_Error *err = jm_decode(frame, desc, &c, on_gpu);
  c.callno = callno;
  if (!err && desc->bind) err = desc->bind(&c, on_gpu);
  if (err) return err;
  /* The flight recorder's entry (record.h): a blocking call's or a start's,
   * ended when the call returns; a wait's began when its request was found
   * (jm_wait_bind) and ends when the request completes (request.c), on
   * whichever thread completes it (an asynchronous wait returns first). */
  const int waits = desc->kind == JM_WAIT;
  if (!waits) c.rec = jm_record_op(&c, desc);
  double t0 = 0.0;
  if (jm_cfg.debug & JM_DEBUG_LOG) {
    t0 = jm_mpi.Wtime();
    jm_log_call(&c, NULL, t0, 1);
  }
  const int mode = jm_check_mode();
  if (mode && checked(desc)) err = jm_check_collective(&c, desc, mode);
  if (!err) err = on_gpu ? desc->gpu(&c, desc) : desc->run(&c);
  if (!waits) jm_record_end(c.rec, err ? JM_REC_FAILED : JM_REC_DONE);
  if (jm_cfg.debug & JM_DEBUG_LOG) jm_log_call(&c, err, t0, 0);
  return err;
}

XLA_FFI_Error *jm_dispatch(XLA_FFI_CallFrame *frame, const jm_op_desc *desc) {
  return dispatch(frame, desc, 0);
}

XLA_FFI_Error *jm_dispatch_cuda(XLA_FFI_CallFrame *frame,
                                const jm_op_desc *desc) {
  return dispatch(frame, desc, 1);
}

/* ---- exported handlers -------------------------------------------------- */

/* Two per row: jaxmpi_ffi_<op> for XLA:CPU, jaxmpi_ffi_<op>_cuda for XLA:GPU
 * (the same decoding and op body; `gpu` runs it for GPU buffers: a blocking
 * op's body staged, a start's into staging its request owns, the wait's
 * copies back), and the row's descriptor. */
#define JM_DEFINE_HANDLER(kind, gpu, bind, name, nargs, nrets, templates,      \
                          payload, attrs)                                      \
  static const jm_op_desc jm_desc_##name = {                                   \
      JM_OP_##name, kind,  #name,         nargs, nrets, templates, payload,    \
      attrs,        jm_run_##name,  gpu,  bind};                               \
  __attribute__((visibility("default"))) XLA_FFI_Error *jaxmpi_ffi_##name(     \
      XLA_FFI_CallFrame *frame) {                                              \
    return jm_dispatch(frame, &jm_desc_##name);                                \
  }                                                                            \
  __attribute__((visibility("default"))) XLA_FFI_Error                         \
      *jaxmpi_ffi_##name##_cuda(XLA_FFI_CallFrame *frame) {                    \
    return jm_dispatch_cuda(frame, &jm_desc_##name);                           \
  }
#define JM_BLOCKING_ROW(...)                                                   \
  JM_DEFINE_HANDLER(JM_BLOCKING, jm_cuda_run, NULL, __VA_ARGS__)
#define JM_START_ROW(...)                                                      \
  JM_DEFINE_HANDLER(JM_START, jm_cuda_istart, NULL, __VA_ARGS__)
#define JM_WAIT_ROW(...)                                                       \
  JM_DEFINE_HANDLER(JM_WAIT, jm_cuda_wait, jm_wait_bind, __VA_ARGS__)
JM_OPS(JM_BLOCKING_ROW)
JM_IOPS(JM_START_ROW)
JM_WAITS(JM_WAIT_ROW)
#undef JM_BLOCKING_ROW
#undef JM_START_ROW
#undef JM_WAIT_ROW
#undef JM_DEFINE_HANDLER

/* ---- eager calls ---------------------------------------------------------- */

/* The check of a collective that Python runs eagerly without XLA (the
 * direct path of _eager.py): the same count, digest and comparison as the
 * handler's, so that a rank calling eagerly and one running the compiled
 * op check the same calls with the same signatures. `op` is JM_OP_<name> of
 * a blocking collective, `x` its payload's XLA type and shape (ops.h).
 * Returns 0, or an XLA_FFI_Error_Code with the message in err. */
#define JM_DESC_PTR(name, nargs, nrets, templates, payload, attrs)             \
  &jm_desc_##name,
static const jm_op_desc *const blocking_descs[] = {JM_OPS(JM_DESC_PTR)};
#undef JM_DESC_PTR

__attribute__((visibility("default"))) int jaxmpi_check_eager(
    int op, uint64_t comm, uint64_t redop, int root, int dtype, int64_t ndim,
    const int64_t *dims, char *err, size_t errlen) {
  const int mode = jm_check_mode();
  if (!mode) return 0;
  if (op < 0 || op >= (int)(sizeof blocking_descs / sizeof *blocking_descs) ||
      dtype < 0 || dtype >= JM_NDTYPES || ndim < 0) {
    snprintf(err, errlen, "jaxmpi_check_eager: bad arguments (op %d)", op);
    return XLA_FFI_Error_Code_INVALID_ARGUMENT;
  }
  const jm_op_desc *desc = blocking_descs[op];
  jm_call c;
  memset(&c, 0, sizeof c);
  c.opname = desc->name;
  c.api = jm_capture_api();
  c.attrs = desc->attrs;
  c.comm = JM_HANDLE(jm_Comm, comm);
  c.op = JM_HANDLE(jm_Op, redop);
  c.root = root;
  jm_buffer *x = desc->payload == JM_OUT ? &c.ret[0] : &c.arg[0];
  *(desc->payload == JM_OUT ? &c.nrets : &c.nargs) =
      (desc->payload == JM_OUT ? desc->nrets : desc->nargs) != 0;
  x->dtype = dtype;
  x->elsize = jm_dtypes[dtype].size;
  x->ndim = ndim;
  x->dims = dims;
  x->count = 1;
  for (int64_t d = 0; d < ndim; d++) x->count *= dims[d];
  int rc = jm_mpi.Comm_rank(c.comm, &c.rank);
  if (rc == 0) rc = jm_mpi.Comm_size(c.comm, &c.size);
  XLA_FFI_Error *e =
      rc ? jm_mpi_failure(&c, "MPI_Comm_rank", NULL, 0, rc)
         : jm_check_collective(&c, desc, mode);
  return e ? jm_captured(e, err, errlen) : 0;
}

/* Joins a token the user passed to jaxmpi's order: a custom call taking the
 * user's token and the effect token, so that XLA:CPU's execution graph has an
 * edge from both (a bare stablehlo.after_all gives none). Does nothing and
 * touches no buffer, so it serves XLA:GPU too. */
__attribute__((visibility("default"))) XLA_FFI_Error *jaxmpi_ffi_join_token(
    XLA_FFI_CallFrame *frame) {
  jm_answer_metadata_query(frame);
  return NULL;
}
