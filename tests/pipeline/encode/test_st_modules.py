"""A model directory's sentence-transformers files (pipeline.encode.st_modules), as `model_dir.resolve` reads them:
modules.json's Pooling, Dense modules and Normalize, the Transformer module's config and folder, and
config_sentence_transformers.json."""

import json
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from pipeline import Embedder
from pipeline.encode import model_dir
from pipeline.errors import ModelError

from support import FAMILY_FIXTURES, REPO, copy_default_model, edit_json


def test_bare_checkpoint_mean_pools_without_normalising(tmp_path):
    # A plain Hugging Face BERT directory, no sentence-transformers files.
    path = copy_default_model(tmp_path)
    for name in ("modules.json", "sentence_bert_config.json"):
        (path / name).unlink()
    shutil.rmtree(path / "1_Pooling")
    spec = model_dir.resolve(str(path))
    assert (spec.pooling, spec.normalize, spec.max_seq_length) == ("mean", False, 512)
    assert spec.fingerprint != model_dir.resolve(None).fingerprint


def test_cls_pooling_is_read_from_the_pooling_config(tmp_path):
    path = copy_default_model(tmp_path)
    cfg = json.loads((path / "1_Pooling" / "config.json").read_text())
    cfg.update(pooling_mode_cls_token=True, pooling_mode_mean_tokens=False)
    (path / "1_Pooling" / "config.json").write_text(json.dumps(cfg))
    assert model_dir.resolve(str(path)).pooling == "cls"


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
    path = copy_default_model(tmp_path)
    set_pooling(layout)(path)
    spec = model_dir.resolve(str(path))
    assert spec.pooling == pooling
    assert spec.dim == 384 * len(pooling.split("+"))  # each mode's vector, concatenated


def test_the_window_is_sentence_transformers_max_seq_length_whichever_file_holds_it(tmp_path):
    # sentence-transformers 6 writes no max_seq_length to sentence_bert_config.json: the tokenizer's bounds it.
    path = copy_default_model(tmp_path)
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
    path = copy_default_model(tmp_path)
    for name, cfg in files.items():
        (path / name).unlink(missing_ok=True) if cfg is None else (path / name).write_text(json.dumps(cfg))
    assert model_dir.resolve(str(path)).max_seq_length == window


@pytest.mark.parametrize("key", ["config_args", "config_kwargs"])
def test_config_args_override_config_json_as_if_written_there(tmp_path, key):
    plain = model_dir.resolve(None)
    path = copy_default_model(tmp_path)
    edit_json(path, "sentence_bert_config.json", lambda c: {**c, key: {"hidden_act": "relu", "layer_norm_eps": 1e-6}})
    overridden = model_dir.resolve(str(path))
    edit_json(path, "sentence_bert_config.json", lambda c: {k: v for k, v in c.items() if k != key})
    edit_json(path, "config.json", lambda c: {**c, "hidden_act": "relu", "layer_norm_eps": 1e-6})
    written = model_dir.resolve(str(path))
    assert overridden.arch == written.arch != plain.arch
    assert overridden.fingerprint == written.fingerprint != plain.fingerprint  # the same numbers either way


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
    path = copy_default_model(tmp_path)
    early_layout(path)
    spec = model_dir.resolve(str(path))
    assert spec.files == path / "0_Transformer"
    # The window is sentence_bert_config.json's 256 (the positions' 512 without it), read from the folder.
    assert (spec.fingerprint, spec.max_seq_length) == (model_dir.resolve(None).fingerprint, 256)
    reference = np.load(REPO / "tests" / "fixtures" / "st_reference.npz")
    got = Embedder.load(str(path)).embed([str(t) for t in reference["texts"]])
    assert (got * reference["embeddings"]).sum(-1).min() >= 0.9999  # both unit vectors


@pytest.mark.parametrize(
    "breakage, message",
    [
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
        (lambda p: edit_json(p, "modules.json", lambda m: dict(enumerate(m))), "modules.json is not a list"),
        (lambda p: edit_json(p, "sentence_bert_config.json", lambda c: {**c, "max_seq_length": "abc"}), "'abc' is not"),
        (
            lambda p: edit_json(p, "config_sentence_transformers.json", lambda c: {**c, "prompts": ["query: "]}),
            "prompts is not a mapping",
        ),
    ],
)
def test_sentence_transformers_files_docembed_cannot_follow_are_one_model_error(tmp_path, breakage, message):
    assert_refused_in_one_line(copy_default_model(tmp_path), breakage, message)


def assert_refused_in_one_line(path, breakage, message: str) -> None:
    breakage(path)
    with pytest.raises(ModelError, match=message) as refused:
        model_dir.resolve(str(path))
    assert "\n" not in str(refused.value)


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
    assert_refused_in_one_line(copy_dense_model(tmp_path), breakage, message)


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
