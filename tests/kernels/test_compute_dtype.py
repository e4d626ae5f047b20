"""The compute-dtype dispatch: float32 always as asked, bfloat16 only where it can pay.

Other CPUs than this machine's are given as their /proc/cpuinfo text, and
whether the oneDNN kernel is there as the answer of `kernel_missing`."""

from pathlib import Path

import pytest

from kernels.compute_dtype import activation_dtype, choose_dtype, cpu_flags

ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx fma avx2 bmi2 vaes vpclmulqdq rdpid fsrm
"""
SAPPHIRE_RAPIDS = """processor\t: 0
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse2 avx2 fma avx512f avx512_vnni avx512_bf16 amx_tile amx_bf16
processor\t: 1
flags\t\t: fpu
"""
GRAVITON3 = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd aes sha1 sha2 crc32 atomics fphp asimdhp sve svebf16 i8mm bf16
"""


def test_flags_are_read_from_the_first_flags_or_features_line():
    assert "avx2" in cpu_flags(ZEN3) and "avx512_bf16" not in cpu_flags(ZEN3)
    assert {"avx512_bf16", "amx_bf16"} <= cpu_flags(SAPPHIRE_RAPIDS)
    assert "bf16" in cpu_flags(GRAVITON3)
    assert cpu_flags("processor\t: 0\nmodel name\t: something\n") == frozenset()


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="no /proc/cpuinfo (not Linux)")
def test_this_machines_flags_are_read():
    text = Path("/proc/cpuinfo").read_text()
    assert cpu_flags() == cpu_flags(text) and cpu_flags()


@pytest.mark.parametrize("cpuinfo", [ZEN3, SAPPHIRE_RAPIDS, GRAVITON3])
@pytest.mark.parametrize("platform", ["cpu", "gpu", "tpu"])
def test_float32_asked_is_float32_everywhere(platform, cpuinfo):
    choice = choose_dtype("float32", platform, cpu_flags(cpuinfo))
    assert choice.dtype == "float32" and not choice.changed


def test_bfloat16_on_a_cpu_without_bfloat16_dots_runs_float32_and_says_why():
    choice = choose_dtype("bfloat16", "cpu", cpu_flags(ZEN3))
    assert choice.dtype == "float32" and choice.changed
    assert "no bfloat16 dot instructions (avx512_bf16, amx_bf16, bf16)" in choice.reason


def kernel_there():
    return None


@pytest.mark.parametrize(("cpuinfo", "named"), [(SAPPHIRE_RAPIDS, "avx512_bf16, amx_bf16"), (GRAVITON3, "bf16")])
def test_bfloat16_on_a_cpu_with_bfloat16_dots_and_the_kernel_runs_bfloat16(cpuinfo, named):
    choice = choose_dtype("bfloat16", "cpu", cpu_flags(cpuinfo), kernel_there)
    assert choice.dtype == "bfloat16" and not choice.changed
    assert choice.reason == (
        f"bfloat16 as asked: this CPU has {named}; matmuls in bfloat16 on oneDNN, activations in float32"
    )


def test_bfloat16_on_a_cpu_with_bfloat16_dots_but_no_kernel_runs_bfloat16_on_xlas_dots():
    # XLA's bfloat16 dots with a float32 result pay too (1.47-1.54x of float32 on a Zen 4, BENCHMARKS.md).
    choice = choose_dtype("bfloat16", "cpu", cpu_flags(SAPPHIRE_RAPIDS), lambda: "the oneDNN kernel is not built")
    assert choice.dtype == "bfloat16" and not choice.changed
    assert choice.reason == (
        "bfloat16 as asked: this CPU has avx512_bf16, amx_bf16; matmuls in bfloat16 on XLA's dots "
        "(the oneDNN kernel is not built), activations in float32"
    )


def test_the_kernel_is_looked_for_only_where_it_would_run():
    def no_looking():
        raise AssertionError("looked for the kernel")

    assert choose_dtype("bfloat16", "cpu", cpu_flags(ZEN3), no_looking).dtype == "float32"
    assert choose_dtype("bfloat16", "tpu", cpu_flags(SAPPHIRE_RAPIDS), no_looking).dtype == "bfloat16"
    assert choose_dtype("float32", "cpu", cpu_flags(SAPPHIRE_RAPIDS), no_looking).dtype == "float32"


@pytest.mark.parametrize(("dtype", "platform", "activations"), [
    ("bfloat16", "cpu", "float32"), ("float32", "cpu", "float32"), ("bfloat16", "tpu", "bfloat16"),
    ("bfloat16", "gpu", "bfloat16"), ("float32", "gpu", "float32"),
])  # fmt: skip
def test_activations_are_float32_on_a_cpu_and_the_compute_dtype_elsewhere(dtype, platform, activations):
    assert activation_dtype(dtype, platform) == activations


@pytest.mark.parametrize("platform", ["gpu", "tpu"])
def test_bfloat16_on_an_accelerator_runs_bfloat16_whatever_the_host_cpu(platform):
    assert choose_dtype("bfloat16", platform, cpu_flags(ZEN3)).dtype == "bfloat16"


def test_an_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="dtype must be one of float32, bfloat16, got 'float16'"):
        choose_dtype("float16", "cpu")
