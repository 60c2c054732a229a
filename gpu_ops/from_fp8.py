"""RMS norm of a float8 input: :func:`rms_norm_from_fp8` (forward only) and
:func:`rms_norm_through_fp8_input` (with a gradient).

The input is float8_e4m3fn values with a float32 scale per group of 128
values of a row (float8.py), as the commissioned Triton kernel takes it:
through the FFI handlers the kernels dequantise it as they read it, in the
forward and in the backward, so that each reads one byte per value of x
instead of two or four. The HiJAX and Pallas routes dequantise it with jnp
first.
"""

from functools import partial

import jax
import jax.numpy as jnp

from gpu_ops import autodiff, float8
from gpu_ops.implementations import IMPLEMENTATIONS, checked_operands, on_their_devices
from gpu_ops.primitives import rms_norm_from_fp8_fwd_p
from gpu_ops.validation import (check_float8_input, check_float8_input_weight,
                                 check_implementation)


def _from_primitive(values, weight, scales, eps):
    return rms_norm_from_fp8_fwd_p.bind(values, weight, scales, eps=eps)[0]


def _dequantising(defined):
    """`defined` (an implementation of rms_norm) of the float32 values that
    the float8 values and their scales stand for."""
    def of_float8(values, weight, scales, eps):
        return defined(float8.dequantize(values, scales), weight, eps)
    return of_float8


def _straight_through(defined):
    """`defined` of x32 quantised and read back by jnp, its gradient x32's."""
    def through(x32, weight, eps):
        return defined(float8.straight_through(x32), weight, eps)
    return through


#: By implementation: the norm of float8 values with their scales, and of
#: x quantised to them with y's gradient passed straight through to x.
FROM_FP8 = {"ffi": _from_primitive,
            **{name: _dequantising(IMPLEMENTATIONS[name]) for name in ("hijax", "pallas")}}
THROUGH_FP8_INPUT = {
    "ffi": autodiff.through_fp8_input,
    **{name: _straight_through(IMPLEMENTATIONS[name]) for name in ("hijax", "pallas")}}


@partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _forward_only(name, eps, values, weight, scales):
    return FROM_FP8[name](values, weight, scales, eps)


@_forward_only.defjvp
def _no_derivative(name, eps, primals, tangents):
    del name, eps, primals, tangents
    raise TypeError("rms_norm_from_fp8 has no derivative (its input is rounded to float8); "
                    "rms_norm_through_fp8_input takes x, quantises it and passes the "
                    "gradient straight through the quantisation to x")


def rms_norm_from_fp8(values, scales, weight, eps=1e-5, *, implementation="ffi"):
    """``rms_norm(x, weight, eps)`` of the x that float8 ``values`` and their
    ``scales`` stand for: ``values * scales`` per group of 128 values of a
    row (``gpu_ops.float8``: the layout :func:`gpu_ops.rms_norm_fp8`
    returns), computed in float32.

    ``values`` is float8_e4m3fn, ``scales`` float32 of shape
    ``(*values.shape[:-1], values.shape[-1] // 128)``, and the weight one
    axis of float16, bfloat16 or float32, a multiple of 128 long. Returns y
    in the weight's dtype. With the "ffi" implementation the kernel
    dequantises the values as it reads them. Forward only: for a gradient,
    :func:`rms_norm_through_fp8_input`. Works under ``jit``, ``vmap`` and
    sharding as ``rms_norm`` does.
    """
    values, scales, weight = jnp.asarray(values), jnp.asarray(scales), jnp.asarray(weight)
    eps = check_float8_input(values, scales, weight, eps, float8.GROUP)
    name = check_implementation(implementation, FROM_FP8, "rms_norm_from_fp8")

    def forward_only(values, weight, scales, eps):
        return _forward_only(name, eps, values, weight, scales)

    return on_their_devices(forward_only, (values, weight, scales), eps)


def rms_norm_through_fp8_input(x, weight, eps=1e-5, *, implementation="ffi"):
    """``rms_norm(x, weight, eps)`` of x as it reads after float8
    quantisation in groups of 128 values of a row (``gpu_ops.float8``): the
    norm of a float8 activation, as a float8 training step keeps it.

    jnp quantises x (XLA fuses that into whatever computes x); with the
    "ffi" implementation the kernels then read the float8 values and
    their scales, in the forward and in the backward, which keeps them
    instead of x. The gradient passes straight through the quantisation,
    the convention of float8 training: x's gradient is that of the
    dequantised x, in x's dtype. y has the weight's dtype, which must be
    float16, bfloat16 or float32; the weight is one axis, a multiple of 128
    long.
    """
    (x, weight), eps, name = checked_operands(x, weight, eps, None, implementation,
                                              THROUGH_FP8_INPUT, "rms_norm_through_fp8_input")
    check_float8_input_weight(weight, float8.GROUP, "rms_norm_through_fp8_input")

    def through(x, weight, eps):
        return THROUGH_FP8_INPUT[name](x.astype(jnp.float32), weight, eps)

    return on_their_devices(through, (x, weight), eps)
