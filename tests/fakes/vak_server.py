"""`vak serve`'s app under a real uvicorn server on 127.0.0.1 (a free port) in a thread, in front of an
upstream given by its spec and base URL; the engine over ``ledger`` is opened and closed with it, so a
second ``running(...)`` on the same folder is a restarted server. ``ray`` (a cluster's address) opens the
engine on Ray, as ``vak serve --ray ADDRESS`` does."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from vak_context.engine.api import Engine
from vak_context.serve.app import ServeConfig, build_app

CLIENT_KEY = "test-run-key"


@dataclass(frozen=True)
class Running:
    url: str
    server: uvicorn.Server

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"


@contextmanager
def running(ledger: Path, upstream: str, base_url: str, *, window: int | None = 6_000,
            client_key: str | None = CLIENT_KEY, ray: str | None = None, defer_tools: str = "auto",
            rules: str = "observe", calls: str | None = None,
            summaries: str = "on", stated_pass: str = "deterministic") -> Iterator[Running]:
    engine = Engine.open(ledger, ray=ray)
    app = build_app(engine, ServeConfig(upstream, base_url=base_url, client_key=client_key, window=window,
                                        defer_tools=defer_tools, rules=rules, calls=calls,
                                        summaries=summaries, stated_pass=stated_pass))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="vak-serve-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:  # polled with a deadline: uvicorn offers no event to wait on
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("vak serve's test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Running(f"http://127.0.0.1:{port}", server)
    finally:
        server.should_exit = True
        thread.join(30)
        engine.close()
