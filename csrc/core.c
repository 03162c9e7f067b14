#include "core.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "cuda_staging.h"
#include "ffi.h"
#include "halfops.h"
#include "shadow.h"
#include "watchdog.h"

const char *jaxmpi_abi(void) { return JM_ABI_NAME; }
int jaxmpi_sizeof_comm(void) { return (int)sizeof(jm_Comm); }
int jaxmpi_sizeof_status(void) { return (int)sizeof(jm_Status); }
int jaxmpi_cuda_built(void) { return 1; }

int jaxmpi_cuda_driver(char *msg, size_t len) { return jm_cuda_driver(msg, len); }
void jaxmpi_cuda_configure(int aware, int64_t cache_bytes) {
  jm_cuda_configure(aware, cache_bytes > 0 ? (size_t)cache_bytes : 0);
}
int jaxmpi_cuda_aware_mode(void) { return jm_cuda_aware(); }
void jaxmpi_cuda_stats(int64_t *held_bytes, int64_t *allocs, int64_t *frees) {
  size_t held;
  long a, f;
  jm_cuda_stats(&held, &a, &f);
  *held_bytes = (int64_t)held;
  *allocs = a;
  *frees = f;
}

int jaxmpi_bind(const char *libpath, char *err, size_t errlen) {
  return jm_mpi_bind(libpath, err, errlen);
}

int jaxmpi_library_version(char *buf, size_t len) {
  char v[8192] = "";
  int n = 0;
  if (!jm_mpi.Get_library_version) return -1;
  int rc = jm_mpi.Get_library_version(v, &n);
  snprintf(buf, len, "%s", v);
  return rc;
}

const char *jaxmpi_library_path(void) { return jm_mpi_library_path(); }
int jaxmpi_mpi_cuda_aware(void) { return jm_mpi_cuda_aware(); }

int jaxmpi_has_large_count(void) {
  return jm_mpi.Allreduce_c && jm_mpi.Reduce_c && jm_mpi.Scan_c &&
         jm_mpi.Bcast_c && jm_mpi.Gather_c && jm_mpi.Scatter_c &&
         jm_mpi.Allgather_c && jm_mpi.Alltoall_c && jm_mpi.Send_c &&
         jm_mpi.Recv_c && jm_mpi.Sendrecv_c;
}

int jaxmpi_configure(const uint64_t *dtype_handles, int ndtypes,
                     uint64_t byte_handle, uint64_t in_place, int any_source,
                     int any_tag, int proc_null, int undefined, int debug,
                     int64_t count_limit, int use_large_count, char *err,
                     size_t errlen) {
  if (!jm_mpi.Comm_rank) {
    snprintf(err, errlen, "jaxmpi_configure called before jaxmpi_bind");
    return -1;
  }
  if (count_limit < 2 || count_limit > INT_MAX) count_limit = INT_MAX;
  jm_const.any_source = any_source;
  jm_const.any_tag = any_tag;
  jm_const.proc_null = proc_null;
  jm_const.undefined = undefined;
  jm_const.byte = JM_HANDLE(jm_Datatype, byte_handle);
  jm_const.in_place = (void *)(uintptr_t)in_place;
  jm_count.limit = count_limit;
  jm_count.use_c = use_large_count;
  jm_cfg.debug = debug;
  for (int i = 0; i < ndtypes && i < JM_NDTYPES; i++) {
    if (!dtype_handles[i] || !jm_dtypes[i].size) continue;
    jm_dtypes[i].mpi = JM_HANDLE(jm_Datatype, dtype_handles[i]);
    jm_dtypes[i].has_mpi = 1;
  }
  jm_Datatype f16, bf16;
  int rc = jm_half_init(&f16, &bf16);
  if (rc) {
    snprintf(err, errlen, "creating the float16/bfloat16 MPI types and ops "
                          "failed (MPI error %d)", rc);
    return -1;
  }
  jm_dtypes[XLA_FFI_DataType_F16].mpi = f16;
  jm_dtypes[XLA_FFI_DataType_F16].has_mpi = 1;
  jm_dtypes[XLA_FFI_DataType_BF16].mpi = bf16;
  jm_dtypes[XLA_FFI_DataType_BF16].has_mpi = 1;
  return 0;
}

int jaxmpi_half_op(int dtype, int kind, uint64_t *out) {
  jm_Op op;
  if (jm_half_op(dtype, kind, &op)) return -1;
  *out = JM_U64(op);
  return 0;
}

int jaxmpi_shadow_init(char *err, size_t errlen) {
  return jm_shadow_init(err, errlen);
}
void jaxmpi_set_check(int mode) { jm_check_set(mode); }
int jaxmpi_get_check(void) { return jm_check_mode(); }
int jaxmpi_check_scheduled(int64_t n) { return jm_check_scheduled(n); }
int jaxmpi_check_name_op(uint64_t op, const char *name) {
  return jm_check_name_op(JM_HANDLE(jm_Op, op), name);
}
void jaxmpi_set_error_classes(int truncate, int pending) {
  jm_const.err_truncate = truncate;
  jm_const.err_pending = pending;
}
int jaxmpi_register_site(int64_t id, const char *text) {
  return jm_site_register(id, text);
}
int jaxmpi_site_text(int64_t id, char *out, size_t len) {
  jm_site_text(id, out, len);
  return len && out[0] ? 0 : -1;
}
void jaxmpi_set_timeout(double seconds) { jm_watchdog_set(seconds); }
void jaxmpi_trace_inner(int on) {
  jm_cfg.debug = (jm_cfg.debug & ~JM_DEBUG_TRACE) | (on ? JM_DEBUG_TRACE : 0);
}
double jaxmpi_get_timeout(void) { return jm_watchdog_timeout(); }

/* ---- the op table, for Python's agreement check (_core.check_table) ----- */

typedef struct jm_table_row {
  const char *name;
  int nargs, nrets;
  unsigned templates, attrs;
  int kind; /* JM_BLOCKING, JM_START or JM_WAIT */
} jm_table_row;

#define JM_ROW(kind, name, nargs, nrets, templates, payload, attrs)           \
  {#name, nargs, nrets, templates, attrs, kind},
#define JM_BLOCKING_ROW(...) JM_ROW(JM_BLOCKING, __VA_ARGS__)
#define JM_START_ROW(...) JM_ROW(JM_START, __VA_ARGS__)
#define JM_WAIT_ROW(...) JM_ROW(JM_WAIT, __VA_ARGS__)
static const jm_table_row table[] = {
    JM_OPS(JM_BLOCKING_ROW) JM_IOPS(JM_START_ROW) JM_WAITS(JM_WAIT_ROW)};
#undef JM_ROW
#undef JM_BLOCKING_ROW
#undef JM_START_ROW
#undef JM_WAIT_ROW

#define JM_ATTR_ROW(name, type) {#name, JM_ATTR_IS_##type},
#define JM_ATTR_IS_SCALAR 0
#define JM_ATTR_IS_ARRAY 1
static const struct {
  const char *name;
  int is_array;
} attr_table[] = {JM_ATTRS(JM_ATTR_ROW)};
#undef JM_ATTR_ROW

/* Row i of the op table (ops.h: blocking ops, starts, the wait); -1 past its
 * end. */
int jaxmpi_op_row(int i, const char **name, int *nargs, int *nrets,
                  unsigned *templates, unsigned *attrs, int *kind) {
  if (i < 0 || i >= JM_NOPS) return -1;
  *name = table[i].name;
  *nargs = table[i].nargs;
  *nrets = table[i].nrets;
  *templates = table[i].templates;
  *attrs = table[i].attrs;
  *kind = table[i].kind;
  return 0;
}

/* Attribute i (bit i of a row's attrs); -1 past the end. */
int jaxmpi_attr_row(int i, const char **name, int *is_array) {
  if (i < 0 || i >= JM_NATTRS) return -1;
  *name = attr_table[i].name;
  *is_array = attr_table[i].is_array;
  return 0;
}

int jaxmpi_max_buffers(void) { return JM_MAX_BUFFERS; }
int jaxmpi_ndtypes(void) { return JM_NDTYPES; }
/* Bytes of XLA element type `code` (0 where jaxmpi does not support it). */
int jaxmpi_dtype_size(int code) {
  return code >= 0 && code < JM_NDTYPES ? (int)jm_dtypes[code].size : -1;
}
