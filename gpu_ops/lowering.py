"""Lowering the per-shard primitives to XLA FFI custom calls, per platform.

``eps`` becomes a typed float64 attribute of the custom call (the handlers
declare ``Attr<double>("eps")``), so no opaque descriptor is needed; a
forward's variant (``residual``, and the quantised forward's given scales)
becomes a bool attribute of the one target of its family. Where
the primitive's ``kernels`` parameter is ``"pallas"``, it lowers to the
Pallas kernels instead: compiled by Mosaic GPU on CUDA, run in Pallas'
interpret mode on the CPU.
"""

from functools import partial

import numpy as np
import jax
from jax.core import ShapedArray
from jax.interpreters import mlir

from gpu_ops import ffi_targets, float8, maths_in_jnp, pallas_kernels
from gpu_ops.primitives import (rms_norm_bwd_shard_p, rms_norm_fp8_fwd_shard_p,
                                rms_norm_fp8_scaled_fwd_shard_p,
                                rms_norm_from_fp8_bwd_shard_p, rms_norm_from_fp8_fwd_shard_p,
                                rms_norm_from_fp8_tangent_p, rms_norm_fwd_shard_p,
                                rms_norm_tangent_p, rms_norm_through_fp8_input_fwd_shard_p)

_forward_call = jax.ffi.ffi_lowering(ffi_targets.FORWARD_TARGET)
_fp8_forward_call = jax.ffi.ffi_lowering(ffi_targets.FP8_FORWARD_TARGET)
_backward_call = jax.ffi.ffi_lowering(ffi_targets.BACKWARD_TARGET)
_from_fp8_forward_call = jax.ffi.ffi_lowering(ffi_targets.FROM_FP8_FORWARD_TARGET)
_from_fp8_backward_call = jax.ffi.ffi_lowering(ffi_targets.FROM_FP8_BACKWARD_TARGET)


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


def _backward_scratch(avals_in):
    _, _, x, weight = avals_in
    return ffi_targets.cuda_backward_scratch(x.shape, x.dtype, weight.shape)


def _from_fp8_backward_scratch(avals_in):
    _, _, values, weight, _ = avals_in
    return ffi_targets.cuda_from_fp8_backward_scratch(values.shape, weight.shape)


def _with_variant(call, **variants):
    """The rule of a forward with variants: the primitive's ``residual``
    (and the target's other `variants`) passed as bool attributes. (The call
    takes y's dtype, ``out_dtype``, from the result's type.)"""
    def lowering(ctx, *operands, eps, residual=False, out_dtype=None):
        del out_dtype
        return call(ctx, *operands, eps=np.float64(eps), residual=residual, **variants)
    return lowering


#: The lowering rules of the forward and backward custom calls, per platform:
#: the same forward on both (it has no scratch), the CUDA backward with its
#: scratch.
_FORWARD_RULE = _with_variant(_forward_call)
FORWARD_RULES = {"cpu": _FORWARD_RULE, "cuda": _FORWARD_RULE}
BACKWARD_RULES = {
    "cpu": _with_float64_eps(_backward_call),
    "cuda": _with_cuda_scratch(_backward_call, _backward_scratch),
}


def _on_plain_types(rule):
    """`rule`, traced with types that hold only shapes and dtypes.

    A kernel computes on one device's values, so its lowering needs no mesh.
    With one, Pallas' interpreter fails JAX's checks: inside ``shard_map``
    it indexes values that vary along mesh axes at block indices that vary
    along none, and with explicit mesh axes the values it creates take
    shardings that its updates of the operands do not have.
    """
    def lowering(ctx, *operands, **params):
        def plain(avals):
            return [ShapedArray(aval.shape, aval.dtype) for aval in avals]
        ctx = ctx.replace(avals_in=plain(ctx.avals_in), avals_out=plain(ctx.avals_out))
        with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((), ())):
            return rule(ctx, *operands, **params)
    return lowering


def _pallas_forward(x, weight, *added, eps, on_cpu, residual=False, out_dtype=None):
    """The Pallas forward; with a residual (`added`), of x + residual (added
    by XLA, not in the kernel), returned after y and inv_rms as the
    primitive's third result. y in out_dtype: the kernel's, in the weight's
    dtype, converted by XLA."""
    total = x + added[0] if residual else x
    y, inv_rms = pallas_kernels.forward(total, weight, eps=eps, on_cpu=on_cpu)
    return (y.astype(out_dtype or weight.dtype), inv_rms, *([total] if residual else []))


def _by_kernels(ffi_rule, pallas_function, platform):
    """The rule for the primitive's `kernels`: the FFI call's, or the Pallas kernels'."""
    pallas_rule = _on_plain_types(mlir.lower_fun(
        partial(pallas_function, on_cpu=platform == "cpu"), multiple_results=True))
    def lowering(ctx, *operands, eps, kernels="ffi", **params):
        rule = ffi_rule if kernels == "ffi" else pallas_rule
        return rule(ctx, *operands, eps=eps, **params)
    return lowering


for _platform in ("cpu", "cuda"):
    mlir.register_lowering(
        rms_norm_fwd_shard_p,
        _by_kernels(FORWARD_RULES[_platform], _pallas_forward, _platform),
        platform=_platform)
    mlir.register_lowering(
        rms_norm_bwd_shard_p,
        _by_kernels(BACKWARD_RULES[_platform], pallas_kernels.backward, _platform),
        platform=_platform)
# The quantised forward has no scratch, and no Pallas kernels (quantised.py
# quantises the Pallas kernels' y in jnp instead).
mlir.register_lowering(rms_norm_fp8_fwd_shard_p, _with_variant(_fp8_forward_call, scaled=False))
mlir.register_lowering(rms_norm_fp8_scaled_fwd_shard_p,
                       _with_variant(_fp8_forward_call, scaled=True))
# The norm of a float8 input: the FFI kernels only (the other routes
# dequantise in jnp, from_fp8.py); the CUDA backward has scratch.
mlir.register_lowering(rms_norm_from_fp8_fwd_shard_p, _with_float64_eps(_from_fp8_forward_call))
mlir.register_lowering(rms_norm_from_fp8_bwd_shard_p, _with_float64_eps(_from_fp8_backward_call),
                       platform="cpu")
mlir.register_lowering(rms_norm_from_fp8_bwd_shard_p,
                       _with_cuda_scratch(_from_fp8_backward_call, _from_fp8_backward_scratch),
                       platform="cuda")


def _quantised_from_fp8_forward(x, weight, *, eps):
    """(y, inv_rms, values, scales): x quantised by jnp, then normalised by
    the kernel from its float8 values."""
    values, scales = float8.quantize(x)
    y, inv_rms = rms_norm_from_fp8_fwd_shard_p.bind(values, weight, scales, eps=eps)
    return y, inv_rms, values, scales


mlir.register_lowering(rms_norm_through_fp8_input_fwd_shard_p, _on_plain_types(
    mlir.lower_fun(_quantised_from_fp8_forward, multiple_results=True)))


def _in_jnp(function):
    """A lowering rule computing `function` of the operands, and of y's dtype
    (out_dtype, where the primitive has it), with jnp, which XLA fuses and
    partitions as it does any jnp code."""
    def computed(*operands, **params):
        return [function(*operands, out_dtype=params.get("out_dtype"))]
    return mlir.lower_fun(computed, multiple_results=True)


# Forward mode's tangents (autodiff.py): a few elementwise products and one
# mean per row, which XLA fuses into one pass; reverse mode never runs them.
mlir.register_lowering(rms_norm_tangent_p, _in_jnp(maths_in_jnp.tangent_in_jnp))
mlir.register_lowering(rms_norm_from_fp8_tangent_p,
                       _in_jnp(maths_in_jnp.from_fp8_tangent_in_jnp))
