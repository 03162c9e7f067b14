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

/* The variable-count ops' rows (along axis 0): a row's elements (the
 * product of the dimensions after the first); whether a and b have the same
 * dtype, a first axis and the same dimensions after it; the rows of row
 * counts k (JM_ROWS_*) summed over the ranks. */
int64_t jm_row_elems(const jm_buffer *b);
int jm_same_rows(const jm_buffer *a, const jm_buffer *b);
int64_t jm_rows_total(const jm_call *c, int k);

/* reduce_scatter's counts: the call's `counts` attribute (rows per rank)
 * checked against x (sum(counts) rows) and y (counts[rank] rows). On
 * success *counts holds them as elements per rank (c->size of them) and
 * *ints room for as many ints (MPI's counts), one allocation: free(*counts)
 * once MPI no longer reads *ints. On an error nothing is allocated. */
XLA_FFI_Error *jm_reduce_scatter_counts(jm_call *c, const jm_buffer *x,
                                        const jm_buffer *y, int64_t **counts,
                                        int **ints);

#endif
