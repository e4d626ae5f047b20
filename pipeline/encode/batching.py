"""Static batch shapes: sequences packed into rows of the model's window, or padded into length buckets.

Every batch is one of a few [rows, row_len] shapes so that a whole job compiles
a handful of programs whatever lengths its corpus has. Both ways produce the
same `Batch`: token ids, a segment id per token (1, 2, ... for the sequences of
a row, 0 for padding) and each token's position within its own sequence, so the
encoder runs one program body for both.

- Packing (the default): several sequences back to back in rows of the window,
  placed largest first into the fullest row they fit. Few tokens are padding,
  and one row length serves every sequence: with the half and quarter tail a
  job compiles at most three programs.
- Buckets (`packing=False`): one sequence per row, rows padded to the next power
  of two from `min_bucket`; a batch holds `batch_size * max_seq_len` tokens, so
  short buckets carry more rows. Kept to compare against.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterator, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class BatchingConfig:
    max_seq_len: int  # the window: a packed row's length, and the longest bucket
    batch_size: int  # rows per data shard at full length
    packing: bool = True
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
    def slots(self) -> int:
        """Sequences a row may hold: its pooled output is [rows, slots, D].

        Half the window lets texts of two tokens and more fill a row. The
        pooling's cost grows with slots x row_len, a fraction of a percent of a
        layer's at any window up to 8k, so a tighter bound would only waste rows.
        """
        return max(1, self.max_seq_len // 2) if self.packing else 1

    @property
    def buckets(self) -> tuple[int, ...]:
        if self.packing:
            return (self.max_seq_len,)
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
        """Rows of the next batch in `bucket` when only `remaining` rows are left.

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

    def subtract(self, other: EncodeStats) -> None:
        self.real_tokens -= other.real_tokens
        self.computed_tokens -= other.computed_tokens
        self.batches -= other.batches


@dataclasses.dataclass(frozen=True)
class Batch:
    ids_BT: np.ndarray  # int32, pad id 0
    segments_BT: np.ndarray  # int32: 1, 2, ... for a row's sequences, 0 for padding
    positions_BT: np.ndarray  # int32: each token's position within its own sequence
    index: np.ndarray  # [n] the caller's indices of the sequences in this batch
    row: np.ndarray  # [n] the row of each of those sequences
    slot: np.ndarray  # [n] its slot in the pooled output: its segment id - 1

    @property
    def real_tokens(self) -> int:
        return int(np.count_nonzero(self.segments_BT))


def make_batches(token_ids: Sequence[Sequence[int]], cfg: BatchingConfig) -> Iterator[Batch]:
    """Token id sequences -> static-shape batches holding each sequence exactly once."""
    lengths = np.fromiter((len(ids) for ids in token_ids), dtype=np.int64, count=len(token_ids))
    if lengths.size and lengths.max() > cfg.max_seq_len:
        raise ValueError(f"a sequence of {lengths.max()} tokens exceeds the window of {cfg.max_seq_len}")
    if lengths.size and lengths.min() < 1:
        raise ValueError("an empty token sequence cannot be embedded: tokenizers add at least one special token")
    rows = _packed_rows(lengths, cfg.max_seq_len, cfg.slots) if cfg.packing else _bucket_rows(lengths)
    for bucket, batch_rows in _batches_of_rows(rows, lengths, cfg):
        yield _fill(batch_rows, bucket, token_ids, lengths)


def _packed_rows(lengths: np.ndarray, row_len: int, slots: int) -> list[list[int]]:
    """Sequences into rows of `row_len` tokens and at most `slots` sequences, best fit decreasing.

    Longest first, each sequence goes to the open row with the least room that
    still holds it, so a row is closed only when nothing left fits. Rows are
    found by their free room: `open_by_room[r]` lists the open rows with r
    tokens free, and the smallest room >= n is one `argmax` over a boolean
    vector of length row_len + 1, which keeps a million texts fast.
    """
    open_by_room: list[list[int]] = [[] for _ in range(row_len + 1)]
    has_room = np.zeros(row_len + 1, dtype=bool)
    rows: list[list[int]] = []
    for i in np.argsort(-lengths, kind="stable"):
        n = int(lengths[i])
        fits = has_room[n:]
        if fits.any():
            room = n + int(fits.argmax())
            r = open_by_room[room].pop()
            has_room[room] = bool(open_by_room[room])
        else:
            room, r = row_len, len(rows)
            rows.append([])
        rows[r].append(int(i))
        left = room - n
        if left and len(rows[r]) < slots:
            open_by_room[left].append(r)
            has_room[left] = True
    return rows


def _bucket_rows(lengths: np.ndarray) -> list[list[int]]:
    """One sequence per row, shortest first (so each bucket's rows are contiguous)."""
    return [[int(i)] for i in np.argsort(lengths, kind="stable")]


def _batches_of_rows(rows: list[list[int]], lengths: np.ndarray, cfg: BatchingConfig):
    """Rows -> (bucket, rows) batches of `rows_for(bucket)` rows, leftovers shrinking to `tail_rows`.

    Each bucket first fills whole batches. What is left over of every bucket then
    goes longest first into batches of the longest leftover's bucket, so short
    leftovers ride in spare rows instead of costing a batch of their own.
    """
    row_tokens = np.array([int(lengths[row].sum()) for row in rows], dtype=np.int64)
    bucket_of = np.array([cfg.bucket_for(int(n)) for n in row_tokens], dtype=np.int64)
    leftovers: list[int] = []  # ascending by bucket
    for bucket in cfg.buckets:
        in_bucket = np.flatnonzero(bucket_of == bucket)
        full = cfg.rows_for(bucket)
        n_whole = len(in_bucket) // full * full
        for lo in range(0, n_whole, full):
            yield bucket, [rows[r] for r in in_bucket[lo : lo + full]]
        leftovers.extend(in_bucket[n_whole:].tolist())
    while leftovers:
        bucket = int(bucket_of[leftovers[-1]])
        n_rows = cfg.tail_rows(bucket, len(leftovers))
        taken = leftovers[-n_rows:]
        del leftovers[-n_rows:]
        # Fewer sequences than rows: the rest of the batch is padding rows.
        yield bucket, [rows[r] for r in taken] + [[]] * (n_rows - len(taken))


def _fill(batch_rows: list[list[int]], row_len: int, token_ids, lengths: np.ndarray) -> Batch:
    shape = (len(batch_rows), row_len)
    ids, segments, positions = (np.zeros(shape, dtype=np.int32) for _ in range(3))
    index, row_of, slot_of = [], [], []
    for r, members in enumerate(batch_rows):
        start = 0
        for slot, i in enumerate(members):
            n = int(lengths[i])
            ids[r, start : start + n] = token_ids[i]
            segments[r, start : start + n] = slot + 1
            positions[r, start : start + n] = np.arange(n)
            index.append(i)
            row_of.append(r)
            slot_of.append(slot)
            start += n
    as_array = lambda values: np.asarray(values, dtype=np.int64)  # noqa: E731
    return Batch(ids, segments, positions, as_array(index), as_array(row_of), as_array(slot_of))
