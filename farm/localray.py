"""Start (or join) a local Ray bound to loopback, with the settings measured on these machines."""

from __future__ import annotations

import os
import tempfile
from typing import Any

LOOPBACK = "127.0.0.1"


def ray_env() -> None:
    """Environment Ray must see before it starts: loopback only, no usage stats, no auth prompts."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")


def start_local_ray(*, num_cpus: int = 2, object_store_mb: int = 192, temp_dir: str | None = None,
                    log_to_driver: bool = False) -> Any:
    """``ray.init`` on a new local cluster bound to 127.0.0.1 (or return the one already up)."""
    ray_env()
    import ray

    if ray.is_initialized():
        return ray.get_runtime_context()
    # Unix socket paths max out near 107 bytes, so keep the temp dir short.
    temp_dir = temp_dir or tempfile.mkdtemp(prefix="vray", dir="/tmp")
    return ray.init(
        address="local",
        num_cpus=num_cpus,
        object_store_memory=object_store_mb * 1024 * 1024,
        include_dashboard=False,
        log_to_driver=log_to_driver,
        _node_ip_address=LOOPBACK,
        _temp_dir=temp_dir,
        configure_logging=False,
    )
