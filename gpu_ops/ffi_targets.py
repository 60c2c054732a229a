"""Registers the native FFI handlers with XLA, once per platform."""

import math
import pathlib
import re

import jax
import jaxlib
import numpy as np

from gpu_ops import _native
from gpu_ops.primitives import inv_rms_dtype

# The targets' names are written once, in the list of csrc/ffi/ffi_targets.h;
# here each is looked up by the name of its handlers there.
_NAMES = _native.target_names()
FORWARD_TARGET = _NAMES["Forward"]
FP8_FORWARD_TARGET = _NAMES["QuantisedForward"]
BACKWARD_TARGET = _NAMES["Backward"]
FROM_FP8_FORWARD_TARGET = _NAMES["FromFloat8Forward"]
FROM_FP8_BACKWARD_TARGET = _NAMES["FromFloat8Backward"]

#: Whether the CUDA kernels were compiled into this build of gpu_ops.
CUDA_COMPILED: bool = _native.cuda_compiled


def installed_ffi_api_version():
    """(major, minor) of the installed jaxlib's XLA FFI API, from the C header it
    ships (the one its XLA was built with); None where the header is missing."""
    header = pathlib.Path(jax.ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h"
    if not header.is_file():
        return None
    text = header.read_text()
    found = [re.search(rf"#define XLA_FFI_API_{part} (\d+)", text) for part in ("MAJOR", "MINOR")]
    return tuple(int(m.group(1)) for m in found) if all(found) else None


def check_ffi_api_version(built, installed):
    """ImportError if handlers built against FFI API `built` would be refused.

    XLA accepts handlers of its own FFI API version or older. A newer one,
    registered before the backend starts, fails the backend's start (the
    process's first computation); registered after, the registration. Each
    call then fails with "No FFI handler registered", which names no cause.
    """
    if installed is None or tuple(built) <= tuple(installed):
        return
    raise ImportError(
        f"gpu_ops was compiled against XLA FFI API {built[0]}.{built[1]}, which this "
        f"jaxlib ({jaxlib.__version__}, FFI API {installed[0]}.{installed[1]}) does not "
        "accept. Rebuild gpu_ops against it (./build.sh --no-venv, or pip install "
        "--no-build-isolation .), or install the jax and jaxlib of requirements.txt.")


check_ffi_api_version(tuple(_native.ffi_api_version), installed_ffi_api_version())

for _platform, _targets in _native.targets().items():
    for _name, _capsule in _targets.items():
        jax.ffi.register_ffi_target(_name, _capsule, platform=_platform)


def dweight_partial_rows(rows, row_length: int):
    """Height of the scratch matrix the CUDA backward sums the weight gradient in.

    The rule of ``DweightPartialRows`` (cuda_scratch.h), written with
    ``jax.core.min_dim``/``max_dim`` so that `rows` may be symbolic, as it is
    in a function exported for any batch size.
    """
    cap = _native.dweight_partial_rows_cap(row_length)
    return jax.core.max_dim(jax.core.min_dim(cap, rows // 2), 1)


def _rows_and_length(x_shape, weight_shape):
    lead = len(x_shape) - len(weight_shape)
    return math.prod(x_shape[:lead]), math.prod(weight_shape)


def cuda_backward_scratch(x_shape, x_dtype, weight_shape):
    """(shape, dtype) of the scratch result the CUDA backward call adds: the
    weight gradient's partial sums, in x's accumulation dtype."""
    rows, row_length = _rows_and_length(x_shape, weight_shape)
    partials = (dweight_partial_rows(rows, row_length), row_length)
    return [(partials, inv_rms_dtype(x_dtype))]


def cuda_from_fp8_backward_scratch(values_shape, weight_shape):
    """(shape, dtype) of the scratch result the CUDA backward of a float8
    input adds: the weight gradient's partial sums, in float32."""
    rows, row_length = _rows_and_length(values_shape, weight_shape)
    return [((dweight_partial_rows(rows, row_length), row_length), np.float32)]
