"""What the tests share: fakes, fixtures and data, imported as ``tests.fakes.*`` (never from a test module).

- ``httpserver``: the one loopback HTTP server (127.0.0.1, port 0, a thread) serving an httpx handler.
- ``threshold``: the scripted threshold model (follows a tool instruction iff the prompt is under T tokens).
- ``scripted``: the scripted OpenAI-compatible model the turn-loop tests drive, and its completions.
- ``sessions``: sessions built entry by entry (``SessionBuilder``, ``build_session``, ``ledger_session``, ``Chain``).
- ``planning``: one request planned and projected outside a turn loop (``prepare``), for the planner's tests.
- ``probe``: the probe run against the threshold model, and hand-made rung outcomes.
- ``ledgers``, ``ledger_contract``: ways to reach a ledger that only tests need (the LedgerActor class in this
  process), and the conformance suite every way to reach a ledger runs.
- ``cli``: the `vak` command line as a test drives it (a small ledger, its one-line errors, its process).
- ``network``: the guard that refuses connections outside loopback in the test process.
- ``sockets``: the kernel's socket tables, read for a process tree.
- ``local_model``, ``imported``: the session fixtures (the real local model server, the recorded sessions
  imported once), registered as plugins by tests/conftest.py.
- ``recall``, ``recordings``, ``trajectory_readers``, ``adversarial_bodies``, ``canary``, ``chat_requests``,
  ``provider_bodies/``: inputs and oracles shared by several test files (and bench/).
- ``embedder``, ``wire_models``, ``done_when``: an embedder's two tools, the scripted model on each wire format,
  and issue 23's done-when session (directives, drivers of both loops, the checks), in-process and on Ray.
- ``ray_folders``: a ledger folder's detached actors on the shared Ray, killed when a test is done.
- ``doc_model``, ``doc_runner``: the scripted model the docs' examples run against, and the child process that
  runs them (tests/service/test_doc_examples.py).
- ``crash_writer``: the crash test's child process; ``farm_jobs.toml``: the farm the Ray job test submits.
- ``agent_upstream``, ``agent_tasks``, ``agent_runs``, ``agent_compare``: real agents from the package index
  (mini-swe-agent, smolagents, pydantic-ai, the Agents SDK, LangChain) on their tasks, direct and through the
  engine, against a scripted upstream that answers only from what each request holds (and bench/agents.py).
- ``bad_inputs``, ``load_upstream``, ``serve_faults``: the malformed bodies ``vak serve`` must refuse with a 4xx (its
  bad-input test and bench/serve_load.py); for bench/serve_load.py, the stateless scripted upstream it runs in a
  process of its own, and ``vak serve`` killed and restarted in place with its ledger read back (forks, duplicates,
  lost replies).
- ``demo_reader``: the scripted model for the demo's three questions (bench/demo_compare.py): it reads the
  workspace through the offered tools and answers only from what each request holds.
"""
