import numpy as np
import pytest

from pipeline.encode.batching import BatchingConfig, pack_batches
from pipeline.encode.encoder import EncoderConfig
from pipeline.errors import ConfigError


def test_buckets_are_powers_of_two_up_to_the_window():
    assert BatchingConfig(max_seq_len=256, batch_size=8).buckets == (32, 64, 128, 256)
    assert BatchingConfig(max_seq_len=384, batch_size=8).buckets == (32, 64, 128, 256, 384)


def test_every_sequence_lands_once_in_a_static_shape():
    rng = np.random.default_rng(0)
    cfg = BatchingConfig(max_seq_len=256, batch_size=4)
    seqs = [list(rng.integers(1, 1000, size=n)) for n in rng.integers(1, 257, size=300)]
    seen = []
    shapes = set()
    for batch in pack_batches(seqs, cfg):
        shapes.add(batch.ids_BT.shape)
        full_rows = cfg.rows_for(batch.ids_BT.shape[1])
        assert batch.ids_BT.shape[0] in (full_rows, full_rows // 2, full_rows // 4)
        for r, i in enumerate(batch.rows):
            n = len(seqs[i])
            assert batch.lengths_B[r] == n
            assert list(batch.ids_BT[r, :n]) == seqs[i] and not batch.ids_BT[r, n:].any()
        seen.extend(batch.rows.tolist())
    assert sorted(seen) == list(range(300))
    assert {shape for shape in shapes if shape[0] == cfg.rows_for(shape[1])} <= {(32, 32), (16, 64), (8, 128), (4, 256)}


def test_a_partial_batch_is_cut_into_halves_and_quarters():
    cfg = BatchingConfig(max_seq_len=256, batch_size=8)  # 8 rows at 256, quantum 2
    seqs = [[7] * 200] * 21
    shapes = [b.ids_BT.shape for b in pack_batches(seqs, cfg)]
    assert shapes == [(8, 256), (8, 256), (4, 256), (2, 256)]  # 5 left: 4, then 1 in a batch of 2
    assert [cfg.tail_rows(256, n) for n in range(1, 9)] == [2, 2, 4, 4, 4, 4, 8, 8]


def test_tail_halvings_bound_the_smallest_shape():
    seqs = [[1, 2, 3]] * 3
    (whole,) = pack_batches(seqs, BatchingConfig(max_seq_len=256, batch_size=32, tail_halvings=0))
    assert whole.ids_BT.shape == (256, 32)
    small = [b.ids_BT.shape for b in pack_batches(seqs, BatchingConfig(max_seq_len=256, batch_size=32, tail_halvings=16))]
    assert small == [(2, 32), (1, 32)]


def test_too_long_and_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        list(pack_batches([[1] * 300], BatchingConfig(max_seq_len=256, batch_size=1)))
    with pytest.raises(ConfigError, match="batch size"):
        EncoderConfig(batch_size=0)


def test_leftovers_of_short_buckets_ride_in_spare_rows():
    cfg = BatchingConfig(max_seq_len=256, batch_size=4)
    seqs = [[7] * 200] * 5 + [[7] * 20] * 3
    batches = list(pack_batches(seqs, cfg))
    assert [b.ids_BT.shape for b in batches] == [(4, 256), (4, 256)]
    assert sorted(i for b in batches for i in b.rows) == list(range(8))
    assert sum(b.real_tokens for b in batches) == 5 * 200 + 3 * 20


def test_rows_split_evenly_over_the_data_axis():
    cfg = BatchingConfig(max_seq_len=256, batch_size=4, row_multiple=8)
    assert cfg.rows_for(256) == 32 and cfg.rows_for(32) == 256
    tail = BatchingConfig(max_seq_len=256, batch_size=4, row_multiple=8, tail_halvings=16)
    (batch,) = pack_batches([[1, 2]] * 3, tail)
    assert batch.ids_BT.shape == (8, 32)
