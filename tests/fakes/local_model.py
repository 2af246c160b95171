"""The one real local model server every live test shares (SmolLM2-135M on llama.cpp, 127.0.0.1).

Registered from ``tests/conftest.py`` through ``pytest_plugins``. The server starts on first use
and stops at the end of the session, so a run that selects no live test never starts it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from vak_context.providers.local.server import LocalModelServer

# Small enough that a full prefill stays cheap on 2 cores; the server's cap for SmolLM2 is 8192.
LOCAL_MODEL_N_CTX = 8192


@pytest.fixture(scope="session")
def local_model() -> Iterator[LocalModelServer]:
    """A running ``LocalModelServer("smollm2")``: use ``.base_url`` (ends in /v1) and ``.root_url``.

    Every request but ``/health`` needs this run's key: pass ``api_key=local_model.api_key`` to a
    provider, or ``headers=local_model.auth_headers()`` to a plain httpx call.

    One slot (``n_parallel=1``), so requests from different tests queue rather than split the
    context; ``n_ctx`` is ``LOCAL_MODEL_N_CTX``. Never assert that this 135M model follows an
    instruction: that is what the capacity probe measures.
    """
    server = LocalModelServer("smollm2", n_ctx=LOCAL_MODEL_N_CTX, n_parallel=1, threads=2)
    server.start()
    try:
        yield server
    finally:
        server.stop()
