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

/* Entering a GPU handler: XLA's stream of the call into c->stream, its
 * context made current (pushed if it was not). Leaving: the context popped;
 * returns err, or the pop's error if there was none. Call leave also after
 * a failed enter. */
typedef struct jm_cuda_scope {
  CUcontext ctx;
  int pushed;
} jm_cuda_scope;
XLA_FFI_Error *jm_cuda_enter(jm_call *c, jm_cuda_scope *scope);
XLA_FFI_Error *jm_cuda_leave(jm_call *c, jm_cuda_scope *scope,
                             XLA_FFI_Error *err);

/* ---- non-blocking operations (request.c) ---------------------------------
 * A start's staging, owned by its request until the wait: one pinned buffer
 * holding a piece per distinct device buffer of the start. */
typedef struct jm_cuda_stage jm_cuda_stage;

/* Before a start's body runs (inside jm_cuda_enter): jaxmpi's copy stream
 * waits for an event recorded on XLA's stream, copies the buffers the start
 * reads device->host and is synchronised (only where there is something to
 * read); c's buffers then point into the staging, result 0 (the handle) at
 * a float of the stage. CUDA-aware mode: XLA's stream is synchronised and
 * the device pointers stay (c->on_device), but the handle's. */
XLA_FFI_Error *jm_cuda_stage_start(jm_call *c, const jm_op_desc *desc,
                                   const jm_cuda_scope *scope,
                                   jm_cuda_stage **out);
/* The device buffer whose staging starts at `host` (NULL for NULL and for an
 * empty buffer's placeholder): what the wait must be handed. */
void *jm_cuda_stage_device(const jm_cuda_stage *st, const void *host);
/* The device address of the start's handle result. */
void *jm_cuda_stage_handle(const jm_cuda_stage *st);
/* After the body posted the request: the handle written to the device (on
 * XLA's stream). */
XLA_FFI_Error *jm_cuda_stage_posted(jm_call *c, jm_cuda_stage *st);
/* At the wait, after MPI completed the request: copy back the staged
 * buffers among `results` (the wait's result buffers, device pointers) on
 * jaxmpi's copy stream, XLA's stream (c->stream) waiting for them. */
XLA_FFI_Error *jm_cuda_stage_finish(jm_call *c, jm_cuda_stage *st,
                                    void *const *results, int nresults);
/* Give the staging back to the cache, or never reuse it (`abandon`: MPI
 * may still read or write it). */
void jm_cuda_stage_free(jm_cuda_stage *st, int abandon);

/* A float32 scalar in GPU memory, read after the work XLA's stream
 * (c->stream) holds now (synchronises it). */
XLA_FFI_Error *jm_cuda_read_f32(jm_call *c, const void *dev, float *out);

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
