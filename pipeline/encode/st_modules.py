"""A model directory's sentence-transformers files, read as sentence-transformers 6.3 reads them.

- modules.json's modules, each in a folder of its own: the Transformer (the
  model's own files), the Pooling, the Dense modules and Normalize (`head`);
- the Transformer module's config, `sentence_bert_config.json` or an earlier
  name: the window, do_lower_case and transformers' loader arguments
  (`transformer`);
- `config_sentence_transformers.json`: the prompts and truncate_dim
  (`model_config`);
- a Dense module's weights as the encoder takes them (`projection_params`).

What sentence-transformers would run and docembed does not (a module of another
kind, a Dense module's other activation, a loader argument it cannot apply) is
refused with one ModelError line, never skipped. A directory without
modules.json is a bare checkpoint: mean pooling, no normalisation.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path, PureWindowsPath

import numpy as np

from kernels.encoders import POOLING_MODES, Params
from pipeline.encode import weights
from pipeline.encode.model_json import read_json, read_object
from pipeline.errors import ModelError
from pipeline.text import tokenizer_class

# The sentence-transformers modules docembed implements, by the last part of modules.json's "type"
# (sentence-transformers 6 moved them, to sentence_transformers.base.modules.transformer.Transformer).
KNOWN_MODULES = ("Transformer", "Pooling", "Dense", "Normalize")
# A Dense module's activation_function, a torch.nn class, by its name -> kernels.encoders' name for it. Without
# the key, sentence-transformers' Dense makes a Tanh.
PROJECTION_ACTIVATIONS = {"Tanh": "tanh", "Identity": "identity"}
DEFAULT_PROJECTION_ACTIVATION = "torch.nn.modules.activation.Tanh"
# What a Dense module's config.json may say besides its sizes, with the value docembed implements.
PROJECTION_FIXED = {"module_input_name": "sentence_embedding"}
# Pooling configs before sentence-transformers 6: a flag per mode. 6 writes `pooling_mode`, a name or a list.
LEGACY_POOLING_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


@dataclasses.dataclass(frozen=True)
class Projection:
    """A sentence-transformers Dense module: activation(x W^T + b) of the pooled vector, before Normalize,
    plus x itself where `residual` (through a matrix of its own, x R^T, where the sizes differ)."""

    path: str  # its folder in the model directory, which holds config.json and its weights
    in_features: int
    out_features: int
    bias: bool
    activation: str  # a name in kernels.encoders.PROJECTION_ACTIVATIONS
    weights_sha256: str
    residual: bool = False  # use_residual

    def describe(self) -> str:
        """Everything that makes its numbers, for the model's fingerprint."""
        bias = "bias" if self.bias else "no bias"
        # Appended only where set, so that the fingerprints of the outputs made before it stay as they were.
        residual = " residual" if self.residual else ""
        return f"{self.in_features}->{self.out_features} {bias} {self.activation}{residual} {self.weights_sha256}"


@dataclasses.dataclass(frozen=True)
class Head:
    """What modules.json's modules after the Transformer make of its hidden states."""

    pooling: str
    normalize: bool
    include_prompt: bool
    projections: tuple[Projection, ...]


def pooled_dim(hidden_size: int, pooling: str) -> int:
    """The Pooling module's output dimensions: the encoder's for each of its modes (`ModelSpec.pooling`)."""
    return hidden_size * len(pooling.split("+"))


def head(path: Path) -> Head:
    """Pooling mode, the Dense modules, normalisation and include_prompt, read as sentence-transformers reads them.

    A Dense module anywhere but between the Pooling and a Normalize, which docembed runs in that order, is refused.
    """
    pooling, normalize, include_prompt, projections = None, False, True, []
    modules = _modules(path)
    for kind, module in modules:
        if kind == "Normalize":
            normalize = True
        elif kind == "Dense":
            if pooling is None or normalize:
                where = "before the Pooling" if pooling is None else "after Normalize"
                raise ModelError(
                    f"{path}/modules.json: a Dense module {where}; docembed runs Dense modules only between the "
                    "Pooling and Normalize"
                )
            if not module.get("path"):
                raise ModelError(f"{path}/modules.json: a Dense module without a path to its folder")
            projections.append(_projection(path, str(module["path"])))
        elif kind == "Pooling":
            pool_cfg = read_object(path / (module.get("path") or "1_Pooling") / "config.json")
            pooling = _pooling_mode(pool_cfg, path)
            include_prompt = bool(pool_cfg.get("include_prompt", True))
    if modules and pooling is None:
        # sentence-transformers' model then gives token embeddings and no sentence embedding: it fails on it.
        raise ModelError(f"{path}/modules.json has no Pooling module: the model makes no sentence embedding")
    return Head(pooling or "mean", normalize, include_prompt, tuple(projections))


def _modules(path: Path) -> list[tuple[str, dict]]:
    """modules.json's modules ([] without the file) as (kind, module), each a module docembed implements, in a
    folder inside the model directory (sentence-transformers refuses a rooted path or '..' in either spelling, as
    this does).

    A module docembed does not implement (a second Pooling's concatenation, ...) is refused:
    skipping it would give other embeddings than sentence-transformers' for the same directory.
    """
    modules = read_json(path / "modules.json", default=[])
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ModelError(f"{path}/modules.json is not a list of modules")
    for module in modules:
        package, _, kind = str(module.get("type") or "").rpartition(".")
        if kind not in KNOWN_MODULES or package.split(".")[0] != "sentence_transformers":
            raise ModelError(
                f"{path}/modules.json names a {module.get('type')!r} module, which docembed does not implement "
                f"(it runs sentence-transformers' own {', '.join(KNOWN_MODULES)}, no model's own code): its "
                "embeddings would not be this model's"
            )
        folder = module.get("path") or ""
        if not isinstance(folder, str) or PureWindowsPath(folder).anchor or ".." in PureWindowsPath(folder).parts:
            raise ModelError(f"{path}/modules.json: a module's path {folder!r} is not a folder in the model directory")
    return [(str(m["type"]).rpartition(".")[2], m) for m in modules]


def _model_files(path: Path, modules: list[tuple[str, dict]]) -> Path:
    """The folder of the model directory `path` that holds the model's own files (config.json, the weights, the
    tokenizer's files, sentence_bert_config.json): the Transformer module's among `modules` (`_modules`), as
    sentence-transformers loads it. That is `path` itself since sentence-transformers 2 (and without
    modules.json), and `path/0_Transformer` in the layouts it wrote before."""
    folder = next((m.get("path") or "" for kind, m in modules if kind == "Transformer"), "")
    files = path / folder
    if not files.is_dir():
        raise ModelError(f"{path}/modules.json: the Transformer module's folder {folder}/ is not in the directory")
    return files


def _pooling_mode(cfg: dict, path: Path) -> str:
    """A Pooling config's modes, joined by "+" in their order: `pooling_mode` (a name or a list), else the
    legacy flags in sentence-transformers' order (none set: mean)."""
    modes = cfg.get("pooling_mode")
    if modes is None:
        modes = [mode for flag, mode in LEGACY_POOLING_FLAGS.items() if cfg.get(flag)] or ["mean"]
    modes = [modes] if isinstance(modes, str) else modes
    if not isinstance(modes, list) or not modes or not all(mode in POOLING_MODES for mode in modes):
        shown = " + ".join(map(str, modes)) if isinstance(modes, list) else repr(modes)
        raise ModelError(f"{path}: pooling {shown} is not supported; docembed pools by {', '.join(POOLING_MODES)}")
    return "+".join(modes)


def _projection(path: Path, folder: str) -> Projection:
    """A Dense module's config.json and weights file, read as sentence-transformers 6.3 reads them."""
    where = path / folder
    cfg = read_object(where / "config.json")
    for key, value in PROJECTION_FIXED.items():
        if cfg.get(key, value) != value:
            raise ModelError(f"{where}/config.json: {key} {cfg[key]!r} is not implemented (only {value!r})")
    if cfg.get("module_output_name") not in (None, PROJECTION_FIXED["module_input_name"]):
        raise ModelError(
            f"{where}/config.json: module_output_name {cfg['module_output_name']!r} is not implemented "
            "(the projection replaces the sentence embedding)"
        )
    sizes = {}
    for key in ("in_features", "out_features"):
        value = cfg.get(key)
        if type(value) is not int or value < 1:
            raise ModelError(f"{where}/config.json: {key} {value!r} is not a positive whole number")
        sizes[key] = value
    flags = {key: cfg.get(key, default) for key, default in (("bias", True), ("use_residual", False))}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise ModelError(f"{where}/config.json: {key} {value!r} is not true or false")
    activation = cfg.get("activation_function", DEFAULT_PROJECTION_ACTIVATION)
    module, _, name = str(activation).rpartition(".")
    if not (isinstance(activation, str) and module.startswith("torch.nn") and name in PROJECTION_ACTIVATIONS):
        known = ", ".join(f"torch.nn.{name}" for name in PROJECTION_ACTIVATIONS)
        raise ModelError(
            f"{where}/config.json: activation_function {activation!r} is not implemented (docembed runs {known})"
        )
    activation = PROJECTION_ACTIVATIONS[name]
    return Projection(
        folder,
        **sizes,
        bias=flags["bias"],
        activation=activation,
        weights_sha256=weights.digest([weights.dense_file(where)]),
        residual=flags["use_residual"],
    )


@dataclasses.dataclass(frozen=True)
class TransformerArgs:
    """What the sentence-transformers Transformer module's config changes in the model and its tokenizer."""

    max_seq_length: int | None  # the window before the model's positions bound it; None: the positions
    lowercase: bool  # do_lower_case: texts are lower-cased before the tokenizer's own normalizer
    config: dict  # config.json keys it overrides (config_args)
    tokenizer: dict  # the tokenizer's loader arguments (tokenizer_args), over tokenizer_config.json's
    files: Path  # where the model's own files are (`_model_files`)


# sentence-transformers 6.3's Transformer.load_config reads the first of these that exists and is not empty:
# the one name since version 2, then earlier versions' names per architecture.
TRANSFORMER_CONFIGS = (
    "sentence_bert_config.json",
    "sentence_roberta_config.json",
    "sentence_distilbert_config.json",
    "sentence_camembert_config.json",
    "sentence_albert_config.json",
    "sentence_xlm-roberta_config.json",
    "sentence_xlnet_config.json",
)
# Keyword arguments for transformers' loaders of the model, the tokenizer and the config, by their names
# before sentence-transformers 6 and since (where a file has both, the old one wins, as 6.3 merges them).
LOADER_ARGS = (("model_args", "model_kwargs"), ("tokenizer_args", "processor_kwargs"), ("config_args", "config_kwargs"))
# The tokenizer's that docembed applies: the window, and the settings its tokenizer class reads
# (`tokenizer_class.SETTINGS`).
TOKENIZER_ARGS = ("model_max_length", *tokenizer_class.SETTINGS)
# Loader arguments that change where from, in what precision or with which attention kernel transformers loads
# and runs a model, never what it computes in docembed, which takes its dtype and kernels from its own options;
# sentence-transformers drops trust_remote_code itself (a model's files may not ask for remote code).
INERT_LOADER_ARGS = frozenset(
    {
        "trust_remote_code",
        "revision",
        "cache_dir",
        "token",
        "local_files_only",
        "torch_dtype",
        "dtype",
        "attn_implementation",
        "low_cpu_mem_usage",
        "device_map",
        "use_fast",
        "padding_side",
    }
)


def transformer(path: Path) -> TransformerArgs:
    """The Transformer module's config (in `_model_files`), read as sentence-transformers 6.3 reads it: only as
    part of modules.json's model. A loader argument docembed cannot apply is refused: every config key overrides
    config.json's, the tokenizer's model_max_length and do_lower_case apply, nothing of the model's does.
    The window: the tokenizer's model_max_length, else max_seq_length (sentence-transformers 6 writes none),
    else tokenizer_config.json's model_max_length."""
    name, cfg = "sentence_bert_config.json", {}
    modules = _modules(path)
    files = _model_files(path, modules)
    if modules:
        name, cfg = next(((n, c) for n in TRANSFORMER_CONFIGS if (c := read_object(files / n, {}))), (name, cfg))
    (model_name, model_args), (tokenizer_name, tokenizer_args), (_, config_args) = (
        _loader_args(cfg, names, files / name) for names in LOADER_ARGS
    )
    unsupported = [f"{model_name}.{key}" for key in model_args]
    unsupported += [f"{tokenizer_name}.{key}" for key in tokenizer_args if key not in TOKENIZER_ARGS]
    if unsupported:
        raise ModelError(
            f"{files}/{name}: {unsupported[0]} is an argument of transformers' loaders that docembed does not "
            f"apply (it applies every config_args, and of tokenizer_args {', '.join(TOKENIZER_ARGS)})"
        )
    window = tokenizer_args.get("model_max_length", cfg.get("max_seq_length"))
    if window is None:
        window = read_object(files / "tokenizer_config.json", {}).get("model_max_length")
    if window is not None and (type(window) not in (int, float) or window < 1):
        raise ModelError(f"{files}: max_seq_length {window!r} is not a positive number of tokens")
    return TransformerArgs(
        max_seq_length=None if window is None else int(window),
        lowercase=bool(cfg.get("do_lower_case")),
        config=config_args,
        tokenizer=tokenizer_args,
        files=files,
    )


def _loader_args(cfg: dict, names: tuple[str, str], where: Path) -> tuple[str, dict]:
    """One loader's arguments and the name they came under."""
    name = next((n for n in names if n in cfg), names[1])
    args = cfg.get(name) or {}
    if not isinstance(args, dict):
        raise ModelError(f"{where}: {name} is not a mapping of arguments")
    return name, {key: value for key, value in args.items() if key not in INERT_LOADER_ARGS}


def model_config(path: Path, dim: int) -> tuple[tuple[tuple[str, str], ...], str | None, int | None]:
    """config_sentence_transformers.json: the prompts, the default prompt's name and truncate_dim (None where
    it keeps all of the `dim` dimensions the modules make)."""
    st_cfg = read_object(path / "config_sentence_transformers.json", {})
    prompts = st_cfg.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise ModelError(f"{path}/config_sentence_transformers.json: prompts is not a mapping of names to texts")
    default = st_cfg.get("default_prompt_name")
    if default is not None and default not in prompts:
        raise ModelError(
            f"{path}/config_sentence_transformers.json: default_prompt_name {default!r} is none of its prompts "
            f"({', '.join(map(repr, prompts)) or 'none'})"
        )
    truncate_dim = st_cfg.get("truncate_dim")
    if truncate_dim is not None and (type(truncate_dim) is not int or truncate_dim < 1):
        raise ModelError(
            f"{path}/config_sentence_transformers.json: truncate_dim {truncate_dim!r} is not a positive number"
        )
    if truncate_dim is not None and truncate_dim >= dim:
        truncate_dim = None  # sentence-transformers' slice to it keeps every dimension
    return tuple(sorted(prompts.items())), default, truncate_dim


def projection_params(where: Path, projection: Projection, tensors: dict) -> Params:
    """A Dense module's `linear.weight` [out, in], `linear.bias` [out] and, for a residual between other sizes,
    `residual.weight` [out, in] -> w_IO, b_O and r_IO (`encoders.project`), float32; ModelError where one is
    missing or of another shape than its config.json says, or where its file `where` holds another."""
    wanted = {"linear.weight": (projection.out_features, projection.in_features)}
    if projection.bias:
        wanted["linear.bias"] = (projection.out_features,)
    if projection.residual and projection.in_features != projection.out_features:
        wanted["residual.weight"] = wanted["linear.weight"]
    for name, shape in wanted.items():
        if name not in tensors:
            raise ModelError(f"{where} lacks tensor {name!r}, which its config.json implies")
        if tuple(tensors[name].shape) != shape:
            raise ModelError(
                f"{where}: tensor {name!r} has shape {tuple(tensors[name].shape)}, but its config.json implies {shape}"
            )
    if unknown := sorted(set(tensors) - set(wanted)):
        # sentence-transformers would load them into a module docembed does not run: refused, never skipped.
        raise ModelError(f"{where} holds tensor {unknown[0]!r}, which its config.json does not imply")
    names = {"linear.weight": "w_IO", "linear.bias": "b_O", "residual.weight": "r_IO"}
    # The [out, in] matrices transposed to [in, out], as `project` multiplies them (.T leaves the bias as it is).
    return {names[name]: np.asarray(tensors[name], np.float32).T for name in wanted}
