"""Registers the native FFI handlers with XLA, once per platform."""

import math

import jax
import numpy as np

from gpu_ops import _native
from gpu_ops.primitives import inv_rms_dtype

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


def _rows_and_length(x_shape, weight_shape):
    row_length = math.prod(weight_shape)
    return math.prod(x_shape) // row_length, row_length


def cuda_forward_scratch(x_shape, weight_shape):
    """(shape, dtype) of each scratch result the CUDA forward call adds.

    The split-row kernels' chunk sums: float32, empty for rows they do not take.
    """
    rows, row_length = _rows_and_length(x_shape, weight_shape)
    return [((_native.chunk_sums_length(rows, row_length),), np.float32)]


def cuda_backward_scratch(x_shape, x_dtype, weight_shape):
    """(shape, dtype) of each scratch result the CUDA backward call adds.

    The weight gradient's partial sums, then the split-row kernels' chunk sums.
    """
    rows, row_length = _rows_and_length(x_shape, weight_shape)
    partials = (dweight_partial_rows(rows, row_length), row_length)
    return [(partials, inv_rms_dtype(x_dtype)), *cuda_forward_scratch(x_shape, weight_shape)]
