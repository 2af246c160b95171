"""One message model: the ledger and the requests share one set of content blocks, the payload kinds are
read off one union, stored bytes did not move, provider defaults are written once, and one helper turns
characters into tokens (issue 13 item 6)."""

from __future__ import annotations

import ast
import inspect
import math
import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from vak_context import events as events_package
from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR, estimate_tokens
from vak_context.context.request import messages
from vak_context.events import blocks, payloads
from vak_context.events.canonical import decode
from vak_context.events.envelope import Mapper
from vak_context.providers.anthropic import AnthropicProvider
from vak_context.providers.base import Provider
from vak_context.providers.gemini import GeminiProvider
from vak_context.providers.ollama import OllamaProvider
from vak_context.providers.openai_compat import OpenAIChatProvider, OpenAICompatProvider
from vak_context.providers.openai_responses import OpenAIResponsesProvider
from vak_context.providers.openrouter import OpenRouterProvider
from vak_context.providers.registry import make_provider

ROOT = Path(__file__).resolve().parents[2]
HEX = "ab" * 32

# ------------------------------------------------------------------ one set of blocks


def test_each_block_has_one_name() -> None:
    """The request side and the payloads use the ledger's block classes under their own names: no module
    binds a block class to a second name (issue 22 removed the request side's aliases and the payloads'
    image alias), and each union lists the blocks once."""
    block_classes = {v for v in vars(blocks).values() if isinstance(v, type) and issubclass(v, BaseModel)}
    for module in (messages, payloads, events_package):
        for name, value in vars(module).items():
            if isinstance(value, type) and value in block_classes:
                assert name == value.__name__, f"{module.__name__}.{name} is a second name for {value.__name__}"
    assert not hasattr(payloads, "ImageRef")
    step_members = get_args(get_args(blocks.StepBlock)[0])
    message_members = get_args(get_args(blocks.MessageBlock)[0])
    assert set(step_members) < set(message_members)
    assert len(set(message_members)) == len(message_members) == 5


def test_a_stored_step_goes_into_a_request_unchanged() -> None:
    """An assistant step read back from its canonical bytes gives blocks a Message accepts as they are,
    and the step's and the message's text agree."""
    step = payloads.AssistantStep(blocks=(
        blocks.ThinkingBlock(thinking="hm"), blocks.TextBlock(text="a"),
        blocks.ToolUseBlock(id="c1", name="grep", input={"q": "x"}), blocks.TextBlock(text="b"),
    ))
    _, data = Mapper().encode_payload(step)
    back = payloads.PAYLOAD_ADAPTER.validate_python(decode(data))
    message = messages.Message(role="assistant", content=back.blocks)
    assert message.content == step.blocks
    assert message.text == back.text == "ab"
    assert [b.id for b in back.tool_uses] == ["c1"]


# ------------------------------------------------------------------ payload kinds from the union


def test_payload_types_are_read_off_the_union() -> None:
    """PAYLOAD_TYPES holds exactly the union's members, keyed by their kind, and the kinds are these
    (``turn_tail`` joined them with the closed record that keeps its tail)."""
    members = get_args(get_args(payloads.EntryPayload)[0])
    assert list(payloads.PAYLOAD_TYPES.values()) == list(members)
    assert all(payloads.PAYLOAD_TYPES[cls.model_fields["kind"].default] is cls for cls in members)
    assert payloads.KINDS == (
        "activity", "assistant_step", "capacity_profile", "compaction", "directive", "evidence_body",
        "intent_note", "nudge", "plan", "presentation", "presentation_feedback", "presentation_selection",
        "receipt", "reset_handoff", "thread", "tool_result", "turn_card", "turn_tail", "work_contract",
    )


# ------------------------------------------------------------------ stored bytes


def _golden_payloads() -> list[BaseModel]:
    return [
        payloads.Directive(text="look at this\n", images=(
            payloads.ImageBlock(ref="evidence:" + HEX),
            payloads.ImageBlock(ref="https://x/y.jpg", media_type="image/jpeg"),
        )),
        payloads.AssistantStep(
            blocks=(blocks.ThinkingBlock(thinking="hm", signature="sig"), blocks.TextBlock(text="I'll grep."),
                    blocks.ToolUseBlock(id="call_1", name="grep", input={"pattern": "é", "n": 3, "deep": [1.5, None]})),
            model="qwen", provider="local", stop_reason="tool_use",
        ),
        payloads.ToolResult(tool_use_id="call_1", tool_name="grep", content="a\tb", evidence_id=HEX, windowed=True),
    ]


# Written by the code before the blocks were merged (commit 8c222db), for the payloads above.
GOLDEN = [
    (b'{"images":[{"media_type":"image/png","ref":"evidence:' + HEX.encode() + b'"},'
     b'{"media_type":"image/jpeg","ref":"https://x/y.jpg"}],"kind":"directive","text":"look at this\\n"}',
     "cc9feb83066f212c5b731f6594d761b202646f0230fa9c6916f3e42c7e0c42f6"),
    (b'{"blocks":[{"signature":"sig","thinking":"hm","type":"thinking"},{"text":"I\'ll grep.","type":"text"},'
     b'{"id":"call_1","input":{"deep":[1.5,null],"n":3,"pattern":"\xc3\xa9"},"name":"grep","type":"tool_use"}],'
     b'"kind":"assistant_step","model":"qwen","provider":"local","stop_reason":"tool_use"}',
     "b1017c501db325032e7c80e52832bbf0cee65cdefce5b50386300ba0985b0c97"),
    (b'{"content":"a\\tb","evidence_id":"' + HEX.encode() + b'","is_error":false,"kind":"tool_result",'
     b'"tool_name":"grep","tool_use_id":"call_1","windowed":true}',
     "fdfacd5a30e345fc829cc9d551a1bc440e2b587ac9fcdc1a24e6846faa39795d"),
]


@pytest.mark.parametrize("index", range(len(GOLDEN)))
def test_stored_bytes_and_ids_are_the_ones_written_before_the_merge(index: int) -> None:
    """A directive with images (stored untagged), a step with every block type and a tool result encode to
    the bytes and entry ids the pre-merge code wrote."""
    entry = Mapper().entry(_golden_payloads()[index], session="s1", seq=1, parent=HEX, time_us=1_700_000_000_000_000)
    assert (entry.payload, entry.id) == GOLDEN[index]


json_leaf = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) \
    | st.text(max_size=8)
json_value = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)


def _strategy(annotation: Any, metadata: list[Any]) -> st.SearchStrategy[Any]:
    """Values for one field annotation of a payload model (the shapes vak_context.events.payloads uses)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *extra = get_args(annotation)
        return _strategy(inner, [*metadata, *extra, *getattr(extra[0], "metadata", [])])
    if origin in (Union, types.UnionType):
        return st.one_of(*(_strategy(a, metadata) for a in get_args(annotation)))
    if origin is Literal:
        return st.sampled_from(get_args(annotation))
    if origin is tuple:
        return st.lists(_strategy(get_args(annotation)[0], []), max_size=3).map(tuple)
    if origin is dict:
        return st.dictionaries(st.text(max_size=6), json_value, max_size=3)
    if annotation is type(None):
        return st.none()
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model(annotation)
    pattern = next((m.pattern for m in metadata if getattr(m, "pattern", None)), None)
    low = next((m.ge for m in metadata if getattr(m, "ge", None) is not None), None)
    high = next((m.le for m in metadata if getattr(m, "le", None) is not None), None)
    simple: dict[Any, st.SearchStrategy[Any]] = {
        str: st.from_regex(pattern, fullmatch=True) if pattern else st.text(max_size=12),
        bool: st.booleans(),
        int: st.integers(min_value=0 if low is None else low, max_value=2**40),
        float: st.floats(min_value=low, max_value=high, allow_nan=False, allow_infinity=False),
    }
    if annotation is Any:
        return json_value
    return simple[annotation]


def _model(cls: type[BaseModel]) -> st.SearchStrategy[BaseModel]:
    fields = {name: _strategy(f.annotation, list(f.metadata)) for name, f in cls.model_fields.items()}
    return st.fixed_dictionaries(fields).map(lambda values: cls(**values))


every_payload = st.sampled_from(sorted(payloads.PAYLOAD_TYPES)).flatmap(lambda kind: _model(payloads.PAYLOAD_TYPES[kind]))


@given(every_payload)
@settings(max_examples=300, deadline=None)
def test_every_payload_round_trips_to_the_same_canonical_bytes(payload: BaseModel) -> None:
    """Any payload of any kind, encoded, decoded, validated and encoded again, gives the same bytes and the
    same model."""
    mapper = Mapper()
    kind, data = mapper.encode_payload(payload)
    back = mapper.validate(decode(data))
    assert back == payload
    assert mapper.encode_payload(back) == (kind, data)


# ------------------------------------------------------------------ provider defaults


@pytest.mark.parametrize("cls", [AnthropicProvider, GeminiProvider, OllamaProvider, OpenAIChatProvider,
                                 OpenAIResponsesProvider, OpenRouterProvider])
def test_an_adapter_without_base_url_uses_its_one_default(cls: type[Provider]) -> None:
    """The constructor writes no URL of its own (its default is None) and lands on the class's default."""
    assert inspect.signature(cls).parameters["base_url"].default is None
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda request: httpx.Response(500)))
    assert cls.default_base_url is not None
    assert cls(client).base_url == cls.default_base_url.rstrip("/")


def test_the_registry_uses_the_adapters_ollama_default() -> None:
    """make_provider for Ollama without OLLAMA_HOST gives the adapter's own default URL."""
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda request: httpx.Response(500)))
    bound = make_provider("ollama:qwen", client, env={})
    assert bound.provider.base_url == OllamaProvider.default_base_url


# ------------------------------------------------------------------ one token estimate


@given(st.integers(0, 10**9), st.floats(min_value=1e-3, max_value=4.0))
def test_estimate_is_the_ceiling_of_chars_times_rate(chars: int, rate: float) -> None:
    """The helper gives ceil(chars × rate), the integer every replaced call site computed, and floor on request."""
    assert estimate_tokens(chars, rate) == math.ceil(chars * rate)
    assert estimate_tokens(chars, rate, rounding=math.floor) == math.floor(chars * rate)
    assert estimate_tokens(chars, 0.25, rounding=math.floor) == chars // 4


def _inline_conversions(tree: ast.AST) -> list[int]:
    """Lines where math.ceil/int/round is applied to a product with a tokens-per-char rate."""
    rates = ("tokens_per_char", "tpc")
    hits = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.BinOp)
                and isinstance(node.args[0].op, ast.Mult)):
            continue
        func = ast.unparse(node.func)
        if func in ("math.ceil", "int", "round") and any(r in ast.unparse(node.args[0]) for r in rates):
            hits.append(node.lineno)
    return hits


CODE_FOLDERS = ("context", "agent", "actors", "sessions", "importers", "engine", "farm", "cli", "providers")


def test_no_inline_chars_to_tokens_conversion_is_left() -> None:
    """No module of the engine, agent, actors, farm, CLI or providers rounds chars × tokens_per_char itself."""
    found = {}
    for folder in CODE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            lines = _inline_conversions(ast.parse(path.read_text(encoding="utf-8")))
            if lines:
                found[str(path.relative_to(ROOT))] = lines
    assert found == {}


def _unnamed_quarters(tree: ast.Module) -> list[int]:
    """Lines with the literal 0.25 anywhere but as the whole value of a module-level named constant."""
    named = {id(node.value) for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign)}
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value == 0.25 and id(node) not in named]


def test_the_token_prior_is_one_named_constant() -> None:
    """The chars-to-tokens prior is written once, ``PRIOR_TOKENS_PER_CHAR`` in context/capacity/tokens.py:
    no module of the code folders spells 0.25 inline (issue 22 found it in the actor factory and the farm
    spec), and the old second name is gone."""
    found = {}
    for folder in CODE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            lines = _unnamed_quarters(ast.parse(path.read_text(encoding="utf-8")))
            if lines:
                found[str(path.relative_to(ROOT))] = lines
    assert found == {}
    assert PRIOR_TOKENS_PER_CHAR == 0.25
    from vak_context.context.history import turns
    assert not hasattr(turns, "DEFAULT_TOKENS_PER_CHAR")


def test_prompt_cache_key_defaults_live_on_the_class() -> None:
    """OpenAI and OpenRouter send prompt_cache_key unless told not to; a plain compatible server does not."""
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda request: httpx.Response(500)))
    assert OpenAIChatProvider(client).prompt_cache_key is True
    assert OpenRouterProvider(client).prompt_cache_key is True
    assert OpenAICompatProvider(client, base_url="http://127.0.0.1:8080/v1").prompt_cache_key is False
    assert OpenAIChatProvider(client, prompt_cache_key=False).prompt_cache_key is False
    assert OpenAICompatProvider(client, base_url="http://127.0.0.1:8080/v1", prompt_cache_key=True).prompt_cache_key
