#!/usr/bin/env python3
"""The mutation check: does the test suite catch plausible bugs?

Each mutant is one small change to the source (wrong root, swapped source
and dest, a dropped transpose term, an off-by-one count, ...). For each, a
copy of the tree is made, the mutant applied (its old text must occur
exactly once), the C core built where C changed, and the mutant's test files
run under mpiexec at each rank count (2 and 3 by default), each under a
timeout. A mutant is killed when a run fails (a hang that the timeout ends
counts, and says so); it survives when every run passes. Survivors not in
DOCUMENTED_SURVIVORS (CONTRIBUTING.md says why each is there) make the
script exit non-zero, as does a mutant that does not apply or build, or an
unmutated copy whose tests fail.

Run from the repository root with the project's environment, e.g.

    .venv/bin/python scripts/mutants.py              # every mutant
    .venv/bin/python scripts/mutants.py --list
    .venv/bin/python scripts/mutants.py --only c-sendrecv-swap --ranks 2

The copy holds the working tree's files (tracked and untracked, not
ignored), so uncommitted tests are what runs. The copy's src/ goes first on
PYTHONPATH; the environment's installed jaxmpi is never used (checked).
Costs (a loaded 2-core machine): a C rebuild about a minute; a killed mutant
seconds to a minute; a survivor the full time of its files at every rank
count.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

P2P = "tests/mpi/test_p2p.py"
AD = "tests/mpi/test_autodiff.py"
COLL = "tests/mpi/test_collectives.py"
INPL = "tests/mpi/test_in_place.py"
ORD = "tests/mpi/test_ordering.py"
VAL = "tests/mpi/test_validation.py"
BAD = "tests/mpi/test_bad_input.py"
GPU = "tests/gpu/test_gpu.py"
NB = "tests/mpi/test_nonblocking.py"
NBV = "tests/mpi/test_nonblocking_v.py"
VC = "tests/mpi/test_vcollectives.py"
RS = "tests/mpi/test_reduce_scatter_exscan.py"
HALO = "tests/mpi/test_halo.py"
PT = "tests/mpi/test_pytree.py"
CHK = "tests/mpi/test_check_default.py"
NBT = "tests/mpi/test_nonblocking_topology.py"
# The GPU path of the non-blocking ops over a stand-in CUDA driver (no GPU).
GPUREQ = "tests/launch/test_gpu_requests.py"
DEV_ORD = "tests/devices/test_ordering.py"
DEV_CART = "tests/devices/test_devicecart.py"
DEV_AXIS = "tests/devices/test_allreduce_axis.py"
DEV_SHARDED = "tests/devices/test_sharded.py"
REC = "tests/mpi/test_record_ring.py"
# The planted hangs and the trace (each run starts its own MPI jobs).
REC_JOBS = "tests/launch/test_record.py"
# Plain JAX programs over jaxmpi's MPI layer for XLA (run under the route).
NATIVE = "tests/native/test_collectives.py"


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    what: str
    tests: tuple
    gpu: bool = False  # only a GPU run can kill it
    select: str = ""  # pytest -k: the tests that concern it (faster runs)
    devices: int = 1  # forced host devices per process (tests/devices)
    route: bool = False  # run under python -m jaxmpi.distributed (tests/native)


MUTANTS = [
    # ---- C core: point to point (csrc/p2p.c) ----
    Mutant("c-sendrecv-swap", "csrc/p2p.c",
           "jm_Sendrecv(x->data, x->count, x->elsize, x->mpi, c->dest,\n"
           "                       c->sendtag, y->data, y->count, y->elsize, y->mpi,\n"
           "                       c->source,",
           "jm_Sendrecv(x->data, x->count, x->elsize, x->mpi, c->source,\n"
           "                       c->sendtag, y->data, y->count, y->elsize, y->mpi,\n"
           "                       c->dest,",
           "sendrecv: source and dest swapped in the MPI call", (P2P, AD, INPL)),
    Mutant("c-exchange-swap", "csrc/p2p.c",
           "recv ? c->sources[i] : c->dests[i], recv,",
           "recv ? c->dests[i] : c->sources[i], recv,",
           "neighbor_exchange: every pair's source and dest swapped", (P2P, AD)),
    Mutant("c-exchange-check-off-by-one", "csrc/p2p.c",
           "  for (int i = 0; i < n; i++) {\n    XLA_FFI_Error *err = jm_check_received(",
           "  for (int i = 0; i < n - 1; i++) {\n    XLA_FFI_Error *err = jm_check_received(",
           "neighbor_exchange: the last pair's received size is not checked", (P2P,)),
    Mutant("c-shadow-cache-stale", "csrc/shadow.h",
           "  if (last->valid && last->comm == comm &&\n"
           "      last->freed ==\n"
           "          atomic_load_explicit(&jm_shadows_freed, memory_order_acquire))",
           "  if (last->valid && last->comm == comm)",
           "the inline shadow lookup keeps a freed communicator's shadow",
           ("tests/mpi/test_check_default.py",)),
    Mutant("c-proc-null-no-zeros", "csrc/check.c",
           "    return jm_zero(c, y->data, (size_t)y->count * y->elsize);",
           "    return NULL;",
           "a receive from MPI.PROC_NULL leaves the template's data, not zeros",
           (P2P,)),
    Mutant("c-probe-size-unchecked", "csrc/check.c",
           "  if (got < 0 || got == want) return NULL;",
           "  if (got < 0 || got >= 0) return NULL;",
           "the receive's probe (default check) lets a message of another size "
           "through to MPI", (CHK, P2P)),
    Mutant("c-probe-late-as-found", "csrc/check.c",
           "  if (!found) return NULL;",
           "  if (found < 0) return NULL;",
           "the receive's probe takes a message not there yet for one that is",
           (CHK, P2P)),
    # ---- C core: collectives (csrc/collectives.c) ----
    Mutant("c-reduce-root", "csrc/collectives.c",
           "c->op, c->root, c->comm));\n  return root ? NULL : pass_through(c, x, y);",
           "c->op, 0, c->comm));\n  return root ? NULL : pass_through(c, x, y);",
           "reduce: MPI call made with root 0 whatever the root", (COLL,),
           select="test_reduce"),
    Mutant("c-bcast-root", "csrc/collectives.c",
           "jm_Bcast(y->data, x->count, x->elsize, x->mpi, c->root, c->comm)",
           "jm_Bcast(y->data, x->count, x->elsize, x->mpi, 0, c->comm)",
           "bcast: MPI call made with root 0 whatever the root", (COLL,),
           select="test_bcast"),
    Mutant("c-no-in-place", "csrc/collectives.c",
           "return x->data == y->data && x->count ? jm_const.in_place : x->data;",
           "return (void)y, x->data;",
           "aliased send and receive buffers passed as such, not MPI_IN_PLACE",
           (COLL, INPL), select="test_allreduce or test_scan or test_loop_carry"),
    Mutant("c-alltoall-count", "csrc/collectives.c",
           "jm_Alltoall(s, y->data, block, x->elsize, x->mpi, c->comm)",
           "jm_Alltoall(s, y->data, block - 1, x->elsize, x->mpi, c->comm)",
           "alltoall: one element short per block (off-by-one count)", (COLL,),
           select="test_alltoall"),
    Mutant("c-allgather-count", "csrc/collectives.c",
           "jm_Allgather(x->data, y->data, x->count, x->elsize, x->mpi, c->comm)",
           "jm_Allgather(x->data, y->data, x->count - (x->count > 1), x->elsize, "
           "x->mpi, c->comm)",
           "allgather: one element short per rank (off-by-one count)", (COLL,),
           select="test_allgather"),
    Mutant("c-scatter-root", "csrc/collectives.c",
           "y->mpi, c->root, c->comm));",
           "y->mpi, 0, c->comm));",
           "scatter: MPI call made with root 0 whatever the root", (COLL,),
           select="test_scatter"),
    Mutant("c-exchange-in-place-stale-block", "csrc/collectives.c",
           "    memcpy(scratch, mine, (size_t)n * y->elsize);\n", "",
           "the exchange in place (alltoall from 2 MiB blocks, alltoallv with "
           "equal counts) sends the scratch block without copying the "
           "outgoing block into it", (VC, INPL), select="equal or large"),
    # ---- C core: half-precision reductions (csrc/halfops.c) ----
    Mutant("c-half-sum-op", "csrc/halfops.c",
           "JM_HALF_FN(t, sum, x + y)", "JM_HALF_FN(t, sum, x - y)",
           "float16/bfloat16 MPI.SUM computes a difference (wrong reduction op)",
           (COLL,), select="float16 or half"),
    Mutant("c-half-rounding", "csrc/halfops.c",
           "if (rem > half || (rem == half && (r & 1u))) r++;",
           "if (rem >= half) r++;",
           "float32 -> float16 rounds ties away from zero, not to even", (COLL,),
           select="float16 or half"),
    # ---- C core: CUDA staging (csrc/cuda_staging.c) ----
    Mutant("c-cuda-skip-stream-sync", "csrc/cuda_staging.c",
           "  CUresult rc = cu.StreamSynchronize(stream);\n  if (rc != JM_CUDA_SUCCESS) {\n"
           "    unwind(&p, p.n, stream);",
           "  CUresult rc = JM_CUDA_SUCCESS;\n  if (rc != JM_CUDA_SUCCESS) {\n"
           "    unwind(&p, p.n, stream);",
           "staged GPU data sent before the stream's copies finish",
           (GPUREQ,)),
    Mutant("c-cuda-istart-no-copy-sync", "csrc/cuda_staging.c",
           "rc = cu.StreamSynchronize(st->copy);\n    }\n",
           "rc = JM_CUDA_SUCCESS;\n    }\n",
           "a GPU start posts MPI before its device->host copies finish",
           (GPUREQ,)),
    Mutant("c-cuda-wait-no-stream-wait", "csrc/cuda_staging.c",
           "rc = cu.StreamWaitEvent((CUstream)c->stream, st->s->ev, 0);",
           "rc = JM_CUDA_SUCCESS;",
           "XLA's stream does not wait for a GPU wait's copies back",
           (GPUREQ,)),
    Mutant("c-cuda-wait-copy-before-mpi", "csrc/request_gpu.c",
           "  err = jm_req_complete(r, moved);\n"
           "  if (!err) err = jm_cuda_stage_finish(&r->call, r->gpu, results, "
           "c->nrets);\n",
           "  err = jm_cuda_stage_finish(&r->call, r->gpu, results, c->nrets);\n"
           "  XLA_FFI_Error *done = jm_req_complete(r, moved);\n"
           "  if (!err) err = done;\n",
           "a GPU wait enqueues the copies back before MPI completed",
           (GPUREQ,)),
    # ---- non-blocking operations (csrc/starts.c, src/jaxmpi/_prims_*.py)
    Mutant("c-isendrecv-swap", "csrc/starts.c",
           "c->source,\n                    c->recvtag, c->comm, &r->reqs[0]);",
           "c->dest,\n                    c->recvtag, c->comm, &r->reqs[0]);",
           "isendrecv receives from dest instead of source", (NB,)),
    Mutant("c-ineighbor-dest", "csrc/starts.c",
           "rc = jm_Isend(x->data, x->count, x->elsize, x->mpi, c->dests[i],",
           "rc = jm_Isend(x->data, x->count, x->elsize, x->mpi, c->sources[i],",
           "ineighbor_exchange sends pair i to sources[i]", (NB,)),
    Mutant("py-isendrecv-backward-direction", "src/jaxmpi/_prims_p2p.py",
           'return dict(comm=comm, source=spec.param("dest"),\n'
           '                dest=spec.param("source"),',
           'return dict(comm=comm, source=spec.param("source"),\n'
           '                dest=spec.param("dest"),',
           "isendrecv's backward request sends the same way as the op", (NB,)),
    Mutant("py-irecv-backward-peer", "src/jaxmpi/_prims_p2p.py",
           'return dict(comm=comm, dest=spec.param("source"),',
           'return dict(comm=comm, dest=MPI.PROC_NULL,',
           "irecv's backward request sends its cotangent nowhere", (NB,)),
    Mutant("py-ialltoall-vmap-batch-in-front", "src/jaxmpi/_prims_collectives.py",
           "results=(1,), backward=blocking_backward(alltoall_p),\n"
           "    batch_axes=lambda **_: (1, [1, 1])",
           "results=(1,), backward=blocking_backward(alltoall_p),\n"
           "    batch_axes=lambda **_: (0, [0, 0])",
           "vmap of ialltoall splits the batch axis over the ranks", (NB,)),
    Mutant("py-igather-vmap-result-axis", "src/jaxmpi/_prims_collectives.py",
           "batch_axes=rooted_axes([0, 1], [0])",
           "batch_axes=rooted_axes([0, 0], [0])",
           "vmap of igather says the root's result is batched in front", (NB,)),
    Mutant("c-ireduce-scatter-counts-reversed", "csrc/starts.c",
           "    ints[j] = (int)counts[j];\n",
           "    ints[j] = (int)counts[c->size - 1 - j];\n",
           "ireduce_scatter gives rank r the block of counts[size - 1 - r]",
           (NB,), select="reducing"),
    Mutant("py-iexscan-no-identity", "src/jaxmpi/_prims_collectives.py",
           "after_wait=_identity_on_rank_0)",
           "after_wait=None)",
           "iexscan leaves rank 0 the result MPI leaves undefined", (NB,),
           select="reducing"),
    Mutant("c-iv-displacements-in-rows", "csrc/starts.c",
           "    at += n; /* both at most INT_MAX: no overflow */",
           "    at += rows;",
           "the non-blocking v-ops' displacements count rows, not elements",
           (NBV,)),
    Mutant("py-ialltoallv-result-rows", "src/jaxmpi/_prims_collectives.py",
           "        x, _rows(x, sum(recvcounts))],",
           "        x, _rows(x, sum(sendcounts))],",
           "ialltoallv's result has sum(sendcounts) rows, not sum(recvcounts)",
           (NBV,)),
    Mutant("py-iallgatherv-vmap-result-axis", "src/jaxmpi/_prims_collectives.py",
           "backward=blocking_backward(allgatherv_p),\n"
           "    batch_axes=lambda **_: (1, [1, 1])",
           "backward=blocking_backward(allgatherv_p),\n"
           "    batch_axes=lambda **_: (1, [1, 0])",
           "vmap of iallgatherv says its result is batched in front", (NBV,)),
    Mutant("py-ihalo-wait-pieces-reversed", "src/jaxmpi/_topology.py",
           "return self.fill(keep, [y for ys in results for y in ys])",
           "return self.fill(keep, [y for ys in results for y in ys[::-1]])",
           "ihalo_exchange's wait writes each request's messages into the "
           "halo of other directions", (NBT,)),
    Mutant("py-ineighbor-backward-direction", "src/jaxmpi/_prims_p2p.py",
           'return dict(comm=comm, sources=spec.param("dests"),\n'
           '                dests=spec.param("sources"),',
           'return dict(comm=comm, sources=spec.param("sources"),\n'
           '                dests=spec.param("dests"),',
           "ineighbor_exchange's backward request sends the cotangents the "
           "way the forward messages went", (NBT, NB)),
    # ---- the collectives of issue 12 -----------------------------------------
    # reduce_scatter's tangent is allreduce's, block by block: the same
    # bug in the one tangent of both (py-max-ties), run by reduce_scatter's
    # tests.
    Mutant("py-reduce-scatter-max-ties", "src/jaxmpi/_prims_collectives.py",
           "            return [y], [dy / count]\n",
           "            return [y], [dy]\n",
           "reduce_scatter MAX/MIN: tied ranks each get the whole tangent", (RS,)),
    Mutant("py-exscan-transpose-inclusive", "src/jaxmpi/_prims_collectives.py",
           "return [total - upto]", "return [total - upto + ct]",
           "exscan's transpose includes the own cotangent", (RS,)),
    Mutant("py-allgatherv-transpose-op", "src/jaxmpi/_prims_collectives.py",
           "return reduce_scatter_p.bind(ct, comm=comm, op=sum_op(ct.dtype),\n"
           "                                 counts=counts)",
           "return reduce_scatter_p.bind(ct, comm=comm, op=sum_op(ct.dtype),\n"
           "                                 counts=counts[::-1])",
           "allgatherv's transpose scatters the blocks in reverse rank order",
           (VC,)),
    Mutant("py-pytree-offsets", "src/jaxmpi/_pytree.py",
           "offsets = np.cumsum([0] + sizes)",
           "offsets = np.cumsum([0] + sizes[::-1])",
           "a pytree's leaves are cut from the packed buffer at wrong offsets",
           (PT,)),
    Mutant("py-halo-direction", "src/jaxmpi/_topology.py",
           "            sources.append(source)\n"
           "            dests.append(dest)",
           "            sources.append(dest)\n"
           "            dests.append(source)",
           "halo_exchange receives each piece from the opposite neighbour",
           (HALO,)),
    Mutant("py-eager-no-check", "src/jaxmpi/_eager.py",
           "    _core.get().check_eager(fn, comm, op_handle, x, root)\n",
           "",
           "an eager call on the direct path skips the cross-rank check",
           ("tests/mpi/test_check_default.py",)),
    Mutant("py-eager-scan-exclusive", "src/jaxmpi/_eager.py",
           "lambda s, r, t: comm.Scan([s, s.size, t], [r, r.size, t],",
           "lambda s, r, t: comm.Exscan([s, s.size, t], [r, r.size, t],",
           "an eager scan on the direct path is exclusive",
           ("tests/mpi/test_ordering_dispatch.py",)),
    Mutant("py-region-no-marker", "src/jaxmpi/_region.py",
           "        jc.dispatch.runtime_tokens.output_runtime_tokens[MARKER_KEY] = marker\n",
           "",
           "jaxmpi.jit leaves no marker: an eager call can overtake a "
           "pending region",
           ("tests/mpi/test_ordering_dispatch.py",)),
    Mutant("py-halo-stale-wrap", "src/jaxmpi/_topology.py",
           "pieces.append(lax.slice(out[k], lo, hi))",
           "pieces.append(lax.slice(arrays[k], lo, hi))",
           "halo_exchange sends rims whose wrapped halo is not yet filled",
           (HALO,)),
    # ---- Python: the rules of each op (src/jaxmpi/_prims_*.py) ----
    Mutant("py-reduce-transpose-term", "src/jaxmpi/_prims_collectives.py",
           "return [b if comm.rank == root else b + ct]", "return [b]",
           "reduce's transpose drops the own cotangent off the root", (AD,)),
    Mutant("py-scan-transpose-term", "src/jaxmpi/_prims_collectives.py",
           "return [total - upto + ct]", "return [total - upto]",
           "scan's transpose is exclusive (drops the own cotangent)", (AD,)),
    Mutant("py-bcast-transpose-template", "src/jaxmpi/_prims_collectives.py",
           "return [total if comm.rank == root else zeros_from(total, x)]",
           "return [total]",
           "bcast's transpose gives the templates a cotangent", (AD,)),
    Mutant("py-sendrecv-transpose-direction", "src/jaxmpi/_prims_p2p.py",
           "comm=comm, source=dest,\n        dest=source, sendtag=_backward_tag(back, comm),",
           "comm=comm, source=source,\n        dest=dest, sendtag=_backward_tag(back, comm),",
           "sendrecv's transpose sends the same way as the op", (AD,)),
    Mutant("py-exchange-transpose-direction", "src/jaxmpi/_prims_p2p.py",
           "*back, comm=comm, sources=dests, dests=sources,",
           "*back, comm=comm, sources=sources, dests=dests,",
           "neighbor_exchange's transpose sends the same way as the op", (AD,)),
    Mutant("py-send-transpose-peer", "src/jaxmpi/_prims_p2p.py",
           "return recv_p.bind(zeros(x), comm=comm, source=dest,",
           "return recv_p.bind(zeros(x), comm=comm, source=MPI.PROC_NULL,",
           "send's transpose receives nothing (from MPI.PROC_NULL)", (AD,)),
    Mutant("py-backward-tag", "src/jaxmpi/_prims_p2p.py",
           "return tag ^ reserved_tag_bit(comm.tag_ub)", "return tag",
           "transposed messages use the forward tag space", (AD, ORD)),
    Mutant("py-allreduce-adjoint", "src/jaxmpi/_prims_collectives.py",
           'if adjoint == "sum":\n        return allreduce_p.bind(',
           'if adjoint != "sum":\n        return allreduce_p.bind(',
           "allreduce's two adjoint conventions exchanged", (AD,)),
    Mutant("py-allgather-transpose-sum", "src/jaxmpi/_prims_collectives.py",
           "return [parts.sum(axis=0).astype(ct.dtype)]",
           "return [parts[0].astype(ct.dtype)]",
           "allgather's transpose keeps rank 0's cotangent instead of the sum",
           (AD,)),
    Mutant("py-max-ties", "src/jaxmpi/_prims_collectives.py",
           "            return [y], [dy / count]\n",
           "            return [y], [dy]\n",
           "allreduce MAX/MIN: tied ranks each get the whole tangent", (AD,)),
    Mutant("py-alltoall-batch-axis", "src/jaxmpi/_prims_collectives.py",
           "x = jnp.moveaxis(x, d, 1)  # the first axis is split over ranks",
           "x = to_front(x, d)",
           "alltoall's batching rule puts the batch first (dropped axis move)",
           (AD,)),
    Mutant("py-gather-batch-axis", "src/jaxmpi/_prims_collectives.py",
           "return [y], [1 if comm.rank == root else 0]", "return [y], [0]",
           "gather's batched result: batch axis misplaced on the root", (AD,)),
    Mutant("py-sendrecv-alias", "src/jaxmpi/_prims_p2p.py",
           "aliases={1: 0},", "aliases={0: 0},",
           "sendrecv's result aliased to the send buffer, not the template",
           (P2P, INPL)),
    Mutant("py-alltoallv-alias-any-size", "src/jaxmpi/_prims_collectives.py",
           "if comm.size <= 2 and tuple(sendcounts) == tuple(recvcounts):",
           "if tuple(sendcounts) == tuple(recvcounts):",
           "alltoallv's result aliased for equal counts at 3+ ranks too, where "
           "the C core exchanges out of place", (VC,), select="equal"),
    # ---- Python: API and validation (src/jaxmpi/_p2p.py, _parse.py, _validate.py)
    Mutant("py-api-sendrecv-swap", "src/jaxmpi/_p2p.py",
           "sendbuf, recvbuf, source=source, dest=dest, sendtag=sendtag,",
           "sendbuf, recvbuf, source=dest, dest=source, sendtag=sendtag,",
           "sendrecv: source and dest swapped before the primitive", (P2P,)),
    Mutant("py-api-pass-through", "src/jaxmpi/_parse.py",
           "return x if jc.trace_state_clean() else y", "return y",
           "rooted ops hand back the op's result, not x itself (eager)", (COLL,),
           select="root_returns_input"),
    Mutant("py-validate-rank-bound", "src/jaxmpi/_validate.py",
           "if 0 <= v < comm.size or v in allow:",
           "if 0 <= v <= comm.size or v in allow:",
           "a rank equal to the communicator size is accepted (off by one)",
           (VAL,)),
    # ---- Python: several devices per process (tests/devices, 2 devices) ----
    Mutant("py-devices-one-communicator", "src/jaxmpi/_devices.py",
           "comms=tuple(MPI._handleof(d) & 0xFFFFFFFFFFFFFFFF for d in dups))",
           "comms=tuple(MPI._handleof(dups[0]) & 0xFFFFFFFFFFFFFFFF for d in dups))",
           "every device of a process calls MPI on one communicator (silently "
           "wrong sums without checks)", (DEV_ORD,), select="never_share",
           devices=2),
    Mutant("py-devicecart-endpoint-order", "src/jaxmpi/_devices.py",
           "out.append(rank * self.devices + int(np.ravel_multi_index(\n"
           "                    pos, self.mesh_shape)))",
           "out.append(rank + self.cart.Get_size() * int(np.ravel_multi_index(\n"
           "                    pos, self.mesh_shape)))",
           "DeviceCart: a neighbour's endpoint numbered position-major, not "
           "process-major", (DEV_CART,), select="halo_and_neighbours",
           devices=2),
    Mutant("py-axis-allreduce-pieces-local", "src/jaxmpi/_reductions.py",
           "whole = lax.all_gather(mpi_allreduce(piece), axis_name, tiled=True)",
           "whole = lax.all_gather(piece, axis_name, tiled=True)",
           "allreduce(axis_name=...) from 64 KiB: the pieces gathered without "
           "their MPI reduction across processes", (DEV_AXIS,), devices=2),
    Mutant("py-sharded-wait-donates-every-buffer",
           "src/jaxmpi/_dispatch.py",
           "donate += [at + 1 + i for i in spec.results]",
           "donate += [at + 1 + i for i in range(k)]",
           "an eager sharded request's wait donates its send buffers too "
           "(JAX pairs one with the result: XLA copies)", (DEV_SHARDED,),
           select="nonblocking", devices=2),
    Mutant("py-sharded-wait-result-replicated",
           "src/jaxmpi/_sharded.py",
           "result_spec(len(o.shape), r, fn) for o, r in zip(out_leaves, ref)",
           "PartitionSpec() for o, r in zip(out_leaves, ref)",
           "an eager sharded request's result taken from one device for "
           "every shard", (DEV_SHARDED,), select="nonblocking", devices=2),
    # ---- the flight recorder and the trace (csrc/record*.c) ----
    Mutant("c-record-sendrecv-peers-swapped", "csrc/record_ops.c",
           "    w->peer = peer_of(c->source);\n    w->peer2 = peer_of(c->dest);",
           "    w->peer = peer_of(c->dest);\n    w->peer2 = peer_of(c->source);",
           "the flight recorder records a sendrecv's dest as its source (the "
           "wrong peer: a verdict would name the wrong rank)", (REC,),
           select="blocking"),
    Mutant("c-record-recv-peer-is-self", "csrc/record_ops.c",
           "    w->peer = peer_of(c->source);\n    w->tag = c->tag;",
           "    w->peer = peer_of(c->rank);\n    w->tag = c->tag;",
           "the flight recorder records a receive's own rank as its source",
           (REC,), select="starts"),
    Mutant("c-record-wait-not-ended-at-completion", "csrc/request.c",
           "  jm_record_end(r->call.rec, err ? JM_REC_FAILED : JM_REC_DONE);\n"
           "  return err;",
           "  return err;",
           "a wait's record is not ended when its request completes (only "
           "when the request is freed: failed)", (REC,), select="starts"),
    Mutant("c-trace-clocks-not-aligned", "csrc/record.c",
           "        *offset_ns = t - (t0 + (t1 - t0) / 2);",
           "        *offset_ns = 0;",
           "the trace's clocks are not aligned with rank 0's", (REC_JOBS,),
           select="aligned"),
    # ---- C core: XLA's own collectives (csrc/native.c, tests/native) ----
    Mutant("c-native-alltoall-swap", "csrc/native.c",
           "jm_Sendrecv(s, sn, ssize, stype, rank_in(dest), stag, r, rn, rsize,\n"
           "                       rtype, rank_in(source),",
           "jm_Sendrecv(s, sn, ssize, stype, rank_in(source), stag, r, rn, rsize,\n"
           "                       rtype, rank_in(dest),",
           "XLA's all-to-all: each pair's MPI_Sendrecv sends where it should "
           "receive from", (NATIVE,), select="every_collective", route=True),
    Mutant("c-native-allreduce-op", "csrc/native.c",
           "jm_Allreduce(send, r, n, size, type, mop,",
           "jm_Allreduce(send, r, n, size, type, ops[JM_XLA_INDEX(JM_XLA_MAX)],",
           "XLA's all-reduce: every reduction made with MPI_MAX", (NATIVE,),
           select="every_collective", route=True),
    Mutant("c-native-ring-folds-the-output", "csrc/native.c",
           "rc = jm_mpi.Reduce_local(sb + part_at(n, p, in)",
           "rc = jm_mpi.Reduce_local(rb + part_at(n, p, in)",
           "a large all-reduce's ring folds the received part into itself "
           "instead of this process's own part", (NATIVE,),
           select="large_reductions", route=True),
    Mutant("c-native-ring-allgather-part", "csrc/native.c",
           "const int out = (me + 1 - k + p) % p, in = (me - k + p) % p;",
           "const int out = (me + 1 - k + p) % p, in = (me - k - 1 + 2 * p) % p;",
           "a large all-reduce's ring stores each reduced part it is passed "
           "one part too far back", (NATIVE,),
           select="large_reductions", route=True),
    # ---- XLA's collectives in the flight recorder (native.c, test_record) --
    Mutant("c-native-record-one-count", "csrc/native.c",
           "p2p ? &comm->p2p_calls\n"
           "                                                : &comm->calls,",
           "&comm->calls,",
           "a native communicator's collectives and messages numbered "
           "together: a collective's number differs between processes once "
           "a ppermute sends more than it receives", (REC_JOBS,),
           select="native"),
    Mutant("c-native-record-p2p-as-collective", "csrc/native.c",
           "(p2p ? JM_REC_P2P : JM_REC_COLLECTIVE)", "JM_REC_COLLECTIVE",
           "the recorder takes XLA's MPI_Isend/Irecv/Wait for collectives "
           "(a verdict of order mismatches where a process is missing)",
           (REC_JOBS,), select="native"),
]

# Mutants the suite cannot kill, and why (CONTRIBUTING.md has the same list).
DOCUMENTED_SURVIVORS = {
}


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, **kw)


def tree_files():
    out = run(["git", "ls-files", "-z", "--cached", "--others",
               "--exclude-standard"], cwd=ROOT, check=True).stdout
    return sorted({p for p in out.split("\0") if p and os.path.isfile(
        os.path.join(ROOT, p))})


def copy_tree(dst):
    for rel in tree_files():
        target = os.path.join(dst, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, rel), target)


def build(tree, python):
    """Builds the C core in place (src/jaxmpi/_core_*.so). setuptools
    rebuilds an extension when a source is newer than it: after a C mutant,
    not after a Python one."""
    t0 = time.monotonic()
    res = run([python, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree)
    return res.returncode == 0, res.stdout, time.monotonic() - t0


def apply(tree, m, dry=False):
    """Applies m to the copy in tree (dry: only checks that it applies)."""
    path = os.path.join(tree, m.path)
    with open(path) as f:
        text = f.read()
    n = text.count(m.old)
    if n != 1:
        raise SystemExit(f"mutant {m.name}: its old text occurs {n} times in "
                         f"{m.path} (must be exactly once): {m.old!r}")
    if not dry:
        with open(path, "w") as f:
            f.write(text.replace(m.old, m.new))


def env_for(tree, devices=1):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(tree, "src") + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        f" --xla_force_host_platform_device_count={devices}").strip()
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    return env


def launcher(python):
    cmd = os.environ.get("JAXMPI_LAUNCH")
    if cmd:
        return shlex.split(cmd)
    return [os.path.join(os.path.dirname(python), "mpiexec")]


def run_tests(tree, files, n, args, select="", devices=1, route=False):
    """(passed, seconds, what failed) for files at n ranks of `devices`
    devices each in tree (select: a pytest -k expression; all of files if
    empty; route: under python -m jaxmpi.distributed)."""
    cmd = ["timeout", "-k", "10", str(args.run_timeout), *launcher(args.python),
           "-n", str(n), args.python,
           *(["-m", "jaxmpi.distributed"] if route else []),
           "-m", "pytest", "-q", "-x",
           "-p", "no:cacheprovider", "--timeout-method=thread",
           f"--timeout={args.test_timeout}", "--color=no", *files,
           *(["-k", select] if select else [])]
    t0 = time.monotonic()
    res = run(cmd, cwd=tree, env=env_for(tree, devices))
    dt = time.monotonic() - t0
    if res.returncode == 0:
        return True, dt, ""
    if res.returncode in (124, 137):
        return False, dt, f"hung: ended by the {args.run_timeout}s timeout"
    failed = re.findall(r"^FAILED (\S+)", res.stdout, re.M)
    if failed:
        why = failed[0]
    elif "Timeout" in res.stdout:
        why = "a test ran past --timeout (hang)"
    else:
        tail = [l for l in res.stdout.strip().splitlines() if l.strip()]
        why = f"rc={res.returncode}: " + (tail[-1][:120] if tail else "")
    return False, dt, why


def have_gpu():
    return shutil.which("nvidia-smi") is not None and run(
        ["nvidia-smi", "-L"]).returncode == 0


def check_mutant(m, base, args, gpu):
    if m.gpu and not gpu:
        return {"status": "survived (needs a GPU)", "detail": "not run: no GPU",
                "seconds": 0.0}
    t0 = time.monotonic()
    tree = tempfile.mkdtemp(prefix=f"jaxmpi-mutant-{m.name}-", dir=args.workdir)
    try:
        shutil.copytree(base, tree, dirs_exist_ok=True, symlinks=True)
        apply(tree, m)
        if m.path.startswith("csrc/"):
            ok, out, _ = build(tree, args.python)
            if not ok:
                return {"status": "build-failed", "detail": out.strip()[-300:],
                        "seconds": time.monotonic() - t0}
        for n in args.ranks:
            passed, _, why = run_tests(tree, list(m.tests), n, args, m.select,
                                       m.devices, m.route)
            if not passed:
                at = f"{n} ranks" + (f" x {m.devices} devices" if m.devices > 1 else "")
                return {"status": "killed", "detail": f"{at}: {why}",
                        "seconds": time.monotonic() - t0}
        sel = f" -k '{m.select}'" if m.select else ""
        return {"status": "survived",
                "detail": f"{', '.join(m.tests)}{sel} pass at {args.ranks} ranks",
                "seconds": time.monotonic() - t0}
    finally:
        if not args.keep:
            shutil.rmtree(tree, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="list the mutants")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="run this mutant (repeatable; a prefix selects all "
                         "mutants whose name starts with it)")
    ap.add_argument("--ranks", default="2,3", help="rank counts (default 2,3)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="mutants at once (default 1; each runs MPI jobs)")
    ap.add_argument("--python", default=sys.executable,
                    help="the environment's python (default: this one)")
    ap.add_argument("--test-timeout", type=int, default=120,
                    help="seconds per test (pytest-timeout; default 120)")
    ap.add_argument("--run-timeout", type=int, default=900,
                    help="seconds per test run (default 900)")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip running the unmutated tree's tests first")
    ap.add_argument("--workdir", default=None, help="where copies go")
    ap.add_argument("--keep", action="store_true", help="keep the copies")
    args = ap.parse_args()
    args.ranks = [int(r) for r in args.ranks.replace(" ", "").split(",") if r]

    names = [m.name for m in MUTANTS]
    assert len(set(names)) == len(names), "duplicate mutant names"
    if args.list:
        for m in MUTANTS:
            gpu = "  [GPU only]" if m.gpu else ""
            sel = f" -k '{m.select}'" if m.select else ""
            print(f"{m.name:34} {m.path:24} {m.what}{gpu}")
            print(f"{'':34} tests: {' '.join(m.tests)}{sel}")
        print(f"{len(MUTANTS)} mutants")
        return 0
    chosen = [m for m in MUTANTS
              if not args.only or any(m.name.startswith(o) for o in args.only)]
    if not chosen:
        raise SystemExit(f"no mutant matches {args.only}; see --list")
    gpu = have_gpu()

    t_start = time.monotonic()
    base = tempfile.mkdtemp(prefix="jaxmpi-mutant-base-", dir=args.workdir)
    try:
        copy_tree(base)
        for m in chosen:  # fail before any build if a mutant does not apply
            apply(base, m, dry=True)
        ok, out, dt = build(base, args.python)
        if not ok:
            print(out)
            raise SystemExit("the unmutated tree does not build")
        print(f"built the unmutated C core in {dt:.0f}s", flush=True)
        where = run([args.python, "-c", "import jaxmpi; print(jaxmpi.__file__)"],
                    cwd=base, env=env_for(base)).stdout.strip()
        if not where.startswith(os.path.realpath(base)) and not where.startswith(base):
            raise SystemExit(f"the copy's jaxmpi is not the one imported: {where}")
        if not args.no_baseline:
            for d, route in sorted({(m.devices, m.route) for m in chosen}):
                files = sorted({f for m in chosen for f in m.tests
                                if (m.devices, m.route) == (d, route)
                                and not (m.gpu and not gpu)})
                for n in args.ranks if files else []:
                    passed, dt, why = run_tests(base, files, n, args, devices=d,
                                                route=route)
                    at = f"{n} ranks" + (f" x {d} devices" if d > 1 else "")
                    print(f"unmutated: {' '.join(files)} at {at}: "
                          f"{'pass' if passed else 'FAIL ' + why} ({dt:.0f}s)",
                          flush=True)
                    if not passed:
                        raise SystemExit("the unmutated tree fails its tests: "
                                         "fix that first (or --no-baseline)")
        results = {}
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futs = {pool.submit(check_mutant, m, base, args, gpu): m
                    for m in chosen}
            for fut in concurrent.futures.as_completed(futs):
                m = futs[fut]
                results[m.name] = r = fut.result()
                print(f"  {m.name}: {r['status']} ({r['seconds']:.0f}s) "
                      f"{r['detail']}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)

    print()
    print(f"{'mutant':34} {'status':24} {'s':>5}  detail")
    bad = []
    for m in chosen:
        r = results[m.name]
        status = r["status"]
        if status.startswith("survived"):
            if m.name in DOCUMENTED_SURVIVORS:
                status += " (documented)"
            else:
                bad.append(m.name)
        elif status != "killed":
            bad.append(m.name)
        print(f"{m.name:34} {status:24} {r['seconds']:5.0f}  {r['detail']}")
    killed = sum(results[m.name]["status"] == "killed" for m in chosen)
    print(f"\n{killed} of {len(chosen)} killed at ranks {args.ranks}; "
          f"{time.monotonic() - t_start:.0f}s in all")
    if bad:
        print(f"NOT KILLED and not documented: {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
