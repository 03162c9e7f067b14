/* benchmarks/native.py's measure of the MPI layer's own cost: `iters`
 * 4-byte MPI_Allreduce calls in a C loop, either through the surface
 * (MPIABI_Allreduce with its own handles: what XLA calls) or to the MPI
 * library directly (its MPI_Allreduce with its handles, `handle_bytes` 4
 * for the MPICH family, 8 for Open MPI and the MPI-5 ABI), on the same
 * communicator. Returns microseconds per call. */
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

double bench(const char *surface, const char *mpilib, int handle_bytes,
             int through_surface, uint64_t type, uint64_t op, uint64_t comm,
             int iters) {
  float x = 1.0f, y = 0.0f;
  double t0;
  if (through_surface) {
    void *lib = dlopen(surface, RTLD_NOW | RTLD_NOLOAD);
    if (!lib) return -1;
    abi_allreduce f;
    *(void **)&f = dlsym(lib, "MPIABI_Allreduce");
    uintptr_t t = *(const uintptr_t *)dlsym(lib, "MPIABI_FLOAT");
    uintptr_t o = *(const uintptr_t *)dlsym(lib, "MPIABI_SUM");
    uintptr_t c = *(const uintptr_t *)dlsym(lib, "MPIABI_COMM_WORLD");
    t0 = now();
    for (int i = 0; i < iters; i++) f(&x, &y, 1, t, o, c);
    return (now() - t0) / iters * 1e6;
  }
  void *lib = dlopen(mpilib, RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return -1;
  void *sym = dlsym(lib, "MPI_Allreduce");
  if (handle_bytes == 4) {
    int_allreduce f;
    *(void **)&f = sym;
    t0 = now();
    for (int i = 0; i < iters; i++)
      f(&x, &y, 1, (int)(uint32_t)type, (int)(uint32_t)op, (int)(uint32_t)comm);
  } else {
    ptr_allreduce f;
    *(void **)&f = sym;
    t0 = now();
    for (int i = 0; i < iters; i++)
      f(&x, &y, 1, (void *)(uintptr_t)type, (void *)(uintptr_t)op,
        (void *)(uintptr_t)comm);
  }
  return (now() - t0) / iters * 1e6;
}
