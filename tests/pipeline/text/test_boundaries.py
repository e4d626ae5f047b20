import time
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from pipeline.encode.model_location import default_model_dir
from pipeline.text.boundaries import CHARACTER, NONE, PARAGRAPH, SENTENCE, WORD, blank_tokens, cut_levels
from pipeline.text.tokenizer import Tokenizer

XLMR = Path(__file__).resolve().parents[2] / "fixtures" / "families" / "xlm-roberta-sharded" / "tokenizer.json"


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer(default_model_dir() / "tokenizer.json")


def levels_by_token(text, tokenizer):
    """{token text: level of the cut after it}, for texts whose tokens are distinct."""
    offsets = tokenizer.encode_content([text])[0].offsets
    levels = cut_levels(text, offsets)
    return {text[a:b]: int(levels[i + 1]) for i, (a, b) in enumerate(offsets)}, levels


def test_levels_of_an_english_text(tokenizer):
    text = "Photosynthesis feeds plants, e.g. the ones here. Really? Yes!\n\nA new paragraph ends"
    after, levels = levels_by_token(text, tokenizer)
    assert levels[0] == levels[-1] == PARAGRAPH  # the document's ends
    assert after["Photos"] == NONE  # inside "photos|##yn|##thesis"
    assert after["plants"] == NONE  # before the comma
    assert after[","] == WORD
    assert after["g"] == NONE  # "e.g. the": a lowercase word follows, no sentence ends there
    assert after["."] == SENTENCE and after["?"] == SENTENCE
    assert after["!"] == PARAGRAPH


def test_sentences_end_with_their_closing_quotes_and_brackets(tokenizer):
    after, _ = levels_by_token('He said "stop." Then (quietly.) She left (slowly.) and', tokenizer)
    assert after['"'] == SENTENCE and after["quietly"] == NONE and after["stop"] == NONE
    assert after[")"] == WORD  # "(slowly.) and": a lowercase word follows


def test_right_to_left_sentences(tokenizer):
    arabic, _ = levels_by_token("هل تعرف الخبز؟ إنه قديم جدا.", tokenizer)
    assert arabic["؟"] == SENTENCE and arabic["ف"] == WORD  # the last letter of تعرف
    hebrew, _ = levels_by_token("הספרייה פתוחה. בואו לקרוא", tokenizer)
    assert hebrew["."] == SENTENCE


def test_chinese_and_japanese_cut_between_characters_and_after_full_stops(tokenizer):
    text = "水在循环。云变成雨！日本の銭湯"
    offsets = tokenizer.encode_content([text])[0].offsets
    levels = cut_levels(text, offsets)
    ends = {text[a:b]: int(levels[i + 1]) for i, (a, b) in enumerate(offsets)}
    assert ends["。"] == SENTENCE and ends["！"] == SENTENCE
    assert ends["水"] == CHARACTER and ends["日"] == CHARACTER


def test_a_cut_before_a_combining_mark_or_inside_a_character_is_none():
    # Offsets as a byte-level tokenizer gives them: the Thai "กิ" (ko kai + sara i, a combining vowel) as
    # one token per code point, then one character cut into two byte tokens with the same span.
    text = "กิน"
    levels = cut_levels(text, [(0, 1), (1, 2), (2, 3), (2, 3)])
    assert levels.tolist() == [PARAGRAPH, NONE, CHARACTER, NONE, PARAGRAPH]


@pytest.mark.parametrize("text", ["กำ", "น้ำ", "ນ້ຳ", "ក្រ"])
def test_no_cut_parts_a_thai_lao_or_khmer_grapheme(text):
    # Thai's and Lao's AM extend the consonant before them, though Unicode's categories name them letters;
    # Khmer's COENG stacks the next consonant under the one before. One token per code point, as byte-level
    # tokenizers trained on little of these scripts make them.
    assert cut_levels(text, [(i, i + 1) for i in range(len(text))]).tolist() == [PARAGRAPH] + [NONE] * (
        len(text) - 1
    ) + [PARAGRAPH]
    assert cut_levels("กก", [(0, 1), (1, 2)]).tolist() == [PARAGRAPH, CHARACTER, PARAGRAPH]


def test_tokens_of_white_space_alone_are_blank():
    # As a byte-level tokenizer gives them: 'end' '.' 'ĠĠ' 'ĊĊ' '+++' 'Ġgo'; an empty span (a prompt's white space).
    text = "end.  \n\n+++ go"
    offsets = [(0, 3), (3, 4), (4, 6), (6, 8), (8, 11), (11, 14), (0, 0)]
    assert blank_tokens(text, offsets).tolist() == [False, False, True, True, False, False, True]


@pytest.mark.parametrize("run", [".", "!?", "।"])
def test_a_run_of_sentence_terminators_costs_time_in_proportion(run):
    # Tried from each of its characters, a run not followed by white space took seconds at 20,000 characters
    # and four times as long at twice that: a chunk worker's hours on a megabyte. Linear, 200,000 take
    # milliseconds; the bound is a hundred times that, and far below the quadratic's minutes.
    text = run * (200_000 // len(run)) + "x"
    started = time.perf_counter()
    levels = cut_levels(text, [(0, len(text) - 1), (len(text) - 1, len(text))])
    assert time.perf_counter() - started < 2
    assert levels.tolist() == [PARAGRAPH, NONE, PARAGRAPH]


def test_one_token_and_empty_token_lists():
    assert cut_levels("a", [(0, 1)]).tolist() == [PARAGRAPH, PARAGRAPH]
    assert cut_levels("", []).tolist() == [PARAGRAPH]
    assert cut_levels("", []).dtype == np.int8


def byte_level_bpe(path, corpus):
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    hf.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, initial_alphabet=alphabet, show_progress=False))
    hf.save(str(path))
    return Tokenizer(path)


@pytest.mark.parametrize("family", ["sentencepiece", "byte-level"])
def test_tokens_that_carry_the_space_before_their_word_still_cut_between_words(tmp_path, family):
    # SentencePiece's '▁fox' and byte-level BPE's 'Ġfox' hold the space before the word: tokens touch.
    text = "the quick brown fox jumps over the lazy dog and keeps running through the green fields"
    tokenizer = Tokenizer(XLMR) if family == "sentencepiece" else byte_level_bpe(tmp_path / "t.json", [text] * 20)
    offsets = tokenizer.encode_content([text])[0].offsets
    assert any(text[a].isspace() for a, _ in offsets)
    levels = cut_levels(text, offsets)
    cuts = [0] + [offsets[i][0] for i in range(1, len(offsets)) if levels[i] >= WORD] + [len(text)]
    # A token of the space alone ('▁' before 'jumps') has a word cut on either side.
    assert [text[a:b].strip() for a, b in zip(cuts, cuts[1:]) if text[a:b].strip()] == text.split()


def test_characters_the_tokenizer_drops_inside_a_word_do_not_part_it(tokenizer):
    # The uncased model strips Hebrew points and Devanagari vowel signs, and drops a zero-width non-joiner:
    # the gap they leave between two tokens is inside a word, not white space.
    for text in ("הָאָרֶץ הַגְּדוֹלָה", "देश में", "می‌خواهم بروم"):
        offsets = tokenizer.encode_content([text])[0].offsets
        levels = cut_levels(text, offsets)
        for i in range(1, len(offsets)):
            gap = text[offsets[i - 1][1] : offsets[i][0]]
            assert (levels[i] >= WORD) == any(ch.isspace() for ch in gap), (text, gap)


@pytest.mark.parametrize("blank", ["\n\n", "\r\n\r\n", "\r\r", "\n \t\n", "\u2028\u2028", "\u2029", "\f"])
def test_every_kind_of_blank_line_parts_paragraphs(tokenizer, blank):
    text = f"One sentence here{blank}Another one"
    after, _ = levels_by_token(text, tokenizer)
    assert after["here"] == PARAGRAPH


def test_one_line_break_is_no_paragraph(tokenizer):
    for line in ("\n", "\r\n", "\r", "\u2028"):
        after, _ = levels_by_token(f"One sentence here{line}another one", tokenizer)
        assert after["here"] == WORD
