"""The tokenizer's prompt: a one-chunk document's ids are `tokenize(prompt + text)`'s, which is what
sentence-transformers encodes, for WordPiece, SentencePiece, byte-level BPE and Gemma's BPE tokenizers alike."""

import numpy as np
import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from pipeline.encode.model_location import default_model_dir
from pipeline.text.chunking import ChunkingConfig, chunk_document
from pipeline.text.tokenizer import Tokenizer

from support import FAMILY_FIXTURES

TEXTS = ["hello world", "Photosynthesis turns light into sugar.", "42 is the answer"]


def byte_level_bpe(tmp_path):
    """A byte-level BPE (RoBERTa's, ModernBERT's kind), trained here on the texts, each also after a space: a
    word after a space is 'Ġword', so a text's first word alone is another token than after the prompt's space."""
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator([" ".join(TEXTS)] * 10 + ["query: passage: search_document: "] * 10, trainer)
    hf.save(str(tmp_path / "tokenizer.json"))
    return tmp_path / "tokenizer.json"


TOKENIZERS = {
    "wordpiece (bundled)": lambda _: default_model_dir() / "tokenizer.json",
    "sentencepiece (xlm-roberta fixture)": lambda _: FAMILY_FIXTURES / "xlm-roberta-mlm-prefix" / "tokenizer.json",
    "byte-level bpe (trained here)": byte_level_bpe,
    # Gemma's: spaces turned to '▁' and the whole text one word, byte fallback for characters it lacks.
    "bpe with byte fallback (gemma3 fixture)": lambda _: FAMILY_FIXTURES / "gemma3-embedding" / "tokenizer.json",
}


@pytest.mark.parametrize("kind", TOKENIZERS)
@pytest.mark.parametrize("prompt", ["query: ", "search_document: ", "query:  ", " ", "title: none | text: "])
def test_a_one_chunk_documents_ids_are_those_of_the_prompt_and_text_tokenized_together(tmp_path, kind, prompt):
    path = TOKENIZERS[kind](tmp_path)
    tokenizer = Tokenizer(path, prompt=prompt)
    raw = HFTokenizer.from_file(str(path))
    raw.no_padding()  # the bundled file pads to 128, as sentence-transformers' tokenizer does not
    cfg = ChunkingConfig(max_tokens=128, overlap=0)
    for text in TEXTS:
        content = tokenizer.encode_content([text])[0]
        [chunk] = chunk_document(text, content.ids, content.offsets, None, tokenizer, cfg)
        assert chunk.token_ids == raw.encode(prompt + text).ids, (kind, text)
        assert tokenizer.encode_truncated([text], 128) == [chunk.token_ids]
        assert chunk.text == text


@pytest.mark.parametrize("kind", TOKENIZERS)
def test_offsets_after_a_prompts_white_space_point_into_the_text_itself(tmp_path, kind):
    tokenizer = Tokenizer(TOKENIZERS[kind](tmp_path), prompt="query: ")
    for text in TEXTS:
        spans = [text[s:e].strip().lstrip("\u2581") for s, e in tokenizer.encode_content([text])[0].offsets]
        assert "".join(spans).lower() == "".join(text.split()).lower(), (kind, text)


def mixed_text(runs: int) -> str:
    """Words, runs of spaces, blank lines, Chinese without spaces, tabs and CRLF, each run numbered."""
    kinds = ["hello world", "  two  spaces", "\n\nA paragraph.", "水在循环。云变成雨！", "x" * 15, "\ttab\r\n"]
    return " ".join(kinds[i % len(kinds)] + f" {i}" for i in range(runs))


@pytest.mark.parametrize("kind", TOKENIZERS)
@pytest.mark.parametrize("prompt", ["", "search_document: "])
def test_a_long_text_truncated_has_the_first_tokens_of_the_whole_from_a_prefix(tmp_path, kind, prompt):
    """Only a prefix is tokenised: 10 MB whole took 8 s and 1.6 GB to keep 254 tokens."""
    tokenizer = Tokenizer(TOKENIZERS[kind](tmp_path), prompt=prompt)
    text = mixed_text(3000)
    # Spaces first and a run without a space: no place to end a prefix within its first characters, whole.
    texts = [text, " " * 5000 + text, "y" * 20_000, "short", ""]
    whole = [tokenizer.prefix_ids + c.ids[:120] + tokenizer.suffix_ids for c in tokenizer.encode_content(texts)]
    assert tokenizer.encode_truncated(texts, 120 + tokenizer.n_special) == whole
    tokenised, encode_content = [], tokenizer.encode_content
    tokenizer.encode_content = lambda batch: tokenised.extend(map(len, batch)) or encode_content(batch)
    tokenizer.encode_truncated([text], 120 + tokenizer.n_special)
    assert tokenised and max(tokenised) <= 16 * 120 < len(text)


@pytest.mark.parametrize("kind", TOKENIZERS)
@pytest.mark.parametrize("prompt", ["", "search_document: "])
def test_a_long_document_tokenised_in_pieces_has_the_tokens_of_the_whole(tmp_path, kind, prompt):
    tokenizer = Tokenizer(TOKENIZERS[kind](tmp_path), prompt=prompt)
    # Pieces end before a space: every word here is shorter than the last quarter of a piece, where one may end.
    text = mixed_text(300)
    (whole,) = tokenizer.encode_content([text])
    ids, offsets = tokenizer.encode_document(text, piece_chars=64)
    assert ids.tolist() == whole.ids and offsets.tolist() == [list(o) for o in whole.offsets]
    # A run without white space longer than a piece is cut where it must be; no character is lost, and tokens
    # stay in order (SentencePiece's '▁' at a piece's start shares its first character's span).
    ids, offsets = tokenizer.encode_document("y" * 1000, piece_chars=64)
    assert offsets[0, 0] == 0 and offsets[-1, 1] == 1000 and (np.diff(offsets[:, 0]) >= 0).all()
    ids, offsets = tokenizer.encode_document("")
    assert ids.shape == (0,) and offsets.shape == (0, 2)
