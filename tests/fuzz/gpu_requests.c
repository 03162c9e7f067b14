/* The GPU path of the non-blocking operations on a machine without a GPU:
 * the CUDA start and wait handlers of the C core (handlers.c, request_gpu.c,
 * cuda_staging.c) called with XLA FFI call frames, over a stand-in CUDA
 * driver and a stand-in MPI that keep the orders a real GPU and MPI
 * impose.
 *
 * The stand-in driver's "device" memory is host memory, but its streams
 * really queue their work: copies, memsets, event records and waits run in
 * stream order, and in the LAZY mode only when something forces them (a
 * synchronisation, or a stream waiting on an event of another), so a copy
 * the core forgot to order, or a synchronisation it forgot, reads or writes
 * at the wrong time and the data comes out wrong. In the EAGER mode every
 * stream runs its work at once, as a fast GPU would: a copy enqueued too
 * early (before MPI delivered the data) then copies the wrong bytes. The
 * harness enqueues its own "kernels" on XLA's stream: one that writes the
 * input before a start, one standing for the computation between start and
 * wait (which the wait must leave queued: the GPU keeps computing), one that
 * reads the result after the wait.
 *
 * The stand-in MPI (one rank of a communicator of three) records every
 * request; it reads what a request sends and writes what it receives only
 * when the request completes (a receive: a pattern unique to the call), as
 * a real MPI may, and checks that it gets pinned host memory (staged) or
 * device memory (CUDA-aware mode).
 *
 * Also: CUDA errors injected at every driver call of a start and its wait
 * (an error naming CUDA's message, no crash, no request lost), a handle
 * XLA moved (the wait reads it from the device), buffers XLA moved (an
 * error), a request's staging never shared with a blocking op, chunked
 * reductions, variable counts, PROC_NULL, CUDA-aware mode; and a blocking
 * op's staging on the same stand-ins.
 *
 * Built and run by tests/launch/test_gpu_requests.py (gcc, -Werror) and by
 * tests/fuzz/run.sh (clang, ASan and UBSan). Exits 0 when every check
 * passed; prints each failure. */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_staging.h"
#include "ffi.h"
#include "handlers.h"
#include "request.h"

static int failures, checks;
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    checks++;                                                                  \
    if (!(cond)) {                                                             \
      failures++;                                                              \
      fprintf(stderr, "FAIL %s:%d [%s]: ", __FILE__, __LINE__, scenario);      \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
    }                                                                          \
  } while (0)
static char scenario[160];

/* The handlers under test (handlers.c: the starts', the wait's). */
#define JM_DECLARE_CUDA(name, nargs, nrets, templates, payload, attrs)         \
  XLA_FFI_Error *jaxmpi_ffi_##name##_cuda(XLA_FFI_CallFrame *frame);
JM_OPS(JM_DECLARE_CUDA)
JM_IOPS(JM_DECLARE_CUDA)
JM_WAITS(JM_DECLARE_CUDA)
#undef JM_DECLARE_CUDA

/* ---- XLA's side: errors, the stream ------------------------------------- */

struct XLA_FFI_Error {
  char *message;
};

static XLA_FFI_Error *error_create(XLA_FFI_Error_Create_Args *args) {
  XLA_FFI_Error *e = malloc(sizeof *e);
  if (!e) abort();
  const char *m = args->message ? args->message : "";
  if (!(e->message = malloc(strlen(m) + 1))) abort();
  strcpy(e->message, m);
  return e;
}

static char last_error[2048];

/* 1 if there was an error (its message in last_error), freeing it. */
static int failed(XLA_FFI_Error *e) {
  last_error[0] = 0;
  if (!e) return 0;
  snprintf(last_error, sizeof last_error, "%s", e->message);
  free(e->message);
  free(e);
  return 1;
}

/* ---- the stand-in CUDA driver ------------------------------------------- */

enum { LAZY, EAGER };
static int run_mode;
static int fail_at, driver_calls; /* fail the fail_at-th call (0: none) */
static int other_ctx_current;     /* XLA's thread lacks the context */

static CUresult rc_of_call(void) {
  return ++driver_calls == fail_at ? 700 /* CUDA_ERROR_ILLEGAL_ADDRESS */ : 0;
}

enum { OP_COPY, OP_SET8, OP_SET32, OP_RECORD, OP_WAIT, OP_KERNEL };
typedef struct fstream fstream;
typedef struct fop {
  int kind;
  void *dst;
  const void *src;
  size_t n;
  unsigned v;
  fstream *ws; /* OP_WAIT: run ws up to wseq first */
  long wseq;
  void (*fn)(void *);
  void *arg;
} fop;
struct fstream {
  fop *ops;
  long enq, done, cap;
};
#define MAX_STREAMS 8
static fstream streams[MAX_STREAMS];
static int nstreams;
static fstream *xla; /* XLA's stream: streams[0] */

typedef struct fevent {
  fstream *s; /* of its last record; NULL: never recorded */
  long seq;
} fevent;

static void run_stream(fstream *s, long upto, int depth) {
  if (depth > 32) abort(); /* a cycle of waits: cannot happen on a GPU */
  if (upto > s->enq) abort();
  while (s->done < upto) {
    fop *o = &s->ops[s->done];
    switch (o->kind) {
      case OP_COPY:
        memmove(o->dst, o->src, o->n);
        break;
      case OP_SET8:
        memset(o->dst, (int)o->v, o->n);
        break;
      case OP_SET32:
        for (size_t i = 0; i < o->n; i++)
          memcpy((char *)o->dst + 4 * i, &o->v, 4);
        break;
      case OP_WAIT:
        if (o->ws) run_stream(o->ws, o->wseq, depth + 1);
        break;
      case OP_KERNEL:
        o->fn(o->arg);
        break;
      default:
        break;
    }
    s->done++;
  }
}

static void enqueue(fstream *s, fop op) {
  if (s->enq == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 256;
    if (!(s->ops = realloc(s->ops, (size_t)s->cap * sizeof *s->ops))) abort();
  }
  s->ops[s->enq++] = op;
  if (run_mode == EAGER) run_stream(s, s->enq, 0);
}

/* Memory: the harness's "device" allocations and the core's pinned ones
 * (linked, so that what the core abandons stays reachable: no leak). */
typedef struct block {
  struct block *prev, *next;
  size_t n;
  int pinned;
  max_align_t data[];
} block;
static block blocks = {&blocks, &blocks, 0, 0};

static void *block_new(size_t n, int pinned, int fill) {
  block *b = malloc(sizeof *b + (n ? n : 1));
  if (!b) abort();
  b->n = n;
  b->pinned = pinned;
  b->prev = &blocks;
  b->next = blocks.next;
  blocks.next->prev = b;
  blocks.next = b;
  memset(b->data, fill, n);
  return b->data;
}

static void block_free(void *p) {
  block *b = (block *)((char *)p - offsetof(block, data));
  b->prev->next = b->next;
  b->next->prev = b->prev;
  free(b);
}

/* 1 if [p, p + n) lies in one block of the kind (pinned or device). */
static int inside(const void *p, size_t n, int pinned) {
  for (block *b = blocks.next; b != &blocks; b = b->next) {
    const char *lo = (const char *)b->data;
    if (b->pinned == pinned && (const char *)p >= lo &&
        (const char *)p + n <= lo + b->n)
      return 1;
  }
  return 0;
}

static void *dev_alloc(size_t n) { return block_new(n, 0, 0x5a); }

static CUcontext the_ctx = (CUcontext)16, other_ctx = (CUcontext)32;
static CUresult f_init(unsigned f) { (void)f; return 0; }
static CUresult f_version(int *v) { *v = 13000; return 0; }
static CUresult f_count(int *n) { *n = 1; return 0; }
static CUresult f_errstr(CUresult e, const char **s) {
  *s = e == 700 ? "an illegal memory access was encountered" : NULL;
  return e == 700 ? 0 : 1;
}
static CUresult f_errname(CUresult e, const char **s) {
  *s = "CUDA_ERROR_ILLEGAL_ADDRESS";
  return e == 700 ? 0 : 1;
}
static int pushed_now; /* contexts pushed and not yet popped */
static CUresult f_ctx_current(CUcontext *c) {
  *c = other_ctx_current && !pushed_now ? other_ctx : the_ctx;
  return rc_of_call();
}
static CUresult f_ctx_push(CUcontext c) {
  CUresult rc = rc_of_call();
  if (!rc && c == the_ctx) pushed_now++;
  return rc;
}
static CUresult f_ctx_pop(CUcontext *c) {
  *c = the_ctx;
  pushed_now--;
  return rc_of_call();
}
static CUresult f_stream_ctx(CUstream s, CUcontext *c) {
  (void)s;
  *c = the_ctx;
  return rc_of_call();
}
static CUresult f_sync(CUstream s) {
  CUresult rc = rc_of_call();
  fstream *f = (fstream *)s;
  if (!rc) run_stream(f, f->enq, 0);
  return rc;
}
static CUresult f_host_alloc(void **p, size_t n, unsigned f) {
  (void)f;
  CUresult rc = rc_of_call();
  if (!rc) *p = block_new(n, 1, 0xa5); /* not zeros: stale bytes show */
  return rc;
}
static CUresult f_free_host(void *p) {
  block_free(p);
  return 0;
}
static int expect_device_src = 1;
static CUresult f_dtoh(void *d, CUdeviceptr s, size_t n, CUstream st) {
  CUresult rc = rc_of_call();
  if (rc) return rc;
  CHECK(inside(d, n, 1), "cuMemcpyDtoHAsync into memory that is not pinned");
  CHECK(!expect_device_src || inside((void *)(uintptr_t)s, n, 0),
        "cuMemcpyDtoHAsync from memory that is not on the device");
  enqueue((fstream *)st,
          (fop){OP_COPY, d, (const void *)(uintptr_t)s, n, 0, NULL, 0, NULL,
                NULL});
  return 0;
}
static CUresult f_htod(CUdeviceptr d, const void *s, size_t n, CUstream st) {
  CUresult rc = rc_of_call();
  if (rc) return rc;
  CHECK(inside(s, n, 1), "cuMemcpyHtoDAsync from memory that is not pinned");
  CHECK(inside((void *)(uintptr_t)d, n, 0),
        "cuMemcpyHtoDAsync to memory that is not on the device");
  enqueue((fstream *)st, (fop){OP_COPY, (void *)(uintptr_t)d, s, n, 0, NULL,
                               0, NULL, NULL});
  return 0;
}
static CUresult f_dtod(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  CUresult rc = rc_of_call();
  if (!rc)
    enqueue((fstream *)st, (fop){OP_COPY, (void *)(uintptr_t)d,
                                 (const void *)(uintptr_t)s, n, 0, NULL, 0,
                                 NULL, NULL});
  return rc;
}
static CUresult f_memset8(CUdeviceptr d, unsigned char v, size_t n,
                          CUstream st) {
  CUresult rc = rc_of_call();
  if (!rc)
    enqueue((fstream *)st, (fop){OP_SET8, (void *)(uintptr_t)d, NULL, n, v,
                                 NULL, 0, NULL, NULL});
  return rc;
}
static CUresult f_memset32(CUdeviceptr d, unsigned v, size_t n, CUstream st) {
  CUresult rc = rc_of_call();
  if (!rc)
    enqueue((fstream *)st, (fop){OP_SET32, (void *)(uintptr_t)d, NULL, n, v,
                                 NULL, 0, NULL, NULL});
  return rc;
}
static CUresult f_stream_create(CUstream *s, unsigned flags) {
  CUresult rc = rc_of_call();
  if (rc) return rc;
  if (nstreams == MAX_STREAMS || flags != JM_CU_STREAM_NON_BLOCKING) abort();
  *s = (CUstream)&streams[nstreams++];
  return 0;
}
static CUresult f_wait_event(CUstream s, CUevent e, unsigned flags) {
  CUresult rc = rc_of_call();
  if (rc) return rc;
  fevent *ev = (fevent *)e;
  (void)flags;
  enqueue((fstream *)s,
          (fop){OP_WAIT, NULL, NULL, 0, 0, ev->s, ev->seq, NULL, NULL});
  return 0;
}
static CUresult f_event_create(CUevent *e, unsigned f) {
  (void)f;
  CUresult rc = rc_of_call();
  if (!rc && !(*e = (CUevent)calloc(1, sizeof(fevent)))) abort();
  return rc;
}
static CUresult f_event_record(CUevent e, CUstream s) {
  CUresult rc = rc_of_call();
  if (rc) return rc;
  fevent *ev = (fevent *)e;
  fstream *f = (fstream *)s;
  enqueue(f, (fop){OP_RECORD, NULL, NULL, 0, 0, NULL, 0, NULL, NULL});
  ev->s = f;
  ev->seq = f->enq;
  return 0;
}
static CUresult f_event_sync(CUevent e) {
  CUresult rc = rc_of_call();
  fevent *ev = (fevent *)e;
  if (!rc && ev->s) run_stream(ev->s, ev->seq, 0);
  return rc;
}
static CUresult f_event_destroy(CUevent e) {
  free(e); /* ASan: a double destroy; LSan: one never destroyed */
  return 0;
}

static const jm_cu_api fake_cuda = {
    .Init = f_init, .DriverGetVersion = f_version, .DeviceGetCount = f_count,
    .GetErrorString = f_errstr, .GetErrorName = f_errname,
    .CtxGetCurrent = f_ctx_current, .CtxPushCurrent = f_ctx_push,
    .CtxPopCurrent = f_ctx_pop, .StreamGetCtx = f_stream_ctx,
    .StreamSynchronize = f_sync, .MemHostAlloc = f_host_alloc,
    .MemFreeHost = f_free_host, .MemcpyDtoHAsync = f_dtoh,
    .MemcpyHtoDAsync = f_htod, .MemcpyDtoDAsync = f_dtod,
    .MemsetD8Async = f_memset8, .MemsetD32Async = f_memset32,
    .StreamCreate = f_stream_create, .StreamWaitEvent = f_wait_event,
    .EventCreate = f_event_create, .EventRecord = f_event_record,
    .EventSynchronize = f_event_sync, .EventDestroy = f_event_destroy};

static XLA_FFI_Error *stream_get(XLA_FFI_Stream_Get_Args *args) {
  args->stream = (void *)xla;
  return NULL;
}

/* Kernels of "XLA's program" on its stream. */
typedef struct fill_arg {
  void *dst;
  const void *src;
  size_t n;
  int *ran;
} fill_arg;
static void k_copy(void *p) {
  fill_arg *a = p;
  memcpy(a->dst, a->src, a->n);
  if (a->ran) ++*a->ran;
}
static void k_count(void *p) { ++*(int *)p; }
static void kernel_copy(fill_arg *a) {
  enqueue(xla, (fop){OP_KERNEL, NULL, NULL, 0, 0, NULL, 0, k_copy, a});
}
static void kernel_count(int *counter) {
  enqueue(xla, (fop){OP_KERNEL, NULL, NULL, 0, 0, NULL, 0, k_count, counter});
}

/* ---- the stand-in MPI: rank 1 of 3 ----------------------------------------
 * Every request is recorded; it completes when tested or waited: then what
 * it sends is read (a copy kept) and what it receives written (bytes of
 * pattern(salt, i), salt its number). */

#define RANK 1
#define SIZE 3
#define DT(d) (100 + (d))
enum { F_SEND, F_RECV, F_COLL };
typedef struct freq {
  int kind, done, source, tag, salt;
  const char *fn;
  const void *snd;
  size_t sbytes;
  void *rcv;
  size_t rbytes;
  unsigned char *sent; /* what snd held at completion */
} freq;
#define MAX_REQS 4096
static freq reqs[MAX_REQS];
static int nreqs;
static int expect_aware;   /* MPI gets device pointers */

static unsigned char pattern(int salt, size_t i) {
  return (unsigned char)(salt * 131 + i * 7 + 3);
}

static size_t elsize(jm_Datatype t) {
  if (t == 99) return 1; /* MPI_BYTE */
  if (t < 100 || t >= 100 + JM_NDTYPES) abort();
  return jm_dtypes[t - 100].size;
}

static void where_ok(const char *fn, const void *p, size_t n) {
  if (!n || !p || p == jm_const.in_place) return;
  CHECK(inside(p, n, !expect_aware), "%s got %s memory", fn,
        expect_aware ? "non-device" : "non-pinned");
}

static int post(jm_Request *q, int kind, const char *fn, const void *snd,
                size_t sbytes, void *rcv, size_t rbytes, int source, int tag) {
  if (nreqs == MAX_REQS) abort();
  where_ok(fn, snd, sbytes);
  where_ok(fn, rcv, rbytes);
  freq *r = &reqs[nreqs];
  *r = (freq){kind, 0, source, tag, nreqs + 1, fn, snd, sbytes, rcv, rbytes,
              NULL};
  *q = ++nreqs; /* never 0 */
  return 0;
}

static void complete(jm_Request q, jm_Status *st) {
  freq *r = &reqs[q - 1];
  if (!r->done) {
    r->done = 1;
    const void *from = r->snd == jm_const.in_place ? r->rcv : r->snd;
    if (from && r->sbytes) {
      if (!(r->sent = malloc(r->sbytes))) abort();
      memcpy(r->sent, from, r->sbytes);
    }
    if (r->rcv && !(r->kind == F_RECV && r->source == jm_const.proc_null))
      for (size_t i = 0; i < r->rbytes; i++)
        ((unsigned char *)r->rcv)[i] = pattern(r->salt, i);
  }
  if (st) {
    memset(st, 0, sizeof *st);
    st->MPI_SOURCE = r->source;
    st->MPI_TAG = r->tag;
    st->count_lo = (int)r->rbytes;
  }
}

static int s_rank(jm_Comm c, int *r) { (void)c; *r = RANK; return 0; }
static int s_size(jm_Comm c, int *s) { (void)c; *s = SIZE; return 0; }
static double s_wtime(void) { return 0.0; }
static int s_error_string(int rc, char *s, int *n) {
  (void)rc;
  strcpy(s, "stub error");
  *n = 10;
  return 0;
}
static int s_error_class(int rc, int *c) { *c = rc; return 0; }
static int s_get_count(const jm_Status *st, jm_Datatype t, int *n) {
  *n = st->count_lo / (int)elsize(t);
  return 0;
}
static int s_isend(const void *b, int n, jm_Datatype t, int d, int tag,
                   jm_Comm c, jm_Request *q) {
  (void)c;
  return post(q, F_SEND, "MPI_Isend", b, (size_t)n * elsize(t), NULL, 0, d,
              tag);
}
static int s_irecv(void *b, int n, jm_Datatype t, int src, int tag, jm_Comm c,
                   jm_Request *q) {
  (void)c;
  return post(q, F_RECV, "MPI_Irecv", NULL, 0, b, (size_t)n * elsize(t), src,
              tag);
}
static int s_ireduction(const void *s, void *r, int n, jm_Datatype t, jm_Op o,
                        jm_Comm c, jm_Request *q) {
  (void)o; (void)c;
  size_t bytes = (size_t)n * elsize(t);
  return post(q, F_COLL, "MPI_Iallreduce", s, bytes, r, bytes, 0, 0);
}
static int s_ireduce(const void *s, void *r, int n, jm_Datatype t, jm_Op o,
                     int root, jm_Comm c, jm_Request *q) {
  (void)o; (void)c;
  size_t bytes = (size_t)n * elsize(t);
  return post(q, F_COLL, "MPI_Ireduce", s, bytes, root == RANK ? r : NULL,
              bytes, 0, 0);
}
static int s_ibcast(void *b, int n, jm_Datatype t, int root, jm_Comm c,
                    jm_Request *q) {
  (void)c;
  size_t bytes = (size_t)n * elsize(t);
  return root == RANK ? post(q, F_COLL, "MPI_Ibcast", b, bytes, NULL, 0, 0, 0)
                      : post(q, F_COLL, "MPI_Ibcast", NULL, 0, b, bytes, 0, 0);
}
static int s_igather(const void *s, int sn, jm_Datatype st, void *r, int rn,
                     jm_Datatype rt, int root, jm_Comm c, jm_Request *q) {
  (void)c;
  return post(q, F_COLL, "MPI_Igather", s, (size_t)sn * elsize(st),
              root == RANK ? r : NULL, (size_t)SIZE * rn * elsize(rt), 0, 0);
}
static int s_iscatter(const void *s, int sn, jm_Datatype st, void *r, int rn,
                      jm_Datatype rt, int root, jm_Comm c, jm_Request *q) {
  (void)c;
  return post(q, F_COLL, "MPI_Iscatter", root == RANK ? s : NULL,
              (size_t)SIZE * sn * elsize(st), r, (size_t)rn * elsize(rt), 0,
              0);
}
static int s_iall(const void *s, int sn, jm_Datatype st, void *r, int rn,
                  jm_Datatype rt, jm_Comm c, jm_Request *q) {
  (void)c; (void)sn;
  /* allgather and alltoall alike: the whole input, size blocks out */
  return post(q, F_COLL, "MPI_Iallgather/MPI_Ialltoall", s,
              (size_t)sn * elsize(st), r, (size_t)SIZE * rn * elsize(rt), 0,
              0);
}
static int s_ibarrier(jm_Comm c, jm_Request *q) {
  (void)c;
  return post(q, F_COLL, "MPI_Ibarrier", NULL, 0, NULL, 0, 0, 0);
}
static int s_irsb(const void *s, void *r, int n, jm_Datatype t, jm_Op o,
                  jm_Comm c, jm_Request *q) {
  (void)o; (void)c;
  size_t bytes = (size_t)n * elsize(t);
  return post(q, F_COLL, "MPI_Ireduce_scatter_block", s, SIZE * bytes, r,
              bytes, 0, 0);
}
static int s_irs(const void *s, void *r, const int *counts, jm_Datatype t,
                 jm_Op o, jm_Comm c, jm_Request *q) {
  (void)o; (void)c;
  int total = 0;
  for (int i = 0; i < SIZE; i++) total += counts[i];
  return post(q, F_COLL, "MPI_Ireduce_scatter", s, (size_t)total * elsize(t),
              r, (size_t)counts[RANK] * elsize(t), 0, 0);
}
static size_t extent(const int *counts, const int *displs) {
  size_t e = 0;
  for (int i = 0; i < SIZE; i++)
    if (counts[i] && (size_t)(displs[i] + counts[i]) > e)
      e = (size_t)(displs[i] + counts[i]);
  return e;
}
static int s_iallgatherv(const void *s, int sn, jm_Datatype st, void *r,
                         const int *rc, const int *rd, jm_Datatype rt,
                         jm_Comm c, jm_Request *q) {
  (void)c;
  return post(q, F_COLL, "MPI_Iallgatherv", s, (size_t)sn * elsize(st), r,
              extent(rc, rd) * elsize(rt), 0, 0);
}
static int s_igatherv(const void *s, int sn, jm_Datatype st, void *r,
                      const int *rc, const int *rd, jm_Datatype rt, int root,
                      jm_Comm c, jm_Request *q) {
  (void)c;
  return post(q, F_COLL, "MPI_Igatherv", s, (size_t)sn * elsize(st),
              root == RANK ? r : NULL,
              root == RANK ? extent(rc, rd) * elsize(rt) : 0, 0, 0);
}
static int s_iscatterv(const void *s, const int *sc, const int *sd,
                       jm_Datatype st, void *r, int rn, jm_Datatype rt,
                       int root, jm_Comm c, jm_Request *q) {
  (void)c;
  return post(q, F_COLL, "MPI_Iscatterv", root == RANK ? s : NULL,
              root == RANK ? extent(sc, sd) * elsize(st) : 0, r,
              (size_t)rn * elsize(rt), 0, 0);
}
static int s_ialltoallv(const void *s, const int *sc, const int *sd,
                        jm_Datatype st, void *r, const int *rc, const int *rd,
                        jm_Datatype rt, jm_Comm c, jm_Request *q) {
  (void)c;
  return post(q, F_COLL, "MPI_Ialltoallv", s, extent(sc, sd) * elsize(st), r,
              extent(rc, rd) * elsize(rt), 0, 0);
}
static int s_waitall(int n, jm_Request *q, jm_Status *st) {
  for (int i = 0; i < n; i++) complete(q[i], st ? &st[i] : NULL);
  return 0;
}
static int s_wait(jm_Request *q, jm_Status *st) {
  complete(*q, st);
  return 0;
}
static int s_test(jm_Request *q, int *done, jm_Status *st) {
  complete(*q, st);
  *done = 1;
  return 0;
}
static int s_testall(int n, jm_Request *q, int *done, jm_Status *st) {
  *done = 1;
  return s_waitall(n, q, st);
}
static int s_release(jm_Request *q) {
  reqs[*q - 1].done = 1; /* cancelled or freed: nothing delivered */
  return 0;
}
/* A blocking allreduce: keeps what it was given (the staged input must be
 * there when MPI is called), then scribbles over its buffer (a request's
 * staging lent to it would show). */
static unsigned char blocking_sent[256];
static int s_allreduce(const void *s, void *r, int n, jm_Datatype t, jm_Op o,
                       jm_Comm c) {
  (void)o; (void)c;
  size_t bytes = (size_t)n * elsize(t);
  if (bytes > sizeof blocking_sent) abort();
  where_ok("MPI_Allreduce", r, bytes);
  memcpy(blocking_sent, s == jm_const.in_place ? r : s, bytes);
  memset(r, 0x33, bytes);
  return 0;
}

static void bind_mpi(void) {
  memset(&jm_mpi, 0, sizeof jm_mpi); /* anything else is NULL: a crash */
  jm_mpi.Comm_rank = s_rank;
  jm_mpi.Comm_size = s_size;
  jm_mpi.Wtime = s_wtime;
  jm_mpi.Error_string = s_error_string;
  jm_mpi.Error_class = s_error_class;
  jm_mpi.Get_count = s_get_count;
  jm_mpi.Isend = s_isend;
  jm_mpi.Irecv = s_irecv;
  jm_mpi.Iallreduce = s_ireduction;
  jm_mpi.Iscan = s_ireduction;
  jm_mpi.Iexscan = s_ireduction;
  jm_mpi.Ireduce = s_ireduce;
  jm_mpi.Ibcast = s_ibcast;
  jm_mpi.Igather = s_igather;
  jm_mpi.Iscatter = s_iscatter;
  jm_mpi.Iallgather = s_iall;
  jm_mpi.Ialltoall = s_iall;
  jm_mpi.Ibarrier = s_ibarrier;
  jm_mpi.Ireduce_scatter_block = s_irsb;
  jm_mpi.Ireduce_scatter = s_irs;
  jm_mpi.Iallgatherv = s_iallgatherv;
  jm_mpi.Igatherv = s_igatherv;
  jm_mpi.Iscatterv = s_iscatterv;
  jm_mpi.Ialltoallv = s_ialltoallv;
  jm_mpi.Waitall = s_waitall;
  jm_mpi.Wait = s_wait;
  jm_mpi.Test = s_test;
  jm_mpi.Testall = s_testall;
  jm_mpi.Cancel = s_release;
  jm_mpi.Request_free = s_release;
  jm_mpi.Allreduce = s_allreduce;
  jm_check_set(JM_CHECK_OFF); /* the checks need a real MPI */
  jm_const.proc_null = -1;
  jm_const.any_source = -2;
  jm_const.any_tag = -1;
  jm_const.undefined = -32766;
  jm_const.byte = 99;
  jm_const.err_truncate = 15;
  jm_const.err_pending = 19;
  static char in_place;
  jm_const.in_place = &in_place;
  jm_count.limit = INT_MAX;
  for (int i = 0; i < JM_NDTYPES; i++) {
    jm_dtypes[i].has_mpi = jm_dtypes[i].name != NULL;
    jm_dtypes[i].mpi = DT(i);
  }
}

/* ---- call frames ---------------------------------------------------------- */

#define MAXB 12
typedef struct bufs {
  XLA_FFI_Buffer b[MAXB];
  void *p[MAXB];
  int types[MAXB];
  int64_t dims[MAXB][2];
  int n;
} bufs;

static char token_bytes[8];

static void add(bufs *v, void *data, XLA_FFI_DataType dtype, int64_t count) {
  XLA_FFI_Buffer *b = &v->b[v->n];
  memset(b, 0, sizeof *b);
  b->struct_size = sizeof *b;
  b->dtype = dtype;
  b->data = data;
  v->dims[v->n][0] = count;
  b->rank = count < 0 ? 0 : 1; /* count < 0: a scalar */
  b->dims = v->dims[v->n];
  v->p[v->n] = b;
  v->types[v->n] = XLA_FFI_ArgType_BUFFER;
  v->n++;
}

static void add_token(bufs *v) { add(v, token_bytes, XLA_FFI_DataType_TOKEN, -1); }

#define MAXA 8
typedef struct attrs {
  XLA_FFI_ByteSpan names[MAXA];
  XLA_FFI_ByteSpan *np[MAXA];
  XLA_FFI_AttrType types[MAXA];
  void *p[MAXA];
  XLA_FFI_Scalar sc[MAXA];
  XLA_FFI_Array ar[MAXA];
  int64_t vals[MAXA][8];
  int n;
} attrs;

static void attr(attrs *a, const char *name, int64_t v) {
  int k = a->n++;
  a->names[k] = (XLA_FFI_ByteSpan){name, strlen(name)};
  a->np[k] = &a->names[k];
  a->vals[k][0] = v;
  a->types[k] = XLA_FFI_AttrType_SCALAR;
  a->sc[k] = (XLA_FFI_Scalar){XLA_FFI_DataType_S64, a->vals[k]};
  a->p[k] = &a->sc[k];
}

static void attr_array(attrs *a, const char *name, const int64_t *v, int n) {
  int k = a->n++;
  a->names[k] = (XLA_FFI_ByteSpan){name, strlen(name)};
  a->np[k] = &a->names[k];
  memcpy(a->vals[k], v, sizeof *v * (size_t)n);
  a->types[k] = XLA_FFI_AttrType_ARRAY;
  a->ar[k] = (XLA_FFI_Array){XLA_FFI_DataType_S64, (size_t)n, a->vals[k]};
  a->p[k] = &a->ar[k];
}

static XLA_FFI_Api api;

static XLA_FFI_Error *call(XLA_FFI_Error *(*handler)(XLA_FFI_CallFrame *),
                           bufs *args, bufs *rets, attrs *at) {
  static attrs none;
  if (!at) at = &none;
  XLA_FFI_CallFrame f;
  memset(&f, 0, sizeof f);
  f.struct_size = sizeof f;
  f.api = &api;
  f.stage = XLA_FFI_ExecutionStage_EXECUTE;
  f.args.size = args->n;
  f.args.types = (XLA_FFI_ArgType *)args->types;
  f.args.args = args->p;
  f.rets.size = rets->n;
  f.rets.types = (XLA_FFI_RetType *)rets->types;
  f.rets.rets = rets->p;
  f.attrs.size = at->n;
  f.attrs.types = at->types;
  f.attrs.names = at->np;
  f.attrs.attrs = at->p;
  XLA_FFI_Error *err = handler(&f);
  CHECK(pushed_now == 0, "a pushed context was not popped");
  return err;
}

/* ---- the scenarios ---------------------------------------------------------- */

#define COMM 7
#define SUM 3
#define F32 XLA_FFI_DataType_F32

/* A device array written by a kernel on XLA's stream (not yet run in the
 * LAZY mode): its contents, bytes `seed`-dependent. */
typedef struct darray {
  void *dev;
  unsigned char *host; /* what the kernel writes */
  size_t n;
  fill_arg fill;
  int written;
} darray;

static void darray_init(darray *a, size_t n, int seed) {
  a->n = n;
  a->dev = dev_alloc(n);
  if (!(a->host = malloc(n ? n : 1))) abort();
  for (size_t i = 0; i < n; i++) a->host[i] = (unsigned char)(seed * 17 + i);
  a->written = 0;
  a->fill = (fill_arg){a->dev, a->host, n, &a->written};
  kernel_copy(&a->fill);
}

static void darray_free(darray *a) {
  block_free(a->dev);
  free(a->host);
}

/* What XLA's program reads from `dev` after the wait: a kernel on its
 * stream, then the stream synchronised (as reading a result does). */
static void read_back(const void *dev, unsigned char *out, size_t n) {
  fill_arg a = {out, dev, n, NULL};
  kernel_copy(&a);
  run_stream(xla, xla->enq, 0);
}

static int same_pattern(const unsigned char *p, size_t n, int salt) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != pattern(salt, i)) return 0;
  return 1;
}

static void sync_all(void) {
  for (int i = 0; i < nstreams; i++) run_stream(&streams[i], streams[i].enq, 0);
}

/* The frame of a start: `args` device buffers (counts in F32 elements),
 * results the handle and `rets` (each aliased to one of args, or a new
 * buffer), plus the token on both sides. */
typedef struct start {
  bufs a, r;
  void *handle;
} start;

static void start_frame(start *s, void *const *args, const int64_t *nargs,
                        int na, void *const *rets, const int64_t *nrets,
                        int nr) {
  memset(s, 0, sizeof *s);
  s->handle = dev_alloc(4);
  for (int i = 0; i < na; i++) add(&s->a, args[i], F32, nargs[i]);
  add_token(&s->a);
  add(&s->r, s->handle, F32, -1);
  for (int i = 0; i < nr; i++) add(&s->r, rets[i], F32, nrets[i]);
  add_token(&s->r);
}

/* The wait's frame: the handle, the request's buffers, results those of
 * `results` (indices into bufs). */
static XLA_FFI_Error *wait(void *handle, void *const *bufsv,
                           const int64_t *counts, int nb, const int *results,
                           int nres) {
  bufs a = {0}, r = {0};
  add(&a, handle, F32, -1);
  for (int i = 0; i < nb; i++) add(&a, bufsv[i], F32, counts[i]);
  add_token(&a);
  for (int i = 0; i < nres; i++)
    add(&r, bufsv[results[i]], F32, counts[results[i]]);
  add_token(&r);
  return call(jaxmpi_ffi_wait_cuda, &a, &r, NULL);
}

static void begin(const char *name) {
  snprintf(scenario, sizeof scenario, "%s, %s%s%s", name,
           run_mode == LAZY ? "lazy" : "eager",
           other_ctx_current ? ", context pushed" : "",
           expect_aware ? ", CUDA-aware" : "");
  fail_at = 0;
  sync_all();
}

static void end(void) {
  sync_all();
  CHECK(jaxmpi_requests_in_flight() == 0, "%d requests left in flight",
        jaxmpi_requests_in_flight());
}

/* isend and irecv in flight together, waited in the other order, with the
 * GPU's computation between the starts and the waits. */
static void ring(void) {
  begin("isend + irecv");
  darray x, t;
  darray_init(&t, 24 * 4, 1); /* the template, written before the start */
  attrs ar = {0};
  attr(&ar, "comm", COMM);
  attr(&ar, "source", 0);
  attr(&ar, "tag", 5);
  attr(&ar, "status", 0);
  int64_t nt = 24, nx = 32;
  start rs;
  start_frame(&rs, &t.dev, &nt, 1, &t.dev, &nt, 1);
  int first = nreqs;
  CHECK(!failed(call(jaxmpi_ffi_irecv_cuda, &rs.a, &rs.r, &ar)), "irecv: %s",
        last_error);
  CHECK(nreqs == first + 1 && reqs[first].kind == F_RECV,
        "irecv posted no receive");
  if (run_mode == LAZY && !expect_aware)
    CHECK(!t.written, "a start that reads nothing waited for the GPU");

  darray_init(&x, 32 * 4, 2);
  attrs as = {0};
  attr(&as, "comm", COMM);
  attr(&as, "dest", 2);
  attr(&as, "tag", 5);
  start ss;
  start_frame(&ss, &x.dev, &nx, 1, &x.dev, &nx, 1);
  CHECK(!failed(call(jaxmpi_ffi_isend_cuda, &ss.a, &ss.r, &as)), "isend: %s",
        last_error);
  CHECK(x.written, "isend posted before its input was written");
  CHECK(nreqs == first + 2 && reqs[first + 1].kind == F_SEND &&
            reqs[first + 1].sbytes == x.n,
        "isend posted no send of its size");

  int computed = 0;
  kernel_count(&computed); /* the computation between start and wait */
  CHECK(!failed(wait(ss.handle, &x.dev, &nx, 1, NULL, 0)), "wait(isend): %s",
        last_error);
  CHECK(reqs[first + 1].sent && !memcmp(reqs[first + 1].sent, x.host, x.n),
        "the send did not carry the input");
  CHECK(!failed(wait(rs.handle, &t.dev, &nt, 1, (int[]){0}, 1)),
        "wait(irecv): %s", last_error);
  if (run_mode == LAZY)
    CHECK(!computed, "a wait synchronised XLA's stream: the GPU stopped");
  unsigned char got[24 * 4];
  read_back(t.dev, got, sizeof got);
  CHECK(same_pattern(got, sizeof got, reqs[first].salt),
        "the received message did not reach the result");
  end();
  darray_free(&x);
  darray_free(&t);
  block_free(rs.handle);
  block_free(ss.handle);
}

/* isendrecv: results [x, y]; the wait returns y. */
static void sendrecv(void) {
  begin("isendrecv");
  darray x, y;
  darray_init(&x, 10 * 4, 3);
  darray_init(&y, 6 * 4, 4);
  attrs at = {0};
  attr(&at, "comm", COMM);
  attr(&at, "source", 0);
  attr(&at, "dest", 2);
  attr(&at, "sendtag", 1);
  attr(&at, "recvtag", 2);
  attr(&at, "status", 0);
  void *bv[2] = {x.dev, y.dev};
  int64_t nv[2] = {10, 6};
  start s;
  start_frame(&s, bv, nv, 2, bv, nv, 2);
  int first = nreqs;
  CHECK(!failed(call(jaxmpi_ffi_isendrecv_cuda, &s.a, &s.r, &at)),
        "isendrecv: %s", last_error);
  int computed = 0;
  kernel_count(&computed);
  CHECK(!failed(wait(s.handle, bv, nv, 2, (int[]){1}, 1)), "wait: %s",
        last_error);
  if (run_mode == LAZY) CHECK(!computed, "the wait synchronised XLA's stream");
  CHECK(nreqs == first + 2 && reqs[first].kind == F_RECV &&
            reqs[first + 1].kind == F_SEND,
        "not a receive then a send");
  CHECK(reqs[first + 1].sent && !memcmp(reqs[first + 1].sent, x.host, x.n),
        "the send did not carry x");
  unsigned char gx[40], gy[24];
  read_back(y.dev, gy, sizeof gy);
  read_back(x.dev, gx, sizeof gx);
  CHECK(same_pattern(gy, sizeof gy, reqs[first].salt), "y is not the message");
  CHECK(!memcmp(gx, x.host, sizeof gx), "x changed");
  end();
  darray_free(&x);
  darray_free(&y);
  block_free(s.handle);
}

/* iallreduce in place, split into chunks of at most `limit` elements. */
static void allreduce(int64_t n, int64_t limit, XLA_FFI_DataType dtype) {
  char name[80];
  snprintf(name, sizeof name, "iallreduce of %lld in chunks of %lld, dtype %d",
           (long long)n, (long long)limit, (int)dtype);
  begin(name);
  jm_count.limit = limit;
  size_t el = jm_dtypes[dtype].size;
  darray x;
  darray_init(&x, (size_t)n * el, 5);
  attrs at = {0};
  attr(&at, "comm", COMM);
  attr(&at, "op", SUM);
  start s;
  memset(&s, 0, sizeof s);
  s.handle = dev_alloc(4);
  add(&s.a, x.dev, dtype, n);
  add_token(&s.a);
  add(&s.r, s.handle, F32, -1);
  add(&s.r, x.dev, dtype, n);
  add_token(&s.r);
  int first = nreqs;
  /* float16 reductions use jaxmpi's own MPI ops on the host: staged also
   * in CUDA-aware mode. */
  int aware = expect_aware;
  if (dtype == XLA_FFI_DataType_F16) expect_aware = 0;
  CHECK(!failed(call(jaxmpi_ffi_iallreduce_cuda, &s.a, &s.r, &at)),
        "iallreduce: %s", last_error);
  int chunks = (int)((n + limit - 1) / limit);
  CHECK(nreqs == first + chunks, "%d chunks posted, expected %d",
        nreqs - first, chunks);
  bufs a = {0}, r = {0};
  add(&a, s.handle, F32, -1);
  add(&a, x.dev, dtype, n);
  add_token(&a);
  add(&r, x.dev, dtype, n);
  add_token(&r);
  CHECK(!failed(call(jaxmpi_ffi_wait_cuda, &a, &r, NULL)), "wait: %s",
        last_error);
  expect_aware = aware;
  unsigned char *got = malloc(x.n);
  if (!got) abort();
  read_back(x.dev, got, x.n);
  for (int k = 0; k < chunks && nreqs == first + chunks; k++) {
    freq *q = &reqs[first + k];
    size_t off = (size_t)(k * limit) * el;
    CHECK(q->sent && q->sbytes == q->rbytes &&
              !memcmp(q->sent, x.host + off, q->sbytes),
          "chunk %d reduced other data than the input's", k);
    CHECK(same_pattern(got + off, q->rbytes, q->salt),
          "chunk %d's result is not MPI's", k);
  }
  free(got);
  jm_count.limit = INT_MAX;
  end();
  darray_free(&x);
  block_free(s.handle);
}

/* ibcast on a rank that receives, and on the root (its x passed through:
 * copied back unchanged). */
static void bcast(int root) {
  begin(root == RANK ? "ibcast, root" : "ibcast, not the root");
  darray x;
  darray_init(&x, 12 * 4, 6);
  attrs at = {0};
  attr(&at, "comm", COMM);
  attr(&at, "root", root);
  int64_t n = 12;
  start s;
  start_frame(&s, &x.dev, &n, 1, &x.dev, &n, 1);
  int first = nreqs;
  CHECK(!failed(call(jaxmpi_ffi_ibcast_cuda, &s.a, &s.r, &at)), "ibcast: %s",
        last_error);
  CHECK(!failed(wait(s.handle, &x.dev, &n, 1, (int[]){0}, 1)), "wait: %s",
        last_error);
  unsigned char got[48];
  read_back(x.dev, got, sizeof got);
  if (root == RANK) {
    CHECK(reqs[first].sent && !memcmp(reqs[first].sent, x.host, 48),
          "the root did not send x");
    CHECK(!memcmp(got, x.host, 48), "the root's x changed");
  } else {
    CHECK(same_pattern(got, 48, reqs[first].salt), "not the root's data");
  }
  end();
  darray_free(&x);
  block_free(s.handle);
}

/* igather at the root: results [xs, y]; the wait returns y. */
static void gather(void) {
  begin("igather, root");
  darray x, y;
  darray_init(&x, 4 * 4, 7);
  darray_init(&y, SIZE * 4 * 4, 8);
  attrs at = {0};
  attr(&at, "comm", COMM);
  attr(&at, "root", RANK);
  void *bv[2] = {x.dev, y.dev};
  int64_t nv[2] = {4, SIZE * 4};
  start s;
  memset(&s, 0, sizeof s);
  s.handle = dev_alloc(4);
  add(&s.a, x.dev, F32, 4);
  add_token(&s.a);
  add(&s.r, s.handle, F32, -1);
  add(&s.r, x.dev, F32, 4);
  add(&s.r, y.dev, F32, SIZE * 4);
  add_token(&s.r);
  int first = nreqs;
  CHECK(!failed(call(jaxmpi_ffi_igather_cuda, &s.a, &s.r, &at)),
        "igather: %s", last_error);
  CHECK(!failed(wait(s.handle, bv, nv, 2, (int[]){1}, 1)), "wait: %s",
        last_error);
  unsigned char got[SIZE * 16];
  read_back(y.dev, got, sizeof got);
  CHECK(reqs[first].sent && !memcmp(reqs[first].sent, x.host, 16),
        "the root did not send x");
  CHECK(same_pattern(got, sizeof got, reqs[first].salt),
        "y is not what MPI gathered");
  end();
  darray_free(&x);
  darray_free(&y);
  block_free(s.handle);
}

/* Two pairs: results [x0, x1, y0, y1]; the wait returns the y's. */
static void exchange(void) {
  begin("ineighbor_exchange");
  darray x0, x1, y0, y1;
  darray_init(&x0, 8, 9);
  darray_init(&x1, 12, 10);
  darray_init(&y0, 16, 11);
  darray_init(&y1, 4, 12);
  attrs at = {0};
  attr(&at, "comm", COMM);
  attr_array(&at, "sources", (int64_t[]){0, 2}, 2);
  attr_array(&at, "dests", (int64_t[]){2, 0}, 2);
  attr(&at, "tag", 3);
  void *av[2] = {x0.dev, x1.dev};
  int64_t an[2] = {2, 3};
  void *bv[4] = {x0.dev, x1.dev, y0.dev, y1.dev};
  int64_t bn[4] = {2, 3, 4, 1};
  start s;
  start_frame(&s, av, an, 2, bv, bn, 4);
  int first = nreqs;
  CHECK(!failed(call(jaxmpi_ffi_ineighbor_exchange_cuda, &s.a, &s.r, &at)),
        "ineighbor_exchange: %s", last_error);
  CHECK(!failed(wait(s.handle, bv, bn, 4, (int[]){2, 3}, 2)), "wait: %s",
        last_error);
  CHECK(nreqs == first + 4, "%d MPI calls, not 4", nreqs - first);
  unsigned char g0[16], g1[4];
  read_back(y0.dev, g0, 16);
  read_back(y1.dev, g1, 4);
  CHECK(same_pattern(g0, 16, reqs[first].salt), "y0 is not message 0");
  CHECK(same_pattern(g1, 4, reqs[first + 1].salt), "y1 is not message 1");
  CHECK(reqs[first + 2].sent && !memcmp(reqs[first + 2].sent, x0.host, 8) &&
            reqs[first + 3].sent && !memcmp(reqs[first + 3].sent, x1.host, 12),
        "the sends did not carry x0 and x1");
  end();
  darray_free(&x0);
  darray_free(&x1);
  darray_free(&y0);
  darray_free(&y1);
  block_free(s.handle);
}

/* iallgatherv: counts differ per rank; results [x, y], the wait returns y. */
static void allgatherv(void) {
  begin("iallgatherv");
  const int64_t counts[SIZE] = {2, 3, 1};
  darray x, y;
  darray_init(&x, 3 * 2 * 4, 13); /* counts[RANK] rows of 2 */
  darray_init(&y, 6 * 2 * 4, 14);
  attrs at = {0};
  attr(&at, "comm", COMM);
  attr_array(&at, "counts", counts, SIZE);
  start s;
  memset(&s, 0, sizeof s);
  s.handle = dev_alloc(4);
  s.a.dims[0][1] = s.r.dims[1][1] = s.r.dims[2][1] = 2;
  add(&s.a, x.dev, F32, 3);
  add_token(&s.a);
  add(&s.r, s.handle, F32, -1);
  add(&s.r, x.dev, F32, 3);
  add(&s.r, y.dev, F32, 6);
  add_token(&s.r);
  for (int i = 0; i < 3; i++) { /* rows of 2 */
    XLA_FFI_Buffer *b = i == 0 ? &s.a.b[0] : &s.r.b[i];
    b->rank = 2;
    b->dims = i == 0 ? s.a.dims[0] : s.r.dims[i];
    ((int64_t *)b->dims)[1] = 2;
  }
  int first = nreqs;
  CHECK(!failed(call(jaxmpi_ffi_iallgatherv_cuda, &s.a, &s.r, &at)),
        "iallgatherv: %s", last_error);
  void *bv[2] = {x.dev, y.dev};
  int64_t bn[2] = {6, 12};
  CHECK(!failed(wait(s.handle, bv, bn, 2, (int[]){1}, 1)), "wait: %s",
        last_error);
  unsigned char got[48];
  read_back(y.dev, got, sizeof got);
  CHECK(nreqs == first + 1 && reqs[first].sent &&
            !memcmp(reqs[first].sent, x.host, 24),
        "x was not sent");
  CHECK(reqs[first].rbytes == 48 && same_pattern(got, 48, reqs[first].salt),
        "y is not what MPI gathered");
  end();
  darray_free(&x);
  darray_free(&y);
  block_free(s.handle);
}

/* ibarrier: no buffer, found by its handle's address alone. */
static void barrier(void) {
  begin("ibarrier");
  int before = 0, computed = 0;
  kernel_count(&before);
  bufs a = {0}, r = {0};
  void *h = dev_alloc(4);
  add_token(&a);
  add(&r, h, F32, -1);
  add_token(&r);
  attrs at = {0};
  attr(&at, "comm", COMM);
  CHECK(!failed(call(jaxmpi_ffi_ibarrier_cuda, &a, &r, &at)), "ibarrier: %s",
        last_error);
  if (run_mode == LAZY) CHECK(!before, "ibarrier waited for the GPU");
  kernel_count(&computed);
  CHECK(!failed(wait(h, NULL, NULL, 0, NULL, 0)), "wait: %s", last_error);
  if (run_mode == LAZY) CHECK(!computed, "the wait synchronised XLA's stream");
  end();
  block_free(h);
}

/* A receive from MPI.PROC_NULL: zeros. */
static void proc_null(void) {
  begin("irecv from PROC_NULL");
  darray t;
  darray_init(&t, 20, 15);
  attrs at = {0};
  attr(&at, "comm", COMM);
  attr(&at, "source", -1);
  attr(&at, "tag", 0);
  attr(&at, "status", 0);
  int64_t n = 5;
  start s;
  start_frame(&s, &t.dev, &n, 1, &t.dev, &n, 1);
  CHECK(!failed(call(jaxmpi_ffi_irecv_cuda, &s.a, &s.r, &at)), "irecv: %s",
        last_error);
  CHECK(!failed(wait(s.handle, &t.dev, &n, 1, (int[]){0}, 1)), "wait: %s",
        last_error);
  unsigned char got[20], zeros[20] = {0};
  read_back(t.dev, got, 20);
  CHECK(!memcmp(got, zeros, 20), "not zeros");
  end();
  darray_free(&t);
  block_free(s.handle);
}

/* XLA moved the handle (a copy to another buffer): the wait reads it from
 * the device, after the GPU work before it. */
static void moved_handle(void) {
  begin("handle copied by XLA");
  darray t;
  darray_init(&t, 16, 16);
  attrs at = {0};
  attr(&at, "comm", COMM);
  attr(&at, "source", 0);
  attr(&at, "tag", 1);
  attr(&at, "status", 0);
  int64_t n = 4;
  start s;
  start_frame(&s, &t.dev, &n, 1, &t.dev, &n, 1);
  int first = nreqs;
  CHECK(!failed(call(jaxmpi_ffi_irecv_cuda, &s.a, &s.r, &at)), "irecv: %s",
        last_error);
  void *h2 = dev_alloc(4);
  int copied = 0;
  fill_arg cp = {h2, s.handle, 4, &copied};
  kernel_copy(&cp);
  CHECK(!failed(wait(h2, &t.dev, &n, 1, (int[]){0}, 1)), "wait: %s",
        last_error);
  CHECK(copied, "the handle was read before XLA wrote it");
  unsigned char got[16];
  read_back(t.dev, got, 16);
  CHECK(same_pattern(got, 16, reqs[first].salt), "not the message");
  end();
  darray_free(&t);
  block_free(s.handle);
  block_free(h2);
}

/* XLA handed the wait another buffer: an error, the request completed. */
static void moved_buffer(void) {
  begin("buffer copied by XLA");
  darray t;
  darray_init(&t, 16, 17);
  attrs at = {0};
  attr(&at, "comm", COMM);
  attr(&at, "source", 0);
  attr(&at, "tag", 1);
  attr(&at, "status", 0);
  int64_t n = 4;
  start s;
  start_frame(&s, &t.dev, &n, 1, &t.dev, &n, 1);
  CHECK(!failed(call(jaxmpi_ffi_irecv_cuda, &s.a, &s.r, &at)), "irecv: %s",
        last_error);
  void *other = dev_alloc(16);
  CHECK(failed(wait(s.handle, &other, &n, 1, (int[]){0}, 1)) &&
            strstr(last_error, "other buffers than the request uses"),
        "no error for a moved buffer: '%s'", last_error);
  end();
  darray_free(&t);
  block_free(s.handle);
  block_free(other);
}

/* A blocking op between a start and its wait takes staging of its own:
 * the request's staging is not lent while MPI may read it. */
static void blocking_between(void) {
  begin("blocking allreduce between isend and its wait");
  darray x, z;
  darray_init(&x, 64, 18);
  darray_init(&z, 64, 19);
  attrs as = {0};
  attr(&as, "comm", COMM);
  attr(&as, "dest", 0);
  attr(&as, "tag", 9);
  int64_t n = 16;
  start s;
  start_frame(&s, &x.dev, &n, 1, &x.dev, &n, 1);
  int first = nreqs;
  CHECK(!failed(call(jaxmpi_ffi_isend_cuda, &s.a, &s.r, &as)), "isend: %s",
        last_error);
  if (!expect_aware) {
    bufs a = {0}, r = {0};
    add(&a, z.dev, F32, 16);
    add_token(&a);
    add(&r, z.dev, F32, 16);
    add_token(&r);
    attrs ar = {0};
    attr(&ar, "comm", COMM);
    attr(&ar, "op", SUM);
    CHECK(!failed(call(jaxmpi_ffi_allreduce_cuda, &a, &r, &ar)),
          "allreduce: %s", last_error);
    /* The blocking path too: the input staged before MPI is called, the
     * result on the device after. */
    CHECK(!memcmp(blocking_sent, z.host, 64),
          "the blocking allreduce got its input before it was staged");
    unsigned char got[64], want[64];
    memset(want, 0x33, 64);
    read_back(z.dev, got, 64);
    CHECK(!memcmp(got, want, 64), "the blocking allreduce's result is lost");
  }
  CHECK(!failed(wait(s.handle, &x.dev, &n, 1, NULL, 0)), "wait: %s",
        last_error);
  CHECK(reqs[first].sent && !memcmp(reqs[first].sent, x.host, 64),
        "the send's staging was overwritten while in flight");
  end();
  darray_free(&x);
  darray_free(&z);
  block_free(s.handle);
}

/* A CUDA error at each driver call of a start and of its wait: an error
 * naming CUDA's message, never a crash; a start that fails leaves no
 * request, a wait that fails before it found its request can be retried. */
static void cuda_errors(int moved) {
  for (int k = 1; k <= 40; k++) {
    char name[80];
    snprintf(name, sizeof name, "CUDA error at call %d (%s)", k,
             moved ? "handle moved" : "irecv + isend");
    begin(name);
    darray x, t;
    darray_init(&x, 32, 20);
    darray_init(&t, 32, 21);
    attrs as = {0};
    attr(&as, "comm", COMM);
    attr(&as, "source", 0);
    attr(&as, "dest", 2);
    attr(&as, "sendtag", 1);
    attr(&as, "recvtag", 1);
    attr(&as, "status", 0);
    void *bv[2] = {x.dev, t.dev};
    int64_t nv[2] = {8, 8};
    start s;
    start_frame(&s, bv, nv, 2, bv, nv, 2);
    void *h = s.handle;
    int copied = 0;
    fill_arg cp;
    if (moved) h = dev_alloc(4);
    driver_calls = 0;
    fail_at = k;
    if (failed(call(jaxmpi_ffi_isendrecv_cuda, &s.a, &s.r, &as))) {
      CHECK(strstr(last_error, "CUDA error 700") &&
                strstr(last_error, "an illegal memory access"),
            "start: not CUDA's error: '%s'", last_error);
      CHECK(jaxmpi_requests_in_flight() == 0, "a failed start left a request");
    } else {
      if (moved) {
        cp = (fill_arg){h, s.handle, 4, &copied};
        kernel_copy(&cp);
      }
      int tries = 0;
      while (failed(wait(h, bv, nv, 2, (int[]){1}, 1)) && tries++ < 2) {
        CHECK(strstr(last_error, "CUDA error 700"),
              "wait: not CUDA's error: '%s'", last_error);
        fail_at = 0; /* retry: the request is still there, or gone */
        if (!jaxmpi_requests_in_flight()) break;
      }
      if (!last_error[0]) {
        unsigned char got[32];
        int at = nreqs - 2;
        read_back(t.dev, got, 32);
        CHECK(same_pattern(got, 32, reqs[at].salt), "not the message");
      }
    }
    fail_at = 0;
    end();
    darray_free(&x);
    darray_free(&t);
    block_free(s.handle);
    if (moved) block_free(h);
  }
}

static void all_scenarios(void) {
  ring();
  sendrecv();
  allreduce(12, INT_MAX, F32);
  allreduce(13, 5, F32);
  allreduce(9, INT_MAX, XLA_FFI_DataType_F16);
  bcast(0);
  bcast(RANK);
  gather();
  exchange();
  allgatherv();
  barrier();
  proc_null();
  moved_handle();
  moved_buffer();
  blocking_between();
}

int main(void) {
  bind_mpi();
  api.XLA_FFI_Error_Create = error_create;
  api.XLA_FFI_Stream_Get = stream_get;
  xla = &streams[nstreams++];
  jm_cuda_use(&fake_cuda);
  jaxmpi_set_async(0); /* no progress thread: the harness completes */
  for (int aware = 0; aware <= 1; aware++) {
    expect_aware = aware;
    jm_cuda_configure(aware, 1 << 16);
    for (run_mode = LAZY; run_mode <= EAGER; run_mode++)
      for (other_ctx_current = 0; other_ctx_current <= 1; other_ctx_current++)
        all_scenarios();
  }
  expect_aware = 0;
  jm_cuda_configure(0, 1 << 16);
  for (run_mode = LAZY; run_mode <= EAGER; run_mode++) {
    cuda_errors(0);
    cuda_errors(1);
  }
  jm_cfg.debug = 1; /* the debug log's lines for the GPU path, once */
  run_mode = LAZY;
  ring();
  jm_cfg.debug = 0;

  for (int i = 0; i < nreqs; i++) free(reqs[i].sent);
  for (int i = 0; i < nstreams; i++) free(streams[i].ops);
  if (failures) {
    fprintf(stderr, "%d of %d checks failed\n", failures, checks);
    return 1;
  }
  printf("gpu_requests: all %d checks passed\n", checks);
  return 0;
}
