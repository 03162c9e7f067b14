"""Latency and bandwidth across simulated hosts against one host:
benchmarks/run.py's jobs (C, mpi4py, jaxmpi) launched by scripts/multihost.py,
first with every rank on one host (shared memory), then with one rank per
host (TCP over the hosts' eth0, a bridge between network namespaces).

    python benchmarks/hosts.py [--hosts 2] [--ops allreduce,sendrecv] [run.py options...]

Needs root (network namespaces). Each layout is one run.py run, so each
table's ratios (jaxmpi to C, to mpi4py) come from one job sequence; the
layouts' times differ by the transport. Prints both run.py reports and a
summary: per op and size, each layout's median time and the ratio across
hosts / one host for C and for jaxmpi.
"""

from __future__ import annotations

import argparse
import csv
import glob
import os
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "scripts"))

import multihost  # noqa: E402


def launcher(c, mpi, nranks, per_host):
    """The cluster's launch command without its rank count (run.py adds
    "-n N")."""
    env = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    if mpi.kind == "mpich":
        env.update(multihost.mpich_network_env())
    argv = c.launch_argv(mpi, nranks, per_host, env)
    i = argv.index("-n" if mpi.kind == "mpich" else "-np")
    del argv[i:i + 2]
    return shlex.join(c.in_host(1, argv))


def run_layout(hosts, per_host, mpi, rest, outdir):
    with multihost.Cluster(hosts) as c:
        cmd = [sys.executable, os.path.join(HERE, "run.py"), "--ranks",
               str(hosts * per_host), "--launcher",
               launcher(c, mpi, hosts * per_host, per_host), "--outdir", outdir,
               "--no-plot", "--no-dispatch", *rest]
        print(f"=== {hosts} host(s) x {per_host} rank(s): {shlex.join(cmd)}", flush=True)
        before = c.counters()
        r = subprocess.run(cmd)
        after = c.counters()
        if hosts > 1:
            for h in c.hosts:
                print(f"{h.name} eth0: tx {after[h.index]['tx'] - before[h.index]['tx']} B, "
                      f"rx {after[h.index]['rx'] - before[h.index]['rx']} B", flush=True)
        if r.returncode:
            sys.exit(f"run.py failed in the {hosts}-host layout (rc {r.returncode})")
    return max(glob.glob(os.path.join(outdir, "bench-*.csv")), key=os.path.getmtime)


def medians(path):
    out = {}
    with open(path, errors="replace") as f:  # (run.py's header lines: "# key: value")
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            out[(row["impl"], row["mode"], row["op"], int(row["bytes"]))] = float(row["median_us"])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--outdir", default=os.path.join(HERE, "results", "hosts"))
    a, rest = p.parse_known_args()
    reason = multihost.can_run()
    if reason:
        sys.exit(f"hosts.py: {reason}")
    mpi = multihost.Mpi.detect(sys.executable)
    if mpi is None:
        sys.exit(f"hosts.py: no MPI launcher found for {sys.executable}")
    if not any(x == "--impls" or x.startswith("--impls=") for x in rest):
        rest += ["--impls", "c,mpi4py,jaxmpi"]
    if not any(x == "--ops" or x.startswith("--ops=") for x in rest):
        rest += ["--ops", "allreduce,sendrecv"]
    if not any(x == "--modes" or x.startswith("--modes=") for x in rest):
        rest += ["--modes", "loop"]
    one = medians(run_layout(1, a.hosts, mpi, rest, os.path.join(a.outdir, "one-host")))
    many = medians(run_layout(a.hosts, 1, mpi, rest, os.path.join(a.outdir, f"{a.hosts}-hosts")))
    print(f"\n{mpi.kind}, {a.hosts} ranks: median us per op in a loop, one host (shared "
          f"memory) against {a.hosts} hosts x 1 rank (TCP on eth0)")
    print(f"{'op':10s} {'size':>9s} {'C 1 host':>10s} {'C hosts':>10s} {'x':>6s} "
          f"{'jaxmpi 1 host':>14s} {'jaxmpi hosts':>13s} {'x':>6s} {'jaxmpi/C hosts':>15s}")
    for key in sorted(k for k in one if k[0] == "c"):
        _, _, op, size = key
        j = ("jaxmpi", "loop", op, size)
        if key not in many or j not in one or j not in many:
            continue
        print(f"{op:10s} {size:9d} {one[key]:10.2f} {many[key]:10.2f} "
              f"{many[key] / one[key]:6.1f} {one[j]:14.2f} {many[j]:13.2f} "
              f"{many[j] / one[j]:6.1f} {many[j] / many[key]:15.2f}")


if __name__ == "__main__":
    main()
