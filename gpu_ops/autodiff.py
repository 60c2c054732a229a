"""Reverse-mode differentiation of RMS norm with ``jax.custom_vjp``.

The forward keeps ``inv_rms`` (one number per row) as a residual so the
backward need not recompute it; ``eps`` is a static, non-differentiable
argument.
"""

from functools import partial

import jax

from gpu_ops.primitives import rms_norm_bwd_p, rms_norm_fwd_p


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def rms_norm_vjp(x, weight, eps):
    y, _ = rms_norm_fwd_p.bind(x, weight, eps=eps)
    return y


def _forward(x, weight, eps):
    y, inv_rms = rms_norm_fwd_p.bind(x, weight, eps=eps)
    return y, (inv_rms, x, weight)


def _backward(eps, residuals, dy):
    inv_rms, x, weight = residuals
    dx, dweight = rms_norm_bwd_p.bind(dy, inv_rms, x, weight, eps=eps)
    return dx, dweight


rms_norm_vjp.defvjp(_forward, _backward)
