"""ProbeActor: runs capacity probes in the background, never on a turn's critical path (spec §1).

A plain class (wrapped by ``ray.remote`` only in ``vak_context.actors.factory.probe_actor``); its methods are
coroutines, so on Ray it is an async actor and a probe is a task on its event loop.

* ``turn_finished(target)`` is the only way a probe starts, and it returns at once: ``"started"``,
  ``"in_flight"`` (single-flight per key), ``"fresh"`` (TTL 24 h local / 7 d hosted, same metadata
  digest, no re-probe asked) or ``"ineligible"`` (a hosted model without ``[probe] hosted = "full"``).
* ``turn_started(key)`` cancels an in-flight probe for that key: a real turn never competes with a
  probe for the model's compute. ``turn_finished_quiet(target)`` says, with its decision, until when the
  key's profile stays fresh (no probe can start before then): the turn services skip the next turn's
  ``turn_starting`` call within it.
* ``wait_running(key)`` returns once the key's probe has reached the model (its first progress
  report: the model's metadata was read) or has ended: what a caller that wants to cancel a probe
  mid-flight, or to watch it, waits on instead of a clock.
* Every probe writes to the ledger: the ``capacity.probe`` activity (rungs, samples, verdicts) and
  the ``capacity_profile`` record; a cancelled or failed probe writes an activity saying so.
  The ledger is a ``LedgerStore`` in-process, or the ``LedgerActor`` handle on Ray (the factory
  passes it), reached through ``vak_context.actors.ledger.client.LedgerClient`` either way.

Provider keys never travel through here: the adapter is built inside the actor by
``vak_context.providers.registry.make_provider``, which reads them from the environment.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import httpx

from vak_context.actors.ledger.client import LedgerClient
from vak_context.agent.endpoint import EndpointSpec
from vak_context.agent.probe import ProbeRunner, ProbeSettings
from vak_context.config import VakConfig, load_config
from vak_context.context.capacity.profile import (
    CapacityProfile,
    ProfileKey,
    from_record,
    probe_reason,
    to_record,
    ttl_s,
)
from vak_context.errors import VakError
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import Activity, CapacityProfileRecord
from vak_context.storage.ledger import LedgerStore

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
DEFAULT_SESSION = "capacity"


@dataclass(frozen=True)
class ProbeRequest:
    """What a finished turn asks the ProbeActor to probe when a probe is due (``turn_finished``): the bound
    model's ``provider:model`` spec as ``vak_context.providers.registry`` reads it, where it is, and how to probe.

    ``local`` None means: local when ``base_url`` is a loopback address. ``metadata_digest`` is the
    digest the caller bound with (``vak_context.context.capacity.profile.metadata_digest``); a different one in the
    cached profile makes it stale.
    """

    spec: str
    base_url: str | None = None
    quantisation: str = ""
    local: bool | None = None
    metadata_digest: str | None = None
    settings: ProbeSettings | None = None
    options: dict[str, Any] = field(default_factory=dict)
    # The key the session binds under, where it is not the spec's (a bundled model: ``local:<name>``
    # served as ``openai-compat:<name>``), so the profile the probe writes is the one the next turn binds.
    profile_key: ProfileKey | None = None

    @property
    def key(self) -> ProfileKey:
        if self.profile_key is not None:
            return self.profile_key
        provider, _, model = self.spec.partition(":")
        return ProfileKey(provider, model, self.quantisation)

    @property
    def is_local(self) -> bool:
        if self.local is not None:
            return self.local
        return bool(self.base_url) and (urlparse(self.base_url).hostname or "") in LOOPBACK_HOSTS


class ProbeActor:
    """When to probe, off the turn's path: runs a ``ProbeRunner`` in the background and records its outcome.

    ``ledger``: the LedgerActor handle of the folder probes are written to, or a LedgerStore this
    process holds as its writer. ``config`` None loads the operator's file."""

    def __init__(
        self,
        ledger: LedgerStore | Any,
        *,
        session: str = DEFAULT_SESSION,
        config: VakConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # Appends go out one at a time from this actor's event loop: nothing to coalesce.
        self.ledger = LedgerClient("the probe's ledger", ledger, coalesce=False)
        self.session = session
        self.config = config if config is not None else load_config()
        self.clock = clock
        self.cache: dict[ProfileKey, CapacityProfile] = {}
        self._tasks: dict[ProfileKey, asyncio.Task[None]] = {}
        self._states: dict[ProfileKey, str] = {}
        self._errors: dict[ProfileKey, str] = {}
        # Per key, the current probe's last progress stage, and an event set at its first report or
        # when it ends (whichever comes first): wait_running() waits on it.
        self._stages: dict[ProfileKey, str] = {}
        self._reached: dict[ProfileKey, asyncio.Event] = {}
        self._loaded: set[ProfileKey] = set()
        self.started = 0

    # ------------------------------------------------------------------ the ledger

    async def _append(self, payloads: list[Activity | CapacityProfileRecord]) -> list[str]:
        return await self.ledger.append_async(self.session, payloads)

    async def _recorded(self, key: ProfileKey) -> CapacityProfile | None:
        """The newest capacity_profile recorded for ``key`` in any session of the ledger (read once per key):
        a probe recorded elsewhere (``vak run`` records its quick probe in its own session, ``vak probe``
        in the one it is given) counts as fresh as one of this actor's own. Read from the ledger's index
        (storage/ledger_index.py), the entry binding reads too, not from every entry of every session."""
        entry = await self.ledger.profile_entry_async(key.provider, key.model, key.quantisation)
        payload = Mapper().payload_of(entry) if entry is not None else None
        return from_record(payload) if isinstance(payload, CapacityProfileRecord) else None

    # ------------------------------------------------------------------ the turn loop's calls

    async def turn_finished(self, target: ProbeRequest) -> str:
        """Maybe start a background probe for ``target``. Returns at once with what it decided."""
        return await self._finished(target)

    async def turn_finished_quiet(self, target: ProbeRequest) -> tuple[str, CapacityProfileRecord | None, float | None]:
        """``turn_finished``, and where it found the key's profile fresh (``"fresh"``: no probe in flight, none
        started) the profile as ``profile`` gives it and until when (this actor's clock) it stays fresh: till
        then no finished turn starts a probe of the key (one asking with another metadata digest aside), so
        ``turn_starting`` would cancel nothing and hand back this record and ``turn_finished`` would start
        nothing: the turn services on Ray make neither call till then (``RayServices.turn_started``,
        ``turn_finished``). Else (decision, None, None)."""
        decision = await self._finished(target)
        cached = self.cache.get(target.key)
        if decision != "fresh" or cached is None or cached.provenance.probed_at is None:
            return decision, None, None
        return decision, to_record(cached), cached.provenance.probed_at + ttl_s(target.is_local)

    async def _finished(self, target: ProbeRequest) -> str:
        key = target.key
        if not target.is_local and self.config.probe.hosted != "full":
            return "ineligible"
        task = self._tasks.get(key)
        if task is not None and not task.done():
            return "in_flight"
        if key not in self.cache and key not in self._loaded:
            self._loaded.add(key)
            recorded = await self._recorded(key)
            if recorded is not None:
                self.cache[key] = recorded
            task = self._tasks.get(key)  # another call may have started one while we read
            if task is not None and not task.done():
                return "in_flight"
        reason = probe_reason(self.cache.get(key), now=self.clock(), local=target.is_local,
                              digest=target.metadata_digest)
        if reason is None:
            return "fresh"
        self._states[key] = "running"
        self._errors.pop(key, None)
        self._stages.pop(key, None)
        reached = self._reached[key] = asyncio.Event()
        self.started += 1
        task = self._tasks[key] = asyncio.create_task(self._probe(target, reason))
        # A probe cancelled before its first report (or failing) must still wake its waiters.
        task.add_done_callback(lambda _t: reached.set())
        return "started"

    async def turn_started(self, key: ProfileKey) -> bool:
        """A real turn is about to use ``key``: cancel its in-flight probe. True if one was cancelled."""
        task = self._tasks.get(key)
        if task is None or task.done():
            return False
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return True

    async def turn_starting(self, key: ProfileKey) -> CapacityProfileRecord | None:
        """``turn_started`` then ``profile`` in one call (one actor round trip a turn on Ray): cancel the
        key's in-flight probe, and return the newest profile held for it, as its record."""
        await self.turn_started(key)
        return await self.profile(key)

    async def wait(self, key: ProfileKey, timeout: float | None = None) -> str:
        """Wait for the probe of ``key`` to end; returns its state (for tests and the CLI)."""
        task = self._tasks.get(key)
        if task is not None:
            await asyncio.wait({task}, timeout=timeout)
        return self._states.get(key, "idle")

    async def wait_running(self, key: ProfileKey, timeout: float | None = None) -> dict[str, Any]:
        """Wait (at most ``timeout`` s) until the probe of ``key`` has reported progress (the model's
        metadata read, so it is talking to the model and a cancel from now on is noted in the ledger)
        or has ended; returns ``state(key)``. ``stage`` None with ``in_flight`` true: the timeout ran out."""
        reached = self._reached.get(key)
        if reached is not None:
            try:
                await asyncio.wait_for(reached.wait(), timeout)
            except TimeoutError:
                pass  # the caller reads the state: still in flight, no stage
        return await self.state(key)

    async def state(self, key: ProfileKey) -> dict[str, Any]:
        task = self._tasks.get(key)
        return {
            "state": self._states.get(key, "idle"),
            "in_flight": task is not None and not task.done(),
            "stage": self._stages.get(key),
            "error": self._errors.get(key),
            "started": self.started,
        }

    async def profile(self, key: ProfileKey) -> CapacityProfileRecord | None:
        """The process cache's profile for ``key`` as its ledger record (what bind-time reads, and what the
        turn services hand the next turn at its start: ``turn_started``)."""
        cached = self.cache.get(key)
        return to_record(cached) if cached is not None else None

    # ------------------------------------------------------------------ the probe itself

    async def _probe(self, target: ProbeRequest, reason: str) -> None:
        from vak_context.providers.registry import make_provider  # heavy; only probing needs it

        key = target.key
        try:
            async with httpx.AsyncClient(trust_env=False) as client:
                kwargs: dict[str, Any] = dict(target.options)
                if target.base_url:
                    kwargs["base_url"] = target.base_url
                provider, _model = make_provider(target.spec, client, **kwargs)
                runner = ProbeRunner(provider, key, settings=target.settings, clock=self.clock,
                                     on_progress=lambda event: self._progressed(key, event))
                report = await runner.run()
            await self._append(report.ledger_payloads())
            self.cache[key] = report.profile
            self._states[key] = "done"
        except asyncio.CancelledError:
            self._states[key] = "cancelled"
            await asyncio.shield(self._note(key, "cancelled", "a real turn started on this key", reason))
            raise
        except VakError as exc:
            self._states[key] = "failed"
            self._errors[key] = str(exc)
            await self._note(key, "failed", str(exc), reason)

    def _progressed(self, key: ProfileKey, event: dict[str, Any]) -> None:
        self._stages[key] = str(event.get("stage"))
        reached = self._reached.get(key)
        if reached is not None:
            reached.set()

    async def _note(self, key: ProfileKey, outcome: str, why: str, reason: str) -> None:
        detail = {
            "key": {"provider": key.provider, "model": key.model, "quantisation": key.quantisation},
            "outcome": outcome, "why": why, "reason": reason, "at": self.clock(),
        }
        await self._append([Activity(activity="capacity.probe", detail=detail)])


def probe_request_for(endpoint: EndpointSpec, key: ProfileKey, *, local: bool | None = None,
                     settings: ProbeSettings | None = None, metadata_digest: str | None = None) -> ProbeRequest:
    """What the ProbeActor probes for a session bound to ``endpoint`` under the profile ``key``: the same
    spec and base URL (the probe's adapter is built inside the actor, its key read from the environment
    there), recorded under the session's key. ``local`` None: local when the base URL is loopback; a hosted
    model is probed only where the operator's config says ``[probe] hosted = "full"``."""
    options = {"api_key": endpoint.api_key} if endpoint.api_key else {}  # a loopback server's own key only
    return ProbeRequest(spec=endpoint.spec, base_url=endpoint.base_url, quantisation=key.quantisation, local=local,
                       metadata_digest=metadata_digest, settings=settings, options=options, profile_key=key)
