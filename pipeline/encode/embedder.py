"""`Embedder`: the job's encoder for notebooks, tests and one-off queries."""

from __future__ import annotations

import numpy as np

from pipeline.encode import model_dir
from pipeline.encode.encoder import Encoder, EncoderConfig
from pipeline.text.tokenizer import Tokenizer

# A handful of texts at a time: a call's last batch may shrink to a single row
# (of each data shard), so embedding 3 texts does not compute 8.
INTERACTIVE_TAIL_HALVINGS = 16


class Embedder:
    """Texts -> embeddings with the same tokenizer, weights and compiled encoder as the job.

    Texts longer than the model's window are truncated to it, as
    sentence-transformers does; the job instead splits them into chunks.
    A prompt's tokens count against the window, as in the job.
    """

    def __init__(self, encoder: Encoder, tokenizer: Tokenizer):
        self.encoder = encoder
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, model: str | None = None, **encoder_options) -> Embedder:
        """`model`: a model directory, URI or hub id, or None for the bundled default.
        Options: see `EncoderConfig` (e.g. `dim=256`, `max_tokens=2048`)."""
        spec = model_dir.resolve(model)
        encoder = Encoder(spec, EncoderConfig(**encoder_options), tail_halvings=INTERACTIVE_TAIL_HALVINGS)
        return cls(encoder, Tokenizer(spec.path / "tokenizer.json"))

    @property
    def dim(self) -> int:
        return self.encoder.dim

    @property
    def fingerprint(self) -> str:
        """The model fingerprint a job records in `_SUCCESS`: equal fingerprints, comparable vectors."""
        return self.encoder.spec.fingerprint

    def embed(self, texts: list[str], prompt: str | None = None) -> np.ndarray:
        """list of n strings -> float32 array [n, dim].

        `prompt`: a name among the model's prompts or the text itself, as `--prompt`
        (see `ModelSpec.prompt_text`); None: the model's default prompt, if any.
        """
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of strings, not a single string")
        ids = self._tokenizer(prompt).encode_truncated(list(texts), self.encoder.window)
        embeddings, _ = self.encoder.encode_ids(ids)
        return embeddings

    def _tokenizer(self, prompt: str | None) -> Tokenizer:
        text = self.encoder.spec.prompt_text(prompt)
        return Tokenizer(self.encoder.spec.path / "tokenizer.json", prompt=text) if text else self.tokenizer
