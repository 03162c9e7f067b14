#!/usr/bin/env python
"""What jaxmpi's start-up hook (site-packages/jaxmpi-startup.pth, which
serves JAXMPI_MPI4JAX and JAXMPI_DISTRIBUTED) costs a Python process that
sets neither variable: the start of `python -c pass` in two fresh virtual
environments of the same interpreter, one with the hook's file and one
without, interleaved, and the hook's line alone (timeit).

    python benchmarks/startup_hook.py [--runs 200]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import timeit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOK = os.path.join(ROOT, "src", "jaxmpi-startup.pth")


def site_packages(venv):
    py = os.path.join(venv, "bin", "python")
    return subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args(argv)
    base = getattr(sys, "_base_executable", sys.executable)
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAXMPI_MPI4JAX", "JAXMPI_DISTRIBUTED", "PYTHONPATH")}
    with tempfile.TemporaryDirectory() as tmp:
        venvs = {}
        for name in ("without", "with"):
            venv = os.path.join(tmp, name)
            subprocess.run([base, "-m", "venv", "--without-pip", venv], check=True)
            venvs[name] = os.path.join(venv, "bin", "python")
        shutil.copy(HOOK, site_packages(os.path.join(tmp, "with")))
        times = {name: [] for name in venvs}
        for _ in range(args.runs):
            for name, py in venvs.items():
                t = time.perf_counter()
                subprocess.run([py, "-c", "pass"], env=env, check=True)
                times[name].append(time.perf_counter() - t)
    line = open(HOOK).read().strip()
    assert line.startswith("import os;")
    per_line = min(timeit.repeat(line[len("import os;"):].strip(), "import os",
                                 number=100000, repeat=5)) / 100000
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    pairs = sorted(w - o for w, o in zip(times["with"], times["without"]))
    print(f"# {args.runs} interleaved starts each, {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}; Python {sys.version.split()[0]}")
    print(f"python -c pass without the hook: median {med['without']:.2f} ms")
    print(f"python -c pass with the hook:    median {med['with']:.2f} ms")
    print(f"difference, median of pairs: {statistics.median(pairs) * 1e3:+.3f} ms "
          f"(quartiles {pairs[len(pairs) // 4] * 1e3:+.3f} to "
          f"{pairs[3 * len(pairs) // 4] * 1e3:+.3f} ms)")
    print(f"the hook's line alone, variables unset: {per_line * 1e9:.0f} ns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
