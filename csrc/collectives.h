/* What the collectives' op bodies (collectives.c) share with the
 * non-blocking starts (request.c, the layer above). */
#ifndef JAXMPI_COLLECTIVES_H
#define JAXMPI_COLLECTIVES_H

#include "ffi.h"

/* Where a call receives `n` elements into `data`: an empty result may share
 * its (empty) buffer's address with the input (XLA does so), which MPICH
 * rejects as aliased buffers, so it gets an address of its own; nothing is
 * written there. */
void *jm_recv_ptr(void *data, int64_t n);

/* reduce_scatter's counts: the call's `counts` attribute (rows per rank)
 * checked against x (sum(counts) rows) and y (counts[rank] rows). On
 * success *counts holds them as elements per rank (c->size of them) and
 * *ints room for as many ints (MPI's counts), one allocation: free(*counts)
 * once MPI no longer reads *ints. On an error nothing is allocated. */
XLA_FFI_Error *jm_reduce_scatter_counts(jm_call *c, const jm_buffer *x,
                                        const jm_buffer *y, int64_t **counts,
                                        int **ints);

#endif
