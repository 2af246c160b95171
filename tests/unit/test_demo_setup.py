"""The demo's per-model setup (cli/mainjob.py DemoSetup): the window, the quick ladder's top and max_tokens a
model gets in `vak run`, by registry name or alias."""

from __future__ import annotations

from vak_context.cli.mainjob import (
    DEFAULT_MODEL,
    DEMO_MAX_TOKENS,
    DEMO_N_CTX,
    DEMO_SETUPS,
    DemoSetup,
    demo_setup,
)
from vak_context.providers.local.catalogue import MODELS, canonical_model


def test_a_model_without_its_own_setup_gets_the_demos_defaults() -> None:
    assert demo_setup("smollm2") == DemoSetup() == DemoSetup(DEMO_N_CTX, None, DEMO_MAX_TOKENS)
    assert demo_setup(None) == DemoSetup()


def test_setups_are_keyed_by_registry_name_and_found_by_alias() -> None:
    assert set(DEMO_SETUPS) <= set(MODELS)
    assert demo_setup("qwen1.5b") == DEMO_SETUPS["qwen2.5-coder-1.5b"]
    assert demo_setup(DEFAULT_MODEL) == DEMO_SETUPS.get(canonical_model(DEFAULT_MODEL), DemoSetup())
    for setup in DEMO_SETUPS.values():  # a ladder larger than the server's window would probe past it
        assert setup.ladder_window is None or setup.ladder_window <= setup.n_ctx
