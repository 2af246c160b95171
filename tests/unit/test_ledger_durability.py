"""Durability on power loss: every change to a folder's entries is followed by an fsync of that folder.

A file's fsync makes its data durable, not its name: the name lives in the parent folder, so a
created session folder, a sealed segment renamed into place and a removed tail each need their
folder synced before the call that made them returns. Recorded by wrapping the os functions the
store calls; each mkdir, rename and unlink must be followed by an fsync of its parent folder
before the public call that made it returns.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vak_context.events.payloads import Nudge
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.segment.files import list_segments

Event = tuple[str, str]  # (what, path): "mkdir" / "rename" / "unlink" / "fsync" / "call"


@pytest.fixture()
def events(monkeypatch: pytest.MonkeyPatch) -> list[Event]:
    log: list[Event] = []
    real_fsync, real_mkdir, real_rename, real_unlink = os.fsync, os.mkdir, os.rename, os.unlink

    def fsync(fd: int) -> None:
        log.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        real_mkdir(path, *args, **kwargs)
        log.append(("mkdir", os.path.realpath(path)))

    def rename(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        real_rename(src, dst, *args, **kwargs)
        log.append(("rename", os.path.realpath(dst)))

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        real = os.path.realpath(path)
        real_unlink(path, *args, **kwargs)
        log.append(("unlink", real))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "unlink", unlink)
    return log


def _call(log: list[Event], name: str, fn: Callable[[], Any]) -> Any:
    out = fn()
    log.append(("call", name))
    return out


def _unsynced(log: list[Event], root: Path) -> list[str]:
    """Folder changes under ``root`` not followed by an fsync of their folder before their call returned."""
    problems = []
    for i, (what, path) in enumerate(log):
        if what not in ("mkdir", "rename", "unlink") or not path.startswith(str(root.resolve())):
            continue
        folder = os.path.dirname(path)
        rest = log[i + 1:]
        until = next((j for j, (w, _) in enumerate(rest) if w == "call"), len(rest))
        if ("fsync", folder) not in rest[:until]:
            problems.append(f"{what} {path} (then {[e for e in rest[:until]]})")
    return problems


def test_new_ledger_session_seal_and_tail_removal_sync_their_folders(tmp_path: Path, events: list[Event]) -> None:
    """Creating the ledger and a session folder, sealing (rename) and removing the tail each fsync the folder."""
    root = tmp_path / "new" / "ledger"
    store = _call(events, "open", lambda: LedgerStore(root))
    _call(events, "append", lambda: store.append_one("s", Nudge(tag="t", text="one")))
    _call(events, "checkpoint", store.checkpoint)
    _call(events, "close", store.close)
    kinds = [(w, os.path.relpath(p, tmp_path)) for w, p in events if w != "fsync" and w != "call"]
    # the ledger's folders, the session folder, the sealed segment, the removed tail: all happened
    assert ("mkdir", "new") in kinds and ("mkdir", "new/ledger/sessions") in kinds
    assert ("mkdir", "new/ledger/sessions/s") in kinds
    assert ("rename", "new/ledger/sessions/s/seg-000001.arrow") in kinds
    assert ("unlink", "new/ledger/sessions/s/_seg-000001.arrow") in kinds
    # the manifest: its temporary file synced, renamed over, after the sealed segment and before the tail goes
    session = str((root / "sessions" / "s").resolve())
    manifest = events.index(("rename", session + "/_manifest.json"))
    assert ("fsync", session + "/_tmp-manifest.json") in events[:manifest]
    assert events.index(("rename", session + "/seg-000001.arrow")) < manifest
    assert manifest < events.index(("unlink", session + "/_seg-000001.arrow"))
    assert _unsynced(events, tmp_path) == []
    # and in order: the session folder is synced into sessions/ before the segment's fsyncs
    sessions = str((root / "sessions").resolve())
    mk = events.index(("mkdir", sessions + "/s"))
    first_seg_sync = next(i for i, (w, p) in enumerate(events) if w == "fsync" and "_seg-" in p)
    assert ("fsync", sessions) in events[mk:first_seg_sync]


def test_recovery_syncs_the_folder_after_removing_tails(tmp_path: Path, events: list[Event]) -> None:
    """Opening after a crash seals the left-open tail (rename) and removes it and a stale tail, each synced."""
    live = LedgerStore(tmp_path / "live")
    live.append_one("s", Nudge(tag="t", text="before the crash"))
    shutil.copytree(tmp_path / "live", tmp_path / "crashed")  # the writer still has its tail open
    live.checkpoint()
    live.append_one("s", Nudge(tag="t", text="in the second tail"))
    session = tmp_path / "crashed" / "sessions" / "s"
    (tail,) = [p for _, p, sealed in list_segments(session) if not sealed]
    shutil.copy(tmp_path / "live" / "sessions" / "s" / "seg-000001.arrow", session / "seg-000001.arrow")
    # now the crashed copy has seg-000001 and its stale tail _seg-000001 (a seal interrupted before the
    # removal); add a second, open tail
    shutil.copy(next((tmp_path / "live" / "sessions" / "s").glob("_seg-*.arrow")), session / "_seg-000002.arrow")
    live.close()
    events.clear()
    with LedgerStore(tmp_path / "crashed") as store:
        _call(events, "open", lambda: store.count("s"))
        assert [e.kind for e in store.entries("s")] == ["nudge", "nudge"]
    unlinked = [os.path.basename(p) for w, p in events if w == "unlink"]
    assert tail.name in unlinked and "_seg-000002.arrow" in unlinked
    assert _unsynced(events, tmp_path) == []
