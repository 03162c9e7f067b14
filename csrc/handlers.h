/* The top of the C core (handlers.c): the exported FFI handlers. */
#ifndef JAXMPI_HANDLERS_H
#define JAXMPI_HANDLERS_H

#include "ffi.h"

/* Decode the frame, check, run the op, and report. Every CPU handler is
 * this. */
XLA_FFI_Error *jm_dispatch(XLA_FFI_CallFrame *frame, const jm_op_desc *desc);
/* The same for a frame of XLA:GPU (buffers in GPU memory): every CUDA
 * handler is this (cuda_staging.c moves the data). */
XLA_FFI_Error *jm_dispatch_cuda(XLA_FFI_CallFrame *frame,
                                const jm_op_desc *desc);
/* A non-blocking start's CUDA handler (request.c stages its buffers). */
XLA_FFI_Error *jm_dispatch_cuda_start(XLA_FFI_CallFrame *frame,
                                      const jm_op_desc *desc);

#endif
