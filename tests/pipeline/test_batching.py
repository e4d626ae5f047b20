import numpy as np
import pytest

from pipeline.batching import BatchingConfig, plan_batches
from pipeline.encoder import EncoderConfig
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
    for batch in plan_batches(seqs, cfg):
        shapes.add(batch.ids_BT.shape)
        assert batch.ids_BT.shape[0] == cfg.rows_for(batch.ids_BT.shape[1])
        for r, i in enumerate(batch.rows):
            n = len(seqs[i])
            assert batch.lengths_B[r] == n
            assert list(batch.ids_BT[r, :n]) == seqs[i] and not batch.ids_BT[r, n:].any()
        seen.extend(batch.rows.tolist())
    assert sorted(seen) == list(range(300))
    assert shapes <= {(32, 32), (16, 64), (8, 128), (4, 256)}


def test_shrink_tail_pads_rows_to_a_power_of_two():
    cfg = BatchingConfig(max_seq_len=256, batch_size=32, shrink_tail=True)
    (batch,) = plan_batches([[1, 2, 3]] * 3, cfg)
    assert batch.ids_BT.shape == (4, 32) and len(batch.rows) == 3
    assert batch.real_tokens == 9


def test_too_long_and_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        list(plan_batches([[1] * 300], BatchingConfig(max_seq_len=256, batch_size=1)))
    with pytest.raises(ConfigError, match="batch size"):
        EncoderConfig(batch_size=0)


def test_leftovers_of_short_buckets_ride_in_spare_rows():
    cfg = BatchingConfig(max_seq_len=256, batch_size=4)
    seqs = [[7] * 200] * 5 + [[7] * 20] * 3
    batches = list(plan_batches(seqs, cfg))
    assert [b.ids_BT.shape for b in batches] == [(4, 256), (4, 256)]
    assert sorted(i for b in batches for i in b.rows) == list(range(8))
    assert sum(b.real_tokens for b in batches) == 5 * 200 + 3 * 20


def test_rows_split_evenly_over_the_data_axis():
    cfg = BatchingConfig(max_seq_len=256, batch_size=4, row_multiple=8)
    assert cfg.rows_for(256) == 32 and cfg.rows_for(32) == 256
    (batch,) = plan_batches([[1, 2]] * 3, BatchingConfig(max_seq_len=256, batch_size=4, row_multiple=8, shrink_tail=True))
    assert batch.ids_BT.shape == (8, 32)
