"""Which keys a query sees, what a relative position bias adds to its scores, and padding sequences
to whole blocks.

Query t sees key s when all of these hold (the contract of `attention`):
- s < kv_lengths[b] (later keys are padding);
- segment_ids[b, t] == segment_ids[b, s], when segment ids are given (packed rows);
- |t - s| <= window, when a window is given (row positions);
- s <= t, when causal (row positions: within a packed segment, whose tokens run in row order, a query sees
  the earlier tokens of its own sequence and itself).

Masked scores are set to a large finite negative, not -inf, so that "score -
running max" is never inf - inf = NaN; a query that sees no key produces zeros.
"""

import jax
import jax.numpy as jnp
import numpy as np

from kernels.attention._buckets import RelativeBias

MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)


def visible(
    q_positions: jax.Array,
    k_positions: jax.Array,
    kv_length: jax.Array,
    q_segments: jax.Array | None,
    k_segments: jax.Array | None,
    window: int | None,
    causal: bool = False,
) -> jax.Array:
    """Bool mask, the broadcast of its arguments: positions and segments of queries
    along one axis and of keys along another (e.g. [Q, 1] against [1, K])."""
    mask = k_positions < kv_length
    if q_segments is not None:
        mask &= q_segments == k_segments
    if window is not None:
        mask &= jnp.abs(q_positions - k_positions) <= window
    if causal:
        mask &= k_positions <= q_positions
    return mask


def bias_by_distance(bias: RelativeBias) -> jax.Array:
    """float32 [N, 2 * max_distance + 1]: each head's bias for key - query distances -max_distance..max_distance,
    which every longer distance shares with the nearest end (`RelativeBuckets.of_distance`)."""
    return jnp.asarray(bias.table_NR, jnp.float32)[:, bias.buckets.of_distance]


def relative_bias(by_distance_ND: jax.Array, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
    """float32 [N, Q, K]: the bias of `bias_by_distance` for query positions t [Q, 1] and key positions s [K]
    (row positions, as `visible` takes them): one gather per tile."""
    reach = by_distance_ND.shape[1] // 2
    return by_distance_ND[:, jnp.clip(k_positions - q_positions, -reach, reach) + reach]


def pad_seq(x: jax.Array, multiple: int) -> jax.Array:
    """Zero-pads axis 1 (the sequence of 'BTNH' or [B, T]) up to a multiple of `multiple`."""
    extra = -x.shape[1] % multiple
    if not extra:
        return x
    widths = [(0, 0)] * x.ndim
    widths[1] = (0, extra)
    return jnp.pad(x, widths)


def _segment_runs(segment_ids: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """[B, T] segment ids -> (order, start, end) [B, T]: positions sorted by id,
    and where in that order each token's id starts and ends.

    The sort is stable, so each id's run lists its positions in ascending order.
    """
    order = jnp.argsort(segment_ids, axis=1, stable=True)
    sorted_ids = jnp.take_along_axis(segment_ids, order, axis=1)
    search = jax.vmap(jnp.searchsorted, in_axes=(0, 0, None))
    return order, search(sorted_ids, segment_ids, "left"), search(sorted_ids, segment_ids, "right")


def segment_spans(segment_ids: jax.Array) -> tuple[jax.Array, jax.Array]:
    """[B, T] segment ids -> (first, last) [B, T]: the first and last position in
    its row of each token's segment id. Exact for any ids, contiguous or not."""
    order, start, end = _segment_runs(segment_ids)
    return jnp.take_along_axis(order, start, axis=1), jnp.take_along_axis(order, end - 1, axis=1)


def key_block_ranges(
    kv_lengths: jax.Array,
    segment_ids: jax.Array | None,
    window: int | None,
    *,
    q_blocks: int,
    block_q: int,
    kv_seq: int,
    block_k: int,
    causal: bool = False,
) -> jax.Array:
    """[B, q_blocks, 2] int32: the key blocks [first, end) that can hold a key some
    query of each query block sees; all others can be skipped. Causal: none past the
    block's last query, so the tiles wholly above the diagonal are never visited.

    Bounds, not exact: sequences in row order (as packed) make them tight, and
    cost then grows with the sum of squared sequence lengths; for scattered ids
    they stay correct but skip less. `kv_seq` is the padded key length.
    """
    starts = jnp.arange(q_blocks) * block_q
    lo = jnp.zeros((kv_lengths.shape[0], q_blocks), jnp.int32)
    hi = jnp.minimum(kv_lengths, kv_seq)[:, None] + lo
    if segment_ids is not None:
        first, last = segment_spans(segment_ids)
        # Padded queries (sliced off later) widen nothing.
        extra = q_blocks * block_q - segment_ids.shape[1]
        first = jnp.pad(first, ((0, 0), (0, extra)), constant_values=kv_seq).reshape(-1, q_blocks, block_q)
        last = jnp.pad(last, ((0, 0), (0, extra)), constant_values=-1).reshape(-1, q_blocks, block_q)
        lo, hi = jnp.maximum(lo, first.min(axis=2)), jnp.minimum(hi, last.max(axis=2) + 1)
    if window is not None:
        lo, hi = jnp.maximum(lo, starts - window), jnp.minimum(hi, starts + block_q + window)
    if causal:
        hi = jnp.minimum(hi, starts + block_q)
    first_block = lo // block_k
    end_block = jnp.maximum(-(-hi // block_k), first_block)
    return jnp.stack([first_block, end_block], axis=-1).astype(jnp.int32)


def canonical_segment_ids(
    kv_lengths: jax.Array, segment_ids: jax.Array | None, q_seq: int, kv_seq: int
) -> tuple[jax.Array, jax.Array]:
    """Everything but the window as segment ids, for kernels whose only masks are
    segment ids and a static one: (q_ids [B, q_seq], kv_ids [B, kv_seq]) int32.

    Each id becomes the first position of its segment (0 without segment ids), so
    ids are >= 0 and -1 marks padded keys (>= kv_length) for no query to match.
    q_seq and kv_seq may exceed the inputs' (padding to whole blocks).
    """
    if segment_ids is None:
        first = jnp.zeros((kv_lengths.shape[0], 1), jnp.int32)
    else:
        first = segment_spans(segment_ids)[0].astype(jnp.int32)

    def to_length(x, length):
        return jnp.pad(x, ((0, 0), (0, length - x.shape[1])))

    kv_ids = jnp.where(jnp.arange(kv_seq) < kv_lengths[:, None], to_length(first, kv_seq), -1)
    return to_length(first, q_seq), kv_ids


def sees_a_key(
    kv_lengths: jax.Array, segment_ids: jax.Array | None, window: int | None, causal: bool, q_seq: int
) -> jax.Array:
    """[B, q_seq] bool: whether query t sees any key, for kernels whose output for
    a query without keys is unspecified (it is then zeroed)."""
    t = jnp.arange(q_seq)[None, :]
    lo = jnp.zeros_like(t) if window is None else jnp.maximum(t - window, 0)
    hi = kv_lengths[:, None] if window is None else jnp.minimum(kv_lengths[:, None], t + window + 1)
    if causal:
        hi = jnp.minimum(hi, t + 1)
    if segment_ids is None:
        return lo < hi
    # The first position of t's segment at or after lo must come before hi: a binary
    # search in the segment's run of sorted positions, for every query at once.
    order, start, end = _segment_runs(segment_ids)
    low, high = start, end
    for _ in range(q_seq.bit_length()):
        mid = (low + high) // 2
        before = jnp.take_along_axis(order, jnp.minimum(mid, q_seq - 1), axis=1) < lo
        low, high = jnp.where(before & (mid < high), mid + 1, low), jnp.where(before, high, mid)
    found = jnp.take_along_axis(order, jnp.minimum(low, q_seq - 1), axis=1)
    return (low < end) & (found < hi)
