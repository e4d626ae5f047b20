"""The tokenizer's prompt: its tokens are those that come before a text in `tokenize(prompt + text)`, which is
what sentence-transformers encodes, for WordPiece, SentencePiece and byte-level BPE tokenizers alike."""

import numpy as np
import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from pipeline.encode.model_location import default_model_dir
from pipeline.text.tokenizer import Tokenizer

from support import FAMILY_FIXTURES

TEXTS = ["hello world", "Photosynthesis turns light into sugar.", "42 is the answer"]


def byte_level_bpe(tmp_path):
    """A byte-level BPE (RoBERTa's, ModernBERT's kind), trained here on the texts: a word after a space is
    'Ġword', so a text's first word alone is another token than after the prompt's space."""
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator(TEXTS * 10 + ["query: passage: search_document: "] * 10, trainer)
    hf.save(str(tmp_path / "tokenizer.json"))
    return tmp_path / "tokenizer.json"


@pytest.mark.parametrize(
    "kind", ["wordpiece (bundled)", "sentencepiece (xlm-roberta fixture)", "byte-level bpe (trained here)"]
)
@pytest.mark.parametrize("prompt", ["query: ", "search_document: "])
def test_the_prompts_tokens_are_its_part_of_the_prompt_and_text_tokenized_together(tmp_path, kind, prompt):
    path = {
        "wordpiece (bundled)": lambda: default_model_dir() / "tokenizer.json",
        "sentencepiece (xlm-roberta fixture)": lambda: FAMILY_FIXTURES / "xlm-roberta-mlm-prefix" / "tokenizer.json",
        "byte-level bpe (trained here)": lambda: byte_level_bpe(tmp_path),
    }[kind]()
    plain, prompted = Tokenizer(path), Tokenizer(path, prompt=prompt)
    prompt_ids = prompted.prefix_ids[len(plain.prefix_ids) :]
    raw = HFTokenizer.from_file(str(path))
    raw.no_padding()  # the bundled file pads to 128, as sentence-transformers' tokenizer does not
    for text in TEXTS:
        together = raw.encode(prompt + text, add_special_tokens=False).ids
        # A chunk's tokens are cut from its document's: after a space, but at the document's start.
        after_a_space = raw.encode(" " + text, add_special_tokens=False).ids
        alone = raw.encode(text, add_special_tokens=False).ids
        assert together in (prompt_ids + alone, prompt_ids + after_a_space), (kind, text)


@pytest.mark.parametrize(
    "kind", ["wordpiece (bundled)", "sentencepiece (xlm-roberta fixture)", "byte-level bpe (trained here)"]
)
def test_a_long_document_tokenised_in_pieces_has_the_tokens_of_the_whole(tmp_path, kind):
    path = {
        "wordpiece (bundled)": lambda: default_model_dir() / "tokenizer.json",
        "sentencepiece (xlm-roberta fixture)": lambda: FAMILY_FIXTURES / "xlm-roberta-mlm-prefix" / "tokenizer.json",
        "byte-level bpe (trained here)": lambda: byte_level_bpe(tmp_path),
    }[kind]()
    tokenizer = Tokenizer(path)
    # Pieces end before a space: every word here is shorter than the last quarter of a piece, where one may end.
    runs = ["hello world", "  two  spaces", "\n\nA paragraph.", "水在循环。云变成雨！", "x" * 15, "\ttab\r\n"]
    text = " ".join(runs[i % len(runs)] + f" {i}" for i in range(300))
    (whole,) = tokenizer.encode_content([text])
    ids, offsets = tokenizer.encode_document(text, piece_chars=64)
    assert ids.tolist() == whole.ids and offsets.tolist() == [list(o) for o in whole.offsets]
    # A run without white space longer than a piece is cut where it must be; no character is lost, and tokens
    # stay in order (SentencePiece's '▁' at a piece's start shares its first character's span).
    ids, offsets = tokenizer.encode_document("y" * 1000, piece_chars=64)
    assert offsets[0, 0] == 0 and offsets[-1, 1] == 1000 and (np.diff(offsets[:, 0]) >= 0).all()
    ids, offsets = tokenizer.encode_document("")
    assert ids.shape == (0,) and offsets.shape == (0, 2)
