"""fastembed in a process of its own, for bench/peers.py: pickled requests on stdin, pickled replies on stdout.

    .venv-fastembed/bin/python bench/fastembed_worker.py MODEL_DIR

fastembed pins huggingface_hub below 2 and the project needs 2.4 or later, so
it lives in a venv of its own (`make bench` builds it). MODEL_DIR holds the
model as fastembed loads it (model.onnx, tokenizer and config files); nothing
is fetched. Each request is a list of texts, each reply their embeddings
[n, dim] float32; the first reply is fastembed's version and what its ONNX
Runtime session runs on.
"""

from __future__ import annotations

import pickle
import sys

import numpy as np
from fastembed import TextEmbedding
from fastembed import __version__ as fastembed_version

# The model fastembed knows all-MiniLM-L6-v2 as: its pooling (mean) and normalisation come from its table.
MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def main() -> None:
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # anything a library prints must not land among the replies
    model = TextEmbedding(MODEL, specific_model_path=sys.argv[1], local_files_only=True)
    session = model.model.model
    pickle.dump(f"fastembed {fastembed_version}, ONNX Runtime providers {session.get_providers()}", replies)
    replies.flush()
    while True:
        try:
            texts = pickle.load(requests)
        except EOFError:
            return
        pickle.dump(np.stack(list(model.embed(texts))).astype(np.float32), replies)
        replies.flush()


if __name__ == "__main__":
    main()
