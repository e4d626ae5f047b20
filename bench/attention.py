"""Time and peak memory of every attention implementation that runs here.

    python bench/attention.py            # seq 128..8192, head_dim 32 and 64, heads 12
    python bench/attention.py --quick    # a small sweep
    python bench/attention.py --impls reference,blockwise --seqs 2048,8192
    python bench/attention.py --masks    # block skipping: packed rows and windows

Peak memory is XLA's compiled memory analysis of each jitted call: temp + output
bytes (inputs excluded), the same measure on every platform. Time is the best of
--repeats runs after a warm-up. On GPU and TPU it also prints achieved TFLOP/s
against the chip's dense bfloat16 peak. Never run as a test; results go in
BENCHMARKS.md.
"""

import argparse
import pathlib
import statistics
import subprocess
import sys
import time

import jax
import jax.numpy as jnp

# Run as a script from anywhere: the repository root holds the `kernels` package.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from kernels.attention import attention, available_impls  # noqa: E402

# Dense bfloat16 TFLOP/s per chip from vendor spec sheets, matched by the longest
# name contained in `device.device_kind`.
PEAK_TFLOPS = {
    "TPU v4": 275,
    "TPU v5 lite": 197,
    "TPU v5e": 197,
    "TPU v5": 459,
    "TPU v5p": 459,
    "TPU v6 lite": 918,
    "TPU v6e": 918,
    "A100": 312,
    "H100": 989,
    "H100 PCIe": 756,
    "H200": 989,
    "B200": 2250,
    "L4": 121,
}

# What the issue asks of the kernels on CPU, relative to `reference`.
MEMORY_TARGET_SEQ, MEMORY_TARGET_RATIO = 8192, 1 / 8
TIME_TARGET_MIN_SEQ, TIME_TARGET_RATIO = 2048, 1.5


def chip_peak(device) -> float | None:
    names = [name for name in PEAK_TFLOPS if name in device.device_kind]
    return PEAK_TFLOPS[max(names, key=len)] if names else None


def measure(impl: str, batch: int, seq: int, heads: int, head_dim: int, dtype, repeats: int):
    """(seconds, peak bytes) for one configuration."""
    keys = jax.random.split(jax.random.key(seq * 1000 + head_dim), 3)
    q, k, v = (jax.random.normal(key, (batch, seq, heads, head_dim), dtype) for key in keys)
    lengths = jnp.full((batch,), seq, jnp.int32)
    compiled = jax.jit(lambda q, k, v, l: attention(q, k, v, kv_lengths=l, impl=impl)).lower(q, k, v, lengths).compile()
    memory = compiled.memory_analysis()
    peak = memory.temp_size_in_bytes + memory.output_size_in_bytes
    compiled(q, k, v, lengths).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        compiled(q, k, v, lengths).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return best, peak


# --masks: what each row holds. "one sequence" fills the row (segment ids all 1);
# "packed N" holds sequences of N tokens back to back; "window W" is one sequence
# seen through a sliding window of W; "causal" masks the keys after each query (a
# decoder run as an encoder), alone or with packing.
MASK_CASES = {
    "one sequence": dict(sequence=None, window=None, causal=False),
    "packed 512": dict(sequence=512, window=None, causal=False),
    "packed 128": dict(sequence=128, window=None, causal=False),
    "window 128": dict(sequence=None, window=128, causal=False),
    "window 64": dict(sequence=None, window=64, causal=False),
    "causal": dict(sequence=None, window=None, causal=True),
    "causal, packed 512": dict(sequence=512, window=None, causal=True),
}


def cpu_name() -> str:
    """lscpu's model name and the ISA flags that decide matmul speed."""
    info = dict(
        line.split(":", 1)
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
        if ":" in line
    )
    present = info.get("Flags", "").split()
    flags = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16") if f in present]
    return f"{info.get('Model name', '?').strip()} ({' '.join(flags)}), {info.get('CPU(s)', '?').strip()} CPUs"


def measure_masks(impl: str, batch: int, seq: int, heads: int, head_dim: int, dtype, rounds: int) -> dict:
    """{case: [seconds per round]}: every case of MASK_CASES timed once per round,
    in turn, so that load from other processes falls on all of them alike."""
    keys = jax.random.split(jax.random.key(seq), 3)
    q, k, v = (jax.random.normal(key, (batch, seq, heads, head_dim), dtype) for key in keys)
    calls = {}
    for case, mask in MASK_CASES.items():
        sequence = mask["sequence"] or seq
        segments = jnp.broadcast_to(1 + jnp.arange(seq, dtype=jnp.int32) // sequence, (batch, seq))
        fn = jax.jit(
            lambda q, k, v, s, window=mask["window"], causal=mask["causal"]: attention(
                q, k, v, segment_ids=s, window=window, causal=causal, impl=impl
            )
        )
        compiled = fn.lower(q, k, v, segments).compile()
        compiled(q, k, v, segments).block_until_ready()
        calls[case] = lambda compiled=compiled, segments=segments: compiled(q, k, v, segments).block_until_ready()
    times = {case: [] for case in calls}
    for _ in range(rounds):
        for case, call in calls.items():
            start = time.perf_counter()
            call()
            times[case].append(time.perf_counter() - start)
    return times


def main_masks(args, impls, dtype) -> None:
    device = cpu_name() if jax.default_backend() == "cpu" else jax.devices()[0].device_kind
    head_dim = int(args.head_dims.split(",")[-1])
    print(
        f"# block skipping, {time.strftime('%Y-%m-%d')}, {device}, {dtype.name}, batch {args.batch}, "
        f"heads {args.heads}, head_dim {head_dim}"
    )
    print(f"# {args.repeats} rounds, cases alternating within each round; x one seq: median of the per-round")
    print(
        "# ratios to 'one sequence' [min-max]; ideal: sequence/seq when packed, about (block_q + 2 window)/seq, "
        "about (1 + block_q/seq)/2 causal"
    )
    print()
    print("| impl | seq | case | median ms | x one seq | spread |")
    print("|---|---:|---|---:|---:|---|")
    for impl in impls:
        for seq in map(int, args.seqs.split(",")):
            times = measure_masks(impl, args.batch, seq, args.heads, head_dim, dtype, args.repeats)
            full = times["one sequence"]
            for case, seconds in times.items():
                ratios = [t / f for t, f in zip(seconds, full)]
                print(
                    f"| {impl} | {seq} | {case} | {statistics.median(seconds) * 1e3:.1f} | "
                    f"{statistics.median(ratios):.3f} | {min(ratios):.3f}-{max(ratios):.3f} |",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="seq 128, 512, 2048; head_dim 64; 2 repeats")
    parser.add_argument("--impls", help="comma-separated (default: every available one)")
    parser.add_argument("--seqs", default="128,256,512,1024,2048,4096,8192")
    parser.add_argument("--head-dims", default="32,64")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dtype", help="default: float32 on CPU, bfloat16 on accelerators")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--masks",
        action="store_true",
        help="time packed rows, windows and causal masks against one sequence (default seqs 2048,4096,8192, "
        "head_dim 64, impl blockwise, 5 rounds)",
    )
    args = parser.parse_args()
    if args.quick:
        args.seqs, args.head_dims, args.repeats = "128,512,2048", "64", 2
    if args.masks:
        if "--seqs" not in sys.argv:
            args.seqs = "2048,4096,8192"
        if "--repeats" not in sys.argv:
            args.repeats = 5
        dtype = jnp.dtype(args.dtype or ("float32" if jax.default_backend() == "cpu" else "bfloat16"))
        main_masks(args, args.impls.split(",") if args.impls else ["blockwise"], dtype)
        return

    device = jax.devices()[0]
    platform = jax.default_backend()
    dtype = jnp.dtype(args.dtype or ("float32" if platform == "cpu" else "bfloat16"))
    impls = args.impls.split(",") if args.impls else available_impls()
    if "reference" not in impls:
        impls = ["reference", *impls]  # every ratio is against it
    peak = chip_peak(device)
    print(f"# {device.device_kind} ({platform}), {dtype.name}, batch {args.batch}, heads {args.heads}")
    print("# memory: compiled memory_analysis() temp + output bytes of the jitted call (inputs excluded)")
    print(f"# time: best of {args.repeats} after warm-up; x ref: ratio to `reference` at the same shape")
    print("# TFLOP/s: 4 * batch * heads * seq^2 * head_dim / time")
    if peak:
        print(f"# peak: {peak} TFLOP/s dense bfloat16 ({device.device_kind})")
    print()
    header = "| impl | head_dim | seq | time ms | time x ref | peak MiB | mem x ref | TFLOP/s |"
    print(header + (" % peak |" if peak else ""))
    print("|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if peak else ""))

    results = {}
    for head_dim in map(int, args.head_dims.split(",")):
        for seq in map(int, args.seqs.split(",")):
            for impl in impls:
                try:
                    seconds, peak_bytes = measure(impl, args.batch, seq, args.heads, head_dim, dtype, args.repeats)
                except Exception as error:  # a refused impl or an out-of-memory: report and go on
                    print(f"| {impl} | {head_dim} | {seq} | {type(error).__name__}: {str(error)[:100]} |", flush=True)
                    continue
                results[impl, head_dim, seq] = seconds, peak_bytes
                ref_seconds, ref_bytes = results.get(("reference", head_dim, seq), (None, None))
                tflops = 4 * args.batch * args.heads * seq * seq * head_dim / seconds / 1e12
                row = [
                    impl,
                    head_dim,
                    seq,
                    f"{seconds * 1e3:.1f}",
                    f"{seconds / ref_seconds:.2f}" if ref_seconds else "-",
                    f"{peak_bytes / 2**20:.1f}",
                    f"{peak_bytes / ref_bytes:.3f}" if ref_bytes else "-",
                    f"{tflops:.2f}",
                ]
                if peak:
                    row.append(f"{100 * tflops / peak:.1f}")
                print("| " + " | ".join(map(str, row)) + " |", flush=True)

    if platform == "cpu":
        print()
        print("# CPU targets (blockwise, pallas vs reference)")
        for impl in ("blockwise", "pallas"):
            for (name, head_dim, seq), (seconds, peak_bytes) in sorted(results.items()):
                if name != impl or ("reference", head_dim, seq) not in results:
                    continue
                ref_seconds, ref_bytes = results["reference", head_dim, seq]
                if seq == MEMORY_TARGET_SEQ:
                    ok = peak_bytes <= MEMORY_TARGET_RATIO * ref_bytes
                    print(
                        f"{'PASS' if ok else 'FAIL'} {impl} head_dim {head_dim} seq {seq}: "
                        f"memory {peak_bytes / ref_bytes:.3f} of reference (target <= {MEMORY_TARGET_RATIO:.3f})"
                    )
                if seq >= TIME_TARGET_MIN_SEQ:
                    ok = seconds <= TIME_TARGET_RATIO * ref_seconds
                    print(
                        f"{'PASS' if ok else 'FAIL'} {impl} head_dim {head_dim} seq {seq}: "
                        f"time {seconds / ref_seconds:.2f}x reference (target <= {TIME_TARGET_RATIO}x)"
                    )


if __name__ == "__main__":
    main()
