"""Second-order derivatives: the custom calls with JVP rules written in jnp.

``rms_norm``'s derivatives come from a JVP rule (``autodiff.py``) whose
reverse mode runs the backward custom call. Differentiating the gradient (``jax.hessian``,
grad of grad) needs the derivatives of both custom calls. :func:`forward`
and :func:`backward` bind the primitives for their values and take their
tangents from the same maths in jnp (``maths_in_jnp.py``), where JAX can
differentiate further; XLA drops the jnp values that nothing uses. The
primitives themselves stay without a differentiation rule (chapter 5 starts
from that error).
"""

from functools import partial

import jax

from gpu_ops.maths_in_jnp import backward_in_jnp, forward_in_jnp, residual_forward_in_jnp
from gpu_ops.primitives import rms_norm_bwd_p, rms_norm_fwd_p


@partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4))
def forward(x, weight, eps, kernels="ffi", out_dtype=None):
    """(y, inv_rms) from the forward custom call (or Pallas kernel)."""
    return tuple(rms_norm_fwd_p.bind(x, weight, eps=eps, kernels=kernels,
                                     out_dtype=out_dtype))


@partial(jax.custom_jvp, nondiff_argnums=(3, 4, 5))
def residual_forward(x, weight, residual, eps, kernels="ffi", out_dtype=None):
    """(y, inv_rms, x + residual) from the forward custom call with a residual."""
    return tuple(rms_norm_fwd_p.bind(x, weight, residual, eps=eps, kernels=kernels,
                                     out_dtype=out_dtype, residual=True))


@partial(jax.custom_jvp, nondiff_argnums=(4, 5))
def backward(dy, inv_rms, x, weight, eps, kernels="ffi"):
    """(dx, dweight) from the backward custom call (or Pallas kernel)."""
    return tuple(rms_norm_bwd_p.bind(dy, inv_rms, x, weight, eps=eps, kernels=kernels))


def _jvp_rule(call, in_jnp):
    """The JVP rule of `call`, whose arguments after the operands are eps,
    kernels and (for the forwards) out_dtype: its value from the call, its
    tangent from `in_jnp`, which takes the same but kernels."""
    def jvp(eps, kernels, *rest):
        *static, primals, tangents = rest
        _, output_tangents = jax.jvp(lambda *args: in_jnp(*args, eps, *static), primals,
                                     tangents)
        return call(*primals, eps, kernels, *static), output_tangents
    return jvp


forward.defjvp(_jvp_rule(forward, forward_in_jnp))
residual_forward.defjvp(_jvp_rule(residual_forward, residual_forward_in_jnp))
backward.defjvp(_jvp_rule(backward, backward_in_jnp))
