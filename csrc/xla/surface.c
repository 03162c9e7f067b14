/* The surface of jaxmpi's MPI layer for XLA: jaxmpi/_xla_mpi.so, the
 * library MPITRAMPOLINE_LIB names. It defines every symbol of the table in
 * abi.h (functions, constants, versions), holds no MPI and no state but the
 * attached table of the C core's native calls, and is the same for every
 * MPI family: what depends on the MPI is in the core (native.c), which
 * `jaxmpi.distributed` attaches when jax.distributed.initialize() runs.
 * Nothing here is written per function: the rows are expanded below. */
#define _POSIX_C_SOURCE 200809L

#include "abi.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define JM_EXPORT __attribute__((visibility("default")))

/* ---- state: the attached calls, and each thread's last message --------- */

static _Atomic(const jm_xla_calls *) attached;
static _Thread_local char message[JM_XLA_MAX_ERROR_STRING];
static _Thread_local int message_code;

static int fail(int code, const char *fmt, const char *name) {
  snprintf(message, sizeof message, fmt, name);
  message_code = code;
  return code;
}

/* A function of the ABI that XLA's MPI collectives never call. */
static int unserved(const char *name) {
  return fail(JM_XLA_ERR_UNSERVED,
              "jaxmpi: %s is not provided by jaxmpi's MPI layer for XLA, "
              "which serves the calls of XLA's MPI collectives only "
              "(docs/native.md); use jaxmpi's operations or mpi4py for it",
              name);
}

/* A call XLA makes before jaxmpi attached its core: the library was named
 * in MPITRAMPOLINE_LIB by hand, or jax.distributed.initialize() was not
 * run through jaxmpi. */
static int detached(const char *name) {
  return fail(JM_XLA_ERR_DETACHED,
              "jaxmpi: %s was called before jaxmpi's MPI layer for XLA was "
              "attached: start the program with `python -m "
              "jaxmpi.distributed` (or JAXMPI_DISTRIBUTED=1) and call "
              "jax.distributed.initialize() before any computation",
              name);
}

static const jm_xla_calls *calls(void) {
  return atomic_load_explicit(&attached, memory_order_acquire);
}

/* ---- constants ---------------------------------------------------------- */

/* POINTER constants point into this array (index 0 unused: NULL). */
JM_EXPORT const unsigned char jaxmpi_xla_sentinels[JM_XLA_N_SENTINELS] = {0};

static int callback_stub(void) { return unserved("an MPI callback"); }

/* (Names are pasted at the first expansion: some, like SEEK_SET, are also
 * the C library's macros.) */
#define JM_CONST_INT(sym, value) JM_EXPORT const int sym = (value);
#define JM_CONST_HANDLE(sym, value) JM_EXPORT const jm_xla_handle sym = (value);
#define JM_CONST_OFFSET(sym, value) JM_EXPORT const int64_t sym = (value);
#define JM_CONST_POINTER(sym, value)                                           \
  JM_EXPORT const void *const sym =                                            \
      (value) ? (const void *)&jaxmpi_xla_sentinels[(value)] : NULL;
#define JM_CONST_FUNCTION(sym, value)                                          \
  JM_EXPORT int (*const sym)(void) = callback_stub;
#define JM_DEFINE_CONSTANT(name, kind, value)                                  \
  JM_CONST_##kind(MPIABI_##name, value)
JM_XLA_CONSTANTS(JM_DEFINE_CONSTANT)

JM_EXPORT const int mpiabi_version_major = JM_XLA_ABI_MAJOR;
JM_EXPORT const int mpiabi_version_minor = JM_XLA_ABI_MINOR;
JM_EXPORT const int mpiabi_version_patch = JM_XLA_ABI_PATCH;
JM_EXPORT const int mpiwrapper_version_major = JM_XLA_LAYER_MAJOR;
JM_EXPORT const int mpiwrapper_version_minor = JM_XLA_LAYER_MINOR;
JM_EXPORT const int mpiwrapper_version_patch = JM_XLA_LAYER_PATCH;

/* The trampoline calls it once, with no arguments, to export Fortran
 * constants: there is no Fortran here. */
JM_EXPORT void mpiwrapper_export_fortran_constants_(void) {}

/* ---- functions ---------------------------------------------------------- */

/* Unserved ones take no parameters: the caller's arguments are ignored
 * (they are passed in registers and on the caller's stack, which the
 * caller pops). */
#define JM_DEFINE_STUB(sym, text)                                              \
  JM_EXPORT int sym(void) { return unserved(text); }
#define JM_DEFINE_STUBH(sym, text)                                             \
  JM_EXPORT jm_xla_handle sym(void) {                                          \
    unserved(text);                                                            \
    return 0;                                                                  \
  }
#define JM_DEFINE_CORE(sym, text)    /* below, from JM_XLA_CORE_CALLS */
#define JM_DEFINE_SURFACE(sym, text) /* below, by hand */
#define JM_DEFINE_FUNCTION(name, how)                                          \
  JM_DEFINE_##how(MPIABI_##name, "MPI_" #name)
JM_XLA_FUNCTIONS(JM_DEFINE_FUNCTION)

#define JM_DEFINE_CORE_CALL(ret, name, params, args)                           \
  JM_EXPORT ret MPIABI_##name params {                                         \
    const jm_xla_calls *c = calls();                                           \
    return c ? c->name args : detached("MPI_" #name);                          \
  }
JM_XLA_CORE_CALLS(JM_DEFINE_CORE_CALL)

/* Every function the table marks SURFACE is defined here, and every CORE
 * row has its signature in JM_XLA_CORE_CALLS (a missing one is a link-time
 * reference to an undefined MPIABI_ symbol: the check below). */
#define JM_CHECK_CORE(sym) (void *)&sym,
#define JM_CHECK_SURFACE(sym) (void *)&sym,
#define JM_CHECK_STUB(sym)
#define JM_CHECK_STUBH(sym)
#define JM_CHECK_FUNCTION(name, how) JM_CHECK_##how(MPIABI_##name)

JM_EXPORT int MPIABI_Error_string(int code, char *text, int *len) {
  const char *m = NULL;
  char generic[96];
  if (code == message_code && message[0]) {
    m = message;
  } else if (code == JM_XLA_ERR_NATIVE && calls()) {
    return calls()->error_string(code, text, len);
  } else if (code == JM_XLA_SUCCESS) {
    m = "no error";
  } else {
    snprintf(generic, sizeof generic,
             "jaxmpi: MPI error code %d (jaxmpi's MPI layer for XLA)", code);
    m = generic;
  }
  size_t n = strlen(m);
  if (n > JM_XLA_MAX_ERROR_STRING - 1) n = JM_XLA_MAX_ERROR_STRING - 1;
  memcpy(text, m, n);
  text[n] = '\0';
  *len = (int)n;
  return JM_XLA_SUCCESS;
}

JM_EXPORT int MPIABI_Error_class(int code, int *cls) {
  *cls = code == JM_XLA_SUCCESS           ? JM_XLA_SUCCESS
         : code == JM_XLA_ERR_UNSERVED    ? JM_XLA_ERR_UNSUPPORTED_OPERATION
         : code > 0 && code < JM_XLA_ERR_NATIVE ? code
                                                : JM_XLA_ERR_OTHER;
  return JM_XLA_SUCCESS;
}

JM_EXPORT double MPIABI_Wtime(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

JM_EXPORT double MPIABI_Wtick(void) {
  struct timespec t;
  clock_getres(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

JM_EXPORT jm_xla_aint MPIABI_Aint_add(jm_xla_aint base, jm_xla_aint disp) {
  return (jm_xla_aint)((uintptr_t)base + (uintptr_t)disp);
}

JM_EXPORT jm_xla_aint MPIABI_Aint_diff(jm_xla_aint a, jm_xla_aint b) {
  return (jm_xla_aint)((uintptr_t)a - (uintptr_t)b);
}

#define JM_DEFINE_XFUNCTION(name, how)                                         \
  JM_EXPORT int MPIXABI_##name(void) { return 0; }
JM_XLA_XFUNCTIONS(JM_DEFINE_XFUNCTION)

static void *const served[] = {JM_XLA_FUNCTIONS(JM_CHECK_FUNCTION) NULL};

/* ---- for jaxmpi (ctypes) ------------------------------------------------ */

/* Attach the core's native calls (NULL detaches). Returns 0, or -1 if the
 * core was built from another version of the table. */
JM_EXPORT int jaxmpi_xla_attach(const jm_xla_calls *c) {
  if (c && c->version != JM_XLA_CALLS_VERSION) return -1;
  atomic_store_explicit(&attached, c, memory_order_release);
  return 0;
}

JM_EXPORT int jaxmpi_xla_attached(void) { return calls() != NULL; }

/* Rows of the table, for jaxmpi's checks: kind 0 function (how: 0 CORE,
 * 1 SURFACE, 2 STUB, 3 STUBH), 1 MPIX function, 2 constant (how: 0 INT,
 * 1 HANDLE, 2 OFFSET, 3 POINTER, 4 FUNCTION; value: its value, for
 * POINTER the sentinel's index). Returns -1 past the last row. */
enum { HOW_CORE, HOW_SURFACE, HOW_STUB, HOW_STUBH };
enum { KIND_INT, KIND_HANDLE, KIND_OFFSET, KIND_POINTER, KIND_FUNCTION };
typedef struct row {
  const char *name;
  int kind, how;
  int64_t value;
} row;
#define JM_ROW_FUNCTION(name, how) {"MPIABI_" #name, 0, HOW_##how, 0},
#define JM_ROW_XFUNCTION(name, how) {"MPIXABI_" #name, 1, HOW_SURFACE, 0},
#define JM_ROW_CONSTANT(name, kind, value)                                     \
  {"MPIABI_" #name, 2, KIND_##kind, (value)},
static const row rows[] = {JM_XLA_FUNCTIONS(JM_ROW_FUNCTION)
                               JM_XLA_XFUNCTIONS(JM_ROW_XFUNCTION)
                                   JM_XLA_CONSTANTS(JM_ROW_CONSTANT)};

JM_EXPORT int jaxmpi_xla_row(int i, const char **name, int *kind, int *how,
                             int64_t *value) {
  if (i < 0 || i >= (int)(sizeof rows / sizeof rows[0])) return -1;
  *name = rows[i].name;
  *kind = rows[i].kind;
  *how = rows[i].how;
  *value = rows[i].value;
  return 0;
}

/* The number of functions served (CORE or SURFACE), counted in `served`
 * (read, not only measured with sizeof: clang's -Wunneeded-internal-
 * declaration, an error in the release build with Zig's cc, flags an
 * array only measured). */
JM_EXPORT int jaxmpi_xla_served(void) {
  int n = 0;
  while (served[n]) n++;
  return n;
}
