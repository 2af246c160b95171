"""The model pass at turn close on Ray (docs/STATE.md "The model pass"): the PlannerActor builds the
summariser from the session's endpoint, ``stated_pass="model"`` travelling with it, and makes the pass's
call in its actor when the turn closes, after the turn's request; the item it keeps is in the session's
stated state (``via: "model"``). The scripted model is served on loopback (the actors reach it over HTTP)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import vak_context
from tests.fakes.httpserver import serve
from tests.fakes.ray_folders import kill_folder_actors
from tests.fakes.stated_model import StatedModel

pytestmark = pytest.mark.ray

SAID = "Hands off the vendored folder."  # a prohibition the deterministic pass's patterns do not read


@pytest.fixture
def cluster(ray_cluster: Any) -> str:
    import ray

    return str(ray.get_runtime_context().gcs_address)


async def test_the_planner_actor_makes_the_model_pass_at_turn_close(cluster: str, tmp_path: Path) -> None:
    model = StatedModel(stated_answer=json.dumps([{"category": "rule", "text": SAID}]))
    folder = tmp_path / "ledger"
    try:
        with serve(model.handle) as server:
            with vak_context.Engine.open(folder, ray=cluster) as engine:
                async with engine.session("s", model="openai-compat:scripted", base_url=server.base_url,
                                          window=8_000, summaries="off", stated_pass="model") as session:
                    result = await session.run(f"Never push to main. {SAID} Fix the parser, please.")
                    state = session.state()
        assert result.outcome == "completed"
        assert model.order == ["turn", "stated"]
        assert [(s.text, s.via) for s in state] == [("Never push to main.", "directive"), (SAID, "model")]
    finally:
        kill_folder_actors(folder)
