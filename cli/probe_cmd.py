"""`vak probe <provider:model>`: run the capacity probe now, rung by rung, and keep its evidence.

``vak probe local:smollm2`` (or ``local:gemma3-270m``) starts the bundled model's server itself;
any other spec goes through ``vak_context.providers.registry`` (keys from the environment, ``--base-url`` for
OpenAI-compatible and Ollama servers). It prints each rung as it finishes, then the profile, and
writes ``ladder.csv``, ``ladder.md`` and ``ladder.png`` (pass rate against prompt tokens) to
``--out``. ``--ledger DIR`` also appends the probe's activity and profile to that ledger.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
from pathlib import Path
from typing import Any

import httpx

from vak_context.agent.probe import ProbeReport, ProbeRunner, ProbeSettings
from vak_context.checks import (
    MAX_TOKENS,
    base_url_arg,
    bounded_int,
    check_ledger_folder,
    check_writable_folder,
)
from vak_context.context.capacity.ladder import DEFAULT_CAP, TOP_FRACTION
from vak_context.context.capacity.profile import ProfileKey, describe
from vak_context.errors import InvalidInput, MissingExtra
from vak_context.extras import has_extra, pyplot
from vak_context.providers.local.catalogue import local_profile_key, local_protocol

LADDER_FILES = ("ladder.csv", "ladder.md", "ladder.png", "profile.json")
LADDER_FIELDS = ("target", "prompt_tokens", "followed", "asked", "pass_rate", "control_calls", "controls",
                 "passed", "overflow", "cached_tokens", "mean_latency_ms")


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "probe",
        help="measure a model's capacity profile (window, instruction horizon, cache)",
        description="Run the capacity probe ladder against provider:model and print the profile. "
        "local:smollm2 and local:gemma3-270m start the bundled model on 127.0.0.1.",
    )
    p.add_argument("spec", help="provider:model, e.g. local:smollm2, ollama:llama3.2:3b, anthropic:claude-x")
    p.add_argument("--base-url", default=None, type=base_url_arg,
                   help="the server's base URL (OpenAI-compatible, Ollama)")
    p.add_argument("--n-ctx", type=bounded_int(256, MAX_TOKENS), default=8192,
                   help="context size for a local model (default 8192)")
    p.add_argument("--samples", type=bounded_int(1, 25), default=DEFAULT_CAP,
                   help=f"at most this many instruction samples per rung, 1-25 (default {DEFAULT_CAP}; sampling "
                   "stops once one answer leads by three, and the majority decides)")
    p.add_argument("--controls", type=bounded_int(0, 25), default=1, help="negative-control samples per rung, 0-25")
    p.add_argument("--first-rung", type=bounded_int(64, MAX_TOKENS), default=4096,
                   help="first rung in tokens (lowered, with a note, when the window is too small for it)")
    p.add_argument("--max-sizes", type=bounded_int(1, 100), default=None,
                   help="stop after this many prompt sizes, 1-100")
    p.add_argument("--protocol", choices=("native", "inline_fence"), default=None,
                   help="tool-call protocol (default: native; inline_fence for gemma3-270m)")
    p.add_argument("--out", type=Path, default=None, help="folder for ladder.csv/.md/.png (default vak-probe/<model>)")
    p.add_argument("--ledger", type=Path, default=None, help="also write the probe to this ledger folder")
    p.set_defaults(func=run)


def print_progress(event: dict[str, Any]) -> None:
    stage = event["stage"]
    if stage == "metadata":
        print(f"metadata: declared window {event['declared_window']} ({event['source']}); "
              f"probing up to {event['probing_window']}", flush=True)
    elif stage == "cache":
        print(f"cache rung: {event['behaviour']} ({event['signal']})", flush=True)
    elif stage == "plan":
        print(f"rungs: {event['rungs']} (floor {event['floor']}, search step {event['resolution']})", flush=True)
    elif stage in ("sizing", "sample", "waiting"):  # progress within a rung (vak_context.agent.probe.ProbeRunner.rung)
        print(f"    {_within_rung(event)}", flush=True)
    elif stage == "rung":
        o = event["outcome"]
        verdict = "PASS" if o["passed"] else ("OVERFLOW" if o["overflow"] else "fail")
        print(f"  rung {o['target']:>7} target -> {o['prompt_tokens'] or '-':>7} tokens: followed "
              f"{o['followed']}/{o['asked']}, control called {o['control_calls']}/{o['controls']}  {verdict}"
              f"   [bracket {event['lo']}..{event['hi']}]", flush=True)


def first_rung_note(asked: int, window: int | None, event: dict[str, Any]) -> str | None:
    """Why the ladder's first rung is not the ``--first-rung`` asked for (None when it is).

    ``vak_context.context.capacity.ladder.plan_rungs`` starts at a quarter of the top rung when the window is too small
    for the first rung asked (so a small window still gets several rungs), and never below the
    smallest history the probe can build (the floor).
    """
    rungs = event["rungs"]
    if not rungs:
        return f"note: --first-rung {asked:,} not used: the window is too small for any rung above the floor"
    start, top = rungs[0], rungs[-1]
    if start < asked:
        of_window = f" ({TOP_FRACTION:.0%} of the {window:,}-token window)" if window else ""
        return (f"note: --first-rung {asked:,} lowered to {start:,}: the ladder starts at most at a quarter of its "
                f"top rung, {top:,} tokens{of_window}, so it climbs several rungs. For a higher start, probe a "
                "larger window (--n-ctx for a local model).")
    if start > asked:
        return (f"note: --first-rung {asked:,} raised to {start:,}: the smallest history the probe can build "
                f"is {event['floor']:,} tokens.")
    return None


def check_args(args: argparse.Namespace) -> tuple[str, str, Path]:
    """Everything about the arguments that can be wrong, checked before a server or a probe starts.

    Returns (provider, model, output folder)."""
    provider_name, _, model = args.spec.partition(":")
    if not model:
        raise InvalidInput(f"{args.spec!r} names no model: write provider:model, e.g. local:smollm2")
    if provider_name == "local":
        if args.base_url is None:
            from vak_context.providers.local.catalogue import MODELS, canonical_model

            model = canonical_model(model)  # `qwen` is qwen2.5-coder-0.5b
            if model not in MODELS and not (model.endswith(".gguf") and Path(model).expanduser().is_file()):
                raise InvalidInput(f"unknown local model {model!r}: choose one of {sorted(MODELS)} or the path of "
                                   "an existing .gguf file.")
    else:
        from vak_context.providers.registry import parse_spec

        parse_spec(args.spec)  # an unknown provider, said before anything runs
    out = args.out or Path("vak-probe") / f"{provider_name}-{model}".replace(":", "-").replace("/", "-")
    check_writable_folder(out, "--out", LADDER_FILES)
    if args.ledger is not None:
        check_ledger_folder(args.ledger)
    return provider_name, model, out


def _within_rung(event: dict[str, Any]) -> str:
    stage, target, elapsed = event["stage"], event["target"], event["elapsed_s"]
    if stage == "sizing":
        return f"rung {target}: sizing {event['attempt']} billed {event['billed']} tokens ({elapsed:.0f} s)"
    if stage == "sample":
        return (f"rung {target}: {event['kind']} sample {event['index']} (of at most {event['of']}) "
                f"{'yes' if event['hit'] else 'no'} ({elapsed:.0f} s)")
    estimate = event.get("estimate_s")
    expected = f" of about {estimate:.0f} s expected at the measured rates" if estimate is not None else ""
    return f"rung {target}: {event['what']} running {event['request_s']:.0f} s{expected} (rung {elapsed:.0f} s)"


def run(args: argparse.Namespace) -> int:
    provider_name, model, out = check_args(args)
    if not has_extra("plots"):  # said before the probe, not after it
        print(f"note: ladder.png will not be drawn. {MissingExtra('plots', 'the PNG').args[0]}")
    protocol = args.protocol or (local_protocol(model) if provider_name == "local" else "native")
    settings = ProbeSettings(samples=args.samples, controls=args.controls, first_rung=args.first_rung,
                             max_sizes=args.max_sizes, protocol=protocol)
    window: list[int] = []

    def on_progress(event: dict[str, Any]) -> None:
        print_progress(event)
        if event["stage"] == "metadata":
            window.append(event["probing_window"])
        elif event["stage"] == "plan" and (note := first_rung_note(args.first_rung, window[-1] if window else None,
                                                                     event)):
            print(note, flush=True)

    report = asyncio.run(_probe(args, provider_name, model, settings, on_progress))
    print()
    print(describe(report.profile))
    paths = write_ladder(report, out)
    print(f"\nladder: {', '.join(str(p) for p in paths)}")
    if args.ledger is not None:
        from vak_context.storage.ledger import LedgerStore

        with LedgerStore(args.ledger) as store:
            ids = store.append("capacity", report.ledger_payloads())
        print(f"ledger: {args.ledger} session 'capacity', entries {ids[0][:12]} (activity), {ids[1][:12]} (profile)")
    return 0


async def _probe(args: argparse.Namespace, provider_name: str, model: str, settings: ProbeSettings,
                 on_progress: Any = print_progress) -> ProbeReport:
    from vak_context.providers.registry import make_provider

    if provider_name == "local" and args.base_url is None:
        from vak_context.providers.local.server import LocalModelServer

        with LocalModelServer(model, n_ctx=args.n_ctx) as server:
            print(f"started {model} at {server.base_url} (n_ctx {args.n_ctx})", flush=True)
            return await _run(f"openai-compat:{model}", server.base_url, local_profile_key(model), settings,
                              make_provider, on_progress, api_key=server.api_key)
    if provider_name == "local":  # a local model already served at --base-url
        return await _run(f"openai-compat:{model}", args.base_url, local_profile_key(model), settings,
                          make_provider, on_progress)
    return await _run(args.spec, args.base_url, ProfileKey(provider_name, model), settings, make_provider, on_progress)


async def _run(spec: str, base_url: str | None, key: ProfileKey, settings: ProbeSettings, make: Any,
               on_progress: Any = print_progress, api_key: str | None = None) -> ProbeReport:
    async with httpx.AsyncClient(trust_env=False) as client:
        # No api_key: the provider's environment variable (OPENAI_COMPAT_API_KEY for --base-url).
        kwargs: dict[str, Any] = {"timeout_s": 900.0, "api_key": api_key}
        if base_url:
            kwargs["base_url"] = base_url
        provider, _model = make(spec, client, **kwargs)
        return await ProbeRunner(provider, key, settings=settings, on_progress=on_progress).run()


def ladder_rows(report: ProbeReport) -> list[dict[str, Any]]:
    rows = []
    for o in sorted(report.ladder.outcomes, key=lambda o: o.target):
        latencies = [s.latency_ms for s in o.samples if s.latency_ms]
        rows.append({
            "target": o.target, "prompt_tokens": o.prompt_tokens, "followed": o.followed,
            "asked": len(o.instructions),
            "pass_rate": round(o.followed / len(o.instructions), 3) if o.instructions else 0.0,
            "control_calls": o.control_calls, "controls": len(o.controls), "passed": o.passed,
            "overflow": o.overflow, "cached_tokens": sum(s.cached_tokens for s in o.samples),
            "mean_latency_ms": round(sum(latencies) / len(latencies), 1) if latencies else None,
        })
    return rows


def write_ladder(report: ProbeReport, out: Path) -> list[Path]:
    """ladder.csv, ladder.md, ladder.png and profile.json in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    rows = ladder_rows(report)
    csv_path, md_path, png_path, json_path = (out / n for n in LADDER_FILES)
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=LADDER_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    md_path.write_text(markdown_table(rows) + "\n", encoding="utf-8")
    json_path.write_text(json.dumps(report.record().model_dump(mode="json"), indent=2) + "\n", encoding="utf-8")
    if not has_extra("plots"):  # the table and profile are written either way; run() said so up front
        return [csv_path, md_path, json_path]
    plot_ladder(report, rows, png_path)
    return [csv_path, md_path, png_path, json_path]


def markdown_table(rows: list[dict[str, Any]]) -> str:
    head = "| target | prompt tokens | followed | control called | verdict |\n|---:|---:|---:|---:|:---|"
    lines = [head]
    for r in rows:
        verdict = "pass" if r["passed"] else ("over-length" if r["overflow"] else "fail")
        lines.append(f"| {r['target']} | {r['prompt_tokens'] or '-'} | {r['followed']}/{r['asked']} | "
                     f"{r['control_calls']}/{r['controls']} | {verdict} |")
    return "\n".join(lines)


def plot_ladder(report: ProbeReport, rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot("the ladder's PNG (ladder.png)")

    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [r["prompt_tokens"] or r["target"] for r in rows]
    ax.plot(xs, [r["pass_rate"] for r in rows], "o-", label="instruction followed (share of samples)")
    ax.plot(xs, [r["control_calls"] / r["controls"] if r["controls"] else 0 for r in rows], "x--",
            label="negative control called a tool")
    for x, r in zip(xs, rows, strict=True):
        ax.annotate("pass" if r["passed"] else "fail", (x, r["pass_rate"]), textcoords="offset points",
                    xytext=(0, 6), ha="center", fontsize=7)
    horizon = report.profile.instruction_horizon.tokens
    if report.ladder.passed_any:
        ax.axvline(horizon, color="green", linestyle=":", label=f"instruction horizon {horizon}")
    ax.axhline(0.5, color="grey", linewidth=0.5)
    ax.set_ylim(-0.05, 1.1)
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("rate")
    ax.set_title(f"capacity ladder: {report.key}")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
