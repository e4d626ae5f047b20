import numpy as np
import pytest

from pipeline.encode.model_location import default_model_dir
from pipeline.text.boundaries import CHARACTER, NONE, PARAGRAPH, SENTENCE, WORD, cut_levels
from pipeline.text.tokenizer import Tokenizer


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


def test_one_token_and_empty_token_lists():
    assert cut_levels("a", [(0, 1)]).tolist() == [PARAGRAPH, PARAGRAPH]
    assert cut_levels("", []).tolist() == [PARAGRAPH]
    assert cut_levels("", []).dtype == np.int8
