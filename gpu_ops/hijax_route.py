"""RMS norm as one HiJAX primitive: the same operation, defined as a class.

``jax.experimental.hijax`` (experimental) lets one class carry an
operation's rules: its result type, how it expands into lower-level
operations, its JVP (forward mode), its VJP (reverse mode) and its batching
rule. Here it expands into the forward primitive of ``primitives.py``, so
that it reaches the same FFI handlers with their per-platform lowering and
partitioning rules; its JVP takes y's tangent from the same tangent
primitive as ``autodiff.py``, and its VJP calls the same backward.
"""

import jax
import jax.numpy as jnp
from jax.experimental import hijax
from jax.interpreters import ad

from gpu_ops import autodiff
from gpu_ops.primitives import rms_norm_bwd_p


class RmsNorm(hijax.HiPrim):
    """y = x / sqrt(mean(x**2 over weight's axes) + eps) * weight."""

    def __init__(self, x_type, weight_type, *, eps, out_dtype):
        self.in_avals = (x_type, weight_type)
        # y is typed like x (its mesh axes too), in out_dtype (None: the weight's).
        self.out_aval = x_type.update(dtype=out_dtype or weight_type.dtype, weak_type=False)
        self.params = dict(eps=eps, out_dtype=out_dtype)
        super().__init__()

    def expand(self, x, weight):
        return autodiff.forward((x, weight), self.eps, "ffi", self.out_dtype)[0]

    def jvp(self, primals, tangents):
        y, inv_rms = autodiff.forward(primals, self.eps, "ffi", self.out_dtype)
        dx, dweight = (ad.instantiate_zeros(t) for t in tangents)
        return y, autodiff.tangent(*primals, inv_rms, dx, dweight, self.eps, "ffi",
                                   self.out_dtype)

    # jax.linearize: the JVP's tangent, evaluated later
    lin, linearized = hijax.linearize_from_jvp

    def vjp_fwd(self, nonzero_tangents, x, weight):
        del nonzero_tangents
        y, inv_rms = autodiff.forward((x, weight), self.eps, "ffi", self.out_dtype)
        return y, (inv_rms, x, weight)

    def vjp_bwd_retval(self, residuals, dy):
        inv_rms, x, weight = residuals
        return tuple(rms_norm_bwd_p.bind(dy, inv_rms, x, weight, eps=self.eps, kernels="ffi"))

    def batch(self, axis_data, args, dims):
        x, weight = args
        x_dim, weight_dim = dims
        if weight_dim is None:  # a batch of x is more rows
            return rms_norm(jnp.moveaxis(x, x_dim, 0), weight, self.eps, self.out_dtype), 0
        # Each example has its own weight: vmap the expansion, whose forward
        # primitive runs once per example (batching.py). Plain jax.vmap, not
        # hijax.vmap_rule, which JAX 0.11 lacks: the arguments of a forward
        # call are never symbolic zeros, the case vmap_rule exists for.
        return jax.vmap(self.expand, in_axes=dims, axis_size=axis_data.size,
                        axis_name=axis_data.name,
                        spmd_axis_name=axis_data.spmd_name
                        or axis_data.explicit_mesh_axis)(x, weight), 0


def rms_norm(x, weight, eps, out_dtype=None):
    """The operation through the HiJAX primitive (arguments already checked)."""
    return RmsNorm(jax.typeof(x), jax.typeof(weight), eps=eps, out_dtype=out_dtype)(x, weight)
