/* The C entry points Python calls through ctypes (besides the FFI handlers
 * jaxmpi_ffi_<op> of handlers.c). All return 0 on success; on failure they write a
 * message into err. */
#ifndef JAXMPI_CORE_H
#define JAXMPI_CORE_H

#include <stddef.h>
#include <stdint.h>

#define JM_EXPORT __attribute__((visibility("default")))

JM_EXPORT const char *jaxmpi_abi(void);
JM_EXPORT int jaxmpi_sizeof_comm(void);
JM_EXPORT int jaxmpi_sizeof_status(void);
/* 1: the core has the GPU path (CUDA handlers jaxmpi_ffi_<op>_cuda). */
JM_EXPORT int jaxmpi_cuda_built(void);
/* Loads the CUDA driver if not yet tried: the number of visible GPUs, with a
 * description in msg, or -1 with the reason in msg. */
JM_EXPORT int jaxmpi_cuda_driver(char *msg, size_t len);
/* aware: hand device pointers to MPI (CUDA-aware MPI) instead of staging
 * through pinned host memory; cache_bytes: pinned memory kept between calls
 * (<= 0: the default, 512 MiB). */
JM_EXPORT void jaxmpi_cuda_configure(int aware, int64_t cache_bytes);
JM_EXPORT int jaxmpi_cuda_aware_mode(void);
/* Pinned staging memory held now, buffers allocated and freed so far. */
JM_EXPORT void jaxmpi_cuda_stats(int64_t *held_bytes, int64_t *allocs,
                                 int64_t *frees);

/* Bind to the MPI library already loaded by mpi4py (libpath may be NULL). */
JM_EXPORT int jaxmpi_bind(const char *libpath, char *err, size_t errlen);
JM_EXPORT int jaxmpi_library_version(char *buf, size_t len);
JM_EXPORT const char *jaxmpi_library_path(void);
/* 1/0 if the MPI reports CUDA-awareness (MPIX_Query_cuda_support), else -1. */
JM_EXPORT int jaxmpi_mpi_cuda_aware(void);
/* 1 if the library has the MPI-4 large-count calls. */
JM_EXPORT int jaxmpi_has_large_count(void);

/* dtype_handles[XLA dtype] is the MPI datatype handle, or 0 for none;
 * in_place is MPI_IN_PLACE's address (mpi4py's int(MPI.IN_PLACE)). */
JM_EXPORT int jaxmpi_configure(const uint64_t *dtype_handles, int ndtypes,
                               uint64_t byte_handle, uint64_t in_place,
                               int any_source, int any_tag, int proc_null,
                               int undefined, int debug, int64_t count_limit,
                               int use_large_count, char *err, size_t errlen);

/* Our reduction op for float16/bfloat16 (kind: 0 sum, 1 prod, 2 max, 3 min). */
JM_EXPORT int jaxmpi_half_op(int dtype, int kind, uint64_t *out);

/* Communicator shadows (shadow.h), once at configuration. */
JM_EXPORT int jaxmpi_shadow_init(char *err, size_t errlen);
/* Reliability switches (any time): cross-rank checks (mode 0: off, 1: the
 * sparse default, 2: every call), and the deadlock watchdog's timeout in
 * seconds (0: off). */
JM_EXPORT void jaxmpi_set_check(int mode);
JM_EXPORT int jaxmpi_get_check(void);
/* 1 if the default mode checks a communicator's n-th collective. */
JM_EXPORT int jaxmpi_check_scheduled(int64_t n);
JM_EXPORT int jaxmpi_check_name_op(uint64_t op, const char *name);
/* MPI_ERR_TRUNCATE's and MPI_ERR_PENDING's classes (mpi4py's MPI.ERR_*). */
JM_EXPORT void jaxmpi_set_error_classes(int truncate, int pending);
/* Python source lines of calls (named by the watchdog and the debug log):
 * register `text` under `id` (the `site` attribute of the lowered call). */
JM_EXPORT int jaxmpi_register_site(int64_t id, const char *text);
JM_EXPORT int jaxmpi_site_text(int64_t id, char *out, size_t len);
JM_EXPORT void jaxmpi_set_timeout(double seconds);
/* The trace's spans of the MPI calls inside each call (JAXMPI_TRACE): on
 * the debug log's path (ffi.c, jm_log). */
JM_EXPORT void jaxmpi_trace_inner(int on);
JM_EXPORT double jaxmpi_get_timeout(void);

/* The op table and constants, for Python's agreement check at import. */
JM_EXPORT int jaxmpi_op_row(int i, const char **name, int *nargs, int *nrets,
                            unsigned *templates, unsigned *attrs, int *kind);
JM_EXPORT int jaxmpi_attr_row(int i, const char **name, int *is_array);
JM_EXPORT int jaxmpi_max_buffers(void);
JM_EXPORT int jaxmpi_ndtypes(void);
JM_EXPORT int jaxmpi_dtype_size(int code);

#endif
