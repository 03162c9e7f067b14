/* The bottom of the FFI layer: what XLA's element types are to jaxmpi,
 * decoding call frames and attributes into a jm_call, errors, the debug log,
 * the registry of call sites. Calls only mpi_api.c and watchdog.c (for the
 * timeout in messages); the handlers that use it are in handlers.c. */
#include "ffi.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "record_read.h"
#include "watchdog.h"

jm_config jm_cfg;


jm_dtype jm_dtypes[JM_NDTYPES] = {
    [XLA_FFI_DataType_PRED] = {"bool", 1, 0, 0},
    [XLA_FFI_DataType_S8] = {"int8", 1, 0, 0},
    [XLA_FFI_DataType_S16] = {"int16", 2, 0, 0},
    [XLA_FFI_DataType_S32] = {"int32", 4, 0, 0},
    [XLA_FFI_DataType_S64] = {"int64", 8, 0, 0},
    [XLA_FFI_DataType_U8] = {"uint8", 1, 0, 0},
    [XLA_FFI_DataType_U16] = {"uint16", 2, 0, 0},
    [XLA_FFI_DataType_U32] = {"uint32", 4, 0, 0},
    [XLA_FFI_DataType_U64] = {"uint64", 8, 0, 0},
    [XLA_FFI_DataType_F16] = {"float16", 2, 0, 0},
    [XLA_FFI_DataType_F32] = {"float32", 4, 0, 0},
    [XLA_FFI_DataType_F64] = {"float64", 8, 0, 0},
    [XLA_FFI_DataType_BF16] = {"bfloat16", 2, 0, 0},
    [XLA_FFI_DataType_C64] = {"complex64", 8, 0, 0},
    [XLA_FFI_DataType_C128] = {"complex128", 16, 0, 0},
};

static const char *dtype_name(int dtype) {
  if (dtype >= 0 && dtype < JM_NDTYPES && jm_dtypes[dtype].name)
    return jm_dtypes[dtype].name;
  return "unsupported";
}

/* ---- errors ------------------------------------------------------------- */

static XLA_FFI_Error *make_error(const XLA_FFI_Api *api, XLA_FFI_Error_Code code,
                                 const char *message) {
  XLA_FFI_Error_Create_Args args;
  memset(&args, 0, sizeof args);
  args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  args.extension_start = NULL;
  args.message = message;
  args.errc = code;
  return api->XLA_FFI_Error_Create(&args);
}

/* Errors outside XLA: an eager call's check (handlers.c,
 * jaxmpi_check_eager) runs with no call frame, and its jm_call's api is this
 * table, whose only entry keeps an error's code and message for
 * jm_captured. */
typedef struct jm_captured_error {
  XLA_FFI_Error_Code code;
  char message[];
} jm_captured_error;

static const jm_captured_error no_memory_for_error = {
    XLA_FFI_Error_Code_RESOURCE_EXHAUSTED};

static XLA_FFI_Error *capture_error(XLA_FFI_Error_Create_Args *args) {
  const char *msg = args->message ? args->message : "";
  const size_t n = strlen(msg);
  jm_captured_error *e = malloc(sizeof *e + n + 1);
  if (!e) return (XLA_FFI_Error *)(uintptr_t)&no_memory_for_error;
  e->code = args->errc;
  memcpy(e->message, msg, n + 1);
  return (XLA_FFI_Error *)e;
}

static const XLA_FFI_Api capture_api = {
    .struct_size = sizeof(XLA_FFI_Api),
    .XLA_FFI_Error_Create = capture_error,
};

const XLA_FFI_Api *jm_capture_api(void) { return &capture_api; }

int jm_captured(XLA_FFI_Error *err, char *out, size_t len) {
  const jm_captured_error *e = (const jm_captured_error *)err;
  if (e == &no_memory_for_error) {
    snprintf(out, len, "out of memory while reporting an error");
    return e->code;
  }
  snprintf(out, len, "%s", e->message);
  const int code = e->code;
  free((void *)(uintptr_t)e);
  return code;
}

XLA_FFI_Error *jm_error(jm_call *c, XLA_FFI_Error_Code code, const char *fmt,
                        ...) {
  char msg[4096];
  int n = c->position >= 0 && c->ndevices > 0
              ? snprintf(msg, sizeof msg, "jaxmpi.%s (device position %d of %d): ",
                         c->opname, c->position, c->ndevices)
              : snprintf(msg, sizeof msg, "jaxmpi.%s: ", c->opname);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
  va_end(ap);
  return make_error(c->api, code, msg);
}

static void format_rank(char *out, size_t len, const char *kind, int r) {
  if (r == jm_const.any_source)
    snprintf(out, len, "%s MPI.ANY_SOURCE", kind);
  else
    snprintf(out, len, "%s %d", kind, r);
}

static void format_tag(char *out, size_t len, const char *kind, int t) {
  if (t == jm_const.any_tag)
    snprintf(out, len, ", %s MPI.ANY_TAG", kind);
  else
    snprintf(out, len, ", %s %d", kind, t);
}

/* The watchdog's report: what this rank waited for, and what to do now. */
static XLA_FFI_Error *timeout_failure(jm_call *c, const char *fn,
                                      const char *peer_kind, int peer) {
  char where[400] = "", tags[64] = "", t2[48] = "";
  if (peer_kind) {
    where[0] = ',';
    where[1] = ' ';
    format_rank(where + 2, sizeof where - 2, peer_kind, peer);
  }
  if (c->attrs & JM_A(tag)) format_tag(tags, sizeof tags, "tag", c->tag);
  if (c->attrs & JM_A(sendtag)) {
    format_tag(tags, sizeof tags, "sendtag", c->sendtag);
    format_tag(t2, sizeof t2, "recvtag", c->recvtag);
  }
  if (c->attrs & JM_A(sources)) {
    size_t n = strlen(where);
    for (int k = 0; k < 2; k++) {
      const int *r = k ? c->dests : c->sources;
      int m = k ? c->ndests : c->nsources;
      n += (size_t)snprintf(where + n, sizeof where - n, ", %s [",
                            k ? "dests" : "sources");
      for (int i = 0; i < m && n < sizeof where; i++)
        n += (size_t)snprintf(where + n, sizeof where - n, i ? ",%d" : "%d",
                              r[i]);
      if (n < sizeof where) n += (size_t)snprintf(where + n, sizeof where - n, "]");
      if (n >= sizeof where) break;
    }
  }
  if (c->attrs & JM_A(dest) && c->attrs & JM_A(source) && peer_kind &&
      strcmp(peer_kind, "source") == 0)
    snprintf(where + strlen(where), sizeof where - strlen(where), ", dest %d",
             c->dest);
  char site[200], from[240] = "";
  if (jm_site_text(c->site, site, sizeof site)[0])
    snprintf(from, sizeof from, " (this rank's call at %s)", site);
  const char *why =
      c->size == 1
          ? "Likely cause: the communicator has 1 rank, so only this process "
            "could make the matching call, and it cannot while it waits here "
            "(jaxmpi calls run one at a time, in program order): was the job "
            "started without mpirun/mpiexec -n N, or is a receive from itself "
            "missing its send?"
          : "Likely causes: a rank took another branch or order of calls and "
            "never makes this one (with JAXMPI_DEBUG=1 each call is logged "
            "when it starts: the last line of each rank names the call it "
            "waits in), a receive with no matching send, or a rank that "
            "died, raised or is far behind.";
  /* The flight recorder's account: every rank's ring when the rings on
   * disk allow it, else this rank's (record_read.c). */
  char seen[2048];
  const int verdict = jm_record_timeout(c->rec, fn, seen, sizeof seen);
  return jm_error(c, XLA_FFI_Error_Code_DEADLINE_EXCEEDED,
                  "timed out after %.3g s (JAXMPI_TIMEOUT) in %s on rank %d of "
                  "%d%s%s%s, jaxmpi call #%lld of this process: the peer(s) "
                  "never made the matching call%s. %s%s%s The call was "
                  "abandoned, not completed: the communicator cannot be used "
                  "any more; end the job (MPI.COMM_WORLD.Abort(1))",
                  jm_watchdog_timeout(), fn, c->rank, c->size, where, tags, t2,
                  (long long)c->callno, from, seen,
                  seen[0] && !verdict ? " " : "",
                  verdict ? "" : why);
}

XLA_FFI_Error *jm_mpi_failure(jm_call *c, const char *fn, const char *peer_kind,
                              int peer, int rc) {
  if (rc == JM_ERR_TIMEOUT) return timeout_failure(c, fn, peer_kind, peer);
  if (rc == JM_ERR_COUNT)
    return jm_error(c, XLA_FFI_Error_Code_UNIMPLEMENTED,
                    "%s on rank %d of %d: a count or displacement beyond "
                    "JAXMPI_MAX_COUNT (INT_MAX by default) rows needs the "
                    "MPI-4 large-count call, which this MPI lacks (or "
                    "JAXMPI_NO_LARGE_COUNT=1 turned off)",
                    fn, c->rank, c->size);
  if (rc == JM_ERR_NOMEM)
    return jm_error(c, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                    "%s on rank %d of %d: out of memory for its count and "
                    "displacement arrays",
                    fn, c->rank, c->size);
  char mpimsg[1024] = "";
  int len = 0, cls = rc;
  if (jm_mpi.Error_string(rc, mpimsg, &len) != 0)
    snprintf(mpimsg, sizeof mpimsg, "unknown MPI error");
  jm_mpi.Error_class(rc, &cls);
  char where[96] = "";
  if (peer_kind) snprintf(where, sizeof where, ", %s %d", peer_kind, peer);
  jm_record_failure(c->rec, fn, mpimsg);
  return jm_error(c, XLA_FFI_Error_Code_INTERNAL,
                  "%s failed on rank %d of %d%s: %s (MPI error code %d, class "
                  "%d)",
                  fn, c->rank, c->size, where, mpimsg, rc, cls);
}

/* ---- debug log ---------------------------------------------------------- */

/* "float32[4,5]" of a call's first array, "" when it has none; a wait's,
 * " of <start> (call #n)". */
static void describe_payload(const jm_call *c, char *out, size_t len) {
  const jm_buffer *b = c->nargs ? &c->arg[0] : c->nrets ? &c->ret[0] : NULL;
  out[0] = '\0';
  if (c->of) {
    snprintf(out, len, " of %s (call #%lld)", c->of->opname,
             (long long)c->of->callno);
    return;
  }
  if (!b) return;
  size_t n = (size_t)snprintf(out, len, " %s[", dtype_name(b->dtype));
  for (int64_t d = 0; d < b->ndim && n < len; d++)
    n += (size_t)snprintf(out + n, len - n, d ? ",%lld" : "%lld",
                          (long long)b->dims[d]);
  if (n < len) snprintf(out + n, len - n, "]");
}

/* One line when a jaxmpi call starts (so that the last line of a hung rank
 * names the call it waits in) and one when it ends. */
void jm_log_call(const jm_call *c, const XLA_FFI_Error *err, double t0,
                     int start) {
  char site[200], at[220] = "";
  if (jm_site_text(c->site, site, sizeof site)[0])
    snprintf(at, sizeof at, " at %s", site);
  if (start) {
    char arr[200];
    describe_payload(c, arr, sizeof arr);
    fprintf(stderr, "jaxmpi r%d/%d | call #%lld %s%s%s | start\n", c->rank,
            c->size, (long long)c->callno, c->opname, arr, at);
  } else {
    fprintf(stderr, "jaxmpi r%d/%d | call #%lld %s%s | %s after %.2f us\n",
            c->rank, c->size, (long long)c->callno, c->opname, at,
            err                                ? "failed"
            : c->frame && c->frame->future ? "pending (an asynchronous wait)"
                                           : "done",
            (jm_mpi.Wtime() - t0) * 1e6);
  }
  fflush(stderr);
}

/* MPI_Wtime for the debug log; the recorder's clock when only the trace
 * needs the duration (MPI_Wtime was a fifth of the trace's cost). */
static double log_clock(void) {
  return (jm_cfg.debug & JM_DEBUG_LOG) ? jm_mpi.Wtime() : jm_record_seconds();
}

double jm_log_start(void) { return jm_cfg.debug ? log_clock() : 0.0; }

void jm_log(const jm_call *c, const char *fn, const char *peer_kind, int peer,
            int64_t count, int dtype, double t0) {
  double us = (log_clock() - t0) * 1e6;
  if (jm_cfg.debug & JM_DEBUG_TRACE)
    jm_record_inner(c->rec.number, c->position, fn, peer, count, us * 1e-6);
  if (!(jm_cfg.debug & JM_DEBUG_LOG)) return;
  char where[64] = "";
  if (peer_kind) snprintf(where, sizeof where, " %s=%d", peer_kind, peer);
  fprintf(stderr, "jaxmpi r%d/%d | %s%s count=%lld dtype=%s | %.2f us\n",
          c->rank, c->size, fn, where, (long long)count, dtype_name(dtype), us);
  fflush(stderr);
}


/* ---- decoding ----------------------------------------------------------- */

/* The header of a call frame's extension: XLA_FFI_Extension_Base up to
 * jaxlib 0.10, renamed XLA_FFI_InternalExtension (same layout) in 0.11. */
typedef struct jm_extension {
  size_t struct_size;
  int type; /* an enum */
  struct jm_extension *next;
} jm_extension;

/* XLA asks every handler for its metadata once, at registration. We claim
 * API version 0.1, which every supported jaxlib accepts, and no traits (a
 * handler that calls MPI must never be captured into a command buffer). */
int jm_answer_metadata_query(XLA_FFI_CallFrame *frame) {
  for (jm_extension *e = (jm_extension *)(void *)frame->extension_start; e;
       e = e->next) {
    if (e->type != XLA_FFI_Extension_Metadata) continue;
    XLA_FFI_Metadata *m = ((XLA_FFI_Metadata_Extension *)e)->metadata;
    m->api_version.major_version = 0;
    m->api_version.minor_version = 1;
    m->traits = 0;
    return 1;
  }
  return 0;
}

/* `extra`: one more buffer follows the op's own (a device's position). */
static XLA_FFI_Error *decode_buffers(jm_call *c, int n, int extra,
                                     int64_t size, const int *types,
                                     void **items, jm_buffer *out,
                                     int *decoded, const char *what) {
  int k = 0;
  const int variadic = n == JM_VARIADIC;
  n = (variadic ? JM_MAX_BUFFERS : n) + extra;
  for (int64_t i = 0; i < size; i++) {
    XLA_FFI_Buffer *b = items[i];
    if (types[i] != 1 /* BUFFER */)
      return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                      "%s %lld is not a buffer", what, (long long)i);
    if (b->dtype == XLA_FFI_DataType_TOKEN) continue;
    if (k >= n)
      return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                      "expected %s%d data %ss, got more",
                      variadic ? "at most " : "", n, what);
    int dt = (int)b->dtype;
    if (dt < 0 || dt >= JM_NDTYPES || !jm_dtypes[dt].has_mpi)
      return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                      "%s %d has unsupported element type %s (XLA type %d)",
                      what, k, dtype_name(dt), dt);
    int64_t count = 1;
    for (int64_t d = 0; d < b->rank; d++) count *= b->dims[d];
    out[k].data = b->data;
    out[k].count = count;
    out[k].dtype = dt;
    out[k].elsize = jm_dtypes[dt].size;
    out[k].mpi = jm_dtypes[dt].mpi;
    out[k].ndim = b->rank;
    out[k].dims = b->dims;
    k++;
  }
  if (k != n && !variadic)
    return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                    "expected %d data %ss, got %d", n, what, k);
  *decoded = k;
  return NULL;
}

static const char *const attr_names[JM_NATTRS] = {
#define JM_ATTR_NAME(name, type) [JM_ATTR_##name] = #name,
    JM_ATTRS(JM_ATTR_NAME)
#undef JM_ATTR_NAME
};
enum { JM_SCALAR, JM_ARRAY };
static const int attr_kinds[JM_NATTRS] = {
#define JM_ATTR_KIND(name, kind) [JM_ATTR_##name] = JM_##kind,
    JM_ATTRS(JM_ATTR_KIND)
#undef JM_ATTR_KIND
};

/* An int64 array attribute into `out` (at most JM_MAX_BUFFERS int ranks). */
static XLA_FFI_Error *decode_array(jm_call *c, int a, const XLA_FFI_Array *arr,
                                   int *out, int *n) {
  if (arr->dtype != XLA_FFI_DataType_S64 || arr->size > JM_MAX_BUFFERS)
    return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                    "attribute '%s' must be an int64 array of at most %d "
                    "items",
                    attr_names[a], JM_MAX_BUFFERS);
  for (size_t i = 0; i < arr->size; i++) {
    int64_t v;
    memcpy(&v, (const char *)arr->data + i * sizeof v, sizeof v);
    out[i] = (int)v;
  }
  *n = (int)arr->size;
  return NULL;
}

/* A row-count array attribute: kept where it is (the frame outlives the
 * call); its length and signs are checked once the communicator's size is
 * known (check_rows). */
static XLA_FFI_Error *decode_rows(jm_call *c, int a, const XLA_FFI_Array *arr,
                                  int k) {
  if (arr->dtype != XLA_FFI_DataType_S64 || arr->size > INT_MAX)
    return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                    "attribute '%s' must be an int64 array", attr_names[a]);
  c->rows[k] = arr->data;
  c->nrows[k] = (int)arr->size;
  return NULL;
}

/* Every row-count array the op takes has one count per rank, none
 * negative (Python checks this first; never trust it blindly). */
static XLA_FFI_Error *check_rows(jm_call *c) {
  static const int attr_of[3] = {JM_ATTR_counts, JM_ATTR_sendcounts,
                                 JM_ATTR_recvcounts};
  for (int k = 0; k < 3; k++) {
    if (!(c->attrs & (1u << attr_of[k]))) continue;
    if (c->nrows[k] != c->size)
      return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                      "attribute '%s' has %d items: expected one per rank "
                      "of the communicator (%d)",
                      attr_names[attr_of[k]], c->nrows[k], c->size);
    int64_t sum = 0;
    for (int i = 0; i < c->size; i++) {
      if (jm_rows(c, k, i) < 0)
        return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                        "%s[%d]=%lld is negative", attr_names[attr_of[k]], i,
                        (long long)jm_rows(c, k, i));
      if (__builtin_add_overflow(sum, jm_rows(c, k, i), &sum))
        return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                        "the sum of %s overflows 64 bits",
                        attr_names[attr_of[k]]);
    }
  }
  return NULL;
}

/* The names' lengths, known at compile time: a strlen per name and
 * attribute was about a fifth of decoding a 4-byte allreduce (callgrind:
 * about 480 of 1600 instructions). */
static const size_t attr_lens[JM_NATTRS] = {
#define JM_ATTR_LEN(name, type) [JM_ATTR_##name] = sizeof #name - 1,
    JM_ATTRS(JM_ATTR_LEN)
#undef JM_ATTR_LEN
};

static int find_attr(const XLA_FFI_ByteSpan *name) {
  for (int i = 0; i < JM_NATTRS; i++)
    if (name->len == attr_lens[i] &&
        memcmp(name->ptr, attr_names[i], attr_lens[i]) == 0)
      return i;
  return -1;
}

/* The scalar attributes into c; the array ones (but row counts) into
 * arrays[], decoded once the device's position is known (jm_decode). */
static XLA_FFI_Error *decode_attrs(jm_call *c, const XLA_FFI_Attrs *attrs,
                                   unsigned wanted,
                                   const XLA_FFI_Array *arrays[JM_NATTRS]) {
  uint64_t raw[JM_NATTRS] = {0};
  unsigned seen = 0;
  for (int64_t i = 0; i < attrs->size; i++) {
    const XLA_FFI_ByteSpan *name = attrs->names[i];
    int a = find_attr(name);
    if (a < 0 || !((wanted | JM_A(site) | JM_DEVICE_ATTRS) & (1u << a)))
      return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                      "unexpected attribute '%.*s'", (int)name->len, name->ptr);
    seen |= 1u << a;
    if (attr_kinds[a] == JM_ARRAY) {
      if (attrs->types[i] != XLA_FFI_AttrType_ARRAY)
        return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                        "attribute '%s' must be an int64 array",
                        attr_names[a]);
      const int rows = a == JM_ATTR_counts       ? JM_ROWS_COUNTS
                       : a == JM_ATTR_sendcounts ? JM_ROWS_SEND
                       : a == JM_ATTR_recvcounts ? JM_ROWS_RECV
                                                 : -1;
      if (rows >= 0) {
        XLA_FFI_Error *err = decode_rows(c, a, attrs->attrs[i], rows);
        if (err) return err;
      } else {
        arrays[a] = attrs->attrs[i];
      }
      continue;
    }
    const XLA_FFI_Scalar *s = attrs->attrs[i];
    if (attrs->types[i] != XLA_FFI_AttrType_SCALAR ||
        s->dtype != XLA_FFI_DataType_S64)
      return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                      "attribute '%s' must be an int64 scalar", attr_names[a]);
    memcpy(&raw[a], s->value, sizeof raw[a]);
  }
  if ((seen & ~(JM_A(site) | JM_DEVICE_ATTRS)) != wanted) {
    for (int a = 0; a < JM_NATTRS; a++)
      if ((wanted & ~seen) & (1u << a))
        return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                        "missing attribute '%s'", attr_names[a]);
  }
  c->comm = JM_HANDLE(jm_Comm, raw[JM_ATTR_comm]);
  c->op = JM_HANDLE(jm_Op, raw[JM_ATTR_op]);
  c->root = (int)(int64_t)raw[JM_ATTR_root];
  c->source = (int)(int64_t)raw[JM_ATTR_source];
  c->dest = (int)(int64_t)raw[JM_ATTR_dest];
  c->tag = (int)(int64_t)raw[JM_ATTR_tag];
  c->sendtag = (int)(int64_t)raw[JM_ATTR_sendtag];
  c->recvtag = (int)(int64_t)raw[JM_ATTR_recvtag];
  c->status = (jm_Status *)(uintptr_t)raw[JM_ATTR_status];
  c->site = (int64_t)raw[JM_ATTR_site];
  c->ndevices = (int)(int64_t)raw[JM_ATTR_devices];
  if ((seen & JM_DEVICE_ATTRS) && ((seen & JM_DEVICE_ATTRS) != JM_DEVICE_ATTRS ||
                                   c->ndevices < 1 ||
                                   c->ndevices > JM_MAX_DEVICES))
    return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                    "attributes 'devices' (1 to %d, got %d) and 'comms' go "
                    "together",
                    JM_MAX_DEVICES, c->ndevices);
  return NULL;
}

static int64_t array_item(const XLA_FFI_Array *arr, size_t i) {
  int64_t v;
  memcpy(&v, (const char *)arr->data + i * sizeof v, sizeof v);
  return v;
}

/* A call of a program over several devices: its position (the last data
 * argument, taken off the arguments), its communicator, and for an exchange
 * over positions (comms of devices x devices) each pair's peer process and
 * communicators from row `position` of sources/dests, whose items are
 * endpoint ranks (process * devices + position) or MPI_PROC_NULL. */
static XLA_FFI_Error *decode_position(jm_call *c,
                                      const XLA_FFI_Array *arrays[JM_NATTRS]) {
  const int n = c->ndevices;
  const XLA_FFI_Array *comms = arrays[JM_ATTR_comms];
  if (c->nargs < 1 || c->arg[c->nargs - 1].count != 1 ||
      c->arg[c->nargs - 1].dtype != XLA_FFI_DataType_S32)
    return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                    "a call over %d devices takes its position as its last "
                    "argument, an int32 scalar",
                    n);
  jm_buffer *pos = &c->arg[--c->nargs];
  int32_t p;
  memcpy(&p, pos->data, sizeof p); /* host memory: XLA:CPU's handlers */
  memset(pos, 0, sizeof *pos);
  if (p < 0 || p >= n)
    return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                    "device position %d is not in 0 to %d", (int)p, n - 1);
  c->position = p;
  const int matrix = comms->size == (size_t)n * (size_t)n && n > 1;
  if (comms->dtype != XLA_FFI_DataType_S64 ||
      (comms->size != (size_t)n && !matrix))
    return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                    "attribute 'comms' must hold %d or %d int64 handles",
                    n, n * n);
  c->comm = JM_HANDLE(jm_Comm, (uint64_t)array_item(
                                   comms, matrix ? (size_t)p * n + p : (size_t)p));
  if (!matrix) return NULL;
  /* Endpoint rows: pair i of this position sends to dests[p][i] and receives
   * from sources[p][i]. */
  c->paired = 1;
  for (int k = 0; k < 2; k++) {
    const XLA_FFI_Array *arr = arrays[k ? JM_ATTR_dests : JM_ATTR_sources];
    if (!arr) continue;
    if (arr->dtype != XLA_FFI_DataType_S64 || arr->size % (size_t)n ||
        arr->size / (size_t)n > JM_MAX_BUFFERS)
      return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                      "attribute '%s' must hold %d rows of at most %d "
                      "endpoint ranks",
                      k ? "dests" : "sources", n, JM_MAX_BUFFERS);
    const int m = (int)(arr->size / (size_t)n);
    int *peer = k ? c->dests : c->sources;
    jm_Comm *via = k ? c->sendcomm : c->recvcomm;
    for (int i = 0; i < m; i++) {
      const int64_t e = array_item(arr, (size_t)p * m + i);
      if (e == jm_const.proc_null) {
        peer[i] = jm_const.proc_null;
        via[i] = c->comm;
        continue;
      }
      if (e < 0 || e / n > INT_MAX)
        return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                        "%s[%d][%d]=%lld is not an endpoint rank",
                        k ? "dests" : "sources", (int)p, i, (long long)e);
      const int q = (int)(e % n);
      /* k -> j: sends of this position p to q use pair (p, q); receives
       * from position q use pair (q, p). */
      const int64_t h = array_item(comms, k ? (size_t)p * n + q
                                            : (size_t)q * n + p);
      if (!h)
        return jm_error(c, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                        "no communicator for messages from position %d to %d",
                        k ? (int)p : q, k ? q : (int)p);
      peer[i] = (int)(e / n);
      via[i] = JM_HANDLE(jm_Comm, (uint64_t)h);
    }
    *(k ? &c->ndests : &c->nsources) = m;
  }
  return NULL;
}

XLA_FFI_Error *jm_decode(XLA_FFI_CallFrame *frame, const jm_op_desc *desc,
                         jm_call *c, int on_gpu) {
  memset(c, 0, JM_CALL_HEAD);
  c->opname = desc->name;
  c->frame = frame;
  c->api = frame->api;
  c->attrs = desc->attrs;
  XLA_FFI_Error *err;
  c->position = -1;
  const XLA_FFI_Array *arrays[JM_NATTRS] = {0};
  if ((err = decode_attrs(c, &frame->attrs, desc->attrs, arrays))) return err;
  /* Over several devices the position is one more argument (the last). */
  if ((err = decode_buffers(c, desc->nargs, c->ndevices > 0, frame->args.size,
                            (const int *)frame->args.types, frame->args.args,
                            c->arg, &c->nargs, "argument")))
    return err;
  if ((err = decode_buffers(c, desc->nrets, 0, frame->rets.size,
                            (const int *)frame->rets.types, frame->rets.rets,
                            c->ret, &c->nrets, "result")))
    return err;
  if (c->ndevices && on_gpu)
    /* The position would have to be copied from GPU memory first. */
    return jm_error(c, XLA_FFI_Error_Code_UNIMPLEMENTED,
                    "several GPUs per process are not supported yet: start "
                    "one process per GPU");
  if (c->ndevices && (err = decode_position(c, arrays))) return err;
  for (int k = 0; k < 2 && !c->paired; k++) {
    const XLA_FFI_Array *arr = arrays[k ? JM_ATTR_dests : JM_ATTR_sources];
    if (arr && (err = decode_array(c, k ? JM_ATTR_dests : JM_ATTR_sources, arr,
                                   k ? c->dests : c->sources,
                                   k ? &c->ndests : &c->nsources)))
      return err;
  }
  /* An op without a communicator (the wait) takes its request's, which its
   * kind's bind step finds (handlers.c). */
  if (!(desc->attrs & JM_A(comm))) return NULL;
  int rc = jm_mpi.Comm_rank(c->comm, &c->rank);
  if (rc == 0) rc = jm_mpi.Comm_size(c->comm, &c->size);
  if (rc != 0) return jm_mpi_failure(c, "MPI_Comm_rank", NULL, 0, rc);
  return check_rows(c);
}
