"""OpenRouter: the OpenAI chat shape at ``https://openrouter.ai/api/v1``, as a subclass of the OpenAI adapter.

What differs: the cache hint is ``session_id`` alongside ``prompt_cache_key`` (both the session key), usage may
carry ``prompt_tokens_details.cache_write_tokens`` (parsed by the shared usage code), reasoning arrives as
``message.reasoning``, and the catalogue ``GET /models`` gives ``context_length`` and
``top_provider.max_completion_tokens`` for the metadata rung. ``transforms: []`` keeps OpenRouter's
"middle-out" compression off, so nothing is cut from the middle of a prompt behind the engine's back.
"""

from __future__ import annotations

from typing import Any, ClassVar

from vak_context.coerce import int_or_none
from vak_context.context.request.messages import ChatRequest, ModelContext
from vak_context.providers.openai_compat import OpenAICompatProvider


class OpenRouterProvider(OpenAICompatProvider):
    name: ClassVar[str] = "openrouter"
    key_hint: ClassVar[str] = "OPENROUTER_API_KEY"
    default_base_url: ClassVar[str | None] = "https://openrouter.ai/api/v1"
    prompt_cache_key_default: ClassVar[bool] = True

    def render(self, request: ChatRequest) -> dict[str, Any]:
        # OpenRouter compresses the middle of over-long prompts on small-context endpoints unless told not to;
        # an empty transforms list turns that off, so over-length is an error, never a blind cut (spec §2).
        return {"transforms": [], **super().render(request)}

    def render_cache(self, request: ChatRequest) -> dict[str, Any]:
        out = super().render_cache(request)
        if out and request.cache.session_key:
            out["session_id"] = request.cache.session_key
        return out

    async def model_context(self, model: str) -> ModelContext:
        """``GET /models``: the entry's ``context_length`` and ``top_provider.max_completion_tokens``."""
        catalogue = await self.request_json("GET", self.url("/models"))
        data = catalogue.get("data") if isinstance(catalogue, dict) else None
        entry = next(
            (
                e
                for e in data or []
                if isinstance(e, dict) and model in (e.get("id"), e.get("canonical_slug"))
            ),
            None,
        )
        if entry is None:
            return ModelContext(
                provider=self.name,
                model=model,
                source=f"none: {model!r} is not in OpenRouter's /models catalogue; check the model id",
            )
        top = entry.get("top_provider") or {}
        window = int_or_none(entry.get("context_length")) or int_or_none(top.get("context_length"))
        detail = {
            "context_length": entry.get("context_length"),
            "top_provider": {k: top[k] for k in ("context_length", "max_completion_tokens") if k in top},
        }
        return ModelContext(
            provider=self.name,
            model=model,
            declared_window=window,
            output_limit=int_or_none(top.get("max_completion_tokens")),
            source="/api/v1/models context_length and top_provider.max_completion_tokens",
            detail=detail,
        )
