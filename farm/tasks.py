"""The farm as Ray work: one Ray task per unit, one model-server actor per (node, model), one ledger writer per session.

* ``run_unit`` is a Ray task. Units that talk to a local model ask for a little of the model's custom
  resource (``vak_model_node`` unless the spec names another), so they land only on nodes that serve
  models; it is a system-failure retry (``max_retries``): a unit that dies with its node runs again elsewhere.
* ``ModelServerActor``: llama.cpp's server for one model on one node, started on the first call of
  ``endpoint()`` and reused by every unit on that node that needs the model. It is pinned to its node
  (hard node affinity) and named ``farmmodel-<run>-<model>-<node>``, so any task on the node gets the
  same one with ``get_if_exists``. A model that cannot start keeps its error and answers every call
  with it: its units fail with that reason, and the rest of the farm goes on.
* Every ledger has one writer. A session's ledger (``<run>/ledgers/<session>``) is written once, by the
  driver, before any unit runs, and only read after. A replay writes what it replays (the session's
  entries again, with this model's plans, packets and resets) into a ledger of its own,
  ``<run>/replays/<session>.<model>.<k>``, whose one writer is the unit itself, in its own process:
  nothing else reads it while the unit runs, and a retried unit starts a fresh one (the next ``k``).
  Through a LedgerActor every append was an actor call, and a replay makes about three per request
  (docs/FARM.md "Benchmark").
* ``vak_context.farm.progress.FarmProgressActor`` hears each unit start (and on which node), for the driver's
  progress line.
* A replay unit reads its session's chain through ``session_chain``, which keeps the last few chains read in
  this worker process: a session is replayed under every model, and the chain is the same each time.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from vak_context.actors.factory import NAMESPACE, remote_class, remote_function
from vak_context.errors import ModelServerError, VakError
from vak_context.events.envelope import StoredEntry
from vak_context.farm.model_units import Endpoint, endpoint_of, live_unit, probe_unit
from vak_context.farm.rows import UnitKey, failed_unit_table, rows_table
from vak_context.farm.spec import (
    BfclDegradeTask,
    BfclHistoryTask,
    BfclTask,
    LiveTask,
    ModelEntry,
    ProbeTask,
    ReplayTask,
    Task,
)
from vak_context.farm.unit_profile import unit_profile

MODEL_ACTOR_PREFIX = "farmmodel-"
UNIT_RESOURCE_SHARE = 0.01  # a unit asks this much of a model node's resource: a placement marker, not a limit


def model_actor_name(run_id: str, model: str, node_id: str) -> str:
    return f"{MODEL_ACTOR_PREFIX}{run_id}-{model}-{node_id[:12]}"


class ModelServerActor:
    """One local model's llama.cpp server on this node (see the module docstring)."""

    def __init__(self, model: ModelEntry) -> None:
        self.entry = model
        self.server: Any = None
        self.error: ModelServerError | None = None
        self.started_at: float | None = None

    def endpoint(self) -> Endpoint:
        if self.error is not None:
            raise self.error
        if self.server is None or not self.server.running():
            from vak_context.providers.local.catalogue import canonical_model
            from vak_context.providers.local.server import LocalModelServer

            try:
                self.server = LocalModelServer(self.entry.model, n_ctx=self.entry.n_ctx,
                                               n_parallel=self.entry.n_parallel, threads=self.entry.threads).start()
            except ModelServerError as exc:
                self.error = ModelServerError(f"model {self.entry.name!r} cannot be served on this node: {exc}")
                raise self.error from exc
            self.started_at = time.time()
            name = canonical_model(self.entry.model)
            self.local = name if not name.endswith(".gguf") else Path(name).stem
        return Endpoint(f"openai-compat:{self.local}", self.server.base_url, self.server.api_key, self.entry.n_ctx,
                        local_model=self.local, server_pid=self.server.pid)

    def pid(self) -> int | None:
        return None if self.server is None else self.server.pid

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


def model_endpoint(run_id: str, model: ModelEntry) -> Endpoint:
    """This node's server for ``model`` (started now if it is not running), or the spec's address."""
    if model.kind != "local":
        return endpoint_of(model)
    node = ray.get_runtime_context().get_node_id()
    actor: Any = remote_class(ModelServerActor).options(
        name=model_actor_name(run_id, model.name, node), namespace=NAMESPACE, lifetime="detached",
        get_if_exists=True, num_cpus=0, max_restarts=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
    ).remote(model)
    try:
        endpoint: Endpoint = ray.get(actor.endpoint.remote())
    except ray.exceptions.RayTaskError as exc:  # the actor's own ModelServerError: re-raise it as itself
        cause = exc.cause
        if isinstance(cause, VakError):
            raise cause from None
        raise ModelServerError(f"the server actor for {model.name!r} failed: {cause}") from exc
    except ray.exceptions.RayActorError as exc:
        raise ModelServerError(f"the server actor for {model.name!r} on node {node[:12]} died: {exc}. "
                               "The unit is retried on another node if one serves the model.") from exc
    return endpoint


@dataclass(frozen=True)
class UnitJob:
    """Everything one unit needs, shipped to the Ray task (no key inside: endpoints are looked up there)."""

    key: UnitKey
    run_id: str
    task: Task
    model: ModelEntry
    session_root: Path | None = None
    source_head: str = ""
    replays: Path | None = None  # replay: the folder its own ledger goes in (``<run>/replays``)
    system: str = ""
    summariser: ModelEntry | None = None  # the local model that writes replay packets
    summary_tokens: int = 64
    work: Path | None = None  # live: where its forks go; bfcl: where the engine mode's ledgers go

    @property
    def kind(self) -> str:
        return self.task.kind


def execute_unit(job: UnitJob, progress: Any = None) -> pa.Table:
    """Run one unit here; a unit that cannot run is one failed row with the reason."""
    node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    if progress is not None:
        progress.started.remote(job.run_id, str(job.key), node)
    try:
        with unit_profile(str(job.key)):
            rows = asyncio.run(_run(job, node))
    except VakError as exc:
        return failed_unit_table(job.key, job.kind, job.run_id, f"{type(exc).__name__}: {exc}", node)
    return rows_table(rows)


async def _run(job: UnitJob, node: str) -> list[dict[str, Any]]:
    task = job.task
    if isinstance(task, ReplayTask):
        return await _replay(job, node)
    if isinstance(task, BfclDegradeTask):  # the scripted model, served by the unit itself
        from vak_context.farm.bfcl.tasks import degrade_unit

        assert job.work is not None
        return await degrade_unit(job.key, job.run_id, node, task, job.model, work=job.work)
    endpoint = await asyncio.to_thread(model_endpoint, job.run_id, job.model)
    if isinstance(task, ProbeTask):
        return await probe_unit(job.key, job.run_id, node, job.model, task, endpoint)
    if isinstance(task, BfclTask):
        from vak_context.farm.bfcl.unit import bfcl_unit

        assert job.work is not None
        return await bfcl_unit(job.key, job.run_id, node, job.model, task, endpoint, work=job.work)
    if isinstance(task, BfclHistoryTask):
        from vak_context.farm.bfcl.tasks import history_unit

        assert job.work is not None
        return await history_unit(job.key, job.run_id, node, job.model, task, endpoint, work=job.work)
    assert isinstance(task, LiveTask) and job.session_root is not None and job.work is not None
    return await live_unit(job.key, job.run_id, node, job.model, task, endpoint, source_root=job.session_root,
                           source_head=job.source_head, work=job.work)


async def _replay(job: UnitJob, node: str) -> list[dict[str, Any]]:
    import httpx

    from vak_context.actors.ledger.client import LedgerClient
    from vak_context.agent.summarise import Summariser, write_packet
    from vak_context.context.planner.plan import Plan
    from vak_context.context.planner.view import SessionView
    from vak_context.farm.model_units import provider_for
    from vak_context.farm.replay import replay_session
    from vak_context.storage.ledger import LedgerStore

    assert job.session_root is not None and job.replays is not None
    folder = claim_replay_folder(job.replays, job.key.session, job.model.name)
    target = folder.name
    chain, decode = session_chain(job.session_root, job.source_head)
    with LedgerStore(folder) as store:
        ledger = LedgerClient(str(folder), store)  # this unit is the replay ledger's one writer
        # Made only when a plan first needs a packet summary: an httpx client costs ~40 ms of CPU (its TLS
        # context), and most replays never call a model.
        summariser: list[Summariser] = []
        clients: list[httpx.AsyncClient] = []

        async def summarise(view: SessionView, plan: Plan) -> list[str]:
            if job.summariser is None:
                raise ModelServerError("this plan needs a packet summary and the farm has no local model to "
                                       "write it: add a local model to the spec's [[models]].")
            if not summariser:  # the server starts only when a plan first needs a summary
                endpoint = await asyncio.to_thread(model_endpoint, job.run_id, job.summariser)
                clients.append(httpx.AsyncClient(trust_env=False))
                summariser.append(Summariser(provider_for(endpoint, clients[0]), endpoint.local_model,
                                             window_tokens=job.summariser.n_ctx,
                                             max_summary_tokens=job.summary_tokens))
            return await write_packet(ledger, target, view, plan, summariser[0])

        try:
            return await replay_session(job.key, job.run_id, node, job.model, chain, ledger=ledger, decode=decode,
                                        target=target, system=job.system, summarise=summarise)
        finally:
            for client in clients:
                await client.aclose()


def session_chain(root: Path, head: str) -> tuple[list[StoredEntry], Callable[[StoredEntry], Any]]:
    """The entries of a session ledger from its root to ``head``, and the decoder of their payloads.

    Kept per worker process (the last ``SESSION_CHAINS`` read): the driver writes a session's ledger once,
    before any unit runs, and every model's unit of that session reads the same chain, which costs as much
    as a tenth of the replay itself. An entry's id hashes its parent's, so a head names one chain only.
    """
    from vak_context.storage.ledger import LedgerStore

    key = (str(root), head)
    if key in _chains:
        _chains.move_to_end(key)
        return _chains[key]
    with LedgerStore(root, readonly=True) as reader:
        found = (reader.chain_to_root(head), reader.mapper.payload_of)
    _chains[key] = found
    while len(_chains) > SESSION_CHAINS:
        _chains.popitem(last=False)
    return found


SESSION_CHAINS = 8  # sessions whose chain a worker keeps; units are submitted session by session
_chains: OrderedDict[tuple[str, str], tuple[list[StoredEntry], Callable[[StoredEntry], Any]]] = OrderedDict()


def claim_replay_folder(replays: Path, session: str, model: str) -> Path:
    """A new folder ``<session>.<model>.<k>`` under ``replays``, k the first number no attempt has taken
    (``mkdir`` is the claim: two attempts of one unit never share a folder)."""
    from vak_context.farm.replay import replay_name

    replays.mkdir(parents=True, exist_ok=True)
    while True:
        folder = replays / replay_name(session, model, [p.name for p in replays.iterdir()])
        try:
            folder.mkdir()
        except FileExistsError:
            continue  # another attempt took it between the listing and the claim
        return folder


# ``execute_unit`` as a Ray task; its table travels to the driver through the object store.
run_unit: Any = remote_function(execute_unit)


def kill_run_actors(run_id: str) -> int:
    """Stop this run's model servers (each is detached); returns how many."""
    stopped = 0
    for info in ray.util.list_named_actors(all_namespaces=True):
        name = info["name"] if isinstance(info, dict) else info
        namespace = info.get("namespace", NAMESPACE) if isinstance(info, dict) else NAMESPACE
        if not name.startswith(f"{MODEL_ACTOR_PREFIX}{run_id}-"):
            continue
        try:
            actor = ray.get_actor(name, namespace=namespace)
            ray.get(actor.stop.remote(), timeout=30)
        except (ray.exceptions.RayError, ValueError):
            pass  # a server that died with its node is gone already
        try:
            ray.kill(actor)
        except (ray.exceptions.RayError, ValueError, UnboundLocalError):
            pass
        stopped += 1
    return stopped
