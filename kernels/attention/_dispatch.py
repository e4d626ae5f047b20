"""The one place an attention implementation is chosen.

An explicitly named implementation runs or raises a clear error that names the
ones that can. `auto` picks from platform, dtype and sequence length, logs its
choice once, and falls back with a warning when its pick cannot run.
"""

import dataclasses
import logging
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from kernels.attention import _platform
from kernels.attention._blockwise import blockwise_attention
from kernels.attention._buckets import RelativeBias, RelativeBuckets
from kernels.attention._impls import IMPLS, PLATFORMS, RELATIVE_BIAS_IMPLS, runs_on
from kernels.attention._jax_shipped import cudnn_attention, tpu_flash_attention, tpu_splash_attention
from kernels.attention._pallas import pallas_attention
from kernels.attention._reference import reference_attention

log = logging.getLogger("kernels.attention")

# Up to these key lengths `auto` uses plain XLA: a fused softmax over a small score
# matrix costs no more than a kernel's tiling. CPU is measured: at batch 1
# (bench/attention.py) reference and blockwise tie up to 256 keys, but in the
# encoder at batch 8-32 and 256 keys the [B, N, T, S] score matrix leaves the
# cache and blockwise is 10-15% faster end to end, so CPU stops at 128. GPU and
# TPU are starting points until the bench has run on those chips.
SHORT_KV_SEQ = {"cpu": 128, "gpu": 256, "tpu": 512}
HALF_DTYPES = (jnp.bfloat16, jnp.float16)


@dataclasses.dataclass(frozen=True)
class Problem:
    """What the choice depends on; fixed at trace time."""

    platform: str
    dtype: np.dtype
    kv_seq: int
    head_dim: int
    segments: bool  # segment ids given (packed rows)
    window: int | None
    relative: RelativeBuckets | None  # how a relative position bias buckets distances, where one is added
    causal: bool  # a query sees no later key of its segment
    # Inside jax.shard_map with check_vma=True: q varies over some mesh axes and
    # every kernel output must say so.
    varying: bool

    def needs(self) -> list[tuple[frozenset[str], str]]:
        """What this problem asks that only some implementations take: (those implementations, what the others
        lack), for `why_not`'s refusals and the candidates of `auto`."""
        needed = []
        if self.relative is not None:
            needed.append((RELATIVE_BIAS_IMPLS, "it adds no relative position bias (MPNet's, T5's)"))
        return needed


def _no_limits(problem: Problem) -> str | None:
    return None


def _pallas_limits(problem: Problem) -> str | None:
    if problem.platform == "gpu" and problem.head_dim & (problem.head_dim - 1):
        return f"Triton needs a power-of-two head_dim, got {problem.head_dim}"
    if problem.platform == "cpu" and problem.varying:
        return "Pallas interpret mode fails under jax.shard_map(check_vma=True) (a JAX limitation); use check_vma=False"
    return None


def _tpu_kernel_limits(problem: Problem) -> str | None:
    if problem.varying:
        return (
            "JAX's TPU kernels do not declare how their output varies across the mesh; "
            "call them under jax.shard_map(check_vma=False)"
        )
    return None


def _tpu_flash_limits(problem: Problem) -> str | None:
    if problem.window is not None:
        return "JAX's TPU flash_attention has no sliding window (causal only); tpu_splash has one"
    return _tpu_kernel_limits(problem)


def _cudnn_limits(problem: Problem) -> str | None:
    if problem.segments:
        return (
            "jax.nn.dot_product_attention has no segment ids (JAX's cuDNN packed layout, q/kv offsets, is private API)"
        )
    if problem.window is not None:
        return "cuDNN's sliding window is causal (left only); the window here is two-sided"
    if problem.dtype not in HALF_DTYPES:
        return f"cuDNN flash attention takes bfloat16 or float16, got {problem.dtype.name}"
    if problem.head_dim > 128 or problem.head_dim % 8:
        return f"cuDNN needs head_dim a multiple of 8 up to 128, got {problem.head_dim}"
    return None


@dataclasses.dataclass(frozen=True)
class _Impl:
    name: str
    fn: Callable[..., jax.Array]
    platforms: frozenset[str] | None  # None: every platform
    limits: Callable[[Problem], str | None] = _no_limits

    def why_not(self, problem: Problem) -> str | None:
        if self.platforms is not None and problem.platform not in self.platforms:
            return f"needs {' or '.join(sorted(self.platforms)).upper()}, platform is {problem.platform!r}"
        for impls, lacking in problem.needs():
            if self.name not in impls:
                return f"{lacking}; {' and '.join(sorted(impls))} do"
        return self.limits(problem)


_FNS_AND_LIMITS: dict[str, tuple[Callable[..., jax.Array], Callable[[Problem], str | None]]] = {
    "reference": (reference_attention, _no_limits),
    "blockwise": (blockwise_attention, _no_limits),
    "pallas": (pallas_attention, _pallas_limits),
    "tpu_flash": (tpu_flash_attention, _tpu_flash_limits),
    "tpu_splash": (tpu_splash_attention, _tpu_kernel_limits),
    "cudnn": (cudnn_attention, _cudnn_limits),
}
_IMPLS: dict[str, _Impl] = {
    name: _Impl(name, fn, PLATFORMS[name], limits) for name, (fn, limits) in _FNS_AND_LIMITS.items()
}


def available_impls() -> list[str]:
    """Implementations that can run on the current default backend (any dtype/shape limits aside)."""
    platform = _platform.platform()
    return [name for name in IMPLS if runs_on(name, platform)]


def _auto_candidates(problem: Problem) -> list[str]:
    if problem.platform == "tpu":
        kernels = ["tpu_splash", "pallas", "blockwise"]
    elif problem.platform == "gpu":
        kernels = ["cudnn", "pallas", "blockwise"] if problem.dtype in HALF_DTYPES else ["pallas", "blockwise"]
    else:
        kernels = ["blockwise"]
    for impls, _ in problem.needs():  # only these can: no warning for the kernels that cannot
        kernels = [name for name in kernels if name in impls]
    if problem.kv_seq <= SHORT_KV_SEQ.get(problem.platform, 0):
        return ["reference", *kernels]
    return [*kernels, "reference"]


_logged: set[str] = set()
_ran: dict[Problem, str] = {}  # each problem traced in this process, and the implementation that ran it


def ran() -> list[dict]:
    """What attention ran in this process: per problem traced (platform, dtype, shape, masks), the
    implementation chosen, in the order first traced. For a run's report: `auto` names none."""
    return [
        {
            "impl": name,
            "platform": p.platform,
            "dtype": p.dtype.name,
            "kv_seq": p.kv_seq,
            "head_dim": p.head_dim,
            "packed": p.segments,
            "window": p.window,
            "relative_bias": p.relative is not None,
            "causal": p.causal,
        }
        for p, name in _ran.items()
    ]


def _log_once(level: int, message: str) -> None:
    if message not in _logged:
        _logged.add(message)
        log.log(level, message)


def _run_auto(problem: Problem, run: Callable[[str], jax.Array]) -> jax.Array:
    candidates = _auto_candidates(problem)
    masks = (
        (", segment ids" if problem.segments else "")
        + (f", window {problem.window}" if problem.window is not None else "")
        + (", relative position bias" if problem.relative is not None else "")
        + (", causal" if problem.causal else "")
    )
    where = (
        f"attention(impl='auto') on {problem.platform}, {problem.dtype.name}, "
        f"kv_seq {problem.kv_seq}, head_dim {problem.head_dim}{masks}"
    )
    for name, fallback in zip(candidates, candidates[1:]):
        reason = _IMPLS[name].why_not(problem)
        if reason is None:
            try:
                out = run(name)
            except Exception as error:  # e.g. cuDNN missing: found only when traced
                reason = f"{type(error).__name__}: {error}"
            else:
                _log_once(logging.INFO, f"{where}: using {name!r}")
                _ran[problem] = name
                return out
        _log_once(logging.WARNING, f"{where}: {name!r} cannot run ({reason}); falling back to {fallback!r}")
    # The last resort is blockwise or reference: plain XLA, it runs everywhere.
    _log_once(logging.INFO, f"{where}: using {candidates[-1]!r}")
    _ran[problem] = candidates[-1]
    return run(candidates[-1])


def _check_args(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    kv_lengths: jax.Array | None,
    segment_ids: jax.Array | None,
    window: int | None,
    relative_bias: RelativeBias | None,
) -> None:
    if q.ndim != 4 or k.shape != v.shape or k.ndim != 4:
        raise ValueError(
            f"attention wants q, k, v shaped [batch, seq, heads, head_dim] with k and v alike; "
            f"got q {q.shape}, k {k.shape}, v {v.shape}"
        )
    if (q.shape[0], q.shape[3]) != (k.shape[0], k.shape[3]):
        raise ValueError(f"q {q.shape} and k {k.shape} differ in batch or head_dim")
    if not 0 < k.shape[2] <= q.shape[2] or q.shape[2] % k.shape[2]:
        raise ValueError(
            f"k and v must have a number of heads that divides q's (grouped-query attention); "
            f"got {q.shape[2]} query heads and {k.shape[2]} key/value heads"
        )
    if not (q.dtype == k.dtype == v.dtype) or not jnp.issubdtype(q.dtype, jnp.floating):
        raise ValueError(f"q, k, v must share one floating dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if kv_lengths is not None and (
        kv_lengths.shape != (q.shape[0],) or not jnp.issubdtype(kv_lengths.dtype, jnp.integer)
    ):
        raise ValueError(
            f"kv_lengths must be integers shaped [batch] = ({q.shape[0]},); got {kv_lengths.dtype}{kv_lengths.shape}"
        )
    if segment_ids is not None:
        if q.shape[1] != k.shape[1]:
            raise ValueError(
                f"segment_ids need self-attention (q_seq == kv_seq); got q_seq {q.shape[1]}, kv_seq {k.shape[1]}"
            )
        if segment_ids.shape != q.shape[:2] or not jnp.issubdtype(segment_ids.dtype, jnp.integer):
            raise ValueError(
                f"segment_ids must be integers shaped [batch, seq] = {q.shape[:2]}; "
                f"got {segment_ids.dtype}{segment_ids.shape}"
            )
    if window is not None and (isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 0):
        raise ValueError(f"window must be a Python int >= 0 or None; got {window!r}")
    if relative_bias is not None and (
        not isinstance(relative_bias, RelativeBias)
        or not isinstance(relative_bias.buckets, RelativeBuckets)
        or jnp.shape(relative_bias.table_NR) != (q.shape[2], relative_bias.buckets.num_buckets)
    ):
        raise ValueError(
            f"relative_bias must be a RelativeBias of a table [heads, num_buckets] and RelativeBuckets, "
            f"{q.shape[2]} heads here; got {relative_bias!r:.200}"
        )


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    kv_lengths: jax.Array | None = None,
    segment_ids: jax.Array | None = None,
    window: int | None = None,
    relative_bias: RelativeBias | None = None,
    causal: bool = False,
    impl: str = "auto",
    scale: float | None = None,
) -> jax.Array:
    """Softmax attention, 'BTNH,BSKH,BSKH->BTNH', in q's dtype.

    q is [batch, q_seq, N heads, head_dim]; k and v are [batch, kv_seq, K heads,
    head_dim] with K dividing N. K = N is multi-head attention; K < N grouped-query
    attention (multi-query with K = 1): query head n attends with key/value head
    n // (N // K), each K/V head serving a contiguous group of N // K query heads
    (transformers' `repeat_kv` order, jax.nn.dot_product_attention's). No
    implementation repeats k and v for that but `tpu_flash`, JAX's TPU
    flash_attention, which takes one head count. The output has q's heads.

    kv_lengths [batch] marks padding: keys at positions >= length get no weight,
    and a row with length 0 comes out as zeros. scale defaults to 1/sqrt(head_dim).

    segment_ids [batch, seq] (self-attention only) packs several sequences into
    a row: query t sees key s only if their ids are equal (any ints; packed rows
    number their sequences 1, 2, ... in order and give the padding tail 0, which
    lets kernels skip blocks). window >= 0: query t sees key s only if
    |t - s| <= window. All restrictions combine; a query that sees no key comes
    out as zeros.

    relative_bias (`RelativeBias`: a table [N, num_buckets], per query head, and its `RelativeBuckets`) adds
    table[n, bucket(s - t)] to the scaled score of query t and key s, in row positions (MPNet's T5-style
    bias); reference, blockwise and pallas take it.

    causal: query t sees no key s > t (row positions; with segment ids, the earlier tokens of its own
    sequence, which packing lays out in row order), as a decoder run as an encoder attends (Qwen3). Every
    implementation takes it.

    impl is "auto" or one of `IMPLS`; see `available_impls()`.
    Traceable under `jax.jit` and `jax.shard_map` (the platform is read at trace
    time).
    """
    kv_lengths = None if kv_lengths is None else jnp.asarray(kv_lengths)
    segment_ids = None if segment_ids is None else jnp.asarray(segment_ids)
    _check_args(q, k, v, kv_lengths, segment_ids, window, relative_bias)
    batch, kv_seq, _, head_dim = k.shape
    kv_lengths = jnp.full((batch,), kv_seq, jnp.int32) if kv_lengths is None else kv_lengths.astype(jnp.int32)
    segment_ids = None if segment_ids is None else segment_ids.astype(jnp.int32)
    # A window as wide as the row masks nothing: no window, so that kernels without
    # one (tpu_flash, cudnn) can run it.
    window = None if window is None or window >= max(q.shape[1], kv_seq) else int(window)
    scale = float(head_dim**-0.5 if scale is None else scale)
    varying = bool(jax.typeof(q).manual_axis_type.varying)
    relative = None if relative_bias is None else relative_bias.buckets
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be a bool; got {causal!r}")
    problem = Problem(
        _platform.platform(),
        np.dtype(q.dtype),
        kv_seq,
        head_dim,
        segment_ids is not None,
        window,
        relative,
        causal,
        varying,
    )
    # Only to the implementations that take it: `why_not` refuses it to the others.
    extra = {} if relative_bias is None else {"bias": relative_bias}

    def run(name: str) -> jax.Array:
        return _IMPLS[name].fn(q, k, v, kv_lengths, segment_ids, scale=scale, window=window, causal=causal, **extra)

    if impl == "auto":
        return _run_auto(problem, run)
    if impl not in _IMPLS:
        raise ValueError(f"unknown attention impl {impl!r}; known: auto, {', '.join(IMPLS)}")
    reason = _IMPLS[impl].why_not(problem)
    if reason is not None:
        runnable = [name for name, candidate in _IMPLS.items() if candidate.why_not(problem) is None]
        raise ValueError(
            f"attention impl {impl!r} cannot run here: {reason}. Can run here: {', '.join(runnable)} (or 'auto')."
        )
    _ran[problem] = impl
    return run(impl)
