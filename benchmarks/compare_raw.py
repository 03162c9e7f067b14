"""Compare two builds of jaxmpi from run.py's raw samples: per op, size and
mode the median of all samples of each build, and their ratio.

    python benchmarks/compare_raw.py --a 'A-*/raw-*.jsonl' --b 'B-*/raw-*.jsonl' \
        [--names gcc,zig] [--impl jaxmpi]

Made for interleaved runs (A, B, B, A, ...: one run.py per build and round,
each build's jaxmpi first on PYTHONPATH), so that a shared machine's load
falls on both alike. Prints one line per op, size and mode, then the
geometric mean and the spread of the ratios per mode.
"""

import argparse
import glob
import json
import math
import statistics
import sys


def load(pattern, impl):
    paths = sorted(glob.glob(pattern))
    if not paths:
        sys.exit(f"no file matches {pattern!r}")
    samples = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                if rec["impl"] == impl:
                    key = (rec["op"], rec["bytes"], rec["mode"])
                    samples.setdefault(key, []).extend(rec["samples"])
    return samples, len(paths)


def size_text(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}"
    return f"{n} B"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="glob of the first build's raw-*.jsonl")
    ap.add_argument("--b", required=True, help="glob of the second build's raw-*.jsonl")
    ap.add_argument("--names", default="A,B", help="two names for the table (default A,B)")
    ap.add_argument("--impl", default="jaxmpi")
    args = ap.parse_args()
    names = args.names.split(",")
    if len(names) != 2:
        ap.error(f"--names takes two names, got {args.names!r}")
    a, na = load(args.a, args.impl)
    b, nb = load(args.b, args.impl)
    keys = sorted(set(a) & set(b), key=lambda k: (k[2], k[0], k[1]))
    print(f"{args.impl}: {names[0]} {na} runs, {names[1]} {nb} runs; "
          f"median us per op over all samples")
    print(f"{'mode':>6s} {'op':>14s} {'size':>7s} {names[0]:>10s} {names[1]:>10s}"
          f" {names[1] + '/' + names[0]:>9s}  samples")
    ratios = {}
    for op, size, mode in keys:
        ma = statistics.median(a[op, size, mode]) * 1e6
        mb = statistics.median(b[op, size, mode]) * 1e6
        # A loop sample is a difference of two timings: noise can make it <= 0.
        ok = ma > 0 and mb > 0
        if ok:
            ratios.setdefault(mode, []).append(mb / ma)
        ratio = f"{mb / ma:9.2f}" if ok else f"{'n/a':>9s}"
        print(f"{mode:>6s} {op:>14s} {size_text(size):>7s} {ma:10.1f} {mb:10.1f}"
              f" {ratio}  {len(a[op, size, mode])}/{len(b[op, size, mode])}")
    print()
    for mode, rs in sorted(ratios.items()):
        geo = math.exp(sum(math.log(r) for r in rs) / len(rs))
        print(f"{mode:>6s}: {names[1]}/{names[0]} geometric mean {geo:.3f} over {len(rs)}"
              f" (min {min(rs):.2f}, median {statistics.median(rs):.2f}, max {max(rs):.2f})")
    allr = [r for rs in ratios.values() for r in rs]
    geo = math.exp(sum(math.log(r) for r in allr) / len(allr))
    print(f"   all: {names[1]}/{names[0]} geometric mean {geo:.3f} over {len(allr)}")


if __name__ == "__main__":
    main()
