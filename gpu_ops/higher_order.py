"""Second-order derivatives: JVP rules, in jnp, on the primitives that
autodiff.py's rule binds.

``rms_norm``'s derivatives come from one JVP rule (``autodiff.py``) whose
reverse mode runs the backward custom call. Differentiating the gradient
(``jax.hessian``, grad of grad) differentiates what that rule binds: the
forward primitive, the tangent primitive and, transposed, the backward
primitive. Each has a JVP rule here that takes its values from the
primitive and its tangents from the same maths in jnp (``maths_in_jnp.py``),
where JAX can differentiate further; XLA drops the jnp values that nothing
uses. The per-device primitives (``rms_norm_fwd_shard_p``, ...) have no
differentiation rule: chapter 5 starts from that error.
"""

from functools import partial

import jax
from jax.interpreters import ad

from gpu_ops import maths_in_jnp
from gpu_ops.primitives import (rms_norm_bwd_p, rms_norm_from_fp8_tangent_p, rms_norm_fwd_p,
                                rms_norm_tangent_p)


def _forward_in_jnp(*operands, eps, out_dtype=None, residual=False):
    """The forward's maths, of the variant that `residual` names."""
    maths = maths_in_jnp.residual_forward_in_jnp if residual else maths_in_jnp.forward_in_jnp
    return maths(*operands, eps, out_dtype)


def _jvp_in_jnp(primitive, in_jnp, takes):
    """The JVP rule of `primitive`: its values from the primitive, its
    tangents from `in_jnp` of the operands and of the parameters named in
    `takes`."""
    def jvp(primals, tangents, **params):
        tangents = tuple(ad.instantiate_zeros(t) for t in tangents)
        given = {name: params[name] for name in takes if name in params}
        _, out_tangents = jax.jvp(partial(in_jnp, **given), tuple(primals), tangents)
        out_tangents = list(out_tangents) if isinstance(out_tangents, tuple) else [out_tangents]
        return primitive.bind(*primals, **params), out_tangents
    return jvp


ad.primitive_jvps[rms_norm_fwd_p] = _jvp_in_jnp(
    rms_norm_fwd_p, _forward_in_jnp, ("eps", "out_dtype", "residual"))
ad.primitive_jvps[rms_norm_bwd_p] = _jvp_in_jnp(
    rms_norm_bwd_p, maths_in_jnp.backward_in_jnp, ("eps",))
# The tangent primitives' (forward mode's second derivatives: jacfwd of
# jacfwd, jacrev of jacfwd).
ad.primitive_jvps[rms_norm_tangent_p] = _jvp_in_jnp(
    rms_norm_tangent_p, maths_in_jnp.tangent_in_jnp, ("out_dtype",))
ad.primitive_jvps[rms_norm_from_fp8_tangent_p] = _jvp_in_jnp(
    rms_norm_from_fp8_tangent_p, maths_in_jnp.from_fp8_tangent_in_jnp, ("out_dtype",))
