/* The GPU path (see cuda_staging.h): the CUDA driver loaded on first use, a
 * cache of pinned host buffers, and the one generic wrapper that runs any
 * op's host body for buffers in GPU memory.
 *
 * Staging buffers. A call takes one buffer per distinct device buffer it
 * touches (an input and the result aliased to it, as allreduce in place,
 * share one), from a cache of pinned host memory that is never allocated
 * per call once warm. The copies of results back to the GPU are left running
 * when the handler returns (XLA's later work on the stream is ordered after
 * them); each buffer records a CUDA event after its copy, and the next call
 * that takes the buffer waits for that event first, so a buffer is never
 * overwritten while a copy from it may be pending. Buffers are rounded up
 * (powers of two to 64 MiB, then multiples of 64 MiB); idle buffers beyond
 * the cache limit (default 512 MiB, JAXMPI_CUDA_STAGING_MB) are freed, least
 * recently used first. The rest is kept until the process exits, when the
 * driver releases it (freeing it from an exit handler could race the CUDA
 * runtime's own teardown). */
#include "cuda_staging.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the driver ------------------------------------------------------------ */

static jm_cu_api cu;
static const jm_cu_api *injected;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int loaded;            /* written once, inside load_once */
static char load_error[600];  /* likewise */
static int driver_version;    /* likewise */

static void load_driver(void) {
  if (injected) {
    cu = *injected;
    loaded = 1;
    return;
  }
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    snprintf(load_error, sizeof load_error,
             "cannot load the CUDA driver: %s",
             why ? why : "not found");
    return;
  }
  jm_cu_api t;
  memset(&t, 0, sizeof t);
#define JM_CUDA_LOAD(field, symbol, params)                                    \
  *(void **)(&t.field) = dlsym(h, symbol);                                     \
  if (!t.field) {                                                              \
    snprintf(load_error, sizeof load_error,                                    \
             "the CUDA driver libcuda.so.1 has no %s (too old a driver?)",     \
             symbol);                                                          \
    return;                                                                    \
  }
  JM_CUDA_FUNCTIONS(JM_CUDA_LOAD)
#undef JM_CUDA_LOAD
  CUresult rc = t.Init(0);
  if (rc != JM_CUDA_SUCCESS) {
    const char *msg = NULL;
    if (t.GetErrorString(rc, &msg) != JM_CUDA_SUCCESS || !msg)
      msg = "unknown CUDA error";
    snprintf(load_error, sizeof load_error, "cuInit failed: %s (CUDA error %d)",
             msg, rc);
    return;
  }
  if (t.DriverGetVersion(&driver_version) != JM_CUDA_SUCCESS) driver_version = 0;
  cu = t;
  loaded = 1;
}

void jm_cuda_use(const jm_cu_api *fns) {
  injected = fns;
  pthread_once(&load_once, load_driver);
}

int jm_cuda_driver(char *msg, size_t len) {
  pthread_once(&load_once, load_driver);
  if (!loaded) {
    snprintf(msg, len, "%s", load_error);
    return -1;
  }
  int n = 0;
  CUresult rc = cu.DeviceGetCount(&n);
  if (rc != JM_CUDA_SUCCESS) {
    snprintf(msg, len, "libcuda.so.1 loaded, but cuDeviceGetCount failed "
                       "(CUDA error %d)", rc);
    return -1;
  }
  snprintf(msg, len, "libcuda.so.1, driver API %d.%d, %d GPU%s visible",
           driver_version / 1000, driver_version % 1000 / 10, n,
           n == 1 ? "" : "s");
  return n;
}

static _Atomic int aware;
static _Atomic size_t cache_limit = (size_t)512 << 20;

void jm_cuda_configure(int on, size_t cache_bytes) {
  atomic_store(&aware, on != 0);
  atomic_store(&cache_limit, cache_bytes ? cache_bytes : (size_t)512 << 20);
}

int jm_cuda_aware(void) { return atomic_load(&aware); }

/* ---- errors ------------------------------------------------------------------ */

static XLA_FFI_Error *cu_failure(jm_call *c, const char *fn, CUresult rc) {
  const char *msg = NULL, *name = NULL;
  if (cu.GetErrorString(rc, &msg) != JM_CUDA_SUCCESS || !msg)
    msg = "unknown CUDA error";
  if (cu.GetErrorName(rc, &name) != JM_CUDA_SUCCESS || !name) name = "?";
  if (c->size <= 0) /* a wait before it knows its request's communicator */
    return jm_error(c, XLA_FFI_Error_Code_INTERNAL,
                    "%s failed: %s (%s, CUDA error %d)", fn, msg, name, rc);
  return jm_error(c, XLA_FFI_Error_Code_INTERNAL,
                  "%s failed on rank %d of %d: %s (%s, CUDA error %d)", fn,
                  c->rank, c->size, msg, name, rc);
}

#define JM_CU(c, fn, expr)                                                     \
  do {                                                                         \
    CUresult rc_ = (expr);                                                     \
    if (rc_ != JM_CUDA_SUCCESS) return cu_failure((c), (fn), rc_);             \
  } while (0)

/* XLA's stream for this call. XLA's error (e.g. a CUDA handler run by a
 * CPU client) is returned as it is: the API to read its message changed
 * name between jaxlib versions. */
static XLA_FFI_Error *get_stream(jm_call *c, CUstream *out) {
  XLA_FFI_Stream_Get_Args a;
  memset(&a, 0, sizeof a);
  a.struct_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE;
  a.ctx = c->frame->ctx;
  XLA_FFI_Error *e = c->frame->api->XLA_FFI_Stream_Get(&a);
  if (!e) *out = (CUstream)a.stream;
  return e;
}

/* ---- the staging cache ------------------------------------------------------- */

/* Blocking calls hold buffers for the call, requests until their wait:
 * room for many requests in flight, one buffer each. */
#define JM_SLOTS 1024

typedef struct slot {
  void *host;       /* pinned memory, NULL: empty slot */
  size_t cap;
  int busy;         /* owned by a call (or being allocated or freed) */
  int pending;      /* `ev` marks a copy from `host` that may still run */
  CUevent ev;       /* created in ev_ctx */
  CUcontext ev_ctx;
  uint64_t used;    /* for least-recently-used eviction */
} slot;

static slot slots[JM_SLOTS];
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t idle_bytes, held_bytes;
static uint64_t use_clock;
static long n_allocs, n_frees;

void jm_cuda_stats(size_t *held, long *allocs, long *frees) {
  pthread_mutex_lock(&cache_lock);
  *held = held_bytes;
  *allocs = n_allocs;
  *frees = n_frees;
  pthread_mutex_unlock(&cache_lock);
}

static size_t round_capacity(size_t bytes) {
  const size_t big = (size_t)64 << 20;
  if (bytes > big) return (bytes + big - 1) / big * big;
  size_t cap = 4096;
  while (cap < bytes) cap <<= 1;
  return cap;
}

/* Wait for the copy that may still read s->host. */
static CUresult settle(slot *s) {
  if (!s->pending) return JM_CUDA_SUCCESS;
  CUresult rc = cu.EventSynchronize(s->ev);
  if (rc == JM_CUDA_SUCCESS) s->pending = 0;
  return rc;
}

/* Free a slot the caller owns (busy, out of the idle count) and empty it;
 * `keep`: the caller goes on owning the empty slot. Memory whose pending copy
 * cannot be waited for is abandoned, not freed. */
static void discard(slot *s, int keep) {
  void *host = s->host;
  size_t cap = s->cap;
  int safe = settle(s) == JM_CUDA_SUCCESS;
  if (s->ev) cu.EventDestroy(s->ev);
  if (safe && host) cu.MemFreeHost(host);
  pthread_mutex_lock(&cache_lock);
  held_bytes -= cap;
  n_frees++;
  memset(s, 0, sizeof *s);
  s->busy = keep;
  pthread_mutex_unlock(&cache_lock);
}

/* Forget a buffer that may still be in use by the GPU after an error we
 * cannot wait out: never reused, never freed (its event may go: the driver
 * releases a pending event once it completes). */
static void abandon(slot *s) {
  if (s->ev) cu.EventDestroy(s->ev);
  pthread_mutex_lock(&cache_lock);
  held_bytes -= s->cap;
  memset(s, 0, sizeof *s);
  pthread_mutex_unlock(&cache_lock);
}

/* A pinned buffer of at least `bytes`, owned by the caller until release(),
 * with no copy pending from it. */
static XLA_FFI_Error *acquire(jm_call *c, size_t bytes, slot **out) {
  slot *best = NULL, *empty = NULL, *victim = NULL;
  pthread_mutex_lock(&cache_lock);
  for (int i = 0; i < JM_SLOTS; i++) {
    slot *s = &slots[i];
    if (s->busy) continue;
    if (!s->host) {
      if (!empty) empty = s;
    } else if (s->cap >= bytes) {
      if (!best || s->cap < best->cap) best = s;
    } else if (!victim || s->used < victim->used) {
      victim = s;
    }
  }
  slot *s = best ? best : empty ? empty : victim;
  if (s) {
    s->busy = 1;
    if (s->host) idle_bytes -= s->cap;
  }
  pthread_mutex_unlock(&cache_lock);
  if (!s)
    return jm_error(c, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                    "rank %d: all %d CUDA staging buffers are in use", c->rank,
                    JM_SLOTS);
  if (s == victim) discard(s, 1); /* too small: make room */
  if (s != best) {
    size_t cap = round_capacity(bytes);
    void *host = NULL;
    CUresult rc = cu.MemHostAlloc(&host, cap, JM_CU_MEMHOSTALLOC_PORTABLE);
    pthread_mutex_lock(&cache_lock);
    if (rc == JM_CUDA_SUCCESS) {
      s->host = host;
      s->cap = cap;
      held_bytes += cap;
      n_allocs++;
    } else {
      s->busy = 0;
    }
    pthread_mutex_unlock(&cache_lock);
    if (rc != JM_CUDA_SUCCESS) {
      char fn[96];
      snprintf(fn, sizeof fn, "cuMemHostAlloc of %zu bytes of staging memory",
               cap);
      return cu_failure(c, fn, rc);
    }
  }
  CUresult rc = settle(s);
  if (rc != JM_CUDA_SUCCESS) {
    abandon(s);
    return cu_failure(c, "cuEventSynchronize (staging buffer reuse)", rc);
  }
  *out = s;
  return NULL;
}

/* Give a buffer back to the cache; idle memory over the limit is freed,
 * least recently used first. */
static void release(slot *s) {
  slot *drop[JM_SLOTS];
  int ndrop = 0;
  size_t limit = atomic_load(&cache_limit);
  pthread_mutex_lock(&cache_lock);
  s->busy = 0;
  s->used = ++use_clock;
  idle_bytes += s->cap;
  while (idle_bytes > limit) {
    slot *lru = NULL;
    for (int i = 0; i < JM_SLOTS; i++) {
      slot *t = &slots[i];
      if (!t->busy && t->host && (!lru || t->used < lru->used)) lru = t;
    }
    if (!lru) break;
    lru->busy = 1;
    idle_bytes -= lru->cap;
    drop[ndrop++] = lru;
  }
  pthread_mutex_unlock(&cache_lock);
  for (int i = 0; i < ndrop; i++) discard(drop[i], 0);
}

/* Mark the copy just enqueued from s->host on `stream`. */
static CUresult mark_pending(slot *s, CUstream stream, CUcontext ctx) {
  CUresult rc;
  if (s->ev && s->ev_ctx != ctx) { /* events belong to one context */
    if ((rc = settle(s)) != JM_CUDA_SUCCESS) return rc;
    cu.EventDestroy(s->ev);
    s->ev = NULL;
  }
  if (!s->ev) {
    if ((rc = cu.EventCreate(&s->ev, JM_CU_EVENT_DISABLE_TIMING)) !=
        JM_CUDA_SUCCESS) {
      s->ev = NULL;
      return rc;
    }
    s->ev_ctx = ctx;
  }
  if ((rc = cu.EventRecord(s->ev, stream)) != JM_CUDA_SUCCESS) return rc;
  s->pending = 1;
  return JM_CUDA_SUCCESS;
}

/* ---- the wrapper ------------------------------------------------------------- */

/* One distinct device buffer of a call and its staging buffer. */
typedef struct use {
  void *dev;
  size_t bytes;
  int read, written;
  slot *s;
} use;

typedef struct plan {
  use u[2 * JM_MAX_BUFFERS];
  int n;
  int arg_use[JM_MAX_BUFFERS], ret_use[JM_MAX_BUFFERS]; /* -1: no data */
} plan;

static int add_use(plan *p, void *dev, size_t bytes, int read, int written) {
  int k = 0;
  while (k < p->n && p->u[k].dev != dev) k++;
  if (k == p->n) {
    memset(&p->u[k], 0, sizeof p->u[k]);
    p->u[k].dev = dev;
    p->n++;
  }
  if (bytes > p->u[k].bytes) p->u[k].bytes = bytes;
  p->u[k].read |= read;
  p->u[k].written |= written;
  return k;
}

static size_t nbytes(const jm_buffer *b) {
  return (size_t)b->count * b->elsize;
}

/* After a CUDA failure with copies from staging memory possibly enqueued:
 * wait for the stream, or, if that fails too, never reuse the buffers. */
static void unwind(plan *p, int acquired, CUstream stream) {
  int safe = cu.StreamSynchronize(stream) == JM_CUDA_SUCCESS;
  for (int k = 0; k < acquired; k++) {
    if (safe && settle(p->u[k].s) == JM_CUDA_SUCCESS)
      release(p->u[k].s);
    else
      abandon(p->u[k].s);
  }
}

static char zero_size[16]; /* the "data" of empty buffers: never accessed */

static XLA_FFI_Error *run_staged(jm_call *c, const jm_op_desc *desc,
                                 CUstream stream, CUcontext ctx) {
  plan p;
  p.n = 0;
  for (int i = 0; i < c->nargs; i++) {
    jm_buffer *b = &c->arg[i];
    int is_template = i < 32 && (desc->templates >> i) & 1u;
    p.arg_use[i] =
        b->count ? add_use(&p, b->data, nbytes(b), !is_template, 0) : -1;
  }
  for (int j = 0; j < c->nrets; j++) {
    jm_buffer *b = &c->ret[j];
    p.ret_use[j] = b->count ? add_use(&p, b->data, nbytes(b), 0, 1) : -1;
  }

  XLA_FFI_Error *err = NULL;
  int k;
  for (k = 0; k < p.n; k++)
    if ((err = acquire(c, p.u[k].bytes, &p.u[k].s))) break;
  if (err) {
    for (int i = 0; i < k; i++) release(p.u[i].s);
    return err;
  }

  double t0 = jm_log_start();
  size_t moved = 0;
  for (k = 0; k < p.n; k++) {
    use *u = &p.u[k];
    if (!u->read) continue;
    CUresult rc = cu.MemcpyDtoHAsync(u->s->host, (CUdeviceptr)(uintptr_t)u->dev,
                                     u->bytes, stream);
    if (rc != JM_CUDA_SUCCESS) {
      unwind(&p, p.n, stream);
      return cu_failure(c, "cuMemcpyDtoHAsync (staging the input)", rc);
    }
    moved += u->bytes;
  }
  /* Also with nothing to copy: the op (a barrier, a receive) happens after
   * the GPU work before it, as on the CPU. */
  CUresult rc = cu.StreamSynchronize(stream);
  if (rc != JM_CUDA_SUCCESS) {
    unwind(&p, p.n, stream);
    return cu_failure(c, "cuStreamSynchronize (before the MPI call)", rc);
  }
  if (jm_cfg.debug)
    jm_log(c, "CUDA device->host + stream sync", NULL, 0, (int64_t)moved,
           XLA_FFI_DataType_U8, t0);

  for (int i = 0; i < c->nargs; i++)
    c->arg[i].data = p.arg_use[i] < 0 ? zero_size : p.u[p.arg_use[i]].s->host;
  for (int j = 0; j < c->nrets; j++)
    c->ret[j].data = p.ret_use[j] < 0 ? zero_size : p.u[p.ret_use[j]].s->host;

  err = desc->run(c);

  if (!err) {
    t0 = jm_log_start();
    moved = 0;
    for (k = 0; k < p.n; k++) {
      use *u = &p.u[k];
      if (!u->written) continue;
      const char *fn = "cuMemcpyHtoDAsync (the result)";
      rc = cu.MemcpyHtoDAsync((CUdeviceptr)(uintptr_t)u->dev, u->s->host,
                              u->bytes, stream);
      if (rc == JM_CUDA_SUCCESS) {
        fn = "cuEventRecord (after the result's copy)";
        rc = mark_pending(u->s, stream, ctx);
      }
      if (rc != JM_CUDA_SUCCESS) {
        unwind(&p, p.n, stream);
        return cu_failure(c, fn, rc);
      }
      moved += u->bytes;
    }
    if (jm_cfg.debug && moved)
      jm_log(c, "CUDA host->device (enqueued)", NULL, 0, (int64_t)moved,
             XLA_FFI_DataType_U8, t0);
  }
  for (k = 0; k < p.n; k++) release(p.u[k].s);
  return err;
}

/* Reductions in float16/bfloat16 use jaxmpi's own MPI ops, which compute on
 * the host: those stay staged also in CUDA-aware mode. */
static int needs_host(const jm_call *c, const jm_op_desc *desc) {
  if (!(desc->attrs & JM_A(op)) || c->nargs < 1) return 0;
  return c->arg[0].dtype == XLA_FFI_DataType_F16 ||
         c->arg[0].dtype == XLA_FFI_DataType_BF16;
}

XLA_FFI_Error *jm_cuda_enter(jm_call *c, jm_cuda_scope *scope) {
  scope->ctx = NULL;
  scope->pushed = 0;
  pthread_once(&load_once, load_driver);
  if (!loaded)
    return jm_error(c, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                    "rank %d has a GPU array but %s", c->rank, load_error);
  CUstream stream = NULL;
  XLA_FFI_Error *err = get_stream(c, &stream);
  if (err) return err;
  c->stream = stream;
  /* The stream's context must be current for the copies and allocations;
   * XLA's thread usually has it already. */
  CUcontext current = NULL;
  JM_CU(c, "cuStreamGetCtx", cu.StreamGetCtx(stream, &scope->ctx));
  JM_CU(c, "cuCtxGetCurrent", cu.CtxGetCurrent(&current));
  if (current != scope->ctx) {
    JM_CU(c, "cuCtxPushCurrent", cu.CtxPushCurrent(scope->ctx));
    scope->pushed = 1;
  }
  return NULL;
}

XLA_FFI_Error *jm_cuda_leave(jm_call *c, jm_cuda_scope *scope,
                             XLA_FFI_Error *err) {
  if (scope->pushed) {
    CUcontext popped;
    CUresult rc = cu.CtxPopCurrent(&popped);
    scope->pushed = 0;
    if (rc != JM_CUDA_SUCCESS && !err) err = cu_failure(c, "cuCtxPopCurrent", rc);
  }
  return err;
}

XLA_FFI_Error *jm_cuda_run(jm_call *c, const jm_op_desc *desc) {
  jm_cuda_scope scope;
  XLA_FFI_Error *err = jm_cuda_enter(c, &scope);
  if (err) return jm_cuda_leave(c, &scope, err);
  CUstream stream = (CUstream)c->stream;
  if (jm_cuda_aware() && !needs_host(c, desc)) {
    CUresult rc = cu.StreamSynchronize(stream);
    if (rc != JM_CUDA_SUCCESS) {
      err = cu_failure(c, "cuStreamSynchronize (before the MPI call)", rc);
    } else {
      c->on_device = 1;
      err = desc->run(c);
    }
  } else {
    err = run_staged(c, desc, stream, scope.ctx);
  }
  return jm_cuda_leave(c, &scope, err);
}

XLA_FFI_Error *jm_cuda_copy(jm_call *c, void *dst, const void *src,
                            size_t bytes) {
  JM_CU(c, "cuMemcpyDtoDAsync",
        cu.MemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dst,
                           (CUdeviceptr)(uintptr_t)src, bytes,
                           (CUstream)c->stream));
  JM_CU(c, "cuStreamSynchronize", cu.StreamSynchronize((CUstream)c->stream));
  return NULL;
}

XLA_FFI_Error *jm_cuda_zero(jm_call *c, void *dst, size_t bytes) {
  JM_CU(c, "cuMemsetD8Async",
        cu.MemsetD8Async((CUdeviceptr)(uintptr_t)dst, 0, bytes,
                         (CUstream)c->stream));
  JM_CU(c, "cuStreamSynchronize", cu.StreamSynchronize((CUstream)c->stream));
  return NULL;
}

/* ---- memory writes of op bodies ----------------------------------------- */

XLA_FFI_Error *jm_copy(jm_call *c, void *dst, const void *src, size_t bytes) {
  if (!bytes || dst == src) return NULL;
  if (c->on_device) return jm_cuda_copy(c, dst, src, bytes);
  memcpy(dst, src, bytes);
  return NULL;
}

XLA_FFI_Error *jm_zero(jm_call *c, void *dst, size_t bytes) {
  if (!bytes) return NULL;
  if (c->on_device) return jm_cuda_zero(c, dst, bytes);
  memset(dst, 0, bytes);
  return NULL;
}

/* ---- non-blocking starts and waits ----------------------------------------
 * A start's staging lives as long as its request: one pinned buffer holding
 * every distinct device buffer the start touches (256-byte aligned pieces),
 * filled on jaxmpi's own copy stream of the context, after an event recorded
 * on XLA's stream (the inputs are ready), and copied back on that stream at
 * the wait, with XLA's stream made to wait for the copies' event. */

/* jaxmpi's copy stream of each context (never destroyed: it lives as long
 * as the process, as the staging cache does). */
#define JM_CONTEXTS 16
static struct {
  CUcontext ctx;
  CUstream stream;
} copy_streams[JM_CONTEXTS];
static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;

static XLA_FFI_Error *copy_stream(jm_call *c, CUcontext ctx, CUstream *out) {
  XLA_FFI_Error *err = NULL;
  pthread_mutex_lock(&streams_lock);
  int k = 0;
  while (k < JM_CONTEXTS && copy_streams[k].ctx && copy_streams[k].ctx != ctx)
    k++;
  if (k == JM_CONTEXTS) {
    err = jm_error(c, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                   "rank %d: GPU arrays in more than %d CUDA contexts",
                   c->rank, JM_CONTEXTS);
  } else if (!copy_streams[k].ctx) {
    CUstream s = NULL;
    CUresult rc = cu.StreamCreate(&s, JM_CU_STREAM_NON_BLOCKING);
    if (rc != JM_CUDA_SUCCESS) {
      err = cu_failure(c, "cuStreamCreate (jaxmpi's copy stream)", rc);
    } else {
      copy_streams[k].ctx = ctx;
      copy_streams[k].stream = s;
    }
  }
  if (!err) *out = copy_streams[k].stream;
  pthread_mutex_unlock(&streams_lock);
  return err;
}

#define JM_PIECE 256 /* alignment of each buffer's piece of the staging */

struct jm_cuda_stage {
  slot *s;            /* the pinned buffer (NULL: nothing staged) */
  CUstream copy;      /* jaxmpi's stream that fills and empties it */
  CUcontext ctx;
  int aware;          /* device pointers went to MPI: nothing staged */
  int n;              /* distinct device buffers with data */
  struct {
    void *dev;
    size_t off, bytes;
  } u[2 * JM_MAX_BUFFERS];
  void *handle_dev;   /* the start's result 0 */
  float handle;       /* what the body wrote there (on the host) */
};

static int stage_use(jm_cuda_stage *st, void *dev, size_t bytes, int *read,
                     int is_read) {
  int k = 0;
  while (k < st->n && st->u[k].dev != dev) k++;
  if (k == st->n) {
    st->u[k].dev = dev;
    st->u[k].bytes = 0;
    read[k] = 0;
    st->n++;
  }
  if (bytes > st->u[k].bytes) st->u[k].bytes = bytes;
  read[k] |= is_read;
  return k;
}

void jm_cuda_stage_free(jm_cuda_stage *st, int abandon_it) {
  if (!st) return;
  if (st->s) {
    if (abandon_it)
      abandon(st->s);
    else
      release(st->s);
  }
  free(st);
}

XLA_FFI_Error *jm_cuda_stage_start(jm_call *c, const jm_op_desc *desc,
                                   const jm_cuda_scope *scope,
                                   jm_cuda_stage **out) {
  *out = NULL;
  JM_EXPECT(c, c->nrets >= 1 && c->ret[0].count == 1 &&
                   c->ret[0].dtype == XLA_FFI_DataType_F32,
            "result 0 must be the request's handle (a float32 scalar)");
  jm_cuda_stage *st = calloc(1, sizeof *st);
  if (!st)
    return jm_error(c, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                    "out of memory for a request's staging");
  CUstream stream = (CUstream)c->stream;
  st->ctx = scope->ctx;
  st->handle_dev = c->ret[0].data;

  if (jm_cuda_aware() && !needs_host(c, desc)) {
    /* MPI reads and writes the device buffers from now until the wait:
     * everything XLA enqueued before the start must be done (where there
     * is any data: not for a barrier). */
    int data = 0;
    for (int i = 0; i < c->nargs; i++) data |= c->arg[i].count > 0;
    for (int j = 1; j < c->nrets; j++) data |= c->ret[j].count > 0;
    CUresult rc = data ? cu.StreamSynchronize(stream) : JM_CUDA_SUCCESS;
    if (rc != JM_CUDA_SUCCESS) {
      free(st);
      return cu_failure(c, "cuStreamSynchronize (before the MPI call)", rc);
    }
    st->aware = 1;
    c->on_device = 1;
    c->ret[0].data = &st->handle; /* the body writes the handle there */
    *out = st;
    return NULL;
  }

  int read[2 * JM_MAX_BUFFERS];
  int arg_use[JM_MAX_BUFFERS], ret_use[JM_MAX_BUFFERS];
  for (int i = 0; i < c->nargs; i++) {
    jm_buffer *b = &c->arg[i];
    int is_template = i < 32 && (desc->templates >> i) & 1u;
    arg_use[i] = b->count ? stage_use(st, b->data, nbytes(b), read,
                                      !is_template)
                          : -1;
  }
  ret_use[0] = -1;
  for (int j = 1; j < c->nrets; j++) {
    jm_buffer *b = &c->ret[j];
    ret_use[j] = b->count ? stage_use(st, b->data, nbytes(b), read, 0) : -1;
  }
  size_t total = 0;
  for (int k = 0; k < st->n; k++) {
    st->u[k].off = total;
    total += (st->u[k].bytes + JM_PIECE - 1) / JM_PIECE * JM_PIECE;
  }

  if (st->n) {
    XLA_FFI_Error *err = copy_stream(c, st->ctx, &st->copy);
    if (!err) err = acquire(c, total, &st->s);
    if (err) {
      free(st);
      return err;
    }
    /* The copy stream starts where XLA's stream is now: the inputs are
     * written, and so is anything XLA wrote into the receive buffers
     * before (the copies back at the wait come after it). */
    const char *fn = "cuEventRecord (the inputs ready)";
    CUresult rc = mark_pending(st->s, stream, st->ctx);
    if (rc == JM_CUDA_SUCCESS) {
      fn = "cuStreamWaitEvent (jaxmpi's copy stream)";
      rc = cu.StreamWaitEvent(st->copy, st->s->ev, 0);
    }
    double t0 = jm_log_start();
    size_t moved = 0;
    for (int k = 0; k < st->n && rc == JM_CUDA_SUCCESS; k++) {
      if (!read[k]) continue;
      fn = "cuMemcpyDtoHAsync (staging the input)";
      rc = cu.MemcpyDtoHAsync((char *)st->s->host + st->u[k].off,
                              (CUdeviceptr)(uintptr_t)st->u[k].dev,
                              st->u[k].bytes, st->copy);
      moved += st->u[k].bytes;
    }
    /* MPI reads the staging from the post on: the copies must be done.
     * Nothing to read (a receive): the post need not wait for the GPU. */
    if (rc == JM_CUDA_SUCCESS && moved) {
      fn = "cuStreamSynchronize (jaxmpi's copy stream, before the MPI call)";
      rc = cu.StreamSynchronize(st->copy);
    }
    if (rc != JM_CUDA_SUCCESS) {
      /* Copies into the staging may still be pending: never reuse it. */
      int safe = cu.StreamSynchronize(st->copy) == JM_CUDA_SUCCESS &&
                 settle(st->s) == JM_CUDA_SUCCESS;
      jm_cuda_stage_free(st, !safe);
      return cu_failure(c, fn, rc);
    }
    if (jm_cfg.debug && moved)
      jm_log(c, "CUDA device->host (jaxmpi's stream) + its sync", NULL, 0,
             (int64_t)moved, XLA_FFI_DataType_U8, t0);
  }

  for (int i = 0; i < c->nargs; i++)
    c->arg[i].data = arg_use[i] < 0 ? zero_size
                                    : (char *)st->s->host +
                                          st->u[arg_use[i]].off;
  for (int j = 1; j < c->nrets; j++)
    c->ret[j].data = ret_use[j] < 0 ? zero_size
                                    : (char *)st->s->host +
                                          st->u[ret_use[j]].off;
  c->ret[0].data = &st->handle;
  *out = st;
  return NULL;
}

void *jm_cuda_stage_device(const jm_cuda_stage *st, const void *host) {
  if (!host || st->aware) return (void *)host;
  for (int k = 0; k < st->n; k++)
    if (host == (const char *)st->s->host + st->u[k].off) return st->u[k].dev;
  return NULL; /* an empty buffer's placeholder */
}

void *jm_cuda_stage_handle(const jm_cuda_stage *st) { return st->handle_dev; }

XLA_FFI_Error *jm_cuda_stage_posted(jm_call *c, jm_cuda_stage *st) {
  unsigned int bits;
  memcpy(&bits, &st->handle, sizeof bits);
  JM_CU(c, "cuMemsetD32Async (the request's handle)",
        cu.MemsetD32Async((CUdeviceptr)(uintptr_t)st->handle_dev, bits, 1,
                          (CUstream)c->stream));
  return NULL;
}

XLA_FFI_Error *jm_cuda_read_f32(jm_call *c, const void *dev, float *out) {
  slot *s;
  XLA_FFI_Error *err = acquire(c, sizeof *out, &s);
  if (err) return err;
  CUstream stream = (CUstream)c->stream;
  const char *fn = "cuMemcpyDtoHAsync (the request's handle)";
  CUresult rc = cu.MemcpyDtoHAsync(s->host, (CUdeviceptr)(uintptr_t)dev,
                                   sizeof *out, stream);
  if (rc == JM_CUDA_SUCCESS) {
    fn = "cuStreamSynchronize (reading the request's handle)";
    rc = cu.StreamSynchronize(stream);
  }
  if (rc != JM_CUDA_SUCCESS) {
    /* The copy into the buffer may still come: never reuse it. */
    if (cu.StreamSynchronize(stream) == JM_CUDA_SUCCESS)
      release(s);
    else
      abandon(s);
    return cu_failure(c, fn, rc);
  }
  memcpy(out, s->host, sizeof *out);
  release(s);
  return NULL;
}

XLA_FFI_Error *jm_cuda_stage_finish(jm_call *c, jm_cuda_stage *st,
                                    void *const *results, int nresults) {
  if (st->aware || !st->s) return NULL;
  CUcontext ctx = NULL;
  JM_CU(c, "cuStreamGetCtx", cu.StreamGetCtx((CUstream)c->stream, &ctx));
  if (ctx != st->ctx)
    return jm_error(c, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                    "the wait runs in another CUDA context than its start");
  double t0 = jm_log_start();
  size_t moved = 0;
  const char *fn = NULL;
  CUresult rc = JM_CUDA_SUCCESS;
  for (int k = 0; k < st->n && rc == JM_CUDA_SUCCESS; k++) {
    /* Only the wait's results: what MPI wrote (a send buffer comes back
     * unchanged, so it is not copied). */
    int wanted = 0;
    for (int i = 0; i < nresults && !wanted; i++)
      wanted = results[i] == st->u[k].dev;
    if (!wanted) continue;
    fn = "cuMemcpyHtoDAsync (the result, on jaxmpi's copy stream)";
    rc = cu.MemcpyHtoDAsync((CUdeviceptr)(uintptr_t)st->u[k].dev,
                            (char *)st->s->host + st->u[k].off,
                            st->u[k].bytes, st->copy);
    moved += st->u[k].bytes;
  }
  if (rc == JM_CUDA_SUCCESS && moved) {
    /* XLA's later work reads the results: its stream waits for the copies
     * (the event also keeps the staging from reuse until they are done). */
    fn = "cuEventRecord (after the result's copy)";
    rc = mark_pending(st->s, st->copy, st->ctx);
    if (rc == JM_CUDA_SUCCESS) {
      fn = "cuStreamWaitEvent (XLA's stream on the result's copy)";
      rc = cu.StreamWaitEvent((CUstream)c->stream, st->s->ev, 0);
    }
  }
  if (rc != JM_CUDA_SUCCESS) {
    if (cu.StreamSynchronize(st->copy) != JM_CUDA_SUCCESS ||
        settle(st->s) != JM_CUDA_SUCCESS) {
      abandon(st->s); /* a copy from it may still run */
      st->s = NULL;
    }
    return cu_failure(c, fn, rc);
  }
  if (jm_cfg.debug && moved)
    jm_log(c, "CUDA host->device (jaxmpi's stream, XLA's waits)", NULL, 0,
           (int64_t)moved, XLA_FFI_DataType_U8, t0);
  return NULL;
}
