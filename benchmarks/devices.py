#!/usr/bin/env python
"""Several devices per process: jaxmpi on P processes x n devices against
JAX's own multi-process route and against P*n single-device MPI ranks.

    python benchmarks/devices.py                         # 2 x 4, 4 B .. 64 MiB (9 sizes)
    python benchmarks/devices.py --procs 2 --devices 2   # the 2 x 2 variant
    python benchmarks/devices.py --sizes 4,65536 --repeats 1 --modes loop
    python benchmarks/devices.py --procs 2 --devices 8 --sizes all --repeats 7   # 16 cores

Three jobs, started here under mpiexec, all alive at once and taking turns
size by size (the order rotating), so that a slow spell of a shared machine
falls on all three alike:

  (a) jaxmpi    P processes x n CPU devices each, everything inside
                jax.jit(jax.shard_map(...)) over the process's n devices.
  (b) JAX       jax.distributed (localhost coordinator) with the gloo CPU
                collectives, P processes x n devices, one global (P, n) mesh
                ("p", "d") over all P*n devices.
  (c) ranks     jaxmpi on P*n MPI processes of one device each.

Ops (size: float32 bytes per shard, or per halo message for the ring):

  allreduce-procs  sum over the processes, shard with shard at the same
                   position: (a) jaxmpi.notoken.allreduce inside shard_map;
                   (b) psum over mesh axis "p" (size P); (c) allreduce on
                   COMM_WORLD split by position (rank % n): n groups of P.
  allreduce-all    sum over all P*n shards: (a) allreduce(..., axis_name="d")
                   (XLA over the local devices, MPI across processes);
                   (b) psum over ("p", "d"); (c) allreduce on COMM_WORLD.
  ring             a 1-D periodic halo exchange over all P*n shards in
                   order (shard g = process * n + position), width w =
                   size / 4 floats, so two messages of `size` bytes out and
                   two in per shard: each block is [halo w | own w | halo w].
                   (a) halo_exchange on jaxmpi.DeviceCart(1-D periodic cart
                   of the P processes, the mesh); (b) two ppermutes over
                   ("p", "d") (to the right and to the left) and the halo
                   written from them; (c) halo_exchange on a 1-D periodic
                   cart of the P*n ranks.
  local            the control, no communication: x * 0.5 + 1 on every
                   shard, the same XLA work per shard in all three: what
                   running n devices in one process (a, b) costs against
                   one device per process (c) before any message (and,
                   per call, the dispatch floor). Not judged by a target.

Modes:

  loop    the op inside one jitted lax.fori_loop of k steps (k a traced
          trip count; each step's input is the previous step's result),
          time / k; k grown until one call takes --target seconds; the
          median of --repeats such calls.
  call    one jax.jit call of the op, waited for (block_until_ready): the
          dispatch included; the median over the calls (at least --repeats,
          as many as fit in --repeats x --target seconds, at most 200).
  region  the same through jaxmpi.jit, jaxmpi's jit for per-step calls
          (no runtime token between dispatches: JAX's C++ dispatch path);
          (b) has nothing to gain from it (no effect, its jax.jit calls
          take that path already): its column repeats its call times.

Sizes from --big-from (16 MiB) take seconds per op here: --big-repeats (2)
samples instead of --repeats.

Every time is the slowest process's (mpi4py's COMM_WORLD is the control
plane in all three jobs: a barrier before each timed call or batch, the
maximum over the processes after). Before timing, each op's result at each
size is compared with NumPy's on every shard (rank-dependent data); a
mismatch stops the run. The tables give medians in us per op and the ratios
(a)/(b) and (a)/(c); the TARGET lines judge issue 29's targets: (a) at
least 10x faster than (b) up to 64 KiB, and at most 1.2x (c) from 1 MiB.
See benchmarks/README.md, "Several devices per process".
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
IMPLS = ("a", "b", "c")
NAMES = {"a": "(a) jaxmpi PxN", "b": "(b) JAX gloo", "c": "(c) jaxmpi ranks"}
OPS = ("allreduce-procs", "allreduce-all", "ring", "local")
JUDGED = ("allreduce-procs", "allreduce-all", "ring")  # "local" is a control
MODES = ("loop", "call", "region")
TITLES = {
    "allreduce-procs": "allreduce over the processes (shards at the same position)",
    "allreduce-all": "allreduce over all shards",
    "ring": "ring: 1-D periodic halo exchange over all shards (size = one message)",
    "local": "control, no communication: x * 0.5 + 1 on every shard (XLA alone)",
}
ALL_SIZES = [4 * 4**k for k in range(13)]  # 4 B .. 64 MiB
MODE_TITLES = {
    "loop": "jitted loop (time / k of one fori_loop call of k steps)",
    "call": "per call (one jax.jit call, waited for)",
    "region": "per call through jaxmpi.jit ((b): jax.jit, no effect)",
    # For the control: the work behind its loop's wall time. Equal CPU and
    # unequal wall time: waiting for a core, not more work.
    "cpu": "jitted loop, CPU time per op (user + system, all threads of all processes)",
}
DEFAULT_SIZES = [4, 64, 1024, 16384, 65536, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
SMALL_TARGET = 65536      # (a) at least 10x faster than (b) up to here
LARGE_TARGET = 1 << 20    # (a) at most 1.2x (c) from here
CALLS_MAX = 200


def human(nbytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def fmt_us(seconds):
    if seconds is None:
        return "-"
    us = seconds * 1e6
    return f"{us:.2f}" if us < 10 else f"{us:.1f}" if us < 1000 else f"{us:.0f}"


# ---- worker (one rank of one job, under mpiexec) -------------------------------


def local_work(x):
    """The control: memory-bound XLA work on the shard, no communication
    (converges, never overflows in a loop; exact in float32 on the check's
    data)."""
    return x * 0.5 + 1


class Worker:
    """One job: set up once, then wait for the driver's turns (files in the
    control directory), run every op and mode at the turn's size, report."""

    def __init__(self, args):
        self.args = args
        self.impl = args.worker
        from mpi4py import MPI

        self.MPI = MPI
        self.world = MPI.COMM_WORLD
        self.rank = self.world.Get_rank()
        self.procs, self.n = args.procs, args.devices
        self.G = self.procs * self.n  # shards in all

    # -- control plane

    def timed(self, fn):
        """Seconds the slowest process takes for fn()."""
        self.world.Barrier()
        t0 = time.perf_counter()
        fn()
        return self.world.allreduce(time.perf_counter() - t0, op=self.MPI.MAX)

    def wait_turn(self, last):
        go = os.path.join(self.args.ctl, f"{self.impl}.go")
        while True:
            try:
                with open(go) as f:
                    step, size = map(int, f.read().split())
                if step > last:
                    return step, size
            except (OSError, ValueError):
                pass
            time.sleep(0.02)  # idle: no MPI call, no busy wait

    def report(self, step, records):
        if self.rank:
            return
        out = os.path.join(self.args.ctl, f"{self.impl}.jsonl")
        with open(out, "a") as f:
            for rec in records:
                f.write(json.dumps(rec) + "\n")
        done = os.path.join(self.args.ctl, f"{self.impl}.done")
        with open(done + ".tmp", "w") as f:
            f.write(str(step))
        os.replace(done + ".tmp", done)

    # -- setup per implementation

    def setup(self):
        import jax

        self.jax = jax
        if self.impl == "b":
            port = None
            if self.rank == 0:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    port = s.getsockname()[1]
            port = self.world.bcast(port, root=0)
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
            jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}",
                                       num_processes=self.procs,
                                       process_id=self.rank)
            if (jax.process_count(), jax.device_count(),
                    jax.local_device_count()) != (self.procs, self.G, self.n):
                raise RuntimeError(f"jax.distributed: {jax.process_count()} processes, "
                                   f"{jax.device_count()} devices, "
                                   f"{jax.local_device_count()} local")
        elif jax.local_device_count() != (self.n if self.impl == "a" else 1):
            raise RuntimeError(f"{jax.local_device_count()} local devices: "
                               "XLA_FLAGS not passed on")
        {"a": self.setup_a, "b": self.setup_b, "c": self.setup_c}[self.impl]()

    def setup_a(self):
        import jax
        import numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        import jaxmpi
        import jaxmpi.notoken as mpx

        MPI = self.MPI
        mesh = Mesh(np.array(jax.local_devices()), ("d",))
        cart = self.world.Create_cart([self.procs], periods=[True], reorder=False)
        grid = jaxmpi.DeviceCart(cart, mesh)
        self.ops = {
            "allreduce-procs": lambda x: mpx.allreduce(x, MPI.SUM),
            "allreduce-all": lambda x: mpx.allreduce(x, MPI.SUM, axis_name="d"),
            "ring": lambda x: mpx.halo_exchange(x, grid, width=x.shape[0] // 3),
            "local": local_work,
        }
        self.spec = P("d")
        self.mesh, self.sharding = mesh, NamedSharding(mesh, P("d"))
        # The shard on local device k (mesh position k) is shard rank * n + k.
        self.local_shards = [(d, self.rank * self.n + k)
                             for k, d in enumerate(mesh.devices.flat)]

    def setup_b(self):
        import jax
        import numpy as np
        from jax import lax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        devs = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
        mesh = Mesh(np.array(devs).reshape(self.procs, self.n), ("p", "d"))
        G = self.G
        right = [(g, (g + 1) % G) for g in range(G)]  # flat index over ("p", "d")
        left = [(g, (g - 1) % G) for g in range(G)]

        def ring(x):
            w = x.shape[0] // 3
            own = x[w:2 * w]
            from_left = lax.ppermute(own, ("p", "d"), right)
            from_right = lax.ppermute(own, ("p", "d"), left)
            return x.at[:w].set(from_left).at[2 * w:].set(from_right)

        self.ops = {
            "allreduce-procs": lambda x: lax.psum(x, "p"),
            "allreduce-all": lambda x: lax.psum(x, ("p", "d")),
            "ring": ring,
            "local": local_work,
        }
        self.spec = P(("p", "d"))
        self.mesh, self.sharding = mesh, NamedSharding(mesh, P(("p", "d")))
        where = {d: i for i, d in enumerate(mesh.devices.flat)}
        self.local_shards = [(d, where[d]) for d in jax.local_devices()]

    def setup_c(self):
        import jaxmpi.notoken as mpx

        MPI = self.MPI
        procs = self.world.Split(self.rank % self.n, self.rank)
        cart = self.world.Create_cart([self.G], periods=[True], reorder=False)
        self.ops = {
            "allreduce-procs": lambda x: mpx.allreduce(x, MPI.SUM, comm=procs),
            "allreduce-all": lambda x: mpx.allreduce(x, MPI.SUM),
            "ring": lambda x: mpx.halo_exchange(x, cart, width=x.shape[0] // 3),
            "local": local_work,
        }
        self.spec = None
        self.local_shards = [(self.jax.local_devices()[0], self.rank)]

    # -- data

    def length(self, op, size):
        return 3 * (size // 4) if op == "ring" else size // 4

    def pattern(self, op, size):
        """The part of every shard's input that does not depend on the shard
        (cached: one array per size)."""
        import numpy as np

        L = self.length(op, size)
        if getattr(self, "_pattern", (None,))[0] != L:
            self._pattern = (L, (np.arange(L) % 16).astype(np.float32))
        return self._pattern[1]

    def shard_data(self, op, size, g):
        """Shard g's input: g + 1 + (index % 16), exact in float32 (the
        ring's halo cells -1)."""
        base = self.pattern(op, size) + (g + 1)
        if op == "ring":
            w = base.size // 3
            base[:w] = base[2 * w:] = -1
        return base

    def expected(self, op, size, g):
        """NumPy's result on shard g, from the inputs' formula."""
        pat = self.pattern(op, size)
        if op == "allreduce-procs":  # the shards at g's position
            same = [p * self.n + g % self.n for p in range(self.procs)]
            return pat * self.procs + sum(h + 1 for h in same)
        if op == "allreduce-all":
            return pat * self.G + self.G * (self.G + 1) // 2
        if op == "local":
            return self.shard_data(op, size, g) * 0.5 + 1
        want = self.shard_data(op, size, g)
        w = want.size // 3
        want[:w] = pat[w:2 * w] + (g - 1) % self.G + 1       # the left one's own
        want[2 * w:] = pat[w:2 * w] + (g + 1) % self.G + 1   # the right one's
        return want

    def make_input(self, op, size, fill=None):
        """The (global) array whose local shards are this process's."""
        import numpy as np

        jax = self.jax
        L = self.length(op, size)
        pieces = []
        for dev, g in self.local_shards:
            host = (self.shard_data(op, size, g) if fill is None
                    else np.full(L, fill, np.float32))
            pieces.append(jax.device_put(host, dev))
        if self.spec is None:
            return pieces[0]
        return jax.make_array_from_single_device_arrays(
            (self.G * L if self.impl == "b" else self.n * L,), self.sharding, pieces)

    def local(self, y):
        """{shard g: NumPy array} of this process's shards of y."""
        import numpy as np

        if self.spec is None:
            return {self.rank: np.asarray(y)}
        by_dev = {s.device: np.asarray(s.data) for s in y.addressable_shards}
        return {g: by_dev[d] for d, g in self.local_shards}

    # -- the jitted functions

    def wrap(self, fn, mode):
        """The jitted function of a mode: loop (x, k) -> k steps of fn;
        call: fn under jax.jit; region: fn under jaxmpi.jit."""
        import jax
        from jax import lax
        from jax.sharding import PartitionSpec as P

        if mode == "loop":
            def body(x, k):
                return lax.fori_loop(0, k, lambda i, y: fn(y), x)
        else:
            body = fn
        if self.spec is not None:
            specs = (self.spec, P()) if mode == "loop" else (self.spec,)
            # check_vma off: a psum's result is invariant over the axes it
            # sums, the loop carry varying; no result here depends on it.
            body = jax.shard_map(body, mesh=self.mesh, in_specs=specs,
                                 out_specs=self.spec, check_vma=False)
        if mode == "region":
            import jaxmpi

            return jaxmpi.jit(body)
        return jax.jit(body)

    # -- measurement

    def check(self, op, size, fns):
        """Each mode's function once (the loop: one step) against NumPy, on
        every shard; an AssertionError on every process if any differs."""
        import numpy as np

        x = self.make_input(op, size)
        bad = []
        for mode, f in fns.items():
            y = f(x, np.int32(1)) if mode == "loop" else f(x)
            for g, got in self.local(self.jax.block_until_ready(y)).items():
                want = self.expected(op, size, g)
                if not np.array_equal(got, want):
                    idx = int(np.flatnonzero(got != want)[0])
                    bad.append(f"{NAMES[self.impl]} {op} {mode} {human(size)}, shard "
                               f"{g}: element {idx} is {got[idx]}, NumPy {want[idx]}")
        bad = sum(self.world.allgather(bad), [])
        if bad:
            raise AssertionError("wrong results:\n" + "\n".join(bad[:8]))

    def measure_loop(self, jloop, x, repeats):
        """k steps per call, k doubled (2x to 16x at a time) until one call
        takes --target seconds; `repeats` calls of k steps: time / k, and
        the CPU time (user + system, every thread of every process of the
        job) / k of each."""
        import resource

        import numpy as np

        jax, target = self.jax, self.args.target

        def batch(k):
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            t = self.timed(lambda: jax.block_until_ready(jloop(x, np.int32(k))))
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
            return t, self.world.allreduce(cpu, op=self.MPI.SUM)

        # The check ran one step: compiled and warm. The last call of the
        # search is the first sample.
        k, (t, cpu) = 1, batch(1)
        while t < target and k < 2**30:
            k *= int(min(16, max(2, 2 ** math.floor(math.log2(target / max(t, 1e-9))))))
            t, cpu = batch(k)
        runs = [(t, cpu)] + [batch(k) for _ in range(repeats - 1)]
        return k, [t / k for t, _ in runs], [c / k for _, c in runs]

    def measure_call(self, jcall, x, repeats):
        """One call each, waited for, each call's time the slowest
        process's: as many calls as fit in repeats x --target seconds (at
        least `repeats`, at most 200), the first deciding how many (the
        check ran one: compiled and warm)."""
        import numpy as np

        jax, MPI = self.jax, self.MPI
        first = self.timed(lambda: jax.block_until_ready(jcall(x)))
        count = int(min(CALLS_MAX, max(repeats, repeats * self.args.target / first)))
        times = np.empty(count)
        times[0] = first
        self.world.Barrier()
        for i in range(1, count):
            t0 = time.perf_counter()
            jax.block_until_ready(jcall(x))
            times[i] = time.perf_counter() - t0
        slowest = np.empty_like(times)
        self.world.Allreduce(times, slowest, op=MPI.MAX)
        return count, slowest.tolist(), None

    def run_size(self, size):
        recs = []
        # (b) has no jaxmpi.jit: its per-call time is jax.jit's (no effect,
        # JAX's C++ dispatch already), which stands for it in mode region.
        modes = list(dict.fromkeys("call" if m == "region" and self.impl == "b" else m
                                   for m in self.args.modes))
        repeats = self.args.repeats if size < self.args.big_from else self.args.big_repeats
        for op in self.args.ops:
            t0 = time.perf_counter()
            fns = {m: self.wrap(self.ops[op], m) for m in modes}
            self.check(op, size, fns)  # compiles, and warms up, every mode
            x = self.make_input(op, size, fill=1.0)
            for mode in modes:
                measure = self.measure_loop if mode == "loop" else self.measure_call
                iters, samples, cpu = measure(fns[mode], x, repeats)
                recs.append({"impl": self.impl, "op": op, "mode": mode, "bytes": size,
                             "iters": iters, "samples": samples, "cpu": cpu})
            del x
            if self.rank == 0:
                print(f"{NAMES[self.impl]} {human(size)} {op}: "
                      f"{time.perf_counter() - t0:.1f} s", flush=True)
        return recs

    def main(self):
        self.setup()
        self.report(0, [])
        last = 0
        while True:
            step, size = self.wait_turn(last)
            last = step
            if size == 0:
                break
            self.report(step, self.run_size(size))
        if self.impl == "b":
            self.jax.distributed.shutdown()


# ---- driver ----------------------------------------------------------------------


def launcher(args):
    if args.launcher:
        return shlex.split(args.launcher)
    if os.environ.get("JAXMPI_LAUNCH"):
        return shlex.split(os.environ["JAXMPI_LAUNCH"])
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(mpiexec):
        mpiexec = shutil.which("mpiexec") or "mpiexec"
    cmd = [mpiexec]
    try:
        version = subprocess.run([mpiexec, "--version"], capture_output=True,
                                 text=True, timeout=30).stdout.lower()
    except Exception:  # noqa: BLE001
        version = ""
    if "open mpi" in version or "openrte" in version:
        cmd += ["--oversubscribe", "--bind-to", "none"]
    return cmd


class Job:
    def __init__(self, args, impl, ctl):
        self.impl, self.ctl = impl, ctl
        ranks = args.procs * args.devices if impl == "c" else args.procs
        devices = 1 if impl == "c" else args.devices
        env = dict(os.environ)
        for k in [k for k in env if k.startswith(("PMI_", "PMIX_", "OMPI_COMM", "HYDRA_"))]:
            del env[k]
        flags = [f for f in env.get("XLA_FLAGS", "").split()
                 if not f.startswith("--xla_force_host_platform_device_count")]
        # JAX's persistent cache off: jax 0.10 crashes writing a program
        # over several devices (jaxmpi raises instead; docs/devices.md).
        env.update(JAX_PLATFORMS="cpu", JAX_ENABLE_COMPILATION_CACHE="false",
                   XLA_FLAGS=" ".join(
            [*flags, f"--xla_force_host_platform_device_count={devices}"]))
        cmd = [*launcher(args), "-n", str(ranks), sys.executable, os.path.abspath(__file__),
               "--worker", impl, "--ctl", ctl, "--procs", str(args.procs),
               "--devices", str(args.devices), "--ops", ",".join(args.ops),
               "--modes", ",".join(args.modes), "--repeats", str(args.repeats),
               "--big-repeats", str(args.big_repeats), "--big-from", str(args.big_from),
               "--target", str(args.target)]
        self.log = open(os.path.join(ctl, f"{impl}.log"), "w+")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT)

    def tail(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-4000:]

    def done_step(self):
        try:
            with open(os.path.join(self.ctl, f"{self.impl}.done")) as f:
                return int(f.read())
        except (OSError, ValueError):
            return -1

    def wait(self, step, timeout):
        t0 = time.time()
        while self.done_step() < step:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{NAMES[self.impl]} exited (rc {self.proc.returncode}):\n"
                                   f"{self.tail()}")
            if time.time() - t0 > timeout:
                raise RuntimeError(f"{NAMES[self.impl]}: no answer in {timeout:.0f} s:\n"
                                   f"{self.tail()}")
            time.sleep(0.05)

    def go(self, step, size):
        path = os.path.join(self.ctl, f"{self.impl}.go")
        with open(path + ".tmp", "w") as f:
            f.write(f"{step} {size}")
        os.replace(path + ".tmp", path)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def load():
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def versions():
    out = [f"python {platform.python_version()}"]
    from importlib.metadata import version

    for mod in ("jax", "jaxlib", "mpi4py", "jaxmpi"):
        try:
            out.append(f"{mod} {version(mod)}")
        except Exception:  # noqa: BLE001
            pass
    try:
        from mpi4py import MPI

        out.append(MPI.Get_library_version().strip().splitlines()[0])
    except Exception:  # noqa: BLE001
        pass
    return ", ".join(out)


def stats(records):
    """{(impl, op, mode, bytes): median seconds}; (b)'s per-call times
    stand for it in mode region too (it has no jaxmpi.jit)."""
    med = {(r["impl"], r["op"], r["mode"], r["bytes"]): statistics.median(r["samples"])
           for r in records}
    med.update({(r["impl"], r["op"], "cpu", r["bytes"]): statistics.median(r["cpu"])
                for r in records if r.get("cpu")})
    for (impl, op, mode, size), t in list(med.items()):
        if impl == "b" and mode == "call":
            med[(impl, op, "region", size)] = t
    return med


def tables(args, med, impls):
    lines = []
    for op in args.ops:
        extra = ["cpu"] if op == "local" and "loop" in args.modes else []
        for mode in [*args.modes, *extra]:
            what = MODE_TITLES[mode]
            lines.append(f"\n{TITLES[op]}, {what}: median us per op")
            head = ["size", *[NAMES[i] for i in impls]]
            if "a" in impls and "b" in impls:
                head.append("(a)/(b)")
            if "a" in impls and "c" in impls:
                head.append("(a)/(c)")
            rows = []
            for size in args.sizes:
                g = {i: med.get((i, op, mode, size)) for i in impls}
                row = [human(size), *[fmt_us(g[i]) for i in impls]]
                for other in ("b", "c"):
                    if "a" in impls and other in impls:
                        row.append(ratio(g["a"], g[other]))
                rows.append(row)
            widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(head)]
            lines.append("  ".join(h.rjust(w) for h, w in zip(head, widths)))
            lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return lines


def ratio(a, b) -> str:
    """a / b in 3 decimals, or 2 significant digits below 0.001 (a control
    loop of 0.01 us against a slow gloo sample), never a false 0."""
    if not (a and b):
        return "-"
    r = a / b
    return f"{r:.3f}" if r >= 0.001 else f"{r:.1e}"


def targets(args, med, impls):
    """One TARGET line per target, op and mode, and a summary."""
    lines, met, judged = [], {}, {}
    checks = []
    if "a" in impls and "b" in impls:
        checks.append(("10x faster than (b) up to 64 KiB", "b",
                       [s for s in args.sizes if s <= SMALL_TARGET],
                       lambda a, o: o / a >= 10, lambda a, o: f"(b)/(a) {o / a:.1f}",
                       lambda rs: min(rs, key=lambda t: t[1] / t[0])))
    if "a" in impls and "c" in impls:
        checks.append(("at most 1.2x (c) from 1 MiB", "c",
                       [s for s in args.sizes if s >= LARGE_TARGET],
                       lambda a, o: a / o <= 1.2, lambda a, o: f"(a)/(c) {a / o:.2f}",
                       lambda rs: max(rs, key=lambda t: t[0] / t[1])))
    for name, other, sizes, ok, show, worst in checks:
        if not sizes:
            lines.append(f"TARGET {name}: not judged (no size in range)")
            continue
        for op in [o for o in args.ops if o in JUDGED]:
            for mode in args.modes:
                pairs = [(med.get(("a", op, mode, s)), med.get((other, op, mode, s)), s)
                         for s in sizes]
                pairs = [p for p in pairs if p[0] and p[1]]
                if not pairs:
                    continue
                misses = [p for p in pairs if not ok(p[0], p[1])]
                w = worst(pairs)
                verdict = "met" if not misses else (
                    "MISSED at " + ", ".join(human(p[2]) for p in misses))
                lines.append(f"TARGET {name}, {op} {mode}: {verdict} "
                             f"(worst {show(w[0], w[1])} at {human(w[2])})")
                judged[name] = judged.get(name, 0) + 1
                met[name] = met.get(name, 0) + (not misses)
    for name in judged:
        lines.append(f"TARGETS {name}: met in {met[name]} of {judged[name]} (op, mode) series")
    return lines


def sizes_arg(text):
    if text == "all":
        return ALL_SIZES
    try:
        sizes = [int(s) for s in text.split(",") if s]
    except ValueError:
        sizes = []
    if not sizes or any(s < 4 or s % 4 for s in sizes):
        raise argparse.ArgumentTypeError(
            f"--sizes must be byte counts, multiples of 4, separated by commas; got {text!r}")
    return sizes


def list_arg(choices, what):
    def parse(text):
        items = [s for s in text.split(",") if s]
        bad = [s for s in items if s not in choices]
        if not items or bad:
            raise argparse.ArgumentTypeError(
                f"--{what}: choose from {','.join(choices)}; got {text!r}")
        return items
    return parse


def driver(args):
    impls = [i for i in IMPLS if i in args.impls]
    cores = os.cpu_count()
    busy = args.procs * args.devices
    print(f"Several devices per process: {args.procs} processes x {args.devices} devices; "
          f"(c) {busy} single-device ranks", flush=True)
    print(f"  {versions()}")
    print(f"  machine: {cores} cores, load average at start {load()}"
          + (f"; {busy} XLA devices (a, b) or MPI ranks (c) on {cores} cores: "
             "oversubscribed" if busy > cores else ""))
    print(f"  sizes: {', '.join(human(s) for s in args.sizes)}; modes {','.join(args.modes)}; "
          f"repeats {args.repeats} ({args.big_repeats} from {human(args.big_from)}); "
          f"target {args.target} s", flush=True)
    ctl = tempfile.mkdtemp(prefix="jaxmpi-devices-")
    jobs = {}
    records = []
    t_start = time.time()
    try:
        for i in impls:
            jobs[i] = Job(args, i, ctl)
        for i in impls:  # set up (imports, jax.distributed, communicators)
            jobs[i].wait(0, args.timeout)
        print(f"[{time.time() - t_start:5.0f} s] jobs set up", flush=True)
        step = 0
        for k, size in enumerate(args.sizes):
            order = impls[k % len(impls):] + impls[:k % len(impls)]
            for i in order:
                step += 1
                t0 = time.time()
                jobs[i].go(step, size)
                jobs[i].wait(step, args.timeout)
                print(f"[{time.time() - t_start:5.0f} s] {human(size):>7s} "
                      f"{NAMES[i]:18s} {time.time() - t0:5.1f} s (load {load()})", flush=True)
        step += 1
        for i in impls:
            jobs[i].go(step, 0)
        for i in impls:
            jobs[i].proc.wait(timeout=120)
        for i in impls:
            path = os.path.join(ctl, f"{i}.jsonl")
            if os.path.exists(path):
                with open(path) as f:
                    records += [json.loads(line) for line in f]
    except BaseException:
        print(f"the jobs' logs are kept in {ctl}", file=sys.stderr, flush=True)
        raise
    finally:
        for job in jobs.values():
            job.stop()
    med = stats(records)
    print(f"\nmachine load average at end {load()}; {time.time() - t_start:.0f} s in all")
    print("\n".join(tables(args, med, impls)))
    print()
    print("\n".join(targets(args, med, impls)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f)
    shutil.rmtree(ctl, ignore_errors=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=2, help="MPI processes of (a) and (b)")
    ap.add_argument("--devices", type=int, default=4,
                    help="CPU devices per process of (a) and (b); (c) runs procs x devices ranks")
    ap.add_argument("--sizes", type=sizes_arg, default=DEFAULT_SIZES,
                    help="bytes per shard (allreduce) or per halo message (ring), "
                         "comma-separated, or 'all' (every power of 4 from 4 B to 64 MiB); "
                         "default: 4 B, 64 B, 1 KiB, 16 KiB, 64 KiB, 1 MiB, 4 MiB, 16 MiB, "
                         "64 MiB")
    ap.add_argument("--repeats", type=int, default=5,
                    help="loop: calls timed; call: the fewest calls timed")
    ap.add_argument("--big-repeats", type=int, default=2,
                    help="--repeats for the sizes from --big-from (they take seconds each)")
    ap.add_argument("--big-from", type=int, default=16 << 20, metavar="BYTES")
    ap.add_argument("--target", type=float, default=0.1,
                    help="seconds a timed loop call should take (k grows until it does)")
    ap.add_argument("--ops", type=list_arg(OPS, "ops"), default=list(OPS))
    ap.add_argument("--modes", type=list_arg(MODES, "modes"), default=list(MODES))
    ap.add_argument("--impls", type=list_arg(IMPLS, "impls"), default=list(IMPLS))
    ap.add_argument("--timeout", type=float, default=900,
                    help="seconds one job may take for one size")
    ap.add_argument("--launcher", help="the MPI launcher, e.g. 'mpiexec --oversubscribe' "
                                       "(default: $JAXMPI_LAUNCH, else this Python's mpiexec)")
    ap.add_argument("--json", help="also write the raw samples to this file")
    ap.add_argument("--worker", choices=IMPLS, help=argparse.SUPPRESS)
    ap.add_argument("--ctl", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if min(args.procs, args.devices, args.repeats, args.big_repeats) < 1:
        ap.error(f"--procs, --devices, --repeats and --big-repeats must be at least 1, "
                 f"got {args.procs}, {args.devices}, {args.repeats}, {args.big_repeats}")
    if args.worker:
        Worker(args).main()
        return 0
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
