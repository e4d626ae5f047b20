"""What the encoder families share: one parameter layout, one forward pass over the config of `_config`.

Shape letters used in names and docstrings:
  B batch, T tokens (sequence), D hidden, E embeddings narrower than D (ALBERT's), N heads, H head_dim, F MLP hidden,
  L layers, V vocabulary, P positions, W rotary frequencies (H / 2), S sequences packed in a row,
  K K/V heads (N, or fewer under grouped-query attention, each serving G = N / K query heads),
  X what a K/V head's projection makes: its G query heads, then its key and its value (3 without groups),
  I, O a projection's input and output features after pooling (sentence-transformers' Dense).

Every family maps its checkpoint onto the same pytree:

  embed:  word_VD, [position_PD], [token_type_D], [ln_scale_D], [ln_bias_D], [relative_bias_NR]
          (ALBERT's factorised embeddings: word_VE, position_PE, token_type_E, ln_scale_E, ln_bias_E, then
          proj_ED proj_bias_D, which take them to D)
  layers: qkv_LDXKH [qkv_bias_LXKH]   out_LNHD [out_bias_LD]
          ln1_scale_LD [ln1_bias_LD]   up_LDF [up_bias_LF] [gate_LDF [gate_bias_LF]]
          down_LFD [down_bias_LD]      ln2_scale_LD [ln2_bias_LD]
          [ln_q_scale_LH ln_k_scale_LH]  (Qwen3's and Gemma3's RMSNorm of each head's q and k)
          [ln_attn_out_scale_LD ln_mlp_out_scale_LD]  (Gemma3's norms of each block's output)
  final:  ln_scale_D [ln_bias_D]       (pre-norm families only)

Bracketed entries exist only where the family has them (a bias-free ModernBERT
has none); the forward pass adds what is there. Every projection is a
`kernels.dense` call: its bias and the MLP's activation go with it, to the
implementation the dispatch chose. The families differ in what the
config says: post- or pre-norm, LayerNorm or RMSNorm, plain or gated MLP, learned
positions or RoPE (theta and scaling per layer) or none, a sliding window per layer,
the attention's scale, and MPNet's and T5's relative position bias, one table shared
by every layer's attention; Qwen3 attends causally and norms each head's q and k; Gemma3 scales its
embeddings and norms each block's output as well as its input (a "sandwich").

Layers are stacked along L and run with one `lax.scan`, so a model of any depth
compiles one layer body. Where layers differ in how they attend (ModernBERT:
global with one RoPE theta, or a sliding window with another), the body picks
the layer's attention with `lax.switch` on a scanned layer index: each distinct
kind of attention is compiled once, and only the layer's own kind runs.

Parameter names end in their shape letters, so `param_axes` reads every
parameter's logical axes off its name and `kernels.sharding` places every family
over data x model unchanged. Under `shard_map` the same `forward` runs on each
device's shards: heads and F split, the contractions over them completed by a
psum.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from kernels.attention import RelativeBias, attention
from kernels.attention._platform import platform
from kernels.bfloat16_bits import as_bits, from_bits
from kernels.dense import dense
from kernels.encoders._config import ACTIVATIONS, LayerKind, ModelConfig, Params
from kernels.precision import MATMUL_PRECISION
from kernels.sharding import sum_shards
from kernels.sharding_rules import ShardingRules

AXES = {
    "B": "batch",
    "T": "seq",
    "D": "embed",
    "E": "embedding",  # never split: the embeddings are replicated, as D is
    "N": "heads",
    "H": "head_dim",
    "F": "mlp",
    "L": "layers",
    "V": "vocab",
    "P": "positions",
    "S": "slots",  # the sequences packed into a row, pooled one per slot
    "K": "kv_heads",  # K/V heads, split with the query heads that use them (grouped-query attention)
    # A K/V head's query heads, then its key and its value (q, k, v without groups): never split, so that
    # each device holds all of its heads' projections.
    "X": "qkv",
    # A projection's input and output features after pooling (`_pooling.project`): never split, every device
    # projects its own rows' sequences.
    "I": "projection_in",
    "O": "projection_out",
    "R": "buckets",  # of a relative position bias's distances
}


def logical(letters: str) -> P:
    """Shape letters -> logical axes: 'BTD' -> P('batch', 'seq', 'embed')."""
    return P(*(AXES[letter] for letter in letters))


def param_axes(params: Params) -> Any:
    """The params pytree with each array replaced by its logical axes, read off
    the name's shape suffix (`out_LNHD` -> P('layers', 'heads', 'head_dim', 'embed'))."""

    def axes(path, leaf):
        name = path[-1].key
        letters = name.rsplit("_", 1)[-1]
        if len(letters) != np.ndim(leaf):
            raise ValueError(f"parameter {name!r} of shape {np.shape(leaf)} does not match its suffix {letters!r}")
        return logical(letters)

    return jax.tree_util.tree_map_with_path(axes, params)


# The projections' weights: what `kernels.dense` multiplies by.
MATMUL_WEIGHTS = frozenset(("qkv_LDXKH", "out_LNHD", "up_LDF", "gate_LDF", "down_LFD"))


def cast_params(params: Params, dtype: jnp.dtype, activations: jnp.dtype | None = None) -> Params:
    """Casts the matmul weights to the compute dtype `dtype`, embeddings and biases to the dtype of the
    activations (default `dtype`), which the forward pass then runs in; layer-norm parameters stay float32."""
    activations = dtype if activations is None else activations

    def cast(path, leaf):
        if any(getattr(k, "key", "").startswith("ln") for k in path):
            return leaf
        return leaf.astype(dtype if path[-1].key in MATMUL_WEIGHTS else activations)

    return jax.tree_util.tree_map_with_path(cast, params)


def layer_norm(x_BTD, scale_D, bias_D, eps: float, kind: str = "layer"):
    """LayerNorm, or with kind "rms" T5's RMSNorm (x / rms(x) * scale: no mean subtracted, no bias);
    bias_D None for the bias-free norms of ModernBERT and T5."""
    # Statistics in float32 whatever the compute dtype: bfloat16 variance of
    # hundreds of values loses most of its mantissa.
    x = x_BTD.astype(jnp.float32)
    if kind == "layer":
        x = x - x.mean(-1, keepdims=True)
    var = jnp.square(x).mean(-1, keepdims=True)
    y = x * jax.lax.rsqrt(var + eps) * scale_D
    if bias_D is not None:
        y = y + bias_D
    return y.astype(x_BTD.dtype)


def _plus(x, bias):
    return x if bias is None else x + bias


def rope_tables(positions_BT, inv_freq_W):
    """cos, sin [B, T, W] float32 of each token's position (within its own sequence)."""
    angles_BTW = positions_BT.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq_W)
    return jnp.cos(angles_BTW), jnp.sin(angles_BTW)


def apply_rope(x_BTNH, cos_BTW, sin_BTW):
    """Rotates pairs (i, i + W) of each head by its token's angles, in float32."""
    x = x_BTNH.astype(jnp.float32)
    W = x.shape[-1] // 2
    x1, x2 = x[..., :W], x[..., W:]
    cos, sin = cos_BTW[:, :, None, :], sin_BTW[:, :, None, :]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x_BTNH.dtype)


def embed(emb: Params, ids_BT, positions_BT, cfg: ModelConfig):
    """Token (+ learned position, + token type 0) embeddings, normed where the model norms them: [B, T, D].
    Factorised ones (ALBERT's, E wide) are summed and normed as they are, then projected to D."""
    e = "D" if cfg.embedding_size is None else "E"
    x = emb[f"word_V{e}"][ids_BT]
    if cfg.embed_scale != 1.0:  # in the embeddings' dtype, as transformers' Gemma3 multiplies
        x = x * jnp.asarray(cfg.embed_scale, x.dtype)
    if f"position_P{e}" in emb:
        x = x + emb[f"position_P{e}"][positions_BT + cfg.position_offset]
    if f"token_type_{e}" in emb:
        x = x + emb[f"token_type_{e}"]
    if cfg.embedding_norm:
        x = layer_norm(x, emb[f"ln_scale_{e}"], emb.get(f"ln_bias_{e}"), cfg.norm_eps, cfg.norm_kind)
    if e == "D":
        return x
    return jnp.einsum("bte,ed->btd", x, emb["proj_ED"], precision=MATMUL_PRECISION) + emb["proj_bias_D"]


def mlp(x_BTD, layer: Params, cfg: ModelConfig, rules: ShardingRules | None, dense_impl: str):
    """Plain or gated MLP. F is split over `model`: the down-projection is a partial sum until psummed."""
    act = ACTIVATIONS[cfg.activation]
    project = functools.partial(dense, impl=dense_impl)
    if cfg.gated_mlp:
        gate_BTF = project(x_BTD, layer["gate_LDF"], layer.get("gate_bias_LF"), activation=act)
        h_BTF = gate_BTF * project(x_BTD, layer["up_LDF"], layer.get("up_bias_LF"))
    else:
        # In the dtype the down-projection rounds it to anyway: half the bytes where that is bfloat16.
        h_BTF = project(
            x_BTD, layer["up_LDF"], layer.get("up_bias_LF"), activation=act, out_dtype=layer["down_LFD"].dtype
        )
    down_BTD = sum_shards(project(h_BTF, layer["down_LFD"], out_dtype=x_BTD.dtype), "mlp", rules)
    return _plus(down_BTD, layer.get("down_bias_LD"))


def self_attention(
    x_BTD,
    layer: Params,
    attend,
    kind_index,
    rules: ShardingRules | None,
    dense_impl: str,
    *,
    rotary: bool,
    norm=None,
):
    """Projections around `attend(q, k, v, matmul_dtype, kind_index) -> ctx`. Heads are split over `model`:
    the out-projection is a partial sum until psummed, its bias added once after. `rotary`: some layer
    kind rotates q and k (RoPE), in the activations' dtype. Where the layer has `ln_q_scale_LH` (Qwen3, Gemma3),
    `norm` (the model's, over the last axis) norms each head's q and k over head_dim, before RoPE."""
    # One matmul for the three: a third of the calls, each three times as wide. The weights are stored
    # joined: joining them per layer cost 4.7% of the bfloat16 encoder on a Xeon, as XLA:CPU
    # concatenates bfloat16 by way of float32.
    w_DXKH = layer["qkv_LDXKH"]
    # Unless RoPE comes first, q, k and v leave the projection in the matmul dtype where that is narrower
    # (a CPU's bfloat16): oneDNN rounds them as it writes them, where XLA:CPU's converts took passes of
    # their own (8% of the bfloat16 encoder on a Xeon). Unstacked as bits (kernels.bfloat16_bits).
    narrow = not rotary and w_DXKH.dtype.itemsize < x_BTD.dtype.itemsize
    qkv_BTXKH = as_bits(
        dense(x_BTD, w_DXKH, layer.get("qkv_bias_LXKH"), out_dtype=w_DXKH.dtype if narrow else None, impl=dense_impl)
    )
    *q_groups, k, v = jnp.unstack(qkv_BTXKH, axis=2)
    # Query head k*G + g is row g of K/V head k: heads in transformers' order, which attention takes.
    q = q_groups[0] if len(q_groups) == 1 else jnp.stack(q_groups, axis=3).reshape(*k.shape[:2], -1, k.shape[3])
    q, k, v = from_bits(q), from_bits(k), from_bits(v)
    if "ln_q_scale_LH" in layer:
        q, k = norm(q, layer["ln_q_scale_LH"], None), norm(k, layer["ln_k_scale_LH"], None)
    ctx_BTNH = attend(q, k, v, w_DXKH.dtype, kind_index)
    out_BTD = sum_shards(
        dense(ctx_BTNH, layer["out_LNHD"], contract=2, out_dtype=x_BTD.dtype, impl=dense_impl), "heads", rules
    )
    return _plus(out_BTD, layer.get("out_bias_LD"))


def attention_operands(q_BTNH, k_BTKH, v_BTKH, matmul_dtype, tokens_BT):
    """q, k, v rounded to `matmul_dtype` for attention's dots where it is narrower than theirs (bfloat16
    weights under float32 activations, as a CPU runs bfloat16, after RoPE; `self_attention` projects
    them straight to it otherwise); unchanged otherwise.

    k first loses its mean over the row's tokens (`tokens_BT`: True where not padding). That shifts
    all of a query's scores by one constant, which its softmax ignores, so the result is the same; but
    the rounding error then scales with how the keys differ, not with the offset they share. It once
    held all-MiniLM-L6-v2's mixed texts at a min cosine of 0.99995 to float32 (0.99976 without), until
    the softmax weights were normalised by their own rounded sum: 0.99995 either way since, so MiniLM
    skips it now (BENCHMARKS.md). The RoPE families keep it: no real weights here show whether their
    keys share an offset. The sequence axis is never sharded, so the mean is the whole row's under
    `shard_map` too."""
    if jnp.dtype(matmul_dtype).itemsize >= q_BTNH.dtype.itemsize:
        return q_BTNH, k_BTKH, v_BTKH
    weights_BT = tokens_BT.astype(k_BTKH.dtype)
    # A dot, not a sum over the sequence axis: XLA:CPU reduced that strided axis at 4x the cost.
    sum_BKH = jnp.einsum("bt,btnh->bnh", weights_BT, k_BTKH, precision=MATMUL_PRECISION)
    mean_B1KH = (sum_BKH / jnp.maximum(weights_BT.sum(axis=1), 1)[:, None, None])[:, None]
    return q_BTNH.astype(matmul_dtype), (k_BTKH - mean_B1KH).astype(matmul_dtype), v_BTKH.astype(matmul_dtype)


def _attention_by_kind(segments_BT, positions_BT, cfg: ModelConfig, attention_impl: str, relative_bias_NR=None):
    """attend(q, k, v, matmul_dtype, kind_index): the attention of each distinct layer kind, RoPE
    included, its dots in `matmul_dtype` (`attention_operands`); every kind adds the model's relative
    position bias, where it has one."""
    tokens_BT = segments_BT != 0
    bias = None if cfg.relative_buckets is None else RelativeBias(relative_bias_NR, cfg.relative_buckets)
    # Once per forward pass, outside the layers' loop.
    tables = [
        None if kind.rope is None else rope_tables(positions_BT, kind.rope.inv_freq(cfg.head_dim)) for kind in cfg.kinds
    ]

    def for_kind(kind: LayerKind, rope, matmul_dtype):
        def attend(q, k, v):
            if rope is not None:
                q, k = apply_rope(q, *rope), apply_rope(k, *rope)
            q, k, v = attention_operands(q, k, v, matmul_dtype, tokens_BT)
            return attention(
                q,
                k,
                v,
                segment_ids=segments_BT,
                window=kind.window,
                relative_bias=bias,
                causal=cfg.causal,
                impl=attention_impl,
                scale=cfg.attention_scale,
            )

        return attend

    def attend(q, k, v, matmul_dtype, kind_index):
        branches = [for_kind(kind, rope, matmul_dtype) for kind, rope in zip(cfg.kinds, tables)]
        if len(branches) == 1:
            return branches[0](q, k, v)
        return jax.lax.switch(kind_index, branches, q, k, v)

    return attend


def forward(
    params: Params,
    ids_BT,
    segments_BT,
    positions_BT,
    cfg: ModelConfig,
    *,
    attention_impl: str = "auto",
    dense_impl: str = "auto",
    rules: ShardingRules | None = None,
):
    """Token ids [B, T] -> hidden states [B, T, D].

    segments_BT: 1..k for the k sequences packed into a row, 0 for padding; a
    token attends only within its segment. positions_BT: each token's 0-based
    position within its own sequence. An unpadded row is segments 1 on its
    tokens and 0 after, positions arange(T). Positions must stay below
    `cfg.max_tokens` (`check_window`).

    The compute dtype is the dtype of the matmul weights, and the activations run
    in the dtype of the embeddings (see `cast_params`). Called on
    whole arrays, `rules` is None. Inside `shard_map` over a mesh laid out by
    `rules`, params and ids are this device's shards (B, heads and F split as
    the rules say) and the result is this device's rows, replicated over the
    heads/F mesh axis.
    """
    attend = _attention_by_kind(segments_BT, positions_BT, cfg, attention_impl, params["embed"].get("relative_bias_NR"))
    rotary = any(kind.rope is not None for kind in cfg.kinds)
    kind_of_layer_L = jnp.asarray([cfg.kinds.index(kind) for kind in cfg.layer_kinds], jnp.int32)
    norm = functools.partial(layer_norm, eps=cfg.norm_eps, kind=cfg.norm_kind)

    def post_norm(x_BTD, layer, index):
        attn_BTD = self_attention(
            x_BTD, layer, attend, kind_of_layer_L[index], rules, dense_impl, rotary=rotary, norm=norm
        )
        x_BTD = norm(x_BTD + attn_BTD, layer["ln1_scale_LD"], layer.get("ln1_bias_LD"))
        mlp_BTD = mlp(x_BTD, layer, cfg, rules, dense_impl)
        return norm(x_BTD + mlp_BTD, layer["ln2_scale_LD"], layer.get("ln2_bias_LD"))

    def out_norm(y_BTD, layer, key: str):
        """A block's output, normed where the layer norms it (Gemma3's sandwich) before the residual add."""
        return y_BTD if f"{key}_scale_LD" not in layer else norm(y_BTD, layer[f"{key}_scale_LD"], None)

    def pre_norm(x_BTD, layer, index):
        normed_BTD = norm(x_BTD, layer["ln1_scale_LD"], layer.get("ln1_bias_LD"))
        if cfg.embedding_norm:  # layer 0 takes the normed embeddings as they are
            normed_BTD = jnp.where(index == 0, x_BTD, normed_BTD)
        attn_BTD = self_attention(
            normed_BTD, layer, attend, kind_of_layer_L[index], rules, dense_impl, rotary=rotary, norm=norm
        )
        x_BTD = x_BTD + out_norm(attn_BTD, layer, "ln_attn_out")
        mlp_in_BTD = norm(x_BTD, layer["ln2_scale_LD"], layer.get("ln2_bias_LD"))
        return x_BTD + out_norm(mlp(mlp_in_BTD, layer, cfg, rules, dense_impl), layer, "ln_mlp_out")

    block = post_norm if cfg.norm == "post" else pre_norm

    def body(x_BTD, scanned):
        layer, index = scanned
        return block(x_BTD, bfloat16_from_bits(layer), index), None

    x_BTD = embed(params["embed"], ids_BT, positions_BT, cfg)
    x_BTD, _ = jax.lax.scan(body, x_BTD, (bfloat16_as_bits(params["layers"]), jnp.arange(cfg.num_layers)))
    if "final" in params:
        x_BTD = norm(x_BTD, params["final"]["ln_scale_D"], params["final"].get("ln_bias_D"))
    return x_BTD


def bfloat16_as_bits(layers: Params) -> Params:
    """On a CPU, the bfloat16 arrays of the stacked layers as their bits (uint16), for `lax.scan` to slice.

    XLA:CPU has no bfloat16 slicing in a loop: given bfloat16 weights to scan,
    it converts the whole stack to float32 on every call and each layer's slice
    back to bfloat16 for the matmul: two passes over every weight, 7% of the
    encoder's time on an AMD EPYC Zen 4 (BENCHMARKS.md). Bits slice as they are; `bfloat16_from_bits`
    turns each layer's back into bfloat16 for free. `forward` does this itself;
    an encoder that stores its weights so (pipeline.encode.encoder) spares it
    a copy of every weight per call. Other platforms scan bfloat16 natively and
    get the arrays unchanged."""
    if platform() != "cpu":
        return layers
    return jax.tree.map(as_bits, layers)


def bfloat16_from_bits(layer: Params) -> Params:
    """One layer's slice of `bfloat16_as_bits`, bfloat16 again (no parameter is uint16 otherwise)."""
    return jax.tree.map(from_bits, layer)


def init_params(cfg: ModelConfig, seed: int = 0, scale: float = 0.02) -> Params:
    """Random parameters in the shared layout, shaped by the config alone (benchmarks need no checkpoint):
    normal(0, scale) weights, norms 1 and 0, biases 0. The same tree `params_from_hf` makes for `cfg`."""
    rng = np.random.default_rng(seed)
    D, N, H, F, L = cfg.hidden_size, cfg.num_heads, cfg.head_dim, cfg.intermediate_size, cfg.num_layers

    def normal(*shape):
        return rng.standard_normal(shape, np.float32) * np.float32(scale)

    def norm(key: str, letters: str, *lead: int) -> Params:
        width = E if letters.endswith("E") else D
        out = {f"{key}_scale_{letters}": np.ones((*lead, width), np.float32)}
        return out | ({f"{key}_bias_{letters}": np.zeros((*lead, width), np.float32)} if "norm" in cfg.biases else {})

    def bias(group: str, name: str, *shape: int) -> Params:
        return {name: np.zeros(shape, np.float32)} if group in cfg.biases else {}

    e, E = ("D", D) if cfg.embedding_size is None else ("E", cfg.embedding_size)
    embed = {f"word_V{e}": normal(cfg.vocab_size, E)}
    if cfg.learned_positions and cfg.layer_kinds[0].rope is None:
        embed[f"position_P{e}"] = normal(cfg.max_tokens + cfg.position_offset, E)
    if cfg.type_vocab_size:
        embed[f"token_type_{e}"] = normal(E)
    if cfg.embedding_norm:
        embed |= norm("ln", e)
    if e == "E":
        embed |= {"proj_ED": normal(E, D), "proj_bias_D": np.zeros(D, np.float32)}
    if cfg.relative_buckets is not None:
        embed["relative_bias_NR"] = normal(N, cfg.relative_buckets.num_buckets)
    K, X = cfg.kv_heads, N // cfg.kv_heads + 2
    layers = {"qkv_LDXKH": normal(L, D, X, K, H), **bias("qkv", "qkv_bias_LXKH", L, X, K, H)}
    if cfg.qk_norm:
        layers |= {"ln_q_scale_LH": np.ones((L, H), np.float32), "ln_k_scale_LH": np.ones((L, H), np.float32)}
    layers |= {
        "out_LNHD": normal(L, N, H, D),
        **bias("out", "out_bias_LD", L, D),
        **norm("ln1", "LD", L),
        "up_LDF": normal(L, D, F),
        **bias("mlp_in", "up_bias_LF", L, F),
    }
    if cfg.gated_mlp:
        layers |= {"gate_LDF": normal(L, D, F), **bias("mlp_in", "gate_bias_LF", L, F)}
    layers |= {"down_LFD": normal(L, F, D), **bias("mlp_out", "down_bias_LD", L, D), **norm("ln2", "LD", L)}
    if cfg.norm == "sandwich":
        layers |= {**norm("ln_attn_out", "LD", L), **norm("ln_mlp_out", "LD", L)}
    params = {"embed": embed, "layers": layers}
    return params | ({"final": norm("ln", "D")} if cfg.norm != "post" else {})
