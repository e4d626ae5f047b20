"""A T5-style relative position bias: per head, a learned score for each bucket of key - query distance.

MPNet and T5's encoder add one to every layer's scaled scores (T5's are unscaled), `scores[b, n, t, s] +=
table_NR[n, bucket(s - t)]`, with distances bucketed as T5's bidirectional `relative_position_bucket`
(transformers' `T5Attention._relative_position_bucket`, which `MPNetEncoder.relative_position_bucket` copies;
the same buckets as T5's for 32/128, 16/40, 64/256, 8/3, 32/200 and 128/1000 buckets/max_distance, at every
distance to 300 past max_distance): half the buckets for keys before or at the query, half for keys after it;
within each half, distances below a quarter of the buckets get one bucket each, longer ones share buckets
spaced logarithmically up to `max_distance`, and all beyond share the last.

Plain data, without JAX: a model's config names its bucketing, and the job's driver never imports
JAX. In a packed row, the distance between two tokens of one sequence is the same in row positions as
in the sequence's own, and tokens of different sequences never see each other, so kernels bucket row
positions.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import numpy as np


@dataclasses.dataclass(frozen=True)
class RelativeBuckets:
    """How key - query distances fall into `num_buckets` buckets (static: part of what is compiled)."""

    num_buckets: int = 32
    max_distance: int = 128

    def __post_init__(self):
        if self.num_buckets < 4 or self.num_buckets % 2 or self.max_distance <= self.num_buckets // 4:
            raise ValueError(
                f"relative buckets need an even num_buckets >= 4 and max_distance > num_buckets / 4; "
                f"got {self.num_buckets}, {self.max_distance}"
            )

    @functools.cached_property
    def of_distance(self) -> np.ndarray:
        """[2 * max_distance + 1] int32: the bucket of s - t = d at index d + max_distance. Every distance
        beyond max_distance falls in the bucket of max_distance, so kernels clip to this range.

        In float32 as torch computes it: a distance whose logarithm lands on a bucket's edge (16, 32, 64
        for MPNet's) must round the way transformers' does."""
        half = self.num_buckets // 2
        exact = half // 2
        d = np.arange(-self.max_distance, self.max_distance + 1)
        n = np.abs(d)
        f32 = np.float32
        with np.errstate(divide="ignore"):  # log(0): those distances take the exact branch
            scaled = np.log(n.astype(f32) / f32(exact)) / f32(math.log(self.max_distance / exact)) * f32(half - exact)
        logarithmic = exact + np.where(n < exact, 0, scaled).astype(np.int64)
        bucket = np.where(n < exact, n, np.minimum(logarithmic, half - 1)) + (d > 0) * half
        return bucket.astype(np.int32)


class RelativeBias(NamedTuple):
    """What `attention` adds to the scores: a per-head table [heads, num_buckets] (any float dtype; under
    `shard_map`, this device's heads) and how distances index it."""

    table_NR: Any
    buckets: RelativeBuckets
