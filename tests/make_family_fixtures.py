"""Regenerates tests/fixtures/families/: tiny random-weight encoders of every family, with the
hidden states and sentence embeddings transformers computes for them.

Each model is built with transformers' own class (BertModel, DistilBertModel, XLMRobertaModel, MPNetModel,
ModernBertModel, NomicBertModel, GteModel, or their *ForMaskedLM for a model prefix; T5EncoderModel,
MT5EncoderModel, and a T5Model whose encoder alone is run; Qwen3Model, grouped-query, pooled by its last token;
MistralModel, sliding, Qwen2Model, its q/k/v biased, and LlamaModel, biased with llama3 RoPE; Gemma3TextModel,
bidirectional as EmbeddingGemma; AlbertModel, its layers shared in groups over narrower embeddings), given
larger-than-default random weights so that attention is peaked and RoPE, windows and norms all show in the
output, and saved as a sentence-transformers model directory:
config.json, weights in bfloat16 (one directory sharded with model.safetensors.index.json), tokenizer.json (a
small WordPiece, Unigram or BPE vocabulary trained here), modules.json, 1_Pooling/config.json,
sentence_bert_config.json, and for two models config_sentence_transformers.json with prompts. MPNet models get
MPNet's tokenizer layout (WordPiece between <s> and </s>, RobertaProcessing, pad id 1) and a
tokenizer_config.json naming MPNetTokenizer, T5 models a Unigram vocabulary as T5's (text then </s>, pad id 0)
and one naming T5Tokenizer, Qwen3 a byte-level BPE as Qwen3-Embedding's (text then <|endoftext|>) and one naming
Qwen2Tokenizer, ALBERT a Unigram as AlbertTokenizer builds albert-base-v2's and one naming AlbertTokenizer,
Gemma3 a BPE with byte fallback as EmbeddingGemma's (<bos> text <eos>) and one naming
GemmaTokenizer, Mistral and Llama one as e5-mistral's (<s> text </s>), and transformers' AutoTokenizer must give
the ids recorded here. Beside each directory, NAME.npz
holds the texts, their token ids, transformers' last hidden states (float32, each text run alone, unpadded;
gemma3-embedding's also as a causal decoder, `hidden_causal`; qwen2's and mistral's `hidden_bidirectional`,
qwen2's `hidden_sliding`) and the pooled embeddings that
sentence-transformers' Pooling (and Dense, and Normalize) make of them. Four models have Dense modules after
their Pooling (2_Dense/, 3_Dense/: config.json and model.safetensors, written by sentence-transformers' own
Dense): distilbert-dense, with a tokenizer_config.json naming DistilBertTokenizer, distilbert-dense-residual's
two with use_residual (one to the same size, one to another), t5-encoder-st, sentence-t5's one, and
gemma3-embedding, EmbeddingGemma's two; one pools by three modes that only sentence-transformers' own
Pooling computes here; and the decoders (qwen3-, qwen2-, mistral-, llama- and gemma3-embedding), whose encode()
pads on the left as their tokenizers say; their NAME.npz also holds `st_encoded`, what sentence-transformers'
encode() makes of the texts from the saved directory, all texts in one padded batch.

Two families come as the hub publishes them, not as transformers saves them,
and are written here from transformers' weights by the renaming that
transformers' own conversion_mapping.py undoes when it loads a hub checkpoint:
  - NomicBERT with contrastors' config keys (n_embd, ...) and tensor names
    (emb_ln, encoder.layers.N.attn.Wqkv, mlp.fc11/fc12/fc2, norm1/norm2);
  - GTE "new" with the `new.` prefix, attention.qkv_proj, mlp.up_gate_proj, and
    NTK-scaled RoPE (`rope_scaling: {"type": "ntk"}`). transformers' GteModel has
    no "ntk" RoPE type, so its rotary frequencies are replaced by those of the
    published remote code (Alibaba-NLP/new-impl, NTKScalingRotaryEmbedding,
    `_ntk_inv_freq` below); everything else is GteModel's.
ModernBERT comes in both config layouts: the hub's (global_attn_every_n_layers,
global/local_rope_theta) and current transformers' (layer_types, rope_parameters).

Needs torch and transformers (`.venv-bench`, see the Makefile); the project and
its tests do not: the fixtures are committed and the tests only read them.

    .venv-bench/bin/python tests/make_family_fixtures.py [NAME ...]   # all, or the fixtures named
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "fixtures" / "families"
MAX_SEQ_LENGTH = 128
# Short to long: the longest is cut at MAX_SEQ_LENGTH, far beyond every sliding window here.
TEXT_INDICES = [1, 0, 9, 14, 24, 26]
PROMPTS = {"search_query": "search_query: ", "search_document": "search_document: "}
# EmbeddingGemma's own (a few of them), from its config_sentence_transformers.json.
GEMMA_PROMPTS = {
    "query": "task: search result | query: ",
    "document": "title: none | text: ",
    "Classification": "task: classification | query: ",
}


def texts() -> list[str]:
    return [str(t) for t in np.load(REPO / "tests" / "fixtures" / "st_reference.npz")["texts"][TEXT_INDICES]]


def corpus() -> list[str]:
    docs = [str(t) for t in np.load(REPO / "tests" / "fixtures" / "st_reference.npz")["texts"]]
    return docs + [p.read_text() for p in sorted((REPO / "samples" / "text").iterdir())]


def wordpiece_tokenizer() -> Tokenizer:
    """BERT-style: [CLS] text [SEP], lower-cased WordPiece, pad id 0."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(
        corpus(), trainers.WordPieceTrainer(vocab_size=400, special_tokens=special, limit_alphabet=150)
    )
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))],
    )
    return tok


def unigram_tokenizer() -> Tokenizer:
    """XLM-RoBERTa-style: <s> text </s>, SentencePiece-like Unigram, pad id 1 (positions start at 2)."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    special = ["<s>", "<pad>", "</s>", "<unk>"]
    tok.train_from_iterator(
        corpus(), trainers.UnigramTrainer(vocab_size=400, special_tokens=special, unk_token="<unk>")
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))]
    )
    return tok


def mpnet_tokenizer() -> Tokenizer:
    """MPNet-style, as all-mpnet-base-v2's tokenizer.json: lower-cased WordPiece between <s> and </s>
    (RobertaProcessing), pad id 1 (positions start at 2), unknown [UNK]."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    special = ["<s>", "<pad>", "</s>", "<unk>", "[UNK]", "<mask>"]
    tok.train_from_iterator(
        corpus(), trainers.WordPieceTrainer(vocab_size=400, special_tokens=special, limit_alphabet=150)
    )
    tok.post_processor = processors.RobertaProcessing(
        ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>"))
    )
    return tok


MPNET_TOKENIZER_CONFIG = {
    "tokenizer_class": "MPNetTokenizer",
    "do_lower_case": True,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "sep_token": "</s>",
    "cls_token": "<s>",
    "unk_token": "[UNK]",
    "pad_token": "<pad>",
    "mask_token": "<mask>",
    "model_max_length": 512,
}


def t5_tokenizer() -> Tokenizer:
    """T5-style, as sentence-t5's tokenizer.json: SentencePiece-like Unigram, whitespace split then Metaspace,
    text then </s> and no BOS (TemplateProcessing), pad id 0, </s> 1, <unk> 2. No normalizer: transformers 5's
    T5Tokenizer sets none (dropping tokenizer.json's), and must give the ids recorded here."""
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])
    tok.decoder = decoders.Metaspace()
    special = ["<pad>", "</s>", "<unk>"]
    tok.train_from_iterator(
        corpus(), trainers.UnigramTrainer(vocab_size=400, special_tokens=special, unk_token="<unk>")
    )
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", tok.token_to_id("</s>"))]
    )
    return tok


def albert_tokenizer() -> Tokenizer:
    """ALBERT-style, as transformers 5's AlbertTokenizer builds albert-base-v2's tokenizer.json (without its
    Precompiled map, which takes a SentencePiece model to make): `` and '' to ", NFKD, StripAccents and Lowercase,
    a split on white space before Metaspace (the hub's file has Metaspace alone: tokenizer_parity's
    albert-hub-layout), [CLS] text [SEP] (TemplateProcessing), <pad> 0, <unk> 1, [CLS] 2, [SEP] 3, [MASK] 4.
    AlbertTokenizer must give the ids recorded here."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence(
        [
            normalizers.Replace("``", '"'),
            normalizers.Replace("''", '"'),
            normalizers.NFKD(),
            normalizers.StripAccents(),
            normalizers.Lowercase(),
        ]
    )
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])
    tok.decoder = decoders.Metaspace()
    special = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(
        corpus(), trainers.UnigramTrainer(vocab_size=400, special_tokens=special, unk_token="<unk>")
    )
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[(t, tok.token_to_id(t)) for t in ("[CLS]", "[SEP]")],
    )
    return tok


# Qwen2's pre-tokenizer pattern (Qwen3's tokenizer.json): contractions, letter runs with one leading
# non-letter, single digits, punctuation runs, new lines, other white space.
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)


def bpe_tokenizer() -> Tokenizer:
    """Qwen3-Embedding-style: byte-level BPE after NFC and Qwen2's split pattern, text then <|endoftext|>
    (its tokenizer.json's TemplateProcessing: the token sentence-transformers pools by), no BOS, pad
    <|endoftext|>."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.train_from_iterator(
        corpus(),
        trainers.BpeTrainer(
            vocab_size=512, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok.post_processor = processors.TemplateProcessing(
        single="$A <|endoftext|>", special_tokens=[("<|endoftext|>", tok.token_to_id("<|endoftext|>"))]
    )
    return tok


def gemma_tokenizer() -> Tokenizer:
    """EmbeddingGemma-style, as transformers' GemmaTokenizer builds it: `sentencepiece_bpe` with <pad> 0, <eos> 1,
    <bos> 2, <unk> 3, and <bos> text <eos> (EmbeddingGemma's post-processor)."""
    return sentencepiece_bpe(["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"], "<bos>", "<eos>")


def llama_tokenizer() -> Tokenizer:
    """e5-mistral-7b-instruct's layout, as transformers' LlamaTokenizer builds it with add_eos_token:
    `sentencepiece_bpe` with <unk> 0, <s> 1, </s> 2, and <s> text </s>: the </s> that last-token pooling takes."""
    return sentencepiece_bpe(["<unk>", "<s>", "</s>"], "<s>", "</s>")


def sentencepiece_bpe(special: list[str], bos: str, eos: str) -> Tokenizer:
    """A SentencePiece BPE as transformers' tokenizers build one: spaces turned to '▁' (no prefix space), BPE with
    byte fallback (<0x00>..<0xFF> in the vocabulary, taken for characters outside the alphabet, kept small here so
    that some are), `bos` text `eos`. Trained on words split before each '▁' (SentencePiece's pieces), then run on
    the whole text, where no merge crosses a '▁' it did not start with."""
    trainer = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer.normalizer = normalizers.Replace(" ", "▁")
    trainer.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    trainer.train_from_iterator(
        corpus(), trainers.BpeTrainer(vocab_size=480, special_tokens=special, limit_alphabet=64)
    )
    trained = json.loads(trainer.to_str())["model"]
    vocab = trained["vocab"] | {f"<0x{b:02X}>": len(trained["vocab"]) + b for b in range(256)}
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in trained["merges"]]
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.add_special_tokens(special)
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", special_tokens=[(bos, special.index(bos)), (eos, special.index(eos))]
    )
    return tok


GEMMA_TOKENIZER_CONFIG = {
    "tokenizer_class": "GemmaTokenizer",
    "bos_token": "<bos>",
    "eos_token": "<eos>",
    "pad_token": "<pad>",
    "unk_token": "<unk>",
    "mask_token": "<mask>",
    "add_bos_token": True,
    "add_eos_token": True,
    "model_max_length": 2048,
}


# e5-mistral-7b-instruct's: LlamaTokenizer, whose add_bos_token and add_eos_token transformers builds the
# post-processor from (the file's says the same), </s> its pad token.
LLAMA_TOKENIZER_CONFIG = {
    "tokenizer_class": "LlamaTokenizer",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "pad_token": "</s>",
    "add_bos_token": True,
    "add_eos_token": True,
    "padding_side": "left",
    "model_max_length": 32768,
}


QWEN_TOKENIZER_CONFIG = {
    "tokenizer_class": "Qwen2Tokenizer",
    "eos_token": "<|endoftext|>",
    "pad_token": "<|endoftext|>",
    "bos_token": None,
    "unk_token": None,
    "padding_side": "left",
    "model_max_length": 32768,
}


ALBERT_TOKENIZER_CONFIG = {
    "tokenizer_class": "AlbertTokenizer",
    "do_lower_case": True,
    "keep_accents": False,
    "pad_token": "<pad>",
    "unk_token": "<unk>",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "mask_token": "[MASK]",
}


T5_TOKENIZER_CONFIG = {
    "tokenizer_class": "T5Tokenizer",
    "eos_token": "</s>",
    "pad_token": "<pad>",
    "unk_token": "<unk>",
    "extra_ids": 0,
}


def check_transformers_tokenizer(path: Path, texts: list[str], ids: np.ndarray) -> None:
    """transformers' own tokenizer for the directory (MPNetTokenizer, T5Tokenizer here) gives the ids recorded."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    theirs = tokenizer(texts, truncation=True, max_length=MAX_SEQ_LENGTH)["input_ids"]
    assert np.concatenate(theirs).tolist() == ids.tolist(), f"{path.name}: transformers' tokenizer differs"


def _ntk_inv_freq(dim: int, base: float, scaling_factor: float, mixed_b: float | None = None) -> torch.Tensor:
    """Alibaba-NLP/new-impl's NTKScalingRotaryEmbedding._set_cos_sin_cache, as published: its cache is
    built for max_position_embeddings * scaling_factor positions, more than max_position_embeddings,
    so the scaled frequencies are the ones used."""
    base = base * (scaling_factor if mixed_b is None else 1)
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    if mixed_b is None:
        inv_freq = inv_freq / scaling_factor ** (2 / dim)
    else:
        a = torch.tensor(scaling_factor).log() / (dim / 2) ** mixed_b
        lambda_1_m = (a * torch.arange(1, dim // 2 + 1).float() ** mixed_b).exp()
        inv_freq = inv_freq / lambda_1_m
    return inv_freq


def randomise(model: torch.nn.Module, seed: int) -> None:
    """Weights far from transformers' 0.02-std init: unit-variance embeddings, linear weights
    1.5/sqrt(fan_in) (peaked attention), norms 1 +- 0.1, biases +- 0.1; all rounded to bfloat16."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.ndim == 1:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * noise)
            elif "embeddings" in name:
                p.copy_(noise)
            else:
                p.copy_(noise * 1.5 / p.shape[1] ** 0.5)
            # Weights are saved in bfloat16 (half the bytes, and the loader's bfloat16 path under test):
            # the reference runs in float32 on exactly those values.
            p.copy_(p.to(torch.bfloat16).float())


class DenseModule(NamedTuple):
    """A sentence-transformers Dense module's arguments, but its input size: the output size of the module before it."""

    out_features: int
    bias: bool
    activation: torch.nn.Module
    residual: bool = False  # use_residual


@dataclasses.dataclass
class Fixture:
    name: str
    build: Callable[[], tuple[torch.nn.Module, torch.nn.Module]]  # (model to save, base model to run)
    tokenizer: str  # a TOKENIZERS key: "wordpiece", "unigram", "mpnet", "t5", "albert", "bpe" or "gemma"
    # "mean", "cls" or "lasttoken" (written as the legacy flags), or sentence-transformers' modes joined by "+"
    # (written as sentence-transformers 6 writes a list, and pooled by its own Pooling module)
    pooling: str
    normalize: bool
    # Rewrites what save_pretrained wrote: (directory, base model) -> None.
    rewrite: Callable[[Path, torch.nn.Module], None] | None = None
    max_shard_size: str | None = None
    prompts: dict[str, str] | None = None
    prompt_name: str = "search_document"  # the prompt of `prompted_pooled`
    # sentence-transformers Dense modules after the Pooling, in order.
    dense: tuple[DenseModule, ...] = ()
    tokenizer_config: dict | None = None
    # config.json changes under which the same weights' hidden states are recorded too, as `hidden_NAME`.
    variants: dict[str, dict] = dataclasses.field(default_factory=dict)


def _vocab(tokenizer: str) -> dict:
    """The special ids of transformers' config: "unigram" and "mpnet" both <pad>, <s>, </s>."""
    tok = TOKENIZERS[tokenizer]
    if tokenizer == "wordpiece":
        return dict(vocab_size=tok.get_vocab_size(), pad_token_id=tok.token_to_id("[PAD]"))
    if tokenizer == "bpe":
        eos = tok.token_to_id("<|endoftext|>")
        return dict(vocab_size=tok.get_vocab_size(), pad_token_id=eos, eos_token_id=eos, bos_token_id=None)
    if tokenizer == "gemma":
        return dict(vocab_size=tok.get_vocab_size(), pad_token_id=0, eos_token_id=1, bos_token_id=2)
    if tokenizer == "albert":
        ids = {name: tok.token_to_id(token) for name, token in (("pad", "<pad>"), ("bos", "[CLS]"), ("eos", "[SEP]"))}
        return dict(vocab_size=tok.get_vocab_size(), **{f"{name}_token_id": i for name, i in ids.items()})
    if tokenizer == "t5":
        pad, eos = tok.token_to_id("<pad>"), tok.token_to_id("</s>")
        return dict(vocab_size=tok.get_vocab_size(), pad_token_id=pad, eos_token_id=eos, decoder_start_token_id=pad)
    return dict(
        vocab_size=tok.get_vocab_size(),
        pad_token_id=tok.token_to_id("<pad>"),
        bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=tok.token_to_id("</s>"),
    )


def _base(model_cls, config, seed: int, base_attr: str | None = None):
    def build():
        model = model_cls(config).eval()
        randomise(model, seed)
        return model, getattr(model, base_attr) if base_attr else model

    return build


# --- hub layouts, written from transformers' weights -------------------------------------------


def _write_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    for old in path.glob("model*.safetensors*"):
        old.unlink()
    save_file(
        {k: v.contiguous() for k, v in tensors.items()}, str(path / "model.safetensors"), metadata={"format": "pt"}
    )


def _rewrite_config(path: Path, drop: list[str], add: dict) -> None:
    config = json.loads((path / "config.json").read_text())
    for key in drop:
        config.pop(key, None)
    (path / "config.json").write_text(json.dumps(config | add, indent=2, sort_keys=True))


def modernbert_hub_config(path: Path, base) -> None:
    """transformers' layer_types/rope_parameters -> the hub's global_attn_every_n_layers and thetas."""
    c = base.config
    every = 3
    assert c.layer_types == [
        "full_attention" if i % every == 0 else "sliding_attention" for i in range(c.num_hidden_layers)
    ], c.layer_types
    _rewrite_config(
        path,
        ["layer_types", "rope_parameters"],
        {
            "global_attn_every_n_layers": every,
            "global_rope_theta": c.rope_parameters["full_attention"]["rope_theta"],
            "local_rope_theta": c.rope_parameters["sliding_attention"]["rope_theta"],
        },
    )
    reread = transformers.AutoConfig.from_pretrained(path)
    assert (reread.layer_types, reread.rope_parameters) == (c.layer_types, c.rope_parameters), "hub layout misread"


def nomic_contrastors_layout(path: Path, base) -> None:
    """NomicBertModel -> contrastors' names and config keys (the inverse of conversion_mapping's nomic_bert)."""
    c, sd = base.config, base.state_dict()
    out = {
        "embeddings.word_embeddings.weight": sd["embeddings.word_embeddings.weight"],
        "embeddings.token_type_embeddings.weight": sd["embeddings.token_type_embeddings.weight"],
        "emb_ln.weight": sd["embeddings.LayerNorm.weight"],
        "emb_ln.bias": sd["embeddings.LayerNorm.bias"],
    }
    for i in range(c.num_hidden_layers):
        src, dst = f"layers.{i}.", f"encoder.layers.{i}."
        out[dst + "attn.Wqkv.weight"] = torch.cat([sd[src + f"self_attn.{x}_proj.weight"] for x in "qkv"])
        out[dst + "attn.out_proj.weight"] = sd[src + "self_attn.o_proj.weight"]
        out[dst + "mlp.fc11.weight"] = sd[src + "mlp.up_proj.weight"]
        out[dst + "mlp.fc12.weight"] = sd[src + "mlp.gate_proj.weight"]
        out[dst + "mlp.fc2.weight"] = sd[src + "mlp.down_proj.weight"]
        for old, new in (("post_attention_layernorm", "norm1"), ("post_mlp_layernorm", "norm2")):
            out[dst + f"{new}.weight"], out[dst + f"{new}.bias"] = sd[src + f"{old}.weight"], sd[src + f"{old}.bias"]
    _write_tensors(path, out)
    config = {
        "model_type": "nomic_bert",
        "architectures": ["NomicBertModel"],
        "activation_function": "swiglu",
        "n_embd": c.hidden_size,
        "n_head": c.num_attention_heads,
        "n_layer": c.num_hidden_layers,
        "n_inner": c.intermediate_size,
        "n_positions": c.max_position_embeddings,
        "max_trained_positions": 2048,
        "layer_norm_epsilon": c.layer_norm_eps,
        "rotary_emb_base": c.rope_parameters["rope_theta"],
        "rotary_emb_fraction": 1.0,
        "rotary_emb_interleaved": False,
        "rotary_scaling_factor": None,
        "qkv_proj_bias": False,
        "mlp_fc1_bias": False,
        "mlp_fc2_bias": False,
        "prenorm": False,
        "use_rms_norm": False,
        "causal": False,
        "type_vocab_size": c.type_vocab_size,
        "vocab_size": c.vocab_size,
        "pad_vocab_size_multiple": 1,
        "pad_token_id": c.pad_token_id,
    }
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))


GTE_NTK = {"type": "ntk", "factor": 2.0}
GTE_THETA = 500_000.0


def gte_new_layout(path: Path, base) -> None:
    """GteModel -> the hub's `new.` names, fused qkv_proj/up_gate_proj, and NewConfig keys."""
    c, sd = base.config, base.state_dict()
    p = "new."
    out = {
        p + k: sd[k]
        for k in ("embeddings.word_embeddings.weight", "embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias")
    }
    for i in range(c.num_hidden_layers):
        src, dst = f"layers.{i}.", f"{p}encoder.layer.{i}."
        for kind in ("weight", "bias"):
            out[dst + f"attention.qkv_proj.{kind}"] = torch.cat([sd[src + f"self_attn.{x}_proj.{kind}"] for x in "qkv"])
            out[dst + f"attention.o_proj.{kind}"] = sd[src + f"self_attn.o_proj.{kind}"]
            out[dst + f"attn_ln.{kind}"] = sd[src + f"post_attention_layernorm.{kind}"]
            out[dst + f"mlp_ln.{kind}"] = sd[src + f"post_mlp_layernorm.{kind}"]
            out[dst + f"mlp.down_proj.{kind}"] = sd[src + f"mlp.down_proj.{kind}"]
        out[dst + "mlp.up_gate_proj.weight"] = torch.cat(
            [sd[src + "mlp.up_proj.weight"], sd[src + "mlp.gate_proj.weight"]]
        )
    _write_tensors(path, out)
    config = {
        "model_type": "new",
        "architectures": ["NewModel"],
        "hidden_act": c.hidden_act,
        "hidden_size": c.hidden_size,
        "num_attention_heads": c.num_attention_heads,
        "num_hidden_layers": c.num_hidden_layers,
        "intermediate_size": c.intermediate_size,
        "max_position_embeddings": c.max_position_embeddings,
        "layer_norm_eps": c.layer_norm_eps,
        "layer_norm_type": "layer_norm",
        "position_embedding_type": "rope",
        "rope_theta": GTE_THETA,
        "rope_scaling": GTE_NTK,
        "logn_attention_scale": False,
        "pack_qkv": True,
        "unpad_inputs": False,
        "use_memory_efficient_attention": False,
        "type_vocab_size": 0,
        "vocab_size": c.vocab_size,
        "pad_token_id": c.pad_token_id,
    }
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))


def t5_both_embeddings(path: Path, base) -> None:
    """Both names of T5's tied token embeddings, `shared` and `encoder.embed_tokens`, as older hub checkpoints
    (sentence-t5's among them) carry them; transformers saves one."""
    tensors = {name: p.detach().to(torch.bfloat16) for name, p in base.named_parameters()}
    tensors["encoder.embed_tokens.weight"] = tensors["shared.weight"].clone()
    _write_tensors(path, tensors)


def gte_ntk_model(config, seed: int):
    """GteModel with the remote code's NTK-scaled rotary frequencies (see the module docstring)."""

    def build():
        model = transformers.GteModel(config).eval()
        randomise(model, seed)
        head_dim = config.hidden_size // config.num_attention_heads
        inv_freq = _ntk_inv_freq(head_dim, GTE_THETA, GTE_NTK["factor"])
        model.rotary_emb.inv_freq.copy_(inv_freq)
        model.rotary_emb.original_inv_freq.copy_(inv_freq)
        return model, model

    return build


# --- the fixtures -------------------------------------------------------------------------------


# The new decoders' sizes (Mistral, Qwen2, Llama): grouped-query, 4 query heads and 2 K/V heads over hidden 64.
DECODER_DIMS = dict(
    hidden_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=96,
    max_position_embeddings=512,
)


def fixtures() -> list[Fixture]:
    wp, ug, mp, t5, bpe = _vocab("wordpiece"), _vocab("unigram"), _vocab("mpnet"), _vocab("t5"), _vocab("bpe")
    gemma, llama, albert = _vocab("gemma"), _vocab("llama"), _vocab("albert")
    T = transformers
    return [
        Fixture(
            "bert-mlm-prefix",
            _base(
                T.BertForMaskedLM,
                T.BertConfig(
                    **wp,
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=2,
                    intermediate_size=64,
                    max_position_embeddings=MAX_SEQ_LENGTH,
                ),
                1,
                "bert",
            ),
            "wordpiece",
            "mean",
            True,
        ),
        Fixture(
            "bert-pooler",
            _base(
                T.BertModel,
                T.BertConfig(
                    **wp,
                    hidden_size=48,
                    num_hidden_layers=3,
                    num_attention_heads=6,
                    intermediate_size=80,
                    max_position_embeddings=MAX_SEQ_LENGTH + 16,
                    hidden_act="gelu_new",
                ),
                2,
            ),
            "wordpiece",
            "cls",
            False,
        ),
        Fixture(
            "bert-pooling-modes",
            _base(
                T.BertModel,
                T.BertConfig(
                    **wp,
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    intermediate_size=64,
                    max_position_embeddings=MAX_SEQ_LENGTH,
                ),
                21,
            ),
            "wordpiece",
            # The three modes that only sentence-transformers' own Pooling defines, concatenated, not normalised,
            # so that each one's values show in the embedding.
            "max+mean_sqrt_len_tokens+weightedmean",
            False,
        ),
        Fixture(
            "distilbert-mlm-prefix",
            _base(
                T.DistilBertForMaskedLM,
                T.DistilBertConfig(
                    **wp, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=MAX_SEQ_LENGTH
                ),
                11,
                "distilbert",
            ),
            "wordpiece",
            "mean",
            True,
        ),
        Fixture(
            "distilbert-dense",
            _base(
                T.DistilBertModel,
                T.DistilBertConfig(
                    **wp,
                    dim=48,
                    n_layers=3,
                    n_heads=6,
                    hidden_dim=80,
                    max_position_embeddings=MAX_SEQ_LENGTH + 16,
                    activation="relu",
                ),
                12,
            ),
            "wordpiece",
            "mean",
            True,
            # distiluse's Tanh projection, then one without bias or activation.
            dense=(DenseModule(40, True, torch.nn.Tanh()), DenseModule(24, False, torch.nn.Identity())),
            tokenizer_config={"tokenizer_class": "DistilBertTokenizer", "do_lower_case": True},
        ),
        Fixture(
            "distilbert-dense-residual",
            _base(
                T.DistilBertModel,
                T.DistilBertConfig(
                    **wp,
                    dim=48,
                    n_layers=2,
                    n_heads=6,
                    hidden_dim=80,
                    max_position_embeddings=MAX_SEQ_LENGTH + 16,
                    activation="gelu",
                ),
                31,
            ),
            "wordpiece",
            "cls",
            True,
            # sentence-transformers' use_residual: x itself added where the sizes agree, x through a matrix of its
            # own where they do not.
            dense=(
                DenseModule(48, True, torch.nn.Tanh(), residual=True),
                DenseModule(32, False, torch.nn.Identity(), residual=True),
            ),
        ),
        Fixture(
            "xlm-roberta-sharded",
            _base(
                T.XLMRobertaModel,
                T.XLMRobertaConfig(
                    **ug,
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    intermediate_size=64,
                    max_position_embeddings=MAX_SEQ_LENGTH + 2,
                    type_vocab_size=1,
                ),
                3,
            ),
            "unigram",
            "cls",
            True,
            max_shard_size="20KB",
        ),
        Fixture(
            "xlm-roberta-mlm-prefix",
            _base(
                T.XLMRobertaForMaskedLM,
                T.XLMRobertaConfig(
                    **ug,
                    hidden_size=48,
                    num_hidden_layers=3,
                    num_attention_heads=3,
                    intermediate_size=96,
                    max_position_embeddings=MAX_SEQ_LENGTH + 2,
                    type_vocab_size=1,
                ),
                4,
                "roberta",
            ),
            "unigram",
            "mean",
            False,
        ),
        Fixture(
            # CamemBERT (model_type camembert, CamembertTokenizer): RoBERTa's architecture and prefix.
            "camembert-mlm-prefix",
            _base(
                T.CamembertForMaskedLM,
                T.CamembertConfig(
                    **ug,
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=2,
                    intermediate_size=64,
                    max_position_embeddings=MAX_SEQ_LENGTH + 2,
                    type_vocab_size=1,
                ),
                23,
                "roberta",
            ),
            "unigram",
            "mean",
            True,
        ),
        Fixture(
            "mpnet-base",
            _base(
                T.MPNetModel,
                T.MPNetConfig(
                    **mp,
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    intermediate_size=64,
                    max_position_embeddings=MAX_SEQ_LENGTH + 2,
                    layer_norm_eps=1e-5,
                ),
                11,
            ),
            "mpnet",
            "mean",
            True,
            tokenizer_config=MPNET_TOKENIZER_CONFIG,
        ),
        Fixture(
            "mpnet-mlm-prefix",
            _base(
                T.MPNetForMaskedLM,
                T.MPNetConfig(
                    **mp,
                    hidden_size=48,
                    num_hidden_layers=3,
                    num_attention_heads=6,
                    intermediate_size=96,
                    max_position_embeddings=MAX_SEQ_LENGTH + 2,
                    hidden_act="gelu_new",
                ),
                12,
                "mpnet",
            ),
            "mpnet",
            "cls",
            False,
            tokenizer_config=MPNET_TOKENIZER_CONFIG,
        ),
        Fixture(
            "modernbert-hub-config",
            _base(
                T.ModernBertForMaskedLM,
                T.ModernBertConfig(
                    **wp,
                    cls_token_id=2,
                    sep_token_id=3,
                    bos_token_id=2,
                    eos_token_id=3,
                    hidden_size=32,
                    num_hidden_layers=4,
                    num_attention_heads=2,
                    intermediate_size=48,
                    max_position_embeddings=512,
                    local_attention=16,
                    rope_parameters={
                        "full_attention": {"rope_type": "default", "rope_theta": 160_000.0},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                    },
                ),
                5,
                "model",
            ),
            "wordpiece",
            "mean",
            True,
            rewrite=modernbert_hub_config,
        ),
        Fixture(
            "modernbert-layer-types",
            _base(
                T.ModernBertModel,
                T.ModernBertConfig(
                    **wp,
                    cls_token_id=2,
                    sep_token_id=3,
                    bos_token_id=2,
                    eos_token_id=3,
                    hidden_size=48,
                    num_hidden_layers=5,
                    num_attention_heads=4,
                    intermediate_size=64,
                    max_position_embeddings=256,
                    local_attention=24,
                    norm_bias=True,
                    attention_bias=True,
                    mlp_bias=True,
                    layer_types=["full_attention", "sliding_attention"] * 2 + ["full_attention"],
                    rope_parameters={
                        "full_attention": {"rope_type": "default", "rope_theta": 80_000.0},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 5_000.0},
                    },
                ),
                6,
            ),
            "wordpiece",
            "cls",
            False,
        ),
        Fixture(
            "nomic-contrastors",
            _base(
                T.NomicBertModel,
                T.NomicBertConfig(
                    **wp,
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    intermediate_size=64,
                    max_position_embeddings=8192,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
                ),
                7,
            ),
            "wordpiece",
            "mean",
            True,
            rewrite=nomic_contrastors_layout,
            prompts=PROMPTS,
        ),
        Fixture(
            "nomic-transformers",
            _base(
                T.NomicBertModel,
                T.NomicBertConfig(
                    **wp,
                    hidden_size=48,
                    num_hidden_layers=3,
                    num_attention_heads=6,
                    intermediate_size=80,
                    max_position_embeddings=2048,
                    rope_parameters={"rope_type": "default", "rope_theta": 10_000.0},
                ),
                8,
            ),
            "wordpiece",
            "lasttoken",
            False,
        ),
        Fixture(
            "gte-new-ntk",
            gte_ntk_model(
                T.GteConfig(
                    **wp,
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=2,
                    intermediate_size=64,
                    max_position_embeddings=8192,
                    type_vocab_size=0,
                    rope_parameters={"rope_type": "default", "rope_theta": GTE_THETA},
                ),
                9,
            ),
            "wordpiece",
            "cls",
            True,
            rewrite=gte_new_layout,
        ),
        Fixture(
            "gte-transformers",
            _base(
                T.GteModel,
                T.GteConfig(
                    **ug,
                    hidden_size=48,
                    num_hidden_layers=3,
                    num_attention_heads=4,
                    intermediate_size=64,
                    max_position_embeddings=8192,
                    type_vocab_size=1,
                ),
                10,
            ),
            "unigram",
            "mean",
            False,
        ),
        Fixture(
            # sentence-t5's layout: T5EncoderModel (relu), mean pooling, a Dense without bias or activation,
            # Normalize. Few buckets and a short max_distance, so that texts reach the logarithmic buckets
            # and beyond.
            "t5-encoder-st",
            _base(
                T.T5EncoderModel,
                T.T5Config(
                    **t5,
                    d_model=48,
                    d_kv=8,
                    num_heads=6,
                    d_ff=80,
                    num_layers=3,
                    feed_forward_proj="relu",
                    relative_attention_num_buckets=16,
                    relative_attention_max_distance=40,
                    n_positions=MAX_SEQ_LENGTH,
                ),
                13,
            ),
            "t5",
            "mean",
            True,
            rewrite=t5_both_embeddings,
            dense=(DenseModule(48, False, torch.nn.Identity()),),
            tokenizer_config=T5_TOKENIZER_CONFIG,
        ),
        Fixture(
            # T5 v1.1 / flan: gated-gelu, heads * d_kv (48) wider than d_model (32), saved as a T5Model whose
            # decoder (deeper than the encoder) is never read.
            "t5-v11-model",
            _base(
                T.T5Model,
                T.T5Config(
                    **t5,
                    d_model=32,
                    d_kv=12,
                    num_heads=4,
                    d_ff=64,
                    num_layers=2,
                    num_decoder_layers=3,
                    feed_forward_proj="gated-gelu",
                ),
                14,
                "encoder",
            ),
            "t5",
            "mean",
            False,
            tokenizer_config=T5_TOKENIZER_CONFIG,
        ),
        Fixture(
            # mT5 (model_type mt5): T5 v1.1's encoder, gated-gelu, saved as an MT5EncoderModel, its config.json
            # saying tie_word_embeddings false as google/mt5-*'s do (of the output embeddings an encoder never reads;
            # transformers 5 writes true).
            "mt5-encoder",
            _base(
                T.MT5EncoderModel,
                T.MT5Config(
                    **t5,
                    d_model=32,
                    d_kv=8,
                    num_heads=4,
                    d_ff=48,
                    num_layers=2,
                    feed_forward_proj="gated-gelu",
                    relative_attention_num_buckets=16,
                    relative_attention_max_distance=40,
                ),
                22,
            ),
            "t5",
            "mean",
            True,
            rewrite=lambda path, base: _rewrite_config(path, [], {"tie_word_embeddings": False}),
            tokenizer_config=T5_TOKENIZER_CONFIG,
        ),
        Fixture(
            # paraphrase-albert-small-v2's layout: an AlbertModel, its embeddings narrower than its layers, 4 steps
            # over 2 groups of 2 layers each (8 layers deep, 4 stored), mean pooling.
            "albert-shared-groups",
            _base(
                T.AlbertModel,
                T.AlbertConfig(
                    **albert,
                    embedding_size=16,
                    hidden_size=32,
                    num_hidden_layers=4,
                    num_hidden_groups=2,
                    inner_group_num=2,
                    num_attention_heads=4,
                    intermediate_size=48,
                    max_position_embeddings=MAX_SEQ_LENGTH,
                ),
                24,
            ),
            "albert",
            "mean",
            False,
            tokenizer_config=ALBERT_TOKENIZER_CONFIG,
        ),
        Fixture(
            # Qwen3-Embedding's layout: a Qwen3Model with grouped-query attention (4 query heads, 2 K/V heads)
            # whose heads (4 x 32) are wider than hidden_size (64), last-token pooling, Normalize.
            "qwen3-embedding",
            _base(
                T.Qwen3Model,
                T.Qwen3Config(
                    **bpe,
                    hidden_size=64,
                    num_hidden_layers=3,
                    num_attention_heads=4,
                    num_key_value_heads=2,
                    head_dim=32,
                    intermediate_size=96,
                    max_position_embeddings=512,
                    rms_norm_eps=1e-6,
                    rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
                    tie_word_embeddings=True,
                ),
                15,
            ),
            "bpe",
            "lasttoken",
            True,
            tokenizer_config=QWEN_TOKENIZER_CONFIG,
        ),
        Fixture(
            # EmbeddingGemma's layout: a Gemma3TextModel attending both ways (use_bidirectional_attention), its
            # sliding layers within 16 // 2 = 8 tokens either side, grouped-query (4 query heads, 2 K/V heads of
            # 32 over hidden 64), the attention scaled by query_pre_attn_scalar (24), not head_dim; mean pooling,
            # two Dense modules without bias (64 -> 256 -> 64, as 768 -> 3072 -> 768), Normalize, its prompts.
            "gemma3-embedding",
            _base(
                T.Gemma3TextModel,
                T.Gemma3TextConfig(
                    **gemma,
                    hidden_size=64,
                    num_hidden_layers=4,
                    num_attention_heads=4,
                    num_key_value_heads=2,
                    head_dim=32,
                    intermediate_size=96,
                    max_position_embeddings=512,
                    sliding_window=16,
                    layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
                    query_pre_attn_scalar=24,
                    rope_parameters={
                        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                        "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
                    },
                    use_bidirectional_attention=True,
                ),
                16,
            ),
            "gemma",
            "mean",
            True,
            prompts=GEMMA_PROMPTS,
            prompt_name="document",
            dense=(DenseModule(256, False, torch.nn.Identity()), DenseModule(64, False, torch.nn.Identity())),
            tokenizer_config=GEMMA_TOKENIZER_CONFIG,
            # A plain Gemma3 decoder: causal, its sliding layers seeing the 15 tokens before.
            variants={"causal": {"use_bidirectional_attention": False}},
        ),
        Fixture(
            # e5-mistral-7b-instruct's layout: a MistralModel, grouped-query (4 query heads, 2 K/V heads of 16 over
            # hidden 64), every layer attending within sliding_window 16 (the 15 tokens before), no biases; <s> text
            # </s> pooled by its last token, Normalize.
            "mistral-embedding",
            _base(
                T.MistralModel,
                T.MistralConfig(
                    **llama,
                    **DECODER_DIMS,
                    sliding_window=16,
                    rope_parameters={"rope_type": "default", "rope_theta": 10_000.0},
                ),
                17,
            ),
            "llama",
            "lasttoken",
            True,
            tokenizer_config=LLAMA_TOKENIZER_CONFIG,
            # is_causal false: both ways, every layer within |t - s| <= 16.
            variants={"bidirectional": {"is_causal": False}},
        ),
        Fixture(
            # gte-Qwen2-1.5B-instruct's layout: a Qwen2Model with biased q, k, v projections (o_proj without),
            # grouped-query (4 query heads, 2 K/V heads of 16 over hidden 64), full attention; text then
            # <|endoftext|>, pooled by its last token, Normalize. Its "sliding" variant: layers 1 and 2 within 16.
            "qwen2-embedding",
            _base(
                T.Qwen2Model,
                T.Qwen2Config(
                    **bpe,
                    **DECODER_DIMS,
                    max_window_layers=21,
                    rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
                ),
                18,
            ),
            "bpe",
            "lasttoken",
            True,
            tokenizer_config=QWEN_TOKENIZER_CONFIG,
            variants={
                "bidirectional": {"is_causal": False},
                "sliding": {
                    "use_sliding_window": True,
                    "sliding_window": 16,
                    "max_window_layers": 1,
                    "layer_types": None,
                },
            },
        ),
        Fixture(
            # A Llama 3.1-style LlamaModel: llama3 RoPE frequencies (factor 8 over 64 original positions, so that
            # they change within the texts), attention_bias and mlp_bias both on, grouped-query; mean pooling.
            "llama-embedding",
            _base(
                T.LlamaModel,
                T.LlamaConfig(
                    **llama,
                    **DECODER_DIMS | {"num_hidden_layers": 2},
                    head_dim=24,
                    attention_bias=True,
                    mlp_bias=True,
                    rope_parameters={
                        "rope_type": "llama3",
                        "rope_theta": 10_000.0,
                        "factor": 8.0,
                        "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 64,
                    },
                ),
                19,
            ),
            "llama",
            "mean",
            True,
            # Not LlamaTokenizer's class: transformers' own would prepend a '▁' this BPE was not trained with.
            tokenizer_config=LLAMA_TOKENIZER_CONFIG | {"tokenizer_class": "PreTrainedTokenizerFast"},
        ),
    ]


TOKENIZERS = {
    "wordpiece": wordpiece_tokenizer(),
    "unigram": unigram_tokenizer(),
    "mpnet": mpnet_tokenizer(),
    "t5": t5_tokenizer(),
    "albert": albert_tokenizer(),
    "bpe": bpe_tokenizer(),
    "gemma": gemma_tokenizer(),
    "llama": llama_tokenizer(),
}


def sentence_transformers_files(path: Path, fx: Fixture, dim: int, dense: list[torch.nn.Module]) -> None:
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    for module in dense:
        idx = len(modules)
        dense_type = "sentence_transformers.models.Dense"
        modules.append({"idx": idx, "name": str(idx), "path": f"{idx}_Dense", "type": dense_type})
        (path / f"{idx}_Dense").mkdir()
        module.save(str(path / f"{idx}_Dense"))
    if fx.normalize:
        idx = len(modules)
        modules.append(
            {"idx": idx, "name": str(idx), "path": f"{idx}_Normalize", "type": "sentence_transformers.models.Normalize"}
        )
    (path / "modules.json").write_text(json.dumps(modules, indent=2))
    (path / "1_Pooling").mkdir()
    pooling = {
        "word_embedding_dimension": dim,
        "pooling_mode_cls_token": fx.pooling == "cls",
        "pooling_mode_mean_tokens": fx.pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": fx.pooling == "lasttoken",
        "include_prompt": True,
    }
    if fx.pooling not in SIMPLE_POOLING:
        pooling = {"embedding_dimension": dim, "pooling_mode": fx.pooling.split("+"), "include_prompt": True}
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=2))
    (path / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": MAX_SEQ_LENGTH, "do_lower_case": False})
    )
    if fx.tokenizer_config:
        (path / "tokenizer_config.json").write_text(json.dumps(fx.tokenizer_config, indent=2))
    if fx.prompts:
        (path / "config_sentence_transformers.json").write_text(
            json.dumps({"prompts": fx.prompts, "default_prompt_name": None, "similarity_fn_name": "cosine"}, indent=2)
        )


def dense_modules(fx: Fixture, dim: int, seed: int) -> list[torch.nn.Module]:
    """sentence-transformers' own Dense modules, random weights +- 1.5/sqrt(in_features) and biases +- 0.1."""
    from sentence_transformers.base.modules.dense import Dense

    g = torch.Generator().manual_seed(seed)
    modules = []
    for out_features, bias, activation, residual in fx.dense:
        module = Dense(dim, out_features, bias=bias, activation_function=activation, use_residual=residual).eval()
        with torch.no_grad():
            for name, p in module.named_parameters():
                scale = 0.1 if name.endswith("bias") else 1.5 / dim**0.5
                p.copy_(torch.randn(p.shape, generator=g) * scale)
        modules.append(module)
        dim = out_features
    return modules


def embed(
    base: torch.nn.Module, tok: Tokenizer, texts: list[str], fx: Fixture, dense: list[torch.nn.Module] = ()
) -> dict[str, np.ndarray]:
    """Each text alone through the model: ids, hidden states [n, D], and the pooled (projected, normalised)
    embedding."""
    tok = Tokenizer.from_str(tok.to_str())
    tok.enable_truncation(MAX_SEQ_LENGTH)
    ids, hidden, pooled = [], [], []
    for text in texts:
        text_ids = tok.encode(text).ids
        with torch.no_grad():
            h = base(input_ids=torch.tensor([text_ids]), attention_mask=torch.ones(1, len(text_ids), dtype=torch.long))
        h = h.last_hidden_state[0].float()
        vector = pool_vector(h, fx.pooling)
        with torch.no_grad():
            for module in dense:
                vector = module({"sentence_embedding": vector[None]})["sentence_embedding"][0]
        if fx.normalize:
            vector = torch.nn.functional.normalize(vector, dim=-1)
        ids.append(np.array(text_ids, np.int32))
        hidden.append(h.numpy())
        pooled.append(vector.numpy())
    return {
        "ids": np.concatenate(ids),
        "lengths": np.array([len(i) for i in ids], np.int32),
        "hidden": np.concatenate(hidden),
        "pooled": np.stack(pooled),
    }


# Pooled here by hand, as the fixtures made before sentence-transformers' other modes were (byte for byte).
SIMPLE_POOLING = ("mean", "cls", "lasttoken")


def pool_vector(h: torch.Tensor, pooling: str) -> torch.Tensor:
    """One sequence's hidden states [n, D] -> its pooled vector; any mode but the simple ones through
    sentence-transformers' own Pooling module."""
    if pooling in SIMPLE_POOLING:
        return {"mean": h.mean(0), "cls": h[0], "lasttoken": h[-1]}[pooling]
    from sentence_transformers.sentence_transformer.modules.pooling import Pooling

    features = {"token_embeddings": h[None], "attention_mask": torch.ones(1, h.shape[0], dtype=torch.long)}
    return Pooling(h.shape[1], pooling_mode=tuple(pooling.split("+")))(features)["sentence_embedding"][0]


def st_encode(path: Path, sample: list[str]) -> np.ndarray:
    """sentence-transformers' encode() of the saved directory, the texts in one padded batch, in float32 (the
    weights' config.json says bfloat16, as they are stored)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu", model_kwargs={"dtype": torch.float32})
    return model.encode(sample, batch_size=len(sample), convert_to_numpy=True).astype(np.float32)


def make(fx: Fixture) -> None:
    path = OUT / fx.name
    shutil.rmtree(path, ignore_errors=True)
    model, base = fx.build()
    sample = texts()
    dense = dense_modules(fx, base.config.hidden_size * len(fx.pooling.split("+")), seed=100)
    result = embed(base, TOKENIZERS[fx.tokenizer], sample, fx, dense)
    if fx.prompts:
        prompt = fx.prompts[fx.prompt_name]
        prompted = embed(base, TOKENIZERS[fx.tokenizer], [prompt + t for t in sample], fx, dense)
        result["prompted_pooled"] = prompted["pooled"]
        result["prompt"] = np.array(prompt)
    for variant, change in fx.variants.items():
        config = type(base.config)(**(base.config.to_dict() | change))
        changed = type(base)(config).eval()
        changed.load_state_dict(base.state_dict())
        result[f"hidden_{variant}"] = embed(changed, TOKENIZERS[fx.tokenizer], sample, fx)["hidden"]
    model.to(torch.bfloat16)  # lossless: randomise() rounded every weight to bfloat16
    kwargs = {} if fx.max_shard_size is None else {"max_shard_size": fx.max_shard_size}
    model.save_pretrained(path, **kwargs)
    if fx.rewrite:
        fx.rewrite(path, base)
    TOKENIZERS[fx.tokenizer].save(str(path / "tokenizer.json"))
    sentence_transformers_files(path, fx, base.config.hidden_size, dense)
    if fx.tokenizer in ("mpnet", "t5", "albert", "bpe", "gemma", "llama"):
        check_transformers_tokenizer(path, sample, result["ids"])
    if dense or fx.pooling not in SIMPLE_POOLING or fx.tokenizer in ("bpe", "gemma", "llama"):
        result["st_encoded"] = st_encode(path, sample)
        assert np.abs(result["st_encoded"] - result["pooled"]).max() < 1e-5, "sentence-transformers differs"
    np.savez_compressed(OUT / f"{fx.name}.npz", texts=np.array(sample), **result)
    print(
        f"{fx.name}: {type(base).__name__}, tokens {result['lengths'].tolist()}, "
        f"files {sorted(p.name for p in path.iterdir())}"
    )


def main(names: list[str]) -> None:
    """`names`: the fixtures to regenerate (default all): each is made from its own seed alone."""
    torch.manual_seed(0)
    OUT.mkdir(parents=True, exist_ok=True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    chosen = [fx for fx in fixtures() if not names or fx.name in names]
    if len(chosen) != len(set(names) or chosen):
        raise SystemExit(f"unknown fixture among {names}; known: {', '.join(fx.name for fx in fixtures())}")
    for fx in chosen:
        make(fx)
    (OUT / "VERSIONS.txt").write_text(
        f"made by tests/make_family_fixtures.py with transformers "
        f"{transformers.__version__}, torch {torch.__version__}\n"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
