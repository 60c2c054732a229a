"""Second-order derivatives: JVP rules for the primitives, written in jnp.

``rms_norm``'s gradient comes from the custom VJP (``autodiff.py``), whose
backward is a custom call too. Differentiating the gradient (``jax.hessian``,
grad of grad) needs the derivatives of both custom calls. The rules here keep
each call for its values and take its tangents from the same maths in jnp,
where JAX can differentiate further; XLA drops the jnp values that nothing
uses.
"""

import jax
import jax.numpy as jnp
from jax.interpreters import ad

from gpu_ops.primitives import inv_rms_dtype, rms_norm_bwd_p, rms_norm_fwd_p


def _normalised_axes(x, weight):
    return tuple(range(x.ndim - weight.ndim, x.ndim))


def _per_row(inv_rms, weight):
    """inv_rms with the weight's axes added, to broadcast over each row."""
    return inv_rms.reshape(inv_rms.shape + (1,) * weight.ndim)


def forward_in_jnp(x, weight, eps):
    """(y, inv_rms) as the forward custom call computes them."""
    accumulator = inv_rms_dtype(x.dtype)
    x32 = x.astype(accumulator)
    inv_rms = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=_normalised_axes(x, weight)) + eps)
    y = weight.astype(accumulator) * (x32 * _per_row(inv_rms, weight))
    return y.astype(weight.dtype), inv_rms


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


def _jvp_rule(primitive, in_jnp):
    def jvp(primals, tangents, *, eps):
        outputs = primitive.bind(*primals, eps=eps)
        tangents = tuple(ad.instantiate_zeros(t) for t in tangents)
        _, output_tangents = jax.jvp(lambda *args: in_jnp(*args, eps), tuple(primals), tangents)
        return outputs, list(output_tangents)
    return jvp


ad.primitive_jvps[rms_norm_fwd_p] = _jvp_rule(rms_norm_fwd_p, forward_in_jnp)
ad.primitive_jvps[rms_norm_bwd_p] = _jvp_rule(rms_norm_bwd_p, backward_in_jnp)
