/* libFuzzer harness over the XLA FFI boundary of the C core: every fuzz input
 * becomes one call frame (buffers of any element type, rank and size, tokens,
 * attributes of any name, kind and type) handed to jm_dispatch for one of the
 * ops of ops.h. The MPI function table is bound to stubs that do nothing, so
 * the decoders, the handlers' checks and their memory accesses run exactly as
 * in production, without MPI. Some frames go to the CUDA handlers, with a
 * stand-in CUDA driver whose "device" memory is host memory and whose calls
 * fail where the input says: the staging path (buffer sharing, the pinned
 * buffer cache, every error unwind) runs under ASan too. Build and run:
 * tests/fuzz/run.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_staging.h"
#include "ffi.h"
#include "handlers.h"

/* ---- a minimal XLA_FFI_Api: errors are heap strings ---------------------- */

struct XLA_FFI_Error {
  char *message;
};

static XLA_FFI_Error *error_create(XLA_FFI_Error_Create_Args *args) {
  XLA_FFI_Error *e = malloc(sizeof *e);
  if (!e) abort();
  const char *m = args->message ? args->message : "";
  size_t len = strlen(m) + 1;
  if (!(e->message = malloc(len))) abort();
  memcpy(e->message, m, len);
  return e;
}

static void error_free(XLA_FFI_Error *e) {
  if (!e) return;
  if (!memchr(e->message, 0, 2048)) abort(); /* messages are terminated */
  free(e->message);
  free(e);
}

/* ---- a stand-in CUDA driver ----------------------------------------------- */

/* fail_at: the number of driver calls after which one fails (0: none). */
static int fail_at, driver_calls, no_stream;
static CUresult fake_rc(void) {
  return ++driver_calls == fail_at ? 700 /* CUDA_ERROR_ILLEGAL_ADDRESS */ : 0;
}

/* Pinned "host" allocations stay linked from here, so the memory the core
 * abandons after a failed synchronisation is reachable, not a leak. */
typedef struct pinned {
  struct pinned *prev, *next;
  max_align_t align[];
} pinned;
static pinned live = {&live, &live};

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
static CUcontext the_ctx = (CUcontext)16, other_ctx = (CUcontext)32;
static CUresult f_ctx_current(CUcontext *c) {
  *c = driver_calls & 1 ? other_ctx : the_ctx;
  return fake_rc();
}
static CUresult f_ctx_push(CUcontext c) { (void)c; return fake_rc(); }
static CUresult f_ctx_pop(CUcontext *c) { *c = the_ctx; return fake_rc(); }
static CUresult f_stream_ctx(CUstream s, CUcontext *c) {
  (void)s;
  *c = the_ctx;
  return fake_rc();
}
static CUresult f_sync(CUstream s) { (void)s; return fake_rc(); }
static CUresult f_host_alloc(void **p, size_t n, unsigned f) {
  (void)f;
  CUresult rc = fake_rc();
  if (rc) return rc;
  pinned *b = malloc(sizeof *b + n);
  if (!b) abort();
  b->prev = &live;
  b->next = live.next;
  live.next->prev = b;
  live.next = b;
  *p = b->align;
  return 0;
}
static CUresult f_free_host(void *p) {
  pinned *b = (pinned *)((char *)p - offsetof(pinned, align));
  b->prev->next = b->next;
  b->next->prev = b->prev;
  free(b);
  return 0;
}
static CUresult f_dtoh(void *d, CUdeviceptr s, size_t n, CUstream st) {
  (void)st;
  CUresult rc = fake_rc();
  if (!rc) memcpy(d, (const void *)(uintptr_t)s, n);
  return rc;
}
static CUresult f_htod(CUdeviceptr d, const void *s, size_t n, CUstream st) {
  (void)st;
  CUresult rc = fake_rc();
  if (!rc) memcpy((void *)(uintptr_t)d, s, n);
  return rc;
}
static CUresult f_dtod(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  (void)st;
  CUresult rc = fake_rc();
  if (!rc) memmove((void *)(uintptr_t)d, (const void *)(uintptr_t)s, n);
  return rc;
}
static CUresult f_memset(CUdeviceptr d, unsigned char v, size_t n,
                         CUstream st) {
  (void)st;
  CUresult rc = fake_rc();
  if (!rc) memset((void *)(uintptr_t)d, v, n);
  return rc;
}
/* The non-blocking starts' calls (tests/fuzz/gpu_requests.c runs those):
 * present, so that the table is whole. */
static CUresult f_memset32(CUdeviceptr d, unsigned v, size_t n, CUstream st) {
  (void)st;
  CUresult rc = fake_rc();
  for (size_t i = 0; !rc && i < n; i++)
    memcpy((char *)(uintptr_t)d + 4 * i, &v, 4);
  return rc;
}
static CUresult f_stream_create(CUstream *s, unsigned f) {
  (void)f;
  *s = (CUstream)64;
  return fake_rc();
}
static CUresult f_stream_wait(CUstream s, CUevent e, unsigned f) {
  (void)s; (void)e; (void)f;
  return fake_rc();
}
static CUresult f_event_create(CUevent *e, unsigned f) {
  (void)f;
  CUresult rc = fake_rc();
  if (!rc) {
    *e = (CUevent)malloc(8); /* ASan reports a double destroy, LSan a leak */
  }
  return rc;
}
static CUresult f_event_record(CUevent e, CUstream s) {
  (void)e; (void)s;
  return fake_rc();
}
static CUresult f_event_sync(CUevent e) { (void)e; return fake_rc(); }
static CUresult f_event_destroy(CUevent e) {
  free(e);
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
    .MemsetD8Async = f_memset, .MemsetD32Async = f_memset32,
    .StreamCreate = f_stream_create, .StreamWaitEvent = f_stream_wait,
    .EventCreate = f_event_create,
    .EventRecord = f_event_record, .EventSynchronize = f_event_sync,
    .EventDestroy = f_event_destroy};

static XLA_FFI_Error *stream_get(XLA_FFI_Stream_Get_Args *args) {
  if (no_stream) {
    XLA_FFI_Error_Create_Args e = {0};
    e.message = "XLA FFI GPU context is not available";
    return error_create(&e);
  }
  args->stream = (void *)48;
  return NULL;
}

/* ---- MPI stubs: succeed, deliver nothing --------------------------------- */

static int st_rank = 0, st_size = 1;
static int s_comm_rank(jm_Comm c, int *r) { (void)c; *r = st_rank; return 0; }
static int s_comm_size(jm_Comm c, int *s) { (void)c; *s = st_size; return 0; }
static double s_wtime(void) { return 0.0; }
static int s_error_string(int rc, char *s, int *n) {
  (void)rc;
  strcpy(s, "stub error");
  *n = 10;
  return 0;
}
static int s_error_class(int rc, int *c) { *c = rc; return 0; }
static int s_get_count(const jm_Status *st, jm_Datatype t, int *n) {
  (void)t;
  *n = st->count_lo;
  return 0;
}
#define UNUSED3(a, b, c) ((void)(a), (void)(b), (void)(c))
static int s_allreduce(const void *s, void *r, int n, jm_Datatype t, jm_Op o,
                       jm_Comm c) { UNUSED3(s, r, n); UNUSED3(t, o, c); return 0; }
static int s_reduce(const void *s, void *r, int n, jm_Datatype t, jm_Op o,
                    int root, jm_Comm c) {
  UNUSED3(s, r, n); UNUSED3(t, o, c); (void)root; return 0;
}
static int s_bcast(void *b, int n, jm_Datatype t, int root, jm_Comm c) {
  UNUSED3(b, n, t); (void)root; (void)c; return 0;
}
static int s_rooted(const void *s, int sn, jm_Datatype st, void *r, int rn,
                    jm_Datatype rt, int root, jm_Comm c) {
  UNUSED3(s, sn, st); UNUSED3(r, rn, rt); (void)root; (void)c; return 0;
}
static int s_all(const void *s, int sn, jm_Datatype st, void *r, int rn,
                 jm_Datatype rt, jm_Comm c) {
  UNUSED3(s, sn, st); UNUSED3(r, rn, rt); (void)c; return 0;
}
static int s_rsblock(const void *s, void *r, int n, jm_Datatype t, jm_Op o,
                     jm_Comm c) { UNUSED3(s, r, n); UNUSED3(t, o, c); return 0; }
static volatile int rs_sink;
static int s_rscounts(const void *s, void *r, const int *counts,
                      jm_Datatype t, jm_Op o, jm_Comm c) {
  UNUSED3(s, r, t); (void)o; (void)c;
  for (int i = 0; i < st_size; i++) rs_sink += counts[i]; /* MPI reads them */
  return 0;
}
static int s_barrier(jm_Comm c) { (void)c; return 0; }
static int s_send(const void *b, int n, jm_Datatype t, int d, int tag,
                  jm_Comm c) { UNUSED3(b, n, t); UNUSED3(d, tag, c); return 0; }
static void fill_status(jm_Status *st, int src, int bytes) {
  if (!st) return;
  memset(st, 0, sizeof *st);
  st->MPI_SOURCE = src;
  st->count_lo = bytes;
}
static int s_recv(void *b, int n, jm_Datatype t, int src, int tag, jm_Comm c,
                  jm_Status *st) {
  UNUSED3(b, t, tag); (void)c;
  fill_status(st, src, n); /* claims n bytes: right only for 1-byte types */
  return 0;
}
static int s_sendrecv(const void *s, int sn, jm_Datatype st, int d, int stag,
                      void *r, int rn, jm_Datatype rt, int src, int rtag,
                      jm_Comm c, jm_Status *status) {
  UNUSED3(s, sn, st); UNUSED3(d, stag, r); UNUSED3(rt, rtag, c);
  fill_status(status, src, rn);
  return 0;
}
static int s_isend(const void *b, int n, jm_Datatype t, int d, int tag,
                   jm_Comm c, jm_Request *q) {
  UNUSED3(b, n, t); UNUSED3(d, tag, c); *q = 1; return 0;
}
static int s_irecv(void *b, int n, jm_Datatype t, int src, int tag, jm_Comm c,
                   jm_Request *q) {
  UNUSED3(b, n, t); UNUSED3(src, tag, c); *q = 2; return 0;
}
static int s_waitall(int n, jm_Request *q, jm_Status *st) {
  for (int i = 0; i < n; i++) {
    if (q[i] != 1 && q[i] != 2) abort(); /* a request never posted */
    fill_status(&st[i], 0, 0);
  }
  return 0;
}
static int s_wait(jm_Request *q, jm_Status *st) { (void)q; fill_status(st, 0, 0); return 0; }
static int s_req(jm_Request *q) { (void)q; return 0; }
static int s_test(jm_Request *q, int *done, jm_Status *st) {
  (void)q; *done = 1; fill_status(st, 0, 0); return 0;
}
static int s_iprobe(int src, int tag, jm_Comm c, int *found, jm_Status *st) {
  (void)tag; (void)c; *found = 1; fill_status(st, src, 0); return 0;
}

/* The v-forms: read every count and displacement MPI would read (ASan
 * checks the arrays), on the st_size ranks. */
static volatile int v_sink;
static void v_read(const int *a, const int *b) {
  for (int i = 0; a && i < st_size; i++) v_sink += a[i] + (b ? b[i] : 0);
}
static int s_allgatherv(const void *s, int sn, jm_Datatype st, void *r,
                        const int *rc, const int *rd, jm_Datatype rt,
                        jm_Comm c) {
  UNUSED3(s, sn, st); UNUSED3(r, rt, c); v_read(rc, rd); return 0;
}
static int s_gatherv(const void *s, int sn, jm_Datatype st, void *r,
                     const int *rc, const int *rd, jm_Datatype rt, int root,
                     jm_Comm c) {
  UNUSED3(s, sn, st); UNUSED3(r, rt, c); (void)root; v_read(rc, rd); return 0;
}
static int s_scatterv(const void *s, const int *sc, const int *sd,
                      jm_Datatype st, void *r, int rn, jm_Datatype rt,
                      int root, jm_Comm c) {
  UNUSED3(s, st, r); UNUSED3(rn, rt, c); (void)root; v_read(sc, sd); return 0;
}
static int s_alltoallv(const void *s, const int *sc, const int *sd,
                       jm_Datatype st, void *r, const int *rc, const int *rd,
                       jm_Datatype rt, jm_Comm c) {
  UNUSED3(s, st, r); UNUSED3(rt, c, 0); v_read(sc, sd); v_read(rc, rd);
  return 0;
}
static int s_ialltoall(const void *s, int sn, jm_Datatype st, void *r, int rn,
                       jm_Datatype rt, jm_Comm c, jm_Request *q) {
  /* The check of alltoallv's pairs: one int64 per rank each way. */
  if (sn > 0) memcpy(r, s, (size_t)sn * (size_t)st_size);
  UNUSED3(st, rn, rt); (void)c; *q = 1; return 0;
}

static void bind_stubs(void) {
  memset(&jm_mpi, 0, sizeof jm_mpi); /* anything else is NULL: a crash */
  jm_mpi.Comm_rank = s_comm_rank;
  jm_mpi.Comm_size = s_comm_size;
  jm_mpi.Wtime = s_wtime;
  jm_mpi.Error_string = s_error_string;
  jm_mpi.Error_class = s_error_class;
  jm_mpi.Get_count = s_get_count;
  jm_mpi.Allreduce = s_allreduce;
  jm_mpi.Reduce = s_reduce;
  jm_mpi.Scan = s_allreduce;
  jm_mpi.Exscan = s_allreduce;
  jm_mpi.Reduce_scatter_block = s_rsblock;
  jm_mpi.Reduce_scatter = s_rscounts;
  jm_mpi.Bcast = s_bcast;
  jm_mpi.Gather = s_rooted;
  jm_mpi.Scatter = s_rooted;
  jm_mpi.Allgather = s_all;
  jm_mpi.Alltoall = s_all;
  jm_mpi.Allgatherv = s_allgatherv;
  jm_mpi.Gatherv = s_gatherv;
  jm_mpi.Scatterv = s_scatterv;
  jm_mpi.Alltoallv = s_alltoallv;
  jm_mpi.Ialltoall = s_ialltoall;
  jm_mpi.Barrier = s_barrier;
  jm_mpi.Send = s_send;
  jm_mpi.Recv = s_recv;
  jm_mpi.Sendrecv = s_sendrecv;
  jm_mpi.Isend = s_isend;
  jm_mpi.Irecv = s_irecv;
  jm_mpi.Waitall = s_waitall;
  jm_mpi.Wait = s_wait;
  jm_mpi.Cancel = s_req;
  jm_mpi.Request_free = s_req;
  jm_mpi.Test = s_test;     /* a send to itself: done at once */
  jm_mpi.Iprobe = s_iprobe; /* a receive from itself: a message waits */
  /* The checks need a real MPI (the shadow communicator): off here. */
  jm_check_set(JM_CHECK_OFF);
  jm_const.proc_null = -1;
  jm_const.undefined = -32766;
  for (int i = 0; i < JM_NDTYPES; i++)
    jm_dtypes[i].has_mpi = jm_dtypes[i].name != NULL;
}

/* ---- the op table, with the real handlers -------------------------------- */

#define JM_FUZZ_DESC(name, nargs, nrets, templates, payload, attrs)            \
  {JM_OP_##name, JM_BLOCKING,   #name,       nargs, nrets, templates,          \
   payload,      attrs,         jm_run_##name, jm_cuda_run, NULL},
static const jm_op_desc ops[] = {JM_OPS(JM_FUZZ_DESC)};
#undef JM_FUZZ_DESC
#define NOPS ((int)(sizeof ops / sizeof ops[0]))

/* ---- reading the fuzz input ----------------------------------------------- */

typedef struct {
  const uint8_t *p;
  size_t n;
} input;

static uint8_t take(input *in) {
  if (!in->n) return 0;
  in->n--;
  return *in->p++;
}

static int64_t take64(input *in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | take(in);
  int64_t out;
  memcpy(&out, &v, sizeof out);
  return out;
}

#define MAXB 40 /* more than JM_MAX_BUFFERS: the decoder must refuse them */
#define MAXA 14
#define ARENA (1 << 16)

static const char *const names[] = {
    "comm", "dest", "dests", "op", "recvtag", "root", "sendtag",
    "source", "sources", "status", "tag", "bogus", "", "tagx", "counts",
    "sendcounts", "recvcounts"};

/* The attributes ops.h declares, to build frames that reach the handlers. */
static const struct {
  const char *name;
  int array;
} declared[] = {
#define JM_FUZZ_ATTR(name, kind) {#name, #kind[0] == 'A'},
    JM_ATTRS(JM_FUZZ_ATTR)
#undef JM_FUZZ_ATTR
};
static const int valid_dtypes[] = {
    XLA_FFI_DataType_PRED, XLA_FFI_DataType_S8,  XLA_FFI_DataType_S32,
    XLA_FFI_DataType_U8,   XLA_FFI_DataType_F16, XLA_FFI_DataType_F32,
    XLA_FFI_DataType_F64,  XLA_FFI_DataType_C64, XLA_FFI_DataType_C128,
    XLA_FFI_DataType_TOKEN};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int bound;
  if (!bound) {
    bind_stubs();
    jm_cuda_use(&fake_cuda);
    jm_cuda_configure(0, 1 << 14); /* a small cache: eviction runs too */
    bound = 1;
  }
  input in = {data, size};
  const jm_op_desc *desc = &ops[take(&in) % NOPS];
  st_size = 1 + take(&in) % 5;
  st_rank = take(&in) % st_size;

  static XLA_FFI_Api api;
  api.XLA_FFI_Error_Create = error_create;
  api.XLA_FFI_Stream_Get = stream_get;

  /* buffers: arguments, then results */
  static XLA_FFI_Buffer bufs[2][MAXB];
  static int64_t dims[2][MAXB][4];
  static void *ptrs[2][MAXB];
  static int types[2][MAXB];
  static unsigned char *arena;
  /* ARENA for sized buffers, plus 16 bytes for each one that did not fit */
  if (!arena && !(arena = malloc(ARENA + 2 * MAXB * 16))) abort();
  size_t used = 0;
  int64_t counts[2];
  /* mode bit 0: the op's own attributes; bit 1: its buffer counts and
   * element types; bit 2: results shaped like the first argument; bit 3:
   * the CUDA handler; bit 4: result 0 aliased to argument 0 (in place);
   * bit 5: CUDA-aware mode; bit 6: no stream from XLA */
  const uint8_t mode = take(&in);
  const uint8_t fail = take(&in);
  for (int side = 0; side < 2; side++) {
    int want = side ? desc->nrets : desc->nargs;
    if (want == JM_VARIADIC) want = take(&in) % 5;
    counts[side] = (mode & 2) ? want + (take(&in) % 4 == 0) : take(&in) % MAXB;
    for (int64_t i = 0; i < counts[side]; i++) {
      XLA_FFI_Buffer *b = &bufs[side][i];
      memset(b, 0, sizeof *b);
      b->struct_size = sizeof *b;
      uint8_t t = take(&in);
      b->dtype = (XLA_FFI_DataType)((mode & 2)
          ? valid_dtypes[t % (sizeof valid_dtypes / sizeof valid_dtypes[0])]
          : t % 40);
      b->rank = take(&in) % 5;
      b->dims = dims[side][i];
      int64_t n = 1;
      for (int64_t d = 0; d < b->rank; d++) {
        dims[side][i][d] = take(&in) % 9;
        n *= dims[side][i][d];
      }
      if (side == 1 && (mode & 4) && counts[0] > 0) { /* like argument 0 */
        const XLA_FFI_Buffer *a = &bufs[0][0];
        b->dtype = a->dtype;
        b->rank = a->rank;
        n = 1;
        for (int64_t d = 0; d < b->rank; d++) {
          dims[side][i][d] = a->dims[d] * (d == 0 && (t & 1) ? st_size : 1);
          n *= dims[side][i][d];
        }
      }
      size_t bytes = (size_t)n * 16;
      if (used + bytes > ARENA) { b->rank = 0; bytes = 16; } /* the slack */
      b->data = arena + used; /* distinct and in bounds: a real buffer */
      used += bytes;
      ptrs[side][i] = b;
      types[side][i] = take(&in) % 8 ? 1 : 2; /* 2: not a buffer */
    }
  }

  /* attributes */
  static XLA_FFI_ByteSpan spans[MAXA];
  static XLA_FFI_ByteSpan *span_ptrs[MAXA];
  static XLA_FFI_AttrType atypes[MAXA];
  static void *aptrs[MAXA];
  static XLA_FFI_Scalar scalars[MAXA];
  static XLA_FFI_Array arrays[MAXA];
  static int64_t values[MAXA][40];
  int64_t nattrs = 0;
  const char *chosen[MAXA];
  if (mode & 1) {
    for (int a = 0; a < JM_NATTRS; a++)
      if (desc->attrs & (1u << a)) chosen[nattrs++] = declared[a].name;
  } else {
    nattrs = take(&in) % MAXA;
    for (int64_t i = 0; i < nattrs; i++)
      chosen[i] = names[take(&in) % (sizeof names / sizeof names[0])];
  }
  for (int64_t i = 0; i < nattrs; i++) {
    const char *nm = chosen[i];
    spans[i].ptr = nm;
    spans[i].len = strlen(nm);
    span_ptrs[i] = &spans[i];
    uint8_t kind = take(&in);
    values[i][0] = take64(&in);
    if (mode & 1) { /* the declared kind, small values (ranks, tags) */
      int array = 0;
      for (int a = 0; a < JM_NATTRS; a++)
        if (strcmp(declared[a].name, nm) == 0) array = declared[a].array;
      kind = array ? 0 : 1;
      if (take(&in) & 1) values[i][0] = (int8_t)take(&in);
    }
    if (kind % 3 == 0) {
      atypes[i] = XLA_FFI_AttrType_ARRAY;
      size_t len = take(&in) % 40;
      for (size_t k = 0; k < len; k++) values[i][k] = (int8_t)take(&in);
      arrays[i].dtype = kind % 6 == 0 || (mode & 1) ? XLA_FFI_DataType_S64
                                                    : XLA_FFI_DataType_S32;
      arrays[i].size = len;
      arrays[i].data = values[i];
      aptrs[i] = &arrays[i];
    } else {
      atypes[i] = kind % 3 == 1 ? XLA_FFI_AttrType_SCALAR : XLA_FFI_AttrType_STRING;
      scalars[i].dtype = kind % 5 || (mode & 1) ? XLA_FFI_DataType_S64
                                                : XLA_FFI_DataType_S32;
      scalars[i].value = values[i];
      aptrs[i] = &scalars[i];
    }
  }

  XLA_FFI_CallFrame frame;
  memset(&frame, 0, sizeof frame);
  frame.struct_size = sizeof frame;
  frame.api = &api;
  frame.stage = XLA_FFI_ExecutionStage_EXECUTE;
  frame.args.size = counts[0];
  frame.args.types = (XLA_FFI_ArgType *)types[0];
  frame.args.args = ptrs[0];
  frame.rets.size = counts[1];
  frame.rets.types = (XLA_FFI_RetType *)types[1];
  frame.rets.rets = ptrs[1];
  frame.attrs.size = nattrs;
  frame.attrs.types = atypes;
  frame.attrs.names = span_ptrs;
  frame.attrs.attrs = aptrs;

  /* The status attribute is an address: never let the fuzzer pick one. */
  for (int64_t i = 0; i < nattrs; i++)
    if (spans[i].len == 6 && memcmp(spans[i].ptr, "status", 6) == 0)
      values[i][0] = 0;

  if ((mode & 16) && counts[0] > 0 && counts[1] > 0) {
    /* in place: the result's bytes must fit in the argument's */
    XLA_FFI_Buffer *a = &bufs[0][0], *r = &bufs[1][0];
    int64_t na = 16, nr = 1;
    for (int64_t d = 0; d < a->rank; d++) na *= a->dims[d];
    for (int64_t d = 0; d < r->rank; d++) nr *= r->dims[d];
    if (nr * 16 <= na) r->data = a->data;
  }

  if (mode & 8) {
    driver_calls = 0;
    fail_at = fail % 4 ? 0 : 1 + (fail >> 2) % 24;
    no_stream = (mode & 64) && fail % 8 == 1;
    jm_cuda_configure((mode & 32) != 0, 1 << 14);
    error_free(jm_dispatch_cuda(&frame, desc));
  } else {
    error_free(jm_dispatch(&frame, desc));
  }
  return 0;
}
