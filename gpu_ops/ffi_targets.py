"""Registers the native FFI handlers with XLA, once per platform."""

import math

import jax

from gpu_ops import _native

FORWARD_TARGET = "gpu_ops_rms_norm_fwd"
BACKWARD_TARGET = "gpu_ops_rms_norm_bwd"

#: Whether the CUDA kernels were compiled into this build of gpu_ops.
CUDA_COMPILED: bool = _native.cuda_compiled

for _platform, _targets in _native.targets().items():
    for _name, _capsule in _targets.items():
        jax.ffi.register_ffi_target(_name, _capsule, platform=_platform)


def dweight_partial_rows(rows: int, row_length: int) -> int:
    """Height of the scratch matrix the CUDA backward sums the weight gradient in."""
    return _native.dweight_partial_rows(rows, row_length)


def dweight_partials_shape(x_shape, weight_shape):
    """Shape of that scratch matrix for x and weight of these shapes."""
    row_length = math.prod(weight_shape)
    rows = math.prod(x_shape) // row_length
    return (dweight_partial_rows(rows, row_length), row_length)
