/* A trace file as Chrome trace events (jaxmpi_trace_convert): see
 * record_read.h. */
#define _GNU_SOURCE
#include "record_read.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring_read.h"

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
  jm_tprintf(t, ",\n{\"ph\":\"X\",\"cat\":\"mpi\",\"name\":");
  jm_json_str(t, fn);
  const double us0 = trace_us(h, rate, t0), us1 = trace_us(h, rate, t1);
  jm_tprintf(t, ",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":"
             "{\"call\":%lld,\"count\":%lld",
          pid, tid, us0, us1 - us0, (long long)ev->parent, (long long)ev->bytes);
  if (ev->peer >= 0) jm_tprintf(t, ",\"peer\":%d", ev->peer);
  if (detail[0]) {
    jm_tprintf(t, ",\"detail\":");
    jm_json_str(t, detail);
  }
  jm_tprintf(t, "}}");
}

int64_t jaxmpi_trace_convert(const char *bin, const char *json, char *err,
                             size_t errlen) {
  size_t len = 0;
  char *buf = jm_read_file(bin, &len);
  if (!buf) {
    snprintf(err, errlen, "cannot read %s: %s", bin, strerror(errno));
    return -1;
  }
  jm_trace_header h;
  if (len < sizeof h || (memcpy(&h, buf, sizeof h),
                         !jm_file_head_is(&h.head, JM_TRACE_MAGIC,
                                          JM_TRACE_VERSION, sizeof h,
                                          sizeof(jm_trace_event)))) {
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
  const int pid = h.head.rank;
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
      jm_tprintf(&t, ",\n{\"ph\":\"X\",\"cat\":\"%s\",\"name\":",
              ev.flags & JM_REC_NATIVE ? "native" : "jaxmpi");
      if (ev.flags & JM_REC_NATIVE && ev.kind) {
        /* No jaxmpi op, no call site: the MPI call and XLA's collective,
         * "MPI_Allreduce (all-reduce)". */
        char both[160];
        snprintf(both, sizeof both, "%s (%s)", name_of(&nm, ev.op),
                 name_of(&nm, ev.kind));
        jm_json_str(&t, both);
      } else {
        jm_json_str(&t, name_of(&nm, ev.op));
      }
      jm_tprintf(&t, ",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":"
                  "{\"call\":%lld,\"seq\":%lld,\"bytes\":%lld,\"state\":\"%s\","
                  "\"comm\":\"%016llx\",\"peer\":%d",
              pid, tid, JM_US(t0), JM_US(t1) - JM_US(t0),
              (long long)ev.number, (long long)ev.seq, (long long)ev.bytes,
              jm_state_name(ev.state), (unsigned long long)ev.comm, ev.peer);
      if (ev.peer2 != JM_REC_NONE) jm_tprintf(&t, ",\"peer2\":%d", ev.peer2);
      if (ev.tag >= 0) jm_tprintf(&t, ",\"tag\":%d", ev.tag);
      if (ev.kind) {
        jm_tprintf(&t, ",\"kind\":");
        jm_json_str(&t, name_of(&nm, ev.kind));
      }
      if (ev.dtype) {
        jm_tprintf(&t, ",\"dtype\":");
        jm_json_str(&t, name_of(&nm, ev.dtype));
      }
      if (ev.flags & JM_REC_EAGER) jm_tprintf(&t, ",\"eager\":true");
      if (ev.link) jm_tprintf(&t, ",\"start\":%lld", (long long)ev.link);
      if (ev.position >= 0) jm_tprintf(&t, ",\"position\":%d", ev.position);
      for (size_t i = 0; i < nsites; i++)
        if (sites[i].id == ev.site) {
          jm_tprintf(&t, ",\"site\":");
          jm_json_str(&t, sites[i].text);
          break;
        }
      jm_tprintf(&t, "}}");
      if (ev.inner_op) {
        /* Its first MPI call (the others are events of their own). */
        jm_trace_event in;
        jm_trace_inner_event(&in, ev.number, ev.inner_op, ev.inner_t0,
                             ev.inner_t1, ev.inner_count, ev.inner_peer,
                             ev.position);
        inner_span(&t, &nm, spans, nspans, &in, pid, tid, &h, rate);
        events++;
      }
      /* A start and its wait: a flow arrow from one to the other. */
      const uint64_t flow = (uint64_t)pid << 40;
      if (ev.flags & JM_REC_START)
        jm_tprintf(&t, ",\n{\"ph\":\"s\",\"cat\":\"request\",\"name\":\"request\","
                    "\"id\":%llu,\"pid\":%d,\"tid\":%d,\"ts\":%.3f}",
                (unsigned long long)(flow | (uint64_t)ev.number), pid, tid,
                JM_US(t0));
      if ((ev.flags & JM_REC_WAIT) && ev.link)
        jm_tprintf(&t, ",\n{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"request\","
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
          h.head.rank, h.head.size, h.head.pid);
  t.n = 0;
  jm_json_str(&t, h.host);
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
