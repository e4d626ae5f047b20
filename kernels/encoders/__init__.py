"""Encoder families behind one dispatch: BERT, DistilBERT, XLM-RoBERTa, MPNet, ModernBERT, NomicBERT, GTE, T5,
Qwen3, Qwen2, Mistral, Llama (one `decoder` module's families), Gemma3, ALBERT.

    cfg = config_from_hf(config_json)          # frozen ModelConfig; cfg.family
    params = params_from_hf(tensors, cfg)      # numpy pytree in the shared layout
    shapes = param_shapes(tensor_shapes, cfg)  # the same pytree's shapes, from the checkpoint's shapes alone
    hidden_BTD = forward(params, ids_BT, segments_BT, positions_BT, cfg, attention_impl=..., rules=...)
    pooled_BSD = pool(hidden_BTD, segments_BT, n_slots, mode)     # per segment; modes "+"-joined concatenate
    out_BSO = project(pooled_BSD, weights, activations)            # sentence-transformers' Dense modules
    param_axes(params), cast_params(params, dtype, activations), normalize(x), check_window(cfg, n_tokens)
    bfloat16_as_bits(params["layers"])         # how forward scans bfloat16 weights on a CPU; store them so
    init_params(cfg)                           # random weights in the same layout, for benchmarks

Each family module reads its config.json layouts and tensor names into the
layout of `_blocks`, whose one `forward` runs them all: `read(ck)` over a
`_checkpoint.Checkpoint` of the weights, or over a `ShapeCheckpoint` of their
shapes, which checks a model without holding its weights. The family comes from
config.json's `model_type`, or, without one, from `architectures`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from kernels.attention._buckets import RelativeBuckets
from kernels.encoders import (
    albert,
    bert,
    distilbert,
    gemma3,
    gte,
    llama,
    mistral,
    modernbert,
    mpnet,
    nomic_bert,
    qwen2,
    qwen3,
    t5,
    xlm_roberta,
)
from kernels.encoders._checkpoint import Checkpoint, ShapeCheckpoint
from kernels.encoders._config import (
    POOLING_MODES,
    PROJECTION_ACTIVATIONS,
    CheckpointMismatch,
    LayerKind,
    ModelConfig,
    Params,
    Rope,
    UnsupportedModel,
    WindowTooLong,
    check_window,
)

# Imported on first use (PEP 562): reading and checking a model, above, is all a job's driver does, and JAX
# would cost it seconds of start-up and a hundred MB.
_LAZY = {
    **dict.fromkeys(
        ("bfloat16_as_bits", "cast_params", "forward", "init_params", "logical", "param_axes"),
        "kernels.encoders._blocks",
    ),
    **dict.fromkeys(("normalize", "pool", "project"), "kernels.encoders._pooling"),
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


FAMILIES: dict[str, ModuleType] = {
    m.FAMILY: m
    for m in (
        bert,
        distilbert,
        xlm_roberta,
        mpnet,
        modernbert,
        nomic_bert,
        gte,
        t5,
        qwen3,
        qwen2,
        mistral,
        llama,
        gemma3,
        albert,
    )
}
# config.json's model_type -> family; RoBERTa and CamemBERT are XLM-RoBERTa's architecture, "new" is GTE's hub name.
MODEL_TYPES = {
    "bert": "bert",
    "distilbert": "distilbert",
    "xlm-roberta": "xlm-roberta",
    "roberta": "xlm-roberta",
    "camembert": "xlm-roberta",
    "mpnet": "mpnet",
    "modernbert": "modernbert",
    "nomic_bert": "nomic_bert",
    "gte": "gte",
    "new": "gte",
    "t5": "t5",
    "mt5": "t5",
    "qwen3": "qwen3",
    "qwen2": "qwen2",
    "mistral": "mistral",
    "llama": "llama",
    "gemma3_text": "gemma3",
    "albert": "albert",
}
# An `architectures` entry's model name (before "Model" / "For...") -> family, for configs without model_type.
ARCHITECTURES = {
    "Bert": "bert",
    "DistilBert": "distilbert",
    "XLMRoberta": "xlm-roberta",
    "Roberta": "xlm-roberta",
    "Camembert": "xlm-roberta",
    "MPNet": "mpnet",
    "ModernBert": "modernbert",
    "NomicBert": "nomic_bert",
    "Gte": "gte",
    "New": "gte",
    "T5": "t5",
    "T5Encoder": "t5",
    "MT5": "t5",
    "MT5Encoder": "t5",
    "Qwen3": "qwen3",
    "Qwen2": "qwen2",
    "Mistral": "mistral",
    "Llama": "llama",
    "Gemma3Text": "gemma3",
    "Albert": "albert",
}


def _family(config: Mapping[str, Any]) -> ModuleType:
    model_type = config.get("model_type")
    if model_type in MODEL_TYPES:
        return FAMILIES[MODEL_TYPES[model_type]]
    architectures = list(config.get("architectures") or [])
    if model_type is None:
        for architecture in architectures:
            name = architecture.split("For")[0].removesuffix("Model")
            if name in ARCHITECTURES:
                return FAMILIES[ARCHITECTURES[name]]
    raise UnsupportedModel(
        f"model_type {model_type!r} (architectures {architectures}) is not supported; "
        f"supported model_types: {', '.join(MODEL_TYPES)}"
    )


def config_from_hf(config: Mapping[str, Any]) -> ModelConfig:
    """The architecture from a config.json dict. UnsupportedModel for another family or an
    option not implemented; KeyError for a missing required field; ValueError for a value of
    the wrong type (null where a number belongs, a string for a mapping), naming its key."""
    return _family(config).config_from_hf(config)


def _read(kind: type[Checkpoint], tensors: Mapping[str, Any], cfg: ModelConfig) -> Params:
    family = FAMILIES[cfg.family]
    checkpoint = kind(tensors, [family.ANCHOR], cfg)
    params = family.read(checkpoint)
    checkpoint.refuse_extra_layers()
    return params


def params_from_hf(tensors: Mapping[str, np.ndarray], cfg: ModelConfig) -> Params:
    """A state dict (name -> numpy array, any float dtype) -> the float32 pytree `forward` takes.
    CheckpointMismatch for missing tensors or shapes that contradict the config."""
    return _read(Checkpoint, tensors, cfg)


def param_shapes(tensor_shapes: Mapping[str, Sequence[int]], cfg: ModelConfig) -> dict[str, dict[str, tuple]]:
    """The shape of every array `params_from_hf` would make, from the checkpoint's tensor shapes alone
    (safetensors headers): the same names looked up and the same CheckpointMismatch raised, with
    nothing allocated in proportion to the weights."""
    placeholders = _read(ShapeCheckpoint, tensor_shapes, cfg)
    return {group: {name: array.shape for name, array in arrays.items()} for group, arrays in placeholders.items()}


__all__ = [
    "ARCHITECTURES",
    "FAMILIES",
    "MODEL_TYPES",
    "POOLING_MODES",
    "PROJECTION_ACTIVATIONS",
    "CheckpointMismatch",
    "LayerKind",
    "ModelConfig",
    "Params",
    "RelativeBuckets",
    "Rope",
    "UnsupportedModel",
    "WindowTooLong",
    "bfloat16_as_bits",
    "cast_params",
    "check_window",
    "config_from_hf",
    "forward",
    "init_params",
    "logical",
    "normalize",
    "param_axes",
    "param_shapes",
    "params_from_hf",
    "pool",
    "project",
]
