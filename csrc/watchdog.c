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

/* Give a request `seconds` to complete (a cancelled receive completes
 * locally, in a moment). 1 when it completed (or failed: MPI is done with
 * it), 0 when it is still active. */
static int complete_within(jm_Request *request, double seconds) {
  double until = jm_mpi.Wtime() + seconds;
  for (int64_t polls = 0;; polls++) {
    int done = 0;
    jm_Status st;
    if (jm_mpi.Test(request, &done, &st) || done) return 1;
    if (jm_mpi.Wtime() >= until) return 0;
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
  if (cancellable && jm_mpi.Cancel(request) == 0) (void)complete_within(request, 1.0);
  return JM_ERR_TIMEOUT;
}

int jm_waitall(int n, jm_Request *requests, jm_Status *statuses,
               int ncancellable) {
  double limit = jm_watchdog_timeout();
  if (limit <= 0) {
    int rc = jm_mpi.Waitall(n, requests, statuses);
    if (rc) jm_settle(n, requests, ncancellable);
    return rc;
  }
  double deadline = jm_mpi.Wtime() + limit;
  for (int64_t polls = 0;; polls++) {
    int done = 0;
    int rc = jm_mpi.Testall(n, requests, &done, statuses);
    if (rc) {
      jm_settle(n, requests, ncancellable);
      return rc;
    }
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
    if (jm_mpi.Cancel(&requests[i]) == 0) (void)complete_within(&requests[i], 1.0);
  }
}

/* How long jm_settle lets the requests of a failed call complete on their
 * own, as MPI_Waitall would have (the peers' matching calls are usually
 * under way): the watchdog's timeout, else 10 s. */
static double settle_seconds(void) {
  double limit = jm_watchdog_timeout();
  return limit > 0 ? limit : 10.0;
}

void jm_settle(int n, jm_Request *requests, int nrecv) {
  if (nrecv > n) nrecv = n;
  const double until = jm_mpi.Wtime() + settle_seconds();
  for (int i = 0; i < n; i++) {
    double left = until - jm_mpi.Wtime();
    if (complete_within(&requests[i], left > 0 ? left : 0)) continue;
    if (i < nrecv)
      jm_cancel_receives(1, &requests[i]);
    else
      jm_mpi.Request_free(&requests[i]);
  }
}
