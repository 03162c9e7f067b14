/* Drives jaxmpi's MPI layer for XLA directly, as XLA's MPI collectives call
 * it through jaxlib's MPItrampoline (xla/backends/cpu/collectives/
 * mpi_collectives.cc, mpi_communicator.cc), without jaxlib: under the
 * sanitizers, whose runtime refuses the trampoline's RTLD_DEEPBIND.
 * native_drive.py (under mpiexec) attaches the layer and calls drive().
 * Checks against values computed here; prints each failure; returns their
 * number. Only the ABI's facts are used: uintptr_t handles, the constants'
 * values read from the surface's symbols. */
#define _GNU_SOURCE
#include <complex.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uintptr_t H;
typedef struct {
  uint64_t impl[3];
  int source, tag, error, pad;
} status;

static void *lib;
static int failures, checks, me, size;

#define FN(ret, name, params)                                                  \
  static ret(*name) params;
FN(int, Init_thread, (int *, char ***, int, int *))
FN(int, Comm_rank, (H, int *))
FN(int, Comm_size, (H, int *))
FN(int, Is_thread_main, (int *))
FN(int, Comm_split, (H, int, int, H *))
FN(int, Comm_free, (H *))
FN(int, Allreduce, (const void *, void *, int, H, H, H))
FN(int, Allgather, (const void *, int, H, void *, int, H, H))
FN(int, Reduce_scatter, (const void *, void *, const int *, H, H, H))
FN(int, Isend, (const void *, int, H, int, int, H, H *))
FN(int, Irecv, (void *, int, H, int, int, H, H *))
FN(int, Wait, (H *, void *))
FN(int, Sendrecv, (const void *, int, H, int, int, void *, int, H, int, int, H,
                   void *))
FN(int, Error_string, (int, char *, int *))
FN(int, Error_class, (int, int *))
FN(int, Win_free, (void))
FN(double, Wtime, (void))
FN(int, Finalize, (void))

static H WORLD, COMM_NULL, FLOAT, DOUBLE, INT8, INT32, INT64, UINT8, CFLOAT,
    CDOUBLE, BYTE, SUM, MAX, MIN, PROD, REQUEST_NULL;
static int UNDEFINED, THREAD_FUNNELED, SUCCESS, ERR_UNSUPPORTED;
static void *STATUS_IGNORE, *IN_PLACE;

static void *sym(const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    printf("rank %d: FAIL missing symbol %s\n", me, name);
    failures++;
  }
  return p;
}

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    checks++;                                                                  \
    if (!(cond)) {                                                             \
      failures++;                                                              \
      printf("rank %d: FAIL %s:%d: ", me, __FILE__, __LINE__);                 \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
    }                                                                          \
  } while (0)

static const char *message(int code) {
  static char text[1024];
  int len = 0;
  if (Error_string(code, text, &len)) return "(Error_string failed)";
  return text;
}

static void load(void) {
#define LOAD(name) *(void **)(&name) = sym("MPIABI_" #name);
  LOAD(Init_thread) LOAD(Comm_rank) LOAD(Comm_size) LOAD(Is_thread_main)
  LOAD(Comm_split) LOAD(Comm_free) LOAD(Allreduce) LOAD(Allgather)
  LOAD(Reduce_scatter) LOAD(Isend) LOAD(Irecv) LOAD(Wait) LOAD(Sendrecv)
  LOAD(Error_string) LOAD(Error_class) LOAD(Win_free) LOAD(Wtime)
  LOAD(Finalize)
#define HANDLE(var, name) var = *(const H *)sym("MPIABI_" name);
  HANDLE(WORLD, "COMM_WORLD") HANDLE(COMM_NULL, "COMM_NULL")
  HANDLE(FLOAT, "FLOAT") HANDLE(DOUBLE, "DOUBLE") HANDLE(INT8, "INT8_T")
  HANDLE(INT32, "INT32_T") HANDLE(INT64, "INT64_T") HANDLE(UINT8, "UINT8_T")
  HANDLE(CFLOAT, "C_COMPLEX") HANDLE(CDOUBLE, "C_DOUBLE_COMPLEX")
  HANDLE(BYTE, "BYTE") HANDLE(SUM, "SUM") HANDLE(MAX, "MAX") HANDLE(MIN, "MIN")
  HANDLE(PROD, "PROD") HANDLE(REQUEST_NULL, "REQUEST_NULL")
#define INT(var, name) var = *(const int *)sym("MPIABI_" name);
  INT(UNDEFINED, "UNDEFINED") INT(THREAD_FUNNELED, "THREAD_FUNNELED")
  INT(SUCCESS, "SUCCESS") INT(ERR_UNSUPPORTED, "ERR_UNSUPPORTED_OPERATION")
  STATUS_IGNORE = *(void *const *)sym("MPIABI_STATUS_IGNORE");
  IN_PLACE = *(void *const *)sym("MPIABI_IN_PLACE");
}

/* XLA's sequence: a communicator per clique, split from COMM_WORLD with
 * colour = the clique's first device and key = the rank in it. Here the
 * clique is every process, in reverse order (key = size - 1 - rank), so a
 * rank that ignored the key would be found. */
static void collectives(void) {
  int flag = 0, provided = -1, r = -1, n = -1;
  CHECK(Init_thread(NULL, NULL, THREAD_FUNNELED, &provided) == SUCCESS &&
            provided >= THREAD_FUNNELED, "Init_thread: provided %d", provided);
  CHECK(Is_thread_main(&flag) == SUCCESS && flag == 1, "Is_thread_main %d", flag);
  H comm = 0;
  int rc = Comm_split(WORLD, 0, size - 1 - me, &comm);
  CHECK(rc == SUCCESS, "Comm_split: %s", message(rc));
  Comm_rank(comm, &r);
  Comm_size(comm, &n);
  CHECK(r == size - 1 - me && n == size, "split: rank %d size %d", r, n);

  /* all-reduce: each dtype and op XLA maps (sum, max, min, prod) */
  float f[3] = {1.0f + r, 2.0f * r, -1.0f}, fs[3];
  rc = Allreduce(f, fs, 3, FLOAT, SUM, comm);
  float want0 = (float)(size + size * (size - 1) / 2);
  CHECK(rc == SUCCESS && fs[0] == want0 && fs[1] == (float)(size * (size - 1)) &&
            fs[2] == (float)-size, "Allreduce float sum %g %g %g", fs[0], fs[1], fs[2]);
  double d = r + 0.5, dmax = 0;
  rc = Allreduce(&d, &dmax, 1, DOUBLE, MAX, comm);
  CHECK(rc == SUCCESS && dmax == size - 0.5, "Allreduce double max %g", dmax);
  int8_t i8 = (int8_t)(r - 3), i8min = 0;
  rc = Allreduce(&i8, &i8min, 1, INT8, MIN, comm);
  CHECK(rc == SUCCESS && i8min == -3, "Allreduce int8 min %d", i8min);
  int64_t i64 = 2, prod = 0;
  rc = Allreduce(&i64, &prod, 1, INT64, PROD, comm);
  CHECK(rc == SUCCESS && prod == (int64_t)1 << size, "Allreduce int64 prod");
  float complex c = (1.0f + r) + 1.0f * I, cs = 0;
  rc = Allreduce(&c, &cs, 1, CFLOAT, SUM, comm);
  CHECK(rc == SUCCESS && crealf(cs) == want0 && cimagf(cs) == (float)size,
        "Allreduce complex64 sum");
  double complex z = r * I, zs = 0;
  rc = Allreduce(&z, &zs, 1, CDOUBLE, SUM, comm);
  CHECK(rc == SUCCESS && cimag(zs) == size * (size - 1) / 2.0,
        "Allreduce complex128 sum");
  /* one buffer for both (XLA may alias them): made in place */
  int32_t both = r + 1;
  rc = Allreduce(&both, &both, 1, INT32, SUM, comm);
  CHECK(rc == SUCCESS && both == size * (size + 1) / 2, "Allreduce aliased %d",
        both);
  int32_t in = 10 * r;
  rc = Allreduce(IN_PLACE, &in, 1, INT32, MAX, comm);
  CHECK(rc == SUCCESS && in == 10 * (size - 1), "Allreduce IN_PLACE %d", in);

  /* all-gather and reduce-scatter (equal counts, as XLA passes) */
  int32_t mine[2] = {r, 100 + r}, all[2 * 64];
  rc = Allgather(mine, 2, INT32, all, 2, INT32, comm);
  int ok = rc == SUCCESS;
  for (int k = 0; k < n && ok; k++) ok = all[2 * k] == k && all[2 * k + 1] == 100 + k;
  CHECK(ok, "Allgather");
  double rs_in[64], rs_out = -1;
  int counts[64];
  for (int k = 0; k < n; k++) {
    rs_in[k] = k * 1000.0 + r;
    counts[k] = 1;
  }
  rc = Reduce_scatter(rs_in, &rs_out, counts, DOUBLE, SUM, comm);
  CHECK(rc == SUCCESS && rs_out == r * 1000.0 * n + n * (n - 1) / 2.0,
        "Reduce_scatter %g", rs_out);

  /* collective-permute: Irecv from r-1, Isend to r+1, Wait (bytes) */
  uint64_t out = 7000 + (uint64_t)r, got = 0;
  H reqs[2];
  rc = Irecv(&got, 8, BYTE, (r - 1 + n) % n, 0, comm, &reqs[0]);
  CHECK(rc == SUCCESS, "Irecv: %s", message(rc));
  rc = Isend(&out, 8, BYTE, (r + 1) % n, 0, comm, &reqs[1]);
  CHECK(rc == SUCCESS, "Isend: %s", message(rc));
  status st;
  memset(&st, 0xff, sizeof st);
  rc = Wait(&reqs[0], &st);
  CHECK(rc == SUCCESS && got == 7000 + (uint64_t)((r - 1 + n) % n) &&
            st.source == (r - 1 + n) % n && st.tag == 0 && st.error == 0 &&
            reqs[0] == REQUEST_NULL,
        "Wait (receive): got %llu source %d tag %d", (unsigned long long)got,
        st.source, st.tag);
  rc = Wait(&reqs[1], STATUS_IGNORE);
  CHECK(rc == SUCCESS && reqs[1] == REQUEST_NULL, "Wait (send)");

  /* all-to-all: pairwise Sendrecv, as XLA's does */
  uint8_t blocks[64], recv[64];
  for (int k = 0; k < n; k++) blocks[k] = (uint8_t)(16 * r + k);
  recv[r] = blocks[r];
  ok = 1;
  for (int i = 1; i < n; i++) {
    int to = (r + i) % n, from = (r - i + n) % n;
    rc = Sendrecv(&blocks[to], 1, UINT8, to, 0, &recv[from], 1, UINT8, from, 0,
                  comm, STATUS_IGNORE);
    ok &= rc == SUCCESS;
  }
  for (int k = 0; k < n && ok; k++) ok = recv[k] == (uint8_t)(16 * k + r);
  CHECK(ok, "all-to-all by Sendrecv");

  /* MPI's own error, as XLA sees it: a message too long for its receive */
  if (n > 1) {
    int32_t big[2] = {1, 2}, small = 0;
    int peer = r ^ 1;
    if (peer < n) {
      rc = Sendrecv(big, 2, INT32, peer, 3, &small, 1, INT32, peer, 3, comm,
                    STATUS_IGNORE);
      const char *m = message(rc);
      CHECK(rc != SUCCESS && strstr(m, "jaxmpi: MPI_Sendrecv (XLA's all-to-all") &&
                strstr(m, "failed on world rank"),
            "truncation: rc %d: %s", rc, m);
    }
  }
  /* a colour of MPI_UNDEFINED gives MPI_COMM_NULL */
  H none = 1;
  rc = Comm_split(WORLD, me == 0 ? UNDEFINED : 1, 0, &none);
  CHECK(rc == SUCCESS && (me == 0) == (none == COMM_NULL), "split undefined");
  if (none != COMM_NULL) Comm_free(&none);
  rc = Comm_free(&comm);
  CHECK(rc == SUCCESS && comm == COMM_NULL, "Comm_free");
}

static void errors(void) {
  int cls = -1;
  /* a handle the layer never made, a datatype it has not */
  int rc = Allreduce(&cls, &cls, 1, (H)0x2ff, SUM, WORLD);
  const char *m = message(rc);
  CHECK(rc != SUCCESS && strstr(m, "datatype handle 0x2ff"), "bad datatype: %s", m);
  H stale = (H)0x1ff;
  rc = Comm_free(&stale);
  CHECK(rc != SUCCESS && strstr(message(rc), "not one of jaxmpi's"), "bad comm");
  /* a function XLA never calls: an error naming it, never a crash */
  rc = Win_free();
  m = message(rc);
  CHECK(rc != SUCCESS && strstr(m, "MPI_Win_free is not provided"), "stub: %s", m);
  CHECK(Error_class(rc, &cls) == SUCCESS && cls == ERR_UNSUPPORTED,
        "Error_class %d", cls);
  double t0 = Wtime(), t1 = Wtime();
  CHECK(t1 >= t0 && t0 > 0, "Wtime");
  CHECK(Finalize() == SUCCESS, "Finalize is mpi4py's");
}

int drive(void) {
  lib = dlopen("_xla_mpi.so", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) lib = dlopen(getenv("JAXMPI_SURFACE"), RTLD_NOW | RTLD_NOLOAD);
  if (!lib) {
    printf("FAIL: the surface is not loaded: %s\n", dlerror());
    return 1;
  }
  load();
  if (failures) return failures;
  Comm_rank(WORLD, &me);
  Comm_size(WORLD, &size);
  for (int round = 0; round < 3; round++) collectives();
  errors();
  printf("rank %d: %d checks, %d failures\n", me, checks, failures);
  fflush(stdout);
  return failures;
}
