"""The seed tutorial's CUDA kernels (derived from NVIDIA apex), kept callable.

``gpu_ops.rms_norm`` runs the fast kernels. This module calls the seed's
kernels, registered as their own FFI targets, through ``jax.ffi.ffi_call``
and a ``custom_vjp``: the shortest route from an FFI handler to a
differentiable JAX function, without primitives, vmap or sharding rules. The
benchmarks use it as the baseline the fast kernels are measured against.
It runs on NVIDIA GPUs only.
"""

from functools import partial

import jax
import numpy as np

from gpu_ops import ffi_targets
from gpu_ops.primitives import inv_rms_dtype, leading_shape
from gpu_ops.validation import check_rms_norm_args

FORWARD_TARGET = "gpu_ops_rms_norm_fwd_apex_seed"
BACKWARD_TARGET = "gpu_ops_rms_norm_bwd_apex_seed"


def rms_norm_apex_seed(x, weight, eps=1e-5):
    """Like :func:`gpu_ops.rms_norm` (under jit and grad), with the seed's kernels."""
    eps = check_rms_norm_args(x, weight, eps)
    return _rms_norm(x, weight, eps)


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def _rms_norm(x, weight, eps):
    return _forward(x, weight, eps)[0]


def _scratch(shapes_and_dtypes):
    return [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in shapes_and_dtypes]


def _forward(x, weight, eps):
    y, inv_rms, *_ = jax.ffi.ffi_call(FORWARD_TARGET, (
        jax.ShapeDtypeStruct(x.shape, weight.dtype),
        jax.ShapeDtypeStruct(leading_shape(x, weight), inv_rms_dtype(x.dtype)),
        *_scratch(ffi_targets.cuda_forward_scratch(x.shape, weight.shape)),
    ))(x, weight, eps=np.float64(eps))
    return y, (inv_rms, x, weight)


def _backward(eps, residuals, dy):
    inv_rms, x, weight = residuals
    scratch = ffi_targets.cuda_backward_scratch(x.shape, x.dtype, weight.shape)
    dx, dweight, *_ = jax.ffi.ffi_call(BACKWARD_TARGET, (
        jax.ShapeDtypeStruct(x.shape, x.dtype),
        jax.ShapeDtypeStruct(weight.shape, weight.dtype),
        *_scratch(scratch),
    ))(dy, inv_rms, x, weight, eps=np.float64(eps))
    return dx, dweight


_rms_norm.defvjp(_forward, _backward)
