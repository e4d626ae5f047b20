"""Pooling per packed segment, by hand-made hidden states."""

import numpy as np
import pytest

from kernels import encoders


def test_each_mode_pools_each_segment_and_leaves_absent_slots_zero():
    hidden = np.arange(2 * 6 * 2, dtype=np.float32).reshape(2, 6, 2)
    segments = np.array([[1, 1, 2, 2, 2, 0], [2, 2, 1, 0, 0, 0]], np.int32)  # any order of ids
    mean = np.asarray(encoders.pool(hidden, segments, 3, "mean"))
    cls = np.asarray(encoders.pool(hidden, segments, 3, "cls"))
    last = np.asarray(encoders.pool(hidden, segments, 3, "lasttoken"))
    assert mean.shape == cls.shape == last.shape == (2, 3, 2)
    np.testing.assert_allclose(mean[0, :2], [hidden[0, 0:2].mean(0), hidden[0, 2:5].mean(0)])
    np.testing.assert_allclose(mean[1, :2], [hidden[1, 2], hidden[1, 0:2].mean(0)])
    np.testing.assert_array_equal(cls[0, :2], [hidden[0, 0], hidden[0, 2]])
    np.testing.assert_array_equal(cls[1, :2], [hidden[1, 2], hidden[1, 0]])
    np.testing.assert_array_equal(last[0, :2], [hidden[0, 1], hidden[0, 4]])
    np.testing.assert_array_equal(last[1, :2], [hidden[1, 2], hidden[1, 1]])
    for pooled in (mean, cls, last):
        assert not pooled[:, 2].any()  # no segment 3 in either row


def test_normalize_and_unknown_modes():
    x = np.array([[3.0, 4.0], [0.0, 0.0]], np.float32)
    np.testing.assert_allclose(np.asarray(encoders.normalize(x)), [[0.6, 0.8], [0.0, 0.0]])
    with pytest.raises(ValueError, match=r"unknown pooling mode 'median'; expected one of mean, cls, lasttoken, max"):
        encoders.pool(np.zeros((1, 2, 2), np.float32), np.ones((1, 2), np.int32), 1, "mean+median")


def test_sentence_transformers_other_modes_pool_each_segment_and_concatenate_in_order():
    """max, mean_sqrt_len_tokens and weightedmean by hand; sentence-transformers' own Pooling is checked
    against them through the bert-pooling-modes fixture (tests/kernels/encoders/test_families.py)."""
    rng = np.random.default_rng(1)
    hidden = rng.standard_normal((2, 7, 3)).astype(np.float32)
    segments = np.array([[1, 1, 1, 2, 2, 0, 0], [2, 1, 1, 1, 1, 3, 0]], np.int32)
    modes = ("max", "mean_sqrt_len_tokens", "weightedmean")
    got = np.asarray(encoders.pool(hidden, segments, 4, "+".join(modes)))
    assert got.shape == (2, 4, 9)
    for b in range(2):
        for slot in range(4):
            tokens = hidden[b, segments[b] == slot + 1]
            if not len(tokens):
                assert not got[b, slot].any()
                continue
            weights = np.arange(1, len(tokens) + 1, dtype=np.float32)[:, None]  # 1 for a sequence's first token
            want = {
                "max": tokens.max(0),
                "mean_sqrt_len_tokens": tokens.sum(0) / np.sqrt(len(tokens)),
                "weightedmean": (tokens * weights).sum(0) / weights.sum(),
            }
            np.testing.assert_allclose(got[b, slot], np.concatenate([want[m] for m in modes]), rtol=1e-5, atol=1e-6)
    # One mode alone is the same slice of the concatenation.
    np.testing.assert_allclose(np.asarray(encoders.pool(hidden, segments, 4, "weightedmean")), got[..., 6:], rtol=1e-6)


def test_projections_run_in_turn_with_their_bias_and_activation():
    rng = np.random.default_rng(0)
    x_BSI = rng.standard_normal((2, 3, 4), np.float32)
    first = {"w_IO": rng.standard_normal((4, 5), np.float32), "b_O": rng.standard_normal(5, np.float32)}
    second = {"w_IO": rng.standard_normal((5, 2), np.float32)}
    got = np.asarray(encoders.project(x_BSI, [first, second], ["tanh", "identity"]))
    np.testing.assert_allclose(got, np.tanh(x_BSI @ first["w_IO"] + first["b_O"]) @ second["w_IO"], rtol=1e-5)
    assert encoders.project(x_BSI, [], []) is x_BSI
    with pytest.raises(ValueError, match="unknown projection activation 'gelu'; known: tanh, identity"):
        encoders.project(x_BSI, [second], ["gelu"])


def test_a_residual_adds_the_input_itself_or_through_its_own_matrix():
    """sentence-transformers' Dense with use_residual: x where the sizes agree, x r_IO where they differ."""
    rng = np.random.default_rng(1)
    x_BSI = rng.standard_normal((2, 3, 4), np.float32)
    same = {"w_IO": rng.standard_normal((4, 4), np.float32), "b_O": rng.standard_normal(4, np.float32)}
    narrower = {"w_IO": rng.standard_normal((4, 2), np.float32), "r_IO": rng.standard_normal((4, 2), np.float32)}
    got = np.asarray(encoders.project(x_BSI, [same, narrower], ["tanh", "identity"], [True, True]))
    h_BSI = np.tanh(x_BSI @ same["w_IO"] + same["b_O"]) + x_BSI
    np.testing.assert_allclose(got, h_BSI @ narrower["w_IO"] + h_BSI @ narrower["r_IO"], rtol=1e-5, atol=1e-6)
    # Not asked for, the residual is not added, whatever the weights hold.
    plain = np.asarray(encoders.project(x_BSI, [same, narrower], ["tanh", "identity"], [False, False]))
    np.testing.assert_allclose(plain, np.tanh(x_BSI @ same["w_IO"] + same["b_O"]) @ narrower["w_IO"], rtol=1e-5)
