/* A communicator's shadow: a private duplicate of a user's communicator,
 * made on first use and cached on it as an attribute (MPI frees it with the
 * communicator). Messages jaxmpi adds of its own (the cross-rank checks'
 * signatures, the pairwise in-place alltoall) travel on the shadow, so they
 * can never match the user's. Making it is collective: every rank asks for
 * it at the same call of its program. */
#ifndef JAXMPI_SHADOW_H
#define JAXMPI_SHADOW_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ffi.h"
#include "mpi_api.h"

typedef struct jm_shadow {
  jm_Comm dup;
  int64_t seq; /* collectives on this communicator so far (checks on) */
  uint64_t digest;      /* of the unchecked calls since the last check */
  int64_t digest_since; /* the first of them, 0 when none */
} jm_shadow;

/* Create the attribute key (once, at configuration). Returns 0 or writes a
 * message to err. */
int jm_shadow_init(char *err, size_t errlen);

/* The shadow of `comm`. Returns 0; an MPI error code; JM_ERR_TIMEOUT (the
 * duplication waited past the watchdog's deadline); -1 when out of memory
 * or not initialised. */
int jm_shadow_get(jm_Comm comm, jm_shadow **out);

/* The shadow of c->comm for a handler: NULL, or the call's error (`why`
 * names the feature that needed it). */
XLA_FFI_Error *jm_call_shadow(jm_call *c, const char *why, jm_shadow **out);

/* The last communicator this thread looked up and its shadow, valid while
 * no shadow has been freed since (a freed communicator's handle may come
 * back for a new one). Written by jm_shadow_get only. */
typedef struct jm_shadow_cache {
  int valid;
  jm_Comm comm;
  jm_shadow *shadow;
  uint64_t freed;
} jm_shadow_cache;
/* Hidden: the core's own (the compiler may then use the local-dynamic TLS
 * model, one __tls_get_addr without a symbol lookup). */
extern __attribute__((visibility("hidden"))) _Thread_local jm_shadow_cache
    jm_shadow_last;
extern __attribute__((visibility("hidden"))) _Atomic uint64_t
    jm_shadows_freed;

/* jm_shadow_get's hit, inline for the unchecked collectives of the default
 * check mode, which every collective pays: callgrind (MPICH, 2 ranks, a
 * 4-byte allreduce in a jitted loop) counted 183 instructions per unchecked
 * call with the two calls of jm_call_shadow and jm_shadow_get and a
 * global-dynamic TLS access, 138 with this. NULL on a miss. */
static inline jm_shadow *jm_shadow_cached(jm_Comm comm) {
  const jm_shadow_cache *last = &jm_shadow_last;
  if (last->valid && last->comm == comm &&
      last->freed ==
          atomic_load_explicit(&jm_shadows_freed, memory_order_acquire))
    return last->shadow;
  return NULL;
}

#endif
