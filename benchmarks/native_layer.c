/* benchmarks/native.py's measure of the MPI layer's own cost: 4-byte
 * MPI_Allreduce calls in a C loop, through the surface (MPIABI_Allreduce
 * with its own handles: what XLA calls) and to the MPI library directly
 * (its MPI_Allreduce with its handles, `handle_bytes` 4 for the MPICH
 * family, 8 for Open MPI and the MPI-5 ABI), on the same communicator,
 * taking turns every `chunk` calls so that a slow spell of a shared machine
 * falls on both. Writes microseconds per call of each. Returns 0, or -1 if
 * a library is not loaded. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdint.h>
#include <time.h>

typedef int (*abi_allreduce)(const void *, void *, int, uintptr_t, uintptr_t,
                             uintptr_t);
typedef int (*int_allreduce)(const void *, void *, int, int, int, int);
typedef int (*ptr_allreduce)(const void *, void *, int, void *, void *,
                             void *);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int bench(const char *surface, const char *mpilib, int handle_bytes,
          uint64_t type, uint64_t op, uint64_t comm, int chunks, int chunk,
          double *through_surface, double *direct) {
  void *slib = dlopen(surface, RTLD_NOW | RTLD_NOLOAD);
  void *mlib = dlopen(mpilib, RTLD_NOW | RTLD_NOLOAD);
  if (!slib || !mlib) return -1;
  abi_allreduce f;
  *(void **)&f = dlsym(slib, "MPIABI_Allreduce");
  uintptr_t t = *(const uintptr_t *)dlsym(slib, "MPIABI_FLOAT");
  uintptr_t o = *(const uintptr_t *)dlsym(slib, "MPIABI_SUM");
  uintptr_t c = *(const uintptr_t *)dlsym(slib, "MPIABI_COMM_WORLD");
  void *sym = dlsym(mlib, "MPI_Allreduce");
  int_allreduce gi;
  ptr_allreduce gp;
  *(void **)&gi = sym;
  *(void **)&gp = sym;
  float x = 1.0f, y = 0.0f;
  double ts = 0, td = 0;
  for (int k = 0; k < chunks; k++) {
    double t0 = now();
    for (int i = 0; i < chunk; i++) f(&x, &y, 1, t, o, c);
    double t1 = now();
    if (handle_bytes == 4)
      for (int i = 0; i < chunk; i++)
        gi(&x, &y, 1, (int)(uint32_t)type, (int)(uint32_t)op,
           (int)(uint32_t)comm);
    else
      for (int i = 0; i < chunk; i++)
        gp(&x, &y, 1, (void *)(uintptr_t)type, (void *)(uintptr_t)op,
           (void *)(uintptr_t)comm);
    double t2 = now();
    ts += t1 - t0;
    td += t2 - t1;
  }
  *through_surface = ts / ((double)chunks * chunk) * 1e6;
  *direct = td / ((double)chunks * chunk) * 1e6;
  return 0;
}
