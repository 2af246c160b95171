"""The farm's overhead: the same replay workload (sessions x profiles) in-process and as a farm on one node.

Workload: the recorded sessions of ../shared/data/trajectories (or ``--generated N`` generated ones)
replayed under model profiles (32k, 8k with a 6k horizon, 200k, ...): every recorded request planned,
projected, checked and re-projected for the two-model gate (``vak_context.farm.replay.replay_session``). The
models are OpenAI-compatible endpoints that replay never calls, so no model server runs and no packet
summary is written (a plan that needs one records a failed row, the same in both runs).

* in-process (the baseline): materialise the sessions into ledgers, then ``replay_session`` for every
  (profile, session) one after another in this process, each ledger written through its own LedgerStore;
* farm: ``run_farm`` on a local Ray with ``--cpus`` CPUs (default 1: units run one at a time, as the
  baseline does, so the difference is the farm's own cost): the driver materialises the sessions, runs each
  unit as a Ray task (its own replay ledger, written by the unit), ships its rows back as an Arrow table
  through the object store and keeps it as Parquet, then writes the run's table. A "cold" run first (Ray
  starts the units' worker, which imports the engine), then "warm" runs (new run ids on the same Ray).

Both sides are charged the same way: Ray is up for both (started once, before any measure), and CPU time is
the sum over this process and every process of that local Ray (GCS, raylet, agents, idle and busy workers,
the progress actor), sampled while the measure runs; so what Ray burns doing nothing is in both, and the
difference is what the farm adds. (CPU time, unlike wall time on a shared machine, hardly moves with other
load.) Also printed: that CPU per process role, Ray's idle CPU per second, and the ratio with the in-process
side charged only its own process (as this bench did before: it left Ray's idle processes to the farm).

Each is measured at two sizes, the same sessions under 1 profile and under ``--profiles`` profiles, so
the farm's cost splits into a part per run (the progress actor's calls, the results table: paid once,
whatever the number of units) and a part per unit (a Ray task, its Arrow table through the object store, a
Parquet file): per unit = ((farm2 - farm1) - (in-process2 - in-process1)) / (units2 - units1). Printed: the
ratio farm / in-process at the larger size (goal: <= 1.2x) and the overhead per unit in ms and per run in s.
``--repeat N`` runs N interleaved rounds (in-process 1, farm 1, in-process 2, farm 2) and takes medians.
Ray's own start (``ray.init``) is timed apart. The in-process workload runs once uncounted first (imports,
first-call caches), as the farm's worker warms up in its cold run. ``--profile DIR`` writes each unit's CPU
and garbage-collection figures on both sides (``vak_context.farm.unit_profile``) and prints the replay's own CPU
inside farm units against in-process.

Default workload: the recorded sessions in ../shared/data/trajectories (their real sizes), 3 profiles.
Run: ``.venv/bin/python bench/farm.py`` (``--quick``: 3 small generated sessions x 2 profiles, once;
``--generated N``: generated sessions instead; ``--cpus 2``: a parallel farm; ``--repeat 3``: medians of three
interleaved rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROFILES = (  # (name, window, horizon or None for the window)
    ("w32k", 32768, None),
    ("w8k", 8192, 6000),
    ("w200k", 200_000, None),
    ("w16k", 16384, 12000),
)
TICK = os.sysconf("SC_CLK_TCK")
SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "trajectories"


def spec_text(sessions: list[str], profiles: int, generated: int = 0, turns: int = 8) -> str:
    """A replay-only spec: the recorded ``sessions`` (file names under shared:data/trajectories) and
    ``generated`` generated ones, under the first ``profiles`` profiles."""
    lines = ["[farm]", 'name = "bench"']
    for name, window, horizon in PROFILES[:profiles]:
        lines += ["[[models]]", f'name = "{name}"', 'kind = "endpoint"', 'base_url = "http://127.0.0.1:9/v1"',
                  f'model = "{name}"', f"window = {window}"] + ([f"horizon = {horizon}"] if horizon else [])
    for i, file in enumerate(sessions):
        lines += ["[[sessions]]", f'name = "rec{i}"', 'kind = "recording"', f'path = "shared:data/trajectories/{file}"']
    for i in range(generated):
        lines += ["[[sessions]]", f'name = "gen{i}"', 'kind = "generated"', f"seed = {i}", f"turns = {turns}"]
    lines += ["[[tasks]]", 'name = "replay"', 'kind = "replay"']
    return "\n".join(lines) + "\n"


class CpuMeter:
    """CPU seconds used by this process and every process under it (Ray's GCS, raylet, workers and actors
    are its descendants) while it runs. A thread samples each process's utime + stime every ``every_s``, so
    a worker or actor that exits during the run still counts up to its last sample; the sampler's own CPU
    time is left out."""

    def __init__(self, every_s: float = 0.2) -> None:
        self.every_s = every_s
        self.base: dict[tuple[int, int], float] = {}  # (pid, start time) -> CPU s when first seen
        self.last: dict[tuple[int, int], float] = {}
        self.stop_event = threading.Event()
        self.roles: dict[tuple[int, int], str] = {}
        self.own = 0.0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self, first: bool) -> None:
        from vak_context.farm.jobs import process_tree

        for pid in process_tree(os.getpid()):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                start = int(fields[19])  # start time: a reused pid is another process
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
            except (OSError, IndexError, ValueError):
                continue
            used = (int(fields[11]) + int(fields[12])) / TICK
            key = (pid, start)
            self.base.setdefault(key, used if first else 0.0)
            self.last[key] = used
            self.roles[key] = role_of(pid, command)

    def _run(self) -> None:
        t0 = time.thread_time()
        while not self.stop_event.wait(self.every_s):
            self._sample(False)
        self.own = time.thread_time() - t0

    def __enter__(self) -> CpuMeter:
        self._sample(True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join()
        self._sample(False)

    @property
    def seconds(self) -> float:
        return sum(self.last[k] - self.base[k] for k in self.last) - self.own

    def by_role(self) -> dict[str, float]:
        """CPU seconds per ROLES entry (this process's without the sampler's)."""
        out = dict.fromkeys(ROLES, 0.0)
        for k in self.last:
            out[self.roles[k]] += self.last[k] - self.base[k]
        out[ROLES[0]] -= self.own
        return out


ROLES = ("bench process", "Ray workers", "Ray daemons")


def role_of(pid: int, command: bytes) -> str:
    """Which of ROLES a process is: this one; a Ray worker (a unit's task, an actor, an idle worker: its
    command line is ``ray::...`` or Ray's default_worker); else one of Ray's daemons (GCS, raylet, the
    dashboard and runtime-env agents, the log monitor), which a worker also is for the moment after its
    fork from the raylet and before it renames itself."""
    if pid == os.getpid():
        return ROLES[0]
    return ROLES[1] if command.startswith(b"ray::") or b"default_worker.py" in command else ROLES[2]


class Measure(NamedTuple):
    wall: float  # s
    rows: int
    cpu: float  # s, summed over this process and every process of its local Ray
    roles: dict[str, float]  # that CPU per CpuMeter role


def in_process(spec: Any, work: Path) -> Measure:
    """The workload run here, one unit after another, while the same local Ray as the farm's is up."""
    with CpuMeter() as meter:
        started = time.perf_counter()
        rows = _in_process(spec, work)
        wall = time.perf_counter() - started
    return Measure(wall, len(rows), meter.seconds, meter.by_role())


def _in_process(spec: Any, work: Path) -> list[dict[str, Any]]:
    from vak_context.actors.ledger.client import LedgerClient
    from vak_context.errors import ModelServerError
    from vak_context.farm.replay import replay_session
    from vak_context.farm.rows import UnitKey
    from vak_context.farm.sessions import materialise
    from vak_context.farm.tasks import claim_replay_folder
    from vak_context.farm.unit_profile import unit_profile
    from vak_context.storage.ledger import LedgerStore

    async def no_summary(_view: Any, _plan: Any) -> list[str]:
        raise ModelServerError("no summariser in this benchmark")  # the farm's runs have none either

    made = {s.name: materialise(s, work / "ledgers") for s in spec.sessions}
    rows: list[dict[str, Any]] = []
    for name, mat in made.items():
        with LedgerStore(mat.root, readonly=True) as reader:  # as a farm unit reads it
            chain = reader.chain_to_root(mat.source_head)
            for model in spec.models:
                # the same writes as a farm unit: the replay into a ledger of its own, this process its writer
                folder = claim_replay_folder(work / "replays", name, model.name)
                with LedgerStore(folder) as store, unit_profile(f"replay/{model.name}/{name}"):
                    rows += asyncio.run(replay_session(
                        UnitKey("replay", model.name, name), "inproc", "", model, chain,
                        ledger=LedgerClient(str(folder), store), decode=reader.mapper.payload_of,
                        target=folder.name, system=mat.system, summarise=no_summary))
    return rows


def as_farm(spec: Any, out: Path, run_id: str) -> Measure:
    """run_farm on the local Ray this process started."""
    import pyarrow.parquet as pq

    from vak_context.farm.run import run_farm

    with CpuMeter() as meter:
        started = time.perf_counter()
        result = run_farm(spec, out_dir=out, run_id=run_id)
        wall = time.perf_counter() - started
    if result.failed_units:
        raise SystemExit(f"bench: units failed: {result.failed_units}")
    return Measure(wall, pq.read_table(result.table_path).num_rows, meter.seconds, meter.by_role())


def median_of(runs: list[Measure]) -> Measure:
    """The median of each figure over interleaved rounds (roles: the roles of the run with the median CPU)."""
    by_cpu = sorted(runs, key=lambda m: m.cpu)
    return Measure(statistics.median(m.wall for m in runs), runs[0].rows, statistics.median(m.cpu for m in runs),
                   by_cpu[(len(runs) - 1) // 2].roles)


def idle_ray_cpu(seconds: float = 5.0) -> float:
    """CPU seconds per second that the local Ray and this process burn doing nothing."""
    with CpuMeter() as meter:
        time.sleep(seconds)
    return meter.seconds / seconds


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--generated", type=int, default=0, help="generated sessions instead of the recorded ones")
    ap.add_argument("--turns", type=int, default=8, help="turns per generated session")
    ap.add_argument("--profiles", type=int, default=3, choices=range(2, len(PROFILES) + 1))
    ap.add_argument("--cpus", type=int, default=1, help="CPUs of the one-node farm (default 1: one unit at a time)")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds; medians count (default 1)")
    ap.add_argument("--quick", action="store_true", help="3 generated sessions of 4 turns, 2 profiles, 1 round")
    ap.add_argument("--profile", type=Path, help="write each unit's CPU and GC figures here (both sides; "
                    "vak_context.farm.unit_profile) and compare the replay's own CPU in a farm unit and in-process")
    args = ap.parse_args(argv)
    if args.quick:
        args.generated, args.turns, args.profiles, args.repeat = 3, 4, 2, 1
    recorded = [] if args.generated else sorted(p.name for p in SHARED.iterdir() if p.name != "README.md")
    if not recorded and not args.generated:
        raise SystemExit(f"bench: no recorded sessions in {SHARED}; pass --generated N")
    if args.profile:
        from vak_context.farm.unit_profile import PROFILE_ENV

        os.environ[PROFILE_ENV] = str(args.profile.resolve())  # before Ray starts: its workers inherit it

    from vak_context.engine.localray import start_local_ray, stop_local_ray
    from vak_context.farm.spec import parse_farm_spec

    work = Path(tempfile.mkdtemp(prefix="vak-bench-farm-"))
    try:
        small = parse_farm_spec(spec_text(recorded, 1, args.generated, args.turns), base_dir=work)
        big = parse_farm_spec(spec_text(recorded, args.profiles, args.generated, args.turns), base_dir=work)
        u1, u2 = len(big.sessions), len(big.sessions) * args.profiles
        what = f"{len(recorded)} recorded" if recorded else f"{args.generated} generated ({args.turns} turns)"
        print(f"workload: {what} sessions x 1 and x {args.profiles} profiles = {u1} and {u2} replay units; "
              f"the farm on one node with {args.cpus} CPU(s); {args.repeat} interleaved round(s)", flush=True)
        t0 = time.perf_counter()
        start_local_ray(num_cpus=args.cpus)
        ray_s = time.perf_counter() - t0
        try:
            idle = idle_ray_cpu()
            # Not counted: the engine's imports and first-call caches, which the farm's workers pay in its cold run.
            in_process(small, work / "warmup")
            cold = as_farm(big, work / "farm", "cold")
            rounds: dict[str, list[Measure]] = {"i1": [], "i2": [], "f1": [], "f2": []}
            for r in range(args.repeat):  # interleaved, so a change in the machine's load hits both sides
                rounds["i1"].append(in_process(small, work / f"inproc1-{r}"))
                rounds["f1"].append(as_farm(small, work / "farm", f"warm1-{r}"))
                rounds["i2"].append(in_process(big, work / f"inproc2-{r}"))
                rounds["f2"].append(as_farm(big, work / "farm", f"warm2-{r}"))
                print(f"round {r + 1}: CPU s in-process {rounds['i1'][-1].cpu:.1f} / {rounds['i2'][-1].cpu:.1f}, "
                      f"farm {rounds['f1'][-1].cpu:.1f} / {rounds['f2'][-1].cpu:.1f}", flush=True)
        finally:
            stop_local_ray()
        i1, i2, f1, f2 = (median_of(rounds[k]) for k in ("i1", "i2", "f1", "f2"))
        if (f1.rows, f2.rows) != (i1.rows, i2.rows):
            raise SystemExit(f"bench: the farm wrote {f1.rows}/{f2.rows} rows, in-process {i1.rows}/{i2.rows}: "
                             "not the same work")
        figures = report(u1, u2, i1, i2, f1, f2, cold)
        print(f"ray.init {ray_s:.2f} s (once per cluster; in no figure above); Ray idle (charged to both sides): "
              f"{idle:.3f} s of CPU per s", flush=True)
        if args.profile:
            figures |= unit_cpu(args.profile, [s.name for s in big.sessions], [m.name for m in big.models])
        return figures | {"ray_init_s": ray_s, "idle_cpu_per_s": idle}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(u1: int, u2: int, i1: Measure, i2: Measure, f1: Measure, f2: Measure, cold: Measure) -> dict[str, float]:
    """Print the table, the ratios, the per-unit and per-run overheads and the CPU per role; return the figures."""
    print(f"{'':12} {'units':>5} {'wall s':>8} {'CPU s':>8}   {'units':>5} {'wall s':>8} {'CPU s':>8}   rows")
    print(f"{'in-process':12} {u1:>5} {i1.wall:8.2f} {i1.cpu:8.2f}   {u2:>5} {i2.wall:8.2f} {i2.cpu:8.2f}   {i2.rows}")
    print(f"{'farm (warm)':12} {u1:>5} {f1.wall:8.2f} {f1.cpu:8.2f}   {u2:>5} {f2.wall:8.2f} {f2.cpu:8.2f}   {f2.rows}")
    print(f"{'farm (cold)':12} {'':>5} {'':>8} {'':>8}   {u2:>5} {cold.wall:8.2f} {cold.cpu:8.2f}   "
          "(the first run: Ray starts the unit's worker, which imports the engine)")
    figures: dict[str, float] = {"units": u2}
    for label, k in (("wall", 0), ("CPU", 2)):
        per_unit_ms = ((f2[k] - f1[k]) - (i2[k] - i1[k])) * 1000 / (u2 - u1)
        per_run_s = (f1[k] - i1[k]) - per_unit_ms * u1 / 1000
        unit_ms = i2[k] * 1000 / u2
        figures |= {f"{label}_ratio": f2[k] / i2[k], f"{label}_ratio_cold": cold[k] / i2[k],
                    f"{label}_per_unit_ms": per_unit_ms, f"{label}_per_run_s": per_run_s, f"{label}_unit_ms": unit_ms}
        print(f"\n{label}: farm / in-process at {u2} units {f2[k] / i2[k]:.2f}x warm, {cold[k] / i2[k]:.2f}x "
              f"cold (goal: <= 1.2x)")
        print(f"{label}: overhead per unit {per_unit_ms:.0f} ms (slope from {u1} to {u2} units; a unit's own "
              f"work {unit_ms:.0f} ms), per run {per_run_s:.2f} s (progress actor, results table)")
    print(f"\nCPU s at {u2} units by process: " + "; ".join(
        f"{role} {i2.roles[role]:.1f} in-process, {f2.roles[role]:.1f} farm" for role in ROLES))
    own = i2.roles[ROLES[0]]  # the in-process side charged only its own process, Ray's idle processes not
    print(f"CPU: farm / in-process charged only this process's CPU: {f2.cpu / own:.2f}x warm (the old way: it "
          "leaves Ray's idle workers and daemons to the farm alone)")
    return figures | {"CPU_ratio_own_process": f2.cpu / own}


def unit_cpu(folder: Path, sessions: list[str], models: list[str]) -> dict[str, float]:
    """The replay's own CPU, unit by unit, in-process (this process) and inside farm units (Ray workers):
    the median over every run of each unit, summed over the larger workload's units."""
    import json

    seen: dict[tuple[bool, str], list[float]] = {}
    for path in folder.glob("units.*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            unit = json.loads(line)
            seen.setdefault((unit["pid"] == os.getpid(), unit["unit"]), []).append(unit["cpu_s"])
    keys = [f"replay/{m}/{s}" for s in sessions for m in models]
    here, farm = (sum(statistics.median(seen.get((side, k), [0.0])) for k in keys) for side in (True, False))
    print(f"the replay's own CPU over the {len(keys)} units (medians per unit, {folder}): in-process {here:.2f} s, "
          f"in farm units {farm:.2f} s ({farm / here:.2f}x)")
    return {"unit_cpu_inproc_s": here, "unit_cpu_farm_s": farm}


if __name__ == "__main__":
    main()
