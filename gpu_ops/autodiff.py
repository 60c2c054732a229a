"""Reverse-mode differentiation of RMS norm with ``jax.custom_vjp``.

The forward keeps ``inv_rms`` (one number per row) as a residual so the
backward need not recompute it; ``eps`` is a static, non-differentiable
argument, and so is ``kernels``, the kernels the primitives lower to.

With a residual add, ``(y, total) = (norm(x + residual) * weight, x +
residual)``: the gradient reaching ``total`` is the norm's gradient plus the
one that flows in along the residual stream (``total``'s own cotangent), and
x and the residual both receive it, since each enters ``total`` once.
"""

from functools import partial

import jax

from gpu_ops import higher_order


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
    inv_rms, total, weight = saved
    dy, dtotal_stream = cotangents
    dtotal, dweight = higher_order.backward(dy, inv_rms, total, weight, eps, kernels)
    dtotal = dtotal + dtotal_stream
    return dtotal, dweight, dtotal


rms_norm_residual_vjp.defvjp(_residual_forward, _residual_backward)
