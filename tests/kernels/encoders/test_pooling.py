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
    with pytest.raises(ValueError, match="expected one of mean, cls, lasttoken"):
        encoders.pool(np.zeros((1, 2, 2), np.float32), np.ones((1, 2), np.int32), 1, "max")


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
