import numpy as np
import pytest

from pipeline.encode.batching import BatchingConfig, make_batches


def _random_sequences(seed: int, n: int, longest: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 1000, size=k).tolist() for k in rng.integers(1, longest + 1, size=n)]


def _check_layout(batches, seqs, cfg: BatchingConfig) -> None:
    """Every sequence exactly once, intact, in one segment of one row, its positions restarting at 0."""
    seen = []
    for batch in batches:
        rows, row_len = batch.ids_BT.shape
        assert batch.segments_BT.shape == batch.positions_BT.shape == (rows, row_len)
        for i, r, slot in zip(batch.index, batch.row, batch.slot):
            (where,) = np.nonzero(batch.segments_BT[r] == slot + 1)
            assert where.tolist() == list(range(where[0], where[0] + len(seqs[i])))  # contiguous
            assert batch.ids_BT[r, where].tolist() == seqs[i]
            assert batch.positions_BT[r, where].tolist() == list(range(len(seqs[i])))
        assert batch.segments_BT.max(initial=0) <= cfg.slots
        # Padding is segment 0 with pad id 0, and lies after a row's sequences.
        padding = batch.segments_BT == 0
        assert not batch.ids_BT[padding].any()
        assert (np.diff(padding.astype(int), axis=1) >= 0).all()
        seen.extend(batch.index.tolist())
    assert sorted(seen) == list(range(len(seqs)))


def test_packing_fills_rows_of_the_window():
    cfg = BatchingConfig(max_seq_len=256, batch_size=4)
    seqs = _random_sequences(0, 600, 256)
    batches = list(make_batches(seqs, cfg))
    _check_layout(batches, seqs, cfg)
    assert {b.ids_BT.shape for b in batches} <= {(4, 256), (2, 256), (1, 256)}
    real = sum(b.real_tokens for b in batches)
    assert real == sum(map(len, seqs))
    # Half the sequences are longer than half a row, so ~300 rows hold one each: near the bound.
    assert real / sum(b.ids_BT.size for b in batches) > 0.95


def test_short_texts_share_rows_up_to_the_slot_limit():
    cfg = BatchingConfig(max_seq_len=16, batch_size=2)
    seqs = [[5]] * 20  # one token each: 8 slots per row of 16
    batches = list(make_batches(seqs, cfg))
    _check_layout(batches, seqs, cfg)
    assert cfg.slots == 8
    assert [b.ids_BT.shape for b in batches] == [(2, 16), (1, 16)]
    assert [int(b.segments_BT.max(axis=1).sum()) for b in batches] == [16, 4]


def test_edge_sizes_pack():
    cfg = BatchingConfig(max_seq_len=8, batch_size=1, tail_halvings=0)
    for seqs in ([[1] * 8], [[1]], [[1] * 8, [2], [3] * 7], [[4] * 3] * 5):
        _check_layout(list(make_batches(seqs, cfg)), seqs, cfg)
    assert list(make_batches([], cfg)) == []


def test_best_fit_leaves_one_partial_row():
    cfg = BatchingConfig(max_seq_len=10, batch_size=8, tail_halvings=0)
    seqs = [[1] * 6, [2] * 4, [3] * 7, [4] * 3, [5] * 5, [6] * 5, [7] * 2]
    (batch,) = make_batches(seqs, cfg)
    _check_layout([batch], seqs, cfg)
    used = (batch.segments_BT > 0).sum(axis=1)
    assert sorted(used[used > 0].tolist()) == [2, 10, 10, 10]


def test_buckets_when_packing_is_off():
    cfg = BatchingConfig(max_seq_len=256, batch_size=4, packing=False)
    assert cfg.buckets == (32, 64, 128, 256) and cfg.slots == 1
    assert BatchingConfig(max_seq_len=384, batch_size=8, packing=False).buckets == (32, 64, 128, 256, 384)
    seqs = _random_sequences(1, 300, 256)
    batches = list(make_batches(seqs, cfg))
    _check_layout(batches, seqs, cfg)
    for batch in batches:
        full = cfg.rows_for(batch.ids_BT.shape[1])
        assert batch.ids_BT.shape[0] in (full, full // 2, full // 4)
        assert (batch.segments_BT.max(axis=1) <= 1).all()


def test_a_partial_batch_is_cut_into_halves_and_quarters():
    cfg = BatchingConfig(max_seq_len=256, batch_size=8)  # 8 rows at 256, quantum 2
    seqs = [[7] * 200] * 21
    shapes = [b.ids_BT.shape for b in make_batches(seqs, cfg)]
    assert shapes == [(8, 256), (8, 256), (4, 256), (2, 256)]  # 5 left: 4, then 1 in a batch of 2
    assert [cfg.tail_rows(256, n) for n in range(1, 9)] == [2, 2, 4, 4, 4, 4, 8, 8]


def test_tail_halvings_bound_the_smallest_shape():
    seqs = [[1, 2, 3]] * 3
    off = dict(packing=False, max_seq_len=256, batch_size=32)
    (whole,) = make_batches(seqs, BatchingConfig(**off, tail_halvings=0))
    assert whole.ids_BT.shape == (256, 32)
    small = [b.ids_BT.shape for b in make_batches(seqs, BatchingConfig(**off, tail_halvings=16))]
    assert small == [(2, 32), (1, 32)]


def test_too_long_and_empty_sequences_are_refused():
    with pytest.raises(ValueError, match="exceeds the window"):
        list(make_batches([[1] * 300], BatchingConfig(max_seq_len=256, batch_size=1)))
    with pytest.raises(ValueError, match="empty"):
        list(make_batches([[]], BatchingConfig(max_seq_len=256, batch_size=1)))


def test_leftovers_of_short_buckets_ride_in_spare_rows():
    cfg = BatchingConfig(max_seq_len=256, batch_size=4, packing=False)
    seqs = [[7] * 200] * 5 + [[7] * 20] * 3
    batches = list(make_batches(seqs, cfg))
    assert [b.ids_BT.shape for b in batches] == [(4, 256), (4, 256)]
    assert sum(b.real_tokens for b in batches) == 5 * 200 + 3 * 20


def test_rows_split_evenly_over_the_data_axis():
    cfg = BatchingConfig(max_seq_len=256, batch_size=4, row_multiple=8, packing=False)
    assert cfg.rows_for(256) == 32 and cfg.rows_for(32) == 256
    tail = BatchingConfig(max_seq_len=256, batch_size=4, row_multiple=8, tail_halvings=16)
    (batch,) = make_batches([[1, 2]] * 3, tail)
    assert batch.ids_BT.shape == (8, 256)


def test_many_short_texts_pack_quickly():
    seqs = [[1] * k for k in np.random.default_rng(2).integers(2, 30, size=100_000)]
    cfg = BatchingConfig(max_seq_len=256, batch_size=8)
    batches = list(make_batches(seqs, cfg))
    assert sum(len(b.index) for b in batches) == len(seqs)
    assert sum(b.real_tokens for b in batches) / sum(b.ids_BT.size for b in batches) > 0.99
