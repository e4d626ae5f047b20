"""One XLA CPU device per core: the count's rules, and the embeddings it gives.

JAX fixes its device count when its backend starts, once per process, so each
rule that applies a count runs in a child process of its own.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from pipeline.encode.cpu_devices import MAX_CPU_DEVICES, cpu_device_count
from pipeline.encode.encoder_config import mesh_shape
from pipeline.errors import ConfigError

from support import REPO

FORCED_8 = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}


def test_the_count_is_the_users_else_the_actors_cpus_or_the_affinity_mask():
    assert cpu_device_count(environ=FORCED_8) == 8
    assert cpu_device_count(cpus=1, environ={**FORCED_8, "JAX_NUM_CPU_DEVICES": "3"}) == 3
    # A Ray actor's CPUs count as Ray counts them for OMP_NUM_THREADS: the floor, at least 1.
    assert cpu_device_count(cpus=2.5, environ={}) == 2
    assert cpu_device_count(cpus=0.5, environ={}) == 1
    assert cpu_device_count(cpus=64, environ={}) == MAX_CPU_DEVICES
    assert cpu_device_count(environ={}) == min(len(os.sched_getaffinity(0)), MAX_CPU_DEVICES)


@pytest.mark.parametrize(
    "environ",
    [
        {"JAX_NUM_CPU_DEVICES": ""},
        {"JAX_NUM_CPU_DEVICES": "0", **FORCED_8},
        {"JAX_NUM_CPU_DEVICES": "-1"},
        {"JAX_NUM_CPU_DEVICES": "2.5"},
        {"XLA_FLAGS": "--xla_force_host_platform_device_count=0"},
    ],
)
def test_a_forced_count_that_is_not_a_positive_whole_number_is_refused_in_one_line(environ):
    """The driver counts an actor's devices before anything is written: an empty count once failed there with
    a traceback, and 0 after the output was begun."""
    name = "JAX_NUM_CPU_DEVICES" if "JAX_NUM_CPU_DEVICES" in environ else "XLA_FLAGS' --xla_force_host_platform"
    with pytest.raises(ConfigError, match=f"^{name}.* must be a positive whole number of CPU devices, got '"):
        cpu_device_count(cpus=2, environ=environ)
    with pytest.raises(ConfigError, match="^each cpu encoder actor has no devices to lay a mesh over$"):
        mesh_shape((), 0, "each cpu encoder actor")


def child(code: str, **env: str) -> dict:
    """Runs `code` (which prints one JSON line last) in a fresh Python with `env` over this one's, the
    user's own count variables removed unless given."""
    base = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES", "JAX_PLATFORMS")}
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.splitlines()[-1])


DEVICES_AFTER = """
import json, logging, jax
from pipeline.encode.cpu_devices import use_cpu_devices
{before}
use_cpu_devices({count})
print(json.dumps(dict(devices=jax.local_device_count(), option=jax.config.jax_num_cpu_devices)))
"""


@pytest.mark.parametrize(
    "env, count, expected",
    [
        ({}, "", min(len(os.sched_getaffinity(0)), MAX_CPU_DEVICES)),
        ({}, "3", 3),
        (FORCED_8, "3", 8),
        ({"JAX_NUM_CPU_DEVICES": "5"}, "3", 5),
    ],
    ids=["default", "asked", "xla-flags-forced", "jax-option-set"],
)
def test_a_process_gets_the_count_asked_for_unless_the_user_forced_one(env, count, expected):
    assert child(DEVICES_AFTER.format(before="", count=count), **env)["devices"] == expected


def test_a_started_backend_keeps_its_devices_and_says_so_in_a_debug_line():
    started = "logging.basicConfig(level=logging.DEBUG); jax.devices()"
    code = DEVICES_AFTER.format(before=started, count="2")
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    assert json.loads(run.stdout.splitlines()[-1])["devices"] == 1
    assert "JAX has started with 1 CPU device(s); 2 not applied" in run.stderr


def test_a_process_that_may_run_on_an_accelerator_is_left_alone():
    # No TPU here: JAX_PLATFORMS names one, and the CPU option must stay unset (JAX is never started).
    code = DEVICES_AFTER.format(before="", count="2").replace("devices=jax.local_device_count(), ", "")
    assert child(code, JAX_PLATFORMS="tpu")["option"] == -1


EMBED_ON_DEVICES = """
import json, jax
from pipeline import Embedder
from pipeline.encode.cpu_devices import use_cpu_devices
from pipeline.encode.embedder import INTERACTIVE_TAIL_HALVINGS
from pipeline.encode.encoder import Encoder
use_cpu_devices(2)
texts = ["a short one", "x " * 300, *(f"sentence number {i} of the batch" for i in range(21))]
two = Embedder.load()
one_device = Encoder(two.encoder.spec, devices=jax.local_devices()[:1], tail_halvings=INTERACTIVE_TAIL_HALVINGS)
one = Embedder(one_device, two.tokenizer)
print(json.dumps(dict(
    data=[one.encoder.mesh.shape["data"], two.encoder.mesh.shape["data"]],
    one=one.embed(texts).tolist(),
    two=two.embed(texts).tolist(),
)))
"""


def test_two_cpu_devices_embed_as_one_does():
    got = child(EMBED_ON_DEVICES)
    assert got["data"] == [1, 2]
    one, two = np.array(got["one"]), np.array(got["two"])
    np.testing.assert_allclose((one * two).sum(-1), 1.0, atol=1e-5)
