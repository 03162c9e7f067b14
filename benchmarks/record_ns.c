/* The flight recorder's own time per call: jm_record_begin and
 * jm_record_end (csrc/record.c, with -O2 as the core is built) in a tight
 * loop, with what handlers.c's dispatch passes for a 4-byte allreduce (a
 * communicator seen before, the cycle counter where the kernel trusts it),
 * against the same loop with the recorder off (one load a call), and
 * tracing (each call with one MPI call inside, its trace file written to
 * /tmp). MPI is a
 * stand-in: begin calls none for a communicator it knows. The minimum over
 * many short runs: another job's time slices only lengthen a run.
 *
 *   gcc -std=c11 -O2 -I csrc -I $(python -c "import jax.ffi; print(jax.ffi.include_dir())") \
 *       -DJAXMPI_ABI_MPICH=1 benchmarks/record_ns.c csrc/record.c -lpthread -o record_ns
 *   ./record_ns [runs] [calls per run]
 *
 * (benchmarks/record_instructions.py builds and runs it.) */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "record.h"

jm_mpi_api jm_mpi;
jm_mpi_consts jm_const;

static int s_size(jm_Comm c, int *n) { (void)c; *n = 2; return 0; }
static int s_rank(jm_Comm c, int *r) { (void)c; *r = 0; return 0; }
static int s_group(jm_Comm c, jm_Group *g) { (void)c; *g = 1; return 0; }
static int s_translate(jm_Group a, int n, const int *in, jm_Group b, int *out) {
  (void)a, (void)b;
  for (int i = 0; i < n; i++) out[i] = in[i];
  return 0;
}
static int s_free(jm_Group *g) { *g = 0; return 0; }
static int keys;
static void *attr;
static int s_keyval(jm_Comm_copy_attr_function *c,
                    jm_Comm_delete_attr_function *d, int *k, void *e) {
  (void)c, (void)d, (void)e;
  *k = ++keys;
  return 0;
}
static int s_set(jm_Comm c, int k, void *v) { (void)c, (void)k; attr = v; return 0; }
static int s_get(jm_Comm c, int k, void *v, int *flag) {
  (void)c, (void)k;
  *(void **)v = attr;
  *flag = attr != NULL;
  return 0;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ns per call of n begin/end pairs (with one MPI call inside each for the
 * trace, as jm_log hands it over). */
static double run(int n, int inner) {
  jm_record_call w;
  memset(&w, 0, sizeof w);
  w.op = "allreduce";
  w.dtype = "float32";
  w.flags = JM_REC_COLLECTIVE;
  w.comm = 0x44000000;
  w.has_comm = 1;
  w.position = -1;
  w.peer = w.peer2 = JM_REC_NONE;
  w.tag = -1;
  w.bytes = 4;
  w.site = 12345;
  const double t0 = now();
  for (int i = 0; i < n; i++) {
    jm_record_ref ref = jm_record_begin(&w);
    __asm__ __volatile__("" ::: "memory"); /* the op body would be here */
    if (inner)
      jm_record_inner(ref.number, -1, "MPI_Allreduce", -1, 1,
                      jm_record_seconds() * 0.0 + 1e-7);
    jm_record_end(ref, JM_REC_DONE);
  }
  return (now() - t0) / n * 1e9;
}

int main(int argc, char **argv) {
  const int runs = argc > 1 ? atoi(argv[1]) : 200;
  const int calls = argc > 2 ? atoi(argv[2]) : 100000;
  jm_mpi.Comm_size = s_size;
  jm_mpi.Comm_rank = s_rank;
  jm_mpi.Comm_group = s_group;
  jm_mpi.Group_translate_ranks = s_translate;
  jm_mpi.Group_free = s_free;
  jm_mpi.Comm_create_keyval = s_keyval;
  jm_mpi.Comm_set_attr = s_set;
  jm_mpi.Comm_get_attr = s_get;
  char err[256];
  if (jaxmpi_record_configure(256, 0, 0x44000000, 0, 2, "", "bench", 2.0, 0,
                              err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  char path[] = "/tmp/jaxmpi-record-ns-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0 || jaxmpi_trace_open(path, 0, 0, 0, err, sizeof err)) {
    fprintf(stderr, "trace: %s\n", err);
    return 1;
  }
  /* Off, the ring, the trace (and its MPI call), in turn. */
  double best[3] = {1e30, 1e30, 1e30};
  for (int r = 0; r < runs; r++) {
    const int mode = r % 3;
    jaxmpi_trace_set(mode == 2);
    jaxmpi_record_set(mode != 0);
    const double t = run(calls, mode == 2);
    if (t < best[mode]) best[mode] = t;
  }
  jaxmpi_trace_close(err, sizeof err);
  unlink(path);
  close(fd);
  printf("the fastest of %d runs of %d calls each, ns a call: off %.1f, "
         "recording %.1f (+%.1f), tracing %.1f (+%.1f over recording, its "
         "file written)\n",
         runs / 3, calls, best[0], best[1], best[1] - best[0], best[2],
         best[2] - best[1]);
  return 0;
}
