"""Write-behind appends: a session's appends written to its tail at once and made durable later, together.

``WriteBehind`` is a part of ``LedgerStore`` (through ``GroupCommit``, whose commits honour a hold: a group
whose appends were all made while the session was held is written without an fsync). A writer that
acknowledges nothing until a known point holds the session (the engine's loop, for a turn: one sync per
model call, docs/LEDGER_FORMAT.md, "Written behind").
"""

from __future__ import annotations

import time

from vak_context.errors import LedgerError
from vak_context.storage.session_state import SessionState


class WriteBehind:
    """``hold``, ``release``, ``sync`` and ``written_behind`` of ``LedgerStore``."""

    _sessions: dict[str, SessionState]  # LedgerStore's open sessions

    def _session(self, name: str, *, create: bool = False) -> SessionState:
        raise NotImplementedError  # LedgerStore opens sessions

    def _check_writable(self) -> None:
        raise NotImplementedError  # GroupCommit's

    def _synced(self, seconds: float) -> None:
        raise NotImplementedError  # GroupCommit tallies it as a durable commit

    def hold(self, session: str) -> None:
        """Write the session's appends behind from now on: each is written to the tail, readable and given
        its id at once, but not synced; ``sync`` (or ``release``) makes everything written so far durable in
        one fsync. For a writer that acknowledges nothing until a known point (a turn: its card, once per
        model call), so that a step's appends share one durable commit. A process that dies loses nothing
        written (the page cache keeps it); a power cut may lose what no sync covered yet, which recovery
        truncates like a torn tail. Holds nest (a count); appends outside any hold are durable as ever."""
        self._check_writable()
        s = self._session(session, create=True)
        with s.cond:
            s.hold += 1

    def hold_open(self, session: str) -> bool:
        """``hold`` where the session is open in this store already (True): nothing is read from disk and no
        lock is held across an fsync, so an event loop may call it; False (nothing held) where ``hold`` would
        open the session."""
        if self._sessions.get(session) is None:  # the hot path of ``_session``: a dict read needs no lock
            return False
        self.hold(session)
        return True

    def release(self, session: str, *, sync: bool = True) -> None:
        """End one ``hold``; with ``sync``, what was written behind is made durable first (``sync=False``
        leaves it to the next commit of the session, or the store's close)."""
        s = self._session(session)
        if sync:
            self.sync(session)
        with s.cond:
            s.hold = max(0, s.hold - 1)

    def written_behind(self, session: str) -> bool:
        """Whether the session has appends written behind a hold that no sync covers yet."""
        s = self._session(session)
        with s.cond:
            return s.unsynced

    def sync(self, session: str) -> bool:
        """Make every append written to the session so far durable: one fsync when some were written behind a
        hold and none since was synced, else nothing. True when it synced."""
        s = self._session(session)
        with s.cond:
            while s.flushing:  # a commit being written: sync after it (its fsync may cover everything)
                s.cond.wait()
            if not s.unsynced or s.writer is None or s.broken is not None:
                return False
            s.flushing = True
            writer = s.writer
        error: BaseException | None = None
        t0 = time.perf_counter()
        try:
            writer.sync()
        except BaseException as exc:
            error = exc
        seconds = time.perf_counter() - t0
        with s.cond:
            s.flushing = False
            if error is None:
                s.unsynced = False
                s.commits += 1
                self._synced(seconds)
            else:  # what is on disk is unknown: the session is poisoned as a failed commit does
                s.broken = error
            s.cond.notify_all()
        if error is not None:
            raise LedgerError(f"the appends written to {session!r} were not made durable: {error}; reopen the "
                              "ledger and check the disk") from error
        return True
