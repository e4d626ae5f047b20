"""docembed's tokenizer against transformers' AutoTokenizer, which sentence-transformers loads: the ids
tests/make_tokenizer_parity.py recorded for every families fixture, the bundled model and the edits that give
them the hub's other layouts, on texts where tokenizer pipelines part ways."""

import json

import pytest

from pipeline.encode import model_dir
from pipeline.text.tokenizer import Tokenizer

from make_tokenizer_parity import base_dir, write_case
from support import REPO

PARITY = json.loads((REPO / "tests" / "fixtures" / "tokenizer_parity.json").read_text())


def ids(tok: Tokenizer) -> list[list[int]]:
    """The parity texts' ids, special tokens included."""
    return [tok.prefix_ids + content.ids + tok.suffix_ids for content in tok.encode_content(PARITY["texts"])]


@pytest.fixture(params=PARITY["cases"])
def case(request, tmp_path):
    """A case's name, what transformers gave, and its model directory."""
    made = PARITY["cases"][request.param]
    write_case(base_dir(made["base"]), tmp_path / request.param, made["edits"])
    return request.param, made, tmp_path / request.param


def test_ids_are_those_of_transformers_autotokenizer(case):
    name, made, path = case
    got = ids(model_dir.tokenizer(path))
    differ = [(text, ours, theirs) for text, ours, theirs in zip(PARITY["texts"], got, made["ids"]) if ours != theirs]
    assert not differ, f"{name} ({made['class']}): {len(differ)} texts differ, e.g. {differ[0]}"


def test_the_fingerprint_names_a_new_split_exactly_where_the_files_own_gives_other_ids(case):
    """The spec's `tokenizer_split` (a part of the fingerprint) is empty where docembed splits text as tokenizer.json
    does, so that those models keep the fingerprints of their outputs, and names the change elsewhere, so that
    outputs tokenised as the file says are not resumed."""
    name, made, path = case
    tok = model_dir.tokenizer(path)
    # Without a tokenizer.json, the file is vocab.txt as BertTokenizer builds it (pipeline.text.wordpiece_vocab).
    file = path / ("tokenizer.json" if tok.special_tokens is None else "vocab.txt")
    as_written = ids(Tokenizer(file, special_tokens=tok.special_tokens))
    assert (tok.replaced_split == "") == (as_written == made["ids"]), name
