"""The encoder under shard_map: meshes of 8 simulated CPU devices against the unsharded forward pass.

XLA_FLAGS=--xla_force_host_platform_device_count=8 only works before JAX
starts, and the rest of the suite runs on one device in this process. So one
child process runs this file as a script on 8 devices, measures everything
once (one model load and compile per mesh), and writes JSON that the tests
here judge.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.encode.encoder_config import EncoderConfig, parse_mesh
from pipeline.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "st_reference.npz"
pytestmark = pytest.mark.bundled_model  # the default model, on 8 simulated CPU devices

DEVICES = 8
MESHES = ["data=1,model=1", "data=8,model=1", "data=4,model=2", "data=2,model=4"]
# Meshes that the default model (12 heads, MLP 1536) or the 8 devices cannot take.
BAD_MESHES = ["model=8", "data=1,model=5", "model=3", "data=16"]
DEFAULT_MESHES = ["", "model=2"]  # axes left out, filled in from the 8 devices
BATCH_SIZE = 4  # small batches: 8 CPU devices share this machine's few cores

SPLIT_OVER_HEADS_OR_MLP = {
    "qkv_LDXKH",
    "qkv_bias_LXKH",
    "out_LNHD",
    "up_LDF",
    "up_bias_LF",
    "down_LFD",
}


def real_texts() -> list[str]:
    """The 37 varied texts of the sentence-transformers fixture, and the sample texts whole and by paragraph."""
    texts = [str(t) for t in np.load(FIXTURE)["texts"]]
    for path in sorted((REPO / "samples" / "text").iterdir()):
        document = path.read_text()
        texts += [document, *(p.strip() for p in document.split("\n\n") if p.strip())]
    return texts


def measure_on_8_devices() -> dict:
    """Runs in the child process; every number the tests check."""
    import jax
    import jax.numpy as jnp

    from kernels import encoders
    from pipeline import Embedder
    from pipeline.encode import model_dir
    from pipeline.encode.batching import BatchingConfig, make_batches
    from pipeline.encode.encoder import Encoder, _embed
    from pipeline.text.tokenizer import Tokenizer

    assert len(jax.devices()) == DEVICES, jax.devices()
    texts = real_texts()
    spec = model_dir.resolve(None)

    # The unsharded forward pass: plain jit on whole arrays, one device, the same batches.
    ids = Tokenizer(spec.path / "tokenizer.json").encode_truncated(texts, spec.max_seq_length)
    params = encoders.cast_params(model_dir.load_params(spec), jnp.float32) | {"projections": []}
    # The encoder's own per-device function, called on whole arrays (rules None: no mesh).
    batching = BatchingConfig(spec.max_seq_length, BATCH_SIZE)
    unsharded = jax.jit(
        functools.partial(
            _embed,
            cfg=spec.arch,
            slots=batching.slots,
            pooling=spec.pooling,
            normalize=spec.normalize,
            attention_impl="auto",
            rules=None,
        )
    )
    expected = np.empty((len(texts), spec.dim), np.float32)
    for batch in make_batches(ids, batching):
        emb_BSD = np.asarray(unsharded(params, batch.ids_BT, batch.segments_BT, batch.positions_BT))
        expected[batch.index] = emb_BSD[batch.row, batch.slot]

    meshes = {}
    probe_batch = (np.zeros((8, 32), np.int32),) * 3
    for text in MESHES:
        embedder = Embedder.load(batch_size=BATCH_SIZE, mesh=parse_mesh(text))
        encoder = embedder.encoder
        got = embedder.embed(texts)
        fractions = {}
        for path, array in jax.tree_util.tree_leaves_with_path(encoder._params):
            held = {np.prod(s.data.shape) / np.prod(array.shape) for s in array.addressable_shards}
            fractions[path[-1].key] = sorted(held)
        try:  # weights not placed by the encoder: refused, not quietly sent along with every batch
            unplaced = model_dir.load_params(spec) | {"projections": []}
            encoder._embed(unplaced, *jax.device_put(probe_batch, encoder._batch_shardings))
            refused = None
        except ValueError as e:
            refused = str(e)
        meshes[text] = {
            "unplaced_params_refused": refused,
            "mesh": dict(encoder.mesh.shape),
            "devices": encoder.mesh.devices.size,
            "max_abs_diff": float(np.abs(got - expected).max()),
            "shard_fractions": fractions,
            "batch_rows": sorted({rows for rows, _ in encoder.compiled_shapes}),
        }

    errors = {}
    for text in BAD_MESHES:
        try:
            Encoder(spec, EncoderConfig(mesh=parse_mesh(text)))
            errors[text] = None
        except ConfigError as e:
            errors[text] = str(e)
    defaults = {
        text: dict(Encoder(spec, EncoderConfig(mesh=parse_mesh(text) if text else ())).mesh.shape)
        for text in DEFAULT_MESHES
    }
    return {"meshes": meshes, "errors": errors, "defaults": defaults}


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict:
    from support import run_on_cpu_devices

    return run_on_cpu_devices(Path(__file__), tmp_path_factory.mktemp("sharding") / "measured.json", DEVICES, 300)


@pytest.mark.parametrize("mesh", MESHES)
def test_sharded_embeddings_match_the_unsharded_forward_pass(measured, mesh):
    result = measured["meshes"][mesh]
    assert result["devices"] == np.prod(list(result["mesh"].values()))
    assert result["max_abs_diff"] <= 1e-5, result["max_abs_diff"]
    # Batch rows split evenly over the data axis: padded up to a multiple of it.
    assert all(rows % result["mesh"]["data"] == 0 for rows in result["batch_rows"]), result["batch_rows"]


@pytest.mark.parametrize("mesh", MESHES)
def test_weights_are_placed_once_with_1_over_model_of_attention_and_mlp_on_each_device(measured, mesh):
    result = measured["meshes"][mesh]
    assert "does not match" in result["unplaced_params_refused"]
    model = result["mesh"]["model"]
    for name, held in result["shard_fractions"].items():
        expected = 1 / model if name in SPLIT_OVER_HEADS_OR_MLP else 1.0
        assert held == [pytest.approx(expected)], (name, held)


def test_meshes_that_do_not_fit_are_config_errors(measured):
    errors = measured["errors"]
    assert "heads (12) over mesh axis 'model' of size 8" in errors["model=8"]
    assert "heads (12)" in errors["data=1,model=5"] and "mlp (1536)" in errors["data=1,model=5"]
    assert "does not divide the 8 local devices" in errors["model=3"]
    assert "needs 16 devices; this process has 8" in errors["data=16"]


def test_axes_left_out_fill_the_local_devices(measured):
    assert measured["defaults"] == {"": {"data": 8, "model": 1}, "model=2": {"data": 4, "model": 2}}


def test_parse_mesh():
    assert parse_mesh("data=4,model=2") == (("data", 4), ("model", 2))
    assert parse_mesh(" model = 2 ") == (("model", 2),)
    for text, message in [
        ("data", "data=N,model=M"),
        ("data=x", "data=N,model=M"),
        ("data=-1", "data=N,model=M"),
        ("batch=2", "'batch' is not one of data, model"),
        ("data=0", "at least 1"),
        ("data=2,data=2", "names an axis twice"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_mesh(text)
    with pytest.raises(ConfigError, match="not one of"):
        EncoderConfig(mesh=(("x", 2),))


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(measure_on_8_devices()))
