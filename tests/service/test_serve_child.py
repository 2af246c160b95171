"""``serve_child``: ``vak serve`` as a child process, as benches start it: it answers with this run's key on
loopback, stops cleanly when the block ends, and dies with the process that started it (a killed bench leaves
no server behind)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from vak_context.serve.child import serve_child

UPSTREAM = ("openai-compat:nobody", "http://127.0.0.1:9/v1")  # never dialled: no request reaches a turn


def test_it_answers_with_its_key_and_stops_cleanly(tmp_path: Path) -> None:
    with serve_child(UPSTREAM[0], ledger=tmp_path / "ledger", base_url=UPSTREAM[1]) as child:
        assert child.base_url.startswith("http://127.0.0.1:") and child.base_url.endswith("/v1")
        models = httpx.get(f"{child.base_url}/models", headers={"Authorization": f"Bearer {child.key}"})
        refused = httpx.post(f"{child.base_url}/chat/completions", json={"messages": []},
                             headers={"Authorization": "Bearer wrong"})
        process = child.process
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "nobody"
    assert refused.status_code == 401
    assert process.returncode == 0  # SIGTERM is vak serve's clean exit


def test_it_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from vak_context.serve.child import serve_child\n"
        f"with serve_child({UPSTREAM[0]!r}, ledger=sys.argv[1], base_url={UPSTREAM[1]!r}) as child:\n"
        "    print(child.process.pid, flush=True)\n"
        "    sys.stdin.read()\n"  # until the test kills this process
    )
    parent = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "ledger")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    watch = os.pidfd_open(pid)  # readable once the server has exited: an event, not a poll
    try:
        parent.send_signal(signal.SIGKILL)  # no finally block runs in the parent
        parent.wait(30)
        ready, _, _ = select.select([watch], [], [], 60)
        assert ready == [watch], "vak serve outlived the process that started it"
    finally:
        os.close(watch)
        if parent.stdin:
            parent.stdin.close()
        if parent.stdout:
            parent.stdout.close()
