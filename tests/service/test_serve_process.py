"""``vak serve`` as a user starts it: a child process in front of a scripted upstream on loopback. It prints
the address it listens on and the 0600 file holding the run's key; an official ``openai`` client gets an
answer through it; every socket the process listens on is on loopback; SIGTERM stops it cleanly."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import openai

from tests.fakes.httpserver import serve
from tests.fakes.sockets import bound_sockets, is_loopback
from tests.fakes.wire_models import FORMATS, WireModel

DEADLINE_S = 120


def test_vak_serve_as_a_process(tmp_path: Path) -> None:
    model = WireModel(FORMATS["openai"])
    with serve(model.handle) as upstream:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        child = subprocess.Popen(
            [sys.executable, "-m", "vak_context.cli", "serve", "--upstream", "openai-compat:scripted",
             "--base-url", upstream.base_url, "--ledger", str(tmp_path / "ledger"), "--window", "9500"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
        try:
            assert child.stdout is not None
            lines: list[str] = []
            while not any("base_url=" in line for line in lines):  # the child prints both lines, then serves
                line = child.stdout.readline()
                assert line, f"vak serve exited: {''.join(lines)}"
                lines.append(line)
            text = "".join(lines)
            key_file = Path(re.search(r"key in (\S+);", text).group(1))  # type: ignore[union-attr]
            base_url = re.search(r"OpenAI: base_url=(\S+)", text).group(1)  # type: ignore[union-attr]
            assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
            key = key_file.read_text()
            assert key not in text
            with openai.OpenAI(base_url=base_url, api_key=key, timeout=DEADLINE_S, max_retries=0) as client:
                reply = client.chat.completions.create(
                    model="scripted", messages=[{"role": "user", "content": "please search query-001"}],
                    tools=[{"type": "function", "function": {"name": "web_search", "description": "Search the web.",
                                                             "parameters": {"type": "object", "properties": {
                                                                 "query": {"type": "string"}},
                                                                 "required": ["query"]}}}],
                    extra_headers={"x-vak-session": "process-1"})
            assert reply.choices[0].message.tool_calls, reply
            sockets = bound_sockets({child.pid}, child.pid)
            port = int(base_url.rsplit(":", 1)[1].split("/")[0])
            assert any(s.port == port for s in sockets), sockets
            assert all(is_loopback(s.address) for s in sockets), sockets
        finally:
            child.send_signal(signal.SIGTERM)
            out, _ = child.communicate(timeout=DEADLINE_S)
        assert child.returncode == 0, out
        assert not key_file.exists()  # the key's folder goes with the run
