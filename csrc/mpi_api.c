/* Binding to the MPI library mpi4py loaded: the function table, the
 * constants of the running MPI. The bottom layer: calls no other file. */
#define _GNU_SOURCE
#include "mpi_api.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

jm_mpi_api jm_mpi;
jm_mpi_consts jm_const = {.err_truncate = -1, .err_pending = -1};
jm_count_cfg jm_count = {INT_MAX, 1};

/* Set once by jm_mpi_bind. */
static void *mpi_library;
static char mpi_library_path[4096];

const char *jm_mpi_library_path(void) { return mpi_library_path; }

int jm_mpi_cuda_aware(void) {
  int (*query)(void) = NULL;
  if (!mpi_library) return -1;
  *(void **)(&query) = dlsym(mpi_library, "MPIX_Query_cuda_support");
  return query ? query() : -1;
}

/* ---- binding ------------------------------------------------------------ */

struct jm_search {
  void *handle;
  char path[4096];
};

static int is_mpi_library(void *h) {
  return h && dlsym(h, "MPI_Get_library_version") && dlsym(h, "MPI_Comm_rank");
}

static int find_loaded_mpi(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  struct jm_search *s = data;
  if (!info->dlpi_name || !info->dlpi_name[0]) return 0;
  void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  if (!h) return 0;
  if (!is_mpi_library(h)) {
    dlclose(h);
    return 0;
  }
  s->handle = h;
  snprintf(s->path, sizeof s->path, "%s", info->dlpi_name);
  return 1;
}

int jm_mpi_bind(const char *libpath, char *err, size_t errlen) {
  struct jm_search s = {0};
  if (libpath && libpath[0]) {
    s.handle = dlopen(libpath, RTLD_LAZY | RTLD_NOLOAD);
    if (!is_mpi_library(s.handle)) {
      snprintf(err, errlen,
               "the MPI library '%s' is not loaded in this process or is not "
               "an MPI library (import mpi4py.MPI before jaxmpi)",
               libpath);
      return -1;
    }
    snprintf(s.path, sizeof s.path, "%s", libpath);
  } else {
    dl_iterate_phdr(find_loaded_mpi, &s);
    if (!s.handle) {
      snprintf(err, errlen,
               "no MPI library is loaded in this process (import mpi4py.MPI "
               "before jaxmpi)");
      return -1;
    }
  }
  jm_mpi_api api;
#define JM_BIND_FN(ret, name, req, params)                                     \
  *(void **)(&api.name) = dlsym(s.handle, "MPI_" #name);                       \
  if ((req) && !api.name) {                                                    \
    snprintf(err, errlen, "the MPI library '%s' lacks MPI_%s", s.path,        \
             #name);                                                           \
    return -1;                                                                 \
  }
  JM_MPI_FUNCTIONS(JM_BIND_FN)
#undef JM_BIND_FN
  jm_mpi = api;
  mpi_library = s.handle;
  snprintf(mpi_library_path, sizeof mpi_library_path, "%s", s.path);
  return 0;
}
