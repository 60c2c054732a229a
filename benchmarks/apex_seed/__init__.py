"""The seed tutorial's CUDA kernels (derived from NVIDIA apex), the baseline
the benchmarks measure gpu_ops against.

They are not part of gpu_ops: ``GPU_OPS_APEX_SEED=1 ./build.sh`` builds them
as the module ``gpu_ops_apex_seed``, whose FFI targets this package
registers and calls through ``jax.ffi.ffi_call`` and a ``custom_vjp``: the
shortest route from an FFI handler to a differentiable JAX function,
without primitives, vmap or sharding rules. NVIDIA GPUs only.
"""

from functools import partial

import jax
import numpy as np

from gpu_ops import ffi_targets
from gpu_ops.primitives import inv_rms_dtype, leading_shape
from gpu_ops.validation import check_rms_norm_args

FORWARD_TARGET = "gpu_ops_rms_norm_fwd_apex_seed"
BACKWARD_TARGET = "gpu_ops_rms_norm_bwd_apex_seed"


def built():
    """Whether this build of gpu_ops has the seed's kernels beside it."""
    try:
        import gpu_ops_apex_seed  # noqa: F401
    except ImportError:
        return False
    return True


def _register():
    import gpu_ops_apex_seed
    for name, capsule in gpu_ops_apex_seed.targets().items():
        jax.ffi.register_ffi_target(name, capsule, platform="CUDA")


if built():
    _register()


def rms_norm_apex_seed(x, weight, eps=1e-5):
    """Like :func:`gpu_ops.rms_norm` (under jit and grad), with the seed's kernels."""
    if not built():
        raise ImportError("the seed's kernels are not built: GPU_OPS_APEX_SEED=1 ./build.sh")
    eps = check_rms_norm_args(x, weight, eps, "rms_norm_apex_seed")
    return _rms_norm(x, weight, eps)


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def _rms_norm(x, weight, eps):
    return _forward(x, weight, eps)[0]


def _forward(x, weight, eps):
    y, inv_rms = jax.ffi.ffi_call(FORWARD_TARGET, (
        jax.ShapeDtypeStruct(x.shape, weight.dtype),
        jax.ShapeDtypeStruct(leading_shape(x, weight), inv_rms_dtype(x.dtype)),
    ))(x, weight, eps=np.float64(eps))
    return y, (inv_rms, x, weight)


def _backward(eps, residuals, dy):
    inv_rms, x, weight = residuals
    # gpu_ops' weight-gradient scratch (cuda_scratch.h)
    (partials,) = ffi_targets.cuda_backward_scratch(x.shape, x.dtype, weight.shape)
    dx, dweight, _ = jax.ffi.ffi_call(BACKWARD_TARGET, (
        jax.ShapeDtypeStruct(x.shape, x.dtype),
        jax.ShapeDtypeStruct(weight.shape, weight.dtype),
        jax.ShapeDtypeStruct(*partials),
    ))(dy, inv_rms, x, weight, eps=np.float64(eps))
    return dx, dweight


_rms_norm.defvjp(_forward, _backward)
