/* The flight recorder's writing side: see record.h. Its clock, call sites
 * and communicators are record_base.c's; the reading side is ring_read.c
 * (rings loaded), record_read.c (the verdict, JSON) and trace_read.c (the
 * Chrome trace). */
#define _GNU_SOURCE
#include "record.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "record_base.h"

/* ---- configuration ---------------------------------------------------------
 * Written once by jaxmpi_record_configure before any call is recorded. */
static struct {
  int configured;
  uint64_t world;   /* COMM_WORLD's handle */
  int rank, size;   /* in COMM_WORLD */
  int pid;
  double grace;     /* seconds a reader waits for late rings */
  char dir[1024];   /* "" when rings are not written */
  char host[64];
  char ring_path[1100];
  int64_t start_real_ns;
} cfg;

static _Atomic int recording; /* begin records (the ring or the trace on) */
static _Atomic int tracing;
static int capacity; /* power of two; 0 when the ring is off */
static uint64_t mask;

const char *jm_record_dir(void) { return cfg.dir; }
int jm_record_world_rank(void) { return cfg.rank; }
int jm_record_world_size(void) { return cfg.size; }
double jm_record_grace(void) { return cfg.grace; }
int jm_record_on(void) {
  return atomic_load_explicit(&recording, memory_order_relaxed);
}

/* ---- the ring --------------------------------------------------------------
 * An entry's status word holds its number and state: number << 3 | state
 * (state 0 while begin writes it). A reader copies an entry between two
 * reads of the word and keeps the copy when the number did not change and
 * the state is set; end's compare-and-swap ends only the call it names. */
typedef struct jm_entry {
  _Atomic uint64_t status;
  uint64_t t0;
  _Atomic uint64_t t1;
  const jm_rcomm *comm; /* call.comm's: its key, size, rank, members */
  jm_record_call call;  /* as begun; call.seq: its number on comm */
} jm_entry;

static jm_entry *ring;
static _Atomic uint64_t head; /* the last number given */

static void trace_call(const jm_entry *e, uint64_t number, uint64_t t1,
                       int state);

jm_record_ref jm_record_begin(const jm_record_call *w) {
  jm_record_ref ref = {0, 0};
  if (!atomic_load_explicit(&recording, memory_order_relaxed)) return ref;
  const uint64_t t0 = jm_ticks();
  const jm_rcomm *rc = NULL;
  int64_t seq = w->seq;
  if (w->has_comm) {
    jm_rcomm *c = jm_rcomm_of(w->comm, w->position);
    rc = c;
    if (c && !seq) {
      /* One thread per communicator makes its collectives (MPI's rule);
       * a load and a store, not an atomic add. */
      _Atomic int64_t *n =
          (w->flags & JM_REC_COLLECTIVE) ? &c->collectives : &c->p2p;
      seq = atomic_load_explicit(n, memory_order_relaxed) + 1;
      atomic_store_explicit(n, seq, memory_order_relaxed);
    }
  }
  const uint64_t number =
      atomic_fetch_add_explicit(&head, 1, memory_order_relaxed) + 1;
  jm_entry *e = &ring[number & mask];
  atomic_store_explicit(&e->status, number << 3, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  e->t0 = t0;
  e->comm = rc;
  e->call = *w;
  e->call.seq = seq;
  atomic_store_explicit(&e->status, number << 3 | JM_REC_WAITING,
                        memory_order_release);
  ref.number = (int64_t)number;
  ref.seq = seq;
  return ref;
}

void jm_record_end(jm_record_ref ref, int state) {
  if (!ref.number) return;
  const uint64_t number = (uint64_t)ref.number;
  jm_entry *e = &ring[number & mask];
  const uint64_t t1 = jm_ticks();
  /* t1 first: a reader that sees the end sees its time (a call's t1 is
   * read only once it ended). */
  atomic_store_explicit(&e->t1, t1, memory_order_relaxed);
  uint64_t want = number << 3 | JM_REC_WAITING;
  if (!atomic_compare_exchange_strong_explicit(
          &e->status, &want, number << 3 | (uint64_t)state,
          memory_order_acq_rel, memory_order_relaxed))
    return;
  if (atomic_load_explicit(&tracing, memory_order_relaxed))
    trace_call(e, number, t1, state);
}

/* ---- writing files (async-signal-safe) -------------------------------------
 * A buffered writer over write(2): no stdio, no malloc, no locks, so that a
 * dump can run in a signal handler. Small: a fatal signal's handler runs on
 * the alternate stack Python's faulthandler sets up (16 KiB; a dump with an
 * 8 KiB buffer there overflowed it, seen under pytest with AddressSanitizer),
 * so the whole dump keeps under about 5 KiB of stack. */
typedef struct jm_out {
  int fd, failed;
  size_t n;
  char buf[2048];
} jm_out;

static void out_flush(jm_out *o) {
  size_t done = 0;
  while (done < o->n && !o->failed) {
    ssize_t w = write(o->fd, o->buf + done, o->n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) o->failed = 1;
    else done += (size_t)w;
  }
  o->n = 0;
}

static void out_put(jm_out *o, const void *p, size_t len) {
  const char *s = p;
  while (len) {
    if (o->n == sizeof o->buf) out_flush(o);
    size_t k = sizeof o->buf - o->n;
    if (k > len) k = len;
    memcpy(o->buf + o->n, s, k);
    o->n += k;
    s += k;
    len -= k;
  }
}

/* Bounded copies and number formatting without stdio. */
static void copy_name(char *dst, size_t len, const char *src) {
  size_t i = 0;
  if (src)
    for (; i + 1 < len && src[i]; i++) dst[i] = src[i];
  for (; i < len; i++) dst[i] = '\0';
}

static size_t put_str(char *dst, size_t len, size_t at, const char *s) {
  while (at + 1 < len && *s) dst[at++] = *s++;
  if (at < len) dst[at] = '\0';
  return at;
}

static size_t put_int(char *dst, size_t len, size_t at, int64_t v) {
  char tmp[24];
  int n = 0;
  uint64_t u = v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0 && at + 1 < len) dst[at++] = '-';
  while (n && at + 1 < len) dst[at++] = tmp[--n];
  if (at < len) dst[at] = '\0';
  return at;
}

/* ---- dumps ---------------------------------------------------------------- */

/* Copy entry `i` of the ring if it holds a recorded call (0 otherwise). */
static int snapshot(size_t i, jm_entry *copy, uint64_t *status) {
  const jm_entry *e = &ring[i];
  for (int attempt = 0; attempt < 4; attempt++) {
    uint64_t s1 = atomic_load_explicit(&e->status, memory_order_acquire);
    if (!(s1 & 7)) return 0; /* never written, or being written */
    copy->t0 = e->t0;
    copy->t1 = atomic_load_explicit(&e->t1, memory_order_relaxed);
    copy->comm = e->comm;
    copy->call = e->call;
    atomic_thread_fence(memory_order_acquire);
    uint64_t s2 = atomic_load_explicit(&e->status, memory_order_relaxed);
    if (s1 >> 3 == s2 >> 3 && (s2 & 7)) {
      *status = s2;
      if ((s2 & 7) != JM_REC_WAITING && (s1 & 7) == JM_REC_WAITING)
        copy->t1 = atomic_load_explicit(&e->t1, memory_order_relaxed);
      return 1;
    }
  }
  return 0;
}

/* mkdir -p, without malloc or stdio. */
static void make_dirs(const char *dir) {
  char p[sizeof cfg.dir];
  size_t n = 0;
  for (; dir[n] && n + 1 < sizeof p; n++) {
    p[n] = dir[n];
    if (dir[n] == '/' && n > 0) {
      p[n] = '\0';
      (void)mkdir(p, 0777);
      p[n] = '/';
    }
  }
  p[n] = '\0';
  (void)mkdir(p, 0777);
}

/* The dump into dir (this rank's file there: `path`), with the signal that
 * caused it (0: none). */
static int dump_ring_to(const char *dir, const char *path, int reason,
                        int64_t cause, const char *why, int sig) {
  if (!cfg.configured || !dir[0] || !capacity) {
    errno = ENOENT;
    return -1;
  }
  const int saved = errno;
  char tmp[sizeof cfg.dir + 64];
  size_t at = put_str(tmp, sizeof tmp, 0, dir);
  at = put_str(tmp, sizeof tmp, at, "/.rank-");
  at = put_int(tmp, sizeof tmp, at, cfg.rank);
  at = put_str(tmp, sizeof tmp, at, ".");
  at = put_int(tmp, sizeof tmp, at, (int64_t)getpid());
  at = put_str(tmp, sizeof tmp, at, sig ? ".s" : ".n");
  at = put_int(tmp, sizeof tmp, at, (int64_t)(jm_mono_ns() & 0xffffff));
  (void)at;
  make_dirs(dir);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  jm_out o;
  o.fd = fd;
  o.failed = 0;
  o.n = 0;

  const jm_clock_map m = jm_clock_map_now();
  jm_ring_header h;
  memset(&h, 0, sizeof h);
  h.head = jm_file_head_make(JM_RING_MAGIC, JM_RING_VERSION, sizeof h,
                             sizeof(jm_ring_entry), cfg.rank, cfg.size, cfg.pid);
  h.reason = reason;
  h.signal = sig;
  h.capacity = capacity;
  h.calls = (int64_t)atomic_load(&head);
  h.cause = cause;
  h.dump_ns = jm_mono_ns();
  h.dump_real_ns = jm_real_ns();
  h.start_real_ns = cfg.start_real_ns;
  copy_name(h.host, sizeof h.host, cfg.host);
  copy_name(h.why, sizeof h.why, why);
  /* Entries, oldest first; their sites (at most one per entry) and
   * communicators are written after them. */
  const uint64_t last = (uint64_t)h.calls;
  const uint64_t first = last > (uint64_t)capacity ? last - capacity + 1 : 1;
  int32_t nentries = 0;
  for (uint64_t n = first; n <= last; n++) {
    jm_entry e;
    uint64_t st;
    if (snapshot(n & mask, &e, &st) && st >> 3 == n) nentries++;
  }
  const int ncomms = atomic_load(&jm_nrcomms);
  h.nentries = nentries;
  h.ncomms = ncomms;
  /* Sites: counted as written below (distinct ids among the entries). */
  int64_t site_ids[128];
  int nsites = 0;
  for (uint64_t n = first; n <= last && nsites < 128; n++) {
    jm_entry e;
    uint64_t st;
    if (!snapshot(n & mask, &e, &st) || st >> 3 != n || !e.call.site) continue;
    int seen = 0;
    for (int k = 0; k < nsites && !seen; k++) seen = site_ids[k] == e.call.site;
    if (!seen && jm_site_find(e.call.site)) site_ids[nsites++] = e.call.site;
  }
  h.nsites = nsites;
  out_put(&o, &h, sizeof h);
  int32_t written = 0;
  for (uint64_t n = first; n <= last && written < nentries; n++) {
    jm_entry e;
    uint64_t st;
    if (!snapshot(n & mask, &e, &st) || st >> 3 != n) continue;
    jm_ring_entry d;
    memset(&d, 0, sizeof d);
    d.number = (int64_t)n;
    d.seq = e.call.seq;
    d.site = e.call.site;
    d.bytes = e.call.bytes;
    d.link = e.call.link;
    d.begin_ns = jm_to_ns(&m, e.t0);
    d.state = (int32_t)(st & 7);
    d.end_ns = d.state == JM_REC_WAITING || !e.t1 ? 0 : jm_to_ns(&m, e.t1);
    d.comm = e.comm ? e.comm->key : 0;
    d.comm_size = e.comm ? e.comm->size : 0;
    d.comm_rank = e.comm ? e.comm->rank : -1;
    d.flags = e.call.flags;
    d.position = e.call.position;
    d.peer = e.call.peer;
    d.peer2 = e.call.peer2;
    d.tag = e.call.tag;
    copy_name(d.op, sizeof d.op, e.call.op);
    copy_name(d.kind, sizeof d.kind, e.call.kind);
    copy_name(d.dtype, sizeof d.dtype, e.call.dtype);
    out_put(&o, &d, sizeof d);
    written++;
  }
  /* Entries that changed between the count and the writing: zeros, which
   * the reader skips (number 0). */
  for (; written < nentries; written++) {
    jm_ring_entry d;
    memset(&d, 0, sizeof d);
    out_put(&o, &d, sizeof d);
  }
  for (int i = 0; i < ncomms; i++) {
    const jm_rcomm *rc = atomic_load(&jm_rcomms[i]);
    jm_ring_comm d;
    memset(&d, 0, sizeof d);
    if (rc) {
      d.key = rc->key;
      d.size = rc->size;
      d.rank = rc->rank;
      d.nmembers = rc->nmembers;
    }
    out_put(&o, &d, sizeof d);
    if (rc && rc->nmembers)
      out_put(&o, rc->members, sizeof(int32_t) * (size_t)rc->nmembers);
  }
  for (int k = 0; k < nsites; k++) {
    jm_ring_site d;
    memset(&d, 0, sizeof d);
    d.id = site_ids[k];
    copy_name(d.text, sizeof d.text, jm_site_find(site_ids[k]));
    out_put(&o, &d, sizeof d);
  }
  out_flush(&o);
  int ok = !o.failed;
  if (close(fd)) ok = 0;
  if (ok && rename(tmp, path)) ok = 0;
  if (!ok) unlink(tmp);
  errno = ok ? saved : errno;
  return ok ? 0 : -1;
}

static int dump_ring(int reason, int64_t cause, const char *why, int sig) {
  return dump_ring_to(cfg.dir, cfg.ring_path, reason, cause, why, sig);
}

int jaxmpi_record_dump_to(const char *dir, const char *why) {
  char path[1200];
  snprintf(path, sizeof path, "%s/rank-%d.ring", dir, cfg.rank);
  return dump_ring_to(dir, path, JM_DUMP_REQUEST, 0, why, 0);
}

int jm_record_dump(int reason, int64_t cause, const char *why) {
  return dump_ring(reason, cause, why, 0);
}

/* ---- asking the other processes -------------------------------------------- */

#define JM_MAX_PEERS 4096
static struct {
  int rank, pid;
  int64_t start;
} peers[JM_MAX_PEERS];
static int npeers;
static _Atomic int64_t last_ask_ns;

/* /proc/PID/stat's 22nd field (start time in clock ticks), -1 if gone. */
static int64_t process_start(int pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  /* Fields after the command (in parentheses, which may hold spaces). */
  char *p = strrchr(buf, ')');
  if (!p) return -1;
  int field = 2;
  for (p++; *p && field < 22; p++)
    if (*p == ' ') field++;
  return field == 22 ? strtoll(p, NULL, 10) : -1;
}

int jaxmpi_record_peers(int n, const int *ranks, const int *pids,
                        const int64_t *starts) {
  npeers = 0;
  for (int i = 0; i < n && npeers < JM_MAX_PEERS; i++) {
    if (pids[i] == cfg.pid) continue;
    peers[npeers].rank = ranks[i];
    peers[npeers].pid = pids[i];
    peers[npeers].start = starts[i];
    npeers++;
  }
  return 0;
}

void jm_record_ask_peers(void) {
  const int64_t now = jm_mono_ns();
  int64_t last = atomic_load(&last_ask_ns);
  if (last && now - last < 1000000000) return;
  if (!atomic_compare_exchange_strong(&last_ask_ns, &last, now)) return;
  for (int i = 0; i < npeers; i++)
    /* Only the process that started with the job: a pid the system reused
     * for another process is left alone. */
    if (process_start(peers[i].pid) == peers[i].start)
      kill(peers[i].pid, SIGUSR1);
}

/* ---- signals ---------------------------------------------------------------- */

static struct sigaction previous[65];
static const int fatal_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

static void trace_flush_signal(void);

static void chain(int sig, siginfo_t *info, void *uctx) {
  const struct sigaction *p = &previous[sig];
  if (p->sa_flags & SA_SIGINFO) {
    if (p->sa_sigaction) p->sa_sigaction(sig, info, uctx);
  } else if (p->sa_handler != SIG_DFL && p->sa_handler != SIG_IGN &&
             p->sa_handler) {
    p->sa_handler(sig);
  }
}

static void on_usr1(int sig, siginfo_t *info, void *uctx) {
  const int saved = errno;
  (void)dump_ring(JM_DUMP_REQUEST, 0, NULL, sig);
  errno = saved;
  chain(sig, info, uctx);
}

static void on_fatal(int sig, siginfo_t *info, void *uctx) {
  (void)dump_ring(JM_DUMP_SIGNAL, 0, NULL, sig);
  trace_flush_signal();
  /* The previous handler (Python's faulthandler, MPI's, or the default)
   * then runs as if we were never there: restored, and the signal raised
   * again (a fault re-executes the instruction on return). */
  sigaction(sig, &previous[sig], NULL);
  if (info->si_code <= 0 || sig == SIGABRT) raise(sig);
  (void)uctx;
}

static void install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  /* SIGUSR1 on the thread's own stack; the fatal ones on the alternate
   * stack where one is set (a stack overflow leaves no other). */
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sa.sa_sigaction = on_usr1;
  sigaction(SIGUSR1, &sa, &previous[SIGUSR1]);
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sa.sa_sigaction = on_fatal;
  for (size_t i = 0; i < sizeof fatal_signals / sizeof *fatal_signals; i++)
    sigaction(fatal_signals[i], &sa, &previous[fatal_signals[i]]);
}

/* ---- configuration ---------------------------------------------------------- */

int jaxmpi_record_configure(int cap, int keep, uint64_t world, int rank,
                            int size, const char *dir, const char *host,
                            double grace, int signals, char *err,
                            size_t errlen) {
  if (cfg.configured) return 0;
  if (cap < 0 || cap > (1 << 24)) {
    snprintf(err, errlen, "JAXMPI_RECORD=%d: a ring of 0 to %d calls", cap,
             1 << 24);
    return -1;
  }
  const char *skew = getenv("JAXMPI_RECORD_CLOCK_SKEW_NS");
  jm_clock_init(skew ? strtoll(skew, NULL, 10) * rank : 0);
  int c = 1;
  while (c < cap) c <<= 1;
  /* The trace needs a call's entry until it ends (an asynchronous wait may
   * end after thousands of other calls): `keep` entries at least, of which
   * dumps write the last `cap`. */
  int size_ring = cap ? c : 64;
  while (size_ring < keep && size_ring < (1 << 24)) size_ring <<= 1;
  ring = aligned_alloc(64, sizeof(jm_entry) * (size_t)size_ring);
  if (!ring) {
    snprintf(err, errlen, "no memory for a ring of %d calls", size_ring);
    return -1;
  }
  memset(ring, 0, sizeof(jm_entry) * (size_t)size_ring);
  mask = (uint64_t)size_ring - 1;
  capacity = cap ? c : 0;
  cfg.world = world;
  cfg.rank = rank;
  cfg.size = size;
  cfg.pid = (int)getpid();
  cfg.grace = grace;
  cfg.start_real_ns = jm_real_ns();
  snprintf(cfg.dir, sizeof cfg.dir, "%s", dir ? dir : "");
  snprintf(cfg.host, sizeof cfg.host, "%s", host ? host : "");
  snprintf(cfg.ring_path, sizeof cfg.ring_path, "%s/rank-%d.ring", cfg.dir,
           rank);
  (void)jm_rcomms_init(world); /* (failing, found the slow way each call) */
  cfg.configured = 1;
  if (capacity && signals) install_signals();
  atomic_store(&recording, capacity > 0);
  return 0;
}

void jaxmpi_record_set(int on) {
  atomic_store(&recording, cfg.configured && on &&
                               (capacity > 0 || atomic_load(&tracing)));
}

int jaxmpi_record_capacity(void) { return capacity; }

int jaxmpi_record_dump_now(int reason, const char *why) {
  return jm_record_dump(reason, 0, why);
}

/* ---- the trace ---------------------------------------------------------------
 * Completed calls, each with the MPI calls made inside it (kept by the
 * thread until the call ends), appended under one lock per call to a
 * buffer written to the trace file when it fills. Names travel as numbers
 * (the op names, dtypes and MPI calls are static strings: a table keyed by
 * their address numbers them, each written once), sites likewise. Callgrind
 * counted about 1000 instructions a call with a lock per event, the names
 * copied into each event and three MPI_Wtime; this is about a third. */
#define JM_TRACE_BUF (1 << 20)
#define JM_TRACE_NAMES 512 /* power of two */
#define JM_PENDING 8
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static int trace_fd = -1;
static char *trace_buf;
static size_t trace_n;
static int trace_failed;
static struct {
  const char *p;
  uint16_t id;
} names[JM_TRACE_NAMES];
static uint16_t nnames;
static int64_t sites_written[JM_MAX_SITES]; /* open addressing on the id */

/* The MPI calls this thread made inside its current call: the first in a
 * few words (it goes into the call's event), the others as events. */
typedef struct jm_inner {
  int64_t parent, t0, t1, count;
  const char *fn;
  int peer, position;
} jm_inner;
static _Thread_local jm_inner first_inner;
static _Thread_local struct {
  int n;
  jm_trace_event ev[JM_PENDING];
} pending;

static void trace_write_locked(void) {
  size_t done = 0;
  while (done < trace_n && !trace_failed) {
    ssize_t w = write(trace_fd, trace_buf + done, trace_n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) trace_failed = 1;
    else done += (size_t)w;
  }
  trace_n = 0;
}

static void trace_put_locked(uint32_t type, const void *p, uint32_t size) {
  if (trace_fd < 0) return;
  if (trace_n + sizeof(jm_trace_record) + size > JM_TRACE_BUF)
    trace_write_locked();
  jm_trace_record r = {type, size};
  memcpy(trace_buf + trace_n, &r, sizeof r);
  memcpy(trace_buf + trace_n + sizeof r, p, size);
  trace_n += sizeof r + size;
}

/* The number of static string s (0 for NULL), defined in the file the
 * first time. */
static uint16_t name_locked(const char *s) {
  if (!s) return 0;
  size_t i = (size_t)(((uintptr_t)s * 0x9e3779b97f4a7c15ull) >> 54) &
             (JM_TRACE_NAMES - 1);
  for (int k = 0; k < JM_TRACE_NAMES; k++, i = (i + 1) & (JM_TRACE_NAMES - 1)) {
    if (names[i].p == s) return names[i].id;
    if (names[i].p) continue;
    if (nnames == JM_TRACE_NAMES - 1) return 0;
    jm_trace_string d;
    memset(&d, 0, sizeof d);
    d.id = ++nnames;
    copy_name(d.text, sizeof d.text, s);
    trace_put_locked(JM_TRACE_STRING, &d, sizeof d);
    names[i].p = s;
    names[i].id = d.id;
    return d.id;
  }
  return 0;
}

static void site_locked(int64_t id) {
  if (!id) return;
  size_t i = (size_t)((uint64_t)id % JM_MAX_SITES);
  for (int k = 0; k < JM_MAX_SITES; k++, i = (i + 1) % JM_MAX_SITES) {
    if (sites_written[i] == id) return;
    if (sites_written[i]) continue;
    const char *t = jm_site_find(id);
    if (!t) return;
    jm_ring_site d;
    memset(&d, 0, sizeof d);
    d.id = id;
    copy_name(d.text, sizeof d.text, t);
    trace_put_locked(JM_TRACE_SITE, &d, sizeof d);
    sites_written[i] = id;
    return;
  }
}

/* Write this thread's pending MPI calls (lock held). */
static void pending_locked(void) {
  if (first_inner.parent) {
    /* One whose call ended elsewhere (or not yet): an event of its own. */
    const jm_inner *in = &first_inner;
    jm_trace_event ev;
    jm_trace_inner_event(&ev, in->parent, name_locked(in->fn), in->t0, in->t1,
                         in->count, in->peer, in->position);
    trace_put_locked(JM_TRACE_EVENT, &ev, sizeof ev);
    first_inner.parent = 0;
  }
  for (int i = 0; i < pending.n; i++) {
    jm_trace_event *ev = &pending.ev[i];
    ev->op = name_locked((const char *)(uintptr_t)ev->link);
    ev->link = 0;
    trace_put_locked(JM_TRACE_EVENT, ev, sizeof *ev);
  }
  pending.n = 0;
}

static void trace_call(const jm_entry *e, uint64_t number, uint64_t t1,
                       int state) {
  jm_trace_event ev;
  ev.number = (int64_t)number;
  ev.parent = 0;
  ev.seq = e->call.seq;
  ev.site = e->call.site;
  ev.bytes = e->call.bytes;
  ev.link = e->call.link;
  ev.t0 = (int64_t)e->t0;
  ev.t1 = (int64_t)t1;
  ev.comm = e->comm ? e->comm->key : 0;
  ev.peer = e->call.peer;
  ev.peer2 = e->call.peer2;
  ev.tag = e->call.tag;
  ev.position = (int16_t)e->call.position;
  ev.state = (uint8_t)state;
  ev.flags = (uint8_t)e->call.flags;
  jm_inner *first = &first_inner; /* one TLS lookup */
  const int mine = first->parent == (int64_t)number;
  ev.inner_t0 = mine ? first->t0 : 0;
  ev.inner_t1 = mine ? first->t1 : 0;
  ev.inner_count = mine ? first->count : 0;
  ev.inner_peer = mine ? first->peer : JM_REC_NONE;
  const char *inner_fn = mine ? first->fn : NULL;
  if (mine) first->parent = 0;
  pthread_mutex_lock(&trace_lock);
  ev.op = name_locked(e->call.op);
  ev.kind = name_locked(e->call.kind);
  ev.dtype = name_locked(e->call.dtype);
  ev.inner_op = name_locked(inner_fn);
  site_locked(ev.site);
  trace_put_locked(JM_TRACE_EVENT, &ev, sizeof ev);
  if (first->parent || pending.n) pending_locked();
  pthread_mutex_unlock(&trace_lock);
}

double jm_record_seconds(void) {
  return jm_clock.use_counter ? (double)jm_ticks() * jm_clock.ref_rate * 1e-9 : (double)jm_mono_ns() * 1e-9;
}

void jm_record_inner(int64_t parent, int position, const char *fn, int peer,
                     int64_t count, double seconds) {
  if (!atomic_load_explicit(&tracing, memory_order_relaxed) || !parent) return;
  const int64_t t1 = (int64_t)jm_ticks();
  /* Back from the end by the call's duration, in ticks. */
  const int64_t t0 =
      t1 - (int64_t)(seconds * 1e9 / (jm_clock.use_counter ? jm_clock.ref_rate : 1.0));
  jm_inner *first = &first_inner; /* one TLS lookup */
  if (!first->parent) {
    *first = (jm_inner){parent, t0, t1, count, fn, peer, position};
    return;
  }
  if (pending.n == JM_PENDING) {
    pthread_mutex_lock(&trace_lock);
    pending_locked();
    pthread_mutex_unlock(&trace_lock);
  }
  jm_trace_event *ev = &pending.ev[pending.n++];
  jm_trace_inner_event(ev, parent, 0, t0, t1, count, peer, position);
  ev->link = (int64_t)(uintptr_t)fn; /* its name, numbered when written */
}

int jaxmpi_trace_open(const char *path, int64_t offset_ns, int64_t origin_ns,
                      int64_t error_ns, char *err, size_t errlen) {
  if (!cfg.configured) {
    snprintf(err, errlen, "the recorder is not configured");
    return -1;
  }
  pthread_mutex_lock(&trace_lock);
  if (trace_fd >= 0) {
    pthread_mutex_unlock(&trace_lock);
    return 0;
  }
  trace_buf = malloc(JM_TRACE_BUF);
  int fd = trace_buf ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)
                     : -1;
  if (fd < 0) {
    snprintf(err, errlen, "cannot write the trace to %s: %s", path,
             trace_buf ? strerror(errno) : "out of memory");
    free(trace_buf);
    trace_buf = NULL;
    pthread_mutex_unlock(&trace_lock);
    return -1;
  }
  trace_fd = fd;
  jm_trace_header h;
  memset(&h, 0, sizeof h);
  h.head = jm_file_head_make(JM_TRACE_MAGIC, JM_TRACE_VERSION, sizeof h,
                             sizeof(jm_trace_event), cfg.rank, cfg.size,
                             cfg.pid);
  h.clock = jm_clock.use_counter;
  h.ref_ticks = jm_clock.ref_ticks;
  h.ref_ns = jm_clock.ref_ns;
  h.offset_ns = offset_ns;
  h.origin_ns = origin_ns;
  h.align_error_ns = error_ns;
  copy_name(h.host, sizeof h.host, cfg.host);
  memcpy(trace_buf, &h, sizeof h);
  trace_n = sizeof h;
  /* A first rate, in case the process ends without closing: the reader
   * takes the last JM_TRACE_END. */
  jm_trace_end e1 = {jm_clock.ref_ticks + (int64_t)(1e9 / jm_clock.ref_rate), jm_clock.ref_ns + 1000000000};
  if (!jm_clock.use_counter) e1.ticks = e1.ns;
  trace_put_locked(JM_TRACE_END, &e1, sizeof e1);
  trace_write_locked();
  pthread_mutex_unlock(&trace_lock);
  atomic_store(&tracing, 1);
  atomic_store(&recording, 1);
  return 0;
}

void jaxmpi_trace_set(int on) {
  pthread_mutex_lock(&trace_lock);
  const int open_ = trace_fd >= 0;
  pthread_mutex_unlock(&trace_lock);
  atomic_store(&tracing, on && open_);
  /* The trace needs calls recorded; without it, recording is the ring's
   * (jaxmpi_record_set). */
  if (on && open_) atomic_store(&recording, 1);
  else if (!capacity) atomic_store(&recording, 0);
}

int jaxmpi_trace_on(void) { return atomic_load(&tracing); }

int jaxmpi_trace_close(char *err, size_t errlen) {
  atomic_store(&tracing, 0);
  pthread_mutex_lock(&trace_lock);
  if (trace_fd < 0) {
    pthread_mutex_unlock(&trace_lock);
    return 0;
  }
  pending_locked();
  jm_trace_end e = {(int64_t)jm_ticks(), jm_mono_ns()};
  trace_put_locked(JM_TRACE_END, &e, sizeof e);
  trace_write_locked();
  int rc = trace_failed ? -1 : 0;
  if (close(trace_fd)) rc = -1;
  if (rc) snprintf(err, errlen, "writing the trace failed: %s", strerror(errno));
  trace_fd = -1;
  free(trace_buf);
  trace_buf = NULL;
  trace_n = 0;
  pthread_mutex_unlock(&trace_lock);
  if (!capacity) atomic_store(&recording, 0);
  return rc;
}

/* In a fatal signal's handler: write what the buffer holds (no lock: the
 * process is ending; a half-written record at the end is dropped by the
 * reader). */
static void trace_flush_signal(void) {
  if (trace_fd < 0 || !trace_buf) return;
  jm_trace_end e = {(int64_t)jm_ticks(), jm_mono_ns()};
  if (trace_n + sizeof(jm_trace_record) + sizeof e <= JM_TRACE_BUF) {
    jm_trace_record r = {JM_TRACE_END, sizeof e};
    memcpy(trace_buf + trace_n, &r, sizeof r);
    memcpy(trace_buf + trace_n + sizeof r, &e, sizeof e);
    trace_n += sizeof r + sizeof e;
  }
  trace_write_locked();
}

/* ---- clock alignment -----------------------------------------------------------
 * Rank 0 exchanges `rounds` ping-pongs with each rank in turn; the rank
 * takes the round with the shortest round trip, and rank 0's time then as
 * the middle of it (NTP's estimate; its error is at most half that round
 * trip). */
int jaxmpi_record_align(uint64_t comm_handle, int rounds, int64_t *offset_ns,
                        int64_t *error_ns, int64_t *origin_ns) {
  const jm_Comm comm = JM_HANDLE(jm_Comm, comm_handle);
  int rank, size, rc;
  if ((rc = jm_mpi.Comm_rank(comm, &rank)) || (rc = jm_mpi.Comm_size(comm, &size)))
    return rc;
  const int tag = 32100;
  *offset_ns = 0;
  *error_ns = 0;
  int64_t origin = jm_mono_ns();
  if (rank == 0) {
    for (int r = 1; r < size; r++)
      for (int k = 0; k < rounds; k++) {
        int64_t t;
        jm_Status st;
        if ((rc = jm_mpi.Recv(&t, 8, jm_const.byte, r, tag, comm, &st))) return rc;
        t = jm_mono_ns();
        if ((rc = jm_mpi.Send(&t, 8, jm_const.byte, r, tag, comm))) return rc;
      }
    origin = jm_mono_ns();
    for (int r = 1; r < size; r++)
      if ((rc = jm_mpi.Send(&origin, 8, jm_const.byte, r, tag, comm))) return rc;
  } else {
    int64_t best = INT64_MAX;
    for (int k = 0; k < rounds; k++) {
      int64_t t0 = jm_mono_ns(), t;
      jm_Status st;
      if ((rc = jm_mpi.Send(&t0, 8, jm_const.byte, 0, tag, comm))) return rc;
      if ((rc = jm_mpi.Recv(&t, 8, jm_const.byte, 0, tag, comm, &st))) return rc;
      const int64_t t1 = jm_mono_ns();
      if (t1 - t0 < best) {
        best = t1 - t0;
        *offset_ns = t - (t0 + (t1 - t0) / 2);
      }
    }
    *error_ns = best / 2;
    jm_Status st;
    if ((rc = jm_mpi.Recv(&origin, 8, jm_const.byte, 0, tag, comm, &st))) return rc;
  }
  *origin_ns = origin;
  return 0;
}
