"""Where an encoder call's time goes on CPU: matmuls, attention, layer norm, GELU, host work.

    .venv/bin/python bench/profile_encoder.py [--batch-size 8] [--seq 256] [--texts 128]

Traces `Encoder.encode_ids` over texts of exactly `--seq` tokens with
jax.profiler, with XLA's per-thunk trace events turned on. Each thunk (one
fused kernel of the compiled program) is put in a category by the source
lines it was traced from (the compiled HLO's stack frames): code under
kernels/attention is attention, `_layer_norm` is layer norm, the activation
lambda is GELU, other dots in the layer are the dense matmuls. Thunk times
are summed over XLA's threads, so the split is of busy thread time. Host work
(batch packing and device_put) is timed on its own.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile
import time
from pathlib import Path

# Per-thunk trace events; must be set before JAX initialises its CPU client.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true").strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from machine import cpu_description  # noqa: E402  (bench/machine.py)

from pipeline.encode.batching import make_batches  # noqa: E402
from pipeline.encode.encoder import Encoder, EncoderConfig  # noqa: E402
from pipeline.encode.model_dir import resolve  # noqa: E402

CONTAINERS = {"while", "call", "conditional"}  # their thunks time the thunks inside them


def parse_hlo(text: str) -> dict[str, tuple[str, str, str, int | None]]:
    """Compiled HLO text -> {instruction: (opcode, op_name, body of the fusion it calls, stack frame id)}."""
    bodies: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        head = re.match(r"^(?:ENTRY )?%(\S+) \(", line)
        if head:
            current = head.group(1)
            bodies[current] = ""
        elif current:
            bodies[current] += line + "\n"
    out = {}
    for line in text.splitlines():
        m = re.match(r"\s+(?:ROOT )?%(\S+) = .*?\s([a-z][a-z0-9_-]*)\(", line)
        if not m:
            continue
        calls = re.search(r"calls=%([^\s,]+)", line)
        frame = re.search(r"stack_frame_id=(\d+)", line)
        op_name = re.search(r'op_name="([^"]*)"', line)
        body = bodies.get(calls.group(1), "") if calls else ""
        out[m.group(1)] = (
            m.group(2),
            op_name.group(1) if op_name else "",
            body,
            int(frame.group(1)) if frame else None,
        )
    return out


def parse_frames(text: str) -> dict[int, list[tuple[str, str, int]]]:
    """Stack frame id -> [(file, function, line)], innermost first."""
    section = None
    files, functions, locations, frames = {}, {}, {}, {}
    for line in text.splitlines():
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            section = line
            continue
        m = re.match(r"^(\d+) (.*)$", line)
        if not m or section is None:
            continue
        key, rest = int(m.group(1)), m.group(2)
        if section in ("FileNames", "FunctionNames"):
            (files if section == "FileNames" else functions)[key] = rest.strip('"')
        elif section == "FileLocations":
            f = dict(re.findall(r"(\w+)=(\d+)", rest))
            locations[key] = (files[int(f["file_name_id"])], functions[int(f["function_name_id"])], int(f["line"]))
        else:
            f = dict(re.findall(r"(\w+)=(\d+)", rest))
            frames[key] = (int(f["file_location_id"]), int(f.get("parent_frame_id", 0)))

    def chain(frame_id: int) -> list[tuple[str, str, int]]:
        out, seen = [], set()
        while frame_id in frames and frame_id not in seen:
            seen.add(frame_id)
            location, parent = frames[frame_id]
            out.append(locations[location])
            frame_id = parent
        return out

    return {frame_id: chain(frame_id) for frame_id in frames}


# Helpers whose fusions XLA traces to the helper's own frames alone: such a fusion is filed by the rest of
# its body (the online softmax's exp, for `truncate`).
HELPERS = {("kernels/bfloat16_bits.py", "truncate")}


def _helper(entry: tuple[str, str, int]) -> bool:
    return any(entry[0].endswith(f) and entry[1] == fn for f, fn in HELPERS)


def stack_for(frame: int | None, body: str, frames: dict[int, list[tuple[str, str, int]]]) -> list:
    """The root instruction's stack or, where that lies only in HELPERS, the stacks of the other
    instructions in the fusion's body."""
    stack = frames.get(frame, [])
    if not stack or not all(map(_helper, stack)):
        return stack
    ids = {int(i) for i in re.findall(r"stack_frame_id=(\d+)", body)}
    return [entry for i in sorted(ids) for entry in frames.get(i, []) if not _helper(entry)] or stack


def category(opcode: str, op_name: str, body: str, stack: list[tuple[str, str, int]]) -> str:
    files = [f for f, _, _ in stack]
    functions = [fn for _, fn, _ in stack]
    is_dot = " dot(" in body or opcode == "dot"
    if any("kernels/attention" in f for f in files):
        return "attention: QK and PV matmuls" if is_dot else "attention: mask, softmax, layout"
    if any("kernels/dense" in f for f in files) and not is_dot:
        if opcode == "custom-call":
            return "dense matmuls on oneDNN (QKV, out, up, down)"
        return "dense: operand converts, bias, activation"
    if "_layer_norm" in functions:
        return "layer norm"
    if "<lambda>" in functions:  # the activation table's entry
        return "GELU (erf)"
    if is_dot:
        return "dense matmuls (QKV, out, up, down)"
    if "dynamic_index_in_dim" in op_name:
        return "scan: per-layer weight slices"
    if "pool" in functions:
        return "pooling"
    if "encoder_layer" in functions:
        return "bias adds, residuals, head layout"
    if "forward" in functions:
        return "embeddings"
    return "other (copies, loop control)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=int, default=None, help="rows per call (default: the platform default)")
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--texts", type=int, default=128)
    p.add_argument("--attention", default="auto")
    p.add_argument("--dtype", default="float32", help="float32 or bfloat16 (as the encoder would run it here)")
    p.add_argument("--dense", default="auto", help="the projections' implementation (kernels.dense)")
    a = p.parse_args()

    spec = resolve(None)
    enc = Encoder(spec, EncoderConfig(batch_size=a.batch_size, attention=a.attention, dtype=a.dtype, dense=a.dense))
    rng = np.random.default_rng(0)
    cls, sep = 101, 102
    ids = [[cls, *rng.integers(1000, 29000, a.seq - 2).tolist(), sep] for _ in range(a.texts)]
    first = next(make_batches(ids, enc.batching))
    placed = jax.device_put((first.ids_BT, first.segments_BT, first.positions_BT), enc._batch_shardings)
    hlo = enc._embed.lower(enc._params, *placed).compile().as_text()  # the program encode_ids runs
    enc.encode_ids(ids)  # compiles

    walls: dict[str, list[float]] = {"encode_ids": [], "host: make_batches": [], "host: device_put": []}
    cpu_times = []  # process CPU time, all threads: compute per CPU-second, whatever else runs on the machine
    for _ in range(3):
        t, cpu = time.perf_counter(), time.process_time()
        enc.encode_ids(ids)
        walls["encode_ids"].append(time.perf_counter() - t)
        cpu_times.append(time.process_time() - cpu)
        t = time.perf_counter()
        batches = list(make_batches(ids, enc.batching))
        walls["host: make_batches"].append(time.perf_counter() - t)
        t = time.perf_counter()
        jax.block_until_ready(
            [jax.device_put((b.ids_BT, b.segments_BT, b.positions_BT), enc._batch_shardings) for b in batches]
        )
        walls["host: device_put"].append(time.perf_counter() - t)

    with tempfile.TemporaryDirectory() as trace_dir:
        jax.profiler.start_trace(trace_dir)
        enc.encode_ids(ids)
        jax.profiler.stop_trace()
        (xplane,) = Path(trace_dir).rglob("*.xplane.pb")
        profile = jax.profiler.ProfileData.from_file(str(xplane))

    instructions, frames = parse_hlo(hlo), parse_frames(hlo)
    busy: collections.Counter = collections.Counter()
    per_thunk: collections.Counter = collections.Counter()
    for plane in profile.planes:
        for line in plane.lines:
            for event in line.events:
                info = instructions.get(event.name)
                if info is None or info[0] in CONTAINERS:
                    continue
                opcode, op_name, body, frame = info
                busy[category(opcode, op_name, body, stack_for(frame, body, frames))] += event.duration_ns
                per_thunk[event.name] += event.duration_ns

    tokens = a.texts * a.seq
    med = {k: sorted(v)[1] for k, v in walls.items()}
    total = sum(busy.values())
    print(f"CPU: {cpu_description()}; jax {jax.__version__}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"XLA_FLAGS: {os.environ['XLA_FLAGS']}")
    print(
        f"{a.texts} texts x {a.seq} tokens, {first.ids_BT.shape[0]} rows per call, attention={a.attention}; "
        "medians of 3"
    )
    call = med["encode_ids"]
    cpu = sorted(cpu_times)[1]
    print(
        f"  encode_ids             {call:7.3f} s  {tokens / call:8,.0f} tokens/s; "
        f"CPU time {cpu / tokens * 1e6:.0f} us/token, {cpu / call:.2f} cores busy"
    )
    for name in ("host: make_batches", "host: device_put"):
        print(f"  {name:22s} {med[name]:7.3f} s  {med[name] / call:8.1%} of encode_ids")
    print(f"thunk busy time summed over XLA threads: {total / 1e9:.3f} s for one encode_ids")
    for name, ns in busy.most_common():
        print(f"  {name:40s} {ns / 1e6:8.1f} ms {ns / total:6.1%}")
    print("top thunks:")
    for name, ns in per_thunk.most_common(12):
        opcode, op_name, body, frame = instructions[name]
        what = category(opcode, op_name, body, stack_for(frame, body, frames))
        print(f"  {name:32s} {ns / 1e6:8.1f} ms {ns / total:6.1%}  {what}  {op_name.rsplit('/', 1)[-1]}")


if __name__ == "__main__":
    main()
