"""The farm as a Ray job, and a local Ray head with a Jobs API that never leaves 127.0.0.1.

``submit_farm`` hands ``vak farm run SPEC`` to a cluster's job server through
``ray.job_submission.JobSubmissionClient``, with the project folder as the job's working directory
(``runtime_env.working_dir``, without the virtualenv, ledgers, caches or model files, so the upload is
about 2 MB) and the same tree laid out as the installed namespace as its one ``py_modules`` entry, so the
job's driver and every worker import the ``vak_context`` that was submitted, not whatever the nodes have
installed; it returns the job id. ``wait_for_job`` follows the job's status until it is final.

``LocalHead`` is ``ray start --head --block`` in a child process: GCS, raylet, dashboard and Jobs API on
127.0.0.1, every port chosen free (so it lives beside other engineers' clusters), temp files in a private
folder. It exists for the Jobs test, the live notebook and a laptop farm. Stopping it sends SIGTERM to that
one process, which stops every process it started (Ray's own handler); ``ray stop`` would stop every Ray
on the machine, so it is never used.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vak_context.checks import check_base_url
from vak_context.engine.localray import LOOPBACK, RAY_SUBDIR, private_temp_root
from vak_context.errors import ActorError, InvalidInput

REPO = Path(__file__).resolve().parent.parent
# Relative to the working dir, gitwildmatch patterns (Ray also honours .gitignore): what a job never needs.
WORKING_DIR_EXCLUDES = (
    ".git", ".venv", "vak-data", "**/__pycache__", "*.egg-info", ".mypy_cache", ".ruff_cache", ".pytest_cache",
    ".hypothesis", "build", "dist", "*.gguf", "*.bin", "*.parquet", "*.arrow", "**/.ipynb_checkpoints", "farm-runs",
)
DEFAULT_JOB_OUT = '"$HOME"/vak-data/farm-runs'  # expanded by the shell that runs the entrypoint
FINAL_STATES = ("SUCCEEDED", "FAILED", "STOPPED")
JOBS_API_POLL_S = 0.2  # between checks of a starting head's Jobs API, up to its deadline
RAY_CLI = Path(sys.executable).with_name("ray")


@dataclass(frozen=True)
class SubmittedJob:
    job_id: str
    address: str
    entrypoint: str

    def follow_command(self) -> str:
        return f"ray job logs --follow {self.job_id} --address {self.address}"

    def status_command(self) -> str:
        return f"ray job status {self.job_id} --address {self.address}"


def spec_in_project(spec: Path, root: Path = REPO) -> str:
    """The spec's path relative to the project folder (the job's working dir), or InvalidInput."""
    spec = spec.resolve()
    try:
        return spec.relative_to(root.resolve()).as_posix()
    except ValueError as exc:
        raise InvalidInput(
            f"the farm spec {spec} is outside the project folder {root}, so the job would not receive it. "
            "Copy it under the project (e.g. farm/examples/) and submit that path."
        ) from exc


def farm_entrypoint(spec_rel: str, out: str | None = None, run_id: str | None = None) -> str:
    """The job's command: ``vak farm run`` from the uploaded working dir (``python -m`` imports that copy,
    not whatever the node has installed).

    The job's current folder is the unpacked working dir under Ray's temp folder, removed with the job's
    session, so results go to ``out`` (a folder as the head sees it; on a cluster a shared filesystem) or,
    by default, ``$HOME/vak-data/farm-runs`` on the node that runs the driver (the head).
    """
    import shlex

    if out is None:
        out_word = DEFAULT_JOB_OUT
    elif out == "~" or out.startswith("~/"):
        out_word = '"$HOME"' + shlex.quote(out[1:]) if out != "~" else '"$HOME"'
    elif out.startswith("/"):
        out_word = shlex.quote(out)
    else:
        raise InvalidInput(f"--out {out!r} is relative, and a job runs in a temporary copy of the project that Ray "
                           "removes: give an absolute folder as the head sees it (on a cluster, a shared one), "
                           "e.g. --out /mnt/vak/farm-runs or --out ~/vak-data/farm-runs.")
    words = ["python", "-m", "vak_context.cli.main", "farm", "run", shlex.quote(spec_rel), "--out", out_word]
    if run_id:
        words += ["--run-id", shlex.quote(run_id)]
    return " ".join(words)


def stage_namespace(root: Path, into: Path) -> Path:
    """Copy ``root``'s packages into ``into/vak_context`` as they are installed (pyproject's package-dir
    maps each top-level folder into the namespace); return that folder, a ``py_modules`` entry.

    The job needs this because its working dir holds the folders (``events/``, ``farm/``, ...), not an
    importable ``vak_context``: without it the job would run the nodes' installed copy.
    """
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    target = into / "vak_context"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    # Shortest names first: the namespace's own folder, then each folder mapped inside it.
    for package, folder in sorted(config["package-dir"].items(), key=lambda kv: kv[0].count(".")):
        dest = target.joinpath(*package.split(".")[1:])
        shutil.copytree(root / folder, dest, ignore=ignore, dirs_exist_ok=True)
    return target


def job_runtime_env(root: Path = REPO, shared: str | None = None, code: Path | None = None) -> dict[str, Any]:
    """The job's runtime_env: the project as working_dir, minus what a job never needs, and ``code`` (the
    namespace staged by ``stage_namespace``) as its one ``py_modules`` entry.

    ``shared`` is the shared data folder as the *nodes* see it (``shared:`` paths in a spec); the working
    dir is unpacked under Ray's temp folder, so ``../shared`` next to it does not exist there. pip is never
    put in a runtime_env (machine notes): the nodes' environment is the project's.
    """
    env: dict[str, Any] = {"working_dir": str(root), "excludes": list(WORKING_DIR_EXCLUDES)}
    if code is not None:
        env["py_modules"] = [str(code)]
    env_vars = {"RAY_USAGE_STATS_ENABLED": "0"}
    if shared:
        env_vars["VAK_SHARED"] = shared
    env["env_vars"] = env_vars
    return env


def job_client(address: str) -> Any:
    """A JobSubmissionClient for ``address`` (the dashboard's http URL); a clear error if none answers."""
    check_base_url(address, "--address")
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ActorError(
            f"no Ray job server answered at {address} ({exc}). Start the cluster (`ray up cluster.yaml`, then "
            "`ray dashboard cluster.yaml` for the tunnel), or pass the dashboard URL with --address."
        ) from exc


def submit_farm(spec: Path, address: str, *, out: str | None = None, run_id: str | None = None,
                shared: str | None = None, root: Path = REPO, submission_id: str | None = None) -> SubmittedJob:
    """Submit ``vak farm run SPEC`` as a Ray job; return its id (the job runs on; nothing waits here)."""
    from vak_context.farm.spec import load_farm_spec

    load_farm_spec(spec)  # a spec that cannot run fails here, not minutes later on the cluster
    entrypoint = farm_entrypoint(spec_in_project(spec, root), out, run_id)
    client = job_client(address)
    try:
        # submit_job packs and uploads the runtime_env before it returns, so the staged copy can go.
        with tempfile.TemporaryDirectory(prefix="vak-job-") as staging:
            code = stage_namespace(root, Path(staging))
            job_id = client.submit_job(entrypoint=entrypoint, runtime_env=job_runtime_env(root, shared, code),
                                       submission_id=submission_id, metadata={"vak": "farm", "spec": spec.name})
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ActorError(f"the job server at {address} refused the farm job ({exc}). Check that its Ray "
                         "version matches this one (`ray --version`) and that it has the project installed.") from exc
    return SubmittedJob(job_id=str(job_id), address=address, entrypoint=entrypoint)


def wait_for_job(client: Any, job_id: str, *, timeout_s: float = 600.0, every_s: float = 0.5,
                 on_status: Callable[[str], None] | None = None) -> str:
    """Poll the job's status until it is final (SUCCEEDED, FAILED or STOPPED); return it.

    ``on_status`` hears each new status. Raises ActorError if the job is still running after ``timeout_s``
    (a bound, not an expectation; the job goes on running).
    """
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        status = str(client.get_job_status(job_id)).rsplit(".", 1)[-1]
        if status != last and on_status is not None:
            on_status(status)
        last = status
        if status in FINAL_STATES:
            return status
        if time.monotonic() > deadline:
            raise ActorError(f"job {job_id} is still {status} after {timeout_s:.0f} s; it goes on running. Follow "
                             f"it with `ray job logs --follow {job_id}` or stop it with `ray job stop {job_id}`.")
        time.sleep(every_s)


# ------------------------------------------------------------------ a local head with a Jobs API


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def head_env() -> dict[str, str]:
    """The environment a head (and every process it starts) must see: loopback only, no telemetry."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    # Jobs run their entrypoint through the shell: `python`, `vak` and `ray` are this interpreter's.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    # On SIGTERM `ray start --block` first drains its node for Ray Serve (up to 30 s by default) and only then
    # stops its processes; a private head serves nothing, and its stop took 30 s of that wait every time.
    env.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
    return env


@dataclass
class LocalHead:
    """``ray start --head --block`` on 127.0.0.1 in a child process, with the dashboard's Jobs API."""

    num_cpus: int = 2
    object_store_mb: int = 192
    resources: dict[str, float] = field(default_factory=dict)
    temp_dir: str | None = None
    gcs_port: int = 0
    dashboard_port: int = 0
    process: subprocess.Popen[str] | None = None
    root: Path | None = None
    log: deque[str] = field(default_factory=lambda: deque(maxlen=200))
    _drainer: threading.Thread | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        """The GCS address a driver passes to ``ray.init(address=...)``."""
        return f"{LOOPBACK}:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        """The Jobs API (``--address`` of ``vak farm submit`` and ``ray job``)."""
        return f"http://{LOOPBACK}:{self.dashboard_port}"

    def command(self) -> list[str]:
        import json

        assert self.root is not None
        ports = {"--port": self.gcs_port, "--dashboard-port": self.dashboard_port}
        for flag in ("--ray-client-server-port", "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
                     "--metrics-export-port", "--runtime-env-agent-port", "--node-manager-port",
                     "--object-manager-port"):
            ports[flag] = free_port()  # fixed defaults (10001, 52365, ...) would clash with another head
        cmd = [str(RAY_CLI), "start", "--head", "--block", "--disable-usage-stats",
               f"--node-ip-address={LOOPBACK}", f"--dashboard-host={LOOPBACK}", "--include-dashboard=true",
               f"--num-cpus={self.num_cpus}", f"--object-store-memory={self.object_store_mb * 1024 * 1024}",
               f"--temp-dir={self.root / RAY_SUBDIR}"]
        cmd += [f"{flag}={port}" for flag, port in ports.items()]
        if self.resources:
            cmd.append(f"--resources={json.dumps(self.resources)}")
        return cmd

    def start(self, timeout_s: float = 180.0) -> LocalHead:
        """Start the head and return once its Jobs API answers (or raise ActorError with the log's tail)."""
        self.root = private_temp_root(self.temp_dir)
        self.gcs_port, self.dashboard_port = free_port(), free_port()
        self.process = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env=head_env(), cwd=self.root, start_new_session=True)
        started = threading.Event()
        self._drainer = threading.Thread(target=self._drain, args=(started,), daemon=True)
        self._drainer.start()
        deadline = time.monotonic() + timeout_s
        if not started.wait(timeout_s) or self.process.poll() is not None:
            self.stop()
            raise ActorError("the local Ray head did not start:\n" + "\n".join(self.log))
        self._wait_for_jobs_api(deadline)
        return self

    def _drain(self, started: threading.Event) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:  # read to the end: a full pipe would stall `ray start --block`
            self.log.append(line.rstrip())
            if "Ray runtime started" in line or "--block" in line:
                started.set()
        started.set()  # it exited: start() sees poll() is not None

    def _wait_for_jobs_api(self, deadline: float) -> None:
        import httpx

        while True:
            try:
                if httpx.get(f"{self.dashboard_url}/api/version", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or (self.process is not None and self.process.poll() is not None):
                self.stop()
                raise ActorError("the local Ray head's Jobs API never answered:\n" + "\n".join(self.log))
            time.sleep(JOBS_API_POLL_S)

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM the `ray start` process (it stops what it started), wait for every process it started
        to exit (SIGKILL what is left after ``timeout_s``), then remove the private folder."""
        if self.process is not None and self.process.poll() is None:
            tree = process_tree(self.process.pid)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            deadline = time.monotonic() + timeout_s
            while (alive := [p for p in tree if _alive(p)]) and time.monotonic() < deadline:
                time.sleep(0.1)  # workers exit once their raylet is gone
            for pid in alive:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.process is not None and self.process.stdout is not None:
            if self._drainer is not None:
                self._drainer.join(10)  # it reads to the end of the pipe, which closes with the process
            self.process.stdout.close()
        if self.root is not None:
            made = self.temp_dir is None
            shutil.rmtree(self.root if made else self.root / RAY_SUBDIR, ignore_errors=True)
            self.root = None

    def __enter__(self) -> LocalHead:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def process_tree(root: int) -> set[int]:
    """``root`` and every process descended from it (from /proc)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                ppid = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):  # it exited while we looked
                continue
            children.setdefault(ppid, []).append(int(name))
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(children.get(pid, []))
    return tree


def _alive(pid: int) -> bool:
    """Running (a zombie, or a pid gone, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
