"""What each custom call computes, written in jax.numpy: the reference the
kernels are held to, and the maths from which JAX takes what the kernels do
not give it: the primitives' tangents (higher_order.py, for derivatives
of the gradient), and the tangent primitive's value
(autodiff.py's rule, and its lowering on a CPU, lowering.py)."""

import jax
import jax.numpy as jnp

from gpu_ops import float8
from gpu_ops.primitives import inv_rms_dtype


def _normalised_axes(x, weight):
    return tuple(range(x.ndim - weight.ndim, x.ndim))


def _per_row(inv_rms, weight):
    """inv_rms with the weight's axes added, to broadcast over each row."""
    return inv_rms.reshape(inv_rms.shape + (1,) * weight.ndim)


def forward_in_jnp(x, weight, eps, out_dtype=None):
    """(y, inv_rms) as the forward custom call computes them, y in out_dtype
    (None: the weight's)."""
    accumulator = inv_rms_dtype(x.dtype)
    x32 = x.astype(accumulator)
    inv_rms = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=_normalised_axes(x, weight)) + eps)
    y = weight.astype(accumulator) * (x32 * _per_row(inv_rms, weight))
    return y.astype(out_dtype or weight.dtype), inv_rms


def residual_forward_in_jnp(x, weight, residual, eps, out_dtype=None):
    """(y, inv_rms, x + residual) as the forward custom call with a residual
    computes them: the norm of x + residual, rounded to x's dtype."""
    total = x + residual
    return (*forward_in_jnp(total, weight, eps, out_dtype), total)


def backward_in_jnp(dy, inv_rms, x, weight, eps):
    """(dx, dweight) as the backward custom call computes them."""
    del eps
    accumulator = inv_rms_dtype(x.dtype)
    axes = _normalised_axes(x, weight)
    x32, inv = x.astype(accumulator), _per_row(inv_rms, weight)
    dy32, w32 = dy.astype(accumulator), weight.astype(accumulator)
    mean_dyw_x = jnp.mean(dy32 * w32 * x32, axis=axes, keepdims=True)
    dx = inv * (dy32 * w32 - x32 * inv * inv * mean_dyw_x)
    dweight = jnp.sum(dy32 * x32 * inv, axis=tuple(range(x.ndim - weight.ndim)))
    return dx.astype(x.dtype), dweight.astype(weight.dtype)


def tangent_in_jnp(x, weight, inv_rms, dx, dweight, out_dtype=None):
    """y's tangent for the tangents dx and dweight, as the tangent primitive
    computes it (linear in them), in y's dtype: with r = inv_rms, y = weight
    * x * r and dr = -r**3 * mean(x * dx), dy = weight * r * (dx - x * r**2 *
    mean(x * dx)) + dweight * x * r."""
    accumulator = inv_rms_dtype(x.dtype)
    axes = _normalised_axes(x, weight)
    x32, inv = x.astype(accumulator), _per_row(inv_rms, weight)
    dx32 = dx.astype(accumulator)
    mean_x_dx = jnp.mean(x32 * dx32, axis=axes, keepdims=True)
    dy = (weight.astype(accumulator) * inv * (dx32 - x32 * inv * inv * mean_x_dx)
          + dweight.astype(accumulator) * x32 * inv)
    return dy.astype(out_dtype or weight.dtype)


def from_fp8_tangent_in_jnp(values, weight, scales, inv_rms, dx, dweight, out_dtype=None):
    """The same for x given as float8 values and their scales."""
    return tangent_in_jnp(float8.dequantize(values, scales), weight, inv_rms, dx, dweight,
                          out_dtype)
