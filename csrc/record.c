/* The flight recorder's writing side: see record.h. The reading side (the
 * verdict, the Chrome trace) is record_read.c. */
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

/* ---- the clock -------------------------------------------------------------
 * Calls are timed with the CPU's cycle counter where the kernel itself
 * trusts it (x86's TSC when it is the clock source, aarch64's virtual
 * counter): about a third of clock_gettime's cost, which at two reads per
 * call is most of the recorder's. Counts are turned into CLOCK_MONOTONIC
 * nanoseconds only when written out, from two reference points. */

/* Added to this process's clock: JAXMPI_RECORD_CLOCK_SKEW_NS times its
 * rank, a test's stand-in for hosts whose clocks differ (the trace's
 * alignment must undo it). 0 otherwise. */
static int64_t clock_skew;

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + clock_skew;
}

static int64_t real_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int use_counter; /* written once at configuration */

static inline uint64_t ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
  if (use_counter) return __builtin_ia32_rdtsc();
#elif defined(__aarch64__)
  if (use_counter) {
    uint64_t v;
    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
    return v;
  }
#endif
  return (uint64_t)mono_ns();
}

/* Reference points: (ticks, ns) at configuration, and a rate (ns per tick)
 * measured over a few milliseconds then; a later point (taken when ticks are
 * converted) lengthens the baseline. */
static int64_t ref_ticks, ref_ns;
static double ref_rate = 1.0;

static void calibrate(void) {
  ref_ticks = (int64_t)ticks();
  ref_ns = mono_ns();
  if (!use_counter) return;
  int64_t t1, n1;
  do {
    t1 = (int64_t)ticks();
    n1 = mono_ns();
  } while (n1 - ref_ns < 2000000);
  ref_rate = (double)(n1 - ref_ns) / (double)(t1 - ref_ticks);
}

static int counter_trusted(void) {
#if defined(__x86_64__) || defined(__i386__)
  /* The kernel keeps clocksource "tsc" only where the TSC is invariant and
   * synchronised across cores. */
  int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[16] = {0};
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  return n >= 3 && strncmp(buf, "tsc", 3) == 0;
#elif defined(__aarch64__)
  return 1;
#else
  return 0;
#endif
}

/* Counter value -> CLOCK_MONOTONIC ns, with `now` a fresh (ticks, ns) pair
 * that refines the rate when it lies far enough from the first. Safe in a
 * signal handler. */
typedef struct jm_clock_map {
  int64_t t0, n0;
  double rate;
} jm_clock_map;

static jm_clock_map clock_map_now(void) {
  jm_clock_map m = {ref_ticks, ref_ns, ref_rate};
  if (!use_counter) return m;
  const int64_t t1 = (int64_t)ticks(), n1 = mono_ns();
  if (n1 - ref_ns > 100000000 && t1 > ref_ticks)
    m.rate = (double)(n1 - ref_ns) / (double)(t1 - ref_ticks);
  return m;
}

static int64_t to_ns(const jm_clock_map *m, uint64_t t) {
  return m->n0 + (int64_t)((double)((int64_t)t - m->t0) * m->rate);
}

int64_t jaxmpi_record_now_ns(void) { return mono_ns(); }

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

/* ---- call sites ------------------------------------------------------------
 * Open addressing on the id; full, a site stays unknown (messages then name
 * no line). Written at lowering, read on error, dump and trace paths (a
 * dump in a signal handler reads it without the lock: an entry's text is
 * written before its id). */
#define JM_MAX_SITES 4096
static struct {
  _Atomic int64_t id;
  char text[200];
} sites[JM_MAX_SITES];
static pthread_mutex_t sites_lock = PTHREAD_MUTEX_INITIALIZER;

int jm_site_register(int64_t id, const char *text) {
  if (!id || !text) return -1;
  int rc = -1;
  pthread_mutex_lock(&sites_lock);
  for (size_t k = 0; k < JM_MAX_SITES; k++) {
    size_t i = ((uint64_t)id + k) % JM_MAX_SITES;
    int64_t have = atomic_load_explicit(&sites[i].id, memory_order_relaxed);
    if (have && have != id) continue;
    if (!have) {
      snprintf(sites[i].text, sizeof sites[i].text, "%s", text);
      atomic_store_explicit(&sites[i].id, id, memory_order_release);
    }
    rc = 0;
    break;
  }
  pthread_mutex_unlock(&sites_lock);
  return rc;
}

/* The site's slot, or NULL; no lock (texts never change once published). */
static const char *site_find(int64_t id) {
  if (!id) return NULL;
  for (size_t k = 0; k < JM_MAX_SITES; k++) {
    size_t i = ((uint64_t)id + k) % JM_MAX_SITES;
    int64_t have = atomic_load_explicit(&sites[i].id, memory_order_acquire);
    if (!have) return NULL;
    if (have == id) return sites[i].text;
  }
  return NULL;
}

const char *jm_site_text(int64_t id, char *out, size_t len) {
  if (len) out[0] = '\0';
  const char *t = len ? site_find(id) : NULL;
  if (t) snprintf(out, len, "%s", t);
  return out;
}

/* ---- communicators ---------------------------------------------------------
 * What the recorder knows of a communicator: the COMM_WORLD rank of each
 * member (for the reader: who takes part in a collective, who a peer is),
 * a key the same on every member, and its call counters. Made at its first
 * recorded call (a few local MPI calls), kept in a registry for dumps and
 * found again through a lock-free table of handles; a delete callback
 * (an attribute set on it) takes a freed communicator out of that table,
 * so a handle MPI reuses gets a state of its own. */
typedef struct jm_rcomm {
  uint64_t key;
  uint64_t members_hash;
  int size, rank, position, nmembers;
  int32_t *members;
  _Atomic int64_t collectives, p2p;
} jm_rcomm;

#define JM_MAX_RCOMMS 1024
static jm_rcomm *_Atomic registry[JM_MAX_RCOMMS];
static _Atomic int nregistry;

#define JM_MAP 512 /* power of two */
#define JM_PROBES 4 /* a handle sits within this many slots of its hash */
#define JM_TOMB UINT64_MAX
static struct {
  _Atomic uint64_t handle; /* JM_U64(comm) + 1; 0 empty; JM_TOMB freed */
  jm_rcomm *_Atomic comm;
} map[JM_MAP];
static pthread_mutex_t comms_lock = PTHREAD_MUTEX_INITIALIZER;
static int keyval;
static int keyval_made;

static size_t map_slot(uint64_t h) {
  return (size_t)((h * 0x9e3779b97f4a7c15ull) >> 55) & (JM_MAP - 1);
}

static uint64_t mix(uint64_t h, uint64_t v) {
  h = (h ^ v) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

static int forget_comm(jm_Comm comm, int kv, void *val, void *extra) {
  (void)kv, (void)val, (void)extra;
  const uint64_t h = JM_U64(comm) + 1;
  size_t i = map_slot(h);
  for (int k = 0; k < JM_PROBES; k++, i = (i + 1) & (JM_MAP - 1)) {
    uint64_t x = atomic_load(&map[i].handle);
    if (x == 0) break;
    if (x == h) {
      atomic_store(&map[i].handle, JM_TOMB);
      break;
    }
  }
  return 0;
}

static int keep_no_copy(jm_Comm old, int kv, void *extra, void *in, void *out,
                        int *flag) {
  (void)old, (void)kv, (void)extra, (void)in, (void)out;
  *flag = 0; /* a duplicate is a communicator of its own */
  return 0;
}

/* The members' COMM_WORLD ranks (NULL when MPI cannot say). */
static int32_t *world_ranks(jm_Comm comm, int size) {
  if (!cfg.world || size <= 0) return NULL;
  jm_Group g, wg;
  if (jm_mpi.Comm_group(comm, &g)) return NULL;
  if (jm_mpi.Comm_group(JM_HANDLE(jm_Comm, cfg.world), &wg)) {
    jm_mpi.Group_free(&g);
    return NULL;
  }
  int *in = malloc(sizeof(int) * (size_t)size);
  int32_t *out = malloc(sizeof(int32_t) * (size_t)size);
  int ok = in && out;
  if (ok) {
    for (int i = 0; i < size; i++) in[i] = i;
    ok = jm_mpi.Group_translate_ranks(g, size, in, wg, (int *)out) == 0;
  }
  jm_mpi.Group_free(&g);
  jm_mpi.Group_free(&wg);
  free(in);
  if (!ok) {
    free(out);
    return NULL;
  }
  return out;
}

static jm_rcomm *comm_make(jm_Comm comm, int position) {
  jm_rcomm *rc = calloc(1, sizeof *rc);
  if (!rc) return NULL;
  rc->position = position;
  if (jm_mpi.Comm_size(comm, &rc->size) || jm_mpi.Comm_rank(comm, &rc->rank)) {
    free(rc);
    return NULL;
  }
  rc->members = world_ranks(comm, rc->size);
  rc->nmembers = rc->members ? rc->size : 0;
  uint64_t h = 0x6a09e667f3bcc908ull ^ (uint64_t)rc->size;
  for (int i = 0; i < rc->nmembers; i++) h = mix(h, (uint64_t)rc->members[i]);
  rc->members_hash = h;
  /* Communicators of the same members at the same position are told apart
   * by the order of their first calls, which SPMD programs share. */
  int ordinal = 0;
  const int n = atomic_load(&nregistry);
  for (int i = 0; i < n; i++) {
    const jm_rcomm *o = atomic_load(&registry[i]);
    if (o && o->members_hash == h && o->position == position) ordinal++;
  }
  rc->key = mix(mix(h, (uint64_t)ordinal), (uint64_t)(position + 2)) | 1;
  return rc;
}

static jm_rcomm *comm_slow(jm_Comm comm, int position) {
  jm_rcomm *rc = NULL;
  int flag = 0;
  void *val = NULL;
  pthread_mutex_lock(&comms_lock);
  if (keyval_made && jm_mpi.Comm_get_attr(comm, keyval, &val, &flag) == 0 &&
      flag) {
    rc = val;
  } else {
    rc = comm_make(comm, position);
    if (rc) {
      int n = atomic_load(&nregistry);
      if (n < JM_MAX_RCOMMS) {
        atomic_store(&registry[n], rc);
        atomic_store(&nregistry, n + 1);
      }
      if (keyval_made) jm_mpi.Comm_set_attr(comm, keyval, rc);
    }
  }
  if (rc && keyval_made) {
    /* (Full near its hash: found through its attribute every time.) */
    const uint64_t h = JM_U64(comm) + 1;
    size_t i = map_slot(h);
    for (int k = 0; k < JM_PROBES; k++, i = (i + 1) & (JM_MAP - 1)) {
      uint64_t x = atomic_load(&map[i].handle);
      if (x == h) break;
      if (x == 0 || x == JM_TOMB) {
        atomic_store_explicit(&map[i].comm, rc, memory_order_relaxed);
        atomic_store_explicit(&map[i].handle, h, memory_order_release);
        break;
      }
    }
  }
  pthread_mutex_unlock(&comms_lock);
  return rc;
}

static inline jm_rcomm *comm_of(jm_Comm comm, int position) {
  const uint64_t h = JM_U64(comm) + 1;
  size_t i = map_slot(h);
  for (int k = 0; k < JM_PROBES; k++, i = (i + 1) & (JM_MAP - 1)) {
    uint64_t x = atomic_load_explicit(&map[i].handle, memory_order_acquire);
    if (x == h) return atomic_load_explicit(&map[i].comm, memory_order_relaxed);
    if (x == 0) break;
  }
  return comm_slow(comm, position);
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
  const char *op, *kind, *dtype;
  const jm_rcomm *comm;
  int64_t seq, site, bytes, link;
  int32_t flags, position, peer, peer2, tag, pad_;
} jm_entry;

static jm_entry *ring;
static _Atomic uint64_t head; /* the last number given */

static void trace_call(const jm_entry *e, uint64_t number, uint64_t t1,
                       int state);

jm_record_ref jm_record_begin(const jm_record_call *w) {
  jm_record_ref ref = {0, 0};
  if (!atomic_load_explicit(&recording, memory_order_relaxed)) return ref;
  const uint64_t t0 = ticks();
  const jm_rcomm *rc = NULL;
  int64_t seq = w->seq;
  if (w->has_comm) {
    jm_rcomm *c = comm_of(w->comm, w->position);
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
  e->op = w->op;
  e->kind = w->kind;
  e->dtype = w->dtype;
  e->comm = rc;
  e->seq = seq;
  e->site = w->site;
  e->bytes = w->bytes;
  e->link = w->link;
  e->flags = (int32_t)w->flags;
  e->position = w->position;
  e->peer = w->peer;
  e->peer2 = w->peer2;
  e->tag = w->tag;
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
  const uint64_t t1 = ticks();
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
    copy->op = e->op;
    copy->kind = e->kind;
    copy->dtype = e->dtype;
    copy->comm = e->comm;
    copy->seq = e->seq;
    copy->site = e->site;
    copy->bytes = e->bytes;
    copy->link = e->link;
    copy->flags = e->flags;
    copy->position = e->position;
    copy->peer = e->peer;
    copy->peer2 = e->peer2;
    copy->tag = e->tag;
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
  at = put_int(tmp, sizeof tmp, at, (int64_t)(mono_ns() & 0xffffff));
  (void)at;
  make_dirs(dir);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  jm_out o;
  o.fd = fd;
  o.failed = 0;
  o.n = 0;

  const jm_clock_map m = clock_map_now();
  jm_ring_header h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, JM_RING_MAGIC, sizeof h.magic);
  h.version = JM_RING_VERSION;
  h.header_size = sizeof h;
  h.entry_size = sizeof(jm_ring_entry);
  h.site_size = sizeof(jm_ring_site);
  h.rank = cfg.rank;
  h.size = cfg.size;
  h.pid = cfg.pid;
  h.reason = reason;
  h.signal = sig;
  h.capacity = capacity;
  h.calls = (int64_t)atomic_load(&head);
  h.cause = cause;
  h.dump_ns = mono_ns();
  h.dump_real_ns = real_ns();
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
  const int ncomms = atomic_load(&nregistry);
  h.nentries = nentries;
  h.ncomms = ncomms;
  /* Sites: counted as written below (distinct ids among the entries). */
  int64_t site_ids[128];
  int nsites = 0;
  for (uint64_t n = first; n <= last && nsites < 128; n++) {
    jm_entry e;
    uint64_t st;
    if (!snapshot(n & mask, &e, &st) || st >> 3 != n || !e.site) continue;
    int seen = 0;
    for (int k = 0; k < nsites && !seen; k++) seen = site_ids[k] == e.site;
    if (!seen && site_find(e.site)) site_ids[nsites++] = e.site;
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
    d.seq = e.seq;
    d.site = e.site;
    d.bytes = e.bytes;
    d.link = e.link;
    d.begin_ns = to_ns(&m, e.t0);
    d.state = (int32_t)(st & 7);
    d.end_ns = d.state == JM_REC_WAITING || !e.t1 ? 0 : to_ns(&m, e.t1);
    d.comm = e.comm ? e.comm->key : 0;
    d.comm_size = e.comm ? e.comm->size : 0;
    d.comm_rank = e.comm ? e.comm->rank : -1;
    d.flags = e.flags;
    d.position = e.position;
    d.peer = e.peer;
    d.peer2 = e.peer2;
    d.tag = e.tag;
    copy_name(d.op, sizeof d.op, e.op);
    copy_name(d.kind, sizeof d.kind, e.kind);
    copy_name(d.dtype, sizeof d.dtype, e.dtype);
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
    const jm_rcomm *rc = atomic_load(&registry[i]);
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
    copy_name(d.text, sizeof d.text, site_find(site_ids[k]));
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
  const int64_t now = mono_ns();
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
  clock_skew = skew ? strtoll(skew, NULL, 10) * rank : 0;
  use_counter = counter_trusted();
  calibrate();
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
  cfg.start_real_ns = real_ns();
  snprintf(cfg.dir, sizeof cfg.dir, "%s", dir ? dir : "");
  snprintf(cfg.host, sizeof cfg.host, "%s", host ? host : "");
  snprintf(cfg.ring_path, sizeof cfg.ring_path, "%s/rank-%d.ring", cfg.dir,
           rank);
  if (jm_mpi.Comm_create_keyval(keep_no_copy, forget_comm, &keyval, NULL) == 0)
    keyval_made = 1;
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
    const char *t = site_find(id);
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
    jm_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.parent = first_inner.parent;
    ev.t0 = first_inner.t0;
    ev.t1 = first_inner.t1;
    ev.bytes = first_inner.count;
    ev.peer = first_inner.peer;
    ev.peer2 = JM_REC_NONE;
    ev.tag = -1;
    ev.position = (int16_t)first_inner.position;
    ev.state = JM_REC_DONE;
    ev.op = name_locked(first_inner.fn);
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
  ev.seq = e->seq;
  ev.site = e->site;
  ev.bytes = e->bytes;
  ev.link = e->link;
  ev.t0 = (int64_t)e->t0;
  ev.t1 = (int64_t)t1;
  ev.comm = e->comm ? e->comm->key : 0;
  ev.peer = e->peer;
  ev.peer2 = e->peer2;
  ev.tag = e->tag;
  ev.position = (int16_t)e->position;
  ev.state = (uint8_t)state;
  ev.flags = (uint8_t)e->flags;
  jm_inner *first = &first_inner; /* one TLS lookup */
  const int mine = first->parent == (int64_t)number;
  ev.inner_t0 = mine ? first->t0 : 0;
  ev.inner_t1 = mine ? first->t1 : 0;
  ev.inner_count = mine ? first->count : 0;
  ev.inner_peer = mine ? first->peer : JM_REC_NONE;
  const char *inner_fn = mine ? first->fn : NULL;
  if (mine) first->parent = 0;
  pthread_mutex_lock(&trace_lock);
  ev.op = name_locked(e->op);
  ev.kind = name_locked(e->kind);
  ev.dtype = name_locked(e->dtype);
  ev.inner_op = name_locked(inner_fn);
  site_locked(ev.site);
  trace_put_locked(JM_TRACE_EVENT, &ev, sizeof ev);
  if (first->parent || pending.n) pending_locked();
  pthread_mutex_unlock(&trace_lock);
}

double jm_record_seconds(void) {
  return use_counter ? (double)ticks() * ref_rate * 1e-9 : (double)mono_ns() * 1e-9;
}

void jm_record_inner(int64_t parent, int position, const char *fn, int peer,
                     int64_t count, double seconds) {
  if (!atomic_load_explicit(&tracing, memory_order_relaxed) || !parent) return;
  const int64_t t1 = (int64_t)ticks();
  /* Back from the end by the call's duration, in ticks. */
  const int64_t t0 =
      t1 - (int64_t)(seconds * 1e9 / (use_counter ? ref_rate : 1.0));
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
  memset(ev, 0, sizeof *ev);
  ev->parent = parent;
  ev->t1 = t1;
  ev->t0 = t0;
  ev->bytes = count;
  ev->position = (int16_t)position;
  ev->peer = peer;
  ev->peer2 = JM_REC_NONE;
  ev->tag = -1;
  ev->state = JM_REC_DONE;
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
  memcpy(h.magic, JM_TRACE_MAGIC, sizeof h.magic);
  h.version = JM_TRACE_VERSION;
  h.header_size = sizeof h;
  h.event_size = sizeof(jm_trace_event);
  h.rank = cfg.rank;
  h.size = cfg.size;
  h.pid = cfg.pid;
  h.clock = use_counter;
  h.ref_ticks = ref_ticks;
  h.ref_ns = ref_ns;
  h.offset_ns = offset_ns;
  h.origin_ns = origin_ns;
  h.align_error_ns = error_ns;
  copy_name(h.host, sizeof h.host, cfg.host);
  memcpy(trace_buf, &h, sizeof h);
  trace_n = sizeof h;
  /* A first rate, in case the process ends without closing: the reader
   * takes the last JM_TRACE_END. */
  jm_trace_end e1 = {ref_ticks + (int64_t)(1e9 / ref_rate), ref_ns + 1000000000};
  if (!use_counter) e1.ticks = e1.ns;
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
  jm_trace_end e = {(int64_t)ticks(), mono_ns()};
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
  jm_trace_end e = {(int64_t)ticks(), mono_ns()};
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
  int64_t origin = mono_ns();
  if (rank == 0) {
    for (int r = 1; r < size; r++)
      for (int k = 0; k < rounds; k++) {
        int64_t t;
        jm_Status st;
        if ((rc = jm_mpi.Recv(&t, 8, jm_const.byte, r, tag, comm, &st))) return rc;
        t = mono_ns();
        if ((rc = jm_mpi.Send(&t, 8, jm_const.byte, r, tag, comm))) return rc;
      }
    origin = mono_ns();
    for (int r = 1; r < size; r++)
      if ((rc = jm_mpi.Send(&origin, 8, jm_const.byte, r, tag, comm))) return rc;
  } else {
    int64_t best = INT64_MAX;
    for (int k = 0; k < rounds; k++) {
      int64_t t0 = mono_ns(), t;
      jm_Status st;
      if ((rc = jm_mpi.Send(&t0, 8, jm_const.byte, 0, tag, comm))) return rc;
      if ((rc = jm_mpi.Recv(&t, 8, jm_const.byte, 0, tag, comm, &st))) return rc;
      const int64_t t1 = mono_ns();
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
