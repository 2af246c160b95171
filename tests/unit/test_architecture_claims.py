"""docs/ARCHITECTURE.md's prose claims that name code, each checked against the code (issue 37 item 5): one
test per claim, which first finds the claim's words on the page (a claim reworded or removed fails here,
so its test goes with it) and then checks the code says the same, from its syntax tree: which module
imports or calls what. test_architecture_doc.py checks that every path and name the page cites exists;
test_layering.py that its layer table is the layering that test enforces."""

from __future__ import annotations

import ast
import re
import tomllib
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NS = "vak_context"


@cache
def _page() -> str:
    """The page with its line breaks folded to spaces, so a claim is found whatever its wrapping."""
    return " ".join((REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8").split())


def _claims(*words: str) -> None:
    """The page still states the claim: each of ``words`` is on it."""
    missing = [w for w in words if w not in _page()]
    assert missing == [], f"docs/ARCHITECTURE.md no longer says {missing}: reword this test with the claim"


@cache
def _tree(rel: str) -> ast.Module:
    return ast.parse((REPO / rel).read_text(encoding="utf-8"))


def _namespace(folder: str = "") -> list[str]:
    """Every module file of the namespace (pyproject's package-dir folders), or of one folder of it."""
    dirs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values()
    roots = [REPO / folder] if folder else [REPO / d for d in dirs]
    return sorted(str(p.relative_to(REPO)) for root in roots for p in root.rglob("*.py"))


def _defining(name: str) -> str:
    """The one module file of the namespace that defines ``name`` at its top level (found by name, so a claim's
    test follows a module that moves)."""
    found = [rel for rel in _namespace() for n in _tree(rel).body
             if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name]
    assert len(found) == 1, (name, found)
    return found[0]


def _dotted(rel: str) -> str:
    """``actors/probe.py`` -> ``vak_context.actors.probe``, as pyproject's package-dir installs it."""
    dirs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    path = Path(rel)
    for package, folder in dirs.items():
        if folder != "vak" and path.parts[0] == folder:
            return ".".join((package, *path.with_suffix("").parts[1:])).removesuffix(".__init__")
    return ".".join((NS, *path.with_suffix("").parts[1:]))


def _imported(node: ast.AST) -> set[str]:
    """Each module an import under ``node`` names, and ``module.name`` for each name a from-import takes."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            out |= {n.module} | {f"{n.module}.{a.name}" for a in n.names}
    return out


def _top_level_imports(rel: str) -> set[str]:
    """What a module imports when it is imported: its top-level imports (not a function's, nor a
    ``TYPE_CHECKING`` block's)."""
    out: set[str] = set()
    for node in _tree(rel).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            out |= _imported(node)
    return out


def _function(rel: str, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """``name`` or ``Class.name`` as defined in ``rel``."""
    scope: list[ast.stmt] = _tree(rel).body
    *outer, name = qualname.split(".")
    for part in outer:
        scope = next(n for n in scope if isinstance(n, ast.ClassDef) and n.name == part).body
    return next(n for n in scope if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name)


def _called(node: ast.AST) -> set[str]:
    """The names called under ``node``: ``f(...)`` gives ``f``, ``a.b.f(...)`` gives ``f``."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            if isinstance(n.func, ast.Name):
                out.add(n.func.id)
            elif isinstance(n.func, ast.Attribute):
                out.add(n.func.attr)
    return out


def _keywords(node: ast.AST, callee: str) -> set[str]:
    """The keyword arguments of every call of ``callee`` (as ``_called`` names it) under ``node``."""
    return {k.arg for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute | ast.Name)
            and (n.func.attr if isinstance(n.func, ast.Attribute) else n.func.id) == callee
            for k in n.keywords if k.arg}


def test_over_length_recovery_is_OpenTurn_rejected_through_the_step_policy() -> None:
    """"an over-length rejection corrects the profile and retries once as the step policy says,
    agent/turn.py:OpenTurn.rejected"; "sets verified_window as the step policy says
    (context/planner/policy.py) ... whichever driver runs the turn"."""
    _claims("as the step policy says, `agent/turn.py:OpenTurn.rejected`",
            "sets `verified_window` as the step policy says (`context/planner/policy.py`)",
            "whichever driver runs the turn")
    rejected = _function("agent/turn.py", "OpenTurn.rejected")
    assert {"decide", "Rejected"} <= _called(rejected)
    # The policy's answer to a rejection is the profile with the verified window it implies.
    assert "after_overflow" in _called(_function("context/planner/policy.py", "decide"))
    assert "verified_window" in _keywords(_function("context/planner/policy.py", "after_overflow"), "replace")
    # Both drivers hand the rejection to the turn and decide nothing themselves.
    for driver in ("agent/loop.py", "engine/caller.py"):
        assert "rejected" in _called(_tree(driver)) and "decide" not in _called(_tree(driver)), driver
    # Nothing else builds a rejection for the policy: the recovery lives in one place.
    builders = [rel for rel in _namespace() if "Rejected" in _called(_tree(rel))]
    assert builders == ["agent/turn.py"]
    assert not (REPO / "agent" / "request.py").exists()


def test_the_probe_actor_is_started_by_vak_chat_and_vak_turn_with_ray_and_by_vak_run() -> None:
    """"vak chat --ray and vak turn --ray open their engine with Engine.open(ray=...) (cli/chat.py), as vak
    run does for its live turns (cli/mainjob.py); a session bound there gets the folder's actors from
    engine/binding.py:ray_services, the ProbeActor among them (actors/turn_services.py:ray_services)"."""
    _claims("`vak chat --ray` and `vak turn --ray` open their engine with `Engine.open(ray=...)` (`cli/chat.py`)",
            "as `vak run` does for its live turns (`cli/mainjob.py`)",
            "the ProbeActor among them (`actors/turn_services.py:ray_services`)")
    chat = _tree("cli/chat.py")
    assert "--ray" in {c.value for c in ast.walk(chat) if isinstance(c, ast.Constant)}
    assert "ray" in _keywords(chat, "open")
    assert "ray" in _keywords(_function("cli/mainjob.py", "run_live_turns"), "open")
    # A session on Ray: its loop takes its services from binding's ray_services, which asks the actors' own,
    # which starts (or gets) the folder's ProbeActor for the bound model.
    assert "ray_services" in _called(_tree("engine/session_loop.py"))
    assert "actor_services" in _called(_function("engine/binding.py", "ray_services"))
    assert "vak_context.actors.turn_services.ray_services" in _imported(_function("engine/binding.py", "ray_services"))
    assert "probe_actor" in _called(_tree("actors/turn_services.py"))


def test_vak_run_and_vak_probe_measure_the_model_in_their_own_process() -> None:
    """"vak run first measures its model with the quick ladder in its own process
    (agent/probe/local.py:probe_local) ...; vak probe does the same for any provider (cli/probe_cmd.py)"."""
    _claims("measures its model with the quick ladder in its own process (`agent/probe/local.py:probe_local`)",
            "`vak probe` does the same for any provider (`cli/probe_cmd.py`)")
    measure = _function("cli/mainjob.py", "measure_profile")
    assert "probe_local" in _called(measure) and "vak_context.agent.probe.QUICK" in _imported(measure)
    assert any(m.startswith("vak_context.agent.probe") for m in _imported(_tree("cli/probe_cmd.py")))
    assert "ProbeRunner" in _called(_tree("cli/probe_cmd.py"))


def test_ray_remote_is_applied_only_in_actors_factory() -> None:
    """"ray.remote applied only in actors/factory.py"."""
    _claims("`ray.remote` applied only in `actors/factory.py`")
    applied = sorted({rel for rel in _namespace() for n in ast.walk(_tree(rel))
                      if isinstance(n, ast.Attribute) and n.attr == "remote" and isinstance(n.value, ast.Name)
                      and n.value.id == "ray"})
    assert applied == ["actors/factory.py"]


def test_serve_imports_nothing_of_farm_and_forks_with_storage_ledger_copy() -> None:
    """"nothing of farm/ (a forked session is copied with storage/ledger_copy.py, as the farm copies its
    sessions)"."""
    _claims("nothing of `farm/` (a forked session is copied with `storage/ledger_copy.py`")
    farm = {rel: sorted(m for m in _imported(_tree(rel)) if m.startswith(f"{NS}.farm")) for rel in _namespace("serve")}
    assert {rel: ms for rel, ms in farm.items() if ms} == {}
    copiers = [rel for rel in _namespace("serve") if "vak_context.storage.ledger_copy" in _imported(_tree(rel))]
    assert copiers and all("copy_entries" in _called(_tree(rel)) for rel in copiers)


def test_the_pure_engine_has_no_io_and_no_clock() -> None:
    """"pure engine | context/ | ... | no I/O, no clock": no module of context/ imports a module that reads
    files, sockets, processes or the time, opens a file, or asks the clock (``datetime.now``)."""
    _claims("| pure engine | `context/` | `vak_context.context` | no I/O, no clock;")
    found = {rel: bad for rel in _namespace("context") if (bad := _impure(rel))}
    assert found == {}


def test_the_modules_the_page_calls_pure_are() -> None:
    """"(serve/textform.py, pure)", "(serve/continuity.py, pure)", "(context/planner/delta.py, pure ...)":
    each module the page calls pure does no I/O and asks no clock, as context/ does not."""
    pure = re.findall(r"\(`([\w/]+\.py)`, pure", _page())
    assert len(pure) >= 3
    assert {rel: bad for rel in pure if (bad := _impure(rel))} == {}


IO = {"os", "io", "time", "pathlib", "socket", "subprocess", "shutil", "tempfile", "asyncio", "httpx", "ray",
      "pyarrow", "sqlite3", "urllib", "requests"}
CLOCK = {"open", "now", "utcnow", "today", "time", "perf_counter", "monotonic"}


def _impure(rel: str) -> list[str]:
    """What in a module reads or writes outside it or asks the clock: its imports of I/O modules, its calls of
    ``open`` and of the clock."""
    tree = _tree(rel)
    return sorted(m for m in _imported(tree) if m.split(".")[0] in IO) + sorted(_called(tree) & CLOCK)


def test_the_framework_adapters_use_the_public_api_only() -> None:
    """"adapters/ ... on the public API only": every name an adapter takes from the project is one
    ``import vak_context`` gives, one engine/api.py defines for integrations, an error, an extra's check,
    or the adapters' own."""
    _claims("`adapters/langchain.py`: a LangChain v1 agent middleware), on the public API only")
    import vak_context
    from vak_context.engine import api

    public = set(vak_context.__all__) | {n for n in vars(api) if not n.startswith("_")}
    taken = {}
    for rel in _namespace("adapters"):
        for n in ast.walk(_tree(rel)):
            if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith(NS) and not n.module.startswith(
                    (f"{NS}.adapters", f"{NS}.errors", f"{NS}.extras")):
                taken |= {f"{n.module}.{a.name}": a.name for a in n.names}
    assert taken and {full for full, name in taken.items() if name not in public} == set()


def test_an_in_process_ledger_client_never_imports_ray() -> None:
    """"RemoteLedger ... a module of its own so an in-process client never imports Ray": the client's module
    imports neither Ray nor the remote one when it is imported; the remote one is Ray's side."""
    _claims("a module of its own so an in-process client never imports Ray")
    client, remote = _defining("LedgerClient"), _defining("RemoteLedger")
    assert client != remote
    assert not {m for m in _top_level_imports(client) if m == "ray" or m.startswith(("ray.", _dotted(remote)))}
    assert _dotted(remote) in _imported(_tree(client))  # when it is used
    assert "ray" in _imported(_tree(remote))


def test_ray_errors_are_translated_where_the_loop_waits_on_actors() -> None:
    """"the loop's waits on actors in actors/ray_errors.py map_ray_errors (through actors/turn_services.py and
    [RemoteLedger's module])"."""
    _claims("the loop's waits on actors in `actors/ray_errors.py` `map_ray_errors` (through "
            "`actors/turn_services.py` and")
    for rel in ("actors/turn_services.py", _defining("RemoteLedger")):
        assert "vak_context.actors.ray_errors.map_ray_errors" in _imported(_tree(rel)), rel
        assert "map_ray_errors" in _called(_tree(rel)), rel


def test_each_layer_of_the_append_path_defines_the_appends_its_row_names() -> None:
    """"The path of an append": each row's class (or one of its two) defines every method the row's
    second column names, in the module the row cites."""
    _claims("A turn's append passes these layers on its way to the disk on Ray (in-process the loop's services "
            "append to the LedgerStore the process holds: the first row, then the last two)")
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = text.split("| layer | its `append` | why it is there |", 1)[1].split("\n\n", 1)[0]
    rows = [line.strip("|").split("|") for line in table.strip().splitlines()[1:]]
    assert len(rows) >= 7
    for layer, methods, _ in rows:
        classes = [c for c in re.findall(r"`(\w+)`", layer) if c[0].isupper()]
        paths = re.findall(r"`([\w/]+\.py)`", layer)
        defined = {f"{node.name}.{item.name}" for rel in paths for node in _tree(rel).body
                   if isinstance(node, ast.ClassDef) for item in node.body
                   if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)}
        for method in re.findall(r"`(\w+)(?:\([^`]*\))?`", methods):
            assert any(f"{c}.{method}" in defined for c in classes), f"{layer.strip()}: {method}"


def test_the_plan_entry_is_made_by_the_planner_and_names_it() -> None:
    """"appends the plan entry of the plan it sends (actors/planner.py plan_record: the entry's producer is
    "PlannerActor")"."""
    _claims("appends the plan entry of the plan it sends",
            '(actors/planner.py plan_record: the entry\'s producer is "PlannerActor")')
    planner = _tree("actors/planner.py")
    assert any(isinstance(n, ast.Assign) and ast.unparse(n) == "PRODUCER = 'PlannerActor'" for n in planner.body)
    assembler = _tree("actors/assembler.py")
    assert "vak_context.actors.planner.PRODUCER" in _imported(assembler)
    assert any(isinstance(n, ast.Call) and ast.unparse(n.func) == "plan_record"
               and "PRODUCER" in {ast.unparse(a) for a in n.args} for n in ast.walk(assembler))


def test_the_planner_holds_the_summariser_object() -> None:
    """"it holds the summariser (a Summariser object)"."""
    _claims("it holds the summariser (a `Summariser` object)")
    init = _function("actors/planner.py", "PlannerActor.__init__")
    annotations = {a.arg: ast.unparse(a.annotation) for a in init.args.args + init.args.kwonlyargs if a.annotation}
    assert annotations.get("summariser") == "Summariser | None"
    assert "vak_context.agent.summarise.Summariser" in _imported(_tree("actors/planner.py"))


def test_import_vak_context_gives_the_public_api_of_engine_api() -> None:
    """"the public API (engine/api.py: Engine, Session ..., TurnResult, re-exported by vak/__init__.py so that
    import vak_context gives it)"."""
    _claims("re-exported by `vak/__init__.py` so that `import vak_context` gives it")
    import vak_context
    from vak_context.engine import api

    for name in ("Engine", "Session", "TurnResult"):
        assert getattr(vak_context, name) is getattr(api, name)


def test_the_farm_imports_no_cli_code() -> None:
    """"farm/ ... imports no CLI code"."""
    _claims("imports no CLI code (`docs/FARM.md`)")
    cli = {rel: sorted(m for m in _imported(_tree(rel)) if m.startswith(f"{NS}.cli")) for rel in _namespace("farm")}
    assert {rel: ms for rel, ms in cli.items() if ms} == {}


def test_the_page_promises_nothing_for_what_exists() -> None:
    """No "coming next" and no "not yet" on the page: what it describes is what the tree holds."""
    assert not re.search(r"coming next|not yet|no shipped command", _page(), re.IGNORECASE)


async def test_a_providers_key_never_travels_to_the_actors_with_the_endpoint() -> None:
    """"provider keys are read from the environment inside the actors ..., never sent through Ray: only a
    bundled model's per-run loopback key travels with its endpoint": a hosted model bound with a key gives
    an endpoint without it."""
    _claims("never sent through Ray: only a bundled model's per-run loopback key travels with its endpoint")
    from contextlib import ExitStack

    import httpx

    from vak_context.engine.binding import bind_model

    async with httpx.AsyncClient() as client:
        with ExitStack() as stack:
            bound = bind_model("openai:gpt-4o-mini", client, stack, api_key="sk-test-never-travels-0123456789")
            endpoint = bound.endpoint(8_000)
    assert endpoint.api_key is None and "sk-test" not in repr(endpoint)


def test_the_engine_catches_search_indexes_up_as_it_opens_the_folder_and_the_ledger_actor_searches() -> None:
    """"caught up ... when the engine opens the folder (storage/catchup.py)"; "session_search runs there too
    [the LedgerActor] ... as does the background catch-up each turn's close queues (index_later)"."""
    _claims("for an index a kill left behind or torn, when the engine opens the folder (`storage/catchup.py`)",
            "`session_search` runs there too", "(`index_later`, `storage/catchup.py`)")
    opened = _function("engine/api.py", "Engine.open")
    assert "catch_up_behind" in _called(opened)
    assert "vak_context.storage.catchup.catch_up_behind" in _imported(opened)
    actor = {f.name for n in _tree(_defining("LedgerActor")).body if isinstance(n, ast.ClassDef) and n.name == "LedgerActor"
             for f in n.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}
    assert {"session_search", "index_later"} <= actor


def test_session_begin_is_a_turn_of_the_callers_loop() -> None:
    """"the caller's loop over the same turn (engine/caller.py: Session.begin, ...)"."""
    _claims("the caller's loop over the same turn (`engine/caller.py`: `Session.begin`")
    from vak_context.engine import caller
    from vak_context.engine.api import Session

    begin = _function("engine/session.py", "Session.begin")
    assert ast.unparse(begin.returns) == "Turn" and "Turn" in _called(begin)
    assert Session.begin.__globals__["Turn"] is caller.Turn


def test_serve_defers_the_clients_tools_as_the_session_binds() -> None:
    """"the client's tools deferred behind find_tools when their schemas outgrow a quarter of the horizon,
    decided as the session binds, once (serve/app.py, Engine.session(defer_tools=))"."""
    _claims("deferred behind `find_tools` when their schemas outgrow a quarter of the horizon, decided as the "
            "session binds, once (`serve/app.py`, `Engine.session(defer_tools=)`)")
    from vak_context.context.request.surface import DEFER_SHARE
    from vak_context.serve.app import ServeConfig

    assert DEFER_SHARE == 0.25 and ServeConfig("openai:m").defer_tools == "auto"
    assert "defer_tools" in _keywords(_function("serve/app.py", "Server._session"), "session")
    # Decided once, on the profile the session binds: the one call of ``deferring`` is in the binding.
    assert [rel for rel in _namespace() if "deferring" in _called(_tree(rel))] == ["engine/session_loop.py"]


def test_binding_reads_the_recorded_profile_in_a_worker_thread() -> None:
    """"binding a session reads one small file per session, in a worker thread (engine/binding.py)"."""
    _claims("binding a session reads one small file per session, in a worker thread (`engine/binding.py`)")
    profile = _function("engine/binding.py", "session_profile")
    assert any(isinstance(n, ast.Call) and ast.unparse(n.func) == "asyncio.to_thread"
               and ast.unparse(n.args[0]) == "recorded_profile" for n in ast.walk(profile))


def _writers(rel: str) -> list[str]:
    """Each ``LedgerStore(...)`` a module makes that writes (not ``readonly=True``), as written."""
    return [ast.unparse(n) for n in ast.walk(_tree(rel)) if isinstance(n, ast.Call) and ast.unparse(n.func) == "LedgerStore"
            and not any(k.arg == "readonly" and ast.unparse(k.value) == "True" for k in n.keywords)]


def test_the_actors_reach_the_ledger_through_the_client_and_commands_own_theirs() -> None:
    """"The actors reach the ledger through actors/ledger/client.py (...), as do the loop's services on Ray
    (actors/turn_services.py); in-process the loop's services append to the LedgerStore the process holds
    (actors/local_services.py); commands that own a folder outright (...) open a LedgerStore directly": a
    writing store is made only by the LedgerActor, an in-process Engine, the commands and the farm."""
    _claims("(a LedgerStore the process holds, or the LedgerActor), as do the loop's services on Ray (`actors/turn_services.py`); in-process the loop's "
            "services append to the LedgerStore the process holds (`actors/local_services.py`); commands that own "
            "a folder outright")
    writers = sorted(rel for rel in _namespace() if _writers(rel))
    owners = [rel for rel in writers if rel.startswith(("cli/", "farm/"))]
    assert sorted(set(writers) - set(owners)) == sorted([_defining("LedgerActor"), "engine/api.py"])
    for rel in ("actors/turn_services.py", "actors/planner.py", "actors/assembler.py", "actors/evidence.py",
                "actors/probe.py"):
        assert f"{_dotted(_defining('LedgerClient'))}.LedgerClient" in _imported(_tree(rel)), rel
    assert "self.store.append" in ast.unparse(_function("actors/local_services.py", "InProcessServices.append"))
    assert "vak_context.storage.ledger.LedgerStore" in _imported(_tree("actors/local_services.py"))


def test_the_probe_target_is_built_from_the_sessions_endpoint() -> None:
    """"The probe target is built from the same endpoint (actors/probe.py ...), under the session's profile
    key": the Ray services build it in actors/probe.py's function from their own endpoint and key."""
    _claims("The probe target is built from the same endpoint (`actors/probe.py`", "under the session's profile key")
    services = _function("actors/turn_services.py", "ray_services")
    endpoint, key = (a.arg for a in services.args.args[2:4])
    built = [ast.unparse(n.func) for n in ast.walk(services) if isinstance(n, ast.Call)
             and [ast.unparse(a) for a in n.args[:2]] == [endpoint, key]]
    assert built and all(f"vak_context.actors.probe.{f}" in _imported(_tree("actors/turn_services.py")) for f in built)


def test_a_turn_that_raised_ends_failed_with_its_activity_in_either_driver() -> None:
    """"failed (a typed error mid-turn: a turn.failed activity names it, then it is raised ...)"."""
    _claims("a `turn.failed` activity names it, then it is raised")
    close = _function("agent/turn.py", "OpenTurn.close_failed")
    assert "turn.failed" in {n.value for n in ast.walk(close) if isinstance(n, ast.Constant)}
    assert "close_turn" in _called(close)
    # The engine's loop closes the turn in its handler and raises again; the caller's loop closes it as its
    # ``async with`` exits with the exception, which goes on (``__aexit__`` returns nothing).
    handlers = [h for h in ast.walk(_tree("agent/loop.py")) if isinstance(h, ast.ExceptHandler)
                and "close_failed" in _called(h)]
    assert handlers and all(any(isinstance(n, ast.Raise) for n in ast.walk(h)) for h in handlers)
    assert "close_failed" in _called(_tree("engine/caller.py"))


def test_the_assembler_runs_the_step_policy() -> None:
    """"AssemblerActor (actors/assembler.py) runs the step policy (context/planner/policy.py)"."""
    _claims("AssemblerActor (actors/assembler.py) runs the step policy (context/planner/policy.py)")
    assembler = _tree("actors/assembler.py")
    assert "vak_context.context.planner.policy.decide" in _imported(assembler) and "decide" in _called(assembler)


def test_a_turn_on_ray_cancels_the_models_probe_at_its_start_and_hands_it_over_at_its_end() -> None:
    """"services.turn_started(): the bound model's in-flight probe is cancelled"; "ProbeActor.turn_finished
    (when wired)"."""
    _claims("services.turn_started(): the bound model's in-flight probe is cancelled",
            "ProbeActor.turn_finished (when wired)")
    started = ast.unparse(_function("actors/turn_services.py", "RayServices.turn_started"))
    finished = ast.unparse(_function("actors/turn_services.py", "RayServices.turn_finished"))
    # ``turn_finished_quiet``: ``turn_finished`` and, when fresh, until when no probe can start (no call before then)
    assert "self.probe.turn_starting.remote(" in started and "self.probe.turn_finished_quiet.remote(" in finished
    assert "if self.probe is None" in started and "if self.probe is not None" in finished  # when wired


def test_a_steps_tools_run_concurrently_in_the_engines_loop() -> None:
    """"tools (...) run concurrently": the engine's loop gathers a step's world calls and the engine's answers."""
    _claims("the engine's tools; card tools) run concurrently")
    gathered = [n for n in ast.walk(_tree("agent/loop.py")) if isinstance(n, ast.Call)
                and ast.unparse(n.func) == "asyncio.gather"]
    assert any("_run_world" in ast.unparse(n) for n in gathered)


def test_the_turn_rules_are_the_live_half_of_the_pure_drift_checks() -> None:
    """"turn rules (agent/turnrules.py over context/rules/drift.py)"."""
    _claims("turn rules (agent/turnrules.py over context/rules/drift.py)")
    assert any(m.startswith("vak_context.context.rules.drift") for m in _imported(_tree("agent/turnrules.py")))
    assert "vak_context.agent.turnrules.TurnRules" in _imported(_tree(_defining("TurnCore")))
