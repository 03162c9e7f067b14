/* The reading side's lower floor (ring_read.c): text in a growing buffer,
 * a file read whole, ring files loaded and checked against this build's
 * format, the rings of a directory (waiting for late ones), JSON strings.
 * record_read.c (the verdict, the rings as JSON, the watchdog's and MPI
 * errors' side) and trace_read.c (a trace as Chrome trace events) stand on
 * it. The files' formats are record.h's. */
#ifndef JAXMPI_RING_READ_H
#define JAXMPI_RING_READ_H

#include <stddef.h>
#include <stdint.h>

#include "record.h"

/* ---- text ---------------------------------------------------------------- */

/* A growing buffer (p NULL until the first write; free(p) at the end). */
typedef struct jm_text {
  char *p;
  size_t n, cap;
} jm_text;

/* printf into t (what does not fit grows it; out of memory drops it). */
void jm_tprintf(jm_text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* All of p to fd (EINTR retried; an error drops the rest). */
void jm_write_all(int fd, const char *p, size_t n);
/* The whole file into a malloc'd buffer (its length in len), or NULL. */
char *jm_read_file(const char *path, size_t *len);
/* s as a JSON string (quoted, escaped) into t. */
void jm_json_str(jm_text *t, const char *s);
/* A call's state (JM_REC_*) in words. */
const char *jm_state_name(int s);

/* ---- rings --------------------------------------------------------------- */

/* One rank's ring file, loaded: its header, entries, communicators (each
 * one's world ranks in members) and sites. */
typedef struct jm_ring {
  int present;
  jm_ring_header h;
  jm_ring_entry *e;
  int ne;
  jm_ring_comm *comms;
  int32_t **members;
  int nc;
  jm_ring_site *sites;
  int ns;
} jm_ring;

/* The rings of one job, indexed by world rank (present: read). */
typedef struct jm_rings {
  int size; /* ranks in COMM_WORLD (0: no ring read) */
  int count;
  jm_ring *r;
} jm_rings;

/* 0, or -1 when the file is not a ring of this build's format. */
int jm_ring_load(const char *path, jm_ring *r);
void jm_ring_free(jm_ring *r);
/* Every rank-<r>.ring of dir; with `fresh_after` (CLOCK_REALTIME ns, 0:
 * any), only rings written since; the job is the newest ring's. */
void jm_rings_read(const char *dir, int64_t fresh_after, jm_rings *rs);
/* jm_rings_read, waiting up to `grace` seconds for every rank's ring (the
 * job's size, or size_hint before any ring came). */
void jm_rings_wait(const char *dir, int64_t fresh_after, double grace,
                   int size_hint, jm_rings *rs);
void jm_rings_free(jm_rings *rs);

#endif
