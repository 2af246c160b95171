"""`vak serve`: an OpenAI- and Anthropic-speaking HTTP endpoint in front of any model, through the engine.

``protocol`` reads each client protocol's request into one neutral history and writes replies, streams and
errors back in that protocol's own shape; ``textform`` reads tool exchanges a client writes as text
(smolagents') as the calls and results they are; ``conversation`` ingests what is new in a client's
history into its ledger session and drives the caller's loop (``Session.begin``); ``upstream`` sends each
request the turn renders to the upstream model; ``app`` is the Starlette app (one lock per session) that ``vak serve``
runs under uvicorn on 127.0.0.1. docs/INTEGRATIONS.md is the guide.
"""
