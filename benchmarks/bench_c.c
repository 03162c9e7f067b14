/* Plain C MPI baseline for benchmarks/run.py.
 *
 * Usage: bench_c OPS SIZES TARGET_S REPEATS WARMUP OUT.jsonl [THREADS [PLACE
 *        [PAGES [LABEL]]]]
 *   OPS      comma-separated: allreduce,sendrecv,bcast,allgather,alltoall,
 *            allgatherv,alltoallv (the v-forms with every count equal, as
 *            benchmarks/worker.py calls them),
 *            reduce_scatter
 *   SIZES    comma-separated message sizes in bytes (multiples of 4)
 *   THREADS  "multiple" (default: MPI_THREAD_MULTIPLE, the level mpi4py
 *            asks for, so that C and the Python-based jobs run the same
 *            MPI configuration) or "single" (plain MPI_Init)
 *   PLACE    "inplace" (default: MPI_IN_PLACE where the op allows it, as
 *            jaxmpi calls allreduce; bcast is in place anyway) or
 *            "outofplace"
 *   PAGES    "default" (default) or "huge": madvise(MADV_HUGEPAGE) on both
 *            buffers, what NumPy does for arrays from 4 MiB (transparent
 *            huge pages: fewer TLB misses and page faults on large
 *            messages; XLA's buffers get no such request)
 *   LABEL    the "impl" field of the JSON lines (default "c")
 *
 * Same protocol as the Python worker (benchmarks/worker.py): per op and
 * size, WARMUP calls, then an iteration count n doubled until a batch of n
 * calls takes TARGET_S (decided from the slowest rank, so every rank makes
 * the same calls), then REPEATS samples of n back-to-back calls between
 * barriers; a sample is the slowest rank's time / n. Rank 0 appends one
 * JSON line per op and size. Buffers are float32, allocated and written
 * once before timing (warm). Message size convention: the per-rank input
 * (allreduce, sendrecv, bcast, allgather), the per-destination block
 * (alltoall) or the per-rank result block (reduce_scatter; out of place,
 * as jaxmpi calls MPI_Reduce_scatter_block). */
#include <mpi.h>
#include <stdio.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                        \
  do {                                                                     \
    int rc_ = (call);                                                      \
    if (rc_ != MPI_SUCCESS) {                                              \
      fprintf(stderr, "bench_c: %s failed with code %d\n", #call, rc_);    \
      MPI_Abort(MPI_COMM_WORLD, 1);                                        \
    }                                                                      \
  } while (0)

static int rank, size, in_place = 1;

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static void run_op(const char *op, float *x, float *y, int count) {
  if (!strcmp(op, "allreduce") && in_place) {
    (void)y;
    CHECK(MPI_Allreduce(MPI_IN_PLACE, x, count, MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD));
  } else if (!strcmp(op, "allreduce")) {
    CHECK(MPI_Allreduce(x, y, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  } else if (!strcmp(op, "sendrecv")) {
    CHECK(MPI_Sendrecv(x, count, MPI_FLOAT, (rank + 1) % size, 0, y, count,
                       MPI_FLOAT, (rank + size - 1) % size, 0, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE));
  } else if (!strcmp(op, "bcast")) {
    CHECK(MPI_Bcast(rank == 0 ? x : y, count, MPI_FLOAT, 0, MPI_COMM_WORLD));
  } else if (!strcmp(op, "allgather")) {
    CHECK(MPI_Allgather(x, count, MPI_FLOAT, y, count, MPI_FLOAT,
                        MPI_COMM_WORLD));
  } else if (!strcmp(op, "alltoall")) {
    CHECK(MPI_Alltoall(x, count, MPI_FLOAT, y, count, MPI_FLOAT,
                       MPI_COMM_WORLD));
  } else if (!strcmp(op, "allgatherv") || !strcmp(op, "alltoallv")) {
    /* Counts and displacements made per call, as a program whose counts
     * change would (jaxmpi makes them per call too). */
    int *cd = malloc(sizeof(int) * 2 * (size_t)size);
    if (!cd) MPI_Abort(MPI_COMM_WORLD, 3);
    for (int i = 0; i < size; i++) {
      cd[i] = count;
      cd[size + i] = i * count;
    }
    if (op[3] == 'g')
      CHECK(MPI_Allgatherv(x, count, MPI_FLOAT, y, cd, cd + size, MPI_FLOAT,
                           MPI_COMM_WORLD));
    else
      CHECK(MPI_Alltoallv(x, cd, cd + size, MPI_FLOAT, y, cd, cd + size,
                          MPI_FLOAT, MPI_COMM_WORLD));
    free(cd);
  } else if (!strcmp(op, "reduce_scatter")) {
    CHECK(MPI_Reduce_scatter_block(x, y, count, MPI_FLOAT, MPI_SUM,
                                   MPI_COMM_WORLD));
  } else {
    if (rank == 0) fprintf(stderr, "bench_c: unknown op %s\n", op);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

/* Seconds for n calls on the slowest rank. */
static double batch(const char *op, float *x, float *y, int count, long n) {
  CHECK(MPI_Barrier(MPI_COMM_WORLD));
  double t0 = MPI_Wtime();
  /* Each call's input is the last one's result, as in the jitted loops of
   * worker.py: the buffers swap roles every call (allgather's result is
   * larger, reduce_scatter's smaller: the same input every call). */
  const int swap = strncmp(op, "allgather", 9) && strcmp(op, "reduce_scatter");
  for (long i = 0; i < n; i++) {
    if (swap && (i & 1))
      run_op(op, y, x, count);
    else
      run_op(op, x, y, count);
  }
  double dt = MPI_Wtime() - t0, worst;
  CHECK(MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  return worst;
}

int main(int argc, char **argv) {
  int single = argc > 7 && !strcmp(argv[7], "single"), provided = 0;
  if (single)
    CHECK(MPI_Init(&argc, &argv));
  else
    CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
  CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  if (argc < 7 || argc > 11) {
    if (rank == 0)
      fprintf(stderr, "usage: bench_c OPS SIZES TARGET_S REPEATS WARMUP "
                      "OUT.jsonl [multiple|single [inplace|outofplace "
                      "[default|huge [LABEL]]]]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  in_place = !(argc > 8 && !strcmp(argv[8], "outofplace"));
  const int huge = argc > 9 && !strcmp(argv[9], "huge");
  const char *label = argc > 10 ? argv[10] : "c";
  double target = atof(argv[3]);
  int repeats = atoi(argv[4]), warmup = atoi(argv[5]);
  FILE *out = NULL;
  if (rank == 0 && !(out = fopen(argv[6], "a"))) {
    fprintf(stderr, "bench_c: cannot open %s\n", argv[6]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  double *samples = malloc(sizeof(double) * (size_t)repeats);
  char *ops = strdup(argv[1]), *save_op = NULL;
  for (char *op = strtok_r(ops, ",", &save_op); op;
       op = strtok_r(NULL, ",", &save_op)) {
    char *sizes = strdup(argv[2]), *save_sz = NULL;
    for (char *s = strtok_r(sizes, ",", &save_sz); s;
         s = strtok_r(NULL, ",", &save_sz)) {
      long bytes = atol(s);
      int count = (int)(bytes / 4);
      /* Output of allgather/alltoall: size blocks; alltoall and
       * reduce_scatter input too. */
      size_t nx = (size_t)count * (strncmp(op, "alltoall", 8) &&
                                   strcmp(op, "reduce_scatter") ? 1 : size);
      size_t ny = (size_t)count * size;
      /* Page-aligned: XLA and NumPy align their buffers (64 bytes at least),
       so alignment is no difference between C and the others. */
      float *x = aligned_alloc(4096, round_up(nx * sizeof(float), 4096)),
            *y = aligned_alloc(4096, round_up(ny * sizeof(float), 4096));
      if (!x || !y) {
        fprintf(stderr, "bench_c: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
#ifdef MADV_HUGEPAGE
      /* Before the first touch, as NumPy does (a request: the kernel may
       * refuse, e.g. with THP "never"). */
      if (huge) {
        (void)madvise(x, round_up(nx * sizeof(float), 4096), MADV_HUGEPAGE);
        (void)madvise(y, round_up(ny * sizeof(float), 4096), MADV_HUGEPAGE);
      }
#else
      if (huge) {
        fprintf(stderr, "bench_c: no MADV_HUGEPAGE on this system\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
#endif
      for (size_t i = 0; i < nx; i++) x[i] = 1.0f;
      memset(y, 0, ny * sizeof(float));
      for (int i = 0; i < warmup; i++) run_op(op, x, y, count);
      long n = 1;
      /* The best of two batches decides (one preemption must not stop the
       * doubling early). */
      for (;;) {
        double t1 = batch(op, x, y, count, n), t2 = batch(op, x, y, count, n);
        if ((t1 < t2 ? t1 : t2) >= target || n >= (1L << 40)) break;
        n *= 2;
      }
      for (int r = 0; r < repeats; r++)
        samples[r] = batch(op, x, y, count, n) / (double)n;
      if (rank == 0) {
        fprintf(out,
                "{\"impl\": \"%s\", \"mode\": \"loop\", \"op\": \"%s\", "
                "\"bytes\": %ld, \"ranks\": %d, \"iters\": %ld, "
                "\"thread_level\": \"%s\", \"in_place\": %d, "
                "\"huge_pages\": %d, \"samples\": [",
                label, op, bytes, size, n,
                single ? "single" : (provided == MPI_THREAD_MULTIPLE
                                     ? "multiple" : "below multiple"),
                in_place && !strcmp(op, "allreduce"), huge);
        for (int r = 0; r < repeats; r++)
          fprintf(out, "%s%.9e", r ? ", " : "", samples[r]);
        fprintf(out, "]}\n");
        fflush(out);
      }
      free(x);
      free(y);
    }
    free(sizes);
  }
  free(ops);
  free(samples);
  if (out) fclose(out);
  CHECK(MPI_Finalize());
  return 0;
}
