/* The GPU path: every CUDA handler runs the op's host body (collectives.c,
 * p2p.c) around XLA's CUDA stream. By default the data is staged through
 * pinned host buffers: the buffers the op reads are copied device->host on
 * XLA's stream, the stream is synchronised, the body runs on host pointers,
 * and the results are copied host->device on the stream. In CUDA-aware mode
 * (jm_cuda_configure) the body gets the device pointers after the stream is
 * synchronised. The CUDA driver is loaded with dlopen at the first GPU call;
 * no CUDA header or library is needed to build. */
#ifndef JAXMPI_CUDA_STAGING_H
#define JAXMPI_CUDA_STAGING_H

#include <stddef.h>

#include "cuda_api.h"
#include "ffi.h"

/* What op bodies use instead of memcpy/memset on a call's buffers, which
 * are GPU memory when c->on_device. */
XLA_FFI_Error *jm_copy(jm_call *c, void *dst, const void *src, size_t bytes);
XLA_FFI_Error *jm_zero(jm_call *c, void *dst, size_t bytes);

/* Run desc's body for a decoded call whose buffers are GPU memory. */
XLA_FFI_Error *jm_cuda_run(jm_call *c, const jm_op_desc *desc);

/* Device-to-device copy and zero fill on the call's stream, completed before
 * they return (the CUDA-aware mode's jm_copy and jm_zero). */
XLA_FFI_Error *jm_cuda_copy(jm_call *c, void *dst, const void *src,
                            size_t bytes);
XLA_FFI_Error *jm_cuda_zero(jm_call *c, void *dst, size_t bytes);

/* Load the driver if not yet tried. Returns the number of visible GPUs and
 * describes the driver in msg, or -1 with the reason in msg. */
int jm_cuda_driver(char *msg, size_t len);

/* aware: pass device pointers to MPI. cache_bytes: pinned staging memory
 * kept for reuse between calls (0: the default). Any time. */
void jm_cuda_configure(int aware, size_t cache_bytes);
int jm_cuda_aware(void);

/* Staging statistics: pinned bytes held now (idle and in use), buffers
 * allocated and freed since start. */
void jm_cuda_stats(size_t *held_bytes, long *allocs, long *frees);

/* Use `fns` instead of libcuda.so.1 (test harnesses without a GPU); must be
 * called before the first GPU call. */
void jm_cuda_use(const jm_cu_api *fns);

#endif
