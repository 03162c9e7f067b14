/* The reading side's lower floor: see ring_read.h. */
#define _GNU_SOURCE
#include "ring_read.h"

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

void jm_tprintf(jm_text *t, const char *fmt, ...) {
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

void jm_write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= (size_t)w;
  }
}

/* ---- rings ----------------------------------------------------------------- */

void jm_ring_free(jm_ring *r) {
  free(r->e);
  for (int i = 0; i < r->nc; i++) free(r->members[i]);
  free(r->members);
  free(r->comms);
  free(r->sites);
  memset(r, 0, sizeof *r);
}

char *jm_read_file(const char *path, size_t *len) {
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
int jm_ring_load(const char *path, jm_ring *r) {
  memset(r, 0, sizeof *r);
  size_t len = 0;
  char *buf = jm_read_file(path, &len);
  if (!buf) return -1;
  size_t at = sizeof r->h;
  int ok = len >= sizeof r->h;
  if (ok) {
    memcpy(&r->h, buf, sizeof r->h);
    ok = jm_file_head_is(&r->h.head, JM_RING_MAGIC, JM_RING_VERSION,
                         sizeof r->h, sizeof(jm_ring_entry)) &&
         r->h.nentries >= 0 && r->h.ncomms >= 0 && r->h.nsites >= 0 &&
         r->h.head.size > 0 && r->h.head.rank >= 0 &&
         r->h.head.rank < r->h.head.size;
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
    jm_ring_free(r);
    return -1;
  }
  r->present = 1;
  return 0;
}

void jm_rings_free(jm_rings *rs) {
  for (int i = 0; i < rs->size; i++) jm_ring_free(&rs->r[i]);
  free(rs->r);
  memset(rs, 0, sizeof *rs);
}

/* Read every rank-<r>.ring of dir; with `fresh_after` (CLOCK_REALTIME ns,
 * 0: any), only rings written since. The job is the newest ring's: rings
 * of another size are an earlier job's left in the directory (a job of 3
 * ranks' rank-1 and rank-2 beside a later job's rank-0 of 1). */
void jm_rings_read(const char *dir, int64_t fresh_after, jm_rings *rs) {
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
    if (jm_ring_load(path, &r)) continue;
    if ((fresh_after && r.h.dump_real_ns < fresh_after) || r.h.head.rank != rank) {
      jm_ring_free(&r);
      continue;
    }
    if (nfound == cap) {
      cap = cap ? cap * 2 : 16;
      jm_ring *p = realloc(found, sizeof *found * (size_t)cap);
      if (!p) {
        jm_ring_free(&r);
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
      size = found[i].h.head.size;
      newest = found[i].h.dump_real_ns;
    }
  if (size) rs->r = calloc((size_t)size, sizeof *rs->r);
  if (rs->r) rs->size = size;
  for (int i = 0; i < nfound; i++) {
    jm_ring *r = &found[i];
    if (rs->r && r->h.head.size == size && !rs->r[r->h.head.rank].present) {
      rs->r[r->h.head.rank] = *r;
      rs->count++;
    } else {
      jm_ring_free(r);
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
void jm_rings_wait(const char *dir, int64_t fresh_after, double grace,
                   int size_hint, jm_rings *rs) {
  const int64_t until = now_real() + (int64_t)(grace * 1e9);
  for (;;) {
    jm_rings_read(dir, fresh_after, rs);
    const int want = rs->size ? rs->size : size_hint;
    if ((want && rs->count >= want) || now_real() >= until) return;
    jm_rings_free(rs);
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
  }
}

/* ---- JSON ------------------------------------------------------------------ */

void jm_json_str(jm_text *t, const char *s) {
  jm_tprintf(t, "\"");
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') jm_tprintf(t, "\\%c", ch);
    else if (ch < 0x20) jm_tprintf(t, "\\u%04x", ch);
    else jm_tprintf(t, "%c", ch);
  }
  jm_tprintf(t, "\"");
}

const char *jm_state_name(int s) {
  switch (s) {
    case JM_REC_WAITING: return "waiting";
    case JM_REC_DONE: return "done";
    case JM_REC_FAILED: return "failed";
    case JM_REC_TIMEOUT: return "timed out";
    default: return "unknown";
  }
}
