"""``python -m jaxmpi.record DIR``: who is stuck where, from the flight
recorder's rings.

Every jaxmpi process keeps its last calls in a ring (``JAXMPI_RECORD``,
default 256) and writes it to ``DIR/rank-<r>.ring`` on a watchdog timeout
(``JAXMPI_TIMEOUT``), an MPI error, a fatal signal or SIGUSR1
(``JAXMPI_RECORD_DIR``; by default ``jaxmpi-record-<job>`` in the working
directory). This command reads them all, waiting a moment for rings still
being written, and says in plain words who is stuck where, e.g.::

    rank 3 never entered allreduce #412 (sweep.py:88 in step) that ranks 0-2
    wait in; its last call was bcast #411 (sweep.py:80 in step) (done).

A rank whose ring is missing is named as such (it died, or was busy outside
jaxmpi where no signal reached it). Then each rank's last calls. It reads
files only: it never initialises MPI or imports JAX (docs/record.md).

Usage::

    python -m jaxmpi.record DIR [--calls N | --all | --quiet] [--grace S]
    python -m jaxmpi.record DIR --json      every ring, as JSON
"""

from __future__ import annotations

import argparse
import os
import sys

from . import _commands


def main(argv=None) -> int:
    """The command's entry point.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).

    Returns:
        int: 0 when at least one ring was read, 1 otherwise.

    Example:
        ``python -m jaxmpi.record jaxmpi-record-4711`` prints the verdict
        and each rank's last 8 calls.
    """
    ap = argparse.ArgumentParser(
        prog="python -m jaxmpi.record",
        description="Who is stuck where: the verdict over the flight "
                    "recorder's rings in DIR (rank-<r>.ring).")
    ap.add_argument("dir", metavar="DIR", help="the rings' directory")
    ap.add_argument("--grace", type=float, default=3.0, metavar="S",
                    help="seconds to wait for rings still being written "
                         "(default 3)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--calls", type=int, default=8, metavar="N",
                       help="each rank's last N calls after the verdict "
                            "(default 8)")
    group.add_argument("--all", action="store_true",
                       help="every call each ring holds")
    group.add_argument("--quiet", action="store_true",
                       help="the verdict only")
    group.add_argument("--json", action="store_true",
                       help="print the rings as JSON instead")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.dir):
        print(f"jaxmpi.record: {args.dir} is not a directory", file=sys.stderr)
        return 1
    lib = _commands.reader()
    sys.stdout.flush()
    fd = sys.stdout.fileno()
    if args.json:
        n = lib.jaxmpi_record_json(args.dir.encode(), fd)
    else:
        detail = 0 if args.quiet else -1 if args.all else max(args.calls, 0)
        n = lib.jaxmpi_record_report(args.dir.encode(), args.grace, detail,
                                     fd)
    return 0 if n > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
