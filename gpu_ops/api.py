"""The public entry point, :func:`rms_norm`."""

import jax.numpy as jnp

# Importing these registers the FFI targets, lowerings, vmap rules and
# partitioning rules of the primitives.
from functools import partial

import jax

from gpu_ops import batching, float8, hijax_route, lowering, sharding  # noqa: F401
from gpu_ops.autodiff import rms_norm_residual_vjp, rms_norm_through_fp8_vjp, rms_norm_vjp
from gpu_ops.primitives import rms_norm_fp8_fwd_p
from gpu_ops.sharding import over_explicit_axes, vary_alike
from gpu_ops.validation import (check_float8_weight, check_implementation, check_pallas_gpus,
                                check_residual, check_rms_norm_args)


def _with_pallas_kernels(x, weight, eps):
    check_pallas_gpus()
    return rms_norm_vjp(x, weight, eps, "pallas")


def _residual_with_pallas_kernels(x, weight, residual, eps):
    check_pallas_gpus()
    return rms_norm_residual_vjp(x, weight, residual, eps, "pallas")


def _residual_before_hijax(x, weight, residual, eps):
    total = x + residual
    return hijax_route.rms_norm(total, weight, eps), total


#: The ways the operation is defined, by name (chapter 9 compares them).
IMPLEMENTATIONS = {
    "primitives": rms_norm_vjp,  # explicit primitives with their rules
    "hijax": hijax_route.rms_norm,  # one jax.experimental.hijax class
    "pallas": _with_pallas_kernels,  # the primitives, lowered to Pallas kernels
}
#: The same with a residual add: one kernel pass through the FFI handlers;
#: the Pallas kernels normalise the sum XLA adds up, and the HiJAX class
#: takes it as its x.
WITH_RESIDUAL = {
    "primitives": rms_norm_residual_vjp,
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
      weight: array of one of those dtypes (it may differ from x's) whose shape
        equals the trailing shape of ``x``.
      eps: finite number >= 0 added to the mean square.
      residual: None, or an array of x's shape and dtype added to x first.
      implementation: "primitives" (explicit JAX primitives with their rules)
        or "hijax" (one ``jax.experimental.hijax`` class), which call the
        same C++ and CUDA kernels; or "pallas", the explicit primitives with
        kernels written in Pallas (Mosaic GPU on NVIDIA GPUs of sm_90 or
        newer, Pallas' interpret mode on CPUs).

    Returns:
      An array of ``x``'s shape and ``weight``'s dtype (with a residual, that
      and ``x + residual``, of x's shape and dtype). Works under ``jit``,
      ``grad``, ``vmap``, with inputs sharded over automatic or explicit mesh
      axes, and inside ``shard_map``; the CUDA kernels run on NVIDIA GPUs and
      a C++ implementation on CPUs.
    """
    x = jnp.asarray(x)
    weight = jnp.asarray(weight)
    eps = check_rms_norm_args(x, weight, eps)
    name = check_implementation(implementation, IMPLEMENTATIONS)
    operands = (x, weight)
    defined = IMPLEMENTATIONS[name]
    if residual is not None:
        operands = (x, weight, check_residual(x, residual))
        defined = WITH_RESIDUAL[name]

    def on_its_devices(*operands):
        return defined(*vary_alike(*operands), eps)

    return over_explicit_axes(on_its_devices, *operands)


def _checked(x, weight, eps, implementation, known):
    x, weight = jnp.asarray(x), jnp.asarray(weight)
    eps = check_rms_norm_args(x, weight, eps)
    check_float8_weight(weight, float8.GROUP)
    return x, weight, eps, check_implementation(implementation, known)


def _fp8_from_primitive(x, weight, eps):
    values, _, scales = rms_norm_fp8_fwd_p.bind(x, weight, eps=eps)
    return values, scales


def _fp8_after(defined):
    """y of `defined`, quantised by jnp (float8.quantize)."""
    return lambda x, weight, eps: float8.quantize(defined(x, weight, eps))


def _through_fp8_after(defined):
    """y of `defined`, quantised and dequantised by jnp, its gradient y's."""
    def through(x, weight, eps):
        y = defined(x, weight, eps)
        quantised = float8.dequantize(*float8.quantize(y), y.dtype)
        return y + jax.lax.stop_gradient(quantised - y)
    return through


#: The forward quantised to float8 in one kernel pass with the FFI handlers;
#: the HiJAX and Pallas routes quantise their y with jnp.
FP8 = {"primitives": _fp8_from_primitive,
       "hijax": _fp8_after(IMPLEMENTATIONS["hijax"]),
       "pallas": _fp8_after(_with_pallas_kernels)}
THROUGH_FP8 = {"primitives": rms_norm_through_fp8_vjp,
               "hijax": _through_fp8_after(IMPLEMENTATIONS["hijax"]),
               "pallas": _through_fp8_after(_with_pallas_kernels)}


@partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def _forward_only(x, weight, eps, name):
    return FP8[name](x, weight, eps)


@_forward_only.defjvp
def _no_derivative(eps, name, primals, tangents):
    del eps, name, primals, tangents
    raise TypeError("rms_norm_fp8 has no derivative (its float8 values are rounded); "
                    "rms_norm_through_fp8 passes y's gradient straight through the "
                    "quantisation")


def _on_devices(defined, x, weight, eps):
    def on_its_devices(x, weight):
        return defined(*vary_alike(x, weight), eps)
    return over_explicit_axes(on_its_devices, x, weight)


def rms_norm_fp8(x, weight, eps=1e-5, *, implementation="primitives"):
    """``rms_norm(x, weight, eps)`` quantised to float8_e4m3fn for the next
    matmul, in groups of 128 values of a row that share a float32 scale.

    Returns ``(values, scales)``: values of x's shape in float8_e4m3fn, and
    scales of shape ``(*x.shape[:-1], x.shape[-1] // 128)``, each its
    group's largest magnitude over 448 (``gpu_ops.float8`` has the layout and
    ``dequantize``). The weight must be one axis, a multiple of 128 long.
    With the "primitives" implementation y is quantised in the kernel, from
    float32, without being written out first. Forward only: for a gradient,
    :func:`rms_norm_through_fp8`. Works under ``jit``, ``vmap`` and sharding
    as ``rms_norm`` does.
    """
    x, weight, eps, name = _checked(x, weight, eps, implementation, FP8)
    return _on_devices(partial(_forward_only, name=name), x, weight, eps)


def rms_norm_through_fp8(x, weight, eps=1e-5, *, implementation="primitives"):
    """``rms_norm(x, weight, eps)`` as the next matmul sees it after float8
    quantisation: :func:`rms_norm_fp8`'s values times their scales, in the
    weight's dtype. Its gradient passes straight through the quantisation
    (that of y itself, the convention of float8 training).
    """
    x, weight, eps, name = _checked(x, weight, eps, implementation, THROUGH_FP8)
    return _on_devices(THROUGH_FP8[name], x, weight, eps)
