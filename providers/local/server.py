"""A real llama.cpp HTTP server (the ``xllamacpp`` wheel) on 127.0.0.1, in a child process.

``xllamacpp`` has no command-line entry point and ``xllamacpp.Server(params)`` serves until the
object is dropped, in the process that made it. So the server runs in a child process started as
``python -m vak_context.providers.local.server_child --child CONFIG``: stopping it is a SIGTERM (the child drops the
server, which shuts down in about 2 s), and a crash inside llama.cpp cannot take the caller down.

The child binds port 0 (or the port asked for) and reports the address it really got through a
pipe, so two servers never race for a port.

Only the process that started it can use it:

* Each start draws a random API key (``api_key``; never in ``repr``, argv, the environment or the
  log). The parent writes it as the first line of the child's stdin; llama.cpp then answers 401 to
  every request without ``Authorization: Bearer <key>`` except ``/health``. Whatever talks to the
  server sends the key (``OpenAICompatProvider(..., api_key=server.api_key)``).
* No CORS: llama.cpp sends its configured ``cors_origins`` verbatim (default ``*``) on every
  response. Set to a value cpp-httplib refuses as a header value, the header is never sent, so no
  web page a browser shows can read an answer.
* It dies with its parent. The kernel signals it when the parent goes (``PR_SET_PDEATHSIG``), and
  it also watches its stdin, a pipe from the parent, for EOF. Either way it exits at once, in the
  middle of a generation too, without the graceful shutdown that would first finish the request.

Which models it serves, and their files: ``vak_context.providers.local.catalogue``.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from types import TracebackType

import httpx

from vak_context.errors import ModelServerError
from vak_context.extras import require_extra
from vak_context.providers.local.catalogue import (
    MODELS,
    TEMPLATES,
    canonical_model,
    resolve_model,
)
from vak_context.providers.local.server_child import LOOPBACK, ServerConfig, default_threads

__all__ = ["LOOPBACK", "LocalModelServer", "ServerConfig", "default_threads"]


class LocalModelServer:
    """llama.cpp's server for one local model, bound to 127.0.0.1, in a child process.

    Use as a context manager (``with LocalModelServer("smollm2") as server: server.base_url``) or
    call ``start()`` / ``stop()``. ``base_url`` is the OpenAI-compatible root, ending in ``/v1``;
    ``root_url`` is the server root (``/health``, ``/props``, ``/metrics``).

    ``n_ctx`` is the whole KV cache; with ``n_parallel`` slots each request gets ``n_ctx // n_parallel``.
    ``template`` overrides the chat template: a file name in ``providers/local/templates``, a path, or
    ``"model"`` for the one inside the ``.gguf``.
    """

    def __init__(
        self,
        model: str = "smollm2",
        *,
        n_ctx: int = 8192,
        n_parallel: int = 1,
        threads: int | None = None,
        port: int = 0,
        template: str | None = None,
        cache_prompt: bool = True,
        startup_timeout: float = 120.0,
        cache_dir: Path | None = None,
        log_path: Path | None = None,
    ) -> None:
        if n_ctx < 256 or n_parallel < 1 or n_ctx // n_parallel < 256:
            raise ModelServerError(
                f"n_ctx={n_ctx} with n_parallel={n_parallel} leaves under 256 tokens per slot: "
                "raise n_ctx or lower n_parallel."
            )
        if not 0 <= port < 65536:
            raise ModelServerError(f"port {port} is out of range: pass 0 for a free port, or 1-65535.")
        self.model = canonical_model(model)
        self.n_ctx, self.n_parallel, self.port_requested = n_ctx, n_parallel, port
        self.threads = threads or default_threads()
        self.template = template
        self.cache_prompt = cache_prompt
        self.startup_timeout = startup_timeout
        self.cache_dir = cache_dir
        self._own_log = log_path is None
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._root_url: str | None = None
        self._api_key: str | None = None

    # ------------------------------------------------------------------ addresses

    @property
    def root_url(self) -> str:
        if self._root_url is None:
            raise ModelServerError("the local model server is not running: call start() or use it in a `with` block.")
        return self._root_url

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, e.g. ``http://127.0.0.1:41234/v1``."""
        return self.root_url + "/v1"

    @property
    def port(self) -> int:
        return int(self.root_url.rsplit(":", 1)[1])

    @property
    def api_key(self) -> str:
        """This run's key: send it as ``Authorization: Bearer <key>`` (a new one on every start)."""
        if self._api_key is None or self._root_url is None:
            raise ModelServerError("the local model server is not running, so it has no key yet: call start() first.")
        return self._api_key

    def auth_headers(self) -> dict[str, str]:
        """The header every request to this server needs."""
        return {"Authorization": f"Bearer {self.api_key}"}

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # ------------------------------------------------------------------ lifecycle

    def _template_text(self) -> str | None:
        if self.template is not None:
            name: str | None = self.template
        else:  # an arbitrary .gguf keeps its own template unless told otherwise
            name = MODELS[self.model].template if self.model in MODELS else None
        if name is None or name == "model":
            return None
        path = TEMPLATES / name if (TEMPLATES / name).is_file() else Path(name).expanduser()
        try:
            return path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ModelServerError(
                f"cannot read chat template {name!r} ({exc}): name a file in {TEMPLATES} or an existing path."
            ) from exc

    def config(self) -> ServerConfig:
        return ServerConfig(
            model_path=str(resolve_model(self.model, self.cache_dir)),
            port=self.port_requested,
            n_ctx=self.n_ctx,
            n_parallel=self.n_parallel,
            threads=self.threads,
            chat_template=self._template_text(),
            cache_prompt=self.cache_prompt,
        )

    def start(self) -> LocalModelServer:
        """Start the child and wait until ``/health`` answers 200. Idempotent while running."""
        if self.running():
            return self
        require_extra("local", f"the bundled local model ({self.model})")
        config = self.config()
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="vak-llama-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        ready_r, ready_w = os.pipe()
        key = secrets.token_urlsafe(32)
        env = dict(os.environ)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "vak_context.providers.local.server_child", "--child", json.dumps(asdict(config)),
                 "--ready-fd", str(ready_w), "--parent-pid", str(os.getpid())],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(ready_w,), env=env, close_fds=True,
            )
        os.close(ready_w)
        try:  # the key travels on the pipe only: argv and the environment are readable in /proc
            if self._proc.stdin is not None:
                self._proc.stdin.write(key.encode() + b"\n")
                self._proc.stdin.flush()
        except OSError:
            pass  # the child is already gone; its READY line will not come and the error says why
        try:
            message = self._read_ready(ready_r)
        finally:
            os.close(ready_r)
        if not message.startswith("READY "):
            # The child exits right after its ERROR line; let it, so llama.cpp's log thread flushes
            # the reason (e.g. "couldn't bind") into the log before we read the tail.
            if self._proc is not None:
                try:
                    self._proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
            self._kill()
            tail = self.log_tail()
            if "couldn't bind" in tail:
                step = f"port {self.port_requested} is taken: pass port=0 (any free port) or free that port."
            else:
                step = "check the model file, n_ctx and the log above."
            raise ModelServerError(
                f"the local model server did not start: {message.strip() or 'it exited'}. "
                f"Last log lines:\n{tail}\nNext step: {step}"
            )
        self._root_url = message.split(" ", 1)[1].strip().rstrip("/")
        self._api_key = key
        self._wait_healthy()
        return self

    def _read_ready(self, fd: int) -> str:
        deadline = time.monotonic() + self.startup_timeout
        chunks: list[bytes] = []
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:  # the child closed the pipe: it wrote its line or died
                    break
                chunks.append(chunk)
                if b"\n" in chunk:
                    break
        else:
            self._kill()
            raise ModelServerError(
                f"the local model server did not come up within {self.startup_timeout:.0f} s. "
                f"Last log lines:\n{self.log_tail()}\nRaise startup_timeout, or lower n_ctx."
            )
        return b"".join(chunks).decode("utf-8", "replace")

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last = "no answer"
        with httpx.Client(timeout=5.0, trust_env=False) as client:
            while time.monotonic() < deadline:
                if not self.running():
                    break
                try:
                    r = client.get(self.root_url + "/health")
                    if r.status_code == 200:
                        return
                    last = f"HTTP {r.status_code}: {r.text[:200]}"
                except httpx.HTTPError as exc:
                    last = repr(exc)
                time.sleep(0.1)
        self._kill()
        raise ModelServerError(
            f"the local model server at {self._root_url} never reported healthy ({last}). "
            f"Last log lines:\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the child and wait for it (SIGKILL after ``timeout``). Returns its exit code."""
        proc, self._proc, self._root_url, self._api_key = self._proc, None, None, None
        if proc is None:
            return None
        code: int | None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
        else:
            code = proc.returncode
        if proc.stdin:
            proc.stdin.close()
        if self._own_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
            self.log_path = None
        return code

    def _kill(self) -> None:
        proc = self._proc
        self._proc, self._root_url, self._api_key = None, None, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc is not None and proc.stdin:
            proc.stdin.close()

    def log_tail(self, lines: int = 15) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self._root_url or "stopped"
        return f"LocalModelServer({self.model!r}, n_ctx={self.n_ctx}, {where})"
