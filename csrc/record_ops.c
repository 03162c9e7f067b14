/* jaxmpi's calls as the flight recorder sees them: see record_ops.h. */
#include "record_ops.h"

/* The peer as the recorder says it: MPI.ANY_SOURCE and MPI.PROC_NULL are
 * each MPI's own numbers. */
static int peer_of(int r) {
  if (r == jm_const.any_source) return JM_REC_ANY;
  if (r == jm_const.proc_null) return JM_REC_NONE;
  return r;
}

static int payload_dtype(const jm_call *c, int64_t *bytes) {
  const jm_buffer *b = c->nargs ? &c->arg[0] : c->nrets ? &c->ret[0] : NULL;
  *bytes = b ? b->count * (int64_t)b->elsize : 0;
  return b ? b->dtype : -1;
}

/* What every record of call c says: its communicator, position, peers,
 * tag, payload, site; flags from its attributes. */
static void describe(const jm_call *c, jm_record_call *w) {
  const unsigned a = c->attrs;
  const int p2p =
      (a & (JM_A(source) | JM_A(dest) | JM_A(sources) | JM_A(dests))) != 0;
  w->kind = NULL;
  w->flags = p2p ? JM_REC_P2P : JM_REC_COLLECTIVE;
  w->comm = c->comm;
  w->has_comm = 1;
  w->position = c->position;
  w->peer = w->peer2 = JM_REC_NONE;
  w->tag = -1;
  if (a & JM_A(root)) w->peer = c->root;
  if ((a & JM_A(source)) && (a & JM_A(dest))) {
    w->peer = peer_of(c->source);
    w->peer2 = peer_of(c->dest);
    w->tag = c->recvtag;
  } else if (a & JM_A(source)) {
    w->peer = peer_of(c->source);
    w->tag = c->tag;
  } else if (a & JM_A(dest)) {
    w->peer = peer_of(c->dest);
    w->tag = c->tag;
  } else if (a & (JM_A(sources) | JM_A(dests))) {
    /* A neighbourhood: one pair named, more are several. */
    const int one = c->nsources <= 1 && c->ndests <= 1;
    w->peer = !one ? JM_REC_SEVERAL
                   : c->nsources ? peer_of(c->sources[0]) : JM_REC_NONE;
    w->peer2 = !one ? JM_REC_SEVERAL
                    : c->ndests ? peer_of(c->dests[0]) : JM_REC_NONE;
    w->tag = c->tag;
  }
  const int dtype = payload_dtype(c, &w->bytes);
  if (a & (JM_A(sources) | JM_A(dests)))
    /* An exchange: every buffer it sends. */
    for (int i = 1; i < c->nargs; i++)
      w->bytes += c->arg[i].count * (int64_t)c->arg[i].elsize;
  w->dtype = dtype >= 0 && dtype < JM_NDTYPES ? jm_dtypes[dtype].name : NULL;
  w->site = c->site;
  w->seq = 0;
  w->link = 0;
}

/* Blocking ops come first in the op table (ops.h): the eager path's. */
#define JM_COUNT_OP(name, nargs, nrets, templates, payload, attrs) +1
enum { JM_NBLOCKING = 0 JM_OPS(JM_COUNT_OP) };
#undef JM_COUNT_OP

jm_record_ref jm_record_op(const jm_call *c, const jm_op_desc *desc) {
  if (!jm_record_on()) return (jm_record_ref){0, 0};
  jm_record_call w;
  describe(c, &w);
  w.op = desc->name;
  if (desc->kind == JM_START) w.flags |= JM_REC_START;
  return jm_record_begin(&w);
}

jm_record_ref jm_record_wait_of(const jm_call *start) {
  if (!jm_record_on()) return (jm_record_ref){0, 0};
  jm_record_call w;
  describe(start, &w);
  w.op = "wait";
  w.kind = start->opname;
  w.flags |= JM_REC_WAIT;
  /* The start's numbers; -1 when the start was not recorded (a number of
   * its own would count a collective twice). */
  w.seq = start->rec.number ? start->rec.seq : -1;
  w.link = start->rec.number;
  return jm_record_begin(&w);
}

#define JM_OP_NAME(name, nargs, nrets, templates, payload, attrs) #name,
static const char *const blocking_names[] = {JM_OPS(JM_OP_NAME)};
#undef JM_OP_NAME

int64_t jaxmpi_record_eager_begin(int op, uint64_t comm, int root, int dtype,
                                  int64_t bytes, int64_t site, int64_t *seq) {
  if (seq) *seq = 0;
  if (!jm_record_on() || op < 0 || op >= JM_NBLOCKING) return 0;
  jm_record_call w = {0};
  w.op = blocking_names[op];
  w.dtype = dtype >= 0 && dtype < JM_NDTYPES ? jm_dtypes[dtype].name : NULL;
  w.flags = JM_REC_COLLECTIVE | JM_REC_EAGER;
  w.comm = JM_HANDLE(jm_Comm, comm);
  w.has_comm = 1;
  w.position = -1;
  w.peer = root;
  w.peer2 = JM_REC_NONE;
  w.tag = -1;
  w.bytes = bytes;
  w.site = site;
  jm_record_ref ref = jm_record_begin(&w);
  if (seq) *seq = ref.seq;
  return ref.number;
}

void jaxmpi_record_eager_end(int64_t number, int64_t seq, int state) {
  jm_record_end((jm_record_ref){number, seq}, state);
}
