"""Reading a Hugging Face state dict into the shared parameter layout, every tensor's shape checked.

Hugging Face linear weights are [out, in]; they are transposed once here so the
forward pass reads as einsums over named axes. A checkpoint may carry its model
prefix (`bert.`, `roberta.`, `model.`, `new.`, ...) or none: the prefix is
whatever stands before the family's anchor tensor, and tensors outside it (MLM
heads, poolers) are never read. Which biases a module has comes from the config
(`ModelConfig.biases`), so a checkpoint that lacks one the config promises is
refused rather than run without it.

Each family reads a `Checkpoint` with one function, `read(ck) -> Params`, which
`kernels.encoders` calls on the weights (`Checkpoint`) or on their shapes alone
(`ShapeCheckpoint`): the same names, the same shape checks and the same errors,
so that a driver can check a model from its safetensors headers without holding
its weights.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

from kernels.encoders._config import CheckpointMismatch, ModelConfig

# Old checkpoints converted from TensorFlow name a LayerNorm's tensors gamma and beta; transformers renames them
# to weight and bias as it loads them.
_LEGACY_NORM = re.compile(r"LayerNorm\.(gamma|beta)$")


def _current_norm_name(found: re.Match) -> str:
    return "LayerNorm." + {"gamma": "weight", "beta": "bias"}[found[1]]


class Checkpoint:
    """A state dict as one family reads it. Names passed in are module paths without `.weight`/`.bias`."""

    def __init__(self, tensors: Mapping[str, np.ndarray], anchors: Sequence[str], cfg: ModelConfig):
        """anchors: a tensor every checkpoint of the family has, one name per tensor layout it comes in."""
        self.cfg = cfg
        for anchor in anchors:
            hits = sorted((name for name in tensors if name == anchor or name.endswith("." + anchor)), key=len)
            if hits:
                prefix = hits[0][: -len(anchor)]
                break
        else:
            raise CheckpointMismatch(
                f"the weights have no tensor {' or '.join(map(repr, anchors))} "
                f"(with or without a model prefix): not a {cfg.family} checkpoint"
            )
        self._tensors = {
            _LEGACY_NORM.sub(_current_norm_name, name[len(prefix) :]): value
            for name, value in tensors.items()
            if name.startswith(prefix)
        }
        self._read: set[str] = set()

    def has(self, name: str) -> bool:
        return name in self._tensors

    def get(self, name: str, shape: tuple[int | None, ...]) -> np.ndarray:
        """The tensor as float32, refused unless it has the shape the config implies (None: any size)."""
        if name not in self._tensors:
            raise CheckpointMismatch(f"the weights lack tensor {name!r}, which a {self._describe()} has")
        self._read.add(name)
        value = np.asarray(self._tensors[name], np.float32)
        if len(value.shape) != len(shape) or any(want not in (None, got) for want, got in zip(shape, value.shape)):
            raise CheckpointMismatch(
                f"tensor {name!r} has shape {value.shape}, but config.json ({self._describe()}) implies {tuple(shape)}"
            )
        return value

    def refuse_extra_layers(self) -> None:
        """Raises CheckpointMismatch when the weights hold layers past the config's count: tensors named
        as the layers read were, with a higher layer index. Run with fewer layers than trained, the model
        would make embeddings without any error."""
        read = {_LAYER_INDEX.sub(".#.", name, count=1) for name in self._read}
        extra = sorted(
            (int(found.group(1)), name)
            for name in self._tensors.keys() - self._read
            if (found := _LAYER_INDEX.search(name))
            and int(found.group(1)) >= self.cfg.num_layers
            and _LAYER_INDEX.sub(".#.", name, count=1) in read
        )
        if extra:
            raise CheckpointMismatch(
                f"the weights hold {extra[-1][0] + 1} layers (such as {extra[0][1]!r}), but config.json "
                f"({self._describe()}) says {self.cfg.num_layers}"
            )

    def _describe(self) -> str:
        c = self.cfg
        return (
            f"{c.family} model with hidden_size {c.hidden_size}, {c.num_layers} layers, {c.num_heads} heads "
            f"of {c.head_dim}, intermediate_size {c.intermediate_size}, vocab {c.vocab_size}"
        )

    def _linear(self, name: str, n_in: int, n_out: int, bias_group: str) -> tuple[np.ndarray, np.ndarray | None]:
        """Weight [out, in] -> [in, out], and its bias [out] where the config has one."""
        w = self.get(name + ".weight", (n_out, n_in)).T
        b = self.get(name + ".bias", (n_out,)) if bias_group in self.cfg.biases else None
        return w, b

    def embeddings(self, word: str, token_type: str | None, norm: str | None, position: str | None = None) -> dict:
        """The `embed` group: word (+ learned position, + token type 0) embeddings and their norm (None: none),
        hidden_size wide (D), or embedding_size wide (E) where the config factorises them (`embedding_projection`
        then takes them to D)."""
        c = self.cfg
        e = "D" if c.embedding_size is None else "E"
        width = c.hidden_size if c.embedding_size is None else c.embedding_size
        out = {f"word_V{e}": self.get(word + ".weight", (c.vocab_size, width))}
        if position is not None:
            out[f"position_P{e}"] = self.get(position + ".weight", (c.max_tokens + c.position_offset, width))
        if c.type_vocab_size:
            out[f"token_type_{e}"] = self.get(token_type + ".weight", (c.type_vocab_size, width))[0]
        return out if norm is None else out | self.norm(norm, "ln", e)

    def embedding_projection(self, name: str) -> dict[str, np.ndarray]:
        """ALBERT's projection of the normed embeddings from embedding_size to hidden_size (a Linear with its
        bias) -> proj_ED, proj_bias_D."""
        E, D = self.cfg.embedding_size, self.cfg.hidden_size
        return {"proj_ED": self.get(name + ".weight", (D, E)).T, "proj_bias_D": self.get(name + ".bias", (D,))}

    def attention_in(self, q: str, k: str, v: str) -> dict[str, np.ndarray]:
        """Separate Q [N*H, D], K and V [K*H, D] projections -> qkv_LDXKH (one layer's slice) and its bias.

        K is the K/V heads (`ModelConfig.kv_heads`: num_kv_heads under grouped-query attention, else
        num_heads), and X a K/V head's group: its G = N / K query heads, then its key and its value. Query
        head n = k*G + g, as transformers' repeat_kv groups them, is row g of K/V head k; without groups X is
        q, k, v. One projection makes all three, and a mesh splits K/V heads with the query heads that use
        them, each device projecting its heads' keys and values once."""
        c = self.cfg
        (wq, bq), (wk, bk), (wv, bv) = (
            self._linear(name, c.hidden_size, heads * c.head_dim, "qkv")
            for name, heads in ((q, c.num_heads), (k, c.kv_heads), (v, c.kv_heads))
        )

        def rows(q_N, k_K, v_K) -> list[np.ndarray]:  # [..., N*H], [..., K*H] twice -> X arrays [..., K, H]
            q_KGH = q_N.reshape(*q_N.shape[:-1], c.kv_heads, -1, c.head_dim)
            return [q_KGH[..., g, :] for g in range(q_KGH.shape[-2])] + [
                x.reshape(*x.shape[:-1], c.kv_heads, c.head_dim) for x in (k_K, v_K)
            ]

        out = {"qkv_LDXKH": np.moveaxis(self._stack(rows(wq, wk, wv)), 0, 1)}
        return out if bq is None else out | {"qkv_bias_LXKH": self._stack(rows(bq, bk, bv))}

    def fused_qkv(self, name: str) -> dict[str, np.ndarray]:
        """A fused [3*N*H, D] projection, rows q then k then v (no grouped K/V heads) -> as `attention_in`."""
        c = self.cfg
        w, b = self._linear(name, c.hidden_size, 3 * c.num_heads * c.head_dim, "qkv")
        out = {"qkv_LDXKH": w.reshape(c.hidden_size, 3, c.num_heads, c.head_dim)}
        return out if b is None else out | {"qkv_bias_LXKH": b.reshape(3, c.num_heads, c.head_dim)}

    def attention_out(self, name: str) -> dict[str, np.ndarray]:
        """Out-projection [D, N*H] -> out_LNHD and its bias."""
        c = self.cfg
        w, b = self._linear(name, c.num_heads * c.head_dim, c.hidden_size, "out")
        out = {"out_LNHD": w.reshape(c.num_heads, c.head_dim, c.hidden_size)}
        return out if b is None else out | {"out_bias_LD": b}

    def mlp_in(self, name: str, key: str) -> dict[str, np.ndarray]:
        """An in-projection [F, D] -> `{key}_LDF` ('up' or 'gate') and its bias."""
        c = self.cfg
        w, b = self._linear(name, c.hidden_size, c.intermediate_size, "mlp_in")
        return {f"{key}_LDF": w} if b is None else {f"{key}_LDF": w, f"{key}_bias_LF": b}

    def fused_mlp_in(self, name: str, first: str, second: str) -> dict[str, np.ndarray]:
        """A fused [2*F, D] in-projection whose row halves are `first` then `second` ('up' or 'gate')."""
        c = self.cfg
        F = c.intermediate_size
        w, b = self._linear(name, c.hidden_size, 2 * F, "mlp_in")
        out = {f"{first}_LDF": w[:, :F], f"{second}_LDF": w[:, F:]}
        return out if b is None else out | {f"{first}_bias_LF": b[:F], f"{second}_bias_LF": b[F:]}

    def mlp_out(self, name: str) -> dict[str, np.ndarray]:
        """Down-projection [D, F] -> down_LFD and its bias."""
        c = self.cfg
        w, b = self._linear(name, c.intermediate_size, c.hidden_size, "mlp_out")
        return {"down_LFD": w} if b is None else {"down_LFD": w, "down_bias_LD": b}

    def norm(self, name: str, key: str, letters: str) -> dict[str, np.ndarray]:
        """A LayerNorm as `{key}_scale_{letters}` and, where the config has norm biases, `{key}_bias_{letters}`:
        over hidden_size, or over embedding_size where `letters` ends in E."""
        D = self.cfg.embedding_size if letters.endswith("E") else self.cfg.hidden_size
        out = {f"{key}_scale_{letters}": self.get(name + ".weight", (D,))}
        if "norm" in self.cfg.biases:
            out[f"{key}_bias_{letters}"] = self.get(name + ".bias", (D,))
        return out

    def decoder_layer(self, i: int) -> dict[str, np.ndarray]:
        """Layer i's attention and MLP as transformers lays out its decoders (LlamaModel and those built as it,
        Gemma3TextModel): `layers.N.self_attn.{q,k,v,o}_proj`, where the config has them the RMSNorms of each
        head's q and k over head_dim (`q_norm`, `k_norm`), `mlp.{gate,up,down}_proj`. The family adds the
        layer's norms, which it names its own way."""
        a = f"layers.{i}.self_attn."
        m = f"layers.{i}.mlp."
        H = self.cfg.head_dim
        norms = ("q", "k") if self.cfg.qk_norm else ()
        return {
            **self.attention_in(a + "q_proj", a + "k_proj", a + "v_proj"),
            **{f"ln_{x}_scale_LH": self.get(f"{a}{x}_norm.weight", (H,)) for x in norms},
            **self.attention_out(a + "o_proj"),
            **self.mlp_in(m + "gate_proj", "gate"),
            **self.mlp_in(m + "up_proj", "up"),
            **self.mlp_out(m + "down_proj"),
        }

    def jina_layer(self, i: int) -> dict[str, np.ndarray]:
        """Layer i as transformers lays out its RoPE BERTs (NomicBertModel, GteModel; both built on
        JinaEmbeddingsV3Layer): `layers.N.self_attn.{q,k,v,o}_proj`, `post_attention_layernorm`,
        `mlp.{up,gate,down}_proj`, `post_mlp_layernorm`."""
        p = f"layers.{i}."
        return {
            **self.attention_in(p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"),
            **self.attention_out(p + "self_attn.o_proj"),
            **self.norm(p + "post_attention_layernorm", "ln1", "LD"),
            **self.mlp_in(p + "mlp.up_proj", "up"),
            **self.mlp_in(p + "mlp.gate_proj", "gate"),
            **self.mlp_out(p + "mlp.down_proj"),
            **self.norm(p + "post_mlp_layernorm", "ln2", "LD"),
        }

    def stack(self, layers: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """One dict per layer, named as stacked (`qkv_LDXKH` holding one layer's DXKH) -> the stacked arrays."""
        return {name: self._stack([layer[name] for layer in layers]) for name in layers[0]}

    def _stack(self, arrays: list[np.ndarray]) -> np.ndarray:
        return np.stack(arrays)


# A layer's index in a tensor name: `encoder.layer.7.output.dense.weight`, `layers.7.attn.Wqkv.weight`.
_LAYER_INDEX = re.compile(r"\.(\d+)\.")


def _placeholder(shape: tuple[int, ...]) -> np.ndarray:
    """A read-only float32 array of `shape` that occupies one float: every stride 0. Transposes,
    reshapes and slices of it are views, so a family's reader runs over it without allocating."""
    return np.broadcast_to(np.float32(0), shape)


class ShapeCheckpoint(Checkpoint):
    """A checkpoint known by its tensors' shapes alone (safetensors headers): every tensor and every
    parameter read from it is a `_placeholder`, so reading one checks the whole model's names and shapes
    and allocates nothing proportional to its weights."""

    def __init__(self, shapes: Mapping[str, Sequence[int]], anchors: Sequence[str], cfg: ModelConfig):
        super().__init__({name: _placeholder(tuple(shape)) for name, shape in shapes.items()}, anchors, cfg)

    def _stack(self, arrays: list[np.ndarray]) -> np.ndarray:
        # `get` gave every layer's tensors the shapes the config implies, so the layers agree.
        return _placeholder((len(arrays), *arrays[0].shape))
