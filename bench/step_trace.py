"""One step of `vak turn`, file by file: which project files a step visits and how often it climbs back
up a layer (a call from a lower layer into a higher one: a callback or an object handed down).

Runs `vak turn`'s own wiring (a public-API ``Session``, in-process, as `vak turn` builds it) on the bundled local
model, traces every Python call from the turn's start until its first step is reported, and prints the
files in the order first visited with their layer, then each climb (caller -> callee). The baseline is
the same trace of the tree before the restructure (issue 22): pass ``--root`` a checkout of it (its
folders import by their bare names) to trace that tree with the same counting.

    .venv/bin/python bench/step_trace.py                    # this tree
    .venv/bin/python bench/step_trace.py --root /tmp/old    # a checkout of an older commit

Counting: a *stop* is a project file (not tests/ or bench/) entered during the step; a *climb* is a call
whose callee's layer ranks above its caller's (the caller is the nearest project frame below it; a
generator resumed by the code it was handed to is not a call); each
distinct (caller file, callee file) pair counts once (every upward call is counted as well).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

# Layers bottom to top, by the folder a file sits in (the namespace's own folder is `vak`). The older
# tree kept the CLI, the main job and the farm in one folder, `farm`.
LAYERS = ("vak", "events", "context", "storage", "providers", "agent", "actors", "sessions", "importers",
          "engine", "farm", "cli")
OLD_LIVE_MODULE = "farm.chat"  # where LiveSession lived before the namespace (issue 22)
RANK = {name: i for i, name in enumerate(LAYERS)}
RANK["providers"] = RANK["storage"]  # side by side: neither imports the other
RANK["importers"] = RANK["sessions"]


def layer_of(path: Path, root: Path) -> str | None:
    try:
        top = path.resolve().relative_to(root).parts[0]
    except ValueError:
        return None
    return top if top in RANK else None


class StepTracer:
    """Collects the files and climbs of the calls made while ``active``."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.active = False
        self.files: list[str] = []
        self.climbs: list[tuple[str, str]] = []
        self.climb_calls = 0  # every upward call, not only distinct pairs
        self._layer: dict[str, str | None] = {}

    def _file_layer(self, filename: str) -> str | None:
        if filename not in self._layer:
            self._layer[filename] = layer_of(Path(filename), self.root) if filename.endswith(".py") else None
        return self._layer[filename]

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if not self.active or event != "call":
            return
        callee = frame.f_code.co_filename
        layer = self._file_layer(callee)
        if layer is None:
            return
        rel = str(Path(callee).resolve().relative_to(self.root))
        if rel not in self.files:
            self.files.append(rel)
        caller = frame.f_back
        while caller is not None and self._file_layer(caller.f_code.co_filename) is None:
            caller = caller.f_back
        if caller is None:
            return
        below = self._file_layer(caller.f_code.co_filename)
        assert below is not None
        # A generator resumed by the code it was handed to (``native_calls(c for c in ...)``) is the
        # caller's own expression running, not a call up: only functions and coroutines count.
        if RANK[layer] > RANK[below] and not frame.f_code.co_flags & inspect.CO_GENERATOR:
            self.climb_calls += 1
            pair = (str(Path(caller.f_code.co_filename).resolve().relative_to(self.root)), rel)
            if pair not in self.climbs:
                self.climbs.append(pair)


async def traced_step(root: Path, model: str, directive: str) -> StepTracer:
    if (root / "engine" / "api.py").is_file():
        return await _traced_api_step(root, model, directive)
    # the older tree (before the namespace): its folders import by their bare names
    sys.path.insert(0, str(root))
    LiveSession = importlib.import_module(OLD_LIVE_MODULE).LiveSession
    tracer = StepTracer(root)

    def first_step(_step: Any) -> None:
        tracer.active = False
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]

    with tempfile.TemporaryDirectory() as tmp:
        live = LiveSession(ledger=Path(tmp) / "ledger", session="trace", workspace=root, model=model,
                           max_steps=1, max_tokens=48, on_step=first_step)
        async with live:
            tracer.active = True
            threading.setprofile(tracer.profile)
            sys.setprofile(tracer.profile)
            try:
                await live.turn(directive)
            finally:
                sys.setprofile(None)
                threading.setprofile(None)  # type: ignore[arg-type]
    return tracer


async def _traced_api_step(root: Path, model: str, directive: str) -> StepTracer:
    """This tree: the public API's session, as `vak turn` opens it (a bundled model, the workspace tools)."""
    import vak_context

    tracer = StepTracer(root)

    def first_step(_step: Any) -> None:
        tracer.active = False
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]

    with tempfile.TemporaryDirectory() as tmp, vak_context.Engine.open(Path(tmp) / "ledger") as engine:
        async with engine.session("trace", model=f"local:{model}", workspace=root, card_tools=True, max_steps=1,
                                  max_tokens=48, on_step=first_step) as live:
            tracer.active = True
            threading.setprofile(tracer.profile)
            sys.setprofile(tracer.profile)
            try:
                await live.run(directive)
            finally:
                sys.setprofile(None)
                threading.setprofile(None)  # type: ignore[arg-type]
    return tracer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--model", default="smollm2", help="a bundled model (smollm2 is the fastest)")
    parser.add_argument("--directive", default="List the files in the workspace.")
    args = parser.parse_args()
    tracer = asyncio.run(traced_step(args.root.resolve(), args.model, args.directive))
    root = tracer.root
    print(f"one step of `vak turn` in {root}: {len(tracer.files)} files, {len(tracer.climbs)} climbs back up a layer "
          f"(distinct caller -> callee file pairs; {tracer.climb_calls} upward calls in all)")
    for i, rel in enumerate(tracer.files, 1):
        print(f"  {i:3d}  {layer_of(root / rel, root):<9}  {rel}")
    print("climbs (caller -> callee):")
    for caller, callee in tracer.climbs:
        print(f"  {layer_of(root / caller, root):>9} -> {layer_of(root / callee, root):<9}  {caller} -> {callee}")


if __name__ == "__main__":
    main()
