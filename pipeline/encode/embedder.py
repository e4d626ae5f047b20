"""`Embedder`: the job's encoder for notebooks, tests and one-off queries."""

from __future__ import annotations

import numpy as np

from pipeline.encode import model_dir
from pipeline.encode.encoder import Encoder, EncoderConfig
from pipeline.encode.encoder_config import check_shape
from pipeline.errors import ConfigError, InputError
from pipeline.results import read_report
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
        return cls._of(model_dir.resolve(model), EncoderConfig(**encoder_options))

    @classmethod
    def _of(cls, spec: model_dir.ModelSpec, cfg: EncoderConfig) -> Embedder:
        tokenizer = _fits(model_dir.tokenizer(spec.path), check_shape(spec, cfg)[0], "the special tokens")
        return cls(Encoder(spec, cfg, tail_halvings=INTERACTIVE_TAIL_HALVINGS), tokenizer)

    @classmethod
    def for_output(cls, output: str, report: dict | None = None) -> Embedder:
        """The embedder of a finished output's queries: its model and its --dim (`report`: its `_SUCCESS`, read
        here when not given), so that a query is truncated as its chunks were. InputError where the model loaded
        here did not make it."""
        report = read_report(output) if report is None else report
        spec = model_dir.resolve(report["config"]["model"])
        if spec.fingerprint != report["model"]["fingerprint"]:  # before the weights load: a 7B model's take minutes
            raise InputError(
                f"{output} was embedded by another model than the one loaded: {report['model']['id']} with "
                f"fingerprint {report['model']['fingerprint']} then, {spec.fingerprint} now (other files, or "
                "an output an older docembed made); embed it again (--overwrite) to search it"
            )
        return cls._of(spec, EncoderConfig(dim=report["config"]["encoder"].get("dim")))

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
        if texts is None or isinstance(texts, (bytes, dict)):  # a dict would embed its keys
            raise TypeError(f"embed() takes a list of strings, not {type(texts).__name__}")
        if prompt is not None and not isinstance(prompt, str):
            raise TypeError(f"embed()'s prompt is a name or text, a string, not {type(prompt).__name__}")
        texts = list(texts)
        odd = next((t for t in texts if not isinstance(t, str)), "")
        if not isinstance(odd, str):
            raise TypeError(f"embed() takes strings, not {type(odd).__name__} ({odd!r:.40})")
        ids = self._tokenizer(prompt).encode_truncated(texts, self.encoder.window)
        embeddings, _ = self.encoder.encode_ids(ids)
        return embeddings

    def _tokenizer(self, prompt: str | None) -> Tokenizer:
        text = self.encoder.spec.prompt_text(prompt)
        if not text:
            return self.tokenizer
        prompted = model_dir.tokenizer(self.encoder.spec.path, prompt=text)
        return _fits(prompted, self.encoder.window, f"the special tokens and the prompt {text!r}")


def _fits(tokenizer: Tokenizer, window: int, what: str) -> Tokenizer:
    """`tokenizer`, where its tokens around every text leave the window room for one of the text's."""
    if tokenizer.n_special >= window:
        raise ConfigError(f"max_tokens {window} leaves no room for text: {what} take {tokenizer.n_special} tokens")
    return tokenizer
