"""cluster.yaml is a valid Ray cluster-launcher config that keeps Ray on the cluster's private network.

Validated offline, as `ray up` would before it starts anything: ``prepare_config`` merges the provider's
defaults (so a start command the file leaves out comes back as Ray's own, which opens the dashboard to
0.0.0.0), then ``validate_config`` checks the result against the schema Ray ships. The security checks
read the *prepared* config, which is what the nodes would run.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from vak_context.farm.spec import ModelEntry

REPO = Path(__file__).resolve().parents[2]
CLUSTER_YAML = REPO / "cluster.yaml"
MODEL_RESOURCE = ModelEntry(name="m", kind="local").resource  # what a local model's server asks for


def prepared(raw: dict[str, Any]) -> dict[str, Any]:
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = prepare_config(copy.deepcopy(raw))
    validate_config(config)
    return config


def exposure_problems(config: dict[str, Any]) -> list[str]:
    """What in a prepared config would let Ray be reached from beyond the cluster's private network."""
    problems = []
    starts = [("head", c) for c in config.get("head_start_ray_commands", [])] + \
             [("worker", c) for c in config.get("worker_start_ray_commands", [])]
    ray_starts = [(role, c) for role, c in starts if re.search(r"\bray start\b", c)]
    if {role for role, _ in ray_starts} != {"head", "worker"}:
        problems.append("a head and a worker `ray start` command are both needed")
    for role, cmd in ray_starts:
        if "0.0.0.0" in cmd:
            problems.append(f"{role} start binds 0.0.0.0: {cmd}")
        if "--node-ip-address" not in cmd:
            problems.append(f"{role} start does not pin --node-ip-address to the private address: {cmd}")
        if role == "head" and not re.search(r"--dashboard-host[= ](127\.0\.0\.1|localhost)\b", cmd):
            problems.append(f"the head's dashboard (the Jobs API) is not bound to 127.0.0.1: {cmd}")
    for rule in config.get("provider", {}).get("security_group", {}).get("IpPermissions", []):
        open_to_all = any(r.get("CidrIp") == "0.0.0.0/0" for r in rule.get("IpRanges", [])) or \
            any(r.get("CidrIpv6") == "::/0" for r in rule.get("Ipv6Ranges", []))
        if open_to_all and (rule.get("FromPort"), rule.get("ToPort")) != (22, 22):
            problems.append(f"security group opens ports {rule.get('FromPort')}-{rule.get('ToPort')} to everyone")
    return problems


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    return yaml.safe_load(CLUSTER_YAML.read_text())


def test_cluster_yaml_passes_rays_own_validation(raw: dict[str, Any]) -> None:
    """prepare_config + validate_config (the schema in the installed ray package) accept cluster.yaml,
    with a head and at least one worker node type on a cloud provider."""
    config = prepared(raw)
    assert config["provider"]["type"] == "aws"
    types = config["available_node_types"]
    assert config["head_node_type"] in types
    assert len(types) >= 2


def test_cluster_yaml_never_exposes_ray_beyond_the_private_network(raw: dict[str, Any]) -> None:
    """Every `ray start` (head and worker) pins --node-ip-address to the node's private address, none binds
    0.0.0.0, the head's dashboard/Jobs API is on 127.0.0.1, and no security rule opens a Ray port to all."""
    assert exposure_problems(prepared(raw)) == []


@pytest.mark.parametrize("mutation", ["no_start_commands", "dashboard_any", "no_node_ip", "open_port"])
def test_the_exposure_check_catches_an_exposed_config(raw: dict[str, Any], mutation: str) -> None:
    """The check above can fail: leaving the start commands to Ray's defaults (they use
    --dashboard-host=0.0.0.0), a dashboard on 0.0.0.0, a start without --node-ip-address, or a security
    rule opening the dashboard port to 0.0.0.0/0 is each reported."""
    bad = copy.deepcopy(raw)
    if mutation == "no_start_commands":
        del bad["head_start_ray_commands"], bad["worker_start_ray_commands"]
    elif mutation == "dashboard_any":
        bad["head_start_ray_commands"] = [c.replace("--dashboard-host=127.0.0.1", "--dashboard-host=0.0.0.0")
                                          for c in bad["head_start_ray_commands"]]
    elif mutation == "no_node_ip":
        bad["worker_start_ray_commands"] = [re.sub(r'--node-ip-address="[^"]*"', "", c)
                                            for c in bad["worker_start_ray_commands"]]
    else:
        bad["provider"]["security_group"] = {"IpPermissions": [
            {"FromPort": 8265, "ToPort": 8265, "IpProtocol": "tcp", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]}
    assert exposure_problems(prepared(bad)) != []


def test_model_nodes_advertise_the_farms_model_resource(raw: dict[str, Any]) -> None:
    """A worker node type advertises the custom resource a local model's server asks for (farm/spec/__init__.py's
    default), and the head and CPU-only workers do not, so model servers land only on model nodes."""
    types = prepared(raw)["available_node_types"]
    with_model = {name for name, t in types.items() if t.get("resources", {}).get(MODEL_RESOURCE, 0) >= 1}
    assert with_model, f"no node type advertises {MODEL_RESOURCE}"
    assert raw["head_node_type"] not in with_model
    assert set(types) - with_model  # the other node types do not


def test_setup_installs_this_project_and_ray_runs_from_its_environment(raw: dict[str, Any]) -> None:
    """The project is copied to every node (file_mounts of the checkout, without .venv, vak-data or .git),
    installed with pip into one virtualenv, and `ray start` runs from that virtualenv (so Ray's workers
    import the project's dependencies)."""
    config = prepared(raw)
    mounts = config["file_mounts"]
    target = next(remote for remote, local in mounts.items() if local.rstrip("/") == ".")  # `ray up` from the root
    assert {".git", ".venv", "vak-data"} <= set(config["rsync_exclude"])
    installs = [c for c in config["setup_commands"] if re.search(r"\bpip install\b.*-e " + re.escape(target), c)]
    assert installs, config["setup_commands"]
    venv = re.search(r"--python (\S+)/bin/python", installs[0])
    assert venv is not None
    for cmd in config["head_start_ray_commands"] + config["worker_start_ray_commands"]:
        if "ray start" in cmd:
            assert f"{venv.group(1)}/bin/ray start" in cmd
