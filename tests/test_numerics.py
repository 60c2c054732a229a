"""Forward and gradient against a float64 reference, every dtype pair."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import gpu_ops
import reference
from reference import DTYPES

# (x shape, weight shape): several ranks, odd sizes, row length 1, a long row.
SHAPES = [
    ((4, 8), (8,)),
    ((3, 5, 7), (7,)),
    ((2, 3, 5, 7), (5, 7)),
    ((13, 1), (1,)),
    ((1, 3), (3,)),
    ((6,), (6,)),
    ((3, 1000), (1000,)),
    ((2, 4, 512, 4), (512, 4)),
    ((2, 16384), (16384,)),
]


def _inputs(x_shape, w_shape, x_dtype, w_dtype, seed=0):
    kx, kw, kd = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(kx, x_shape, jnp.float32).astype(x_dtype)
    weight = (1 + 0.5 * jax.random.normal(kw, w_shape, jnp.float32)).astype(w_dtype)
    dy = jax.random.normal(kd, x_shape, jnp.float32).astype(w_dtype)
    return x, weight, dy


@pytest.mark.parametrize("x_dtype,w_dtype", list(itertools.product(DTYPES, DTYPES)))
@pytest.mark.parametrize("shapes", SHAPES[:4], ids=str)
def test_every_dtype_pair(x_dtype, w_dtype, shapes):
    reference.check_op(gpu_ops.rms_norm, *_inputs(*shapes, x_dtype, w_dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_shapes(dtype, shapes):
    reference.check_op(gpu_ops.rms_norm, *_inputs(*shapes, dtype, dtype, seed=1))


@pytest.mark.parametrize("eps", [0.0, 1e-6, 0.1])
def test_eps(eps):
    x, weight, dy = _inputs((5, 9), (9,), jnp.float64, jnp.float64)
    reference.check_op(lambda x, w: gpu_ops.rms_norm(x, w, eps), x, weight, dy, eps)


def test_check_grads_float64():
    x, weight, _ = _inputs((3, 4, 6), (4, 6), jnp.float64, jnp.float64)
    check_grads(gpu_ops.rms_norm, (x, weight), order=1, modes=["rev"])


def test_check_grads_of_a_loss_float32():
    x, weight, _ = _inputs((8, 16), (16,), jnp.float32, jnp.float32)

    def loss(x, weight):
        return jnp.mean(gpu_ops.rms_norm(x, weight) ** 2 * jnp.arange(16.0))

    check_grads(loss, (x, weight), order=1, modes=["rev"], atol=1e-2, rtol=1e-2)


def test_non_finite_rows_stay_in_their_row():
    x = jnp.array([[1.0, 2.0, 3.0], [np.nan, 1.0, 1.0], [np.inf, 1.0, 1.0], [4.0, 5.0, 6.0]])
    weight = jnp.ones(3)
    y = np.asarray(gpu_ops.rms_norm(x, weight))
    assert np.isnan(y[1]).all() and np.isnan(y[2, 0])
    np.testing.assert_allclose(y[[0, 3]], reference.forward(np.asarray(x)[[0, 3]], weight), rtol=1e-12)


def test_zero_row_with_zero_eps_is_not_silently_finite():
    y = gpu_ops.rms_norm(jnp.zeros((1, 4)), jnp.ones(4), eps=0.0)
    assert np.isnan(np.asarray(y)).all()  # 0 * inf: the maths is undefined


def test_empty_batch():
    x = jnp.zeros((0, 3, 8), jnp.bfloat16)
    weight = jnp.ones(8, jnp.float32)
    y, pullback = jax.vjp(gpu_ops.rms_norm, x, weight)
    assert y.shape == (0, 3, 8) and y.dtype == jnp.float32
    dx, dweight = pullback(jnp.zeros_like(y))
    assert dx.shape == x.shape and dx.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(dweight), np.zeros(8, np.float32))


# The accuracy every implementation reaches on long sums, relative to the
# result's largest magnitude, in units of the result dtype's machine epsilon:
# the rounding of the result itself (half a unit) plus what the sums lose.
# The CPU code sums in double, pairwise; the CUDA kernels sum in float32 (in
# double for float64 inputs), in trees of per-thread partial sums.
ACCURACY_IN_EPSILONS = {
    jnp.dtype(jnp.float16): 2,
    jnp.dtype(jnp.bfloat16): 2,
    jnp.dtype(jnp.float32): 8,
    jnp.dtype(jnp.float64): 1024,
}


def _assert_accurate(actual, expected):
    dtype = jnp.dtype(actual.dtype)
    bound = ACCURACY_IN_EPSILONS[dtype] * float(jnp.finfo(dtype).eps)
    error = np.max(np.abs(np.asarray(actual, np.float64) - expected))
    scale = np.max(np.abs(expected))
    assert error <= bound * scale, f"{dtype}: error {error / scale:.3g} of scale > {bound:.3g}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_row_of_2_25_ones_normalises_to_one(dtype):
    # A sequential float32 sum of squares stops growing at 2**24: this row
    # came out as sqrt(2) instead of 1.
    n = 2**25
    y = gpu_ops.rms_norm(jnp.ones((1, n), dtype), jnp.ones(n, dtype))
    _assert_accurate(y, np.full((1, n), 1 / np.sqrt(1 + 1e-5)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_long_random_row_is_accurate(dtype):
    x, weight, dy = _inputs((1, 2**20), (2**20,), dtype, dtype, seed=2)
    y, pullback = jax.vjp(gpu_ops.rms_norm, x, weight)
    _assert_accurate(y, reference.forward(x, weight))
    dx, _ = pullback(dy)
    _assert_accurate(dx, reference.vjp(x, weight, dy)[0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_weight_gradient_over_2_20_rows_is_accurate(dtype):
    x, weight, dy = _inputs((2**20, 8), (8,), dtype, dtype, seed=3)
    _, pullback = jax.vjp(gpu_ops.rms_norm, x, weight)
    _assert_accurate(pullback(dy)[1], reference.vjp(x, weight, dy)[1])


def test_second_order_derivatives_match_numerical_ones():
    # grad of grad and jax.hessian failed: the custom calls had no JVP rule.
    x, weight, _ = _inputs((3, 4, 6), (4, 6), jnp.float64, jnp.float64, seed=4)
    check_grads(gpu_ops.rms_norm, (x, weight), order=2, modes=["rev"])

    def loss(x, weight):
        return jnp.sum(gpu_ops.rms_norm(x, weight) ** 3)

    def reference_loss(x, weight):
        y = x / jnp.sqrt(jnp.mean(x * x, axis=(-2, -1), keepdims=True) + 1e-5) * weight
        return jnp.sum(y**3)

    for got, want in zip(jax.tree.leaves(jax.hessian(loss, argnums=(0, 1))(x, weight)),
                         jax.tree.leaves(jax.hessian(reference_loss, argnums=(0, 1))(x, weight))):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
