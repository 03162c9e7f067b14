/* The flight recorder's floor: see record_base.h. */
#define _GNU_SOURCE
#include "record_base.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int64_t jm_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + clock_skew;
}

int64_t jm_real_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

jm_clock_state jm_clock = {0, 0, 0, 1.0};

static void calibrate(void) {
  jm_clock.ref_ticks = (int64_t)jm_ticks();
  jm_clock.ref_ns = jm_mono_ns();
  if (!jm_clock.use_counter) return;
  int64_t t1, n1;
  do {
    t1 = (int64_t)jm_ticks();
    n1 = jm_mono_ns();
  } while (n1 - jm_clock.ref_ns < 2000000);
  jm_clock.ref_rate = (double)(n1 - jm_clock.ref_ns) / (double)(t1 - jm_clock.ref_ticks);
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

jm_clock_map jm_clock_map_now(void) {
  jm_clock_map m = {jm_clock.ref_ticks, jm_clock.ref_ns, jm_clock.ref_rate};
  if (!jm_clock.use_counter) return m;
  const int64_t t1 = (int64_t)jm_ticks(), n1 = jm_mono_ns();
  if (n1 - jm_clock.ref_ns > 100000000 && t1 > jm_clock.ref_ticks)
    m.rate = (double)(n1 - jm_clock.ref_ns) / (double)(t1 - jm_clock.ref_ticks);
  return m;
}

int64_t jm_to_ns(const jm_clock_map *m, uint64_t t) {
  return m->n0 + (int64_t)((double)((int64_t)t - m->t0) * m->rate);
}

int64_t jaxmpi_record_now_ns(void) { return jm_mono_ns(); }

/* ---- call sites ------------------------------------------------------------
 * Open addressing on the id; full, a site stays unknown (messages then name
 * no line). Written at lowering, read on error, dump and trace paths (a
 * dump in a signal handler reads it without the lock: an entry's text is
 * written before its id). */
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
const char *jm_site_find(int64_t id) {
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
  const char *t = len ? jm_site_find(id) : NULL;
  if (t) snprintf(out, len, "%s", t);
  return out;
}

/* ---- communicators ---------------------------------------------------------
 * What the recorder knows of a communicator: the COMM_WORLD rank of each
 * member (for the reader: who takes part in a collective, who a peer is),
 * a key the same on every member, and its call counters. Made at its first
 * recorded call (a few local MPI calls), kept in a jm_rcomms for dumps and
 * found again through a lock-free table of handles; a delete callback
 * (an attribute set on it) takes a freed communicator out of that table,
 * so a handle MPI reuses gets a state of its own. */
jm_rcomm *_Atomic jm_rcomms[JM_MAX_RCOMMS];
_Atomic int jm_nrcomms;

jm_rcomm_slot jm_rcomm_map[JM_MAP];
static pthread_mutex_t comms_lock = PTHREAD_MUTEX_INITIALIZER;
static int keyval;
static int keyval_made;
static uint64_t world; /* COMM_WORLD's handle (jm_rcomms_init) */

static uint64_t mix(uint64_t h, uint64_t v) {
  h = (h ^ v) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

static int forget_comm(jm_Comm comm, int kv, void *val, void *extra) {
  (void)kv, (void)val, (void)extra;
  const uint64_t h = JM_U64(comm) + 1;
  size_t i = jm_rcomm_slot_of(h);
  for (int k = 0; k < JM_PROBES; k++, i = (i + 1) & (JM_MAP - 1)) {
    uint64_t x = atomic_load(&jm_rcomm_map[i].handle);
    if (x == 0) break;
    if (x == h) {
      atomic_store(&jm_rcomm_map[i].handle, JM_TOMB);
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
  if (!world || size <= 0) return NULL;
  jm_Group g, wg;
  if (jm_mpi.Comm_group(comm, &g)) return NULL;
  if (jm_mpi.Comm_group(JM_HANDLE(jm_Comm, world), &wg)) {
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
  const int n = atomic_load(&jm_nrcomms);
  for (int i = 0; i < n; i++) {
    const jm_rcomm *o = atomic_load(&jm_rcomms[i]);
    if (o && o->members_hash == h && o->position == position) ordinal++;
  }
  rc->key = mix(mix(h, (uint64_t)ordinal), (uint64_t)(position + 2)) | 1;
  return rc;
}

jm_rcomm *jm_rcomm_slow(jm_Comm comm, int position) {
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
      int n = atomic_load(&jm_nrcomms);
      if (n < JM_MAX_RCOMMS) {
        atomic_store(&jm_rcomms[n], rc);
        atomic_store(&jm_nrcomms, n + 1);
      }
      if (keyval_made) jm_mpi.Comm_set_attr(comm, keyval, rc);
    }
  }
  if (rc && keyval_made) {
    /* (Full near its hash: found through its attribute every time.) */
    const uint64_t h = JM_U64(comm) + 1;
    size_t i = jm_rcomm_slot_of(h);
    for (int k = 0; k < JM_PROBES; k++, i = (i + 1) & (JM_MAP - 1)) {
      uint64_t x = atomic_load(&jm_rcomm_map[i].handle);
      if (x == h) break;
      if (x == 0 || x == JM_TOMB) {
        atomic_store_explicit(&jm_rcomm_map[i].comm, rc, memory_order_relaxed);
        atomic_store_explicit(&jm_rcomm_map[i].handle, h, memory_order_release);
        break;
      }
    }
  }
  pthread_mutex_unlock(&comms_lock);
  return rc;
}

int jm_rcomms_init(uint64_t world_handle) {
  world = world_handle;
  if (jm_mpi.Comm_create_keyval(keep_no_copy, forget_comm, &keyval, NULL))
    return -1;
  keyval_made = 1;
  return 0;
}

void jm_clock_init(int64_t skew) {
  clock_skew = skew;
  jm_clock.use_counter = counter_trusted();
  calibrate();
}
