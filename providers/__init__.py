"""Provider adapters, one per wire protocol, over an injected httpx.AsyncClient."""
