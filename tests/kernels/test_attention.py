"""The attention contract, run against every implementation that can run here.

On CPU: reference, blockwise and pallas (Pallas interpret mode) natively, plus
pallas, tpu_flash and tpu_splash under TPU interpret mode. Every case is checked
against attention computed in float64 numpy from the same (dtype-rounded) inputs.
"""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.attention import (
    RELATIVE_BIAS_IMPLS,
    RelativeBias,
    RelativeBuckets,
    attention,
    available_impls,
    tpu_interpret_mode,
)
from kernels.attention._blockwise import BlockwiseBlocks, blockwise_attention
from kernels.attention._masking import key_block_ranges
from kernels.attention._pallas import PallasBlocks, pallas_attention

# Max |out - float64| allowed is atol + rtol * |float64|, outputs being O(1).
# float32: 3e-6, ~25 ulps at 1.0 (eps 1.2e-7): scores, exp and sums over up to
# 256 keys round. Over 12 seeds of this suite the worst case used 1/5 of it.
# bfloat16: 1.5e-2, ~2 ulps (eps 7.8e-3): the output itself is rounded to
# bfloat16, the kernels feed bfloat16 weights to the value matmul, and tpu_splash
# pre-scales q in bfloat16. Over 12 seeds the worst case (tpu_flash, tpu_splash)
# used 1/3 of it.
TOLERANCES = {jnp.float32: dict(atol=3e-6, rtol=3e-6), jnp.bfloat16: dict(atol=1.5e-2, rtol=1.5e-2)}

EMULATED = ("pallas", "tpu_flash", "tpu_splash")


def _cases() -> list:
    cases = [pytest.param(name, False, id=name) for name in available_impls()]
    if jax.default_backend() != "tpu":
        cases += [pytest.param(name, True, id=f"{name}-tpu_interpret") for name in EMULATED]
    return cases


# transformers' MPNetEncoder.relative_position_bucket (32 buckets, max_distance 128) of key - query distances
# -300..300, computed once with .venv-bench, as (bucket, how many distances in a row).
TRANSFORMERS_BUCKET_RUNS = [
    (15, 210), (14, 27), (13, 18), (12, 14), (11, 9), (10, 7), (9, 4), (8, 4), (7, 1), (6, 1), (5, 1), (4, 1),
    (3, 1), (2, 1), (1, 1), (0, 1), (17, 1), (18, 1), (19, 1), (20, 1), (21, 1), (22, 1), (23, 1), (24, 4),
    (25, 4), (26, 7), (27, 9), (28, 14), (29, 18), (30, 27), (31, 210),
]  # fmt: skip
TRANSFORMERS_BUCKETS = np.repeat(*np.array(TRANSFORMERS_BUCKET_RUNS).T)  # [601]: distance d at d + 300


def attention_float64(
    q, k, v, kv_lengths, scale: float, segment_ids=None, window=None, bias=None, causal=False
) -> np.ndarray:
    """The oracle, independent of the code under test: 'BTNH' float64.

    Query t of row b sees key s iff s < kv_lengths[b], segment_ids[b, t] ==
    segment_ids[b, s] (if given), |t - s| <= window (if given) and s <= t (if
    causal); a query that sees nothing gets zeros. `bias`: a table [N, 32] added
    to the scaled scores at transformers' bucket of s - t. k and v may have K
    heads dividing q's N (grouped-query attention): repeated here to N heads,
    query head n taking K/V head n // (N / K), as transformers' `repeat_kv` does.
    """
    q, k, v = (np.asarray(jnp.asarray(x, jnp.float32), np.float64) for x in (q, k, v))
    k, v = (np.repeat(x, q.shape[2] // x.shape[2], axis=2) for x in (k, v))
    out = np.zeros(q.shape, np.float64)
    t, s = np.arange(q.shape[1])[:, None], np.arange(k.shape[1])[None, :]
    for b, length in enumerate(np.asarray(kv_lengths)):
        sees = np.broadcast_to(s < length, (t.size, s.size))
        if segment_ids is not None:
            ids = np.asarray(segment_ids[b])
            sees = sees & (ids[:, None] == ids[None, :])
        if window is not None:
            sees = sees & (np.abs(t - s) <= window)
        if causal:
            sees = sees & (s <= t)
        scores = np.einsum("tnh,snh->nts", q[b], k[b]) * scale
        if bias is not None:
            scores = scores + np.asarray(bias, np.float64)[:, TRANSFORMERS_BUCKETS[s - t + 300]]
        scores = np.where(sees, scores, -np.inf)
        top = scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores - np.where(np.isfinite(top), top, 0))
        total = weights.sum(axis=-1, keepdims=True)
        weights = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)
        out[b] = np.einsum("nts,snh->tnh", weights, v[b])
    return out


def make_inputs(rng, batch, q_seq, kv_seq, heads, head_dim, dtype, logit_scale=1.0, lengths=(), kv_heads=None):
    """Random q, k, v and kv_lengths: the given `lengths` first, then 0, 1,
    something in between and full, then random ones, shuffled. k and v have
    `kv_heads` heads (default: `heads`).

    Padded keys and values are filled with large garbage: masking must ignore
    them, not rely on them being zero.
    """
    q = rng.standard_normal((batch, q_seq, heads, head_dim)) * logit_scale
    k, v = (rng.standard_normal((batch, kv_seq, kv_heads or heads, head_dim)) for _ in range(2))
    lengths = [*lengths, 0, 1, rng.integers(2, kv_seq), kv_seq, *rng.integers(0, kv_seq + 1, batch)][:batch]
    lengths = rng.permutation(lengths).astype(np.int32)
    padding = np.arange(kv_seq)[None, :, None, None] >= lengths[:, None, None, None]
    k = np.where(padding, 1e3 * rng.standard_normal(k.shape), k)
    v = np.where(padding, 1e3 * rng.standard_normal(v.shape), v)
    return (*(jnp.asarray(x, dtype) for x in (q, k, v)), jnp.asarray(lengths))


def check(
    out, q, k, v, lengths, scale, dtype, what, tolerance=None, segment_ids=None, window=None, bias=None, causal=False
):
    assert out.shape == q.shape and out.dtype == dtype, (what, out.shape, out.dtype)
    out = np.asarray(out.astype(jnp.float32), np.float64)
    assert np.isfinite(out).all(), f"{what}: NaN or Inf in output"
    assert (out[np.asarray(lengths) == 0] == 0).all(), f"{what}: rows without keys must be zeros"
    expected = attention_float64(q, k, v, lengths, scale, segment_ids, window, bias, causal)
    np.testing.assert_allclose(out, expected, err_msg=what, **(tolerance or TOLERANCES[dtype]))


def run(impl, emulated, *args, **kwargs):
    with tpu_interpret_mode() if emulated else contextlib.nullcontext():
        return jax.jit(lambda q, k, v, l: attention(q, k, v, kv_lengths=l, impl=impl, **kwargs))(*args)


def run_or_skip(impl, emulated, *args, **kwargs):
    try:
        return run(impl, emulated, *args, **kwargs)
    except ValueError as error:  # e.g. cudnn with float32 on a GPU host, tpu_flash with a window
        if "cannot run here" in str(error):
            pytest.skip(str(error))
        raise


@pytest.mark.parametrize("impl, emulated", _cases())
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("seq, head_dim", [(128, 64), (200, 32)], ids=["seq128", "seq200"])
def test_matches_float64(seeded_rng, impl, emulated, dtype, seq, head_dim):
    """128 is a whole number of blocks for every kernel; 200 is not."""
    q, k, v, lengths = make_inputs(seeded_rng, 4, seq, seq, 2, head_dim, dtype)
    out = run_or_skip(impl, emulated, q, k, v, lengths)
    check(out, q, k, v, lengths, head_dim**-0.5, dtype, f"{impl} seq {seq} {dtype.__name__}")


@pytest.mark.parametrize("impl", ["blockwise", "pallas"])
def test_bfloat16_weights_are_normalised_by_their_own_sum(seeded_rng, impl):
    """The value matmul's bfloat16 weights are divided by their own sum, so constant values come back
    exactly. blockwise truncates the weights (`_online_softmax.step`): normalised by the sum of the
    unrounded weights, half of these outputs came back 0.996."""
    q, k, v, lengths = make_inputs(seeded_rng, 4, 512, 512, 2, 32, jnp.bfloat16, lengths=(512,))
    out = run(impl, False, q, k, jnp.ones_like(v), lengths)
    expected = np.broadcast_to((np.asarray(lengths) > 0)[:, None, None, None], out.shape)
    np.testing.assert_array_equal(np.asarray(out, np.float32), expected.astype(np.float32))


@pytest.mark.parametrize("impl, emulated", [c for c in _cases() if not c.values[1]])
def test_cross_attention_and_large_logits(seeded_rng, impl, emulated):
    """Queries and keys of different lengths, and scores in the hundreds, where a
    softmax without a running max overflows. float32 rounding of scores ~100 moves
    the weights by ~1e-5 relative, hence the looser tolerance."""
    q, k, v, lengths = make_inputs(seeded_rng, 5, 48, 80, 3, 32, jnp.float32, logit_scale=30.0)
    out = run(impl, emulated, q, k, v, lengths)
    check(out, q, k, v, lengths, 32**-0.5, jnp.float32, f"{impl} cross/large", dict(atol=2e-4, rtol=2e-4))


def test_explicit_scale(seeded_rng):
    q, k, v, lengths = make_inputs(seeded_rng, 4, 40, 40, 2, 16, jnp.float32)
    for impl in available_impls():
        check(run(impl, False, q, k, v, lengths, scale=0.5), q, k, v, lengths, 0.5, jnp.float32, impl)


# blockwise and pallas with tiles far smaller than the rows: many tiles per row, some of them skipped.
SMALL_BLOCKS = {
    "blockwise": lambda *a, **kw: blockwise_attention(*a, **kw, blocks=BlockwiseBlocks(block_q=16, block_k=32)),
    "pallas": lambda *a, **kw: pallas_attention(*a, **kw, blocks=PallasBlocks(block_q=16, block_k=32)),
}
small_block_kernels = pytest.mark.parametrize("kernel", list(SMALL_BLOCKS.values()), ids=list(SMALL_BLOCKS))


@pytest.mark.parametrize("seq", [96, 100])
@small_block_kernels
def test_many_small_blocks(seeded_rng, kernel, seq):
    """Several key blocks per row, lengths ending mid-block, on a block edge, and
    whole blocks of padding: the online softmax across block boundaries."""
    q, k, v, lengths = make_inputs(seeded_rng, 6, seq, seq, 2, 32, jnp.float32, lengths=(32, 33))
    out = jax.jit(lambda *a: kernel(*a, scale=32**-0.5))(q, k, v, lengths)
    check(out, q, k, v, lengths, 32**-0.5, jnp.float32, f"seq {seq}")


def test_without_kv_lengths_attends_to_everything(seeded_rng):
    full = (64,) * 4
    q, k, v, full = make_inputs(seeded_rng, 4, 64, 64, 2, 32, jnp.float32, lengths=full)
    for impl in available_impls():
        check(
            jax.jit(lambda *a, impl=impl: attention(*a, impl=impl))(q, k, v), q, k, v, full, 32**-0.5, jnp.float32, impl
        )


def packed_segment_ids(rng, seq: int) -> np.ndarray:
    """[4, seq] int32 segment ids, one row each of: sequences of 1 token and longer
    ones then a padding tail (segment 0); one sequence filling the row; one
    sequence then padding; ids in no order and not contiguous (correctness must
    not depend on the packing convention)."""
    lengths = [1, 1, 3, 1, seq // 4, seq // 3]
    first = np.concatenate([np.full(n, i + 1) for i, n in enumerate(lengths)])
    rows = [
        np.pad(first, (0, seq - first.size)),
        np.ones(seq),
        np.pad(np.ones(seq // 2 + 7), (0, seq - seq // 2 - 7)),
        rng.choice([7, -3, 0, 2**31 - 1], seq),
    ]
    return np.stack(rows).astype(np.int32)


def packed_inputs(rng, seq, dtype, head_dim=32, heads=2, kv_heads=None):
    q, k, v, lengths = make_inputs(rng, 4, seq, seq, heads, head_dim, dtype, lengths=(seq,) * 4, kv_heads=kv_heads)
    return q, k, v, lengths, jnp.asarray(packed_segment_ids(rng, seq))


# Windows smaller than every kernel's block, and larger than the row (which the
# dispatch turns into no window, so natively only). Segment ids without a window:
# test_packed_row_equals_each_sequence_alone.
MASKS = [
    (jnp.float32, 5, "f32-segments-window5", True),
    (jnp.float32, 1000, "f32-segments-window1000", False),
    (jnp.bfloat16, 40, "bf16-segments-window40", True),
]


@pytest.mark.parametrize(
    "impl, emulated, dtype, window",
    [
        pytest.param(*case.values, dtype, window, id=f"{name}-{case.id}")
        for dtype, window, name, emulate_too in MASKS
        for case in _cases()
        if emulate_too or not case.values[1]
    ],
)
def test_segments_and_window_match_float64(seeded_rng, impl, emulated, dtype, window):
    """200 tokens: not a whole number of blocks for any kernel."""
    q, k, v, lengths, segments = packed_inputs(seeded_rng, 200, dtype)
    out = run_or_skip(impl, emulated, q, k, v, lengths, segment_ids=segments, window=window)
    what = f"{impl} segments window {window} {dtype.__name__}"
    check(out, q, k, v, lengths, 32**-0.5, dtype, what, segment_ids=segments, window=window)


def sequences_in_a_row(rng, seq=160, sizes=(1, 37, 2, 64, 5), heads=2, kv_heads=None):
    """One row of `seq` tokens packing sequences of `sizes`, numbered 1, 2, ... with a padding tail, as the
    pipeline packs: q, k, v, segment ids [1, seq] and each sequence's (start, end)."""
    q, k, v, _ = make_inputs(rng, 1, seq, seq, heads, 32, jnp.float32, lengths=(seq,), kv_heads=kv_heads)
    segments = np.zeros((1, seq), np.int32)
    starts = np.cumsum([0, *sizes])
    for i, (start, end) in enumerate(zip(starts, starts[1:])):
        segments[0, start:end] = i + 1
    return q, k, v, segments, list(zip(starts, starts[1:]))


def assert_each_sequence_alone(out, q, k, v, spans, what, **masks):
    """Each sequence's slice of a packed row's output `out` against that sequence alone in float64, with
    `attention_float64`'s `masks` (window, bias, causal)."""
    for start, end in spans:
        alone = attention_float64(*(x[:, start:end] for x in (q, k, v)), [end - start], 32**-0.5, **masks)
        np.testing.assert_allclose(
            np.asarray(out[:, start:end]), alone, err_msg=f"{what} [{start}, {end})", **TOLERANCES[jnp.float32]
        )


@pytest.mark.parametrize(
    "impl, emulated, window",
    [pytest.param(*c.values, None, id=c.id) for c in _cases()]
    + [pytest.param(*c.values, 3, id=f"{c.id}-window3") for c in _cases() if not c.values[1]],
)
def test_packed_row_equals_each_sequence_alone(seeded_rng, impl, emulated, window):
    """Each sequence's slice of a packed row (numbered 1, 2, ... with a padding
    tail, as the pipeline packs) against that sequence computed alone. With a
    window natively only: emulation is slow and windows are checked above."""
    q, k, v, segments, spans = sequences_in_a_row(seeded_rng)
    seq = q.shape[1]
    out = run_or_skip(impl, emulated, q, k, v, jnp.asarray([seq]), segment_ids=jnp.asarray(segments), window=window)
    assert_each_sequence_alone(out, q, k, v, spans, impl, window=window)


@pytest.mark.parametrize("impl, emulated", _cases())
def test_window_with_kv_lengths_and_cross_attention(seeded_rng, impl, emulated):
    """A window without segment ids, with padding: queries far past a row's last
    key see nothing and come out as zeros. Queries and keys of different lengths
    (the window is over row positions)."""
    q, k, v, lengths = make_inputs(seeded_rng, 3, 72, 136, 2, 32, jnp.float32, lengths=(20,))
    out = run_or_skip(impl, emulated, q, k, v, lengths, window=17)
    check(out, q, k, v, lengths, 32**-0.5, jnp.float32, f"{impl} window 17", window=17)


@small_block_kernels
@pytest.mark.parametrize("window", [None, 7], ids=["full", "window7"])
@pytest.mark.parametrize("causal", [False, True], ids=["both_ways", "causal"])
def test_many_small_blocks_with_segments_and_window(seeded_rng, kernel, window, causal):
    """Many blocks per row, so whole key blocks are skipped and sequences start
    and end mid-block and on block edges; causal, tiles on the diagonal and skipped
    tiles above it, blocks of queries and keys of different sizes."""
    q, k, v, lengths, segments = packed_inputs(seeded_rng, 200, jnp.float32)
    out = jax.jit(lambda *a: kernel(*a, scale=32**-0.5, window=window, causal=causal))(q, k, v, lengths, segments)
    what = f"window {window} causal {causal}"
    check(out, q, k, v, lengths, 32**-0.5, jnp.float32, what, segment_ids=segments, window=window, causal=causal)


@pytest.mark.parametrize("impl, emulated", _cases())
def test_scattered_segments_with_kv_lengths(seeded_rng, impl, emulated):
    """Ids scattered over the row, with padded keys: queries past kv_length see
    only earlier keys of their id within the window, or nothing and give zeros."""
    window = 4
    q, k, v, lengths = make_inputs(seeded_rng, 3, 136, 136, 2, 32, jnp.float32, lengths=(129,))
    segments = jnp.asarray(seeded_rng.integers(1, 4, (3, 136)), jnp.int32)
    out = run_or_skip(impl, emulated, q, k, v, lengths, segment_ids=segments, window=window)
    what = f"{impl} scattered window {window}"
    check(out, q, k, v, lengths, 32**-0.5, jnp.float32, what, segment_ids=segments, window=window)


# --- a relative position bias (MPNet's) ----------------------------------------------------------------


def test_buckets_match_transformers():
    buckets = RelativeBuckets(32, 128)
    distances = np.arange(-300, 301)
    ours = buckets.of_distance[np.clip(distances, -128, 128) + 128]
    np.testing.assert_array_equal(ours, TRANSFORMERS_BUCKETS)


def bias_table(rng, heads=2, dtype=jnp.float32):
    """Large enough to move the softmax: a few units apart between buckets."""
    return jnp.asarray(2.0 * rng.standard_normal((heads, 32)), dtype)


def with_bias(table):
    return RelativeBias(table, RelativeBuckets(32, 128))


def _bias_cases() -> list:
    """The implementations that add a relative position bias, natively and under TPU interpret mode."""
    return [case for case in _cases() if case.values[0] in RELATIVE_BIAS_IMPLS]


@pytest.mark.parametrize("impl, emulated", _bias_cases())
@pytest.mark.parametrize("dtype, window", [(jnp.float32, None), (jnp.float32, 5), (jnp.bfloat16, 40)])
def test_relative_bias_with_segments_window_and_padding(seeded_rng, impl, emulated, dtype, window):
    """200 tokens, not a whole number of blocks; packed rows, one with scattered ids; all 200 apart and more
    than 128, where distances share the last bucket."""
    q, k, v, lengths, segments = packed_inputs(seeded_rng, 200, dtype)
    lengths = jnp.asarray([200, 200, 150, 61], jnp.int32)
    table = bias_table(seeded_rng, dtype=dtype)
    bias = with_bias(table)
    out = run(impl, emulated, q, k, v, lengths, segment_ids=segments, window=window, relative_bias=bias)
    what = f"{impl} relative bias window {window} {dtype.__name__}"
    check(out, q, k, v, lengths, 32**-0.5, dtype, what, segment_ids=segments, window=window, bias=table)


@pytest.mark.parametrize("impl", sorted(RELATIVE_BIAS_IMPLS))
def test_relative_bias_in_cross_attention_and_padding(seeded_rng, impl):
    """Queries and keys of different odd lengths, rows of no keys and of one."""
    q, k, v, lengths = make_inputs(seeded_rng, 5, 75, 301, 3, 16, jnp.float32)
    table = bias_table(seeded_rng, heads=3)
    out = run(impl, False, q, k, v, lengths, relative_bias=with_bias(table))
    check(out, q, k, v, lengths, 16**-0.5, jnp.float32, f"{impl} cross relative bias", bias=table)


@pytest.mark.parametrize("window", [None, 7], ids=["full", "window7"])
@small_block_kernels
def test_relative_bias_over_many_small_blocks(seeded_rng, kernel, window):
    """The bias per tile (gathered by blockwise, a whole tile by pallas, whose tiles are then square): tiles far
    off the diagonal, past max_distance, skipped blocks, sequences across block edges."""
    q, k, v, lengths, segments = packed_inputs(seeded_rng, 200, jnp.float32)
    table = bias_table(seeded_rng)
    bias = with_bias(table)
    out = jax.jit(lambda *a: kernel(*a, scale=32**-0.5, window=window, bias=bias))(q, k, v, lengths, segments)
    what = f"small blocks relative bias window {window}"
    check(out, q, k, v, lengths, 32**-0.5, jnp.float32, what, segment_ids=segments, window=window, bias=table)


def test_relative_bias_in_a_packed_row_equals_each_sequence_alone(seeded_rng):
    """Row positions give the same distances as each sequence's own."""
    q, k, v, segments, spans = sequences_in_a_row(seeded_rng)
    seq = q.shape[1]
    table = bias_table(seeded_rng)
    out = run(
        "blockwise",
        False,
        q,
        k,
        v,
        jnp.asarray([seq]),
        segment_ids=jnp.asarray(segments),
        relative_bias=with_bias(table),
    )
    assert_each_sequence_alone(out, q, k, v, spans, "blockwise", bias=table)


# --- causal attention (Qwen3's: a decoder run as an encoder) -------------------------------------------


@pytest.mark.parametrize("impl, emulated", _cases())
@pytest.mark.parametrize("dtype, window", [(jnp.float32, None), (jnp.float32, 5), (jnp.bfloat16, None)])
def test_causal_with_segments_window_and_padding(seeded_rng, impl, emulated, dtype, window):
    """200 tokens, not a whole number of blocks; packed rows, one with scattered ids, rows cut short by
    kv_lengths: each query sees the earlier keys of its own segment and itself."""
    q, k, v, lengths, segments = packed_inputs(seeded_rng, 200, dtype)
    lengths = jnp.asarray([200, 200, 150, 61], jnp.int32)
    out = run_or_skip(impl, emulated, q, k, v, lengths, segment_ids=segments, window=window, causal=True)
    what = f"{impl} causal window {window} {dtype.__name__}"
    check(out, q, k, v, lengths, 32**-0.5, dtype, what, segment_ids=segments, window=window, causal=True)


@pytest.mark.parametrize("impl, emulated", _cases())
def test_causal_cross_attention_and_padding(seeded_rng, impl, emulated):
    """Without segment ids, queries and keys of different lengths: row positions from the top left, rows
    without keys, queries past their row's last key that still see the keys before it."""
    q, k, v, lengths = make_inputs(seeded_rng, 5, 75, 301, 3, 16, jnp.float32, lengths=(40,))
    out = run_or_skip(impl, emulated, q, k, v, lengths, causal=True)
    check(out, q, k, v, lengths, 16**-0.5, jnp.float32, f"{impl} causal cross", causal=True)


def test_causal_kernels_never_visit_a_tile_above_the_diagonal():
    """Each block of queries loops over the key blocks up to the one holding its last query, no further
    (`key_block_ranges`, which blockwise and pallas loop over)."""
    block_q, block_k, seq = 16, 32, 200
    q_blocks = -(-seq // block_q)
    ranges = np.asarray(
        key_block_ranges(
            jnp.asarray([seq]),
            None,
            None,
            q_blocks=q_blocks,
            block_q=block_q,
            kv_seq=224,
            block_k=block_k,
            causal=True,
        )
    )[0]
    last_query = np.minimum((np.arange(q_blocks) + 1) * block_q, seq) - 1
    np.testing.assert_array_equal(ranges[:, 0], 0)
    np.testing.assert_array_equal(ranges[:, 1], last_query // block_k + 1)


@pytest.mark.parametrize(
    "impl, emulated, heads",
    [pytest.param(*c.values, (2, 2), id=c.id) for c in _cases()]
    + [pytest.param(*c.values, (6, 2), id=f"{c.id}-gqa6x2") for c in _cases() if not c.values[1]],
)
def test_causal_in_a_packed_row_equals_each_sequence_alone(seeded_rng, impl, emulated, heads):
    """Causal within each segment, as the pipeline packs rows: a sequence's slice is that sequence alone; with
    2 K/V heads for 2 query heads and for 6 (grouped-query attention, as decoders), the latter natively only:
    emulated, groups are checked in test_grouped_query_heads_causal_with_segments_and_padding."""
    q, k, v, segments, spans = sequences_in_a_row(seeded_rng, heads=heads[0], kv_heads=heads[1])
    seq = q.shape[1]
    out = run_or_skip(impl, emulated, q, k, v, jnp.asarray([seq]), segment_ids=jnp.asarray(segments), causal=True)
    assert_each_sequence_alone(out, q, k, v, spans, f"{impl} {heads} heads", causal=True)


# --- grouped-query attention (Qwen3's, Llama's, Mistral's, Gemma3's): fewer K/V heads than query heads -------

# (query heads N, K/V heads K): groups of 3, and one K/V head for all (multi-query).
GROUPS = {"gqa6x2": (6, 2), "mqa4x1": (4, 1)}


@pytest.mark.parametrize("impl, emulated", _cases())
@pytest.mark.parametrize(
    "heads, dtype, window",
    [
        pytest.param(GROUPS["gqa6x2"], jnp.float32, None, id="gqa6x2-f32"),
        pytest.param(GROUPS["mqa4x1"], jnp.bfloat16, 5, id="mqa4x1-bf16-window5"),
    ],
)
def test_grouped_query_heads_causal_with_segments_and_padding(seeded_rng, impl, emulated, heads, dtype, window):
    """Query head n attends with K/V head n // (N / K): packed rows (one with scattered ids), rows cut short by
    kv_lengths, causal as decoders attend, 200 tokens (no kernel's whole number of blocks)."""
    q, k, v, lengths, segments = packed_inputs(seeded_rng, 200, dtype, heads=heads[0], kv_heads=heads[1])
    lengths = jnp.asarray([200, 200, 150, 61], jnp.int32)
    out = run_or_skip(impl, emulated, q, k, v, lengths, segment_ids=segments, window=window, causal=True)
    what = f"{impl} {heads} heads causal window {window} {dtype.__name__}"
    check(out, q, k, v, lengths, 32**-0.5, dtype, what, segment_ids=segments, window=window, causal=True)


@pytest.mark.parametrize("impl", sorted(RELATIVE_BIAS_IMPLS))
def test_grouped_query_heads_with_a_relative_bias(seeded_rng, impl):
    """The bias table stays per query head: each of a group's heads adds its own row, over its shared keys."""
    q, k, v, lengths, segments = packed_inputs(seeded_rng, 200, jnp.float32, heads=6, kv_heads=2)
    table = bias_table(seeded_rng, heads=6)
    out = run(impl, False, q, k, v, lengths, segment_ids=segments, window=40, relative_bias=with_bias(table))
    what = f"{impl} grouped relative bias"
    check(out, q, k, v, lengths, 32**-0.5, jnp.float32, what, segment_ids=segments, window=40, bias=table)


@pytest.mark.parametrize("heads", list(GROUPS.values()), ids=list(GROUPS))
@pytest.mark.parametrize("kernel", list(SMALL_BLOCKS))
def test_grouped_query_heads_over_many_small_blocks(seeded_rng, kernel, heads):
    """A group's query heads folded into the rows of a query tile (blockwise) or reading their K/V head
    (pallas), across many tiles: skipped ones, sequences across block edges, a window, a relative bias per
    query head and tile."""
    q, k, v, lengths, segments = packed_inputs(seeded_rng, 200, jnp.float32, heads=heads[0], kv_heads=heads[1])
    masks = dict(scale=32**-0.5, window=7, causal=True)
    table = bias_table(seeded_rng, heads=heads[0])
    out = jax.jit(lambda *a: SMALL_BLOCKS[kernel](*a, **masks, bias=with_bias(table)))(q, k, v, lengths, segments)
    what = f"{kernel} {heads} heads small blocks"
    check(out, q, k, v, lengths, 32**-0.5, jnp.float32, what, segment_ids=segments, window=7, bias=table, causal=True)
