"""``python -m jaxmpi.trace DIR``: the timeline of every jaxmpi call.

A program run with ``JAXMPI_TRACE=DIR`` writes each rank's calls to
``DIR/rank-<r>.trace.json`` at exit: Chrome trace events (the JSON that
Perfetto and chrome://tracing read), one complete span per call named after
its operation (``allreduce``, ``iallreduce`` and its ``wait``, joined by a
flow arrow), the MPI calls inside it as child spans (``MPI_Allreduce``),
``pid`` the rank and ``tid`` the device position, on clocks aligned with
rank 0's at the start. This command:

* merges them into ``DIR/trace.json`` (a rank that died leaves
  ``rank-<r>.trace.bin``, converted here up to its last write);
* prints a table per operation: calls, bytes, total and median time, and
  the spread between the rank that spent the most time in it and the one
  that spent the least (load imbalance);
* draws ``DIR/timeline.png``: ranks (and device positions) against time,
  one colour per operation, the gaps between calls being computation. It
  needs matplotlib (``pip install 'jaxmpi[trace]'``); without it the JSON and
  the table are still written.

It reads files only: it never initialises MPI or imports JAX.

Usage::

    python -m jaxmpi.trace DIR [--no-png] [--window FIRST:LAST]
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import re
import statistics
import sys

from . import _commands

_RANK_FILE = re.compile(r"rank-(\d+)\.trace\.(json|bin)$")


def convert_leftovers(directory: str) -> list[str]:
    """Convert each rank-<r>.trace.bin that has no JSON beside it (its
    process ended before writing it); returns the notes to print."""
    notes, lib = [], None
    for path in sorted(glob.glob(os.path.join(directory, "rank-*.trace.bin"))):
        json_path = path[:-len(".bin")] + ".json"
        if os.path.exists(json_path):
            continue
        lib = lib or _commands.reader()
        err = ctypes.create_string_buffer(1024)
        n = lib.jaxmpi_trace_convert(path.encode(), json_path.encode(), err,
                                     len(err))
        if n < 0:
            notes.append(f"{os.path.basename(path)}: {err.value.decode()}")
        else:
            notes.append(f"{os.path.basename(path)}: the process did not exit "
                         f"normally; {n} events up to its last write")
    return notes


def load(directory: str) -> tuple[list, dict]:
    """Every rank's events, and {rank: otherData}."""
    events, meta = [], {}
    for path in sorted(glob.glob(os.path.join(directory, "rank-*.trace.json"))):
        m = _RANK_FILE.search(path)
        if not m:
            continue
        with open(path) as f:
            doc = json.load(f)
        events.extend(doc.get("traceEvents", []))
        meta[int(m.group(1))] = doc.get("otherData", {})
    return events, meta


def calls(events) -> list:
    """The spans of jaxmpi calls (and native collectives), not their inner
    MPI calls."""
    return [e for e in events
            if e.get("ph") == "X" and e.get("cat") in ("jaxmpi", "native")]


def table(events) -> list[dict]:
    """Per operation: calls, bytes, total and median time (us), and each
    rank's total time in it."""
    rows = {}
    for e in calls(events):
        r = rows.setdefault(e["name"], {"op": e["name"], "calls": 0,
                                        "bytes": 0, "durations": [],
                                        "per_rank": {}})
        r["calls"] += 1
        r["bytes"] += int(e.get("args", {}).get("bytes", 0))
        r["durations"].append(float(e["dur"]))
        r["per_rank"][e["pid"]] = r["per_rank"].get(e["pid"], 0.0) + float(
            e["dur"])
    out = []
    for r in sorted(rows.values(), key=lambda r: -sum(r["durations"])):
        r["total_us"] = sum(r["durations"])
        r["median_us"] = statistics.median(r["durations"])
        out.append(r)
    return out


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def format_table(rows) -> str:
    # As wide as the longest name (a native call's, "MPI_Wait (of
    # MPI_Irecv) (collective-permute)", has 44 characters).
    w = max([22] + [len(r["op"]) for r in rows])
    lines = [f"{'operation':<{w}} {'calls':>8} {'bytes':>11} {'total ms':>10} "
             f"{'median us':>10}  spread between ranks (most - least time)"]
    for r in rows:
        per = r["per_rank"]
        hi = max(per, key=per.get)
        lo = min(per, key=per.get)
        spread = (f"{(per[hi] - per[lo]) / 1e3:.3f} ms (rank {hi} - rank {lo})"
                  if len(per) > 1 else "one rank")
        lines.append(f"{r['op']:<{w}} {r['calls']:>8} {_size(r['bytes']):>11} "
                     f"{r['total_us'] / 1e3:>10.3f} {r['median_us']:>10.2f}  "
                     f"{spread}")
    return "\n".join(lines)


def draw(events, path: str, window=None) -> str | None:
    """DIR/timeline.png: one row per (rank, device position), a bar per call
    coloured by its operation; `window`: (first, last) ms since the first
    call, or None for all. Returns why it could not be drawn, or None."""
    try:
        # Optional (the extra jaxmpi[trace]): the JSON and table need none.
        import matplotlib
        matplotlib.use("Agg")
        # Its pyplot, after choosing the file-only backend.
        import matplotlib.pyplot as plt
    except ImportError:
        return ("the timeline needs matplotlib: pip install 'jaxmpi[trace]' "
                "(trace.json and the table are written without it)")
    spans = calls(events)
    t0 = min((e["ts"] for e in spans), default=0.0)
    rows = sorted({(e["pid"], e.get("tid", 0)) for e in spans})
    if window:
        lo, hi = (t0 + w * 1e3 for w in window)
        spans = [e for e in spans if e["ts"] + e["dur"] >= lo and e["ts"] <= hi]
    several = any(tid for _, tid in rows)
    row_of = {key: i for i, key in enumerate(rows)}
    ops = sorted({e["name"] for e in spans})
    cmap = plt.get_cmap("tab20" if len(ops) > 10 else "tab10")
    colour = {op: cmap(i % cmap.N) for i, op in enumerate(ops)}
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.45 * max(len(rows), 1)))
    for op in ops:
        for key in rows:
            bars = [((e["ts"] - t0) / 1e3, max(e["dur"], 0.0) / 1e3)
                    for e in spans if e["name"] == op
                    and (e["pid"], e.get("tid", 0)) == key]
            if bars:
                ax.broken_barh(bars, (row_of[key] - 0.4, 0.8),
                               facecolors=colour[op], linewidth=0)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"rank {p}" + (f" / device {t}" if several else "")
                        for p, t in rows])
    ax.invert_yaxis()
    if window:
        ax.set_xlim(*window)
    ax.set_xlabel("time since the first call (ms)")
    ax.set_title("jaxmpi calls per rank (gaps: computation)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[op]) for op in ops]
    ax.legend(handles, ops, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize="small", frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def merge(directory: str, png: bool = True, out=sys.stdout,
          window=None) -> int:
    """Merge, tabulate and draw the traces in `directory` (the command).

    Args:
        directory: a ``JAXMPI_TRACE`` directory.
        png: also draw ``timeline.png``.
        out: where the table and notes go.
        window: (first, last) ms since the first call: the part of the run
            the timeline shows (None: all of it).

    Returns:
        int: 0, or 1 when the directory holds no trace.

    Example:
        ``merge("trace")`` writes ``trace/trace.json`` and
        ``trace/timeline.png`` and prints the table.
    """
    notes = convert_leftovers(directory)
    events, meta = load(directory)
    if not meta:
        print(f"jaxmpi.trace: no rank-<r>.trace.json in {directory} (run the "
              "program with JAXMPI_TRACE=DIR)", file=sys.stderr)
        return 1
    size = max((m.get("size", 0) for m in meta.values()), default=0)
    missing = [r for r in range(size) if r not in meta]
    merged = os.path.join(directory, "trace.json")
    with open(merged, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ns",
                   "otherData": {"ranks": {str(r): m for r, m in
                                           sorted(meta.items())}}}, f)
    print(format_table(table(events)), file=out)
    print(f"\n{len(calls(events))} calls of {len(meta)} ranks merged into "
          f"{merged}", file=out)
    errors = [m.get("clock_error_ns", 0) for m in meta.values()]
    if size > 1:
        print(f"clocks aligned with rank 0's to within "
              f"{max(errors) / 1e3:.1f} us (half the best round trip)",
              file=out)
    for note in notes:
        print(f"note: {note}", file=out)
    if missing:
        print(f"note: no trace from rank(s) {missing}", file=out)
    if png:
        why = draw(events, os.path.join(directory, "timeline.png"), window)
        if why:
            print(f"jaxmpi.trace: {why}", file=sys.stderr)
        else:
            print(f"timeline drawn: {os.path.join(directory, 'timeline.png')}",
                  file=out)
    return 0


def main(argv=None) -> int:
    """The command's entry point (``python -m jaxmpi.trace DIR``).

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).

    Returns:
        int: the exit status (:func:`merge`'s).

    Example:
        ``python -m jaxmpi.trace trace --no-png`` merges without drawing.
    """
    ap = argparse.ArgumentParser(
        prog="python -m jaxmpi.trace",
        description="Merge the per-rank traces of JAXMPI_TRACE=DIR into "
                    "DIR/trace.json, print a table per operation and draw "
                    "DIR/timeline.png.")
    ap.add_argument("dir", metavar="DIR")
    ap.add_argument("--no-png", action="store_true",
                    help="do not draw timeline.png")
    ap.add_argument("--window", metavar="FIRST:LAST",
                    help="the timeline's part of the run, in ms since the "
                         "first call (e.g. 5000:5050: skip compilation)")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.dir):
        print(f"jaxmpi.trace: {args.dir} is not a directory", file=sys.stderr)
        return 1
    window = None
    if args.window:
        try:
            first, last = (float(v) for v in args.window.split(":"))
        except ValueError:
            ap.error(f"--window {args.window!r}: FIRST:LAST in ms")
        if not last > first:
            ap.error(f"--window {args.window!r}: LAST must follow FIRST")
        window = (first, last)
    return merge(args.dir, png=not args.no_png, window=window)


if __name__ == "__main__":
    sys.exit(main())
