/* The top of the C core (handlers.c): the exported FFI handlers. */
#ifndef JAXMPI_HANDLERS_H
#define JAXMPI_HANDLERS_H

#include "ffi.h"

/* Decode the frame, check, run the op, and report: every handler is one of
 * these, for a frame of XLA:CPU or of XLA:GPU (buffers in GPU memory, run
 * by desc->gpu). */
XLA_FFI_Error *jm_dispatch(XLA_FFI_CallFrame *frame, const jm_op_desc *desc);
XLA_FFI_Error *jm_dispatch_cuda(XLA_FFI_CallFrame *frame,
                                const jm_op_desc *desc);

#endif
