"""The main job: what `vak run` (the README's first command) does on embedded defaults.

1. Starts a local Ray on 127.0.0.1 and opens the ledger in a local folder through its LedgerActor.
2. Starts the bundled local model (Qwen2.5-Coder-1.5B-Instruct on llama.cpp, 127.0.0.1), runs the quick
   probe ladder against it, prints the measured CapacityProfile, and records the probe and the profile.
3. Runs three live turns with that model through the whole engine, on Ray (Ledger, Assembler and
   Evidence actors), with the current folder (the project's source) as the read-only workspace: per step
   the plan, prompt and cached tokens and the prefix digest, then each turn's answer, and scores the
   answers against the workspace (cli/demoscore.py): right or wrong per directive with the reason, k/3.
4. Writes a realistic agent session from the project's session generator (its directives, tool results and
   answers are about the workspace's files, or a snapshot of this repository's when the workspace is another
   folder), verifies the hash chain, and prints a summary (sessions, turns, entries by kind, bytes, head),
   then its turns, cards and digests.
5. Plans that session under the local model's measured profile and under a large (frontier) profile,
   side by side: which turns are Full, cards or packet, and the tokens of each.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vak_context.cli.demoscore import DEMO_CHECKS

DEFAULT_LEDGER = Path("vak-data") / "ledger"
# Chosen by the demo's score (cli/demoscore.py), then its time: measured 2026-12-02 on the shared 2-core
# machine, the 1.5B scored 0/3 and 1/3 in two runs (517 s for the whole demo), the 0.5B 0/3 under either repeat
# rule (1,267 s): docs/CAPACITY.md, "The demo's default model".
DEFAULT_MODEL = "qwen1.5b"
# The quick ladder and the live turns share one server. The ladder's cost is its top rung's prefill (90% of
# the window; rungs share their prefix, so the fresh part is the top rung's last tokens, the slowest): at
# 6144 it is about 2.5 minutes on 2 cores, at 8192 about 3 (the 7,372 rung alone ~90 s at ~65 tokens/s).
# The model's full 16k ladder takes much longer (docs/CAPACITY.md).
DEMO_N_CTX = 6144
# The demo's directives ask for one sentence; a small model that loops on one call spends the whole
# max_tokens decoding the loop (~19 tokens/s here), so the demo caps each step at 128 tokens. A call cut
# inside its first object is still continued (vak_context.agent.loop's _extend).
DEMO_MAX_TOKENS = 128


@dataclass(frozen=True)
class DemoSetup:
    """How the demo runs one model: the server's (and the live turns') window, the quick ladder's top (the
    ladder probes as if the window were ``ladder_window``: a larger model, slower per token, gets a smaller
    ladder so the demo keeps to about eight minutes), and the live steps' max_tokens."""

    n_ctx: int = DEMO_N_CTX
    ladder_window: int | None = None  # None: the server's window
    max_tokens: int = DEMO_MAX_TOKENS


# By registry name (vak_context.providers.local.catalogue); a model not named here gets DemoSetup().
DEMO_SETUPS: dict[str, DemoSetup] = {
    # Qwen2.5-Coder-1.5B costs about three times the 0.5B's compute per token: its quick ladder stops at a
    # 4,096-token window (rungs 921, 1,842, 3,686) while the live turns keep the demo's 6,144; the whole demo
    # took 517 s on the loaded 2-core machine (docs/CAPACITY.md).
    "qwen2.5-coder-1.5b": DemoSetup(ladder_window=4096),
}


def demo_setup(model: str | None) -> DemoSetup:
    from vak_context.providers.local.catalogue import canonical_model

    return DEMO_SETUPS.get(canonical_model(model), DemoSetup()) if model else DemoSetup()


# The demo's three directives, each scored mechanically against the workspace (cli/demoscore.py).
LIVE_DIRECTIVES = tuple(DEMO_CHECKS)
# The repeated-call rule's second strike in the live turns (Engine.session's repeat_rule, docs/DRIFT.md):
# "close" ends the turn quoting the results it had; "redo" asks once more for the answer, calls masked.
REPEAT_RULES = ("close", "redo")  # the names engine.api's Session takes (a unit test keeps them equal)
DEFAULT_REPEAT_RULE = "close"
MAX_TURNS = 1000  # a generated demo session; more says nothing new and takes minutes to plan
MAX_SEED = 2**32 - 1


def check_job(ledger: Path, turns: int, seed: int, session: str | None, local_base_url: str | None,
              repeat_rule: str = DEFAULT_REPEAT_RULE) -> None:
    """What can be wrong with the job's arguments, said before Ray, a model server or the probe start."""
    from vak_context.checks import check_base_url, check_ledger_folder
    from vak_context.errors import InvalidInput

    if isinstance(turns, bool) or not isinstance(turns, int) or not 1 <= turns <= MAX_TURNS:
        raise InvalidInput(f"turns must be a whole number from 1 to {MAX_TURNS:,} (got {turns!r}): pass --turns N.")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise InvalidInput(f"seed must be a whole number from 0 to {MAX_SEED:,} (got {seed!r}): pass --seed N.")
    if repeat_rule not in REPEAT_RULES:
        raise InvalidInput(f"repeat_rule must be one of {', '.join(REPEAT_RULES)} (got {repeat_rule!r}): "
                           "pass --repeat-rule close or --repeat-rule redo.")
    check_ledger_folder(ledger, "the ledger folder")
    if session is not None:
        from vak_context.names import check_name

        check_name(session, "session name")
    if local_base_url is not None:
        check_base_url(local_base_url, "the local model's base URL")


def run_main_job(ledger: Path = DEFAULT_LEDGER, *, turns: int = 12, seed: int = 7,
                 session: str | None = None, out: Callable[[str], None] = print,
                 local_model: str | None = DEFAULT_MODEL, local_base_url: str | None = None,
                 live_turns: Sequence[str] = LIVE_DIRECTIVES, workspace: Path | None = None,
                 repeat_rule: str = DEFAULT_REPEAT_RULE) -> dict[str, Any]:
    """Run the main job. ``local_model=None`` skips the probe and the live turns (and plans under a
    metadata-only profile); ``local_base_url`` uses an already running server (asked with
    ``$OPENAI_COMPAT_API_KEY``) instead of starting one. ``workspace`` defaults to the current folder.
    ``repeat_rule`` is the live turns' repeated-call rule (``REPEAT_RULES``)."""
    from vak_context.engine.localray import start_local_ray

    check_job(ledger, turns, seed, session, local_base_url, repeat_rule)
    t0 = time.perf_counter()
    out("vak: starting a local Ray on 127.0.0.1 ...")
    start_local_ray()
    from vak_context.actors.factory import ledger_actor
    from vak_context.actors.ledger.client import LedgerClient
    from vak_context.sessions.generator import generate_session

    ledger.mkdir(parents=True, exist_ok=True)
    client = LedgerClient(str(ledger), ledger_actor(ledger))
    session = session or time.strftime("demo-%Y%m%d-%H%M%S")
    out(f"vak: ledger at {ledger.resolve()}; writing session {session!r} ({turns} turns) through the LedgerActor")

    written: list[str] = []

    def append(payload: Any, blob: bytes | None) -> str:
        written.append(client.append(session, [payload], blobs=[blob])[0])
        return written[-1]

    with _local_server(local_model, local_base_url) as (base_url, api_key):
        profile = measure_profile(local_model, base_url, api_key, append, out)
        live = (run_live_turns(ledger, f"{session}-live", local_model, base_url, api_key,
                               workspace or Path.cwd(), live_turns, out, repeat_rule=repeat_rule)
                if local_model and live_turns else [])
    score = score_live(live, workspace or Path.cwd(), out)
    gen = generate_session(seed=seed, turns=turns, append=append, workspace=workspace or Path.cwd())
    report = client.verify().as_dict()
    client.checkpoint()  # seal segments so plain Arrow readers see everything
    stats = client.stats().as_dict()
    # score: None when no live turn was one of the demo's directives
    summary = {"ledger": str(ledger.resolve()), "session": session, "written": len(written), "turns": gen.turns,
               "verify": report, "stats": stats, "head": stats["heads"][session], "profile": profile,
               "live": live, "repeat_rule": repeat_rule, "score": score, "seconds": 0.0}
    _print_summary(summary, ledger, session, profile, out)
    summary["seconds"] = round(time.perf_counter() - t0, 2)
    if score is not None:
        out(f"\ndemo score {score['right']}/{score['of']} with {local_model} (repeat rule {repeat_rule}); "
            f"the demo took {summary['seconds']} s")
    out(f"\ndone in {summary['seconds']} s")
    return summary


def _print_summary(summary: dict[str, Any], ledger: Path, session: str, profile: Any,
                   out: Callable[[str], None]) -> None:
    """The job's summary, then (its ledger verified) the session read back and planned for two models."""
    out(render_summary(summary))
    if not summary["verify"]["ok"]:
        raise SystemExit(f"vak: verify failed: {summary['verify']['first_bad']}")
    out(_section("the session's turns, cards and digests (read back from the ledger)"))
    out(session_summary(ledger, session))
    out(_section("the same session planned for two models"))
    out(plan_comparison(ledger, session, profile))


def score_live(live: Sequence[dict[str, Any]], workspace: Path, out: Callable[[str], None]) -> dict[str, Any] | None:
    """The live answers scored against the workspace (cli/demoscore.py), printed per directive; the score's
    dict, or None when no live turn was one of the demo's directives."""
    from vak_context.cli.demoscore import render_score, score_answers, workspace_facts

    entries, readme = workspace_facts(workspace)
    score = score_answers([(t["directive"], t["answer"], t["outcome"]) for t in live], entries, readme)
    if score is None:
        return None
    out(_section("the demo's answers, scored against the workspace"))
    out(render_score(score))
    return score.as_dict()


@contextmanager
def _local_server(model: str | None, base_url: str | None) -> Iterator[tuple[str | None, str | None]]:
    """(base URL, API key) of the local model for the job: the given server, or one started here."""
    if model is None or base_url is not None:
        yield base_url, os.environ.get("OPENAI_COMPAT_API_KEY")
        return
    from vak_context.providers.local.server import LocalModelServer

    with LocalModelServer(model, n_ctx=demo_setup(model).n_ctx) as server:
        yield server.base_url, server.api_key


LIVE_MAX_STEPS = 4


def live_session_options(model: str, base_url: str | None, api_key: str | None, workspace: Path,
                         repeat_rule: str = DEFAULT_REPEAT_RULE) -> dict[str, Any]:
    """The live turns' ``Engine.session`` settings: what `vak run` asks the bundled model under
    (bench/demo_compare.py runs the same questions with exactly these, beside a plain loop)."""
    setup = demo_setup(model)
    return {"model": f"local:{model}", "base_url": base_url, "api_key": api_key, "window": setup.n_ctx,
            "workspace": workspace, "card_tools": True, "max_steps": LIVE_MAX_STEPS,
            "max_tokens": setup.max_tokens, "repeat_rule": repeat_rule}


def run_live_turns(ledger: Path, session: str, model: str, base_url: str | None, api_key: str | None,
                   workspace: Path, directives: Sequence[str], out: Callable[[str], None], *,
                   repeat_rule: str = DEFAULT_REPEAT_RULE) -> list[dict[str, Any]]:
    """The live turns, on Ray through the folder's actors (a session of the public API on the Ray this job
    started); the profile is the one the probe just recorded. Returns what each turn came to."""
    import asyncio

    from vak_context import Engine
    from vak_context.cli.chat import step_line

    out(_section(f"three live turns with {model}, repeat rule {repeat_rule} (workspace {workspace.resolve()})"))
    options = live_session_options(model, base_url, api_key, workspace, repeat_rule)

    async def go(engine: Engine) -> list[dict[str, Any]]:
        done: list[dict[str, Any]] = []
        async with engine.session(session, **options, on_step=lambda s: out(step_line(s))) as live:
            for directive in directives:
                out(f"you> {directive}")
                started = time.perf_counter()
                result = await live.run(directive)
                out(f"{model}> {result.answer.strip() or '(no answer)'}  [{result.outcome}]")
                done.append({"directive": directive, "outcome": result.outcome, "answer": result.answer,
                             "steps": len(result.steps), "seconds": round(time.perf_counter() - started, 1),
                             "prompt_tokens": [s.prompt_tokens for s in result.steps],
                             "cached_tokens": [s.cached_tokens for s in result.steps],
                             "prefix_digest": result.steps[0].prefix_digest if result.steps else ""})
        return done

    with Engine.open(ledger, ray=True) as engine:  # joins the Ray this job started; leaves it up
        return asyncio.run(go(engine))


def measure_profile(model: str | None, base_url: str | None, api_key: str | None,
                    append: Callable[[Any, bytes | None], str], out: Callable[[str], None]) -> Any:
    """Probe the bundled local model (quick ladder) and record the probe and the profile in the ledger."""
    from vak_context.context.capacity.profile import ProfileKey, describe, metadata_profile, to_record
    from vak_context.context.request.messages import ModelContext

    if model is None:
        return metadata_profile(ProfileKey("local", "none", ""),
                                ModelContext(provider="local", model="none", declared_window=8192,
                                             source="no local model (--no-model)"), now=time.time())
    import asyncio

    from vak_context.agent.probe import QUICK, probe_local
    from vak_context.providers.local.catalogue import canonical_model, local_protocol

    setup = demo_setup(model)
    ladder = f", up to a {setup.ladder_window:,}-token window" if setup.ladder_window else ""
    out(_section(f"measuring the local model ({model}) with the quick probe ladder{ladder}"))
    from vak_context.cli.probe_cmd import print_progress

    settings = (replace(QUICK, window=setup.ladder_window, protocol=local_protocol(model))
                if setup.ladder_window else None)
    report = asyncio.run(probe_local(canonical_model(model), base_url=base_url, api_key=api_key,
                                     on_progress=print_progress, settings=settings))
    append(report.activity(), None)
    append(to_record(report.profile), None)
    out(describe(report.profile))
    return report.profile


def large_profile(tokens_per_char: float) -> Any:
    """A frontier-sized profile (200k window, well measured) to plan the same session against."""
    from vak_context.context.capacity.profile import (
        CacheBehaviour,
        CapacityProfile,
        Ewma,
        Horizon,
        ProbeProvenance,
        ProfileKey,
    )

    return CapacityProfile(
        key=ProfileKey("frontier", "large-200k", ""), declared_window=200_000, verified_window=None,
        instruction_horizon=Horizon(tokens=160_000, confidence=0.9, last_confirmed=0.0),
        tokens_per_char=Ewma(tokens_per_char, 1), prefill_tps=None, cache=CacheBehaviour.PROVIDER_REPORTED,
        output_reserve=8_192, provenance=ProbeProvenance(source="metadata", signals=("illustrative frontier profile",)),
    )


SYSTEM_PROMPT = (
    "You are a research and coding agent. Use the tools to find evidence before you answer; answer with a "
    "card when a card type fits. Earlier turns may be shown as cards or a summary: call recall to expand them."
)


def plan_comparison(ledger: Path, session: str, profile: Any) -> str:
    from vak_context.context.evidence.digest import RECALL_TOOL
    from vak_context.context.history.cards import card_tools
    from vak_context.engine.plan_comparison import compare_plans
    from vak_context.storage.ledger import LedgerStore

    tools = (RECALL_TOOL, *card_tools())
    profiles = {"local (measured)": profile, "frontier (200k)": large_profile(profile.tokens_per_char.value)}
    with LedgerStore(ledger, readonly=True) as store:
        return compare_plans(store, session, profiles, system=SYSTEM_PROMPT, tools=tools)


def _section(title: str) -> str:
    return f"\n{'=' * 8} {title} {'=' * max(4, 90 - len(title))}"


def session_summary(ledger: Path, session: str) -> str:
    from vak_context.engine.session_summary import summarize_session
    from vak_context.storage.ledger import LedgerStore

    # The LedgerActor is the writer; a read-only store reads the same folder without the lock.
    with LedgerStore(ledger, readonly=True) as store:
        return summarize_session(store, session, digests_per_turn=2)


def render_summary(s: dict[str, Any]) -> str:
    st = s["stats"]
    lines = [
        "",
        f"ledger    {s['ledger']}",
        f"sessions  {st['sessions']}   (this run: {s['session']}, {s['turns']} turns, {s['written']} entries)",
        f"entries   {st['entries']}   on disk {st['bytes'] / 1e6:.2f} MB (zstd Arrow IPC)",
        f"verify    {'ok' if s['verify']['ok'] else 'FAILED'}: {s['verify']['entries']} entries hash-checked",
        f"head      {s['head']}",
        "",
        "entries by kind:",
    ]
    width = max(len(k) for k in st["by_kind"]) if st["by_kind"] else 4
    lines += [f"  {k:<{width}}  {n:>6}" for k, n in st["by_kind"].items()]
    return "\n".join(lines)
