"""Amazon Bedrock's OpenAI-compatible chat endpoint, as a subclass of the OpenAI adapter.

Base URL ``https://bedrock-runtime.<region>.amazonaws.com/openai/v1`` (``/chat/completions`` under it); the
Bedrock API key goes in as a bearer token (``AWS_BEARER_TOKEN_BEDROCK``). The wire shape, usage and errors are
OpenAI's. Bedrock's validation message for a long prompt ("Input is too long for requested model") is added
to the over-length detection. Bedrock publishes no context length through this API.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Unpack

import httpx

from vak_context.context.request.messages import ModelContext
from vak_context.errors import ContextOverflow, InvalidInput
from vak_context.providers.base import ProviderOptions, error_message, overflow_error
from vak_context.providers.openai_compat import OpenAICompatProvider

_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d")


def bedrock_base_url(region: str) -> str:
    if not _REGION.fullmatch(region):
        raise InvalidInput(
            f"bedrock: {region!r} is not an AWS region name (like 'us-west-2'); set AWS_REGION."
        )
    return f"https://bedrock-runtime.{region}.amazonaws.com/openai/v1"


class BedrockProvider(OpenAICompatProvider):
    name: ClassVar[str] = "bedrock"
    key_hint: ClassVar[str] = "AWS_BEARER_TOKEN_BEDROCK (a Bedrock API key)"

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        region: str | None = None,
        **options: Unpack[ProviderOptions],
    ) -> None:
        if options.get("base_url") is None:
            if region is None:
                raise InvalidInput("bedrock: pass region= (e.g. 'us-west-2') or base_url=.")
            options["base_url"] = bedrock_base_url(region)
        super().__init__(client, **options)

    def overflow(self, status: int, body: Any) -> ContextOverflow | None:
        over = super().overflow(status, body)
        if over is None and status == 400:
            message = self._redact(error_message(body))
            if "input is too long" in message.lower():
                return overflow_error(self.name, status, message, None, None)
        return over

    async def model_context(self, model: str) -> ModelContext:
        return ModelContext(
            provider=self.name,
            model=model,
            source="none: Bedrock's OpenAI-compatible endpoint publishes no context length; "
            "the probe ladder measures the window",
        )
