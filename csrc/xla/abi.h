/* The MPI ABI that jaxlib's embedded MPItrampoline (5.3.1, MPI ABI 2.9.0)
 * resolves when `import jax` runs with MPITRAMPOLINE_LIB set: one row per
 * symbol, the only list of them (docs/design.md, "Plain JAX on MPI").
 * surface.c expands it into the library MPITRAMPOLINE_LIB names
 * (jaxmpi/_xla_mpi.so: every symbol defined, no MPI in it); native.c, part
 * of the C core, serves the calls marked CORE; tests/native/test_abi.py
 * compares the rows with the names the installed jaxlib looks up.
 *
 * Facts of the ABI (the symbol names, and the C type of each constant and
 * function; the values are jaxmpi's own): handles are uintptr_t;
 * constants are read by value once, when the library is loaded; functions
 * are called with the caller's arguments unchanged, so every handle and
 * constant jaxmpi receives is one it defined. Verified on jaxlib 0.6.2,
 * 0.10.2 and 0.12.0.1: the same 641 names, in the same order. */
#ifndef JAXMPI_XLA_ABI_H
#define JAXMPI_XLA_ABI_H

#include <stddef.h>
#include <stdint.h>

/* The ABI version the trampoline requires (major equal, minor at least),
 * and the version of this layer (reported as "MPIwrapper" in the
 * trampoline's messages). */
#define JM_XLA_ABI_MAJOR 2
#define JM_XLA_ABI_MINOR 9
#define JM_XLA_ABI_PATCH 0
#define JM_XLA_LAYER_MAJOR 1
#define JM_XLA_LAYER_MINOR 0
#define JM_XLA_LAYER_PATCH 0
/* MPIABI_MAX_ERROR_STRING and _LIBRARY_VERSION_STRING of the ABI: the
 * sizes of the buffers the caller passes. */
#define JM_XLA_MAX_ERROR_STRING 1024
#define JM_XLA_MAX_LIBRARY_VERSION_STRING 8192

typedef uintptr_t jm_xla_handle;
typedef intptr_t jm_xla_aint;

/* MPIABI_Status: 24 bytes of the implementation's status, then the three
 * public fields (40 bytes on LP64). */
typedef struct jm_xla_status {
  uint64_t impl[3];
  int MPI_SOURCE;
  int MPI_TAG;
  int MPI_ERROR;
  int pad_;
} jm_xla_status;
_Static_assert(sizeof(jm_xla_status) == 40, "MPIABI_Status is 10 ints");

/* Handle constants: class in the second byte, index in the first (0: the
 * class's null handle). Never a valid address, so they cannot be confused
 * with the records jaxmpi returns for communicators and requests it
 * creates. */
enum {
  JM_XLA_COMM = 1, JM_XLA_DATATYPE, JM_XLA_OP, JM_XLA_ERRHANDLER,
  JM_XLA_FILE, JM_XLA_GROUP, JM_XLA_INFO, JM_XLA_MESSAGE, JM_XLA_REQUEST,
  JM_XLA_WIN
};
#define JM_XLA_H(cls, index) ((JM_XLA_##cls << 8) | (index))
#define JM_XLA_IS_TOKEN(h) ((h) < 0x10000u)
#define JM_XLA_CLASS(h) ((int)((h) >> 8))
#define JM_XLA_INDEX(h) ((int)((h) & 0xff))

/* Functions: X(name, how). how: CORE, served by the C core's native calls
 * (native.c) once attached; SURFACE, served by the surface itself;
 * STUB, returns MPI_ERR_UNSUPPORTED_OPERATION and names itself through
 * MPI_Error_string; STUBH, the same for a function returning a handle
 * (the null handle). XLA's MPI collectives call the CORE ones only. */
#define JM_XLA_FUNCTIONS(X)                                                   \
  X(Abort, CORE)                                                               \
  X(Accumulate, STUB)                                                          \
  X(Add_error_class, STUB)                                                     \
  X(Add_error_code, STUB)                                                      \
  X(Add_error_string, STUB)                                                    \
  X(Aint_add, SURFACE)                                                         \
  X(Aint_diff, SURFACE)                                                        \
  X(Allgather, CORE)                                                           \
  X(Allgatherv, STUB)                                                          \
  X(Alloc_mem, STUB)                                                           \
  X(Allreduce, CORE)                                                           \
  X(Alltoall, STUB)                                                            \
  X(Alltoallv, STUB)                                                           \
  X(Alltoallw, STUB)                                                           \
  X(Barrier, STUB)                                                             \
  X(Bcast, STUB)                                                               \
  X(Bsend, STUB)                                                               \
  X(Bsend_init, STUB)                                                          \
  X(Buffer_attach, STUB)                                                       \
  X(Buffer_detach, STUB)                                                       \
  X(Cancel, STUB)                                                              \
  X(Cart_coords, STUB)                                                         \
  X(Cart_create, STUB)                                                         \
  X(Cart_get, STUB)                                                            \
  X(Cart_map, STUB)                                                            \
  X(Cart_rank, STUB)                                                           \
  X(Cart_shift, STUB)                                                          \
  X(Cart_sub, STUB)                                                            \
  X(Cartdim_get, STUB)                                                         \
  X(Close_port, STUB)                                                          \
  X(Comm_accept, STUB)                                                         \
  X(Comm_c2f, STUB)                                                            \
  X(Comm_call_errhandler, STUB)                                                \
  X(Comm_compare, STUB)                                                        \
  X(Comm_connect, STUB)                                                        \
  X(Comm_create, STUB)                                                         \
  X(Comm_create_errhandler, STUB)                                              \
  X(Comm_create_group, STUB)                                                   \
  X(Comm_create_keyval, STUB)                                                  \
  X(Comm_delete_attr, STUB)                                                    \
  X(Comm_disconnect, STUB)                                                     \
  X(Comm_dup, STUB)                                                            \
  X(Comm_dup_with_info, STUB)                                                  \
  X(Comm_f2c, STUBH)                                                           \
  X(Comm_free, CORE)                                                           \
  X(Comm_free_keyval, STUB)                                                    \
  X(Comm_get_attr, STUB)                                                       \
  X(Comm_get_errhandler, STUB)                                                 \
  X(Comm_get_info, STUB)                                                       \
  X(Comm_get_name, STUB)                                                       \
  X(Comm_get_parent, STUB)                                                     \
  X(Comm_group, STUB)                                                          \
  X(Comm_idup, STUB)                                                           \
  X(Comm_join, STUB)                                                           \
  X(Comm_rank, CORE)                                                           \
  X(Comm_remote_group, STUB)                                                   \
  X(Comm_remote_size, STUB)                                                    \
  X(Comm_set_attr, STUB)                                                       \
  X(Comm_set_errhandler, STUB)                                                 \
  X(Comm_set_info, STUB)                                                       \
  X(Comm_set_name, STUB)                                                       \
  X(Comm_size, CORE)                                                           \
  X(Comm_spawn, STUB)                                                          \
  X(Comm_spawn_multiple, STUB)                                                 \
  X(Comm_split, CORE)                                                          \
  X(Comm_split_type, STUB)                                                     \
  X(Comm_test_inter, STUB)                                                     \
  X(Compare_and_swap, STUB)                                                    \
  X(Dims_create, STUB)                                                         \
  X(Dist_graph_create, STUB)                                                   \
  X(Dist_graph_create_adjacent, STUB)                                          \
  X(Dist_graph_neighbors, STUB)                                                \
  X(Dist_graph_neighbors_count, STUB)                                          \
  X(Errhandler_c2f, STUB)                                                      \
  X(Errhandler_f2c, STUBH)                                                     \
  X(Errhandler_free, STUB)                                                     \
  X(Error_class, SURFACE)                                                      \
  X(Error_string, SURFACE)                                                     \
  X(Exscan, STUB)                                                              \
  X(Fetch_and_op, STUB)                                                        \
  X(File_c2f, STUB)                                                            \
  X(File_call_errhandler, STUB)                                                \
  X(File_close, STUB)                                                          \
  X(File_create_errhandler, STUB)                                              \
  X(File_delete, STUB)                                                         \
  X(File_f2c, STUBH)                                                           \
  X(File_get_amode, STUB)                                                      \
  X(File_get_atomicity, STUB)                                                  \
  X(File_get_byte_offset, STUB)                                                \
  X(File_get_errhandler, STUB)                                                 \
  X(File_get_group, STUB)                                                      \
  X(File_get_info, STUB)                                                       \
  X(File_get_position, STUB)                                                   \
  X(File_get_position_shared, STUB)                                            \
  X(File_get_size, STUB)                                                       \
  X(File_get_type_extent, STUB)                                                \
  X(File_get_view, STUB)                                                       \
  X(File_iread, STUB)                                                          \
  X(File_iread_all, STUB)                                                      \
  X(File_iread_at, STUB)                                                       \
  X(File_iread_at_all, STUB)                                                   \
  X(File_iread_shared, STUB)                                                   \
  X(File_iwrite, STUB)                                                         \
  X(File_iwrite_all, STUB)                                                     \
  X(File_iwrite_at, STUB)                                                      \
  X(File_iwrite_at_all, STUB)                                                  \
  X(File_iwrite_shared, STUB)                                                  \
  X(File_open, STUB)                                                           \
  X(File_preallocate, STUB)                                                    \
  X(File_read, STUB)                                                           \
  X(File_read_all, STUB)                                                       \
  X(File_read_all_begin, STUB)                                                 \
  X(File_read_all_end, STUB)                                                   \
  X(File_read_at, STUB)                                                        \
  X(File_read_at_all, STUB)                                                    \
  X(File_read_at_all_begin, STUB)                                              \
  X(File_read_at_all_end, STUB)                                                \
  X(File_read_ordered, STUB)                                                   \
  X(File_read_ordered_begin, STUB)                                             \
  X(File_read_ordered_end, STUB)                                               \
  X(File_read_shared, STUB)                                                    \
  X(File_seek, STUB)                                                           \
  X(File_seek_shared, STUB)                                                    \
  X(File_set_atomicity, STUB)                                                  \
  X(File_set_errhandler, STUB)                                                 \
  X(File_set_info, STUB)                                                       \
  X(File_set_size, STUB)                                                       \
  X(File_set_view, STUB)                                                       \
  X(File_sync, STUB)                                                           \
  X(File_write, STUB)                                                          \
  X(File_write_all, STUB)                                                      \
  X(File_write_all_begin, STUB)                                                \
  X(File_write_all_end, STUB)                                                  \
  X(File_write_at, STUB)                                                       \
  X(File_write_at_all, STUB)                                                   \
  X(File_write_at_all_begin, STUB)                                             \
  X(File_write_at_all_end, STUB)                                               \
  X(File_write_ordered, STUB)                                                  \
  X(File_write_ordered_begin, STUB)                                            \
  X(File_write_ordered_end, STUB)                                              \
  X(File_write_shared, STUB)                                                   \
  X(Finalize, CORE)                                                            \
  X(Finalized, CORE)                                                           \
  X(Free_mem, STUB)                                                            \
  X(Gather, STUB)                                                              \
  X(Gatherv, STUB)                                                             \
  X(Get, STUB)                                                                 \
  X(Get_accumulate, STUB)                                                      \
  X(Get_address, STUB)                                                         \
  X(Get_count, STUB)                                                           \
  X(Get_elements, STUB)                                                        \
  X(Get_elements_x, STUB)                                                      \
  X(Get_library_version, CORE)                                                 \
  X(Get_processor_name, STUB)                                                  \
  X(Get_version, CORE)                                                         \
  X(Graph_create, STUB)                                                        \
  X(Graph_get, STUB)                                                           \
  X(Graph_map, STUB)                                                           \
  X(Graph_neighbors, STUB)                                                     \
  X(Graph_neighbors_count, STUB)                                               \
  X(Graphdims_get, STUB)                                                       \
  X(Grequest_complete, STUB)                                                   \
  X(Grequest_start, STUB)                                                      \
  X(Group_c2f, STUB)                                                           \
  X(Group_compare, STUB)                                                       \
  X(Group_difference, STUB)                                                    \
  X(Group_excl, STUB)                                                          \
  X(Group_f2c, STUBH)                                                          \
  X(Group_free, STUB)                                                          \
  X(Group_incl, STUB)                                                          \
  X(Group_intersection, STUB)                                                  \
  X(Group_range_excl, STUB)                                                    \
  X(Group_range_incl, STUB)                                                    \
  X(Group_rank, STUB)                                                          \
  X(Group_size, STUB)                                                          \
  X(Group_translate_ranks, STUB)                                               \
  X(Group_union, STUB)                                                         \
  X(Iallgather, STUB)                                                          \
  X(Iallgatherv, STUB)                                                         \
  X(Iallreduce, STUB)                                                          \
  X(Ialltoall, STUB)                                                           \
  X(Ialltoallv, STUB)                                                          \
  X(Ialltoallw, STUB)                                                          \
  X(Ibarrier, STUB)                                                            \
  X(Ibcast, STUB)                                                              \
  X(Ibsend, STUB)                                                              \
  X(Iexscan, STUB)                                                             \
  X(Igather, STUB)                                                             \
  X(Igatherv, STUB)                                                            \
  X(Improbe, STUB)                                                             \
  X(Imrecv, STUB)                                                              \
  X(Ineighbor_allgather, STUB)                                                 \
  X(Ineighbor_allgatherv, STUB)                                                \
  X(Ineighbor_alltoall, STUB)                                                  \
  X(Ineighbor_alltoallv, STUB)                                                 \
  X(Ineighbor_alltoallw, STUB)                                                 \
  X(Info_c2f, STUB)                                                            \
  X(Info_create, STUB)                                                         \
  X(Info_delete, STUB)                                                         \
  X(Info_dup, STUB)                                                            \
  X(Info_f2c, STUBH)                                                           \
  X(Info_free, STUB)                                                           \
  X(Info_get, STUB)                                                            \
  X(Info_get_nkeys, STUB)                                                      \
  X(Info_get_nthkey, STUB)                                                     \
  X(Info_get_valuelen, STUB)                                                   \
  X(Info_set, STUB)                                                            \
  X(Init, CORE)                                                                \
  X(Init_thread, CORE)                                                         \
  X(Initialized, CORE)                                                         \
  X(Intercomm_create, STUB)                                                    \
  X(Intercomm_merge, STUB)                                                     \
  X(Iprobe, STUB)                                                              \
  X(Irecv, CORE)                                                               \
  X(Ireduce, STUB)                                                             \
  X(Ireduce_scatter, STUB)                                                     \
  X(Ireduce_scatter_block, STUB)                                               \
  X(Irsend, STUB)                                                              \
  X(Is_thread_main, CORE)                                                      \
  X(Iscan, STUB)                                                               \
  X(Iscatter, STUB)                                                            \
  X(Iscatterv, STUB)                                                           \
  X(Isend, CORE)                                                               \
  X(Issend, STUB)                                                              \
  X(Lookup_name, STUB)                                                         \
  X(Message_c2f, STUB)                                                         \
  X(Message_f2c, STUBH)                                                        \
  X(Mprobe, STUB)                                                              \
  X(Mrecv, STUB)                                                               \
  X(Neighbor_allgather, STUB)                                                  \
  X(Neighbor_allgatherv, STUB)                                                 \
  X(Neighbor_alltoall, STUB)                                                   \
  X(Neighbor_alltoallv, STUB)                                                  \
  X(Neighbor_alltoallw, STUB)                                                  \
  X(Op_c2f, STUB)                                                              \
  X(Op_commutative, STUB)                                                      \
  X(Op_create, STUB)                                                           \
  X(Op_f2c, STUBH)                                                             \
  X(Op_free, STUB)                                                             \
  X(Open_port, STUB)                                                           \
  X(Pack, STUB)                                                                \
  X(Pack_external, STUB)                                                       \
  X(Pack_external_size, STUB)                                                  \
  X(Pack_size, STUB)                                                           \
  X(Probe, STUB)                                                               \
  X(Publish_name, STUB)                                                        \
  X(Put, STUB)                                                                 \
  X(Query_thread, CORE)                                                        \
  X(Raccumulate, STUB)                                                         \
  X(Recv, STUB)                                                                \
  X(Recv_init, STUB)                                                           \
  X(Reduce, STUB)                                                              \
  X(Reduce_local, STUB)                                                        \
  X(Reduce_scatter, CORE)                                                      \
  X(Reduce_scatter_block, STUB)                                                \
  X(Register_datarep, STUB)                                                    \
  X(Request_c2f, STUB)                                                         \
  X(Request_f2c, STUBH)                                                        \
  X(Request_free, STUB)                                                        \
  X(Request_get_status, STUB)                                                  \
  X(Rget, STUB)                                                                \
  X(Rget_accumulate, STUB)                                                     \
  X(Rput, STUB)                                                                \
  X(Rsend, STUB)                                                               \
  X(Rsend_init, STUB)                                                          \
  X(Scan, STUB)                                                                \
  X(Scatter, STUB)                                                             \
  X(Scatterv, STUB)                                                            \
  X(Send, STUB)                                                                \
  X(Send_init, STUB)                                                           \
  X(Sendrecv, CORE)                                                            \
  X(Sendrecv_replace, STUB)                                                    \
  X(Ssend, STUB)                                                               \
  X(Ssend_init, STUB)                                                          \
  X(Start, STUB)                                                               \
  X(Startall, STUB)                                                            \
  X(Status_c2f, STUB)                                                          \
  X(Status_f2c, STUB)                                                          \
  X(Status_set_cancelled, STUB)                                                \
  X(Status_set_elements, STUB)                                                 \
  X(Status_set_elements_x, STUB)                                               \
  X(Test, STUB)                                                                \
  X(Test_cancelled, STUB)                                                      \
  X(Testall, STUB)                                                             \
  X(Testany, STUB)                                                             \
  X(Testsome, STUB)                                                            \
  X(Topo_test, STUB)                                                           \
  X(Type_c2f, STUB)                                                            \
  X(Type_commit, STUB)                                                         \
  X(Type_contiguous, STUB)                                                     \
  X(Type_create_darray, STUB)                                                  \
  X(Type_create_f90_complex, STUB)                                             \
  X(Type_create_f90_integer, STUB)                                             \
  X(Type_create_f90_real, STUB)                                                \
  X(Type_create_hindexed, STUB)                                                \
  X(Type_create_hindexed_block, STUB)                                          \
  X(Type_create_hvector, STUB)                                                 \
  X(Type_create_indexed_block, STUB)                                           \
  X(Type_create_keyval, STUB)                                                  \
  X(Type_create_resized, STUB)                                                 \
  X(Type_create_struct, STUB)                                                  \
  X(Type_create_subarray, STUB)                                                \
  X(Type_delete_attr, STUB)                                                    \
  X(Type_dup, STUB)                                                            \
  X(Type_f2c, STUBH)                                                           \
  X(Type_free, STUB)                                                           \
  X(Type_free_keyval, STUB)                                                    \
  X(Type_get_attr, STUB)                                                       \
  X(Type_get_contents, STUB)                                                   \
  X(Type_get_envelope, STUB)                                                   \
  X(Type_get_extent, STUB)                                                     \
  X(Type_get_extent_x, STUB)                                                   \
  X(Type_get_name, STUB)                                                       \
  X(Type_get_true_extent, STUB)                                                \
  X(Type_get_true_extent_x, STUB)                                              \
  X(Type_indexed, STUB)                                                        \
  X(Type_match_size, STUB)                                                     \
  X(Type_set_attr, STUB)                                                       \
  X(Type_set_name, STUB)                                                       \
  X(Type_size, STUB)                                                           \
  X(Type_size_x, STUB)                                                         \
  X(Type_struct, STUB)                                                         \
  X(Type_vector, STUB)                                                         \
  X(Unpack, STUB)                                                              \
  X(Unpack_external, STUB)                                                     \
  X(Unpublish_name, STUB)                                                      \
  X(Wait, CORE)                                                                \
  X(Waitall, STUB)                                                             \
  X(Waitany, STUB)                                                             \
  X(Waitsome, STUB)                                                            \
  X(Win_allocate, STUB)                                                        \
  X(Win_allocate_shared, STUB)                                                 \
  X(Win_attach, STUB)                                                          \
  X(Win_c2f, STUB)                                                             \
  X(Win_call_errhandler, STUB)                                                 \
  X(Win_complete, STUB)                                                        \
  X(Win_create, STUB)                                                          \
  X(Win_create_dynamic, STUB)                                                  \
  X(Win_create_errhandler, STUB)                                               \
  X(Win_create_keyval, STUB)                                                   \
  X(Win_delete_attr, STUB)                                                     \
  X(Win_detach, STUB)                                                          \
  X(Win_f2c, STUBH)                                                            \
  X(Win_fence, STUB)                                                           \
  X(Win_flush, STUB)                                                           \
  X(Win_flush_all, STUB)                                                       \
  X(Win_flush_local, STUB)                                                     \
  X(Win_flush_local_all, STUB)                                                 \
  X(Win_free, STUB)                                                            \
  X(Win_free_keyval, STUB)                                                     \
  X(Win_get_attr, STUB)                                                        \
  X(Win_get_errhandler, STUB)                                                  \
  X(Win_get_group, STUB)                                                       \
  X(Win_get_info, STUB)                                                        \
  X(Win_get_name, STUB)                                                        \
  X(Win_lock, STUB)                                                            \
  X(Win_lock_all, STUB)                                                        \
  X(Win_post, STUB)                                                            \
  X(Win_set_attr, STUB)                                                        \
  X(Win_set_errhandler, STUB)                                                  \
  X(Win_set_info, STUB)                                                        \
  X(Win_set_name, STUB)                                                        \
  X(Win_shared_query, STUB)                                                    \
  X(Win_start, STUB)                                                           \
  X(Win_sync, STUB)                                                            \
  X(Win_test, STUB)                                                            \
  X(Win_unlock, STUB)                                                          \
  X(Win_unlock_all, STUB)                                                      \
  X(Win_wait, STUB)                                                            \
  X(Wtick, SURFACE)                                                            \
  X(Wtime, SURFACE)

/* MPIX_ functions (symbols MPIXABI_<name>): no GPU-aware MPI here (0). */
#define JM_XLA_XFUNCTIONS(X)                                                  \
  X(Query_cuda_support, SURFACE)                                               \
  X(Query_hip_support, SURFACE)                                                \
  X(Query_ze_support, SURFACE)

/* Constants: X(name, kind, value). kind: INT (int), HANDLE
 * (jm_xla_handle), OFFSET (int64_t), POINTER (the address of sentinel
 * byte `value` of the surface; 0: NULL), FUNCTION (a callback pointer: a
 * stub that fails). Error classes are numbered in name order; the
 * values that native.c translates are ANY_SOURCE, ANY_TAG, PROC_NULL,
 * UNDEFINED, the thread levels, IN_PLACE, STATUS_IGNORE, the handles of
 * datatypes, ops and communicators. */
#define JM_XLA_CONSTANTS(X)                                                   \
  X(ANY_SOURCE, INT, -1)                                                       \
  X(ANY_TAG, INT, -1)                                                          \
  X(APPNUM, INT, -1001)                                                        \
  X(BSEND_OVERHEAD, INT, 512)                                                  \
  X(CART, INT, -1002)                                                          \
  X(COMBINER_CONTIGUOUS, INT, -1003)                                           \
  X(COMBINER_DARRAY, INT, -1004)                                               \
  X(COMBINER_DUP, INT, -1005)                                                  \
  X(COMBINER_F90_COMPLEX, INT, -1006)                                          \
  X(COMBINER_F90_INTEGER, INT, -1007)                                          \
  X(COMBINER_F90_REAL, INT, -1008)                                             \
  X(COMBINER_HINDEXED, INT, -1009)                                             \
  X(COMBINER_HINDEXED_BLOCK, INT, -1010)                                       \
  X(COMBINER_HVECTOR, INT, -1011)                                              \
  X(COMBINER_INDEXED, INT, -1012)                                              \
  X(COMBINER_INDEXED_BLOCK, INT, -1013)                                        \
  X(COMBINER_NAMED, INT, -1014)                                                \
  X(COMBINER_RESIZED, INT, -1015)                                              \
  X(COMBINER_STRUCT, INT, -1016)                                               \
  X(COMBINER_SUBARRAY, INT, -1017)                                             \
  X(COMBINER_VECTOR, INT, -1018)                                               \
  X(COMM_TYPE_SHARED, INT, -1019)                                              \
  X(CONGRUENT, INT, -1020)                                                     \
  X(DISTRIBUTE_BLOCK, INT, -1021)                                              \
  X(DISTRIBUTE_CYCLIC, INT, -1022)                                             \
  X(DISTRIBUTE_DFLT_DARG, INT, -1023)                                          \
  X(DISTRIBUTE_NONE, INT, -1024)                                               \
  X(DIST_GRAPH, INT, -1025)                                                    \
  X(ERR_ACCESS, INT, 1)                                                        \
  X(ERR_AMODE, INT, 2)                                                         \
  X(ERR_ARG, INT, 3)                                                           \
  X(ERR_ASSERT, INT, 4)                                                        \
  X(ERR_BAD_FILE, INT, 5)                                                      \
  X(ERR_BASE, INT, 6)                                                          \
  X(ERR_BUFFER, INT, 7)                                                        \
  X(ERR_COMM, INT, 8)                                                          \
  X(ERR_CONVERSION, INT, 9)                                                    \
  X(ERR_COUNT, INT, 10)                                                        \
  X(ERR_DIMS, INT, 11)                                                         \
  X(ERR_DISP, INT, 12)                                                         \
  X(ERR_DUP_DATAREP, INT, 13)                                                  \
  X(ERR_FILE, INT, 14)                                                         \
  X(ERR_FILE_EXISTS, INT, 15)                                                  \
  X(ERR_FILE_IN_USE, INT, 16)                                                  \
  X(ERR_GROUP, INT, 17)                                                        \
  X(ERR_INFO, INT, 18)                                                         \
  X(ERR_INFO_KEY, INT, 19)                                                     \
  X(ERR_INFO_NOKEY, INT, 20)                                                   \
  X(ERR_INFO_VALUE, INT, 21)                                                   \
  X(ERR_INTERN, INT, 22)                                                       \
  X(ERR_IN_STATUS, INT, 23)                                                    \
  X(ERR_IO, INT, 24)                                                           \
  X(ERR_KEYVAL, INT, 25)                                                       \
  X(ERR_LASTCODE, INT, 0x3fff)                                                 \
  X(ERR_LOCKTYPE, INT, 26)                                                     \
  X(ERR_NAME, INT, 27)                                                         \
  X(ERR_NOT_SAME, INT, 28)                                                     \
  X(ERR_NO_MEM, INT, 29)                                                       \
  X(ERR_NO_SPACE, INT, 30)                                                     \
  X(ERR_NO_SUCH_FILE, INT, 31)                                                 \
  X(ERR_OP, INT, 32)                                                           \
  X(ERR_OTHER, INT, 33)                                                        \
  X(ERR_PENDING, INT, 34)                                                      \
  X(ERR_PORT, INT, 35)                                                         \
  X(ERR_QUOTA, INT, 36)                                                        \
  X(ERR_RANK, INT, 37)                                                         \
  X(ERR_READ_ONLY, INT, 38)                                                    \
  X(ERR_REQUEST, INT, 39)                                                      \
  X(ERR_RMA_ATTACH, INT, 40)                                                   \
  X(ERR_RMA_CONFLICT, INT, 41)                                                 \
  X(ERR_RMA_FLAVOR, INT, 42)                                                   \
  X(ERR_RMA_RANGE, INT, 43)                                                    \
  X(ERR_RMA_SHARED, INT, 44)                                                   \
  X(ERR_RMA_SYNC, INT, 45)                                                     \
  X(ERR_ROOT, INT, 46)                                                         \
  X(ERR_SERVICE, INT, 47)                                                      \
  X(ERR_SIZE, INT, 48)                                                         \
  X(ERR_SPAWN, INT, 49)                                                        \
  X(ERR_TAG, INT, 50)                                                          \
  X(ERR_TOPOLOGY, INT, 51)                                                     \
  X(ERR_TRUNCATE, INT, 52)                                                     \
  X(ERR_TYPE, INT, 53)                                                         \
  X(ERR_UNKNOWN, INT, 54)                                                      \
  X(ERR_UNSUPPORTED_DATAREP, INT, 55)                                          \
  X(ERR_UNSUPPORTED_OPERATION, INT, 56)                                        \
  X(ERR_WIN, INT, 57)                                                          \
  X(GRAPH, INT, -1026)                                                         \
  X(HOST, INT, -1027)                                                          \
  X(IDENT, INT, -1028)                                                         \
  X(IO, INT, -1029)                                                            \
  X(KEYVAL_INVALID, INT, -1030)                                                \
  X(LASTUSEDCODE, INT, -1031)                                                  \
  X(LOCK_EXCLUSIVE, INT, -1032)                                                \
  X(LOCK_SHARED, INT, -1033)                                                   \
  X(MODE_APPEND, INT, 0x1)                                                     \
  X(MODE_CREATE, INT, 0x2)                                                     \
  X(MODE_DELETE_ON_CLOSE, INT, 0x4)                                            \
  X(MODE_EXCL, INT, 0x8)                                                       \
  X(MODE_NOCHECK, INT, 0x10)                                                   \
  X(MODE_NOPRECEDE, INT, 0x20)                                                 \
  X(MODE_NOPUT, INT, 0x40)                                                     \
  X(MODE_NOSTORE, INT, 0x80)                                                   \
  X(MODE_NOSUCCEED, INT, 0x100)                                                \
  X(MODE_RDONLY, INT, 0x200)                                                   \
  X(MODE_RDWR, INT, 0x400)                                                     \
  X(MODE_SEQUENTIAL, INT, 0x800)                                               \
  X(MODE_UNIQUE_OPEN, INT, 0x1000)                                             \
  X(MODE_WRONLY, INT, 0x2000)                                                  \
  X(ORDER_C, INT, -1034)                                                       \
  X(ORDER_FORTRAN, INT, -1035)                                                 \
  X(PROC_NULL, INT, -2)                                                        \
  X(ROOT, INT, -3)                                                             \
  X(SEEK_CUR, INT, -1036)                                                      \
  X(SEEK_END, INT, -1037)                                                      \
  X(SEEK_SET, INT, -1038)                                                      \
  X(SIMILAR, INT, -1039)                                                       \
  X(SUCCESS, INT, 0)                                                           \
  X(TAG_UB, INT, -1040)                                                        \
  X(THREAD_FUNNELED, INT, 1)                                                   \
  X(THREAD_MULTIPLE, INT, 3)                                                   \
  X(THREAD_SERIALIZED, INT, 2)                                                 \
  X(THREAD_SINGLE, INT, 0)                                                     \
  X(TYPECLASS_COMPLEX, INT, -1041)                                             \
  X(TYPECLASS_INTEGER, INT, -1042)                                             \
  X(TYPECLASS_REAL, INT, -1043)                                                \
  X(UNDEFINED, INT, -32766)                                                    \
  X(UNEQUAL, INT, -1044)                                                       \
  X(UNIVERSE_SIZE, INT, -1045)                                                 \
  X(WIN_BASE, INT, -1046)                                                      \
  X(WIN_CREATE_FLAVOR, INT, -1047)                                             \
  X(WIN_DISP_UNIT, INT, -1048)                                                 \
  X(WIN_FLAVOR_ALLOCATE, INT, -1049)                                           \
  X(WIN_FLAVOR_CREATE, INT, -1050)                                             \
  X(WIN_FLAVOR_DYNAMIC, INT, -1051)                                            \
  X(WIN_FLAVOR_SHARED, INT, -1052)                                             \
  X(WIN_MODEL, INT, -1053)                                                     \
  X(WIN_SEPARATE, INT, -1054)                                                  \
  X(WIN_SIZE, INT, -1055)                                                      \
  X(WIN_UNIFIED, INT, -1056)                                                   \
  X(WTIME_IS_GLOBAL, INT, -1057)                                               \
  X(COMM_NULL, HANDLE, JM_XLA_H(COMM, 0))                                      \
  X(COMM_SELF, HANDLE, JM_XLA_H(COMM, 1))                                      \
  X(COMM_WORLD, HANDLE, JM_XLA_H(COMM, 2))                                     \
  X(COMM_DUP_FN, FUNCTION, 0)                                                  \
  X(COMM_NULL_COPY_FN, FUNCTION, 0)                                            \
  X(COMM_NULL_DELETE_FN, FUNCTION, 0)                                          \
  X(DUP_FN, FUNCTION, 0)                                                       \
  X(NULL_COPY_FN, FUNCTION, 0)                                                 \
  X(CONVERSION_FN_NULL, FUNCTION, 0)                                           \
  X(2DOUBLE_PRECISION, HANDLE, JM_XLA_H(DATATYPE, 1))                          \
  X(2INT, HANDLE, JM_XLA_H(DATATYPE, 2))                                       \
  X(2INTEGER, HANDLE, JM_XLA_H(DATATYPE, 3))                                   \
  X(2REAL, HANDLE, JM_XLA_H(DATATYPE, 4))                                      \
  X(AINT, HANDLE, JM_XLA_H(DATATYPE, 5))                                       \
  X(BYTE, HANDLE, JM_XLA_H(DATATYPE, 6))                                       \
  X(CHAR, HANDLE, JM_XLA_H(DATATYPE, 7))                                       \
  X(CHARACTER, HANDLE, JM_XLA_H(DATATYPE, 8))                                  \
  X(COMPLEX, HANDLE, JM_XLA_H(DATATYPE, 9))                                    \
  X(COMPLEX16, HANDLE, JM_XLA_H(DATATYPE, 10))                                 \
  X(COMPLEX32, HANDLE, JM_XLA_H(DATATYPE, 11))                                 \
  X(COMPLEX8, HANDLE, JM_XLA_H(DATATYPE, 12))                                  \
  X(COUNT, HANDLE, JM_XLA_H(DATATYPE, 13))                                     \
  X(CXX_BOOL, HANDLE, JM_XLA_H(DATATYPE, 14))                                  \
  X(CXX_DOUBLE_COMPLEX, HANDLE, JM_XLA_H(DATATYPE, 15))                        \
  X(CXX_FLOAT_COMPLEX, HANDLE, JM_XLA_H(DATATYPE, 16))                         \
  X(CXX_LONG_DOUBLE_COMPLEX, HANDLE, JM_XLA_H(DATATYPE, 17))                   \
  X(C_BOOL, HANDLE, JM_XLA_H(DATATYPE, 18))                                    \
  X(C_COMPLEX, HANDLE, JM_XLA_H(DATATYPE, 19))                                 \
  X(C_DOUBLE_COMPLEX, HANDLE, JM_XLA_H(DATATYPE, 20))                          \
  X(C_FLOAT_COMPLEX, HANDLE, JM_XLA_H(DATATYPE, 21))                           \
  X(C_LONG_DOUBLE_COMPLEX, HANDLE, JM_XLA_H(DATATYPE, 22))                     \
  X(DATATYPE_NULL, HANDLE, JM_XLA_H(DATATYPE, 0))                              \
  X(DOUBLE, HANDLE, JM_XLA_H(DATATYPE, 23))                                    \
  X(DOUBLE_COMPLEX, HANDLE, JM_XLA_H(DATATYPE, 24))                            \
  X(DOUBLE_INT, HANDLE, JM_XLA_H(DATATYPE, 25))                                \
  X(DOUBLE_PRECISION, HANDLE, JM_XLA_H(DATATYPE, 26))                          \
  X(FLOAT, HANDLE, JM_XLA_H(DATATYPE, 27))                                     \
  X(FLOAT_INT, HANDLE, JM_XLA_H(DATATYPE, 28))                                 \
  X(INT, HANDLE, JM_XLA_H(DATATYPE, 29))                                       \
  X(INT16_T, HANDLE, JM_XLA_H(DATATYPE, 30))                                   \
  X(INT32_T, HANDLE, JM_XLA_H(DATATYPE, 31))                                   \
  X(INT64_T, HANDLE, JM_XLA_H(DATATYPE, 32))                                   \
  X(INT8_T, HANDLE, JM_XLA_H(DATATYPE, 33))                                    \
  X(INTEGER, HANDLE, JM_XLA_H(DATATYPE, 34))                                   \
  X(INTEGER1, HANDLE, JM_XLA_H(DATATYPE, 35))                                  \
  X(INTEGER2, HANDLE, JM_XLA_H(DATATYPE, 36))                                  \
  X(INTEGER4, HANDLE, JM_XLA_H(DATATYPE, 37))                                  \
  X(INTEGER8, HANDLE, JM_XLA_H(DATATYPE, 38))                                  \
  X(LOGICAL, HANDLE, JM_XLA_H(DATATYPE, 39))                                   \
  X(LONG, HANDLE, JM_XLA_H(DATATYPE, 40))                                      \
  X(LONG_DOUBLE, HANDLE, JM_XLA_H(DATATYPE, 41))                               \
  X(LONG_DOUBLE_INT, HANDLE, JM_XLA_H(DATATYPE, 42))                           \
  X(LONG_INT, HANDLE, JM_XLA_H(DATATYPE, 43))                                  \
  X(LONG_LONG, HANDLE, JM_XLA_H(DATATYPE, 44))                                 \
  X(LONG_LONG_INT, HANDLE, JM_XLA_H(DATATYPE, 45))                             \
  X(OFFSET, HANDLE, JM_XLA_H(DATATYPE, 46))                                    \
  X(PACKED, HANDLE, JM_XLA_H(DATATYPE, 47))                                    \
  X(REAL, HANDLE, JM_XLA_H(DATATYPE, 48))                                      \
  X(REAL16, HANDLE, JM_XLA_H(DATATYPE, 49))                                    \
  X(REAL4, HANDLE, JM_XLA_H(DATATYPE, 50))                                     \
  X(REAL8, HANDLE, JM_XLA_H(DATATYPE, 51))                                     \
  X(SHORT, HANDLE, JM_XLA_H(DATATYPE, 52))                                     \
  X(SHORT_INT, HANDLE, JM_XLA_H(DATATYPE, 53))                                 \
  X(SIGNED_CHAR, HANDLE, JM_XLA_H(DATATYPE, 54))                               \
  X(UINT16_T, HANDLE, JM_XLA_H(DATATYPE, 55))                                  \
  X(UINT32_T, HANDLE, JM_XLA_H(DATATYPE, 56))                                  \
  X(UINT64_T, HANDLE, JM_XLA_H(DATATYPE, 57))                                  \
  X(UINT8_T, HANDLE, JM_XLA_H(DATATYPE, 58))                                   \
  X(UNSIGNED, HANDLE, JM_XLA_H(DATATYPE, 59))                                  \
  X(UNSIGNED_CHAR, HANDLE, JM_XLA_H(DATATYPE, 60))                             \
  X(UNSIGNED_LONG, HANDLE, JM_XLA_H(DATATYPE, 61))                             \
  X(UNSIGNED_LONG_LONG, HANDLE, JM_XLA_H(DATATYPE, 62))                        \
  X(UNSIGNED_SHORT, HANDLE, JM_XLA_H(DATATYPE, 63))                            \
  X(WCHAR, HANDLE, JM_XLA_H(DATATYPE, 64))                                     \
  X(NULL_DELETE_FN, FUNCTION, 0)                                               \
  X(ERRHANDLER_NULL, HANDLE, JM_XLA_H(ERRHANDLER, 0))                          \
  X(ERRORS_ARE_FATAL, HANDLE, JM_XLA_H(ERRHANDLER, 1))                         \
  X(ERRORS_RETURN, HANDLE, JM_XLA_H(ERRHANDLER, 2))                            \
  X(FILE_NULL, HANDLE, JM_XLA_H(FILE, 0))                                      \
  X(F_STATUSES_IGNORE, POINTER, 1)                                             \
  X(F_STATUS_IGNORE, POINTER, 2)                                               \
  X(GROUP_EMPTY, HANDLE, JM_XLA_H(GROUP, 1))                                   \
  X(GROUP_NULL, HANDLE, JM_XLA_H(GROUP, 0))                                    \
  X(INFO_ENV, HANDLE, JM_XLA_H(INFO, 1))                                       \
  X(INFO_NULL, HANDLE, JM_XLA_H(INFO, 0))                                      \
  X(MESSAGE_NO_PROC, HANDLE, JM_XLA_H(MESSAGE, 1))                             \
  X(MESSAGE_NULL, HANDLE, JM_XLA_H(MESSAGE, 0))                                \
  X(DISPLACEMENT_CURRENT, OFFSET, -54278278)                                   \
  X(BAND, HANDLE, JM_XLA_H(OP, 1))                                             \
  X(BOR, HANDLE, JM_XLA_H(OP, 2))                                              \
  X(BXOR, HANDLE, JM_XLA_H(OP, 3))                                             \
  X(LAND, HANDLE, JM_XLA_H(OP, 4))                                             \
  X(LOR, HANDLE, JM_XLA_H(OP, 5))                                              \
  X(LXOR, HANDLE, JM_XLA_H(OP, 6))                                             \
  X(MAX, HANDLE, JM_XLA_H(OP, 7))                                              \
  X(MAXLOC, HANDLE, JM_XLA_H(OP, 8))                                           \
  X(MIN, HANDLE, JM_XLA_H(OP, 9))                                              \
  X(MINLOC, HANDLE, JM_XLA_H(OP, 10))                                          \
  X(NO_OP, HANDLE, JM_XLA_H(OP, 11))                                           \
  X(OP_NULL, HANDLE, JM_XLA_H(OP, 0))                                          \
  X(PROD, HANDLE, JM_XLA_H(OP, 12))                                            \
  X(REPLACE, HANDLE, JM_XLA_H(OP, 13))                                         \
  X(SUM, HANDLE, JM_XLA_H(OP, 14))                                             \
  X(REQUEST_NULL, HANDLE, JM_XLA_H(REQUEST, 0))                                \
  X(STATUSES_IGNORE, POINTER, 3)                                               \
  X(STATUS_IGNORE, POINTER, 4)                                                 \
  X(TYPE_DUP_FN, FUNCTION, 0)                                                  \
  X(TYPE_NULL_COPY_FN, FUNCTION, 0)                                            \
  X(TYPE_NULL_DELETE_FN, FUNCTION, 0)                                          \
  X(WIN_NULL, HANDLE, JM_XLA_H(WIN, 0))                                        \
  X(WIN_DUP_FN, FUNCTION, 0)                                                   \
  X(WIN_NULL_COPY_FN, FUNCTION, 0)                                             \
  X(WIN_NULL_DELETE_FN, FUNCTION, 0)                                           \
  X(ARGV_NULL, POINTER, 5)                                                     \
  X(ARGVS_NULL, POINTER, 6)                                                    \
  X(ERRCODES_IGNORE, POINTER, 7)                                               \
  X(UNWEIGHTED, POINTER, 8)                                                    \
  X(WEIGHTS_EMPTY, POINTER, 9)                                                 \
  X(BOTTOM, POINTER, 0)                                                        \
  X(IN_PLACE, POINTER, 10)

#define JM_XLA_ENUM_VALUE(name, kind, value) JM_XLA_##name = (value),
enum { JM_XLA_CONSTANTS(JM_XLA_ENUM_VALUE) };
#undef JM_XLA_ENUM_VALUE
#define JM_XLA_N_SENTINELS 11

/* The calls the C core serves: X(return type, name, parameters,
 * arguments), MPIABI types (handles are jm_xla_handle). */
#define JM_XLA_CORE_CALLS(X)                                                  \
  X(int, Abort, (jm_xla_handle comm, int code), (comm, code))                 \
  X(int, Allgather,                                                           \
    (const void *s, int sn, jm_xla_handle st, void *r, int rn,                \
     jm_xla_handle rt, jm_xla_handle comm),                                   \
    (s, sn, st, r, rn, rt, comm))                                             \
  X(int, Allreduce,                                                           \
    (const void *s, void *r, int n, jm_xla_handle t, jm_xla_handle op,        \
     jm_xla_handle comm),                                                     \
    (s, r, n, t, op, comm))                                                   \
  X(int, Comm_free, (jm_xla_handle * comm), (comm))                           \
  X(int, Comm_rank, (jm_xla_handle comm, int *rank), (comm, rank))            \
  X(int, Comm_size, (jm_xla_handle comm, int *size), (comm, size))            \
  X(int, Comm_split,                                                          \
    (jm_xla_handle comm, int color, int key, jm_xla_handle *out),             \
    (comm, color, key, out))                                                  \
  X(int, Finalize, (void), ())                                                \
  X(int, Finalized, (int *flag), (flag))                                      \
  X(int, Get_library_version, (char *text, int *len), (text, len))           \
  X(int, Get_version, (int *version, int *subversion), (version, subversion)) \
  X(int, Init, (int *argc, char ***argv), (argc, argv))                       \
  X(int, Init_thread, (int *argc, char ***argv, int required, int *provided), \
    (argc, argv, required, provided))                                         \
  X(int, Initialized, (int *flag), (flag))                                    \
  X(int, Irecv,                                                               \
    (void *buf, int n, jm_xla_handle t, int source, int tag,                  \
     jm_xla_handle comm, jm_xla_handle *req),                                 \
    (buf, n, t, source, tag, comm, req))                                      \
  X(int, Is_thread_main, (int *flag), (flag))                                 \
  X(int, Isend,                                                               \
    (const void *buf, int n, jm_xla_handle t, int dest, int tag,              \
     jm_xla_handle comm, jm_xla_handle *req),                                 \
    (buf, n, t, dest, tag, comm, req))                                        \
  X(int, Query_thread, (int *provided), (provided))                           \
  X(int, Reduce_scatter,                                                      \
    (const void *s, void *r, const int *counts, jm_xla_handle t,              \
     jm_xla_handle op, jm_xla_handle comm),                                   \
    (s, r, counts, t, op, comm))                                              \
  X(int, Sendrecv,                                                            \
    (const void *s, int sn, jm_xla_handle st, int dest, int stag, void *r,    \
     int rn, jm_xla_handle rt, int source, int rtag, jm_xla_handle comm,      \
     jm_xla_status *status),                                                  \
    (s, sn, st, dest, stag, r, rn, rt, source, rtag, comm, status))           \
  X(int, Wait, (jm_xla_handle * req, jm_xla_status *status), (req, status))

/* The table the core hands to the surface (jaxmpi_xla_attach). `version`
 * is JM_XLA_CALLS_VERSION: a core and a surface from different builds
 * refuse each other. */
#define JM_XLA_CALLS_VERSION 1
#define JM_XLA_DECLARE_CALL(ret, name, params, args) ret(*name) params;
typedef struct jm_xla_calls {
  int version;
  JM_XLA_CORE_CALLS(JM_XLA_DECLARE_CALL)
  /* The message of JM_XLA_ERR_NATIVE, this thread's last failed call. */
  int (*error_string)(int code, char *text, int *len);
} jm_xla_calls;
#undef JM_XLA_DECLARE_CALL

/* Error codes of the layer (error classes are 1 to 61 and ERR_LASTCODE
 * is 0x3fff): the message is the calling thread's last one, which
 * MPI_Error_string returns (XLA calls it at once, on the same thread). */
#define JM_XLA_ERR_NATIVE 0x3ff0   /* a call the core served failed */
#define JM_XLA_ERR_UNSERVED 0x3ff1 /* a STUB: not served */
#define JM_XLA_ERR_DETACHED 0x3ff2 /* a CORE call before the core attached */

#endif
