/* The table of jaxmpi operations: one row per op, one FFI handler each.
 * recv and sendrecv take the result's template as their last argument (its
 * data is never read): it carries the tangent and batch structure in JAX.
 * X(name, arguments, results, templates, payload, attributes). Arguments and
 * results count data buffers only (JM_VARIADIC: any number up to
 * JM_MAX_BUFFERS); the ordering token XLA adds is skipped by the decoder.
 * `templates` has bit i set where argument i is only a template whose data
 * no rank reads (the GPU path copies nothing of it to the host). `payload`
 * is the array a rank contributes to a collective, which the cross-rank
 * check compares (check.c): JM_IN, argument 0 (none without arguments), or
 * JM_OUT, the last result (scatter's block: the root's input is the whole
 * table). Everything per op is in its row; handlers.c generates the
 * handlers, their descriptors and JM_OP_<name> from the rows. */
#ifndef JAXMPI_OPS_H
#define JAXMPI_OPS_H

/* Attributes a handler may receive, all int64: X(name, SCALAR or ARRAY).
 * `site` (the Python line of the call, an id of jm_site_register) is
 * optional on every op; the op's row lists the others it requires.
 * `devices` and `comms` are optional on every op too (JM_DEVICE_ATTRS): a
 * call compiled for `devices` devices per process (inside shard_map) takes
 * its device's position in the mesh as its last data argument (an int32
 * scalar) and runs on comms[position] (`devices` items: one duplicate of
 * the communicator per position) or comms[position * devices + position]
 * (devices x devices: pair k -> j's communicator at k * devices + j; the
 * exchanges' sources/dests then hold `devices` rows of endpoint ranks,
 * process rank * devices + position).
 * `counts`, `sendcounts` and `recvcounts` hold one row count per rank of
 * the communicator (rows along axis 0; checked against its size). */
#define JM_ATTRS(X)                                                            \
  X(comm, SCALAR)                                                              \
  X(comms, ARRAY)                                                              \
  X(counts, ARRAY)                                                             \
  X(dest, SCALAR)                                                              \
  X(dests, ARRAY)                                                              \
  X(devices, SCALAR)                                                           \
  X(op, SCALAR)                                                                \
  X(recvcounts, ARRAY)                                                         \
  X(recvtag, SCALAR)                                                           \
  X(root, SCALAR)                                                              \
  X(sendcounts, ARRAY)                                                         \
  X(sendtag, SCALAR)                                                           \
  X(site, SCALAR)                                                              \
  X(source, SCALAR)                                                            \
  X(sources, ARRAY)                                                            \
  X(status, SCALAR)                                                            \
  X(tag, SCALAR)

#define JM_ATTR_ENUM(name, type) JM_ATTR_##name,
enum { JM_ATTRS(JM_ATTR_ENUM) JM_NATTRS };
#undef JM_ATTR_ENUM
#define JM_A(name) (1u << JM_ATTR_##name)
#define JM_VARIADIC (-1)
enum { JM_IN, JM_OUT }; /* the payload column */
/* The attributes of the point-to-point ops, blocking or not. */
#define JM_SEND_ATTRS (JM_A(comm) | JM_A(dest) | JM_A(tag))
#define JM_RECV_ATTRS (JM_A(comm) | JM_A(source) | JM_A(tag) | JM_A(status))
#define JM_SENDRECV_ATTRS                                                      \
  (JM_A(comm) | JM_A(source) | JM_A(dest) | JM_A(sendtag) | JM_A(recvtag) |    \
   JM_A(status))
#define JM_EXCHANGE_ATTRS (JM_A(comm) | JM_A(sources) | JM_A(dests) | JM_A(tag))
/* Optional on every op: a call of a program over several devices. */
#define JM_DEVICE_ATTRS (JM_A(devices) | JM_A(comms))
/* Positions of a mesh a call may run on: comms holds at most its square. */
#define JM_MAX_DEVICES 64

#define JM_OPS(X)                                                              \
  X(allreduce, 1, 1, 0, JM_IN, JM_A(comm) | JM_A(op))                          \
  X(reduce, 1, 1, 0, JM_IN, JM_A(comm) | JM_A(op) | JM_A(root))                \
  X(scan, 1, 1, 0, JM_IN, JM_A(comm) | JM_A(op))                               \
  X(bcast, 1, 1, 0, JM_IN, JM_A(comm) | JM_A(root))                            \
  X(gather, 1, 1, 0, JM_IN, JM_A(comm) | JM_A(root))                           \
  X(scatter, 1, 1, 0, JM_OUT, JM_A(comm) | JM_A(root))                         \
  X(allgather, 1, 1, 0, JM_IN, JM_A(comm))                                     \
  X(alltoall, 1, 1, 0, JM_IN, JM_A(comm))                                      \
  X(barrier, 0, 0, 0, JM_IN, JM_A(comm))                                       \
  X(send, 1, 0, 0, JM_IN, JM_SEND_ATTRS)                                       \
  X(recv, 1, 1, 1u << 0, JM_IN, JM_RECV_ATTRS)                                 \
  X(sendrecv, 2, 1, 1u << 1, JM_IN, JM_SENDRECV_ATTRS)                         \
  X(neighbor_exchange, JM_VARIADIC, JM_VARIADIC, 0, JM_IN, JM_EXCHANGE_ATTRS)  \
  X(neighbor_alltoallv, JM_VARIADIC, JM_VARIADIC, 0, JM_IN, JM_EXCHANGE_ATTRS) \
  JM_VOPS(X)                                                                   \
  JM_OPS_REDUCE_SCATTER_EXSCAN(X)

/* Variable counts along axis 0 (collectives.c): row counts per rank. */
#define JM_VOPS(X)                                                             \
  X(allgatherv, 1, 1, 0, JM_IN, JM_A(comm) | JM_A(counts))                     \
  X(gatherv, 1, 1, 0, JM_IN, JM_A(comm) | JM_A(counts) | JM_A(root))           \
  X(scatterv, 1, 1, 0, JM_OUT, JM_A(comm) | JM_A(counts) | JM_A(root))         \
  X(alltoallv, 1, 1, 0, JM_IN, JM_A(comm) | JM_A(sendcounts) | JM_A(recvcounts))

/* reduce_scatter (counts: rows of x's first axis each rank gets,
 * MPI_Reduce_scatter),
 * reduce_scatter_block (equal blocks) and exscan. */
#define JM_OPS_REDUCE_SCATTER_EXSCAN(X)                                        \
  X(reduce_scatter_block, 1, 1, 0, JM_IN, JM_A(comm) | JM_A(op))               \
  X(reduce_scatter, 1, 1, 0, JM_IN, JM_A(comm) | JM_A(op) | JM_A(counts))      \
  X(exscan, 1, 1, 0, JM_IN, JM_A(comm) | JM_A(op))

/* Non-blocking starts (starts.c), XLA:CPU and XLA:GPU (the CUDA handler
 * stages through pinned memory the request owns). Result 0 is the request's
 * handle (a float32 scalar, see request.h); the other results are the
 * buffers the request uses (sends from, receives into), each aliased to the
 * argument it replaces. */
#define JM_IOPS(X)                                                             \
  X(isend, 1, 2, 0, JM_IN, JM_SEND_ATTRS)                                      \
  X(irecv, 1, 2, 1u << 0, JM_IN, JM_RECV_ATTRS)                                \
  X(isendrecv, 2, 3, 1u << 1, JM_IN, JM_SENDRECV_ATTRS)                        \
  X(iallreduce, 1, 2, 0, JM_IN, JM_A(comm) | JM_A(op))                         \
  X(ibcast, 1, 2, 0, JM_IN, JM_A(comm) | JM_A(root))                           \
  X(ibarrier, 0, 1, 0, JM_IN, JM_A(comm))                                      \
  X(ireduce, 1, 2, 0, JM_IN, JM_A(comm) | JM_A(op) | JM_A(root))               \
  X(iscan, 1, 2, 0, JM_IN, JM_A(comm) | JM_A(op))                              \
  X(iexscan, 1, 2, 0, JM_IN, JM_A(comm) | JM_A(op))                            \
  X(igather, 1, JM_VARIADIC, 0, JM_IN, JM_A(comm) | JM_A(root))                \
  X(iscatter, 1, JM_VARIADIC, 0, JM_OUT, JM_A(comm) | JM_A(root))              \
  X(iallgather, 1, 3, 0, JM_IN, JM_A(comm))                                    \
  X(ialltoall, 1, 3, 0, JM_IN, JM_A(comm))                                     \
  X(ireduce_scatter_block, 1, 3, 0, JM_IN, JM_A(comm) | JM_A(op))              \
  X(ireduce_scatter, 1, 3, 0, JM_IN, JM_A(comm) | JM_A(op) | JM_A(counts))     \
  X(ineighbor_exchange, JM_VARIADIC, JM_VARIADIC, 0, JM_IN, JM_EXCHANGE_ATTRS) \
  JM_IVOPS(X)

/* Non-blocking variable counts (starts.c): the buffers are [x, y] (the
 * rooted ops: [x] off gatherv's root, [y] off scatterv's), never one
 * buffer for both. */
#define JM_IVOPS(X)                                                            \
  X(iallgatherv, 1, 3, 0, JM_IN, JM_A(comm) | JM_A(counts))                    \
  X(igatherv, 1, JM_VARIADIC, 0, JM_IN,                                        \
    JM_A(comm) | JM_A(counts) | JM_A(root))                                    \
  X(iscatterv, 1, JM_VARIADIC, 0, JM_OUT,                                      \
    JM_A(comm) | JM_A(counts) | JM_A(root))                                    \
  X(ialltoallv, 1, 3, 0, JM_IN,                                                \
    JM_A(comm) | JM_A(sendcounts) | JM_A(recvcounts))

/* The wait of every start (wait.c): the request's handle, then every buffer
 * the request uses (XLA keeps them alive and in place until here); results
 * the op's, aliased to their buffers. Its attributes are the call site's
 * only: the request it completes names the rest. */
#define JM_WAITS(X) X(wait, JM_VARIADIC, JM_VARIADIC, 0, JM_IN, 0)

/* The kinds of rows, in the order of JM_OP_<name>. */
enum { JM_BLOCKING, JM_START, JM_WAIT };

/* Every op's number, JM_OP_<name>: blocking ops first, then the starts, then
 * the wait. */
#define JM_OP_ENUM(name, nargs, nrets, templates, payload, attrs) JM_OP_##name,
enum { JM_OPS(JM_OP_ENUM) JM_IOPS(JM_OP_ENUM) JM_WAITS(JM_OP_ENUM) JM_NOPS };
#undef JM_OP_ENUM

#endif
