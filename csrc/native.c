/* The native calls: see native.h. Every call of XLA's MPI collectives is
 * translated here from the surface's handles and constants (csrc/xla/abi.h:
 * the same values whatever the MPI) to the running MPI's (set once by
 * jaxmpi_native_configure and jaxmpi_native_set_handle, from mpi4py), and
 * made between jm_native_begin and jm_native_end. */
#define _POSIX_C_SOURCE 200809L
#include "native.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_calls.h"
#include "record_read.h"
#include "watchdog.h"

#define JM_EXPORT __attribute__((visibility("default")))

/* ---- what configure wrote (once, before the surface is attached) --------- */

static jm_native_comm world = {.number = 0};
static jm_native_comm self = {.number = 1};
static int thread_multiple;
static int devices_per_process = 1;
static const unsigned char *sentinels; /* the surface's POINTER constants */

/* Datatypes and ops by the index of their surface handle. */
static jm_Datatype dtypes[256];
static int dsizes[256];
static char dnames[256][32];
static jm_Op ops[256];
static char opnames[256][32];

static _Atomic int next_number = 2;
static _Atomic int64_t total_calls;
static _Atomic(jm_native_hook *) hook;

/* ---- each thread's last failure, for MPI_Error_string -------------------- */

static _Thread_local char message[JM_XLA_MAX_ERROR_STRING];

__attribute__((format(printf, 1, 2))) static int fail(const char *fmt, ...);

static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  return JM_XLA_ERR_NATIVE;
}

static int error_string(int code, char *text, int *len) {
  (void)code;
  size_t n = strlen(message);
  memcpy(text, message, n + 1);
  *len = (int)n;
  return 0;
}

/* ---- begin and end of every call ------------------------------------------ */

void jm_native_set_hook(jm_native_hook *h) { atomic_store(&hook, h); }

static void describe_members(const jm_native_comm *comm, char *out, size_t n);

/* JAXMPI_NATIVE_TRACE's hook: one line per begin and end, whole. */
static void trace(const jm_native_call *c, int phase, int rc) {
  char line[512], members[256] = "";
  if (phase == 1 && c->comm)
    describe_members(c->comm, members, sizeof members);
  int w = snprintf(line, sizeof line,
                   "jaxmpi native: world rank %d thread %lu %s %s (%s) comm "
                   "%d call %lld",
                   world.rank, (unsigned long)pthread_self(),
                   phase == 2 ? "refused" : phase ? "end" : "begin", c->mpi,
                   c->kind,
                   c->comm ? c->comm->number : -1, (long long)c->seq);
  if (!strcmp(c->mpi, "MPI_Comm_split") && w > 0 && (size_t)w < sizeof line)
    w += snprintf(line + w, sizeof line - (size_t)w, " color %d key %d",
                  c->color, c->key);
  if (c->bytes && w > 0 && (size_t)w < sizeof line)
    w += snprintf(line + w, sizeof line - (size_t)w, " %lld bytes",
                  (long long)c->bytes);
  if (phase == 1 && w > 0 && (size_t)w < sizeof line)
    snprintf(line + w, sizeof line - (size_t)w, " rc %d [%s]", rc, members);
  fprintf(stderr, "%s\n", line);
}

JM_EXPORT void jaxmpi_native_set_trace(int on) {
  jm_native_set_hook(on ? trace : NULL);
}

JM_EXPORT int64_t jaxmpi_native_count(void) {
  return atomic_load(&total_calls);
}

/* Native calls in progress: XLA makes them one at a time with one device
 * per process (its thunks take the collectives' resource in turn); two at
 * once are several devices per process, whose communicators XLA splits
 * from each device's thread concurrently: an erroneous use of MPI that
 * MPICH aborts on ("Message truncated" in MPI_Comm_split) or, serialised,
 * silently wrong sums (docs/design.md). jax.distributed.initialize()
 * refuses that layout first; this catches it where XLA's device count
 * changed after (XLA_FLAGS set late). */
static _Atomic int active;
static _Atomic int refused; /* a call was refused so: XLA's errors follow */

static int is_p2p(const jm_native_call *c) {
  return c->send_peer != -1 || c->recv_peer != -1;
}

/* A peer as the flight recorder takes it (PROC_NULL: none). */
static int record_peer(int peer) {
  return peer >= 0 ? peer : JM_REC_NONE;
}

int jm_native_begin(jm_native_call *c) {
  if (atomic_fetch_add_explicit(&active, 1, memory_order_acq_rel) > 0) {
    atomic_fetch_sub_explicit(&active, 1, memory_order_acq_rel);
    atomic_store(&refused, 1);
    jm_native_hook *h = atomic_load_explicit(&hook, memory_order_acquire);
    if (h) h(c, 2, JM_XLA_ERR_NATIVE);
    return fail("jaxmpi: %s (XLA's %s) began while another MPI call of "
                "XLA's collectives was in progress on another thread: XLA "
                "runs several devices per process, which its MPI "
                "collectives cannot (one MPI process is one device; "
                "docs/native.md). Run one device per process (no "
                "--xla_force_host_platform_device_count above 1)",
                c->mpi, c->kind);
  }
  jm_native_comm *comm = (jm_native_comm *)c->comm;
  const int p2p = is_p2p(c);
  c->seq = comm ? atomic_fetch_add_explicit(p2p ? &comm->p2p_calls
                                                : &comm->calls,
                                            1, memory_order_relaxed) + 1
                : 0;
  atomic_fetch_add_explicit(&total_calls, 1, memory_order_relaxed);
  /* Peers are ranks of the communicator, as the recorder's; a receive's
   * peer is its source, a sendrecv's second its destination. */
  c->rec = jm_record_begin(&(jm_record_call){
      .op = c->mpi,
      .kind = c->rkind ? c->rkind : c->kind,
      .dtype = c->dtype,
      .flags = JM_REC_NATIVE | (p2p ? JM_REC_P2P : JM_REC_COLLECTIVE),
      .comm = comm ? comm->comm : world.comm,
      .has_comm = comm != NULL,
      .position = -1,
      .peer = record_peer(c->recv_peer != -1 ? c->recv_peer : c->send_peer),
      .peer2 = c->recv_peer != -1 && c->send_peer != -1
                   ? record_peer(c->send_peer)
                   : JM_REC_NONE,
      .tag = -1,
      .bytes = c->bytes,
      .site = 0,
      .seq = c->seq});
  jm_native_hook *h = atomic_load_explicit(&hook, memory_order_acquire);
  if (h) h(c, 0, 0);
  return 0;
}

/* "2 processes: world ranks 0, 1" */
static void describe_members(const jm_native_comm *comm, char *out, size_t n) {
  int w = snprintf(out, n, "%d process%s: world rank%s ", comm->size,
                   comm->size == 1 ? "" : "es", comm->size == 1 ? "" : "s");
  for (int i = 0; i < comm->size && w > 0 && (size_t)w < n; i++) {
    if (i == 12 && comm->size > 13) {
      w += snprintf(out + w, n - (size_t)w, "..., %d",
                    comm->members ? comm->members[comm->size - 1]
                                  : comm->size - 1);
      break;
    }
    w += snprintf(out + w, n - (size_t)w, "%s%d", i ? ", " : "",
                  comm->members ? comm->members[i] : i);
  }
}

/* "XLA's all-reduce of MPI_FLOAT x 4 (16 bytes, MPI_SUM)" and peers. */
static void describe_call(const jm_native_call *c, char *out, size_t n) {
  int w = snprintf(out, n, "%s (XLA's %s", c->mpi, c->kind);
  if (c->dtype && w > 0 && (size_t)w < n)
    w += snprintf(out + w, n - (size_t)w, " of %s x %lld, %lld bytes%s%s",
                  c->dtype, (long long)c->count, (long long)c->bytes,
                  c->op ? ", " : "", c->op ? c->op : "");
  if (c->send_peer >= 0 && w > 0 && (size_t)w < n)
    w += snprintf(out + w, n - (size_t)w, ", to rank %d", c->send_peer);
  if (c->recv_peer >= 0 && w > 0 && (size_t)w < n)
    w += snprintf(out + w, n - (size_t)w, ", from rank %d", c->recv_peer);
  if (w > 0 && (size_t)w < n) snprintf(out + w, n - (size_t)w, ")");
}

int jm_native_end(jm_native_call *c, int rc) {
  atomic_fetch_sub_explicit(&active, 1, memory_order_acq_rel);
  jm_native_hook *h = atomic_load_explicit(&hook, memory_order_acquire);
  if (h) h(c, 1, rc);
  if (rc == 0) {
    jm_record_end(c->rec, JM_REC_DONE);
    return 0;
  }
  char what[320], members[256] = "";
  describe_call(c, what, sizeof what);
  if (c->comm) describe_members(c->comm, members, sizeof members);
  const char *which = is_p2p(c) ? "point-to-point call" : "collective";
  if (rc == JM_ERR_TIMEOUT) {
    /* The flight recorder's account (every rank's ring when they came,
     * else this rank's; "" when it is off) replaces the likely causes
     * when it names them: the message has 1024 bytes. */
    char seen[640];
    const int verdict = jm_record_timeout(c->rec, c->mpi, seen, sizeof seen);
    jm_record_end(c->rec, JM_REC_TIMEOUT); /* (no rings written: not yet) */
    return fail("jaxmpi: %s on native communicator %d (%s), its %s #%lld, "
                "did not complete within JAXMPI_TIMEOUT=%g s on world rank "
                "%d%s; the communicator is unusable: end the job.%s%s",
                what, c->comm ? c->comm->number : -1, members, which,
                (long long)c->seq, jm_watchdog_timeout(), world.rank,
                verdict ? ""
                        : ": a process of the communicator has not reached "
                          "this collective (stopped, slower by that much, or "
                          "running other code)",
                seen[0] ? " " : "", seen);
  }
  if (rc == JM_XLA_ERR_NATIVE) { /* the message is set */
    jm_record_end(c->rec, JM_REC_FAILED);
    return rc;
  }
  char mpi[512] = "";
  int len = 0;
  if (rc == JM_ERR_NOMEM)
    snprintf(mpi, sizeof mpi, "out of memory");
  else if (rc == JM_ERR_COUNT)
    snprintf(mpi, sizeof mpi, "count beyond what this MPI takes");
  else if (jm_mpi.Error_string(rc, mpi, &len) != 0)
    snprintf(mpi, sizeof mpi, "MPI error code %d", rc);
  jm_record_failure(c->rec, c->mpi, mpi); /* ends it; writes the ring */
  return fail("jaxmpi: %s on native communicator %d (%s), its %s #%lld, "
              "failed on world rank %d: %s",
              what, c->comm ? c->comm->number : -1, members, which,
              (long long)c->seq, world.rank, mpi);
}

/* ---- the records XLA holds handles to ------------------------------------- */

/* A communicator or request the layer made is handed to XLA as base +
 * slot and looked up in its table, never dereferenced as given: where its
 * MPI_Comm_split fails, XLA goes on with the uninitialised handle (seen as
 * 0x0 and as stack garbage such as 0x7fea88000090), which must be an error,
 * not a crash. Slots are taken and given back under a lock (a communicator
 * per clique, a request per message of a collective-permute) and read
 * without one. */
#define JM_SLOTS 4096
typedef struct slots {
  pthread_mutex_t lock;
  _Atomic(void *) item[JM_SLOTS];
  int next; /* where the search for a free slot starts */
} slots;
#define JM_COMM_BASE ((uintptr_t)0x4a4d0000)    /* "JM" */
#define JM_REQUEST_BASE ((uintptr_t)0x4a520000) /* "JR" */
static slots comms = {.lock = PTHREAD_MUTEX_INITIALIZER};
static slots requests = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The handle of p in a free slot, or 0 if every slot is taken. */
static jm_xla_handle slot_put(slots *t, uintptr_t base, void *p) {
  jm_xla_handle h = 0;
  pthread_mutex_lock(&t->lock);
  for (int k = 0; k < JM_SLOTS; k++) {
    int i = (t->next + k) % JM_SLOTS;
    if (!atomic_load(&t->item[i])) {
      atomic_store(&t->item[i], p);
      t->next = (i + 1) % JM_SLOTS;
      h = base + (uintptr_t)i;
      break;
    }
  }
  pthread_mutex_unlock(&t->lock);
  return h;
}

static void *slot_get(slots *t, uintptr_t base, jm_xla_handle h) {
  if (h < base || h >= base + JM_SLOTS) return NULL;
  return atomic_load_explicit(&t->item[h - base], memory_order_acquire);
}

static void slot_drop(slots *t, uintptr_t base, jm_xla_handle h) {
  pthread_mutex_lock(&t->lock);
  atomic_store(&t->item[h - base], NULL);
  pthread_mutex_unlock(&t->lock);
}

/* ---- translation ----------------------------------------------------------- */

static jm_native_comm *comm_of(jm_xla_handle h) {
  if (h == JM_XLA_COMM_WORLD) return &world;
  if (h == JM_XLA_COMM_SELF) return &self;
  return slot_get(&comms, JM_COMM_BASE, h);
}

static int bad_comm(const char *mpi, jm_xla_handle h) {
  if (atomic_load(&refused))
    /* XLA ignores MPI_Comm_split's result: what follows a refused split
     * is a collective on a handle it never got */
    return fail("jaxmpi: %s on a communicator XLA never got (handle 0x%llx): "
                "its MPI_Comm_split was refused, because XLA runs several "
                "devices per process, which its MPI collectives cannot (one "
                "MPI process is one device; docs/native.md). Run one device "
                "per process",
                mpi, (unsigned long long)h);
  return fail("jaxmpi: %s: communicator handle 0x%llx is not one of jaxmpi's "
              "MPI layer for XLA (freed, or never made by it)",
              mpi, (unsigned long long)h);
}

/* The datatype of a surface handle: 0, or the error. */
static int dtype_of(const char *mpi, jm_xla_handle h, jm_Datatype *t,
                    size_t *size, const char **name) {
  if (!JM_XLA_IS_TOKEN(h) || JM_XLA_CLASS(h) != JM_XLA_DATATYPE ||
      !dsizes[JM_XLA_INDEX(h)])
    return fail("jaxmpi: %s: datatype handle 0x%llx is not a predefined "
                "datatype this MPI has (jaxmpi's MPI layer for XLA serves "
                "the predefined ones only)",
                mpi, (unsigned long long)h);
  *t = dtypes[JM_XLA_INDEX(h)];
  *size = (size_t)dsizes[JM_XLA_INDEX(h)];
  *name = dnames[JM_XLA_INDEX(h)];
  return 0;
}

static int op_of(const char *mpi, jm_xla_handle h, jm_Op *op,
                 const char **name) {
  if (!JM_XLA_IS_TOKEN(h) || JM_XLA_CLASS(h) != JM_XLA_OP ||
      !opnames[JM_XLA_INDEX(h)][0])
    return fail("jaxmpi: %s: op handle 0x%llx is not a predefined reduction "
                "this MPI has",
                mpi, (unsigned long long)h);
  *op = ops[JM_XLA_INDEX(h)];
  *name = opnames[JM_XLA_INDEX(h)];
  return 0;
}

static int rank_in(int r) {
  if (r == JM_XLA_PROC_NULL) return jm_const.proc_null;
  if (r == JM_XLA_ANY_SOURCE) return jm_const.any_source;
  return r;
}

static int tag_in(int t) { return t == JM_XLA_ANY_TAG ? jm_const.any_tag : t; }

static int thread_level_out(void) {
  return thread_multiple ? JM_XLA_THREAD_MULTIPLE : JM_XLA_THREAD_SERIALIZED;
}

static const void *sentinel(int index) { return sentinels + index; }

/* A send buffer of MPI_IN_PLACE, or the receive buffer itself (XLA may
 * hand one buffer for both: MPI forbids aliased buffers), is in place. */
static const void *send_buffer(const void *s, const void *r) {
  return s == sentinel(JM_XLA_IN_PLACE) || s == r ? jm_const.in_place : s;
}

static void status_out(jm_xla_status *out, const jm_Status *st, int rank) {
  if (!out || (const void *)out == sentinel(JM_XLA_STATUS_IGNORE)) return;
  memset(out->impl, 0, sizeof out->impl);
  out->MPI_SOURCE = st->MPI_SOURCE == jm_const.proc_null ? JM_XLA_PROC_NULL
                    : st->MPI_SOURCE == jm_const.any_source ? JM_XLA_ANY_SOURCE
                                                            : rank;
  out->MPI_TAG = st->MPI_TAG == jm_const.any_tag ? JM_XLA_ANY_TAG : st->MPI_TAG;
  out->MPI_ERROR = st->MPI_ERROR ? JM_XLA_ERR_OTHER : 0;
}

/* ---- the calls ------------------------------------------------------------ */

static int n_Init(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  return 0; /* mpi4py initialised MPI before jaxmpi attached */
}

static int n_Init_thread(int *argc, char ***argv, int required, int *provided) {
  (void)argc;
  (void)argv;
  (void)required;
  *provided = thread_level_out();
  return 0;
}

static int n_Initialized(int *flag) { return jm_mpi.Initialized(flag); }

/* mpi4py finalises MPI at exit; XLA's MPI_Finalize (an atexit hook that
 * runs before mpi4py's) does nothing. */
static int n_Finalize(void) { return 0; }

static int n_Finalized(int *flag) { return jm_mpi.Finalized(flag); }

static int n_Query_thread(int *provided) {
  *provided = thread_level_out();
  return 0;
}

/* XLA asks from the thread creating a communicator; with one device per
 * process its calls never overlap with each other, and jaxmpi's own run
 * under MPI_THREAD_MULTIPLE (checked at initialize()). */
static int n_Is_thread_main(int *flag) {
  *flag = devices_per_process <= 1;
  return 0;
}

static int n_Get_version(int *version, int *subversion) {
  return jm_mpi.Get_version(version, subversion);
}

static int n_Get_library_version(char *text, int *len) {
  char real[8192];
  int n = 0;
  if (jm_mpi.Get_library_version(real, &n)) real[0] = '\0';
  real[n < (int)sizeof real ? (n < 0 ? 0 : n) : (int)sizeof real - 1] = '\0';
  int w = snprintf(text, JM_XLA_MAX_LIBRARY_VERSION_STRING,
                   "jaxmpi's MPI layer for XLA over %s", real);
  *len = w < JM_XLA_MAX_LIBRARY_VERSION_STRING
             ? w
             : JM_XLA_MAX_LIBRARY_VERSION_STRING - 1;
  return 0;
}

static int n_Abort(jm_xla_handle h, int code) {
  jm_native_comm *c = comm_of(h);
  return jm_mpi.Abort(c ? c->comm : world.comm, code);
}

static int n_Comm_rank(jm_xla_handle h, int *rank) {
  jm_native_comm *c = comm_of(h);
  if (!c) return bad_comm("MPI_Comm_rank", h);
  *rank = c->rank;
  return 0;
}

static int n_Comm_size(jm_xla_handle h, int *size) {
  jm_native_comm *c = comm_of(h);
  if (!c) return bad_comm("MPI_Comm_size", h);
  *size = c->size;
  return 0;
}

/* XLA splits COMM_WORLD once per clique (the devices of one replica group),
 * colour = the clique's first device id, key = the device's rank in it.
 * Every process first gathers every colour and key without blocking, under
 * the watchdog (a process that never comes is a timeout, not a hang, and
 * the members are known), then splits. */
static int n_Comm_split(jm_xla_handle h, int color, int key,
                        jm_xla_handle *out) {
  jm_native_comm *base = comm_of(h);
  if (!base) return bad_comm("MPI_Comm_split", h);
  jm_native_call call = {.mpi = "MPI_Comm_split",
                         .kind = "communicator creation, at its first "
                                 "collective over a new group of devices",
                         .rkind = "communicator creation",
                         .comm = base, .send_peer = -1, .recv_peer = -1,
                         .color = color, .key = key};
  if (jm_native_begin(&call)) return JM_XLA_ERR_NATIVE;
  int *all = malloc(sizeof(int) * 2 * (size_t)base->size);
  if (!all) return jm_native_end(&call, JM_ERR_NOMEM);
  const int undefined = color == JM_XLA_UNDEFINED;
  int mine[2] = {undefined ? -1 : color, key};
  jm_Request rq;
  int rc = jm_mpi.Iallgather(mine, 2, dtypes[JM_XLA_INDEX(JM_XLA_INT)], all, 2,
                             dtypes[JM_XLA_INDEX(JM_XLA_INT)], base->comm, &rq);
  if (!rc) rc = jm_wait(&rq, NULL, 0);
  if (rc) {
    if (rc != JM_ERR_TIMEOUT) free(all); /* else MPI may still write it */
    return jm_native_end(&call, rc);
  }
  jm_Comm comm;
  rc = jm_mpi.Comm_split(base->comm, undefined ? jm_const.undefined : color,
                         key, &comm);
  if (rc || undefined) {
    free(all);
    if (!rc) *out = JM_XLA_COMM_NULL;
    return jm_native_end(&call, rc);
  }
  jm_native_comm *c = calloc(1, sizeof *c);
  int n = 0;
  for (int i = 0; i < base->size; i++) n += all[2 * i] == color;
  int *members = c ? malloc(sizeof(int) * (size_t)n) : NULL;
  if (!c || !members) {
    free(c);
    free(all);
    jm_mpi.Comm_free(&comm);
    return jm_native_end(&call, JM_ERR_NOMEM);
  }
  /* Ranks of the new communicator: by key, then by rank in the base. */
  int m = 0;
  for (int i = 0; i < base->size; i++) {
    if (all[2 * i] != color) continue;
    int j = m++;
    while (j > 0 && all[2 * members[j - 1] + 1] > all[2 * i + 1]) {
      members[j] = members[j - 1];
      j--;
    }
    members[j] = i;
  }
  for (int i = 0; i < n; i++)
    members[i] = base->members ? base->members[members[i]] : members[i];
  free(all);
  c->comm = comm;
  c->members = members;
  c->number = atomic_fetch_add(&next_number, 1);
  rc = jm_mpi.Comm_rank(comm, &c->rank);
  if (!rc) rc = jm_mpi.Comm_size(comm, &c->size);
  jm_xla_handle made = rc ? 0 : slot_put(&comms, JM_COMM_BASE, c);
  if (rc || !made) {
    jm_mpi.Comm_free(&comm);
    free(members);
    free(c);
    return jm_native_end(&call, rc ? rc : JM_ERR_NOMEM);
  }
  *out = made;
  call.comm = c; /* the end names what was made */
  return jm_native_end(&call, 0);
}

static int n_Comm_free(jm_xla_handle *h) {
  jm_native_comm *c = comm_of(*h);
  if (!c || c == &world || c == &self) return bad_comm("MPI_Comm_free", *h);
  int finalized = 0, rc = 0;
  /* XLA's client may be destroyed after mpi4py finalised MPI. */
  jm_mpi.Finalized(&finalized);
  if (!finalized) rc = jm_mpi.Comm_free(&c->comm);
  slot_drop(&comms, JM_COMM_BASE, *h);
  free(c->members);
  free(c);
  *h = JM_XLA_COMM_NULL;
  if (rc) return fail("jaxmpi: MPI_Comm_free of a native communicator failed "
                      "on world rank %d (code %d)", world.rank, rc);
  return 0;
}

/* The call's record from its handles: 0, or the error (already set). */
static int begin_data(jm_native_call *call, jm_xla_handle comm,
                      jm_native_comm **c, jm_xla_handle t, int64_t count,
                      jm_Datatype *type, size_t *size) {
  *c = comm_of(comm);
  if (!*c) return bad_comm(call->mpi, comm);
  call->comm = *c;
  if (dtype_of(call->mpi, t, type, size, &call->dtype)) return JM_XLA_ERR_NATIVE;
  call->count = count;
  call->bytes = count * (int64_t)*size;
  return 0;
}

/* XLA's all-reduce is out of place (its input may be needed after it), and
 * MPI_Allreduce with two buffers begins by copying the input into the
 * output (MPICH: a 16 MiB psum in a jitted loop took 5.7 ms where jaxmpi's
 * in-place allreduce took 3.7). From JM_RING_BYTES on the layer goes round
 * a ring instead: a reduce-scatter in which each process receives its
 * neighbour's partial part straight into r and folds its own part of s into
 * it (MPI_Reduce_local), then an allgather of the reduced parts within r.
 * s is only read, each part of r written once by a receive: nothing copied,
 * and 2 (P-1)/P of the data sent, as MPI's own large-message algorithms
 * do. Each part is reduced on one process and passed on: every process
 * gets the same bits (at 2 processes, the bits of any sum: a + b = b + a). */
#define JM_RING_BYTES (4 << 20)
#define JM_RING_TAG 4242

static int64_t part_at(int64_t n, int p, int i) {
  return n / p * i + (i < n % p ? i : n % p);
}

static int64_t part_len(int64_t n, int p, int i) {
  return n / p + (i < n % p);
}

/* One step round the ring: part `out` of `from` to the next process, part
 * `in` of the previous one's into r. */
static int ring_step(const char *from, int out, char *r, int in, int64_t n,
                     size_t size, jm_Datatype type, const jm_native_comm *c) {
  const int p = c->size;
  jm_Status st;
  return jm_Sendrecv(from + part_at(n, p, out) * (int64_t)size,
                     part_len(n, p, out), size, type, (c->rank + 1) % p,
                     JM_RING_TAG, r + part_at(n, p, in) * (int64_t)size,
                     part_len(n, p, in), size, type, (c->rank + p - 1) % p,
                     JM_RING_TAG, c->comm, &st);
}

static int ring_allreduce(const void *s, void *r, int64_t n, size_t size,
                          jm_Datatype type, jm_Op op,
                          const jm_native_comm *c) {
  const int p = c->size, me = c->rank;
  const char *sb = s;
  char *rb = r;
  /* Step k sends the part received at step k - 1 (at 0: its own, from s)
   * and receives the part one further back, folding its own part of s into
   * it; after P - 1 steps part me + 1 holds every process's contribution. */
  for (int k = 0; k < p - 1; k++) {
    const int out = (me - k + p) % p, in = (me - k - 1 + 2 * p) % p;
    int rc = ring_step(k ? rb : sb, out, rb, in, n, size, type, c);
    if (!rc)
      rc = jm_mpi.Reduce_local(sb + part_at(n, p, in) * (int64_t)size,
                               rb + part_at(n, p, in) * (int64_t)size,
                               (int)part_len(n, p, in), type, op);
    if (rc) return rc;
  }
  /* Then the reduced parts go round: step k passes on part me + 1 - k. */
  for (int k = 0; k < p - 1; k++) {
    const int out = (me + 1 - k + p) % p, in = (me - k + p) % p;
    int rc = ring_step(rb, out, rb, in, n, size, type, c);
    if (rc) return rc;
  }
  return 0;
}

static int n_Allreduce(const void *s, void *r, int n, jm_xla_handle t,
                       jm_xla_handle op, jm_xla_handle comm) {
  jm_native_call call = {.mpi = "MPI_Allreduce", .kind = "all-reduce",
                         .send_peer = -1, .recv_peer = -1};
  jm_native_comm *c;
  jm_Datatype type = (jm_Datatype)0;
  jm_Op mop = (jm_Op)0;
  size_t size = 0;
  if (begin_data(&call, comm, &c, t, n, &type, &size) ||
      op_of(call.mpi, op, &mop, &call.op))
    return JM_XLA_ERR_NATIVE;
  if (jm_native_begin(&call)) return JM_XLA_ERR_NATIVE;
  const void *send = send_buffer(s, r);
  if (send != jm_const.in_place && c->size > 1 &&
      (int64_t)n * (int64_t)size >= JM_RING_BYTES)
    return jm_native_end(&call,
                         ring_allreduce(send, r, n, size, type, mop, c));
  return jm_native_end(&call, jm_Allreduce(send, r, n, size, type, mop,
                                           c->comm));
}

static int n_Allgather(const void *s, int sn, jm_xla_handle st, void *r,
                       int rn, jm_xla_handle rt, jm_xla_handle comm) {
  jm_native_call call = {.mpi = "MPI_Allgather", .kind = "all-gather",
                         .send_peer = -1, .recv_peer = -1};
  jm_native_comm *c;
  jm_Datatype type = (jm_Datatype)0;
  size_t size = 0;
  if (begin_data(&call, comm, &c, rt, rn, &type, &size)) return JM_XLA_ERR_NATIVE;
  if (sn != rn || st != rt)
    return fail("jaxmpi: MPI_Allgather: jaxmpi's MPI layer for XLA takes "
                "equal send and receive counts and types (as XLA's "
                "all-gather passes), got %d and %d",
                sn, rn);
  if (jm_native_begin(&call)) return JM_XLA_ERR_NATIVE;
  const void *send = s == sentinel(JM_XLA_IN_PLACE) ? jm_const.in_place : s;
  return jm_native_end(&call,
                       jm_Allgather(send, r, rn, size, type, c->comm));
}

static int n_Reduce_scatter(const void *s, void *r, const int *counts,
                            jm_xla_handle t, jm_xla_handle op,
                            jm_xla_handle comm) {
  jm_native_call call = {.mpi = "MPI_Reduce_scatter", .kind = "reduce-scatter",
                         .send_peer = -1, .recv_peer = -1};
  jm_native_comm *c = comm_of(comm);
  if (!c) return bad_comm(call.mpi, comm);
  jm_Datatype type = (jm_Datatype)0;
  jm_Op mop = (jm_Op)0;
  size_t size = 0;
  if (begin_data(&call, comm, &c, t, counts[c->rank], &type, &size) ||
      op_of(call.mpi, op, &mop, &call.op))
    return JM_XLA_ERR_NATIVE;
  /* MPI reads the counts until the call completes: an abandoned one (a
   * timeout) keeps them. */
  if (jm_native_begin(&call)) return JM_XLA_ERR_NATIVE;
  int64_t *wide = malloc(sizeof(int64_t) * (size_t)c->size);
  int *ints = malloc(sizeof(int) * (size_t)c->size);
  if (!wide || !ints) {
    free(wide);
    free(ints);
    return jm_native_end(&call, JM_ERR_NOMEM);
  }
  for (int i = 0; i < c->size; i++) wide[i] = counts[i];
  int rc = jm_Reduce_scatter(send_buffer(s, r), r, wide, ints, c->size, c->rank,
                             size, type, mop, c->comm);
  free(wide);
  if (rc != JM_ERR_TIMEOUT) free(ints);
  return jm_native_end(&call, rc);
}

/* A request of XLA's collective-permute: the running MPI's request and
 * what it is for (the Wait's record). */
typedef struct native_request {
  int is_recv;
  jm_Request rq;
  jm_native_call call;
} native_request;

static int start_p2p(const char *mpi, int is_recv, void *buf, int n,
                     jm_xla_handle t, int peer, int tag, jm_xla_handle comm,
                     jm_xla_handle *req) {
  jm_native_call call = {.mpi = mpi, .kind = "collective-permute",
                         .send_peer = is_recv ? -1 : peer,
                         .recv_peer = is_recv ? peer : -1};
  jm_native_comm *c;
  jm_Datatype type = (jm_Datatype)0;
  size_t size = 0;
  if (begin_data(&call, comm, &c, t, n, &type, &size)) return JM_XLA_ERR_NATIVE;
  if (jm_native_begin(&call)) return JM_XLA_ERR_NATIVE;
  native_request *q = malloc(sizeof *q);
  if (!q) return jm_native_end(&call, JM_ERR_NOMEM);
  q->is_recv = is_recv;
  q->call = call;
  int rc = is_recv ? jm_Irecv(buf, n, size, type, rank_in(peer), tag_in(tag),
                              c->comm, &q->rq)
                   : jm_Isend(buf, n, size, type, rank_in(peer), tag, c->comm,
                              &q->rq);
  jm_xla_handle made = rc ? 0 : slot_put(&requests, JM_REQUEST_BASE, q);
  if (rc || !made) {
    if (!rc) { /* every slot taken: leave nothing in flight */
      if (is_recv) jm_cancel_receives(1, &q->rq);
      else jm_mpi.Request_free(&q->rq);
    }
    free(q);
    return jm_native_end(&call, rc ? rc : JM_ERR_NOMEM);
  }
  *req = made;
  return jm_native_end(&call, 0);
}

static int n_Isend(const void *buf, int n, jm_xla_handle t, int dest, int tag,
                   jm_xla_handle comm, jm_xla_handle *req) {
  return start_p2p("MPI_Isend", 0, (void *)buf, n, t, dest, tag, comm, req);
}

static int n_Irecv(void *buf, int n, jm_xla_handle t, int source, int tag,
                   jm_xla_handle comm, jm_xla_handle *req) {
  return start_p2p("MPI_Irecv", 1, buf, n, t, source, tag, comm, req);
}

static int n_Wait(jm_xla_handle *req, jm_xla_status *status) {
  if (*req == JM_XLA_REQUEST_NULL) {
    jm_Status empty = {0};
    empty.MPI_SOURCE = jm_const.proc_null;
    empty.MPI_TAG = jm_const.any_tag;
    status_out(status, &empty, JM_XLA_PROC_NULL);
    return 0;
  }
  native_request *q = slot_get(&requests, JM_REQUEST_BASE, *req);
  if (!q)
    return fail("jaxmpi: MPI_Wait: request handle 0x%llx is not one of "
                "jaxmpi's MPI layer for XLA (completed already, or never "
                "started by it)",
                (unsigned long long)*req);
  jm_native_call call = q->call;
  call.mpi = q->is_recv ? "MPI_Wait (of MPI_Irecv)" : "MPI_Wait (of MPI_Isend)";
  if (jm_native_begin(&call)) return JM_XLA_ERR_NATIVE;
  jm_Status st;
  memset(&st, 0, sizeof st);
  int rc = jm_wait(&q->rq, &st, q->is_recv);
  if (!rc) status_out(status, &st, q->is_recv ? q->call.recv_peer : -1);
  slot_drop(&requests, JM_REQUEST_BASE, *req);
  free(q);
  *req = JM_XLA_REQUEST_NULL;
  return jm_native_end(&call, rc);
}

static int n_Sendrecv(const void *s, int sn, jm_xla_handle st, int dest,
                      int stag, void *r, int rn, jm_xla_handle rt, int source,
                      int rtag, jm_xla_handle comm, jm_xla_status *status) {
  jm_native_call call = {.mpi = "MPI_Sendrecv", .kind = "all-to-all",
                         .send_peer = dest, .recv_peer = source};
  jm_native_comm *c;
  jm_Datatype stype = (jm_Datatype)0, rtype = (jm_Datatype)0;
  size_t ssize = 0, rsize = 0;
  const char *sname;
  if (begin_data(&call, comm, &c, rt, rn, &rtype, &rsize) ||
      dtype_of(call.mpi, st, &stype, &ssize, &sname))
    return JM_XLA_ERR_NATIVE;
  if (jm_native_begin(&call)) return JM_XLA_ERR_NATIVE;
  jm_Status mst;
  memset(&mst, 0, sizeof mst);
  int rc = jm_Sendrecv(s, sn, ssize, stype, rank_in(dest), stag, r, rn, rsize,
                       rtype, rank_in(source), tag_in(rtag), c->comm, &mst);
  if (!rc) status_out(status, &mst, source);
  return jm_native_end(&call, rc);
}

static const jm_xla_calls calls = {
    .version = JM_XLA_CALLS_VERSION,
#define JM_NATIVE_CALL(ret, name, params, args) .name = n_##name,
    JM_XLA_CORE_CALLS(JM_NATIVE_CALL)
#undef JM_NATIVE_CALL
        .error_string = error_string,
};

/* ---- ctypes entry points ---------------------------------------------------- */

JM_EXPORT const jm_xla_calls *jaxmpi_native_calls(void) { return &calls; }

JM_EXPORT int jaxmpi_native_configure(uint64_t world_h, uint64_t self_h,
                                      int rank, int size, int multiple,
                                      uint64_t sentinel_base, int devices,
                                      char *err, size_t errlen) {
  if (!sentinel_base || rank < 0 || size < 1 || devices < 1) {
    snprintf(err, errlen, "jaxmpi_native_configure: bad arguments");
    return -1;
  }
  world.comm = JM_HANDLE(jm_Comm, world_h);
  world.rank = rank;
  world.size = size;
  self.comm = JM_HANDLE(jm_Comm, self_h);
  self.rank = 0;
  self.size = 1;
  static int self_member;
  self_member = rank;
  self.members = &self_member;
  thread_multiple = multiple;
  devices_per_process = devices;
  sentinels = (const unsigned char *)(uintptr_t)sentinel_base;
  return 0;
}

JM_EXPORT int jaxmpi_native_set_handle(uint64_t token, uint64_t handle,
                                       int size, const char *name) {
  if (!JM_XLA_IS_TOKEN(token) || !name) return -1;
  int i = JM_XLA_INDEX(token);
  if (JM_XLA_CLASS(token) == JM_XLA_DATATYPE && size > 0) {
    dtypes[i] = JM_HANDLE(jm_Datatype, handle);
    snprintf(dnames[i], sizeof dnames[i], "%s", name);
    dsizes[i] = size;
    return 0;
  }
  if (JM_XLA_CLASS(token) == JM_XLA_OP) {
    ops[i] = JM_HANDLE(jm_Op, handle);
    snprintf(opnames[i], sizeof opnames[i], "%s", name);
    return 0;
  }
  return -1;
}
