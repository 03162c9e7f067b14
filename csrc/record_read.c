/* The flight recorder's reading side: see record_read.h. */
#define _GNU_SOURCE
#include "record_read.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- text ------------------------------------------------------------------ */

typedef struct jm_text {
  char *p;
  size_t n, cap;
} jm_text;

static void tprintf(jm_text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void tprintf(jm_text *t, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = t->cap - t->n;
    int k = vsnprintf(t->p ? t->p + t->n : NULL, t->p ? room : 0, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if (t->p && (size_t)k < room) {
      t->n += (size_t)k;
      return;
    }
    size_t cap = t->cap ? t->cap * 2 : 4096;
    while (cap < t->n + (size_t)k + 1) cap *= 2;
    char *p = realloc(t->p, cap);
    if (!p) return;
    t->p = p;
    t->cap = cap;
  }
}

static void write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= (size_t)w;
  }
}

/* ---- rings ----------------------------------------------------------------- */

typedef struct jm_ring {
  int present;
  jm_ring_header h;
  jm_ring_entry *e;
  int ne;
  jm_ring_comm *comms;
  int32_t **members;
  int nc;
  jm_ring_site *sites;
  int ns;
} jm_ring;

static void ring_free(jm_ring *r) {
  free(r->e);
  for (int i = 0; i < r->nc; i++) free(r->members[i]);
  free(r->members);
  free(r->comms);
  free(r->sites);
  memset(r, 0, sizeof *r);
}

static char *read_file(const char *path, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  char *buf = NULL;
  if (fstat(fd, &st) == 0 && st.st_size > 0 &&
      (buf = malloc((size_t)st.st_size))) {
    size_t got = 0;
    while (got < (size_t)st.st_size) {
      ssize_t k = read(fd, buf + got, (size_t)st.st_size - got);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) break;
      got += (size_t)k;
    }
    *len = got;
  }
  close(fd);
  return buf;
}

/* 0, or -1 when the file is not a ring of this build's format. */
static int ring_load(const char *path, jm_ring *r) {
  memset(r, 0, sizeof *r);
  size_t len = 0;
  char *buf = read_file(path, &len);
  if (!buf) return -1;
  size_t at = sizeof r->h;
  int ok = len >= sizeof r->h;
  if (ok) {
    memcpy(&r->h, buf, sizeof r->h);
    ok = memcmp(r->h.magic, JM_RING_MAGIC, sizeof r->h.magic) == 0 &&
         r->h.version == JM_RING_VERSION && r->h.header_size == sizeof r->h &&
         r->h.entry_size == sizeof(jm_ring_entry) &&
         r->h.site_size == sizeof(jm_ring_site) && r->h.nentries >= 0 &&
         r->h.ncomms >= 0 && r->h.nsites >= 0 && r->h.size > 0 &&
         r->h.rank >= 0 && r->h.rank < r->h.size;
  }
  if (ok && (size_t)r->h.nentries * sizeof(jm_ring_entry) > len - at) ok = 0;
  if (ok) {
    r->e = calloc((size_t)r->h.nentries + 1, sizeof *r->e);
    ok = r->e != NULL;
    for (int i = 0; ok && i < r->h.nentries; i++) {
      jm_ring_entry e;
      memcpy(&e, buf + at, sizeof e);
      at += sizeof e;
      e.op[JM_NAME_LEN - 1] = e.kind[JM_NAME_LEN - 1] = '\0';
      e.dtype[sizeof e.dtype - 1] = '\0';
      if (e.number > 0) r->e[r->ne++] = e;
    }
  }
  if (ok) {
    r->comms = calloc((size_t)r->h.ncomms + 1, sizeof *r->comms);
    r->members = calloc((size_t)r->h.ncomms + 1, sizeof *r->members);
    ok = r->comms && r->members;
  }
  for (int i = 0; ok && i < r->h.ncomms; i++) {
    if (len - at < sizeof(jm_ring_comm)) {
      ok = 0;
      break;
    }
    memcpy(&r->comms[i], buf + at, sizeof(jm_ring_comm));
    at += sizeof(jm_ring_comm);
    const int32_t m = r->comms[i].nmembers;
    r->nc = i + 1;
    if (m < 0 || (size_t)m * sizeof(int32_t) > len - at) {
      ok = 0;
      break;
    }
    if (m) {
      r->members[i] = malloc(sizeof(int32_t) * (size_t)m);
      if (!r->members[i]) {
        ok = 0;
        break;
      }
      memcpy(r->members[i], buf + at, sizeof(int32_t) * (size_t)m);
      at += sizeof(int32_t) * (size_t)m;
    }
  }
  if (ok && (size_t)r->h.nsites * sizeof(jm_ring_site) <= len - at) {
    r->sites = calloc((size_t)r->h.nsites + 1, sizeof *r->sites);
    if (r->sites) {
      memcpy(r->sites, buf + at, sizeof(jm_ring_site) * (size_t)r->h.nsites);
      r->ns = r->h.nsites;
      for (int i = 0; i < r->ns; i++) r->sites[i].text[199] = '\0';
    }
  }
  free(buf);
  r->h.host[sizeof r->h.host - 1] = r->h.why[sizeof r->h.why - 1] = '\0';
  if (!ok) {
    ring_free(r);
    return -1;
  }
  r->present = 1;
  return 0;
}

typedef struct jm_rings {
  int size; /* ranks in COMM_WORLD (0: no ring read) */
  int count;
  jm_ring *r;
} jm_rings;

static void rings_free(jm_rings *rs) {
  for (int i = 0; i < rs->size; i++) ring_free(&rs->r[i]);
  free(rs->r);
  memset(rs, 0, sizeof *rs);
}

/* Read every rank-<r>.ring of dir; with `fresh_after` (CLOCK_REALTIME ns,
 * 0: any), only rings written since. The job is the newest ring's: rings
 * of another size are an earlier job's left in the directory (a job of 3
 * ranks' rank-1 and rank-2 beside a later job's rank-0 of 1). */
static void rings_read(const char *dir, int64_t fresh_after, jm_rings *rs) {
  memset(rs, 0, sizeof *rs);
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  jm_ring *found = NULL;
  int nfound = 0, cap = 0;
  while ((de = readdir(d))) {
    int rank;
    char tail[8];
    if (sscanf(de->d_name, "rank-%d.rin%1[g]", &rank, tail) != 2 ||
        strlen(de->d_name) < 10 ||
        strcmp(de->d_name + strlen(de->d_name) - 5, ".ring") != 0)
      continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    jm_ring r;
    if (ring_load(path, &r)) continue;
    if ((fresh_after && r.h.dump_real_ns < fresh_after) || r.h.rank != rank) {
      ring_free(&r);
      continue;
    }
    if (nfound == cap) {
      cap = cap ? cap * 2 : 16;
      jm_ring *p = realloc(found, sizeof *found * (size_t)cap);
      if (!p) {
        ring_free(&r);
        break;
      }
      found = p;
    }
    found[nfound++] = r;
  }
  closedir(d);
  int size = 0;
  int64_t newest = 0;
  for (int i = 0; i < nfound; i++)
    if (!size || found[i].h.dump_real_ns > newest) {
      size = found[i].h.size;
      newest = found[i].h.dump_real_ns;
    }
  if (size) rs->r = calloc((size_t)size, sizeof *rs->r);
  if (rs->r) rs->size = size;
  for (int i = 0; i < nfound; i++) {
    jm_ring *r = &found[i];
    if (rs->r && r->h.size == size && !rs->r[r->h.rank].present) {
      rs->r[r->h.rank] = *r;
      rs->count++;
    } else {
      ring_free(r);
    }
  }
  free(found);
}

static int64_t now_real(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Read the rings, waiting up to `grace` seconds for every rank's. */
static void rings_wait(const char *dir, int64_t fresh_after, double grace,
                       int size_hint, jm_rings *rs) {
  const int64_t until = now_real() + (int64_t)(grace * 1e9);
  for (;;) {
    rings_read(dir, fresh_after, rs);
    const int want = rs->size ? rs->size : size_hint;
    if ((want && rs->count >= want) || now_real() >= until) return;
    rings_free(rs);
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
  }
}

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
    tprintf(t, " %s any rank", word);
    return;
  }
  if (peer == JM_REC_SEVERAL) {
    tprintf(t, " %s several ranks", word);
    return;
  }
  const int w = world_of(rs, e->comm, peer);
  if (w >= 0 && w != peer)
    tprintf(t, " %s rank %d (rank %d of its communicator)", word, w, peer);
  else
    tprintf(t, " %s rank %d", word, w >= 0 ? w : peer);
}

/* "allreduce #7 (x.py:3 in f)", "recv #2 from rank 0, tag 5 (...)",
 * "the wait of iallreduce #7", "MPI_Allreduce #4 (XLA's all-reduce)";
 * then the state: " (done)", " (waiting for 5.0 s)", ... */
static void describe(jm_text *t, const jm_rings *rs, const jm_ring *r,
                     const jm_ring_entry *e, int with_state) {
  const int p2p = (e->flags & JM_REC_P2P) != 0;
  if (e->flags & JM_REC_WAIT)
    tprintf(t, "the wait of %s #%lld", e->kind[0] ? e->kind : "a request",
            (long long)e->seq);
  else
    tprintf(t, "%s #%lld", e->op, (long long)e->seq);
  if (p2p) {
    const int is_send = strstr(coll_name(e), "send") != NULL &&
                        strstr(coll_name(e), "sendrecv") == NULL;
    if (e->peer2 != JM_REC_NONE && !is_send) {
      describe_peer(t, rs, e, e->peer, "from");
      describe_peer(t, rs, e, e->peer2, " to");
    } else {
      describe_peer(t, rs, e, e->peer, is_send ? "to" : "from");
    }
    if (e->tag >= 0) tprintf(t, ", tag %d", e->tag);
  } else if (e->peer >= 0 && !(e->flags & JM_REC_NATIVE)) {
    tprintf(t, ", root %d", e->peer);
  }
  if (e->flags & JM_REC_NATIVE && e->kind[0])
    tprintf(t, " (XLA's %s)", e->kind);
  if (e->position >= 0) tprintf(t, " on device position %d", e->position);
  char where[240];
  const char *site = site_of(r, e->site);
  if (site) {
    site_words(where, sizeof where, site);
    tprintf(t, " (%s)", where);
  }
  if (!with_state) return;
  const int64_t dump = r->h.dump_ns;
  switch (e->state) {
    case JM_REC_WAITING:
      tprintf(t, " (waiting for %.1f s)", secs(dump - e->begin_ns));
      break;
    case JM_REC_TIMEOUT:
      tprintf(t, " (timed out after %.1f s)",
              secs((e->end_ns ? e->end_ns : dump) - e->begin_ns));
      break;
    case JM_REC_FAILED: tprintf(t, " (failed)"); break;
    default: tprintf(t, " (done)"); break;
  }
}

/* "rank 3", "ranks 0-2", "ranks 0,2,5-7" of a sorted list. */
static void describe_ranks(jm_text *t, const int *ranks, int n) {
  tprintf(t, n == 1 ? "rank " : "ranks ");
  for (int i = 0; i < n;) {
    int j = i;
    while (j + 1 < n && ranks[j + 1] == ranks[j] + 1) j++;
    if (i) tprintf(t, ",");
    if (j == i) tprintf(t, "%d", ranks[i]);
    else tprintf(t, "%d-%d", ranks[i], ranks[j]);
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
    tprintf(t, "it had made no jaxmpi call");
    return;
  }
  if (stuck(e)) {
    tprintf(t, "it waits in ");
    describe(t, rs, r, e, 1);
    return;
  }
  tprintf(t, "its last call was ");
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
  tprintf(t, "rank %d %s %s where ", q, verb, other.p ? other.p : "?");
  describe_ranks(t, waiting, nwaiting);
  tprintf(t, " call%s %s: the ranks disagree on the order of collective "
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
    tprintf(t, "%s", causes ? " " : "");
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
    tprintf(t, "%s", causes ? " " : "");
    if (!r->present) {
      tprintf(t, "rank %d never entered %s that ", q, what.p ? what.p : "?");
      describe_ranks(t, waiting, nwaiting);
      tprintf(t, " wait%s in, as far as the rings show: it wrote no ring to "
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
      tprintf(t, "rank %d started %s but has not waited for it; ", q,
              what.p ? what.p : "?");
      describe_last(t, rs, r);
      described[q] = 1;
      tprintf(t, ".");
      causes++;
    } else if (e) {
      /* Done or failed here while the others wait (a rooted collective may
       * complete on some ranks first). */
      const jm_ring_entry *x = wait ? wait : e;
      tprintf(t, "rank %d %s %s; ", q,
              x->state == JM_REC_DONE ? "completed" : "failed in",
              what.p ? what.p : "?");
      describe_last(t, rs, r);
      described[q] = 1;
      tprintf(t, ".");
    } else if (max_seq(r, g->comm) > g->seq ||
               (!ring_complete(r) && max_seq(r, g->comm) == 0)) {
      tprintf(t, "rank %d is past %s (its ring no longer holds it); ", q,
              what.p ? what.p : "?");
      describe_last(t, rs, r);
      described[q] = 1;
      tprintf(t, ".");
    } else {
      tprintf(t, "rank %d never entered %s that ", q, what.p ? what.p : "?");
      describe_ranks(t, waiting, nwaiting);
      tprintf(t, " wait%s in; ", nwaiting == 1 ? "s" : "");
      describe_last(t, rs, r);
      described[q] = 1;
      tprintf(t, ".");
      causes++;
    }
  }
  if (!causes) {
    describe_ranks(t, waiting, nwaiting);
    tprintf(t, " wait%s in %s", nwaiting == 1 ? "s" : "", what.p ? what.p : "?");
    if (members && nwaiting == nmembers)
      tprintf(t, ", which every member of its communicator entered (a hang "
                 "inside MPI, or a failed process, link or device)");
    else if (!members)
      tprintf(t, " on a communicator of %d ranks whose members the rings do "
                 "not name",
              size);
    tprintf(t, ".");
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
    if (said) tprintf(t, " ");
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
      tprintf(t, "%srank %d waits in ", said ? " " : "", q);
      describe(t, rs, r, e, 1);
      const int p = e->peer >= 0 ? world_of(rs, e->comm, e->peer) : -1;
      if (p >= 0 && p < rs->size && p != q) {
        if (!rs->r[p].present) {
          tprintf(t, "; rank %d wrote no ring to %s (it is dead, or busy "
                     "outside jaxmpi on a host where no signal reached it)",
                  p, dir);
        } else {
          tprintf(t, "; rank %d: ", p);
          describe_last(t, rs, &rs->r[p]);
        }
      }
      tprintf(t, ".");
      said++;
    }
  }
  /* Failures. */
  for (int q = 0; q < rs->size; q++) {
    const jm_ring *r = &rs->r[q];
    const jm_ring_entry *e = r->present ? last_call(r) : NULL;
    if (!e || e->state != JM_REC_FAILED) continue;
    tprintf(t, "%srank %d's last call failed: ", said ? " " : "", q);
    describe(t, rs, r, e, 0);
    if (r->h.why[0]) tprintf(t, " (%s)", r->h.why);
    tprintf(t, ".");
    said++;
  }
  if (!said) {
    tprintf(t, "No rank waits in a jaxmpi call: each ring ends with calls "
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
      tprintf(t, " No ring from ");
      describe_ranks(t, m, k);
      tprintf(t, ".");
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
      tprintf(t, "\nrank %d: no ring\n", q);
      continue;
    }
    tprintf(t, "\nrank %d (%s, pid %d): ring written %s", q, r->h.host,
            r->h.pid, reason_name(&r->h));
    if (r->h.signal && r->h.reason == JM_DUMP_SIGNAL)
      tprintf(t, " %d", r->h.signal);
    tprintf(t, ", %lld calls since the start, the last %d kept%s%s\n",
            (long long)r->h.calls, r->ne, r->h.why[0] ? ": " : "",
            r->h.why);
    const int from = detail < 0 || detail >= r->ne ? 0 : r->ne - detail;
    for (int i = from; i < r->ne; i++) {
      const jm_ring_entry *e = &r->e[i];
      tprintf(t, "  %8lld  %+10.6f s  ", (long long)e->number,
              secs(e->begin_ns - r->h.dump_ns));
      describe(t, rs, r, e, 1);
      if (e->bytes > 0 || e->dtype[0])
        tprintf(t, ", %lld B%s%s", (long long)e->bytes, e->dtype[0] ? " " : "",
                e->dtype);
      if (e->end_ns && e->state != JM_REC_WAITING)
        tprintf(t, ", %.1f us", (double)(e->end_ns - e->begin_ns) / 1e3);
      tprintf(t, "\n");
    }
  }
}

int jaxmpi_record_report(const char *dir, double grace, int detail, int fd) {
  jm_rings rs;
  rings_wait(dir, 0, grace, 0, &rs);
  jm_text t = {0};
  if (!rs.count) {
    tprintf(&t, "jaxmpi: no ring in %s (rank-<r>.ring files are written on a "
                "watchdog timeout, an MPI error, a fatal signal or SIGUSR1)\n",
            dir);
    write_all(fd, t.p ? t.p : "", t.n);
    free(t.p);
    rings_free(&rs);
    return -1;
  }
  verdict(&t, &rs, dir);
  tprintf(&t, "\n");
  if (detail) details(&t, &rs, detail);
  write_all(fd, t.p ? t.p : "", t.n);
  free(t.p);
  const int n = rs.count;
  rings_free(&rs);
  return n;
}

/* ---- JSON ------------------------------------------------------------------ */

static void json_str(jm_text *t, const char *s) {
  tprintf(t, "\"");
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') tprintf(t, "\\%c", ch);
    else if (ch < 0x20) tprintf(t, "\\u%04x", ch);
    else tprintf(t, "%c", ch);
  }
  tprintf(t, "\"");
}

static const char *state_name(int s) {
  switch (s) {
    case JM_REC_WAITING: return "waiting";
    case JM_REC_DONE: return "done";
    case JM_REC_FAILED: return "failed";
    case JM_REC_TIMEOUT: return "timed out";
    default: return "unknown";
  }
}

static void json_flags(jm_text *t, int flags) {
  static const char *const names[] = {"collective", "p2p", "start", "wait",
                                      "native", "eager"};
  tprintf(t, "[");
  int k = 0;
  for (int i = 0; i < 6; i++)
    if (flags & (1 << i)) tprintf(t, "%s\"%s\"", k++ ? "," : "", names[i]);
  tprintf(t, "]");
}

int jaxmpi_record_json(const char *dir, int fd) {
  jm_rings rs;
  rings_read(dir, 0, &rs);
  jm_text t = {0};
  tprintf(&t, "{\"dir\":");
  json_str(&t, dir);
  tprintf(&t, ",\"size\":%d,\"rings\":[", rs.size);
  int first = 1;
  for (int q = 0; q < rs.size; q++) {
    const jm_ring *r = &rs.r[q];
    if (!r->present) continue;
    tprintf(&t, "%s\n{\"rank\":%d,\"size\":%d,\"pid\":%d,\"host\":",
            first ? "" : ",", q, r->h.size, r->h.pid);
    first = 0;
    json_str(&t, r->h.host);
    tprintf(&t, ",\"reason\":%d,\"signal\":%d,\"why\":", r->h.reason,
            r->h.signal);
    json_str(&t, r->h.why);
    tprintf(&t, ",\"calls\":%lld,\"capacity\":%d,\"cause\":%lld,"
                "\"dump_ns\":%lld,\"dump_real_ns\":%lld,\"entries\":[",
            (long long)r->h.calls, r->h.capacity, (long long)r->h.cause,
            (long long)r->h.dump_ns, (long long)r->h.dump_real_ns);
    for (int i = 0; i < r->ne; i++) {
      const jm_ring_entry *e = &r->e[i];
      tprintf(&t, "%s\n {\"number\":%lld,\"op\":", i ? "," : "",
              (long long)e->number);
      json_str(&t, e->op);
      tprintf(&t, ",\"kind\":");
      json_str(&t, e->kind);
      tprintf(&t, ",\"dtype\":");
      json_str(&t, e->dtype);
      tprintf(&t, ",\"flags\":");
      json_flags(&t, e->flags);
      tprintf(&t, ",\"state\":\"%s\",\"seq\":%lld,\"comm\":\"%016llx\","
                  "\"comm_size\":%d,\"comm_rank\":%d,\"position\":%d,"
                  "\"peer\":%d,\"peer2\":%d,\"tag\":%d,\"bytes\":%lld,"
                  "\"link\":%lld,\"begin_ns\":%lld,\"end_ns\":%lld,\"site\":",
              state_name(e->state), (long long)e->seq,
              (unsigned long long)e->comm, e->comm_size, e->comm_rank,
              e->position, e->peer, e->peer2, e->tag, (long long)e->bytes,
              (long long)e->link, (long long)e->begin_ns,
              (long long)e->end_ns);
      const char *site = site_of(r, e->site);
      json_str(&t, site ? site : "");
      tprintf(&t, "}");
    }
    tprintf(&t, "],\"comms\":[");
    for (int i = 0; i < r->nc; i++) {
      tprintf(&t, "%s{\"key\":\"%016llx\",\"size\":%d,\"rank\":%d,"
                  "\"members\":[",
              i ? "," : "", (unsigned long long)r->comms[i].key,
              r->comms[i].size, r->comms[i].rank);
      for (int k = 0; k < r->comms[i].nmembers; k++)
        tprintf(&t, "%s%d", k ? "," : "", r->members[i][k]);
      tprintf(&t, "]}");
    }
    tprintf(&t, "]}");
  }
  tprintf(&t, "]}\n");
  write_all(fd, t.p ? t.p : "", t.n);
  free(t.p);
  const int n = rs.count;
  rings_free(&rs);
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
  if (ring_load(path, &me) == 0) {
    for (int i = 0; i < me.ne; i++)
      if (me.e[i].number == ref.number)
        since = me.h.dump_real_ns - (me.h.dump_ns - me.e[i].begin_ns);
    ring_free(&me);
  }
  rings_wait(dir, since ? since - 1000000000 : 0, jm_record_grace(),
             jm_record_world_size(), &own);
  jm_text t = {0};
  int verdict_made = 0;
  const int rank = jm_record_world_rank();
  if (own.count > 1) {
    tprintf(&t, "What the flight recorder saw (the rings in %s; python -m "
                "jaxmpi.record %s for every rank's last calls): ",
            dir, dir);
    verdict(&t, &own, dir);
    verdict_made = 1;
  } else if (own.size && own.r[rank].present) {
    const jm_ring *r = &own.r[rank];
    const jm_ring_entry *e = NULL;
    for (int i = 0; i < r->ne; i++)
      if (r->e[i].number == ref.number) e = &r->e[i];
    tprintf(&t, "The flight recorder (ring in %s): no other rank's ring came "
                "within %.3g s (on other hosts, unless %s is shared; "
                "`kill -USR1` mpiexec's process to ask every rank)",
            dir, jm_record_grace(), dir);
    if (e) {
      tprintf(&t, "; this rank was in ");
      describe(&t, &own, r, e, 1);
      int n, size;
      const int32_t *m = members_of(&own, e->comm, &n, &size);
      if (m && n) {
        tprintf(&t, " on a communicator of ");
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
        tprintf(&t, "; its previous call was ");
        describe(&t, &own, r, prev, 1);
      }
    }
    tprintf(&t, ".");
  }
  snprintf(out, len, "%s", t.p ? t.p : "");
  if (t.n >= len && len > 4) memcpy(out + len - 4, "...", 4);
  free(t.p);
  rings_free(&own);
  return verdict_made;
}

/* ---- the trace as Chrome trace events ------------------------------------------ */

#define JM_MAX_POSITIONS_SEEN 256

typedef struct jm_span {
  int64_t number, t0, t1;
} jm_span;

static int cmp_span(const void *a, const void *b) {
  const jm_span *x = a, *y = b;
  return (x->number > y->number) - (x->number < y->number);
}

static const jm_span *find_span(const jm_span *s, size_t n, int64_t number) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (s[mid].number < number) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && s[lo].number == number ? &s[lo] : NULL;
}

/* The names of a trace file (JM_TRACE_STRING), by number. */
typedef struct jm_names {
  char (*text)[60];
  size_t n;
} jm_names;

static const char *name_of(const jm_names *nm, uint16_t id) {
  return id && id < nm->n && nm->text[id][0] ? nm->text[id] : "";
}

/* ts in us, aligned with rank 0's clock, of counter value t. */
static double trace_us(const jm_trace_header *h, double rate, int64_t t) {
  return (double)(h->ref_ns + (int64_t)((double)(t - h->ref_ticks) * rate) +
                  h->offset_ns - h->origin_ns) / 1e3;
}

/* An MPI call inside a call: inside its span (their clocks are read apart:
 * the duration, then the counter at its end). Its name as the debug log's,
 * "MPI_Sendrecv (exchange in place)": the call, and the note as detail. */
static void inner_span(jm_text *t, const jm_names *nm, const jm_span *spans,
                       size_t nspans, const jm_trace_event *ev, int pid,
                       int tid, const jm_trace_header *h, double rate) {
  int64_t t0 = ev->t0, t1 = ev->t1;
  const jm_span *s = find_span(spans, nspans, ev->parent);
  if (s) {
    if (t1 > s->t1) t1 = s->t1;
    if (t0 < s->t0) t0 = s->t0;
    if (t0 > t1) t0 = t1;
  }
  char fn[64];
  snprintf(fn, sizeof fn, "%s", name_of(nm, ev->op));
  char *space = strchr(fn, ' ');
  const char *detail = "";
  if (space) {
    *space = '\0';
    detail = space + 1;
  }
  tprintf(t, ",\n{\"ph\":\"X\",\"cat\":\"mpi\",\"name\":");
  json_str(t, fn);
  const double us0 = trace_us(h, rate, t0), us1 = trace_us(h, rate, t1);
  tprintf(t, ",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":"
             "{\"call\":%lld,\"count\":%lld",
          pid, tid, us0, us1 - us0, (long long)ev->parent, (long long)ev->bytes);
  if (ev->peer >= 0) tprintf(t, ",\"peer\":%d", ev->peer);
  if (detail[0]) {
    tprintf(t, ",\"detail\":");
    json_str(t, detail);
  }
  tprintf(t, "}}");
}

int64_t jaxmpi_trace_convert(const char *bin, const char *json, char *err,
                             size_t errlen) {
  size_t len = 0;
  char *buf = read_file(bin, &len);
  if (!buf) {
    snprintf(err, errlen, "cannot read %s: %s", bin, strerror(errno));
    return -1;
  }
  jm_trace_header h;
  if (len < sizeof h || (memcpy(&h, buf, sizeof h),
                         memcmp(h.magic, JM_TRACE_MAGIC, sizeof h.magic)) ||
      h.version != JM_TRACE_VERSION || h.header_size != sizeof h ||
      h.event_size != sizeof(jm_trace_event)) {
    snprintf(err, errlen, "%s is not a jaxmpi trace of this version", bin);
    free(buf);
    return -1;
  }
  h.host[sizeof h.host - 1] = '\0';
  /* Pass 1: the clock's last reference point, the calls' spans (for their
   * inner MPI calls), the names and sites. */
  jm_trace_end last = {h.ref_ticks + 1000000000, h.ref_ns + 1000000000};
  size_t nspans = 0, nsites = 0, capspans = 1024, capsites = 64;
  jm_span *spans = malloc(sizeof *spans * capspans);
  jm_ring_site *sites = malloc(sizeof *sites * capsites);
  jm_names nm = {calloc(65536, sizeof *nm.text), 65536};
  int positions[JM_MAX_POSITIONS_SEEN + 1];
  int npositions = 0;
  size_t at = sizeof h;
  while (spans && sites && nm.text && at + sizeof(jm_trace_record) <= len) {
    jm_trace_record rec;
    memcpy(&rec, buf + at, sizeof rec);
    if (at + sizeof rec + rec.size > len) break; /* cut short: a crash */
    const char *p = buf + at + sizeof rec;
    at += sizeof rec + rec.size;
    if (rec.type == JM_TRACE_END && rec.size == sizeof last) {
      memcpy(&last, p, sizeof last);
    } else if (rec.type == JM_TRACE_STRING &&
               rec.size == sizeof(jm_trace_string)) {
      jm_trace_string d;
      memcpy(&d, p, sizeof d);
      if (d.id < nm.n) {
        memcpy(nm.text[d.id], d.text, sizeof d.text);
        nm.text[d.id][sizeof d.text - 1] = '\0';
      }
    } else if (rec.type == JM_TRACE_SITE && rec.size == sizeof(jm_ring_site)) {
      if (nsites == capsites) {
        jm_ring_site *q = realloc(sites, sizeof *sites * (capsites *= 2));
        if (!q) break;
        sites = q;
      }
      memcpy(&sites[nsites], p, sizeof *sites);
      sites[nsites++].text[199] = '\0';
    } else if (rec.type == JM_TRACE_EVENT && rec.size == sizeof(jm_trace_event)) {
      jm_trace_event ev;
      memcpy(&ev, p, sizeof ev);
      const int tid = ev.position < 0 ? 0 : ev.position;
      int seen = 0;
      for (int i = 0; i < npositions && !seen; i++) seen = positions[i] == tid;
      if (!seen && npositions < JM_MAX_POSITIONS_SEEN) positions[npositions++] = tid;
      if (!ev.number) continue;
      if (nspans == capspans) {
        jm_span *q = realloc(spans, sizeof *spans * (capspans *= 2));
        if (!q) break;
        spans = q;
      }
      spans[nspans++] = (jm_span){ev.number, ev.t0, ev.t1};
    }
  }
  if (!spans || !sites || !nm.text) {
    snprintf(err, errlen, "out of memory reading %s", bin);
    free(spans);
    free(sites);
    free(nm.text);
    free(buf);
    return -1;
  }
  if (nspans > 1) qsort(spans, nspans, sizeof *spans, cmp_span);
  double rate = 1.0;
  if (h.clock && last.ticks != h.ref_ticks)
    rate = (double)(last.ns - h.ref_ns) / (double)(last.ticks - h.ref_ticks);
#define JM_US(t) trace_us(&h, rate, (t))
  FILE *f = fopen(json, "w");
  if (!f) {
    snprintf(err, errlen, "cannot write %s: %s", json, strerror(errno));
    free(spans);
    free(sites);
    free(nm.text);
    free(buf);
    return -1;
  }
  const int pid = h.rank;
  fprintf(f, "{\"traceEvents\":[\n");
  fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":"
             "{\"name\":\"rank %d\"}},\n",
          pid, pid);
  fprintf(f, "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,"
             "\"args\":{\"sort_index\":%d}}",
          pid, pid);
  for (int i = 0; i < npositions; i++)
    fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":"
               "%d,\"args\":{\"name\":\"device position %d\"}}",
            pid, positions[i], positions[i]);
  int64_t events = 0;
  jm_text t = {0};
  at = sizeof h;
  while (at + sizeof(jm_trace_record) <= len) {
    jm_trace_record rec;
    memcpy(&rec, buf + at, sizeof rec);
    if (at + sizeof rec + rec.size > len) break;
    const char *p = buf + at + sizeof rec;
    at += sizeof rec + rec.size;
    if (rec.type != JM_TRACE_EVENT || rec.size != sizeof(jm_trace_event)) continue;
    jm_trace_event ev;
    memcpy(&ev, p, sizeof ev);
    const int tid = ev.position < 0 ? 0 : ev.position;
    int64_t t0 = ev.t0, t1 = ev.t1;
    t.n = 0;
    if (!ev.number) {
      inner_span(&t, &nm, spans, nspans, &ev, pid, tid, &h, rate);
    } else {
      tprintf(&t, ",\n{\"ph\":\"X\",\"cat\":\"%s\",\"name\":",
              ev.flags & JM_REC_NATIVE ? "native" : "jaxmpi");
      if (ev.flags & JM_REC_NATIVE && ev.kind) {
        /* No jaxmpi op, no call site: the MPI call and XLA's collective,
         * "MPI_Allreduce (all-reduce)". */
        char both[160];
        snprintf(both, sizeof both, "%s (%s)", name_of(&nm, ev.op),
                 name_of(&nm, ev.kind));
        json_str(&t, both);
      } else {
        json_str(&t, name_of(&nm, ev.op));
      }
      tprintf(&t, ",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":"
                  "{\"call\":%lld,\"seq\":%lld,\"bytes\":%lld,\"state\":\"%s\","
                  "\"comm\":\"%016llx\",\"peer\":%d",
              pid, tid, JM_US(t0), JM_US(t1) - JM_US(t0),
              (long long)ev.number, (long long)ev.seq, (long long)ev.bytes,
              state_name(ev.state), (unsigned long long)ev.comm, ev.peer);
      if (ev.peer2 != JM_REC_NONE) tprintf(&t, ",\"peer2\":%d", ev.peer2);
      if (ev.tag >= 0) tprintf(&t, ",\"tag\":%d", ev.tag);
      if (ev.kind) {
        tprintf(&t, ",\"kind\":");
        json_str(&t, name_of(&nm, ev.kind));
      }
      if (ev.dtype) {
        tprintf(&t, ",\"dtype\":");
        json_str(&t, name_of(&nm, ev.dtype));
      }
      if (ev.flags & JM_REC_EAGER) tprintf(&t, ",\"eager\":true");
      if (ev.link) tprintf(&t, ",\"start\":%lld", (long long)ev.link);
      if (ev.position >= 0) tprintf(&t, ",\"position\":%d", ev.position);
      for (size_t i = 0; i < nsites; i++)
        if (sites[i].id == ev.site) {
          tprintf(&t, ",\"site\":");
          json_str(&t, sites[i].text);
          break;
        }
      tprintf(&t, "}}");
      if (ev.inner_op) {
        /* Its first MPI call (the others are events of their own). */
        jm_trace_event in;
        memset(&in, 0, sizeof in);
        in.parent = ev.number;
        in.t0 = ev.inner_t0;
        in.t1 = ev.inner_t1;
        in.bytes = ev.inner_count;
        in.peer = ev.inner_peer;
        in.op = ev.inner_op;
        inner_span(&t, &nm, spans, nspans, &in, pid, tid, &h, rate);
        events++;
      }
      /* A start and its wait: a flow arrow from one to the other. */
      const uint64_t flow = (uint64_t)pid << 40;
      if (ev.flags & JM_REC_START)
        tprintf(&t, ",\n{\"ph\":\"s\",\"cat\":\"request\",\"name\":\"request\","
                    "\"id\":%llu,\"pid\":%d,\"tid\":%d,\"ts\":%.3f}",
                (unsigned long long)(flow | (uint64_t)ev.number), pid, tid,
                JM_US(t0));
      if ((ev.flags & JM_REC_WAIT) && ev.link)
        tprintf(&t, ",\n{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"request\","
                    "\"name\":\"request\",\"id\":%llu,\"pid\":%d,\"tid\":%d,"
                    "\"ts\":%.3f}",
                (unsigned long long)(flow | (uint64_t)ev.link), pid, tid,
                JM_US(t0));
    }
    if (t.p) fwrite(t.p, 1, t.n, f);
    events++;
  }
#undef JM_US
  fprintf(f, "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"rank\":%d,"
             "\"size\":%d,\"pid\":%d,\"host\":",
          h.rank, h.size, h.pid);
  t.n = 0;
  json_str(&t, h.host);
  if (t.p) fwrite(t.p, 1, t.n, f);
  /* cut: the file ends inside a record (the process died writing it). */
  fprintf(f, ",\"clock_offset_ns\":%lld,\"clock_error_ns\":%lld,"
             "\"cut\":%s}}\n",
          (long long)h.offset_ns, (long long)h.align_error_ns,
          at == len ? "false" : "true");
  free(t.p);
  int bad = ferror(f);
  if (fclose(f)) bad = 1;
  free(spans);
  free(sites);
  free(nm.text);
  free(buf);
  if (bad) {
    snprintf(err, errlen, "writing %s failed", json);
    return -1;
  }
  return events;
}
