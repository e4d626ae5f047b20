"""Every matmul of the encoder asks for its operands' own precision (kernels.precision).

On CPU a float32 dot is float32 at any precision, so the numbers here cannot
show a GPU's TensorFloat-32 or a TPU's single bfloat16 pass: the lowered program
can. Each attention implementation that runs here and the pooling are traced
with XLA's dense projections (oneDNN's, CPU only, are a custom call with no
precision to ask), and every dot in them must say HIGHEST.
"""

import json
import re

import jax
import jax.numpy as jnp
import pytest

from kernels import encoders
from kernels.attention import available_impls

from support import FAMILY_FIXTURES

# A tiny BERT's config.json, as the family tests load it (3 layers, 48 wide).
CONFIG = json.loads((FAMILY_FIXTURES / "bert-pooler" / "config.json").read_text())


def dot_precisions(fn, *args) -> list[str]:
    """The precision attribute of every dot_general in fn's lowered program ('' where it has none)."""
    text = jax.jit(fn).lower(*args).as_text()
    dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
    return [m.group(1) if (m := re.search(r"precision = \[(\w+), \w+\]", dot)) else "" for dot in dots]


@pytest.mark.parametrize("impl", available_impls())
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_every_dot_of_forward_and_pooling_asks_for_highest(impl, dtype):
    cfg = encoders.config_from_hf(CONFIG)
    params = encoders.cast_params(encoders.init_params(cfg), jnp.dtype(dtype), jnp.float32)
    ids = jnp.ones((2, 16), jnp.int32)
    segments = jnp.concatenate([jnp.ones((2, 10), jnp.int32), jnp.full((2, 6), 2, jnp.int32)], axis=1)
    positions = jnp.broadcast_to(jnp.arange(16, dtype=jnp.int32), (2, 16))

    def embed(params, ids, segments, positions):
        hidden = encoders.forward(params, ids, segments, positions, cfg, attention_impl=impl, dense_impl="xla")
        return encoders.pool(hidden, segments, 2, "mean")

    precisions = dot_precisions(embed, params, ids, segments, positions)
    # 4 projections and 2 attention matmuls in the scanned layer, 1 for pooling.
    assert len(precisions) >= 7, precisions
    assert set(precisions) == {"HIGHEST"}, precisions
