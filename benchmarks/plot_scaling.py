"""Plot the scaling tables that benchmarks/shallow_water.py prints.

    python benchmarks/plot_scaling.py OUTPUT.txt [OUTPUT.txt ...] -o scaling.png

Each OUTPUT.txt is a saved run of `shallow_water.py --ranks 1,2,4,...`
(strong scaling: speed-up against the fewest ranks, with the ideal line) or
`... --weak BX BY` (weak scaling: efficiency, ideal 1). One panel per file,
one line per configuration; the panel's title is the file's name.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

ROW = re.compile(r"^(\S+)\s+(.*)$")
STRONG = re.compile(r"([\d.]+) s\s+([\d.]+)x \(([\d.]+)\)")
WEAK = re.compile(r"([\d.]+) \(([\d.]+)\)")


def parse(path):
    """(kind, ranks, {configuration: [values]}): kind "strong" (speed-ups)
    or "weak" (efficiencies), from the last scaling table in the file."""
    with open(path) as f:
        lines = f.read().splitlines()
    start = max((i for i, line in enumerate(lines)
                 if line.startswith(("strong scaling", "weak scaling"))), default=None)
    if start is None:
        raise SystemExit(f"{path}: no scaling table (run shallow_water.py with --ranks 1,2,...)")
    kind = "strong" if lines[start].startswith("strong") else "weak"
    ranks = [int(w) for w in re.findall(r"(\d+) ranks", lines[start + 1])]
    series = {}
    for line in lines[start + 2:]:
        m = ROW.match(line)
        if not m:
            break
        if kind == "strong":
            cells = [float(s) for _, s, _ in STRONG.findall(m.group(2))]
        else:
            cells = [float(e) for _, e in WEAK.findall(m.group(2))]
        if len(cells) != len(ranks):
            break
        series[m.group(1)] = cells
    return kind, ranks, series


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("outputs", nargs="+")
    p.add_argument("-o", "--out", required=True, help="the image to write (.png)")
    a = p.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(a.outputs), figsize=(5.5 * len(a.outputs), 4.2),
                             squeeze=False)
    for ax, path in zip(axes[0], a.outputs):
        kind, ranks, series = parse(path)
        for name, values in series.items():
            ax.plot(ranks, values, marker="o", label=name)
        if kind == "strong":
            ax.plot(ranks, [r / ranks[0] for r in ranks], "k--", lw=1, label="ideal")
            ax.set_yscale("log", base=2)
            ax.set_ylabel(f"speed-up against {ranks[0]} rank(s)")
        else:
            ax.axhline(1.0, color="k", ls="--", lw=1, label="ideal")
            ax.set_ylabel("efficiency (time per step at the fewest ranks / here)")
            ax.set_ylim(0, 1.1)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ranks, [str(r) for r in ranks])
        ax.set_xlabel("ranks")
        ax.set_title(os.path.basename(path), fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
