"""Static batch shapes: length buckets with a fixed token budget per batch.

Every batch is padded to one of a few [rows, bucket] shapes so that a whole job
compiles a handful of programs whatever lengths its corpus has. Buckets are
powers of two from `min_bucket` up to the model's window; a batch holds
`batch_size * max_seq_len` tokens, so short buckets carry more rows.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterator, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class BatchingConfig:
    max_seq_len: int
    batch_size: int  # rows per data shard in the longest bucket
    min_bucket: int = 32
    # A partial batch left at the end of a call may be cut to a half, a quarter...
    # of the full rows, at most this many halvings (never below `row_multiple`):
    # fewer padding rows, at the cost of one more compiled shape per halving used.
    # A job streaming thousands of chunks keeps this small so its program count
    # stays small; interactive callers embedding a handful of texts allow many.
    tail_halvings: int = 2
    # Every batch's rows are a multiple of this: the encoder splits rows evenly
    # over its mesh's data axis, `batch_size` rows at full length to each shard.
    row_multiple: int = 1

    @property
    def buckets(self) -> tuple[int, ...]:
        sizes, size = [], self.min_bucket
        while size < self.max_seq_len:
            sizes.append(size)
            size *= 2
        return (*sizes, self.max_seq_len)

    def bucket_for(self, n_tokens: int) -> int:
        return self.buckets[bisect.bisect_left(self.buckets, n_tokens)]

    def rows_for(self, bucket: int) -> int:
        """Rows of a batch in `bucket`: the same token budget whatever the bucket."""
        return self.row_multiple * max(1, self.batch_size * self.max_seq_len // bucket)

    def tail_rows(self, bucket: int, remaining: int) -> int:
        """Rows of the next batch in `bucket` when only `remaining` sequences are left.

        The smallest allowed shape is a quantum of rows (full / 2**tail_halvings,
        rounded to `row_multiple`); the remainder is padded to whole quanta and
        cut into power-of-two multiples of the quantum, largest first, so at
        most one quantum minus one row is padding. 5 rows left of 8 with a
        quantum of 2: a batch of 4, then one of 2.
        """
        full = self.rows_for(bucket)
        if remaining >= full:
            return full
        per_shard = full // self.row_multiple
        quantum = self.row_multiple * max(1, per_shard >> self.tail_halvings)
        quanta = -(-remaining // quantum)
        return quantum * (1 << (quanta.bit_length() - 1))


@dataclasses.dataclass
class EncodeStats:
    """What encoding cost: real tokens, tokens computed (padding included), and batches."""

    real_tokens: int = 0
    computed_tokens: int = 0
    batches: int = 0

    def add(self, other: EncodeStats) -> None:
        self.real_tokens += other.real_tokens
        self.computed_tokens += other.computed_tokens
        self.batches += other.batches


@dataclasses.dataclass(frozen=True)
class Batch:
    ids_BT: np.ndarray  # int32, right-padded with pad id 0
    lengths_B: np.ndarray  # int32, real tokens per row (padding rows count 1)
    rows: np.ndarray  # indices into the caller's sequences, one per real row

    @property
    def real_tokens(self) -> int:
        return int(self.lengths_B[: len(self.rows)].sum())


def pack_batches(token_ids: Sequence[Sequence[int]], cfg: BatchingConfig) -> Iterator[Batch]:
    """Sorts sequences by length and packs them into padded static-shape batches.

    Each bucket first fills whole batches. What is left over of every bucket then
    goes longest first into batches of the longest leftover's bucket, so short
    leftovers ride in spare rows instead of costing a batch of their own; the
    last of those batches shrinks to `BatchingConfig.tail_rows`.
    """
    lengths = np.fromiter((len(ids) for ids in token_ids), dtype=np.int64, count=len(token_ids))
    if lengths.size and lengths.max() > cfg.max_seq_len:
        raise ValueError(f"a sequence of {lengths.max()} tokens exceeds the window of {cfg.max_seq_len}")
    order = np.argsort(lengths, kind="stable")
    bucket_of = np.array([cfg.bucket_for(int(n)) for n in lengths[order]], dtype=np.int64)

    def pack(rows: np.ndarray, bucket: int, n_rows: int) -> Batch:
        ids = np.zeros((n_rows, bucket), dtype=np.int32)
        lens = np.ones(n_rows, dtype=np.int32)
        for r, i in enumerate(rows):
            ids[r, : lengths[i]] = token_ids[i]
            lens[r] = lengths[i]
        return Batch(ids_BT=ids, lengths_B=lens, rows=rows)

    leftovers = []  # ascending by length, like `order`
    for bucket in cfg.buckets:
        in_bucket = order[bucket_of == bucket]
        full_rows = cfg.rows_for(bucket)
        n_whole = len(in_bucket) // full_rows * full_rows
        for lo in range(0, n_whole, full_rows):
            yield pack(in_bucket[lo : lo + full_rows], bucket, full_rows)
        leftovers.extend(in_bucket[n_whole:])
    while leftovers:
        bucket = cfg.bucket_for(int(lengths[leftovers[-1]]))
        n_rows = cfg.tail_rows(bucket, len(leftovers))
        rows = np.array(leftovers[-n_rows:])
        del leftovers[-n_rows:]
        yield pack(rows, bucket, n_rows)
