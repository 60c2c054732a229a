"""The public entry point, :func:`rms_norm`."""

import jax.numpy as jnp

# Importing these registers the FFI targets, lowerings, vmap rules and
# partitioning rules of the primitives.
from gpu_ops import batching, hijax_route, lowering, sharding  # noqa: F401
from gpu_ops.autodiff import rms_norm_vjp
from gpu_ops.sharding import over_explicit_axes, vary_alike
from gpu_ops.validation import check_implementation, check_pallas_gpus, check_rms_norm_args


def _with_pallas_kernels(x, weight, eps):
    check_pallas_gpus()
    return rms_norm_vjp(x, weight, eps, "pallas")


#: The ways the operation is defined, by name (chapter 9 compares them).
IMPLEMENTATIONS = {
    "primitives": rms_norm_vjp,  # explicit primitives with their rules
    "hijax": hijax_route.rms_norm,  # one jax.experimental.hijax class
    "pallas": _with_pallas_kernels,  # the primitives, lowered to Pallas kernels
}


def rms_norm(x, weight, eps=1e-5, *, implementation="primitives"):
    """RMS-normalise ``x`` over its trailing ``weight.ndim`` axes and scale by ``weight``.

    ``y = x / sqrt(mean(x**2 over those axes) + eps) * weight``

    Args:
      x: array of float16, bfloat16, float32 or float64.
      weight: array of one of those dtypes (it may differ from x's) whose shape
        equals the trailing shape of ``x``.
      eps: finite number >= 0 added to the mean square.
      implementation: "primitives" (explicit JAX primitives with their rules)
        or "hijax" (one ``jax.experimental.hijax`` class), which call the
        same C++ and CUDA kernels; or "pallas", the explicit primitives with
        kernels written in Pallas (Mosaic GPU on NVIDIA GPUs of sm_90 or
        newer, Pallas' interpret mode on CPUs).

    Returns:
      An array of ``x``'s shape and ``weight``'s dtype. Works under ``jit``,
      ``grad``, ``vmap``, with inputs sharded over automatic or explicit mesh
      axes, and inside ``shard_map``; the CUDA kernels run on NVIDIA GPUs and
      a C++ implementation on CPUs.
    """
    x = jnp.asarray(x)
    weight = jnp.asarray(weight)
    eps = check_rms_norm_args(x, weight, eps)
    defined = IMPLEMENTATIONS[check_implementation(implementation, IMPLEMENTATIONS)]

    def on_its_devices(x, weight):
        return defined(*vary_alike(x, weight), eps)

    return over_explicit_axes(on_its_devices, x, weight)
