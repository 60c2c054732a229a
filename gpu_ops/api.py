"""The public entry point, :func:`rms_norm` (quantised.py has the float8 ones)."""

import jax.numpy as jnp

# Importing these registers the FFI targets, lowerings, vmap rules and
# partitioning rules of the primitives.
from gpu_ops import batching, hijax_route, lowering, sharding  # noqa: F401
from gpu_ops import autodiff
from gpu_ops.sharding import over_explicit_axes, vary_alike
from gpu_ops.validation import (check_implementation, check_pallas_gpus, check_residual,
                                check_rms_norm_args)


def _with_pallas_kernels(x, weight, eps):
    check_pallas_gpus()
    return autodiff.rms_norm(x, weight, eps, "pallas")


def _residual_with_pallas_kernels(x, weight, residual, eps):
    check_pallas_gpus()
    return autodiff.rms_norm_residual(x, weight, residual, eps, "pallas")


def _residual_before_hijax(x, weight, residual, eps):
    total = x + residual
    return hijax_route.rms_norm(total, weight, eps), total


#: The ways the operation is defined, by name (chapter 11 compares them).
IMPLEMENTATIONS = {
    "primitives": autodiff.rms_norm,  # explicit primitives with their rules
    "hijax": hijax_route.rms_norm,  # one jax.experimental.hijax class
    "pallas": _with_pallas_kernels,  # the primitives, lowered to Pallas kernels
}
#: The same with a residual add: one kernel pass through the FFI handlers;
#: the Pallas kernels normalise the sum XLA adds up, and the HiJAX class
#: takes it as its x.
WITH_RESIDUAL = {
    "primitives": autodiff.rms_norm_residual,
    "hijax": _residual_before_hijax,
    "pallas": _residual_with_pallas_kernels,
}


def rms_norm(x, weight, eps=1e-5, *, residual=None, implementation="primitives"):
    """RMS-normalise ``x`` over its trailing ``weight.ndim`` axes and scale by ``weight``.

    ``y = x / sqrt(mean(x**2 over those axes) + eps) * weight``

    With ``residual``, the residual stream of a transformer block: returns
    ``(rms_norm(x + residual, weight, eps), x + residual)``, the sum rounded
    to x's dtype, both from one pass of the CUDA or C++ kernel (with the
    "hijax" and "pallas" implementations XLA adds the sum first).

    Args:
      x: array of float16, bfloat16, float32 or float64.
      weight: array of one of those dtypes whose shape equals the trailing
        shape of ``x``. It may differ from x's dtype: on a GPU, float16 or
        bfloat16 x with a float32 weight runs the fast CUDA kernels on the
        rows of models (up to 16,384 values), as one dtype does; other
        pairs, float64 and rows too long for the fast kernels run the
        general ones, slower.
      eps: finite number >= 0 added to the mean square.
      residual: None, or an array of x's shape and dtype added to x first.
      implementation: "primitives" (explicit JAX primitives with their rules)
        or "hijax" (one ``jax.experimental.hijax`` class), which call the
        same C++ and CUDA kernels; or "pallas", the explicit primitives with
        kernels written in Pallas (Mosaic GPU on NVIDIA GPUs of sm_90 or
        newer, Pallas' interpret mode on CPUs). A Pallas kernel's grid is
        its number of rows, so "pallas" needs concrete shapes: exporting it
        with a symbolic dimension of x raises NotImplementedError.

    Returns:
      An array of ``x``'s shape and ``weight``'s dtype (with a residual, that
      and ``x + residual``, of x's shape and dtype). Works under ``jit``,
      ``grad`` and forward mode (``jvp``, ``jacfwd``, ``linearize``),
      ``vmap``, with inputs sharded over automatic or explicit mesh
      axes, and inside ``shard_map``; the CUDA kernels run on NVIDIA GPUs and
      a C++ implementation on CPUs.
    """
    operands, eps, name = checked_operands(x, weight, eps, residual, implementation,
                                           IMPLEMENTATIONS, "rms_norm")
    defined = IMPLEMENTATIONS[name] if residual is None else WITH_RESIDUAL[name]
    return on_their_devices(defined, operands, eps)


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


def on_their_devices(defined, operands, eps):
    """defined(*operands, eps), per device where the operands' types shard
    them, each varying along the mesh axes the others vary along."""
    def on_its_devices(*operands):
        return defined(*vary_alike(*operands), eps)
    return over_explicit_axes(on_its_devices, *operands)

