/* Non-blocking operations: a table of requests in flight, the wait handler
 * (an XLA FFI asynchronous handler), and the threads that complete them.
 *
 * A start handler (jaxmpi_ffi_i<op>, ops.h JM_IOPS) posts the MPI_I* calls,
 * records them in a slot of the table and returns the slot's handle as a
 * float32 scalar: gen * JM_SLOTS + slot, an integer below 2^24, so exact in
 * float32. (A float, not an int, because JAX gives integer values float0
 * tangents that carry nothing; a float handle lets a tangent request travel
 * with its primal through autodiff.) The start also records the data
 * pointer of every buffer its wait must receive, in the wait's order.
 *
 * jaxmpi_ffi_wait(handle, buffers..., token) checks the handle and that XLA
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
 * On the GPU (jm_cuda_istart, jaxmpi_ffi_wait_cuda; request.c's last
 * section says how) the request also owns its pinned staging until the
 * wait, and the wait, which XLA:GPU cannot hand a future, blocks its
 * thread until MPI completes while the GPU goes on with the kernels
 * already enqueued. */
#ifndef JAXMPI_REQUEST_H
#define JAXMPI_REQUEST_H

#include "core.h"
#include "ffi.h"

#define JM_SLOTS 4096 /* requests in flight at once, per process */
#define JM_GENS 4096  /* handle generations: JM_SLOTS * JM_GENS <= 2^24 */
#define JM_MAX_REQS (2 * JM_MAX_BUFFERS)

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

/* The wait's FFI handlers: XLA:CPU's and XLA:GPU's. */
JM_EXPORT XLA_FFI_Error *jaxmpi_ffi_wait(XLA_FFI_CallFrame *frame);
JM_EXPORT XLA_FFI_Error *jaxmpi_ffi_wait_cuda(XLA_FFI_CallFrame *frame);

/* A start's body (desc->run) for a call whose buffers are GPU memory:
 * staged (or CUDA-aware), then the handle written on XLA's stream. */
XLA_FFI_Error *jm_cuda_istart(jm_call *c, const jm_op_desc *desc);

#endif
