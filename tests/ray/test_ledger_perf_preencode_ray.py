"""Through the real LedgerActor on the local Ray, payloads the LedgerClient encodes (sent as (kind, bytes))
store what the models would (issue 14); the store's side: tests/unit/test_ledger_perf_preencode.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray

from vak_context.actors.factory import ledger_actor
from vak_context.actors.ledger.client import LedgerClient
from vak_context.errors import InvalidPayload
from vak_context.events.payloads import Directive, Nudge, ToolResult


@pytest.mark.ray
def test_through_the_actor_encoded_and_model_appends_store_the_same_bytes(ray_cluster: Any, tmp_path: Path) -> None:
    """The same appends through a client that encodes (the default) and one that sends models store the
    same kinds and payload bytes, and both ledgers verify; an invalid payload fails in the caller with
    its typed error."""
    appends: list[list[Any]] = [[Nudge(tag="t", text="é\u2028")], [ToolResult(tool_use_id="u", tool_name="n", content="c")],
               [Directive(text="d"), Nudge(tag="x", text="y")]]
    stored = []
    for name, preencode in (("encoded", True), ("models", False)):
        actor = ledger_actor(tmp_path / name)
        client = LedgerClient(str(tmp_path / name), actor, preencode=preencode)
        for payloads in appends:
            client.append("s", payloads)
        bad: dict[str, Any] = {"kind": "nudge", "tag": 1}
        with pytest.raises(InvalidPayload):
            client.append("s", [bad])
        stored.append([(e.kind, e.payload) for e in client.entries("s")])
        assert client.verify().ok
        ray.kill(actor, no_restart=True)
    assert stored[0] == stored[1] and len(stored[0]) == 4
