/* The deadlock watchdog: see watchdog.h. */
#define _POSIX_C_SOURCE 200809L
#include "watchdog.h"

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

/* Microseconds, 0 when off. Written by jaxmpi_set_timeout (Python), read by
 * XLA's threads. */
static _Atomic int64_t timeout_us;

void jm_watchdog_set(double seconds) {
  int64_t us = seconds > 0 ? (int64_t)(seconds * 1e6) : 0;
  if (seconds > 0 && us < 1) us = 1;
  atomic_store(&timeout_us, us);
}

double jm_watchdog_timeout(void) {
  return (double)atomic_load_explicit(&timeout_us, memory_order_relaxed) / 1e6;
}

int jm_watchdog_on(void) {
  return atomic_load_explicit(&timeout_us, memory_order_relaxed) > 0;
}

/* Poll quickly at first (short waits stay fast), then sleep a little between
 * polls so that a rank stuck for seconds does not burn a core. */
static void backoff(int64_t polls) {
  if (polls < 200) return;
  long ns = polls < 2000 ? 20000L : 500000L;
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

/* A cancelled receive completes locally: give it a moment. */
static void jm_wait_cancelled(jm_Request *request) {
  double until = jm_mpi.Wtime() + 1.0;
  for (int64_t polls = 0; jm_mpi.Wtime() < until; polls++) {
    int done = 0;
    jm_Status st;
    if (jm_mpi.Test(request, &done, &st) || done) break;
    backoff(polls);
  }
}

int jm_wait(jm_Request *request, jm_Status *status, int cancellable) {
  jm_Status ignored;
  if (!status) status = &ignored;
  double limit = jm_watchdog_timeout();
  if (limit <= 0) return jm_mpi.Wait(request, status);
  double deadline = jm_mpi.Wtime() + limit;
  for (int64_t polls = 0;; polls++) {
    int done = 0;
    int rc = jm_mpi.Test(request, &done, status);
    if (rc) return rc;
    if (done) return 0;
    if (jm_mpi.Wtime() > deadline) break;
    backoff(polls);
  }
  if (cancellable && jm_mpi.Cancel(request) == 0) jm_wait_cancelled(request);
  return JM_ERR_TIMEOUT;
}

int jm_waitall(int n, jm_Request *requests, jm_Status *statuses,
               int ncancellable) {
  double limit = jm_watchdog_timeout();
  if (limit <= 0) return jm_mpi.Waitall(n, requests, statuses);
  double deadline = jm_mpi.Wtime() + limit;
  for (int64_t polls = 0;; polls++) {
    int done = 0;
    int rc = jm_mpi.Testall(n, requests, &done, statuses);
    if (rc) return rc;
    if (done) return 0;
    if (jm_mpi.Wtime() > deadline) break;
    backoff(polls);
  }
  jm_cancel_receives(ncancellable < n ? ncancellable : n, requests);
  return JM_ERR_TIMEOUT;
}

void jm_cancel_receives(int n, jm_Request *requests) {
  for (int i = 0; i < n; i++) {
    jm_Status st;
    int done = 0;
    /* A completed request is null already; testing it again is harmless. */
    if (jm_mpi.Test(&requests[i], &done, &st) == 0 && done) continue;
    if (jm_mpi.Cancel(&requests[i]) == 0) jm_wait_cancelled(&requests[i]);
  }
}

int jm_probe(int source, int tag, jm_Comm comm, jm_Status *status) {
  double limit = jm_watchdog_timeout();
  if (limit <= 0) return jm_mpi.Probe(source, tag, comm, status);
  double deadline = jm_mpi.Wtime() + limit;
  for (int64_t polls = 0;; polls++) {
    int found = 0;
    int rc = jm_mpi.Iprobe(source, tag, comm, &found, status);
    if (rc) return rc;
    if (found) return 0;
    if (jm_mpi.Wtime() > deadline) return JM_ERR_TIMEOUT;
    backoff(polls);
  }
}
