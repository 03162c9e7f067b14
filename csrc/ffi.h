/* The XLA FFI boundary (ffi.c): decoding call frames into a jm_call,
 * answering the metadata query, turning failures into FFI errors, debug
 * logging. Below every op body; the handlers themselves are in handlers.c. */
#ifndef JAXMPI_FFI_H
#define JAXMPI_FFI_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mpi_api.h"
#include "ops.h"
#include "record.h"
#include "xla/ffi/api/c_api.h"

#define JM_MAX_BUFFERS 32 /* neighbor_exchange: at most 32 pairs */
#define JM_NDTYPES 34

/* What jaxmpi knows of each XLA element type. */
typedef struct jm_dtype {
  const char *name;
  size_t size;          /* bytes, 0 where unsupported */
  jm_Datatype mpi;      /* set by jaxmpi_configure */
  int has_mpi;
} jm_dtype;
extern jm_dtype jm_dtypes[JM_NDTYPES];

typedef struct jm_buffer {
  void *data;
  int64_t count; /* elements */
  int dtype;     /* XLA_FFI_DataType */
  size_t elsize;
  jm_Datatype mpi;
  int64_t ndim;
  const int64_t *dims;
} jm_buffer;

typedef struct jm_call {
  const char *opname;
  XLA_FFI_CallFrame *frame; /* NULL in a request's copy (request.c) */
  const XLA_FFI_Api *api;   /* XLA's API table: outlives the call */
  int nargs, nrets; /* data buffers decoded */
  jm_Comm comm;
  jm_Op op;
  int root, source, dest, tag, sendtag, recvtag;
  int nsources, ndests; /* array attributes */
  jm_Status *status; /* caller's MPI.Status, or NULL */
  /* Row counts per rank (the counts, sendcounts and recvcounts attributes):
   * int64 arrays inside the call frame, valid during the call, one item
   * per rank of comm, none negative (checked at decoding). Read them with
   * jm_rows. */
  const void *rows[3];
  int nrows[3];
  int rank, size;
  unsigned attrs;  /* the op's attributes (JM_A bits) */
  int64_t callno;  /* jaxmpi calls this process has executed, this one included */
  int64_t site;    /* id of the Python line of the call (0: unknown) */
  int on_device;   /* data pointers are GPU memory (CUDA-aware MPI mode) */
  /* A call of a program over several devices per process (ops.h,
   * JM_DEVICE_ATTRS): this device's position in the mesh (-1: one device)
   * and the number of positions. With `paired`, pair i of an exchange
   * sends on sendcomm[i] and receives on recvcomm[i] (the communicators of
   * its position pairs) instead of comm. */
  int position, ndevices, paired;
  void *stream;    /* XLA's CUDA stream of this call (GPU handlers only) */
  void *req;       /* a start's request once made, a wait's once found
                     (request.c) */
  /* A wait: the call of the start it completes (the request's copy: valid
   * until the wait's body completes the request, which frees it). */
  const struct jm_call *of;
  jm_record_ref rec; /* the flight recorder's entry (record.h): a wait's
                        once its request is found (wait.c) */
  /* The arrays: only the entries decoded are set (nargs, nrets, nsources,
   * ndests; the pairs' communicators where `paired`). jm_decode zeroes the
   * fields above only: zeroing these 3.8 KB too was about a tenth of a
   * 4-byte allreduce's instructions in the core. */
  jm_buffer arg[JM_MAX_BUFFERS + 1], ret[JM_MAX_BUFFERS]; /* + position */
  int sources[JM_MAX_BUFFERS], dests[JM_MAX_BUFFERS];
  jm_Comm sendcomm[JM_MAX_BUFFERS], recvcomm[JM_MAX_BUFFERS];
} jm_call;

/* The fields of a jm_call that are zeroed before decoding. */
#define JM_CALL_HEAD offsetof(jm_call, arg)

enum { JM_ROWS_COUNTS, JM_ROWS_SEND, JM_ROWS_RECV };

/* The communicators pair i of an exchange sends and receives on. */
static inline jm_Comm jm_send_comm(const jm_call *c, int i) {
  return c->paired ? c->sendcomm[i] : c->comm;
}
static inline jm_Comm jm_recv_comm(const jm_call *c, int i) {
  return c->paired ? c->recvcomm[i] : c->comm;
}

/* Item i of row-count array k (JM_ROWS_*) of a call. */
static inline int64_t jm_rows(const jm_call *c, int k, int i) {
  int64_t v;
  memcpy(&v, (const char *)c->rows[k] + (size_t)i * sizeof v, sizeof v);
  return v;
}

typedef struct jm_config {
  int debug; /* JM_DEBUG_* bits: log every MPI call (JAXMPI_DEBUG), trace
                the MPI calls inside each call (JAXMPI_TRACE) */
} jm_config;
enum { JM_DEBUG_LOG = 1, JM_DEBUG_TRACE = 2 };
extern jm_config jm_cfg;

typedef XLA_FFI_Error *jm_op_fn(jm_call *c);
typedef struct jm_op_desc jm_op_desc;
/* How a decoded call whose buffers are GPU memory runs (cuda_staging.c's
 * jm_cuda_run for a blocking op, the starts' and the wait's own). */
typedef XLA_FFI_Error *jm_gpu_fn(jm_call *c, const jm_op_desc *desc);
/* What decoding a call of this kind adds after jm_decode (the wait: the
 * request it completes), or NULL. */
typedef XLA_FFI_Error *jm_bind_fn(jm_call *c, int on_gpu);

/* One row of ops.h, as the handlers see it (handlers.c makes one per row). */
struct jm_op_desc {
  int id;   /* JM_OP_<name> (ops.h) */
  int kind; /* JM_BLOCKING, JM_START or JM_WAIT */
  const char *name;
  int nargs, nrets;
  unsigned templates; /* bit i: argument i is a template, never read */
  int payload;        /* JM_IN or JM_OUT */
  unsigned attrs;
  jm_op_fn *run;      /* the body, on host (or CUDA-aware device) buffers */
  jm_gpu_fn *gpu;
  jm_bind_fn *bind;
};

/* Fill *c from the frame: buffers (skipping the token), attributes, the
 * device's position and communicator where the program runs over several
 * devices, the rank and size of the communicator. c->callno is the
 * caller's. on_gpu: the frame's buffers are GPU memory. */
XLA_FFI_Error *jm_decode(XLA_FFI_CallFrame *frame, const jm_op_desc *desc,
                         jm_call *c, int on_gpu);

XLA_FFI_Error *jm_error(jm_call *c, XLA_FFI_Error_Code code, const char *fmt,
                        ...) __attribute__((format(printf, 3, 4)));
XLA_FFI_Error *jm_mpi_failure(jm_call *c, const char *fn, const char *peer_kind,
                              int peer, int rc);
/* The api of a jm_call made outside XLA (an eager call's check): its
 * errors are kept, and jm_captured copies one's message to out, frees it and
 * returns its code. */
const XLA_FFI_Api *jm_capture_api(void);
int jm_captured(XLA_FFI_Error *err, char *out, size_t len);

/* Call sites (jm_site_register, jm_site_text): record.h. */

double jm_log_start(void);
/* The debug log's line for a call starting (start=1, err NULL) or ending.
 * jm_log also hands the MPI call to the trace (JM_DEBUG_TRACE). */
void jm_log_call(const jm_call *c, const XLA_FFI_Error *err, double t0,
                 int start);
void jm_log(const jm_call *c, const char *fn, const char *peer_kind, int peer,
            int64_t count, int dtype, double t0);

/* Make one MPI call the way every handler does: time it for the debug log,
 * turn a failure into an FFI error naming op, rank, peer and MPI's message. */
#define JM_MPI(c, fn, peer_kind, peer, count, dtype, expr)                     \
  do {                                                                         \
    double t0_ = jm_log_start();                                               \
    int rc_ = (expr);                                                          \
    if (jm_cfg.debug) jm_log((c), (fn), (peer_kind), (peer), (count), (dtype), \
                             t0_);                                             \
    if (rc_ != 0) return jm_mpi_failure((c), (fn), (peer_kind), (peer), rc_);  \
  } while (0)

/* Check a condition the Python layer guarantees; never trust it blindly. */
#define JM_EXPECT(c, cond, ...)                                                \
  do {                                                                         \
    if (!(cond)) return jm_error((c), XLA_FFI_Error_Code_INVALID_ARGUMENT,     \
                                 __VA_ARGS__);                                 \
  } while (0)

#define JM_DECLARE_OP(name, nargs, nrets, templates, payload, attrs)           \
  jm_op_fn jm_run_##name;
JM_OPS(JM_DECLARE_OP)
JM_IOPS(JM_DECLARE_OP)
JM_WAITS(JM_DECLARE_OP)
#undef JM_DECLARE_OP


/* 1 if the frame was XLA's metadata query (answered); every handler asks
 * first. */
int jm_answer_metadata_query(XLA_FFI_CallFrame *frame);

#endif
