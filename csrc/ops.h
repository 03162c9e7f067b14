/* The table of jaxmpi operations: one row per op, one FFI handler each.
 * recv and sendrecv take the result's template as their last argument (its
 * data is never read): it carries the tangent and batch structure in JAX.
 * X(name, arguments, results, attributes). Arguments and results count data
 * buffers only; the ordering token XLA adds is skipped by the decoder. */
#ifndef JAXMPI_OPS_H
#define JAXMPI_OPS_H

/* Attributes a handler may receive: X(name, FFI scalar type). */
#define JM_ATTRS(X)                                                            \
  X(comm, S64)                                                                 \
  X(dest, S64)                                                                 \
  X(op, S64)                                                                   \
  X(recvtag, S64)                                                              \
  X(root, S64)                                                                 \
  X(sendtag, S64)                                                              \
  X(source, S64)                                                               \
  X(status, S64)                                                               \
  X(tag, S64)

#define JM_ATTR_ENUM(name, type) JM_ATTR_##name,
enum { JM_ATTRS(JM_ATTR_ENUM) JM_NATTRS };
#undef JM_ATTR_ENUM
#define JM_A(name) (1u << JM_ATTR_##name)

#define JM_OPS(X)                                                              \
  X(allreduce, 1, 1, JM_A(comm) | JM_A(op))                                          \
  X(reduce, 1, 1, JM_A(comm) | JM_A(op) | JM_A(root))                                   \
  X(scan, 1, 1, JM_A(comm) | JM_A(op))                                               \
  X(bcast, 1, 1, JM_A(comm) | JM_A(root))                                            \
  X(gather, 1, 1, JM_A(comm) | JM_A(root))                                           \
  X(scatter, 1, 1, JM_A(comm) | JM_A(root))                                          \
  X(allgather, 1, 1, JM_A(comm))                                                  \
  X(alltoall, 1, 1, JM_A(comm))                                                   \
  X(barrier, 0, 0, JM_A(comm))                                                    \
  X(send, 1, 0, JM_A(comm) | JM_A(dest) | JM_A(tag))                                    \
  X(recv, 1, 1, JM_A(comm) | JM_A(source) | JM_A(tag) | JM_A(status))                      \
  X(sendrecv, 2, 1,                                                            \
    JM_A(comm) | JM_A(source) | JM_A(dest) | JM_A(sendtag) | JM_A(recvtag) | JM_A(status))

#endif
