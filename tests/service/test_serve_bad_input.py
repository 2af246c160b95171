"""Bad input to a real ``vak serve`` child process (issue 35 item 3): every kind in tests/fakes/bad_inputs.py
gets its 4xx in the client's protocol, naming the field, and the server keeps serving; a body over the
size limit is refused while it streams (before it ends); a connection that sends nothing, half a head or
half a body is closed within the idle timeout (synchronised on the socket closing); a refused body starts
no session; and the key file a SIGKILL leaves behind is removed by the next start."""

from __future__ import annotations

import json
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fakes.bad_inputs import (
    ANTHROPIC,
    OPENAI,
    BadInput,
    bad_inputs,
    chunks,
    good_anthropic,
    good_openai,
)
from tests.fakes.httpserver import serve
from tests.fakes.wire_models import FORMATS, WireModel
from vak_context.serve.child import ServeChild, serve_child
from vak_context.storage.ledger import LedgerStore

MAX_BODY = 256 * 1024
IDLE_S = 2.0
WAIT_S = 120.0  # a loaded machine: generous, and only ever waited out on a failure
CASES = bad_inputs(MAX_BODY)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeChild, Path]]:
    ledger = tmp_path_factory.mktemp("bad-input") / "ledger"
    with serve(WireModel(FORMATS["openai"]).handle) as upstream, serve_child(
            "openai-compat:scripted", ledger=ledger, base_url=upstream.base_url, window=9500,
            extra=["--max-body", str(MAX_BODY), "--idle-timeout", str(IDLE_S)]) as child:
        yield child, ledger


def send(child: ServeChild, case: BadInput) -> httpx.Response:
    headers = {k.encode(): v.encode() for k, v in case.header_list(child.key).items()}
    content = chunks(case.body) if case.chunked else case.body
    with httpx.Client(timeout=WAIT_S, trust_env=False) as client:
        if case.method == "GET":
            return client.get(child.root + case.path, headers=headers)
        return client.post(child.root + case.path, content=content, headers=headers)


def test_the_table_covers_both_protocols() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)) >= 36
    assert sum(c.path == OPENAI for c in CASES) >= 18 and sum(c.path == ANTHROPIC for c in CASES) >= 18


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_input_is_a_4xx_and_the_server_serves_on(server: tuple[ServeChild, Path], case: BadInput) -> None:
    child, _ledger = server
    response = send(child, case)
    assert response.status_code == case.status, response.text
    if case.path in (OPENAI, ANTHROPIC) and case.status not in (404, 405):
        body = response.json()
        error = body["error"]
        assert isinstance(error["message"], str) and case.names in error["message"], body
        assert "Traceback" not in response.text
        if case.path == ANTHROPIC:
            assert body["type"] == "error"
    # still serving: the process lives and answers a keyed request
    assert child.process.poll() is None, "".join(child.output)
    models = httpx.get(f"{child.base_url}/models", headers={"authorization": f"Bearer {child.key}"}, timeout=WAIT_S)
    assert models.status_code == 200


def test_good_requests_after_the_bad_ones_and_no_session_from_them(server: tuple[ServeChild, Path]) -> None:
    child, ledger = server
    for case in CASES:  # every refusal once more, in one go, before the good ones
        assert send(child, case).status_code == case.status, case.name
    ask = [{"role": "user", "content": "please search query-001"}]
    schema = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    with httpx.Client(timeout=WAIT_S, trust_env=False) as client:
        openai = client.post(f"{child.base_url}/chat/completions", json=good_openai(messages=ask, tools=[
            {"type": "function", "function": {"name": "web_search", "description": "Search.", "parameters": schema}}]),
                             headers={"authorization": f"Bearer {child.key}", "x-vak-session": "good-openai"})
        anthropic = client.post(f"{child.root}/v1/messages", json=good_anthropic(messages=ask, tools=[
            {"name": "web_search", "description": "Search.", "input_schema": schema}]),
                                headers={"x-api-key": child.key, "anthropic-version": "2023-06-01",
                                         "x-vak-session": "good-anthropic"})
        health = client.get(f"{child.root}/health")  # the one route without a key
    assert openai.status_code == 200, openai.text
    assert openai.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "web_search"
    assert anthropic.status_code == 200, anthropic.text
    assert anthropic.json()["content"][-1]["name"] == "web_search"
    assert health.status_code == 200
    # A refused body starts no session: the ledger holds the two good ones and no folder besides.
    folders = sorted(p.name for p in (ledger / "sessions").iterdir())
    assert folders == ["good-anthropic", "good-openai"], folders
    with LedgerStore(ledger, readonly=True) as store:
        assert sorted(store.sessions()) == ["good-anthropic", "good-openai"]


def _connect(child: ServeChild) -> socket.socket:
    host, port = child.root.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
    return sock


def _until_closed(sock: socket.socket) -> bytes:
    """Everything the server writes until it closes the connection (a blocking read: the event is the close)."""
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


def _response(sock: socket.socket) -> bytes:
    """One response, head and body (read to its Content-Length)."""
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(65536)
        assert chunk, got
        got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, got
        body += chunk
    return head + b"\r\n\r\n" + body


def _head(child: ServeChild, extra: str) -> bytes:
    return (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {child.key}\r\n"
            f"content-type: application/json\r\n{extra}\r\n").encode()


def test_a_body_over_the_limit_is_refused_before_it_ends(server: tuple[ServeChild, Path]) -> None:
    """Declared too large: 413 with no byte of the body sent. Sent in chunks without a length: 413 once the
    bytes read pass the limit, while the client has not ended the body (it never does here)."""
    child, _ledger = server
    with _connect(child) as sock:
        sock.sendall(_head(child, f"content-length: {50 * 1024 * 1024}\r\n"))
        reply = _response(sock)  # answered with nothing of the body sent
        assert reply.startswith(b"HTTP/1.1 413"), reply
    with _connect(child) as sock:
        sock.sendall(_head(child, "transfer-encoding: chunked\r\n"))
        part = b'{"messages": [{"role": "user", "content": "' + b"x" * 32_000
        sent = 0
        while sent <= MAX_BODY:  # just past the limit, then nothing more and no last chunk
            sock.sendall(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            sent += len(part)
        reply = _response(sock)
        assert reply.startswith(b"HTTP/1.1 413"), reply
        assert b"limit" in reply


@pytest.mark.parametrize("what", ["nothing", "half a head", "half a body"])
def test_an_idle_or_half_sent_connection_is_closed(server: tuple[ServeChild, Path], what: str) -> None:
    child, _ledger = server
    with _connect(child) as sock:
        if what == "half a head":
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        elif what == "half a body":
            sock.sendall(_head(child, "content-length: 1000\r\n") + b'{"messages": [')
        got = _until_closed(sock)  # returns when the server closes it: IDLE_S, or WAIT_S on a failure
    if what == "half a body":
        assert got.startswith(b"HTTP/1.1 408"), got
        assert b"stopped arriving" in got
    else:
        assert got == b""
    assert child.process.poll() is None


def test_a_key_file_left_by_a_sigkill_is_removed_by_the_next_start(tmp_path: Path) -> None:
    """SIGKILL runs no handler: the run's key folder stays (0700, a dead key: it opened only the server that
    died). The next ``vak serve`` on the machine removes it before it writes its own."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {"TMPDIR": str(temp)}
    upstream = ("openai-compat:nobody", "http://127.0.0.1:9/v1")  # never dialled
    with serve_child(upstream[0], ledger=tmp_path / "ledger", base_url=upstream[1], env=env) as first:
        left = [p for p in temp.iterdir()]
        assert len(left) == 1 and left[0].name.startswith(f"vak-serve-{first.process.pid}-")
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(WAIT_S)
    assert (left[0] / "api_key").read_text().strip() == first.key  # what a SIGKILL leaves
    assert oct(left[0].stat().st_mode & 0o777) == "0o700"
    with serve_child(upstream[0], ledger=tmp_path / "ledger", base_url=upstream[1], env=env) as second:
        now = [p for p in temp.iterdir()]
        assert not left[0].exists()  # cleaned at the next start
        assert len(now) == 1 and now[0].name.startswith(f"vak-serve-{second.process.pid}-")
        refused = httpx.get(f"{second.base_url}/models", headers={"authorization": f"Bearer {first.key}"})
        assert refused.status_code == 401  # the old key opens nothing
    assert list(temp.iterdir()) == []  # a clean stop takes its own


def test_error_bodies_name_the_field(server: tuple[ServeChild, Path]) -> None:
    """The issue's own example, word for word."""
    child, _ledger = server
    body = good_openai(messages=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                 {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]}])
    response = httpx.post(f"{child.base_url}/chat/completions", content=json.dumps(body),
                          headers={"authorization": f"Bearer {child.key}", "content-type": "application/json"},
                          timeout=WAIT_S)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "messages[2].tool_calls[0].function: required"
    assert response.json()["error"]["type"] == "invalid_request_error"

