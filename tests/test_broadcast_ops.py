"""The decoder's kernel-saving rewrites against float64 numpy: decode's per-step rotation matrices, row means as
products, and broadcasts as products with ones (values and gradients)."""
import math

import numpy as np
import pytest

import mindspore as ms
from mindspore import Tensor, nn, ops

from mindrl.models.broadcast import EXPAND_MIN, expand, row_mean, row_sum
from mindrl.models.decoder import rope_matrices, rotation_matrix


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


class _Rope(nn.Cell):
    def __init__(self, d, scale):
        super().__init__()
        self.rot, self.scale = Tensor(rotation_matrix(d)), scale
        self.bmm = ops.BatchMatMul()

    def construct(self, x, cos, sin):
        m_q, m_k = rope_matrices(cos, sin, self.rot, self.scale)
        return self.bmm(x, m_q), self.bmm(x, m_k)


@pytest.mark.parametrize("d", [64, 128])
def test_rope_matrices_rotate_like_rotate_half(d, rng):
    """x @ M_k == x * cos + rotate_half(x) * sin for every row's own position; M_q also applies 1/sqrt(d)."""
    b, heads = 5, 3
    pos = rng.integers(0, 4000, size=b).astype(np.float64)
    inv = 1.0 / (1e6 ** (np.arange(0, d, 2) / d))
    ang = np.concatenate([np.outer(pos, inv)] * 2, -1)             # [b, d]
    x = rng.normal(size=(b, heads, d))
    want_k = x * np.cos(ang)[:, None] + rotate_half(x) * np.sin(ang)[:, None]
    scale = 1.0 / math.sqrt(d)
    got_q, got_k = _Rope(d, scale)(Tensor(x, ms.float32), Tensor(np.cos(ang), ms.float32),
                                   Tensor(np.sin(ang), ms.float32))
    np.testing.assert_allclose(got_k.asnumpy(), want_k, rtol=0, atol=2e-6)
    np.testing.assert_allclose(got_q.asnumpy(), want_k * scale, rtol=0, atol=2e-6)


class _RowStats(nn.Cell):
    def construct(self, x):
        return row_mean(x), row_sum(x)


class _Expand(nn.Cell):
    def __init__(self, like):
        super().__init__()
        self.like = like

    def construct(self, small):
        return expand(small, self.like)


class _ExpandLoss(_Expand):
    def construct(self, small, weights):
        return (expand(small, self.like) * weights).sum()


@pytest.mark.parametrize("n", [512, 896])
def test_row_mean_and_row_sum(n, rng):
    x = rng.normal(size=(7, 3, n))
    got_mean, got_sum = (t.asnumpy() for t in _RowStats()(Tensor(x, ms.float32)))
    assert got_mean.shape == got_sum.shape == (7, 3, 1)
    np.testing.assert_allclose(got_mean, x.mean(-1, keepdims=True), rtol=0, atol=1e-6)
    np.testing.assert_allclose(got_sum, x.sum(-1, keepdims=True), rtol=0, atol=2e-5)


@pytest.mark.parametrize("small_shape", ["row", "weight"])
def test_expand_values_and_gradient(small_shape, rng):
    """Big enough to be expanded as a product with ones: the values are exact copies, and the gradient of
    sum(expand(s) * g) is g summed over the broadcast axes."""
    rows, last = EXPAND_MIN // 64 + 3, 128
    like = Tensor(np.zeros((rows, last), np.float32))
    shape = (rows, 1) if small_shape == "row" else (last,)
    s = rng.normal(size=shape).astype(np.float32)
    g = rng.normal(size=(rows, last)).astype(np.float32)
    out = _Expand(like)(Tensor(s)).asnumpy()
    np.testing.assert_array_equal(out, np.broadcast_to(s, (rows, last)))
    grad = ms.grad(_ExpandLoss(like))(Tensor(s), Tensor(g)).asnumpy()
    want = g.astype(np.float64).sum(1, keepdims=True) if small_shape == "row" else g.astype(np.float64).sum(0)
    np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-4)


def test_small_shapes_broadcast_implicitly():
    """Below EXPAND_MIN elements expand() hands back the small tensor itself (decode's rows): no kernel."""
    s = Tensor(np.ones(8, np.float32))
    assert expand(s, Tensor(np.zeros((4, 8), np.float32))) is s
