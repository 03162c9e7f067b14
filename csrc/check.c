/* Cross-rank checks: see check.h. */
#include "check.h"
#include "cuda_staging.h"
#include "mpi_calls.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shadow.h"
#include "watchdog.h"

static _Atomic int check_mode = JM_CHECK_SPARSE;

void jm_check_set(int mode) {
  atomic_store(&check_mode, mode == JM_CHECK_OFF || mode == JM_CHECK_ALL
                                ? mode
                                : JM_CHECK_SPARSE);
}
int jm_check_mode(void) {
  return atomic_load_explicit(&check_mode, memory_order_relaxed);
}

/* The default schedule. A pure function of the call's number on its
 * communicator, which every rank counts alike: the n-th collective of one
 * rank is matched by MPI with the n-th of every other (collectives match in
 * order), so ranks always decide alike for the calls MPI pairs, and never
 * one checks (waiting on the shadow) while another enters the real call.
 * Dense at first (the first calls of a program, where most mismatches show),
 * then ever sparser: about 30 checks in 10^5 calls, then one per 65536. */
int jm_check_scheduled(int64_t n) {
  return n >= 1 && (n <= JM_CHECK_FIRST || (n & (n - 1)) == 0 ||
                    (n & (JM_CHECK_PERIOD - 1)) == 0);
}

/* ---- reduction op names (filled at import, read-only afterwards) -------- */

#define JM_MAX_NAMED_OPS 64
static struct {
  jm_Op op;
  char name[16];
} named_ops[JM_MAX_NAMED_OPS];
static int n_named_ops;

int jm_check_name_op(jm_Op op, const char *name) {
  if (n_named_ops >= JM_MAX_NAMED_OPS) return -1;
  named_ops[n_named_ops].op = op;
  snprintf(named_ops[n_named_ops].name, sizeof named_ops[0].name, "%s", name);
  n_named_ops++;
  return 0;
}

/* The op's index among the named ones (the same in every process: Python
 * names them in one order), -1 for a user-defined op. */
static int op_index(jm_Op op) {
  for (int i = 0; i < n_named_ops; i++)
    if (named_ops[i].op == op) return i;
  return -1;
}

static void op_name(jm_Op op, char *out, size_t len) {
  for (int i = 0; i < n_named_ops; i++)
    if (named_ops[i].op == op) {
      snprintf(out, len, "%s", named_ops[i].name);
      return;
    }
  snprintf(out, len, "user-defined");
}

/* ---- the shadow communicator, cached on the user's communicator -------- */

/* ---- signatures ---------------------------------------------------------- */

#define JM_SIG_DIMS 8
#define JM_SIG_ROWS 8

/* What every rank must agree on; plain int64 words and chars, exchanged as
 * bytes between processes of the same build. */
typedef struct jm_sig {
  char op[24];
  char redop[16];   /* "" when the op has none */
  int64_t seq;
  int64_t dtype;    /* XLA type, -1 when the op moves no array */
  int64_t ndim;
  int64_t count;
  int64_t dims[JM_SIG_DIMS];
  int64_t root;     /* -1 when the op has none */
  uint64_t digest;  /* of the unchecked calls since the last checked one */
  int64_t since;    /* number of the first of them */
  /* Row counts (`counts` of allgatherv, gatherv, scatterv and their
   * non-blocking forms; equal on every rank): a hash of all, how many, and
   * the first few for the message. */
  uint64_t rows_hash;
  int64_t nrows;
  int64_t rows[JM_SIG_ROWS];
} jm_sig;

enum { F_OP, F_SEQ, F_ARRAY, F_REDOP, F_ROOT, F_ROWS, F_COUNT,
       F_DIGEST = F_COUNT };

static const char *const field_names[F_COUNT] = {
    "the operation", "the call number", "the array", "the reduction op",
    "the root", "the counts"};

/* Ops whose arrays have a different number of rows on each rank (the
 * `counts`, `sendcounts` attributes): signatures compare their rows'
 * shape, not the row count (dims[0] is -1, count the elements per row). */
static int varies_by_rank(const jm_op_desc *desc) {
  return (desc->attrs & (JM_A(counts) | JM_A(sendcounts))) != 0;
}

/* ---- the digest of unchecked calls ---------------------------------------
 * Between two checked calls (default mode) each collective folds what a
 * check would compare into a 64-bit digest, a few multiplications and no
 * MPI: the next checked call compares digests too, so a mismatch the
 * schedule skipped and MPI survived is still reported, late. */

static uint64_t mix(uint64_t h, uint64_t v) {
  h = (h ^ v) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

static uint64_t rows_hash(const jm_call *c) {
  uint64_t h = 0x5bd1e995u;
  for (int i = 0; i < c->nrows[JM_ROWS_COUNTS]; i++)
    h = mix(h, (uint64_t)jm_rows(c, JM_ROWS_COUNTS, i));
  return h;
}

static uint64_t fold_call(uint64_t h, const jm_call *c, const jm_op_desc *desc,
                          const jm_buffer *b) {
  /* The scalar fields in one word, folded by one mix: each mix is a
   * dependent multiply, and this runs on every unchecked call. The op's
   * number in the table (the same build on every rank); the reduction op's
   * index (0x99: none); dtype and rank (0xfe: no array); the root (all ones:
   * none). */
  const uint64_t redop =
      (desc->attrs & JM_A(op)) ? (uint64_t)(op_index(c->op) & 0xff) : 0x99;
  const uint64_t root =
      (desc->attrs & JM_A(root)) ? (uint64_t)(uint32_t)c->root : 0xffffffffu;
  const uint64_t dtype = b ? (uint64_t)(b->dtype & 0xff) : 0xfe;
  const uint64_t ndim = b ? (uint64_t)(b->ndim & 0xff) : 0xfe;
  h = mix(h, (uint64_t)(desc->id & 0xff) | redop << 8 | dtype << 16 |
                 ndim << 24 | root << 32);
  if (desc->attrs & JM_A(counts)) h = mix(h, rows_hash(c));
  if (!b) return h;
  for (int64_t d = varies_by_rank(desc); d < b->ndim; d++)
    h = mix(h, (uint64_t)b->dims[d]);
  return h;
}

static int same_field(const jm_sig *a, const jm_sig *b, int f) {
  switch (f) {
    case F_OP: return strcmp(a->op, b->op) == 0;
    case F_SEQ: return a->seq == b->seq;
    case F_ARRAY:
      return a->dtype == b->dtype && a->ndim == b->ndim &&
             a->count == b->count &&
             memcmp(a->dims, b->dims, sizeof a->dims) == 0;
    case F_REDOP: return strcmp(a->redop, b->redop) == 0;
    case F_DIGEST: return a->digest == b->digest;
    case F_ROWS:
      return a->rows_hash == b->rows_hash && a->nrows == b->nrows &&
             memcmp(a->rows, b->rows, sizeof a->rows) == 0;
    default: return a->root == b->root;
  }
}

static void describe(const jm_sig *s, int f, char *out, size_t len) {
  switch (f) {
    case F_OP: snprintf(out, len, "calls jaxmpi.%s", s->op); return;
    case F_SEQ: snprintf(out, len, "is at call #%lld", (long long)s->seq); return;
    case F_ARRAY: {
      if (s->dtype < 0) {
        snprintf(out, len, "passes no array");
        return;
      }
      const char *dt = (s->dtype < JM_NDTYPES && jm_dtypes[s->dtype].name)
                           ? jm_dtypes[s->dtype].name
                           : "?";
      size_t n = (size_t)snprintf(out, len, "%s[", dt);
      for (int64_t d = 0; d < s->ndim && n < len; d++) {
        if (d == JM_SIG_DIMS) {
          n += (size_t)snprintf(out + n, len - n, ",...(%lld elements)",
                                (long long)s->count);
          break;
        }
        if (s->dims[d] < 0) /* rows differ by rank (v-ops) */
          n += (size_t)snprintf(out + n, len - n, d ? ",*" : "*");
        else
          n += (size_t)snprintf(out + n, len - n, d ? ",%lld" : "%lld",
                                (long long)s->dims[d]);
      }
      if (n < len) snprintf(out + n, len - n, "]");
      return;
    }
    case F_REDOP: snprintf(out, len, "op=MPI.%s", s->redop); return;
    case F_ROWS: {
      size_t n = (size_t)snprintf(out, len, "counts=[");
      for (int64_t i = 0; i < s->nrows && n < len; i++) {
        if (i == JM_SIG_ROWS) {
          n += (size_t)snprintf(out + n, len - n, ",...(%lld ranks, hash %04llx)",
                                (long long)s->nrows,
                                (unsigned long long)(s->rows_hash & 0xffff));
          break;
        }
        n += (size_t)snprintf(out + n, len - n, i ? ",%lld" : "%lld",
                              (long long)s->rows[i]);
      }
      if (n < len) snprintf(out + n, len - n, "]");
      return;
    }
    case F_DIGEST:
      snprintf(out, len, "history %04llx",
               (unsigned long long)(s->digest & 0xffff));
      return;
    default: snprintf(out, len, "root=%lld", (long long)s->root); return;
  }
}

/* "rank 2 has float32[4,5], ranks 0,1,3 have float32[4,4]": the groups of
 * ranks that agree, smallest group first. */
static void report_field(const jm_sig *all, int size, int f, char *out,
                         size_t len) {
  int *group = malloc(sizeof(int) * (size_t)size);
  int *count = calloc((size_t)size, sizeof(int));
  size_t n = 0;
  out[0] = '\0';
  if (!group || !count) {
    snprintf(out, len, "(out of memory describing the mismatch)");
    free(group);
    free(count);
    return;
  }
  int ngroups = 0;
  for (int r = 0; r < size; r++) {
    group[r] = r;
    for (int q = 0; q < r; q++)
      if (group[q] == q && same_field(&all[q], &all[r], f)) {
        group[r] = q;
        break;
      }
    if (group[r] == r) ngroups++;
    count[group[r]]++;
  }
  int shown = 0;
  for (int want = 1; want <= size && n < len; want++) {
    for (int g = 0; g < size && n < len; g++) {
      if (group[g] != g || count[g] != want) continue;
      if (shown == 6) {
        n += (size_t)snprintf(out + n, len - n, ", and %d more groups",
                              ngroups - shown);
        shown++;
        break;
      }
      if (shown > 6) break;
      n += (size_t)snprintf(out + n, len - n, "%s%s ", shown ? ", " : "",
                            want > 1 ? "ranks" : "rank");
      int listed = 0;
      for (int r = g; r < size && n < len; r++) {
        if (group[r] != g) continue;
        if (listed == 8) {
          n += (size_t)snprintf(out + n, len - n, ",...");
          break;
        }
        n += (size_t)snprintf(out + n, len - n, listed ? ",%d" : "%d", r);
        listed++;
      }
      char what[200];
      describe(&all[g], f, what, sizeof what);
      if (want > 1 && strncmp(what, "is ", 3) == 0)
        n += (size_t)snprintf(out + n, len - n, " are %s", what + 3);
      else if (want > 1 && strncmp(what, "calls ", 6) == 0)
        n += (size_t)snprintf(out + n, len - n, " call %s", what + 6);
      else if (want > 1 && strncmp(what, "passes ", 7) == 0)
        n += (size_t)snprintf(out + n, len - n, " pass %s", what + 7);
      else if (strncmp(what, "is ", 3) == 0 || strncmp(what, "calls ", 6) == 0 ||
               strncmp(what, "passes ", 7) == 0)
        n += (size_t)snprintf(out + n, len - n, " %s", what);
      else
        n += (size_t)snprintf(out + n, len - n, " %s %s",
                              want > 1 ? "have" : "has", what);
      shown++;
    }
  }
  free(group);
  free(count);
}

/* The array a rank contributes, as the op's row says (ops.h): its input,
 * or its last result (scatter's block; a start's results are its handle and
 * buffers, the block last); none for barrier. */
static const jm_buffer *payload(const jm_call *c, const jm_op_desc *desc) {
  if (desc->payload == JM_OUT) return c->nrets ? &c->ret[c->nrets - 1] : NULL;
  return c->nargs ? &c->arg[0] : NULL;
}

static XLA_FFI_Error *exchange(jm_call *c, const jm_op_desc *desc,
                               jm_shadow *sh, const jm_buffer *b, int64_t seq);
static XLA_FFI_Error *check_pairs(jm_call *c, jm_shadow *sh, int64_t seq);

XLA_FFI_Error *jm_check_collective(jm_call *c, const jm_op_desc *desc,
                                   int mode) {
  /* One rank has no one to disagree with: the default makes no shadow. */
  if (mode == JM_CHECK_SPARSE && c->size == 1) return NULL;
  jm_shadow *sh = jm_shadow_cached(c->comm);
  if (!sh) {
    XLA_FFI_Error *err = jm_call_shadow(c, "JAXMPI_CHECK", &sh);
    if (err) return err;
  }
  const jm_buffer *b = payload(c, desc);
  const int64_t seq = ++sh->seq;
  if (mode == JM_CHECK_SPARSE && !jm_check_scheduled(seq)) {
    if (!sh->digest_since) sh->digest_since = seq;
    sh->digest = fold_call(sh->digest, c, desc, b);
    return NULL;
  }
  return exchange(c, desc, sh, b, seq);
}

/* The checked call: the signatures' exchange and the report. Out of line,
 * so that the unchecked path above keeps a small stack frame (callgrind:
 * 113 instructions of this file per unchecked call inlined, 103 apart). */
static __attribute__((noinline)) XLA_FFI_Error *exchange(
    jm_call *c, const jm_op_desc *desc, jm_shadow *sh, const jm_buffer *b,
    int64_t seq) {
  jm_sig mine;
  memset(&mine, 0, sizeof mine);
  snprintf(mine.op, sizeof mine.op, "%s", desc->name);
  if (desc->attrs & JM_A(op)) op_name(c->op, mine.redop, sizeof mine.redop);
  mine.seq = seq;
  mine.dtype = -1;
  if (b) {
    mine.dtype = b->dtype;
    mine.ndim = b->ndim;
    mine.count = b->count;
    for (int64_t d = 0; d < b->ndim && d < JM_SIG_DIMS; d++)
      mine.dims[d] = b->dims[d];
    if (varies_by_rank(desc) && b->ndim > 0) {
      mine.dims[0] = -1;
      mine.count = 1;
      for (int64_t d = 1; d < b->ndim; d++) mine.count *= b->dims[d];
    }
  }
  if (desc->attrs & JM_A(counts)) {
    mine.rows_hash = rows_hash(c);
    mine.nrows = c->nrows[JM_ROWS_COUNTS];
    for (int i = 0; i < mine.nrows && i < JM_SIG_ROWS; i++)
      mine.rows[i] = jm_rows(c, JM_ROWS_COUNTS, i);
  }
  mine.root = (desc->attrs & JM_A(root)) ? c->root : -1;
  mine.digest = sh->digest;
  mine.since = sh->digest_since;
  sh->digest = 0;
  sh->digest_since = 0;

  /* Everyone's signatures, then ours: one block, which a timed-out
   * exchange leaves allocated (MPI may still read and write it). */
  jm_sig *all = malloc(sizeof(jm_sig) * ((size_t)c->size + 1));
  if (!all)
    return jm_error(c, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED, "out of memory");
  all[c->size] = mine;
  jm_Request rq;
  int rc = jm_mpi.Iallgather(&all[c->size], (int)sizeof mine, jm_const.byte,
                             all, (int)sizeof mine, jm_const.byte, sh->dup,
                             &rq);
  if (!rc) rc = jm_wait(&rq, NULL, 0);
  if (rc) {
    if (rc != JM_ERR_TIMEOUT) free(all);
    return jm_mpi_failure(c, "MPI_Allgather (JAXMPI_CHECK)", NULL, 0, rc);
  }
  char msg[1200];
  size_t n = 0;
  msg[0] = '\0';
  int op_differs = 0;
  for (int f = 0; f < F_COUNT; f++) {
    int agree = 1;
    for (int r = 1; r < c->size && agree; r++)
      agree = same_field(&all[0], &all[r], f);
    if (agree) continue;
    /* Ranks calling different ops differ in root and reduction op too:
     * report the op, and the array only if it also differs. */
    if (f == F_OP) op_differs = 1;
    if (op_differs && (f == F_REDOP || f == F_ROOT || f == F_ROWS)) continue;
    char part[900];
    report_field(all, c->size, f, part, sizeof part);
    n += (size_t)snprintf(msg + n, sizeof msg - n, "%s%s: %s", n ? "; " : "",
                          field_names[f], part);
    if (n >= sizeof msg) break;
  }
  int history_agrees = 1;
  for (int r = 1; r < c->size && history_agrees; r++)
    history_agrees = same_field(&all[0], &all[r], F_DIGEST);
  if (!history_agrees && n < sizeof msg) {
    /* Call numbers agree here (else reported above): so do the bounds. */
    int64_t since = mine.since;
    for (int r = 0; r < c->size; r++)
      if (all[r].since && (!since || all[r].since < since)) since = all[r].since;
    char part[900];
    report_field(all, c->size, F_DIGEST, part, sizeof part);
    if (since)
      n += (size_t)snprintf(
          msg + n, sizeof msg - n,
          "%san earlier call, one of #%lld to #%lld, differed (not checked "
          "one by one by default; MPI may have given wrong results there, "
          "rerun with JAXMPI_CHECK=1 to name it): %s",
          n ? "; " : "", (long long)since, (long long)(seq - 1), part);
  }
  free(all);
  if (!msg[0] && (desc->attrs & JM_A(sendcounts)))
    return check_pairs(c, sh, seq);
  if (!msg[0]) return NULL;
  return jm_error(c, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                  "collective call #%lld on this communicator differs across "
                  "ranks (JAXMPI_CHECK): %s",
                  (long long)mine.seq, msg);
}

/* ---- alltoallv: each pair's counts --------------------------------------
 * Rank i's sendcounts[j] must equal rank j's recvcounts[i]. Once the
 * signatures agree (every rank is in this alltoallv), each rank sends its
 * sendcounts[j] to rank j (MPI_Alltoall on the shadow), compares what it
 * got with its recvcounts, and the ranks allgather what they found, so that
 * a mismatch is an error on every rank, naming both sides. */

typedef struct jm_pair_report {
  int64_t nbad;     /* peers whose count disagrees with this rank's */
  int64_t peer;     /* the first of them */
  int64_t sent;     /* the peer's sendcounts[this rank] */
  int64_t expected; /* this rank's recvcounts[peer] */
} jm_pair_report;

static __attribute__((noinline)) XLA_FFI_Error *check_pairs(jm_call *c,
                                                             jm_shadow *sh,
                                                             int64_t seq) {
  const size_t n = (size_t)c->size;
  /* One block (a timed-out exchange leaves it allocated): what this rank
   * sends, what it receives, the reports. */
  char *block = malloc(2 * n * sizeof(int64_t) + (n + 1) * sizeof(jm_pair_report));
  if (!block)
    return jm_error(c, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED, "out of memory");
  int64_t *out = (int64_t *)block, *in = out + n;
  jm_pair_report *all = (jm_pair_report *)(in + n), *mine = all + n;
  for (int j = 0; j < c->size; j++) out[j] = jm_rows(c, JM_ROWS_SEND, j);
  jm_Request rq;
  int rc = jm_mpi.Ialltoall(out, (int)sizeof(int64_t), jm_const.byte, in,
                            (int)sizeof(int64_t), jm_const.byte, sh->dup, &rq);
  if (!rc) rc = jm_wait(&rq, NULL, 0);
  if (!rc) {
    memset(mine, 0, sizeof *mine);
    for (int i = 0; i < c->size; i++) {
      const int64_t want = jm_rows(c, JM_ROWS_RECV, i);
      if (in[i] == want) continue;
      if (!mine->nbad++) {
        mine->peer = i;
        mine->sent = in[i];
        mine->expected = want;
      }
    }
    rc = jm_mpi.Iallgather(mine, (int)sizeof *mine, jm_const.byte, all,
                           (int)sizeof *mine, jm_const.byte, sh->dup, &rq);
    if (!rc) rc = jm_wait(&rq, NULL, 0);
  }
  if (rc) {
    if (rc != JM_ERR_TIMEOUT) free(block);
    return jm_mpi_failure(c, "MPI_Alltoall (JAXMPI_CHECK of alltoallv counts)",
                          NULL, 0, rc);
  }
  char msg[1200];
  size_t len = 0;
  int shown = 0, nranks = 0;
  msg[0] = '\0';
  for (int r = 0; r < c->size; r++) {
    if (!all[r].nbad) continue;
    nranks++;
    if (shown == 4 || len >= sizeof msg) continue;
    shown++;
    len += (size_t)snprintf(
        msg + len, sizeof msg - len,
        "%srank %d expects %lld rows from rank %lld (its recvcounts[%lld]=%lld) "
        "but rank %lld sends %lld (its sendcounts[%d]=%lld)%s",
        len ? "; " : "", r, (long long)all[r].expected, (long long)all[r].peer,
        (long long)all[r].peer, (long long)all[r].expected,
        (long long)all[r].peer, (long long)all[r].sent, r,
        (long long)all[r].sent,
        all[r].nbad > 1 ? " (and more peers)" : "");
  }
  if (nranks > shown && len < sizeof msg)
    snprintf(msg + len, sizeof msg - len, "; and %d more ranks",
             nranks - shown);
  free(block);
  if (!nranks) return NULL;
  return jm_error(c, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                  "collective call #%lld on this communicator differs across "
                  "ranks (JAXMPI_CHECK): the counts: %s",
                  (long long)seq, msg);
}

/* ---- point-to-point ------------------------------------------------------ */

void jm_format_array(const jm_buffer *y, char *out, size_t len) {
  jm_sig s;
  memset(&s, 0, sizeof s);
  s.dtype = y->dtype;
  s.ndim = y->ndim;
  s.count = y->count;
  for (int64_t d = 0; d < y->ndim && d < JM_SIG_DIMS; d++) s.dims[d] = y->dims[d];
  describe(&s, F_ARRAY, out, len);
}

XLA_FFI_Error *jm_check_incoming(jm_call *c, const jm_buffer *y, int source,
                                 int tag) {
  if (source == jm_const.proc_null) return NULL;
  jm_Status st;
  memset(&st, 0, sizeof st);
  /* A few polls only: a message not there yet is left to the receive, which
   * waits as the MPI waits (MPICH's MPI_Probe spins without ever yielding
   * the core, which ranks sharing cores pay for) and still fails on a size
   * mismatch, without the sender's size when the message is larger. */
  int found = 0;
  for (int polls = 0; polls < JM_PROBE_POLLS && !found; polls++) {
    int rc = jm_mpi.Iprobe(source, tag, c->comm, &found, &st);
    if (rc) return jm_mpi_failure(c, "MPI_Iprobe (JAXMPI_CHECK)", "source", source, rc);
  }
  if (!found) return NULL;
  int64_t got = jm_received_bytes(&st);
  int64_t want = y->count * (int64_t)y->elsize;
  if (got < 0 || got == want) return NULL;
  /* Take the message off the queue so that the sender completes and later
   * messages still match, then report. */
  void *tmp = malloc(got ? (size_t)got : 1);
  if (!tmp)
    return jm_error(c, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED, "out of memory");
  jm_Status st2;
  int rc = jm_Recv(tmp, got, 1, jm_const.byte, st.MPI_SOURCE, st.MPI_TAG, c->comm,
               &st2);
  free(tmp);
  char expect[160];
  jm_format_array(y, expect, sizeof expect);
  const char *name = jm_dtypes[y->dtype].name;
  char elems[120] = "";
  if (got % (int64_t)y->elsize == 0)
    snprintf(elems, sizeof elems, " (%lld %s elements)",
             (long long)(got / (int64_t)y->elsize), name);
  else
    snprintf(elems, sizeof elems, " (not a whole number of %s elements)",
             name);
  return jm_error(c, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                  "rank %d expects %s (%lld bytes) but the message from rank "
                  "%d with tag %d has %lld bytes%s: the sender's shape or "
                  "dtype differs (JAXMPI_CHECK; the message was %s)",
                  c->rank, expect, (long long)want, st.MPI_SOURCE, st.MPI_TAG,
                  (long long)got, elems,
                  rc ? "not received" : "received and discarded");
}

XLA_FFI_Error *jm_check_received(jm_call *c, const jm_buffer *y,
                                 const jm_Status *st) {
  if (st->MPI_SOURCE == jm_const.proc_null) { /* nothing arrives: zeros */
    if (c->status) *c->status = *st;
    return jm_zero(c, y->data, (size_t)y->count * y->elsize);
  }
  int64_t got = jm_received_bytes(st);
  int64_t want = y->count * (int64_t)y->elsize;
  if (got >= 0 && got != want)
    return jm_error(c, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                    "rank %d received %lld bytes from rank %d (tag %d) but "
                    "expected %lld elements of %s (%lld bytes): the sender's "
                    "shape or dtype differs",
                    c->rank, (long long)got, st->MPI_SOURCE, st->MPI_TAG,
                    (long long)y->count, jm_dtypes[y->dtype].name,
                    (long long)want);
  if (c->status) *c->status = *st;
  return NULL;
}
