"""Lowering the per-shard primitives to XLA FFI custom calls, per platform.

``eps`` becomes a typed float64 attribute of the custom call (the handlers
declare ``Attr<double>("eps")``), so no opaque descriptor is needed.
"""

import numpy as np
import jax
from jax.core import ShapedArray
from jax.interpreters import mlir

from gpu_ops import ffi_targets
from gpu_ops.primitives import (
    inv_rms_dtype,
    rms_norm_bwd_shard_p,
    rms_norm_fwd_shard_p,
)

_forward_call = jax.ffi.ffi_lowering(ffi_targets.FORWARD_TARGET)
_backward_call = jax.ffi.ffi_lowering(ffi_targets.BACKWARD_TARGET)


def _with_float64_eps(call):
    """A lowering rule passing the primitive's eps as a float64 attribute."""
    def lowering(ctx, *operands, eps):
        return call(ctx, *operands, eps=np.float64(eps))
    return lowering


def _backward_cuda_lowering(ctx, dy, inv_rms, x, weight, *, eps):
    # The CUDA kernels sum the weight gradient in two stages and need a scratch
    # matrix for the first; it is an extra result of the custom call that the
    # primitive does not expose.
    x_aval, weight_aval = ctx.avals_in[2], ctx.avals_in[3]
    scratch = ShapedArray(
        ffi_targets.dweight_partials_shape(x_aval.shape, weight_aval.shape),
        inv_rms_dtype(x_aval.dtype),
    )
    ctx = ctx.replace(avals_out=[*ctx.avals_out, scratch])
    dx, dweight, _ = _with_float64_eps(_backward_call)(
        ctx, dy, inv_rms, x, weight, eps=eps)
    return [dx, dweight]


for _platform in ("cpu", "cuda"):
    mlir.register_lowering(
        rms_norm_fwd_shard_p, _with_float64_eps(_forward_call), platform=_platform)
mlir.register_lowering(
    rms_norm_bwd_shard_p, _with_float64_eps(_backward_call), platform="cpu")
mlir.register_lowering(rms_norm_bwd_shard_p, _backward_cuda_lowering, platform="cuda")
