/* Cross-rank checks. Before a checked collective, the ranks of the
 * communicator exchange a small fixed-size signature of the call (op,
 * dtype, shape, reduction op, root, call number, and a digest of the
 * unchecked calls since the last check) with one MPI_Allgather on the
 * communicator's shadow (shadow.h), so the check never matches user
 * traffic. Any difference is an error on every rank, naming the ranks and
 * what differs. Which collectives are checked: every one (JAXMPI_CHECK=1),
 * none (JAXMPI_CHECK=0), or by default a sparse schedule of the call number
 * (jm_check_scheduled), the same on every rank; the others are only folded
 * into the digest (about 155 instructions per call, callgrind). A receive probes the
 * incoming message first (checks on) and reports a size mismatch instead
 * of truncating when the message is there. Off, checks cost one atomic
 * load per call. */
#ifndef JAXMPI_CHECK_H
#define JAXMPI_CHECK_H

#include "ffi.h"

/* Modes: off (JAXMPI_CHECK=0), the sparse default, every call
 * (JAXMPI_CHECK=1). */
enum { JM_CHECK_OFF = 0, JM_CHECK_SPARSE = 1, JM_CHECK_ALL = 2 };
#define JM_CHECK_FIRST 16      /* calls 1..16 of each communicator */
#define JM_CHECK_PERIOD 65536  /* then powers of two, and multiples of this */
void jm_check_set(int mode);
int jm_check_mode(void);
/* 1 if the default mode checks the n-th collective of a communicator. */
int jm_check_scheduled(int64_t n);
/* Name a predefined (or jaxmpi's own) reduction op, so that signatures can
 * compare ops across processes, where handles may differ. */
int jm_check_name_op(jm_Op op, const char *name);

/* The collective check (mode JM_CHECK_SPARSE or JM_CHECK_ALL): counts the
 * call on its communicator and, when the mode says so, compares it across
 * ranks. NULL when they agree. */
XLA_FFI_Error *jm_check_collective(jm_call *c, const jm_op_desc *desc,
                                   int mode);
/* Probe (JM_PROBE_POLLS MPI_Iprobe calls, about 1,100 instructions each in
 * MPICH 5) for the message a receive into `y` from (source, tag) will match;
 * if it is there and its size differs, receive and discard it and fail. */
#define JM_PROBE_POLLS 16
XLA_FFI_Error *jm_check_incoming(jm_call *c, const jm_buffer *y, int source,
                                 int tag);

/* A completed receive into y with status st: zeros for MPI.PROC_NULL, an
 * error if fewer bytes arrived than y holds; copies st to c->status. */
XLA_FFI_Error *jm_check_received(jm_call *c, const jm_buffer *y,
                                 const jm_Status *st);

/* "float32[4,5]" */
void jm_format_array(const jm_buffer *y, char *out, size_t len);

#endif
