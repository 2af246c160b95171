"""Only the process that started the local model server can use it, and only while it lives.

Against the real llama.cpp server (SmolLM2): a per-run API key, no CORS for any Origin, the key
kept out of argv, environment, log and repr, and the server gone within seconds of its parent's
SIGKILL even in the middle of a generation.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from vak_context.errors import ModelServerError
from vak_context.providers.local.server import LocalModelServer

pytestmark = pytest.mark.live

REPO = Path(__file__).resolve().parents[2]
ORIGINS = ("http://evil.example", "null", "http://127.0.0.1:8000")
CHAT = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 1}


def test_the_key_is_unknown_before_start() -> None:
    """A server that never started has no key to hand out, and says how to get one."""
    with pytest.raises(ModelServerError, match="start"):
        _ = LocalModelServer().api_key


def test_requests_without_this_runs_key_get_401(local_model: LocalModelServer) -> None:
    """Every API path answers 401 without the key or with a wrong one, and 200 with the run's key."""
    with httpx.Client(timeout=60, trust_env=False) as client:
        for headers in ({}, {"Authorization": "Bearer not-the-key"}):
            assert client.get(local_model.base_url + "/models", headers=headers).status_code == 401
            assert client.get(local_model.root_url + "/props", headers=headers).status_code == 401
            assert client.get(local_model.root_url + "/slots", headers=headers).status_code == 401
            reply = client.post(local_model.base_url + "/chat/completions", headers=headers, json=CHAT)
            assert reply.status_code == 401, reply.text
        assert client.get(local_model.base_url + "/models", headers=local_model.auth_headers()).status_code == 200
        reply = client.post(local_model.base_url + "/chat/completions", headers=local_model.auth_headers(), json=CHAT)
        assert reply.status_code == 200, reply.text


def test_no_origin_gets_a_cors_header(local_model: LocalModelServer) -> None:
    """For any Origin, with or without the key, on plain requests and on preflights, the server sends
    no Access-Control-* header, so no web page can read its answers."""
    with httpx.Client(timeout=60, trust_env=False) as client:
        for origin in ORIGINS:
            replies = [
                client.get(local_model.root_url + "/health", headers={"Origin": origin}),
                client.get(local_model.base_url + "/models", headers={"Origin": origin}),
                client.get(local_model.base_url + "/models", headers={"Origin": origin, **local_model.auth_headers()}),
                client.post(local_model.base_url + "/chat/completions", json=CHAT,
                            headers={"Origin": origin, **local_model.auth_headers()}),
                client.options(local_model.base_url + "/chat/completions",
                               headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                        "Access-Control-Request-Headers": "authorization, content-type"}),
            ]
            for reply in replies:
                cors = {k: v for k, v in reply.headers.items() if k.lower().startswith("access-control-allow")}
                assert "access-control-allow-origin" not in cors, (origin, reply.request.url, cors)
                assert cors == {} or set(cors) == {"access-control-allow-credentials"}, cors
                assert cors.get("access-control-allow-credentials", "false") == "false"


def test_the_key_stays_out_of_argv_environment_log_and_repr(local_model: LocalModelServer) -> None:
    """The key is nowhere another local user or a log reader could see it: not in the child's
    command line or environment, not in the server's log, not in the server object's repr."""
    key = local_model.api_key
    pid = local_model.pid
    assert pid is not None and len(key) >= 32
    assert key.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
    assert key.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
    assert local_model.log_path is not None and key not in local_model.log_path.read_text(errors="replace")
    assert key not in repr(local_model)


def test_each_start_draws_a_new_key() -> None:
    """A restarted server has a fresh key, and the previous run's key no longer opens it."""
    server = LocalModelServer("smollm2", n_ctx=512, threads=1)
    with server:
        first = server.api_key
    with server:
        second = server.api_key
        assert second != first
        old = httpx.get(server.base_url + "/models", headers={"Authorization": f"Bearer {first}"}, trust_env=False)
        assert old.status_code == 401


GENERATING_PARENT = """
import sys, threading, time, httpx
from vak_context.providers.local.server import LocalModelServer

server = LocalModelServer("smollm2", n_ctx=8192, threads=1).start()
# A 6,000-token prompt: llama.cpp's graceful shutdown waits for its prefill (90 s measured on one
# thread here), then 1,000 tokens of answer.
body = {"messages": [{"role": "user", "content": "word " * 6000 + "Count upwards from one."}],
        "max_tokens": 1000, "ignore_eos": True, "temperature": 0.0}

def generate():
    httpx.post(server.base_url + "/chat/completions", json=body, headers=server.auth_headers(),
               timeout=None, trust_env=False)

threading.Thread(target=generate, daemon=True).start()
print(server.pid, server.root_url, server.api_key, flush=True)
sys.stdin.read()
"""


def _slots_busy(root_url: str, key: str) -> bool:
    slots = httpx.get(root_url + "/slots", headers={"Authorization": f"Bearer {key}"}, trust_env=False, timeout=30)
    return any(slot.get("is_processing") for slot in slots.json())


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (it has exited; whoever inherited it has not reaped it yet)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat_line.rsplit(")", 1)[1].split()[0] == "Z"


def test_sigkill_of_the_parent_mid_generation_ends_the_server_within_seconds(tmp_path: Path) -> None:
    """A parent SIGKILLed while its server is working on a request (a 6,000-token prompt and a
    1,000-token answer, checked in flight through /slots right before the kill) leaves no server
    behind: the child process is gone within 10 s, where a graceful shutdown first finishes the
    prompt's prefill (90 s measured on one thread here)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen([sys.executable, "-c", GENERATING_PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          env=env, cwd=tmp_path) as parent:
        assert parent.stdout is not None
        line = parent.stdout.readline().decode()
        assert line, f"the parent exited with {parent.wait()} before its server was up"
        child_pid, root_url, key = line.split()
        deadline = time.monotonic() + 120
        while not _slots_busy(root_url, key):  # the request is posted from a thread; wait until it runs
            assert time.monotonic() < deadline, "the generation never started"
            time.sleep(0.05)
        assert _slots_busy(root_url, key)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 10
    while not _gone(int(child_pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(int(child_pid)), f"server {child_pid} still running 10 s after its parent was killed"
