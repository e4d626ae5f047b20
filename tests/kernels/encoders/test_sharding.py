"""Every family under shard_map on simulated meshes (data x model = 4x2; 8x1 for one) against one device.

As in tests/kernels/test_bert_sharding.py: the 8 CPU devices exist only if XLA
is told before JAX starts, so a child process runs this file as a script,
measures everything once, and writes JSON that the tests here judge. Measured
per fixture model: the pipeline's Encoder (unpacked rows, pooled embeddings) on
each mesh, and the bare forward pass on packed rows under `sharding.shard_map`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "families"
# One fixture per family, the one that uses most of what its family reads (pooling modes, Dense modules, the
# hub's tensor names), and xlm-roberta-mlm-prefix for its odd head count, which a model axis of 2 must refuse:
# a family's other fixtures differ in how they load and pool, which a mesh does not touch, and test_families.py
# holds each of them to transformers. With all 18 fixtures, this file's child took 128 s of the suite's time.
NAMES = [
    "albert-shared-groups",
    "bert-pooling-modes",
    "distilbert-dense",
    "gemma3-embedding",
    "gte-new-ntk",
    "llama-embedding",
    "mistral-embedding",
    "modernbert-layer-types",
    "mpnet-base",
    "nomic-contrastors",
    "qwen2-embedding",
    "qwen3-embedding",
    "t5-encoder-st",
    "xlm-roberta-mlm-prefix",
    "xlm-roberta-sharded",
]
DEVICES = 8
ONE_DEVICE = "data=1,model=1"
MESHES = [ONE_DEVICE, "data=4,model=2"]
# The data axis alone splits only the batch, every parameter replicated whatever the family: one fixture takes
# it (a third of the child's programs for the others, which data=4 splits the batch of too).
DATA_ONLY = {"bert-pooling-modes": "data=8,model=1"}


def meshes(name: str) -> list[str]:
    """The meshes fixture `name` runs on, the one-device mesh first."""
    return MESHES + ([DATA_ONLY[name]] if name in DATA_ONLY else [])


def measure_on_8_devices() -> dict:
    import jax

    from kernels import encoders, sharding
    from pipeline.encode import model_dir
    from pipeline.encode.encoder import Encoder
    from pipeline.encode.encoder_config import EncoderConfig, parse_mesh
    from pipeline.errors import ConfigError
    from pipeline.text.tokenizer import Tokenizer

    sys.path[:0] = [str(Path(__file__).parent), str(REPO / "tests")]  # test_families, and its support
    from test_families import packed

    assert len(jax.devices()) == DEVICES, jax.devices()
    rules = sharding.ShardingRules()
    results = {}
    for name in NAMES:
        spec = model_dir.resolve(str(FIXTURES / name))
        ref = np.load(FIXTURES / f"{name}.npz")
        ids = Tokenizer(spec.path / "tokenizer.json").encode_truncated(
            [str(t) for t in ref["texts"]], spec.max_seq_length
        )
        params = model_dir.load_params(spec)
        # Packed rows, padded to a multiple of the largest data axis with empty rows.
        ids_BT, segments_BT, positions_BT, _ = packed(ids, 2 * spec.max_seq_length)
        rows = -(-ids_BT.shape[0] // DEVICES) * DEVICES
        batch = [np.pad(a, ((0, rows - a.shape[0]), (0, 0))) for a in (ids_BT, segments_BT, positions_BT)]
        whole = np.asarray(jax.jit(encoders.forward, static_argnums=4)(params, *batch, spec.arch))
        out, mesh_of = {"meshes": {}}, {}
        for text in meshes(name):
            try:
                # Full batches only (tail_halvings=0): one program per mesh, as the tail's shapes add nothing here.
                encoder = Encoder(
                    spec,
                    EncoderConfig(mesh=parse_mesh(text), batch_size=2),
                    tail_halvings=0,
                    devices=jax.devices()[:DEVICES],
                )
            except ConfigError as e:
                out["meshes"][text] = {"refused": str(e)}
                continue
            got, _ = encoder.encode_ids(ids)
            out["meshes"][text] = {"pooled": got.tolist()}
            mesh_of[text] = encoder.mesh
        # Packed rows under shard_map on every mesh that splits something; on one device only where no other
        # mesh runs (a head count the model axis cannot split), as shard_map over one device splits nothing.
        axes, scale = encoders.param_axes(params), float(np.abs(whole).max())
        in_axes = (axes, *(encoders.logical("BT"),) * 3)
        for text in [t for t in mesh_of if t != ONE_DEVICE] or [ONE_DEVICE]:
            step = sharding.shard_map(
                lambda p, i, s, q, arch=spec.arch: encoders.forward(p, i, s, q, arch, rules=rules),
                mesh_of[text],
                rules,
                in_axes=in_axes,
                out_axes=encoders.logical("BTD"),
            )
            placed = jax.device_put((params, *batch), sharding.named_shardings(in_axes, rules, mesh_of[text]))
            hidden = np.asarray(jax.jit(step)(*placed))
            out["meshes"][text] |= {"packed_max_abs_diff": float(np.abs(hidden - whole).max()), "packed_scale": scale}
        out["reference"] = ref["pooled"].tolist()
        out["heads"] = spec.arch.num_heads
        results[name] = out
    return results


def test_every_family_with_a_fixture_is_sharded_here():
    from pipeline.encode import model_dir

    def families(names):
        return {model_dir.resolve(str(FIXTURES / name)).arch.family for name in names}

    assert families(NAMES) == families(p.stem for p in FIXTURES.glob("*.npz"))


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict:
    from support import run_on_cpu_devices

    return run_on_cpu_devices(
        Path(__file__), tmp_path_factory.mktemp("family-sharding") / "measured.json", DEVICES, 900
    )


@pytest.mark.parametrize("name", NAMES)
def test_every_mesh_gives_the_one_device_embeddings(measured, name):
    result = measured[name]
    one = np.array(result["meshes"][ONE_DEVICE]["pooled"])
    reference = np.array(result["reference"])
    cosines = np.einsum("nd,nd->n", one, reference) / np.linalg.norm(one, axis=1) / np.linalg.norm(reference, axis=1)
    assert cosines.min() >= 0.99999
    assert list(result["meshes"]) == meshes(name)
    for mesh in meshes(name)[1:]:
        m = result["meshes"][mesh]
        if result["heads"] % 2 and "model=2" in mesh:
            assert f"heads ({result['heads']}) over mesh axis 'model' of size 2" in m["refused"]
            continue
        np.testing.assert_allclose(np.array(m["pooled"]), one, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_packed_rows_under_shard_map_equal_the_whole_arrays(measured, name):
    checked = {mesh: m for mesh, m in measured[name]["meshes"].items() if "packed_max_abs_diff" in m}
    runs = [mesh for mesh, m in measured[name]["meshes"].items() if "refused" not in m]
    assert list(checked) == ([mesh for mesh in runs if mesh != ONE_DEVICE] or [ONE_DEVICE])
    for mesh, m in checked.items():
        assert m["packed_max_abs_diff"] <= 1e-5 * max(1.0, m["packed_scale"]), (mesh, m["packed_max_abs_diff"])


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(measure_on_8_devices()))
