"""Registers the native FFI handlers with XLA, once per platform."""

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
