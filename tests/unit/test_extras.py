"""The optional parts of the install (issue 23 item 2): without the `plots` extra the farm report and the
probe's table are still written and say in one line (tests/unit/test_farm_report.py) what to install; without the `local` extra the local
model server refuses to start with one line naming the extra, before any child process starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from vak_context import extras
from vak_context.errors import MissingExtra, VakError
from vak_context.providers.local.files import QWEN_05B, QWEN_15B, model_path
from vak_context.providers.local.server import LocalModelServer


def test_the_error_names_the_extra_and_the_command_in_one_line() -> None:
    error = MissingExtra("local", "the bundled local model (qwen)")
    assert isinstance(error, VakError) and error.extra == "local"
    assert "\n" not in str(error) and "pip install 'vak-context[local]'" in str(error)
    assert extras.has_extra("plots") and extras.has_extra("local")  # `make install` installs every extra
    assert QWEN_15B.extra == "local" and extras.has_extra(QWEN_05B.extra)


def test_the_smaller_models_extra_is_its_chunk_packages_and_is_named_when_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The `qwen-0-5b` extra lists exactly the 0.5B's chunk packages; without it, the model's file is refused
    in one line naming the extra (before any chunk is read), and nothing is written to the cache."""
    assert extras.EXTRAS[QWEN_05B.extra] == tuple(package for package, _ in QWEN_05B.parts)
    monkeypatch.setitem(extras.EXTRAS, QWEN_05B.extra, ("vak_no_such_module",))
    with pytest.raises(MissingExtra, match=r"Qwen2\.5-Coder-0\.5B model needs the `qwen-0-5b` extra") as caught:
        model_path(QWEN_05B, tmp_path / "cache")
    assert "pip install 'vak-context[qwen-0-5b]'" in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "cache").exists()
    monkeypatch.setitem(extras.EXTRAS, "local", ("vak_no_such_module",))  # the default model's: `local`
    with pytest.raises(MissingExtra, match=r"vak-context\[local\]"):
        model_path(QWEN_15B, tmp_path / "cache")


def test_without_local_the_server_refuses_to_start_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(extras.EXTRAS, "local", ("vak_no_such_module",))
    server = LocalModelServer("smollm2")
    with pytest.raises(MissingExtra, match=r"vak-context\[local\]") as caught:
        server.start()
    assert "\n" not in str(caught.value) and not server.running()
