import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from pipeline import Embedder
from pipeline.encode import model_dir, model_location
from pipeline.errors import ModelError
from pipeline.text.tokenizer import Tokenizer

from make_tokenizer_parity import write_case
from support import FAMILY_FIXTURES, REPO, bert_tensor_shapes, measure_in_child, write_zero_safetensors


def test_default_model_is_verified_and_described():
    spec = model_dir.resolve(None)
    assert spec.model_id == model_dir.DEFAULT_MODEL_ID
    assert spec.weights_sha256 == model_dir.DEFAULT_WEIGHTS_SHA256
    assert (spec.pooling, spec.normalize, spec.max_seq_length, spec.dim) == ("mean", True, 256, 384)
    assert len(spec.fingerprint) == 16


def copy_model(tmp_path):
    dst = tmp_path / "model"
    shutil.copytree(model_location.default_model_dir(), dst)
    return dst


def test_bare_checkpoint_mean_pools_without_normalising(tmp_path):
    # A plain Hugging Face BERT directory, no sentence-transformers files.
    path = copy_model(tmp_path)
    for name in ("modules.json", "sentence_bert_config.json"):
        (path / name).unlink()
    shutil.rmtree(path / "1_Pooling")
    spec = model_dir.resolve(str(path))
    assert (spec.pooling, spec.normalize, spec.max_seq_length) == ("mean", False, 512)
    assert spec.fingerprint != model_dir.resolve(None).fingerprint


def test_cls_pooling_is_read_from_the_pooling_config(tmp_path):
    path = copy_model(tmp_path)
    cfg = json.loads((path / "1_Pooling" / "config.json").read_text())
    cfg.update(pooling_mode_cls_token=True, pooling_mode_mean_tokens=False)
    (path / "1_Pooling" / "config.json").write_text(json.dumps(cfg))
    assert model_dir.resolve(str(path)).pooling == "cls"


def edit_json(path, name: str, change) -> None:
    file = path / name
    file.write_text(json.dumps(change(json.loads(file.read_text()) if file.exists() else {})))


def set_pooling(cfg: dict):
    return lambda path: edit_json(path, "1_Pooling/config.json", lambda _: cfg)


@pytest.mark.parametrize(
    "layout, pooling",
    [
        # sentence-transformers 6 writes one `pooling_mode`, a name or a list, concatenated in its order.
        ({"embedding_dimension": 384, "pooling_mode": "cls", "include_prompt": True}, "cls"),
        ({"embedding_dimension": 384, "pooling_mode": ["lasttoken"]}, "lasttoken"),
        ({"embedding_dimension": 384, "pooling_mode": ["mean", "cls"]}, "mean+cls"),
        # Before it, a flag per mode, concatenated in sentence-transformers' fixed order; none set: mean.
        ({"word_embedding_dimension": 384, "pooling_mode_lasttoken": True}, "lasttoken"),
        (
            {"word_embedding_dimension": 384, "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True},
            "max+mean",
        ),
        ({"word_embedding_dimension": 384}, "mean"),
        # A list in the new key wins over the old flags, as sentence-transformers drops them.
        ({"pooling_mode": "weightedmean", "pooling_mode_mean_tokens": True}, "weightedmean"),
    ],
)
def test_pooling_is_read_as_sentence_transformers_reads_it(tmp_path, layout, pooling):
    path = copy_model(tmp_path)
    set_pooling(layout)(path)
    spec = model_dir.resolve(str(path))
    assert spec.pooling == pooling
    assert spec.dim == 384 * len(pooling.split("+"))  # each mode's vector, concatenated


def test_the_default_models_fingerprint_stays_what_its_outputs_recorded():
    """A change to how the fingerprint is spelled (a new setting, the pooling's modes) would refuse to resume,
    or to append to, every output the model made before: a new setting appears only when it changes something.
    (It last changed on 2026-12-06, when the architecture that config.json describes joined it.)"""
    assert model_dir.resolve(None).fingerprint == "eab29a9a5b29d07d"


# Each family fixture's fingerprint as of 2026-12-06: the architecture's digest is of kernels' ModelConfig, so a
# refactor there (a field renamed, a default changed, a float derived otherwise) would change every model's.
FAMILY_FINGERPRINTS = {
    "albert-shared-groups": "2101a95750d700ad",
    "bert-mlm-prefix": "ba93ee7e5ed1dd4a",
    "bert-pooler": "281659e83dafaab6",
    "bert-pooling-modes": "e3cae1b0b135686b",
    "camembert-mlm-prefix": "18a5af1aaaf8e92f",
    "distilbert-dense": "11cad0f7bc2ba7d9",
    "distilbert-dense-residual": "640b82f3492ca0dc",
    "distilbert-mlm-prefix": "e3e9fb46a323ae00",
    "gemma3-embedding": "a018f31d05a28264",
    "gte-new-ntk": "50bbf23efb98915d",
    "gte-transformers": "a7f66b9b51129775",
    "llama-embedding": "604c452d191dc644",
    "mistral-embedding": "aef9c8a06e106f99",
    "modernbert-hub-config": "813857738961f69b",
    "modernbert-layer-types": "93d9438122bd5a2c",
    "mpnet-base": "ffcc399fc1c67799",
    "mpnet-mlm-prefix": "dfbf462cfc264536",
    "mt5-encoder": "5486527854f98d56",
    "nomic-contrastors": "6840023837ea77e5",
    "nomic-transformers": "2384da6d54ec4cff",
    "qwen2-embedding": "96c3c9852e4bb4b0",
    "qwen3-embedding": "e9b05cddbb0e013a",
    "t5-encoder-st": "84e6d20827589ec2",
    "t5-v11-model": "aedca3d75a993c94",
    "xlm-roberta-mlm-prefix": "742d9db85b837204",
    "xlm-roberta-sharded": "5100bf9dd7382305",
}


def test_every_family_fixtures_fingerprint_stays_what_its_outputs_recorded():
    fixtures = sorted(p.name for p in FAMILY_FIXTURES.iterdir() if p.is_dir())
    assert {name: model_dir.resolve(str(FAMILY_FIXTURES / name)).fingerprint for name in fixtures} == (
        FAMILY_FINGERPRINTS
    )


def test_the_window_is_sentence_transformers_max_seq_length_whichever_file_holds_it(tmp_path):
    # sentence-transformers 6 writes no max_seq_length to sentence_bert_config.json: the tokenizer's bounds it.
    path = copy_model(tmp_path)
    edit_json(path, "sentence_bert_config.json", lambda cfg: {k: v for k, v in cfg.items() if k != "max_seq_length"})
    edit_json(path, "tokenizer_config.json", lambda cfg: {**cfg, "model_max_length": 128})
    assert model_dir.resolve(str(path)).max_seq_length == 128
    edit_json(path, "tokenizer_config.json", lambda cfg: {**cfg, "model_max_length": int(1e30)})  # "no limit"
    assert model_dir.resolve(str(path)).max_seq_length == 512  # the model's positions
    edit_json(path, "sentence_bert_config.json", lambda cfg: {**cfg, "max_seq_length": 64})
    assert model_dir.resolve(str(path)).max_seq_length == 64


@pytest.mark.parametrize(
    "files, window",
    [
        # Versions before 2 named the file per architecture; 6.3 reads the first of them that is not empty.
        ({"sentence_bert_config.json": None, "sentence_xlm-roberta_config.json": {"max_seq_length": 64}}, 64),
        ({"sentence_bert_config.json": {}, "sentence_roberta_config.json": {"max_seq_length": 32}}, 32),
        # The tokenizer's model_max_length, under either name, wins over max_seq_length.
        ({"sentence_bert_config.json": {"max_seq_length": 256, "tokenizer_args": {"model_max_length": 64}}}, 64),
        ({"sentence_bert_config.json": {"processor_kwargs": {"model_max_length": 48, "trust_remote_code": True}}}, 48),
        # Where from, in what precision, with which attention: transformers' business, not docembed's numbers.
        (
            {
                "sentence_bert_config.json": {
                    "max_seq_length": 96,
                    "model_args": {"torch_dtype": "float16", "attn_implementation": "sdpa"},
                }
            },
            96,
        ),
    ],
)
def test_the_transformer_modules_config_is_read_under_every_name_sentence_transformers_reads(tmp_path, files, window):
    path = copy_model(tmp_path)
    for name, cfg in files.items():
        (path / name).unlink(missing_ok=True) if cfg is None else (path / name).write_text(json.dumps(cfg))
    assert model_dir.resolve(str(path)).max_seq_length == window


@pytest.mark.parametrize("key", ["config_args", "config_kwargs"])
def test_config_args_override_config_json_as_if_written_there(tmp_path, key):
    plain = model_dir.resolve(None)
    path = copy_model(tmp_path)
    edit_json(path, "sentence_bert_config.json", lambda c: {**c, key: {"hidden_act": "relu", "layer_norm_eps": 1e-6}})
    overridden = model_dir.resolve(str(path))
    edit_json(path, "sentence_bert_config.json", lambda c: {k: v for k, v in c.items() if k != key})
    edit_json(path, "config.json", lambda c: {**c, "hidden_act": "relu", "layer_norm_eps": 1e-6})
    written = model_dir.resolve(str(path))
    assert overridden.arch == written.arch != plain.arch
    assert overridden.fingerprint == written.fingerprint != plain.fingerprint  # the same numbers either way


def test_config_json_is_in_the_fingerprint_as_the_encoder_reads_it(tmp_path):
    """The weights fix the shapes, not what config.json says of the rest: another epsilon, a causal decoder made
    bidirectional (gte-Qwen2's `is_causal`) are other numbers. How config.json is spelled is not."""
    plain = model_dir.resolve(None).fingerprint
    path = copy_model(tmp_path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "transformers_version": "9.9"}, indent=7))
    assert model_dir.resolve(str(path)).fingerprint == plain
    edit_json(path, "config.json", lambda c: {**c, "layer_norm_eps": 1e-5})
    assert model_dir.resolve(str(path)).fingerprint != plain
    decoder = tmp_path / "qwen3"
    shutil.copytree(FAMILY_FIXTURES / "qwen3-embedding", decoder)
    causal = model_dir.resolve(str(decoder)).fingerprint
    edit_json(decoder, "config.json", lambda c: {**c, "is_causal": False})
    assert model_dir.resolve(str(decoder)).fingerprint != causal


def test_the_architectures_digest_does_not_follow_the_processes_string_hashing():
    """A set's order follows PYTHONHASHSEED, which every Ray worker draws anew: the digest sorts it."""
    model = FAMILY_FIXTURES / "llama-embedding"  # its biases are a set of four
    source = f"from pipeline.encode import model_dir; print(model_dir.resolve({str(model)!r}).fingerprint)"
    digests = {
        subprocess.run(
            [sys.executable, "-c", source],
            cwd=REPO,
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1


def test_do_lower_case_lower_cases_before_the_tokenizer_with_offsets_into_the_text(tmp_path):
    # The XLM-RoBERTa fixture's Unigram tokenizer is cased: 'Hello' is '▁', 'H', 'el', ... and 'hello' '▁h', 'el', ...
    path = tmp_path / "xlmr"
    shutil.copytree(FAMILY_FIXTURES / "xlm-roberta-mlm-prefix", path)
    plain = model_dir.tokenizer(path)
    text = "Hello World, ÉCOLE"
    # The tokenizer's own do_lower_case is a BERT-style tokenizer's setting: transformers ignores it here.
    edit_json(path, "sentence_bert_config.json", lambda c: {**c, "tokenizer_args": {"do_lower_case": True}})
    assert model_dir.tokenizer(path).encode_content([text]) == plain.encode_content([text])
    edit_json(path, "sentence_bert_config.json", lambda c: {**c, "do_lower_case": True})
    lowered = model_dir.tokenizer(path)
    [got], [want], [cased] = (
        lowered.encode_content([text]),
        plain.encode_content([text.lower()]),
        plain.encode_content([text]),
    )
    assert (got.ids, got.offsets) == (want.ids, want.offsets) and got.ids != cased.ids
    assert model_dir.resolve(str(path)).lowercase
    assert Embedder.load(str(path)).embed([text]) == pytest.approx(
        Embedder.load(str(FAMILY_FIXTURES / "xlm-roberta-mlm-prefix")).embed([text.lower()])
    )


TOKENIZER_SETTINGS = json.loads((REPO / "tests" / "fixtures" / "tokenizer_settings.json").read_text())


def tokenizer_case(tmp_path, case: str):
    """The bundled model's directory with the edits of one case of tokenizer_settings.json."""
    made = TOKENIZER_SETTINGS["cases"][case]
    path, model = tmp_path / case, model_location.default_model_dir()
    write_case(model, path, made["edits"])
    (path / "model.safetensors").symlink_to(model / "model.safetensors")
    return path


@pytest.mark.parametrize("case", TOKENIZER_SETTINGS["cases"])
def test_tokenizer_settings_apply_as_transformers_applies_them(tmp_path, case):
    """tokenizer_config.json (and tokenizer_args) over tokenizer.json's BertNormalizer: the ids transformers
    gives (tests/make_tokenizer_fixtures.py), and a fingerprint that differs from the unedited model's exactly
    where the ids do."""
    tok = model_dir.tokenizer(path := tokenizer_case(tmp_path, case))
    texts, cases = TOKENIZER_SETTINGS["texts"], TOKENIZER_SETTINGS["cases"]
    assert [tok.prefix_ids + c.ids + tok.suffix_ids for c in tok.encode_content(texts)] == cases[case]["ids"]
    if "tokenizer.json" not in cases[case]["edits"]:  # tokenizer.json as in the unedited case: settings differ
        unedited = model_dir.resolve(str(tokenizer_case(tmp_path / "as_is", "as_is"))).fingerprint
        assert (model_dir.resolve(str(path)).fingerprint == unedited) == (cases[case]["ids"] == cases["as_is"]["ids"])


def add_layer_norm_module(path) -> None:
    modules = json.loads((path / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_LayerNorm", "type": "sentence_transformers.models.LayerNorm"})
    (path / "modules.json").write_text(json.dumps(modules))


def transformer_in(folder: str):
    return lambda path: edit_json(path, "modules.json", lambda modules: [{**modules[0], "path": folder}, *modules[1:]])


def early_layout(path) -> None:
    """The layout sentence-transformers wrote before version 2: the model's own files in 0_Transformer/."""
    (path / "0_Transformer").mkdir()
    for file in list(path.iterdir()):
        if file.is_file() and file.name not in ("modules.json", "config_sentence_transformers.json", "README.md"):
            file.rename(path / "0_Transformer" / file.name)
    transformer_in("0_Transformer")(path)


def test_an_early_layout_is_read_from_its_transformer_folder_as_the_same_model(tmp_path):
    """sentence-transformers still loads a model saved before its version 2, with config.json, the weights, the
    tokenizer's files and sentence_bert_config.json in the folder modules.json names (0_Transformer/): so does
    docembed, as the same model, embedding as sentence-transformers does. (sentence-transformers 6.3 embeds this
    layout of the default model exactly as the model itself: checked with .venv-bench.)"""
    path = copy_model(tmp_path)
    early_layout(path)
    spec = model_dir.resolve(str(path))
    assert spec.files == path / "0_Transformer"
    # The window is sentence_bert_config.json's 256 (the positions' 512 without it), read from the folder.
    assert (spec.fingerprint, spec.max_seq_length) == (model_dir.resolve(None).fingerprint, 256)
    reference = np.load(REPO / "tests" / "fixtures" / "st_reference.npz")
    got = Embedder.load(str(path)).embed([str(t) for t in reference["texts"]])
    assert (got * reference["embeddings"]).sum(-1).min() >= 0.9999  # both unit vectors


def test_a_truncated_tokenizer_file_is_one_model_error(tmp_path):
    path = copy_model(tmp_path)
    (path / "tokenizer.json").write_bytes((path / "tokenizer.json").read_bytes()[:1000])
    with pytest.raises(ModelError, match="cannot read .*tokenizer.json: EOF"):
        Tokenizer(path / "tokenizer.json")


@pytest.mark.parametrize(
    "breakage, message",
    [
        (
            lambda p: (p / "model.safetensors").unlink(),
            "has no weights: neither model.safetensors nor pytorch_model.bin, nor a sharded copy of either",
        ),
        # Without tokenizer.json a BERT is built from vocab.txt (pipeline.text.wordpiece_vocab): without both, none.
        (
            lambda p: [(p / name).unlink() for name in ("tokenizer.json", "vocab.txt")],
            r"has no tokenizer.json \(nor a vocab.txt for BertTokenizer or DistilBertTokenizer\)",
        ),
        (lambda p: (p / "config.json").write_text("{not json"), "cannot read"),
        (
            lambda p: (p / "config.json").write_text('{"model_type": "gpt2"}'),
            "'gpt2'.*is not supported.*bert, distilbert, xlm-roberta",
        ),
        # What sentence-transformers would run and docembed does not: refused, never skipped.
        (
            add_layer_norm_module,
            "names a 'sentence_transformers.models.LayerNorm' module, which docembed does not implement",
        ),
        # A module of the model's own code (remote code, jina-embeddings-v3's custom_st.Transformer), whatever its
        # class is named.
        (
            lambda p: edit_json(p, "modules.json", lambda m: [{**m[0], "type": "custom_st.Transformer"}, *m[1:]]),
            "names a 'custom_st.Transformer' module, which docembed does not implement \\(it runs sentence-trans",
        ),
        (
            set_pooling({"pooling_mode": ["cls", "median"]}),
            "pooling cls \\+ median is not supported; docembed pools by",
        ),
        (set_pooling({"pooling_mode": []}), "pooling  is not supported"),
        (transformer_in("0_Transformer"), "the Transformer module's folder 0_Transformer/ is not in the directory"),
        # sentence-transformers refuses a module's path out of the directory, in either spelling: so does docembed.
        (transformer_in("../model"), "a module's path '../model' is not a folder in the model directory"),
        (
            lambda p: edit_json(p, "modules.json", lambda m: [m[0], {**m[1], "path": "/1_Pooling"}, *m[2:]]),
            "a module's path '/1_Pooling' is not a folder in the model directory",
        ),
        (
            lambda p: edit_json(p, "config_sentence_transformers.json", lambda c: {**c, "default_prompt_name": "x"}),
            "default_prompt_name 'x' is none of its prompts",
        ),
        (
            lambda p: edit_json(p, "modules.json", lambda m: [x for x in m if not x["type"].endswith("Pooling")]),
            "modules.json has no Pooling module",
        ),
        # Loader arguments that sentence-transformers passes to transformers, and docembed cannot apply.
        (
            lambda p: edit_json(p, "sentence_bert_config.json", lambda c: {**c, "model_args": {"rope_scaling": "x"}}),
            "sentence_bert_config.json: model_args.rope_scaling is an argument of transformers' loaders",
        ),
        (
            lambda p: edit_json(p, "sentence_bert_config.json", lambda c: {**c, "processor_kwargs": {"x": 1}}),
            "processor_kwargs.x is an argument of transformers' loaders that docembed does not apply",
        ),
        (
            lambda p: edit_json(p, "sentence_bert_config.json", lambda c: {**c, "config_args": ["relu"]}),
            "config_args is not a mapping",
        ),
        # Files of the wrong shape, or cut short, each one line naming the file.
        (lambda p: edit_json(p, "modules.json", lambda m: dict(enumerate(m))), "modules.json is not a list"),
        (lambda p: edit_json(p, "config.json", lambda c: [c]), "config.json holds a JSON list, not an object"),
        (lambda p: edit_json(p, "sentence_bert_config.json", lambda c: {**c, "max_seq_length": "abc"}), "'abc' is not"),
        (
            lambda p: edit_json(p, "config_sentence_transformers.json", lambda c: {**c, "prompts": ["query: "]}),
            "prompts is not a mapping",
        ),
    ],
)
def test_broken_model_directories_fail_clearly(tmp_path, breakage, message):
    path = copy_model(tmp_path)
    breakage(path)
    with pytest.raises(ModelError, match=message):
        model_dir.resolve(str(path))


@pytest.mark.parametrize("name", ["model.safetensors", "pytorch_model.bin"])
def test_corrupt_weights_fail_at_load(tmp_path, name):
    """Either kind of weights file (a torch pickle: pipeline.encode.torch_pickle), the other kind's bytes too."""
    path = copy_model(tmp_path)
    (path / "model.safetensors").rename(path / name)
    spec = model_dir.resolve(str(path))
    (path / name).write_bytes(b"\x00" * 64)
    for load in (model_dir.check_weights, model_dir.load_params):
        with pytest.raises(ModelError, match=f"cannot read .*{name}"):
            load(spec)


def test_missing_directory_and_tampered_default(tmp_path, monkeypatch):
    with pytest.raises(ModelError, match="does not exist"):
        model_dir.resolve(str(tmp_path / "nope"))
    with pytest.raises(ModelError, match="an empty string"):  # it named the current directory
        model_dir.resolve("")
    (tmp_path / "model.safetensors").write_bytes(b"x")
    with pytest.raises(ModelError, match="model directory .*model.safetensors is a file"):
        model_dir.resolve(str(tmp_path / "model.safetensors"))
    tampered = copy_model(tmp_path)
    (tampered / "model.safetensors").write_bytes(b"tampered")
    monkeypatch.setattr(model_location, "default_model_dir", lambda: tampered)
    with pytest.raises(ModelError, match="expected 53aa5117"):
        model_dir.resolve(None)


_CHECK_WEIGHTS = """
from pipeline.encode import model_dir
spec = model_dir.resolve(sys.argv[1])
measured(lambda: model_dir.check_weights(spec))
"""


def test_checking_the_weights_holds_nothing_of_their_size(tmp_path):
    """A BERT-base checkpoint (440 MB of float32 zeros, written sparse): in a fresh process, the driver's
    check grows the peak RSS by less than a tenth of that. Stacking the layers, as a load does, takes 340 MB."""
    config = {
        "model_type": "bert",
        "vocab_size": 30522,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
    }
    path = tmp_path / "bert-base"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    shutil.copy(model_location.default_model_dir() / "tokenizer.json", path)
    weights_bytes = write_zero_safetensors(path / "model.safetensors", bert_tensor_shapes(config))
    child = measure_in_child(_CHECK_WEIGHTS, str(path), timeout=300)
    growth = child["peak"] - child["rss_before"]
    assert weights_bytes > 4e8
    assert growth < weights_bytes / 10, (
        f"peak RSS grew {growth / 1e6:.0f} MB for {weights_bytes / 1e6:.0f} MB of weights"
    )


# --- sentence-transformers' Dense modules --------------------------------------------------------------------
# The fixture's modules: Transformer (DistilBERT, 48), Pooling, 2_Dense (48 -> 40, Tanh), 3_Dense (40 -> 24, no
# bias, Identity), Normalize.
DENSE_FIXTURE = FAMILY_FIXTURES / "distilbert-dense"


def copy_dense_model(tmp_path):
    path = tmp_path / "dense"
    shutil.copytree(DENSE_FIXTURE, path)
    return path


def test_dense_modules_are_read_in_order_and_set_the_output_dimension():
    spec = model_dir.resolve(str(DENSE_FIXTURE))
    described = [(p.path, p.in_features, p.out_features, p.bias, p.activation) for p in spec.projections]
    assert described == [("2_Dense", 48, 40, True, "tanh"), ("3_Dense", 40, 24, False, "identity")]
    assert (spec.arch.family, spec.arch.hidden_size, spec.dim, spec.normalize) == ("distilbert", 48, 24, True)
    model_dir.check_weights(spec)
    weights = model_dir.load_projections(spec)
    shapes = [{name: array.shape for name, array in layer.items()} for layer in weights]
    assert shapes == [{"w_IO": (48, 40), "b_O": (40,)}, {"w_IO": (40, 24)}]


def test_residual_dense_modules_are_read_with_their_matrix_where_the_sizes_differ(tmp_path):
    spec = model_dir.resolve(str(DENSE_FIXTURE.with_name("distilbert-dense-residual")))
    described = [(p.in_features, p.out_features, p.bias, p.residual) for p in spec.projections]
    assert described == [(48, 48, True, True), (48, 32, False, True)]
    shapes = [{name: array.shape for name, array in layer.items()} for layer in model_dir.load_projections(spec)]
    assert shapes == [{"w_IO": (48, 48), "b_O": (48,)}, {"w_IO": (48, 32), "r_IO": (48, 32)}]
    # A residual from 48 to 40 dimensions needs a matrix of its own, which these weights lack: refused before
    # any work, and in the fingerprint where it is read.
    path = copy_dense_model(tmp_path)
    _dense_config({"use_residual": True})(path)
    residual = model_dir.resolve(str(path))
    assert residual.fingerprint != model_dir.resolve(str(DENSE_FIXTURE)).fingerprint
    with pytest.raises(ModelError, match="2_Dense/model.safetensors lacks tensor 'residual.weight'"):
        model_dir.check_weights(residual)


def test_a_dense_module_is_in_the_fingerprint(tmp_path):
    """The same encoder without its Dense modules, or with other Dense weights, makes other numbers."""
    with_dense = model_dir.resolve(str(DENSE_FIXTURE))
    path = copy_dense_model(tmp_path)
    edit_json(path, "modules.json", lambda m: [x for x in m if not x["type"].endswith("Dense")])
    without = model_dir.resolve(str(path))
    assert (without.weights_sha256, without.dim) == (with_dense.weights_sha256, 48)
    assert without.fingerprint != with_dense.fingerprint
    other = copy_dense_model(tmp_path / "other")
    tensors = load_file(other / "3_Dense" / "model.safetensors")
    save_file({"linear.weight": -tensors["linear.weight"]}, str(other / "3_Dense" / "model.safetensors"))
    assert model_dir.resolve(str(other)).fingerprint != with_dense.fingerprint


@pytest.mark.parametrize("activation", ["torch.nn.Tanh", "torch.nn.modules.activation.Tanh", None])
def test_tanh_is_named_either_way_and_is_the_default(tmp_path, activation):
    path = copy_dense_model(tmp_path)
    drop = {"activation_function"} if activation is None else set()
    edit_json(
        path,
        "3_Dense/config.json",
        lambda c: {k: v for k, v in c.items() if k not in drop} | ({} if drop else {"activation_function": activation}),
    )
    assert model_dir.resolve(str(path)).projections[1].activation == "tanh"


def _dense_config(change: dict):
    return lambda p: edit_json(p, "2_Dense/config.json", lambda c: {**c, **change})


def _modules(change):
    return lambda p: edit_json(p, "modules.json", change)


@pytest.mark.parametrize(
    "breakage, message",
    [
        (
            _dense_config({"activation_function": "torch.nn.modules.activation.GELU"}),
            r"2_Dense/config.json: activation_function 'torch.nn.modules.activation.GELU' is not implemented "
            r"\(docembed runs torch.nn.Tanh, torch.nn.Identity\)",
        ),
        (_dense_config({"activation_function": "mypackage.Swish"}), "activation_function 'mypackage.Swish' is not"),
        (_dense_config({"activation_function": None}), "activation_function None is not implemented"),
        (
            lambda p: (p / "3_Dense" / "model.safetensors").unlink(),
            "3_Dense has no weights: neither model.safetensors nor pytorch_model.bin",
        ),
        (_dense_config({"in_features": 32}), "in_features 32, but the sentence embedding before it has 48 dimensions"),
        # Two pooling modes concatenated: the first Dense module's input is twice the encoder's width.
        (
            set_pooling({"pooling_mode": ["mean", "max"]}),
            "2_Dense/config.json: in_features 48, but the sentence embedding before it has 96 dimensions",
        ),
        (_dense_config({"out_features": 0}), "out_features 0 is not a positive whole number"),
        (_dense_config({"bias": "yes"}), "bias 'yes' is not true or false"),
        (_dense_config({"use_residual": "yes"}), "use_residual 'yes' is not true or false"),
        (_dense_config({"module_input_name": "token_embeddings"}), "module_input_name 'token_embeddings' is not"),
        (_dense_config({"module_output_name": "projected"}), "module_output_name 'projected' is not implemented"),
        (lambda p: shutil.rmtree(p / "2_Dense"), "2_Dense has no config.json"),
        (_modules(lambda m: [m[0], m[2], m[1], *m[3:]]), "a Dense module before the Pooling"),
        (_modules(lambda m: [*m[:2], m[4], m[2], m[3]]), "a Dense module after Normalize"),
        (_modules(lambda m: [*m[:2], {**m[2], "path": ""}, *m[3:]]), "a Dense module without a path to its folder"),
    ],
)
def test_dense_modules_not_implemented_or_broken_are_one_model_error(tmp_path, breakage, message):
    path = copy_dense_model(tmp_path)
    breakage(path)
    with pytest.raises(ModelError, match=message) as refused:
        model_dir.resolve(str(path))
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "tensors, message",
    [
        (
            {"linear.weight": np.zeros((24, 41), np.float32)},
            r"3_Dense/model.safetensors: tensor 'linear.weight' has shape \(24, 41\), but its config.json implies "
            r"\(24, 40\)",
        ),
        ({"weight": np.zeros((24, 40), np.float32)}, "3_Dense/model.safetensors lacks tensor 'linear.weight'"),
        # A residual's matrix where the config asks for none, as a bias would be where it says bias false.
        (
            {"linear.weight": np.zeros((24, 40), np.float32), "residual.weight": np.zeros((24, 40), np.float32)},
            "3_Dense/model.safetensors holds tensor 'residual.weight', which its config.json does not imply",
        ),
    ],
)
def test_dense_weights_that_contradict_the_config_are_refused_by_the_check_and_the_load(tmp_path, tensors, message):
    """The driver's check from the headers and the actors' load: the same one line."""
    path = copy_dense_model(tmp_path)
    save_file(tensors, str(path / "3_Dense" / "model.safetensors"))
    spec = model_dir.resolve(str(path))
    with pytest.raises(ModelError, match=message) as checked:
        model_dir.check_weights(spec)
    with pytest.raises(ModelError, match=message) as loaded:
        model_dir.load_projections(spec)
    assert str(checked.value) == str(loaded.value)


def test_a_missing_dense_bias_is_refused(tmp_path):
    path = copy_dense_model(tmp_path)
    tensors = load_file(path / "2_Dense" / "model.safetensors")
    save_file({"linear.weight": tensors["linear.weight"]}, str(path / "2_Dense" / "model.safetensors"))
    with pytest.raises(ModelError, match="2_Dense/model.safetensors lacks tensor 'linear.bias'"):
        model_dir.check_weights(model_dir.resolve(str(path)))
