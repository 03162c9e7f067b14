/* The flight recorder's reading side: see record_read.h. */
#define _GNU_SOURCE
#include "record_read.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ring_read.h"

/* ---- describing calls -------------------------------------------------------- */

static const char *site_of(const jm_ring *r, int64_t id) {
  for (int i = 0; id && i < r->ns; i++)
    if (r->sites[i].id == id) return r->sites[i].text;
  return NULL;
}

/* "file.py:12 (fn)" -> "file.py:12 in fn". */
static void site_words(char *out, size_t len, const char *text) {
  const char *open = strrchr(text, '(');
  size_t n = strlen(text);
  if (open && open > text + 1 && open[-1] == ' ' && n && text[n - 1] == ')')
    snprintf(out, len, "%.*s in %.*s", (int)(open - 1 - text), text,
             (int)(text + n - 1 - (open + 1)), open + 1);
  else
    snprintf(out, len, "%s", text);
}

static const int32_t *members_of(const jm_rings *rs, uint64_t key, int *n,
                                 int *size) {
  *n = 0;
  *size = 0;
  for (int q = 0; q < rs->size; q++) {
    const jm_ring *r = &rs->r[q];
    for (int i = 0; r->present && i < r->nc; i++) {
      if (r->comms[i].key != key) continue;
      *size = r->comms[i].size;
      if (r->comms[i].nmembers) {
        *n = r->comms[i].nmembers;
        return r->members[i];
      }
    }
  }
  return NULL;
}

/* A communicator rank's COMM_WORLD rank (-1 unknown). */
static int world_of(const jm_rings *rs, uint64_t key, int rank) {
  int n, size;
  const int32_t *m = members_of(rs, key, &n, &size);
  return m && rank >= 0 && rank < n ? m[rank] : -1;
}

static int stuck(const jm_ring_entry *e) {
  return e->state == JM_REC_WAITING || e->state == JM_REC_TIMEOUT;
}

/* The op a collective entry stands for: a wait's is its start's. */
static const char *coll_name(const jm_ring_entry *e) {
  return (e->flags & JM_REC_WAIT) && e->kind[0] ? e->kind : e->op;
}

static double secs(int64_t ns) { return (double)ns / 1e9; }

static void describe_peer(jm_text *t, const jm_rings *rs,
                          const jm_ring_entry *e, int peer, const char *word) {
  if (peer == JM_REC_NONE) return;
  if (peer == JM_REC_ANY) {
    jm_tprintf(t, " %s any rank", word);
    return;
  }
  if (peer == JM_REC_SEVERAL) {
    jm_tprintf(t, " %s several ranks", word);
    return;
  }
  const int w = world_of(rs, e->comm, peer);
  if (w >= 0 && w != peer)
    jm_tprintf(t, " %s rank %d (rank %d of its communicator)", word, w, peer);
  else
    jm_tprintf(t, " %s rank %d", word, w >= 0 ? w : peer);
}

/* "allreduce #7 (x.py:3 in f)", "recv #2 from rank 0, tag 5 (...)",
 * "the wait of iallreduce #7", "MPI_Allreduce #4 (XLA's all-reduce)";
 * then the state: " (done)", " (waiting for 5.0 s)", ... */
static void describe(jm_text *t, const jm_rings *rs, const jm_ring *r,
                     const jm_ring_entry *e, int with_state) {
  const int p2p = (e->flags & JM_REC_P2P) != 0;
  if (e->flags & JM_REC_WAIT)
    jm_tprintf(t, "the wait of %s #%lld", e->kind[0] ? e->kind : "a request",
            (long long)e->seq);
  else
    jm_tprintf(t, "%s #%lld", e->op, (long long)e->seq);
  if (p2p) {
    const int is_send = strstr(coll_name(e), "send") != NULL &&
                        strstr(coll_name(e), "sendrecv") == NULL;
    if (e->peer2 != JM_REC_NONE && !is_send) {
      describe_peer(t, rs, e, e->peer, "from");
      describe_peer(t, rs, e, e->peer2, " to");
    } else {
      describe_peer(t, rs, e, e->peer, is_send ? "to" : "from");
    }
    if (e->tag >= 0) jm_tprintf(t, ", tag %d", e->tag);
  } else if (e->peer >= 0 && !(e->flags & JM_REC_NATIVE)) {
    jm_tprintf(t, ", root %d", e->peer);
  }
  if (e->flags & JM_REC_NATIVE && e->kind[0])
    jm_tprintf(t, " (XLA's %s)", e->kind);
  if (e->position >= 0) jm_tprintf(t, " on device position %d", e->position);
  char where[240];
  const char *site = site_of(r, e->site);
  if (site) {
    site_words(where, sizeof where, site);
    jm_tprintf(t, " (%s)", where);
  }
  if (!with_state) return;
  const int64_t dump = r->h.dump_ns;
  switch (e->state) {
    case JM_REC_WAITING:
      jm_tprintf(t, " (waiting for %.1f s)", secs(dump - e->begin_ns));
      break;
    case JM_REC_TIMEOUT:
      jm_tprintf(t, " (timed out after %.1f s)",
              secs((e->end_ns ? e->end_ns : dump) - e->begin_ns));
      break;
    case JM_REC_FAILED: jm_tprintf(t, " (failed)"); break;
    default: jm_tprintf(t, " (done)"); break;
  }
}

/* "rank 3", "ranks 0-2", "ranks 0,2,5-7" of a sorted list. */
static void describe_ranks(jm_text *t, const int *ranks, int n) {
  jm_tprintf(t, n == 1 ? "rank " : "ranks ");
  for (int i = 0; i < n;) {
    int j = i;
    while (j + 1 < n && ranks[j + 1] == ranks[j] + 1) j++;
    if (i) jm_tprintf(t, ",");
    if (j == i) jm_tprintf(t, "%d", ranks[i]);
    else jm_tprintf(t, "%d-%d", ranks[i], ranks[j]);
    i = j + 1;
  }
}

static const jm_ring_entry *last_call(const jm_ring *r) {
  const jm_ring_entry *best = NULL;
  for (int i = 0; i < r->ne; i++)
    if (!best || r->e[i].number > best->number) best = &r->e[i];
  return best;
}

static void describe_last(jm_text *t, const jm_rings *rs, const jm_ring *r) {
  const jm_ring_entry *e = last_call(r);
  if (!e) {
    jm_tprintf(t, "it had made no jaxmpi call");
    return;
  }
  if (stuck(e)) {
    jm_tprintf(t, "it waits in ");
    describe(t, rs, r, e, 1);
    return;
  }
  jm_tprintf(t, "its last call was ");
  describe(t, rs, r, e, 1);
}

/* ---- the verdict ------------------------------------------------------------- */

typedef struct jm_member {
  int rank;
  const jm_ring_entry *e;
} jm_member;

typedef struct jm_group {
  uint64_t comm;
  int64_t seq;
  int n;
  jm_member *in; /* ranks stuck in the group's call (any op) */
} jm_group;

static int cmp_int(const void *a, const void *b) {
  return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

/* The rank's call (blocking or start) numbered seq on comm, or NULL; and
 * its wait (for a start), or NULL. */
static const jm_ring_entry *call_at(const jm_ring *r, uint64_t comm,
                                    int64_t seq, const jm_ring_entry **wait) {
  const jm_ring_entry *found = NULL;
  *wait = NULL;
  for (int i = 0; i < r->ne; i++) {
    const jm_ring_entry *e = &r->e[i];
    if (e->comm == comm && e->seq == seq && (e->flags & JM_REC_COLLECTIVE) &&
        !(e->flags & JM_REC_WAIT))
      found = e;
  }
  for (int i = 0; found && i < r->ne; i++)
    if ((r->e[i].flags & JM_REC_WAIT) && r->e[i].link == found->number)
      *wait = &r->e[i];
  return found;
}

static int64_t max_seq(const jm_ring *r, uint64_t comm) {
  int64_t m = 0;
  for (int i = 0; i < r->ne; i++)
    if (r->e[i].comm == comm && (r->e[i].flags & JM_REC_COLLECTIVE) &&
        r->e[i].seq > m)
      m = r->e[i].seq;
  return m;
}

/* Whether the ring still holds calls as old as number `seq` on comm could be
 * (it did not wrap past them). */
static int ring_complete(const jm_ring *r) {
  return r->ne && r->e[0].number == 1;
}

/* "rank q calls|called OP where ranks ... call WHAT: the ranks disagree
 * ...": rank q of a collective's group is in another op, `e`. */
static void say_disagree(jm_text *t, const jm_rings *rs, int q,
                         const jm_ring_entry *e, int full, const char *verb,
                         const int *waiting, int nwaiting, const char *what) {
  jm_text other = {0};
  describe(&other, rs, &rs->r[q], e, full);
  jm_tprintf(t, "rank %d %s %s where ", q, verb, other.p ? other.p : "?");
  describe_ranks(t, waiting, nwaiting);
  jm_tprintf(t, " call%s %s: the ranks disagree on the order of collective "
             "calls on this communicator.",
          nwaiting == 1 ? "s" : "", what ? what : "?");
  free(other.p);
}

/* One group's sentences. Returns 1 if it named a rank that is not in the
 * call (a cause), 0 if every member is in it. */
static int explain_group(jm_text *t, const jm_rings *rs, const jm_group *g,
                         const char *dir, char *described) {
  /* The op most of the stuck ranks call (ties: the lowest rank's). */
  const char *expected = coll_name(g->in[0].e);
  int best = 0;
  for (int i = 0; i < g->n; i++) {
    int k = 0;
    for (int j = 0; j < g->n; j++)
      k += strcmp(coll_name(g->in[i].e), coll_name(g->in[j].e)) == 0;
    if (k > best) {
      best = k;
      expected = coll_name(g->in[i].e);
    }
  }
  int *waiting = malloc(sizeof(int) * (size_t)(g->n + 1));
  int nwaiting = 0;
  const jm_member *example = NULL;
  for (int i = 0; i < g->n; i++)
    if (strcmp(coll_name(g->in[i].e), expected) == 0) {
      waiting[nwaiting++] = g->in[i].rank;
      if (!example) example = &g->in[i];
    }
  qsort(waiting, (size_t)nwaiting, sizeof *waiting, cmp_int);
  jm_text what = {0};
  const jm_ring *er = &rs->r[example->rank];
  jm_ring_entry shown = *example->e;
  if (shown.flags & JM_REC_WAIT) {
    /* Name the collective, not its wait. */
    snprintf(shown.op, sizeof shown.op, "%s", shown.kind);
    shown.flags &= ~(unsigned)JM_REC_WAIT;
  }
  describe(&what, rs, er, &shown, 0);
  int nmembers, size;
  const int32_t *members = members_of(rs, g->comm, &nmembers, &size);
  int causes = 0;
  /* Ranks in it with another op. */
  for (int i = 0; i < g->n; i++) {
    if (strcmp(coll_name(g->in[i].e), expected) == 0) continue;
    jm_tprintf(t, "%s", causes ? " " : "");
    say_disagree(t, rs, g->in[i].rank, g->in[i].e, 0, "calls", waiting,
                 nwaiting, what.p);
    causes++;
  }
  /* Members that are not in it. */
  for (int m = 0; members && m < nmembers; m++) {
    const int q = members[m];
    int in = 0;
    for (int i = 0; i < g->n && !in; i++) in = g->in[i].rank == q;
    if (in || q < 0 || q >= rs->size) continue;
    const jm_ring *r = &rs->r[q];
    jm_tprintf(t, "%s", causes ? " " : "");
    if (!r->present) {
      jm_tprintf(t, "rank %d never entered %s that ", q, what.p ? what.p : "?");
      describe_ranks(t, waiting, nwaiting);
      jm_tprintf(t, " wait%s in, as far as the rings show: it wrote no ring to "
                 "%s (it is dead, or busy outside jaxmpi on a host where no "
                 "signal reached it).",
              nwaiting == 1 ? "s" : "", dir);
      causes++;
      continue;
    }
    const jm_ring_entry *wait;
    const jm_ring_entry *e = call_at(r, g->comm, g->seq, &wait);
    if (e && strcmp(e->op, expected) != 0 &&
        !((wait && strcmp(coll_name(wait), expected) == 0))) {
      say_disagree(t, rs, q, e, 1, "called", waiting, nwaiting, what.p);
      causes++;
    } else if (e && (e->flags & JM_REC_START) && !wait) {
      jm_tprintf(t, "rank %d started %s but has not waited for it; ", q,
              what.p ? what.p : "?");
      describe_last(t, rs, r);
      described[q] = 1;
      jm_tprintf(t, ".");
      causes++;
    } else if (e) {
      /* Done or failed here while the others wait (a rooted collective may
       * complete on some ranks first). */
      const jm_ring_entry *x = wait ? wait : e;
      jm_tprintf(t, "rank %d %s %s; ", q,
              x->state == JM_REC_DONE ? "completed" : "failed in",
              what.p ? what.p : "?");
      describe_last(t, rs, r);
      described[q] = 1;
      jm_tprintf(t, ".");
    } else if (max_seq(r, g->comm) > g->seq ||
               (!ring_complete(r) && max_seq(r, g->comm) == 0)) {
      jm_tprintf(t, "rank %d is past %s (its ring no longer holds it); ", q,
              what.p ? what.p : "?");
      describe_last(t, rs, r);
      described[q] = 1;
      jm_tprintf(t, ".");
    } else {
      jm_tprintf(t, "rank %d never entered %s that ", q, what.p ? what.p : "?");
      describe_ranks(t, waiting, nwaiting);
      jm_tprintf(t, " wait%s in; ", nwaiting == 1 ? "s" : "");
      describe_last(t, rs, r);
      described[q] = 1;
      jm_tprintf(t, ".");
      causes++;
    }
  }
  if (!causes) {
    describe_ranks(t, waiting, nwaiting);
    jm_tprintf(t, " wait%s in %s", nwaiting == 1 ? "s" : "", what.p ? what.p : "?");
    if (members && nwaiting == nmembers)
      jm_tprintf(t, ", which every member of its communicator entered (a hang "
                 "inside MPI, or a failed process, link or device)");
    else if (!members)
      jm_tprintf(t, " on a communicator of %d ranks whose members the rings do "
                 "not name",
              size);
    jm_tprintf(t, ".");
  }
  free(what.p);
  free(waiting);
  return causes > 0;
}

static int cmp_group(const void *a, const void *b) {
  const jm_group *x = a, *y = b;
  if (x->n != y->n) return y->n - x->n;
  return (x->seq > y->seq) - (x->seq < y->seq);
}

/* The verdict's sentences, for the rings in rs (dir names the directory). */
static void verdict_sentences(jm_text *t, const jm_rings *rs, const char *dir);

static void verdict(jm_text *t, const jm_rings *rs, const char *dir) {
  const size_t from = t->n;
  verdict_sentences(t, rs, dir);
  /* Each sentence begins with a capital. */
  for (size_t i = from; t->p && i < t->n; i++)
    if ((i == from || (i >= 2 && t->p[i - 2] == '.' && t->p[i - 1] == ' ')) &&
        t->p[i] >= 'a' && t->p[i] <= 'z')
      t->p[i] = (char)(t->p[i] - 'a' + 'A');
}

static void verdict_sentences(jm_text *t, const jm_rings *rs,
                              const char *dir) {
  jm_group *groups = NULL;
  int ngroups = 0, cap = 0;
  for (int q = 0; q < rs->size; q++) {
    const jm_ring *r = &rs->r[q];
    for (int i = 0; r->present && i < r->ne; i++) {
      const jm_ring_entry *e = &r->e[i];
      if (!stuck(e) || !(e->flags & JM_REC_COLLECTIVE) || !e->comm) continue;
      int g = 0;
      while (g < ngroups && !(groups[g].comm == e->comm && groups[g].seq == e->seq))
        g++;
      if (g == ngroups) {
        if (ngroups == cap) {
          cap = cap ? cap * 2 : 8;
          jm_group *p = realloc(groups, sizeof *groups * (size_t)cap);
          if (!p) break;
          groups = p;
        }
        groups[g].comm = e->comm;
        groups[g].seq = e->seq;
        groups[g].n = 0;
        groups[g].in = calloc((size_t)rs->size, sizeof(jm_member));
        ngroups++;
      }
      int dup = 0;
      for (int k = 0; k < groups[g].n; k++)
        if (groups[g].in[k].rank == q) {
          dup = 1;
          /* A start's entry and its wait: the wait says more. */
          if (e->flags & JM_REC_WAIT) groups[g].in[k].e = e;
        }
      if (!dup && groups[g].in)
        groups[g].in[groups[g].n++] = (jm_member){q, e};
    }
  }
  /* (groups is NULL where no entry is open: qsort's pointer must not be,
   * even for no elements; UBSan) */
  if (ngroups > 1) qsort(groups, (size_t)ngroups, sizeof *groups, cmp_group);
  int said = 0;
  /* Ranks whose stuck call a sentence already named. */
  char *described = calloc((size_t)rs->size + 1, 1);
  if (!described) ngroups = 0;
  for (int g = 0; g < ngroups; g++) {
    if (!groups[g].in || !groups[g].n) continue;
    if (said) jm_tprintf(t, " ");
    explain_group(t, rs, &groups[g], dir, described);
    said++;
  }
  /* Point-to-point calls in flight. */
  for (int q = 0; q < rs->size; q++) {
    const jm_ring *r = &rs->r[q];
    for (int i = 0; r->present && i < r->ne; i++) {
      const jm_ring_entry *e = &r->e[i];
      if (!stuck(e) || !(e->flags & JM_REC_P2P) || !described || described[q])
        continue;
      jm_tprintf(t, "%srank %d waits in ", said ? " " : "", q);
      describe(t, rs, r, e, 1);
      const int p = e->peer >= 0 ? world_of(rs, e->comm, e->peer) : -1;
      if (p >= 0 && p < rs->size && p != q) {
        if (!rs->r[p].present) {
          jm_tprintf(t, "; rank %d wrote no ring to %s (it is dead, or busy "
                     "outside jaxmpi on a host where no signal reached it)",
                  p, dir);
        } else {
          jm_tprintf(t, "; rank %d: ", p);
          describe_last(t, rs, &rs->r[p]);
        }
      }
      jm_tprintf(t, ".");
      said++;
    }
  }
  /* Failures. */
  for (int q = 0; q < rs->size; q++) {
    const jm_ring *r = &rs->r[q];
    const jm_ring_entry *e = r->present ? last_call(r) : NULL;
    if (!e || e->state != JM_REC_FAILED) continue;
    jm_tprintf(t, "%srank %d's last call failed: ", said ? " " : "", q);
    describe(t, rs, r, e, 0);
    if (r->h.why[0]) jm_tprintf(t, " (%s)", r->h.why);
    jm_tprintf(t, ".");
    said++;
  }
  if (!said) {
    jm_tprintf(t, "No rank waits in a jaxmpi call: each ring ends with calls "
               "that completed.");
  }
  int missing = 0;
  for (int q = 0; q < rs->size; q++) missing += !rs->r[q].present;
  if (missing && missing < rs->size) {
    int *m = malloc(sizeof(int) * (size_t)missing);
    int k = 0;
    for (int q = 0; m && q < rs->size; q++)
      if (!rs->r[q].present) m[k++] = q;
    if (m) {
      jm_tprintf(t, " No ring from ");
      describe_ranks(t, m, k);
      jm_tprintf(t, ".");
    }
    free(m);
  }
  for (int g = 0; g < ngroups; g++) free(groups[g].in);
  free(groups);
  free(described);
}

static const char *reason_name(const jm_ring_header *h) {
  switch (h->reason) {
    case JM_DUMP_TIMEOUT: return "on its watchdog's timeout";
    case JM_DUMP_ERROR: return "on an MPI error";
    case JM_DUMP_SIGNAL: return "on a fatal signal";
    default: return h->signal ? "on SIGUSR1" : "when asked";
  }
}

/* Each rank's last `detail` calls (-1: all). */
static void details(jm_text *t, const jm_rings *rs, int detail) {
  for (int q = 0; q < rs->size; q++) {
    const jm_ring *r = &rs->r[q];
    if (!r->present) {
      jm_tprintf(t, "\nrank %d: no ring\n", q);
      continue;
    }
    jm_tprintf(t, "\nrank %d (%s, pid %d): ring written %s", q, r->h.host,
            r->h.head.pid, reason_name(&r->h));
    if (r->h.signal && r->h.reason == JM_DUMP_SIGNAL)
      jm_tprintf(t, " %d", r->h.signal);
    jm_tprintf(t, ", %lld calls since the start, the last %d kept%s%s\n",
            (long long)r->h.calls, r->ne, r->h.why[0] ? ": " : "",
            r->h.why);
    const int from = detail < 0 || detail >= r->ne ? 0 : r->ne - detail;
    for (int i = from; i < r->ne; i++) {
      const jm_ring_entry *e = &r->e[i];
      jm_tprintf(t, "  %8lld  %+10.6f s  ", (long long)e->number,
              secs(e->begin_ns - r->h.dump_ns));
      describe(t, rs, r, e, 1);
      if (e->bytes > 0 || e->dtype[0])
        jm_tprintf(t, ", %lld B%s%s", (long long)e->bytes, e->dtype[0] ? " " : "",
                e->dtype);
      if (e->end_ns && e->state != JM_REC_WAITING)
        jm_tprintf(t, ", %.1f us", (double)(e->end_ns - e->begin_ns) / 1e3);
      jm_tprintf(t, "\n");
    }
  }
}

int jaxmpi_record_report(const char *dir, double grace, int detail, int fd) {
  jm_rings rs;
  jm_rings_wait(dir, 0, grace, 0, &rs);
  jm_text t = {0};
  if (!rs.count) {
    jm_tprintf(&t, "jaxmpi: no ring in %s (rank-<r>.ring files are written on a "
                "watchdog timeout, an MPI error, a fatal signal or SIGUSR1)\n",
            dir);
    jm_write_all(fd, t.p ? t.p : "", t.n);
    free(t.p);
    jm_rings_free(&rs);
    return -1;
  }
  verdict(&t, &rs, dir);
  jm_tprintf(&t, "\n");
  if (detail) details(&t, &rs, detail);
  jm_write_all(fd, t.p ? t.p : "", t.n);
  free(t.p);
  const int n = rs.count;
  jm_rings_free(&rs);
  return n;
}

/* ---- JSON ------------------------------------------------------------------ */

static void json_flags(jm_text *t, int flags) {
  static const char *const names[] = {"collective", "p2p", "start", "wait",
                                      "native", "eager"};
  jm_tprintf(t, "[");
  int k = 0;
  for (int i = 0; i < 6; i++)
    if (flags & (1 << i)) jm_tprintf(t, "%s\"%s\"", k++ ? "," : "", names[i]);
  jm_tprintf(t, "]");
}

int jaxmpi_record_json(const char *dir, int fd) {
  jm_rings rs;
  jm_rings_read(dir, 0, &rs);
  jm_text t = {0};
  jm_tprintf(&t, "{\"dir\":");
  jm_json_str(&t, dir);
  jm_tprintf(&t, ",\"size\":%d,\"rings\":[", rs.size);
  int first = 1;
  for (int q = 0; q < rs.size; q++) {
    const jm_ring *r = &rs.r[q];
    if (!r->present) continue;
    jm_tprintf(&t, "%s\n{\"rank\":%d,\"size\":%d,\"pid\":%d,\"host\":",
            first ? "" : ",", q, r->h.head.size, r->h.head.pid);
    first = 0;
    jm_json_str(&t, r->h.host);
    jm_tprintf(&t, ",\"reason\":%d,\"signal\":%d,\"why\":", r->h.reason,
            r->h.signal);
    jm_json_str(&t, r->h.why);
    jm_tprintf(&t, ",\"calls\":%lld,\"capacity\":%d,\"cause\":%lld,"
                "\"dump_ns\":%lld,\"dump_real_ns\":%lld,\"entries\":[",
            (long long)r->h.calls, r->h.capacity, (long long)r->h.cause,
            (long long)r->h.dump_ns, (long long)r->h.dump_real_ns);
    for (int i = 0; i < r->ne; i++) {
      const jm_ring_entry *e = &r->e[i];
      jm_tprintf(&t, "%s\n {\"number\":%lld,\"op\":", i ? "," : "",
              (long long)e->number);
      jm_json_str(&t, e->op);
      jm_tprintf(&t, ",\"kind\":");
      jm_json_str(&t, e->kind);
      jm_tprintf(&t, ",\"dtype\":");
      jm_json_str(&t, e->dtype);
      jm_tprintf(&t, ",\"flags\":");
      json_flags(&t, e->flags);
      jm_tprintf(&t, ",\"state\":\"%s\",\"seq\":%lld,\"comm\":\"%016llx\","
                  "\"comm_size\":%d,\"comm_rank\":%d,\"position\":%d,"
                  "\"peer\":%d,\"peer2\":%d,\"tag\":%d,\"bytes\":%lld,"
                  "\"link\":%lld,\"begin_ns\":%lld,\"end_ns\":%lld,\"site\":",
              jm_state_name(e->state), (long long)e->seq,
              (unsigned long long)e->comm, e->comm_size, e->comm_rank,
              e->position, e->peer, e->peer2, e->tag, (long long)e->bytes,
              (long long)e->link, (long long)e->begin_ns,
              (long long)e->end_ns);
      const char *site = site_of(r, e->site);
      jm_json_str(&t, site ? site : "");
      jm_tprintf(&t, "}");
    }
    jm_tprintf(&t, "],\"comms\":[");
    for (int i = 0; i < r->nc; i++) {
      jm_tprintf(&t, "%s{\"key\":\"%016llx\",\"size\":%d,\"rank\":%d,"
                  "\"members\":[",
              i ? "," : "", (unsigned long long)r->comms[i].key,
              r->comms[i].size, r->comms[i].rank);
      for (int k = 0; k < r->comms[i].nmembers; k++)
        jm_tprintf(&t, "%s%d", k ? "," : "", r->members[i][k]);
      jm_tprintf(&t, "]}");
    }
    jm_tprintf(&t, "]}");
  }
  jm_tprintf(&t, "]}\n");
  jm_write_all(fd, t.p ? t.p : "", t.n);
  free(t.p);
  const int n = rs.count;
  jm_rings_free(&rs);
  return n;
}

/* ---- the watchdog's and the MPI errors' side ---------------------------------- */

void jm_record_failure(jm_record_ref ref, const char *fn, const char *mpimsg) {
  if (!ref.number) return;
  jm_record_end(ref, JM_REC_FAILED);
  char why[512];
  snprintf(why, sizeof why, "%s failed: %s", fn, mpimsg);
  (void)jm_record_dump(JM_DUMP_ERROR, ref.number, why);
}

int jm_record_timeout(jm_record_ref ref, const char *fn, char *out,
                      size_t len) {
  if (len) out[0] = '\0';
  if (!ref.number || !jm_record_dir()[0]) return 0;
  jm_record_end(ref, JM_REC_TIMEOUT);
  char why[512];
  snprintf(why, sizeof why, "%s timed out (JAXMPI_TIMEOUT)", fn);
  const char *dir = jm_record_dir();
  if (jm_record_dump(JM_DUMP_TIMEOUT, ref.number, why)) {
    snprintf(out, len, "The flight recorder could not write this rank's "
                       "ring to %s: %s.", dir, strerror(errno));
    return 0;
  }
  jm_record_ask_peers();
  /* Rings written since this rank's call began are about this hang. */
  jm_rings own;
  char path[1200];
  snprintf(path, sizeof path, "%s/rank-%d.ring", dir, jm_record_world_rank());
  jm_ring me;
  int64_t since = 0;
  if (jm_ring_load(path, &me) == 0) {
    for (int i = 0; i < me.ne; i++)
      if (me.e[i].number == ref.number)
        since = me.h.dump_real_ns - (me.h.dump_ns - me.e[i].begin_ns);
    jm_ring_free(&me);
  }
  jm_rings_wait(dir, since ? since - 1000000000 : 0, jm_record_grace(),
             jm_record_world_size(), &own);
  jm_text t = {0};
  int verdict_made = 0;
  const int rank = jm_record_world_rank();
  if (own.count > 1) {
    jm_tprintf(&t, "What the flight recorder saw (the rings in %s; python -m "
                "jaxmpi.record %s for every rank's last calls): ",
            dir, dir);
    verdict(&t, &own, dir);
    verdict_made = 1;
  } else if (own.size && own.r[rank].present) {
    const jm_ring *r = &own.r[rank];
    const jm_ring_entry *e = NULL;
    for (int i = 0; i < r->ne; i++)
      if (r->e[i].number == ref.number) e = &r->e[i];
    jm_tprintf(&t, "The flight recorder (ring in %s): no other rank's ring came "
                "within %.3g s (on other hosts, unless %s is shared; "
                "`kill -USR1` mpiexec's process to ask every rank)",
            dir, jm_record_grace(), dir);
    if (e) {
      jm_tprintf(&t, "; this rank was in ");
      describe(&t, &own, r, e, 1);
      int n, size;
      const int32_t *m = members_of(&own, e->comm, &n, &size);
      if (m && n) {
        jm_tprintf(&t, " on a communicator of ");
        int *sorted = malloc(sizeof(int) * (size_t)n);
        if (sorted) {
          for (int i = 0; i < n; i++) sorted[i] = m[i];
          qsort(sorted, (size_t)n, sizeof *sorted, cmp_int);
          describe_ranks(&t, sorted, n);
          free(sorted);
        }
      }
      const jm_ring_entry *prev = NULL;
      for (int i = 0; i < r->ne; i++)
        if (r->e[i].number < ref.number &&
            (!prev || r->e[i].number > prev->number))
          prev = &r->e[i];
      if (prev) {
        jm_tprintf(&t, "; its previous call was ");
        describe(&t, &own, r, prev, 1);
      }
    }
    jm_tprintf(&t, ".");
  }
  snprintf(out, len, "%s", t.p ? t.p : "");
  if (t.n >= len && len > 4) memcpy(out + len - 4, "...", 4);
  free(t.p);
  jm_rings_free(&own);
  return verdict_made;
}
