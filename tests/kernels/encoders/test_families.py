"""Every encoder family against transformers, on the committed random-weight fixtures.

tests/make_family_fixtures.py built each model with transformers' own class and
recorded its hidden states and sentence-transformers embeddings of texts up to
the model's window (longer than every sliding window). Here each model directory
goes through the project's loaders (pipeline.encode.model_dir, pipeline.text.tokenizer) and
kernels.encoders, unpacked and packed, with the reference and blockwise attention; the causal decoders
also packed under the pallas kernel.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from kernels import encoders
from kernels.dense import unavailable
from pipeline import Embedder
from pipeline.encode import model_dir
from pipeline.errors import ModelError
from pipeline.text.tokenizer import Tokenizer

from support import FAMILY_FIXTURES

NAMES = sorted(p.stem for p in FAMILY_FIXTURES.glob("*.npz"))
FAMILY_OF = {
    "albert": "albert",
    "bert": "bert",
    "distilbert": "distilbert",
    "xlm": "xlm-roberta",
    "camembert": "xlm-roberta",
    "mpnet": "mpnet",
    "modernbert": "modernbert",
    "nomic": "nomic_bert",
    "gte": "gte",
    "t5": "t5",
    "mt5": "t5",
    "qwen3": "qwen3",
    "qwen2": "qwen2",
    "mistral": "mistral",
    "llama": "llama",
    "gemma3": "gemma3",
}
IMPLS = ["reference", "blockwise"]
COSINE = 0.99999


@dataclasses.dataclass
class Loaded:
    spec: model_dir.ModelSpec
    params: dict
    projections: list[dict]  # the Dense modules' weights
    ref: dict
    ids: list[list[int]]

    def texts(self) -> list[str]:
        return [str(t) for t in self.ref["texts"]]

    def hidden(self, i: int) -> np.ndarray:
        start = int(self.ref["lengths"][:i].sum())
        return self.ref["hidden"][start : start + self.ref["lengths"][i]]


_cache: dict[str, Loaded] = {}


def load(name: str) -> Loaded:
    if name not in _cache:
        spec = model_dir.resolve(str(FAMILY_FIXTURES / name))
        ref = dict(np.load(FAMILY_FIXTURES / f"{name}.npz"))
        ids = Tokenizer(spec.path / "tokenizer.json").encode_truncated(
            [str(t) for t in ref["texts"]], spec.max_seq_length
        )
        _cache[name] = Loaded(spec, model_dir.load_params(spec), model_dir.load_projections(spec), ref, ids)
    return _cache[name]


def unpacked(ids: list[list[int]], width: int):
    """One sequence per row, right-padded: segments 1 then 0, positions arange."""
    ids_BT = np.zeros((len(ids), width), np.int32)
    for row, seq in enumerate(ids):
        ids_BT[row, : len(seq)] = seq
    positions_BT = np.broadcast_to(np.arange(width, dtype=np.int32), ids_BT.shape).copy()
    segments_BT = (positions_BT < np.array([len(s) for s in ids])[:, None]).astype(np.int32)
    return ids_BT, segments_BT, positions_BT


def packed(ids: list[list[int]], width: int):
    """First-fit packing into rows of `width`: segments 1..k, positions restart per sequence.
    Returns the arrays and, per sequence, (row, start, segment id)."""
    rows: list[list[list[int]]] = []
    for seq in ids:
        row = next((r for r in rows if sum(map(len, r)) + len(seq) <= width), None)
        if row is None:
            rows.append(row := [])
        row.append(seq)
    ids_BT, segments_BT, positions_BT = (np.zeros((len(rows), width), np.int32) for _ in range(3))
    where = {}
    for r, row in enumerate(rows):
        start = 0
        for k, seq in enumerate(row):
            ids_BT[r, start : start + len(seq)] = seq
            segments_BT[r, start : start + len(seq)] = k + 1
            positions_BT[r, start : start + len(seq)] = np.arange(len(seq))
            where[id(seq)] = (r, start, k + 1)
            start += len(seq)
    return ids_BT, segments_BT, positions_BT, [where[id(seq)] for seq in ids]


def embeddings(m: Loaded, hidden_BTD, segments_BT, n_slots: int) -> np.ndarray:
    """As sentence-transformers' modules make them: pooled, through the Dense modules, normalised."""
    spec = m.spec
    pooled = encoders.pool(hidden_BTD, segments_BT, n_slots, spec.pooling)
    activations, residuals = [p.activation for p in spec.projections], [p.residual for p in spec.projections]
    projected = encoders.project(pooled, m.projections, activations, residuals)
    return np.asarray(encoders.normalize(projected) if spec.normalize else projected)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_the_fixtures_cover_every_family_and_layout():
    families = {load(name).spec.arch.family for name in NAMES}
    assert families == set(encoders.FAMILIES)
    for name in NAMES:
        assert load(name).spec.arch.family == FAMILY_OF[name.split("-")[0]]
    poolings = {mode for name in NAMES for mode in load(name).spec.pooling.split("+")}
    assert poolings == set(encoders.POOLING_MODES)
    windows = {k.window for name in NAMES for k in load(name).spec.arch.layer_kinds} - {None}
    longest = max(int(load(name).ref["lengths"].max()) for name in NAMES)
    assert windows and max(windows) < longest // 4, (windows, longest)


@functools.cache
def one_text_per_row(name: str, impl: str) -> tuple[np.ndarray, np.ndarray]:
    """Fixture `name`'s hidden states [B, T, D] under `impl`, a text a row at the model's window, and the rows'
    segment ids [B, T]: held to transformers' below and to packed rows after, computed once for both."""
    m = load(name)
    ids_BT, segments_BT, positions_BT = unpacked(m.ids, m.spec.max_seq_length)
    hidden = encoders.forward(m.params, ids_BT, segments_BT, positions_BT, m.spec.arch, attention_impl=impl)
    return np.asarray(hidden), segments_BT


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", NAMES)
def test_transformers_hidden_states_and_embeddings_are_reproduced(name, impl):
    m = load(name)
    assert [len(s) for s in m.ids] == m.ref["lengths"].tolist()
    assert np.concatenate(m.ids).tolist() == m.ref["ids"].tolist(), "the project's tokenizer differs"
    hidden, segments_BT = one_text_per_row(name, impl)
    pooled = embeddings(m, hidden, segments_BT, 1)[:, 0]
    for i, n in enumerate(m.ref["lengths"]):
        got, want = hidden[i, :n], m.hidden(i)
        token_cosines = np.einsum("td,td->t", got, want) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
        assert token_cosines.min() >= COSINE, (i, n, token_cosines.min())
        assert cosine(pooled[i], m.ref["pooled"][i]) >= COSINE, (i, n)
        np.testing.assert_allclose(pooled[i], m.ref["pooled"][i], atol=2e-4 * np.abs(m.ref["pooled"][i]).max())


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", NAMES)
def test_packed_rows_equal_unpacked(name, impl):
    m = load(name)
    alone, alone_segments_BT = one_text_per_row(name, impl)
    alone_pooled = embeddings(m, alone, alone_segments_BT, 1)[:, 0]
    # Rows twice the window: the short texts share a row, the long ones sit after them.
    ids_BT, segments_BT, positions_BT, where = packed(m.ids, 2 * m.spec.max_seq_length)
    assert len(where) > ids_BT.shape[0], "nothing was packed"
    together = np.asarray(
        encoders.forward(m.params, ids_BT, segments_BT, positions_BT, m.spec.arch, attention_impl=impl)
    )
    n_slots = int(segments_BT.max())
    together_pooled = embeddings(m, together, segments_BT, n_slots)
    for i, (row, start, segment) in enumerate(where):
        n = len(m.ids[i])
        np.testing.assert_allclose(together[row, start : start + n], alone[i, :n], atol=2e-5, rtol=1e-5)
        np.testing.assert_allclose(together_pooled[row, segment - 1], alone_pooled[i], atol=2e-5, rtol=1e-5)
    absent = [(r, s) for r in range(ids_BT.shape[0]) for s in range(n_slots) if not (segments_BT[r] == s + 1).any()]
    # Pooled to zeros: a Dense module's bias makes something of them, which no sequence reads.
    pooled_slots = np.asarray(encoders.pool(together, segments_BT, n_slots, m.spec.pooling))
    assert all(not pooled_slots[r, s].any() for r, s in absent)


def assert_reproduces_variant(m: Loaded, arch, impl: str, reference: str) -> None:
    """Every text's hidden states under `arch` are those transformers recorded for a config variant (`reference`)."""
    ids_BT, segments_BT, positions_BT = unpacked(m.ids, m.spec.max_seq_length)
    hidden = np.asarray(encoders.forward(m.params, ids_BT, segments_BT, positions_BT, arch, attention_impl=impl))
    start = 0
    for i, n in enumerate(m.ref["lengths"]):
        assert cosine(hidden[i, :n], m.ref[reference][start : start + n]) >= COSINE, (i, n)
        start += n


def _long_text_cosine(m: Loaded, arch, params: dict | None = None, reference: str = "hidden") -> float:
    """The cosine of the longest text's hidden states to transformers' (`reference`: the npz's array of them)."""
    ids_BT, segments_BT, positions_BT = unpacked(m.ids, m.spec.max_seq_length)
    params = m.params if params is None else params
    hidden = np.asarray(encoders.forward(params, ids_BT, segments_BT, positions_BT, arch, attention_impl="reference"))
    n = m.ref["lengths"][-1]
    return cosine(hidden[len(m.ids) - 1, :n], m.ref[reference][-n:])


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("modernbert")])
def test_the_sliding_window_shows_in_the_fixture(name):
    """The same model attending globally everywhere misses transformers' numbers on a long text."""
    m = load(name)
    global_kinds = tuple(dataclasses.replace(k, window=None) for k in m.spec.arch.layer_kinds)
    assert _long_text_cosine(m, dataclasses.replace(m.spec.arch, layer_kinds=global_kinds)) < 0.999


def test_ntk_scaling_shows_in_the_fixture():
    m = load("gte-new-ntk")
    rope = m.spec.arch.layer_kinds[0].rope
    assert rope.ntk_factor == 2.0
    plain = (dataclasses.replace(m.spec.arch.layer_kinds[0], rope=encoders.Rope(rope.theta)),) * m.spec.arch.num_layers
    assert _long_text_cosine(m, dataclasses.replace(m.spec.arch, layer_kinds=plain)) < 0.9999


@pytest.mark.parametrize("name", NAMES)
def test_random_params_have_the_checkpoints_layout(name):
    m = load(name)
    shapes = lambda tree: jax.tree_util.tree_map_with_path(lambda path, x: (jax.tree_util.keystr(path), x.shape), tree)  # noqa: E731
    assert shapes(encoders.init_params(m.spec.arch)) == shapes(m.params)


@pytest.mark.parametrize("name", NAMES)
def test_the_shape_check_reads_what_the_loader_reads(name):
    """From the safetensors headers alone: every parameter the loaded weights have, with its shape."""
    m = load(name)
    model_dir.check_weights(m.spec)
    shapes = encoders.param_shapes(model_dir.tensor_shapes(m.spec), m.spec.arch)
    assert shapes == jax.tree.map(np.shape, m.params)


@pytest.mark.parametrize("name", NAMES)
def test_the_axes_a_mesh_splits_have_the_lengths_the_config_says(name):
    """The mesh check reads the lengths off the config (the job's driver has no weights): every parameter agrees."""
    m = load(name)
    lengths = m.spec.arch.split_axes

    def agrees(axes, array):
        assert all(lengths.get(axis, length) == length for axis, length in zip(axes, array.shape)), (axes, array.shape)

    jax.tree.map(agrees, encoders.param_axes(m.params), m.params)


def test_both_modernbert_config_layouts_describe_their_layers():
    hub, current = load("modernbert-hub-config").spec.arch, load("modernbert-layer-types").spec.arch
    assert [k.window for k in hub.layer_kinds] == [None, 8, 8, None]
    assert [k.rope.theta for k in hub.layer_kinds] == [160_000.0, 10_000.0, 10_000.0, 160_000.0]
    assert [k.window for k in current.layer_kinds] == [None, 12, None, 12, None]
    assert [k.rope.theta for k in current.layer_kinds] == [80_000.0, 5_000.0, 80_000.0, 5_000.0, 80_000.0]
    assert hub.biases == frozenset() and current.biases == encoders.ModelConfig.biases


def test_xlm_roberta_positions_start_after_the_pad_id():
    arch = load("xlm-roberta-sharded").spec.arch
    assert (arch.position_offset, arch.max_tokens) == (2, 128)
    assert load("xlm-roberta-sharded").spec.path.joinpath("model.safetensors.index.json").is_file()


def test_distilbert_reads_the_bert_names_its_config_also_accepts():
    """DistilBertConfig.attribute_map: hidden_size, num_attention_heads and num_hidden_layers set its own keys."""
    config = json.loads((FAMILY_FIXTURES / "distilbert-dense" / "config.json").read_text())
    renamed = {"dim": "hidden_size", "n_heads": "num_attention_heads", "n_layers": "num_hidden_layers"}
    aliased = {renamed.get(key, key): value for key, value in config.items()}
    assert encoders.config_from_hf(aliased) == load("distilbert-dense").spec.arch


def test_distilbert_mlm_heads_are_not_read():
    """DistilBertForMaskedLM's vocab_transform, vocab_layer_norm and vocab_projector sit outside the prefix."""
    m = load("distilbert-mlm-prefix")
    names = model_dir.tensor_shapes(m.spec)
    assert "vocab_transform.weight" in names and "distilbert.transformer.layer.1.ffn.lin2.weight" in names
    assert m.spec.arch.type_vocab_size == 0 and "token_type_D" not in m.params["embed"]


def test_mpnet_positions_start_after_pad_id_1_and_its_bias_has_32_buckets():
    """transformers' MPNet fixes padding_idx at 1 and 32 buckets up to distance 128, whatever config.json says."""
    for name in ("mpnet-base", "mpnet-mlm-prefix"):
        arch = load(name).spec.arch
        assert (arch.position_offset, arch.max_tokens, arch.type_vocab_size) == (2, 128, 0)
        assert arch.relative_buckets == encoders.RelativeBuckets(32, 128)
        assert load(name).params["embed"]["relative_bias_NR"].shape == (arch.num_heads, 32)
    config = json.loads((FAMILY_FIXTURES / "mpnet-base" / "config.json").read_text())
    assert encoders.config_from_hf(config | {"pad_token_id": 0}).position_offset == 2


@pytest.mark.parametrize(
    "name, attention", [("mpnet-base", "auto"), ("mpnet-mlm-prefix", "auto"), ("mpnet-base", "pallas")]
)
def test_the_embedder_gives_transformers_embeddings_for_mpnet(name, attention):
    """The whole load path: MPNetTokenizer's settings from tokenizer_config.json, packed rows, auto attention,
    and the Pallas kernel with the relative bias as whole tiles."""
    m = load(name)
    got = Embedder.load(str(FAMILY_FIXTURES / name), attention=attention).embed(m.texts())
    for i, want in enumerate(m.ref["pooled"]):
        assert cosine(got[i], want) >= COSINE, (name, i)


@pytest.mark.parametrize("name", ["mpnet-base", "t5-encoder-st"])
def test_the_relative_bias_shows_in_the_fixture(name):
    """Without its relative position bias, the same MPNet or T5 misses transformers' numbers."""
    m = load(name)
    zeros_NR = np.zeros_like(m.params["embed"]["relative_bias_NR"])
    params = {**m.params, "embed": {**m.params["embed"], "relative_bias_NR": zeros_NR}}
    ids_BT, segments_BT, positions_BT = unpacked(m.ids, m.spec.max_seq_length)
    hidden = np.asarray(
        encoders.forward(params, ids_BT, segments_BT, positions_BT, m.spec.arch, attention_impl="reference")
    )
    last = len(m.ids) - 1
    assert cosine(hidden[last, : m.ref["lengths"][last]], m.hidden(last)) < 0.999


@pytest.mark.parametrize(
    "name, family",
    [
        ("gte-new-ntk", "gte"),
        ("albert-shared-groups", "albert"),
        ("camembert-mlm-prefix", "xlm-roberta"),
        ("t5-encoder-st", "t5"),
        ("t5-v11-model", "t5"),
        ("mt5-encoder", "t5"),
        ("qwen3-embedding", "qwen3"),
        ("qwen2-embedding", "qwen2"),
        ("mistral-embedding", "mistral"),
        ("llama-embedding", "llama"),
        ("gemma3-embedding", "gemma3"),
    ],
)
def test_the_family_comes_from_architectures_when_model_type_is_missing(name, family):
    config = json.loads((FAMILY_FIXTURES / name / "config.json").read_text())
    del config["model_type"]
    assert encoders.config_from_hf(config).family == family


def test_t5_attends_unscaled_with_its_configs_buckets_and_rms_norms():
    """Every T5 option as config.json gives it; no learned positions and no embedding norm. The window bound:
    n_positions where config.json has it, else T5's pre-training length 512 (the relative bias itself has no
    limit)."""
    st, v11 = load("t5-encoder-st"), load("t5-v11-model")
    for m in (st, v11):
        arch = m.spec.arch
        assert (arch.norm, arch.norm_kind, arch.attention_scale, arch.biases) == ("pre", "rms", 1.0, frozenset())
        assert not (arch.embedding_norm or arch.learned_positions)
        assert set(m.params["embed"]) == {"word_VD", "relative_bias_NR"} and "ln1_bias_LD" not in m.params["layers"]
    assert st.spec.arch.relative_buckets == encoders.RelativeBuckets(16, 40)
    assert (st.spec.arch.activation, st.spec.arch.gated_mlp, st.spec.arch.max_tokens) == ("relu", False, 128)
    assert v11.spec.arch.relative_buckets == encoders.RelativeBuckets(32, 128)
    assert (v11.spec.arch.activation, v11.spec.arch.gated_mlp, v11.spec.arch.max_tokens) == ("gelu_new", True, 512)
    assert v11.spec.arch.num_heads * v11.spec.arch.head_dim == 48 != v11.spec.arch.hidden_size
    config = json.loads((FAMILY_FIXTURES / "t5-v11-model" / "config.json").read_text())
    assert encoders.config_from_hf(config | {"feed_forward_proj": "gated-silu"}).activation == "silu"
    assert encoders.config_from_hf(config | {"feed_forward_proj": "gelu"}).gated_mlp is False


def test_t5_reads_either_name_of_its_tied_embeddings_and_never_the_decoder(tmp_path):
    """t5-encoder-st holds `shared` and `encoder.embed_tokens`, t5-v11-model `shared` and a decoder: without
    the one name, or without the decoder, the same parameters."""
    for name, dropped in (
        ("t5-encoder-st", "encoder.embed_tokens."),
        ("t5-encoder-st", "shared."),
        ("t5-v11-model", "decoder."),
    ):
        path = broken_copy(tmp_path / dropped, name)
        tensors = load_file(path / "model.safetensors")
        assert any(key.startswith(dropped) for key in tensors)
        save_file({k: v for k, v in tensors.items() if not k.startswith(dropped)}, str(path / "model.safetensors"))
        got = model_dir.load_params(model_dir.resolve(str(path)))
        jax.tree.map(np.testing.assert_array_equal, got, load(name).params)


def test_albert_runs_its_groups_shared_over_projected_embeddings(tmp_path):
    """albert-shared-groups: 4 steps over 2 groups of 2 layers, so 8 layers deep and 4 stored, each step running
    its group's layers in order (the fixture's hidden states hold docembed to that), over 16-wide embeddings
    projected to 32. A config that names fewer groups, or fewer layers a group, than the weights hold would run
    the model shallower than trained: refused by the driver's check and the load alike."""
    m = load("albert-shared-groups")
    arch = m.spec.arch
    assert (arch.num_layers, arch.embedding_size, arch.hidden_size) == (8, 16, 32)
    assert arch.shared_layers == ("0.0", "0.1", "0.0", "0.1", "1.0", "1.1", "1.0", "1.1")
    up = m.params["layers"]["up_LDF"]
    np.testing.assert_array_equal(up[0], up[2])
    assert not np.array_equal(up[0], up[4])
    assert m.params["embed"]["proj_ED"].shape == (16, 32)
    for key in ("num_hidden_groups", "inner_group_num"):
        path = broken_copy(tmp_path / key, "albert-shared-groups")
        config = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps(config | {key: 1}))
        assert re.search(r"hold 'encoder.albert_layer_groups.\d.albert_layers.\d.ffn.weight', past the", refusal(path))


def test_qwen3_attends_causally_with_grouped_kv_heads_and_normed_q_and_k():
    """Every Qwen3 option as config.json gives it. Each of the three shows in the fixture: attending both ways,
    giving every query head the first K/V head, or leaving q and k unnormed misses transformers' numbers."""
    m = load("qwen3-embedding")
    arch = m.spec.arch
    assert (arch.causal, arch.num_kv_heads, arch.num_heads, arch.head_dim, arch.hidden_size) == (True, 2, 4, 32, 64)
    assert (arch.norm, arch.norm_kind, arch.biases, arch.gated_mlp, arch.activation) == (
        "pre",
        "rms",
        frozenset(),
        True,
        "silu",
    )
    assert arch.layer_kinds[0].rope.theta == 1_000_000.0 and (arch.max_tokens, m.spec.pooling) == (512, "lasttoken")
    assert not (arch.embedding_norm or arch.learned_positions) and set(m.params["embed"]) == {"word_VD"}
    assert _long_text_cosine(m, arch) >= COSINE
    assert _long_text_cosine(m, dataclasses.replace(arch, causal=False)) < 0.999
    qkv = m.params["layers"]["qkv_LDXKH"]
    # Each of the 2 K/V heads projected once, beside its 2 query heads: X is q, q, k, v.
    assert qkv.shape[2:4] == (4, 2)
    one_kv = qkv.copy()
    one_kv[:, :, 2:] = qkv[:, :, 2:, :1]
    assert _long_text_cosine(m, arch, m.params | {"layers": m.params["layers"] | {"qkv_LDXKH": one_kv}}) < 0.999
    unnormed = {k: v for k, v in m.params["layers"].items() if not k.startswith(("ln_q", "ln_k"))}
    assert _long_text_cosine(m, arch, m.params | {"layers": unnormed}) < 0.999


def _without(m: Loaded, arch, biases: set[str], params: tuple[str, ...]) -> float:
    """The long text's cosine with the `biases` groups dropped from the config and the `params` from the layers."""
    layers = {k: v for k, v in m.params["layers"].items() if k not in params}
    return _long_text_cosine(m, dataclasses.replace(arch, biases=arch.biases - biases), m.params | {"layers": layers})


def test_mistral_attends_causally_within_its_sliding_window():
    """e5-mistral's layout: no biases, every layer within sliding_window 16 (transformers' s > t - 16: window 15),
    causal, grouped-query, <s> text </s> pooled by the </s>. Attending globally, or both ways, misses
    transformers' numbers."""
    m = load("mistral-embedding")
    arch = m.spec.arch
    assert [k.window for k in arch.layer_kinds] == [15, 15, 15] and arch.causal and not arch.qk_norm
    assert (arch.num_heads, arch.num_kv_heads, arch.head_dim, arch.biases) == (4, 2, 16, frozenset())
    assert (m.spec.pooling, m.ids[0][-1]) == ("lasttoken", 2), "the </s> the tokenizer appends is pooled"
    assert _long_text_cosine(m, arch) >= COSINE
    global_kinds = tuple(dataclasses.replace(k, window=None) for k in arch.layer_kinds)
    assert _long_text_cosine(m, dataclasses.replace(arch, layer_kinds=global_kinds)) < 0.999
    assert _long_text_cosine(m, dataclasses.replace(arch, causal=False)) < 0.999
    config = json.loads((m.spec.path / "config.json").read_text())
    # Null (later Mistral configs), or a window past every position (as e5-mistral's 4096 over its 32768 is not).
    for change in ({"sliding_window": None}, {"sliding_window": 512}):
        assert [k.window for k in encoders.config_from_hf(config | change).layer_kinds] == [None] * 3


@pytest.mark.parametrize("impl", IMPLS)
def test_qwen2_biases_q_k_and_v_and_slides_where_its_flags_say(impl):
    """gte-Qwen2's layout: q, k, v biases (o_proj none), causal, full attention; the same weights with
    use_sliding_window from max_window_layers 1, window 16, are transformers' `hidden_sliding`. Dropping the
    biases, attending both ways, or not sliding misses transformers' numbers."""
    m = load("qwen2-embedding")
    arch = m.spec.arch
    assert (arch.biases, arch.causal, arch.num_kv_heads, arch.head_dim) == (frozenset({"qkv"}), True, 2, 16)
    assert [k.window for k in arch.layer_kinds] == [None] * 3 and "out_bias_LD" not in m.params["layers"]
    assert _without(m, arch, {"qkv"}, ("qkv_bias_LXKH",)) < 0.999
    assert _long_text_cosine(m, dataclasses.replace(arch, causal=False)) < 0.999
    config = json.loads((m.spec.path / "config.json").read_text())
    change = {"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 1, "layer_types": None}
    sliding = encoders.config_from_hf(config | change)
    assert [k.window for k in sliding.layer_kinds] == [None, 15, 15]
    assert_reproduces_variant(m, sliding, impl, "hidden_sliding")
    assert _long_text_cosine(m, arch, reference="hidden_sliding") < 0.999
    # The window in use only with use_sliding_window, as Qwen2Config reads it.
    assert encoders.config_from_hf(config | change | {"use_sliding_window": False}) == arch


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name, windows", [("qwen2-embedding", [None] * 3), ("mistral-embedding", [16] * 3)])
def test_is_causal_false_attends_both_ways_as_transformers_does(name, windows, impl):
    """`is_causal: false`, which transformers 5 reads as its masks are made: a token sees its whole sequence, a
    sliding layer the tokens at |t - s| <= sliding_window (16), as transformers ran the same weights
    (`hidden_bidirectional`); the causal model misses those numbers."""
    m = load(name)
    config = json.loads((m.spec.path / "config.json").read_text())
    arch = encoders.config_from_hf(config | {"is_causal": False})
    assert not arch.causal and [k.window for k in arch.layer_kinds] == windows
    assert_reproduces_variant(m, arch, impl, "hidden_bidirectional")
    assert _long_text_cosine(m, m.spec.arch, reference="hidden_bidirectional") < 0.999


def test_llama_reads_its_bias_flags_and_llama3_rope():
    """A LlamaModel with attention_bias and mlp_bias, llama3 RoPE over 64 original positions: each shows."""
    m = load("llama-embedding")
    arch = m.spec.arch
    assert arch.biases == frozenset({"qkv", "out", "mlp_in", "mlp_out"}) and arch.head_dim == 24
    assert arch.layer_kinds[0].rope == encoders.Rope(10_000.0, llama3=(8.0, 1.0, 4.0, 64.0))
    assert _long_text_cosine(m, arch) >= COSINE
    assert _without(m, arch, {"qkv", "out"}, ("qkv_bias_LXKH", "out_bias_LD")) < 0.999
    assert _without(m, arch, {"mlp_in", "mlp_out"}, ("up_bias_LF", "gate_bias_LF", "down_bias_LD")) < 0.999
    default_rope = tuple(dataclasses.replace(k, rope=encoders.Rope(k.rope.theta)) for k in arch.layer_kinds)
    assert _long_text_cosine(m, dataclasses.replace(arch, layer_kinds=default_rope)) < 0.999
    config = json.loads((m.spec.path / "config.json").read_text())
    assert encoders.config_from_hf(config | {"attention_bias": False, "mlp_bias": False}).biases == frozenset()


def test_llama3_frequencies_are_transformers():
    """transformers' _compute_llama3_parameters on Llama 3.1-8B's values (theta 500000, head_dim 128, factor 8,
    low 1, high 4, 8192 original positions), recorded from LlamaRotaryEmbedding(...).inv_freq with transformers
    5.24 at the high, smoothed and low ends. (From torch's own default frequencies, `_llama3` gives its values bit
    for bit; the llama-embedding fixture's hidden states are the end-to-end check.)"""
    rope = encoders.Rope(500_000.0, llama3=(8.0, 1.0, 4.0, 8192.0))
    inv_W = rope.inv_freq(128)
    default_W = encoders.Rope(500_000.0).inv_freq(128)
    wavelen_W = 2 * np.pi / default_W
    np.testing.assert_array_equal(inv_W[wavelen_W < 2048], default_W[wavelen_W < 2048])
    np.testing.assert_allclose(inv_W[wavelen_W > 8192], default_W[wavelen_W > 8192] / 8, rtol=1e-7)
    # Within one float32 ulp: numpy's float32 power and torch's may round the default frequencies apart.
    np.testing.assert_allclose(inv_W[[20, 29, 31, 33, 50]], LLAMA31_INV_FREQ, rtol=1.2e-7)


@pytest.mark.parametrize(
    "name, prefix, architecture",
    [
        ("qwen3-embedding", "model.", "Qwen3ForCausalLM"),
        ("qwen2-embedding", "model.", "Qwen2ForCausalLM"),
        ("mistral-embedding", "model.", "MistralForCausalLM"),
        ("llama-embedding", "model.", "LlamaForCausalLM"),
        ("gemma3-embedding", "model.", "Gemma3ForCausalLM"),
        ("gemma3-embedding", "model.language_model.", "Gemma3TextModel"),
    ],
)
def test_decoders_read_their_causal_lm_layout_and_never_its_lm_head(tmp_path, name, prefix, architecture):
    """Qwen3ForCausalLM's and Gemma3ForCausalLM's tensors: the same under `model.` (or a Gemma3TextModel's under
    `model.language_model.`, as multimodal Gemma3 checkpoints hold it), beside an `lm_head` that is never read."""
    path = broken_copy(tmp_path, name)
    tensors = load_file(path / "model.safetensors")
    causal_lm = {prefix + k: v for k, v in tensors.items()} | {"lm_head.weight": tensors["embed_tokens.weight"]}
    save_file(causal_lm, str(path / "model.safetensors"))
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | {"architectures": [architecture]}))
    got = model_dir.load_params(model_dir.resolve(str(path)))
    jax.tree.map(np.testing.assert_array_equal, got, load(name).params)


def test_gemma3_reads_embeddinggemmas_options():
    """Every Gemma3 option as config.json gives it: bidirectional attention, sliding layers within
    sliding_window // 2 (16 // 2) either side with the local theta, the full layer with the global one, 2 K/V
    heads for 4 query heads, scores scaled by query_pre_attn_scalar (24), embeddings by sqrt(64), four norms a
    layer, Gemma's RMSNorm weights read as 1 + weight."""
    m = load("gemma3-embedding")
    arch = m.spec.arch
    assert [k.window for k in arch.layer_kinds] == [8, 8, None, 8] and not arch.causal
    assert [k.rope.theta for k in arch.layer_kinds] == [10_000.0, 10_000.0, 1_000_000.0, 10_000.0]
    assert (arch.num_heads, arch.num_kv_heads, arch.head_dim, arch.hidden_size) == (4, 2, 32, 64)
    assert (arch.attention_scale, arch.embed_scale) == (24**-0.5, 8.0)
    assert (arch.norm, arch.norm_kind, arch.biases, arch.activation, arch.qk_norm) == (
        "sandwich",
        "rms",
        frozenset(),
        "gelu_pytorch_tanh",
        True,
    )
    assert not (arch.embedding_norm or arch.learned_positions) and set(m.params["embed"]) == {"word_VD"}
    assert (m.spec.pooling, [p.activation for p in m.spec.projections]) == ("mean", ["identity", "identity"])
    tensors = load_file(m.spec.path / "model.safetensors")
    np.testing.assert_array_equal(
        m.params["layers"]["ln_mlp_out_scale_LD"][1],
        1 + tensors["layers.1.post_feedforward_layernorm.weight"].astype(np.float32),
    )


def test_gemma3s_mechanisms_each_show_in_the_fixture():
    """Dropping any of them misses transformers' numbers: Gemma's 1 + weight, the embedding scale, the norms of
    each block's output, the sliding window, attending both ways; and the scale by query_pre_attn_scalar."""
    m = load("gemma3-embedding")
    arch, layers = m.spec.arch, m.params["layers"]
    assert _long_text_cosine(m, arch) >= COSINE

    def minus_one(group: dict) -> dict:
        return {k: v - 1 if k.startswith("ln") else v for k, v in group.items()}

    weights_as_scales = m.params | {"layers": minus_one(layers), "final": minus_one(m.params["final"])}
    assert _long_text_cosine(m, arch, weights_as_scales) < 0.999
    assert _long_text_cosine(m, dataclasses.replace(arch, embed_scale=1.0)) < 0.999
    unsandwiched = {k: v for k, v in layers.items() if not k.startswith(("ln_attn_out", "ln_mlp_out"))}
    assert _long_text_cosine(m, dataclasses.replace(arch, norm="pre"), m.params | {"layers": unsandwiched}) < 0.999
    global_kinds = tuple(dataclasses.replace(k, window=None) for k in arch.layer_kinds)
    assert _long_text_cosine(m, dataclasses.replace(arch, layer_kinds=global_kinds)) < 0.999
    assert _long_text_cosine(m, dataclasses.replace(arch, causal=True)) < 0.999
    assert _long_text_cosine(m, dataclasses.replace(arch, attention_scale=None)) < 0.999


@pytest.mark.parametrize("impl", IMPLS)
def test_a_gemma3_decoder_attends_causally_within_its_sliding_window(impl):
    """use_bidirectional_attention false: causal, a sliding layer seeing the sliding_window - 1 tokens before
    (transformers' s > t - sliding_window), as transformers ran the same weights (`hidden_causal`)."""
    m = load("gemma3-embedding")
    config = json.loads((m.spec.path / "config.json").read_text())
    arch = encoders.config_from_hf(config | {"use_bidirectional_attention": False})
    assert arch.causal and [k.window for k in arch.layer_kinds] == [15, 15, None, 15]
    assert_reproduces_variant(m, arch, impl, "hidden_causal")
    assert _long_text_cosine(m, dataclasses.replace(arch, causal=False), reference="hidden_causal") < 0.999


# --- bad models: each one clear error ------------------------------------------------------------


def broken_copy(tmp_path, name: str) -> Path:
    path = tmp_path / name
    shutil.copytree(FAMILY_FIXTURES / name, path)
    return path


def refusal(path: Path) -> str:
    """The message of the ModelError that the driver's shape check and the actors' load both raise, alike."""
    spec = model_dir.resolve(str(path))
    with pytest.raises(ModelError) as checked:
        model_dir.check_weights(spec)
    with pytest.raises(ModelError) as loaded:
        model_dir.load_params(spec)
    assert str(checked.value) == str(loaded.value)
    return str(checked.value)


def test_an_unknown_model_type_names_the_supported_ones(tmp_path):
    with pytest.raises(encoders.UnsupportedModel) as e:
        encoders.config_from_hf({"model_type": "bart", "architectures": ["BartModel"]})
    assert str(e.value) == (
        "model_type 'bart' (architectures ['BartModel']) is not supported; supported "
        "model_types: bert, distilbert, xlm-roberta, roberta, camembert, mpnet, modernbert, nomic_bert, gte, new, t5, "
        "mt5, qwen3, qwen2, mistral, llama, gemma3_text, albert"
    )
    path = broken_copy(tmp_path, "bert-pooler")
    (path / "config.json").write_text(json.dumps({"model_type": "bart"}))
    with pytest.raises(ModelError, match="'bart'.*not supported"):
        model_dir.resolve(str(path))


@pytest.mark.parametrize(
    "name, missing, reported",
    [
        ("modernbert-hub-config", "model.layers.2.attn.Wqkv.weight", "layers.2.attn.Wqkv.weight"),
        ("nomic-contrastors", "encoder.layers.1.mlp.fc12.weight", "encoder.layers.1.mlp.fc12.weight"),
        ("gte-new-ntk", "new.encoder.layer.0.mlp.up_gate_proj.weight", "encoder.layer.0.mlp.up_gate_proj.weight"),
        ("mpnet-mlm-prefix", "mpnet.encoder.relative_attention_bias.weight", "encoder.relative_attention_bias.weight"),
        (
            "t5-v11-model",
            "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
            "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
        ),
        (
            "t5-v11-model",
            "encoder.block.1.layer.1.DenseReluDense.wi_1.weight",
            "encoder.block.1.layer.1.DenseReluDense.wi_1.weight",
        ),
    ],
)
def test_missing_tensors_are_named(tmp_path, name, missing, reported):
    """Named without the model prefix, which the loader strips."""
    path = broken_copy(tmp_path, name)
    tensors = load_file(path / "model.safetensors")
    del tensors[missing]
    save_file(tensors, str(path / "model.safetensors"))
    assert f"lack tensor '{reported}', which a {load(name).spec.arch.family} model" in refusal(path)


@pytest.mark.parametrize(
    "name, change, reported",
    [
        ("bert-pooler", {"num_hidden_layers": 4}, "encoder.layer.3.attention.self.query.weight"),
        ("nomic-contrastors", {"n_layer": 3}, "encoder.layers.2.attn.Wqkv.weight"),
        ("modernbert-hub-config", {"num_hidden_layers": 5}, "layers.4.attn_norm.weight"),
        ("t5-encoder-st", {"num_layers": 4}, "encoder.block.3.layer.0.layer_norm.weight"),
    ],
)
def test_more_layers_than_the_weights_hold_are_refused(tmp_path, name, change, reported):
    path = broken_copy(tmp_path, name)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | change))
    assert f"the weights lack tensor '{reported}'" in refusal(path)


def test_a_missing_shard_is_named(tmp_path):
    path = broken_copy(tmp_path, "xlm-roberta-sharded")
    (path / "model-00002-of-00004.safetensors").unlink()
    with pytest.raises(ModelError, match="names shard 'model-00002-of-00004.safetensors', which is not in"):
        model_dir.resolve(str(path))


@pytest.mark.parametrize(
    "name, change, message",
    [
        (
            "bert-pooler",
            {"intermediate_size": 96},
            r"'encoder.layer.0.intermediate.dense.weight' has shape \(80, 48\).*"
            r"implies \(96, 48\)",
        ),
        (
            "modernbert-layer-types",
            {"intermediate_size": 32},
            r"'layers.0.mlp.Wi.weight' has shape \(128, 48\).*"
            r"implies \(64, 48\)",
        ),
        ("nomic-transformers", {"hidden_size": 64}, r"has shape .* implies"),
        ("gte-transformers", {"vocab_size": 500}, r"'embeddings.word_embeddings.weight' has shape \(400, 48\)"),
        (
            "distilbert-dense",
            {"hidden_dim": 96},
            r"'transformer.layer.0.ffn.lin1.weight' has shape \(80, 48\).*implies \(96, 48\)",
        ),
        ("distilbert-mlm-prefix", {"max_position_embeddings": 256}, r"'embeddings.position_embeddings.weight' has"),
        (
            "t5-v11-model",
            {"d_kv": 8},
            r"'encoder.block.0.layer.0.SelfAttention.q.weight' has shape \(48, 32\).*implies \(32, 32\)",
        ),
        (
            "t5-encoder-st",
            {"relative_attention_num_buckets": 32},
            r"relative_attention_bias.weight' has shape \(16, 6\)",
        ),
    ],
)
def test_shapes_that_contradict_the_config_are_refused(tmp_path, name, change, message):
    path = broken_copy(tmp_path, name)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | change))
    assert re.search(message, refusal(path))


def test_a_window_longer_than_the_positions_is_refused():
    arch = load("xlm-roberta-sharded").spec.arch
    encoders.check_window(arch, 128)
    with pytest.raises(encoders.WindowTooLong, match="129 tokens is longer than this xlm-roberta model's 128"):
        encoders.check_window(arch, 129)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"rope_scaling": {"type": "yarn", "factor": 4.0}}, "rope_scaling"),
        ({"layer_types": ["full_attention"]}, "layer_types must list 4"),
    ],
)
def test_modernbert_options_not_implemented_are_refused(change, message):
    config = json.loads((FAMILY_FIXTURES / "modernbert-hub-config" / "config.json").read_text())
    with pytest.raises(encoders.UnsupportedModel, match=message):
        encoders.config_from_hf(config | change)


@pytest.mark.parametrize("local_attention", [1022, 1024, 4096])
def test_a_modernbert_window_that_reaches_every_position_is_global_attention(local_attention):
    config = json.loads((FAMILY_FIXTURES / "modernbert-hub-config" / "config.json").read_text())
    config |= {"max_position_embeddings": 512, "local_rope_theta": config.get("global_rope_theta", 160_000.0)}
    every_layer_global = encoders.config_from_hf(config | {"global_attn_every_n_layers": 1})
    assert encoders.config_from_hf(config | {"local_attention": local_attention}) == every_layer_global
    assert encoders.config_from_hf(config | {"local_attention": 1020}) != every_layer_global  # 510: not all 511


@pytest.mark.parametrize(
    "name, change, message",
    [
        # A value of the wrong type: one line naming the key, never a traceback.
        ("xlm-roberta-mlm-prefix", {"pad_token_id": None}, "pad_token_id None is not a whole number"),
        ("bert-pooler", {"layer_norm_eps": None}, "layer_norm_eps None is not a number"),
        ("bert-pooler", {"type_vocab_size": None}, "type_vocab_size None is not a whole number"),
        ("bert-pooler", {"num_attention_heads": None}, "num_attention_heads None is not a whole number of at least 1"),
        ("bert-pooler", {"num_attention_heads": [6]}, r"num_attention_heads \[6\] is not a whole number"),
        ("bert-pooler", {"num_attention_heads": 0}, "num_attention_heads 0 is not a whole number of at least 1"),
        ("bert-pooler", {"max_position_embeddings": "128"}, "max_position_embeddings '128' is not a whole number"),
        ("bert-pooler", {"hidden_size": 48.5}, "hidden_size 48.5 is not a whole number"),
        ("modernbert-hub-config", {"local_attention": None}, "local_attention None is not a whole number"),
        ("modernbert-hub-config", {"global_attn_every_n_layers": 0}, "global_attn_every_n_layers 0 is not a whole"),
        ("modernbert-layer-types", {"rope_parameters": "default"}, "rope_parameters 'default' is not a mapping"),
        ("modernbert-layer-types", {"layer_types": "full_attention"}, "layer_types must list .* got 'full_attention'"),
        ("gte-transformers", {"rope_parameters": "default"}, "rope_parameters 'default' is not a mapping"),
        ("nomic-transformers", {"rope_parameters": 1000.0}, "rope_parameters 1000.0 is not a mapping"),
        ("nomic-contrastors", {"n_embd": None}, "n_embd None is not a whole number"),
        ("distilbert-dense", {"dim": None}, "dim None is not a whole number"),
        ("distilbert-mlm-prefix", {"n_layers": "2"}, "n_layers '2' is not a whole number"),
        ("gte-new-ntk", {"rope_scaling": {"type": "ntk", "factor": "2"}}, "factor '2' is not a number"),
        ("t5-encoder-st", {"d_kv": None}, "d_kv None is not a whole number"),
        ("t5-encoder-st", {"relative_attention_max_distance": 2}, "relative buckets need"),
    ],
)
def test_malformed_config_values_are_one_model_error_naming_the_key(tmp_path, name, change, message):
    path = broken_copy(tmp_path, name)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | change))
    with pytest.raises(ModelError, match=f"config.json: .*{message}") as refused:
        model_dir.resolve(str(path))
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "name, change, message",
    [
        ("nomic-contrastors", {"prenorm": True}, "prenorm=True is not implemented"),
        ("nomic-contrastors", {"rotary_emb_fraction": 0.5}, "rotary_emb_fraction"),
        ("nomic-contrastors", {"activation_function": "gelu"}, "activation_function 'gelu'"),
        ("nomic-contrastors", {"moe_every_n_layers": 2, "num_experts": 8}, "moe_every_n_layers=2 is not implemented"),
        ("gte-new-ntk", {"rope_scaling": {"type": "linear", "factor": 2.0}}, "RoPE scaling 'linear'"),
        ("gte-new-ntk", {"logn_attention_scale": True}, "logn_attention_scale"),
        ("distilbert-dense", {"n_heads": 5}, "distilbert: dim 48 is not divisible by 5 heads"),
        ("distilbert-mlm-prefix", {"activation": "tanh"}, "unsupported activation .*'tanh'"),
        ("mpnet-base", {"relative_attention_num_buckets": 64}, "relative_attention_num_buckets 64"),
        ("t5-encoder-st", {"feed_forward_proj": "gated-tanh"}, "t5: feed_forward_proj 'gated-tanh' is not implemented"),
        ("t5-encoder-st", {"feed_forward_proj": "double-gelu"}, "feed_forward_proj 'double-gelu'"),
        (
            "qwen3-embedding",
            {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}},
            "qwen3: RoPE scaling 'yarn' is not implemented; known: default",
        ),
        (
            "qwen3-embedding",
            {"rope_parameters": None, "rope_theta": 1e6, "rope_scaling": {"type": "dynamic", "factor": 2.0}},
            "qwen3: RoPE scaling 'dynamic'",
        ),
        (
            "qwen3-embedding",
            {"layer_types": None, "use_sliding_window": True, "max_window_layers": 1},
            r"qwen3: sliding window attention \(layers 1..2\) is not implemented",
        ),
        (
            "qwen3-embedding",
            {"layer_types": ["full_attention", "sliding_attention", "full_attention"]},
            r"qwen3: sliding window attention \(layers 1..1\)",
        ),
        ("qwen3-embedding", {"attention_bias": True}, "qwen3: attention_bias true is not implemented"),
        ("qwen3-embedding", {"num_key_value_heads": 3}, "qwen3: 4 attention heads are not a multiple of 3 K/V heads"),
        (
            "gemma3-embedding",
            {"attn_logit_softcapping": 50.0},
            "gemma3: attn_logit_softcapping 50.0 is not implemented",
        ),
        ("gemma3-embedding", {"attention_bias": True}, "gemma3: attention_bias true is not implemented"),
        (
            "gemma3-embedding",
            {"rope_parameters": None, "rope_scaling": {"rope_type": "linear", "factor": 8.0}},
            r"gemma3: RoPE scaling 'linear' \(full_attention\) is not implemented; known: default",
        ),
        ("gemma3-embedding", {"layer_types": ["full_attention"] * 3}, "gemma3: layer_types must list 4"),
        ("gemma3-embedding", {"num_key_value_heads": 3}, "gemma3: 4 attention heads are not a multiple of 3 K/V"),
        ("mistral-embedding", {"attention_bias": True}, "mistral: attention_bias true is not implemented"),
        (
            "qwen2-embedding",
            {"layer_types": ["full_attention", "sliding_attention", "full_attention"]},
            r"qwen2: layer_types slide \(layers \[1\]\) without a sliding_window in use",
        ),
        (
            "llama-embedding",
            {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}},
            "llama: RoPE scaling 'yarn' is not implemented; known: default, llama3",
        ),
        (
            "llama-embedding",
            {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}},
            "llama: partial_rotary_factor 0.5 is not implemented",
        ),
    ],
)
def test_other_options_not_implemented_are_refused(name, change, message):
    config = json.loads((FAMILY_FIXTURES / name / "config.json").read_text())
    with pytest.raises(encoders.UnsupportedModel, match=message) as refused:
        encoders.config_from_hf(config | change)
    assert "\n" not in str(refused.value)


def test_qwen3_sliding_window_flags_that_slide_no_layer_are_full_attention():
    """As Qwen3Config derives layer_types: use_sliding_window with max_window_layers past the last layer slides
    none; layer_types, where given, win."""
    config = json.loads((FAMILY_FIXTURES / "qwen3-embedding" / "config.json").read_text())
    plain = encoders.config_from_hf(config)
    assert encoders.config_from_hf(config | {"layer_types": None, "use_sliding_window": True}) == plain
    assert encoders.config_from_hf(config | {"use_sliding_window": True}) == plain
    assert encoders.config_from_hf(config | {"num_key_value_heads": None}).num_kv_heads == 4


@pytest.mark.parametrize("name", NAMES)
def test_bfloat16_projections_on_onednn_equal_xlas(name):
    """bfloat16 weights, float32 activations, as a CPU runs bfloat16: the oneDNN kernel computes what XLA's
    dots compute (the same rounded operands, float32 sums), through each family's biases, activation and
    gated or plain MLP; and both stay near transformers' float32."""
    why = unavailable("onednn")
    if why is not None:
        pytest.skip(f"oneDNN kernel: {why}")
    m = load(name)
    params = encoders.cast_params(m.params, jnp.bfloat16, jnp.float32)
    ids_BT, segments_BT, positions_BT = unpacked(m.ids, m.spec.max_seq_length)
    hidden = {
        impl: np.asarray(
            jax.jit(lambda p, i, s, q, impl=impl: encoders.forward(p, i, s, q, m.spec.arch, dense_impl=impl))(
                params, ids_BT, segments_BT, positions_BT
            )
        )
        for impl in ("xla", "onednn")
    }
    for i, n in enumerate(m.ref["lengths"]):
        assert cosine(hidden["onednn"][i, :n], hidden["xla"][i, :n]) >= COSINE, (i, n)
        assert cosine(hidden["onednn"][i, :n], m.hidden(i)) >= 0.999, (i, n)


def test_gemma3s_older_config_keys_describe_the_same_layers():
    """rope_theta and rope_local_base_freq for rope_parameters, layer types from sliding_window_pattern (every
    3rd layer full: sliding, sliding, full, sliding), as Gemma3TextConfig reads them; a window that reaches every
    position is full attention."""
    config = json.loads((FAMILY_FIXTURES / "gemma3-embedding" / "config.json").read_text())
    legacy = config | {
        "rope_parameters": None,
        "rope_theta": 1_000_000.0,
        "rope_local_base_freq": 10_000.0,
        "layer_types": None,
        "sliding_window_pattern": 3,
    }
    assert encoders.config_from_hf(legacy) == load("gemma3-embedding").spec.arch
    wide = encoders.config_from_hf(config | {"sliding_window": 1022})
    assert [k.window for k in wide.layer_kinds] == [None] * 4
    assert [k.window for k in encoders.config_from_hf(config | {"sliding_window": 1020}).layer_kinds][0] == 510


# LlamaRotaryEmbedding's inv_freq for Llama 3.1-8B's rope_parameters (transformers 5.24), entries 20 (kept),
# 29, 31, 33 (smoothed: wavelengths 2402, 3619, 5454 between 8192 / 4 and 8192) and 50 (divided by 8).
LLAMA31_INV_FREQ = [
    0.016560440883040428,
    0.0021665706299245358,
    0.0008567514596506953,
    0.0003126936499029398,
    4.411534519022098e-06,
]


@pytest.mark.parametrize("name", [n for n in NAMES if model_dir.resolve(str(FAMILY_FIXTURES / n)).arch.causal])
def test_causal_decoders_packed_under_the_pallas_kernel_are_transformers(name):
    """The decoders' causal attention (and Mistral's sliding window over it) in this project's flash kernel,
    Pallas interpret mode here, on packed rows: each sequence's hidden states are transformers'."""
    m = load(name)
    ids_BT, segments_BT, positions_BT, where = packed(m.ids, 2 * m.spec.max_seq_length)
    hidden = np.asarray(
        encoders.forward(m.params, ids_BT, segments_BT, positions_BT, m.spec.arch, attention_impl="pallas")
    )
    for i, (row, start, _) in enumerate(where):
        n = len(m.ids[i])
        assert cosine(hidden[row, start : start + n], m.hidden(i)) >= COSINE, (i, n)
