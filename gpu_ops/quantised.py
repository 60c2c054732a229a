"""RMS norm quantised to float8 for the next matmul: :func:`rms_norm_fp8`
(forward only) and :func:`rms_norm_through_fp8` (with a gradient).

The values are float8_e4m3fn with a float32 scale per group of 128 values
of a row, or with one scale given for the whole tensor (float8.py). Through
the FFI handlers the kernel quantises y as it computes it, and adds a
residual in the same pass; the HiJAX and Pallas routes quantise their y with
jnp.
"""

from functools import partial

import jax
import jax.numpy as jnp

from gpu_ops import autodiff, float8
from gpu_ops.implementations import IMPLEMENTATIONS, WITH_RESIDUAL, checked_operands, on_their_devices
from gpu_ops.primitives import rms_norm_fp8_fwd_p, rms_norm_fp8_scaled_fwd_p
from gpu_ops.validation import (check_float8_scale, check_float8_weight,
                                 check_read_back_dtype)


def _from_primitive(residual):
    """(values, scales, [x + residual]) from the quantised forward primitive."""
    def forward(*operands_and_eps):
        *operands, eps = operands_and_eps
        values, _, scales, *total = rms_norm_fp8_fwd_p.bind(*operands, eps=eps,
                                                            residual=residual)
        return (values, scales, *total)
    return forward


def _from_scaled_primitive(residual):
    """(values, groups' largest |y|, [x + residual]) from the primitive with a
    scale per row; the last operand is that scale as a column, (*rows, 1)."""
    def forward(*operands_and_eps):
        *operands, column, eps = operands_and_eps
        values, _, largest, *total = rms_norm_fp8_scaled_fwd_p.bind(
            *operands, column[..., 0], eps=eps, residual=residual)
        return (values, largest, *total)
    return forward


def _quantising_with_scale(defined):
    """(values, groups' largest |y|, [x + residual]) of `defined`'s y divided
    by the given scale (a column, (*rows, 1)), by jnp."""
    def quantised(*operands_and_eps):
        *operands, column, eps = operands_and_eps
        y, *total = _as_tuple(defined(*operands, eps))
        values, _ = float8.quantize_with(y, column)
        return (values, float8.group_largest(y), *total)
    return quantised


def _quantising(defined):
    """(values, scales, [x + residual]) of `defined`'s y (and sum), by jnp."""
    def quantised(*operands_and_eps):
        y, *total = _as_tuple(defined(*operands_and_eps))
        return (*float8.quantize(y), *total)
    return quantised


def _straight_through(defined):
    """`defined`'s y quantised and read back by jnp, in float32, its gradient y's."""
    def through(*operands_and_eps):
        y, *total = _as_tuple(defined(*operands_and_eps))
        y = float8.straight_through(y)
        return (y, *total) if total else y
    return through


def _straight_through_with_scale(defined):
    """`defined`'s y divided by the given scale (a column, (*rows, 1)),
    quantised and read back by jnp, in float32, its gradient y's; and its
    groups' largest |y| (the caller stops their gradient)."""
    def through(*operands_and_eps):
        *operands, column, eps = operands_and_eps
        y, *total = _as_tuple(defined(*operands, eps))
        y32 = y.astype(jnp.float32)
        read_back = jax.lax.stop_gradient(
            float8.dequantize_with(float8.quantize_with(y, column)[0], column))
        # read_back + 0, exactly, whose gradient is y's
        y_out = read_back + (y32 - jax.lax.stop_gradient(y32))
        return (y_out, float8.group_largest(y), *total)
    return through


def _as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


def _by_residual(plain, with_residual):
    """{whether a residual is added: the function for it}."""
    return {False: plain, True: with_residual}


def _routes(wrap):
    """{implementation: _by_residual(...)} of the HiJAX and Pallas routes'
    forwards, each wrapped by `wrap` (their y is quantised by jnp)."""
    return {name: _by_residual(wrap(IMPLEMENTATIONS[name]), wrap(WITH_RESIDUAL[name]))
            for name in ("hijax", "pallas")}


#: By implementation, and by whether a residual is added: the forward
#: quantised to float8, and y read back from it, without and with a given
#: scale (the scale's column the last operand). The FFI handlers quantise in
#: the kernel.
FP8 = {"ffi": _by_residual(_from_primitive(False), _from_primitive(True)),
       **_routes(_quantising)}
SCALED_FP8 = {"ffi": _by_residual(_from_scaled_primitive(False),
                                  _from_scaled_primitive(True)),
              **_routes(_quantising_with_scale)}
THROUGH_FP8 = {"ffi": _by_residual(autodiff.through_fp8, autodiff.residual_through_fp8),
               **_routes(_straight_through)}
SCALED_THROUGH_FP8 = {
    "ffi": _by_residual(autodiff.scaled_through_fp8,
                        autodiff.residual_scaled_through_fp8),
    **_routes(_straight_through_with_scale)}


@partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2, 3))
def _forward_only(name, eps, scaled, with_residual, operands):
    return (SCALED_FP8 if scaled else FP8)[name][with_residual](*operands, eps)


@_forward_only.defjvp
def _no_derivative(name, eps, scaled, with_residual, primals, tangents):
    del name, eps, scaled, with_residual, primals, tangents
    raise TypeError("rms_norm_fp8 has no derivative (its float8 values are rounded); "
                    "rms_norm_through_fp8 passes y's gradient straight through the "
                    "quantisation")


def _checked(function, x, weight, eps, residual, scale, implementation):
    """(operands, eps, name) of `function`'s arguments, checked: x, the
    weight, the residual if there is one, and the scale if there is one as a
    column of x's rank, (*rows, 1), so that it is placed, batched and
    exported as x is."""
    operands, eps, name = checked_operands(x, weight, eps, residual, implementation, FP8,
                                           function)
    check_float8_weight(operands[1], float8.GROUP, function)
    if scale is not None:
        scale = check_float8_scale(scale, function)
        operands = (*operands, jnp.broadcast_to(scale, (*operands[0].shape[:-1], 1)))
    return operands, eps, name


def rms_norm_fp8(x, weight, eps=1e-5, *, residual=None, scale=None,
                 implementation="ffi"):
    """``rms_norm(x, weight, eps)`` quantised to float8_e4m3fn for the next
    matmul, in groups of 128 values of a row that share a float32 scale, or
    with one scale given for the whole tensor.

    Returns ``(values, scales)``: values of x's shape in float8_e4m3fn, and
    scales of shape ``(*x.shape[:-1], x.shape[-1] // 128)``, each its
    group's largest magnitude over 448 (``gpu_ops.float8`` has the layout and
    ``dequantize``). With ``scale`` (a positive number or float32 scalar,
    typically from the largest magnitudes of earlier steps: delayed
    scaling), returns ``(values, amax)``: y / scale rounded to float8,
    saturating at +-448, and y's largest magnitude (over every device's
    rows), for the next scale. With ``residual``, of ``x + residual``, and
    that sum too, last. The weight must be one axis, a multiple of 128
    long. With the "ffi" implementation y is quantised in the
    kernel, from float32, without being written out first. Forward only:
    for a gradient, :func:`rms_norm_through_fp8`. Works under ``jit``,
    ``vmap`` and sharding as ``rms_norm`` does.
    """
    operands, eps, name = _checked("rms_norm_fp8", x, weight, eps, residual, scale,
                                   implementation)
    scaled, with_residual = scale is not None, residual is not None

    def forward_only(*operands_and_eps):
        *operands, eps = operands_and_eps
        return _forward_only(name, eps, scaled, with_residual, tuple(operands))

    values, per_group, *total = on_their_devices(forward_only, operands, eps)
    return (values, _amax(per_group) if scaled else per_group, *total)


def _amax(largest):
    """The tensor's largest |y| from its groups' (none for no rows: 0)."""
    return jnp.max(largest, initial=0.0)


def rms_norm_through_fp8(x, weight, eps=1e-5, *, residual=None, scale=None, dtype=None,
                         implementation="ffi"):
    """``rms_norm(x, weight, eps)`` as the next matmul sees it after float8
    quantisation: :func:`rms_norm_fp8`'s values times their scales, in
    ``dtype`` (the weight's by default; float32 keeps the read-back exact,
    and on a GPU lets XLA turn a matmul of it, with a given scale, into a
    float8 matmul). With ``scale``, times that scale, and y's largest
    magnitude too: ``(y, amax)``; with ``residual``, ``x + residual`` last.
    Its gradient passes straight through the quantisation (that of y itself,
    the convention of float8 training), into the norm's backward in the
    weight's dtype; the scale and amax have none.
    """
    operands, eps, name = _checked("rms_norm_through_fp8", x, weight, eps, residual, scale,
                                   implementation)
    dtype = check_read_back_dtype(dtype, operands[1].dtype)
    with_residual = residual is not None
    if scale is None:
        y, *total = _as_tuple(on_their_devices(THROUGH_FP8[name][with_residual], operands, eps))
        return (y.astype(dtype), *total) if total else y.astype(dtype)
    y, largest, *total = on_their_devices(SCALED_THROUGH_FP8[name][with_residual],
                                          operands, eps)
    return (y.astype(dtype), _amax(jax.lax.stop_gradient(largest)), *total)
