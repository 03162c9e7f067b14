/* libFuzzer harness over the FFI boundary: call frames built from fuzz
 * bytes (argument and result buffers of any type, rank and dtype; attributes
 * of any name, kind and dtype; metadata queries; every execution stage) are
 * handed to every exported handler. Decoding must reject what it does not
 * expect with an error, never read out of bounds or hit undefined
 * behaviour. The MPI table holds stubs: MPI_Comm_rank fails, so a frame
 * that decodes cleanly ends in the MPI error path (also exercised), and no
 * MPI call is made.
 *
 *   scripts/fuzz.sh            build with clang -fsanitize=fuzzer,address,
 *                              undefined and run for JAXMPI_FUZZ_SECONDS */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ffi.h"

#define X(name, nargs, nrets, attrs) \
  XLA_FFI_Error *jaxmpi_ffi_##name(XLA_FFI_CallFrame *frame);
JM_OPS(X)
#undef X
XLA_FFI_Error *jaxmpi_ffi_join_token(XLA_FFI_CallFrame *frame);

static XLA_FFI_Error *(*const handlers[])(XLA_FFI_CallFrame *) = {
#define X(name, nargs, nrets, attrs) jaxmpi_ffi_##name,
    JM_OPS(X)
#undef X
        jaxmpi_ffi_join_token};
#define NHANDLERS (sizeof handlers / sizeof handlers[0])

/* ---- stubs -------------------------------------------------------------- */

static char error_token;
static XLA_FFI_Error *stub_error_create(XLA_FFI_Error_Create_Args *args) {
  /* The message must be a NUL-terminated string. */
  volatile size_t n = strlen(args->message);
  (void)n;
  return (XLA_FFI_Error *)&error_token;
}
static int trace; /* JAXMPI_FUZZ_TRACE=1: say when a frame decoded cleanly */
static int stub_comm_rank(jm_Comm comm, int *rank) {
  (void)comm;
  if (trace) fprintf(stderr, "decoded a frame cleanly\n");
  *rank = 0;
  return 17; /* an MPI error: stop before any communication */
}
static int stub_error_string(int code, char *s, int *len) {
  (void)code;
  strcpy(s, "stub MPI error");
  *len = (int)strlen(s);
  return 0;
}
static int stub_error_class(int code, int *cls) {
  *cls = code;
  return 0;
}
static double stub_wtime(void) { return 0.0; }

static XLA_FFI_Api api;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  trace = getenv("JAXMPI_FUZZ_TRACE") != NULL;
  api.XLA_FFI_Error_Create = stub_error_create;
  jm_mpi.Comm_rank = stub_comm_rank;
  jm_mpi.Error_string = stub_error_string;
  jm_mpi.Error_class = stub_error_class;
  jm_mpi.Wtime = stub_wtime;
  for (int i = 0; i < JM_NDTYPES; i++)
    if (jm_dtypes[i].size) jm_dtypes[i].has_mpi = 1;
  return 0;
}

/* ---- reading fuzz bytes ------------------------------------------------- */

typedef struct reader {
  const uint8_t *p;
  size_t n;
} reader;

static uint8_t byte(reader *r) {
  if (!r->n) return 0;
  r->n--;
  return *r->p++;
}
static int64_t i64(reader *r) {
  int64_t v = 0;
  for (int i = 0; i < 8; i++) v = (int64_t)((uint64_t)v << 8 | byte(r));
  return v;
}

#define MAXN 40 /* more items than any handler accepts */

static const char *const known_names[] = {
    "comm", "dest", "dests", "op", "recvtag", "root", "sendtag", "source",
    "sources", "status", "tag", "tags", "", "comm2", "roo"};
#define NNAMES (sizeof known_names / sizeof known_names[0])

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader r = {data, size};
  static char payload[64];
  XLA_FFI_CallFrame frame;
  memset(&frame, 0, sizeof frame);
  frame.struct_size = sizeof frame;
  frame.api = &api;
  unsigned which = byte(&r) % NHANDLERS;
  uint8_t flags = byte(&r);
  frame.stage = (flags & 3) == 0 ? XLA_FFI_ExecutionStage_PREPARE
                                 : XLA_FFI_ExecutionStage_EXECUTE;

  XLA_FFI_Metadata meta;
  XLA_FFI_Metadata_Extension ext;
  if (flags & 4) {
    memset(&meta, 0, sizeof meta);
    memset(&ext, 0, sizeof ext);
    ext.extension_base.struct_size = sizeof ext;
    ext.extension_base.type = (flags & 8) ? XLA_FFI_Extension_Metadata
                                          : (XLA_FFI_Extension_Type)0;
    ext.metadata = &meta;
    frame.extension_start = &ext.extension_base;
  }

  /* arguments and results */
  XLA_FFI_Buffer bufs[2][MAXN];
  int64_t dims[2][MAXN][4];
  void *items[2][MAXN];
  XLA_FFI_ArgType types[2][MAXN];
  for (int side = 0; side < 2; side++) {
    int n = byte(&r) % MAXN;
    for (int i = 0; i < n; i++) {
      XLA_FFI_Buffer *b = &bufs[side][i];
      memset(b, 0, sizeof *b);
      uint8_t t = byte(&r);
      types[side][i] = (t & 7) ? XLA_FFI_ArgType_BUFFER : (XLA_FFI_ArgType)0;
      b->dtype = (XLA_FFI_DataType)(byte(&r) % (JM_NDTYPES + 4));
      b->rank = byte(&r) % 5;
      for (int d = 0; d < b->rank; d++)
        dims[side][i][d] = byte(&r); /* XLA's dims are small and >= 0 */
      b->dims = dims[side][i];
      b->data = payload;
      items[side][i] = b;
    }
    if (side == 0) {
      frame.args.size = n;
      frame.args.types = types[0];
      frame.args.args = items[0];
    } else {
      frame.rets.size = n;
      frame.rets.types = (XLA_FFI_RetType *)types[1];
      frame.rets.rets = items[1];
    }
  }

  /* attributes */
  int na = byte(&r) % 16;
  XLA_FFI_AttrType atypes[16];
  XLA_FFI_ByteSpan spans[16], *names[16];
  void *attrs[16];
  XLA_FFI_Scalar scalars[16];
  XLA_FFI_Array arrays[16];
  int64_t values[16][MAXN];
  char namebuf[16][12];
  for (int i = 0; i < na; i++) {
    uint8_t k = byte(&r);
    if (k & 0x80) { /* arbitrary bytes as the name */
      size_t len = byte(&r) % sizeof namebuf[i];
      for (size_t j = 0; j < len; j++) namebuf[i][j] = (char)byte(&r);
      spans[i].ptr = namebuf[i];
      spans[i].len = len;
    } else {
      spans[i].ptr = known_names[k % NNAMES];
      spans[i].len = strlen(spans[i].ptr);
    }
    names[i] = &spans[i];
    uint8_t kind = byte(&r);
    XLA_FFI_DataType dt = (kind & 0x10) ? XLA_FFI_DataType_S32
                                        : XLA_FFI_DataType_S64;
    int nvals = byte(&r) % MAXN;
    for (int j = 0; j < MAXN; j++) values[i][j] = j < nvals ? i64(&r) : 0;
    switch (kind % 3) {
      case 0:
        atypes[i] = XLA_FFI_AttrType_SCALAR;
        scalars[i].dtype = dt;
        scalars[i].value = values[i];
        attrs[i] = &scalars[i];
        break;
      case 1:
        atypes[i] = XLA_FFI_AttrType_ARRAY;
        arrays[i].dtype = dt;
        arrays[i].size = (size_t)nvals;
        arrays[i].data = values[i];
        attrs[i] = &arrays[i];
        break;
      default: /* a kind jaxmpi never uses: must be rejected unread */
        atypes[i] = XLA_FFI_AttrType_STRING;
        attrs[i] = &spans[i];
        break;
    }
  }
  frame.attrs.size = na;
  frame.attrs.types = atypes;
  frame.attrs.names = names;
  frame.attrs.attrs = attrs;

  handlers[which](&frame);
  return 0;
}
