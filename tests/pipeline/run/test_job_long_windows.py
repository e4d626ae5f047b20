"""The job's stages at a 2,048-token window, for every long-context family, against the Embedder.

The committed fixture models are tiny random-weight models of each family
(tests/make_family_fixtures.py). The RoPE families and T5 take any window their
config.json allows; a copy of each whose config allows 2,048 positions (and, for
XLM-RoBERTa's learned positions, with rows added to its position table) is
chunked and encoded as the job does it. A document that fits one window is one
chunk holding the whole text, so its embedding must be the Embedder's of that
text at the same window.

Two families run the whole job on Ray (a Matryoshka dim, and a decoder with a
prompt and Dense modules), with what it records and `jobs/search.py` over its
output; the others run the same stage classes (`ChunkBlock`, `EncodeBlock`) in
this process, where the family is all that differs: a Ray job adds ~10 s of CPU
in actor start-ups to each and checks nothing more of the family.
"""

import json
import shutil
from pathlib import Path

import ml_dtypes  # noqa: F401  registers bfloat16 with numpy: the fixtures' weights
import numpy as np
import pyarrow as pa
import pytest
from safetensors.numpy import load_file, save_file

from jobs.search import main as search_main
from pipeline import Embedder, JobConfig, run_job
from pipeline.config import chunks_and_encoder
from pipeline.encode.encoder_config import EncoderConfig
from pipeline.encode.model_dir import ModelSpec
from pipeline.encode.stage import EncodeBlock
from pipeline.results import embedding_matrix, read_report, read_table
from pipeline.run.stages import ChunkBlock
from pipeline.schemas import DOC_SCHEMA
from pipeline.text.tokenizer import Tokenizer

from support import FAMILY_FIXTURES

WINDOW = 2048
# Which fixture, and what else the run exercises: a prompt (NomicBERT's task prefixes), a Matryoshka dim.
FAMILIES = {
    "xlm-roberta": ("xlm-roberta-mlm-prefix", {}),
    "modernbert": ("modernbert-hub-config", {}),
    "nomic_bert": ("nomic-contrastors", {"prompt": "search_document"}),
    "gte": ("gte-new-ntk", {"dim": 16}),
    # No position table: only the window bound (n_positions) grows, its relative bias buckets any distance.
    "t5": ("t5-encoder-st", {}),
    # Causal attention at a long window, and the last token pooled: the <|endoftext|> its tokenizer appends.
    "qwen3": ("qwen3-embedding", {}),
    # Causal attention within a 16-token sliding window at every layer, pooled by the </s> appended after <s> text.
    "mistral": ("mistral-embedding", {}),
    # Bidirectional attention with sliding layers, a BPE with byte fallback between <bos> and <eos>, the
    # document prompt, two Dense modules.
    "gemma3": ("gemma3-embedding", {"prompt": "document"}),
}
# The families whose fixture runs the whole job on Ray: a Matryoshka dim, which the writer and jobs/search.py
# carry; a decoder with a prompt, sliding layers and Dense modules.
ON_RAY = ("gte", "gemma3")
# The generated documents' words, in order.
WORDS = [f"{w}{i % 97}" for i in range(3 * WINDOW) for w in ("river", "stone", "light")]
# Tokens of the generated documents: one chunk near the window, one short, one of three chunks.
LENGTHS = {"near-window": WINDOW - 60, "short": 300, "three-chunks": 2 * WINDOW + 500}


def long_context_copy(name: str, root: Path) -> Path:
    """The fixture with WINDOW positions (learned position tables get rows added)."""
    path = root / name
    shutil.copytree(FAMILY_FIXTURES / name, path)
    config = json.loads((path / "config.json").read_text())
    offset = config.get("pad_token_id", 0) + 1 if config["model_type"] == "xlm-roberta" else 0
    key = "n_positions" if "n_positions" in config else "max_position_embeddings"
    if config[key] < WINDOW + offset:
        config[key] = WINDOW + offset
        tensors = load_file(path / "model.safetensors")
        for k, v in tensors.items():
            if k.endswith("position_embeddings.weight"):
                extra = np.random.default_rng(0).normal(0, 0.02, (WINDOW + offset - v.shape[0], v.shape[1]))
                tensors[k] = np.concatenate([v, extra.astype(v.dtype)])
        save_file(tensors, str(path / "model.safetensors"))
        (path / "config.json").write_text(json.dumps(config))
    return path


def documents(tokenizer: Tokenizer, root: Path) -> Path:
    """Text files of LENGTHS tokens (content tokens; the window adds the special ones and the prompt)."""
    ids = tokenizer.encode_content([" ".join(WORDS)])[0]
    docs = root / "docs"
    docs.mkdir()
    text = " ".join(WORDS)
    for name, n in LENGTHS.items():
        (docs / f"{name}.txt").write_text(text[: ids.offsets[n - 1][1]])
    return docs


def stages_in_this_process(cfg: JobConfig, spec: ModelSpec) -> dict[str, list[tuple[dict, np.ndarray]]]:
    """Document stem -> its chunk rows and embeddings, as the job's chunk and encode stages make them here."""
    chunking, encoder = chunks_and_encoder(spec, cfg)
    (docs,) = cfg.inputs
    rows = [{"doc_id": str(p), "kind": "text", "pages": [p.read_text()]} for p in sorted(Path(docs).iterdir())]
    packs = ChunkBlock(cfg.model, chunking, call_packs=8)(pa.Table.from_pylist(rows, schema=DOC_SCHEMA))
    return by_document(EncodeBlock(cfg.model, encoder)(packs))


def on_ray(cfg: JobConfig, spec: ModelSpec, capsys) -> dict[str, list[tuple[dict, np.ndarray]]]:
    """The same, from a job's output; checks what the job records of the window, and a search over it."""
    run_job(cfg)
    config = read_report(cfg.output)["config"]
    assert config["encoder"]["max_tokens"] == WINDOW and config["encoder"]["dim"] == cfg.encoder.dim
    assert config["chunking"]["prompt"] == spec.prompt_text(cfg.prompt)
    # jobs/search.py embeds the query as the output was embedded: its --dim, the query's own prompt.
    capsys.readouterr()
    assert search_main(["--output", cfg.output, "--query", "river stone", "--top", "1", "--prompt", ""]) == 0
    assert capsys.readouterr().out.startswith("top 1 chunks for: 'river stone'")
    return by_document(read_table(cfg.output))


def by_document(table: pa.Table) -> dict[str, list[tuple[dict, np.ndarray]]]:
    table = table.sort_by([("doc_id", "ascending"), ("chunk_index", "ascending")])
    chunks = {}
    for row, vector in zip(table.drop_columns(["embedding"]).to_pylist(), embedding_matrix(table)):
        chunks.setdefault(Path(row["doc_id"]).stem, []).append((row, vector))
    return chunks


@pytest.mark.integration
@pytest.mark.parametrize("family", FAMILIES)
def test_the_jobs_stages_at_a_2048_token_window_equal_the_embedder(ray_local, tmp_path, capsys, family):
    name, options = FAMILIES[family]
    model = long_context_copy(name, tmp_path)
    prompt, dim = options.get("prompt"), options.get("dim")
    embedder = Embedder.load(str(model), max_tokens=WINDOW, dim=dim)
    spec = embedder.encoder.spec
    assert spec.arch.family == family
    cfg = JobConfig(
        inputs=(str(documents(embedder.tokenizer, tmp_path)),),
        output=str(tmp_path / "out"),
        model=str(model),
        max_tokens=WINDOW,
        overlap=64,
        prompt=prompt,
        encoder=EncoderConfig(dim=dim),
    )
    by_doc = on_ray(cfg, spec, capsys) if family in ON_RAY else stages_in_this_process(cfg, spec)

    assert {doc: len(chunks) for doc, chunks in by_doc.items()} == {"near-window": 1, "short": 1, "three-chunks": 3}
    n_around = Tokenizer(model / "tokenizer.json", prompt=spec.prompt_text(prompt)).n_special
    # Full windows, but for the end of a word ("river12" is several tokens): no sentence ends in this text.
    longest = max(len(c.ids) for c in embedder.tokenizer.encode_content(sorted(set(WORDS))))
    assert all(WINDOW - longest < row["n_tokens"] <= WINDOW for row, _ in by_doc["three-chunks"][:2])
    for doc in ("near-window", "short"):
        ((row, vector),) = by_doc[doc]
        assert row["n_tokens"] == LENGTHS[doc] + n_around
        want = embedder.embed([row["text"]], prompt=prompt)[0]
        assert vector.shape == (dim or spec.dim,)
        cos = float(vector @ want / np.linalg.norm(vector) / np.linalg.norm(want))
        assert cos >= 0.99999, (doc, cos)
