"""Throughput of every encoder family at long windows, and the encoder's peak memory at 8,192
tokens with blockwise against reference attention.

    python bench/families.py                       # windows 512, 2048, 8192; 2 rounds
    python bench/families.py --windows 512,2048 --rounds 3 --layers 4
    python bench/families.py --dtypes float32,bfloat16   # each dtype's rate, and their ratio

Each family runs a base-size configuration (the config.json of a published
model, read by `kernels.encoders.config_from_hf`) with random weights from
`init_params`: no download, no torch. A call encodes --tokens tokens: full rows
of one window each (8192 tokens = 16 rows at 512, 1 row at 8192), every token
real. Each dtype runs as the encoder runs it (`kernels.compute_dtype`:
bfloat16 weights, and bfloat16 activations except on a CPU). Rounds alternate
families, dtypes and windows so that load from other work on a shared machine
falls on all of them alike; each figure is the median over rounds with its
spread, and the per-round ratios to the family's own rate at the first window,
and of each dtype to the first, are quoted too. A window longer than a model's
positions is skipped (`check_window`), as the job would refuse it.

Peak memory is XLA's compiled memory analysis of the whole forward pass at the
largest window, one row, in the first dtype: temp (activations) and temp +
arguments + output (weights included). Nothing is run for it, so reference
attention's [N, T, T] scores at 8,192 cost no memory here. Never run as a
test; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

# Run as a script from anywhere: the repository root holds the `kernels` package.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from machine import cpu_description  # noqa: E402  (bench/machine.py)

from kernels import encoders  # noqa: E402
from kernels.compute_dtype import DTYPES, activation_dtype  # noqa: E402

# Published configs (the fields that shape the computation), one per family.
CONFIGS = {
    "bert (bert-base-uncased)": {
        "model_type": "bert",
        "vocab_size": 30522,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "max_position_embeddings": 512,
        "hidden_act": "gelu",
    },
    "distilbert (msmarco-distilbert-base-v4)": {
        "model_type": "distilbert",
        "vocab_size": 30522,
        "dim": 768,
        "n_layers": 6,
        "n_heads": 12,
        "hidden_dim": 3072,
        "max_position_embeddings": 512,
        "activation": "gelu",
        "sinusoidal_pos_embds": False,
    },
    # bge-m3 is XLM-RoBERTa large (1024 x 24); base dims with its 8,194 positions keep the rounds short.
    "xlm-roberta (base, bge-m3's positions)": {
        "model_type": "xlm-roberta",
        "vocab_size": 250002,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "max_position_embeddings": 8194,
        "pad_token_id": 1,
        "type_vocab_size": 1,
        "hidden_act": "gelu",
    },
    # Its T5-style relative position bias runs on reference or blockwise attention only (kernels.attention).
    "mpnet (all-mpnet-base-v2)": {
        "model_type": "mpnet",
        "vocab_size": 30527,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "max_position_embeddings": 514,
        "relative_attention_num_buckets": 32,
        "layer_norm_eps": 1e-05,
        "hidden_act": "gelu",
    },
    "t5 (sentence-t5-base)": {
        "model_type": "t5",
        "architectures": ["T5EncoderModel"],
        "vocab_size": 32128,
        "d_model": 768,
        "d_kv": 64,
        "num_heads": 12,
        "d_ff": 3072,
        "num_layers": 12,
        "feed_forward_proj": "relu",
        "layer_norm_epsilon": 1e-06,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
        "n_positions": 512,
    },
    # Causal, grouped-query attention (8 K/V heads for 16 query heads, 128 wide).
    "qwen3 (Qwen3-Embedding-0.6B)": {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "vocab_size": 151669,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000,
        "rope_scaling": None,
        "attention_bias": False,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": 28,
        "hidden_act": "silu",
        "tie_word_embeddings": True,
    },
    # Causal, every layer within sliding_window 4096 (the 4095 tokens before), grouped-query attention (8 K/V heads
    # for 32 query heads, 128 wide), no biases; pooled by the </s> its tokenizer appends.
    "mistral (e5-mistral-7b-instruct)": {
        "model_type": "mistral",
        "architectures": ["MistralModel"],
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "sliding_window": 4096,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
    },
    # Causal (HF's Qwen2Model, whatever the model card says of its attention), full attention (use_sliding_window
    # false), grouped-query attention (2 K/V heads for 12 query heads, 128 wide), biases on q, k and v.
    "qwen2 (gte-Qwen2-1.5B-instruct)": {
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "vocab_size": 151646,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "use_sliding_window": False,
        "sliding_window": 131072,
        "max_window_layers": 21,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
    },
    # Bidirectional (use_bidirectional_attention), 5 sliding layers (256 tokens either side: sliding_window // 2)
    # then 1 full, grouped-query attention (1 K/V head for 3 query heads, 256 wide over hidden 768).
    "gemma3 (EmbeddingGemma-300m)": {
        "model_type": "gemma3_text",
        "architectures": ["Gemma3TextModel"],
        "vocab_size": 262144,
        "hidden_size": 768,
        "intermediate_size": 1152,
        "num_hidden_layers": 24,
        "num_attention_heads": 3,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": None,
        "sliding_window": 512,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 4,
        "query_pre_attn_scalar": 256,
        "attention_bias": False,
        "attn_logit_softcapping": None,
        "final_logit_softcapping": None,
        "hidden_activation": "gelu_pytorch_tanh",
        "use_bidirectional_attention": True,
    },
    "modernbert (ModernBERT-base)": {
        "model_type": "modernbert",
        "vocab_size": 50368,
        "hidden_size": 768,
        "num_hidden_layers": 22,
        "num_attention_heads": 12,
        "intermediate_size": 1152,
        "max_position_embeddings": 8192,
        "global_attn_every_n_layers": 3,
        "local_attention": 128,
        "global_rope_theta": 160000.0,
        "local_rope_theta": 10000.0,
        "hidden_activation": "gelu",
    },
    "nomic_bert (nomic-embed-text-v1.5)": {
        "model_type": "nomic_bert",
        "vocab_size": 30528,
        "n_embd": 768,
        "n_layer": 12,
        "n_head": 12,
        "n_inner": 3072,
        "n_positions": 8192,
        "rotary_emb_base": 1000,
        "activation_function": "swiglu",
        "qkv_proj_bias": False,
        "mlp_fc1_bias": False,
        "mlp_fc2_bias": False,
        "layer_norm_epsilon": 1e-12,
    },
    "gte (gte-base-en-v1.5)": {
        "model_type": "new",
        "vocab_size": 30528,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "max_position_embeddings": 8192,
        "rope_theta": 500000.0,
        "rope_scaling": {"type": "ntk", "factor": 2.0},
        "type_vocab_size": 0,
        "hidden_act": "gelu",
    },
}
MEMORY_BOUND = 1 / 4  # blockwise peak / reference peak at the largest window


def rows(window: int, tokens: int):
    """ids, segments, positions for tokens // window full rows of one sequence each."""
    B = max(1, tokens // window)
    ids = jnp.asarray(np.random.default_rng(window).integers(5, 1000, (B, window)), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(window, dtype=jnp.int32), (B, window))
    return ids, jnp.ones((B, window), jnp.int32), positions


def compiled_forward(params, cfg, window: int, tokens: int, impl: str):
    fn = jax.jit(lambda p, i, s, q: encoders.forward(p, i, s, q, cfg, attention_impl=impl))
    return fn.lower(params, *rows(window, tokens)).compile()


def peak_bytes(params, cfg, window: int, impl: str) -> tuple[int, int]:
    """(temp, temp + arguments + output) bytes of one row at `window`."""
    memory = compiled_forward(params, cfg, window, window, impl).memory_analysis()
    temp = memory.temp_size_in_bytes
    return temp, temp + memory.argument_size_in_bytes + memory.output_size_in_bytes


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} [{min(values):,.0f}-{max(values):,.0f}]"


def ratio_spread(numerators: list[float], denominators: list[float]) -> str:
    per_round = [a / b for a, b in zip(numerators, denominators)]
    return f"{statistics.median(per_round):.2f} [{min(per_round):.2f}-{max(per_round):.2f}]"


def params_in(cfg, dtype: str):
    """Random weights cast as the encoder casts them for `dtype` on this platform."""
    activations = activation_dtype(dtype, jax.default_backend())
    return jax.device_put(encoders.cast_params(encoders.init_params(cfg), jnp.dtype(dtype), jnp.dtype(activations)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", default="512,2048,8192")
    parser.add_argument("--tokens", type=int, default=8192, help="tokens per timed call")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--layers", type=int, help="cut every model to this many layers (default: its own)")
    parser.add_argument("--families", help="comma-separated substrings of the family names (default: all)")
    parser.add_argument("--dtypes", default="float32", help=f"comma-separated, of {', '.join(DTYPES)}")
    args = parser.parse_args()
    windows = [int(w) for w in args.windows.split(",")]
    dtypes = args.dtypes.split(",")
    if not set(dtypes) <= set(DTYPES):
        parser.error(f"--dtypes: each of {', '.join(DTYPES)}, got {args.dtypes!r}")
    chosen = {
        name: config
        for name, config in CONFIGS.items()
        if not args.families or any(f in name for f in args.families.split(","))
    }

    print(
        f"# bench/families.py, {datetime.date.today()}, {cpu_description()}, jax {jax.__version__}, "
        f"{jax.devices()[0].platform} ({jax.devices()[0].device_kind}), {', '.join(dtypes)}, attention 'auto'"
    )
    models, calls = {}, {}
    for name, config in chosen.items():
        cfg = encoders.config_from_hf(config)
        if args.layers:
            cfg = dataclasses.replace(cfg, num_layers=args.layers, layer_kinds=cfg.layer_kinds[: args.layers])
        for dtype in dtypes:
            models[name, dtype] = (cfg, params_in(cfg, dtype))
            for window in windows:
                try:
                    encoders.check_window(cfg, window)
                except encoders.WindowTooLong:
                    continue
                start = time.perf_counter()
                calls[name, dtype, window] = (
                    compiled_forward(models[name, dtype][1], cfg, window, args.tokens, "auto"),
                    rows(window, args.tokens),
                )
                elapsed = time.perf_counter() - start
                print(f"compiled {name} {dtype} at {window} in {elapsed:.1f}s", file=sys.stderr)

    largest = max(windows)
    print(f"\n## peak memory of the forward pass at {largest} tokens, one row (XLA memory analysis), MiB")
    print(
        "| family | blockwise temp | reference temp | temp ratio | blockwise total | reference total "
        f"| total ratio | <= {MEMORY_BOUND:g} |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name in chosen:
        cfg, params = models[name, dtypes[0]]
        try:
            encoders.check_window(cfg, largest)
        except encoders.WindowTooLong:
            continue
        (bt, btot), (rt, rtot) = (peak_bytes(params, cfg, largest, impl) for impl in ("blockwise", "reference"))
        mib = lambda b: f"{b / 2**20:,.0f}"  # noqa: E731
        print(
            f"| {name} | {mib(bt)} | {mib(rt)} | {bt / rt:.3f} | {mib(btot)} | {mib(rtot)} | {btot / rtot:.3f} "
            f"| {'yes' if btot / rtot <= MEMORY_BOUND else 'NO'} |",
            flush=True,
        )

    # Compiled ahead of time, so no round compiles; every round counts.
    rates: dict[tuple[str, str, int], list[float]] = {key: [] for key in calls}
    for round_ in range(args.rounds):
        for (name, dtype, window), (fn, batch) in calls.items():
            params = models[name, dtype][1]
            start = time.perf_counter()
            fn(params, *batch).block_until_ready()
            seconds = time.perf_counter() - start
            rates[name, dtype, window].append(batch[0].size / seconds)
            print(f"round {round_} {name} {dtype} {window}: {seconds:.2f}s", file=sys.stderr)

    print(f"\n## tokens/s, {args.tokens} tokens per call, median [min-max] of {args.rounds} rounds")
    print(
        "| family | dtype | "
        + " | ".join(f"window {w}" for w in windows)
        + " | "
        + " | ".join(f"{w} / {windows[0]}" for w in windows[1:])
        + " |"
    )
    print("|---|---|" + "---:|" * (2 * len(windows) - 1))
    for name in chosen:
        for dtype in dtypes:
            by_window = {w: rates[name, dtype, w] for w in windows if (name, dtype, w) in rates}
            cells = [spread(by_window[w]) if w in by_window else "beyond its positions" for w in windows]
            first = by_window.get(windows[0])
            ratios = [ratio_spread(by_window[w], first) if w in by_window and first else "-" for w in windows[1:]]
            print(f"| {name} | {dtype} | " + " | ".join(cells + ratios) + " |")

    for dtype in dtypes[1:]:
        print(f"\n## {dtype} / {dtypes[0]}, tokens/s per round, median [min-max]")
        print("| family | " + " | ".join(f"window {w}" for w in windows) + " |")
        print("|---|" + "---:|" * len(windows))
        for name in chosen:
            pairs = [(rates.get((name, dtype, w)), rates.get((name, dtypes[0], w))) for w in windows]
            print(f"| {name} | " + " | ".join(ratio_spread(*pair) if pair[0] else "-" for pair in pairs) + " |")


if __name__ == "__main__":
    main()
