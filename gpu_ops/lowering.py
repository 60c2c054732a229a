"""Lowering the per-shard primitives to XLA FFI custom calls, per platform.

``eps`` becomes a typed float64 attribute of the custom call (the handlers
declare ``Attr<double>("eps")``), so no opaque descriptor is needed.
"""

import numpy as np
import jax
from jax.core import ShapedArray
from jax.interpreters import mlir

from gpu_ops import ffi_targets
from gpu_ops.primitives import rms_norm_bwd_shard_p, rms_norm_fwd_shard_p

_forward_call = jax.ffi.ffi_lowering(ffi_targets.FORWARD_TARGET)
_backward_call = jax.ffi.ffi_lowering(ffi_targets.BACKWARD_TARGET)


def _with_float64_eps(call):
    """A lowering rule passing the primitive's eps as a float64 attribute."""
    def lowering(ctx, *operands, eps):
        return call(ctx, *operands, eps=np.float64(eps))
    return lowering


def _with_cuda_scratch(call, scratch):
    """A CUDA lowering rule that adds the call's scratch results.

    The CUDA kernels take their scratch memory as extra results of the custom
    call (so that XLA can record the call into a CUDA graph); ``scratch(avals_in)``
    gives their (shape, dtype). The primitive does not expose them.
    """
    def lowering(ctx, *operands, eps):
        extra = [ShapedArray(shape, dtype) for shape, dtype in scratch(ctx.avals_in)]
        ctx = ctx.replace(avals_out=[*ctx.avals_out, *extra])
        results = _with_float64_eps(call)(ctx, *operands, eps=eps)
        return results[:len(results) - len(extra)]
    return lowering


def _forward_scratch(avals_in):
    x, weight = avals_in
    return ffi_targets.cuda_forward_scratch(x.shape, weight.shape)


def _backward_scratch(avals_in):
    _, _, x, weight = avals_in
    return ffi_targets.cuda_backward_scratch(x.shape, x.dtype, weight.shape)


#: The lowering rules of the forward and backward custom calls, per platform.
FORWARD_RULES = {
    "cpu": _with_float64_eps(_forward_call),
    "cuda": _with_cuda_scratch(_forward_call, _forward_scratch),
}
BACKWARD_RULES = {
    "cpu": _with_float64_eps(_backward_call),
    "cuda": _with_cuda_scratch(_backward_call, _backward_scratch),
}

for _platform in ("cpu", "cuda"):
    mlir.register_lowering(rms_norm_fwd_shard_p, FORWARD_RULES[_platform], platform=_platform)
    mlir.register_lowering(rms_norm_bwd_shard_p, BACKWARD_RULES[_platform], platform=_platform)
