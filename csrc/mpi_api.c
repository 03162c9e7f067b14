/* Binding to the MPI library mpi4py loaded, and the large-count layer. */
#define _GNU_SOURCE
#include "mpi_api.h"
#include "watchdog.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

jm_mpi_api jm_mpi;
jm_mpi_consts jm_const = {.err_truncate = -1};
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

/* ---- large counts ------------------------------------------------------- */

static int fits(int64_t n) { return n <= jm_count.limit; }

static int use_c(const void *fn) { return jm_count.use_c && fn != NULL; }

/* One datatype covering n consecutive elements of t (extent n * elsize), for
 * counts beyond the limit: chunks of `limit` elements, nested as deep as
 * needed, plus a tail. */
static int make_big(int64_t n, size_t elsize, jm_Datatype t, jm_Datatype *out) {
  const int64_t c = jm_count.limit, q = n / c, r = n % c;
  jm_Datatype chunk, body, tail, joined;
  int rc = jm_mpi.Type_contiguous((int)c, t, &chunk);
  if (rc) return rc;
  if (fits(q))
    rc = jm_mpi.Type_contiguous((int)q, chunk, &body);
  else
    rc = make_big(q, (size_t)c * elsize, chunk, &body);
  jm_mpi.Type_free(&chunk);
  if (rc) return rc;
  if (r == 0) {
    joined = body;
  } else {
    rc = jm_mpi.Type_contiguous((int)r, t, &tail);
    if (rc) {
      jm_mpi.Type_free(&body);
      return rc;
    }
    const int lens[2] = {1, 1};
    const jm_Aint displs[2] = {0, (jm_Aint)(q * c * (int64_t)elsize)};
    const jm_Datatype types[2] = {body, tail};
    rc = jm_mpi.Type_create_struct(2, lens, displs, types, &joined);
    jm_mpi.Type_free(&body);
    jm_mpi.Type_free(&tail);
    if (rc) return rc;
  }
  rc = jm_mpi.Type_create_resized(joined, 0, (jm_Aint)(n * (int64_t)elsize), out);
  jm_mpi.Type_free(&joined);
  if (rc) return rc;
  rc = jm_mpi.Type_commit(out);
  if (rc) jm_mpi.Type_free(out);
  return rc;
}

/* Data movement beyond the limit: run `call` with one element of a big type. */
#define JM_WITH_BIG(n, elsize, t, big, call)                                   \
  do {                                                                         \
    jm_Datatype big;                                                           \
    int rc_ = make_big((n), (elsize), (t), &big);                              \
    if (rc_) return rc_;                                                       \
    rc_ = (call);                                                              \
    jm_mpi.Type_free(&big);                                                    \
    return rc_;                                                                \
  } while (0)

static const char *at(const void *p, int64_t off, size_t elsize) {
  if (!p || p == jm_const.in_place) return p; /* MPI_IN_PLACE stays so */
  return (const char *)p + off * (int64_t)elsize;
}

/* Reductions beyond the limit: elementwise, so chunk by chunk. */
#define JM_CHUNKED(n, elsize, s, r, call)                                      \
  do {                                                                         \
    for (int64_t off_ = 0; off_ < (n); off_ += jm_count.limit) {               \
      int64_t m_ = (n)-off_ < jm_count.limit ? (n)-off_ : jm_count.limit;     \
      const void *cs = at((s), off_, (elsize));                                \
      void *cr = (void *)at((r), off_, (elsize));                              \
      int cn = (int)m_;                                                        \
      int rc_ = (call);                                                        \
      if (rc_) return rc_;                                                     \
    }                                                                          \
    return 0;                                                                  \
  } while (0)

/* With the watchdog on, a call within the plain count limit is made as its
 * nonblocking variant and completed by jm_wait (large counts stay
 * blocking). */
#define JM_WATCHED(n, icall, status, cancellable)                              \
  do {                                                                         \
    if (jm_watchdog_on() && fits(n)) {                                         \
      jm_Request rq;                                                           \
      int rcw_ = (icall);                                                      \
      return rcw_ ? rcw_ : jm_wait(&rq, (status), (cancellable));              \
    }                                                                          \
  } while (0)

int jm_Barrier(jm_Comm comm) {
  JM_WATCHED(0, jm_mpi.Ibarrier(comm, &rq), NULL, 0);
  return jm_mpi.Barrier(comm);
}

int jm_Allreduce(const void *s, void *r, int64_t n, size_t elsize,
                 jm_Datatype t, jm_Op op, jm_Comm comm) {
  JM_WATCHED(n, jm_mpi.Iallreduce(s, r, (int)n, t, op, comm, &rq), NULL, 0);
  if (fits(n)) return jm_mpi.Allreduce(s, r, (int)n, t, op, comm);
  if (use_c(jm_mpi.Allreduce_c)) return jm_mpi.Allreduce_c(s, r, n, t, op, comm);
  JM_CHUNKED(n, elsize, s, r, jm_mpi.Allreduce(cs, cr, cn, t, op, comm));
}

int jm_Reduce(const void *s, void *r, int64_t n, size_t elsize, jm_Datatype t,
              jm_Op op, int root, jm_Comm comm) {
  JM_WATCHED(n, jm_mpi.Ireduce(s, r, (int)n, t, op, root, comm, &rq), NULL, 0);
  if (fits(n)) return jm_mpi.Reduce(s, r, (int)n, t, op, root, comm);
  if (use_c(jm_mpi.Reduce_c))
    return jm_mpi.Reduce_c(s, r, n, t, op, root, comm);
  JM_CHUNKED(n, elsize, s, r, jm_mpi.Reduce(cs, cr, cn, t, op, root, comm));
}

int jm_Scan(const void *s, void *r, int64_t n, size_t elsize, jm_Datatype t,
            jm_Op op, jm_Comm comm) {
  JM_WATCHED(n, jm_mpi.Iscan(s, r, (int)n, t, op, comm, &rq), NULL, 0);
  if (fits(n)) return jm_mpi.Scan(s, r, (int)n, t, op, comm);
  if (use_c(jm_mpi.Scan_c)) return jm_mpi.Scan_c(s, r, n, t, op, comm);
  JM_CHUNKED(n, elsize, s, r, jm_mpi.Scan(cs, cr, cn, t, op, comm));
}

/* Beyond the count limit without MPI-4's _c calls, reduce-scatter cannot be
 * chunked elementwise (each chunk's blocks would not be contiguous): it
 * becomes one (chunked) MPI_Reduce per block onto its rank, correct but
 * without reduce-scatter's bandwidth. */
int jm_Reduce_scatter_block(const void *s, void *r, int64_t n, size_t elsize,
                            jm_Datatype t, jm_Op op, jm_Comm comm) {
  JM_WATCHED(n, jm_mpi.Ireduce_scatter_block(s, r, (int)n, t, op, comm, &rq),
             NULL, 0);
  if (fits(n)) return jm_mpi.Reduce_scatter_block(s, r, (int)n, t, op, comm);
  if (use_c(jm_mpi.Reduce_scatter_block_c))
    return jm_mpi.Reduce_scatter_block_c(s, r, n, t, op, comm);
  int rank, size, rc = jm_mpi.Comm_rank(comm, &rank);
  if (!rc) rc = jm_mpi.Comm_size(comm, &size);
  for (int j = 0; j < size && !rc; j++)
    rc = jm_Reduce(at(s, (int64_t)j * n, elsize), j == rank ? r : NULL, n,
                   elsize, t, op, j, comm);
  return rc;
}

int jm_Reduce_scatter(const void *s, void *r, const int64_t *counts,
                      int *ints, int size, int rank, size_t elsize,
                      jm_Datatype t, jm_Op op, jm_Comm comm) {
  int all_fit = 1;
  for (int j = 0; j < size; j++) all_fit &= fits(counts[j]);
  if (all_fit) {
    for (int j = 0; j < size; j++) ints[j] = (int)counts[j];
    if (jm_watchdog_on()) {
      jm_Request rq;
      int rc = jm_mpi.Ireduce_scatter(s, r, ints, t, op, comm, &rq);
      return rc ? rc : jm_wait(&rq, NULL, 0);
    }
    return jm_mpi.Reduce_scatter(s, r, ints, t, op, comm);
  }
  if (use_c(jm_mpi.Reduce_scatter_c))
    return jm_mpi.Reduce_scatter_c(s, r, (const jm_Count *)counts, t, op, comm);
  int rc = 0;
  int64_t off = 0;
  for (int j = 0; j < size && !rc; j++) {
    rc = jm_Reduce(at(s, off, elsize), j == rank ? r : NULL, counts[j], elsize,
                   t, op, j, comm);
    off += counts[j];
  }
  return rc;
}

int jm_Exscan(const void *s, void *r, int64_t n, size_t elsize, jm_Datatype t,
              jm_Op op, jm_Comm comm) {
  JM_WATCHED(n, jm_mpi.Iexscan(s, r, (int)n, t, op, comm, &rq), NULL, 0);
  if (fits(n)) return jm_mpi.Exscan(s, r, (int)n, t, op, comm);
  if (use_c(jm_mpi.Exscan_c)) return jm_mpi.Exscan_c(s, r, n, t, op, comm);
  JM_CHUNKED(n, elsize, s, r, jm_mpi.Exscan(cs, cr, cn, t, op, comm));
}

int jm_Bcast(void *buf, int64_t n, size_t elsize, jm_Datatype t, int root,
             jm_Comm comm) {
  JM_WATCHED(n, jm_mpi.Ibcast(buf, (int)n, t, root, comm, &rq), NULL, 0);
  if (fits(n)) return jm_mpi.Bcast(buf, (int)n, t, root, comm);
  if (use_c(jm_mpi.Bcast_c)) return jm_mpi.Bcast_c(buf, n, t, root, comm);
  JM_WITH_BIG(n, elsize, t, big, jm_mpi.Bcast(buf, 1, big, root, comm));
}

int jm_Gather(const void *s, void *r, int64_t n, size_t elsize, jm_Datatype t,
              int root, jm_Comm comm) {
  JM_WATCHED(n, jm_mpi.Igather(s, (int)n, t, r, (int)n, t, root, comm, &rq),
             NULL, 0);
  if (fits(n)) return jm_mpi.Gather(s, (int)n, t, r, (int)n, t, root, comm);
  if (use_c(jm_mpi.Gather_c))
    return jm_mpi.Gather_c(s, n, t, r, n, t, root, comm);
  JM_WITH_BIG(n, elsize, t, big, jm_mpi.Gather(s, 1, big, r, 1, big, root, comm));
}

int jm_Scatter(const void *s, void *r, int64_t n, size_t elsize,
               jm_Datatype t, int root, jm_Comm comm) {
  JM_WATCHED(n, jm_mpi.Iscatter(s, (int)n, t, r, (int)n, t, root, comm, &rq),
             NULL, 0);
  if (fits(n)) return jm_mpi.Scatter(s, (int)n, t, r, (int)n, t, root, comm);
  if (use_c(jm_mpi.Scatter_c))
    return jm_mpi.Scatter_c(s, n, t, r, n, t, root, comm);
  JM_WITH_BIG(n, elsize, t, big,
              jm_mpi.Scatter(s, 1, big, r, 1, big, root, comm));
}

int jm_Allgather(const void *s, void *r, int64_t n, size_t elsize,
                 jm_Datatype t, jm_Comm comm) {
  JM_WATCHED(n, jm_mpi.Iallgather(s, (int)n, t, r, (int)n, t, comm, &rq), NULL,
             0);
  if (fits(n)) return jm_mpi.Allgather(s, (int)n, t, r, (int)n, t, comm);
  if (use_c(jm_mpi.Allgather_c))
    return jm_mpi.Allgather_c(s, n, t, r, n, t, comm);
  JM_WITH_BIG(n, elsize, t, big, jm_mpi.Allgather(s, 1, big, r, 1, big, comm));
}

int jm_Alltoall(const void *s, void *r, int64_t n, size_t elsize,
                jm_Datatype t, jm_Comm comm) {
  JM_WATCHED(n, jm_mpi.Ialltoall(s, (int)n, t, r, (int)n, t, comm, &rq), NULL,
             0);
  if (fits(n)) return jm_mpi.Alltoall(s, (int)n, t, r, (int)n, t, comm);
  if (use_c(jm_mpi.Alltoall_c))
    return jm_mpi.Alltoall_c(s, n, t, r, n, t, comm);
  JM_WITH_BIG(n, elsize, t, big, jm_mpi.Alltoall(s, 1, big, r, 1, big, comm));
}

int jm_Send(const void *buf, int64_t n, size_t elsize, jm_Datatype t,
            int dest, int tag, jm_Comm comm) {
  JM_WATCHED(n, jm_mpi.Isend(buf, (int)n, t, dest, tag, comm, &rq), NULL, 0);
  if (fits(n)) return jm_mpi.Send(buf, (int)n, t, dest, tag, comm);
  if (use_c(jm_mpi.Send_c)) return jm_mpi.Send_c(buf, n, t, dest, tag, comm);
  JM_WITH_BIG(n, elsize, t, big, jm_mpi.Send(buf, 1, big, dest, tag, comm));
}

int jm_Recv(void *buf, int64_t n, size_t elsize, jm_Datatype t, int source,
            int tag, jm_Comm comm, jm_Status *status) {
  JM_WATCHED(n, jm_mpi.Irecv(buf, (int)n, t, source, tag, comm, &rq), status,
             1);
  if (fits(n)) return jm_mpi.Recv(buf, (int)n, t, source, tag, comm, status);
  if (use_c(jm_mpi.Recv_c))
    return jm_mpi.Recv_c(buf, n, t, source, tag, comm, status);
  JM_WITH_BIG(n, elsize, t, big,
              jm_mpi.Recv(buf, 1, big, source, tag, comm, status));
}

int jm_Sendrecv(const void *s, int64_t sn, size_t selsize, jm_Datatype st,
                int dest, int sendtag, void *r, int64_t rn, size_t relsize,
                jm_Datatype rt, int source, int recvtag, jm_Comm comm,
                jm_Status *status) {
  if (jm_watchdog_on() && fits(sn) && fits(rn)) {
    /* Post the receive first, then the send; complete both. A receive that
     * times out is cancelled; the send is left pending. */
    jm_Request rr, sr;
    int rc = jm_mpi.Irecv(r, (int)rn, rt, source, recvtag, comm, &rr);
    if (rc) return rc;
    rc = jm_mpi.Isend(s, (int)sn, st, dest, sendtag, comm, &sr);
    if (rc) {
      jm_mpi.Cancel(&rr);
      jm_wait(&rr, NULL, 1);
      return rc;
    }
    rc = jm_wait(&rr, status, 1);
    if (rc) return rc;
    return jm_wait(&sr, NULL, 0);
  }
  if (fits(sn) && fits(rn))
    return jm_mpi.Sendrecv(s, (int)sn, st, dest, sendtag, r, (int)rn, rt,
                           source, recvtag, comm, status);
  if (use_c(jm_mpi.Sendrecv_c))
    return jm_mpi.Sendrecv_c(s, sn, st, dest, sendtag, r, rn, rt, source,
                             recvtag, comm, status);
  /* Describe each side as one element (of a big type only where needed). */
  jm_Datatype sbig = st, rbig = rt;
  int scount = (int)sn, rcount = (int)rn, rc = 0;
  if (!fits(sn)) {
    rc = make_big(sn, selsize, st, &sbig);
    if (rc) return rc;
    scount = 1;
  }
  if (!fits(rn)) {
    rc = make_big(rn, relsize, rt, &rbig);
    if (rc) {
      if (scount == 1 && !fits(sn)) jm_mpi.Type_free(&sbig);
      return rc;
    }
    rcount = 1;
  }
  rc = jm_mpi.Sendrecv(s, scount, sbig, dest, sendtag, r, rcount, rbig, source,
                       recvtag, comm, status);
  if (!fits(sn)) jm_mpi.Type_free(&sbig);
  if (!fits(rn)) jm_mpi.Type_free(&rbig);
  return rc;
}

int jm_Isend(const void *buf, int64_t n, size_t elsize, jm_Datatype t,
             int dest, int tag, jm_Comm comm, jm_Request *req) {
  if (fits(n)) return jm_mpi.Isend(buf, (int)n, t, dest, tag, comm, req);
  if (use_c(jm_mpi.Isend_c))
    return jm_mpi.Isend_c(buf, n, t, dest, tag, comm, req);
  JM_WITH_BIG(n, elsize, t, big,
              jm_mpi.Isend(buf, 1, big, dest, tag, comm, req));
}

int jm_Irecv(void *buf, int64_t n, size_t elsize, jm_Datatype t, int source,
             int tag, jm_Comm comm, jm_Request *req) {
  if (fits(n)) return jm_mpi.Irecv(buf, (int)n, t, source, tag, comm, req);
  if (use_c(jm_mpi.Irecv_c))
    return jm_mpi.Irecv_c(buf, n, t, source, tag, comm, req);
  JM_WITH_BIG(n, elsize, t, big,
              jm_mpi.Irecv(buf, 1, big, source, tag, comm, req));
}

int64_t jm_received_bytes(const jm_Status *status) {
  int count = 0;
  if (jm_mpi.Get_count(status, jm_const.byte, &count)) return -1;
  if (count == jm_const.undefined) return -1;
  return count;
}
