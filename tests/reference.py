"""A float64 NumPy reference for RMS norm and its gradient, and tolerances."""

import jax
import jax.numpy as jnp
import numpy as np

DTYPES = [jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64]

# Relative tolerance by the dtype of the result being checked: a few units in
# the last place of that dtype, after accumulation in float32 (float64 for
# float64 inputs).
TOLERANCE = {
    jnp.dtype(jnp.float16): 4e-3,
    jnp.dtype(jnp.bfloat16): 2e-2,
    jnp.dtype(jnp.float32): 2e-5,
    jnp.dtype(jnp.float64): 1e-12,
}


def _f64(a):
    return np.asarray(a).astype(np.float64)


def _axes(x, weight):
    lead = x.ndim - weight.ndim
    return tuple(range(lead, x.ndim)), tuple(range(lead))


def forward(x, weight, eps=1e-5):
    x, weight = _f64(x), _f64(weight)
    norm_axes, _ = _axes(x, weight)
    inv = 1.0 / np.sqrt(np.mean(x * x, axis=norm_axes, keepdims=True) + eps)
    return x * inv * weight


def vjp(x, weight, dy, eps=1e-5):
    """(dx, dweight) for the cotangent dy."""
    x, weight, dy = _f64(x), _f64(weight), _f64(dy)
    norm_axes, row_axes = _axes(x, weight)
    inv = 1.0 / np.sqrt(np.mean(x * x, axis=norm_axes, keepdims=True) + eps)
    dyw = dy * weight
    dx = inv * (dyw - x * inv**2 * np.mean(dyw * x, axis=norm_axes, keepdims=True))
    dweight = np.sum(dy * x * inv, axis=row_axes)
    return dx, dweight


def jvp(x, weight, dx, dweight, eps=1e-5):
    """y's tangent for the tangents dx and dweight."""
    x, weight, dx, dweight = _f64(x), _f64(weight), _f64(dx), _f64(dweight)
    norm_axes, _ = _axes(x, weight)
    inv = 1.0 / np.sqrt(np.mean(x * x, axis=norm_axes, keepdims=True) + eps)
    dinv = -inv**3 * np.mean(x * dx, axis=norm_axes, keepdims=True)
    return weight * (dx * inv + x * dinv) + dweight * x * inv


def check_op(op, x, weight, dy, eps=1e-5):
    """Run op(x, weight) and its VJP with cotangent dy; compare all three results
    (y in its own dtype: the weight's, or x's where op asks for it)."""
    y, pullback = jax.vjp(op, x, weight)
    assert y.shape == x.shape
    assert_close(y, forward(x, weight, eps), y.dtype, x.dtype)
    dx, dweight = pullback(dy)
    expected_dx, expected_dweight = vjp(x, weight, dy, eps)
    assert_close(dx, expected_dx, x.dtype, x.dtype)
    assert_close(dweight, expected_dweight, weight.dtype, x.dtype)


def assert_close(actual, expected, dtype=None, x_dtype=None):
    """Compare with a tolerance set by the result's dtype, relative to its scale.

    The kernels accumulate in float32 unless x is float64, so a float64 result
    computed from a 16- or 32-bit x is only as exact as float32.
    """
    dtype = jnp.dtype(dtype or actual.dtype)
    assert jnp.dtype(actual.dtype) == dtype, (actual.dtype, dtype)
    expected = np.asarray(expected)
    x_dtype = jnp.dtype(x_dtype or dtype)
    accumulator = jnp.dtype(jnp.float64 if x_dtype == jnp.float64 else jnp.float32)
    tol = max(TOLERANCE[dtype], TOLERANCE[accumulator])
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    np.testing.assert_allclose(_f64(actual), expected, rtol=tol, atol=tol * scale)


def residual_inputs(shape, dtype, weight_ndim=1, weight_dtype=None, seed=0):
    """x, weight, residual, and cotangents for y and for x + residual."""
    kx, kw, kr, ky, kt = jax.random.split(jax.random.key(seed), 5)
    weight_dtype = weight_dtype or dtype
    x = jax.random.normal(kx, shape, jnp.float32).astype(dtype)
    residual = (3 * jax.random.normal(kr, shape, jnp.float32)).astype(dtype)
    weight = (1 + 0.3 * jax.random.normal(kw, shape[len(shape) - weight_ndim:],
                                          jnp.float32)).astype(weight_dtype)
    dy = jax.random.normal(ky, shape, jnp.float32).astype(weight_dtype)
    dtotal = jax.random.normal(kt, shape, jnp.float32).astype(dtype)
    return x, weight, residual, dy, dtotal


def check_residual_op(op, x, weight, residual, dy, dtotal, eps=1e-5):
    """Run (y, total) = op(x, weight, residual), the norm of total = x +
    residual and total, and its VJP with cotangents (dy, dtotal); compare
    with the reference, in which x and the residual both receive the norm's
    gradient plus dtotal."""
    (y, total), pullback = jax.vjp(op, x, weight, residual)
    # The sum is rounded to x's dtype once, as jnp's x + residual is.
    np.testing.assert_array_equal(total, x + residual)
    assert y.dtype == weight.dtype and total.dtype == x.dtype
    assert_close(y, forward(total, weight, eps), weight.dtype, x.dtype)
    dx, dweight, dresidual = pullback((dy, dtotal))
    dnorm, expected_dweight = vjp(total, weight, dy, eps)
    np.testing.assert_array_equal(dx, dresidual)
    assert_close(dx, dnorm + _f64(dtotal), x.dtype, x.dtype)
    assert_close(dweight, expected_dweight, weight.dtype, x.dtype)
