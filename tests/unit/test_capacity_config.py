"""The operator's TOML config ([probe] hosted) and the `vak probe` outputs (table, plot, profile)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import httpx
import pytest

from tests.fakes.threshold import ThresholdModel
from vak_context.agent.probe import ProbeRunner
from vak_context.cli.main import build_parser
from vak_context.cli.probe_cmd import markdown_table, write_ladder
from vak_context.config import config_path, load_config
from vak_context.context.capacity.profile import ProfileKey
from vak_context.errors import ConfigError
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider


def test_defaults_when_no_file(tmp_path: Path) -> None:
    config = load_config(env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert config.probe.hosted == "off" and config.path is None


def test_vak_config_and_xdg_locations(tmp_path: Path) -> None:
    assert config_path({"VAK_CONFIG": str(tmp_path / "x.toml")}) == (tmp_path / "x.toml", True)
    assert config_path({"XDG_CONFIG_HOME": str(tmp_path)}) == (tmp_path / "vak" / "config.toml", False)
    (tmp_path / "vak").mkdir()
    (tmp_path / "vak" / "config.toml").write_text('[probe]\nhosted = "full"\n[mcp]\nservers = ["a"]\n')
    config = load_config(env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert config.probe.hosted == "full"
    assert config.raw["mcp"] == {"servers": ["a"]}  # other sections are kept for their owners


def test_an_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unset VAK_CONFIG"):
        load_config(env={"VAK_CONFIG": str(tmp_path / "nope.toml")})


@pytest.mark.parametrize(("text", "match"), [
    ('[probe]\nhosted = "yes"\n', r"not one of \['off', 'full'\]"),
    ('[probe]\nhostd = "full"\n', r"unknown key\(s\) \['hostd'\]"),
    ('probe = 3\n', "must be a table"),
    ('[probe\nhosted = "full"\n', "not valid TOML"),
])
def test_bad_config_is_a_typed_error_that_says_what_to_fix(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as info:
        load_config(path)
    assert str(path) in str(info.value)


async def test_probe_outputs_table_plot_and_profile(tmp_path: Path) -> None:
    model = ThresholdModel(5000)
    async with httpx.AsyncClient(transport=model.transport()) as client:
        provider = OpenAICompatProvider(client, base_url="http://scripted.test/v1", retry=RetryPolicy(attempts=1))
        report = await ProbeRunner(provider, ProfileKey("scripted", "m")).run()
    paths = write_ladder(report, tmp_path / "out")
    assert [p.name for p in paths] == ["ladder.csv", "ladder.md", "ladder.png", "profile.json"]
    with paths[0].open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(report.ladder.outcomes)
    assert [int(r["target"]) for r in rows] == sorted(o.target for o in report.ladder.outcomes)
    assert {r["passed"] for r in rows} == {"True", "False"}
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads(paths[3].read_text())
    assert saved["instruction_horizon"]["tokens"] == report.profile.instruction_horizon.tokens
    assert markdown_table([]).count("\n") == 1


def test_cli_knows_probe_and_serve_local() -> None:
    parser = build_parser()
    args = parser.parse_args(["probe", "local:smollm2", "--n-ctx", "2048", "--max-sizes", "2"])
    assert args.spec == "local:smollm2" and args.n_ctx == 2048 and args.max_sizes == 2
    args = parser.parse_args(["serve-local", "--model", "gemma3-270m", "--port", "0"])
    assert args.model == "gemma3-270m"
