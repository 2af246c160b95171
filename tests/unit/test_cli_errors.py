"""Every wrong argument of `vak probe`, `vak serve-local` and `vak run` is one line on stderr, before any work.

"Before any work" is checked with hooks, not clocks: starting a local Ray, starting a model server
and running a probe are replaced by a function that records the attempt and raises, so a check
that comes too late fails the test at once instead of running a probe for minutes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vak_context.cli.main import main

PROC = Path("/proc/self").is_dir()  # a folder nobody, not even root, can create anything in


class WorkStarted(Exception):
    """Raised by the hooks: the command got past its checks and started real work."""


@pytest.fixture()
def work(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The work a command started (Ray, a model server, a probe): each attempt is recorded, then refused."""
    import vak_context.agent.probe
    import vak_context.engine.localray
    import vak_context.providers.local.server

    started: list[str] = []

    def refuse(what: str) -> Any:
        def hook(*_args: Any, **_kwargs: Any) -> Any:
            started.append(what)
            raise WorkStarted(what)

        return hook

    async def refuse_probe(*_args: Any, **_kwargs: Any) -> Any:
        started.append("probe")
        raise WorkStarted("probe")

    monkeypatch.setattr(vak_context.engine.localray, "start_local_ray", refuse("ray"))
    monkeypatch.setattr(vak_context.providers.local.server.LocalModelServer, "start", refuse("model server"))
    monkeypatch.setattr(vak_context.agent.probe.ProbeRunner, "run", refuse_probe)
    yield started


def fails_in_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], code: int, *needles: str) -> str:
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == code, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("vak"), err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture()
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("not a folder\n")
    return path


# ---------------------------------------------------------------------- numbers out of range

OUT_OF_RANGE = [
    (["probe", "local:smollm2", "--samples", "0"], "--samples", "1 to 25"),
    (["probe", "local:smollm2", "--samples", "-1"], "--samples", "1 to 25"),
    (["probe", "local:smollm2", "--samples", str(10**12)], "--samples", "1 to 25"),
    (["probe", "local:smollm2", "--max-sizes", "0"], "--max-sizes", "1 to 100"),
    (["probe", "local:smollm2", "--max-sizes", "-3"], "--max-sizes", "1 to 100"),
    (["probe", "local:smollm2", "--max-sizes", str(10**12)], "--max-sizes", "1 to 100"),
    (["probe", "local:smollm2", "--controls", "-1"], "--controls", "0 to 25"),
    (["probe", "local:smollm2", "--n-ctx", "0"], "--n-ctx", "256 to"),
    (["probe", "local:smollm2", "--first-rung", "0"], "--first-rung", "64 to"),
    (["probe", "local:smollm2", "--first-rung", str(10**12)], "--first-rung", "64 to"),
    (["probe", "local:smollm2", "--samples", "three"], "--samples", "1 to 25"),
    (["serve-local", "--threads", "0"], "--threads", "1 to 512"),
    (["serve-local", "--threads", "-1"], "--threads", "1 to 512"),
    (["serve-local", "--threads", str(10**12)], "--threads", "1 to 512"),
    (["serve-local", "--port", "-1"], "--port", "0 to 65,535"),
    (["serve-local", "--port", "99999"], "--port", "0 to 65,535"),
    (["serve-local", "--n-ctx", "-8192"], "--n-ctx", "256 to"),
    (["serve-local", "--n-parallel", "0"], "--n-parallel", "1 to 64"),
    (["run", "--turns", "0"], "--turns", "1 to 1,000"),
    (["run", "--turns", "-5"], "--turns", "1 to 1,000"),
    (["run", "--turns", str(10**12)], "--turns", "1 to 1,000"),
    (["run", "--seed", "-1"], "--seed", "0 to"),
]


@pytest.mark.parametrize(("argv", "option", "span"), OUT_OF_RANGE, ids=[" ".join(a[0:1] + a[-2:]) for a, _, _ in
                                                                           OUT_OF_RANGE])
def test_numbers_out_of_range_are_one_line_naming_the_range(
    capsys: pytest.CaptureFixture[str], work: list[str], argv: list[str], option: str, span: str
) -> None:
    """0, negatives, 10^12 and non-numbers for any numeric option: exit 2, one line naming the option and
    its range, nothing started."""
    fails_in_one_line(capsys, argv, 2, f"argument {option}", span, "--help")
    assert work == []


# ---------------------------------------------------------------------- base URLs

BAD_URLS = [
    ("http://[::1/v1", "Invalid IPv6 URL"),
    ("http://127.0.0.1:99999/v1", "Port out of range"),
    ("http://127.0.0.1:port/v1", "not a valid URL"),
    ("http://127.0.0.1:0/v1", "port 0"),
    ("ftp://127.0.0.1/v1", "http:// or https://"),
    ("127.0.0.1:8080/v1", "http:// or https://"),
    ("http:///v1", "names no host"),
    ("http://127.0.0.1 :8080/v1", "contains whitespace"),
]


@pytest.mark.parametrize(("url", "why"), BAD_URLS)
def test_a_malformed_base_url_is_one_line_before_any_work(
    capsys: pytest.CaptureFixture[str], work: list[str], url: str, why: str
) -> None:
    """A --base-url that does not parse, has no host, a port outside 1-65535 or another scheme: exit 2, one
    line saying why and how to write it; no probe ran."""
    fails_in_one_line(capsys, ["probe", "openai-compat:x", "--base-url", url], 2, "--base-url", why,
                      "http://127.0.0.1:8080/v1")
    assert work == []


# ---------------------------------------------------------------------- output and ledger folders


def test_out_that_is_a_file_fails_before_the_probe(
    capsys: pytest.CaptureFixture[str], work: list[str], a_file: Path
) -> None:
    """`vak probe --out FILE` says the folder is a file before a server or a probe starts (it used to
    raise FileExistsError after the whole probe had run)."""
    fails_in_one_line(capsys, ["probe", "local:smollm2", "--out", str(a_file)], 1, "--out", "is a file")
    assert work == []


def test_out_under_a_file_or_holding_a_folder_named_like_the_ladder_fails_before_the_probe(
    capsys: pytest.CaptureFixture[str], work: list[str], a_file: Path, tmp_path: Path
) -> None:
    """An --out that cannot be created (its parent is a file), or whose ladder.csv is a folder: one line each."""
    fails_in_one_line(capsys, ["probe", "local:smollm2", "--out", str(a_file / "ladder")], 1,
                      "cannot be created", "is a file")
    out = tmp_path / "out"
    (out / "ladder.csv").mkdir(parents=True)
    fails_in_one_line(capsys, ["probe", "local:smollm2", "--out", str(out)], 1, "ladder.csv is a folder")
    assert work == []


@pytest.mark.skipif(not PROC, reason="needs /proc")
def test_an_out_or_ledger_folder_that_cannot_be_created_or_written_fails_before_any_work(
    capsys: pytest.CaptureFixture[str], work: list[str], tmp_path: Path
) -> None:
    """Folders in /proc cannot be created, nor /proc/self written, even by root: --out and --ledger there are
    one-line errors."""
    fails_in_one_line(capsys, ["probe", "local:smollm2", "--out", "/proc/vak-out"], 1, "--out", "cannot be created")
    fails_in_one_line(capsys, ["probe", "local:smollm2", "--out", str(tmp_path), "--ledger", "/proc/vak-ledger"], 1,
                      "--ledger", "cannot be created")
    fails_in_one_line(capsys, ["run", "--ledger", "/proc/vak-ledger"], 1, "--ledger", "cannot be created")
    fails_in_one_line(capsys, ["probe", "local:smollm2", "--out", "/proc/self"], 1, "--out", "cannot be written")
    fails_in_one_line(capsys, ["run", "--ledger", "/proc/self"], 1, "--ledger", "cannot be written")
    assert work == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_fails_before_any_work(
    capsys: pytest.CaptureFixture[str], work: list[str], tmp_path: Path
) -> None:
    """A folder without write permission, for --out and --ledger: one line, nothing started."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        fails_in_one_line(capsys, ["probe", "local:smollm2", "--out", str(locked)], 1, "permission denied")
        fails_in_one_line(capsys, ["run", "--ledger", str(locked / "ledger")], 1, "permission denied")
    finally:
        locked.chmod(0o700)
    assert work == []


def test_run_checks_the_ledger_before_ray_and_the_probe(
    capsys: pytest.CaptureFixture[str], work: list[str], a_file: Path, tmp_path: Path
) -> None:
    """`vak run --ledger` a file, or a folder whose sessions/ is a file: one line before Ray starts (it
    used to fail only after the two-minute probe)."""
    fails_in_one_line(capsys, ["run", "--ledger", str(a_file)], 1, "--ledger", "is a file")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "sessions").write_text("")
    fails_in_one_line(capsys, ["run", "--ledger", str(broken)], 1, "'sessions' is a file")
    fails_in_one_line(capsys, ["probe", "local:smollm2", "--out", str(tmp_path / "o"), "--ledger", str(broken)], 1,
                      "'sessions' is a file")
    assert work == []


def test_an_unknown_model_or_provider_fails_before_any_work(
    capsys: pytest.CaptureFixture[str], work: list[str], tmp_path: Path
) -> None:
    """`vak probe local:nope` and `vak probe nope:x`: one line naming what exists, nothing started."""
    out = ["--out", str(tmp_path / "o")]
    fails_in_one_line(capsys, ["probe", "local:nope", *out], 1, "unknown local model 'nope'", "smollm2")
    fails_in_one_line(capsys, ["probe", "nope:x", *out], 1, "unknown provider 'nope'")
    assert work == []


def test_the_checks_pass_for_good_arguments_and_work_starts(
    capsys: pytest.CaptureFixture[str], work: list[str], tmp_path: Path
) -> None:
    """The other side of the hooks: with good arguments each command gets past its checks and starts its
    work (so the tests above show checks, not hooks that stop everything)."""
    with pytest.raises(WorkStarted):
        main(["probe", "local:smollm2", "--out", str(tmp_path / "out"), "--ledger", str(tmp_path / "ledger")])
    with pytest.raises(WorkStarted):
        main(["probe", "openai-compat:x", "--base-url", "http://[::1]:8080/v1", "--out", str(tmp_path / "out")])
    with pytest.raises(WorkStarted):
        main(["run", "--ledger", str(tmp_path / "ledger"), "--turns", "3"])
    with pytest.raises(WorkStarted):
        main(["serve-local", "--port", "0", "--threads", "2"])
    assert work == ["model server", "probe", "ray", "model server"]
    assert not (tmp_path / "out").exists() and not (tmp_path / "ledger").exists()  # checking wrote nothing


def test_main_job_checks_its_arguments_before_starting_ray(work: list[str], a_file: Path, tmp_path: Path) -> None:
    """run_main_job (the API under `vak run`) refuses bad turns, seed, session name, ledger and base URL with
    a typed error before Ray starts."""
    from vak_context.cli.mainjob import run_main_job
    from vak_context.errors import InvalidInput

    ledger = tmp_path / "ledger"
    for kwargs in ({"turns": 0}, {"turns": 10**12}, {"seed": -1}, {"session": "bad\n"}, {"session": "../x"},
                   {"local_base_url": "http://[::1/v1"}, {"repeat_rule": "retry"}):
        with pytest.raises(InvalidInput):
            run_main_job(ledger, out=lambda _line: None, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="is a file"):
        run_main_job(a_file, out=lambda _line: None)
    with pytest.raises(InvalidInput, match="--repeat-rule close or --repeat-rule redo"):
        run_main_job(ledger, out=lambda _line: None, repeat_rule="Redo")
    assert work == []


def test_vak_runs_repeat_rules_are_the_sessions(capsys: pytest.CaptureFixture[str], work: list[str]) -> None:
    """`vak run --repeat-rule` offers exactly the names the engine's Session takes; another is one line."""
    from vak_context.cli.mainjob import DEFAULT_REPEAT_RULE, REPEAT_RULES
    from vak_context.engine.api import REPEAT_RULES as SESSION_RULES

    assert REPEAT_RULES == SESSION_RULES and DEFAULT_REPEAT_RULE == "close"
    fails_in_one_line(capsys, ["run", "--repeat-rule", "retry"], 2, "--repeat-rule", "close", "redo")
    assert work == []


def test_search_index_choices_are_the_engines(capsys: pytest.CaptureFixture[str]) -> None:
    """`vak serve` and `vak chat` offer `--search-index` with exactly the values Engine.open takes; another is
    one line naming them."""
    from vak_context.cli.chat import SEARCH_INDEX
    from vak_context.engine.api import SEARCH_INDEX as ENGINE_CHOICES

    assert SEARCH_INDEX == ENGINE_CHOICES and SEARCH_INDEX[0] == "turn-close"
    fails_in_one_line(capsys, ["serve", "--upstream", "local:qwen", "--search-index", "never"], 2,
                      "--search-index", "turn-close", "search")
    fails_in_one_line(capsys, ["chat", "--search-index", "never"], 2, "--search-index", "turn-close", "search")


def test_serve_workers_need_ray(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`vak serve --workers 2` without --ray is one line saying to add --ray, before anything starts or is
    bound; --workers 0 is refused by its bounds."""
    fails_in_one_line(capsys, ["serve", "--upstream", "openai-compat:m", "--base-url", "http://127.0.0.1:9/v1",
                               "--ledger", str(tmp_path / "ledger"), "--workers", "2"], 1, "--workers 2 needs --ray")
    assert not (tmp_path / "ledger").exists()
    fails_in_one_line(capsys, ["serve", "--upstream", "openai-compat:m", "--workers", "0"], 2, "--workers")
