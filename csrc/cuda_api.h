/* The few CUDA driver API facts jaxmpi uses, declared in our own words so
 * that the core builds with no CUDA header or toolkit. The driver API's C ABI
 * is stable: these types and the versioned symbol names below (the _v2 ones
 * are what cuda.h maps the plain names to since CUDA 3.2/4.0) hold for every
 * driver that runs a supported jaxlib. The functions are looked up with
 * dlsym in libcuda.so.1 at the first GPU call (cuda_staging.c), so the same
 * build runs on machines with and without a GPU. */
#ifndef JAXMPI_CUDA_API_H
#define JAXMPI_CUDA_API_H

#include <stddef.h>

typedef int CUresult; /* an enum in cuda.h: int-sized */
#define JM_CUDA_SUCCESS 0

typedef unsigned long long CUdeviceptr; /* 64-bit since the _v2 API */
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream; /* the same object as cudaStream_t */
typedef struct CUevent_st *CUevent;

#define JM_CU_MEMHOSTALLOC_PORTABLE 0x01 /* pinned for every context */
#define JM_CU_EVENT_DISABLE_TIMING 0x02
#define JM_CU_STREAM_NON_BLOCKING 0x01 /* no implicit sync with stream 0 */

/* X(field, symbol, parameters): the table jm_cu of cuda_staging.c. */
#define JM_CUDA_FUNCTIONS(X)                                                   \
  X(Init, "cuInit", (unsigned int flags))                                      \
  X(DriverGetVersion, "cuDriverGetVersion", (int *version))                    \
  X(DeviceGetCount, "cuDeviceGetCount", (int *count))                          \
  X(GetErrorString, "cuGetErrorString", (CUresult error, const char **text))   \
  X(GetErrorName, "cuGetErrorName", (CUresult error, const char **text))       \
  X(CtxGetCurrent, "cuCtxGetCurrent", (CUcontext * ctx))                       \
  X(CtxPushCurrent, "cuCtxPushCurrent_v2", (CUcontext ctx))                    \
  X(CtxPopCurrent, "cuCtxPopCurrent_v2", (CUcontext * ctx))                    \
  X(StreamGetCtx, "cuStreamGetCtx", (CUstream stream, CUcontext * ctx))        \
  X(StreamSynchronize, "cuStreamSynchronize", (CUstream stream))               \
  X(MemHostAlloc, "cuMemHostAlloc",                                            \
    (void **host, size_t bytes, unsigned int flags))                           \
  X(MemFreeHost, "cuMemFreeHost", (void *host))                                \
  X(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2",                                   \
    (void *dst, CUdeviceptr src, size_t bytes, CUstream stream))               \
  X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2",                                   \
    (CUdeviceptr dst, const void *src, size_t bytes, CUstream stream))         \
  X(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2",                                   \
    (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream))         \
  X(MemsetD8Async, "cuMemsetD8Async",                                          \
    (CUdeviceptr dst, unsigned char value, size_t n, CUstream stream))         \
  X(MemsetD32Async, "cuMemsetD32Async",                                        \
    (CUdeviceptr dst, unsigned int value, size_t n, CUstream stream))          \
  X(StreamCreate, "cuStreamCreate", (CUstream * stream, unsigned int flags))   \
  X(StreamWaitEvent, "cuStreamWaitEvent",                                      \
    (CUstream stream, CUevent event, unsigned int flags))                      \
  X(EventCreate, "cuEventCreate", (CUevent * event, unsigned int flags))       \
  X(EventRecord, "cuEventRecord", (CUevent event, CUstream stream))            \
  X(EventSynchronize, "cuEventSynchronize", (CUevent event))                   \
  X(EventDestroy, "cuEventDestroy_v2", (CUevent event))

#define JM_CUDA_FIELD(field, symbol, params) CUresult(*field) params;
typedef struct jm_cu_api {
  JM_CUDA_FUNCTIONS(JM_CUDA_FIELD)
} jm_cu_api;
#undef JM_CUDA_FIELD

#endif
