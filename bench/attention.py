"""Time and peak memory of every attention implementation that runs here.

    python bench/attention.py            # seq 128..8192, head_dim 32 and 64, heads 12
    python bench/attention.py --quick    # a small sweep
    python bench/attention.py --impls reference,blockwise --seqs 2048,8192

Peak memory is XLA's compiled memory analysis of each jitted call: temp + output
bytes (inputs excluded), the same measure on every platform. Time is the best of
--repeats runs after a warm-up. On GPU and TPU it also prints achieved TFLOP/s
against the chip's dense bfloat16 peak. Never run as a test; results go in
BENCHMARKS.md.
"""

import argparse
import pathlib
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
    args = parser.parse_args()
    if args.quick:
        args.seqs, args.head_dims, args.repeats = "128,512,2048", "64", 2

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
                    print(f"{'PASS' if ok else 'FAIL'} {impl} head_dim {head_dim} seq {seq}: "
                          f"memory {peak_bytes / ref_bytes:.3f} of reference (target <= {MEMORY_TARGET_RATIO:.3f})")
                if seq >= TIME_TARGET_MIN_SEQ:
                    ok = seconds <= TIME_TARGET_RATIO * ref_seconds
                    print(f"{'PASS' if ok else 'FAIL'} {impl} head_dim {head_dim} seq {seq}: "
                          f"time {seconds / ref_seconds:.2f}x reference (target <= {TIME_TARGET_RATIO}x)")


if __name__ == "__main__":
    main()
