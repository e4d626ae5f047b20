import pytest

from pipeline.encode.model_location import default_model_dir
from pipeline.errors import ConfigError
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


def test_windows_cover_the_document_with_the_requested_overlap(tokenizer):
    text = " ".join(f"word{i} is here." for i in range(400))
    cfg = ChunkingConfig(max_tokens=64, overlap=16)
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
