"""The local Ray listens on loopback only, whatever imported ``ray`` first, and leaves no temp folder.

Each test starts a cluster in a fresh Python process, so the import order is real: the process
imports ``ray`` (or not) before ``vak_context.engine.localray.start_local_ray`` runs, creates an actor and runs a
task (so workers and agents exist), and waits. Meanwhile the test reads the kernel's socket tables
(``/proc/<pid>/net/{tcp,tcp6,udp,udp6}``) and maps each socket's inode to the processes of the
cluster's process tree through ``/proc/<pid>/fd``.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.sockets import bound_sockets, is_loopback, process_name
from vak_context.farm.jobs import process_tree

pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parents[2]

CLUSTER_SCRIPT = """
import os, sys
if sys.argv[1] == "ray_first":
    import ray  # what pytest's collection of a Ray test module does before any fixture runs
from vak_context.engine.localray import start_local_ray, stop_local_ray

start_local_ray(num_cpus=1, object_store_mb=96)
import ray

@ray.remote(num_cpus=0)
class Pinger:
    def pid(self):
        return os.getpid()

@ray.remote(num_cpus=0)
def task_pid():
    return os.getpid()

actor = Pinger.remote()
root = os.path.dirname(ray._private.worker._global_node.get_temp_dir_path())
print(root, ray.get(actor.pid.remote()), ray.get(task_pid.remote()), flush=True)
sys.stdin.read()  # the test reads the sockets, then closes our stdin
if sys.argv[2] == "stop":
    stop_local_ray()
# else: leave it to the atexit hook, as the main job does
"""


@pytest.mark.parametrize(("order", "teardown"), [("ray_first", "stop"), ("ray_after", "atexit")])
def test_local_ray_listens_on_loopback_only_and_removes_its_private_temp_folder(order: str, teardown: str) -> None:
    """With ``ray`` imported before or after ``start_local_ray``: every listening TCP socket and bound
    UDP socket of the cluster's process tree (driver, GCS, raylet, agents, an actor's and a task's
    workers) is on loopback; the temp folder is mode 0700 while Ray runs and is gone once the process
    has stopped Ray (explicitly, or at exit), along with every process of the tree."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for name in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_ADDRESS"):
        env.pop(name, None)  # the child must set what it needs itself
    with subprocess.Popen([sys.executable, "-c", CLUSTER_SCRIPT, order, teardown], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, env=env, cwd=REPO) as driver:
        assert driver.stdin is not None and driver.stdout is not None
        line = driver.stdout.readline().decode()
        assert line, f"the cluster process exited with {driver.wait()} before it was ready"
        root_text, actor_pid, task_pid = line.split()
        root = Path(root_text)
        tree = process_tree(driver.pid)
        sockets = bound_sockets(tree, driver.pid)
        mode = stat.S_IMODE(root.stat().st_mode)
        driver.stdin.close()
        assert driver.wait(120) == 0

    names = {s.process.rsplit("/", 1)[-1] for s in sockets}
    assert {"gcs_server", "raylet"} <= names, names  # the scan saw the cluster, so it can fail
    assert {int(actor_pid), int(task_pid)} <= {s.pid for s in sockets}
    exposed = [s for s in sockets if not is_loopback(s.address)]
    assert exposed == [], "\n".join(f"{s.proto} {s.address}:{s.port} {s.process} (pid {s.pid})" for s in exposed)

    assert mode == 0o700, oct(mode)
    assert not root.exists()
    deadline = time.monotonic() + 60
    while (alive := [p for p in tree if Path(f"/proc/{p}").exists() and process_name(p) != "?"]) and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    assert alive == [], [(p, process_name(p)) for p in alive]
