"""`vak farm run SPEC`: run an eval farm (probe, replay, live, bfcl across models and sessions) on Ray.

API (for the CLI, ``vak farm submit``, notebooks and benchmarks)::

    from vak_context.farm.spec import load_farm_spec
    from vak_context.farm.run import run_farm, RESULTS_SCHEMA, FarmRunResult, FarmProgress, RESULTS_FILE

    spec = load_farm_spec("farm/examples/small.toml")
    result = run_farm(spec, out_dir=Path("vak-data/farm"), run_id=None, progress=print_line, address=None)
    result.run_dir         # out_dir / run_id: spec.json, units/, failed/, ledgers/, replays/, live/, bfcl/, results.parquet
    result.table_path      # run_dir / RESULTS_FILE: the run's table, schema RESULTS_SCHEMA
    result.failed_units    # [(unit, reason)] of units that could not run (a rerun tries them again)

* Ray: ``run_farm`` uses the Ray this process already joined; else ``address`` (``ray.init(address=...)``);
  else ``$RAY_ADDRESS`` (inside a Ray job: ``ray job submit -- vak farm run SPEC``); else it starts a
  local Ray on 127.0.0.1 (``vak_context.engine.localray``) and stops it at the end.
* Run id: ``run_id`` or ``spec.default_run_id()`` (``<farm name>-<digest of the spec>``), so running the
  same spec again resumes the same run: units with a file in ``units/`` are skipped. A run folder made by
  another spec is refused (``FarmSpecError``): pass a new run id.
* Units: one per (task, model, session) (``vak_context.farm.rows.UnitKey``), each a Ray task (``vak_context.farm.tasks``).
  A unit is done when its table is in ``units/<task>--<model>--<session>.parquet``; one that could not run
  (its model cannot be served, its session cannot be read) is one row with ``request = -1`` in ``failed/``.
* ``progress`` is called with a ``FarmProgress`` (done / running / failed / skipped per model) whenever
  something changed; ``FarmProgress.line()`` is the one-line form the CLI prints.
* Results: ``results.parquet``, one row per (task, model, session, request), schema ``RESULTS_SCHEMA``
  (``vak_context.farm.rows``). ``vak_context.farm.report.write_report(run_dir)`` makes the Markdown report and PNGs.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from vak_context.errors import ActorError, FarmSpecError, InvalidName, VakError
from vak_context.farm.rows import RESULTS_SCHEMA, UNIT_FAILED, UnitKey, failed_unit_table
from vak_context.farm.spec import (
    BfclDegradeTask,
    BfclHistoryTask,
    BfclTask,
    FarmSpec,
    LiveTask,
    ModelEntry,
    ProbeTask,
    ReplayTask,
    Task,
)
from vak_context.names import check_name

__all__ = ["RESULTS_FILE", "RESULTS_SCHEMA", "FarmProgress", "FarmRunResult", "ModelProgress", "UnitPlan",
           "plan_units", "read_results", "run_farm"]

RESULTS_FILE = "results.parquet"
UNITS_DIR, FAILED_DIR = "units", "failed"
REPLAYS_DIR = "replays"  # each replay unit's own ledger (vak_context.farm.tasks.claim_replay_folder)
DEFAULT_RETRIES = 3  # a unit that dies with its node runs again elsewhere, up to this many times
POLL_S = 0.5  # how often the driver refreshes "running" while it waits for units


@dataclass(frozen=True)
class ModelProgress:
    total: int = 0
    done: int = 0
    running: int = 0
    failed: int = 0
    skipped: int = 0  # done in an earlier run of the same spec


@dataclass(frozen=True)
class FarmProgress:
    run_id: str
    models: dict[str, ModelProgress]
    event: str = ""  # what just happened, e.g. "done replay/smollm2/tau9"
    nodes: int = 0  # nodes that have run a unit so far
    starts: dict[str, list[str]] = field(default_factory=dict)  # unit -> the nodes it started on, in order

    def line(self) -> str:
        parts = [f"{m}: {p.done + p.skipped}/{p.total} done, {p.running} running, {p.failed} failed"
                 for m, p in self.models.items()]
        return f"[{self.run_id}] " + " | ".join(parts) + (f"  ({self.event})" if self.event else "")


@dataclass(frozen=True)
class FarmRunResult:
    run_id: str
    run_dir: Path
    table_path: Path
    rows: int
    units: int
    ran: int  # units run now (done or failed)
    skipped: int  # units finished by an earlier run of the same spec
    failed_units: list[tuple[str, str]] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)  # nodes that ran units in this run
    starts: dict[str, list[str]] = field(default_factory=dict)  # unit -> nodes it started on (retries show twice)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class UnitPlan:
    key: UnitKey
    task: Task
    model: ModelEntry


def plan_units(spec: FarmSpec, *, hosted_probe: bool = False) -> tuple[list[UnitPlan], list[str]]:
    """Every unit the spec asks for, and notes on what it leaves out (hosted probes the config forbids)."""
    units: list[UnitPlan] = []
    notes: list[str] = []
    for task in spec.tasks:
        if isinstance(task, BfclDegradeTask):  # its model is the scripted one, a unit per (T, category)
            from vak_context.farm.bfcl.tasks import scripted_model

            for name, threshold in task.unit_models():
                units += [UnitPlan(UnitKey(task.name, name, c), task, scripted_model(name, threshold))
                          for c in task.categories]
            continue
        names = task.models or tuple(m.name for m in spec.models)
        for name in names:
            model = spec.model(name)
            if isinstance(task, ProbeTask):
                if model.kind == "hosted" and not hosted_probe:
                    notes.append(f"{task.name}/{name}: not probed: a hosted model is probed only when the operator "
                                 "config says [probe] hosted = \"full\" (it costs tokens)")
                    continue
                units.append(UnitPlan(UnitKey(task.name, name), task, model))
            elif isinstance(task, ReplayTask):
                for session in task.sessions or tuple(s.name for s in spec.sessions):
                    units.append(UnitPlan(UnitKey(task.name, name, session), task, model))
            elif isinstance(task, BfclTask | BfclHistoryTask):
                if model.kind == "hosted":
                    notes.append(f"{task.name}/{name}: BFCL speaks OpenAI chat completions; give the model as "
                                 "local or endpoint. Skipped")
                    continue
                for category in task.categories:  # a unit per category: BFCL's own unit of comparison
                    units.append(UnitPlan(UnitKey(task.name, name, category), task, model))
            else:
                if model.kind == "hosted":
                    notes.append(f"{task.name}/{name}: live runs need a local model or endpoint; skipped")
                    continue
                units.append(UnitPlan(UnitKey(task.name, name, task.session), task, model))
    return units, notes


def read_results(run_dir: Path) -> pa.Table:
    """The run's table: every finished unit's rows, then every failed unit's row."""
    files = sorted((run_dir / UNITS_DIR).glob("*.parquet")) + sorted((run_dir / FAILED_DIR).glob("*.parquet"))
    tables = [pq.read_table(f, schema=RESULTS_SCHEMA) for f in files]
    return pa.concat_tables(tables) if tables else RESULTS_SCHEMA.empty_table()


def _write_atomic(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def _check_run_folder(spec: FarmSpec, run_dir: Path, run_id: str) -> None:
    marker = run_dir / "spec.json"
    body = {"run_id": run_id, "digest": spec.digest(), "spec": asdict(spec)}
    if marker.is_file():
        old = json.loads(marker.read_text(encoding="utf-8"))
        if old.get("digest") != body["digest"]:
            raise FarmSpecError(f"run folder {run_dir} holds a run of another spec (or an edited one). Pass a new "
                                "--run-id, or leave it out to get one from this spec's digest.")
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(body, indent=2, default=str) + "\n", encoding="utf-8")
    if spec.source is not None and spec.source.is_file():
        (run_dir / "spec.toml").write_text(spec.source.read_text(encoding="utf-8"), encoding="utf-8")


def _ensure_ray(address: str | None) -> bool:
    """Join or start Ray; True when this call started a local one (and so stops it)."""
    import ray

    if ray.is_initialized():
        return False
    from vak_context.engine.localray import pin_loopback, start_local_ray

    if address or os.environ.get("RAY_ADDRESS"):
        pin_loopback()
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError) as exc:
            raise ActorError(f"cannot join the Ray cluster at {address or os.environ['RAY_ADDRESS']}: {exc}. "
                             "Start it (`ray start --head --node-ip-address=127.0.0.1`) or check the address.") from exc
        return False
    start_local_ray(num_cpus=max(1, min(2, os.cpu_count() or 1)))
    return True


def run_farm(spec: FarmSpec, *, out_dir: Path, run_id: str | None = None,
             progress: Callable[[FarmProgress], None] | None = None, address: str | None = None,
             max_retries: int = DEFAULT_RETRIES) -> FarmRunResult:
    """Run (or resume) the farm ``spec`` into ``out_dir/<run_id>``. See the module docstring."""
    from vak_context.config import load_config

    run_id = run_id or spec.default_run_id()
    try:
        check_name(run_id, "run id")
    except InvalidName as exc:
        raise FarmSpecError(f"{exc}. Pick another --run-id.") from exc
    run_dir = Path(out_dir) / run_id
    _check_run_folder(spec, run_dir, run_id)
    units, notes = plan_units(spec, hosted_probe=load_config().probe.hosted == "full")
    done = {p.stem for p in (run_dir / UNITS_DIR).glob("*.parquet")}
    pending = [u for u in units if u.key.file_name not in done]
    skipped = len(units) - len(pending)
    started_ray = _ensure_ray(address) if pending else False
    try:
        driver = _Driver(spec, run_id, run_dir, progress, max_retries, notes)
        driver.run(units, pending)
    finally:
        if started_ray:
            from vak_context.engine.localray import stop_local_ray

            stop_local_ray()
    table = read_results(run_dir)
    table_path = run_dir / RESULTS_FILE
    _write_atomic(table, table_path)
    return FarmRunResult(run_id=run_id, run_dir=run_dir, table_path=table_path, rows=table.num_rows,
                         units=len(units), ran=len(pending), skipped=skipped, failed_units=driver.failed,
                         nodes=sorted(driver.nodes), starts=driver.starts, notes=notes)


class _Driver:
    """Submits the pending units, collects their tables as they finish, keeps the run folder and progress."""

    def __init__(self, spec: FarmSpec, run_id: str, run_dir: Path, progress: Callable[[FarmProgress], None] | None,
                 max_retries: int, notes: list[str]) -> None:
        self.spec, self.run_id, self.run_dir = spec, run_id, run_dir
        self.report, self.max_retries, self.notes = progress, max_retries, notes
        self.failed: list[tuple[str, str]] = []
        self.nodes: set[str] = set()
        self.starts: dict[str, list[str]] = {}
        self.counts: dict[str, dict[str, int]] = {}

    def emit(self, event: str, running: dict[str, int] | None = None) -> None:
        if self.report is None:
            return
        running = running or {}
        models = {m: ModelProgress(total=c["total"], done=c["done"], running=running.get(m, 0), failed=c["failed"],
                                   skipped=c["skipped"]) for m, c in self.counts.items()}
        self.report(FarmProgress(self.run_id, models, event, len(self.nodes), dict(self.starts)))

    def run(self, units: list[UnitPlan], pending: list[UnitPlan]) -> None:
        for u in units:
            c = self.counts.setdefault(u.key.model, {"total": 0, "done": 0, "failed": 0, "skipped": 0})
            c["total"] += 1
            c["skipped"] += u not in pending
        for note in self.notes:
            self.emit(f"note: {note}")
        if not pending:
            self.emit("nothing to run: every unit is done")
            return
        import ray

        from vak_context.farm.progress import StartsReader, asker, progress_actor
        from vak_context.farm.tasks import UNIT_RESOURCE_SHARE, kill_run_actors, run_unit

        actor = progress_actor(ray.get_runtime_context().get_node_id())
        reader = StartsReader(self.run_id)
        advertised = {r for node in ray.nodes() if node.get("Alive") for r in node.get("Resources", {})}
        refs: dict[Any, UnitPlan] = {}
        try:
            # Session by session: a worker keeps the last few session chains it read (farm_ray.session_chain).
            jobs = self._jobs(sorted(pending, key=lambda u: u.key.session or ""))
            for unit, job in jobs:
                if isinstance(job, str):  # a session that could not be made: its units fail with the reason
                    self._finish(unit, failed_unit_table(unit.key, unit.task.kind, self.run_id, job), True)
                    continue
                resources = {}
                needs = job.model if unit.task.kind != "replay" else job.summariser
                if needs is not None and needs.kind == "local" and needs.resource in advertised:
                    resources[needs.resource] = UNIT_RESOURCE_SHARE
                # Retried: the unit's node died (a system failure), or an actor it calls (the session's ledger
                # writer) was lost with its node and is coming back. Any other error is the unit's result.
                ref = run_unit.options(num_cpus=1, resources=resources, max_retries=self.max_retries,
                                       retry_exceptions=[ray.exceptions.RayActorError]).remote(job, actor)
                refs[ref] = unit
            self.emit(f"submitted {len(refs)} units")
            self._collect(refs, reader, asker(actor, self.run_id))
        finally:
            kill_run_actors(self.run_id)
            try:  # the actor stays for the next run (vak_context.farm.progress); this run's log goes
                ray.get(actor.forget.remote(self.run_id), timeout=30)
            except ray.exceptions.RayError:
                pass  # an actor that is down lost the log with it

    def _jobs(self, pending: list[UnitPlan]) -> list[tuple[UnitPlan, Any]]:
        from vak_context.farm.sessions import materialise
        from vak_context.farm.tasks import UnitJob

        local = [m for m in self.spec.models if m.kind == "local"]
        made: dict[str, Any] = {}
        out: list[tuple[UnitPlan, Any]] = []
        for unit in pending:
            # a bfcl unit's session is its category
            name = "" if isinstance(unit.task, BfclTask | BfclHistoryTask | BfclDegradeTask) else unit.key.session
            if name and name not in made:
                try:
                    made[name] = materialise(self.spec.session(name), self.run_dir / "ledgers")
                except VakError as exc:
                    made[name] = f"session {name!r} could not be made: {type(exc).__name__}: {exc}"
            mat = made.get(name)
            if isinstance(mat, str):
                out.append((unit, mat))
                continue
            summariser = unit.model if unit.model.kind == "local" else (local[0] if local else None)
            out.append((unit, UnitJob(
                key=unit.key, run_id=self.run_id, task=unit.task, model=unit.model,
                session_root=mat.root if mat else None, source_head=mat.source_head if mat else "",
                system=mat.system if mat else "", summariser=summariser if isinstance(unit.task, ReplayTask) else None,
                replays=self.run_dir / REPLAYS_DIR if isinstance(unit.task, ReplayTask) else None,
                work=self.run_dir / unit.task.kind / unit.key.file_name
                if isinstance(unit.task, LiveTask | BfclTask | BfclHistoryTask | BfclDegradeTask) else None,
            )))
        return out

    def _finish(self, unit: UnitPlan, table: pa.Table, failed: bool) -> None:
        name = unit.key.file_name
        if failed:
            _write_atomic(table, self.run_dir / FAILED_DIR / f"{name}.parquet")
            reason = table.column("reason")[0].as_py() if table.num_rows else "failed"
            self.failed.append((str(unit.key), reason))
        else:
            _write_atomic(table, self.run_dir / UNITS_DIR / f"{name}.parquet")
            (self.run_dir / FAILED_DIR / f"{name}.parquet").unlink(missing_ok=True)
        for node in table.column("node").to_pylist() if table.num_rows else []:
            if node:
                self.nodes.add(node)
        self.counts[unit.key.model]["failed" if failed else "done"] += 1
        self.emit(f"{'FAILED' if failed else 'done'} {unit.key}" + (f": {self.failed[-1][1][:160]}" if failed else ""))

    def _collect(self, refs: dict[Any, UnitPlan], reader: Any, ask: Any) -> None:
        """Keep every finished unit's table as it comes; ask the progress actor for starts at most every
        ``POLL_S`` (each ask is an actor call, and the answer holds only the starts not read yet)."""
        import ray

        last_running: dict[str, int] = {}
        polled = float("-inf")
        while refs:
            new_starts = False
            ready, rest = ray.wait(list(refs), num_returns=1, timeout=POLL_S)
            if ready and rest:  # every other unit that is ready too, without waiting for it
                ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            for ref in ready:
                unit = refs.pop(ref)
                self._finish(unit, *self._table(ref, unit))
            if time.monotonic() - polled >= POLL_S:
                polled = time.monotonic()
                new_starts = reader.poll(ask)
                self.starts = reader.starts
            running: dict[str, int] = {}
            for unit in refs.values():
                if str(unit.key) in self.starts:
                    running[unit.key.model] = running.get(unit.key.model, 0) + 1
            if running != last_running or new_starts:
                last_running = running
                self.emit(f"{sum(running.values())} running", running)
        reader.poll(ask)
        self.starts = reader.starts

    def _table(self, ref: Any, unit: UnitPlan) -> tuple[pa.Table, bool]:
        """A finished unit's table, and whether the unit failed."""
        import ray

        try:
            table = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # a bug inside the unit: record it, go on
            table = failed_unit_table(unit.key, unit.task.kind, self.run_id,
                                      f"internal error: {type(exc.cause).__name__}: {exc.cause}")
        except ray.exceptions.RayError as exc:  # died with its node more times than it may retry
            table = failed_unit_table(unit.key, unit.task.kind, self.run_id,
                                      f"lost after {self.max_retries} retries: {type(exc).__name__}: {exc}")
        return table, table.num_rows == 1 and table.column("request")[0].as_py() == UNIT_FAILED
