"""Adapters for agent frameworks (each an optional extra): the framework keeps its own loop, tools and model;
the engine records the conversation in the ledger and the framework sends the engine's projection instead
of its own message list. Built on the public API only (``vak_context.Session`` and the caller's loop,
``session.begin``); docs/INTEGRATIONS.md has the user code.

* :mod:`vak_context.adapters.pydantic_ai`: a history processor plus the engine's tools (``[pydantic-ai]``);
* :mod:`vak_context.adapters.openai_agents`: a ``call_model_input_filter`` plus an append-only ``Session``
  (``[openai-agents]``);
* :mod:`vak_context.adapters.langchain`: a LangChain v1 agent middleware (``[langchain]``).

:mod:`vak_context.adapters.bridge` is what they share: the framework's messages as the engine's events
(the user's messages as directives, the model's replies as steps, the tool results as evidence) and the
projection as OpenAI chat messages.
"""
