"""`vak farm run SPEC` and `vak farm report RUN`: the eval farm (vak_context.farm.run) from the command line.

``vak farm run farm/examples/small.toml`` runs the spec on the Ray this shell can reach (``--address``,
``$RAY_ADDRESS``, else a local Ray on 127.0.0.1), prints progress per model as units finish, writes
``<out>/<run id>/results.parquet`` and the report (``report.md`` and PNGs). Running it again resumes:
finished units are skipped. ``vak farm report RUN`` writes the report again from a run folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path("vak-data") / "farm"  # next to the default ledger, ignored by git


def register(sub: Any) -> None:
    farm = sub.add_parser("farm", help="run an eval farm on Ray: probe, replay and live tasks across models and "
                          "sessions, with a Parquet table and a report")
    fsub = farm.add_subparsers(dest="farm_command", metavar="FARM_COMMAND")
    run = fsub.add_parser("run", help="run (or resume) the farm a TOML spec describes")
    run.add_argument("spec", type=Path, help="the farm spec, e.g. farm/examples/small.toml")
    run.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for run folders (default: %(default)s)")
    run.add_argument("--run-id", default=None, help="the run's id (default: the farm's name and the spec's digest, "
                     "so the same spec resumes the same run)")
    run.add_argument("--address", default=None, help="a running Ray cluster's address (default: $RAY_ADDRESS, else "
                     "a local Ray on 127.0.0.1)")
    run.add_argument("--retries", type=int, default=3, help="times a unit that died with its node is run again")
    run.add_argument("--no-report", action="store_true", help="write the table only, not report.md and the PNGs")
    run.set_defaults(func=_run)
    report = fsub.add_parser("report", help="write report.md and the PNGs of a farm run")
    report.add_argument("run", type=Path, help="a run folder (<out>/<run id>) holding results.parquet")
    report.set_defaults(func=_report)
    from vak_context.farm import (
        cmd_farm_submit,  # `vak vak_context.farm submit` (Ray Jobs) lives in its own module
    )

    cmd_farm_submit.register(fsub)
    farm.set_defaults(func=lambda _args: farm.print_help() or 2)


def _run(args: argparse.Namespace) -> int:
    from vak_context.farm.report import write_report
    from vak_context.farm.run import FarmProgress, run_farm
    from vak_context.farm.spec import load_farm_spec

    spec = load_farm_spec(args.spec)

    def show(p: FarmProgress) -> None:
        print(p.line(), file=sys.stderr, flush=True)

    result = run_farm(spec, out_dir=args.out, run_id=args.run_id, progress=show, address=args.address,
                      max_retries=max(0, args.retries))
    print(f"run {result.run_id}: {result.units} units ({result.ran} run now, {result.skipped} done before), "
          f"{result.rows} rows; {len(result.nodes)} node(s) ran units this time")
    print(f"table: {result.table_path}")
    for unit, reason in result.failed_units:
        print(f"FAILED {unit}: {reason}")
    if not args.no_report:
        paths = write_report(result.run_dir)
        print(f"report: {paths[0]}" + (f" (+{len(paths) - 1} PNGs)" if len(paths) > 1 else ""))
    return 1 if result.failed_units else 0


def _report(args: argparse.Namespace) -> int:
    from vak_context.farm.report import write_report

    paths = write_report(args.run)
    for p in paths:
        print(p)
    return 0
