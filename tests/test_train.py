import numpy as np
import pytest

from engine.story.model import Config, forward, init_params
from engine.story.train import loss_and_grads, make_batch, mean_loss

TINY = Config(vocab_size=11, context_length=8, d_model=8, n_heads=2, d_mlp=12)


@pytest.fixture
def tiny_problem():
    rng = np.random.default_rng(0)
    params = {k: v.astype(np.float64) + rng.standard_normal(v.shape) * 0.1 for k, v in init_params(TINY, rng).items()}
    batch = make_batch([list(rng.integers(0, 11, size=n)) for n in (8, 5, 7)])
    return params, batch


def test_backward_pass_matches_finite_differences(tiny_problem):
    params, batch = tiny_problem
    loss, grads = loss_and_grads(params, TINY, *batch)
    assert loss == pytest.approx(mean_loss(params, TINY, batch), rel=1e-12)
    eps = 1e-6
    for name, array in params.items():
        numeric = np.zeros_like(array)
        for index in np.ndindex(array.shape):
            old = array[index]
            array[index] = old + eps
            plus = mean_loss(params, TINY, batch)
            array[index] = old - eps
            minus = mean_loss(params, TINY, batch)
            array[index] = old
            numeric[index] = (plus - minus) / (2 * eps)
        scale = np.abs(numeric).max() + 1e-12
        assert np.abs(numeric - grads[name]).max() / scale < 1e-6, name


def test_padding_does_not_change_the_loss_or_gradients(tiny_problem):
    params, _ = tiny_problem
    seq = [1, 2, 3, 4, 5]
    alone = loss_and_grads(params, TINY, *make_batch([seq]))
    padded = loss_and_grads(params, TINY, *make_batch([seq, seq + [6, 7, 8]]))
    both = make_batch([seq, seq])
    assert alone[0] == pytest.approx(mean_loss(params, TINY, both))
    assert padded[0] != alone[0]  # the longer row counts, the padding of the short one does not
    ids, targets, mask = make_batch([seq, seq + [6, 7, 8]])
    assert mask[0].sum() == 4 and mask[1].sum() == 7


def test_training_math_stays_float32():
    rng = np.random.default_rng(1)
    params = init_params(TINY, rng)
    loss, grads = loss_and_grads(params, TINY, *make_batch([[1, 2, 3, 4], [5, 6, 7]]))
    assert all(g.dtype == np.float32 for g in grads.values())
    assert forward(params, TINY, np.array([[1, 2, 3]])).dtype == np.float32
