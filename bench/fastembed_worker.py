"""fastembed in a process of its own, for bench/peers.py: pickled requests on stdin, pickled replies on stdout.

    .venv-fastembed/bin/python bench/fastembed_worker.py MODEL_DIR

fastembed pins huggingface_hub below 2 and the project needs 2.4 or later, so
it lives in a venv of its own (`make bench` builds it). MODEL_DIR holds the
model as fastembed loads it (model.onnx, tokenizer and config files); nothing
is fetched. Each request is a list of texts, each reply their embeddings
[n, dim] float32; the first reply is fastembed's version and what its ONNX
Runtime session runs on (bench/worker.py).
"""

from __future__ import annotations

import sys

import numpy as np
from fastembed import TextEmbedding
from fastembed import __version__ as fastembed_version
from worker import serve

# The model fastembed knows all-MiniLM-L6-v2 as: its pooling (mean) and normalisation come from its table.
MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def main() -> None:
    sys.stdout = sys.stderr  # fastembed's own prints, while it loads, must not land among the replies
    model = TextEmbedding(MODEL, specific_model_path=sys.argv[1], local_files_only=True)
    sys.stdout = sys.__stdout__
    hello = f"fastembed {fastembed_version}, ONNX Runtime providers {model.model.model.get_providers()}"
    serve(hello, lambda texts: np.stack(list(model.embed(texts))).astype(np.float32))


if __name__ == "__main__":
    main()
