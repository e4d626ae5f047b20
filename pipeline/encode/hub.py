"""Hugging Face Hub ids as models: `org/name` or `org/name@revision`, downloaded into the hub's cache.

`huggingface_hub` does the work and reads its own environment: HF_HOME (the
cache), HF_HUB_OFFLINE (cache only), HF_ENDPOINT (a mirror) and HF_TOKEN
(private and gated repos). The token is never passed through docembed's code,
so it cannot reach a log line, an error message or the output.

On a cluster the driver resolves the revision to its commit once (`download`)
and the stages receive `org/name@<commit>`: with a commit, an actor whose node
already holds the snapshot makes no request at all, and actors on a node that
does not share one download under the hub library's per-file locks in its cache
(a `.lock` beside each blob), so each file crosses the network once per node.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pipeline.errors import ModelError, first_line

# org/name, each part of letters, digits, '-', '_' and '.', as the hub allows; a revision after '@'.
HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w./-]+))?")
# What a model directory is read from (model_dir): configs, weights and the tokenizer (vocab.txt: a BERT
# tokenizer saved before tokenizer.json); not the PyTorch, ONNX or other copies of the weights a repo may hold.
FILES = ["*.json", "*.safetensors", "*vocab.txt"]
# PyTorch's copy: fetched only into a folder of weights (`_torch_only`) that holds no safetensors, where
# model_dir reads it. The hub's conversion bot converted many repos' own weights, and not their Dense modules'.
TORCH_FILES = "pytorch_model*.bin"
WEIGHTED_MODULES = (".Transformer", ".Dense")  # the sentence-transformers modules that hold weights


def is_hub_id(model: str) -> bool:
    return HUB_ID.fullmatch(model) is not None


def download(model: str) -> tuple[Path, str]:
    """`org/name[@revision]` -> (its snapshot directory in the hub cache, `org/name@<commit>`)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    match = HUB_ID.fullmatch(model)
    repo, revision = match["repo"], match["revision"]
    where = f"Hugging Face Hub model {model}"
    try:
        path = Path(snapshot_download(repo, revision=revision, allow_patterns=FILES))
        if lacking := _torch_only(path):
            snapshot_download(repo, revision=path.name, allow_patterns=lacking)  # the same commit
    except RevisionNotFoundError:
        raise ModelError(f"{where}: the repo has no revision {revision!r}") from None
    except (RepositoryNotFoundError, GatedRepoError):
        raise ModelError(
            f"{where}: no such repo, or it is private or gated and HF_TOKEN does not grant access "
            f"(a local directory of that name does not exist either)"
        ) from None
    except LocalEntryNotFoundError as e:
        cause = "HF_HUB_OFFLINE is set" if "HF_HUB_OFFLINE" in str(e) else "the hub could not be reached"
        raise ModelError(f"{where} is not in the hub cache (HF_HOME) and {cause}") from None
    except HfHubHTTPError as e:
        raise ModelError(f"{where}: {first_line(e)}") from None
    return path, f"{repo}@{path.name}"


def _torch_only(snapshot: Path) -> list[str]:
    """Patterns for the torch weights of each folder of `snapshot` that holds weights (the Transformer module's
    and the Dense modules', modules.json says which; without it, the root) and has no safetensors: as
    transformers and sentence-transformers fall back to them. model_dir checks modules.json itself."""
    try:
        modules = json.loads((snapshot / "modules.json").read_text())
        folders = [m.get("path", "") for m in modules if str(m.get("type")).endswith(WEIGHTED_MODULES)]
    except (OSError, ValueError, AttributeError, TypeError):
        folders = [""]
    return [
        (Path(folder) / TORCH_FILES).as_posix()
        for folder in dict.fromkeys(folders)
        if isinstance(folder, str) and not any((snapshot / folder).glob("*.safetensors"))
    ]
