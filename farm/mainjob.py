"""The main job: what `vak run` (the README's first command) does on embedded defaults.

Starts a local Ray on 127.0.0.1, opens the ledger in a local folder through its LedgerActor,
writes a realistic agent session from the project's session generator, verifies the hash chain,
and prints a summary. Later stages add the local model's measured profile, the session's turns,
cards and digests, and the plans under two profiles.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_LEDGER = Path("vak-data") / "ledger"


def run_main_job(ledger: Path = DEFAULT_LEDGER, *, turns: int = 12, seed: int = 7,
                 session: str | None = None, out: Callable[[str], None] = print) -> dict[str, Any]:
    from farm.localray import start_local_ray

    t0 = time.perf_counter()
    out("vak: starting a local Ray on 127.0.0.1 ...")
    start_local_ray()
    import ray

    from actors.factory import ledger_actor
    from farm.sessiongen import generate_session

    ledger.mkdir(parents=True, exist_ok=True)
    actor = ledger_actor(ledger)
    session = session or time.strftime("demo-%Y%m%d-%H%M%S")
    out(f"vak: ledger at {ledger.resolve()}; writing session {session!r} ({turns} turns) through the LedgerActor")

    def append(payload: Any, blob: bytes | None) -> str:
        return str(ray.get(actor.append.remote(session, [payload], None, [blob]))[0])

    gen = generate_session(seed=seed, turns=turns, append=append)
    report = ray.get(actor.verify.remote())
    ray.get(actor.checkpoint.remote())  # seal segments so plain Arrow readers see everything
    stats = ray.get(actor.stats.remote())
    summary = {
        "ledger": str(ledger.resolve()),
        "session": session,
        "written": len(gen.ids),
        "turns": gen.turns,
        "verify": report,
        "stats": stats,
        "head": stats["heads"][session],
        "seconds": round(time.perf_counter() - t0, 2),
    }
    out(render_summary(summary))
    if not report["ok"]:
        raise SystemExit(f"vak: verify failed: {report['first_bad']}")
    out(_section("the session's turns, cards and digests (read back from the ledger)"))
    out(session_report(ledger, session))
    return summary


def _section(title: str) -> str:
    return f"\n{'=' * 8} {title} {'=' * max(4, 90 - len(title))}"


def session_report(ledger: Path, session: str) -> str:
    from farm.report import summarize_session
    from storage.ledger import LedgerStore

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
    lines.append(f"\ndone in {s['seconds']} s")
    return "\n".join(lines)
