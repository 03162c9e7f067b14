/* A communicator's shadow: a private duplicate of a user's communicator,
 * made on first use and cached on it as an attribute (MPI frees it with the
 * communicator). Messages jaxmpi adds of its own (the cross-rank checks'
 * signatures, the pairwise in-place alltoall) travel on the shadow, so they
 * can never match the user's. Making it is collective: every rank asks for
 * it at the same call of its program. */
#ifndef JAXMPI_SHADOW_H
#define JAXMPI_SHADOW_H

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

#endif
