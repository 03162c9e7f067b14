/* The top of the C core: the exported FFI handler of every op in ops.h
 * (generated from the table), and what each does: decode the frame
 * (ffi.c), check the call across ranks (check.c), run the op body
 * (collectives.c, p2p.c, request.c) on the host or through the GPU
 * staging (cuda_staging.c), log. No other file calls into this one. */
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

/* How a decoded call runs: on the host, or for GPU buffers (a blocking
 * op's body staged, or a start's). */
typedef XLA_FFI_Error *jm_runner(jm_call *c, const jm_op_desc *desc);

static XLA_FFI_Error *run_host(jm_call *c, const jm_op_desc *desc) {
  return desc->run(c);
}

static XLA_FFI_Error *dispatch(XLA_FFI_CallFrame *frame,
                               const jm_op_desc *desc, jm_runner *run) {
  if (jm_answer_metadata_query(frame)) return NULL;
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  jm_call c;
  const int64_t callno =
      atomic_fetch_add_explicit(&calls_made, 1, memory_order_relaxed) + 1;
  XLA_FFI_Error *err = jm_decode(frame, desc, &c, run != run_host);
  c.callno = callno;
  if (err) return err;
  /* The flight recorder's entry (record.h), ended when the call returns. */
  c.rec = jm_record_op(&c, desc);
  double t0 = 0.0;
  if (jm_cfg.debug & JM_DEBUG_LOG) {
    t0 = jm_mpi.Wtime();
    jm_log_call(&c, NULL, t0, 1);
  }
  /* Point-to-point ops check what they receive instead (p2p.c). */
  err = NULL;
  const int mode = jm_check_mode();
  if (mode &&
      !(desc->attrs &
        (JM_A(source) | JM_A(dest) | JM_A(sources) | JM_A(dests))))
    err = jm_check_collective(&c, desc, mode);
  if (!err) err = run(&c, desc);
  jm_record_end(c.rec, err ? JM_REC_FAILED : JM_REC_DONE);
  if (jm_cfg.debug & JM_DEBUG_LOG) jm_log_call(&c, err, t0, 0);
  return err;
}

XLA_FFI_Error *jm_dispatch(XLA_FFI_CallFrame *frame, const jm_op_desc *desc) {
  return dispatch(frame, desc, run_host);
}

XLA_FFI_Error *jm_dispatch_cuda(XLA_FFI_CallFrame *frame,
                                const jm_op_desc *desc) {
  return dispatch(frame, desc, jm_cuda_run);
}

XLA_FFI_Error *jm_dispatch_cuda_start(XLA_FFI_CallFrame *frame,
                                      const jm_op_desc *desc) {
  return dispatch(frame, desc, jm_cuda_istart);
}

/* ---- exported handlers -------------------------------------------------- */

/* Two per op: jaxmpi_ffi_<op> for XLA:CPU, jaxmpi_ffi_<op>_cuda for XLA:GPU
 * (the same decoding and op body; cuda_staging.c moves the data). */
#define JM_DEFINE_HANDLER(name, nargs, nrets, templates, attrs)                \
  static const jm_op_desc jm_desc_##name = {                                  \
      JM_OP_##name, #name, nargs, nrets, templates, attrs, jm_run_##name};    \
  __attribute__((visibility("default"))) XLA_FFI_Error *jaxmpi_ffi_##name(     \
      XLA_FFI_CallFrame *frame) {                                              \
    return jm_dispatch(frame, &jm_desc_##name);                                \
  }                                                                            \
  __attribute__((visibility("default"))) XLA_FFI_Error                         \
      *jaxmpi_ffi_##name##_cuda(XLA_FFI_CallFrame *frame) {                    \
    return jm_dispatch_cuda(frame, &jm_desc_##name);                           \
  }
JM_OPS(JM_DEFINE_HANDLER)
#undef JM_DEFINE_HANDLER

/* Non-blocking starts, likewise two each: the CUDA one stages into pinned
 * memory that the request owns until its wait (request.c). */
#define JM_DEFINE_START_HANDLER(name, nargs, nrets, templates, attrs)          \
  static const jm_op_desc jm_desc_##name = {                                  \
      JM_OP_##name, #name, nargs, nrets, templates, attrs, jm_run_##name};    \
  __attribute__((visibility("default"))) XLA_FFI_Error *jaxmpi_ffi_##name(     \
      XLA_FFI_CallFrame *frame) {                                              \
    return jm_dispatch(frame, &jm_desc_##name);                                \
  }                                                                            \
  __attribute__((visibility("default"))) XLA_FFI_Error                         \
      *jaxmpi_ffi_##name##_cuda(XLA_FFI_CallFrame *frame) {                    \
    return jm_dispatch_cuda_start(frame, &jm_desc_##name);                     \
  }
JM_IOPS(JM_DEFINE_START_HANDLER)
#undef JM_DEFINE_START_HANDLER

/* ---- eager calls ---------------------------------------------------------- */

/* The check of a collective that Python runs eagerly without XLA (the
 * direct path of _eager.py): the same count, digest and comparison as the
 * handler's, so that a rank calling eagerly and one running the compiled
 * op check the same calls with the same signatures. `op` is JM_OP_<name> of
 * a blocking collective, `x` its array argument's XLA type and shape.
 * Returns 0, or an XLA_FFI_Error_Code with the message in err. */
#define JM_DESC_PTR(name, nargs, nrets, templates, attrs) &jm_desc_##name,
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
  c.nargs = desc->nargs > 0;
  c.arg[0].dtype = dtype;
  c.arg[0].elsize = jm_dtypes[dtype].size;
  c.arg[0].ndim = ndim;
  c.arg[0].dims = dims;
  c.arg[0].count = 1;
  for (int64_t d = 0; d < ndim; d++) c.arg[0].count *= dims[d];
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
