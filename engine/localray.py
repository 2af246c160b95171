"""Start (or join) a local Ray bound to loopback, with the settings measured on these machines.

Loopback does not depend on import order. Ray decides whether a node may be reached from other
machines from ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``, but it reads that variable once, into
``ray._private.ray_constants.ENABLE_RAY_CLUSTER``, when ``ray`` is first imported. With the flag
on, ``ray.init(_node_ip_address="127.0.0.1")`` rewrites the loopback address to the machine's own
(``services.resolve_ip_for_localhost``), and GCS, raylet, workers and agents then listen on that
address, ``*`` or ``0.0.0.0``. So ``start_local_ray`` sets the variable for the processes Ray
starts (they import ``ray`` afresh) *and* the already-read constant in this process, then checks
the node address Ray settled on and refuses to go on with anything but 127.0.0.1.

Ray's temp folder holds its sockets, logs and session files, and Ray makes every folder in it mode
0777. It lives inside a private folder (mode 0700) that ``stop_local_ray`` removes, and so does an
``atexit`` hook for a process that never calls it (the main job, ``vak run``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from vak_context.errors import ActorError

LOOPBACK = "127.0.0.1"
RAY_SUBDIR = "ray"  # Ray's _temp_dir inside the private folder; Ray chmods it 0777

# The private folder of the Ray this process started, and whether it was made here (then it is removed).
_state: dict[str, Any] = {"root": None, "made_root": False, "hooked": False}


def ray_env() -> None:
    """Environment Ray must see before it starts: loopback only, no usage stats, no auth prompts.

    The loopback flag is forced, not defaulted: a local cluster must never be reachable from outside.
    """
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")


def pin_loopback() -> None:
    """Keep this process's Ray on loopback even if ``ray`` was imported before ``ray_env()``."""
    ray_env()
    from ray._private import ray_constants

    # Read by services.get_node_ip_address and resolve_ip_for_localhost at every call.
    ray_constants.ENABLE_RAY_CLUSTER = False


def private_temp_root(temp_dir: str | os.PathLike[str] | None = None) -> Path:
    """A mode-0700 folder for Ray's temp files: ``temp_dir`` (made if missing) or a new one in /tmp.

    Unix socket paths max out near 107 bytes, so the default is short.
    """
    if temp_dir is None:
        return Path(tempfile.mkdtemp(prefix="vray", dir="/tmp"))  # mkdtemp makes it 0700
    root = Path(temp_dir)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    return root


def start_local_ray(*, num_cpus: int = 2, object_store_mb: int = 192, temp_dir: str | None = None,
                    log_to_driver: bool = False) -> Any:
    """``ray.init`` on a new local cluster bound to 127.0.0.1 (or return the one already up).

    ``temp_dir`` is the private folder Ray's temp files go under (made mode 0700); by default a new
    one in /tmp, removed by ``stop_local_ray`` or at exit.
    """
    pin_loopback()
    import ray

    if ray.is_initialized():
        return ray.get_runtime_context()
    made_root = temp_dir is None or not Path(temp_dir).exists()
    root = private_temp_root(temp_dir)
    _state.update(root=root, made_root=made_root)
    if not _state["hooked"]:
        # Registered after `import ray`, so it runs before Ray's own atexit shutdown (LIFO).
        atexit.register(stop_local_ray)
        _state["hooked"] = True
    try:
        ctx = ray.init(
            address="local",
            num_cpus=num_cpus,
            object_store_memory=object_store_mb * 1024 * 1024,
            include_dashboard=False,
            log_to_driver=log_to_driver,
            _node_ip_address=LOOPBACK,
            _temp_dir=str(root / RAY_SUBDIR),
            configure_logging=False,
        )
    except Exception:
        _remove_root()
        raise
    node_ip = ray.util.get_node_ip_address()
    if node_ip != LOOPBACK:
        stop_local_ray()
        raise ActorError(
            f"the local Ray came up on {node_ip}, not {LOOPBACK}, so it was stopped: this Ray version "
            "no longer honours RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0. Pin the Ray version in pyproject.toml "
            "or run vak inside a loopback-only network namespace (`unshare -n`)."
        )
    return ctx


def stop_local_ray() -> None:
    """Shut down the Ray this process started and remove its private temp folder."""
    import ray

    ray.shutdown()
    _remove_root()


def _remove_root() -> None:
    root, made = _state["root"], _state["made_root"]
    _state.update(root=None, made_root=False)
    if root is None:
        return
    # A folder the caller named is kept; only what Ray put in it goes.
    shutil.rmtree(root if made else root / RAY_SUBDIR, ignore_errors=True)


def join_ray(address: str | None) -> tuple[bool, bool]:
    """Join Ray for this process: the Ray it already joined; else the cluster at ``address`` (``host:port``
    or ``ray://host:port``: its reach is the operator's choice); else (``address`` None) a new local
    cluster on 127.0.0.1. Returns (started a local cluster, connected this process): what ``leave_ray``
    undoes. A cluster this process starts is loopback only."""
    pin_loopback()
    import ray

    if ray.is_initialized():
        return False, False
    if address is None:
        start_local_ray()
        return True, False
    try:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ActorError(f"cannot join the Ray cluster at {address}: {exc}. Start it (`ray start --head "
                         "--node-ip-address=127.0.0.1`) or check the address.") from exc
    return False, True


def leave_ray(*, started: bool, connected: bool) -> None:
    """Undo ``join_ray``: stop the local cluster it started, or disconnect from the one it joined. Detached
    actors (the ledger folder's) keep running on a joined cluster for other processes."""
    if started:
        stop_local_ray()
    elif connected:
        import ray

        ray.shutdown()
