/* The flight recorder's reading side (record_read.c): the rings of a
 * directory read back and turned into a verdict in plain words (who is
 * stuck where), the rings as JSON, a trace file as Chrome trace events;
 * and what the watchdog and the MPI error path do with the recorder. Above
 * record.c. The files' formats are record.h's. */
#ifndef JAXMPI_RECORD_READ_H
#define JAXMPI_RECORD_READ_H

#include <stddef.h>
#include <stdint.h>

#include "record.h"

/* A call the watchdog gave up on (ref; fn: the MPI call it waited in):
 * ends it as timed out, writes this process's ring, asks the job's other
 * processes on this host for theirs, waits up to the grace period for
 * every rank's ring, and writes into out the verdict the rings allow, or
 * this rank's own view when no other rank's ring came. Returns 1 for a
 * verdict over several rings, 0 otherwise ("" in out when the recorder is
 * off). */
int jm_record_timeout(jm_record_ref ref, const char *fn, char *out,
                      size_t len);

/* A call that failed in MPI (fn, MPI's message): ends it as failed and
 * writes this process's ring. */
void jm_record_failure(jm_record_ref ref, const char *fn, const char *mpimsg);

/* ---- ctypes entry points (python -m jaxmpi.record / jaxmpi.trace; no MPI
 * is used: they only read files) ---------------------------------------- */

/* The verdict over the rings in dir, written to file descriptor fd, after
 * waiting up to `grace` seconds for every rank's ring; detail: also each
 * rank's last `detail` calls (-1: all). Returns the number of rings read,
 * or -1 (none: the reason is written to fd). */
__attribute__((visibility("default"))) int jaxmpi_record_report(
    const char *dir, double grace, int detail, int fd);
/* The rings in dir as one JSON object, to fd. Returns the rings read. */
__attribute__((visibility("default"))) int jaxmpi_record_json(const char *dir,
                                                              int fd);
/* One rank's trace file (bin) as a Chrome trace (JSON object format) in
 * json. Returns the events written, or -1 with a message in err. */
__attribute__((visibility("default"))) int64_t jaxmpi_trace_convert(
    const char *bin, const char *json, char *err, size_t errlen);

#endif
