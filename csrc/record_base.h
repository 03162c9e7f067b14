/* The flight recorder's floor (record_base.c), below record.c: its clock
 * (the cycle counter where the kernel trusts it, turned into
 * CLOCK_MONOTONIC nanoseconds when written out), the call sites' texts,
 * and what it knows of each communicator (members' world ranks, a key the
 * same on every member, call counters). Private to the recorder: record.c
 * (the ring, dumps, signals, the trace) stands on it. */
#ifndef JAXMPI_RECORD_BASE_H
#define JAXMPI_RECORD_BASE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "record.h"

/* ---- the clock ----------------------------------------------------------- */

/* Written once by jm_clock_init (at configuration), read after: whether
 * ticks are the cycle counter's, and the reference points, (ticks, ns) at
 * configuration and a rate (ns per tick) measured over a few milliseconds
 * then; a later point (taken when ticks are converted) lengthens the
 * baseline. */
typedef struct jm_clock_state {
  int use_counter;
  int64_t ref_ticks, ref_ns;
  double ref_rate;
} jm_clock_state;
extern jm_clock_state jm_clock;

/* skew: added to this process's clock (JAXMPI_RECORD_CLOCK_SKEW_NS times
 * its rank, a test's stand-in for hosts whose clocks differ). */
void jm_clock_init(int64_t skew);
int64_t jm_mono_ns(void); /* CLOCK_MONOTONIC (+ the skew) */
int64_t jm_real_ns(void); /* CLOCK_REALTIME */

/* Now, in ticks: two per recorded call. */
static inline uint64_t jm_ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
  if (jm_clock.use_counter) return __builtin_ia32_rdtsc();
#elif defined(__aarch64__)
  if (jm_clock.use_counter) {
    uint64_t v;
    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
    return v;
  }
#endif
  return (uint64_t)jm_mono_ns();
}

/* Ticks -> CLOCK_MONOTONIC ns: a map taken now (a fresh (ticks, ns) pair
 * refines the rate when it lies far enough from the first), then applied.
 * Safe in a signal handler. */
typedef struct jm_clock_map {
  int64_t t0, n0;
  double rate;
} jm_clock_map;
jm_clock_map jm_clock_map_now(void);
int64_t jm_to_ns(const jm_clock_map *m, uint64_t t);

/* ---- call sites ---------------------------------------------------------- */

#define JM_MAX_SITES 4096 /* open addressing on the id; full, a site stays
                             unknown (messages then name no line) */
/* Site id's text, or NULL; no lock (texts never change once published). */
const char *jm_site_find(int64_t id);

/* ---- communicators ------------------------------------------------------- */

typedef struct jm_rcomm {
  uint64_t key;
  uint64_t members_hash;
  int size, rank, position, nmembers;
  int32_t *members;
  _Atomic int64_t collectives, p2p;
} jm_rcomm;

/* Every communicator seen, in order of first call (dumps write them). */
#define JM_MAX_RCOMMS 1024
extern jm_rcomm *_Atomic jm_rcomms[JM_MAX_RCOMMS];
extern _Atomic int jm_nrcomms;

/* Once, at configuration: COMM_WORLD's handle (members are named by their
 * rank in it) and the attribute that tells freed communicators apart.
 * Returns 0, or -1 when MPI made no keyval (then each call finds its
 * communicator the slow way). */
int jm_rcomms_init(uint64_t world);
/* The lock-free table of handles that finds a communicator's state on
 * every recorded call (inline: begin's path); jm_rcomm_slow makes or finds
 * it through an attribute when the table misses, and enters it. */
#define JM_MAP 512  /* power of two */
#define JM_PROBES 4 /* a handle sits within this many slots of its hash */
#define JM_TOMB UINT64_MAX
typedef struct jm_rcomm_slot {
  _Atomic uint64_t handle; /* JM_U64(comm) + 1; 0 empty; JM_TOMB freed */
  jm_rcomm *_Atomic comm;
} jm_rcomm_slot;
extern jm_rcomm_slot jm_rcomm_map[JM_MAP];
jm_rcomm *jm_rcomm_slow(jm_Comm comm, int position);

static inline size_t jm_rcomm_slot_of(uint64_t h) {
  return (size_t)((h * 0x9e3779b97f4a7c15ull) >> 55) & (JM_MAP - 1);
}

/* The state of `comm` (made at its first call; NULL when MPI cannot say). */
static inline jm_rcomm *jm_rcomm_of(jm_Comm comm, int position) {
  const uint64_t h = JM_U64(comm) + 1;
  size_t i = jm_rcomm_slot_of(h);
  for (int k = 0; k < JM_PROBES; k++, i = (i + 1) & (JM_MAP - 1)) {
    uint64_t x =
        atomic_load_explicit(&jm_rcomm_map[i].handle, memory_order_acquire);
    if (x == h)
      return atomic_load_explicit(&jm_rcomm_map[i].comm, memory_order_relaxed);
    if (x == 0) break;
  }
  return jm_rcomm_slow(comm, position);
}

#endif
