/* The flight recorder and the timeline (docs/record.md, docs/design.md
 * "Flight recorder"): every MPI-making call of the process, jaxmpi's own
 * (blocking, start, wait, eager) and, through the same two functions, any
 * other layer's (the native collectives of plain JAX), is numbered and
 * timed into a ring of the last N calls (JAXMPI_RECORD=N, default 256, 0:
 * off). On a watchdog timeout, an MPI error, a fatal signal or SIGUSR1 the
 * ring is written to DIR/rank-<r>.ring (JAXMPI_RECORD_DIR); the reader
 * (record_read.c, `python -m jaxmpi.record DIR`) names who is stuck where.
 * With JAXMPI_TRACE=DIR every completed call (and the MPI calls inside it)
 * is also appended to DIR/rank-<r>.trace.bin, turned into Chrome trace
 * events at exit.
 *
 * The API a caller uses (handlers.c and wait.c through record_ops.c,
 * request.c, the native layer):
 *
 *   jm_record_call what = {.op = "allreduce", .comm = comm, ...};
 *   jm_record_ref ref = jm_record_begin(&what);   before the MPI calls
 *   ...                                           the MPI calls
 *   jm_record_end(ref, JM_REC_DONE or JM_REC_FAILED);
 *
 * begin never blocks, never allocates (but once per new communicator),
 * takes no lock: one atomic add for the call's number, the communicator's
 * counter, two reads of the cycle counter. end is one compare-and-swap.
 * Strings passed in (op, kind, dtype) must outlive the process (literals,
 * static tables): the ring keeps the pointers. Everything here is safe to
 * call from any thread; the dump is safe in a signal handler. Below
 * everything but mpi_api.c. */
#ifndef JAXMPI_RECORD_H
#define JAXMPI_RECORD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mpi_api.h"

/* What a call is (flags of jm_record_call). A collective is numbered per
 * communicator (`seq`: the same number on every member for the same call,
 * since MPI matches collectives in order); so are point-to-point calls,
 * among themselves (numbers only this rank's: messages match by peer and
 * tag, not order). */
enum {
  JM_REC_COLLECTIVE = 1u << 0, /* every rank of the communicator takes part */
  JM_REC_P2P = 1u << 1,        /* peer and peer2: source and dest */
  JM_REC_START = 1u << 2,      /* a non-blocking start; its wait is a call too */
  JM_REC_WAIT = 1u << 3,       /* the wait of a start: link, kind, seq are the start's */
  JM_REC_NATIVE = 1u << 4,     /* an MPI call of XLA's collectives: op is the
                                  MPI call, kind the collective */
  JM_REC_EAGER = 1u << 5,      /* made by Python (mpi4py) on the eager path */
};

/* A call's state: in flight, or how it ended. */
enum {
  JM_REC_WAITING = 1,
  JM_REC_DONE = 2,
  JM_REC_FAILED = 3,
  JM_REC_TIMEOUT = 4, /* the watchdog gave up on it */
};

/* Peers (peer, peer2): a rank of the call's communicator, or one of these
 * (none or MPI.PROC_NULL; several: a neighbourhood; MPI.ANY_SOURCE). */
enum { JM_REC_NONE = -1, JM_REC_SEVERAL = -2, JM_REC_ANY = -3 };

/* What a caller says of a call (a struct on its stack; copied). */
typedef struct jm_record_call {
  const char *op;    /* "allreduce", "wait", "MPI_Allreduce": static */
  const char *kind;  /* a wait: its start's op; native: XLA's collective
                        ("all-reduce"); else NULL. static */
  const char *dtype; /* "float32", "MPI_FLOAT", or NULL. static */
  unsigned flags;    /* JM_REC_* above */
  jm_Comm comm;      /* the communicator MPI is called on (a device's
                        duplicate over several devices) */
  int has_comm;      /* 0: no communicator (comm ignored) */
  int position;      /* device position in the mesh, -1: one device */
  int peer;          /* root, source (receives), dest (sends), or JM_REC_* */
  int peer2;         /* a sendrecv's dest, else JM_REC_NONE */
  int tag;           /* -1: none */
  int64_t bytes;     /* of the call's payload */
  int64_t site;      /* the Python line's id (jm_site_register), 0: none */
  int64_t seq;       /* 0: numbered here; else the caller's numbering (a
                        wait passes its start's, the native layer its own) */
  int64_t link;      /* a wait: its start's number; else 0 */
} jm_record_call;

/* A recorded call: its number in this process (from 1; 0 when not
 * recorded: the recorder is off) and its number on its communicator. */
typedef struct jm_record_ref {
  int64_t number;
  int64_t seq;
} jm_record_ref;

jm_record_ref jm_record_begin(const jm_record_call *call);
/* End a call (state: JM_REC_DONE, _FAILED, _TIMEOUT). Once: a second end of
 * the same call, or of a call the ring has overwritten, does nothing. */
void jm_record_end(jm_record_ref ref, int state);

/* Whether calls are recorded (the ring, or the trace, is on): one load. */
int jm_record_on(void);

/* An MPI call made inside call `parent` (the debug log's and the trace's
 * inner spans): `fn` as the debug log names it ("MPI_Sendrecv (exchange in
 * place)"; static), which lasted `seconds` up to now. Kept only while
 * tracing, and written with its call (one lock per call). */
void jm_record_inner(int64_t parent, int position, const char *fn, int peer,
                     int64_t count, double seconds);
/* Seconds on the recorder's clock (for durations: cheaper than
 * MPI_Wtime where the cycle counter is used). */
double jm_record_seconds(void);

/* ---- dumps ---------------------------------------------------------------
 * Why a ring is written (the file's header says it). */
enum {
  JM_DUMP_REQUEST = 1, /* asked for: SIGUSR1, Python, a peer's timeout */
  JM_DUMP_TIMEOUT = 2, /* this rank's watchdog gave up on call `cause` */
  JM_DUMP_ERROR = 3,   /* an MPI error in call `cause` */
  JM_DUMP_SIGNAL = 4,  /* a fatal signal */
};

/* Write this process's ring to DIR/rank-<r>.ring (atomically: a temporary
 * file renamed). `cause`: the call that timed out or failed (0: none);
 * `why`: a line for the header (NULL: none). Safe in a signal handler with
 * why NULL. Returns 0, or -1 (no directory configured, or the file could
 * not be written: errno says why). */
int jm_record_dump(int reason, int64_t cause, const char *why);

/* Ask the other processes of the job on this host to write their rings
 * (SIGUSR1 to each, checked to be the process that started with the job;
 * processes on other hosts are not reached: `mpiexec` forwards SIGUSR1 to
 * all). At most once a second. */
void jm_record_ask_peers(void);

/* The directory of the rings ("" when none), this process's world rank
 * and size, and how long a reader waits for late rings. */
const char *jm_record_dir(void);
int jm_record_world_rank(void);
int jm_record_world_size(void);
double jm_record_grace(void);

/* ---- call sites ----------------------------------------------------------
 * Python source lines of jaxmpi calls, registered at lowering under a
 * 64-bit id (a hash of the text, the same in every process) that reaches
 * the handler as the `site` attribute; looked up only for messages, the
 * debug log, dumps and the trace, so the per-call path does no string work. */
int jm_site_register(int64_t id, const char *text);
/* The text of site `id` into out ("" when unknown); returns out. */
const char *jm_site_text(int64_t id, char *out, size_t len);

/* ---- the files -----------------------------------------------------------
 * Native byte order and layout: read on the machine (architecture) that
 * wrote them. A ring file: the header, `nentries` entries (oldest first),
 * `ncomms` communicators (each a jm_ring_comm and its nmembers int32 world
 * ranks), `nsites` sites. */
#define JM_RING_MAGIC "jaxmpi ring\n\0\0\0\0"
#define JM_RING_VERSION 2
#define JM_NAME_LEN 32

/* What a ring and a trace file begin with: the format (its magic, version
 * and the sizes of its header, of its items, a ring's jm_ring_entry or a
 * trace's jm_trace_event, and of its sites, jm_ring_site in both), then the
 * process that wrote it. A reader takes a file whose format part is the one
 * it would write itself (jm_file_head_is). */
typedef struct jm_file_head {
  char magic[16];
  uint32_t version, header_size, item_size, site_size;
  int32_t rank, size, pid;
} jm_file_head;

typedef struct jm_ring_header {
  jm_file_head head;
  int32_t reason;
  int32_t signal, nentries, ncomms, nsites;
  int32_t capacity, pad_;
  int64_t calls;        /* calls begun since the start */
  int64_t cause;        /* number of the call that timed out or failed */
  int64_t dump_ns;      /* CLOCK_MONOTONIC at the dump */
  int64_t dump_real_ns; /* CLOCK_REALTIME at the dump */
  int64_t start_real_ns;/* CLOCK_REALTIME when the recorder started */
  char host[64];
  char why[512];
} jm_ring_header;

typedef struct jm_ring_entry {
  int64_t number, seq, site, bytes, link;
  int64_t begin_ns, end_ns; /* CLOCK_MONOTONIC; end 0: in flight */
  uint64_t comm;            /* the communicator's key, 0: none */
  int32_t state, flags, position, peer, peer2, tag, comm_size, comm_rank;
  char op[JM_NAME_LEN], kind[JM_NAME_LEN], dtype[16];
} jm_ring_entry;

typedef struct jm_ring_comm {
  uint64_t key;
  int32_t size, rank, nmembers, pad_;
} jm_ring_comm;

typedef struct jm_ring_site {
  int64_t id;
  char text[200];
} jm_ring_site;

/* A trace file (DIR/rank-<r>.trace.bin): a jm_trace_header, then records,
 * each a jm_trace_record and its payload: an event (jm_trace_event), a
 * name (jm_trace_string: events carry names as numbers, each defined once),
 * a site's text (a jm_ring_site), or a reference point of the clock
 * (jm_trace_end). Times are the cycle counter's; the header's reference
 * point, the last jm_trace_end and the offset turn them into aligned
 * nanoseconds. Records may come in any order (a name after its first use:
 * the reader reads the file twice). */
#define JM_TRACE_MAGIC "jaxmpi trace\n\0\0\0"
#define JM_TRACE_VERSION 3

typedef struct jm_trace_header {
  jm_file_head head;
  int32_t clock; /* 0: ticks are ns, 1: a counter */
  int64_t ref_ticks, ref_ns;      /* when tracing started */
  int64_t offset_ns;   /* add to this process's CLOCK_MONOTONIC: rank 0's */
  int64_t origin_ns;   /* rank 0's CLOCK_MONOTONIC when tracing started */
  int64_t align_error_ns; /* half the best round trip of the alignment */
  char host[64];
} jm_trace_header;

enum {
  JM_TRACE_EVENT = 1,
  JM_TRACE_SITE = 2,
  JM_TRACE_END = 3,
  JM_TRACE_STRING = 4
};

typedef struct jm_trace_record {
  uint32_t type, size; /* size: of the payload that follows */
} jm_trace_record;

/* JM_TRACE_END's payload: a reference point (the last one is at close). */
typedef struct jm_trace_end {
  int64_t ticks, ns;
} jm_trace_end;

/* JM_TRACE_STRING's: name number `id` (from 1). */
typedef struct jm_trace_string {
  uint32_t id;
  char text[60];
} jm_trace_string;

/* A call (number > 0), or an MPI call inside call `parent` (number 0; op
 * is the debug log's name of it, "MPI_Sendrecv (exchange in place)";
 * bytes its count). A call's first MPI call travels inside its event
 * (inner_*: most calls make one), the others as events of their own. */
typedef struct jm_trace_event {
  int64_t number, parent, seq, site, bytes, link;
  int64_t t0, t1; /* ticks */
  uint64_t comm;
  int64_t inner_t0, inner_t1, inner_count;
  int32_t peer, peer2, tag, inner_peer;
  int16_t position;
  uint8_t state, flags;
  uint16_t op, kind, dtype, inner_op; /* names (jm_trace_string), 0: none */
} jm_trace_event;

/* The head this build writes for a file of that magic and version whose
 * header and items have those sizes, written by process `pid`, rank `rank`
 * of `size`. */
static inline jm_file_head jm_file_head_make(const char *magic,
                                             uint32_t version,
                                             uint32_t header_size,
                                             uint32_t item_size, int32_t rank,
                                             int32_t size, int32_t pid) {
  jm_file_head h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, magic, sizeof h.magic);
  h.version = version;
  h.header_size = header_size;
  h.item_size = item_size;
  h.site_size = sizeof(jm_ring_site);
  h.rank = rank;
  h.size = size;
  h.pid = pid;
  return h;
}

/* Whether h's format part is the one this build writes (the process's part
 * is the caller's to check). */
static inline int jm_file_head_is(const jm_file_head *h, const char *magic,
                                  uint32_t version, uint32_t header_size,
                                  uint32_t item_size) {
  const jm_file_head want =
      jm_file_head_make(magic, version, header_size, item_size, 0, 0, 0);
  return memcmp(h, &want, offsetof(jm_file_head, rank)) == 0;
}

/* A call's MPI call as a trace event of its own: call `parent`'s MPI call
 * `op` (a name), from t0 to t1 (ticks), moving `count` elements to or
 * from `peer` (JM_REC_NONE: none); `position`: the device's, -1 none. The
 * writer makes one for each MPI call but a call's first, which travels in
 * the call's event (inner_*); the reader makes the first back from those. */
static inline void jm_trace_inner_event(jm_trace_event *ev, int64_t parent,
                                        uint16_t op, int64_t t0, int64_t t1,
                                        int64_t count, int32_t peer,
                                        int position) {
  memset(ev, 0, sizeof *ev);
  ev->parent = parent;
  ev->op = op;
  ev->t0 = t0;
  ev->t1 = t1;
  ev->bytes = count;
  ev->peer = peer;
  ev->peer2 = JM_REC_NONE;
  ev->tag = -1;
  ev->position = (int16_t)position;
  ev->state = JM_REC_DONE;
}

/* ---- ctypes entry points (src/jaxmpi/_recorder.py) ---------------------- */

/* Once, after MPI is bound: the ring's capacity (0: off; rounded up to a
 * power of two), the entries to keep at least (the trace's calls in flight
 * at once), COMM_WORLD's handle, this process's rank and size in it,
 * the directory of the rings (may be ""), the host's name, the grace
 * period of readers (seconds), and whether to take SIGUSR1 and the fatal
 * signals (their previous handlers run after the dump). Returns 0, or -1
 * with a message in err. */
__attribute__((visibility("default"))) int jaxmpi_record_configure(
    int capacity, int keep, uint64_t world, int rank, int size,
    const char *dir, const char *host, double grace, int signals, char *err,
    size_t errlen);
/* The processes of the job on this host (world ranks, pids and start times
 * in clock ticks since boot, /proc/PID/stat's 22nd field): the ones a
 * timeout asks to dump. */
__attribute__((visibility("default"))) int jaxmpi_record_peers(
    int n, const int *ranks, const int *pids, const int64_t *starts);
/* Recording on/off (the ring stays; benchmarks compare the two). */
__attribute__((visibility("default"))) void jaxmpi_record_set(int on);
__attribute__((visibility("default"))) int jaxmpi_record_capacity(void);
__attribute__((visibility("default"))) int jaxmpi_record_dump_now(
    int reason, const char *why);
/* This process's ring into another directory (tests, tools). */
__attribute__((visibility("default"))) int jaxmpi_record_dump_to(
    const char *dir, const char *why);
/* CLOCK_MONOTONIC in ns (for tests and the alignment). */
__attribute__((visibility("default"))) int64_t jaxmpi_record_now_ns(void);

/* Tracing: open DIR/rank-<r>.trace.bin (after jaxmpi_record_configure),
 * with this process's clock offset to rank 0 and rank 0's origin; enable
 * or pause it; close it (the final reference point, flush). Return 0 or -1
 * with a message in err. */
__attribute__((visibility("default"))) int jaxmpi_trace_open(
    const char *path, int64_t offset_ns, int64_t origin_ns,
    int64_t error_ns, char *err, size_t errlen);
__attribute__((visibility("default"))) void jaxmpi_trace_set(int on);
__attribute__((visibility("default"))) int jaxmpi_trace_on(void);
__attribute__((visibility("default"))) int jaxmpi_trace_close(char *err,
                                                              size_t errlen);
/* Clock alignment with rank 0 over `comm` (collective; rank 0 pings each
 * rank in turn `rounds` times): this process's offset to rank 0's
 * CLOCK_MONOTONIC (0 on rank 0), half the best round trip, and rank 0's
 * clock now (the trace's origin). Returns 0 or an MPI error code. */
__attribute__((visibility("default"))) int jaxmpi_record_align(
    uint64_t comm, int rounds, int64_t *offset_ns, int64_t *error_ns,
    int64_t *origin_ns);

#endif
