"""`vak farm submit SPEC --address URL`: run a farm as a Ray job on a cluster (farm/jobs.py).

The job runs ``vak farm run SPEC`` with the project folder as its working directory, so the cluster runs
the code you submit; the command prints the job id and how to follow its logs, and returns. ``--wait``
follows the job's status to the end and prints the tail of its logs (exit 1 unless it succeeded).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from vak_context.checks import bounded_int
from vak_context.errors import InvalidInput
from vak_context.farm.jobs import job_client, submit_farm, wait_for_job


def register(farm_subparsers: Any) -> None:
    """Add ``submit`` to the ``vak farm`` subcommands."""
    p: argparse.ArgumentParser = farm_subparsers.add_parser(
        "submit",
        help="run a farm as a Ray job on a cluster",
        description="Submit `vak farm run SPEC` to a Ray cluster's job server, with this project as the job's "
        "working directory. Prints the job id and the command that follows its logs.",
    )
    p.add_argument("spec", type=Path, help="the farm spec (TOML), inside the project folder")
    p.add_argument("--address", default=None,
                   help="the job server: the Ray dashboard's URL, e.g. http://127.0.0.1:8265 (through the "
                   "tunnel `ray dashboard cluster.yaml` opens); default $RAY_ADDRESS")
    p.add_argument("--shared", default=None,
                   help="the shared data folder as the cluster's nodes see it (`shared:` paths in the spec); "
                   "default $VAK_SHARED, else this machine's ../shared")
    p.add_argument("--out", default=None,
                   help="the run folder's parent, absolute, as the head sees it (a shared filesystem on a "
                   "cluster); default ~/vak-data/farm-runs on the head")
    p.add_argument("--run-id", default=None, help="passed to `vak farm run --run-id` (default: the spec's own)")
    p.add_argument("--wait", action="store_true", help="follow the job to the end; exit 1 unless it succeeded")
    p.add_argument("--timeout", type=bounded_int(1, 7 * 24 * 3600), default=24 * 3600,
                   help="with --wait: give up following after this many seconds (default a day)")
    p.set_defaults(func=run)


def job_address(given: str | None) -> str:
    address = given or os.environ.get("RAY_ADDRESS", "")
    if not address.startswith(("http://", "https://")):
        raise InvalidInput("say which job server to submit to: --address http://HOST:8265 (the Ray dashboard; "
                           "after `ray up cluster.yaml`, run `ray dashboard cluster.yaml` and use "
                           "http://127.0.0.1:8265), or set RAY_ADDRESS to that URL.")
    return address


def shared_folder(given: str | None) -> str:
    if given:
        return given
    from vak_context.farm.spec import shared_root

    return os.environ.get("VAK_SHARED") or str(shared_root().resolve())


def run(args: argparse.Namespace) -> int:
    address = job_address(args.address)
    shared = shared_folder(args.shared)
    print(f"vak: submitting {args.spec} to {address} (working dir: this project; VAK_SHARED={shared}) ...",
          flush=True)
    job = submit_farm(args.spec, address, out=args.out, run_id=args.run_id, shared=shared)
    print(f"job id   {job.job_id}")
    print(f"command  {job.entrypoint}")
    print(f"logs     {job.follow_command()}")
    print(f"status   {job.status_command()}", flush=True)
    if not args.wait:
        return 0
    return follow(job.job_id, address, args.timeout)


def follow(job_id: str, address: str, timeout_s: float) -> int:
    """Print each status change until the job is final; then the tail of its logs. 0 if it succeeded."""
    client = job_client(address)
    status = wait_for_job(client, job_id, timeout_s=timeout_s, every_s=1.0,
                          on_status=lambda s: print(f"vak: job {job_id} {s}", flush=True))
    tail = client.get_job_logs(job_id).splitlines()[-20:]
    print("\n".join(f"  | {line}" for line in tail), flush=True)
    if status != "SUCCEEDED":
        info = client.get_job_info(job_id)
        print(f"vak: job {job_id} {status}: {getattr(info, 'message', '') or 'see its logs'}", file=sys.stderr)
        return 1
    return 0
