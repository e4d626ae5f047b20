"""Reading a checkpoint by its shapes alone: the loader's reading, none of the weights' memory."""

import math
import tracemalloc

import pytest

from kernels import encoders

from support import XLM_ROBERTA_LARGE, bert_tensor_shapes


def test_a_large_models_shapes_are_read_without_allocating_its_weights():
    arch = encoders.config_from_hf(XLM_ROBERTA_LARGE)
    tensor_shapes = bert_tensor_shapes(XLM_ROBERTA_LARGE, prefix="roberta.")
    weights_bytes = 4 * sum(math.prod(shape) for shape in tensor_shapes.values())
    tracemalloc.start()  # numpy reports its array buffers to tracemalloc
    try:
        shapes = encoders.param_shapes(tensor_shapes, arch)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert weights_bytes > 2.2e9
    assert peak < 2e6, f"{peak / 1e6:.1f} MB traced while reading the shapes"
    assert shapes["embed"]["word_VD"] == (250002, 1024)
    assert shapes["embed"]["position_PD"] == (8194, 1024)
    assert shapes["layers"]["qkv_LDXKH"] == (24, 1024, 3, 16, 64)
    assert shapes["layers"]["down_LFD"] == (24, 4096, 1024)


def test_the_shape_reading_raises_the_loaders_errors():
    arch = encoders.config_from_hf(XLM_ROBERTA_LARGE)
    tensor_shapes = bert_tensor_shapes(XLM_ROBERTA_LARGE)
    with pytest.raises(
        encoders.CheckpointMismatch, match=r"'encoder.layer.23.output.dense.weight' has shape \(1024, 4095\)"
    ):
        encoders.param_shapes(tensor_shapes | {"encoder.layer.23.output.dense.weight": (1024, 4095)}, arch)
    del tensor_shapes["encoder.layer.5.attention.self.key.bias"]
    with pytest.raises(encoders.CheckpointMismatch, match="lack tensor 'encoder.layer.5.attention.self.key.bias'"):
        encoders.param_shapes(tensor_shapes, arch)
    with pytest.raises(encoders.CheckpointMismatch, match="not a xlm-roberta checkpoint"):
        encoders.param_shapes({"lm_head.bias": (250002,)}, arch)


def test_weights_with_more_layers_than_the_config_are_refused():
    """A config that counts fewer layers than were trained would run a truncated model without a word."""
    deeper = bert_tensor_shapes(XLM_ROBERTA_LARGE | {"num_hidden_layers": 26})
    with pytest.raises(
        encoders.CheckpointMismatch,
        match=r"hold 26 layers \(such as 'encoder.layer.24.attention.output.LayerNorm.bias'\).* says 24",
    ):
        encoders.param_shapes(deeper, encoders.config_from_hf(XLM_ROBERTA_LARGE))
    # Tensors outside the layers the encoder reads (an MLM head, a pooler) are no layers.
    extra = {"lm_head.dense.weight": (1024, 1024), "pooler.dense.weight": (1024, 1024)}
    encoders.param_shapes(bert_tensor_shapes(XLM_ROBERTA_LARGE) | extra, encoders.config_from_hf(XLM_ROBERTA_LARGE))
