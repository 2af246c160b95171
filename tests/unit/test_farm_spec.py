"""The farm spec (vak_context.farm.spec): TOML into frozen typed objects, and errors that name file, line, key and fix."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from vak_context.errors import FarmSpecError, InvalidInput
from vak_context.farm.run import plan_units
from vak_context.farm.spec import (
    LiveTask,
    ProbeTask,
    ReplayTask,
    load_farm_spec,
    parse_farm_spec,
)

REPO = Path(__file__).resolve().parents[2]
BASE = """
[farm]
name = "t"

[[models]]
name = "small"
model = "smollm2"
n_ctx = 2048

[[models]]
name = "box"
kind = "endpoint"
base_url = "http://127.0.0.1:9/v1"
model = "m"
api_key_env = "BOX_KEY"

[[models]]
name = "hosted"
kind = "hosted"
spec = "anthropic:claude-sonnet-4-5"
window = 200000

[[sessions]]
name = "gen"
kind = "generated"
seed = 3
turns = 4
"""


def spec_with(tasks: str, base: str = BASE) -> str:
    return base + tasks


def test_the_shipped_example_parses_into_typed_frozen_objects() -> None:
    """farm/examples/small.toml names two local models, two shared recordings and a probe, a replay and a live
    task; the objects are frozen and shared: paths point at existing files."""
    spec = load_farm_spec(REPO / "farm" / "examples" / "small.toml")
    assert [m.name for m in spec.models] == ["smollm2", "smollm2-wide"]
    assert all(s.kind == "recording" and s.path is not None and s.path.is_file() for s in spec.sessions)
    kinds = [type(t) for t in spec.tasks]
    assert kinds == [ProbeTask, ReplayTask, LiveTask]
    probe = spec.tasks[0]
    assert isinstance(probe, ProbeTask) and probe.max_sizes == 2 and probe.samples == 1  # the quick ladder
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.models[0].n_ctx = 1  # type: ignore[misc]
    assert spec.default_run_id().startswith("small-")


def test_defaults_and_task_expansion_into_units() -> None:
    """Tasks without models run on every model they can; replay on every session; a hosted model is probed
    only when the operator config allows it (a note says so otherwise)."""
    spec = parse_farm_spec(spec_with('[[tasks]]\nname = "p"\nkind = "probe"\n[[tasks]]\nname = "r"\nkind = "replay"\n'))
    units, notes = plan_units(spec, hosted_probe=False)
    assert [str(u.key) for u in units] == ["p/small", "p/box", "r/small/gen", "r/box/gen", "r/hosted/gen"]
    assert len(notes) == 1 and "hosted" in notes[0] and "full" in notes[0]
    units, notes = plan_units(spec, hosted_probe=True)
    assert "p/hosted" in [str(u.key) for u in units] and notes == []


def test_the_run_id_follows_the_content_not_the_file() -> None:
    """The same spec gives the same default run id (so a rerun resumes); any change gives another."""
    text = spec_with('[[tasks]]\nname = "r"\nkind = "replay"\n')
    assert parse_farm_spec(text).default_run_id() == parse_farm_spec(text).default_run_id()
    assert parse_farm_spec(text).default_run_id() != parse_farm_spec(text.replace("seed = 3", "seed = 4")).default_run_id()


@pytest.mark.parametrize(
    ("tasks", "offset", "key", "words"),  # offset: the line within the [[tasks]] text
    [
        ('[[tasks]]\nname = "p"\nkind = "sweep"\n', 3, "tasks[0].kind", "not one of"),
        ('[[tasks]]\nname = "p"\nkind = "probe"\nmodels = ["nope"]\n', 4, "tasks[0].models", "not defined"),
        ('[[tasks]]\nname = "../x"\nkind = "probe"\n', 2, "tasks[0].name", "invalid task name"),
        ('[[tasks]]\nname = "p"\nkind = "probe"\nsamples = 0\n', 4, "tasks[0].samples", "out of range"),
        ('[[tasks]]\nname = "p"\nkind = "probe"\nsampels = 2\n', 4, "tasks[0].sampels", "unknown key"),
        ('[[tasks]]\nname = "l"\nkind = "live"\nsession = "gen"\ndirectives = ["go"]\nrepeats = 2\nrequire = 3\n',
         7, "tasks[0].require", "could never pass"),
        ('[[tasks]]\nname = "l"\nkind = "live"\nsession = "gen"\n', 1, "tasks[0]", "directives"),
    ],
)
def test_a_bad_task_names_the_line_and_key(tasks: str, offset: int, key: str, words: str) -> None:
    """Each mistake is a FarmSpecError (an InvalidInput) that names the line, the key and what to do."""
    line = BASE.count("\n") + offset
    with pytest.raises(FarmSpecError) as info:
        parse_farm_spec(spec_with(tasks), path=Path("farm.toml"))
    err = info.value
    assert isinstance(err, InvalidInput)
    assert (err.line, err.key) == (line, key), str(err)
    assert words in str(err) and str(err).startswith(f"farm.toml:{line}: {key}: ")


def test_bad_models_and_sessions_are_refused_with_the_fix(tmp_path: Path) -> None:
    """A key value in place of a variable name, an unknown provider, a missing recording, a session name that
    is not a safe path component: each names the key and the fix."""
    cases = {
        BASE.replace('api_key_env = "BOX_KEY"', 'api_key_env = "sk-123 secret"'): ("models[1].api_key_env",
                                                                                  "environment variable"),
        BASE.replace('spec = "anthropic:claude-sonnet-4-5"', 'spec = "nosuch:model"'): ("models[2].spec", "unknown"),
        BASE.replace('name = "gen"', 'name = "a/b"'): ("sessions[0].name", "invalid session name"),
        BASE + '[[sessions]]\nname = "rec"\npath = "missing.json"\n': ("sessions[1].path", "no recorded session"),
        BASE + '[[models]]\nname = "small"\n': ("models[3].name", "defined twice"),
    }
    for text, (key, words) in cases.items():
        with pytest.raises(FarmSpecError) as info:
            parse_farm_spec(text + '[[tasks]]\nname = "r"\nkind = "replay"\n', base_dir=tmp_path)
        assert info.value.key == key and words in str(info.value), str(info.value)


def test_not_toml_and_missing_file_are_farm_spec_errors(tmp_path: Path) -> None:
    """Broken TOML names the line; a missing file says what to pass."""
    bad = tmp_path / "bad.toml"
    bad.write_text('[farm]\nname = "x"\n[[models]\nname = 1\n', encoding="utf-8")
    with pytest.raises(FarmSpecError) as info:
        load_farm_spec(bad)
    assert info.value.line == 3 and "not valid TOML" in str(info.value)
    with pytest.raises(FarmSpecError, match="no such file"):
        load_farm_spec(tmp_path / "none.toml")


def test_paths_resolve_against_the_spec_folder_and_shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative path is the spec folder's; shared:REST is $VAK_SHARED's; a local .gguf path too."""
    (tmp_path / "rec.json").write_text("[]", encoding="utf-8")
    shared = tmp_path / "shared"
    (shared / "d").mkdir(parents=True)
    (shared / "d" / "s.jsonl").write_text("{}\n", encoding="utf-8")
    monkeypatch.setenv("VAK_SHARED", str(shared))
    spec_file = tmp_path / "farm.toml"
    spec_file.write_text(
        '[[models]]\nname = "g"\nmodel = "w/m.gguf"\n'
        '[[sessions]]\nname = "a"\npath = "rec.json"\n[[sessions]]\nname = "b"\npath = "shared:d/s.jsonl"\n'
        '[[tasks]]\nname = "r"\nkind = "replay"\n', encoding="utf-8")
    spec = load_farm_spec(spec_file)
    assert spec.session("a").path == tmp_path / "rec.json"
    assert spec.session("b").path == shared / "d" / "s.jsonl"
    assert spec.model("g").model == str(tmp_path / "w" / "m.gguf")


def test_vak_farm_run_reports_a_bad_spec_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`vak farm run` on a broken spec exits 1 with the file, line and key, before any Ray or model starts."""
    from vak_context.cli.main import main

    bad = tmp_path / "farm.toml"
    bad.write_text('[[models]]\nname = "m"\n[[tasks]]\nname = "p"\nkind = "probe"\nmodels = ["x"]\n', encoding="utf-8")
    assert main(["farm", "run", str(bad), "--out", str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"vak: {bad}:6: tasks[0].models: ") and "not defined" in err
    assert not (tmp_path / "runs").exists()
