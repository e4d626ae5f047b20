"""Prompts and Matryoshka truncation, against the NomicBERT fixture's transformers embeddings.

tests/make_family_fixtures.py recorded that model's sentence-transformers
embeddings of its texts with and without the `search_document` prompt.
"""

import dataclasses
import json
import logging
import shutil

import numpy as np
import pytest

from pipeline import Embedder
from pipeline.encode import model_dir
from pipeline.encode.encoder_config import EncoderConfig
from pipeline.errors import ConfigError, ModelError
from pipeline.io.shards import ShardFields
from pipeline.output.fingerprint import fingerprint, mismatch
from pipeline.text.chunking import ChunkingConfig, chunk_document
from pipeline.text.tokenizer import Tokenizer

from support import FAMILY_FIXTURES

NOMIC = FAMILY_FIXTURES / "nomic-contrastors"
COSINE = 0.99999


def cosine(a, b):
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


@pytest.fixture(scope="module")
def reference():
    data = np.load(FAMILY_FIXTURES / "nomic-contrastors.npz")
    return [str(t) for t in data["texts"]], data


@pytest.fixture(scope="module")
def embedder():
    return Embedder.load(str(NOMIC))


def test_a_prompt_by_name_or_by_text_matches_sentence_transformers(embedder, reference):
    texts, ref = reference
    assert str(ref["prompt"]) == "search_document: "
    by_name = embedder.embed(texts, prompt="search_document")
    by_text = embedder.embed(texts, prompt="search_document: ")
    assert cosine(by_name, ref["prompted_pooled"]).min() >= COSINE
    np.testing.assert_array_equal(by_name, by_text)
    # The longest texts fill the window: the prompt's tokens took the place of their last ones.
    assert cosine(embedder.embed(texts), ref["pooled"]).min() >= COSINE
    assert cosine(by_name, ref["pooled"]).max() < 0.999


def test_prompt_names_win_over_literal_text_and_the_default_prompt_applies():
    spec = model_dir.resolve(str(NOMIC))
    assert dict(spec.prompts) == {"search_query": "search_query: ", "search_document": "search_document: "}
    assert spec.prompt_text("search_query") == "search_query: "
    assert spec.prompt_text("query: ") == "query: "
    assert spec.prompt_text(None) == spec.prompt_text("") == ""
    with_default = dataclasses.replace(spec, default_prompt_name="search_query")
    assert with_default.prompt_text(None) == "search_query: " and with_default.prompt_text("") == ""


@pytest.mark.parametrize("model", [str(NOMIC), None], ids=["nomic", "the default model"])
def test_a_word_the_model_names_no_prompt_is_refused_and_text_is_text(model):
    """sentence-transformers refuses a prompt_name it does not know; a word is a name, text has white space or a
    colon. The default model names no prompt: another model's name would have been put before every chunk."""
    spec = model_dir.resolve(model)
    for word in ("search_qurey", "search_document" if model is None else "Retrieval-query"):
        with pytest.raises(ConfigError, match=f"has no prompt named '{word}' .*end it with a space: '{word} '$"):
            spec.prompt_text(word)
    assert spec.prompt_text("query: ") == "query: " and spec.prompt_text("passage:") == "passage:"
    # Text that is no ASCII word: BGE's Chinese query instruction ends in a full-width colon.
    for text in ("为这个句子生成表示以用于检索相关文章：", "query：", "<query>"):
        assert spec.prompt_text(text) == text


def test_a_model_that_pools_without_the_prompt_is_refused_with_a_prompt(tmp_path):
    path = tmp_path / "m"
    shutil.copytree(NOMIC, path)
    pooling = json.loads((path / "1_Pooling" / "config.json").read_text())
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pooling | {"include_prompt": False}))
    spec = model_dir.resolve(str(path))
    assert spec.prompt_text(None) == ""
    with pytest.raises(ConfigError, match="include_prompt false"):
        spec.prompt_text("search_query")


def test_a_prompt_that_does_not_end_in_white_space_warns_once(caplog):
    spec = model_dir.resolve(str(NOMIC))
    for prompt in ("query:", "query:", "search_query", "query: "):
        spec.prompt_text(prompt)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "the prompt 'query:' does not end in white space" in warned[0]


@pytest.mark.parametrize("window, overlap", [(64, 8), (8192, 256)])
def test_every_chunk_carries_the_prompt_within_the_window(window, overlap):
    tokenizer = Tokenizer(NOMIC / "tokenizer.json", prompt="search_document: ")
    plain = Tokenizer(NOMIC / "tokenizer.json")
    prompt_ids = tokenizer.prefix_ids[len(plain.prefix_ids) :]
    assert prompt_ids and tokenizer.n_special == plain.n_special + len(prompt_ids)
    text = " ".join(f"word{i % 50} and more" for i in range(window * 2))
    enc = tokenizer.encode_content([text])[0]
    cfg = ChunkingConfig(max_tokens=window, overlap=overlap, prompt="search_document: ", mode="window")
    cfg.validate(tokenizer.n_special, 8192)
    chunks = chunk_document(text, enc.ids, enc.offsets, None, tokenizer, cfg)
    assert len(chunks) > 3
    content = window - tokenizer.n_special
    for i, chunk in enumerate(chunks):
        assert len(chunk.token_ids) <= window
        assert chunk.token_ids[: len(tokenizer.prefix_ids)] == plain.prefix_ids + prompt_ids
        content_ids = chunk.token_ids[len(tokenizer.prefix_ids) : -len(plain.suffix_ids)]
        assert content_ids == enc.ids[i * (content - overlap) :][:content]
    assert len(chunks[0].token_ids) == window
    with pytest.raises(ConfigError, match="--max-tokens must be in"):
        ChunkingConfig(max_tokens=tokenizer.n_special, overlap=0).validate(tokenizer.n_special, 8192)


def test_dim_truncates_and_renormalises(embedder, reference):
    texts, _ = reference
    full = embedder.embed(texts)
    small = Embedder.load(str(NOMIC), dim=12)
    got = small.embed(texts)
    assert small.dim == 12 and got.shape == (len(texts), 12)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1, rtol=1e-6)
    want = full[:, :12] / np.linalg.norm(full[:, :12], axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, atol=1e-6)


def with_truncate_dim(tmp_path, truncate_dim):
    path = tmp_path / f"truncate-{truncate_dim!r}"
    shutil.copytree(NOMIC, path, dirs_exist_ok=True)
    st_cfg = json.loads((path / "config_sentence_transformers.json").read_text())
    (path / "config_sentence_transformers.json").write_text(json.dumps(st_cfg | {"truncate_dim": truncate_dim}))
    return str(path)


def test_the_models_truncate_dim_cuts_its_output_without_renormalising_as_sentence_transformers_does(
    tmp_path, embedder, reference
):
    texts, _ = reference
    full = embedder.embed(texts)
    cut = Embedder.load(with_truncate_dim(tmp_path, 12))
    assert cut.dim == 12
    np.testing.assert_allclose(cut.embed(texts), full[:, :12], atol=1e-6)
    assert cut.fingerprint != embedder.fingerprint
    # --dim within it: the first dimensions, re-normalised, as without it.
    np.testing.assert_allclose(
        Embedder.load(with_truncate_dim(tmp_path, 12), dim=8).embed(texts),
        Embedder.load(str(NOMIC), dim=8).embed(texts),
        atol=1e-6,
    )
    with pytest.raises(ConfigError, match="--dim 13 is more than model .* 12 dimensions"):
        Embedder.load(with_truncate_dim(tmp_path, 12), dim=13)
    # As many dimensions as the model has, or more: sentence-transformers' slice keeps them all.
    assert model_dir.resolve(with_truncate_dim(tmp_path, 32)).fingerprint == embedder.fingerprint
    for bad in (0, "12", 1.5):
        with pytest.raises(ModelError, match=f"truncate_dim {bad!r} is not a positive number"):
            model_dir.resolve(with_truncate_dim(tmp_path, bad))


def test_dim_beyond_the_model_and_windows_beyond_its_positions_are_refused():
    with pytest.raises(ConfigError, match="--dim 33 is more than model .* 32 dimensions"):
        Embedder.load(str(NOMIC), dim=33)
    with pytest.raises(ConfigError, match="--dim must be at least 1"):
        Embedder.load(str(NOMIC), dim=0)
    with pytest.raises(
        ConfigError,
        match="--max-tokens 8193: a window of 8193 tokens is longer than this nomic_bert model's 8192 positions",
    ):
        Embedder.load(str(NOMIC), max_tokens=8193)


def test_prompt_dim_chunking_mode_and_shard_fields_are_in_the_fingerprint():
    spec = model_dir.resolve(str(NOMIC))

    def of(chunking=ChunkingConfig(64, 8), encoder=EncoderConfig(), fields=ShardFields()) -> dict:
        return fingerprint(spec, chunking, encoder, "pypdf", fields)

    base = of()
    prompted = of(chunking=ChunkingConfig(64, 8, "search_document: "))
    smaller = of(encoder=EncoderConfig(dim=16))
    windows = of(chunking=ChunkingConfig(64, 8, mode="window"))
    body = of(fields=ShardFields(text="body"))
    assert prompted["prompt"] == "search_document: " and smaller["dim"] == 16
    assert base["chunking"] == "boundaries" and windows["chunking"] == "window"
    assert len({m["fingerprint"] for m in (base, prompted, smaller, windows, body)}) == 5
    assert "chunking 'boundaries' there, 'window' now" in mismatch("out", base, windows)
    assert "text_field 'text' there, 'body' now" in mismatch("out", base, body)
