/* The deadlock watchdog (JAXMPI_TIMEOUT=seconds). While it is on, every
 * blocking MPI call of the core is made as its nonblocking variant and
 * polled with MPI_Test against a deadline; past it the call gives up with
 * JM_ERR_TIMEOUT, which the FFI layer turns into an error saying what the
 * rank waited for. Off (timeout 0) it costs one atomic load per call. */
#ifndef JAXMPI_WATCHDOG_H
#define JAXMPI_WATCHDOG_H

#include "mpi_api.h"

/* Returned instead of an MPI error code when the deadline passed (MPI error
 * codes are never negative). */
#define JM_ERR_TIMEOUT (-7001)
/* Returned when the core could not allocate what an MPI call needs. */
#define JM_ERR_NOMEM (-7002)
/* A count beyond what this MPI can take (no MPI-4 large-count call). */
#define JM_ERR_COUNT (-7003)

/* Seconds; 0 or less turns the watchdog off. */
void jm_watchdog_set(double seconds);
double jm_watchdog_timeout(void);
int jm_watchdog_on(void);

/* Complete a request: MPI_Wait when the watchdog is off, else MPI_Test until
 * the deadline. A receive request that times out is cancelled (so MPI never
 * writes into the buffer later); other requests are left pending. `status`
 * may be NULL. Returns 0, an MPI error code, or JM_ERR_TIMEOUT. */
int jm_wait(jm_Request *request, jm_Status *status, int cancellable);

/* MPI_Waitall likewise: on a timeout the first `ncancellable` requests
 * (receives) are cancelled and completed, the others left pending; on an
 * MPI error, jm_settle (below) leaves none active. */
int jm_waitall(int n, jm_Request *requests, jm_Status *statuses,
               int ncancellable);

/* Cancel and complete the receives among `requests` that have not
 * completed (each given a moment to complete its cancellation). */
void jm_cancel_receives(int n, jm_Request *requests);

/* After MPI_Waitall or MPI_Testall failed (MPI_ERR_IN_STATUS): complete or
 * release every request still active. MPI may return at the first failure
 * with the others pending (MPI_ERR_PENDING; Open MPI 5 does), and an active
 * receive writes into its buffer whenever its message comes, long after XLA
 * freed or reused it (seen as heap corruption under Open MPI: a neighbour's
 * message landing in a freed result after a truncation error). Each request
 * is given time to complete as MPI_Waitall would have let it (the messages
 * are consumed: the communicator stays clean), the watchdog's timeout or
 * else 10 s in all; past it the receives among the first `nrecv` are
 * cancelled and the sends released to complete on their own. */
void jm_settle(int n, jm_Request *requests, int nrecv);

/* Whether a status of a failed MPI_Waitall or MPI_Testall names a failure:
 * neither MPI_SUCCESS nor MPI_ERR_PENDING (a request not yet complete). */
static inline int jm_status_failed(const jm_Status *st) {
  return st->MPI_ERROR != 0 && st->MPI_ERROR != jm_const.err_pending;
}

#endif
