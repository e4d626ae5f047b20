import base64
import json
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from pipeline.encode import model_dir
from pipeline.encode.model_location import default_model_dir
from pipeline.errors import ConfigError
from pipeline.run.stages import ChunkBlock
from pipeline.schemas import DOC_SCHEMA
from pipeline.text.boundaries import CHARACTER, NONE, SENTENCE, WORD, blank_tokens, cut_levels
from pipeline.text.chunking import PAGE_SEPARATOR, ChunkingConfig, chunk_document, join_pages
from pipeline.text.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer(default_model_dir() / "tokenizer.json")


def chunks_of(text, tokenizer, cfg, page_starts=None):
    enc = tokenizer.encode_content([text])[0]
    return chunk_document(text, enc.ids, enc.offsets, page_starts, tokenizer, cfg), enc


def test_special_tokens_come_from_the_tokenizer(tokenizer):
    assert tokenizer.prefix_ids == [101] and tokenizer.suffix_ids == [102]


def test_short_document_is_one_chunk_with_the_whole_text(tokenizer):
    text = "  Short document, with leading and trailing space.\n"
    (chunk,), enc = chunks_of(text, tokenizer, ChunkingConfig(max_tokens=256, overlap=32))
    assert chunk.text == text
    assert chunk.token_ids == [101] + enc.ids + [102]
    assert chunk.page_start is None and chunk.page_end is None


def test_window_mode_windows_cover_the_document_with_the_requested_overlap(tokenizer):
    text = " ".join(f"word{i} is here." for i in range(400))
    cfg = ChunkingConfig(max_tokens=64, overlap=16, mode="window")
    chunks, enc = chunks_of(text, tokenizer, cfg)
    assert len(chunks) > 1
    content = [c.token_ids[1:-1] for c in chunks]
    assert all(len(c.token_ids) <= 64 for c in chunks)
    for prev, nxt in zip(content, content[1:]):
        assert prev[-16:] == nxt[:16]
    # Stitching the windows back together, minus the overlaps, gives every token once.
    stitched = content[0] + [t for c in content[1:] for t in c[16:]]
    assert stitched == enc.ids
    for c in chunks:
        assert c.text == text[c.char_start : c.char_end]
        # A window may start or end inside a word ("word|##12|##3"), where the
        # chunk text tokenises differently; away from its edges it gives back the
        # window's own tokens.
        middle, retok = c.token_ids[4:-4], tokenizer.encode_content([c.text])[0].ids
        assert any(retok[i : i + len(middle)] == middle for i in range(4))


def test_page_spans_follow_the_characters(tokenizer):
    pages = [" ".join(f"alpha{i}" for i in range(120)), " ".join(f"beta{i}" for i in range(120)), "gamma end"]
    text, starts = join_pages(pages)
    assert text.split(PAGE_SEPARATOR) == pages and starts[1] == len(pages[0]) + len(PAGE_SEPARATOR)
    chunks, _ = chunks_of(text, tokenizer, ChunkingConfig(max_tokens=128, overlap=0), starts)
    assert chunks[0].page_start == 1 and chunks[-1].page_end == 3
    for c in chunks:
        assert c.page_start == sum(c.char_start >= s for s in starts)
        assert c.page_end == sum(c.char_end - 1 >= s for s in starts)
    assert any(c.page_start < c.page_end for c in chunks)  # a chunk that straddles a page break


def test_bad_window_settings_are_refused():
    with pytest.raises(ConfigError, match="--max-tokens"):
        ChunkingConfig(max_tokens=300, overlap=0).validate(2, 256)
    with pytest.raises(ConfigError, match="--overlap"):
        ChunkingConfig(max_tokens=64, overlap=62).validate(2, 256)
    with pytest.raises(ConfigError, match="--chunking must be one of boundaries, window, got 'sentences'"):
        ChunkingConfig(max_tokens=64, overlap=8, mode="sentences")


# Boundary-aware chunking (the default mode).

SAMPLES = Path(__file__).resolve().parents[3] / "samples" / "text"
SCRIPTS = Path(__file__).resolve().parents[2] / "fixtures" / "scripts"
FAMILIES = Path(__file__).resolve().parents[2] / "fixtures" / "families"
XLMR = FAMILIES / "xlm-roberta-sharded" / "tokenizer.json"


def english():
    return "\n\n".join(p.read_text() for p in sorted(SAMPLES.iterdir()))


def token_span(text, enc, chunk, tokenizer):
    """The document's tokens [start, end) that are `chunk`'s: its ids, at the first place where each of them
    lies in its span but for the white space some carry (SentencePiece's '▁', byte-level 'Ġ'), or is white
    space alone. (A span may also reach over characters no token holds: `_reach`.)"""
    cores = [
        (a + len(text[a:b]) - len(text[a:b].lstrip()), b - len(text[a:b]) + len(text[a:b].rstrip()))
        for a, b in enc.offsets
    ]
    held = [a >= b or (chunk.char_start <= a and b <= chunk.char_end) for a, b in cores]
    content = chunk.token_ids[len(tokenizer.prefix_ids) : len(chunk.token_ids) - len(tokenizer.suffix_ids)]
    first = next(i for i, (a, b) in enumerate(cores) if a < b and chunk.char_start <= a)
    for start in range(max(first - len(content), 0), first + len(content)):
        end = start + len(content)
        if all(held[start:end]) and enc.ids[start:end] == content:
            return start, end
    raise AssertionError(f"no tokens of the document make the chunk {chunk.text[:40]!r}")


def checked_spans(text, enc, chunks, tokenizer, cfg):
    """The chunks' token spans [start, end), after checking what every chunking must hold:
    windows fit, token ids are the document's own, spans are exact and tile the document."""
    spans = [token_span(text, enc, c, tokenizer) for c in chunks]
    blank = blank_tokens(text, enc.offsets)
    assert not blank[: spans[0][0]].size or blank[: spans[0][0]].all()  # only white space before the first
    assert blank[spans[-1][1] :].all()
    for c in chunks:
        assert len(c.token_ids) <= cfg.max_tokens
        assert c.text == text[c.char_start : c.char_end]
        assert c.text == c.text.strip() or len(chunks) == 1
        assert c.text.strip()  # no chunk of white space alone
    for (s0, e0), (s1, e1), c0, c1 in zip(spans, spans[1:], chunks, chunks[1:]):
        assert s0 < s1 and e0 < e1 and e0 - s1 <= cfg.overlap  # each adds tokens; the overlap is within budget
        assert blank[e0:s1].all()  # between neighbours that share nothing, white space alone
        assert not blank[s1]  # a chunk starts on text
        assert text[c0.char_end : c1.char_start].strip() == ""  # nothing but white space between them
    return spans


def boundary_chunks(text, tokenizer, cfg):
    """Boundary chunks, checked, with their token spans and the text's cut levels. A chunk that does not
    end on a sentence ends inside one too long for a window with its overlap."""
    chunks, enc = chunks_of(text, tokenizer, cfg)
    spans = checked_spans(text, enc, chunks, tokenizer, cfg)
    levels = cut_levels(text, enc.offsets)
    sentences = np.flatnonzero(levels >= SENTENCE)
    fits = cfg.max_tokens - tokenizer.n_special - cfg.overlap
    for _, e in spans:
        i = np.searchsorted(sentences, e)
        assert levels[e] >= SENTENCE or sentences[i] - sentences[i - 1] > fits
    return chunks, spans, levels


@pytest.mark.parametrize("max_tokens, overlap", [(64, 0), (64, 16), (128, 32), (256, 32)])
def test_chunks_end_on_sentences_and_keep_every_sentence_that_fits_whole(tokenizer, max_tokens, overlap):
    cfg = ChunkingConfig(max_tokens=max_tokens, overlap=overlap)
    chunks, spans, levels = boundary_chunks(english(), tokenizer, cfg)
    assert len(chunks) > 2
    fits = max_tokens - tokenizer.n_special - overlap
    sentences = np.flatnonzero(levels >= SENTENCE)
    for a, b in zip(sentences, sentences[1:]):
        if b - a <= fits:
            assert any(s <= a and b <= e for s, e in spans), f"sentence of tokens [{a}, {b}) split"


@pytest.mark.parametrize("family", ["gemma3-embedding", "qwen2-embedding"])
@pytest.mark.parametrize("max_tokens, overlap", [(64, 16), (40, 30)])
def test_a_sentence_that_fits_is_whole_where_white_space_is_tokens_of_its_own(family, max_tokens, overlap):
    # Gemma's '▁' and Qwen2's 'Ġ', 'ĊĊ' alone between sentences: the next sentence was measured with them, or not
    # given the overlap's room, and split ("Nearly all of the oxygen ..." at 64/16).
    tokenizer = model_dir.tokenizer(FAMILIES / family)
    cfg = ChunkingConfig(max_tokens=max_tokens, overlap=overlap)
    for text in [english()] + [p.read_text() for p in sorted(SAMPLES.iterdir())]:
        chunks, enc = chunks_of(text, tokenizer, cfg)
        spans = checked_spans(text, enc, chunks, tokenizer, cfg)
        levels, blank = cut_levels(text, enc.offsets), blank_tokens(text, enc.offsets)
        assert blank.any()
        sentences = np.flatnonzero(levels >= SENTENCE)
        for a, b in zip(sentences, sentences[1:]):
            begins = a + int(np.argmin(blank[a:b]))  # its first token of text
            if not blank[begins] and b - begins <= max_tokens - tokenizer.n_special - overlap:
                assert any(s <= begins and b <= e for s, e in spans), f"sentence of tokens [{begins}, {b}) split"


@pytest.mark.parametrize("family", ["wordpiece", "sentencepiece"])
def test_overlap_is_whole_sentences_else_words(tokenizer, family):
    # SentencePiece's tokens carry the space before their word ('▁word'): words are cut all the same.
    tokenizer = tokenizer if family == "wordpiece" else Tokenizer(XLMR)
    cfg = ChunkingConfig(max_tokens=64, overlap=24)
    text = english()
    chunks, spans, levels = boundary_chunks(text, tokenizer, cfg)
    blank = blank_tokens(text, tokenizer.encode_content([text])[0].offsets)
    for (_, e0), (s1, _) in zip(spans, spans[1:]):
        budget = range(e0 - cfg.overlap, e0)
        level = SENTENCE if any(levels[i] >= SENTENCE for i in budget) else WORD
        cut = min((i for i in budget if levels[i] >= level), default=e0)
        # The chunk starts there, or at the word after a '▁' of its own there: never on white space.
        assert s1 == cut + int(np.argmin(blank[cut:]))


def test_a_chunk_ends_inside_a_word_only_when_its_new_text_holds_no_other_boundary(tokenizer):
    blob = base64.b64encode(bytes(range(256)) * 12).decode()  # 4,096 characters, no white space
    text = f"{english()[:900]}\n{blob} and then. Some words after it.\n\nThe end."
    cfg = ChunkingConfig(max_tokens=64, overlap=8)
    chunks, spans, levels = boundary_chunks(text, tokenizer, cfg)
    forced = [(s, e) for s, e in spans if levels[e] == NONE]
    assert forced  # the blob is cut, where it must be
    for (_, e0), (s1, e1) in zip(spans, spans[1:]):
        if levels[e1] == NONE:
            assert e1 - s1 == cfg.max_tokens - 2 and max(levels[max(e0, s1) + 1 : e1]) == NONE


@pytest.mark.parametrize("max_tokens, overlap", [(64, 0), (64, 48), (256, 32)])
def test_a_chunk_ends_inside_a_word_only_when_the_word_is_longer_than_a_window(tokenizer, max_tokens, overlap):
    # Words of every length up to a few windows, URLs of 1 to 78 path segments after short words: the overlap
    # before a word that a window holds once pushed the word's end out of the next window.
    urls = ["https://example.org/" + "/".join(f"seg{i}" for i in range(k)) for k in range(1, 80, 7)]
    text = " ".join("see the link " * 11 + f"{url} for details." for url in urls)
    cfg = ChunkingConfig(max_tokens=max_tokens, overlap=overlap)
    chunks, spans, levels = boundary_chunks(text, tokenizer, cfg)
    cuts = np.flatnonzero(levels >= CHARACTER)
    for _, e in spans:
        i = np.searchsorted(cuts, e)
        assert levels[e] >= CHARACTER or cuts[i] - cuts[i - 1] > max_tokens - tokenizer.n_special


# Qwen2's byte-level tokens, with white space as tokens of its own ('Ġ', 'ĠĠ', 'ĊĊ'), at 64 tokens.
WHITE_SPACE_CASES = {
    # The sentence's end, then 'Ġ' alone, then a word longer than the window: the cut on either side made a
    # chunk of ' '.
    "a space before a word longer than the window": ("go " * 23 + "end. " + "+" * 400 + " end.", 0),
    # A word cut where it must be, just before 'ĊĊ', then a sentence the next window keeps whole.
    "a forced cut before a blank line": ("+" * 126 + "\n\n" + "one " * 53 + "end.\n\n" + "Short one. " * 10, 0),
    # More white space than a window: chunks of spaces alone.
    "white space longer than the window": ("Some words here. " + " " * 3000 + "And after the gap.", 0),
    # A word a window holds, then white space: the overlap before it pushed its end out of the next window.
    "a word that fits, then white space": ("go " * 40 + "+" * 60 + "   \n\n\n   here go go.", 16),
}


@pytest.mark.parametrize("text, overlap", WHITE_SPACE_CASES.values(), ids=WHITE_SPACE_CASES)
def test_white_space_is_never_a_chunk_alone_and_never_costs_a_word_or_a_sentence(text, overlap):
    tokenizer = model_dir.tokenizer(FAMILIES / "qwen2-embedding")
    cfg = ChunkingConfig(max_tokens=64, overlap=overlap)
    chunks, enc = chunks_of(text, tokenizer, cfg)
    assert blank_tokens(text, enc.offsets).any()  # the case is there: white space as tokens of its own
    boundary_chunks(text, tokenizer, cfg)  # every chunk holds text, and ends on a sentence where one fits
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    for c in chunks:  # no word of 63 tokens or fewer is cut: all words here but the 126- and 400-character runs
        assert not any(a < c.char_start < b or a < c.char_end < b for a, b in words if b - a <= 63), c.text


@pytest.mark.parametrize("path", [None, XLMR], ids=["minilm-base64", "xlm-roberta-letters"])
def test_a_document_that_is_one_10000_character_word(tokenizer, path):
    if path is None:  # MiniLM splits base64 at + and /; a word of letters alone is one [UNK] (an error row)
        word = base64.b64encode(bytes(range(256)) * 30).decode()[:10_000]
    else:
        tokenizer, word = Tokenizer(path), "".join(chr(ord("a") + i % 26) for i in range(10_000))
    cfg = ChunkingConfig(max_tokens=128, overlap=16)
    chunks, spans, _ = boundary_chunks(word, tokenizer, cfg)
    content = 128 - tokenizer.n_special
    assert len(chunks) > 3 and all(e - s == content for s, e in spans[:-1])  # full windows: nowhere better to cut


def test_empty_and_one_token_documents(tokenizer):
    block = ChunkBlock(None, ChunkingConfig(max_tokens=64, overlap=8))
    docs = [{"doc_id": d, "kind": "text", "pages": [d]} for d in ("", "a", "Hi.")]
    rows = block(pa.Table.from_pylist(docs, schema=DOC_SCHEMA)).to_pylist()
    assert rows[0]["error_type"] == "NoTokens"
    assert [(r["text"], r["token_ids"]) for r in rows[1:]] == [("a", [101, 1037, 102]), ("Hi.", [101, 7632, 1012, 102])]


@pytest.mark.parametrize("script", ["ar", "he", "ru", "zh", "ja"])
def test_right_to_left_cyrillic_and_cjk_texts_end_on_sentences(tokenizer, script):
    cfg = ChunkingConfig(max_tokens=128, overlap=16)
    text = (SCRIPTS / f"{script}.txt").read_text()
    chunks, spans, levels = boundary_chunks(text, tokenizer, cfg)
    assert len(chunks) > 2
    ends = [levels[e] for _, e in spans]
    assert sum(level >= SENTENCE for level in ends) >= len(ends) / 2
    assert min(ends) >= (CHARACTER if script in ("zh", "ja") else WORD)


@pytest.mark.parametrize("mode", ["boundaries", "window"])
def test_characters_the_tokenizer_drops_stay_in_a_chunk_at_its_edges(tokenizer, mode):
    # The uncased model strips a combining accent, and drops zero-width, BOM and NUL characters: no token
    # holds them, and one right after a chunk's last token fell between two chunks.
    clinging = ["e\u0301", "a\u0308", "word\u200b", "\ufeffmark", "nul\x00", "plain", "end.", "\u200b"]
    text = " ".join(clinging[i % len(clinging)] for i in range(400))
    cfg = ChunkingConfig(max_tokens=32, overlap=8, mode=mode)
    chunks, enc = chunks_of(text, tokenizer, cfg)
    checked_spans(text, enc, chunks, tokenizer, cfg)
    held = set().union(*(range(c.char_start, c.char_end) for c in chunks))
    assert [i for i, ch in enumerate(text) if i not in held and not ch.isspace()] == []


def test_thai_is_cut_between_characters_never_before_a_combining_mark(tmp_path):
    # A byte-level BPE tokenizer trained here on the Thai text: its tokens split Thai words,
    # and some split a character's bytes (the bundled model knows no Thai: one [UNK] per phrase).
    text = (SCRIPTS / "th.txt").read_text()
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    hf.train_from_iterator([text], trainers.BpeTrainer(vocab_size=400, initial_alphabet=alphabet, show_progress=False))
    hf.save(str(tmp_path / "tokenizer.json"))
    tokenizer = Tokenizer(tmp_path / "tokenizer.json")
    cfg = ChunkingConfig(max_tokens=48, overlap=8)
    chunks, spans, levels = boundary_chunks(text, tokenizer, cfg)
    assert len(chunks) > 5
    assert min(levels[e] for _, e in spans) >= CHARACTER
    assert not any(unicodedata.category(text[c.char_end : c.char_end + 1] or " ").startswith("M") for c in chunks)


def test_a_prompt_that_eats_most_of_the_window(tokenizer):
    prompted = Tokenizer(default_model_dir() / "tokenizer.json", prompt="Represent this passage for search: " * 6)
    cfg = ChunkingConfig(max_tokens=prompted.n_special + 5, overlap=1, prompt="...")
    chunks, spans, levels = boundary_chunks(english()[:2000], prompted, cfg)
    assert all(len(c.token_ids) <= cfg.max_tokens for c in chunks)
    # Five content tokens: a chunk ends inside a word only when no word boundary lies among its new tokens.
    for (_, e0), (s1, e1) in zip(spans, spans[1:]):
        assert levels[e1] >= WORD or max(levels[max(e0, s1) + 1 : e1], default=NONE) < CHARACTER


def test_chunking_is_deterministic_across_processes(tokenizer):
    text = english() + (SCRIPTS / "ar.txt").read_text() + (SCRIPTS / "zh.txt").read_text()
    cfg = ChunkingConfig(max_tokens=64, overlap=16)
    here = [(c.char_start, c.char_end) for c in chunks_of(text, tokenizer, cfg)[0]]
    assert here == [(c.char_start, c.char_end) for c in chunks_of(text, tokenizer, cfg)[0]]
    code = (
        "import json, sys; from tests.pipeline.text.test_chunking import *; "
        "t = Tokenizer(default_model_dir() / 'tokenizer.json'); text = sys.stdin.read(); "
        "print(json.dumps([(c.char_start, c.char_end) for c in "
        "chunks_of(text, t, ChunkingConfig(max_tokens=64, overlap=16))[0]]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "RAYON_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, env=env, check=True)
    assert [tuple(span) for span in json.loads(out.stdout)] == here


@pytest.mark.parametrize("mode", ["boundaries", "window"])
def test_a_chunk_that_ends_inside_a_character_holds_all_of_it(tokenizer, mode):
    # The uncased model splits a Hangul syllable into its jamo, tokens that share the syllable's span: a
    # window may end between two of them, and the chunk still holds the whole syllable.
    text = "안녕하세요 세계 " * 40
    cfg = ChunkingConfig(max_tokens=13, overlap=3, mode=mode)
    chunks, enc = chunks_of(text, tokenizer, cfg)
    spans = checked_spans(text, enc, chunks, tokenizer, cfg)
    assert any(enc.offsets[e - 1][1] > enc.offsets[e][0] for _, e in spans[:-1])  # some end inside a syllable
