"""Encoder actor placement, and a job whose encoders are pinned to a (declared) TPU resource.

There is no TPU here: the local Ray declares a custom `TPU` resource so that
scheduling is real, while JAX inside the actor runs on the CPU. That part is
the mock, and the only one.
"""

import pytest
import ray

from pipeline import JobConfig, run_job
from pipeline.encode import model_dir
from pipeline.encode.encoder_config import EncoderConfig
from pipeline.encode.placement import ACCELERATOR_HOST_CPUS, check_encoders, place_encoders
from pipeline.errors import ConfigError
from pipeline.results import read_report

from support import FAMILY_FIXTURES, SAMPLES, wait_for_idle_cluster


def node(cpu=8, **extra):
    """A node as `ray.nodes()` lists it: every resource a float."""
    return {"Alive": True, "Resources": {"CPU": float(cpu), **{k: float(v) for k, v in extra.items()}}}


def test_one_actor_per_tpu_host_owning_all_its_chips():
    nodes = [node(), node(TPU=4), node(TPU=4), {"Alive": False, "Resources": {"TPU": 4}}]
    placement = place_encoders("auto", nodes, cpu_actors=None, cpu_per_actor=1)
    assert placement.kind == "tpu" and placement.actors == 2
    assert placement.devices_per_actor == 4 and isinstance(placement.devices_per_actor, int)
    assert placement.ray_remote_args == {"resources": {"TPU": 4}, "num_cpus": ACCELERATOR_HOST_CPUS}
    # Beside accelerators the CPU stages take whole cores: 24 CPUs, 4 reserved, one kept per writer (per encoder).
    assert placement.stage_cpus == 1.0 and placement.max_cpu_actors == 24 - 2 * ACCELERATOR_HOST_CPUS - 2
    assert placement.writers == 2


def test_cpu_stages_overlap_a_cpu_encoder_and_too_few_cpus_fail_fast():
    laptop = place_encoders("auto", [node(cpu=2)], cpu_actors=None, cpu_per_actor=1)
    assert (laptop.stage_cpus, laptop.max_cpu_actors) == (0.5, 1)
    with pytest.raises(
        ConfigError, match="has 3 CPUs; 1 tpu encoder actor.s. reserve 2 and the CPU stages and writers need 2 more"
    ):
        place_encoders("tpu", [node(cpu=3, TPU=4)], cpu_actors=None, cpu_per_actor=1)


def test_gpu_one_actor_per_gpu_and_cpu_one_per_node():
    gpu = place_encoders("auto", [node(GPU=2), node(GPU=1)], cpu_actors=None, cpu_per_actor=1)
    assert (gpu.kind, gpu.actors, gpu.ray_remote_args["num_gpus"]) == ("gpu", 3, 1)
    cpu = place_encoders("auto", [node(), node()], cpu_actors=None, cpu_per_actor=2)
    assert (cpu.kind, cpu.actors, cpu.ray_remote_args) == ("cpu", 2, {"num_cpus": 2})
    assert place_encoders("cpu", [node(TPU=4)], cpu_actors=3, cpu_per_actor=1).actors == 3
    # One writer actor per node that runs encoders, however many encoders it runs.
    assert (gpu.writers, cpu.writers) == (2, 2)
    assert place_encoders("cpu", [node(cpu=16)], cpu_actors=3, cpu_per_actor=1).writers == 1


@pytest.mark.parametrize("kind", ["tpu", "gpu"])
def test_missing_accelerator_fails_fast(kind):
    with pytest.raises(ConfigError, match=f"--accelerator {kind}, but no node"):
        place_encoders(kind, [node(), node()], cpu_actors=None, cpu_per_actor=1)
    with pytest.raises(ConfigError, match="must be one of"):
        place_encoders("npu", [node()], cpu_actors=None, cpu_per_actor=1)


MINILM = model_dir.resolve(None)  # the bundled model: 12 heads, an MLP of 1536


def test_a_mesh_or_attention_the_encoder_hosts_cannot_run_is_refused_from_the_node_list():
    tpu = place_encoders("auto", [node(TPU=4), node(TPU=4)], cpu_actors=None, cpu_per_actor=1)
    check_encoders(tpu, EncoderConfig(mesh=(("data", 2), ("model", 2)), attention="tpu_splash"), MINILM)
    with pytest.raises(ConfigError, match="mesh data=3,model=5 needs 15 devices; each tpu encoder actor has 4"):
        check_encoders(tpu, EncoderConfig(mesh=(("data", 3), ("model", 5))), MINILM)
    with pytest.raises(ConfigError, match="mesh model=3 does not divide the 4 local devices"):
        check_encoders(tpu, EncoderConfig(mesh=(("model", 3),)), MINILM)
    cpu = place_encoders("auto", [node()], cpu_actors=None, cpu_per_actor=1)
    check_encoders(cpu, EncoderConfig(attention="pallas", batch_size=3), MINILM)
    with pytest.raises(
        ConfigError,
        match="--attention cudnn cannot run on the cpu encoder actors; these can: auto, reference, blockwise, pallas$",
    ):
        check_encoders(cpu, EncoderConfig(attention="cudnn"), MINILM)
    gpu = place_encoders("auto", [node(GPU=2)], cpu_actors=None, cpu_per_actor=1)
    with pytest.raises(ConfigError, match="tpu_flash cannot run on the gpu encoder actors"):
        check_encoders(gpu, EncoderConfig(attention="tpu_flash"), MINILM)


def test_an_attention_without_the_models_relative_bias_is_refused_from_its_config():
    """MPNet's bias runs on reference, blockwise and pallas only: a TPU kernel of JAX's named for it ends the job
    on the driver."""
    mpnet = model_dir.resolve(str(FAMILY_FIXTURES / "mpnet-base"))
    tpu = place_encoders("auto", [node(TPU=4)], cpu_actors=None, cpu_per_actor=1)
    for attention in ("auto", "blockwise", "reference", "pallas"):
        check_encoders(tpu, EncoderConfig(attention=attention), mpnet)
    with pytest.raises(
        ConfigError,
        match="--attention tpu_splash adds no relative position bias, which model .*mpnet-base .mpnet. has; "
        "these can: auto, reference, blockwise, pallas$",
    ):
        check_encoders(tpu, EncoderConfig(attention="tpu_splash"), mpnet)
    check_encoders(tpu, EncoderConfig(attention="tpu_splash"), MINILM)


def test_a_mesh_the_model_does_not_split_over_is_refused_from_its_config():
    """The heads and the MLP split over `model`: the Encoder's own check, made by the driver before any actor."""
    tpu = place_encoders("auto", [node(TPU=8)], cpu_actors=None, cpu_per_actor=1)
    check_encoders(tpu, EncoderConfig(mesh=(("model", 4),)), MINILM)
    with pytest.raises(
        ConfigError,
        match="mesh data=1,model=8 does not fit model .*: cannot split heads .12. over mesh axis 'model' of size 8$",
    ):
        check_encoders(tpu, EncoderConfig(mesh=(("model", 8),)), MINILM)
    with pytest.raises(
        ConfigError, match="cannot split heads \\(12\\) over mesh axis 'model' of size 5 nor mlp \\(1536\\)"
    ):
        check_encoders(tpu, EncoderConfig(mesh=(("data", 1), ("model", 5))), MINILM)


def test_qwen3s_causal_attention_and_grouped_kv_heads_are_checked_from_its_config():
    """Qwen3 attends causally, which every attention implementation does; a model axis splits its 2 K/V heads
    with the 4 query heads that use them, so it must divide the 2."""
    qwen3 = model_dir.resolve(str(FAMILY_FIXTURES / "qwen3-embedding"))
    tpu = place_encoders("auto", [node(TPU=4)], cpu_actors=None, cpu_per_actor=1)
    for attention in ("auto", "blockwise", "reference", "pallas", "tpu_flash", "tpu_splash"):
        check_encoders(tpu, EncoderConfig(attention=attention, mesh=(("model", 2),)), qwen3)
    with pytest.raises(ConfigError, match=r"cannot split kv_heads \(2\) over mesh axis 'model' of size 4$"):
        check_encoders(tpu, EncoderConfig(mesh=(("model", 4),)), qwen3)


def test_a_dense_kernel_the_encoder_hosts_cannot_run_is_refused_naming_what_was_asked(monkeypatch):
    cpu = place_encoders("cpu", [node()], cpu_actors=None, cpu_per_actor=1)
    with pytest.raises(ConfigError, match="on the cpu encoder actors: .* add --dtype bfloat16 \\(asked float32\\)"):
        check_encoders(cpu, EncoderConfig(dense="onednn"), MINILM)
    gpu = place_encoders("gpu", [node(GPU=1)], cpu_actors=None, cpu_per_actor=1)
    with pytest.raises(ConfigError, match="--dense onednn cannot run on the gpu encoder actors: it runs on a CPU only"):
        check_encoders(gpu, EncoderConfig(dense="onednn", dtype="bfloat16"), MINILM)
    bfloat16 = EncoderConfig(dense="onednn", dtype="bfloat16")
    # A CPU with bfloat16 dot instructions whose kernel is not built here; then one without those instructions.
    monkeypatch.setattr("kernels.compute_dtype.cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"}))
    monkeypatch.setattr("pipeline.encode.encoder_config.unavailable", lambda impl: "the oneDNN kernel is not built")
    with pytest.raises(ConfigError, match="--dense onednn cannot run on the cpu encoder actors: the oneDNN kernel is"):
        check_encoders(cpu, bfloat16, MINILM)
    monkeypatch.setattr("kernels.compute_dtype.cpu_flags", lambda: frozenset({"avx2"}))
    with pytest.raises(ConfigError, match="--dtype bfloat16 runs as float32 there: this CPU has no bfloat16 dot"):
        check_encoders(cpu, bfloat16, MINILM)
    check_encoders(cpu, EncoderConfig(dense="xla", dtype="bfloat16"), MINILM)


def test_a_cpu_encoder_actor_has_a_device_per_core_of_its_share_of_a_node_unless_the_user_forced_a_count(
    monkeypatch,
):
    for var in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    # It reserves 1 CPU for Ray's accounting, but XLA's threads use every core of its node.
    laptop = place_encoders("cpu", [node(cpu=2)], cpu_actors=None, cpu_per_actor=1)
    assert (laptop.ray_remote_args, laptop.devices_per_actor) == ({"num_cpus": 1}, 2)
    assert place_encoders("cpu", [node(cpu=6), node(cpu=8)], cpu_actors=4, cpu_per_actor=1).devices_per_actor == 3
    assert place_encoders("cpu", [node(cpu=4)], cpu_actors=5, cpu_per_actor=0.5).devices_per_actor == 1
    assert place_encoders("cpu", [node(cpu=96)], cpu_actors=None, cpu_per_actor=1).devices_per_actor == 8
    # Local Ray actors inherit the driver's environment, and with it the count it forces.
    monkeypatch.setenv("XLA_FLAGS", "--foo --xla_force_host_platform_device_count=8")
    cpu = place_encoders("cpu", [node(cpu=2)], cpu_actors=None, cpu_per_actor=1)
    assert cpu.devices_per_actor == 8
    check_encoders(cpu, EncoderConfig(mesh=(("data", 4), ("model", 2))), MINILM)


@pytest.fixture(scope="module")
def ray_with_tpu():
    # CPUs are Ray's accounting here: the TPU encoder reserves 2, the CPU stages take one each.
    ray.init(address="local", num_cpus=4, resources={"TPU": 4}, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_job_schedules_encoders_on_the_tpu_resource(ray_with_tpu, tmp_path):
    cfg = JobConfig(
        inputs=(str(SAMPLES / "text"),),
        output=str(tmp_path / "out"),
        accelerator="tpu",
        compile_cache=str(tmp_path / "cache"),
        profile=str(tmp_path / "profile"),
    )
    report = run_job(cfg)
    assert report.docs_ok == 5
    assert read_report(str(tmp_path / "out"))["counts"]["docs_ok"] == 5
    # The encoder held the TPU resource while it ran, and hands it back.
    wait_for_idle_cluster()
    assert ray.available_resources().get("TPU") == 4
    assert any((tmp_path / "cache").iterdir()), "the encoder wrote its compiled programs to the cache"
    # --profile: a JAX profiler trace per encoder actor, in the format TensorBoard and Perfetto read.
    assert list((tmp_path / "profile").glob("*/plugins/profile/*/*.xplane.pb"))


def test_job_asking_for_a_gpu_here_fails_before_starting(ray_with_tpu, tmp_path):
    cfg = JobConfig(inputs=(str(SAMPLES / "text"),), output=str(tmp_path / "out"), accelerator="gpu")
    with pytest.raises(ConfigError, match="no node of this Ray cluster has a GPU"):
        run_job(cfg)
    assert not (tmp_path / "out").exists()
