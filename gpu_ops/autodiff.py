"""Reverse-mode differentiation of RMS norm with ``jax.custom_vjp``.

The forward keeps ``inv_rms`` (one number per row) as a residual so the
backward need not recompute it; ``eps`` is a static, non-differentiable
argument, and so is ``kernels``, the kernels the primitives lower to.

With a residual add, ``(y, total) = (norm(x + residual) * weight, x +
residual)``: the gradient reaching ``total`` is the norm's gradient plus the
one that flows in along the residual stream (``total``'s own cotangent), and
x and the residual both receive it, since each enters ``total`` once.

Quantised to float8 (``rms_norm_through_fp8_vjp``), y's gradient passes
straight through the quantisation: the gradient of the dequantised y is
taken as that of y itself, the convention of float8 training (rounding has
no useful derivative). With a given scale, neither the scale nor y's largest
magnitude, which the forward also returns, has a gradient. These read y back
in float32, where values times scales are exact and XLA can still fold the
read-back into a float8 matmul; the caller casts it to the dtype it wants,
and the backward takes y's gradient in the weight's dtype, as the norm's
own backward does.

With a float8 input (``rms_norm_through_fp8_input_vjp``), x is quantised
before the norm and its gradient passes straight through that quantisation
the same way: dx is the gradient at the dequantised x. The forward keeps
the float8 values and their scales for the backward, not x.
"""

from functools import partial

import jax
import jax.numpy as jnp

from gpu_ops import float8, higher_order
from gpu_ops.primitives import (rms_norm_fp8_fwd_p, rms_norm_fp8_scaled_fwd_p,
                                rms_norm_from_fp8_bwd_p, rms_norm_through_fp8_input_fwd_p)


@partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def rms_norm_vjp(x, weight, eps, kernels="ffi"):
    y, _ = higher_order.forward(x, weight, eps, kernels)
    return y


def _forward(x, weight, eps, kernels):
    y, inv_rms = higher_order.forward(x, weight, eps, kernels)
    return y, (inv_rms, x, weight)


def _backward(eps, kernels, residuals, dy):
    inv_rms, x, weight = residuals
    dx, dweight = higher_order.backward(dy, inv_rms, x, weight, eps, kernels)
    return dx, dweight


rms_norm_vjp.defvjp(_forward, _backward)


@partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def rms_norm_residual_vjp(x, weight, residual, eps, kernels="ffi"):
    y, _, total = higher_order.residual_forward(x, weight, residual, eps, kernels)
    return y, total


def _residual_forward(x, weight, residual, eps, kernels):
    y, inv_rms, total = higher_order.residual_forward(x, weight, residual, eps, kernels)
    return (y, total), (inv_rms, total, weight)


def _residual_backward(eps, kernels, saved, cotangents):
    """(dx, dweight, dresidual) from the forward's saved (inv_rms, total,
    weight) and the cotangents of y and of total."""
    inv_rms, total, weight = saved
    dy, dtotal_stream = cotangents
    dtotal, dweight = higher_order.backward(dy, inv_rms, total, weight, eps, kernels)
    dtotal = dtotal + dtotal_stream
    return dtotal, dweight, dtotal


rms_norm_residual_vjp.defvjp(_residual_forward, _residual_backward)


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def rms_norm_through_fp8_vjp(x, weight, eps):
    return _through_fp8_forward(x, weight, eps)[0]


def _through_fp8_forward(x, weight, eps):
    values, inv_rms, scales = rms_norm_fp8_fwd_p.bind(x, weight, eps=eps)
    return float8.dequantize(values, scales), (inv_rms, x, weight)


def _through_fp8_backward(eps, saved, dy):
    inv_rms, x, weight = saved
    return higher_order.backward(dy.astype(weight.dtype), inv_rms, x, weight, eps, "ffi")


rms_norm_through_fp8_vjp.defvjp(_through_fp8_forward, _through_fp8_backward)


@partial(jax.custom_vjp, nondiff_argnums=(3,))
def rms_norm_residual_through_fp8_vjp(x, weight, residual, eps):
    return _residual_through_fp8_forward(x, weight, residual, eps)[0]


def _residual_through_fp8_forward(x, weight, residual, eps):
    values, inv_rms, scales, total = rms_norm_fp8_fwd_p.bind(x, weight, residual, eps=eps)
    return (float8.dequantize(values, scales), total), (inv_rms, total, weight)


def _residual_through_fp8_backward(eps, saved, cotangents):
    weight = saved[-1]  # (inv_rms, total, weight)
    dy, dtotal = cotangents
    return _residual_backward(eps, "ffi", saved, (dy.astype(weight.dtype), dtotal))


rms_norm_residual_through_fp8_vjp.defvjp(_residual_through_fp8_forward,
                                         _residual_through_fp8_backward)


@partial(jax.custom_vjp, nondiff_argnums=(3,))
def rms_norm_scaled_through_fp8_vjp(x, weight, column, eps):
    return _scaled_through_fp8_forward(x, weight, column, eps)[0]


def _scaled_through_fp8_forward(x, weight, column, eps):
    values, inv_rms, largest = rms_norm_fp8_scaled_fwd_p.bind(x, weight, column[..., 0], eps=eps)
    y = float8.dequantize_with(values, column)
    return (y, largest), (inv_rms, x, weight, column)


def _scaled_through_fp8_backward(eps, saved, cotangents):
    inv_rms, x, weight, column = saved
    dy, _ = cotangents  # y's largest magnitudes have no gradient
    dx, dweight = higher_order.backward(dy.astype(weight.dtype), inv_rms, x, weight, eps, "ffi")
    return dx, dweight, jnp.zeros_like(column)


rms_norm_scaled_through_fp8_vjp.defvjp(_scaled_through_fp8_forward,
                                       _scaled_through_fp8_backward)


@partial(jax.custom_vjp, nondiff_argnums=(4,))
def rms_norm_residual_scaled_through_fp8_vjp(x, weight, residual, column, eps):
    return _residual_scaled_through_fp8_forward(x, weight, residual, column, eps)[0]


def _residual_scaled_through_fp8_forward(x, weight, residual, column, eps):
    values, inv_rms, largest, total = rms_norm_fp8_scaled_fwd_p.bind(
        x, weight, residual, column[..., 0], eps=eps)
    y = float8.dequantize_with(values, column)
    return (y, largest, total), (inv_rms, total, weight, column)


def _residual_scaled_through_fp8_backward(eps, saved, cotangents):
    inv_rms, total, weight, column = saved
    dy, _, dtotal = cotangents
    dx, dweight, dresidual = _residual_backward(eps, "ffi", (inv_rms, total, weight),
                                                (dy.astype(weight.dtype), dtotal))
    return dx, dweight, dresidual, jnp.zeros_like(column)


rms_norm_residual_scaled_through_fp8_vjp.defvjp(_residual_scaled_through_fp8_forward,
                                                _residual_scaled_through_fp8_backward)


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def rms_norm_through_fp8_input_vjp(x32, weight, eps):
    """The norm of float32 x32 quantised to float8 in groups; dx in float32
    (the caller's cast to x's dtype transposes to the cast back)."""
    return _through_fp8_input_forward(x32, weight, eps)[0]


def _through_fp8_input_forward(x32, weight, eps):
    y, inv_rms, values, scales = rms_norm_through_fp8_input_fwd_p.bind(x32, weight, eps=eps)
    return y, (inv_rms, values, weight, scales)


def _through_fp8_input_backward(eps, saved, dy):
    inv_rms, values, weight, scales = saved
    dx, dweight = rms_norm_from_fp8_bwd_p.bind(dy, inv_rms, values, weight, scales, eps=eps)
    return dx.astype(jnp.float32), dweight


rms_norm_through_fp8_input_vjp.defvjp(_through_fp8_input_forward, _through_fp8_input_backward)
