"""The implementations a public function can take, by name, and the steps
every public function (api.py, quantised.py, from_fp8.py) shares: its
operands checked, then the implementation run on their devices."""

import jax.numpy as jnp

# Importing these registers the FFI targets, lowerings, vmap rules,
# partitioning rules and second-order rules of the primitives.
from gpu_ops import batching, higher_order, hijax_route, lowering, sharding  # noqa: F401
from gpu_ops import autodiff
from gpu_ops.sharding import over_explicit_axes, vary_alike
from gpu_ops.validation import (check_implementation, check_pallas_gpus, check_residual,
                                check_rms_norm_args)


def _with_ffi_kernels(x, weight, eps, out_dtype=None):
    return autodiff.rms_norm(x, weight, eps, "ffi", out_dtype)


def _with_pallas_kernels(x, weight, eps, out_dtype=None):
    check_pallas_gpus()
    return autodiff.rms_norm(x, weight, eps, "pallas", out_dtype)


def _residual_with_ffi_kernels(x, weight, residual, eps, out_dtype=None):
    return autodiff.rms_norm_residual(x, weight, residual, eps, "ffi", out_dtype)


def _residual_with_pallas_kernels(x, weight, residual, eps, out_dtype=None):
    check_pallas_gpus()
    return autodiff.rms_norm_residual(x, weight, residual, eps, "pallas", out_dtype)


def _residual_before_hijax(x, weight, residual, eps, out_dtype=None):
    total = x + residual
    return hijax_route.rms_norm(total, weight, eps, out_dtype), total


#: The ways the operation is defined, by name (chapter 11 compares them):
#: each a function of (x, weight, eps, out_dtype=None). "ffi" and "pallas"
#: are also the names of what the primitives lower to (their parameter
#: kernels), so that a route has one name from the public call to the lowering.
IMPLEMENTATIONS = {
    "ffi": _with_ffi_kernels,  # explicit primitives, lowered to the FFI kernels
    "hijax": hijax_route.rms_norm,  # one jax.experimental.hijax class
    "pallas": _with_pallas_kernels,  # the primitives, lowered to Pallas kernels
}
#: The same with a residual add: one kernel pass through the FFI handlers;
#: the Pallas kernels normalise the sum XLA adds up, and the HiJAX class
#: takes it as its x.
WITH_RESIDUAL = {
    "ffi": _residual_with_ffi_kernels,
    "hijax": _residual_before_hijax,
    "pallas": _residual_with_pallas_kernels,
}


def checked_operands(x, weight, eps, residual, implementation, known, function):
    """(operands, eps, name): x, the weight and the residual if there is one,
    as arrays, eps as a float and the implementation's name, each checked
    (errors name `function`, the public function called)."""
    x, weight = jnp.asarray(x), jnp.asarray(weight)
    eps = check_rms_norm_args(x, weight, eps, function)
    name = check_implementation(implementation, known, function)
    if residual is None:
        return (x, weight), eps, name
    return (x, weight, check_residual(x, residual, function)), eps, name


def on_their_devices(defined, operands, *static):
    """defined(*operands, *static) (eps, and for rms_norm out_dtype), per
    device where the operands' types shard them, each varying along the mesh
    axes the others vary along."""
    def on_its_devices(*operands):
        return defined(*vary_alike(*operands), *static)
    return over_explicit_axes(on_its_devices, *operands)

