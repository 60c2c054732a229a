"""Differentiation of RMS norm, forward and reverse, from one JVP rule.

``jax.custom_vjp`` would give reverse mode only: JAX cannot run a VJP
forwards, so ``jax.jvp``, ``jax.jacfwd`` and ``jax.linearize`` would fail.
Instead each function here has a ``jax.custom_jvp`` rule: the forward kernel
gives y and ``inv_rms`` (one number per row), and y's tangent comes from
``rms_norm_tangent_p``, a primitive linear in the tangents of x and the
weight. Forward mode evaluates that primitive (its lowering is the tangent's
maths in jnp). Reverse mode linearises the rule and transposes the linear
part, and the primitive's transpose is the backward kernel: ``grad`` still
runs the forward kernel, keeps ``inv_rms``, x and the weight, and runs the
backward kernel, as a custom VJP would. ``eps``, ``kernels`` (the kernels
the primitives lower to) and ``out_dtype`` (y's dtype, None for the
weight's) are static, non-differentiable arguments.

With a residual add, ``(y, total) = (norm(x + residual) * weight, x +
residual)``: total's tangent is dx + dresidual, the norm's input tangent,
so that in reverse mode x and the residual both receive total's gradient
plus the norm's.

Quantised to float8 (``through_fp8`` and its variants), y's tangent passes
straight through the quantisation: the dequantised y has y's tangent, the
convention of float8 training (rounding has no useful derivative), read
back in float32 as y is. With a given scale, neither the scale nor y's
largest magnitude, which the forward also returns, has a derivative.

With a float8 input (``through_fp8_input``), x is quantised before the
norm, and the tangent passes straight through that quantisation the same
way: ``rms_norm_from_fp8_tangent_p``, whose transpose is the backward kernel
of a float8 input, which reads the float8 values and their scales, not x.
"""

from functools import partial

import jax
import jax.numpy as jnp
from jax.interpreters import ad

from gpu_ops import float8
from gpu_ops.primitives import (rms_norm_bwd_p, rms_norm_fp8_fwd_p, rms_norm_fp8_scaled_fwd_p,
                                rms_norm_from_fp8_bwd_p, rms_norm_from_fp8_tangent_p,
                                rms_norm_fwd_p, rms_norm_tangent_p,
                                rms_norm_through_fp8_input_fwd_p)


def forward(operands, eps, kernels="ffi", out_dtype=None, residual=False):
    """The forward primitive's results: y and inv_rms, then x + residual
    where a residual operand is added. A plain forward leaves the parameter
    residual out (its default), so that its jaxprs stay short."""
    variant = {"residual": True} if residual else {}
    return tuple(rms_norm_fwd_p.bind(*operands, eps=eps, kernels=kernels,
                                     out_dtype=out_dtype, **variant))


def tangent(x, weight, inv_rms, dx, dweight, eps, kernels="ffi", out_dtype=None):
    """y's tangent, for the tangents dx and dweight of x and the weight."""
    return rms_norm_tangent_p.bind(x, weight, inv_rms, dx, dweight, eps=eps,
                                   kernels=kernels, out_dtype=out_dtype)[0]


def _input_tangent(tangents):
    """The tangent of the norm's input: dx, or dx + dresidual."""
    dx, _, *dresidual = tangents
    return dx + dresidual[0] if dresidual else dx


@partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4))
def rms_norm(x, weight, eps, kernels="ffi", out_dtype=None):
    return forward((x, weight), eps, kernels, out_dtype)[0]


@rms_norm.defjvp
def _rms_norm_jvp(eps, kernels, out_dtype, primals, tangents):
    y, inv_rms = forward(primals, eps, kernels, out_dtype)
    return y, tangent(*primals, inv_rms, *tangents, eps, kernels, out_dtype)


@partial(jax.custom_jvp, nondiff_argnums=(3, 4, 5))
def rms_norm_residual(x, weight, residual, eps, kernels="ffi", out_dtype=None):
    y, _, total = forward((x, weight, residual), eps, kernels, out_dtype, residual=True)
    return y, total


@rms_norm_residual.defjvp
def _rms_norm_residual_jvp(eps, kernels, out_dtype, primals, tangents):
    y, inv_rms, total = forward(primals, eps, kernels, out_dtype, residual=True)
    dtotal = _input_tangent(tangents)
    dy = tangent(total, primals[1], inv_rms, dtotal, tangents[1], eps, kernels, out_dtype)
    return (y, total), (dy, dtotal)


def _read_back_tangent(normalised, weight, inv_rms, tangents, eps):
    """The tangent of y read back from float8, in float32: y's own."""
    dy = tangent(normalised, weight, inv_rms, _input_tangent(tangents), tangents[1], eps)
    return dy.astype(jnp.float32)


@partial(jax.custom_jvp, nondiff_argnums=(2,))
def through_fp8(x, weight, eps):
    values, _, scales = rms_norm_fp8_fwd_p.bind(x, weight, eps=eps)
    return float8.dequantize(values, scales)


@through_fp8.defjvp
def _through_fp8_jvp(eps, primals, tangents):
    x, weight = primals
    values, inv_rms, scales = rms_norm_fp8_fwd_p.bind(x, weight, eps=eps)
    return (float8.dequantize(values, scales),
            _read_back_tangent(x, weight, inv_rms, tangents, eps))


@partial(jax.custom_jvp, nondiff_argnums=(3,))
def residual_through_fp8(x, weight, residual, eps):
    values, _, scales, total = rms_norm_fp8_fwd_p.bind(x, weight, residual, eps=eps,
                                                       residual=True)
    return float8.dequantize(values, scales), total


@residual_through_fp8.defjvp
def _residual_through_fp8_jvp(eps, primals, tangents):
    values, inv_rms, scales, total = rms_norm_fp8_fwd_p.bind(*primals, eps=eps, residual=True)
    dy = _read_back_tangent(total, primals[1], inv_rms, tangents, eps)
    return (float8.dequantize(values, scales), total), (dy, _input_tangent(tangents))


def _scaled(operands, column, eps, residual=False):
    """(y read back, groups' largest |y|, [total]) and inv_rms, from the
    forward with a given scale (a column, (*rows, 1)); with `residual`, the
    operands' third added to x."""
    values, inv_rms, largest, *total = rms_norm_fp8_scaled_fwd_p.bind(
        *operands, column[..., 0], eps=eps, residual=residual)
    return (float8.dequantize_with(values, column), largest, *total), inv_rms


@partial(jax.custom_jvp, nondiff_argnums=(3,))
def scaled_through_fp8(x, weight, column, eps):
    return _scaled((x, weight), column, eps)[0]


@scaled_through_fp8.defjvp
def _scaled_through_fp8_jvp(eps, primals, tangents):
    x, weight, column = primals
    (y, largest), inv_rms = _scaled((x, weight), column, eps)
    dy = _read_back_tangent(x, weight, inv_rms, tangents[:2], eps)
    return (y, largest), (dy, jnp.zeros_like(largest))


@partial(jax.custom_jvp, nondiff_argnums=(4,))
def residual_scaled_through_fp8(x, weight, residual, column, eps):
    return _scaled((x, weight, residual), column, eps, residual=True)[0]


@residual_scaled_through_fp8.defjvp
def _residual_scaled_through_fp8_jvp(eps, primals, tangents):
    *operands, column = primals
    (y, largest, total), inv_rms = _scaled(operands, column, eps, residual=True)
    dy = _read_back_tangent(total, operands[1], inv_rms, tangents[:3], eps)
    return (y, largest, total), (dy, jnp.zeros_like(largest), _input_tangent(tangents[:3]))


@partial(jax.custom_jvp, nondiff_argnums=(2,))
def through_fp8_input(x32, weight, eps):
    """The norm of float32 x32 quantised to float8 in groups; its tangent in
    the weight's dtype (the caller's cast of x to float32 carries x's)."""
    return rms_norm_through_fp8_input_fwd_p.bind(x32, weight, eps=eps)[0]


@through_fp8_input.defjvp
def _through_fp8_input_jvp(eps, primals, tangents):
    y, inv_rms, values, scales = rms_norm_through_fp8_input_fwd_p.bind(*primals, eps=eps)
    dx32, dweight = tangents
    dy = rms_norm_from_fp8_tangent_p.bind(values, primals[1], scales, inv_rms, dx32, dweight,
                                          eps=eps)[0]
    return y, dy


# The tangent primitives are linear in their last two operands (the
# tangents of x and the weight). Their transposes are the backward kernels;
# the cotangents of x's and the weight's tangents come out in their dtypes.

def _linear_operands(*operands):
    """Which operands a transpose rule is asked for: the undefined ones."""
    return [ad.is_undefined_primal(a) for a in operands]


def _tangent_transpose(cotangents, x, weight, inv_rms, dx, dweight, *, eps, kernels,
                       out_dtype):
    del out_dtype  # (the cotangent's dtype)
    assert _linear_operands(x, weight, inv_rms) == [False] * 3
    dy = ad.instantiate_zeros(cotangents[0])
    ct_x, ct_weight = rms_norm_bwd_p.bind(dy, inv_rms, x, weight, eps=eps, kernels=kernels)
    wanted = _linear_operands(dx, dweight)
    return (None, None, None,
            ct_x if wanted[0] else None, ct_weight if wanted[1] else None)


def _from_fp8_tangent_transpose(cotangents, values, weight, scales, inv_rms, dx32, dweight,
                                *, eps):
    assert _linear_operands(values, weight, scales, inv_rms) == [False] * 4
    dy = ad.instantiate_zeros(cotangents[0])
    ct_x, ct_weight = rms_norm_from_fp8_bwd_p.bind(dy, inv_rms, values, weight, scales, eps=eps)
    wanted = _linear_operands(dx32, dweight)
    return (None, None, None, None, ct_x.astype(jnp.float32) if wanted[0] else None,
            ct_weight if wanted[1] else None)


ad.primitive_transposes[rms_norm_tangent_p] = _tangent_transpose
ad.primitive_transposes[rms_norm_from_fp8_tangent_p] = _from_fp8_tangent_transpose
